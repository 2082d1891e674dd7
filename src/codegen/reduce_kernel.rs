//! The reduction emitter. The reduce's inputs are computed inline (input fusion) and folded
//! with the body region, compiled to a WGSL function. Strategies:
//! - a workgroup per output element, threads striding over the reduced elements and combining
//!   in workgroup memory — for long reductions over 32/64-bit types;
//! - on GPUs, for reductions keeping the innermost dimension (columns), a workgroup per tile
//!   of 32 consecutive outputs whose invocations read each row's stretch of the tile together
//!   (coalesced), in chunks of rows where the rows are many, then a fold of the partials;
//! - on CPU adapters, a subgroup per row or four columns per thread (quad reads), and a
//!   thread per row reading groups of four for rows of up to 64 elements;
//! - a thread per output element (several for packed narrow types) looping over the reduced
//!   elements — for short reductions, many outputs, and narrow output types.

use std::collections::{HashMap, HashSet};

use super::dtype::{self, Compute};
use super::expr::{large, linearize, Binding, ExprEmitter, Index, Quads, Window};
use super::kernel::{self, Kernel, WORKGROUP};
use super::loop_kernel::Target;
use super::op_kernels::{Launch, Plan, PARAMS};
use super::partials;
use super::windows;
use crate::error::{Error, Result};
use crate::fusion::Group;
use crate::ir::{BinaryOp, Function, Op, Operation, Region, ValueId};

/// Reductions at least this long use a workgroup per output.
const WORKGROUP_REDUCE_MIN: u64 = 128;

/// A reduction with fewer outputs than this is split into partials over chunks of its
/// reduced elements until it has about this many accumulators (workgroups), so that a full
/// reduction uses the whole device, not one workgroup.
const PARALLEL_ACCUMULATORS: u64 = 64;

/// The shortest chunk of reduced elements such a split makes.
const PARALLEL_CHUNK_MIN: u64 = 8192;

/// Consecutive outputs (columns) a workgroup of the column-tile reduction computes; its
/// invocations are this many columns by `WORKGROUP / COLUMN_TILE` rows.
const COLUMN_TILE: u64 = 32;

/// Rows a workgroup of the subgroup row reduction computes.
pub(crate) const SUBGROUP_ROWS: u64 = 8;

/// Elements each lane of the subgroup row reduction loads per loop trip.
pub(crate) const SUBGROUP_UNROLL: u64 = 8;

/// Invocations per workgroup of the subgroup row reduction.
pub(crate) const SUBGROUP_WORKGROUP: u32 = 64;

/// Invocations per workgroup of the four-columns-per-thread reduction on CPU adapters.
const QUAD_COLUMN_WORKGROUP: u32 = 64;

/// Groups of four columns one thread of that reduction takes, the most first: at 32, the 8
/// lanes of a SIMD batch read 8 x 32 groups of 16 bytes, a 4 KiB page, of every row. Each
/// row of the walk down a column is on a page of its own once rows are 4 KiB or longer, so
/// the more of each page a batch reads, the fewer pages it opens for what it reads. Lavapipe
/// on the 2-core Intel (AVX-512) host of 12-02, `jit` of 4096 x 4096 column reductions, min
/// of 10 calls, 8 processes each: at 4 groups (the most before) the time depends on the
/// process, sums 7.1-17 ms, `max(tanh(x), 0)` 17-30, argmax 8.8-19, `var` 19-37; at 32
/// (argmax: 16, the accumulator bound) sums 6.1-7.5, `max(tanh)` 15-18, argmax 8.3-12,
/// `var` 17.5-20.5. 16384 x 1024 sums: 16 -> 6.3-6.8 in one such pair.
/// `WGPU_HLO_QUAD_GROUPS=N` takes at most N.
const QUAD_GROUPS: [u64; 5] = [32, 16, 8, 4, 2];

/// Accumulators one thread of that reduction holds at most (groups x 4 x results): an
/// argmax's value and index at 32 groups, 256 accumulators, took lavapipe 1.2 s to compile
/// (0.14 s at 4 groups, 0.37 at 16).
const QUAD_ACCUMULATORS_MAX: u64 = 128;

/// Bytes of WGSL the loop of that reduction may take before fewer groups are tried: the
/// code grows with the groups, and so does the driver's compile time (a column
/// `logsumexp`'s sum of exponentials at 32 groups: 95 KB of WGSL, 1.7 s to compile).
const QUAD_WGSL_MAX: usize = 40 * 1024;

/// The most padding that reduction's groups take: a quarter of the real groups (`quads /
/// QUAD_PAD_DIVISOR`). Columns that are no multiple of the 8 x groups a batch of lanes takes
/// are padded to one (`WGPU_HLO_QUAD_PADDING=0`: never, the form before 12-02). 4096 x 4000 column sums,
/// lavapipe, 2-core Intel host, min of 10 calls: 25-28 -> 6.7-6.9 ms (32 groups a thread,
/// not 1); 4096 x 1000 4.7 -> 2.0-2.2, 2048 x 3000 5.6-5.8 -> 2.6-2.9.
const QUAD_PAD_DIVISOR: u64 = 4;

