//! Kernels of the same code share one pipeline: a model's repeated layers, whose kernels
//! differ only in the values their comments name, compile once in CPU drivers (which
//! compile a pipeline's code at its first dispatch), not once per layer.

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::runtime::Device;

/// Two "layers" of the same shapes: `tanh(x @ w1) @ w2`, twice over.
const PROGRAM: &str = r#"func.func @main(%x: tensor<64x96xf32>, %w1: tensor<96x128xf32>, %w2: tensor<128x96xf32>, %v1: tensor<96x128xf32>, %v2: tensor<128x96xf32>) -> tensor<64x96xf32> {
  %a = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<64x96xf32>, tensor<96x128xf32>) -> tensor<64x128xf32>
  %b = stablehlo.tanh %a : tensor<64x128xf32>
  %c = stablehlo.dot_general %b, %w2, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x96xf32>) -> tensor<64x96xf32>
  %d = stablehlo.tanh %c : tensor<64x96xf32>
  %e = stablehlo.dot_general %d, %v1, contracting_dims = [1] x [0] : (tensor<64x96xf32>, tensor<96x128xf32>) -> tensor<64x128xf32>
  %f = stablehlo.tanh %e : tensor<64x128xf32>
  %g = stablehlo.dot_general %f, %v2, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x96xf32>) -> tensor<64x96xf32>
  %h = stablehlo.tanh %g : tensor<64x96xf32>
  return %h : tensor<64x96xf32>
}
"#;

#[test]
fn kernels_of_the_same_code_share_a_pipeline() {
    let dev = Device::open().expect("a wgpu adapter");
    let before = dev.pipelines_created();
    let exe = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let kernels = exe.kernels();
    let distinct: std::collections::HashSet<String> = kernels
        .iter()
        .map(|k| {
            k.wgsl
                .lines()
                .map(|l| l.split("//").next().unwrap_or("").trim_end())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    assert!(
        distinct.len() < kernels.len(),
        "{} kernels of {} distinct codes: the layers' kernels should repeat",
        kernels.len(),
        distinct.len()
    );
    assert_eq!(
        dev.pipelines_created() - before,
        distinct.len() as u64,
        "one pipeline per distinct code"
    );
    // A second executable of the same program creates none.
    let again = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    assert_eq!(dev.pipelines_created() - before, distinct.len() as u64);
    drop((exe, again));
}
