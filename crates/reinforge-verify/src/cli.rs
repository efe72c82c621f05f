//! `reinforge verify`: batch verification of a JSONL file.
//!
//! Each input line is `{"id", "gold", "pred", "options"?}`; each output line is
//! `{"id", "correct", "status", "reason", "micros"}`. Bad lines are reported on stderr with their
//! line number and the batch continues. A summary (counts, throughput, latency percentiles) is
//! printed to stderr at the end.

use crate::{verify, Options, Status};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Check predicted math answers against gold answers.
///
/// Reads JSON Lines with `id`, `gold`, `pred` and optional `options` (Math-Verify-compatible
/// keys such as `extraction_targets`, `float_rounding`, `strict`, plus `percent`, `degrees`,
/// `text_containment`), writes one verdict per line with `id`, `correct`, `status`
/// (correct / incorrect / unparsable_pred / unparsable_gold), `reason` and `micros` (time spent
/// on that line). The prediction may be a whole response: only a stated final answer counts (the
/// last `\boxed{}` group, "final answer is", "Answer:", a response that is only the answer, or a
/// final "= N" / "is N" statement in the last sentence; `answer_policy: "last_value"` also takes
/// the last math segment or number).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct VerifyArgs {
    /// Input JSONL file of cases (`-` for stdin).
    #[cfg_attr(feature = "cli", arg(long, required_unless_present = "probe"))]
    pub input: Option<PathBuf>,
    /// Stress the verifier instead: FILE is a labelled set (JSON Lines with `prompt` and
    /// `gold`; `id`, `options` optional). Every row's canaries, completions wrong by
    /// construction (the question's numbers repeated, another row's answer, empty, cut off,
    /// hedged), are scored and written to --output with `credited`; the share credited per
    /// kind goes to stderr. A verifier that credits one can be gamed that way in RL.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "FILE", conflicts_with = "input")
    )]
    pub probe: Option<PathBuf>,
    /// Output JSONL file of verdicts (`-` for stdout).
    #[cfg_attr(feature = "cli", arg(long))]
    pub output: PathBuf,
    /// Default options (JSON object) for lines that carry no `options`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub options: Option<String>,
    /// Do not print the summary to stderr.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = false))]
    pub quiet: bool,
}

#[derive(Deserialize)]
struct Case {
    id: serde_json::Value,
    gold: String,
    pred: String,
    #[serde(default)]
    options: Option<Options>,
}

/// One output line.
#[derive(Serialize, Deserialize, Debug)]
pub struct OutLine {
    pub id: serde_json::Value,
    pub correct: bool,
    pub status: Status,
    pub reason: String,
    pub micros: u64,
}

/// Summary of one run (also printed to stderr).
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub lines: usize,
    pub bad_lines: usize,
    /// 1-based number of the first malformed line.
    pub first_bad_line: Option<usize>,
    pub correct: usize,
    pub incorrect: usize,
    pub unparsable_pred: usize,
    pub unparsable_gold: usize,
    pub cpu_seconds: f64,
    /// Sum of the per-check wall-clock latencies (the time spent inside `verify`).
    pub verify_seconds: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

fn cpu_seconds() -> f64 {
    // process CPU time from /proc (Linux); falls back to 0 elsewhere
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0)
}

/// The options of `--options` (the defaults without it).
pub fn default_options(args: &VerifyArgs) -> Result<Options> {
    match &args.options {
        Some(s) => serde_json::from_str(s).context("parsing --options"),
        None => Ok(Options::default()),
    }
}

/// A buffered writer to `path` (`-`: stdout).
pub fn output(path: &std::path::Path) -> Result<Box<dyn Write>> {
    Ok(if path.as_os_str() == "-" {
        Box::new(BufWriter::new(std::io::stdout()))
    } else {
        Box::new(BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ))
    })
}

