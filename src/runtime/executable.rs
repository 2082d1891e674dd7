//! A loaded executable and its execution: every kernel's pipeline is created at load time;
//! an execution records the whole program into one command encoder and submits once —
//! except where a loop or branch needs a predicate from the device, which is read back with
//! as little as possible in flight, and where a host call needs its operands on the host
//! (the work before it is submitted, its operands read back, its results uploaded). Buffers
//! come from the device's pool and go back to it at the point the compile-time plan says —
//! once the work recorded on them is submitted, so a concurrent execution of the same or
//! another executable never receives a buffer that unsubmitted work still uses. Every piece of per-call state lives in `Run`: executables
//! are reentrant.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer::{DeviceBuffer, Prefetch};
use super::device::{BindResource, Device, GpuBuffer, InputTexture, StagedReads};
use super::event::Event;
use super::host_call::{self, HostArg, HostResult};
use crate::codegen::kernel::Kernel;
use crate::codegen::texture_reads::{TextureInput, TEXEL_ROW};
use crate::compile::program::{
    BranchStep, ChunkedStep, HostCallStep, Program, Slot, Step, TripsAtStart, WhileKernelStep,
    WhileStep,
};
use crate::error::{Error, Result};
use crate::ir::{ElementType, TensorType};
use crate::passes::trip_count::Start;

/// A kernel with its pipeline.
pub struct LoadedKernel {
    /// The generated kernel.
    pub kernel: Kernel,
    pipeline: Arc<wgpu::ComputePipeline>,
    layout: wgpu::BindGroupLayout,
    /// Per input read through a texture, the texture each launch copies it into (shared
    /// device-wide, see `Device::input_texture`).
    textures: Vec<Option<Arc<InputTexture>>>,
    /// Per state texture of the kernel (`Kernel::state_textures`), the texture each launch
    /// copies that part of the output into.
    state_textures: Vec<Arc<InputTexture>>,
    /// Per scratch texture of the kernel (`Kernel::scratch_textures`), the texture it binds.
    scratch_textures: Vec<Arc<InputTexture>>,
}

/// Everything an executable is made of, as the compiler hands it over.
pub struct ExecutableParts {
    /// Name (the module's or the jitted function's).
    pub name: String,
    /// Parameter types.
    pub param_types: Vec<TensorType>,
    /// Result types.
    pub output_types: Vec<TensorType>,
    /// Type of every slot.
    pub slot_types: Vec<TensorType>,
    /// Kernels.
    pub kernels: Vec<Kernel>,
    /// Constants: slot and host bytes.
    pub constants: Vec<(Slot, Vec<u8>)>,
    /// The program.
    pub program: Program,
    /// Parameter slots.
    pub params: Vec<Slot>,
    /// Result slots.
    pub results: Vec<Slot>,
    /// The program after passes, as StableHLO text.
    pub ir_text: String,
    /// Per output: the parameter it may reuse (`tf.aliasing_output`).
    pub output_aliases: Vec<Option<usize>>,
}

/// A compiled program loaded on a device.
pub struct Executable {
    device: Arc<Device>,
    parts: ExecutableParts,
    kernels: Vec<LoadedKernel>,
    constants: Vec<(Slot, Arc<GpuBuffer>)>,
    fingerprint: String,
    /// `execution of NAME`, for errors (made once, not per call).
    what: String,
    /// With the dump on: the file its first executions' per-kernel times go to.
    times_dump: std::sync::OnceLock<std::path::PathBuf>,
    /// Executions profiled for `times_dump` so far.
    times_dumped: std::sync::atomic::AtomicUsize,
    /// Nanoseconds from the last execution's final submission to its completion as this
    /// process saw it (`u64::MAX` before one completed): how long its next one may spin
    /// for completion (`spin_budget`).
    last_device_ns: Arc<AtomicU64>,
    /// Per output: set once a result of this output was read back to the host. Later
    /// executions then copy that output for the host in their own submission (if small:
    /// [`PREFETCH_MAX_BYTES`]), so its read-back needs no submission of its own (a training
    /// loop reading its loss every step).
    read_hints: Vec<Arc<std::sync::atomic::AtomicBool>>,
    /// Per slot, the pool keys of the last two buffers it was given (0: none): asked for
    /// first, so that a program run again binds the buffers it bound before and finds its
    /// bind groups cached. Two, because a result fed back as the next call's argument is
    /// still held then: results alternate between two buffers.
    slot_buffers: Vec<[AtomicU64; 2]>,
}

/// Executions whose per-kernel times the dump records by default.
const DUMPED_EXECUTIONS: usize = 3;

/// Executions whose per-kernel times the dump records: `WGPU_HLO_DUMP_EXECUTIONS` (a number),
/// else [`DUMPED_EXECUTIONS`]. More give medians over steady-state runs for A/B comparisons.
fn dumped_executions() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("WGPU_HLO_DUMP_EXECUTIONS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DUMPED_EXECUTIONS)
    })
}

/// Per-kernel totals from resolved timestamps (`bytes`: two u64 ticks per timed dispatch of
/// `kernels`), named by `names`.
///
/// Each dispatch is charged the time from the end of the dispatches before it to its own end
/// (the first one: from its begin), so the kernels' times add up to the span and no work goes
/// uncounted. The time between a dispatch's own two timestamps is kept beside it: it is the
/// kernel's alone on a GPU, but llvmpipe records a timestamp when it next flushes, and after a
/// dispatch that bound a storage texture every later begin timestamp came out after its
/// dispatch had run. Eigh 256's 28 QL launches read 1.5 ms between their timestamps and 56 ms
/// from end to end, the same 56 ms they read between their timestamps without textures.
fn kernel_times(
    bytes: &[u8],
    kernels: &[usize],
    untimed: usize,
    names: &[String],
    period_ns: f64,
) -> KernelTimes {
    let kernels_len = kernels.len();
    let tick = |j: usize| {
        bytes
            .get(j * 8..j * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let ms = |ticks: u64| ticks as f64 * period_ns * 1e-6;
    let mut per: Vec<KernelTime> = Vec::new();
    let (mut first, mut last) = (u64::MAX, 0u64);
    for (i, &k) in kernels.iter().enumerate() {
        let (begin, end) = (tick(2 * i), tick(2 * i + 1));
        let valid = begin != 0 && end >= begin;
        let inside = if valid { end - begin } else { 0 };
        // From the latest end so far (dispatches that overlapped on a GPU are not charged
        // twice), else from its own begin.
        let charged = match (valid, last > 0) {
            (false, _) => 0,
            (true, true) => end.saturating_sub(last),
            (true, false) => inside,
        };
        if valid {
            first = first.min(begin);
            last = last.max(end);
        }
        match per.iter_mut().find(|e| e.kernel == k) {
            Some(e) => {
                e.dispatches += 1;
                e.ms += ms(charged);
                e.inside_ms += ms(inside);
            }
            None => per.push(KernelTime {
                kernel: k,
                name: names
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| format!("kernel {k}")),
                dispatches: 1,
                ms: ms(charged),
                inside_ms: ms(inside),
            }),
        }
    }
    KernelTimes {
        kernels: per,
        untimed,
        span_ms: ms(last.saturating_sub(first)),
        dispatches: kernels_len,
    }
}

/// The dump's text for one profiled execution: the kernels slowest first.
fn kernel_times_text(n: usize, t: KernelTimes) -> String {
    let mut rows = t.kernels;
    rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    let inside: f64 = rows.iter().map(|r| r.inside_ms).sum();
    let mut text = format!(
        "execution {n}: {:.4} ms from the first dispatch's start to the last one's end, in {} \
         dispatches; per kernel the time from the end of the dispatches before it to its end, \
         then (in brackets) between its own begin and end timestamps ({inside:.4} ms in all)\n",
        t.span_ms, t.dispatches
    );
    for r in rows {
        text += &format!(
            "  {:10.4} ms {:>5}x  {}  ({:.4} ms)\n",
            r.ms, r.dispatches, r.name, r.inside_ms
        );
    }
    if t.untimed > 0 {
        text += &format!("  ({} further dispatches not timed)\n", t.untimed);
    }
    text
}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Executable({}, {} kernels)",
            self.parts.name,
            self.kernels.len()
        )
    }
}

/// A stable hash of the compiled program (its IR text and kernels).
pub(crate) fn fingerprint(parts: &ExecutableParts) -> String {
    // FNV-1a over the kernels and the program: stable across runs and processes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(parts.ir_text.as_bytes());
    for k in &parts.kernels {
        eat(k.wgsl.as_bytes());
    }
    format!("{h:016x}")
}

