//! The architecture's invariants (ARCHITECTURE.md, "Invariants"), checked on the sources:
//! libtorch is named only by reinforge-torch; reinforge-train, the training core, names
//! neither tensors nor clap (its RL step's tensor work is reinforge-torch's two calls), nor a
//! recipe, and stays within its line budget; the binary names no tensor; no module circle
//! inside the `src/` of any crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The lines of `path` that are code (comment lines dropped: doc links are no dependency).
fn code_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(str::to_string)
        .collect()
}

/// Whether `line` holds `word` as a whole identifier.
fn names(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(i, _)| {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let before = line[..i].chars().next_back().is_none_or(|c| !ident(c));
        let after = line[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !ident(c));
        before && after
    })
}

/// Files under `dir` (relative to it) with a code line naming `Tensor` or `tch`.
fn files_naming_tensors(dir: &Path) -> BTreeSet<String> {
    rust_files(dir)
        .into_iter()
        .filter(|p| {
            code_lines(p)
                .iter()
                .any(|l| names(l, "Tensor") || names(l, "tch"))
        })
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect()
}

#[test]
fn only_reinforge_torch_depends_on_libtorch() {
    for manifest in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = manifest.unwrap().path();
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let depends = text.lines().any(|l| l.trim_start().starts_with("tch"));
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(depends, name == "reinforge-torch", "{name}: tch dependency");
    }
}

#[test]
fn the_training_library_names_no_tensor_and_no_clap() {
    let lib = root().join("crates/reinforge-train");
    assert!(lib.join("src/rl/step.rs").exists());
    assert_eq!(files_naming_tensors(&lib.join("src")), BTreeSet::new());
    let manifest = std::fs::read_to_string(lib.join("Cargo.toml")).unwrap();
    assert!(
        !manifest.lines().any(|l| l.starts_with("clap")),
        "no clap dependency"
    );
    let clap: Vec<_> = rust_files(&lib.join("src"))
        .into_iter()
        .filter(|p| code_lines(p).iter().any(|l| names(l, "clap")))
        .collect();
    assert!(clap.is_empty(), "{clap:?}");
}

/// The binary is CLI definitions and glue (issue 25): no file of it names a tensor.
#[test]
fn the_binary_names_no_tensor() {
    let now = files_naming_tensors(&root().join("crates/reinforge/src"));
    assert!(now.is_empty(), "tensor code in the binary: {now:?}");
}

/// A module path inside a crate: `[]` for the crate root, `["rl", "step"]` for `rl/step.rs`.
type Module = Vec<String>;

/// Every module of the crate whose sources are `src`, with its file.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    rust_files(src)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into()).collect();
            if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                m.pop();
            }
            (m, p)
        })
        .collect()
}

/// The module paths `line` of module `m` refers to through `crate::` and `super::`.
fn references(line: &str, m: &Module) -> Vec<Module> {
    let mut out = vec![];
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    for start in ["crate::", "super::"] {
        for (i, _) in line.match_indices(start) {
            if line[..i].chars().next_back().is_some_and(ident) {
                continue;
            }
            let mut rest = &line[i..];
            let mut base: Module = vec![];
            if start == "crate::" {
                rest = &rest["crate::".len()..];
            } else {
                base.clone_from(m);
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
            }
            let paths: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for p in paths {
                let segments = p
                    .trim()
                    .split("::")
                    .map(|s| s.chars().take_while(|&c| ident(c)).collect::<String>())
                    .take_while(|s| !s.is_empty());
                let mut target = base.clone();
                target.extend(segments);
                out.push(target);
            }
        }
    }
    out
}

/// The statements of `path`'s code: its code lines joined and cut at `;`, so a `use` group
/// spread over several lines is read whole.
fn statements(path: &Path) -> Vec<String> {
    code_lines(path)
        .join(" ")
        .split(';')
        .map(str::to_string)
        .collect()
}