/// Runs the batch; returns the summary.
pub fn run_batch(args: &VerifyArgs) -> Result<Summary> {
    let default_opts = default_options(args)?;
    let input = args.input.as_ref().context("--input is required")?;
    let reader: Box<dyn BufRead> = if input.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        Box::new(BufReader::new(
            std::fs::File::open(input).with_context(|| format!("opening {}", input.display()))?,
        ))
    };
    let mut out = output(&args.output)?;
    let mut s = Summary::default();
    let mut lat = vec![];
    let cpu0 = cpu_seconds();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        s.lines += 1;
        let case: Case = match serde_json::from_str(&line) {
            Ok(c) => c,
            Err(e) => {
                s.bad_lines += 1;
                s.first_bad_line.get_or_insert(n + 1);
                eprintln!("line {}: skipped: {e}", n + 1);
                continue;
            }
        };
        let opts = case.options.as_ref().unwrap_or(&default_opts);
        let t = Instant::now();
        let v = verify(&case.gold, &case.pred, opts);
        let us = t.elapsed().as_micros() as u64;
        lat.push(us);
        match v.status {
            Status::Correct => s.correct += 1,
            Status::Incorrect => s.incorrect += 1,
            Status::UnparsablePred => s.unparsable_pred += 1,
            Status::UnparsableGold => s.unparsable_gold += 1,
        }
        let o = OutLine {
            id: case.id,
            correct: v.correct(),
            status: v.status,
            reason: v.reason,
            micros: us,
        };
        serde_json::to_writer(&mut out, &o)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    s.cpu_seconds = cpu_seconds() - cpu0;
    s.verify_seconds = lat.iter().sum::<u64>() as f64 / 1e6;
    lat.sort_unstable();
    let pct = |q: f64| {
        if lat.is_empty() {
            0
        } else {
            lat[((lat.len() - 1) as f64 * q).round() as usize]
        }
    };
    s.p50_us = pct(0.5);
    s.p99_us = pct(0.99);
    s.max_us = lat.last().copied().unwrap_or(0);
    Ok(s)
}

/// Entry point for the `reinforge verify` subcommand. Malformed lines are skipped so the
/// batch completes, but then the run fails (exit status non-zero) naming the first one; so
/// does an input with no cases.
pub fn run(args: &VerifyArgs) -> Result<()> {
    if let Some(set) = &args.probe {
        let cases = crate::probe::cases(set)?;
        let credited = crate::probe::verifier_credits(&cases, &default_options(args)?);
        let counts = crate::probe::write(&cases, &credited, &mut output(&args.output)?)?;
        eprint!("{}", crate::probe::summary(&counts));
        return Ok(());
    }
    let s = run_batch(args)?;
    let input = args
        .input
        .as_deref()
        .unwrap_or(std::path::Path::new("-"))
        .display();
    if s.lines == 0 {
        anyhow::bail!("{input}: no cases (the input is empty)");
    }
    if !args.quiet {
        let checked = s.correct + s.incorrect + s.unparsable_pred + s.unparsable_gold;
        // /proc's CPU clock ticks every 10 ms: below ~0.1 s it is too coarse to divide by, so
        // small batches report checks per second spent inside the verifier instead.
        let throughput = if s.cpu_seconds >= 0.1 {
            format!(
                "{:.0} checks/CPU-second ({:.3} CPU s)",
                checked as f64 / s.cpu_seconds,
                s.cpu_seconds
            )
        } else {
            format!(
                "{:.0} checks per second of verification ({:.4} s; batch too small for the process CPU clock)",
                checked as f64 / s.verify_seconds.max(1e-9),
                s.verify_seconds
            )
        };
        eprintln!(
            "verified {checked} ({} bad lines): correct {}, incorrect {}, unparsable_pred {}, unparsable_gold {}\nthroughput {throughput}; latency p50 {} us, p99 {} us, max {} us",
            s.bad_lines, s.correct, s.incorrect, s.unparsable_pred, s.unparsable_gold, s.p50_us, s.p99_us, s.max_us
        );
    }
    if let Some(line) = s.first_bad_line {
        anyhow::bail!(
            "{input}: {} malformed line(s) skipped, the first at line {line}; the other verdicts are in {}",
            s.bad_lines,
            args.output.display()
        );
    }
    Ok(())
}
