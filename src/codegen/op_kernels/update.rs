//! `dynamic_update_slice` into a large buffer, in place: one thread per update element writes
//! it at the clamped start (the spec's clamping), leaving the rest of the buffer as it is. The
//! kernel's only output is the updated buffer itself (see `Step::Update`): the runtime binds
//! the operand's buffer when it may, else a copy. Only for 32/64-bit element types (narrower
//! ones share words between threads).

use std::collections::HashMap;

use super::scatter::index_i32;
use crate::codegen::dtype;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::{self, Kernel, WORKGROUP};
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// Whether `op` is a `dynamic_update_slice` worth running in place: 32/64-bit elements and an
/// update at most a quarter of the operand.
pub fn in_place(f: &Function, op: &Operation) -> bool {
    if op.op != Op::DynamicUpdateSlice || op.operands.len() < 2 {
        return false;
    }
    let (Some(xt), Some(ut)) = (
        f.ty(op.operands[0]).as_tensor(),
        f.ty(op.operands[1]).as_tensor(),
    ) else {
        return false;
    };
    xt.is_static()
        && ut.is_static()
        && dtype::per_word(xt.dtype) == 1
        && xt.dtype != crate::ir::ElementType::Pred
        && ut.num_elements() * 4 <= xt.num_elements()
}

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
    let mut main = kernel::entry_header(WORKGROUP);
    main.push_str(&kernel::thread_index(WORKGROUP));
    main.push_str(&format!("    if (tid >= {total}u) {{ return; }}\n"));
    main.push_str(&em.body);
    main.push_str("}\n");
    let wgsl = kernel::assemble(
        name,
        &comment,
        &em.inputs,
        &outs,
        &em.needs,
        &main,
        target.caps,
    )?;
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs: em.inputs.clone(),
        outputs: outs,
        workgroups: kernel::grid(total.div_ceil(WORKGROUP as u64), target.max_workgroups)?,
    })
}
