//! The training room: the tensor side of every trainer. Packed batches (`batch`), per-token
//! log-probs (`logprobs`), the loss registries (`loss`), memory bounds (`memory`), AdamW
//! (`optim`); the RL step's two calls (`rl`), SFT (`sft`), the preference trainers
//! (`preference`), distillation (`distill`) and Tinker's forward-backward (`tinker`).

pub mod batch;
pub mod distill;
pub mod logprobs;
pub mod loss;
pub mod memory;
pub mod optim;
pub mod preference;
pub mod rl;
pub mod sft;
pub mod tinker;
