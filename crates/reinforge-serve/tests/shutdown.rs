//! SIGTERM and SIGINT on the real binary: the request in flight completes, then the process
//! exits 0 and stops listening.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The server, its URL, its remaining stderr, and a slow request in flight.
struct Busy {
    child: std::process::Child,
    url: String,
    rest: std::thread::JoinHandle<Vec<String>>,
    request: std::thread::JoinHandle<(u16, serde_json::Value, Option<String>)>,
    t0: Instant,
}

fn busy_server() -> Busy {
    let mut child = Command::new(env!("CARGO_BIN_EXE_reinforge-serve"))
        .args(["--port", "0", "--no-sandbox", "--workers", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let u = format!("{url}/v1/verify");
    let slow = slow_verify_batch(20_000);
    let t0 = Instant::now();
    let request = std::thread::spawn(move || post(&u, &slow));
    let t = Instant::now();
    loop {
        let page = get_text(&format!("{url}/metrics"));
        if metric(&page, "reinforge_http_requests_in_flight") >= 1.0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "request never started"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    Busy {
        child,
        url,
        rest,
        request,
        t0,
    }
}

fn kill(signal: &str, pid: u32) {
    let killed = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            return code;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "server did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn graceful(signal: &str) {
    let Busy {
        mut child,
        url,
        rest,
        request,
        t0,
    } = busy_server();
    kill(signal, child.id());
    let (status, v, _) = request.join().unwrap();
    let took = t0.elapsed();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 20_000);
    let code = wait_exit(&mut child);
    assert!(code.success(), "{code:?}");
    let log = rest.join().unwrap().join("\n");
    assert!(
        log.contains("shutting down") && log.contains("stopped"),
        "{log}"
    );
    assert!(
        ureq::get(&format!("{url}/health")).call().is_err(),
        "still listening after exit"
    );
    eprintln!("{signal}: in-flight request finished after {took:?}");
}

#[test]
fn sigterm_finishes_the_request_in_flight() {
    graceful("-TERM");
}

#[test]
fn sigint_finishes_the_request_in_flight() {
    graceful("-INT");
}

#[test]
fn a_second_signal_quits_at_once() {
    let Busy {
        mut child,
        rest,
        request,
        ..
    } = busy_server();
    kill("-TERM", child.id());
    std::thread::sleep(Duration::from_millis(100));
    kill("-TERM", child.id());
    let code = wait_exit(&mut child);
    assert_eq!(code.code(), Some(130), "{code:?}");
    let log = rest.join().unwrap().join("\n");
    assert!(log.contains("second signal"), "{log}");
    // the request in flight was cut off
    assert!(
        request.join().is_err(),
        "the slow request should not have completed"
    );
}
