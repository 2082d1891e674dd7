//! Compiles a StableHLO program (text or portable artifact) with the library API and runs its
//! `@main` on the default adapter with zero-filled arguments, printing each result.
//!
//!     cargo run --release --example run_mlir -- FILE.mlir

use std::process::ExitCode;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::literal::read_scalar;
use wgpu_hlo::runtime::Device;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: run_mlir FILE");
        return ExitCode::from(2);
    };
    let program = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let result = (|| -> wgpu_hlo::Result<()> {
        let device = Device::open()?;
        println!("adapter: {}", device.info());
        let exe = compile(&device, &program, &CompileOptions::default())?;
        println!("{} kernel(s)", exe.kernels().len());
        let args = exe
            .parameter_types()
            .iter()
            .map(|t| device.upload(t, &vec![0u8; t.byte_size()]))
            .collect::<wgpu_hlo::Result<Vec<_>>>()?;
        let outputs = exe.execute_blocking(&args)?;
        for (i, (out, ty)) in outputs.iter().zip(exe.output_types()).enumerate() {
            let bytes = out.read_to_host_blocking()?;
            let size = ty.dtype.byte_size().max(1);
            let shown: Vec<String> = bytes
                .chunks(size)
                .take(16)
                .map(|c| read_scalar(ty.dtype, c).to_string())
                .collect();
            let more = if ty.num_elements() > 16 { ", ..." } else { "" };
            println!("result {i}: {ty} = [{}{more}]", shown.join(", "));
        }
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
