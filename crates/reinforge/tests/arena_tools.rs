//! `rank --covariate` (Search Arena covariates) and `mpg` (Project MPG) end to end: files in,
//! tables out, bad inputs named.

use crate::common;

use common::{reinforge, root};
use std::path::Path;

fn run_ok(args: &[&str]) -> String {
    let out = reinforge(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = reinforge(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

const COV: &str = "cites=conv_metadata.cites_a,conv_metadata.cites_b";

/// `rank --ci sandwich --covariate` equals arena-rank's ContextualBradleyTerry on the same
/// covariate (fixture cases at reg 1 and 0); the penalised report carries the unpenalised value.
#[test]
fn rank_covariate_matches_arena_rank() {
    let exp: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("fixtures/data/arena/arena_rank_expected.json"))
            .unwrap(),
    )
    .unwrap();
    let mut unpenalised = vec![];
    for (case, reg) in [("covariate_reg0", "0"), ("covariate_reg1", "1")] {
        let c = &exp["cases"][case];
        let input = root().join(c["input"].as_str().unwrap());
        let text = run_ok(&[
            "rank",
            "--ci",
            "sandwich",
            "--format",
            "json",
            "--covariate",
            COV,
            "--reg",
            reg,
            "--input",
            input.to_str().unwrap(),
        ]);
        let lb: serde_json::Value = serde_json::from_str(&text).unwrap();
        let want = &c["converged"];
        let rows = lb["rows"].as_array().unwrap();
        // Every model of arena-rank's fit is ranked, so no rating goes unchecked.
        assert_eq!(
            rows.len(),
            want["ratings"].as_object().unwrap().len(),
            "{case}: models ranked"
        );
        for row in rows {
            let m = row["model"].as_str().unwrap();
            for (key, fixture_key) in [
                ("rating", "ratings"),
                ("lower", "lower"),
                ("upper", "upper"),
            ] {
                let (got, w) = (
                    row[key].as_f64().unwrap(),
                    want[fixture_key][m].as_f64().unwrap(),
                );
                assert!((got - w).abs() < 1e-6, "{case} {m} {key}: {got} vs {w}");
            }
        }
        let coef = &lb["coefficients"][0];
        assert_eq!(coef["name"], "cites");
        let per_sd = coef["per_sd"].as_f64().unwrap();
        assert!((per_sd - want["coefficients"][0].as_f64().unwrap()).abs() < 1e-9);
        let (lo, hi) = (
            coef["lower"].as_f64().unwrap(),
            coef["upper"].as_f64().unwrap(),
        );
        assert!(lo < coef["per_unit"].as_f64().unwrap() && coef["per_unit"].as_f64().unwrap() < hi);
        if reg == "0" {
            assert!(coef["unpenalised_per_unit"].is_null());
            unpenalised.push(coef["per_unit"].as_f64().unwrap());
        } else {
            let u = coef["unpenalised_per_unit"].as_f64().unwrap();
            assert!((u - unpenalised[0]).abs() < 1e-9, "{u} vs {unpenalised:?}");
            // The true effect (2.0) is inside the unpenalised interval and far above the
            // penalised one.
            assert!(hi < 1.0, "{coef}");
        }
    }
    assert!(
        unpenalised[0] > 1.5 && unpenalised[0] < 2.5,
        "{unpenalised:?}"
    );
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Missing, non-numeric and one-sided covariate fields are errors naming the line and field; so
/// are flags that cannot apply.
#[test]
fn rank_covariate_bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let ok = r#"{"model_a":"x","model_b":"y","winner":"model_a","conv_metadata":{"cites_a":1,"cites_b":2}}"#;
    let cases = [
        (
            r#"{"model_a":"y","model_b":"x","winner":"tie","conv_metadata":{"cites_a":1}}"#,
            "field `conv_metadata.cites_b`: missing while `conv_metadata.cites_a` is present",
        ),
        (
            r#"{"model_a":"y","model_b":"x","winner":"tie","conv_metadata":{"cites_a":"3","cites_b":1}}"#,
            "field `conv_metadata.cites_a`",
        ),
        (
            r#"{"model_a":"y","model_b":"x","winner":"tie"}"#,
            "fields `conv_metadata.cites_a` and `conv_metadata.cites_b`: missing",
        ),
    ];
    for (i, (line, want)) in cases.iter().enumerate() {
        let p = write(
            dir.path(),
            &format!("b{i}.jsonl"),
            &format!("{ok}\n{line}\n"),
        );
        let e = fails(&[
            "rank",
            "--ci",
            "sandwich",
            "--covariate",
            COV,
            "--input",
            &p,
        ]);
        assert!(
            e.contains(&format!("b{i}.jsonl:2")) && e.contains(want),
            "{e}"
        );
    }
    let p = write(dir.path(), "ok.jsonl", &format!("{ok}\n"));
    let e = fails(&["rank", "--covariate", COV, "--input", &p]);
    assert!(e.contains("--ci sandwich"), "{e}");
    let e = fails(&[
        "rank",
        "--ci",
        "sandwich",
        "--covariate",
        "cites",
        "--input",
        &p,
    ]);
    assert!(e.contains("NAME=FIELD_A,FIELD_B"), "{e}");
    let e = fails(&[
        "rank",
        "--ci",
        "sandwich",
        "--covariate",
        COV,
        "--covariate-transform",
        "ratio",
        "--input",
        &p,
    ]);
    assert!(e.contains("diff-over-sum"), "{e}");
    let e = fails(&[
        "rank",
        "--ci",
        "sandwich",
        "--covariate",
        COV,
        "--covariate-transform",
        "links=diff",
        "--input",
        &p,
    ]);
    assert!(e.contains("\"links\""), "{e}");
}

/// A named transform changes the feature (and so the per-unit coefficient); naming the default
/// changes nothing.
#[test]
fn rank_covariate_transform_is_applied() {
    let input = root().join("fixtures/data/arena/covariate-battles.jsonl");
    let input = input.to_str().unwrap();
    let coef = |extra: &[&str]| -> f64 {
        let mut args = vec![
            "rank",
            "--ci",
            "sandwich",
            "--format",
            "json",
            "--covariate",
            COV,
        ];
        args.extend(extra);
        args.extend(["--input", input]);
        let lb: serde_json::Value = serde_json::from_str(&run_ok(&args)).unwrap();
        lb["coefficients"][0]["per_unit"].as_f64().unwrap()
    };
    let default = coef(&[]);
    assert_eq!(
        default,
        coef(&["--covariate-transform", "cites=diff-over-sum"])
    );
    let diff = coef(&["--covariate-transform", "diff"]);
    assert!((diff - default).abs() > 1e-3, "{diff} vs {default}");
}

const TABLE: &str = "model,benchmark,correct,questions,qps
x,A,8,10,2
x,B,3,5,4
x,C,1,1,10
y,A,5,10,1
y,B,5,5,1
y,C,0,1,1
z,A,2,10,3
z,B,1,5,3
z,C,0,1,3
";

/// `mpg` with a category file and an arena leaderboard: Goodness as worked by hand, the
/// correlations reported; a category file that misses a benchmark is an error naming it.
#[test]
fn mpg_reports_goodness_and_arena_agreement() {
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), "t.csv", TABLE);
    let cats = write(
        dir.path(),
        "cats.csv",
        "benchmark,category\nA,recall\nB,recall\nC,reasoning\n",
    );
    let arena = write(
        dir.path(),
        "arena.csv",
        "rank,model,rating\n1,x,1100\n2,y,1050\n3,z,900\n",
    );
    let text = run_ok(&[
        "mpg",
        "--input",
        &t,
        "--categories",
        &cats,
        "--arena",
        &arena,
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let x = &v["mpg"]["models"][0];
    assert_eq!(x["model"], "x");
    let want = ((0.75 + 4.0 / 7.0) / 2.0 + 2.0 / 3.0) / 2.0;
    assert!((x["goodness"]["value"].as_f64().unwrap() - want).abs() < 1e-12);
    assert_eq!(v["mpg"]["fastness_source"], "qps");
    let overall = &v["arena"]["correlations"][0];
    assert_eq!(overall["scope"], "overall");
    assert_eq!(overall["spearman"]["value"].as_f64().unwrap(), 1.0);
    let md = run_ok(&[
        "mpg",
        "--input",
        &t,
        "--categories",
        &cats,
        "--arena",
        &arena,
    ]);
    assert!(
        md.contains("Pearson") && md.contains("recall (A, B)"),
        "{md}"
    );

    let bad = write(
        dir.path(),
        "bad.csv",
        "benchmark,category\nA,recall\nB,recall\n",
    );
    let e = fails(&["mpg", "--input", &t, "--categories", &bad]);
    assert!(e.contains("bad.csv") && e.contains("\"C\""), "{e}");
    let e = fails(&["mpg", "--input", &t]);
    assert!(e.contains("t.csv:2") && e.contains("`category`"), "{e}");
}

/// A covariate that never varies cannot be estimated: an error naming it, not a fit that fails
/// to converge.
#[test]
fn rank_constant_covariate_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let line = |a: &str, b: &str, w: &str| {
        format!(
            r#"{{"model_a":"{a}","model_b":"{b}","winner":"{w}","conv_metadata":{{"cites_a":2,"cites_b":2}}}}"#
        )
    };
    let text = [
        line("x", "y", "model_a"),
        line("y", "x", "model_a"),
        line("x", "z", "model_b"),
    ]
    .join("\n");
    let p = write(dir.path(), "c.jsonl", &text);
    let e = fails(&[
        "rank",
        "--ci",
        "sandwich",
        "--covariate",
        COV,
        "--reg",
        "0",
        "--input",
        &p,
    ]);
    assert!(e.contains("\"cites\"") && e.contains("same feature"), "{e}");
}
