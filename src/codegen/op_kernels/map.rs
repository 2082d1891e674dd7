//! `map`: the computation region applied to each element of the (same-shaped) inputs — one
//! thread per result element calling the region as a WGSL function.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use crate::codegen::dtype::Compute;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::region_defs;
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// Emits the kernel for a `map`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::Map { dimensions } = &op.op else {
        return Err(Error::internal("map emitter on another op"));
    };
    let ([body], [result]) = (&op.regions[..], &op.results[..]) else {
        return Err(Error::invalid("map takes one region and gives one result"));
    };
    if body.args.len() != op.operands.len() || body.returned().len() != 1 {
        return Err(Error::invalid(
            "map's region takes one scalar per input and returns one",
        ));
    }
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let out = Binding {
        value: *result,
        ty: em.ty(*result)?.clone(),
    };
    let rdims = out.ty.dims();
    if dimensions.iter().enumerate().any(|(i, &d)| d != i as i64) || dimensions.len() != rdims.len()
    {
        return Err(Error::invalid(format!(
            "map dimensions {dimensions:?} must be 0..{}",
            rdims.len()
        )));
    }
    let types: Vec<Compute> = op
        .operands
        .iter()
        .map(|&v| em.compute(em.ty(v)?.dtype))
        .collect::<Result<_>>()?;
    let rc = em.compute(out.ty.dtype)?;
    let params: Vec<(ValueId, String)> = body
        .args
        .iter()
        .enumerate()
        .map(|(i, &a)| (a, format!("p{i}")))
        .collect();
    em.begin_function(&params);
    let ret = em.value(body.returned()[0], &Index::scalar())?;
    em.line(&format!("return {ret};"));
    let stmts = em.end_function();
    let sig: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, t)| format!("p{i}: {}", t.wgsl()))
        .collect();
    let functions = format!(
        "fn k_computation({}) -> {} {{\n{stmts}}}\n\n",
        sig.join(", "),
        rc.wgsl()
    );
    let comment = format!("kernel {name}: map\nfuses: stablehlo.map");
    let inputs = op.operands.clone();
    build(
        name,
        em,
        vec![out],
        &functions,
        &comment,
        target,
        |em, lin, _| {
            let mut args = Vec::new();
            for &x in &inputs {
                args.push(em.value(x, &Index::Linear(lin.to_string()))?);
            }
            Ok(vec![format!("k_computation({})", args.join(", "))])
        },
    )
}
