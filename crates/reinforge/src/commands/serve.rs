//! `reinforge serve --model DIR`: the policy behind the OpenAI-compatible routes of
//! reinforge-serve. [`TorchGenerator`] implements its `Generator` over the KV-cache sampler;
//! weight loads replace the whole policy (a new one is loaded, then swapped in), so a failed
//! load leaves the old weights serving.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use clap::Args;
use reinforge_hf::HfTokenizer;
use reinforge_serve::policy::backend::{
    Batch, Finish, Generator, PromptScore, Sequence, StepControl, StepToken, StepTokens,
};
use reinforge_torch::model::checkpoint::LoadOptions;
use reinforge_torch::model::logprobs::scored_positions;
use reinforge_torch::{generate_with, GenerateHooks, Policy, RowEnd, SamplingParams};

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
    // Pad and EOS ids from the tokenizer files when the checkpoint has them; a checkpoint
    // without (the toy model) serves token ids only, with the client's stop ids.
    let (pad_id, eos) = if dir.join("tokenizer.json").is_file() {
        let tok = HfTokenizer::from_dir(dir)
            .with_context(|| format!("loading the tokenizer in {}", dir.display()))?;
        let eos: Vec<i64> = tok.stop_token_ids().iter().map(|&t| t as i64).collect();
        let pad = tok.pad_token_id().or(tok.eos_token_id()).unwrap_or(0) as i64;
        (pad, eos)
    } else {
        (0, vec![])
    };
    let tinker = if cmd.tinker.tinker {
        let name = cmd.serve.served_model_name.clone().unwrap_or_else(|| {
            dir.file_name().map_or("reinforge-policy".into(), |n| {
                n.to_string_lossy().into_owned()
            })
        });
        let mut backend = super::tinker::TorchTinker::load(dir, name.clone(), opts, eos.clone())?;
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

/// A checkpoint served by the sampler.
pub struct TorchGenerator {
    policy: Policy,
    opts: LoadOptions,
    pad_id: i64,
    eos: Vec<i64>,
}

impl TorchGenerator {
    /// Loads `dir` with `opts`, folding in the LoRA adapter `lora` when given; `pad_id` and
    /// `eos` come from the checkpoint's tokenizer files.
    pub fn load(
        dir: &Path,
        lora: Option<&PathBuf>,
        opts: LoadOptions,
        pad_id: i64,
        eos: Vec<i64>,
    ) -> Result<Self> {
        let mut policy = Policy::load_with(dir, &opts)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        if let Some(adapter) = lora {
            policy
                .load_adapter(adapter)
                .with_context(|| format!("loading the LoRA adapter in {}", adapter.display()))?;
            policy.merge_lora()?;
        }
        Ok(Self {
            policy,
            opts,
            pad_id,
            eos,
        })
    }
}

impl TorchGenerator {
    /// With `prompt_logprobs`, every prompt token of the batch scored from the tokens before it
    /// (at the request's temperature; 1 for greedy requests), else nothing.
    fn prompt_scores(&self, batch: &Batch) -> Result<Vec<Vec<PromptScore>>> {
        let s = &batch.sampling;
        if s.prompt_logprobs == 0 {
            return Ok(vec![]);
        }
        let temperature = if s.temperature > 0.0 {
            s.temperature
        } else {
            1.0
        };
        batch
            .prompts
            .iter()
            .map(|p| {
                let scored = scored_positions(
                    &self.policy.model,
                    self.policy.device(),
                    p,
                    s.prompt_logprobs,
                    temperature,
                )?;
                Ok(scored
                    .into_iter()
                    .map(|x| PromptScore {
                        top: x.top,
                        actual: x.actual,
                    })
                    .collect())
            })
            .collect()
    }
}

impl Generator for TorchGenerator {
    fn generate(
        &mut self,
        batch: &Batch,
        on_step: &mut dyn FnMut(StepTokens) -> StepControl,
    ) -> Result<Vec<Sequence>> {
        let s = &batch.sampling;
        let params = SamplingParams {
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k.max(0),
            max_new_tokens: s.max_tokens,
            stop_tokens: s.stop_token_ids.clone(),
        };
        // The request's seed seeds torch as is (a trainer sends `seeds::torch_seed` of its
        // step seed, so the draw equals its local sampler's).
        if let Some(seed) = batch.seed {
            reinforge_torch::runtime::manual_seed(seed as i64);
        }
        // The sampler's step hook, translated to the server's types.
        let mut hook = |step: &[reinforge_torch::StepToken]| {
            let tokens: Vec<StepToken> = step
                .iter()
                .map(|t| StepToken {
                    row: t.row,
                    token: t.token,
                    logprob: t.logprob,
                    end: t.end.map(|e| match e {
                        RowEnd::Stop => Finish::Stop,
                        RowEnd::Length => Finish::Length,
                    }),
                })
                .collect();
            let c = on_step(&tokens);
            reinforge_torch::StepControl {
                stop: c.stop,
                admit: c.admit,
                end: vec![],
            }
        };
        let mut hooks = GenerateHooks {
            top_logprobs: s.top_logprobs,
            on_step: Some(&mut hook),
            row_rng: None,
        };
        let completions = generate_with(
            &self.policy.model,
            &batch.prompts,
            &params,
            self.pad_id,
            self.policy.device(),
            &mut hooks,
        );
        let scores = self.prompt_scores(batch)?;
        Ok(completions
            .into_iter()
            .enumerate()
            .map(|(i, c)| Sequence {
                prompt: scores.get(i).cloned().unwrap_or_default(),
                finish: if c.aborted {
                    Finish::Abort
                } else if c.truncated {
                    Finish::Length
                } else {
                    Finish::Stop
                },
                tokens: c.tokens,
                logprobs: c.logprobs,
                top: c.top,
            })
            .collect())
    }

    fn load_weights(&mut self, dir: &Path) -> Result<()> {
        let new = Policy::load_with(dir, &self.opts)
            .with_context(|| format!("loading the weights in {}", dir.display()))?;
        ensure!(
            new.model.config() == self.policy.model.config(),
            "{}: config.json describes another model than the one served (weights can be replaced, not the architecture)",
            dir.display()
        );
        self.policy = new;
        Ok(())
    }

    fn checksum(&self) -> String {
        self.policy.weights_checksum()
    }

    fn max_model_len(&self) -> usize {
        self.policy.model.config().max_position_embeddings
    }

    fn vocab_size(&self) -> usize {
        self.policy.model.config().vocab_size
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.eos.clone()
    }
}
