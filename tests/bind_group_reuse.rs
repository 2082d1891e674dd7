//! A loop that feeds a program's results back binds the buffers it bound before, so that its
//! dispatches find their bind groups cached (its own device: the miss count is this test's).

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::{Device, DeviceBuffer};

/// Four states updated by separate kernels (a softmax row-normalization each, so that
/// temporaries of the same size come and go between them), fed back every call, as a
/// training step's parameters and optimizer states are.
const PROGRAM: &str = r#"func.func @main(%a: tensor<8x64xf32>, %b: tensor<8x64xf32>, %c: tensor<8x64xf32>, %d: tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<8x64xf32>, tensor<f32>) -> tensor<8xf32>
  %sb = stablehlo.broadcast_in_dim %s, dims = [0] : (tensor<8xf32>) -> tensor<8x64xf32>
  %a1 = stablehlo.divide %a, %sb : tensor<8x64xf32>
  %b1 = stablehlo.add %b, %a1 : tensor<8x64xf32>
  %t = stablehlo.reduce(%b1 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<8x64xf32>, tensor<f32>) -> tensor<8xf32>
  %tb = stablehlo.broadcast_in_dim %t, dims = [0] : (tensor<8xf32>) -> tensor<8x64xf32>
  %b2 = stablehlo.divide %b1, %tb : tensor<8x64xf32>
  %c1 = stablehlo.add %c, %b2 : tensor<8x64xf32>
  %u = stablehlo.reduce(%c1 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<8x64xf32>, tensor<f32>) -> tensor<8xf32>
  %ub = stablehlo.broadcast_in_dim %u, dims = [0] : (tensor<8xf32>) -> tensor<8x64xf32>
  %c2 = stablehlo.divide %c1, %ub : tensor<8x64xf32>
  %d1 = stablehlo.add %d, %c2 : tensor<8x64xf32>
  return %a1, %b2, %c2, %d1 : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>
}
"#;

fn upload(dev: &std::sync::Arc<Device>, v: f32) -> DeviceBuffer {
    let t = TensorType::new(vec![8, 64], ElementType::F32);
    let bytes: Vec<u8> = (0..512)
        .flat_map(|i| (v + i as f32).to_le_bytes())
        .collect();
    dev.upload(&t, &bytes).unwrap()
}

#[test]
fn a_loop_that_feeds_results_back_binds_what_it_bound() {
    let dev = Device::open().expect("a wgpu adapter");
    let exe = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let mut state: Vec<DeviceBuffer> = (0..4).map(|i| upload(&dev, 1.0 + i as f32)).collect();
    let mut misses = Vec::new();
    for call in 0..24usize {
        let outs = exe.execute_blocking(&state).unwrap();
        // The old states go in another order each call, as jaxlib drops a step's arrays.
        let mut old: Vec<Option<DeviceBuffer>> = std::mem::replace(&mut state, outs)
            .into_iter()
            .map(Some)
            .collect();
        let mut order: Vec<usize> = (0..4).collect();
        order.sort_by_key(|&k| (call * 2654435761 + k * 40503) % 1000003);
        for k in order {
            drop(old[k].take());
        }
        misses.push(dev.bind_group_stats().misses);
    }
    let last = state[3].read_to_host_blocking().unwrap();
    assert!(last
        .chunks(4)
        .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()));
    assert_eq!(
        misses[8], misses[23],
        "bind groups made after warm-up: {misses:?}"
    );
}
