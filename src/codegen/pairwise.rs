//! Reductions of expanded expressions by register tiles (CPU adapters): a `reduce` whose fused
//! input is much larger than the tensors it reads — pairwise distances written as
//! `sum((x[:, None] - y[None]) ** 2, -1)`, a Gaussian process's RBF kernel, `min(a[:, None] +
//! b[None], -1)` — computes a tile of `TM x TN` outputs per invocation. The reduced elements
//! are walked once for the whole tile, so a value that depends on the tile's row and the
//! reduced position only (`x[i, k]`, `x[i, k] ** 2`) is loaded and computed once per tile row
//! instead of once per output, and the loads read four consecutive reduced positions as one
//! `vec4` where the tensor's rows allow ([`Quads`]).
//!
//! The other reduction kernels give each output (or row) its own invocation (or subgroup):
//! for `N x N` outputs of a `K`-long expression they load `2 N² K` values. Lavapipe runs each
//! storage load as a loop over the SIMD lanes, so those loads were the cost: `sum((x[:, None]
//! - x[None]) ** 2, -1)` of 1024 x 64 took 195 ms against 5.3 ms on jax cpu (37x).
//!
//! Each output's elements are folded in order (an f32 sum in blocks of [`SUM_BLOCK`], as the
//! thread-per-output reduction), so the result does not depend on the tile. The merged row
//! kernels' reductions whose outputs are per row only (an RBF kernel's `exp(-d / 2)`) are
//! taken too: the outputs are computed from the accumulators at the stores.

use std::collections::{HashMap, HashSet};

use super::dtype::{self, Compute};
use super::expr::{large, Binding, ExprEmitter, Index, Quads};
use super::kernel::{self, Kernel, WORKGROUP};
use super::loop_kernel::Target;
use super::reduce_kernel::{emit_body_function, region_defs, Fold, ReducedDims};
use crate::error::{Error, Result};
use crate::fusion::{switched_off, Group};
use crate::ir::{Function, Op, Operation, ValueId};

/// Tile shapes (outputs along the tile's rows, along its columns) tried in turn, the largest
/// first: a smaller one where the larger one's WGSL outgrows [`WGSL_MAX`]. Lavapipe, 2-core
/// host, ms a call (median of 21, two rounds) at 4 x 4 / 8 x 4 / 8 x 8: squared distances
/// of 1024 x 64 13.9-15.1 / 8.5 / 7.9-10.7, an RBF kernel of 1024 x 512 by 64 5.9-6.8 /
/// 4.5-7.3 / 3.9-4.0, L1 distances 5.2-5.4 / 4.2-6.6 / 3.3-5.1 (jax cpu 5.7-5.9, 3.1-4.1,
/// 3.2). The first call (Mesa's shader cache off) of the squared distances took 0.13 /
/// 0.18 / 0.22 s. `WGPU_HLO_PAIRWISE_TILE=RxC` tries `R x C` first.
const TILES: [(usize, usize); 5] = [(8, 8), (8, 4), (4, 4), (2, 4), (2, 2)];

/// The reduce's input must have at least this many times the elements of all the tensors the
/// kernel reads: below that, each value is read about once anyway and the other kernels do.
const EXPANSION_MIN: u64 = 8;

/// At least this many tiles (invocations), so that the cores have work; fewer outputs of long
/// reductions are better cut into chunks of the reduced elements (`reduce_kernel::plan`).
const TILES_MIN: u64 = 256;

/// Bytes of WGSL the element loop may take (a costly expression makes a smaller tile).
const WGSL_MAX: usize = 48 * 1024;

/// `WGPU_HLO_PAIRWISE=0` turns these kernels off (for comparisons).
fn enabled() -> bool {
    !switched_off("WGPU_HLO_PAIRWISE")
}

