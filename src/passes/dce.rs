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

/// Decompositions whose trailing results (vectors) may go when nothing reads them, and how
/// many results stay: `custom_call @wgpu_hlo.eigh` `(w, v)` -> `(w)` (`jnp.linalg.eigvalsh`
/// binds JAX's `eigh`, which always has vectors); `@wgpu_hlo.svd` `(s, u, v)` -> `(s)`. The
/// kernels of each then skip the vectors' work (for eigh by reduction: the rotations of `Z`
/// in the QL iteration and the back-transformation, about half of the time).
const VECTORS_DROPPED: [(&str, usize); 2] = [("wgpu_hlo.eigh", 1), ("wgpu_hlo.svd", 1)];

/// Drops the results of [`VECTORS_DROPPED`]'s custom calls that nothing reads, in `region`
/// and its nested regions, where all of the trailing ones are unread.
pub fn drop_unused_vectors(region: &mut Region) {
    let mut used = HashSet::new();
    collect_uses(region, &mut used);
    drop_vectors(region, &used);
}

fn drop_vectors(region: &mut Region, used: &HashSet<ValueId>) {
    for op in &mut region.ops {
        for r in &mut op.regions {
            drop_vectors(r, used);
        }
        let Op::CustomCall(c) = &mut op.op else {
            continue;
        };
        let Some(&(_, keep)) = VECTORS_DROPPED
            .iter()
            .find(|(name, _)| *name == c.call_target_name)
        else {
            continue;
        };
        if op.results.len() <= keep || op.results[keep..].iter().any(|r| used.contains(r)) {
            continue;
        }
        op.results.truncate(keep);
        if let Some(layouts) = c.result_layouts.as_mut() {
            layouts.truncate(keep);
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
    fn unread_eigenvectors_and_singular_vectors_are_dropped() {
        let src = r#"
func.func @main(%x: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %w, %v = stablehlo.custom_call @wgpu_hlo.eigh(%x) : (tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>)
  %s, %u, %vt = stablehlo.custom_call @wgpu_hlo.svd(%x) : (tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
  %w2, %v2 = stablehlo.custom_call @wgpu_hlo.eigh(%x) : (tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>)
  %s2, %u2, %vt2 = stablehlo.custom_call @wgpu_hlo.svd(%x) : (tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
  return %w, %s, %u2, %v2 : tensor<4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}"#;
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f = crate::passes::prepare(&m, "main").expect("prepare");
        let counts: Vec<usize> = f
            .body
            .as_ref()
            .expect("body")
            .ops
            .iter()
            .filter(|o| matches!(o.op, Op::CustomCall(_)))
            .map(|o| o.results.len())
            .collect();
        // The second eigh's vectors are returned; of the second svd's, u is (v is not, but
        // the values-only kernels drop both or neither).
        assert_eq!(counts, vec![1, 1, 2, 3], "{counts:?}");
    }

    #[test]
    fn vectors_read_in_a_loop_stay() {
        let src = r#"
func.func @main(%x: tensor<4x4xf32>, %n: tensor<i32>) -> tensor<4x4xf32> {
  %w, %v = stablehlo.custom_call @wgpu_hlo.eigh(%x) : (tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>)
  %r:2 = stablehlo.while(%i = %n, %a = %x) : tensor<i32>, tensor<4x4xf32>
    cond {
      %z = stablehlo.constant dense<0> : tensor<i32>
      %c = stablehlo.compare GT, %i, %z : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.subtract %i, %one : tensor<i32>
      %b = stablehlo.add %a, %v : tensor<4x4xf32>
      stablehlo.return %j, %b : tensor<i32>, tensor<4x4xf32>
    }
  return %r#1 : tensor<4x4xf32>
}"#;
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f = crate::passes::prepare(&m, "main").expect("prepare");
        let eigh = f
            .body
            .as_ref()
            .expect("body")
            .ops
            .iter()
            .find(|o| matches!(o.op, Op::CustomCall(_)))
            .expect("eigh");
        assert_eq!(eigh.results.len(), 2);
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
