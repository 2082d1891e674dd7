//! A lost device (destroyed as a driver reset or an unplugged GPU would lose it) makes every
//! later call UNAVAILABLE: never a hang or a panic.

use std::time::{Duration, Instant};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;
use wgpu_hlo::ErrorKind;
const ADD: &str = r#"
func.func @main(%x: tensor<256xf32>) -> tensor<256xf32> {
  %r = stablehlo.add %x, %x : tensor<256xf32>
  return %r : tensor<256xf32>
}"#;

#[test]
fn a_lost_device_fails_every_later_call() {
    // A healthy device dropped after a call stops every thread that holds it (its pollers
    // and its watchdog) before the drop returns. The watchdog was not joined, and on an H200
    // it dropped the last handle after `main` had returned: it destroyed the device inside
    // NVIDIA's driver while the exit handlers tore that down, a SIGSEGV at the exit of most
    // JAX processes. On lavapipe only the thread count shows it.
    {
        let dev = Device::open().expect("a wgpu adapter");
        let exe = compile(&dev, ADD.as_bytes(), &CompileOptions::default()).expect("compile");
        let ty = TensorType::new(vec![256], ElementType::F32);
        let arg = dev.upload(&ty, &[0u8; 1024]).expect("upload");
        let (outs, _) = exe.execute(&[arg], &[]).expect("execute");
        assert!(outs[0].read_to_host_blocking().is_ok());
        assert_eq!(threads_named("wgpu-hlo-watchd"), 1);
    }
    assert_eq!(threads_named("wgpu-hlo-watchd"), 0);
    assert_eq!(threads_named("wgpu-hlo-poller"), 0);

    // Lost device: every later call is UNAVAILABLE.
    let dev = Device::open().expect("a wgpu adapter");
    let exe = compile(&dev, ADD.as_bytes(), &CompileOptions::default()).expect("compile");
    let ty = TensorType::new(vec![256], ElementType::F32);
    let arg = dev.upload(&ty, &[0u8; 1024]).expect("upload");
    let (outs, _) = exe
        .execute(std::slice::from_ref(&arg), &[])
        .expect("execute");
    assert!(outs[0].read_to_host_blocking().is_ok());
    dev.destroy();
    let start = Instant::now();
    let after = exe
        .execute(&[arg], &[])
        .and_then(|(outs, _)| outs[0].read_to_host_blocking());
    let e = after.expect_err("a call on a lost device must fail");
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(dev.upload(&ty, &[0u8; 1024]).is_err());
    assert!(start.elapsed() < Duration::from_secs(30));

    // Dropping the last handle stops the poller thread before the drop returns: left
    // running, its copy of the device unloaded the driver while `main` was already running
    // the exit handlers, a SIGSEGV at exit that CI hit once in a few hundred runs.
    drop((exe, e, dev, outs));
    assert_eq!(threads_named("wgpu-hlo-poller"), 0);
    assert_eq!(threads_named("wgpu-hlo-watchd"), 0);
}

/// Threads of this process with `name` (Linux; 0 elsewhere).
fn threads_named(name: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}
