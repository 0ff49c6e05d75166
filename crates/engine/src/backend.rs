//! Where a backend is chosen: `--device auto|gpu|cpu|reference`.

use std::sync::{Arc, OnceLock};

use device::{Device, Precision, Role, ScratchShape};
use gguf::GgmlType;
use kernels::ThreadPool;

use crate::{Error, Result};

/// The host threads a process's CPU devices compute on: made once and shared by the
/// executors one thread drives (a target and its drafters), so that two sets of threads
/// never spin against each other. Cheap to clone; what it holds is the CPU backend's own.
#[derive(Clone)]
pub struct Threads(Arc<ThreadPool>);

impl Threads {
    /// `n` threads (at least one; the caller's is the first).
    pub fn new(n: usize) -> Threads {
        Threads(Arc::new(ThreadPool::new(n.max(1))))
    }
}

/// A backend to compute on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeviceKind {
    /// The CPU backend (`kernels::cpu`): the packed kernels of the CPU's features.
    #[default]
    Cpu,
    /// A real GPU when wgpu finds one (never a software adapter such as lavapipe), else the
    /// CPU: decided by [`DeviceKind::resolve`], which lists the adapters.
    Auto,
    /// The scalar reference backend (`device::reference`): slow; for checking others.
    Reference,
    /// The wgpu backend (`gpu`) on the best adapter wgpu finds, a software one (Mesa's
    /// lavapipe) included when there is no other.
    Gpu,
}

impl DeviceKind {
    /// `auto`, `gpu`, `cpu` or `reference` (no adapter is listed here: see
    /// [`DeviceKind::resolve`]).
    pub fn parse(s: &str) -> std::result::Result<DeviceKind, String> {
        match s {
            "auto" => Ok(DeviceKind::Auto),
            "cpu" => Ok(DeviceKind::Cpu),
            "gpu" => Ok(DeviceKind::Gpu),
            "reference" => Ok(DeviceKind::Reference),
            // llama.cpp's device lists (`-dev none`, `-dev Vulkan0,Vulkan1`): none is the
            // CPU; named devices are the GPU backend on its best adapter.
            "none" => Ok(DeviceKind::Cpu),
            other if other.split(',').all(is_llama_device_name) => Ok(DeviceKind::Gpu),
            other => Err(format!(
                "unknown device '{other}' (this build has: auto, gpu, cpu, reference; or llama.cpp's none, Vulkan0, CUDA0, ...)"
            )),
        }
    }

    /// `Auto` made definite: the GPU when wgpu finds a real one, else the CPU; every other
    /// kind is itself. The adapters are listed once per process.
    pub fn resolve(self) -> DeviceKind {
        static AUTO: OnceLock<DeviceKind> = OnceLock::new();
        match self {
            DeviceKind::Auto => *AUTO.get_or_init(|| match gpu::real_gpu() {
                true => DeviceKind::Gpu,
                false => DeviceKind::Cpu,
            }),
            other => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Auto => "auto",
            DeviceKind::Cpu => "cpu",
            DeviceKind::Reference => "reference",
            DeviceKind::Gpu => "gpu",
        }
    }

    /// A device of this kind; the CPU computes on `threads` with `precision`. Errors: no
    /// adapter for `gpu`.
    pub fn open(self, threads: Threads, precision: Precision) -> Result<Box<dyn Device>> {
        Ok(match self.resolve() {
            DeviceKind::Auto => unreachable!("resolved above"),
            DeviceKind::Cpu => Box::new(kernels::cpu::Cpu::new(threads.0, precision)),
            DeviceKind::Reference => Box::new(device::reference::Reference::new()),
            DeviceKind::Gpu => Box::new(gpu::Gpu::open(gpu::Choice::Any).map_err(Error::Config)?),
        })
    }

    /// The device a vision tower encodes on, its own so that a tower's image runs beside
    /// the engine's steps rather than in them: with the model on the GPU a second device on
    /// its adapter, else the CPU backend on `threads` threads of its own (the reference's
    /// model too: a tower is too big for it). Errors: no adapter for `gpu`.
    pub fn encoder(self, threads: usize) -> Result<Box<dyn device::encoder::EncoderDevice>> {
        Ok(match self.encoder_kind() {
            DeviceKind::Gpu => Box::new(gpu::Gpu::open(gpu::Choice::Any).map_err(Error::Config)?),
            _ => Box::new(kernels::cpu::Cpu::new(
                Threads::new(threads).0,
                Precision::Int8,
            )),
        })
    }

    /// The kind of device [`DeviceKind::encoder`] makes beside a model on this kind: the GPU,
    /// else the CPU.
    pub fn encoder_kind(self) -> DeviceKind {
        match self.resolve() {
            DeviceKind::Gpu => DeviceKind::Gpu,
            _ => DeviceKind::Cpu,
        }
    }

    /// The adapter a device of this kind computes on (the GPU's; `None` for the others).
    pub fn adapter(self) -> Option<gpu::Adapter> {
        match self.resolve() {
            DeviceKind::Gpu => gpu::adapter(gpu::Choice::Any),
            _ => None,
        }
    }

    /// The adapter's name and the bytes of its own memory, where a device of this kind has
    /// memory apart from the host's; `None` where it computes in the host's memory.
    pub fn own_memory(self) -> Option<(String, u64)> {
        self.adapter()?.own()
    }

    /// Bytes a matrix takes on a device of this kind (for the memory plan, before any
    /// device is made).
    pub fn matrix_bytes(self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
        match self.resolve() {
            DeviceKind::Auto => unreachable!("resolved above"),
            DeviceKind::Cpu => kernels::cpu::matrix_bytes(ty, n_rows, n_cols, role),
            DeviceKind::Reference => device::reference::matrix_bytes(ty, n_rows, n_cols),
            DeviceKind::Gpu => gpu::matrix_bytes(ty, n_rows, n_cols),
        }
    }

    /// Bytes a device of this kind works in besides the buffers a forward allocates (the
    /// reference allocates per op, for tests: none planned).
    pub fn scratch_bytes(self, shape: &ScratchShape) -> u64 {
        match self.resolve() {
            DeviceKind::Auto => unreachable!("resolved above"),
            DeviceKind::Cpu => kernels::cpu::scratch_bytes(shape),
            DeviceKind::Reference => 0,
            DeviceKind::Gpu => gpu::scratch_bytes(shape),
        }
    }
}

/// A device name as llama.cpp lists them: a backend's name and an index (`Vulkan0`, `CUDA1`,
/// `Metal`, `ROCm0`).
fn is_llama_device_name(s: &str) -> bool {
    let name = s.trim_end_matches(|c: char| c.is_ascii_digit());
    matches!(
        name,
        "Vulkan" | "CUDA" | "Metal" | "MTL" | "ROCm" | "HIP" | "SYCL" | "OpenCL" | "MUSA" | "CANN"
    )
}
