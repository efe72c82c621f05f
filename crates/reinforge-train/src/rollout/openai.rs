//! Remote engines over the OpenAI completions API with vLLM's extensions for RL clients
//! (token-id prompts, `return_token_ids`, `return_tokens_as_token_ids`, `stop_token_ids`,
//! `top_k`, `seed`), as `reinforge serve --model`, vLLM and SGLang serve it. The trainer
//! sends token ids and reads token ids back, so nothing is re-tokenised on either side.
//!
//! Rows are split across the engines by prompt group (consecutive identical prompts stay on
//! one engine); engine `e` gets the step's seed mixed with `e` (engine 0 gets the seed itself,
//! so one engine draws what the local engine draws on the same weights, when the engine
//! decodes a seeded request as a batch of its own, as `reinforge serve` does).
//! Failed requests (refused connection, 5xx, timeout, an aborted batch) are retried
//! `rollout.retries` times with backoff; then the step fails naming the engine, and the run
//! resumes from its last checkpoint with `--resume`.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use reinforge_torch::{Completion, SamplingParams};
use serde_json::{json, Value};

use super::{wait_until, Engine, Generated};
use crate::config::RolloutConfig;
use crate::seeds::step_seed;

/// Seeds of engines other than the first: `step_seed(seed, ENGINE_SEEDS, e)`.
const ENGINE_SEEDS: u64 = 17;

/// The OpenAI-compatible engines of a run.
pub struct RemoteEngines {
    pub urls: Vec<String>,
    /// The served model name sent with every request.
    pub model: String,
    agent: ureq::Agent,
    retries: usize,
    /// `Authorization` header values: generation routes, and the weight/pause routes.
    auth: Option<String>,
    admin_auth: Option<String>,
    /// The newest weight version every engine confirmed loading, for the thread that
    /// generates ahead.
    confirmed: Mutex<Option<u64>>,
    confirmed_changed: Condvar,
}

impl RemoteEngines {
    /// Connects to every engine of `cfg` (`GET /v1/models`) and settles the model name.
    pub fn connect(cfg: &RolloutConfig) -> Result<Self> {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs_f64(cfg.timeout_s))
            .build();
        let mut engines = Self {
            urls: cfg
                .base_urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
            model: cfg.model.clone(),
            agent,
            retries: cfg.retries,
            auth: None,
            admin_auth: None,
            confirmed: Mutex::new(None),
            confirmed_changed: Condvar::new(),
        };
        let (api, admin) = keys(cfg, |name| std::env::var(name).ok());
        engines.auth = api.map(|k| format!("Bearer {k}"));
        engines.admin_auth = admin.map(|k| format!("Bearer {k}"));
        for url in engines.urls.clone() {
            let models = engines
                .get(&url, "/v1/models")
                .with_context(|| format!("rollout engine {url} (rollout.base_urls)"))?;
            let names: Vec<String> = models["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["id"].as_str().map(String::from))
                .collect();
            if engines.model.is_empty() {
                engines.model = names.first().cloned().ok_or_else(|| {
                    anyhow!("rollout engine {url} serves no model (GET /v1/models)")
                })?;
            } else if !names.contains(&engines.model) {
                bail!(
                    "rollout engine {url} does not serve rollout.model = {:?} (it serves {names:?})",
                    engines.model
                );
            }
        }
        Ok(engines)
    }

    /// `GET base + path` as JSON, with retries.
    pub fn get(&self, base: &str, path: &str) -> Result<Value> {
        self.with_retries(base, path, || {
            json_of(
                self.authorized(self.agent.get(&format!("{base}{path}")), path)
                    .call()?,
            )
        })
    }

