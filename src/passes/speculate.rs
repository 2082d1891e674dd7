//! Conditionals with cheap branches computed whole and chosen by `select`. An `if` or `case`
//! makes the runtime read its selector back to the host before it can go on (a round trip
//! and a submission split, ~0.1-0.3 ms on lavapipe), and inside a loop it does so every
//! iteration: `jax.scipy.linalg.expm` squares its 64 x 64 result in a 16-step `fori_loop`
//! whose body is `lax.cond(i < s, r @ r, r)`, 16 read-backs, 5.4 ms against 0.2 on jax cpu.
//!
//! Where every branch is made of pure ops ([`pure`]: elementwise ops, shapes, slices,
//! reductions, products, gathers) and all of them together do little work ([`MAX_WORK`]:
//! elements written, plus multiply-adds of products), the branches' ops move before the
//! conditional and each result becomes `select`s of the branches' values by the selector (a
//! `case` index out of range takes the last branch, as when it runs). Floating-point ops do
//! not trap and every index is clamped, so computing a branch that is not taken changes no
//! result. Branches are taken bottom-up: a conditional inside a branch that is speculated
//! leaves that branch pure. It runs after canonicalization, which keeps only the branch taken
//! of a conditional on a constant, and drops optimization barriers: an `optimization_barrier`
//! in a branch keeps the conditional ([`with_barriers`] notes them before).
//! `WGPU_HLO_SPECULATE=0` keeps every conditional.

use std::collections::HashSet;

use crate::ir::{
    attr::ComparisonDirection, ElementType, Function, Literal, Op, Operation, Region, Scalar,
    TensorType, Type, ValueId,
};

/// Most work (elements written by the branches' ops, plus their products' multiply-adds) a
/// speculated conditional may do. A 64 x 64 product is 262144 multiply-adds: well under a
/// read-back's cost on any adapter.
const MAX_WORK: u64 = 1 << 20;

/// The first results of the conditionals in `f` with an `optimization_barrier` in a branch
/// (before canonicalization drops it): [`speculate_conditionals`] keeps them.
pub fn with_barriers(f: &Function) -> HashSet<ValueId> {
    let mut kept = HashSet::new();
    if let Some(body) = &f.body {
        body.walk(&mut |o: &Operation| {
            if !matches!(o.op, Op::If | Op::Case) {
                return;
            }
            let mut barrier = false;
            for r in &o.regions {
                r.walk(&mut |b: &Operation| barrier |= b.op == Op::OptimizationBarrier);
            }
            if barrier {
                kept.extend(o.results.first().copied());
            }
        });
    }
    kept
}

/// Applies the rewrite throughout `f`, but to the conditionals whose first result is in
/// `kept`.
pub fn speculate_conditionals(f: &mut Function, kept: &HashSet<ValueId>) {
    if std::env::var("WGPU_HLO_SPECULATE").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    speculate_region(f, &mut body, kept);
    f.body = Some(body);
}

fn speculate_region(f: &mut Function, region: &mut Region, kept: &HashSet<ValueId>) {
    let ops = std::mem::take(&mut region.ops);
    let mut out = Vec::with_capacity(ops.len());
    for mut op in ops {
        for r in &mut op.regions {
            speculate_region(f, r, kept);
        }
        let keep = op.results.first().is_some_and(|r| kept.contains(r));
        if !keep && speculatable(f, &op) {
            expand(f, op, &mut out);
        } else {
            out.push(op);
        }
    }
    region.ops = out;
}

