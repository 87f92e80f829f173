//! A server shared by everything in the process that uses it (upstream keeps one dispatcher
//! per endpoint; `rpc-server` serves one client at a time, so a second connection from the
//! same process would wait behind the first), and buffers allocated on it.

use std::sync::{Arc, Mutex, MutexGuard};

use super::conn::{Connection, RpcError, RpcErrorKind, Timeouts};
use super::wire::RpcTensor;

/// What a server told us when it was added: its devices' facts at that time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteDeviceInfo {
    /// The device's number on its server.
    pub device: u32,
    pub alignment: u64,
    pub max_size: u64,
    pub free: u64,
    pub total: u64,
}

/// One `rpc-server` endpoint with its connection.
#[derive(Debug)]
pub struct RpcServer {
    endpoint: String,
    conn: Mutex<Connection>,
    devices: Vec<RemoteDeviceInfo>,
}

impl RpcServer {
    /// Connects, checks the version, and asks for every device's alignment, size limit and
    /// memory.
    pub fn connect(endpoint: &str, t: Timeouts) -> Result<Arc<RpcServer>, RpcError> {
        let mut conn = Connection::connect(endpoint, t)?;
        let n = conn.device_count()?;
        let mut devices = Vec::with_capacity(n as usize);
        for device in 0..n {
            let alignment = conn.alignment(device)?;
            let max_size = conn.max_size(device)?;
            let (free, total) = conn.memory(device)?;
            devices.push(RemoteDeviceInfo {
                device,
                alignment,
                max_size,
                free,
                total,
            });
        }
        Ok(Arc::new(RpcServer {
            endpoint: endpoint.to_string(),
            conn: Mutex::new(conn),
            devices,
        }))
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The server's devices as reported when it was added.
    pub fn devices(&self) -> &[RemoteDeviceInfo] {
        &self.devices
    }

    /// The connection, for one or more commands in a row (a poisoned lock is taken over: the
    /// connection itself records whether it is still usable).
    pub fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Free and total bytes of `device` now.
    pub fn memory(&self, device: u32) -> Result<(u64, u64), RpcError> {
        self.lock().memory(device)
    }

    fn device_info(&self, device: u32) -> Result<&RemoteDeviceInfo, RpcError> {
        self.devices
            .iter()
            .find(|d| d.device == device)
            .ok_or_else(|| RpcError {
                server: self.endpoint.clone(),
                kind: RpcErrorKind::Refused(format!("the server has no device {device}")),
            })
    }

    /// Allocates a buffer of `size` bytes on `device` (refused above the device's size limit
    /// before anything is sent).
    pub fn alloc(self: &Arc<Self>, device: u32, size: u64) -> Result<RemoteBuffer, RpcError> {
        let info = self.device_info(device)?;
        if size > info.max_size {
            return Err(RpcError {
                server: self.endpoint.clone(),
                kind: RpcErrorKind::OutOfMemory {
                    device,
                    requested: size,
                },
            });
        }
        // ggml refuses a zero-size buffer on some backends; one byte keeps ids valid.
        let mut conn = self.lock();
        let (id, got) = conn.alloc_buffer(device, size.max(1))?;
        let base = match conn.buffer_base(id, got) {
            Ok(b) => b,
            Err(e) => {
                let _ = conn.free_buffer(id);
                return Err(e);
            }
        };
        Ok(RemoteBuffer {
            server: Arc::clone(self),
            device,
            id,
            base,
            size,
        })
    }
}

/// The largest byte range one wire tensor describes (`ne` is 32-bit on the wire).
const MAX_PIECE: u64 = 1 << 30;

/// A buffer on a server; freed on the server when dropped.
#[derive(Debug)]
pub struct RemoteBuffer {
    server: Arc<RpcServer>,
    device: u32,
    id: u64,
    base: u64,
    size: u64,
}

impl RemoteBuffer {
    pub fn server(&self) -> &Arc<RpcServer> {
        &self.server
    }

    pub fn device(&self) -> u32 {
        self.device
    }

    /// The server's buffer id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The server address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The size asked for (the server's buffer may be larger).
    pub fn len(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    fn range_error(&self, what: &str, offset: u64, len: u64) -> RpcError {
        RpcError {
            server: self.server.endpoint.clone(),
            kind: RpcErrorKind::Refused(format!(
                "{what} of {len} bytes at {offset} is outside a buffer of {} bytes",
                self.size
            )),
        }
    }

    fn check(&self, what: &str, offset: u64, len: u64) -> Result<(), RpcError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(self.range_error(what, offset, len)),
        }
    }

    /// The wire tensor for bytes `[offset, offset + len)` (len ≤ 1 GiB).
    pub fn bytes_tensor(&self, offset: u64, len: u64) -> RpcTensor {
        RpcTensor::bytes(self.id, self.base + offset, len as u32)
    }

    /// Writes `data` at `offset`, in pieces of up to 1 GiB, each above 10 MiB tried by hash
    /// first. Returns the bytes that came from the server's cache. The write is confirmed by
    /// a round trip (SET_TENSOR has no reply).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<u64, RpcError> {
        self.check("write", offset, data.len() as u64)?;
        let mut conn = self.server.lock();
        let mut cached = 0u64;
        for (i, piece) in data.chunks(MAX_PIECE as usize).enumerate() {
            let at = offset + i as u64 * MAX_PIECE;
            let t = self.bytes_tensor(at, piece.len() as u64);
            if conn.write(&t, 0, piece)? {
                cached += piece.len() as u64;
            }
        }
        conn.sync()?;
        Ok(cached)
    }

    /// Reads `out.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), RpcError> {
        self.check("read", offset, out.len() as u64)?;
        let mut conn = self.server.lock();
        for (i, piece) in out.chunks_mut(MAX_PIECE as usize).enumerate() {
            let at = offset + i as u64 * MAX_PIECE;
            let t = self.bytes_tensor(at, piece.len() as u64);
            conn.get_tensor(&t, 0, piece)?;
        }
        Ok(())
    }

    /// Sets every byte to `value` (confirmed by a round trip).
    pub fn clear(&self, value: u8) -> Result<(), RpcError> {
        let mut conn = self.server.lock();
        conn.buffer_clear(self.id, value)?;
        conn.sync()
    }

    /// Copies `len` bytes from `src` (same server) at `src_offset` to this buffer at
    /// `dst_offset`; whether the server copied.
    pub fn copy_from(
        &self,
        src: &RemoteBuffer,
        src_offset: u64,
        dst_offset: u64,
        len: u64,
    ) -> Result<bool, RpcError> {
        if !Arc::ptr_eq(&self.server, &src.server) {
            return Ok(false);
        }
        src.check("copy source", src_offset, len)?;
        self.check("copy destination", dst_offset, len)?;
        if len > MAX_PIECE {
            return Err(self.range_error("copy (over 1 GiB)", dst_offset, len));
        }
        let s = src.bytes_tensor(src_offset, len);
        let d = self.bytes_tensor(dst_offset, len);
        self.server.lock().copy_tensor(&s, &d)
    }
}

impl Drop for RemoteBuffer {
    fn drop(&mut self) {
        // A server that is gone has freed everything with the connection.
        let _ = self.server.lock().free_buffer(self.id);
    }
}
