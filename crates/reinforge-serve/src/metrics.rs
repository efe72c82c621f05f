//! Prometheus metrics, in a registry owned by one server (several servers in one process, as
//! in the tests, do not share counters). The `prometheus` crate (TiKV's) does the text format.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

use crate::AppState;

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    /// `reinforge_http_requests_total{route, status}`.
    pub requests: IntCounterVec,
    /// `reinforge_http_request_duration_seconds{route}`.
    pub latency: HistogramVec,
    /// `reinforge_http_requests_in_flight`: work requests being processed.
    pub in_flight: IntGauge,
    /// `reinforge_http_requests_queued`: work requests waiting for a slot.
    pub queued: IntGauge,
    /// `reinforge_rewards_computed_total`: samples scored by /get_reward.
    pub rewards: IntCounter,
    /// `reinforge_reward_prompt_mismatch_total`: queries that did not contain their prompt
    /// (the whole query was scored as the response).
    pub prompt_mismatch: IntCounter,
    /// `reinforge_verify_checks_total{status}`: /v1/verify verdicts.
    pub checks: IntCounterVec,
    /// `reinforge_sandbox_runs_total{status}`: /run_code outcomes (SandboxFusion's status).
    pub sandbox_runs: IntCounterVec,
    /// The policy server's metrics (zero when no model is served).
    pub policy: PolicyMetrics,
    /// The Tinker sampling engine's (`reinforge_tinker_sampler_batch_rows`, ...; zero without
    /// `--tinker`).
    pub tinker_sampler: PolicyMetrics,
}

/// Counters of the OpenAI-compatible policy routes (cheap to clone: the same series) ([`crate::policy`]).
#[derive(Clone)]
pub struct PolicyMetrics {
    /// `reinforge_policy_requests_total{endpoint, finish}`: generation requests answered,
    /// by endpoint (`completions`, `chat`) and outcome (`ok`, `aborted`, `error`).
    pub requests: IntCounterVec,
    /// `reinforge_policy_prompt_tokens_total`.
    pub prompt_tokens: IntCounter,
    /// `reinforge_policy_generated_tokens_total`: completion tokens returned.
    pub generated_tokens: IntCounter,
    /// `reinforge_policy_batch_rows`: rows of each decoded batch (its count is the number of
    /// batches).
    pub batch_rows: Histogram,
    /// `reinforge_policy_queue_depth`: requests waiting for the model.
    pub queue_depth: IntGauge,
    /// `reinforge_policy_weight_loads_total{status}`: `ok` or `error`.
    pub weight_loads: IntCounterVec,
}

impl PolicyMetrics {
    /// The series of one batching engine, named `<prefix>_requests_total`, ...:
    /// `reinforge_policy` for the OpenAI routes, `reinforge_tinker_sampler` for the Tinker
    /// sampling engine.
    fn new(registry: &Registry, prefix: &str) -> Self {
        let name = |n: &str| format!("{prefix}_{n}");
        let requests = IntCounterVec::new(
            Opts::new(
                name("requests_total"),
                "policy generation requests by endpoint and outcome",
            ),
            &["endpoint", "outcome"],
        )
        .unwrap();
        let prompt_tokens = IntCounter::new(
            name("prompt_tokens_total"),
            "prompt tokens of policy requests",
        )
        .unwrap();
        let generated_tokens = IntCounter::new(
            name("generated_tokens_total"),
            "completion tokens returned by the policy",
        )
        .unwrap();
        let batch_rows = Histogram::with_opts(
            HistogramOpts::new(name("batch_rows"), "rows of each decoded batch")
                .buckets(exponential_buckets(1.0, 2.0, 11).unwrap()),
        )
        .unwrap();
        let queue_depth =
            IntGauge::new(name("queue_depth"), "policy requests waiting for the model").unwrap();
        let weight_loads = IntCounterVec::new(
            Opts::new(name("weight_loads_total"), "weight loads by status"),
            &["status"],
        )
        .unwrap();
        for c in [&requests, &weight_loads] {
            registry.register(Box::new(c.clone())).unwrap();
        }
        for c in [&prompt_tokens, &generated_tokens] {
            registry.register(Box::new(c.clone())).unwrap();
        }
        registry.register(Box::new(batch_rows.clone())).unwrap();
        registry.register(Box::new(queue_depth.clone())).unwrap();
        PolicyMetrics {
            requests,
            prompt_tokens,
            generated_tokens,
            batch_rows,
            queue_depth,
            weight_loads,
        }
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "reinforge_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["route", "status"],
        )
        .unwrap();
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "reinforge_http_request_duration_seconds",
                "HTTP request latency by route",
            )
            .buckets(exponential_buckets(0.0001, 2.0, 20).unwrap()),
            &["route"],
        )
        .unwrap();
        let in_flight = IntGauge::new(
            "reinforge_http_requests_in_flight",
            "work requests being processed",
        )
        .unwrap();
        let queued = IntGauge::new(
            "reinforge_http_requests_queued",
            "work requests waiting for a slot",
        )
        .unwrap();
        let rewards = IntCounter::new(
            "reinforge_rewards_computed_total",
            "samples scored by /get_reward",
        )
        .unwrap();
        let prompt_mismatch = IntCounter::new(
            "reinforge_reward_prompt_mismatch_total",
            "queries that did not contain their prompt",
        )
        .unwrap();
        let checks = IntCounterVec::new(
            Opts::new("reinforge_verify_checks_total", "math checks by verdict"),
            &["status"],
        )
        .unwrap();
        let sandbox_runs = IntCounterVec::new(
            Opts::new("reinforge_sandbox_runs_total", "sandbox runs by status"),
            &["status"],
        )
        .unwrap();
        for c in [&requests, &checks, &sandbox_runs] {
            registry.register(Box::new(c.clone())).unwrap();
        }
        registry.register(Box::new(latency.clone())).unwrap();
        for g in [&in_flight, &queued] {
            registry.register(Box::new(g.clone())).unwrap();
        }
        for c in [&rewards, &prompt_mismatch] {
            registry.register(Box::new(c.clone())).unwrap();
        }
        let policy = PolicyMetrics::new(&registry, "reinforge_policy");
        let tinker_sampler = PolicyMetrics::new(&registry, "reinforge_tinker_sampler");
        Metrics {
            policy,
            tinker_sampler,
            registry,
            requests,
            latency,
            in_flight,
            queued,
            rewards,
            prompt_mismatch,
            checks,
            sandbox_runs,
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut buf = vec![];
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Middleware: counts every request by route and status and times it. Unknown paths share
/// the route label `unmatched`, so label cardinality stays bounded.
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    let t = Instant::now();
    let resp = next.run(req).await;
    let m = &state.metrics;
    m.latency
        .with_label_values(&[route.as_str()])
        .observe(t.elapsed().as_secs_f64());
    m.requests
        .with_label_values(&[route.as_str(), resp.status().as_str()])
        .inc();
    resp
}
