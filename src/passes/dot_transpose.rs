//! `transpose(dot_general(a, b))` whose permutation swaps the result's two free-dimension
//! groups becomes `dot_general(b, a)`: the same numbers, written in the order the consumer
//! wants. JAX's weight gradients have this form (`x.T @ g` then a transpose back to the
//! weight's layout), and the transposed read of a 512x512 gradient in the optimizer update cost
//! as much as the update itself (an MLP step on lavapipe: 4.7 of 49 ms in one such kernel, its
//! reads strided by the row length); on GPUs the same reads are uncoalesced.
//!
//! The rewrite applies when the dot's result is used by that transpose only. Operands,
//! dimension numbers, precision configs and an algorithm's per-operand fields swap; the dot
//! then defines the transpose's result directly, in the dot's place.

use std::collections::HashMap;

use crate::ir::{Function, Op, Operation, Region, Type, ValueId};

/// Applies the rewrite throughout `f`.
pub fn transpose_into_dot(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    let mut uses = HashMap::new();
    count_uses(&body, &mut uses);
    rewrite_region(f, &mut body, &uses);
    f.body = Some(body);
}

fn count_uses(r: &Region, uses: &mut HashMap<ValueId, usize>) {
    for op in &r.ops {
        for o in &op.operands {
            *uses.entry(*o).or_default() += 1;
        }
        for sub in &op.regions {
            count_uses(sub, uses);
        }
    }
}

fn rank(f: &Function, v: ValueId) -> Option<usize> {
    match f.ty(v) {
        Type::Tensor(t) => Some(t.shape.len()),
        _ => None,
    }
}

/// The swapped dot for `dot` when `perm` exchanges its free-dimension groups.
fn swapped(f: &Function, dot: &Operation, perm: &[i64]) -> Option<Op> {
    let Op::DotGeneral {
        dimension_numbers: dn,
        precision_config,
        algorithm,
    } = &dot.op
    else {
        return None;
    };
    if dot.operands.len() != 2 || dot.results.len() != 1 {
        return None;
    }
    let nb = dn.lhs_batching_dimensions.len();
    let nl = rank(f, dot.operands[0])?.checked_sub(nb + dn.lhs_contracting_dimensions.len())?;
    let nr = rank(f, dot.operands[1])?.checked_sub(nb + dn.rhs_contracting_dimensions.len())?;
    if nl == 0 || nr == 0 {
        return None;
    }
    let want: Vec<i64> = (0..nb)
        .chain(nb + nl..nb + nl + nr)
        .chain(nb..nb + nl)
        .map(|d| d as i64)
        .collect();
    if perm != want.as_slice() {
        return None;
    }
    let mut dn2 = dn.clone();
    std::mem::swap(
        &mut dn2.lhs_batching_dimensions,
        &mut dn2.rhs_batching_dimensions,
    );
    std::mem::swap(
        &mut dn2.lhs_contracting_dimensions,
        &mut dn2.rhs_contracting_dimensions,
    );
    let mut pc = precision_config.clone();
    pc.reverse();
    let alg = algorithm.clone().map(|mut a| {
        std::mem::swap(&mut a.lhs_precision_type, &mut a.rhs_precision_type);
        std::mem::swap(&mut a.lhs_component_count, &mut a.rhs_component_count);
        a
    });
    Some(Op::DotGeneral {
        dimension_numbers: dn2,
        precision_config: pc,
        algorithm: alg,
    })
}

fn rewrite_region(f: &Function, region: &mut Region, uses: &HashMap<ValueId, usize>) {
    for op in &mut region.ops {
        for sub in &mut op.regions {
            rewrite_region(f, sub, uses);
        }
    }
    // Dot results (used once) by value, with their op's index.
    let dots: HashMap<ValueId, usize> = region
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op.op, Op::DotGeneral { .. }) && op.results.len() == 1)
        .filter(|(_, op)| uses.get(&op.results[0]) == Some(&1))
        .map(|(i, op)| (op.results[0], i))
        .collect();
    let mut remove = Vec::new();
    for t in 0..region.ops.len() {
        let (dot_at, perm, result) = {
            let op = &region.ops[t];
            let Op::Transpose { permutation } = &op.op else {
                continue;
            };
            if op.operands.len() != 1 || op.results.len() != 1 {
                continue;
            }
            let Some(&d) = dots.get(&op.operands[0]) else {
                continue;
            };
            (d, permutation.clone(), op.results[0])
        };
        let Some(new_op) = swapped(f, &region.ops[dot_at], &perm) else {
            continue;
        };
        let dot = &mut region.ops[dot_at];
        dot.op = new_op;
        dot.operands.swap(0, 1);
        dot.results[0] = result;
        remove.push(t);
    }
    let mut i = 0;
    region.ops.retain(|_| {
        let keep = !remove.contains(&i);
        i += 1;
        keep
    });
}

/// `dot_general(a, transpose(b, p))` reads `b` itself, its dimension numbers naming `b`'s
/// dimensions (`p[d]` for the transpose's `d`), when the free dimensions keep their order (so
/// the result is the same tensor); likewise for the left operand. JAX's `h @ t.T` with tied
/// embeddings transposed the whole 50257 x 768 table on every step (0.3 s on lavapipe) for a
/// dot that can read the table along its rows. A transpose left without uses goes with the
/// dead code.
pub fn operand_transposes_into_dot(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    let mut transposes = HashMap::new();
    collect_transposes(&body, &mut transposes);
    if !transposes.is_empty() {
        fold_operands(&mut body, &transposes);
    }
    f.body = Some(body);
}

