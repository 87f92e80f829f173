//! Writer -> reader round trips: every value type, every tensor type, alignments, versions,
//! splits, and property tests over random metadata and tensors.

use llama::gguf::quant;
use llama::gguf::reader::{GGUF_DEFAULT_ALIGNMENT, GGUF_KEY_GENERAL_ALIGNMENT};
use llama::gguf::writer::{KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
use llama::gguf::{
    split_path, GgmlType, Gguf, GgufValueType, GgufWriteError, GgufWriter, MetaArray, MetaValue,
    SplitMode, Value,
};
use proptest::prelude::*;

/// Every scalar type and an array of every element type, including strings.
fn all_values() -> Vec<(&'static str, MetaValue)> {
    vec![
        ("v.u8", MetaValue::U8(250)),
        ("v.i8", MetaValue::I8(-120)),
        ("v.u16", MetaValue::U16(65000)),
        ("v.i16", MetaValue::I16(-32000)),
        ("v.u32", MetaValue::U32(4_000_000_000)),
        ("v.i32", MetaValue::I32(-2_000_000_000)),
        ("v.f32", MetaValue::F32(-1.25e-3)),
        ("v.bool", MetaValue::Bool(true)),
        (
            "v.str",
            MetaValue::Str("héllo \u{2581}wörld".as_bytes().to_vec()),
        ),
        ("v.u64", MetaValue::U64(u64::MAX)),
        ("v.i64", MetaValue::I64(i64::MIN)),
        ("v.f64", MetaValue::F64(std::f64::consts::PI)),
        ("a.u8", MetaArray::U8(vec![0, 1, 255]).into()),
        ("a.i8", MetaArray::I8(vec![-128, 0, 127]).into()),
        ("a.u16", MetaArray::U16(vec![1, 65535]).into()),
        ("a.i16", MetaArray::I16(vec![-32768, 32767]).into()),
        ("a.u32", MetaArray::U32(vec![7, u32::MAX]).into()),
        ("a.i32", MetaArray::I32(vec![i32::MIN, -1, 0]).into()),
        (
            "a.f32",
            MetaArray::F32(vec![0.0, -0.0, 1e30, f32::MIN_POSITIVE]).into(),
        ),
        ("a.bool", MetaArray::Bool(vec![true, false, true]).into()),
        (
            "a.str",
            MetaArray::Str(vec![b"".to_vec(), b"a".to_vec(), vec![0xff, 0xfe]]).into(),
        ),
        ("a.u64", MetaArray::U64(vec![u64::MAX, 0]).into()),
        ("a.i64", MetaArray::I64(vec![i64::MAX, i64::MIN]).into()),
        ("a.f64", MetaArray::F64(vec![f64::EPSILON, -2.5]).into()),
        ("a.empty", MetaArray::U32(Vec::new()).into()),
    ]
}

fn assert_value_eq(key: &str, read: &Value<'_>, written: &MetaValue) {
    assert_eq!(&MetaValue::from_value(read), written, "key {key}");
    assert_eq!(read.value_type(), written.value_type(), "key {key}");
}

#[test]
fn every_value_type_round_trips() {
    for version in [2, 3] {
        let mut writer = GgufWriter::new();
        writer.set_version(version);
        for (key, value) in all_values() {
            writer.set(key, value);
        }
        let bytes = writer.to_bytes().unwrap();
        let gguf = Gguf::parse(&bytes).unwrap();
        assert_eq!(gguf.version(), version);
        assert_eq!(gguf.kvs().len(), all_values().len());
        for ((key, value), kv) in all_values().iter().zip(gguf.kvs()) {
            assert_eq!(kv.key, key.as_bytes(), "file order");
            assert_value_eq(key, &kv.value, value);
            assert_value_eq(key, gguf.get(key).unwrap(), value);
        }
        // No tensors: no padding before the (empty) data section.
        assert_eq!(gguf.data_offset(), gguf.metadata_end());
        assert_eq!(gguf.data_size(), 0);
    }
}

#[test]
fn typed_accessors() {
    let mut writer = GgufWriter::new();
    writer
        .set("s", "text")
        .set("raw", MetaValue::Str(vec![0x66, 0xff]))
        .set("i", vec![1u16, 2, 3])
        .set("f", vec![0.5f32, 1.5])
        .set("b", vec![true, false])
        .set("strs", vec!["ab", "", "c"])
        .set("u", 7u32)
        .set("big", u64::MAX);
    let bytes = writer.to_bytes().unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    assert_eq!(gguf.get("s").unwrap().as_str(), Some("text"));
    assert_eq!(gguf.get("raw").unwrap().as_str(), None);
    assert_eq!(
        gguf.get("raw").unwrap().to_str_lossy().unwrap(),
        "f\u{fffd}"
    );
    assert_eq!(gguf.get("raw").unwrap().as_bytes(), Some(&[0x66, 0xff][..]));
    let ints = gguf.get("i").unwrap().as_array().unwrap();
    assert_eq!(ints.iter::<u16>().unwrap().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(ints.iter_i64().unwrap().collect::<Vec<_>>(), [1, 2, 3]);
    assert!(ints.iter_f64().is_none());
    assert_eq!(ints.elem_type(), GgufValueType::U16);
    let floats = gguf.get("f").unwrap().as_array().unwrap();
    assert_eq!(floats.iter_f64().unwrap().collect::<Vec<_>>(), [0.5, 1.5]);
    let bools = gguf.get("b").unwrap().as_array().unwrap();
    assert_eq!(
        bools.iter::<bool>().unwrap().collect::<Vec<_>>(),
        [true, false]
    );
    let strs = gguf.get("strs").unwrap().as_array().unwrap();
    assert_eq!(strs.len(), 3);
    assert_eq!(strs.get_str(0), Some(&b"ab"[..]));
    assert_eq!(strs.get_str(1), Some(&b""[..]));
    assert_eq!(strs.get_str(3), None);
    assert_eq!(
        strs.iter_str().unwrap().collect::<Vec<_>>(),
        [&b"ab"[..], b"", b"c"]
    );
    assert_eq!(strs.to_upstream_string(), r#"["ab", "", "c"]"#);
    let u = gguf.get("u").unwrap();
    assert_eq!(u.to_u64(), Some(7));
    assert_eq!(u.gguf_type_id(), 4);
    assert_eq!(u.type_name(), "u32");
    assert_eq!(u.to_upstream_string(), "7");
    assert_eq!(gguf.get("big").unwrap().to_i64(), None);
    assert_eq!(gguf.get("strs").unwrap().type_name(), "arr");
    assert!(gguf.get("missing").is_none());
}

/// Deterministic bytes of a whole number of blocks of `ty`, shape [ne0, 3].
fn tensor_bytes(ty: GgmlType, seed: u8) -> (Vec<i64>, Vec<u8>) {
    let ne0 = ty.block_size() as i64 * 2;
    let len = ty.nbytes([ne0, 3, 1, 1]).unwrap() as usize;
    let data = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    (vec![ne0, 3], data)
}

#[test]
fn every_tensor_type_round_trips() {
    for alignment in [1u32, 8, 32, 64, 4096] {
        let mut writer = GgufWriter::new();
        writer.set("general.architecture", "test");
        if alignment != GGUF_DEFAULT_ALIGNMENT {
            writer.set_alignment(alignment).unwrap();
        }
        let types: Vec<GgmlType> = GgmlType::all().collect();
        for (i, &ty) in types.iter().enumerate() {
            let (dims, data) = tensor_bytes(ty, i as u8);
            writer
                .add_tensor(&format!("t.{}", ty.name()), &dims, ty, data)
                .unwrap();
        }
        let bytes = writer.to_bytes().unwrap();
        let gguf = Gguf::parse(&bytes).unwrap();
        let layout = writer.layout().unwrap();
        assert_eq!(gguf.alignment(), alignment);
        assert_eq!(gguf.data_offset(), layout.data_offset);
        assert_eq!(gguf.data_offset() % u64::from(alignment), 0);
        assert_eq!(bytes.len() as u64, layout.file_size);
        assert_eq!(gguf.data_offset() + gguf.data_size(), layout.file_size);
        for (i, &ty) in types.iter().enumerate() {
            let t = gguf.tensor(&format!("t.{}", ty.name())).unwrap();
            let (dims, data) = tensor_bytes(ty, i as u8);
            assert_eq!(t.ggml_type, ty);
            assert_eq!(t.shape(), &dims[..]);
            assert_eq!(t.ne, [dims[0], 3, 1, 1]);
            assert_eq!(t.offset, layout.tensor_offsets[i]);
            assert_eq!(t.offset % u64::from(alignment), 0);
            assert_eq!(t.nb[0], ty.type_size());
            assert_eq!(t.nb[1], ty.row_size(dims[0]).unwrap());
            assert_eq!(t.nb[2], t.nb[1] * 3);
            assert_eq!(gguf.tensor_data(t), Some(&data[..]));
            assert_eq!(t.abs_offset(&gguf), gguf.data_offset() + t.offset);
            assert_eq!(gguf.find_tensor(t.name), Some(i));
        }
    }
}

#[test]
fn reference_quantizers_round_trip_through_files() {
    let values: Vec<f32> = (0..128)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0)
        .collect();
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
    ] {
        let mut writer = GgufWriter::new();
        writer.add_tensor_f32("w", &[64, 2], ty, &values).unwrap();
        let bytes = writer.to_bytes().unwrap();
        let gguf = Gguf::parse(&bytes).unwrap();
        let t = gguf.tensor("w").unwrap();
        let back = quant::dequantize(ty, gguf.tensor_data(t).unwrap()).unwrap();
        let tolerance = match ty {
            GgmlType::F32 => 0.0,
            GgmlType::F16 => 2e-3,
            GgmlType::BF16 => 2e-2,
            GgmlType::Q8_0 => 0.03,
            _ => 0.5,
        };
        for (a, b) in values.iter().zip(&back) {
            assert!((a - b).abs() <= tolerance, "{ty}: {a} vs {b}");
        }
    }
}

#[test]
fn writer_rejects_what_the_reader_would() {
    let mut writer = GgufWriter::new();
    let err = writer.add_tensor("x", &[31], GgmlType::Q8_0, vec![0; 34]);
    assert!(matches!(err, Err(GgufWriteError::BadShape { .. })));
    let err = writer.add_tensor("x", &[32], GgmlType::Q8_0, vec![0; 33]);
    assert!(matches!(
        err,
        Err(GgufWriteError::DataLength {
            expected: 34,
            actual: 33,
            ..
        })
    ));
    let err = writer.add_tensor(&"n".repeat(64), &[1], GgmlType::F32, vec![0; 4]);
    assert!(matches!(err, Err(GgufWriteError::BadTensorName(_))));
    writer
        .add_tensor(&"n".repeat(63), &[1], GgmlType::F32, vec![0; 4])
        .unwrap();
    let err = writer.add_tensor(&"n".repeat(63), &[1], GgmlType::F32, vec![0; 4]);
    assert!(matches!(err, Err(GgufWriteError::DuplicateTensor(_))));
    let err = writer.add_tensor("y", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4]);
    assert!(matches!(
        err,
        Err(GgufWriteError::TooManyDims { n_dims: 5, .. })
    ));
    let err = writer.add_tensor("y", &[-1], GgmlType::F32, Vec::new());
    assert!(matches!(err, Err(GgufWriteError::BadShape { .. })));
    assert!(matches!(
        writer.set_alignment(12),
        Err(GgufWriteError::BadAlignment(12))
    ));
    writer.set(GGUF_KEY_GENERAL_ALIGNMENT, 32i32);
    assert!(matches!(
        writer.to_bytes(),
        Err(GgufWriteError::AlignmentWrongType("i32"))
    ));
    writer.set(GGUF_KEY_GENERAL_ALIGNMENT, 32u32).set("", 1u8);
    assert!(matches!(writer.to_bytes(), Err(GgufWriteError::EmptyKey)));
    let mut deferred = GgufWriter::new();
    deferred
        .add_tensor_deferred("d", &[4], GgmlType::F32)
        .unwrap();
    assert!(matches!(deferred.to_bytes(), Err(GgufWriteError::DeferredData(name)) if name == "d"));
}

