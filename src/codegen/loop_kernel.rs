//! The loop emitter: one thread per output element computes every fused op inline. Threads
//! that write packed narrow types (8/16-bit, `i1`) compute a whole 32-bit word of elements, so
//! every store is a plain word store.

use std::collections::{BTreeSet, HashMap};

use super::dtype;
use super::expr::{large, Binding, ContractionChunk, ExprEmitter, Index, Window};
use super::kernel::{self, Kernel, WORKGROUP};
use super::op_kernels::{Launch, Plan, PARAMS};
use super::windows;
use crate::error::{Error, Result};
use crate::fusion::Group;
use crate::ir::{Function, Op, Operation, ValueId};
pub use crate::target::{
    max_invocation_iterations_from_env, Target, DEFAULT_MAX_INVOCATION_ITERATIONS,
};

/// Emits the loop kernel for `group`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    target: Target,
) -> Result<Kernel> {
    match transposing_tiles(name, f, defs, group, target) {
        Ok(Some(k)) => return Ok(k),
        Ok(None) => {}
        // The plain loop kernel computes the same values (and reports what it cannot do).
        Err(e) => log::debug!("{name}: no transposing tiles: {e}"),
    }
    emit_split(name, f, defs, group, target, None)
}

/// Least output elements for [`transposing_tiles`]: below it the rows a transpose reads
/// across stay in the caches anyway.
const TILED_TRANSPOSE_MIN: usize = 1 << 14;

/// Elements per invocation along each of a tile's two dimensions.
const TILE_BLOCK: usize = 4;

