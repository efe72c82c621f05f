//! Chat templates rendered with minijinja in the environment transformers 5.23 builds for them
//! (`transformers/utils/chat_template_utils.py`: `_cached_compile_jinja_template`, `render_jinja_template`;
//! `tokenization_utils_base.py`: `apply_chat_template`, `get_chat_template`):
//!
//! - `trim_blocks` and `lstrip_blocks` on, a single trailing newline dropped, no auto-escaping;
//! - `{% break %}` / `{% continue %}` (jinja2's `loopcontrols` extension);
//! - globals `raise_exception(msg)`, `strftime_now(fmt)` (local time), `namespace`, `dict`;
//! - a `tojson` filter that is Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//!   sort_keys=False)` (no HTML escaping), with those arguments in that order;
//! - Python's str/dict/list methods (`.strip()`, `.startswith()`, `.items()`, `.get()`, ...) through
//!   minijinja-contrib's pycompat callback, and Python's printing of `None`, booleans, floats and containers;
//! - variables: the named special tokens (`bos_token`, `eos_token`, ...) that are set, then caller keyword
//!   arguments, then `messages`, `tools`, `documents`, `add_generation_prompt`.
//!
//! Messages are normalised as `apply_chat_template` does: keys whose value is `None` are dropped, and a message's
//! reasoning (`reasoning_content`, `thinking` or `reasoning`) is copied to both `thinking` and
//! `reasoning_content`. Not supported: `continue_final_message`, `return_assistant_tokens_mask`
//! (`{% generation %}` blocks), `sanitize_control_tokens`.

use std::sync::OnceLock;

use indexmap::IndexMap;
use minijinja::value::{Kwargs, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;

use crate::config::{SpecialTokens, TemplateSource};
use crate::error::{HfError, Result};
use crate::pyfmt::{json_dumps, py_str, JsonOptions};

/// Inputs of one rendering besides the messages (the arguments of `apply_chat_template`).
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    /// Append the header that starts an assistant turn.
    pub add_generation_prompt: bool,
    /// Tool JSON schemas (a list), or `None`. Build with [`json_value`] to keep the file's key order.
    pub tools: Option<Value>,
    /// Retrieval documents (a list of dicts), or `None`.
    pub documents: Option<Value>,
    /// Extra template variables (transformers' `**kwargs`), e.g. `enable_thinking`; they override special tokens.
    pub extra: Vec<(String, Value)>,
}

/// Parses JSON text into a template value, keeping object key order (as Python's `json.loads` does), which
/// matters for what `tojson` and `.items()` produce.
pub fn json_value(text: &str) -> std::result::Result<Value, serde_json::Error> {
    serde_json::from_str(text)
}

/// Converts any serialisable value (messages, tools) into a template value, keeping struct field order.
pub fn to_value<T: Serialize>(value: T) -> Value {
    Value::from(minijinja::value::Serde(value))
}

