//! Tool use in dataset runs (`reinforge train --model --data --tools calculator`): the policy
//! may call a calculator in the Hermes/Qwen format that vLLM's `hermes` tool parser and
//! `verifiers`' ToolEnv read,
//!
//! ```text
//! <tool_call>
//! {"name": "calculator", "arguments": {"expression": "12*(3+4)"}}
//! </tool_call>
//! ```
//!
//! (a bare expression between the tags is accepted too); the expression runs in
//! reinforge-sandbox, and its result comes back as a `tool` message rendered by the model's
//! own chat template. The episode ends at a turn without a tool call (its text is what the
//! reward scores) or after `--max-turns` turns.
//!
//! Observation tokens: the template is rendered for the conversation with and without the
//! tool message, and only the new text is tokenised, so earlier turns keep their sampled ids;
//! the part of the template that closes the assistant turn after the stop token the policy
//! sampled (ChatML's newline after `<|im_end|>`) belongs to the observation.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use reinforge_hf::{ChatOptions, HfTokenizer};
use reinforge_sandbox::{Language, Limits, RunRequest, RunStatus, Sandbox};
use reinforge_tasks::data::Message;

use reinforge_train::multi_turn::Turns;

/// The system message that tells the policy about the calculator (when the run sets none).
pub const CALCULATOR_SYSTEM: &str = "You can use a calculator. To call it, write\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2*(3+4)\"}}\n</tool_call>\nand wait for the result. When you know the answer, state it as: The answer is N.";

/// The calculator, evaluated by Python's `ast` over numbers and arithmetic operators only
/// (no names, calls or attributes), inside the sandbox.
const CALCULATOR_PY: &str = r#"import ast, operator, sys
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
       ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}
def ev(n):
    if isinstance(n, ast.Constant) and type(n.value) in (int, float):
        return n.value
    if isinstance(n, ast.BinOp) and type(n.op) in OPS:
        l, r = ev(n.left), ev(n.right)
        if isinstance(n.op, ast.Pow) and abs(r) > 64:
            raise ValueError("exponent too large")
        return OPS[type(n.op)](l, r)
    if isinstance(n, ast.UnaryOp) and type(n.op) in OPS:
        return OPS[type(n.op)](ev(n.operand))
    raise ValueError("only numbers and + - * / // % ** ( ) are allowed")
try:
    v = ev(ast.parse(sys.stdin.read().strip(), mode="eval").body)
    print(int(v) if isinstance(v, float) and v.is_integer() else v)
except Exception as e:
    print("error: " + str(e))
"#;

/// A conversation in progress, as text messages (for the template).
#[derive(Debug, Clone)]
pub struct Conversation {
    pub messages: Vec<Message>,
    /// The policy's last turn, as text: what the reward scores.
    pub final_text: String,
    pub tool_calls: usize,
}

impl Conversation {
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            final_text: String::new(),
            tool_calls: 0,
        }
    }
}

/// The calculator tool over a model's tokenizer and chat template.
pub struct Calculator<'a> {
    tokenizer: &'a HfTokenizer,
    sandbox: Sandbox,
}

impl<'a> Calculator<'a> {
    /// Starts the sandbox (and checks it can run Python on this host).
    pub fn new(tokenizer: &'a HfTokenizer) -> Result<Self> {
        let sandbox =
            Sandbox::new(Limits::default()).context("starting the calculator's sandbox")?;
        sandbox
            .self_test()
            .context("the sandbox cannot run the calculator on this host")?;
        Ok(Self { tokenizer, sandbox })
    }

    /// Evaluates `expression` in the sandbox: its result, or an `error: ...` text.
    pub fn evaluate(&self, expression: &str) -> Result<String> {
        let limits = Limits {
            wall_time: Duration::from_secs(5),
            cpu_time: Duration::from_secs(5),
            memory_bytes: 256 << 20,
            max_output_bytes: 4096,
            ..Limits::default()
        };
        let r = self.sandbox.run(&RunRequest {
            language: Language::Python,
            code: CALCULATOR_PY.into(),
            stdin: Some(expression.as_bytes().to_vec()),
            files: BTreeMap::new(),
            fetch_files: vec![],
            limits,
        })?;
        Ok(match r.status {
            RunStatus::Finished => String::from_utf8_lossy(&r.stdout).trim().to_string(),
            RunStatus::SandboxError => bail!("the sandbox failed: {}", r.message),
            other => format!("error: {other:?}"),
        })
    }

    /// The observation ids after the assistant turn `content` (ended by a stop token when
    /// `stopped`) of `before` when the tool answers `result`.
    fn observation(
        &self,
        before: &[Message],
        content: &str,
        stopped: bool,
        result: &str,
    ) -> Result<Vec<i64>> {
        let mut with_turn = before.to_vec();
        with_turn.push(message("assistant", content));
        let plain = ChatOptions::default();
        let closed = self.tokenizer.apply_chat_template(&with_turn, &plain)?;
        let end = closed
            .rfind(content)
            .map(|i| i + content.len())
            .context("the chat template does not render the assistant's text")?;
        with_turn.push(message("tool", result));
        let next = ChatOptions {
            add_generation_prompt: true,
            ..Default::default()
        };
        let after = self.tokenizer.apply_chat_template(&with_turn, &next)?;
        if !after.starts_with(&closed[..end]) {
            bail!("the chat template renders earlier turns differently once a tool message follows; multi-turn needs a prefix-stable template");
        }
        let mut text = &after[end..];
        if stopped {
            // The sampled stop token already closed the turn: drop its text here.
            for stop in self.stop_texts() {
                if let Some(rest) = text.strip_prefix(stop.as_str()) {
                    text = rest;
                    break;
                }
            }
        }
        let ids = self.tokenizer.encode(text, false)?;
        Ok(ids.into_iter().map(i64::from).collect())
    }

