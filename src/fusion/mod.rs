//! Fusion: partitions a region's ops into kernels. Elementwise and data-movement ops fuse into
//! the kernels that consume them (loop fusion); a `reduce` computes its elementwise producers
//! inside its own kernel (input fusion); `dot_general` is a kernel of its own. What is left
//! (control flow, constants with data, views of buffers) becomes steps of their own. The
//! partition is data: it prints, and the dump shows it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use crate::ir::{Function, Op, Operation, Region, ValueId};

pub mod cost;
pub mod epilogue;
pub mod horizontal;
pub mod in_place;
pub mod multi_output;
pub mod prologue;
pub mod rows;
pub mod unread;
pub mod updates;

/// What kind of kernel a group becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// One thread per output element (several elements for packed narrow types).
    Loop,
    /// A `reduce` with its fused producers.
    Reduce,
    /// A `dot_general` with its fused operand producers.
    Dot,
    /// Row reductions and the kernels reading their results along the same rows, merged
    /// ([`rows`]): its `parts` are the kernels merged, its `passes` the reductions.
    Rows,
    /// A `dot_general` or `convolution` with the elementwise kernel reading its result run at
    /// each output element's store ([`epilogue`]): its `parts` are the dot and that kernel.
    Epilogue,
    /// Small independent loop kernels run as one launch, each in its own range of invocations
    /// ([`horizontal`]): its `parts` are the loop kernels merged.
    Horizontal,
    /// A `dot_general` or `convolution` (kind `Dot` or `Epilogue`) computing operands from the
    /// loop kernels that produced them where it reads them ([`prologue`]): its `parts` are
    /// those loop kernels, then the dot.
    Prologue,
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
    /// A merged kernel's parts (the kernels it replaces, to lower instead when it cannot be
    /// emitted); empty for other kernels.
    pub parts: Vec<Group>,
    /// A merged kernel's reductions (op indices), by pass: a reduction reads the results of
    /// reductions of earlier passes only.
    pub passes: Vec<Vec<usize>>,
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
    /// In-place `dynamic_update_slice`s and scatters (`ops`: op indices, in order), each into
    /// a buffer of its own, run as one step at this place ([`updates`]), computing the update
    /// values the loop kernels `producers` made inline, and writing those of the producers'
    /// outputs others read too (`outputs`) to buffers of their own.
    Updates {
        /// The updates' op indices.
        ops: Vec<usize>,
        /// Loop kernels whose outputs the updates compute where they read them.
        producers: Vec<Group>,
        /// Outputs of `producers` read after this step as well, which it writes.
        outputs: Vec<ValueId>,
    },
}

/// The partition of one region.
#[derive(Clone, Debug, Default)]
pub struct Partition {
    /// Steps in program order.
    pub nodes: Vec<Node>,
    /// Values held in buffers (everything not computed inline).
    pub materialized: HashSet<ValueId>,
    /// The cost model's decisions for values several kernels read ([`cost`]), for the dump.
    pub duplication: Vec<String>,
    /// Values written because their reader would evaluate them at several indices, each
    /// running all their branches ([`cost::masked_branches`]): multi-output fusion must not
    /// merge their kernel back into that reader.
    pub written_for_branches: HashSet<ValueId>,
}

/// True when the environment variable `var` is `0`: the switch of one fusion, for comparisons.
pub(crate) fn switched_off(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v.trim() == "0")
}

/// The index in `region` of the op defining each value.
pub(crate) fn definitions(region: &Region) -> HashMap<ValueId, usize> {
    region.definitions()
}

/// Most elements of a splat constant kept as an uploaded constant rather than a kernel.
const SMALL_SPLAT: usize = 4096;

