//! Reading pairwise battles in the Chatbot Arena JSONL layout, with errors that name file, line and field.
//!
//! One JSON object per line: `{"model_a": str, "model_b": str, "winner": str, ...}` where `winner` is one of
//! `model_a`, `model_b`, `tie`, `tie (bothbad)` (the labels FastChat's `compute_elo` accepts; anything else
//! raises there too). Extra fields are ignored. With style control, each line also needs FastChat's
//! `conv_metadata` object (see [`STYLE_ELEMENTS`]). Blank lines are skipped; every other defect — invalid
//! JSON, a missing field, an unknown winner, a self-battle — is an error naming the file and 1-based line.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

/// Result of one battle from `model_a`'s point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// `model_b` won.
    BWins = 0,
    /// `tie` or `tie (bothbad)`.
    Tie = 1,
    /// `model_a` won.
    AWins = 2,
}

impl Outcome {
    /// Score of `model_a`: 1, 0.5 or 0 (ties count as half a win, as in FastChat, arena-rank and evalica).
    pub fn score_a(self) -> f64 {
        self as u8 as f64 / 2.0
    }

    /// Parses an Arena winner label.
    pub fn from_label(s: &str) -> Option<Self> {
        match s {
            "model_a" => Some(Outcome::AWins),
            "model_b" => Some(Outcome::BWins),
            "tie" | "tie (bothbad)" => Some(Outcome::Tie),
            _ => None,
        }
    }
}

/// FastChat's style-control features (`STYLE_CONTROL_ELEMENTS_V1` in `fastchat/serve/monitor/rating_systems.py`):
/// the first four are model A's, the last four model B's. A value is either a number or an object whose
/// values are summed (e.g. `header_count_a: {"h1": 2, "h2": 1}`).
pub const STYLE_ELEMENTS: [&str; 8] = [
    "sum_assistant_a_tokens",
    "header_count_a",
    "list_count_a",
    "bold_count_a",
    "sum_assistant_b_tokens",
    "header_count_b",
    "list_count_b",
    "bold_count_b",
];

/// Battles loaded into memory: interned model ids, per-battle arrays in file order.
#[derive(Debug, Clone, Default)]
pub struct Battles {
    /// Model names; ids index this vector. Order of first appearance (as `model_a` or `model_b`).
    pub models: Vec<String>,
    /// `model_a` id of each battle.
    pub a: Vec<u32>,
    /// `model_b` id of each battle.
    pub b: Vec<u32>,
    /// Outcome of each battle.
    pub outcome: Vec<Outcome>,
    /// FastChat style elements per battle (only when requested), in [`STYLE_ELEMENTS`] order.
    pub style: Option<Vec<[f64; 8]>>,
}

impl Battles {
    /// Number of battles.
    pub fn len(&self) -> usize {
        self.a.len()
    }

    /// True when there are no battles.
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
    }

    /// Builds battles from name triples (mostly for tests and simulations). Self-battles are rejected.
    pub fn from_triples<'a>(
        rows: impl IntoIterator<Item = (&'a str, &'a str, Outcome)>,
    ) -> Result<Self> {
        let mut out = Battles::default();
        let mut ids = HashMap::new();
        for (i, (a, b, o)) in rows.into_iter().enumerate() {
            if a == b {
                bail!("battle {i}: self-battle of {a:?}");
            }
            let ia = intern(&mut ids, &mut out.models, a);
            let ib = intern(&mut ids, &mut out.models, b);
            out.a.push(ia);
            out.b.push(ib);
            out.outcome.push(o);
        }
        Ok(out)
    }

    /// Battles played by each model (as A or B), indexed by model id.
    pub fn battles_per_model(&self) -> Vec<u64> {
        let mut n = vec![0u64; self.models.len()];
        for (&a, &b) in self.a.iter().zip(&self.b) {
            n[a as usize] += 1;
            n[b as usize] += 1;
        }
        n
    }

    /// (wins, ties, losses) of each model, indexed by model id.
    pub fn record_per_model(&self) -> Vec<(u64, u64, u64)> {
        tally(
            self.models.len(),
            (0..self.len()).map(|i| (self.a[i], self.b[i], self.outcome[i])),
        )
    }
}

