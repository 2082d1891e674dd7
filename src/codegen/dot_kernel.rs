//! The `dot_general` emitters.
//!
//! * **Tiled** (f32, i32 or u32 operands and result, GPUs): each workgroup of 16×16 threads computes a
//!   64×64, 128×64 or 128×128 tile of one batch of the output ([`GemmTile`]), each thread a
//!   4×4 to 8×8 block held in `vec4` registers; both operand tiles are staged through
//!   workgroup memory as `vec4`s, 8 or 16 contracting steps at a time, the next tile's loads
//!   issued before the current tile's products. Operands may
//!   have any layout: batch, free and contracting dimensions in any order and any number
//!   (offsets are separable per dimension group, so an element's offset is a sum of three
//!   decompositions). Tile loads follow the operand's contiguous dimension.
//! * **Vector** (f32, i32 or u32, on CPU adapters such as lavapipe, where workgroup memory and barriers
//!   are emulated at a high cost, and for shapes the tiled kernel does not take): an R×C
//!   block per thread in `vec4` registers straight from memory, operands read four elements
//!   per load where their layout allows. `WGPU_HLO_DOT=direct` keeps the older scalar
//!   register-blocked kernel for comparisons. Integer dots take these two only; the
//!   matrix-vector, shared-rows and split-K paths are f32's.
//! * **Naive** (everything else): every output element is a loop over the contracting
//!   dimensions with the operands' producers computed inline; the loop emitter around it
//!   handles packing and the dispatch grid.

use std::collections::HashMap;

use super::kernel::{assemble, Kernel};
use super::loop_kernel::{self, Target};
use crate::error::Result;
use crate::fusion::Group;
use crate::ir::{ElementType, Function, Op, Operation, TensorType, Type, ValueId};

use super::dtype::Compute;
use super::expr::Binding;
use super::op_kernels::Plan;
use super::partials;

/// Emits the kernel for `group`, whose root `op` is a `dot_general`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    if let Some(k) = tiled(name, f, group, op, target)? {
        return Ok(k);
    }
    let mut g = group.clone();
    g.members.extend(op.results.iter().copied());
    loop_kernel::emit(name, f, defs, &g, target)
}

/// The dot or convolution of `group` as a plan: on GPUs a tiled dot of few output tiles over
/// a long contracting dimension as partial sums and a fold ([`split_tiles`]), else
/// [`plan_whole`].
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Plan> {
    if let Some(p) = split_gemv(name, f, group, op, target)? {
        return Ok(p);
    }
    if let Some(p) = split_tiles(name, f, group, op, target)? {
        return Ok(p);
    }
    plan_whole(name, f, defs, group, op, target)
}