/// Records the copy of `input.texels` texels of `buffer` from texel `first` on into `texture`
/// (rows of `TEXEL_ROW` texels, the last one shorter).
fn copy_to_texture(
    enc: &mut wgpu::CommandEncoder,
    (buffer, first): (&wgpu::Buffer, u64),
    texture: &wgpu::Texture,
    input: &TextureInput,
) {
    let start = first * TextureInput::TEXEL_BYTES;
    let row = u64::from(TEXEL_ROW);
    let full = input.texels / row;
    let rest = input.texels % row;
    let row_bytes = row * TextureInput::TEXEL_BYTES;
    let copy = |enc: &mut wgpu::CommandEncoder, offset: u64, y: u32, width: u32, height: u32| {
        enc.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset,
                    bytes_per_row: Some(row_bytes as u32),
                    rows_per_image: None,
                },
            },
            wgpu::TexelCopyTextureInfo {
                texture,
                mip_level: 0,
                origin: wgpu::Origin3d { x: 0, y, z: 0 },
                aspect: wgpu::TextureAspect::All,
            },
            wgpu::Extent3d {
                width,
                height,
                depth_or_array_layers: 1,
            },
        );
    };
    if full > 0 {
        copy(enc, start, 0, TEXEL_ROW, full as u32);
    }
    if rest > 0 {
        copy(enc, start + full * row_bytes, full as u32, rest as u32, 1);
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        // Cached bind groups hold the textures of this executable's kernels.
        if self.kernels.iter().any(|k| {
            k.textures.iter().any(Option::is_some)
                || !k.state_textures.is_empty()
                || !k.scratch_textures.is_empty()
        }) {
            self.device.clear_bind_groups();
        }
    }
}

impl Executable {
    /// Creates every pipeline and uploads the constants.
    pub fn load(device: &Arc<Device>, parts: ExecutableParts) -> Result<Arc<Executable>> {
        let mut kernels = Vec::with_capacity(parts.kernels.len());
        // Pipelines first, on several threads (each parses, validates and translates its
        // WGSL, and the driver compiles it), one per distinct code: kernels of the same code
        // (a model's repeated layers) then take it from the device's cache below, and a CPU
        // driver compiles it once, not once per kernel. The first error in kernel order is
        // returned.
        let mut seen = HashSet::new();
        let distinct: Vec<&Kernel> = parts
            .kernels
            .iter()
            .filter(|k| seen.insert(super::device::pipeline_key(&k.wgsl)))
            .collect();
        let created = crate::parallel::map(&distinct, |k| device.pipeline(&k.wgsl, &k.name));
        // A CPU driver compiles each pipeline at its first dispatch, on its one queue thread:
        // done here on several cores instead (`runtime::warm`).
        let warm: Vec<super::warm::Item> = created
            .iter()
            .zip(&distinct)
            .filter(|(p, _)| p.is_ok())
            .map(|(_, k)| super::warm::Item {
                wgsl: &k.wgsl,
                label: &k.name,
                textures: {
                    // By binding: the inputs', then the state textures' after every other.
                    let mut t: Vec<Option<(u32, u32)>> = k
                        .texture_inputs
                        .iter()
                        .map(|t| t.as_ref().map(|t| t.extent()))
                        .collect();
                    let at = k
                        .state_textures
                        .iter()
                        .map(|s| (s.binding, s.texture.extent()))
                        .chain(
                            k.scratch_textures
                                .iter()
                                .map(|s| (s.binding, (s.width, s.height))),
                        );
                    for (at, extent) in at {
                        let at = at as usize;
                        if t.len() <= at {
                            t.resize(at + 1, None);
                        }
                        t[at] = Some(extent);
                    }
                    t
                },
            })
            .collect();
        device.warm(&warm);
        for k in &parts.kernels {
            // From the cache, which holds a weak reference to what `created` holds (a kernel
            // whose creation failed above fails again here, in kernel order).
            let pipeline = device.pipeline(&k.wgsl, &k.name)?;
            let layout = pipeline.get_bind_group_layout(0);
            // Inputs of one extent take slots 0, 1, ...: one launch never binds a texture
            // twice.
            let mut slots: HashMap<(u32, u32), usize> = HashMap::new();
            let mut textures = Vec::with_capacity(k.texture_inputs.len());
            for (j, t) in k.texture_inputs.iter().enumerate() {
                textures.push(match t {
                    Some(t) => {
                        let slot = slots.entry(t.extent()).or_insert(0);
                        let tex = device.input_texture(t, *slot, &format!("{} in{j}", k.name))?;
                        *slot += 1;
                        Some(tex)
                    }
                    None => None,
                });
            }
            let mut state_textures = Vec::with_capacity(k.state_textures.len());
            for s in &k.state_textures {
                let t = &s.texture;
                let slot = slots.entry(t.extent()).or_insert(0);
                let label = format!("{} out{} copy", k.name, s.output);
                state_textures.push(device.input_texture(t, *slot, &label)?);
                *slot += 1;
            }
            let mut scratch_slots: HashMap<(u32, u32), usize> = HashMap::new();
            let mut scratch_textures = Vec::with_capacity(k.scratch_textures.len());
            for s in &k.scratch_textures {
                let slot = scratch_slots.entry((s.width, s.height)).or_insert(0);
                let label = format!("{} scratch {}", k.name, s.binding);
                scratch_textures.push(device.scratch_texture(
                    (s.width, s.height),
                    *slot,
                    &label,
                )?);
                *slot += 1;
            }
            kernels.push(LoadedKernel {
                kernel: k.clone(),
                pipeline,
                layout,
                textures,
                state_textures,
                scratch_textures,
            });
        }
        drop(created);
        let mut constants = Vec::new();
        for (slot, bytes) in &parts.constants {
            let ty = parts
                .slot_types
                .get(*slot)
                .ok_or_else(|| Error::internal("constant slot out of range"))?;
            let b = device.upload(ty, bytes)?;
            constants.push((*slot, b.gpu()?));
        }
        device.check_health()?;
        device.save_pipeline_cache();
        let slots = parts.slot_types.len();
        let outputs = parts.output_types.len();
        Ok(Arc::new(Executable {
            device: device.clone(),
            fingerprint: fingerprint(&parts),
            what: format!("execution of {}", parts.name),
            parts,
            kernels,
            constants,
            times_dump: std::sync::OnceLock::new(),
            times_dumped: std::sync::atomic::AtomicUsize::new(0),
            last_device_ns: Arc::new(AtomicU64::new(u64::MAX)),
            read_hints: (0..outputs)
                .map(|_| Arc::new(std::sync::atomic::AtomicBool::new(false)))
                .collect(),
            slot_buffers: (0..slots)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        }))
    }

    /// How long the next execution may spin for its completion before leaving it to the
    /// polling threads: twice the last one's time from submission to completion, if that
    /// was within the device's `spin_limit` (none before one completed, or on an adapter
    /// without a limit). An executable that ran longer than the limit, or had to queue
    /// behind other work, does not spin; one that spins in vain soon stops, since its
    /// measured time then includes the spin.
    fn spin_budget(&self) -> Duration {
        let limit = self.device.spin_limit();
        let last = Duration::from_nanos(self.last_device_ns.load(Ordering::Relaxed));
        if limit.is_zero() || last > limit {
            return Duration::ZERO;
        }
        (last * 2).min(limit)
    }

