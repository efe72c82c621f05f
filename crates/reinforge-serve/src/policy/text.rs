//! One choice's tokens turned into text: detokenisation, stop strings, streamed deltas.
//!
//! Stop strings are matched on the decoded text of the tokens generated so far, as vLLM's
//! `StopChecker` does (vllm/v1/engine/detokenizer.py): the text is cut before the stop string
//! (or after it with `include_stop_str_in_output`), the tokens are cut after the token that
//! completed it, and `finish_reason` is `"stop"` with the string as `stop_reason`. Unlike vLLM the
//! sampler does not see stop strings: the row keeps decoding (its later tokens are dropped) until
//! the batch's other limits end it. When streaming, text that could be the start of a stop string
//! is held back until it cannot be.
//!
//! Streamed text is decoded incrementally ([`IncrementalText`]): each token decodes a short window
//! of the tokens before it, not the whole text, so the work per token does not grow with the
//! length of the completion; stop strings are looked for in the new text and the few bytes before
//! it.
//!
//! [`first_stop`] is the one stop-string matcher of the house: the choices here and
//! [`StopWindow`] (engines that end a row on the token completing a stop string, as the Tinker
//! sampler does) both use it.

use std::collections::HashMap;

use reinforge_hf::HfTokenizer;

use super::backend::Finish;
use super::request::OutputOptions;

/// Why a choice ended, as reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub finish: Finish,
    /// vLLM's `stop_reason`: the stop string, or the request's stop token id.
    pub stop_reason: Option<serde_json::Value>,
}

impl Ending {
    pub fn finish_reason(&self) -> &'static str {
        match self.finish {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// Decodes ids with the served tokenizer (none: empty text, `token_id:N` tokens).
#[derive(Clone, Copy)]
pub struct Detok<'a> {
    pub tokenizer: Option<&'a HfTokenizer>,
    pub skip_special_tokens: bool,
}

impl Detok<'_> {
    /// The text of `ids` (empty without a tokenizer, or for ids the tokenizer does not know).
    pub fn text(&self, ids: &[i64]) -> String {
        let Some(tok) = self.tokenizer else {
            return String::new();
        };
        let ids: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
        tok.decode(&ids, self.skip_special_tokens)
            .unwrap_or_default()
    }

    /// The string naming one token in log-probs: its text, or `token_id:N` when asked for
    /// (vLLM's `return_tokens_as_token_ids`) or when there is no tokenizer.
    pub fn token(&self, id: i64, as_id: bool) -> String {
        match (self.tokenizer, as_id) {
            (Some(tok), false) => u32::try_from(id)
                .ok()
                .and_then(|i| tok.decode(&[i], false).ok())
                .unwrap_or_else(|| format!("token_id:{id}")),
            _ => format!("token_id:{id}"),
        }
    }
}

/// One choice being assembled.
#[derive(Debug, Default)]
pub struct Choice {
    /// Kept tokens (cut after a stop string).
    pub ids: Vec<i64>,
    pub logprobs: Vec<f32>,
    pub top: Vec<Vec<(i64, f32)>>,
    /// The prompt's tokens scored (`prompt_logprobs`), empty unless asked for.
    pub prompt: Vec<super::backend::PromptScore>,
    /// Tokens received, kept or not.
    pub seen: usize,
    /// The text of the kept tokens (cut at a stop string); filled as tokens come when
    /// incremental, else by [`Choice::finish`].
    pub text: String,
    pub ending: Option<Ending>,
    /// Bytes of `text` and tokens already streamed.
    pub sent_text: usize,
    pub sent_tokens: usize,
    /// Where incremental decoding stands in `ids`.
    pub window: IncrementalText,
}

