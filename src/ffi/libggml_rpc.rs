//! rpc-servers a program registered with upstream's libggml (`--rpc host:port` in the tools:
//! `ggml_backend_rpc_add_server` through libggml's registry) become devices of this library.
//!
//! The pinned `rpc-server` serves one client at a time. So when our registry is created, every
//! libggml RPC device is first readied while nobody is connected (its buffer type, whose first
//! use asks the server for alignment and maximum size, is made now), then our client connects
//! (`crate::device`), and from then on libggml's own queries of that device's memory
//! (`ggml_backend_dev_memory`, `_get_props`: the tools print them and size models by them) are
//! answered from our connection: otherwise libggml would open a second connection and wait
//! for ever behind ours. This is done by replacing two function pointers in libggml's device
//! object, after checking that the object has the layout of the pinned `ggml-backend-impl.h`
//! (the other entries, read through it, must give what libggml's public functions give). A
//! device whose layout does not check out is left alone and not taken over (one log line).

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use super::device::{ggml_text, libggml, libggml_devices};
use super::types::*;
use crate::device::Registry;

type GetMemory = unsafe extern "C" fn(ggml_backend_dev_t, *mut usize, *mut usize);
type GetProps = unsafe extern "C" fn(ggml_backend_dev_t, *mut ggml_backend_dev_props);
type GetText = unsafe extern "C" fn(ggml_backend_dev_t) -> *const c_char;
type GetType = unsafe extern "C" fn(ggml_backend_dev_t) -> GgmlBackendDevType;

/// `struct ggml_backend_device_i` of the pinned `ggml-backend-impl.h`: the first five entries
/// by type, the other ten as addresses.
#[repr(C)]
struct DeviceIface {
    get_name: Option<GetText>,
    get_description: Option<GetText>,
    get_memory: Option<GetMemory>,
    get_type: Option<GetType>,
    get_props: Option<GetProps>,
    rest: [*mut c_void; 10],
}

/// `struct ggml_backend_device` of the pinned `ggml-backend-impl.h`.
#[repr(C)]
struct LibggmlDevice {
    iface: DeviceIface,
    reg: *mut c_void,
    context: *mut c_void,
}

/// libggml's RPC devices taken over: (device address, its own get_name).
static TAKEN_OVER: Mutex<Vec<(usize, GetText)>> = Mutex::new(Vec::new());

/// Installed as the library's constructor: the device registry asks [`program_rpc_endpoints`]
/// when it is created.
extern "C" fn install() {
    crate::device::set_external_rpc_source(program_rpc_endpoints);
}

#[used]
#[link_section = ".init_array"]
static INSTALL: extern "C" fn() = install;

/// Whether libggml's device `dev` is an rpc-server's (its registry is libggml's `RPC`; the
/// per-server registries that enumerate them are named `RPC[host:port]`).
fn is_rpc_device(dev: ggml_backend_dev_t) -> bool {
    let (Some(reg_of), Some(reg_name)) = (
        libggml::ggml_backend_dev_backend_reg(),
        libggml::ggml_backend_reg_name(),
    ) else {
        return false;
    };
    // SAFETY: `dev` is one of libggml's live devices; its registry lives as long.
    let reg = unsafe { reg_of(dev) };
    // SAFETY: as above.
    if reg.is_null() {
        return false;
    }
    // SAFETY: as above.
    let name = ggml_text(unsafe { reg_name(reg) });
    name == "RPC" || name.starts_with("RPC[")
}

/// The endpoints of libggml's RPC devices (their descriptions, `host:port`), in libggml's
/// order, each device readied and taken over as the module comment says. Empty without
/// libggml.
fn program_rpc_endpoints() -> Vec<String> {
    let (Some(describe), Some(buffer_type)) = (
        libggml::ggml_backend_dev_description(),
        libggml::ggml_backend_dev_buffer_type(),
    ) else {
        return Vec::new();
    };
    let mut endpoints: Vec<String> = Vec::new();
    for dev in libggml_devices().into_iter().filter(|&d| is_rpc_device(d)) {
        // SAFETY: libggml's own device, passed to libggml's function (it connects, asks and
        // disconnects: nobody else is connected to the server yet).
        let _ = unsafe { buffer_type(dev) };
        if !take_over(dev) {
            continue;
        }
        // SAFETY: as above.
        let endpoint = ggml_text(unsafe { describe(dev) });
        if !endpoints.contains(&endpoint) {
            endpoints.push(endpoint);
        }
    }
    endpoints
}

