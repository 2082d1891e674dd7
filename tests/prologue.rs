//! Prologue fusion (`fusion::prologue`, `codegen::prologue`): cheap loop kernels computing a
//! dot's operands run inside the dot's kernel, where it reads them, and compute what they
//! compute apart. A producer read elsewhere too, or one with transcendental functions, stays a
//! kernel of its own, and on CPU adapters one reading two buffers or rounding floats for a
//! large dot. The CPU-class run covers the shared-rows kernel's `vec4` reads, the GPU-class
//! run (`scripts/test.sh`) the tiled kernel's tile loads.

mod common;

use common::{data, device, f32s, upload_f32};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::runtime::executable::Executable;
use wgpu_hlo::runtime::DeviceBuffer;

/// `x` rounded to bf16 (to nearest, ties to even; no NaNs here).
fn bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let r = 0x7fff + ((b >> 16) & 1);
    f32::from_bits(b.wrapping_add(r) & 0xffff_0000)
}

fn build(src: &str) -> std::sync::Arc<Executable> {
    compile(&device(), src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn run(exe: &Executable, inputs: &[DeviceBuffer]) -> Vec<Vec<f32>> {
    exe.execute_blocking(inputs)
        .unwrap()
        .iter()
        .map(|o| f32s(&o.read_to_host_blocking().unwrap()))
        .collect()
}

/// `got` against `want` (f64) for an f32 accumulation of `k` terms of magnitude <= 1.
fn close(what: &str, got: &[f32], want: &[f64], k: usize) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-6 * (k as f64).sqrt() * 4.0 + 1e-6 * w.abs();
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// Row-major `a` (m x k) times `b` read at `b(kk, j)`, in f64.
fn matmul(a: &[f32], m: usize, k: usize, n: usize, b: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|kk| a[i * k + kk] as f64 * b(kk, j)).sum();
        }
    }
    out
}

