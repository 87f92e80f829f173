//! The bytes of ggml-rpc protocol 7.0 (`ggml/src/ggml-rpc/ggml-rpc.cpp` at the pinned commit):
//! command numbers, the packed `rpc_tensor`, request layouts and the parsers of every reply.
//! Pure functions over byte slices: no socket here, so the reply parsers can be fuzzed.
//!
//! Framing (little-endian, packed):
//! * request: `cmd: u8 | size: u64 | size bytes`
//! * reply (for the commands that have one): `size: u64 | size bytes`
//!
//! Commands without a reply (FREE_BUFFER, BUFFER_CLEAR, SET_TENSOR, MEMSET_TENSOR,
//! INIT_TENSOR, GRAPH_COMPUTE, GRAPH_RECOMPUTE): the server closes the connection when one
//! fails, which the next command with a reply sees.

/// The protocol version this client speaks (`RPC_PROTO_*_VERSION` in `ggml-rpc.h`).
pub const PROTO_MAJOR: u8 = 7;
pub const PROTO_MINOR: u8 = 0;
pub const PROTO_PATCH: u8 = 0;

/// `RPC_CONN_CAPS_SIZE` (transport.h): transport upgrade capabilities in HELLO. All zero:
/// plain TCP, no RDMA.
pub const CONN_CAPS_SIZE: usize = 24;

/// ggml's `GGML_MAX_DIMS`, `GGML_MAX_SRC`, `GGML_MAX_OP_PARAMS / 4`, `GGML_MAX_NAME`.
pub const MAX_DIMS: usize = 4;
pub const MAX_SRC: usize = 10;
pub const OP_PARAMS_I32: usize = 16;
pub const MAX_NAME: usize = 64;

/// `sizeof(rpc_tensor)`: id 8, type 4, buffer 8, ne 16, nb 16, op 4, op_params 64, flags 4,
/// src 80, view_src 8, view_offs 8, data 8, name 64, use_count 4.
pub const RPC_TENSOR_SIZE: usize = 296;

/// Set-by-hash is tried for writes larger than this (`HASH_THRESHOLD`, 10 MiB).
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;

/// `enum rpc_cmd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cmd {
    AllocBuffer = 0,
    GetAlignment = 1,
    GetMaxSize = 2,
    BufferGetBase = 3,
    FreeBuffer = 4,
    BufferClear = 5,
    SetTensor = 6,
    SetTensorHash = 7,
    GetTensor = 8,
    CopyTensor = 9,
    GraphCompute = 10,
    GetDeviceMemory = 11,
    InitTensor = 12,
    GetAllocSize = 13,
    Hello = 14,
    DeviceCount = 15,
    GraphRecompute = 16,
    MemsetTensor = 17,
}

impl Cmd {
    /// Upstream's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Cmd::AllocBuffer => "ALLOC_BUFFER",
            Cmd::GetAlignment => "GET_ALIGNMENT",
            Cmd::GetMaxSize => "GET_MAX_SIZE",
            Cmd::BufferGetBase => "BUFFER_GET_BASE",
            Cmd::FreeBuffer => "FREE_BUFFER",
            Cmd::BufferClear => "BUFFER_CLEAR",
            Cmd::SetTensor => "SET_TENSOR",
            Cmd::SetTensorHash => "SET_TENSOR_HASH",
            Cmd::GetTensor => "GET_TENSOR",
            Cmd::CopyTensor => "COPY_TENSOR",
            Cmd::GraphCompute => "GRAPH_COMPUTE",
            Cmd::GetDeviceMemory => "GET_DEVICE_MEMORY",
            Cmd::InitTensor => "INIT_TENSOR",
            Cmd::GetAllocSize => "GET_ALLOC_SIZE",
            Cmd::Hello => "HELLO",
            Cmd::DeviceCount => "DEVICE_COUNT",
            Cmd::GraphRecompute => "GRAPH_RECOMPUTE",
            Cmd::MemsetTensor => "MEMSET_TENSOR",
        }
    }

    /// The exact size of this command's reply, None for commands without one (GET_TENSOR's
    /// size is the request's and is checked by the caller).
    pub fn reply_size(self) -> Option<usize> {
        match self {
            Cmd::Hello => Some(4 + CONN_CAPS_SIZE),
            Cmd::DeviceCount => Some(4),
            Cmd::AllocBuffer | Cmd::GetDeviceMemory => Some(16),
            Cmd::GetAlignment | Cmd::GetMaxSize | Cmd::BufferGetBase | Cmd::GetAllocSize => Some(8),
            Cmd::SetTensorHash | Cmd::CopyTensor => Some(1),
            Cmd::GetTensor => None,
            Cmd::FreeBuffer
            | Cmd::BufferClear
            | Cmd::SetTensor
            | Cmd::GraphCompute
            | Cmd::InitTensor
            | Cmd::GraphRecompute
            | Cmd::MemsetTensor => None,
        }
    }
}

