//! A submission that runs past the wait deadline (`WGPU_HLO_TIMEOUT`, here set with
//! `set_wait_timeout`) fails every wait on it with DEADLINE_EXCEEDED naming the execution,
//! within about a second of the deadline, instead of blocking until the work ends.

use std::time::{Duration, Instant};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::{set_wait_timeout, Device};
use wgpu_hlo::ErrorKind;

/// `n` chained 1024x1024 matmuls in a counted loop.
fn program(n: u32) -> String {
    format!(
        r#"
func.func @main(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {{
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<{n}> : tensor<i32>
  %ri, %rx = stablehlo.while(%i = %i0, %v = %x) : tensor<i32>, tensor<1024x1024xf32>
  cond {{
    %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }} do {{
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %m = stablehlo.dot_general %v, %v, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    stablehlo.return %i1, %m : tensor<i32>, tensor<1024x1024xf32>
  }}
  return %rx : tensor<1024x1024xf32>
}}"#
    )
}

#[test]
fn a_wait_past_the_deadline_is_an_error() {
    let dev = Device::open().expect("a wgpu adapter");
    let ty = TensorType::new(vec![1024, 1024], ElementType::F32);
    let bytes: Vec<u8> = (0..1024 * 1024)
        .flat_map(|_| 1e-3f32.to_le_bytes())
        .collect();
    let arg = dev.upload(&ty, &bytes).expect("upload");
    let o = CompileOptions {
        name: Some("slow_loop".into()),
        ..Default::default()
    };
    // Grow the loop until one execution takes at least 1.5 s on this adapter (at most 200
    // matmuls: one submission, so the submitting thread never waits in the driver).
    let mut n = 1;
    let (exe, took) = loop {
        let exe = compile(&dev, program(n).as_bytes(), &o).expect("compile");
        // The shorter of two runs: the first may include the driver's compile (llvmpipe builds
        // a kernel at its first dispatch) or another process's load, and a deadline taken from
        // it could lie past the whole of a later run.
        let mut took = Duration::MAX;
        for _ in 0..2 {
            let start = Instant::now();
            let (_, done) = exe
                .execute(std::slice::from_ref(&arg), &[])
                .expect("execute");
            done.wait().expect("a run within the default deadline");
            took = took.min(start.elapsed());
        }
        if took >= Duration::from_millis(1500) || n >= 200 {
            break (exe, took);
        }
        n = (n * 4).min(200);
    };
    if took < Duration::from_millis(1500) {
        eprintln!("skipped: 200 matmuls of 1024^2 take only {took:?} on this adapter");
        return;
    }
    set_wait_timeout(took / 10);
    let start = Instant::now();
    let r = exe
        .execute(&[arg], &[])
        .and_then(|(outs, done)| done.wait().and_then(|()| outs[0].read_to_host_blocking()));
    let e = r.expect_err("the wait must end at the deadline");
    assert_eq!(e.kind, ErrorKind::DeadlineExceeded, "{e}");
    assert!(e.message.contains("slow_loop"), "{e}");
    assert!(start.elapsed() < took, "{:?} vs {took:?}", start.elapsed());
    // The watchdog then finds the submission overdue: the device is unusable afterwards and
    // later calls fail at once, naming the cause.
    std::thread::sleep(Duration::from_millis(1500));
    let later = dev
        .upload(&ty, &bytes)
        .expect_err("a device past its deadline");
    assert_eq!(later.kind, ErrorKind::Unavailable, "{later}");
    assert!(later.message.contains("timed out"), "{later}");
}