/// (wins, ties, losses) per player id over `(a, b, outcome)` comparisons among `n` players.
pub(crate) fn tally(
    n: usize,
    comparisons: impl IntoIterator<Item = (u32, u32, Outcome)>,
) -> Vec<(u64, u64, u64)> {
    let mut r = vec![(0u64, 0u64, 0u64); n];
    for (a, b, o) in comparisons {
        let (a, b) = (a as usize, b as usize);
        match o {
            Outcome::AWins => {
                r[a].0 += 1;
                r[b].2 += 1;
            }
            Outcome::BWins => {
                r[b].0 += 1;
                r[a].2 += 1;
            }
            Outcome::Tie => {
                r[a].1 += 1;
                r[b].1 += 1;
            }
        }
    }
    r
}

fn intern(ids: &mut HashMap<String, u32>, models: &mut Vec<String>, name: &str) -> u32 {
    if let Some(&i) = ids.get(name) {
        return i;
    }
    let i = models.len() as u32;
    models.push(name.to_string());
    ids.insert(name.to_string(), i);
    i
}

#[derive(Deserialize)]
struct RawBattle<'a> {
    #[serde(borrow)]
    model_a: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model_b: Option<Cow<'a, str>>,
    #[serde(borrow)]
    winner: Option<Cow<'a, str>>,
    #[serde(default)]
    conv_metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// [`RawBattle`] without `conv_metadata`: when style control is off, the (large) metadata object
/// is skipped by serde instead of being built into a map for every line.
#[derive(Deserialize)]
struct RawBattleNoStyle<'a> {
    #[serde(borrow)]
    model_a: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model_b: Option<Cow<'a, str>>,
    #[serde(borrow)]
    winner: Option<Cow<'a, str>>,
}

/// Reads a battles JSONL file. With `with_style`, every line must carry FastChat's `conv_metadata`.
pub fn read_battles(path: &Path, with_style: bool) -> Result<Battles> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = std::io::BufReader::with_capacity(1 << 20, f);
    parse_battles(reader, &path.display().to_string(), with_style)
}

/// Parses battles JSONL from any reader; `source` names the input in error messages.
pub fn parse_battles<R: BufRead>(reader: R, source: &str, with_style: bool) -> Result<Battles> {
    parse_battles_with(reader, source, with_style, |_, _| Ok(()))
}

/// [`parse_battles`] that also hands every accepted battle line to `each(text, location)` (location
/// is `source:line`), e.g. to read more fields of it; an error from `each` stops the parse.
pub fn parse_battles_with<R: BufRead>(
    mut reader: R,
    source: &str,
    with_style: bool,
    mut each: impl FnMut(&str, &str) -> Result<()>,
) -> Result<Battles> {
    let mut out = Battles::default();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut styles = Vec::new();
    let mut line = String::new();
    let mut lineno = 0usize;
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .with_context(|| format!("{source}:{}: read error", lineno + 1))?;
        if n == 0 {
            break;
        }
        lineno += 1;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let at = || format!("{source}:{lineno}");
        let (ma, mb, w, meta) = if with_style {
            let r: RawBattle = serde_json::from_str(text)
                .map_err(|e| anyhow::anyhow!("{}: invalid battle JSON: {e}", at()))?;
            (r.model_a, r.model_b, r.winner, r.conv_metadata)
        } else {
            let r: RawBattleNoStyle = serde_json::from_str(text)
                .map_err(|e| anyhow::anyhow!("{}: invalid battle JSON: {e}", at()))?;
            (r.model_a, r.model_b, r.winner, None)
        };
        let ma = ma.ok_or_else(|| anyhow::anyhow!("{}: field `model_a`: missing", at()))?;
        let mb = mb.ok_or_else(|| anyhow::anyhow!("{}: field `model_b`: missing", at()))?;
        let w = w.ok_or_else(|| anyhow::anyhow!("{}: field `winner`: missing", at()))?;
        let Some(outcome) = Outcome::from_label(&w) else {
            bail!(
                "{}: field `winner`: unknown value {:?} (expected \"model_a\", \"model_b\", \"tie\" or \"tie (bothbad)\")",
                at(),
                w
            );
        };
        if ma == mb {
            bail!(
                "{}: fields `model_a`/`model_b`: self-battle of {:?}",
                at(),
                ma
            );
        }
        if with_style {
            let meta = meta.ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: field `conv_metadata`: missing (needed for style control)",
                    at()
                )
            })?;
            let mut s = [0.0; 8];
            for (k, name) in STYLE_ELEMENTS.iter().enumerate() {
                s[k] = style_value(meta.get(*name))
                    .map_err(|e| anyhow::anyhow!("{}: field `conv_metadata.{name}`: {e}", at()))?;
            }
            styles.push(s);
        }
        each(text, &at())?;
        out.a.push(intern(&mut ids, &mut out.models, &ma));
        out.b.push(intern(&mut ids, &mut out.models, &mb));
        out.outcome.push(outcome);
    }
    if with_style {
        out.style = Some(styles);
    }
    Ok(out)
}

