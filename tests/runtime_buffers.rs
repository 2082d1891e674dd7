//! Buffers on a real adapter (lavapipe on CI): uploads, read-backs, copies, deletion.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter (install mesa-vulkan-drivers)"))
        .clone()
}

/// The pool's default bound in MiB: 1 GiB on discrete GPUs, else 256 (`runtime::pool`).
fn pool_mib(dev: &Device) -> u64 {
    if dev.info().device_type == "DiscreteGpu" {
        1024
    } else {
        256
    }
}

/// The tests share one device and its pool, and one counts allocations: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn upload_read_back_round_trips_every_width() {
    let _serial = serial();
    let dev = device();
    for (dtype, n) in [
        (ElementType::Pred, 7),
        (ElementType::I8, 5),
        (ElementType::F16, 3),
        (ElementType::F32, 4),
        (ElementType::F64, 2),
        (ElementType::C128, 1),
        (ElementType::F32, 0),
    ] {
        let ty = TensorType::new(vec![n], dtype);
        let bytes: Vec<u8> = (0..ty.byte_size()).map(|i| (i * 37 + 11) as u8).collect();
        let buf = dev.upload(&ty, &bytes).unwrap();
        assert_eq!(buf.read_to_host_blocking().unwrap(), bytes, "{ty}");
        let c = buf.copy().unwrap();
        buf.delete();
        assert!(buf.is_deleted());
        assert!(buf.read_to_host_blocking().is_err());
        assert_eq!(c.read_to_host_blocking().unwrap(), bytes, "copy of {ty}");
    }
}

#[test]
fn wrong_sizes_are_errors() {
    let _serial = serial();
    let dev = device();
    let ty = TensorType::new(vec![3], ElementType::F32);
    assert!(dev.upload(&ty, &[0u8; 11]).is_err());
}

#[test]
fn memory_stats_count_allocations() {
    let _serial = serial();
    let dev = device();
    let before = dev.memory_stats().num_allocs;
    let ty = TensorType::new(vec![1024], ElementType::F32);
    let _b = dev.upload(&ty, &vec![0u8; 4096]).unwrap();
    let s = dev.memory_stats();
    assert!(s.num_allocs > before);
    assert!(s.bytes_in_use >= 4096);
}

/// The pool (256 MiB on lavapipe, 1 GiB on discrete GPUs, or WGPU_HLO_POOL_MB) follows the sizes in use now:
/// a freed buffer that does not fit evicts the least recently pooled ones, so a loop over a
/// new size reuses its buffer instead of allocating one per iteration.
#[test]
fn pool_evicts_the_oldest_for_a_new_size() {
    let _serial = serial();
    if std::env::var("WGPU_HLO_POOL_MB").is_ok() {
        return;
    }
    let dev = device();
    // Sizes in 256ths of the bound (MiB on lavapipe).
    let unit = pool_mib(&dev) << 12;
    let small = TensorType::new(vec![(48 * unit / 4) as i64], ElementType::F32);
    let big = TensorType::new(vec![(96 * unit / 4) as i64], ElementType::F32);
    let zeros = |t: &TensorType| vec![0u8; t.num_elements() * 4];
    // Four buffers of 48/256 of the bound pooled, then one of 96/256, which evicts the oldest.
    let held: Vec<_> = (0..4)
        .map(|_| dev.upload(&small, &zeros(&small)).unwrap())
        .collect();
    drop(held);
    drop(dev.upload(&big, &zeros(&big)).unwrap());
    let pooled = dev.memory_stats().pooled_bytes;
    assert!(pooled <= 256 * unit, "{pooled} bytes pooled");
    let allocs = dev.memory_stats().num_allocs;
    for _ in 0..3 {
        drop(dev.upload(&big, &zeros(&big)).unwrap());
    }
    assert_eq!(
        dev.memory_stats().num_allocs,
        allocs,
        "the larger buffer was not reused"
    );
}

