//! Data-parallel training on torch.distributed (Gloo, one thread per rank): 2 and 4 ranks
//! reproduce one process holding the whole batch (the default experiment, SFT then 10 RL
//! steps, also with the optimizer state sharded, and a LoRA dataset run), and a job whose rank dies fails naming it, then resumes
//! from its last checkpoint to the uninterrupted run's weights.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::tiny::{column, metrics, train_args};
use common::{param_gap, root};

/// The tiny experiment with a short SFT, 10 RL steps and per-row sampling (which
/// data-parallel runs use, so one process draws what the ranks draw).
const DP: &[&str] = &[
    "sft.steps=20",
    "rl.steps=10",
    "threads=1",
    "rollout.rng=\"per_row\"",
];

fn run_ok(args: &[String]) {
    let o = Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .env("REINFORGE_DIST_TIMEOUT_S", "60")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{:?}\n{}",
        args,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The weights of two checkpoints (`model.safetensors`, any architecture) compared: the
/// largest difference, and how many elements differ by more than `tol`, of how many.
fn weights_gap(a: &Path, b: &Path, tol: f64) -> (f64, i64, i64) {
    use reinforge_torch::tch::{Kind, Tensor};
    let read = |d: &Path| -> std::collections::HashMap<String, Tensor> {
        Tensor::read_safetensors(d.join("model.safetensors"))
            .unwrap()
            .into_iter()
            .collect()
    };
    let (wa, wb) = (read(a), read(b));
    assert_eq!(wa.len(), wb.len());
    wa.iter().fold((0.0, 0, 0), |(max, off, total), (k, t)| {
        let d = (t.to_kind(Kind::Float) - wb[k].to_kind(Kind::Float)).abs();
        let above = d.gt(tol).sum(Kind::Int64).int64_value(&[]);
        (
            max.max(d.max().double_value(&[])),
            off + above,
            total + t.numel() as i64,
        )
    })
}

/// The largest difference of the learning metrics of two runs, step by step.
fn metric_gap(a: &Path, b: &Path) -> f64 {
    let (ma, mb) = (metrics(a), metrics(b));
    assert_eq!(ma.len(), mb.len());
    [
        "reward/mean",
        "loss",
        "grad_norm",
        "entropy",
        "pg_clipfrac",
        "response_length",
    ]
    .iter()
    .map(|k| common::max_abs_diff(&column(&ma, k), &column(&mb, k)))
    .fold(integrity_gap(&ma, &mb), f64::max)
}

/// The largest difference of the reward-hacking monitor's `integrity/*` keys, which must be
/// present on the same steps (its counts are summed over ranks, its canaries scored by rank 0).
fn integrity_gap(ma: &[serde_json::Value], mb: &[serde_json::Value]) -> f64 {
    let (mut gap, mut seen): (f64, usize) = (0.0, 0);
    for (step, (a, b)) in ma.iter().zip(mb).enumerate() {
        let keys = |l: &serde_json::Value| -> Vec<String> {
            let mut k: Vec<String> = l
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| k.starts_with("integrity/"))
                .cloned()
                .collect();
            k.sort();
            k
        };
        assert_eq!(keys(a), keys(b), "step {step}: integrity keys differ");
        seen += keys(a).len();
        for k in keys(a) {
            gap = gap.max((a[&k].as_f64().unwrap() - b[&k].as_f64().unwrap()).abs());
        }
    }
    assert!(seen > 0, "the runs logged no integrity key");
    gap
}

#[test]
fn ranks_reproduce_one_process_on_the_default_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path();
    run_ok(&train_args(runs, "one", DP));
    // 2 and 4 ranks, and 2 ranks with the optimizer state sharded (ZeRO-1).
    for (n, zero) in [("2", "0"), ("4", "0"), ("2", "1")] {
        let name = format!("n{n}-zero{zero}");
        let zero_key = format!("zero_stage={zero}");
        let mut args = train_args(runs, &name, &[DP, &[zero_key.as_str()]].concat());
        args.splice(1..1, ["--nproc".to_string(), n.to_string()]);
        run_ok(&args);
        let (one, many) = (runs.join("one"), runs.join(&name));
        let p = param_gap(
            &one.join("checkpoints/final"),
            &many.join("checkpoints/final"),
        );
        let m = metric_gap(&one, &many);
        eprintln!("{n} ranks, zero_stage {zero}: max |Δparam| {p:.2e}, max |Δmetric| {m:.2e}");
        assert!(p < 1e-5, "{n} ranks: parameters differ by {p}");
        assert!(m < 1e-4, "{n} ranks: metrics differ by {m}");
    }
}

