//! The ggml-rpc client against hostile fake servers (garbage, short replies, wrong version,
//! a close mid-reply, silence): every case is a typed error naming the server, within the
//! timeout, never a panic or a hang. Also the reply parsers over random bytes (the fuzz
//! target's replay). The client against upstream's real `rpc-server` is tests/rpc_server.rs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use llama::device::rpc::wire::{self, Cmd, ReplyError, RpcTensor};
use llama::device::rpc::{parse_endpoint, Connection, RpcErrorKind, Timeouts};

fn quick() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        io: Duration::from_millis(400),
    }
}

/// Reads one request: (cmd, body).
fn read_request(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let mut size = [0u8; 8];
    size.copy_from_slice(&head[1..]);
    let mut body = vec![0u8; u64::from_le_bytes(size) as usize];
    s.read_exact(&mut body).ok()?;
    Some((head[0], body))
}

fn reply(s: &mut TcpStream, body: &[u8]) {
    let _ = s.write_all(&(body.len() as u64).to_le_bytes());
    let _ = s.write_all(body);
}

fn good_hello() -> Vec<u8> {
    let mut b = vec![wire::PROTO_MAJOR, wire::PROTO_MINOR, wire::PROTO_PATCH, 0];
    b.extend_from_slice(&[0u8; wire::CONN_CAPS_SIZE]);
    b
}

/// A server on a free port that runs `script` on its first connection; returns the endpoint.
fn fake(script: impl FnOnce(TcpStream) + Send + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("127.0.0.1:{}", l.local_addr().unwrap().port());
    thread::spawn(move || {
        if let Ok((s, _)) = l.accept() {
            script(s);
        }
    });
    ep
}

/// A server that answers HELLO correctly, then runs `script`.
fn fake_after_hello(script: impl FnOnce(TcpStream) + Send + 'static) -> String {
    fake(move |mut s| {
        let (cmd, body) = read_request(&mut s).unwrap();
        assert_eq!(cmd, Cmd::Hello as u8);
        assert_eq!(
            body,
            vec![0u8; wire::CONN_CAPS_SIZE],
            "we offer no transport caps"
        );
        reply(&mut s, &good_hello());
        script(s)
    })
}

fn kind_of(ep: &str, r: Result<Connection, llama::device::rpc::RpcError>) -> RpcErrorKind {
    let e = r.expect_err("the connection must fail");
    assert_eq!(e.server, ep, "the error names the server");
    assert!(e.to_string().contains(ep), "{e}");
    e.kind
}

