//! The on-device Jacobi kernels behind `custom_call @wgpu_hlo.eigh` and `@wgpu_hlo.svd`
//! (what the JAX plugin's eigh/svd rules emit), against their defining identities in f64:
//! `A V = V diag(w)` with `V` orthogonal and `w` ascending; `A = U diag(s) V^T` with
//! orthonormal columns and `s` descending.

mod common;

use wgpu_hlo::compile::{compile, CompileOptions};

fn run(src: &str, dims: &[usize], a: &[f32]) -> Vec<Vec<f64>> {
    let dev = common::device();
    let exe = compile(&dev, src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let out = exe
        .execute_blocking(&[common::upload_f32(dims, a)])
        .unwrap();
    out.iter()
        .map(|b| {
            common::f32s(&b.read_to_host_blocking().unwrap())
                .into_iter()
                .map(f64::from)
                .collect()
        })
        .collect()
}

fn ty(dims: &[usize]) -> String {
    let d: String = dims.iter().map(|d| format!("{d}x")).collect();
    format!("tensor<{d}f32>")
}

/// `max |x|` over a slice.
fn max_abs(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(0.0, |m, x| m.max(x.abs()))
}

fn check_eigh(batch: usize, n: usize, seed: u64) {
    check_eigh_of(batch, n, &symmetric(batch, n, seed));
}

/// `batch` symmetric `n x n` matrices of test data: `(R + R^T) / 2`.
fn symmetric(batch: usize, n: usize, seed: u64) -> Vec<f32> {
    let raw = common::data(batch * n * n, seed);
    let mut a = vec![0f32; batch * n * n];
    for b in 0..batch {
        for i in 0..n {
            for j in 0..n {
                let o = b * n * n;
                a[o + i * n + j] = (raw[o + i * n + j] + raw[o + j * n + i]) / 2.0;
            }
        }
    }
    a
}

/// Checks the eigh of the `batch` symmetric `n x n` matrices `a`.
fn check_eigh_of(batch: usize, n: usize, a: &[f32]) {
    let src = format!(
        "func.func @main(%a: {t}) -> ({w}, {t}) {{\n  %w, %v = stablehlo.custom_call @wgpu_hlo.eigh(%a) : ({t}) -> ({w}, {t})\n  return %w, %v : {w}, {t}\n}}\n",
        t = ty(&[batch, n, n]),
        w = ty(&[batch, n]),
    );
    let out = run(&src, &[batch, n, n], a);
    check_eigh_results(batch, n, a, &out[0], &out[1]);
}

/// Checks eigenvalues `w` and eigenvectors `v` of the `batch` symmetric `n x n` matrices `a`:
/// `w` ascending, `A v = v w` and `V^T V = I`.
fn check_eigh_results(batch: usize, n: usize, a: &[f32], w: &[f64], v: &[f64]) {
    for b in 0..batch {
        let (a, w, v) = (&a[b * n * n..], &w[b * n..], &v[b * n * n..]);
        assert!(w[..n].windows(2).all(|p| p[0] <= p[1]), "ascending: {w:?}");
        let scale = max_abs(w[..n].iter().copied()).max(1.0);
        for i in 0..n {
            for j in 0..n {
                let av: f64 = (0..n).map(|k| a[i * n + k] as f64 * v[k * n + j]).sum();
                assert!(
                    (av - v[i * n + j] * w[j]).abs() < 1e-4 * scale,
                    "A v = v w at {b},{i},{j}"
                );
                let vtv: f64 = (0..n).map(|k| v[k * n + i] * v[k * n + j]).sum();
                let id = if i == j { 1.0 } else { 0.0 };
                assert!((vtv - id).abs() < 1e-4, "V^T V = I at {b},{i},{j}: {vtv}");
            }
        }
    }
}

fn check_svd(batch: usize, m: usize, n: usize, seed: u64) {
    check_svd_of(batch, m, n, &common::data(batch * m * n, seed));
}

/// Checks the svd with U and V of the `batch` `m x n` matrices `a` (`m >= n`): the singular
/// values of the values-only svd, descending, `U S V^T = A`, orthonormal columns.
fn check_svd_of(batch: usize, m: usize, n: usize, a: &[f32]) {
    let src = svd_source(batch, m, n);
    let out = run(&src, &[batch, m, n], a);
    let (s, u, v) = (&out[0], &out[1], &out[2]);
    // Values only: the same singular values.
    let src1 = format!(
        "func.func @main(%a: {t}) -> {s} {{\n  %s = stablehlo.custom_call @wgpu_hlo.svd(%a) : ({t}) -> {s}\n  return %s : {s}\n}}\n",
        t = ty(&[batch, m, n]),
        s = ty(&[batch, n]),
    );
    let s1 = &run(&src1, &[batch, m, n], a)[0];
    check_svd_results((batch, m, n), a, s, u, v, s1);
}

/// The program of the svd with U and V of `batch` `m x n` matrices.
fn svd_source(batch: usize, m: usize, n: usize) -> String {
    format!(
        "func.func @main(%a: {t}) -> ({s}, {t}, {v}) {{\n  %s, %u, %v = stablehlo.custom_call @wgpu_hlo.svd(%a) : ({t}) -> ({s}, {t}, {v})\n  return %s, %u, %v : {s}, {t}, {v}\n}}\n",
        t = ty(&[batch, m, n]),
        s = ty(&[batch, n]),
        v = ty(&[batch, n, n]),
    )
}

/// Checks an svd's results `s`, `u`, `v` of the matrices `a` against `s1`, the values-only
/// svd's.
fn check_svd_results(
    (batch, m, n): (usize, usize, usize),
    a: &[f32],
    s: &[f64],
    u: &[f64],
    v: &[f64],
    s1: &[f64],
) {
    assert!(max_abs(s.iter().zip(s1).map(|(x, y)| x - y)) < 1e-4 * max_abs(s.iter().copied()));
    for b in 0..batch {
        let (a, s, u, v) = (
            &a[b * m * n..],
            &s[b * n..],
            &u[b * m * n..],
            &v[b * n * n..],
        );
        assert!(s[..n].windows(2).all(|p| p[0] >= p[1]), "descending: {s:?}");
        for i in 0..m {
            for j in 0..n {
                let usv: f64 = (0..n).map(|k| u[i * n + k] * s[k] * v[j * n + k]).sum();
                assert!(
                    (usv - a[i * n + j] as f64).abs() < 1e-4 * s[0].max(1.0),
                    "U S V^T = A at {b},{i},{j}"
                );
            }
        }
        for i in 0..n {
            for j in 0..n {
                let id = if i == j { 1.0 } else { 0.0 };
                let utu: f64 = (0..m).map(|k| u[k * n + i] * u[k * n + j]).sum();
                let vtv: f64 = (0..n).map(|k| v[k * n + i] * v[k * n + j]).sum();
                assert!(
                    (utu - id).abs() < 1e-4 && (vtv - id).abs() < 1e-4,
                    "orthonormal at {b},{i},{j}"
                );
            }
        }
    }
}

#[test]
fn eigh_small_odd_even_batched() {
    check_eigh(1, 1, 1);
    check_eigh(2, 2, 2);
    check_eigh(3, 7, 3);
    check_eigh(2, 48, 4);
    // An odd number of pairs per round (3, 5): every pair of pairs is one block task.
    check_eigh(2, 6, 12);
    check_eigh(1, 10, 13);
}

#[test]
fn eigh_special_spectra() {
    // Spectra where a shift of the spectrum matters (CPU adapters run eigh as one-sided
    // Jacobi on A + sigma I): the zero matrix, +-3 and a double 0 on the diagonal, a
    // negative rank one -x x^T (|A|_F = |A|_2), a multiple of the identity, graded values.
    let n = 6;
    let diag = |d: &[f32]| {
        let mut a = vec![0f32; n * n];
        for (i, &x) in d.iter().enumerate() {
            a[i * n + i] = x;
        }
        a
    };
    let x: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.5).collect();
    let mut a = vec![0f32; n * n];
    a.extend(diag(&[3.0, -3.0, 0.0, 0.0, 1e-3, 2.0]));
    a.extend((0..n * n).map(|e| -x[e / n] * x[e % n]));
    a.extend(diag(&[2.0; 6]));
    let mut graded = diag(&[1e3, 1.0, 1e-3, -1e3, -1.0, 5.0]);
    for i in 0..n - 1 {
        graded[i * n + i + 1] = 0.25;
        graded[(i + 1) * n + i] = 0.25;
    }
    a.extend(graded);
    check_eigh_of(5, n, &a);
}

