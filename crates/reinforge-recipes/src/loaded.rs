//! A checkpoint directory loaded as a policy plus its tokenizer, and prompt encoding.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reinforge_hf::{ChatOptions, HfTokenizer, ImageProcessor};
use reinforge_tasks::data::{Message, Prompt};
use reinforge_torch::model::checkpoint::LoadOptions;
use reinforge_torch::{Device, Policy};

/// How a dataset prompt becomes the model's input text.
#[derive(Debug, Clone, Default)]
pub struct PromptStyle {
    /// Use the text as is (plus the tokenizer's BOS when it adds one) instead of the chat
    /// template. Message prompts cannot be raw.
    pub raw: bool,
    /// A system message put first when the conversation has none.
    pub system: Option<String>,
}

/// A policy and the tokenizer from the same directory.
pub struct LoadedModel {
    pub policy: Policy,
    pub tokenizer: HfTokenizer,
    pub device: Device,
    /// The image processor (`preprocessor_config.json`) of a vision-language checkpoint; `None`
    /// for a text-only model (or a VL one without the file, which then takes no images).
    pub images: Option<ImageProcessor>,
}

/// Which checkpoint to load and how: the library side of the binary's `--model`, `--device`,
/// `--dtype`, `--autocast-bf16` and `--threads` (the device already resolved and checked).
#[derive(Debug, Clone)]
pub struct ModelSource {
    /// The Hugging Face checkpoint directory.
    pub dir: PathBuf,
    pub options: LoadOptions,
    /// CPU threads of libtorch (`None`: libtorch's own choice).
    pub threads: Option<usize>,
}

impl ModelSource {
    /// Sets the thread count (when given), then loads the model and its tokenizer.
    pub fn load(&self) -> Result<LoadedModel> {
        if let Some(n) = self.threads {
            reinforge_torch::runtime::set_threads(n);
        }
        LoadedModel::load(&self.dir, &self.options)
    }
}

impl LoadedModel {
    /// Loads `config.json`, the weights and the tokenizer files of `dir` with `opts`.
    pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Self> {
        refuse_gguf_only(dir)?;
        let policy = Policy::load_with(dir, opts)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        let tokenizer = HfTokenizer::from_dir(dir)
            .with_context(|| format!("loading the tokenizer in {}", dir.display()))?;
        let vocab = policy.model.config().vocab_size;
        if tokenizer.vocab_size() > vocab {
            bail!(
                "{}: the tokenizer has {} tokens but config.json vocab_size is {vocab}",
                dir.display(),
                tokenizer.vocab_size()
            );
        }
        let vision = policy.model.config().vision.is_some();
        let preprocessor = dir.join("preprocessor_config.json");
        let images = if vision && preprocessor.exists() {
            Some(
                ImageProcessor::from_dir(dir)
                    .with_context(|| format!("loading the image processor in {}", dir.display()))?,
            )
        } else {
            None
        };
        Ok(Self {
            policy,
            tokenizer,
            device: opts.device,
            images,
        })
    }

    /// Token id used to pad batches: the tokenizer's pad, else its EOS, else 0. Padding is
    /// masked out, so any id works; a real one keeps embeddings lookups in range.
    pub fn pad_id(&self) -> i64 {
        self.tokenizer
            .pad_token_id()
            .or(self.tokenizer.eos_token_id())
            .unwrap_or(0) as i64
    }

    /// The longest sequence (prompt plus completion) the model has positions for.
    pub fn max_positions(&self) -> usize {
        self.policy.model.config().max_position_embeddings
    }

    /// Ids that end a completion: generation_config's EOS ids and the tokenizer's EOS.
    pub fn stop_ids(&self) -> Vec<i64> {
        self.tokenizer
            .stop_token_ids()
            .iter()
            .map(|&t| t as i64)
            .collect()
    }