/// The loop kernel of `group` by tiles, when it reads some input across the rows of a
/// transpose: a plain loop kernel's neighbouring invocations compute neighbouring output
/// elements, so such an input is read a row apart by each (a 4096 x 4096 transpose: every
/// load a cache line, and a page, of its own). Here each invocation computes a 4 x 4 block of
/// the outputs, 4 consecutive positions along dimension `a` (the one that is the read input's
/// innermost) by 4 along the innermost one: it reads the transposed input as 4 `vec4`s, each
/// 4 consecutive elements of one of its rows, and stores each output row's 4 as a `vec4`. A
/// workgroup's invocations cover a tile of 64 positions by 64 (fewer along `a` when it is
/// shorter), neighbouring invocations neighbouring blocks along `a`, so neighbouring lanes
/// load neighbouring `vec4`s of the input's rows (a GPU's loads coalesce; its stores are two
/// lanes' 32 contiguous bytes per row) and a tile's rows stay in the cache until it is done.
///
/// Registers, not workgroup memory, carry the transposition: a hand-written workgroup-memory
/// tile (32 x 32, padded rows) took 93-97 ms on lavapipe for the 4096 x 4096 f32 transpose,
/// these blocks 47-53 ms, the plain loop kernel 113-129 ms (a copy of the same bytes 15-16
/// ms): llvmpipe runs each lane's workgroup-memory access and every barrier as scalar work.
///
/// `None` where it does not apply: no input read across rows, outputs below
/// [`TILED_TRANSPOSE_MIN`] elements, tiles whose blocks would fill under half a workgroup, of other than 32-bit unpacked types or of several
/// shapes, loads across rows at other positions than one output dimension's, extents of that
/// dimension or the innermost one not multiples of 4, or a tensor larger than one binding
/// (windowed and parted kernels read by element). `WGPU_HLO_TRANSPOSE_TILES=0` turns it off.
fn transposing_tiles(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    target: Target,
) -> Result<Option<Kernel>> {
    if crate::fusion::switched_off("WGPU_HLO_TRANSPOSE_TILES") {
        return Ok(None);
    }
    let fused = |v: ValueId| group.members.contains(&v);
    let mut probe = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    let outs: Vec<Binding> = probe.bindings(&group.outputs)?;
    let Some(first) = outs.first() else {
        return Ok(None);
    };
    let dims = first.ty.dims();
    let rank = dims.len();
    let word_outputs = outs.iter().all(|o| {
        let elem = dtype::storage_elem(o.ty.dtype);
        o.ty.dims() == dims
            && dtype::per_word(o.ty.dtype) == 1
            && matches!(elem, "f32" | "i32" | "u32")
            && probe.compute(o.ty.dtype).is_ok_and(|c| c.wgsl() == elem)
    });
    if rank < 2 || first.ty.num_elements() < TILED_TRANSPOSE_MIN || !word_outputs {
        return Ok(None);
    }
    // Which output dimension the inputs read across rows are read along: every such load's
    // innermost index must depend on that dimension's index alone (as itself, or through a
    // slice's stride and offset: those loads are not grouped, but the tiles keep what they
    // read in the cache).
    let names: Vec<String> = (0..rank).map(|k| format!("p{k}")).collect();
    for o in &outs {
        probe.value(o.value, &Index::Multi(names.clone()))?;
    }
    let mut along = None;
    for idx in &probe.across_loads {
        let Index::Multi(m) = idx else {
            return Ok(None);
        };
        let Some(innermost) = m.last() else {
            return Ok(None);
        };
        let mut used = identifiers(innermost).filter(|t| names.iter().any(|n| n == t));
        let (Some(only), None) = (used.next(), used.next()) else {
            return Ok(None);
        };
        let Some(a) = names.iter().position(|n| n == only) else {
            return Ok(None);
        };
        if along.is_some_and(|b| b != a) {
            return Ok(None);
        }
        along = Some(a);
    }
    let last = rank - 1;
    let Some(a) = along.filter(|&a| a != last) else {
        return Ok(None);
    };
    let (ext_a, ext_l) = (dims[a], dims[last]);
    if ext_a % TILE_BLOCK != 0 || ext_l % TILE_BLOCK != 0 {
        return Ok(None);
    }
    // Lanes along `a` (a power of two, at most 16) and along the innermost dimension.
    let w = WORKGROUP as usize;
    let lanes_a = ext_a.div_ceil(TILE_BLOCK).next_power_of_two().min(16);
    let lanes_l = w / lanes_a;
    // A tile whose blocks fill under half of the workgroup leaves the rest idle (llvmpipe
    // pays per workgroup): [512, 64, 8] transposed to [8, 512, 64], 2 x 16 blocks of 256,
    // took 0.85-0.88 ms by tiles and 0.51-0.78 as the plain loop kernel.
    let active = lanes_a.min(ext_a / TILE_BLOCK) * lanes_l.min(ext_l / TILE_BLOCK);
    if 2 * active < w {
        return Ok(None);
    }
    let (tiles_a, tiles_l) = (
        ext_a.div_ceil(TILE_BLOCK * lanes_a),
        ext_l.div_ceil(TILE_BLOCK * lanes_l),
    );
    let outer: usize = (0..rank)
        .filter(|&k| k != a && k != last)
        .map(|k| dims[k])
        .product();
    let groups = (outer * tiles_a * tiles_l) as u64;

    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    let (rows, cols): (Vec<String>, Vec<String>) = (0..TILE_BLOCK)
        .map(|j| (format!("r{j}"), format!("c{j}")))
        .unzip();
    em.quads = Some(super::expr::Quads {
        folded: Default::default(),
        dims: dims.clone(),
        positions: (0..TILE_BLOCK)
            .flat_map(|j| {
                [
                    (rows[j].clone(), (rows[0].clone(), j)),
                    (cols[j].clone(), (cols[0].clone(), j)),
                ]
            })
            .collect(),
        streaming: true,
        any_shape: true,
        rows: false,
    });
    let mut head = format!(
        "    let g = wid.y * nwg.x + wid.x;\n    if (g >= {groups}u) {{ return; }}\n    \
         let go = g / {}u;\n",
        tiles_a * tiles_l
    );
    // The other dimensions' indices from the tile's outer number, innermost fastest.
    let mut index: Vec<String> = vec![String::new(); rank];
    let mut stride = 1usize;
    for k in (0..rank).rev() {
        if k == a || k == last {
            continue;
        }
        index[k] = if dims[k] == 1 {
            "0u".to_string()
        } else {
            head.push_str(&format!(
                "    let o{k} = (go / {stride}u) % {}u;\n",
                dims[k]
            ));
            format!("o{k}")
        };
        stride *= dims[k];
    }
    head.push_str(&format!(
        "    let ta = (g / {tiles_l}u) % {tiles_a}u;\n    let tl = g % {tiles_l}u;\n    \
         let r0 = ta * {}u + (lid % {lanes_a}u) * 4u;\n    \
         let c0 = tl * {}u + (lid / {lanes_a}u) * 4u;\n    \
         if (r0 >= {ext_a}u || c0 >= {ext_l}u) {{ return; }}\n",
        TILE_BLOCK * lanes_a,
        TILE_BLOCK * lanes_l,
    ));
    for j in 1..TILE_BLOCK {
        head.push_str(&format!(
            "    let r{j} = r0 + {j}u;\n    let c{j} = c0 + {j}u;\n"
        ));
    }
    let mut stores = Vec::new();
    for (j, row) in rows.iter().enumerate() {
        let mut values: Vec<Vec<String>> = vec![Vec::new(); outs.len()];
        for col in &cols {
            let mut at = index.clone();
            at[a] = row.clone();
            at[last] = col.clone();
            for (o, out) in outs.iter().enumerate() {
                values[o].push(em.value(out.value, &Index::Multi(at.clone()))?);
            }
        }
        let mut at = index.clone();
        at[a] = rows[j].clone();
        at[last] = cols[0].clone();
        let lin = super::expr::linearize(&at, &dims);
        for (o, out) in outs.iter().enumerate() {
            let t = em.compute(out.ty.dtype)?.wgsl();
            stores.push(format!(
                "out{o}[{lin} / 4u] = vec4<{t}>({});",
                values[o].join(", ")
            ));
        }
    }
    for s in &stores {
        em.line(s);
    }
    let limit = target.max_binding_size;
    if em.inputs.iter().chain(&outs).any(|b| large(&b.ty, limit)) {
        return Ok(None);
    }
    let mut body = kernel::entry_header(WORKGROUP);
    body.push_str(&head);
    let comment = format!(
        "kernel {name}: loop over {} elements by tiles of {} x {} (dimensions {a} and {last}), \
         {TILE_BLOCK} x {TILE_BLOCK} per thread: reads across the rows of a transpose",
        first.ty.num_elements(),
        TILE_BLOCK * lanes_a,
        TILE_BLOCK * lanes_l
    );
    let vec4_outs: Vec<usize> = (0..outs.len()).collect();
    finish(name, &comment, &em, outs, body, groups, target, &vec4_outs).map(Some)
}

