//! `reinforge score` and `reinforge generate` on rows with images (TRL's convention: `{"type":
//! "image"}` parts in the messages, an `images` column of paths relative to the data file), on the
//! Qwen2-VL / Qwen2.5-VL fixtures (fixtures/hf/vlm): transformers' completion log-probs and greedy
//! tokens from the PNG files, and the refusals, each naming the file and row, with no output left.

use crate::common;

use std::path::{Path, PathBuf};

use common::{bad, floats, json_lines, max_abs_diff, param_gap_under, reinforge, root};
use serde_json::{json, Value};

const MODELS: &[&str] = &["qwen2_vl", "qwen2_5_vl"];

fn fixture(name: &str) -> PathBuf {
    root().join("fixtures/hf/vlm").join(name)
}

fn expected(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("expected.json")).unwrap())
        .unwrap()
}

/// Copies the fixture's images to `dir/imgs/` and returns row `row`'s paths relative to `dir`.
fn row_images(name: &str, e: &Value, row: usize, dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir.join("imgs")).unwrap();
    e["batch"]["row_images"][row]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let file = e["batch"]["images"][k.as_u64().unwrap() as usize]["file"]
                .as_str()
                .unwrap();
            let base = Path::new(file).file_name().unwrap().to_str().unwrap();
            std::fs::copy(fixture(name).join(file), dir.join("imgs").join(base)).unwrap();
            format!("imgs/{base}")
        })
        .collect()
}

