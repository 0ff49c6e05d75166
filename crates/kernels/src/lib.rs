//! The CPU backend ([`cpu::Cpu`], a `device::Device`) and its kernels. Every kernel
//! reduces in one fixed order per output element, so a row's result never depends on the
//! other rows of its batch or on the thread count.

pub mod attention;
pub mod cpu;
pub mod delta;
pub mod dot;
pub mod features;
pub mod forms;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod qmatmul;
pub mod qmatrix;

pub use device::formats;
pub use device::{Error, Result};
pub use matmul::{matmul, matmul_grouped, matmul_many, Group};
pub use pool::ThreadPool;
pub use qmatmul::packed::{PackedIsa, PackedMatrix};
pub use qmatrix::QMatrix;
