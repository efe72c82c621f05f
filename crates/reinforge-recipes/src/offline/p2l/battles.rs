//! Battles with prompts: read from jsonl or parquet, and encoded as prompt ids plus the label
//! rows a P2L loss reads.

use std::path::Path;

use anyhow::{bail, Context, Result};
use reinforge_tasks::data::Prompt;
use reinforge_tasks::{read_records, DataColumns, PromptFormat};
use reinforge_torch::train::loss::p2l::P2lLoss;

/// One battle with its prompt, as read from a file.
pub struct Battle {
    pub prompt: Prompt,
    pub a: String,
    pub b: String,
    /// 0: a won, 1: b won, 2: tie, 3: tie (both bad).
    pub outcome: u8,
}

/// Reads battles (jsonl or parquet: `prompt`, `model_a`, `model_b`, `winner`); errors name
/// the file, row and field.
pub fn read_battles(path: &Path) -> Result<Vec<Battle>> {
    let records = read_records(path, &columns())?;
    let mut out = Vec::with_capacity(records.len());
    for (i, r) in records.into_iter().enumerate() {
        let field = |k: &str| -> Result<String> {
            match r.extra.get(k) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                _ => bail!("{} row {}: `{k}` must be a string", path.display(), i + 1),
            }
        };
        let (a, b, winner) = (field("model_a")?, field("model_b")?, field("winner")?);
        let outcome = match winner.as_str() {
            "model_a" => 0,
            "model_b" => 1,
            "tie" => 2,
            "tie (bothbad)" => 3,
            w => bail!(
                "{} row {}: winner {w:?} is not model_a, model_b, tie or \"tie (bothbad)\"",
                path.display(),
                i + 1
            ),
        };
        if a == b {
            bail!(
                "{} row {}: model_a and model_b are both {a:?}",
                path.display(),
                i + 1
            );
        }
        out.push(Battle {
            prompt: r.prompt,
            a,
            b,
            outcome,
        });
    }
    if out.is_empty() {
        bail!("{}: no battles", path.display());
    }
    Ok(out)
}

/// The prompts of a prompt set (`prompt` column: text or messages).
pub fn read_prompts(path: &Path) -> Result<Vec<Prompt>> {
    Ok(read_records(path, &columns())?
        .into_iter()
        .map(|r| r.prompt)
        .collect())
}

/// The `prompt` column, text or messages.
fn columns() -> DataColumns {
    DataColumns {
        prompt: "prompt".into(),
        prompt_format: PromptFormat::Auto,
        answer: None,
        images: None,
    }
}

/// The competitors of `battles`, sorted: the coefficient order.
pub fn models_of(battles: &[Battle]) -> Vec<String> {
    let mut models: Vec<String> = battles
        .iter()
        .flat_map(|b| [b.a.clone(), b.b.clone()])
        .collect();
    models.sort();
    models.dedup();
    models
}

/// Encoded battles: prompt ids and label rows `(winner, loser[, tie])` for `loss`.
pub struct Encoded {
    pub prompts: Vec<Vec<i64>>,
    pub labels: Vec<[i64; 3]>,
    pub dropped_ties: usize,
}

impl Encoded {
    /// The label rows of `rows`.
    pub fn labels(&self, rows: &[usize]) -> Vec<[i64; 3]> {
        rows.iter().map(|&r| self.labels[r]).collect()
    }

    /// The prompt ids of `rows`.
    pub fn prompts(&self, rows: &[usize]) -> Vec<Vec<i64>> {
        rows.iter().map(|&r| self.prompts[r].clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    pub fn all(&self) -> Vec<usize> {
        (0..self.prompts.len()).collect()
    }
}

/// Encodes `battles` for `loss` (`bt` drops ties; a both-bad tie is a tie where the loss has no
/// such outcome); `file` names unknown models in errors.
pub fn encode(
    battles: &[Battle],
    models: &[String],
    loss: P2lLoss,
    tokenizer: &dyn Fn(&Prompt) -> Result<Vec<i64>>,
    file: &Path,
) -> Result<Encoded> {
    let index = |m: &str| -> Result<i64> {
        models
            .iter()
            .position(|x| x == m)
            .map(|i| i as i64)
            .with_context(|| {
                format!(
                    "{}: model {m:?} does not occur in the training battles",
                    file.display()
                )
            })
    };
    let mut enc = Encoded {
        prompts: vec![],
        labels: vec![],
        dropped_ties: 0,
    };
    for b in battles {
        let (a, bb) = (index(&b.a)?, index(&b.b)?);
        let label = match (b.outcome, loss.max_tie()) {
            (0, _) => [a, bb, 0],
            (1, _) => [bb, a, 0],
            (_, 0) => {
                enc.dropped_ties += 1;
                continue;
            }
            (2, _) => [a, bb, 1],
            (_, 1) => [a, bb, 1],
            _ => [a, bb, 2],
        };
        enc.prompts.push(tokenizer(&b.prompt)?);
        enc.labels.push(label);
    }
    if enc.prompts.is_empty() {
        bail!(
            "{}: no battles left for loss {loss} (bt drops ties)",
            file.display()
        );
    }
    Ok(enc)
}
