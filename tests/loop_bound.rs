//! Work split across invocations: with a low loop bound per invocation (through
//! `CompileOptions::max_loop_iterations`, so small tensors exercise the same code paths as
//! lavapipe-sized ones), reductions of every shape and dots with long contractions match a
//! host reference; at the default bound, the sizes that llvmpipe used to truncate silently are
//! right; what cannot be split is refused with RESOURCE_EXHAUSTED, never computed wrong.

mod common;

use common::{data, device, f32s, upload_f32};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::error::ErrorKind;
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::DeviceBuffer;

fn options(max_loop: Option<u64>) -> CompileOptions {
    CompileOptions {
        max_loop_iterations: max_loop,
        ..Default::default()
    }
}

/// Compiles `src` with the given loop bound, runs it on `args`, returns every result's bytes
/// and the number of kernels.
fn run(src: &str, max_loop: Option<u64>, args: &[DeviceBuffer]) -> (Vec<Vec<u8>>, usize) {
    let exe = compile(&device(), src.as_bytes(), &options(max_loop))
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let out = exe.execute_blocking(args).unwrap();
    let bytes = out
        .iter()
        .map(|b| b.read_to_host_blocking().unwrap())
        .collect();
    (bytes, exe.kernels().len())
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn shape_str(s: &[usize], t: &str) -> String {
    s.iter().map(|d| format!("{d}x")).collect::<String>() + t
}

fn close(got: f32, want: f64, terms: usize) -> bool {
    (got as f64 - want).abs() <= 1e-5 * (terms as f64).sqrt() * (1.0 + want.abs()) + 1e-6
}

/// `reduce add` of an `f32` tensor over `dims`, against the host's f64 sums.
fn check_sum(shape: &[usize], dims: &[usize], max_loop: Option<u64>) {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let oshape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let list = dims
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let (it, ot) = (shape_str(shape, "f32"), shape_str(&oshape, "f32"));
    let src = format!(
        "func.func @main(%a: tensor<{it}>) -> tensor<{ot}> {{\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %x = stablehlo.multiply %a, %a : tensor<{it}>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [{list}] : (tensor<{it}>, tensor<f32>) -> tensor<{ot}>\n  return %s : tensor<{ot}>\n}}\n"
    );
    let n: usize = shape.iter().product();
    let a = data(n, 7);
    let (out, kernels) = run(&src, max_loop, &[upload_f32(shape, &a)]);
    let got = f32s(&out[0]);
    let want = common::sum_of_squares(shape, &kept, &a);
    let terms = n / want.len().max(1);
    for (o, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            close(g, w, terms),
            "{shape:?} over {dims:?}, output {o}: got {g}, want {w}"
        );
    }
    if let Some(bound) = max_loop {
        if terms as u64 > bound * 256 {
            assert!(kernels > 1, "{shape:?} over {dims:?} was not split");
        }
    }
}

#[test]
fn reductions_split_under_a_low_bound() {
    // Rows, columns, everything, middle dimensions; chunks that do not divide the extent;
    // several fold stages (100k elements at 64 per invocation: 3 stages).
    check_sum(&[37, 1000], &[1], Some(64));
    check_sum(&[1000, 37], &[0], Some(64));
    check_sum(&[300, 333], &[0, 1], Some(64));
    check_sum(&[100_003], &[0], Some(64));
    check_sum(&[6, 700, 5], &[1], Some(64));
    check_sum(&[7, 90, 3, 11], &[0, 2], Some(64));
    // Many outputs, long rows: the thread-per-output strategy, split.
    check_sum(&[2000, 300], &[1], Some(64));
}

