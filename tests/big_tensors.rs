//! Tensors larger than one storage binding may be (`max_storage_buffer_binding_size`: 128 MiB
//! on lavapipe): with the binding limit set low through `CompileOptions::max_binding_bytes`,
//! small tensors take the same paths as lavapipe's 256 MiB ones. Elementwise kernels (fused
//! chains, broadcast operands, packed narrow types, views) and full, row and column
//! reductions are launched a window at a time and match a host reference; kernels that read a
//! large tensor at other elements than their own (gathers, transposes, slices, reductions of
//! middle dimensions, dots) bind it in parts and match too; what cannot be bound either way is
//! refused with RESOURCE_EXHAUSTED naming the tensor and the limit.

mod common;

use common::{data, device, f32s, upload_f32};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::error::ErrorKind;
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::DeviceBuffer;

/// The binding limit of these tests: 4 KiB (1024 `f32`s).
const LIMIT: u64 = 4096;

fn options(max_loop: Option<u64>) -> CompileOptions {
    CompileOptions {
        max_binding_bytes: Some(LIMIT),
        max_loop_iterations: max_loop,
        ..Default::default()
    }
}

fn upload(shape: &[usize], dtype: ElementType, bytes: &[u8]) -> DeviceBuffer {
    let t = TensorType::new(shape.iter().map(|&d| d as i64).collect(), dtype);
    device().upload(&t, bytes).unwrap()
}

/// Compiles `src` with the low binding limit, runs it on `args`; returns every result's bytes
/// and the program listing.
fn run(src: &str, max_loop: Option<u64>, args: &[DeviceBuffer]) -> (Vec<Vec<u8>>, String) {
    let exe = compile(&device(), src.as_bytes(), &options(max_loop))
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let out = exe.execute_blocking(args).unwrap();
    let bytes = out
        .iter()
        .map(|b| b.read_to_host_blocking().unwrap())
        .collect();
    (bytes, exe.program_listing())
}

/// [`run`]'s results under the adapter's own binding limit.
fn run_unlimited(src: &str, max_loop: Option<u64>, args: &[DeviceBuffer]) -> Vec<Vec<u8>> {
    let options = CompileOptions {
        max_loop_iterations: max_loop,
        ..Default::default()
    };
    let exe = compile(&device(), src.as_bytes(), &options).unwrap_or_else(|e| panic!("{e}\n{src}"));
    exe.execute_blocking(args)
        .unwrap()
        .iter()
        .map(|b| b.read_to_host_blocking().unwrap())
        .collect()
}

fn assert_parts(listing: &str) {
    assert!(
        listing.contains(" parts -> "),
        "no kernel was launched in parts:\n{listing}"
    );
}

#[test]
fn elementwise_chains_in_windows() {
    // tanh(x) * 2 + y with y broadcast along rows, and x + 1 viewed flat: 40,000 bytes at
    // a 4 KiB limit, rows not a multiple of a window.
    let (r, c) = (100usize, 103usize);
    let src = format!(
        r#"func.func @main(%x: tensor<{r}x{c}xf32>, %y: tensor<{c}xf32>) -> (tensor<{r}x{c}xf32>, tensor<{n}xf32>) {{
  %two = stablehlo.constant dense<2.0> : tensor<{r}x{c}xf32>
  %one = stablehlo.constant dense<1.0> : tensor<{r}x{c}xf32>
  %t = stablehlo.tanh %x : tensor<{r}x{c}xf32>
  %m = stablehlo.multiply %t, %two : tensor<{r}x{c}xf32>
  %b = stablehlo.broadcast_in_dim %y, dims = [1] : (tensor<{c}xf32>) -> tensor<{r}x{c}xf32>
  %s = stablehlo.add %m, %b : tensor<{r}x{c}xf32>
  %p = stablehlo.add %x, %one : tensor<{r}x{c}xf32>
  %f = stablehlo.reshape %p : (tensor<{r}x{c}xf32>) -> tensor<{n}xf32>
  return %s, %f : tensor<{r}x{c}xf32>, tensor<{n}xf32>
}}
"#,
        n = r * c
    );
    let (x, y) = (data(r * c, 1), data(c, 2));
    let (out, listing) = run(&src, None, &[upload_f32(&[r, c], &x), upload_f32(&[c], &y)]);
    assert_parts(&listing);
    let (s, f) = (f32s(&out[0]), f32s(&out[1]));
    for i in 0..r * c {
        let want = (x[i] as f64).tanh() * 2.0 + y[i % c] as f64;
        assert!(
            (s[i] as f64 - want).abs() < 1e-5,
            "element {i}: {} vs {want}",
            s[i]
        );
        assert_eq!(f[i], x[i] + 1.0, "element {i}");
    }
}