/// The dot or convolution of `group` as a plan without the GPU's occupancy split (for a dot
/// with an epilogue, which must stay one kernel): its kernel when every invocation stays
/// within `target.max_invocation_iterations`; else split-K — partial products over chunks of
/// the contracting dimensions (for a convolution, of its window positions and input
/// features) into a temporary, then sums of the partials ([`partials::fold`]), rounded and
/// packed last for narrow result types. Fused producers are computed inline in the partials
/// stage as in the single kernel. Boolean results are returned as is, for the compile driver
/// to refuse.
pub fn plan_whole(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Plan> {
    let kernel = emit(name, f, defs, group, op, target)?;
    let bound = target.max_invocation_iterations;
    let single = |k: Kernel| Ok(Plan::sequential(vec![k], Vec::new()));
    if kernel.iterations <= bound {
        return single(kernel);
    }
    if let Some(p) = split_shared_rows(name, f, group, op, kernel.iterations, target)? {
        return Ok(p);
    }
    let Some(space) = contraction_space(f, op) else {
        return single(kernel);
    };
    let Type::Tensor(ot) = f.ty(op.results[0]) else {
        return single(kernel);
    };
    // Boolean dots and convolutions (or-of-ands) are not split.
    let Some((wide, c)) = partials::wide(ot.dtype).filter(|w| w.1 != Compute::Bool) else {
        return single(kernel);
    };
    let n = ot.num_elements() as u64;
    let mut g = group.clone();
    g.members.extend(op.results.iter().copied());
    for (chunk, feature_chunk) in space.candidates(kernel.iterations, bound) {
        let (wchunks, fchunks) = (
            space.steps.div_ceil(chunk),
            space.features.div_ceil(feature_chunk),
        );
        let chunks = wchunks * fchunks;
        let split = loop_kernel::SplitK {
            chunks,
            chunk,
            feature_chunks: fchunks,
            feature_chunk,
            partials: vec![partials::binding(0, wide, n * chunks)],
        };
        let first = loop_kernel::emit_split(
            &format!("{name}_partials"),
            f,
            defs,
            &g,
            target,
            Some(&split),
        )?;
        if first.iterations <= bound {
            let add =
                |acc: &[String], vals: &[String]| format!("{0} = {0} + {1};", acc[0], vals[0]);
            return partials::fold(
                name,
                first,
                split.partials,
                n,
                chunks,
                kernel.outputs.clone(),
                &[c],
                "",
                &add,
                true,
                target,
            );
        }
    }
    single(kernel)
}

/// On CPU adapters, a shared-rows dot whose contraction is longer than one invocation may
/// loop (`iterations` steps, past `Target::max_invocation_iterations`) as partial sums over
/// contracting chunks, one workgroup per tile and chunk, then a fold; `None` where the
/// shared-rows kernel does not apply. The split-K loop kernel it replaces computes one result
/// element per thread from storage loads: lavapipe took 4.5 s for the 64 x 768 x 50257
/// product of a GPT-2-sized output projection's gradient.
fn split_shared_rows(
    name: &str,
    f: &Function,
    group: &Group,
    op: &Operation,
    iterations: u64,
    target: Target,
) -> Result<Option<Plan>> {
    let mode = dot_mode();
    if !(mode == Some("subgroup") || (mode.is_none() && target.cpu_adapter)) {
        return Ok(None);
    }
    let Some(((lt, rt, ot), (l, r), (batch, m, n, k))) = tiled_operands(f, group, op, false) else {
        return Ok(None);
    };
    let bound = target.max_invocation_iterations;
    let reads = read_modes((&l, &lt), (&r, &rt), k);
    let mut parts = iterations.div_ceil(bound).max(2);
    while parts <= k / 4 {
        let chunk = k.div_ceil(parts).next_multiple_of(4);
        let split = super::dot_subgroup::KSplit {
            parts: k.div_ceil(chunk),
            chunk,
        };
        let Some(first) = super::dot_subgroup::shared_rows(
            &format!("{name}_partials"),
            op,
            (&lt, &rt, &ot),
            (&l, &r),
            reads,
            (batch, m, n, k),
            Some(split),
            target,
        )?
        else {
            return Ok(None);
        };
        if first.iterations <= bound {
            return fold_f32_partials(name, first, op, ot, split.parts, target).map(Some);
        }
        parts *= 2;
    }
    Ok(None)
}

/// A matrix-vector product of few results over a long contracting dimension as partial sums
/// over chunks of it and a fold (`dot_gemv::gemv_parts`); `None` where that does not apply.
fn split_gemv(
    name: &str,
    f: &Function,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Option<Plan>> {
    if dot_mode().is_some() {
        return Ok(None);
    }
    let Some(((lt, rt, ot), (l, r), dims)) = tiled_operands(f, group, op, false) else {
        return Ok(None);
    };
    let partials = format!("{name}_partials");
    let Some((first, parts)) =
        super::dot_gemv::gemv_parts(&partials, op, (&lt, &rt, &ot), (&l, &r), dims, target)?
    else {
        return Ok(None);
    };
    if first.iterations > target.max_invocation_iterations {
        return Ok(None);
    }
    fold_f32_partials(name, first, op, ot, parts, target).map(Some)
}

/// Workgroups a GPU's tiled dot should launch at least: a few per multiprocessor of a laptop
/// GPU, about one per multiprocessor of a large one (an H200 has 132).
const GPU_WORKGROUPS: u64 = 128;

/// On GPUs, a tiled dot of few output tiles and a long contracting dimension as partial sums
/// over contracting chunks (one workgroup per tile and chunk) and a fold: a handful of
/// workgroups would each walk all of k while the rest of the device idles. On an H200 the
/// flax CNN step's dense layer (32x128 from 3136) took 0.49 ms in 2 workgroups, and the
/// transformer's 504x128 projections (k 512) 0.1 ms each in 16.
fn split_tiles(
    name: &str,
    f: &Function,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Option<Plan>> {
    if target.cpu_adapter || !matches!(dot_mode(), None | Some("tiled")) {
        return Ok(None);
    }
    let Some(((lt, rt, ot), (l, r), (batch, m, n, k))) = tiled_operands(f, group, op, false) else {
        return Ok(None);
    };
    // Matrix-vector products have their own kernel (`dot_gemv`), which fills the device
    // with one team of lanes per result.
    if (m == 1 || n == 1) && dot_mode().is_none() {
        let reads = read_modes((&l, &lt), (&r, &rt), k);
        let matrix = if n == 1 { reads.0 } else { reads.1 };
        if matches!(matrix, Read::AlongK | Read::AlongFree) {
            return Ok(None);
        }
    }
    let max = target.max_workgroups as u64;
    let tile = GemmTile::choose(batch, m, n);
    let (gx, gy) = (n.div_ceil(tile.bn), m.div_ceil(tile.bm));
    let tiles = gx * gy * batch;
    if gx > max || gy > max || m * n < 1024 || 2 * tiles > GPU_WORKGROUPS || k < 256 {
        return Ok(None);
    }
    // Chunks of at least 64 (four 16-steps), a multiple of 16; k >= 256 makes parts >= 4.
    let parts = GPU_WORKGROUPS.div_ceil(tiles).min(k / 64);
    let chunk = k.div_ceil(parts).next_multiple_of(tile.bk.max(16));
    let parts = k.div_ceil(chunk);
    let len = batch * m * n * parts;
    if parts < 2
        || batch * parts > max
        || len > u32::MAX as u64
        || 4 * len > target.max_binding_size
    {
        return Ok(None);
    }
    let first = tile_kernel(
        &format!("{name}_partials"),
        op,
        (&lt, &rt, &ot),
        (&l, &r),
        (batch, m, n, k),
        Some(TileSplit { parts, chunk }),
        tile,
        target,
    )?;
    if first.iterations > target.max_invocation_iterations {
        return Ok(None);
    }
    fold_f32_partials(name, first, op, ot, parts, target).map(Some)
}

/// The plan of a tiled dot's partials stage `first` (its one output: `parts` f32 partial sums
/// per element of `op`'s result of type `ot`, element-major), then the folds adding them up.
fn fold_f32_partials(
    name: &str,
    first: Kernel,
    op: &Operation,
    ot: TensorType,
    parts: u64,
    target: Target,
) -> Result<Plan> {
    let sums = first.outputs.clone();
    let add = |acc: &[String], vals: &[String]| format!("{0} = {0} + {1};", acc[0], vals[0]);
    partials::fold(
        name,
        first,
        sums,
        ot.num_elements() as u64,
        parts,
        vec![Binding {
            value: op.results[0],
            ty: ot,
        }],
        &[Compute::F32],
        "",
        &add,
        true,
        target,
    )
}

/// The iteration space one output element of a dot or convolution sums over: `steps`
/// contracting steps (a convolution's window positions), each over `features` input
/// features (1 for a dot).
struct ContractionSpace {
    steps: u64,
    features: u64,
}

impl ContractionSpace {
    /// Chunk sizes (steps, features) to try, largest first: the first whose kernel fits
    /// `bound` (fused producers may loop too) is taken. A convolution keeps all of a group's
    /// features in a chunk while they fit, and splits them only when a single window
    /// position is too long.
    fn candidates(&self, iterations: u64, bound: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if self.steps == 0 || self.features == 0 {
            return out;
        }
        if self.features == 1 {
            let mut chunk = self
                .steps
                .div_ceil(iterations.div_ceil(bound).max(2))
                .max(1);
            while chunk >= 1 {
                out.push((chunk, 1));
                chunk /= 2;
            }
            return out;
        }
        // One window position costs `features + 1` back-edges (the feature loop and its own).
        let mut features = self.features;
        loop {
            let per_step = features + 1;
            let mut chunk = (bound / per_step).min(self.steps);
            while chunk >= 1 {
                // Equal chunks: as many as the largest chunk size needs.
                out.push((self.steps.div_ceil(self.steps.div_ceil(chunk)), features));
                chunk /= 2;
            }
            if features == 1 {
                break;
            }
            // Equal chunks of features too.
            let half = features.min(bound).div_ceil(2);
            features = self.features.div_ceil(self.features.div_ceil(half));
        }
        out
    }
}

/// The contraction of `op`: a `dot_general`'s contracting dimensions, a `convolution`'s
/// kernel window and input features per group.
fn contraction_space(f: &Function, op: &Operation) -> Option<ContractionSpace> {
    let dim =
        |t: &TensorType, d: i64| t.shape.get(d.max(0) as usize).copied().unwrap_or(0).max(0) as u64;
    match &op.op {
        Op::DotGeneral {
            dimension_numbers: dn,
            ..
        } => {
            let Type::Tensor(lt) = f.ty(op.operands[0]) else {
                return None;
            };
            let steps = dn
                .lhs_contracting_dimensions
                .iter()
                .map(|&d| dim(lt, d))
                .product();
            Some(ContractionSpace { steps, features: 1 })
        }
        Op::Convolution(c) => {
            let Type::Tensor(kt) = f.ty(op.operands[1]) else {
                return None;
            };
            let d = &c.dimension_numbers;
            let steps = d
                .kernel_spatial_dimensions
                .iter()
                .map(|&k| dim(kt, k))
                .product();
            let features = dim(kt, d.kernel_input_feature_dimension);
            Some(ContractionSpace { steps, features })
        }
        _ => None,
    }
}

/// WGSL vector component names.
pub(super) const COMP: [&str; 4] = ["x", "y", "z", "w"];

/// Steps of k an accumulator sums before it is added to its result's running total, where a
/// kernel's contraction is longer ([`blocked_k_loop`]). One accumulator summing all of a long
/// contraction in sequence loses precision as it grows: lavapipe's `X.T @ X` of a
/// non-centred 100000 x 64 was 4.1e-6 off (relative to the largest result) where jax cpu,
/// which accumulates in blocks, was 3.3e-7; in blocks of 1024 it is 2.1e-7 (of 256: 1.6e-7,
/// of 512: 1.8e-7). 1024 leaves the kernels of contractions up to 1024 (most of a model's)
/// as they were. `WGPU_HLO_DOT_SUM_BLOCK=N` sets it (0: never blocked), for comparisons.
pub(super) const SUM_BLOCK: u64 = 1024;

/// [`SUM_BLOCK`], or `WGPU_HLO_DOT_SUM_BLOCK` where that is a number (0: no blocks).
pub(super) fn sum_block() -> u64 {
    std::env::var("WGPU_HLO_DOT_SUM_BLOCK")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(SUM_BLOCK)
}

/// The loop `for (var k = from; k < to; k = k + step) { body }` over at most `len` steps of
/// k, where `body` adds products into the accumulators `accs` (each declared before the loop,
/// of WGSL type `ty`). Longer than [`sum_block`], it runs in blocks of that many steps, each
/// summing into fresh accumulators (the names with `acc` replaced by `blk`, so `body` must
/// name nothing else with `acc`) that are then added to `accs`: two-level summation, whose
/// rounding error grows with the block and the number of blocks instead of with `len`. The
/// running totals are touched once a block, so a driver can keep them out of registers.
pub(super) fn blocked_k_loop(
    accs: &[String],
    ty: &str,
    (from, to, step): (&str, &str, u64),
    len: u64,
    body: &str,
) -> String {
    let block = sum_block()
        .checked_next_multiple_of(step.max(1))
        .unwrap_or(0);
    if block == 0 || len <= block {
        return format!("    for (var k = {from}; k < {to}; k = k + {step}u) {{\n{body}    }}\n");
    }
    let mut s = format!(
        "    for (var kc = {from}; kc < {to}; kc = kc + {block}u) {{\n        let kce = min(kc + {block}u, {to});\n"
    );
    for a in accs {
        s.push_str(&format!(
            "        var {} = {ty}();\n",
            a.replace("acc", "blk")
        ));
    }
    s.push_str(&format!(
        "        for (var k = kc; k < kce; k = k + {step}u) {{\n"
    ));
    for line in body.lines() {
        s.push_str(&format!("    {}\n", line.replace("acc", "blk")));
    }
    s.push_str("        }\n");
    for a in accs {
        s.push_str(&format!(
            "        {a} = {a} + {};\n",
            a.replace("acc", "blk")
        ));
    }
    s.push_str("    }\n");
    s
}

/// Whether large f32 dots on `target` take the shared-rows kernel
/// ([`super::dot_subgroup`]), which reads an operand along its free dimension faster than
/// along k: a CPU adapter with one known subgroup size, unless `WGPU_HLO_DOT` picks another.
pub fn shared_rows_serve(target: &Target) -> bool {
    let mode = dot_mode();
    (mode == Some("subgroup") || (mode.is_none() && target.cpu_adapter))
        && target.caps.subgroup
        && matches!(target.caps.subgroup_size, 4 | 8 | 16 | 32)
}

/// `WGPU_HLO_DOT=tiled|vec|direct|naive|subgroup` overrides the choice of f32 dot kernel (for comparisons).
fn dot_mode() -> Option<&'static str> {
    match std::env::var("WGPU_HLO_DOT").ok()?.as_str() {
        "tiled" => Some("tiled"),
        "direct" => Some("direct"),
        "vec" => Some("vec"),
        "naive" => Some("naive"),
        "subgroup" => Some("subgroup"),
        _ => None,
    }
}

/// One operand's dimension groups: (size, stride) per dimension, outermost first.
pub(super) struct Layout {
    batch: Vec<(u64, u64)>,
    free: Vec<(u64, u64)>,
    contract: Vec<(u64, u64)>,
}

fn layout(t: &TensorType, batch: &[i64], contract: &[i64]) -> Option<Layout> {
    let dims = t.dims();
    let strides = t.strides();
    let at = |d: &i64| -> Option<(u64, u64)> {
        let d = usize::try_from(*d).ok()?;
        Some((*dims.get(d)? as u64, *strides.get(d)? as u64))
    };
    let free = (0..dims.len() as i64)
        .filter(|d| !batch.contains(d) && !contract.contains(d))
        .map(|d| at(&d))
        .collect::<Option<Vec<_>>>()?;
    Some(Layout {
        batch: batch.iter().map(at).collect::<Option<Vec<_>>>()?,
        free,
        contract: contract.iter().map(at).collect::<Option<Vec<_>>>()?,
    })
}

fn product(g: &[(u64, u64)]) -> u64 {
    g.iter().map(|d| d.0).product()
}

/// WGSL statements adding the offset of linear index `var` over the dimensions `g`.
fn decompose(var: &str, g: &[(u64, u64)]) -> String {
    match g {
        [] => String::new(),
        [(_, st)] => format!("    off += {var} * {st}u;\n"),
        _ => {
            let mut s = format!("    var r_{var} = {var};\n");
            for (size, st) in g.iter().rev() {
                s.push_str(&format!(
                    "    off += (r_{var} % {size}u) * {st}u;\n    r_{var} = r_{var} / {size}u;\n"
                ));
            }
            s
        }
    }
}

fn offset_fn(
    name: &str,
    a: &str,
    b: &str,
    c: &str,
    ga: &[(u64, u64)],
    gb: &[(u64, u64)],
    gc: &[(u64, u64)],
) -> String {
    format!(
        "fn {name}({a}: u32, {b}: u32, {c}: u32) -> u32 {{\n    var off = 0u;\n{}{}{}    return off;\n}}\n\n",
        decompose(a, ga),
        decompose(b, gb),
        decompose(c, gc)
    )
}

/// WGSL `lhs_off(b, m, k)` and `rhs_off(b, n, k)`: each operand's element offset, which
/// every dot kernel reads its operands through.
pub(super) fn operand_offsets(l: &Layout, r: &Layout) -> String {
    let mut s = offset_fn("lhs_off", "b", "m", "k", &l.batch, &l.free, &l.contract);
    s.push_str(&offset_fn(
        "rhs_off",
        "b",
        "n",
        "k",
        &r.batch,
        &r.free,
        &r.contract,
    ));
    s
}

/// A tiled-kernel candidate: the dot's operand and result types, operand layouts and
/// `(batch, m, n, k)`.
type TiledDot = (
    (TensorType, TensorType, TensorType),
    (Layout, Layout),
    (u64, u64, u64, u64),
);

/// The dot of `group` when the tiled kernels may compute it: f32 operands and result (with
/// `ints`, also i32 or u32 ones, all three of one type), the dot alone in its group, every
/// offset within u32.
fn tiled_operands(f: &Function, group: &Group, op: &Operation, ints: bool) -> Option<TiledDot> {
    let Op::DotGeneral {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return None;
    };
    if !group.members.is_empty()
        || group.outputs.len() != 1
        || op.operands.len() != 2
        || dot_mode() == Some("naive")
    {
        return None;
    }
    let word = |d: ElementType| {
        d == ElementType::F32 || (ints && matches!(d, ElementType::I32 | ElementType::U32))
    };
    let tensor = |v: ValueId| match f.ty(v) {
        Type::Tensor(t) if t.is_static() && word(t.dtype) => Some(t.clone()),
        _ => None,
    };
    let (lt, rt, ot) = (
        tensor(op.operands[0])?,
        tensor(op.operands[1])?,
        tensor(op.results[0])?,
    );
    if lt.dtype != ot.dtype || rt.dtype != ot.dtype {
        return None;
    }
    let l = layout(
        &lt,
        &dn.lhs_batching_dimensions,
        &dn.lhs_contracting_dimensions,
    )?;
    let r = layout(
        &rt,
        &dn.rhs_batching_dimensions,
        &dn.rhs_contracting_dimensions,
    )?;
    let (batch, m, n, k) = (
        product(&l.batch),
        product(&l.free),
        product(&r.free),
        product(&l.contract),
    );
    if k != product(&r.contract) || batch * m * n != ot.num_elements() as u64 || batch * m * n == 0
    {
        return None;
    }
    // Every offset the kernels compute is below its tensor's element count (per-dimension
    // sums of index * stride, the output's (b * m + i) * n + j): in range for u32 whenever the
    // tensors' element counts are.
    let fits = |t: &TensorType| (t.num_elements() as u64) <= u32::MAX as u64;
    if !(fits(&lt) && fits(&rt) && fits(&ot)) {
        return None;
    }
    Some(((lt, rt, ot), (l, r), (batch, m, n, k)))
}

fn tiled(
    name: &str,
    f: &Function,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Option<Kernel>> {
    let Some(((lt, rt, ot), (l, r), (batch, m, n, k))) = tiled_operands(f, group, op, true) else {
        return Ok(None);
    };
    let max = target.max_workgroups as u64;
    let tile = GemmTile::choose(batch, m, n);
    let (gx, gy) = (n.div_ceil(tile.bn), m.div_ceil(tile.bm));
    let tiles_fit = gx <= max && gy <= max && batch <= max && k >= 8 && m * n >= 1024;
    let dims = (batch, m, n, k);
    let mode = dot_mode();
    // Integer products (i32, u32) take the vector and workgroup-tiled kernels only; their
    // sums wrap, so any order of the additions gives the same bits.
    let float = ot.dtype == ElementType::F32;
    // Matrix-vector products (`dot_gemv`).
    if float && mode.is_none() && (m == 1 || n == 1) {
        let gemv = super::dot_gemv::gemv(name, op, (&lt, &rt, &ot), (&l, &r), dims, target)?;
        if let Some(kernel) = gemv {
            return Ok(Some(kernel));
        }
    }
    // CPU adapters with subgroups: the shared-rows kernel (`dot_subgroup`).
    if float && (mode == Some("subgroup") || (mode.is_none() && target.cpu_adapter)) {
        let reads = read_modes((&l, &lt), (&r, &rt), k);
        let shared = super::dot_subgroup::shared_rows(
            name,
            op,
            (&lt, &rt, &ot),
            (&l, &r),
            reads,
            dims,
            None,
            target,
        )?;
        if let Some(kernel) = shared {
            return Ok(Some(kernel));
        }
    }
    match mode {
        Some("direct") if float => {
            return direct(name, op, &lt, &rt, &ot, &l, &r, dims, target).map(Some);
        }
        Some("vec") => return vector(name, op, (&lt, &rt, &ot), (&l, &r), dims, target).map(Some),
        Some("tiled") if tiles_fit => {}
        _ if target.cpu_adapter || !tiles_fit => {
            return vector(name, op, (&lt, &rt, &ot), (&l, &r), dims, target).map(Some);
        }
        _ => {}
    }
    tile_kernel(
        name,
        op,
        (&lt, &rt, &ot),
        (&l, &r),
        dims,
        None,
        tile,
        target,
    )
    .map(Some)
}

/// Multiply-adds below which the register-blocked dot takes blocks of at most 8x8 (see
/// `block_shape`): 2^22, a 256 x 256 x 64 product.
const SMALL_DOT_WORK: u64 = 1 << 22;

/// Rows x columns of results per thread of the register-blocked dot. Larger blocks need fewer
/// loads per multiply-add (lavapipe, 512² f32: 4x4 1.1 GFLOP/s, 8x8 2.2, 16x16 3.7, 32x32 6.1),
/// but compile time grows faster than the block (naga's typifier and LLVM: 16x16 ~20 ms, 32x16
/// ~180 ms, 32x32 ~0.7 s), so 16x16 is the largest used; below that the block balances loads
/// against keeping every CPU core busy. `WGPU_HLO_DOT_BLOCK=RxC` forces one (for experiments).
fn block_shape(batch: u64, m: u64, n: u64, k: u64) -> (u64, u64) {
    let fit = |(r, c): (u64, u64)| (r.clamp(1, 32).min(m.max(1)), c.clamp(1, 32).min(n.max(1)));
    if let Some(forced) = std::env::var("WGPU_HLO_DOT_BLOCK").ok().and_then(|s| {
        let (r, c) = s.split_once('x')?;
        Some((r.parse::<u64>().ok()?, c.parse::<u64>().ok()?))
    }) {
        return fit(forced);
    }
    // A CPU driver runs each 64-invocation workgroup on one core, 8 lanes at a time, and a
    // thread's time is its R + C loads per step of k: minimize the busiest core's share.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    let cost = |(r, c): (u64, u64)| {
        let threads = batch * m.div_ceil(r) * n.div_ceil(c);
        let groups = threads.div_ceil(64);
        groups.div_ceil(cores) * threads.min(64).div_ceil(8) * (r + c)
    };
    // Small products take at most 8x8: a larger block compiles for much longer (llvmpipe,
    // empty caches: 16x16 ~0.55 s, 16x8 ~0.2 s, 8x8 ~0.06 s) and saves little (768 x 64 x 64:
    // 0.8 ms with each; 256 x 256 x 64: 0.7 ms at 16x16, 1.1 ms at 8x8).
    let small = batch * m * n * k < SMALL_DOT_WORK;
    let blocks: &[(u64, u64)] = if small {
        &[(8, 8), (8, 4), (4, 4)]
    } else {
        &[(16, 16), (16, 8), (8, 8), (8, 4), (4, 4)]
    };
    blocks
        .iter()
        .copied()
        .map(fit)
        .min_by_key(|&b| cost(b))
        .unwrap_or((4, 4))
}

/// The dot for CPU adapters (lavapipe, SwiftShader, WARP): no workgroup memory and no
/// barriers, which such drivers emulate at a high cost; each thread keeps a 4x4 block in
/// registers and reads its operands straight from memory (the CPU caches do the tiling).
#[allow(clippy::too_many_arguments)]
fn direct(
    name: &str,
    op: &Operation,
    lt: &TensorType,
    rt: &TensorType,
    ot: &TensorType,
    l: &Layout,
    r: &Layout,
    (batch, m, n, k): (u64, u64, u64, u64),
    target: Target,
) -> Result<Kernel> {
    // Every storage load costs a loop over the SIMD lanes on such drivers (no uniform or
    // consecutive-address detection in e.g. Mesa 22's llvmpipe), so blocks are large:
    // R + C loads feed R x C multiply-adds per step of k.
    let (rows, cols) = block_shape(batch, m, n, k);
    let (mb, nb) = (m.div_ceil(rows), n.div_ceil(cols));
    let threads = batch * mb * nb;
    let workgroups = super::kernel::grid(threads.div_ceil(64), target.max_workgroups)?;
    let mut body = String::new();
    body.push_str(&operand_offsets(l, r));
    body.push_str(&super::kernel::entry_header(64));
    body.push_str(&super::kernel::thread_index(64));
    body.push_str(&format!(
        "    if (tid >= {threads}u) {{ return; }}\n    let n0 = (tid % {nb}u) * {cols}u;\n    let m0 = ((tid / {nb}u) % {mb}u) * {rows}u;\n    let b = tid / {}u;\n",
        mb * nb
    ));
    for i in 0..rows {
        for j in 0..cols {
            body.push_str(&format!("    var acc{i}_{j} = 0.0f;\n"));
        }
    }
    for i in 0..rows {
        body.push_str(&format!("    let mi{i} = min(m0 + {i}u, {}u);\n", m - 1));
    }
    for j in 0..cols {
        body.push_str(&format!("    let nj{j} = min(n0 + {j}u, {}u);\n", n - 1));
    }
    body.push_str(&format!("    for (var k = 0u; k < {k}u; k = k + 1u) {{\n"));
    for i in 0..rows {
        body.push_str(&format!("        let a{i} = in0[lhs_off(b, mi{i}, k)];\n"));
    }
    for j in 0..cols {
        body.push_str(&format!("        let w{j} = in1[rhs_off(b, nj{j}, k)];\n"));
    }
    for i in 0..rows {
        for j in 0..cols {
            body.push_str(&format!("        acc{i}_{j} = acc{i}_{j} + a{i} * w{j};\n"));
        }
    }
    body.push_str("    }\n");
    for i in 0..rows {
        for j in 0..cols {
            body.push_str(&format!(
                "    if (m0 + {i}u < {m}u && n0 + {j}u < {n}u) {{ out0[(b * {m}u + m0 + {i}u) * {n}u + n0 + {j}u] = acc{i}_{j}; }}\n"
            ));
        }
    }
    body.push_str("}\n");
    let comment = format!(
        "kernel {name}: register-blocked dot_general {lt} x {rt} -> {ot} (batch {batch}, {m}x{n}, contracting {k}; {rows}x{cols} per thread, no workgroup memory: CPU adapter)\nfuses: stablehlo.dot_general"
    );
    finish(
        name,
        &comment,
        op,
        (lt, rt, ot),
        &body,
        workgroups,
        k,
        target,
    )
}

/// The kernel of a dot whose WGSL `body` reads the operands (`in0`, `in1`) and writes the
/// result (`out0`), looping at most `iterations` times per invocation.
#[allow(clippy::too_many_arguments)]
fn finish(
    name: &str,
    comment: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    body: &str,
    workgroups: [u32; 3],
    iterations: u64,
    target: Target,
) -> Result<Kernel> {
    let output = Binding {
        value: op.results[0],
        ty: ot.clone(),
    };
    finish_with(
        name,
        comment,
        (operand_bindings(op, lt, rt), vec![output]),
        body,
        workgroups,
        iterations,
        target,
    )
}

/// The bindings of a dot's two operands.
fn operand_bindings(op: &Operation, lt: &TensorType, rt: &TensorType) -> Vec<Binding> {
    vec![
        Binding {
            value: op.operands[0],
            ty: lt.clone(),
        },
        Binding {
            value: op.operands[1],
            ty: rt.clone(),
        },
    ]
}

/// [`finish`] with the kernel's bindings given.
fn finish_with(
    name: &str,
    comment: &str,
    (inputs, outputs): (Vec<Binding>, Vec<Binding>),
    body: &str,
    workgroups: [u32; 3],
    iterations: u64,
    target: Target,
) -> Result<Kernel> {
    let wgsl = assemble(
        name,
        comment,
        &inputs,
        &outputs,
        &Default::default(),
        body,
        target.caps,
    )?;
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs,
        outputs,
        workgroups,
        iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// A tiled dot split along its contracting dimension: `parts` chunks of `chunk` (a multiple
/// of the tile's contracting step), each workgroup summing one chunk into a partials
/// temporary that a fold adds up.
#[derive(Clone, Copy)]
struct TileSplit {
    parts: u64,
    chunk: u64,
}

/// The workgroup tile of the GPU dot: `bm` x `bn` results per workgroup of 16x16 threads
/// (each thread `bm / 16` x `bn / 16`, in 4x4 quarters 64 rows or columns apart), operands
/// staged `bk` contracting steps at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GemmTile {
    pub bm: u64,
    pub bn: u64,
    pub bk: u64,
}

impl GemmTile {
    const SMALL: GemmTile = GemmTile {
        bm: 64,
        bn: 64,
        bk: 16,
    };

    /// `WGPU_HLO_GPU_TILE=BMxBNxBK` (each of BM, BN 64 or 128; BK 8 or 16) forces a tile, for
    /// experiments.
    fn forced() -> Option<GemmTile> {
        let s = std::env::var("WGPU_HLO_GPU_TILE").ok()?;
        let v: Vec<u64> = s
            .split('x')
            .map(|p| p.trim().parse().ok())
            .collect::<Option<_>>()?;
        let [bm, bn, bk] = v.as_slice() else {
            return None;
        };
        let ok = |t: u64| t == 64 || t == 128;
        (ok(*bm) && ok(*bn) && (*bk == 8 || *bk == 16)).then_some(GemmTile {
            bm: *bm,
            bn: *bn,
            bk: *bk,
        })
    }

    /// The tile for a dot of `batch` x `m` x `n` results: the largest that still gives two
    /// workgroups per [`GPU_WORKGROUPS`], else 64x64 staged 16 steps at a time. On an H200
    /// (tile sweep of 3192ca9, `scripts/gpu_tiles.sh`) 128x128x8 was fastest from 2048³ up
    /// (27.5-29.2 TFLOP/s against 21-23 for 64x64x16), 64x64x16 for the batched, skinny and
    /// 512-row shapes, and at 1024³ the two were level; 128x64 and BK 16 on the large tiles
    /// never won against both; 128x64 is kept as the step between them, for dots where
    /// 128x128 leaves too few workgroups (not measured as such).
    pub(super) fn choose(batch: u64, m: u64, n: u64) -> GemmTile {
        if let Some(t) = Self::forced() {
            return t;
        }
        let count = |t: &GemmTile| batch * m.div_ceil(t.bm) * n.div_ceil(t.bn);
        [
            GemmTile {
                bm: 128,
                bn: 128,
                bk: 8,
            },
            GemmTile {
                bm: 128,
                bn: 64,
                bk: 8,
            },
        ]
        .into_iter()
        .find(|t| count(t) >= 2 * GPU_WORKGROUPS && m >= t.bm && n >= t.bn)
        .unwrap_or(Self::SMALL)
    }
}

/// What the GPU's workgroup-tiled GEMM kernel ([`gemm_main`]) computes, for the dot and the
/// implicit-GEMM convolution alike: `out[m][n] = sum over k in kb..ke of lhs(m, k) * rhs(n, k)`
/// for `m < m_bound`, `n < n_bound`.
pub(super) struct GemmSpec<'a> {
    pub tile: GemmTile,
    pub m_bound: u64,
    pub n_bound: u64,
    /// WGSL statements after `m0` and `n0` (the tile's first row and column) defining `kb` and
    /// `ke` (the contraction range) and whatever the reads and stores use.
    pub prelude: String,
    /// The WGSL f32 of the lhs at (row, step) or of the rhs at (column, step), given as WGSL
    /// u32 expressions; they are only evaluated in range.
    pub lhs: &'a dyn Fn(&str, &str) -> String,
    pub rhs: &'a dyn Fn(&str, &str) -> String,
    /// Whether the step is each operand's contiguous dimension: tile loads walk it.
    pub lhs_k_inner: bool,
    pub rhs_k_inner: bool,
    /// A WGSL statement at the top of each row's stores (it may use `m`), and the offset in
    /// `out0` of the result at row `m`, column `n` (stored as a plain `out0[at] = value;`,
    /// the form the epilogue rewrites).
    pub row: String,
    pub at: String,
    /// The WGSL scalar the operands, products and sums are (`f32`, or `i32` / `u32` for an
    /// integer dot, whose multiply-adds wrap).
    pub ty: &'static str,
}

/// WGSL loading one operand's tile for contracting steps from `k0` (a WGSL name) into the
/// registers `p{x}{r}`: each of the `bk * rows / 4` slots is four consecutive rows (or
/// columns) at one step, taken by thread `li` and every 256th after it, zero outside the
/// operand. `x` is `a` (lhs, rows `m0..` below `bound`) or `b` (rhs, columns `n0..`).
fn gemm_load(
    x: &str,
    rows: u64,
    bk: u64,
    bound: u64,
    k0: &str,
    read: &dyn Fn(&str, &str) -> String,
    ty: &str,
) -> String {
    let origin = if x == "a" { "m0" } else { "n0" };
    let slots = bk * rows / 4;
    let mut s = String::new();
    for r in 0..slots.div_ceil(256) {
        let guard = if (r + 1) * 256 > slots {
            format!("{x}_s{r} < {slots}u && ")
        } else {
            String::new()
        };
        s.push_str(&format!(
            "        {{\n            let gk = {k0} + {x}_kk{r};\n            let g0 = {origin} + {x}_mm{r} * 4u;\n            var v = vec4<{ty}>();\n            if ({guard}gk < ke) {{\n"
        ));
        for (q, c) in COMP.iter().enumerate() {
            let value = read(&format!("g0 + {q}u"), "gk");
            s.push_str(&format!(
                "                if (g0 + {q}u < {bound}u) {{ v.{c} = {value}; }}\n"
            ));
        }
        s.push_str(&format!(
            "            }}\n            p{x}{r} = v;\n        }}\n"
        ));
    }
    s
}

/// The GPU's workgroup-tiled GEMM (see the module comment and [`GemmTile`]): the workgroup
/// memory and entry point, for the grid `[n / bn, m / bm, anything]`. Operand tiles are
/// staged in workgroup memory as `vec4`s of four rows (columns) at one contracting step, read
/// by each thread as one `vec4` per 4x4 quarter and step; the next tile's global loads are
/// issued into registers before the products of the current one. The products accumulate
/// with explicit `fma`: what NVIDIA's compiler contracts `acc + a * b` to anyway, and what it
/// keeps when every other float operation is marked `NoContraction` (`strict_float`; without
/// it the GEMM ran 1.25-1.4x longer on an H200).
pub(super) fn gemm_main(spec: &GemmSpec) -> String {
    let GemmTile { bm, bn, bk } = spec.tile;
    let (m, n) = (spec.m_bound, spec.n_bound);
    let ty = spec.ty;
    let (hm, hn) = (bm / 64, bn / 64);
    // Workgroup rows of `rows / 4 + 1` vec4s: the padding spreads a step's stores over the
    // banks when the loads walk the contracting dimension.
    let (ra, rb) = (bm / 4 + 1, bn / 4 + 1);
    let mut body = format!(
        "var<workgroup> a_tile: array<vec4<{ty}>, {}>;\nvar<workgroup> b_tile: array<vec4<{ty}>, {}>;\n\n\
         @compute @workgroup_size(16, 16)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(local_invocation_id) lid: vec3<u32>, @builtin(local_invocation_index) li: u32) {{\n",
        bk * ra,
        bk * rb
    );
    body.push_str(&format!(
        "    let n0 = wid.x * {bn}u;\n    let m0 = wid.y * {bm}u;\n{}",
        spec.prelude
    ));
    // Each slot's step and group of four rows (columns), fixed for the whole loop.
    for (x, rows, k_inner) in [("a", bm, spec.lhs_k_inner), ("b", bn, spec.rhs_k_inner)] {
        for s in 0..(bk * rows / 4).div_ceil(256) {
            let (kk, mm) = if k_inner {
                (format!("{x}_s{s} % {bk}u"), format!("{x}_s{s} / {bk}u"))
            } else {
                let q = rows / 4;
                (format!("{x}_s{s} / {q}u"), format!("{x}_s{s} % {q}u"))
            };
            body.push_str(&format!(
                "    let {x}_s{s} = li + {}u;\n    let {x}_kk{s} = {kk};\n    let {x}_mm{s} = {mm};\n    var p{x}{s} = vec4<{ty}>();\n",
                s * 256
            ));
        }
    }
    for h in 0..hm {
        for q in 0..4 {
            for g in 0..hn {
                body.push_str(&format!("    var acc{h}{q}_{g} = vec4<{ty}>();\n"));
            }
        }
    }
    body.push_str(&gemm_load("a", bm, bk, m, "kb", spec.lhs, ty));
    body.push_str(&gemm_load("b", bn, bk, n, "kb", spec.rhs, ty));
    body.push_str(&format!(
        "    for (var k0 = kb; k0 < ke; k0 = k0 + {bk}u) {{\n        workgroupBarrier();\n"
    ));
    for (x, rows, stride) in [("a", bm, ra), ("b", bn, rb)] {
        let slots = bk * rows / 4;
        for s in 0..slots.div_ceil(256) {
            let store = format!("{x}_tile[{x}_kk{s} * {stride}u + {x}_mm{s}] = p{x}{s};");
            if (s + 1) * 256 > slots {
                body.push_str(&format!("        if ({x}_s{s} < {slots}u) {{ {store} }}\n"));
            } else {
                body.push_str(&format!("        {store}\n"));
            }
        }
    }
    body.push_str(&format!(
        "        workgroupBarrier();\n        let kn = k0 + {bk}u;\n        if (kn < ke) {{\n"
    ));
    body.push_str(&gemm_load("a", bm, bk, m, "kn", spec.lhs, ty));
    body.push_str(&gemm_load("b", bn, bk, n, "kn", spec.rhs, ty));
    body.push_str(&format!(
        "        }}\n        for (var kk = 0u; kk < {bk}u; kk = kk + 1u) {{\n"
    ));
    for h in 0..hm {
        body.push_str(&format!(
            "            let a{h} = a_tile[kk * {ra}u + {}u + lid.y];\n",
            h * 16
        ));
    }
    for g in 0..hn {
        body.push_str(&format!(
            "            let b{g} = b_tile[kk * {rb}u + {}u + lid.x];\n",
            g * 16
        ));
    }
    for h in 0..hm {
        for (q, c) in COMP.iter().enumerate() {
            for g in 0..hn {
                // Integers have no `fma`.
                body.push_str(&if ty == "f32" {
                    format!(
                        "            acc{h}{q}_{g} = fma(vec4<f32>(a{h}.{c}), b{g}, acc{h}{q}_{g});\n"
                    )
                } else {
                    format!("            acc{h}{q}_{g} = acc{h}{q}_{g} + vec4<{ty}>(a{h}.{c}) * b{g};\n")
                });
            }
        }
    }
    body.push_str("        }\n    }\n");
    for h in 0..hm {
        for (q, _) in COMP.iter().enumerate() {
            body.push_str(&format!(
                "    {{\n        let m = m0 + {}u + lid.y * 4u + {q}u;\n        if (m < {m}u) {{\n{}",
                h * 64,
                spec.row
            ));
            for g in 0..hn {
                for (j, c) in COMP.iter().enumerate() {
                    body.push_str(&format!(
                        "            {{\n                let n = n0 + {}u + lid.x * 4u + {j}u;\n                if (n < {n}u) {{ out0[{}] = acc{h}{q}_{g}.{c}; }}\n            }}\n",
                        g * 64,
                        spec.at
                    ));
                }
            }
            body.push_str("        }\n    }\n");
        }
    }
    body.push_str("}\n");
    body
}

/// The GPU's workgroup-tiled dot ([`gemm_main`]), whole or over one contracting chunk per
/// workgroup (`split`).
#[allow(clippy::too_many_arguments)]
fn tile_kernel(
    name: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (l, r): (&Layout, &Layout),
    (batch, m, n, k): (u64, u64, u64, u64),
    split: Option<TileSplit>,
    tile: GemmTile,
    target: Target,
) -> Result<Kernel> {
    let GemmTile { bm, bn, bk } = tile;
    let (gx, gy) = (n.div_ceil(bn), m.div_ceil(bm));
    let prelude = match split {
        Some(TileSplit { parts, chunk }) => format!(
            "    let b = wid.z / {parts}u;\n    let kb = (wid.z % {parts}u) * {chunk}u;\n    let ke = min(kb + {chunk}u, {k}u);\n"
        ),
        None => format!("    let b = wid.z;\n    let kb = 0u;\n    let ke = {k}u;\n"),
    };
    let at = match split {
        Some(TileSplit { parts, .. }) => {
            format!("((b * {m}u + m) * {n}u + n) * {parts}u + wid.z % {parts}u")
        }
        None => format!("(b * {m}u + m) * {n}u + n"),
    };
    let lhs = |row: &str, step: &str| format!("in0[lhs_off(b, {row}, {step})]");
    let rhs = |col: &str, step: &str| format!("in1[rhs_off(b, {col}, {step})]");
    let mut body = operand_offsets(l, r);
    body.push_str(&gemm_main(&GemmSpec {
        tile,
        m_bound: m,
        n_bound: n,
        prelude,
        lhs: &lhs,
        rhs: &rhs,
        // Tile loads walk the contracting dimension when it is the contiguous one.
        lhs_k_inner: matches!(l.contract.as_slice(), [(_, 1)]),
        rhs_k_inner: matches!(r.contract.as_slice(), [(_, 1)]),
        row: String::new(),
        at,
        ty: scalar(ot.dtype),
    }));
    let (parts, chunk) = split.map_or((1, k), |s| (s.parts, s.chunk));
    let how = match split {
        Some(s) => format!(
            "; {} partial sums over contracting chunks of {}",
            s.parts, s.chunk
        ),
        None => String::new(),
    };
    let comment = format!(
        "kernel {name}: tiled dot_general {lt} x {rt} -> {ot} (batch {batch}, {m}x{n}, contracting {k}; {bm}x{bn} tiles staged {bk} steps at a time, {}x{} per thread{how})\nfuses: stablehlo.dot_general",
        bm / 16,
        bn / 16
    );
    let output = match split {
        Some(_) => partials::binding(0, ElementType::F32, batch * m * n * parts),
        None => Binding {
            value: op.results[0],
            ty: ot.clone(),
        },
    };
    finish_with(
        name,
        &comment,
        (operand_bindings(op, lt, rt), vec![output]),
        &body,
        [gx as u32, gy as u32, (batch * parts) as u32],
        // Steps of `bk` along k, each one loop of `bk` products.
        chunk.div_ceil(bk) * (1 + bk) + 1,
        target,
    )
}

/// How the vector dot reads one operand: four elements along its contracting dimension or
/// along its free dimension per `vec4` load, or one element per load.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Read {
    AlongK,
    AlongFree,
    Scalar,
}

