//! ARCHITECTURE.md's code map is a rule, not a picture: modules are listed so that "no module
//! imports one listed after it". This test reads the map and every file under `src/`, and
//! fails on a `crate::` path from one top-level module into another that the map lists later,
//! and on a module the map does not place. (Paths inside one top-level module, and `super::`,
//! are that module's own business.)

use std::collections::BTreeMap;
use std::path::Path;

/// The map's modules, each with the row it is listed in.
fn map_rows() -> BTreeMap<String, usize> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md");
    let map = doc
        .split("\n## Code map")
        .nth(1)
        .expect("a '## Code map' section");
    let mut rows = BTreeMap::new();
    let mut row = 0;
    for line in map.lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let Some(first) = line.strip_prefix("| `") else {
            continue;
        };
        let cell = format!("`{}", first.split(" | ").next().unwrap_or(""));
        for token in cell.split('`').skip(1).step_by(2) {
            for path in expand(token) {
                let last = path.rsplit("::").next().unwrap_or("");
                if last.starts_with(|c: char| c.is_ascii_uppercase()) {
                    continue; // a type named in the map, not a module
                }
                rows.entry(path).or_insert(row);
            }
        }
        row += 1;
    }
    assert!(rows.len() > 20, "the map lists {} modules", rows.len());
    rows
}

/// `a::{b,mod,c}` -> `a::b`, `a`, `a::c`; `a` -> `a`.
fn expand(token: &str) -> Vec<String> {
    match token.split_once("::{") {
        Some((base, rest)) => rest
            .trim_end_matches('}')
            .split(',')
            .map(|m| match m.trim() {
                "mod" => base.to_string(),
                m => format!("{base}::{m}"),
            })
            .collect(),
        None => vec![token.to_string()],
    }
}

/// The row of module `path`: its own, else the first row of a module below it (a parent that
/// only re-exports), else its parent's.
fn row_of(rows: &BTreeMap<String, usize>, path: &str) -> Option<usize> {
    if let Some(&r) = rows.get(path) {
        return Some(r);
    }
    let below = format!("{path}::");
    if let Some(r) = rows
        .iter()
        .filter(|(p, _)| p.starts_with(&below))
        .map(|(_, &r)| r)
        .min()
    {
        return Some(r);
    }
    let (parent, _) = path.rsplit_once("::")?;
    row_of(rows, parent)
}

