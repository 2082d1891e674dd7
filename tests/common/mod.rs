//! Helpers shared by the integration tests: one adapter per test binary, deterministic data,
//! f32 uploads and read-backs, host references. Each test binary uses a subset.
#![allow(dead_code)]

pub mod conv;
pub mod hlo_sample;

use std::sync::{Arc, OnceLock};

use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::{Device, DeviceBuffer};

/// The adapter, opened once per test binary.
pub fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `v` as a `tensor<shape x f32>` on the device.
pub fn upload_f32(shape: &[usize], v: &[f32]) -> DeviceBuffer {
    let t = TensorType::new(shape.iter().map(|&d| d as i64).collect(), ElementType::F32);
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    device().upload(&t, &bytes).unwrap()
}

/// Little-endian f32s.
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Host reference of `sum(a * a)` over the axes of `shape` not in `kept`, in f64: one value
/// per position of the kept axes, row-major.
pub fn sum_of_squares(shape: &[usize], kept: &[usize], a: &[f32]) -> Vec<f64> {
    let len = kept.iter().map(|&d| shape[d]).product::<usize>();
    let mut want = vec![0f64; len];
    for (i, &x) in a.iter().enumerate() {
        let mut rem = i;
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let o = kept.iter().fold(0, |o, &d| o * shape[d] + idx[d]);
        want[o] += x as f64 * x as f64;
    }
    want
}
