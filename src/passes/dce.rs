//! Dead-code elimination: drops side-effect-free ops whose results nothing uses.

use std::collections::HashSet;

use crate::ir::{Op, Operation, Region, ValueId};

/// True for ops that must run even when their results are unused.
pub fn has_side_effects(op: &Operation) -> bool {
    match &op.op {
        Op::CustomCall(c) => c.has_side_effect,
        Op::Check(_) | Op::Probe { .. } | Op::Return | Op::Other { .. } => true,
        // A nested region's own terminator returns to its op, which has no effect of its own:
        // a reduction or a loop nothing reads is dead (with `Return` counted, none ever was).
        _ => op.regions.iter().any(|r| {
            r.ops
                .iter()
                .any(|o| o.op != Op::Return && has_side_effects(o))
        }),
    }
}

fn collect_uses(region: &Region, used: &mut HashSet<ValueId>) {
    for op in &region.ops {
        used.extend(op.operands.iter().copied());
        for r in &op.regions {
            collect_uses(r, used);
        }
    }
}

/// Removes dead ops from `region` and its nested regions, to a fixed point.
pub fn eliminate_dead_code(region: &mut Region) {
    loop {
        let mut used = HashSet::new();
        collect_uses(region, &mut used);
        let before = count_ops(region);
        prune(region, &used);
        if count_ops(region) == before {
            return;
        }
    }
}

fn count_ops(region: &Region) -> usize {
    region
        .ops
        .iter()
        .map(|o| 1 + o.regions.iter().map(count_ops).sum::<usize>())
        .sum()
}

fn prune(region: &mut Region, used: &HashSet<ValueId>) {
    region
        .ops
        .retain(|op| has_side_effects(op) || op.results.iter().any(|r| used.contains(r)));
    for op in &mut region.ops {
        for r in &mut op.regions {
            prune(r, used);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{BinaryOp, ElementType, Function, Type};

    #[test]
    fn unused_pure_ops_go_and_chains_follow() {
        let t = Type::tensor(vec![], ElementType::F32);
        let mut f = Function::new("main", vec![t.clone()], vec![t.clone()]);
        let x = f.body.as_ref().unwrap().args[0];
        let a = f.new_value(t.clone());
        let b = f.new_value(t.clone());
        let body = f.body.as_mut().unwrap();
        let add = |o, r| Operation::new(Op::Binary(BinaryOp::Add), o, vec![r], Default::default());
        body.ops.push(add(vec![x, x], a));
        body.ops.push(add(vec![a, a], b));
        body.ops.push(Operation::new(
            Op::Return,
            vec![x],
            vec![],
            Default::default(),
        ));
        eliminate_dead_code(body);
        assert_eq!(body.ops.len(), 1);
    }

    #[test]
    fn a_reduction_nothing_reads_goes_too() {
        let src = r#"
func.func @main(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
  %y = stablehlo.negate %x : tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}"#;
        let names = crate::passes::prepared_op_names(src);
        assert!(!names.iter().any(|n| n == "stablehlo.reduce"), "{names:?}");
    }
}
