//! Concatenations of slices and reversals of one value (`jnp.roll`, reflect padding) read that
//! value once per element, at coordinates chosen by `select`s (`codegen::expr`'s
//! `concatenate_by_index`), not once per part under branches; checked against the host.

mod common;

use common::{data, device, f32s, upload_f32};
use wgpu_hlo::compile::{compile, CompileOptions};

fn run(src: &str, shape: &[usize], x: &[f32]) -> (Vec<f32>, String) {
    let e = compile(&device(), src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let kernels = e.kernels();
    assert_eq!(kernels.len(), 1, "one kernel");
    let wgsl = kernels[0].wgsl.clone();
    let out = e.execute_blocking(&[upload_f32(shape, x)]).unwrap();
    (f32s(&out[0].read_to_host_blocking().unwrap()), wgsl)
}

#[test]
fn roll_reads_each_element_once() {
    // jnp.roll(x, (3, -5), (0, 1)) over 37 x 53, as JAX lowers it.
    let (m, n) = (37usize, 53usize);
    let src = format!(
        "func.func @main(%x: tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %0 = stablehlo.slice %x [{a}:{m}, 0:{n}] : (tensor<{m}x{n}xf32>) -> tensor<3x{n}xf32>
  %1 = stablehlo.slice %x [0:{a}, 0:{n}] : (tensor<{m}x{n}xf32>) -> tensor<{a}x{n}xf32>
  %2 = stablehlo.concatenate %0, %1, dim = 0 : (tensor<3x{n}xf32>, tensor<{a}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %3 = stablehlo.slice %2 [0:{m}, 5:{n}] : (tensor<{m}x{n}xf32>) -> tensor<{m}x{b}xf32>
  %4 = stablehlo.slice %2 [0:{m}, 0:5] : (tensor<{m}x{n}xf32>) -> tensor<{m}x5xf32>
  %5 = stablehlo.concatenate %3, %4, dim = 1 : (tensor<{m}x{b}xf32>, tensor<{m}x5xf32>) -> tensor<{m}x{n}xf32>
  return %5 : tensor<{m}x{n}xf32>
}}
",
        a = m - 3,
        b = n - 5
    );
    let x = data(m * n, 21);
    let (got, wgsl) = run(&src, &[m, n], &x);
    assert!(
        wgsl.contains("select(") && !wgsl.contains("else"),
        "parts chosen by branches:\n{wgsl}"
    );
    for i in 0..m {
        for j in 0..n {
            let want = x[((i + m - 3) % m) * n + (j + 5) % n];
            assert_eq!(got[i * n + j].to_bits(), want.to_bits(), "({i}, {j})");
        }
    }
}

#[test]
fn reflect_padding_reads_each_element_once() {
    // jnp.pad(x, (2, 3), mode="reflect") along a vector of 41, times 2: reversed slices of x
    // either side of x, then an elementwise op on the concatenation.
    let n = 41usize;
    let src = format!(
        "func.func @main(%x: tensor<{n}xf32>) -> tensor<{p}xf32> {{
  %0 = stablehlo.slice %x [1:3] : (tensor<{n}xf32>) -> tensor<2xf32>
  %1 = stablehlo.reverse %0, dims = [0] : tensor<2xf32>
  %2 = stablehlo.slice %x [{c}:{d}] : (tensor<{n}xf32>) -> tensor<3xf32>
  %3 = stablehlo.reverse %2, dims = [0] : tensor<3xf32>
  %4 = stablehlo.concatenate %1, %x, %3, dim = 0 : (tensor<2xf32>, tensor<{n}xf32>, tensor<3xf32>) -> tensor<{p}xf32>
  %5 = stablehlo.add %4, %4 : tensor<{p}xf32>
  return %5 : tensor<{p}xf32>
}}
",
        p = n + 5,
        c = n - 4,
        d = n - 1
    );
    let x = data(n, 22);
    let (got, wgsl) = run(&src, &[n], &x);
    assert!(
        wgsl.contains("select(") && !wgsl.contains("else"),
        "parts chosen by branches:\n{wgsl}"
    );
    let mut want: Vec<f32> = vec![x[2], x[1]];
    want.extend(&x);
    want.extend([x[n - 2], x[n - 3], x[n - 4]]);
    for (i, w) in want.iter().enumerate() {
        assert_eq!(got[i].to_bits(), (w + w).to_bits(), "element {i}");
    }
}