/// The kernel of a horizontal group (see `fusion::horizontal`): part `i` runs in the
/// invocations after those of the parts before it, each computing its outputs at its own
/// linear index as its loop kernel would. Refused (the parts are then launched apart) for
/// packed outputs, tensors larger than one binding, or more bindings than the adapter has.
pub fn emit_horizontal(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    target: Target,
) -> Result<Kernel> {
    let fused = |v: ValueId| group.members.contains(&v);
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    // Part i runs in whole workgroups after those of the parts before it, so the branch that
    // selects it is uniform in a workgroup: each invocation runs its own part's code only
    // (llvmpipe runs both sides of a branch that diverges within its lanes).
    let w = WORKGROUP as u64;
    let mut outs: Vec<Binding> = Vec::new();
    let (mut groups, mut elements) = (0u64, 0u64);
    for part in &group.parts {
        let first = outs.len();
        for &v in &part.outputs {
            outs.push(Binding {
                value: v,
                ty: em.ty(v)?.clone(),
            });
        }
        let Some(n) = outs.get(first).map(|o| o.ty.num_elements() as u64) else {
            continue;
        };
        if outs[first..]
            .iter()
            .any(|o| o.ty.num_elements() as u64 != n || dtype::per_word(o.ty.dtype) != 1)
        {
            return Err(Error::unimplemented(format!(
                "{name}: a horizontal part with packed outputs or outputs of several sizes"
            )));
        }
        let end = groups + n.div_ceil(w);
        let header = format!("if (grp < {end}u)");
        if groups == 0 {
            em.open(&header);
        } else {
            em.close(Some(&format!("else {header}")));
        }
        em.line(&format!("let t = (grp - {groups}u) * {w}u + lid;"));
        em.open(&format!("if (t < {n}u)"));
        for (j, o) in outs.iter().enumerate().skip(first) {
            let v = em.value(o.value, &Index::Linear("t".to_string()))?;
            em.line(&format!("out{j}[t] = {v};"));
        }
        em.close(None);
        groups = end;
        elements += n;
    }
    if groups > 0 {
        em.close(None);
    }
    let limit = target.max_binding_size;
    if em.inputs.iter().chain(&outs).any(|b| large(&b.ty, limit)) {
        return Err(Error::unimplemented(format!(
            "{name}: horizontal kernel over a tensor larger than one binding"
        )));
    }
    let mut body = kernel::entry_header(WORKGROUP);
    body.push_str(&format!(
        "    let grp = wid.y * nwg.x + wid.x;\n    if (grp >= {groups}u) {{ return; }}\n"
    ));
    let comment = format!(
        "kernel {name}: {} loop kernels in one launch, {elements} elements in all",
        group.parts.len()
    );
    finish(name, &comment, &em, outs, body, groups, target, &[])
}

