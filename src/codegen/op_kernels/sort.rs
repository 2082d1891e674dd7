//! `sort` and `chlo.top_k` by ranking: the rank of element `p` in its row is the number of
//! elements that must come before it — `q` with `cmp(q, p)`, or equivalent to it and earlier
//! (which makes every sort stable, as `is_stable` may demand and always allows).
//!
//! * 32/64-bit results: one thread per input element computes its rank (O(n) comparisons)
//!   and writes its values to that position: O(n²) work per row of n.
//! * Packed narrow results (8/16-bit, `i1`): one thread per result element finds the input
//!   element of that rank: O(n²) per element, O(n³) per row — fine for the short rows such
//!   types are usually sorted along, slow for long ones.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use crate::codegen::dtype::{self, Compute};
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::{self, Kernel, WORKGROUP};
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::region_defs;
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// How two elements compare.
enum Order<'a> {
    /// The comparator region of a `sort`.
    Region(&'a crate::ir::Region),
    /// Descending (`top_k`): NaN first, then larger values; total order on the bits for floats.
    Descending,
}

/// Emits the kernel for a `sort` or `chlo.top_k`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let (dim, order, k) = match &op.op {
        Op::Sort { dimension, .. } => {
            let r = op
                .regions
                .first()
                .ok_or_else(|| Error::invalid("sort without a comparator"))?;
            (*dimension as usize, Order::Region(r), None)
        }
        Op::TopK { k, largest } => {
            if !*largest {
                return Err(Error::unimplemented("chlo.top_k with largest = false"));
            }
            let rank = f
                .ty(op.operands[0])
                .as_tensor()
                .map_or(0, |t| t.shape.len());
            (rank.saturating_sub(1), Order::Descending, Some(*k as usize))
        }
        _ => return Err(Error::internal("sort emitter on another op")),
    };
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    if let Order::Region(r) = order {
        region_defs(r, &mut all_defs, &mut body_vals);
    }
    let fused = |v: ValueId| body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let operands: Vec<ValueId> = if k.is_some() {
        vec![op.operands[0]]
    } else {
        op.operands.clone()
    };
    let xt = em.ty(operands[0])?.clone();
    let xdims = xt.dims();
    let n = *xdims
        .get(dim)
        .ok_or_else(|| Error::invalid(format!("sort dimension {dim} out of range")))?;
    let types: Vec<Compute> = operands
        .iter()
        .map(|&v| em.compute(em.ty(v)?.dtype))
        .collect::<Result<_>>()?;
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

    // The comparator as a WGSL function `less(a0, b0, a1, b1, ...)`.
    let mut functions = String::new();
    match order {
        Order::Region(r) => {
            if r.args.len() != 2 * operands.len() || r.returned().len() != 1 {
                return Err(Error::invalid(
                    "sort comparator takes two scalars per operand",
                ));
            }
            let params: Vec<(ValueId, String)> = r
                .args
                .iter()
                .enumerate()
                .map(|(i, &a)| (a, format!("p{i}")))
                .collect();
            em.begin_function(&params);
            let ret = em.value(r.returned()[0], &Index::scalar())?;
            em.line(&format!("return {ret};"));
            let stmts = em.end_function();
            let sig: Vec<String> = (0..2 * operands.len())
                .map(|i| format!("p{i}: {}", types[i / 2].wgsl()))
                .collect();
            functions.push_str(&format!(
                "fn less({}) -> bool {{\n{stmts}}}\n\n",
                sig.join(", ")
            ));
        }
        Order::Descending => {
            let t = types[0];
            let body = match t {
                Compute::F32 | Compute::F64 => {
                    let key = format!("wh_total_order_{}", t.wgsl());
                    em.needs.insert(key.clone());
                    // NaN (either sign) ranks first, as the largest value.
                    let nan = format!("wh_is_nan_{}", t.wgsl());
                    em.needs.insert(nan.clone());
                    format!(
                        "    if ({nan}(a) != {nan}(b)) {{ return {nan}(a); }}\n    return {key}(a) > {key}(b);\n"
                    )
                }
                Compute::C64 | Compute::C128 | Compute::Bool => {
                    return Err(Error::unimplemented(format!("chlo.top_k on {}", xt.dtype)))
                }
                _ => "    return a > b;\n".to_string(),
            };
            functions.push_str(&format!(
                "fn less(a: {w}, b: {w}) -> bool {{\n{body}}}\n\n",
                w = t.wgsl()
            ));
        }
    }
    let call = |a: &[String], b: &[String]| -> String {
        let args: Vec<String> = a
            .iter()
            .zip(b)
            .flat_map(|(x, y)| [x.clone(), y.clone()])
            .collect();
        format!("less({})", args.join(", "))
    };
    // Emits `rank` of the element at row position `p` (values `vp`), returning the name.
    let rank_of = |em: &mut ExprEmitter,
                   base: &[String],
                   p: &str,
                   vp: &[String],
                   tag: &str|
     -> Result<String> {
        let rank = format!("rank{tag}");
        em.line(&format!("var {rank}: u32 = 0u;"));
        em.open(&format!(
            "for (var q{tag}: u32 = 0u; q{tag} < {n}u; q{tag} = q{tag} + 1u)"
        ));
        let mut at = base.to_vec();
        at[dim] = format!("q{tag}");
        let vq: Vec<String> = operands
            .iter()
            .map(|&v| em.value(v, &Index::Multi(at.clone())))
            .collect::<Result<_>>()?;
        em.line(&format!(
            "if ({} || (q{tag} < {p} && !{})) {{ {rank} = {rank} + 1u; }}",
            call(&vq, vp),
            call(vp, &vq)
        ));
        em.close(None);
        Ok(rank)
    };

    let packed = outs.iter().any(|o| dtype::per_word(o.ty.dtype) > 1);
    let comment = format!(
        "kernel {name}: {} along dimension {dim} ({n} elements per row) by ranking\nfuses: {}",
        if k.is_some() { "top_k" } else { "sort" },
        op.name()
    );
    if packed || k.is_some() {
        // Result-centric: find the input element whose rank is this result's position.
        let rdims = outs[0].ty.dims();
        let idx_t = outs.get(1).map(|o| o.ty.dtype);
        return build(
            name,
            em,
            outs,
            &functions,
            &comment,
            target,
            |em, lin, e| {
                let ri = em.multi(&Index::Linear(lin.to_string()), &rdims);
                let want = ri[dim].clone();
                let vals: Vec<String> = types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let v = format!("found{e}_{i}");
                        em.line(&format!("var {v}: {} = {};", t.wgsl(), dtype::zero(*t)));
                        v
                    })
                    .collect();
                let pos = format!("pos{e}");
                em.line(&format!("var {pos}: u32 = 0u;"));
                em.open(&format!(
                    "for (var p{e}: u32 = 0u; p{e} < {n}u; p{e} = p{e} + 1u)"
                ));
                let mut at = ri.clone();
                at[dim] = format!("p{e}");
                let vp: Vec<String> = operands
                    .iter()
                    .map(|&v| em.value(v, &Index::Multi(at.clone())))
                    .collect::<Result<_>>()?;
                let rank = rank_of(em, &ri, &format!("p{e}"), &vp, &format!("{e}"))?;
                em.open(&format!("if ({rank} == {want})"));
                for (v, x) in vals.iter().zip(&vp) {
                    em.line(&format!("{v} = {x};"));
                }
                em.line(&format!("{pos} = p{e};"));
                em.close(None);
                em.close(None);
                if k.is_some() {
                    let index = match idx_t {
                        Some(crate::ir::ElementType::I64) => format!("i64({pos})"),
                        Some(crate::ir::ElementType::U32) => pos.clone(),
                        _ => format!("i32({pos})"),
                    };
                    return Ok(vec![vals[0].clone(), index]);
                }
                Ok(vals)
            },
        );
    }
    // Input-centric: each element computes its rank and writes itself there.
    let total = xt.num_elements() as u64;
    em.line("let l = tid;");
    let xi = em.multi(&Index::Linear("l".into()), &xdims);
    let vp: Vec<String> = operands
        .iter()
        .map(|&v| em.value(v, &Index::Linear("l".into())))
        .collect::<Result<_>>()?;
    let rank = rank_of(&mut em, &xi, &xi[dim], &vp, "")?;
    let stride: usize = xdims[dim + 1..].iter().product();
    em.line(&format!(
        "let dst = l - {} * {stride}u + {rank} * {stride}u;",
        xi[dim]
    ));
    for (j, v) in vp.iter().enumerate() {
        em.line(&format!("out{j}[dst] = {v};"));
    }
    let mut main = functions;
    main.push_str(&kernel::entry_header(WORKGROUP));
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
