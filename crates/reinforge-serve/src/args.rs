//! `reinforge serve` options.

use std::path::PathBuf;
use std::time::Duration;

use reinforge_sandbox::Limits;

/// Serve rewards and sandboxed code execution over HTTP.
///
/// Endpoints: `POST /get_reward` (OpenRLHF's `--remote_rm_url` format), `POST /run_code`
/// (SandboxFusion's), `POST /v1/verify` (batches of math checks), `GET /health`, `GET /metrics`
/// (Prometheus text). Work requests beyond `--max-concurrency` wait in a queue of
/// `--max-queue`; beyond that the server answers 503 with `Retry-After`. SIGINT/SIGTERM stop
/// accepting connections and finish the requests in flight.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
EXAMPLES:
  reinforge serve                                   math rewards on 127.0.0.1:8000
  reinforge serve --reward crates/reinforge-reward/specs/math_format_overlong.toml --port 5000
  OpenRLHF: --remote_rm_url http://HOST:5000/get_reward
  SandboxFusion clients: base URL http://HOST:8000 (POST /run_code)")]
pub struct ServeArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0: any free port, printed at start).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Reward specification (TOML) for /get_reward. Default: math only (1 if the response's
    /// answer is equivalent to the label, else 0).
    #[arg(long, value_name = "FILE")]
    pub reward: Option<PathBuf>,
    /// Work requests processed at once (reward, verify, run_code); 0: 4 x CPU cores.
    #[arg(long, default_value_t = 0)]
    pub max_concurrency: usize,
    /// Work requests waiting for a slot; more get 503 + Retry-After.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// Largest request body, bytes (413 beyond).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
    /// Threads that score and verify in parallel; 0: the number of CPU cores.
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Disable code execution (/run_code answers 503; code_tests rewards are refused).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Sandbox cap: wall-clock seconds of one run (requests may ask for less).
    #[arg(long, default_value_t = 60.0)]
    pub sandbox_wall_time_s: f64,
    /// Sandbox cap: memory of one run, MiB.
    #[arg(long, default_value_t = 2048)]
    pub sandbox_memory_mb: u64,
    /// Sandbox cap: processes/threads of one run.
    #[arg(long, default_value_t = 64)]
    pub sandbox_max_processes: u32,
    /// Sandbox cap: bytes of stdout and of stderr kept (SandboxFusion keeps 1 MiB).
    #[arg(long, default_value_t = 1 << 20)]
    pub sandbox_max_output_bytes: usize,
}

impl ServeArgs {
    /// Defaults, as the command line gives them (for tests and embedding).
    pub fn defaults() -> Self {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            a: ServeArgs,
        }
        Wrap::parse_from(["serve"]).a
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

    /// The sandbox's server-wide caps.
    pub fn sandbox_caps(&self) -> anyhow::Result<Limits> {
        let wall = self.sandbox_wall_time_s;
        if !(wall.is_finite() && wall > 0.0) {
            anyhow::bail!("--sandbox-wall-time-s must be a positive number of seconds");
        }
        Ok(Limits {
            wall_time: Duration::from_secs_f64(wall),
            cpu_time: Duration::from_secs_f64(wall),
            memory_bytes: self.sandbox_memory_mb << 20,
            max_processes: self.sandbox_max_processes,
            max_file_bytes: 64 << 20,
            max_output_bytes: self.sandbox_max_output_bytes,
        })
    }
}
