//! A weight block whose scale no encoder writes is refused at upload, naming its tensor
//! and block, before anything runs on it.

use device::reference::Reference;
use gguf::GgufFile;
use model::{Error, Model};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/llama-tiny.gguf"
);

/// The upload of llama-tiny with the two bytes of block `block`'s f16 scale in `tensor`
/// (a Q8_0 matrix: 34-byte blocks, the scale first) set to `bits`.
fn upload_with_scale(tensor: &str, block: usize, bits: u16) -> Result<(), Error> {
    let mut bytes = std::fs::read(FIXTURE).unwrap();
    let at = {
        let file = GgufFile::open(FIXTURE).unwrap();
        let info = file
            .header
            .tensors
            .iter()
            .find(|t| t.name == tensor)
            .unwrap();
        (file.header.data_offset + info.offset) as usize + 34 * block
    };
    bytes[at..at + 2].copy_from_slice(&bits.to_le_bytes());
    let path = std::env::temp_dir().join(format!(
        "tandem-corrupt-{}-{tensor}-{block}-{bits}.gguf",
        std::process::id()
    ));
    std::fs::write(&path, &bytes).unwrap();
    let model = Model::load(&path).unwrap();
    let result = model.upload(&mut Reference::new(), &|_, _| {}).map(|_| ());
    std::fs::remove_file(&path).unwrap();
    result
}

#[test]
fn a_nan_or_infinite_scale_is_a_load_error_naming_the_tensor_and_block() {
    for (bits, what) in [(0x7E00u16, "NaN"), (0x7C00, "+inf"), (0xFC00, "-inf")] {
        match upload_with_scale("blk.0.attn_k.weight", 3, bits) {
            Err(Error::CorruptBlock { tensor, block, .. }) => {
                assert_eq!(
                    (tensor.as_str(), block),
                    ("blk.0.attn_k.weight", 3),
                    "{what}"
                )
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    let e = upload_with_scale("blk.0.attn_k.weight", 3, 0x7E00).unwrap_err();
    assert!(e.to_string().contains("'blk.0.attn_k.weight'"), "{e}");
    upload_with_scale("blk.0.attn_k.weight", 3, 0x3C00).expect("a finite scale loads");
}
