//! The ggml-rpc client against upstream's real `rpc-server` (built from the pinned sources:
//! `scripts/test-rpc.sh` sets LLAMA_HOTSWAP_RPC_SERVER to it). Each test starts its own
//! server on a free 127.0.0.1 port with the CPU backend and kills it when done. Without the
//! variable the tests say so and pass (`cargo test` on a machine without the upstream build);
//! `make test-rpc` always sets it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use llama::device::rpc::wire::{self, RpcTensor};
use llama::device::rpc::{Connection, RpcErrorKind, RpcServer, Timeouts};

/// A running `rpc-server`, killed on drop.
struct Server {
    child: Child,
    endpoint: String,
    _cache: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server_binary() -> Option<PathBuf> {
    let Some(path) = std::env::var_os("LLAMA_HOTSWAP_RPC_SERVER") else {
        eprintln!("LLAMA_HOTSWAP_RPC_SERVER is not set: upstream's rpc-server tests not run (make test-rpc runs them)");
        return None;
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "LLAMA_HOTSWAP_RPC_SERVER={} does not exist",
        path.display()
    );
    Some(path)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        io: Duration::from_secs(30),
    }
}

/// Starts a server (with the hash cache in a temporary directory when `cache`), waits until
/// it accepts connections.
fn start(cache: bool) -> Option<Server> {
    let bin = server_binary()?;
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args([
        "--device",
        "CPU",
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "-t",
        "1",
    ]);
    let dir = cache.then(|| tempfile::tempdir().unwrap());
    if let Some(d) = &dir {
        cmd.arg("-c").env("LLAMA_CACHE", d.path());
    }
    // LLAMA_HOTSWAP_RPC_VERBOSE=1 shows the servers' own output (to see why one stopped)
    let shown = || match std::env::var_os("LLAMA_HOTSWAP_RPC_VERBOSE") {
        Some(_) => Stdio::inherit(),
        None => Stdio::null(),
    };
    let child = cmd.stdout(shown()).stderr(shown()).spawn().unwrap();
    let server = Server {
        child,
        endpoint: format!("127.0.0.1:{port}"),
        _cache: dir,
    };
    let t0 = Instant::now();
    // A probe connection would take the server's single client slot until it closes; a bare
    // TCP connect that closes at once is enough (the server sees no HELLO and moves on).
    while std::net::TcpStream::connect(&server.endpoint).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "rpc-server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(server)
}

#[test]
fn hello_devices_and_memory() {
    let Some(s) = start(false) else { return };
    let mut c = Connection::connect(&s.endpoint, timeouts()).unwrap();
    assert_eq!(c.version(), (7, 0, 0));
    assert_eq!(c.device_count().unwrap(), 1);
    let (free, total) = c.memory(0).unwrap();
    assert!(total > 0 && free <= total, "{free} {total}");
    assert!(c.alignment(0).unwrap() >= 16);
    assert!(c.max_size(0).unwrap() >= 1 << 30);
    // A device the server does not have: it closes the connection; we say so.
    let e = c.memory(5).unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Closed {
                cmd: "GET_DEVICE_MEMORY"
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&s.endpoint));
}

#[test]
fn buffers_write_read_clear_copy() {
    let Some(s) = start(false) else { return };
    let server = RpcServer::connect(&s.endpoint, timeouts()).unwrap();
    assert_eq!(server.devices().len(), 1);
    let a = server.alloc(0, 1 << 20).unwrap();
    let b = server.alloc(0, 4096).unwrap();
    assert_ne!(a.id(), b.id());
    let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(a.write(1000, &pattern).unwrap(), 0);
    let mut back = vec![0u8; 3000];
    a.read(1000, &mut back).unwrap();
    assert_eq!(back, pattern);
    // Copy on the server, then clear the source: the copy keeps the bytes.
    assert!(b.copy_from(&a, 1000, 10, 3000).unwrap());
    a.clear(7).unwrap();
    let mut all = vec![0u8; 1 << 20];
    a.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&x| x == 7));
    let mut copied = vec![0u8; 3000];
    b.read(10, &mut copied).unwrap();
    assert_eq!(copied, pattern);
    // Out of range: refused here, nothing sent, the connection stays usable.
    let e = b.write(4000, &[0u8; 100]).unwrap_err();
    assert!(matches!(e.kind, RpcErrorKind::Refused(_)), "{e}");
    b.read(10, &mut copied).unwrap();
    assert_eq!(copied, pattern);
    drop(a);
    // Buffers freed on the server: the connection still works.
    assert_eq!(server.lock().device_count().unwrap(), 1);
}