/// Whether dimension `inner` of an operand (size, stride) can be read four elements at a time
/// as aligned `vec4`s: it is contiguous with a size divisible by 4, and every other
/// dimension's stride is a multiple of 4 (so every offset with the index along `inner` a
/// multiple of 4 is too).
fn vec4_along(inner: Option<&(u64, u64)>, others: &[&[(u64, u64)]]) -> bool {
    let Some(&(size, 1)) = inner else {
        return false;
    };
    size % 4 == 0
        && others
            .iter()
            .flat_map(|g| g.iter())
            .all(|&(s, st)| s == 1 || st % 4 == 0)
}

/// The read mode of an operand with dimension groups `(batch, free, contract)`.
fn read_mode(g: &Layout, k: u64) -> Read {
    let (fl, cl) = (g.free.len(), g.contract.len());
    if k % 4 == 0
        && cl > 0
        && vec4_along(
            g.contract.last(),
            &[&g.batch, &g.free, &g.contract[..cl - 1]],
        )
    {
        Read::AlongK
    } else if fl > 0 && vec4_along(g.free.last(), &[&g.batch, &g.contract, &g.free[..fl - 1]]) {
        Read::AlongFree
    } else {
        Read::Scalar
    }
}

/// How the register-blocked kernels read the two operands.
pub(super) fn read_modes(
    (l, lt): (&Layout, &TensorType),
    (r, rt): (&Layout, &TensorType),
    k: u64,
) -> (Read, Read) {
    // `WGPU_HLO_DOT_VEC=0`: scalar loads only (for comparisons).
    let scalar_only = std::env::var("WGPU_HLO_DOT_VEC").is_ok_and(|v| v == "0");
    // A `vec4` binding must be at least 16 bytes: an operand of fewer than 4 elements (k = 0
    // gives empty ones, bound as a 4-byte buffer) is read a scalar at a time.
    let mode = |g: &Layout, t: &TensorType| {
        if scalar_only || t.num_elements() < 4 {
            Read::Scalar
        } else {
            read_mode(g, k)
        }
    };
    (mode(l, lt), mode(r, rt))
}