/// True for ops a loop kernel can compute inline at any index.
pub fn is_fusible(op: &Operation) -> bool {
    if same_index(op) {
        return true;
    }
    match &op.op {
        Op::Iota { .. }
        | Op::BroadcastInDim { .. }
        | Op::Reshape
        | Op::Transpose { .. }
        | Op::Slice { .. }
        | Op::Reverse { .. }
        | Op::Pad { .. }
        | Op::Concatenate { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Gather { .. } => true,
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

/// A `broadcast_in_dim` that only adds dimensions of size 1, keeping the operand's in order:
/// the same elements in the same row-major order, a reshape. `lax.scan` stacks each step's
/// outputs through one (`[B, H]` to `[1, B, H]`, then `dynamic_update_slice`): as a view it
/// is no copy kernel.
fn reshaping_broadcast(f: &Function, op: &Operation) -> bool {
    let Op::BroadcastInDim { dimensions } = &op.op else {
        return false;
    };
    let (Some(&x), Some(&r)) = (op.operands.first(), op.results.first()) else {
        return false;
    };
    let (Some(xt), Some(rt)) = (f.ty(x).as_tensor(), f.ty(r).as_tensor()) else {
        return false;
    };
    op.operands.len() == 1
        && op.results.len() == 1
        && xt.dtype == rt.dtype
        && xt.is_static()
        && rt.is_static()
        && xt.num_elements() == rt.num_elements()
        && dimensions.len() == xt.shape.len()
        && dimensions.windows(2).all(|w| w[0] < w[1])
        && dimensions.iter().zip(&xt.shape).all(|(&d, &n)| {
            usize::try_from(d)
                .ok()
                .and_then(|d| rt.shape.get(d))
                .is_some_and(|&m| m == n)
        })
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

/// Partitions `region` (of function `f`) into kernels and steps, each kernel binding at most
/// `max_bindings` buffers (inputs and outputs; a kernel over budget is cut by materializing a
/// fused value whose producers read many buffers, which then becomes a kernel of its own). A
/// kernel whose single ops already bind more stays as it is: its emitter refuses it.
/// `cpu_adapter`: the kernels are for a CPU adapter, where some fusions pay less.
pub fn partition(
    f: &Function,
    region: &Region,
    max_bindings: usize,
    cpu_adapter: bool,
) -> Partition {
    let mut forced = HashSet::new();
    loop {
        let p = partition_forced(f, region, &forced, cpu_adapter);
        let cuts: Vec<ValueId> = p
            .nodes
            .iter()
            .filter_map(|n| match n {
                Node::Kernel(g) => budget_cut(region, g, &p.materialized, max_bindings),
                _ => None,
            })
            .collect();
        // Each round materializes at least one more value, so this ends.
        if !cuts.iter().any(|v| forced.insert(*v)) {
            let p = rows::fuse(f, region, p, max_bindings, cpu_adapter);
            let p = multi_output::fuse(f, region, p, max_bindings);
            let p = epilogue::fuse(f, region, p, max_bindings);
            let p = prologue::fuse(f, region, p, max_bindings, cpu_adapter);
            // Update steps take their producers before horizontal fusion merges those into
            // kernels an update step cannot take (a scan step's gate kernel beside its index,
            // on GPUs: their parts run to 65536 elements there).
            let p = if switched_off("WGPU_HLO_UPDATES_FIRST") {
                let p = horizontal::fuse(f, region, p, max_bindings, cpu_adapter);
                updates::fuse(f, region, p, max_bindings)
            } else {
                let p = updates::fuse(f, region, p, max_bindings);
                horizontal::fuse(f, region, p, max_bindings, cpu_adapter)
            };
            return unread::prune(f, region, p);
        }
    }
}

/// For fusion's unit tests: `see` the partition of `main` in `src` (text), for a CPU adapter
/// or a GPU.
#[cfg(test)]
pub(crate) fn with_partition<T>(
    src: &str,
    cpu: bool,
    see: impl FnOnce(&Region, &Partition) -> T,
) -> T {
    let m = crate::frontend::text::parse_module(src, "t").expect("parse");
    let f = m.functions.iter().find(|f| f.name == "main").expect("main");
    let region = f.body.as_ref().expect("body");
    see(region, &partition(f, region, 31, cpu))
}

/// Buffers a kernel built from `v`'s fused producers reads: the materialized operands reached
/// through members of `g` (`v` itself when it is materialized).
fn leaves(
    region: &Region,
    def: &HashMap<ValueId, usize>,
    g: &Group,
    materialized: &HashSet<ValueId>,
    v: ValueId,
    out: &mut HashSet<ValueId>,
) {
    let mut stack = vec![v];
    let mut seen = HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        // Members are computed inline (outputs too, though they are also written).
        match def.get(&v) {
            Some(&i) if g.members.contains(&v) => {
                stack.extend(region.ops[i].operands.iter().copied())
            }
            _ if materialized.contains(&v) => {
                out.insert(v);
            }
            _ => {}
        }
    }
}

/// For a kernel binding more than `max_bindings` buffers: the fused value to materialize so
/// that the kernel reads fewer buffers — the member whose producers read the most buffers while
/// still fitting one kernel, else the smallest such cut that helps (it is cut again later).
fn budget_cut(
    region: &Region,
    g: &Group,
    materialized: &HashSet<ValueId>,
    max_bindings: usize,
) -> Option<ValueId> {
    let def = region.definitions();
    let root = region.ops.get(g.root)?;
    let mut all = HashSet::new();
    let starts: Vec<ValueId> = if g.kind == KernelKind::Loop {
        g.outputs.clone()
    } else {
        root.operands.clone()
    };
    for v in &starts {
        leaves(region, &def, g, materialized, *v, &mut all);
    }
    if all.len() + g.outputs.len() <= max_bindings {
        return None;
    }
    let mut fits: Option<(usize, ValueId)> = None;
    let mut helps: Option<(usize, ValueId)> = None;
    let mut members: Vec<ValueId> = g.members.iter().copied().collect();
    members.sort_by_key(|v| v.0);
    // Members are fused values, and written ones the kernel computes again
    // (`recomputed_indices`): cut, those are read instead.
    for v in members {
        if g.outputs.contains(&v) {
            continue;
        }
        let mut own = HashSet::new();
        leaves(region, &def, g, materialized, v, &mut own);
        let n = own.len();
        if n < 2 || n >= all.len() {
            continue;
        }
        if n < max_bindings {
            if fits.is_none_or(|(m, _)| n > m) {
                fits = Some((n, v));
            }
        } else if helps.is_none_or(|(m, _)| n < m) {
            helps = Some((n, v));
        }
    }
    fits.or(helps).map(|(_, v)| v)
}

/// What fusion's later passes know about a node.
pub(crate) struct NodeInfo {
    /// Buffers the node reads.
    pub reads: HashSet<ValueId>,
}

/// The kernels before node `b` that could run at `b`'s place instead, nearest first: no node
/// between them and `b` reads their results, and only kernels, constants and views lie
/// between (the scan stops at the first other step: ops that update buffers in place keep
/// their order with the kernels reading them).
pub(crate) fn movable_to(p: &Partition, infos: &[NodeInfo], b: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for a in (0..b).rev() {
        match &p.nodes[a] {
            Node::Kernel(ga) => {
                let reads_a = |k: usize| ga.outputs.iter().any(|v| infos[k].reads.contains(v));
                if !(a + 1..b).any(reads_a) {
                    out.push(a);
                }
            }
            Node::Constant(_) | Node::Alias { .. } => {}
            Node::Op(_) | Node::Updates { .. } => break,
        }
    }
    out
}

/// The buffers `node` of a partition reads.
pub(crate) fn node_reads(
    region: &Region,
    def: &HashMap<ValueId, usize>,
    materialized: &HashSet<ValueId>,
    node: &Node,
) -> NodeInfo {
    let mut reads = HashSet::new();
    match node {
        Node::Kernel(g) => {
            let starts: Vec<ValueId> = match (g.kind, region.ops.get(g.root)) {
                (KernelKind::Loop, _) | (_, None) => g.outputs.clone(),
                (
                    KernelKind::Rows
                    | KernelKind::Epilogue
                    | KernelKind::Horizontal
                    | KernelKind::Prologue,
                    _,
                ) => g
                    .parts
                    .iter()
                    .flat_map(|p| {
                        node_reads(region, def, materialized, &Node::Kernel(p.clone())).reads
                    })
                    .collect(),
                (_, Some(root)) => root.operands.clone(),
            };
            for v in starts {
                leaves(region, def, g, materialized, v, &mut reads);
            }
        }
        Node::Constant(_) => {}
        Node::Alias { source, .. } => {
            reads.insert(*source);
        }
        Node::Op(i) => {
            if let Some(op) = region.ops.get(*i) {
                reads.extend(op.operands.iter().copied());
                for r in &op.regions {
                    collect_captures(r, &mut reads);
                }
            }
        }
        Node::Updates { ops, producers, .. } => {
            let made: HashSet<ValueId> = producers
                .iter()
                .flat_map(|g| g.outputs.iter().copied())
                .collect();
            for op in ops.iter().filter_map(|&i| region.ops.get(i)) {
                for &v in op.operands.iter().filter(|v| !made.contains(v)) {
                    // An operand a producer computes inline (a reversed scan's step index,
                    // `recomputed_indices`) the update kernel computes the same way.
                    match producers.iter().find(|g| g.members.contains(&v)) {
                        Some(g) => leaves(region, def, g, materialized, v, &mut reads),
                        None => {
                            reads.insert(v);
                        }
                    }
                }
            }
            for g in producers {
                for &v in &g.outputs {
                    leaves(region, def, g, materialized, v, &mut reads);
                }
            }
        }
    }
    NodeInfo { reads }
}

fn partition_forced(
    f: &Function,
    region: &Region,
    forced: &HashSet<ValueId>,
    cpu_adapter: bool,
) -> Partition {
    let ops = &region.ops;
    // dynamic_update_slice into a large buffer runs in place as its own step, not fused (a
    // fused one rewrites the whole buffer).
    let fusible = |op: &Operation| is_fusible(op) && !in_place::in_place(f, op);
    let mut def: HashMap<ValueId, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for r in &op.results {
            def.insert(*r, i);
        }
    }
    // Uses of each value by ops of this region, and values that must live in buffers.
    let mut uses: HashMap<ValueId, Vec<usize>> = HashMap::new();
    let mut must: HashSet<ValueId> = forced.clone();
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
    // Walk backwards so every consumer of a value is decided before the value. `kernels[v]`
    // holds the kernels (by root op) that would compute `v` if it were fused: a materialized
    // value's own kernel, and for a fused one the kernels of its consumers. An op read twice by
    // one kernel is computed there once.
    let rates = cost::Rates::for_adapter(cpu_adapter);
    let model = cost::enabled();
    // `WGPU_HLO_AMPLIFIED=0` keeps values broadcast into larger kernels fused (comparisons).
    let amplify = !switched_off("WGPU_HLO_AMPLIFIED");
    // `WGPU_HLO_FROM_INDICES=0` prices values computed from indices alone like any other.
    let by_indices = !switched_off("WGPU_HLO_FROM_INDICES");
    let mut kernels: HashMap<ValueId, BTreeSet<usize>> = HashMap::new();
    let mut duplication = Vec::new();
    let mut twice: HashSet<ValueId> = HashSet::new();
    let mut written_for_branches: HashSet<ValueId> = HashSet::new();
    // Per fused value: the indices one element of each kernel computing it evaluates it at.
    let mut contexts: HashMap<ValueId, Contexts> = HashMap::new();
    let max_evals = max_evaluations();
    let chains = select_chains(ops, &def, &uses);
    for (i, op) in ops.iter().enumerate().rev() {
        let mut mine = BTreeSet::new();
        if fusible(op) {
            for r in &op.results {
                let at = evaluations(f, ops, &uses, &contexts, &materialized, &chains, *r);
                let inlined = per_kernel(&at);
                let readers = kernels.remove(r).unwrap_or_default();
                let n = readers.len();
                let kept = n <= 1
                    || is_cheap(op)
                    || (model && by_indices && from_indices(f, ops, &def, op, 0))
                    || recompute_for_reduce(ops, &uses, &mut twice, *r, n);
                // Read only by loop kernels of its own element count: written, it runs inside
                // the first of them and is never stored (multi-output fusion), so computing
                // it again would save no launch.
                let merges = readers.iter().all(|&k| {
                    ops.get(k)
                        .is_some_and(|o| fusible(o) && same_count(f, o.results.first(), *r))
                });
                let estimate = if kept || !model || merges {
                    None
                } else {
                    cost::estimate(f, op, n, rates)
                };
                let priced = estimate.is_some_and(|e| e.recompute());
                if let Some(e) = estimate {
                    duplication.push(format!(
                        "{r} = {} read by {n} kernels: {} (estimates: again in each {:.1} us, \
                         written {:.1} us)",
                        op.name(),
                        if priced {
                            "computed in each"
                        } else {
                            "written once"
                        },
                        e.again_ns / 1000.0,
                        e.written_ns / 1000.0
                    ));
                }
                let deep = inlined > max_evals && !leaf(f, op);
                // Evaluated far more often than it has elements (broadcast into a larger
                // kernel): written once where the model says that is cheaper. Leaves too: a
                // cheap one is never worth writing (`cost::amplified` wants some work per
                // element), but a `power` of two scalars is (optax's Adam computes its bias
                // corrections `1 - b ** count` from the step count: evaluated in every thread
                // of every parameter's update, 0.2M times for a 3136 x 128 weight).
                let evaluated = kernel_elements(f, ops, &readers);
                let amplified = model
                    && amplify
                    && (kept || priced)
                    && cost::amplified(
                        f,
                        op,
                        chain_work(f, ops, &def, &materialized, op),
                        evaluated,
                        rates,
                    );
                if amplified {
                    duplication.push(format!(
                        "{r} = {} evaluated {evaluated:.0} times for {} elements: written once",
                        op.name(),
                        f.ty(*r).as_tensor().map_or(0, |t| t.num_elements())
                    ));
                }
                // A concatenation evaluated at several indices per element of a CPU adapter's
                // kernel reads every operand at each (llvmpipe runs each operand's branch
                // under a lane mask): written once where that costs less.
                let branching = model
                    && cpu_adapter
                    && !chains.contains(&i)
                    && !switched_off("WGPU_HLO_WRITE_CONCATS")
                    && (kept || priced)
                    && cost::masked_branches(
                        f,
                        op,
                        concat_leaves(ops, &def, op, 0),
                        inlined,
                        rates,
                    );
                if branching {
                    written_for_branches.insert(*r);
                    duplication.push(format!(
                        "{r} = {} of {} operands evaluated at {inlined} indices an element: \
                         written once",
                        op.name(),
                        concat_leaves(ops, &def, op, 0)
                    ));
                }
                if must.contains(r) || !(kept || priced) || deep || amplified || branching {
                    materialized.insert(*r);
                    mine.insert(i);
                } else {
                    contexts.insert(*r, at);
                    // Only values recomputed by the rules count as recomputed twice for
                    // `recompute_for_reduce`: the model prices each value by itself.
                    if n == 2 && !priced {
                        twice.insert(*r);
                    }
                    mine.extend(readers);
                }
            }
        } else {
            mine.insert(i);
        }
        for o in &op.operands {
            kernels.entry(*o).or_default().extend(mine.iter().copied());
        }
    }
    // Scalar index arithmetic that must be written (a reversed scan's `T - 1 - i`, the start
    // of its in-place updates) is still computed inline by the kernels that read it.
    let recomputed = recomputed_indices(f, ops, &materialized, forced);
    let mut stops = materialized.clone();
    stops.retain(|v| !recomputed.contains(v));
    // Build nodes in program order.
    let mut nodes = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let is_view =
            matches!(op.op, Op::Reshape) || same_width_bitcast(f, op) || reshaping_broadcast(f, op);
        match &op.op {
            Op::Reduce { .. } | Op::DotGeneral { .. } | Op::Convolution(_) => {
                let kind = if matches!(op.op, Op::Reduce { .. }) {
                    KernelKind::Reduce
                } else {
                    KernelKind::Dot
                };
                let mut members = HashSet::new();
                for o in &op.operands {
                    add_members(*o, ops, &def, &stops, &mut members);
                }
                nodes.push(Node::Kernel(Group {
                    kind,
                    root: i,
                    outputs: op.results.clone(),
                    members,
                    parts: Vec::new(),
                    passes: Vec::new(),
                }));
            }
            Op::Constant(l) if !l.is_splat() => nodes.push(Node::Constant(i)),
            // A small splat that must live in a buffer (a `dynamic_update_slice`'s start index
            // in a loop body) is uploaded once, not written by a kernel launch every time.
            Op::Constant(_)
                if op.results.iter().all(|r| materialized.contains(r))
                    && f.ty(op.results[0])
                        .as_tensor()
                        .is_some_and(|t| t.num_elements() <= SMALL_SPLAT) =>
            {
                nodes.push(Node::Constant(i))
            }
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
                    add_members(*o, ops, &def, &stops, &mut members);
                }
                nodes.push(Node::Kernel(Group {
                    kind: KernelKind::Loop,
                    root: i,
                    outputs: outs,
                    members,
                    parts: Vec::new(),
                    passes: Vec::new(),
                }));
            }
            _ => nodes.push(Node::Op(i)),
        }
    }
    duplication.reverse();
    Partition {
        nodes,
        materialized,
        duplication,
        written_for_branches,
    }
}

