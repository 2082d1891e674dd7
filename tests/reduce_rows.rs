//! Reductions of odd shapes through every strategy the reduce emitter picks (a subgroup per
//! row, a thread per output, a workgroup per output, partials for full reductions): each reduce
//! kind (add, max, min, multiply, and, or, argmax-style variadic) on f32, i32 and i1, against
//! host references; and a 16M-element full sum against the host's f64 sum.

mod common;

use common::{data, device, f32s, upload_f32};

use wgpu_hlo::compile::{compile, CompileOptions};

/// Compiles and runs `src` on `args`; returns every result's bytes.
fn run(src: &str, args: &[wgpu_hlo::runtime::DeviceBuffer]) -> Vec<Vec<u8>> {
    let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let out = exe.execute_blocking(args).unwrap();
    out.iter()
        .map(|b| b.read_to_host_blocking().unwrap())
        .collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Shapes `[rows, cols]` reduced over their rows (dimension 1) and their columns (0).
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 1000),
    (3, 1000),
    (16, 33),
    (1000, 3),
    (64, 31),
    (40, 1025),
    (17, 5000),
    (1025, 1025),
    // Rows and kept columns of a multiple of 4: quad reads on CPU adapters.
    (129, 1028),
    (2049, 256),
    // Few such columns of many rows (a bias gradient): chunks of rows, four columns per
    // thread, then a fold of the partials on CPU adapters.
    (25088, 32),
    (3001, 4),
    // Columns enough for the cores, of a large input: chunks of 256 rows (the last one
    // short), four groups of four columns per thread where they divide, then a fold.
    (2051, 1024),
    (600, 4100),
];

/// `reduce` of `x` (f32 data, or through `producer` of it) with body op `body` over `dim`;
/// `ty` the reduced element type, `init` its initial value.
fn source(
    (rows, cols): (usize, usize),
    dim: usize,
    producer: &str,
    ty: &str,
    init: &str,
    body: &str,
) -> String {
    let out = if dim == 1 { rows } else { cols };
    format!(
        "func.func @main(%a: tensor<{rows}x{cols}xf32>) -> tensor<{out}x{ty}> {{\n  {producer}\n  %z = stablehlo.constant dense<{init}> : tensor<{ty}>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.{body} across dimensions = [{dim}] : (tensor<{rows}x{cols}x{ty}>, tensor<{ty}>) -> tensor<{out}x{ty}>\n  return %s : tensor<{out}x{ty}>\n}}\n"
    )
}

/// The host's reduction of `v` (`rows x cols`) over `dim`, folding with `f` from `init`.
fn host<T: Copy>(
    v: &[T],
    (rows, cols): (usize, usize),
    dim: usize,
    init: T,
    f: impl Fn(T, T) -> T,
) -> Vec<T> {
    if dim == 1 {
        (0..rows)
            .map(|r| {
                v[r * cols..(r + 1) * cols]
                    .iter()
                    .fold(init, |a, &b| f(a, b))
            })
            .collect()
    } else {
        (0..cols)
            .map(|c| (0..rows).fold(init, |a, r| f(a, v[r * cols + c])))
            .collect()
    }
}

