//! Horizontal fusion (`fusion::horizontal`): small independent loop kernels of different
//! shapes run as one launch, each in its own workgroups, and compute what they compute apart.
//! A kernel that reads another's result merges into it first (multi-output fusion); large
//! kernels and ones with packed (`i1`) results stay apart.

mod common;

use common::device;

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::DeviceBuffer;

fn upload(dims: &[i64], dtype: ElementType, bytes: Vec<u8>) -> DeviceBuffer {
    device()
        .upload(&TensorType::new(dims.to_vec(), dtype), &bytes)
        .unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(b: &[u8]) -> Vec<[u8; 4]> {
    b.chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect()
}

#[test]
fn small_independent_kernels_share_a_launch() {
    // Four small independent kernels (f32 3x5 and 16x16, i32 7, a scalar), one that reads a
    // result of the first (merged into it), a large one (100000 elements) and one with an i1
    // result.
    let src = "func.func @main(%a: tensor<3x5xf32>, %b: tensor<16x16xf32>, %c: tensor<7xi32>, \
               %d: tensor<f32>, %e: tensor<100000xf32>) -> (tensor<3x5xf32>, tensor<16x16xf32>, \
               tensor<7xi32>, tensor<f32>, tensor<5x3xf32>, tensor<100000xf32>, tensor<16x16xi1>) {\n\
  %two = stablehlo.constant dense<2.0> : tensor<3x5xf32>\n\
  %r0 = stablehlo.multiply %a, %two : tensor<3x5xf32>\n\
  %r1 = stablehlo.tanh %b : tensor<16x16xf32>\n\
  %three = stablehlo.constant dense<3> : tensor<7xi32>\n\
  %r2 = stablehlo.multiply %c, %three : tensor<7xi32>\n\
  %r3 = stablehlo.sqrt %d : tensor<f32>\n\
  %t = stablehlo.transpose %r0, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>\n\
  %one = stablehlo.constant dense<1.0> : tensor<5x3xf32>\n\
  %r4 = stablehlo.add %t, %one : tensor<5x3xf32>\n\
  %r5 = stablehlo.negate %e : tensor<100000xf32>\n\
  %zero = stablehlo.constant dense<0.0> : tensor<16x16xf32>\n\
  %r6 = stablehlo.compare GT, %b, %zero : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xi1>\n\
  return %r0, %r1, %r2, %r3, %r4, %r5, %r6 : tensor<3x5xf32>, tensor<16x16xf32>, tensor<7xi32>, \
               tensor<f32>, tensor<5x3xf32>, tensor<100000xf32>, tensor<16x16xi1>\n}\n";
    let exe = compile(&device(), src.as_bytes(), &unmerged()).unwrap_or_else(|e| panic!("{e}"));
    let a: Vec<f32> = (0..15).map(|i| i as f32 * 0.5 - 3.0).collect();
    let b: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 50.0).collect();
    let c: Vec<i32> = (0..7).map(|i| i * 5 - 11).collect();
    let d = [6.25f32];
    let e: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
    let out = exe
        .execute_blocking(&[
            upload(&[3, 5], ElementType::F32, f32_bytes(&a)),
            upload(&[16, 16], ElementType::F32, f32_bytes(&b)),
            upload(
                &[7],
                ElementType::I32,
                c.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ),
            upload(&[], ElementType::F32, f32_bytes(&d)),
            upload(&[100_000], ElementType::F32, f32_bytes(&e)),
        ])
        .unwrap();
    let host: Vec<Vec<u8>> = out
        .iter()
        .map(|o| o.read_to_host_blocking().unwrap())
        .collect();
    let f = |i: usize| -> Vec<f32> {
        words(&host[i])
            .into_iter()
            .map(f32::from_le_bytes)
            .collect()
    };
    assert_eq!(f(0), a.iter().map(|x| x * 2.0).collect::<Vec<_>>());
    for (got, x) in f(1).iter().zip(&b) {
        assert!((got - x.tanh()).abs() <= 2e-6, "tanh({x}) = {got}");
    }
    let r2: Vec<i32> = words(&host[2])
        .into_iter()
        .map(i32::from_le_bytes)
        .collect();
    assert_eq!(r2, c.iter().map(|x| x * 3).collect::<Vec<_>>());
    assert_eq!(f(3), vec![2.5]);
    let r4: Vec<f32> = (0..15)
        .map(|k| a[(k % 3) * 5 + k / 3] * 2.0 + 1.0)
        .collect();
    assert_eq!(f(4), r4);
    assert_eq!(f(5), e.iter().map(|x| -x).collect::<Vec<_>>());
    let gt: Vec<bool> = host[6][..256].iter().map(|&x| x != 0).collect();
    assert_eq!(gt, b.iter().map(|&x| x > 0.0).collect::<Vec<_>>());

    // r4 reads r0 (transposed; both 15 elements): one kernel writes both (multi-output
    // fusion), and it shares one launch with r1, r2 and r3; r5 (large) and r6 (i1) have
    // their own.
    let names: Vec<&str> = exe.kernels().iter().map(|k| k.name.as_str()).collect();
    assert_eq!(exe.kernels().len(), 3, "{names:?}");
    assert_eq!(
        names.iter().filter(|n| n.starts_with("horizontal")).count(),
        1,
        "{names:?}"
    );
}

