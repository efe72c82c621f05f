//! Spec parsing (errors name file and key) and scoring of each component kind.

use std::path::{Path, PathBuf};

use reinforge_reward::{Reward, RewardSpec, Sample, ScoreError};

fn specs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("specs")
}

fn sample(response: &str, label: Option<&str>) -> Sample {
    Sample {
        prompt: "Q: ".into(),
        response: response.into(),
        label: label.map(str::to_string),
    }
}

fn err(text: &str) -> String {
    format!("{:#}", RewardSpec::from_toml(text).unwrap_err())
}

#[test]
fn example_specs_load() {
    for name in ["math.toml", "math_format_overlong.toml", "code.toml"] {
        let spec = RewardSpec::load(&specs_dir().join(name)).unwrap();
        assert!(!spec.components.is_empty(), "{name}");
    }
    let code = RewardSpec::load(&specs_dir().join("code.toml")).unwrap();
    assert!(code.needs_sandbox());
    let e = Reward::new(code, None).err().unwrap().to_string();
    assert!(e.contains("`tests`") && e.contains("sandbox"), "{e}");
}

#[test]
fn errors_name_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[components.m]\ntype = \"math\"\nweigth = 2.0\n").unwrap();
    let e = format!("{:#}", RewardSpec::load(&path).unwrap_err());
    assert!(e.contains("bad.toml"), "{e}");
    assert!(e.contains("weigth"), "{e}");

    let e = err("[components.m]\ntype = \"math\"\nweight = \"high\"\n");
    assert!(e.contains("weight") || e.contains("invalid type"), "{e}");
    let e = err("[components.m]\ntype = \"maths\"\n");
    assert!(e.contains("maths"), "{e}");
    let e = err("[components.f]\ntype = \"format\"\npattern = \"(unclosed\"\n");
    assert!(e.contains("components.f.pattern"), "{e}");
    let e = err("[components.m]\ntype = \"math\"\n[components.m.options]\nfloat_roundin = 3\n");
    assert!(
        e.contains("components.m.options") && e.contains("float_roundin"),
        "{e}"
    );
    let e = err("[components.l]\ntype = \"length\"\nmax_length = 10\nbuffer = 0\n");
    assert!(e.contains("components.l.buffer"), "{e}");
    let e = err("[components.l]\ntype = \"length\"\nmax_length = 10\nbuffer = 20\n");
    assert!(e.contains("components.l.buffer"), "{e}");
    let e = err("score = \"acc\"\n[components.m]\ntype = \"math\"\n");
    assert!(e.contains("score") && e.contains("acc"), "{e}");
    let e = err("components = {}\n");
    assert!(e.contains("components"), "{e}");
    let e = err("[components.m]\ntype = \"math\"\n[extra]\n");
    assert!(e.contains("extra"), "{e}");
}

#[test]
fn weighted_components_and_the_score() {
    let spec = RewardSpec::load(&specs_dir().join("math_format_overlong.toml")).unwrap();
    let reward = Reward::new(spec, None).unwrap();
    let good = "<think>2+2 is 4</think> The answer is \\boxed{4}.";
    let frame = "<think></think> \\boxed{4}".len();
    let long = format!(
        "<think>{}</think> \\boxed{{4}}",
        "x".repeat(16384 - 2048 - frame)
    );
    let scored = reward
        .score(&[
            sample(good, Some("4")),
            sample("The answer is \\boxed{5}.", Some("4")),
            sample(&long, Some("4")),
        ])
        .unwrap();
    // correct (+1), formatted (0.1 * 1), short (0)
    assert_eq!(scored[0].components["accuracy"], 1.0);
    assert_eq!(scored[0].components["format"], 1.0);
    assert_eq!(scored[0].components["overlong"], 0.0);
    assert!((scored[0].total - 1.1).abs() < 1e-12);
    assert_eq!(scored[0].score, 1.0, "score is the accuracy component");
    // wrong (-1), no think block
    assert_eq!(scored[1].components["accuracy"], -1.0);
    assert_eq!(scored[1].components["format"], 0.0);
    assert!((scored[1].total + 1.0).abs() < 1e-12);
    // halfway into the 4096-char buffer: -0.5
    assert_eq!(long.chars().count(), 16384 - 2048);
    assert!((scored[2].components["overlong"] + 0.5).abs() < 1e-12);
    assert!((scored[2].total - (1.0 + 0.1 - 0.5)).abs() < 1e-12);
}