#[test]
fn variadic_reduction_splits() {
    // argmax over rows: a value and an index reduced together.
    let (rows, cols) = (9usize, 5000usize);
    let src = format!(
        r#"func.func @main(%v: tensor<{rows}x{cols}xf32>) -> (tensor<{rows}xf32>, tensor<{rows}xi32>) {{
  %i = stablehlo.iota dim = 1 : tensor<{rows}x{cols}xi32>
  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.reduce(%v init: %m), (%i init: %z) across dimensions = [1] : (tensor<{rows}x{cols}xf32>, tensor<{rows}x{cols}xi32>, tensor<f32>, tensor<i32>) -> (tensor<{rows}xf32>, tensor<{rows}xi32>)
    reducer(%a: tensor<f32>, %b: tensor<f32>) (%ia: tensor<i32>, %ib: tensor<i32>) {{
      %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %eq = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %lt = stablehlo.compare LT, %ia, %ib, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %tie = stablehlo.and %eq, %lt : tensor<i1>
      %pick = stablehlo.or %gt, %tie : tensor<i1>
      %mv = stablehlo.select %pick, %a, %b : tensor<i1>, tensor<f32>
      %mi = stablehlo.select %pick, %ia, %ib : tensor<i1>, tensor<i32>
      stablehlo.return %mv, %mi : tensor<f32>, tensor<i32>
    }}
  return %r#0, %r#1 : tensor<{rows}xf32>, tensor<{rows}xi32>
}}
"#
    );
    let v = data(rows * cols, 3);
    for bound in [Some(64), None] {
        let (out, _) = run(&src, bound, &[upload_f32(&[rows, cols], &v)]);
        let (vals, idx) = (f32s(&out[0]), i32s(&out[1]));
        for r in 0..rows {
            let row = &v[r * cols..(r + 1) * cols];
            let (mut best, mut at) = (f32::NEG_INFINITY, 0);
            for (j, &x) in row.iter().enumerate() {
                if x > best {
                    (best, at) = (x, j);
                }
            }
            assert_eq!(
                (vals[r], idx[r]),
                (best, at as i32),
                "row {r}, bound {bound:?}"
            );
        }
    }
}

/// `[m, k] x [k, n]` in f32 against the host's f64 products.
fn check_dot(m: usize, k: usize, n: usize, max_loop: Option<u64>) {
    let (lt, rt, ot) = (
        shape_str(&[m, k], "f32"),
        shape_str(&[k, n], "f32"),
        shape_str(&[m, n], "f32"),
    );
    // A fused producer (the negation) must survive the split.
    let src = format!(
        "func.func @main(%a: tensor<{lt}>, %b: tensor<{rt}>) -> tensor<{ot}> {{\n  %na = stablehlo.negate %a : tensor<{lt}>\n  %r = stablehlo.dot_general %na, %b, contracting_dims = [1] x [0] : (tensor<{lt}>, tensor<{rt}>) -> tensor<{ot}>\n  return %r : tensor<{ot}>\n}}\n"
    );
    let (a, b) = (data(m * k, 1), data(k * n, 2));
    let (out, kernels) = run(
        &src,
        max_loop,
        &[upload_f32(&[m, k], &a), upload_f32(&[k, n], &b)],
    );
    let got = f32s(&out[0]);
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|kk| -(a[i * k + kk] as f64) * b[kk * n + j] as f64)
                .sum();
            let g = got[i * n + j];
            assert!(
                (g as f64 - want).abs() <= 2e-6 * k as f64 + 1e-5,
                "{m}x{k}x{n} bound {max_loop:?} [{i}, {j}]: got {g}, want {want}"
            );
        }
    }
    // One step of the contraction loop covers up to 4 terms (vec4 loads); the negation runs
    // inside the dot's kernel (prologue fusion), so a split shows as partials and a fold.
    if let Some(bound) = max_loop {
        if k as u64 > 4 * bound {
            assert!(kernels > 1, "{m}x{k}x{n} was not split");
        }
    }
}

#[test]
fn dots_split_k_under_a_low_bound() {
    check_dot(3, 5000, 2, Some(64));
    check_dot(1, 262_144 / 64, 2, Some(64));
    // Large enough for the tiled / register-blocked kernels before the split.
    check_dot(40, 3000, 33, Some(64));
    check_dot(5, 100, 7, Some(64));
}

