//! `add(scatter(zeros, indices, updates), d)` with an `add` update computation becomes
//! `scatter(d, indices, updates)`: the updates are added into `d` instead of into a tensor of
//! zeros that is then added to `d` (XLA's algebraic simplifier makes the same rewrite). A
//! tied embedding's gradient has this form: the lookup's gradient, a scatter-add into zeros
//! the size of the table, plus the output projection's gradient. On a 50257 x 768 table the
//! zeros and the add were two passes over 154 MB (155 ms on lavapipe); the scatter now
//! updates the dot's result in place (`codegen::op_kernels::scatter`), touching only the rows
//! it adds to.
//!
//! Only the rounding differs: each updated element is `(d + u1) + u2` instead of
//! `((0 + u1) + u2) + d`. The scatter's result must have no other use, and the rewritten
//! scatter takes the add's place (after `d` is defined).

use std::collections::{HashMap, HashSet};

use crate::ir::{BinaryOp, Function, Op, Operation, Region, Scalar, ValueId};

/// Applies the rewrite throughout `f`.
pub fn scatter_add_into_operand(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    let mut uses = HashMap::new();
    let mut zeros = HashSet::new();
    survey(&body, &mut uses, &mut zeros);
    rewrite_region(f, &mut body, &uses, &zeros);
    f.body = Some(body);
}

/// Counts the uses of every value, and collects values that are all zeros: splat zero
/// constants and broadcasts of a zero constant.
pub(crate) fn survey(r: &Region, uses: &mut HashMap<ValueId, usize>, zeros: &mut HashSet<ValueId>) {
    for op in &r.ops {
        for o in &op.operands {
            *uses.entry(*o).or_default() += 1;
        }
        let zero = match (&op.op, op.operands.as_slice()) {
            (Op::Constant(l), []) => l.is_splat() && !l.is_empty() && is_zero(l.get(0)),
            (Op::BroadcastInDim { .. }, [x]) => zeros.contains(x),
            _ => false,
        };
        if zero {
            zeros.extend(op.results.iter().copied());
        }
        for sub in &op.regions {
            survey(sub, uses, zeros);
        }
    }
}

fn is_zero(v: Scalar) -> bool {
    match v {
        Scalar::Complex(re, im) => re == 0.0 && im == 0.0,
        v => v.as_f64() == 0.0,
    }
}

/// Whether `op` is a one-input scatter into one of `zeros` whose update computation adds.
fn scatter_adds_into_zeros(op: &Operation, zeros: &HashSet<ValueId>) -> bool {
    let ([x, _, _], [_], [body]) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.as_slice(),
    ) else {
        return false;
    };
    if !matches!(op.op, Op::Scatter { .. }) || !zeros.contains(x) {
        return false;
    }
    adds_its_arguments(body)
}

/// Whether `body` (of two arguments) returns their sum.
pub(crate) fn adds_its_arguments(body: &Region) -> bool {
    match (body.args.as_slice(), body.ops.as_slice()) {
        ([a, u], [add, ret]) => {
            add.op == Op::Binary(BinaryOp::Add)
                && (add.operands == [*a, *u] || add.operands == [*u, *a])
                && add.results.len() == 1
                && ret.op == Op::Return
                && ret.operands == add.results
        }
        _ => false,
    }
}

fn rewrite_region(
    f: &Function,
    region: &mut Region,
    uses: &HashMap<ValueId, usize>,
    zeros: &HashSet<ValueId>,
) {
    for op in &mut region.ops {
        for sub in &mut op.regions {
            rewrite_region(f, sub, uses, zeros);
        }
    }
    // Scatters into zeros whose result has one use, by result; then the adds of one of them
    // and another tensor of the same type: (scatter's position, add's position, the other).
    let mut scatters: HashMap<ValueId, usize> = HashMap::new();
    let mut pairs = Vec::new();
    for (i, op) in region.ops.iter().enumerate() {
        if scatter_adds_into_zeros(op, zeros) && uses.get(&op.results[0]) == Some(&1) {
            scatters.insert(op.results[0], i);
            continue;
        }
        let ([a, b], [r]) = (op.operands.as_slice(), op.results.as_slice()) else {
            continue;
        };
        if op.op != Op::Binary(BinaryOp::Add) {
            continue;
        }
        for (s, d) in [(a, b), (b, a)] {
            if let Some(&at) = scatters.get(s) {
                if f.ty(*s) == f.ty(*d) && f.ty(*r) == f.ty(*s) && s != d {
                    scatters.remove(s);
                    pairs.push((at, i, *d));
                    break;
                }
            }
        }
    }
    if pairs.is_empty() {
        return;
    }
    let mut ops: Vec<Option<Operation>> = std::mem::take(&mut region.ops)
        .into_iter()
        .map(Some)
        .collect();
    for (at, add_at, d) in pairs {
        let (Some(mut scatter), Some(add)) = (ops[at].take(), ops[add_at].take()) else {
            continue;
        };
        scatter.operands[0] = d;
        scatter.results = add.results;
        scatter.loc = add.loc;
        ops[add_at] = Some(scatter);
    }
    region.ops = ops.into_iter().flatten().collect();
}

#[cfg(test)]
mod tests {
    use crate::frontend::text::parse_module;
    use crate::passes::prepare;

    fn prepared(src: &str) -> String {
        let m = parse_module(src, "t").expect("parse");
        let f = prepare(&m, "main").expect("prepare");
        crate::ir::print::print_function(&f)
    }

    fn program(add: &str, body: &str, zero: &str) -> String {
        format!(
            r#"func.func @main(%d: tensor<8x4xf32>, %i: tensor<3x1xi32>, %u: tensor<3x4xf32>) -> tensor<8x4xf32> {{
  %z = stablehlo.constant dense<{zero}> : tensor<f32>
  %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
  %s = "stablehlo.scatter"(%zb, %i, %u) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %r = stablehlo.{body} %a, %b : tensor<f32>
    stablehlo.return %r : tensor<f32>
  }}) {{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}} : (tensor<8x4xf32>, tensor<3x1xi32>, tensor<3x4xf32>) -> tensor<8x4xf32>
  {add}
  return %o : tensor<8x4xf32>
}}"#
        )
    }

    #[test]
    fn an_add_of_a_scatter_into_zeros_scatters_into_the_other_operand() {
        for add in [
            "%o = stablehlo.add %s, %d : tensor<8x4xf32>",
            "%o = stablehlo.add %d, %s : tensor<8x4xf32>",
        ] {
            let out = prepared(&program(add, "add", "0.0"));
            assert!(out.contains("stablehlo.scatter\"(%arg0,"), "{out}");
            assert!(!out.contains("broadcast_in_dim"), "{out}");
            assert_eq!(out.matches("stablehlo.add").count(), 1, "{out}");
        }
    }

    #[test]
    fn other_scatters_and_other_uses_stay() {
        // Another update computation, another initial value, a second use of the scatter.
        let kept = [
            program("%o = stablehlo.add %s, %d : tensor<8x4xf32>", "maximum", "0.0"),
            program("%o = stablehlo.add %s, %d : tensor<8x4xf32>", "add", "1.0"),
            program(
                "%t = stablehlo.add %s, %d : tensor<8x4xf32>\n  %o = stablehlo.multiply %t, %s : tensor<8x4xf32>",
                "add",
                "0.0",
            ),
        ];
        for src in kept {
            let out = prepared(&src);
            assert!(out.contains("broadcast_in_dim"), "{out}");
        }
    }
}
