//! Pass@k, maj@k, Bradley-Terry/Elo leaderboards, tournaments and rliable-style statistics. Pure Rust.
//!
//! The `reinforge` binary's `rank`, `mpg`, `passk`, `stats` and `tournament` commands are front
//! ends to: [`bt`] (Bradley-Terry / Rao-Kupper fits), [`elo`] (online Elo), [`bootstrap`]
//! (intervals and ranks), [`style`] (style control), [`covariates`] (Search Arena's per-battle
//! covariates of the contextual model), [`leaderboard`] (the `rank` pipeline), [`passk`] (pass@k /
//! maj@k), [`rliable`] (IQM, optimality gap, probability of improvement, performance profiles),
//! [`decompose`] (a pass@1 change split into pattern selection and per-pattern improvement),
//! [`tournament`] (Swiss and single-elimination schedules), [`sandwich`] (arena-rank's BT with
//! sandwich intervals; [`sandwich_board`] its leaderboard), [`ppe`] (PPE reward-model metrics), [`rewardbench2`] (RewardBench 2
//! scoring), [`mpg`] (Project MPG's Goodness and Fastness) and [`p2l`] (P2L aggregate
//! leaderboards and routing).

pub mod bootstrap;
pub mod bt;
pub mod covariates;
pub mod decompose;
pub mod elo;
pub mod io;
pub mod judge;
pub mod leaderboard;
pub mod linalg;
pub mod mpg;
pub mod p2l;
pub mod passk;
pub mod passk_change;
pub mod ppe;
pub mod rewardbench2;
pub mod rliable;
pub mod samples;
pub mod sandwich;
pub mod sandwich_board;
pub mod scores;
pub mod style;
pub mod tournament;
