//! The layering rule of the crate doc (src/lib.rs), checked at every module depth: no import
//! circle anywhere.
//!
//! Every file of `src/` is a module (`src/a/b.rs` and `src/a/b/mod.rs` are `crate::a::b`);
//! the binary under `src/bin/<name>/` is a crate of its own, checked the same way. A file
//! depends on another when its code (comments and string literals cut) names a path into it:
//! `crate::…`, `super::…`, `self::…` (grouped imports `{a::X, b::{Y, Z}}` expanded, inline
//! modules such as `mod tests { … }` counted as part of their file), or a bare path that
//! starts with one of its own child modules (`float::f32_avx2` in a `mod.rs` that declares
//! `mod float;`). A path is charged to the deepest file module it reaches, so going through a
//! re-export (`crate::kernels::cpu::ThreadPool`) is a dependency on that façade file. A `mod`
//! declaration alone is no dependency.
//!
//! Checked, each failure printing the cycle with a file:line for every step:
//! * files: no cycle between any two files, a folder's `mod.rs` included (a child importing
//!   `super::X` where `X` lives in the parent's file, while the parent uses the child, is a
//!   cycle: shared items belong in a file of their own);
//! * folders, at every depth: no cycle between the child modules of any module, each child
//!   taken whole (all files under it), e.g. `kernels::cpu::repack` ↔ `kernels::cpu::x86`
//!   through different files, and, at the top, between the crate's rooms;
//! * `ffi` is the top: nothing outside it imports it.

use std::collections::{BTreeMap, BTreeSet};

/// File knots still left, each named by its hub (the folder whose `mod.rs` its children
/// import back while it uses them). None is left: they were removed by moving what the
/// children share out of the `mod.rs` (`kernels::cpu`, `loader`, `storage`, `tokenizer`,
/// `sampling::grammar`; `graph` by `graph::arch::def`, `ffi` by `ffi::perf_counters` and
/// `ffi::clock`, `kernels::quant` by `kernels::quant::blocks`, `model` by `model::json` and a
/// hot-swap registration that takes the model's pieces, `hotswap` by
/// `hotswap::{job, outcomes, staged}`, `device::cuda` by `device::cuda::common` and the
/// allocations beside the buffers). The test fails on any knot, and on an entry here that no
/// longer has one.
const KNOWN_KNOTS: &[&str] = &[];
use std::path::{Path, PathBuf};

/// A module path inside one crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// File → files it depends on, with where each dependency was seen first.
#[derive(Default)]
struct Deps {
    edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
    evidence: BTreeMap<(ModPath, ModPath), String>,
}

/// The modules of one crate: module path → file.
fn crate_files(root_dir: &Path, root_file: &str) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, prefix: &ModPath, out: &mut BTreeMap<ModPath, PathBuf>, skip: &Path) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path == skip {
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut p = prefix.clone();
                p.push(name);
                walk(&path, &p, out, skip);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let mut p = prefix.clone();
                if stem != "mod" {
                    p.push(stem.to_string());
                }
                out.insert(p, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root_dir, &Vec::new(), &mut out, &root_dir.join("bin"));
    // the root file is the crate itself, not a module named after it
    let root = out.remove(&vec![root_file.trim_end_matches(".rs").to_string()]);
    out.insert(Vec::new(), root.expect("crate root file"));
    out
}

