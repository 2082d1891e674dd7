//! `reduce_window`: one thread per result element folding its window, in row-major window
//! order, with the body region. Positions that fall into padding or between base-dilated
//! elements contribute the init value (the spec pads with it). Variadic inputs fold together.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use crate::codegen::dtype::Compute;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// Emits the kernel for a `reduce_window`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::ReduceWindow {
        window_dimensions,
        window_strides,
        base_dilations,
        window_dilations,
        padding,
    } = &op.op
    else {
        return Err(Error::internal("reduce_window emitter on another op"));
    };
    let n = op.results.len();
    if op.operands.len() != 2 * n {
        return Err(Error::invalid(
            "reduce_window needs as many inits as inputs",
        ));
    }
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("reduce_window without a body"))?;
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
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
    let func = emit_body_function(&mut em, "k_body", body, &types)?;
    let it = em.ty(op.operands[0])?.clone();
    let xdims = it.dims();
    let rdims = outs.first().map(|o| o.ty.dims()).unwrap_or_default();
    let rank = xdims.len();
    let get = |v: &[i64], d: usize, default: i64| v.get(d).copied().unwrap_or(default);
    let wdims: Vec<usize> = (0..rank)
        .map(|d| get(window_dimensions, d, 1).max(0) as usize)
        .collect();
    let wcount: usize = wdims.iter().product();
    let inputs: Vec<ValueId> = op.operands[..n].to_vec();
    let inits: Vec<ValueId> = op.operands[n..].to_vec();
    let comment = format!(
        "kernel {name}: reduce_window, {wcount} window elements per result\nfuses: stablehlo.reduce_window"
    );
    build(name, em, outs, &func, &comment, target, |em, lin, e| {
        let ri = em.multi(&Index::Linear(lin.to_string()), &rdims);
        let mut acc = Vec::new();
        let mut init_vals = Vec::new();
        for (i, (&init, t)) in inits.iter().zip(&types).enumerate() {
            let v = em.value(init, &Index::scalar())?;
            let a = format!("acc{e}_{i}");
            em.line(&format!("var {a}: {} = {v};", t.wgsl()));
            let iv = format!("init{e}_{i}");
            em.line(&format!("let {iv}: {} = {v};", t.wgsl()));
            acc.push(a);
            init_vals.push(iv);
        }
        em.open_loop(
            &format!("for (var w: u32 = 0u; w < {wcount}u; w = w + 1u)"),
            wcount as u64,
        );
        let wi = em.multi(&Index::Linear("w".into()), &wdims);
        let mut conds = Vec::new();
        let mut xi = Vec::new();
        for d in 0..rank {
            let stride = get(window_strides, d, 1);
            let wd = get(window_dilations, d, 1);
            let bd = get(base_dilations, d, 1).max(1);
            let low = padding.get(d).map_or(0, |p| p.0);
            // Position in the padded, dilated input, then in the input.
            let p = format!(
                "(i32({}) * {stride}i + i32({}) * {wd}i - {low}i)",
                ri[d], wi[d]
            );
            let pn = format!("p{e}_{d}");
            em.line(&format!("let {pn}: i32 = {p};"));
            conds.push(format!("{pn} >= 0i"));
            if bd > 1 {
                conds.push(format!("{pn} % {bd}i == 0i"));
            }
            conds.push(format!("{pn} / {bd}i < {}i", xdims[d]));
            xi.push(format!("u32({pn} / {bd}i)"));
        }
        let inside = format!("inside{e}");
        em.line(&format!(
            "let {inside}: bool = {};",
            if conds.is_empty() {
                "true".to_string()
            } else {
                conds.join(" && ")
            }
        ));
        let mut vals = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let v = format!("x{e}_{i}");
            em.line(&format!("var {v}: {} = {};", t.wgsl(), init_vals[i]));
            vals.push(v);
        }
        em.open(&format!("if ({inside})"));
        for (i, &x) in inputs.iter().enumerate() {
            let v = em.value(x, &Index::Multi(xi.clone()))?;
            em.line(&format!("{} = {v};", vals[i]));
        }
        em.close(None);
        em.line(&combine("k_body", n, &acc, &vals));
        em.close(None);
        Ok(acc)
    })
}