#[test]
fn endpoints_parse_strictly() {
    assert_eq!(
        parse_endpoint("127.0.0.1:50052").unwrap(),
        ("127.0.0.1".into(), 50052)
    );
    assert_eq!(parse_endpoint("[::1]:7").unwrap(), ("::1".into(), 7));
    assert_eq!(parse_endpoint(" host:1 ").unwrap(), ("host".into(), 1));
    for bad in [
        "",
        "host",
        ":50052",
        "host:",
        "host:0",
        "host:65536",
        "host:x",
        "host:-1",
    ] {
        assert!(parse_endpoint(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn wrong_port_is_a_connect_error() {
    // A port that was free a moment ago: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = format!("127.0.0.1:{port}");
    match kind_of(&ep, Connection::connect(&ep, quick())) {
        RpcErrorKind::Connect(why) => assert!(why.contains("refused"), "{why}"),
        k => panic!("{k:?}"),
    }
    let ep = "no-such-host.invalid:50052";
    assert!(matches!(
        kind_of(ep, Connection::connect(ep, quick())),
        RpcErrorKind::Connect(_)
    ));
}

#[test]
fn wrong_version_is_refused() {
    for (major, minor) in [(6u8, 0u8), (8, 0), (7, 1)] {
        let ep = fake(move |mut s| {
            read_request(&mut s);
            let mut b = good_hello();
            b[0] = major;
            b[1] = minor;
            reply(&mut s, &b);
        });
        match kind_of(&ep, Connection::connect(&ep, quick())) {
            RpcErrorKind::Reply {
                cmd: "HELLO",
                err:
                    ReplyError::Version {
                        major: m, minor: n, ..
                    },
            } => assert_eq!((m, n), (major, minor)),
            k => panic!("{k:?}"),
        }
    }
}

#[test]
fn hostile_hello_replies_are_errors() {
    // A size far larger than HELLO's reply: refused before anything is read or allocated.
    let ep = fake(|mut s| {
        read_request(&mut s);
        let _ = s.write_all(&u64::MAX.to_le_bytes());
        thread::sleep(Duration::from_millis(200));
    });
    assert!(matches!(
        kind_of(&ep, Connection::connect(&ep, quick())),
        RpcErrorKind::Reply {
            err: ReplyError::Size { got: u64::MAX, .. },
            ..
        }
    ));
    // Half a reply, then the server closes.
    let ep = fake(|mut s| {
        read_request(&mut s);
        let _ = s.write_all(&28u64.to_le_bytes());
        let _ = s.write_all(&[7, 0, 0]);
    });
    assert!(matches!(
        kind_of(&ep, Connection::connect(&ep, quick())),
        RpcErrorKind::Closed { cmd: "HELLO" }
    ));
    // A transport upgrade we never offered.
    let ep = fake(|mut s| {
        read_request(&mut s);
        let mut b = good_hello();
        b[10] = 1;
        reply(&mut s, &b);
    });
    assert!(matches!(
        kind_of(&ep, Connection::connect(&ep, quick())),
        RpcErrorKind::Reply {
            err: ReplyError::Invalid(_),
            ..
        }
    ));
    // Closed before any reply.
    let ep = fake(|s| drop(s));
    let k = kind_of(&ep, Connection::connect(&ep, quick()));
    assert!(matches!(k, RpcErrorKind::Closed { .. }), "{k:?}");
}

#[test]
fn a_silent_server_times_out() {
    let ep = fake(|mut s| {
        read_request(&mut s);
        thread::sleep(Duration::from_secs(3));
    });
    let t0 = Instant::now();
    match kind_of(&ep, Connection::connect(&ep, quick())) {
        RpcErrorKind::Timeout { cmd: "HELLO", .. } => {}
        k => panic!("{k:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn bad_values_in_replies_are_errors_and_break_the_connection() {
    let ep = fake_after_hello(|mut s| {
        // DEVICE_COUNT 0, then whatever comes next is never answered.
        let (cmd, body) = read_request(&mut s).unwrap();
        assert_eq!((cmd, body.len()), (Cmd::DeviceCount as u8, 0));
        reply(&mut s, &0u32.to_le_bytes());
        thread::sleep(Duration::from_millis(300));
    });
    let mut c = Connection::connect(&ep, quick()).unwrap();
    assert_eq!(c.version(), (7, 0, 0));
    let e = c.device_count().unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Reply {
                cmd: "DEVICE_COUNT",
                ..
            }
        ),
        "{e}"
    );
    // Later calls fail at once, saying why.
    let e = c.memory(0).unwrap_err();
    assert!(
        matches!(e.kind, RpcErrorKind::Broken(ref why) if why.contains("device count 0")),
        "{e}"
    );

    let ep = fake_after_hello(|mut s| {
        read_request(&mut s);
        let mut b = 10u64.to_le_bytes().to_vec(); // free 10 > total 5
        b.extend_from_slice(&5u64.to_le_bytes());
        reply(&mut s, &b);
        read_request(&mut s);
        reply(&mut s, &3u64.to_le_bytes()); // alignment 3
    });
    let mut c = Connection::connect(&ep, quick()).unwrap();
    assert!(matches!(
        c.memory(0).unwrap_err().kind,
        RpcErrorKind::Reply { .. }
    ));
}

#[test]
fn alloc_replies_are_checked() {
    let ep = fake_after_hello(|mut s| {
        // Null buffer: out of memory.
        let (cmd, body) = read_request(&mut s).unwrap();
        assert_eq!(cmd, Cmd::AllocBuffer as u8);
        assert_eq!(body.len(), 12);
        reply(&mut s, &[0u8; 16]);
        // A buffer smaller than asked.
        read_request(&mut s);
        let mut b = 0x1000u64.to_le_bytes().to_vec();
        b.extend_from_slice(&8u64.to_le_bytes());
        reply(&mut s, &b);
    });
    let mut c = Connection::connect(&ep, quick()).unwrap();
    let e = c.alloc_buffer(0, 1 << 20).unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::OutOfMemory {
                device: 0,
                requested: 1048576
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&ep));
    let e = c.alloc_buffer(0, 1 << 20).unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Reply {
                cmd: "ALLOC_BUFFER",
                err: ReplyError::Invalid(_)
            }
        ),
        "{e}"
    );
}

#[test]
fn get_tensor_reply_of_the_wrong_size_is_refused_and_a_close_mid_reply_is_an_error() {
    let ep = fake_after_hello(|mut s| {
        read_request(&mut s);
        reply(&mut s, &[1u8; 5]); // asked for 4
    });
    let mut c = Connection::connect(&ep, quick()).unwrap();
    let mut out = [0u8; 4];
    let e = c
        .get_tensor(&RpcTensor::bytes(1, 0x1000, 4), 0, &mut out)
        .unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Reply {
                err: ReplyError::Size {
                    expected: 4,
                    got: 5
                },
                ..
            }
        ),
        "{e}"
    );

    let ep = fake_after_hello(|mut s| {
        read_request(&mut s);
        let _ = s.write_all(&64u64.to_le_bytes());
        let _ = s.write_all(&[9u8; 10]);
    });
    let mut c = Connection::connect(&ep, quick()).unwrap();
    let mut out = [0u8; 64];
    let e = c
        .get_tensor(&RpcTensor::bytes(1, 0x1000, 64), 0, &mut out)
        .unwrap_err();
    assert!(
        matches!(e.kind, RpcErrorKind::Closed { cmd: "GET_TENSOR" }),
        "{e}"
    );
}

