//! `reinforge verify`: the verifier's batch mode (reinforge-verify's `cli`), and with
//! `--probe FILE --reward SPEC` the canaries of a labelled set scored by a whole reward spec
//! (learned components loaded as `train --reward` loads them) instead of the verifier alone.

use std::path::PathBuf;

use anyhow::{Context, Result};
use reinforge_reward::integrity::{credited, CanaryKind};
use reinforge_reward::Sample;
use reinforge_verify::cli::{output, VerifyArgs};
use reinforge_verify::probe;

/// Check math answers: jsonl of {id, gold, pred[, options]} to verdicts (exact, bounded); or
/// probe a verifier or reward spec with known-wrong canaries (--probe).
#[derive(clap::Args)]
pub struct VerifyCommand {
    #[command(flatten)]
    pub args: VerifyArgs,
    /// With --probe: score the canaries with this reward spec (TOML, as `train --reward` reads
    /// it) instead of the verifier alone. A canary counts as credited when a verifier
    /// component gives it its correct value, or, in a spec without one, when it scores above
    /// the row's empty completion.
    #[arg(long, value_name = "SPEC")]
    pub reward: Option<PathBuf>,
}

/// Runs the command.
pub fn run(c: &VerifyCommand) -> Result<()> {
    let (Some(spec), Some(set)) = (&c.reward, &c.args.probe) else {
        if c.reward.is_some() {
            anyhow::bail!("--reward scores the canaries of --probe FILE: add --probe with a labelled set (it replaces --input)");
        }
        return reinforge_verify::cli::run(&c.args);
    };
    let cases = probe::cases(set)?;
    let reward = reinforge_recipes::data::reward_from_spec(
        Some(spec),
        &reinforge_recipes::scorers::load_scorer,
    )?;
    let samples: Vec<Sample> = cases
        .iter()
        .map(|p| Sample {
            prompt: p.prompt.clone(),
            response: p.canary.response.clone(),
            label: Some(p.gold.clone()),
        })
        .collect();
    let scores = reward.score(&samples).with_context(|| {
        format!(
            "scoring the canaries of {} with {}",
            set.display(),
            spec.display()
        )
    })?;
    // A row's canaries are consecutive: a new row starts where the id or prompt changes.
    let mut rows = Vec::with_capacity(cases.len());
    for (i, p) in cases.iter().enumerate() {
        let same = i > 0 && cases[i - 1].id == p.id && cases[i - 1].prompt == p.prompt;
        let row = rows.last().copied().unwrap_or(0) + usize::from(i > 0 && !same);
        rows.push(row);
    }
    let kinds: Vec<CanaryKind> = cases.iter().map(|p| p.canary.kind).collect();
    let hits = credited(&rows, &kinds, &scores);
    let counts = probe::write(&cases, &hits, &mut output(&c.args.output)?)?;
    eprint!("{}", probe::summary(&counts));
    Ok(())
}
