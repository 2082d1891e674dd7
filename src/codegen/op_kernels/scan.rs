//! Prefix scans written as `reduce_window`. JAX lowers `cumsum`/`cumprod`/`cummax`/... to a
//! `reduce_window` whose window spans the whole dimension with `n - 1` padding on one side:
//! direct evaluation is O(n²) (65536 floats: 12 s on lavapipe). This recognizes the pattern and
//! scans in three kernels of O(n) total work, chunks of about √n elements per thread:
//!
//! 1. each (row, chunk) folds its elements into a total;
//! 2. each row turns its chunk totals into exclusive prefixes (sequentially, √n of them);
//! 3. each (row, chunk) rescans its elements from its prefix, writing the results.
//!
//! Like any parallel scan it reassociates the body (XLA's GPU scan does too), and it treats
//! the init value as the body's identity, as reductions do.
//!
//! A floating-point sum rounds at the magnitude of its running total, so a long sequential
//! chain loses accuracy with the total's size. For sums, step 3 adds each element to a sum
//! local to its chunk and writes `prefix + local`, and step 2 scans its totals in two levels
//! the same way: a `cumsum` of 4M normals was 6.8e-3 off the exact sums this way (jax cpu's
//! own scan: 5.3e-4). Narrow element types scan in 32-bit
//! temporaries and are packed by a fourth kernel.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use super::{temp, Plan};
use crate::codegen::dtype::{self, Compute};
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, ElementType, Function, Op, Operation, Region, TensorType, ValueId};

/// Windows shorter than this are evaluated directly.
pub const SCAN_FROM: usize = 64;

