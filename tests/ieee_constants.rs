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