/// A plain `[m, k] x [k, n]` f32 dot (no fused producer: the tiled kernels take it) against
/// the host's f64 products; returns each kernel's first line (its description).
fn check_plain_dot(m: usize, k: usize, n: usize, max_loop: Option<u64>) -> Vec<String> {
    let (lt, rt, ot) = (
        shape_str(&[m, k], "f32"),
        shape_str(&[k, n], "f32"),
        shape_str(&[m, n], "f32"),
    );
    let src = format!(
        "func.func @main(%a: tensor<{lt}>, %b: tensor<{rt}>) -> tensor<{ot}> {{\n  %r = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{lt}>, tensor<{rt}>) -> tensor<{ot}>\n  return %r : tensor<{ot}>\n}}\n"
    );
    let (a, b) = (data(m * k, 4), data(k * n, 5));
    let exe = compile(&device(), src.as_bytes(), &options(max_loop)).unwrap();
    let out = exe
        .execute_blocking(&[upload_f32(&[m, k], &a), upload_f32(&[k, n], &b)])
        .unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64)
                .sum();
            assert!(
                close(got[i * n + j], want, k),
                "{m}x{k}x{n} bound {max_loop:?} [{i}, {j}]: got {}, want {want}",
                got[i * n + j]
            );
        }
    }
    exe.kernels()
        .iter()
        .map(|k| k.wgsl.lines().next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn tiled_dots_split_k_under_a_low_bound() {
    // Large enough for the shared-rows kernel on CPU adapters (the tiled one on GPUs): its
    // partials over contracting chunks, then a fold; k a multiple of 4 (vec4 reads) and odd
    // (scalar reads, chunks still multiples of 4).
    let dev = device();
    let target = wgpu_hlo::compile::target(&dev);
    let shared_rows = target.cpu_adapter && target.caps.subgroup;
    for (m, k, n) in [(64, 1024, 64), (96, 1001, 72)] {
        let kernels = check_plain_dot(m, k, n, Some(64));
        let split = kernels
            .iter()
            .any(|s| s.contains("shared-rows") && s.contains("partial sums over contracting"));
        assert!(split || !shared_rows, "{m}x{k}x{n}: {kernels:?}");
        check_plain_dot(m, k, n, None);
    }
}

#[test]
fn default_bound_large_sum_and_long_dot() {
    let src = "func.func @main() -> tensor<f32> {\n  %x = stablehlo.constant dense<1.0> : tensor<4096x4096xf32>\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<4096x4096xf32>, tensor<f32>) -> tensor<f32>\n  return %s : tensor<f32>\n}\n";
    let (out, _) = run(src, None, &[]);
    assert_eq!(f32s(&out[0]), vec![16_777_216.0]);
    // The matmul llvmpipe truncated to 65535 terms, and K = 10^6.
    check_dot(1, 262_144, 2, None);
    check_dot(1, 1_000_000, 2, None);
}

#[test]
fn budgets_past_the_llvmpipe_limit_are_lowered_there() {
    // llvmpipe leaves every loop of an invocation after 65535 iterations in all, silently: a
    // budget above it (`WGPU_HLO_MAX_LOOP=10000000` gave svd of 256 x 256 values 61 % off) is
    // lowered to the default on that adapter, so the 4 x 400000-term contraction still splits
    // there and comes out right. Other adapters run it whole.
    check_dot(2, 400_000, 2, Some(10_000_000));
    check_sum(&[2, 1_200_000], &[1], Some(10_000_000));
}

fn compile_error(src: &str, max_loop: Option<u64>) -> wgpu_hlo::error::Error {
    match compile(&device(), src.as_bytes(), &options(max_loop)) {
        Ok(_) => panic!("compiled, but should have been refused:\n{src}"),
        Err(e) => e,
    }
}

#[test]
fn unsplittable_work_is_refused() {
    // A boolean convolution (or-of-ands, no partial sums to fold) whose window and features
    // need 90000 steps per output.
    let src = "func.func @main(%x: tensor<1x300x300xi1>, %k: tensor<300x300x1xi1>) -> tensor<1x1x1xi1> {\n  %c = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x300x300xi1>, tensor<300x300x1xi1>) -> tensor<1x1x1xi1>\n  return %c : tensor<1x1x1xi1>\n}\n";
    let e = compile_error(src, None);
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
    assert!(e.message.contains("loop iterations"), "{e}");
}

#[test]
fn tensors_over_the_binding_limit_are_bound_in_parts() {
    // A transpose of 256 MiB of f32: over lavapipe's 128 MiB binding limit, and not read at
    // its own elements, so its operand is bound in parts and its result in windows (running
    // it against cpu: python/tests/test_sizes.py; small tensors at a low limit:
    // tests/big_tensors.rs).
    let n = 8192usize;
    let limit = device().limits().max_storage_buffer_binding_size;
    let t = format!("tensor<{n}x{n}xf32>");
    let src = format!(
        "func.func @main(%x: {t}) -> {t} {{\n  %y = stablehlo.transpose %x, dims = [1, 0] : ({t}) -> {t}\n  return %y : {t}\n}}\n"
    );
    let exe = compile(&device(), src.as_bytes(), &options(None)).unwrap();
    let listing = exe.program_listing();
    if (n * n) as u64 * 4 > limit {
        assert!(listing.contains(" bound in 2 parts)"), "{listing}");
    }
}

#[test]
fn narrow_dots_split_k() {
    // bf16 and f16 results: partials and folds in f32, rounded and packed once at the end
    // (an odd number of results leaves the last word half full).
    let (m, k, n) = (3usize, 3000usize, 3usize);
    let (a, b) = (data(m * k, 5), data(k * n, 6));
    for ty in ["bf16", "f16"] {
        let to = |v: f32| -> (f32, [u8; 2]) {
            if ty == "bf16" {
                let h = half::bf16::from_f32(v);
                (h.to_f32(), h.to_le_bytes())
            } else {
                let h = half::f16::from_f32(v);
                (h.to_f32(), h.to_le_bytes())
            }
        };
        let from = |c: &[u8]| -> f32 {
            if ty == "bf16" {
                half::bf16::from_le_bytes([c[0], c[1]]).to_f32()
            } else {
                half::f16::from_le_bytes([c[0], c[1]]).to_f32()
            }
        };
        let upload = |shape: &[usize], v: &[f32]| -> (Vec<f32>, DeviceBuffer) {
            let (vals, bytes): (Vec<f32>, Vec<[u8; 2]>) = v.iter().map(|&x| to(x)).unzip();
            let t = TensorType::new(
                shape.iter().map(|&d| d as i64).collect(),
                if ty == "bf16" {
                    ElementType::BF16
                } else {
                    ElementType::F16
                },
            );
            (vals, device().upload(&t, &bytes.concat()).unwrap())
        };
        let (lt, rt, ot) = (
            shape_str(&[m, k], ty),
            shape_str(&[k, n], ty),
            shape_str(&[m, n], ty),
        );
        let src = format!(
            "func.func @main(%a: tensor<{lt}>, %b: tensor<{rt}>) -> tensor<{ot}> {{\n  %r = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{lt}>, tensor<{rt}>) -> tensor<{ot}>\n  return %r : tensor<{ot}>\n}}\n"
        );
        let ((av, ab), (bv, bb)) = (upload(&[m, k], &a), upload(&[k, n], &b));
        let (out, kernels) = run(&src, Some(64), &[ab, bb]);
        assert!(kernels > 2, "{ty} dot was not split");
        let got: Vec<f32> = out[0].chunks(2).map(from).collect();
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|kk| av[i * k + kk] as f64 * bv[kk * n + j] as f64)
                    .sum();
                let g = got[i * n + j] as f64;
                assert!(
                    (g - want).abs() <= want.abs() / 128.0 + 1e-3,
                    "{ty} [{i}, {j}]: got {g}, want {want}"
                );
            }
        }
    }
}