#[test]
fn a_command_without_reply_that_the_server_rejects_shows_at_the_next_round_trip() {
    // rpc-server closes the connection when SET_TENSOR fails; sync() must report it.
    let ep = fake_after_hello(|mut s| {
        let (cmd, body) = read_request(&mut s).unwrap();
        assert_eq!(cmd, Cmd::SetTensor as u8);
        assert_eq!(body.len(), wire::RPC_TENSOR_SIZE + 9 + 3);
        assert_eq!(&body[wire::RPC_TENSOR_SIZE + 9..], &[1, 2, 3]);
    });
    let mut c = Connection::connect(&ep, quick()).unwrap();
    c.set_tensor(&RpcTensor::bytes(1, 0x1000, 3), 0, &[1, 2, 3], false)
        .unwrap();
    let e = c.sync().unwrap_err();
    assert!(
        matches!(
            e.kind,
            RpcErrorKind::Closed { .. } | RpcErrorKind::Io { .. }
        ),
        "{e}"
    );
}

#[test]
fn rpc_tensor_layout_is_upstreams() {
    let mut t = RpcTensor::bytes(0xAB, 0x1000, 100).with_name("blk.0.attn_q.weight");
    t.op = 29;
    t.op_params[15] = -1;
    t.src[9] = 7;
    t.use_count = 3;
    let mut out = Vec::new();
    t.encode_into(&mut out);
    assert_eq!(out.len(), wire::RPC_TENSOR_SIZE);
    assert_eq!(&out[0..8], &0x1000u64.to_le_bytes()); // id
    assert_eq!(&out[8..12], &24u32.to_le_bytes()); // GGML_TYPE_I8
    assert_eq!(&out[12..20], &0xABu64.to_le_bytes()); // buffer
    assert_eq!(&out[20..24], &100u32.to_le_bytes()); // ne[0]
    assert_eq!(&out[52..56], &29u32.to_le_bytes()); // op after ne, nb
    assert_eq!(&out[116..120], &(-1i32).to_le_bytes()); // op_params[15]
    assert_eq!(&out[124 + 72..124 + 80], &7u64.to_le_bytes()); // src[9]
    assert_eq!(&out[228..228 + 19], b"blk.0.attn_q.weight"); // name after view_src, offs, data
    assert_eq!(&out[292..296], &3i32.to_le_bytes());
    assert_eq!(RpcTensor::decode(&out).unwrap(), t);
    assert_eq!(wire::fnv1a(b""), 0xcbf29ce484222325);
    assert_eq!(wire::fnv1a(b"a"), 0xaf63dc4c8601ec8c);
}

#[test]
fn reply_parsers_survive_random_bytes() {
    // The fuzz target's body (fuzz/fuzz_targets/rpc_reply.rs) over a deterministic stream of
    // lengths and contents, including the exact sizes the parsers accept.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20_000 {
        let len = match round % 8 {
            0 => 1,
            1 => 4,
            2 => 8,
            3 => 16,
            4 => 28,
            5 => wire::RPC_TENSOR_SIZE,
            _ => (next() % 400) as usize,
        };
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 3 == 0 && len == 28 {
            data[0] = 7;
            data[1] = 0;
        }
        if round % 5 == 0 {
            data.iter_mut().skip(2).for_each(|b| *b = 0);
        }
        wire::fuzz_replies(&data);
    }
}
