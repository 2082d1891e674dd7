//! Adapter selection and the device: one wgpu adapter, device and queue, the adapter's own
//! limits and the features our dtypes need, a poller thread that drives completion callbacks,
//! allocation accounting and the pipeline cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::event::Event;
use super::poller::Poller;
use super::pool::Pool;
use crate::codegen::texture_reads::TextureInput;
use crate::error::{Error, ErrorKind, Result};
use crate::target::Capabilities;

/// What an adapter is, for users and for `jax.devices()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterDescription {
    /// Adapter name (`llvmpipe (LLVM 15.0.6, 256 bits)`, `NVIDIA H100`, ...).
    pub name: String,
    /// Backend (`Vulkan`, `Metal`, `Dx12`, `Gl`).
    pub backend: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` or `Other`.
    pub device_type: String,
    /// Driver name.
    pub driver: String,
    /// Driver version/details.
    pub driver_info: String,
    /// PCI vendor id (0 if unknown).
    pub vendor: u32,
    /// PCI device id (0 if unknown).
    pub device: u32,
    /// The limits and features kernels are planned by (`wgpu-hlo devices` prints them); empty
    /// where only the adapter's info was at hand.
    pub capabilities: String,
}

impl AdapterDescription {
    fn from_info(i: &wgpu::AdapterInfo) -> Self {
        AdapterDescription {
            name: i.name.clone(),
            backend: format!("{:?}", i.backend),
            device_type: format!("{:?}", i.device_type),
            driver: i.driver.clone(),
            driver_info: i.driver_info.clone(),
            vendor: i.vendor,
            device: i.device,
            capabilities: String::new(),
        }
    }

    fn from_adapter(a: &wgpu::Adapter) -> Self {
        let info = a.get_info();
        let l = a.limits();
        let f = a.features();
        let named = [
            (wgpu::Features::SHADER_F64, "f64"),
            (wgpu::Features::SHADER_F16, "f16"),
            (wgpu::Features::SHADER_INT64, "i64"),
            (wgpu::Features::SUBGROUP, "subgroups"),
            (wgpu::Features::TIMESTAMP_QUERY, "timestamps"),
        ];
        let have: Vec<&str> = named
            .iter()
            .filter(|(x, _)| f.contains(*x))
            .map(|(_, n)| *n)
            .collect();
        let capabilities = format!(
            "storage binding {} MiB, buffer {} MiB, workgroup memory {} KiB, {} invocations per \
             workgroup, subgroups {}..{}; {}",
            l.max_storage_buffer_binding_size >> 20,
            l.max_buffer_size >> 20,
            l.max_compute_workgroup_storage_size >> 10,
            l.max_compute_invocations_per_workgroup,
            info.subgroup_min_size,
            info.subgroup_max_size,
            have.join(", ")
        );
        AdapterDescription {
            capabilities,
            ..Self::from_info(&info)
        }
    }
}

impl std::fmt::Display for AdapterDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, {}", self.name, self.backend, self.device_type)?;
        if !self.driver.is_empty() {
            write!(f, ", {}", self.driver)?;
            if !self.driver_info.is_empty() {
                write!(f, " {}", self.driver_info)?;
            }
        }
        f.write_str(")")
    }
}

/// Device memory use as our allocator sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes currently allocated.
    pub bytes_in_use: u64,
    /// Most bytes ever allocated at once.
    pub peak_bytes_in_use: u64,
    /// Number of allocations made.
    pub num_allocs: u64,
    /// The largest single buffer the adapter allows (no total is known through wgpu).
    pub largest_alloc_size: u64,
    /// Bytes of free buffers kept for reuse (bounded by `WGPU_HLO_POOL_MB`).
    pub pooled_bytes: u64,
    /// Bytes executions copied between buffers to keep a value another holder still reads:
    /// an update whose target is shared (copy-on-write), a result that is also an argument
    /// or another result. Steady-state loops over their own state should add nothing here.
    pub copied_bytes: u64,
    /// Bytes of the textures inputs are copied into for texture reads
    /// (`codegen::texture_reads`), shared by every loaded executable.
    pub texture_bytes: u64,
}

/// The texel format of scratch (read-write storage, `storage`) and of input textures.
pub(crate) fn texture_format(storage: bool) -> wgpu::TextureFormat {
    if storage {
        wgpu::TextureFormat::Rgba32Float
    } else {
        wgpu::TextureFormat::Rgba32Uint
    }
}

/// A cached texture's width, height, slot and whether it is a scratch (storage) texture.
type TextureKey = (u32, u32, usize, bool);

/// A texture inputs are copied into before the launches that read them through textures
/// (`codegen::texture_reads`), and its view.
pub(crate) struct InputTexture {
    pub(crate) texture: wgpu::Texture,
    pub(crate) view: wgpu::TextureView,
    bytes: u64,
}

fn type_rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 4,
        wgpu::DeviceType::IntegratedGpu => 3,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 1,
        wgpu::DeviceType::Other => 0,
    }
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backends(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    })
}

/// Backends to consider: `WGPU_BACKEND` if set, else Vulkan, Metal and DX12 (GL only when
/// asked for: it lacks much of what compute needs).
fn backends() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY)
}

/// Ranks adapters best first: honouring `WGPU_POWER_PREF` (high → discrete first, low →
/// integrated first), otherwise discrete > integrated > virtual > CPU.
fn rank_adapters(adapters: &mut [wgpu::Adapter]) {
    let pref = wgpu::PowerPreference::from_env();
    adapters.sort_by_key(|a| {
        let t = a.get_info().device_type;
        let r = match (pref, t) {
            (Some(wgpu::PowerPreference::LowPower), wgpu::DeviceType::IntegratedGpu) => 5,
            _ => type_rank(t),
        };
        std::cmp::Reverse(r)
    });
}

/// Every adapter wgpu can see with the current environment, best first; the first is the
/// one `Device::open` picks (unless `WGPU_ADAPTER_NAME` says otherwise).
pub fn list_adapters() -> Vec<AdapterDescription> {
    let inst = instance();
    let mut adapters = pollster::block_on(inst.enumerate_adapters(backends()));
    rank_adapters(&mut adapters);
    adapters
        .iter()
        .map(AdapterDescription::from_adapter)
        .collect()
}

fn select_adapter(inst: &wgpu::Instance) -> Result<wgpu::Adapter> {
    let mut adapters = pollster::block_on(inst.enumerate_adapters(backends()));
    if adapters.is_empty() {
        return Err(Error::unavailable(format!(
            "no wgpu adapter found for backends {:?} (install a Vulkan driver, e.g. Debian's \
             mesa-vulkan-drivers for lavapipe, or set WGPU_BACKEND)",
            backends()
        )));
    }
    rank_adapters(&mut adapters);
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let w = wanted.to_lowercase();
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&w))
            .ok_or_else(|| {
                Error::unavailable(format!(
                    "WGPU_ADAPTER_NAME={wanted:?} matches no adapter; available: {}",
                    names.join(", ")
                ))
            });
    }
    Ok(adapters.remove(0))
}

/// One wgpu device and its queue, shared by every buffer and executable made on it.
pub struct Device {
    /// The wgpu device.
    pub(crate) device: wgpu::Device,
    /// Its queue: every execute submits here, so work runs in submission order.
    pub(crate) queue: wgpu::Queue,
    _instance: wgpu::Instance,
    _adapter: wgpu::Adapter,
    info: AdapterDescription,
    limits: wgpu::Limits,
    caps: Capabilities,
    poller: Arc<Poller>,
    errors: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Option<String>>>,
    bytes_in_use: AtomicU64,
    peak_bytes: AtomicU64,
    num_allocs: AtomicU64,
    copied_bytes: AtomicU64,
    pool: Pool,
    /// Pipelines by WGSL text, held weakly: a pipeline lives as long as an executable uses
    /// it, so dropping executables (`jax.clear_caches()`) frees their driver code.
    pipelines: Mutex<HashMap<String, Weak<wgpu::ComputePipeline>>>,
    /// Pipelines created (not found in `pipelines`), for tests.
    pipelines_created: AtomicU64,
    /// Input and scratch textures (the `bool`) by extent and slot (see `input_texture`,
    /// `scratch_texture`), held weakly like pipelines.
    input_textures: Mutex<HashMap<TextureKey, Weak<InputTexture>>>,
    /// The driver's pipeline cache, kept on disk (Vulkan only).
    disk_cache: Option<DiskPipelineCache>,
    /// Kernels go through `strict_float` (by default on GPU adapters, `WGPU_HLO_STRICT_FLOAT=1`
    /// on any, where the adapter passes SPIR-V through).
    strict_float: bool,
    /// Bind groups by layout and bound buffer ranges (see `BindGroupCache`).
    bind_groups: Mutex<BindGroupCache>,
    /// Read-back buffers of small sizes, unmapped, for the next read-back of that size.
    staging: Arc<StagingPool>,
    /// Bytes uploaded (`queue.write_buffer`) since the last submission: wgpu keeps them in
    /// staging memory until a submission carries them (see `Device::upload`).
    pub(crate) unsubmitted_upload_bytes: AtomicU64,
    /// Compiles a CPU driver's pipelines at load time on several cores (`warm`).
    warmer: Option<super::warm::Warmer>,
}

/// Read-backs recorded in an encoder not yet submitted ([`Device::stage_reads`]): the
/// read-back buffer, its size, and each read's offset in it and length.
pub(crate) struct StagedReads {
    buffer: wgpu::Buffer,
    total: u64,
    at: Vec<(u64, usize)>,
}

/// Reads whose map [`Device::start_reads`] started.
pub(crate) struct PendingReads {
    rx: std::sync::mpsc::Receiver<Result<Vec<Vec<u8>>>>,
    mapped: Arc<AtomicBool>,
    what: String,
}

impl PendingReads {
    /// The bytes of reads in the work `submitted`. Where the work is done (the submission's
    /// spin saw it finish) but the map is not, this thread polls for the map itself on a CPU
    /// adapter, for up to the spin limit; where the work is not done, its submission spun as
    /// long as it may already, and the polling threads complete it. Then, as every wait, it
    /// waits up to the deadline.
    pub(crate) fn wait(self, device: &Device, submitted: &Event) -> Result<Vec<Vec<u8>>> {
        let PendingReads { rx, mapped, what } = self;
        if submitted.is_ready() {
            device.spin_until(&mut || mapped.load(Ordering::Acquire));
        }
        let limit = super::event::wait_timeout();
        match rx.recv_timeout(limit) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                Err(super::event::deadline_error(&what, limit))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(Error::internal(format!(
                "{what}: the read-back was dropped"
            ))),
        }
    }
}

/// Largest read-back whose caller polls for it itself (`Device::read_buffer_spinning`):
/// lavapipe copies it well within the spin limit.
const SPIN_READ_MAX_BYTES: u64 = 1 << 20;

/// Read-back buffers up to this size are kept for reuse.
const STAGING_MAX_BYTES: u64 = 1 << 20;
/// At most this many bytes of read-back buffers are kept.
const STAGING_POOL_BYTES: u64 = 8 << 20;

/// Mappable read-back buffers by size (small ones only, bounded): a read-back of a result
/// of the same size as the last one creates no buffer.
#[derive(Default)]
struct StagingPool {
    inner: Mutex<(HashMap<u64, Vec<wgpu::Buffer>>, u64)>,
}

impl StagingPool {
    fn take(&self, size: u64) -> Option<wgpu::Buffer> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let b = g.0.get_mut(&size)?.pop()?;
        g.1 -= size;
        Some(b)
    }

    fn put(&self, size: u64, buffer: wgpu::Buffer) {
        if size > STAGING_MAX_BYTES {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 + size <= STAGING_POOL_BYTES {
            g.1 += size;
            g.0.entry(size).or_default().push(buffer);
        }
    }
}

/// How many bind groups the device keeps at most (`WGPU_HLO_BIND_GROUPS`, 0 disables it).
const DEFAULT_BIND_GROUP_CACHE: usize = 1024;

/// What one binding of a bind group binds: a range of a buffer (offset, size; size 0: the
/// whole buffer), or a texture view (an input read through a texture, `codegen::texture_reads`).
#[derive(Clone, Copy)]
pub(crate) enum BindResource<'a> {
    Buffer(&'a wgpu::Buffer, u64, u64),
    Texture(&'a wgpu::TextureView),
}

/// One binding of a [`BindGroupKey`] (wgpu compares buffers and views by identity).
#[derive(Clone, PartialEq, Eq, Hash)]
enum BoundResource {
    Buffer(wgpu::Buffer, u64, u64),
    Texture(wgpu::TextureView),
}

/// A bind group's identity: its layout and what each binding binds.
type BindGroupKey = (wgpu::BindGroupLayout, Vec<BoundResource>);

/// Bind groups made for executions, reused when the same kernel binds the same buffer ranges
/// again (pooled buffers come back for the next call of the same shapes, so a jitted function
/// called in a loop creates its bind groups once). A bind group holds its buffers: the cache
/// is bounded (least recently used entries go first) and emptied whenever a buffer leaves the
/// pool for good, so it never keeps memory alive that the pool has given up.
struct BindGroupCache {
    map: HashMap<BindGroupKey, (wgpu::BindGroup, u64)>,
    clock: u64,
    limit: usize,
    hits: u64,
    misses: u64,
}

impl BindGroupCache {
    fn new() -> Self {
        let limit = std::env::var("WGPU_HLO_BIND_GROUPS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_BIND_GROUP_CACHE);
        BindGroupCache {
            map: HashMap::new(),
            clock: 0,
            limit,
            hits: 0,
            misses: 0,
        }
    }
}

/// Counters of the device's bind group cache (for tests and tuning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindGroupStats {
    /// Bind groups held now.
    pub cached: usize,
    /// The bound on `cached`.
    pub limit: usize,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Bind groups created.
    pub misses: u64,
}

/// Where the on-disk pipeline cache lives: `$WGPU_HLO_PIPELINE_CACHE_DIR` (empty: none), else
/// `$XDG_CACHE_HOME/wgpu-hlo`, else `$HOME/.cache/wgpu-hlo`.
pub fn pipeline_cache_dir() -> Option<PathBuf> {
    let nonempty = |v: std::ffi::OsString| (!v.is_empty()).then(|| PathBuf::from(v));
    if let Some(d) = std::env::var_os("WGPU_HLO_PIPELINE_CACHE_DIR") {
        return nonempty(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").and_then(nonempty) {
        return Some(d.join("wgpu-hlo"));
    }
    std::env::var_os("HOME")
        .and_then(nonempty)
        .map(|h| h.join(".cache").join("wgpu-hlo"))
}

/// The key of a kernel's pipeline in the device's cache: its WGSL without comments. Comments
/// name the kernel and the values its bindings hold (`// %279 tensor<...>`), so without them
/// the same kernel elsewhere shares one pipeline: in another executable (every jitted
/// function with a matmul of one shape), or in this one (a transformer's layers, whose
/// products differ only in the values they read). CPU drivers compile a pipeline's code at
/// its first dispatch (lavapipe: 0.4-0.9 s for a large product), once per pipeline object.
pub(crate) fn pipeline_key(wgsl: &str) -> String {
    let mut key = String::with_capacity(wgsl.len());
    for line in wgsl.lines() {
        let code = line.split("//").next().unwrap_or("").trim_end();
        if !code.is_empty() {
            key.push_str(code);
            key.push('\n');
        }
    }
    key
}

