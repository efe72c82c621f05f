//! Tests of `reinforge_train::presets` through its public API (moved out of the library source).

use reinforge_train::presets::*;

#[test]
fn names_are_the_documented_ones() {
    assert_eq!(
        preset_names(),
        "grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp, ppo"
    );
}
