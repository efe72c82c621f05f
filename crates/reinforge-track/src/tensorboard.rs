//! TensorBoard event files: TFRecord framing (length, masked CRC32C of the length, data,
//! masked CRC32C of the data) of `tensorflow.Event` protobufs.
//!
//! The few protobuf fields are encoded by hand rather than through `prost`: an `Event` with
//! `wall_time`, `step`, `file_version` or a `Summary` whose values are scalar `TensorProto`s
//! (float64, so TensorBoard reads back the very values of `metrics.jsonl`, which a
//! `simple_value` float32 would round) tagged with the `scalars` plugin. That is six message
//! types and a dozen fields, against generated code and a build step for the whole schema.
//! Field numbers: tensorflow/core/util/event.proto, framework/summary.proto, tensor.proto.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// `DT_DOUBLE` of tensorflow/core/framework/types.proto.
const DT_DOUBLE: u64 = 2;
/// `DATA_CLASS_SCALAR` of summary.proto.
const DATA_CLASS_SCALAR: u64 = 1;

/// An open event file.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates `dir/events.out.tfevents.<seconds>.<host>` and writes its version record.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let now = wall_time();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| {
                !h.is_empty()
                    && h.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            })
            .unwrap_or_else(|| "localhost".into());
        // A process's writers (one per phase) differ by their counter, as TensorBoard's own
        // `<time>.<host>.<pid>.<uid>` names do; create_new never overwrites another's file.
        static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let uid = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(
            "events.out.tfevents.{}.{host}.{}.{uid}",
            now as u64,
            std::process::id()
        ));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        let mut w = Self {
            path,
            out: BufWriter::new(file),
        };
        let mut event = Vec::new();
        double_field(&mut event, 1, now);
        bytes_field(&mut event, 3, b"brain.Event:2");
        w.record(&event)?;
        w.flush()?;
        Ok(w)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One event at `step` holding every `(tag, value)` as a scalar.
    pub fn scalars(&mut self, step: i64, values: &[(String, f64)]) -> Result<()> {
        let mut summary = Vec::new();
        for (tag, value) in values {
            bytes_field(&mut summary, 1, &scalar_value(tag, *value));
        }
        let mut event = Vec::new();
        double_field(&mut event, 1, wall_time());
        varint_field(&mut event, 2, step as u64);
        bytes_field(&mut event, 5, &summary);
        self.record(&event)?;
        self.flush()
    }

    /// Flushes to the file, so TensorBoard sees every step written so far.
    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// One TFRecord.
    fn record(&mut self, data: &[u8]) -> Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        let mut frame = Vec::with_capacity(data.len() + 16);
        frame.extend_from_slice(&len);
        frame.extend_from_slice(&masked_crc(&len).to_le_bytes());
        frame.extend_from_slice(data);
        frame.extend_from_slice(&masked_crc(data).to_le_bytes());
        self.out
            .write_all(&frame)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// `Summary.Value { tag, metadata: { plugin_data: { plugin_name: "scalars" }, data_class:
/// SCALAR }, tensor: { dtype: DT_DOUBLE, tensor_shape: {}, double_val: [value] } }`.
fn scalar_value(tag: &str, value: f64) -> Vec<u8> {
    let mut plugin = Vec::new();
    bytes_field(&mut plugin, 1, b"scalars");
    let mut metadata = Vec::new();
    bytes_field(&mut metadata, 1, &plugin);
    varint_field(&mut metadata, 4, DATA_CLASS_SCALAR);
    let mut tensor = Vec::new();
    varint_field(&mut tensor, 1, DT_DOUBLE);
    bytes_field(&mut tensor, 2, &[]);
    // double_val = 6, packed.
    bytes_field(&mut tensor, 6, &value.to_le_bytes());
    let mut v = Vec::new();
    bytes_field(&mut v, 1, tag.as_bytes());
    bytes_field(&mut v, 8, &tensor);
    bytes_field(&mut v, 9, &metadata);
    v
}

/// Seconds since the Unix epoch.
fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// TFRecord's masked CRC32C: rotated right by 15 bits plus a constant.
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn varint_field(out: &mut Vec<u8>, field: u64, x: u64) {
    varint(out, field << 3);
    varint(out, x);
}

fn double_field(out: &mut Vec<u8>, field: u64, x: f64) {
    varint(out, (field << 3) | 1);
    out.extend_from_slice(&x.to_le_bytes());
}

fn bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, (field << 3) | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value_and_mask() {
        // CRC-32C of "123456789" is 0xE3069283 (RFC 3720, B.4).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        // TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked out by hand.
        assert_eq!(masked_crc(b"123456789"), 0xC78A_B0E5);
    }

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
    }

    #[test]
    fn records_frame_their_length_and_data() {
        let dir = std::env::temp_dir().join(format!("reinforge-track-{}", std::process::id()));
        let mut w = EventWriter::create(&dir).unwrap();
        w.scalars(3, &[("a/b".into(), 0.5)]).unwrap();
        let bytes = std::fs::read(w.path()).unwrap();
        let mut at = 0;
        let mut records = 0;
        while at < bytes.len() {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(crc, masked_crc(&bytes[at..at + 8]));
            let data = &bytes[at + 12..at + 12 + len];
            let dcrc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(dcrc, masked_crc(data));
            at += 16 + len;
            records += 1;
        }
        assert_eq!(records, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
