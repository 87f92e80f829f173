//! The tensor table each architecture declares from hyperparameters alone
//! (`graph::arch::declared_tensors`, the model `llama_model_init_from_user` builds), checked
//! against upstream's: every fixture of test-llama-archs was written by upstream's
//! `llama_model_init_from_user` + `llama_model_save_to_file`, so its tensors (names and
//! shapes) are exactly what upstream's loader created from that metadata, except the few
//! model fields its saver does not list (`graph::arch::unsaved_by_upstream`: declared, not
//! compared here; the C probe's tensor count compares them).
//!
//! The fixture folder: `LLAMA_HOTSWAP_ARCH_FIXTURES`, else the test cache's (made by
//! scripts/upstream-arch-fixtures.sh); without it the test says so and checks nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use llama::graph::arch::{
    declared_tensors, declares_tensors, load_params, unsaved_by_upstream, DECLARES_TENSORS,
    METADATA_REFUSED,
};
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::{LoadMode, Model};

fn fixtures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_HOTSWAP_ARCH_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache/llama-hotswap/fixtures/llama-archs-s1"),
    };
    dir.join(".complete").exists().then_some(dir)
}

fn load_meta(path: &std::path::Path) -> Model {
    load(
        ModelSource::Path(path.to_path_buf()),
        LoadOptions {
            load_mode: LoadMode::Mmap,
            no_alloc: true,
            progress: Some(&mut |_| true),
            hotswap: false,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `arch` is refused for a reason other than its table ([`METADATA_REFUSED`]).
fn refused(arch: &str) -> bool {
    METADATA_REFUSED.iter().any(|(a, _)| *a == arch)
}

/// Compares one fixture: None when equal, else what differs.
fn compare(model: &Model) -> Result<(), String> {
    let hp = load_params(model)?;
    let declared = declared_tensors(model, &hp).map_err(|e| e.to_string())?;
    let mut ours: BTreeMap<&str, [i64; 4]> = BTreeMap::new();
    for w in &declared {
        ours.insert(&w.name, w.ne);
    }
    // what upstream creates but its saver leaves out of the fixture: declared, not compared
    for name in unsaved_by_upstream(&model.arch) {
        if ours.remove(name).is_none() {
            return Err(format!(
                "{name} (created upstream, not saved) is not declared"
            ));
        }
    }
    let mut theirs: BTreeMap<String, [i64; 4]> = BTreeMap::new();
    for t in model.tensors.iter() {
        theirs.insert(t.name.clone(), t.read().layout.ne);
    }
    let mut why = Vec::new();
    for (name, ne) in &theirs {
        match ours.get(name.as_str()) {
            None => why.push(format!("missing {name}")),
            Some(o) if o != ne => why.push(format!("{name}: {o:?} vs upstream's {ne:?}")),
            _ => {}
        }
    }
    for name in ours.keys() {
        if !theirs.contains_key(*name) {
            why.push(format!("extra {name}"));
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        why.truncate(6);
        Err(why.join("; "))
    }
}

#[test]
fn declared_tensors_are_upstreams_for_the_listed_architectures() {
    let Some(dir) = fixtures_dir() else {
        eprintln!("SKIP: no test-llama-archs fixtures (scripts/upstream-arch-fixtures.sh)");
        return;
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    paths.sort();
    // per architecture: every fixture equal, or the first difference
    let mut verdict: BTreeMap<String, Result<usize, String>> = BTreeMap::new();
    for path in &paths {
        let model = load_meta(path);
        if !llama::graph::arch::is_supported(&model.arch) {
            continue;
        }
        let file = path.file_stem().unwrap().to_string_lossy().to_string();
        let entry = verdict.entry(model.arch.clone()).or_insert(Ok(0));
        match (compare(&model), &entry) {
            (Ok(()), Ok(n)) => *entry = Ok(n + 1),
            (Err(e), Ok(_)) => *entry = Err(format!("{file}: {e}")),
            _ => {}
        }
    }
    let equal: Vec<&str> = verdict
        .iter()
        .filter(|(_, v)| v.is_ok())
        .map(|(a, _)| a.as_str())
        .collect();
    eprintln!("equal ({}): {:?}", equal.len(), equal);
    let mut wrong = Vec::new();
    for (arch, v) in &verdict {
        let listed = declares_tensors(arch);
        match v {
            Err(e) if listed => wrong.push(format!("{arch} is listed but differs: {e}")),
            Ok(_) if !listed && !refused(arch) => {
                wrong.push(format!("{arch} equals upstream's: list it"))
            }
            Ok(_) if !listed => eprintln!("refused although equal: {arch}"),
            Err(e) => eprintln!("refused {e}"),
            Ok(_) => {}
        }
    }
    for (arch, _) in METADATA_REFUSED {
        if declares_tensors(arch) {
            wrong.push(format!("{arch} is both listed and refused"));
        }
    }
    for arch in DECLARES_TENSORS {
        if !verdict.contains_key(*arch) {
            wrong.push(format!("{arch} is listed but has no fixture"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