#[test]
fn ranks_reproduce_one_process_on_a_lora_dataset_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows: String = (0..32)
        .map(|i| {
            format!(
                "{{\"prompt\": \"What is {}+{}?\", \"answer\": \"{}\"}}\n",
                i % 7,
                i % 5,
                i % 7 + i % 5
            )
        })
        .collect();
    std::fs::write(d.join("data.jsonl"), rows).unwrap();
    // A reward the random fixture earns sometimes: any digit in the answer.
    std::fs::write(
        d.join("digit.toml"),
        "[components.digit]\ntype = \"format\"\npattern = \"[0-9]\"\n",
    )
    .unwrap();
    let args = |name: &str, nproc: Option<&str>| -> Vec<String> {
        let mut a: Vec<String> = vec!["train".into()];
        if let Some(n) = nproc {
            a.extend(["--nproc".into(), n.into()]);
        }
        let model = root().join("fixtures/hf/models/llama");
        a.extend(
            [
                "--model",
                model.to_str().unwrap(),
                "--data",
                d.join("data.jsonl").to_str().unwrap(),
                "--reward",
                d.join("digit.toml").to_str().unwrap(),
                "--lora-r",
                "4",
            ]
            .map(String::from),
        );
        for kv in [
            format!("runs_dir={}", d.join("runs").display()),
            format!("name={name}"),
            "threads=1".into(),
            "rl.steps=10".into(),
            "rl.prompts_per_step=4".into(),
            "rl.num_generations=4".into(),
            "rl.max_completion_length=8".into(),
            "rl.lr=1e-2".into(),
            "rollout.rng=\"per_row\"".into(),
        ] {
            a.extend(["--set".into(), kv]);
        }
        a
    };
    run_ok(&args("one", None));
    run_ok(&args("two", Some("2")));
    let runs = d.join("runs");
    let p = param_gap(
        &runs.join("one/checkpoints/final"),
        &runs.join("two/checkpoints/final"),
    );
    let rewards = column(&metrics(&runs.join("one")), "reward/mean");
    eprintln!("LoRA, 2 ranks: max |Δparam| {p:.2e}; rewards {rewards:?}");
    assert!(
        rewards.iter().any(|&r| r > 0.0 && r < 1.0),
        "no learning signal: {rewards:?}"
    );
    // AdamW at lr 1e-2 turns last-bit differences into parameter differences of up to ~1e-5
    // here: the ranks decode smaller batches, whose linears (oneDNN) round differently. Measured
    // 2026-11-28: 1.45e-6 with sdpa decoding, 1.10e-5 with the decode attention kernel; one
    // process with the kernel against one with sdpa (outputs within 6e-7 of each other): 6.3e-6.
    // The sampled tokens and every reward are equal; the bound keeps that noise and nothing more.
    assert!(p < 5e-5, "parameters differ by {p}");
    assert!(metric_gap(&runs.join("one"), &runs.join("two")) < 1e-4);
}