/// The loop kernel of `em`'s statements under the entry `head` (which defines what they use),
/// launched over `groups` workgroups, once its bindings are within the adapter's budget.
/// Outputs in `vec4_outs` are declared as arrays of vec4s of their element type.
#[allow(clippy::too_many_arguments)]
fn finish(
    name: &str,
    comment: &str,
    em: &ExprEmitter,
    outs: Vec<Binding>,
    mut body: String,
    groups: u64,
    target: Target,
    vec4_outs: &[usize],
) -> Result<Kernel> {
    let bindings = em.inputs.len() + outs.len();
    if bindings as u32 > target.max_storage_buffers {
        return Err(Error::unimplemented(format!(
            "{name}: fused kernel needs {bindings} storage buffers, adapter {} allows {}",
            target.adapter, target.max_storage_buffers
        )));
    }
    body.push_str(&em.body);
    body.push_str("}\n");
    let comment = format!(
        "{comment}\nfuses: {}",
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    kernel::in_workgroups_vec4(
        name,
        &comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        &body,
        vec4_outs,
        (groups, em.iterations()),
        target,
    )
}

/// A split-K stage of a `dot_general` or `convolution` computed by the loop emitter: `chunks`
/// partial products per output element, written to `partials` (one binding per output,
/// element `o * chunks + c`, in the outputs' compute types, not rounded). A dot's chunk `c`
/// covers contracting steps `c * chunk ..` (at most `chunk`); a convolution's chunk `c`
/// covers window positions `(c / feature_chunks) * chunk ..` (at most `chunk`) and input
/// features `(c % feature_chunks) * feature_chunk ..` (at most `feature_chunk`).
pub struct SplitK {
    /// Chunks per output element (for a convolution, window chunks times feature chunks).
    pub chunks: u64,
    /// Contracting steps (window positions) per chunk.
    pub chunk: u64,
    /// Chunks of the input features (1 for a dot).
    pub feature_chunks: u64,
    /// Input features per chunk (convolutions).
    pub feature_chunk: u64,
    /// The partials' bindings.
    pub partials: Vec<Binding>,
}

/// [`emit`], or with `split` its split-K partial-products stage (`group` is a `dot_general`
/// or `convolution` with its producers; partials must be unpacked).
pub fn emit_split(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    target: Target,
    split: Option<&SplitK>,
) -> Result<Kernel> {
    let fused = |v: ValueId| group.members.contains(&v);
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    if let (Some(s), Some(&v)) = (split, group.outputs.first()) {
        let fc = s.feature_chunks.max(1);
        em.line(&format!("let kq = tid % {}u;", s.chunks));
        em.line(&format!("let kc = (kq / {fc}u) * {}u;", s.chunk));
        em.line(&format!("let kf = (kq % {fc}u) * {}u;", s.feature_chunk));
        em.contraction_chunk = Some(ContractionChunk {
            value: v,
            start: "kc".to_string(),
            len: s.chunk,
            feature_start: "kf".to_string(),
            feature_len: s.feature_chunk,
        });
    }
    let outs: Vec<Binding> = em.bindings(&group.outputs)?;
    let first = outs
        .first()
        .ok_or_else(|| Error::internal(format!("{name}: loop kernel without outputs")))?;
    let n = first.ty.num_elements() as u64;
    if outs.iter().any(|o| o.ty.num_elements() as u64 != n) {
        return Err(Error::internal(format!("{name}: outputs differ in size")));
    }
    if let Some(s) = split {
        let convolution = group
            .outputs
            .first()
            .and_then(|v| defs.get(v))
            .is_some_and(|op| matches!(op.op, Op::Convolution(_)));
        return split_k_stage(name, em, &outs, s, convolution, target);
    }
    elementwise(name, em, outs, n, target, false).map(|(k, _, _)| k)
}

/// The loop kernel of `group` as a plan when some tensor it reads or writes is larger than
/// one binding may be: one launch per window of elements (see `codegen::windows`). `None`
/// when every tensor fits a binding. A large tensor read at other elements than the
/// invocation's own (a transpose, a gather, a slice of it ...) is bound whole in every launch,
/// in parts (`codegen::parted`, when the compile driver checks the kernel).
pub fn windowed_plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    kernel: &Kernel,
    target: Target,
) -> Result<Option<Plan>> {
    let limit = target.max_binding_size;
    if !kernel
        .inputs
        .iter()
        .chain(&kernel.outputs)
        .any(|b| large(&b.ty, limit))
    {
        return Ok(None);
    }
    let fused = |v: ValueId| group.members.contains(&v);
    let outs = kernel.outputs.clone();
    let n = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    let emit = |whole: BTreeSet<ValueId>| {
        let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
        em.inputs.push(windows::params_binding());
        let mut window = Window::new(limit, "ebase");
        window.whole = Some(whole);
        em.window = Some(window);
        elementwise(name, em, outs.clone(), n, target, true)
    };
    let (mut kernel, mut k, mut window) = emit(BTreeSet::new())?;
    // A value read both at the invocation's own elements and elsewhere: whole everywhere.
    if let Some(w) = window.as_ref().filter(|w| w.is_read_both_ways()) {
        (kernel, k, window) = emit(w.whole.clone().unwrap_or_default())?;
    }
    let whole = window.and_then(|w| w.whole).unwrap_or_default();
    let windowed =
        |b: &Binding| b.value != PARAMS && large(&b.ty, limit) && !whole.contains(&b.value);
    // Launch `c` runs invocations from `c * per_launch / k`, elements `c * per_launch ..`.
    let large_types: Vec<_> = kernel
        .inputs
        .iter()
        .chain(&kernel.outputs)
        .filter(|b| windowed(b))
        .map(|b| b.ty.dtype)
        .collect();
    let multiple = windows::element_multiple(&large_types, target.min_binding_offset_alignment, k);
    // No more than the elements there are: a kernel whose large tensors are all read whole
    // (a gather from a large table into a small result) is one launch of its own size.
    let per_launch = windows::window_elements(name, &large_types, multiple, &target)?
        .min(n.next_multiple_of(multiple).max(multiple));
    kernel.workgroups = windows::workgroups(per_launch / k, &target)?;
    let bindings: Vec<Binding> = kernel
        .inputs
        .iter()
        .chain(&kernel.outputs)
        .cloned()
        .collect();
    let mut chunks = Vec::new();
    let mut e0 = 0;
    while e0 < n {
        let e1 = (e0 + per_launch).min(n);
        let invocations = (e0 / k, e1.div_ceil(k));
        chunks.push(windows::chunk(&bindings, &windowed, invocations, (e0, e1))?);
        e0 = e1;
    }
    Ok(Some(Plan {
        kernels: vec![kernel],
        temps: Vec::new(),
        launches: vec![Launch::chunked(0, chunks)],
    }))
}