/// The dot for CPU adapters (and for GPU shapes the tiled kernel does not take): each thread
/// keeps an R x C block of results in `vec4` registers (four columns each) and reads its
/// operands straight from memory, four elements per load where the layout allows, so that
/// `(R + C) / 4` loads feed `R x C` multiply-adds per step of k. CPU drivers run a
/// workgroup's invocations as SIMD lanes and execute every storage load as a loop over the
/// lanes (Mesa 22's llvmpipe), so loads, not arithmetic, bound the plain kernel; workgroup
/// memory and barriers are emulated there at a high cost, so none are used.
fn vector(
    name: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (l, r): (&Layout, &Layout),
    (batch, m, n, k): (u64, u64, u64, u64),
    target: Target,
) -> Result<Kernel> {
    let (ra, rb) = read_modes((l, lt), (r, rt), k);
    let ty = scalar(ot.dtype);
    let (rows, cols) = block_shape(batch, m, n, k);
    // Columns in whole vec4s; rows in whole vec4s when the left operand is read along m.
    let cols = cols.next_multiple_of(4);
    let rows = if ra == Read::AlongFree {
        rows.next_multiple_of(4)
    } else {
        rows
    };
    let kstep = if ra == Read::AlongK || rb == Read::AlongK {
        4
    } else {
        1
    };
    let (mb, nb) = (m.div_ceil(rows), n.div_ceil(cols));
    let threads = batch * mb * nb;
    let workgroups = super::kernel::grid(threads.div_ceil(64), target.max_workgroups)?;
    let mut body = String::new();
    body.push_str(&operand_offsets(l, r));
    body.push_str(
        "@compute @workgroup_size(64)\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n",
    );
    body.push_str(&super::kernel::thread_index(64));
    body.push_str(&format!(
        "    if (tid >= {threads}u) {{ return; }}\n    let n0 = (tid % {nb}u) * {cols}u;\n    let m0 = ((tid / {nb}u) % {mb}u) * {rows}u;\n    let b = tid / {}u;\n",
        mb * nb
    ));
    // Clamped row and column indices (results outside the tensor are computed and dropped).
    match ra {
        Read::AlongFree => {
            for p in 0..rows / 4 {
                body.push_str(&format!(
                    "    let mp{p} = min(m0 + {}u, {}u);\n",
                    4 * p,
                    m - 4
                ));
            }
        }
        _ => {
            for i in 0..rows {
                body.push_str(&format!("    let mi{i} = min(m0 + {i}u, {}u);\n", m - 1));
            }
        }
    }
    match rb {
        Read::AlongFree => {
            for q in 0..cols / 4 {
                body.push_str(&format!(
                    "    let nq{q} = min(n0 + {}u, {}u);\n",
                    4 * q,
                    n - 4
                ));
            }
        }
        _ => {
            for j in 0..cols {
                body.push_str(&format!("    let nj{j} = min(n0 + {j}u, {}u);\n", n - 1));
            }
        }
    }
    for i in 0..rows {
        for q in 0..cols / 4 {
            body.push_str(&format!("    var acc{i}_{q} = vec4<{ty}>();\n"));
        }
    }
    // The loop's body, then the loop (in blocks of k where it is long: `blocked_k_loop`).
    let outer = std::mem::take(&mut body);
    if ra == Read::AlongK {
        for i in 0..rows {
            body.push_str(&format!(
                "        let av{i} = in0[lhs_off(b, mi{i}, k) >> 2u];\n"
            ));
        }
    }
    if rb == Read::AlongK {
        for j in 0..cols {
            body.push_str(&format!(
                "        let wk{j} = in1[rhs_off(b, nj{j}, k) >> 2u];\n"
            ));
        }
    }
    for kk in 0..kstep {
        let kx = if kk == 0 {
            "k".to_string()
        } else {
            format!("k + {kk}u")
        };
        // The left operand's R values at this step.
        let a: Vec<String> = match ra {
            Read::AlongK => (0..rows)
                .map(|i| format!("av{i}.{}", COMP[kk as usize]))
                .collect(),
            Read::AlongFree => {
                for p in 0..rows / 4 {
                    body.push_str(&format!(
                        "        let am{kk}_{p} = in0[lhs_off(b, mp{p}, {kx}) >> 2u];\n"
                    ));
                }
                (0..rows)
                    .map(|i| format!("am{kk}_{}.{}", i / 4, COMP[(i % 4) as usize]))
                    .collect()
            }
            Read::Scalar => {
                for i in 0..rows {
                    body.push_str(&format!(
                        "        let a{kk}_{i} = in0[lhs_off(b, mi{i}, {kx})];\n"
                    ));
                }
                (0..rows).map(|i| format!("a{kk}_{i}")).collect()
            }
        };
        for q in 0..cols / 4 {
            let w = rhs_columns(rb, q, kk, &kx, ty);
            body.push_str(&format!("        let w{kk}_{q} = {w};\n"));
            for (i, ai) in a.iter().enumerate() {
                body.push_str(&format!(
                    "        acc{i}_{q} = acc{i}_{q} + {ai} * w{kk}_{q};\n"
                ));
            }
        }
    }
    let accs: Vec<String> = (0..rows)
        .flat_map(|i| (0..cols / 4).map(move |q| format!("acc{i}_{q}")))
        .collect();
    let k_loop = blocked_k_loop(
        &accs,
        &format!("vec4<{ty}>"),
        ("0u", &format!("{k}u"), kstep),
        k,
        &body,
    );
    body = outer;
    body.push_str(&k_loop);
    let (stores, store_row) = store_block(rows, cols, m, n, true, ty);
    body.push_str(&stores);
    body.push_str("}\n");
    body.push_str(&store_row);
    let comment = format!(
        "kernel {name}: vector dot_general {lt} x {rt} -> {ot} (batch {batch}, {m}x{n}, contracting {k}; {rows}x{cols} per thread, reads {ra:?} x {rb:?}, no workgroup memory)\nfuses: stablehlo.dot_general"
    );
    register_kernel(
        name,
        &comment,
        op,
        (lt, rt, ot),
        (ra, rb),
        &body,
        (workgroups, k.div_ceil(kstep)),
        target,
    )
}

