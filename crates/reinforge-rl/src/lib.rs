//! The algorithm catalogue of reinforge that needs no autograd: advantage estimators, reward
//! shaping and the statistics of a batch of grouped rollouts. Pure Rust (f64), so it is testable
//! without libtorch and usable by trainers that bring their own tensor engine. Each function names
//! the verl or TRL function whose numbers it reproduces (see `docs/algorithms.md`).

pub mod advantage;
pub mod groups;
pub mod masked;
pub mod overlong;
pub mod stats;

pub use advantage::outcome::{
    estimate, Estimator, EstimatorError, EstimatorInputs, EstimatorParams,
};
pub use advantage::{grpo_advantages, AdvantageConfig, AdvantageOutput};
pub use groups::{GroupStats, Groups};
pub use masked::Matrix;