#[test]
fn f32_reductions_of_odd_shapes() {
    for &shape in SHAPES {
        let (rows, cols) = shape;
        let a = data(rows * cols, 11);
        // Products of values near 1, so that long rows stay finite.
        let near1: Vec<f32> = a.iter().map(|x| 1.0 + x / 1024.0).collect();
        for dim in [1, 0] {
            let arg = [upload_f32(&[rows, cols], &a)];
            let t = format!("tensor<{rows}x{cols}xf32>");
            let copy = format!("%x = stablehlo.add %a, %a : {t}");
            let got = f32s(&run(&source(shape, dim, &copy, "f32", "0.0", "add"), &arg)[0]);
            let twice: Vec<f64> = a.iter().map(|&x| 2.0 * x as f64).collect();
            let want = host(&twice, shape, dim, 0.0, |p, q| p + q);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let terms = (rows * cols / want.len()) as f64;
                assert!(
                    (g as f64 - w).abs() <= 1e-6 * terms + 1e-6,
                    "sum {shape:?} over {dim}, [{i}]: got {g}, want {w}"
                );
            }
            for (body, init, f) in [
                ("maximum", "0xFF800000", f32::max as fn(f32, f32) -> f32),
                ("minimum", "0x7F800000", f32::min),
            ] {
                let neg = format!("%x = stablehlo.negate %a : {t}");
                let got = f32s(&run(&source(shape, dim, &neg, "f32", init, body), &arg)[0]);
                let negated: Vec<f32> = a.iter().map(|x| -x).collect();
                let init = if body == "maximum" {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                };
                assert_eq!(
                    got,
                    host(&negated, shape, dim, init, f),
                    "{body} {shape:?} over {dim}"
                );
            }
            let arg = [upload_f32(&[rows, cols], &near1)];
            let copy = format!("%x = stablehlo.abs %a : {t}");
            let got = f32s(&run(&source(shape, dim, &copy, "f32", "1.0", "multiply"), &arg)[0]);
            let wide: Vec<f64> = near1.iter().map(|&x| x as f64).collect();
            let want = host(&wide, shape, dim, 1.0, |p, q| p * q);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= 1e-6 * (rows.max(cols) as f64) * w.abs(),
                    "product {shape:?} over {dim}, [{i}]: got {g}, want {w}"
                );
            }
        }
    }
}

/// IEEE maximum / minimum as XLA defines them: NaN if either is NaN, +0 > -0.
fn ieee_extremum(max: bool) -> impl Fn(f32, f32) -> f32 {
    move |a: f32, b: f32| {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else if a == b {
            let (x, y) = (a.to_bits(), b.to_bits());
            f32::from_bits(if max { x & y } else { x | y })
        } else if (a > b) == max {
            a
        } else {
            b
        }
    }
}

/// `data` of `shape` with special values per output of a reduction over `dim` (output `o`
/// by `o % 6`): none, a NaN, a NaN with its sign bit set, only signed zeros (one +0 among
/// -0s), only -0, and both infinities.
fn specials((rows, cols): (usize, usize), dim: usize, seed: u64) -> Vec<f32> {
    let mut v = data(rows * cols, seed);
    let (outs, len) = if dim == 1 { (rows, cols) } else { (cols, rows) };
    let at = |o: usize, r: usize| if dim == 1 { o * cols + r } else { r * cols + o };
    for o in 0..outs {
        let p = (o * 7 + 3) % len;
        match o % 6 {
            1 => v[at(o, p)] = f32::NAN,
            2 => v[at(o, p)] = f32::from_bits(0xffc0_0001),
            3 | 4 => {
                for r in 0..len {
                    v[at(o, r)] = -0.0;
                }
                if o % 6 == 3 {
                    v[at(o, p)] = 0.0;
                }
            }
            5 => {
                v[at(o, p)] = f32::INFINITY;
                v[at(o, (p + 1) % len)] = f32::NEG_INFINITY;
            }
            _ => {}
        }
    }
    v
}

/// Equal bits, or both NaN.
fn same_f32(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()))
}