    /// `req` with the `Authorization` header `path` needs (the admin key on the weight and
    /// pause routes), when a key is configured.
    fn authorized(&self, req: ureq::Request, path: &str) -> ureq::Request {
        let admin = matches!(
            path,
            "/update_weights_from_disk"
                | "/pause_generation"
                | "/continue_generation"
                | "/pause"
                | "/resume"
        );
        let header = if admin { &self.admin_auth } else { &self.auth };
        match header {
            Some(h) => req.set("Authorization", h),
            None => req,
        }
    }

    /// `POST base + path` with a JSON body, with retries.
    pub fn post(&self, base: &str, path: &str, body: &Value) -> Result<Value> {
        self.with_retries(base, path, || {
            json_of(
                self.authorized(self.agent.post(&format!("{base}{path}")), path)
                    .send_json(body.clone())?,
            )
        })
    }

    /// Runs `call` until it succeeds, at most `1 + retries` times (backoff 0.5 s, 1 s, 2 s,
    /// ...); a 4xx answer is not retried (the request itself is wrong).
    fn with_retries(
        &self,
        base: &str,
        path: &str,
        call: impl Fn() -> Result<Value, Box<ureq::Error>>,
    ) -> Result<Value> {
        let mut wait = Duration::from_millis(500);
        for attempt in 0..=self.retries {
            match call() {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let (retry, msg) = describe(*e);
                    if !retry || attempt == self.retries {
                        bail!(
                            "rollout engine {base}{path} failed after {} attempt(s): {msg}",
                            attempt + 1
                        );
                    }
                    eprintln!("warning: rollout engine {base}{path}: {msg}; retrying in {wait:?}");
                    std::thread::sleep(wait);
                    wait *= 2;
                }
            }
        }
        unreachable!("the loop returns on its last attempt")
    }

    /// Records that every engine holds `version` and wakes the thread waiting for it.
    pub fn confirm(&self, version: u64) {
        *self.confirmed.lock().expect("version lock") = Some(version);
        self.confirmed_changed.notify_all();
    }

    /// Waits until every engine confirmed a version `>= version` (or `stopped()`).
    pub fn wait_for_version(&self, version: u64, stopped: &dyn Fn() -> bool) -> Result<u64> {
        wait_until(&self.confirmed, &self.confirmed_changed, stopped, |v| {
            v.filter(|&have| have >= version)
        })
    }

    /// One engine's completions of `rows` (consecutive identical prompts form a group).
    fn complete(
        &self,
        url: &str,
        rows: &[Vec<i64>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<(Vec<Completion>, Option<u64>)> {
        let body = request_body(&self.model, rows, params, seed);
        for attempt in 0..=self.retries {
            let resp = self.post(url, "/v1/completions", &body)?;
            match parse_completions(&resp, rows.len()) {
                Ok(Parsed::Done(c)) => return Ok((c, weight_version(&resp))),
                Ok(Parsed::Aborted) if attempt < self.retries => {
                    eprintln!(
                        "warning: rollout engine {url} aborted a batch (paused?); asking again"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                Ok(Parsed::Aborted) => bail!(
                    "rollout engine {url} aborted the batch {} times",
                    attempt + 1
                ),
                Err(e) => {
                    return Err(e.context(format!("reading the answer of {url}/v1/completions")))
                }
            }
        }
        unreachable!("the loop returns on its last attempt")
    }
}

impl Engine for RemoteEngines {
    fn generate(
        &self,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        let shares = split_groups(prompts, self.urls.len());
        let results: Vec<Result<(Vec<Completion>, Option<u64>)>> = std::thread::scope(|s| {
            let handles: Vec<_> = shares
                .iter()
                .zip(&self.urls)
                .enumerate()
                .filter(|(_, (range, _))| !range.is_empty())
                .map(|(e, (range, url))| {
                    let engine_seed = if e == 0 {
                        seed
                    } else {
                        step_seed(seed, ENGINE_SEEDS, e as u64)
                    };
                    let rows = &prompts[range.clone()];
                    s.spawn(move || self.complete(url, rows, params, engine_seed))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("an engine request thread panicked")))
                })
                .collect()
        });
        let mut completions = Vec::with_capacity(prompts.len());
        let mut version: Option<u64> = None;
        for r in results {
            let (c, v) = r?;
            completions.extend(c);
            if let Some(v) = v {
                version = Some(version.map_or(v, |old| old.min(v)));
            }
        }
        // Engines that do not report versions (vLLM) hold what was last confirmed.
        let version = version
            .or(*self.confirmed.lock().expect("version lock"))
            .unwrap_or(0);
        Ok(Generated {
            completions,
            version,
        })
    }
}

/// The JSON body of an answer (a body that is not JSON is a transport error: retried).
/// The API and admin keys of `cfg`: the config's, else the environment's (`REINFORGE_API_KEY`,
/// `REINFORGE_ADMIN_KEY`); the admin key defaults to the API key.
pub fn keys(
    cfg: &RolloutConfig,
    env: impl Fn(&str) -> Option<String>,
) -> (Option<String>, Option<String>) {
    let pick = |set: &str, var: &str| {
        Some(set.to_string())
            .filter(|k| !k.is_empty())
            .or_else(|| env(var).filter(|k| !k.is_empty()))
    };
    let api = pick(&cfg.api_key, "REINFORGE_API_KEY");
    let admin = pick(&cfg.admin_key, "REINFORGE_ADMIN_KEY").or_else(|| api.clone());
    (api, admin)
}

fn json_of(resp: ureq::Response) -> Result<Value, Box<ureq::Error>> {
    resp.into_json().map_err(|e| Box::new(ureq::Error::from(e)))
}

/// Whether an error is worth retrying, and what it says.
fn describe(e: ureq::Error) -> (bool, String) {
    match e {
        ureq::Error::Status(code, resp) => {
            let body = resp.into_string().unwrap_or_default();
            let hint = if code == 401 {
                " (the engine wants a key: rollout.api_key / REINFORGE_API_KEY, and for weight \
                 loads rollout.admin_key / REINFORGE_ADMIN_KEY)"
            } else {
                ""
            };
            (
                code >= 500 || code == 429,
                format!("HTTP {code}: {}{hint}", body.trim()),
            )
        }
        ureq::Error::Transport(t) => (true, t.to_string()),
    }
}

/// `/v1/completions` body: every row a token-id prompt, `n = 1`, token ids and log-probs back.
fn request_body(model: &str, rows: &[Vec<i64>], p: &SamplingParams, seed: u64) -> Value {
    json!({
        "model": model,
        "prompt": rows,
        "n": 1,
        "max_tokens": p.max_new_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": if p.top_k > 0 { p.top_k } else { -1 },
        "seed": crate::seeds::torch_seed(seed),
        "stop_token_ids": p.stop_tokens,
        // The trainer names its own stop ids; the engine adds none of its own.
        "ignore_eos": true,
        "logprobs": 0,
        "return_tokens_as_token_ids": true,
        "return_token_ids": true,
        "skip_special_tokens": false,
    })
}

enum Parsed {
    Done(Vec<Completion>),
    /// The engine aborted the batch (a pause with abort): ask again.
    Aborted,
}

/// Completions from a `/v1/completions` answer, in row order.
fn parse_completions(resp: &Value, rows: usize) -> Result<Parsed> {
    let choices = resp["choices"]
        .as_array()
        .ok_or_else(|| anyhow!("no `choices` array"))?;
    if choices.len() != rows {
        bail!("{} choices for {rows} prompts", choices.len());
    }
    let mut out: Vec<Option<Completion>> = vec![None; rows];
    for c in choices {
        let index = c["index"]
            .as_u64()
            .ok_or_else(|| anyhow!("a choice without `index`"))? as usize;
        let finish = c["finish_reason"].as_str().unwrap_or("");
        if finish == "abort" {
            return Ok(Parsed::Aborted);
        }
        let tokens = choice_tokens(c).with_context(|| format!("choice {index}"))?;
        let logprobs: Vec<f32> = c["logprobs"]["token_logprobs"]
            .as_array()
            .ok_or_else(|| anyhow!("choice {index}: no logprobs.token_logprobs (send logprobs)"))?
            .iter()
            .map(|v| {
                v.as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| anyhow!("choice {index}: a null log-prob"))
            })
            .collect::<Result<_>>()?;
        if logprobs.len() != tokens.len() {
            bail!(
                "choice {index}: {} tokens but {} log-probs",
                tokens.len(),
                logprobs.len()
            );
        }
        let slot = out
            .get_mut(index)
            .ok_or_else(|| anyhow!("choice index {index} out of range"))?;
        *slot = Some(Completion {
            tokens,
            logprobs,
            entropies: vec![],
            truncated: finish == "length",
            top: vec![],
            aborted: false,
        });
    }
    out.into_iter()
        .enumerate()
        .map(|(i, c)| c.ok_or_else(|| anyhow!("no choice with index {i}")))
        .collect::<Result<Vec<_>>>()
        .map(Parsed::Done)
}