/// The scan plan for a `reduce_window`, or `None` when it is not a long prefix scan.
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<Plan>> {
    let Op::ReduceWindow {
        window_dimensions,
        window_strides,
        base_dilations,
        window_dilations,
        padding,
    } = &op.op
    else {
        return Ok(None);
    };
    let nres = op.results.len();
    if op.operands.len() != 2 * nres || nres == 0 {
        return Ok(None);
    }
    let Some(xt) = f.ty(op.operands[0]).as_tensor() else {
        return Ok(None);
    };
    let xdims = xt.dims();
    let ones = |v: &[i64]| v.iter().all(|&x| x == 1);
    if !ones(window_strides) || !ones(base_dilations) || !ones(window_dilations) {
        return Ok(None);
    }
    // The one dimension the window spans, and the direction.
    let mut scan = None;
    for (d, &size) in xdims.iter().enumerate() {
        let w = window_dimensions.get(d).copied().unwrap_or(1);
        let p = padding.get(d).copied().unwrap_or((0, 0));
        let n = size as i64;
        if w == 1 && p == (0, 0) {
            continue;
        }
        if scan.is_some() || w != n || n <= 1 {
            return Ok(None);
        }
        scan = match p {
            p if p == (n - 1, 0) => Some((d, false)),
            p if p == (0, n - 1) => Some((d, true)),
            _ => return Ok(None),
        };
    }
    let Some((dim, reverse)) = scan else {
        return Ok(None);
    };
    let n = xdims[dim];
    let results: Vec<TensorType> = op
        .results
        .iter()
        .map(|&r| f.ty(r).as_tensor().cloned())
        .collect::<Option<_>>()
        .unwrap_or_default();
    if n < SCAN_FROM
        || results.len() != nres
        || results
            .iter()
            .any(|t| t.dims() != xdims || t.dtype == ElementType::Pred)
    {
        return Ok(None);
    }
    // Packed narrow results (f16, bf16, 8/16-bit integers) are scanned in 32-bit temporaries of
    // their compute type and packed by a last kernel.
    let narrow = results.iter().any(|t| dtype::per_word(t.dtype) != 1);
    let chunk = (n as f64).sqrt().ceil() as usize;
    let chunks = n.div_ceil(chunk);
    let total: usize = xdims.iter().product();
    let rows = total / n;
    let inner: usize = xdims[dim + 1..].iter().product();
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("reduce_window without a body"))?;
    let inputs: Vec<ValueId> = op.operands[..nres].to_vec();
    let inits: Vec<ValueId> = op.operands[nres..].to_vec();
    let types: Vec<Compute> = {
        let no_fusion = |_: ValueId| false;
        let em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
        results
            .iter()
            .map(|t| em.compute(t.dtype))
            .collect::<Result<_>>()?
    };
    // A floating-point sum: written as prefix + local sum (see the module comment).
    let sum = nres == 1
        && float_sum(body)
        && matches!(
            types[0],
            Compute::F32 | Compute::F64 | Compute::C64 | Compute::C128
        );
    // The storage type of a temporary holding compute values of result `j`.
    let wide = |j: usize| -> ElementType {
        let t = results[j].dtype;
        if dtype::per_word(t) == 1 {
            t
        } else {
            match types[j] {
                Compute::I32 => ElementType::I32,
                Compute::U32 => ElementType::U32,
                _ => ElementType::F32,
            }
        }
    };
    let mut temps: Vec<TensorType> = (0..2 * nres)
        .map(|j| TensorType::new(vec![(rows * chunks) as i64], wide(j % nres)))
        .collect();
    if narrow {
        temps.extend((0..nres).map(|j| TensorType::new(vec![total as i64], wide(j))));
    }
    // Linear index of element `i` (in scan order) of row `row`.
    let at = move |row: &str, i: &str| {
        let pos = if reverse {
            format!("({}u - {i})", n - 1)
        } else {
            i.to_string()
        };
        format!(
            "(({row} / {inner}u) * {}u + {pos} * {inner}u + ({row} % {inner}u))",
            n * inner
        )
    };
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v);
    let new_em = || ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let what = format!(
        "{}scan along dimension {dim} of {n} ({rows} rows, {chunks} chunks of {chunk})",
        if reverse { "reverse " } else { "" }
    );
    let temp_bindings = |first: usize| -> Vec<Binding> {
        (0..nres)
            .map(|j| Binding {
                value: temp(first + j),
                ty: temps[first + j].clone(),
            })
            .collect()
    };
    // Accumulators starting from the inits.
    let start = |em: &mut ExprEmitter, e: &str| -> Result<Vec<String>> {
        let mut acc = Vec::new();
        for (j, (&init, t)) in inits.iter().zip(&types).enumerate() {
            let v = em.value(init, &Index::scalar())?;
            let a = format!("acc{e}_{j}");
            em.line(&format!("var {a}: {} = {v};", t.wgsl()));
            acc.push(a);
        }
        Ok(acc)
    };

    // 1. chunk totals
    let k1 = {
        let mut em = new_em();
        let func = emit_body_function(&mut em, "k_body", body, &types)?;
        let comment = format!(
            "kernel {name}_totals: chunk totals of a {what}\nfuses: {}",
            op.name()
        );
        build(
            &format!("{name}_totals"),
            em,
            temp_bindings(0),
            &func,
            &comment,
            target,
            |em, lin, e| {
                let acc = start(em, &format!("{e}"))?;
                em.line(&format!("let row{e} = {lin} / {chunks}u;"));
                em.line(&format!("let c0{e} = ({lin} % {chunks}u) * {chunk}u;"));
                em.open_loop(
                    &format!(
                        "for (var i{e}: u32 = c0{e}; i{e} < min(c0{e} + {chunk}u, {n}u); i{e} = i{e} + 1u)"
                    ),
                    chunk as u64,
                );
                let idx = at(&format!("row{e}"), &format!("i{e}"));
                let vals: Vec<String> = inputs
                    .iter()
                    .map(|&x| em.value(x, &Index::Linear(idx.clone())))
                    .collect::<Result<_>>()?;
                em.line(&combine("k_body", nres, &acc, &vals));
                em.close(None);
                Ok(acc)
            },
        )?
    };
    // 2. exclusive prefixes of the chunk totals, one thread per row
    let k2 = {
        let mut em = new_em();
        em.inputs.extend(temp_bindings(0));
        let func = emit_body_function(&mut em, "k_body", body, &types)?;
        let acc = start(&mut em, "")?;
        if sum {
            // Two levels: runs of about sqrt(chunks) totals summed locally, each written
            // as the sum before its run plus its local sum.
            let run = (chunks as f64).sqrt().ceil() as usize;
            let runs = chunks.div_ceil(run);
            em.open_loop(
                &format!("for (var s: u32 = 0u; s < {runs}u; s = s + 1u)"),
                runs as u64,
            );
            let local = start(&mut em, "l")?;
            em.open_loop(
                &format!(
                    "for (var c: u32 = s * {run}u; c < min(s * {run}u + {run}u, {chunks}u); c = c + 1u)"
                ),
                run as u64,
            );
            em.line(&format!("let l = tid * {chunks}u + c;"));
            em.line(&format!("out0[l] = k_body({}, {});", acc[0], local[0]));
            em.line(&combine("k_body", 1, &local, &["in0[l]".to_string()]));
            em.close(None);
            em.line(&combine("k_body", 1, &acc, &local));
            em.close(None);
        } else {
            em.open_loop(
                &format!("for (var c: u32 = 0u; c < {chunks}u; c = c + 1u)"),
                chunks as u64,
            );
            em.line(&format!("let l = tid * {chunks}u + c;"));
            let mut vals = Vec::new();
            for (j, a) in acc.iter().enumerate() {
                em.line(&format!("let t{j} = in{j}[l];"));
                em.line(&format!("out{j}[l] = {a};"));
                vals.push(format!("t{j}"));
            }
            em.line(&combine("k_body", nres, &acc, &vals));
            em.close(None);
        }
        finish(
            &format!("{name}_prefixes"),
            &format!("kernel {name}_prefixes: exclusive prefixes of the chunk totals of a {what}\nfuses: {}", op.name()),
            em,
            temp_bindings(nres),
            &func,
            rows as u64,
            target,
        )?
    };
    // 3. rescan each chunk from its prefix
    let k3 = {
        let mut em = new_em();
        em.inputs.extend(temp_bindings(nres));
        let func = emit_body_function(&mut em, "k_body", body, &types)?;
        em.line(&format!("let row = tid / {chunks}u;"));
        em.line(&format!("let c0 = (tid % {chunks}u) * {chunk}u;"));
        let mut acc = Vec::new();
        for (j, t) in types.iter().enumerate() {
            em.line(&format!("var acc_{j}: {} = in{j}[tid];", t.wgsl()));
            acc.push(format!("acc_{j}"));
        }
        // A sum adds each element to a local sum from the init, written plus the prefix.
        let local = if sum {
            start(&mut em, "l")?
        } else {
            Vec::new()
        };
        em.open_loop(
            &format!("for (var i: u32 = c0; i < min(c0 + {chunk}u, {n}u); i = i + 1u)"),
            chunk as u64,
        );
        let idx = at("row", "i");
        let vals: Vec<String> = inputs
            .iter()
            .map(|&x| em.value(x, &Index::Linear(idx.clone())))
            .collect::<Result<_>>()?;
        em.line(&format!("let o = {idx};"));
        if sum {
            em.line(&combine("k_body", 1, &local, &vals));
            em.line(&format!("out0[o] = k_body({}, {});", acc[0], local[0]));
        } else {
            em.line(&combine("k_body", nres, &acc, &vals));
            for (j, a) in acc.iter().enumerate() {
                em.line(&format!("out{j}[o] = {a};"));
            }
        }
        em.close(None);
        let outs: Vec<Binding> = if narrow {
            temp_bindings(2 * nres)
        } else {
            op.results
                .iter()
                .zip(&results)
                .map(|(&v, t)| Binding {
                    value: v,
                    ty: t.clone(),
                })
                .collect()
        };
        finish(
            &format!("{name}_rescan"),
            &format!(
                "kernel {name}_rescan: results of a {what}\nfuses: {}",
                op.name()
            ),
            em,
            outs,
            &func,
            (rows * chunks) as u64,
            target,
        )?
    };
    let mut kernels = vec![k1, k2, k3];
    if narrow {
        // 4. pack the 32-bit results into the narrow result types
        let mut em = new_em();
        em.inputs.extend(temp_bindings(2 * nres));
        let outs: Vec<Binding> = op
            .results
            .iter()
            .zip(&results)
            .map(|(&v, t)| Binding {
                value: v,
                ty: t.clone(),
            })
            .collect();
        let comment = format!(
            "kernel {name}_pack: packs the results of a {what}\nfuses: {}",
            op.name()
        );
        kernels.push(build(
            &format!("{name}_pack"),
            em,
            outs,
            "",
            &comment,
            target,
            |_, lin, _| Ok((0..nres).map(|j| format!("in{j}[{lin}]")).collect()),
        )?);
    }
    Ok(Some(Plan::sequential(kernels, temps)))
}

/// Whether `body` is a floating-point (or complex) sum of its two arguments.
fn float_sum(body: &Region) -> bool {
    let [add, ret] = body.ops.as_slice() else {
        return false;
    };
    let [a, b] = body.args.as_slice() else {
        return false;
    };
    add.op == Op::Binary(BinaryOp::Add)
        && ret.op == Op::Return
        && ret.operands.as_slice() == add.results.as_slice()
        && (add.operands.as_slice() == [*a, *b] || add.operands.as_slice() == [*b, *a])
}

/// A kernel of `threads` threads running `em`'s body.
fn finish(
    name: &str,
    comment: &str,
    em: ExprEmitter,
    outs: Vec<Binding>,
    functions: &str,
    threads: u64,
    target: Target,
) -> Result<Kernel> {
    for o in &outs {
        if dtype::per_word(o.ty.dtype) != 1 || o.ty.dtype == ElementType::Pred {
            return Err(Error::internal(format!("{name}: packed output")));
        }
    }
    kernel::threaded(
        name,
        comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        functions,
        &em.body,
        threads,
        em.iterations(),
        target,
    )
}