#[test]
fn eigh_tridiagonal_spectra() {
    // Past 64 columns CPU adapters reduce to tridiagonal form and run QL iterations
    // (WGPU_HLO_EIGH_TRIDIAGONAL=0: never, =1: every eigh here, on any adapter with f64):
    // the zero matrix, a multiple of the identity (already tridiagonal: no reflections),
    // H diag(d) H with values repeated 30 times (H a reflection: a full matrix), a negative
    // rank one, graded diagonal values with small couplings, Wilkinson's W+ (pairs of
    // eigenvalues equal to 14 digits).
    let n = 67;
    let mut a = vec![0f32; n * n];
    let diag = |d: &dyn Fn(usize) -> f32| {
        let mut m = vec![0f32; n * n];
        for i in 0..n {
            m[i * n + i] = d(i);
        }
        m
    };
    a.extend(diag(&|_| 2.0));
    let v: Vec<f64> = (0..n).map(|i| ((i * 7 % 11) as f64) - 4.5).collect();
    let vv: f64 = v.iter().map(|x| x * x).sum();
    let d = |i: usize| [1.0, -2.0, 3.5][(i / 30).min(2)];
    // (I - 2 v v^T / v^T v) diag(d) (I - 2 v v^T / v^T v), element by element.
    let h = |i: usize, j: usize| f64::from(u8::from(i == j)) - 2.0 * v[i] * v[j] / vv;
    a.extend((0..n * n).map(|e| {
        let (i, j) = (e / n, e % n);
        (0..n).map(|k| h(i, k) * d(k) * h(k, j)).sum::<f64>() as f32
    }));
    let x: Vec<f32> = (0..n).map(|i| 1.0 + (i % 5) as f32 * 0.25).collect();
    a.extend((0..n * n).map(|e| -x[e / n] * x[e % n]));
    let mut graded = diag(&|i| 10f32.powi(i as i32 % 7 - 3) * if i % 2 == 0 { 1.0 } else { -1.0 });
    let mut wilkinson = diag(&|i| (i as f32 - (n / 2) as f32).abs());
    for i in 0..n - 1 {
        graded[i * n + i + 1] = 1e-3;
        graded[(i + 1) * n + i] = 1e-3;
        wilkinson[i * n + i + 1] = 1.0;
        wilkinson[(i + 1) * n + i] = 1.0;
    }
    a.extend(graded);
    a.extend(wilkinson);
    check_eigh_of(6, n, &a);
}

