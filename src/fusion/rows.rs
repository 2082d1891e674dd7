//! Row fusion. A reduction over the trailing dimensions of a tensor (its rows) and the kernels
//! that read its result broadcast back along the same rows — further reductions of those rows,
//! elementwise kernels over the whole tensor — become one kernel that takes each row in turn:
//! softmax (row max, sum of exponentials, quotient), log-softmax, layernorm (mean, variance,
//! normalized output) in one kernel instead of three, with no row result going through memory.
//!
//! Soundness rests on one property, checked here per op: inside the merged kernel a row result
//! is a per-row scalar, so every op on a path from a row result to an output must read it at
//! the row being computed. That holds for elementwise ops, `broadcast_in_dim` that maps the row
//! dimensions onto the row dimensions, and reshapes between row-shaped values; any other op
//! (transpose, slice, reverse, gather, ...) on such a path keeps the kernels apart.

use std::collections::{HashMap, HashSet};

use super::{definitions, node_reads, switched_off, Group, KernelKind, Node, NodeInfo, Partition};
use crate::ir::{ElementType, Function, Op, Operation, Region, ValueId};

/// Rows shorter than this stay with the ordinary kernels on GPUs (a thread per row does well
/// there; the merged kernel takes a subgroup per row).
const MIN_ROW: i64 = 32;

/// [`MIN_ROW`] on CPU adapters, where the merged kernel takes short rows a thread each
/// (`codegen::row_kernel`): softmax over rows of 8 was three kernels, the row maxima, the
/// sums of exponentials and the quotients, each reading the rows again.
const MIN_ROW_CPU: i64 = 4;

/// Rows of at most this many elements take a thread each in the merged row kernel on CPU
/// adapters (`codegen::row_kernel`).
const THREAD_ROWS_MAX: u64 = 64;

/// [`THREAD_ROWS_MAX`], or `WGPU_HLO_ROW_THREADS_MAX` where that is a number (0: a subgroup
/// per row, and rows shorter than [`MIN_ROW`] are not merged, as before).
pub fn thread_rows_max() -> u64 {
    std::env::var("WGPU_HLO_ROW_THREADS_MAX")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(THREAD_ROWS_MAX)
}

/// `WGPU_HLO_ROWS=0` turns row fusion off (for comparisons).
fn enabled() -> bool {
    !switched_off("WGPU_HLO_ROWS")
}

/// The rows of a merged kernel: the reduced tensors' shape, of which the first `kept`
/// dimensions index the rows.
struct Rows {
    full: Vec<i64>,
    kept: usize,
}

impl Rows {
    fn row_sizes(&self) -> Vec<i64> {
        self.full[..self.kept]
            .iter()
            .copied()
            .filter(|&d| d != 1)
            .collect()
    }

    /// The positions of `shape` that index the row, when `shape` is the full shape or
    /// row-shaped (its dimensions other than 1 are the row dimensions, in order).
    fn row_positions(&self, shape: &[i64]) -> Option<Vec<usize>> {
        if shape == self.full.as_slice() {
            return Some((0..self.kept).filter(|&i| self.full[i] != 1).collect());
        }
        let non_unit: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
        let sizes: Vec<i64> = non_unit.iter().map(|&i| shape[i]).collect();
        (sizes == self.row_sizes()).then_some(non_unit)
    }
}

fn shape(f: &Function, v: ValueId) -> Option<&[i64]> {
    f.values
        .get(v.index())
        .and_then(|t| t.as_tensor())
        .map(|t| t.shape.as_slice())
}

fn dtype(f: &Function, v: ValueId) -> Option<ElementType> {
    f.values
        .get(v.index())
        .and_then(|t| t.as_tensor())
        .map(|t| t.dtype)
}

/// Whether a reduction over `dimensions` of a rank-`rank` input reduces its trailing
/// dimensions (at least one): its results are per row.
pub(crate) fn over_trailing(dimensions: &[i64], rank: usize) -> bool {
    let Some(kept) = rank.checked_sub(dimensions.len()) else {
        return false;
    };
    let mut reduced = dimensions.to_vec();
    reduced.sort_unstable();
    !reduced.is_empty() && reduced == (kept as i64..rank as i64).collect::<Vec<_>>()
}

