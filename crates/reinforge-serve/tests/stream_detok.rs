//! Streamed text is decoded incrementally (issue 24, finding 9): the chunks of a streamed choice
//! concatenate to the text the same tokens give unstreamed, on multi-byte and Unicode output,
//! with and without stop strings, and each token decodes a bounded window of tokens however long
//! the completion grows.

#[path = "../../reinforge-torch/tests/hf_support/real_model.rs"]
mod real_model;

use std::path::{Path, PathBuf};

use reinforge_hf::HfTokenizer;
use reinforge_serve::policy::backend::Finish;
use reinforge_serve::policy::request::OutputOptions;
use reinforge_serve::policy::text::{Choice, Detok, IncrementalText};

/// Accents, CJK, emoji (4-byte characters), symbols: split into byte pieces by small
/// vocabularies.
const UNICODE: &str = "héllo wörld — naïve café ½ ∑ x² Ω. 日本語のテキスト 🎉🚀 \
                       Ελληνικά и кириллица; ok!\n  indented\tline end.";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fixture tokenizers (byte-level BPE, Unigram + Metaspace) and, where it was fetched,
/// SmolLM2's.
fn tokenizers() -> Vec<(String, HfTokenizer)> {
    let root = workspace();
    let mut dirs: Vec<PathBuf> = ["chatml_bpe", "llama3_bpe", "mistral_uni"]
        .iter()
        .map(|d| root.join("fixtures/hf/text").join(d))
        .collect();
    dirs.extend(real_model::real_model(&root));
    dirs.into_iter()
        .map(|d| {
            let tok = HfTokenizer::from_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            (d.display().to_string(), tok)
        })
        .collect()
}

fn opts(stop: &[&str]) -> OutputOptions {
    OutputOptions {
        logprobs: None,
        tokens_as_ids: false,
        return_token_ids: false,
        stop: stop.iter().map(|s| s.to_string()).collect(),
        include_stop_str_in_output: false,
        skip_special_tokens: true,
        stop_token_ids: vec![],
    }
}

/// The unstreamed choice: every token pushed, the text decoded once at the end.
fn whole(ids: &[i64], d: Detok, o: &OutputOptions) -> Choice {
    let mut c = Choice::default();
    for &id in ids {
        c.push(id, 0.0, None, d, o, false);
    }
    c.finish(Finish::Length, d, o, false);
    c
}

/// The streamed choice and its chunks: a delta taken after every token, and the last at the end.
fn streamed(ids: &[i64], d: Detok, o: &OutputOptions) -> (Choice, Vec<String>) {
    let mut c = Choice::default();
    let mut chunks = vec![];
    for &id in ids {
        c.push(id, 0.0, None, d, o, true);
        chunks.push(c.delta(o).0);
    }
    c.finish(Finish::Length, d, o, true);
    chunks.push(c.delta(o).0);
    (c, chunks)
}

fn encode(tok: &HfTokenizer, text: &str) -> Vec<i64> {
    tok.encode(text, false)
        .expect("encode")
        .into_iter()
        .map(i64::from)
        .collect()
}

#[test]
fn streamed_chunks_concatenate_to_the_unstreamed_text() {
    for (name, tok) in tokenizers() {
        let d = Detok {
            tokenizer: Some(&tok),
            skip_special_tokens: true,
        };
        let o = opts(&[]);
        let ids = encode(&tok, UNICODE);
        let want = whole(&ids, d, &o).text;
        assert!(
            want.contains("日本語") || name.contains("mistral"),
            "{name}: {want:?}"
        );
        let (c, chunks) = streamed(&ids, d, &o);
        assert_eq!(chunks.concat(), want, "{name}");
        assert_eq!(c.text, want, "{name}");
        // It streamed: most chunks came before the end, none split a character (they are
        // Strings) and none carries a replacement character the whole text does not have.
        let early = chunks[..ids.len()].iter().filter(|s| !s.is_empty()).count();
        assert!(
            early * 3 >= ids.len(),
            "{name}: {early} chunks for {} tokens",
            ids.len()
        );
        if !want.contains('\u{FFFD}') {
            assert!(
                chunks.iter().all(|s| !s.contains('\u{FFFD}')),
                "{name}: {chunks:?}"
            );
        }
    }
}

#[test]
fn stop_strings_cut_streamed_and_unstreamed_choices_alike() {
    for (name, tok) in tokenizers() {
        let d = Detok {
            tokenizer: Some(&tok),
            skip_special_tokens: true,
        };
        let ids = encode(&tok, UNICODE);
        let full = d.text(&ids);
        for stop in ["café", "🎉", "и к", "end."] {
            if !full.contains(stop) {
                continue;
            }
            let o = opts(&[stop]);
            let w = whole(&ids, d, &o);
            let (s, chunks) = streamed(&ids, d, &o);
            assert_eq!(chunks.concat(), w.text, "{name} {stop:?}");
            assert_eq!(s.ids, w.ids, "{name} {stop:?}");
            assert!(!w.text.contains(stop), "{name} {stop:?}");
            let e = s.ending.expect("a stop string ended it");
            assert_eq!(e.finish_reason(), "stop", "{name} {stop:?}");
        }
    }
}

/// Tokens decoded per step (through the decode seam of [`IncrementalText`]) stay bounded while
/// the completion grows to thousands of tokens: the work per token does not grow with length.
#[test]
fn each_token_decodes_a_bounded_window() {
    let root = workspace();
    let tok = HfTokenizer::from_dir(root.join("fixtures/hf/text/chatml_bpe")).expect("tokenizer");
    let d = Detok {
        tokenizer: Some(&tok),
        skip_special_tokens: true,
    };
    let ids = encode(&tok, &UNICODE.repeat(40));
    assert!(ids.len() > 2000, "{} tokens", ids.len());
    let mut inc = IncrementalText::default();
    let mut text = String::new();
    let mut per_step = vec![];
    for end in 1..=ids.len() {
        let mut decoded = 0;
        text += &inc.step(&ids[..end], |w| {
            decoded += w.len();
            d.text(w)
        });
        per_step.push(decoded);
    }
    text += &inc.flush(&ids, |w| d.text(w));
    assert_eq!(text, d.text(&ids));
    let bound = 4 * IncrementalText::MAX_PENDING;
    let most = per_step.iter().max().copied().unwrap_or(0);
    assert!(
        most <= bound,
        "a step decoded {most} tokens (bound {bound})"
    );
    let late = &per_step[per_step.len() - 100..];
    let early = &per_step[..100];
    assert!(late.iter().sum::<usize>() <= 2 * early.iter().sum::<usize>());
}

/// Output that never completes a character (invalid bytes) is emitted after
/// [`IncrementalText::MAX_PENDING`] tokens, so it cannot grow the window without bound.
#[test]
fn invalid_output_cannot_grow_the_window() {
    let ids: Vec<i64> = (0..1000).collect();
    let mut inc = IncrementalText::default();
    let mut most = 0;
    let mut out = String::new();
    for end in 1..=ids.len() {
        let mut decoded = 0;
        out += &inc.step(&ids[..end], |w| {
            decoded += w.len();
            "\u{FFFD}".repeat(w.len())
        });
        most = most.max(decoded);
    }
    out += &inc.flush(&ids, |w| "\u{FFFD}".repeat(w.len()));
    assert!(most <= 4 * IncrementalText::MAX_PENDING, "{most}");
    assert_eq!(out.chars().count(), ids.len());
}
