//! Every subcommand of the binary, driven with bad values (NaN, 0, negative, out of range,
//! over-long inputs, empty files, malformed JSON lines, missing files): each must exit with a
//! non-zero status and an error naming the flag, key, file (and line), and never panic.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::bad::{battles, fixture_model, rejects, Files};

#[test]
fn train_rejects_bad_keys_values_and_files() {
    let f = Files::new();
    let runs = format!("runs_dir={}", f.path("runs"));
    let set = |kv: &str| {
        vec!["train", "--set", &runs, "--set"]
            .into_iter()
            .chain([kv])
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for (kv, needles) in [
        ("rl.temperature=nan", &["rl.temperature"][..]),
        (
            "rl.temperature=0",
            &["rl.temperature = 0", "is the same"][..],
        ),
        ("rl.temperature=-1", &["rl.temperature"][..]),
        ("rl.lr=0", &["rl.lr"][..]),
        ("rl.lr=-1e-4", &["rl.lr"][..]),
        ("sft.lr=inf", &["sft.lr"][..]),
        ("rl.top_p=0", &["rl.top_p"][..]),
        ("rl.top_p=1.5", &["rl.top_p"][..]),
        ("rl.top_k=-3", &["rl.top_k"][..]),
        ("rl.epsilon_low=-0.1", &["rl.epsilon_low"][..]),
        ("rl.beta=nan", &["rl.beta"][..]),
        ("rl.weight_decay=-1", &["rl.weight_decay"][..]),
        ("rl.advantage.epsilon=0", &["rl.advantage.epsilon"][..]),
        ("rl.num_generations=0", &["rl.num_generations"][..]),
        ("rl.prompts_per_step=0", &["rl.prompts_per_step"][..]),
        ("rl.max_draws=0", &["rl.max_draws"][..]),
        ("rl.steps=-1", &["rl.steps"][..]),
        ("rl.steps=fast", &["rl.steps", "integer"][..]),
        ("rl.lr=fast", &["rl.lr", "float"][..]),
        ("rl.ignore_eos=1", &["rl.ignore_eos", "boolean"][..]),
        ("rl.stepz=3", &["stepz", "unknown key"][..]),
        ("rl.algorithm=trpo", &["rl.algorithm", "dr_grpo"][..]),
        (
            "rl.max_completion_length=100000",
            &["max_position_embeddings"][..],
        ),
        ("ppo.gamma=2", &["ppo.gamma"][..]),
        ("ppo.critic_lr=nan", &["ppo.critic_lr"][..]),
        ("task.direct_share=nan", &["task.direct_share"][..]),
        ("task.digits=0", &["task.digits"][..]),
        ("zero_stage=3", &["zero_stage = 3", "not implemented"][..]),
        ("zero_stage=2", &["zero_stage = 2", "not implemented"][..]),
        ("eval.temperature=nan", &["eval.temperature"][..]),
        ("eval.samples=0", &["eval.samples"][..]),
        ("model.rms_norm_eps=0", &["model.rms_norm_eps"][..]),
        ("model.hidden_size=0", &["hidden_size"][..]),
        ("seed=-1", &["seed"][..]),
    ] {
        let args = set(kv);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rejects(&args, needles);
    }
    rejects(&["train", "--set", "grpo"], &["KEY=VALUE"]);
    let missing = f.path("missing.toml");
    rejects(&["train", "--config", &missing], &["missing.toml"]);
    rejects(&["train", "--config", &f.path("bad.toml")], &["bad.toml"]);
    rejects(&["train", "--resume", &f.path("nowhere")], &["nowhere"]);

    let model = fixture_model();
    let case = std::cell::Cell::new(0);
    let data = |file: &str, extra: &[&str]| {
        case.set(case.get() + 1);
        let name = format!("name=case{}", case.get());
        let mut a = vec!["train", "--model", &model, "--data"];
        a.push(file);
        a.extend(["--set", &runs, "--set", &name, "--set", "rl.steps=1"]);
        a.extend(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let empty = f.path("empty.jsonl");
    let malformed = f.malformed("data.jsonl", r#"{"prompt": "1+1?", "answer": "2"}"#);
    for (args, needles) in [
        (data(&empty, &[]), &["empty.jsonl"][..]),
        (data(&malformed, &[]), &["data.jsonl", "2"][..]),
        (data(&f.path("none.jsonl"), &[]), &["none.jsonl"][..]),
        (data(&malformed, &["--lora-r", "0"]), &["--lora-r"][..]),
        (
            data(&malformed, &["--lora-r", "4", "--lora-alpha", "nan"]),
            &["--lora-alpha"][..],
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rejects(&args, needles);
    }
}

#[test]
fn eval_rejects_bad_flags_and_checkpoints() {
    let f = Files::new();
    // A run directory (eval reads the run's config.toml two levels above the checkpoint) whose
    // checkpoint holds no model.
    let ckpt = f.path("run/checkpoints/final");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::write(f.path("run/config.toml"), "seed = 0\n").unwrap();
    for (flag, value) in [
        ("--samples", "0"),
        ("--problems", "0"),
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--samples", "-3"),
    ] {
        rejects(
            &["eval", "--checkpoint", &ckpt, &format!("{flag}={value}")],
            &[flag],
        );
    }
    rejects(&["eval", "--checkpoint", &ckpt], &["config.json"]);
    rejects(
        &["eval", "--checkpoint", &f.path("nope")],
        &["nope", "config.toml"],
    );
    rejects(
        &["eval", "--checkpoint", &ckpt, "--device", "tpu"],
        &["tpu"],
    );
    // A malformed run config names its file.
    let bad = f.path("bad/checkpoints/final");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(f.path("bad/config.toml"), "[grpo\n").unwrap();
    rejects(&["eval", "--checkpoint", &bad], &["config.toml"]);
}

#[test]
fn bench_rejects_bad_flags_and_keys() {
    rejects(&["bench", "--iterations", "0"], &["--iterations"]);
    rejects(&["bench", "--iterations=-1"], &["--iterations"]);
    rejects(
        &["bench", "--set", "rl.algorithm=ppo"],
        &["rl.algorithm", "ppo"],
    );
    rejects(
        &["bench", "--set", "rl.temperature=nan"],
        &["rl.temperature"],
    );
    rejects(&["bench", "--set", "threads=x"], &["threads"]);
    rejects(
        &[
            "bench",
            "--iterations",
            "1",
            "--checkpoint",
            "/nonexistent/ckpt",
        ],
        &["/nonexistent/ckpt"],
    );
}

#[test]
fn generate_rejects_bad_flags_and_inputs() {
    let f = Files::new();
    let model = fixture_model();
    let m = model.as_str();
    for (flag, value) in [
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--top-p", "nan"),
        ("--top-k", "-1"),
        ("--num-samples", "0"),
        ("--batch-size", "0"),
        ("--max-new-tokens", "0"),
        ("--dtype", "f64"),
    ] {
        rejects(
            &[
                "generate",
                "--model",
                m,
                "--prompt",
                "hi",
                &format!("{flag}={value}"),
            ],
            &[flag],
        );
    }
    rejects(
        &[
            "generate", "--model", m, "--prompt", "hi", "--device", "tpu",
        ],
        &["tpu"],
    );
    // 128 positions in the fixture: a prompt of ~300 tokens has no room.
    let long = "hello ".repeat(300);
    rejects(
        &["generate", "--model", m, "--raw", "--prompt", &long],
        &["prompt 1", "max_position_embeddings = 128"],
    );
    rejects(
        &[
            "generate",
            "--model",
            m,
            "--raw",
            "--prompt",
            "hi",
            "--max-new-tokens",
            "500",
        ],
        &["--max-new-tokens 500", "max_position_embeddings = 128"],
    );
    let long_file = f.write(
        "long.jsonl",
        &format!("{{\"prompt\": \"hi\"}}\n{{\"prompt\": \"{long}\"}}\n"),
    );
    rejects(
        &["generate", "--model", m, "--raw", "--input", &long_file],
        &["long.jsonl", "prompt 2"],
    );
    let empty = f.path("empty.jsonl");
    rejects(
        &["generate", "--model", m, "--input", &empty],
        &["empty.jsonl"],
    );
    let bad = f.malformed("prompts.jsonl", r#"{"prompt": "hi"}"#);
    rejects(
        &["generate", "--model", m, "--input", &bad],
        &["prompts.jsonl", "2"],
    );
    rejects(
        &["generate", "--model", m, "--input", &f.path("none.jsonl")],
        &["none.jsonl"],
    );
    rejects(
        &["generate", "--model", &f.path("no-model"), "--prompt", "hi"],
        &["no-model"],
    );
}

#[test]
fn score_rejects_bad_flags_and_inputs() {
    let f = Files::new();
    let model = fixture_model();
    let m = model.as_str();
    let good = f.write(
        "pairs.jsonl",
        "{\"prompt\": \"hi\", \"completion\": \"there\"}\n",
    );
    rejects(
        &["score", "--model", m, "--input", &good, "--batch-size", "0"],
        &["--batch-size"],
    );
    rejects(
        &["score", "--model", m, "--input", &good, "--dtype", "int8"],
        &["--dtype"],
    );
    let long = "hello ".repeat(300);
    let long_file = f.write(
        "long.jsonl",
        &format!(
            "{{\"prompt\": \"hi\", \"completion\": \"ok\"}}\n{{\"prompt\": \"hi\", \"completion\": \"{long}\"}}\n"
        ),
    );
    rejects(
        &["score", "--model", m, "--raw", "--input", &long_file],
        &["long.jsonl", "row 2", "max_position_embeddings = 128"],
    );
    rejects(
        &["score", "--model", m, "--input", &f.path("empty.jsonl")],
        &["empty.jsonl"],
    );
    let bad = f.malformed("bad.jsonl", r#"{"prompt": "hi", "completion": "x"}"#);
    rejects(
        &["score", "--model", m, "--input", &bad],
        &["bad.jsonl", "2"],
    );
    let no_column = f.write("nocol.jsonl", "{\"prompt\": \"hi\"}\n");
    rejects(
        &["score", "--model", m, "--input", &no_column],
        &["nocol.jsonl", "completion"],
    );
    rejects(
        &["score", "--model", m, "--input", &f.path("none.jsonl")],
        &["none.jsonl"],
    );
}

#[test]
fn verify_rejects_bad_inputs() {
    let f = Files::new();
    let out = f.path("out.jsonl");
    let good = r#"{"id": 1, "gold": "2", "pred": "2"}"#;
    let bad = f.malformed("cases.jsonl", good);
    rejects(
        &["verify", "--input", &bad, "--output", &out, "--quiet"],
        &["cases.jsonl", "line 2"],
    );
    rejects(
        &[
            "verify",
            "--input",
            &f.path("empty.jsonl"),
            "--output",
            &out,
        ],
        &["empty.jsonl"],
    );
    rejects(
        &["verify", "--input", &f.path("none.jsonl"), "--output", &out],
        &["none.jsonl"],
    );
    let good_file = f.write("good.jsonl", good);
    rejects(
        &[
            "verify",
            "--input",
            &good_file,
            "--output",
            &out,
            "--options",
            "{bad",
        ],
        &["--options"],
    );
    rejects(
        &[
            "verify",
            "--input",
            &good_file,
            "--output",
            &f.path("no/such/dir/out.jsonl"),
        ],
        &["out.jsonl"],
    );
}

#[test]
fn rank_rejects_bad_flags_and_inputs() {
    let f = Files::new();
    let b = battles();
    for (flag, value) in [
        ("--level", "95"),
        ("--level", "nan"),
        ("--level", "0"),
        ("--scale", "0"),
        ("--scale", "-400"),
        ("--k", "-1"),
        ("--prior", "nan"),
        ("--init", "inf"),
        ("--threads", "0"),
        ("--anchor", "GPT 4=nan"),
        ("--method", "glicko"),
        ("--rounds", "-1"),
        ("--rounds", "18446744073709551615"),
    ] {
        rejects(
            &["rank", "--input", &b, &format!("{flag}={value}")],
            &[flag],
        );
    }
    rejects(&["rank", "--input", &b, "--base", "1"], &["--base"]);
    rejects(
        &["rank", "--input", &f.path("empty.jsonl")],
        &["empty.jsonl"],
    );
    let bad = f.malformed(
        "battles.jsonl",
        r#"{"model_a": "a", "model_b": "b", "winner": "model_a"}"#,
    );
    rejects(&["rank", "--input", &bad], &["battles.jsonl:2"]);
    rejects(&["rank", "--input", &f.path("none.jsonl")], &["none.jsonl"]);
}

#[test]
fn passk_rejects_bad_flags_and_inputs() {
    let f = Files::new();
    let good = f.write(
        "samples.jsonl",
        "{\"problem\": 1, \"n\": 4, \"c\": 1}\n{\"problem\": 2, \"n\": 4, \"c\": 3}\n",
    );
    for (flag, value) in [
        ("--level", "95"),
        ("--level", "-0.5"),
        ("--rounds", "0"),
        ("--k", "0"),
        ("--k", "1,-2"),
    ] {
        rejects(
            &["passk", "--input", &good, &format!("{flag}={value}")],
            &[flag],
        );
    }
    rejects(&["passk", "--input", &good, "--k", "8"], &["samples.jsonl"]);
    rejects(
        &["passk", "--input", &f.path("empty.jsonl")],
        &["empty.jsonl"],
    );
    let bad = f.malformed("bad.jsonl", r#"{"problem": 1, "n": 4, "c": 1}"#);
    rejects(&["passk", "--input", &bad], &["bad.jsonl", "2"]);
    let c_over_n = f.write("over.jsonl", "{\"problem\": 1, \"n\": 2, \"c\": 5}\n");
    rejects(&["passk", "--input", &c_over_n], &["over.jsonl"]);
    rejects(
        &["passk", "--input", &f.path("none.jsonl")],
        &["none.jsonl"],
    );
}

#[test]
fn stats_rejects_bad_flags_and_inputs() {
    let f = Files::new();
    let good = f.write(
        "scores.jsonl",
        "{\"algorithm\": \"a\", \"scores\": [[0.1, 0.2], [0.3, 0.4]]}\n",
    );
    for (flag, value) in [
        ("--level", "95"),
        ("--level", "1"),
        ("--reps", "0"),
        ("--gamma", "nan"),
        ("--taus", "0.1,nan"),
    ] {
        rejects(
            &["stats", "--input", &good, &format!("{flag}={value}")],
            &[flag],
        );
    }
    rejects(
        &["stats", "--input", &f.path("empty.jsonl")],
        &["empty.jsonl"],
    );
    let bad = f.malformed("bad.jsonl", r#"{"algorithm": "a", "scores": [[0.1]]}"#);
    rejects(&["stats", "--input", &bad], &["bad.jsonl", "2"]);
    let nan = f.write(
        "nan.jsonl",
        "{\"algorithm\": \"a\", \"run\": 0, \"task\": \"t\", \"score\": NaN}\n",
    );
    rejects(&["stats", "--input", &nan], &["nan.jsonl", "1"]);
    let ragged = f.write(
        "ragged.jsonl",
        "{\"algorithm\": \"a\", \"scores\": [[0.1, 0.2], [0.3]]}\n",
    );
    rejects(&["stats", "--input", &ragged], &["ragged.jsonl"]);
    rejects(
        &["stats", "--input", &f.path("none.jsonl")],
        &["none.jsonl"],
    );
}

#[test]
fn tournament_rejects_bad_flags_and_inputs() {
    let f = Files::new();
    for (flag, value) in [
        ("--models", "0"),
        ("--models", "100000"),
        ("--target", "2"),
        ("--target", "nan"),
        ("--spread", "-1"),
        ("--tie-kappa", "nan"),
        ("--rounds", "0"),
        ("--best-of", "0"),
        ("--repeats", "0"),
        ("--threads", "0"),
        ("--scheme", "ladder"),
        ("--dist", "uniform"),
    ] {
        rejects(
            &["tournament", "--simulate", &format!("{flag}={value}")],
            &[flag],
        );
    }
    rejects(
        &["tournament", "--simulate", "--models", "1"],
        &["2 models"],
    );
    let b = battles();
    rejects(
        &["tournament", "--input", &b, "--prior-games=-1"],
        &["--prior-games"],
    );
    rejects(
        &["tournament", "--input", &b, "--comparisons", "0"],
        &["--comparisons"],
    );
    rejects(
        &[
            "tournament",
            "--input",
            &b,
            "--seeding",
            "anchor",
            "--anchor",
            "nobody",
        ],
        &["nobody"],
    );
    rejects(
        &["tournament", "--input", &f.path("empty.jsonl")],
        &["empty.jsonl"],
    );
    let bad = f.malformed(
        "battles.jsonl",
        r#"{"model_a": "a", "model_b": "b", "winner": "model_a"}"#,
    );
    rejects(&["tournament", "--input", &bad], &["battles.jsonl:2"]);
    rejects(
        &["tournament", "--input", &f.path("none.jsonl")],
        &["none.jsonl"],
    );
}

#[test]
fn serve_rejects_bad_flags_at_once() {
    let f = Files::new();
    let t = Instant::now();
    for (flag, value) in [
        ("--port", "70000"),
        ("--port", "-1"),
        ("--max-queue", "-5"),
        ("--sandbox-wall-time-s", "nan"),
        ("--sandbox-wall-time-s", "0"),
        ("--sandbox-memory-mb", "0"),
        ("--sandbox-max-processes", "0"),
    ] {
        rejects(
            &["serve", "--no-sandbox", &format!("{flag}={value}")],
            &[flag],
        );
    }
    rejects(
        &["serve", "--no-sandbox", "--reward", &f.path("none.toml")],
        &["none.toml"],
    );
    rejects(
        &["serve", "--no-sandbox", "--reward", &f.path("bad.toml")],
        &["bad.toml"],
    );
    rejects(
        &[
            "serve",
            "--no-sandbox",
            "--host",
            "no such host",
            "--port",
            "0",
        ],
        &["--host"],
    );
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "bad serve flags took {:?}",
        t.elapsed()
    );
}

/// A directory holding only a GGUF file names the file and how to convert it; a bad thread
/// count names the flag.
#[test]
fn gguf_only_directory_and_bad_threads_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("SmolLM2-135M-Instruct.Q4_1.gguf"), b"GGUF").unwrap();
    let pairs = tmp.path().join("pairs.jsonl");
    std::fs::write(&pairs, "{\"prompt\": \"hi\", \"completion\": \"there\"}\n").unwrap();
    let dir = tmp.path().to_str().unwrap();
    for cmd in ["generate", "score"] {
        let extra: &[&str] = if cmd == "generate" {
            &["--prompt", "hi"]
        } else {
            &["--input", pairs.to_str().unwrap()]
        };
        let mut args = vec![cmd, "--model", dir];
        args.extend_from_slice(extra);
        rejects(
            &args,
            &[
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "no config.json",
                "convert_gguf.py",
            ],
        );
    }
    let model = fixture_model();
    rejects(
        &[
            "generate",
            "--model",
            &model,
            "--prompt",
            "hi",
            "--threads",
            "0",
        ],
        &["--threads"],
    );
}

#[test]
fn offline_preference_commands_reject_bad_flags_files_and_ranks() {
    let f = Files::new();
    let model = fixture_model();
    let pairs = f.write(
        "pairs.jsonl",
        "{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}\n",
    );
    let out = f.path("run");
    for cmd in ["train-dpo", "train-orpo", "train-kto"] {
        let base = [cmd, "--model", &model, "--data", &pairs, "--output", &out];
        let with = |extra: &[&'static str]| -> Vec<String> {
            base.iter().chain(extra).map(|s| s.to_string()).collect()
        };
        let rejects_owned = |a: Vec<String>, needles: &[&str]| {
            rejects(&a.iter().map(String::as_str).collect::<Vec<_>>(), needles)
        };
        rejects_owned(with(&["--beta", "0"]), &["--beta"]);
        rejects_owned(with(&["--batch-size", "0"]), &["--batch-size"]);
        rejects_owned(with(&["--lr", "nan"]), &["--lr"]);
        let missing = f.path("missing.jsonl");
        rejects(
            &[cmd, "--model", &model, "--data", &missing, "--output", &out],
            &["missing.jsonl"],
        );
        let empty = f.path("empty.jsonl");
        rejects(
            &[cmd, "--model", &model, "--data", &empty, "--output", &out],
            &["empty.jsonl"],
        );
        let bad = f.malformed(
            "bad.jsonl",
            "{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}",
        );
        rejects(
            &[cmd, "--model", &model, "--data", &bad, "--output", &out],
            &["bad.jsonl", "2"],
        );
    }
    // A single-process command started by torchrun as one of several ranks is refused, not
    // run N times over one output directory.
    let o = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(["generate", "--model", &model, "--prompt", "2+3"])
        .env("WORLD_SIZE", "2")
        .env("RANK", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("rank 1 of 2") && err.contains("generate"),
        "{err}"
    );
    rejects(
        &[
            "train-kto",
            "--model",
            &model,
            "--data",
            &pairs,
            "--output",
            &out,
            "--batch-size",
            "1",
        ],
        &["--batch-size", "2"],
    );
}
