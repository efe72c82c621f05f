//! The training room: the tensor side of every trainer, on the model room's forward passes.
//! The loss registries (`loss`) and AdamW (`optim`); the RL step's two calls (`rl`), SFT
//! (`sft`), the preference trainers (`preference`), Prompt-to-Leaderboard models and their
//! step (`p2l`), distillation (`distill`) and Tinker's forward-backward (`tinker`).

pub mod distill;
pub mod loss;
pub mod optim;
pub mod p2l;
pub mod preference;
pub mod rl;
pub mod sft;
pub mod tinker;