/// Most scalar operations in a chain of [`recomputed_indices`] one kernel computes inline.
const MAX_INDEX_CHAIN: usize = 8;

/// Written values of `ops` that the kernels reading them compute inline anyway: integer
/// scalars (0-d) computed from scalars by fusible ops, in chains of at most
/// [`MAX_INDEX_CHAIN`] such ops, except those the binding budget `forced` to be read. A
/// value is written when a step that is no kernel reads it: `jax.grad` of a `lax.scan` runs
/// the scan backwards, and the reversed step number `T - 1 - i` is the start index of the
/// in-place updates stacking the gradients (which read buffers) and of the `dynamic_slice`s
/// that fused kernels read the step's residuals through. Read from its buffer, it made those
/// kernels wait for a launch of its own each step (~50 µs on llvmpipe, whatever a launch
/// computes); computed inline, its kernel
/// depends on nothing of the step and merges into another launch (`compile::merge`). Integer
/// arithmetic is exact, so results do not change. `WGPU_HLO_RECOMPUTE_INDICES=0` turns it off.
fn recomputed_indices(
    f: &Function,
    ops: &[Operation],
    materialized: &HashSet<ValueId>,
    forced: &HashSet<ValueId>,
) -> HashSet<ValueId> {
    let mut out = HashSet::new();
    if switched_off("WGPU_HLO_RECOMPUTE_INDICES") {
        return out;
    }
    let scalar_int = |v: &ValueId| {
        f.ty(*v)
            .as_tensor()
            .is_some_and(|t| t.dims().is_empty() && t.dtype.is_int())
    };
    let scalar = |v: &ValueId| f.ty(*v).as_tensor().is_some_and(|t| t.dims().is_empty());
    // The longest chain of inline scalar ops ending at each value computed inline.
    let mut chain: HashMap<ValueId, usize> = HashMap::new();
    for op in ops {
        let [r] = op.results[..] else {
            continue;
        };
        if !is_fusible(op) || !scalar_int(&r) || !op.operands.iter().all(scalar) {
            continue;
        }
        let below = op
            .operands
            .iter()
            .filter(|o| !materialized.contains(o) || out.contains(*o))
            .map(|o| chain.get(o).copied().unwrap_or(MAX_INDEX_CHAIN))
            .max()
            .unwrap_or(0);
        let length = below + 1;
        if length > MAX_INDEX_CHAIN {
            continue;
        }
        chain.insert(r, length);
        // A kernel computing it may bind more buffers than one reading it: `partition`'s
        // budget cut then forces it, and it is read again.
        if materialized.contains(&r) && !forced.contains(&r) {
            out.insert(r);
        }
    }
    out
}