#[test]
fn set_replaces_like_upstream() {
    let mut writer = GgufWriter::new();
    writer.set("a", 1u8).set("b", 2u8).set("a", 3u32);
    let keys: Vec<_> = writer.kvs().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "a"]);
    assert_eq!(writer.get("a"), Some(&MetaValue::U32(3)));
}

#[test]
fn deferred_tensors_stream_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deferred.gguf");
    let mut writer = GgufWriter::new();
    writer
        .add_tensor_deferred("a", &[3], GgmlType::F32)
        .unwrap()
        .add_tensor("b", &[2], GgmlType::F16, vec![1, 2, 3, 4])
        .unwrap();
    writer
        .write_to_with(&path, |index, tensor, out| {
            assert_eq!((index, tensor.name.as_str()), (0, "a"));
            out.write_all(&[9; 12])
        })
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    assert_eq!(
        gguf.tensor_data(gguf.tensor("a").unwrap()),
        Some(&[9u8; 12][..])
    );
    assert_eq!(
        gguf.tensor_data(gguf.tensor("b").unwrap()),
        Some(&[1u8, 2, 3, 4][..])
    );
    // A callback writing the wrong amount is caught.
    let err = writer.write_to_with(&path, |_, _, out| out.write_all(&[0; 5]));
    assert!(matches!(
        err,
        Err(GgufWriteError::DataLength {
            expected: 12,
            actual: 5,
            ..
        })
    ));
}