/// Checks `dev`'s layout and points its memory and props entries at ours. False (and one
/// log line) when the layout does not match the pinned header.
fn take_over(dev: ggml_backend_dev_t) -> bool {
    let (Some(name), Some(description), Some(kind), Some(reg_of)) = (
        libggml::ggml_backend_dev_name(),
        libggml::ggml_backend_dev_description(),
        libggml::ggml_backend_dev_type(),
        libggml::ggml_backend_dev_backend_reg(),
    ) else {
        return false;
    };
    let device = dev.cast::<LibggmlDevice>();
    // SAFETY: `dev` is one of libggml's live devices, an object at least as large as the
    // pinned `struct ggml_backend_device` (every libggml device is one); the reads below only
    // compare what its entries return with libggml's public answers.
    let matches = unsafe {
        let iface = &(*device).iface;
        match (iface.get_name, iface.get_description, iface.get_type) {
            (Some(n), Some(d), Some(t)) => {
                n(dev) == name(dev)
                    && d(dev) == description(dev)
                    && t(dev).0 == kind(dev).0
                    && (*device).reg == reg_of(dev)
                    && iface.get_memory.is_some()
                    && iface.get_props.is_some()
            }
            _ => false,
        }
    };
    if !matches {
        crate::log_error!(
            "libggml's RPC device {}: its layout is not the one of the pinned ggml, so its server is not used by llama-hotswap (set LLAMA_RPC_SERVERS instead)",
            // SAFETY: libggml's own device, passed to libggml's function.
            ggml_text(unsafe { name(dev) })
        );
        return false;
    }
    let mut taken = TAKEN_OVER.lock().unwrap_or_else(|p| p.into_inner());
    if taken.iter().any(|&(d, _)| d == dev as usize) {
        return true;
    }
    // SAFETY: checked above: these entries are the device's get_name / get_memory /
    // get_props; the object is libggml's heap device, writable, alive for the process.
    unsafe {
        let own_name = (*device).iface.get_name.expect("checked above");
        std::ptr::write_volatile(&mut (*device).iface.get_memory, Some(rpc_device_memory));
        std::ptr::write_volatile(&mut (*device).iface.get_props, Some(rpc_device_props));
        taken.push((dev as usize, own_name));
    }
    true
}

/// The name of a taken-over device, through its own entry (never through our exports).
fn taken_over_name(dev: ggml_backend_dev_t) -> Option<String> {
    let taken = TAKEN_OVER.lock().unwrap_or_else(|p| p.into_inner());
    let &(_, get_name) = taken.iter().find(|&&(d, _)| d == dev as usize)?;
    // SAFETY: the device's own get_name, on the device it belongs to.
    Some(ggml_text(unsafe { get_name(dev) }))
}

/// Free and total memory of our device of the same name (the same server and device), 0 and
/// 0 with a log line when there is none (its server could not be reached).
fn memory_of(dev: ggml_backend_dev_t) -> (usize, usize) {
    let name = taken_over_name(dev).unwrap_or_default();
    match Registry::global().by_name(&name) {
        Some(device) => {
            let memory = device.memory();
            let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            (to_usize(memory.free), to_usize(memory.total))
        }
        None => {
            crate::log_error!(
                "ggml_backend_dev_memory: libggml's RPC device {name} has no server connection in llama-hotswap (see the log of its connection): 0 bytes"
            );
            (0, 0)
        }
    }
}

/// libggml's `get_memory` entry of a taken-over RPC device.
unsafe extern "C" fn rpc_device_memory(
    dev: ggml_backend_dev_t,
    free: *mut usize,
    total: *mut usize,
) {
    let (f, t) = std::panic::catch_unwind(|| memory_of(dev)).unwrap_or((0, 0));
    if !free.is_null() {
        // SAFETY: libggml's caller passes valid out-pointers (non-NULL checked).
        unsafe { *free = f };
    }
    if !total.is_null() {
        // SAFETY: as above.
        unsafe { *total = t };
    }
}

/// libggml's `get_props` entry of a taken-over RPC device: upstream's RPC device's answer
/// (name, description, type GPU, memory, async/events/mmap capabilities), the memory ours.
unsafe extern "C" fn rpc_device_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    if props.is_null() {
        return;
    }
    let device = dev.cast::<LibggmlDevice>();
    // SAFETY: a taken-over device (checked layout); `props` is libggml's zeroed out-struct.
    unsafe {
        let iface = &(*device).iface;
        (*props).name = iface.get_name.map_or(std::ptr::null(), |f| f(dev));
        (*props).description = iface.get_description.map_or(std::ptr::null(), |f| f(dev));
        (*props).r#type = iface.get_type.map_or(
            GgmlBackendDevType(ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_GPU as i32),
            |f| f(dev),
        );
        rpc_device_memory(dev, &mut (*props).memory_free, &mut (*props).memory_total);
        (*props).caps = ggml_backend_dev_caps {
            r#async: true,
            host_buffer: false,
            buffer_from_host_ptr: false,
            events: true,
            mmap_support: true,
        };
    }
}

/// At a model load without a `devices` list: a libggml RPC device that our registry did not
/// take when it was created is taken over now if our registry reached its server another way
/// (`LLAMA_RPC_SERVERS`), so that libggml's memory queries do not wait behind our connection;
/// otherwise (the program registered its server after our registry was created, at its first
/// model load) one warning per device says it is not used.
pub(super) fn warn_unseen_rpc_devices() {
    static SEEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let Some(describe) = libggml::ggml_backend_dev_description() else {
        return;
    };
    let registry = Registry::global();
    let taken: Vec<usize> = TAKEN_OVER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|&(d, _)| d)
        .collect();
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    for dev in libggml_devices().into_iter().filter(|&d| is_rpc_device(d)) {
        let address = dev as usize;
        if taken.contains(&address) || seen.contains(&address) {
            continue;
        }
        seen.push(address);
        // SAFETY: libggml's own device, passed to libggml's function.
        let endpoint = ggml_text(unsafe { describe(dev) });
        if registry
            .devices()
            .iter()
            .any(|d| d.description() == endpoint)
        {
            take_over(dev);
        } else {
            crate::log_warn!(
                "rpc-server {endpoint} was registered with libggml after llama-hotswap's device registry was created (at the first model load): its devices are not used (register servers before, or list them in LLAMA_RPC_SERVERS)"
            );
        }
    }
}