#[test]
fn packed_types_in_windows() {
    // i8 + 1 and x > 0 (an i1 result), 10,003 elements: windows of whole words.
    let n = 10_003usize;
    let src = format!(
        r#"func.func @main(%a: tensor<{n}xi8>, %x: tensor<{n}xf32>) -> (tensor<{n}xi8>, tensor<{n}xi1>, tensor<{n}xbf16>) {{
  %one = stablehlo.constant dense<1> : tensor<{n}xi8>
  %zero = stablehlo.constant dense<0.0> : tensor<{n}xf32>
  %s = stablehlo.add %a, %one : tensor<{n}xi8>
  %p = stablehlo.compare GT, %x, %zero, FLOAT : (tensor<{n}xf32>, tensor<{n}xf32>) -> tensor<{n}xi1>
  %h = stablehlo.convert %x : (tensor<{n}xf32>) -> tensor<{n}xbf16>
  return %s, %p, %h : tensor<{n}xi8>, tensor<{n}xi1>, tensor<{n}xbf16>
}}
"#
    );
    let a: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
    let x = data(n, 3);
    let (out, listing) = run(
        &src,
        None,
        &[upload(&[n], ElementType::I8, &a), upload_f32(&[n], &x)],
    );
    assert_parts(&listing);
    for i in 0..n {
        assert_eq!(out[0][i], a[i].wrapping_add(1), "i8 element {i}");
        assert_eq!(out[1][i], u8::from(x[i] > 0.0), "i1 element {i}");
        let h = u16::from_le_bytes([out[2][2 * i], out[2][2 * i + 1]]);
        let back = f32::from_bits((h as u32) << 16);
        assert!(
            (back - x[i]).abs() <= x[i].abs() / 128.0,
            "bf16 element {i}"
        );
    }
}

#[test]
fn large_results_of_small_operands() {
    // A broadcast constant (jnp.ones) and an iota: only the result is large.
    let n = 5000usize;
    let src = format!(
        r#"func.func @main() -> (tensor<{n}xf32>, tensor<{n}xi32>) {{
  %c = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{n}xf32>
  %i = stablehlo.iota dim = 0 : tensor<{n}xi32>
  return %b, %i : tensor<{n}xf32>, tensor<{n}xi32>
}}
"#
    );
    let (out, listing) = run(&src, None, &[]);
    assert_parts(&listing);
    assert!(f32s(&out[0]).iter().all(|&v| v == 1.0));
    for (i, c) in out[1].chunks(4).enumerate() {
        assert_eq!(i32::from_le_bytes([c[0], c[1], c[2], c[3]]), i as i32);
    }
}

/// `reduce add` of `x * x` over `dims` of an `f32` tensor, against the host's f64 sums.
fn check_sum(shape: &[usize], dims: &[usize], max_loop: Option<u64>) {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let oshape: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
    let ty = |s: &[usize]| s.iter().map(|d| format!("{d}x")).collect::<String>() + "f32";
    let (it, ot) = (ty(shape), ty(&oshape));
    let list = dims
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let src = format!(
        "func.func @main(%a: tensor<{it}>) -> tensor<{ot}> {{\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %x = stablehlo.multiply %a, %a : tensor<{it}>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [{list}] : (tensor<{it}>, tensor<f32>) -> tensor<{ot}>\n  return %s : tensor<{ot}>\n}}\n"
    );
    let n: usize = shape.iter().product();
    let a = data(n, 7);
    let (out, listing) = run(&src, max_loop, &[upload_f32(shape, &a)]);
    assert_parts(&listing);
    let got = f32s(&out[0]);
    let want = common::sum_of_squares(shape, &kept, &a);
    let terms = (n / want.len().max(1)) as f64;
    for (o, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-5 * terms.sqrt() * (1.0 + w.abs()),
            "{shape:?} over {dims:?} (loop bound {max_loop:?}), output {o}: got {g}, want {w}"
        );
    }
}