#[test]
fn split_path_matches_llama_split_path() {
    assert_eq!(split_path("/m/model", 0, 3), "/m/model-00001-of-00003.gguf");
    assert_eq!(split_path("x", 99_998, 99_999), "x-99999-of-99999.gguf");
}

#[test]
fn split_sets_follow_gguf_split() {
    let mut writer = GgufWriter::new();
    writer
        .set("general.architecture", "llama")
        .set("general.name", "split me");
    for i in 0..5 {
        writer
            .add_tensor(
                &format!("t{i}"),
                &[8 * (i + 1)],
                GgmlType::F32,
                vec![i as u8; 32 * (i as usize + 1)],
            )
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("model");
    let paths = writer
        .write_split(prefix.to_str().unwrap(), SplitMode::MaxTensors(2))
        .unwrap();
    assert_eq!(paths.len(), 3);
    let mut seen = Vec::new();
    for (no, path) in paths.iter().enumerate() {
        assert_eq!(
            path.to_str().unwrap(),
            split_path(prefix.to_str().unwrap(), no as u32, 3)
        );
        let bytes = std::fs::read(path).unwrap();
        let gguf = Gguf::parse(&bytes).unwrap();
        let keys: Vec<_> = gguf.kvs().iter().map(|kv| kv.key_str().unwrap()).collect();
        let split_keys = [KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, KEY_SPLIT_COUNT];
        if no == 0 {
            assert_eq!(
                keys,
                [
                    "general.architecture",
                    "general.name",
                    split_keys[0],
                    split_keys[1],
                    split_keys[2]
                ]
            );
        } else {
            assert_eq!(keys, split_keys);
        }
        assert_eq!(gguf.get(KEY_SPLIT_NO), Some(&Value::U16(no as u16)));
        assert_eq!(gguf.get(KEY_SPLIT_COUNT), Some(&Value::U16(3)));
        assert_eq!(gguf.get(KEY_SPLIT_TENSORS_COUNT), Some(&Value::I32(5)));
        for t in gguf.tensors() {
            seen.push(t.name.to_owned());
            let i: u8 = t.name[1..].parse().unwrap();
            assert!(gguf.tensor_data(t).unwrap().iter().all(|&b| b == i));
        }
    }
    assert_eq!(seen, ["t0", "t1", "t2", "t3", "t4"]);

    // By size: 32+64 bytes fit in 100, the third tensor starts a new shard.
    let shards = writer.split(SplitMode::MaxBytes(100)).unwrap();
    let counts: Vec<_> = shards.iter().map(|s| s.tensors().len()).collect();
    assert_eq!(counts, [2, 1, 1, 1]);
    // A first tensor larger than the limit leaves the first shard empty: gguf-split refuses.
    assert!(matches!(
        writer.split(SplitMode::MaxBytes(16)),
        Err(GgufWriteError::EmptyShard(0))
    ));
}

fn meta_value_strategy() -> impl Strategy<Value = MetaValue> {
    let bytes = proptest::collection::vec(any::<u8>(), 0..40);
    let scalar = prop_oneof![
        any::<u8>().prop_map(MetaValue::U8),
        any::<i8>().prop_map(MetaValue::I8),
        any::<u16>().prop_map(MetaValue::U16),
        any::<i16>().prop_map(MetaValue::I16),
        any::<u32>().prop_map(MetaValue::U32),
        any::<i32>().prop_map(MetaValue::I32),
        any::<u32>().prop_map(|b| MetaValue::F32(f32::from_bits(b))),
        any::<bool>().prop_map(MetaValue::Bool),
        bytes.clone().prop_map(MetaValue::Str),
        any::<u64>().prop_map(MetaValue::U64),
        any::<i64>().prop_map(MetaValue::I64),
        any::<u64>().prop_map(|b| MetaValue::F64(f64::from_bits(b))),
    ];
    let n = 0..20usize;
    let array = prop_oneof![
        proptest::collection::vec(any::<u8>(), n.clone()).prop_map(MetaArray::U8),
        proptest::collection::vec(any::<i16>(), n.clone()).prop_map(MetaArray::I16),
        proptest::collection::vec(any::<u32>(), n.clone()).prop_map(MetaArray::U32),
        proptest::collection::vec(any::<i32>(), n.clone()).prop_map(MetaArray::I32),
        proptest::collection::vec(any::<bool>(), n.clone()).prop_map(MetaArray::Bool),
        proptest::collection::vec(any::<i64>(), n.clone()).prop_map(MetaArray::I64),
        proptest::collection::vec(any::<u32>(), n.clone())
            .prop_map(|v| MetaArray::F32(v.into_iter().map(f32::from_bits).collect())),
        proptest::collection::vec(bytes, n).prop_map(MetaArray::Str),
    ];
    prop_oneof![scalar, array.prop_map(MetaValue::Array)]
}

/// Compares by encoded bits, so NaNs compare equal to themselves.
fn same_bits(a: &MetaValue, b: &MetaValue) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn tensor_strategy() -> impl Strategy<Value = (GgmlType, Vec<i64>)> {
    let ty = prop::sample::select(GgmlType::all().collect::<Vec<_>>());
    (ty, proptest::collection::vec(0i64..4, 0..=4), 0i64..3).prop_map(|(ty, mut dims, blocks)| {
        // A scalar (no dims) is one element, which only block size 1 allows.
        if dims.is_empty() && ty.block_size() > 1 {
            dims.push(0);
        }
        if let Some(first) = dims.first_mut() {
            *first = blocks * ty.block_size() as i64;
        }
        (ty, dims)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_files_round_trip(
        version in 2u32..=3,
        alignment in prop::sample::select(vec![None, Some(1u32), Some(16), Some(32), Some(256)]),
        values in proptest::collection::vec(meta_value_strategy(), 0..12),
        tensors in proptest::collection::vec(tensor_strategy(), 0..8),
        seed in any::<u8>(),
    ) {
        let mut writer = GgufWriter::new();
        writer.set_version(version);
        for (i, value) in values.iter().enumerate() {
            writer.set(&format!("key.{i}"), value.clone());
        }
        if let Some(alignment) = alignment {
            writer.set_alignment(alignment).unwrap();
        }
        let mut datas = Vec::new();
        for (i, (ty, dims)) in tensors.iter().enumerate() {
            let mut ne = [1i64; 4];
            ne[..dims.len()].copy_from_slice(dims);
            let len = ty.nbytes(ne).unwrap() as usize;
            let data: Vec<u8> = (0..len).map(|b| (b as u8) ^ seed ^ (i as u8)).collect();
            writer.add_tensor(&format!("tensor.{i}"), dims, *ty, data.clone()).unwrap();
            datas.push(data);
        }
        let bytes = writer.to_bytes().unwrap();
        let gguf = Gguf::parse(&bytes).unwrap();
        prop_assert_eq!(gguf.version(), version);
        prop_assert_eq!(gguf.alignment(), alignment.unwrap_or(32));
        for (i, value) in values.iter().enumerate() {
            let read = MetaValue::from_value(gguf.get(&format!("key.{i}")).unwrap());
            prop_assert!(same_bits(&read, value), "key.{}: {:?} vs {:?}", i, read, value);
        }
        let layout = writer.layout().unwrap();
        prop_assert_eq!(gguf.tensors().len(), tensors.len());
        for (i, ((ty, dims), data)) in tensors.iter().zip(&datas).enumerate() {
            let t = gguf.tensor(&format!("tensor.{i}")).unwrap();
            prop_assert_eq!(t.ggml_type, *ty);
            prop_assert_eq!(t.shape(), &dims[..]);
            prop_assert_eq!(t.offset, layout.tensor_offsets[i]);
            prop_assert_eq!(gguf.tensor_data(t), Some(&data[..]));
        }
        // The header alone (with the real file size) parses to the same thing.
        let header = Gguf::parse_header(&bytes[..gguf.metadata_end() as usize], bytes.len() as u64).unwrap();
        // (Compared as text: NaN values are not equal to themselves.)
        prop_assert_eq!(format!("{:?}", header.kvs()), format!("{:?}", gguf.kvs()));
        prop_assert_eq!(header.tensors(), gguf.tensors());
        // And the copy made from the parsed file is byte-identical.
        prop_assert_eq!(GgufWriter::from_gguf(&gguf).to_bytes().unwrap(), bytes);
    }
}

#[test]
fn huge_alignment_without_tensors_is_valid_and_cheap() {
    let mut writer = GgufWriter::new();
    writer.set_alignment(32).unwrap();
    let mut bytes = writer.to_bytes().unwrap();
    let kv_offset = Gguf::parse(&bytes).unwrap().kvs()[0].offset as usize;
    let value_at = kv_offset + 8 + GGUF_KEY_GENERAL_ALIGNMENT.len() + 4;
    bytes[value_at..value_at + 4].copy_from_slice(&(1u32 << 31).to_le_bytes());
    let gguf = Gguf::parse(&bytes).unwrap();
    assert_eq!(gguf.alignment(), 1 << 31);
    // No tensors, so no padding is needed (upstream only seeks to the data when it has some).
    assert_eq!(gguf.data_offset(), gguf.metadata_end());
    // The fuzz harness must not try to materialise the writer's 2 GiB of padding.
    llama::gguf::fixtures::harness::check_reader(&bytes);
}