/// The rows a `reduce` reduces, when it reduces the trailing dimensions of static tensors of
/// 32-bit types into enough rows of enough elements.
fn reduce_rows(f: &Function, op: &Operation, min_row: i64) -> Option<Rows> {
    let Op::Reduce { dimensions } = &op.op else {
        return None;
    };
    let n = op.results.len();
    let full = shape(f, *op.operands.first()?)?.to_vec();
    if full.iter().any(|&d| d < 0) || !over_trailing(dimensions, full.len()) {
        return None;
    }
    let kept = full.len() - dimensions.len();
    let rows: i64 = full[..kept].iter().product();
    let row: i64 = full[kept..].iter().product();
    let words = |v: &ValueId| {
        matches!(
            dtype(f, *v),
            Some(ElementType::F32 | ElementType::I32 | ElementType::U32)
        )
    };
    (rows >= 2
        && row >= min_row
        && op.operands.len() == 2 * n
        && op.operands[..n]
            .iter()
            .all(|v| shape(f, *v) == Some(full.as_slice()))
        && op.results.iter().all(words))
    .then_some(Rows { full, kept })
}

/// Whether `op`, reading a row result (directly or through other ops), reads it at the row of
/// the element it computes (see the module comment).
fn keeps_rows(f: &Function, rows: &Rows, op: &Operation) -> bool {
    let [r] = op.results.as_slice() else {
        return false;
    };
    let Some(res) = shape(f, *r) else {
        return false;
    };
    let Some(res_pos) = rows.row_positions(res) else {
        return false;
    };
    let same_or_scalar = |v: &ValueId| shape(f, *v).is_some_and(|s| s == res || s.is_empty());
    match &op.op {
        _ if super::elementwise(op) => op.operands.iter().all(same_or_scalar),
        Op::BitcastConvert => {
            op.operands.iter().all(|v| shape(f, *v) == Some(res))
                && op
                    .operands
                    .first()
                    .and_then(|v| dtype(f, *v))
                    .map(|t| t.bit_width())
                    == dtype(f, *r).map(|t| t.bit_width())
        }
        Op::Reshape => {
            op.operands
                .first()
                .and_then(|v| shape(f, *v))
                .is_some_and(|x| {
                    (x == res) || (x != rows.full.as_slice() && rows.row_positions(x).is_some())
                })
                && res != rows.full.as_slice()
        }
        Op::BroadcastInDim { dimensions } => {
            let Some(x) = op.operands.first().and_then(|v| shape(f, *v)) else {
                return false;
            };
            if x.iter().all(|&d| d == 1) {
                return true;
            }
            if x == rows.full.as_slice() {
                return res == x && dimensions.iter().enumerate().all(|(i, &d)| d == i as i64);
            }
            let Some(x_pos) = rows.row_positions(x) else {
                return false;
            };
            x_pos
                .iter()
                .map(|&p| dimensions.get(p).map(|&d| d as usize))
                .collect::<Option<Vec<_>>>()
                == Some(res_pos)
        }
        _ => false,
    }
}

/// A merged kernel being built.
struct Merge {
    rows: Rows,
    /// Node indices merged, in program order.
    nodes: Vec<usize>,
    /// Values the merged kernel computes (fused values, outputs of its parts).
    produced: HashSet<ValueId>,
    /// Values that depend on a row result, and for each row result (and value depending on
    /// one) the reductions it depends on.
    dep: HashMap<ValueId, HashSet<usize>>,
    /// Reductions (op indices) and the pass each runs in.
    pass: HashMap<usize, usize>,
}

/// What [`Merge::restore`] takes a merge back to.
struct Snapshot {
    nodes: usize,
    produced: HashSet<ValueId>,
    dep: HashMap<ValueId, HashSet<usize>>,
    pass: HashMap<usize, usize>,
}

/// Whether every output of merged kernel `m` is of a 32-bit type (what it can write).
fn words_out(f: &Function, p: &Partition, infos: &[NodeInfo], m: &Merge) -> bool {
    outputs(p, infos, m).iter().all(|v| {
        matches!(
            dtype(f, *v),
            Some(ElementType::F32 | ElementType::I32 | ElementType::U32)
        )
    })
}