fn collect_transposes(r: &Region, out: &mut HashMap<ValueId, (Vec<i64>, ValueId)>) {
    for op in &r.ops {
        if let (Op::Transpose { permutation }, [x], [t]) =
            (&op.op, op.operands.as_slice(), op.results.as_slice())
        {
            out.insert(*t, (permutation.clone(), *x));
        }
        for sub in &op.regions {
            collect_transposes(sub, out);
        }
    }
}

/// `dims` of a transposed operand named as dimensions of its input (`perm[d]`).
fn through(perm: &[i64], dims: &[i64]) -> Option<Vec<i64>> {
    dims.iter()
        .map(|&d| perm.get(usize::try_from(d).ok()?).copied())
        .collect()
}

fn fold_operands(r: &mut Region, transposes: &HashMap<ValueId, (Vec<i64>, ValueId)>) {
    for op in &mut r.ops {
        for sub in &mut op.regions {
            fold_operands(sub, transposes);
        }
        let Op::DotGeneral {
            dimension_numbers: dn,
            ..
        } = &mut op.op
        else {
            continue;
        };
        if op.operands.len() != 2 {
            continue;
        }
        for side in 0..2 {
            let Some((perm, x)) = transposes.get(&op.operands[side]) else {
                continue;
            };
            let (batch, contract) = if side == 0 {
                (&dn.lhs_batching_dimensions, &dn.lhs_contracting_dimensions)
            } else {
                (&dn.rhs_batching_dimensions, &dn.rhs_contracting_dimensions)
            };
            let (Some(b), Some(c)) = (through(perm, batch), through(perm, contract)) else {
                continue;
            };
            let free: Vec<i64> = (0..perm.len() as i64)
                .filter(|d| !batch.contains(d) && !contract.contains(d))
                .collect();
            let Some(moved) = through(perm, &free) else {
                continue;
            };
            if moved.windows(2).any(|w| w[0] >= w[1]) {
                continue;
            }
            if side == 0 {
                (dn.lhs_batching_dimensions, dn.lhs_contracting_dimensions) = (b, c);
            } else {
                (dn.rhs_batching_dimensions, dn.rhs_contracting_dimensions) = (b, c);
            }
            op.operands[side] = *x;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as ops;

    #[test]
    fn transpose_of_a_weight_gradient_folds_into_the_dot() {
        let src = "func.func @main(%x: tensor<8x4xf32>, %g: tensor<8x3xf32>) -> tensor<3x4xf32> {
  %0 = stablehlo.dot_general %x, %g, contracting_dims = [0] x [0] : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<4x3xf32>) -> tensor<3x4xf32>
  return %1 : tensor<3x4xf32>
}";
        let names = ops(src);
        assert!(!names.iter().any(|n| n.contains("transpose")), "{names:?}");
    }

    #[test]
    fn transposed_operands_are_read_in_place() {
        // h @ t.T (the free dimension keeps its place): the dot reads t; a transpose that
        // moves a batch dimension after a free one is folded too (batch dims are named).
        let src = "func.func @main(%h: tensor<5x4xf32>, %t: tensor<7x4xf32>, %a: tensor<3x2x4xf32>, %b: tensor<2x4x6xf32>) -> (tensor<5x7xf32>, tensor<2x3x6xf32>) {
  %tt = stablehlo.transpose %t, dims = [1, 0] : (tensor<7x4xf32>) -> tensor<4x7xf32>
  %0 = stablehlo.dot_general %h, %tt, contracting_dims = [1] x [0] : (tensor<5x4xf32>, tensor<4x7xf32>) -> tensor<5x7xf32>
  %at = stablehlo.transpose %a, dims = [1, 0, 2] : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  %1 = stablehlo.dot_general %at, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x6xf32>) -> tensor<2x3x6xf32>
  return %0, %1 : tensor<5x7xf32>, tensor<2x3x6xf32>
}";
        let names = ops(src);
        assert!(!names.iter().any(|n| n.contains("transpose")), "{names:?}");
        // Two free dimensions swapped: the result would be another tensor; kept.
        let kept = "func.func @main(%a: tensor<3x5x4xf32>, %b: tensor<4x6xf32>) -> tensor<5x3x6xf32> {
  %at = stablehlo.transpose %a, dims = [1, 0, 2] : (tensor<3x5x4xf32>) -> tensor<5x3x4xf32>
  %0 = stablehlo.dot_general %at, %b, contracting_dims = [2] x [0] : (tensor<5x3x4xf32>, tensor<4x6xf32>) -> tensor<5x3x6xf32>
  return %0 : tensor<5x3x6xf32>
}";
        assert!(ops(kept).iter().any(|n| n.contains("transpose")));
    }

    #[test]
    fn a_dot_result_used_twice_keeps_its_transpose() {
        let src = "func.func @main(%x: tensor<8x4xf32>, %g: tensor<8x3xf32>) -> (tensor<3x4xf32>, tensor<4x3xf32>) {
  %0 = stablehlo.dot_general %x, %g, contracting_dims = [0] x [0] : (tensor<8x4xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<4x3xf32>) -> tensor<3x4xf32>
  return %1, %0 : tensor<3x4xf32>, tensor<4x3xf32>
}";
        let names = ops(src);
        assert!(names.iter().any(|n| n.contains("transpose")), "{names:?}");
    }

    #[test]
    fn a_permutation_within_a_group_is_kept() {
        let src = "func.func @main(%x: tensor<2x8x4xf32>, %g: tensor<2x8x3xf32>) -> tensor<4x2x3xf32> {
  %0 = stablehlo.dot_general %x, %g, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x8x4xf32>, tensor<2x8x3xf32>) -> tensor<2x4x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0, 2] : (tensor<2x4x3xf32>) -> tensor<4x2x3xf32>
  return %1 : tensor<4x2x3xf32>
}";
        let names = ops(src);
        assert!(names.iter().any(|n| n.contains("transpose")), "{names:?}");
    }
}
