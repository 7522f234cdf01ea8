//! The gateway's house rules, read from its source: imports run one way between planes, and
//! no file imports itself back through others.
//!
//! 1. `no_file_imports_itself_back`: in every crate of the workspace, the graph of `crate::`
//!    (and `super::`) paths between the files of its `src` has no cycle (a module's root file
//!    re-exports its children, so a child imports its siblings by their own path, never
//!    through its root).
//! 2. `planes_import_downward_only`: `app` → `control` → {`passthrough`, `terminate`} → `net` →
//!    `state` → `telemetry`; the two data planes never import each other.
//! 3. `terminate_stages_import_downward_only`: inside terminate mode, a stage imports only the
//!    stages below it: `server` → `request` → `cluster` → `watch` → `sender` → `join` →
//!    `upstream` → `exchange` → `rules`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floors, top first; a file may import its own floor and those below.
const FLOORS: &[&[&str]] = &[
    &["app", "init"],
    &["control"],
    &["passthrough", "terminate"],
    &["net"],
    &["state"],
    &["telemetry"],
];

/// Every crate whose files are held to the one-way rule, by folder.
const CRATES: &[&str] = &[
    "config", "net", "health", "pool", "wire", "gateway", "testbed", "sim", "loadtest",
];

/// Terminate mode's stages, top first: a stage imports its own and those below.
const STAGES: &[&str] = &[
    "server", "request", "cluster", "watch", "sender", "join", "upstream", "exchange", "rules",
];

/// The gateway's sources, where the floors are.
fn src() -> PathBuf {
    crate_src("gateway")
}

/// The sources of the crate in folder `name`.
fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file of `src` (`state/backends/relays.rs` → `state::backends::relays`).
fn module_of(file: &Path, src: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("::")
}

/// Code without comments and string literals, so that only real paths are read.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        for (i, c) in line.char_indices() {
            if !in_str && line[i..].starts_with("//") {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                kept.push(c);
            }
            prev = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Every `crate::` path a file's code (its tests aside) names, use groups expanded (`crate::a::{b, c::D}` gives
/// `a::b` and `a::c::D`); plus, for a module's root file, its children (`mod x;`).
fn paths(file: &Path, src: &Path) -> Vec<String> {
    let text = code(&std::fs::read_to_string(file).unwrap());
    // A file's tests come last (clippy's `items_after_test_module`) and import what they test:
    // not an edge of the code's graph.
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        expand("", rest, &mut out);
    }
    let me = module_of(file, src);
    // `use super::` at the top of a file imports from the parent module (indented, inside an
    // inline `mod tests`, it names the file itself).
    let parent = me.rsplit_once("::").map(|(p, _)| p.to_string());
    for line in text.lines() {
        if let (Some(rest), Some(parent)) = (line.strip_prefix("use super::"), &parent) {
            expand(&format!("{parent}::"), rest, &mut out);
        }
        let line = line.trim();
        let decl = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = decl.and_then(|d| d.strip_suffix(';')) {
            let parent = if me == "lib" || me == "main" {
                String::new()
            } else {
                format!("{me}::")
            };
            out.push(format!("{parent}{name}"));
        }
    }
    out
}

/// Reads one path (or brace group) at the start of `text`, prefixed with `prefix`.
fn expand(prefix: &str, text: &str, out: &mut Vec<String>) {
    let ident_end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let (head, tail) = text.split_at(ident_end);
    if head.ends_with("::") && tail.starts_with('{') {
        let inner = &tail[1..];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand(&format!("{prefix}{head}"), inner[start..i].trim(), out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&format!("{prefix}{head}"), inner[start..i].trim(), out);
                    start = i + 1;
                }
                _ => {}
            }
        }
    } else {
        let path = format!("{prefix}{}", head.trim_end_matches(':'));
        if !path.is_empty() && !path.ends_with("self") {
            out.push(path);
        } else if let Some(p) = path.strip_suffix("::self") {
            out.push(p.to_string());
        }
    }
}

/// The file a path resolves to: its longest prefix that is a module with a file.
fn resolve(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// The files of `src` (by module path) and the files each imports.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|f| module_of(f, src)).collect();
    let mut graph = BTreeMap::new();
    for f in &all {
        let me = module_of(f, src);
        let edges: BTreeSet<String> = paths(f, src)
            .iter()
            .filter_map(|p| resolve(p, &modules))
            .filter(|m| *m != me)
            .collect();
        graph.insert(me, edges);
    }
    graph
}

fn floor(module: &str) -> Option<usize> {
    let top = module.split("::").next()?;
    FLOORS.iter().position(|f| f.contains(&top))
}

#[test]
fn no_file_imports_itself_back() {
    for name in CRATES {
        let graph = graph(&crate_src(name));
        assert!(graph.len() > 5, "{name}: read {} files", graph.len());
        if let Some(cycle) = cycle(&graph) {
            panic!(
                "{name}: files import each other in a circle: {}",
                cycle.join(" → ")
            );
        }
    }
    assert!(graph(&src()).len() > 40);
    // The end-to-end tests' own library too.
    let support = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("support");
    let graph = graph(&support);
    assert!(graph.len() > 5, "tests/support: read {} files", graph.len());
    if let Some(cycle) = cycle(&graph) {
        panic!(
            "tests/support: files import each other in a circle: {}",
            cycle.join(" → ")
        );
    }
}

/// A circle of files in `graph`, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search for a back edge; the cycle found is printed whole.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_string());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn planes_import_downward_only() {
    let graph = graph(&src());
    let mut wrong = Vec::new();
    for (from, edges) in &graph {
        let Some(f) = floor(from) else { continue };
        let from_top = from.split("::").next().unwrap();
        for to in edges {
            let Some(t) = floor(to) else {
                wrong.push(format!("{from} → {to} (a module outside the floors)"));
                continue;
            };
            let to_top = to.split("::").next().unwrap();
            if t < f || (t == f && from_top != to_top) {
                wrong.push(format!("{from} → {to}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports running up or across planes:\n{}",
        wrong.join("\n")
    );
    // The rule has teeth: every floor is a folder that exists.
    for name in FLOORS.iter().flat_map(|f| f.iter()) {
        assert!(src().join(name).is_dir(), "{name}/");
    }
}

/// The terminate stage of `module` (`terminate::request::handle` → 1), if it is in one.
fn stage(module: &str) -> Option<usize> {
    let mut parts = module.split("::");
    if parts.next()? != "terminate" {
        return None;
    }
    let name = parts.next()?;
    Some(STAGES.iter().position(|s| *s == name).unwrap_or_else(|| {
        panic!("terminate::{name} is in no stage: add it to STAGES in tests/layout.rs")
    }))
}

#[test]
fn terminate_stages_import_downward_only() {
    let graph = graph(&src());
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for (from, edges) in &graph {
        let Some(f) = stage(from) else { continue };
        seen.insert(f);
        for to in edges {
            if let Some(t) = stage(to) {
                if t < f {
                    wrong.push(format!("{from} → {to}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports running up terminate mode's stages:\n{}",
        wrong.join("\n")
    );
    // The rule has teeth: every stage holds code.
    assert_eq!(seen.len(), STAGES.len(), "stages with files: {seen:?}");
}
