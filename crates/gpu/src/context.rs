//! The adapter and device, and the recorder of one forward: a command encoder, and an
//! arena of the small inputs its dispatches read (parameters, tokens, block tables, RoPE
//! angles), written to the device just before the encoder is submitted.
//!
//! Ordering: `Queue::write_buffer` lands before the *next* submit, so anything written to
//! a buffer that recorded commands may read is written only after those commands are
//! submitted ([`Recorder::flush`] first). Arena regions are never rewritten within a
//! forward: they are appended, and the arena starts over at the next forward's `begin`.

use crate::profile::Profiler;

/// Which adapters may be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// A real GPU (discrete first), never a software one.
    RealGpu,
    /// The best adapter there is, a software one (Mesa's lavapipe) included.
    Any,
}

/// A device and what was learned of its adapter.
pub(crate) struct Ctx {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// The fewest lanes a subgroup of this device holds, where it has subgroup operations
    /// and its workgroups' subgroups are runs of consecutive invocations (`Gpu::open`
    /// checks it).
    pub subgroup_min: Option<u32>,
}

fn rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// The adapters wgpu finds (Vulkan, Metal, DX12), best first.
pub fn adapters() -> Vec<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::PRIMARY;
    desc.memory_budget_thresholds.for_resource_creation = Some(95);
    let instance = wgpu::Instance::new(desc);
    let mut all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY));
    all.sort_by_key(|a| rank(a.get_info().device_type));
    all
}

/// Whether wgpu finds a real GPU (any adapter but a CPU-type one such as lavapipe).
pub fn real_gpu() -> bool {
    adapters()
        .iter()
        .any(|a| a.get_info().device_type != wgpu::DeviceType::Cpu)
}

/// An adapter as the memory plan sees it.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub name: String,
    /// The bytes of its own memory where it has memory apart from the host's (a discrete
    /// GPU): the largest device-local heap, known through Vulkan. `None` where it shares
    /// the host's memory (an integrated GPU, Apple silicon, lavapipe) or they cannot be
    /// known: the host's memory bounds it then.
    pub own_memory: Option<u64>,
}

impl Adapter {
    /// Its name and own memory, where it has memory of its own.
    pub fn own(self) -> Option<(String, u64)> {
        Some((self.name, self.own_memory?))
    }
}

/// The adapter `Gpu::open(choice)` takes.
pub fn adapter(choice: Choice) -> Option<Adapter> {
    let adapter = pick(adapters(), choice)?;
    let info = adapter.get_info();
    let own_memory = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => device_local_heap(&adapter),
        _ => None,
    };
    Some(Adapter {
        name: info.name,
        own_memory,
    })
}

#[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
fn device_local_heap(adapter: &wgpu::Adapter) -> Option<u64> {
    // SAFETY: the adapter outlives the guard, and only properties are read through it.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    // SAFETY: the instance and physical device are the adapter's own, alive for the call.
    let props = unsafe {
        hal.shared_instance()
            .raw_instance()
            .get_physical_device_memory_properties(hal.raw_physical_device())
    };
    const DEVICE_LOCAL: u32 = 1;
    props.memory_heaps[..props.memory_heap_count as usize]
        .iter()
        .filter(|h| h.flags.as_raw() & DEVICE_LOCAL != 0)
        .map(|h| h.size)
        .max()
}

#[cfg(any(target_vendor = "apple", target_arch = "wasm32"))]
fn device_local_heap(_: &wgpu::Adapter) -> Option<u64> {
    None
}

fn pick(all: Vec<wgpu::Adapter>, choice: Choice) -> Option<wgpu::Adapter> {
    all.into_iter()
        .find(|a| choice == Choice::Any || a.get_info().device_type != wgpu::DeviceType::Cpu)
}