/// Every `crate::a::b` path in `src` outside comments, as `a::b` (for `crate::{a, b}`: `a`
/// and `b`).
fn crate_paths(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in src.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split(" //").next().unwrap_or(code);
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let p = path_prefix(item.trim());
                    if !p.is_empty() {
                        out.push(p);
                    }
                }
            } else {
                let p = path_prefix(rest);
                if !p.is_empty() {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The leading `a::b::c` of `s` (identifiers joined by `::`).
fn path_prefix(s: &str) -> String {
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(&rest[..end]);
        match rest[end..].strip_prefix("::") {
            Some(r) if r.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') => rest = r,
            _ => break,
        }
    }
    segs.join("::")
}

fn modules(dir: &Path, prefix: &str, out: &mut Vec<(String, std::path::PathBuf)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_str().unwrap().to_string();
        if p.is_dir() {
            modules(&p, &format!("{prefix}{name}::"), out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let module = match name.as_str() {
                "mod" => prefix.trim_end_matches("::").to_string(),
                _ => format!("{prefix}{name}"),
            };
            out.push((module, p));
        }
    }
}

#[test]
fn no_module_imports_one_the_map_lists_after_it() {
    let rows = map_rows();
    let mut files = Vec::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
    let mut problems = Vec::new();
    for (module, path) in &files {
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(mine) = row_of(&rows, module) else {
            problems.push(format!("{module} ({}) is not in the map", path.display()));
            continue;
        };
        let top = module.split("::").next().unwrap();
        let src = std::fs::read_to_string(path).unwrap();
        for dep in crate_paths(&src) {
            if dep.split("::").next() == Some(top) {
                continue;
            }
            match row_of(&rows, &dep) {
                None => problems.push(format!(
                    "{module} uses crate::{dep}, which is not in the map"
                )),
                Some(r) if r > mine => problems.push(format!(
                    "{module} (row {mine}) uses crate::{dep} (row {r}), listed after it"
                )),
                Some(_) => {}
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's code map is broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_reader_of_the_map_finds_what_it_should() {
    assert_eq!(expand("gc::{mark,mod}"), ["gc::mark", "gc"]);
    assert_eq!(
        crate_paths("use crate::trace::{Op, X};\nlet a = crate::gc::Strategy::ALL; // crate::no\n// crate::nope\nuse crate::{model::Model, rng};"),
        ["trace", "gc::Strategy::ALL", "model::Model", "rng"]
    );
    let rows: BTreeMap<String, usize> = [
        ("a::b".to_string(), 3),
        ("a::c".to_string(), 1),
        ("d".to_string(), 5),
    ]
    .into();
    assert_eq!(
        row_of(&rows, "a"),
        Some(1),
        "a parent: its first child's row"
    );
    assert_eq!(row_of(&rows, "a::b::X"), Some(3));
    assert_eq!(row_of(&rows, "e"), None);
}

/// The module files (not a folder's `mod.rs`) each one reaches by a `super::` or `crate::`
/// path outside its unit tests: the leaves of the module graph, which must not import each
/// other round in a circle (a parent's `mod.rs` is its children's common room, and may be
/// used by them).
fn leaf_imports() -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
    let leaves: std::collections::BTreeSet<String> = files
        .iter()
        .filter(|(_, p)| p.file_name().is_some_and(|n| n != "mod.rs"))
        .map(|(m, _)| m.clone())
        .collect();
    // The longest leaf that is `path` or a prefix of it.
    let leaf_of = |path: &str| -> Option<String> {
        let segs: Vec<&str> = path.split("::").collect();
        (1..=segs.len())
            .rev()
            .map(|n| segs[..n].join("::"))
            .find(|p| leaves.contains(p))
    };
    let mut graph = BTreeMap::new();
    for (module, path) in &files {
        if !leaves.contains(module) {
            continue;
        }
        let whole = std::fs::read_to_string(path).unwrap();
        // A file's unit tests may use its siblings: the code is what counts.
        let src = whole.split("#[cfg(test)]\nmod tests").next().unwrap();
        let parent = module.rsplit_once("::").map_or("", |p| p.0);
        let mut deps: Vec<String> = crate_paths(src);
        for line in src.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut rest = line;
            while let Some(at) = rest.find("super::") {
                rest = &rest[at + "super::".len()..];
                let p = path_prefix(rest);
                if !p.is_empty() && !parent.is_empty() {
                    deps.push(format!("{parent}::{p}"));
                }
            }
        }
        let mine: std::collections::BTreeSet<String> = deps
            .iter()
            .filter_map(|d| leaf_of(d))
            .filter(|d| d != module)
            .collect();
        graph.insert(module.clone(), mine);
    }
    graph
}

/// A circle in `graph`, if there is one (its modules in order).
fn a_circle(graph: &BTreeMap<String, std::collections::BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first; 1: on the current path, 2: done.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, std::collections::BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|p| p == m).unwrap();
                let mut circle = path[at..].to_vec();
                circle.push(m.to_string());
                return Some(circle);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut state, &mut Vec::new()))
}

/// No module file imports another that imports it back, directly or round a longer circle
/// (sim/requests.rs and sim/store.rs once did).
#[test]
fn no_module_files_import_each_other_in_a_circle() {
    let graph = leaf_imports();
    assert!(graph.len() > 60, "{} module files", graph.len());
    assert_eq!(a_circle(&graph), None, "a circle of imports");
    // The check finds one where there is one.
    let mut bad = graph.clone();
    bad.entry("sim::requests".into())
        .or_default()
        .insert("sim::store".into());
    bad.entry("sim::store".into())
        .or_default()
        .insert("sim::requests".into());
    assert!(a_circle(&bad).is_some());
}

