//! NVRTC, CUDA's run-time compiler, loaded with `dlopen` like the driver: CUDA C source to
//! PTX, without a GPU (so CI can compile every kernel) and without a toolkit (PyPI's
//! `nvidia-cuda-nvrtc-cu12` wheel ships the library).
//!
//! Where it is looked for, in order: the file named by `LLAMA_HOTSWAP_NVRTC`, then
//! `libnvrtc.so`, `libnvrtc.so.13`, `libnvrtc.so.12` on the loader's path, then
//! `/usr/local/cuda/lib64/libnvrtc.so`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// Names a library file to use as NVRTC.
pub const NVRTC_ENV: &str = "LLAMA_HOTSWAP_NVRTC";

const LIBRARIES: [&CStr; 4] = [
    c"libnvrtc.so",
    c"libnvrtc.so.13",
    c"libnvrtc.so.12",
    c"/usr/local/cuda/lib64/libnvrtc.so",
];

type Program = *mut c_void;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type BytesFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> c_int;

/// The loaded library's entry points.
struct Nvrtc {
    version: (i32, i32),
    path: String,
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: BytesFn,
    ptx_size: SizeFn,
    ptx: BytesFn,
    destroy: DestroyFn,
}

fn open() -> Result<Nvrtc, String> {
    let mut names: Vec<CString> = Vec::new();
    if let Some(p) = std::env::var_os(NVRTC_ENV).filter(|p| !p.is_empty()) {
        let p = p.to_string_lossy().into_owned();
        names.push(CString::new(p).map_err(|_| format!("{NVRTC_ENV} holds a NUL byte"))?);
    }
    names.extend(LIBRARIES.iter().map(|n| (*n).to_owned()));
    let mut handle: *mut c_void = std::ptr::null_mut();
    let mut path = String::new();
    for name in &names {
        // SAFETY: `name` is NUL-terminated; loading NVRTC runs only its initializers.
        handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            path = name.to_string_lossy().into_owned();
            break;
        }
    }
    if handle.is_null() {
        return Err(format!(
            "no NVRTC library found (set {NVRTC_ENV} to libnvrtc.so.12 of PyPI's nvidia-cuda-nvrtc-cu12, or install a CUDA toolkit)"
        ));
    }
    let sym = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `handle` is a live dlopen handle (never closed); `name` is NUL-terminated.
        let a = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if a.is_null() {
            Err(format!("{path} lacks {}", name.to_string_lossy()))
        } else {
            Ok(a)
        }
    };
    // SAFETY (all transmutes below): each address is the named NVRTC function, whose C
    // signature (nvrtc.h, stable since CUDA 7) is the function type it is cast to.
    let nvrtc = unsafe {
        Nvrtc {
            version: (0, 0),
            path: path.clone(),
            create: std::mem::transmute::<*mut c_void, CreateFn>(sym(c"nvrtcCreateProgram")?),
            compile: std::mem::transmute::<*mut c_void, CompileFn>(sym(c"nvrtcCompileProgram")?),
            log_size: std::mem::transmute::<*mut c_void, SizeFn>(sym(c"nvrtcGetProgramLogSize")?),
            log: std::mem::transmute::<*mut c_void, BytesFn>(sym(c"nvrtcGetProgramLog")?),
            ptx_size: std::mem::transmute::<*mut c_void, SizeFn>(sym(c"nvrtcGetPTXSize")?),
            ptx: std::mem::transmute::<*mut c_void, BytesFn>(sym(c"nvrtcGetPTX")?),
            destroy: std::mem::transmute::<*mut c_void, DestroyFn>(sym(c"nvrtcDestroyProgram")?),
        }
    };
    // SAFETY: as above.
    let version_fn =
        unsafe { std::mem::transmute::<*mut c_void, VersionFn>(sym(c"nvrtcVersion")?) };
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out pointers.
    let rc = unsafe { version_fn(&mut major, &mut minor) };
    if rc != 0 {
        return Err(format!("{path}: nvrtcVersion failed ({rc})"));
    }
    Ok(Nvrtc {
        version: (major, minor),
        ..nvrtc
    })
}

fn library() -> &'static Result<Nvrtc, String> {
    static LIB: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    LIB.get_or_init(open)
}

/// The NVRTC version ("12.8") and the library's path, or why there is none.
pub fn nvrtc_version() -> Result<(String, String), String> {
    let lib = library().as_ref().map_err(Clone::clone)?;
    Ok((
        format!("{}.{}", lib.version.0, lib.version.1),
        lib.path.clone(),
    ))
}

/// Compiles CUDA C `source` (named `name` in messages) to PTX for virtual architecture
/// `arch` (e.g. 80 for `compute_80`). The error carries NVRTC's log.
pub fn compile_ptx(source: &str, name: &str, arch: u32) -> Result<String, String> {
    let lib = library().as_ref().map_err(Clone::clone)?;
    let src = CString::new(source).map_err(|_| format!("{name}: source holds a NUL byte"))?;
    let cname = CString::new(name).map_err(|_| format!("{name}: name holds a NUL byte"))?;
    let options: Vec<CString> = [
        format!("--gpu-architecture=compute_{arch}"),
        "--std=c++17".to_string(),
        // FMA contraction is fixed per compiled PTX: the same results on every run.
        "--fmad=true".to_string(),
        "-default-device".to_string(),
    ]
    .into_iter()
    .map(|o| CString::new(o).expect("no NUL"))
    .collect();
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: every pointer is a live NUL-terminated string; no headers are passed.
    let rc = unsafe {
        (lib.create)(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 || prog.is_null() {
        return Err(format!("{name}: nvrtcCreateProgram failed ({rc})"));
    }
    // SAFETY: `prog` is a live program; the options outlive the call.
    let rc = unsafe { (lib.compile)(prog, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
    let read = |size_fn: SizeFn, bytes_fn: BytesFn| -> String {
        let mut n = 0usize;
        // SAFETY: `prog` is live; `n` is a valid out pointer.
        if unsafe { size_fn(prog, &mut n) } != 0 || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` holds the `n` bytes NVRTC said it writes (NUL included).
        if unsafe { bytes_fn(prog, buf.as_mut_ptr().cast::<c_char>()) } != 0 {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    };
    let result = if rc != 0 {
        Err(format!(
            "{name}: NVRTC {}.{} could not compile for compute_{arch} ({rc}):\n{}",
            lib.version.0,
            lib.version.1,
            read(lib.log_size, lib.log)
        ))
    } else {
        Ok(read(lib.ptx_size, lib.ptx))
    };
    // SAFETY: `prog` is live and destroyed once.
    unsafe { (lib.destroy)(&mut prog) };
    result
}
