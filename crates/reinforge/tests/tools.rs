//! The tool commands (`rank`, `passk`, `stats`, `tournament`) of the binary end to end: files
//! in, tables and PNGs out, bad inputs named.

use crate::common;

use common::{rank_dir, reinforge};

/// Runs `reinforge ARGS` and asserts success.
fn ok(args: &[&str]) {
    let out = reinforge(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `reinforge ARGS`, asserts failure without a panic, returns stderr.
fn fails(args: &[&str]) -> String {
    let out = reinforge(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

#[test]
fn rank_llmfao_json_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let input = rank_dir().join("llmfao-battles.jsonl");
    let out = dir.path().join("lb.json");
    let png = dir.path().join("lb.png");
    ok(&[
        "rank",
        "--input",
        input.to_str().unwrap(),
        "--rounds",
        "200",
        "--format",
        "json",
        "--output",
        out.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
        "--anchor",
        "GPT 4=1200",
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 59);
    assert_eq!(rows[0]["model"], "GPT 4");
    assert!(
        (rows[0]["rating"].as_f64().unwrap() - 1200.0).abs() < 1e-9,
        "anchor applied"
    );
    // Anchor shift preserved differences: Platypus is 59.68 below GPT 4 in the reference.
    assert!(
        (rows[0]["rating"].as_f64().unwrap() - rows[1]["rating"].as_f64().unwrap() - 59.68).abs()
            < 0.01
    );
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let (lower, upper): (Vec<f64>, Vec<f64>) =
        rows.iter().map(|r| (f(r, "lower"), f(r, "upper"))).unzip();
    for (i, r) in rows.iter().enumerate() {
        let (lo, x, hi) = (lower[i], f(r, "rating"), upper[i]);
        if r["model"] == "GPT 4" {
            // Every round is shifted to the anchor (FastChat's scale_and_offset), so its interval is a point.
            assert_eq!((lo, hi), (1200.0, 1200.0));
        } else {
            // A bootstrap interval around the rating (here at least 45 Elo on either side).
            assert!(lo < x && x < hi && hi - lo > 10.0, "{r}");
        }
        // Best first; a model's rank is 1 + the models whose interval lies wholly above its own.
        if i > 0 {
            assert!(f(&rows[i - 1], "rating") >= x, "not sorted at {r}");
        }
        let above = (0..rows.len()).filter(|&j| j != i && lower[j] > hi).count();
        assert_eq!(r["rank"].as_u64().unwrap() as usize, 1 + above, "{r}");
        let games = ["wins", "ties", "losses"].map(|k| r[k].as_u64().unwrap());
        assert_eq!(
            games.iter().sum::<u64>(),
            r["battles"].as_u64().unwrap(),
            "{r}"
        );
    }
    assert!(
        rows.iter().any(|r| r["rank"].as_u64().unwrap() > 1),
        "some intervals separate"
    );
    let total: u64 = rows.iter().map(|r| r["battles"].as_u64().unwrap()).sum();
    assert_eq!(total, 2 * 8931);
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
}

#[test]
fn rank_methods_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let input = rank_dir().join("llmfao-battles.jsonl");
    for (method, fmt) in [("elo", "markdown"), ("rao-kupper", "csv")] {
        let out = dir.path().join(format!("{method}.txt"));
        ok(&[
            "rank",
            "--input",
            input.to_str().unwrap(),
            "--method",
            method,
            "--rounds",
            "20",
            "--format",
            fmt,
            "--output",
            out.to_str().unwrap(),
        ]);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("GPT 4"), "{method}");
        if fmt == "csv" {
            assert_eq!(text.lines().count(), 60);
            assert!(text.starts_with("rank,model,rating"));
        } else {
            assert!(text.contains("| Rank | Model |"));
        }
    }
}

#[test]
fn rank_reports_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, "{\"model_a\":\"a\",\"model_b\":\"b\",\"winner\":\"model_a\"}\n{\"model_a\":\"a\",\"model_b\":\"b\",\"winner\":\"A\"}\n").unwrap();
    let e = fails(&["rank", "--input", p.to_str().unwrap(), "--rounds", "0"]);
    assert!(e.contains("bad.jsonl:2") && e.contains("`winner`"), "{e}");
}