impl Merge {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            nodes: self.nodes.len(),
            produced: self.produced.clone(),
            dep: self.dep.clone(),
            pass: self.pass.clone(),
        }
    }

    fn restore(&mut self, s: Snapshot) {
        self.nodes.truncate(s.nodes);
        (self.produced, self.dep, self.pass) = (s.produced, s.dep, s.pass);
    }

    /// The reductions `v` depends on inside the merged kernel.
    fn deps_of(&self, vs: &[ValueId]) -> HashSet<usize> {
        vs.iter()
            .filter_map(|v| self.dep.get(v))
            .flatten()
            .copied()
            .collect()
    }

    /// Tries to add kernel `g` (node `k`); false leaves the merge unchanged.
    fn try_add(&mut self, f: &Function, region: &Region, k: usize, g: &Group) -> bool {
        let ops = &region.ops;
        // The candidate's own values in program order, so operands come first.
        let mut own: Vec<(usize, ValueId)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            for r in &op.results {
                if g.members.contains(r) {
                    own.push((i, *r));
                }
            }
        }
        let mut dep: HashMap<ValueId, HashSet<usize>> = HashMap::new();
        for &(i, v) in &own {
            let op = &ops[i];
            let mut d = self.deps_of(&op.operands);
            for o in &op.operands {
                if let Some(x) = dep.get(o) {
                    d.extend(x.iter().copied());
                }
            }
            if d.is_empty() {
                continue;
            }
            if !keeps_rows(f, &self.rows, op) {
                return false;
            }
            dep.insert(v, d);
        }
        let lookup = |v: &ValueId, dep: &HashMap<ValueId, HashSet<usize>>| {
            let mut d = self.deps_of(std::slice::from_ref(v));
            if let Some(x) = dep.get(v) {
                d.extend(x.iter().copied());
            }
            d
        };
        match g.kind {
            KernelKind::Loop => {
                // Outputs over the rows: the whole tensor, or one value per row. Of any type:
                // one the merged kernel cannot write (a predicate) may be read only inside it,
                // which the kernels after this one decide (see `fuse`).
                if !g
                    .outputs
                    .iter()
                    .all(|v| shape(f, *v).is_some_and(|s| self.rows.row_positions(s).is_some()))
                {
                    return false;
                }
            }
            KernelKind::Reduce => {
                let Some(op) = ops.get(g.root) else {
                    return false;
                };
                // Rows of the merge's own length (whatever the least).
                let Some(rows) = reduce_rows(f, op, 1) else {
                    return false;
                };
                if rows.full != self.rows.full || rows.kept != self.rows.kept {
                    return false;
                }
                let n = op.results.len();
                // Initial values are scalars computed once per row: not from row results.
                if op.operands[n..].iter().any(|v| !lookup(v, &dep).is_empty()) {
                    return false;
                }
                let mut d = HashSet::new();
                for v in &op.operands[..n] {
                    d.extend(lookup(v, &dep));
                }
                let pass = d
                    .iter()
                    .filter_map(|r| self.pass.get(r))
                    .map(|p| p + 1)
                    .max()
                    .unwrap_or(0);
                self.pass.insert(g.root, pass);
                let mut with_self = d;
                with_self.insert(g.root);
                for r in &op.results {
                    dep.insert(*r, with_self.clone());
                }
                self.produced.extend(op.results.iter().copied());
            }
            KernelKind::Dot
            | KernelKind::Rows
            | KernelKind::Epilogue
            | KernelKind::Horizontal
            | KernelKind::Prologue => return false,
        }
        self.dep.extend(dep);
        self.produced.extend(g.members.iter().copied());
        self.produced.extend(g.outputs.iter().copied());
        self.nodes.push(k);
        true
    }
}

