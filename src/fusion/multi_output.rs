//! Multi-output fusion of elementwise kernels: a loop kernel whose results a later loop kernel
//! of the same shape reads runs inside that kernel, which then writes both kernels' results
//! that other nodes read. The values reach their other readers through memory, but the
//! consumer computes them in registers instead of reading them back, and one launch replaces
//! two. An optimizer
//! update (Adam's two moments, each returned as state and read by the parameter update) and
//! a layer's pre-activation (kept for the backward pass and read by the activation) are the
//! common cases.

use std::collections::{HashMap, HashSet};

use super::{
    definitions, kernel_evaluations, max_evaluations, movable_to, node_reads, switched_off, Group,
    KernelKind, Node, NodeInfo, Partition,
};
use crate::ir::{Function, Region, ValueId};

/// The elements of `v`. Loop kernels compute every output at the same linear position, so
/// outputs of one element count merge whatever their shapes (a gather's `[n, 1]` and the
/// `[n]` reading it) and element types (a comparison's `i1` and the selects reading it:
/// `jnp.searchsorted`'s step, 5 kernels of 1M elements when shapes and element sizes had to
/// match).
fn shape_of(f: &Function, v: ValueId) -> Option<i64> {
    f.values
        .get(v.index())
        .and_then(|t| t.as_tensor())
        .filter(|t| t.is_static())
        .map(|t| t.shape.iter().product())
}

/// The element count all outputs of `g` share, if they do.
fn common_shape(f: &Function, g: &Group) -> Option<i64> {
    let first = shape_of(f, *g.outputs.first()?)?;
    g.outputs
        .iter()
        .all(|v| shape_of(f, *v).as_ref() == Some(&first))
        .then_some(first)
}

/// Merges producer loop kernels into the loop kernels that read them (see the module comment).
pub fn fuse(f: &Function, region: &Region, mut p: Partition, max_bindings: usize) -> Partition {
    if switched_off("WGPU_HLO_MULTI_OUTPUT") {
        return p;
    }
    let def = definitions(region);
    loop {
        let infos: Vec<NodeInfo> = p
            .nodes
            .iter()
            .map(|n| node_reads(region, &def, &p.materialized, n))
            .collect();
        let Some((a, b)) = find(f, region, &def, &p, &infos, max_bindings) else {
            return p;
        };
        let (Node::Kernel(ga), Node::Kernel(gb)) = (&p.nodes[a], &p.nodes[b]) else {
            return p;
        };
        // The producer's results that no other node reads (nor returns) need no buffer: the
        // consumer computes them inline. Keeping them as outputs wrote every intermediate of
        // a ThreeFry hash (26 of 20M elements for jax.random.bernoulli of 1e7) to memory and
        // read none back: 2.4 GB for that call, out of memory at 1e8.
        let needed = |v: &ValueId| {
            infos
                .iter()
                .enumerate()
                .any(|(k, info)| k != a && k != b && info.reads.contains(v))
        };
        let dropped: Vec<ValueId> = ga.outputs.iter().filter(|v| !needed(v)).copied().collect();
        let mut outputs: Vec<ValueId> = ga
            .outputs
            .iter()
            .filter(|v| !dropped.contains(v))
            .copied()
            .collect();
        outputs.extend(gb.outputs.iter().copied());
        let mut members: HashSet<ValueId> = ga.members.clone();
        members.extend(gb.members.iter().copied());
        let merged = Node::Kernel(Group {
            kind: KernelKind::Loop,
            root: gb.root,
            outputs,
            members,
            parts: Vec::new(),
            passes: Vec::new(),
        });
        p.nodes[b] = merged;
        p.nodes.remove(a);
        for v in &dropped {
            p.materialized.remove(v);
        }
    }
}

/// The first pair (producer `a`, consumer `b`) of loop kernels that may merge: `b` reads a
/// result of `a`, both write tensors of one element count, no node between them reads `a`'s results
/// or is anything but a kernel (ops that update a buffer in place must keep their order with
/// the kernels reading it), and the merged kernel stays within the binding budget.
fn find(
    f: &Function,
    region: &Region,
    def: &HashMap<ValueId, usize>,
    p: &Partition,
    infos: &[NodeInfo],
    max_bindings: usize,
) -> Option<(usize, usize)> {
    for (b, nb) in p.nodes.iter().enumerate() {
        let Node::Kernel(gb) = nb else { continue };
        if gb.kind != KernelKind::Loop {
            continue;
        }
        let Some(shape) = common_shape(f, gb) else {
            continue;
        };
        for a in movable_to(p, infos, b) {
            let Node::Kernel(ga) = &p.nodes[a] else {
                continue;
            };
            let reads_a = ga.outputs.iter().any(|v| infos[b].reads.contains(v));
            if ga
                .outputs
                .iter()
                .any(|v| p.written_for_branches.contains(v))
            {
                continue;
            }
            if ga.kind == KernelKind::Loop
                && reads_a
                && common_shape(f, ga).as_ref() == Some(&shape)
            {
                let produced: HashSet<ValueId> =
                    ga.members.iter().chain(&ga.outputs).copied().collect();
                let reads: HashSet<ValueId> = infos[a]
                    .reads
                    .iter()
                    .chain(&infos[b].reads)
                    .filter(|v| !produced.contains(v))
                    .copied()
                    .collect();
                // The consumer computes the producer's values at every index it reads them:
                // merged kernels that read values through slices, pads or concatenations of
                // earlier ones would grow exponentially with the chain (see
                // `MAX_EVALUATIONS`).
                let members: HashSet<ValueId> = ga
                    .members
                    .iter()
                    .chain(&gb.members)
                    .chain(&ga.outputs)
                    .copied()
                    .collect();
                let outputs: Vec<ValueId> = ga.outputs.iter().chain(&gb.outputs).copied().collect();
                let evaluations = kernel_evaluations(f, region, def, &members, &outputs);
                if reads.len() + ga.outputs.len() + gb.outputs.len() <= max_bindings
                    && evaluations <= max_evaluations()
                {
                    return Some((a, b));
                }
            }
        }
    }
    None
}
