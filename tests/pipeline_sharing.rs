//! Kernels of the same code share one pipeline: a model's repeated layers, whose kernels
//! differ only in the values their comments name, compile once in CPU drivers (which
//! compile a pipeline's code at its first dispatch), not once per layer. And on a CPU
//! adapter a load compiles its kernels' driver code itself, on several cores
//! (`runtime::warm`), instead of leaving it to each kernel's first dispatch on the driver's
//! one queue thread.

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::runtime::Device;

/// Two "layers" of the same shapes: `tanh(x @ w1) @ w2`, twice over.
const PROGRAM: &str = r#"func.func @main(%x: tensor<64x96xf32>, %w1: tensor<96x128xf32>, %w2: tensor<128x96xf32>, %v1: tensor<96x128xf32>, %v2: tensor<128x96xf32>) -> tensor<64x96xf32> {
  %a = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<64x96xf32>, tensor<96x128xf32>) -> tensor<64x128xf32>
  %b = stablehlo.tanh %a : tensor<64x128xf32>
  %c = stablehlo.dot_general %b, %w2, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x96xf32>) -> tensor<64x96xf32>
  %d = stablehlo.tanh %c : tensor<64x96xf32>
  %e = stablehlo.dot_general %d, %v1, contracting_dims = [1] x [0] : (tensor<64x96xf32>, tensor<96x128xf32>) -> tensor<64x128xf32>
  %f = stablehlo.tanh %e : tensor<64x128xf32>
  %g = stablehlo.dot_general %f, %v2, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x96xf32>) -> tensor<64x96xf32>
  %h = stablehlo.tanh %g : tensor<64x96xf32>
  return %h : tensor<64x96xf32>
}
"#;

#[test]
fn kernels_of_the_same_code_share_a_pipeline() {
    let dev = Device::open().expect("a wgpu adapter");
    let before = dev.pipelines_created();
    let exe = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    let kernels = exe.kernels().len();
    let distinct = distinct_codes(&exe);
    assert!(
        distinct < kernels,
        "{kernels} kernels of {distinct} distinct codes: the layers' kernels should repeat"
    );
    assert_eq!(
        dev.pipelines_created() - before,
        distinct as u64,
        "one pipeline per distinct code"
    );
    // A second executable of the same program creates none.
    let again = compile(&dev, PROGRAM.as_bytes(), &CompileOptions::default()).unwrap();
    assert_eq!(dev.pipelines_created() - before, distinct as u64);
    drop((exe, again));
}

/// Five kernels of four distinct codes, for `a_cpu_adapter_compiles_each_code_once_at_load` (the two `tanh` of one shape share one).
const WARMED: &str = r#"func.func @main(%x: tensor<64x96xf32>, %w1: tensor<96x128xf32>, %w2: tensor<128x96xf32>) -> (tensor<64x96xf32>, tensor<96xf32>) {
  %a = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<64x96xf32>, tensor<96x128xf32>) -> tensor<64x128xf32>
  %b = stablehlo.tanh %a : tensor<64x128xf32>
  %c = stablehlo.dot_general %b, %w2, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x96xf32>) -> tensor<64x96xf32>
  %d = stablehlo.tanh %c : tensor<64x96xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%d init: %z) applies stablehlo.add across dimensions = [0] : (tensor<64x96xf32>, tensor<f32>) -> tensor<96xf32>
  return %d, %s : tensor<64x96xf32>, tensor<96xf32>
}
"#;

