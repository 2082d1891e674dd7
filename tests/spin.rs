//! On a CPU adapter (lavapipe) a short execution is completed by the thread that submitted it
//! (a bounded non-blocking poll, `Poller::spin`): `execute` returns its event already
//! complete, with the right numbers. A long one never spins: `execute` returns while the
//! device still runs it, so a framework can enqueue ahead.

use std::sync::Arc;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::{Device, DeviceBuffer};

const TINY: &str = r#"
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %one = stablehlo.constant dense<1.0> : tensor<4xf32>
  %r = stablehlo.add %x, %one : tensor<4xf32>
  return %r : tensor<4xf32>
}"#;

const MATMUL: &str = r#"
func.func @main(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %m = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %m : tensor<1024x1024xf32>
}"#;

/// The device, if its adapter is a CPU (the only kind that spins unless `WGPU_HLO_SPIN_US`
/// says otherwise).
fn cpu_device() -> Option<Arc<Device>> {
    let dev = Device::open().expect("a wgpu adapter");
    if dev.info().device_type != "Cpu" || std::env::var_os("WGPU_HLO_SPIN_US").is_some() {
        eprintln!(
            "skipped: {} is not a CPU adapter at default settings",
            dev.info()
        );
        return None;
    }
    Some(dev)
}

fn floats(buf: &DeviceBuffer) -> Vec<f32> {
    buf.read_to_host_blocking()
        .expect("read back")
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn short_executions_return_complete() {
    let Some(dev) = cpu_device() else { return };
    let exe = compile(&dev, TINY.as_bytes(), &CompileOptions::default()).expect("compile");
    let ty = TensorType::new(vec![4], ElementType::F32);
    let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut x = dev.upload(&ty, &bytes).expect("upload");
    x.ready().wait().expect("upload done");
    let calls = 200;
    let mut complete = 0;
    for _ in 0..calls {
        let (mut outs, done) = exe.execute(&[x], &[]).expect("execute");
        if done.is_ready() {
            complete += 1;
        }
        done.wait().expect("execution");
        x = outs.remove(0);
    }
    assert_eq!(floats(&x), vec![201.0, 202.0, 203.0, 204.0]);
    eprintln!("{complete} of {calls} short executions returned complete");
    // Each call after the first may spin; on a loaded machine some spins run out. Most of
    // them finish in time (about all on an idle 2-core machine).
    assert!(
        complete >= calls / 4,
        "only {complete} of {calls} short executions returned complete"
    );
}

#[test]
fn long_executions_do_not_spin() {
    let Some(dev) = cpu_device() else { return };
    let exe = compile(&dev, MATMUL.as_bytes(), &CompileOptions::default()).expect("compile");
    let ty = TensorType::new(vec![1024, 1024], ElementType::F32);
    let bytes: Vec<u8> = (0..1024 * 1024)
        .flat_map(|i| ((i % 7) as f32 * 1e-3).to_le_bytes())
        .collect();
    let x = dev.upload(&ty, &bytes).expect("upload");
    x.ready().wait().expect("upload done");
    for call in 0..3 {
        let (outs, done) = exe.execute(std::slice::from_ref(&x), &[]).expect("execute");
        // A 1024² matmul runs for tens of milliseconds on lavapipe: had `execute` waited for
        // it, the event would be complete here.
        assert!(!done.is_ready(), "call {call} returned complete");
        done.wait().expect("execution");
        assert_eq!(outs[0].ty(), &ty);
    }
}
