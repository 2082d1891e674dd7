//! Strict float kernels (`runtime::strict_float`; the default on GPU adapters,
//! `WGPU_HLO_STRICT_FLOAT=1` on any): translated by naga here, every float operation decorated
//! NoContraction and passed through to the driver. On a Vulkan adapter (lavapipe on CI) the
//! path must be taken when asked for, be left when `=0`, and give the numbers the WGSL path
//! gives.

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

const PROGRAM: &str = r#"func.func @main(%x: tensor<64x64xf32>, %y: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64xf32>) {
  %d = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %s = stablehlo.sine %d : tensor<64x64xf32>
  %h = stablehlo.constant dense<0.5> : tensor<64x64xf32>
  %m = stablehlo.multiply %h, %s : tensor<64x64xf32>
  %t = stablehlo.multiply %m, %d : tensor<64x64xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%t init: %z) applies stablehlo.add across dimensions = [1] : (tensor<64x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %t, %r : tensor<64x64xf32>, tensor<64xf32>
}
"#;

fn run(dev: &std::sync::Arc<Device>) -> Vec<Vec<u8>> {
    let exe = compile(dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let t = TensorType::new(vec![64, 64], ElementType::F32);
    let x: Vec<u8> = (0..4096)
        .flat_map(|i| (((i * 37) % 101) as f32 / 50.0 - 1.0).to_le_bytes())
        .collect();
    let y: Vec<u8> = (0..4096)
        .flat_map(|i| (((i * 53) % 97) as f32 / 40.0 - 1.2).to_le_bytes())
        .collect();
    let args = [dev.upload(&t, &x).unwrap(), dev.upload(&t, &y).unwrap()];
    exe.execute_blocking(&args)
        .unwrap()
        .iter()
        .map(|b| b.read_to_host_blocking().unwrap())
        .collect()
}

#[test]
fn strict_kernels_run_and_agree() {
    std::env::set_var("WGPU_HLO_STRICT_FLOAT", "0");
    let plain = Device::open().expect("a wgpu adapter");
    std::env::remove_var("WGPU_HLO_STRICT_FLOAT");
    let want = run(&plain);
    assert!(!plain.strict_float());
    drop(plain);
    // Unset: on by default on GPU adapters that pass SPIR-V through, off on CPU adapters.
    let default = Device::open().expect("a wgpu adapter");
    if default.info().device_type == "Cpu" {
        assert!(!default.strict_float(), "{}", default.info());
    } else if default.info().backend == "Vulkan" {
        assert!(default.strict_float(), "{}", default.info());
    }
    drop(default);
    std::env::set_var("WGPU_HLO_STRICT_FLOAT", "1");
    let strict = Device::open().expect("a wgpu adapter");
    std::env::remove_var("WGPU_HLO_STRICT_FLOAT");
    if strict.info().backend == "Vulkan" {
        assert!(strict.strict_float(), "{}", strict.info());
    }
    let got = run(&strict);
    for (g, w) in got.iter().zip(&want) {
        for (a, b) in g.chunks(4).zip(w.chunks(4)) {
            let (a, b) = (
                f32::from_le_bytes([a[0], a[1], a[2], a[3]]),
                f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            );
            // lavapipe does not contract: the same bits; a driver that does may differ.
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}
