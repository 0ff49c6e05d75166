use gguf::{Error, GgmlType, Gguf, GgufFile, GgufStreamWriter, GgufWriter, Value, ValueType};

fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()))
        .metadata("llama.block_count", Value::U32(2))
        .metadata("u8", Value::U8(7))
        .metadata("i8", Value::I8(-7))
        .metadata("u16", Value::U16(65535))
        .metadata("i16", Value::I16(-300))
        .metadata("i32", Value::I32(-5))
        .metadata("f32", Value::F32(1.5))
        .metadata("bool", Value::Bool(true))
        .metadata("u64", Value::U64(1 << 40))
        .metadata("i64", Value::I64(-(1 << 40)))
        .metadata("f64", Value::F64(0.25))
        .metadata("tokens", Value::strings(&["a", "b", "ü"]))
        .metadata(
            "nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(2)]),
                    Value::Array(ValueType::String, vec![]),
                ],
            ),
        )
        .tensor("a", &[4, 2], GgmlType::F32, vec![1u8; 32])
        .tensor("b", &[32], GgmlType::Q8_0, vec![2u8; 34]);
    w
}

#[test]
fn round_trip_every_value_type() {
    let bytes = sample().to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture().unwrap(), "llama");
    let md = &g.metadata;
    assert_eq!(md.u32("llama.block_count").unwrap(), 2);
    assert_eq!(md.get("u8"), Some(&Value::U8(7)));
    assert_eq!(md.get("i8"), Some(&Value::I8(-7)));
    assert_eq!(md.get("u16"), Some(&Value::U16(65535)));
    assert_eq!(md.get("i16"), Some(&Value::I16(-300)));
    assert_eq!(md.opt_i64("i32").unwrap(), Some(-5));
    assert_eq!(md.f32("f32").unwrap(), 1.5);
    assert_eq!(md.opt_bool("bool").unwrap(), Some(true));
    assert_eq!(md.opt_u64("u64").unwrap(), Some(1 << 40));
    assert_eq!(md.opt_i64("i64").unwrap(), Some(-(1 << 40)));
    assert_eq!(md.f32("f64").unwrap(), 0.25);
    assert_eq!(md.str_array("tokens").unwrap(), vec!["a", "b", "ü"]);
    let nested = md.array("nested").unwrap();
    assert_eq!(nested.len(), 2);
    assert_eq!(
        nested[0],
        Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(2)])
    );
    let names: Vec<&str> = md.iter().map(|(k, _)| k).collect();
    assert_eq!(names[0], "general.architecture");

    let a = g.tensor("a").unwrap();
    assert_eq!(a.dims, vec![4, 2]);
    assert_eq!(a.n_bytes, 32);
    let b = g.tensor("b").unwrap();
    assert_eq!(b.ggml_type, GgmlType::Q8_0);
    assert_eq!(b.offset % 32, 0);
    assert_eq!(g.data_offset % 32, 0);
}