#[test]
fn narrow_reductions_split() {
    // Maxima of bf16/f16 rows (exact in any order): partials and folds in f32, rounded and
    // packed at the end; 37 rows leave the last word half full.
    for (ty, et) in [("bf16", ElementType::BF16), ("f16", ElementType::F16)] {
        for (rows, cols) in [(37usize, 5000usize), (1, 100_003), (300, 700)] {
            let to = |v: f32| -> (f32, [u8; 2]) {
                if ty == "bf16" {
                    let h = half::bf16::from_f32(v);
                    (h.to_f32(), h.to_le_bytes())
                } else {
                    let h = half::f16::from_f32(v);
                    (h.to_f32(), h.to_le_bytes())
                }
            };
            let (vals, bytes): (Vec<f32>, Vec<[u8; 2]>) =
                data(rows * cols, 9).into_iter().map(to).unzip();
            let t = TensorType::new(vec![rows as i64, cols as i64], et);
            let x = device().upload(&t, &bytes.concat()).unwrap();
            let (it, ot) = (shape_str(&[rows, cols], ty), shape_str(&[rows], ty));
            let src = format!(
                "func.func @main(%a: tensor<{it}>) -> tensor<{ot}> {{\n  %z = stablehlo.constant dense<0xFF800000> : tensor<f32>\n  %m = stablehlo.convert %z : (tensor<f32>) -> tensor<{ty}>\n  %s = stablehlo.reduce(%a init: %m) applies stablehlo.maximum across dimensions = [1] : (tensor<{it}>, tensor<{ty}>) -> tensor<{ot}>\n  return %s : tensor<{ot}>\n}}\n"
            );
            let (out, kernels) = run(&src, Some(64), &[x]);
            assert!(kernels > 1, "{ty} {rows}x{cols} was not split");
            let got: Vec<f32> = out[0]
                .chunks(2)
                .map(|c| {
                    if ty == "bf16" {
                        half::bf16::from_le_bytes([c[0], c[1]]).to_f32()
                    } else {
                        half::f16::from_le_bytes([c[0], c[1]]).to_f32()
                    }
                })
                .collect();
            assert_eq!(got.len(), rows);
            for r in 0..rows {
                let want = vals[r * cols..(r + 1) * cols]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                assert_eq!(got[r], want, "{ty} {rows}x{cols} row {r}");
            }
        }
    }
}

