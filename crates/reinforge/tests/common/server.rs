//! A `reinforge serve` process for tests: started on a free port, killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `reinforge serve`; killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    /// `reinforge serve --port 0 --no-sandbox` with `args`; returns once it listens.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reinforge"))
            .args(["serve", "--port", "0", "--no-sandbox"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts reinforge serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("serve printed its address").unwrap();
            if let Some(i) = line.find("http://") {
                let rest = &line[i..];
                break rest[..rest.find(' ').unwrap_or(rest.len())].to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, url }
    }

    /// A server of the policy in `model` (one libtorch thread).
    pub fn model(model: &Path) -> Server {
        Self::start(&["--threads", "1", "--model", model.to_str().unwrap()])
    }

    /// [`Server::model`] that wants `Authorization: Bearer` [`API_KEY`], and [`ADMIN_KEY`] on
    /// the weight and pause routes.
    pub fn model_with_keys(model: &Path) -> Server {
        Self::start(&[
            "--threads",
            "1",
            "--model",
            model.to_str().unwrap(),
            "--api-key",
            API_KEY,
            "--admin-key",
            ADMIN_KEY,
        ])
    }
}

/// The keys of [`Server::model_with_keys`].
pub const API_KEY: &str = "test-api-key";
pub const ADMIN_KEY: &str = "test-admin-key";

impl Server {}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POSTs `body` to `url` and parses the JSON answer.
pub fn post(url: &str, body: &serde_json::Value) -> serde_json::Value {
    ureq::post(url)
        .send_json(body.clone())
        .expect("the server answers")
        .into_json()
        .unwrap()
}
