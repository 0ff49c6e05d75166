//! Where a backend is chosen: `--device auto|gpu|cpu|reference`.

use std::sync::Arc;

use device::{Device, Role};
use gguf::GgmlType;
use kernels::{Precision, ThreadPool};

use crate::{Error, Result};

/// A backend to compute on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeviceKind {
    /// The CPU backend (`kernels::cpu`): the packed kernels of the CPU's features.
    #[default]
    Cpu,
    /// The scalar reference backend (`device::reference`): slow; for checking others.
    Reference,
    /// The wgpu backend (`gpu`) on the best adapter wgpu finds, a software one (Mesa's
    /// lavapipe) included when there is no other.
    Gpu,
}

impl DeviceKind {
    /// `auto` (the CPU: probing for a GPU on every start waits for a probe that does not
    /// print the Vulkan loader's complaints), `gpu`, `cpu` or `reference`.
    pub fn parse(s: &str) -> std::result::Result<DeviceKind, String> {
        match s {
            "auto" | "cpu" => Ok(DeviceKind::Cpu),
            "gpu" => Ok(DeviceKind::Gpu),
            "reference" => Ok(DeviceKind::Reference),
            other => Err(format!(
                "unknown device '{other}' (this build has: auto, gpu, cpu, reference)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Reference => "reference",
            DeviceKind::Gpu => "gpu",
        }
    }

    /// A device of this kind; the CPU computes on `pool` with `precision`. Errors: no
    /// adapter for `gpu`.
    pub fn open(self, pool: Arc<ThreadPool>, precision: Precision) -> Result<Box<dyn Device>> {
        Ok(match self {
            DeviceKind::Cpu => Box::new(kernels::cpu::Cpu::new(pool, precision)),
            DeviceKind::Reference => Box::new(device::reference::Reference::new()),
            DeviceKind::Gpu => Box::new(gpu::Gpu::open(gpu::Choice::Any).map_err(Error::Config)?),
        })
    }

    /// Bytes a matrix takes on a device of this kind (for the memory plan, before any
    /// device is made).
    pub fn matrix_bytes(self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
        match self {
            DeviceKind::Cpu => kernels::cpu::matrix_bytes(ty, n_rows, n_cols, role),
            DeviceKind::Reference => device::reference::matrix_bytes(ty, n_rows, n_cols),
            DeviceKind::Gpu => gpu::matrix_bytes(ty, n_rows, n_cols),
        }
    }
}