    /// The executable's name.
    pub fn name(&self) -> &str {
        &self.parts.name
    }
    /// Number of results.
    pub fn num_outputs(&self) -> usize {
        self.parts.output_types.len()
    }
    /// Parameter types.
    pub fn parameter_types(&self) -> &[TensorType] {
        &self.parts.param_types
    }
    /// Result types.
    pub fn output_types(&self) -> &[TensorType] {
        &self.parts.output_types
    }
    /// A stable hash of the compiled program.
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }
    /// The program after passes, as StableHLO text.
    pub fn ir_text(&self) -> String {
        self.parts.ir_text.clone()
    }
    /// Per output: the parameter whose buffer it may reuse when donated.
    pub fn output_aliases(&self) -> Vec<Option<usize>> {
        self.parts.output_aliases.clone()
    }
    /// The compiled program as bytes that `compile::deserialize` loads again on an adapter
    /// like this one, with this build, without compiling (see `compile::serial`).
    pub fn serialize(&self) -> Vec<u8> {
        crate::compile::serial::encode(&self.parts, &self.fingerprint, &self.device)
    }
    /// The generated kernels.
    pub fn kernels(&self) -> Vec<&Kernel> {
        self.kernels.iter().map(|k| &k.kernel).collect()
    }
    /// The program listing (for dumps).
    pub fn program_listing(&self) -> String {
        let names: Vec<String> = self
            .kernels
            .iter()
            .map(|k| k.kernel.listed_name())
            .collect();
        self.parts.program.listing(&names)
    }
    /// The device it runs on.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Runs the program on `args`. Returns the results and an event that completes when the
    /// device has produced them; returns as soon as the work is queued, except where a loop
    /// or branch must read a predicate back first. Donated arguments are consumed (their
    /// buffers become deleted and are reused for temporaries and results).
    pub fn execute(
        &self,
        args: &[DeviceBuffer],
        donated: &[bool],
    ) -> Result<(Vec<DeviceBuffer>, Event)> {
        if let Some(path) = self.times_dump.get() {
            let n = self
                .times_dumped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n < dumped_executions() && self.device.has_timestamps() {
                return self.execute_dumping_times(args, donated, path, n);
            }
        }
        let (outs, event, _) = self.execute_with(args, donated, false)?;
        Ok((outs, event))
    }

    /// With the dump on, the first few executions are timed per kernel and the times go to
    /// `path` (`NAME.kernel_times.txt` next to the WGSL files); this is called by the compiler.
    pub fn dump_kernel_times_to(&self, path: std::path::PathBuf) {
        let _ = self.times_dump.set(path);
    }

    /// `execute`, profiled, appending execution `n`'s per-kernel times to `path` once the
    /// device has run it (on the poller thread; a failure to write is logged).
    fn execute_dumping_times(
        &self,
        args: &[DeviceBuffer],
        donated: &[bool],
        path: &std::path::Path,
        n: usize,
    ) -> Result<(Vec<DeviceBuffer>, Event)> {
        let (outs, event, timing) = self.execute_with(args, donated, true)?;
        let Some((resolved, kernels, untimed)) = timing.filter(|t| !t.1.is_empty()) else {
            return Ok((outs, event));
        };
        let names: Vec<String> = self.kernels.iter().map(|k| k.kernel.name.clone()).collect();
        let period = self.device.timestamp_period();
        let path = path.to_path_buf();
        let len = kernels.len() * 16;
        self.device
            .read_buffer(&resolved, len, "kernel timestamps", move |r| {
                let text = match r {
                    Err(e) => format!("execution {n}: no times ({e})\n"),
                    Ok(bytes) => kernel_times_text(
                        n,
                        kernel_times(&bytes, &kernels, untimed, &names, period),
                    ),
                };
                use std::io::Write;
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .and_then(|mut f| f.write_all(text.as_bytes()));
                if let Err(e) = written {
                    log::warn!("writing {}: {e}", path.display());
                }
            });
        Ok((outs, event))
    }

    /// Runs the program on `args` (nothing donated) with a timestamp query around every
    /// kernel dispatch, waits for it and returns the results with each kernel's GPU time.
    /// UNIMPLEMENTED on an adapter without `TIMESTAMP_QUERY`.
    pub fn execute_profiled(
        &self,
        args: &[DeviceBuffer],
    ) -> Result<(Vec<DeviceBuffer>, KernelTimes)> {
        if !self.device.has_timestamps() {
            return Err(Error::unimplemented(format!(
                "per-kernel times: {} has no timestamp queries",
                self.device.info().name
            )));
        }
        let (outs, event, timing) = self.execute_with(args, &[], true)?;
        event.wait()?;
        let Some((resolved, kernels, untimed)) = timing else {
            return Err(Error::internal("a profiled execution recorded no timing"));
        };
        if kernels.is_empty() {
            return Ok((
                outs,
                KernelTimes {
                    kernels: Vec::new(),
                    untimed,
                    span_ms: 0.0,
                    dispatches: 0,
                },
            ));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let len = kernels.len() * 16;
        self.device
            .read_buffer(&resolved, len, "kernel timestamps", move |r| {
                let _ = tx.send(r);
            });
        let limit = super::event::wait_timeout();
        let bytes = rx
            .recv_timeout(limit)
            .map_err(|_| super::event::deadline_error("kernel timestamps", limit))??;
        let names: Vec<String> = self.kernels.iter().map(|k| k.kernel.name.clone()).collect();
        let times = kernel_times(
            &bytes,
            &kernels,
            untimed,
            &names,
            self.device.timestamp_period(),
        );
        Ok((outs, times))
    }

    fn execute_with(
        &self,
        args: &[DeviceBuffer],
        donated: &[bool],
        profile: bool,
    ) -> Result<(Vec<DeviceBuffer>, Event, Option<Timing>)> {
        let p = &self.parts;
        if args.len() != p.param_types.len() {
            return Err(Error::invalid(format!(
                "{}: expected {} arguments, got {}",
                p.name,
                p.param_types.len(),
                args.len()
            )));
        }
        self.device.check_usable()?;
        let mut slots: Vec<Option<Arc<GpuBuffer>>> = vec![None; p.slot_types.len()];
        let mut waits = Vec::new();
        let mut producers = Vec::new();
        // The storage of every argument the caller keeps: a result that is one of them must
        // be a copy. A set, looked up once per result: asking each argument for its storage
        // per result (a lock and a reference count each) cost a training step with 107
        // arguments and results about 11,500 of each, ~0.6 ms of host time per call.
        let mut kept_args: HashSet<usize> = HashSet::with_capacity(args.len());
        for (i, (a, &slot)) in args.iter().zip(&p.params).enumerate() {
            if a.ty() != &p.param_types[i] {
                return Err(Error::invalid(format!(
                    "{}: argument {i} has type {}, expected {}",
                    p.name,
                    a.ty(),
                    p.param_types[i]
                )));
            }
            if !Arc::ptr_eq(a.device(), &self.device) {
                return Err(Error::invalid(format!(
                    "{}: argument {i} lives on another device",
                    p.name
                )));
            }
            let ready = a.ready();
            if let Some(e) = ready.error() {
                return Err(e);
            }
            if !ready.is_ready() {
                if ready.is_queued() {
                    // Produced by work already on the queue: ordered before ours without a
                    // host wait; its outcome joins ours.
                    producers.push(ready);
                } else {
                    waits.push(ready);
                }
            }
            let gpu = a.gpu()?;
            if donated.get(i).copied().unwrap_or(false) {
                a.delete();
            } else {
                kept_args.insert(Arc::as_ptr(&gpu) as usize);
            }
            slots[slot] = Some(gpu);
        }
        // Arguments whose producing work is not even queued yet (a copy waiting for its
        // source, a buffer the host is still filling) must be before ours is queued.
        for w in waits {
            w.wait()?;
        }
        for (slot, buf) in &self.constants {
            slots[*slot] = Some(buf.clone());
        }
        let what = &self.what;
        let (outs, event, timing, fills) = self.device.scoped(what, || {
            let mut run = Run {
                exe: self,
                slots,
                retired: Vec::new(),
                encoder: None,
                pass: None,
                what,
                profile: None,
                filled: HashMap::new(),
                written: HashMap::new(),
                settled: false,
            };
            if profile {
                run.profile = Some(Profiler {
                    set: self
                        .device
                        .device
                        .create_query_set(&wgpu::QuerySetDescriptor {
                            label: Some("kernel times"),
                            ty: wgpu::QueryType::Timestamp,
                            count: 2 * MAX_TIMED_DISPATCHES,
                        }),
                    kernels: Vec::new(),
                    untimed: 0,
                });
            }
            run.program(&p.program)?;
            let mut outs = Vec::with_capacity(p.results.len());
            let mut seen: HashSet<usize> = HashSet::with_capacity(p.results.len());
            for &s in &p.results {
                let buf = run.get(s)?;
                let ptr = Arc::as_ptr(&buf) as usize;
                let shared = run.holders(&buf) > 2
                    || seen.contains(&ptr)
                    || kept_args.contains(&ptr)
                    || self.constants.iter().any(|(_, c)| Arc::ptr_eq(c, &buf));
                let buf = if shared {
                    let copy = Arc::new(self.device.alloc(buf.size, "result")?);
                    self.device.count_copy(buf.size);
                    run.end_pass();
                    run.encoder()
                        .copy_buffer_to_buffer(&buf.buffer, 0, &copy.buffer, 0, buf.size);
                    copy
                } else {
                    buf
                };
                seen.insert(Arc::as_ptr(&buf) as usize);
                outs.push(buf);
            }
            let timing = match run.profile.take() {
                Some(prof) if !prof.kernels.is_empty() => {
                    let n = 2 * prof.kernels.len() as u64;
                    let resolved = self.device.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("kernel times"),
                        size: n * 8,
                        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: false,
                    });
                    run.end_pass();
                    run.encoder()
                        .resolve_query_set(&prof.set, 0..n as u32, &resolved, 0);
                    Some((resolved, prof.kernels, prof.untimed))
                }
                Some(prof) => Some((
                    self.device.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("kernel times"),
                        size: 8,
                        usage: wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: false,
                    }),
                    Vec::new(),
                    prof.untimed,
                )),
                None => None,
            };
            // Spinning helps only a call whose arguments are ready: one that waits for
            // earlier work leaves that work's completion to the polling threads.
            let spin = if producers.is_empty() && timing.is_none() {
                self.spin_budget()
            } else {
                Duration::ZERO
            };
            // Small outputs read back after earlier executions: copied for the host after
            // the work, in the same submission.
            let mut prefetch = Vec::new();
            let mut staged = None;
            if timing.is_none() {
                let mut srcs = Vec::new();
                for (k, (buf, t)) in outs.iter().zip(&p.output_types).enumerate() {
                    let len = t.byte_size();
                    let hinted = self
                        .read_hints
                        .get(k)
                        .is_some_and(|h| h.load(Ordering::Relaxed));
                    if hinted && len > 0 && len as u64 <= PREFETCH_MAX_BYTES {
                        srcs.push((&buf.buffer, len));
                        prefetch.push(k);
                    }
                }
                if !srcs.is_empty() {
                    run.end_pass();
                    staged = Some(self.device.stage_reads(
                        run.encoder(),
                        &srcs,
                        "a result's read-back",
                    )?);
                }
            }
            // The copies' bytes, handed to each prefetched result once mapped. The map starts
            // right after the submission, before the spin for its completion.
            let fills: Vec<(usize, Arc<Prefetch>)> = prefetch
                .iter()
                .map(|&k| (k, Arc::new(Prefetch::default())))
                .collect();
            let (filled, device) = (fills.clone(), &self.device);
            let map = move |event: &Event, wake: bool| {
                let Some(staged) = staged else {
                    return;
                };
                let fills = filled;
                let done = move |r: Result<Vec<Vec<u8>>>| match r {
                    Ok(bytes) => {
                        for ((_, f), b) in fills.iter().zip(bytes) {
                            f.set(Ok(b));
                        }
                    }
                    Err(e) => {
                        for (_, f) in &fills {
                            f.set(Err(e.clone()));
                        }
                    }
                };
                device.map_reads(staged, event, "a result's read-back", wake, done);
            };
            let submitted = Instant::now();
            // Nothing recorded since a read-back that followed all the work (a loop's last
            // predicate): the results are ready, and no empty submission is made for them.
            let event = if run.settled && run.encoder.is_none() && timing.is_none() {
                // (Never so with prefetched results: their copies are recorded.)
                let event = Event::ready();
                map(&event, true);
                event
            } else {
                run.submit_spinning_then(spin, |e| map(e, false))
            };
            if !self.device.spin_limit().is_zero() {
                let last = self.last_device_ns.clone();
                event.on_ready(move |r| {
                    if r.is_ok() {
                        let ns = u64::try_from(submitted.elapsed().as_nanos()).unwrap_or(u64::MAX);
                        last.store(ns, Ordering::Relaxed);
                    }
                });
            }
            Ok((outs, event, timing, fills))
        })?;
        let mut prefetched: Vec<Option<Arc<Prefetch>>> = vec![None; outs.len()];
        for (k, f) in fills {
            if let Some(slot) = prefetched.get_mut(k) {
                *slot = Some(f);
            }
        }
        let event = if producers.is_empty() {
            event
        } else {
            producers.push(event);
            Event::all(&producers)
        };
        let results = outs
            .into_iter()
            .zip(&p.output_types)
            .zip(prefetched)
            .enumerate()
            .map(|(k, ((b, t), pre))| {
                DeviceBuffer::from_gpu(&self.device, t.clone(), b, event.clone())
                    .with_read_hint(self.read_hints.get(k).cloned(), pre)
            })
            .collect();
        Ok((results, event, timing))
    }

    /// `execute` without donation, waiting for completion.
    pub fn execute_blocking(&self, args: &[DeviceBuffer]) -> Result<Vec<DeviceBuffer>> {
        let (outs, done) = self.execute(args, &[])?;
        done.wait()?;
        self.device.check_health()?;
        Ok(outs)
    }
}

