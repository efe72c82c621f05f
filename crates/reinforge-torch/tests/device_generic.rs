//! Device-generic code, checked on machines without a GPU: in the library code that holds
//! tensors (reinforge-torch, and the binary and training crates while they hold any), a source
//! lint. What it catches: a `Tensor::from_slice(` or `Tensor::from(` not followed by
//! `.to_device(` within its statement (at most 4 lines), and any `Device::Cpu` in code, unless
//! a `// host:` comment on the line or just above says why. What it does not catch: host
//! tensors made by other constructors (`Tensor::zeros`, `ones`, `arange`, `randn`, ... with a
//! CPU `(Kind, Device)` held in a variable), tensors moved to the CPU by `.to_kind`/`.copy`
//! helpers, or a `.to_device(` of another tensor on the same lines; those rest on review. A
//! tensor silently created on the CPU inside a step is exactly what breaks on CUDA ("expected all tensors to be
//! on the same device"), and these machines cannot run CUDA to find it; `scripts/gpu_check.sh`
//! runs the same steps on a GPU. (libtorch's `meta` device, which would find them by running,
//! is not exposed by tch 0.24's `Device`.)

use std::path::{Path, PathBuf};

/// Crates whose sources are checked (those that exist).
const CRATES: &[&str] = &["reinforge-torch", "reinforge-train", "reinforge"];

/// Constructors that make a CPU tensor from host data.
const HOST_CONSTRUCTORS: &[&str] = &["Tensor::from_slice(", "Tensor::from("];

/// Lines an expression may span after its constructor.
const STATEMENT_LINES: usize = 4;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` before its unit-test module (tests build CPU tensors on purpose).
fn product_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .collect()
}

/// Whether line `i` or the comment lines just above it say `host:`.
fn says_why(lines: &[&str], i: usize) -> bool {
    if lines[i].contains("// host:") {
        return true;
    }
    lines[..i]
        .iter()
        .rev()
        .take_while(|l| l.trim_start().starts_with("//"))
        .any(|l| l.contains("host:"))
}

/// Places in `lines` that break the rule, as `line: text`.
fn violations(lines: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let cpu = code.contains("Device::Cpu");
        let host = HOST_CONSTRUCTORS.iter().any(|c| code.contains(c));
        let moved = || {
            lines[i..lines.len().min(i + 1 + STATEMENT_LINES)]
                .iter()
                .scan(false, |ended, l| {
                    let seen = !*ended;
                    *ended = l.contains(';');
                    Some((seen, *l))
                })
                .any(|(seen, l)| seen && l.contains(".to_device("))
        };
        if (cpu || (host && !moved())) && !says_why(lines, i) {
            out.push(format!("{}: {}", i + 1, line.trim()));
        }
    }
    out
}

#[test]
fn tensors_from_host_data_go_to_a_device_or_say_why() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut checked = 0;
    for krate in CRATES {
        let src = root.join(krate).join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            checked += 1;
            for v in violations(&product_lines(&text)) {
                found.push(format!(
                    "{}:{v}",
                    file.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(checked > 20, "only {checked} files checked");
    assert!(
        found.is_empty(),
        "host tensors without a device or a `// host:` reason:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rule_catches_a_stray_host_tensor_and_accepts_the_two_ways_out() {
    let stray = ["let t = Tensor::from_slice(&v);", "let y = x * t;"];
    assert_eq!(violations(&stray).len(), 1);
    let moved = [
        "let t = Tensor::from_slice(&v)",
        "    .view([2, -1])",
        "    .to_device(d);",
    ];
    assert!(violations(&moved).is_empty());
    let later = ["let t = Tensor::from_slice(&v);", "let u = t.to_device(d);"];
    assert_eq!(
        violations(&later).len(),
        1,
        "a move in a later statement does not count"
    );
    let why = [
        "// host: read back as numbers",
        "let t = Tensor::from_slice(&v);",
    ];
    assert!(violations(&why).is_empty());
    let cpu = ["let z = Tensor::zeros([2], (Kind::Float, Device::Cpu));"];
    assert_eq!(violations(&cpu).len(), 1);
    assert!(product_lines("a\n#[cfg(test)]\nTensor::from_slice(&v);").len() == 1);
}