/// First bytes of our pipeline cache files; a checksum of the driver's data follows, so a
/// corrupt file is ignored instead of reaching the driver.
const PIPELINE_CACHE_MAGIC: &[u8; 8] = b"WHLOPC01";

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A `wgpu::PipelineCache` loaded from and saved to one file per adapter and driver.
struct DiskPipelineCache {
    cache: wgpu::PipelineCache,
    path: PathBuf,
    /// Pipelines were created since the last save.
    dirty: AtomicBool,
    /// Checksum of the data last read or written (unchanged data is not written again:
    /// drivers whose cache keeps nothing, like lavapipe's, cost one small file).
    saved: Mutex<u64>,
}

impl DiskPipelineCache {
    /// The driver's data in `path`, if the file is ours and intact.
    fn read(path: &Path) -> Option<Vec<u8>> {
        let bytes = std::fs::read(path).ok()?;
        let rest = bytes.strip_prefix(PIPELINE_CACHE_MAGIC.as_slice())?;
        let (sum, data) = rest.split_at_checked(8)?;
        let sum = u64::from_le_bytes(sum.try_into().ok()?);
        if fnv64(data) != sum {
            log::debug!("ignoring corrupt pipeline cache {}", path.display());
            return None;
        }
        Some(data.to_vec())
    }

