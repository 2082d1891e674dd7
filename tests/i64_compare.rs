//! Signed 64-bit order against constants: Mesa 22.3's llvmpipe compiled `i64(u) < k` (a u32
//! `u` converted, a constant `k`) wrongly, so every `iota(i64) >= 300` was true and JAX's
//! x64 masks such as `jnp.arange(n) >= k` were all-true or all-false, with no error. The
//! compare is now emitted as unsigned order with the sign bits flipped.

use std::sync::Arc;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::runtime::Device;

/// `select(compare(iota + start, k), 1, 0)` over `n` i64s (`start` 0: the iota itself).
fn compare(direction: &str, start: i64, n: usize, k: i64) -> Vec<i32> {
    let dev: Arc<Device> = Device::open().expect("a wgpu adapter");
    let t = format!("tensor<{n}xi64>");
    let value = if start == 0 {
        format!("  %v = stablehlo.iota dim = 0 : {t}\n")
    } else {
        format!(
            "  %i = stablehlo.iota dim = 0 : {t}\n  %s = stablehlo.constant dense<{start}> : {t}\n  %v = stablehlo.add %i, %s : {t}\n"
        )
    };
    let src = format!(
        "func.func @main() -> tensor<{n}xi32> {{\n{value}  \
         %k = stablehlo.constant dense<{k}> : {t}\n  \
         %c = stablehlo.compare {direction}, %v, %k, SIGNED : ({t}, {t}) -> tensor<{n}xi1>\n  \
         %one = stablehlo.constant dense<1> : tensor<{n}xi32>\n  \
         %zero = stablehlo.constant dense<0> : tensor<{n}xi32>\n  \
         %y = stablehlo.select %c, %one, %zero : tensor<{n}xi1>, tensor<{n}xi32>\n  \
         return %y : tensor<{n}xi32>\n}}\n"
    );
    let exe = compile(&dev, src.as_bytes(), &CompileOptions::default()).expect("compiles");
    let out = exe.execute_blocking(&[]).expect("runs");
    let b = out[0].read_to_host_blocking().expect("reads");
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn iota_i64_against_constants() {
    for (dir, f) in [
        ("GE", (|a: i64, b: i64| a >= b) as fn(i64, i64) -> bool),
        ("GT", |a, b| a > b),
        ("LE", |a, b| a <= b),
        ("LT", |a, b| a < b),
        ("EQ", |a, b| a == b),
        ("NE", |a, b| a != b),
    ] {
        for (start, n, k) in [
            (0i64, 320usize, 300i64),
            (0, 8, 3),
            (0, 8, -1),
            (-5, 10, -2),
            (i64::MAX - 9, 10, i64::MAX - 3),
            (i64::MIN, 10, i64::MIN + 4),
        ] {
            let got = compare(dir, start, n, k);
            let want: Vec<i32> = (0..n as i64)
                .map(|i| i32::from(f(i.wrapping_add(start), k)))
                .collect();
            assert_eq!(got, want, "iota + {start} {dir} {k}");
        }
    }
}
