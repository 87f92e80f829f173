//! `read_header`: bounded reads of just the header, whatever the size of the data.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};

use llama::gguf::file::{read_header_from, INITIAL_HEADER_READ};
use llama::gguf::{read_header, GgmlType, GgufError, GgufWriter, ReadAt};

/// Counts the bytes read through it.
struct CountingFile<'f> {
    file: &'f File,
    bytes_read: Cell<u64>,
    furthest: Cell<u64>,
}

impl<'f> CountingFile<'f> {
    fn new(file: &'f File) -> Self {
        CountingFile {
            file,
            bytes_read: Cell::new(0),
            furthest: Cell::new(0),
        }
    }
}

impl ReadAt for CountingFile<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.file.read_at(buf, offset)?;
        self.bytes_read.set(self.bytes_read.get() + n as u64);
        self.furthest
            .set(self.furthest.get().max(offset + n as u64));
        Ok(n)
    }
}

/// A file whose header is written and whose huge data section is a hole.
fn sparse_model(data_elements: i64, extra_kvs: usize) -> (tempfile::NamedTempFile, GgufWriter) {
    let mut writer = GgufWriter::new();
    writer.set("general.architecture", "llama");
    for i in 0..extra_kvs {
        writer.set(&format!("pad.{i}"), vec!["some vocabulary-like string"; 8]);
    }
    writer
        .add_tensor_deferred("huge", &[data_elements, 2], GgmlType::F32)
        .unwrap()
        .add_tensor_deferred("tail", &[32], GgmlType::Q8_0)
        .unwrap();
    let layout = writer.layout().unwrap();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&writer.header_bytes().unwrap()).unwrap();
    file.as_file().set_len(layout.file_size).unwrap();
    (file, writer)
}

#[test]
fn header_of_a_sparse_8_gib_file_reads_only_the_header() {
    let (file, writer) = sparse_model(1 << 30, 0);
    let layout = writer.layout().unwrap();
    assert!(layout.file_size > 8 << 30);

    let header = read_header(file.as_file()).unwrap();
    assert_eq!(header.file_size(), layout.file_size);
    assert_eq!(header.data_offset(), layout.data_offset);
    assert_eq!(header.n_tensors(), 2);
    let gguf = header.gguf().unwrap();
    assert_eq!(gguf.tensor("huge").unwrap().nbytes, 8 << 30);
    assert_eq!(
        gguf.tensor("tail").unwrap().abs_offset(&gguf),
        layout.data_offset + layout.tensor_offsets[1]
    );
    assert_eq!(header.bytes().len() as u64, gguf.metadata_end());

    let counting = CountingFile::new(file.as_file());
    read_header_from(&counting, layout.file_size, u64::MAX).unwrap();
    // A small header fits in the first read.
    assert!(counting.furthest.get() <= INITIAL_HEADER_READ);
    assert!(counting.bytes_read.get() <= INITIAL_HEADER_READ);
}

#[test]
fn header_larger_than_the_first_read_grows_by_doubling_without_rereading() {
    // About 5 MB of metadata in front of 8 GiB of (sparse) data.
    let (file, _) = sparse_model(1 << 30, 16_000);
    let file_size = file.as_file().metadata().unwrap().len();
    let counting = CountingFile::new(file.as_file());
    let header = read_header_from(&counting, file_size, u64::MAX).unwrap();
    let metadata_end = header.gguf().unwrap().metadata_end();
    assert!(metadata_end > 4 * INITIAL_HEADER_READ, "{metadata_end}");
    // Each byte is read once, and never more than twice what the header needs.
    assert_eq!(counting.bytes_read.get(), counting.furthest.get());
    assert!(counting.furthest.get() <= 2 * metadata_end);
    assert_eq!(header.n_kv(), 16_001);
}

#[test]
fn header_limit_is_enforced() {
    let (file, _) = sparse_model(1 << 20, 16_000);
    let file_size = file.as_file().metadata().unwrap().len();
    let err = read_header_from(file.as_file(), file_size, 2 * INITIAL_HEADER_READ).unwrap_err();
    assert!(
        matches!(err, GgufError::HeaderTooLarge { limit, .. } if limit == 2 * INITIAL_HEADER_READ),
        "{err}"
    );
}

#[test]
fn a_file_shorter_than_its_claimed_size_is_an_io_error() {
    let (file, _) = sparse_model(64, 20_000);
    let real_size = file.as_file().metadata().unwrap().len();
    file.as_file().set_len(real_size / 2).unwrap();
    let err = read_header_from(file.as_file(), real_size, u64::MAX).unwrap_err();
    assert!(matches!(err, GgufError::Io { .. }), "{err}");
}

#[test]
fn corrupt_headers_fail_with_the_reader_errors() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"GGUF\x00\x00\x00\x00rest").unwrap();
    let err = read_header(file.as_file()).unwrap_err();
    assert!(matches!(err, GgufError::VersionZero { .. }), "{err}");

    let empty = tempfile::NamedTempFile::new().unwrap();
    let err = read_header(empty.as_file()).unwrap_err();
    assert!(matches!(err, GgufError::UnexpectedEof { .. }), "{err}");

    // The last tensor's data (34 bytes of Q8_0) cut short; its padding alone may be missing.
    let (file, writer) = sparse_model(64, 0);
    let layout = writer.layout().unwrap();
    let tail_end = layout.data_offset + layout.tensor_offsets[1] + 34;
    file.as_file().set_len(tail_end).unwrap();
    read_header(file.as_file()).unwrap();
    file.as_file().set_len(tail_end - 1).unwrap();
    let err = read_header(file.as_file()).unwrap_err();
    assert!(
        matches!(err, GgufError::DataBeyondEof { ref name, .. } if name == "tail"),
        "{err}"
    );
}

#[test]
fn a_limit_just_above_the_header_is_enough() {
    let (file, _) = sparse_model(1 << 20, 6_000);
    let file_size = file.as_file().metadata().unwrap().len();
    let header = read_header_from(file.as_file(), file_size, u64::MAX).unwrap();
    let needed = header.bytes().len() as u64;
    assert!(needed > INITIAL_HEADER_READ);
    // Doubling would overshoot this limit; the reader stops at the limit instead.
    let counting = CountingFile::new(file.as_file());
    read_header_from(&counting, file_size, needed + 1).unwrap();
    assert!(counting.furthest.get() <= needed + 1);
    let err = read_header_from(file.as_file(), file_size, needed - 1).unwrap_err();
    assert!(matches!(err, GgufError::HeaderTooLarge { .. }), "{err}");
}