/// The state of one execution.
struct Run<'a> {
    exe: &'a Executable,
    slots: Vec<Option<Arc<GpuBuffer>>>,
    /// Buffers this run no longer needs but has recorded work on: held until that work is
    /// submitted, then dropped (back to the device's pool).
    retired: Vec<Arc<GpuBuffer>>,
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// `execution of NAME`, for errors.
    what: &'a str,
    /// Per-kernel timing, when asked for (`Executable::execute_profiled`): nothing else pays.
    profile: Option<Profiler>,
    /// Since the last submission: per input texture, the buffer last copied into it, how
    /// many dispatches had written that buffer then, and the texels copied (first, count). A
    /// launch finding the same key skips the copy (cholesky's column launches read the same matrix 256 times). Cleared at each
    /// submission: another execution's copy into the same texture can only come between two
    /// submissions.
    filled: HashMap<usize, (usize, u64, u64, u64)>,
    /// Since the last submission: per buffer, the dispatches that bound it as an output.
    written: HashMap<usize, u64>,
    /// Every submission of this run is known to have run (a read-back after the last one
    /// came back): with nothing recorded since, the run ends without another submission.
    settled: bool,
}

/// Largest output an execution copies for the host in its own submission once an earlier
/// result of that output was read back (`Executable::read_hints`).
const PREFETCH_MAX_BYTES: u64 = 64 << 10;

/// Timestamp queries around every dispatch of one execution.
struct Profiler {
    set: wgpu::QuerySet,
    /// The kernel of each timed dispatch, in order (queries 2i and 2i+1).
    kernels: Vec<usize>,
    /// Dispatches that found the query set full.
    untimed: usize,
}

/// What a profiled execution leaves to read: the resolved timestamps, the kernel of each
/// timed dispatch and the number of dispatches not timed.
type Timing = (wgpu::Buffer, Vec<usize>, usize);

/// Dispatches timed per execution at most (two queries each).
const MAX_TIMED_DISPATCHES: u32 = 2048;

/// Per-kernel GPU time of one profiled execution.
#[derive(Clone, Debug, Default)]
pub struct KernelTimes {
    /// Per kernel that ran, in the order of their first dispatches.
    pub kernels: Vec<KernelTime>,
    /// Dispatches beyond what one execution times (not counted above).
    pub untimed: usize,
    /// From the first timed dispatch's start to the last one's end: the kernels' time plus
    /// the device's gaps between them (barriers, launch latency) and any host round trips
    /// between submissions.
    pub span_ms: f64,
    /// Dispatches timed.
    pub dispatches: usize,
}

/// One kernel's share of a profiled execution (see `kernel_times`).
#[derive(Clone, Debug, Default)]
pub struct KernelTime {
    /// Its index in the executable.
    pub kernel: usize,
    /// Its name, as in the dump.
    pub name: String,
    /// Its dispatches.
    pub dispatches: usize,
    /// Milliseconds from the end of the dispatches before each of its dispatches to that
    /// dispatch's end, summed: what the kernels' times add up to the span with.
    pub ms: f64,
    /// Milliseconds between each dispatch's own begin and end timestamps, summed.
    pub inside_ms: f64,
}

