//! Project MPG's Goodness and Fastness on tables small enough to work by hand, the bad inputs, and
//! the comparison with an arena leaderboard on simulated models.

use reinforge_eval::mpg::compare::compare;
use reinforge_eval::mpg::table::{read_categories, read_results};
use reinforge_eval::mpg::{score, Estimate, ModelScores, MpgOptions, MpgReport, Weighting};
use std::collections::HashMap;
use std::path::Path;

const TABLE: &str = "model,benchmark,category,correct,questions,qps
x,A,recall,8,10,2
x,B,recall,3,5,4
x,C,reasoning,1,1,10
y,A,recall,5,10,1
y,B,recall,5,5,1
y,C,reasoning,0,1,1
";

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn opts() -> MpgOptions {
    MpgOptions {
        draws: 20_000,
        ..MpgOptions::default()
    }
}

fn run(path: &Path, o: &MpgOptions) -> MpgReport {
    let rows = read_results(path).unwrap();
    score(&rows, None, "t.csv", o).unwrap()
}

fn model<'a>(r: &'a MpgReport, name: &str) -> &'a ModelScores {
    r.models.iter().find(|m| m.model == name).unwrap()
}

/// Posterior means with the uniform prior, by hand: x has A 9/12, B 4/7, C 2/3, so recall
/// (0.75 + 4/7) / 2, reasoning 2/3, overall their mean; C alone makes x's reasoning interval the
/// Beta(2, 1) quantiles sqrt(0.025), sqrt(0.975) and y's the Beta(1, 2) ones 1 - sqrt(0.975),
/// 1 - sqrt(0.025). Fastness (QPS): recall (2 + 4) / 2, reasoning 10, overall 6.5; resampling
/// the two recall benchmarks gives means 2, 3, 4, so recall's interval is [2, 4] and overall's [6, 7].
#[test]
fn goodness_and_fastness_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(&write(dir.path(), "t.csv", TABLE), &opts());
    assert_eq!(r.categories, ["reasoning", "recall"]);
    let x = model(&r, "x");
    let recall = (0.75 + 4.0 / 7.0) / 2.0;
    let close = |a: f64, b: f64, tol: f64| assert!((a - b).abs() < tol, "{a} vs {b}");
    close(x.category_goodness[1].value, recall, 1e-12);
    close(x.category_goodness[0].value, 2.0 / 3.0, 1e-12);
    close(x.goodness.value, (recall + 2.0 / 3.0) / 2.0, 1e-12);
    close(x.category_goodness[0].lower, 0.025f64.sqrt(), 0.015);
    close(x.category_goodness[0].upper, 0.975f64.sqrt(), 0.005);
    let y = model(&r, "y");
    close(
        y.goodness.value,
        ((0.5 + 6.0 / 7.0) / 2.0 + 1.0 / 3.0) / 2.0,
        1e-12,
    );
    close(y.category_goodness[0].lower, 1.0 - 0.975f64.sqrt(), 0.005);
    close(y.category_goodness[0].upper, 1.0 - 0.025f64.sqrt(), 0.015);
    // x is better overall: listed first.
    assert_eq!(r.models[0].model, "x");
    // Every overall interval contains its point.
    for m in &r.models {
        assert!(m.goodness.lower < m.goodness.value && m.goodness.value < m.goodness.upper);
    }
    let f = x.fastness.unwrap();
    assert_eq!((f.value, f.lower, f.upper), (6.5, 6.0, 7.0));
    let cf = x.category_fastness.as_ref().unwrap();
    assert_eq!((cf[1].value, cf[1].lower, cf[1].upper), (3.0, 2.0, 4.0));
    assert_eq!((cf[0].value, cf[0].lower, cf[0].upper), (10.0, 10.0, 10.0));

    // Benchmarks weighted by their questions: recall (10 * 0.75 + 5 * 4/7) / 15.
    let sized = run(
        &dir.path().join("t.csv"),
        &MpgOptions {
            benchmark_weight: Weighting::Size,
            ..opts()
        },
    );
    close(
        model(&sized, "x").category_goodness[1].value,
        (7.5 + 5.0 * 4.0 / 7.0) / 15.0,
        1e-12,
    );
    // A stronger prior pulls towards its mean: Beta(10, 10) moves C's 1/1 to 11/21.
    let strong = run(
        &dir.path().join("t.csv"),
        &MpgOptions {
            prior: (10.0, 10.0),
            ..opts()
        },
    );
    close(
        model(&strong, "x").category_goodness[0].value,
        11.0 / 21.0,
        1e-12,
    );
}