/// Most distinct indices at which one element of a kernel may evaluate a value it computes
/// inline ([`Contexts`]); a value evaluated at more is written by a kernel of its own instead.
///
/// The emitter computes a fused value once per index it is read at (`codegen::expr` memoizes
/// by value and index), so a value read through two slices, pads or a concatenation is
/// computed twice, and its own producers as often again. Without a bound that is exponential
/// in the depth of such reads: `lax.associative_scan` (an up-sweep of strided slices, a
/// down-sweep of pads and concatenations, one level per doubling of n) fused into a single
/// kernel of 3.4 MB of WGSL at n = 64, took 105 s to compile at n = 32 and 24 GB at n = 1M
/// (killed). lavapipe, `associative_scan(add)` of 1M f32 by bound (first call / later calls):
/// 2: 0.7 s / 11.7 ms, 4: 1.5 s / 12.7 ms, 8: 3.7 s / 24.7 ms; counting readers instead of
/// indices, 16: 7.3 s / 78 ms. Up to four shifted reads of a fused value (a short stencil)
/// stay fused. `WGPU_HLO_MAX_EVALUATIONS=N` sets it (for comparisons).
pub const MAX_EVALUATIONS: u64 = 4;

/// [`MAX_EVALUATIONS`], or `WGPU_HLO_MAX_EVALUATIONS` where that is a number.
pub(crate) fn max_evaluations() -> u64 {
    std::env::var("WGPU_HLO_MAX_EVALUATIONS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(MAX_EVALUATIONS)
}

/// Elementwise ops ([`Op::is_elementwise`]).
pub(crate) fn elementwise(op: &Operation) -> bool {
    op.op.is_elementwise()
}

/// Ops that read each operand at the index they are computed at (so a value they read is
/// computed at the same indices as they are: the emitter's memo shares it among them).
fn same_index(op: &Operation) -> bool {
    elementwise(op) || op.op == Op::BitcastConvert
}

/// Whether `op` computes its elements from their indices and scalars alone: an iota, a
/// constant, a broadcast of a scalar, and elementwise ops, converts and broadcasts of such
/// values (`jnp.eye`'s and `jnp.tril`'s `iota(0) + k >= iota(1)`). Computed again in every
/// kernel that reads it, it reads no memory: a Gaussian process's likelihood wrote its
/// 1000 x 1000 row numbers plus 0 from the kernel building `K + eps * eye(n)` for the
/// `tril` after the Cholesky to read back (lavapipe, 2 cores: that `tril` 14 ms, a kernel
/// of 1M elements reading one tensor takes about 4).
fn from_indices(
    f: &Function,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    op: &Operation,
    depth: usize,
) -> bool {
    if depth > 6 || op.results.len() != 1 {
        return false;
    }
    let operands = |op: &Operation| {
        op.operands.iter().all(|o| {
            f.ty(*o).as_tensor().is_some_and(|t| t.num_elements() <= 1)
                || def
                    .get(o)
                    .and_then(|&i| ops.get(i))
                    .is_some_and(|d| from_indices(f, ops, def, d, depth + 1))
        })
    };
    match &op.op {
        Op::Iota { .. } => true,
        // A splat reads one element; other constants are tensors in memory.
        Op::Constant(l) => l.len() <= 1 || l.is_splat(),
        Op::BroadcastInDim { .. } | Op::Convert | Op::Reshape => operands(op),
        _ => elementwise(op) && operands(op),
    }
}

/// Ops whose operands are all of at most one element (constants, iotas, broadcasts of a
/// scalar): evaluated at any number of indices they cost one instruction each and read
/// nothing that could multiply, so the bound on evaluations leaves them fused.
fn leaf(f: &Function, op: &Operation) -> bool {
    op.operands
        .iter()
        .all(|&o| f.ty(o).as_tensor().is_some_and(|t| t.num_elements() <= 1))
}

/// The operands of concatenation `op`, counting those of the concatenations it joins (a
/// blocked solve's halves, each joined again): each is a branch where the result is read.
fn concat_leaves(
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    op: &Operation,
    depth: usize,
) -> usize {
    if !matches!(op.op, Op::Concatenate { .. }) {
        return 1;
    }
    op.operands
        .iter()
        .map(|o| match def.get(o).and_then(|&i| ops.get(i)) {
            Some(inner) if depth < 8 && matches!(inner.op, Op::Concatenate { .. }) => {
                concat_leaves(ops, def, inner, depth + 1)
            }
            _ => 1,
        })
        .sum()
}

/// The distinct indices at which one element of a kernel evaluates a fused value, as
/// `(kernel root, index)` pairs: an index is a path of index-moving reads from the kernel's
/// own element, hashed.
type Contexts = BTreeSet<(usize, u64)>;

/// The most indices of [`Contexts`] that one kernel holds.
fn per_kernel(c: &Contexts) -> u64 {
    let mut counts: HashMap<usize, u64> = HashMap::new();
    for (root, _) in c {
        *counts.entry(*root).or_default() += 1;
    }
    counts.into_values().max().unwrap_or(1)
}

/// Where fused value `v` is evaluated, from its readers (decided before it): a reader that
/// keeps the index evaluates it where the reader itself is evaluated; one that moves it
/// (slices, pads, concatenations, broadcasts, gathers) at new indices, one per operand
/// position and index of the reader. A reader that is written, or is not a loop operation (a
/// reduce, a dot: one evaluation in their loops), is evaluated at its own kernel's element.
/// A value of one element is read at one index however it is reached.
fn evaluations(
    f: &Function,
    ops: &[Operation],
    uses: &HashMap<ValueId, Vec<usize>>,
    contexts: &HashMap<ValueId, Contexts>,
    materialized: &HashSet<ValueId>,
    chains: &HashSet<usize>,
    v: ValueId,
) -> Contexts {
    let mut out = Contexts::new();
    let mut seen = HashSet::new();
    for &u in uses.get(&v).into_iter().flatten() {
        // `uses` lists a reader once per operand position.
        if !seen.insert(u) {
            continue;
        }
        let Some(op) = ops.get(u) else { continue };
        let own: Contexts = match op.results.first() {
            Some(r) if is_fusible(op) && !materialized.contains(r) => {
                contexts.get(r).cloned().unwrap_or_default()
            }
            _ => [(u, 0)].into(),
        };
        read_at(f, op, chains.contains(&u), v, u, &own, &mut out);
    }
    out
}

/// The ops (by index) of concatenations whose parts all read one value through slices and
/// reversals, each read only there, with those slices and reversals: the emitter
/// (`codegen::expr`'s `concatenate_by_index`) reads that value once per element of the
/// concatenation, at coordinates chosen by selects, so such a value is evaluated at one index
/// per element of the concatenation (not its own: see [`read_at`]), not once per part, and no
/// part runs under a branch (reflect padding, `jnp.roll`). Empty with
/// `WGPU_HLO_CONCAT_SELECTS=0`.
fn select_chains(
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    uses: &HashMap<ValueId, Vec<usize>>,
) -> HashSet<usize> {
    let mut out = HashSet::new();
    if switched_off("WGPU_HLO_CONCAT_SELECTS") {
        return out;
    }
    for (c, op) in ops.iter().enumerate() {
        if !matches!(op.op, Op::Concatenate { .. }) || op.operands.len() < 2 {
            continue;
        }
        let mut root = None;
        let mut chain = vec![c];
        let mut one = true;
        for &o in &op.operands {
            let mut v = o;
            while let Some(&d) = def.get(&v) {
                let read_once = uses.get(&v).is_some_and(|u| u.len() == 1);
                if !read_once || !matches!(ops[d].op, Op::Slice { .. } | Op::Reverse { .. }) {
                    break;
                }
                chain.push(d);
                v = ops[d].operands[0];
            }
            one &= root.is_none_or(|r| r == v);
            root = Some(v);
        }
        if one {
            out.extend(chain);
        }
    }
    out
}

/// Adds to `out` the indices at which reader `op` (op `u`), evaluated at `own`, reads `v`.
/// In a chain of [`select_chains`] the concatenation reads its parts at one new index per
/// element and the slices and reversals pass their reader's index on: the emitter reads the
/// chain's value once, at coordinates chosen by selects.
fn read_at(
    f: &Function,
    op: &Operation,
    in_chain: bool,
    v: ValueId,
    u: usize,
    own: &Contexts,
    out: &mut Contexts,
) {
    use std::hash::{Hash, Hasher};
    let hash = |parts: (usize, usize, u64)| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        parts.hash(&mut h);
        h.finish()
    };
    let scalar = f.ty(v).as_tensor().is_some_and(|t| t.num_elements() <= 1);
    for &(root, c) in own {
        if scalar {
            out.insert((root, 0));
        } else if in_chain && matches!(op.op, Op::Concatenate { .. }) {
            // One read per element, at an index of its own (not the reader's: a value
            // read beside it elementwise, as in `concatenate([x[1:], x[:1]]) + x`, is
            // evaluated at two).
            out.insert((root, hash((u, usize::MAX, c))));
        } else if same_index(op) || in_chain {
            out.insert((root, c));
        } else {
            for (pos, _) in op.operands.iter().enumerate().filter(|(_, &o)| o == v) {
                out.insert((root, hash((u, pos, c))));
            }
        }
    }
}