/// Incremental detokenisation, as HF text-generation-inference's `decode_token`
/// (server/text_generation_server/models/model.py) and vLLM's `detokenize_incrementally`
/// (vllm/transformers_utils/detokenizer_utils.py): the tokens from `prefix` on are decoded
/// together with the tokens before `read` (already emitted), whose text is cut off by length, so
/// decoders that depend on the neighbouring tokens (leading spaces, byte fallback, byte-level
/// pieces of one character) give what decoding the whole sequence gives. Text ending in an
/// incomplete UTF-8 sequence (U+FFFD) is held back until a later token completes it, or until
/// [`IncrementalText::MAX_PENDING`] tokens have not (then it is invalid output and is emitted).
/// The `tokenizers` crate's `DecodeStream` (0.23) follows the same scheme, but it borrows the
/// tokenizer for the stream's life and decodes without [`HfTokenizer::decode`]'s space clean-up,
/// which the unstreamed text gets; this keeps two offsets and decodes through [`Detok`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct IncrementalText {
    /// The first token of the window: the tokens that give the emitted text its context.
    pub prefix: usize,
    /// The first token whose text has not been emitted.
    pub read: usize,
}

impl IncrementalText {
    /// Tokens waited for to complete a character before an invalid sequence is emitted as is
    /// (a UTF-8 character has at most 4 bytes; a token gives at least one).
    pub const MAX_PENDING: usize = 8;

    /// The text that `ids[self.read..]` completes (empty while it ends in an incomplete
    /// character). `decode` turns a slice of `ids` into text.
    pub fn step(&mut self, ids: &[i64], decode: impl FnMut(&[i64]) -> String) -> String {
        let force = ids.len().saturating_sub(self.read) >= Self::MAX_PENDING;
        self.advance(ids, decode, force)
    }

    /// All the text not yet emitted, complete or not (the choice ended).
    pub fn flush(&mut self, ids: &[i64], decode: impl FnMut(&[i64]) -> String) -> String {
        self.advance(ids, decode, true)
    }

    /// Decodes the window; emits the new text when it is complete or `force`.
    fn advance(
        &mut self,
        ids: &[i64],
        mut decode: impl FnMut(&[i64]) -> String,
        force: bool,
    ) -> String {
        let (prefix, read) = (self.prefix.min(ids.len()), self.read.min(ids.len()));
        if read == ids.len() {
            return String::new();
        }
        let before = decode(&ids[prefix..read]);
        let text = decode(&ids[prefix..]);
        if text.len() <= before.len() || (text.ends_with('\u{FFFD}') && !force) {
            return String::new();
        }
        self.prefix = read;
        self.read = ids.len();
        // Length, not a prefix test: a decoder that cleans up spaces may change the old text's
        // last characters (TGI slices the same way); cut at a character boundary.
        let mut at = before.len();
        while !text.is_char_boundary(at) {
            at += 1;
        }
        text[at..].to_string()
    }
}

impl Choice {
    /// Adds one generated token. `incremental` keeps `text` current (streaming or stop
    /// strings). Tokens after the choice ended are counted and dropped.
    pub fn push(
        &mut self,
        id: i64,
        logprob: f32,
        top: Option<Vec<(i64, f32)>>,
        detok: Detok,
        opts: &OutputOptions,
        incremental: bool,
    ) {
        self.seen += 1;
        if self.ending.is_some() {
            return;
        }
        self.ids.push(id);
        self.logprobs.push(logprob);
        if let Some(t) = top {
            self.top.push(t);
        }
        if incremental {
            let new = self.window.step(&self.ids, |ids| detok.text(ids));
            self.append(&new, opts);
        }
    }

    /// Appends newly decoded text and looks for stop strings in it (and in the bytes before it
    /// that a stop string could start in).
    fn append(&mut self, new: &str, opts: &OutputOptions) {
        if new.is_empty() {
            return;
        }
        let longest = opts.stop.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.text.len().saturating_sub(longest.saturating_sub(1));
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.text.push_str(new);
        self.check_stop_strings(opts, from);
    }

