//! Serialized executables: `Executable::serialize` -> `compile::deserialize` gives the same
//! results without compiling (much faster than compiling), on a fresh device too; every
//! corrupt, truncated or foreign blob is INVALID_ARGUMENT, never a panic.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use wgpu_hlo::compile::{compile, deserialize, serial, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::executable::Executable;
use wgpu_hlo::runtime::Device;
use wgpu_hlo::ErrorKind;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

// Everything the step program has: kernels with a non-splat constant, a matmul, a reduce, a
// counted loop, a data-dependent while, an if, a loop whose counter starts at a computed value
// (its trip count computed when it starts), a loop halving each element above 2 until none is,
// and two results. The counted loops run whole in one kernel each, and the last with each
// element on its own; the data-dependent one, from the host.
const PROGRAM: &str = r#"
func.func @main(%x: tensor<16x16xf32>, %y: tensor<16xf32>) -> (tensor<16x16xf32>, tensor<16xf32>) {
  %c = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0]> : tensor<16xf32>
  %yc = stablehlo.add %y, %c : tensor<16xf32>
  %t = stablehlo.transpose %x, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %m = stablehlo.dot_general %x, %t, contracting_dims = [1] x [0] : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%m init: %z) applies stablehlo.add across dimensions = [1] : (tensor<16x16xf32>, tensor<f32>) -> tensor<16xf32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<5> : tensor<i32>
  %half = stablehlo.constant dense<0.5> : tensor<16x16xf32>
  %ri, %rm = stablehlo.while(%i = %i0, %v = %m) : tensor<i32>, tensor<16x16xf32>
  cond {
    %cc = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %cc : tensor<i1>
  } do {
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %v1 = stablehlo.multiply %v, %half : tensor<16x16xf32>
    stablehlo.return %i1, %v1 : tensor<i32>, tensor<16x16xf32>
  }
  %lim = stablehlo.constant dense<1000.0> : tensor<f32>
  %two = stablehlo.constant dense<2.0> : tensor<16xf32>
  %w = stablehlo.while(%v = %yc) : tensor<16xf32>
  cond {
    %sl = stablehlo.slice %v [0:1] : (tensor<16xf32>) -> tensor<1xf32>
    %e = stablehlo.reshape %sl : (tensor<1xf32>) -> tensor<f32>
    %cc = stablehlo.compare LT, %e, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %cc : tensor<i1>
  } do {
    %v1 = stablehlo.multiply %v, %two : tensor<16xf32>
    stablehlo.return %v1 : tensor<16xf32>
  }
  %sl = stablehlo.slice %s [0:1] : (tensor<16xf32>) -> tensor<1xf32>
  %e = stablehlo.reshape %sl : (tensor<1xf32>) -> tensor<f32>
  %p = stablehlo.compare GT, %e, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %r = "stablehlo.if"(%p) ({
    %a0 = stablehlo.subtract %w, %s : tensor<16xf32>
    %a = stablehlo.optimization_barrier %a0 : tensor<16xf32>
    stablehlo.return %a : tensor<16xf32>
  }, {
    %b = stablehlo.add %w, %s : tensor<16xf32>
    stablehlo.return %b : tensor<16xf32>
  }) : (tensor<i1>) -> tensor<16xf32>
  %y1s = stablehlo.slice %y [1:2] : (tensor<16xf32>) -> tensor<1xf32>
  %y1 = stablehlo.reshape %y1s : (tensor<1xf32>) -> tensor<f32>
  %j0 = stablehlo.convert %y1 : (tensor<f32>) -> tensor<i32>
  %third = stablehlo.constant dense<0.75> : tensor<16xf32>
  %rj, %ru = stablehlo.while(%j = %j0, %u = %r) : tensor<i32>, tensor<16xf32>
  cond {
    %cc = stablehlo.compare LT, %j, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %cc : tensor<i1>
  } do {
    %j1 = stablehlo.add %j, %one : tensor<i32>
    %u1 = stablehlo.multiply %u, %third : tensor<16xf32>
    stablehlo.return %j1, %u1 : tensor<i32>, tensor<16xf32>
  }
  %fl = stablehlo.constant dense<false> : tensor<i1>
  %h16 = stablehlo.constant dense<0.5> : tensor<16xf32>
  %q = stablehlo.while(%v = %ru) : tensor<16xf32>
  cond {
    %big = stablehlo.compare GT, %v, %two : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xi1>
    %any = stablehlo.reduce(%big init: %fl) applies stablehlo.or across dimensions = [0] : (tensor<16xi1>, tensor<i1>) -> tensor<i1>
    stablehlo.return %any : tensor<i1>
  } do {
    %big = stablehlo.compare GT, %v, %two : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xi1>
    %v1 = stablehlo.multiply %v, %h16 : tensor<16xf32>
    %v2 = stablehlo.select %big, %v1, %v : (tensor<16xi1>, tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    stablehlo.return %v2 : tensor<16xf32>
  }
  return %rm, %q : tensor<16x16xf32>, tensor<16xf32>
}"#;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(dev: &Arc<Device>, exe: &Executable, x: &[f32], y: &[f32]) -> Vec<Vec<u8>> {
    let a = dev
        .upload(&TensorType::new(vec![16, 16], ElementType::F32), &f32s(x))
        .unwrap();
    let b = dev
        .upload(&TensorType::new(vec![16], ElementType::F32), &f32s(y))
        .unwrap();
    let (outs, _) = exe.execute(&[a, b], &[]).unwrap();
    outs.iter()
        .map(|o| o.read_to_host_blocking().unwrap())
        .collect()
}

