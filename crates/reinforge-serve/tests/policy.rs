//! The OpenAI-compatible policy routes (models, completions, chat, streaming, request errors),
//! driven by the scripted generator of `common/scripted.rs` (token `k` of a row = prompt sum +
//! k + shift, mod vocab). Batching, pausing and weight loads: `policy_engine.rs`.

use crate::common;

use common::policy::*;
use serde_json::{json, Value};

#[test]
fn models_lists_the_served_model_and_its_weights() {
    let (s, _) = policy_server(true, |_| {});
    let v = get(&format!("{}/v1/models", s.url));
    let card = &v["data"][0];
    assert_eq!(card["id"], "scripted");
    assert_eq!(card["max_model_len"], MAX_LEN);
    assert_eq!(card["weight_version"], "0");
    assert!(!card["checksum"].as_str().unwrap().is_empty());
    assert_eq!(
        get(&format!("{}/v1/models/scripted", s.url))["id"],
        "scripted"
    );
    let r = ureq::get(&format!("{}/v1/models/other", s.url)).call();
    let Err(ureq::Error::Status(404, resp)) = r else {
        panic!("expected 404")
    };
    let e: Value = resp.into_json().unwrap();
    assert_eq!(e["error"]["param"], "model");
    assert_eq!(e["error"]["code"], 404);
    // The default name is the directory's.
    let (s, _) = policy_server(true, |a| a.served_model_name = None);
    assert_eq!(
        get(&format!("{}/v1/models", s.url))["data"][0]["id"],
        "llama"
    );
}

#[test]
fn completions_take_token_ids_and_return_ids_and_logprobs_in_vllm_order() {
    let (s, _) = policy_server(false, |_| {});
    let prompts = [vec![10i64, 20, 30], vec![7]];
    let (st, v, version, _) = call(
        &format!("{}/v1/completions", s.url),
        &json!({
            "prompt": prompts, "n": 2, "max_tokens": 4, "temperature": 0,
            "logprobs": 2, "return_tokens_as_token_ids": true, "return_token_ids": true,
        }),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(version.as_deref(), Some("0"));
    assert_eq!(v["weight_version"], "0");
    assert_eq!(v["object"], "text_completion");
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    for (idx, c) in choices.iter().enumerate() {
        let p = &prompts[idx / 2];
        assert_eq!(c["index"], idx);
        let want: Vec<i64> = (0..4).map(|k| tok(p, k, 0)).collect();
        assert_eq!(ids(&c["token_ids"]), want, "choice {idx}");
        assert_eq!(ids(&c["prompt_token_ids"]), *p);
        assert_eq!(c["finish_reason"], "length");
        assert_eq!(c["text"], "", "no tokenizer: no text");
        let lp = &c["logprobs"];
        let tokens: Vec<String> = want.iter().map(|t| format!("token_id:{t}")).collect();
        assert_eq!(lp["tokens"], json!(tokens));
        let got: Vec<f64> = lp["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        for (k, g) in got.iter().enumerate() {
            assert!((g + 0.1 * (k as f64 + 1.0)).abs() < 1e-6, "{got:?}");
        }
        // The chosen token and its 2 alternatives (the first alternative is the chosen one).
        let top0 = lp["top_logprobs"][0].as_object().unwrap();
        assert_eq!(top0.len(), 2, "{top0:?}");
        assert!(top0.contains_key(&format!("token_id:{}", want[0] + 1)));
    }
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20})
    );
}

#[test]
fn text_prompts_are_tokenized_and_outputs_decoded() {
    let (s, _) = policy_server(true, |_| {});
    let t = tokenizer();
    let (st, v, _, _) = call(
        &format!("{}/v1/completions", s.url),
        &json!({"model": "scripted", "prompt": "hello world", "max_tokens": 6,
                "temperature": 0, "return_token_ids": true, "logprobs": 0}),
    );
    assert_eq!(st, 200, "{v}");
    let c = &v["choices"][0];
    let want: Vec<i64> = t
        .encode("hello world", true)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    assert_eq!(ids(&c["prompt_token_ids"]), want);
    let out = ids(&c["token_ids"]);
    let u: Vec<u32> = out.iter().map(|&i| i as u32).collect();
    assert_eq!(c["text"], t.decode(&u, true).unwrap());
    // Log-prob tokens are the tokens' own text.
    assert_eq!(
        c["logprobs"]["tokens"][0],
        t.decode(&[out[0] as u32], false).unwrap()
    );
    // Default max_tokens is 16 (OpenAI's).
    let (_, v, _, _) = call(
        &format!("{}/v1/completions", s.url),
        &json!({"prompt": [5], "temperature": 0, "return_token_ids": true}),
    );
    assert_eq!(ids(&v["choices"][0]["token_ids"]).len(), 16);
}