/// [`QUAD_GROUPS`] at most `WGPU_HLO_QUAD_GROUPS` (4: the form before 12-02).
fn quad_groups() -> Vec<u64> {
    let most = std::env::var("WGPU_HLO_QUAD_GROUPS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    QUAD_GROUPS.into_iter().filter(|&g| g <= most).collect()
}

/// Rows a workgroup takes on CPU adapters where rows are at most 4096 elements long and many
/// (at least 4 workgroups per core): llvmpipe pays per workgroup (a coroutine per subgroup,
/// set up and switched), and [`SUBGROUP_ROWS`] rows of 8 subgroups left each subgroup one
/// row. Lavapipe, 4M f32, ms a call, 8 -> 32 rows a workgroup (two alternating rounds):
/// softmax in rows of 32 / 64 / 128 / 1024 13.1-13.6 / 10.1 / 8.6 / 9.5-10.8 -> 10.0-10.4 /
/// 9.2-9.4 / 7.5-7.8 / 7.2-7.4, logsumexp 21.2-21.6 / 9.2-9.4 / 7.3-7.4 / 6.2 -> 15.6-15.9 /
/// 7.2-7.4 / 5.4 / 4.5-4.7, layernorm at 1024 6.2-6.6 -> 5.5-5.8; the subgroup row
/// reduction's sums in rows of 128 / 256 / 1024 3.8 / 2.9 / 2.0 -> 3.1-3.4 / 2.6 / 1.9,
/// maxima at 128 4.4-4.5 -> 3.5-4.0.
/// `WGPU_HLO_ROW_WORKGROUP_ROWS=N` sets it (8: before).
const CPU_WORKGROUP_ROWS: u64 = 32;

/// The rows one workgroup of the merged row kernel or the subgroup row reduction takes (see
/// [`CPU_WORKGROUP_ROWS`]).
pub(crate) fn workgroup_rows(target: &Target, rows: u64, cols: u64) -> u64 {
    if let Some(n) = std::env::var("WGPU_HLO_ROW_WORKGROUP_ROWS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n >= 1)
    {
        return n;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    if target.cpu_adapter && cols <= 4096 && rows.div_ceil(CPU_WORKGROUP_ROWS) >= 4 * cores {
        CPU_WORKGROUP_ROWS
    } else {
        SUBGROUP_ROWS
    }
}

/// Rows at least this long take the subgroup row reduction (shorter ones a thread per row).
const SUBGROUP_ROWS_MIN: u64 = 32;

/// Rows of at most this many elements (a multiple of 4) take a thread per row reading its
/// row by groups of four on CPU adapters ([`Quads::rows`]), not the subgroup row reduction
/// nor a thread per row reading one element at a time. Per short row a subgroup spent more
/// on its shuffles and its one lane's store than on its loads. Lavapipe, 2-core host, 4M
/// f32 in rows of `L`, ms a call (median of 15, two alternating rounds), before -> after:
/// sums at L = 4 / 8 / 16 (a thread per row before) 6.3-8.2 / 5.6-5.9 / 5.2-5.5 -> 3.4-3.5
/// / 2.9-3.2 / 2.6-2.8; at L = 32 / 64 (a subgroup per row before) 10.2-11.3 / 6.0-6.4 ->
/// 2.3-3.0 / 2.3-2.5; `sum(a * b)` at 32 18.2-18.4 -> 5.0-6.4, maxima at 32 12.6 -> 2.6.
/// At 128 the subgroup stays ahead (3.9 against 6.0 ms for sums).
/// `WGPU_HLO_ROW_QUADS_MAX=N` sets it (0: the kernels before).
const ROW_QUADS_MAX: u64 = 64;

/// [`ROW_QUADS_MAX`], or `WGPU_HLO_ROW_QUADS_MAX` where that is a number (0: never).
fn row_quads_max() -> u64 {
    std::env::var("WGPU_HLO_ROW_QUADS_MAX")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(ROW_QUADS_MAX)
}

/// `WGPU_HLO_REDUCE=classic` turns the subgroup row reduction off (for comparisons).
pub(crate) fn subgroup_rows_allowed() -> bool {
    std::env::var("WGPU_HLO_REDUCE").map_or(true, |v| v.trim() != "classic")
}

/// Emits `body` (a region of scalars: N accumulators then N values, returning N values) as a
/// WGSL function `name`; returns its source. For N > 1 it returns a struct `name_r`.
pub fn emit_body_function(
    em: &mut ExprEmitter,
    name: &str,
    body: &Region,
    types: &[Compute],
) -> Result<String> {
    let n = types.len();
    if body.args.len() != 2 * n || body.returned().len() != n {
        return Err(Error::invalid(format!(
            "reduction body must take {} scalars and return {n}",
            2 * n
        )));
    }
    let params: Vec<(ValueId, String)> = body
        .args
        .iter()
        .enumerate()
        .map(|(i, &a)| (a, format!("p{i}")))
        .collect();
    em.begin_function(&params);
    let mut rets = Vec::new();
    for &r in body.returned() {
        rets.push(em.value(r, &Index::scalar())?);
    }
    if n == 1 {
        em.line(&format!("return {};", rets[0]));
    } else {
        em.line(&format!("return {name}_r({});", rets.join(", ")));
    }
    let stmts = em.end_function();
    let sig: Vec<String> = (0..2 * n)
        .map(|i| format!("p{i}: {}", types[i % n].wgsl()))
        .collect();
    let mut s = String::new();
    if n > 1 {
        s.push_str(&format!("struct {name}_r {{\n"));
        for (i, t) in types.iter().enumerate() {
            s.push_str(&format!("    r{i}: {},\n", t.wgsl()));
        }
        s.push_str("}\n");
    }
    let ret = if n == 1 {
        types[0].wgsl().to_string()
    } else {
        format!("{name}_r")
    };
    s.push_str(&format!(
        "fn {name}({}) -> {ret} {{\n{stmts}}}\n\n",
        sig.join(", ")
    ));
    Ok(s)
}

/// A reduction whose body is the IEEE maximum or minimum of its two f32 parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extremum {
    Max,
    Min,
}

impl Extremum {
    /// The extremum `body` computes, if it is one (`types`: the reduction's compute types).
    pub(crate) fn of(body: &Region, types: &[Compute]) -> Option<Extremum> {
        let [a, b] = body.args[..] else {
            return None;
        };
        let [op, ret] = &body.ops[..] else {
            return None;
        };
        if types != [Compute::F32]
            || ret.op != Op::Return
            || ret.operands != op.results
            || op.results.len() != 1
            || !(op.operands == [a, b] || op.operands == [b, a])
        {
            return None;
        }
        match op.op {
            Op::Binary(BinaryOp::Maximum) => Some(Extremum::Max),
            Op::Binary(BinaryOp::Minimum) => Some(Extremum::Min),
            _ => None,
        }
    }
}

/// How a reduction kernel's element loops fold elements into its accumulators.
///
/// Most reductions call the body function (`combine`). An f32 maximum or minimum
/// ([`Extremum`]) folds each element with the NaN test left out (`wh_max_fold_f32`: compare,
/// select, signed-zero fix) and keeps a word per accumulator, the largest magnitude bits seen
/// (`ACC_nan`), which says at the end whether a NaN was among them ([`Fold::finish`]). The
/// full IEEE maximum tests both operands for NaN (a compiler may turn a compare and select
/// into a maximum instruction that drops NaNs, as NVIDIA's does), 11 operations an element
/// against 7: lavapipe's softmax 1024 x 1024 kernel 2.34 -> 2.11 ms. Combining partial results
/// (shuffles, workgroup memory) keeps the body function, after `finish`.
pub(crate) struct Fold {
    /// The body function's name.
    pub f: String,
    /// Accumulators (results) of the reduction.
    pub n: usize,
    pub extremum: Option<Extremum>,
    /// The body is an f32 sum: long element loops sum by blocks ([`SumBlocks`]).
    pub sum: bool,
}

/// Elements an f32 sum's element loop adds into a block's own accumulator before adding that
/// to the total: the rounding error of a sequential sum of `n` grows with `n`, by blocks with
/// `n / SUM_BLOCK + SUM_BLOCK`. Lavapipe, sums of 4096 values in [0.5, 1.5) down the columns
/// of a 4096 x 4096 matrix were 2.9e-6 (relative) off the exact sums, XLA's cpu 1.7e-7.
pub(crate) const SUM_BLOCK: u64 = 64;

/// An element loop of an f32 sum in blocks (`Fold::open_elements`): the block accumulators
/// the elements fold into, to be added to the totals when the block's loop closes.
pub(crate) struct SumBlocks {
    totals: Vec<Vec<String>>,
}

impl Fold {
    pub(crate) fn new(f: &str, body: &Region, types: &[Compute]) -> Fold {
        Fold {
            f: f.to_string(),
            n: types.len(),
            extremum: Extremum::of(body, types),
            sum: is_f32_sum(body, types),
        }
    }

    /// Opens the element loop `for (var r: u32 = c0; r < end; ...)` of `trips` trips folding
    /// into `accs` (one set per output); returns the accumulators the elements fold into. An
    /// f32 sum longer than [`SUM_BLOCK`] loops over blocks, each summed from -0 (the identity
    /// of IEEE addition) into accumulators of its own that [`Self::close_elements`] adds to
    /// `accs`.
    pub(crate) fn open_elements(
        &self,
        em: &mut ExprEmitter,
        range: (&str, &str, u64),
        accs: &[Vec<String>],
    ) -> (Vec<Vec<String>>, Option<SumBlocks>) {
        self.open_elements_by(em, range, accs, 1)
    }

    /// [`Self::open_elements`] with `r` advancing `step` elements a trip (the trip folds
    /// elements `r` to `r + step - 1`; `step` divides [`SUM_BLOCK`] and the range's length).
    pub(crate) fn open_elements_by(
        &self,
        em: &mut ExprEmitter,
        (c0, end, trips): (&str, &str, u64),
        accs: &[Vec<String>],
        step: u64,
    ) -> (Vec<Vec<String>>, Option<SumBlocks>) {
        if !self.sum || trips <= SUM_BLOCK {
            em.open_loop(
                &format!("for (var r: u32 = {c0}; r < {end}; r = r + {step}u)"),
                trips.div_ceil(step),
            );
            return (accs.to_vec(), None);
        }
        let b = SUM_BLOCK;
        em.open_loop(
            &format!("for (var rb: u32 = {c0}; rb < {end}; rb = rb + {b}u)"),
            trips.div_ceil(b),
        );
        let blocks: Vec<Vec<String>> = accs
            .iter()
            .map(|acc| acc.iter().map(|_| block_accumulator(em)).collect())
            .collect();
        em.open_loop(
            &format!("for (var r: u32 = rb; r < min(rb + {b}u, {end}); r = r + {step}u)"),
            b / step,
        );
        (
            blocks,
            Some(SumBlocks {
                totals: accs.to_vec(),
            }),
        )
    }

    /// Closes the element loop `open_elements` opened, adding the blocks' sums to the totals.
    pub(crate) fn close_elements(
        &self,
        em: &mut ExprEmitter,
        folded: &[Vec<String>],
        blocks: Option<SumBlocks>,
    ) {
        em.close(None);
        if let Some(b) = blocks {
            for (total, blk) in b.totals.iter().zip(folded) {
                em.line(&combine(&self.f, self.n, total, blk));
            }
            em.close(None);
        }
    }

    /// The declarations that follow those of the accumulators `acc` (initialized).
    pub(crate) fn declare(&self, acc: &[String]) -> Option<String> {
        self.extremum?;
        let a = &acc[0];
        Some(format!(
            "var {a}_nan: u32 = bitcast<u32>({a}) & 0x7fffffffu;"
        ))
    }

    /// Statements folding elements `vals` into `acc`.
    pub(crate) fn element(&self, acc: &[String], vals: &[String]) -> String {
        let Some(e) = self.extremum else {
            return combine(&self.f, self.n, acc, vals);
        };
        let (a, v) = (&acc[0], &vals[0]);
        let fold = match e {
            Extremum::Max => "wh_max_fold_f32",
            Extremum::Min => "wh_min_fold_f32",
        };
        format!(
            "{{ let e = {v}; {a} = {fold}({a}, e); {a}_nan = max({a}_nan, bitcast<u32>(e) & \
             0x7fffffffu); }}"
        )
    }

    /// Statements after the element loops, before `acc` is combined or stored: a NaN seen
    /// makes the accumulator NaN.
    pub(crate) fn finish(&self, acc: &[String]) -> Option<String> {
        self.extremum?;
        let a = &acc[0];
        Some(format!(
            "{a} = select({a}, bitcast<f32>({a}_nan), {a}_nan > 0x7f800000u);"
        ))
    }
}

/// Declares a block accumulator of an f32 sum ([`SUM_BLOCK`]), started from -0 (the identity
/// of IEEE addition, so a sum of -0s stays -0), and returns its name.
pub(crate) fn block_accumulator(em: &mut ExprEmitter) -> String {
    let v = em.fresh("blk");
    em.line(&format!("var {v}: f32 = -0.0f;"));
    v
}

/// Whether `body` adds its two f32 arguments (a sum), in either order.
pub(crate) fn is_f32_sum(body: &Region, types: &[Compute]) -> bool {
    let [a, b] = body.args[..] else {
        return false;
    };
    let [op, ret] = &body.ops[..] else {
        return false;
    };
    types == [Compute::F32]
        && ret.op == Op::Return
        && ret.operands == op.results
        && op.results.len() == 1
        && (op.operands == [a, b] || op.operands == [b, a])
        && op.op == Op::Binary(BinaryOp::Add)
}

/// Statements combining `acc` with `vals` through body function `f` (assigning `acc`).
pub fn combine(f: &str, n: usize, acc: &[String], vals: &[String]) -> String {
    let args = [acc, vals].concat().join(", ");
    if n == 1 {
        format!("{} = {f}({args});", acc[0])
    } else {
        let mut s = format!("{{ let c = {f}({args}); ");
        for (i, a) in acc.iter().enumerate() {
            s.push_str(&format!("{a} = c.r{i}; "));
        }
        s.push('}');
        s
    }
}

pub(crate) fn region_defs<'a>(
    r: &'a Region,
    out: &mut HashMap<ValueId, &'a Operation>,
    vals: &mut HashSet<ValueId>,
) {
    for op in &r.ops {
        for v in &op.results {
            out.insert(*v, op);
            vals.insert(*v);
        }
        for sub in &op.regions {
            region_defs(sub, out, vals);
        }
    }
}

/// Emits the reduce kernel for `group` (root `op`, a `reduce`).
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    emit_stage(name, f, defs, group, op, target, None, None, true).map(|(k, _)| k)
}

