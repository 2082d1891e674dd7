//! Canonicalization: removes ops that are identities on one device (optimization barriers,
//! sharding annotations, no-op reshapes/converts/transposes) and folds tuple plumbing, so the
//! fusion and codegen stages see fewer kinds of ops.

use std::collections::HashMap;

use super::rewrite::substitute;
use crate::ir::{Attr, Function, Literal, Op, Operation, Region, Scalar, Type, ValueId};

/// Custom-call targets and ops of other dialects that are the identity on a single device.
fn is_identity_other(op: &Operation) -> bool {
    match &op.op {
        Op::CustomCall(c) => matches!(
            c.call_target_name.as_str(),
            "Sharding"
                | "SPMDFullToShardShape"
                | "SPMDShardToFullShape"
                | "mhlo.sharding"
                | "annotate_device_placement"
                | "xla.sdy.GlobalToLocalShape"
                | "xla.sdy.LocalToGlobalShape"
                | "xla.sdy.FuncResultSharding"
        ),
        Op::Other { name, attrs } if name.starts_with("stablehlo.") => {
            name.strip_prefix("stablehlo.").is_some_and(|n| {
                matches!(
                    n,
                    "all_reduce"
                        | "all_gather"
                        | "reduce_scatter"
                        | "all_to_all"
                        | "collective_broadcast"
                        | "collective_permute"
                )
            }) && one_participant(attrs)
        }
        Op::Other { name, .. } => matches!(
            name.as_str(),
            "sdy.sharding_constraint"
                | "sdy.reshard"
                | "mhlo.sharding"
                | "builtin.unrealized_conversion_cast"
        ),
        _ => false,
    }
}

/// True when a collective's groups each hold one process (or none are given) and a
/// `collective_permute` sends only from process 0 to itself: on one device the collective is
/// then the identity (StableHLO spec: a one-process `all_gather`/`reduce_scatter`/`all_to_all`
/// gathers, scatters or splits into one piece; `all_reduce` reduces one value). Anything else
/// stays, and the compiler refuses it by name.
fn one_participant(attrs: &[(String, Attr)]) -> bool {
    let dense = |name: &str| {
        attrs.iter().find(|(n, _)| n == name).map(|(_, a)| match a {
            Attr::Dense(l) => Some(l),
            _ => None,
        })
    };
    let groups_ok = match dense("replica_groups") {
        None => true,
        Some(Some(l)) => {
            l.ty.rank() == 2 && l.ty.shape[1] <= 1 && l.to_i64s().iter().all(|&p| p == 0)
        }
        Some(None) => false,
    };
    let pairs_ok = match dense("source_target_pairs") {
        None => true,
        Some(Some(l)) => !l.is_empty() && l.to_i64s().iter().all(|&p| p == 0),
        Some(None) => false,
    };
    groups_ok && pairs_ok
}

/// Ops without results that do nothing on one device.
fn is_noop_other(op: &Operation) -> bool {
    matches!(&op.op, Op::Other { name, .. } if name == "sdy.sharding_group")
        && op.results.is_empty()
}

fn same_type(f: &Function, a: ValueId, b: ValueId) -> bool {
    f.ty(a) == f.ty(b)
}

/// Canonicalizes `f`'s body in place.
pub fn canonicalize(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    canonicalize_region(f, &mut body);
    f.body = Some(body);
}

fn canonicalize_region(f: &Function, region: &mut Region) {
    let mut subst: HashMap<ValueId, ValueId> = HashMap::new();
    // Tuples built in this region: result value -> element values.
    let mut tuples: HashMap<ValueId, Vec<ValueId>> = HashMap::new();
    let ops = std::mem::take(&mut region.ops);
    let mut out = Vec::with_capacity(ops.len());
    for mut op in ops {
        for v in &mut op.operands {
            while let Some(&n) = subst.get(v) {
                *v = n;
            }
        }
        for r in &mut op.regions {
            substitute(r, &subst);
            canonicalize_region(f, r);
        }
        let identity = match &op.op {
            Op::OptimizationBarrier => op.operands.len() == op.results.len(),
            Op::Reshape | Op::Convert | Op::BitcastConvert => {
                op.operands.len() == 1
                    && op.results.len() == 1
                    && same_type(f, op.operands[0], op.results[0])
            }
            Op::Transpose { permutation } => {
                permutation.iter().enumerate().all(|(i, &p)| p == i as i64)
                    && op.operands.len() == 1
                    && op.results.len() == 1
                    && same_type(f, op.operands[0], op.results[0])
            }
            Op::BroadcastInDim { dimensions } => {
                dimensions.iter().enumerate().all(|(i, &p)| p == i as i64)
                    && op.operands.len() == 1
                    && op.results.len() == 1
                    && same_type(f, op.operands[0], op.results[0])
            }
            _ => {
                is_identity_other(&op)
                    && op.operands.len() == op.results.len()
                    && op
                        .operands
                        .iter()
                        .zip(&op.results)
                        .all(|(a, b)| same_type(f, *a, *b))
            }
        };
        if identity {
            for (r, v) in op.results.iter().zip(&op.operands) {
                subst.insert(*r, *v);
            }
            continue;
        }
        if is_noop_other(&op) {
            continue;
        }
        // One device: the replica and partition ids are 0.
        if matches!(op.op, Op::ReplicaId | Op::PartitionId) {
            if let Some(Type::Tensor(t)) = op.results.first().map(|&r| f.ty(r)) {
                op.op = Op::Constant(Literal::splat(t.clone(), Scalar::Int(0)));
            }
        }
        match &op.op {
            Op::Tuple if op.results.len() == 1 => {
                tuples.insert(op.results[0], op.operands.clone());
            }
            Op::GetTupleElement { index } if op.results.len() == 1 => {
                let elem = op
                    .operands
                    .first()
                    .and_then(|t| tuples.get(t))
                    .and_then(|elems| elems.get(usize::try_from(*index).ok()?))
                    .copied();
                if let Some(e) = elem {
                    if matches!(f.ty(e), Type::Tensor(_)) || f.ty(e) == f.ty(op.results[0]) {
                        subst.insert(op.results[0], e);
                        continue;
                    }
                }
            }
            _ => {}
        }
        out.push(op);
    }
    region.ops = out;
    substitute(region, &subst);
}