fn distinct_codes(exe: &wgpu_hlo::runtime::executable::Executable) -> usize {
    exe.kernels()
        .iter()
        .map(|k| {
            k.wgsl
                .lines()
                .map(|l| l.split("//").next().unwrap_or("").trim_end())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<std::collections::HashSet<_>>()
        .len()
}

#[test]
fn a_cpu_adapter_compiles_each_code_once_at_load() {
    let dev = Device::open().expect("a wgpu adapter");
    let cpu = dev.info().device_type == "Cpu";
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let off = std::env::var("WGPU_HLO_WARM").is_ok_and(|v| v.trim() == "0")
        || !wgpu_hlo::runtime::mesa_cache_usable();
    let before = dev.warm_stats();
    let exe = compile(&dev, WARMED.as_bytes(), &CompileOptions::default()).unwrap();
    let distinct = distinct_codes(&exe);
    assert!(distinct >= 2, "{distinct} distinct codes");
    let after = dev.warm_stats();
    let warmed = after.on_helpers - before.on_helpers;
    if cpu && cores >= 2 && !off {
        assert_eq!(
            warmed, distinct as u64,
            "each distinct code warmed once: {after:?}"
        );
    } else {
        assert_eq!(warmed, 0, "no warming on {} ({cores} cores)", dev.info());
    }
    // The same codes again are not warmed again.
    let again = compile(&dev, WARMED.as_bytes(), &CompileOptions::default()).unwrap();
    assert_eq!(dev.warm_stats(), after);
    drop((exe, again));
}

/// Where Mesa's shader cache directory cannot be written, what helpers compile would be lost
/// (each kernel compiled again at its first dispatch), so nothing is warmed. Run in a child
/// process of this test binary, with `MESA_SHADER_CACHE_DIR` under a regular file.
#[test]
fn an_unwritable_mesa_cache_turns_warming_off() {
    if std::env::var("WGPU_HLO_TEST_UNWRITABLE_CACHE").is_ok() {
        assert!(!wgpu_hlo::runtime::mesa_cache_usable());
        let dev = Device::open().expect("a wgpu adapter");
        let exe = compile(&dev, WARMED.as_bytes(), &CompileOptions::default()).unwrap();
        assert!(distinct_codes(&exe) >= 2);
        let stats = dev.warm_stats();
        assert_eq!(stats.on_helpers, 0, "{stats:?}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("wgpu-hlo-unwritable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "an_unwritable_mesa_cache_turns_warming_off",
            "--exact",
            "--nocapture",
        ])
        .env("WGPU_HLO_TEST_UNWRITABLE_CACHE", "1")
        .env("MESA_SHADER_CACHE_DIR", file.join("cache"))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// Column sums of 2048 x 2048 and a second code, so that a CPU adapter warms the load.
const TIMED: &str = r#"func.func @main(%x: tensor<2048x2048xf32>) -> (tensor<2048xf32>, tensor<2048x2048xf32>) {
  %a = stablehlo.multiply %x, %x : tensor<2048x2048xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<2048x2048xf32>, tensor<f32>) -> tensor<2048xf32>
  return %s, %a : tensor<2048xf32>, tensor<2048x2048xf32>
}
"#;

/// The per-kernel times of a warmed load still hold each kernel's work. When the device
/// itself zero-dispatched its pipelines to warm them, lavapipe's timestamps around its later
/// dispatches were read after the kernels had run: 0.1 ms "GPU time" per kernel for a call of
/// 15-40 ms. Here the kernels' times must add up to a good share of the call's time.
#[test]
fn warmed_kernels_keep_their_gpu_times() {
    let dev = Device::open().expect("a wgpu adapter");
    if !dev.has_timestamps() {
        return;
    }
    let exe = compile(&dev, TIMED.as_bytes(), &CompileOptions::default()).unwrap();
    let t = wgpu_hlo::ir::TensorType::new(vec![2048, 2048], wgpu_hlo::ir::ElementType::F32);
    let bytes: Vec<u8> = (0..2048 * 2048)
        .flat_map(|i| ((i % 97) as f32 / 97.0).to_le_bytes())
        .collect();
    let x = dev.upload(&t, &bytes).unwrap();
    let mut wall = f64::INFINITY;
    for _ in 0..4 {
        let start = std::time::Instant::now();
        let (outs, event) = exe.execute(std::slice::from_ref(&x), &[]).unwrap();
        event.wait().unwrap();
        drop(outs);
        wall = wall.min(start.elapsed().as_secs_f64() * 1e3);
    }
    let mut gpu = 0.0f64;
    for _ in 0..3 {
        let (_, times) = exe.execute_profiled(std::slice::from_ref(&x)).unwrap();
        // Between each dispatch's own timestamps: what the broken timestamps had emptied.
        let total: f64 = times.kernels.iter().map(|k| k.inside_ms).sum();
        gpu = gpu.max(total);
    }
    assert!(
        gpu >= 0.25 * wall,
        "kernels timed at {gpu:.3} ms in all, the fastest call took {wall:.3} ms"
    );
}
