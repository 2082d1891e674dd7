//! Host calls (`custom_call @wgpu.host_callback`) on a real adapter: the device work before a
//! call is read back, the registered handler runs, its results flow on — inside loops too,
//! in order — and a missing handler or a failing one is an error, not a wrong answer.

use std::sync::{Arc, Mutex};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::error::ErrorKind;
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::host_call::{self, HostArg, HostResult};
use wgpu_hlo::runtime::Device;

const PROGRAM: &str = r#"
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = stablehlo.add %x, %x : tensor<4xf32>
  %t = stablehlo.create_token : !stablehlo.token
  %r:2 = stablehlo.custom_call @wgpu.host_callback(%t, %a) {backend_config = "7", has_side_effect = true} : (!stablehlo.token, tensor<4xf32>) -> (!stablehlo.token, tensor<4xf32>)
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %w:3 = stablehlo.while(%i = %c0, %tok = %r#0, %v = %r#1) : tensor<i32>, !stablehlo.token, tensor<4xf32>
  cond {
    %n = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %one : tensor<i32>
    %s:2 = stablehlo.custom_call @wgpu.host_callback(%tok, %i, %v) {backend_config = "8", has_side_effect = true} : (!stablehlo.token, tensor<i32>, tensor<4xf32>) -> (!stablehlo.token, tensor<4xf32>)
    stablehlo.return %j, %s#0, %s#1 : tensor<i32>, !stablehlo.token, tensor<4xf32>
  }
  %o = stablehlo.multiply %w#2, %x : tensor<4xf32>
  return %o : tensor<4xf32>
}
"#;

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn host_calls_run_between_device_work() {
    let dev = Device::open().expect("a wgpu adapter (install mesa-vulkan-drivers)");
    let exe = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).expect("compiles");
    assert!(exe.program_listing().contains("host call #7"));
    let ty = TensorType::new(vec![4], ElementType::F32);
    let x = dev
        .upload(&ty, &bytes(&[1.0, 2.0, 3.0, 4.0]))
        .expect("upload");

    // Without a handler: a clear error.
    host_call::set_handler(None);
    let e = exe.execute_blocking(std::slice::from_ref(&x)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::FailedPrecondition, "{e}");
    assert!(e.message.contains("handler"), "{e}");

    // #7 adds 10; #8 records the loop index and adds it. The loop's calls come in order.
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    host_call::set_handler(Some(Arc::new(
        move |id: u64, args: &[HostArg<'_>], results: &mut [HostResult<'_>]| {
            let (last, head) = args.split_last().ok_or("no operands")?;
            if !args[0].data.is_empty() || !results[0].data.is_empty() {
                return Err("tokens are empty tensors".into());
            }
            let add = match id {
                7 => 10.0,
                8 => {
                    let i = i32::from_le_bytes(head[1].data.try_into().map_err(|_| "i32")?);
                    seen.lock().map_err(|_| "poisoned")?.push(i);
                    i as f32
                }
                _ => return Err(format!("unknown host function {id}")),
            };
            let v: Vec<f32> = f32s(last.data).iter().map(|x| x + add).collect();
            results[1].data.copy_from_slice(&bytes(&v));
            Ok(())
        },
    )));
    for _ in 0..2 {
        let out = exe
            .execute_blocking(std::slice::from_ref(&x))
            .expect("runs");
        let got = f32s(&out[0].read_to_host_blocking().expect("read"));
        // (2x + 10 + 0 + 1 + 2) * x
        let want: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .map(|x| (2.0 * x + 13.0) * x)
            .collect();
        assert_eq!(got, want);
    }
    assert_eq!(*log.lock().expect("log"), vec![0, 1, 2, 0, 1, 2]);

    // A failing host function fails the execution with its message.
    host_call::set_handler(Some(Arc::new(
        |_: u64, _: &[HostArg<'_>], _: &mut [HostResult<'_>]| Err("ValueError: nope".into()),
    )));
    let e = exe.execute_blocking(std::slice::from_ref(&x)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("ValueError: nope"), "{e}");
    host_call::set_handler(None);
}