/// What is wrong with a reply (the connection layer adds the server and the command).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("reply of {got} bytes, expected {expected}")]
    Size { expected: u64, got: u64 },
    #[error("protocol version {major}.{minor}.{patch}, this client speaks {PROTO_MAJOR}.{PROTO_MINOR}.x (major equal, minor at most {PROTO_MINOR})")]
    Version { major: u8, minor: u8, patch: u8 },
    #[error("{0}")]
    Invalid(String),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Checks that a reply body has exactly `expected` bytes.
pub fn check_size(body: &[u8], expected: usize) -> Result<(), ReplyError> {
    if body.len() != expected {
        return Err(ReplyError::Size {
            expected: expected as u64,
            got: body.len() as u64,
        });
    }
    Ok(())
}

/// The server's protocol version from a HELLO reply; refused unless the major version is
/// ours and the minor one is not newer (upstream's client rule). Transport caps must be
/// zero: we offered none, so a server asking for an upgrade is not one we can follow.
pub fn parse_hello(body: &[u8]) -> Result<(u8, u8, u8), ReplyError> {
    check_size(body, 4 + CONN_CAPS_SIZE)?;
    let (major, minor, patch) = (body[0], body[1], body[2]);
    if major != PROTO_MAJOR || minor > PROTO_MINOR {
        return Err(ReplyError::Version {
            major,
            minor,
            patch,
        });
    }
    if body[4..].iter().any(|&b| b != 0) {
        return Err(ReplyError::Invalid(
            "the server asks for a transport upgrade this client did not offer".into(),
        ));
    }
    Ok((major, minor, patch))
}

/// Most devices one server may report: a bound on what a hostile reply makes us allocate.
pub const MAX_DEVICES_PER_SERVER: u32 = 256;

/// DEVICE_COUNT: at least one device (upstream registers none for zero), at most
/// [`MAX_DEVICES_PER_SERVER`].
pub fn parse_device_count(body: &[u8]) -> Result<u32, ReplyError> {
    check_size(body, 4)?;
    let n = u32_at(body, 0);
    if n == 0 || n > MAX_DEVICES_PER_SERVER {
        return Err(ReplyError::Invalid(format!(
            "device count {n} (expected 1..={MAX_DEVICES_PER_SERVER})"
        )));
    }
    Ok(n)
}

/// A plain u64 reply (GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, GET_ALLOC_SIZE).
pub fn parse_u64(body: &[u8]) -> Result<u64, ReplyError> {
    check_size(body, 8)?;
    Ok(u64_at(body, 0))
}

/// GET_ALIGNMENT: a power of two, at most 1 GiB.
pub fn parse_alignment(body: &[u8]) -> Result<u64, ReplyError> {
    let a = parse_u64(body)?;
    if !a.is_power_of_two() || a > 1 << 30 {
        return Err(ReplyError::Invalid(format!(
            "alignment {a} is not a power of two up to 1 GiB"
        )));
    }
    Ok(a)
}

/// GET_DEVICE_MEMORY: (free, total) with free <= total.
pub fn parse_memory(body: &[u8]) -> Result<(u64, u64), ReplyError> {
    check_size(body, 16)?;
    let (free, total) = (u64_at(body, 0), u64_at(body, 8));
    if free > total {
        return Err(ReplyError::Invalid(format!(
            "free memory {free} exceeds total {total}"
        )));
    }
    Ok((free, total))
}