/// Whether `op` is an `if` or `case` of a scalar selector whose branches are argument-less,
/// return static tensors, hold only [`pure`] ops and together do at most [`MAX_WORK`].
fn speculatable(f: &Function, op: &Operation) -> bool {
    if !matches!(op.op, Op::If | Op::Case) || op.regions.len() < 2 {
        return false;
    }
    let Some(selector) = op.operands.first().and_then(|&s| f.ty(s).as_tensor()) else {
        return false;
    };
    let selector_ok = selector.rank() == 0
        && match op.op {
            Op::If => selector.dtype == ElementType::Pred,
            _ => matches!(selector.dtype, ElementType::I32 | ElementType::I64),
        };
    let results_ok = op.results.iter().all(|&r| {
        f.ty(r)
            .as_tensor()
            .is_some_and(|t| t.is_static() && t.num_elements() > 0)
    });
    let branches_ok = op.regions.iter().all(|r| {
        r.args.is_empty()
            && r.ops.last().is_some_and(|o| o.op == Op::Return)
            && r.returned().len() == op.results.len()
            && r.ops.iter().all(|o| o.op == Op::Return || pure(o))
    });
    if !(selector_ok && results_ok && branches_ok) {
        return false;
    }
    let mut work = 0u64;
    for r in &op.regions {
        r.walk(&mut |o: &Operation| work = work.saturating_add(op_work(f, o)));
    }
    work <= MAX_WORK
}

/// Whether `o` (and every op in its regions) computes its results from its operands alone:
/// no effects, no loops or conditionals, nothing the runtime must see.
fn pure(o: &Operation) -> bool {
    // What unrolling copies (elementwise ops, shapes, slices, reductions), and products and
    // gathers.
    let own = super::unroll::fuses_across_copies(&o.op)
        || matches!(o.op, Op::DotGeneral { .. } | Op::Gather { .. });
    own && o.regions.iter().all(|r| r.ops.iter().all(pure))
}

/// The elements `o` writes, plus a product's multiply-adds.
fn op_work(f: &Function, o: &Operation) -> u64 {
    let elements: u64 = o
        .results
        .iter()
        .map(|&r| f.ty(r).as_tensor().map_or(0, |t| t.num_elements() as u64))
        .sum();
    let Op::DotGeneral {
        dimension_numbers, ..
    } = &o.op
    else {
        return elements;
    };
    let Some(lhs) = o.operands.first().and_then(|&v| f.ty(v).as_tensor()) else {
        return u64::MAX;
    };
    let dims = lhs.dims();
    let k: u64 = dimension_numbers
        .lhs_contracting_dimensions
        .iter()
        .map(|&d| dims.get(d as usize).map_or(0, |&s| s as u64))
        .product();
    elements.saturating_add(elements.saturating_mul(k))
}