#[test]
fn reflect_padding_of_a_matrix_is_one_kernel() {
    // jnp.pad(x, 2, mode="reflect") over 19 x 23, as JAX lowers it: four concatenations,
    // each of the previous one between reversed slices of it. The fusion model counts the
    // matrix as read at one index an element (`fusion::select_chains`), so all four fuse
    // into one kernel that reads x once per element.
    let (m, n) = (19usize, 23usize);
    let (pm, pn) = (m + 4, n + 4);
    let src = format!(
        "func.func @main(%x: tensor<{m}x{n}xf32>) -> tensor<{pm}x{pn}xf32> {{
  %0 = stablehlo.slice %x [1:3, 0:{n}] : (tensor<{m}x{n}xf32>) -> tensor<2x{n}xf32>
  %1 = stablehlo.reverse %0, dims = [0] : tensor<2x{n}xf32>
  %2 = stablehlo.concatenate %1, %x, dim = 0 : (tensor<2x{n}xf32>, tensor<{m}x{n}xf32>) -> tensor<{a}x{n}xf32>
  %3 = stablehlo.slice %2 [{b}:{c}, 0:{n}] : (tensor<{a}x{n}xf32>) -> tensor<2x{n}xf32>
  %4 = stablehlo.reverse %3, dims = [0] : tensor<2x{n}xf32>
  %5 = stablehlo.concatenate %2, %4, dim = 0 : (tensor<{a}x{n}xf32>, tensor<2x{n}xf32>) -> tensor<{pm}x{n}xf32>
  %6 = stablehlo.slice %5 [0:{pm}, 1:3] : (tensor<{pm}x{n}xf32>) -> tensor<{pm}x2xf32>
  %7 = stablehlo.reverse %6, dims = [1] : tensor<{pm}x2xf32>
  %8 = stablehlo.concatenate %7, %5, dim = 1 : (tensor<{pm}x2xf32>, tensor<{pm}x{n}xf32>) -> tensor<{pm}x{d}xf32>
  %9 = stablehlo.slice %8 [0:{pm}, {e}:{g}] : (tensor<{pm}x{d}xf32>) -> tensor<{pm}x2xf32>
  %10 = stablehlo.reverse %9, dims = [1] : tensor<{pm}x2xf32>
  %11 = stablehlo.concatenate %8, %10, dim = 1 : (tensor<{pm}x{d}xf32>, tensor<{pm}x2xf32>) -> tensor<{pm}x{pn}xf32>
  return %11 : tensor<{pm}x{pn}xf32>
}}
",
        a = m + 2,
        b = m - 1,
        c = m + 1,
        d = n + 2,
        e = n - 1,
        g = n + 1
    );
    let x = data(m * n, 23);
    let (got, wgsl) = run(&src, &[m, n], &x);
    assert!(
        wgsl.contains("select(") && !wgsl.contains("else"),
        "parts chosen by branches:\n{wgsl}"
    );
    // Reflection without the edge: coordinate -k is k, coordinate len - 1 + k is len - 1 - k.
    let reflect = |i: usize, len: usize| -> usize {
        let i = i as i64 - 2;
        let len = len as i64;
        (if i < 0 {
            -i
        } else if i >= len {
            2 * (len - 1) - i
        } else {
            i
        }) as usize
    };
    for i in 0..pm {
        for j in 0..pn {
            let want = x[reflect(i, m) * n + reflect(j, n)];
            assert_eq!(got[i * pn + j].to_bits(), want.to_bits(), "({i}, {j})");
        }
    }
}