/// ALLOC_BUFFER: `Ok(None)` when the server could not allocate (remote_ptr 0), else the
/// buffer id and its size, which must cover the request and not exceed it absurdly.
pub fn parse_alloc(body: &[u8], requested: u64) -> Result<Option<(u64, u64)>, ReplyError> {
    check_size(body, 16)?;
    let (ptr, size) = (u64_at(body, 0), u64_at(body, 8));
    if ptr == 0 {
        return Ok(None);
    }
    if size < requested {
        return Err(ReplyError::Invalid(format!(
            "buffer of {size} bytes for a request of {requested}"
        )));
    }
    Ok(Some((ptr, size)))
}

/// BUFFER_GET_BASE: a non-null address with room for `size` bytes below 2^64.
pub fn parse_base(body: &[u8], size: u64) -> Result<u64, ReplyError> {
    let base = parse_u64(body)?;
    if base == 0 || base.checked_add(size).is_none() {
        return Err(ReplyError::Invalid(format!(
            "base address {base:#x} for a buffer of {size} bytes"
        )));
    }
    Ok(base)
}

/// A one-byte boolean reply (SET_TENSOR_HASH, COPY_TENSOR): 0 or 1.
pub fn parse_bool(body: &[u8]) -> Result<bool, ReplyError> {
    check_size(body, 1)?;
    match body[0] {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(ReplyError::Invalid(format!("boolean byte {b}"))),
    }
}

/// ggml's `struct rpc_tensor` (packed): a tensor as the server sees it. `id` names the tensor
/// inside one graph (upstream sends its pointer; any unique non-zero number works), `buffer`
/// is the server's buffer id, `data` the server address of the first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcTensor {
    pub id: u64,
    pub ty: u32,
    pub buffer: u64,
    pub ne: [u32; MAX_DIMS],
    pub nb: [u32; MAX_DIMS],
    pub op: u32,
    pub op_params: [i32; OP_PARAMS_I32],
    pub flags: i32,
    pub src: [u64; MAX_SRC],
    pub view_src: u64,
    pub view_offs: u64,
    pub data: u64,
    pub name: [u8; MAX_NAME],
    pub use_count: i32,
}

impl Default for RpcTensor {
    fn default() -> Self {
        RpcTensor {
            id: 0,
            ty: 0,
            buffer: 0,
            ne: [1; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; OP_PARAMS_I32],
            flags: 0,
            src: [0; MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: [0; MAX_NAME],
            use_count: 0,
        }
    }
}

impl RpcTensor {
    /// A contiguous byte range `[data, data + len)` of buffer `buffer`, as a 1-D I8 tensor
    /// (`len` < 2^32: the wire's `ne` is 32-bit; callers split larger ranges).
    pub fn bytes(buffer: u64, data: u64, len: u32) -> RpcTensor {
        RpcTensor {
            id: data,
            ty: GGML_TYPE_I8,
            buffer,
            ne: [len, 1, 1, 1],
            nb: [1, len, len, len],
            data,
            ..RpcTensor::default()
        }
    }

    /// Sets the name (cut to 63 bytes, NUL-terminated as ggml's `snprintf`).
    pub fn with_name(mut self, name: &str) -> RpcTensor {
        self.name = [0; MAX_NAME];
        let n = name.len().min(MAX_NAME - 1);
        self.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }

    /// Appends the packed little-endian encoding ([`RPC_TENSOR_SIZE`] bytes).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.ty.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        self.ne
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.nb
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.op.to_le_bytes());
        self.op_params
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.flags.to_le_bytes());
        self.src
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
        debug_assert_eq!(out.len() - start, RPC_TENSOR_SIZE);
    }

    /// Decodes one packed tensor (`bytes.len() == RPC_TENSOR_SIZE`); for tests and the fuzzer.
    pub fn decode(b: &[u8]) -> Result<RpcTensor, ReplyError> {
        check_size(b, RPC_TENSOR_SIZE)?;
        let mut t = RpcTensor {
            id: u64_at(b, 0),
            ty: u32_at(b, 8),
            buffer: u64_at(b, 12),
            ..RpcTensor::default()
        };
        let mut at = 20;
        for v in t.ne.iter_mut() {
            *v = u32_at(b, at);
            at += 4;
        }
        for v in t.nb.iter_mut() {
            *v = u32_at(b, at);
            at += 4;
        }
        t.op = u32_at(b, at);
        at += 4;
        for v in t.op_params.iter_mut() {
            *v = u32_at(b, at) as i32;
            at += 4;
        }
        t.flags = u32_at(b, at) as i32;
        at += 4;
        for v in t.src.iter_mut() {
            *v = u64_at(b, at);
            at += 8;
        }
        t.view_src = u64_at(b, at);
        t.view_offs = u64_at(b, at + 8);
        t.data = u64_at(b, at + 16);
        at += 24;
        t.name.copy_from_slice(&b[at..at + MAX_NAME]);
        t.use_count = u32_at(b, at + MAX_NAME) as i32;
        Ok(t)
    }
}

/// ggml's `GGML_TYPE_I8`.
pub const GGML_TYPE_I8: u32 = 24;
/// ggml's `GGML_TYPE_F32`.
pub const GGML_TYPE_F32: u32 = 0;

/// ggml tensor flags: `GGML_TENSOR_FLAG_INPUT`, `_OUTPUT`, `_COMPUTE` (ggml-cpu skips a node
/// without COMPUTE).
pub const FLAG_INPUT: i32 = 1;
pub const FLAG_OUTPUT: i32 = 2;
pub const FLAG_COMPUTE: i32 = 16;

/// The body of SET_TENSOR: `rpc_tensor | cache_flag: u8 | offset: u64 | data`.
pub fn set_tensor_body(t: &RpcTensor, cache: bool, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RPC_TENSOR_SIZE + 9 + data.len());
    t.encode_into(&mut out);
    out.push(u8::from(cache));
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The body of GRAPH_COMPUTE: `device: u32 | n_nodes: u32 | node ids: u64 × n_nodes |
/// n_tensors: u32 | rpc_tensor × n_tensors`. Every tensor a node reaches (sources, view
/// sources) must be in `tensors`, sources before their users.
pub fn graph_body(device: u32, nodes: &[u64], tensors: &[RpcTensor]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + nodes.len() * 8 + tensors.len() * RPC_TENSOR_SIZE);
    out.extend_from_slice(&device.to_le_bytes());
    out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
    nodes
        .iter()
        .for_each(|id| out.extend_from_slice(&id.to_le_bytes()));
    out.extend_from_slice(&(tensors.len() as u32).to_le_bytes());
    tensors.iter().for_each(|t| t.encode_into(&mut out));
    out
}

/// FNV-1a over `data`, the hash SET_TENSOR_HASH names cached bytes by (`fnv_hash`).
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Runs every reply parser over `data` (the fuzz target and its replay): each returns a value
/// or an error, never panics, and what it accepts satisfies its documented bounds.
pub fn fuzz_replies(data: &[u8]) {
    if let Ok((major, minor, _)) = parse_hello(data) {
        assert!(major == PROTO_MAJOR && minor <= PROTO_MINOR);
    }
    if let Ok(n) = parse_device_count(data) {
        assert!((1..=MAX_DEVICES_PER_SERVER).contains(&n));
    }
    if let Ok(a) = parse_alignment(data) {
        assert!(a.is_power_of_two());
    }
    if let Ok((free, total)) = parse_memory(data) {
        assert!(free <= total);
    }
    let requested = data.first().map_or(0, |&b| u64::from(b) << 8);
    if let Ok(Some((ptr, size))) = parse_alloc(data, requested) {
        assert!(ptr != 0 && size >= requested);
    }
    if let Ok(base) = parse_base(data, requested) {
        assert!(base != 0 && base.checked_add(requested).is_some());
    }
    let _ = parse_bool(data);
    let _ = parse_u64(data);
    if let Ok(t) = RpcTensor::decode(data) {
        let mut out = Vec::new();
        t.encode_into(&mut out);
        assert_eq!(out, data);
    }
}
