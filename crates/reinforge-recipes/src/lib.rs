//! reinforge's recipes: what runs on the training core (reinforge-train), each a module.
//!
//! - `arith/`: the default experiment (1-digit addition patterns: SFT, GRPO, the selection /
//!   improvement report), its retry game and `reinforge bench`'s timed GRPO iterations;
//! - `data/`: a user's dataset as an environment (single- or multi-turn, the calculator tool),
//!   its held-out evaluation and report; `derl/`: DERL's reward-design search;
//! - `offline/`: the offline trainers (SFT, DPO, ORPO, KTO, reward models, distillation, P2L)
//!   over `pairs` (preference rows shared by DPO, RM and `score-rm`);
//! - `judge`, `scorers`: LLM judges and the learned reward components of a reward spec;
//!   `judge/rows`: `reinforge judge` over a file; `score`: `reinforge score`; `generate`: the
//!   sampling settings of `reinforge generate`; `loaded`: a checkpoint loaded with its tokenizer;
//! - `explain/`: `reinforge explain`, what a config will do (keys, memory).

pub mod arith;
pub mod data;
pub mod derl;
pub mod explain;
pub mod generate;
pub mod images;
pub mod judge;
pub mod loaded;
pub mod offline;
pub mod pairs;
pub mod score;
pub mod scorers;