/// jsonl with `accuracy` reads as csv with `correct = accuracy * questions`; the category file
/// replaces the column.
#[test]
fn accuracy_jsonl_and_category_file_agree_with_csv() {
    let dir = tempfile::tempdir().unwrap();
    let csv = run(&write(dir.path(), "t.csv", TABLE), &opts());
    let mut jsonl = String::new();
    for l in TABLE.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        let acc = f[3].parse::<f64>().unwrap() / f[4].parse::<f64>().unwrap();
        jsonl += &format!(
            "{{\"model\":\"{}\",\"benchmark\":\"{}\",\"accuracy\":{acc},\"questions\":{},\"qps\":{}}}\n",
            f[0], f[1], f[4], f[5]
        );
    }
    let p = write(dir.path(), "t.jsonl", &jsonl);
    let cats = write(
        dir.path(),
        "cats.csv",
        "benchmark,category\nA,recall\nB,recall\nC,reasoning\n",
    );
    let map = read_categories(&cats).unwrap();
    let rows = read_results(&p).unwrap();
    let j = score(&rows, Some((&map, "cats.csv")), "t.jsonl", &opts()).unwrap();
    assert_eq!(
        csv.models.len(),
        j.models.len(),
        "the same models from both inputs"
    );
    assert!(!j.models.is_empty());
    for (a, b) in csv.models.iter().zip(&j.models) {
        assert!((a.goodness.value - b.goodness.value).abs() < 1e-12);
        assert_eq!(a.fastness, b.fastness);
    }
}

/// A wrong category file, a missing cell, an accuracy given in percent: errors naming file and field.
#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "t.csv", TABLE);
    let rows = read_results(&t).unwrap();
    let err = |cats: &str| {
        let p = write(dir.path(), "cats.csv", cats);
        let map = read_categories(&p).unwrap();
        score(&rows, Some((&map, "cats.csv")), "t.csv", &opts())
            .unwrap_err()
            .to_string()
    };
    let e = err("benchmark,category\nA,recall\nB,recall\n");
    assert!(
        e.contains("category file cats.csv") && e.contains("\"C\""),
        "{e}"
    );
    let e = err("benchmark,category\nA,recall\nB,recall\nC,reasoning\nD,recall\n");
    assert!(
        e.contains("cats.csv") && e.contains("\"D\" is not in t.csv"),
        "{e}"
    );
    let p = write(
        dir.path(),
        "dup.csv",
        "benchmark,category\nA,recall\nA,reasoning\n",
    );
    let e = read_categories(&p).unwrap_err().to_string();
    assert!(e.contains("dup.csv:3") && e.contains("\"A\""), "{e}");
    let p = write(dir.path(), "cats.json", "[\"A\"]");
    assert!(read_categories(&p)
        .unwrap_err()
        .to_string()
        .contains("cats.json"));

    let missing = TABLE.lines().take(6).collect::<Vec<_>>().join("\n");
    let p = write(dir.path(), "m.csv", &missing);
    let e = score(&read_results(&p).unwrap(), None, "m.csv", &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"y\"") && e.contains("\"C\""), "{e}");

    let p = write(
        dir.path(),
        "pct.jsonl",
        "{\"model\":\"x\",\"benchmark\":\"A\",\"accuracy\":80,\"questions\":10,\"category\":\"c\"}\n",
    );
    let e = read_results(&p).unwrap_err().to_string();
    assert!(e.contains("pct.jsonl:1") && e.contains("`accuracy`"), "{e}");
    let p = write(
        dir.path(),
        "bad.csv",
        "model,benchmark,correct,questions\nx,A,three,10\n",
    );
    let e = read_results(&p).unwrap_err().to_string();
    assert!(e.contains("bad.csv:2"), "{e}");
    let p = write(
        dir.path(),
        "over.csv",
        "model,benchmark,correct,questions\nx,A,11,10\n",
    );
    let e = read_results(&p).unwrap_err().to_string();
    assert!(e.contains("over.csv:2") && e.contains("`correct`"), "{e}");
}