/// The WGSL scalar of a register-blocked or tiled dot of `dtype` (f32, i32 or u32; see
/// [`tiled_operands`]).
pub(super) fn scalar(dtype: ElementType) -> &'static str {
    match dtype {
        ElementType::I32 => "i32",
        ElementType::U32 => "u32",
        _ => "f32",
    }
}

/// The `vec4` of the right operand's four columns `4q..4q+4` (of the thread's or lane's block)
/// at step `kk` of k (WGSL `kx`), as a register-blocked kernel reads it in mode `rb`:
/// `nq{q}` (along n), `wk{j}` loaded along k, or `nj{j}` scalars.
pub(super) fn rhs_columns(rb: Read, q: u64, kk: u64, kx: &str, ty: &str) -> String {
    match rb {
        Read::AlongFree => format!("in1[rhs_off(b, nq{q}, {kx}) >> 2u]"),
        Read::AlongK => format!(
            "vec4<{ty}>(wk{}.{c}, wk{}.{c}, wk{}.{c}, wk{}.{c})",
            4 * q,
            4 * q + 1,
            4 * q + 2,
            4 * q + 3,
            c = COMP[kk as usize]
        ),
        Read::Scalar => format!(
            "vec4<{ty}>(in1[rhs_off(b, nj{}, {kx})], in1[rhs_off(b, nj{}, {kx})], in1[rhs_off(b, nj{}, {kx})], in1[rhs_off(b, nj{}, {kx})])",
            4 * q,
            4 * q + 1,
            4 * q + 2,
            4 * q + 3
        ),
    }
}

