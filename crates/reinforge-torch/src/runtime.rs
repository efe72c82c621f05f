//! Process-wide libtorch settings the binary needs without naming `tch`: the device a run
//! uses, the sampler's seed and the CPU thread count.

use anyhow::{bail, Result};
use tch::Device;

/// Parses `cpu`, `cuda`, `cuda:N`.
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(i)) => Ok(Device::Cuda(i)),
            _ => bail!("device must be cpu, cuda or cuda:N, got {s:?}"),
        },
    }
}

/// Seeds libtorch's default generator (used by sampling).
pub fn manual_seed(seed: i64) {
    tch::manual_seed(seed);
}

/// Sets libtorch's intra-op CPU threads; 0 keeps libtorch's default.
pub fn set_threads(threads: usize) {
    if threads > 0 {
        tch::set_num_threads(threads as i32);
    }
}

/// libtorch's intra-op CPU threads.
pub fn threads() -> i32 {
    tch::get_num_threads()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_bad_ones_are_named() {
        assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
        assert_eq!(parse_device("cuda").unwrap(), Device::Cuda(0));
        assert_eq!(parse_device("cuda:3").unwrap(), Device::Cuda(3));
        let err = parse_device("gpu").unwrap_err().to_string();
        assert!(err.contains("\"gpu\""), "{err}");
        assert!(parse_device("cuda:x").is_err());
    }
}
