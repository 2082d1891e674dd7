//! The reduction emitter. The reduce's inputs are computed inline (input fusion) and folded
//! with the body region, compiled to a WGSL function. Two strategies:
//! - a workgroup per output element, threads striding over the reduced elements and combining
//!   in workgroup memory — for long reductions over 32/64-bit types;
//! - a thread per output element (several for packed narrow types) looping over the reduced
//!   elements — for short reductions, many outputs, and narrow output types.

use std::collections::{HashMap, HashSet};

use super::dtype::{self, Compute};
use super::expr::{Binding, ExprEmitter, Index};
use super::kernel::{self, Kernel, WORKGROUP};
use super::loop_kernel::Target;
use super::op_kernels::Plan;
use super::partials;
use crate::error::{Error, Result};
use crate::fusion::Group;
use crate::ir::{Function, Op, Operation, Region, ValueId};

/// Reductions at least this long use a workgroup per output.
const WORKGROUP_REDUCE_MIN: u64 = 128;

/// Emits `body` (a region of scalars: N accumulators then N values, returning N values) as a
/// WGSL function `name`; returns its source. For N > 1 it returns a struct `name_r`.
pub fn emit_body_function(
    em: &mut ExprEmitter,
    name: &str,
    body: &Region,
    types: &[Compute],
) -> Result<String> {
    let n = types.len();
    if body.args.len() != 2 * n || body.returned().len() != n {
        return Err(Error::invalid(format!(
            "reduction body must take {} scalars and return {n}",
            2 * n
        )));
    }
    let params: Vec<(ValueId, String)> = body
        .args
        .iter()
        .enumerate()
        .map(|(i, &a)| (a, format!("p{i}")))
        .collect();
    em.begin_function(&params);
    let mut rets = Vec::new();
    for &r in body.returned() {
        rets.push(em.value(r, &Index::scalar())?);
    }
    if n == 1 {
        em.line(&format!("return {};", rets[0]));
    } else {
        em.line(&format!("return {name}_r({});", rets.join(", ")));
    }
    let stmts = em.end_function();
    let sig: Vec<String> = (0..2 * n)
        .map(|i| format!("p{i}: {}", types[i % n].wgsl()))
        .collect();
    let mut s = String::new();
    if n > 1 {
        s.push_str(&format!("struct {name}_r {{\n"));
        for (i, t) in types.iter().enumerate() {
            s.push_str(&format!("    r{i}: {},\n", t.wgsl()));
        }
        s.push_str("}\n");
    }
    let ret = if n == 1 {
        types[0].wgsl().to_string()
    } else {
        format!("{name}_r")
    };
    s.push_str(&format!(
        "fn {name}({}) -> {ret} {{\n{stmts}}}\n\n",
        sig.join(", ")
    ));
    Ok(s)
}

/// Statements combining `acc` with `vals` through body function `f` (assigning `acc`).
pub fn combine(f: &str, n: usize, acc: &[String], vals: &[String]) -> String {
    let args = [acc, vals].concat().join(", ");
    if n == 1 {
        format!("{} = {f}({args});", acc[0])
    } else {
        let mut s = format!("{{ let c = {f}({args}); ");
        for (i, a) in acc.iter().enumerate() {
            s.push_str(&format!("{a} = c.r{i}; "));
        }
        s.push('}');
        s
    }
}

pub(crate) fn region_defs<'a>(
    r: &'a Region,
    out: &mut HashMap<ValueId, &'a Operation>,
    vals: &mut HashSet<ValueId>,
) {
    for op in &r.ops {
        for v in &op.results {
            out.insert(*v, op);
            vals.insert(*v);
        }
        for sub in &op.regions {
            region_defs(sub, out, vals);
        }
    }
}

/// Emits the reduce kernel for `group` (root `op`, a `reduce`).
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    emit_stage(name, f, defs, group, op, target, None).map(|(k, _)| k)
}