/// The reduce of `group` as a plan: one kernel when every invocation stays within
/// `target.max_invocation_iterations`, else a multi-stage reduction — partial results over
/// chunks of the reduced elements, then folds of the partials (as many as needed). A kernel
/// that cannot be split (boolean outputs, a body too costly per element) is returned as is,
/// for the compile driver to refuse.
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Plan> {
    let (kernel, func) = emit_stage(name, f, defs, group, op, target, None, None, true)?;
    let bound = target.max_invocation_iterations;
    let single = |k: Kernel| Ok(Plan::sequential(vec![k], Vec::new()));
    if kernel
        .inputs
        .iter()
        .any(|b| large(&b.ty, target.max_binding_size))
    {
        // Windows split the thread- or workgroup-per-output form. Where they cannot (a large
        // tensor read at other elements than the accumulator's own: a slice or concatenation
        // of it, reductions over both leading and trailing dimensions), the kernels below
        // read it whole, bound in parts (`super::parted`).
        let (wk, wfunc) = emit_stage(name, f, defs, group, op, target, None, None, false)?;
        match windowed(name, f, defs, group, op, target, wk, &wfunc) {
            Err(e) if e.kind == crate::error::ErrorKind::ResourceExhausted => {
                log::debug!("{name}: not in windows, bound in parts: {e}");
            }
            plan => return plan,
        }
    }
    let Op::Reduce { dimensions } = &op.op else {
        return single(kernel);
    };
    let Some(in_ty) = f.values.get(op.operands[0].index()).and_then(|t| match t {
        crate::ir::Type::Tensor(t) => Some(t.clone()),
        _ => None,
    }) else {
        return single(kernel);
    };
    let dims = in_ty.dims();
    let red: u64 = (0..dims.len())
        .filter(|d| dimensions.contains(&(*d as i64)))
        .map(|d| dims[d] as u64)
        .product();
    let outs = &kernel.outputs;
    let out_count = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    // Too few outputs to fill the device (a full reduction is one workgroup): cut the reduced
    // elements into more chunks, each still long enough to pay for its partial.
    let spread = red / PARALLEL_CHUNK_MIN >= 2 && out_count < PARALLEL_ACCUMULATORS;
    // Partials of packed narrow results in their wide types (f32 for bf16/f16): the last
    // fold rounds and packs.
    let Some((wides, types)) = partials::wides(outs) else {
        return single(kernel);
    };
    // Few columns of many rows on a CPU adapter: chunks of rows, four columns per thread.
    let quads = quad_split(f, op, &in_ty, dimensions, out_count, target);
    // Too few column tiles of many rows on a GPU: chunks of rows, a workgroup each.
    let tile_chunks = tile_split(&in_ty, dimensions, target);
    if kernel.iterations <= bound && !spread && quads.is_none() && tile_chunks.is_none() {
        return single(kernel);
    }
    // Shrink the chunk until one invocation's loops fit the bound.
    let mut chunk = red.div_ceil(kernel.iterations.div_ceil(bound).max(2));
    if let Some(chunks) = quads.or(tile_chunks) {
        chunk = chunk.min(red.div_ceil(chunks));
    } else if spread {
        let wanted = PARALLEL_ACCUMULATORS.div_ceil(out_count.max(1));
        let most = red / PARALLEL_CHUNK_MIN;
        chunk = chunk.min(red.div_ceil(wanted.min(most).max(2)));
    }
    let mut stage = None;
    while chunk >= 1 {
        let chunks = red.div_ceil(chunk);
        let temps: Vec<Binding> = wides
            .iter()
            .enumerate()
            .map(|(i, &w)| partials::binding(i, w, out_count * chunks))
            .collect();
        let split = Split {
            chunks,
            chunk,
            partials: temps,
            chunk_major: None,
            quads: quads.is_some(),
            workgroups: false,
        };
        if let Some(k) = fitting_stage(name, f, defs, group, op, target, &split, None, true)? {
            stage = Some((k, split));
            break;
        }
        chunk /= 2;
    }
    let Some((first, split)) = stage else {
        return single(kernel);
    };
    let n = types.len();
    let combine_fn = move |acc: &[String], vals: &[String]| combine("reducer", n, acc, vals);
    partials::fold(
        name,
        first,
        split.partials,
        out_count,
        split.chunks,
        kernel.outputs.clone(),
        &types,
        &func,
        &combine_fn,
        op.regions.first().is_some_and(|b| is_f32_sum(b, &types)),
        target,
    )
}

/// The reduce of `group` when it reads a tensor larger than one binding may be (`kernel` is
/// its single-kernel form): a partials stage launched once per window of the large inputs
/// (see `codegen::windows`), each accumulator folding a chunk of the reduced elements of one
/// output, then the usual folds. Full reductions and reductions of trailing dimensions (rows),
/// whose consecutive accumulators read consecutive elements, and reductions of leading
/// dimensions (columns), whose accumulators go chunk-major so that the accumulators of a
/// chunk read consecutive rows; reductions of both leading and trailing dimensions of large
/// tensors, and large results, are refused with RESOURCE_EXHAUSTED.
#[allow(clippy::too_many_arguments)]
fn windowed(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
    kernel: Kernel,
    func: &str,
) -> Result<Plan> {
    let limit = target.max_binding_size;
    let refuse = |why: &str| {
        Error::resource_exhausted(format!(
            "{name}: reads a tensor larger than adapter {}'s max_storage_buffer_binding_size of \
             {limit} bytes, and {why}",
            target.adapter
        ))
    };
    let Op::Reduce { dimensions } = &op.op else {
        return Err(Error::internal("reduce emitter on a non-reduce"));
    };
    if let Some(o) = kernel.outputs.iter().find(|o| large(&o.ty, limit)) {
        return Err(refuse(&format!(
            "its {} result is too large for one binding as well",
            o.ty
        )));
    }
    let in_ty = f
        .values
        .get(op.operands[0].index())
        .and_then(|t| match t {
            crate::ir::Type::Tensor(t) => Some(t.clone()),
            _ => None,
        })
        .ok_or_else(|| Error::internal(format!("{name}: reduce of a non-tensor")))?;
    let dims = in_ty.dims();
    let is_reduced = |d: usize| dimensions.contains(&(d as i64));
    // Rows: no kept dimension (of more than one element) follows a reduced one. Columns: no
    // reduced dimension follows a kept one.
    let follows = |a: bool| {
        let first = (0..dims.len()).find(|&d| is_reduced(d) == a && dims[d] > 1);
        first.is_some_and(|f| (f..dims.len()).any(|d| is_reduced(d) != a && dims[d] > 1))
    };
    let column = follows(true);
    if column && follows(false) {
        return Err(refuse(
            "reductions of such tensors over both leading and trailing dimensions are not \
             supported",
        ));
    }
    let red: u64 = (0..dims.len())
        .filter(|&d| is_reduced(d))
        .map(|d| dims[d] as u64)
        .product();
    let kept: u64 = (0..dims.len())
        .filter(|&d| !is_reduced(d))
        .map(|d| dims[d] as u64)
        .product();
    let Some((wides, types)) = partials::wides(&kernel.outputs) else {
        return Err(refuse(&format!(
            "its result types have no partials ({})",
            kernel
                .outputs
                .first()
                .map_or(String::new(), |o| o.ty.to_string())
        )));
    };
    let large_types: Vec<_> = kernel
        .inputs
        .iter()
        .filter(|b| large(&b.ty, limit))
        .map(|b| b.ty.dtype)
        .collect();
    let multiple = windows::element_multiple(&large_types, target.min_binding_offset_alignment, 1);
    let window = windows::window_elements(name, &large_types, multiple, &target)?;
    if window < 2 * multiple {
        return Err(refuse("its windows would hold too few elements"));
    }
    // Chunks short enough for the loop bound and for at least one per window, of a power of
    // two elements: partial sums of equal terms then stay exact in floating point as far as
    // one long sum would (a sum of 2^26 ones is 2^26, not 4 less).
    let bound = target.max_invocation_iterations;
    // A column chunk spans `chunk` whole rows of `kept` elements.
    let span = if column {
        (window - multiple + 1) / kept
    } else {
        window / 2
    };
    if span == 0 {
        return Err(refuse(&format!(
            "its rows of {kept} elements do not fit one binding"
        )));
    }
    // The chunks, the stage and its accumulators per launch: `workgroups` takes a workgroup
    // per chunk, whose chunks may be longer (fewer partials), else (CPU adapters) the subgroup
    // row form where it applies and fits, or a thread per chunk.
    let select = |workgroups: bool| -> Result<(Kernel, Split, u64)> {
        let most = if workgroups { span } else { WINDOW_CHUNK_MAX };
        let chunk = if kernel.iterations > bound {
            red.div_ceil(kernel.iterations.div_ceil(bound).max(2))
        } else {
            red
        }
        .min(span)
        .clamp(1, most.max(1));
        let mut chunk = if chunk < red {
            1 << chunk.ilog2()
        } else {
            chunk
        };
        loop {
            let chunks = red.div_ceil(chunk);
            // Accumulators per launch: `per` chunks of at most `chunk` consecutive elements,
            // after a window start at most `multiple - 1` elements before the first; of
            // columns, whole chunks of rows.
            let per = if column {
                (window - multiple + 1) / (chunk * kept) * kept
            } else {
                (window - multiple + 1) / chunk
            };
            let split = Split {
                chunks,
                chunk,
                partials: wides
                    .iter()
                    .enumerate()
                    .map(|(i, &w)| partials::binding(i, w, kept * chunks))
                    .collect(),
                chunk_major: column.then_some(kept),
                quads: false,
                workgroups,
            };
            let rows = !workgroups;
            if let Some(k) =
                fitting_stage(name, f, defs, group, op, target, &split, Some(per), rows)?
            {
                return Ok((k, split, per));
            }
            if chunk == 1 {
                return Err(refuse("its reduction body is too long for the loop bound"));
            }
            chunk /= 2;
        }
    };
    let too_large = |s: &Split| s.partials.iter().any(|p| large(&p.ty, limit));
    let (first, split, per) = match select(false)? {
        // Short chunks' partials outgrowing a binding (a low binding limit, or a low loop
        // bound): a workgroup per chunk.
        picked if too_large(&picked.1) => select(true)?,
        picked => picked,
    };
    let (chunks, chunk) = (split.chunks, split.chunk);
    if let Some(p) = split.partials.iter().find(|p| large(&p.ty, limit)) {
        return Err(refuse(&format!(
            "its partial results ({}) are too large for one binding as well",
            p.ty
        )));
    }
    // The elements accumulators `o0..o1` read.
    let elements = |o0: u64, o1: u64| {
        if column {
            let (c0, c1) = (o0 / kept, (o1 - 1) / kept + 1);
            (c0 * chunk * kept, (c1 * chunk).min(red) * kept)
        } else {
            let start = (o0 / chunks) * red + (o0 % chunks) * chunk;
            let last = o1 - 1;
            (
                start,
                (last / chunks) * red + ((last % chunks + 1) * chunk).min(red),
            )
        }
    };
    let bindings: Vec<Binding> = first.inputs.iter().chain(&first.outputs).cloned().collect();
    let accumulators = kept * chunks;
    let mut launches = Vec::new();
    let mut o0 = 0;
    while o0 < accumulators {
        let o1 = (o0 + per).min(accumulators);
        let (e0, e1) = elements(o0, o1);
        launches.push(windows::chunk(
            &bindings,
            &|b: &Binding| b.value != PARAMS && large(&b.ty, limit),
            (o0, o1),
            (e0 / multiple * multiple, e1),
        )?);
        o0 = o1;
    }
    let n = types.len();
    let combine_fn = move |acc: &[String], vals: &[String]| combine("reducer", n, acc, vals);
    let mut plan = partials::fold(
        name,
        first,
        split.partials,
        kept,
        chunks,
        kernel.outputs.clone(),
        &types,
        func,
        &combine_fn,
        op.regions.first().is_some_and(|b| is_f32_sum(b, &types)),
        target,
    )?;
    match plan.launches.first_mut() {
        Some(l) if l.kernel == 0 => *l = Launch::chunked(0, launches),
        _ => {
            return Err(Error::internal(format!(
                "{name}: fold plan without its first stage"
            )))
        }
    }
    Ok(plan)
}