/// The elementwise loop over the `n` elements of `outs`: one invocation per element, or per
/// 32-bit word of packed narrow outputs. `windowed`: a kernel of [`windowed_plan`], whose
/// binding 0 holds the first invocation and first element of its launch, large tensors bound
/// from that element on. Returns the kernel and the elements per invocation.
fn elementwise(
    name: &str,
    mut em: ExprEmitter,
    outs: Vec<Binding>,
    n: u64,
    target: Target,
    windowed: bool,
) -> Result<(Kernel, u64, Option<Window>)> {
    let k = outs
        .iter()
        .map(|o| dtype::per_word(o.ty.dtype))
        .max()
        .unwrap_or(1) as u64;
    // On CPU adapters, outputs of 32-bit words whose element count is a multiple of 4 are
    // computed four elements per invocation and stored as vec4s: llvmpipe runs a storage
    // store as a loop over its lanes, and 2^20 scalar stores took 4.4-7 ms against 1.2-1.5 ms
    // as vec4s. `WGPU_HLO_VEC4_STORES=0` turns it off.
    // Windowed launches too: their windows start at multiples of the elements per invocation
    // (`windowed_plan`), so a large output's window starts at a whole vec4.
    let vec4 = target.cpu_adapter
        && k == 1
        && n >= 4
        && n % 4 == 0
        && outs.iter().all(|o| {
            let elem = dtype::storage_elem(o.ty.dtype);
            dtype::per_word(o.ty.dtype) == 1
                && matches!(elem, "f32" | "i32" | "u32")
                && em.compute(o.ty.dtype).is_ok_and(|c| c.wgsl() == elem)
        })
        && !crate::fusion::switched_off("WGPU_HLO_VEC4_STORES");
    let k = if vec4 { 4 } else { k };
    // The four elements of an invocation are one aligned group: inputs read at them are read
    // as one vec4 (one texel fetch from a texture; `WGPU_HLO_QUAD_READS=0` turns it off).
    if vec4 && !windowed && !crate::fusion::switched_off("WGPU_HLO_QUAD_READS") {
        em.quads = Some(super::expr::Quads::linear_fours(
            !crate::fusion::switched_off("WGPU_HLO_QUAD_ROWS"),
        ));
    }
    let mut vec4_values: Vec<Vec<String>> = vec![Vec::new(); outs.len()];
    let threads = n.div_ceil(k);
    let limit = target.max_binding_size;
    // Where large outputs start in a windowed launch: element `ebase`, word `ebase / p`.
    let shift = |o: &Binding, index: String, per: u64| -> String {
        if windowed && large(&o.ty, limit) {
            if per == 1 {
                format!("({index} - ebase)")
            } else {
                format!("({index} - ebase / {per}u)")
            }
        } else {
            index
        }
    };
    if let Some(w) = em.window.as_mut() {
        w.own.extend((0..k).map(|e| {
            if k == 1 {
                "tid".to_string()
            } else {
                format!("l{e}")
            }
        }));
    }
    // Word accumulators of packed outputs.
    for (j, o) in outs.iter().enumerate() {
        let p = dtype::per_word(o.ty.dtype) as u64;
        if p > 1 {
            for q in 0..k / p {
                em.line(&format!("var w{j}_{q}: u32 = 0u;"));
            }
        }
        for h in dtype::helpers_for(o.ty.dtype) {
            em.needs.insert(h.to_string());
        }
    }
    for e in 0..k {
        let lin = if k == 1 {
            "tid".to_string()
        } else {
            let l = format!("l{e}");
            em.line(&format!("let {l} = tid * {k}u + {e}u;"));
            l
        };
        let guarded = k > 1 && n % k != 0;
        if guarded {
            em.open(&format!("if ({lin} < {n}u)"));
        }
        for (j, o) in outs.iter().enumerate() {
            let p = dtype::per_word(o.ty.dtype) as u64;
            // A bool or narrow float that is a reinterpretation of other bits (or a copy of
            // an input's) is stored as those bits: its value would lose some (see
            // `ExprEmitter::raw_bits_of`).
            if p > 1 && !vec4 && dtype::lossy_values(o.ty.dtype) {
                if let Some(bits) = em.raw_bits_of(o.value, &Index::Linear(lin.clone()))? {
                    let width = 32 / p;
                    let (q, shift) = (e / p, (e % p) * width);
                    let mask = (1u64 << width) - 1;
                    em.line(&format!(
                        "w{j}_{q} = w{j}_{q} | (({bits} & {mask}u) << {shift}u);"
                    ));
                    continue;
                }
            }
            let v = em.value(o.value, &Index::Linear(lin.clone()))?;
            if vec4 {
                vec4_values[j].push(v);
            } else if p == 1 {
                em.line(&format!("out{j}[{}] = {v};", shift(o, lin.clone(), 1)));
            } else {
                let bits = 32 / p;
                let q = e / p;
                let shift = (e % p) * bits;
                em.line(&format!(
                    "w{j}_{q} = w{j}_{q} | ({} << {shift}u);",
                    dtype::to_bits(o.ty.dtype, &v)
                ));
            }
        }
        if guarded {
            em.close(None);
        }
    }
    if vec4 {
        for (j, o) in outs.iter().enumerate() {
            let t = em.compute(o.ty.dtype)?.wgsl();
            em.line(&format!(
                "out{j}[{}] = vec4<{t}>({});",
                shift(o, "tid".to_string(), 4),
                vec4_values[j].join(", ")
            ));
        }
    }
    for (j, o) in outs.iter().enumerate() {
        let p = dtype::per_word(o.ty.dtype) as u64;
        if p > 1 {
            let words = n.div_ceil(p);
            for q in 0..k / p {
                let w = format!("tid * {}u + {q}u", k / p);
                let at = shift(o, w.clone(), p);
                if (threads * (k / p)) > words {
                    em.line(&format!(
                        "if ({w} < {words}u) {{ out{j}[{at}] = w{j}_{q}; }}"
                    ));
                } else {
                    em.line(&format!("out{j}[{at}] = w{j}_{q};"));
                }
            }
        }
    }
    let wg = if windowed {
        WORKGROUP
    } else {
        tiny_workgroup(threads, target)
    };
    let mut body = kernel::entry_header(wg);
    if windowed {
        body.push_str(&format!(
            "    let tid = (wid.y * nwg.x + wid.x) * {WORKGROUP}u + lid + in0[0];\n"
        ));
        body.push_str(&format!("    {}\n", windows::guard("tid", threads)));
        body.push_str("    let ebase = in0[1];\n");
    } else {
        body.push_str(&kernel::thread_index(wg));
        body.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
    }
    let comment = format!(
        "kernel {name}: loop over {n} elements ({k} per thread{})",
        if windowed {
            ", launched in windows of its large tensors"
        } else {
            ""
        },
    );
    let groups = threads.div_ceil(wg as u64);
    let vec4_outs: Vec<usize> = if vec4 {
        (0..outs.len()).collect()
    } else {
        Vec::new()
    };
    Ok((
        finish(name, &comment, &em, outs, body, groups, target, &vec4_outs)?,
        k,
        em.window,
    ))
}