/// Asserts that a command on fixture `name` exited 0, showing its stderr otherwise.
fn succeeded(name: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write_rows(path: &Path, rows: &[Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// Completion log-probs of the fixture's two image rows (completions as token ids) within 1e-4.
#[test]
fn score_rows_with_images_matches_transformers() {
    for name in MODELS {
        let e = expected(name);
        let tmp = tempfile::tempdir().unwrap();
        let rows: Vec<Value> = (0..2)
            .map(|row| {
                json!({
                    "messages": e["messages"][row],
                    "images": row_images(name, &e, row, tmp.path()),
                    "completion": e["completions"][row],
                })
            })
            .collect();
        let data = tmp.path().join("rows.jsonl");
        write_rows(&data, &rows);
        let model = fixture(name);
        let out = reinforge(&[
            "score",
            "--model",
            model.to_str().unwrap(),
            "--input",
            data.to_str().unwrap(),
            "--prompt-column",
            "messages",
        ]);
        succeeded(name, &out);
        let lines = json_lines(&out.stdout);
        assert_eq!(lines.len(), 2, "{name}");
        let mut worst = 0f64;
        for (row, line) in lines.iter().enumerate() {
            let prompt_len = e["completion_prompt_ids"][row].as_array().unwrap().len();
            assert_eq!(line["prompt_tokens"], prompt_len, "{name}: row {row}");
            assert_eq!(
                line["token_ids"], e["completions"][row],
                "{name}: row {row}"
            );
            let d = max_abs_diff(
                &floats(&line["token_logprobs"]),
                &floats(&e["completion_logprobs"][row]),
            );
            worst = worst.max(d);
        }
        eprintln!("{name}: score log-probs max |diff| {worst:.2e}");
        assert!(worst < 1e-4, "{name}: log-probs differ by {worst}");
    }
}

/// Greedy, 8 new tokens, on row 1's prompt and image: transformers' `generate` tokens.
#[test]
fn greedy_generate_with_an_image_matches_transformers() {
    for name in MODELS {
        let e = expected(name);
        let tmp = tempfile::tempdir().unwrap();
        let row = e["generate"]["single"]["row"].as_u64().unwrap() as usize;
        let data = tmp.path().join("prompts.jsonl");
        write_rows(
            &data,
            &[json!({
                "messages": e["messages"][row],
                "images": row_images(name, &e, row, tmp.path()),
            })],
        );
        let model = fixture(name);
        let out = reinforge(&[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--input",
            data.to_str().unwrap(),
            "--prompt-column",
            "messages",
            "--temperature",
            "0",
            "--max-new-tokens",
            "8",
        ]);
        succeeded(name, &out);
        let lines = json_lines(&out.stdout);
        eprintln!("{name}: generated {}", lines[0]["completion_ids"]);
        assert_eq!(
            lines[0]["completion_ids"], e["generate"]["single"]["new_tokens"],
            "{name}"
        );
        assert_eq!(lines[0]["prompt"], e["prompts"][row], "{name}: rendering");
    }
}

/// A PNG whose header declares `w` x `h` pixels, with a stub IDAT (the decode cap is checked on the
/// header, before any pixel is decoded).
fn png_header(w: u32, h: u32) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        let body = [kind, data].concat();
        out.extend(&body);
        out.extend(crc32(&body).to_be_bytes());
        out
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", &[0x78, 0x9c, 0x03, 0x00]));
    png.extend(chunk(b"IEND", &[]));
    png
}

/// Each bad input fails before any output is opened, naming the data file, the row and the
/// image file (or the column).
#[test]
fn bad_image_rows_are_refused_naming_the_file_and_row() {
    let name = "qwen2_vl";
    let e = expected(name);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let good = row_images(name, &e, 1, dir);
    std::fs::write(dir.join("imgs/corrupt.png"), b"\x89PNG\r\n\x1a\nnot a png").unwrap();
    std::fs::write(dir.join("imgs/huge.png"), png_header(10_000, 10_000)).unwrap();
    let row = |images: Value| json!({"messages": e["messages"][1], "images": images, "completion": [263, 263]});
    let vl = fixture(name);
    let text_only = root().join("fixtures/hf/models/qwen2");
    let cases: Vec<(&str, Value, &Path, Vec<&str>)> = vec![
        (
            "count",
            json!([good[0], good[0]]),
            vl.as_path(),
            vec![
                "line 2",
                "column `images`",
                "2 image files for 1 {\"type\": \"image\"} part",
            ],
        ),
        (
            "missing",
            json!(["imgs/nope.png"]),
            vl.as_path(),
            vec!["row 2", "nope.png"],
        ),
        (
            "corrupt",
            json!(["imgs/corrupt.png"]),
            vl.as_path(),
            vec!["row 2", "corrupt.png"],
        ),
        (
            "huge",
            json!(["imgs/huge.png"]),
            vl.as_path(),
            vec!["row 2", "huge.png", "10000x10000", "decode cap"],
        ),
        (
            "text_only",
            json!(good),
            text_only.as_path(),
            // Row 1 has images too: the first row is refused.
            vec!["row 1", "c_84x56.png", "text-only"],
        ),
    ];
    for (case, images, model, needles) in cases {
        let data = dir.join(format!("{case}.jsonl"));
        // Row 1 is fine; row 2 is the bad one.
        write_rows(&data, &[row(json!(good)), row(images)]);
        let out = dir.join(format!("{case}.out.jsonl"));
        let (code, stderr) = bad::run(&[
            "score",
            "--model",
            model.to_str().unwrap(),
            "--input",
            data.to_str().unwrap(),
            "--prompt-column",
            "messages",
            "--output",
            out.to_str().unwrap(),
        ]);
        eprintln!("{case}: {}", stderr.trim());
        assert_ne!(code, Some(0), "{case}: {stderr}");
        for n in needles.iter().chain([&data.to_str().unwrap()]) {
            assert!(stderr.contains(n), "{case}: {n:?} not in {stderr}");
        }
        assert!(!out.exists(), "{case}: an output file was left");
    }
}

/// The fixture's two image conversations, each with an assistant answer, as `train-sft` rows.
fn sft_rows(name: &str, e: &Value, dir: &Path) -> Vec<Value> {
    (0..2)
        .map(|row| {
            let mut messages = e["messages"][row].as_array().unwrap().clone();
            messages.push(json!({"role": "assistant", "content": "A red square."}));
            json!({"messages": messages, "images": row_images(name, e, row, dir)})
        })
        .collect()
}

fn train_sft(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "train-sft",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--lr",
        "1e-3",
    ];
    args.extend(extra);
    reinforge(&args)
}

/// `train-sft` on conversations with images (TRL's convention): each row's prompt tokens, placeholders
/// expanded, are transformers' processor ids; the language model trains while the tower stays
/// bit-identical, and `--vision-freeze false` trains the tower too.
#[test]
fn train_sft_on_rows_with_images() {
    for name in MODELS {
        let e = expected(name);
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("sft.jsonl");
        write_rows(&data, &sft_rows(name, &e, tmp.path()));
        let model = fixture(name);
        let tokens = tmp.path().join("tokens.jsonl");
        let run = tmp.path().join("run");
        let out = train_sft(
            &model,
            &data,
            &run,
            &["--write-tokens", tokens.to_str().unwrap()],
        );
        succeeded(name, &out);
        let text = std::fs::read_to_string(&tokens).unwrap();
        for (row, line) in json_lines(text.as_bytes()).iter().enumerate() {
            let ids = line["input_ids"].as_array().unwrap();
            let mask = line["completion_mask"].as_array().unwrap();
            let first = mask.iter().position(|m| m == 1).unwrap();
            assert_eq!(
                Value::from(ids[..first].to_vec()),
                e["completion_prompt_ids"][row],
                "{name}: row {row}'s prompt tokens"
            );
            assert_eq!(
                line["image_grid_thw"].as_array().unwrap().len(),
                e["batch"]["row_images"][row].as_array().unwrap().len(),
                "{name}: row {row}"
            );
        }
        let last = run.join("checkpoints/final");
        assert_eq!(
            param_gap_under(&model, &last, "visual."),
            0.0,
            "{name}: the frozen tower moved"
        );
        assert!(
            param_gap_under(&model, &last, "model.layers.") > 0.0,
            "{name}: nothing trained"
        );
        let run = tmp.path().join("run-tower");
        let out = train_sft(&model, &data, &run, &["--vision-freeze", "false"]);
        succeeded(name, &out);
        let last = run.join("checkpoints/final");
        assert!(
            param_gap_under(&model, &last, "visual.") > 0.0,
            "{name}: the tower did not train"
        );
    }
}

/// Bad image rows for `train-sft` fail before the run directory exists, naming the file and row.
#[test]
fn train_sft_refuses_bad_image_rows_before_writing() {
    let name = "qwen2_vl";
    let e = expected(name);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rows = sft_rows(name, &e, dir);
    let mut miscounted = rows.clone();
    miscounted[1]["images"] = json!([rows[0]["images"][0], rows[0]["images"][0]]);
    // A length that ends inside row 1's second image.
    let image_token = &e["special_token_ids"]["<|image_pad|>"];
    let prompt = e["completion_prompt_ids"][0].as_array().unwrap();
    let last_image_token = prompt.iter().rposition(|t| t == image_token).unwrap();
    let cut = last_image_token.to_string();
    let vl = fixture(name);
    let text_only = root().join("fixtures/hf/models/qwen2");
    // (case, rows, model, extra flags, what the error names)
    type Case<'a> = (&'a str, Vec<Value>, &'a Path, Vec<&'a str>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "count",
            miscounted,
            &vl,
            vec![],
            vec!["line 2", "2 image files for 1"],
        ),
        (
            "cut",
            rows.clone(),
            &vl,
            vec!["--max-length", &cut],
            vec!["row 1", "--max-length", "image"],
        ),
        (
            "text_only",
            rows.clone(),
            &text_only,
            vec![],
            vec!["line 1", "image"],
        ),
        (
            "lora_tower",
            rows,
            &vl,
            vec!["--lora-r", "4", "--vision-freeze", "false"],
            vec!["LoRA"],
        ),
    ];
    for (case, rows, model, extra, needles) in cases {
        let data = dir.join(format!("{case}.jsonl"));
        write_rows(&data, &rows);
        let run = dir.join(format!("{case}-run"));
        let out = train_sft(model, &data, &run, &extra);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        eprintln!("{case}: {}", stderr.trim());
        assert!(!out.status.success(), "{case}: accepted");
        assert!(!stderr.contains("panicked"), "{case}: {stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{case}: {n:?} not in {stderr}");
        }
        assert!(!run.exists(), "{case}: the run directory was created");
    }
}

