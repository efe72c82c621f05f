//! The one device check, on machines without a GPU: every command that runs a model refuses
//! `cuda` before building anything, with exit code 2 and a message saying what was found.

use crate::common;

use common::bad::{battles, fixture_model, run_in, Files};

/// A CUDA device on a machine without one: every command that runs a model checks it once,
/// before building any model or creating any output, and exits 2 naming the device, what was
/// found (backend, device count, driver) and what to do; never libtorch's panic. Skipped where
/// an NVIDIA driver is loaded (there `scripts/gpu_check.sh` runs these commands for real).
#[test]
fn cuda_without_a_gpu_is_refused_before_any_model_by_every_command() {
    if std::path::Path::new("/proc/driver/nvidia/version").exists() {
        common::real_model::skip("an NVIDIA driver is loaded; scripts/gpu_check.sh covers CUDA");
        return;
    }
    let f = Files::new();
    let model = fixture_model();
    let m = model.as_str();
    let pairs = f.write(
        "pairs.jsonl",
        "{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}\n{\"prompt\": \"q\", \"chosen\": \"c\", \"rejected\": \"d\"}\n",
    );
    let unpaired = f.write(
        "kto.jsonl",
        "{\"prompt\": \"p\", \"completion\": \"a\", \"label\": true}\n{\"prompt\": \"q\", \"completion\": \"b\", \"label\": false}\n",
    );
    let prompts = f.write(
        "prompts.jsonl",
        "{\"prompt\": \"2+3=\", \"answer\": \"5\"}\n{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n",
    );
    let scored = f.write(
        "scored.jsonl",
        "{\"prompt\": \"p\", \"completion\": \"a\", \"response\": \"a\"}\n",
    );
    let battles = battles();
    let out = f.path("out");
    // The working directory of every case: `train` writes its run to `runs/` under it by
    // default, so an empty `runs/` here after each case means nothing was created.
    let cwd = f.path("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let ckpt = f.path("run/checkpoints/final");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::write(f.path("run/config.toml"), "seed = 0\n").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["train", "--set", "device=cuda"],
        vec![
            "train",
            "--model",
            m,
            "--data",
            &prompts,
            "--set",
            "device=cuda:1",
        ],
        vec![
            "train-rm", "--model", m, "--data", &pairs, "--output", &out, "--device", "cuda",
        ],
        vec![
            "train-p2l",
            "--model",
            m,
            "--battles",
            &battles,
            "--output",
            &out,
            "--device",
            "cuda",
        ],
        vec!["judge", "--model", m, "--data", &pairs, "--device", "cuda"],
        vec![
            "generate", "--model", m, "--prompt", "hi", "--device", "cuda",
        ],
        vec![
            "score", "--model", m, "--input", &scored, "--device", "cuda",
        ],
        vec![
            "score-rm", "--model", m, "--data", &scored, "--device", "cuda",
        ],
        vec![
            "serve",
            "--no-sandbox",
            "--model",
            m,
            "--port",
            "0",
            "--device",
            "cuda",
        ],
        vec!["bench", "--iterations", "1", "--set", "device=cuda"],
        vec!["eval", "--checkpoint", &ckpt, "--device", "cuda"],
    ];
    let preference = ["train-dpo", "train-orpo", "train-kto"].map(|cmd| {
        let data = if cmd == "train-kto" {
            &unpaired
        } else {
            &pairs
        };
        vec![
            cmd, "--model", m, "--data", data, "--output", &out, "--device", "cuda",
        ]
    });
    for args in cases.into_iter().chain(preference) {
        let (code, err) = run_in(std::path::Path::new(&cwd), &args);
        assert_eq!(code, Some(2), "{args:?}:\n{err}");
        assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
        for needle in [
            "is not available",
            "CUDA devices: 0",
            "NVIDIA driver",
            "`cpu`",
        ] {
            assert!(
                err.contains(needle),
                "{args:?}: stderr lacks {needle:?}:\n{err}"
            );
        }
        assert!(
            err.contains("cuda:0") || err.contains("cuda:1"),
            "{args:?}:\n{err}"
        );
        assert!(
            !std::path::Path::new(&out).exists()
                && !std::path::Path::new(&cwd).join("runs").exists(),
            "{args:?} left output behind before failing"
        );
    }
}

/// The shared libraries `binary` names in its dynamic section (`NEEDED`), read by `readelf -d`
/// (binutils, which the C compiler the build needs brings along).
fn needed(binary: &str) -> Vec<String> {
    let out = std::process::Command::new("readelf")
        .args(["-d", binary])
        .output()
        .expect("run readelf (binutils) on the binary");
    assert!(out.status.success(), "readelf -d {binary} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect()
}

/// The release binary links libtorch's CUDA backend whenever the installed libtorch has one:
/// without `libtorch_cuda.so` among its `NEEDED` libraries the backend is never loaded and
/// every CUDA device reads as absent on a GPU machine (the linker drops a library no symbol is
/// used from). This is the CPU-side guard of that link, which `runtime::CudaProbe` only sees
/// on a machine with a GPU.
#[test]
fn the_binary_links_libtorch_cuda_whenever_libtorch_has_it() {
    let libtorch = common::root().join(".venv/libtorch/lib");
    let libs = needed(env!("CARGO_BIN_EXE_reinforge"));
    // The parse is real: the CPU library is always linked.
    assert!(
        libs.iter().any(|l| l == "libtorch_cpu.so"),
        "NEEDED lacks libtorch_cpu.so: {libs:?}"
    );
    let linked = libs.iter().any(|l| l == "libtorch_cuda.so");
    if libtorch.join("libtorch_cuda.so").is_file() {
        assert!(
            linked,
            "{} has libtorch_cuda.so but the binary does not link it: {libs:?}",
            libtorch.display()
        );
    } else {
        assert!(
            !linked,
            "linked to a libtorch_cuda.so that {} lacks",
            libtorch.display()
        );
    }
}