/// A TCP port free on loopback now, for a job's rendezvous.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts rank `rank` of `world` of `args` (as torchrun would), stderr captured.
fn rank(args: &[String], rank: usize, world: usize, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("REINFORGE_DIST_TIMEOUT_S", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_killed_rank_is_named_and_the_job_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path();
    // With the optimizer state sharded: the checkpoint gathers it, the resume shards it again.
    let long = [
        DP,
        &["rl.steps=400", "rl.checkpoint_every=2", "zero_stage=1"],
    ]
    .concat();
    let args = train_args(runs, "killed", &long);
    let port = free_port();
    let r0 = rank(&args, 0, 2, port);
    let mut r1 = rank(&args, 1, 2, port);
    let run: PathBuf = runs.join("killed");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !run.join("metrics.jsonl").exists() || metrics(&run).len() < 5 {
        assert!(Instant::now() < deadline, "the job made no RL progress");
        std::thread::sleep(Duration::from_millis(50));
    }
    r1.kill().unwrap();
    let _ = r1.wait();
    let killed_at = Instant::now();
    let out = r0.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "rank 0 exited {:.1} s after the kill",
        killed_at.elapsed().as_secs_f64()
    );
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("rank 1 stopped"), "{err}");
    assert!(killed_at.elapsed() < Duration::from_secs(40));
    // Resume with 2 ranks to step 10, and compare with an uninterrupted single process.
    let done = metrics(&run).len();
    let mut resume = vec![
        "train".to_string(),
        "--nproc".into(),
        "2".into(),
        "--resume".into(),
    ];
    resume.push(run.display().to_string());
    let cfg = run.join("config.toml");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("steps = 400", "steps = 10");
    std::fs::write(&cfg, text).unwrap();
    assert!(done < 10, "the kill came too late ({done} steps)");
    run_ok(&resume);
    assert_eq!(metrics(&run).len(), 10);
    run_ok(&train_args(runs, "straight", DP));
    let p = param_gap(
        &run.join("checkpoints/final"),
        &runs.join("straight/checkpoints/final"),
    );
    eprintln!("killed at step {done}, resumed: max |Δparam| vs uninterrupted {p:.2e}");
    assert!(p < 1e-5, "{p}");
}

/// Runs `args` as `world` ranks (torchrun's variables) and waits for all; each must succeed.
fn run_ranks(args: &[String], world: usize) {
    let port = free_port();
    let children: Vec<Child> = (0..world).map(|r| rank(args, r, world, port)).collect();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "rank {r}: {err}");
    }
}

/// The preference trainers on 2 ranks (a step's 5 rows split 3 + 2) train exactly like one
/// process, including losses that couple the rows of a batch (AOT's sort, ORPO's token-mean
/// NLL, KTO's KL point, the reward model's reward centering): parameters within 1e-5 and the
/// same metrics.
#[test]
fn ranks_reproduce_one_process_on_offline_preference_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::preference_rows(d, 20);
    let model = root().join("fixtures/hf/models/llama");
    // (command, data, batch size, more flags); a batch of 1 leaves rank 1 without rows.
    for (cmd, data, batch, extra) in [
        (
            "train-dpo",
            "pairs.jsonl",
            "5",
            &["--loss-type", "aot", "--label-smoothing", "0.1"][..],
        ),
        ("train-dpo", "pairs.jsonl", "1", &[][..]),
        ("train-orpo", "pairs.jsonl", "5", &[][..]),
        ("train-kto", "rows.jsonl", "5", &[][..]),
        (
            "train-rm",
            "pairs.jsonl",
            "5",
            &["--center-rewards-coefficient", "0.01"][..],
        ),
    ] {
        let args = |out: &str| -> Vec<String> {
            let mut a: Vec<String> = [
                cmd,
                "--model",
                model.to_str().unwrap(),
                "--data",
                d.join(data).to_str().unwrap(),
                "--output",
                d.join(out).to_str().unwrap(),
                "--steps",
                "6",
                "--batch-size",
                batch,
                "--lr",
                "1e-2",
                "--threads",
                "1",
            ]
            .map(String::from)
            .to_vec();
            a.extend(extra.iter().map(|s| s.to_string()));
            a
        };
        let (one, two) = (format!("{cmd}-{batch}-one"), format!("{cmd}-{batch}-two"));
        run_ok(&args(&one));
        run_ranks(&args(&two), 2);
        let (a, b) = (
            d.join(&one).join("checkpoints/final"),
            d.join(&two).join("checkpoints/final"),
        );
        let (p, off, total) = weights_gap(&a, &b, 1e-5);
        let (ma, mb) = (metrics(&d.join(&one)), metrics(&d.join(&two)));
        assert_eq!(ma.len(), 6, "{cmd}");
        assert_eq!(mb.len(), 6, "{cmd}: rank 0 logs every step");
        let loss = column(&ma, "loss");
        let moved = (loss[0] - loss[loss.len() - 1]).abs();
        let keys: &[&str] = if cmd == "train-rm" {
            &["loss", "grad_norm", "mean_reward"]
        } else {
            &["loss", "grad_norm", "rewards/chosen"]
        };
        let gap = keys
            .iter()
            .map(|k| common::max_abs_diff(&column(&ma, k), &column(&mb, k)))
            .fold(0.0, f64::max);
        eprintln!(
            "{cmd}, 2 ranks: max |Δparam| {p:.2e} (loss moved {moved:.2e}), max |Δmetric| {gap:.2e}"
        );
        assert!(moved > 1e-3, "{cmd}: the loss did not move ({loss:?})");
        // Measured: KTO on this data leaves one element of 127k (an embedding entry of a
        // token in one prompt) 2.4e-4 apart, every other within 1e-5, with the metrics within
        // 1e-7. The likely cause is AdamW's normalisation by sqrt(v) + eps, which turns float32
        // rounding of a near-zero gradient (each rank's batch has another shape) into a step.
        eprintln!("{cmd}: {off} of {total} parameters differ by more than 1e-5");
        assert!(
            off * 10_000 <= total,
            "{cmd}: {off} of {total} parameters differ by > 1e-5"
        );
        assert!(p < 1e-3, "{cmd}: parameters differ by {p}");
        assert!(gap < 1e-4, "{cmd}: metrics differ by {gap}");
    }
}

