//! Compiling a CPU driver's kernels at load time, on several cores at once.
//!
//! Mesa's llvmpipe (behind lavapipe) turns a compute pipeline into machine code at the
//! pipeline's **first dispatch**, not at its creation, and it does so on the device's one
//! queue thread. A program's first execution therefore waits for every kernel's LLVM compile,
//! one after another: 7.7 s of a 2-layer transformer step's 8.8 s first call, on a host where
//! `Executable::load` had created the same pipelines in 0.4 s on two threads.
//!
//! `Warmer` moves that compile into the load and spreads it over the cores. Helper devices on
//! the same adapter, one per core, take the new pipelines one at a time, largest first, and
//! dispatch **zero workgroups** of each over dummy bindings: llvmpipe compiles the code
//! before it looks at the grid, and runs nothing. A helper creates its own pipeline from the
//! same text; what it compiles reaches the device through Mesa's on-disk shader cache (keyed
//! by the code, not the device), so the device's first real dispatch of that kernel loads it
//! instead of compiling it.
//!
//! The device itself dispatches nothing: after zero-workgroup dispatches of its own pipelines,
//! lavapipe's timestamp queries no longer bracketed the device's later dispatches. Each
//! kernel's begin and end were read after it had run, so the per-kernel times of the dump
//! and of `wgpu-hlo bench --per-kernel` came out near zero. For example, 4096² column sums took
//! 0.07 ms of "GPU time" in a 15 ms call, where they show 14-15 ms without warming. Calls took
//! as long either way.
//!
//! Only where that pays: CPU adapters (a GPU driver compiles at creation, which the load
//! already runs on several threads), more than one core, Mesa's shader cache on and writable
//! (`MESA_SHADER_CACHE_DISABLE`, or a cache directory this process cannot write: without the
//! cache the helpers' work would be lost and every kernel compiled twice), and a load with
//! at least two pipelines not warmed before. `WGPU_HLO_WARM=0` turns it off. Warming never
//! fails a load: a kernel it cannot warm is compiled at its first dispatch, as without it.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// One pipeline to warm: the WGSL the device's pipeline was made from.
pub(crate) struct Item<'a> {
    pub wgsl: &'a str,
    pub label: &'a str,
    /// Per binding that is a texture (inputs read through one, state and scratch textures),
    /// its extent in texels (see `zero_dispatch`).
    pub textures: Vec<Option<(u32, u32)>>,
}

/// A second device on the adapter, used only to compile.
struct Helper {
    device: wgpu::Device,
    queue: wgpu::Queue,
}

/// Helpers not in use, and how many exist (in use or not).
#[derive(Default)]
struct Helpers {
    idle: Vec<Helper>,
    alive: usize,
}

/// Pipelines warmed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarmStats {
    /// Compiled on a helper device (and found by the device in Mesa's shader cache).
    pub on_helpers: u64,
}

/// See the module documentation.
pub(crate) struct Warmer {
    adapter: wgpu::Adapter,
    features: wgpu::Features,
    limits: wgpu::Limits,
    strict_float: bool,
    max_helpers: usize,
    helpers: Mutex<Helpers>,
    /// Hashes of the pipeline keys passed to `warm` before: each code is warmed once.
    seen: Mutex<HashSet<u64>>,
    on_helpers: AtomicU64,
}

/// True when `MESA_SHADER_CACHE_DISABLE` turns Mesa's on-disk shader cache off.
fn mesa_cache_disabled() -> bool {
    std::env::var("MESA_SHADER_CACHE_DISABLE").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "y"
        )
    })
}

/// The directory Mesa (22.x and later) keeps its multi-file shader cache in, from the
/// environment as `var` gives it: `$MESA_SHADER_CACHE_DIR/mesa_shader_cache` (or the
/// deprecated `MESA_GLSL_CACHE_DIR`), else `$XDG_CACHE_HOME/mesa_shader_cache`, else
/// `$HOME/.cache/mesa_shader_cache`; `None` with none of them set.
fn mesa_cache_dir(var: impl Fn(&str) -> Option<String>) -> Option<std::path::PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let base = set("MESA_SHADER_CACHE_DIR")
        .or_else(|| set("MESA_GLSL_CACHE_DIR"))
        .or_else(|| set("XDG_CACHE_HOME"))
        .map(std::path::PathBuf::from)
        .or_else(|| set("HOME").map(|h| std::path::Path::new(&h).join(".cache")))?;
    Some(base.join("mesa_shader_cache"))
}

