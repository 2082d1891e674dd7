//! Arithmetic with constant zeros, infinities and NaNs follows IEEE 754 as StableHLO defines
//! it, whatever the driver's shader compiler folds: lavapipe turned `x / 0.0` into 0 for every
//! `x` (so `jnp.cov` of one observation gave 0 instead of NaN), because the constant reached
//! its fast-math folding. Such constants are now built at run time.

use std::sync::Arc;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

fn run(op: &str, constant: &str, x: &[f32]) -> Vec<f32> {
    let dev: Arc<Device> = Device::open().expect("a wgpu adapter");
    let n = x.len();
    let src = format!(
        "func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n  \
         %c = stablehlo.constant dense<{constant}> : tensor<{n}xf32>\n  \
         %y = stablehlo.{op} %x, %c : tensor<{n}xf32>\n  \
         return %y : tensor<{n}xf32>\n}}\n"
    );
    let exe = compile(&dev, src.as_bytes(), &CompileOptions::default()).unwrap();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let arg = dev
        .upload(&TensorType::new(vec![n as i64], ElementType::F32), &bytes)
        .unwrap();
    let out = exe.execute_blocking(&[arg]).unwrap();
    let b = out[0].read_to_host_blocking().unwrap();
    b.chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn same(got: &[f32], want: &[f32]) -> bool {
    got.iter()
        .zip(want)
        .all(|(g, w)| (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits())
}

#[test]
fn division_by_constant_zero_is_ieee() {
    let x = [0.0f32, 1.5, -2.0, f32::INFINITY, f32::NAN];
    for (constant, z) in [("0.0", 0.0f32), ("-0.0", -0.0f32)] {
        let got = run("divide", constant, &x);
        let want: Vec<f32> = x.iter().map(|v| v / z).collect();
        assert!(same(&got, &want), "x / {constant}: {got:?} vs {want:?}");
    }
}

#[test]
fn multiply_and_add_with_constant_inf_nan_and_zero_are_ieee() {
    let x = [0.0f32, 1.5, -2.0, f32::INFINITY, f32::NAN];
    for (op, constant, c, f) in [
        (
            "multiply",
            "0x7F800000",
            f32::INFINITY,
            (|a: f32, b: f32| a * b) as fn(f32, f32) -> f32,
        ),
        ("multiply", "0.0", 0.0, |a, b| a * b),
        ("add", "0x7FC00000", f32::NAN, |a, b| a + b),
        ("subtract", "0xFF800000", f32::NEG_INFINITY, |a, b| a - b),
    ] {
        let got = run(op, constant, &x);
        let want: Vec<f32> = x.iter().map(|&v| f(v, c)).collect();
        assert!(same(&got, &want), "{op} {constant}: {got:?} vs {want:?}");
    }
}

/// Runs a one-result program over `x` as raw f32 words (complex64 as pairs).
fn run_words(src: &str, ty: TensorType, x: &[f32]) -> Vec<f32> {
    let dev: Arc<Device> = Device::open().expect("a wgpu adapter");
    let exe = compile(&dev, src.as_bytes(), &CompileOptions::default()).unwrap();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = exe
        .execute_blocking(&[dev.upload(&ty, &bytes).unwrap()])
        .unwrap();
    let b = out[0].read_to_host_blocking().unwrap();
    b.chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn twice_a_product_is_not_refactored() {
    // 2 * (a * b), jaxlib's imaginary part of a complex square: Mesa turned it into
    // b * (a + a), inf for a = FLT_MAX and 1e-45 where a * b underflows to 0.
    let (a, b) = (
        [f32::MAX, 1.1754944e-38, 2.3043282e-23, 1.5],
        [1.0202491e-15, 4.5171873e-8, 2.3043282e-23, -2.5],
    );
    let src = "func.func @main(%x: tensor<2x4xf32>) -> tensor<4xf32> {\n  \
               %a = stablehlo.slice %x [0:1, 0:4] : (tensor<2x4xf32>) -> tensor<1x4xf32>\n  \
               %b = stablehlo.slice %x [1:2, 0:4] : (tensor<2x4xf32>) -> tensor<1x4xf32>\n  \
               %ra = stablehlo.reshape %a : (tensor<1x4xf32>) -> tensor<4xf32>\n  \
               %rb = stablehlo.reshape %b : (tensor<1x4xf32>) -> tensor<4xf32>\n  \
               %p = stablehlo.multiply %ra, %rb : tensor<4xf32>\n  \
               %two = stablehlo.constant dense<2.0> : tensor<4xf32>\n  \
               %y = stablehlo.multiply %two, %p : tensor<4xf32>\n  \
               return %y : tensor<4xf32>\n}\n";
    let x: Vec<f32> = a.iter().chain(&b).copied().collect();
    let got = run_words(src, TensorType::new(vec![2, 4], ElementType::F32), &x);
    let want: Vec<f32> = a.iter().zip(&b).map(|(a, b)| 2.0 * (a * b)).collect();
    assert!(same(&got, &want), "{got:?} vs {want:?}");
}

#[test]
fn complex_square_keeps_its_range() {
    // chlo.square on complex64 (wh_csquare_f32): (re^2 - im^2, 2 re im) without the
    // refactoring above.
    let z = [
        (f32::MAX, 1.0202491e-15),
        (1.1754944e-38, 4.5171873e-8),
        (1.5, -2.5),
    ];
    let src = "func.func @main(%z: tensor<3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {\n  \
               %y = chlo.square %z : tensor<3xcomplex<f32>> -> tensor<3xcomplex<f32>>\n  \
               return %y : tensor<3xcomplex<f32>>\n}\n";
    let x: Vec<f32> = z.iter().flat_map(|&(r, i)| [r, i]).collect();
    let got = run_words(src, TensorType::new(vec![3], ElementType::C64), &x);
    for (k, &(r, i)) in z.iter().enumerate() {
        let (gr, gi) = (got[2 * k], got[2 * k + 1]);
        assert_eq!(
            gi.to_bits(),
            (2.0 * (r * i)).to_bits(),
            "imag of square({r}, {i}): {gi}"
        );
        let wr = r * r - i * i;
        assert!(
            gr.to_bits() == wr.to_bits() || (wr.is_infinite() && gr == wr),
            "real of square({r}, {i}): {gr}, want {wr}"
        );
    }
}
