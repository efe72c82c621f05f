//! `train-sft`'s rows: TRL `SFTTrainer`'s dataset formats (TRL 1.16,
//! `SFTTrainer._prepare_dataset`'s `tokenize_fn`) tokenised into token ids and a mask of the
//! tokens the loss is computed on.
//!
//! - `messages`: the conversation rendered by the checkpoint's chat template. With
//!   [`LossTokens::Completion`] only the assistant turns are trained on (TRL's
//!   `assistant_only_loss=True`). TRL reads that mask from `{% generation %}` blocks, which
//!   most templates (SmolLM2's, Llama's) lack; here each assistant turn is the text between
//!   the conversation before it rendered with the generation prompt and the conversation
//!   through it, so any template whose renderings of a conversation's prefixes are prefixes
//!   of the whole works (others are refused, naming the row).
//! - `prompt` + `completion`: TRL's prompt-completion case, the completion starting where
//!   the tokenised prompt and prompt+completion diverge (`common_prefix_length`); text
//!   completions get the EOS appended (TRL's `add_eos`); conversational ones are rendered with
//!   the template. [`LossTokens::Completion`] is TRL's `completion_only_loss=True` (its
//!   default for this format).
//! - `text`: language modelling on every token, the EOS appended.
//!
//! Rows are truncated to `max_length` keeping the start (TRL's `truncation_mode="keep_start"`).

use std::path::Path;

use anyhow::{bail, Context, Result};
use reinforge_hf::{ChatOptions, HfTokenizer};
use reinforge_tasks::data::{read_records, DataColumns, DataError, Message, Prompt, PromptRecord};
use serde::Serialize;
use serde_json::Value;

/// Which dataset format the rows are in (TRL's SFT dataset types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SftFormat {
    /// `messages` if the rows have it, else `prompt` + `completion`, else `text`.
    Auto,
    Messages,
    PromptCompletion,
    Text,
}

impl SftFormat {
    /// The names `--format` takes.
    pub const ALL: &'static [SftFormat] = &[
        SftFormat::Auto,
        SftFormat::Messages,
        SftFormat::PromptCompletion,
        SftFormat::Text,
    ];
}

/// Which tokens the loss is computed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossTokens {
    /// The completion of prompt-completion rows, the assistant turns of conversations, every
    /// token of `text` rows (TRL's `completion_only_loss=True`, `assistant_only_loss=True`).
    Completion,
    /// Every token (TRL's `completion_only_loss=False`, and its default for `messages`).
    All,
}

impl LossTokens {
    /// The names `--loss-tokens` takes.
    pub const ALL: &'static [LossTokens] = &[LossTokens::Completion, LossTokens::All];
}

/// How rows become token ids.
#[derive(Debug, Clone, Copy)]
pub struct Tokenization {
    pub format: SftFormat,
    pub loss_tokens: LossTokens,
    /// Longest row in tokens (TRL's `max_length`, default 1024); longer rows are cut.
    pub max_length: usize,
}

/// One tokenised row: `labels[k]` says whether token `k` is a target of the loss (predicted
/// from the tokens before it; the first token never is).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SftRow {
    #[serde(rename = "input_ids")]
    pub ids: Vec<i64>,
    /// TRL's processed-dataset column name for the same mask.
    #[serde(rename = "completion_mask", serialize_with = "bits")]
    pub labels: Vec<bool>,
}

impl SftRow {
    /// Tokens the loss is computed on.
    pub fn targets(&self) -> usize {
        self.labels.iter().skip(1).filter(|&&b| b).count()
    }
}

fn bits<S: serde::Serializer>(labels: &[bool], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(labels.iter().map(|&b| u8::from(b)))
}

/// The rows of a file and what reading them did.
#[derive(Debug, Clone)]
pub struct SftRows {
    pub rows: Vec<SftRow>,
    /// The format the rows were read as.
    pub format: SftFormat,
    /// Rows cut to `max_length`.
    pub truncated: usize,
    /// Rows left without any target token (after truncation), not trained on.
    pub dropped: usize,
}

