//! `reinforge serve`'s policy routes over the scripted generator of the tests (no libtorch):
//! step `k` of a row emits `(prompt sum + k + shift) % vocab`, and `/update_weights_from_disk`
//! reads `shift` from `DIR/scripted.json`. With the llama fixture's tokenizer (the default) text
//! prompts, chat and text outputs work, so OpenAI clients can be checked against it
//! (`scripts/clients/openai_policy_client.py`).
//!
//! ```text
//! cargo run --release -p reinforge-serve --example scripted_policy -- --port 8000
//! ```

#[path = "../tests/common/scripted.rs"]
mod scripted;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Tokenizer directory (its tokenizer.json and chat template).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/hf/models/llama"))]
    model: PathBuf,
    #[arg(long, default_value = "scripted")]
    served_model_name: String,
    /// Vocabulary of the scripted model (the fixture tokenizer has 512 ids).
    #[arg(long, default_value_t = 512)]
    vocab: usize,
    /// Positions of the scripted model.
    #[arg(long, default_value_t = 256)]
    max_model_len: usize,
    /// Id that ends a row by default (the fixture's generation_config eos).
    #[arg(long, default_value_t = 2)]
    eos: i64,
    /// Sleep per decoding step, milliseconds (to watch batching and pauses).
    #[arg(long, default_value_t = 0)]
    step_delay_ms: u64,
    /// The server's --api-key (also REINFORGE_API_KEY).
    #[arg(long, env = "REINFORGE_API_KEY")]
    api_key: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let (generator, probe) = scripted::Scripted::new(a.vocab, a.max_model_len, vec![a.eos]);
    probe.set_delay(Duration::from_millis(a.step_delay_ms));
    let mut args = reinforge_serve::ServeArgs::defaults();
    args.host = a.host;
    args.port = a.port;
    args.no_sandbox = true;
    args.model = Some(a.model);
    args.served_model_name = Some(a.served_model_name);
    args.api_key = a.api_key;
    reinforge_serve::run_with_policy(
        &args,
        Some(Box::new(generator)),
        &reinforge_serve::no_models,
    )
}