    fn stop_texts(&self) -> Vec<String> {
        self.tokenizer
            .stop_token_ids()
            .iter()
            .filter_map(|&id| self.tokenizer.decode(&[id], false).ok())
            .filter(|t| !t.is_empty())
            .collect()
    }
}

impl Turns for Calculator<'_> {
    type State = Conversation;

    fn step(
        &self,
        c: &mut Conversation,
        turn: &[i64],
        truncated: bool,
    ) -> Result<Option<Vec<i64>>> {
        let ids: Vec<u32> = turn.iter().map(|&t| t as u32).collect();
        let content = self.tokenizer.decode(&ids, true).unwrap_or_default();
        c.final_text = content.clone();
        let Some(expression) = tool_call(&content) else {
            return Ok(None);
        };
        if truncated {
            return Ok(None);
        }
        let result = self.evaluate(&expression)?;
        c.tool_calls += 1;
        let stopped = turn
            .last()
            .is_some_and(|t| self.tokenizer.stop_token_ids().contains(&(*t as u32)));
        let obs = self.observation(&c.messages, &content, stopped, &result)?;
        c.messages.push(message("assistant", &content));
        c.messages.push(message("tool", &result));
        Ok(Some(obs))
    }
}

fn message(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
    }
}

/// The calculator expression of the first `<tool_call>…</tool_call>` in `text`: Hermes JSON
/// (`{"name": "calculator", "arguments": {"expression": …}}`) or a bare expression.
pub fn tool_call(text: &str) -> Option<String> {
    let start = text.find("<tool_call>")? + "<tool_call>".len();
    let end = start + text[start..].find("</tool_call>")?;
    let body = text[start..end].trim();
    if body.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        if v["name"].as_str() != Some("calculator") {
            return None;
        }
        let args = match &v["arguments"] {
            serde_json::Value::String(s) => serde_json::from_str(s).ok()?,
            a => a.clone(),
        };
        return args["expression"].as_str().map(str::to_string);
    }
    (!body.is_empty()).then(|| body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The qwen2 fixture's ChatML tokenizer with a plain ChatML template that renders any
    /// role (the fixture's own template refuses `tool`).
    fn chatml_tokenizer() -> (tempfile::TempDir, HfTokenizer) {
        let src =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/qwen2");
        let dir = tempfile::tempdir().unwrap();
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
        }
        let template = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        std::fs::write(dir.path().join("chat_template.jinja"), template).unwrap();
        let tok = HfTokenizer::from_dir(dir.path()).unwrap();
        (dir, tok)
    }

    #[test]
    fn the_calculator_runs_in_the_sandbox_and_its_reply_extends_the_ids() {
        let (_dir, tok) = chatml_tokenizer();
        let calc = Calculator::new(&tok).unwrap();
        assert_eq!(calc.evaluate("12*(3+4)").unwrap(), "84");
        assert_eq!(calc.evaluate("7/2").unwrap(), "3.5");
        assert!(calc
            .evaluate("__import__('os').system('ls')")
            .unwrap()
            .starts_with("error"));
        assert!(calc.evaluate("9**9**9").unwrap().starts_with("error"));
        // The policy's turn ends with its stop token; the observation carries the rest of the
        // template: the tool message and the next assistant header, nothing of the turn.
        let before = vec![message("user", "What is 12*(3+4)?")];
        let content = "<tool_call>12*(3+4)</tool_call>";
        let obs = calc.observation(&before, content, true, "84").unwrap();
        let ids: Vec<u32> = obs.iter().map(|&t| t as u32).collect();
        let text = tok.decode(&ids, false).unwrap();
        assert!(text.contains("84"), "{text:?}");
        assert!(!text.contains(content), "{text:?}");
        let stop = tok.decode(&[tok.stop_token_ids()[0]], false).unwrap();
        assert!(
            !text.starts_with(&stop),
            "the sampled stop token is not repeated: {text:?}"
        );
        // Prompt + turn + observation renders exactly the template's text of the conversation.
        let mut conv = before.clone();
        conv.push(message("assistant", content));
        conv.push(message("tool", "84"));
        let full = tok
            .apply_chat_template(
                &conv,
                &ChatOptions {
                    add_generation_prompt: true,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(full.ends_with(&text), "{full:?} vs {text:?}");
    }

    #[test]
    fn tool_calls_parse_in_hermes_json_or_bare() {
        let hermes = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*(3+4)\"}}\n</tool_call>";
        assert_eq!(tool_call(hermes).as_deref(), Some("12*(3+4)"));
        let string_args = r#"<tool_call>{"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}</tool_call>"#;
        assert_eq!(tool_call(string_args).as_deref(), Some("1+1"));
        assert_eq!(
            tool_call("<tool_call> 7 - 2 </tool_call>").as_deref(),
            Some("7 - 2")
        );
        assert_eq!(
            tool_call("<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>"),
            None
        );
        assert_eq!(tool_call("The answer is 4."), None);
        assert_eq!(tool_call("<tool_call>unclosed"), None);
    }
}
