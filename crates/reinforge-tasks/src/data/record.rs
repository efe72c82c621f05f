//! One row (a JSON object, whatever file it came from) to a [`PromptRecord`], by the configured columns.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{
    Content, ContentPart, DataColumns, DataError, Location, Message, Prompt, PromptFormat,
    PromptRecord,
};

/// Builds the record of one row; errors name `path`, `loc` and the column.
pub(super) fn to_record(
    path: &Path,
    loc: Location,
    mut row: Map<String, Value>,
    columns: &DataColumns,
) -> Result<PromptRecord, DataError> {
    let err = |column: &str, message: String| DataError::Column {
        path: path.to_path_buf(),
        location: loc,
        column: column.to_string(),
        message,
    };
    let present = |row: &Map<String, Value>| {
        let mut keys: Vec<&str> = row.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys.join(", ")
    };
    let prompt_value = match row.remove(&columns.prompt) {
        Some(v) if !v.is_null() => v,
        Some(_) => return Err(err(&columns.prompt, "is null".into())),
        None => {
            return Err(err(
                &columns.prompt,
                format!("missing (columns present: {})", present(&row)),
            ))
        }
    };
    let prompt = match (&prompt_value, columns.prompt_format) {
        (Value::String(s), PromptFormat::Auto | PromptFormat::Text) => Prompt::Text(s.clone()),
        (Value::Array(items), PromptFormat::Auto | PromptFormat::Messages) => {
            Prompt::Messages(messages(items).map_err(|m| err(&columns.prompt, m))?)
        }
        (v, PromptFormat::Text) => {
            return Err(err(
                &columns.prompt,
                format!("expected text, found {}", kind(v)),
            ))
        }
        (v, _) => {
            return Err(err(
                &columns.prompt,
                format!(
                    "expected a list of {{role, content}} messages{}, found {}",
                    if columns.prompt_format == PromptFormat::Auto {
                        " or text"
                    } else {
                        ""
                    },
                    kind(v)
                ),
            ))
        }
    };
    let answer = match &columns.answer {
        None => None,
        Some(col) => match row.remove(col) {
            Some(Value::String(s)) => Some(s),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Some(v.to_string()),
            Some(v) => {
                return Err(err(
                    col,
                    format!(
                        "expected a string, number or boolean answer, found {}",
                        kind(&v)
                    ),
                ))
            }
            None => {
                return Err(err(
                    col,
                    format!("missing (columns present: {})", present(&row)),
                ))
            }
        },
    };
    let images = match &columns.images {
        // A reader that does not take images refuses image parts rather than train or
        // evaluate on the text alone.
        None if prompt.image_count() > 0 => {
            return Err(err(
                &columns.prompt,
                "has {\"type\": \"image\"} parts, but only `reinforge score`, `reinforge generate`, `reinforge train-sft` and `reinforge train --data` read images so far (docs/multimodal.md)".to_string(),
            ))
        }
        None => Vec::new(),
        Some(col) => {
            let images = image_paths(path, row.remove(col)).map_err(|m| err(col, m))?;
            let parts = prompt.image_count();
            if parts != images.len() {
                return Err(err(
                    col,
                    format!(
                        "{} image file{} for {parts} {{\"type\": \"image\"}} part{} of `{}`",
                        images.len(),
                        if images.len() == 1 { "" } else { "s" },
                        if parts == 1 { "" } else { "s" },
                        columns.prompt
                    ),
                ));
            }
            images
        }
    };
    Ok(PromptRecord {
        prompt,
        answer,
        images,
        extra: row,
    })
}

/// The `images` column: absent or null (no images), or a list of file paths, relative ones resolved
/// against the directory of the data file `path`.
fn image_paths(path: &Path, value: Option<Value>) -> Result<Vec<PathBuf>, String> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(v) => {
            return Err(format!(
                "expected a list of image file paths, found {}",
                kind(&v)
            ))
        }
    };
    let base = path.parent().unwrap_or(Path::new(""));
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if !s.is_empty() => Ok(base.join(s)),
            Value::Object(o) if o.contains_key("bytes") => Err(format!(
                "image {i}: embedded image bytes are not read; give the file's path"
            )),
            v => Err(format!(
                "image {i}: expected a file path, found {}",
                if v.as_str().is_some() {
                    "an empty string"
                } else {
                    kind(v)
                }
            )),
        })
        .collect()
}

/// `[{role, content}, ...]`, each content a string or a list of parts; the error says which message
/// and field is wrong.
fn messages(items: &[Value]) -> Result<Vec<Message>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let obj = m
                .as_object()
                .ok_or_else(|| format!("message {i}: expected an object, found {}", kind(m)))?;
            let role = match obj.get("role") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => {
                    return Err(format!(
                        "message {i}: `role` must be a string, found {}",
                        kind(v)
                    ))
                }
                None => return Err(format!("message {i}: missing `role`")),
            };
            let content = match obj.get("content") {
                Some(Value::String(s)) => Content::Text(s.clone()),
                Some(Value::Array(parts)) => Content::Parts(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(j, p)| {
                            part(p).map_err(|e| format!("message {i}: content[{j}]: {e}"))
                        })
                        .collect::<Result<_, _>>()?,
                ),
                Some(v) => {
                    return Err(format!(
                        "message {i}: `content` must be a string or a list of parts, found {}",
                        kind(v)
                    ))
                }
                None => return Err(format!("message {i}: missing `content`")),
            };
            Ok(Message { role, content })
        })
        .collect()
}

/// One content part: `{"type": "text", "text": ...}` or `{"type": "image"}` (the file comes from the
/// row's images column, not the part).
fn part(p: &Value) -> Result<ContentPart, String> {
    let obj = p
        .as_object()
        .ok_or_else(|| format!("expected an object, found {}", kind(p)))?;
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => match obj.get("text") {
            Some(Value::String(t)) => Ok(ContentPart::Text { text: t.clone() }),
            Some(v) => Err(format!("`text` must be a string, found {}", kind(v))),
            None => Err("missing `text`".into()),
        },
        Some("image") => match obj.keys().find(|k| *k != "type") {
            None => Ok(ContentPart::Image),
            Some(k) => Err(format!(
                "an image part is {{\"type\": \"image\"}} alone (found `{k}`); list the files in the `images` column"
            )),
        },
        Some(t) => Err(format!(
            "unsupported part type `{t}` (expected \"text\" or \"image\")"
        )),
        None => Err("missing `type`".into()),
    }
}

/// A JSON value's type for error messages.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