/// Keeps Mesa's device-select Vulkan layer out of the listing of adapters, unless the user
/// steers it (`DRI_PRIME`, `MESA_VK_DEVICE_SELECT`): it connects to a display server while
/// adapters are listed and prints an error on machines without one (servers, CI), and
/// [`adapters`] ranks the adapters itself. It sets the process environment: call it before
/// any thread starts.
pub fn quiet_device_select() {
    let steered = ["NODEVICE_SELECT", "DRI_PRIME", "MESA_VK_DEVICE_SELECT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !steered {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
}

/// For tests that need an adapter: whether there is one (lavapipe will do). Without one
/// such a test is skipped with a message, unless `TANDEM_REQUIRE_GPU` is set (CI sets it,
/// having installed lavapipe): then this panics, failing the test.
pub fn adapter_for_tests() -> bool {
    if !adapters().is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("TANDEM_REQUIRE_GPU").is_none(),
        "TANDEM_REQUIRE_GPU is set and wgpu finds no adapter"
    );
    eprintln!("skipped: wgpu finds no adapter (install Mesa's lavapipe: mesa-vulkan-drivers)");
    false
}

impl Ctx {
    pub fn open(choice: Choice) -> Result<Ctx, String> {
        let adapter = pick(adapters(), choice).ok_or_else(|| match choice {
            Choice::RealGpu => "no GPU found by wgpu (Vulkan, Metal or DX12)".to_string(),
            Choice::Any => "no adapter found by wgpu (install a Vulkan driver, such as \
                                Mesa's lavapipe: mesa-vulkan-drivers)"
                .to_string(),
        })?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("tandem"),
            required_limits: limits.clone(),
            required_features: adapter.features()
                & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| format!("{}: {e}", info.name))?;
        Ok(Ctx {
            device,
            queue,
            info,
            limits,
            subgroup_min: None,
        })
    }

    /// `make()`, or why the device could not give it the memory it asked for.
    pub fn out_of_memory<T>(&self, make: impl FnOnce() -> T) -> Result<T, String> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let made = make();
        match pollster::block_on(scope.pop()) {
            None => Ok(made),
            Some(e) => Err(e.to_string()),
        }
    }

    /// The most bytes one storage binding may cover.
    pub fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// A buffer holding `bytes` (a multiple of 4), for reading by shaders; or why the
    /// device has no room for it.
    pub fn buffer_with(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer, String> {
        let buf = self.out_of_memory(|| self.buffer(label, bytes.len() as u64))?;
        self.queue.write_buffer(&buf, 0, bytes);
        Ok(buf)
    }

    /// A zeroed buffer of `bytes` that shaders read and write and copies use.
    pub fn buffer(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }
}

/// A range of the arena.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    chunk: usize,
    offset: u64,
    size: u64,
}

/// What a binding of a dispatch is bound to.
pub(crate) enum Bind<'a> {
    Buf(&'a wgpu::Buffer),
    Arena(Region),
}

struct Chunk {
    buf: wgpu::Buffer,
    data: Vec<u8>,
    written: usize,
}

const CHUNK_BYTES: usize = 4 << 20;

/// See the module doc.
pub(crate) struct Recorder {
    encoder: Option<wgpu::CommandEncoder>,
    chunks: Vec<Chunk>,
    cur: usize,
    align: usize,
    staging: Option<wgpu::Buffer>,
    /// Timing every dispatch, while profiling is on.
    pub profiler: Option<Profiler>,
}

impl Recorder {
    pub fn new(ctx: &Ctx) -> Recorder {
        Recorder {
            encoder: None,
            chunks: Vec::new(),
            cur: 0,
            align: ctx.limits.min_storage_buffer_offset_alignment.max(16) as usize,
            staging: None,
            profiler: None,
        }
    }

    /// Starts the arena over (a new forward; everything before was submitted).
    pub fn reset(&mut self, ctx: &Ctx) {
        self.flush(ctx);
        for c in &mut self.chunks {
            c.data.clear();
            c.written = 0;
        }
        self.cur = 0;
    }