/// The code with comments, string and char literals blanked (newlines kept, so line numbers
/// stay right).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if (c[i] == 'r' || (c[i] == 'b' && next == Some('r')))
            && (i == 0 || !ident(c[i - 1]))
            && {
                let mut j = i + if c[i] == 'b' { 2 } else { 1 };
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                c.get(j) == Some(&'"')
            }
        {
            // raw string: r"…", r#"…"#, br"…"
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &c[i..j.min(c.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && next == Some('\\') {
            // escaped char literal: '\n', '\'', '\u{…}'
            let mut j = i + 2;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            for _ in i..=j.min(c.len() - 1) {
                out.push(' ');
            }
            i = j + 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq)]
struct Tok {
    s: String,
    line: usize,
}

fn tokens(code: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let c: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < c.len() {
            if c[i].is_alphanumeric() || c[i] == '_' {
                let s = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                out.push(Tok {
                    s: c[s..i].iter().collect(),
                    line: n + 1,
                });
            } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
                out.push(Tok {
                    s: "::".into(),
                    line: n + 1,
                });
                i += 2;
            } else if !c[i].is_whitespace() {
                out.push(Tok {
                    s: c[i].to_string(),
                    line: n + 1,
                });
                i += 1;
            } else {
                i += 1;
            }
        }
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The paths of a use tree starting at `t[i]` (`a::b::{c, d::e}`, `a::*`), each as its
/// segments (a glob or `self` ends at its prefix), and the index after it.
fn use_tree(t: &[Tok], mut i: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix.to_vec();
    loop {
        match t.get(i).map(|x| x.s.as_str()) {
            Some("{") => {
                let mut all = Vec::new();
                i += 1;
                while i < t.len() && t[i].s != "}" {
                    let (sub, j) = use_tree(t, i, &path);
                    all.extend(sub);
                    i = j;
                    if t.get(i).is_some_and(|x| x.s == ",") {
                        i += 1;
                    }
                }
                return (all, i + 1);
            }
            Some("*") => return (vec![path], i + 1),
            Some("self") if !path.is_empty() => return (vec![path], i + 1),
            Some(s) if is_ident(s) => {
                path.push(s.to_string());
                i += 1;
                if t.get(i).is_some_and(|x| x.s == "::") {
                    i += 1;
                } else {
                    return (vec![path], i);
                }
            }
            _ => return (vec![path], i),
        }
    }
}

/// The files the code of module `me` (file `text`) depends on, as module paths, with the
/// line of each first mention.
fn file_deps(me: &ModPath, text: &str, modules: &BTreeSet<ModPath>) -> BTreeMap<ModPath, usize> {
    let t = tokens(&strip(text));
    let mut found = BTreeMap::new();
    // inline modules (`mod tests { … }`): name and the brace depth inside them
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let resolve = |full: ModPath| -> ModPath {
        let mut k = full.len();
        while k > 0 && !modules.contains(&full[..k].to_vec()) {
            k -= 1;
        }
        full[..k].to_vec()
    };
    let mut i = 0;
    while i < t.len() {
        let s = t[i].s.as_str();
        let prev = if i > 0 { t[i - 1].s.as_str() } else { "" };
        if s == "{" {
            depth += 1;
        } else if s == "}" {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
        } else if s == "mod"
            && t.get(i + 1).is_some_and(|x| is_ident(&x.s))
            && t.get(i + 2).is_some_and(|x| x.s == "{")
        {
            inline.push((t[i + 1].s.clone(), depth + 1));
        }
        let starts_path = t.get(i + 1).is_some_and(|x| x.s == "::")
            && prev != "::"
            && prev != "$"
            && prev != "in";
        if !starts_path || !is_ident(s) {
            i += 1;
            continue;
        }
        // the scope this code is in: the file's module and its inline modules
        let mut scope = me.clone();
        scope.extend(inline.iter().map(|(n, _)| n.clone()));
        let (base, from) = match s {
            "crate" => (Vec::new(), i + 2),
            "self" => (scope.clone(), i + 2),
            "super" => {
                let mut b = scope.clone();
                let mut j = i;
                while t.get(j).is_some_and(|x| x.s == "super")
                    && t.get(j + 1).is_some_and(|x| x.s == "::")
                {
                    b.pop();
                    j += 2;
                }
                (b, j)
            }
            _ => {
                let mut child = scope.clone();
                child.push(s.to_string());
                if !modules.contains(&child) {
                    i += 1;
                    continue;
                }
                (scope.clone(), i)
            }
        };
        let (paths, _) = use_tree(&t, from, &base);
        for p in paths {
            let target = resolve(p);
            found.entry(target).or_insert(t[i].line);
        }
        i += 1;
    }
    found.remove(me);
    found
}

fn dependencies(files: &BTreeMap<ModPath, PathBuf>, root: &Path) -> Deps {
    let modules: BTreeSet<ModPath> = files.keys().cloned().collect();
    let mut deps = Deps::default();
    for (me, file) in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (to, line) in file_deps(me, &text, &modules) {
            let rel = file.strip_prefix(root).unwrap_or(file);
            deps.evidence.insert(
                (me.clone(), to.clone()),
                format!("{}:{line}", rel.display()),
            );
            deps.edges.entry(me.clone()).or_default().insert(to);
        }
    }
    deps
}

/// A cycle in the graph (first node repeated at the end), if any.
fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        done: &mut BTreeSet<N>,
        path: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

/// The graph's knots: groups of two or more nodes that all reach each other (each holds at
/// least one cycle), each as the subgraph among its nodes.
fn knots<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<BTreeMap<N, BTreeSet<N>>> {
    let reach = |from: &N| -> BTreeSet<N> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<N, BTreeSet<N>> = graph.keys().map(|n| (n.clone(), reach(n))).collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for (n, r) in &reached {
        if placed.contains(n) || !r.contains(n) {
            continue;
        }
        let group: BTreeSet<N> = r
            .iter()
            .filter(|m| reached.get(*m).is_some_and(|rm| rm.contains(n)))
            .cloned()
            .collect();
        placed.extend(group.iter().cloned());
        let sub = group
            .iter()
            .map(|m| {
                let tos = graph[m]
                    .iter()
                    .filter(|t| group.contains(*t))
                    .cloned()
                    .collect();
                (m.clone(), tos)
            })
            .collect();
        out.push(sub);
    }
    out
}

fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// One cycle of every knot: among files, then among the child modules of each module (each
/// child with everything under it).
fn cycles(files: &BTreeMap<ModPath, PathBuf>, deps: &Deps, known: &[&str]) -> Vec<String> {
    let mut report = Vec::new();
    let mut left = BTreeSet::new();
    for knot in knots(&deps.edges) {
        // named by the modules' common prefix
        let mut hub_path: ModPath = knot.keys().next().expect("a knot has nodes").clone();
        for m in knot.keys() {
            let same = hub_path.iter().zip(m).take_while(|(a, b)| a == b).count();
            hub_path.truncate(same);
        }
        let hub = name(&hub_path);
        if known.contains(&hub.as_str()) {
            eprintln!("known knot left: {hub} ({} files)", knot.len());
            left.insert(hub);
            continue;
        }
        let c = find_cycle(&knot).expect("a knot has a cycle");
        let steps: Vec<String> = c
            .windows(2)
            .map(|w| {
                let seen = &deps.evidence[&(w[0].clone(), w[1].clone())];
                format!("  {} -> {} ({seen})", name(&w[0]), name(&w[1]))
            })
            .collect();
        report.push(format!(
            "files ({} in this knot: {}), e.g. {}\n{}",
            knot.len(),
            knot.keys().map(name).collect::<Vec<_>>().join(", "),
            c.iter().map(name).collect::<Vec<_>>().join(" -> "),
            steps.join("\n")
        ));
    }
    for gone in known.iter().filter(|k| !left.contains(**k)) {
        report.push(format!(
            "{gone} has no knot any more: remove it from KNOWN_KNOTS"
        ));
    }
    for parent in files.keys() {
        // child of `parent` that module `m` lies in, if any
        let child_of = |m: &ModPath| -> Option<String> {
            (m.len() > parent.len() && m.starts_with(parent)).then(|| m[parent.len()].clone())
        };
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
        for (from, tos) in &deps.edges {
            let Some(a) = child_of(from) else { continue };
            for to in tos {
                let Some(b) = child_of(to) else { continue };
                if a != b {
                    graph.entry(a.clone()).or_default().insert(b.clone());
                    seen.entry((a.clone(), b.clone())).or_insert_with(|| {
                        format!(
                            "{} -> {}: {}",
                            name(from),
                            name(to),
                            deps.evidence[&(from.clone(), to.clone())]
                        )
                    });
                }
            }
        }
        if known.contains(&name(parent).as_str()) {
            continue;
        }
        for knot in knots(&graph) {
            let c = find_cycle(&knot).expect("a knot has a cycle");
            let steps: Vec<String> = c
                .windows(2)
                .map(|w| {
                    format!(
                        "  {} -> {} ({})",
                        w[0],
                        w[1],
                        seen[&(w[0].clone(), w[1].clone())]
                    )
                })
                .collect();
            report.push(format!(
                "modules inside {}: {}\n{}",
                name(parent),
                c.join(" -> "),
                steps.join("\n")
            ));
        }
    }
    report
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library and each binary under `src/bin/<name>/`, as (label, root dir, root file).
fn crates() -> Vec<(String, PathBuf, String)> {
    let mut out = vec![("library".to_string(), src(), "lib.rs".to_string())];
    if let Ok(bins) = std::fs::read_dir(src().join("bin")) {
        for b in bins {
            let dir = b.unwrap().path();
            if dir.join("main.rs").is_file() {
                let label = format!("bin {}", dir.file_name().unwrap().to_string_lossy());
                out.push((label, dir, "main.rs".to_string()));
            }
        }
    }
    out
}

#[test]
fn no_import_cycle_at_any_depth() {
    let mut failures = Vec::new();
    for (label, dir, root) in crates() {
        let files = crate_files(&dir, &root);
        let deps = dependencies(&files, &dir);
        let n_edges: usize = deps.edges.values().map(BTreeSet::len).sum();
        eprintln!(
            "{label}: {} files, {n_edges} file dependencies",
            files.len()
        );
        assert!(
            files.len() >= 5 && n_edges >= files.len() / 2,
            "{label}: only {} files and {n_edges} dependencies: the parser no longer reads the code",
            files.len()
        );
        let known = if label == "library" { KNOWN_KNOTS } else { &[] };
        for c in cycles(&files, &deps, known) {
            failures.push(format!("{label}, {c}"));
        }
    }
    assert!(
        failures.is_empty(),
        "import cycles (see the dependency rule in src/lib.rs):\n{}",
        failures.join("\n")
    );
}

#[test]
fn ffi_is_the_top_and_nothing_imports_it() {
    let files = crate_files(&src(), "lib.rs");
    let deps = dependencies(&files, &src());
    let importers: Vec<String> = deps
        .edges
        .iter()
        .flat_map(|(from, tos)| tos.iter().map(move |to| (from, to)))
        .filter(|(from, to)| {
            to.first().is_some_and(|m| m == "ffi") && from.first().is_none_or(|m| m != "ffi")
        })
        .map(|(from, to)| deps.evidence[&(from.clone(), to.clone())].clone())
        .collect();
    assert!(
        importers.is_empty(),
        "modules below ffi import it: {importers:?}"
    );
}

#[test]
fn the_parser_sees_paths_groups_and_scopes_and_finds_cycles() {
    let m = |s: &str| -> ModPath {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split("::").map(String::from).collect()
        }
    };
    let modules: BTreeSet<ModPath> = ["", "a", "a::x", "a::y", "b", "c", "c::d"]
        .iter()
        .map(|s| m(s))
        .collect();
    let code = r#"
        use crate::{b::Thing, c::{d::X, Y}};
        // crate::nope::in_a_comment
        let s = "crate::b::in_a_string"; let q = '"'; let r = r"super::x";
        pub(in crate::c) fn f() { x::g(); mycrate::c::h(); }
        use super::*;
        mod tests { use super::y::Z; fn t() { super::super::b::k(); } }
    "#;
    let found: BTreeSet<ModPath> = file_deps(&m("a"), code, &modules).into_keys().collect();
    // `x::g` is the child `a::x`; inside `mod tests` (module `a::tests`), `super::y` is
    // `a::y` and `super::super::b` is `b`; `use super::*` from `a` is the crate root
    let want: BTreeSet<ModPath> = ["b", "c::d", "c", "a::x", "a::y", ""]
        .iter()
        .map(|s| m(s))
        .collect();
    assert_eq!(found, want);
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    graph.entry("a").or_default().insert("b");
    graph.entry("b").or_default().insert("c");
    assert_eq!(find_cycle(&graph), None);
    graph.entry("c").or_default().insert("a");
    let cycle = find_cycle(&graph).expect("a -> b -> c -> a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}
