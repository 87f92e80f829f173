//! The owned arena of load modes NONE and DIRECT_IO: 4 KiB pages filled by the page copier
//! (userfaultfd) where the kernel allows it, else faulted in and read into (also with
//! LLAMA_HOTSWAP_NO_PAGE_COPY=1), transparent huge pages with LLAMA_HOTSWAP_HUGE_PAGES=1.
//! The bytes must be the file's exactly either way; with huge pages asked for and the kernel offering them for advised
//! memory (/sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise`), the arena
//! must actually get some (AnonHugePages of its mapping in /proc/self/smaps).

use std::path::{Path, PathBuf};

use llama::device::Registry;
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::{GgmlType, Gguf};
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::{LoadMode, Model};

mod common;

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load_cpu(path: &Path, mode: LoadMode) -> Model {
    load(
        ModelSource::Path(path.to_path_buf()),
        LoadOptions {
            load_mode: mode,
            placement: PlacementParams {
                registry: Box::leak(Box::new(Registry::with_virtual_gpus(&[]))),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap()
}

/// The selected value of a THP sysfs setting ("[madvise]" → "madvise").
fn thp_setting(name: &str) -> Option<String> {
    let text =
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{name}")).ok()?;
    let start = text.find('[')? + 1;
    let end = text[start..].find(']')? + start;
    Some(text[start..end].to_string())
}

/// AnonHugePages (bytes) of the mapping that contains `addr`.
fn anon_huge_bytes_at(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = (a..b).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                return Some(kib * 1024);
            }
        }
    }
    None
}

#[test]
fn owned_arena_holds_the_files_bytes_and_gets_huge_pages_when_asked_and_offered() {
    // F32 FFN matrices of 1024 x 2048 (8 MiB each): whole 2 MiB blocks inside the arena.
    let base = tiny_llama(&TinyLlamaOpts {
        n_embd: 1024,
        n_ff: 2048,
        n_layer: 2,
        ..TinyLlamaOpts::with_type(GgmlType::F32)
    })
    .unwrap();
    let dir = Dir(std::env::temp_dir().join(format!("llama-hotswap-arena-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("m.gguf");
    base.write_to(&path).unwrap();
    let file = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&file).unwrap();

    // Whether this kernel and sandbox allow the page copier at all (the file was just
    // written, so it is in the page cache).
    let copier_available = {
        let mut scratch =
            llama::storage::host::alloc_pages(file.len().next_multiple_of(4096)).unwrap();
        llama::storage::host::PageCopier::new(&std::fs::File::open(&path).unwrap(), &mut scratch)
            .inspect_err(|e| eprintln!("no page copier here: {e}"))
            .is_ok()
    };
    let mut faults = Vec::new();
    for (mode, huge_pages, no_copy) in [
        (LoadMode::None, false, false),
        (LoadMode::None, false, true),
        (LoadMode::None, true, false),
        (LoadMode::DirectIo, true, false),
    ] {
        // The only test of this binary: nothing else reads the environment concurrently.
        set_env(llama::storage::host::HUGE_PAGES_ENV, huge_pages);
        set_env(llama::storage::host::NO_PAGE_COPY_ENV, no_copy);
        let before = minor_faults();
        let model = load_cpu(&path, mode);
        faults.push(minor_faults() - before);
        let mut largest = (0usize, 0usize);
        for t in g.tensors() {
            let state = model.tensors.get(t.name).unwrap().read();
            let bytes = state.host_bytes().expect("owned host memory");
            let off = t.abs_offset(&g) as usize;
            assert!(
                bytes == &file[off..off + t.nbytes as usize],
                "{mode:?}: {} differs from the file",
                t.name
            );
            if bytes.len() > largest.1 {
                largest = (bytes.as_ptr() as usize, bytes.len());
            }
        }
        assert!(largest.1 >= 8 << 20, "{largest:?}");
        let offered = matches!(
            thp_setting("enabled").as_deref(),
            Some("always" | "madvise")
        );
        let huge = anon_huge_bytes_at(largest.0);
        eprintln!(
            "{mode:?}: THP enabled={:?}, AnonHugePages of the arena: {huge:?}",
            thp_setting("enabled")
        );
        if offered && huge_pages {
            assert!(
                huge.unwrap_or(0) >= 2 << 20,
                "{mode:?}: the arena got no huge pages ({huge:?})"
            );
        }
    }
    // The page copier fills the arena without a fault per page: a small fraction of the
    // faults of the same load reading into faulted-in pages (one per 4 KiB page).
    eprintln!(
        "minor faults: page copier {}, reads {}",
        faults[0], faults[1]
    );
    let pages = (file.len() / 4096) as i64;
    assert!(
        faults[1] >= pages / 2,
        "reads took {} faults for {pages} pages",
        faults[1]
    );
    if copier_available {
        assert!(faults[0] * 4 < faults[1], "{faults:?}");
    }
    set_env(llama::storage::host::NO_PAGE_COPY_ENV, false);
}

fn set_env(name: &str, on: bool) {
    if on {
        std::env::set_var(name, "1");
    } else {
        std::env::remove_var(name);
    }
}

/// Minor page faults of this process so far.
fn minor_faults() -> i64 {
    common::rusage_self().ru_minflt
}