    /// Opens the cache file for `info` in `dir` on a device with `PIPELINE_CACHE`.
    fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo, dir: &Path) -> Option<Self> {
        let key = wgpu::util::pipeline_cache_key(info)?;
        let driver =
            fnv64(format!("{}|{}|{}", info.name, info.driver, info.driver_info).as_bytes());
        let path = dir.join(format!("{key}_{driver:016x}.bin"));
        let data = Self::read(&path);
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        // SAFETY: `data` is what `PipelineCache::get_data` returned for this adapter and driver
        // (our checksum says the file is as we wrote it); wgpu checks its own header (adapter,
        // wgpu version) and with `fallback` starts empty when the data does not fit.
        let cache = unsafe {
            device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                label: Some("wgpu-hlo pipeline cache"),
                data: data.as_deref(),
                fallback: true,
            })
        };
        if let Some(e) = pollster::block_on(scope.pop()) {
            log::debug!("no pipeline cache: {e}");
            return None;
        }
        log::debug!(
            "pipeline cache {} ({} bytes loaded)",
            path.display(),
            data.as_ref().map_or(0, Vec::len)
        );
        Some(DiskPipelineCache {
            cache,
            path,
            dirty: AtomicBool::new(false),
            saved: Mutex::new(data.as_deref().map_or(0, fnv64)),
        })
    }

    /// Writes the cache if pipelines were created since the last write: to a temporary file
    /// in the same directory, renamed over the old one, so readers never see half a file.
    fn save(&self) -> std::io::Result<()> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        let Some(data) = self.cache.get_data() else {
            return Ok(());
        };
        let sum = fnv64(&data);
        if sum == *saved {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = self.path.with_extension(format!(
            "tmp.{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut bytes = PIPELINE_CACHE_MAGIC.to_vec();
        bytes.extend_from_slice(&sum.to_le_bytes());
        bytes.extend_from_slice(&data);
        let written = std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, &self.path));
        match written {
            Ok(()) => *saved = sum,
            Err(_) => {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        written
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.info)
    }
}

impl Device {
    /// Opens the best adapter (see `list_adapters`), requesting the adapter's own limits and
    /// the shader features our dtypes can use, with the on-disk pipeline cache in
    /// `pipeline_cache_dir()`.
    pub fn open() -> Result<Arc<Device>> {
        Self::open_with_pipeline_cache(pipeline_cache_dir().as_deref())
    }

