//! [`HfTokenizer`]: a checkpoint directory's tokenizer.json (through the `tokenizers` crate) together with its
//! tokenizer_config.json special tokens, chat templates and generation_config.json stop ids — what
//! transformers' `AutoTokenizer.from_pretrained(dir)` gives for a fast tokenizer (`TokenizersBackend`, 5.23).

use std::path::{Path, PathBuf};

use serde::Serialize;
use tokenizers::models::ModelWrapper;
use tokenizers::Tokenizer;

use crate::config::{TokenizerConfig, TOKENIZER_FILE};
use crate::error::{parse_json, read_text, HfError, Result};
use crate::generation::GenerationConfig;
use crate::template::{ChatOptions, ChatTemplate, ChatTemplates};

/// A token's byte range `(start, end)` in the encoded text.
pub type Offsets = (usize, usize);

/// A checkpoint's tokenizer with its special tokens and chat templates.
pub struct HfTokenizer {
    inner: Tokenizer,
    dir: PathBuf,
    config: TokenizerConfig,
    templates: ChatTemplates,
    generation: GenerationConfig,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    pad_id: Option<u32>,
    unk_id: Option<u32>,
    stop_ids: Vec<u32>,
    clean_up_spaces: bool,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("dir", &self.dir)
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.config.special)
            .field("templates", &self.templates)
            .finish()
    }
}

impl HfTokenizer {
    /// Loads `dir/tokenizer.json` and `dir/tokenizer_config.json` (both required), plus, when present,
    /// `special_tokens_map.json`, `chat_template.jinja`, `additional_chat_templates/` and
    /// `generation_config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let tok_path = dir.join(TOKENIZER_FILE);
        let inner: Tokenizer = parse_json(&tok_path, &read_text(&tok_path, "tokenizer file")?)?;
        let config = TokenizerConfig::from_dir(&dir)?;
        let generation = GenerationConfig::from_dir(&dir)?;
        let id_of = |field: &'static str, required: bool| -> Result<Option<u32>> {
            let Some(tok) = config.special.get(field) else {
                return Ok(None);
            };
            match inner.token_to_id(tok) {
                Some(id) => Ok(Some(id)),
                None if required => Err(HfError::Field {
                    path: config.path.clone(),
                    field: field.to_string(),
                    message: format!(
                        "token {tok:?} is not in the vocabulary of {}",
                        tok_path.display()
                    ),
                }),
                None => Ok(None),
            }
        };
        let bos_id = id_of("bos_token", true)?;
        let eos_id = id_of("eos_token", true)?;
        let pad_id = id_of("pad_token", true)?;
        let unk_id = id_of("unk_token", false)?;
        // Stop on every eos id of generation_config.json, and on the tokenizer's eos token too (chat checkpoints
        // end assistant turns with it; generation configs normally list it already).
        let mut stop_ids = generation.eos_token_ids.clone();
        if let Some(id) = eos_id {
            if !stop_ids.contains(&id) {
                stop_ids.push(id);
            }
        }
        let clean_up_spaces = flag(&config, "clean_up_tokenization_spaces")
            && (!matches!(inner.get_model(), ModelWrapper::BPE(_))
                || flag(
                    &config,
                    "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                ));
        let templates = ChatTemplates::new(config.templates.clone(), config.special.clone());
        Ok(Self {
            inner,
            dir,
            config,
            templates,
            generation,
            bos_id,
            eos_id,
            pad_id,
            unk_id,
            stop_ids,
            clean_up_spaces,
        })
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// tokenizer_config.json as read (special tokens, template sources, raw fields).
    pub fn config(&self) -> &TokenizerConfig {
        &self.config
    }

    /// generation_config.json with transformers' defaults.
    pub fn generation_config(&self) -> &GenerationConfig {
        &self.generation
    }

    /// Token ids of `text`; `add_special_tokens` applies the post-processor (e.g. a leading bos).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| self.tok_err(e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// [`HfTokenizer::encode`] with each token's byte range in `text` (the `tokenizers`
    /// crate's offsets; a token added by the post-processor has an empty range), so spans of
    /// the text (an assistant turn) can be mapped to tokens.
    pub fn encode_with_offsets(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<(Vec<u32>, Vec<Offsets>)> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| self.tok_err(e))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
    }

    /// The tokens (strings) of `text` without special tokens.
    pub fn tokenize(&self, text: &str) -> Result<Vec<String>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| self.tok_err(e))?;
        Ok(enc.get_tokens().to_vec())
    }

    /// Text of `ids`, as transformers' `decode` (including its optional space clean-up).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let text = self
            .inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| self.tok_err(e))?;
        Ok(if self.clean_up_spaces {
            clean_up_tokenization(&text)
        } else {
            text
        })
    }

    /// The id of a token (vocabulary or added token).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Vocabulary size including added tokens (Python's `len(tokenizer)`).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_id
    }

    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_id
    }

    pub fn pad_token_id(&self) -> Option<u32> {
        self.pad_id
    }

    pub fn unk_token_id(&self) -> Option<u32> {
        self.unk_id
    }

    /// Ids that end a completion: generation_config.json's `eos_token_id` (int or list) plus the tokenizer's eos.
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The checkpoint's chat templates.
    pub fn chat_templates(&self) -> &ChatTemplates {
        &self.templates
    }

    /// The template `apply_chat_template` would use: `name`, else `tool_use` when tools are given, else default.
    pub fn chat_template(&self, name: Option<&str>, with_tools: bool) -> Result<&ChatTemplate> {
        if self.templates.is_empty() {
            return Err(HfError::NoChatTemplate {
                dir: self.dir.clone(),
            });
        }
        self.templates.get(name, with_tools)
    }

    /// `apply_chat_template(messages, tokenize=False, ...)` with the default template.
    pub fn apply_chat_template<M: Serialize>(
        &self,
        messages: &[M],
        opts: &ChatOptions,
    ) -> Result<String> {
        self.chat_template(None, opts.tools.is_some())?
            .render(messages, opts)
    }

    /// `apply_chat_template(messages, tokenize=True, ...)`: the rendered text encoded without adding special
    /// tokens (the template writes them).
    pub fn encode_chat<M: Serialize>(
        &self,
        messages: &[M],
        opts: &ChatOptions,
    ) -> Result<Vec<u32>> {
        let text = self.apply_chat_template(messages, opts)?;
        self.encode(&text, false)
    }

    fn tok_err(&self, e: tokenizers::Error) -> HfError {
        HfError::Tokenizer {
            path: self.dir.join(TOKENIZER_FILE),
            message: e.to_string(),
        }
    }
}

fn flag(config: &TokenizerConfig, key: &str) -> bool {
    config
        .raw
        .get(key)
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

/// transformers' `clean_up_tokenization` (tokenization_utils_base.py): removes spaces before punctuation and
/// English contractions, for WordPiece-era tokenizers whose config asks for it.
fn clean_up_tokenization(text: &str) -> String {
    text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}

#[cfg(test)]
mod tests {
    #[test]
    fn clean_up_matches_transformers_replacements() {
        assert_eq!(
            super::clean_up_tokenization("it 's ok , is n't it ? yes !"),
            "it's ok, isn't it? yes!"
        );
    }
}
