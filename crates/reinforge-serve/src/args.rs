//! `reinforge serve` options.

use std::path::PathBuf;
use std::time::Duration;

use reinforge_sandbox::Limits;

/// Serve rewards and sandboxed code execution over HTTP; with --model, also a policy over the
/// OpenAI API.
///
/// Endpoints: `POST /get_reward` (OpenRLHF's `--remote_rm_url` format), `POST /run_code`
/// (SandboxFusion's), `POST /v1/verify` (batches of math checks), `GET /health`, `GET /metrics`
/// (Prometheus text). Reward and verify requests beyond `--max-concurrency` (/run_code beyond
/// `--sandbox-max-concurrency`) wait in a queue of `--max-queue`; beyond that the server answers
/// 503 with `Retry-After`. SIGINT/SIGTERM stop
/// accepting connections and finish the requests in flight.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(
    feature = "cli",
    command(after_help = "\
EXAMPLES:
  reinforge serve                                   math rewards on 127.0.0.1:8000
  reinforge serve --reward crates/reinforge-reward/specs/math_format_overlong.toml --port 5000
  reinforge serve --model DIR --port 8000          + /v1/completions, /v1/chat/completions, weight updates
  OpenRLHF: --remote_rm_url http://HOST:5000/get_reward
  SandboxFusion clients: base URL http://HOST:8000 (POST /run_code)")
)]
pub struct ServeArgs {
    /// Address to bind.
    #[cfg_attr(feature = "cli", arg(long, default_value = "127.0.0.1"))]
    pub host: String,
    /// Port to bind (0: any free port, printed at start).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 8000))]
    pub port: u16,
    /// Reward specification (TOML) for /get_reward. Default: math only (1 if the response's
    /// answer is equivalent to the label, else 0).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub reward: Option<PathBuf>,
    /// Reward and verify requests processed at once; 0: 4 x CPU cores.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub max_concurrency: usize,
    /// /run_code requests processed at once, in slots of their own (long sandbox runs never
    /// delay a reward or a verification); 0: as --max-concurrency.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub sandbox_max_concurrency: usize,
    /// Work one /v1/verify or /get_reward request may ask for: the bytes of its texts (gold and
    /// pred; query, prompt and label), each row counted as at least 256 bytes, so that both
    /// size and rows are bounded (413 beyond).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 32 << 20))]
    pub max_verify_bytes: usize,
    /// Work requests waiting for a slot; more get 503 + Retry-After.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1024))]
    pub max_queue: usize,
    /// Largest request body, bytes (413 beyond).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 64 << 20))]
    pub max_body_bytes: usize,
    /// Threads that score and verify in parallel; 0: the number of CPU cores.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub workers: usize,
    /// Disable code execution (/run_code answers 503; code_tests rewards are refused).
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_sandbox: bool,
    /// Sandbox cap: wall-clock seconds of one run (requests may ask for less).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 60.0))]
    pub sandbox_wall_time_s: f64,
    /// Sandbox cap: memory of one run, MiB, all its processes together. Where /sys/fs/cgroup is
    /// a writable cgroup v2 hierarchy (a root server), each run gets a cgroup with this
    /// memory.max (with pids.max and one CPU of cpu.max); otherwise (cgroup v1, read-only, not
    /// root) a watchdog sums the processes' resident memory every 20 ms and kills the run
    /// beyond it. The startup log says which applies. Each process's address space is capped
    /// at it too (RLIMIT_AS). The run's CPU time (all processes) is capped at its wall time.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 2048))]
    pub sandbox_memory_mb: u64,
    /// Sandbox cap: processes/threads of one run.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 64))]
    pub sandbox_max_processes: u32,
    /// Sandbox cap: bytes of stdout and of stderr kept (SandboxFusion keeps 1 MiB).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1 << 20))]
    pub sandbox_max_output_bytes: usize,
    /// Serve this Hugging Face checkpoint as an OpenAI-compatible policy (/v1/completions,
    /// /v1/chat/completions, weight updates). Its tokenizer.json, when present, gives text
    /// prompts, chat and text outputs; without one only token-id prompts are accepted.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub model: Option<PathBuf>,
    /// A LoRA adapter (PEFT directory) applied to --model.
    #[cfg_attr(feature = "cli", arg(long, value_name = "ADAPTER", requires = "model"))]
    pub lora: Option<PathBuf>,
    /// The model name clients send (`model` field) and /v1/models lists. Default: the file
    /// name of --model.
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME"))]
    pub served_model_name: Option<String>,
    /// Rows (prompts x n) of different requests merged into one batch at most; one request is
    /// always decoded whole, as one batch (a trainer's step, a seeded draw), whatever its size.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 64))]
    pub max_batch_rows: usize,
    /// Generation requests waiting for the model; more get 503 + Retry-After.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1024))]
    pub max_queued_requests: usize,
    /// The weight version reported for the weights loaded at start (responses carry it).
    #[cfg_attr(feature = "cli", arg(long, default_value = "0"))]
    pub weight_version: String,
    /// Require `Authorization: Bearer KEY` on every route but /health (OpenAI's convention;
    /// clients: `api_key=KEY`). Also read from REINFORGE_API_KEY. See docs/security.md.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "KEY",
            env = "REINFORGE_API_KEY",
            hide_env_values = true
        )
    )]
    pub api_key: Option<String>,
    /// A separate key for the admin routes: weight loads, pause/resume (which abort requests)
    /// and /metrics. Without it the API key guards them too. Also read from
    /// REINFORGE_ADMIN_KEY.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_name = "KEY",
            env = "REINFORGE_ADMIN_KEY",
            hide_env_values = true
        )
    )]
    pub admin_key: Option<String>,
    /// Serve a non-loopback address (--host) without --api-key: anyone who reaches the port
    /// may generate, run code, load weights and pause. Refused without this flag.
    #[cfg_attr(feature = "cli", arg(long))]
    pub insecure_no_auth: bool,
    /// /update_weights_from_disk loads only directories inside DIR (symlinks resolved). Without
    /// it, loads from disk are refused unless the server is bound to a loopback address.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR"))]
    pub weights_root: Option<PathBuf>,
    /// Rows (prompts x n) of one generation request at most (400 beyond).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 4096))]
    pub max_request_rows: usize,
    /// Tokens one generation request may hold at most: the sum over its rows of prompt length
    /// plus max_tokens (400 beyond).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1 << 24))]
    pub max_request_tokens: usize,
    /// Log-prob alternatives one generation request may ask for at most: the sum over its
    /// rows of `max_tokens` x `logprobs` plus prompt length x `prompt_logprobs` (400 beyond).
    /// Each is an object in the response, so this bounds what a small request makes the
    /// server build.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1 << 20))]
    pub max_request_logprobs: usize,
    /// Seconds a client has to send a request's body once its headers are in (408 beyond); a
    /// work route's concurrency slot is taken only once the body is read.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 30.0))]
    pub body_read_timeout_s: f64,
    /// Seconds a connection has to send a request's headers, from when the server starts
    /// waiting for them (a new connection, or one kept alive after a response); the connection
    /// is closed beyond, so idle and slowloris connections cannot pile up before auth.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 30.0))]
    pub header_read_timeout_s: f64,
    /// Sandbox cap: files a run may return (`fetch_files` entries).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 64))]
    pub sandbox_max_fetch_files: usize,
    /// Sandbox cap: total bytes of the files a run returns.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 64 << 20))]
    pub sandbox_max_fetch_bytes: u64,
}

