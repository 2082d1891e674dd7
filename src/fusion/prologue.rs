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
//! adapters (llvmpipe, where every load is a loop over the lanes) one buffer: a masked
//! gradient `select(h > 0, g, 0) @ w^T` (two buffers) at 128x512x512 took 8.1 ms fused
//! against 6.9 ms apart. GPU-class kernels load operand tiles once per workgroup and take
//! producers of up to two buffers (not measured on a GPU).
//!
//! On CPU adapters the register-tiled dot reads an lhs element once per few columns and an
//! rhs element once per few rows, so a producer runs in it only when that is rare enough:
//! always in a dot of at most 2^22 multiply-adds (launches dominate), else when the other
//! operand's free extent is small (`fuses_on_cpu`). A narrowing float convert (f32 to bf16 or
//! f16, the rounding `narrow_dots` leaves in a bf16 matmul) is a dozen operations per read
//! and fuses under a stricter limit. Measured on lavapipe, fused against the producers as
//! kernels of their own, in ms:
//!
//! | dot m x k x n | `(a * 0.125) @ b` | `a @ (b * 0.125)` | bf16 `a @ b` |
//! |---|---|---|---|
//! | 128x256x128 | 0.47 / 0.51 | | |
//! | 128x1024x128 | 1.26-1.60 / 1.23-2.07 | | 2.17 / 1.59 |
//! | 64x2048x64 | | | 1.04 / 1.15 |
//! | 256x256x256 | 1.22 / 1.18 | 1.23 / 1.22 | |
//! | 512x128x512 | 2.36 / 2.19 | | |
//! | 64x512x1024 | | 2.16 / 2.38 | |
//! | 128x256x1024 | | 2.38 / 2.17 | |
//! | 1024x512x64 | | 2.63 / 2.12 | |
//! | 1024^3 | 64.0 / 52.0 | | 78 / 55 |
//!
//! A bf16 3x3 convolution (`NHWC` f32 input and weights, both converted) over 8x56x56x64 -> 64
//! took 51-62 ms with the converts fused and 42-43 ms apart; 8x28x28x32 -> 32 8.2 / 4.7
//! against 7.6 / 4.4 ms in two runs each.
//!
//! The merged group (kind [`KernelKind::Prologue`]) keeps its `parts`: the producers, then the
//! dot (kind `Dot`, or `Epilogue` with its own epilogue) last. The compile driver lowers them
//! separately when the dot's emitter cannot take the prologue.

use std::collections::HashSet;

use super::{definitions, node_reads, switched_off, Group, KernelKind, Node, NodeInfo, Partition};
use crate::ir::{BinaryOp, ElementType, Function, Op, Region, TensorType, UnaryOp, ValueId};

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

/// The tensor type of `v`, if it is a tensor.
fn tensor(f: &Function, v: ValueId) -> Option<&TensorType> {
    f.values.get(v.index()).and_then(|t| t.as_tensor())
}

/// A convert from a float type to a narrower one (rounding, not a widening shift).
fn rounds(f: &Function, op: &crate::ir::Operation) -> bool {
    let ty = |v: &ValueId| tensor(f, *v).map(|t| t.dtype);
    match (
        op.operands.first().and_then(ty),
        op.results.first().and_then(ty),
    ) {
        (Some(from), Some(to)) => {
            matches!(op.op, Op::Convert)
                && from.is_float()
                && to.is_float()
                && to.byte_size() < from.byte_size()
        }
        _ => false,
    }
}

/// The extents of a `dot_general` or `convolution`, all saturating: multiply-adds (each
/// result element times the contracted size), and for a `dot_general` the free extents of
/// its two operands (`m`, `n`: rows of the lhs and columns of the rhs, batch apart).
pub(crate) struct DotSize {
    pub(crate) macs: u64,
    free: Option<(u64, u64)>,
}

