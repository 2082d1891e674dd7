//! On CPU adapters, large `dot_general`s read their operands along the free dimension: an
//! operand whose contracting dimension is its innermost (the left side of `x @ w`, the right
//! side of `x @ w.T`) is first written transposed, contracting dimensions before free ones.
//!
//! Why: the shared-rows dot (`codegen::dot_subgroup`) reads an operand laid out along k four
//! steps of k per `vec4`, so its loop runs four steps a trip, and llvmpipe compiles that body
//! (4 x the accumulator updates, every accumulator spilled) to slower code than four trips of
//! the one-step body that reads along m or n. Lavapipe, 1024³ f32, the same kernel with each
//! operand layout: `x @ y` 38 ms, `x.T @ y` (left operand stored transposed) 29.6 ms,
//! `x @ y.T` 50 ms, `x.T @ y.T` 39.5 ms. Unrolling the fast kernel's loop four times by hand
//! made it 34-36 ms, and the memory pattern is not it (all lanes reading one row: 35.5 ms),
//! but a rolled loop over the four steps with dynamic lane picks did not help (37.8 ms): the
//! cause is not fully understood. A 1024² transpose costs 1.3 ms, so writing the operand
//! transposed pays when the other operand's free extent is large: the gain grows with it, the
//! copy does not.
//!
//! `dot_transpose` folds transposes into dots before this pass runs (it runs on the prepared
//! function, at compile time, where the adapter is known), and prologue fusion never takes a
//! transpose into a dot, so the transpose stays a kernel of its own or fuses into its
//! producer's. One transposed copy serves every dot of a region that reads the same operand
//! the same way. `WGPU_HLO_DOT_RELAYOUT=0` turns the pass off; `WGPU_HLO_DOT_RELAYOUT_MIN=N`
//! sets the smallest free extent of the other operand (default [`MIN_OTHER`]).
//!
//! Convolutions get the same treatment for their kernel ([`plan_conv`]): the shared-rows
//! convolution reads a kernel whose output features are innermost four columns per load
//! (`vec4`), any other layout one scalar per column. JAX's input gradient of an HWIO
//! convolution reads the forward kernel with its input and output features swapped, so its
//! output features are not innermost; that kernel (3 x 3 x 32 x 64 in the flax CNN, 18K
//! elements) is written with them innermost first. Lavapipe, 2-core AMD host, 32x14x14x64 ->
//! 32 with a 3x3 kernel, minimum of 30 calls, six alternating runs: 9.1-9.7 ms as it comes,
//! 6.2-8.4 ms with the kernel's output features innermost.

use std::collections::HashMap;

use crate::ir::{ElementType, Function, Op, Operation, Region, TensorType, Type, ValueId};

/// The smallest free extent of the other operand for which an operand is transposed. It was
/// 512, which left out a transformer's `dy @ w` and `x @ w.T` at 8 x 63 = 504 tokens (lavapipe:
/// 504x512x128 read along k on both sides 3.5 ms, the right side written transposed 2.1 ms,
/// for a 0.18 ms copy of the 512 x 128 weight; 4 such dots of its training step 12.1 -> 7.3
/// ms in all). A copy costs ~3 ns an element there (a launch for a small one), a product read
/// along free instead of k gains 0.01-0.04 ns a multiply-add: paid back from ~100 rows by
/// these figures. It was 384 from 2026-12-02, which left out attention over 256 steps:
/// `jax.nn.dot_product_attention` of 8 x 256 x 8 heads of 64 reads its queries and keys
/// along k in the scores' product (64 products of 256 x 256 x 64). `bench_ab.py` with
/// `WGPU_HLO_DOT_RELAYOUT_MIN=256` against 384 (lavapipe, 2-core Intel host, medians of 9
/// alternating calls): that attention 0.86x, its gradient 0.96x; matmul 512/1024, bf16
/// matmul, batched 64x128x128, the MLP, CNN and transformer steps, the GP likelihood and
/// gradient, the hand-written GRU and flax's LSTM and GRU cells 0.94-1.09x, within the
/// host's noise. 128 lost there in an earlier measurement (README).
pub const MIN_OTHER: u64 = 256;

/// The smallest product (multiply-adds) whose operands are transposed: below it the
/// shared-rows kernel takes its small form, which reads along k as scalars anyway.
pub const MIN_WORK: u64 = 1 << 24;

