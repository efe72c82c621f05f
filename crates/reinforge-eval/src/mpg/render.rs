//! MPG reports as text: the markdown and csv tables of `reinforge mpg` (JSON is the report's
//! serde form).

use super::compare::ArenaComparison;
use super::{Estimate, FastnessSource, MpgReport};

/// `value (lower – upper)` at `digits` decimals.
fn cell(e: &Estimate, digits: usize) -> String {
    format!(
        "{:.d$} ({:.d$} – {:.d$})",
        e.value,
        e.lower,
        e.upper,
        d = digits
    )
}

/// The report (and the arena comparison) as a markdown table with intervals.
pub fn markdown(r: &MpgReport, cmp: Option<&ArenaComparison>) -> String {
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

/// The report as csv: one row per model and scope (overall, then each category).
pub fn csv(r: &MpgReport) -> String {
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