#[test]
fn full_row_and_column_reductions_in_windows() {
    // Everything; rows shorter and longer than a window; leading and trailing unit dims;
    // with the default loop bound and a low one (more partials, several folds).
    for bound in [None, Some(64)] {
        check_sum(&[100_003], &[0], bound);
        check_sum(&[40, 1000], &[1], bound);
        check_sum(&[700, 37], &[1], bound);
        check_sum(&[300, 333], &[0, 1], bound);
        check_sum(&[1, 6, 70, 50, 1], &[2, 3], bound);
        check_sum(&[2000, 5], &[0], bound);
        check_sum(&[300, 4, 3], &[0], bound);
        check_sum(&[50, 20, 1, 7], &[0, 1], bound);
    }
}

#[test]
fn integer_and_boolean_reductions_in_windows() {
    // max of i32 rows and `any` of a large i1 tensor computed from a large f32 one.
    let (r, c) = (30usize, 777usize);
    let src = format!(
        r#"func.func @main(%a: tensor<{r}x{c}xi32>, %x: tensor<{r}x{c}xf32>) -> (tensor<{r}xi32>, tensor<i1>) {{
  %m = stablehlo.constant dense<-2147483648> : tensor<i32>
  %f = stablehlo.constant dense<false> : tensor<i1>
  %big = stablehlo.constant dense<0.999> : tensor<{r}x{c}xf32>
  %s = stablehlo.reduce(%a init: %m) applies stablehlo.maximum across dimensions = [1] : (tensor<{r}x{c}xi32>, tensor<i32>) -> tensor<{r}xi32>
  %p = stablehlo.compare GT, %x, %big, FLOAT : (tensor<{r}x{c}xf32>, tensor<{r}x{c}xf32>) -> tensor<{r}x{c}xi1>
  %any = stablehlo.reduce(%p init: %f) applies stablehlo.or across dimensions = [0, 1] : (tensor<{r}x{c}xi1>, tensor<i1>) -> tensor<i1>
  return %s, %any : tensor<{r}xi32>, tensor<i1>
}}
"#
    );
    let a: Vec<i32> = (0..r * c)
        .map(|i| ((i as i64 * 2_654_435_761) % 1_000_003) as i32 - 500_000)
        .collect();
    let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
    for hit in [None, Some(r * c - 5)] {
        let mut x = vec![0.5f32; r * c];
        if let Some(i) = hit {
            x[i] = 1.0;
        }
        let (out, listing) = run(
            &src,
            None,
            &[
                upload(&[r, c], ElementType::I32, &bytes),
                upload_f32(&[r, c], &x),
            ],
        );
        assert_parts(&listing);
        for row in 0..r {
            let want = a[row * c..(row + 1) * c].iter().max().copied();
            let got = out[0][4 * row..4 * row + 4]
                .try_into()
                .map(i32::from_le_bytes);
            assert_eq!(got.ok(), want, "row {row}");
        }
        assert_eq!(out[1][0], u8::from(hit.is_some()), "any, hit {hit:?}");
    }
}

fn refused(src: &str) -> String {
    let e = compile(&device(), src.as_bytes(), &options(None))
        .err()
        .unwrap_or_else(|| panic!("compiled:\n{src}"));
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
    assert!(
        e.message.contains("max_storage_buffer_binding_size") && e.message.contains("4096"),
        "{e}"
    );
    e.message
}

/// Asserts some kernel binds an input in parts.
fn assert_bound_in_parts(listing: &str) {
    assert!(
        listing.contains(" parts)"),
        "no input was bound in parts:\n{listing}"
    );
}

