//! One row (a JSON object, whatever file it came from) to a [`PromptRecord`], by the configured columns.

use std::path::Path;

use serde_json::{Map, Value};

use super::{DataColumns, DataError, Location, Message, Prompt, PromptFormat, PromptRecord};

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
    Ok(PromptRecord {
        prompt,
        answer,
        extra: row,
    })
}

/// `[{role, content}, ...]`; the error says which message and field is wrong.
fn messages(items: &[Value]) -> Result<Vec<Message>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let obj = m
                .as_object()
                .ok_or_else(|| format!("message {i}: expected an object, found {}", kind(m)))?;
            let field = |name: &str| match obj.get(name) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(format!(
                    "message {i}: `{name}` must be a string, found {}",
                    kind(v)
                )),
                None => Err(format!("message {i}: missing `{name}`")),
            };
            Ok(Message {
                role: field("role")?,
                content: field("content")?,
            })
        })
        .collect()
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