    /// `open`, keeping the driver's pipeline cache in `dir` (none: no cache on disk). Only
    /// adapters with `wgpu::Features::PIPELINE_CACHE` (Vulkan) have one; elsewhere `dir` is
    /// not touched.
    pub fn open_with_pipeline_cache(dir: Option<&Path>) -> Result<Arc<Device>> {
        let inst = instance();
        let adapter = select_adapter(&inst)?;
        let adapter_info = adapter.get_info();
        let info = AdapterDescription::from_info(&adapter_info);
        let mut wanted = wgpu::Features::SHADER_F64
            | wgpu::Features::SHADER_INT64
            | wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            // Per-kernel GPU times (`Executable::execute_profiled`, the dump): requesting the
            // feature costs nothing; queries are only written when profiling is asked for.
            | wgpu::Features::TIMESTAMP_QUERY;
        if dir.is_some() && wgpu::util::pipeline_cache_key(&adapter_info).is_some() {
            wanted |= wgpu::Features::PIPELINE_CACHE;
        }
        let strict_env = super::strict_float::requested();
        let strict_asked =
            super::strict_float::wanted(adapter_info.device_type == wgpu::DeviceType::Cpu);
        if strict_asked && adapter_info.backend == wgpu::Backend::Vulkan {
            wanted |= wgpu::Features::PASSTHROUGH_SHADERS;
        }
        // `WGPU_HLO_SUBGROUPS=0` leaves subgroups off, as on adapters without them, so that
        // their kernels (reductions by trees of barriers, the register-blocked dot) can be
        // tested on any adapter.
        if std::env::var("WGPU_HLO_SUBGROUPS").is_ok_and(|v| v.trim() == "0") {
            wanted &= !wgpu::Features::SUBGROUP;
        }
        // `WGPU_HLO_F64=0` leaves f64 off, as on Metal and many mobile GPUs, so that what such
        // adapters get (f64 programs refused, eigh's QL iteration in f32, svd by Jacobi) can be
        // tested on any adapter.
        if std::env::var("WGPU_HLO_F64").is_ok_and(|v| v.trim() == "0") {
            wanted &= !wgpu::Features::SHADER_F64;
        }
        // Kernels that keep a matrix in a storage texture they read and write
        // (`codegen::texture_reads::ScratchTexture`) need the adapter's own format features:
        // WebGPU's read-write storage formats are the one-channel ones.
        let rw_textures = adapter
            .get_texture_format_features(wgpu::TextureFormat::Rgba32Float)
            .flags
            .contains(wgpu::TextureFormatFeatureFlags::STORAGE_READ_WRITE)
            && !std::env::var("WGPU_HLO_STORAGE_TEXTURES").is_ok_and(|v| v.trim() == "0");
        if rw_textures {
            wanted |= wgpu::Features::TEXTURE_ADAPTER_SPECIFIC_FORMAT_FEATURES;
        }
        let features = adapter.features() & wanted;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("wgpu-hlo"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::unavailable(format!("cannot open a device on {info}: {e}")))?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let errs = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            log::error!("wgpu error: {e}");
            let mut g = errs.lock().unwrap_or_else(|p| p.into_inner());
            if g.len() < 16 {
                g.push(e.to_string());
            }
        }));
        let lost = Arc::new(Mutex::new(None));
        let l = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            log::error!("device lost ({reason:?}): {msg}");
            *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{reason:?}: {msg}"));
        });
        let caps = Capabilities {
            f64: features.contains(wgpu::Features::SHADER_F64),
            i64: features.contains(wgpu::Features::SHADER_INT64),
            f16: features.contains(wgpu::Features::SHADER_F16),
            subgroup: features.contains(wgpu::Features::SUBGROUP),
            subgroup_size: if adapter_info.subgroup_min_size == adapter_info.subgroup_max_size {
                adapter_info.subgroup_min_size
            } else {
                0
            },
            storage_textures: rw_textures
                && features.contains(wgpu::Features::TEXTURE_ADAPTER_SPECIFIC_FORMAT_FEATURES),
        };
        let disk_cache = match dir {
            Some(dir) if features.contains(wgpu::Features::PIPELINE_CACHE) => {
                DiskPipelineCache::open(&device, &adapter_info, dir)
            }
            _ => None,
        };
        let strict_float = strict_asked && features.contains(wgpu::Features::PASSTHROUGH_SHADERS);
        if strict_env == Some(true) && !strict_float {
            log::warn!("WGPU_HLO_STRICT_FLOAT: {info} cannot pass SPIR-V through; kernels stay as they are");
        }
        let warmer = super::warm::Warmer::new(&adapter, features, &limits, strict_float);
        let poller = Poller::start(
            device.clone(),
            &info.name,
            adapter_info.device_type == wgpu::DeviceType::Cpu,
        )?;
        log::info!(
            "opened {info} with {caps:?}, pipeline cache: {}",
            disk_cache
                .as_ref()
                .map_or("none".into(), |c| c.path.display().to_string())
        );
        Ok(Arc::new(Device {
            device,
            queue,
            _instance: inst,
            _adapter: adapter,
            info,
            limits,
            caps,
            poller,
            errors,
            lost,
            bytes_in_use: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            num_allocs: AtomicU64::new(0),
            copied_bytes: AtomicU64::new(0),
            pool: Pool::new(adapter_info.device_type == wgpu::DeviceType::DiscreteGpu),
            pipelines: Mutex::new(HashMap::new()),
            pipelines_created: AtomicU64::new(0),
            input_textures: Mutex::new(HashMap::new()),
            disk_cache,
            strict_float,
            bind_groups: Mutex::new(BindGroupCache::new()),
            staging: Arc::new(StagingPool::default()),
            unsubmitted_upload_bytes: AtomicU64::new(0),
            warmer,
        }))
    }

    /// The adapter this device runs on.
    pub fn info(&self) -> &AdapterDescription {
        &self.info
    }

    /// The limits granted (the adapter's own).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// Shader capabilities.
    pub fn caps(&self) -> Capabilities {
        self.caps
    }

    /// True when kernels pass through `strict_float` (GPU adapters by default,
    /// `WGPU_HLO_STRICT_FLOAT=1` on any, where the adapter takes SPIR-V as given): every float
    /// operation decorated NoContraction.
    pub fn strict_float(&self) -> bool {
        self.strict_float
    }

    /// True when the device can time kernels (`wgpu::Features::TIMESTAMP_QUERY`).
    pub fn has_timestamps(&self) -> bool {
        self.device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// Nanoseconds per timestamp tick.
    pub(crate) fn timestamp_period(&self) -> f64 {
        f64::from(self.queue.get_timestamp_period())
    }

    /// The bind group of `layout` over `entries`, binding `i` from `entries[i]`, from the
    /// cache when it was made before.
    pub(crate) fn bind_group(
        &self,
        label: &str,
        layout: &wgpu::BindGroupLayout,
        entries: &[BindResource],
    ) -> wgpu::BindGroup {
        let make = || {
            let list: Vec<wgpu::BindGroupEntry> = entries
                .iter()
                .enumerate()
                .map(|(i, &r)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: match r {
                        BindResource::Buffer(buffer, offset, size) => {
                            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer,
                                offset,
                                size: std::num::NonZeroU64::new(size),
                            })
                        }
                        BindResource::Texture(view) => wgpu::BindingResource::TextureView(view),
                    },
                })
                .collect();
            self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(label),
                layout,
                entries: &list,
            })
        };
        let mut cache = self.bind_groups.lock().unwrap_or_else(|p| p.into_inner());
        if cache.limit == 0 {
            cache.misses += 1;
            return make();
        }
        let key: BindGroupKey = (
            layout.clone(),
            entries
                .iter()
                .map(|&r| match r {
                    BindResource::Buffer(b, o, s) => BoundResource::Buffer(b.clone(), o, s),
                    BindResource::Texture(v) => BoundResource::Texture(v.clone()),
                })
                .collect(),
        );
        cache.clock += 1;
        let now = cache.clock;
        if let Some((group, used)) = cache.map.get_mut(&key) {
            *used = now;
            let group = group.clone();
            cache.hits += 1;
            return group;
        }
        cache.misses += 1;
        if cache.map.len() >= cache.limit {
            // Drop the least recently used quarter at once, so a full cache is not scanned on
            // every miss.
            let mut ages: Vec<u64> = cache.map.values().map(|(_, u)| *u).collect();
            ages.sort_unstable();
            let cut = ages[(ages.len() / 4).min(ages.len() - 1)];
            cache.map.retain(|_, (_, u)| *u > cut);
        }
        let group = make();
        cache.map.insert(key, (group.clone(), now));
        group
    }

    /// The texture an input of `input`'s extent is copied into before each launch that reads
    /// it through a texture (`codegen::texture_reads`), for the `slot`-th input of that extent
    /// of a kernel. One per extent and slot for the whole device, not one per executable:
    /// a texture only carries data from its copy to the dispatch recorded right after it, and
    /// the single queue orders every copy after the reads of earlier dispatches, so kernels of
    /// any executable, run concurrently or not, can take turns in it. A model's textures then
    /// cost its largest kernel's inputs, not a second copy of all its activations.
    pub(crate) fn input_texture(
        &self,
        input: &TextureInput,
        slot: usize,
        label: &str,
    ) -> Result<Arc<InputTexture>> {
        let (width, height) = input.extent();
        self.texture((width, height), slot, false, label)
    }

    /// A storage texture of `width` x `height` `rgba32float` texels that kernels read and
    /// write within a launch (`codegen::texture_reads::ScratchTexture`), for the `slot`-th
    /// of that extent of a kernel: shared device-wide like [`Device::input_texture`]'s, since
    /// no launch expects what an earlier one left in it.
    pub(crate) fn scratch_texture(
        &self,
        extent: (u32, u32),
        slot: usize,
        label: &str,
    ) -> Result<Arc<InputTexture>> {
        if !self.caps.storage_textures {
            return Err(Error::internal(format!(
                "{label}: a read-write storage texture on {}, which has none",
                self.info.name
            )));
        }
        self.texture(extent, slot, true, label)
    }

    /// An input texture (RGBA32Uint, sampled, filled by copies) or, with `storage`, a
    /// scratch texture (RGBA32Float, read-write storage), from the cache where one lives.
    fn texture(
        &self,
        (width, height): (u32, u32),
        slot: usize,
        storage: bool,
        label: &str,
    ) -> Result<Arc<InputTexture>> {
        let max = self.limits.max_texture_dimension_2d;
        if width == 0 || height == 0 || width > max || height > max {
            return Err(Error::internal(format!(
                "{label}: a texture of {width} x {height} texels (the adapter allows {max})"
            )));
        }
        let mut cache = self
            .input_textures
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(t) = cache
            .get(&(width, height, slot, storage))
            .and_then(Weak::upgrade)
        {
            return Ok(t);
        }
        cache.retain(|_, t| t.strong_count() > 0);
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let texture = self.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: wgpu::Extent3d {
                width,
                height,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: texture_format(storage),
            usage: if storage {
                wgpu::TextureUsages::STORAGE_BINDING
            } else {
                wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST
            },
            view_formats: &[],
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::resource_exhausted(format!(
                "{label}: a texture of {width} x {height} texels on {}: {e}",
                self.info.name
            )));
        }
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        let t = Arc::new(InputTexture {
            texture,
            view,
            bytes: u64::from(width) * u64::from(height) * TextureInput::TEXEL_BYTES,
        });
        cache.insert((width, height, slot, storage), Arc::downgrade(&t));
        Ok(t)
    }

    /// Bytes of the input textures some executable (or cached bind group) still holds.
    fn texture_bytes(&self) -> u64 {
        let cache = self
            .input_textures
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        cache
            .values()
            .filter_map(Weak::upgrade)
            .map(|t| t.bytes)
            .sum()
    }

    /// Forgets every cached bind group (their buffers may then be freed).
    pub(crate) fn clear_bind_groups(&self) {
        let mut cache = self.bind_groups.lock().unwrap_or_else(|p| p.into_inner());
        cache.map.clear();
    }

    /// Forgets the cached bind groups that bind any of `buffers`.
    pub(crate) fn forget_bind_groups(&self, buffers: &[wgpu::Buffer]) {
        let mut cache = self.bind_groups.lock().unwrap_or_else(|p| p.into_inner());
        cache.map.retain(|(_, bound), _| {
            !bound
                .iter()
                .any(|r| matches!(r, BoundResource::Buffer(b, _, _) if buffers.contains(b)))
        });
    }

    /// Pipelines this device created (kernels that found theirs in its cache not counted).
    pub fn pipelines_created(&self) -> u64 {
        self.pipelines_created.load(Ordering::Relaxed)
    }

    /// Pipelines compiled at load time so far (`runtime::warm`); all zero where the device
    /// does not warm (GPU adapters, one core, `WGPU_HLO_WARM=0`, Mesa's cache off).
    pub fn warm_stats(&self) -> super::WarmStats {
        self.warmer.as_ref().map(|w| w.stats()).unwrap_or_default()
    }

    /// Compiles the pipelines of `items` that a CPU driver would compile at their first
    /// dispatch now, on several cores (see `runtime::warm`); does nothing where that does not
    /// pay. Never fails: what is not warmed compiles at its first dispatch.
    pub(crate) fn warm(&self, items: &[super::warm::Item]) {
        // Its waits would hold the poll they need inside a device call (a load from a
        // framework callback run there).
        if super::poller::inside_device_call() {
            return;
        }
        if let Some(w) = &self.warmer {
            w.warm(items);
        }
    }

    /// Counters of the bind group cache.
    pub fn bind_group_stats(&self) -> BindGroupStats {
        let cache = self.bind_groups.lock().unwrap_or_else(|p| p.into_inner());
        BindGroupStats {
            cached: cache.map.len(),
            limit: cache.limit,
            hits: cache.hits,
            misses: cache.misses,
        }
    }

    /// Counts `bytes` of a copy-on-write copy (see [`MemoryStats::copied_bytes`]).
    pub(crate) fn count_copy(&self, bytes: u64) {
        self.copied_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Allocation statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        MemoryStats {
            bytes_in_use: self.bytes_in_use.load(Ordering::Relaxed),
            peak_bytes_in_use: self.peak_bytes.load(Ordering::Relaxed),
            num_allocs: self.num_allocs.load(Ordering::Relaxed),
            largest_alloc_size: self.limits.max_buffer_size,
            pooled_bytes: self.pool.bytes(),
            copied_bytes: self.copied_bytes.load(Ordering::Relaxed),
            texture_bytes: self.texture_bytes(),
        }
    }

    /// UNAVAILABLE once the device was lost or its completion tracking failed (every later
    /// call gets it); INTERNAL for a wgpu error no error scope caught since the last check.
    pub fn check_health(&self) -> Result<()> {
        self.check_usable()?;
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if !g.is_empty() {
            let msg = g.join("; ");
            g.clear();
            return Err(Error::internal(format!(
                "wgpu error on {}: {msg}",
                self.info
            )));
        }
        Ok(())
    }

    /// Destroys the wgpu device, as a driver reset or an unplugged GPU would: the device is
    /// lost, pending work fails and every later call is UNAVAILABLE. For tests of that path.
    #[doc(hidden)]
    pub fn destroy(&self) {
        self.device.destroy();
    }

    /// UNAVAILABLE once the device was lost or its completion tracking failed.
    pub fn check_usable(&self) -> Result<()> {
        if let Some(msg) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("the device on {} was lost ({msg})", self.info),
            ));
        }
        if let Some(e) = self.poller.broken() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "the device is unusable after an earlier failure: {}",
                    e.message
                ),
            ));
        }
        Ok(())
    }

    /// Runs `f` inside wgpu error scopes and turns what they catch into `f`'s error:
    /// out-of-memory → RESOURCE_EXHAUSTED, validation and internal errors → INTERNAL, all
    /// naming `what` and the adapter. Scopes are per thread, so concurrent calls each get
    /// their own errors.
    pub(crate) fn scoped<T>(&self, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let r = f();
        let internal = pollster::block_on(internal.pop());
        let validation = pollster::block_on(validation.pop());
        let oom = pollster::block_on(oom.pop());
        if let Some(e) = oom {
            return Err(Error::resource_exhausted(format!(
                "{what}: out of memory on {}: {e}",
                self.info.name
            )));
        }
        if let Some(e) = validation.or(internal) {
            return Err(Error::internal(format!(
                "{what}: wgpu rejected the work on {}: {e}",
                self.info.name
            )));
        }
        r
    }

    /// A storage buffer of at least `size` bytes (rounded up to 16, at least 16: whole
    /// RGBA32 texels for inputs read through textures): a pooled one of that size when there
    /// is one, else a new one.
    pub(crate) fn alloc(self: &Arc<Self>, size: u64, label: &str) -> Result<GpuBuffer> {
        self.alloc_preferring(size, label, &[])
    }

    /// [`Self::alloc`], taking from the pool a buffer whose key ([`pool::buffer_key`]) is in
    /// `prefer` where one is free.
    pub(crate) fn alloc_preferring(
        self: &Arc<Self>,
        size: u64,
        label: &str,
        prefer: &[u64],
    ) -> Result<GpuBuffer> {
        let size = allocated_size(size);
        if size > self.limits.max_buffer_size {
            return Err(Error::resource_exhausted(format!(
                "buffer of {size} bytes exceeds the largest buffer {} allows ({} bytes)",
                self.info.name, self.limits.max_buffer_size
            )));
        }
        let (key, buffer) = match self.pool.take(size, prefer) {
            Some(b) => b,
            None => {
                let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
                let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                if let Some(e) = pollster::block_on(scope.pop()) {
                    return Err(Error::resource_exhausted(format!(
                        "allocating {size} bytes on {}: {e}",
                        self.info.name
                    )));
                }
                self.num_allocs.fetch_add(1, Ordering::Relaxed);
                (super::pool::buffer_key(&buffer), buffer)
            }
        };
        let now = self.bytes_in_use.fetch_add(size, Ordering::Relaxed) + size;
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        Ok(GpuBuffer {
            buffer,
            size,
            key,
            device: self.clone(),
        })
    }

    /// Submits command buffers and returns an event that completes when the GPU has run
    /// them; `what` names the work in errors (`execution of jit_f`).
    pub(crate) fn submit(&self, cmds: Vec<wgpu::CommandBuffer>, what: &str) -> Event {
        self.submit_spinning(cmds, what, Duration::ZERO)
    }

    /// `submit`, then polls for the work's completion on this thread for up to `spin` (capped
    /// by `spin_limit`): the event comes back completed if the work finished meanwhile.
    pub(crate) fn submit_spinning(
        &self,
        cmds: Vec<wgpu::CommandBuffer>,
        what: &str,
        spin: Duration,
    ) -> Event {
        self.submit_spinning_then(cmds, what, spin, |_| {})
    }

    /// `submit_spinning`, running `after` with the submission's event right after the
    /// submission and before the spin (to map a read-back of the work, see
    /// [`Self::map_reads`] without waking).
    pub(crate) fn submit_spinning_then(
        &self,
        cmds: Vec<wgpu::CommandBuffer>,
        what: &str,
        spin: Duration,
        after: impl FnOnce(&Event),
    ) -> Event {
        // Every submission carries the uploads written before it.
        self.unsubmitted_upload_bytes.store(0, Ordering::Relaxed);
        self.poller.submit(&self.queue, cmds, what, spin, after)
    }

    /// The longest a submission may spin for its completion: `WGPU_HLO_SPIN_US`
    /// (microseconds) if set, else 250 µs on a CPU adapter, where a wake-up costs more than
    /// a small kernel runs, and none on others.
    pub(crate) fn spin_limit(&self) -> Duration {
        self.poller.spin_limit()
    }

    /// On a CPU adapter, polls without blocking on this thread until `done()` or the spin
    /// limit has passed (`Poller::spin_until`); at once false elsewhere.
    pub(crate) fn spin_until(&self, done: &mut dyn FnMut() -> bool) -> bool {
        let limit = self.poller.spin_limit();
        !limit.is_zero() && self.poller.spin_until(limit, done)
    }

    /// Copies `len` bytes of `src` into a new read-back buffer, submits, and hands the bytes
    /// to `done` once the device has run the copy (on the poller thread, or on a thread that
    /// submits). Errors — a wgpu error, a failed map, a lost device, the deadline — reach
    /// `done` too.
    pub(crate) fn read_buffer(
        &self,
        src: &wgpu::Buffer,
        len: usize,
        what: &str,
        done: impl FnOnce(Result<Vec<u8>>) + Send + 'static,
    ) {
        self.read_buffer_with(src, len, what, false, done)
    }

    /// [`Self::read_buffer`] for a caller about to wait for the bytes, of a buffer whose
    /// producer has finished: on a CPU adapter, for a read-back of at most
    /// [`SPIN_READ_MAX_BYTES`], this thread then polls for the copy itself for up to the spin
    /// limit, and `done` runs on it, with no polling thread to wake (lavapipe: `jit(x + 1)`
    /// of 64 floats and its read-back, see the commit).
    pub(crate) fn read_buffer_spinning(
        &self,
        src: &wgpu::Buffer,
        len: usize,
        what: &str,
        done: impl FnOnce(Result<Vec<u8>>) + Send + 'static,
    ) {
        self.read_buffer_with(src, len, what, true, done)
    }

    fn read_buffer_with(
        &self,
        src: &wgpu::Buffer,
        len: usize,
        what: &str,
        spin: bool,
        done: impl FnOnce(Result<Vec<u8>>) + Send + 'static,
    ) {
        // One read staged in an encoder of its own: the copy and the map as for the reads
        // an execution stages in its own encoder.
        let recorded = self.scoped(what, || {
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            let staged = self.stage_reads(&mut enc, &[(src, len)], what)?;
            Ok((staged, enc.finish()))
        });
        let (staged, cmd) = match recorded {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        let done = move |r: Result<Vec<Vec<u8>>>| {
            done(r.and_then(|mut bytes| {
                bytes
                    .pop()
                    .ok_or_else(|| Error::internal("read-back shorter than the tensor"))
            }))
        };
        if !(spin && len as u64 <= SPIN_READ_MAX_BYTES && !self.spin_limit().is_zero()) {
            // Queued for the polling threads before the map wakes one (a thread woken for a
            // map alone polls, then sleeps with the turn).
            let submitted = self.submit(vec![cmd], what);
            self.map_reads(staged, &submitted, what, true, done);
            return;
        }
        // The map starts before this thread spins for the copy, so the poll that sees it
        // finish maps the bytes too (`map_reads`).
        let mut mapped = None;
        let submitted = self.submit_spinning_then(vec![cmd], what, self.spin_limit(), |e| {
            mapped = Some(self.map_reads(staged, e, what, false, done));
        });
        if let (true, Some(mapped)) = (submitted.is_ready(), mapped) {
            self.spin_until(&mut || mapped.load(Ordering::Acquire));
        }
    }

    /// Records copies of the first `len` bytes of each of `srcs` into one read-back buffer,
    /// in `enc` after the work already there: where the bytes come from is fixed by the
    /// position in the recording, so work recorded after the copies may change the sources.
    /// [`Self::start_reads`] or [`Self::map_reads`] take them once `enc` is submitted.
    pub(crate) fn stage_reads(
        &self,
        enc: &mut wgpu::CommandEncoder,
        srcs: &[(&wgpu::Buffer, usize)],
        what: &str,
    ) -> Result<StagedReads> {
        // Each read at a 4-byte aligned offset (COPY_BUFFER_ALIGNMENT), at least 4 bytes.
        let mut at = Vec::with_capacity(srcs.len());
        let mut total = 0u64;
        for &(_, len) in srcs {
            let copy_len = (len as u64).max(4).next_multiple_of(4);
            at.push((total, len));
            total += copy_len;
        }
        let total = total.max(4);
        let buffer = self.scoped(what, || {
            Ok(match self.staging.take(total) {
                Some(b) => b,
                None => self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("read-back"),
                    size: total,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
            })
        })?;
        for (&(src, len), &(offset, _)) in srcs.iter().zip(&at) {
            let copy_len = (len as u64).max(4).next_multiple_of(4);
            enc.copy_buffer_to_buffer(src, 0, &buffer, offset, copy_len);
        }
        Ok(StagedReads { buffer, total, at })
    }

    /// Starts the map of reads staged by [`Self::stage_reads`] in work submitted as
    /// `submitted`, for the calling thread that needs the bytes now (a loop's predicate, a
    /// branch's selector, a trip count): called in the `after` of
    /// [`Self::submit_spinning_then`], so the poll that sees the work finish maps them too
    /// (see [`Self::map_reads`]); [`PendingReads::wait`] then has the bytes at once.
    pub(crate) fn start_reads(
        &self,
        staged: StagedReads,
        submitted: &Event,
        what: &str,
    ) -> PendingReads {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<Vec<u8>>>>(1);
        let mapped = self.map_reads(staged, submitted, what, false, move |r| {
            let _ = tx.try_send(r);
        });
        PendingReads {
            rx,
            mapped,
            what: what.to_string(),
        }
    }

    /// Hands the bytes of reads staged by [`Self::stage_reads`], in work submitted as
    /// `submitted`, to `done` once mapped (on whichever thread polls then), or the error of
    /// the submission or the map. Returns a flag set once `done` has run. With `wake`, a
    /// polling thread is woken for the map; without, the map is started in the `after` of
    /// [`Self::submit_spinning_then`], before the submitting thread spins for its work, so
    /// the poll that sees the work finish maps the bytes too and no polling thread wakes
    /// (`submit` wakes one if the spin did not see the map finish). Started after the spin,
    /// as before, the map needed a poll of its own: a polling thread woke for it while the
    /// caller, about to read the bytes, spun for them too (`np.asarray(jit(f)(x))` 135 µs
    /// against 72 µs for the call).
    pub(crate) fn map_reads(
        &self,
        staged: StagedReads,
        submitted: &Event,
        what: &str,
        wake: bool,
        done: impl FnOnce(Result<Vec<Vec<u8>>>) + Send + 'static,
    ) -> Arc<std::sync::atomic::AtomicBool> {
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = Arc::new(Mutex::new(Some(done)));
        let answer = {
            let (done, finished) = (done.clone(), finished.clone());
            move |r: Result<Vec<Vec<u8>>>| {
                let f = done.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(f) = f {
                    f(r);
                    finished.store(true, std::sync::atomic::Ordering::Release);
                }
            }
        };
        if let Some(e) = submitted.error() {
            answer(Err(e));
            return finished;
        }
        // The submission failing (lost device, deadline) answers too, should wgpu never call
        // the map callback.
        let failed = answer.clone();
        submitted.on_ready(move |r| {
            if let Err(e) = r {
                failed(Err(e));
            }
        });
        let StagedReads { buffer, total, at } = staged;
        if wake {
            self.poller.map_started();
        } else {
            self.poller.map_started_quietly();
        }
        let poller = self.poller.clone();
        let pool = self.staging.clone();
        let what = format!("{what} on {}", self.info.name);
        let b = buffer.clone();
        buffer.map_async(wgpu::MapMode::Read, .., move |r| {
            poller.map_finished();
            if let Err(e) = r {
                // A map that failed: the buffer is dropped, not reused.
                return answer(Err(Error::internal(format!("{what}: reading back: {e}"))));
            }
            let data = b.slice(..).get_mapped_range().map(|v| {
                at.iter()
                    .map(|&(offset, len)| {
                        v.get(offset as usize..offset as usize + len)
                            .map(<[u8]>::to_vec)
                    })
                    .collect::<Option<Vec<_>>>()
            });
            b.unmap();
            pool.put(total, b);
            answer(match data {
                Ok(Some(v)) => Ok(v),
                Ok(None) => Err(Error::internal(format!(
                    "{what}: read-back shorter than the tensor"
                ))),
                Err(e) => Err(Error::internal(format!("{what}: mapping a read-back: {e}"))),
            });
        });
        finished
    }

    /// The raw-wgpu floor: the median, over `runs` round trips, of one empty compute dispatch
    /// and a copy of 4 bytes into a mappable buffer, submitted, mapped and read on this
    /// device — what any program costs through wgpu alone, with nothing of the runtime
    /// (no allocation, error scope or bind group per call). Completion comes from the
    /// device's poller, as for every submission (wgpu 30 must not be polled from two threads).
    /// Milliseconds.
    pub fn raw_floor_ms(&self, runs: usize) -> Result<f64> {
        self.check_usable()?;
        let runs = runs.clamp(1, 100_000);
        let what = "the raw-wgpu floor";
        let (pipeline, src, staging) = self.scoped(what, || {
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("floor"),
                    source: wgpu::ShaderSource::Wgsl(
                        "@compute @workgroup_size(1) fn main() {}".into(),
                    ),
                });
            let pipeline = self
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("floor"),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
            let buffer = |usage| {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("floor"),
                    size: 4,
                    usage,
                    mapped_at_creation: false,
                })
            };
            let src = buffer(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC);
            let staging = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
            Ok((pipeline, src, staging))
        })?;
        let limit = super::event::wait_timeout();
        let mut times = Vec::with_capacity(runs);
        // A few round trips first: the driver's first submissions cost more.
        for i in 0..runs + 3 {
            let start = std::time::Instant::now();
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                pass.set_pipeline(&pipeline);
                pass.dispatch_workgroups(1, 1, 1);
            }
            enc.copy_buffer_to_buffer(&src, 0, &staging, 0, 4);
            let submitted = self.submit(vec![enc.finish()], what);
            if let Some(e) = submitted.error() {
                return Err(e);
            }
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            self.poller.map_started();
            let poller = self.poller.clone();
            staging.map_async(wgpu::MapMode::Read, .., move |r| {
                poller.map_finished();
                let _ = tx.send(r);
            });
            match rx.recv_timeout(limit) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(Error::internal(format!("{what}: map failed: {e}"))),
                Err(_) => return Err(super::event::deadline_error(what, limit)),
            }
            let word = staging
                .slice(..)
                .get_mapped_range()
                .map(|v| v.len())
                .map_err(|e| Error::internal(format!("{what}: {e}")))?;
            staging.unmap();
            if word != 4 {
                return Err(Error::internal(format!(
                    "{what}: mapped {word} bytes, not 4"
                )));
            }
            if i >= 3 {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        self.check_health()?;
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }

    /// The device's own copy bandwidth: `copy_buffer_to_buffer` of `bytes` (rounded down to
    /// a multiple of 4, at most the adapter's largest buffer and 1 GiB) between two device
    /// buffers, `runs` copies (at least 1) in one submission after one warm-up submission, in
    /// GB/s of bytes read plus bytes written (so it compares with a kernel's bytes in plus
    /// bytes out). The ceiling a memory-bound kernel is measured against.
    pub fn copy_bandwidth_gbs(&self, bytes: u64, runs: usize) -> Result<f64> {
        self.check_usable()?;
        let bytes = bytes.min(self.limits.max_buffer_size).clamp(4, 1 << 30) & !3;
        let runs = runs.clamp(1, 1000);
        let what = "the copy bandwidth measurement";
        let (a, b) = self.scoped(what, || {
            let buffer = || {
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("copy bandwidth"),
                    size: bytes,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            };
            Ok((buffer(), buffer()))
        })?;
        let mut elapsed = 0.0;
        for (i, n) in [1, runs].into_iter().enumerate() {
            let start = std::time::Instant::now();
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            for k in 0..n {
                let (src, dst) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
                enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
            }
            self.submit(vec![enc.finish()], what).wait()?;
            if i == 1 {
                elapsed = start.elapsed().as_secs_f64();
            }
        }
        self.check_health()?;
        Ok(2.0 * bytes as f64 * runs as f64 / elapsed.max(1e-9) / 1e9)
    }

    /// The compute pipeline for a WGSL module, created once per distinct source text.
    pub(crate) fn pipeline(&self, wgsl: &str, label: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = pipeline_key(wgsl);
        {
            let mut cache = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(p) = cache.get(&key).and_then(Weak::upgrade) {
                return Ok(p);
            }
            cache.retain(|_, p| p.strong_count() > 0);
        }
        // Created without holding the cache's lock, so that executables' kernels compile on
        // several threads (two threads creating one text both succeed; the later one is kept).
        let pipeline = create_pipeline(
            &self.device,
            self.strict_float,
            self.disk_cache.as_ref().map(|c| &c.cache),
            wgsl,
            label,
            &self.info.name,
        )?;
        let p = Arc::new(pipeline);
        self.pipelines_created.fetch_add(1, Ordering::Relaxed);
        self.pipelines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::downgrade(&p));
        if let Some(c) = &self.disk_cache {
            c.dirty.store(true, Ordering::Release);
        }
        Ok(p)
    }

    /// The file of the on-disk pipeline cache, when this device has one.
    pub fn pipeline_cache_file(&self) -> Option<&Path> {
        self.disk_cache.as_ref().map(|c| c.path.as_path())
    }

    /// Writes the pipeline cache to disk if pipelines were created since the last write
    /// (executables call this once loaded). A failure is logged, never an error: the cache
    /// only saves time.
    pub fn save_pipeline_cache(&self) {
        if let Some(c) = &self.disk_cache {
            if let Err(e) = c.save() {
                log::debug!("writing the pipeline cache {}: {e}", c.path.display());
            }
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.save_pipeline_cache();
        self.poller.shutdown();
    }
}