/// `m x n` matrices `H1 diag(sigma) H2` (reflections `H1`, `H2`) with known singular values:
/// half of them zero, all zero, all equal (orthonormal columns), graded over 7 decades. The
/// matrices one after the other, and their `sigma`s.
fn known_spectra(m: usize, n: usize) -> (Vec<f32>, Vec<Vec<f64>>) {
    let reflection = |len: usize, seed: usize| {
        let v: Vec<f64> = (0..len)
            .map(|i| ((i * seed + 3) % 13) as f64 - 6.0)
            .collect();
        let vv: f64 = v.iter().map(|x| x * x).sum();
        move |i: usize, j: usize| f64::from(u8::from(i == j)) - 2.0 * v[i] * v[j] / vv
    };
    let (h1, h2) = (reflection(m, 5), reflection(n, 7));
    let spectra: Vec<Vec<f64>> = vec![
        (0..n)
            .map(|i| {
                if i < n / 2 {
                    3.0 - i as f64 * 0.05
                } else {
                    0.0
                }
            })
            .collect(),
        vec![0.0; n],
        vec![1.0; n],
        (0..n).map(|i| 10f64.powf(-(i as f64) / 10.0)).collect(),
    ];
    let mut a = Vec::new();
    for sigma in &spectra {
        for i in 0..m {
            for j in 0..n {
                let x: f64 = (0..n).map(|k| h1(i, k) * sigma[k] * h2(k, j)).sum();
                a.push(x as f32);
            }
        }
    }
    (a, spectra)
}

#[test]
fn svd_values_bidiagonal_spectra() {
    // Past 64 columns CPU adapters find singular values alone by bidiagonal reduction and QL
    // iterations (WGPU_HLO_SVD_BIDIAGONAL=0: never, =1: every values-only svd here, on any
    // adapter with f64).
    let (m, n) = (90, 70);
    let (a, spectra) = known_spectra(m, n);
    let batch = spectra.len();
    let src = format!(
        "func.func @main(%a: {t}) -> {s} {{\n  %s = stablehlo.custom_call @wgpu_hlo.svd(%a) : ({t}) -> {s}\n  return %s : {s}\n}}\n",
        t = ty(&[batch, m, n]),
        s = ty(&[batch, n]),
    );
    let s = &run(&src, &[batch, m, n], &a)[0];
    for (b, sigma) in spectra.iter().enumerate() {
        let mut want = sigma.clone();
        want.sort_by(|x, y| y.total_cmp(x));
        let got = &s[b * n..(b + 1) * n];
        let err = max_abs(got.iter().zip(&want).map(|(x, y)| x - y));
        assert!(err <= 2e-6 * want[0].max(1e-30), "matrix {b}: {got:?}");
    }
}

