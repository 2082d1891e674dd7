//! Times one WGSL compute kernel through wgpu alone, for trying a hand-edited kernel from a dump
//! (`WGPU_HLO_DUMP=DIR`) against the one the compiler generated:
//!
//!     cargo run --release --example wgsl_bench -- KERNEL.wgsl --grid X[,Y[,Z]] [--runs N]
//!         [--bytes B0,B1,...]
//!
//! Each `@binding(i)` gets a buffer of the size its dump comment names (`// %3 tensor<64x32xf32>`)
//! or the size `--bytes` gives, filled with floats in [-1, 1); a `texture_2d<f32|u32>` binding
//! commented `// texels WxH` gets an RGBA32 texture of that size, `// r32texels WxH` an R32 one,
//! and a `texture_storage_2d<rgba32float, read_write>` binding so commented a storage texture
//! of that size (the adapter must read and write such textures). The kernel is dispatched
//! `--runs` times (default 50), each in its own submission waited for; the median and minimum
//! wall-clock milliseconds are printed, with GPU timestamps where the adapter has them.
//! `--ints I:N[,I:N...]` fills storage binding `I` with 32-bit integers drawn uniformly from
//! `[0, N)` instead (the indices of a gather, say). `--repeat K` records K dispatches of the
//! kernel in each submission's one compute pass (times are then per submission), so
//! `--repeat 100` against `--repeat 1` of an empty kernel gives the adapter's cost per dispatch.
//!
//! On llvmpipe an invocation that runs more than 65535 loop iterations in all (every loop
//! counted) is cut short silently, so a kernel edited to run longer than its dump's "loop
//! iterations per invocation" (one launch over all the columns a plan splits into several,
//! say) times less work than it appears to: it ran the bidiagonal reduction of a 256 x 256
//! matrix "in 22 ms" that takes 38 ms done whole. Keep edits within the dumped bound.

use std::process::ExitCode;
use std::time::Instant;

fn tensor_bytes(comment: &str) -> Option<u64> {
    let t = comment.split("tensor<").nth(1)?.split('>').next()?;
    let mut parts: Vec<&str> = t.split('x').collect();
    let dtype = parts.pop()?;
    let size: u64 = match dtype {
        "f64" | "i64" | "ui64" | "complex<f32" => 8,
        "f32" | "i32" | "ui32" => 4,
        "f16" | "bf16" | "i16" | "ui16" => 2,
        _ => 1,
    };
    let n = parts
        .iter()
        .map(|d| d.parse::<u64>().ok())
        .product::<Option<u64>>()?;
    Some((n * size).max(4).div_ceil(4) * 4)
}

/// `// texels WxH` (RGBA32) or `// r32texels WxH` (R32) on a `texture_2d<f32|u32>` binding: a
/// texture of W x H texels.
fn texels(line: &str) -> Option<(u32, u32)> {
    let t = line.split("texels ").nth(1)?;
    let (w, h) = t.trim().split_once('x')?;
    Some((w.parse().ok()?, h.parse().ok()?))
}

