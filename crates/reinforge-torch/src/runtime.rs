//! Process-wide libtorch settings the binary needs without naming `tch`: the device a run
//! uses (checked once, before any model is built), the sampler's seed and the CPU thread count.

use anyhow::{bail, Result};
use tch::Device;

/// Parses `cpu`, `cuda`, `cuda:N` (syntax only; [`resolve_device`] also checks the machine).
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        // host: the device named `cpu`.
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(i)) => Ok(Device::Cuda(i)),
            _ => bail!("device must be cpu, cuda or cuda:N, got {s:?}"),
        },
    }
}

/// The device `spec` names, checked against what this process can use; `origin` says where
/// the value came from (`"--device"`, `"config key `device`"`) for the error.
///
/// A bare `cuda` in a data-parallel job (torchrun's `LOCAL_RANK` set) means `cuda:LOCAL_RANK`,
/// one GPU per local rank as torchrun's users expect. A CUDA device this process cannot use
/// (no CUDA backend linked, no driver, no device N) is an error naming what was found and what
/// to do, never a panic inside libtorch.
pub fn resolve_device(spec: &str, origin: &str) -> Result<Device> {
    let local_rank = std::env::var("LOCAL_RANK").ok();
    let device = match (parse_device(spec), spec, local_rank.as_deref()) {
        (Ok(Device::Cuda(0)), "cuda", Some(r)) => match r.parse::<usize>() {
            Ok(r) => Device::Cuda(r),
            Err(_) => bail!("LOCAL_RANK={r:?} is not a number (set by torchrun)"),
        },
        (Ok(d), _, _) => d,
        (Err(e), _, _) => bail!("{origin}: {e}"),
    };
    if let Device::Cuda(n) = device {
        check_cuda(n, &CudaProbe::read(), origin)?;
    }
    Ok(device)
}

/// What this process found of CUDA: the facts [`check_cuda`] decides on.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaProbe {
    /// libtorch's CUDA backend (`libtorch_cuda.so`) is loaded into this process.
    pub backend_linked: bool,
    /// The CUDA runtime version libtorch was built with (e.g. 13000), when linked.
    pub runtime_version: Option<i64>,
    /// CUDA devices libtorch sees.
    pub device_count: usize,
    /// The NVIDIA kernel driver's version line, when a driver is loaded.
    pub driver: Option<String>,
}

impl CudaProbe {
    /// Reads the facts of this process and machine.
    pub fn read() -> Self {
        let backend_linked = cuda_backend_linked();
        Self {
            backend_linked,
            runtime_version: backend_linked.then(tch::utils::version_cudart),
            device_count: if backend_linked {
                tch::Cuda::device_count().max(0) as usize
            } else {
                0
            },
            driver: nvidia_driver(),
        }
    }

    /// One line for messages and reports: backend, runtime, devices, driver.
    pub fn summary(&self) -> String {
        let backend = match (self.backend_linked, self.runtime_version) {
            (false, _) => "libtorch CUDA backend: not linked".to_string(),
            (true, Some(v)) if v > 0 => {
                format!(
                    "libtorch CUDA backend: linked (CUDA {}.{})",
                    v / 1000,
                    v % 1000 / 10
                )
            }
            (true, _) => "libtorch CUDA backend: linked".to_string(),
        };
        let driver = self
            .driver
            .as_deref()
            .unwrap_or("none (no /proc/driver/nvidia/version)");
        format!(
            "{backend}; CUDA devices: {}; NVIDIA driver: {driver}",
            self.device_count
        )
    }
}

/// Whether CUDA device `n` is usable given `probe`; the error names the device, what was
/// found and what to do.
pub fn check_cuda(n: usize, probe: &CudaProbe, origin: &str) -> Result<()> {
    if probe.backend_linked && n < probe.device_count {
        return Ok(());
    }
    let advice = if !probe.backend_linked {
        "this build's libtorch has no CUDA backend: install the CUDA torch wheel \
         (scripts/setup.sh installs torch==2.11.0, which is +cu130) and rebuild, or use `cpu`"
    } else if probe.driver.is_none() || probe.device_count == 0 {
        "run on a machine with an NVIDIA GPU and its driver (check `nvidia-smi` and \
         CUDA_VISIBLE_DEVICES), or use `cpu`"
    } else {
        "pick an existing device (cuda:0 .. cuda:<count-1>; under torchrun use `cuda`, which \
         means cuda:LOCAL_RANK), or use `cpu`"
    };
    bail!(
        "{origin}: device cuda:{n} is not available ({}); {advice}",
        probe.summary()
    )
}

/// Whether `libtorch_cuda.so` is mapped into this process (it registers libtorch's CUDA
/// kernels when loaded; a binary linked without it has none). Read from `/proc/self/maps`
/// because libtorch's own `hasCUDA()` is also false when the backend is there but no device is.
fn cuda_backend_linked() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .map(|maps| maps.contains("libtorch_cuda.so"))
        .unwrap_or(false)
}

/// The NVIDIA kernel module's version, from its first line in `/proc/driver/nvidia/version`.
fn nvidia_driver() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?.trim();
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 ..." -> "550.54.15"
    let version = line
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'));
    Some(version.unwrap_or(line).to_string())
}

/// Seeds libtorch's default generator (used by sampling), while no seeded section
/// ([`with_seed`]) is running on another thread.
pub fn manual_seed(seed: i64) {
    with_generator(|| tch::manual_seed(seed));
}