fn inputs(k: f32) -> (Vec<f32>, Vec<f32>) {
    let x = (0..256)
        .map(|i| ((i % 13) as f32 - 6.0) * 0.25 * k)
        .collect();
    // Positive, so the data-dependent loop (double until >= 1000) ends.
    let y = (0..16).map(|i| i as f32 * k + 1.0).collect();
    (x, y)
}

fn compiled() -> Arc<Executable> {
    compile(
        &device(),
        PROGRAM.as_bytes(),
        &CompileOptions {
            name: Some("serialize_test".into()),
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn round_trip_gives_identical_results_without_compiling() {
    let dev = device();
    let t0 = Instant::now();
    let exe = compiled();
    let compile_time = t0.elapsed();
    let blob = exe.serialize();
    assert!(blob.starts_with(serial::MAGIC));
    // Same device (its in-memory pipelines are reused).
    let t1 = Instant::now();
    let back = deserialize(&dev, &blob, &CompileOptions::default()).unwrap();
    let same_device = t1.elapsed();
    // Fresh devices, as a second process has: compiling on one, loading on another (each
    // creates its pipelines; the driver's own caches may be warm for both).
    let fresh = Device::open().unwrap();
    let t2 = Instant::now();
    let recompiled = compile(&fresh, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let fresh_compile = t2.elapsed();
    let fresh = Device::open().unwrap();
    let t3 = Instant::now();
    let other = deserialize(&fresh, &blob, &CompileOptions::default()).unwrap();
    let fresh_device = t3.elapsed();
    eprintln!(
        "{} kernels, {} bytes: compile {compile_time:?}; deserialize on the same device \
         {same_device:?}; on fresh devices: compile {fresh_compile:?}, deserialize \
         {fresh_device:?}",
        exe.kernels().len(),
        blob.len()
    );
    assert_eq!(back.name(), "serialize_test");
    assert_eq!(back.fingerprint(), exe.fingerprint());
    assert_eq!(back.ir_text(), exe.ir_text());
    assert_eq!(back.program_listing(), exe.program_listing());
    assert!(exe.program_listing().contains("computed at the start"));
    // Loops run whole in one kernel (the counted ones) and from the host (the one whose
    // predicate reads one element of its state) both round-trip.
    assert!(exe.program_listing().contains("while in kernel"));
    assert!(exe.program_listing().contains("trip count: read back"));
    assert!(exe
        .program_listing()
        .contains("each element until its own predicate fails"));
    assert_eq!(back.output_types(), exe.output_types());
    assert_eq!(back.parameter_types(), exe.parameter_types());
    assert_eq!(back.output_aliases(), exe.output_aliases());
    assert_eq!(back.serialize(), blob);
    assert_eq!(other.fingerprint(), recompiled.fingerprint());
    for k in [1.0, -2.0, 0.5] {
        let (x, y) = inputs(k);
        let want = run(&dev, &exe, &x, &y);
        assert_eq!(run(&dev, &back, &x, &y), want, "same device, k={k}");
        assert_eq!(run(&fresh, &other, &x, &y), want, "fresh device, k={k}");
    }
    // Loading skips parsing, passes and code generation, so it is usually several times
    // cheaper than compiling; the times above are printed, not asserted: on a loaded CI
    // host a ratio of wall-clock times is noise (a 5x bound failed there at 3.5x).
}

#[test]
fn tensors_bound_in_parts_round_trip() {
    // At a 512-byte binding limit the 16 x 16 operands (1 KiB) are bound in windows and
    // parts: the blob carries which bindings are parted and how.
    let dev = device();
    let exe = compile(
        &dev,
        PROGRAM.as_bytes(),
        &CompileOptions {
            max_binding_bytes: Some(512),
            ..Default::default()
        },
    )
    .unwrap();
    let listing = exe.program_listing();
    assert!(listing.contains(" bound in 2 parts)"), "{listing}");
    let back = deserialize(&dev, &exe.serialize(), &CompileOptions::default()).unwrap();
    assert_eq!(back.program_listing(), listing);
    let (x, y) = inputs(1.5);
    let got = run(&dev, &exe, &x, &y);
    assert_eq!(run(&dev, &back, &x, &y), got);
    // Against the program bound whole: sums in windows may round differently.
    for (g, w) in got.iter().zip(run(&dev, &compiled(), &x, &y)) {
        for (a, b) in g.chunks(4).zip(w.chunks(4)) {
            let a = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            let b = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}

fn err(blob: &[u8]) -> wgpu_hlo::Error {
    match deserialize(&device(), blob, &CompileOptions::default()) {
        Ok(_) => panic!("a bad blob of {} bytes loaded", blob.len()),
        Err(e) => e,
    }
}

#[test]
fn corrupt_truncated_and_foreign_blobs_are_invalid_argument() {
    let blob = compiled().serialize();
    let check = |b: &[u8], what: &str, needle: &str| {
        let e = err(b);
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{what}: {e}");
        assert!(e.message.contains(needle), "{what}: {e}");
    };
    check(&[], "empty", "magic");
    check(b"WGPUHLO\x01main", "old format", "magic");
    check(&blob[..blob.len() / 2], "truncated", "truncated");
    check(&blob[..12], "header only", "truncated");
    let mut padded = blob.clone();
    padded.push(0);
    check(&padded, "padded", "truncated or padded");
    // Format version (right after the magic).
    let mut v = blob.clone();
    v[8] ^= 0xff;
    check(&v, "version", "format version");
    // The build id string (after the version and the crate version string).
    let build_at = 8 + 4 + 8 + serial::CRATE_VERSION.len() + 8;
    let mut b = blob.clone();
    b[build_at] ^= 0x01;
    check(&b, "build id", "build");
    // The adapter key: the same bytes made for another adapter name.
    let key = serial::adapter_key(&device());
    let pos = blob
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap();
    let mut a = blob.clone();
    a[pos] ^= 0x01;
    check(&a, "adapter", "another adapter");
    // Flipped bytes anywhere in the body: the checksum catches them.
    let body = pos + key.len() + 16;
    for i in [body, body + 7, (body + blob.len()) / 2, blob.len() - 1] {
        let mut c = blob.clone();
        c[i] ^= 0x40;
        check(&c, &format!("byte {i} flipped"), "corrupt");
    }
    // Every truncation fails cleanly.
    for n in (0..blob.len()).step_by(97) {
        assert_eq!(
            err(&blob[..n]).kind,
            ErrorKind::InvalidArgument,
            "cut at {n}"
        );
    }
}

#[test]
fn pipeline_cache_is_written_atomically_and_a_corrupt_one_is_ignored() {
    let dir = std::env::temp_dir().join(format!("wgpu-hlo-pipeline-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dev = Device::open_with_pipeline_cache(Some(&dir)).unwrap();
    let Some(file) = dev.pipeline_cache_file().map(|p| p.to_path_buf()) else {
        // Only Vulkan adapters have one; elsewhere nothing is written.
        eprintln!("{}: no pipeline cache", dev.info());
        assert!(!dir.exists());
        return;
    };
    let exe = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let written = std::fs::read(&file).unwrap();
    eprintln!(
        "{}: pipeline cache {} of {} bytes",
        dev.info(),
        file.display(),
        written.len()
    );
    assert!(written.starts_with(b"WHLOPC01"));
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // A device opened on the written cache and one on a corrupt file both work.
    let (x, y) = inputs(1.0);
    let want = run(&dev, &exe, &x, &y);
    for bytes in [written.clone(), {
        let mut c = written.clone();
        let n = c.len();
        c[n / 2] ^= 0x55;
        c
    }] {
        std::fs::write(&file, &bytes).unwrap();
        let d = Device::open_with_pipeline_cache(Some(&dir)).unwrap();
        let e = deserialize(&d, &exe.serialize(), &CompileOptions::default()).unwrap();
        assert_eq!(run(&d, &e, &x, &y), want);
    }
    // No directory: no cache.
    let none = Device::open_with_pipeline_cache(None).unwrap();
    assert!(none.pipeline_cache_file().is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
