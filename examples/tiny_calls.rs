//! The tiny call `x + 1` over 4 f32, timed through the library alone (no framework) and
//! through wgpu alone, alternately in one process: N calls of each, every call waited for by
//! its own thread polling without blocking, median / minimum / 90th percentile microseconds.
//! The raw-wgpu loop records, submits and polls the very kernel the compiler generated, on a
//! device of its own, so the difference is what the runtime adds to a call.
//!
//!     cargo run --release --example tiny_calls -- [N] [ROUNDS]

use std::time::Instant;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

const TINY: &str = r#"
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %one = stablehlo.constant dense<1.0> : tensor<4xf32>
  %r = stablehlo.add %x, %one : tensor<4xf32>
  return %r : tensor<4xf32>
}"#;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Median, minimum and 90th percentile of `times` (sorted in place).
fn summary(times: &mut [f64]) -> (f64, f64, f64) {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    (times[n / 2], times[0], times[n * 9 / 10])
}

/// `n` calls of `wgsl` (binding 0 read, binding 1 written, 16 bytes each, one workgroup)
/// through wgpu alone: encode, submit, poll until the queue is empty.
fn raw(wgsl: &str, n: usize) -> Res<Vec<f64>> {
    let inst = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(inst.request_adapter(&Default::default()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default()))?;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let buffer = || {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let (a, b) = (buffer(), buffer());
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: a.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: b.as_entire_binding(),
            },
        ],
    });
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let mut enc = device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        queue.submit([enc.finish()]);
        while !matches!(
            device.poll(wgpu::PollType::Poll),
            Ok(wgpu::PollStatus::QueueEmpty)
        ) {
            std::thread::yield_now();
        }
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(times)
}

fn main() -> Res<()> {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (n, rounds) = (arg(1, 10000).max(10), arg(2, 3).max(1));
    let dev = Device::open()?;
    let exe = compile(&dev, TINY.as_bytes(), &CompileOptions::default())?;
    let kernels = exe.kernels();
    let [kernel] = kernels.as_slice() else {
        return Err(format!("x + 1 compiled to {} kernels, not 1", kernels.len()).into());
    };
    let wgsl = kernel.wgsl.clone();
    let ty = TensorType::new(vec![4], ElementType::F32);
    let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let x = dev.upload(&ty, &bytes)?;
    x.ready().wait()?;
    println!("{} ({n} calls a round)", dev.info());
    for round in 0..rounds {
        let mut ours = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            let (outs, done) = exe.execute(std::slice::from_ref(&x), &[])?;
            done.wait()?;
            ours.push(t0.elapsed().as_secs_f64() * 1e6);
            drop(outs);
        }
        let mut floor = raw(&wgsl, n)?;
        let (o, f) = (summary(&mut ours), summary(&mut floor));
        println!(
            "round {round}: wgpu-hlo median {:.1} us (min {:.1}, p90 {:.1}); raw wgpu median {:.1} \
             us (min {:.1}, p90 {:.1}); ratio {:.2}",
            o.0,
            o.1,
            o.2,
            f.0,
            f.1,
            f.2,
            o.0 / f.0
        );
    }
    Ok(())
}