#[test]
fn typed_accessors_name_the_key() {
    let bytes = sample().to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let e = g.metadata.u32("missing.key").unwrap_err();
    assert!(e.to_string().contains("missing.key"), "{e}");
    let e = g.metadata.str("llama.block_count").unwrap_err();
    assert!(matches!(e, Error::WrongType { .. }), "{e}");
    assert!(e.to_string().contains("llama.block_count"), "{e}");
    let e = g.metadata.opt_u32("i64").unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn a_streamed_file_is_the_same_file_written_in_pieces() {
    let metadata = vec![
        (
            "general.architecture".to_string(),
            Value::String("llama".into()),
        ),
        ("tokens".to_string(), Value::strings(&["a", "b"])),
    ];
    let tensors = vec![
        ("a".to_string(), vec![4, 2], GgmlType::F32),
        ("empty".to_string(), vec![0, 3], GgmlType::F16),
        ("b".to_string(), vec![32], GgmlType::Q8_0),
    ];
    let mut w = GgufStreamWriter::new(Vec::new(), &metadata, &tensors).unwrap();
    w.data(&[1u8; 20]).unwrap();
    w.data(&[1u8; 12]).unwrap();
    w.data(&[2u8; 34]).unwrap();
    let streamed = w.finish().unwrap();
    let mut whole = GgufWriter::new();
    for (k, v) in &metadata {
        whole.metadata(k, v.clone());
    }
    whole
        .tensor("a", &[4, 2], GgmlType::F32, vec![1u8; 32])
        .tensor("empty", &[0, 3], GgmlType::F16, vec![])
        .tensor("b", &[32], GgmlType::Q8_0, vec![2u8; 34]);
    let whole = whole.to_bytes();
    assert_eq!(streamed[..whole.len()], whole[..]);
    assert!(streamed[whole.len()..].iter().all(|&b| b == 0));
    assert_eq!(streamed.len() % 32, 0, "the last tensor is padded too");
    let g = Gguf::parse(&streamed).unwrap();
    assert_eq!(g.tensors.len(), 3);

    let mut w = GgufStreamWriter::new(Vec::new(), &metadata, &tensors).unwrap();
    let e = w.data(&[0u8; 33]).unwrap_err();
    assert!(e.to_string().contains("tensor 'a' is 32 bytes"), "{e}");
    w.data(&[0u8; 32]).unwrap();
    let e = w.finish().unwrap_err();
    assert!(
        e.to_string().contains("tensor 'b' has 0 of its 34 bytes"),
        "{e}"
    );
    let odd = vec![("q".to_string(), vec![40, 2], GgmlType::Q8_0)];
    let e = GgufStreamWriter::new(Vec::new(), &metadata, &odd)
        .err()
        .unwrap();
    assert!(e.to_string().contains("tensor 'q'"), "{e}");
}

#[test]
fn file_maps_tensor_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    sample().write(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let (_, a) = f.tensor("a").unwrap();
    assert_eq!(a, &[1u8; 32][..]);
    let (_, b) = f.tensor("b").unwrap();
    assert_eq!(b, &[2u8; 34][..]);
    assert!(matches!(f.tensor("zzz"), Err(Error::MissingTensor(_))));
    let e = GgufFile::open(dir.path().join("absent.gguf"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("absent.gguf"));
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample().to_bytes();
    for len in 0..bytes.len() {
        assert!(
            Gguf::parse(&bytes[..len]).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
}

#[test]
fn bad_magic_and_version() {
    let mut bytes = sample().to_bytes();
    bytes[0] = b'X';
    assert!(matches!(Gguf::parse(&bytes), Err(Error::BadMagic { .. })));
    let mut bytes = sample().to_bytes();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(Error::UnsupportedVersion(1))
    ));
    bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(Gguf::parse(&bytes), Err(Error::BigEndian)));
}

/// Offset of the first byte after the 24-byte fixed header.
const KV_START: usize = 24;

#[test]
fn absurd_counts_are_rejected_before_allocation() {
    let mut bytes = sample().to_bytes();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(Error::CountTooLarge { .. })
    ));
    let mut bytes = sample().to_bytes();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(Error::CountTooLarge { .. })
    ));
    let mut bytes = sample().to_bytes();
    bytes[KV_START..KV_START + 8].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    assert!(matches!(Gguf::parse(&bytes), Err(Error::Truncated { .. })));
}

