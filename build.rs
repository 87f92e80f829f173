fn main() {
    // llama.cpp installs libllama.so.0 as the SONAME; drop-in users link against that name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libllama.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