/// Merges row reductions with the kernels that read their results (see the module comment).
/// A merged kernel keeps its parts, so a compile driver that cannot emit it (an adapter
/// without subgroups, rows too long for one invocation) lowers the parts instead.
pub fn fuse(
    f: &Function,
    region: &Region,
    p: Partition,
    max_bindings: usize,
    cpu_adapter: bool,
) -> Partition {
    if !enabled() {
        return p;
    }
    let min_row = if cpu_adapter && thread_rows_max() >= MIN_ROW as u64 {
        MIN_ROW_CPU
    } else {
        MIN_ROW
    };
    let def = definitions(region);
    let infos: Vec<NodeInfo> = p
        .nodes
        .iter()
        .map(|n| node_reads(region, &def, &p.materialized, n))
        .collect();
    let mut taken = vec![false; p.nodes.len()];
    let mut merges: Vec<Merge> = Vec::new();
    for (i, node) in p.nodes.iter().enumerate() {
        let Node::Kernel(g) = node else { continue };
        if taken[i] || g.kind != KernelKind::Reduce {
            continue;
        }
        let Some(rows) = region
            .ops
            .get(g.root)
            .and_then(|op| reduce_rows(f, op, min_row))
        else {
            continue;
        };
        let mut m = Merge {
            rows,
            nodes: Vec::new(),
            produced: HashSet::new(),
            dep: HashMap::new(),
            pass: HashMap::new(),
        };
        if !m.try_add(f, region, i, g) {
            continue;
        }
        // The longest merge so far whose outputs the kernel can write (32-bit words).
        let mut writable = m.snapshot();
        for (j, next) in p.nodes.iter().enumerate().skip(i + 1) {
            let Node::Kernel(g2) = next else {
                if infos[j].reads.iter().any(|v| m.produced.contains(v)) {
                    break;
                }
                continue;
            };
            let reads_merge = infos[j].reads.iter().any(|v| m.produced.contains(v));
            if !reads_merge {
                // A sibling reduction of the same rows (layernorm's mean and mean of squares)
                // joins the pass that reads them: the rows are read once for both.
                if !taken[j]
                    && g2.kind == KernelKind::Reduce
                    && siblings(f, &m.rows, &infos[i], &infos[j])
                {
                    attempt(f, region, &p, &infos, &mut m, j, g2, max_bindings);
                }
                continue;
            }
            let fits = !taken[j] && attempt(f, region, &p, &infos, &mut m, j, g2, max_bindings);
            // A node that reads the merged kernel's results and is not part of it runs after
            // it: nothing later may join, or it would move past that reader.
            if !fits {
                break;
            }
            if words_out(f, &p, &infos, &m) {
                writable = m.snapshot();
            }
        }
        // A predicate written by one part and read by a later one that did not join
        // (logsumexp over rows of 32: `is_finite` of the row maxima, when the cost model wrote
        // the maxima once) leaves the merge at the part before.
        if !words_out(f, &p, &infos, &m) {
            m.restore(writable);
        }
        if m.nodes.len() >= 2 {
            absorb_prologues(f, &p, &infos, &taken, &mut m, max_bindings);
            for &k in &m.nodes {
                taken[k] = true;
            }
            merges.push(m);
        }
    }
    if merges.is_empty() {
        return p;
    }
    rebuild(p, &infos, merges)
}

/// Whether reductions reading `a` and `b` over the same rows share the pass over them: they
/// read the same tensor, or one reads nothing larger than a value per row (the one-hot sum of
/// a cross-entropy gradient reads only the labels), so the merged kernel reads no more of
/// the large tensors than the other alone.
fn siblings(f: &Function, rows: &Rows, a: &NodeInfo, b: &NodeInfo) -> bool {
    let per_row: usize = rows.row_sizes().iter().product::<i64>().max(1) as usize;
    let small = |info: &NodeInfo| {
        info.reads.iter().all(|v| {
            f.ty(*v)
                .as_tensor()
                .is_some_and(|t| t.is_static() && t.num_elements() <= per_row)
        })
    };
    // `WGPU_HLO_ROW_SIBLINGS=shared`: only siblings sharing a read (for comparisons).
    let per_row_ok = !std::env::var("WGPU_HLO_ROW_SIBLINGS").is_ok_and(|v| v.trim() == "shared");
    a.reads.iter().any(|v| b.reads.contains(v)) || (per_row_ok && (small(a) || small(b)))
}

/// Adds kernel `g` (node `k`) to `m` when it may join and the merged kernel stays within the
/// binding budget; false leaves `m` unchanged.
#[allow(clippy::too_many_arguments)]
fn attempt(
    f: &Function,
    region: &Region,
    p: &Partition,
    infos: &[NodeInfo],
    m: &mut Merge,
    k: usize,
    g: &Group,
    max_bindings: usize,
) -> bool {
    let before = m.snapshot();
    if !m.try_add(f, region, k, g) {
        return false;
    }
    if bindings(p, infos, m) > max_bindings {
        m.restore(before);
        return false;
    }
    true
}

