//! Where a backend is chosen: `--device auto|cpu|reference`.

use std::sync::Arc;

use device::{Device, Role};
use gguf::GgmlType;
use kernels::{Precision, ThreadPool};

/// A backend to compute on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeviceKind {
    /// The CPU backend (`kernels::cpu`): the packed kernels of the CPU's features.
    #[default]
    Cpu,
    /// The scalar reference backend (`device::reference`): slow; for checking others.
    Reference,
}

impl DeviceKind {
    /// `auto` (the best backend this build has: the CPU until another exists), `cpu` or
    /// `reference`.
    pub fn parse(s: &str) -> Result<DeviceKind, String> {
        match s {
            "auto" | "cpu" => Ok(DeviceKind::Cpu),
            "reference" => Ok(DeviceKind::Reference),
            other => Err(format!(
                "unknown device '{other}' (this build has: auto, cpu, reference)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Reference => "reference",
        }
    }

    /// A device of this kind; the CPU computes on `pool` with `precision`.
    pub fn open(self, pool: Arc<ThreadPool>, precision: Precision) -> Box<dyn Device> {
        match self {
            DeviceKind::Cpu => Box::new(kernels::cpu::Cpu::new(pool, precision)),
            DeviceKind::Reference => Box::new(device::reference::Reference::new()),
        }
    }

    /// Bytes a matrix takes on a device of this kind (for the memory plan, before any
    /// device is made).
    pub fn matrix_bytes(self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
        match self {
            DeviceKind::Cpu => kernels::cpu::matrix_bytes(ty, n_rows, n_cols, role),
            DeviceKind::Reference => device::reference::matrix_bytes(ty, n_rows, n_cols),
        }
    }
}