    /// Applies the stop strings to `text[from..]`; returns whether one matched.
    fn check_stop_strings(&mut self, opts: &OutputOptions, from: usize) -> bool {
        let Some((at, s)) = first_stop(&self.text[from..], &opts.stop) else {
            return false;
        };
        let at = from + at;
        let end = if opts.include_stop_str_in_output {
            at + s.len()
        } else {
            at
        };
        let stop = s.to_string();
        self.text.truncate(end);
        self.ending = Some(Ending {
            finish: Finish::Stop,
            stop_reason: Some(serde_json::Value::String(stop)),
        });
        true
    }

    /// Ends the choice with the generator's verdict (unless a stop string ended it first) and
    /// completes `text`. Without incremental decoding the stop strings are looked for here, and
    /// the tokens are cut after the first prefix whose text contains one.
    pub fn finish(
        &mut self,
        finish: Finish,
        detok: Detok,
        opts: &OutputOptions,
        incremental: bool,
    ) {
        if self.ending.is_some() {
            return;
        }
        if incremental {
            let rest = self.window.flush(&self.ids, |ids| detok.text(ids));
            self.append(&rest, opts);
            if self.ending.is_some() {
                return;
            }
        } else {
            self.text = detok.text(&self.ids);
            if !opts.stop.is_empty() && self.check_stop_strings(opts, 0) {
                let text = std::mem::take(&mut self.text);
                let keep = (1..=self.ids.len())
                    .find(|&k| first_stop(&detok.text(&self.ids[..k]), &opts.stop).is_some())
                    .unwrap_or(self.ids.len());
                self.ids.truncate(keep);
                self.logprobs.truncate(keep);
                self.top.truncate(keep);
                self.text = text;
                return;
            }
        }
        let stop_reason = match (finish, self.ids.last()) {
            (Finish::Stop, Some(id)) if opts.stop_token_ids.contains(id) => {
                Some(serde_json::Value::from(*id))
            }
            _ => None,
        };
        self.ending = Some(Ending {
            finish,
            stop_reason,
        });
    }

    /// The text and tokens not yet streamed, marking them sent. Before the end, text that may
    /// start a stop string is held back (incomplete characters never reach `text` before the
    /// end, see [`IncrementalText`]).
    pub fn delta(&mut self, opts: &OutputOptions) -> (String, std::ops::Range<usize>) {
        let mut limit = self.text.len();
        if self.ending.is_none() {
            let hold = opts
                .stop
                .iter()
                .map(|s| s.chars().count().saturating_sub(1))
                .max()
                .unwrap_or(0);
            for _ in 0..hold {
                match self.text[..limit].char_indices().next_back() {
                    Some((i, _)) => limit = i,
                    None => break,
                }
            }
        }
        let from = self.sent_text.min(limit);
        let text = self.text[from..limit].to_string();
        self.sent_text = limit.max(self.sent_text);
        let tokens = self.sent_tokens..self.ids.len();
        self.sent_tokens = self.ids.len();
        (text, tokens)
    }
}

/// The earliest stop string in `text` (the longest of those starting there): its byte offset
/// and the string.
pub fn first_stop<'a>(text: &str, stops: &'a [String]) -> Option<(usize, &'a str)> {
    stops
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.as_str())))
        .min_by_key(|&(at, s)| (at, std::cmp::Reverse(s.len())))
}

/// Stop strings matched on each row's text as it grows, for engines that end a row on the
/// token that completes one: a row's new token completes one when the decoded text of its last
/// tokens contains it (which it did not a token earlier, or the row would have ended). The
/// window, the longest stop string's bytes plus 16 tokens, holds any occurrence the new token
/// completes (a token decodes to at least one byte but for special tokens) without decoding
/// the whole row at every step.
pub struct StopWindow<'a> {
    tokenizer: Option<&'a HfTokenizer>,
    stops: &'a [String],
    window: usize,
    rows: HashMap<usize, Vec<u32>>,
}

