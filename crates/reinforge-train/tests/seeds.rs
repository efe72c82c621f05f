//! Tests of `reinforge_train::seeds` through its public API (moved out of the library source).

use reinforge_train::seeds::*;

#[test]
fn phases_have_distinct_seeds() {
    let phases = [PHASE_SFT, PHASE_RL, PHASE_EVAL, PHASE_INIT, PHASE_CRITIC];
    let seeds: std::collections::BTreeSet<u64> =
        phases.iter().map(|&p| step_seed(0, p, 0)).collect();
    assert_eq!(seeds.len(), phases.len());
}
