//! An in-process server on an ephemeral port, and small HTTP helpers.

#![allow(dead_code)]

pub mod policy;
pub mod scripted;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

use reinforge_serve::{AppState, ServeArgs};
use serde_json::Value;

/// Held for the whole of a test that must run alone in its binary (the time bounds of
/// `hostile.rs`): one holder at a time.
static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Takes the process-wide test lock; a test that panicked holding it does not poison it for
/// the others (their own assertions still run).
pub fn exclusive() -> MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running server; stopped (gracefully) on drop.
pub struct Server {
    pub url: String,
    pub state: AppState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Starts a server with `args` (host and port are overridden: 127.0.0.1, ephemeral).
pub fn start(args: ServeArgs) -> Server {
    start_state(AppState::new(&args).expect("server state"))
}

/// Starts a server with the policy routes over `generator`.
pub fn start_policy(args: ServeArgs, generator: Box<dyn reinforge_serve::Generator>) -> Server {
    start_state(
        AppState::with_policy(&args, Some(generator), &reinforge_serve::no_models)
            .expect("server state"),
    )
}

/// Starts a server over a prepared `state` (the Tinker routes: `tinker_routes.rs`).
pub fn start_state(state: AppState) -> Server {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let st = state.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            reinforge_serve::serve(listener, st, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
    });
    Server {
        url,
        state,
        stop: Some(tx),
        thread: Some(thread),
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Default args with a small sandbox.
pub fn args() -> ServeArgs {
    let mut a = ServeArgs::defaults();
    a.workers = 2;
    a.sandbox_wall_time_s = 20.0;
    a.sandbox_memory_mb = 1024;
    a
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// POSTs a JSON value; returns (status, body as JSON, Retry-After).
pub fn post(url: &str, body: &Value) -> (u16, Value, Option<String>) {
    post_raw(url, body.to_string().as_bytes())
}

/// POSTs raw bytes; returns (status, body as JSON, Retry-After).
pub fn post_raw(url: &str, body: &[u8]) -> (u16, Value, Option<String>) {
    let r = ureq::post(url)
        .set("Content-Type", "application/json")
        .send_bytes(body);
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST {url}: {e}"),
    };
    let status = resp.status();
    let retry = resp.header("Retry-After").map(str::to_string);
    let text = resp.into_string().unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?}: {e}"));
    (status, v, retry)
}

pub fn get_text(url: &str) -> String {
    ureq::get(url).call().unwrap().into_string().unwrap()
}

/// Value of the sample `name{labels}` in a Prometheus text page (0 if absent).
pub fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == series).then(|| v.parse().unwrap())
        })
        .unwrap_or(0.0)
}

/// A /v1/verify batch that keeps one worker busy for a while.
pub fn slow_verify_batch(n: usize) -> Value {
    let cases: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "id": i,
                "gold": format!("\\frac{{{i}}}{{7}} + \\sqrt{{2}} x^2 - \\sin(x)"),
                "pred": format!("The answer is $\\boxed{{{i}/7 + 2^{{1/2}} \\cdot x^2 - \\sin x}}$"),
            })
        })
        .collect();
    serde_json::json!({ "cases": cases })
}
