//! The execute path without waste: the raw-wgpu floor, the bounded bind group cache (same
//! results over many calls with changing inputs, no growth past its bound) and per-kernel GPU
//! times from timestamp queries.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::{Device, DeviceBuffer};

/// A small bound, so the test sees eviction.
const BOUND: usize = 8;

/// The adapter, with the bind group cache bounded to `BOUND` (set before the device exists).
fn dev() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| {
        std::env::set_var("WGPU_HLO_BIND_GROUPS", BOUND.to_string());
        Device::open().expect("a wgpu adapter")
    })
    .clone()
}

const PROGRAM: &str = r#"func.func @main(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) {
  %a = stablehlo.multiply %x, %y : tensor<64xf32>
  %b = stablehlo.add %a, %x : tensor<64xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%b init: %z) applies stablehlo.add across dimensions = [0] : (tensor<64xf32>, tensor<f32>) -> tensor<f32>
  return %b, %r : tensor<64xf32>, tensor<f32>
}
"#;

fn upload(v: &[f32]) -> DeviceBuffer {
    let t = TensorType::new(vec![v.len() as i64], ElementType::F32);
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    dev().upload(&t, &bytes).unwrap()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn the_floor_is_a_small_positive_time() {
    let ms = dev().raw_floor_ms(20).unwrap();
    assert!(ms.is_finite() && ms > 0.0 && ms < 1000.0, "floor {ms} ms");
}

#[test]
fn bind_groups_are_reused_and_bounded() {
    let d = dev();
    let exe = compile(&d, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let before = d.bind_group_stats();
    // Buffers kept alive across calls force ever new buffer sets (past the bound); buffers
    // dropped at once come back from the pool and hit the cache.
    let mut kept = Vec::new();
    for call in 0..120 {
        let x: Vec<f32> = (0..64).map(|i| (i + call) as f32 * 0.25).collect();
        let y: Vec<f32> = (0..64)
            .map(|i| ((i * 7 + call) % 13) as f32 - 6.0)
            .collect();
        let (bx, by) = (upload(&x), upload(&y));
        let outs = exe.execute_blocking(&[bx.clone(), by.clone()]).unwrap();
        let b = f32s(&outs[0].read_to_host_blocking().unwrap());
        let r = f32s(&outs[1].read_to_host_blocking().unwrap())[0];
        let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| x * y + x).collect();
        assert_eq!(b, want, "call {call}");
        let sum: f64 = want.iter().map(|&v| f64::from(v)).sum();
        assert!(
            (f64::from(r) - sum).abs() <= 1e-4 * sum.abs().max(1.0),
            "call {call}"
        );
        if call % 3 == 0 && call < 60 {
            kept.push((bx, by, outs));
        }
        let s = d.bind_group_stats();
        assert!(s.cached <= BOUND, "{s:?}");
    }
    let after = d.bind_group_stats();
    assert_eq!(after.limit, BOUND);
    assert!(after.hits > before.hits + 50, "{before:?} -> {after:?}");
    drop(kept);
}

#[test]
fn kernels_are_timed_by_name() {
    let d = dev();
    let exe = compile(&d, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let x = upload(&[1.0; 64]);
    let y = upload(&[2.0; 64]);
    if !d.has_timestamps() {
        let e = exe.execute_profiled(&[x, y]).unwrap_err();
        assert_eq!(e.kind, wgpu_hlo::ErrorKind::Unimplemented);
        return;
    }
    let (outs, times) = exe.execute_profiled(&[x, y]).unwrap();
    assert_eq!(f32s(&outs[1].read_to_host_blocking().unwrap()), vec![192.0]);
    let names: Vec<String> = exe.kernels().iter().map(|k| k.name.clone()).collect();
    assert!(!times.kernels.is_empty());
    for k in &times.kernels {
        assert!(names.contains(&k.name), "{} not in {names:?}", k.name);
        assert!(k.dispatches >= 1 && k.ms.is_finite() && k.ms >= 0.0 && k.inside_ms >= 0.0);
    }
    // The kernels' times add up to the span.
    let total: f64 = times.kernels.iter().map(|k| k.ms).sum();
    assert!((total - times.span_ms).abs() <= 1e-6 * times.span_ms.max(1.0));
}