/// The kernel of the reduce `op` of `group` (a `Reduce` group, or a merged row group of that
/// one reduction whose outputs are all per row), writing `group.outputs`. An error (refusal)
/// leaves the group to the other reduction kernels.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let refuse = |why: &str| {
        Err(Error::unimplemented(format!(
            "{name}: pairwise reduction: {why}"
        )))
    };
    if !target.cpu_adapter || !enabled() {
        return refuse("not a CPU adapter, or switched off");
    }
    let Op::Reduce { dimensions } = &op.op else {
        return refuse("not a reduce");
    };
    let Some(body) = op.regions.first() else {
        return refuse("no body");
    };
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| group.members.contains(&v) || body_vals.contains(&v);
    let base = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);

    let in_ty = base.ty(op.operands[0])?.clone();
    let dims = in_ty.dims();
    let rd = ReducedDims::of(&dims, dimensions);
    let (kept, kept_dims) = (&rd.kept, &rd.kept_dims);
    let (red_count, kept_count) = (rd.red_count, rd.kept_count);
    // The tile's rows and columns: the last two kept dimensions longer than 1.
    let long: Vec<usize> = (0..kept.len()).filter(|&k| kept_dims[k] > 1).collect();
    let [.., ki, kj] = long[..] else {
        return refuse("fewer than two kept dimensions");
    };
    let (rows, cols) = (kept_dims[ki], kept_dims[kj]);
    if red_count == 0 || rows < 4 || cols < 4 {
        return refuse("too small");
    }
    let types: Vec<Compute> = op
        .results
        .iter()
        .map(|&r| base.compute(base.ty(r)?.dtype))
        .collect::<Result<_>>()?;
    if !types
        .iter()
        .all(|t| matches!(t, Compute::F32 | Compute::I32 | Compute::U32))
    {
        return refuse("results not of 32-bit types");
    }
    // Every output is per row (of the kept shape, in its order) and stored as computed.
    let outs: Vec<Binding> = base.bindings(&group.outputs)?;
    for o in &outs {
        let c = base.compute(o.ty.dtype)?;
        if o.ty.num_elements() as u64 != kept_count
            || dtype::per_word(o.ty.dtype) != 1
            || dtype::storage_elem(o.ty.dtype) != c.wgsl()
        {
            return refuse("an output not per row, or not stored as computed");
        }
    }
    let batch_dims: Vec<usize> = (0..kept.len())
        .filter(|&k| k != ki && k != kj)
        .map(|k| kept_dims[k])
        .collect();
    let batch: u64 = batch_dims.iter().product::<usize>() as u64;
    let mut last = refuse("no tile fits");
    let mut tiles_tried: Vec<(usize, usize)> = TILES.to_vec();
    if let Ok(t) = std::env::var("WGPU_HLO_PAIRWISE_TILE") {
        if let Some((a, b)) = t.split_once('x') {
            if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                tiles_tried.insert(0, (a, b));
            }
        }
    }
    for (tm, tn) in tiles_tried {
        let tiles = batch * rows.div_ceil(tm) as u64 * cols.div_ceil(tn) as u64;
        if tiles < TILES_MIN {
            last = refuse("too few tiles");
            continue;
        }
        let shape = Shape {
            dims: &dims,
            rd: &rd,
            batch_dims: &batch_dims,
            tile: (ki, kj, tm, tn),
        };
        let mut em = base.clone();
        let (func, body_len) = emit_tile(&mut em, op, body, &types, &outs, &shape)?;
        if body_len > WGSL_MAX {
            last = refuse("the element loop's WGSL is too long");
            continue;
        }
        let read: u64 = em.inputs.iter().map(|b| b.ty.num_elements() as u64).sum();
        if red_count * kept_count < EXPANSION_MIN * read.max(1) {
            return refuse("its input is not much larger than the tensors it reads");
        }
        if em
            .inputs
            .iter()
            .chain(&outs)
            .any(|b| large(&b.ty, target.max_binding_size))
        {
            return refuse("a tensor over the binding limit");
        }
        let bindings = em.inputs.len() + outs.len();
        if bindings as u32 > target.max_storage_buffers {
            return refuse("too many bindings");
        }
        let iterations = em.iterations();
        if iterations > target.max_invocation_iterations {
            return refuse("too long for one invocation");
        }
        let mut main = kernel::entry_header(WORKGROUP);
        main.push_str(&kernel::thread_index(WORKGROUP));
        main.push_str(&format!("    if (tid >= {tiles}u) {{ return; }}\n"));
        main.push_str(&em.body);
        main.push_str("}\n");
        let comment = format!(
            "kernel {name}: reduce {red_count} elements into each of {kept_count} by tiles of \
             {tm} x {tn} outputs per invocation (pairwise)\nfuses: {}",
            em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        let source = format!("\n{func}{main}");
        let wgsl = kernel::assemble(
            name,
            &comment,
            &em.inputs,
            &outs,
            &em.needs,
            &source,
            target.caps,
        )?;
        return Ok(Kernel {
            name: name.to_string(),
            wgsl,
            inputs: em.inputs.clone(),
            outputs: outs,
            workgroups: kernel::grid(tiles.div_ceil(u64::from(WORKGROUP)), target.max_workgroups)?,
            iterations,
            texture_inputs: Vec::new(),
            state_textures: Vec::new(),
            scratch_textures: Vec::new(),
            parted: Vec::new(),
        });
    }
    last
}