/// Moves the branches of `op` (speculatable) into `out`, then the `select`s that define its
/// results.
fn expand(f: &mut Function, op: Operation, out: &mut Vec<Operation>) {
    let loc = op.loc.clone();
    let selector = op.operands[0];
    let is_if = op.op == Op::If;
    let mut values: Vec<Vec<ValueId>> = Vec::new();
    for mut r in op.regions {
        values.push(r.returned().to_vec());
        r.ops.pop();
        out.extend(r.ops);
    }
    let n = values.len();
    // The scalar predicate choosing branch j over the later ones: an `if`'s own for its
    // first branch, `selector == j` for a `case`.
    let mut chooses: Vec<ValueId> = Vec::new();
    for j in 0..n - 1 {
        if is_if {
            chooses.push(selector);
            continue;
        }
        let dtype = f
            .ty(selector)
            .as_tensor()
            .map_or(ElementType::I32, |t| t.dtype);
        let c = f.new_value(Type::Tensor(TensorType::scalar(dtype)));
        out.push(Operation::new(
            Op::Constant(Literal::scalar(dtype, Scalar::Int(j as i128))),
            Vec::new(),
            vec![c],
            loc.clone(),
        ));
        let eq = f.new_value(Type::Tensor(TensorType::scalar(ElementType::Pred)));
        out.push(Operation::new(
            Op::Compare {
                direction: ComparisonDirection::Eq,
                compare_type: None,
            },
            vec![selector, c],
            vec![eq],
            loc.clone(),
        ));
        chooses.push(eq);
    }
    for (k, &result) in op.results.iter().enumerate() {
        let Some(t) = f.ty(result).as_tensor().cloned() else {
            continue;
        };
        // The last branch's value, then each earlier one chosen over it, the first last (it
        // defines the result).
        let mut acc = values[n - 1][k];
        for j in (0..n - 1).rev() {
            let mut pred = chooses[j];
            if t.rank() > 0 {
                let b = f.new_value(Type::Tensor(TensorType::new(
                    t.dims().iter().map(|&d| d as i64).collect(),
                    ElementType::Pred,
                )));
                out.push(Operation::new(
                    Op::BroadcastInDim {
                        dimensions: Vec::new(),
                    },
                    vec![pred],
                    vec![b],
                    loc.clone(),
                ));
                pred = b;
            }
            let v = if j == 0 {
                result
            } else {
                f.new_value(Type::Tensor(t.clone()))
            };
            out.push(Operation::new(
                Op::Select,
                vec![pred, values[j][k], acc],
                vec![v],
                loc.clone(),
            ));
            acc = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names;

    #[test]
    fn cheap_branches_become_selects() {
        let src = r#"
func.func @main(%p: tensor<i1>, %a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %r = "stablehlo.if"(%p) ({
    %d = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    stablehlo.return %d : tensor<8x8xf32>
  }, {
    stablehlo.return %a : tensor<8x8xf32>
  }) : (tensor<i1>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}
"#;
        let names = prepared_op_names(src);
        assert!(!names.iter().any(|n| n == "stablehlo.if"), "{names:?}");
        assert!(names.iter().any(|n| n == "stablehlo.select"), "{names:?}");
    }

    #[test]
    fn a_barrier_keeps_the_conditional() {
        let src = r#"
func.func @main(%p: tensor<i1>, %a: tensor<8xf32>) -> tensor<8xf32> {
  %r = "stablehlo.if"(%p) ({
    %d = stablehlo.add %a, %a : tensor<8xf32>
    %e = stablehlo.optimization_barrier %d : tensor<8xf32>
    stablehlo.return %e : tensor<8xf32>
  }, {
    stablehlo.return %a : tensor<8xf32>
  }) : (tensor<i1>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"#;
        let names = prepared_op_names(src);
        assert!(names.iter().any(|n| n == "stablehlo.if"), "{names:?}");
    }

    #[test]
    fn a_case_becomes_a_chain_of_selects() {
        let src = r#"
func.func @main(%i: tensor<i32>, %a: tensor<8xf32>) -> tensor<8xf32> {
  %r = "stablehlo.case"(%i) ({
    %d = stablehlo.add %a, %a : tensor<8xf32>
    stablehlo.return %d : tensor<8xf32>
  }, {
    %e = stablehlo.multiply %a, %a : tensor<8xf32>
    stablehlo.return %e : tensor<8xf32>
  }, {
    stablehlo.return %a : tensor<8xf32>
  }) : (tensor<i32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"#;
        let names = prepared_op_names(src);
        assert!(!names.iter().any(|n| n == "stablehlo.case"), "{names:?}");
        assert_eq!(
            names.iter().filter(|n| *n == "stablehlo.select").count(),
            2,
            "{names:?}"
        );
    }

    #[test]
    fn costly_branches_stay() {
        let src = r#"
func.func @main(%p: tensor<i1>, %a: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %r = "stablehlo.if"(%p) ({
    %d = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    stablehlo.return %d : tensor<256x256xf32>
  }, {
    stablehlo.return %a : tensor<256x256xf32>
  }) : (tensor<i1>) -> tensor<256x256xf32>
  return %r : tensor<256x256xf32>
}
"#;
        let names = prepared_op_names(src);
        assert!(names.iter().any(|n| n == "stablehlo.if"), "{names:?}");
    }
}