    /// The rendered prompt text and its ids ([`encode_prompt`] with this model's tokenizer).
    pub fn encode_prompt(
        &self,
        prompt: &Prompt,
        style: &PromptStyle,
    ) -> Result<(String, Vec<i64>)> {
        encode_prompt(&self.tokenizer, prompt, style)
    }

    /// The conversation a chat prompt renders: the system message of `style` (when the
    /// prompt has none) and the prompt's messages. Raw prompts have none (an error).
    pub fn messages(&self, prompt: &Prompt, style: &PromptStyle) -> Result<Vec<Message>> {
        if style.raw {
            bail!("multi-turn episodes need the chat template; drop --raw");
        }
        let messages = match prompt {
            Prompt::Text(t) => vec![user(t)],
            Prompt::Messages(m) => m.clone(),
        };
        Ok(with_system(&messages, style))
    }

    /// Decodes completion ids to text, dropping special tokens (the stop token included).
    pub fn decode(&self, ids: &[i64]) -> Result<String> {
        let ids: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
        Ok(self.tokenizer.decode(&ids, true)?)
    }
}

/// The rendered prompt text and its ids. Chat prompts end with the assistant header
/// (`add_generation_prompt`), as TRL and verl build RL prompts; raw text (or a tokenizer
/// without a chat template) is tokenised as is, with the tokenizer's special tokens.
pub fn encode_prompt(
    tokenizer: &HfTokenizer,
    prompt: &Prompt,
    style: &PromptStyle,
) -> Result<(String, Vec<i64>)> {
    let has_template = tokenizer.chat_template(None, false).is_ok();
    let text = match prompt {
        Prompt::Text(t) if style.raw || !has_template => {
            let ids = tokenizer.encode(t, true)?;
            return Ok((t.clone(), ids.into_iter().map(i64::from).collect()));
        }
        Prompt::Text(t) => render(tokenizer, &[user(t)], style)?,
        Prompt::Messages(_) if style.raw => {
            bail!("a `messages` prompt needs the chat template; drop --raw")
        }
        Prompt::Messages(m) => render(tokenizer, m, style)?,
    };
    let ids = tokenizer.encode(&text, false)?;
    Ok((text, ids.into_iter().map(i64::from).collect()))
}

/// `messages` (with `style`'s system message) rendered with the generation prompt.
fn render(tokenizer: &HfTokenizer, messages: &[Message], style: &PromptStyle) -> Result<String> {
    let all = with_system(messages, style);
    let opts = ChatOptions {
        add_generation_prompt: true,
        ..Default::default()
    };
    Ok(tokenizer.apply_chat_template(&all, &opts)?)
}

/// `messages` with `style`'s system message first when they have none.
fn with_system(messages: &[Message], style: &PromptStyle) -> Vec<Message> {
    let mut all = Vec::with_capacity(messages.len() + 1);
    if let Some(sys) = &style.system {
        if messages.first().is_none_or(|m| m.role != "system") {
            all.push(Message {
                role: "system".into(),
                content: sys.clone().into(),
            });
        }
    }
    all.extend_from_slice(messages);
    all
}

fn user(text: &str) -> Message {
    Message {
        role: "user".into(),
        content: text.into(),
    }
}

/// A directory holding a GGUF file but no `config.json` is a llama.cpp-style checkpoint:
/// name it and the conversion, instead of a bare "No such file" for config.json.
fn refuse_gguf_only(dir: &Path) -> Result<()> {
    if dir.join("config.json").exists() {
        return Ok(());
    }
    let gguf = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        });
    if let Some(file) = gguf {
        bail!(
            "{} holds a GGUF file ({}) but no config.json/model.safetensors: reinforge reads \
             Hugging Face checkpoints. Convert it with transformers (pip install transformers gguf; \
             AutoModelForCausalLM.from_pretrained(dir, gguf_file=name).save_pretrained(out)), \
             as scripts/convert_gguf.py does",
            dir.display(),
            file.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    Ok(())
}
