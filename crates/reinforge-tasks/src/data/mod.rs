//! Prompt datasets from files: JSON Lines and Parquet (as the Hugging Face Hub serves datasets), one
//! [`PromptRecord`] per row, with configurable columns: the prompt as plain text or as chat `messages`
//! (a list of `{role, content}`), an optional answer/label column, and every other column kept as JSON.
//!
//! Errors name the file, the line (JSON Lines, 1-based) or row (Parquet, 0-based index as in `datasets`), and
//! the column.

mod jsonl;
mod parquet;
mod record;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use self::jsonl::read_jsonl;
pub use self::parquet::read_parquet;

/// One chat message. Serialises as `{"role": ..., "content": ...}`, the shape chat templates expect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Content,
}

/// A message's content: a string, or a list of typed parts (`{"type": "text", "text": ...}`,
/// `{"type": "image"}`) as vision-language datasets write them (TRL's convention). Serialises back to
/// the same JSON, so a chat template sees the parts as transformers' `apply_chat_template` passes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of a list content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    Text {
        text: String,
    },
    /// The place of the row's next image (its file is in the row's `images` column).
    Image,
}

impl Content {
    /// The text: the string, or the text parts joined (images left out).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Content::Text(s) => s.as_str().into(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::Image => None,
                })
                .collect::<String>()
                .into(),
        }
    }

    /// How many `{"type": "image"}` parts it has.
    pub fn image_count(&self) -> usize {
        match self {
            Content::Text(_) => 0,
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| matches!(p, ContentPart::Image))
                .count(),
        }
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_string())
    }
}

impl Prompt {
    /// How many `{"type": "image"}` parts its messages have (0 for text).
    pub fn image_count(&self) -> usize {
        match self {
            Prompt::Text(_) => 0,
            Prompt::Messages(m) => m.iter().map(|m| m.content.image_count()).sum(),
        }
    }
}

/// A prompt: plain text, or a conversation to render with the model's chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    Messages(Vec<Message>),
}

/// One dataset row.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRecord {
    pub prompt: Prompt,
    /// The reference answer or label, when an answer column is configured. Numbers and booleans are kept as
    /// their JSON text (`42`, `0.5`, `true`).
    pub answer: Option<String>,
    /// The row's image files (the `images` column, when [`DataColumns::images`] names one), in the
    /// order of the prompt's `{"type": "image"}` parts. Relative paths are resolved against the data
    /// file's directory.
    pub images: Vec<PathBuf>,
    /// The row's other columns, as JSON.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// How to read the prompt column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptFormat {
    /// A string is text, a list is messages.
    #[default]
    Auto,
    /// Must be a string.
    Text,
    /// Must be a list of `{role, content}` objects.
    Messages,
}

/// Which columns hold what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataColumns {
    /// The prompt column (default `prompt`).
    pub prompt: String,
    pub prompt_format: PromptFormat,
    /// The answer column (default `answer`); `None` reads no answer. When set, every row must have it.
    pub answer: Option<String>,
    /// The column of image file paths (TRL's `images`: a list of paths, one per `{"type": "image"}`
    /// part of the prompt's messages, in order); `None` leaves such a column among the extras. A row
    /// without the column has no images.
    pub images: Option<String>,
}

impl Default for DataColumns {
    fn default() -> Self {
        Self {
            prompt: "prompt".into(),
            prompt_format: PromptFormat::Auto,
            answer: Some("answer".into()),
            images: None,
        }
    }
}

impl DataColumns {
    /// Prompts as chat messages from `column` (e.g. `messages`), answers from `answer`.
    pub fn messages(column: &str, answer: Option<&str>) -> Self {
        Self {
            prompt: column.into(),
            prompt_format: PromptFormat::Messages,
            answer: answer.map(Into::into),
            images: None,
        }
    }

    /// Prompts as plain text from `column`, answers from `answer`.
    pub fn text(column: &str, answer: Option<&str>) -> Self {
        Self {
            prompt: column.into(),
            prompt_format: PromptFormat::Text,
            answer: answer.map(Into::into),
            images: None,
        }
    }
}

/// Where in a file a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// 1-based line of a JSON Lines file.
    Line(usize),
    /// 0-based row index of a Parquet file.
    Row(usize),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Line(n) => write!(f, "line {n}"),
            Location::Row(n) => write!(f, "row {n}"),
        }
    }
}

/// Errors of the dataset readers.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON Lines line is not valid JSON or not an object.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A column is missing or has a value of the wrong shape.
    #[error("{}: {location}: column `{column}`: {message}", path.display())]
    Column {
        path: PathBuf,
        location: Location,
        column: String,
        message: String,
    },
    /// The Parquet reader failed (bad file, unsupported codec or type).
    #[error("{}: {}parquet: {message}", path.display(), location.map(|l| format!("{l}: ")).unwrap_or_default())]
    Parquet {
        path: PathBuf,
        location: Option<Location>,
        message: String,
    },
    /// The file extension is not one the readers know.
    #[error("{}: unknown dataset format (expected .jsonl or .parquet)", path.display())]
    UnknownFormat { path: PathBuf },
}

/// Reads a dataset by extension: `.jsonl` / `.json` (JSON Lines) or `.parquet`.
pub fn read_records(path: &Path, columns: &DataColumns) -> Result<Vec<PromptRecord>, DataError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") | Some("json") | Some("ndjson") => read_jsonl(path, columns),
        Some("parquet") => read_parquet(path, columns),
        _ => Err(DataError::UnknownFormat {
            path: path.to_path_buf(),
        }),
    }
}
