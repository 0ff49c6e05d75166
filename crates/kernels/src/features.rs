//! The CPU's features, detected once; every kernel's instruction set is chosen from them.
//! The kernels' modules read their choice here; nothing here reads them.

use std::sync::OnceLock;

/// Which implementation `dot::dot` and `dot::dot4` use, picked once from the CPU's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
}

impl Isa {
    /// [`CpuFeatures`]'s choice.
    pub fn detect() -> Isa {
        CpuFeatures::get().dot
    }
}

/// Which implementation computes the quantized dot products (`qmatmul`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QIsa {
    Scalar,
    /// AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl QIsa {
    /// [`CpuFeatures`]'s choice.
    pub fn detect() -> QIsa {
        CpuFeatures::get().quant
    }
}

/// Which instruction set runs the packed kernels (`qmatmul::packed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedIsa {
    /// AVX-512 F/BW with VNNI (16 rows per register).
    Avx512Vnni,
    /// AVX2, FMA, F16C (8 rows per register).
    Avx2,
}

impl PackedIsa {
    /// The best the CPU supports, or `None` (then the unpacked path runs):
    /// [`CpuFeatures`]'s choice.
    pub fn detect() -> Option<PackedIsa> {
        CpuFeatures::get().packed
    }
}

/// What this CPU runs, and the implementation each family of kernels picks from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vnni: bool,
    /// AVX-512 at 256 bits, with its 32 vector registers (attention's query blocks).
    pub avx512vl: bool,
    /// f32 dots (float weights, attention).
    pub dot: Isa,
    /// Quantized dots over unpacked rows.
    pub quant: QIsa,
    /// The tiled kernels over packed matrices (`None`: matrices stay unpacked).
    pub packed: Option<PackedIsa>,
    /// The packed kernels prefetch the weights ahead of their loads for groups of at least
    /// this many activation rows: every group on Intel (on a Sapphire Rapids, 8 KiB ahead
    /// into L2 decoded 15% faster than without); from 4 rows on AMD (on a Zen 4, Q4_K and
    /// Q6_K at 1–3 rows streamed 8–18% faster on the hardware prefetcher alone, at 4 rows
    /// as fast or 10% slower, at 8 rows 26–44% slower).
    pub prefetch_rows: usize,
}

impl CpuFeatures {
    /// This CPU's features (detected on the first call).
    pub fn get() -> &'static CpuFeatures {
        static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
        FEATURES.get_or_init(CpuFeatures::detect)
    }

    fn detect() -> CpuFeatures {
        #[cfg(target_arch = "x86_64")]
        let (avx2, fma, f16c, avx512f, avx512bw, avx512vnni, avx512vl) = {
            use std::arch::is_x86_feature_detected as has;
            (
                has!("avx2"),
                has!("fma"),
                has!("f16c"),
                has!("avx512f"),
                has!("avx512bw"),
                has!("avx512vnni"),
                has!("avx512vl"),
            )
        };
        #[cfg(not(target_arch = "x86_64"))]
        let (avx2, fma, f16c, avx512f, avx512bw, avx512vnni, avx512vl) =
            (false, false, false, false, false, false, false);
        CpuFeatures {
            prefetch_rows: if is_amd() { 4 } else { 1 },
            ..Self::from_flags(avx2, fma, f16c, avx512f, avx512bw, avx512vnni, avx512vl)
        }
    }

    /// The implementations chosen for these flags (which must be the CPU's own).
    fn from_flags(
        avx2: bool,
        fma: bool,
        f16c: bool,
        avx512f: bool,
        avx512bw: bool,
        avx512vnni: bool,
        avx512vl: bool,
    ) -> CpuFeatures {
        let avx2_set = avx2 && fma;
        #[cfg(target_arch = "x86_64")]
        let (dot, quant, packed) = (
            if avx2_set { Isa::Avx2Fma } else { Isa::Scalar },
            if avx2_set && f16c {
                QIsa::Avx2
            } else {
                QIsa::Scalar
            },
            if avx512f && avx512bw && avx512vnni && f16c {
                Some(PackedIsa::Avx512Vnni)
            } else if avx2_set && f16c {
                Some(PackedIsa::Avx2)
            } else {
                None
            },
        );
        #[cfg(not(target_arch = "x86_64"))]
        let (dot, quant, packed) = {
            let _ = avx2_set;
            (Isa::Scalar, QIsa::Scalar, None)
        };
        CpuFeatures {
            avx2,
            fma,
            f16c,
            avx512f,
            avx512bw,
            avx512vnni,
            avx512vl,
            dot,
            quant,
            packed,
            prefetch_rows: 1,
        }
    }

    /// The instruction sets in use, for logs: `avx512-vnni`, `avx2`, `scalar`.
    pub fn describe(&self) -> &'static str {
        match (self.packed, self.dot) {
            (Some(PackedIsa::Avx512Vnni), _) => "avx512-vnni",
            (Some(PackedIsa::Avx2), _) => "avx2",
            (None, Isa::Scalar) => "scalar",
            #[cfg(target_arch = "x86_64")]
            (None, Isa::Avx2Fma) => "avx2 (no f16c)",
        }
    }
}

/// Whether the CPU's vendor string (CPUID leaf 0) is AMD's.
fn is_amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let r = std::arch::x86_64::__cpuid(0);
        [r.ebx, r.edx, r.ecx]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .eq(*b"AuthenticAMD")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}
