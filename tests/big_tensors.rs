//! Tensors larger than one storage binding may be (`max_storage_buffer_binding_size`: 128 MiB
//! on lavapipe): with the binding limit set low through `CompileOptions::max_binding_bytes`,
//! small tensors take the same paths as lavapipe's 256 MiB ones. Elementwise kernels (fused
//! chains, broadcast operands, packed narrow types, views) and full, row and column
//! reductions are launched a window at a time and match a host reference; kernels that read a
//! large tensor at other elements than their own (transposes, reductions of middle
//! dimensions, dots) are refused with RESOURCE_EXHAUSTED naming the tensor and the limit.

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

#[test]
fn kernels_that_cannot_be_split_are_refused() {
    // A transpose, a reduction of a middle dimension and a dot of a 40,000-byte tensor.
    let t = "tensor<100x100xf32>";
    let m = refused(&format!(
        "func.func @main(%x: {t}) -> {t} {{\n  %y = stablehlo.transpose %x, dims = [1, 0] : ({t}) -> {t}\n  return %y : {t}\n}}\n"
    ));
    assert!(m.contains("100x100xf32"), "{m}");
    let t3 = "tensor<10x100x10xf32>";
    refused(&format!(
        "func.func @main(%x: {t3}) -> tensor<10x10xf32> {{\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : ({t3}, tensor<f32>) -> tensor<10x10xf32>\n  return %s : tensor<10x10xf32>\n}}\n"
    ));
    refused(&format!(
        "func.func @main(%x: {t}, %w: tensor<100x4xf32>) -> tensor<100x4xf32> {{\n  %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : ({t}, tensor<100x4xf32>) -> tensor<100x4xf32>\n  return %y : tensor<100x4xf32>\n}}\n"
    ));
}
