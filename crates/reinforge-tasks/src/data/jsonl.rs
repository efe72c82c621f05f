//! JSON Lines: one JSON object per line; blank lines are skipped.

use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::record::{kind, to_record};
use super::{DataColumns, DataError, Location, PromptRecord};

/// Reads every record of a JSON Lines file.
pub fn read_jsonl(path: &Path, columns: &DataColumns) -> Result<Vec<PromptRecord>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let reader = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| {
            let mut message = e.to_string();
            if let Some(cut) = message.rfind(" at line ") {
                message.truncate(cut);
            }
            DataError::Json {
                path: path.to_path_buf(),
                line: n,
                column: e.column(),
                message,
            }
        })?;
        let Value::Object(row) = value else {
            return Err(DataError::Json {
                path: path.to_path_buf(),
                line: n,
                column: 1,
                message: format!("expected a JSON object, found {}", kind(&value)),
            });
        };
        out.push(to_record(path, Location::Line(n), row, columns)?);
    }
    Ok(out)
}
