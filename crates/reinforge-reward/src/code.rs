//! Finding the program in a response for `code_tests`.

use std::sync::OnceLock;

use regex::Regex;

/// The last fenced code block (```` ```python ````, ```` ```py ````, ```` ```python3 ```` or a bare
/// ```` ``` ````) of `response`, or the whole response when it has none. The last block is the
/// final answer by the same convention as the math verifier's last `\boxed{}`.
pub fn extract_code(response: &str) -> &str {
    static FENCE: OnceLock<Regex> = OnceLock::new();
    let re = FENCE.get_or_init(|| {
        Regex::new(r"(?s)```(?:python3|python|py)?[ \t]*\r?\n(.*?)```").expect("valid regex")
    });
    match re.captures_iter(response).last() {
        Some(c) => c.get(1).map_or("", |m| m.as_str()),
        None => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_last_block_or_the_whole_text() {
        let r = "First:\n```python\nx = 1\n```\nthen\n```py\ndef f():\n    return 2\n```\ndone";
        assert_eq!(extract_code(r), "def f():\n    return 2\n");
        assert_eq!(extract_code("```\nprint(3)\n```"), "print(3)\n");
        assert_eq!(extract_code("def g(): pass"), "def g(): pass");
        // an unclosed fence is not a block
        assert_eq!(extract_code("```python\nx = 1"), "```python\nx = 1");
    }
}
