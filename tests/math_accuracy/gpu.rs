//! One shared wgpu device per test binary and a tiny "run this compute shader over u32 words"
//! helper. Inputs and outputs travel as raw bit patterns so that no driver conversion touches
//! them (denormals, NaN payloads).

use std::sync::{Mutex, OnceLock};

/// The device the accuracy tests run on.
pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// Whether the adapter offers `SHADER_F64`.
    pub f64: bool,
    /// Adapter name and backend, for reports.
    pub name: String,
    /// Kernels pass through `wgpu_hlo::runtime::strict_float` as the library's own do on this
    /// adapter (by default on GPUs; `WGPU_HLO_STRICT_FLOAT=0/1`), so the sweeps measure the
    /// arithmetic programs get.
    strict: bool,
    lock: Mutex<()>,
    flushes: OnceLock<(bool, bool)>,
}

static GPU: OnceLock<Option<Gpu>> = OnceLock::new();

/// The shared device, or `None` where no adapter is found (the tests then skip loudly).
pub fn gpu() -> Option<&'static Gpu> {
    GPU.get_or_init(|| pollster::block_on(Gpu::new())).as_ref()
}

impl Gpu {
    async fn new() -> Option<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::PRIMARY;
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions::default())
            .await
            .ok()?;
        let info = adapter.get_info();
        let strict =
            wgpu_hlo::runtime::strict_float::wanted(info.device_type == wgpu::DeviceType::Cpu)
                && info.backend == wgpu::Backend::Vulkan
                && adapter
                    .features()
                    .contains(wgpu::Features::PASSTHROUGH_SHADERS);
        let mut wanted =
            wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64 | wgpu::Features::SHADER_F16;
        if strict {
            wanted |= wgpu::Features::PASSTHROUGH_SHADERS;
        }
        let features = adapter.features() & wanted;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("math-accuracy"),
                required_features: features,
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .ok()?;
        Some(Gpu {
            device,
            queue,
            f64: features.contains(wgpu::Features::SHADER_F64),
            name: format!(
                "{} ({:?}, {}{})",
                info.name,
                info.backend,
                info.driver_info,
                if strict { ", strict float" } else { "" }
            ),
            strict,
            lock: Mutex::new(()),
            flushes: OnceLock::new(),
        })
    }

    /// Whether the adapter's compute shaders flush f32 (first) and f64 (second) subnormals to
    /// zero, as inputs or results (NVIDIA's Vulkan driver flushes f32 ones; lavapipe keeps both):
    /// FLT_MIN / 2 and a subnormal times 2, each computed from loaded values.
    pub fn flushes_subnormals(&self) -> (bool, bool) {
        *self.flushes.get_or_init(|| {
            let a = [
                f32::MIN_POSITIVE.to_bits(),
                (f32::MIN_POSITIVE / 2.0).to_bits(),
            ];
            let b = [0.5f32.to_bits(), 2.0f32.to_bits()];
            let body = "  out[i] = bitcast<u32>(bitcast<f32>(in0[i]) * bitcast<f32>(in1[i]));";
            let got = self.run("", body, &[&a, &b], 2, 2);
            let f32_flushes = got != [a[1], a[0]];
            let f64_flushes = self.f64 && {
                let (m, h) = (f64::MIN_POSITIVE, f64::MIN_POSITIVE / 2.0);
                let got = self.run_f64("", "x0 * x1", &[&[m, h], &[0.5, 2.0]]);
                got.iter()
                    .map(|x| x.to_bits())
                    .ne([h, m].iter().map(|x| x.to_bits()))
            };
            (f32_flushes, f64_flushes)
        })
    }

    /// Evaluates the f64 WGSL expression `expr` of `x0..xK` (the elements of `args`) once per
    /// element, after `library`; f64s travel as pairs of u32 words, low first.
    pub fn run_f64(&self, library: &str, expr: &str, args: &[&[f64]]) -> Vec<f64> {
        let n = args.first().map_or(0, |a| a.len());
        let mut lib = library.to_string();
        lib.push_str(
            "fn ld64(lo: u32, hi: u32) -> f64 { return bitcast<f64>(u64(lo) | (u64(hi) << 32u)); }\n",
        );
        let mut body = String::new();
        for k in 0..args.len() {
            body.push_str(&format!(
                "  let x{k} = ld64(in{k}[2u * i], in{k}[2u * i + 1u]);\n"
            ));
        }
        body.push_str(&format!(
            "  let w = bitcast<u64>({expr});\n  out[2u * i] = u32(w & 0xfffffffflu);\n  out[2u * i + 1u] = u32(w >> 32u);"
        ));
        let cols: Vec<Vec<u32>> = args
            .iter()
            .map(|c| {
                c.iter()
                    .flat_map(|v| [v.to_bits() as u32, (v.to_bits() >> 32) as u32])
                    .collect()
            })
            .collect();
        let refs: Vec<&[u32]> = cols.iter().map(|c| c.as_slice()).collect();
        self.run(&lib, &body, &refs, n, 2 * n)
            .chunks_exact(2)
            .map(|w| f64::from_bits(u64::from(w[0]) | (u64::from(w[1]) << 32)))
            .collect()
    }

    /// Runs `body` (WGSL statements using `i`, the element index, reading `in0..inK` and writing
    /// `out`, all `array<u32>`) once per element index `0..n`, after `library` (function
    /// definitions). Returns `out` (`out_words` words). Panics with the validation message on a
    /// bad shader.
    pub fn run(
        &self,
        library: &str,
        body: &str,
        inputs: &[&[u32]],
        n: usize,
        out_words: usize,
    ) -> Vec<u32> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut src = String::new();
        if library.contains("f16") {
            src.push_str("enable f16;\n");
        }
        for k in 0..inputs.len() {
            src.push_str(&format!(
                "@group(0) @binding({k}) var<storage, read> in{k}: array<u32>;\n"
            ));
        }
        let ko = inputs.len();
        src.push_str(&format!(
            "@group(0) @binding({ko}) var<storage, read_write> out: array<u32>;\n"
        ));
        src.push_str(&format!("const N: u32 = {n}u;\n"));
        src.push_str(library);
        src.push_str(&format!(
            "\n@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n  let i = gid.x + gid.y * {};\n  if (i >= N) {{ return; }}\n{body}\n}}\n",
            64 * 1024
        ));
        let device = &self.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = if self.strict {
            let (words, workgroup_size) =
                wgpu_hlo::runtime::strict_float::strict_spirv(&src, "math")
                    .unwrap_or_else(|e| panic!("strict translation: {e}\n{src}"));
            // SAFETY: naga wrote the module from WGSL its validator accepted; only
            // NoContraction decorations were added.
            unsafe {
                device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: None,
                    entry_points: std::borrow::Cow::Owned(vec![
                        wgpu::PassthroughShaderEntryPoint {
                            name: "main".into(),
                            workgroup_size,
                        },
                    ]),
                    spirv: Some(std::borrow::Cow::Owned(words)),
                    ..Default::default()
                })
            }
        } else {
            device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(src.as_str().into()),
            })
        };
        let layout_entries: Vec<wgpu::BindGroupLayoutEntry> = (0..=ko)
            .map(|k| wgpu::BindGroupLayoutEntry {
                binding: k as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: k < ko },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &layout_entries,
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(err) = pollster::block_on(scope.pop()) {
            panic!("shader rejected: {err}\n{src}");
        }
        let make = |words: &[u32], usage: wgpu::BufferUsages| {
            let size = (words.len().max(1) * 4) as u64;
            let buf = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage,
                mapped_at_creation: false,
            });
            if !words.is_empty() {
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                self.queue.write_buffer(&buf, 0, &bytes);
            }
            buf
        };
        let in_bufs: Vec<wgpu::Buffer> = inputs
            .iter()
            .map(|w| {
                make(
                    w,
                    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                )
            })
            .collect();
        let out_buf = make(
            &vec![0u32; out_words],
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
        );
        let read_buf = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: (out_words.max(1) * 4) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut entries: Vec<wgpu::BindGroupEntry> = in_bufs
            .iter()
            .enumerate()
            .map(|(k, b)| wgpu::BindGroupEntry {
                binding: k as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        entries.push(wgpu::BindGroupEntry {
            binding: ko as u32,
            resource: out_buf.as_entire_binding(),
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &bgl,
            entries: &entries,
        });
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            let groups = n.div_ceil(64) as u32;
            let (x, y) = if groups <= 1024 {
                (groups.max(1), 1)
            } else {
                (1024, groups.div_ceil(1024))
            };
            pass.dispatch_workgroups(x, y, 1);
        }
        enc.copy_buffer_to_buffer(&out_buf, 0, &read_buf, 0, (out_words.max(1) * 4) as u64);
        self.queue.submit([enc.finish()]);
        let slice = read_buf.slice(..);
        slice.map_async(wgpu::MapMode::Read, |r| r.expect("map failed"));
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll failed");
        let data = slice.get_mapped_range().expect("mapped range");
        let mut out: Vec<u32> = data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.truncate(out_words);
        out
    }
}