impl<'a> StopWindow<'a> {
    pub fn new(tokenizer: Option<&'a HfTokenizer>, stops: &'a [String]) -> Self {
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        Self {
            tokenizer,
            stops,
            window: longest + 16,
            rows: HashMap::new(),
        }
    }

    /// Appends `token` to `row`; whether the row's text now contains a stop string (a text
    /// the tokenizer cannot decode contains none).
    pub fn completes(&mut self, row: usize, token: i64) -> bool {
        let Some(tok) = self.tokenizer.filter(|_| !self.stops.is_empty()) else {
            return false;
        };
        let ids = self.rows.entry(row).or_default();
        ids.push(token as u32);
        let from = ids.len().saturating_sub(self.window);
        tok.decode(&ids[from..], false)
            .is_ok_and(|text| first_stop(&text, self.stops).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(stop: &[&str], include: bool) -> OutputOptions {
        OutputOptions {
            logprobs: None,
            tokens_as_ids: false,
            return_token_ids: false,
            stop: stop.iter().map(|s| s.to_string()).collect(),
            include_stop_str_in_output: include,
            skip_special_tokens: true,
            stop_token_ids: vec![7],
        }
    }

    /// Without a tokenizer text is empty, so stop strings never match; stop ids are reported.
    #[test]
    fn stop_token_id_is_the_stop_reason() {
        let d = Detok {
            tokenizer: None,
            skip_special_tokens: true,
        };
        let o = opts(&[], false);
        let mut c = Choice::default();
        for id in [3, 7] {
            c.push(id, -1.0, None, d, &o, false);
        }
        c.finish(Finish::Stop, d, &o, false);
        let e = c.ending.unwrap();
        assert_eq!((e.finish_reason(), e.stop_reason), ("stop", Some(7.into())));
        assert_eq!(d.token(5, false), "token_id:5");
    }

    #[test]
    fn held_back_text_is_released_at_the_end() {
        let o = opts(&["STOP"], false);
        let mut c = Choice {
            text: "abcST".into(),
            ..Default::default()
        };
        // "ST" may start "STOP": hold back 3 characters.
        assert_eq!(c.delta(&o).0, "ab");
        c.text = "abcSTx".into();
        assert_eq!(c.delta(&o).0, "c");
        c.ending = Some(Ending {
            finish: Finish::Length,
            stop_reason: None,
        });
        assert_eq!(c.delta(&o).0, "STx");
    }

    fn fixture() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama")
    }

    /// The first `k` such that the text of `ids[..k]` contains one of `stops`.
    fn first_prefix(tok: &HfTokenizer, ids: &[i64], stops: &[String]) -> Option<usize> {
        (1..=ids.len()).find(|&k| {
            let v: Vec<u32> = ids[..k].iter().map(|&t| t as u32).collect();
            first_stop(&tok.decode(&v, false).unwrap(), stops).is_some()
        })
    }

    /// Token by token, the match falls on the token that completes the stop string, whatever
    /// the tokenizer splits it into, as decoding the whole prefix finds it; no stop string,
    /// no match.
    #[test]
    fn stop_strings_match_on_the_completing_token() {
        let tok = HfTokenizer::from_dir(fixture()).unwrap();
        let ids: Vec<i64> = tok
            .encode("The answer is 9\n\nUser: what next", false)
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect();
        for (stop, want) in [("\n\nUser:", true), ("Assistant:", false)] {
            let stops = vec![stop.to_string()];
            let mut m = StopWindow::new(Some(&tok), &stops);
            let hit = ids.iter().position(|&t| m.completes(0, t)).map(|i| i + 1);
            assert_eq!(hit, first_prefix(&tok, &ids, &stops), "{stop:?}");
            assert_eq!(hit.is_some_and(|k| k < ids.len()), want, "{stop:?}");
        }
    }
}
