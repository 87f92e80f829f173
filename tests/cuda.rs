//! CUDA devices (src/device/cuda/): allocation, copies both ways (1 MiB and more staged
//! through the pinned ring), uploads from files through the ring (offsets, chunk boundaries,
//! short reads, concurrent uploads), memory queries, the registry's CUDA entries and
//! `LLAMA_HOTSWAP_NO_CUDA`.
//!
//! Without a usable GPU (no driver, no device, or CUDA disabled), every test that needs one
//! prints `skipping: <reason>` and passes.

use std::io::Write;
use std::process::Command;
use std::sync::Arc;

use llama::device::cuda::{self, CudaDevice, STAGING_BYTES};
use llama::device::{DeviceType, Registry};

const MIB: usize = 1 << 20;

/// The first CUDA device, or None (after printing why) when CUDA is not usable here.
fn gpu() -> Option<Arc<CudaDevice>> {
    match cuda::availability() {
        Err(reason) => {
            println!("skipping: {reason}");
            None
        }
        Ok(()) => Some(
            cuda::probe()
                .into_iter()
                .next()
                .expect("availability() is Ok, so probe() finds a device"),
        ),
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn temp_file_with(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("create a temporary file");
    file.write_all(bytes).expect("write the temporary file");
    file.flush().expect("flush the temporary file");
    file
}

fn read_back(buffer: &cuda::CudaBuffer, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    buffer.read(offset, &mut out).expect("read back");
    out
}

/// First differing index, for a readable failure instead of two 100 MiB dumps.
fn assert_same(actual: &[u8], expected: &[u8], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    if let Some(i) = actual.iter().zip(expected).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} (chunk {}): got {:#04x}, expected {:#04x}",
            i / STAGING_BYTES,
            actual[i],
            expected[i]
        );
    }
}