/// `train-sft` on 2 ranks (a step's 6 rows split 3 + 3; the fixture's conversations have
/// different lengths, so each rank's token count differs and only the global token-mean
/// denominator makes the ranks' gradients sum to one process's) trains like one process.
#[test]
fn ranks_reproduce_one_process_on_train_sft() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let r = root();
    let args = |out: &str| -> Vec<String> {
        [
            "train-sft",
            "--model",
            r.join("fixtures/hf/models/llama").to_str().unwrap(),
            "--data",
            r.join("fixtures/data/sft/chat_train.jsonl")
                .to_str()
                .unwrap(),
            "--output",
            d.join(out).to_str().unwrap(),
            "--steps",
            "4",
            "--batch-size",
            "6",
            "--lr",
            "1e-3",
            "--threads",
            "1",
        ]
        .map(String::from)
        .to_vec()
    };
    run_ok(&args("one"));
    run_ranks(&args("two"), 2);
    let gap = param_gap(
        &d.join("one/checkpoints/final"),
        &d.join("two/checkpoints/final"),
    );
    let (ma, mb) = (metrics(&d.join("one")), metrics(&d.join("two")));
    let loss_gap = common::max_abs_diff(&column(&ma, "loss"), &column(&mb, "loss"));
    eprintln!("train-sft, 2 ranks: max |Δparam| {gap:.2e}, max |Δloss| {loss_gap:.2e}");
    assert_eq!(
        column(&ma, "tokens"),
        column(&mb, "tokens"),
        "global token counts"
    );
    assert!(gap < 1e-5, "{gap}");
    assert!(loss_gap < 1e-6, "{loss_gap}");
}

/// Ctrl-C on one rank stops every rank at the same step (they agree before each step), with
/// `checkpoints/latest` saved and exit code 130.
#[test]
fn ctrl_c_on_one_rank_stops_every_rank_at_the_same_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pairs: String = (0..20)
        .map(|i| {
            format!("{{\"prompt\": \"Q{i}?\", \"chosen\": \"Sure, I can help.\", \"rejected\": \"No.\"}}\n")
        })
        .collect();
    std::fs::write(d.join("pairs.jsonl"), pairs).unwrap();
    let model = root().join("fixtures/hf/models/llama");
    let out = d.join("run");
    let args: Vec<String> = [
        "train-dpo",
        "--model",
        model.to_str().unwrap(),
        "--data",
        d.join("pairs.jsonl").to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--steps",
        "100000",
        "--threads",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let port = free_port();
    let r0 = rank(&args, 0, 2, port);
    let r1 = rank(&args, 1, 2, port);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !out.join("metrics.jsonl").exists() || metrics(&out).len() < 3 {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    Command::new("kill")
        .args(["-INT", &r1.id().to_string()])
        .status()
        .unwrap();
    for (r, c) in [r0, r1].into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(130), "rank {r}: {err}");
    }
    assert!(out.join("checkpoints/latest").exists());
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("checkpoints/latest/trainer_state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        state["step"].as_u64().unwrap() as usize,
        metrics(&out).len()
    );
}
