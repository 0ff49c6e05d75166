//! The shared pieces of a transformer block, written once for every architecture.

pub mod attention;
pub mod ffn;
pub mod moe;
