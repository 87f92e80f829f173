//! The layering rule of the crate doc (src/lib.rs), checked: no cycle between top-level
//! modules. Every `crate::<module>` path in the code of `src/` (comments excluded) counts as a
//! dependency of the file's top-level module on `<module>`; the test fails on any cycle in that
//! graph and prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Where each top-level dependency was seen first (for the failure message).
type Evidence = BTreeMap<(String, String), String>;

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

/// The top-level modules declared in src/lib.rs.
fn top_level_modules(lib_rs: &str) -> BTreeSet<String> {
    lib_rs
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The line without its `//` comment (string literals holding `//` are rare enough here; a
/// false cut only hides a path, it cannot invent one).
fn code_of(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a piece of code names through `crate::`: `crate::x::…`, `crate::x`,
/// and grouped imports `crate::{x::…, y}` (nested braces included).
fn referenced(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before_ok = rest[..i]
            .chars()
            .last()
            .map_or(true, |c| !(c.is_ascii_alphanumeric() || c == '_'));
        let after = &rest[i + "crate::".len()..];
        if before_ok {
            if let Some(group) = after.strip_prefix('{') {
                // Top-level names of the group: after `{` and after each `,` at depth 0.
                let mut depth = 0usize;
                let mut start = true;
                for (k, c) in group.char_indices() {
                    if start && !c.is_whitespace() {
                        let name = ident_at(&group[k..]);
                        if modules.contains(name) {
                            found.insert(name.to_string());
                        }
                        start = false;
                    }
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        _ => {}
                    }
                }
            } else {
                let name = ident_at(after);
                if modules.contains(name) {
                    found.insert(name.to_string());
                }
            }
        }
        rest = after;
    }
    found
}

fn dependency_graph(src: &Path) -> (Graph, Evidence) {
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules = top_level_modules(&lib_rs);
    assert!(
        modules.len() >= 5,
        "found only {modules:?} in src/lib.rs: the parser no longer matches its `mod` lines"
    );
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut graph = Graph::new();
    let mut evidence = Evidence::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let owner = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if !modules.contains(&owner) {
            continue; // lib.rs itself, build helpers
        }
        // Whole file, comments cut line by line, so that grouped imports spanning lines parse.
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text.lines().map(|l| format!("{}\n", code_of(l))).collect();
        for target in referenced(&code, &modules) {
            if target == owner {
                continue;
            }
            let line = code
                .lines()
                .position(|l| l.contains(&format!("crate::{target}")))
                .map_or(String::new(), |n| format!(":{}", n + 1));
            evidence
                .entry((owner.clone(), target.clone()))
                .or_insert_with(|| format!("{}{line}", rel.display()));
            graph.entry(owner.clone()).or_default().insert(target);
        }
    }
    (graph, evidence)
}

/// A cycle in the graph (first node repeated at the end), if any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut done, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn no_cycle_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (graph, evidence) = dependency_graph(&src);
    for (from, tos) in &graph {
        eprintln!(
            "{from} -> {}",
            tos.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                let seen = &evidence[&(w[0].clone(), w[1].clone())];
                format!("  {} -> {} (e.g. {seen})", w[0], w[1])
            })
            .collect();
        panic!(
            "cycle between top-level modules: {}\n{}\nsee the dependency rule in src/lib.rs",
            cycle.join(" -> "),
            steps.join("\n")
        );
    }
}

#[test]
fn ffi_is_the_top_and_nothing_imports_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (graph, evidence) = dependency_graph(&src);
    let importers: Vec<String> = graph
        .iter()
        .filter(|(from, tos)| *from != "ffi" && tos.contains("ffi"))
        .map(|(from, _)| evidence[&(from.clone(), "ffi".to_string())].clone())
        .collect();
    assert!(
        importers.is_empty(),
        "modules below ffi import it: {importers:?}"
    );
}

#[test]
fn the_parser_sees_paths_and_groups_and_finds_cycles() {
    let modules: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let code = "use crate::{a::X, b::{Y, Z}};\nlet n = crate::c::f(); mycrate::a::g(); // crate::b";
    let seen = referenced(code_of(code.lines().next().unwrap()), &modules);
    assert_eq!(seen, modules.iter().take(2).cloned().collect());
    let seen = referenced(code_of(code.lines().nth(1).unwrap()), &modules);
    assert_eq!(seen, ["c".to_string()].into_iter().collect());
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&graph), None);
    graph.entry("c".into()).or_default().insert("a".into());
    let cycle = find_cycle(&graph).expect("a -> b -> c -> a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}