    /// Appends `bytes` (a multiple of 4, at least 4) to the arena.
    pub fn push(&mut self, ctx: &Ctx, bytes: &[u8]) -> Region {
        loop {
            if self.cur == self.chunks.len() {
                let cap = CHUNK_BYTES.max(bytes.len());
                self.chunks.push(Chunk {
                    buf: ctx.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("arena"),
                        size: cap as u64,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    }),
                    data: Vec::with_capacity(cap),
                    written: 0,
                });
            }
            let c = &mut self.chunks[self.cur];
            let at = c.data.len().next_multiple_of(self.align);
            if at + bytes.len() <= c.buf.size() as usize {
                c.data.resize(at, 0);
                c.data.extend_from_slice(bytes);
                return Region {
                    chunk: self.cur,
                    offset: at as u64,
                    size: bytes.len() as u64,
                };
            }
            self.cur += 1;
        }
    }

    pub fn encoder(&mut self, ctx: &Ctx) -> &mut wgpu::CommandEncoder {
        self.encoder
            .get_or_insert_with(|| ctx.device.create_command_encoder(&Default::default()))
    }

    /// Records one dispatch of `pipeline` over `groups`, binding `i` of its group 0 bound
    /// to `binds[i]` and, with `tables`, binding 0 of its group 1 to them; a profiler times
    /// it as kernel `what` streaming `bytes`.
    pub fn dispatch(
        &mut self,
        ctx: &Ctx,
        pipeline: &wgpu::ComputePipeline,
        (binds, tables): (&[Bind<'_>], Option<&wgpu::Buffer>),
        groups: [u32; 3],
        (what, bytes): (&dyn std::fmt::Display, u64),
    ) {
        if self.profiler.as_ref().is_some_and(Profiler::full) {
            self.flush(ctx);
        }
        let entries: Vec<wgpu::BindGroupEntry> = binds
            .iter()
            .map(|b| match b {
                Bind::Buf(buf) => buf.as_entire_binding(),
                Bind::Arena(r) => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &self.chunks[r.chunk].buf,
                    offset: r.offset,
                    size: std::num::NonZeroU64::new(r.size),
                }),
            })
            .enumerate()
            .map(|(i, resource)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource,
            })
            .collect();
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let tables = tables.map(|t| {
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(1),
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: t.as_entire_binding(),
                }],
            })
        });
        let enc = self
            .encoder
            .get_or_insert_with(|| ctx.device.create_command_encoder(&Default::default()));
        let timestamp_writes = self
            .profiler
            .as_mut()
            .map(|p| p.next(what.to_string(), bytes));
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        if let Some(t) = &tables {
            pass.set_bind_group(1, t, &[]);
        }
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        drop(pass);
    }

    /// Writes what the arena gained and submits what was recorded.
    pub fn flush(&mut self, ctx: &Ctx) {
        for c in &mut self.chunks {
            if c.data.len() > c.written {
                ctx.queue
                    .write_buffer(&c.buf, c.written as u64, &c.data[c.written..]);
                c.written = c.data.len();
            }
        }
        if let Some(mut enc) = self.encoder.take() {
            if let Some(p) = &self.profiler {
                p.resolve(&mut enc);
            }
            ctx.queue.submit([enc.finish()]);
            if let Some(p) = &mut self.profiler {
                p.harvest(ctx);
            }
        }
    }

    /// Copies `parts` (buffer, byte offset, bytes; each a multiple of 4) one after the
    /// other into `out`, once everything recorded has run.
    pub fn read(&mut self, ctx: &Ctx, parts: &[(&wgpu::Buffer, u64, u64)], out: &mut Vec<u8>) {
        let total: u64 = parts.iter().map(|p| p.2).sum();
        if total == 0 {
            return;
        }
        if self.staging.as_ref().is_none_or(|s| s.size() < total) {
            self.staging = Some(ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staging"),
                size: total.next_power_of_two(),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let staging = self.staging.clone().expect("made above");
        let enc = self.encoder(ctx);
        let mut at = 0;
        for &(buf, offset, size) in parts {
            enc.copy_buffer_to_buffer(buf, offset, &staging, at, size);
            at += size;
        }
        self.flush(ctx);
        let slice = staging.slice(..total);
        slice.map_async(wgpu::MapMode::Read, |r| {
            r.expect("mapping the staging buffer")
        });
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("waiting for the device");
        out.extend_from_slice(&slice.get_mapped_range().expect("mapped above"));
        staging.unmap();
    }
}
