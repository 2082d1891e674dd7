//! Adapter selection and the device: one wgpu adapter, device and queue, the adapter's own
//! limits and the features our dtypes need, a poller thread that drives completion callbacks,
//! allocation accounting and the pipeline cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::event::Event;
use crate::error::{Error, Result};

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
}

/// Shader capabilities that decide how dtypes are lowered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `SHADER_F64`: native f64.
    pub f64: bool,
    /// `SHADER_INT64`: native i64/u64.
    pub i64: bool,
    /// `SHADER_F16`: native f16 arithmetic.
    pub f16: bool,
    /// `SUBGROUP` operations.
    pub subgroup: bool,
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
        .map(|a| AdapterDescription::from_info(&a.get_info()))
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

/// Tracks outstanding asynchronous work so the poller thread polls only while there is some.
struct Poller {
    pending: Mutex<usize>,
    cv: Condvar,
    shutdown: AtomicBool,
}

impl Poller {
    fn begin(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *p += 1;
        self.cv.notify_all();
    }
    fn end(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *p = p.saturating_sub(1);
    }
    fn run(self: Arc<Self>, device: wgpu::Device) {
        loop {
            {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                while *p == 0 && !self.shutdown.load(Ordering::Acquire) {
                    p = self.cv.wait(p).unwrap_or_else(|e| e.into_inner());
                }
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            let r = device.poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(Duration::from_millis(50)),
            });
            if let Err(e) = r {
                if !matches!(e, wgpu::PollError::Timeout) {
                    log::error!("device poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
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
    lost: Arc<AtomicBool>,
    bytes_in_use: AtomicU64,
    peak_bytes: AtomicU64,
    num_allocs: AtomicU64,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.info)
    }
}

impl Device {
    /// Opens the best adapter (see `list_adapters`), requesting the adapter's own limits and
    /// the shader features our dtypes can use.
    pub fn open() -> Result<Arc<Device>> {
        let inst = instance();
        let adapter = select_adapter(&inst)?;
        let info = AdapterDescription::from_info(&adapter.get_info());
        let wanted = wgpu::Features::SHADER_F64
            | wgpu::Features::SHADER_INT64
            | wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP;
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
        let lost = Arc::new(AtomicBool::new(false));
        let l = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            log::error!("device lost ({reason:?}): {msg}");
            l.store(true, Ordering::Release);
        });
        let caps = Capabilities {
            f64: features.contains(wgpu::Features::SHADER_F64),
            i64: features.contains(wgpu::Features::SHADER_INT64),
            f16: features.contains(wgpu::Features::SHADER_F16),
            subgroup: features.contains(wgpu::Features::SUBGROUP),
        };
        let poller = Arc::new(Poller {
            pending: Mutex::new(0),
            cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let p = poller.clone();
        let d = device.clone();
        std::thread::Builder::new()
            .name("wgpu-hlo-poller".into())
            .spawn(move || p.run(d))
            .map_err(|e| Error::internal(format!("cannot start the poller thread: {e}")))?;
        log::info!("opened {info} with {caps:?}");
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
            pipelines: Mutex::new(HashMap::new()),
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

    /// Allocation statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        MemoryStats {
            bytes_in_use: self.bytes_in_use.load(Ordering::Relaxed),
            peak_bytes_in_use: self.peak_bytes.load(Ordering::Relaxed),
            num_allocs: self.num_allocs.load(Ordering::Relaxed),
            largest_alloc_size: self.limits.max_buffer_size,
        }
    }

    /// Fails if the device was lost or wgpu reported an error since the last check; the
    /// message names the adapter.
    pub fn check_health(&self) -> Result<()> {
        if self.lost.load(Ordering::Acquire) {
            return Err(Error::new(
                crate::ErrorKind::Cancelled,
                format!("device lost on {}", self.info),
            ));
        }
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

    /// Allocates a storage buffer of at least `size` bytes (rounded up to 4, at least 4).
    pub(crate) fn alloc(self: &Arc<Self>, size: u64, label: &str) -> Result<GpuBuffer> {
        let size = size.max(4).next_multiple_of(4);
        if size > self.limits.max_buffer_size {
            return Err(Error::resource_exhausted(format!(
                "buffer of {size} bytes exceeds the largest buffer {} allows ({} bytes)",
                self.info.name, self.limits.max_buffer_size
            )));
        }
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
        let now = self.bytes_in_use.fetch_add(size, Ordering::Relaxed) + size;
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        self.num_allocs.fetch_add(1, Ordering::Relaxed);
        Ok(GpuBuffer {
            buffer,
            size,
            device: self.clone(),
        })
    }

    /// Submits command buffers and returns an event that completes when the GPU has run them.
    pub(crate) fn submit(&self, cmds: Vec<wgpu::CommandBuffer>) -> Event {
        let event = Event::pending();
        self.poller.begin();
        self.queue.submit(cmds);
        let e = event.clone();
        let poller = self.poller.clone();
        let lost = self.lost.clone();
        let name = self.info.name.clone();
        self.queue.on_submitted_work_done(move || {
            poller.end();
            if lost.load(Ordering::Acquire) {
                e.set(Err(Error::new(
                    crate::ErrorKind::Cancelled,
                    format!("device lost on {name}"),
                )));
            } else {
                e.set(Ok(()));
            }
        });
        event
    }

    /// Maps `staging` for reading once queued work is done and hands its first `len` bytes to
    /// `done` (on the poller thread).
    pub(crate) fn read_back(
        &self,
        staging: wgpu::Buffer,
        len: usize,
        done: impl FnOnce(Result<Vec<u8>>) + Send + 'static,
    ) {
        self.poller.begin();
        let poller = self.poller.clone();
        let name = self.info.name.clone();
        let b = staging.clone();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            poller.end();
            let result = match r {
                Err(e) => Err(Error::internal(format!("reading back from {name}: {e}"))),
                Ok(()) => {
                    let data = b
                        .slice(..)
                        .get_mapped_range()
                        .map(|v| v.get(..len).map(<[u8]>::to_vec));
                    b.unmap();
                    match data {
                        Ok(Some(v)) => Ok(v),
                        Ok(None) => Err(Error::internal("read-back shorter than the tensor")),
                        Err(e) => Err(Error::internal(format!("mapping a read-back: {e}"))),
                    }
                }
            };
            done(result);
        });
    }