#[test]
fn many_small_kernels_take_several_launches() {
    // 40 independent updates of 8x8 parameters (an optimizer step over many small tensors):
    // at most 16 parts per launch.
    let n = 40;
    let ty = "tensor<8x8xf32>";
    let params: Vec<String> = (0..n).map(|i| format!("%p{i}: {ty}")).collect();
    let mut src = format!(
        "func.func @main({}) -> ({}) {{\n",
        params.join(", "),
        vec![ty; n].join(", ")
    );
    for i in 0..n {
        src.push_str(&format!(
            "  %c{i} = stablehlo.constant dense<{i}.0> : {ty}\n  %m{i} = stablehlo.multiply %p{i}, %p{i} : {ty}\n  %r{i} = stablehlo.add %m{i}, %c{i} : {ty}\n"
        ));
    }
    let rets: Vec<String> = (0..n).map(|i| format!("%r{i}")).collect();
    src.push_str(&format!(
        "  return {} : {}\n}}\n",
        rets.join(", "),
        vec![ty; n].join(", ")
    ));
    let exe = compile(&device(), src.as_bytes(), &unmerged()).unwrap_or_else(|e| panic!("{e}"));
    let inputs: Vec<Vec<f32>> = (0..n)
        .map(|i| (0..64).map(|j| (i * 64 + j) as f32 / 100.0).collect())
        .collect();
    let bufs: Vec<DeviceBuffer> = inputs
        .iter()
        .map(|v| upload(&[8, 8], ElementType::F32, f32_bytes(v)))
        .collect();
    let out = exe.execute_blocking(&bufs).unwrap();
    for (i, o) in out.iter().enumerate() {
        let got: Vec<f32> = words(&o.read_to_host_blocking().unwrap())
            .into_iter()
            .map(f32::from_le_bytes)
            .collect();
        // Rounded after the product and the sum, or once after a fused multiply-add: WGSL
        // lets a driver contract the two (NVIDIA's does).
        for (j, (g, x)) in got.iter().zip(&inputs[i]).enumerate() {
            let (two, fused) = (x * x + i as f32, x.mul_add(*x, i as f32));
            assert!(
                *g == two || *g == fused,
                "output {i}[{j}]: {g}, want {two} or {fused}"
            );
        }
    }
    let k = exe.kernels().len();
    assert!((3..=5).contains(&k), "{k} kernels for 40 small updates");
}

/// Options that keep fusion's kernels as they are: independent launches do not merge
/// (`compile::merge`), so the counts here are the horizontal fusion's.
fn unmerged() -> CompileOptions {
    CompileOptions {
        merge_launches: Some(false),
        ..CompileOptions::default()
    }
}
