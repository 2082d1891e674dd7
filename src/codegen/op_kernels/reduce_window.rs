//! `reduce_window`: one thread per result element folding its window, in row-major window
//! order, with the body region. Positions that fall into padding or between base-dilated
//! elements contribute the init value (the spec pads with it). Variadic inputs fold together.
//! Windows too long for one invocation are folded in chunks, then the chunks' partials.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use super::Plan;
use crate::codegen::dtype::{self, Compute};
use crate::codegen::expr::{Binding, ExprEmitter, Index, Quads};
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::codegen::partials;
use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// Whole windows of at most this many positions are unrolled (no loop, constant offsets).
const UNROLL_WINDOW: usize = 16;

/// Emits the kernel for a `reduce_window`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    emit_stage(name, f, defs, op, target, None).map(|(k, _)| k)
}

/// A `reduce_window` whose windows are too long for one invocation
/// (`target.max_invocation_iterations`) as a plan: partial folds over chunks of every window
/// into temporaries (in the results' wide types), then folds of the partials with the body
/// ([`partials::fold`]), rounded and packed last for narrow types. `None` when the direct
/// kernel fits, or when the results cannot be split (booleans): the direct kernel is then
/// refused by the compile driver.
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<Plan>> {
    let (kernel, func) = emit_stage(name, f, defs, op, target, None)?;
    let bound = target.max_invocation_iterations;
    if kernel.iterations <= bound {
        return Ok(None);
    }
    let Op::ReduceWindow {
        window_dimensions, ..
    } = &op.op
    else {
        return Ok(None);
    };
    let wcount: u64 = window_dimensions.iter().map(|&w| w.max(0) as u64).product();
    let outs = &kernel.outputs;
    let out_count = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    let Some((wides, types)) = partials::wides(outs) else {
        return Ok(None);
    };
    // Shrink the chunk until one invocation's loops fit the bound.
    let mut chunk = wcount.div_ceil(kernel.iterations.div_ceil(bound).max(2));
    while chunk >= 1 {
        let chunks = wcount.div_ceil(chunk);
        let split = Split {
            chunks,
            chunk,
            partials: wides
                .iter()
                .enumerate()
                .map(|(i, &w)| partials::binding(i, w, out_count * chunks))
                .collect(),
        };
        let (first, _) = emit_stage(
            &format!("{name}_partials"),
            f,
            defs,
            op,
            target,
            Some(&split),
        )?;
        if first.iterations <= bound {
            let n = types.len();
            let combine_fn = move |acc: &[String], vals: &[String]| combine("k_body", n, acc, vals);
            return partials::fold(
                name,
                first,
                split.partials,
                out_count,
                chunks,
                kernel.outputs.clone(),
                &types,
                &func,
                &combine_fn,
                op.regions
                    .first()
                    .is_some_and(|body| crate::codegen::reduce_kernel::is_f32_sum(body, &types)),
                target,
            )
            .map(Some);
        }
        chunk /= 2;
    }
    Ok(None)
}

/// A chunked stage of a split `reduce_window`: invocation `t` folds window positions
/// `(t % chunks) * chunk ..` (at most `chunk`) of result element `t / chunks` into element `t`
/// of `partials` (one binding per result).
struct Split {
    chunks: u64,
    chunk: u64,
    partials: Vec<Binding>,
}

