//! One TCP connection to an upstream `rpc-server`: the HELLO handshake, then one command at a
//! time. Every reply's size is checked against what the command expects before a byte of it
//! is read into memory, every value is checked by [`super::wire`]'s parsers, every read and
//! write has a timeout. After any failure the connection is closed for good (the stream may
//! be mid-message): later calls fail at once with the first error's reason.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::wire::{self, Cmd, ReplyError, RpcTensor};

/// Why an RPC call failed; every message names the server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("RPC server {server}: {kind}")]
pub struct RpcError {
    pub server: String,
    pub kind: RpcErrorKind,
}

/// What went wrong (see [`RpcError`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RpcErrorKind {
    #[error("endpoint is not host:port ({0})")]
    Endpoint(String),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("no answer within {secs} s during {cmd}")]
    Timeout { cmd: &'static str, secs: u64 },
    #[error("the server closed the connection during {cmd}")]
    Closed { cmd: &'static str },
    #[error("{cmd}: {err}")]
    Io { cmd: &'static str, err: String },
    #[error("{cmd}: invalid reply: {err}")]
    Reply { cmd: &'static str, err: ReplyError },
    #[error("out of memory: the server could not allocate {requested} bytes on device {device}")]
    OutOfMemory { device: u32, requested: u64 },
    #[error("{0}")]
    Refused(String),
    #[error("connection unusable after an earlier error ({0})")]
    Broken(String),
}

/// Time limits of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub connect: Duration,
    /// Per read or write call (a reply that stalls this long fails the call).
    pub io: Duration,
}

impl Timeouts {
    /// 5 s to connect; 120 s per read/write, or `LLAMA_RPC_TIMEOUT_S` seconds (a graph of a
    /// large model on a slow host may take long before its outputs are read).
    pub fn from_env() -> Timeouts {
        let io = std::env::var("LLAMA_RPC_TIMEOUT_S")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|&s| s > 0)
            .unwrap_or(120);
        Timeouts {
            connect: Duration::from_secs(5),
            io: Duration::from_secs(io),
        }
    }
}

/// Splits `host:port` (IPv6 as `[::1]:50052`), as upstream's `parse_endpoint` but strict.
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    let e = endpoint.trim();
    let (host, port) = e
        .rsplit_once(':')
        .ok_or_else(|| format!("'{e}' has no ':port'"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("'{e}' has no host"));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("'{e}': port '{port}' is not 1..65535"))?;
    Ok((host.to_string(), port))
}

/// A connected, handshaken client (see the module doc).
#[derive(Debug)]
pub struct Connection {
    endpoint: String,
    stream: Option<TcpStream>,
    broken: Option<String>,
    io_secs: u64,
    version: (u8, u8, u8),
}