/// Maximum and minimum reductions (whose folds test for NaN once per accumulator, not per
/// element: `reduce_kernel::Fold`) keep every NaN, either sign of NaN, and the order of
/// signed zeros, through every strategy: `SHAPES` over rows and columns, an init that is NaN,
/// and the merged row kernel (the row's maximum next to an output over the row).
#[test]
fn max_and_min_keep_nans_and_zero_signs() {
    for &shape in SHAPES {
        let (rows, cols) = shape;
        let t = format!("tensor<{rows}x{cols}xf32>");
        for dim in [1, 0] {
            let a = specials(shape, dim, 17);
            let arg = [upload_f32(&[rows, cols], &a)];
            let negated: Vec<f32> = a.iter().map(|x| -x).collect();
            let neg = format!("%x = stablehlo.negate %a : {t}");
            for (body, max) in [("maximum", true), ("minimum", false)] {
                for (init, init_f) in [
                    (
                        if max { "0xFF800000" } else { "0x7F800000" },
                        if max {
                            f32::NEG_INFINITY
                        } else {
                            f32::INFINITY
                        },
                    ),
                    ("0x7FC00000", f32::NAN),
                ] {
                    let got = f32s(&run(&source(shape, dim, &neg, "f32", init, body), &arg)[0]);
                    let want = host(&negated, shape, dim, init_f, ieee_extremum(max));
                    assert!(
                        same_f32(&got, &want),
                        "{body} {shape:?} over {dim} from {init}: got {got:?}, want {want:?}"
                    );
                }
            }
        }
        // The row kernel: each row's maximum, and x minus it.
        let a = specials(shape, 1, 19);
        let v = format!("tensor<{rows}xf32>");
        let src = format!(
            "func.func @main(%x: {t}) -> ({v}, {t}) {{\n  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>\n  %mx = stablehlo.reduce(%x init: %m) applies stablehlo.maximum across dimensions = [1] : ({t}, tensor<f32>) -> {v}\n  %bm = stablehlo.broadcast_in_dim %mx, dims = [0] : ({v}) -> {t}\n  %d = stablehlo.subtract %x, %bm : {t}\n  return %mx, %d : {v}, {t}\n}}\n"
        );
        let out = run(&src, &[upload_f32(&[rows, cols], &a)]);
        let want = host(&a, shape, 1, f32::NEG_INFINITY, ieee_extremum(true));
        let got = f32s(&out[0]);
        assert!(
            same_f32(&got, &want),
            "row maximum {shape:?}: got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn integer_and_boolean_reductions_of_odd_shapes() {
    for &shape in SHAPES {
        let (rows, cols) = shape;
        let a = data(rows * cols, 5);
        let ints: Vec<i32> = a.iter().map(|x| (x * 1000.0) as i32).collect();
        let arg = [upload_f32(&[rows, cols], &a)];
        let (tf, ti) = (
            format!("tensor<{rows}x{cols}xf32>"),
            format!("tensor<{rows}x{cols}xi32>"),
        );
        let to_int = format!(
            "%k = stablehlo.constant dense<1000.0> : {tf}\n  %m = stablehlo.multiply %a, %k : {tf}\n  %x = stablehlo.convert %m : ({tf}) -> {ti}"
        );
        for dim in [1, 0] {
            let sum = i32s(&run(&source(shape, dim, &to_int, "i32", "0", "add"), &arg)[0]);
            assert_eq!(
                sum,
                host(&ints, shape, dim, 0, i32::wrapping_add),
                "i32 sum {shape:?} over {dim}"
            );
            let max = i32s(
                &run(
                    &source(shape, dim, &to_int, "i32", "-2147483648", "maximum"),
                    &arg,
                )[0],
            );
            assert_eq!(
                max,
                host(&ints, shape, dim, i32::MIN, i32::max),
                "i32 max {shape:?} over {dim}"
            );
            let bits: Vec<bool> = a.iter().map(|&x| x > 0.9).collect();
            let pred = format!(
                "%k = stablehlo.constant dense<0.9> : {tf}\n  %x = stablehlo.compare GT, %a, %k, FLOAT : ({tf}, {tf}) -> tensor<{rows}x{cols}xi1>"
            );
            for (body, init, f) in [
                ("or", "false", (|p, q| p || q) as fn(bool, bool) -> bool),
                ("and", "true", |p, q| p && q),
            ] {
                let got: Vec<bool> = run(&source(shape, dim, &pred, "i1", init, body), &arg)[0]
                    .iter()
                    .map(|&b| b != 0)
                    .collect();
                assert_eq!(
                    got,
                    host(&bits, shape, dim, init == "true", f),
                    "{body} {shape:?} over {dim}"
                );
            }
        }
    }
}

/// A variadic `reduce` over dimension `dim` of `[rows, cols]` f32 values and their index along
/// it: the largest value and the first index holding it (argmax).
fn argmax_source(rows: usize, cols: usize, dim: usize) -> String {
    let out = if dim == 1 { rows } else { cols };
    format!(
        r#"func.func @main(%v: tensor<{rows}x{cols}xf32>) -> (tensor<{out}xf32>, tensor<{out}xi32>) {{
  %i = stablehlo.iota dim = {dim} : tensor<{rows}x{cols}xi32>
  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.reduce(%v init: %m), (%i init: %z) across dimensions = [{dim}] : (tensor<{rows}x{cols}xf32>, tensor<{rows}x{cols}xi32>, tensor<f32>, tensor<i32>) -> (tensor<{out}xf32>, tensor<{out}xi32>)
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
  return %r#0, %r#1 : tensor<{out}xf32>, tensor<{out}xi32>
}}
"#
    )
}