/// A FastChat style element: a number, or an object of numbers that is summed (FastChat's
/// `extract_style_feature`).
fn style_value(v: Option<&serde_json::Value>) -> Result<f64> {
    match v {
        None => bail!("missing"),
        Some(serde_json::Value::Number(n)) => n.as_f64().context("not a finite number"),
        Some(serde_json::Value::Object(m)) => {
            let mut s = 0.0;
            for (k, x) in m {
                s += x
                    .as_f64()
                    .with_context(|| format!("entry {k:?} is not a number"))?;
            }
            Ok(s)
        }
        Some(other) => bail!("expected a number or an object of numbers, got {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Battles> {
        parse_battles(s.as_bytes(), "mem.jsonl", false)
    }

    #[test]
    fn parses_labels_and_interns_models() {
        let b = parse(
            "{\"model_a\":\"x\",\"model_b\":\"y\",\"winner\":\"model_a\"}\n\n\
             {\"model_a\":\"y\",\"model_b\":\"z\",\"winner\":\"tie (bothbad)\",\"extra\":1}\n\
             {\"model_a\":\"z\",\"model_b\":\"x\",\"winner\":\"model_b\"}\n",
        )
        .unwrap();
        assert_eq!(b.models, ["x", "y", "z"]);
        assert_eq!(b.a, [0, 1, 2]);
        assert_eq!(b.b, [1, 2, 0]);
        assert_eq!(b.outcome, [Outcome::AWins, Outcome::Tie, Outcome::BWins]);
        assert_eq!(b.record_per_model(), vec![(2, 0, 0), (0, 1, 1), (0, 1, 1)]);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let ok = "{\"model_a\":\"x\",\"model_b\":\"y\",\"winner\":\"tie\"}\n";
        let e = parse(&format!(
            "{ok}{ok}{{\"model_a\":\"x\",\"model_b\":\"y\",\"winner\":\"draw\"}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("mem.jsonl:3") && e.contains("`winner`") && e.contains("draw"),
            "{e}"
        );
        let e = parse(&format!(
            "{ok}{{\"model_a\":\"x\",\"model_b\":\"x\",\"winner\":\"tie\"}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("mem.jsonl:2") && e.contains("self-battle"),
            "{e}"
        );
        let e = parse(&format!("{ok}{{\"model_a\":\"x\",\"winner\":\"tie\"}}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mem.jsonl:2") && e.contains("`model_b`: missing"),
            "{e}"
        );
        let e = parse("{\"model_a\":\"x\",\n").unwrap_err().to_string();
        assert!(
            e.contains("mem.jsonl:1") && e.contains("invalid battle JSON"),
            "{e}"
        );
        let e = parse("{\"model_a\":3,\"model_b\":\"y\",\"winner\":\"tie\"}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mem.jsonl:1"), "{e}");
    }

    #[test]
    fn style_metadata_is_read_and_required() {
        let meta = r#"{"sum_assistant_a_tokens":10,"header_count_a":{"h1":1,"h2":2},"list_count_a":{},"bold_count_a":0,
            "sum_assistant_b_tokens":4,"header_count_b":{"h1":0},"list_count_b":{"ordered":3},"bold_count_b":1}"#
            .replace('\n', "");
        let line = format!(
            "{{\"model_a\":\"x\",\"model_b\":\"y\",\"winner\":\"tie\",\"conv_metadata\":{meta}}}\n"
        );
        let b = parse_battles(line.as_bytes(), "s", true).unwrap();
        assert_eq!(
            b.style.unwrap()[0],
            [10.0, 3.0, 0.0, 0.0, 4.0, 0.0, 3.0, 1.0]
        );
        let e = parse_battles(
            "{\"model_a\":\"x\",\"model_b\":\"y\",\"winner\":\"tie\"}".as_bytes(),
            "s",
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("conv_metadata"), "{e}");
    }
}
