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
    let no_fusion = |_: ValueId| false;
    let mut em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
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
    let ui = em.multi(&Index::Linear("tid".into()), &udims);
    let mut xi = Vec::new();
    for (d, &s) in op.operands[2..].iter().enumerate() {
        let st = em.ty(s)?.dtype;
        let sc = em.compute(st)?;
        let v = em.value(s, &Index::scalar())?;
        let max = xdims[d] as i64 - udims[d] as i64;
        let start = format!("u32(clamp({}, 0i, {}i))", index_i32(&v, sc)?, max.max(0));
        xi.push(format!("({start} + {})", ui[d]));
    }
    let v = em.value(u, &Index::Linear("tid".into()))?;
    let at = crate::codegen::expr::linearize(&xi, &xdims);
    em.line(&format!("out0[{at}] = {v};"));
    let outs = vec![Binding {
        value: op.results[0],
        ty: xt.clone(),
    }];
    let comment = format!(
        "kernel {name}: dynamic_update_slice of {total} elements in place into {xt}\nfuses: stablehlo.dynamic_update_slice"
    );
    kernel::threaded(
        name,
        &comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        "",
        &em.body,
        total,
        em.iterations(),
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
    use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
    use std::collections::HashSet;
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
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let (x, indices, updates) = (op.operands[0], op.operands[1], op.operands[2]);
    let xt = em.ty(x)?.clone();
    let it = em.ty(indices)?.clone();
    let ut = em.ty(updates)?.clone();
    let t = em.compute(xt.dtype)?;
    let ic = em.compute(it.dtype)?;
    let func = emit_body_function(&mut em, "k_update", body, &[t])?;
    let rdims = xt.dims();
    let udims = ut.dims();
    let window_dims: Vec<usize> = dn.update_window_dims.iter().map(|&d| d as usize).collect();
    let inserted: Vec<usize> = dn
        .inserted_window_dims
        .iter()
        .map(|&d| d as usize)
        .collect();
    let scatter_dims: Vec<usize> = (0..udims.len())
        .filter(|d| !window_dims.contains(d))
        .collect();
    let spanned: Vec<usize> = (0..rdims.len()).filter(|d| !inserted.contains(d)).collect();
    let total = ut.num_elements() as u64;
    let ui = em.multi(&Index::Linear("tid".into()), &udims);
    let si: Vec<String> = scatter_dims.iter().map(|&d| ui[d].clone()).collect();
    let start = super::scatter::window_starts(&mut em, dn, indices, &si, rdims.len(), ic, "st")?;
    let mut conds = Vec::new();
    let mut pos = Vec::new();
    for d in 0..rdims.len() {
        let k = spanned.iter().position(|&s| s == d);
        let wd = k.and_then(|k| window_dims.get(k).copied());
        let size = wd.map_or(1, |w| udims[w]);
        let st = &start[d];
        if dn.scatter_dims_to_operand_dims.contains(&(d as i64)) {
            conds.push(format!("{st} >= 0i && {st} + {size}i <= {}i", rdims[d]));
        }
        let off = wd.map_or("0u".to_string(), |w| ui[w].clone());
        pos.push(format!("(u32({st}) + {off})"));
    }
    let u = em.value(updates, &Index::Linear("tid".into()))?;
    let at = crate::codegen::expr::linearize(&pos, &rdims);
    em.open(&format!(
        "if ({})",
        if conds.is_empty() {
            "true".to_string()
        } else {
            conds.join(" && ")
        }
    ));
    em.line(&format!("let p = {at};"));
    em.line(&format!("var acc: {} = out0[p];", t.wgsl()));
    em.line(&combine("k_update", 1, &["acc".to_string()], &[u]));
    em.line("out0[p] = acc;");
    em.close(None);
    let outs = vec![Binding {
        value: op.results[0],
        ty: xt.clone(),
    }];
    let comment = format!(
        "kernel {name}: scatter of {total} update elements in place into {xt}\nfuses: stablehlo.scatter"
    );
    kernel::threaded(
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
    )
}
