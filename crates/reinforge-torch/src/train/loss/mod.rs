//! Policy-gradient losses with autograd, each function reproducing one verl (`core_algos.py` @
//! 1dda039) or TRL (`grpo_trainer.py` @ f2cd577) function numerically, generic over the float
//! dtype of its inputs (f64 for the oracles, f32 in training):
//! - [`registry`]: the policy losses by verl's registered names ([`PolicyLossKind`]); the
//!   trainer ([`crate::train::rl::policy_objective`]) calls exactly these functions;
//! - [`agg`]: verl `agg_loss`, its 5 modes ([`AggMode`]) and the global-batch normalisation;
//! - [`kl`]: verl `kl_penalty` (every estimator, `+` straight-through: [`KlPenalty`]), entropy,
//!   KL-in-reward;
//! - [`policy`]: the shared verl loss config and output;
//! - [`clip_family`]: vanilla PPO (clip-higher, dual-clip), GSPO, CISPO, SAPO, DPPO-TV/KL, GMPO;
//! - [`pg_family`]: GPG, DRO, KL-Cov, Clip-Cov, REINFORCE, the value loss;
//! - [`tis`]: truncated importance sampling between sampler and trainer ([`Tis`]);
//! - [`distill`]: TRL's distillation losses (GKD's generalised JSD with β, temperature and
//!   reduction; the top-k teacher of its server distillation, [`distill::Jsd`]);
//! - [`dpo`]: TRL's DPO family (every `loss_type`, f-divergences, the logged metrics,
//!   [`dpo::DpoLoss`]);
//! - [`orpo`]: TRL's ORPO (odds-ratio term plus the chosen NLL, reference-free);
//! - [`kto`]: TRL's KTO on unpaired rows (`kto`, `apo_zero_unpaired`, [`kto::KtoLoss`]);
//! - [`reward_model`]: TRL's Bradley-Terry reward-model loss (margins, reward centering);
//! - [`router`]: the mixture-of-experts load-balancing loss (transformers'
//!   `load_balancing_loss_func`);
//! - [`p2l`]: Prompt-to-Leaderboard's losses (lmarena/p2l `p2l/model.py`: bt, bt-tie, rk,
//!   rk-reparam, ba, grk/bag, [`p2l::P2lLoss`]).
//!
//! Every enum selected by name in a config file (`PolicyLossKind`, `AggMode`, `KlPenalty`,
//! `Tis`) uses verl's spelling in serde and `FromStr`, and its errors list the valid names.

pub mod agg;
pub mod clip_family;
pub mod distill;
pub mod dpo;
pub mod kl;
pub mod kto;
mod names;
pub mod orpo;
pub mod p2l;
pub mod pg_family;
pub mod policy;
pub mod registry;
pub mod reward_model;
pub mod router;
pub mod tis;

pub use agg::{AggMode, GlobalBatchInfo};
pub use kl::KlPenalty;
pub use policy::{PolicyInputs, PolicyLoss, VerlPolicyConfig};
pub use registry::PolicyLossKind;
pub use tis::Tis;