impl Run<'_> {
    fn device(&self) -> &Arc<Device> {
        &self.exe.device
    }

    fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        let dev = self.exe.device.clone();
        self.encoder.get_or_insert_with(|| {
            dev.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
        })
    }

    fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let p = match self.pass.take() {
            Some(p) => p,
            None => self
                .encoder()
                .begin_compute_pass(&wgpu::ComputePassDescriptor::default())
                .forget_lifetime(),
        };
        self.pass.insert(p)
    }

    fn end_pass(&mut self) {
        self.pass = None;
    }

    /// Submits everything recorded so far; buffers retired before it may be reused now.
    fn submit(&mut self) -> Event {
        self.submit_spinning(Duration::ZERO)
    }

    /// `submit`, then polls up to `spin` for its completion (`Device::submit_spinning`).
    fn submit_spinning(&mut self, spin: Duration) -> Event {
        self.submit_spinning_then(spin, |_| {})
    }

    /// `submit_spinning`, running `after` between the submission and the spin
    /// (`Device::submit_spinning_then`).
    fn submit_spinning_then(&mut self, spin: Duration, after: impl FnOnce(&Event)) -> Event {
        self.end_pass();
        let cmds = self
            .encoder
            .take()
            .map(|e| e.finish())
            .into_iter()
            .collect();
        let event = self
            .exe
            .device
            .submit_spinning_then(cmds, self.what, spin, after);
        self.settled = false;
        self.retired.clear();
        self.filled.clear();
        self.written.clear();
        event
    }

    /// Ends this run's use of `buf` (see `retired`). A buffer is listed once: one retired
    /// twice (a loop-carried value passed through, an update on a copy whose target stays
    /// live) held itself, so [`Self::reuse`] never found it alone, and every iteration of a
    /// loop allocated its temporaries anew (a 4000 x 4000 Cholesky: 8.9 GB).
    fn retire(&mut self, buf: Arc<GpuBuffer>) {
        if !self.retired.iter().any(|b| Arc::ptr_eq(b, &buf)) {
            self.retired.push(buf);
        }
    }

    /// How many hold `buf`, not counting `retired`, which only keeps buffers alive until
    /// their recorded work is submitted. A loop's state is retired from the arguments' slots
    /// after each iteration while the state still holds it: counted as a second holder, it
    /// made every in-place update of loop state (a scan stacking its outputs) copy the whole
    /// buffer each iteration.
    fn holders(&self, buf: &Arc<GpuBuffer>) -> usize {
        let retired = self.retired.iter().any(|b| Arc::ptr_eq(b, buf));
        Arc::strong_count(buf) - usize::from(retired)
    }

    /// A buffer of `size` bytes this run retired and no one else holds: its later work is
    /// recorded after every earlier use, so the run may write it again at once (a loop
    /// recorded without a submission reuses its temporaries instead of allocating anew).
    fn reuse(&mut self, size: u64) -> Option<Arc<GpuBuffer>> {
        // Buffers are allocated rounded up (`Device::alloc`): a tensor of 263 x 1001 f32 asked
        // for 1053052 bytes and never found the 1053056 it had been given.
        let size = crate::runtime::device::allocated_size(size);
        let i = self
            .retired
            .iter()
            .position(|b| b.size == size && Arc::strong_count(b) == 1)?;
        Some(self.retired.swap_remove(i))
    }

    fn get(&self, s: Slot) -> Result<Arc<GpuBuffer>> {
        self.slots
            .get(s)
            .and_then(Clone::clone)
            .ok_or_else(|| Error::internal(format!("{}: slot {s} is empty", self.exe.parts.name)))
    }

    /// A buffer of slot `s`'s size, of any contents, not put in the slot.
    fn fresh_buffer(&mut self, s: Slot) -> Result<Arc<GpuBuffer>> {
        let ty = self
            .exe
            .parts
            .slot_types
            .get(s)
            .ok_or_else(|| Error::internal(format!("{}: no slot {s}", self.exe.parts.name)))?;
        let size = (ty.byte_size() as u64).max(4).next_multiple_of(4);
        match self.reuse(size) {
            Some(b) => Ok(b),
            None => Ok(Arc::new(self.device().alloc(size, "temp")?)),
        }
    }

    fn alloc(&mut self, s: Slot) -> Result<Arc<GpuBuffer>> {
        let ty = &self.exe.parts.slot_types[s];
        let size = (ty.byte_size() as u64).max(4).next_multiple_of(4);
        let buf = match self.reuse(size) {
            Some(b) => b,
            None => {
                let last = self.exe.slot_buffers.get(s);
                let prefer = last.map_or([0, 0], |l| {
                    [l[0].load(Ordering::Relaxed), l[1].load(Ordering::Relaxed)]
                });
                let buf = self.device().alloc_preferring(size, "temp", &prefer)?;
                if let Some(l) = last {
                    if prefer[0] != buf.key {
                        l[1].store(prefer[0], Ordering::Relaxed);
                        l[0].store(buf.key, Ordering::Relaxed);
                    }
                }
                Arc::new(buf)
            }
        };
        self.set(s, Some(buf.clone()));
        Ok(buf)
    }

    fn set(&mut self, s: Slot, buf: Option<Arc<GpuBuffer>>) {
        if let Some(old) = std::mem::replace(&mut self.slots[s], buf) {
            self.retire(old);
        }
    }

    fn program(&mut self, p: &Program) -> Result<()> {
        for step in &p.steps {
            match step {
                Step::Launch {
                    kernel,
                    args,
                    results,
                } => self.launch(*kernel, args, results)?,
                Step::Alias { src, dst } => {
                    let b = self.get(*src)?;
                    self.set(*dst, Some(b));
                }
                Step::Update {
                    kernel,
                    args,
                    target,
                    result,
                    take,
                } => self.update(*kernel, args, &[(*target, *result, *take)], &[])?,
                Step::Updates(u) => {
                    let targets: Vec<(Slot, Slot, bool)> = u
                        .targets
                        .iter()
                        .zip(&u.results)
                        .zip(&u.takes)
                        .map(|((&t, &r), &k)| (t, r, k))
                        .collect();
                    self.update(u.kernel, &u.args, &targets, &u.outputs)?
                }
                Step::Free(slots) => {
                    for &s in slots {
                        self.set(s, None);
                    }
                }
                Step::While(w) => self.run_while(w)?,
                Step::WhileKernel(w) => self.run_while_kernel(w)?,
                Step::Branch(b) => self.run_branch(b)?,
                Step::HostCall(h) => self.host_call(h)?,
                Step::Chunked(c) => self.chunked(c)?,
            }
        }
        Ok(())
    }

    fn launch(&mut self, k: usize, args: &[Slot], results: &[Slot]) -> Result<()> {
        let exe = self.exe;
        let lk = &exe.kernels[k];
        let mut bufs = Vec::with_capacity(args.len() + results.len());
        for &a in args {
            bufs.push(self.get(a)?);
        }
        for &r in results {
            bufs.push(self.alloc(r)?);
        }
        let empty = lk.kernel.outputs.iter().all(|o| o.ty.num_elements() == 0);
        if !empty {
            self.dispatch(k, &bufs, &[])?;
        }
        Ok(())
    }

    /// Runs a kernel in parts: its results allocated once, then one dispatch per chunk with
    /// its own arguments and parts of the large buffers.
    fn chunked(&mut self, c: &ChunkedStep) -> Result<()> {
        let mut outs = Vec::with_capacity(c.results.len());
        for &r in &c.results {
            outs.push(self.alloc(r)?);
        }
        for chunk in &c.chunks {
            let mut bufs = Vec::with_capacity(chunk.args.len() + outs.len());
            for &a in &chunk.args {
                bufs.push(self.get(a)?);
            }
            bufs.extend(outs.iter().cloned());
            self.dispatch(c.kernel, &bufs, &chunk.ranges)?;
        }
        Ok(())
    }

    /// Records kernel `k` over `bufs` (its inputs, then its outputs, in binding order),
    /// binding `ranges[i]` (offset, size) of buffer `i` where given, else all of it.
    fn dispatch(
        &mut self,
        k: usize,
        bufs: &[Arc<GpuBuffer>],
        ranges: &[Option<(u64, u64)>],
    ) -> Result<()> {
        let exe = self.exe;
        let lk = &exe.kernels[k];
        let mut entries = Vec::with_capacity(bufs.len());
        let mut copies = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            let (offset, size) = match ranges.get(i).copied().flatten() {
                None => (0, 0),
                Some((offset, size)) => {
                    if size == 0 || offset.saturating_add(size) > b.size {
                        return Err(Error::internal(format!(
                            "{}: kernel {} binds bytes {offset}..+{size} of a buffer of {}",
                            exe.parts.name, lk.kernel.name, b.size
                        )));
                    }
                    (offset, size)
                }
            };
            match lk.textures.get(i).and_then(Option::as_ref) {
                Some(tex) => {
                    let input = lk.kernel.texture_inputs.get(i).copied().flatten();
                    let input = match (input, offset, size) {
                        (Some(t), 0, 0) if t.texels * TextureInput::TEXEL_BYTES <= b.size => t,
                        _ => {
                            return Err(Error::internal(format!(
                                "{}: kernel {} reads input {i} through a texture but binds                                  {size} bytes at {offset} of a buffer of {}",
                                exe.parts.name, lk.kernel.name, b.size
                            )))
                        }
                    };
                    let id = Arc::as_ptr(b) as usize;
                    let now = (
                        id,
                        self.written.get(&id).copied().unwrap_or(0),
                        0,
                        input.texels,
                    );
                    if self.filled.insert(Arc::as_ptr(tex) as usize, now) != Some(now) {
                        copies.push(((&b.buffer, 0), &tex.texture, input));
                    }
                    entries.push(BindResource::Texture(&tex.view));
                }
                None => entries.push(BindResource::Buffer(&b.buffer, offset, size)),
            }
        }
        // Tensors larger than one binding, read or written anywhere: the tensor's own binding
        // holds the first part, further parts follow all other bindings (`codegen::parted`).
        for q in &lk.kernel.parted {
            let j = q.binding as usize;
            let (Some(b), Some(BindResource::Buffer(_, 0, 0))) = (bufs.get(j), entries.get(j))
            else {
                return Err(Error::internal(format!(
                    "{}: kernel {} binds binding {j} in parts, but not as a whole buffer",
                    exe.parts.name, lk.kernel.name
                )));
            };
            entries[j] = BindResource::Buffer(&b.buffer, 0, q.range(0, b.size).1);
            for p in 1..q.parts {
                let (offset, size) = q.range(p, b.size);
                if size == 0 {
                    return Err(Error::internal(format!(
                        "{}: kernel {} binds part {p} of binding {j}, past its buffer of {} bytes",
                        exe.parts.name, lk.kernel.name, b.size
                    )));
                }
                entries.push(BindResource::Buffer(&b.buffer, offset, size));
            }
        }
        // Copies of parts of the outputs updated in place, for the loads of words the launch
        // does not write (`codegen::texture_reads::STATE_MARK`), bound after everything else.
        for (s, tex) in lk.kernel.state_textures.iter().zip(&lk.state_textures) {
            let j = lk.kernel.inputs.len() + s.output;
            let end = (s.first + s.texture.texels) * TextureInput::TEXEL_BYTES;
            // The whole buffer bound, the texels within it, the binding the next one.
            let whole = matches!(entries.get(j), Some(BindResource::Buffer(_, 0, 0)));
            let next = entries.len() == s.binding as usize;
            let Some(b) = bufs.get(j).filter(|b| whole && next && end <= b.size) else {
                return Err(Error::internal(format!(
                    "{}: kernel {} copies texels {}..+{} of output {} into a texture at binding \
                     {}, which its buffers and bindings do not match",
                    exe.parts.name, lk.kernel.name, s.first, s.texture.texels, s.output, s.binding
                )));
            };
            let id = Arc::as_ptr(b) as usize;
            let now = (
                id,
                self.written.get(&id).copied().unwrap_or(0),
                s.first,
                s.texture.texels,
            );
            if self.filled.insert(Arc::as_ptr(tex) as usize, now) != Some(now) {
                copies.push(((&b.buffer, s.first), &tex.texture, s.texture));
            }
            entries.push(BindResource::Texture(&tex.view));
        }
        // Scratch textures, after those: nothing to copy.
        for (s, tex) in lk.kernel.scratch_textures.iter().zip(&lk.scratch_textures) {
            if entries.len() != s.binding as usize {
                return Err(Error::internal(format!(
                    "{}: kernel {} binds a scratch texture at binding {}, after {} others",
                    exe.parts.name,
                    lk.kernel.name,
                    s.binding,
                    entries.len()
                )));
            }
            entries.push(BindResource::Texture(&tex.view));
        }
        if !copies.is_empty() {
            self.end_pass();
            let enc = self.encoder();
            for (buffer, texture, input) in copies {
                copy_to_texture(enc, buffer, texture, &input);
            }
        }
        let bind_group = exe.device.bind_group(&lk.kernel.name, &lk.layout, &entries);
        for b in bufs.iter().skip(lk.kernel.inputs.len()) {
            *self.written.entry(Arc::as_ptr(b) as usize).or_insert(0) += 1;
        }
        let [x, y, z] = lk.kernel.workgroups;
        if let Some(prof) = &mut self.profile {
            let i = prof.kernels.len() as u32;
            if i < MAX_TIMED_DISPATCHES {
                prof.kernels.push(k);
                let set = prof.set.clone();
                self.end_pass();
                let mut pass = self
                    .encoder()
                    .begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(&lk.kernel.name),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &set,
                            beginning_of_pass_write_index: Some(2 * i),
                            end_of_pass_write_index: Some(2 * i + 1),
                        }),
                    });
                pass.set_pipeline(&lk.pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(x, y, z);
                return Ok(());
            }
            prof.untimed += 1;
        }
        let pass = self.pass();
        pass.set_pipeline(&lk.pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(x, y, z);
        Ok(())
    }

    /// A buffer holding slot `target`'s value that a kernel may write: its own buffer when
    /// `take` (nothing later reads the slot, which is emptied) and no one else holds it (no
    /// loop state, parameter or alias), else a copy.
    fn writable(&mut self, target: Slot, take: bool) -> Result<Arc<GpuBuffer>> {
        let src = if take {
            self.slots
                .get_mut(target)
                .and_then(Option::take)
                .ok_or_else(|| {
                    Error::internal(format!("{}: slot {target} is empty", self.exe.parts.name))
                })?
        } else {
            self.get(target)?
        };
        if take && self.holders(&src) == 1 {
            return Ok(src);
        }
        let size = src.size;
        let fresh = match self.reuse(size) {
            Some(b) => b,
            None => Arc::new(self.device().alloc(size, "temp")?),
        };
        self.end_pass();
        self.device().count_copy(size);
        self.encoder()
            .copy_buffer_to_buffer(&src.buffer, 0, &fresh.buffer, 0, size);
        self.retire(src);
        Ok(fresh)
    }

    /// Runs update kernel `k` on its targets' buffers, `(target, result, take)` in output
    /// binding order: each in place when this step may take it and no one else holds it (no
    /// loop state, parameter or later step), else on a copy; each updated buffer becomes its
    /// result. The kernel's other outputs (`outputs`, bound after the targets) are fresh.
    fn update(
        &mut self,
        k: usize,
        args: &[Slot],
        targets: &[(Slot, Slot, bool)],
        outputs: &[Slot],
    ) -> Result<()> {
        let exe = self.exe;
        let lk = &exe.kernels[k];
        let mut bufs = Vec::with_capacity(args.len() + targets.len());
        for &a in args {
            bufs.push(self.get(a)?);
        }
        let mut updated = Vec::with_capacity(targets.len());
        for &(target, result, take) in targets {
            let buf = self.writable(target, take)?;
            bufs.push(buf.clone());
            updated.push((result, buf));
        }
        for &o in outputs {
            bufs.push(self.alloc(o)?);
        }
        if lk.kernel.inputs.iter().all(|i| i.ty.num_elements() > 0) {
            self.dispatch(k, &bufs, &[])?;
        }
        drop(bufs);
        for (result, buf) in updated {
            self.set(result, Some(buf));
        }
        Ok(())
    }

    /// Submits what is recorded and reads the first 4 bytes of slot `s`.
    fn read_word(&mut self, s: Slot) -> Result<[u8; 4]> {
        let bytes = self.read_bytes(&[(s, 4)])?;
        let mut w = [0u8; 4];
        w.copy_from_slice(bytes.first().and_then(|b| b.get(..4)).unwrap_or(&[0; 4]));
        Ok(w)
    }

    /// Submits what is recorded and reads the first `len` bytes of each slot back: the
    /// copies recorded after the work, all in one submission.
    fn read_bytes(&mut self, reads: &[(Slot, usize)]) -> Result<Vec<Vec<u8>>> {
        let what = format!("a predicate of {}", self.what);
        self.read_bytes_for(reads, &what)
    }

    /// [`Self::read_bytes`], naming the reads `what` in errors.
    fn read_bytes_for(&mut self, reads: &[(Slot, usize)], what: &str) -> Result<Vec<Vec<u8>>> {
        let staged = self.stage_reads(reads, what)?;
        self.submit_and_read(staged, reads, what)
    }

    /// Records, after the work recorded so far, copies of the first `len` bytes of each slot
    /// into a read-back buffer ([`Self::finish_reads`] after the next submission).
    fn stage_reads(&mut self, reads: &[(Slot, usize)], what: &str) -> Result<StagedReads> {
        let bufs = reads
            .iter()
            .map(|&(s, _)| self.get(s))
            .collect::<Result<Vec<_>>>()?;
        let srcs: Vec<(&wgpu::Buffer, usize)> = bufs
            .iter()
            .zip(reads)
            .map(|(b, &(_, len))| (&b.buffer, len))
            .collect();
        let dev = self.exe.device.clone();
        self.end_pass();
        dev.stage_reads(self.encoder(), &srcs, what)
    }

    /// Submits what is recorded, which ends with the reads `staged` ([`Self::stage_reads`]),
    /// and returns their bytes. The map starts between the submission and this thread's
    /// spin for the work (`Device::start_reads`): where the work finishes within the spin,
    /// the same poll maps the bytes and no polling thread wakes.
    fn submit_and_read(
        &mut self,
        staged: StagedReads,
        reads: &[(Slot, usize)],
        what: &str,
    ) -> Result<Vec<Vec<u8>>> {
        let dev = self.exe.device.clone();
        let mut pending = None;
        let submitted = self.submit_spinning_then(dev.spin_limit(), |e| {
            pending = Some(dev.start_reads(staged, e, what));
        });
        let bytes = pending
            .ok_or_else(|| Error::internal(format!("{what}: the read-back was not started")))?
            .wait(&dev, &submitted)?;
        // The read-back ran after everything submitted so far.
        self.settled = true;
        if bytes.len() != reads.len() || bytes.iter().zip(reads).any(|(b, &(_, len))| b.len() < len)
        {
            return Err(Error::internal(format!("{what}: short read-back")));
        }
        Ok(bytes)
    }

    /// The trip count of loop `w` from the values its counter tests read (one read-back
    /// before the first iteration), or `None` where a test would not stop or its counter
    /// would leave its type's range: the predicate is then read after every iteration.
    fn trips_at_start(&mut self, init: &[Slot], t: &TripsAtStart) -> Result<Option<u64>> {
        let Some(reads) = trip_reads(init, t)? else {
            return Ok(None);
        };
        let bytes = self.read_bytes(&reads)?;
        Ok(trips_from(t, &bytes))
    }

    /// Submits what is recorded, reads the arguments of `h` back, runs the host function and
    /// uploads its results into fresh buffers.
    fn host_call(&mut self, h: &HostCallStep) -> Result<()> {
        let exe = self.exe;
        let types = &exe.parts.slot_types;
        let ty = |s: Slot| {
            types
                .get(s)
                .ok_or_else(|| Error::internal(format!("{}: slot {s} out of range", h.name)))
        };
        // Every argument copied in one submission after the work before the call.
        let what = format!("the arguments of {} in {}", h.name, self.what);
        let mut reads = Vec::with_capacity(h.args.len());
        for &s in &h.args {
            let len = ty(s)?.byte_size();
            if len > 0 {
                reads.push((s, len));
            }
        }
        let mut read = if reads.is_empty() {
            let submitted = self.submit();
            if let Some(e) = submitted.error() {
                return Err(e);
            }
            Vec::new()
        } else {
            self.read_bytes_for(&reads, &what)?
        }
        .into_iter();
        let mut data: Vec<Vec<u8>> = Vec::with_capacity(h.args.len());
        for &s in &h.args {
            data.push(if ty(s)?.byte_size() > 0 {
                read.next()
                    .ok_or_else(|| Error::internal(format!("{what}: a read-back is missing")))?
            } else {
                Vec::new()
            });
        }
        let dev = self.exe.device.clone();
        let args = h
            .args
            .iter()
            .zip(&data)
            .map(|(&s, d)| {
                Ok(HostArg {
                    ty: ty(s)?,
                    data: d,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut out: Vec<Vec<u8>> = h
            .results
            .iter()
            .map(|&s| Ok(vec![0u8; ty(s)?.byte_size()]))
            .collect::<Result<_>>()?;
        let mut results = h
            .results
            .iter()
            .zip(out.iter_mut())
            .map(|(&s, d)| {
                Ok(HostResult {
                    ty: ty(s)?,
                    data: d,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        host_call::call(h.target, &h.name, &args, &mut results)?;
        drop(results);
        for (&s, bytes) in h.results.iter().zip(&out) {
            let buf = dev.upload(ty(s)?, bytes)?.gpu()?;
            self.set(s, Some(buf));
        }
        Ok(())
    }

    fn run_while(&mut self, w: &WhileStep) -> Result<()> {
        let trip_count = match (w.trip_count, &w.trips_at_start) {
            (Some(n), _) => Some(n),
            (None, Some(t)) => self.trips_at_start(&w.init, t)?,
            (None, None) => None,
        };
        // Initial values dead after the loop move into it, so that the body may update them
        // in place from the first iteration on.
        // States that start fresh (every row written by the loop) start as pooled buffers of
        // any contents: their initial values may never have been computed.
        let mut state: Vec<Arc<GpuBuffer>> = w
            .init
            .iter()
            .zip(&w.init_takes)
            .enumerate()
            .map(|(k, (&s, &take))| {
                if w.fresh.get(k).copied().unwrap_or(false) {
                    return self.fresh_buffer(s);
                }
                match take {
                    true => self.slots.get_mut(s).and_then(Option::take).ok_or_else(|| {
                        Error::internal(format!("{}: slot {s} is empty", self.exe.parts.name))
                    }),
                    false => self.get(s),
                }
            })
            .collect::<Result<_>>()?;
        let mut iteration: u64 = 0;
        // The body may return values defined outside the loop: only its own slots (and the
        // loop arguments) are cleared between iterations.
        let own = w.body.defined();
        loop {
            if let Some(n) = trip_count {
                if iteration >= n {
                    break;
                }
            } else {
                for (&a, b) in w.args.iter().zip(&state) {
                    self.set(a, Some(b.clone()));
                }
                self.program(&w.cond)?;
                let word = self.read_word(w.cond_result)?;
                self.set(w.cond_result, None);
                if word[0] == 0 {
                    break;
                }
            }
            // The state moves into the arguments (no second reference), so the body may
            // update loop-carried buffers in place.
            for (&a, b) in w.args.iter().zip(std::mem::take(&mut state)) {
                self.set(a, Some(b));
            }
            self.program(&w.body)?;
            let next: Vec<Arc<GpuBuffer>> = w
                .body_results
                .iter()
                .map(|&s| self.get(s))
                .collect::<Result<_>>()?;
            for &s in &w.args {
                self.set(s, None);
            }
            for &s in &w.body_results {
                if own.contains(&s) {
                    self.set(s, None);
                }
            }
            state = next;
            iteration += 1;
            // Long counted loops are submitted in chunks to bound command buffer size.
            if trip_count.is_some() && iteration % 256 == 0 {
                self.submit();
            }
        }
        for (&r, b) in w.results.iter().zip(state) {
            self.set(r, Some(b));
        }
        Ok(())
    }

    /// Runs a loop whole inside its kernel: launches from the initial state, each next one
    /// from the state the last wrote, as many as the trip count needs (known at compile time
    /// or computed at the start), else until a launch's flag says its predicate failed.
    fn run_while_kernel(&mut self, w: &WhileKernelStep) -> Result<()> {
        let states = w.states.min(w.args.len()).min(w.results.len());
        // At least one launch: it writes the results (the initial state, for no iterations).
        let launches_for = |n: u64| n.div_ceil(w.per_launch.max(1)).max(1);
        let mut launches = w.trip_count.map(launches_for);
        // A trip count computed at the start is read in the first launch's submission, copied
        // before it runs (it may update the values in place): the launch tests the predicate
        // itself, so it runs right for any count, and one submission and read-back serve
        // where a read-back of the count came first (lavapipe: fori_loop to a traced bound of
        // 64 floats 0.40 -> see the commit).
        let mut trip_values = match (&launches, &w.trips_at_start) {
            (None, Some(t)) => match trip_reads(&w.init, t)? {
                Some(reads) => {
                    let what = format!("the trip count of a loop in {}", self.what);
                    Some((t, self.stage_reads(&reads, &what)?, reads, what))
                }
                None => None,
            },
            _ => None,
        };
        let mut bound: Vec<Arc<GpuBuffer>> =
            w.args.iter().map(|&s| self.get(s)).collect::<Result<_>>()?;
        // Results updated in place start as their initial values: the initial value's own
        // buffer where the loop may take it and no one else holds it, else a copy.
        for (j, (&r, ip)) in w.results.iter().zip(&w.in_place).enumerate() {
            let Some(k) = *ip else {
                continue;
            };
            if w.fresh.get(j).copied().unwrap_or(false) {
                // Every element written by the loop (its initial value may not exist).
                self.alloc(r)?;
                continue;
            }
            let init = *w.init.get(k).ok_or_else(|| {
                Error::internal(format!(
                    "{}: loop initial value {k} missing",
                    self.exe.parts.name
                ))
            })?;
            let buf = self.writable(init, w.init_takes.get(k).copied().unwrap_or(false))?;
            self.set(r, Some(buf));
        }
        let mut done = 0u64;
        loop {
            let mut bufs = bound.clone();
            for (&r, ip) in w.results.iter().zip(&w.in_place) {
                bufs.push(match ip {
                    Some(_) => self.get(r)?,
                    None => self.alloc(r)?,
                });
            }
            let flag = self.alloc(w.flag)?;
            if w.clear_flag {
                // Set by any invocation still going, never cleared by the kernel.
                self.end_pass();
                self.encoder().clear_buffer(&flag.buffer, 0, None);
            }
            bufs.push(flag);
            self.dispatch(w.kernel, &bufs, &[])?;
            done += 1;
            if let Some((t, staged, reads, what)) = trip_values.take() {
                let bytes = self.submit_and_read(staged, &reads, &what)?;
                // No count (a test that would not stop): the flags say, as without one.
                launches = trips_from(t, &bytes).map(launches_for);
            }
            let more = match launches {
                Some(n) => done < n,
                None => self.read_word(w.flag)?[0] != 0,
            };
            if !more {
                break;
            }
            // The results not updated in place: each launch writes fresh ones, the next
            // launch's inputs.
            let moving = w
                .results
                .iter()
                .zip(&w.in_place)
                .filter(|(_, ip)| ip.is_none());
            for (b, (&r, _)) in bound.iter_mut().zip(moving).take(states) {
                *b = self.get(r)?;
            }
            if done % 256 == 0 {
                self.submit();
            }
        }
        self.set(w.flag, None);
        for &(r, i) in &w.same {
            let b = self.get(i)?;
            self.set(r, Some(b));
        }
        Ok(())
    }

    fn run_branch(&mut self, b: &BranchStep) -> Result<()> {
        let word = self.read_word(b.selector)?;
        let n = b.branches.len();
        let index = if b.is_if {
            if word[0] != 0 {
                0
            } else {
                1
            }
        } else {
            let i = i32::from_le_bytes(word);
            if i < 0 || i as usize >= n {
                n - 1
            } else {
                i as usize
            }
        };
        let (prog, res) = b
            .branches
            .get(index)
            .ok_or_else(|| Error::internal("branch index out of range"))?;
        self.program(prog)?;
        for (&r, &s) in b.results.iter().zip(res) {
            let buf = self.get(s)?;
            self.set(r, Some(buf));
        }
        // A branch may return values defined outside it: only its own slots end here.
        let own = prog.defined();
        for &s in res {
            if own.contains(&s) {
                self.set(s, None);
            }
        }
        Ok(())
    }
}

/// The slots and byte sizes a loop's trip count is computed from (its counter tests' values),
/// or `None` where a read is not of a 32- or 64-bit integer (only what lowering writes; a
/// deserialized program could say otherwise).
fn trip_reads(init: &[Slot], t: &TripsAtStart) -> Result<Option<Vec<(Slot, usize)>>> {
    let mut reads = Vec::with_capacity(t.reads.len());
    for &(k, d) in &t.reads {
        if !d.is_int() || !matches!(d.byte_size(), 4 | 8) {
            return Ok(None);
        }
        let slot = *init
            .get(k)
            .ok_or_else(|| Error::internal("a counter test reads no loop operand"))?;
        reads.push((slot, d.byte_size()));
    }
    Ok(Some(reads))
}

/// The trip count from the values read ([`trip_reads`], in order): the fewest trips over the
/// tests, or `None` where a test would not stop or its counter would leave its type's range.
fn trips_from(t: &TripsAtStart, bytes: &[Vec<u8>]) -> Option<u64> {
    let mut values: Vec<(usize, i128, ElementType)> = Vec::new();
    for (&(k, d), b) in t.reads.iter().zip(bytes) {
        let mut a = [0u8; 8];
        a[..d.byte_size()].copy_from_slice(b.get(..d.byte_size())?);
        let [b0, b1, b2, b3, ..] = a;
        let v = match (d.byte_size(), d.is_unsigned_int()) {
            (4, false) => i32::from_le_bytes([b0, b1, b2, b3]) as i128,
            (4, true) => u32::from_le_bytes([b0, b1, b2, b3]) as i128,
            (_, false) => i64::from_le_bytes(a) as i128,
            (_, true) => u64::from_le_bytes(a) as i128,
        };
        values.push((k, v, d));
    }
    let find = |k: usize| values.iter().find(|v| v.0 == k);
    let value = |s: Start| match s {
        Start::Const(c) => Some(c),
        Start::Init(k) => find(k).map(|v| v.1),
    };
    let mut trips: Option<u64> = None;
    for test in &t.tests {
        let (Some(init), Some(bound), Some(&(_, _, d))) =
            (value(test.init), value(test.bound), find(test.counter))
        else {
            return None;
        };
        let n = test.trips(init, bound)?;
        let bits = 8 * d.byte_size() as u32;
        let (lo, hi) = if d.is_unsigned_int() {
            (0, (1i128 << bits) - 1)
        } else {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        };
        let last = init + n as i128 * test.step;
        if !(lo..=hi).contains(&init) || !(lo..=hi).contains(&last) {
            return None;
        }
        trips = Some(trips.map_or(n, |m| m.min(n)));
    }
    trips
}

#[cfg(test)]
mod tests {
    use super::kernel_times;

    fn ticks(t: &[(u64, u64)]) -> Vec<u8> {
        t.iter()
            .flat_map(|&(b, e)| [b.to_le_bytes(), e.to_le_bytes()])
            .flatten()
            .collect()
    }

    /// Timestamps recorded late (llvmpipe after a storage-texture kernel: each begin after its
    /// dispatch ran) still charge each kernel its work, and the times add up to the span.
    #[test]
    fn late_begin_timestamps_charge_the_work_to_its_kernel() {
        let names = vec!["tri".to_string(), "ql".to_string()];
        // tri 10..50 bracketed right; ql's two dispatches ran 50..70 and 70..90 but their
        // begins were read just before their ends.
        let bytes = ticks(&[(10_000, 50_000), (69_900, 70_000), (89_950, 90_000)]);
        let t = kernel_times(&bytes, &[0, 1, 1], 0, &names, 1000.0);
        assert_eq!(t.dispatches, 3);
        assert!((t.span_ms - 80.0).abs() < 1e-9);
        let ql = t.kernels.iter().find(|k| k.name == "ql").unwrap();
        assert_eq!(ql.dispatches, 2);
        assert!((ql.ms - 40.0).abs() < 1e-9, "{ql:?}");
        assert!((ql.inside_ms - 0.15).abs() < 1e-9, "{ql:?}");
        let total: f64 = t.kernels.iter().map(|k| k.ms).sum();
        assert!((total - t.span_ms).abs() < 1e-9);
    }

    /// A missing or reversed pair charges nothing, and overlapping dispatches (a GPU may run
    /// independent passes at once) are not charged twice.
    #[test]
    fn unread_and_overlapping_timestamps() {
        let names = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let bytes = ticks(&[(10, 20), (0, 0), (15, 30), (25, 28)]);
        let t = kernel_times(&bytes, &[0, 1, 2, 2], 0, &names, 1e6);
        let get = |n: &str| t.kernels.iter().find(|k| k.name == n).unwrap().clone();
        assert_eq!(get("b").ms, 0.0);
        assert_eq!(get("a").ms, 10.0);
        assert_eq!(get("c").ms, 10.0);
        assert_eq!(get("c").inside_ms, 18.0);
        assert_eq!(t.span_ms, 20.0);
    }
}
