//! The memory plan checked where each part of it lives: on a GPU with memory of its own,
//! against that memory; on the host (the CPU's stages, and a device that shares the
//! host's memory), against what the host has free or `--mem-limit`.

use engine::{DeviceKind, MemoryPlan};

use crate::Error;

/// What a plan that does not fit on the host is told to shrink.
const HOST_HINT: &str = "shrink -c (context), -np (parallel), -ub (ubatch) or use -ctk q8_0";
/// What a plan that does not fit in a GPU's own memory is told to shrink.
const GPU_HINT: &str =
    "shrink -c (context), -np (parallel), -ub (ubatch) or keep fewer blocks on the GPU (-ngl)";

/// A GPU's own memory: its adapter's name and bytes ([`DeviceKind::own_memory`]).
pub type OwnMemory = (String, u64);

/// What bounds the host's part of a plan.
#[derive(Debug, Clone, Copy)]
pub enum HostLimit {
    /// `--mem-limit`: the whole plan, wherever it lives.
    Flag(u64),
    /// The memory the host has free: what lives on the host.
    Free(u64),
}

impl HostLimit {
    /// `--mem-limit` where given, else the host's free memory where known.
    pub fn of(flag: Option<u64>, free: Option<u64>) -> Option<HostLimit> {
        flag.map(HostLimit::Flag).or(free.map(HostLimit::Free))
    }

    fn bytes_and_source(self) -> (u64, &'static str) {
        match self {
            HostLimit::Flag(b) => (b, "--mem-limit"),
            HostLimit::Free(b) => (b, "memory available"),
        }
    }
}

/// Refuses a plan that does not fit: `device`, the part on the device the engine computes
/// on, within `own` memory where that device has its own, and what lives on the host
/// (`host`, plus `device` where the device shares the host's memory) within `host_limit`
/// (`--mem-limit` bounds the whole plan).
pub fn check(
    device: MemoryPlan,
    host: MemoryPlan,
    own: Option<&OwnMemory>,
    host_limit: Option<HostLimit>,
) -> Result<(), Error> {
    let over = |plan: MemoryPlan, limit: u64, source: String, hint: &'static str| {
        Err(Error::OverMemory {
            plan,
            limit_mib: limit as f64 / 1048576.0,
            source_of_limit: source,
            hint,
        })
    };
    if let Some((name, bytes)) = own.filter(|o| device.total() > o.1) {
        return over(device, *bytes, format!("of {name}'s own memory"), GPU_HINT);
    }
    let Some(limit) = host_limit else {
        return Ok(());
    };
    let on_host = match (own, limit) {
        (Some(_), HostLimit::Free(_)) => host,
        _ => device.with(&host),
    };
    let (bytes, source) = limit.bytes_and_source();
    match on_host.total() > bytes {
        true => over(on_host, bytes, source.to_string(), HOST_HINT),
        false => Ok(()),
    }
}

/// How a plan is printed: where it lives.
pub fn placement(kind: DeviceKind, own: Option<&OwnMemory>) -> String {
    match own {
        Some((name, bytes)) => format!(
            "on the {} device: {name}, {} MiB of its own",
            kind.name(),
            bytes >> 20
        ),
        None => format!("on the {} device", kind.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(mib: u64) -> MemoryPlan {
        MemoryPlan {
            weights: mib << 20,
            kv: 0,
            scratch: 0,
            on_disk: 0,
        }
    }

    #[test]
    fn a_gpus_own_memory_bounds_its_part_and_the_host_the_rest() {
        let gpu = ("H200".to_string(), 1000u64 << 20);
        let free = Some(HostLimit::Free(800 << 20));
        assert!(check(plan(900), plan(100), Some(&gpu), free).is_ok());
        let e = check(plan(1100), plan(100), Some(&gpu), free).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("1000.0 MiB of H200's own memory") && e.contains("-ngl"),
            "{e}"
        );
        let e = check(plan(900), plan(900), Some(&gpu), free).unwrap_err();
        assert!(e.to_string().contains("800.0 MiB memory available"), "{e}");
    }

    #[test]
    fn a_device_sharing_the_hosts_memory_is_counted_with_the_host() {
        let free = Some(HostLimit::Free(800 << 20));
        assert!(check(plan(500), plan(200), None, free).is_ok());
        let e = check(plan(500), plan(400), None, free).unwrap_err();
        assert!(e.to_string().contains("use -ctk q8_0"), "{e}");
        assert!(check(plan(5000), plan(400), None, None).is_ok());
    }

    #[test]
    fn mem_limit_bounds_the_whole_plan_on_a_gpu_too() {
        let gpu = ("H200".to_string(), 1000u64 << 20);
        let limit = Some(HostLimit::Flag(800 << 20));
        assert!(check(plan(500), plan(200), Some(&gpu), limit).is_ok());
        let e = check(plan(700), plan(200), Some(&gpu), limit).unwrap_err();
        assert!(e.to_string().contains("800.0 MiB --mem-limit"), "{e}");
    }
}
