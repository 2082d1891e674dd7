//! `cholesky` and `triangular_solve` at sizes where one invocation may not run the whole
//! algorithm (llvmpipe leaves loops after 65535 iterations), against host references in f64.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

/// Deterministic pseudo-random values in [-1, 1).
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn shape(dims: &[usize], ty: &str) -> String {
    dims.iter().map(|d| format!("{d}x")).collect::<String>() + ty
}

/// Runs `src` (one or two operands of element type `ty`) and returns its one result.
fn run(src: &str, args: &[(&[usize], &[f64])], ty: ElementType) -> Vec<f64> {
    let dev = device();
    let exe = compile(&dev, src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let bufs: Vec<_> = args
        .iter()
        .map(|(dims, v)| {
            let t = TensorType::new(dims.iter().map(|&d| d as i64).collect(), ty);
            let bytes: Vec<u8> = if ty == ElementType::F64 {
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            } else {
                v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
            };
            dev.upload(&t, &bytes).unwrap()
        })
        .collect();
    let out = exe.execute_blocking(&bufs).unwrap();
    let bytes = out[0].read_to_host_blocking().unwrap();
    if ty == ElementType::F64 {
        bytes
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    } else {
        bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect()
    }
}

/// `batch` SPD matrices `n x n`: `M M^T / n + I`.
fn spd(batch: usize, n: usize, seed: u64) -> Vec<f64> {
    let mut out = Vec::with_capacity(batch * n * n);
    for b in 0..batch {
        let m = data(n * n, seed + b as u64);
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum();
                out.push(s / n as f64 + if i == j { 1.0 } else { 0.0 });
            }
        }
    }
    out
}

fn host_cholesky(a: &[f64], n: usize) -> Vec<f64> {
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let s = a[j * n + j] - (0..j).map(|k| l[j * n + k] * l[j * n + k]).sum::<f64>();
        let d = s.sqrt();
        l[j * n + j] = d;
        for i in j + 1..n {
            let t = a[i * n + j] - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            l[i * n + j] = t / d;
        }
    }
    l
}

fn check_cholesky(batch: usize, n: usize, lower: bool, ty: ElementType, tol: f64) {
    let name = if ty == ElementType::F64 { "f64" } else { "f32" };
    let dims = [batch, n, n];
    let src = format!(
        "func.func @main(%a: tensor<{t}>) -> tensor<{t}> {{\n  %r = stablehlo.cholesky %a, lower = {lower} : tensor<{t}>\n  return %r : tensor<{t}>\n}}\n",
        t = shape(&dims, name)
    );
    let a = spd(batch, n, 11);
    let got = run(&src, &[(&dims, &a)], ty);
    for b in 0..batch {
        let want = host_cholesky(&a[b * n * n..(b + 1) * n * n], n);
        for i in 0..n {
            for j in 0..n {
                // The upper factor is the transpose of the lower one.
                let g = if lower {
                    got[b * n * n + i * n + j]
                } else {
                    got[b * n * n + j * n + i]
                };
                let w = want[i * n + j];
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "cholesky {n}x{n} lower={lower} {name}: matrix {b} ({i}, {j}): got {g}, want {w}"
                );
            }
        }
    }
}

#[test]
fn cholesky_large_f32() {
    check_cholesky(1, 300, true, ElementType::F32, 1e-4);
    check_cholesky(2, 130, false, ElementType::F32, 1e-4);
}

/// The tiled plan: blocks of 64 columns (the last narrower at 513), batched, both triangles,
/// against the host. With `WGPU_HLO_CHOLESKY=workgroup` (scripts/test.sh) the column kernels
/// instead: up to 512 columns one workgroup per matrix factors ranges of columns per launch
/// (more than one range at 300 and 512), past it a launch per column.
#[test]
fn cholesky_in_workgroups_and_by_columns() {
    check_cholesky(5, 48, true, ElementType::F32, 1e-4);
    check_cholesky(3, 7, false, ElementType::F32, 1e-5);
    check_cholesky(1, 512, false, ElementType::F32, 2e-4);
    check_cholesky(1, 513, true, ElementType::F32, 2e-4);
}

#[test]
fn cholesky_large_f64() {
    if !device().caps().f64 {
        return;
    }
    check_cholesky(2, 200, true, ElementType::F64, 1e-12);
    check_cholesky(1, 150, false, ElementType::F64, 1e-12);
}