/// The most indices at which one element of a loop kernel computing `members` inline and
/// writing `outputs` evaluates one of them ([`Contexts`]): what later fusions that make one
/// kernel compute another's values inline (multi-output fusion) keep within
/// [`MAX_EVALUATIONS`].
pub(crate) fn kernel_evaluations(
    f: &Function,
    region: &Region,
    def: &HashMap<ValueId, usize>,
    members: &HashSet<ValueId>,
    outputs: &[ValueId],
) -> u64 {
    let mut order: Vec<(usize, ValueId)> = members
        .iter()
        .filter_map(|v| def.get(v).map(|&i| (i, *v)))
        .collect();
    order.sort_unstable();
    // Readers of each member among the members.
    let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for &(i, _) in &order {
        for o in &region.ops[i].operands {
            if members.contains(o) && !readers.get(o).is_some_and(|r| r.contains(&i)) {
                readers.entry(*o).or_default().push(i);
            }
        }
    }
    let mut uses: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (i, op) in region.ops.iter().enumerate() {
        for o in &op.operands {
            uses.entry(*o).or_default().push(i);
        }
    }
    let chains = select_chains(&region.ops, def, &uses);
    let mut contexts: HashMap<ValueId, Contexts> = HashMap::new();
    let mut most = 1;
    for &(i, v) in order.iter().rev() {
        let mut out = Contexts::new();
        if outputs.contains(&v) {
            out.insert((0, 0));
        }
        for &u in readers.get(&v).into_iter().flatten() {
            let op = &region.ops[u];
            let own = op
                .results
                .first()
                .and_then(|r| contexts.get(r))
                .cloned()
                .unwrap_or_default();
            read_at(f, op, chains.contains(&u), v, u, &own, &mut out);
        }
        if !leaf(f, &region.ops[i]) {
            most = most.max(out.len() as u64);
        }
        contexts.insert(v, out);
    }
    most
}