fn report_with(goodness: &[f64]) -> MpgReport {
    let e = |v| Estimate {
        value: v,
        lower: v,
        upper: v,
    };
    MpgReport {
        categories: vec![],
        benchmarks: vec![],
        fastness_source: None,
        level: 0.95,
        models: goodness
            .iter()
            .enumerate()
            .map(|(i, &g)| ModelScores {
                model: format!("m{i}"),
                goodness: e(g),
                category_goodness: vec![],
                fastness: None,
                category_fastness: None,
            })
            .collect(),
    }
}

/// Pearson by hand: x = (0.1, 0.2, 0.3, 0.4), y = (1000, 1100, 1200, 1400): deviations
/// (-0.15, -0.05, 0.05, 0.15) and (-175, -75, 25, 225), so r = 65 / sqrt(0.05 * 87500); the
/// ranks agree, so Spearman is 1. A model the arena lacks is listed, not used.
#[test]
fn correlations_by_hand() {
    let r = report_with(&[0.1, 0.2, 0.3, 0.4, 0.9]);
    let arena: HashMap<String, f64> = [1000.0, 1100.0, 1200.0, 1400.0]
        .iter()
        .enumerate()
        .map(|(i, &v)| (format!("m{i}"), v))
        .collect();
    let c = compare(&r, &arena, 500, 0.95, 0).unwrap();
    let k = &c.correlations[0];
    assert!((k.pearson.value - 65.0 / (0.05f64 * 87500.0).sqrt()).abs() < 1e-12);
    assert_eq!(k.spearman.value, 1.0);
    assert!(k.pearson.lower <= k.pearson.value && k.pearson.value <= k.pearson.upper);
    assert_eq!(c.missing_from_arena, ["m4"]);
    let few: HashMap<String, f64> = [("m0".to_string(), 1.0)].into();
    assert!(compare(&r, &few, 10, 0.95, 0).is_err());
}

/// Simulated models: true abilities, benchmark accuracies `sigmoid(ability - difficulty)` drawn
/// binomially, an arena rating from the same abilities plus noise. Goodness tracks the arena.
#[test]
fn simulated_models_agree_with_an_arena_from_the_same_abilities() {
    use rand::{Rng, SeedableRng};
    use rand_distr::{Binomial, Distribution, Normal};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let models = 12;
    let benchmarks = [
        ("b0", "recall", -1.0),
        ("b1", "recall", 0.0),
        ("b2", "reasoning", 0.5),
        ("b3", "reasoning", 1.5),
        ("b4", "language", 0.0),
    ];
    let mut table = String::from("model,benchmark,category,correct,questions\n");
    let mut arena = HashMap::new();
    let noise = Normal::new(0.0, 30.0).unwrap();
    for m in 0..models {
        let ability = -1.5 + 3.0 * m as f64 / (models - 1) as f64;
        for (b, cat, d) in benchmarks {
            let n = rng.gen_range(100..400u64);
            let p = 1.0 / (1.0 + (d - ability).exp());
            let k = Binomial::new(n, p).unwrap().sample(&mut rng);
            table += &format!("m{m:02},{b},{cat},{k},{n}\n");
        }
        arena.insert(
            format!("m{m:02}"),
            1000.0 + 400.0 / 10f64.ln() * ability + noise.sample(&mut rng),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let r = run(&write(dir.path(), "sim.csv", &table), &opts());
    let c = compare(&r, &arena, 2000, 0.95, 0).unwrap();
    let k = &c.correlations[0];
    eprintln!(
        "simulated: Pearson {:.4} [{:.4}, {:.4}], Spearman {:.4} [{:.4}, {:.4}]",
        k.pearson.value,
        k.pearson.lower,
        k.pearson.upper,
        k.spearman.value,
        k.spearman.lower,
        k.spearman.upper
    );
    assert!(k.pearson.value > 0.9 && k.pearson.lower > 0.7, "{k:?}");
    assert!(k.pearson.upper <= 1.0 && k.spearman.value > 0.9);
    assert_eq!(c.correlations.len(), 4);
}
