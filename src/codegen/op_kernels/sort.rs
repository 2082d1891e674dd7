//! `sort` and `chlo.top_k`. Rows longer than [`BITONIC_FROM`] take a radix sort where the
//! comparator is one key's (`super::sort_radix`; `top_k` selects its k instead,
//! `super::top_k`), else a bitonic network ([`bitonic`]; lavapipe: 65536 floats in 0.46 s
//! instead of 45 s): the stages of partners closer than a block of up to 4096 run in
//! workgroup memory, one launch per merge size ([`local_stages`]), the others one global pass
//! each. Shorter rows sort in one kernel by ranking: the rank of element `p` in its row is the
//! number of elements that must come before it — `q` with `cmp(q, p)`, or equivalent to it and
//! earlier (which makes every sort stable, as `is_stable` may demand and always allows).
//!
//! * 32/64-bit results: one thread per input element computes its rank (O(n) comparisons)
//!   and writes its values to that position (`top_k`: if the rank is below k): O(n²) work
//!   per row of n.
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
    /// Descending (`top_k`): larger values first, in IEEE total order for floats (as CHLO's
    /// decomposition, `compare GT, TOTALORDER`: +NaN first, -NaN last).
    Descending,
}

/// What both sort strategies need besides the emitter: the comparator `k_less(a0, b0, a1, b1,
/// ...)` in `functions`, the sorted operands, their type, the dimension, its length, and `k`
/// for `top_k`.
struct Prepared {
    operands: Vec<ValueId>,
    types: Vec<Compute>,
    outs: Vec<Binding>,
    functions: String,
    xt: crate::ir::TensorType,
    dim: usize,
    n: usize,
    k: Option<usize>,
}

/// Sets up the emitter (with `extra` bindings first) and calls `body` with it.
fn with_prepared<R>(
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
    extra: &[Binding],
    body: impl FnOnce(ExprEmitter<'_>, Prepared) -> Result<R>,
) -> Result<R> {
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
    em.inputs.extend(extra.iter().cloned());
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
    let outs = result_bindings(&em, op)?;

    // The comparator as a WGSL function `k_less(a0, b0, a1, b1, ...)`.
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
                "fn k_less({}) -> bool {{\n{stmts}}}\n\n",
                sig.join(", ")
            ));
        }
        Order::Descending => {
            let t = types[0];
            let body = match t {
                Compute::F32 | Compute::F64 => {
                    // IEEE total order, as `compare GT, TOTALORDER`: +NaN first, -NaN last.
                    let key = format!("wh_total_order_{}", t.wgsl());
                    em.needs.insert(key.clone());
                    format!("    return {key}(a) > {key}(b);\n")
                }
                Compute::C64 | Compute::C128 | Compute::Bool => {
                    return Err(Error::unimplemented(format!("chlo.top_k on {}", xt.dtype)))
                }
                _ => "    return a > b;\n".to_string(),
            };
            functions.push_str(&format!(
                "fn k_less(a: {w}, b: {w}) -> bool {{\n{body}}}\n\n",
                w = t.wgsl()
            ));
        }
    }
    body(
        em,
        Prepared {
            operands,
            types,
            outs,
            functions,
            xt,
            dim,
            n,
            k,
        },
    )
}

/// The linear index of element `idx` of row `row` (WGSL expressions) of an operand sorted
/// along a dimension of `n` with `inner` elements after it.
pub(super) fn row_element(row: &str, idx: &str, n: usize, inner: usize) -> String {
    format!(
        "(({row} / {inner}u) * {}u + ({idx}) * {inner}u + ({row} % {inner}u))",
        n * inner
    )
}

/// The bindings of `op`'s results.
fn result_bindings(em: &ExprEmitter<'_>, op: &Operation) -> Result<Vec<Binding>> {
    op.results
        .iter()
        .map(|&v| {
            Ok(Binding {
                value: v,
                ty: em.ty(v)?.clone(),
            })
        })
        .collect()
}

/// Emits the kernel for a `sort` or `chlo.top_k`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    with_prepared(f, defs, op, target, &[], |em, p| {
        ranking(name, op, target, em, p)
    })
}

