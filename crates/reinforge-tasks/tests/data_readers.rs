//! Dataset readers: JSON Lines and Parquet files (the Parquet ones written here with the parquet crate's
//! writer, in the nested `list<struct<role, content>>` layout pyarrow and `datasets` use for chat columns).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use reinforge_tasks::data::{read_jsonl, read_parquet, Location};
use reinforge_tasks::{read_records, DataColumns, DataError, Message, Prompt, PromptFormat};

fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn jsonl_text_and_messages_prompts_with_answers_and_extra_columns() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "d.jsonl",
        concat!(
            r#"{"prompt": "What is 2+3?", "answer": "5", "id": 7}"#,
            "\n",
            "\n",
            r#"{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6*7?"}], "answer": 42}"#,
            "\n",
        ),
    );
    let recs = read_records(&p, &DataColumns::default()).unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].prompt, Prompt::Text("What is 2+3?".into()));
    assert_eq!(recs[0].answer.as_deref(), Some("5"));
    assert_eq!(recs[0].extra["id"], serde_json::json!(7));
    assert!(!recs[0].extra.contains_key("prompt") && !recs[0].extra.contains_key("answer"));
    assert_eq!(
        recs[1].prompt,
        Prompt::Messages(vec![msg("system", "Be brief."), msg("user", "6*7?")])
    );
    assert_eq!(
        recs[1].answer.as_deref(),
        Some("42"),
        "numbers keep their JSON text"
    );

    // Custom columns, no answer.
    let p = write(dir.path(), "c.jsonl", r#"{"question": "hi", "label": "x"}"#);
    let cols = DataColumns::text("question", None);
    let recs = read_jsonl(&p, &cols).unwrap();
    assert_eq!(recs[0].prompt, Prompt::Text("hi".into()));
    assert_eq!(recs[0].answer, None);
    assert_eq!(recs[0].extra["label"], "x");
}