/// The guarded stores of a `rows x cols` block of `vec4` accumulators `acc{i}_{j / 4}` at
/// rows `m0 + i`, columns `n0 + j` of batch `b` of an `m x n` result: one call per row in
/// the entry point, and the module-scope function `store_row` they call (to append after the
/// entry point). A call per row instead of every store inline keeps the entry point's
/// expressions few: naga's WGSL front end takes time superlinear in a function's expressions
/// (a 64x8 block's inline stores were half of a 16k-expression kernel); the driver inlines it.
///
/// Blocks of at most [`super::epilogue::MAX_LISTED_STORES`] keep their stores inline: on CPU
/// adapters an epilogue lists each store of the entry point, run once per invocation. Larger
/// ones, with `replay` (results stored where they lie, not as partial sums), also supply the
/// block for an epilogue to replay (`epilogue::replay_function`).
pub(super) fn store_block(
    rows: u64,
    cols: u64,
    m: u64,
    n: u64,
    replay: bool,
    ty: &str,
) -> (String, String) {
    if rows * cols <= super::epilogue::MAX_LISTED_STORES as u64 {
        let mut s = String::new();
        for i in 0..rows {
            for j in 0..cols {
                s.push_str(&format!(
                    "    if (m0 + {i}u < {m}u && n0 + {j}u < {n}u) {{ out0[(b * {m}u + m0 + {i}u) * {n}u + n0 + {j}u] = acc{i}_{}.{}; }}\n",
                    j / 4,
                    COMP[(j % 4) as usize]
                ));
            }
        }
        return (s, String::new());
    }
    let vecs = cols.div_ceil(4);
    let mut calls = String::new();
    for i in 0..rows {
        let accs: Vec<String> = (0..vecs).map(|q| format!(", acc{i}_{q}")).collect();
        calls.push_str(&format!(
            "    store_row(b, m0 + {i}u, n0{});\n",
            accs.concat()
        ));
    }
    let params: Vec<String> = (0..vecs).map(|q| format!(", a{q}: vec4<{ty}>")).collect();
    let mut f = format!(
        "\nfn store_row(b: u32, row: u32, n0: u32{}) {{\n    if (row >= {m}u) {{ return; }}\n    let base = (b * {m}u + row) * {n}u + n0;\n",
        params.concat()
    );
    for j in 0..cols {
        f.push_str(&format!(
            "    if (n0 + {j}u < {n}u) {{ out0[base + {j}u] = a{}.{}; }}\n",
            j / 4,
            COMP[(j % 4) as usize]
        ));
    }
    f.push_str("}\n");
    if replay {
        // Both callers start blocks at multiples of `cols` (`n0 = tile * cols`, or a lane's
        // `cols` within a tile of whole lanes): with `cols` and `n` multiples of 4, each block
        // row is aligned groups of four, all stored or none.
        let (step, visit) = if cols % 4 == 0 && n % 4 == 0 {
            (4, "wh_ep_quad(o);")
        } else {
            (1, "wh_ep_element(o);")
        };
        let block = format!(
            "    for (var r = 0u; r < {rows}u; r = r + 1u) {{\n        \
             if (m0 + r >= {m}u) {{ break; }}\n        \
             let base = (b * {m}u + m0 + r) * {n}u + n0;\n        \
             for (var c = 0u; c < {cols}u; c = c + {step}u) {{\n            \
             if (n0 + c < {n}u) {{ let o = base + c; {visit} }}\n        \
             }}\n    }}\n"
        );
        f.push_str(&super::epilogue::replay_function(
            "b: u32, m0: u32, n0: u32",
            "b, m0, n0",
            rows * cols,
            &block,
        ));
    }
    (calls, f)
}