/// Edges between sibling modules: `a -> b` when code under `a` refers to code under `b`, `a`
/// and `b` being children of the same module (a reference to an ancestor or a descendant is
/// none).
fn sibling_edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules(src);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, path) in &mods {
        for line in statements(path) {
            for r in references(&line, m) {
                let Some(t) = (0..=r.len())
                    .rev()
                    .map(|k| r[..k].to_vec())
                    .find(|t| mods.contains_key(t))
                else {
                    continue;
                };
                let common = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
                if common == m.len() || common == t.len() {
                    continue;
                }
                edges
                    .entry(m[..=common].to_vec())
                    .or_default()
                    .insert(t[..=common].to_vec());
            }
        }
    }
    edges
}

/// A circle of `edges`, if there is one.
fn circle(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        u: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, bool>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(u.clone(), false);
        stack.push(u.clone());
        for v in edges.get(u).into_iter().flatten() {
            match state.get(v) {
                Some(false) => {
                    let at = stack.iter().position(|s| s == v).unwrap();
                    return Some(stack[at..].to_vec());
                }
                Some(true) => {}
                None => {
                    if let Some(c) = visit(v, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(u.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    for u in edges.keys() {
        if !state.contains_key(u) {
            if let Some(c) = visit(u, edges, &mut state, &mut vec![]) {
                return Some(c);
            }
        }
    }
    None
}

/// Circles known and owned by an open issue: (crate, the modules of the circle, the issue).
/// A circle not listed fails, and so does a listed one that is gone (so the list shrinks).
const KNOWN_CIRCLES: &[(&str, &[&str], &str)] = &[];

/// The crates with a `src/`, by folder name.
fn crates() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

#[test]
fn no_module_circle_in_any_crate() {
    let all = crates();
    assert!(all.len() >= 13, "the crates were read: {all:?}");
    for krate in all {
        let edges = sibling_edges(&root().join("crates").join(&krate).join("src"));
        let known = KNOWN_CIRCLES.iter().find(|(k, _, _)| *k == krate);
        match (circle(&edges), known) {
            (None, None) => {}
            (Some(c), Some((_, mods, _))) => {
                let found: BTreeSet<String> = c.iter().map(|m| m.join("::")).collect();
                assert!(
                    found.iter().all(|m| mods.contains(&m.as_str())),
                    "{krate}: a circle beyond the known one: {c:?}"
                );
                // The known circle with its edges removed: nothing else circles.
                let mut rest = edges.clone();
                for m in mods.iter() {
                    rest.remove(&vec![m.to_string()]);
                }
                assert_eq!(circle(&rest), None, "{krate}");
            }
            (Some(c), None) => panic!("{krate}: module circle {c:?}"),
            (None, Some((_, mods, why))) => {
                panic!("{krate}: the known circle {mods:?} ({why}) is gone: drop it from KNOWN_CIRCLES")
            }
        }
    }
}

/// The training core: at most this many lines, and no recipe (reinforge-recipes builds on
/// it; cargo forbids the reverse dependency, and no file names the recipes' crate).
#[test]
fn the_training_core_is_small_and_imports_no_recipe() {
    const CORE_LINES: usize = 7_000;
    let src = root().join("crates/reinforge-train/src");
    let lines: usize = rust_files(&src)
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    assert!(lines > 1_000 && lines <= CORE_LINES, "{lines} lines");
    let manifest = std::fs::read_to_string(src.join("../Cargo.toml")).unwrap();
    assert!(
        !manifest
            .lines()
            .any(|l| l.trim_start().starts_with("reinforge-recipes")),
        "{manifest}"
    );
    let naming: Vec<_> = rust_files(&src)
        .into_iter()
        .filter(|p| code_lines(p).iter().any(|l| names(l, "reinforge_recipes")))
        .collect();
    assert!(naming.is_empty(), "{naming:?}");
}

/// The binary is flags and dispatch: at most 3,500 lines, no tensor type, and no model behind a
/// server trait (those are reinforge-backend's).
#[test]
fn the_binary_is_flags_and_dispatch() {
    const BINARY_LINES: usize = 3_500;
    let src = root().join("crates/reinforge/src");
    let files = rust_files(&src);
    let lines: usize = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    assert!(lines > 500 && lines <= BINARY_LINES, "{lines} lines");
    let forbidden = ["Tensor", "tch::", "impl Generator", "impl TinkerBackend"];
    let naming: Vec<_> = files
        .iter()
        .flat_map(|p| code_lines(p).into_iter().map(move |l| (p.clone(), l)))
        .filter(|(_, l)| forbidden.iter().any(|f| l.contains(f)))
        .collect();
    assert!(naming.is_empty(), "{naming:?}");
}

#[test]
fn the_circle_check_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("main.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a/mod.rs"), "mod c;\nuse c::X;\n").unwrap();
    std::fs::write(src.join("a/c.rs"), "use crate::b::{Y, Z};\nuse super::W;\n").unwrap();
    std::fs::write(src.join("b.rs"), "// crate::nothing\nuse super::a::W;\n").unwrap();
    let edges = sibling_edges(src);
    let m = |s: &str| vec![s.to_string()];
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert_eq!(circle(&edges).map(|c| c.len()), Some(2));
    std::fs::write(src.join("b.rs"), "use crate::nothing::W;\n").unwrap();
    assert_eq!(circle(&sibling_edges(src)), None);
    assert!(sibling_edges(src)[&m("a")].contains(&m("b")));
}

/// Whether module path `segments` of crate `krate` (folder name) names a module file, or an
/// item (the last one or two segments) written in the file of its longest module prefix.
fn names_exist(krate: &str, segments: &[&str]) -> bool {
    let src = root().join("crates").join(krate).join("src");
    for k in (0..=segments.len()).rev() {
        let rel: PathBuf = segments[..k].iter().collect();
        let file = [
            src.join(&rel).with_extension("rs"),
            src.join(&rel).join("mod.rs"),
        ]
        .into_iter()
        .chain((k == 0).then(|| src.join("lib.rs")))
        .find(|p| p.is_file());
        let Some(file) = file else { continue };
        let rest = &segments[k..];
        if rest.len() > 2 {
            return false;
        }
        let text = std::fs::read_to_string(file).unwrap();
        return rest.iter().all(|item| text.lines().any(|l| names(l, item)));
    }
    false
}

/// ARCHITECTURE.md is the code map: every path it names (`crates/`, `scripts/`, `fixtures/`,
/// `docs/`) exists, and every `reinforge_*::module::item` resolves; and it stays short.
#[test]
fn the_code_map_names_only_what_exists() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    assert!(
        map.len() <= 20 * 1024,
        "ARCHITECTURE.md is {} bytes",
        map.len()
    );
    let token = |c: char| c.is_alphanumeric() || "_-./:".contains(c);
    let mut paths = 0;
    let mut modules = 0;
    for word in map.split(|c: char| !token(c)) {
        let word = word.trim_end_matches(['.', ':']);
        if ["crates/", "scripts/", "fixtures/", "docs/"]
            .iter()
            .any(|p| word.starts_with(p))
        {
            assert!(root().join(word).exists(), "ARCHITECTURE.md names {word}");
            paths += 1;
        } else if let Some(rest) = word.strip_prefix("reinforge_").filter(|r| !r.is_empty()) {
            let mut segments: Vec<&str> = rest.split("::").collect();
            let krate = format!("reinforge-{}", segments.remove(0));
            assert!(
                names_exist(&krate, &segments),
                "ARCHITECTURE.md names {word}, which {krate} lacks"
            );
            modules += 1;
        }
    }
    assert!(
        paths > 30 && modules > 30,
        "{paths} paths, {modules} modules read"
    );
}

/// The README links every doc, so none is reachable from nowhere.
#[test]
fn the_readme_links_every_doc() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    docs.sort();
    assert!(docs.len() > 10, "{docs:?}");
    let unlinked: Vec<_> = docs
        .iter()
        .filter(|d| !readme.contains(&format!("(docs/{d})")))
        .collect();
    assert!(
        unlinked.is_empty(),
        "docs the README does not link: {unlinked:?}"
    );
    assert!(readme.contains("(ARCHITECTURE.md)"));
}