/// The reduce of `group` as a plan: one kernel when every invocation stays within
/// `target.max_invocation_iterations`, else a multi-stage reduction — partial results over
/// chunks of the reduced elements, then folds of the partials (as many as needed). A kernel
/// that cannot be split (boolean outputs, a body too costly per element) is returned as is,
/// for the compile driver to refuse.
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Plan> {
    let (kernel, func) = emit_stage(name, f, defs, group, op, target, None)?;
    let bound = target.max_invocation_iterations;
    let single = |k: Kernel| Ok(Plan::sequential(vec![k], Vec::new()));
    if kernel.iterations <= bound {
        return single(kernel);
    }
    let Op::Reduce { dimensions } = &op.op else {
        return single(kernel);
    };
    let Some(in_ty) = f.values.get(op.operands[0].index()).and_then(|t| match t {
        crate::ir::Type::Tensor(t) => Some(t.clone()),
        _ => None,
    }) else {
        return single(kernel);
    };
    let dims = in_ty.dims();
    let red: u64 = (0..dims.len())
        .filter(|d| dimensions.contains(&(*d as i64)))
        .map(|d| dims[d] as u64)
        .product();
    let outs = &kernel.outputs;
    let out_count = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    // Partials of packed narrow results in their wide types (f32 for bf16/f16): the last
    // fold rounds and packs.
    let Some((wides, types)) = partials::wides(outs) else {
        return single(kernel);
    };
    // Shrink the chunk until one invocation's loops fit the bound.
    let mut chunk = red.div_ceil(kernel.iterations.div_ceil(bound).max(2));
    let mut stage = None;
    while chunk >= 1 {
        let chunks = red.div_ceil(chunk);
        let temps: Vec<Binding> = wides
            .iter()
            .enumerate()
            .map(|(i, &w)| partials::binding(i, w, out_count * chunks))
            .collect();
        let split = Split {
            chunks,
            chunk,
            partials: temps,
        };
        let (k, _) = emit_stage(
            &format!("{name}_partials"),
            f,
            defs,
            group,
            op,
            target,
            Some(&split),
        )?;
        if k.iterations <= bound {
            stage = Some((k, split));
            break;
        }
        chunk /= 2;
    }
    let Some((first, split)) = stage else {
        return single(kernel);
    };
    let n = types.len();
    let combine_fn = move |acc: &[String], vals: &[String]| combine("reducer", n, acc, vals);
    partials::fold(
        name,
        first,
        split.partials,
        out_count,
        split.chunks,
        kernel.outputs.clone(),
        &types,
        &func,
        &combine_fn,
        target,
    )
}

/// A chunked stage of a multi-stage reduction: each output's reduced elements are cut into
/// `chunks` chunks of `chunk`, and partial `c` of output `o` goes to element `o * chunks + c`
/// of `partials` (one binding per result).
struct Split {
    chunks: u64,
    chunk: u64,
    partials: Vec<Binding>,
}

