//! The pure-Rust tool commands (`rank`, `passk`, `stats`, `tournament`): their flags, range
//! checks and printing. The computations live in `reinforge-eval`, which carries no CLI code.

pub mod mpg;
pub mod passk;
pub mod rank;
pub mod rm_eval;
pub mod stats;
pub mod tournament;

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::ValueEnum;
use serde::Serialize;

/// Output format of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// GitHub-flavoured markdown table.
    Markdown,
    /// Comma-separated values with a header row.
    Csv,
    /// Pretty-printed JSON.
    Json,
}

/// Writes `text` to `path`, or to stdout when `path` is `None`.
pub fn emit(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) => {
            if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            }
            std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(())
        }
    }
}

/// Runs `f` on a rayon pool of `threads` threads (all cores when `None`).
pub fn with_threads<T: Send>(threads: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T> {
    match threads {
        None => Ok(f()),
        Some(n) => Ok(rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()?
            .install(f)),
    }
}

/// A clap parser for an enum of a library crate, by the variant's serde name: the libraries
/// stay free of clap, and `--help` still lists the names.
#[derive(Clone)]
pub struct ByName<T: 'static>(pub &'static [T]);

/// The serde name of a unit variant.
fn serde_name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

impl<T: Serialize + Copy + Send + Sync + 'static> TypedValueParser for ByName<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let names = self.0.iter().map(serde_name);
        let name = PossibleValuesParser::new(names).parse_ref(cmd, arg, value)?;
        self.0
            .iter()
            .copied()
            .find(|v| serde_name(v) == name)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            self.0.iter().map(|v| PossibleValue::new(serde_name(v))),
        ))
    }
}

/// `--level`: a central interval level strictly between 0 and 1 (0.95, not 95).
pub fn level(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(format!(
            "must be strictly between 0 and 1 (e.g. 0.95), got {v}"
        ))
    }
}

/// A finite number.
pub fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("must be a finite number, got {s}"))
    }
}

/// A finite number >= 0.
pub fn non_negative(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("must be >= 0, got {v}"))
    }
}

/// A finite number > 0.
pub fn positive(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(format!("must be > 0, got {v}"))
    }
}

/// A count of at least 1.
pub fn count(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|e| format!("{e}"))?;
    if v >= 1 {
        Ok(v)
    } else {
        Err("must be at least 1, got 0".into())
    }
}

/// A count of at least 1 (u64).
pub fn count_u64(s: &str) -> Result<u64, String> {
    count(s).map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use reinforge_eval::leaderboard::Method;

    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_parser = ByName(&Method::ALL), default_value = "bt")]
        method: Method,
        #[arg(long, value_parser = level, default_value_t = 0.95)]
        level: f64,
    }

    #[test]
    fn library_enums_parse_by_their_serde_names() {
        let c = Cli::try_parse_from(["x", "--method", "rao-kupper"]).unwrap();
        assert_eq!(c.method, Method::RaoKupper);
        let e = Cli::try_parse_from(["x", "--method", "bogus"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--method") && e.contains("rao-kupper"), "{e}");
    }

    #[test]
    fn level_must_be_a_fraction() {
        for bad in ["95", "0", "1", "nan", "-0.5"] {
            let e = Cli::try_parse_from(["x", &format!("--level={bad}")])
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("--level"), "{bad}: {e}");
        }
        assert_eq!(
            Cli::try_parse_from(["x", "--level", "0.9"]).unwrap().level,
            0.9
        );
    }
}