/// The smallest convolution (multiply-adds) whose kernel is relaid: the shared-rows
/// convolution serves from 2^22 (`codegen::dot_subgroup::MIN_CONV_WORK`).
pub const MIN_CONV_WORK: u64 = 1 << 22;

/// Kernels are relaid only when the convolution does this many multiply-adds per kernel
/// element or more, so that the copy is a small share of the work.
pub const CONV_WORK_PER_ELEMENT: u64 = 256;

/// Transposes the operands of large f32 dots read along their contracting dimension
/// (see the module docs). The caller decides the adapter: CPU adapters with subgroups.
pub fn transpose_operands_along_free(f: &mut Function) {
    if std::env::var("WGPU_HLO_DOT_RELAYOUT").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    let min_other = std::env::var("WGPU_HLO_DOT_RELAYOUT_MIN")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(MIN_OTHER);
    let Some(mut body) = f.body.take() else {
        return;
    };
    rewrite_region(f, &mut body, min_other);
    f.body = Some(body);
}

fn static_f32(f: &Function, v: ValueId) -> Option<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) if t.is_static() && t.dtype == ElementType::F32 && t.quant.is_none() => {
            Some(t.clone())
        }
        _ => None,
    }
}

/// Sizes of `dims` of `shape`, multiplied.
fn extent(shape: &[i64], dims: &[i64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| {
        let s = *shape.get(usize::try_from(d).ok()?)?;
        acc.checked_mul(u64::try_from(s).ok()?)
    })
}

/// The permutation putting an operand of rank `rank` in the order batch, contracting, free,
/// when its innermost dimension is contracting and a free dimension exists whose innermost
/// size is a multiple of 4 (so the dot can read it as `vec4`s); else `None`.
fn along_free(shape: &[i64], batch: &[i64], contract: &[i64]) -> Option<Vec<i64>> {
    let rank = shape.len() as i64;
    if contract.last() != Some(&(rank - 1)) {
        return None;
    }
    let free: Vec<i64> = (0..rank)
        .filter(|d| !batch.contains(d) && !contract.contains(d))
        .collect();
    let inner = *free.last()?;
    if shape.get(inner as usize)? % 4 != 0 {
        return None;
    }
    Some(batch.iter().chain(contract).chain(&free).copied().collect())
}

fn rewrite_region(f: &mut Function, r: &mut Region, min_other: u64) {
    let mut made: HashMap<(ValueId, Vec<i64>), ValueId> = HashMap::new();
    let mut i = 0;
    while i < r.ops.len() {
        for sub in &mut r.ops[i].regions {
            rewrite_region(f, sub, min_other);
        }
        let mut inserted = Vec::new();
        let plan = plan_dot(f, &r.ops[i], min_other)
            .or_else(|| plan_conv(f, &r.ops[i]).map(|perm| vec![(1, perm)]));
        if let Some(plan) = plan {
            for (side, perm) in plan {
                let x = r.ops[i].operands[side];
                let key = (x, perm.clone());
                let t = match made.get(&key) {
                    Some(&t) => t,
                    None => {
                        let Some(xt) = static_f32(f, x) else {
                            continue;
                        };
                        let shape = perm.iter().map(|&d| xt.shape[d as usize]).collect();
                        let t = f.new_value(Type::Tensor(TensorType::new(shape, xt.dtype)));
                        inserted.push(Operation::new(
                            Op::Transpose {
                                permutation: perm.clone(),
                            },
                            vec![x],
                            vec![t],
                            r.ops[i].loc.clone(),
                        ));
                        made.insert(key, t);
                        t
                    }
                };
                let op = &mut r.ops[i];
                op.operands[side] = t;
                if let Op::Convolution(c) = &mut op.op {
                    // Each kernel dimension's new place.
                    let at = |d: i64| perm.iter().position(|&p| p == d).unwrap_or(0) as i64;
                    let dn = &mut c.dimension_numbers;
                    dn.kernel_input_feature_dimension = at(dn.kernel_input_feature_dimension);
                    dn.kernel_output_feature_dimension = at(dn.kernel_output_feature_dimension);
                    for d in &mut dn.kernel_spatial_dimensions {
                        *d = at(*d);
                    }
                }
                if let Op::DotGeneral {
                    dimension_numbers: dn,
                    ..
                } = &mut op.op
                {
                    let (batch, contract) = if side == 0 {
                        (
                            &mut dn.lhs_batching_dimensions,
                            &mut dn.lhs_contracting_dimensions,
                        )
                    } else {
                        (
                            &mut dn.rhs_batching_dimensions,
                            &mut dn.rhs_contracting_dimensions,
                        )
                    };
                    let nb = batch.len() as i64;
                    *batch = (0..nb).collect();
                    *contract = (nb..nb + contract.len() as i64).collect();
                }
            }
        }
        let n = inserted.len();
        for (j, op) in inserted.into_iter().enumerate() {
            r.ops.insert(i + j, op);
        }
        i += n + 1;
    }
}

