//! Parity with transformers: every rendered chat template, token id list, decode and generation default in
//! fixtures/hf/text/expected.json (written by scripts/hf_fixtures_text.py with transformers' own
//! `apply_chat_template`, `encode` and `decode`) must come out identical here.

use std::path::PathBuf;

use reinforge_hf::{json_value, ChatOptions, GenerationConfig, HfTokenizer, Value};
use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/text")
}

fn expected() -> (Json, String) {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    (serde_json::from_str(&text).unwrap(), text)
}

/// The fixture conversations as template values in file order (serde_json's map would sort their keys).
fn conversation(raw: &str, name: &str) -> Value {
    let all = json_value(raw).unwrap();
    let conv = all
        .get_attr("conversations")
        .and_then(|c| c.get_attr(name))
        .unwrap();
    assert!(!conv.is_undefined(), "conversation {name}");
    conv
}

fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn chat_templates_render_byte_identical_and_tokenize_identically() {
    let (exp, raw) = expected();
    let tools = json_value(&raw).unwrap().get_attr("tools").unwrap();
    let mut rendered = 0;
    let mut errors = 0;
    for (name, rec) in exp["tokenizers_"].as_object().unwrap() {
        let tok = HfTokenizer::from_dir(fixtures().join(name)).unwrap();
        for case in rec["chats"].as_array().unwrap() {
            let template = case["template"].as_str();
            let with_tools = case["tools"].as_bool().unwrap();
            let opts = ChatOptions {
                add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
                tools: with_tools.then(|| tools.clone()),
                ..Default::default()
            };
            let conv_name = case["conversation"].as_str().unwrap();
            let what = format!(
                "{name} / {template:?} / {conv_name} / agp={}",
                opts.add_generation_prompt
            );
            let result = tok
                .chat_template(template, with_tools)
                .unwrap()
                .render_value(conversation(&raw, conv_name), &opts);
            match (&case["text"], &case["error"]) {
                (Json::String(want), _) => {
                    let got = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(&got, want, "{what}");
                    assert_eq!(
                        tok.encode(&got, false).unwrap(),
                        ids(&case["ids"]),
                        "{what}"
                    );
                    rendered += 1;
                }
                (_, Json::String(want)) => {
                    let err = result.expect_err(&what).to_string();
                    assert!(err.contains(want.as_str()), "{what}: {err} lacks {want}");
                    errors += 1;
                }
                _ => panic!("bad fixture case {what}"),
            }
        }
    }
    assert!(
        rendered >= 40 && errors >= 8,
        "{rendered} rendered, {errors} errors"
    );
}

