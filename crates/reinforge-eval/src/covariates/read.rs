//! Battles JSONL with covariate values: the usual battle fields ([`crate::io`]) plus, per covariate,
//! both sides' numbers at their dotted paths. Errors name the file, line and field: a missing field,
//! a value that is not a number (or an array / object of numbers), one side present without the other.

use super::CovariateSpec;
use crate::io::{parse_battles_with, Battles};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// Battles with, per battle, each covariate's raw `(a, b)` values and the battle's `source:line`.
#[derive(Debug, Clone, Default)]
pub struct CovariateBattles {
    /// The battles (with style metadata when asked for).
    pub battles: Battles,
    /// `raw[battle][covariate] = (value of model A, value of model B)`.
    pub raw: Vec<Vec<(f64, f64)>>,
    /// `source:line` of each battle.
    pub lines: Vec<String>,
}

/// Reads a battles file with the covariates of `specs` (and FastChat's style metadata when `with_style`).
pub fn read_covariate_battles(
    path: &Path,
    with_style: bool,
    specs: &[CovariateSpec],
) -> Result<CovariateBattles> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = std::io::BufReader::with_capacity(1 << 20, f);
    parse_covariate_battles(reader, &path.display().to_string(), with_style, specs)
}

/// [`read_covariate_battles`] from any reader; `source` names the input in errors.
pub fn parse_covariate_battles<R: BufRead>(
    reader: R,
    source: &str,
    with_style: bool,
    specs: &[CovariateSpec],
) -> Result<CovariateBattles> {
    let mut raw = Vec::new();
    let mut lines = Vec::new();
    let battles = parse_battles_with(reader, source, with_style, |text, at| {
        let v: Value =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{at}: invalid JSON: {e}"))?;
        let row = specs
            .iter()
            .map(|s| pair(&v, s).map_err(|e| anyhow::anyhow!("{at}: {e:#}")))
            .collect::<Result<Vec<_>>>()?;
        raw.push(row);
        lines.push(at.to_string());
        Ok(())
    })?;
    Ok(CovariateBattles {
        battles,
        raw,
        lines,
    })
}

/// Both sides' values of one covariate.
fn pair(v: &Value, s: &CovariateSpec) -> Result<(f64, f64)> {
    let (a, b) = (lookup(v, &s.field_a), lookup(v, &s.field_b));
    match (a, b) {
        (Some(a), Some(b)) => Ok((
            number(a).with_context(|| format!("field `{}`", s.field_a))?,
            number(b).with_context(|| format!("field `{}`", s.field_b))?,
        )),
        (Some(_), None) => bail!(
            "field `{}`: missing while `{}` is present (covariate {:?} needs both sides)",
            s.field_b,
            s.field_a,
            s.name
        ),
        (None, Some(_)) => bail!(
            "field `{}`: missing while `{}` is present (covariate {:?} needs both sides)",
            s.field_a,
            s.field_b,
            s.name
        ),
        (None, None) => bail!(
            "fields `{}` and `{}`: missing (covariate {:?})",
            s.field_a,
            s.field_b,
            s.name
        ),
    }
}

/// The value at a dotted path (`null` counts as missing).
fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for key in path.split('.') {
        cur = cur.as_object()?.get(key)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// A number, or the sum of an array or object of numbers (one entry per turn or per kind).
fn number(v: &Value) -> Result<f64> {
    let sum = |items: &mut dyn Iterator<Item = (String, &Value)>| -> Result<f64> {
        let mut s = 0.0;
        for (k, x) in items {
            s += x
                .as_f64()
                .with_context(|| format!("entry {k} is not a number: {x}"))?;
        }
        Ok(s)
    };
    let x = match v {
        Value::Number(n) => n.as_f64().context("not a finite number")?,
        Value::Array(a) => sum(&mut a.iter().enumerate().map(|(i, x)| (i.to_string(), x)))?,
        Value::Object(m) => sum(&mut m.iter().map(|(k, x)| (format!("{k:?}"), x)))?,
        other => bail!("expected a number (or an array or object of numbers), got {other}"),
    };
    if !x.is_finite() {
        bail!("not a finite number");
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Vec<CovariateSpec> {
        vec![CovariateSpec::parse("cites=conv_metadata.cites_a,conv_metadata.cites_b").unwrap()]
    }

    fn parse(s: &str) -> Result<CovariateBattles> {
        parse_covariate_battles(s.as_bytes(), "b.jsonl", false, &spec())
    }

    const HEAD: &str = r#""model_a":"x","model_b":"y","winner":"model_a""#;

    #[test]
    fn numbers_arrays_and_objects_are_read() {
        let text = format!(
            "{{{HEAD},\"conv_metadata\":{{\"cites_a\":3,\"cites_b\":[1,2,4]}}}}\n\n{{{HEAD},\"conv_metadata\":{{\"cites_a\":{{\"news\":1,\"wiki\":2}},\"cites_b\":0}}}}\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.raw, vec![vec![(3.0, 7.0)], vec![(3.0, 0.0)]]);
        assert_eq!(c.lines, ["b.jsonl:1", "b.jsonl:3"]);
        assert_eq!(c.battles.len(), 2);
    }

    #[test]
    fn bad_fields_name_line_and_field() {
        let ok = format!("{{{HEAD},\"conv_metadata\":{{\"cites_a\":1,\"cites_b\":2}}}}\n");
        let cases = [
            (
                format!("{{{HEAD},\"conv_metadata\":{{\"cites_a\":1}}}}"),
                "`conv_metadata.cites_b`: missing while `conv_metadata.cites_a` is present",
            ),
            (
                format!("{{{HEAD},\"conv_metadata\":{{\"cites_a\":\"many\",\"cites_b\":2}}}}"),
                "field `conv_metadata.cites_a`",
            ),
            (
                format!("{{{HEAD},\"conv_metadata\":{{\"cites_a\":[1,\"x\"],\"cites_b\":2}}}}"),
                "entry 1 is not a number",
            ),
            (format!("{{{HEAD}}}"), "missing (covariate \"cites\")"),
        ];
        for (line, want) in cases {
            let e = format!("{:#}", parse(&format!("{ok}{line}\n")).unwrap_err());
            assert!(e.contains("b.jsonl:2") && e.contains(want), "{e}");
        }
    }
}
