//! A character-level tokenizer for the built-in tasks.
//!
//! The synthetic tasks use a tiny alphabet, so a fixed character vocabulary is exact and keeps
//! the default model small. Real checkpoints bring their own `tokenizer.json` instead.

use serde::{Deserialize, Serialize};

/// Id of the padding token.
pub const PAD: i64 = 0;
/// Id of the beginning-of-sequence token.
pub const BOS: i64 = 1;
/// Id of the end-of-sequence token (the stop token of sampling).
pub const EOS: i64 = 2;

/// Maps each character of a fixed alphabet to one id; ids 0..3 are `<pad>`, `<bos>`, `<eos>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharTokenizer {
    alphabet: Vec<char>,
}

/// A character outside the tokenizer's alphabet.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("character {ch:?} at byte {pos} is not in the tokenizer's alphabet {alphabet:?}")]
pub struct UnknownChar {
    pub ch: char,
    pub pos: usize,
    pub alphabet: String,
}

impl CharTokenizer {
    /// A tokenizer over `alphabet` (order fixes the ids, starting at 3).
    pub fn new(alphabet: &str) -> Self {
        Self {
            alphabet: alphabet.chars().collect(),
        }
    }

    /// Number of ids, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.alphabet.len() + 3
    }

    /// Encodes `text` without special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>, UnknownChar> {
        text.char_indices()
            .map(|(pos, ch)| {
                self.alphabet
                    .iter()
                    .position(|&c| c == ch)
                    .map(|i| i as i64 + 3)
                    .ok_or_else(|| UnknownChar {
                        ch,
                        pos,
                        alphabet: self.alphabet.iter().collect(),
                    })
            })
            .collect()
    }

    /// Decodes ids to text, stopping at the first `<eos>` and skipping `<pad>`/`<bos>`.
    /// Ids outside the vocabulary decode to `�`.
    pub fn decode(&self, ids: &[i64]) -> String {
        ids.iter()
            .take_while(|&&id| id != EOS)
            .filter(|&&id| id != PAD && id != BOS)
            .map(|&id| {
                usize::try_from(id - 3)
                    .ok()
                    .and_then(|i| self.alphabet.get(i))
                    .copied()
                    .unwrap_or('\u{FFFD}')
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_stops_at_eos() {
        let tok = CharTokenizer::new("0123456789+=");
        let ids = tok.encode("12+3=").unwrap();
        assert_eq!(ids, vec![4, 5, 13, 6, 14]);
        let mut with_eos = ids.clone();
        with_eos.extend([EOS, 4, 4]);
        assert_eq!(tok.decode(&with_eos), "12+3=");
        assert_eq!(tok.vocab_size(), 15);
    }

    #[test]
    fn unknown_char_is_named() {
        let tok = CharTokenizer::new("01");
        let err = tok.encode("01x").unwrap_err();
        assert_eq!(err.ch, 'x');
        assert_eq!(err.pos, 2);
    }
}
