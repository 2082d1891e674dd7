//! A reduction over leading and trailing dimensions whose operand broadcasts per-row values
//! along the trailing ones becomes a reduction of the rows followed by a reduction of the row
//! results: `sum(one_hot(y) * log_softmax(x))` over a `[B, C]` tensor reads `max` and
//! `log(sum(exp))` of each row at every element. As one full reduction, each element loads
//! those row values again (lavapipe, 4096 x 1000: 25 ms, 4 loads and two divisions by C per
//! element); reduced by rows first, it is one more pass of the row kernel that already
//! computed them (`fusion::rows`), where they are per-row scalars, then a reduction of B
//! values.
//!
//! Only reductions whose body is one associative, commutative op on its two arguments (add,
//! multiply, maximum, minimum, and, or, xor) with their identity as initial value are split:
//! the row reduction starts from the same identity, so the result is the same up to the order
//! floating-point sums are taken in (which a parallel reduction does not fix anyway).
//! `WGPU_HLO_ROWS_FIRST=0` turns it off (for comparisons).

use std::collections::HashMap;

use super::rewrite::{copy_ops_within, expand_chosen_ops};
use crate::ir::types::int_range;
use crate::ir::{BinaryOp, ElementType, Function, Op, Operation, Region, Scalar, Type, ValueId};

/// Rows shorter than this are not reduced first (the row kernels take rows from 32 elements).
const MIN_ROW: usize = 32;

/// Most producers searched for a row broadcast above a reduction.
const SEARCH: usize = 64;

/// Applies the split throughout `f`.
pub fn reduce_rows_first(f: &mut Function) {
    if std::env::var("WGPU_HLO_ROWS_FIRST").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    expand_chosen_ops(f, split_point, split);
}

/// Where `op` splits: the first of the trailing reduced dimensions its rows leave, when it is a reduction
/// this pass splits (see the module comment).
fn split_point(
    f: &Function,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    op: &Operation,
) -> Option<usize> {
    let (dimensions, x, t) = splittable_reduce(f, ops, def, op)?;
    let rank = t.shape.len();
    let reduced = |d: usize| dimensions.contains(&(d as i64));
    // Rows end where the per-row value's dimensions end; all after are reduced.
    let t0 = row_broadcast(f, ops, def, x)?;
    if t0 == 0 || t0 >= rank || !(t0..rank).all(reduced) || !(0..t0).any(reduced) {
        return None;
    }
    let row: i64 = t.shape[t0..].iter().product();
    let rows: i64 = t.shape[..t0].iter().product();
    (row >= MIN_ROW as i64 && rows >= 2).then_some(t0)
}

/// A single-operand reduction of a static shape into its element type whose body is one
/// associative, commutative op and whose initial value is that op's identity (so that it
/// may be taken in two stages, each from the same identity: `rows_first`, `fold_rows`): its
/// dimensions, operand and operand type.
pub(crate) fn splittable_reduce<'a>(
    f: &'a Function,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    op: &'a Operation,
) -> Option<(&'a [i64], ValueId, &'a crate::ir::TensorType)> {
    let Op::Reduce { dimensions } = &op.op else {
        return None;
    };
    let ([x, init], [r], [body]) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.as_slice(),
    ) else {
        return None;
    };
    let t = f.ty(*x).as_tensor()?;
    if !t.is_static() || f.ty(*r).as_tensor().map(|t| t.dtype) != Some(t.dtype) {
        return None;
    }
    let binary = reducer(body)?;
    is_identity(ops, def, *init, binary, t.dtype).then_some((dimensions, *x, t))
}

/// The op of a body `return op(a, b)` on its two arguments, when it is associative and
/// commutative.
fn reducer(body: &Region) -> Option<BinaryOp> {
    let ([a, b], [o, ret]) = (body.args.as_slice(), body.ops.as_slice()) else {
        return None;
    };
    let Op::Binary(k) = o.op else {
        return None;
    };
    let ok = matches!(
        k,
        BinaryOp::Add
            | BinaryOp::Multiply
            | BinaryOp::Maximum
            | BinaryOp::Minimum
            | BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
    );
    (ok && (o.operands == [*a, *b] || o.operands == [*b, *a])
        && ret.op == Op::Return
        && ret.operands == o.results)
        .then_some(k)
}

/// Whether `init` is a constant holding the identity of `k` on `dtype`.
fn is_identity(
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    init: ValueId,
    k: BinaryOp,
    dtype: ElementType,
) -> bool {
    let Some(Op::Constant(l)) = def.get(&init).and_then(|&i| ops.get(i)).map(|o| &o.op) else {
        return false;
    };
    if l.is_empty() || !l.is_splat() {
        return false;
    }
    let v = l.get(0);
    let all_ones = match v {
        Scalar::Bool(b) => b,
        Scalar::Int(i) => i == -1 || (dtype.is_unsigned_int() && i == int_range(dtype).1 as i128),
        _ => false,
    };
    let zero = matches!(v, Scalar::Bool(false) | Scalar::Int(0))
        || matches!(v, Scalar::Float(x) if x == 0.0);
    match (k, v) {
        (BinaryOp::Add | BinaryOp::Or | BinaryOp::Xor, _) => zero,
        (BinaryOp::And, _) => all_ones,
        (BinaryOp::Multiply, Scalar::Int(1) | Scalar::Bool(true)) => true,
        (BinaryOp::Multiply, Scalar::Float(x)) => x == 1.0,
        (BinaryOp::Maximum, Scalar::Float(x)) => x == f64::NEG_INFINITY,
        (BinaryOp::Minimum, Scalar::Float(x)) => x == f64::INFINITY,
        (BinaryOp::Maximum, Scalar::Int(i)) => i == int_range(dtype).0 as i128,
        (BinaryOp::Minimum, Scalar::Int(i)) => i == int_range(dtype).1 as i128,
        (BinaryOp::Maximum, Scalar::Bool(b)) => !b,
        (BinaryOp::Minimum, Scalar::Bool(b)) => b,
        _ => false,
    }
}