impl Connection {
    /// Connects to `endpoint` (`host:port`) and performs HELLO; refuses a server whose
    /// protocol version is not 7.0.x (or an older 7.y client-compatible one).
    pub fn connect(endpoint: &str, t: Timeouts) -> Result<Connection, RpcError> {
        let err = |kind| RpcError {
            server: endpoint.to_string(),
            kind,
        };
        let (host, port) = parse_endpoint(endpoint).map_err(|e| err(RpcErrorKind::Endpoint(e)))?;
        let addrs: Vec<SocketAddr> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| {
                err(RpcErrorKind::Connect(format!(
                    "cannot resolve '{host}': {e}"
                )))
            })?
            .collect();
        let mut last = format!("'{host}' resolves to no address");
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, t.connect) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        let stream = stream.ok_or_else(|| err(RpcErrorKind::Connect(last)))?;
        let setup = stream
            .set_read_timeout(Some(t.io))
            .and_then(|_| stream.set_write_timeout(Some(t.io)))
            .and_then(|_| stream.set_nodelay(true));
        setup.map_err(|e| err(RpcErrorKind::Connect(e.to_string())))?;
        let mut c = Connection {
            endpoint: endpoint.to_string(),
            stream: Some(stream),
            broken: None,
            io_secs: t.io.as_secs(),
            version: (0, 0, 0),
        };
        let caps = [0u8; wire::CONN_CAPS_SIZE];
        let body = c.call(Cmd::Hello, &caps, wire::CONN_CAPS_SIZE + 4)?;
        c.version = c.check(Cmd::Hello, wire::parse_hello(&body))?;
        Ok(c)
    }

    /// The endpoint this connection was made to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The server's protocol version (major, minor, patch).
    pub fn version(&self) -> (u8, u8, u8) {
        self.version
    }

    fn error(&self, kind: RpcErrorKind) -> RpcError {
        RpcError {
            server: self.endpoint.clone(),
            kind,
        }
    }

    /// Marks the connection broken and returns the error.
    fn fail(&mut self, kind: RpcErrorKind) -> RpcError {
        if self.broken.is_none() {
            self.broken = Some(kind.to_string());
        }
        self.stream = None;
        self.error(kind)
    }

    fn check<T>(&mut self, cmd: Cmd, r: Result<T, ReplyError>) -> Result<T, RpcError> {
        r.map_err(|err| {
            self.fail(RpcErrorKind::Reply {
                cmd: cmd.name(),
                err,
            })
        })
    }

    fn io_error(&mut self, cmd: Cmd, e: std::io::Error) -> RpcError {
        let kind = match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => RpcErrorKind::Timeout {
                cmd: cmd.name(),
                secs: self.io_secs,
            },
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => RpcErrorKind::Closed { cmd: cmd.name() },
            _ => RpcErrorKind::Io {
                cmd: cmd.name(),
                err: e.to_string(),
            },
        };
        self.fail(kind)
    }

    fn stream(&mut self) -> Result<&mut TcpStream, RpcError> {
        if let Some(why) = &self.broken {
            return Err(self.error(RpcErrorKind::Broken(why.clone())));
        }
        if self.stream.is_none() {
            return Err(self.error(RpcErrorKind::Broken("not connected".into())));
        }
        Ok(self.stream.as_mut().expect("checked above"))
    }

    /// Sends one command with its body (one write of the header, one of the body).
    fn send(&mut self, cmd: Cmd, body: &[u8]) -> Result<(), RpcError> {
        let mut head = [0u8; 9];
        head[0] = cmd as u8;
        head[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
        let s = self.stream()?;
        let r = s
            .write_all(&head)
            .and_then(|_| s.write_all(body))
            .and_then(|_| s.flush());
        r.map_err(|e| self.io_error(cmd, e))
    }

    /// Reads one reply whose body must be exactly `expected` bytes into `out`; the announced
    /// size is checked before the body is read (a hostile size never sizes an allocation).
    fn recv_into(&mut self, cmd: Cmd, out: &mut [u8]) -> Result<(), RpcError> {
        let mut size = [0u8; 8];
        let s = self.stream()?;
        if let Err(e) = s.read_exact(&mut size) {
            return Err(self.io_error(cmd, e));
        }
        let got = u64::from_le_bytes(size);
        if got != out.len() as u64 {
            return Err(self.fail(RpcErrorKind::Reply {
                cmd: cmd.name(),
                err: ReplyError::Size {
                    expected: out.len() as u64,
                    got,
                },
            }));
        }
        let s = self.stream()?;
        s.read_exact(out).map_err(|e| self.io_error(cmd, e))
    }

    /// Sends a command and reads its reply of exactly `reply_len` bytes.
    fn call(&mut self, cmd: Cmd, body: &[u8], reply_len: usize) -> Result<Vec<u8>, RpcError> {
        self.send(cmd, body)?;
        let mut out = vec![0u8; reply_len];
        self.recv_into(cmd, &mut out)?;
        Ok(out)
    }

    /// Sends a command that has no reply.
    fn post(&mut self, cmd: Cmd, body: &[u8]) -> Result<(), RpcError> {
        self.send(cmd, body)
    }

    /// DEVICE_COUNT: how many devices the server offers (1..=256).
    pub fn device_count(&mut self) -> Result<u32, RpcError> {
        let r = self.call(Cmd::DeviceCount, &[], 4)?;
        self.check(Cmd::DeviceCount, wire::parse_device_count(&r))
    }

    /// A round trip that proves the server has processed every command sent before (the
    /// server handles one command at a time, and closes the connection when one without a
    /// reply fails): DEVICE_COUNT.
    pub fn sync(&mut self) -> Result<(), RpcError> {
        self.device_count().map(|_| ())
    }

    /// GET_ALIGNMENT of device `device`'s buffer type.
    pub fn alignment(&mut self, device: u32) -> Result<u64, RpcError> {
        let r = self.call(Cmd::GetAlignment, &device.to_le_bytes(), 8)?;
        self.check(Cmd::GetAlignment, wire::parse_alignment(&r))
    }

    /// GET_MAX_SIZE of device `device`'s buffer type (a single buffer's limit).
    pub fn max_size(&mut self, device: u32) -> Result<u64, RpcError> {
        let r = self.call(Cmd::GetMaxSize, &device.to_le_bytes(), 8)?;
        self.check(Cmd::GetMaxSize, wire::parse_u64(&r))
    }

    /// GET_DEVICE_MEMORY: (free, total) bytes.
    pub fn memory(&mut self, device: u32) -> Result<(u64, u64), RpcError> {
        let r = self.call(Cmd::GetDeviceMemory, &device.to_le_bytes(), 16)?;
        self.check(Cmd::GetDeviceMemory, wire::parse_memory(&r))
    }

    /// ALLOC_BUFFER of `size` bytes on `device`: the buffer id and its size; out of memory
    /// (the server answers a null buffer) is [`RpcErrorKind::OutOfMemory`].
    pub fn alloc_buffer(&mut self, device: u32, size: u64) -> Result<(u64, u64), RpcError> {
        let mut body = Vec::with_capacity(12);
        body.extend_from_slice(&device.to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
        let r = self.call(Cmd::AllocBuffer, &body, 16)?;
        match self.check(Cmd::AllocBuffer, wire::parse_alloc(&r, size))? {
            Some(b) => Ok(b),
            None => Err(self.error(RpcErrorKind::OutOfMemory {
                device,
                requested: size,
            })),
        }
    }

    /// BUFFER_GET_BASE: the server address of the buffer's first byte.
    pub fn buffer_base(&mut self, buffer: u64, size: u64) -> Result<u64, RpcError> {
        let r = self.call(Cmd::BufferGetBase, &buffer.to_le_bytes(), 8)?;
        self.check(Cmd::BufferGetBase, wire::parse_base(&r, size))
    }

    /// FREE_BUFFER (no reply).
    pub fn free_buffer(&mut self, buffer: u64) -> Result<(), RpcError> {
        self.post(Cmd::FreeBuffer, &buffer.to_le_bytes())
    }

    /// BUFFER_CLEAR: every byte of the buffer set to `value` (no reply).
    pub fn buffer_clear(&mut self, buffer: u64, value: u8) -> Result<(), RpcError> {
        let mut body = buffer.to_le_bytes().to_vec();
        body.push(value);
        self.post(Cmd::BufferClear, &body)
    }

    /// SET_TENSOR: `data` written at `offset` bytes into tensor `t` (no reply). `cache` asks
    /// a server started with `-c` to keep the bytes under their hash.
    pub fn set_tensor(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        data: &[u8],
        cache: bool,
    ) -> Result<(), RpcError> {
        let body = wire::set_tensor_body(t, cache, offset, data);
        self.post(Cmd::SetTensor, &body)
    }

    /// SET_TENSOR_HASH: whether the server had bytes with this FNV-1a hash cached and wrote
    /// them at `offset` into `t`.
    pub fn set_tensor_hash(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        hash: u64,
    ) -> Result<bool, RpcError> {
        let mut body = Vec::with_capacity(wire::RPC_TENSOR_SIZE + 16);
        t.encode_into(&mut body);
        body.extend_from_slice(&offset.to_le_bytes());
        body.extend_from_slice(&hash.to_le_bytes());
        let r = self.call(Cmd::SetTensorHash, &body, 1)?;
        self.check(Cmd::SetTensorHash, wire::parse_bool(&r))
    }

    /// Writes `data` as upstream's client does: above 10 MiB, first by hash (nothing sent when
    /// the server has the bytes cached), else in full with the cache flag. Returns whether
    /// the bytes came from the server's cache.
    pub fn write(&mut self, t: &RpcTensor, offset: u64, data: &[u8]) -> Result<bool, RpcError> {
        let large = data.len() > wire::HASH_THRESHOLD;
        if large && self.set_tensor_hash(t, offset, wire::fnv1a(data))? {
            return Ok(true);
        }
        self.set_tensor(t, offset, data, large)?;
        Ok(false)
    }

    /// GET_TENSOR: `out.len()` bytes at `offset` into tensor `t`.
    pub fn get_tensor(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), RpcError> {
        let mut body = Vec::with_capacity(wire::RPC_TENSOR_SIZE + 16);
        t.encode_into(&mut body);
        body.extend_from_slice(&offset.to_le_bytes());
        body.extend_from_slice(&(out.len() as u64).to_le_bytes());
        self.send(Cmd::GetTensor, &body)?;
        self.recv_into(Cmd::GetTensor, out)
    }

    /// COPY_TENSOR from `src` to `dst` on this server; whether the server copied.
    pub fn copy_tensor(&mut self, src: &RpcTensor, dst: &RpcTensor) -> Result<bool, RpcError> {
        let mut body = Vec::with_capacity(2 * wire::RPC_TENSOR_SIZE);
        src.encode_into(&mut body);
        dst.encode_into(&mut body);
        let r = self.call(Cmd::CopyTensor, &body, 1)?;
        self.check(Cmd::CopyTensor, wire::parse_bool(&r))
    }

    /// MEMSET_TENSOR: `size` bytes at `offset` into `t` set to `value` (no reply).
    pub fn memset_tensor(
        &mut self,
        t: &RpcTensor,
        offset: u64,
        size: u64,
        value: u8,
    ) -> Result<(), RpcError> {
        let mut body = Vec::with_capacity(wire::RPC_TENSOR_SIZE + 17);
        t.encode_into(&mut body);
        body.extend_from_slice(&offset.to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
        body.push(value);
        self.post(Cmd::MemsetTensor, &body)
    }

    /// GRAPH_COMPUTE of a serialized graph ([`wire::graph_body`]) on `device` (no reply:
    /// read an output, or [`Connection::sync`], to learn that it ran).
    pub fn graph_compute(
        &mut self,
        device: u32,
        nodes: &[u64],
        tensors: &[RpcTensor],
    ) -> Result<(), RpcError> {
        if nodes.is_empty() {
            return Err(self.error(RpcErrorKind::Refused(
                "GRAPH_COMPUTE of a graph without nodes".into(),
            )));
        }
        let body = wire::graph_body(device, nodes, tensors);
        self.post(Cmd::GraphCompute, &body)
    }

    /// GRAPH_RECOMPUTE: runs the last graph sent to `device` again (no reply).
    pub fn graph_recompute(&mut self, device: u32) -> Result<(), RpcError> {
        self.post(Cmd::GraphRecompute, &device.to_le_bytes())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}
