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
//! A narrowing float convert (f32 to bf16 or f16, the rounding `narrow_dots` leaves in a
//! bf16 matmul) is a dozen operations per read: on CPU adapters, whose register-tiled dot
//! reads each operand element once per 8 multiply-adds, it fuses only into a dot of at most
//! `CPU_ROUNDING_MAX_MACS` multiply-adds. Measured on lavapipe (bf16 matmul, both converts
//! fused against as kernels of their own): 64x2048x64 1.07 against 1.15 ms, but 128x1024x128
//! 2.17 against 1.59, 256x512x256 3.97 against 3.54 and 1024^3 78 against 55 ms.
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

/// A convert from a float type to a narrower one (rounding, not a widening shift).
fn rounds(f: &Function, op: &crate::ir::Operation) -> bool {
    let ty = |v: &ValueId| {
        f.values
            .get(v.index())
            .and_then(|t| t.as_tensor())
            .map(|t| t.dtype)
    };
    if !matches!(op.op, Op::Convert) {
        return false;
    }
    match (
        op.operands.first().and_then(ty),
        op.results.first().and_then(ty),
    ) {
        (Some(from), Some(to)) => {
            from.is_float() && to.is_float() && to.byte_size() < from.byte_size()
        }
        _ => false,
    }
}

/// Multiply-adds of a `dot_general` or `convolution` (each result element times the
/// contracted size), saturating; `None` for other ops or unknown shapes.
fn macs(f: &Function, op: &crate::ir::Operation) -> Option<u64> {
    let shape = |v: &ValueId| {
        f.values
            .get(v.index())
            .and_then(|t| t.as_tensor())
            .map(|t| t.shape.clone())
    };
    let result = shape(op.results.first()?)?;
    let rhs = shape(op.operands.get(1)?)?;
    let elems = |dims: &[i64]| {
        dims.iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
    };
    let contracted = match &op.op {
        Op::DotGeneral {
            dimension_numbers, ..
        } => {
            let lhs = shape(op.operands.first()?)?;
            let dims: Vec<i64> = dimension_numbers
                .lhs_contracting_dimensions
                .iter()
                .map(|&d| lhs.get(usize::try_from(d).ok()?).copied())
                .collect::<Option<_>>()?;
            elems(&dims)?
        }
        Op::Convolution(c) => {
            let out = usize::try_from(c.dimension_numbers.kernel_output_feature_dimension).ok()?;
            elems(&rhs)? / u64::try_from(*rhs.get(out)?).ok()?.max(1)
        }
        _ => return None,
    };
    Some(elems(&result)?.saturating_mul(contracted))
}

/// The largest dot (in multiply-adds) a rounding convert fuses into on a CPU adapter (see
/// the module comment).
const CPU_ROUNDING_MAX_MACS: u64 = 1 << 23;

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
        match candidate(
            f,
            region,
            &def,
            &p,
            &infos,
            a,
            (max_bindings, max_reads, cpu_adapter),
        ) {
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

/// The dot group inside node `g`: the group itself, the dot of an epilogue, or the last part
/// of a prologue.
fn dot_part(g: &Group) -> Option<&Group> {
    let inner = match g.kind {
        KernelKind::Dot | KernelKind::Epilogue => g,
        KernelKind::Prologue => g.parts.last()?,
        _ => return None,
    };
    matches!(inner.kind, KernelKind::Dot | KernelKind::Epilogue).then_some(inner)
}

/// The operands of the dot inside node `g` (`dot_part`), when it is a dot or convolution.
fn dot_root<'r>(region: &'r Region, g: &Group) -> Option<&'r [ValueId]> {
    let op = region.ops.get(dot_part(g)?.root)?;
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
    (max_bindings, max_reads, cpu_adapter): (usize, usize, bool),
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
        if cpu_adapter {
            let dot = dot_part(ga).and_then(|g| region.ops.get(g.root));
            let big = dot
                .and_then(|op| macs(f, op))
                .is_none_or(|m| m > CPU_ROUNDING_MAX_MACS);
            let rounding = gb.members.iter().any(|v| {
                def.get(v)
                    .and_then(|&i| region.ops.get(i))
                    .is_some_and(|op| rounds(f, op))
            });
            if big && rounding {
                continue;
            }
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
