//! Parquet through the `parquet` crate's record API: each row becomes a JSON object (nested lists and
//! structs included, e.g. a `messages` column of `list<struct<role, content>>` as pyarrow and `datasets`
//! write it), then goes through the same column handling as JSON Lines.

use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

use super::record::to_record;
use super::{DataColumns, DataError, Location, PromptRecord};

/// Reads every record of a Parquet file.
pub fn read_parquet(path: &Path, columns: &DataColumns) -> Result<Vec<PromptRecord>, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let perr = |location: Option<Location>, e: parquet::errors::ParquetError| DataError::Parquet {
        path: path.to_path_buf(),
        location,
        message: e.to_string(),
    };
    let reader = SerializedFileReader::new(file).map_err(|e| perr(None, e))?;
    let rows = reader.get_row_iter(None).map_err(|e| perr(None, e))?;
    let mut out = Vec::with_capacity(reader.metadata().file_metadata().num_rows().max(0) as usize);
    for (i, row) in rows.enumerate() {
        let loc = Location::Row(i);
        let row = row.map_err(|e| perr(Some(loc), e))?;
        let Value::Object(map) = row.to_json_value() else {
            return Err(DataError::Parquet {
                path: path.to_path_buf(),
                location: Some(loc),
                message: "row did not convert to a JSON object".into(),
            });
        };
        out.push(to_record(path, loc, map, columns)?);
    }
    Ok(out)
}