/// The top-level folders of `root` that ARCHITECTURE.md's folder table (`table`) does not
/// name, leaving out `.git` and what the repository's `.gitignore` ignores there (`target/`,
/// the demo's report `chunkscope-demo/`: the README's demo run before its tests must not fail
/// them).
fn unnamed_folders(root: &Path, table: &str) -> Vec<String> {
    let ignore = std::fs::read_to_string(root.join(".gitignore")).unwrap_or_default();
    let ignored = |name: &str| {
        ignore.lines().map(str::trim).any(|l| {
            let l = l.strip_prefix('/').unwrap_or(l);
            l.strip_suffix('/').unwrap_or(l) == name
        })
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.path().is_dir() || name == ".git" || ignored(&name) {
            continue;
        }
        if !table.contains(&format!("| `{name}/` |")) {
            out.push(name);
        }
    }
    out.sort();
    out
}

/// Every top-level folder of the repository is named in ARCHITECTURE.md's table of folders.
#[test]
fn the_map_names_every_top_level_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let table = doc
        .split("\n## Folders")
        .nth(1)
        .expect("a '## Folders' section")
        .split("\n## ")
        .next()
        .unwrap();
    assert_eq!(
        unnamed_folders(root, table),
        Vec::<String>::new(),
        "ARCHITECTURE.md's folders do not name these"
    );
}

/// Issue 49, point 1: a folder that `.gitignore` ignores (the demo's report, `target/`) is
/// not the map's business; any other unnamed folder still is.
#[test]
fn ignored_folders_are_left_out_of_the_map_check() {
    let root = tempfile::tempdir().unwrap();
    for d in ["src", "chunkscope-demo", "target", "stray", ".git"] {
        std::fs::create_dir(root.path().join(d)).unwrap();
    }
    let table = "| `src/` | the code |";
    assert_eq!(
        unnamed_folders(root.path(), table),
        ["chunkscope-demo", "stray", "target"]
    );
    std::fs::write(
        root.path().join(".gitignore"),
        "target/\n/chunkscope-demo/\n*.truth.json\n",
    )
    .unwrap();
    assert_eq!(unnamed_folders(root.path(), table), ["stray"]);
}

/// The functions of `src/` longer than `limit` lines (signature to closing brace), as
/// `path::name` with their length: a line starting `fn` (after `pub`, `const`, `unsafe`) to
/// the first line that is its indentation and `}`.
fn long_functions(limit: usize) -> BTreeMap<String, usize> {
    let mut files = Vec::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
    let mut out = BTreeMap::new();
    for (_, path) in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let body = l.trim_start();
            let indent = &l[..l.len() - body.len()];
            let mut rest = body;
            for word in [
                "pub(crate) ",
                "pub(super) ",
                "pub ",
                "const ",
                "async ",
                "unsafe ",
            ] {
                rest = rest.strip_prefix(word).unwrap_or(rest);
            }
            let Some(sig) = rest.strip_prefix("fn ") else {
                continue;
            };
            let name: String = sig
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let close = format!("{indent}}}");
            if let Some(end) = lines[i + 1..].iter().position(|x| *x == close) {
                let n = end + 2;
                if n > limit {
                    let rel = path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
                    out.insert(format!("{}::{name}", rel.display()), n);
                }
            }
        }
    }
    out
}

/// Issue 42, point 7: rooms a person can read whole. No file under `src/` is over 900
/// lines, and no function over 120 (the last two, the sweep's and the analysis's per-entry
/// loops, were split without a cost: BENCHMARKS.md, "Hot loops split into functions").
#[test]
fn files_and_functions_stay_small_enough_to_read_whole() {
    let mut files = Vec::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
    let big: Vec<String> = files
        .iter()
        .filter_map(|(_, p)| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > 900).then(|| format!("{} ({n} lines)", p.display()))
        })
        .collect();
    assert!(big.is_empty(), "files over 900 lines: {big:?}");
    let long = long_functions(120);
    assert!(long.is_empty(), "functions over 120 lines: {long:?}");
}