/// The fixture's three prompts (two with images, one text only) as `train` rows.
fn rl_rows(name: &str, e: &Value, dir: &Path) -> Vec<Value> {
    (0..3)
        .map(|row| {
            let images = match row {
                2 => vec![],
                _ => row_images(name, e, row, dir),
            };
            json!({"prompt": e["messages"][row], "images": images})
        })
        .collect()
}

/// `train --model VL --data rows.jsonl` (a dataset RL run) with `extra` flags, its runs under
/// `dir/runs`, rewarded by a format pattern that some completions of the random fixture match.
fn train_rl(model: &Path, dir: &Path, name: &str, extra: &[&str]) -> std::process::Output {
    let spec = dir.join("vowel.toml");
    std::fs::write(
        &spec,
        "[components.vowel]\ntype = \"format\"\npattern = '[aeiou]'\n",
    )
    .unwrap();
    let sets = [
        format!("runs_dir={}", dir.join("runs").display()),
        format!("name={name}"),
        "rl.steps=2".into(),
        "rl.prompts_per_step=3".into(),
        "rl.num_generations=4".into(),
        "rl.max_completion_length=4".into(),
        "rl.recompute_old_logprobs=true".into(),
        "rl.lr=1e-3".into(),
    ];
    let data = dir.join("rl.jsonl");
    let mut args: Vec<String> = vec![
        "train".into(),
        "--model".into(),
        model.display().to_string(),
        "--data".into(),
        data.display().to_string(),
        "--reward".into(),
        spec.display().to_string(),
    ];
    for s in sets {
        args.extend(["--set".into(), s]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    reinforge(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// GRPO on rows with images: every step's sampler log-probs (drawn with the images) are the
/// trainer's (recomputed with them), the language model trains and the frozen tower stays
/// bit-identical.
#[test]
fn train_grpo_on_rows_with_images() {
    for name in MODELS {
        let e = expected(name);
        let tmp = tempfile::tempdir().unwrap();
        write_rows(&tmp.path().join("rl.jsonl"), &rl_rows(name, &e, tmp.path()));
        let model = fixture(name);
        let out = train_rl(&model, tmp.path(), "grpo", &[]);
        succeeded(name, &out);
        let run = tmp.path().join("runs/grpo");
        let metrics = json_lines(&std::fs::read(run.join("metrics.jsonl")).unwrap());
        assert_eq!(metrics.len(), 2, "{name}");
        for m in &metrics {
            let gap = m["rollout/logprob_gap_max_abs"].as_f64().unwrap();
            eprintln!(
                "{name}: step {} sampler-trainer max |diff| {gap:.2e}, reward std {}",
                m["step"], m["reward/std"]
            );
            assert!(gap < 1e-4, "{name}: sampler and trainer differ by {gap}");
        }
        let last = run.join("checkpoints/final");
        assert_eq!(
            param_gap_under(&model, &last, "visual."),
            0.0,
            "{name}: the frozen tower moved"
        );
        assert!(
            param_gap_under(&model, &last, "model.layers.") > 0.0,
            "{name}: nothing trained"
        );
        let out = train_rl(
            &model,
            tmp.path(),
            "tower",
            &["--set", "vision_freeze=false"],
        );
        succeeded(name, &out);
        let last = tmp.path().join("runs/tower/checkpoints/final");
        assert!(
            param_gap_under(&model, &last, "visual.") > 0.0,
            "{name}: vision_freeze = false did not train the tower"
        );
    }
}

/// What a dataset RL run cannot do with images yet is refused by name before the first step:
/// training the tower under LoRA, multi-turn tool episodes (naming the row), remote rollout
/// engines and PPO's critic (naming the file).
#[test]
fn train_refuses_what_images_do_not_support_yet() {
    let name = "qwen2_vl";
    let e = expected(name);
    let tmp = tempfile::tempdir().unwrap();
    write_rows(&tmp.path().join("rl.jsonl"), &rl_rows(name, &e, tmp.path()));
    let model = fixture(name);
    let cases: [(&str, &[&str], &[&str]); 4] = [
        (
            "remote",
            &["--set", "rollout.base_urls=[\"http://127.0.0.1:9\"]"],
            &["rl.jsonl", "rollout.base_urls"],
        ),
        (
            "lora_tower",
            &["--lora-r", "4", "--set", "vision_freeze=false"],
            &["vision_freeze", "LoRA"],
        ),
        (
            "tools",
            &["--tools", "calculator"],
            &["rl.jsonl", "row 1", "--tools"],
        ),
        (
            "gae",
            &["--set", "rl.algorithm=ppo"],
            &["rl.jsonl", "gae", "critic", "images"],
        ),
    ];
    for (case, extra, needles) in cases {
        let out = train_rl(&model, tmp.path(), case, extra);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        eprintln!("{case}: {}", stderr.trim().lines().last().unwrap_or(""));
        assert!(!out.status.success(), "{case}: accepted");
        assert!(!stderr.contains("panicked"), "{case}: {stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{case}: {n:?} not in {stderr}");
        }
    }
}