#[test]
fn stop_token_ids_eos_and_ignore_eos() {
    let (s, _) = policy_server(false, |_| {});
    let url = format!("{}/v1/completions", s.url);
    // Prompt sum 100: tokens 100, 101, 102, ...
    let (_, v, _, _) = call(
        &url,
        &json!({"prompt": [100], "max_tokens": 8, "temperature": 0,
                "stop_token_ids": [102], "return_token_ids": true}),
    );
    let c = &v["choices"][0];
    assert_eq!(ids(&c["token_ids"]), vec![100, 101, 102]);
    assert_eq!(
        (&c["finish_reason"], &c["stop_reason"]),
        (&json!("stop"), &json!(102))
    );
    // EOS (2) ends a row by default (stop_reason null), not with ignore_eos.
    let body = |ignore: bool| {
        json!({"prompt": [VOCAB as i64 - 1], "max_tokens": 8, "temperature": 0,
               "ignore_eos": ignore, "return_token_ids": true})
    };
    let (_, v, _, _) = call(&url, &body(false));
    let c = &v["choices"][0];
    assert_eq!(ids(&c["token_ids"]), vec![511, 0, 1, 2]);
    assert_eq!(
        (&c["finish_reason"], &c["stop_reason"]),
        (&json!("stop"), &Value::Null)
    );
    let (_, v, _, _) = call(&url, &body(true));
    assert_eq!(ids(&v["choices"][0]["token_ids"]).len(), 8);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[test]
fn stop_strings_cut_text_and_tokens() {
    let (s, _) = policy_server(true, |_| {});
    let t = tokenizer();
    let url = format!("{}/v1/completions", s.url);
    let base =
        json!({"prompt": [300], "max_tokens": 12, "temperature": 0, "return_token_ids": true});
    let (_, v, _, _) = call(&url, &base);
    let full = v["choices"][0]["text"].as_str().unwrap().to_string();
    let full_ids = ids(&v["choices"][0]["token_ids"]);
    // A stop string from the middle of the text.
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 8, "{full:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let at = full.find(&stop).unwrap();
    for include in [false, true] {
        let mut body = base.clone();
        body["stop"] = json!([stop.clone(), "never-there"]);
        body["include_stop_str_in_output"] = json!(include);
        let (st, v, _, _) = call(&url, &body);
        assert_eq!(st, 200, "{v}");
        let c = &v["choices"][0];
        let want = if include {
            &full[..at + stop.len()]
        } else {
            &full[..at]
        };
        assert_eq!(c["text"], want, "stop {stop:?} in {full:?}");
        assert_eq!(
            (&c["finish_reason"], &c["stop_reason"]),
            (&json!("stop"), &json!(stop))
        );
        // Tokens end with the one that completed the stop string.
        let kept = ids(&c["token_ids"]);
        assert_eq!(kept[..], full_ids[..kept.len()]);
        let dec = |ids: &[i64]| {
            t.decode(&ids.iter().map(|&i| i as u32).collect::<Vec<_>>(), true)
                .unwrap()
        };
        assert!(dec(&kept).contains(&stop));
        assert!(!dec(&kept[..kept.len() - 1]).contains(&stop));
        assert_eq!(v["usage"]["completion_tokens"], kept.len());
    }
}

#[test]
fn chat_applies_the_template_and_returns_logprobs() {
    let (s, _) = policy_server(true, |_| {});
    let t = tokenizer();
    let messages = json!([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}]);
    let (st, v, version, _) = call(
        &format!("{}/v1/chat/completions", s.url),
        &json!({"model": "scripted", "messages": messages, "max_completion_tokens": 5,
                "temperature": 0, "logprobs": true, "top_logprobs": 3, "return_token_ids": true,
                "n": 2}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(version.as_deref(), Some("0"));
    assert_eq!(v["object"], "chat.completion");
    let msgs = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]);
    let want_prompt: Vec<i64> = t
        .encode_chat(
            msgs.as_array().unwrap(),
            &reinforge_hf::ChatOptions {
                add_generation_prompt: true,
                ..Default::default()
            },
        )
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    assert_eq!(ids(&v["prompt_token_ids"]), want_prompt);
    for (i, c) in v["choices"].as_array().unwrap().iter().enumerate() {
        assert_eq!(c["index"], i);
        let out = ids(&c["token_ids"]);
        let want: Vec<i64> = (0..5).map(|k| tok(&want_prompt, k, 0)).collect();
        assert_eq!(out, want);
        let u: Vec<u32> = out.iter().map(|&i| i as u32).collect();
        assert_eq!(c["message"]["role"], "assistant");
        assert_eq!(c["message"]["content"], t.decode(&u, true).unwrap());
        let lp = &c["logprobs"]["content"];
        assert_eq!(lp.as_array().unwrap().len(), 5);
        assert_eq!(lp[1]["top_logprobs"].as_array().unwrap().len(), 3);
        assert!((lp[1]["logprob"].as_f64().unwrap() + 0.2).abs() < 1e-6);
        let tok0 = lp[0]["token"].as_str().unwrap();
        assert_eq!(lp[0]["bytes"], json!(tok0.as_bytes()));
    }
    // Without max_tokens chat may use every remaining position.
    let (_, v, _, _) = call(
        &format!("{}/v1/chat/completions", s.url),
        &json!({"messages": [{"role": "user", "content": "x"}], "temperature": 0,
                "ignore_eos": true, "return_token_ids": true}),
    );
    let p = ids(&v["prompt_token_ids"]).len();
    assert_eq!(ids(&v["choices"][0]["token_ids"]).len(), MAX_LEN - p);
}

