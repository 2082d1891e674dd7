//! Small utilities passes share: value substitution and copying a region between functions.

use std::collections::HashMap;

use crate::ir::{Function, Operation, Region, ValueId};

/// Replaces every use of a key of `subst` by its value, in `region` and all nested regions.
/// Chains (a → b, b → c) are followed.
pub fn substitute(region: &mut Region, subst: &HashMap<ValueId, ValueId>) {
    if subst.is_empty() {
        return;
    }
    let resolve = |mut v: ValueId| {
        let mut hops = 0;
        while let Some(&n) = subst.get(&v) {
            v = n;
            hops += 1;
            if hops > subst.len() {
                break;
            }
        }
        v
    };
    for op in &mut region.ops {
        for v in &mut op.operands {
            *v = resolve(*v);
        }
        for r in &mut op.regions {
            substitute(r, subst);
        }
    }
}

/// Copies ops of `from` (a region of function `src`) into function `dst`, giving every value
/// the copy defines a fresh id in `dst`. `map` must already map the values the ops read from
/// outside the copied ops (e.g. block arguments to call operands); it is extended with every
/// value defined by the copied ops.
pub fn copy_ops(
    src: &Function,
    ops: &[Operation],
    dst: &mut Function,
    map: &mut HashMap<ValueId, ValueId>,
) -> Vec<Operation> {
    ops.iter().map(|op| copy_op(src, op, dst, map)).collect()
}

fn fresh(
    src: &Function,
    v: ValueId,
    dst: &mut Function,
    map: &mut HashMap<ValueId, ValueId>,
) -> ValueId {
    let ty = src
        .values
        .get(v.index())
        .cloned()
        .unwrap_or(crate::ir::Type::Token);
    let n = dst.new_value(ty);
    map.insert(v, n);
    n
}

fn copy_op(
    src: &Function,
    op: &Operation,
    dst: &mut Function,
    map: &mut HashMap<ValueId, ValueId>,
) -> Operation {
    let operands = op
        .operands
        .iter()
        .map(|v| map.get(v).copied().unwrap_or(*v))
        .collect();
    let regions = op
        .regions
        .iter()
        .map(|r| {
            let args = r.args.iter().map(|&a| fresh(src, a, dst, map)).collect();
            Region {
                args,
                ops: copy_ops(src, &r.ops, dst, map),
            }
        })
        .collect();
    let results = op
        .results
        .iter()
        .map(|&r| fresh(src, r, dst, map))
        .collect();
    Operation {
        op: op.op.clone(),
        operands,
        results,
        regions,
        loc: op.loc.clone(),
    }
}