#[test]
fn probe_agrees_with_availability() {
    let devices = cuda::probe();
    match cuda::availability() {
        Err(reason) => {
            assert!(!reason.is_empty());
            assert!(
                devices.is_empty(),
                "probe() found devices although: {reason}"
            );
            println!("skipping: {reason}");
        }
        Ok(()) => {
            assert!(!devices.is_empty());
            let id = regex::Regex::new(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0$").unwrap();
            for (i, device) in devices.iter().enumerate() {
                let info = device.info();
                println!("{info:?}");
                assert_eq!(info.ordinal as usize, i);
                assert!(!info.description.is_empty());
                assert!(info.total_memory > 0);
                let bus = info.pci_bus_id.as_deref().expect("a PCI bus id");
                assert!(id.is_match(bus), "PCI bus id {bus:?}");
            }
            // The same devices every time (one context and staging ring per device).
            let again = cuda::probe();
            assert!(Arc::ptr_eq(&devices[0], &again[0]));
        }
    }
}

/// Runs `no_cuda_child` in a child process with LLAMA_HOTSWAP_NO_CUDA=1 (the variable must be
/// set before the driver is first probed, and this process may already have probed it).
#[test]
fn no_cuda_env_disables_cuda() {
    let exe = std::env::current_exe().expect("test executable");
    let output = Command::new(exe)
        .args([
            "no_cuda_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(cuda::NO_CUDA_ENV, "1")
        .env("LLAMA_HOTSWAP_CUDA_TEST_CHILD", "1")
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("no_cuda_child: ok"),
        "child failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("CUDA disabled by LLAMA_HOTSWAP_NO_CUDA=1"),
        "the registry's probe logs why it found no CUDA devices:\n{stderr}"
    );
}

/// The child half of `no_cuda_env_disables_cuda`; does nothing when run directly.
#[test]
fn no_cuda_child() {
    if std::env::var_os("LLAMA_HOTSWAP_CUDA_TEST_CHILD").is_none() {
        return;
    }
    let reason = cuda::availability().expect_err("CUDA is disabled");
    assert!(reason.contains(cuda::NO_CUDA_ENV), "{reason}");
    assert!(cuda::probe().is_empty());
    let registry = Registry::global();
    assert!(registry
        .devices()
        .iter()
        .all(|d| !d.name().starts_with("CUDA")));
    assert_eq!(
        registry.devices().last().unwrap().device_type(),
        DeviceType::Cpu
    );
    println!("no_cuda_child: ok");
}

#[test]
fn write_read_roundtrip() {
    let Some(device) = gpu() else { return };
    let len = 3 * MIB + 5;
    let mut buffer = device.alloc(len).expect("alloc");
    assert_eq!(buffer.len(), len);
    assert!(!buffer.is_empty());
    let data = random_bytes(len, 1);
    buffer.write(0, &data).expect("write");
    assert_same(&read_back(&buffer, 0, len), &data, "whole buffer");

    // Partial writes and reads at odd offsets leave the rest alone.
    let patch = random_bytes(4099, 2);
    buffer.write(MIB + 3, &patch).expect("patch");
    assert_same(&read_back(&buffer, MIB + 3, patch.len()), &patch, "patch");
    assert_same(
        &read_back(&buffer, 0, MIB + 3),
        &data[..MIB + 3],
        "before patch",
    );
    let after = MIB + 3 + patch.len();
    assert_same(
        &read_back(&buffer, after, len - after),
        &data[after..],
        "after patch",
    );

    // Writes of 1 MiB and more go through the staging ring: sizes around its chunk and ring
    // boundaries, at an odd offset, leave the bytes around them alone.
    let ring = cuda::staging_buffers() * STAGING_BYTES;
    let big = random_bytes(ring + STAGING_BYTES + 3, 5);
    let mut staged = device.alloc(big.len() + 22).expect("alloc");
    let sentinel = random_bytes(big.len() + 22, 6);
    staged.write(0, &sentinel).expect("sentinel");
    for len in [MIB, STAGING_BYTES + 1, ring, big.len()] {
        staged.write(11, &big[..len]).expect("staged write");
        let back = read_back(&staged, 0, big.len() + 22);
        assert_same(
            &back[11..11 + len],
            &big[..len],
            &format!("staged write of {len}"),
        );
        assert_same(&back[..11], &sentinel[..11], "bytes before a staged write");
        assert_same(
            &back[big.len() + 11..],
            &sentinel[big.len() + 11..],
            "bytes after",
        );
    }

    // Reads of 1 MiB and more come back through the ring too: odd offsets, chunk and ring
    // boundaries.
    let mut expect = sentinel.clone();
    expect[11..11 + big.len()].copy_from_slice(&big);
    for (at, len) in [(7, MIB), (4093, STAGING_BYTES + 1), (1, ring + 1)] {
        let what = format!("staged read of {len} at {at}");
        assert_same(&read_back(&staged, at, len), &expect[at..at + len], &what);
    }
    assert!(staged
        .read(expect.len() - MIB + 1, &mut vec![0u8; MIB])
        .is_err());

    // Empty copies and an empty buffer.
    buffer.write(len, &[]).expect("empty write at the end");
    buffer.read(len, &mut []).expect("empty read at the end");
    let empty = device.alloc(0).expect("alloc(0)");
    assert!(empty.is_empty());
    drop(empty);
}

#[test]
fn out_of_range_copies_fail() {
    let Some(device) = gpu() else { return };
    let mut buffer = device.alloc(4096).expect("alloc");
    assert!(buffer.write(4000, &[0u8; 97]).is_err());
    assert!(buffer.write(usize::MAX, &[0u8; 2]).is_err());
    assert!(buffer.read(1, &mut [0u8; 4096]).is_err());
    let file = temp_file_with(&[7u8; 8192]);
    let error = buffer
        .fill_from_file(file.as_file(), 0, 100, 4000)
        .expect_err("outside the buffer");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    let error = buffer
        .fill_from_file(file.as_file(), u64::MAX, 0, 16)
        .expect_err("file offset overflows");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    // The buffer still works.
    buffer.write(0, &[1, 2, 3]).expect("write");
    assert_eq!(read_back(&buffer, 0, 3), [1, 2, 3]);
}

#[test]
fn fill_from_file_matches_file() {
    let Some(device) = gpu() else { return };
    let file_len = 100 * MIB;
    let data = random_bytes(file_len, 3);
    let file = temp_file_with(&data);

    // A large upload at a non-zero, unaligned file offset into the middle of a buffer.
    let file_offset = 4093;
    let dst_offset = 1000;
    let len = file_len - file_offset - 12_345;
    let size = dst_offset + len + 777;
    let mut buffer = device.alloc(size).expect("alloc");
    let sentinel = random_bytes(size, 4);
    buffer.write(0, &sentinel).expect("sentinel");
    buffer
        .fill_from_file(file.as_file(), file_offset as u64, dst_offset, len)
        .expect("fill_from_file");
    let back = read_back(&buffer, 0, size);
    assert_same(
        &back[dst_offset..dst_offset + len],
        &data[file_offset..file_offset + len],
        "uploaded range",
    );
    assert_same(&back[..dst_offset], &sentinel[..dst_offset], "bytes before");
    assert_same(
        &back[dst_offset + len..],
        &sentinel[dst_offset + len..],
        "bytes after",
    );

    // Sizes around the chunk and ring boundaries (one thread, two, all, more chunks than
    // buffers), each at its own offsets.
    let ring = cuda::staging_buffers() * STAGING_BYTES;
    for (i, len) in [
        1,
        STAGING_BYTES - 1,
        STAGING_BYTES,
        STAGING_BYTES + 1,
        ring,
        ring + STAGING_BYTES + 3,
    ]
    .into_iter()
    .enumerate()
    {
        let file_offset = (i * 7919) % 4096 + 1;
        let dst_offset = i * 13;
        buffer
            .fill_from_file(file.as_file(), file_offset as u64, dst_offset, len)
            .unwrap_or_else(|e| panic!("fill_from_file of {len} bytes: {e}"));
        assert_same(
            &read_back(&buffer, dst_offset, len),
            &data[file_offset..file_offset + len],
            &format!("upload of {len} bytes"),
        );
    }
}

#[test]
fn short_read_is_unexpected_eof() {
    let Some(device) = gpu() else { return };
    let data = random_bytes(40 * MIB + 17, 5);
    let file = temp_file_with(&data);
    let mut buffer = device.alloc(80 * MIB).expect("alloc");

    // Small (one chunk), large (several upload threads), and starting past the end.
    for (file_offset, len) in [
        (40 * MIB as u64, MIB),
        (0, 80 * MIB),
        (100 * MIB as u64, 10),
    ] {
        let error = buffer
            .fill_from_file(file.as_file(), file_offset, 0, len)
            .expect_err("the file is too short");
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "{len} bytes at {file_offset}: {error}"
        );
    }

    // The staging ring is usable afterwards.
    buffer
        .fill_from_file(file.as_file(), 17, 5, data.len() - 17)
        .expect("fill after errors");
    assert_same(
        &read_back(&buffer, 5, data.len() - 17),
        &data[17..],
        "upload after short reads",
    );
}

#[test]
fn concurrent_uploads() {
    let Some(device) = gpu() else { return };
    let data = random_bytes(48 * MIB + 9, 6);
    let file = temp_file_with(&data);
    std::thread::scope(|scope| {
        for t in 0..3usize {
            let device = &device;
            let file = &file;
            let data = &data;
            scope.spawn(move || {
                let len = data.len() - t * 1000;
                let mut buffer = device.alloc(len).expect("alloc");
                for _ in 0..2 {
                    buffer
                        .fill_from_file(file.as_file(), (t * 1000) as u64, 0, len)
                        .expect("fill_from_file");
                    assert_same(
                        &read_back(&buffer, 0, len),
                        &data[t * 1000..],
                        &format!("thread {t}"),
                    );
                }
            });
        }
    });
}

#[test]
fn pinned_copy_roundtrip() {
    let Some(device) = gpu() else { return };
    let len = 5 * MIB + 3;
    let mut pinned = device.alloc_pinned(len).expect("alloc_pinned");
    assert_eq!(pinned.len(), len);
    assert!(
        pinned.iter().all(|&b| b == 0),
        "pinned memory starts zeroed"
    );
    let data = random_bytes(len, 7);
    pinned.copy_from_slice(&data);
    let mut buffer = device.alloc(len + 10).expect("alloc");
    buffer.write_pinned(10, &pinned).expect("write_pinned");
    assert_same(&read_back(&buffer, 10, len), &data, "pinned copy");
    assert!(buffer.write_pinned(11, &pinned).is_err(), "out of range");
}

#[test]
fn memory_is_sane() {
    let Some(device) = gpu() else { return };
    let (free, total) = device.memory().expect("cuMemGetInfo");
    println!(
        "{}: {free} of {total} bytes free",
        device.info().description
    );
    assert!(total > 0);
    assert!(free <= total);
    assert!(total <= device.info().total_memory);
    // A 256 MiB allocation shows up (other processes may allocate too, so loosely).
    let buffer = device.alloc(256 * MIB).expect("alloc");
    let (free_after, _) = device.memory().expect("cuMemGetInfo");
    assert!(free_after < free, "{free_after} < {free}");
    drop(buffer);
}

#[test]
fn registry_lists_cuda_first() {
    let Some(device) = gpu() else { return };
    let registry = Registry::global();
    let devices = cuda::probe();
    for (i, cuda_device) in devices.iter().enumerate() {
        let entry = &registry.devices()[i];
        assert_eq!(entry.name(), format!("CUDA{i}"));
        assert_eq!(entry.index(), i);
        assert_eq!(entry.device_type(), DeviceType::Gpu);
        assert_eq!(entry.description(), cuda_device.info().description);
        assert_eq!(entry.device_id(), cuda_device.info().pci_bus_id.as_deref());
    }
    assert_eq!(registry.devices()[0].name(), "CUDA0");
    assert!(Arc::ptr_eq(&devices[0], &device));
    assert_eq!(registry.cpu().index(), registry.len() - 1);
    let memory = registry.devices()[0].memory();
    assert!(memory.total > 0 && memory.free <= memory.total);

    // An allocation through the registry lands in device memory.
    let data = random_bytes(3 * MIB + 1, 8);
    let file = temp_file_with(&data);
    let mut allocation = registry.devices()[0]
        .allocate(data.len() as u64)
        .expect("allocate on CUDA0");
    assert!(allocation.host_slice().is_none());
    allocation
        .fill_from_file(file.as_file(), 0, 0, data.len())
        .expect("fill_from_file");
    let mut back = vec![0u8; data.len()];
    allocation.read(0, &mut back).expect("read");
    assert_same(&back, &data, "registry allocation");
}