#[test]
fn streaming_sends_the_same_tokens_as_sse_chunks() {
    let (s, _) = policy_server(true, |_| {});
    let url = format!("{}/v1/completions", s.url);
    let base = json!({"prompt": [[300], [301, 5]], "n": 2, "max_tokens": 10, "temperature": 0,
                      "return_token_ids": true, "logprobs": 0, "stop": ["zzz-never"]});
    let (_, whole, _, _) = call(&url, &base);
    let mut body = base.clone();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (chunks, done, version) = sse(&url, &body);
    assert!(done, "ends with [DONE]");
    assert_eq!(version.as_deref(), Some("0"));
    assert!(
        chunks.len() > 5,
        "one chunk per step and choice: {}",
        chunks.len()
    );
    let mut text = vec![String::new(); 4];
    let mut toks = vec![vec![]; 4];
    let mut finish = vec![Value::Null; 4];
    for c in &chunks {
        assert_eq!(c["weight_version"], "0");
        assert_eq!(c["object"], "text_completion");
        for ch in c["choices"].as_array().unwrap() {
            let i = ch["index"].as_u64().unwrap() as usize;
            assert!(finish[i].is_null(), "chunk after the finish of choice {i}");
            text[i].push_str(ch["text"].as_str().unwrap());
            toks[i].extend(ids(&ch["token_ids"]));
            finish[i] = ch["finish_reason"].clone();
        }
    }
    for i in 0..4 {
        let w = &whole["choices"][i];
        assert_eq!(text[i], w["text"].as_str().unwrap(), "choice {i}");
        assert_eq!(toks[i], ids(&w["token_ids"]));
        assert_eq!(finish[i], w["finish_reason"]);
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"], whole["usage"]);

    // A stop string met mid-stream: the streamed text and tokens are cut as the whole ones are.
    let (_, probe_full, _, _) = call(
        &url,
        &json!({"prompt": [300], "max_tokens": 12, "temperature": 0}),
    );
    let full = probe_full["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let base = json!({"prompt": [300], "max_tokens": 12, "temperature": 0, "stop": stop,
                      "return_token_ids": true});
    let (_, whole, _, _) = call(&url, &base);
    let mut body = base.clone();
    body["stream"] = json!(true);
    let (chunks, done, _) = sse(&url, &body);
    assert!(done);
    let text: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap().to_string())
        .collect();
    let toks: Vec<i64> = chunks
        .iter()
        .flat_map(|c| ids(&c["choices"][0]["token_ids"]))
        .collect();
    let w = &whole["choices"][0];
    assert_eq!(w["finish_reason"], "stop", "{w}");
    assert_eq!(
        text,
        w["text"].as_str().unwrap(),
        "stop {stop:?} in {full:?}"
    );
    assert_eq!(toks, ids(&w["token_ids"]));
    let last = &chunks.last().unwrap()["choices"][0];
    assert_eq!(
        (&last["finish_reason"], &last["stop_reason"]),
        (&json!("stop"), &json!(stop))
    );

    // Chat: the role first, then content deltas that add up to the whole reply.
    let url = format!("{}/v1/chat/completions", s.url);
    let base = json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0});
    let (_, whole, _, _) = call(&url, &base);
    let mut body = base.clone();
    body["stream"] = json!(true);
    let (chunks, done, _) = sse(&url, &body);
    assert!(done);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    let content: String = chunks
        .iter()
        .map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(
        content,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "no usage unless asked"
    );
}

