//! The one device check, on machines without a GPU: every command that runs a model refuses
//! `cuda` before building anything, with exit code 2 and a message saying what was found.

mod common;

use common::bad::{battles, fixture_model, run, Files};
use common::root;

/// A CUDA device on a machine without one: every command that runs a model checks it once,
/// before building any model or creating any output, and exits 2 naming the device, what was
/// found (backend, device count, driver) and what to do; never libtorch's panic. Skipped where
/// an NVIDIA driver is loaded (there `scripts/gpu_check.sh` runs these commands for real).
#[test]
fn cuda_without_a_gpu_is_refused_before_any_model_by_every_command() {
    if std::path::Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("SKIPPED: an NVIDIA driver is loaded; scripts/gpu_check.sh covers CUDA");
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
        let (code, err) = run(&args);
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
            !std::path::Path::new(&out).exists() && !root().join("runs/default-seed0").exists(),
            "{args:?} left output behind before failing"
        );
    }
}
