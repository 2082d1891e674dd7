//! Times decoding a portable artifact against compiling it.
//!
//!     cargo run --release --example decode_timing -- FILE.mlirbc
//!
//! A 20 MB artifact for it: `python scripts/big_artifact.py /tmp/big.mlirbc`.

use std::time::Instant;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::frontend::bytecode::parse_bytecode;
use wgpu_hlo::runtime::Device;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: decode_timing FILE")?;
    let bytes = std::fs::read(&path)?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let m = parse_bytecode(&bytes, &path)?;
        best = best.min(t.elapsed().as_secs_f64());
        std::hint::black_box(m);
    }
    let device = Device::open()?;
    let t = Instant::now();
    let exe = compile(&device, &bytes, &CompileOptions::default())?;
    let compile_s = t.elapsed().as_secs_f64();
    println!(
        "{:.1} MB artifact: decode {:.1} ms (best of 5), full compile {:.1} ms ({} kernels) on {}: decode is {:.1}% of compile",
        bytes.len() as f64 / 1e6,
        best * 1e3,
        compile_s * 1e3,
        exe.kernels().len(),
        device.info().name,
        100.0 * best / compile_s
    );
    Ok(())
}