/// The `r x c` row-major matrix `x` at (i, j).
fn at(x: &[f32], c: usize, i: usize, j: usize) -> f32 {
    x[i * c + j]
}

#[test]
fn transposes_and_slices_read_large_tensors_in_parts() {
    // 40 x 50 f32 (8,000 bytes): the transpose's result goes in windows and its operand is
    // bound in two parts; x + x^T reads x both at its own elements and across, so x is bound
    // whole (in parts) there too; a reversed slice reads anywhere.
    let (r, c) = (40usize, 50usize);
    let t = format!("tensor<{r}x{c}xf32>");
    let tt = format!("tensor<{c}x{r}xf32>");
    let src = format!(
        r#"func.func @main(%x: {t}, %y: tensor<{c}x{c}xf32>) -> ({tt}, tensor<{c}x{c}xf32>, tensor<8x40xf32>) {{
  %t = stablehlo.transpose %x, dims = [1, 0] : ({t}) -> {tt}
  %yt = stablehlo.transpose %y, dims = [1, 0] : (tensor<{c}x{c}xf32>) -> tensor<{c}x{c}xf32>
  %s = stablehlo.add %y, %yt : tensor<{c}x{c}xf32>
  %v = stablehlo.slice %x [3:11, 5:45] : ({t}) -> tensor<8x40xf32>
  %w = stablehlo.reverse %v, dims = [0, 1] : tensor<8x40xf32>
  return %t, %s, %w : {tt}, tensor<{c}x{c}xf32>, tensor<8x40xf32>
}}
"#
    );
    let (x, y) = (data(r * c, 11), data(c * c, 12));
    let (out, listing) = run(
        &src,
        None,
        &[upload_f32(&[r, c], &x), upload_f32(&[c, c], &y)],
    );
    assert_bound_in_parts(&listing);
    assert_parts(&listing);
    let (t, s, w) = (f32s(&out[0]), f32s(&out[1]), f32s(&out[2]));
    for i in 0..c {
        for j in 0..r {
            assert_eq!(t[i * r + j], at(&x, c, j, i), "transpose ({i}, {j})");
        }
        for j in 0..c {
            assert_eq!(
                s[i * c + j],
                at(&y, c, i, j) + at(&y, c, j, i),
                "x + x^T ({i}, {j})"
            );
        }
    }
    for i in 0..8 {
        for j in 0..40 {
            assert_eq!(
                w[i * 40 + j],
                at(&x, c, 10 - i, 44 - j),
                "reversed slice ({i}, {j})"
            );
        }
    }
}

