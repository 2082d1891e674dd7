//! Fusion respects the adapter's binding budget: an elementwise expression over more buffers
//! than one kernel may bind (`max_storage_buffers_per_shader_stage`, 32 on lavapipe; JAX's
//! `add_any` of many cotangents in a scan's gradient reached 77) is cut into several kernels
//! instead of failing the compile, and still computes the right values. Also through a fused
//! reduction.

mod common;

use common::device;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::DeviceBuffer;

fn upload(v: &[f32]) -> DeviceBuffer {
    let t = TensorType::new(vec![v.len() as i64], ElementType::F32);
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    device().upload(&t, &bytes).unwrap()
}

/// `n` parameters of `tensor<LENxf32>` combined as `((p0 * p1 + p2) * p3 + p4) ...`, then
/// `tail` applied to the result.
fn program(n: usize, len: usize, tail: &str, result: &str) -> String {
    let ty = format!("tensor<{len}xf32>");
    let params: Vec<String> = (0..n).map(|i| format!("%p{i}: {ty}")).collect();
    let mut s = format!("func.func @main({}) -> {result} {{\n", params.join(", "));
    s.push_str(&format!("  %v0 = stablehlo.add %p0, %p0 : {ty}\n"));
    for i in 1..n {
        let op = if i % 2 == 1 { "multiply" } else { "add" };
        s.push_str(&format!(
            "  %v{i} = stablehlo.{op} %v{}, %p{i} : {ty}\n",
            i - 1
        ));
    }
    s.push_str(&tail.replace("LAST", &format!("%v{}", n - 1)));
    s.push_str("}\n");
    s
}

fn host(inputs: &[Vec<f32>], j: usize) -> f32 {
    let mut v = inputs[0][j] + inputs[0][j];
    for (i, x) in inputs.iter().enumerate().skip(1) {
        v = if i % 2 == 1 { v * x[j] } else { v + x[j] };
    }
    v
}

fn inputs(n: usize, len: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            (0..len)
                .map(|j| 1.0 + ((i * 7 + j * 3) % 11) as f32 / 64.0)
                .collect()
        })
        .collect()
}

#[test]
fn elementwise_over_90_buffers_is_cut_into_kernels_that_fit() {
    let (n, len) = (90, 64);
    let src = program(
        n,
        len,
        &format!("  return LAST : tensor<{len}xf32>\n"),
        &format!("tensor<{len}xf32>"),
    );
    let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(exe.kernels().len() >= 3, "{} kernels", exe.kernels().len());
    let max = device().limits().max_storage_buffers_per_shader_stage as usize;
    for k in exe.kernels() {
        assert!(k.inputs.len() + k.outputs.len() <= max, "{}", k.name);
    }
    let xs = inputs(n, len);
    let args: Vec<DeviceBuffer> = xs.iter().map(|x| upload(x)).collect();
    let out = exe.execute_blocking(&args).unwrap();
    let got = out[0].read_to_host_blocking().unwrap();
    for j in 0..len {
        let g = f32::from_le_bytes([got[4 * j], got[4 * j + 1], got[4 * j + 2], got[4 * j + 3]]);
        let w = host(&xs, j);
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "[{j}] {g} vs {w}");
    }
}

#[test]
fn reduction_of_an_expression_over_70_buffers() {
    let (n, len) = (70, 32);
    let tail = format!(
        "  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  \
         %r = stablehlo.reduce(LAST init: %z) applies stablehlo.add across dimensions = [0] \
         : (tensor<{len}xf32>, tensor<f32>) -> tensor<f32>\n  return %r : tensor<f32>\n"
    );
    let src = program(n, len, &tail, "tensor<f32>");
    let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let xs = inputs(n, len);
    let args: Vec<DeviceBuffer> = xs.iter().map(|x| upload(x)).collect();
    let out = exe.execute_blocking(&args).unwrap();
    let got = out[0].read_to_host_blocking().unwrap();
    let g = f32::from_le_bytes([got[0], got[1], got[2], got[3]]);
    let w: f32 = (0..len).map(|j| host(&xs, j)).sum();
    assert!((g - w).abs() <= 1e-4 * w.abs(), "{g} vs {w}");
}