/// Whether this process can write files into `dir`, creating it (as Mesa does) if needed: a
/// file made there and removed again.
fn writable_dir(dir: &std::path::Path) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let probe = dir.join(format!(".wgpu-hlo-probe-{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .is_ok();
    if made {
        let _ = std::fs::remove_file(&probe);
    }
    made
}

/// Whether Mesa's on-disk shader cache can carry compiles from one device to another in this
/// process: not turned off, and its directory writable (checked once). Where it cannot, a
/// CPU adapter's kernels are not warmed.
pub fn mesa_cache_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        if mesa_cache_disabled() {
            return false;
        }
        match mesa_cache_dir(|name| std::env::var(name).ok()) {
            Some(dir) if writable_dir(&dir) => true,
            Some(dir) => {
                log::debug!(
                    "warming off: Mesa's shader cache directory {} is not writable",
                    dir.display()
                );
                false
            }
            None => {
                log::debug!("warming off: no directory for Mesa's shader cache");
                false
            }
        }
    })
}

impl Warmer {
    /// A warmer for a device opened on `adapter` with these features and limits, where
    /// warming pays (see the module documentation); none elsewhere.
    pub(crate) fn new(
        adapter: &wgpu::Adapter,
        features: wgpu::Features,
        limits: &wgpu::Limits,
        strict_float: bool,
    ) -> Option<Warmer> {
        let info = adapter.get_info();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let off = std::env::var("WGPU_HLO_WARM").is_ok_and(|v| v.trim() == "0");
        if off
            || info.device_type != wgpu::DeviceType::Cpu
            || info.backend != wgpu::Backend::Vulkan
            || cores < 2
            || !mesa_cache_usable()
        {
            return None;
        }
        Some(Warmer {
            adapter: adapter.clone(),
            features,
            limits: limits.clone(),
            strict_float,
            max_helpers: cores.min(8),
            helpers: Mutex::new(Helpers::default()),
            seen: Mutex::new(HashSet::new()),
            on_helpers: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> WarmStats {
        WarmStats {
            on_helpers: self.on_helpers.load(Ordering::Relaxed),
        }
    }

    /// Compiles the pipelines of `items` not warmed before, on helper devices at once;
    /// returns when all are compiled (or failed to, which is only logged). Where every
    /// helper is busy with another load, they are compiled at their first dispatch.
    pub(crate) fn warm(&self, items: &[Item]) {
        let mut todo: Vec<&Item> = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            items
                .iter()
                .filter(|it| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    super::device::pipeline_key(it.wgsl).hash(&mut h);
                    seen.insert(h.finish())
                })
                .collect()
        };
        // One pipeline gains nothing from moving its compile: it is compiled at its first
        // dispatch, right after this load.
        if todo.len() < 2 {
            return;
        }
        // Largest first, so that no core is left with a long compile at the end.
        todo.sort_by_key(|it| std::cmp::Reverse(it.wgsl.len()));
        let taken = self.take_helpers(todo.len());
        if taken.is_empty() {
            log::debug!(
                "warming: every helper is busy; {} pipelines not warmed",
                todo.len()
            );
            return;
        }
        let next = AtomicUsize::new(0);
        let started = std::time::Instant::now();
        let returned: Vec<Option<Helper>> = std::thread::scope(|s| {
            let threads: Vec<_> = taken
                .into_iter()
                .map(|h| {
                    let (todo, next) = (&todo, &next);
                    std::thread::Builder::new()
                        .name("wgpu-hlo-warm".into())
                        .spawn_scoped(s, move || self.run_helper(h, todo, next))
                })
                .collect();
            // A thread that could not start dropped its helper: counted as gone, like one
            // whose device failed.
            threads
                .into_iter()
                .map(|t| t.ok().and_then(|t| t.join().ok().flatten()))
                .collect()
        });
        log::debug!(
            "warmed {} pipelines in {:?} with {} helpers",
            todo.len(),
            started.elapsed(),
            returned.len()
        );
        let mut g = self.helpers.lock().unwrap_or_else(|p| p.into_inner());
        for h in returned {
            match h {
                Some(h) => g.idle.push(h),
                None => g.alive -= 1,
            }
        }
    }

    /// Up to `want` helpers: idle ones, then `None` for each one a thread should open, as
    /// long as no more than `max_helpers` exist. Each counts as alive until given back.
    fn take_helpers(&self, want: usize) -> Vec<Option<Helper>> {
        let mut g = self.helpers.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        while out.len() < want {
            if let Some(h) = g.idle.pop() {
                out.push(Some(h));
            } else if g.alive < self.max_helpers {
                g.alive += 1;
                out.push(None);
            } else {
                break;
            }
        }
        out
    }

    /// A helper thread: opens its device if it has none, then compiles items until none is
    /// left. Returns the helper to keep, or none where it could not open or broke.
    fn run_helper(
        &self,
        helper: Option<Helper>,
        todo: &[&Item],
        next: &AtomicUsize,
    ) -> Option<Helper> {
        let helper = match helper {
            Some(h) => h,
            None => match self.open_helper() {
                Ok(h) => h,
                Err(e) => {
                    log::debug!("warming: no helper device: {e}");
                    return None;
                }
            },
        };
        while let Some(it) = todo.get(next.fetch_add(1, Ordering::Relaxed)) {
            match self.warm_on_helper(&helper, it) {
                Ok(()) => {
                    self.on_helpers.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    log::debug!("warming {} on a helper: {e}", it.label);
                    if e.kind == crate::error::ErrorKind::DeadlineExceeded {
                        return None;
                    }
                }
            }
        }
        Some(helper)
    }

    fn open_helper(&self) -> Result<Helper> {
        let (device, queue) =
            pollster::block_on(self.adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("wgpu-hlo warming"),
                required_features: self.features,
                required_limits: self.limits.clone(),
                ..Default::default()
            }))
            .map_err(|e| Error::unavailable(format!("cannot open a helper device: {e}")))?;
        // wgpu's default handler panics; a helper's errors only cost its warming.
        device.on_uncaptured_error(std::sync::Arc::new(|e: wgpu::Error| {
            log::debug!("warming: helper device error: {e}");
        }));
        Ok(Helper { device, queue })
    }

    fn warm_on_helper(&self, helper: &Helper, it: &Item) -> Result<()> {
        let pipeline = super::device::create_pipeline(
            &helper.device,
            self.strict_float,
            None,
            it.wgsl,
            it.label,
            "a helper device",
        )?;
        let cmd = zero_dispatch(&helper.device, &pipeline, it)?;
        let index = helper.queue.submit([cmd]);
        let limit = super::event::wait_timeout();
        helper
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: Some(limit),
            })
            .map_err(|e| match e {
                wgpu::PollError::Timeout => super::event::deadline_error("warming", limit),
                e => Error::internal(format!("warming: {e}")),
            })?;
        Ok(())
    }
}

