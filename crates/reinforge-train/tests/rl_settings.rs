//! Tests of `reinforge_train::rl::settings` through its public API (moved out of the library source).

use reinforge_train::config::PpoConfig;
use reinforge_train::config::TrainConfig;
use reinforge_train::rl::settings::*;
use reinforge_train::seeds::rl_step_seed;

/// `grpo/mod.rs` set verl's `clip_ratio` and `clip_ratio_low` both to `epsilon_low`: the
/// clip range the losses apply is still `[1 - epsilon_low, 1 + epsilon_high]`, because
/// `clip_ratio` is only verl's fallback for an unset bound.
#[test]
fn the_clip_range_is_epsilon_low_and_epsilon_high() {
    let mut rl = TrainConfig::default().grpo;
    (rl.epsilon_low, rl.epsilon_high) = (0.1, 0.3);
    let s = StepSettings::new(&rl, &PpoConfig::default(), 0, 0);
    let loss = &s.update.loss;
    assert_eq!((loss.low(), loss.high()), (0.1, 0.3));
    let mut unset = loss.clone();
    (unset.clip_ratio_low, unset.clip_ratio_high) = (None, None);
    assert_eq!(
        (unset.low(), unset.high()),
        (0.1, 0.1),
        "clip_ratio is the fallback of both bounds"
    );
}

#[test]
fn steps_have_distinct_seeds_and_gap_measuring_is_opt_in() {
    let cfg = TrainConfig::default();
    let s = StepSettings::new(&cfg.grpo, &cfg.ppo, 7, 0);
    assert_ne!(s.step_seed(0), s.step_seed(1));
    assert_eq!(s.step_seed(3), rl_step_seed(7, 3));
    assert!(!s.pack.measure_gap && s.measuring_gap().pack.measure_gap);
}
