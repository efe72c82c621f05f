//! `reinforge serve`: the reward server, and with `--model` the policy behind the
//! OpenAI-compatible routes (and `--tinker` the Tinker API) of reinforge-serve, on
//! reinforge-backend's libtorch models.

use anyhow::Result;
use clap::Args;
use reinforge_backend::{TorchGenerator, TorchTinker};
use reinforge_serve::policy::backend::Generator;
use reinforge_torch::model::checkpoint::LoadOptions;

use super::args::parse_dtype;

/// `reinforge serve`: the server's own flags plus where the policy runs.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
  reinforge serve                                       rewards only (math) on 127.0.0.1:8000
  reinforge serve --model ckpt --port 8001 --threads 2  an OpenAI-compatible policy as well
  reinforge serve --model ckpt --port 8001 --tinker     + the Tinker training API (docs/tinker.md):
      tinker.ServiceClient(base_url='http://127.0.0.1:8001', api_key='tml-local')
  python -c \"import openai; c = openai.OpenAI(base_url='http://127.0.0.1:8001/v1', api_key='x'); \\
      print(c.completions.create(model='ckpt', prompt='2+2=', max_tokens=8).choices[0].text)\"
  As a rollout engine of `reinforge train`: [rollout] engine = \"openai\",
  base_urls = [\"http://127.0.0.1:8001\"] (docs/rollouts.md).")]
pub struct ServeCommand {
    #[command(flatten)]
    pub serve: reinforge_serve::ServeArgs,
    /// Device of the policy (--model): cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtype of the policy: f32, bf16 or f16 (default: f32 on CPU, bf16 on CUDA). A
    /// trainer pushing f32 weights needs f32 here for the checksums to agree.
    #[arg(long, value_parser = ["f32", "float32", "float", "bf16", "bfloat16", "f16", "float16", "half"])]
    pub dtype: Option<String>,
    /// CPU threads of libtorch (default: libtorch's own choice). Use the trainer's value for
    /// draws identical to its local sampler.
    #[arg(long, value_parser = super::args::count)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub tinker: super::tinker::TinkerArgs,
}

/// Runs `reinforge serve`: loads the policy when `--model` is given, then serves.
pub fn run(cmd: &ServeCommand) -> Result<()> {
    let models = &reinforge_recipes::scorers::load_scorer;
    let Some(dir) = &cmd.serve.model else {
        return reinforge_serve::run_with_policy(&cmd.serve, None, models);
    };
    if let Some(n) = cmd.threads {
        reinforge_torch::runtime::set_threads(n);
    }
    let mut opts = LoadOptions::for_device(reinforge_torch::runtime::resolve_device(
        &cmd.device,
        "--device",
    )?);
    if let Some(d) = &cmd.dtype {
        opts.kind = parse_dtype(d)?;
    }
    let (pad_id, eos) = reinforge_backend::tokens::pad_and_stop_ids(dir)?;
    let tinker = if cmd.tinker.tinker {
        let name = cmd.serve.served_model_name.clone().unwrap_or_else(|| {
            dir.file_name().map_or("reinforge-policy".into(), |n| {
                n.to_string_lossy().into_owned()
            })
        });
        let mut backend = TorchTinker::load(dir, name.clone(), opts, eos.clone())?;
        backend.max_packed_tokens = cmd.tinker.tinker_max_packed_tokens;
        let sampler: Box<dyn Generator> = Box::new(backend.sampler()?);
        let backend: Box<dyn reinforge_serve::tinker::TinkerBackend> = Box::new(backend);
        let config = cmd.tinker.config(name, cmd.serve.max_batch_rows);
        Some((config, backend, sampler))
    } else {
        None
    };
    let generator = TorchGenerator::load(dir, cmd.serve.lora.as_ref(), opts, pad_id, eos)?;
    reinforge_serve::run_with_backends(&cmd.serve, Some(Box::new(generator)), tinker, models)
}
