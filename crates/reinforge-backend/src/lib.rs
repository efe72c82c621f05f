//! The libtorch models behind reinforge-serve's traits: the one place where "a model behind a
//! server" lives, so the binary only wires flags to them.
//!
//! - [`policy`]: [`TorchGenerator`], the OpenAI-compatible policy server's `Generator` over
//!   the KV-cache sampler (`reinforge serve --model`).
//! - [`tinker`]: [`TorchTinker`], the Tinker API's training backend, and [`TinkerSampler`],
//!   its sampling engine's `Generator` (`reinforge serve --model --tinker`).
//! - [`tokens`]: the pad and stop ids a checkpoint's tokenizer files give.
//! - `convert`: the server's sampling types as the sampler's and back, shared by both.

mod convert;
pub mod policy;
pub mod tinker;
pub mod tokens;

pub use policy::TorchGenerator;
pub use tinker::{TinkerSampler, TorchTinker};
