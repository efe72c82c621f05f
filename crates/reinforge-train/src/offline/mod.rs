//! The offline trainers: preference optimisation (DPO, ORPO, KTO), reward models and
//! Prompt-to-Leaderboard, each a library `Options` struct and a `train` function running
//! through the one trainer (`trainer::Trainer::run_phase`). Their tensor work is
//! reinforge-torch's.

pub mod p2l;
