//! `dynamic_update_slice` into a large buffer, in place: one thread per update element writes
//! it at the clamped start (the spec's clamping), leaving the rest of the buffer as it is. The
//! kernel's only output is the updated buffer itself (see `Step::Update`): the runtime binds
//! the operand's buffer when it may, else a copy. Only for 32/64-bit element types (narrower
//! ones share words between threads).

use std::collections::HashMap;

use super::scatter::index_i32;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// The update kernel: inputs are the update and the start indices (as in `inputs`), the one
/// output is the operand-typed buffer updated.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    emit_many(name, f, defs, &[op], &Default::default(), &[], target)
}

/// The position in the operand (of `xdims`) of element `t` (a WGSL `u32` name) of the update
/// (of `udims`) of `op`, a `dynamic_update_slice`: its coordinates after the spec's clamped
/// start.
fn operand_position(
    em: &mut ExprEmitter,
    op: &Operation,
    xdims: &[usize],
    udims: &[usize],
    t: &str,
) -> Result<Vec<String>> {
    let ui = em.multi(&Index::Linear(t.into()), udims);
    let mut xi = Vec::new();
    for (d, &s) in op.operands[2..].iter().enumerate() {
        let st = em.ty(s)?.dtype;
        let sc = em.compute(st)?;
        let v = em.value(s, &Index::scalar())?;
        let max = xdims[d] as i64 - udims[d] as i64;
        let start = format!("u32(clamp({}, 0i, {}i))", index_i32(&v, sc)?, max.max(0));
        xi.push(format!("({start} + {})", ui[d]));
    }
    Ok(xi)
}

/// Emits the statements of `op` (a `dynamic_update_slice`) writing update element `t` (a WGSL
/// `u32` name) into output binding `j`, at the spec's clamped start; returns the update's
/// element count and the operand's type.
fn write_update(
    em: &mut ExprEmitter,
    op: &Operation,
    j: usize,
    t: &str,
) -> Result<(u64, crate::ir::TensorType)> {
    let x = op.operands[0];
    let u = op.operands[1];
    let xt = em.ty(x)?.clone();
    let ut = em.ty(u)?.clone();
    let xdims = xt.dims();
    let udims = ut.dims();
    if op.operands.len() != 2 + xdims.len() {
        return Err(Error::invalid(
            "dynamic_update_slice needs one start index per dimension",
        ));
    }
    let total = ut.num_elements() as u64;
    let xi = operand_position(em, op, &xdims, &udims, t)?;
    let v = em.value(u, &Index::Linear(t.into()))?;
    let at = crate::codegen::expr::linearize(&xi, &xdims);
    em.line(&format!("out{j}[{at}] = {v};"));
    Ok((total, xt))
}

/// Whether a buffer of type `t` may be written as vec4s on `target` (CPU adapters): 32-bit
/// elements, bound whole (tensors bound in parts keep the scalar accesses the parts'
/// functions take), `WGPU_HLO_VEC4_STORES` not off.
fn vec4_words(t: &crate::ir::TensorType, target: Target) -> bool {
    target.cpu_adapter
        && !crate::fusion::switched_off("WGPU_HLO_VEC4_STORES")
        && t.num_elements() as u64 * 4 <= target.max_binding_size
        && matches!(
            t.dtype,
            crate::ir::ElementType::F32 | crate::ir::ElementType::I32 | crate::ir::ElementType::U32
        )
}

/// Whether [`write_update_vec4`] writes `op` (see there).
fn writes_vec4s(f: &Function, op: &Operation, target: Target) -> bool {
    if op.op != Op::DynamicUpdateSlice {
        return false;
    }
    let (Some(xt), Some(ut)) = (
        op.operands.first().and_then(|&x| f.ty(x).as_tensor()),
        op.operands.get(1).and_then(|&u| f.ty(u).as_tensor()),
    ) else {
        return false;
    };
    let (xdims, udims) = (xt.dims(), ut.dims());
    let aligned = match (xdims.last(), udims.last()) {
        (Some(&xl), Some(&ul)) => xl == ul && ul % 4 == 0,
        _ => false,
    };
    aligned
        && op.operands.len() == 2 + xdims.len()
        && ut.num_elements() > 0
        && vec4_words(xt, target)
}