/// Where the rows of `x` end, when `x` is computed (through elementwise ops and broadcasts)
/// from a value of more than one element broadcast to its shape along trailing dimensions:
/// the position after the last dimension that value varies along.
fn row_broadcast(
    f: &Function,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    x: ValueId,
) -> Option<usize> {
    let shape = f.ty(x).as_tensor()?.shape.clone();
    let mut stack = vec![x];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || seen.len() > SEARCH {
            continue;
        }
        let Some(op) = def.get(&v).and_then(|&i| ops.get(i)) else {
            continue;
        };
        match &op.op {
            Op::BroadcastInDim { dimensions } => {
                let (Some(src), Some(out)) = (
                    op.operands.first().and_then(|o| f.ty(*o).as_tensor()),
                    f.ty(v).as_tensor(),
                ) else {
                    continue;
                };
                // Broadcasts to the reduced operand's shape only; one that only reshapes is
                // looked through.
                if out.shape != shape {
                    continue;
                }
                if src.num_elements() == out.num_elements() {
                    stack.extend(op.operands.iter().copied());
                    continue;
                }
                if src.num_elements() <= 1 {
                    continue;
                }
                let end = dimensions
                    .iter()
                    .zip(&src.shape)
                    .filter(|(_, &n)| n != 1)
                    .map(|(&d, _)| d as usize + 1)
                    .max();
                if end.is_some_and(|e| e < shape.len()) {
                    return end;
                }
            }
            _ if op.op.is_elementwise() || op.op == Op::Convert => {
                stack.extend(op.operands.iter().copied());
            }
            _ => {}
        }
    }
    None
}

/// `op` as a reduction of the dimensions from `t0` on, then of the other reduced dimensions of
/// the row results.
fn split(f: &mut Function, op: Operation, t0: usize) -> Vec<Operation> {
    let Op::Reduce { dimensions } = &op.op else {
        return vec![op];
    };
    let (x, init) = (op.operands[0], op.operands[1]);
    let Some(t) = f.ty(x).as_tensor().cloned() else {
        return vec![op];
    };
    let rank = t.shape.len();
    let rows = f.new_value(Type::tensor(t.shape[..t0].to_vec(), t.dtype));
    // The row reduction's body: a copy of the original's, on arguments of its own.
    let mut map = HashMap::new();
    let mut first_args = Vec::new();
    for a in &op.regions[0].args {
        let ty = f.ty(*a).clone();
        let n = f.new_value(ty);
        map.insert(*a, n);
        first_args.push(n);
    }
    let first_body = copy_ops_within(f, &op.regions[0].ops, &mut map);
    let first = Operation {
        op: Op::Reduce {
            dimensions: (t0..rank).map(|d| d as i64).collect(),
        },
        operands: vec![x, init],
        results: vec![rows],
        regions: vec![Region {
            args: first_args,
            ops: first_body,
        }],
        loc: op.loc.clone(),
    };
    let second = Operation {
        op: Op::Reduce {
            dimensions: dimensions
                .iter()
                .copied()
                .filter(|&d| (d as usize) < t0)
                .collect(),
        },
        operands: vec![rows, init],
        ..op
    };
    vec![first, second]
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names;

    fn xent(init: &str, body: &str) -> String {
        format!(
            r#"func.func @main(%x: tensor<64x100xf32>, %m: tensor<64xf32>) -> tensor<f32> {{
  %z = stablehlo.constant dense<{init}> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %m, dims = [0] : (tensor<64xf32>) -> tensor<64x100xf32>
  %d = stablehlo.subtract %x, %b : tensor<64x100xf32>
  %s = stablehlo.reduce(%d init: %z) applies stablehlo.{body} across dimensions = [0, 1] : (tensor<64x100xf32>, tensor<f32>) -> tensor<f32>
  return %s : tensor<f32>
}}"#
        )
    }

    fn reduces(src: &str) -> usize {
        prepared_op_names(src)
            .iter()
            .filter(|n| n.as_str() == "stablehlo.reduce")
            .count()
    }

    #[test]
    fn a_full_reduction_of_row_broadcasts_reduces_rows_first() {
        assert_eq!(reduces(&xent("0.0", "add")), 2);
        assert_eq!(reduces(&xent("0xFF800000", "maximum")), 2);
    }

    #[test]
    fn other_initial_values_and_bodies_stay_whole() {
        assert_eq!(reduces(&xent("1.0", "add")), 1);
        assert_eq!(reduces(&xent("0.0", "maximum")), 1);
        assert_eq!(reduces(&xent("0.0", "subtract")), 1);
    }
}
