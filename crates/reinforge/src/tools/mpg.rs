//! `reinforge mpg`: Project MPG's Goodness and Fastness from a table of benchmark results, and
//! their agreement with an arena leaderboard.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_eval::mpg::compare::{compare, ArenaComparison};
use reinforge_eval::mpg::table::{read_arena, read_categories, read_results};
use reinforge_eval::mpg::{score, Estimate, FastnessSource, MpgOptions, MpgReport, Weighting};

use super::{count, emit, level, positive, ByName, Format};

/// `--prior A,B`: a Beta prior with both parameters > 0.
fn prior(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("expected A,B (e.g. 1,1), got {s:?}"))?;
    Ok((positive(a)?, positive(b)?))
}

/// Project MPG (Spangher et al. 2024, arXiv 2410.22368): aggregates per-model, per-benchmark results
/// into a "Goodness" (accuracy) and a "Fastness" (QPS or cost) per category of benchmarks and
/// overall, with intervals; with --arena, Pearson and Spearman correlations of Goodness with an arena
/// leaderboard, with bootstrap intervals.
///
/// Input rows (csv with a header, or jsonl): model, benchmark, questions, and correct or accuracy
/// (a fraction); optional category, qps, cost. Categories come from the category column or
/// --categories (csv benchmark,category or a JSON object). Each benchmark's accuracy is a Beta
/// posterior; Goodness is read from posterior samples. docs/arena.md says which parts are the paper's
/// and which are options of this implementation.
#[derive(Debug, Clone, Args)]
pub struct MpgArgs {
    /// Results table (.csv, else jsonl).
    #[arg(long, short)]
    pub input: PathBuf,
    /// Benchmark -> category mapping (.csv with benchmark,category, else a JSON object); without it
    /// every row needs a `category`.
    #[arg(long)]
    pub categories: Option<PathBuf>,
    /// Arena leaderboard to compare with (.csv or .json from `reinforge rank`, or jsonl; columns
    /// model and rating).
    #[arg(long)]
    pub arena: Option<PathBuf>,
    /// Beta prior A,B of every benchmark's accuracy.
    #[arg(long, default_value = "1,1", value_parser = prior)]
    pub prior: (f64, f64),
    /// Weights of benchmarks within a category: equal, or size (by number of questions).
    #[arg(long, value_parser = ByName(&Weighting::ALL), default_value = "equal")]
    pub benchmark_weight: Weighting,
    /// Weights of categories overall: equal, or size (by number of benchmarks).
    #[arg(long, value_parser = ByName(&Weighting::ALL), default_value = "equal")]
    pub category_weight: Weighting,
    /// Fastness column: qps or cost (default: qps when every row has it, else cost, else none).
    #[arg(long, value_parser = ByName(&FastnessSource::ALL))]
    pub fastness: Option<FastnessSource>,
    /// Posterior samples per benchmark.
    #[arg(long, default_value_t = 4000, value_parser = count)]
    pub draws: usize,
    /// Bootstrap rounds (Fastness intervals, correlations).
    #[arg(long, default_value_t = 2000, value_parser = count)]
    pub rounds: usize,
    /// Central interval level, between 0 and 1.
    #[arg(long, default_value_t = 0.95, value_parser = level)]
    pub level: f64,
    /// Seed of the samples and bootstraps.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

fn cell(e: &Estimate, digits: usize) -> String {
    format!(
        "{:.d$} ({:.d$} – {:.d$})",
        e.value,
        e.lower,
        e.upper,
        d = digits
    )
}

fn markdown(r: &MpgReport, cmp: Option<&ArenaComparison>) -> String {
    let pct = (r.level * 100.0).round();
    let mut s = format!("| Model | Goodness ({pct}% interval) |");
    let mut sep = String::from("|---|---|");
    for c in &r.categories {
        s += &format!(" {} |", c.replace('|', "\\|"));
        sep += "---|";
    }
    if let Some(f) = r.fastness_source {
        let name = match f {
            FastnessSource::Qps => "Fastness (QPS)",
            FastnessSource::Cost => "Fastness (cost, lower is cheaper)",
        };
        s += &format!(" {name} |");
        sep += "---|";
    }
    s += &format!("\n{sep}\n");
    for m in &r.models {
        s += &format!(
            "| {} | {} |",
            m.model.replace('|', "\\|"),
            cell(&m.goodness, 3)
        );
        for c in &m.category_goodness {
            s += &format!(" {} |", cell(c, 3));
        }
        if let Some(f) = &m.fastness {
            s += &format!(" {} |", cell(f, 3));
        }
        s.push('\n');
    }
    s += "\nCategories: ";
    s += &r
        .categories
        .iter()
        .zip(&r.benchmarks)
        .map(|(c, b)| format!("{c} ({})", b.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    s.push('\n');
    if let Some(c) = cmp {
        s += &format!(
            "\nAgreement with the arena leaderboard ({} models in both):\n\n| Goodness | Pearson ({pct}% interval) | Spearman ({pct}% interval) |\n|---|---|---|\n",
            c.models.len()
        );
        for k in &c.correlations {
            s += &format!(
                "| {} | {} | {} |\n",
                k.scope,
                cell(&k.pearson, 3),
                cell(&k.spearman, 3)
            );
        }
        if !c.missing_from_arena.is_empty() {
            s += &format!(
                "\nNot in the arena leaderboard: {}\n",
                c.missing_from_arena.join(", ")
            );
        }
    }
    s
}

fn csv(r: &MpgReport) -> String {
    let mut s = String::from("model,scope,goodness,goodness_lower,goodness_upper,fastness,fastness_lower,fastness_upper\n");
    let q = |x: &str| {
        if x.contains([',', '"', '\n']) {
            format!("\"{}\"", x.replace('"', "\"\""))
        } else {
            x.to_string()
        }
    };
    let f = |e: Option<&Estimate>| {
        e.map_or(",,".to_string(), |e| {
            format!("{},{},{}", e.value, e.lower, e.upper)
        })
    };
    for m in &r.models {
        s += &format!(
            "{},overall,{},{},{},{}\n",
            q(&m.model),
            m.goodness.value,
            m.goodness.lower,
            m.goodness.upper,
            f(m.fastness.as_ref())
        );
        for (i, c) in r.categories.iter().enumerate() {
            let g = &m.category_goodness[i];
            let fc = m.category_fastness.as_ref().map(|v| &v[i]);
            s += &format!(
                "{},{},{},{},{},{}\n",
                q(&m.model),
                q(c),
                g.value,
                g.lower,
                g.upper,
                f(fc)
            );
        }
    }
    s
}

/// Runs `mpg`.
pub fn run(args: &MpgArgs) -> Result<()> {
    let rows = read_results(&args.input)?;
    let cats = match &args.categories {
        Some(p) => Some((read_categories(p)?, p.display().to_string())),
        None => None,
    };
    let o = MpgOptions {
        prior: args.prior,
        benchmark_weight: args.benchmark_weight,
        category_weight: args.category_weight,
        draws: args.draws,
        level: args.level,
        seed: args.seed,
        fastness: args.fastness,
        rounds: args.rounds,
    };
    let report = score(
        &rows,
        cats.as_ref().map(|(m, f)| (m, f.as_str())),
        &args.input.display().to_string(),
        &o,
    )?;
    let cmp = match &args.arena {
        Some(p) => Some(compare(
            &report,
            &read_arena(p)?,
            args.rounds,
            args.level,
            args.seed,
        )?),
        None => None,
    };
    let text = match args.format {
        Format::Markdown => markdown(&report, cmp.as_ref()),
        Format::Csv => csv(&report),
        Format::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"mpg": report, "arena": cmp}))? + "\n"
        }
    };
    emit(args.output.as_deref(), &text)
}