#[test]
fn set_by_hash_skips_bytes_the_server_has_cached() {
    let Some(s) = start(true) else { return };
    let server = RpcServer::connect(&s.endpoint, timeouts()).unwrap();
    let n = wire::HASH_THRESHOLD + 4096;
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let a = server.alloc(0, n as u64).unwrap();
    assert_eq!(a.write(0, &data).unwrap(), 0, "first write sends the bytes");
    let b = server.alloc(0, n as u64).unwrap();
    assert_eq!(
        b.write(0, &data).unwrap(),
        n as u64,
        "second write comes from the cache"
    );
    let mut back = vec![0u8; n];
    b.read(0, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn out_of_memory_is_an_error_and_the_server_survives() {
    let Some(s) = start(false) else { return };
    let server = RpcServer::connect(&s.endpoint, timeouts()).unwrap();
    let e = server.alloc(0, 1 << 52).unwrap_err();
    assert!(
        matches!(e.kind, RpcErrorKind::OutOfMemory { requested, .. } if requested == 1 << 52),
        "{e}"
    );
    assert!(e.to_string().contains(&s.endpoint), "{e}");
    server.alloc(0, 4096).unwrap();
}

/// `out = w·x + bias` (MUL_MAT then ADD) computed by the server from a serialized graph.
#[test]
fn graph_compute_mul_mat_add() {
    let Some(s) = start(false) else { return };
    let server = RpcServer::connect(&s.endpoint, timeouts()).unwrap();
    let buf = server.alloc(0, 4096).unwrap();
    let (k, m) = (8u32, 3u32);
    let w: Vec<f32> = (0..k * m).map(|i| (i as f32) * 0.25 - 2.0).collect();
    let x: Vec<f32> = (0..k).map(|i| 1.0 + i as f32 * 0.5).collect();
    let bias: Vec<f32> = vec![0.5, -1.0, 2.0];
    let f32s = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let base = buf.base();
    let tensor = |id: u64, off: u64, ne0: u32, ne1: u32| RpcTensor {
        id,
        ty: wire::GGML_TYPE_F32,
        buffer: buf.id(),
        ne: [ne0, ne1, 1, 1],
        nb: [4, 4 * ne0, 4 * ne0 * ne1, 4 * ne0 * ne1],
        data: base + off,
        ..RpcTensor::default()
    };
    buf.write(0, &f32s(&w)).unwrap();
    buf.write(512, &f32s(&x)).unwrap();
    buf.write(1024, &f32s(&bias)).unwrap();
    let tw = tensor(1, 0, k, m).with_name("w");
    let tx = tensor(2, 512, k, 1).with_name("x");
    let tb = tensor(3, 1024, m, 1).with_name("bias");
    let mut mm = tensor(4, 1536, m, 1).with_name("wx");
    mm.op = 29; // GGML_OP_MUL_MAT
    mm.src[0] = 1;
    mm.src[1] = 2;
    mm.flags = wire::FLAG_COMPUTE;
    mm.use_count = 1;
    let mut add = tensor(5, 2048, m, 1).with_name("out");
    add.op = 2; // GGML_OP_ADD
    add.src[0] = 4;
    add.src[1] = 3;
    add.flags = wire::FLAG_COMPUTE | wire::FLAG_OUTPUT;
    server
        .lock()
        .graph_compute(0, &[4, 5], &[tw, tx, tb, mm, add])
        .unwrap();
    let mut out = vec![0u8; 12];
    buf.read(2048, &mut out).unwrap();
    let got: Vec<f32> = out
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for r in 0..m as usize {
        let want: f32 = (0..k as usize)
            .map(|c| w[r * k as usize + c] * x[c])
            .sum::<f32>()
            + bias[r];
        assert!(
            (got[r] - want).abs() <= 1e-4 * want.abs().max(1.0),
            "row {r}: {} vs {want}",
            got[r]
        );
    }
    // GRAPH_RECOMPUTE runs it again on new inputs.
    buf.write(512, &f32s(&vec![0.0; k as usize])).unwrap();
    server.lock().graph_recompute(0).unwrap();
    buf.read(2048, &mut out).unwrap();
    let got: Vec<f32> = out
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, bias);
}

#[test]
fn a_server_killed_mid_use_gives_an_error_not_a_hang() {
    let Some(mut s) = start(false) else { return };
    let server = RpcServer::connect(&s.endpoint, timeouts()).unwrap();
    let buf = server.alloc(0, 1 << 20).unwrap();
    buf.write(0, &[1u8; 1024]).unwrap();
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let t0 = Instant::now();
    let mut out = vec![0u8; 1024];
    let e = buf.read(0, &mut out).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Closed { .. } | RpcErrorKind::Io { .. }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&s.endpoint));
    // Every later call fails at once; dropping the buffer (FREE_BUFFER) does not panic.
    assert!(matches!(
        server.memory(0).unwrap_err().kind,
        RpcErrorKind::Broken(_)
    ));
    drop(buf);
    let _ = Arc::strong_count(&server);
}