/// On CPU adapters, the statements of `op` (a `dynamic_update_slice` of 32-bit elements
/// whose update spans the operand's innermost dimension, a multiple of 4) writing update
/// elements `4 t4 ..= 4 t4 + 3` (`t4` a WGSL `u32` name) into output binding `j` as one
/// `vec4` (the binding is declared so): such a group lands at an aligned group of the
/// operand, since the start along that dimension can only be 0. llvmpipe runs every storage
/// access as a loop over its lanes: a GRU's 9 stacked residuals per scan step took ~1 ms a
/// step one element per invocation. Only for updates [`writes_vec4s`] takes. Returns the
/// update's element count and the operand's type.
fn write_update_vec4(
    em: &mut ExprEmitter,
    op: &Operation,
    j: usize,
    t4: &str,
    declared: bool,
) -> Result<(u64, crate::ir::TensorType)> {
    let (x, u) = (op.operands[0], op.operands[1]);
    let xt = em.ty(x)?.clone();
    let ut = em.ty(u)?.clone();
    let (xdims, udims) = (xt.dims(), ut.dims());
    let elem = crate::codegen::dtype::storage_elem(xt.dtype);
    let total = ut.num_elements() as u64;
    let (xi, vals) = quad_values(em, u, t4, declared, |em| {
        operand_position(em, op, &xdims, &udims, &format!("{t4}_0"))
    })?;
    let at = crate::codegen::expr::linearize(&xi, &xdims);
    em.line(&format!(
        "out{j}[({at}) / 4u] = vec4<{elem}>({});",
        vals.join(", ")
    ));
    Ok((total, xt))
}

/// The four values of `v` at elements `4 t4 ..= 4 t4 + 3` (`t4` a WGSL `u32` name; the
/// names `t4_0 ..= t4_3` declared here unless `declared`), with `position` run first (it
/// splits the group's first element into coordinates: so that its innermost coordinate is
/// registered as the group's first position, `ExprEmitter::multi`). Inputs read at the four
/// elements' own offsets are read as one vec4 (see `expr::Quads`), and, the group being in one
/// row (the innermost extent is a multiple of 4), so are those of fused producers read at the
/// innermost coordinate, as in loop kernels (`WGPU_HLO_QUAD_ROWS=0`: not).
fn quad_values<R>(
    em: &mut ExprEmitter,
    v: ValueId,
    t4: &str,
    declared: bool,
    position: impl FnOnce(&mut ExprEmitter) -> Result<R>,
) -> Result<(R, Vec<String>)> {
    if !declared {
        em.line(&format!("let {t4}_0 = {t4} * 4u;"));
    }
    let quads = em.quads.replace(crate::codegen::expr::Quads {
        folded: Default::default(),
        dims: Vec::new(),
        positions: (0..4)
            .map(|e| (format!("{t4}_{e}"), (format!("{t4}_0"), e)))
            .collect(),
        streaming: true,
        any_shape: false,
        rows: !crate::fusion::switched_off("WGPU_HLO_QUAD_ROWS"),
    });
    let values = |em: &mut ExprEmitter| -> Result<(R, Vec<String>)> {
        let at = position(em)?;
        let mut vals = Vec::with_capacity(4);
        for e in 0..4 {
            if e > 0 && !declared {
                em.line(&format!("let {t4}_{e} = {t4}_0 + {e}u;"));
            }
            vals.push(em.value(v, &Index::Linear(format!("{t4}_{e}")))?);
        }
        Ok((at, vals))
    };
    let out = values(em);
    em.quads = quads;
    out
}

/// On CPU adapters, the statements writing elements `4 t4 ..= 4 t4 + 3` of value `v` (of type
/// `t`, 32-bit elements, its innermost extent a multiple of 4) into output binding `j` as one
/// `vec4`, the value's inputs read as [`write_update_vec4`] reads an update's.
fn write_whole_vec4(
    em: &mut ExprEmitter,
    v: ValueId,
    t: &crate::ir::TensorType,
    j: usize,
    t4: &str,
    declared: bool,
) -> Result<()> {
    let elem = crate::codegen::dtype::storage_elem(t.dtype);
    let dims = t.dims();
    let ((), vals) = quad_values(em, v, t4, declared, |em| {
        em.multi(&Index::Linear(format!("{t4}_0")), &dims);
        Ok(())
    })?;
    em.line(&format!(
        "out{j}[{t4}] = vec4<{elem}>({});",
        vals.join(", ")
    ));
    Ok(())
}

