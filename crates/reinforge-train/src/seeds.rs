//! Per-step seeds. Every step draws its data and samples from a generator seeded by
//! `(run seed, phase, step)`, so a resumed run continues exactly as an uninterrupted one.

/// The seed of `step` of `phase` (a SplitMix64 mix of the three).
pub fn step_seed(seed: u64, phase: u64, step: u64) -> u64 {
    let mut z =
        seed ^ phase.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seeds torch's generator (used by sampling) for one step.
pub fn seed_torch(seed: u64) {
    reinforge_torch::runtime::manual_seed(torch_seed(seed));
}

/// The torch seed of a step seed: non-negative and within i64, so it is also a valid OpenAI /
/// vLLM request `seed` (a remote engine seeded with it draws what [`seed_torch`] makes the
/// local sampler draw).
pub fn torch_seed(seed: u64) -> i64 {
    (seed >> 1) as i64
}

/// The seed of RL step `step` of a run seeded `seed`: its prompts, its sampling and its
/// mini-batch orders (the one place an RL step's seed is computed).
pub fn rl_step_seed(seed: u64, step: usize) -> u64 {
    step_seed(seed, PHASE_RL, step as u64)
}

pub const PHASE_SFT: u64 = 1;
/// The RL phase of every preset (the value is that of the former `PHASE_GRPO`, so runs draw
/// what they drew before).
pub const PHASE_RL: u64 = 2;
pub const PHASE_EVAL: u64 = 3;
/// Initialising new parameters of a loaded model (LoRA adapters, score heads).
pub const PHASE_INIT: u64 = 4;
/// Initialising PPO's value head. It was 4 (`PHASE_INIT`), so a value head drew the seed of
/// the LoRA adapters and score heads.
pub const PHASE_CRITIC: u64 = 5;