#[test]
fn jsonl_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let ok = r#"{"prompt": "a", "answer": "1"}"#;

    let p = write(
        dir.path(),
        "bad.jsonl",
        &format!("{ok}\n{ok}\n{{\"prompt\": \"b\",, }}\n"),
    );
    match read_jsonl(&p, &DataColumns::default()).unwrap_err() {
        DataError::Json {
            path, line, column, ..
        } => {
            assert_eq!(path, p);
            assert_eq!((line, column), (3, 16), "the second comma");
        }
        other => panic!("{other:?}"),
    }

    let p = write(
        dir.path(),
        "missing.jsonl",
        &format!("{ok}\n{{\"question\": \"b\", \"answer\": \"2\"}}\n"),
    );
    let err = read_jsonl(&p, &DataColumns::default()).unwrap_err();
    assert!(
        matches!(&err, DataError::Column { location: Location::Line(2), column, .. } if column == "prompt"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(
            "missing.jsonl: line 2: column `prompt`: missing (columns present: answer, question)"
        ),
        "{text}"
    );

    let p = write(dir.path(), "noanswer.jsonl", r#"{"prompt": "a"}"#);
    let err = read_jsonl(&p, &DataColumns::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 1: column `answer`: missing"), "{err}");

    let p = write(
        dir.path(),
        "msgs.jsonl",
        r#"{"messages": [{"role": "user"}], "answer": "1"}"#,
    );
    let err = read_jsonl(&p, &DataColumns::messages("messages", Some("answer")))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("column `messages`: message 0: missing `content`"),
        "{err}"
    );

    // A text column given where messages are required, and the reverse.
    let p = write(dir.path(), "kind.jsonl", ok);
    let cols = DataColumns {
        prompt_format: PromptFormat::Messages,
        ..Default::default()
    };
    let err = read_jsonl(&p, &cols).unwrap_err().to_string();
    assert!(
        err.contains(
            "column `prompt`: expected a list of {role, content} messages, found a string"
        ),
        "{err}"
    );
    let p = write(
        dir.path(),
        "kind2.jsonl",
        r#"{"prompt": [], "answer": "1"}"#,
    );
    let cols = DataColumns {
        prompt_format: PromptFormat::Text,
        ..Default::default()
    };
    let err = read_jsonl(&p, &cols).unwrap_err().to_string();
    assert!(err.contains("expected text, found a list"), "{err}");

    let err = read_records(&dir.path().join("x.csv"), &DataColumns::default()).unwrap_err();
    assert!(matches!(err, DataError::UnknownFormat { .. }), "{err:?}");
    let err = read_records(&dir.path().join("absent.jsonl"), &DataColumns::default()).unwrap_err();
    assert!(err.to_string().contains("absent.jsonl"), "{err}");
}

const SCHEMA: &str = "
message schema {
  OPTIONAL BYTE_ARRAY text (UTF8);
  OPTIONAL group messages (LIST) {
    REPEATED group list {
      OPTIONAL group element {
        OPTIONAL BYTE_ARRAY role (UTF8);
        OPTIONAL BYTE_ARRAY content (UTF8);
      }
    }
  }
  OPTIONAL INT64 answer;
  REQUIRED BYTE_ARRAY source (UTF8);
}";

fn bytes(items: &[&str]) -> Vec<ByteArray> {
    items.iter().map(|s| ByteArray::from(*s)).collect()
}

/// Three rows: (text, [system, user], 5, "a"), (text, [user], 42, "b"), (null, [user], null, "c").
fn write_parquet(path: &Path, compression: Compression) {
    let schema = Arc::new(parse_message_type(SCHEMA).unwrap());
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(compression)
            .build(),
    );
    let file = std::fs::File::create(path).unwrap();
    let mut writer = SerializedFileWriter::new(file, schema, props).unwrap();
    let mut rg = writer.next_row_group().unwrap();
    let mut leaf = 0;
    while let Some(mut col) = rg.next_column().unwrap() {
        match leaf {
            0 => {
                col.typed::<ByteArrayType>()
                    .write_batch(
                        &bytes(&["What is 2+3?", "Compute 6*7."]),
                        Some(&[1, 1, 0]),
                        None,
                    )
                    .unwrap();
            }
            // messages.list.element.{role, content}: def 4 = present, rep 1 = same row's list continues.
            1 => {
                col.typed::<ByteArrayType>()
                    .write_batch(
                        &bytes(&["system", "user", "user", "user"]),
                        Some(&[4, 4, 4, 4]),
                        Some(&[0, 1, 0, 0]),
                    )
                    .unwrap();
            }
            2 => {
                col.typed::<ByteArrayType>()
                    .write_batch(
                        &bytes(&["Be brief.", "2+3?", "6*7? ü", "hi"]),
                        Some(&[4, 4, 4, 4]),
                        Some(&[0, 1, 0, 0]),
                    )
                    .unwrap();
            }
            3 => {
                col.typed::<Int64Type>()
                    .write_batch(&[5, 42], Some(&[1, 1, 0]), None)
                    .unwrap();
            }
            4 => {
                col.typed::<ByteArrayType>()
                    .write_batch(&bytes(&["a", "b", "c"]), None, None)
                    .unwrap();
            }
            _ => unreachable!(),
        }
        col.close().unwrap();
        leaf += 1;
    }
    rg.close().unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_messages_and_text_columns_with_snappy_and_zstd() {
    let dir = tempfile::tempdir().unwrap();
    for (name, codec) in [
        ("snappy.parquet", Compression::SNAPPY),
        ("zstd.parquet", Compression::ZSTD(ZstdLevel::default())),
        ("gzip.parquet", Compression::GZIP(Default::default())),
    ] {
        let p = dir.path().join(name);
        write_parquet(&p, codec);
        // Rows 0 and 1 only: row 2 has a null answer (checked below).
        let cols = DataColumns::messages("messages", None);
        let recs = read_records(&p, &cols).unwrap();
        assert_eq!(recs.len(), 3, "{name}");
        assert_eq!(
            recs[0].prompt,
            Prompt::Messages(vec![msg("system", "Be brief."), msg("user", "2+3?")]),
            "{name}"
        );
        assert_eq!(
            recs[1].prompt,
            Prompt::Messages(vec![msg("user", "6*7? ü")])
        );
        assert_eq!(recs[2].prompt, Prompt::Messages(vec![msg("user", "hi")]));
        assert_eq!(recs[0].extra["source"], "a");
        assert_eq!(recs[0].extra["answer"], 5);
        assert_eq!(recs[0].extra["text"], "What is 2+3?");
        assert!(recs[2].extra["text"].is_null());

        let text_cols = DataColumns::text("text", Some("answer"));
        let err = read_parquet(&p, &text_cols).unwrap_err();
        // Row 2's text is null: the error names the row and column.
        assert!(
            matches!(&err, DataError::Column { location: Location::Row(2), column, .. } if column == "text"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(&format!("{name}: row 2: column `text`: is null")),
            "{err}"
        );
    }
}

#[test]
fn parquet_answers_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.parquet");
    write_parquet(&p, Compression::SNAPPY);
    let cols = DataColumns::messages("messages", Some("answer"));
    let err = read_parquet(&p, &cols).unwrap_err().to_string();
    assert!(
        err.contains(
            "row 2: column `answer`: expected a string, number or boolean answer, found null"
        ),
        "{err}"
    );

    let cols = DataColumns::text("text", Some("source"));
    let err = read_parquet(&p, &cols).unwrap_err().to_string();
    assert!(err.contains("row 2: column `text`"), "{err}");

    let cols = DataColumns::messages("messages", Some("source"));
    let recs = read_parquet(&p, &cols).unwrap();
    let answers: Vec<_> = recs.iter().map(|r| r.answer.clone().unwrap()).collect();
    assert_eq!(answers, ["a", "b", "c"]);

    let cols = DataColumns::messages("chat", None);
    let err = read_parquet(&p, &cols).unwrap_err().to_string();
    assert!(
        err.contains(
            "row 0: column `chat`: missing (columns present: answer, messages, source, text)"
        ),
        "{err}"
    );

    let junk = dir.path().join("junk.parquet");
    std::fs::write(&junk, b"not a parquet file at all").unwrap();
    let err = read_parquet(&junk, &cols).unwrap_err();
    assert!(matches!(err, DataError::Parquet { .. }), "{err:?}");
    assert!(err.to_string().contains("junk.parquet"), "{err}");
}

/// A reader that does not take images (SFT, RL, DPO today) refuses a row with image parts
/// instead of training on its text alone; with the `images` column the row reads.
#[test]
fn image_parts_are_refused_where_images_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let row = r#"{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}], "images": ["a.png"]}"#;
    let p = write(dir.path(), "d.jsonl", &format!("{row}\n"));
    let err = read_jsonl(&p, &DataColumns::messages("messages", None))
        .expect_err("image parts without the images column are refused")
        .to_string();
    assert!(err.contains("line 1") && err.contains("image"), "{err}");
    let with_images = DataColumns {
        images: Some("images".into()),
        ..DataColumns::messages("messages", None)
    };
    let rows = read_jsonl(&p, &with_images).unwrap();
    assert_eq!(rows[0].images, vec![dir.path().join("a.png")]);
}
