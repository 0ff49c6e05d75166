//! What the GPU tests share: the device (lavapipe in CI), buffers, comparisons.

pub use device::conformance::{buf, read, rel};
use device::reference::Reference;
pub use device::testing::source;
use device::Device;
use gguf::GgmlType;
use gpu::{Choice, Gpu};

/// The best adapter there is, lavapipe included; `None` (the test skipped) without one,
/// as [`gpu::adapter_for_tests`] says.
pub fn gpu() -> Option<Gpu> {
    gpu::adapter_for_tests().then(|| Gpu::open(Choice::Any).unwrap())
}

/// The GPU and the reference, the same ops run on each.
pub fn both() -> Option<[Box<dyn Device>; 2]> {
    Some([Box::new(gpu()?), Box::new(Reference::new())])
}

/// Every weight type the GPU backend takes: its table's rows, the test-only type's
/// included (this crate's tests build it with `test-types`).
pub fn weight_types() -> impl Iterator<Item = GgmlType> {
    gpu::SHADERS.iter().map(|s| s.ty)
}