fn bindings(src: &str) -> Vec<(u32, bool, Option<u64>)> {
    let mut out = Vec::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("@group(0) @binding(") else {
            continue;
        };
        let Some(idx) = rest.split(')').next().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let read_only = rest.contains("var<storage, read>");
        let bytes = line.split("//").nth(1).and_then(tensor_bytes);
        out.push((idx, read_only, bytes));
    }
    out
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut file = None;
    let mut grid = [1u32, 1, 1];
    let mut runs = 50usize;
    let mut repeat = 1usize;
    let mut bytes: Vec<u64> = Vec::new();
    let mut ints: Vec<(u32, u64)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .cloned()
                .ok_or(format!("{} needs a value", args[i]))
        };
        match args[i].as_str() {
            "--grid" => {
                for (k, s) in value()?.split(',').enumerate().take(3) {
                    grid[k] = s.parse().map_err(|e| format!("--grid: {e}"))?;
                }
                i += 1;
            }
            "--runs" => {
                runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?;
                i += 1;
            }
            "--bytes" => {
                bytes = value()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--bytes: {e}")))
                    .collect::<Result<_, String>>()?;
                i += 1;
            }
            "--repeat" => {
                repeat = value()?.parse().map_err(|e| format!("--repeat: {e}"))?;
                i += 1;
            }
            "--ints" => {
                for spec in value()?.split(',') {
                    let (b, n) = spec
                        .split_once(':')
                        .ok_or(format!("--ints: `{spec}` is not I:N"))?;
                    let b = b.parse().map_err(|e| format!("--ints: {e}"))?;
                    let n: u64 = n.parse().map_err(|e| format!("--ints: {e}"))?;
                    ints.push((b, n.max(1)));
                }
                i += 1;
            }
            f => file = Some(f.to_string()),
        }
        i += 1;
    }
    let file = file.ok_or("usage: wgsl_bench KERNEL.wgsl --grid X[,Y[,Z]] [--runs N]")?;
    let src = std::fs::read_to_string(&file).map_err(|e| format!("{file}: {e}"))?;

    let instance = wgpu::Instance::default();
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| format!("no adapter: {e}"))?;
    let features = adapter.features()
        & (wgpu::Features::SUBGROUP
            | wgpu::Features::SHADER_F16
            | wgpu::Features::SHADER_F64
            | wgpu::Features::SHADER_INT64
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TEXTURE_ADAPTER_SPECIFIC_FORMAT_FEATURES);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_features: features,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|e| format!("no device: {e}"))?;
    println!("{}", adapter.get_info().name);

    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(&file),
        source: wgpu::ShaderSource::Wgsl(src.as_str().into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let mut state = 0x2545f4914f6cdd1du64;
    let mut buffers = Vec::new();
    let mut textures = Vec::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("@group(0) @binding(") else {
            continue;
        };
        let Some(idx) = rest.split(')').next().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let r32 = line.contains("r32texels");
        let storage = line.contains("texture_storage_2d<rgba32float, read_write>");
        let format = match (
            line.contains("texture_2d<u32>"),
            line.contains("texture_2d<f32>"),
        ) {
            (true, _) if r32 => wgpu::TextureFormat::R32Uint,
            (true, _) => wgpu::TextureFormat::Rgba32Uint,
            (_, true) if r32 => wgpu::TextureFormat::R32Float,
            (_, true) => wgpu::TextureFormat::Rgba32Float,
            _ if storage => wgpu::TextureFormat::Rgba32Float,
            _ => continue,
        };
        let texel_words = if r32 { 1 } else { 4 };
        let (w, h) = texels(line).ok_or(format!("binding {idx}: no `// texels WxH`"))?;
        let tex = device.create_texture(&wgpu::TextureDescriptor {
            label: None,
            size: wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: if storage {
                wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::COPY_DST
            } else {
                wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST
            },
            view_formats: &[],
        });
        let data: Vec<u8> = (0..w * h * texel_words)
            .flat_map(|i| ((i % 251) as f32 / 251.0).to_le_bytes())
            .collect();
        queue.write_texture(
            tex.as_image_copy(),
            &data,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(w * 4 * texel_words),
                rows_per_image: None,
            },
            wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            },
        );
        println!("binding {idx}: texture {w}x{h} {format:?}");
        textures.push((idx, tex.create_view(&Default::default())));
    }
    for (k, (idx, read_only, size)) in bindings(&src)
        .into_iter()
        .filter(|(idx, _, _)| textures.iter().all(|(t, _)| t != idx))
        .enumerate()
    {
        let size = bytes
            .get(k)
            .copied()
            .or(size)
            .ok_or(format!("binding {idx}: no size (give --bytes)"))?;
        let int_range = ints.iter().find(|(b, _)| *b == idx).map(|(_, n)| *n);
        let data: Vec<u8> = (0..size / 4)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                match int_range {
                    Some(n) => (((state >> 16) % n) as u32).to_le_bytes(),
                    None => ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0).to_le_bytes(),
                }
            })
            .collect();
        let buf = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&buf, 0, &data);
        println!(
            "binding {idx}: {size} bytes{}",
            if read_only { "" } else { " (written)" }
        );
        buffers.push((idx, buf));
    }
    let layout = pipeline.get_bind_group_layout(0);
    let entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .map(|(idx, b)| wgpu::BindGroupEntry {
            binding: *idx,
            resource: b.as_entire_binding(),
        })
        .chain(textures.iter().map(|(idx, v)| wgpu::BindGroupEntry {
            binding: *idx,
            resource: wgpu::BindingResource::TextureView(v),
        }))
        .collect();
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &entries,
    });
    let timing = features.contains(wgpu::Features::TIMESTAMP_QUERY);
    let query = timing.then(|| {
        device.create_query_set(&wgpu::QuerySetDescriptor {
            label: None,
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        })
    });
    let resolve = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut wall = Vec::new();
    let mut gpu = Vec::new();
    for _ in 0..runs + 2 {
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: query.as_ref().map(|q| wgpu::ComputePassTimestampWrites {
                    query_set: q,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }),
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            for _ in 0..repeat.max(1) {
                pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
            }
        }
        if let Some(q) = &query {
            enc.resolve_query_set(q, 0..2, &resolve, 0);
            enc.copy_buffer_to_buffer(&resolve, 0, &readback, 0, 16);
        }
        let t0 = Instant::now();
        let index = queue.submit([enc.finish()]);
        device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| format!("poll: {e}"))?;
        wall.push(t0.elapsed().as_secs_f64() * 1e3);
        if timing {
            readback.slice(..).map_async(wgpu::MapMode::Read, |_| {});
            device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| format!("poll: {e}"))?;
            let t: Vec<u64> = readback
                .slice(..)
                .get_mapped_range()
                .map_err(|e| format!("map: {e}"))?
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect();
            readback.unmap();
            let period = f64::from(queue.get_timestamp_period());
            gpu.push(t[1].saturating_sub(t[0]) as f64 * period / 1e6);
        }
    }
    let stats = |v: &mut Vec<f64>| {
        let v = &mut v[2..];
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0])
    };
    // The first dispatch includes the driver's compile where it compiles lazily (llvmpipe).
    let first = wall[0];
    let (med, min) = stats(&mut wall);
    print!(
        "{file}: grid {grid:?}, first dispatch {first:.1} ms, {runs} runs: median {med:.3} ms, \
         min {min:.3} ms (wall)"
    );
    if timing {
        let (gmed, gmin) = stats(&mut gpu);
        print!("; GPU median {gmed:.3} ms, min {gmin:.3} ms");
    }
    println!();
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wgsl_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