impl SftRows {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Tokens in all rows and tokens trained on.
    pub fn token_counts(&self) -> (usize, usize) {
        let all = self.rows.iter().map(|r| r.ids.len()).sum();
        let targets = self.rows.iter().map(SftRow::targets).sum();
        (all, targets)
    }
}

/// Reads and tokenises `path` (jsonl or parquet) with `tokenizer`; errors name the file, row
/// and column.
pub fn read_sft_rows(path: &Path, tokenizer: &HfTokenizer, t: &Tokenization) -> Result<SftRows> {
    let (format, records) = read_format(path, t.format)?;
    let mut out = SftRows {
        rows: Vec::with_capacity(records.len()),
        format,
        truncated: 0,
        dropped: 0,
    };
    for (i, r) in records.iter().enumerate() {
        let at = || format!("{} row {}", path.display(), i + 1);
        let mut row = match format {
            SftFormat::Messages => messages_row(tokenizer, r, t.loss_tokens),
            SftFormat::PromptCompletion => prompt_completion_row(tokenizer, r, t.loss_tokens),
            _ => text_row(tokenizer, r),
        }
        .with_context(at)?;
        if row.ids.len() > t.max_length {
            row.ids.truncate(t.max_length);
            row.labels.truncate(t.max_length);
            out.truncated += 1;
        }
        if row.targets() == 0 {
            out.dropped += 1;
            continue;
        }
        out.rows.push(row);
    }
    if out.rows.is_empty() {
        bail!(
            "{}: no row has a token to train on ({} rows read, {} with none left after cutting to \
             {} tokens)",
            path.display(),
            records.len(),
            out.dropped,
            t.max_length
        );
    }
    Ok(out)
}