/// Elements the kernels rooted at `roots` evaluate their fused values at, in all: a reduce's
/// operand elements, another kernel's result elements.
/// Most ops [`chain_work`] counts.
const CHAIN_OPS: usize = 32;

/// Simple-op work of one element of `op`'s result where it is fused: its own
/// ([`cost::op_work`]) and that of the fused ops of its element count it reads, transitively
/// (up to [`CHAIN_OPS`] of them; buffers end the chain). Written once, a broadcast value takes
/// that whole chain out of the kernels that read it: batch normalization's
/// `rsqrt(var / n + eps)` per channel, whose divisions, selects and reciprocal square root
/// each of 1.6M elements computed again (4 ms of the 6.8 on lavapipe).
fn chain_work(
    f: &Function,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    materialized: &HashSet<ValueId>,
    op: &Operation,
) -> f64 {
    let count = |v: &ValueId| f.ty(*v).as_tensor().map(|t| t.num_elements());
    let Some(n) = op.results.first().and_then(count) else {
        return cost::op_work(f, op);
    };
    let mut work = cost::op_work(f, op);
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack: Vec<ValueId> = op.operands.clone();
    while let Some(v) = stack.pop() {
        if seen.len() >= CHAIN_OPS || count(&v) != Some(n) {
            continue;
        }
        let Some(&i) = def.get(&v) else { continue };
        let Some(o) = ops.get(i) else { continue };
        if let Op::Reduce { dimensions } = &o.op {
            // A reduction's result comes from its own kernel. Of rows (trailing dimensions),
            // row fusion may merge the chain into the reading kernel, which computes it once
            // per row, not per element: only `op` itself is priced (logsumexp over rows of
            // 1024, its `select(is_finite(max), max, 0)` written once, took a second kernel
            // and 4.2 -> 5.1 ms).
            let rank = o
                .operands
                .first()
                .and_then(|x| f.ty(*x).as_tensor())
                .map_or(0, |t| t.shape.len());
            if rows::over_trailing(dimensions, rank) {
                return cost::op_work(f, op);
            }
            continue;
        }
        if materialized.contains(&v) || !is_fusible(o) || !seen.insert(i) {
            continue;
        }
        if !matches!(o.op, Op::Constant(_) | Op::Iota { .. }) {
            work += cost::op_work(f, o);
        }
        stack.extend(o.operands.iter().copied());
    }
    work
}