/// Elementwise kernels over the whole tensor whose results only the merged kernel reads (the
/// scaling of attention scores before their softmax) join it: recomputing them in each pass
/// costs less than writing them and reading them back each pass.
fn absorb_prologues(
    f: &Function,
    p: &Partition,
    infos: &[NodeInfo],
    taken: &[bool],
    m: &mut Merge,
    max_bindings: usize,
) {
    loop {
        let mut changed = false;
        for (k, node) in p.nodes.iter().enumerate() {
            let Node::Kernel(g) = node else { continue };
            if taken[k] || m.nodes.contains(&k) || g.kind != KernelKind::Loop {
                continue;
            }
            if !g
                .outputs
                .iter()
                .all(|v| shape(f, *v) == Some(m.rows.full.as_slice()))
            {
                continue;
            }
            let readers: Vec<usize> = (0..infos.len())
                .filter(|&j| g.outputs.iter().any(|v| infos[j].reads.contains(v)))
                .collect();
            if readers.is_empty() || !readers.iter().all(|j| m.nodes.contains(j)) {
                continue;
            }
            let before = (m.nodes.clone(), m.produced.clone());
            m.nodes.push(k);
            m.nodes.sort_unstable();
            m.produced.extend(g.members.iter().copied());
            m.produced.extend(g.outputs.iter().copied());
            if bindings(p, infos, m) > max_bindings {
                (m.nodes, m.produced) = before;
            } else {
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// Buffers the merged kernel would bind: what its parts read that it does not compute, and
/// what it writes.
fn bindings(p: &Partition, infos: &[NodeInfo], m: &Merge) -> usize {
    let reads: HashSet<ValueId> = m
        .nodes
        .iter()
        .flat_map(|&k| infos[k].reads.iter().copied())
        .filter(|v| !m.produced.contains(v))
        .collect();
    reads.len() + outputs(p, infos, m).len()
}

/// The values of merged kernel `m` that other nodes read (the returned values among them),
/// in the order its parts produce them.
fn outputs(p: &Partition, infos: &[NodeInfo], m: &Merge) -> Vec<ValueId> {
    let inside: HashSet<usize> = m.nodes.iter().copied().collect();
    let read_outside: HashSet<ValueId> = infos
        .iter()
        .enumerate()
        .filter(|(k, _)| !inside.contains(k))
        .flat_map(|(_, info)| info.reads.iter().copied())
        .collect();
    let mut out = Vec::new();
    for &k in &m.nodes {
        if let Some(Node::Kernel(g)) = p.nodes.get(k) {
            for v in &g.outputs {
                if read_outside.contains(v) && !out.contains(v) {
                    out.push(*v);
                }
            }
        }
    }
    out
}

fn rebuild(p: Partition, infos: &[NodeInfo], merges: Vec<Merge>) -> Partition {
    let mut last: HashMap<usize, usize> = HashMap::new();
    let mut member_of: HashMap<usize, usize> = HashMap::new();
    for (mi, m) in merges.iter().enumerate() {
        for &k in &m.nodes {
            member_of.insert(k, mi);
        }
        if let Some(&k) = m.nodes.last() {
            last.insert(k, mi);
        }
    }
    let mut materialized = p.materialized.clone();
    let mut merged: Vec<Option<Node>> = Vec::new();
    for m in &merges {
        let outs = outputs(&p, infos, m);
        let mut parts = Vec::new();
        let mut members = HashSet::new();
        for &k in &m.nodes {
            if let Some(Node::Kernel(g)) = p.nodes.get(k) {
                members.extend(g.members.iter().copied());
                parts.push(g.clone());
            }
        }
        // Values only the merged kernel reads need no buffer.
        for g in &parts {
            for v in &g.outputs {
                if !outs.contains(v) {
                    materialized.remove(v);
                }
            }
        }
        let mut passes: Vec<Vec<usize>> = Vec::new();
        let mut reduces: Vec<(usize, usize)> = m.pass.iter().map(|(&r, &p)| (p, r)).collect();
        reduces.sort_unstable();
        for (pass, r) in reduces {
            if passes.len() <= pass {
                passes.resize(pass + 1, Vec::new());
            }
            passes[pass].push(r);
        }
        let root = passes
            .first()
            .and_then(|p| p.first())
            .copied()
            .unwrap_or_default();
        merged.push(Some(Node::Kernel(Group {
            kind: KernelKind::Rows,
            root,
            outputs: outs,
            members,
            parts,
            passes,
        })));
    }
    let mut nodes = Vec::new();
    for (k, node) in p.nodes.into_iter().enumerate() {
        if let Some(&mi) = last.get(&k) {
            if let Some(n) = merged.get_mut(mi).and_then(Option::take) {
                nodes.push(n);
            }
        } else if !member_of.contains_key(&k) {
            nodes.push(node);
        }
    }
    Partition {
        nodes,
        materialized,
        duplication: p.duplication,
        written_for_branches: p.written_for_branches,
    }
}