/// One binding of a kernel, as its WGSL declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Declared {
    Buffer(u32),
    /// A sampled texture (`texture_2d`), or with `true` a read-write storage texture
    /// (`texture_storage_2d<rgba32float, read_write>`, a scratch texture).
    Texture(u32, bool),
}

/// The bindings a kernel's WGSL declares (`@group(0) @binding(N) var...` lines, as
/// `codegen` writes them).
fn declared_bindings(wgsl: &str) -> Vec<Declared> {
    wgsl.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("@group(0) @binding(")?;
            let (n, decl) = rest.split_once(')')?;
            let n = n.trim().parse().ok()?;
            let decl = decl.split("//").next().unwrap_or("");
            Some(if decl.contains("texture_storage_2d") {
                Declared::Texture(n, true)
            } else if decl.contains("texture_2d") {
                Declared::Texture(n, false)
            } else {
                Declared::Buffer(n)
            })
        })
        .collect()
}

/// A command buffer that dispatches zero workgroups of `pipeline` over dummy resources (a
/// small storage buffer or a texture of a few texels per binding). Errors where the dummies do not
/// fit the pipeline's layout (nothing is submitted then).
fn zero_dispatch(
    device: &wgpu::Device,
    pipeline: &wgpu::ComputePipeline,
    it: &Item,
) -> Result<wgpu::CommandBuffer> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let declared = declared_bindings(it.wgsl);
    let resources: Vec<(u32, Result<wgpu::Buffer, wgpu::TextureView>)> = declared
        .iter()
        .map(|d| match *d {
            Declared::Buffer(n) => (
                n,
                Ok(device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("warming"),
                    size: 256,
                    usage: wgpu::BufferUsages::STORAGE,
                    mapped_at_creation: false,
                })),
            ),
            Declared::Texture(n, storage) => {
                // llvmpipe compiles a kernel once per kind of texture it reads, and whether
                // each side is a power of two is part of the kind: a dummy of 1 or 3 texels a
                // side is of the same kind as the texture the kernel will read.
                let (w, h) = it
                    .textures
                    .get(n as usize)
                    .copied()
                    .flatten()
                    .unwrap_or((1, 1));
                let side = |x: u32| if x.is_power_of_two() { 1 } else { 3 };
                let t = device.create_texture(&wgpu::TextureDescriptor {
                    label: Some("warming"),
                    size: wgpu::Extent3d {
                        width: side(w),
                        height: side(h),
                        depth_or_array_layers: 1,
                    },
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D2,
                    format: super::device::texture_format(storage),
                    usage: if storage {
                        wgpu::TextureUsages::STORAGE_BINDING
                    } else {
                        wgpu::TextureUsages::TEXTURE_BINDING
                    },
                    view_formats: &[],
                });
                (
                    n,
                    Err(t.create_view(&wgpu::TextureViewDescriptor::default())),
                )
            }
        })
        .collect();
    let entries: Vec<wgpu::BindGroupEntry> = resources
        .iter()
        .map(|(n, r)| wgpu::BindGroupEntry {
            binding: *n,
            resource: match r {
                Ok(b) => b.as_entire_binding(),
                Err(v) => wgpu::BindingResource::TextureView(v),
            },
        })
        .collect();
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("warming"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("warming"),
    });
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(0, 1, 1);
    }
    let cmd = enc.finish();
    match pollster::block_on(scope.pop()) {
        Some(e) => Err(Error::internal(format!(
            "kernel {}: its dummy bindings do not fit: {e}",
            it.label
        ))),
        None => Ok(cmd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_are_read_from_the_declarations() {
        let wgsl = "// kernel\n\
            @group(0) @binding(0) var<storage, read> in0: array<f32>; // %0 tensor<4xf32>\n\
            @group(0) @binding(1) var in1: texture_2d<u32>; // (read through a texture_2d)\n\
            @group(0) @binding(2) var<storage, read_write> out0: array<vec4<f32>>;\n\
            @group(0) @binding(3) var blk: texture_storage_2d<rgba32float, read_write>;\n\
            // @group(0) @binding(9) in a comment\n\
            fn main() {}\n";
        assert_eq!(
            declared_bindings(wgsl),
            vec![
                Declared::Buffer(0),
                Declared::Texture(1, false),
                Declared::Buffer(2),
                Declared::Texture(3, true)
            ]
        );
    }

    #[test]
    fn mesa_cache_dir_follows_mesas_order() {
        fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        }
        let all = [
            ("MESA_SHADER_CACHE_DIR", "/a"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        let dir = |p: &str| Some(std::path::PathBuf::from(p));
        assert_eq!(mesa_cache_dir(env(&all)), dir("/a/mesa_shader_cache"));
        assert_eq!(mesa_cache_dir(env(&all[1..])), dir("/x/mesa_shader_cache"));
        assert_eq!(
            mesa_cache_dir(env(&all[2..])),
            dir("/h/.cache/mesa_shader_cache")
        );
        assert_eq!(
            mesa_cache_dir(env(&[("MESA_SHADER_CACHE_DIR", " "), ("HOME", "/h")])),
            dir("/h/.cache/mesa_shader_cache")
        );
        assert_eq!(mesa_cache_dir(env(&[])), None);
    }

    #[test]
    fn a_directory_under_a_file_is_not_writable() {
        let base = std::env::temp_dir().join(format!("wgpu-hlo-warm-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        assert!(writable_dir(&base.join("mesa_shader_cache")));
        let file = base.join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(!writable_dir(&file.join("mesa_shader_cache")));
        // The probe is removed again.
        let left: Vec<_> = std::fs::read_dir(base.join("mesa_shader_cache"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