/// A 2-d `reduce_window` (`op` add or maximum) of an `f32` or narrow-float `[h, w]` input
/// against the definition on the host: the input padded (with the init value) and dilated
/// explicitly, each window folded in f64.
#[allow(clippy::too_many_arguments)]
fn check_reduce_window(
    ty: &str,
    op: &str,
    hw: [usize; 2],
    window: [usize; 2],
    strides: [usize; 2],
    pad: [(usize, usize); 2],
    base: [usize; 2],
    wdil: [usize; 2],
    max_loop: Option<u64>,
) {
    let round = |v: f32| -> f32 {
        match ty {
            "bf16" => half::bf16::from_f32(v).to_f32(),
            "f16" => half::f16::from_f32(v).to_f32(),
            _ => v,
        }
    };
    let bytes = |v: &[f32]| -> Vec<u8> {
        match ty {
            "bf16" => v
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect(),
            "f16" => v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
            _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    };
    let values = |b: &[u8]| -> Vec<f32> {
        match ty {
            "bf16" => b
                .chunks(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            "f16" => b
                .chunks(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            _ => f32s(b),
        }
    };
    let padded = |d: usize| (hw[d] - 1) * base[d] + 1 + pad[d].0 + pad[d].1;
    let span = |d: usize| (window[d] - 1) * wdil[d] + 1;
    let out = |d: usize| (padded(d) - span(d)) / strides[d] + 1;
    let (oh, ow) = (out(0), out(1));
    let (it, ot) = (shape_str(&hw, ty), shape_str(&[oh, ow], ty));
    let (init, init_v) = if op == "add" {
        ("0.0", 0f64)
    } else {
        ("0xFF800000", f64::NEG_INFINITY)
    };
    let pair = |v: [usize; 2]| format!("{}, {}", v[0], v[1]);
    let src = format!(
        r#"func.func @main(%x: tensor<{it}>) -> tensor<{ot}> {{
  %z = stablehlo.constant dense<{init}> : tensor<f32>
  %i = stablehlo.convert %z : (tensor<f32>) -> tensor<{ty}>
  %r = "stablehlo.reduce_window"(%x, %i) <{{base_dilations = array<i64: {}>, padding = dense<[[{}, {}], [{}, {}]]> : tensor<2x2xi64>, window_dilations = array<i64: {}>, window_dimensions = array<i64: {}>, window_strides = array<i64: {}>}}> ({{
    ^bb0(%a: tensor<{ty}>, %b: tensor<{ty}>):
      %s = stablehlo.{op} %a, %b : tensor<{ty}>
      stablehlo.return %s : tensor<{ty}>
    }}) : (tensor<{it}>, tensor<{ty}>) -> tensor<{ot}>
  return %r : tensor<{ot}>
}}
"#,
        pair(base),
        pad[0].0,
        pad[0].1,
        pad[1].0,
        pad[1].1,
        pair(wdil),
        pair(window),
        pair(strides)
    );
    let x: Vec<f32> = data(hw[0] * hw[1], 21).into_iter().map(round).collect();
    let et = match ty {
        "bf16" => ElementType::BF16,
        "f16" => ElementType::F16,
        _ => ElementType::F32,
    };
    let t = TensorType::new(vec![hw[0] as i64, hw[1] as i64], et);
    let buf = device().upload(&t, &bytes(&x)).unwrap();
    let (res, kernels) = run(&src, max_loop, &[buf]);
    let got = values(&res[0]);
    // The padded, dilated input (init where padding or a hole).
    let (ph, pw) = (padded(0), padded(1));
    let mut xp = vec![init_v; ph * pw];
    for i in 0..hw[0] {
        for j in 0..hw[1] {
            xp[(pad[0].0 + i * base[0]) * pw + pad[1].0 + j * base[1]] = x[i * hw[1] + j] as f64;
        }
    }
    let terms = window[0] * window[1];
    for i in 0..oh {
        for j in 0..ow {
            let mut acc = init_v;
            for u in 0..window[0] {
                for v in 0..window[1] {
                    let e = xp[(i * strides[0] + u * wdil[0]) * pw + j * strides[1] + v * wdil[1]];
                    acc = if op == "add" { acc + e } else { acc.max(e) };
                }
            }
            let g = got[i * ow + j];
            let ok = if op == "add" {
                let tol = match ty {
                    "f32" => 1e-5 * (terms as f64).sqrt() * (1.0 + acc.abs()) + 1e-6,
                    // Each add of the body rounds to the narrow type.
                    _ => 0.02 * (terms as f64).sqrt() * (1.0 + acc.abs()),
                };
                (g as f64 - acc).abs() <= tol
            } else {
                g as f64 == acc
            };
            assert!(ok, "{ty} {op} [{i}, {j}]: got {g}, want {acc}\n{src}");
        }
    }
    if let Some(bound) = max_loop {
        if terms as u64 > bound {
            assert!(kernels > 1, "{src} was not split");
        }
    }
}

#[test]
fn reduce_windows_split() {
    let one = [1, 1];
    // The conformance shape: a window of 401 elements, stride 160.
    check_reduce_window(
        "f32",
        "maximum",
        [1, 1600],
        [1, 401],
        [1, 160],
        [(0, 0); 2],
        one,
        one,
        Some(64),
    );
    // Padding, strides, base and window dilation; sums and maxima.
    for op in ["add", "maximum"] {
        check_reduce_window(
            "f32",
            op,
            [30, 40],
            [9, 11],
            [2, 3],
            [(4, 4), (5, 3)],
            [1, 2],
            [2, 1],
            Some(64),
        );
        check_reduce_window(
            "f32",
            op,
            [50, 60],
            [50, 60],
            one,
            [(0, 0); 2],
            one,
            one,
            Some(64),
        );
    }
    // Packed narrow results: an odd number of them.
    for ty in ["bf16", "f16"] {
        check_reduce_window(
            ty,
            "maximum",
            [21, 33],
            [13, 17],
            [2, 2],
            [(6, 6), (8, 8)],
            one,
            one,
            Some(64),
        );
    }
    // Global pooling over a 300x300 image at the default bound (90000 elements per window).
    check_reduce_window(
        "f32",
        "add",
        [300, 300],
        [300, 300],
        one,
        [(0, 0); 2],
        one,
        one,
        None,
    );
}

#[test]
fn boolean_reductions_split() {
    // any(x > t) over rows and over everything: booleans are packed four to a word, so one
    // thread per result used to loop four times the row; partials are 0/1 words.
    for (rows, cols, bound) in [
        (3usize, 50_000usize, Some(64)),
        (500, 300, Some(64)),
        (1, 1 << 20, None),
    ] {
        let x = data(rows * cols, 4);
        // Exactly one element per row above the threshold (and none in row 1 when rows > 1).
        let mut x: Vec<f32> = x.into_iter().map(|v| v * 0.5).collect();
        for r in 0..rows {
            if r != 1 {
                x[r * cols + (r * 7919) % cols] = 0.9;
            }
        }
        let (it, bt, ot) = (
            shape_str(&[rows, cols], "f32"),
            shape_str(&[rows, cols], "i1"),
            shape_str(&[rows], "i1"),
        );
        let src = format!(
            "func.func @main(%x: tensor<{it}>) -> tensor<{ot}> {{\n  %t = stablehlo.constant dense<0.75> : tensor<{it}>\n  %b = stablehlo.compare GT, %x, %t, FLOAT : (tensor<{it}>, tensor<{it}>) -> tensor<{bt}>\n  %f = stablehlo.constant dense<false> : tensor<i1>\n  %r = stablehlo.reduce(%b init: %f) applies stablehlo.or across dimensions = [1] : (tensor<{bt}>, tensor<i1>) -> tensor<{ot}>\n  return %r : tensor<{ot}>\n}}\n"
        );
        let (out, kernels) = run(&src, bound, &[upload_f32(&[rows, cols], &x)]);
        if bound.is_some() {
            assert!(kernels > 1, "{rows}x{cols} was not split");
        }
        assert_eq!(out[0].len(), rows);
        for (r, &b) in out[0].iter().enumerate() {
            assert_eq!(b != 0, r != 1, "{rows}x{cols} row {r}");
        }
    }
}

#[test]
fn short_sorts_rank_or_go_bitonic() {
    // 100 keys: ranking loops 100 times per element, more than a bound of 64 allows, so the
    // bitonic network sorts them; at the default bound, ranking.
    let src = "func.func @main(%x: tensor<3x100xi32>) -> tensor<3x100xi32> {\n  %s = \"stablehlo.sort\"(%x) <{dimension = 1 : i64, is_stable = true}> ({\n  ^bb0(%a: tensor<i32>, %b: tensor<i32>):\n    %c = stablehlo.compare LT, %a, %b, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n    stablehlo.return %c : tensor<i1>\n  }) : (tensor<3x100xi32>) -> tensor<3x100xi32>\n  return %s : tensor<3x100xi32>\n}\n";
    let x: Vec<i32> = data(300, 8).iter().map(|v| (v * 50.0) as i32).collect();
    let t = TensorType::new(vec![3, 100], ElementType::I32);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut want = x.clone();
    for row in want.chunks_mut(100) {
        row.sort();
    }
    for (bound, split) in [(Some(64), true), (None, false)] {
        let buf = device().upload(&t, &bytes).unwrap();
        let (out, kernels) = run(src, bound, &[buf]);
        assert_eq!(i32s(&out[0]), want, "bound {bound:?}");
        assert_eq!(kernels > 1, split, "bound {bound:?}: {kernels} kernels");
    }
}

/// `table.at[ids].add(rows)` (or with `combiner`) as StableHLO: a `rows x cols` f32 table,
/// `ids` i32 indices, one `cols` row of updates per id.
fn embedding_scatter(rows: usize, cols: usize, ids: usize, combiner: &str) -> String {
    format!(
        "func.func @main(%t: tensor<{rows}x{cols}xf32>, %i: tensor<{ids}x1xi32>, %u: tensor<{ids}x{cols}xf32>) -> tensor<{rows}x{cols}xf32> {{\n  %s = \"stablehlo.scatter\"(%t, %i, %u) ({{\n  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n    %c = stablehlo.{combiner} %a, %b : tensor<f32>\n    stablehlo.return %c : tensor<f32>\n  }}) {{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}} : (tensor<{rows}x{cols}xf32>, tensor<{ids}x1xi32>, tensor<{ids}x{cols}xf32>) -> tensor<{rows}x{cols}xf32>\n  return %s : tensor<{rows}x{cols}xf32>\n}}\n"
    )
}

/// Checks `got`, `table.at[ids].add(upd)` of a `[rows, cols]` table (ids outside it skipped),
/// against the host's f64 sums, within the rounding of each element's number of terms.
fn check_embedding_add(
    got: &[f32],
    (table, ids, upd): (&[f32], &[i32], &[f32]),
    cols: usize,
    what: &str,
) {
    let rows = table.len() / cols;
    let mut want: Vec<f64> = table.iter().map(|&x| x as f64).collect();
    let mut hits = vec![0usize; rows];
    for (k, &id) in ids.iter().enumerate() {
        if id >= 0 && (id as usize) < rows {
            hits[id as usize] += 1;
            for c in 0..cols {
                want[id as usize * cols + c] += upd[k * cols + c] as f64;
            }
        }
    }
    assert_eq!(got.len(), want.len(), "{what}");
    for (e, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            close(g, w, hits[e / cols] + 1),
            "{what}, element {e}: got {g}, want {w}"
        );
    }
}