/// The reduce input's shape as the tiled kernel walks it.
struct Shape<'s> {
    dims: &'s [usize],
    /// Its kept and reduced dimensions.
    rd: &'s ReducedDims,
    /// The kept dimensions other than the tile's, in order.
    batch_dims: &'s [usize],
    /// Positions in `kept` of the tile's row and column dimensions, and the tile's rows and
    /// columns.
    tile: (usize, usize, usize, usize),
}

/// Emits the body of the tiled kernel into `em` (after `tid`, the invocation's tile): returns
/// the reducer's WGSL and the element loop's length in bytes.
fn emit_tile(
    em: &mut ExprEmitter,
    op: &Operation,
    body: &crate::ir::Region,
    types: &[Compute],
    outs: &[Binding],
    s: &Shape,
) -> Result<(String, usize)> {
    let n = types.len();
    let (ki, kj, tm, tn) = s.tile;
    let (rows, cols) = (s.rd.kept_dims[ki], s.rd.kept_dims[kj]);
    let func = emit_body_function(em, "reducer", body, types)?;
    let fold = Fold::new("reducer", body, types);
    let (row_tiles, col_tiles) = (rows.div_ceil(tm), cols.div_ceil(tn));
    em.line(&format!("let tj = tid % {col_tiles}u;"));
    em.line(&format!("let ti = (tid / {col_tiles}u) % {row_tiles}u;"));
    em.line(&format!("let bt = tid / {}u;", col_tiles * row_tiles));
    let batch = em.multi(&Index::Linear("bt".into()), s.batch_dims);
    // The kept coordinates of each tile row and column: clamped for reads, raw for the
    // stores' guards.
    let mut row_at = Vec::new();
    for a in 0..tm {
        let r = em.fresh("ir");
        em.line(&format!("let {r} = ti * {tm}u + {a}u;"));
        let c = em.fresh("ia");
        em.line(&format!("let {c} = min({r}, {}u);", rows - 1));
        row_at.push((r, c));
    }
    let mut col_at = Vec::new();
    for b in 0..tn {
        let r = em.fresh("jr");
        em.line(&format!("let {r} = tj * {tn}u + {b}u;"));
        let c = em.fresh("jb");
        em.line(&format!("let {c} = min({r}, {}u);", cols - 1));
        col_at.push((r, c));
    }
    // The kept coordinates of output (a, b), in kept order.
    let kept_index = |a: usize, b: usize| -> Vec<String> {
        let mut bi = batch.iter();
        (0..s.rd.kept.len())
            .map(|k| {
                if k == ki {
                    row_at[a].1.clone()
                } else if k == kj {
                    col_at[b].1.clone()
                } else {
                    bi.next().cloned().unwrap_or_else(|| "0u".into())
                }
            })
            .collect()
    };
    let mut accs: Vec<Vec<String>> = Vec::new();
    for _ in 0..tm * tn {
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
        accs.push(acc);
    }
    let start = em.body.len();
    // Four reduced positions a trip, read as one group, where the innermost reduced
    // dimension holds whole groups.
    let inner = s.rd.red_dims.last().copied().unwrap_or(1);
    let step: usize = if inner % 4 == 0 && !switched_off("WGPU_HLO_QUAD_READS") {
        4
    } else {
        1
    };
    let (folded, blocks) = fold.open_elements_by(
        em,
        ("0u", &format!("{}u", s.rd.red_count), s.rd.red_count),
        &accs,
        step as u64,
    );
    // The reduced coordinates of the trip's positions, the later ones the first's with the
    // innermost one plus their place.
    let first = em.multi(&Index::Linear("r".into()), &s.rd.red_dims);
    let mut positions = HashMap::new();
    let mut coords = vec![first.clone()];
    if step > 1 {
        let k0 = first.last().cloned().unwrap_or_else(|| "r".into());
        positions.insert(k0.clone(), (k0.clone(), 0));
        for p in 1..step {
            let kp = em.fresh("k");
            em.line(&format!("let {kp} = {k0} + {p}u;"));
            positions.insert(kp.clone(), (k0.clone(), p));
            let mut c = first.clone();
            if let Some(l) = c.last_mut() {
                *l = kp;
            }
            coords.push(c);
        }
        em.quads = Some(Quads {
            dims: s.dims.to_vec(),
            positions,
            streaming: false,
            any_shape: true,
            rows: false,
            folded: Default::default(),
        });
    }
    for c in &coords {
        for a in 0..tm {
            for b in 0..tn {
                let kept = kept_index(a, b);
                let mut idx = vec![String::new(); s.dims.len()];
                for (k, &d) in s.rd.kept.iter().enumerate() {
                    idx[d] = kept[k].clone();
                }
                for (k, &d) in s.rd.reduced.iter().enumerate() {
                    idx[d] = c[k].clone();
                }
                let idx = Index::Multi(idx);
                let mut vals = Vec::new();
                for i in 0..n {
                    vals.push(em.value(op.operands[i], &idx)?);
                }
                em.line(&fold.element(&folded[a * tn + b], &vals));
            }
        }
    }
    em.quads = None;
    fold.close_elements(em, &folded, blocks);
    let loop_len = em.body.len() - start;
    for acc in &accs {
        if let Some(f) = fold.finish(acc) {
            em.line(&f);
        }
    }
    // The stores: each output computed from the accumulators at its row-major offset.
    let mut strides = vec![1usize; s.rd.kept_dims.len()];
    for k in (0..s.rd.kept_dims.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * s.rd.kept_dims[k + 1];
    }
    let mut base_terms = vec!["0u".to_string()];
    let mut bi = batch.iter();
    for (k, stride) in strides.iter().enumerate() {
        if k != ki && k != kj {
            if let Some(c) = bi.next() {
                base_terms.push(format!("{c} * {stride}u"));
            }
        }
    }
    em.line(&format!("let ob = {};", base_terms.join(" + ")));
    for a in 0..tm {
        for b in 0..tn {
            em.open(&format!(
                "if ({} < {rows}u && {} < {cols}u)",
                row_at[a].0, col_at[b].0
            ));
            let o = em.fresh("o");
            em.line(&format!(
                "let {o} = ob + {} * {}u + {} * {}u;",
                row_at[a].1, strides[ki], col_at[b].1, strides[kj]
            ));
            for (i, &r) in op.results.iter().enumerate() {
                em.scalars.insert(r, accs[a * tn + b][i].clone());
            }
            for (j, out) in outs.iter().enumerate() {
                let v = em.value(out.value, &Index::Linear(o.clone()))?;
                em.line(&format!("out{j}[{o}] = {v};"));
            }
            em.close(None);
        }
    }
    for r in &op.results {
        em.scalars.remove(r);
    }
    Ok((func, loop_len))
}