#[test]
fn apply_chat_template_uses_the_default_and_encodes_without_adding_specials() {
    let (exp, raw) = expected();
    let rec = &exp["tokenizers_"]["chatml_bpe"];
    let case = rec["chats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["conversation"] == "multi_turn" && c["add_generation_prompt"] == true)
        .unwrap();
    let tok = HfTokenizer::from_dir(fixtures().join("chatml_bpe")).unwrap();
    #[derive(serde::Serialize)]
    struct Msg {
        role: String,
        content: String,
    }
    let msgs: Vec<Msg> = conversation(&raw, "multi_turn")
        .try_iter()
        .unwrap()
        .map(|m| Msg {
            role: m.get_attr("role").unwrap().to_string(),
            content: m.get_attr("content").unwrap().to_string(),
        })
        .collect();
    let opts = ChatOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    assert_eq!(
        tok.apply_chat_template(&msgs, &opts).unwrap(),
        case["text"].as_str().unwrap()
    );
    assert_eq!(tok.encode_chat(&msgs, &opts).unwrap(), ids(&case["ids"]));
}

#[test]
fn encode_decode_and_special_ids_match_transformers() {
    let (exp, _) = expected();
    for (name, rec) in exp["tokenizers_"].as_object().unwrap() {
        let tok = HfTokenizer::from_dir(fixtures().join(name)).unwrap();
        assert_eq!(
            tok.vocab_size() as u64,
            rec["vocab_size"].as_u64().unwrap(),
            "{name}"
        );
        assert!(
            tok.vocab_size() <= 512,
            "{name}: the fixture models have vocab_size 512"
        );
        let opt = |v: &Json| v.as_u64().map(|x| x as u32);
        assert_eq!(tok.bos_token_id(), opt(&rec["bos_token_id"]), "{name} bos");
        assert_eq!(tok.eos_token_id(), opt(&rec["eos_token_id"]), "{name} eos");
        assert_eq!(tok.pad_token_id(), opt(&rec["pad_token_id"]), "{name} pad");
        let special: Vec<(String, String)> = tok
            .config()
            .special
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let want: Vec<(String, String)> = rec["special_tokens_map"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        assert_eq!(special, want, "{name} special tokens");
        for s in rec["encode"].as_array().unwrap() {
            let text = s["text"].as_str().unwrap();
            let with = tok.encode(text, true).unwrap();
            assert_eq!(with, ids(&s["ids"]), "{name}: {text:?}");
            assert_eq!(
                tok.encode(text, false).unwrap(),
                ids(&s["ids_no_special"]),
                "{name}: {text:?}"
            );
            let tokens: Vec<String> = serde_json::from_value(s["tokens"].clone()).unwrap();
            assert_eq!(tok.tokenize(text).unwrap(), tokens, "{name}: {text:?}");
            for (i, t) in tokens.iter().enumerate() {
                assert_eq!(tok.token_to_id(t), Some(ids(&s["ids_no_special"])[i]));
            }
            assert_eq!(
                tok.decode(&with, false).unwrap(),
                s["decode"].as_str().unwrap(),
                "{name}"
            );
            assert_eq!(
                tok.decode(&with, true).unwrap(),
                s["decode_skip_special"].as_str().unwrap(),
                "{name}"
            );
        }
    }
}

#[test]
fn generation_configs_match_transformers_with_its_defaults() {
    let (exp, _) = expected();
    let defaults = &exp["generation_defaults"];
    for (name, rec) in exp["tokenizers_"].as_object().unwrap() {
        let g = &rec["generation"];
        // transformers leaves unset fields None and fills them from its defaults at generate time.
        let field = |k: &str| if g[k].is_null() { &defaults[k] } else { &g[k] };
        let cfg = GenerationConfig::from_dir(&fixtures().join(name)).unwrap();
        assert_eq!(
            cfg.do_sample,
            field("do_sample").as_bool().unwrap(),
            "{name}"
        );
        assert_eq!(
            cfg.temperature,
            field("temperature").as_f64().unwrap(),
            "{name}"
        );
        assert_eq!(cfg.top_p, field("top_p").as_f64().unwrap(), "{name}");
        assert_eq!(cfg.top_k as u64, field("top_k").as_u64().unwrap(), "{name}");
        assert_eq!(
            cfg.repetition_penalty,
            field("repetition_penalty").as_f64().unwrap(),
            "{name}"
        );
        assert_eq!(
            cfg.max_length as u64,
            field("max_length").as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            cfg.max_new_tokens.map(|x| x as u64),
            g["max_new_tokens"].as_u64(),
            "{name}"
        );
        assert_eq!(
            cfg.bos_token_id.map(u64::from),
            g["bos_token_id"].as_u64(),
            "{name}"
        );
        assert_eq!(
            cfg.pad_token_id.map(u64::from),
            g["pad_token_id"].as_u64(),
            "{name}"
        );
        let eos = match &g["eos_token_id"] {
            Json::Array(_) => ids(&g["eos_token_id"]),
            v => vec![v.as_u64().unwrap() as u32],
        };
        assert_eq!(cfg.eos_token_ids, eos, "{name}");
        // The tokenizer's stop ids are the generation eos ids plus its own eos token.
        let tok = HfTokenizer::from_dir(fixtures().join(name)).unwrap();
        let mut stops = eos.clone();
        if let Some(e) = tok.eos_token_id() {
            if !stops.contains(&e) {
                stops.push(e);
            }
        }
        assert_eq!(tok.stop_token_ids(), stops.as_slice(), "{name}");
        assert_eq!(tok.generation_config(), &cfg);
    }
}

#[test]
fn fixture_records_the_library_versions() {
    let (exp, _) = expected();
    assert!(exp["transformers"].as_str().unwrap().starts_with("5."));
    assert!(!exp["tokenizers"].as_str().unwrap().is_empty());
}