pub(crate) fn dot_size(f: &Function, op: &crate::ir::Operation) -> Option<DotSize> {
    let shape = |v: &ValueId| tensor(f, *v).map(|t| t.shape.as_slice());
    let elems = |dims: &[i64]| {
        dims.iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
    };
    let at = |s: &[i64], ds: &[i64]| -> Option<Vec<i64>> {
        ds.iter()
            .map(|&d| s.get(usize::try_from(d).ok()?).copied())
            .collect()
    };
    let result = elems(shape(op.results.first()?)?)?;
    let lhs = shape(op.operands.first()?)?;
    let rhs = shape(op.operands.get(1)?)?;
    match &op.op {
        Op::DotGeneral {
            dimension_numbers: d,
            ..
        } => {
            let k = elems(&at(lhs, &d.lhs_contracting_dimensions)?)?.max(1);
            let batch = elems(&at(lhs, &d.lhs_batching_dimensions)?)?.max(1);
            let m = elems(lhs)? / (k * batch);
            let n = elems(rhs)? / (k * batch);
            Some(DotSize {
                macs: result.saturating_mul(k),
                free: Some((m, n)),
            })
        }
        Op::Convolution(c) => {
            let out = usize::try_from(c.dimension_numbers.kernel_output_feature_dimension).ok()?;
            let per_output = elems(rhs)? / u64::try_from(*rhs.get(out)?).ok()?.max(1);
            Some(DotSize {
                macs: result.saturating_mul(per_output),
                free: None,
            })
        }
        _ => None,
    }
}

/// Dots of at most this many multiply-adds take any cheap producer on a CPU adapter: their
/// launches cost more than the recomputation (see the module comment).
const CPU_SMALL_DOT_MACS: u64 = 1 << 22;

/// Whether, on a CPU adapter, the producer of operand `operand` (0: lhs, 1: rhs) of `dot`
/// runs inside it: a small dot always; a larger `dot_general` when the other operand's free
/// extent, which sets how often the kernel reads each element of this one, is small (at most
/// 128 columns for an lhs producer, 64 for a rounding one, 64 rows for any rhs producer); a
/// larger convolution unless the producer rounds, up to `CPU_ROUNDING_MAX_MACS`.
fn fuses_on_cpu(size: &DotSize, operand: usize, rounding: bool) -> bool {
    if size.macs <= CPU_SMALL_DOT_MACS {
        return true;
    }
    match size.free {
        Some((m, n)) => match (operand, rounding) {
            (0, false) => n <= 128,
            (0, true) => n <= 64,
            _ => m <= 64,
        },
        None => !rounding || size.macs <= CPU_ROUNDING_MAX_MACS,
    }
}

