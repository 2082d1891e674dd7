//! Horizontal fusion: small independent loop kernels become one launch. Each merged kernel is
//! a segment of the launch's invocations (a part's threads after the parts before it) and
//! computes its outputs as it would alone, so shapes need not agree. The gain is the launches
//! saved: a launch costs about 50-70 µs on llvmpipe whatever its size and several µs on a GPU,
//! while a kernel of a few thousand elements computes in less. An optimizer update over many
//! parameters, or a step's scalar bookkeeping, is the common case. `WGPU_HLO_HORIZONTAL=0`
//! turns it off.

use std::collections::HashSet;

use super::{
    definitions, movable_to, node_reads, switched_off, Group, KernelKind, Node, NodeInfo, Partition,
};
use crate::ir::{Function, Region, ValueId};

/// Elements a part may write on a GPU for its launch to count as small: a launch's fixed cost
/// (several µs) is then a good share of its time, and the branch choosing a part is uniform
/// in a workgroup, so it costs nothing.
pub const SMALL: u64 = 1 << 16;

/// [`SMALL`] on CPU adapters: one workgroup of the loop emitter. llvmpipe runs the code of
/// the parts a workgroup skips at some cost too: 20 kernels `a * a + c` merged took half the
/// time of 20 launches at 64 and 256 elements each, as long at 1024, and 1.3x as long at 2048.
pub const SMALL_CPU: u64 = 256;

/// Most parts one merged kernel takes (its WGSL grows with each).
pub const MAX_PARTS: usize = 16;

/// The parts a node stands for: itself for a small loop kernel of 32-bit (or wider) outputs of
/// one size, its parts for a merged one; `None` for anything else.
fn parts(f: &Function, node: &Node, small: u64) -> Option<Vec<Group>> {
    let Node::Kernel(g) = node else { return None };
    match g.kind {
        KernelKind::Horizontal => Some(g.parts.clone()),
        KernelKind::Loop => {
            let mut size = None;
            for v in &g.outputs {
                let t = f.values.get(v.index())?.as_tensor()?;
                if !t.is_static() || t.dtype.bit_width() < 32 {
                    return None;
                }
                let n = t.num_elements() as u64;
                if *size.get_or_insert(n) != n {
                    return None;
                }
            }
            size.filter(|&n| n > 0 && n <= small)
                .map(|_| vec![g.clone()])
        }
        _ => None,
    }
}

/// Merges small independent loop kernels (see the module comment).
pub fn fuse(
    f: &Function,
    region: &Region,
    mut p: Partition,
    max_bindings: usize,
    cpu_adapter: bool,
) -> Partition {
    if switched_off("WGPU_HLO_HORIZONTAL") {
        return p;
    }
    let small = if cpu_adapter { SMALL_CPU } else { SMALL };
    let def = definitions(region);
    // What each node reads depends on the node and the materialized values, which a merge
    // does not change: only the merged node's is computed again (all of them were, after
    // every merge).
    let mut infos: Vec<NodeInfo> = p
        .nodes
        .iter()
        .map(|n| node_reads(region, &def, &p.materialized, n))
        .collect();
    // Kernels computing a scatter's indices alone stay apart: the scatter computes them
    // (`prologue::scatter_indices`).
    let held: HashSet<ValueId> = p
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(k, n)| match n {
            Node::Kernel(g) => super::prologue::scatter_indices(f, region, g, &p.nodes[k + 1..])
                .map(|_| g.outputs.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    loop {
        let Some((a, b, mut merged)) = find(f, &p, &infos, (max_bindings, small), &held) else {
            return p;
        };
        let Some(pb) = parts(f, &p.nodes[b], small) else {
            return p;
        };
        merged.extend(pb);
        let root = merged.last().map_or(0, |g| g.root);
        let mut outputs = Vec::new();
        let mut members = HashSet::new();
        for g in &merged {
            outputs.extend(g.outputs.iter().copied());
            members.extend(g.members.iter().copied());
        }
        p.nodes[b] = Node::Kernel(Group {
            kind: KernelKind::Horizontal,
            root,
            outputs,
            members,
            parts: merged,
            passes: Vec::new(),
        });
        infos[b] = node_reads(region, &def, &p.materialized, &p.nodes[b]);
        p.nodes.remove(a);
        infos.remove(a);
    }
}

/// The first pair (`a` before `b`) of small loop kernels that may run as one launch, with
/// `a`'s parts: neither reads the other's results, no node between them reads `a`'s results
/// or is anything but a kernel (`a` moves to `b`; ops that update buffers in place keep their
/// order), and the merged kernel stays within the part and binding budgets.
fn find(
    f: &Function,
    p: &Partition,
    infos: &[NodeInfo],
    (max_bindings, small): (usize, u64),
    held: &HashSet<ValueId>,
) -> Option<(usize, usize, Vec<Group>)> {
    let is_held = |g: &Group| g.outputs.iter().any(|v| held.contains(v));
    for (b, nb) in p.nodes.iter().enumerate() {
        let Some(pb) = parts(f, nb, small) else {
            continue;
        };
        let Node::Kernel(gb) = nb else { continue };
        if is_held(gb) {
            continue;
        }
        for a in movable_to(p, infos, b) {
            let Node::Kernel(ga) = &p.nodes[a] else {
                continue;
            };
            if is_held(ga) || ga.outputs.iter().any(|v| infos[b].reads.contains(v)) {
                continue;
            }
            let Some(pa) = parts(f, &p.nodes[a], small) else {
                continue;
            };
            if pa.len() + pb.len() > MAX_PARTS {
                continue;
            }
            let reads: HashSet<ValueId> = infos[a].reads.union(&infos[b].reads).copied().collect();
            if reads.len() + ga.outputs.len() + gb.outputs.len() <= max_bindings {
                return Some((a, b, pa));
            }
        }
    }
    None
}