#[test]
fn argmax_over_rows_and_columns_of_odd_shapes() {
    for &(rows, cols) in SHAPES {
        for dim in [1, 0] {
            // Few distinct values, so that ties (first index wins) are common.
            let v: Vec<f32> = data(rows * cols, 9 + dim as u64)
                .iter()
                .map(|x| (x * 4.0).round())
                .collect();
            let out = run(
                &argmax_source(rows, cols, dim),
                &[upload_f32(&[rows, cols], &v)],
            );
            let (vals, idx) = (f32s(&out[0]), i32s(&out[1]));
            let (outer, inner) = if dim == 1 { (rows, cols) } else { (cols, rows) };
            for o in 0..outer {
                let at = |r: usize| {
                    if dim == 1 {
                        v[o * cols + r]
                    } else {
                        v[r * cols + o]
                    }
                };
                let (mut best, mut pos) = (f32::NEG_INFINITY, 0);
                for r in 0..inner {
                    if at(r) > best {
                        (best, pos) = (at(r), r);
                    }
                }
                assert_eq!(
                    (vals[o], idx[o]),
                    (best, pos as i32),
                    "{rows}x{cols} over {dim}, output {o}"
                );
            }
        }
    }
}

/// On lavapipe with default settings, rows and kept columns whose length is a multiple of 4
/// read groups of four elements as one texel (quad reads); `f32_reductions_of_odd_shapes` and
/// the argmax tests check their results.
#[test]
fn long_rows_and_wide_columns_read_quads_on_lavapipe() {
    let lavapipe_defaults = device().info().name.contains("llvmpipe")
        && [
            "WGPU_HLO_TEXTURE_READS",
            "WGPU_HLO_QUAD_READS",
            "WGPU_HLO_REDUCE",
        ]
        .iter()
        .all(|v| std::env::var(v).is_err())
        && std::env::var("WGPU_HLO_ADAPTER_CLASS").is_err();
    if !lavapipe_defaults {
        return;
    }
    for (shape, dim) in [
        ((129, 1028), 1),
        ((2049, 256), 0),
        ((300, 4096), 0),
        ((25088, 32), 0),
    ] {
        let abs = format!(
            "%x = stablehlo.abs %a : tensor<{}x{}xf32>",
            shape.0, shape.1
        );
        let src = source(shape, dim, &abs, "f32", "0.0", "add");
        let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{src}"));
        assert!(
            exe.kernels().iter().any(|k| k.wgsl.contains("in0_quad(")),
            "sum of {shape:?} over {dim}: no quad reads"
        );
        let a = data(shape.0 * shape.1, 3);
        let out = exe
            .execute_blocking(&[upload_f32(&[shape.0, shape.1], &a)])
            .unwrap();
        let got = f32s(&out[0].read_to_host_blocking().unwrap());
        let abs: Vec<f32> = a.iter().map(|x| x.abs()).collect();
        let want = host(&abs, shape, dim, 0.0, |p, q| p + q);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{shape:?} over {dim}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn full_sum_of_16m_elements_is_accurate() {
    let n = 1 << 24;
    let a = data(n, 21);
    let src = format!(
        "func.func @main(%a: tensor<{n}xf32>) -> tensor<f32> {{\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %s = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{n}xf32>, tensor<f32>) -> tensor<f32>\n  return %s : tensor<f32>\n}}\n"
    );
    let got = f32s(&run(&src, &[upload_f32(&[n], &a)])[0])[0] as f64;
    let want: f64 = a.iter().map(|&x| x as f64).sum();
    let scale: f64 = a.iter().map(|&x| (x as f64).abs()).sum();
    // One sequential f32 sum per invocation used to be off by about 1e-9 of the sum of the
    // magnitudes here; partials over 64 chunks are well within this.
    assert!(
        (got - want).abs() <= 2e-10 * scale,
        "got {got}, want {want} (sum of magnitudes {scale})"
    );
}

#[test]
fn softmax_is_three_kernels_and_right() {
    // On CPU adapters with 8 lanes, rows held in registers: (530, 1001) one element at a time,
    // 126 per lane, the last guarded (1001 = 125 x 8 + 1); (530, 1012) in groups of four
    // stored as vec4s, the last group on 5 lanes only (1012 = 31 x 32 + 20); (64, 33) and
    // (64, 36) the same under the size threshold.
    for (rows, cols) in [
        (1usize, 1usize),
        (3, 1000),
        (5, 5000),
        (64, 33),
        (64, 36),
        (530, 1001),
        (530, 1012),
    ] {
        let t = format!("tensor<{rows}x{cols}xf32>");
        let v = format!("tensor<{rows}xf32>");
        let src = format!(
            "func.func @main(%x: {t}) -> {t} {{\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>\n  %mx = stablehlo.reduce(%x init: %m) applies stablehlo.maximum across dimensions = [1] : ({t}, tensor<f32>) -> {v}\n  %bm = stablehlo.broadcast_in_dim %mx, dims = [0] : ({v}) -> {t}\n  %d = stablehlo.subtract %x, %bm : {t}\n  %e = stablehlo.exponential %d : {t}\n  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> {v}\n  %bs = stablehlo.broadcast_in_dim %s, dims = [0] : ({v}) -> {t}\n  %y = stablehlo.divide %e, %bs : {t}\n  return %y : {t}\n}}\n"
        );
        let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{src}"));
        // The max, the sum of exp(x - max), and the division recomputing exp(x - max).
        assert!(
            exe.kernels().len() <= 3,
            "softmax {rows}x{cols}: {} kernels",
            exe.kernels().len()
        );
        // (530, 1012) reads its groups of four as one texel each (quad reads) on lavapipe.
        let lavapipe_defaults = device().info().name.contains("llvmpipe")
            && [
                "WGPU_HLO_TEXTURE_READS",
                "WGPU_HLO_ROW_REGISTERS",
                "WGPU_HLO_QUAD_READS",
            ]
            .iter()
            .all(|v| std::env::var(v).is_err())
            && std::env::var("WGPU_HLO_ADAPTER_CLASS").is_err();
        if lavapipe_defaults && (rows, cols) == (530, 1012) {
            assert!(
                exe.kernels().iter().any(|k| k.wgsl.contains("in0_quad(")),
                "softmax {rows}x{cols}: no quad reads"
            );
        }
        let x: Vec<f32> = data(rows * cols, 4).iter().map(|a| a * 20.0).collect();
        let out = exe
            .execute_blocking(&[upload_f32(&[rows, cols], &x)])
            .unwrap();
        let got = f32s(&out[0].read_to_host_blocking().unwrap());
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
            let s: f64 = row.iter().map(|&a| (a as f64 - m).exp()).sum();
            for (j, &a) in row.iter().enumerate() {
                let w = (a as f64 - m).exp() / s;
                let g = got[r * cols + j] as f64;
                assert!(
                    (g - w).abs() <= 1e-5 * w + 1e-7,
                    "softmax {rows}x{cols} [{r}, {j}]: got {g}, want {w}"
                );
            }
        }
    }
}

/// Reductions that keep the innermost dimension (columns), of 2-D and 3-D shapes, with a
/// fused producer, against host references. GPU adapters (and `WGPU_HLO_ADAPTER_CLASS=gpu`,
/// as CI runs this file again) read each row's stretch of 32 outputs with consecutive
/// invocations (column tiles), split into chunks of rows where the tiles are few.
#[test]
fn column_reductions_read_rows_in_tiles_on_gpus() {
    let gpu_class = wgpu_hlo::target::cpu_adapter_from_env()
        .map_or(device().info().device_type != "Cpu", |cpu| !cpu)
        && std::env::var("WGPU_HLO_COLUMN_TILES").is_err();
    // (shape, reduced dimensions, body, init)
    let cases: &[(&[usize], &[usize], &str, &str)] = &[
        (&[8, 63, 512], &[0, 1], "add", "0.0"),
        (&[4, 3000, 40], &[1], "maximum", "0xFF800000"),
        (&[3, 700, 33], &[0, 1], "add", "0.0"),
        (&[25088, 32], &[0], "add", "0.0"),
        (&[2049, 256], &[0], "minimum", "0x7F800000"),
        (&[4096, 1000], &[0], "add", "0.0"),
    ];
    for &(shape, red, body, init) in cases {
        let t = |d: &[usize]| {
            let dims: Vec<String> = d.iter().map(|x| x.to_string()).collect();
            format!("tensor<{}xf32>", dims.join("x"))
        };
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !red.contains(d)).collect();
        let out_dims: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
        let dims: Vec<String> = red.iter().map(|d| d.to_string()).collect();
        let src = format!(
            "func.func @main(%a: {ti}) -> {to} {{\n  %x = stablehlo.multiply %a, %a : {ti}\n  %z = stablehlo.constant dense<{init}> : tensor<f32>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.{body} across dimensions = [{d}] : ({ti}, tensor<f32>) -> {to}\n  return %s : {to}\n}}\n",
            ti = t(shape),
            to = t(&out_dims),
            d = dims.join(", ")
        );
        let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{src}"));
        if gpu_class {
            assert!(
                exe.kernels()
                    .iter()
                    .any(|k| k.wgsl.contains("(column tiles)")),
                "{shape:?} over {red:?}: no column tiles"
            );
        }
        let n: usize = shape.iter().product();
        let a = data(n, 17);
        let out = exe.execute_blocking(&[upload_f32(shape, &a)]).unwrap();
        let got = f32s(&out[0].read_to_host_blocking().unwrap());
        // The host's reduction in f64, output by output.
        let count: usize = out_dims.iter().product();
        let mut want = vec![
            match body {
                "add" => 0.0f64,
                "maximum" => f64::NEG_INFINITY,
                _ => f64::INFINITY,
            };
            count
        ];
        let mut mag = vec![0.0f64; count];
        for (i, &x) in a.iter().enumerate() {
            let (mut rest, mut o, mut stride) = (i, 0, 1);
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = rest % shape[d];
                rest /= shape[d];
            }
            for &d in kept.iter().rev() {
                o += idx[d] * stride;
                stride *= shape[d];
            }
            let v = f64::from(x) * f64::from(x);
            want[o] = match body {
                "add" => want[o] + v,
                "maximum" => want[o].max(v),
                _ => want[o].min(v),
            };
            mag[o] += v;
        }
        for (o, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let tol = if body == "add" { 1e-5 * mag[o] } else { 0.0 };
            assert!(
                (f64::from(g) - w).abs() <= tol.max(w.abs() * 1e-7),
                "{shape:?} over {red:?}, output {o}: {g} vs {w}"
            );
        }
    }
}
