//! The real model (SmolLM2-135M-Instruct from PyPI, see scripts/real_model.sh) loads and
//! computes the logits transformers computes: f32 on CPU within 1e-4 over a left-padded batch.

mod hf_support;

use hf_support::real_model::real_model;
use hf_support::{batch, logits, root, run_python_tol, write_reference};
use reinforge_torch::tch::Device;
use reinforge_torch::Policy;

#[test]
fn smollm2_logits_match_transformers_in_f32() {
    let Some(dir) = real_model(&root()) else {
        return;
    };
    let policy = Policy::load(&dir, Device::Cpu).unwrap();
    let (ids, mask, pos) = batch(policy.model.config().vocab_size as i64);
    let ours = logits(&policy, &ids, &mask, &pos);
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("smollm2.safetensors");
    write_reference(&reference, ids, mask, pos, &ours);
    let diffs = run_python_tol("check_hf_checkpoint.py", 1e-4, &[dir, reference]);
    println!(
        "SmolLM2 f32 logits: max |reinforge - transformers| = {:.3e}",
        diffs[0]
    );
    assert!(diffs[0] <= 1e-4, "{}", diffs[0]);
}