/// Opens the part of a kernel of parts in workgroups (see [`emit_many`]) whose `threads`
/// invocations run in the workgroups from `groups` on (`first`: the kernel's first part), with
/// `t` its invocation's index; returns the workgroup after its last.
fn open_part(em: &mut ExprEmitter, first: bool, groups: u64, threads: u64) -> u64 {
    let w = u64::from(kernel::WORKGROUP);
    let end = groups + threads.div_ceil(w);
    let header = format!("if (grp < {end}u)");
    if first {
        em.open(&header);
    } else {
        em.close(Some(&format!("else {header}")));
    }
    em.line(&format!("let t = (grp - {groups}u) * {w}u + lid;"));
    em.open(&format!("if (t < {threads}u)"));
    end
}

/// Several in-place updates (`dynamic_update_slice`s, and scatters [`emit_scatter`] takes)
/// into buffers of their own in one kernel (`fusion::updates`): update `j` runs in the
/// workgroups after those of the updates before it (so the branch choosing it is uniform in
/// a workgroup), each invocation writing one element as the update's own kernel does, into
/// output binding `j`. Inputs shared by several
/// updates (a scan's step index) are bound once; values in `inline` (the loop kernels that
/// produced update values, `fusion::updates`) are computed where they are read, and
/// `outputs` (values among them that others read too) are written whole, each to an output
/// binding of its own after the updates'.
pub fn emit_many(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    ops: &[&Operation],
    inline: &std::collections::HashSet<ValueId>,
    outputs: &[ValueId],
    target: Target,
) -> Result<Kernel> {
    let (all_defs, body_vals) = scatter_defs(defs, ops);
    let fused = |v: ValueId| body_vals.contains(&v) || inline.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    // The statements of update `j` writing element `t`: its elements, operand type and
    // update computation's function (scatters).
    let write = |em: &mut ExprEmitter, op: &Operation, j: usize, t: &str| match &op.op {
        Op::Scatter { .. } if op.results.len() == 1 => {
            write_scatter(em, op, j, t, &format!("k_update{j}"))
        }
        Op::DynamicUpdateSlice if op.results.len() == 1 => {
            write_update(em, op, j, t).map(|(n, xt)| (n, xt, String::new()))
        }
        _ => Err(Error::internal(format!(
            "{name}: an in-place update kernel of a {}",
            op.name()
        ))),
    };
    // Updates written four elements per invocation as vec4s (CPU adapters).
    let fours: Vec<bool> = ops.iter().map(|op| writes_vec4s(f, op, target)).collect();
    // The outputs written whole: (value, type, written as vec4s).
    let mut whole = Vec::with_capacity(outputs.len());
    for &v in outputs {
        let t = em.ty(v)?.clone();
        let fours = t.dims().last().is_some_and(|&l| l % 4 == 0)
            && t.num_elements() > 0
            && vec4_words(&t, target);
        whole.push((v, t, fours));
    }
    if let ([op], [false], []) = (ops, fours.as_slice(), outputs) {
        // One update: a thread per element.
        let (total, xt, func) = write(&mut em, op, 0, "tid")?;
        let comment = format!(
            "kernel {name}: {} of {total} elements in place into {xt}\nfuses: {}",
            op.name().trim_start_matches("stablehlo."),
            op.name()
        );
        let outs = vec![Binding {
            value: op.results[0],
            ty: xt,
        }];
        return kernel::threaded(
            name,
            &comment,
            em.inputs.clone(),
            outs,
            &em.needs,
            &func,
            &em.body,
            total,
            em.iterations(),
            target,
        );
    }
    let w = u64::from(kernel::WORKGROUP);
    let mut outs = Vec::with_capacity(ops.len());
    let mut functions = String::new();
    let (mut groups, mut elements) = (0u64, 0u64);
    let mut vec4_outs = Vec::new();
    // Updates of one size all written as vec4s (a scan stacking its step's values): each
    // invocation writes its group of four in every update, in straight-line code. Parts in
    // branches on the workgroup cost llvmpipe the parts a workgroup skips too (it runs every
    // branch under a lane mask): a GRU step's 9 stacked residuals of 4096 elements took
    // 0.22 ms as 9 parts, 0.12 as one part's work alone.
    // The update's elements: a dynamic_update_slice's operand 1, a scatter's operand 2.
    let update_elements = |op: &Operation| {
        let scatter = matches!(op.op, Op::Scatter { .. });
        op.operands
            .get(if scatter { 2 } else { 1 })
            .and_then(|&u| f.ty(u).as_tensor())
            .map_or(0, |t| t.num_elements() as u64)
    };
    let same = ops
        .first()
        .map(|op| update_elements(op))
        .filter(|&n| n > 0 && ops.iter().all(|op| update_elements(op) == n));
    let straight = same.is_some()
        && ops.len() + whole.len() > 1
        && fours.iter().all(|&v| v)
        && whole
            .iter()
            .all(|(_, t, four)| *four && Some(t.num_elements() as u64) == same);
    if let (Some(n), true) = (same, straight) {
        let threads = n / 4;
        groups = threads.div_ceil(w);
        em.line(&format!("let t = grp * {w}u + lid;"));
        em.open(&format!("if (t < {threads}u)"));
        // One scope for all: the group's positions named once, and what several updates
        // compute inline (a recurrent cell's gates, read by several stacked residuals and the
        // carry) computed once.
        em.line("let t_0 = t * 4u;");
        for e in 1..4 {
            em.line(&format!("let t_{e} = t_0 + {e}u;"));
        }
        for (j, op) in ops.iter().enumerate() {
            vec4_outs.push(j);
            let (total, xt) = write_update_vec4(&mut em, op, j, "t", true)?;
            outs.push(Binding {
                value: op.results[0],
                ty: xt,
            });
            elements += total;
        }
        for (e, (v, t, _)) in whole.iter().enumerate() {
            let j = ops.len() + e;
            vec4_outs.push(j);
            write_whole_vec4(&mut em, *v, t, j, "t", true)?;
            outs.push(Binding {
                value: *v,
                ty: t.clone(),
            });
            elements += t.num_elements() as u64;
        }
        em.close(None);
    }
    for (j, op) in ops.iter().enumerate() {
        if straight {
            break;
        }
        let n = update_elements(op);
        // Invocations: one per element, or per group of four.
        let threads = if fours[j] { n / 4 } else { n };
        let end = open_part(&mut em, j == 0, groups, threads);
        let (total, xt, func) = if fours[j] {
            vec4_outs.push(j);
            let (total, xt) = write_update_vec4(&mut em, op, j, "t", false)?;
            (total, xt, String::new())
        } else {
            write(&mut em, op, j, "t")?
        };
        functions.push_str(&func);
        em.close(None);
        outs.push(Binding {
            value: op.results[0],
            ty: xt,
        });
        groups = end;
        elements += total;
    }
    for (e, (v, t, four)) in whole.iter().enumerate() {
        if straight {
            break;
        }
        // An output written whole: a part of its own, an invocation per element or group of four.
        let j = ops.len() + e;
        let n = t.num_elements() as u64;
        let threads = if *four { n / 4 } else { n };
        let end = open_part(&mut em, j == 0, groups, threads);
        if *four {
            vec4_outs.push(j);
            write_whole_vec4(&mut em, *v, t, j, "t", false)?;
        } else {
            let x = em.value(*v, &Index::Linear("t".into()))?;
            em.line(&format!("out{j}[t] = {x};"));
        }
        em.close(None);
        outs.push(Binding {
            value: *v,
            ty: t.clone(),
        });
        groups = end;
        elements += n;
    }
    if groups > 0 && !straight {
        em.close(None);
    }
    let bindings = em.inputs.len() + outs.len();
    if bindings as u32 > target.max_storage_buffers {
        return Err(Error::unimplemented(format!(
            "{name}: {bindings} storage buffers, adapter {} allows {}",
            target.adapter, target.max_storage_buffers
        )));
    }
    let mut body = functions;
    body.push_str(&kernel::entry_header(kernel::WORKGROUP));
    body.push_str(&format!(
        "    let grp = wid.y * nwg.x + wid.x;\n    if (grp >= {groups}u) {{ return; }}\n"
    ));
    body.push_str(&em.body);
    body.push_str("}\n");
    let comment = format!(
        "kernel {name}: {} updates in place (dynamic_update_slice, scatter), {elements} elements in all\nfuses: {}",
        ops.len(),
        ops.iter()
            .map(|o| o.name())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    );
    kernel::in_workgroups_vec4(
        name,
        &comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        &body,
        &vec4_outs,
        (groups, em.iterations()),
        target,
    )
}

