//! pass@k against the golden vectors (`fixtures/oracles/pass_at_k.json`, computed with exact fractions).

use reinforge_eval::passk::pass_at_k;
use std::path::PathBuf;

fn oracles_dir() -> PathBuf {
    match std::env::var_os("REINFORGE_ORACLES_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/oracles"),
    }
}

#[test]
fn pass_at_k_matches_oracle() {
    let path = oracles_dir().join("pass_at_k.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().expect("cases array");
    assert!(
        cases.len() >= 20,
        "expected the full oracle, got {} cases",
        cases.len()
    );
    let mut checked = 0;
    for case in cases {
        assert_eq!(case["function"], "pass_at_k");
        let p = &case["params"];
        let (n, c, k) = (
            p["n"].as_u64().unwrap(),
            p["c"].as_u64().unwrap(),
            p["k"].as_u64().unwrap(),
        );
        let want = case["expected"]["pass_at_k"].as_f64().unwrap();
        let got = pass_at_k(n, c, k);
        assert!(
            (got - want).abs() <= 1e-12 * want.abs().max(f64::MIN_POSITIVE),
            "{}: n={n} c={c} k={k}: got {got:e}, want {want:e}",
            case["case"]
        );
        // When the exact rational is given, check against it too.
        if let Some(ex) = case["expected"]["exact"].as_str() {
            let (p, q) = ex.split_once('/').unwrap();
            let r = p.parse::<f64>().unwrap() / q.parse::<f64>().unwrap();
            assert!(
                (got - r).abs() <= 1e-12 * r.abs().max(f64::MIN_POSITIVE),
                "{ex}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, cases.len());
}
