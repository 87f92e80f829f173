use std::path::PathBuf;
use std::process::Command;

fn main() {
    // llama.cpp installs libllama.so.0 as the SONAME; drop-in users link against that name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libllama.so.0");
    println!("cargo:rerun-if-changed=build.rs");
    build_cpp_shim();
}

/// Compiles cpp/llama_ext.cpp (upstream's C++ entry points over our C functions, see
/// docs/dropin.md) with the system C++ compiler (`$CXX`, else `c++`) into a static archive
/// linked whole into the library, and adds cpp/exports.map to the version script so the
/// C++ symbols are exported (rustc exports only the Rust ones). Hand-written rather than the
/// `cc` crate: one file, two commands.
fn build_cpp_shim() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let source = manifest.join("cpp/llama_ext.cpp");
    let map = manifest.join("cpp/exports.map");
    let header = manifest.join("include/llama.h");
    for path in [&source, &map, &header] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-env-changed=CXX");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let object = out.join("llama_ext.o");
    let status = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-O2",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wall",
            "-Wextra",
        ])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-c")
        .arg(&source)
        .arg("-o")
        .arg(&object)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler '{cxx}': {e}"));
    assert!(status.success(), "compiling cpp/llama_ext.cpp failed");
    let archive = out.join("libllama_ext_cpp.a");
    let _ = std::fs::remove_file(&archive);
    let status = Command::new(std::env::var("AR").unwrap_or_else(|_| "ar".into()))
        .arg("crs")
        .arg(&archive)
        .arg(&object)
        .status()
        .expect("cannot run ar");
    assert!(status.success(), "ar failed");
    // Into the cdylib only: the rlib (and so every Rust test binary, which links the crate
    // twice through its dev-dependency on itself) must not carry a second copy of the C
    // symbols the shim calls, or the test binaries fail to link with duplicate symbols.
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--whole-archive,{},--no-whole-archive",
        archive.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-lstdc++");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