/// The reduce kernel, or with `split` a chunked partials stage; also returns the WGSL of the
/// reducer function.
fn emit_stage(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
    split: Option<&Split>,
) -> Result<(Kernel, String)> {
    let Op::Reduce { dimensions } = &op.op else {
        return Err(Error::internal("reduce emitter on a non-reduce"));
    };
    let n = op.results.len();
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("reduce without a body"))?;
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| group.members.contains(&v) || body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);

    let in_ty = em.ty(op.operands[0])?.clone();
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
    let dims = in_ty.dims();
    let reduced: Vec<usize> = (0..dims.len())
        .filter(|d| dimensions.contains(&(*d as i64)))
        .collect();
    let kept: Vec<usize> = (0..dims.len())
        .filter(|d| !dimensions.contains(&(*d as i64)))
        .collect();
    let red_dims: Vec<usize> = reduced.iter().map(|&d| dims[d]).collect();
    let kept_dims: Vec<usize> = kept.iter().map(|&d| dims[d]).collect();
    let red_count: u64 = red_dims.iter().product::<usize>() as u64;
    let kept_count: u64 = kept_dims.iter().product::<usize>() as u64;
    // Invocations (or workgroups) compute `out_count` accumulators, each over the reduced
    // elements from `o % chunks * chunk` to at most `chunk` further, for output `o / chunks`.
    let (chunks, chunk) = split.map_or((1, red_count), |s| (s.chunks, s.chunk));
    let out_count = kept_count * chunks;
    let red_len = chunk.min(red_count);
    let outs = match split {
        Some(s) => s.partials.clone(),
        None => outs,
    };

    let fname = "reducer";
    let func = emit_body_function(&mut em, fname, body, &types)?;
    for o in &outs {
        for h in dtype::helpers_for(o.ty.dtype) {
            em.needs.insert(h.to_string());
        }
    }
    let packed = outs.iter().any(|o| dtype::per_word(o.ty.dtype) > 1);
    // CPU adapters emulate workgroup barriers at a high cost: with enough outputs to keep the
    // cores busy, one thread per output folding sequentially is faster there (lavapipe,
    // 1000x1000 sums: 16 ms -> 4 ms, softmax 52 -> 27 ms).
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    let barriers_are_slow = target.cpu_adapter && out_count >= 64 * cores;
    // Boolean partials (split `any`/`all`) stay on the thread-per-output path.
    let use_workgroup = red_len >= WORKGROUP_REDUCE_MIN
        && !packed
        && !barriers_are_slow
        && !types.contains(&Compute::Bool);
    // The output and first reduced element of accumulator `o` (WGSL names).
    let chunk_of = |em: &mut ExprEmitter, o: &str| -> (String, String) {
        if chunks == 1 {
            return (o.to_string(), "0u".to_string());
        }
        let (ko, c0) = (em.fresh("ko"), em.fresh("c0"));
        em.line(&format!("let {ko} = {o} / {chunks}u;"));
        em.line(&format!("let {c0} = ({o} % {chunks}u) * {chunk}u;"));
        (ko, c0)
    };
    let end = |c0: &str| {
        if chunks == 1 {
            format!("{red_count}u")
        } else {
            format!("min({c0} + {chunk}u, {red_count}u)")
        }
    };

    // The input element at (output index `o` expressed per kept dim, reduced linear `r`).
    let input_index = |em: &mut ExprEmitter, o: &str, r: &str| -> Index {
        let om = em.multi(&Index::Linear(o.to_string()), &kept_dims);
        let rm = em.multi(&Index::Linear(r.to_string()), &red_dims);
        let mut idx = vec![String::new(); dims.len()];
        for (k, &d) in kept.iter().enumerate() {
            idx[d] = om[k].clone();
        }
        for (k, &d) in reduced.iter().enumerate() {
            idx[d] = rm[k].clone();
        }
        Index::Multi(idx)
    };

    let mut main = String::new();
    let mut shared = String::new();
    let workgroups;
    if use_workgroup {
        // One workgroup per output element.
        for (i, t) in types.iter().enumerate() {
            shared.push_str(&format!(
                "var<workgroup> sh{i}: array<{}, {WORKGROUP}>;\n",
                t.wgsl()
            ));
        }
        em.line("let o = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (o >= {out_count}u) {{ return; }}"));
        let mut acc = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let init = em.value(op.operands[n + i], &Index::scalar())?;
            let a = format!("acc{i}");
            em.line(&format!("var {a}: {} = {init};", t.wgsl()));
            acc.push(a);
        }
        let (ko, c0) = chunk_of(&mut em, "o");
        em.open_loop(
            &format!(
                "for (var r: u32 = {c0} + lid; r < {}; r = r + {WORKGROUP}u)",
                end(&c0)
            ),
            red_len.div_ceil(WORKGROUP as u64),
        );
        let idx = input_index(&mut em, &ko, "r");
        let mut vals = Vec::new();
        for i in 0..n {
            vals.push(em.value(op.operands[i], &idx)?);
        }
        em.line(&combine(fname, n, &acc, &vals));
        em.close(None);
        for i in 0..n {
            em.line(&format!("sh{i}[lid] = acc{i};"));
        }
        em.line("workgroupBarrier();");
        em.open_loop(
            &format!("for (var s: u32 = {}u; s > 0u; s = s >> 1u)", WORKGROUP / 2),
            u64::from(WORKGROUP.trailing_zeros()),
        );
        em.open("if (lid < s)");
        let a: Vec<String> = (0..n).map(|i| format!("acc{i}")).collect();
        let b: Vec<String> = (0..n).map(|i| format!("sh{i}[lid + s]")).collect();
        for i in 0..n {
            em.line(&format!("acc{i} = sh{i}[lid];"));
        }
        em.line(&combine(fname, n, &a, &b));
        for i in 0..n {
            em.line(&format!("sh{i}[lid] = acc{i};"));
        }
        em.close(None);
        em.line("workgroupBarrier();");
        em.close(None);
        em.open("if (lid == 0u)");
        for i in 0..n {
            em.line(&format!("out{i}[o] = sh{i}[0];"));
        }
        em.close(None);
        workgroups = kernel::grid(out_count, target.max_workgroups)?;
        main.push_str(&kernel::entry_header(WORKGROUP));
        main.push_str(&em.body);
        main.push_str("}\n");
    } else {
        // A thread per output element; packed outputs: a word of elements per thread.
        let k = outs
            .iter()
            .map(|o| dtype::per_word(o.ty.dtype))
            .max()
            .unwrap_or(1) as u64;
        let threads = out_count.div_ceil(k);
        for (j, o) in outs.iter().enumerate() {
            let p = dtype::per_word(o.ty.dtype) as u64;
            if p > 1 {
                for q in 0..k / p {
                    em.line(&format!("var w{j}_{q}: u32 = 0u;"));
                }
            }
        }
        for e in 0..k {
            let ovar = format!("o{e}");
            em.line(&format!("let {ovar} = tid * {k}u + {e}u;"));
            let guarded = out_count % k != 0;
            if guarded {
                em.open(&format!("if ({ovar} < {out_count}u)"));
            }
            let mut acc = Vec::new();
            for (i, t) in types.iter().enumerate() {
                let init = em.value(op.operands[n + i], &Index::scalar())?;
                let a = em.fresh("acc");
                em.line(&format!("var {a}: {} = {init};", t.wgsl()));
                acc.push(a);
            }
            if red_count > 0 {
                let (ko, c0) = chunk_of(&mut em, &ovar);
                em.open_loop(
                    &format!("for (var r: u32 = {c0}; r < {}; r = r + 1u)", end(&c0)),
                    red_len,
                );
                let idx = input_index(&mut em, &ko, "r");
                let mut vals = Vec::new();
                for i in 0..n {
                    vals.push(em.value(op.operands[i], &idx)?);
                }
                em.line(&combine(fname, n, &acc, &vals));
                em.close(None);
            }
            for (j, o) in outs.iter().enumerate() {
                let p = dtype::per_word(o.ty.dtype) as u64;
                if p == 1 {
                    let v = if split.is_some() {
                        partials::store(types[j], &acc[j])
                    } else {
                        acc[j].clone()
                    };
                    em.line(&format!("out{j}[{ovar}] = {v};"));
                } else {
                    let bits = 32 / p;
                    em.line(&format!(
                        "w{j}_{} = w{j}_{} | ({} << {}u);",
                        e / p,
                        e / p,
                        dtype::to_bits(o.ty.dtype, &acc[j]),
                        (e % p) * bits
                    ));
                }
            }
            if guarded {
                em.close(None);
            }
        }
        for (j, o) in outs.iter().enumerate() {
            let p = dtype::per_word(o.ty.dtype) as u64;
            if p > 1 {
                let words = out_count.div_ceil(p);
                for q in 0..k / p {
                    let w = format!("tid * {}u + {q}u", k / p);
                    em.line(&format!(
                        "if ({w} < {words}u) {{ out{j}[{w}] = w{j}_{q}; }}"
                    ));
                }
            }
        }
        workgroups = kernel::grid(threads.div_ceil(WORKGROUP as u64), target.max_workgroups)?;
        main.push_str(&kernel::entry_header(WORKGROUP));
        main.push_str(&kernel::thread_index(WORKGROUP));
        main.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
        main.push_str(&em.body);
        main.push_str("}\n");
    }
    let bindings = em.inputs.len() + outs.len();
    if bindings as u32 > target.max_storage_buffers {
        return Err(Error::unimplemented(format!(
            "{name}: reduction needs {bindings} storage buffers, adapter {} allows {}",
            target.adapter, target.max_storage_buffers
        )));
    }
    let comment = format!(
        "kernel {name}: reduce {red_len} elements into each of {out_count} ({})\nfuses: {}",
        if use_workgroup {
            "workgroup per output"
        } else {
            "thread per output"
        },
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let source = format!("{shared}\n{func}{main}");
    let iterations = em.iterations();
    let wgsl = kernel::assemble(
        name,
        &comment,
        &em.inputs,
        &outs,
        &em.needs,
        &source,
        target.caps,
    )?;
    Ok((
        Kernel {
            name: name.to_string(),
            wgsl,
            inputs: em.inputs.clone(),
            outputs: outs,
            workgroups,
            iterations,
        },
        func,
    ))
}
