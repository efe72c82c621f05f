//! Locating the ranking fixtures (`fixtures/data/rank`, copied from the shared reference data).
#![allow(dead_code)]

use std::path::PathBuf;

/// `fixtures/data/rank`, overridable with `REINFORGE_RANK_DATA_DIR`.
pub fn rank_dir() -> PathBuf {
    match std::env::var_os("REINFORGE_RANK_DATA_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/data/rank"),
    }
}

pub fn read_json(name: &str) -> serde_json::Value {
    let p = rank_dir().join(name);
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// Max absolute difference between `ours[model]` and `reference[model]` over the reference's models.
pub fn max_abs_diff(
    models: &[String],
    ours: &[f64],
    reference: &serde_json::Value,
) -> (f64, String) {
    let obj = reference.as_object().expect("object of ratings");
    assert_eq!(obj.len(), models.len(), "model count");
    let mut worst = (0.0, String::new());
    for (m, v) in obj {
        let i = models
            .iter()
            .position(|x| x == m)
            .unwrap_or_else(|| panic!("model {m} missing"));
        let d = (ours[i] - v.as_f64().unwrap()).abs();
        if d >= worst.0 {
            worst = (d, m.clone());
        }
    }
    worst
}