#[test]
fn a_rejected_command_without_reply_surfaces_at_the_next_round_trip() {
    let Some(s) = start(false) else { return };
    let mut c = Connection::connect(&s.endpoint, timeouts()).unwrap();
    // A write to a buffer id the server never gave out: it closes the connection.
    c.set_tensor(
        &RpcTensor::bytes(0xdead_beef, 0x1000, 4),
        0,
        &[1, 2, 3, 4],
        false,
    )
    .unwrap();
    let e = c.sync().unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Closed { .. } | RpcErrorKind::Io { .. }
        ),
        "{e}"
    );
    // The server itself lives on and takes the next client.
    let mut c2 = Connection::connect(&s.endpoint, timeouts()).unwrap();
    assert_eq!(c2.device_count().unwrap(), 1);
}

#[path = "common/hotswap.rs"]
#[allow(dead_code)]
mod hotswap_common;

/// A model split by layers across two rpc-servers (and the CPU for the embeddings): every
/// tensor reads back as in the file; a tensor on a server hot-swaps to another type (equal
/// to a fresh load of the new file, the report naming the host) and back (equal to before);
/// the CPU executor refuses the remote layers with a message naming the server.
#[test]
fn a_model_on_two_servers_loads_and_hot_swaps_remotely() {
    use hotswap_common::{
        assert_others_match_file, bytes_for, current, file_bytes, replace, setup, variant,
    };
    use llama::device::Registry;
    use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
    use llama::gguf::GgmlType;
    use llama::hotswap::{self, Outcome};
    use llama::loader::place::PlacementParams;
    use llama::loader::{load, LoadOptions, ModelSource};
    use llama::model::LoadMode;

    let (Some(a), Some(b)) = (start(false), start(false)) else {
        return;
    };
    let servers = vec![
        RpcServer::connect(&a.endpoint, timeouts()).unwrap(),
        RpcServer::connect(&b.endpoint, timeouts()).unwrap(),
    ];
    let registry: &'static Registry =
        Box::leak(Box::new(Registry::with_rpc_servers(&[], &servers)));
    let names: Vec<&str> = registry.devices().iter().map(|d| d.name()).collect();
    assert_eq!(names, ["RPC0", "RPC1", "CPU"]);
    assert_eq!(registry.get(0).unwrap().description(), a.endpoint);
    assert_eq!(
        registry.get(1).unwrap().rpc_endpoint(),
        Some(b.endpoint.as_str())
    );
    assert!(registry.get(0).unwrap().memory().total > 0);
    let rpc_first: Vec<&str> = registry
        .default_model_devices()
        .iter()
        .map(|d| d.name())
        .collect();
    assert_eq!(rpc_first, ["RPC0", "RPC1"]);

    let mut ts = [0.0f32; 16];
    ts[0] = 1.0;
    ts[1] = 3.0;
    let placement = PlacementParams {
        registry,
        tensor_split: Some(ts),
        ..Default::default()
    };
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("rpc-split", &base);
    let open = |path: &std::path::Path| {
        load(
            ModelSource::Path(path.to_path_buf()),
            LoadOptions {
                load_mode: LoadMode::None,
                placement: placement.clone(),
                hotswap: true,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let model = open(&path);
    assert_others_match_file(&model, &path, "");
    // Layers on both servers.
    let q0 = "blk.0.attn_q.weight";
    let q_last = "blk.1.attn_q.weight";
    let on = |name: &str| {
        registry
            .get(model.tensor_info(name).unwrap().device as usize)
            .unwrap()
            .name()
            .to_string()
    };
    assert_eq!((on(q0).as_str(), on(q_last).as_str()), ("RPC0", "RPC1"));

    // A -> B (Q4_0) on RPC1: as a fresh load; the report names the host.
    let original = current(&model, q_last);
    assert_eq!(original, file_bytes(&path, q_last));
    let changed = variant(
        &base,
        &[(
            q_last,
            Some((GgmlType::Q4_0, bytes_for(&base, q_last, GgmlType::Q4_0, 7))),
        )],
    );
    replace(&path, &changed);
    let report = hotswap::reload_changed(&model).unwrap();
    let entry = report.entries.iter().find(|e| e.name == q_last).unwrap();
    assert_eq!(entry.outcome, Outcome::Relocated, "{report:?}");
    assert_eq!(entry.device, format!("RPC1[{}]", b.endpoint));
    let fresh = open(&path);
    assert_eq!(current(&model, q_last), current(&fresh, q_last));
    assert_eq!(current(&model, q_last), file_bytes(&path, q_last));
    drop(fresh);
    // B -> A: bit-identical to before, back on its original buffer.
    replace(&path, &base);
    let report = hotswap::reload_changed(&model).unwrap();
    let entry = report.entries.iter().find(|e| e.name == q_last).unwrap();
    assert_eq!(entry.outcome, Outcome::ReturnedToOriginal, "{report:?}");
    assert_eq!(current(&model, q_last), original);
    assert_others_match_file(&model, &path, "");

    // The CPU executor alone cannot read remote weights; it names the server.
    let st = model.tensors.get(q0).unwrap();
    let err = llama::graph::exec::check_weight(&st.read(), q0)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&a.endpoint), "{err}");
}

/// Decodes `tokens` at positions `p0..` of sequence 0 with logits for every token.
fn decode_all(ctx: &llama::context::Context, tokens: &[i32], p0: i32) -> (i32, Vec<f32>) {
    {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend_from_slice(tokens);
        e.raw.has_pos = true;
        e.raw.pos.extend((0..tokens.len() as i32).map(|i| p0 + i));
        e.raw.has_output = true;
        e.raw.output.extend(tokens.iter().map(|_| true));
    }
    let code = ctx.decode();
    let e = ctx.engine();
    (code, e.logits[..e.n_outputs * N_VOCAB].to_vec())
}

const N_VOCAB: usize = 320;

/// The largest KL(p || q) over rows, p from `a`, q from `b`.
fn max_kl(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let logp = |r: &[f32]| {
        let m = r.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let s: f64 = r.iter().map(|&v| (v as f64 - m).exp()).sum();
        r.iter()
            .map(|&v| v as f64 - m - s.ln())
            .collect::<Vec<f64>>()
    };
    a.chunks(N_VOCAB)
        .zip(b.chunks(N_VOCAB))
        .map(|(x, y)| {
            let (lp, lq) = (logp(x), logp(y));
            lp.iter()
                .zip(&lq)
                .map(|(p, q)| p.exp() * (p - q))
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
}

fn argmax(r: &[f32]) -> usize {
    (0..r.len()).fold(0, |b, i| if r[i] > r[b] { i } else { b })
}

/// Decoding with layers on two rpc-servers (layers 0 and 1 on the CPU, 2 on one server, 3
/// and the output on the other: each split's nodes sent as ggml's graph, the KV rows on the servers) gives
/// the all-CPU logits within the engine's tolerance (the servers run ggml's kernels), for a
/// prompt and single-token steps; a hot-swapped remote tensor decodes as a fresh load of the
/// new file; a server killed mid-decode makes decode fail with an error, not a hang.
#[test]
fn decode_with_layers_on_two_servers() {
    use hotswap_common::{finite_bytes_for, replace, setup, variant};
    use llama::context::{Context, ContextParams};
    use llama::device::Registry;
    use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
    use llama::gguf::GgmlType;
    use llama::loader::place::PlacementParams;
    use llama::loader::{load, LoadOptions, ModelSource};
    use llama::model::LoadMode;

    let (Some(a), Some(mut b)) = (start(false), start(false)) else {
        return;
    };
    let servers = vec![
        RpcServer::connect(&a.endpoint, timeouts()).unwrap(),
        RpcServer::connect(&b.endpoint, timeouts()).unwrap(),
    ];
    let registry: &'static Registry =
        Box::leak(Box::new(Registry::with_rpc_servers(&[], &servers)));
    let mut ts = [0.0f32; 16];
    ts[0] = 1.0;
    ts[1] = 2.0;
    let remote = PlacementParams {
        registry,
        n_gpu_layers: 3,
        tensor_split: Some(ts),
        ..Default::default()
    };
    let opts = TinyLlamaOpts {
        n_layer: 4,
        ..TinyLlamaOpts::with_type(GgmlType::Q8_0)
    };
    let base = tiny_llama(&opts).unwrap();
    let (_dir, path) = setup("rpc-decode", &base);
    let open = |placement: PlacementParams| {
        Arc::new(
            load(
                ModelSource::Path(path.clone()),
                LoadOptions {
                    load_mode: LoadMode::None,
                    placement,
                    hotswap: true,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 16,
        n_ubatch: 16,
        n_seq_max: 1,
        n_threads: 1,
        n_threads_batch: 1,
        flash_attn_type: 1,
        ..ContextParams::default()
    };
    let model = open(remote.clone());
    let dev = |name: &str| {
        let d = model.tensor_info(name).unwrap().device as usize;
        registry.get(d).unwrap().name().to_string()
    };
    let homes: Vec<String> = (0..4)
        .map(|il| dev(&format!("blk.{il}.attn_q.weight")))
        .collect();
    // upstream's rule: the last n_gpu_layers of n_layer + 1 (the output layer counts) offloaded
    assert_eq!(homes, ["CPU", "CPU", "RPC0", "RPC1"], "layer placement");
    assert_eq!(dev("output.weight"), "RPC1");
    let cpu_model = open(PlacementParams {
        registry,
        n_gpu_layers: 0,
        ..Default::default()
    });
    let prompt = [1, 17, 42, 99, 7, 250, 3, 64, 5];
    let run = |m: &Arc<llama::model::Model>| {
        let ctx = Context::new(Arc::clone(m), &params).unwrap();
        let (code, mut logits) = decode_all(&ctx, &prompt, 0);
        assert_eq!(code, 0);
        let mut next = argmax(&logits[logits.len() - N_VOCAB..]) as i32;
        for step in 0..4 {
            let (code, l) = decode_all(&ctx, &[next], prompt.len() as i32 + step);
            assert_eq!(code, 0);
            next = argmax(&l) as i32;
            logits.extend(l);
        }
        (ctx, logits)
    };
    let (_c0, on_cpu) = run(&cpu_model);
    let (ctx, split) = run(&model);
    assert!(split.iter().all(|v| v.is_finite()));
    let kl = max_kl(&on_cpu, &split);
    eprintln!(
        "max KL(cpu || rpc split) over {} rows: {kl:.3e}",
        split.len() / N_VOCAB
    );
    assert!(kl < 1e-3, "KL {kl}");
    for (x, y) in on_cpu.chunks(N_VOCAB).zip(split.chunks(N_VOCAB)) {
        assert_eq!(argmax(x), argmax(y), "top-1");
    }
    // Twice the same: the remote KV rows and inputs are rebuilt per run, nothing stale.
    let (_c1, again) = run(&model);
    assert_eq!(
        again, split,
        "a second context on the same servers decodes the same"
    );
    drop(_c1);

    // Hot-swap a tensor on RPC1 to another type: the next decode equals a fresh load.
    let name = "blk.3.ffn_down.weight";
    let changed = variant(
        &base,
        &[(
            name,
            Some((
                GgmlType::Q4_0,
                finite_bytes_for(&base, name, GgmlType::Q4_0, 11),
            )),
        )],
    );
    replace(&path, &changed);
    let report = llama::hotswap::reload_changed(&model).unwrap();
    assert!(report.entries.iter().any(|e| e.name == name), "{report:?}");
    drop(ctx);
    let (ctx, swapped) = run(&model);
    assert!(swapped.iter().all(|v| v.is_finite()));
    assert_ne!(swapped, split, "the swap changed the logits");
    let fresh = open(remote.clone());
    let (_c2, fresh_logits) = run(&fresh);
    let rows_equal: Vec<bool> = swapped
        .chunks(N_VOCAB)
        .zip(fresh_logits.chunks(N_VOCAB))
        .map(|(x, y)| x == y)
        .collect();
    assert_eq!(
        swapped,
        fresh_logits,
        "swapped model decodes as a fresh load (rows equal: {rows_equal:?}, KL {:e})",
        max_kl(&swapped, &fresh_logits)
    );
    drop(_c2);
    drop(fresh);

    // A context shift (llama-server's: drop positions 1..3, move the rest back by 2) with the
    // K rows of layers 2 and 3 on the servers: their keys are re-rotated there too, so the
    // next token's logits are those of the all-CPU model doing the same (keys left unrotated
    // on the servers would be off by two positions).
    {
        let shifted = |m: &Arc<llama::model::Model>| {
            let ctx = Context::new(Arc::clone(m), &params).unwrap();
            assert_eq!(decode_all(&ctx, &prompt, 0).0, 0);
            ctx.engine().kv.seq_rm(Some(0), 1, 3);
            ctx.engine().kv.seq_add(0, 3, -1, -2);
            let (code, logits) = decode_all(&ctx, &[5], prompt.len() as i32 - 2);
            assert_eq!(code, 0, "decode after the K-shift");
            logits
        };
        let on_servers = shifted(&open(remote.clone()));
        let on_cpu = shifted(&open(PlacementParams {
            registry,
            n_gpu_layers: 0,
            ..Default::default()
        }));
        let kl = max_kl(&on_servers, &on_cpu);
        assert!(
            kl < 1e-12,
            "K-shift with remote layers: KL {kl:e} from the all-CPU shift"
        );
        assert_eq!(argmax(&on_servers), argmax(&on_cpu));
    }

    // State save and load with the KV rows of layers 2 and 3 on the servers: the state of a
    // remote context restored into a fresh remote context (whole, and as sequence 0 into a
    // context holding another prompt) decodes the next token as the saver does, bit for bit;
    // the saved bytes equal those of the same context saved again after the restore.
    {
        use llama::kv_cache::state::{SliceSource, StateOut};
        let m = open(remote.clone());
        let a = Context::new(Arc::clone(&m), &params).unwrap();
        assert_eq!(decode_all(&a, &prompt, 0).0, 0);
        let mut whole = Vec::new();
        a.state_write(StateOut::Bytes(&mut whole)).unwrap();
        let mut seq = Vec::new();
        a.state_seq_write(Some(&mut seq), 0, 0).unwrap();
        let (code, want) = decode_all(&a, &[5], prompt.len() as i32);
        assert_eq!(code, 0);
        let b = Context::new(Arc::clone(&m), &params).unwrap();
        assert_eq!(decode_all(&b, &[9, 8, 7], 0).0, 0);
        assert_eq!(
            b.state_read(&mut SliceSource::new(&whole)).unwrap(),
            whole.len()
        );
        let mut again = Vec::new();
        b.state_write(StateOut::Bytes(&mut again)).unwrap();
        assert!(
            again == whole,
            "state after a restore differs from the restored state"
        );
        let (code, got) = decode_all(&b, &[5], prompt.len() as i32);
        assert_eq!(code, 0);
        assert!(
            got == want,
            "whole state on rpc-servers: KL {:e}",
            max_kl(&got, &want)
        );
        let c = Context::new(Arc::clone(&m), &params).unwrap();
        assert_eq!(decode_all(&c, &[9, 8, 7, 6], 0).0, 0);
        c.state_seq_read(&mut SliceSource::new(&seq), 0, 0).unwrap();
        let (code, got) = decode_all(&c, &[5], prompt.len() as i32);
        assert_eq!(code, 0);
        assert!(
            got == want,
            "sequence state on rpc-servers: KL {:e}",
            max_kl(&got, &want)
        );
    }

    // A server killed mid-decode: decode fails (no hang, no crash) and says which server.
    let _ = b.child.kill();
    let _ = b.child.wait();
    let t0 = Instant::now();
    let (code, _) = decode_all(&ctx, &[5], prompt.len() as i32 + 4);
    // -3: the compute failed (not a refused batch)
    assert_eq!(code, -3, "decode after the server died");
    // the next decode fails the same way at once: the connection stays closed
    assert_eq!(decode_all(&ctx, &[5], prompt.len() as i32 + 4).0, -3);
    assert!(t0.elapsed() < Duration::from_secs(30), "no hang");
    // The CPU model still decodes in this process.
    let ctx_cpu = Context::new(Arc::clone(&cpu_model), &params).unwrap();
    assert_eq!(decode_all(&ctx_cpu, &prompt, 0).0, 0);
}
