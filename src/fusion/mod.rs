//! Fusion: partitions a region's ops into kernels. Elementwise and data-movement ops fuse into
//! the kernels that consume them (loop fusion); a `reduce` computes its elementwise producers
//! inside its own kernel (input fusion); `dot_general` is a kernel of its own. What is left
//! (control flow, constants with data, views of buffers) becomes steps of their own. The
//! partition is data: it prints, and the dump shows it.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::ir::{Function, Op, Operation, Region, ValueId};

/// What kind of kernel a group becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// One thread per output element (several elements for packed narrow types).
    Loop,
    /// A `reduce` with its fused producers.
    Reduce,
    /// A `dot_general` with its fused operand producers.
    Dot,
}

/// A kernel: the op it is built around, its outputs, and every value it computes inline.
#[derive(Clone, Debug)]
pub struct Group {
    /// Kind of kernel.
    pub kind: KernelKind,
    /// Index (in the region) of the root op: the reduce or dot, or the op defining the first
    /// output of a loop kernel.
    pub root: usize,
    /// Values the kernel writes to buffers.
    pub outputs: Vec<ValueId>,
    /// Values the kernel computes (outputs and fused producers).
    pub members: HashSet<ValueId>,
}

/// One step of a partitioned region, in program order.
#[derive(Clone, Debug)]
pub enum Node {
    /// A kernel launch.
    Kernel(Group),
    /// A constant with data: uploaded once at compile time.
    Constant(usize),
    /// A value that is a view of another buffer's bytes (reshape, same-width bitcast).
    Alias {
        /// The op's index.
        op: usize,
        /// The view.
        value: ValueId,
        /// The buffer's value.
        source: ValueId,
    },
    /// Any other op, run as its own step (control flow, tuples, unsupported ops).
    Op(usize),
}

/// The partition of one region.
#[derive(Clone, Debug, Default)]
pub struct Partition {
    /// Steps in program order.
    pub nodes: Vec<Node>,
    /// Values held in buffers (everything not computed inline).
    pub materialized: HashSet<ValueId>,
}

/// True for ops a loop kernel can compute inline at any index.
pub fn is_fusible(op: &Operation) -> bool {
    match &op.op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare { .. }
        | Op::Select
        | Op::Clamp
        | Op::Convert
        | Op::Iota { .. }
        | Op::BroadcastInDim { .. }
        | Op::Reshape
        | Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::Reverse { .. }
        | Op::Pad { .. }
        | Op::Concatenate { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Gather { .. }
        | Op::ReducePrecision { .. } => true,
        Op::BitcastConvert => true,
        Op::Constant(l) => l.is_splat(),
        _ => false,
    }
}

/// Ops that are cheap to recompute in several consumers instead of materializing.
fn is_cheap(op: &Operation) -> bool {
    matches!(
        op.op,
        Op::Constant(_)
            | Op::Iota { .. }
            | Op::BroadcastInDim { .. }
            | Op::Reshape
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Reverse { .. }
            | Op::Convert
    )
}

fn same_width_bitcast(f: &Function, op: &Operation) -> bool {
    op.op == Op::BitcastConvert
        && op.operands.len() == 1
        && op.results.len() == 1
        && match (
            f.ty(op.operands[0]).as_tensor(),
            f.ty(op.results[0]).as_tensor(),
        ) {
            (Some(a), Some(b)) => a.dtype.bit_width() == b.dtype.bit_width(),
            _ => false,
        }
}

fn collect_captures(r: &Region, out: &mut HashSet<ValueId>) {
    let mut defined: HashSet<ValueId> = r.args.iter().copied().collect();
    fn walk(r: &Region, defined: &mut HashSet<ValueId>, out: &mut HashSet<ValueId>) {
        for op in &r.ops {
            for o in &op.operands {
                if !defined.contains(o) {
                    out.insert(*o);
                }
            }
            for sub in &op.regions {
                defined.extend(sub.args.iter().copied());
                walk(sub, defined, out);
            }
            defined.extend(op.results.iter().copied());
        }
    }
    walk(r, &mut defined, out);
}