/// The `reduce_window` kernel, or with `split` a chunked partials stage; also returns the WGSL
/// of the body function.
fn emit_stage(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
    split: Option<&Split>,
) -> Result<(Kernel, String)> {
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
    // Four results per thread (CPU adapters): windows that do not span the innermost
    // dimension (size 1, stride 1, no dilation or padding there), a multiple of 4 long, and
    // unpacked results (see `window`).
    let last = rank.wrapping_sub(1);
    let quad_group = split.is_none()
        && target.cpu_adapter
        && rank >= 1
        && wcount > 0
        && wdims.get(last) == Some(&1)
        && get(window_strides, last, 1) == 1
        && get(base_dilations, last, 1) == 1
        && get(window_dilations, last, 1) == 1
        && padding.get(last).is_none_or(|p| p.0 == 0 && p.1 == 0)
        && xdims.get(last).is_some_and(|&c| c % 4 == 0)
        && rdims.get(last) == xdims.get(last)
        && outs.iter().all(|o| dtype::per_word(o.ty.dtype) == 1)
        && !crate::fusion::switched_off("WGPU_HLO_QUAD_READS");
    // Folds window positions `w0 .. w1` (WGSL `u32` expressions, at most `trips`) of result
    // elements `lin` .. `lin + group - 1` into new accumulators (per element, per result).
    // Elements of a group differ only in the innermost coordinate, which their windows do not
    // span (`quad_group` checks): they read the same window positions at consecutive
    // innermost offsets, a group of four as one vec4 (one texel fetch from a texture).
    let window = |em: &mut ExprEmitter,
                  lin: &str,
                  e: u64,
                  group: u64,
                  (w0, w1, trips): (&str, &str, u64)|
     -> Result<Vec<Vec<String>>> {
        let ri = em.multi(&Index::Linear(lin.to_string()), &rdims);
        let mut init_vals = Vec::new();
        for (i, (&init, t)) in inits.iter().zip(&types).enumerate() {
            let v = em.value(init, &Index::scalar())?;
            let iv = format!("init{e}_{i}");
            em.line(&format!("let {iv}: {} = {v};", t.wgsl()));
            init_vals.push(iv);
        }
        // Variables `{prefix}{element}_{result}` for the group's elements, each starting at its
        // result's init value.
        let declare = |em: &mut ExprEmitter, prefix: &str| -> Vec<Vec<String>> {
            (0..group)
                .map(|g| {
                    types
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            let v = format!("{prefix}{}_{i}", e + g);
                            em.line(&format!("var {v}: {} = {};", t.wgsl(), init_vals[i]));
                            v
                        })
                        .collect()
                })
                .collect()
        };
        let accs = declare(em, "acc");
        // Short whole windows (pooling and its gradients) unrolled: each position's window
        // offsets are constants, so the index arithmetic folds away and no loop runs.
        let unrolled = w0 == "0u" && trips == wcount as u64 && wcount <= UNROLL_WINDOW;
        let positions: Vec<Option<usize>> = if unrolled {
            (0..wcount).map(Some).collect()
        } else {
            vec![None]
        };
        for w in positions {
            let wi = match w {
                Some(w) => {
                    em.open("");
                    let mut rest = w;
                    let mut wi = vec![String::new(); rank];
                    for d in (0..rank).rev() {
                        let size = wdims[d].max(1);
                        wi[d] = format!("{}u", rest % size);
                        rest /= size;
                    }
                    wi
                }
                None => {
                    em.open_loop(
                        &format!("for (var w: u32 = {w0}; w < {w1}; w = w + 1u)"),
                        trips,
                    );
                    em.multi(&Index::Linear("w".into()), &wdims)
                }
            };
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
            // The group's input positions: the innermost coordinate plus 0 .. group - 1.
            let xis: Vec<Vec<String>> = (0..group)
                .map(|g| {
                    let mut x = xi.clone();
                    if let Some(last) = x.last_mut().filter(|_| g > 0) {
                        *last = format!("({last} + {g}u)");
                    }
                    x
                })
                .collect();
            if group == 4 {
                let first = xi.last().cloned().unwrap_or_default();
                em.quads = Some(Quads {
                    folded: Default::default(),
                    dims: xdims.clone(),
                    positions: xis
                        .iter()
                        .enumerate()
                        .filter_map(|(g, x)| Some((x.last()?.clone(), (first.clone(), g))))
                        .collect(),
                    // Overlapping windows read each element several times: from textures.
                    streaming: false,
                    any_shape: false,
                    rows: false,
                });
            }
            let vals = declare(em, "x");
            em.open(&format!("if ({inside})"));
            for (g, x_g) in xis.iter().enumerate() {
                for (i, &x) in inputs.iter().enumerate() {
                    let v = em.value(x, &Index::Multi(x_g.clone()))?;
                    em.line(&format!("{} = {v};", vals[g][i]));
                }
            }
            em.close(None);
            em.quads = None;
            for (acc, v) in accs.iter().zip(&vals) {
                em.line(&combine("k_body", n, acc, v));
            }
            em.close(None);
        }
        Ok(accs)
    };
    let Some(s) = split else {
        let comment = format!(
            "kernel {name}: reduce_window, {wcount} window elements per result\nfuses: stablehlo.reduce_window"
        );
        let all = format!("{wcount}u");
        if quad_group {
            // Four results per thread, read as groups of four (CPU adapters).
            let total = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
            em.line("let l0 = tid * 4u;");
            let accs = window(&mut em, "l0", 0, 4, ("0u", &all, wcount as u64))?;
            for (g, acc) in accs.iter().enumerate() {
                for (j, a) in acc.iter().enumerate() {
                    em.line(&format!("out{j}[l0 + {g}u] = {a};"));
                }
            }
            let iterations = em.iterations();
            let k = kernel::threaded(
                name,
                &format!("{comment} (4 per thread)"),
                em.inputs.clone(),
                outs,
                &em.needs,
                &func,
                &em.body,
                total / 4,
                iterations,
                target,
            )?;
            return Ok((k, func));
        }
        let k = build(name, em, outs, &func, &comment, target, |em, lin, e| {
            Ok(window(em, lin, e, 1, ("0u", &all, wcount as u64))?
                .into_iter()
                .next()
                .unwrap_or_default())
        })?;
        return Ok((k, func));
    };
    if s.partials.len() != n || s.partials.iter().any(|p| dtype::per_word(p.ty.dtype) > 1) {
        return Err(Error::internal(format!(
            "{name}: partials of packed or mismatched results"
        )));
    }
    let out_count = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    em.line(&format!("let o = tid / {}u;", s.chunks));
    em.line(&format!("let w0 = (tid % {}u) * {}u;", s.chunks, s.chunk));
    let end = format!("min(w0 + {}u, {wcount}u)", s.chunk);
    let acc = window(&mut em, "o", 0, 1, ("w0", &end, s.chunk.min(wcount as u64)))?
        .into_iter()
        .next()
        .unwrap_or_default();
    for (j, (a, &t)) in acc.iter().zip(&types).enumerate() {
        em.line(&format!("out{j}[tid] = {};", partials::store(t, a)));
    }
    let comment = format!(
        "kernel {name}: reduce_window partials, {} chunks of {} window elements for each of {out_count} results\nfuses: stablehlo.reduce_window",
        s.chunks, s.chunk
    );
    let iterations = em.iterations();
    let k = kernel::threaded(
        name,
        &comment,
        em.inputs.clone(),
        s.partials.clone(),
        &em.needs,
        &func,
        &em.body,
        out_count * s.chunks,
        iterations,
        target,
    )?;
    Ok((k, func))
}
