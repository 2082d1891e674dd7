//! Outputs nothing reads: a scalar a kernel writes that every step reading it computes inline
//! after all (`recomputed_indices`: a reversed scan's step number `T - 1 - i`, which the
//! kernels reading the step's residuals and the merged update step stacking its gradients
//! compute from the loop counter) is dropped from its kernel, and a kernel left writing nothing
//! is dropped. Before, a flax GRUCell's backward step launched a kernel each step whose only
//! other output was the loop counter's increment, and the index's buffer was freed unread.
//! Only scalars are dropped: they are the values computed again by their readers (the model
//! does not duplicate tensors that are written), and a tensor's reads are left to the passes
//! that own them. `WGPU_HLO_PRUNE_UNREAD=0` turns it off.

use std::collections::{HashMap, HashSet};

use super::{definitions, node_reads, switched_off, Group, KernelKind, Node, Partition};
use crate::ir::{Function, Op, Region, ValueId};

/// Drops unread scalar outputs from `p`'s kernels (see the module comment).
pub fn prune(f: &Function, region: &Region, mut p: Partition) -> Partition {
    if switched_off("WGPU_HLO_PRUNE_UNREAD") {
        return p;
    }
    let def = definitions(region);
    let read: HashSet<ValueId> = p
        .nodes
        .iter()
        .flat_map(|n| node_reads(region, &def, &p.materialized, n).reads)
        .collect();
    let unread = |v: &ValueId| !read.contains(v) && scalar(f, *v);
    let mut nodes = Vec::with_capacity(p.nodes.len());
    for node in p.nodes {
        match node {
            Node::Kernel(g) if g.kind == KernelKind::Loop && g.outputs.iter().any(unread) => {
                nodes.extend(without(&def, g, &unread).map(Node::Kernel));
            }
            Node::Kernel(g)
                if g.kind == KernelKind::Horizontal
                    && g.parts.iter().all(|q| q.kind == KernelKind::Loop)
                    && g.outputs.iter().any(unread) =>
            {
                let mut parts: Vec<Group> = g
                    .parts
                    .into_iter()
                    .filter_map(|q| without(&def, q, &unread))
                    .collect();
                match parts.len() {
                    0 => {}
                    1 => nodes.extend(parts.pop().map(Node::Kernel)),
                    _ => {
                        let outputs = parts.iter().flat_map(|q| q.outputs.clone()).collect();
                        let members = parts.iter().flat_map(|q| q.members.clone()).collect();
                        nodes.push(Node::Kernel(Group {
                            kind: KernelKind::Horizontal,
                            root: parts.last().map_or(g.root, |q| q.root),
                            outputs,
                            members,
                            parts,
                            passes: Vec::new(),
                        }));
                    }
                }
            }
            other => nodes.push(other),
        }
    }
    p.nodes = nodes;
    sink(f, region, &def, &mut p);
    p
}

/// Whether `v` is a scalar (a 0-d tensor).
fn scalar(f: &Function, v: ValueId) -> bool {
    f.values
        .get(v.index())
        .and_then(|t| t.as_tensor())
        .is_some_and(|t| t.dims().is_empty())
}

/// Moves each loop kernel of scalar outputs that only the region's terminator reads (a scan
/// step's counter `i + 1`) to just after the last update step following it, across kernels,
/// constants, views and update steps that update none of its inputs: launch merging lets a
/// launch after an update step join its kernel (`compile::merge`), not one before it. A
/// reversed scan's step then runs its counter in the update step's dispatch, as a forward
/// scan's does in its dots'.
fn sink(f: &Function, region: &Region, def: &HashMap<ValueId, usize>, p: &mut Partition) {
    let terminator = |n: &Node| matches!(n, Node::Op(i) if region.ops.get(*i).is_some_and(|op| matches!(op.op, Op::Return)));
    let mut moved: HashSet<ValueId> = HashSet::new();
    'again: loop {
        let reads: Vec<HashSet<ValueId>> = p
            .nodes
            .iter()
            .map(|n| node_reads(region, def, &p.materialized, n).reads)
            .collect();
        for (k, node) in p.nodes.iter().enumerate() {
            let Node::Kernel(g) = node else { continue };
            if g.kind != KernelKind::Loop
                || g.outputs.is_empty()
                || !g.outputs.iter().all(|&v| scalar(f, v))
                || g.outputs.iter().any(|v| moved.contains(v))
            {
                continue;
            }
            let read_before_end = p
                .nodes
                .iter()
                .zip(&reads)
                .any(|(n, r)| !terminator(n) && g.outputs.iter().any(|v| r.contains(v)));
            if read_before_end {
                continue;
            }
            let mut to = None;
            for (j, n) in p.nodes.iter().enumerate().skip(k + 1) {
                match n {
                    Node::Kernel(_) | Node::Constant(_) | Node::Alias { .. } => {}
                    Node::Updates { ops, .. } => {
                        let updated = ops
                            .iter()
                            .filter_map(|&i| region.ops.get(i)?.operands.first());
                        if updated.clone().any(|t| reads[k].contains(t)) {
                            break;
                        }
                        to = Some(j);
                    }
                    Node::Op(_) => break,
                }
            }
            if let Some(j) = to {
                moved.extend(g.outputs.iter().copied());
                let node = p.nodes.remove(k);
                p.nodes.insert(j, node);
                continue 'again;
            }
        }
        return;
    }
}

/// Loop kernel `g` without its `unread` outputs (its root the op of its new first output), or
/// `None` when it writes nothing else. The dropped values stay materialized: a reader this pass
/// missed then fails to compile ("no buffer") instead of reading something else.
fn without(
    def: &HashMap<ValueId, usize>,
    mut g: Group,
    unread: &impl Fn(&ValueId) -> bool,
) -> Option<Group> {
    g.outputs.retain(|v| !unread(v));
    if let Some(&i) = def.get(g.outputs.first()?) {
        g.root = i;
    }
    Some(g)
}