/// Seeds libtorch's default generator with `seed` and runs `f` holding the generator
/// ([`with_generator`]): the generator is one per process, so two threads each seeding and
/// drawing (the Tinker server's sampling thread and its training thread initialising LoRA
/// adapters; two tests of one binary each building a model from a seed) would interleave
/// their draws and neither would be reproducible.
pub fn with_seed<R>(seed: i64, f: impl FnOnce() -> R) -> R {
    with_generator(|| {
        tch::manual_seed(seed);
        f()
    })
}

/// Runs `f` holding libtorch's default generator: no other thread seeds it or draws from it
/// through this function meanwhile. Every draw of the library (weight initialisation,
/// multinomial sampling, Clip-Cov's permutation) goes through it, so an unseeded draw on one
/// thread cannot land inside another thread's seeded section. Re-entrant on one thread (a
/// seeded section may build a model, which draws); a hand-written lock because std's `Mutex`
/// is not re-entrant and the flag it needs is one thread-local.
pub fn with_generator<R>(f: impl FnOnce() -> R) -> R {
    use std::cell::Cell;
    use std::sync::{Mutex, MutexGuard};
    static GENERATOR: Mutex<()> = Mutex::new(());
    thread_local! {
        static HELD: Cell<bool> = const { Cell::new(false) };
    }
    /// Clears the flag before the lock is released, also when `f` panics.
    struct Held(#[allow(dead_code)] MutexGuard<'static, ()>);
    impl Drop for Held {
        fn drop(&mut self) {
            HELD.with(|h| h.set(false));
        }
    }
    if HELD.with(Cell::get) {
        return f();
    }
    let held = Held(GENERATOR.lock().unwrap_or_else(|e| e.into_inner()));
    HELD.with(|h| h.set(true));
    let out = f();
    drop(held);
    out
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

    /// A seeded section draws the same numbers whether or not another thread keeps drawing
    /// meanwhile (CI once saw two LoRA models built from one seed differ because a concurrent
    /// test seeded and drew in between), and sections nest on one thread.
    #[test]
    fn a_seeded_section_is_not_interleaved_with_other_threads_draws() {
        let section = || {
            with_seed(41, || {
                let first = tch::Tensor::rand([8], (tch::Kind::Float, Device::Cpu));
                std::thread::sleep(std::time::Duration::from_millis(30));
                // Nested: a model built inside a seeded section draws under the same hold.
                let second =
                    with_generator(|| tch::Tensor::rand([8], (tch::Kind::Float, Device::Cpu)));
                Vec::<f32>::try_from(tch::Tensor::cat(&[first, second], 0)).unwrap()
            })
        };
        let alone = section();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let noise = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut draws = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = with_seed(draws as i64, || {
                        tch::Tensor::rand([4], (tch::Kind::Float, Device::Cpu))
                    });
                    draws += 1;
                }
                draws
            })
        };
        let contended: Vec<Vec<f32>> = (0..3).map(|_| section()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(noise.join().unwrap() > 0, "the other thread drew meanwhile");
        for c in contended {
            assert_eq!(c, alone);
        }
    }

    #[test]
    fn devices_parse_and_bad_ones_are_named() {
        assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
        assert_eq!(parse_device("cuda").unwrap(), Device::Cuda(0));
        assert_eq!(parse_device("cuda:3").unwrap(), Device::Cuda(3));
        let err = parse_device("gpu").unwrap_err().to_string();
        assert!(err.contains("\"gpu\""), "{err}");
        assert!(parse_device("cuda:x").is_err());
    }

    fn probe(linked: bool, count: usize, driver: Option<&str>) -> CudaProbe {
        CudaProbe {
            backend_linked: linked,
            runtime_version: linked.then_some(13000),
            device_count: count,
            driver: driver.map(str::to_string),
        }
    }

    #[test]
    fn each_missing_piece_of_cuda_is_named_with_what_to_do() {
        let err = check_cuda(0, &probe(false, 0, None), "--device")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--device: device cuda:0"), "{err}");
        assert!(
            err.contains("not linked") && err.contains("no CUDA backend"),
            "{err}"
        );

        let err = check_cuda(0, &probe(true, 0, None), "config key `device`")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CUDA 13.0") && err.contains("CUDA devices: 0"),
            "{err}"
        );
        assert!(
            err.contains("NVIDIA driver: none") && err.contains("nvidia-smi"),
            "{err}"
        );

        let err = check_cuda(2, &probe(true, 2, Some("550.54.15")), "--device")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cuda:2") && err.contains("550.54.15"), "{err}");
        assert!(err.contains("cuda:0 .. cuda:<count-1>"), "{err}");

        assert!(check_cuda(1, &probe(true, 2, Some("550.54.15")), "--device").is_ok());
    }

    #[test]
    fn cpu_is_always_available_and_bad_names_say_where_they_came_from() {
        assert_eq!(resolve_device("cpu", "--device").unwrap(), Device::Cpu);
        let err = resolve_device("gpu", "config key `device`")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config key `device`:"), "{err}");
    }

    #[test]
    fn this_process_probe_agrees_with_libtorch() {
        let p = CudaProbe::read();
        // Whatever the machine, a device libtorch counts is one the probe counts, and no
        // device is counted without the backend.
        assert_eq!(p.device_count > 0, tch::Cuda::is_available());
        assert!(p.backend_linked || p.device_count == 0);
    }
}