/// Partitions `region` (of function `f`) into kernels and steps.
pub fn partition(f: &Function, region: &Region) -> Partition {
    let ops = &region.ops;
    // dynamic_update_slice into a large buffer runs in place as its own step, not fused (a
    // fused one rewrites the whole buffer).
    let fusible =
        |op: &Operation| is_fusible(op) && !crate::codegen::op_kernels::update::in_place(f, op);
    let mut def: HashMap<ValueId, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for r in &op.results {
            def.insert(*r, i);
        }
    }
    // Uses of each value by ops of this region, and values that must live in buffers.
    let mut uses: HashMap<ValueId, Vec<usize>> = HashMap::new();
    let mut must: HashSet<ValueId> = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        let mut captured = HashSet::new();
        for r in &op.regions {
            collect_captures(r, &mut captured);
        }
        must.extend(captured);
        for o in &op.operands {
            uses.entry(*o).or_default().push(i);
        }
        let consumes_buffers = match &op.op {
            Op::Return | Op::DotGeneral { .. } | Op::Convolution(_) => true,
            Op::Reduce { .. } => false,
            _ => !fusible(op),
        };
        if consumes_buffers {
            must.extend(op.operands.iter().copied());
        }
    }
    let mut materialized: HashSet<ValueId> = HashSet::new();
    // Region arguments and values of non-fusible ops always live in buffers.
    materialized.extend(region.args.iter().copied());
    for op in ops {
        if !fusible(op) {
            materialized.extend(op.results.iter().copied());
        }
    }
    // Values defined outside the region (captured) too.
    for v in uses.keys() {
        if !def.contains_key(v) {
            materialized.insert(*v);
        }
    }
    // Walk backwards so every consumer of a value is decided before the value. `times[v]` is
    // how many kernels would compute `v` if it were fused: consumers that are themselves
    // recomputed several times count that many times.
    let mut times: HashMap<ValueId, usize> = HashMap::new();
    for op in ops.iter().rev() {
        let mut recomputed = 1;
        if fusible(op) {
            for r in &op.results {
                let n = times.get(r).copied().unwrap_or(0);
                if must.contains(r) || (n > 1 && !is_cheap(op)) {
                    materialized.insert(*r);
                } else {
                    recomputed = recomputed.max(n);
                }
            }
            if op.results.iter().all(|r| materialized.contains(r)) {
                recomputed = 1;
            }
        }
        for o in &op.operands {
            *times.entry(*o).or_default() += recomputed;
        }
    }
    // Build nodes in program order.
    let mut nodes = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let is_view = matches!(op.op, Op::Reshape) || same_width_bitcast(f, op);
        match &op.op {
            Op::Reduce { .. } | Op::DotGeneral { .. } | Op::Convolution(_) => {
                let kind = if matches!(op.op, Op::Reduce { .. }) {
                    KernelKind::Reduce
                } else {
                    KernelKind::Dot
                };
                let mut members = HashSet::new();
                for o in &op.operands {
                    add_members(*o, ops, &def, &materialized, &mut members);
                }
                nodes.push(Node::Kernel(Group {
                    kind,
                    root: i,
                    outputs: op.results.clone(),
                    members,
                }));
            }
            Op::Constant(l) if !l.is_splat() => nodes.push(Node::Constant(i)),
            _ if is_view
                && op.results.len() == 1
                && materialized.contains(&op.results[0])
                && op.operands.len() == 1
                && materialized.contains(&op.operands[0]) =>
            {
                nodes.push(Node::Alias {
                    op: i,
                    value: op.results[0],
                    source: op.operands[0],
                });
            }
            _ if fusible(op) => {
                let outs: Vec<ValueId> = op
                    .results
                    .iter()
                    .copied()
                    .filter(|r| materialized.contains(r))
                    .collect();
                if outs.is_empty() {
                    continue;
                }
                let mut members = HashSet::new();
                for r in &outs {
                    members.insert(*r);
                }
                for o in &op.operands {
                    add_members(*o, ops, &def, &materialized, &mut members);
                }
                nodes.push(Node::Kernel(Group {
                    kind: KernelKind::Loop,
                    root: i,
                    outputs: outs,
                    members,
                }));
            }
            _ => nodes.push(Node::Op(i)),
        }
    }
    Partition {
        nodes,
        materialized,
    }
}

fn add_members(
    v: ValueId,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    materialized: &HashSet<ValueId>,
    members: &mut HashSet<ValueId>,
) {
    if materialized.contains(&v) || members.contains(&v) {
        return;
    }
    let Some(&i) = def.get(&v) else {
        return;
    };
    if !is_fusible(&ops[i]) {
        return;
    }
    members.insert(v);
    for o in &ops[i].operands {
        add_members(*o, ops, def, materialized, members);
    }
}

impl Partition {
    /// A printable description, naming ops by `names`.
    pub fn describe(&self, region: &Region) -> String {
        let mut s = String::new();
        for (k, n) in self.nodes.iter().enumerate() {
            match n {
                Node::Kernel(g) => {
                    let mut fused: Vec<String> = region
                        .ops
                        .iter()
                        .filter(|op| op.results.iter().any(|r| g.members.contains(r)))
                        .map(|op| format!("{}{}", op.name(), first_result(op)))
                        .collect();
                    if g.kind != KernelKind::Loop {
                        if let Some(op) = region.ops.get(g.root) {
                            fused.push(format!("{}{}", op.name(), first_result(op)));
                        }
                    }
                    s.push_str(&format!(
                        "node {k}: {:?} kernel -> [{}] fuses {}\n",
                        g.kind,
                        g.outputs
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        fused.join(", ")
                    ));
                }
                Node::Constant(i) => s.push_str(&format!("node {k}: constant (op {i})\n")),
                Node::Alias { value, source, .. } => {
                    s.push_str(&format!("node {k}: view {value} of {source}\n"))
                }
                Node::Op(i) => {
                    let name = match region.ops.get(*i).map(|o| (o, &o.op)) {
                        Some((_, Op::CustomCall(c)))
                            if c.call_target_name
                                == crate::runtime::host_call::HOST_CALLBACK_TARGET =>
                        {
                            format!("host call @{} (runs on the host)", c.call_target_name)
                        }
                        Some((o, _)) => o.name(),
                        None => String::new(),
                    };
                    s.push_str(&format!("node {k}: {name} (op {i})\n"))
                }
            }
        }
        s
    }
}

fn first_result(op: &Operation) -> String {
    op.results
        .first()
        .map(|r| format!(" {r}"))
        .unwrap_or_default()
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}