    /// The compute pipeline for a WGSL module, created once per distinct source text.
    pub(crate) fn pipeline(&self, wgsl: &str, label: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        // Keyed by the code without its header comment (which names the kernel), so the same
        // kernel in another executable (every jitted function with a matmul of one shape)
        // reuses the driver's compiled pipeline.
        let key = wgsl
            .lines()
            .skip_while(|l| l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut cache = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        // naga's backends panic on a few constructs its validator lets through (e.g. 64-bit
        // bit counts): turn that into an error instead of taking the process down.
        let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = self
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(label),
                    source: wgpu::ShaderSource::Wgsl(wgsl.into()),
                });
            let pipeline = self
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(label),
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
            (pipeline, pollster::block_on(scope.pop()))
        }));
        let pipeline = match created {
            Ok((_, Some(e))) => {
                return Err(Error::internal(format!(
                    "kernel {label}: pipeline creation failed on {}: {e}",
                    self.info.name
                )))
            }
            Ok((p, None)) => p,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                return Err(Error::internal(format!(
                    "kernel {label}: the shader translator panicked on {}: {msg}",
                    self.info.name
                )));
            }
        };
        let p = Arc::new(pipeline);
        cache.insert(key, p.clone());
        Ok(p)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.poller.shutdown.store(true, Ordering::Release);
        let _g = self
            .poller
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.poller.cv.notify_all();
    }
}

/// A wgpu storage buffer whose size is counted in the device's memory statistics.
pub(crate) struct GpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) size: u64,
    device: Arc<Device>,
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.device
            .bytes_in_use
            .fetch_sub(self.size, Ordering::Relaxed);
    }
}
