//! `reinforge verify --probe FILE`: stress a verifier (or, through the `reinforge` binary's
//! `--reward SPEC`, a whole reward spec) with the canaries of a labelled set, completions wrong
//! by construction ([`crate::canary`]). Any credited canary is a way a policy could game it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::canary::{canaries, Canary, CanaryKind};
use crate::{verify, Options};

/// One labelled row of the probed set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    #[serde(default)]
    id: Option<serde_json::Value>,
    prompt: String,
    gold: String,
    #[serde(default)]
    options: Option<Options>,
}

/// A canary of one labelled row.
#[derive(Debug, Clone)]
pub struct ProbeCase {
    pub id: serde_json::Value,
    pub prompt: String,
    pub gold: String,
    pub options: Option<Options>,
    pub canary: Canary,
}

/// One output line: the canary and whether it was credited.
#[derive(Debug, Serialize, Deserialize)]
pub struct ProbeLine {
    pub id: serde_json::Value,
    pub kind: CanaryKind,
    pub response: String,
    pub credited: bool,
}

/// Credited and scored canaries per kind.
pub type KindCounts = BTreeMap<CanaryKind, (usize, usize)>;

/// The canaries of every row of `path`; the next row's gold is each row's `other_answer`.
/// A malformed row is an error naming the file and line (other fields of a labelled set, such
/// as `pred` or `expected`, are read and ignored).
pub fn cases(path: &Path) -> Result<Vec<ProbeCase>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut rows = vec![];
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}: reading line {}", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: not JSON", path.display(), n + 1))?;
        let row = labelled(value).with_context(|| format!("{} line {}", path.display(), n + 1))?;
        rows.push((n + 1, row));
    }
    if rows.is_empty() {
        bail!("{}: no labelled rows", path.display());
    }
    let mut out = vec![];
    for (k, (line, row)) in rows.iter().enumerate() {
        let other = rows.get((k + 1) % rows.len()).map(|r| r.1.gold.as_str());
        let other = other.filter(|_| rows.len() > 1);
        for canary in canaries(&row.prompt, &row.gold, other) {
            out.push(ProbeCase {
                id: row.id.clone().unwrap_or_else(|| (*line).into()),
                prompt: row.prompt.clone(),
                gold: row.gold.clone(),
                options: row.options.clone(),
                canary,
            });
        }
    }
    Ok(out)
}

/// The row's `id`, `prompt`, `gold` and `options`, other keys dropped.
fn labelled(mut value: serde_json::Value) -> Result<Row> {
    let Some(map) = value.as_object_mut() else {
        bail!("not a JSON object");
    };
    map.retain(|k, _| matches!(k.as_str(), "id" | "prompt" | "gold" | "options"));
    serde_json::from_value(value).context("needs string fields `prompt` and `gold`")
}

/// The verifier's verdict on each canary (a row's `options`, else `default`).
pub fn verifier_credits(cases: &[ProbeCase], default: &Options) -> Vec<bool> {
    cases
        .iter()
        .map(|c| {
            let opts = c.options.as_ref().unwrap_or(default);
            verify(&c.gold, &c.canary.response, opts).correct()
        })
        .collect()
}

/// Writes one [`ProbeLine`] per canary to `out`; returns the counts per kind.
pub fn write(cases: &[ProbeCase], credited: &[bool], out: &mut dyn Write) -> Result<KindCounts> {
    let mut counts = KindCounts::new();
    for (c, &hit) in cases.iter().zip(credited) {
        let line = ProbeLine {
            id: c.id.clone(),
            kind: c.canary.kind,
            response: c.canary.response.clone(),
            credited: hit,
        };
        writeln!(out, "{}", serde_json::to_string(&line)?)?;
        let e = counts.entry(c.canary.kind).or_default();
        e.0 += usize::from(hit);
        e.1 += 1;
    }
    out.flush()?;
    Ok(counts)
}

/// The per-kind lines of the stderr summary, and a verdict.
pub fn summary(counts: &KindCounts) -> String {
    let mut s = String::from("canaries credited (a sound reward credits none):\n");
    for (kind, (hit, n)) in counts {
        s.push_str(&format!("  {:<17} {hit} of {n}\n", kind.name()));
    }
    let hits: usize = counts.values().map(|c| c.0).sum();
    s.push_str(&if hits == 0 {
        "no canary credited\n".to_string()
    } else {
        format!("{hits} canaries credited: see `credited: true` in the output\n")
    });
    s
}
