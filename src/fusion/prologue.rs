//! Prologue fusion: the loop kernel computing an operand of a `dot_general` or `convolution`
//! runs inside the dot's kernel, at each read of that operand, when the dot is its only reader
//! and its ops are cheap to recompute (converts, broadcasts, reshapes, arithmetic without
//! transcendental functions): the operand then never goes to memory, and one launch replaces
//! two. The typical case is a narrow float operand (`narrow_dots` makes a bf16 matmul read
//! `convert(x)`), then scaling (`q * scale`), masking (`select(m, x, 0)`) and a relu
//! derivative feeding a gradient's dot.
//!
//! A dot kernel reads each operand element many times (once per tile of the other operand),
//! so the producer runs that many times: only cheap ops fuse, reading few buffers. On CPU
//! adapters (llvmpipe, where every load is a loop over the lanes) one buffer: measured with
//! `wgpu-hlo bench`, a bf16 matmul 256x512x256 (both converts fused) took 5.9 ms against
//! 6.9 ms with the converts as kernels of their own, `(g * 0.125)^T @ w` at 512x128x512 5.75
//! against 6.03 ms, but a masked gradient `select(h > 0, g, 0) @ w^T` (two buffers) at
//! 128x512x512 8.1 against 6.9 ms. GPU-class kernels load operand tiles once per workgroup
//! and take producers of up to two buffers (not measured on a GPU).
//!
//! The merged group (kind [`KernelKind::Prologue`]) keeps its `parts`: the producers, then the
//! dot (kind `Dot`, or `Epilogue` with its own epilogue) last. The compile driver lowers them
//! separately when the dot's emitter cannot take the prologue.

use std::collections::HashSet;

use super::{definitions, node_reads, switched_off, Group, KernelKind, Node, NodeInfo, Partition};
use crate::ir::{BinaryOp, ElementType, Function, Op, Region, UnaryOp, ValueId};

/// Ops a dot may recompute at every read of an operand.
fn cheap(op: &Op) -> bool {
    match op {
        Op::Convert
        | Op::BroadcastInDim { .. }
        | Op::Reshape
        | Op::Compare { .. }
        | Op::Select
        | Op::Clamp => true,
        Op::Constant(l) => l.is_splat(),
        Op::Unary(u) => matches!(u, UnaryOp::Negate | UnaryOp::Abs),
        Op::Binary(b) => matches!(
            b,
            BinaryOp::Add
                | BinaryOp::Subtract
                | BinaryOp::Multiply
                | BinaryOp::Divide
                | BinaryOp::Maximum
                | BinaryOp::Minimum
        ),
        _ => false,
    }
}

/// Buffers a producer may read on GPU-class and on CPU adapters: each is read again at
/// every read of the operand.
const MAX_PRODUCER_READS: usize = 2;
const MAX_PRODUCER_READS_CPU: usize = 1;

/// Merges into each dot or convolution kernel the loop kernels computing its operands (see
/// the module comment). `WGPU_HLO_PROLOGUE=0` turns this off.
pub fn fuse(
    f: &Function,
    region: &Region,
    mut p: Partition,
    max_bindings: usize,
    cpu_adapter: bool,
) -> Partition {
    if switched_off("WGPU_HLO_PROLOGUE") {
        return p;
    }
    let max_reads = if cpu_adapter {
        MAX_PRODUCER_READS_CPU
    } else {
        MAX_PRODUCER_READS
    };
    let def = definitions(region);
    let mut a = 0;
    while a < p.nodes.len() {
        let infos: Vec<NodeInfo> = p
            .nodes
            .iter()
            .map(|n| node_reads(region, &def, &p.materialized, n))
            .collect();
        match candidate(f, region, &def, &p, &infos, a, (max_bindings, max_reads)) {
            Some((b, merged, operand)) => {
                p.materialized.remove(&operand);
                p.nodes[a] = merged;
                p.nodes.remove(b);
                // Node `a` moved to `a - 1`: look at it again for its other operand.
                a -= 1;
            }
            None => a += 1,
        }
    }
    p
}

/// The dot group inside node `g` (the group itself, the dot of an epilogue, or the last part
/// of a prologue) and its root's operands, when `g` is a dot or convolution kernel.
fn dot_root<'r>(region: &'r Region, g: &Group) -> Option<&'r [ValueId]> {
    let inner = match g.kind {
        KernelKind::Dot | KernelKind::Epilogue => g,
        KernelKind::Prologue => g.parts.last()?,
        _ => return None,
    };
    if !matches!(inner.kind, KernelKind::Dot | KernelKind::Epilogue) {
        return None;
    }
    let op = region.ops.get(inner.root)?;
    matches!(op.op, Op::DotGeneral { .. } | Op::Convolution(_)).then_some(op.operands.as_slice())
}

/// For dot node `a`: the producer node `b` of one of its operands that may merge into it,
/// the merged node replacing `a`, and the operand.
fn candidate(
    f: &Function,
    region: &Region,
    def: &std::collections::HashMap<ValueId, usize>,
    p: &Partition,
    infos: &[NodeInfo],
    a: usize,
    (max_bindings, max_reads): (usize, usize),
) -> Option<(usize, Node, ValueId)> {
    let Some(Node::Kernel(ga)) = p.nodes.get(a) else {
        return None;
    };
    let operands = dot_root(region, ga)?;
    for &o in operands {
        if !p.materialized.contains(&o)
            || f.values
                .get(o.index())
                .and_then(|t| t.as_tensor())
                .is_none_or(|t| t.dtype != ElementType::F32)
        {
            continue;
        }
        let Some(b) = (0..a).rev().find(|&k| match &p.nodes[k] {
            Node::Kernel(g) => g.outputs.contains(&o),
            _ => false,
        }) else {
            continue;
        };
        let Node::Kernel(gb) = &p.nodes[b] else {
            continue;
        };
        if gb.kind != KernelKind::Loop || gb.outputs != [o] {
            continue;
        }
        // Only the dot reads the operand, and nothing between may update the producer's
        // inputs in place.
        if infos
            .iter()
            .enumerate()
            .any(|(k, info)| k != a && k != b && info.reads.contains(&o))
            || (b + 1..a).any(|k| matches!(p.nodes[k], Node::Op(_)))
        {
            continue;
        }
        if !gb.members.iter().all(|v| {
            def.get(v)
                .and_then(|&i| region.ops.get(i))
                .is_some_and(|op| cheap(&op.op))
        }) {
            continue;
        }
        if infos[b].reads.len() > max_reads {
            continue;
        }
        let reads: HashSet<ValueId> = infos[a]
            .reads
            .iter()
            .chain(&infos[b].reads)
            .filter(|v| **v != o)
            .copied()
            .collect();
        if reads.len() + ga.outputs.len() > max_bindings {
            continue;
        }
        let mut members = ga.members.clone();
        members.extend(gb.members.iter().copied());
        let parts = if ga.kind == KernelKind::Prologue {
            let mut parts = vec![gb.clone()];
            parts.extend(ga.parts.iter().cloned());
            parts
        } else {
            vec![gb.clone(), ga.clone()]
        };
        return Some((
            b,
            Node::Kernel(Group {
                kind: KernelKind::Prologue,
                root: ga.root,
                outputs: ga.outputs.clone(),
                members,
                parts,
                passes: Vec::new(),
            }),
            o,
        ));
    }
    None
}
