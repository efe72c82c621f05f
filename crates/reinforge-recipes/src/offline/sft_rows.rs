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
//!
//! On a vision-language checkpoint the rows may carry images (TRL's convention: `{"type":
//! "image"}` parts in the messages or the prompt, an `images` column of file paths): each
//! placeholder is expanded to its image's token count, the copies keeping its label, and a cut
//! that would leave an image's tokens incomplete is refused naming the row (a silent cut is the
//! "image features and image tokens do not match" failure of other trainers).

use std::path::Path;

use anyhow::{bail, Context, Result};
use reinforge_hf::{ChatOptions, HfTokenizer};
use reinforge_tasks::data::{read_records, DataColumns, DataError, Message, Prompt, PromptRecord};
use reinforge_torch::model::images::Image;
use serde::Serialize;

use crate::images::ImageReader;
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
#[derive(Debug, Clone, Serialize)]
pub struct SftRow {
    #[serde(rename = "input_ids")]
    pub ids: Vec<i64>,
    /// TRL's processed-dataset column name for the same mask.
    #[serde(rename = "completion_mask", serialize_with = "bits")]
    pub labels: Vec<bool>,
    /// The row's images, in the order of their placeholders (vision-language rows).
    #[serde(
        rename = "image_grid_thw",
        serialize_with = "grids",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub images: Vec<Image>,
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

/// Images written as their grids (`image_grid_thw`): the patches are the files'.
fn grids<S: serde::Serializer>(images: &[Image], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(images.iter().map(|i| i.grid))
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

/// Reads and tokenises `path` (jsonl or parquet) with `tokenizer`, and with `images` (a
/// vision-language checkpoint's reader) the rows' `images` column; errors name the file, row
/// and column (or image file).
pub fn read_sft_rows(
    path: &Path,
    tokenizer: &HfTokenizer,
    t: &Tokenization,
    images: Option<ImageReader>,
) -> Result<SftRows> {
    let (format, records) = read_format(path, t.format, images.is_some())?;
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
        if let Some(reader) = images {
            let source = path.display().to_string();
            let loaded = reader.load(&r.images, (&source, i + 1))?;
            (row.ids, row.labels) =
                reader.expand_labeled((&row.ids, &row.labels), &loaded, (&source, i + 1))?;
            row.images = loaded;
        }
        if row.ids.len() > t.max_length {
            if !row.images.is_empty() && cuts_an_image(&row, t.max_length, &images) {
                bail!(
                    "{}: the row is {} tokens with its images' tokens, and cutting it to \
                     --max-length {} would cut an image's tokens (the model needs all of them); \
                     raise --max-length or use smaller images",
                    at(),
                    row.ids.len(),
                    t.max_length
                );
            }
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

/// Whether cutting `row` to `max` tokens leaves some image placeholder copies out.
fn cuts_an_image(row: &SftRow, max: usize, images: &Option<ImageReader>) -> bool {
    images.is_some_and(|r| row.ids[max..].contains(&r.image_token()))
}

/// The records of `path` in `format` (`Auto` resolved by the first row's columns), with the
/// `images` column when `with_images`.
fn read_format(
    path: &Path,
    format: SftFormat,
    with_images: bool,
) -> Result<(SftFormat, Vec<PromptRecord>)> {
    let columns = |f: SftFormat| DataColumns {
        images: with_images.then(|| "images".to_string()),
        ..match f {
            SftFormat::Messages => DataColumns::messages("messages", None),
            SftFormat::Text => DataColumns::text("text", None),
            _ => DataColumns {
                answer: None,
                ..DataColumns::default()
            },
        }
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
        images: Vec::new(),
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
        // A template may end the last turn otherwise than an inner one (an EOS instead of its
        // end-of-turn token): the turn ends where the two renderings part.
        let end = common_prefix(&through, text);
        if !text.starts_with(&before) || end <= before.len() {
            bail!(
                "column `messages`: the chat template renders the conversation up to assistant \
                 turn {} differently from the whole conversation (it rewrites earlier turns), so \
                 the turn's tokens cannot be found; use --loss-tokens all",
                i + 1
            );
        }
        spans.push(before.len()..end);
    }
    Ok(spans)
}

/// Length in bytes of the longest common prefix of `a` and `b` (at a character boundary).
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
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
    let split = prompt
        .iter()
        .zip(&whole)
        .take_while(|(a, b)| a == b)
        .count();
    let labels = (0..whole.len())
        .map(|k| loss == LossTokens::All || k >= split)
        .collect();
    Ok(SftRow {
        ids: whole.into_iter().map(i64::from).collect(),
        labels,
        images: Vec::new(),
    })
}

/// A conversational completion: a list of messages, or text as one assistant message.
fn completion_messages(v: Option<&Value>) -> Result<Vec<Message>> {
    match v {
        Some(Value::String(s)) => Ok(vec![Message {
            role: "assistant".into(),
            content: s.clone().into(),
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
        images: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama")
    }

    fn tokenizer() -> HfTokenizer {
        HfTokenizer::from_dir(fixture()).unwrap()
    }

    fn read(rows: &str, format: SftFormat, loss_tokens: LossTokens, max: usize) -> Result<SftRows> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.jsonl");
        std::fs::write(&path, rows).unwrap();
        let t = Tokenization {
            format,
            loss_tokens,
            max_length: max,
        };
        read_sft_rows(&path, &tokenizer(), &t, None)
    }

    /// The decoded text of each run of consecutive target tokens.
    fn target_runs(tok: &HfTokenizer, row: &SftRow) -> Vec<String> {
        let mut runs: Vec<Vec<u32>> = vec![];
        let mut inside = false;
        for (&id, &l) in row.ids.iter().zip(&row.labels) {
            if l && !inside {
                runs.push(vec![]);
            }
            if l {
                runs.last_mut().unwrap().push(id as u32);
            }
            inside = l;
        }
        runs.iter().map(|r| tok.decode(r, false).unwrap()).collect()
    }

    const TWO_TURNS: &str = r#"{"messages": [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."}, {"role": "user", "content": "Double it."}, {"role": "assistant", "content": "It is 10."}]}"#;

    #[test]
    fn the_assistant_turns_of_a_conversation_are_the_targets() {
        let tok = tokenizer();
        let rows = read(TWO_TURNS, SftFormat::Auto, LossTokens::Completion, 1024).unwrap();
        assert_eq!(rows.format, SftFormat::Messages);
        let runs = target_runs(&tok, &rows.rows[0]);
        let eos = tok.id_to_token(tok.eos_token_id().unwrap()).unwrap();
        // Each turn's content and its end token; no user text, no role header.
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(runs[0].starts_with("2 + 3 = 5."), "{runs:?}");
        assert!(runs[1].starts_with("It is 10."), "{runs:?}");
        assert!(runs[1].ends_with(&eos), "{runs:?}");
        assert!(runs
            .iter()
            .all(|r| !r.contains("Double") && !r.contains("assistant")));
        let all = read(TWO_TURNS, SftFormat::Messages, LossTokens::All, 1024).unwrap();
        assert!(all.rows[0].labels.iter().all(|&b| b));
        assert_eq!(all.rows[0].ids, rows.rows[0].ids);
    }

    #[test]
    fn a_prompt_completion_row_trains_on_the_completion_only() {
        let tok = tokenizer();
        let row = r#"{"prompt": [{"role": "user", "content": "Say hi."}], "completion": [{"role": "assistant", "content": "Hi there."}]}"#;
        let rows = read(row, SftFormat::Auto, LossTokens::Completion, 1024).unwrap();
        assert_eq!(rows.format, SftFormat::PromptCompletion);
        let r = &rows.rows[0];
        let prompt = render(
            &tok,
            &[Message {
                role: "user".into(),
                content: "Say hi.".into(),
            }],
            true,
        )
        .unwrap();
        let prompt_ids = tok.encode(&prompt, false).unwrap();
        let first = r.labels.iter().position(|&b| b).unwrap();
        assert_eq!(first, prompt_ids.len());
        assert!(r.labels[first..].iter().all(|&b| b));
        assert!(target_runs(&tok, r)[0].starts_with("Hi there."));
        // Text prompt and completion: the EOS is appended.
        let text = read(
            r#"{"prompt": "Q: 1+1?", "completion": " 2"}"#,
            SftFormat::Auto,
            LossTokens::Completion,
            1024,
        )
        .unwrap();
        let ids = &text.rows[0].ids;
        assert_eq!(*ids.last().unwrap(), i64::from(tok.eos_token_id().unwrap()));
    }

    #[test]
    fn text_rows_train_on_every_token_and_end_with_eos() {
        let tok = tokenizer();
        let rows = read(
            r#"{"text": "one two three"}"#,
            SftFormat::Auto,
            LossTokens::Completion,
            1024,
        )
        .unwrap();
        assert_eq!(rows.format, SftFormat::Text);
        let r = &rows.rows[0];
        assert!(r.labels.iter().all(|&b| b));
        assert_eq!(
            *r.ids.last().unwrap(),
            i64::from(tok.eos_token_id().unwrap())
        );
        assert_eq!(r.targets(), r.ids.len() - 1);
    }

    #[test]
    fn long_rows_are_cut_and_rows_without_targets_dropped() {
        let two = format!("{TWO_TURNS}\n{TWO_TURNS}\n");
        let whole = read(&two, SftFormat::Messages, LossTokens::Completion, 1024).unwrap();
        let prompt_len = whole.rows[0].labels.iter().position(|&b| b).unwrap();
        let cut = read(
            &two,
            SftFormat::Messages,
            LossTokens::Completion,
            prompt_len,
        )
        .unwrap_err();
        assert!(
            format!("{cut:#}").contains("no row has a token to train on"),
            "{cut:#}"
        );
        let some = read(
            &two,
            SftFormat::Messages,
            LossTokens::Completion,
            prompt_len + 3,
        )
        .unwrap();
        assert_eq!((some.truncated, some.dropped), (2, 0));
        assert_eq!(some.rows[0].ids.len(), prompt_len + 3);
    }

    #[test]
    fn rows_of_no_known_format_are_refused_naming_the_formats() {
        let e = read(
            r#"{"question": "x"}"#,
            SftFormat::Auto,
            LossTokens::Completion,
            1024,
        )
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("`messages`") && msg.contains("`text`"),
            "{msg}"
        );
        let e = read(
            r#"{"prompt": "x"}"#,
            SftFormat::Auto,
            LossTokens::Completion,
            1024,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("row 1") && format!("{e:#}").contains("completion"),
            "{e:#}"
        );
        let e = read(
            r#"{"messages": [{"role": "assistant", "content": "hi"}]}"#,
            SftFormat::Auto,
            LossTokens::Completion,
            1024,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("starts with an assistant turn"),
            "{e:#}"
        );
    }

    #[test]
    fn a_template_that_rewrites_earlier_turns_is_refused() {
        // A template rendering only the last two messages: the conversation before a turn is
        // not a prefix of the whole.
        let dir = tempfile::tempdir().unwrap();
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(fixture().join(f), dir.path().join(f)).unwrap();
        }
        let cfg_path = dir.path().join("tokenizer_config.json");
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
        cfg["chat_template"] = Value::String(
            "{% for m in messages[-2:] %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}".into(),
        );
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let tok = HfTokenizer::from_dir(dir.path()).unwrap();
        let path = dir.path().join("rows.jsonl");
        std::fs::write(&path, TWO_TURNS).unwrap();
        let t = Tokenization {
            format: SftFormat::Auto,
            loss_tokens: LossTokens::Completion,
            max_length: 1024,
        };
        let e = read_sft_rows(&path, &tok, &t, None).unwrap_err();
        assert!(format!("{e:#}").contains("--loss-tokens all"), "{e:#}");
        let all = Tokenization {
            loss_tokens: LossTokens::All,
            ..t
        };
        assert_eq!(read_sft_rows(&path, &tok, &all, None).unwrap().len(), 1);
    }
}