impl Default for ServeArgs {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8000,
            reward: None,
            max_concurrency: 0,
            sandbox_max_concurrency: 0,
            max_verify_bytes: 32 << 20,
            max_queue: 1024,
            max_body_bytes: 64 << 20,
            workers: 0,
            no_sandbox: false,
            sandbox_wall_time_s: 60.0,
            sandbox_memory_mb: 2048,
            sandbox_max_processes: 64,
            sandbox_max_output_bytes: 1 << 20,
            model: None,
            lora: None,
            served_model_name: None,
            max_batch_rows: 64,
            max_queued_requests: 1024,
            weight_version: "0".into(),
            api_key: None,
            admin_key: None,
            insecure_no_auth: false,
            weights_root: None,
            max_request_rows: 4096,
            max_request_tokens: 1 << 24,
            max_request_logprobs: 1 << 20,
            body_read_timeout_s: 30.0,
            header_read_timeout_s: 30.0,
            sandbox_max_fetch_files: 64,
            sandbox_max_fetch_bytes: 64 << 20,
        }
    }
}

impl ServeArgs {
    /// Defaults, the same as the command line's (for tests and embedding).
    pub fn defaults() -> Self {
        Self::default()
    }

    /// The number of scoring threads.
    pub fn worker_threads(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        }
    }

    /// The number of work requests processed at once.
    pub fn concurrency(&self) -> usize {
        if self.max_concurrency > 0 {
            self.max_concurrency
        } else {
            4 * std::thread::available_parallelism().map_or(2, |n| n.get())
        }
    }

    /// The number of /run_code requests processed at once.
    pub fn sandbox_concurrency(&self) -> usize {
        match self.sandbox_max_concurrency {
            0 => self.concurrency(),
            n => n,
        }
    }

    /// The keys of [`crate::auth`]; an empty key is an error (it would match an empty bearer).
    pub fn keys(&self) -> anyhow::Result<crate::auth::Keys> {
        let check = |k: &Option<String>, flag: &str| -> anyhow::Result<Option<String>> {
            match k {
                Some(k) if k.is_empty() => anyhow::bail!("{flag} must not be empty"),
                Some(k) if !k.bytes().all(|b| b.is_ascii_graphic()) => anyhow::bail!(
                    "{flag} must be printable ASCII without spaces (it travels in an HTTP header)"
                ),
                k => Ok(k.clone()),
            }
        };
        Ok(crate::auth::Keys {
            api: check(&self.api_key, "--api-key")?,
            admin: check(&self.admin_key, "--admin-key")?,
        })
    }

    /// Refuses to serve the non-loopback address `ip` without --api-key, unless
    /// --insecure-no-auth.
    pub fn check_exposure(&self, ip: std::net::IpAddr) -> anyhow::Result<()> {
        if ip.is_loopback() || self.api_key.is_some() || self.insecure_no_auth {
            return Ok(());
        }
        anyhow::bail!(
            "--host {} is reachable from other machines and no --api-key (or REINFORGE_API_KEY) \
             is set: anyone who reaches the port could generate, run code, load weights and \
             pause. Set a key (and --admin-key, --weights-root; docs/security.md), or pass \
             --insecure-no-auth on a trusted network",
            ip
        )
    }

    /// The body-read timeout; an error names the flag.
    pub fn body_read_timeout(&self) -> anyhow::Result<Duration> {
        seconds("--body-read-timeout-s", self.body_read_timeout_s)
    }

    /// The header-read timeout; an error names the flag.
    pub fn header_read_timeout(&self) -> anyhow::Result<Duration> {
        seconds("--header-read-timeout-s", self.header_read_timeout_s)
    }

    /// The sandbox's server-wide caps; an error names the flag out of range.
    pub fn sandbox_caps(&self) -> anyhow::Result<Limits> {
        let wall = self.sandbox_wall_time_s;
        // Duration::from_secs_f64 panics past ~u64::MAX seconds: a year is plenty.
        if !(wall.is_finite() && wall > 0.0 && wall <= 365.0 * 86_400.0) {
            anyhow::bail!(
                "--sandbox-wall-time-s must be a positive number of seconds (at most a year), got {wall}"
            );
        }
        let memory_bytes = self
            .sandbox_memory_mb
            .checked_mul(1 << 20)
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--sandbox-memory-mb must be at least 1 and fit in 64 bits as bytes, got {}",
                    self.sandbox_memory_mb
                )
            })?;
        if self.sandbox_max_processes == 0 {
            anyhow::bail!("--sandbox-max-processes must be at least 1, got 0");
        }
        Ok(Limits {
            wall_time: Duration::from_secs_f64(wall),
            cpu_time: Duration::from_secs_f64(wall),
            memory_bytes,
            max_processes: self.sandbox_max_processes,
            max_file_bytes: 64 << 20,
            max_output_bytes: self.sandbox_max_output_bytes,
        })
    }
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use super::ServeArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ServeArgs,
    }

    #[test]
    fn command_line_defaults_are_the_default() {
        assert_eq!(Cli::parse_from(["serve"]).a, ServeArgs::default());
    }

    #[test]
    fn out_of_range_caps_name_the_flag() {
        let err = |f: fn(&mut ServeArgs)| {
            let mut a = ServeArgs::default();
            f(&mut a);
            a.sandbox_caps().unwrap_err().to_string()
        };
        assert!(err(|a| a.sandbox_wall_time_s = f64::NAN).contains("--sandbox-wall-time-s"));
        assert!(err(|a| a.sandbox_wall_time_s = 1e300).contains("--sandbox-wall-time-s"));
        assert!(err(|a| a.sandbox_memory_mb = u64::MAX).contains("--sandbox-memory-mb"));
        assert!(err(|a| a.sandbox_max_processes = 0).contains("--sandbox-max-processes"));
        assert!(ServeArgs::default().sandbox_caps().is_ok());
    }
}

/// `t` seconds of flag `flag` as a duration, in (0, 86400].
fn seconds(flag: &str, t: f64) -> anyhow::Result<Duration> {
    if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
        anyhow::bail!("{flag} must be in (0, 86400] seconds, got {t}");
    }
    Ok(Duration::from_secs_f64(t))
}
