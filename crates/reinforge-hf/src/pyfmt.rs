//! Python's text forms of template values, so output matches jinja2 under transformers byte for byte:
//! `repr`-style printing of `None`, booleans, floats, lists and dicts (what `{{ x }}` prints in jinja2), and
//! `json.dumps` with transformers' `tojson` options.
//!
//! Hand-written because minijinja prints values the Rust way (`none`, `true`, `[1, "a"]`) and its `tojson`
//! escapes HTML characters and formats floats differently; no crate reproduces CPython's formatting.

use std::fmt::Write;

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// CPython's `repr(float)`: shortest round-trip digits, positional for exponents in [-4, 16), else scientific
/// with at least two exponent digits (`1e-05`, `1.5e+16`).
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits as `d.ddde±x`.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            let (a, b) = digits.split_at((exp + 1) as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

/// CPython's `repr(str)`: single quotes unless the text has a `'` and no `"`.
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// What jinja2 prints for `{{ value }}`: strings as they are, everything else as Python's `str()`.
pub fn py_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        _ => py_repr(value),
    }
}

/// Python's `repr()` of a template value (containers print their items with `repr`).
pub fn py_repr(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number => number(value, "inf", "nan"),
        ValueKind::String => str_repr(value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let items: Vec<String> = value
                .try_iter()
                .map(|it| it.map(|v| py_repr(&v)).collect())
                .unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let items: Vec<String> = value
                .try_iter()
                .map(|it| {
                    it.map(|k| {
                        let v = value.get_item(&k).unwrap_or_default();
                        format!("{}: {}", py_repr(&k), py_repr(&v))
                    })
                    .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        _ => value.to_string(),
    }
}

/// An integer in decimal, a float as Python writes it (`inf`/`nan` spelled by the caller's convention).
fn number(value: &Value, inf: &str, nan: &str) -> String {
    if let Some(f) = as_float(value) {
        if f.is_nan() {
            return nan.into();
        }
        if f.is_infinite() {
            return if f > 0.0 {
                inf.into()
            } else {
                format!("-{inf}")
            };
        }
        float_repr(f)
    } else {
        value.to_string()
    }
}

/// `Some(f)` when the number is a float (integers print as integers).
fn as_float(value: &Value) -> Option<f64> {
    if value.is_integer() {
        None
    } else {
        f64::try_from(value.clone()).ok()
    }
}

/// The options of transformers' `tojson` filter (`chat_template_utils.py`, `_cached_compile_jinja_template`):
/// `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
#[derive(Debug, Clone, Default)]
pub struct JsonOptions {
    pub ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: newline + `s` per level (an int n is n spaces).
    pub indent: Option<String>,
    /// `(item, key)` separators; default `(", ", ": ")`, or `(",", ": ")` with an indent.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

/// Python's `json.dumps` of a template value.
pub fn json_dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((a, b)) => (a.clone(), b.clone()),
        None if opts.indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let mut out = String::new();
    dump(value, opts, &item_sep, &key_sep, 0, &mut out)?;
    Ok(out)
}

fn newline(opts: &JsonOptions, depth: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn dump(
    value: &Value,
    opts: &JsonOptions,
    item_sep: &str,
    key_sep: &str,
    depth: usize,
    out: &mut String,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Undefined => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: Object of type Undefined is not JSON serializable",
            ))
        }
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number(value, "Infinity", "NaN")),
        ValueKind::String => {
            json_string(value.as_str().unwrap_or_default(), opts.ensure_ascii, out)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(opts, depth + 1, out);
                dump(v, opts, item_sep, key_sep, depth + 1, out)?;
            }
            newline(opts, depth, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries: Vec<(String, Value)> = Vec::new();
            for k in value.try_iter()? {
                let v = value.get_item(&k)?;
                entries.push((json_key(&k)?, v));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(opts, depth + 1, out);
                json_string(k, opts.ensure_ascii, out);
                out.push_str(key_sep);
                dump(v, opts, item_sep, key_sep, depth + 1, out)?;
            }
            newline(opts, depth, out);
            out.push('}');
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of kind {kind} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

/// json.dumps turns non-string keys into strings: `true`, `null`, numbers as written.
fn json_key(k: &Value) -> Result<String, Error> {
    Ok(match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number => number(k, "Infinity", "NaN"),
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: keys must be str, int, float, bool or None, not {kind}"),
            ))
        }
    })
}

/// A JSON string as Python's encoder writes it (`ensure_ascii` escapes non-ASCII as `\uXXXX`, with surrogate
/// pairs above the BMP).
fn json_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_cpython_repr() {
        // Expected strings are CPython 3.11's repr() of the same doubles.
        let cases = [
            (0.1 + 0.2, "0.30000000000000004"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (-2.5e-7, "-2.5e-07"),
            (123.456, "123.456"),
            (1.5e300, "1.5e+300"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn reprs_pick_quotes_like_python() {
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a\"b'c"), "'a\"b\\'c'");
        assert_eq!(str_repr("x\ny"), "'x\\ny'");
        let v = Value::from(minijinja::value::Serde(serde_json::json!([
            1, "a", null, true, 2.0
        ])));
        assert_eq!(py_repr(&v), "[1, 'a', None, True, 2.0]");
    }

    #[test]
    fn json_dumps_matches_python_options() {
        let v: Value =
            serde_json::from_str(r#"{"b": [1, 2.5, "é<&>"], "a": {}, "c": []}"#).unwrap();
        let plain = json_dumps(&v, &JsonOptions::default()).unwrap();
        assert_eq!(plain, r#"{"b": [1, 2.5, "é<&>"], "a": {}, "c": []}"#);
        let opts = JsonOptions {
            ensure_ascii: true,
            indent: Some("  ".into()),
            sort_keys: true,
            ..Default::default()
        };
        let pretty = json_dumps(&v, &opts).unwrap();
        assert_eq!(
            pretty,
            "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2.5,\n    \"\\u00e9<&>\"\n  ],\n  \"c\": []\n}"
        );
        let emoji = Value::from("😀");
        let ascii = JsonOptions {
            ensure_ascii: true,
            ..Default::default()
        };
        assert_eq!(json_dumps(&emoji, &ascii).unwrap(), r#""\ud83d\ude00""#);
    }
}