/// The ranking sort (module doc).
fn ranking(
    name: &str,
    op: &Operation,
    target: Target,
    mut em: ExprEmitter<'_>,
    p: Prepared,
) -> Result<Kernel> {
    let Prepared {
        operands,
        types,
        outs,
        functions,
        xt,
        dim,
        n,
        k,
    } = p;
    let xdims = xt.dims();
    // Emits `rank` of the element at row position `p` (values `vp`), returning the name.
    let rank_of = |em: &mut ExprEmitter,
                   base: &[String],
                   p: &str,
                   vp: &[String],
                   tag: &str|
     -> Result<String> {
        let rank = format!("rank{tag}");
        em.line(&format!("var {rank}: u32 = 0u;"));
        em.open_loop(
            &format!("for (var q{tag}: u32 = 0u; q{tag} < {n}u; q{tag} = q{tag} + 1u)"),
            n as u64,
        );
        let mut at = base.to_vec();
        at[dim] = format!("q{tag}");
        let vq: Vec<String> = operands
            .iter()
            .map(|&v| em.value(v, &Index::Multi(at.clone())))
            .collect::<Result<_>>()?;
        em.line(&format!(
            "if ({} || (q{tag} < {p} && !{})) {{ {rank} = {rank} + 1u; }}",
            less_call(&vq, vp),
            less_call(vp, &vq)
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
    if packed {
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
                em.open_loop(
                    &format!("for (var p{e}: u32 = 0u; p{e} < {n}u; p{e} = p{e} + 1u)"),
                    n as u64,
                );
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
    if let Some(k) = k {
        // top_k (along the last dimension): the first k ranks write their value and position.
        em.open(&format!("if ({rank} < {k}u)"));
        em.line(&format!("let dst = (l / {n}u) * {k}u + {rank};"));
        em.line(&format!("out0[dst] = {};", vp[0]));
        let index = match outs.get(1).map(|o| o.ty.dtype) {
            Some(crate::ir::ElementType::I64) => format!("i64({})", xi[dim]),
            Some(crate::ir::ElementType::U32) => xi[dim].clone(),
            _ => format!("i32({})", xi[dim]),
        };
        em.line(&format!("out1[dst] = {index};"));
        em.close(None);
    } else {
        em.line(&format!(
            "let dst = l - {} * {stride}u + {rank} * {stride}u;",
            xi[dim]
        ));
        for (j, v) in vp.iter().enumerate() {
            em.line(&format!("out{j}[dst] = {v};"));
        }
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
        iterations: em.iterations(),
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// Rows longer than this sort with the bitonic network or by radix instead of by ranking.
/// Lavapipe, f32 rows (ms, ranking / bitonic / radix): 1000 x 128 33 / 48 / 38, 1000 x 256
/// 130 / 98 / 72, 16 x 256 2.3 / 1.9 / 3.9; `top_k` of k = 10 (ranking / selection): 1000 x
/// 128 19.6 / 20.2, 1000 x 256 76 / 20.
pub const BITONIC_FROM: usize = 128;

/// The permutation a bitonic plan sorts: temporary 0.
pub(super) const PERM: ValueId = super::temp(0);

/// The bitonic plan for `op`, or `None` when its rows are short enough for ranking (and the
/// ranking kernel fits `target.max_invocation_iterations`). A bitonic
/// sort in passes: the first kernel writes the identity permutation of each row (padded to a
/// power of two `p`), the second is one compare-exchange stage over the permutation (its
/// `(k, j)` in the launch's parameters, so one pipeline serves every stage), the last writes
/// the results through the final permutation. Ties break on the original position, so it is
/// stable; the padding sorts last. O(n log² n) work instead of the ranking's O(n²).
pub fn bitonic(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<super::Plan>> {
    let Some(x) = op.operands.first() else {
        return Ok(None);
    };
    let Some(xt) = f.ty(*x).as_tensor() else {
        return Ok(None);
    };
    let dim = match &op.op {
        Op::Sort { dimension, .. } => *dimension as usize,
        Op::TopK { .. } => xt.rank().saturating_sub(1),
        _ => return Ok(None),
    };
    let xdims = xt.dims();
    let n = xdims.get(dim).copied().unwrap_or(0);
    // A small `k` of many rows: each row walked once, at any length (ranking 1000 rows of
    // 128 for k = 10 took 25 ms on lavapipe).
    if matches!(op.op, Op::TopK { .. }) && n > 0 {
        let rows = (xdims.iter().product::<usize>() / n) as u64;
        if let Some(plan) = super::top_k::per_row(name, f, defs, op, (n, rows), target)? {
            return Ok(Some(plan));
        }
    }
    // Short rows rank directly, unless ranking would loop longer than one invocation may
    // (a low `max_invocation_iterations`, packed narrow keys).
    if n <= BITONIC_FROM
        && emit(name, f, defs, op, target)?.iterations <= target.max_invocation_iterations
    {
        return Ok(None);
    }
    let total: usize = xdims.iter().product();
    let rows = (total / n) as u64;
    let p = (n as u64).next_power_of_two();
    let inner: usize = xdims[dim + 1..].iter().product();
    if let Some(plan) = super::sort_radix::plan(name, f, defs, op, (dim, n, inner, rows), target)? {
        return Ok(Some(plan));
    }
    let perm_type =
        crate::ir::TensorType::new(vec![(rows * p) as i64], crate::ir::ElementType::U32);
    let u32_binding = |value: ValueId, len: i64| Binding {
        value,
        ty: crate::ir::TensorType::new(vec![len], crate::ir::ElementType::U32),
    };
    let perm_in = u32_binding(PERM, (rows * p) as i64);
    let params_in = u32_binding(super::PARAMS, 2);
    let perm_out = Binding {
        value: PERM,
        ty: perm_type.clone(),
    };
    let threads = rows * p;

    let init = identity_kernel(&format!("{name}_init"), rows, p, target, &op.name())?;

    // The linear index of element `idx` of row `row` in the operands.
    let element = |row: &str, idx: &str| row_element(row, idx, n, inner);

    // pass
    let pass = with_prepared(
        f,
        defs,
        op,
        target,
        &[perm_in.clone(), params_in],
        |mut em, pr| {
            em.line(
                "let row = tid / PP;"
                    .replace("PP", &format!("{p}u"))
                    .as_str(),
            );
            em.line(&format!("let i = tid % {p}u;"));
            em.line("let k = in1[0];");
            em.line("let j = in1[1];");
            em.line("let l = i ^ j;");
            em.line(&format!("let pi = in0[row * {p}u + i];"));
            em.line(&format!("let pl = in0[row * {p}u + l];"));
            em.line("let first = select(pl, pi, i < l);");
            em.line("let second = select(pi, pl, i < l);");
            em.line("let ascending = (min(i, l) & k) == 0u;");
            em.line(&format!("let fv = first < {n}u;"));
            em.line(&format!("let sv = second < {n}u;"));
            let vf: Vec<String> = pr
                .operands
                .iter()
                .map(|&v| {
                    em.value(
                        v,
                        &Index::Linear(element("row", &format!("min(first, {}u)", n - 1))),
                    )
                })
                .collect::<Result<_>>()?;
            let vs: Vec<String> = pr
                .operands
                .iter()
                .map(|&v| {
                    em.value(
                        v,
                        &Index::Linear(element("row", &format!("min(second, {}u)", n - 1))),
                    )
                })
                .collect::<Result<_>>()?;
            // second_first: the second element belongs before the first.
            em.line(&format!(
                "let second_first = sv && (!fv || {} || (!{} && second < first));",
                less_call(&vs, &vf),
                less_call(&vf, &vs)
            ));
            em.line(
                "let swap = select(!second_first && first != second, second_first, ascending);",
            );
            em.line("out0[tid] = select(pi, pl, swap);");
            let comment = format!(
                "kernel {name}_pass: one compare-exchange stage of a bitonic {} along dimension {} ({n} elements per row, padded to {p})\nfuses: {}",
                if pr.k.is_some() { "top_k" } else { "sort" },
                pr.dim,
                op.name()
            );
            kernel::threaded(
                &format!("{name}_pass"),
                &comment,
                em.inputs.clone(),
                vec![perm_out.clone()],
                &em.needs,
                &pr.functions,
                &em.body,
                threads,
                em.iterations(),
                target,
            )
        },
    )?;

    let gather = gather(name, f, defs, op, (dim, n, inner), (p, false), target)?;

    let Some((local, b)) = local_stages(name, f, defs, op, (n, p, rows, inner), target)? else {
        return Ok(Some(super::Plan::bitonic(
            init,
            pass,
            gather,
            vec![perm_type],
            bitonic_stages(p),
        )));
    };
    // Blocks of `b` sorted whole in workgroup memory; then per merge size k past b, the global
    // stages of partners b or more apart, and the rest of k's stages locally again.
    let mut launches = vec![
        super::Launch::new(0, Vec::new()),
        super::Launch::new(2, vec![2, b as u32, 1]),
    ];
    let mut k = 2 * b;
    while k <= p {
        let mut j = k / 2;
        while j >= b {
            launches.push(super::Launch::new(1, vec![k as u32, j as u32]));
            j /= 2;
        }
        launches.push(super::Launch::new(
            2,
            vec![k as u32, k as u32, (b / 2) as u32],
        ));
        k *= 2;
    }
    launches.push(super::Launch::new(3, Vec::new()));
    Ok(Some(super::Plan {
        kernels: vec![init, pass, local, gather],
        temps: vec![perm_type],
        launches,
    }))
}

/// The results of a `sort` or `top_k` through its permutation (temporary 0, rows of
/// `stride` entries, `dim` of length `n` with `inner` elements after it): result `pos` of a
/// row is the row's element `in0[row * stride + pos]`, less `row * stride` when the entries
/// are item numbers (`items`, a radix sort's) rather than positions in the row. Its own
/// emitter, without the comparator (whose captured values it does not read: unused bindings
/// would not match the pipeline's layout).
pub(super) fn gather(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (dim, n, inner): (usize, usize, usize),
    (stride, items): (u64, bool),
    target: Target,
) -> Result<Kernel> {
    let rows = f
        .ty(op.operands[0])
        .as_tensor()
        .map_or(0, |t| t.num_elements() as u64)
        / (n as u64).max(1);
    let perm_in = Binding {
        value: PERM,
        ty: crate::ir::TensorType::new(vec![(rows * stride) as i64], crate::ir::ElementType::U32),
    };
    let element = |row: &str, idx: &str| row_element(row, idx, n, inner);
    let (operands, k_top): (Vec<ValueId>, Option<usize>) = match &op.op {
        Op::TopK { k, .. } => (vec![op.operands[0]], Some(*k as usize)),
        _ => (op.operands.clone(), None),
    };
    let no_fusion = |_: ValueId| false;
    let mut em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
    em.inputs.push(perm_in);
    let outs = result_bindings(&em, op)?;
    let rdims = outs[0].ty.dims();
    let idx_t = outs.get(1).map(|o| o.ty.dtype);
    let comment = format!(
        "kernel {name}_gather: results of a {} {} through its permutation\nfuses: {}",
        if items { "radix" } else { "bitonic" },
        if k_top.is_some() { "top_k" } else { "sort" },
        op.name()
    );
    let top_k = k_top.is_some();
    build(
        &format!("{name}_gather"),
        em,
        outs,
        "",
        &comment,
        target,
        |em, lin, e| {
            let ri = em.multi(&Index::Linear(lin.to_string()), &rdims);
            // The row of this result and its position in the row.
            let rinner: usize = rdims[dim + 1..].iter().product();
            let before: Vec<String> = (0..dim).map(|d| ri[d].clone()).collect();
            let mut o = "0u".to_string();
            for (d, b) in before.iter().enumerate() {
                o = format!("({o} * {}u + {b})", rdims[d]);
            }
            let mut q = "0u".to_string();
            for d in dim + 1..rdims.len() {
                q = format!("({q} * {}u + {})", rdims[d], ri[d]);
            }
            let row = format!("row{e}");
            em.line(&format!("let {row} = {o} * {rinner}u + {q};"));
            let src = format!("src{e}");
            let minus = if items {
                format!(" - {row} * {stride}u")
            } else {
                String::new()
            };
            em.line(&format!(
                "let {src} = in0[{row} * {stride}u + {}]{minus};",
                ri[dim]
            ));
            let vals: Vec<String> = operands
                .iter()
                .map(|&v| em.value(v, &Index::Linear(element(&row, &src))))
                .collect::<Result<_>>()?;
            if top_k {
                let index = match idx_t {
                    Some(crate::ir::ElementType::I64) => format!("i64({src})"),
                    Some(crate::ir::ElementType::U32) => src.clone(),
                    _ => format!("i32({src})"),
                };
                return Ok(vec![vals[0].clone(), index]);
            }
            Ok(vals)
        },
    )
}

/// Most permutation entries one workgroup sorts in its memory.
const LOCAL_BLOCK_MAX: u64 = 4096;

/// The block of a row's permutation one workgroup sorts in workgroup memory at `entry` bytes
/// an entry: the largest power of two up to `p`, [`LOCAL_BLOCK_MAX`] and `storage` (the
/// adapter's workgroup memory), at least 64; `None` below that.
fn local_block(p: u64, entry: u64, storage: u64) -> Option<u64> {
    let most = LOCAL_BLOCK_MAX.min(storage / entry.max(1)).min(p);
    let b = if most == 0 {
        0
    } else {
        1u64 << (63 - most.leading_zeros())
    };
    (b >= 64).then_some(b)
}

/// The local stages of a bitonic sort ([`bitonic`]) and their block `b`: each workgroup
/// loads block `b` of one row's permutation into workgroup memory, with the sorted values at
/// those positions when they are 32- or 64-bit numbers, and runs, for each merge size `k`
/// from `params[0]` to `params[1]` (doubling), the compare-exchanges of partners `j` apart
/// for `j` from `params[2]` (then `k / 2` for the next `k`) down to 1, a barrier after each;
/// then stores the permutation back. The stages of partners closer than `b` run in one launch
/// that compares values in workgroup memory, instead of one launch each over every row that
/// reads both values through the permutation: a 2048 x 2048 f32 sort along rows took 66
/// launches, 2.7 s, on lavapipe.
fn local_stages(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (n, p, rows, inner): (usize, u64, u64, usize),
    target: Target,
) -> Result<Option<(Kernel, u64)>> {
    let u32s = |value: ValueId, len: u64| Binding {
        value,
        ty: crate::ir::TensorType::new(vec![len as i64], crate::ir::ElementType::U32),
    };
    let perm_in = u32s(PERM, rows * p);
    let perm_out = u32s(PERM, rows * p);
    let element = |row: &str, idx: &str| row_element(row, idx, n, inner);
    with_prepared(
        f,
        defs,
        op,
        target,
        &[perm_in, u32s(super::PARAMS, 3)],
        |mut em, pr| {
            // The values in workgroup memory too, when they are plain numbers.
            let sizes: Option<Vec<u64>> = pr
                .types
                .iter()
                .map(|t| match t {
                    Compute::I32 | Compute::U32 | Compute::F32 => Some(4),
                    Compute::I64 | Compute::U64 | Compute::F64 => Some(8),
                    _ => None,
                })
                .collect();
            // CPU adapters emulate workgroup memory: values compared from there took longer
            // than read through the permutation (lavapipe, 2048 x 2048 f32: 2.5 s against
            // 2.0). `WGPU_HLO_SORT_CACHE=0` or `1` overrides, for comparisons.
            let cached = sizes.is_some()
                && match std::env::var("WGPU_HLO_SORT_CACHE").as_deref() {
                    Ok("0") => false,
                    Ok("1") => true,
                    _ => !target.cpu_adapter,
                };
            let entry = 4 + sizes.map_or(0, |s| s.iter().sum());
            // `WGPU_HLO_SORT_LOCAL=0`: every stage a global pass, for comparisons.
            let off = std::env::var("WGPU_HLO_SORT_LOCAL").is_ok_and(|v| v.trim() == "0");
            let Some(b) = local_block(p, entry, target.max_workgroup_storage).filter(|_| !off)
            else {
                return Ok(None);
            };
            // Lavapipe: 32 to 256 invocations within 15 % (2.05 to 2.34 s), 64 among the best.
            let wg = if target.cpu_adapter { 64 } else { 256 }.min(b / 2);
            let blocks = p / b;
            let groups = rows * blocks;
            let log = u64::from(b.trailing_zeros());
            em.line("let g = wid.y * nwg.x + wid.x;");
            em.line(&format!("if (g >= {groups}u) {{ return; }}"));
            em.line(&format!("let row = g / {blocks}u;"));
            em.line(&format!("let base = (g % {blocks}u) * {b}u;"));
            em.line(&format!("let at = row * {p}u + base;"));
            em.open_loop(
                &format!("for (var t = lid; t < {b}u; t = t + {wg}u)"),
                b / wg,
            );
            em.line("let e = in0[at + t];");
            em.line("perm[t] = e;");
            if cached {
                for (o, &v) in pr.operands.iter().enumerate() {
                    let x = em.value(
                        v,
                        &Index::Linear(element("row", &format!("min(e, {}u)", n - 1))),
                    )?;
                    em.line(&format!("kv{o}[t] = {x};"));
                }
            }
            em.close(None);
            em.line("workgroupBarrier();");
            em.line("var j0 = in1[2];");
            em.open_loop("for (var k = in1[0]; k <= in1[1]; k = k << 1u)", log);
            em.open_loop("for (var j = j0; j > 0u; j = j >> 1u)", log);
            open_pairs(&mut em, b / 2, wg);
            em.line("let first = perm[i];");
            em.line("let second = perm[l];");
            em.line("let ascending = ((base + i) & k) == 0u;");
            em.line(&format!("let fv = first < {n}u;"));
            em.line(&format!("let sv = second < {n}u;"));
            // The two values of each operand: from workgroup memory, or read through the
            // permutation.
            let (vf, vs): (Vec<String>, Vec<String>) = if cached {
                for o in 0..pr.operands.len() {
                    em.line(&format!("let kf{o} = kv{o}[i];"));
                    em.line(&format!("let ks{o} = kv{o}[l];"));
                }
                (0..pr.operands.len())
                    .map(|o| (format!("kf{o}"), format!("ks{o}")))
                    .unzip()
            } else {
                let at = |which: &str| element("row", &format!("min({which}, {}u)", n - 1));
                let mut read = |which: &str| -> Result<Vec<String>> {
                    pr.operands
                        .iter()
                        .map(|&v| em.value(v, &Index::Linear(at(which))))
                        .collect()
                };
                (read("first")?, read("second")?)
            };
            // As in the global pass: the second belongs before the first, ties by position.
            em.line(&format!(
                "let second_first = sv && (!fv || {} || (!{} && second < first));",
                less_call(&vs, &vf),
                less_call(&vf, &vs)
            ));
            em.open("if (select(!second_first, second_first, ascending))");
            em.line("perm[i] = second;");
            em.line("perm[l] = first;");
            if cached {
                for o in 0..pr.operands.len() {
                    em.line(&format!("kv{o}[i] = ks{o};"));
                    em.line(&format!("kv{o}[l] = kf{o};"));
                }
            }
            em.close(None);
            em.close(None);
            em.line("workgroupBarrier();");
            em.close(None);
            em.line("j0 = k;");
            em.close(None);
            em.open_loop(
                &format!("for (var t = lid; t < {b}u; t = t + {wg}u)"),
                b / wg,
            );
            em.line("out0[at + t] = perm[t];");
            em.close(None);
            if em.iterations() > target.max_invocation_iterations {
                return Ok(None);
            }
            let mut shared = format!("var<workgroup> perm: array<u32, {b}>;\n");
            if cached {
                for (o, t) in pr.types.iter().enumerate() {
                    shared.push_str(&format!(
                        "var<workgroup> kv{o}: array<{}, {b}>;\n",
                        t.wgsl()
                    ));
                }
            }
            let source = format!(
                "{}{shared}\n{}{}}}\n",
                pr.functions,
                crate::codegen::kernel::entry_header(wg as u32),
                em.body
            );
            let lname = format!("{name}_local");
            let comment = format!(
                "kernel {lname}: the compare-exchanges of partners closer than {b} of a bitonic {} along dimension {} ({n} elements per row, padded to {p}), a block of {b} per workgroup in its memory\nloop iterations per invocation: at most {}\nfuses: {}",
                if pr.k.is_some() { "top_k" } else { "sort" },
                pr.dim,
                em.iterations(),
                op.name()
            );
            let wgsl = crate::codegen::kernel::assemble(
                &lname,
                &comment,
                &em.inputs,
                std::slice::from_ref(&perm_out),
                &em.needs,
                &source,
                target.caps,
            )?;
            Ok(Some((
                Kernel {
                    name: lname,
                    wgsl,
                    inputs: em.inputs.clone(),
                    outputs: vec![perm_out.clone()],
                    workgroups: kernel::grid(groups, target.max_workgroups)?,
                    iterations: em.iterations(),
                    texture_inputs: Vec::new(),
                    state_textures: Vec::new(),
                    scratch_textures: Vec::new(),
                    parted: Vec::new(),
                },
                b,
            )))
        },
    )
}

/// The `(k, j)` compare-exchange stages of a bitonic network over `p` (a power of two) items.
pub(crate) fn bitonic_stages(p: u64) -> Vec<(u32, u32)> {
    let mut stages = Vec::new();
    let mut k = 2u64;
    while k <= p {
        let mut j = k / 2;
        while j >= 1 {
            stages.push((k as u32, j as u32));
            j /= 2;
        }
        k *= 2;
    }
    stages
}

/// A kernel writing `rows` identity permutations of `p` entries (`u32`).
pub(crate) fn identity_kernel(
    name: &str,
    rows: u64,
    p: u64,
    target: Target,
    what: &str,
) -> Result<Kernel> {
    let threads = rows * p;
    let out = Binding {
        value: PERM,
        ty: crate::ir::TensorType::new(vec![threads as i64], crate::ir::ElementType::U32),
    };
    let comment = format!(
        "kernel {name}: identity permutations of {rows} rows of {p} for a bitonic sort\nfuses: {what}"
    );
    kernel::threaded(
        name,
        &comment,
        Vec::new(),
        vec![out],
        &Default::default(),
        "",
        &format!("    out0[tid] = tid % {p}u;\n"),
        threads,
        0,
        target,
    )
}

/// `k_less(a0, b0, a1, b1, ...)`: whether the element of values `a` sorts before that of `b`.
fn less_call(a: &[String], b: &[String]) -> String {
    let args: Vec<String> = a
        .iter()
        .zip(b)
        .flat_map(|(x, y)| [x.clone(), y.clone()])
        .collect();
    format!("k_less({})", args.join(", "))
}

/// Opens the loop of a bitonic stage over its `pairs` compare-exchanges, `wg` threads of a
/// workgroup at a time (`lid`), inside loops of `k` and `j`: each `t` names the pair
/// `(i, l)`, `l = i | j`.
pub(super) fn open_pairs(em: &mut ExprEmitter, pairs: u64, wg: u64) {
    em.open_loop(
        &format!("for (var t = lid; t < {pairs}u; t = t + {wg}u)"),
        pairs.div_ceil(wg),
    );
    // Pair (i, i | j): t with a zero bit inserted at j's position.
    em.line("let i = ((t & ~(j - 1u)) << 1u) | (t & (j - 1u));");
    em.line("let l = i | j;");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_blocks_fit_workgroup_memory() {
        // Up to 4096 entries, fewer when each carries values, never past the row.
        assert_eq!(local_block(8192, 4, 32768), Some(4096));
        assert_eq!(local_block(8192, 12, 32768), Some(2048));
        assert_eq!(local_block(1024, 8, 32768), Some(1024));
        // Too little memory for 64 entries: every stage a global pass.
        assert_eq!(local_block(8192, 4, 200), None);
    }
}
