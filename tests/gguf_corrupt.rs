//! The corrupt-file matrix: every broken file is rejected with its specific error, both by
//! `Gguf::parse` and by `Gguf::parse_header` on the whole file, and never by a panic.

use llama::gguf::fixtures::corrupt::{base_file, Corruption, LONG_NAME};
use llama::gguf::{Gguf, GgufError};

fn parse_err(kind: Corruption) -> GgufError {
    let bytes = kind.bytes();
    let whole = Gguf::parse(&bytes).expect_err(&format!("{kind:?} must be rejected"));
    let header = Gguf::parse_header(&bytes, bytes.len() as u64)
        .expect_err(&format!("{kind:?} must be rejected by parse_header"));
    assert_eq!(
        format!("{whole:?}"),
        format!("{header:?}"),
        "{kind:?}: parse and parse_header disagree"
    );
    // Every message names a byte offset.
    assert!(whole.to_string().contains("byte"), "{kind:?}: {whole}");
    whole
}

#[test]
fn base_file_is_valid() {
    let bytes = base_file();
    let gguf = Gguf::parse(&bytes).unwrap();
    assert_eq!(gguf.tensors().len(), 3);
    assert_eq!(gguf.alignment(), 32);
    // TruncatedBeforeData relies on the tensor infos ending off the alignment.
    assert_ne!(gguf.metadata_end() % 32, 0);
    assert_eq!(gguf.data_offset() + gguf.data_size(), bytes.len() as u64);
}

#[test]
fn every_corruption_is_rejected_with_its_error() {
    use Corruption as C;
    use GgufError as E;
    for &kind in Corruption::ALL {
        let err = parse_err(kind);
        let matches = match kind {
            C::TruncatedHeader => matches!(err, E::UnexpectedEof { .. }),
            C::TruncatedBeforeData => matches!(err, E::DataOffsetBeyondEof { .. }),
            C::DataBeyondEof => matches!(err, E::DataBeyondEof { ref name, .. } if name == "t1"),
            C::BadMagic => matches!(err, E::BadMagic { found, .. } if &found == b"GGUX"),
            C::VersionZero => matches!(err, E::VersionZero { offset: 4 }),
            C::VersionOne => matches!(err, E::UnsupportedVersion { version: 1, .. }),
            C::VersionTooNew => matches!(err, E::UnsupportedVersion { version: 4, .. }),
            C::ByteSwappedVersion => {
                matches!(
                    err,
                    E::EndiannessMismatch {
                        version: 0x0300_0000,
                        ..
                    }
                )
            }
            C::HugeTensorCount => matches!(
                err,
                E::BadTensorCount {
                    count: i64::MAX,
                    ..
                }
            ),
            C::NegativeTensorCount => matches!(err, E::BadTensorCount { count: -1, .. }),
            C::HugeKvCount => matches!(err, E::BadKvCount { offset: 16, .. }),
            C::HugeStringLength => matches!(
                err,
                E::StringTooLong {
                    limit: 1_073_741_824,
                    offset: 24,
                    ..
                }
            ),
            C::StringPastEof => {
                matches!(err, E::StringTooLong { len: 1_048_576, limit, .. } if limit < 1000)
            }
            C::HugeArrayLength => matches!(
                err,
                E::ArrayTooLong { ref key, limit: 1_073_741_824, .. } if key == "test.i32s"
            ),
            C::ArrayPastEof => matches!(
                err,
                E::ArrayTooLong { ref key, len: 1_048_576, .. } if key == "test.i32s"
            ),
            C::NestedArray => matches!(err, E::NestedArray { ref key, .. } if key == "test.i32s"),
            C::UnknownValueType => matches!(
                err,
                E::UnknownValueType { ref key, type_id: 13, .. } if key == "test.u32"
            ),
            C::UnknownArrayElementType => matches!(
                err,
                E::UnknownValueType { ref key, type_id: 77, .. } if key == "test.i32s"
            ),
            C::EmptyKey => matches!(err, E::EmptyKey { index: 1, .. }),
            C::DuplicateKey => matches!(err, E::DuplicateKey { ref key, .. } if key == "test.aaa"),
            C::AlignmentZero => matches!(err, E::BadAlignment { alignment: 0, .. }),
            C::AlignmentNotPowerOfTwo => matches!(err, E::BadAlignment { alignment: 13, .. }),
            C::AlignmentWrongType => matches!(err, E::AlignmentWrongType { found: "i32", .. }),
            C::TensorNameTooLong => matches!(
                err,
                E::TensorNameTooLong {
                    len: 64,
                    index: 1,
                    ..
                }
            ),
            C::DuplicateTensorName => {
                matches!(err, E::DuplicateTensorName { ref name, .. } if name == "t0")
            }
            C::TooManyDims => matches!(err, E::TooManyDims { n_dims: 5, .. }),
            C::NegativeDim => matches!(err, E::NegativeDim { dim: 1, ne: -2, .. }),
            C::OverflowingDims => matches!(err, E::ElementCountOverflow { .. }),
            C::OverflowingByteSize => matches!(err, E::TensorSizeOverflow { .. }),
            C::UnknownTensorType => matches!(err, E::UnknownTensorType { type_id: 43, .. }),
            C::RemovedTensorType => matches!(err, E::RemovedTensorType { type_id: 4, .. }),
            C::RowNotBlockMultiple => matches!(
                err,
                E::RowNotBlockMultiple { ne0: 8, block_size: 32, ref name, .. } if name == "t0"
            ),
            C::MisalignedOffset => matches!(
                err,
                E::OffsetMismatch { found: 65, expected: 96, ref name, .. } if name == "t1"
            ),
            C::NonContiguousOffset => {
                matches!(
                    err,
                    E::OffsetMismatch {
                        found: 128,
                        expected: 96,
                        ..
                    }
                )
            }
            C::SwappedOffsets => matches!(
                err,
                E::OffsetMismatch { found: 96, expected: 0, ref name, .. } if name == "t0"
            ),
        };
        assert!(matches, "{kind:?} gave the wrong error: {err:?}");
    }
}

