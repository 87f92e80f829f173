//! Sampling: the sampler interface (`llama_sampler_*`), sampler chains and the built-in
//! samplers (their arithmetic lives in `crate::sampling`). `llama_set_sampler` lives with the
//! context functions, `llama_perf_sampler*` in `perf`.
//!
//! `struct llama_sampler` is public in llama.h (`{iface, ctx}`), so a C caller's sampler and
//! ours are the same kind of object: every call dispatches through `iface`, as upstream, and a
//! caller's sampler runs inside our chain and ours inside theirs. Our Rust samplers share one
//! interface table ([`RUST_IFACE`]) whose `ctx` is a boxed [`RustSampler`]; chains have their
//! own table ([`CHAIN_IFACE`]).
//!
//! Every sampler this library allocates (`llama_sampler_init`, the constructors, chains) is
//! recorded in a registry with its owner (the caller or a chain). `llama_sampler_free` frees
//! only those, once: freeing twice, freeing a sampler a chain owns, or freeing memory the
//! library did not allocate is logged and refused. A `struct llama_sampler` the caller built
//! itself (llama-cpp-python's `CustomSampler` does) is used through its `iface` like any
//! other, and a chain it is added to borrows it: the chain never frees it (upstream would
//! `delete` it; callers remove such samplers before freeing the chain).

//!
//! Files: `registry` (who owns each live sampler), `rust_iface` (our samplers behind the C
//! interface), `api` (the interface functions every sampler is used through), `chain`,
//! `builtin` (the `llama_sampler_init_*` constructors), `grammar`, `sample`
//! (`llama_sampler_sample`, seeds, `llama_set_sampler`), `in_decode` (chains attached to a
//! context, run on its output rows after each decode: backend sampling).

mod api;
mod builtin;
mod chain;
mod grammar;
mod in_decode;
mod registry;
mod rust_iface;
mod sample;

pub use api::*;
pub use builtin::*;
pub(crate) use chain::live_chain;
pub use chain::{
    llama_sampler_chain_add, llama_sampler_chain_get, llama_sampler_chain_init,
    llama_sampler_chain_n, llama_sampler_chain_remove,
};
pub use grammar::*;
pub use sample::*;
