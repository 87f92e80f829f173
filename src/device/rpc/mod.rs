//! A client of upstream's `rpc-server` (ggml-rpc, protocol 7.0 at the pinned commit): devices
//! on other hosts. See docs/rpc.md.
//!
//! * [`wire`] — the protocol's bytes: commands, the packed `rpc_tensor`, reply parsers (pure,
//!   fuzzed: `fuzz/fuzz_targets/rpc_reply.rs`).
//! * [`conn`] — one connection: HELLO and version check, timeouts, one command at a time,
//!   typed errors naming the server.
//! * [`server`] — a server shared by the process, its devices' facts, and buffers on it.
//!
//! Upstream's warning holds: `rpc-server` is not safe on an untrusted network (it trusts its
//! clients). This client does not trust the server either: every reply's size is checked
//! before it is read, every value (version, device count, alignment, memory, buffer ids and
//! sizes, base addresses, booleans) before it is used, and reads and writes time out.

pub mod conn;
pub mod server;
pub mod wire;

pub use conn::{parse_endpoint, Connection, RpcError, RpcErrorKind, Timeouts};
pub use server::{RemoteBuffer, RemoteDeviceInfo, RpcServer};