#[test]
fn embedding_scatters_sort_their_windows_in_one_workgroup_up_to_4096() {
    // Crowded rows (every third id is 5), ids outside the table (skipped), ties kept in
    // window order; up to 4096 windows one sorting launch, beyond it one launch per stage
    // (the sorted path: on CPU adapters the default walks the windows by blocks of rows).
    let (rows, cols) = (256usize, 128usize);
    for n in [65usize, 504, 3000, 4096, 5000] {
        let ids: Vec<i32> = (0..n)
            .map(|k| {
                if k % 3 == 0 {
                    5
                } else {
                    ((k * 7919) % (rows + 9)) as i32 - 4
                }
            })
            .collect();
        let table = data(rows * cols, 8);
        let upd = data(n * cols, 9);
        let it = TensorType::new(vec![n as i64, 1], ElementType::I32);
        let ib: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        let args = [
            upload_f32(&[rows, cols], &table),
            device().upload(&it, &ib).unwrap(),
            upload_f32(&[n, cols], &upd),
        ];
        let src = embedding_scatter(rows, cols, n, "add");
        // The sorted path (CPU adapters walk such windows by blocks of rows instead: checked
        // against the same reference after it).
        let sorted = CompileOptions {
            scatter_sweep: Some(false),
            ..options(None)
        };
        let exe =
            compile(&device(), src.as_bytes(), &sorted).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let sorts_in_one = exe.kernels().iter().any(|k| k.name.ends_with("_sort"));
        let passes = std::env::var("WGPU_HLO_SCATTER_SORT").is_ok();
        assert_eq!(sorts_in_one, n <= 4096 && !passes, "{n} ids");
        let out = exe.execute_blocking(&args).unwrap();
        let got = f32s(&out[0].read_to_host_blocking().unwrap());
        check_embedding_add(&got, (&table, &ids, &upd), cols, &format!("{n} ids"));
        let (out, _) = run(&src, None, &args);
        check_embedding_add(
            &f32s(&out[0]),
            (&table, &ids, &upd),
            cols,
            &format!("{n} ids"),
        );
    }
}

