//! The shared pieces of a transformer block, written once for every architecture against
//! the [`device::Device`] ops.

pub mod attention;
pub mod ffn;