/// The partials stage of `split` (launched over `windowed` accumulators at a time, if so) in
/// the subgroup row form where it applies (and `subgroup_rows`) and fits the loop bound, else
/// in the other forms, whose loops are shorter for the same chunk (no loop over a workgroup's
/// rows); `None` when none fits.
#[allow(clippy::too_many_arguments)]
fn fitting_stage(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
    split: &Split,
    windowed: Option<u64>,
    subgroup_rows: bool,
) -> Result<Option<Kernel>> {
    let forms: &[bool] = if subgroup_rows {
        &[true, false]
    } else {
        &[false]
    };
    for &rows in forms {
        let (k, _) = emit_stage(
            &format!("{name}_partials"),
            f,
            defs,
            group,
            op,
            target,
            Some(split),
            windowed,
            rows,
        )?;
        if k.iterations <= target.max_invocation_iterations {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// Elements a chunk of a windowed stage ([`windowed`]) takes at most. The subgroup row form
/// would fit chunks of 262144 of a long row in the loop bound, but then each lane added
/// 1024 blocks into one accumulator in sequence (row sums of 64 x 2^20: 1.9e-7 off float64,
/// jax cpu 9e-8); the thread form's chunks are this long anyway, and the folds of their
/// partials are compensated.
const WINDOW_CHUNK_MAX: u64 = 1 << 14;

/// Rows reduced per thread at least when [`quad_split`] cuts a reduction into chunks.
const QUAD_CHUNK_MIN: u64 = 256;

/// Rows of a chunk when [`quad_split`] cuts a wide column reduction (columns enough for the
/// cores without chunks) of at least [`WIDE_SPLIT_MIN`] elements.
const WIDE_CHUNK: u64 = 256;

/// Input elements from which [`quad_split`] cuts wide column reductions into chunks: below
/// it (1024 x 1024 sums, 4 MiB) the input stays in the host's caches and the second
/// kernel costs more than the chunks save.
const WIDE_SPLIT_MIN: u64 = 1 << 21;

/// Rows a chunk of a split column-tile reduction takes at most: each invocation folds at
/// most `COLUMN_CHUNK / (WORKGROUP / COLUMN_TILE)` = 32 elements, eight trips of four reads.
const COLUMN_CHUNK: u64 = 256;

/// Chunks a column-tile reduction is split into at most (each output then folds that many
/// partials in a second kernel).
const COLUMN_CHUNKS_MAX: u64 = 1024;

/// The chunks of rows a column reduction on a GPU adapter (the innermost input dimension
/// kept, at least half a tile wide) is split into: a GPU hides the latency of its reads with
/// many workgroups, not long loops. A 4096 x 4096 column sum as 128 tiles had each invocation
/// fold 512 rows on 128 workgroups; in chunks of 256 rows it is 2048 workgroups of 32 rows
/// each, then a fold of 16 partials per output. A bias gradient's `sum(axis=0)` of 25088 x 32
/// is one tile: 98 chunks.
fn tile_split(in_ty: &crate::ir::TensorType, dimensions: &[i64], target: Target) -> Option<u64> {
    let dims = in_ty.dims();
    if !column_tiles_fit(target, &dims, dimensions) {
        return None;
    }
    let red = reduced_count(&dims, dimensions)?;
    if red < 2 * COLUMN_CHUNK {
        return None;
    }
    Some(red.div_ceil(COLUMN_CHUNK).min(COLUMN_CHUNKS_MAX))
}

/// The number of elements each output of a reduction of `dims` over `dimensions` folds;
/// `None` for a dimension out of range.
fn reduced_count(dims: &[usize], dimensions: &[i64]) -> Option<u64> {
    dimensions
        .iter()
        .map(|&d| dims.get(usize::try_from(d).ok()?).map(|&n| n as u64))
        .product()
}

/// Whether a reduction of `dims` over `dimensions` reads columns the column-tile way: a GPU
/// adapter, the innermost dimension kept and at least half a tile wide (narrower rows leave
/// most of a tile's invocations idle, while a workgroup per output reads them nearly
/// coalesced already), and `WGPU_HLO_COLUMN_TILES=0` not set.
fn column_tiles_fit(target: Target, dims: &[usize], dimensions: &[i64]) -> bool {
    let Some(last) = dims.len().checked_sub(1) else {
        return false;
    };
    !target.cpu_adapter
        && !dimensions.contains(&(last as i64))
        && !dimensions.is_empty()
        && dims[last] as u64 >= COLUMN_TILE / 2
        && !crate::fusion::switched_off("WGPU_HLO_COLUMN_TILES")
}

/// Threads of four-columns-per-thread reductions that give every core two workgroups of
/// [`QUAD_COLUMN_WORKGROUP`]: fewer groups of columns are cut into chunks of rows
/// ([`quad_split`]), more let a thread take several groups (`emit_stage`).
fn quad_threads_wanted() -> u64 {
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get() as u64);
    2 * u64::from(QUAD_COLUMN_WORKGROUP) * cores
}

/// On CPU adapters, a reduction over leading dimensions into few columns (the innermost
/// input dimension kept, a multiple of 4; 32-bit results), such as the bias gradient of a
/// convolution (25088 rows into 32): the number of chunks of rows that gives the cores
/// two workgroups of four-columns-per-thread partials each, or `None` when the columns alone
/// do (or the rows are too few to cut). Without it such a reduction takes a workgroup per
/// output, reading element by element (`WGPU_HLO_QUAD_READS=0`: never).
///
/// Columns enough for the cores, but many rows of a large input: chunks of [`WIDE_CHUNK`]
/// rows (`WGPU_HLO_COLUMN_CHUNKS=0`: none). A thread walking down its columns reads each
/// row on a page of its own; over 4096 rows the pages of one batch of lanes outrun what the
/// host's TLB and caches keep for the next batch, which reads the same rows' next columns.
/// In chunks the batches of a workgroup share each chunk's pages (lavapipe on the AMD EPYC
/// host of 12-01, kernel times: 4096 x 4096 sums 23-30 -> 8-11 ms through a texture;
/// 16384 x 1024 31 -> 18 ms, 2048 x 2048 11 -> 5-6 ms end to end as `vec4`s).
/// Since 12-02 fewer columns of a large input take chunks of [`WIDE_CHUNK`] rows as well
/// (`WGPU_HLO_NARROW_CHUNKS=0`: two or a few chunks, as before), which leaves their threads
/// enough for several groups each (`emit_stage`). Lavapipe, 2-core Intel host, min of 10
/// calls, two pairs: 16384 x 1000 sums 15-17 -> 7.1-7.3 ms; 100000 x 64 4.6-5.0 -> 2.7,
/// 65536 x 128 7.1-8.1 -> 3.2-3.3, 32768 x 256 7.6-8.3 -> 3.3-3.5, 8192 x 784 7.0 -> 3.5-3.7,
/// 8192 x 512 3.9-4.2 -> 1.8-2.8; 1048576 x 16 22-24 either way (one group of a 64-byte row
/// per thread).
fn quad_split(
    f: &Function,
    op: &Operation,
    in_ty: &crate::ir::TensorType,
    dimensions: &[i64],
    out_count: u64,
    target: Target,
) -> Option<u64> {
    use crate::ir::ElementType as E;
    let dims = in_ty.dims();
    let last = dims.len().checked_sub(1)?;
    let words = op.results.iter().all(|&r| {
        matches!(f.ty(r), crate::ir::Type::Tensor(t) if matches!(t.dtype, E::F32 | E::I32 | E::U32))
    });
    if !target.cpu_adapter
        || !words
        || dimensions.contains(&(last as i64))
        || dims[last] % 4 != 0
        || crate::fusion::switched_off("WGPU_HLO_QUAD_READS")
    {
        return None;
    }
    let red = reduced_count(&dims, dimensions)?;
    let wanted = quad_threads_wanted();
    let quads = out_count / 4;
    let wide = red >= 2 * WIDE_CHUNK
        && out_count.saturating_mul(red) >= WIDE_SPLIT_MIN
        && !crate::fusion::switched_off("WGPU_HLO_COLUMN_CHUNKS");
    if wide && (quads >= wanted || !crate::fusion::switched_off("WGPU_HLO_NARROW_CHUNKS")) {
        return Some(red.div_ceil(WIDE_CHUNK));
    }
    if quads >= wanted {
        return None;
    }
    if quads == 0 || red < 2 * QUAD_CHUNK_MIN {
        return None;
    }
    Some(wanted.div_ceil(quads).min(red / QUAD_CHUNK_MIN).max(2))
}

/// A reduce input's dimensions split into the reduced and the kept ones (positions, in
/// order), their sizes, and their element counts.
pub(crate) struct ReducedDims {
    pub reduced: Vec<usize>,
    pub kept: Vec<usize>,
    pub red_dims: Vec<usize>,
    pub kept_dims: Vec<usize>,
    pub red_count: u64,
    pub kept_count: u64,
}

impl ReducedDims {
    /// The split of an input of `dims` by a reduce over `dimensions`.
    pub(crate) fn of(dims: &[usize], dimensions: &[i64]) -> ReducedDims {
        let reduced: Vec<usize> = (0..dims.len())
            .filter(|d| dimensions.contains(&(*d as i64)))
            .collect();
        let kept: Vec<usize> = (0..dims.len())
            .filter(|d| !dimensions.contains(&(*d as i64)))
            .collect();
        let red_dims: Vec<usize> = reduced.iter().map(|&d| dims[d]).collect();
        let kept_dims: Vec<usize> = kept.iter().map(|&d| dims[d]).collect();
        let red_count = red_dims.iter().product::<usize>() as u64;
        let kept_count = kept_dims.iter().product::<usize>() as u64;
        ReducedDims {
            reduced,
            kept,
            red_dims,
            kept_dims,
            red_count,
            kept_count,
        }
    }
}

/// A chunked stage of a multi-stage reduction: each output's reduced elements are cut into
/// `chunks` chunks of `chunk`, and partial `c` of output `o` goes to element `o * chunks + c`
/// of `partials` (one binding per result).
struct Split {
    chunks: u64,
    chunk: u64,
    partials: Vec<Binding>,
    /// `Some(kept)`: accumulators in chunk-major order instead (accumulator `o` computes
    /// chunk `o / kept` of output `o % kept`, still stored at `(o % kept) * chunks + o / kept`),
    /// so that consecutive accumulators of a column reduction read consecutive elements.
    chunk_major: Option<u64>,
    /// The stage reads four columns per thread ([`quad_split`]).
    quads: bool,
    /// A windowed stage takes a workgroup per chunk on CPU adapters too (its chunks are long,
    /// so that its partials fit one binding).
    workgroups: bool,
}

/// The reduce kernel, or with `split` a chunked partials stage; also returns the WGSL of the
/// reducer function. `windowed`: the stage of [`windowed`], launched over that many
/// accumulators at a time, binding 0 holding the launch's first accumulator and the first
/// element of its windows of the large inputs.
#[allow(clippy::too_many_arguments)]
fn emit_stage(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
    split: Option<&Split>,
    windowed: Option<u64>,
    subgroup_rows: bool,
) -> Result<(Kernel, String)> {
    let Op::Reduce { dimensions } = &op.op else {
        return Err(Error::internal("reduce emitter on a non-reduce"));
    };
    let n = op.results.len();
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("reduce without a body"))?;
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| group.members.contains(&v) || body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    if windowed.is_some() {
        em.inputs.push(windows::params_binding());
        em.window = Some(Window::new(target.max_binding_size, "ebase"));
    }

    let in_ty = em.ty(op.operands[0])?.clone();
    let outs: Vec<Binding> = em.bindings(&op.results)?;
    let types: Vec<Compute> = outs
        .iter()
        .map(|o| em.compute(o.ty.dtype))
        .collect::<Result<_>>()?;
    let dims = in_ty.dims();
    let ReducedDims {
        reduced,
        kept,
        red_dims,
        kept_dims,
        red_count,
        kept_count,
    } = ReducedDims::of(&dims, dimensions);
    // Invocations (or workgroups) compute `out_count` accumulators, each over the reduced
    // elements from `o % chunks * chunk` to at most `chunk` further, for output `o / chunks`.
    let (chunks, chunk) = split.map_or((1, red_count), |s| (s.chunks, s.chunk));
    let major = split.and_then(|s| s.chunk_major).filter(|_| chunks > 1);
    let out_count = kept_count * chunks;
    let red_len = chunk.min(red_count);
    let outs = match split {
        Some(s) => s.partials.clone(),
        None => outs,
    };

    let fname = "reducer";
    let func = emit_body_function(&mut em, fname, body, &types)?;
    let fold = Fold::new(fname, body, &types);
    for o in &outs {
        for h in dtype::helpers_for(o.ty.dtype) {
            em.needs.insert(h.to_string());
        }
    }
    let packed = outs.iter().any(|o| dtype::per_word(o.ty.dtype) > 1);
    // CPU adapters emulate workgroup barriers at a high cost: with enough outputs to keep the
    // cores busy, one thread per output folding sequentially is faster there (lavapipe,
    // 1000x1000 sums: 16 ms -> 4 ms, softmax 52 -> 27 ms).
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    // Windowed stages (tensors over the binding limit) always take it there: their chunks
    // keep at least 1024 accumulators busy. A workgroup per chunk had each 8-lane batch
    // sweep the whole chunk in steps of 256 elements (a 4 MiB row read 16 times over), or
    // for columns every workgroup read every row: lavapipe, column sums of 2^20 x 64
    // 624 -> 107 ms, row sums of 64 x 2^20 196 -> 78 ms.
    let workgroups = split.is_some_and(|s| s.workgroups);
    let barriers_are_slow =
        target.cpu_adapter && !workgroups && (out_count >= 64 * cores || windowed.is_some());
    // Boolean partials (split `any`/`all`) stay on the thread-per-output path.
    let quad_stage = split.is_some_and(|s| s.quads);
    let use_workgroup = red_len >= WORKGROUP_REDUCE_MIN
        && !packed
        && !barriers_are_slow
        && !quad_stage
        && !types.contains(&Compute::Bool);
    // Rows (the reduced dimensions trail the kept ones): a subgroup per row reads it with
    // consecutive lanes and combines through shuffles, no workgroup memory nor barriers.
    let trailing = kept
        .iter()
        .all(|&k| dims[k] <= 1 || reduced.iter().all(|&r| r > k || dims[r] <= 1));
    let shuffles = types
        .iter()
        .all(|t| matches!(t, Compute::F32 | Compute::I32 | Compute::U32));
    let enough_rows = if target.cpu_adapter {
        out_count >= 2 * SUBGROUP_ROWS
    } else {
        kept_count >= 256 || red_count <= 1024
    };
    let quad_rows = target.cpu_adapter
        && trailing
        && red_count % 4 == 0
        && chunk % 4 == 0
        && !crate::fusion::switched_off("WGPU_HLO_QUAD_READS");
    // A split stage's accumulators are rows too: each a chunk of its output's row, stored at
    // its own index (`o * chunks + c`, the partials' order). So are a windowed stage's of
    // rows (CPU adapters, rows and chunks in groups of four: its windows hold whole groups).
    // Short rows on CPU adapters: a thread per row, reading its row by groups of four.
    let row_quads = target.cpu_adapter
        && trailing
        && !packed
        && windowed.is_none()
        && major.is_none()
        && !quad_stage
        && red_count % 4 == 0
        && (chunks == 1 || chunk % 4 == 0)
        && red_count <= row_quads_max()
        && !crate::fusion::switched_off("WGPU_HLO_QUAD_READS");
    let use_subgroup_rows = subgroup_rows
        && !row_quads
        && subgroup_rows_allowed()
        && major.is_none()
        && !quad_stage
        && (windowed.is_none() || quad_rows)
        && target.caps.subgroup
        && !packed
        && shuffles
        && trailing
        && red_count >= SUBGROUP_ROWS_MIN
        && enough_rows;
    // Columns on GPU adapters (the innermost input dimension is kept): a workgroup per
    // COLUMN_TILE consecutive outputs, whose invocations read COLUMN_TILE consecutive
    // elements of each row (see the branch below).
    let tiles = kept_count.div_ceil(COLUMN_TILE);
    let use_column_tiles = use_workgroup
        && windowed.is_none()
        && major.is_none()
        && !trailing
        && column_tiles_fit(target, &dims, dimensions);
    // Fresh accumulators, one per result, each starting at its init value.
    let new_accs = |em: &mut ExprEmitter| -> Result<Vec<String>> {
        let mut acc = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let init = em.value(op.operands[n + i], &Index::scalar())?;
            let a = em.fresh("acc");
            em.line(&format!("var {a}: {} = {init};", t.wgsl()));
            acc.push(a);
        }
        if let Some(d) = fold.declare(&acc) {
            em.line(&d);
        }
        Ok(acc)
    };
    // Columns (the innermost input dimension kept, a multiple of 4) on the thread-per-output
    // path of CPU adapters: four outputs per thread, reading groups of four (quad reads).
    let quad_columns = target.cpu_adapter
        && !use_subgroup_rows
        && !use_workgroup
        && (split.is_none() || quad_stage)
        && major.is_none()
        && windowed.is_none()
        && !packed
        && !trailing
        && red_count > 0
        && kept.last() == Some(&(dims.len() - 1))
        && dims.last().is_some_and(|&d| d % 4 == 0)
        && types
            .iter()
            .all(|t| matches!(t, Compute::F32 | Compute::I32 | Compute::U32))
        && !crate::fusion::switched_off("WGPU_HLO_QUAD_READS");
    // The output and first reduced element of accumulator `o`, and where it is stored (WGSL).
    let chunk_of = |em: &mut ExprEmitter, o: &str| -> (String, String, String) {
        if chunks == 1 {
            return (o.to_string(), "0u".to_string(), o.to_string());
        }
        let (ko, c0) = (em.fresh("ko"), em.fresh("c0"));
        if let Some(kept) = major {
            em.line(&format!("let {ko} = {o} % {kept}u;"));
            em.line(&format!("let {c0} = ({o} / {kept}u) * {chunk}u;"));
            let at = format!("{ko} * {chunks}u + {o} / {kept}u");
            return (ko, c0, at);
        }
        em.line(&format!("let {ko} = {o} / {chunks}u;"));
        em.line(&format!("let {c0} = ({o} % {chunks}u) * {chunk}u;"));
        (ko, c0, o.to_string())
    };
    let end = |c0: &str| {
        if chunks == 1 {
            format!("{red_count}u")
        } else {
            format!("min({c0} + {chunk}u, {red_count}u)")
        }
    };

    // The input element at (output index `o` expressed per kept dim, reduced linear `r`).
    let input_index = |em: &mut ExprEmitter, o: &str, r: &str| -> Index {
        let om = em.multi(&Index::Linear(o.to_string()), &kept_dims);
        let rm = em.multi(&Index::Linear(r.to_string()), &red_dims);
        let mut idx = vec![String::new(); dims.len()];
        for (k, &d) in kept.iter().enumerate() {
            idx[d] = om[k].clone();
        }
        for (k, &d) in reduced.iter().enumerate() {
            idx[d] = rm[k].clone();
        }
        // Windowed inputs may be read here: element `ko * red_count + r` when reduced
        // dimensions trail (`windowed` checks).
        if let Some(w) = em.window.as_mut() {
            w.own.insert(linearize(&idx, &dims));
        }
        // Reduced dimensions trailing the kept ones: the element is `o * red_count + r`,
        // without splitting and rejoining the indices.
        if trailing {
            let lin = if kept_count <= 1 {
                r.to_string()
            } else {
                format!("({o} * {red_count}u + {r})")
            };
            if let Some(w) = em.window.as_mut() {
                w.own.insert(lin.clone());
            }
            return Index::Linear(lin);
        }
        Index::Multi(idx)
    };

    let mut main = String::new();
    let mut shared = String::new();
    let workgroups;
    if use_subgroup_rows {
        // `wg_rows` rows per workgroup, each subgroup taking its share of them in turn
        // (windowed launches keep SUBGROUP_ROWS).
        let wg_rows = if windowed.is_some() {
            SUBGROUP_ROWS
        } else {
            workgroup_rows(&target, out_count, red_len)
        };
        // Lanes beyond the workgroup's size (a subgroup larger than the workgroup) do not
        // exist, so the lanes and the butterfly span at most SUBGROUP_WORKGROUP lanes.
        // Windowed: rows from the launch's first (`in0[0]`) to its end (`in0[2]`), whose
        // groups are read from its windows (at `ebase`).
        em.line("let g = wid.y * nwg.x + wid.x;");
        em.line(&format!("let w = min(sgs, {SUBGROUP_WORKGROUP}u);"));
        let (first_row, rows_end) = if windowed.is_some() {
            if let Some(w) = em.window.as_mut() {
                w.quads = true;
            }
            em.line("let ebase = in0[1];");
            em.line(&format!("let rend = min(in0[2], {out_count}u);"));
            ("in0[0] + ", "rend".to_string())
        } else {
            ("", format!("{out_count}u"))
        };
        em.open_loop(
            &format!("for (var q: u32 = sgid; q < {wg_rows}u; q = q + nsg)"),
            wg_rows,
        );
        em.line(&format!("let row = {first_row}g * {wg_rows}u + q;"));
        // Accumulator `a` folds chunk `a % chunks` of output `a / chunks` (one chunk, the
        // whole row, unless split), the elements from `rb` to `re`.
        let last_row = if windowed.is_some() {
            format!("max({rows_end}, 1u) - 1u")
        } else {
            format!("{}u", out_count.saturating_sub(1))
        };
        let (rb, re) = if chunks > 1 {
            em.line(&format!("let a = min(row, {last_row});"));
            em.line(&format!("let o = a / {chunks}u;"));
            em.line(&format!("let rb = (a % {chunks}u) * {chunk}u;"));
            em.line(&format!("let re = min(rb + {chunk}u, {red_count}u);"));
            ("rb + ", "re".to_string())
        } else {
            em.line(&format!("let o = min(row, {last_row});"));
            ("", format!("{red_count}u"))
        };
        let mut acc = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let init = em.value(op.operands[n + i], &Index::scalar())?;
            let a = format!("acc{i}");
            em.line(&format!("var {a}: {} = {init};", t.wgsl()));
            acc.push(a);
        }
        if let Some(d) = fold.declare(&acc) {
            em.line(&d);
        }
        // SUBGROUP_UNROLL elements (groups of four with quad reads) per lane and trip (fewer
        // back-edges, more loads in flight), then the rest; at least 4 lanes per subgroup
        // (WGSL's smallest size).
        //
        // Quad reads (CPU adapters): a lane reads four consecutive elements at a time, each
        // 32-bit input as one vec4, which `texture_reads` turns into one texel fetch instead of
        // four. Rows are consecutive elements (`trailing`) and their length is a multiple of 4,
        // so a group starting at a multiple of 4 stays within its row.
        let step = if quad_rows { 4 } else { 1 };
        em.line(&format!("var r: u32 = {rb}sl * {step}u;"));
        // One group of `step` elements from `first` (a WGSL u32), combined into `into`.
        let group = |em: &mut ExprEmitter, first: &str, into: &[String]| -> Result<()> {
            let mut idxs = Vec::new();
            for p in 0..step {
                let name = if p == 0 {
                    first.to_string()
                } else {
                    let rp = em.fresh("rp");
                    em.line(&format!("let {rp} = {first} + {p}u;"));
                    rp
                };
                idxs.push(input_index(em, "o", &name));
            }
            if step == 4 {
                let lin = |i: &Index| match i {
                    Index::Linear(l) => Some(l.clone()),
                    Index::Multi(_) => None,
                };
                let first = idxs.first().and_then(lin);
                // Lane `l` reads group `l` of its row's stretch, and its next groups further on.
                // Groups start at multiples of 4 of a trailing row whose length is a multiple
                // of 4: tensors read at them through broadcasts or reshapes (the operands of
                // a pairwise distance, `x[:, None] - x[None]`) take the group's first
                // coordinates too, and are read by groups (`Quads::rows`).
                let quads = em.quads.get_or_insert_with(|| Quads {
                    folded: Default::default(),
                    streaming: true,
                    any_shape: false,
                    rows: true,
                    ..Quads::default()
                });
                for (p, i) in idxs.iter().enumerate() {
                    if let (Some(l), Some(f)) = (lin(i), first.clone()) {
                        quads.positions.insert(l, (f, p));
                    }
                }
            }
            for idx in &idxs {
                let mut vals = Vec::new();
                for i in 0..n {
                    vals.push(em.value(op.operands[i], idx)?);
                }
                em.line(&fold.element(into, &vals));
            }
            Ok(())
        };
        em.open_loop(
            &format!(
                "for (; r + {}u * w < {re}; r = r + {}u * w)",
                (SUBGROUP_UNROLL - 1) * step,
                SUBGROUP_UNROLL * step
            ),
            red_len.div_ceil(4 * SUBGROUP_UNROLL * step),
        );
        // An f32 sum adds each trip's elements on their own first (`SUM_BLOCK`): a lane's
        // sequential sum of a 100000-element row's share was 2.1e-6 off.
        let trip: Vec<String> = if fold.sum {
            acc.iter().map(|_| block_accumulator(&mut em)).collect()
        } else {
            acc.clone()
        };
        for u in 0..SUBGROUP_UNROLL {
            let ru = em.fresh("ru");
            em.line(&format!("let {ru} = r + {}u * w;", u * step));
            group(&mut em, &ru, &trip)?;
        }
        if fold.sum {
            em.line(&combine(&fold.f, fold.n, &acc, &trip));
        }
        em.close(None);
        em.open_loop(
            &format!("for (; r < {re}; r = r + {step}u * w)"),
            SUBGROUP_UNROLL,
        );
        group(&mut em, "r", &acc)?;
        em.close(None);
        em.quads = None;
        if let Some(f) = fold.finish(&acc) {
            em.line(&f);
        }
        em.open_loop(
            "for (var m: u32 = w >> 1u; m > 0u; m = m >> 1u)",
            u64::from(SUBGROUP_WORKGROUP.trailing_zeros()),
        );
        let other: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        for i in 0..n {
            em.line(&format!("let t{i} = subgroupShuffleXor(acc{i}, m);"));
        }
        em.line(&combine(fname, n, &acc, &other));
        em.close(None);
        em.open(&format!("if (sl == 0u && row < {rows_end})"));
        let slot = if chunks > 1 { "a" } else { "o" };
        for i in 0..n {
            em.line(&format!("out{i}[{slot}] = acc{i};"));
        }
        em.close(None);
        em.close(None);
        workgroups = kernel::grid(
            windowed.unwrap_or(out_count).div_ceil(wg_rows),
            target.max_workgroups,
        )?;
        main.push_str(&format!(
            "@compute @workgroup_size({SUBGROUP_WORKGROUP})\nfn main(@builtin(workgroup_id) wid: \
             vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) \
             sl: u32, @builtin(subgroup_size) sgs: u32, @builtin(subgroup_id) sgid: u32, \
             @builtin(num_subgroups) nsg: u32) {{\n    {} = nwg.z >> 16u;\n",
            kernel::RUNTIME_ZERO
        ));
        main.push_str(&em.body);
        main.push_str("}\n");
    } else if use_column_tiles {
        // A workgroup per COLUMN_TILE consecutive outputs (and per chunk of rows, split):
        // invocation `lid` folds column `lid % COLUMN_TILE` of the tile over every
        // `WORKGROUP / COLUMN_TILE`-th row from row `lid / COLUMN_TILE`, so each row's stretch
        // of the tile is one read of consecutive elements (a workgroup per output had its
        // invocations read single elements a row apart: one useful word in every memory
        // transaction of eight); four rows per trip keep more reads in flight. The row
        // groups' partial results then fold in order through workgroup memory.
        let rows = u64::from(WORKGROUP) / COLUMN_TILE;
        for (i, t) in types.iter().enumerate() {
            shared.push_str(&format!(
                "var<workgroup> sh{i}: array<{}, {WORKGROUP}>;\n",
                t.wgsl()
            ));
        }
        em.line("let g = wid.y * nwg.x + wid.x;");
        em.line(&format!("let tile = g % {tiles}u;"));
        em.line(&format!("let cg = g / {tiles}u;"));
        em.line(&format!("if (cg >= {chunks}u) {{ return; }}"));
        em.line(&format!("let tx = lid % {COLUMN_TILE}u;"));
        em.line(&format!("let ty = lid / {COLUMN_TILE}u;"));
        em.line(&format!("let ko = tile * {COLUMN_TILE}u + tx;"));
        em.line(&format!("let live = ko < {kept_count}u;"));
        let c0 = if chunks > 1 {
            em.line(&format!("let c0 = cg * {chunk}u;"));
            "c0"
        } else {
            "0u"
        };
        // Invocations past the last column fold nothing (but meet the barrier).
        em.line(&format!("let rend = select({c0}, {}, live);", end(c0)));
        let acc = new_accs(&mut em)?;
        em.line(&format!("var r: u32 = {c0} + ty;"));
        let element = |em: &mut ExprEmitter, r: &str| -> Result<()> {
            let idx = input_index(em, "ko", r);
            let mut vals = Vec::new();
            for i in 0..n {
                vals.push(em.value(op.operands[i], &idx)?);
            }
            em.line(&fold.element(&acc, &vals));
            Ok(())
        };
        em.open_loop(
            &format!("for (; r + {}u < rend; r = r + {}u)", 3 * rows, 4 * rows),
            red_len.div_ceil(4 * rows),
        );
        for u in 0..4 {
            let ru = em.fresh("ru");
            em.line(&format!("let {ru} = r + {}u;", u * rows));
            element(&mut em, &ru)?;
        }
        em.close(None);
        em.open_loop(&format!("for (; r < rend; r = r + {rows}u)"), 4);
        element(&mut em, "r")?;
        em.close(None);
        if let Some(f) = fold.finish(&acc) {
            em.line(&f);
        }
        for (i, a) in acc.iter().enumerate() {
            em.line(&format!("sh{i}[lid] = {a};"));
        }
        em.line("workgroupBarrier();");
        em.open("if (ty == 0u && live)");
        em.open_loop(
            &format!("for (var j: u32 = 1u; j < {rows}u; j = j + 1u)"),
            rows,
        );
        let others: Vec<String> = (0..n)
            .map(|i| format!("sh{i}[j * {COLUMN_TILE}u + tx]"))
            .collect();
        em.line(&combine(fname, n, &acc, &others));
        em.close(None);
        for (j, a) in acc.iter().enumerate() {
            if split.is_some() {
                let v = partials::store(types[j], a);
                em.line(&format!("out{j}[ko * {chunks}u + cg] = {v};"));
            } else {
                em.line(&format!("out{j}[ko] = {a};"));
            }
        }
        em.close(None);
        workgroups = kernel::grid(tiles * chunks, target.max_workgroups)?;
        main.push_str(&kernel::entry_header(WORKGROUP));
        main.push_str(&em.body);
        main.push_str("}\n");
    } else if use_workgroup {
        // One workgroup per output element.
        for (i, t) in types.iter().enumerate() {
            shared.push_str(&format!(
                "var<workgroup> sh{i}: array<{}, {WORKGROUP}>;\n",
                t.wgsl()
            ));
        }
        if windowed.is_some() {
            em.line("let o = wid.y * nwg.x + wid.x + in0[0];");
            em.line(&windows::guard("o", out_count));
            em.line("let ebase = in0[1];");
        } else {
            em.line("let o = wid.y * nwg.x + wid.x;");
            em.line(&format!("if (o >= {out_count}u) {{ return; }}"));
        }
        let mut acc = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let init = em.value(op.operands[n + i], &Index::scalar())?;
            let a = format!("acc{i}");
            em.line(&format!("var {a}: {} = {init};", t.wgsl()));
            acc.push(a);
        }
        if let Some(d) = fold.declare(&acc) {
            em.line(&d);
        }
        let (ko, c0, at) = chunk_of(&mut em, "o");
        em.open_loop(
            &format!(
                "for (var r: u32 = {c0} + lid; r < {}; r = r + {WORKGROUP}u)",
                end(&c0)
            ),
            red_len.div_ceil(WORKGROUP as u64),
        );
        let idx = input_index(&mut em, &ko, "r");
        let mut vals = Vec::new();
        for i in 0..n {
            vals.push(em.value(op.operands[i], &idx)?);
        }
        em.line(&fold.element(&acc, &vals));
        em.close(None);
        if let Some(f) = fold.finish(&acc) {
            em.line(&f);
        }
        for i in 0..n {
            em.line(&format!("sh{i}[lid] = acc{i};"));
        }
        em.line("workgroupBarrier();");
        em.open_loop(
            &format!("for (var s: u32 = {}u; s > 0u; s = s >> 1u)", WORKGROUP / 2),
            u64::from(WORKGROUP.trailing_zeros()),
        );
        em.open("if (lid < s)");
        let a: Vec<String> = (0..n).map(|i| format!("acc{i}")).collect();
        let b: Vec<String> = (0..n).map(|i| format!("sh{i}[lid + s]")).collect();
        for i in 0..n {
            em.line(&format!("acc{i} = sh{i}[lid];"));
        }
        em.line(&combine(fname, n, &a, &b));
        for i in 0..n {
            em.line(&format!("sh{i}[lid] = acc{i};"));
        }
        em.close(None);
        em.line("workgroupBarrier();");
        em.close(None);
        em.open("if (lid == 0u)");
        for i in 0..n {
            em.line(&format!("out{i}[{at}] = sh{i}[0];"));
        }
        em.close(None);
        workgroups = kernel::grid(windowed.unwrap_or(out_count), target.max_workgroups)?;
        main.push_str(&kernel::entry_header(WORKGROUP));
        main.push_str(&em.body);
        main.push_str("}\n");
    } else if quad_columns {
        // Four consecutive outputs per thread (CPU adapters): the innermost input dimension
        // is kept and a multiple of 4, so the four outputs' elements of one reduced position
        // are one aligned group, read as one vec4 of each 32-bit input (one texel fetch from
        // a texture instead of four). Workgroups of QUAD_COLUMN_WORKGROUP keep the cores busy
        // with a quarter of the threads.
        // Where the columns are many, a thread takes `per` groups, 8 groups apart: the 8
        // lanes of a SIMD batch then read 8 * per consecutive groups of every row, not 8
        // (4096 x 4096 column sums on lavapipe, hand-written: 14-18 ms with one group per
        // thread, 10.4 ms with 4; each row the batch reads is a page of its own there).
        // The most groups of [`QUAD_GROUPS`] that leave the cores two workgroups each, at
        // most QUAD_ACCUMULATORS_MAX accumulators and padding of at most a QUAD_PAD_DIVISOR-th
        // (below), and whose loop fits QUAD_WGSL_MAX (tried from the same start, `em`
        // cloned). Columns that are no multiple of 8 * per groups (1000 classes) are padded
        // to one: the padding's threads read the last group again and store nothing.
        // With a split, thread `tid` takes chunk `tid / (padded / per)` of its groups.
        let quads = kept_count / 4;
        let wanted = quad_threads_wanted();
        let padding = !crate::fusion::switched_off("WGPU_HLO_QUAD_PADDING");
        let padded_to = |p: u64| {
            if p == 1 {
                quads
            } else {
                quads.div_ceil(8 * p) * 8 * p
            }
        };
        let mut pers: Vec<u64> = quad_groups()
            .into_iter()
            .filter(|&p| {
                let padded = padded_to(p);
                (padded == quads || padding && (padded - quads) * QUAD_PAD_DIVISOR <= quads)
                    && padded / p * chunks >= wanted
                    && p * 4 * n as u64 <= QUAD_ACCUMULATORS_MAX
            })
            .collect();
        pers.push(1);
        let start = em.clone();
        let mut threads = 0;
        for (attempt, &per) in pers.iter().enumerate() {
            em = start.clone();
            let padded = padded_to(per);
            threads = padded / per * chunks;
            let (qt, qc, c0) = if chunks > 1 {
                em.line(&format!("let qt = tid % {}u;", padded / per));
                em.line(&format!("let qc = tid / {}u;", padded / per));
                em.line(&format!("let c0 = qc * {chunk}u;"));
                ("qt", "qc", "c0")
            } else {
                ("tid", "0u", "0u")
            };
            if per > 1 {
                em.line(&format!("let qb = ({qt} / 8u) * {}u + {qt} % 8u;", 8 * per));
            }
            let mut outputs: Vec<String> = Vec::new();
            let mut accs: Vec<Vec<String>> = Vec::new();
            // Per output, the group it stores only if it exists (padding).
            let mut guards: Vec<Option<String>> = Vec::new();
            for g in 0..per {
                let group = if per == 1 {
                    qt.to_string()
                } else if padded > quads {
                    let q = format!("qg{g}");
                    em.line(&format!("let {q} = qb + {}u;", 8 * g));
                    q
                } else {
                    format!("(qb + {}u)", 8 * g)
                };
                let guard = (padded > quads).then(|| format!("{group} < {quads}u"));
                let read = if guard.is_some() {
                    format!("min({group}, {}u)", quads - 1)
                } else {
                    group.clone()
                };
                for e in 0..4 {
                    let o = format!("o{}", g * 4 + e);
                    em.line(&format!("let {o} = {read} * 4u + {e}u;"));
                    outputs.push(o);
                    guards.push(guard.clone());
                    accs.push(new_accs(&mut em)?);
                }
            }
            let stop = end(c0);
            let (folded, blocks) = fold.open_elements(&mut em, (c0, &stop, red_len), &accs);
            // A group's four outputs share their outer coordinates (its first output is a
            // multiple of 4, and so is the innermost extent): the later three take the first's
            // with the innermost coordinate plus their place, so that the group is one load.
            // Computed from each output, the outer coordinates of a reduction over a middle
            // dimension differed in text (`o1 / 1024u`, `o2 / 1024u`, ...), and each output
            // loaded its own `vec4`: lavapipe summed 4 x 2048 x 1024 over its middle dimension
            // in 29 ms, against 6.8 ms for 8192 x 1024 over its rows.
            let mut idxs: Vec<Index> = Vec::new();
            for (k, o) in outputs.iter().enumerate() {
                let shared = match idxs.get(k - k % 4) {
                    Some(Index::Multi(m)) if k % 4 != 0 && !m.is_empty() => Some(m.clone()),
                    _ => None,
                };
                let idx = match shared {
                    Some(mut m) => {
                        let end = m.len() - 1;
                        m[end] = format!("({} + {}u)", m[end], k % 4);
                        Index::Multi(m)
                    }
                    None => input_index(&mut em, o, "r"),
                };
                idxs.push(idx);
            }
            let last = |i: &Index| match i {
                Index::Multi(m) => m.last().cloned(),
                Index::Linear(_) => None,
            };
            em.quads = Some(Quads {
                folded: Default::default(),
                dims: dims.clone(),
                positions: idxs
                    .iter()
                    .enumerate()
                    .filter_map(|(k, i)| Some((last(i)?, (last(&idxs[k - k % 4])?, k % 4))))
                    .collect(),
                // Each thread walks down its four columns, a row apart: from textures (4096 x
                // 4096 column sums, lavapipe on an AMD host: 8.2 ms against 34 ms reading vec4s).
                // With several groups per thread a batch reads 8 * per groups of each row, and
                // then vec4s from the buffer need no texture copy (the same sums on an Intel
                // host, 4 groups per thread, `bench_jax`: 22 ms through a texture, 11.7 as vec4s),
                // except on AMD hosts without chunks, where such vec4s cost three times the
                // texture's fetches and copy (`crate::target::column_reads_as_vec4`).
                streaming: per > 1 && crate::target::column_reads_as_vec4(chunks > 1),
                // Whatever the tensor (a gathered table's rows, a broadcast row): a group of the
                // four columns is four consecutive elements of any tensor read at them whose rows
                // are a multiple of 4 long.
                any_shape: true,
                rows: false,
            });
            for (k, idx) in idxs.iter().enumerate() {
                let mut vals = Vec::new();
                for i in 0..n {
                    vals.push(em.value(op.operands[i], idx)?);
                }
                em.line(&fold.element(&folded[k], &vals));
            }
            em.quads = None;
            fold.close_elements(&mut em, &folded, blocks);
            for acc in &accs {
                if let Some(f) = fold.finish(acc) {
                    em.line(&f);
                }
            }
            for ((o, acc), guard) in outputs.iter().zip(&accs).zip(&guards) {
                if let Some(g) = guard {
                    em.open(&format!("if ({g})"));
                }
                for (j, a) in acc.iter().enumerate() {
                    if split.is_some() {
                        let v = partials::store(types[j], a);
                        em.line(&format!("out{j}[{o} * {chunks}u + {qc}] = {v};"));
                    } else {
                        em.line(&format!("out{j}[{o}] = {a};"));
                    }
                }
                if guard.is_some() {
                    em.close(None);
                }
            }
            // A smaller form when this one's WGSL outgrows the budget (costly fused inputs).
            if em.body.len() - start.body.len() <= QUAD_WGSL_MAX || attempt + 1 == pers.len() {
                break;
            }
        }
        main.push_str(&kernel::entry_header(QUAD_COLUMN_WORKGROUP));
        workgroups = kernel::grid(
            threads.div_ceil(u64::from(QUAD_COLUMN_WORKGROUP)),
            target.max_workgroups,
        )?;
        main.push_str(&kernel::thread_index(QUAD_COLUMN_WORKGROUP));
        main.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
        main.push_str(&em.body);
        main.push_str("}\n");
    } else {
        // A thread per output element; packed outputs: a word of elements per thread.
        let k = outs
            .iter()
            .map(|o| dtype::per_word(o.ty.dtype))
            .max()
            .unwrap_or(1) as u64;
        let threads = out_count.div_ceil(k);
        for (j, o) in outs.iter().enumerate() {
            let p = dtype::per_word(o.ty.dtype) as u64;
            if p > 1 {
                for q in 0..k / p {
                    em.line(&format!("var w{j}_{q}: u32 = 0u;"));
                }
            }
        }
        for e in 0..k {
            let ovar = format!("o{e}");
            em.line(&format!("let {ovar} = tid * {k}u + {e}u;"));
            let guarded = out_count % k != 0;
            if guarded {
                em.open(&format!("if ({ovar} < {out_count}u)"));
            }
            let acc = new_accs(&mut em)?;
            let mut at = ovar.clone();
            if red_count > 0 {
                let (ko, c0, stored) = chunk_of(&mut em, &ovar);
                at = stored;
                let stop = end(&c0);
                let step = if row_quads && k == 1 { 4 } else { 1 };
                let (folded, blocks) = fold.open_elements_by(
                    &mut em,
                    (&c0, &stop, red_len),
                    std::slice::from_ref(&acc),
                    step,
                );
                // With groups: the trip's four elements in order, each group one load.
                let mut idxs = Vec::new();
                let mut positions = HashMap::new();
                for p in 0..step {
                    let r = if p == 0 {
                        "r".to_string()
                    } else {
                        format!("(r + {p}u)")
                    };
                    let idx = input_index(&mut em, &ko, &r);
                    if let (Index::Linear(l), Some(Index::Linear(l0))) = (&idx, idxs.first()) {
                        positions.insert(l.clone(), (l0.clone(), p as usize));
                    } else if let Index::Linear(l) = &idx {
                        positions.insert(l.clone(), (l.clone(), 0));
                    }
                    idxs.push(idx);
                }
                if step > 1 {
                    em.quads = Some(Quads {
                        dims: dims.clone(),
                        positions,
                        // Bound as vec4s rather than read through a texture: 4M f32 summed in
                        // rows of 8 / 32 / 64 took 3.2 / 2.8 / 2.8 ms by texels, 2.5 / 1.9 /
                        // 2.0 ms by vec4s (lavapipe, alternating).
                        streaming: true,
                        any_shape: false,
                        rows: true,
                        folded: Default::default(),
                    });
                }
                for idx in &idxs {
                    let mut vals = Vec::new();
                    for i in 0..n {
                        vals.push(em.value(op.operands[i], idx)?);
                    }
                    em.line(&fold.element(&folded[0], &vals));
                }
                em.quads = None;
                fold.close_elements(&mut em, &folded, blocks);
                if let Some(f) = fold.finish(&acc) {
                    em.line(&f);
                }
            }
            for (j, o) in outs.iter().enumerate() {
                let p = dtype::per_word(o.ty.dtype) as u64;
                if p == 1 {
                    let v = if split.is_some() {
                        partials::store(types[j], &acc[j])
                    } else {
                        acc[j].clone()
                    };
                    em.line(&format!("out{j}[{at}] = {v};"));
                } else {
                    let bits = 32 / p;
                    em.line(&format!(
                        "w{j}_{} = w{j}_{} | ({} << {}u);",
                        e / p,
                        e / p,
                        dtype::to_bits(o.ty.dtype, &acc[j]),
                        (e % p) * bits
                    ));
                }
            }
            if guarded {
                em.close(None);
            }
        }
        for (j, o) in outs.iter().enumerate() {
            let p = dtype::per_word(o.ty.dtype) as u64;
            if p > 1 {
                let words = out_count.div_ceil(p);
                for q in 0..k / p {
                    let w = format!("tid * {}u + {q}u", k / p);
                    em.line(&format!(
                        "if ({w} < {words}u) {{ out{j}[{w}] = w{j}_{q}; }}"
                    ));
                }
            }
        }
        main.push_str(&kernel::entry_header(WORKGROUP));
        if let Some(per) = windowed {
            workgroups = windows::workgroups(per.div_ceil(k), &target)?;
            main.push_str(&format!(
                "    let tid = (wid.y * nwg.x + wid.x) * {WORKGROUP}u + lid + in0[0];\n"
            ));
            main.push_str(&format!("    {}\n", windows::guard("tid", threads)));
            main.push_str("    let ebase = in0[1];\n");
        } else {
            workgroups = kernel::grid(threads.div_ceil(WORKGROUP as u64), target.max_workgroups)?;
            main.push_str(&kernel::thread_index(WORKGROUP));
            main.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
        }
        main.push_str(&em.body);
        main.push_str("}\n");
    }
    let bindings = em.inputs.len() + outs.len();
    if bindings as u32 > target.max_storage_buffers {
        return Err(Error::unimplemented(format!(
            "{name}: reduction needs {bindings} storage buffers, adapter {} allows {}",
            target.adapter, target.max_storage_buffers
        )));
    }
    let comment = format!(
        "kernel {name}: reduce {red_len} elements into each of {out_count} ({})\nfuses: {}",
        if use_subgroup_rows {
            "subgroup per row"
        } else if use_column_tiles {
            "column tiles"
        } else if use_workgroup {
            "workgroup per output"
        } else {
            "thread per output"
        },
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let source = format!("{shared}\n{func}{main}");
    let iterations = em.iterations();
    let wgsl = kernel::assemble(
        name,
        &comment,
        &em.inputs,
        &outs,
        &em.needs,
        &source,
        target.caps,
    )?;
    Ok((
        Kernel {
            name: name.to_string(),
            wgsl,
            inputs: em.inputs.clone(),
            outputs: outs,
            workgroups,
            iterations,
            texture_inputs: Vec::new(),
            state_textures: Vec::new(),
            scratch_textures: Vec::new(),
            parted: Vec::new(),
        },
        func,
    ))
}