/// A buffer the full pool releases takes only its own cached bind groups along: an
/// executable's stay cached (they used to be cleared on every release).
#[test]
fn released_buffers_keep_other_bind_groups() {
    let _serial = serial();
    if std::env::var("WGPU_HLO_POOL_MB").is_ok() || std::env::var("WGPU_HLO_BIND_GROUPS").is_ok() {
        return;
    }
    let dev = device();
    let unit = pool_mib(&dev) << 12;
    let big = TensorType::new(vec![(60 * unit / 4) as i64], ElementType::F32);
    let zeros = vec![0u8; big.num_elements() * 4];
    // Pool four big buffers (the oldest), then run the program (its output pooled after).
    drop(
        (0..4)
            .map(|_| dev.upload(&big, &zeros).unwrap())
            .collect::<Vec<_>>(),
    );
    let src = "func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {\n  %c = stablehlo.constant dense<2.0> : tensor<64xf32>\n  %y = stablehlo.multiply %x, %c : tensor<64xf32>\n  return %y : tensor<64xf32>\n}\n";
    let exe = wgpu_hlo::compile::compile(&dev, src.as_bytes(), &Default::default()).unwrap();
    let small = TensorType::new(vec![64], ElementType::F32);
    let x = dev.upload(&small, &[0u8; 256]).unwrap();
    drop(exe.execute_blocking(std::slice::from_ref(&x)).unwrap());
    // A big buffer of another size released past the bound evicts the oldest big one.
    let other = TensorType::new(vec![(61 * unit / 4) as i64], ElementType::F32);
    drop(
        dev.upload(&other, &vec![0u8; other.num_elements() * 4])
            .unwrap(),
    );
    let before = dev.bind_group_stats();
    drop(exe.execute_blocking(std::slice::from_ref(&x)).unwrap());
    let after = dev.bind_group_stats();
    assert_eq!(after.misses, before.misses, "{before:?} -> {after:?}");
    assert!(after.hits > before.hits, "{before:?} -> {after:?}");
}

/// A counted loop whose body makes a new loop-carried tensor each iteration reuses the
/// buffers of earlier iterations within the one submission: a carried buffer was retired
/// twice (as the body's result, then as the next iteration's argument), held itself in the
/// run's list of retired buffers and was never reused, so 100 iterations allocated 100
/// buffers (a 4000 x 4000 Cholesky, a loop of 63 blocks: 8.9 GB resident).
#[test]
fn counted_loops_reuse_their_temporaries() {
    let _serial = serial();
    let dev = device();
    // An odd size no other test allocates, so the pool holds none.
    let t = "tensor<263x1001xf32>";
    let src = format!(
        r#"func.func @main(%x: {t}) -> {t} {{
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<100> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %h = stablehlo.constant dense<0.5> : tensor<f32>
  %half = stablehlo.broadcast_in_dim %h, dims = [] : (tensor<f32>) -> {t}
  %ri, %rx = stablehlo.while(%i = %i0, %v = %x) : tensor<i32>, {t}
  cond {{
    %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }} do {{
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %m = stablehlo.multiply %v, %half : {t}
    %v1 = stablehlo.add %m, %half : {t}
    stablehlo.return %i1, %v1 : tensor<i32>, {t}
  }}
  return %rx : {t}
}}"#
    );
    let exe = wgpu_hlo::compile::compile(
        &dev,
        src.as_bytes(),
        &wgpu_hlo::compile::CompileOptions::default(),
    )
    .unwrap();
    let ty = TensorType::new(vec![263, 1001], ElementType::F32);
    let x = dev.upload(&ty, &vec![0u8; ty.byte_size()]).unwrap();
    let before = dev.memory_stats().num_allocs;
    let out = exe.execute_blocking(&[x]).unwrap();
    let allocs = dev.memory_stats().num_allocs - before;
    let got = out[0].read_to_host_blocking().unwrap();
    // x -> x / 2 + 1/2 from 0, 100 times: 1 - 2^-100, which is 1 in f32.
    assert_eq!(&got[..4], &1.0f32.to_le_bytes());
    assert!(allocs <= 12, "100 iterations allocated {allocs} buffers");
}

