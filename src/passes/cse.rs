//! Common-subexpression elimination: an op that repeats an earlier op of its region (the same
//! op and attributes, the same operands, the same result types) is dropped and its results
//! replaced by the earlier op's. JAX's autodiff leaves such repeats (the gradient of a
//! Gaussian process's `cho_solve` solved one system twice); each would be a kernel launch.
//!
//! Only ops without effects take part: not `rng` (each call draws anew), custom calls (host
//! callbacks), optimization barriers, checks and probes; of the ops with regions, reductions
//! whose bodies are the same computation (`x.mean()` and `x.var()` both sum `x`: two
//! reductions of the same tensor, each a kernel reading it). Each region has its own table,
//! so an op is only replaced by one that dominates it.

use std::collections::HashMap;

use crate::ir::{Function, Op, Operation, Region, ValueId};

use super::dce::has_side_effects;

/// Whether `op` may be replaced by an identical earlier op.
pub(crate) fn pure(op: &Operation) -> bool {
    (op.regions.is_empty() || matches!(op.op, Op::Reduce { .. } | Op::ReduceWindow { .. }))
        && !has_side_effects(op)
        && !matches!(
            op.op,
            Op::Rng { .. }
                | Op::CustomCall(_)
                | Op::Composite { .. }
                | Op::Call { .. }
                | Op::OptimizationBarrier
                | Op::AfterAll
                | Op::CreateToken
                | Op::Return
        )
}

/// Removes repeated ops from the function's body (and from nested regions, each on its own);
/// returns how many went.
pub fn eliminate_common_subexpressions(f: &mut Function) -> usize {
    let Some(mut body) = f.body.take() else {
        return 0;
    };
    let mut replaced = HashMap::new();
    let removed = region(f, &mut body, &mut replaced);
    f.body = Some(body);
    removed
}

fn region(f: &Function, r: &mut Region, replaced: &mut HashMap<ValueId, ValueId>) -> usize {
    // Ops kept so far, bucketed by name, operands and result types (printed); within a
    // bucket the ops are compared whole.
    let mut seen: HashMap<(String, Vec<ValueId>, String), Vec<usize>> = HashMap::new();
    let mut kept: Vec<Operation> = Vec::with_capacity(r.ops.len());
    let mut removed = 0;
    for mut op in std::mem::take(&mut r.ops) {
        for v in &mut op.operands {
            if let Some(&to) = replaced.get(v) {
                *v = to;
            }
        }
        for nested in &mut op.regions {
            removed += region(f, nested, replaced);
        }
        if !pure(&op) {
            kept.push(op);
            continue;
        }
        let types = format!(
            "{:?}",
            op.results
                .iter()
                .map(|v| f.values.get(v.index()))
                .collect::<Vec<_>>()
        );
        let bucket = seen
            .entry((op.name(), op.operands.clone(), types))
            .or_default();
        let same = bucket.iter().copied().find(|&i| {
            kept.get(i).is_some_and(|k| {
                k.op == op.op
                    && k.results.len() == op.results.len()
                    && same_regions(f, &k.regions, &op.regions, &mut HashMap::new())
            })
        });
        match same {
            Some(i) => {
                for (&dup, &first) in op.results.iter().zip(&kept[i].results) {
                    replaced.insert(dup, first);
                }
                removed += 1;
            }
            None => {
                bucket.push(kept.len());
                kept.push(op);
            }
        }
    }
    r.ops = kept;
    removed
}

/// Whether regions `a` and `b` compute the same: op for op the same op on corresponding
/// values (`map`: `a`'s arguments and results to `b`'s; a value of neither, captured from
/// outside, must be the same value), with results of the same types.
fn same_regions(
    f: &Function,
    a: &[Region],
    b: &[Region],
    map: &mut HashMap<ValueId, ValueId>,
) -> bool {
    let ty = |v: &ValueId| f.values.get(v.index());
    if a.len() != b.len() {
        return false;
    }
    for (ra, rb) in a.iter().zip(b) {
        if ra.args.len() != rb.args.len() || ra.ops.len() != rb.ops.len() {
            return false;
        }
        for (x, y) in ra.args.iter().zip(&rb.args) {
            if ty(x) != ty(y) {
                return false;
            }
            map.insert(*x, *y);
        }
        for (oa, ob) in ra.ops.iter().zip(&rb.ops) {
            let operands = oa.operands.len() == ob.operands.len()
                && oa
                    .operands
                    .iter()
                    .zip(&ob.operands)
                    .all(|(x, y)| map.get(x).unwrap_or(x) == y);
            if oa.op != ob.op
                || !operands
                || oa.results.len() != ob.results.len()
                || (oa.op != Op::Return && has_side_effects(oa))
                || !same_regions(f, &oa.regions, &ob.regions, map)
            {
                return false;
            }
            for (x, y) in oa.results.iter().zip(&ob.results) {
                if ty(x) != ty(y) {
                    return false;
                }
                map.insert(*x, *y);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as ops;

    #[test]
    fn repeated_ops_go_and_their_users_follow() {
        // Two identical solves, then two identical products of their results: one of each.
        let src = "func.func @main(%a: tensor<8x8xf32>, %b: tensor<8x1xf32>) -> (tensor<8x1xf32>, tensor<8x1xf32>) {
  %0 = \"stablehlo.triangular_solve\"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %1 = \"stablehlo.triangular_solve\"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %2 = stablehlo.multiply %0, %0 : tensor<8x1xf32>
  %3 = stablehlo.multiply %1, %1 : tensor<8x1xf32>
  return %2, %3 : tensor<8x1xf32>, tensor<8x1xf32>
}";
        assert_eq!(
            ops(src),
            [
                "stablehlo.triangular_solve",
                "stablehlo.multiply",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn reductions_with_the_same_body_merge() {
        // Two sums of %x over the same dimension (a mean and a variance's mean), a max of it
        // and a sum over the other dimension: the second sum goes.
        let src = "func.func @main(%x: tensor<8x4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
  %2 = stablehlo.reduce(%x init: %z) applies stablehlo.maximum across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
  return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>
}";
        let names = ops(src);
        assert_eq!(
            names.iter().filter(|o| *o == "stablehlo.reduce").count(),
            3,
            "{names:?}"
        );
    }

    #[test]
    fn different_attributes_operands_or_draws_stay() {
        // Another attribute (upper), another operand order (a - b, b - a), and two draws of
        // `rng`: nothing is merged.
        let src = "func.func @main(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>, %lo: tensor<f32>, %hi: tensor<f32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = \"stablehlo.triangular_solve\"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = \"stablehlo.triangular_solve\"(%a, %b) {left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = stablehlo.subtract %a, %b : tensor<8x8xf32>
  %3 = stablehlo.subtract %b, %a : tensor<8x8xf32>
  %s = stablehlo.constant dense<4> : tensor<1xi64>
  %4 = stablehlo.rng %lo, %hi, %s, distribution = UNIFORM : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<4xf32>
  %5 = stablehlo.rng %lo, %hi, %s, distribution = UNIFORM : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<4xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<4xf32>, tensor<4xf32>
}";
        let names = ops(src);
        let count = |n: &str| names.iter().filter(|o| *o == n).count();
        assert_eq!(count("stablehlo.triangular_solve"), 2);
        assert_eq!(count("stablehlo.subtract"), 2);
        assert_eq!(count("stablehlo.rng"), 2);
    }
}
