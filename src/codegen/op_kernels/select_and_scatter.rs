//! `select_and_scatter` (the gradient of max pooling), gathered per result element so that no
//! atomics are needed: one thread per operand element walks the windows that contain it, picks
//! each window's selected element with the `select` region (a row-major fold: the running
//! choice is kept while `select(choice, next)` holds; padding is never selected), and where
//! that is itself folds the window's source value into its result with `scatter`, starting
//! from `init_value`. Windows are visited in increasing source order, as the spec's reduce
//! over source indices does.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};

/// Emits the kernel for a `select_and_scatter`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::SelectAndScatter {
        window_dimensions,
        window_strides,
        padding,
    } = &op.op
    else {
        return Err(Error::internal("select_and_scatter emitter on another op"));
    };
    let ([operand, source, init], [select, scatter], [result]) =
        (&op.operands[..], &op.regions[..], &op.results[..])
    else {
        return Err(Error::invalid(
            "select_and_scatter takes operand, source and init_value, two regions, one result",
        ));
    };
    if select.args.len() != 2 || select.returned().len() != 1 {
        return Err(Error::invalid(
            "select_and_scatter's select region takes two scalars and returns one i1",
        ));
    }
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(select, &mut all_defs, &mut body_vals);
    region_defs(scatter, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let out = Binding {
        value: *result,
        ty: em.ty(*result)?.clone(),
    };
    let t = em.compute(out.ty.dtype)?;
    let xt = em.ty(*operand)?.clone();
    let st = em.ty(*source)?.clone();
    let xdims = xt.dims();
    let sdims = st.dims();
    let rank = xdims.len();

    // `k_select(a, b) -> bool` and `k_scatter(a, b) -> T` as WGSL functions (prefixed: WGSL
    // has a built-in `select` that the kernel calls too).
    let params: Vec<(ValueId, String)> = select
        .args
        .iter()
        .enumerate()
        .map(|(i, &a)| (a, format!("p{i}")))
        .collect();
    em.begin_function(&params);
    let ret = em.value(select.returned()[0], &Index::scalar())?;
    em.line(&format!("return {ret};"));
    let stmts = em.end_function();
    let mut functions = format!(
        "fn k_select(p0: {w}, p1: {w}) -> bool {{\n{stmts}}}\n\n",
        w = t.wgsl()
    );
    functions.push_str(&emit_body_function(&mut em, "k_scatter", scatter, &[t])?);

    let get = |v: &[i64], d: usize, default: i64| v.get(d).copied().unwrap_or(default);
    let wdims: Vec<usize> = (0..rank)
        .map(|d| get(window_dimensions, d, 1).max(0) as usize)
        .collect();
    let wcount: usize = wdims.iter().product();
    let comment = format!(
        "kernel {name}: select_and_scatter, {wcount} window elements\nfuses: stablehlo.select_and_scatter"
    );
    build(
        name,
        em,
        vec![out],
        &functions,
        &comment,
        target,
        |em, lin, e| {
            let ri = em.multi(&Index::Linear(lin.to_string()), &xdims);
            let iv = em.value(*init, &Index::scalar())?;
            let acc = format!("acc{e}");
            em.line(&format!("var {acc}: {} = {iv};", t.wgsl()));
            if wcount == 0 || sdims.iter().product::<usize>() == 0 {
                return Ok(vec![acc]);
            }
            // Windows containing this element, last window position first (= increasing source
            // index).
            em.open_loop(
                &format!("for (var v: u32 = 0u; v < {wcount}u; v = v + 1u)"),
                wcount as u64,
            );
            em.line(&format!("let w = {}u - v;", wcount - 1));
            let wi = em.multi(&Index::Linear("w".into()), &wdims);
            let mut conds = Vec::new();
            let mut si = Vec::new();
            for d in 0..rank {
                let stride = get(window_strides, d, 1).max(1);
                let low = padding.get(d).map_or(0, |p| p.0);
                let q = format!("q{e}_{d}");
                em.line(&format!(
                    "let {q}: i32 = i32({}) + {low}i - i32({});",
                    ri[d], wi[d]
                ));
                conds.push(format!("{q} >= 0i"));
                if stride > 1 {
                    conds.push(format!("{q} % {stride}i == 0i"));
                }
                conds.push(format!("{q} / {stride}i < {}i", sdims[d]));
                si.push(format!("u32({q} / {stride}i)"));
            }
            em.open(&format!("if ({})", conds.join(" && ")));
            // Fold window `si` with `select`; `pick` is the linear window position chosen.
            em.line(&format!("var best: {};", t.wgsl()));
            em.line("var pick: u32 = 0xffffffffu;");
            em.open_loop(
                &format!("for (var u: u32 = 0u; u < {wcount}u; u = u + 1u)"),
                wcount as u64,
            );
            let ui = em.multi(&Index::Linear("u".into()), &wdims);
            let mut inside = Vec::new();
            let mut xi = Vec::new();
            for d in 0..rank {
                let stride = get(window_strides, d, 1).max(1);
                let low = padding.get(d).map_or(0, |p| p.0);
                let p = format!("x{e}_{d}");
                em.line(&format!(
                    "let {p}: i32 = i32({}) * {stride}i + i32({}) - {low}i;",
                    si[d], ui[d]
                ));
                inside.push(format!("{p} >= 0i && {p} < {}i", xdims[d]));
                xi.push(format!("u32({p})"));
            }
            em.open(&format!("if ({})", inside.join(" && ")));
            let x = em.value(*operand, &Index::Multi(xi))?;
            em.open(&format!("if (pick == 0xffffffffu || !k_select(best, {x}))"));
            em.line(&format!("best = {x};"));
            em.line("pick = u;");
            em.close(None);
            em.close(None);
            em.close(None);
            em.open("if (pick == w)");
            let s = em.value(*source, &Index::Multi(si.clone()))?;
            em.line(&format!("let sv{e}: {} = {s};", t.wgsl()));
            em.line(&combine(
                "k_scatter",
                1,
                std::slice::from_ref(&acc),
                &[format!("sv{e}")],
            ));
            em.close(None);
            em.close(None);
            em.close(None);
            Ok(vec![acc])
        },
    )
}