/// The operands of `op` to transpose, with their permutations: a large f32 `dot_general`'s
/// operands whose innermost dimension is contracting, where the other operand's free extent
/// is at least `min_other`.
fn plan_dot(f: &Function, op: &Operation, min_other: u64) -> Option<Vec<(usize, Vec<i64>)>> {
    let Op::DotGeneral {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return None;
    };
    if op.operands.len() != 2 || op.results.len() != 1 {
        return None;
    }
    let (lt, rt) = (
        static_f32(f, op.operands[0])?,
        static_f32(f, op.operands[1])?,
    );
    static_f32(f, op.results[0])?;
    let free = |t: &TensorType, batch: &[i64], contract: &[i64]| {
        let dims: Vec<i64> = (0..t.rank() as i64)
            .filter(|d| !batch.contains(d) && !contract.contains(d))
            .collect();
        extent(&t.shape, &dims)
    };
    let m = free(
        &lt,
        &dn.lhs_batching_dimensions,
        &dn.lhs_contracting_dimensions,
    )?;
    let n = free(
        &rt,
        &dn.rhs_batching_dimensions,
        &dn.rhs_contracting_dimensions,
    )?;
    let batch = extent(&lt.shape, &dn.lhs_batching_dimensions)?;
    let k = extent(&lt.shape, &dn.lhs_contracting_dimensions)?;
    let work = batch.checked_mul(m)?.checked_mul(n)?.checked_mul(k)?;
    if work < MIN_WORK || k % 4 != 0 {
        return None;
    }
    // Each side, with the other side's free extent.
    let sides = [
        (
            0,
            &lt,
            &dn.lhs_batching_dimensions,
            &dn.lhs_contracting_dimensions,
            n,
        ),
        (
            1,
            &rt,
            &dn.rhs_batching_dimensions,
            &dn.rhs_contracting_dimensions,
            m,
        ),
    ];
    let out: Vec<(usize, Vec<i64>)> = sides
        .into_iter()
        .filter(|s| s.4 >= min_other)
        .filter_map(|(side, t, batch, contract, _)| {
            Some((side, along_free(&t.shape, batch, contract)?))
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// The permutation putting a large f32 convolution's kernel output features innermost, when
/// they are not and there are a multiple of 4 of them (see the module docs); else `None`.
fn plan_conv(f: &Function, op: &Operation) -> Option<Vec<i64>> {
    let Op::Convolution(c) = &op.op else {
        return None;
    };
    if op.operands.len() != 2 || op.results.len() != 1 {
        return None;
    }
    let kt = static_f32(f, op.operands[1])?;
    let ot = static_f32(f, op.results[0])?;
    static_f32(f, op.operands[0])?;
    let dn = &c.dimension_numbers;
    let rank = kt.rank() as i64;
    let ko = dn.kernel_output_feature_dimension;
    let outputs = u64::try_from(*kt.shape.get(usize::try_from(ko).ok()?)?).ok()?;
    if ko == rank - 1 || outputs == 0 || c.feature_group_count != 1 || c.batch_group_count != 1 {
        return None;
    }
    if outputs % 4 != 0 {
        return None;
    }
    let kernel_elements = kt.num_elements() as u64;
    // Each output element contracts the kernel elements of one output feature.
    let work = (ot.num_elements() as u64).checked_mul(kernel_elements / outputs)?;
    if work < MIN_CONV_WORK || work / kernel_elements.max(1) < CONV_WORK_PER_ELEMENT {
        return None;
    }
    Some((0..rank).filter(|&d| d != ko).chain([ko]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(src: &str) -> Function {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        crate::passes::prepare(&m, "main").expect("prepare")
    }

    fn names(f: &Function) -> Vec<String> {
        f.body
            .as_ref()
            .map(|b| b.ops.iter().map(|o| o.name()).collect())
            .unwrap_or_default()
    }

    const XW: &str = r#"
func.func @main(%x: tensor<1024x512xf32>, %w: tensor<512x1024xf32>) -> tensor<1024x1024xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<1024x512xf32>, tensor<512x1024xf32>) -> tensor<1024x1024xf32>
  return %0 : tensor<1024x1024xf32>
}
"#;

    #[test]
    fn left_operand_along_k_is_transposed() {
        let mut f = prepared(XW);
        transpose_operands_along_free(&mut f);
        assert_eq!(
            names(&f),
            [
                "stablehlo.transpose",
                "stablehlo.dot_general",
                "stablehlo.return"
            ]
        );
        crate::ir::verify::verify_function(&f).expect("verifies");
        let ops = &f.body.as_ref().expect("body").ops;
        let Op::DotGeneral {
            dimension_numbers: dn,
            ..
        } = &ops[1].op
        else {
            panic!("not a dot");
        };
        assert_eq!(dn.lhs_contracting_dimensions, [0]);
        assert_eq!(dn.rhs_contracting_dimensions, [0]);
    }

    #[test]
    fn small_or_narrow_products_are_kept() {
        // The other operand's free extent (64) is below the bound.
        let src = XW
            .replace("512x1024xf32", "512x64xf32")
            .replace("1024x1024xf32", "1024x64xf32");
        let mut f = prepared(&src);
        transpose_operands_along_free(&mut f);
        assert_eq!(names(&f), ["stablehlo.dot_general", "stablehlo.return"]);
    }

    #[test]
    fn both_sides_and_batches() {
        let src = r#"
func.func @main(%q: tensor<2x1024x64xf32>, %k: tensor<2x1024x64xf32>) -> tensor<2x1024x1024xf32> {
  %0 = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x1024x64xf32>, tensor<2x1024x64xf32>) -> tensor<2x1024x1024xf32>
  return %0 : tensor<2x1024x1024xf32>
}
"#;
        let mut f = prepared(src);
        transpose_operands_along_free(&mut f);
        assert_eq!(
            names(&f),
            [
                "stablehlo.transpose",
                "stablehlo.transpose",
                "stablehlo.dot_general",
                "stablehlo.return"
            ]
        );
        crate::ir::verify::verify_function(&f).expect("verifies");
    }

    const CONV_IO: &str = r#"
func.func @main(%x: tensor<32x14x14x64xf32>, %k: tensor<3x3x32x64xf32>) -> tensor<32x14x14x32xf32> {
  %y = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<32x14x14x64xf32>, tensor<3x3x32x64xf32>) -> tensor<32x14x14x32xf32>
  return %y : tensor<32x14x14x32xf32>
}
"#;

    #[test]
    fn conv_kernel_gets_output_features_innermost() {
        let mut f = prepared(CONV_IO);
        transpose_operands_along_free(&mut f);
        assert_eq!(
            names(&f),
            [
                "stablehlo.transpose",
                "stablehlo.convolution",
                "stablehlo.return"
            ]
        );
        crate::ir::verify::verify_function(&f).expect("verifies");
        let ops = &f.body.as_ref().expect("body").ops;
        let Op::Transpose { permutation } = &ops[0].op else {
            panic!("not a transpose");
        };
        assert_eq!(permutation, &[0, 1, 3, 2]);
        let Op::Convolution(c) = &ops[1].op else {
            panic!("not a convolution");
        };
        let dn = &c.dimension_numbers;
        assert_eq!(dn.kernel_spatial_dimensions, [0, 1]);
        assert_eq!(dn.kernel_input_feature_dimension, 2);
        assert_eq!(dn.kernel_output_feature_dimension, 3);
    }

    #[test]
    fn conv_kernels_kept_when_laid_out_or_small() {
        // Output features already innermost (HWIO).
        let hwio = CONV_IO
            .replace("3x3x32x64xf32", "3x3x64x32xf32")
            .replace("[0, 1, o, i]", "[0, 1, i, o]");
        // Too little work for the copy: one image of 4 x 4.
        let small = CONV_IO
            .replace("32x14x14x64xf32", "1x4x4x64xf32")
            .replace("32x14x14x32xf32", "1x4x4x32xf32");
        // Output features not a multiple of 4.
        let odd = CONV_IO
            .replace("3x3x32x64xf32", "3x3x30x64xf32")
            .replace("32x14x14x32xf32", "32x14x14x30xf32");
        for src in [hwio, small, odd] {
            let mut f = prepared(&src);
            transpose_operands_along_free(&mut f);
            assert_eq!(names(&f), ["stablehlo.convolution", "stablehlo.return"]);
        }
    }
}
