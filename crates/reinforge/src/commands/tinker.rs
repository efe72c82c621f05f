//! The Tinker flags of `reinforge serve --model DIR --tinker` (the backend is
//! reinforge-backend's `TorchTinker`). `--tinker-max-models` bounds the models per session,
//! `--tinker-max-sessions`, `--tinker-max-full-models` and `--tinker-max-checkpoints` what all
//! clients together hold.

use std::path::PathBuf;

use clap::Args;

/// The Tinker flags of `reinforge serve`.
#[derive(Args, Debug, Clone)]
pub struct TinkerArgs {
    /// Also serve the Tinker training API (the `tinker` SDK's routes under /api/v1; base_url
    /// http://HOST:PORT) on --model: clients create LoRA or full training models on it, run
    /// forward_backward and optim_step, save weights and sample. docs/tinker.md.
    #[arg(long, requires = "model")]
    pub tinker: bool,
    /// Where the Tinker API writes checkpoints (tinker://<model_id>/weights/<name> is
    /// <DIR>/<model_id>/weights/<name>).
    #[arg(long, value_name = "DIR", default_value = "runs/tinker")]
    pub tinker_dir: PathBuf,
    /// Training models one Tinker session may hold at once (each is a copy of the base model).
    #[arg(long, default_value_t = 4, value_parser = super::args::count)]
    pub tinker_max_models: usize,
    /// Tinker sessions open at once, over all clients (more are answered 429 until one ends or
    /// stops its heartbeat).
    #[arg(long, default_value_t = 16, value_parser = super::args::count)]
    pub tinker_max_sessions: usize,
    /// Full fine-tuning models (a whole copy of the model with its optimiser state each) held
    /// at once over all sessions; LoRA models share the base and count per session only.
    #[arg(long, default_value_t = 2, value_parser = super::args::count)]
    pub tinker_max_full_models: usize,
    /// Checkpoints one training model may keep under --tinker-dir (save_weights and named
    /// sampler weights; saving over an existing name with overwrite=true adds none).
    #[arg(long, default_value_t = 64, value_parser = super::args::count)]
    pub tinker_max_checkpoints: usize,
    /// Requests one Tinker session may have queued at once (more are answered 429, which the
    /// SDK retries).
    #[arg(long, default_value_t = 256, value_parser = super::args::count)]
    pub tinker_max_pending: usize,
    /// Tokens of one packed forward pass of forward_backward: a request's data are
    /// concatenated padding-free into passes of at most this many tokens (a longer datum runs
    /// alone); 0 packs the whole request into one pass.
    #[arg(long, default_value_t = 4096)]
    pub tinker_max_packed_tokens: usize,
}

impl TinkerArgs {
    /// The server's Tinker configuration for the model named `base_model`, its sampling
    /// engine merging up to `max_batch_rows` rows of different requests.
    pub fn config(
        &self,
        base_model: String,
        max_batch_rows: usize,
    ) -> reinforge_serve::tinker::Config {
        reinforge_serve::tinker::Config {
            base_model,
            checkpoint_dir: self.tinker_dir.clone(),
            max_models_per_session: self.tinker_max_models,
            max_sessions: self.tinker_max_sessions,
            max_full_models: self.tinker_max_full_models,
            max_checkpoints_per_model: self.tinker_max_checkpoints,
            max_pending_per_session: self.tinker_max_pending,
            max_snapshots_per_model: 4,
            session_timeout: std::time::Duration::from_secs(300),
            max_batch_rows,
        }
    }
}