#[test]
fn gathers_reductions_and_dots_read_large_tensors_in_parts() {
    // An embedding lookup from a 60 x 40 table (9,600 bytes: three parts), ids at both ends;
    // the softmax of a slice of it (a row kernel reading across); a sum over the middle
    // dimension of a 10 x 30 x 10 tensor; and a dot of a 30 x 50 operand.
    let src = r#"func.func @main(%table: tensor<60x40xf32>, %ids: tensor<7xi32>, %m: tensor<10x30x10xf32>, %a: tensor<30x50xf32>, %b: tensor<50x4xf32>) -> (tensor<7x40xf32>, tensor<8x30xf32>, tensor<10x10xf32>, tensor<30x4xf32>) {
  %i = stablehlo.broadcast_in_dim %ids, dims = [0] : (tensor<7xi32>) -> tensor<7x1xi32>
  %g = "stablehlo.gather"(%table, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 40>}> : (tensor<60x40xf32>, tensor<7x1xi32>) -> tensor<7x40xf32>
  %v = stablehlo.slice %table [3:11, 5:35] : (tensor<60x40xf32>) -> tensor<8x30xf32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %mx = stablehlo.reduce(%v init: %ninf) applies stablehlo.maximum across dimensions = [1] : (tensor<8x30xf32>, tensor<f32>) -> tensor<8xf32>
  %mb = stablehlo.broadcast_in_dim %mx, dims = [0] : (tensor<8xf32>) -> tensor<8x30xf32>
  %d = stablehlo.subtract %v, %mb : tensor<8x30xf32>
  %e = stablehlo.exponential %d : tensor<8x30xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %sum = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<8x30xf32>, tensor<f32>) -> tensor<8xf32>
  %sb = stablehlo.broadcast_in_dim %sum, dims = [0] : (tensor<8xf32>) -> tensor<8x30xf32>
  %sm = stablehlo.divide %e, %sb : tensor<8x30xf32>
  %mid = stablehlo.reduce(%m init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<10x30x10xf32>, tensor<f32>) -> tensor<10x10xf32>
  %dot = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<30x50xf32>, tensor<50x4xf32>) -> tensor<30x4xf32>
  return %g, %sm, %mid, %dot : tensor<7x40xf32>, tensor<8x30xf32>, tensor<10x10xf32>, tensor<30x4xf32>
}
"#;
    let table = data(60 * 40, 21);
    let ids: [i32; 7] = [59, 0, 31, 7, 59, 25, 1];
    let id_bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (m, a, b) = (data(3000, 22), data(1500, 23), data(200, 24));
    let (out, listing) = run(
        src,
        None,
        &[
            upload_f32(&[60, 40], &table),
            upload(&[7], ElementType::I32, &id_bytes),
            upload_f32(&[10, 30, 10], &m),
            upload_f32(&[30, 50], &a),
            upload_f32(&[50, 4], &b),
        ],
    );
    assert_bound_in_parts(&listing);
    // The gather's one launch covers its 280 results (one or two workgroups of 256
    // invocations, each of 1 or 4 results), not as many elements as a window of the table
    // could hold (4 or 16 workgroups).
    let exe = compile(&device(), src.as_bytes(), &options(None)).unwrap();
    let gather = exe
        .kernels()
        .into_iter()
        .find(|k| k.wgsl.contains("stablehlo.gather"))
        .expect("a gather kernel");
    let [x, y, z] = gather.workgroups;
    assert!(x * y * z <= 2, "{}: {:?}", gather.name, gather.workgroups);
    let (g, sm, mid, dot) = (f32s(&out[0]), f32s(&out[1]), f32s(&out[2]), f32s(&out[3]));
    for (k, &id) in ids.iter().enumerate() {
        for j in 0..40 {
            assert_eq!(
                g[k * 40 + j],
                at(&table, 40, id as usize, j),
                "gather ({k}, {j})"
            );
        }
    }
    for i in 0..8 {
        let row: Vec<f64> = (5..35).map(|j| at(&table, 40, 3 + i, j) as f64).collect();
        let mx = row.iter().cloned().fold(f64::MIN, f64::max);
        let total: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for (j, v) in row.iter().enumerate() {
            let want = (v - mx).exp() / total;
            let got = sm[i * 30 + j] as f64;
            assert!(
                (got - want).abs() <= 1e-6,
                "softmax ({i}, {j}): {got} vs {want}"
            );
        }
    }
    for i in 0..10 {
        for k in 0..10 {
            let want: f64 = (0..30).map(|j| m[i * 300 + j * 10 + k] as f64).sum();
            let got = mid[i * 10 + k] as f64;
            assert!(
                (got - want).abs() <= 1e-4,
                "middle sum ({i}, {k}): {got} vs {want}"
            );
        }
    }
    for i in 0..30 {
        for k in 0..4 {
            let want: f64 = (0..50)
                .map(|j| a[i * 50 + j] as f64 * b[j * 4 + k] as f64)
                .sum();
            let got = dot[i * 4 + k] as f64;
            assert!(
                (got - want).abs() <= 1e-4,
                "dot ({i}, {k}): {got} vs {want}"
            );
        }
    }
}