#[test]
fn producers_run_inside_the_dot() {
    let cpu = wgpu_hlo::compile::target(&device()).cpu_adapter;

    // A bf16 layer: both converts read inside the dot, the bias and relu at its stores.
    let (m, k, n) = (70, 96, 130);
    let src = format!(
        "func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32>, %b: tensor<{n}xf32>) -> tensor<{m}x{n}xf32> {{\n\
  %xb = stablehlo.convert %x : (tensor<{m}x{k}xf32>) -> tensor<{m}x{k}xbf16>\n\
  %wb = stablehlo.convert %w : (tensor<{k}x{n}xf32>) -> tensor<{k}x{n}xbf16>\n\
  %d = stablehlo.dot_general %xb, %wb, contracting_dims = [1] x [0] : (tensor<{m}x{k}xbf16>, tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xf32>\n\
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<{n}xf32>) -> tensor<{m}x{n}xf32>\n\
  %s = stablehlo.add %d, %bb : tensor<{m}x{n}xf32>\n\
  %z = stablehlo.constant dense<0.0> : tensor<{m}x{n}xf32>\n\
  %r = stablehlo.maximum %s, %z : tensor<{m}x{n}xf32>\n\
  return %r : tensor<{m}x{n}xf32>\n}}\n"
    );
    let exe = build(&src);
    let (x, w, b) = (data(m * k, 1), data(k * n, 2), data(n, 3));
    let got = run(
        &exe,
        &[
            upload_f32(&[m, k], &x),
            upload_f32(&[k, n], &w),
            upload_f32(&[n], &b),
        ],
    );
    let xr: Vec<f32> = x.iter().map(|&v| bf16(v)).collect();
    let want: Vec<f64> = matmul(&xr, m, k, n, |kk, j| bf16(w[kk * n + j]) as f64)
        .iter()
        .enumerate()
        .map(|(i, d)| (d + b[i % n] as f64).max(0.0))
        .collect();
    close("bf16 layer", &got[0], &want, k);
    let names: Vec<&str> = exe.kernels().iter().map(|k| k.name.as_str()).collect();
    // One kernel, or two where the dot kernel takes no epilogue (CPU adapters' large tiles).
    assert!(names.len() <= 2, "{names:?}");
    assert!(
        exe.kernels()[0].wgsl.contains("fn wh_operand0(")
            && exe.kernels()[0].wgsl.contains("fn wh_operand1("),
        "{}",
        exe.kernels()[0].wgsl
    );

    // A larger bf16 matmul (16.8M multiply-adds): on CPU adapters the rounding converts
    // run as kernels of their own, since the register-tiled dot would round every operand
    // element at each of its many reads; GPU-class kernels round once per tile load.
    let (m, k, n) = (256, 256, 256);
    let src = format!(
        "func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n\
  %xb = stablehlo.convert %x : (tensor<{m}x{k}xf32>) -> tensor<{m}x{k}xbf16>\n\
  %wb = stablehlo.convert %w : (tensor<{k}x{n}xf32>) -> tensor<{k}x{n}xbf16>\n\
  %d = stablehlo.dot_general %xb, %wb, contracting_dims = [1] x [0] : (tensor<{m}x{k}xbf16>, tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xf32>\n\
  return %d : tensor<{m}x{n}xf32>\n}}\n"
    );
    let exe = build(&src);
    let (x, w) = (data(m * k, 10), data(k * n, 11));
    let got = run(&exe, &[upload_f32(&[m, k], &x), upload_f32(&[k, n], &w)]);
    let xr: Vec<f32> = x.iter().map(|&v| bf16(v)).collect();
    close(
        "bf16 256^3",
        &got[0],
        &matmul(&xr, m, k, n, |kk, j| bf16(w[kk * n + j]) as f64),
        k,
    );
    let fused = exe
        .kernels()
        .iter()
        .any(|k| k.wgsl.contains("fn wh_operand"));
    assert_eq!(
        fused,
        !cpu,
        "{:?}",
        exe.kernels().iter().map(|k| &k.name).collect::<Vec<_>>()
    );

    // A masked gradient (relu's derivative) times a transposed weight: two reads per element,
    // and the transposed operand not fused.
    let (m, k, n) = (64, 200, 150);
    let src = format!(
        "func.func @main(%h: tensor<{m}x{k}xf32>, %g: tensor<{m}x{k}xf32>, %w: tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32> {{\n\
  %z = stablehlo.constant dense<0.0> : tensor<{m}x{k}xf32>\n\
  %p = stablehlo.compare GT, %h, %z : (tensor<{m}x{k}xf32>, tensor<{m}x{k}xf32>) -> tensor<{m}x{k}xi1>\n\
  %gm = stablehlo.select %p, %g, %z : (tensor<{m}x{k}xi1>, tensor<{m}x{k}xf32>, tensor<{m}x{k}xf32>) -> tensor<{m}x{k}xf32>\n\
  %d = stablehlo.dot_general %gm, %w, contracting_dims = [1] x [1] : (tensor<{m}x{k}xf32>, tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32>\n\
  return %d : tensor<{m}x{n}xf32>\n}}\n"
    );
    let exe = build(&src);
    let (h, g, w) = (data(m * k, 4), data(m * k, 5), data(n * k, 6));
    let got = run(
        &exe,
        &[
            upload_f32(&[m, k], &h),
            upload_f32(&[m, k], &g),
            upload_f32(&[n, k], &w),
        ],
    );
    let gm: Vec<f32> = h
        .iter()
        .zip(&g)
        .map(|(&h, &g)| if h > 0.0 { g } else { 0.0 })
        .collect();
    close(
        "masked gradient",
        &got[0],
        &matmul(&gm, m, k, n, |kk, j| w[j * k + kk] as f64),
        k,
    );
    // On CPU adapters a producer of two buffers stays apart.
    assert_eq!(exe.kernels().len(), if cpu { 2 } else { 1 });

    // The same scaled operand on both sides (x x^T).
    let (m, k) = (40, 64);
    let src = format!(
        "func.func @main(%x: tensor<{m}x{k}xf32>) -> tensor<{m}x{m}xf32> {{\n\
  %h = stablehlo.constant dense<0.5> : tensor<{m}x{k}xf32>\n\
  %c = stablehlo.multiply %x, %h : tensor<{m}x{k}xf32>\n\
  %d = stablehlo.dot_general %c, %c, contracting_dims = [1] x [1] : (tensor<{m}x{k}xf32>, tensor<{m}x{k}xf32>) -> tensor<{m}x{m}xf32>\n\
  return %d : tensor<{m}x{m}xf32>\n}}\n"
    );
    let exe = build(&src);
    let x = data(m * k, 7);
    let got = run(&exe, &[upload_f32(&[m, k], &x)]);
    let c: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
    close(
        "x x^T",
        &got[0],
        &matmul(&c, m, k, m, |kk, j| c[j * k + kk] as f64),
        k,
    );
    assert_eq!(exe.kernels().len(), 1);

    // A producer read by another kernel too, and one computing tanh: both stay apart.
    let (m, k, n) = (33, 48, 20);
    let src = format!(
        "func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32>) -> (tensor<{m}x{n}xf32>, tensor<{m}x{k}xf32>, tensor<{m}x{n}xf32>) {{\n\
  %two = stablehlo.constant dense<2.0> : tensor<{m}x{k}xf32>\n\
  %s = stablehlo.multiply %x, %two : tensor<{m}x{k}xf32>\n\
  %d = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n\
  %t = stablehlo.tanh %x : tensor<{m}x{k}xf32>\n\
  %e = stablehlo.dot_general %t, %w, contracting_dims = [1] x [0] : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n\
  return %d, %s, %e : tensor<{m}x{n}xf32>, tensor<{m}x{k}xf32>, tensor<{m}x{n}xf32>\n}}\n"
    );
    let exe = build(&src);
    let (x, w) = (data(m * k, 8), data(k * n, 9));
    let got = run(&exe, &[upload_f32(&[m, k], &x), upload_f32(&[k, n], &w)]);
    let s: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    let t: Vec<f32> = x.iter().map(|v| v.tanh()).collect();
    close(
        "shared producer",
        &got[0],
        &matmul(&s, m, k, n, |kk, j| w[kk * n + j] as f64),
        k,
    );
    close(
        "tanh producer",
        &got[2],
        &matmul(&t, m, k, n, |kk, j| w[kk * n + j] as f64),
        k,
    );
    assert!(
        !exe.kernels()
            .iter()
            .any(|k| k.wgsl.contains("fn wh_operand")),
        "{:?}",
        exe.kernels().iter().map(|k| &k.name).collect::<Vec<_>>()
    );
}