#[test]
fn svd_with_vectors_bidiagonal_spectra() {
    // From 49 columns CPU adapters take svd with U and V by bidiagonal reduction and QR
    // sweeps (WGPU_HLO_SVD_BIDIAGONAL=0: never, =1: here on any adapter with f64): rank
    // deficient, zero and graded matrices, where the sweeps split the bidiagonal at zero
    // diagonal entries; square ones, where the last left reflection is the identity; a
    // batch of three, whose vectors' rows span three workgroups of the QR kernel on GPUs.
    let dev = common::device();
    let src = svd_source(1, 64, 64);
    let exe =
        compile(&dev, src.as_bytes(), &CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    if !exe.kernels().iter().any(|k| k.name.ends_with("_qr")) {
        // The Jacobi kernels (GPU adapters, `=0`) leave U's columns of zero singular values
        // zero; the JAX rule completes them.
        return;
    }
    let (m, n) = (90, 70);
    check_svd_of(4, m, n, &known_spectra(m, n).0);
    let (a, _) = known_spectra(64, 64);
    check_svd_of(4, 64, 64, &a);
    check_svd(3, 150, 140, 31);
}

#[test]
fn eigh_in_global_memory() {
    // 2 * 120^2 f32 is more workgroup memory than adapters give: the state stays global.
    check_eigh(1, 120, 5);
}

#[test]
fn eigh_v_by_columns_in_the_state() {
    // Past workgroup memory V is kept by columns of vec4s in the state: with the matrix in
    // workgroup memory (80) or not (130, batched, 65 pairs a round, 2 rows of padding per
    // column; 256). WGPU_HLO_JACOBI_COLUMNS=0: row-major V.
    check_eigh(1, 80, 23);
    check_eigh(2, 130, 21);
    check_eigh(1, 256, 22);
}

#[test]
fn svd_small_odd_even_batched() {
    check_svd(1, 1, 1, 6);
    check_svd(2, 5, 3, 7);
    check_svd(3, 40, 33, 8);
    check_svd(1, 130, 100, 9);
}

#[test]
fn svd_by_columns_with_padded_vec4s() {
    // Workgroup-memory columns of 4 rows to a vec4: rows (31, and V's 30) not a multiple of 4.
    check_svd(2, 31, 30, 10);
    check_svd(1, 48, 48, 11);
}

#[test]
fn svd_by_columns_in_the_state_buffer() {
    // Past workgroup memory the columns (4 rows to a vec4) stay in the state buffer: batched,
    // rows (150, and V's 97) not a multiple of 4, an odd column count (a bye each round).
    // CPU adapters stream one pair per invocation, GPUs split rounds into row tasks
    // (WGPU_HLO_JACOBI_STREAM=0 or WGPU_HLO_ADAPTER_CLASS=gpu: the latter here too).
    check_svd(2, 150, 97, 17);
    check_svd(1, 256, 256, 18);
}

#[test]
fn jacobi_by_blocks() {
    // CPU adapters with 4-32 lane subgroups run sweeps by blocks of a subgroup's columns
    // (WGPU_HLO_JACOBI_BLOCKS=0: never): zero columns pad the last block (47, 17, 1 columns),
    // rows pad the last vec4 of the matrix's and of V's part of each column (47, 17), V
    // fills the column up to 24 vec4s (64x32), and eigh's shifted matrix up to 16 (64x64).
    check_svd(2, 47, 47, 30);
    check_svd(1, 64, 32, 31);
    check_svd(3, 17, 17, 32);
    check_svd(1, 23, 1, 33);
    check_eigh(2, 64, 34);
    check_eigh(3, 17, 35);
}

#[test]
fn svd_pairs_in_registers_and_past_them() {
    // CPU adapters hold a pair's columns in registers up to 16 vec4s (64 rows), odd pair
    // counts included; 72 rows (18 vec4s) take the split rounds again.
    check_svd(1, 64, 64, 14);
    check_svd(2, 9, 9, 15);
    check_svd(1, 72, 40, 16);
}

#[test]
fn extreme_magnitudes() {
    // Entries near 1e20 and 1e-22, whose squares leave f32's range: eigenvalues and singular
    // values scale with the matrix (each decomposition scales by a power of two first; before,
    // eigh returned the diagonal at 1e20 and svd inf at 1e20 and values 32% off at 1e-22).
    let n = 12;
    let raw = common::data(n * n, 60);
    let a: Vec<f32> = (0..n * n)
        .map(|e| (raw[e] + raw[(e % n) * n + e / n]) / 2.0)
        .collect();
    let t = ty(&[n, n]);
    let w = ty(&[n]);
    let eigh = format!(
        "func.func @main(%a: {t}) -> ({w}, {t}) {{\n  %w, %v = stablehlo.custom_call @wgpu_hlo.eigh(%a) : ({t}) -> ({w}, {t})\n  return %w, %v : {w}, {t}\n}}\n"
    );
    let svd = format!(
        "func.func @main(%a: {t}) -> {w} {{\n  %s = stablehlo.custom_call @wgpu_hlo.svd(%a) : ({t}) -> {w}\n  return %s : {w}\n}}\n"
    );
    let w1 = &run(&eigh, &[n, n], &a)[0];
    let s1 = &run(&svd, &[n, n], &a)[0];
    let top = max_abs(w1.iter().copied());
    for scale in [1e20f32, 1e-22] {
        let scaled: Vec<f32> = a.iter().map(|x| x * scale).collect();
        let out = run(&eigh, &[n, n], &scaled);
        let s = &run(&svd, &[n, n], &scaled)[0];
        for i in 0..n {
            let (wi, si) = (out[0][i] / scale as f64, s[i] / scale as f64);
            assert!(
                (wi - w1[i]).abs() < 1e-5 * top,
                "eigenvalue {i} at {scale}: {wi} vs {}",
                w1[i]
            );
            assert!(
                (si - s1[i]).abs() < 1e-5 * top,
                "singular value {i} at {scale}: {si} vs {}",
                s1[i]
            );
            for j in 0..n {
                let v = &out[1];
                let vtv: f64 = (0..n).map(|k| v[k * n + i] * v[k * n + j]).sum();
                let id = if i == j { 1.0 } else { 0.0 };
                assert!(
                    (vtv - id).abs() < 1e-4,
                    "V^T V = I at {i},{j} ({scale}): {vtv}"
                );
            }
        }
    }
}

/// A matrix whose Jacobi round does not fit the loop budget takes the reduction to
/// tridiagonal form instead of failing with RESOURCE_EXHAUSTED (where the adapter has f64,
/// which that route's QL iteration needs): eigh past about 800 x 800 on GPUs, where a round
/// of the two-sided kernel in a workgroup of 256 loops more than 8192 times (1024 x 1024:
/// 13355). CPU adapters take that route from 65 x 65 anyway; CI runs this file again with
/// the GPU kernels (`WGPU_HLO_ADAPTER_CLASS=gpu`), where it is the fallback.
#[test]
fn eigh_past_the_jacobi_budget_takes_the_tridiagonal_route() {
    let dev = common::device();
    // `WGPU_HLO_EIGH_TRIDIAGONAL=0` (the test command's Jacobi-only run) closes the route.
    if !dev.caps().f64 || std::env::var("WGPU_HLO_EIGH_TRIDIAGONAL").is_ok_and(|v| v == "0") {
        return;
    }
    let n = 820;
    let a = symmetric(1, n, 77);
    let src = format!(
        "func.func @main(%a: {t}) -> ({w}, {t}) {{\n  %w, %v = stablehlo.custom_call @wgpu_hlo.eigh(%a) : ({t}) -> ({w}, {t})\n  return %w, %v : {w}, {t}\n}}\n",
        t = ty(&[n, n]),
        w = ty(&[n]),
    );
    let exe =
        compile(&dev, src.as_bytes(), &CompileOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        exe.kernels().iter().any(|k| k.name.ends_with("_ql")),
        "not the tridiagonal route: {:?}",
        exe.kernels().iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    let out = exe
        .execute_blocking(&[common::upload_f32(&[n, n], &a)])
        .unwrap();
    let [w, v] = [&out[0], &out[1]].map(|b| {
        common::f32s(&b.read_to_host_blocking().unwrap())
            .into_iter()
            .map(f64::from)
            .collect::<Vec<f64>>()
    });
    check_eigh_results(1, n, &a, &w, &v);
}