fn kernel_elements(f: &Function, ops: &[Operation], roots: &BTreeSet<usize>) -> f64 {
    let count = |v: Option<&ValueId>| {
        v.and_then(|v| f.ty(*v).as_tensor())
            .filter(|t| t.is_static())
            .map_or(0.0, |t| t.num_elements() as f64)
    };
    roots
        .iter()
        .filter_map(|&k| ops.get(k))
        .map(|op| match op.op {
            Op::Reduce { .. } => count(op.operands.first()),
            _ => count(op.results.first()),
        })
        .sum()
}

/// Whether value `a` (when there is one) has as many elements as `b`.
fn same_count(f: &Function, a: Option<&ValueId>, b: ValueId) -> bool {
    let count = |v: ValueId| f.ty(v).as_tensor().map(|t| t.num_elements());
    a.is_some_and(|&a| count(a).is_some() && count(a) == count(b))
}

/// Whether `v`, computed by kernels `n` times, may be recomputed instead of written to a
/// buffer: when it is read by a `reduce` and by one other kernel (softmax's `exp(x - max)`,
/// read by the sum and by the division), or only by values recomputed so (the `x - max`
/// under that `exp`), computing it twice costs less than writing it and reading it back.
/// `twice` collects the values recomputed so. `WGPU_HLO_REDUCE=classic` turns this off (for
/// comparisons).
fn recompute_for_reduce(
    ops: &[Operation],
    uses: &HashMap<ValueId, Vec<usize>>,
    twice: &mut HashSet<ValueId>,
    v: ValueId,
    n: usize,
) -> bool {
    if n != 2 || std::env::var("WGPU_HLO_REDUCE").is_ok_and(|m| m.trim() == "classic") {
        return false;
    }
    let ok = uses.get(&v).is_some_and(|u| {
        u.iter()
            .any(|&i| matches!(ops.get(i).map(|o| &o.op), Some(Op::Reduce { .. })))
            || u.iter().all(|&i| {
                ops.get(i)
                    .is_some_and(|o| o.results.iter().all(|r| twice.contains(r)))
            })
    });
    if ok {
        twice.insert(v);
    }
    ok
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
                    if g.kind == KernelKind::Rows {
                        for p in &g.passes {
                            for &i in p {
                                if let Some(op) = region.ops.get(i) {
                                    fused.push(format!("{}{}", op.name(), first_result(op)));
                                }
                            }
                        }
                    } else if !matches!(g.kind, KernelKind::Loop | KernelKind::Horizontal) {
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
                Node::Updates {
                    ops,
                    producers,
                    outputs,
                } => s.push_str(&format!(
                    "node {k}: {} in-place updates in one step: {}{}\n",
                    ops.len(),
                    ops.iter()
                        .filter_map(|&i| region.ops.get(i))
                        .map(|o| format!("{}{}", o.name(), first_result(o)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if producers.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; computing {} inline{}",
                            producers
                                .iter()
                                .flat_map(|g| g.outputs.iter().map(ToString::to_string))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if outputs.is_empty() {
                                String::new()
                            } else {
                                format!(
                                    "; writing {}",
                                    outputs
                                        .iter()
                                        .map(ToString::to_string)
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                )
                            }
                        )
                    }
                )),
                Node::Op(i) => {
                    let name = match region.ops.get(*i).map(|o| (o, &o.op)) {
                        Some((_, Op::CustomCall(c)))
                            if c.call_target_name == crate::ir::HOST_CALLBACK_TARGET =>
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
        for d in &self.duplication {
            s.push_str(&format!("cost model: {d}\n"));
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

#[cfg(test)]
mod tests {
    use super::{with_partition, Node, MAX_EVALUATIONS};

    /// Levels of `add(slice even, slice odd)` (an associative scan's up-sweep) from `n`
    /// elements of `exp(x)`, and the number of loop kernels of the partition.
    fn up_sweep(levels: u32) -> usize {
        let n = 1usize << levels;
        let mut src = format!(
            "func.func @main(%x: tensor<{n}xf32>) -> tensor<1xf32> {{\n  %v0 = stablehlo.exponential %x : tensor<{n}xf32>\n"
        );
        for l in 0..levels as usize {
            let (m, h) = (n >> l, n >> (l + 1));
            src.push_str(&format!(
                "  %e{l} = stablehlo.slice %v{l} [0:{}:2] : (tensor<{m}xf32>) -> tensor<{h}xf32>\n  \
                 %o{l} = stablehlo.slice %v{l} [1:{m}:2] : (tensor<{m}xf32>) -> tensor<{h}xf32>\n  \
                 %v{} = stablehlo.add %e{l}, %o{l} : tensor<{h}xf32>\n",
                m - 1,
                l + 1
            ));
        }
        src.push_str(&format!("  return %v{levels} : tensor<1xf32>\n}}\n"));
        with_partition(&src, true, |_, p| {
            p.nodes
                .iter()
                .filter(|n| matches!(n, Node::Kernel(_)))
                .count()
        })
    }

    /// A value read at two indices is computed twice, its producers four times, ...: the
    /// partition writes a level once its values would be computed at more than
    /// `MAX_EVALUATIONS` indices, instead of one kernel exponential in the depth.
    #[test]
    fn values_read_at_many_indices_are_written() {
        assert_eq!(MAX_EVALUATIONS, 4);
        // Two levels: exp(x) is evaluated at 4 indices; one kernel.
        assert_eq!(up_sweep(2), 1);
        // Twelve: a kernel every two levels.
        let k = up_sweep(12);
        assert!((5..=7).contains(&k), "{k} kernels");
    }

    /// The kernels of `p` and the loop kernels its update steps compute inline.
    fn kernels_and_producers(p: &super::Partition) -> Vec<super::Group> {
        let mut out = Vec::new();
        for node in &p.nodes {
            match node {
                Node::Kernel(g) => out.push(g.clone()),
                Node::Updates { producers, .. } => out.extend(producers.iter().cloned()),
                _ => {}
            }
        }
        out
    }

    /// A reversed scan's step: `n = 63 - i` is the start of an in-place update (a step that
    /// reads buffers) and of the `dynamic_slice` an elementwise kernel reads. `n` is written
    /// for the update, and computed again by the kernel, which so reads `i`, not `n`.
    #[test]
    fn index_arithmetic_is_recomputed_where_kernels_read_it() {
        let src = r#"
func.func @main(%s: tensor<64x256xf32>, %x: tensor<64x256xf32>, %i: tensor<i32>) -> (tensor<64x256xf32>, tensor<1x256xf32>) {
  %c = stablehlo.constant dense<63> : tensor<i32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.subtract %c, %i : tensor<i32>
  %r = stablehlo.dynamic_slice %x, %n, %z, sizes = [1, 256] : (tensor<64x256xf32>, tensor<i32>, tensor<i32>) -> tensor<1x256xf32>
  %e = stablehlo.exponential %r : tensor<1x256xf32>
  %u = stablehlo.dynamic_update_slice %s, %e, %n, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  return %u, %e : tensor<64x256xf32>, tensor<1x256xf32>
}"#;
        let exp_reads = |region: &crate::ir::Region, p: &super::Partition| {
            let def = super::definitions(region);
            let n = region.ops[2].results[0];
            let e = region.ops[4].results[0];
            // Its own kernel, or the update step's producer computing it.
            let g = kernels_and_producers(p)
                .into_iter()
                .find(|g| g.outputs.contains(&e))
                .expect("exp kernel");
            let reads = super::node_reads(region, &def, &p.materialized, &Node::Kernel(g));
            (p.materialized.contains(&n), reads.reads.contains(&n))
        };
        // Written (the update reads it), not read by the exponential's kernel.
        assert_eq!(with_partition(src, true, exp_reads), (true, false));
        assert_eq!(with_partition(src, false, exp_reads), (true, false));
    }

    /// `n = a + b` computed again would make its reader bind both `a` and `b` in place of
    /// `n`: past the binding budget, the budget cut has the kernel read `n` instead.
    #[test]
    fn recomputed_index_gives_way_to_the_binding_budget() {
        let src = r#"
func.func @main(%s: tensor<64x256xf32>, %x: tensor<64x256xf32>, %y: tensor<1x256xf32>, %w: tensor<1x256xf32>, %a: tensor<i32>, %b: tensor<i32>) -> (tensor<64x256xf32>, tensor<1x256xf32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.add %a, %b : tensor<i32>
  %r = stablehlo.dynamic_slice %x, %n, %z, sizes = [1, 256] : (tensor<64x256xf32>, tensor<i32>, tensor<i32>) -> tensor<1x256xf32>
  %t = stablehlo.add %r, %y : tensor<1x256xf32>
  %e = stablehlo.multiply %t, %w : tensor<1x256xf32>
  %u = stablehlo.dynamic_update_slice %s, %e, %n, %z : (tensor<64x256xf32>, tensor<1x256xf32>, tensor<i32>, tensor<i32>) -> tensor<64x256xf32>
  return %u, %e : tensor<64x256xf32>, tensor<1x256xf32>
}"#;
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f = m.functions.iter().find(|f| f.name == "main").expect("main");
        let region = f.body.as_ref().expect("body");
        let def = super::definitions(region);
        let n = region.ops[1].results[0];
        // The kernels computing n though it is written, and the most buffers one binds.
        let computing = |budget: usize| {
            let p = super::partition(f, region, budget, true);
            let mut recomputing = 0;
            let mut most = 0;
            for g in kernels_and_producers(&p) {
                // A horizontal kernel's parts (here n's own kernel and its reader's).
                let parts = if g.parts.is_empty() {
                    std::slice::from_ref(&g)
                } else {
                    &g.parts[..]
                };
                for part in parts {
                    let own = part.outputs.contains(&n);
                    recomputing += usize::from(part.members.contains(&n) && !own);
                    let info = super::node_reads(
                        region,
                        &def,
                        &p.materialized,
                        &Node::Kernel(part.clone()),
                    );
                    most = most.max(info.reads.len() + part.outputs.len());
                }
            }
            (recomputing, most)
        };
        // Budget enough: the slice's kernel computes n (from a and b) instead of reading it.
        assert_eq!(computing(31).0, 1);
        // A budget of 3: cutting n (2 buffers for 1) is the cut that fits; no kernel computes
        // it, and none binds more than the budget.
        assert_eq!(computing(3), (0, 3));
    }
}
