//! Errors of the checkpoint-text and image loaders, each naming the file (and line, column or template line)
//! at fault, or the batch row for the multimodal layout, and the small file readers that produce them.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while loading or using a checkpoint's text files or images.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    /// A file the loader needs does not exist.
    #[error("missing {what}: {} does not exist", path.display())]
    MissingFile { path: PathBuf, what: &'static str },
    /// A file exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON file is malformed or has a field of the wrong type.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A field has a value the loader cannot use (e.g. a special token missing from the vocabulary).
    #[error("{}: field `{field}`: {message}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// The `tokenizers` crate rejected `tokenizer.json`, or failed to encode/decode.
    #[error("tokenizer {}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    /// The checkpoint has no chat template (none in chat_template.jinja or tokenizer_config.json).
    #[error("{}: no chat template (looked for chat_template.jinja, additional_chat_templates/*.jinja and `chat_template` in tokenizer_config.json)", dir.display())]
    NoChatTemplate { dir: PathBuf },
    /// A named chat template was asked for but does not exist, or none is the default.
    #[error("chat template {wanted}: {message}; available: {}", available.join(", "))]
    TemplateChoice {
        wanted: String,
        message: String,
        available: Vec<String>,
    },
    /// Compiling or rendering a chat template failed (syntax error, `raise_exception`, bad value).
    #[error("chat template {template}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Template {
        template: String,
        line: Option<usize>,
        message: String,
    },
    /// An image file is corrupt, truncated, in an unsupported format or pixel mode, or of a size the
    /// processor cannot use.
    #[error("image {}: {message}", path.display())]
    Image { path: PathBuf, message: String },
    /// An image's header declares more pixels than the decode cap; refused before decoding.
    #[error("image {}: {width}x{height} is {} pixels, above the decode cap of {max_pixels}", path.display(), *width as u64 * *height as u64)]
    ImageTooLarge {
        path: PathBuf,
        width: u32,
        height: u32,
        max_pixels: u64,
    },
    /// A batch row's image-placeholder tokens do not match the grids of the images assigned to it.
    #[error("row {row}: {message}")]
    ImageTokens { row: usize, message: String },
    /// Inputs of a layout or resize function that cannot describe a valid multimodal batch
    /// (grid sides not divisible by the merge size, mismatched lengths, unused grids, extreme aspect).
    #[error("multimodal layout: {message}")]
    Layout { message: String },
}

/// Result alias of this crate.
pub type Result<T, E = HfError> = std::result::Result<T, E>;

impl HfError {
    pub(crate) fn template(template: &str, err: &minijinja::Error) -> Self {
        // `detail` is the message given to `raise_exception` or the engine's explanation; the kind is added when
        // there is no detail so the message is never empty.
        let message = match err.detail() {
            Some(d) => d.to_string(),
            None => err.kind().to_string(),
        };
        HfError::Template {
            template: template.to_string(),
            line: err.line(),
            message,
        }
    }
}

/// Reads a text file, mapping "not found" to [`HfError::MissingFile`] that says what the file is for.
pub(crate) fn read_text(path: &Path, what: &'static str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            HfError::MissingFile {
                path: path.to_path_buf(),
                what,
            }
        } else {
            HfError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Parses JSON text, reporting the file, line and column of a syntax or type error.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        // serde_json appends " at line L column C"; the position is already in the error's prefix.
        let mut message = e.to_string();
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
        HfError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message,
        }
    })
}

/// Reads and parses a JSON file ([`read_text`] + [`parse_json`]).
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<T> {
    parse_json(path, &read_text(path, what)?)
}

/// Reads an optional JSON file: `Ok(None)` when it does not exist, an error when it exists but is malformed.
pub(crate) fn read_json_opt<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match read_text(path, "") {
        Ok(text) => parse_json(path, &text).map(Some),
        Err(HfError::MissingFile { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