/// The in-place scatter kernel: one thread per update element folds it into its target
/// element of the buffer (the kernel's one output) with the update computation; a window
/// that does not fit is skipped whole, as the plain scatter does.
pub fn emit_scatter(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    emit_many(name, f, defs, &[op], &Default::default(), &[], target)
}

/// `defs` with the values of the update computations of `ops` (scatters; others add
/// nothing), and those values (computed inline).
fn scatter_defs<'a>(
    defs: &HashMap<ValueId, &'a Operation>,
    ops: &[&'a Operation],
) -> (
    HashMap<ValueId, &'a Operation>,
    std::collections::HashSet<ValueId>,
) {
    let mut all_defs = defs.clone();
    let mut body_vals = std::collections::HashSet::new();
    for op in ops {
        if let (Op::Scatter { .. }, Some(body)) = (&op.op, op.regions.first()) {
            crate::codegen::reduce_kernel::region_defs(body, &mut all_defs, &mut body_vals);
        }
    }
    (all_defs, body_vals)
}

/// Emits the statements of `op` (a `scatter` updating its one input in place) folding update
/// element `t` (a WGSL `u32` name) into output binding `j` with its update computation, which
/// becomes the module-scope function `fname`; returns the update elements, the operand's
/// type and that function's text.
fn write_scatter(
    em: &mut ExprEmitter,
    op: &Operation,
    j: usize,
    t: &str,
    fname: &str,
) -> Result<(u64, crate::ir::TensorType, String)> {
    use crate::codegen::reduce_kernel::{combine, emit_body_function};
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return Err(Error::internal("scatter emitter on another op"));
    };
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("scatter without an update computation"))?;
    let (Some(&x), Some(&indices), Some(&updates)) =
        (op.operands.first(), op.operands.get(1), op.operands.get(2))
    else {
        return Err(Error::invalid(
            "in-place scatter needs an input, indices and updates",
        ));
    };
    let xt = em.ty(x)?.clone();
    let it = em.ty(indices)?.clone();
    let ut = em.ty(updates)?.clone();
    let c = em.compute(xt.dtype)?;
    let ic = em.compute(it.dtype)?;
    let func = emit_body_function(em, fname, body, &[c])?;
    let rdims = xt.dims();
    let udims = ut.dims();
    let window_dims: Vec<usize> = dn.update_window_dims.iter().map(|&d| d as usize).collect();
    let scatter_dims: Vec<usize> = (0..udims.len())
        .filter(|d| !window_dims.contains(d))
        .collect();
    let total = ut.num_elements() as u64;
    let ui = em.multi(&Index::Linear(t.into()), &udims);
    let si: Vec<String> = scatter_dims.iter().map(|&d| ui[d].clone()).collect();
    let start = super::scatter::window_starts(em, dn, indices, &si, rdims.len(), ic, "st")?;
    let window_sizes: Vec<usize> = window_dims.iter().map(|&w| udims[w]).collect();
    let wi: Vec<String> = window_dims.iter().map(|&w| ui[w].clone()).collect();
    let (conds, pos) = super::scatter::window_place(dn, &start, &rdims, &window_sizes, &wi);
    let u = em.value(updates, &Index::Linear(t.into()))?;
    let at = crate::codegen::expr::linearize(&pos, &rdims);
    em.open(&format!("if ({})", super::scatter::all_of(&conds)));
    em.line(&format!("let p = {at};"));
    em.line(&format!("var acc: {} = out{j}[p];", c.wgsl()));
    em.line(&combine(fname, 1, &["acc".to_string()], &[u]));
    em.line(&format!("out{j}[p] = acc;"));
    em.close(None);
    Ok((total, xt, func))
}
