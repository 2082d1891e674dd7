//! The merged row kernel ([`crate::fusion::rows`]): a subgroup takes a row, runs the merged
//! reductions over it pass by pass (each pass a strided loop over the row, lanes combined by
//! shuffles, the result then a per-row scalar every lane holds), then writes the merged
//! kernel's outputs over the row (the whole tensor's) and per row (lane 0).
//!
//! On CPU adapters with one subgroup size `S` (llvmpipe: 8), rows of at most
//! [`MAX_UNROLLED`]` x S` elements are **held in registers**: each lane's share of the row
//! (groups of four consecutive elements from `4 lane`, `4 (lane + S)`, ..., stored as vec4s;
//! single elements when the row length is not a multiple of 4) is unrolled in every pass at
//! the same indices, so each
//! element is loaded once and what one pass computes of it (softmax's exponential, which the
//! sum and the quotient share) is kept for the next pass instead of being loaded and computed
//! again. llvmpipe runs every storage load as a loop over the lanes with a bounds check per
//! lane, so loads are what such a kernel costs there: softmax over 1024 x 1024 (three loads
//! and two exponentials per element before, one and one now): 16-18 ms before, 9-10 ms now
//! (`wgpu-hlo bench`), for a longer driver compile (see [`MAX_UNROLLED`]).
//!
//! Rows of at most 64 elements on CPU adapters take a **thread** each instead
//! ([`thread_rows`]): the whole row held in registers as above with one lane, no shuffles, no
//! broadcasts, every output stored by its thread. Fusion merges rows from 4 elements there
//! (`fusion::rows`). Lavapipe, 4M f32, softmax in rows of 16: three kernels, 15.5-19.6 ms
//! before; one, 5.3-5.4 ms now; in rows of 64 (a subgroup each before) 8.9-9.0 -> 5.8-6.0.

use std::collections::{HashMap, HashSet};

use super::dtype::{self, Compute};
use super::expr::{binding_limits, Binding, ExprEmitter, Index, Quads};
use super::kernel::{self, Kernel};
use super::loop_kernel::Target;
use super::reduce_kernel::{
    block_accumulator, combine, emit_body_function, region_defs, subgroup_rows_allowed,
    workgroup_rows, Fold, SUBGROUP_ROWS, SUBGROUP_UNROLL, SUBGROUP_WORKGROUP,
};
use crate::error::{Error, Result};
use crate::fusion::{rows, switched_off, Group};
use crate::ir::{Function, Op, Operation, ValueId};