#[test]
fn passk_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.jsonl");
    let mut text = String::new();
    for i in 0..30 {
        let verdicts: Vec<bool> = (0..8).map(|j| (i + j) % 4 == 0).collect();
        let answers: Vec<String> = (0..8)
            .map(|j| {
                if (i + j) % 4 == 0 {
                    "ok".into()
                } else {
                    format!("w{}", j % 3)
                }
            })
            .collect();
        text += &serde_json::json!({"problem": i, "verdicts": verdicts, "answers": answers})
            .to_string();
        text += "\n";
    }
    std::fs::write(&p, text).unwrap();
    let out = dir.path().join("o.json");
    let png = dir.path().join("o.png");
    ok(&[
        "passk",
        "--input",
        p.to_str().unwrap(),
        "--format",
        "json",
        "--rounds",
        "300",
        "--output",
        out.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let pass = v["pass_at_k"].as_array().unwrap();
    assert_eq!(
        pass.iter()
            .map(|x| x["k"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![1, 2, 4, 8]
    );
    // Every problem has exactly 2 correct out of 8: pass@1 = 0.25, pass@8 = 1.
    assert!((pass[0]["value"].as_f64().unwrap() - 0.25).abs() < 1e-12);
    assert!((pass[3]["value"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert!(v["maj_at_k"].as_array().unwrap().len() == 4);
    assert!(std::fs::metadata(&png).unwrap().len() > 5_000);
}

#[test]
fn stats_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("scores.jsonl");
    let mut text = String::new();
    for (a, shift) in [("base", 0.0), ("better", 0.2)] {
        for run in 0..5 {
            for t in 0..6 {
                let s = 0.3 + shift + 0.05 * ((run * 7 + t * 3) % 5) as f64;
                text += &serde_json::json!({"algorithm": a, "run": run, "task": format!("t{t}"), "score": s}).to_string();
                text += "\n";
            }
        }
    }
    std::fs::write(&p, text).unwrap();
    let out = dir.path().join("o.json");
    ok(&[
        "stats",
        "--input",
        p.to_str().unwrap(),
        "--format",
        "json",
        "--reps",
        "300",
        "--output",
        out.to_str().unwrap(),
        "--plot-dir",
        dir.path().join("plots").to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let algos = v["algorithms"].as_array().unwrap();
    let d =
        algos[1]["mean"]["point"].as_f64().unwrap() - algos[0]["mean"]["point"].as_f64().unwrap();
    assert!((d - 0.2).abs() < 1e-12, "{d}");
    let imp = &v["improvement"][0];
    assert_eq!(
        (imp["x"].as_str(), imp["y"].as_str()),
        (Some("base"), Some("better"))
    );
    assert!(imp["probability"]["point"].as_f64().unwrap() < 0.2);
    for f in ["aggregates.png", "improvement.png", "profiles.png"] {
        assert!(dir.path().join("plots").join(f).exists(), "{f}");
    }
    // Missing cell -> error naming the algorithm, run and task.
    std::fs::write(&p, "{\"algorithm\":\"a\",\"run\":0,\"task\":\"x\",\"score\":1}\n{\"algorithm\":\"a\",\"run\":1,\"task\":\"y\",\"score\":1}\n").unwrap();
    let e = fails(&["stats", "--input", p.to_str().unwrap()]);
    assert!(e.contains("no score for run"), "{e}");
}

#[test]
fn tournament_simulation_and_oracle_modes() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("sim.csv");
    let png = dir.path().join("sim.png");
    ok(&[
        "tournament",
        "--simulate",
        "--models",
        "12",
        "--rounds",
        "1,3,6",
        "--best-of",
        "1,3",
        "--repeats",
        "4",
        "--format",
        "csv",
        "--output",
        csv.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
        "--threads",
        "2",
    ]);
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("scheme,rounds,best_of,comparisons,tau"));
    assert!(
        text.lines().any(|l| l.starts_with("single-elim,4,3,")),
        "{text}"
    );
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);

    let input = rank_dir().join("llmfao-battles.jsonl");
    let json = dir.path().join("oracle.json");
    ok(&[
        "tournament",
        "--input",
        input.to_str().unwrap(),
        "--scheme",
        "single-elim",
        "--seeding",
        "anchor",
        "--repeats",
        "6",
        "--format",
        "json",
        "--output",
        json.to_str().unwrap(),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 59);
    assert_eq!(v["scheme"], "single-elim");
    // Anchor seeding (58 matches) plus the bracket (58 matches), at least one comparison each.
    assert!(v["comparisons"].as_f64().unwrap() >= 116.0);

    let e = fails(&["tournament", "--input", "a.jsonl", "--simulate"]);
    assert!(e.contains("--simulate"), "{e}");
    let e = fails(&[
        "tournament",
        "--input",
        input.to_str().unwrap(),
        "--scheme",
        "swiss,round-robin",
    ]);
    assert!(e.contains("one --scheme"), "{e}");
}

/// `rank --ci sandwich` reproduces arena-rank's ratings and sandwich bounds (run to
/// convergence; `fixtures/data/arena/README.md`) for plain and style-controlled BT.
#[test]
fn rank_sandwich_matches_arena_rank() {
    let root = common::root();
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("fixtures/data/arena/arena_rank_expected.json"))
            .unwrap(),
    )
    .unwrap();
    // (case, extra flags, tolerance in rating points): the reweighted plain case carries
    // arena-rank's own 1.5e-6 rounding (see the fixture README).
    let cases: [(&str, &[&str], f64); 4] = [
        ("llmfao_plain", &["--reweighted", "false"], 1e-6),
        ("llmfao_plain_reweighted", &["--reweighted", "true"], 5e-6),
        ("style_contextual_reweighted", &["--style-control"], 1e-6),
        (
            "style_contextual",
            &["--style-control", "--reweighted", "false"],
            1e-6,
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (case, flags, tol) in cases {
        let c = &expected["cases"][case];
        let input = root.join(c["input"].as_str().unwrap());
        let out = dir.path().join(format!("{case}.json"));
        let mut args = vec!["rank", "--ci", "sandwich", "--format", "json", "--input"];
        args.push(input.to_str().unwrap());
        args.extend(["--output", out.to_str().unwrap()]);
        args.extend(flags);
        ok(&args);
        let lb: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let want = &c["converged"];
        let rows = lb["rows"].as_array().unwrap();
        assert_eq!(
            rows.len(),
            want["ratings"].as_object().unwrap().len(),
            "{case}"
        );
        for row in rows {
            let m = row["model"].as_str().unwrap();
            for key in ["ratings", "lower", "upper"] {
                let got = row[key.trim_end_matches('s')].as_f64().unwrap();
                let w = want[key][m].as_f64().unwrap();
                assert!(
                    (got - w).abs() < tol,
                    "{case} {m} {key}: {got} vs arena-rank {w}"
                );
            }
        }
    }
    assert!(fails(&[
        "rank",
        "--ci",
        "sandwich",
        "--method",
        "elo",
        "--input",
        rank_dir().join("llmfao-battles.jsonl").to_str().unwrap()
    ])
    .contains("--method bt"));
}

/// `rm-eval correctness`: a scorer that ranks every correct response above every incorrect
/// one has pairwise accuracy 1 and reaches the ground-truth best at every K; a reversed one 0.
#[test]
fn rm_eval_correctness_perfect_and_reversed_scorers() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, sign: f64| {
        let path = dir.path().join(name);
        let mut lines = String::new();
        for p in 0..6 {
            for j in 0..4 {
                let correct = (p + j) % 3 == 0;
                let score = sign * (if correct { 1.0 } else { 0.0 } + 0.01 * j as f64);
                lines += &format!(
                    "{{\"prompt\": \"p{p}\", \"score\": {score}, \"correct\": {correct}}}\n"
                );
            }
        }
        std::fs::write(&path, lines).unwrap();
        path
    };
    let report = |input: &std::path::Path| -> serde_json::Value {
        let out = dir.path().join("r.json");
        ok(&[
            "rm-eval",
            "correctness",
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
    };
    let good = report(&write("good.jsonl", 1.0));
    assert_eq!(good["pairwise_accuracy"], 1.0);
    let (scorer, oracle) = (&good["best_of_k"]["scorer"], &good["best_of_k"]["oracle"]);
    assert_eq!(scorer, oracle);
    let bad = report(&write("bad.jsonl", -1.0));
    assert_eq!(bad["pairwise_accuracy"], 0.0);
    std::fs::write(
        dir.path().join("broken.jsonl"),
        "{\"prompt\": \"a\", \"score\": 1}\n",
    )
    .unwrap();
    let err = fails(&[
        "rm-eval",
        "correctness",
        "--input",
        dir.path().join("broken.jsonl").to_str().unwrap(),
    ]);
    assert!(err.contains(":1") && err.contains("correct"), "{err}");
}

/// `rm-eval rewardbench2` gives the reference scorer's per-subset scores on the fixture set
/// (`fixtures/data/rewardbench2/README.md`: rewardbench 0.1.4's own functions).
#[test]
fn rm_eval_rewardbench2_matches_the_reference_scorer() {
    let root = common::root().join("fixtures/data/rewardbench2");
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("reference.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rb2.json");
    ok(&[
        "rm-eval",
        "rewardbench2",
        "--input",
        root.join("scores.jsonl").to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let subsets = got["subsets"].as_array().unwrap();
    let expected = want["subset_scores"].as_object().unwrap();
    assert_eq!(subsets.len(), expected.len());
    for s in subsets {
        let name = s["subset"].as_str().unwrap();
        let (g, w) = (
            s["score"].as_f64().unwrap(),
            expected[name].as_f64().unwrap(),
        );
        assert!((g - w).abs() < 1e-12, "{name}: {g} vs reference {w}");
    }
    let mean = expected.values().map(|v| v.as_f64().unwrap()).sum::<f64>() / expected.len() as f64;
    assert!((got["overall"].as_f64().unwrap() - mean).abs() < 1e-12);
}
