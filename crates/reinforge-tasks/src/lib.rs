//! Built-in synthetic, verifiable tasks for reinforge. Pure Rust: no tensors.
//!
//! The default experiment uses [`arith`], an addition task that can be solved in two written
//! chain-of-thought patterns whose success rates differ under a small SFT model. It exists to
//! reproduce the finding of "On the Mechanism of Reasoning Pattern Selection in Reinforcement
//! Learning for Language Models": RLVR mostly raises the share of the pattern with the highest
//! success rate, while each pattern's own success rate changes little.
//!
//! [`data`] reads prompt datasets (JSON Lines, Parquet) into [`PromptRecord`]s for training on real data.

pub mod arith;
pub mod data;
pub mod tokenizer;

pub use arith::{ArithTask, Pattern, Problem, Split, Verdict};
pub use data::{
    read_records, Content, ContentPart, DataColumns, DataError, Message, Prompt, PromptFormat,
    PromptRecord,
};
pub use tokenizer::CharTokenizer;