/// Emits the merged row kernel of `group` (kind `Rows`). Errors (an adapter without
/// subgroups, too few rows to fill the device, tensors over the binding limit) tell the
/// compile driver to lower the group's parts instead.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    ops: &[Operation],
    group: &Group,
    target: Target,
) -> Result<Kernel> {
    let refuse = |why: &str| Err(Error::unimplemented(format!("{name}: row kernel: {why}")));
    if !subgroup_rows_allowed() {
        return refuse("switched off");
    }
    let reduces: Vec<Vec<&Operation>> = group
        .passes
        .iter()
        .map(|p| {
            p.iter()
                .map(|&i| {
                    ops.get(i)
                        .ok_or_else(|| Error::internal(format!("{name}: reduction {i} not found")))
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let first = reduces
        .first()
        .and_then(|p| p.first())
        .copied()
        .ok_or_else(|| Error::internal(format!("{name}: row kernel without a reduction")))?;
    let Op::Reduce { dimensions } = &first.op else {
        return Err(Error::internal(format!("{name}: row pass of a non-reduce")));
    };
    let full = f
        .values
        .get(first.operands[0].index())
        .and_then(|t| t.as_tensor())
        .ok_or_else(|| Error::internal(format!("{name}: reduce of a non-tensor")))?
        .clone();
    let dims = full.dims();
    let kept = dims.len().saturating_sub(dimensions.len());
    let kept_dims = dims[..kept].to_vec();
    let red_dims = dims[kept..].to_vec();
    let rows: u64 = kept_dims.iter().product::<usize>() as u64;
    let cols: u64 = red_dims.iter().product::<usize>() as u64;
    let enough_rows = if target.cpu_adapter {
        rows >= 2 * SUBGROUP_ROWS
    } else {
        rows >= 256 || cols <= 1024
    };
    if !enough_rows {
        return refuse("too few rows");
    }
    let threads = thread_rows(&target, rows, cols);
    if !threads && !target.caps.subgroup {
        return refuse("no subgroup operations");
    }

    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    for p in &reduces {
        for op in p {
            if let Some(body) = op.regions.first() {
                region_defs(body, &mut all_defs, &mut body_vals);
            }
        }
    }
    let fused = |v: ValueId| group.members.contains(&v) || body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);

    // One reducer function per reduction.
    let mut funcs = String::new();
    let mut types: Vec<Vec<Compute>> = Vec::new();
    let mut folds: Vec<Fold> = Vec::new();
    let mut k = 0usize;
    for p in &reduces {
        for op in p {
            let body = op
                .regions
                .first()
                .ok_or_else(|| Error::invalid("reduce without a body"))?;
            let ts: Vec<Compute> = op
                .results
                .iter()
                .map(|&v| em.ty(v).and_then(|t| em.compute(t.dtype)))
                .collect::<Result<_>>()?;
            if !ts
                .iter()
                .all(|t| matches!(t, Compute::F32 | Compute::I32 | Compute::U32))
            {
                return refuse("reduction types without shuffles");
            }
            let fname = format!("reducer{k}");
            funcs.push_str(&emit_body_function(&mut em, &fname, body, &ts)?);
            folds.push(Fold::new(&fname, body, &ts));
            types.push(ts);
            k += 1;
        }
    }
    let outs: Vec<Binding> = em.bindings(&group.outputs)?;
    for o in &outs {
        if dtype::per_word(o.ty.dtype) != 1
            || !matches!(
                em.compute(o.ty.dtype)?,
                Compute::F32 | Compute::I32 | Compute::U32
            )
        {
            return refuse("output types other than 32-bit words");
        }
    }

    let wg_rows = if threads {
        u64::from(THREAD_ROWS_WORKGROUP)
    } else {
        workgroup_rows(&target, rows, cols)
    };
    if threads {
        em.line("let row = tid;");
        em.line("let o = row;");
    } else {
        em.line("let g = wid.y * nwg.x + wid.x;");
        em.line(&format!("let w = min(sgs, {SUBGROUP_WORKGROUP}u);"));
        em.open_loop(
            &format!("for (var q: u32 = sgid; q < {wg_rows}u; q = q + nsg)"),
            wg_rows,
        );
        em.line(&format!("let row = g * {wg_rows}u + q;"));
        em.line(&format!("let o = min(row, {}u);", rows - 1));
    }
    let unrolled = if threads {
        Some(Lanes::thread(cols))
    } else {
        unrolled_lanes(&target, rows, cols).map(|s| Lanes::new(s, cols))
    };
    if let Some(l) = &unrolled {
        l.declare(&mut em);
        // Inputs are read a group of four at a time (one texel fetch from a texture, one vec4
        // load from a buffer): a single reduced dimension, so a group is four consecutive
        // elements starting at a multiple of 4. Inputs of other shapes too (`any_shape`),
        // where the row's position is their innermost index and their innermost extent a
        // multiple of 4: attention scores reshaped from their product's layout, a layer
        // norm's scale and offset. Lavapipe, `wgsl_bench` on the dumped kernels: the softmax
        // of `dot_product_attention` over 8 x 8 heads of 256 x 256 (causal) 29-32 -> 17-18
        // ms, a layer norm with scale and offset over 4096 x 1024 25-26 -> 10-13 ms.
        if l.group == 4 && red_dims.len() == 1 && !switched_off("WGPU_HLO_QUAD_READS") {
            em.quads = Some(Quads {
                folded: Default::default(),
                dims: dims.clone(),
                positions: l
                    .groups()
                    .into_iter()
                    .flat_map(|(g, _)| {
                        let first = g[0].clone();
                        g.into_iter()
                            .enumerate()
                            .map(move |(c, p)| (p, (first.clone(), c)))
                    })
                    .collect(),
                // Bound as vec4s (a thread per row too: softmax over rows of 8 / 32 / 64,
                // 4M f32, took 7.5-8.9 / 6.2-8.6 / 6.8-8.4 ms by texels, 5.9 / 5.1 / 5.7-6.6
                // ms by vec4s on lavapipe).
                streaming: true,
                any_shape: true,
                rows: false,
            });
        }
    }
    let om = em.multi(&Index::Linear("o".into()), &kept_dims);
    let at = |em: &mut ExprEmitter, r: &str| -> Index {
        let rm = em.multi(&Index::Linear(r.to_string()), &red_dims);
        Index::Multi(om.iter().chain(&rm).cloned().collect())
    };

    // Passes: a strided loop over the row per pass, then the lanes combined.
    let mut k = 0usize;
    for p in &reduces {
        let mut accs: Vec<Vec<String>> = Vec::new();
        for (j, op) in p.iter().enumerate() {
            let n = op.results.len();
            let mut a = Vec::new();
            for (i, t) in types[k + j].iter().enumerate() {
                let init = em.value(op.operands[n + i], &Index::scalar())?;
                let name = em.fresh("acc");
                em.line(&format!("var {name}: {} = {init};", t.wgsl()));
                a.push(name);
            }
            if let Some(d) = folds[k + j].declare(&a) {
                em.line(&d);
            }
            accs.push(a);
        }
        // f32 sums fold a block of elements into accumulators of their own (from -0, the
        // identity of IEEE addition), added to the sum every `ROW_SUM_BLOCK` elements and at
        // the end through `wh_opaque_f32`, which keeps a driver's reassociation of straight-line
        // code from undoing the blocks. Summed one by one, a softmax of 4096-long rows was
        // 1.5e-6 off exact (XLA's cpu 2.2e-7).
        let blocks: Vec<Option<String>> = p
            .iter()
            .enumerate()
            .map(|(j, _)| folds[k + j].sum.then(|| block_accumulator(&mut em)))
            .collect();
        if blocks.iter().any(Option::is_some) {
            em.needs.insert("wh_opaque_f32".to_string());
        }
        let into: Vec<Vec<String>> = accs
            .iter()
            .zip(&blocks)
            .map(|(a, b)| b.as_ref().map_or_else(|| a.clone(), |b| vec![b.clone()]))
            .collect();
        let body = |em: &mut ExprEmitter, r: &str| -> Result<()> {
            let idx = at(em, r);
            for (j, op) in p.iter().enumerate() {
                let n = op.results.len();
                let mut vals = Vec::new();
                for i in 0..n {
                    vals.push(em.value(op.operands[i], &idx)?);
                }
                em.line(&folds[k + j].element(&into[j], &vals));
            }
            Ok(())
        };
        let flush = |em: &mut ExprEmitter| {
            for (j, b) in blocks.iter().enumerate() {
                if let Some(b) = b {
                    let f = &folds[k + j];
                    em.line(&combine(
                        &f.f,
                        f.n,
                        &accs[j],
                        &[format!("wh_opaque_f32({b})")],
                    ));
                    em.line(&format!("{b} = -0.0f;"));
                }
            }
        };
        let blocked = blocks.iter().any(Option::is_some);
        over_row(
            &mut em,
            cols,
            unrolled.as_ref(),
            &body,
            blocked.then_some(&flush as &dyn Fn(&mut ExprEmitter)),
        )?;
        if blocked {
            flush(&mut em);
        }
        for j in 0..p.len() {
            if let Some(f) = folds[k + j].finish(&accs[j]) {
                em.line(&f);
            }
        }
        // A subgroup combines its lanes' accumulators; a thread per row holds its row's
        // results already.
        if !threads {
            em.open_loop(
                "for (var m: u32 = w >> 1u; m > 0u; m = m >> 1u)",
                u64::from(SUBGROUP_WORKGROUP.trailing_zeros()),
            );
            for (j, op) in p.iter().enumerate() {
                let n = op.results.len();
                let other: Vec<String> = (0..n).map(|i| format!("t{j}_{i}")).collect();
                for (i, a) in accs[j].iter().enumerate() {
                    em.line(&format!("let t{j}_{i} = subgroupShuffleXor({a}, m);"));
                }
                em.line(&combine(&format!("reducer{}", k + j), n, &accs[j], &other));
            }
            em.close(None);
        }
        // Every lane holds the same row result (lane 0's), whatever the reducer's rounding.
        for (j, op) in p.iter().enumerate() {
            for (i, r) in op.results.iter().enumerate() {
                let s = em.fresh("row");
                let v = if threads {
                    accs[j][i].clone()
                } else {
                    format!("subgroupBroadcast({}, 0u)", accs[j][i])
                };
                em.line(&format!("let {s}: {} = {v};", types[k + j][i].wgsl()));
                em.scalars.insert(*r, s);
            }
        }
        k += p.len();
    }

    // Outputs over the whole tensor, then one per row.
    let full_outs: Vec<usize> = (0..outs.len())
        .filter(|&j| outs[j].ty.shape == full.shape)
        .collect();
    if !full_outs.is_empty() {
        em.open(&format!("if (row < {rows}u)"));
        match &unrolled {
            // Groups of four consecutive elements: one vec4 store each (llvmpipe runs a
            // storage store as a loop over the lanes like a load: 2^20 scalar stores took 4.4-7
            // ms, as vec4s 1.2-1.5 ms).
            Some(l) if l.group == 4 => {
                for (g, guard) in l.groups() {
                    if let Some(c) = &guard {
                        em.open(c);
                    }
                    for &j in &full_outs {
                        let mut vs = Vec::new();
                        for r in &g {
                            let idx = at(&mut em, r);
                            vs.push(em.value(outs[j].value, &idx)?);
                        }
                        let t = em.compute(outs[j].ty.dtype)?.wgsl();
                        em.line(&format!(
                            "out{j}[(o * {cols}u + {}) >> 2u] = vec4<{t}>({});",
                            g[0],
                            vs.join(", ")
                        ));
                    }
                    if guard.is_some() {
                        em.close(None);
                    }
                }
            }
            _ => {
                let body = |em: &mut ExprEmitter, r: &str| -> Result<()> {
                    let idx = at(em, r);
                    for &j in &full_outs {
                        let v = em.value(outs[j].value, &idx)?;
                        em.line(&format!("out{j}[o * {cols}u + {r}] = {v};"));
                    }
                    Ok(())
                };
                over_row(&mut em, cols, unrolled.as_ref(), &body, None)?;
            }
        }
        em.close(None);
    }
    let row_outs: Vec<usize> = (0..outs.len())
        .filter(|&j| outs[j].ty.shape != full.shape)
        .collect();
    if !row_outs.is_empty() {
        let lane0 = if threads { "" } else { "sl == 0u && " };
        em.open(&format!("if ({lane0}row < {rows}u)"));
        for &j in &row_outs {
            let v = em.value(outs[j].value, &Index::Linear("o".into()))?;
            em.line(&format!("out{j}[o] = {v};"));
        }
        em.close(None);
    }
    if !threads {
        em.close(None);
    }

    if let Some(why) = binding_limits(&em.inputs, &outs, &target) {
        return refuse(&why);
    }
    let mut main = if threads {
        let mut m = kernel::entry_header(THREAD_ROWS_WORKGROUP);
        m.push_str(&kernel::thread_index(THREAD_ROWS_WORKGROUP));
        m.push_str(&format!("    if (tid >= {rows}u) {{ return; }}\n"));
        m
    } else {
        format!(
            "@compute @workgroup_size({SUBGROUP_WORKGROUP})\nfn main(@builtin(workgroup_id) wid: \
             vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, \
             @builtin(subgroup_invocation_id) sl: u32, @builtin(subgroup_size) sgs: u32, \
             @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32) {{\n    {} = \
             nwg.z >> 16u;\n",
            kernel::RUNTIME_ZERO
        )
    };
    main.push_str(&em.body);
    main.push_str("}\n");
    let comment = format!(
        "kernel {name}: {} reduction pass(es) and the outputs over each of {rows} rows of {cols} \
         elements ({})\nfuses: {}",
        reduces.len(),
        if threads {
            "thread per row"
        } else {
            "subgroup per row"
        },
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let source = format!("{funcs}{main}");
    let iterations = em.iterations();
    // The outputs over the whole tensor are stored as vec4s.
    let vec4_outs: &[usize] = if unrolled.as_ref().is_some_and(|l| l.group == 4) {
        &full_outs
    } else {
        &[]
    };
    kernel::in_workgroups_vec4(
        name,
        &comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        &source,
        vec4_outs,
        (rows.div_ceil(wg_rows), iterations),
        target,
    )
}

/// Most elements of a row one lane holds in registers: 1024-element rows on llvmpipe's 8
/// lanes. The driver's compile grows with them: softmax over rows of 1024 compiles in about
/// 1.5 s on llvmpipe (0.2 s strided), rows of 512 in 0.7 s.
const MAX_UNROLLED: u64 = 128;

/// Elements per lane unrolled whatever the tensor's size (softmax over rows of 128 on 8 lanes:
/// about 0.2 s more compile).
const ALWAYS_UNROLLED: u64 = 16;

/// Elements from which rows of up to [`MAX_UNROLLED`] per lane are unrolled: where one
/// execution saves several milliseconds (two loads of every element), paying for the longer
/// compile within a few hundred executions.
const UNROLL_ELEMENTS: u64 = 1 << 19;

/// Workgroup size of the thread-per-row kernel.
const THREAD_ROWS_WORKGROUP: u32 = 64;

/// Whether the merged row kernel takes a thread per row, the whole row held in registers
/// ([`Lanes::thread`]), not a subgroup: on CPU adapters, for rows of at most
/// [`rows::thread_rows_max`] elements, with at least a workgroup of rows per core. Per short
/// row a subgroup spent more on its shuffles, broadcasts and its one lane's stores than on
/// the row.
fn thread_rows(target: &Target, rows: u64, cols: u64) -> bool {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    target.cpu_adapter
        && cols <= rows::thread_rows_max()
        && rows >= cores * u64::from(THREAD_ROWS_WORKGROUP)
}

/// The subgroup size when each lane's share of a row is unrolled and held in registers: on CPU
/// adapters with one subgroup size dividing the workgroup, for rows of at most
/// [`ALWAYS_UNROLLED`] elements per lane, or [`MAX_UNROLLED`] in tensors of at least
/// [`UNROLL_ELEMENTS`]. `WGPU_HLO_ROW_REGISTERS=0` turns it off.
fn unrolled_lanes(target: &Target, rows: u64, cols: u64) -> Option<u64> {
    let s = u64::from(target.caps.subgroup_size);
    if s == 0 || u64::from(SUBGROUP_WORKGROUP) % s != 0 {
        return None;
    }
    let per_lane = cols.div_ceil(s);
    let worth = per_lane <= ALWAYS_UNROLLED
        || (per_lane <= MAX_UNROLLED && rows.saturating_mul(cols) >= UNROLL_ELEMENTS);
    (target.cpu_adapter && worth && !switched_off("WGPU_HLO_ROW_REGISTERS")).then_some(s)
}

/// A lane's share of a row held in registers: groups of `group` consecutive elements (4 when
/// the row length allows, so outputs are stored as vec4s; else 1), group `J` of lane `sl`
/// starting at element `group * (sl + J * S)`. Position `c` of group `J` is `rcJ_c`.
struct Lanes {
    s: u64,
    cols: u64,
    group: u64,
    /// A thread holds the whole row (`s` is 1, and there is no lane).
    thread: bool,
}

impl Lanes {
    fn new(s: u64, cols: u64) -> Lanes {
        let group = if cols % 4 == 0 { 4 } else { 1 };
        Lanes {
            s,
            cols,
            group,
            thread: false,
        }
    }

    /// A thread's whole row ([`thread_rows`]).
    fn thread(cols: u64) -> Lanes {
        Lanes {
            thread: true,
            ..Lanes::new(1, cols)
        }
    }

    /// Declares every position.
    fn declare(&self, em: &mut ExprEmitter) {
        let (s, g) = (self.s, self.group);
        for j in 0..self.cols.div_ceil(s * g) {
            for c in 0..g {
                if self.thread {
                    em.line(&format!("let rc{j}_{c} = {}u;", g * j + c));
                } else {
                    em.line(&format!("let rc{j}_{c} = {g}u * (sl + {}u) + {c}u;", j * s));
                }
            }
        }
    }

    /// The groups, each with the condition that guards it when some lanes lack it (the last
    /// one, when `S * group` does not divide the row).
    fn groups(&self) -> Vec<(Vec<String>, Option<String>)> {
        let (s, g) = (self.s, self.group);
        (0..self.cols.div_ceil(s * g))
            .map(|j| {
                let names = (0..g).map(|c| format!("rc{j}_{c}")).collect();
                let guard =
                    ((j + 1) * s * g > self.cols).then(|| format!("if (rc{j}_0 < {}u)", self.cols));
                (names, guard)
            })
            .collect()
    }
}

/// `body(r)` over the lane's share of a row of `cols` elements: the strided loop, or with
/// `unrolled` each position in turn at the kernel's top level, so that the values a pass
/// computes at a position are the ones the next pass finds (the emitter's memo is per block).
/// The last group, which some lanes lack when it does not fill the row, is guarded (and
/// recomputed by each pass).
///
/// `flush`, where given, runs after every [`ROW_SUM_BLOCK`] of a lane's elements (unrolled)
/// or every trip of the strided loop's unrolled part: blocked sums add their blocks there.
fn over_row(
    em: &mut ExprEmitter,
    cols: u64,
    unrolled: Option<&Lanes>,
    body: &dyn Fn(&mut ExprEmitter, &str) -> Result<()>,
    flush: Option<&dyn Fn(&mut ExprEmitter)>,
) -> Result<()> {
    let Some(l) = unrolled else {
        return strided(em, cols, body, flush);
    };
    let mut since = 0u64;
    for (g, guard) in l.groups() {
        if let Some(c) = &guard {
            em.open(c);
        }
        for r in &g {
            body(em, r)?;
        }
        if guard.is_some() {
            em.close(None);
        }
        since += g.len() as u64;
        if let Some(f) = flush.filter(|_| since >= ROW_SUM_BLOCK) {
            f(em);
            since = 0;
        }
    }
    Ok(())
}

/// Elements of a lane's share of a row an f32 sum of the row kernel adds on their own
/// before adding them to its accumulator (unrolled rows; the strided loop adds each trip's).
const ROW_SUM_BLOCK: u64 = 32;

/// A loop over a row of `cols` elements, lane `sl` taking every `w`-th: `body(r)` for each,
/// unrolled by [`SUBGROUP_UNROLL`], then the rest.
fn strided(
    em: &mut ExprEmitter,
    cols: u64,
    body: &dyn Fn(&mut ExprEmitter, &str) -> Result<()>,
    flush: Option<&dyn Fn(&mut ExprEmitter)>,
) -> Result<()> {
    let r = em.fresh("r");
    em.line(&format!("var {r}: u32 = sl;"));
    em.open_loop(
        &format!(
            "for (; {r} + {}u * w < {cols}u; {r} = {r} + {SUBGROUP_UNROLL}u * w)",
            SUBGROUP_UNROLL - 1
        ),
        cols.div_ceil(4 * SUBGROUP_UNROLL),
    );
    for u in 0..SUBGROUP_UNROLL {
        let ru = em.fresh("ru");
        em.line(&format!("let {ru} = {r} + {u}u * w;"));
        body(em, &ru)?;
    }
    if let Some(f) = flush {
        f(em);
    }
    em.close(None);
    em.open_loop(
        &format!("for (; {r} < {cols}u; {r} = {r} + w)"),
        SUBGROUP_UNROLL,
    );
    body(em, &r)?;
    em.close(None);
    Ok(())
}