/// A wgpu storage buffer whose size is counted in the device's memory statistics. Dropping
/// it hands the buffer to the device's pool: whoever records work on a buffer holds it until
/// that work is submitted, and the single queue orders every later use after that work.
pub(crate) struct GpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) size: u64,
    /// The pool's key of `buffer` (`pool::buffer_key`), computed once at its creation.
    pub(crate) key: u64,
    device: Arc<Device>,
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.device
            .bytes_in_use
            .fetch_sub(self.size, Ordering::Relaxed);
        // A `wgpu::Buffer` is a handle: the pool's clone keeps the buffer, ours goes.
        let released = self
            .device
            .pool
            .put(self.size, self.key, self.buffer.clone());
        if !released.is_empty() {
            // Buffers given up: cached bind groups must not keep them alive (only theirs go:
            // clearing every cached bind group on each release made programs that free
            // buffers while the pool is full recreate all of theirs on every call).
            self.device.forget_bind_groups(&released);
            drop(released);
            self.device.poller.sweep();
        }
    }
}

/// The size of the buffer [`Device::alloc`] gives for a request of `size` bytes: rounded up
/// to 16, at least 16.
pub(crate) fn allocated_size(size: u64) -> u64 {
    size.max(16).next_multiple_of(16)
}

/// Creates the compute pipeline of a WGSL module on `device` (through `strict_float` when
/// `strict`), turning validation errors and translator panics into errors that name the
/// kernel and the adapter.
pub(crate) fn create_pipeline(
    device: &wgpu::Device,
    strict: bool,
    cache: Option<&wgpu::PipelineCache>,
    wgsl: &str,
    label: &str,
    adapter: &str,
) -> Result<wgpu::ComputePipeline> {
    // naga's backends panic on a few constructs its validator lets through (e.g. 64-bit
    // bit counts): turn that into an error instead of taking the process down.
    let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let strict = if strict {
            Some(super::strict_float::translate(wgsl, label)?)
        } else {
            None
        };
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let (module, layout) = match &strict {
            None => (
                device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(label),
                    // The module the compiler parsed and validated from this very text,
                    // where it still has it: wgpu need not parse it again.
                    source: match crate::codegen::kernel::parsed_module(wgsl) {
                        Some(m) => wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(m)),
                        None => wgpu::ShaderSource::Wgsl(wgsl.into()),
                    },
                }),
                None,
            ),
            Some(k) => {
                log::debug!(
                    "kernel {label}: {} float operations decorated NoContraction",
                    k.decorated
                );
                // SAFETY: naga wrote the module from WGSL its validator accepted; only
                // NoContraction decorations were added (`strict_float`).
                let module = unsafe {
                    device.create_shader_module_passthrough(
                        wgpu::ShaderModuleDescriptorPassthrough {
                            label: Some(label),
                            entry_points: std::borrow::Cow::Owned(vec![
                                wgpu::PassthroughShaderEntryPoint {
                                    name: "main".into(),
                                    workgroup_size: k.workgroup_size,
                                },
                            ]),
                            spirv: Some(std::borrow::Cow::Borrowed(&k.words)),
                            ..Default::default()
                        },
                    )
                };
                let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(label),
                    entries: &k.entries,
                });
                let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some(label),
                    bind_group_layouts: &[Some(&group)],
                    immediate_size: 0,
                });
                (module, Some(layout))
            }
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: layout.as_ref(),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache,
        });
        Ok((pipeline, pollster::block_on(scope.pop())))
    }));
    let pipeline = match created {
        Ok(Err(e)) => return Err(e),
        Ok(Ok((_, Some(e)))) => {
            return Err(Error::internal(format!(
                "kernel {label}: pipeline creation failed on {adapter}: {e}"
            )))
        }
        Ok(Ok((p, None))) => p,
        Err(panic) => {
            let msg = crate::error::panic_message(panic.as_ref());
            return Err(Error::internal(format!(
                "kernel {label}: the shader translator panicked on {adapter}: {msg}"
            )));
        }
    };
    Ok(pipeline)
}