#[test]
fn error_messages_read_well() {
    let err = parse_err(Corruption::MisalignedOffset);
    let text = err.to_string();
    assert!(text.contains("tensor 't1'"), "{text}");
    assert!(text.contains("has offset 65, expected 96"), "{text}");
    let err = parse_err(Corruption::TensorNameTooLong);
    assert!(err.to_string().contains("64-byte name"), "{err}");
}

#[test]
fn long_name_of_63_bytes_is_accepted() {
    assert_eq!(LONG_NAME.len(), 63);
    let bytes = base_file();
    assert!(Gguf::parse(&bytes).unwrap().tensor(LONG_NAME).is_some());
}

#[test]
fn every_prefix_of_a_valid_file_fails_cleanly() {
    let bytes = base_file();
    let gguf = Gguf::parse(&bytes).unwrap();
    for len in 0..bytes.len() {
        let prefix = &bytes[..len];
        // As a whole file: always an error, never a panic.
        assert!(Gguf::parse(prefix).is_err(), "prefix {len} accepted");
        // As a prefix of the full file: NeedMoreBytes until the header is complete.
        match Gguf::parse_header(prefix, bytes.len() as u64) {
            Ok(g) => assert!(len as u64 >= g.metadata_end()),
            Err(GgufError::NeedMoreBytes {
                needed_at_least, ..
            }) => {
                assert!(needed_at_least > len as u64);
                assert!(needed_at_least <= gguf.metadata_end());
            }
            Err(other) => panic!("prefix {len}: unexpected {other}"),
        }
    }
}

#[test]
fn ne_zero_is_allowed_and_zero_size_tensors_take_no_space() {
    use llama::gguf::{GgmlType, GgufWriter};
    let mut writer = GgufWriter::new();
    writer
        .add_tensor("empty", &[0, 4], GgmlType::Q8_0, Vec::new())
        .unwrap()
        .add_tensor("next", &[32], GgmlType::F32, vec![0; 128])
        .unwrap();
    let bytes = writer.to_bytes().unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    assert_eq!(gguf.tensor("empty").unwrap().nbytes, 0);
    assert_eq!(gguf.tensor("next").unwrap().offset, 0);
}

/// A file with one F32 tensor "z" whose three dims are then patched to `ne`.
fn file_with_dims(ne: [i64; 3]) -> Vec<u8> {
    use llama::gguf::{GgmlType, GgufWriter};
    let mut writer = GgufWriter::new();
    writer
        .add_tensor("z", &[1, 1, 0], GgmlType::F32, Vec::new())
        .unwrap();
    let mut bytes = writer.to_bytes().unwrap();
    let info = Gguf::parse(&bytes).unwrap().tensors()[0].info_offset as usize;
    let ne_at = info + 8 + 1 + 4;
    for (i, n) in ne.iter().enumerate() {
        bytes[ne_at + 8 * i..ne_at + 8 * i + 8].copy_from_slice(&n.to_le_bytes());
    }
    bytes
}

#[test]
fn element_count_overflow_follows_upstream_order() {
    // Upstream checks the running count only against dimensions above 1, so an overflow
    // before a zero dimension is still an error...
    let bytes = file_with_dims([1 << 40, 1 << 40, 0]);
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(GgufError::ElementCountOverflow { .. })
    ));
    // ...while a leading zero keeps the count at zero and the file is valid.
    let bytes = file_with_dims([0, 1 << 40, 1 << 40]);
    let gguf = Gguf::parse(&bytes).unwrap();
    assert_eq!(gguf.tensors()[0].nbytes, 0);
    assert_eq!(gguf.tensors()[0].n_elements(), 0);
}