#[test]
fn bad_requests_are_openai_errors_naming_the_field() {
    let (s, _) = policy_server(true, |a| a.max_batch_rows = 8);
    let url = format!("{}/v1/completions", s.url);
    let chat = format!("{}/v1/chat/completions", s.url);
    let cases = [
        (
            &url,
            json!({"prompt": [[1, 2], [3, 512]]}),
            "prompt[1][1]",
            "0..512",
        ),
        (&url, json!({"prompt": [1, -1]}), "prompt[1]", "0..512"),
        (&url, json!({"prompt": [[]]}), "prompt[0]", "no tokens"),
        (&url, json!({"prompt": 5}), "prompt", "string"),
        (&url, json!({"max_tokens": 3}), "prompt", "missing field"),
        (
            &url,
            json!({"prompt": vec![1; 100], "max_tokens": 40}),
            "max_tokens",
            "100 tokens",
        ),
        (&url, json!({"prompt": [1], "n": 0}), "n", "at least 1"),
        (
            &url,
            json!({"prompt": [1], "temperature": -1}),
            "temperature",
            ">= 0",
        ),
        (&url, json!({"prompt": [1], "top_p": 0}), "top_p", "(0, 1]"),
        (&url, json!({"prompt": [1], "top_k": -3}), "top_k", "-1"),
        (
            &url,
            json!({"prompt": [1], "logprobs": 21}),
            "logprobs",
            "20",
        ),
        (
            &url,
            json!({"prompt": [1], "echo": true}),
            "echo",
            "not supported",
        ),
        (
            &url,
            json!({"prompt": [1], "presence_penalty": 0.5}),
            "presence_penalty",
            "not supported",
        ),
        (
            &url,
            json!({"prompt": [1], "stop": [""]}),
            "stop[0]",
            "empty",
        ),
        (
            &url,
            json!({"prompt": [1], "stop_token_ids": [9999]}),
            "stop_token_ids[0]",
            "0..512",
        ),
        (
            &url,
            json!({"prompt": [1], "max_tokens": "x"}),
            "max_tokens",
            "invalid type",
        ),
        (
            &url,
            json!({"prompt": [1], "stream": true, "logprobs": 2}),
            "logprobs",
            "not streamed",
        ),
        (
            &chat,
            json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
            "top_logprobs",
            "logprobs: true",
        ),
        (&chat, json!({"messages": []}), "messages", "empty"),
        (
            &chat,
            json!({"messages": [{"role": "user", "content": "word ".repeat(200)}]}),
            "messages",
            "maximum context length is 128",
        ),
        (
            &chat,
            json!({"messages": [{"content": "x"}]}),
            "messages[0].role",
            "role",
        ),
        (
            &chat,
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages[0].content[0]",
            "text",
        ),
    ];
    for (u, body, param, words) in cases {
        let (st, v, _, _) = call(u, &body);
        assert_eq!(st, 400, "{body} -> {v}");
        assert_eq!(v["error"]["param"], param, "{body} -> {v}");
        assert_eq!(v["error"]["type"], "BadRequestError");
        assert_eq!(v["error"]["code"], 400);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(words), "{body}: {msg:?} lacks {words:?}");
    }
    // Prompt + max_tokens over the context names both numbers and the limit.
    let (_, v, _, _) = call(&url, &json!({"prompt": vec![1; 100], "max_tokens": 40}));
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("40") && msg.contains("140") && msg.contains("128"),
        "{msg}"
    );
    let (st, v, _, _) = call(&url, &json!({"model": "gpt-4", "prompt": [1]}));
    assert_eq!((st, &v["error"]["param"]), (404, &json!("model")), "{v}");
    let r = ureq::post(&url).send_string("{\"prompt\": [1");
    let Err(ureq::Error::Status(400, resp)) = r else {
        panic!("malformed JSON is a 400")
    };
    let v: Value = resp.into_json().unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("malformed JSON"));

    // Without a tokenizer: token ids only, and the 400 says so.
    let (s, _) = policy_server(false, |_| {});
    let (st, v, _, _) = call(
        &format!("{}/v1/completions", s.url),
        &json!({"prompt": "hi"}),
    );
    assert_eq!((st, &v["error"]["param"]), (400, &json!("prompt")), "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("token ids"));
    let (st, v, _, _) = call(
        &format!("{}/v1/chat/completions", s.url),
        &json!({"messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!((st, &v["error"]["param"]), (400, &json!("messages")), "{v}");
}
