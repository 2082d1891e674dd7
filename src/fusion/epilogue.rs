//! Epilogue fusion: the elementwise kernel that first reads a `dot_general` or `convolution`
//! result (a layer's bias, activation, residual, scaling) runs inside the dot's kernel, at the
//! point where each output element leaves its accumulator. The dot result then goes to memory
//! only when something else still reads it, and one launch replaces two.
//!
//! The merged group (kind [`KernelKind::Epilogue`]) keeps both kernels as its `parts`: the
//! compile driver lowers them separately when the dot's emitter cannot take an epilogue (a
//! split-K plan, a kernel over the binding budget).

use std::collections::HashSet;

use super::{definitions, node_reads, switched_off, Group, KernelKind, Node, NodeInfo, Partition};
use crate::ir::{ElementType, Function, Op, Operation, Region, ValueId};

fn tensor(f: &Function, v: ValueId) -> Option<(&[i64], ElementType)> {
    f.values
        .get(v.index())
        .and_then(|t| t.as_tensor())
        .map(|t| (t.shape.as_slice(), t.dtype))
}

/// Whether `op` computes each element of its result from the same element of each operand
/// (or a 0-d operand), so that a value it reads can be handed to it per output element.
fn pointwise(f: &Function, op: &Operation) -> bool {
    let [r] = op.results.as_slice() else {
        return false;
    };
    let Some((res, _)) = tensor(f, *r) else {
        return false;
    };
    super::elementwise(op)
        && op
            .operands
            .iter()
            .all(|v| tensor(f, *v).is_some_and(|(s, _)| s == res || s.is_empty()))
}

/// Whether loop kernel `g` may run as the epilogue of the dot or convolution whose result is
/// `d`: its outputs are f32 tensors of `d`'s shape and every op of it on a path from `d` is
/// pointwise. It may read the dot's operands (`where(i < s, r @ r, r)`, expm's squaring
/// step): the epilogue binds them again, row-major (until 2026-12-05 it was refused, and
/// each of expm's 16 squarings was a launch more).
fn takes(f: &Function, region: &Region, d: ValueId, g: &Group) -> bool {
    let Some((shape, _)) = tensor(f, d) else {
        return false;
    };
    if g.kind != KernelKind::Loop
        || g.outputs.is_empty()
        || !g
            .outputs
            .iter()
            .all(|v| tensor(f, *v).is_some_and(|(s, t)| s == shape && t == ElementType::F32))
    {
        return false;
    }
    let mut from_d: HashSet<ValueId> = HashSet::from([d]);
    for op in &region.ops {
        if !op.results.iter().any(|r| g.members.contains(r)) {
            continue;
        }
        if op.operands.iter().any(|o| from_d.contains(o)) {
            if !pointwise(f, op) {
                return false;
            }
            from_d.extend(op.results.iter().copied());
        }
    }
    true
}

/// Merges each dot or convolution kernel with the loop kernel that first reads its result
/// (see the module comment). `WGPU_HLO_EPILOGUE=0` turns this off.
pub fn fuse(f: &Function, region: &Region, mut p: Partition, max_bindings: usize) -> Partition {
    if switched_off("WGPU_HLO_EPILOGUE") {
        return p;
    }
    let def = definitions(region);
    let reads_of = |p: &Partition| -> Vec<NodeInfo> {
        p.nodes
            .iter()
            .map(|n| node_reads(region, &def, &p.materialized, n))
            .collect()
    };
    // What each node reads, computed again only after a merge changed the partition (it was
    // computed for every node at every step: quadratic in the nodes, a tenth of the compile
    // time of a transformer step's 133 kernels together with the other fusions).
    let mut infos = reads_of(&p);
    let mut a = 0;
    while a < p.nodes.len() {
        if let Some((b, merged)) = candidate(f, region, &p, &infos, a, max_bindings) {
            let Node::Kernel(ref m) = merged else {
                a += 1;
                continue;
            };
            // The dot result needs no buffer when the epilogue was its only reader.
            if let Some(Node::Kernel(gd)) = p.nodes.get(a) {
                for v in &gd.outputs {
                    if !m.outputs.contains(v) {
                        p.materialized.remove(v);
                    }
                }
            }
            p.nodes[b] = merged;
            p.nodes.remove(a);
            infos = reads_of(&p);
            continue;
        }
        a += 1;
    }
    p
}

/// The merged node replacing node `b` when dot node `a` and the loop kernel `b` that first
/// reads its result may merge: nothing between them reads the result or runs as an op of its
/// own (ops updating a buffer in place keep their order with the kernels reading it), and the
/// merged kernel stays within the binding budget.
fn candidate(
    f: &Function,
    region: &Region,
    p: &Partition,
    infos: &[NodeInfo],
    a: usize,
    max_bindings: usize,
) -> Option<(usize, Node)> {
    let Some(Node::Kernel(gd)) = p.nodes.get(a) else {
        return None;
    };
    if gd.kind != KernelKind::Dot {
        return None;
    }
    let dot = region.ops.get(gd.root)?;
    if !matches!(dot.op, Op::DotGeneral { .. } | Op::Convolution(_)) {
        return None;
    }
    let ([d], [d_out]) = (dot.results.as_slice(), gd.outputs.as_slice()) else {
        return None;
    };
    if d != d_out || tensor(f, *d)?.1 != ElementType::F32 {
        return None;
    }
    let b = (a + 1..p.nodes.len()).find(|&k| infos[k].reads.contains(d))?;
    if (a + 1..b).any(|k| matches!(p.nodes[k], Node::Op(_))) {
        return None;
    }
    let Node::Kernel(ge) = &p.nodes[b] else {
        return None;
    };
    if !takes(f, region, *d, ge) {
        return None;
    }
    let read_later = infos
        .iter()
        .enumerate()
        .any(|(k, info)| k != a && k != b && info.reads.contains(d));
    let mut outputs = ge.outputs.clone();
    if read_later && !outputs.contains(d) {
        outputs.push(*d);
    }
    let reads: HashSet<ValueId> = infos[a]
        .reads
        .iter()
        .chain(&infos[b].reads)
        .filter(|v| *v != d)
        .copied()
        .collect();
    // Values both read bind twice (the dot's binding and the epilogue's own).
    let again = infos[b]
        .reads
        .iter()
        .filter(|v| *v != d && infos[a].reads.contains(v))
        .count();
    if reads.len() + again + outputs.len() > max_bindings {
        return None;
    }
    let mut members = gd.members.clone();
    members.extend(ge.members.iter().copied());
    Some((
        b,
        Node::Kernel(Group {
            kind: KernelKind::Epilogue,
            root: gd.root,
            outputs,
            members,
            parts: vec![gd.clone(), ge.clone()],
            passes: Vec::new(),
        }),
    ))
}