/// A scan that stacks one row per iteration into its loop state updates the stack in place:
/// the run's list of retired buffers (the previous iteration's argument slots) held the state
/// too, counted as a second holder, so every iteration copied the whole stack first (a GRU's
/// forward scan: nine 800 KB copies per step, 368 MB per call).
#[test]
fn scans_stack_their_outputs_in_place() {
    let _serial = serial();
    let dev = device();
    let src = r#"func.func @main(%x: tensor<256xf32>) -> tensor<100x256xf32> {
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<100> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %f0 = stablehlo.constant dense<0.0> : tensor<f32>
  %s0 = stablehlo.broadcast_in_dim %f0, dims = [] : (tensor<f32>) -> tensor<100x256xf32>
  %ri, %rx, %rs = stablehlo.while(%i = %i0, %v = %x, %s = %s0) : tensor<i32>, tensor<256xf32>, tensor<100x256xf32>
  cond {
    %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %v1 = stablehlo.add %v, %v : tensor<256xf32>
    %row = stablehlo.reshape %v1 : (tensor<256xf32>) -> tensor<1x256xf32>
    %s1 = stablehlo.dynamic_update_slice %s, %row, %i, %z : (tensor<100x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<100x256xf32>
    stablehlo.return %i1, %v1, %s1 : tensor<i32>, tensor<256xf32>, tensor<100x256xf32>
  }
  return %rs : tensor<100x256xf32>
}"#;
    let exe = wgpu_hlo::compile::compile(
        &dev,
        src.as_bytes(),
        &wgpu_hlo::compile::CompileOptions::default(),
    )
    .unwrap();
    let ty = TensorType::new(vec![256], ElementType::F32);
    let x = dev.upload(&ty, &1.0f32.to_le_bytes().repeat(256)).unwrap();
    let before = dev.memory_stats().copied_bytes;
    let out = exe.execute_blocking(&[x]).unwrap();
    let copied = dev.memory_stats().copied_bytes - before;
    let got = out[0].read_to_host_blocking().unwrap();
    // Row i holds 2^(i+1).
    for i in [0usize, 1, 50, 99] {
        let at = i * 256 * 4;
        let v = f32::from_le_bytes(got[at..at + 4].try_into().unwrap());
        assert_eq!(v, 2f32.powi(i as i32 + 1), "row {i}");
    }
    // At most one copy of the stack (its initial value may be a shared constant).
    assert!(
        copied <= 100 * 256 * 4,
        "100 iterations copied {copied} bytes"
    );
}

#[test]
fn uploads_wait_for_the_next_submission_in_order() {
    // Uploads leave their writes to the next submission (until 16 MiB wait): a buffer
    // deleted unsubmitted and pooled again, then written by a second upload, must read as
    // the second; copies (device work) and read-backs see every write before them, on both
    // sides of the 4 KiB host-copy limit.
    let _serial = serial();
    let dev = device();
    for n in [64usize, 4096] {
        let ty = TensorType::new(vec![n as i64], ElementType::F32);
        let fill = |k: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|i| ((i * 7 + k * 1000) as f32).to_le_bytes())
                .collect()
        };
        for round in 0..20 {
            let a = dev.upload(&ty, &fill(2 * round)).unwrap();
            a.delete();
            let b = dev.upload(&ty, &fill(2 * round + 1)).unwrap();
            let c = b.copy().unwrap();
            assert_eq!(
                b.read_to_host_blocking().unwrap(),
                fill(2 * round + 1),
                "{n} {round}"
            );
            assert_eq!(
                c.read_to_host_blocking().unwrap(),
                fill(2 * round + 1),
                "{n} {round}"
            );
        }
    }
    // More than 16 MiB of uploads with nothing else: each still reads back whole.
    let ty = TensorType::new(vec![1 << 20], ElementType::F32);
    let big: Vec<Vec<u8>> = (0..20)
        .map(|k| (0..4u32 << 20).map(|i| (i as u8) ^ (k as u8)).collect())
        .collect();
    let bufs: Vec<_> = big.iter().map(|b| dev.upload(&ty, b).unwrap()).collect();
    for (b, want) in bufs.iter().zip(&big) {
        assert_eq!(&b.read_to_host_blocking().unwrap(), want);
    }
}