#[test]
fn labels_fields_and_missing_labels() {
    let spec = RewardSpec::from_toml(
        "[components.m]\ntype = \"math\"\nlabel_field = \"answer\"\n\
         [components.len]\ntype = \"length\"\nshape = \"trl_soft\"\nunit = \"words\"\nmax_length = 4\nbuffer = 2\nweight = 2.0\n",
    )
    .unwrap();
    let reward = Reward::new(spec, None).unwrap();
    let s = reward
        .score(&[
            sample("so \\boxed{1/2}", Some(r#"{"answer": "0.5"}"#)),
            sample("a b c d e f", Some(r#"{"answer": 7}"#)),
        ])
        .unwrap();
    assert_eq!(s[0].components["m"], 1.0);
    assert_eq!(s[0].score, 1.0);
    // 6 words > max 4: TRL's -1, weight 2
    assert_eq!(s[1].components["len"], -1.0);
    assert_eq!(s[1].total, -2.0);

    let e = reward
        .score(&[sample("x", Some("4")), sample("y", None)])
        .unwrap_err();
    assert!(matches!(e, ScoreError::LabelField { index: 0, .. }), "{e}");
    let e = reward.score(&[
        sample("\\boxed{1}", Some(r#"{"answer":"1"}"#)),
        sample("y", None),
    ]);
    match e {
        Err(ScoreError::MissingLabel { index, component }) => {
            assert_eq!((index, component.as_str()), (1, "m"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn default_spec_is_math_and_total_score_without_accuracy() {
    let reward = Reward::new(RewardSpec::default(), None).unwrap();
    let s = reward
        .score(&[
            sample("\\boxed{3}", Some("3")),
            sample("\\boxed{2}", Some("3")),
        ])
        .unwrap();
    assert_eq!((s[0].total, s[1].total), (1.0, 0.0));
    let spec = RewardSpec::from_toml(
        "[components.f]\ntype = \"format\"\npattern = '^ok'\nweight = 0.5\nunmatched = -1.0\n",
    )
    .unwrap();
    assert_eq!(spec.score_component(), None);
    let s = Reward::new(spec, None)
        .unwrap()
        .score(&[sample("ok then", None), sample("not ok", None)])
        .unwrap();
    assert_eq!((s[0].score, s[1].score), (0.5, -0.5));
}

#[test]
fn default_math_reward_credits_only_a_stated_answer() {
    let reward = Reward::new(RewardSpec::default(), None).unwrap();
    let scores: Vec<f64> = reward
        .score(&[
            sample("It is 27", Some("27")),
            sample("3 + 4 = 7, easy.", Some("7")),
            sample("5-0 is 500.", Some("5")),
            sample("7-3 is an imaginary number, in a way.", Some("4")),
        ])
        .unwrap()
        .iter()
        .map(|s| s.total)
        .collect();
    assert_eq!(scores, [1.0, 1.0, 0.0, 0.0]);
    // the lenient extraction stays available as an option
    let spec = RewardSpec::from_toml(
        "[components.m]\ntype = \"math\"\n[components.m.options]\nanswer_policy = \"last_value\"\n",
    )
    .unwrap();
    let s = Reward::new(spec, None)
        .unwrap()
        .score(&[sample("7-3 is an imaginary number, in a way.", Some("4"))])
        .unwrap();
    assert_eq!(s[0].total, 1.0);
}

/// Needs a working sandbox (Linux namespaces and a Python 3 for it).
#[test]
fn code_tests_run_in_the_sandbox() {
    use reinforge_sandbox::{Limits, Sandbox};
    use std::time::Duration;
    let caps = Limits {
        wall_time: Duration::from_secs(10),
        cpu_time: Duration::from_secs(10),
        memory_bytes: 1 << 30,
        max_processes: 16,
        max_file_bytes: 1 << 20,
        max_output_bytes: 1 << 16,
    };
    let sandbox = Sandbox::new(caps).unwrap();
    let spec = RewardSpec::load(&specs_dir().join("code.toml")).unwrap();
    let reward = Reward::new(spec, Some(sandbox)).unwrap();
    let tests = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n";
    let good = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n";
    let wrong = "```python\ndef add(a, b):\n    return a - b\n```";
    let early_exit = "```python\nimport sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n```";
    let s = reward
        .score(&[
            sample(good, Some(tests)),
            sample(wrong, Some(tests)),
            sample(early_exit, Some(tests)),
        ])
        .unwrap();
    let values: Vec<f64> = s.iter().map(|x| x.components["tests"]).collect();
    assert_eq!(values, [1.0, 0.0, 0.0]);
    assert_eq!(s[0].score, 1.0);
}
