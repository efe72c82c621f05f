//! The algorithm catalogue of reinforge that needs no autograd: advantage estimators and the
//! statistics of a batch of grouped rollouts. Pure Rust, so it is testable without libtorch
//! and usable by trainers that bring their own tensor engine.

pub mod advantage;
pub mod groups;

pub use advantage::{grpo_advantages, AdvantageConfig};
pub use groups::{GroupStats, Groups};