#[test]
fn large_results_written_anywhere_are_bound_in_parts() {
    // A scatter into a 100 x 100 result (40,000 bytes: ten parts) at rows 0, 57 and 99, with
    // a repeated row; a dynamic_update_slice into it (updated in place or on a copy); a dot
    // whose 60 x 50 result is written tile by tile.
    let t = "tensor<100x100xf32>";
    let src = format!(
        r#"func.func @main(%x: {t}, %i: tensor<4x1xi32>, %u: tensor<4x100xf32>, %a: tensor<60x8xf32>, %b: tensor<8x50xf32>) -> ({t}, {t}, tensor<60x50xf32>) {{
  %s = "stablehlo.scatter"(%x, %i, %u) <{{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}}> ({{
  ^bb0(%p: tensor<f32>, %q: tensor<f32>):
    %r = stablehlo.add %p, %q : tensor<f32>
    stablehlo.return %r : tensor<f32>
  }}) : ({t}, tensor<4x1xi32>, tensor<4x100xf32>) -> {t}
  %r0 = stablehlo.constant dense<83> : tensor<i32>
  %c0 = stablehlo.constant dense<10> : tensor<i32>
  %blk = stablehlo.slice %u [0:2, 0:20] : (tensor<4x100xf32>) -> tensor<2x20xf32>
  %d = stablehlo.dynamic_update_slice %x, %blk, %r0, %c0 : ({t}, tensor<2x20xf32>, tensor<i32>, tensor<i32>) -> {t}
  %dot = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<60x8xf32>, tensor<8x50xf32>) -> tensor<60x50xf32>
  return %s, %d, %dot : {t}, {t}, tensor<60x50xf32>
}}
"#
    );
    let (x, u, a, b) = (
        data(10_000, 31),
        data(400, 32),
        data(480, 33),
        data(400, 34),
    );
    let rows: [i32; 4] = [57, 0, 99, 57];
    let row_bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (out, listing) = run(
        &src,
        None,
        &[
            upload_f32(&[100, 100], &x),
            upload(&[4, 1], ElementType::I32, &row_bytes),
            upload_f32(&[4, 100], &u),
            upload_f32(&[60, 8], &a),
            upload_f32(&[8, 50], &b),
        ],
    );
    assert!(listing.contains("(out0 bound in "), "{listing}");
    let (s, d, dot) = (f32s(&out[0]), f32s(&out[1]), f32s(&out[2]));
    let mut want = x.clone();
    for (k, &r) in rows.iter().enumerate() {
        for j in 0..100 {
            want[r as usize * 100 + j] += u[k * 100 + j];
        }
    }
    for (e, (&g, &w)) in s.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "scatter element {e}: {g} vs {w}"
        );
    }
    let mut want = x.clone();
    for i in 0..2 {
        for j in 0..20 {
            want[(83 + i) * 100 + 10 + j] = u[i * 100 + j];
        }
    }
    assert_eq!(d, want, "dynamic_update_slice");
    for i in 0..60 {
        for k in 0..50 {
            let w: f64 = (0..8)
                .map(|j| a[i * 8 + j] as f64 * b[j * 50 + k] as f64)
                .sum();
            let g = dot[i * 50 + k] as f64;
            assert!((g - w).abs() <= 1e-5, "dot ({i}, {k}): {g} vs {w}");
        }
    }
}