#[test]
fn huge_array_length_is_rejected() {
    let mut w = GgufWriter::new();
    w.metadata("arr", Value::Array(ValueType::U32, vec![Value::U32(1)]));
    let mut bytes = w.to_bytes();
    let count_at = KV_START + 8 + 3 + 4 + 4;
    bytes[count_at..count_at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = Gguf::parse(&bytes).unwrap_err();
    assert!(matches!(e, Error::CountTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("arr"), "{e}");
}

#[test]
fn deep_nesting_is_rejected() {
    let mut v = Value::Array(ValueType::U8, vec![]);
    for _ in 0..20 {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    let mut w = GgufWriter::new();
    w.metadata("deep", v);
    assert!(matches!(
        Gguf::parse(&w.to_bytes()),
        Err(Error::NestingTooDeep { .. })
    ));
}

#[test]
fn unknown_type_ids_are_named() {
    let mut w = GgufWriter::new();
    w.tensor("weird", &[32], GgmlType::F32, vec![0; 128]);
    let mut bytes = w.to_bytes();
    let type_at = KV_START + 8 + 5 + 4 + 8;
    bytes[type_at..type_at + 4].copy_from_slice(&99u32.to_le_bytes());
    let e = Gguf::parse(&bytes).unwrap_err();
    assert!(matches!(e, Error::UnknownTensorType { id: 99, .. }), "{e}");
    assert!(e.to_string().contains("weird"), "{e}");

    let mut w = GgufWriter::new();
    w.metadata("k", Value::U8(1));
    let mut bytes = w.to_bytes();
    bytes[KV_START + 9..KV_START + 13].copy_from_slice(&77u32.to_le_bytes());
    assert!(matches!(
        Gguf::parse(&bytes),
        Err(Error::UnknownValueType { id: 77, .. })
    ));
}

#[test]
fn tensor_past_end_and_overlap() {
    let mut w = GgufWriter::new();
    w.tensor("t", &[8], GgmlType::F32, vec![0; 32]);
    let bytes = w.to_bytes();
    let e = Gguf::parse(&bytes[..bytes.len() - 1]).unwrap_err();
    assert!(matches!(e, Error::TensorOutOfBounds { .. }), "{e}");

    let mut w = GgufWriter::new();
    w.tensor("x", &[16], GgmlType::F32, vec![0; 64])
        .tensor("y", &[16], GgmlType::F32, vec![0; 64]);
    let mut bytes = w.to_bytes();
    // Point y's offset (the last 8 bytes of its info) at x's data.
    let y_offset_at = KV_START + (8 + 1 + 4 + 8 + 4 + 8) * 2 - 8;
    bytes[y_offset_at..y_offset_at + 8].copy_from_slice(&32u64.to_le_bytes());
    let e = Gguf::parse(&bytes).unwrap_err();
    assert!(matches!(e, Error::TensorOverlap { .. }), "{e}");
}

#[test]
fn bad_tensor_shapes() {
    let mut w = GgufWriter::new();
    w.tensor("q", &[33], GgmlType::Q8_0, vec![0; 34]);
    let e = Gguf::parse(&w.to_bytes()).unwrap_err();
    assert!(e.to_string().contains("block size"), "{e}");
    let mut w = GgufWriter::new();
    w.tensor("d", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4]);
    assert!(matches!(
        Gguf::parse(&w.to_bytes()),
        Err(Error::BadTensor { .. })
    ));
    let mut w = GgufWriter::new();
    w.tensor("o", &[u64::MAX, 4], GgmlType::F32, vec![]);
    assert!(matches!(
        Gguf::parse(&w.to_bytes()),
        Err(Error::BadTensor { .. })
    ));
}

#[test]
fn duplicates_and_alignment() {
    let mut w = GgufWriter::new();
    w.metadata("k", Value::U8(1)).metadata("k", Value::U8(2));
    assert!(matches!(
        Gguf::parse(&w.to_bytes()),
        Err(Error::DuplicateKey(_))
    ));
    let mut w = GgufWriter::new();
    w.tensor("t", &[1], GgmlType::F32, vec![0; 4])
        .tensor("t", &[1], GgmlType::F32, vec![0; 4]);
    assert!(matches!(
        Gguf::parse(&w.to_bytes()),
        Err(Error::DuplicateTensor(_))
    ));
    let mut w = GgufWriter::new();
    w.metadata("general.alignment", Value::U32(48));
    assert!(matches!(
        Gguf::parse(&w.to_bytes()),
        Err(Error::BadAlignment(48))
    ));
    let mut w = GgufWriter::new();
    w.metadata("general.alignment", Value::U32(64))
        .tensor("t", &[3], GgmlType::F32, vec![0; 12])
        .tensor("u", &[3], GgmlType::F32, vec![0; 12]);
    let g = Gguf::parse(&w.to_bytes()).unwrap();
    assert_eq!(g.tensor("u").unwrap().offset, 64);
    assert_eq!(g.data_offset % 64, 0);
}

#[test]
fn empty_tensors_with_the_data_section_past_the_end_are_an_error() {
    let mut w = GgufWriter::new();
    w.metadata("k", Value::U8(1))
        .tensor("empty", &[0], GgmlType::F32, Vec::new());
    let mut bytes = w.to_bytes();
    // The header ends at byte 75; its data section starts at the next multiple of 32.
    assert_eq!(Gguf::parse(&bytes).unwrap().data_offset, 96);
    bytes.truncate(80);
    // Found by `cargo fuzz run gguf_parse`: an empty tensor passed every bounds check
    // while the aligned data section began past the end of the file.
    let err = Gguf::parse(&bytes).unwrap_err().to_string();
    assert!(err.contains("past the end of the file"), "{err}");
}

#[test]
fn random_corruption_never_panics() {
    let bytes = sample().to_bytes();
    let mut state = 0x9E3779B97F4A7C15u64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut b = bytes.clone();
        for k in 0..(state % 4 + 1) {
            let i = ((state >> (8 * k)) as usize) % b.len();
            b[i] = (state >> (16 + k)) as u8;
        }
        let _ = Gguf::parse(&b);
    }
}
