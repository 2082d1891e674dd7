//! `scatter`: one thread per result element (several for packed narrow types). Each thread
//! starts from the input element and walks every scatter index in order; when the element
//! lies in that index's update window, it folds the update in with the update computation.
//! Updates to one element are therefore applied in update order, deterministically, with no
//! atomics, for any update computation and any number of inputs. A window that does not fit
//! in the input is skipped whole (XLA's semantics). Cost: result size × number of scatter
//! indices — fine for the usual few indices per element, slow for huge scatters.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use crate::codegen::dtype::Compute;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// An `i32` expression for index value `v` of compute type `c`, saturated.
pub(crate) fn index_i32(v: &str, c: Compute) -> Result<String> {
    Ok(match c {
        Compute::I32 => v.to_string(),
        Compute::U32 => format!("i32(min({v}, 2147483647u))"),
        Compute::I64 => format!("i32(clamp({v}, -2147483648li, 2147483647li))"),
        Compute::U64 => format!("i32(min({v}, 2147483647lu))"),
        other => {
            return Err(Error::invalid(format!(
                "scatter indices of type {}",
                other.wgsl()
            )))
        }
    })
}

/// Emits the kernel for a `scatter`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return Err(Error::internal("scatter emitter on another op"));
    };
    let n = op.results.len();
    if op.operands.len() != 2 * n + 1 {
        return Err(Error::invalid(format!(
            "scatter with {} operands and {n} results",
            op.operands.len()
        )));
    }
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("scatter without an update computation"))?;
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);

    let inputs = &op.operands[..n];
    let indices = op.operands[n];
    let updates = &op.operands[n + 1..];
    let rt = em.ty(op.results[0])?.clone();
    let it = em.ty(indices)?.clone();
    let ut = em.ty(updates[0])?.clone();
    let outs: Vec<Binding> = op
        .results
        .iter()
        .map(|&v| {
            Ok(Binding {
                value: v,
                ty: em.ty(v)?.clone(),
            })
        })
        .collect::<Result<_>>()?;
    let types: Vec<Compute> = outs
        .iter()
        .map(|o| em.compute(o.ty.dtype))
        .collect::<Result<_>>()?;
    let ic = em.compute(it.dtype)?;
    let func = emit_body_function(&mut em, "update", body, &types)?;

    let rdims = rt.dims();
    let udims = ut.dims();
    let as_usize = |v: &[i64]| -> Vec<usize> { v.iter().map(|&d| d as usize).collect() };
    let window_dims = as_usize(&dn.update_window_dims);
    let inserted = as_usize(&dn.inserted_window_dims);
    let input_batching = as_usize(&dn.input_batching_dims);
    let scatter_dims: Vec<usize> = (0..udims.len())
        .filter(|d| !window_dims.contains(d))
        .collect();
    let scatter_sizes: Vec<usize> = scatter_dims.iter().map(|&d| udims[d]).collect();
    let count: usize = scatter_sizes.iter().product();
    let ivd = dn.index_vector_dim as usize;
    let irank = it.shape.len();
    // Input dimension -> update window dimension (for the dims a window spans).
    let spanned: Vec<usize> = (0..rdims.len())
        .filter(|d| !inserted.contains(d) && !input_batching.contains(d))
        .collect();
    let mut window_of: Vec<Option<usize>> = vec![None; rdims.len()];
    for (k, &d) in spanned.iter().enumerate() {
        window_of[d] = window_dims.get(k).copied();
    }

    let total = rt.num_elements();
    let comment = format!(
        "kernel {name}: scatter of {count} update windows into {total} elements (updates in order)\nfuses: stablehlo.scatter"
    );
    build(name, em, outs, &func, &comment, target, |em, lin, e| {
        let oi = em.multi(&Index::Linear(lin.to_string()), &rdims);
        let mut acc = Vec::new();
        for (i, (&x, t)) in inputs.iter().zip(&types).enumerate() {
            let v = em.value(x, &Index::Linear(lin.to_string()))?;
            let a = format!("acc{e}_{i}");
            em.line(&format!("var {a}: {} = {v};", t.wgsl()));
            acc.push(a);
        }
        em.open(&format!("for (var s: u32 = 0u; s < {count}u; s = s + 1u)"));
        let si = em.multi(&Index::Linear("s".into()), &scatter_sizes);
        // Start of this index's window, per input dimension (i32).
        let mut start = vec!["0i".to_string(); rdims.len()];
        for (d_start, &d_in) in dn.scatter_dims_to_operand_dims.iter().enumerate() {
            let mut at = si.clone();
            if ivd < irank {
                at.insert(ivd.min(at.len()), format!("{d_start}u"));
            }
            let v = em.value(indices, &Index::Multi(at))?;
            let name = format!("st{e}_{d_start}");
            em.line(&format!("let {name}: i32 = {};", index_i32(&v, ic)?));
            if let Some(slot) = start.get_mut(d_in as usize) {
                *slot = name;
            }
        }
        for (i, &d_in) in input_batching.iter().enumerate() {
            let d_start = dn
                .scatter_indices_batching_dims
                .get(i)
                .copied()
                .unwrap_or(0) as usize;
            let pos = if d_start < ivd { d_start } else { d_start - 1 };
            let b = si.get(pos).cloned().unwrap_or_else(|| "0u".into());
            start[d_in] = format!("({} + i32({b}))", start[d_in]);
        }
        // The whole window must fit; then the element must lie inside it.
        let mut conds = Vec::new();
        let mut upd = vec![String::new(); udims.len()];
        for (k, &d) in scatter_dims.iter().enumerate() {
            upd[d] = si[k].clone();
        }
        for d in 0..rdims.len() {
            let size = window_of[d].map_or(1, |w| udims[w]);
            let st = &start[d];
            if dn.scatter_dims_to_operand_dims.contains(&(d as i64)) {
                conds.push(format!("{st} >= 0i && {st} + {size}i <= {}i", rdims[d]));
            }
            let w = format!("(i32({}) - {st})", oi[d]);
            conds.push(format!("{w} >= 0i && {w} < {size}i"));
            if let Some(wd) = window_of[d] {
                upd[wd] = format!("u32{w}");
            }
        }
        em.open(&format!("if ({})", conds.join(" && ")));
        let vals: Vec<String> = updates
            .iter()
            .map(|&u| em.value(u, &Index::Multi(upd.clone())))
            .collect::<Result<_>>()?;
        em.line(&combine("update", n, &acc, &vals));
        em.close(None);
        em.close(None);
        Ok(acc)
    })
}