#[test]
fn sorted_scatters_update_large_tensors_in_place() {
    // An embedding-style gradient: 80 rows added into a 100 x 100 table (ten parts) at 23
    // distinct rows, in runs of up to 4, some indices out of bounds (dropped). Sorted (more
    // than 64 windows), then each run folded in place into the table (on CPU adapters: walked
    // by blocks of rows, `scatter::swept`, also in place): `s` into a copy of the
    // argument `x` (which is also returned, unchanged), and `g = scatter(0) + x`, which
    // `scatter_add` turns into a scatter into `x * 2`, updated where it lies.
    let t = "tensor<100x100xf32>";
    let scatter = |into: &str, name: &str| {
        format!(
            r#"%{name} = "stablehlo.scatter"(%{into}, %i, %u) <{{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}}> ({{
  ^bb0(%p: tensor<f32>, %q: tensor<f32>):
    %r = stablehlo.add %p, %q : tensor<f32>
    stablehlo.return %r : tensor<f32>
  }}) : ({t}, tensor<80x1xi32>, tensor<80x100xf32>) -> {t}"#
        )
    };
    let src = format!(
        "func.func @main(%x: {t}, %i: tensor<80x1xi32>, %u: tensor<80x100xf32>) -> ({t}, {t}, {t}) {{
           {}
           %z = stablehlo.constant dense<0.0> : tensor<f32>
           %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> {t}
           {}
           %x2 = stablehlo.add %x, %x : {t}
           %g = stablehlo.add %zs, %x2 : {t}
           return %s, %g, %x : {t}, {t}, {t}
}}
",
        scatter("x", "s"),
        scatter("zb", "zs"),
    );
    let (x, u) = (data(10_000, 41), data(8_000, 42));
    let rows: Vec<i32> = (0..80)
        .map(|k| match k {
            _ if k % 13 == 5 => 100 + k,
            _ if k % 17 == 3 => -1,
            _ => (k * 7) % 23 * 4,
        })
        .collect();
    let row_bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (out, listing) = run(
        &src,
        None,
        &[
            upload_f32(&[100, 100], &x),
            upload(&[80, 1], ElementType::I32, &row_bytes),
            upload_f32(&[80, 100], &u),
        ],
    );
    let runs = listing
        .lines()
        .filter(|l| {
            // The sorted path's `_runs` kernels, or on CPU adapters the swept scatter's walks.
            l.starts_with("update ") && l.contains(" scatter_") && l.contains("(out0 bound in")
        })
        .count();
    assert_eq!(runs, 2, "{listing}");
    assert!(listing.contains("(in place)"), "{listing}");
    assert!(!listing.contains("broadcast"), "{listing}");
    let add_rows = |mut want: Vec<f32>| {
        for (k, &r) in rows.iter().enumerate() {
            if (0..100).contains(&r) {
                for j in 0..100 {
                    want[r as usize * 100 + j] += u[k * 100 + j];
                }
            }
        }
        want
    };
    let want_s = add_rows(x.clone());
    let want_g = add_rows(x.iter().map(|v| v + v).collect());
    for (what, got, want) in [("s", &out[0], &want_s), ("g", &out[1], &want_g)] {
        for (e, (&g, &w)) in f32s(got).iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{what} element {e}: {g} vs {w}"
            );
        }
    }
    assert_eq!(f32s(&out[2]), x, "the argument was changed");
}

#[test]
fn kernels_that_cannot_be_bound_are_refused() {
    // A transpose of 1000 x 1000 f32 (4 MB): its operand would take 977 parts of 4 KiB, far
    // more storage buffers than a kernel may bind.
    // An adapter that binds that many (NVIDIA: 2^20 per stage; lavapipe: 8) runs it
    // instead, and must transpose correctly.
    let t = "tensor<1000x1000xf32>";
    let src = format!(
        "func.func @main(%x: {t}) -> {t} {{\n  %y = stablehlo.transpose %x, dims = [1, 0] : ({t}) -> {t}\n  return %y : {t}\n}}\n"
    );
    let parts = (1000 * 1000 * 4u64).div_ceil(LIMIT);
    if u64::from(device().limits().max_storage_buffers_per_shader_stage) > 2 * parts {
        let x: Vec<f32> = (0..1000 * 1000).map(|i| i as f32).collect();
        let (out, _) = run(&src, None, &[upload_f32(&[1000, 1000], &x)]);
        for (k, w) in out[0].chunks_exact(4).enumerate() {
            let (i, j) = (k / 1000, k % 1000);
            assert_eq!(
                f32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                at(&x, 1000, j, i)
            );
        }
        return;
    }
    let m = refused(&src);
    assert!(
        m.contains("1000x1000xf32") && m.contains("storage buffers"),
        "{m}"
    );
}