/// The records of `path` in `format` (`Auto` resolved by the first row's columns).
fn read_format(path: &Path, format: SftFormat) -> Result<(SftFormat, Vec<PromptRecord>)> {
    let columns = |f: SftFormat| match f {
        SftFormat::Messages => DataColumns::messages("messages", None),
        SftFormat::Text => DataColumns::text("text", None),
        _ => DataColumns {
            answer: None,
            ..DataColumns::default()
        },
    };
    if format != SftFormat::Auto {
        return Ok((format, read_records(path, &columns(format))?));
    }
    for f in [
        SftFormat::Messages,
        SftFormat::PromptCompletion,
        SftFormat::Text,
    ] {
        match read_records(path, &columns(f)) {
            Ok(records) => return Ok((f, records)),
            // The column is absent from the first row: try the next format.
            Err(DataError::Column {
                ref message,
                location,
                ..
            }) if message.starts_with("missing") && first(location) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!(
        "{}: rows need `messages`, `prompt` and `completion`, or `text` (TRL's SFT dataset \
         formats); set --format to name one",
        path.display()
    )
}

/// Whether `loc` is a file's first row.
fn first(loc: reinforge_tasks::data::Location) -> bool {
    use reinforge_tasks::data::Location;
    matches!(loc, Location::Line(1) | Location::Row(0))
}

/// A `messages` row: the rendered conversation, targets per [`LossTokens`].
fn messages_row(tok: &HfTokenizer, r: &PromptRecord, loss: LossTokens) -> Result<SftRow> {
    let Prompt::Messages(messages) = &r.prompt else {
        bail!("column `messages`: expected a list of {{role, content}} messages");
    };
    let text = render(tok, messages, false)?;
    let (ids, offsets) = tok.encode_with_offsets(&text, false)?;
    let labels = match loss {
        LossTokens::All => vec![true; ids.len()],
        LossTokens::Completion => {
            let spans = assistant_spans(tok, messages, &text)?;
            if spans.is_empty() {
                bail!("column `messages`: no assistant turn to train on");
            }
            offsets
                .iter()
                .map(|&(start, end)| end > start && spans.iter().any(|s| s.contains(&start)))
                .collect()
        }
    };
    Ok(SftRow {
        ids: ids.into_iter().map(i64::from).collect(),
        labels,
    })
}

/// The byte ranges of `text` (the whole conversation rendered) that are assistant turns:
/// from the end of the conversation before the turn rendered with the generation prompt to
/// the end of the conversation through the turn.
fn assistant_spans(
    tok: &HfTokenizer,
    messages: &[Message],
    text: &str,
) -> Result<Vec<std::ops::Range<usize>>> {
    let mut spans = vec![];
    for (i, m) in messages.iter().enumerate() {
        if m.role != "assistant" {
            continue;
        }
        if i == 0 {
            bail!("column `messages`: the conversation starts with an assistant turn");
        }
        let before = render(tok, &messages[..i], true)?;
        let through = render(tok, &messages[..=i], false)?;
        if !text.starts_with(&before) || !text.starts_with(&through) || through.len() < before.len()
        {
            bail!(
                "column `messages`: the chat template renders the conversation up to assistant \
                 turn {} differently from the whole conversation (it rewrites earlier turns), so \
                 the turn's tokens cannot be found; use --loss-tokens all",
                i + 1
            );
        }
        spans.push(before.len()..through.len());
    }
    Ok(spans)
}

/// A prompt-completion row: TRL's `common_prefix_length` split of prompt and
/// prompt+completion ids.
fn prompt_completion_row(tok: &HfTokenizer, r: &PromptRecord, loss: LossTokens) -> Result<SftRow> {
    let completion = r.extra.get("completion");
    let (prompt, whole) = match &r.prompt {
        Prompt::Messages(prompt) => {
            let mut all = prompt.clone();
            all.extend(completion_messages(completion)?);
            let p = tok.encode(&render(tok, prompt, true)?, false)?;
            (p, tok.encode(&render(tok, &all, false)?, false)?)
        }
        Prompt::Text(prompt) => {
            let Some(Value::String(c)) = completion else {
                bail!("column `completion`: expected text (the prompt is text)");
            };
            let text = format!("{prompt}{}", with_eos(tok, c));
            (tok.encode(prompt, true)?, tok.encode(&text, true)?)
        }
    };
    let split = prompt.iter().zip(&whole).take_while(|(a, b)| a == b).count();
    let labels = (0..whole.len())
        .map(|k| loss == LossTokens::All || k >= split)
        .collect();
    Ok(SftRow {
        ids: whole.into_iter().map(i64::from).collect(),
        labels,
    })
}

/// A conversational completion: a list of messages, or text as one assistant message.
fn completion_messages(v: Option<&Value>) -> Result<Vec<Message>> {
    match v {
        Some(Value::String(s)) => Ok(vec![Message {
            role: "assistant".into(),
            content: s.clone(),
        }]),
        Some(v @ Value::Array(_)) => serde_json::from_value(v.clone())
            .context("column `completion`: expected a list of {role, content} messages"),
        Some(_) => bail!("column `completion`: expected a list of messages or text"),
        None => bail!("column `completion`: missing"),
    }
}

/// A `text` row: every token, the EOS appended.
fn text_row(tok: &HfTokenizer, r: &PromptRecord) -> Result<SftRow> {
    let Prompt::Text(text) = &r.prompt else {
        bail!("column `text`: expected text");
    };
    let ids = tok.encode(&with_eos(tok, text), true)?;
    Ok(SftRow {
        labels: vec![true; ids.len()],
        ids: ids.into_iter().map(i64::from).collect(),
    })
}

/// `text` with the EOS token's text appended unless it already ends with it (TRL's `add_eos`).
fn with_eos(tok: &HfTokenizer, text: &str) -> String {
    let eos = tok
        .eos_token_id()
        .and_then(|id| tok.id_to_token(id))
        .unwrap_or_default();
    if eos.is_empty() || text.ends_with(&eos) {
        text.to_string()
    } else {
        format!("{text}{eos}")
    }
}

/// `messages` rendered by the checkpoint's chat template.
fn render(tok: &HfTokenizer, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
    let opts = ChatOptions {
        add_generation_prompt,
        ..Default::default()
    };
    Ok(tok.apply_chat_template(messages, &opts)?)
}