#[test]
fn scatter_adds_split_past_the_bound() {
    // Ids crowd a few rows (one row gets about half of them), some fall outside the table
    // (skipped whole), under bounds far below the number of windows.
    let (rows, cols) = (40usize, 3usize);
    for (n, bound) in [(300usize, 16u64), (1000, 64), (2500, 40)] {
        let mut s = 12345u64 + n as u64;
        let ids: Vec<i32> = (0..n)
            .map(|k| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (s >> 33) as i32;
                if k % 2 == 0 {
                    7
                } else {
                    r.rem_euclid(rows as i32 + 6) - 3
                }
            })
            .collect();
        let table = data(rows * cols, 3);
        let upd = data(n * cols, 5);
        let it = TensorType::new(vec![n as i64, 1], ElementType::I32);
        let ib: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        let args = [
            upload_f32(&[rows, cols], &table),
            device().upload(&it, &ib).unwrap(),
            upload_f32(&[n, cols], &upd),
        ];
        let src = embedding_scatter(rows, cols, n, "add");
        let (out, kernels) = run(&src, Some(bound), &args);
        let got = f32s(&out[0]);
        check_embedding_add(
            &got,
            (&table, &ids, &upd),
            cols,
            &format!("{n} ids, bound {bound}"),
        );
        // Sort init + passes + partials + at least one fold.
        assert!(
            kernels >= 4,
            "{n} ids under bound {bound}: {kernels} kernels"
        );
    }
    // Other combiners have no identity to start chunks from: still refused, honestly.
    let e = compile_error(&embedding_scatter(40, 3, 300, "maximum"), Some(16));
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
}