#[test]
fn householder_panels_past_the_limit_run_in_parts() {
    // A batched QR panel (`custom_call @wgpu_hlo.householder_panel`) whose state (the panel,
    // the reflectors and the taus; 6,272 bytes here) passes the limit: bound in parts, the
    // same bits as under no limit, in one launch and in ranges of columns (a low loop bound).
    // Its kernel stored single components of the state (`out0[i][kj] = v;`), which the parts'
    // rewrite turned into invalid WGSL (a 16384 x 64 x 64 `jnp.linalg.qr` on lavapipe failed
    // with INTERNAL); it stores whole quads now, and such stores elsewhere are refused.
    let (batch, m, b) = (4usize, 24usize, 8usize);
    let (p, tau) = (
        format!("tensor<{batch}x{m}x{b}xf32>"),
        format!("tensor<{batch}x{b}xf32>"),
    );
    let src = format!(
        "func.func @main(%p: {p}, %j: tensor<i32>) -> ({p}, {p}, {tau}) {{\n  %r, %v, %t = stablehlo.custom_call @wgpu_hlo.householder_panel(%p, %j) : ({p}, tensor<i32>) -> ({p}, {p}, {tau})\n  return %r, %v, %t : {p}, {p}, {tau}\n}}\n"
    );
    let x = data(batch * m * b, 41);
    for j0 in [0i32, 5] {
        for max_loop in [None, Some(64)] {
            let args = [
                upload_f32(&[batch, m, b], &x),
                upload(&[], ElementType::I32, &j0.to_le_bytes()),
            ];
            let want = run_unlimited(&src, max_loop, &args);
            let (got, listing) = run(&src, max_loop, &args);
            assert!(listing.contains(" parts)"), "{listing}");
            assert_eq!(got, want, "j0 {j0}, loop bound {max_loop:?}\n{listing}");
            // The reflectors are not all zero: the panel was factored.
            assert!(f32s(&got[1]).iter().any(|&v| v != 0.0));
        }
    }
}

#[test]
fn linear_algebra_states_past_the_limit_run_in_parts() {
    // Batched eigh, svd and lu (`custom_call @wgpu_hlo.eigh` / `.svd` / `.lu`) whose state
    // passes the limit: bound in parts, the same bits as under no limit. Their kernels update
    // the state in place (`out0[i] = out0[i] * g;`), which the parts' rewrite refused; 40000
    // 32 x 32 eigvalsh / svd and 8192 64 x 64 solve / inv / slogdet on lavapipe were
    // RESOURCE_EXHAUSTED.
    let (batch, n) = (8usize, 16usize);
    let a = format!("tensor<{batch}x{n}x{n}xf32>");
    let w = format!("tensor<{batch}x{n}xf32>");
    let piv = format!("tensor<{batch}x{n}xi32>");
    let programs = [
        format!("func.func @main(%a: {a}) -> ({w}, {a}) {{\n  %w, %v = stablehlo.custom_call @wgpu_hlo.eigh(%a) : ({a}) -> ({w}, {a})\n  return %w, %v : {w}, {a}\n}}\n"),
        format!("func.func @main(%a: {a}) -> ({w}, {a}, {a}) {{\n  %s, %u, %v = stablehlo.custom_call @wgpu_hlo.svd(%a) : ({a}) -> ({w}, {a}, {a})\n  return %s, %u, %v : {w}, {a}, {a}\n}}\n"),
        format!("func.func @main(%a: {a}) -> {w} {{\n  %s = stablehlo.custom_call @wgpu_hlo.svd(%a) : ({a}) -> {w}\n  return %s : {w}\n}}\n"),
        format!("func.func @main(%a: {a}) -> ({a}, {piv}, {piv}) {{\n  %l, %p, %q = stablehlo.custom_call @wgpu_hlo.lu(%a) : ({a}) -> ({a}, {piv}, {piv})\n  return %l, %p, %q : {a}, {piv}, {piv}\n}}\n"),
    ];
    let mut x = data(batch * n * n, 43);
    // Symmetric, for eigh.
    for m in 0..batch {
        for i in 0..n {
            for j in 0..i {
                x[m * n * n + j * n + i] = x[m * n * n + i * n + j];
            }
        }
    }
    for src in &programs {
        let args = [upload_f32(&[batch, n, n], &x)];
        let want = run_unlimited(src, None, &args);
        let (got, listing) = run(src, None, &args);
        assert!(listing.contains(" parts)"), "{listing}");
        assert_eq!(got, want, "{src}\n{listing}");
    }
}
