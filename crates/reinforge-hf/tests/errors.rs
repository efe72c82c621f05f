//! Missing and malformed checkpoint files give errors that name the file (and the line, field or template).

use std::path::{Path, PathBuf};

use reinforge_hf::{ChatOptions, GenerationConfig, HfError, HfTokenizer};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/hf/text")
        .join(name)
}

/// A writable copy of a fixture tokenizer directory.
fn copy_of(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    dir
}

fn load_err(dir: &Path) -> HfError {
    HfTokenizer::from_dir(dir).expect_err("loading should fail")
}

#[test]
fn missing_tokenizer_files_are_named() {
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let dir = copy_of("chatml_bpe");
        std::fs::remove_file(dir.path().join(file)).unwrap();
        let err = load_err(dir.path());
        assert!(
            matches!(err, HfError::MissingFile { ref path, .. } if path == &dir.path().join(file)),
            "{err:?}"
        );
        assert!(err.to_string().contains(file), "{err}");
    }
}

#[test]
fn malformed_json_names_file_line_and_column() {
    let dir = copy_of("chatml_bpe");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        "{\n  \"eos_token\": \"<|im_end|>\",\n  \"pad_token\": oops\n}\n",
    )
    .unwrap();
    match load_err(dir.path()) {
        HfError::Json {
            path, line, column, ..
        } => {
            assert!(path.ends_with("tokenizer_config.json"));
            assert_eq!((line, column), (3, 16));
        }
        other => panic!("{other:?}"),
    }

    let dir = copy_of("chatml_bpe");
    let tok = std::fs::read_to_string(dir.path().join("tokenizer.json")).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), &tok[..tok.len() / 2]).unwrap();
    let err = load_err(dir.path());
    assert!(
        matches!(err, HfError::Json { ref path, .. } if path.ends_with("tokenizer.json")),
        "{err:?}"
    );
    assert!(err.to_string().contains("tokenizer.json:"), "{err}");

    let dir = copy_of("chatml_bpe");
    std::fs::write(dir.path().join("generation_config.json"), "{\"top_k\": 1,}").unwrap();
    let err = load_err(dir.path()).to_string();
    assert!(err.contains("generation_config.json:1:"), "{err}");
    let err = GenerationConfig::from_dir(dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("generation_config.json:1:"), "{err}");
}

#[test]
fn bad_special_token_fields_are_named() {
    let dir = copy_of("chatml_bpe");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"eos_token": "<|not_a_token|>"}"#,
    )
    .unwrap();
    let err = load_err(dir.path()).to_string();
    assert!(
        err.contains("eos_token")
            && err.contains("<|not_a_token|>")
            && err.contains("tokenizer_config.json"),
        "{err}"
    );

    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"pad_token": 3}"#,
    )
    .unwrap();
    let err = load_err(dir.path()).to_string();
    assert!(
        err.contains("pad_token") && err.contains("tokenizer_config.json"),
        "{err}"
    );
}

#[test]
fn no_chat_template_is_a_clear_error() {
    let dir = copy_of("chatml_bpe");
    std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    let err = tok
        .apply_chat_template::<serde_json::Value>(&[], &ChatOptions::default())
        .unwrap_err();
    assert!(matches!(err, HfError::NoChatTemplate { .. }), "{err:?}");
    assert!(err.to_string().contains("chat_template.jinja"), "{err}");
}

#[test]
fn template_errors_name_the_template_file_and_line() {
    let dir = copy_of("chatml_bpe");
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "{% for m in messages %}\n{{ m.content }}\n{% endfor %}\n{{ messages[0].content.nope() }}\n",
    )
    .unwrap();
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    let msgs = [serde_json::json!({"role": "user", "content": "hi"})];
    let err = tok
        .apply_chat_template(&msgs, &ChatOptions::default())
        .unwrap_err();
    match &err {
        HfError::Template { template, line, .. } => {
            assert_eq!(template, "chat_template.jinja");
            assert_eq!(*line, Some(4));
        }
        other => panic!("{other:?}"),
    }

    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "a\nb\n{% if messages %}\n",
    )
    .unwrap();
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    let err = tok
        .apply_chat_template(&msgs, &ChatOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("chat template chat_template.jinja line "),
        "{err}"
    );
}

#[test]
fn named_templates_choose_like_transformers() {
    let tok = HfTokenizer::from_dir(fixture("mistral_uni")).unwrap();
    assert_eq!(tok.chat_templates().names(), ["default", "terse"]);
    assert!(tok
        .chat_template(None, false)
        .unwrap()
        .origin()
        .ends_with("chat_template[default]"));
    assert!(tok
        .chat_template(Some("terse"), false)
        .unwrap()
        .origin()
        .ends_with("[terse]"));
    let err = tok
        .chat_template(Some("tool_use"), true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tool_use") && err.contains("default, terse"),
        "{err}"
    );

    // additional_chat_templates/*.jinja plus chat_template.jinja override the config's list; `tool_use` is
    // chosen when tools are passed.
    let dir = copy_of("mistral_uni");
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "D{{ messages | length }}",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("additional_chat_templates")).unwrap();
    std::fs::write(
        dir.path().join("additional_chat_templates/tool_use.jinja"),
        "T{{ tools | length }}",
    )
    .unwrap();
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.chat_templates().names(), ["default", "tool_use"]);
    let msgs = [serde_json::json!({"role": "user", "content": "x"})];
    assert_eq!(
        tok.apply_chat_template(&msgs, &ChatOptions::default())
            .unwrap(),
        "D1"
    );
    let opts = ChatOptions {
        tools: Some(reinforge_hf::json_value("[{}, {}]").unwrap()),
        ..Default::default()
    };
    assert_eq!(tok.apply_chat_template(&msgs, &opts).unwrap(), "T2");
}

#[test]
fn missing_generation_config_falls_back_to_model_config_ids() {
    let dir = copy_of("llama3_bpe");
    std::fs::remove_file(dir.path().join("generation_config.json")).unwrap();
    let cfg = GenerationConfig::from_dir(dir.path()).unwrap();
    assert_eq!(cfg, GenerationConfig::default());
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"bos_token_id": 0, "eos_token_id": [1, 4], "temperature": 0.1}"#,
    )
    .unwrap();
    let cfg = GenerationConfig::from_dir(dir.path()).unwrap();
    assert_eq!(
        (cfg.bos_token_id, cfg.eos_token_ids.clone()),
        (Some(0), vec![1, 4])
    );
    assert_eq!(
        cfg.temperature, 1.0,
        "sampling fields come only from generation_config.json"
    );
}
