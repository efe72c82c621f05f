//! Tests of `reinforge_train::sft` through its public API (moved out of the library source).

use reinforge_train::config::SftConfig;
use reinforge_train::sft::*;

#[test]
fn schedule_warms_up_then_decays_to_a_tenth() {
    let cfg = SftConfig {
        steps: 100,
        batch_size: 1,
        lr: 1.0,
        warmup_steps: 10,
        max_grad_norm: 1.0,
        weight_decay: 0.0,
        checkpoint_every: 0,
    };
    assert!((lr_at(&cfg, 0) - 0.1).abs() < 1e-12);
    assert!((lr_at(&cfg, 10) - 1.0).abs() < 1e-12);
    assert!((lr_at(&cfg, 100) - 0.1).abs() < 1e-12);
    assert!(lr_at(&cfg, 50) < lr_at(&cfg, 20));
}
