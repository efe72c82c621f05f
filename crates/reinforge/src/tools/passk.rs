//! `reinforge passk`: pass@k and maj@k curves with bootstrap intervals.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use reinforge_eval::samples;

use super::{count_u64, emit, level, Format};

/// pass@k and maj@k curves (k = 1, 2, 4, ...) with bootstrap intervals over problems.
///
/// Input lines carry "problem" (string or number) plus one of: "n" and "c" (sample and correct counts);
/// "correct" (one sample, optional "answer" for maj@k); or "verdicts" (all samples, optional parallel
/// "answers"). pass@k is Chen et al.'s unbiased estimator in its stable product form; maj@k is exact
/// (majority answer among k samples drawn without replacement, ties split evenly) and is reported only
/// when every problem has answers.
#[derive(Debug, Clone, Args)]
pub struct PassKArgs {
    /// Samples JSONL file.
    #[arg(long, short)]
    pub input: PathBuf,
    /// k values, each at least 1 (comma separated); default 1, 2, 4, ... up to the smallest n.
    #[arg(long, value_delimiter = ',', value_parser = count_u64)]
    pub k: Vec<u64>,
    /// Bootstrap rounds over problems, at least 1.
    #[arg(long, default_value_t = 2000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub rounds: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Central interval level, between 0 and 1.
    #[arg(long, default_value_t = 0.95, value_parser = level)]
    pub level: f64,
    /// Table format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the table here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Also write a PNG of the curves (log2 k axis) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs `passk`.
pub fn run(args: &PassKArgs) -> Result<()> {
    let f = std::fs::File::open(&args.input)
        .with_context(|| format!("opening {}", args.input.display()))?;
    let problems = samples::parse_samples(
        std::io::BufReader::new(f),
        &args.input.display().to_string(),
    )?;
    if problems.is_empty() {
        bail!("{}: no problems", args.input.display());
    }
    let ks = if args.k.is_empty() {
        samples::default_ks(&problems)
    } else {
        args.k.clone()
    };
    let pass =
        samples::pass_table(&problems, &ks).with_context(|| format!("{}", args.input.display()))?;
    let pass_curve = samples::mean_with_intervals(&pass, &ks, args.rounds, args.seed, args.level);
    let maj_curve = if problems.iter().all(|p| !p.answers.is_empty()) {
        let t: Vec<Vec<f64>> = problems
            .iter()
            .map(|p| {
                ks.iter()
                    .map(|&k| samples::maj_at_k(p, k).unwrap_or(f64::NAN))
                    .collect()
            })
            .collect();
        Some(samples::mean_with_intervals(
            &t,
            &ks,
            args.rounds,
            args.seed ^ 0x6d616a,
            args.level,
        ))
    } else {
        None
    };
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&serde_json::json!({
            "problems": problems.len(), "level": args.level, "rounds": args.rounds,
            "pass_at_k": pass_curve, "maj_at_k": maj_curve,
        }))?,
        Format::Csv => {
            let mut s = String::from("metric,k,value,lower,upper\n");
            for (name, c) in [("pass", Some(&pass_curve)), ("maj", maj_curve.as_ref())] {
                for p in c.into_iter().flatten() {
                    s += &format!("{name}@k,{},{},{},{}\n", p.k, p.value, p.lower, p.upper);
                }
            }
            s
        }
        Format::Markdown => {
            let pct = (args.level * 100.0).round();
            let mut s = format!("{} problems; {pct}% bootstrap intervals over problems ({} rounds)\n\n| k | pass@k | interval |", problems.len(), args.rounds);
            s += if maj_curve.is_some() {
                " maj@k | interval |\n|---:|---:|---|---:|---|\n"
            } else {
                "\n|---:|---:|---|\n"
            };
            for (i, p) in pass_curve.iter().enumerate() {
                s += &format!(
                    "| {} | {:.4} | {:.4} – {:.4} |",
                    p.k, p.value, p.lower, p.upper
                );
                if let Some(m) = &maj_curve {
                    s += &format!(
                        " {:.4} | {:.4} – {:.4} |",
                        m[i].value, m[i].lower, m[i].upper
                    );
                }
                s += "\n";
            }
            s
        }
    };
    emit(args.output.as_deref(), &text)?;
    if let Some(p) = &args.plot {
        let to_series = |name: &str, c: &[samples::CurvePoint]| reinforge_plot::IntervalSeries {
            name: name.to_string(),
            points: c
                .iter()
                .map(|q| (q.k as f64, q.value, q.lower, q.upper))
                .collect(),
        };
        let mut series = vec![to_series("pass@k", &pass_curve)];
        if let Some(m) = &maj_curve {
            series.push(to_series("maj@k", m));
        }
        reinforge_plot::line_chart_with_intervals(
            p,
            &format!("pass@k over {} problems", problems.len()),
            "k",
            "score",
            &series,
            true,
        )?;
    }
    Ok(())
}