/// The kernel of a register-blocked dot: `comment` and the bindings (`vec4` views of the
/// operands read so) before `body`, validated.
#[allow(clippy::too_many_arguments)]
pub(super) fn register_kernel(
    name: &str,
    comment: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (ra, rb): (Read, Read),
    body: &str,
    (workgroups, iterations): ([u32; 3], u64),
    target: Target,
) -> Result<Kernel> {
    let ty = scalar(ot.dtype);
    let elem = |mode: Read| {
        if mode == Read::Scalar {
            ty.to_string()
        } else {
            format!("vec4<{ty}>")
        }
    };
    let mut wgsl = String::new();
    for line in comment.lines() {
        wgsl.push_str(&format!("// {line}\n"));
    }
    wgsl.push_str(&format!(
        "@group(0) @binding(0) var<storage, read> in0: array<{}>;\n\
         @group(0) @binding(1) var<storage, read> in1: array<{}>;\n\
         @group(0) @binding(2) var<storage, read_write> out0: array<{ty}>;\n\n",
        elem(ra),
        elem(rb)
    ));
    wgsl.push_str(body);
    super::kernel::validate(name, &wgsl, target.caps)?;
    let inputs = vec![
        Binding {
            value: op.operands[0],
            ty: lt.clone(),
        },
        Binding {
            value: op.operands[1],
            ty: rt.clone(),
        },
    ];
    let outputs = vec![Binding {
        value: op.results[0],
        ty: ot.clone(),
    }];
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs,
        outputs,
        workgroups,
        iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}