/// Invocations per workgroup of a loop kernel of `threads` invocations: [`WORKGROUP`], or on
/// CPU adapters one SIMD group ([`TINY_WORKGROUP`]) for a kernel that fits in one. A loop's
/// counter or index (`i + 1`, `T - 1 - i`: one invocation) then merges into the launch of a
/// recurrent step's dot, whose workgroups are one subgroup (`compile::merge`): on llvmpipe a
/// launch costs ~50 µs whatever it computes, as much as the step's elementwise work.
fn tiny_workgroup(threads: u64, target: Target) -> u32 {
    if target.cpu_adapter && threads <= TINY_WORKGROUP as u64 {
        TINY_WORKGROUP
    } else {
        WORKGROUP
    }
}

/// The workgroup of a loop kernel that one SIMD group of llvmpipe (8 lanes of 256-bit AVX)
/// runs whole.
const TINY_WORKGROUP: u32 = 8;

/// The identifiers in WGSL expression `e`.
fn identifiers(e: &str) -> impl Iterator<Item = &str> {
    e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The partial-products stage of a split-K dot or convolution: thread `tid` computes chunk
/// `tid % chunks` of output element `tid / chunks`.
fn split_k_stage(
    name: &str,
    mut em: ExprEmitter,
    outs: &[Binding],
    s: &SplitK,
    convolution: bool,
    target: Target,
) -> Result<Kernel> {
    let n = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    if s.partials.iter().any(|p| dtype::per_word(p.ty.dtype) > 1) || outs.len() != s.partials.len()
    {
        return Err(Error::internal(format!(
            "{name}: split-K of packed or mismatched outputs"
        )));
    }
    let threads = n * s.chunks;
    em.line(&format!("let o = tid / {}u;", s.chunks));
    for (j, o) in outs.iter().enumerate() {
        let v = em.value(o.value, &Index::Linear("o".into()))?;
        em.line(&format!("out{j}[tid] = {v};"));
    }
    let comment = format!(
        "kernel {name}: split-K partial products, {} chunks of {} for each of {n} elements\nfuses: {}",
        s.chunks,
        if convolution {
            format!(
                "{} window positions x {} input features",
                s.chunk, s.feature_chunk
            )
        } else {
            format!("{} contracting steps", s.chunk)
        },
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    kernel::threaded(
        name,
        &comment,
        em.inputs.clone(),
        s.partials.clone(),
        &em.needs,
        "",
        &em.body,
        threads,
        em.iterations(),
        target,
    )
}