#[test]
fn cholesky_of_an_indefinite_matrix_is_nan() {
    let n = 80;
    let mut a = spd(1, n, 5);
    a[40 * n + 40] = -100.0;
    let src = format!(
        "func.func @main(%a: tensor<{t}>) -> tensor<{t}> {{\n  %r = stablehlo.cholesky %a, lower = true : tensor<{t}>\n  return %r : tensor<{t}>\n}}\n",
        t = shape(&[n, n], "f32")
    );
    let got = run(&src, &[(&[n, n], &a)], ElementType::F32);
    assert!(got.iter().all(|x| x.is_nan()), "{:?}", &got[..8]);
}

/// Solves with `a` (`batch x k x k`) and `b` (`batch x m x n`) in every variant and checks
/// `op(a) x = b` (left) or `x op(a) = b` (right) on the host.
fn check_solve(batch: usize, k: usize, rhs: usize, ty: ElementType, tol: f64) {
    let name = if ty == ElementType::F64 { "f64" } else { "f32" };
    // Well-conditioned triangles (off-diagonal entries below 1/k, diagonal in [0.5, 1.5]), with
    // both triangles filled: the kernel must read only the one named.
    let mut a: Vec<f64> = data(batch * k * k, 3)
        .iter()
        .map(|x| x / k as f64)
        .collect();
    for bi in 0..batch {
        for i in 0..k {
            a[bi * k * k + i * k + i] = 1.0 + 0.5 * k as f64 * a[bi * k * k + i * k + i];
        }
    }
    for left in [true, false] {
        let (m, n) = if left { (k, rhs) } else { (rhs, k) };
        let b = data(batch * m * n, 4);
        for lower in [true, false] {
            for transpose in ["NO_TRANSPOSE", "TRANSPOSE"] {
                for unit in [false, true] {
                    let (ad, bd) = ([batch, k, k], [batch, m, n]);
                    let src = format!(
                        "func.func @main(%a: tensor<{ta}>, %b: tensor<{tb}>) -> tensor<{tb}> {{\n  %r = \"stablehlo.triangular_solve\"(%a, %b) {{left_side = {left}, lower = {lower}, transpose_a = #stablehlo<transpose {transpose}>, unit_diagonal = {unit}}} : (tensor<{ta}>, tensor<{tb}>) -> tensor<{tb}>\n  return %r : tensor<{tb}>\n}}\n",
                        ta = shape(&ad, name),
                        tb = shape(&bd, name)
                    );
                    let x = run(&src, &[(&ad, &a), (&bd, &b)], ty);
                    // op(a)(i, j) with only the named triangle and the diagonal convention.
                    let opa = |bi: usize, i: usize, j: usize| -> f64 {
                        let (r, c) = if transpose == "TRANSPOSE" {
                            (j, i)
                        } else {
                            (i, j)
                        };
                        if r == c {
                            return if unit { 1.0 } else { a[bi * k * k + r * k + c] };
                        }
                        if (r > c) == lower {
                            a[bi * k * k + r * k + c]
                        } else {
                            0.0
                        }
                    };
                    let mut worst = 0f64;
                    for bi in 0..batch {
                        let xe = |i: usize, j: usize| x[bi * m * n + i * n + j];
                        for i in 0..m {
                            for j in 0..n {
                                let s: f64 = if left {
                                    (0..k).map(|t| opa(bi, i, t) * xe(t, j)).sum()
                                } else {
                                    (0..k).map(|t| xe(i, t) * opa(bi, t, j)).sum()
                                };
                                worst = worst.max((s - b[bi * m * n + i * n + j]).abs());
                            }
                        }
                    }
                    assert!(
                        worst <= tol,
                        "triangular_solve {k} left={left} lower={lower} {transpose} unit={unit} {name}: residual {worst}"
                    );
                }
            }
        }
    }
}

#[test]
fn triangular_solve_large_f32() {
    // Several launches' blocks of rows, batched.
    check_solve(2, 200, 3, ElementType::F32, 1e-4);
    check_solve(1, 1024, 2, ElementType::F32, 1e-4);
}

#[test]
fn triangular_solve_large_f64() {
    if !device().caps().f64 {
        return;
    }
    check_solve(1, 300, 2, ElementType::F64, 1e-10);
}
