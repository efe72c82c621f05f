//! JSONL output to a file (written whole or not at all) or to standard output.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// Where JSONL lines go. A file is written to `<name>.partial` and renamed when complete,
/// so a crash never leaves a truncated file under the requested name.
pub struct Output {
    sink: Box<dyn Write>,
    file: Option<(PathBuf, PathBuf)>,
}

impl Output {
    /// Standard output when `path` is `None`.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        Ok(match path {
            None => Self {
                sink: Box::new(BufWriter::new(std::io::stdout().lock())),
                file: None,
            },
            Some(p) => {
                let tmp = p.with_extension("partial");
                let f = std::fs::File::create(&tmp)
                    .with_context(|| format!("creating {}", tmp.display()))?;
                Self {
                    sink: Box::new(BufWriter::new(f)),
                    file: Some((tmp, p.to_path_buf())),
                }
            }
        })
    }

    /// Writes one JSON line.
    pub fn write<T: Serialize>(&mut self, line: &T) -> Result<()> {
        serde_json::to_writer(&mut self.sink, line)?;
        self.sink.write_all(b"\n")?;
        Ok(())
    }

    /// Flushes and, for a file, moves it to its final name.
    pub fn finish(mut self) -> Result<()> {
        self.sink.flush()?;
        drop(self.sink);
        if let Some((tmp, dst)) = self.file {
            std::fs::rename(&tmp, &dst)
                .with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))?;
        }
        Ok(())
    }
}