/// A choice's token ids: vLLM's `token_ids` (>= 0.10.2), else the `token_id:N` strings that
/// `return_tokens_as_token_ids` puts in `logprobs.tokens`.
fn choice_tokens(c: &Value) -> Result<Vec<i64>> {
    if let Some(ids) = c["token_ids"].as_array() {
        return ids
            .iter()
            .map(|v| v.as_i64().ok_or_else(|| anyhow!("a non-integer token id")))
            .collect();
    }
    c["logprobs"]["tokens"]
        .as_array()
        .ok_or_else(|| anyhow!("neither token_ids nor logprobs.tokens"))?
        .iter()
        .map(|t| {
            t.as_str()
                .and_then(|s| s.strip_prefix("token_id:"))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| {
                    anyhow!("token {t} is not `token_id:N` (send return_tokens_as_token_ids)")
                })
        })
        .collect()
}

/// The `weight_version` an answer names, when it is a number.
fn weight_version(resp: &Value) -> Option<u64> {
    match &resp["weight_version"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Row ranges for `engines` engines: whole groups of consecutive identical prompts, as even
/// as the groups allow, in order.
pub fn split_groups(prompts: &[Vec<i64>], engines: usize) -> Vec<std::ops::Range<usize>> {
    let mut starts = vec![0];
    for i in 1..prompts.len() {
        if prompts[i] != prompts[i - 1] {
            starts.push(i);
        }
    }
    let groups = if prompts.is_empty() { 0 } else { starts.len() };
    starts.push(prompts.len());
    (0..engines)
        .map(|e| starts[e * groups / engines]..starts[(e + 1) * groups / engines])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_config_then_the_environment() {
        let mut cfg = RolloutConfig::default();
        let none = |_: &str| None;
        assert_eq!(keys(&cfg, none), (None, None));
        let env = |v: &str| Some(format!("env-{v}"));
        assert_eq!(
            keys(&cfg, env),
            (
                Some("env-REINFORGE_API_KEY".into()),
                Some("env-REINFORGE_ADMIN_KEY".into())
            )
        );
        cfg.api_key = "k".into();
        assert_eq!(keys(&cfg, none), (Some("k".into()), Some("k".into())));
        cfg.admin_key = "a".into();
        assert_eq!(keys(&cfg, env), (Some("k".into()), Some("a".into())));
    }

    /// A loopback server that answers `/v1/models` only to `Bearer api` and
    /// `/update_weights_from_disk` only to `Bearer admin`, 401 otherwise; it records the
    /// requests' Authorization headers.
    fn keyed_server() -> (String, std::sync::Arc<Mutex<Vec<String>>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(Mutex::new(vec![]));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(8) {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                let (mut auth, mut len) = (String::new(), 0usize);
                loop {
                    let mut h = String::new();
                    r.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap();
                    match k.to_ascii_lowercase().as_str() {
                        "authorization" => auth = v.trim().to_string(),
                        "content-length" => len = v.trim().parse().unwrap(),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                log.lock().unwrap().push(format!("{path} {auth}"));
                let want = if path == "/v1/models" {
                    "Bearer api"
                } else {
                    "Bearer admin"
                };
                let (status, body) = if auth == want {
                    ("200 OK", r#"{"data": [{"id": "m"}], "success": true}"#)
                } else {
                    ("401 Unauthorized", r#"{"error": {"message": "bad key"}}"#)
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    #[test]
    fn engines_send_the_api_key_and_the_admin_key_on_weight_loads() {
        let (url, seen) = keyed_server();
        let mut cfg = RolloutConfig {
            base_urls: vec![url.clone()],
            retries: 0,
            timeout_s: 10.0,
            ..RolloutConfig::default()
        };
        // No key: the 401 says which setting is missing (the environment may not set one).
        if std::env::var("REINFORGE_API_KEY").is_err() {
            let err = format!("{:#}", RemoteEngines::connect(&cfg).err().unwrap());
            assert!(
                err.contains("401") && err.contains("rollout.api_key"),
                "{err}"
            );
        }
        cfg.api_key = "api".into();
        cfg.admin_key = "admin".into();
        let engines = RemoteEngines::connect(&cfg).unwrap();
        assert_eq!(engines.model, "m");
        engines
            .post(
                &url,
                "/update_weights_from_disk",
                &json!({"model_path": "x"}),
            )
            .unwrap();
        let seen = seen.lock().unwrap();
        assert!(
            seen.contains(&"/v1/models Bearer api".to_string()),
            "{seen:?}"
        );
        assert!(
            seen.contains(&"/update_weights_from_disk Bearer admin".to_string()),
            "{seen:?}"
        );
    }

    #[test]
    fn groups_stay_whole_and_shares_are_even() {
        let p = |x: i64| vec![1, x];
        let rows = vec![p(1), p(1), p(2), p(2), p(3), p(3)];
        assert_eq!(split_groups(&rows, 1), vec![0..6]);
        assert_eq!(split_groups(&rows, 2), vec![0..2, 2..6]);
        assert_eq!(split_groups(&rows, 3), vec![0..2, 2..4, 4..6]);
        assert_eq!(split_groups(&rows, 4), vec![0..0, 0..2, 2..4, 4..6]);
        assert_eq!(split_groups(&[], 2), vec![0..0, 0..0]);
    }

    #[test]
    fn answers_parse_from_token_ids_or_token_strings() {
        let resp = json!({"weight_version": "7", "choices": [
            {"index": 1, "finish_reason": "length", "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.5, -1.0]}},
            {"index": 0, "finish_reason": "stop", "token_ids": [9], "logprobs": {"tokens": ["x"], "token_logprobs": [-2.0]}}
        ]});
        let Parsed::Done(c) = parse_completions(&resp, 2).unwrap() else {
            panic!("aborted")
        };
        assert_eq!((c[0].tokens.clone(), c[0].truncated), (vec![9], false));
        assert_eq!((c[1].tokens.clone(), c[1].truncated), (vec![5, 6], true));
        assert_eq!(c[1].logprobs, vec![-0.5, -1.0]);
        assert_eq!(weight_version(&resp), Some(7));
        let aborted = json!({"choices": [{"index": 0, "finish_reason": "abort", "token_ids": [], "logprobs": {"token_logprobs": []}}]});
        assert!(matches!(
            parse_completions(&aborted, 1).unwrap(),
            Parsed::Aborted
        ));
        let short = json!({"choices": []});
        assert!(parse_completions(&short, 1).is_err());
        let bad = json!({"choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"tokens": ["abc"], "token_logprobs": [-1.0]}}]});
        assert!(format!("{:#}", parse_completions(&bad, 1).err().unwrap()).contains("token_id:N"));
    }
}
