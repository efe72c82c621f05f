//! Issue 24's acceptance on the real server process: scripts/hostile_serve.py starts
//! `reinforge serve --model` (fixture Qwen2, loopback, keys and a weights root), runs the
//! reproduction of each finding and the sandbox check (a fork bomb, a fetch_files flood and 8
//! stalled uploads at once leave /v1/verify answering within 1 s), and measures the server
//! process's VmRSS after a warm-up and after the whole suite (within 200 MB). The same script
//! with `--old` against a build from before issue 24 shows each check failing there
//! (docs/security.md).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn every_hostile_check_holds_and_the_server_keeps_its_memory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let report = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("python3")
        .arg(root.join("scripts/hostile_serve.py"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_reinforge"))
        .arg("--model")
        .arg(root.join("fixtures/hf/models/qwen2"))
        .arg("--json")
        .arg(report.path())
        .output()
        .expect("runs python3 (standard library only)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(report.path()).unwrap()).unwrap();
    // 11 findings, the sandbox check and the RSS check, each held.
    assert_eq!(results.len(), 13, "{text}");
    assert!(results.iter().all(|r| r["held"] == true), "{text}");
    let rss = results.last().unwrap();
    let grew = rss["after_mib"].as_i64().unwrap() - rss["before_mib"].as_i64().unwrap();
    assert!(grew < 200, "{text}");
    assert_eq!(rss["restarts"], 0, "{text}");
}
