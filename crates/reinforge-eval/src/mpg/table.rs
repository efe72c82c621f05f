//! The inputs of `mpg`: a results table (csv with a header row, or jsonl), an optional category
//! mapping (csv `benchmark,category`, or json `{benchmark: category}`) and an optional arena
//! leaderboard (csv or json with `model` and `rating`, e.g. `reinforge rank --format csv|json`).
//! Errors name the file, the line (csv/jsonl) and the field.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One row of the results table: one model on one benchmark.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResultRow {
    /// Model name.
    pub model: String,
    /// Benchmark name.
    pub benchmark: String,
    /// Questions answered correctly (give this or `accuracy`).
    #[serde(default)]
    pub correct: Option<f64>,
    /// Fraction answered correctly, in [0, 1] (give this or `correct`).
    #[serde(default)]
    pub accuracy: Option<f64>,
    /// Number of questions (> 0).
    pub questions: f64,
    /// Category of the benchmark (or give a category file).
    #[serde(default)]
    pub category: Option<String>,
    /// Queries per second (optional).
    #[serde(default)]
    pub qps: Option<f64>,
    /// Cost per question (optional).
    #[serde(default)]
    pub cost: Option<f64>,
}

impl ResultRow {
    /// Correct answers, from `correct` or `accuracy * questions`, checked.
    pub fn correct(&self) -> Result<f64> {
        let q = self.questions;
        if !(q.is_finite() && q > 0.0) {
            bail!("field `questions`: must be a number > 0, got {q}");
        }
        let c = match (self.correct, self.accuracy) {
            (Some(c), None) => c,
            (None, Some(a)) => {
                if !(0.0..=1.0).contains(&a) {
                    bail!("field `accuracy`: must be in [0, 1] (a fraction, not a percentage), got {a}");
                }
                a * q
            }
            (Some(_), Some(_)) => bail!("fields `correct` and `accuracy`: give one, not both"),
            (None, None) => bail!("fields `correct` / `accuracy`: missing (give one)"),
        };
        if !(c.is_finite() && (0.0..=q).contains(&c)) {
            bail!("field `correct`: must be between 0 and `questions` ({q}), got {c}");
        }
        Ok(c)
    }
}

/// True for a `.csv` path (anything else is read as JSON lines / JSON).
fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// Reads rows of type `T` from csv (header row; line numbers are the file's) or jsonl.
fn read_rows<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<(T, usize)>> {
    let name = path.display();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    let mut out = vec![];
    if is_csv(path) {
        let mut r = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let headers = r
            .headers()
            .with_context(|| format!("{name}:1: header row"))?
            .clone();
        for rec in r.records() {
            let rec = rec.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            let line = rec.position().map_or(0, |p| p.line() as usize);
            // (An empty cell of an optional column reads as absent.)
            let row: T = rec
                .deserialize(Some(&headers))
                .map_err(|e| anyhow::anyhow!("{name}:{line}: {e}"))?;
            out.push((row, line));
        }
    } else {
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let row: T =
                serde_json::from_str(l).map_err(|e| anyhow::anyhow!("{name}:{}: {e}", i + 1))?;
            out.push((row, i + 1));
        }
    }
    if out.is_empty() {
        bail!("{name}: no rows");
    }
    Ok(out)
}

/// The results table, each row with its file line.
pub fn read_results(path: &Path) -> Result<Vec<(ResultRow, usize)>> {
    let rows = read_rows::<ResultRow>(path)?;
    for (r, line) in &rows {
        r.correct()
            .map_err(|e| anyhow::anyhow!("{}:{line}: {e}", path.display()))?;
        for (f, v) in [("qps", r.qps), ("cost", r.cost)] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    bail!(
                        "{}:{line}: field `{f}`: must be a number >= 0, got {v}",
                        path.display()
                    );
                }
            }
        }
    }
    Ok(rows)
}

#[derive(Deserialize)]
struct MapRow {
    benchmark: String,
    category: String,
}

/// A category file: csv `benchmark,category` rows or a json object `{benchmark: category}`.
pub fn read_categories(path: &Path) -> Result<BTreeMap<String, String>> {
    let name = path.display();
    let mut out = BTreeMap::new();
    let mut add = |b: String, c: String, at: String| -> Result<()> {
        if b.is_empty() || c.is_empty() {
            bail!("{at}: empty benchmark or category name");
        }
        if let Some(old) = out.insert(b.clone(), c.clone()) {
            if old != c {
                bail!("{at}: benchmark {b:?} mapped to {old:?} and to {c:?}");
            }
        }
        Ok(())
    };
    if is_csv(path) {
        for (r, line) in read_rows::<MapRow>(path)? {
            add(r.benchmark, r.category, format!("{name}:{line}"))?;
        }
    } else {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        let m: BTreeMap<String, String> = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("{name}: expected a JSON object {{\"benchmark\": \"category\"}}: {e}")
        })?;
        for (b, c) in m {
            add(b, c, name.to_string())?;
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
struct ArenaRow {
    model: String,
    rating: f64,
}

/// An arena leaderboard: model -> rating. Reads `reinforge rank --format csv` (columns `model`,
/// `rating`, others ignored), jsonl rows, or `rank --format json` (an object with `rows`).
pub fn read_arena(path: &Path) -> Result<HashMap<String, f64>> {
    let name = path.display();
    let rows: Vec<(ArenaRow, usize)> = if is_csv(path) {
        read_rows(path)?
    } else {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(o)) if o.contains_key("rows") => {
                serde_json::from_value::<Vec<ArenaRow>>(o["rows"].clone())
                    .map_err(|e| anyhow::anyhow!("{name}: field `rows`: {e}"))?
                    .into_iter()
                    .map(|r| (r, 0))
                    .collect()
            }
            _ => read_rows(path)?,
        }
    };
    let mut out = HashMap::new();
    for (r, line) in rows {
        if !r.rating.is_finite() {
            bail!("{name}:{line}: field `rating`: not a finite number");
        }
        if out.insert(r.model.clone(), r.rating).is_some() {
            bail!("{name}:{line}: model {:?} listed twice", r.model);
        }
    }
    Ok(out)
}