/// The largest convolution (in multiply-adds) a rounding producer fuses into on a CPU
/// adapter.
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
    let reads_of = |p: &Partition| -> Vec<NodeInfo> {
        p.nodes
            .iter()
            .map(|n| node_reads(region, &def, &p.materialized, n))
            .collect()
    };
    // Computed again only after a merge (see `epilogue::fuse`).
    let mut infos = reads_of(&p);
    let mut a = 0;
    while a < p.nodes.len() {
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
                infos = reads_of(&p);
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
    for (index, &o) in operands.iter().enumerate() {
        if !p.materialized.contains(&o) || tensor(f, o).is_none_or(|t| t.dtype != ElementType::F32)
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
            let size = dot_part(ga)
                .and_then(|g| region.ops.get(g.root))
                .and_then(|op| dot_size(f, op));
            let rounding = gb.members.iter().any(|v| {
                def.get(v)
                    .and_then(|&i| region.ops.get(i))
                    .is_some_and(|op| rounds(f, op))
            });
            if !size.is_some_and(|size| fuses_on_cpu(&size, index, rounding)) {
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

/// The scatter that computes `g`'s one output inline, where it reads its indices, instead of
/// reading them from a buffer `g` writes: a scatter's index prologue. The case is JAX's
/// `x.at[i]`, which wraps negative indices (`select(i < 0, i + n, i)`) in a kernel of its own
/// before every scatter: a launch and a write and read of the indices, which the scatter's
/// kernels (sorted, bucketed, atomic or privatized) then read once to three times each. The
/// conditions: `g` is a loop kernel of cheap ops ([`cheap`] but division, and the integer
/// bit ops) reading at most one buffer, its integer output is the indices of a scatter of
/// one input that does not run in place and reads nothing else of `g`, that scatter is its
/// only reader, and only kernels, constants and views come between them (`rest`, the nodes after `g`), none
/// of which can change what `g` reads. Returns the scatter's op index in `region`. The
/// compile driver runs `g` as before where the scatter's plan does not take its values.
/// `WGPU_HLO_SCATTER_INDEX_PROLOGUE=0` turns it off.
pub fn scatter_indices(f: &Function, region: &Region, g: &Group, rest: &[Node]) -> Option<usize> {
    if switched_off("WGPU_HLO_SCATTER_INDEX_PROLOGUE") || g.kind != KernelKind::Loop {
        return None;
    }
    let [v] = g.outputs.as_slice() else {
        return None;
    };
    if !tensor(f, *v).is_some_and(|t| t.dtype.is_int()) {
        return None;
    }
    let si = rest.iter().find_map(|n| match n {
        Node::Kernel(_) | Node::Constant(_) | Node::Alias { .. } => None,
        Node::Op(i) => Some(Some(*i)),
        _ => Some(None),
    })??;
    let op = region.ops.get(si)?;
    if !matches!(op.op, Op::Scatter { .. })
        || op.operands.len() != 3
        || op.operands[1] != *v
        || g.members.contains(&op.operands[0])
        || g.members.contains(&op.operands[2])
        || super::in_place::in_place_scatter(f, op)
    {
        return None;
    }
    let mut uses = 0;
    region.walk(&mut |o| uses += o.operands.iter().filter(|&&x| x == *v).count());
    if uses != 1 {
        return None;
    }
    let def = definitions(region);
    let mut leaves: HashSet<ValueId> = HashSet::new();
    for m in &g.members {
        let o = region.ops.get(*def.get(m)?)?;
        let integer_bits = matches!(
            o.op,
            Op::Binary(BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
        );
        if !(cheap(&o.op) || integer_bits) || matches!(o.op, Op::Binary(BinaryOp::Divide)) {
            return None;
        }
        leaves.extend(
            o.operands
                .iter()
                .filter(|x| !g.members.contains(x))
                .copied(),
        );
    }
    (leaves.len() <= 1).then_some(si)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(m: u64, k: u64, n: u64) -> DotSize {
        DotSize {
            macs: m * k * n,
            free: Some((m, n)),
        }
    }

    /// The CPU rule against the measurements in the module comment.
    #[test]
    fn cpu_rule_follows_the_measurements() {
        // (a * 0.125) @ b: an lhs producer.
        assert!(fuses_on_cpu(&dot(128, 256, 128), 0, false));
        assert!(fuses_on_cpu(&dot(128, 1024, 128), 0, false));
        assert!(!fuses_on_cpu(&dot(512, 128, 512), 0, false));
        assert!(!fuses_on_cpu(&dot(1024, 1024, 1024), 0, false));
        // a @ (b * 0.125): an rhs producer.
        assert!(fuses_on_cpu(&dot(64, 512, 1024), 1, false));
        assert!(!fuses_on_cpu(&dot(128, 256, 1024), 1, false));
        assert!(!fuses_on_cpu(&dot(1024, 512, 64), 1, false));
        // bf16 a @ b: rounding producers on both sides.
        assert!(fuses_on_cpu(&dot(64, 2048, 64), 0, true));
        assert!(fuses_on_cpu(&dot(64, 2048, 64), 1, true));
        assert!(!fuses_on_cpu(&dot(128, 1024, 128), 0, true));
        assert!(!fuses_on_cpu(&dot(128, 1024, 128), 1, true));
        // Small dots take any cheap producer.
        assert!(fuses_on_cpu(&dot(70, 96, 130), 0, true));
        // Convolutions: rounding producers up to 2^23 multiply-adds.
        let conv = |macs| DotSize { macs, free: None };
        assert!(fuses_on_cpu(&conv(1 << 30), 0, false));
        assert!(fuses_on_cpu(&conv(1 << 23), 0, true));
        assert!(!fuses_on_cpu(&conv(1 << 24), 0, true));
    }

    /// A scatter of `m` updates into 65536 elements at wrapped indices (JAX's
    /// `x.at[i].add(u)`), with the ops given for the wrap (`%w` from `%arg1` and `%n`),
    /// `extra` lines before the return, and the scatter's `unique_indices`.
    fn scatter_src(m: usize, wrap: &str, extra: &str, unique: bool) -> String {
        format!(
            r#"func.func @main(%arg0: tensor<{m}xf32>, %arg1: tensor<{m}xi32>) -> tensor<65536xf32> {{
  %z = stablehlo.constant dense<0.0> : tensor<65536xf32>
  %c = stablehlo.constant dense<0> : tensor<{m}xi32>
  %n = stablehlo.constant dense<65536> : tensor<{m}xi32>
  %lt = stablehlo.compare LT, %arg1, %c, SIGNED : (tensor<{m}xi32>, tensor<{m}xi32>) -> tensor<{m}xi1>
  {wrap}
  %sel = stablehlo.select %lt, %w, %arg1 : (tensor<{m}xi1>, tensor<{m}xi32>, tensor<{m}xi32>) -> tensor<{m}xi32>
  %idx = stablehlo.reshape %sel : (tensor<{m}xi32>) -> tensor<{m}x1xi32>
  %r = "stablehlo.scatter"(%z, %idx, %arg0) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = {unique}}} : (tensor<65536xf32>, tensor<{m}x1xi32>, tensor<{m}xf32>) -> tensor<65536xf32>
  {extra}
  return %r : tensor<65536xf32>
}}"#
        )
    }

    /// Whether the partition holds a kernel that the scatter would compute inline.
    fn held(src: &str, cpu: bool) -> bool {
        crate::fusion::with_partition(src, cpu, |region, p| {
            p.nodes.iter().enumerate().any(|(k, n)| match n {
                Node::Kernel(g) => scatter_indices(
                    &crate::frontend::text::parse_module(src, "t")
                        .expect("parse")
                        .functions[0],
                    region,
                    g,
                    &p.nodes[k + 1..],
                )
                .is_some(),
                _ => false,
            })
        })
    }

    #[test]
    fn scatter_computes_wrapped_indices_alone_read() {
        let add = "%w = stablehlo.add %arg1, %n : tensor<{m}xi32>";
        for m in [65536, 1000] {
            let add = add.replace("{m}", &m.to_string());
            for cpu in [true, false] {
                assert!(held(&scatter_src(m, &add, "", false), cpu), "{m} cpu {cpu}");
                // A division is no cheap recomputation.
                let div = add.replace("add", "divide");
                assert!(!held(&scatter_src(m, &div, "", false), cpu));
            }
        }
        // A few windows that cannot overlap update in place, which reads the indices itself.
        let add1000 = add.replace("{m}", "1000");
        assert!(!held(&scatter_src(1000, &add1000, "", true), true));
        // Another reader of the indices.
        let add = add.replace("{m}", "65536");
        let other = "%o = stablehlo.reshape %idx : (tensor<65536x1xi32>) -> tensor<65536xi32>\n  %p = stablehlo.convert %o : (tensor<65536xi32>) -> tensor<65536xf32>\n  %q = stablehlo.add %r, %p : tensor<65536xf32>";
        assert!(!held(&scatter_src(65536, &add, other, false), true));
    }
}