/// One compiled chat template with the special tokens of its tokenizer.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Where the template came from; also its name in the environment and in error messages.
    origin: String,
    source: String,
    special: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source`; `origin` names it in errors (e.g. `chat_template.jinja`).
    pub fn new(source: &str, origin: &str, special: &SpecialTokens) -> Result<Self> {
        let mut env = environment();
        env.add_template_owned(origin.to_string(), source.to_string())
            .map_err(|e| HfError::template(origin, &e))?;
        Ok(Self {
            env,
            origin: origin.to_string(),
            source: source.to_string(),
            special: special.iter().map(|(n, t)| (n, t.to_string())).collect(),
        })
    }

    /// Where the template came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders one conversation. `messages` are any serialisable maps, e.g. `{role, content}` structs; field
    /// order is kept.
    pub fn render<M: Serialize>(&self, messages: &[M], opts: &ChatOptions) -> Result<String> {
        self.render_value(to_value(messages), opts)
    }

    /// [`render`](Self::render) for messages already converted to a template value (a list of maps).
    pub fn render_value(&self, messages: Value, opts: &ChatOptions) -> Result<String> {
        let messages = normalize_messages(&messages).map_err(|message| HfError::Template {
            template: self.origin.clone(),
            line: None,
            message,
        })?;
        let mut ctx: IndexMap<Value, Value> = IndexMap::new();
        for (name, tok) in &self.special {
            ctx.insert(Value::from(*name), Value::from(tok.as_str()));
        }
        for (k, v) in &opts.extra {
            ctx.insert(Value::from(k.as_str()), v.clone());
        }
        ctx.insert(Value::from("messages"), messages);
        ctx.insert(
            Value::from("tools"),
            opts.tools.clone().unwrap_or(Value::from(())),
        );
        ctx.insert(
            Value::from("documents"),
            opts.documents.clone().unwrap_or(Value::from(())),
        );
        ctx.insert(
            Value::from("add_generation_prompt"),
            Value::from(opts.add_generation_prompt),
        );
        let tmpl = self
            .env
            .get_template(&self.origin)
            .map_err(|e| HfError::template(&self.origin, &e))?;
        tmpl.render(Value::from(ctx))
            .map_err(|e| HfError::template(&self.origin, &e))
    }
}

/// The checkpoint's chat templates by name, compiled on first use (a broken template that is never used
/// does not stop the others from working, as in transformers).
pub struct ChatTemplates {
    entries: Vec<(TemplateSource, OnceLock<Compiled>)>,
    special: SpecialTokens,
}

/// A template compiled on first use, or its compile error (line, message).
type Compiled = std::result::Result<ChatTemplate, (Option<usize>, String)>;

impl std::fmt::Debug for ChatTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ChatTemplates {
    /// Templates from their sources (see [`crate::TokenizerConfig`]) and the tokenizer's special tokens.
    pub fn new(sources: Vec<TemplateSource>, special: SpecialTokens) -> Self {
        Self {
            entries: sources.into_iter().map(|s| (s, OnceLock::new())).collect(),
            special,
        }
    }

    /// Whether there is no template at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Template names (`default` for the single or default one).
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|(s, _)| s.name.as_str()).collect()
    }

    /// The template to use, chosen as `get_chat_template` chooses: the one named `name` if given; else the
    /// `tool_use` template when `with_tools` and it exists; else `default`; a lone template is its own default.
    pub fn get(&self, name: Option<&str>, with_tools: bool) -> Result<&ChatTemplate> {
        let find = |n: &str| self.entries.iter().position(|(s, _)| s.name == n);
        let idx = match name {
            Some(n) => find(n).ok_or_else(|| self.choice_error(n, "no template of that name"))?,
            None if self.entries.len() == 1 => 0,
            None => with_tools
                .then(|| find("tool_use"))
                .flatten()
                .or_else(|| find("default"))
                .ok_or_else(|| {
                    self.choice_error("(default)", "several templates and none named `default`")
                })?,
        };
        let (source, cell) = &self.entries[idx];
        let compiled = cell.get_or_init(|| {
            ChatTemplate::new(&source.source, &source.origin, &self.special).map_err(|e| match e {
                HfError::Template { line, message, .. } => (line, message),
                other => (None, other.to_string()),
            })
        });
        compiled
            .as_ref()
            .map_err(|(line, message)| HfError::Template {
                template: source.origin.clone(),
                line: *line,
                message: message.clone(),
            })
    }

    fn choice_error(&self, wanted: &str, message: &str) -> HfError {
        HfError::TemplateChoice {
            wanted: wanted.to_string(),
            message: message.to_string(),
            available: self.names().iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The minijinja environment matching transformers' jinja2 environment (see the module docs).
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    // jinja2's default: no escaping. minijinja would otherwise escape templates named *.html/*.json.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, _state, value| {
        out.write_str(&py_str(value))
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "formatting failed"))
    });
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env
}

/// transformers' `raise_exception`: raises `TemplateError(message)`.
fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `strftime_now`: `datetime.now().strftime(format)` in local time.
fn strftime_now(format: String) -> std::result::Result<String, Error> {
    let now = jiff::Zoned::now();
    jiff::fmt::strtime::format(format.as_str(), &now).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now({format:?}): {e}"),
        )
    })
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, args: Rest<ValueOrKwargs>) -> std::result::Result<String, Error> {
    const PARAMS: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    let mut positional: Vec<Value> = args.into_values();
    let mut named: Vec<(String, Value)> = Vec::new();
    if positional.last().is_some_and(|v| v.is_kwargs()) {
        let kw = Kwargs::try_from(positional.pop().expect("checked"))?;
        for key in kw.args() {
            named.push((key.to_string(), kw.get::<Value>(key)?));
        }
    }
    if positional.len() > PARAMS.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let mut slots: [Option<Value>; 4] = Default::default();
    for (i, v) in positional.into_iter().enumerate() {
        slots[i] = Some(v);
    }
    for (k, v) in named {
        let i = PARAMS.iter().position(|p| *p == k).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson() got an unexpected keyword argument '{k}'"),
            )
        })?;
        if slots[i].is_some() {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson() got multiple values for argument '{k}'"),
            ));
        }
        slots[i] = Some(v);
    }
    let [ensure_ascii, indent, separators, sort_keys] = slots;
    let present = |v: &Option<Value>| {
        v.as_ref()
            .filter(|v| !v.is_none() && !v.is_undefined())
            .cloned()
    };
    let opts = JsonOptions {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        indent: match present(&indent) {
            None => None,
            Some(v) if v.kind() == ValueKind::String => {
                Some(v.as_str().unwrap_or_default().to_string())
            }
            Some(v) => {
                let n = v.as_i64().ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: indent must be an int or a string",
                    )
                })?;
                Some(" ".repeat(n.max(0) as usize))
            }
        },
        separators: match present(&separators) {
            None => None,
            Some(v) => {
                let parts: Vec<Value> = v.try_iter()?.collect();
                match parts.as_slice() {
                    [a, b] if a.as_str().is_some() && b.as_str().is_some() => Some((
                        a.as_str().unwrap_or_default().to_string(),
                        b.as_str().unwrap_or_default().to_string(),
                    )),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "tojson: separators must be two strings",
                        ))
                    }
                }
            }
        },
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
    };
    json_dumps(&value, &opts)
}

/// Fields a message's reasoning may come under; the first is the one templates read
/// (`chat_template_utils.py`, `_REASONING_FIELDS`).
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Drops `None`-valued keys of each message and aliases its reasoning fields, as `apply_chat_template` and
/// `_alias_reasoning_fields` do before rendering.
fn normalize_messages(messages: &Value) -> std::result::Result<Value, String> {
    if messages.kind() != ValueKind::Seq {
        return Err(format!(
            "messages must be a list, found {}",
            messages.kind()
        ));
    }
    let mut out = Vec::new();
    for (i, m) in messages.try_iter().map_err(|e| e.to_string())?.enumerate() {
        if m.kind() != ValueKind::Map {
            return Err(format!("message {i} must be a dict, found {}", m.kind()));
        }
        let mut map: IndexMap<Value, Value> = IndexMap::new();
        for k in m.try_iter().map_err(|e| e.to_string())? {
            let v = m.get_item(&k).map_err(|e| e.to_string())?;
            if !v.is_none() {
                map.insert(k, v);
            }
        }
        let reasoning = REASONING_FIELDS
            .iter()
            .find_map(|f| map.get(&Value::from(*f)).cloned());
        if let Some(r) = reasoning {
            // {"thinking": r, **message, "reasoning_content": r}
            let mut aliased: IndexMap<Value, Value> = IndexMap::new();
            aliased.insert(Value::from("thinking"), r.clone());
            for (k, v) in map {
                aliased.insert(k, v);
            }
            aliased.insert(Value::from("reasoning_content"), r);
            map = aliased;
        }
        out.push(Value::from(map));
    }
    Ok(Value::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpl(src: &str) -> ChatTemplate {
        let special = SpecialTokens {
            eos_token: Some("</s>".into()),
            ..Default::default()
        };
        ChatTemplate::new(src, "test.jinja", &special).unwrap()
    }

    #[test]
    fn none_keys_are_dropped_and_reasoning_aliased() {
        let t = tmpl("{% for m in messages %}{{ m.keys() | list }}|{% endfor %}");
        let msgs = serde_json::json!([{"role": "user", "content": "hi", "name": null},
                                      {"role": "assistant", "content": "ok", "reasoning": "because"}]);
        let out = t
            .render_value(to_value(&msgs), &ChatOptions::default())
            .unwrap();
        // serde_json's map (no preserve_order) sorts keys; the aliasing puts `thinking` first and
        // `reasoning_content` last, as Python's dict literal does.
        assert_eq!(
            out,
            "['content', 'role']|['thinking', 'content', 'reasoning', 'role', 'reasoning_content']|"
        );
    }

    #[test]
    fn loop_controls_and_special_tokens() {
        let t = tmpl("{% for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}{{ eos_token }}{{ bos_token }}");
        let msgs = serde_json::json!([{"content": "a"}, {"content": "b"}]);
        let out = t
            .render_value(to_value(&msgs), &ChatOptions::default())
            .unwrap();
        assert_eq!(out, "a</s>");
    }

    #[test]
    fn tojson_arguments_follow_transformers_signature() {
        let t = tmpl("{{ tools | tojson }}|{{ tools | tojson(indent=1, separators=(',', ':')) }}|{{ tools | tojson(true) }}|{{ tools | tojson(sort_keys=true) }}");
        let opts = ChatOptions {
            tools: Some(json_value(r#"[{"z": "é", "a": 1.0}]"#).unwrap()),
            ..Default::default()
        };
        let out = t
            .render_value(Value::from(Vec::<Value>::new()), &opts)
            .unwrap();
        assert_eq!(
            out,
            "[{\"z\": \"é\", \"a\": 1.0}]|[\n {\n  \"z\":\"é\",\n  \"a\":1.0\n }\n]|[{\"z\": \"\\u00e9\", \"a\": 1.0}]|[{\"a\": 1.0, \"z\": \"é\"}]"
        );
    }

    #[test]
    fn raise_exception_names_template_and_line() {
        let t = tmpl("line one\n{{ raise_exception('bad role: ' ~ messages[0].role) }}");
        let msgs = serde_json::json!([{"role": "robot"}]);
        let err = t
            .render_value(to_value(&msgs), &ChatOptions::default())
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("test.jinja"), "{text}");
        assert!(text.contains("line 2"), "{text}");
        assert!(text.contains("bad role: robot"), "{text}");
    }

    #[test]
    fn strftime_now_formats_local_time() {
        let t = tmpl("{{ strftime_now('%Y') }}");
        let out = t
            .render_value(Value::from(Vec::<Value>::new()), &ChatOptions::default())
            .unwrap();
        let year: i32 = out.parse().unwrap();
        assert_eq!(year, jiff::Zoned::now().year() as i32);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let special = SpecialTokens::default();
        let err = ChatTemplate::new("ok\n{% if %}", "broken.jinja", &special).unwrap_err();
        match err {
            HfError::Template { template, line, .. } => {
                assert_eq!(template, "broken.jinja");
                assert_eq!(line, Some(2));
            }
            other => panic!("{other}"),
        }
    }
}
