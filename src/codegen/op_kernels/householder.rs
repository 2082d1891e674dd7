//! `custom_call @wgpu_hlo.householder_panel(p, j0)`, `p: [..., m, b]` f32, `j0: i32[]` ->
//! `(r: [..., m, b], v: [..., m, b], tau: [..., b])`: one panel of the blocked Householder QR
//! (`_householder_factor` in `python/jax_plugins/wgpu/lowerings.py`), whose first column sits
//! on row `j0` of the matrix. Column `jj` in turn gets LAPACK's reflector (`dlarfg`) of its
//! rows from `j = j0 + jj` down, computed over the column's largest magnitude: `tau = (beta -
//! alpha) / beta`, `v = x / (alpha - beta)` below the diagonal and 1 on it, `beta =
//! -sign(alpha) |x|` stored on the diagonal with zeros below; a column already zero below the
//! diagonal is left alone (`tau = 0`, `v = 0`). Each reflector is applied to every column of
//! the panel before the next column is reduced.
//!
//! As a loop of JAX ops over the columns this took about 8 kernel launches a column (a
//! 256 x 256 QR: 2100 launches, 105 ms of kernel time on lavapipe, 129 ms a call). Here one
//! workgroup per matrix runs the columns: the two reductions of a column (its largest
//! magnitude, then the sum of squares) across the workgroup's invocations (through subgroup
//! operations where the adapter has them), then the products `v^T p` with each invocation
//! taking one column and a slice of the rows, a storage barrier between steps. The same QR:
//! 60 launches, 45 ms of kernel time (the 8 panels 16 ms of it), 50-55 ms a call.
//! Launches take ranges of columns within the loop bound, updating one state buffer (the
//! panel, the reflectors, the `tau`s) in place; a first kernel fills it and a last one splits
//! it into the three results.

use super::{result_binding, temp, Plan, PARAMS};
use crate::codegen::expr::Binding;
use crate::codegen::kernel;
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::ops::CustomCall;
use crate::ir::{ElementType, Function, Operation, TensorType, Type};

/// The custom call's target.
pub const PANEL_TARGET: &str = "wgpu_hlo.householder_panel";

/// Invocations per workgroup on GPUs. CPU adapters run a workgroup on one core, its
/// invocations 8 lanes at a time, switching between those at every barrier: fewer invocations
/// do the same work with fewer switches, and with fewer invocations than columns right of the
/// diagonal, each takes whole columns without any exchange. Lavapipe (2 cores), the panels'
/// kernel time of a 256 x 256 / 512 x 512 QR: 64 invocations 9.0 / 32.0 ms, 32 8.8 / 32.3,
/// 16 7.4 / 28.1, 8 7.5 / 26.6 (8 and 16 take more launches per panel within the loop bound).
const WG: u64 = 256;
const CPU_WG: u64 = 16;

/// Widest panel taken (the rule's panels are 32 columns).
pub const MAX_WIDTH: u64 = 64;

/// Whether `c` names this kernel.
pub fn handles(c: &CustomCall) -> bool {
    c.call_target_name == PANEL_TARGET
}

/// The plan of `custom_call @wgpu_hlo.householder_panel` (module doc).
pub fn plan(name: &str, f: &Function, op: &Operation, target: Target) -> Result<Plan> {
    let what = format!("custom_call @{PANEL_TARGET}");
    let ([p, j0], [r, v, tau]) = (op.operands.as_slice(), op.results.as_slice()) else {
        return Err(Error::invalid(format!(
            "{what} takes a panel and its first row, and has three results"
        )));
    };
    let pt = match f.ty(*p) {
        Type::Tensor(t) if t.is_static() && t.rank() >= 2 && t.dtype == ElementType::F32 => {
            t.clone()
        }
        other => {
            return Err(Error::unimplemented(format!(
                "{what} on {other} (f32 panels are supported)"
            )))
        }
    };
    if !matches!(f.ty(*j0), Type::Tensor(t) if t.dtype == ElementType::I32 && t.num_elements() == 1)
    {
        return Err(Error::invalid(format!(
            "{what}: the first row must be one i32, got {}",
            f.ty(*j0)
        )));
    }
    let d = pt.dims();
    let (m, b) = (d[d.len() - 2] as u64, d[d.len() - 1] as u64);
    if b == 0 || b > MAX_WIDTH || m == 0 {
        return Err(Error::unimplemented(format!(
            "{what} of {m}x{b} panels (1 to {MAX_WIDTH} columns)"
        )));
    }
    let batch = pt.num_elements() as u64 / (m * b);
    let result = |v, len| result_binding(f, v, ElementType::F32, len, &what);
    let (r, v, tau) = (
        result(*r, batch * m * b)?,
        result(*v, batch * m * b)?,
        result(*tau, batch * b)?,
    );
    let mb = m * b;
    let stride = 2 * mb + b;
    let state_type = TensorType::new(vec![(batch * stride) as i64], ElementType::F32);
    let state = Binding {
        value: temp(0),
        ty: state_type.clone(),
    };
    let desc = format!("Householder panel of {batch} matrices {m}x{b} f32");
    let params = Binding {
        value: PARAMS,
        ty: TensorType::new(vec![2], ElementType::U32),
    };
    let first_row = Binding {
        value: *j0,
        ty: match f.ty(*j0) {
            Type::Tensor(t) => t.clone(),
            _ => TensorType::new(vec![], ElementType::I32),
        },
    };
    let panel = Binding {
        value: *p,
        ty: pt.clone(),
    };
    if let Some(plan) = in_one_subgroup(
        name,
        (&desc, &what),
        (batch, m, b),
        (panel.clone(), params.clone(), first_row.clone()),
        (r.clone(), v.clone(), tau.clone()),
        target,
    )? {
        return Ok(plan);
    }
    let init = kernel::threaded(
        &format!("{name}_init"),
        &format!("kernel {name}_init: the state of a {desc}\nfuses: {what}"),
        vec![panel],
        vec![state.clone()],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {stride}u;\n    let e = tid % {stride}u;\n    \
             if (e < {mb}u) {{ out0[tid] = in0[mat * {mb}u + e]; }} else {{ out0[tid] = 0.0; }}\n"
        ),
        batch * stride,
        0,
        target,
    )?;
    let bound = target.max_invocation_iterations;
    // CPU adapters: the fewest invocations whose columns still fit the loop bound 8 at a time
    // (a tall panel's whole columns would not), else the most.
    let wg = if target.cpu_adapter {
        [CPU_WG, 32, 64, 128, WG]
            .into_iter()
            .find(|&wg| 8 * column_cost(m, b, wg) <= bound)
            .unwrap_or(WG)
    } else {
        WG
    };
    let slices = most_slices(m, b, wg);
    let column_cost = column_cost(m, b, wg);
    let Some((ranges, most)) = super::linalg::ranges_within(b, 0, |_| column_cost, bound) else {
        return Err(Error::resource_exhausted(format!(
            "{desc}: one column would loop {column_cost} times in one invocation (at most {bound})"
        )));
    };
    let kname = format!("{name}_columns");
    let comment = format!(
        "kernel {kname}: columns jj0..jj1 (parameters) of a {desc}, one workgroup per matrix, a storage barrier between steps\nloop iterations per invocation: at most {most}\nfuses: {what}"
    );
    let columns = kernel::in_workgroups(
        &kname,
        &comment,
        vec![params, first_row],
        vec![state.clone()],
        &Default::default(),
        &columns_body(batch, m, b, wg, slices, target.caps.subgroup),
        batch,
        most,
        target,
    )?;
    let split = kernel::threaded(
        &format!("{name}_out"),
        &format!("kernel {name}_out: the panel, reflectors and taus of a {desc}\nfuses: {what}"),
        vec![state],
        vec![r, v, tau],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {mb}u;\n    let e = tid % {mb}u;\n    let base = mat * {stride}u;\n    \
             out0[tid] = in0[base + e];\n    out1[tid] = in0[base + {mb}u + e];\n    \
             if (e < {b}u) {{ out2[mat * {b}u + e] = in0[base + {two}u + e]; }}\n",
            two = 2 * mb
        ),
        batch * mb,
        0,
        target,
    )?;
    Ok(Plan::ranged(init, columns, split, state_type, ranges))
}

/// Most rows a lane of [`in_one_subgroup`] holds in its private array of the reflector's
/// entries (an array indexed at run time, which the driver's compile pays for by its length).
const MAX_SLOTS: u64 = 128;

/// The columns kernel on CPU adapters with subgroups of 4, 8 or 16 lanes: one subgroup per
/// matrix, row `i` held by lane `i % L` as slot `i / L`, each column's two reductions and the
/// products `v^T p` as `subgroupMax` / `subgroupAdd` of the lanes' partial sums, the diagonal
/// element from its lane by `subgroupShuffle`, no barrier.
///
/// The state holds the panel and the reflectors as quads of columns (`vec4`s), each lane's
/// interleaved with the others' (lane `l`'s quad `q` of slot `t` at `(t * quads + q) * L +
/// l`; the init and out kernels convert from and to row-major): no lane reads another's
/// words, so no barrier is needed, each load of the lanes reads consecutive words, and the
/// products take four columns per load (columns up to the step's own masked). Every store
/// writes a whole quad (a lane's own), so a state past the binding limit (16384 x 64 x 64)
/// can be bound in parts (`codegen::parted` refuses stores to one component). Lavapipe, the
/// panels' kernel time: a 256 x 256 QR (8 panels) 12.8-15.4 ms in the workgroup kernel, 2.4
/// ms here (and one launch a panel instead of two); the 512-row panels of a 512 x 512 QR
/// 36-44 ms -> 7.3-8.4 ms. Also tried: the panel in workgroup memory (256 rows at most in 32
/// KiB) 2.1-2.3 ms at 256, scalar words there 5.8 ms; a private array per lane
/// (`array<array<f32, b>, slots>`) 3.0 ms, but llvmpipe took 14 s more to compile it for 256
/// rows and 400 s for 900.
///
/// Where the loop bound allows, one kernel does it all, copies in and out included (below).
///
/// `None` where it does not serve (or `WGPU_HLO_QR_PANEL` is `workgroup`).
fn in_one_subgroup(
    name: &str,
    (desc, what): (&str, &str),
    (batch, m, b): (u64, u64, u64),
    (panel, params, first_row): (Binding, Binding, Binding),
    (r, v, tau): (Binding, Binding, Binding),
    target: Target,
) -> Result<Option<Plan>> {
    let lanes = u64::from(target.caps.subgroup_size);
    let slots = m.div_ceil(lanes.max(1));
    if !(target.cpu_adapter && target.caps.subgroup && matches!(lanes, 4 | 8 | 16))
        || slots > MAX_SLOTS
        || std::env::var("WGPU_HLO_QR_PANEL").is_ok_and(|v| v.trim() == "workgroup")
    {
        return Ok(None);
    }
    // Quads of columns: the panel's columns padded to a multiple of 4; `held` quads of the
    // panel (and as many of the reflectors) per matrix.
    let quads = b.div_ceil(4);
    let held = slots * quads * lanes;
    // Each column passes over the slots four times and twice per quad from its own on.
    let cost = |jj: u64| 4 * slots + (quads - jj / 4) * (2 * slots + 1) + 4;
    let Some((ranges, most)) =
        super::linalg::ranges_within(b, 4, cost, target.max_invocation_iterations)
    else {
        return Ok(None);
    };
    let (mb, last) = (m * b, slots - 1);
    // Per matrix, in quads: the panel, the reflectors, the `tau`s.
    let stride = 2 * held + quads;
    // Quad q of slot t of a lane's rows (columns 4q .. 4q + 3).
    let x = |t: &str, q: &str| format!("out0[base + ({t} * {quads}u + {q}) * {lanes}u + sgl]");
    let head = format!(
        "{entry}    let mat = wid.y * nwg.x + wid.x;
    if (mat >= {batch}u) {{ return; }}
    let base = mat * {stride}u;
    let jj0 = in0[0];
    let jj1 = in0[1];
    let j0 = u32(max(in1[0], 0));
",
        entry = kernel::subgroup_entry_header(lanes as u32),
    );
    let columns_loop = format!(
        "    var v: array<f32, {slots}>;
    for (var jj = jj0; jj < jj1; jj = jj + 1u) {{
        let j = j0 + jj;
        let tj = min(j / {lanes}u, {last}u);
        let qj = jj / 4u;
        let kj = jj % 4u;
        // The column's largest magnitude from row j down.
        var top = 0.0;
        for (var t = tj; t < {slots}u; t = t + 1u) {{
            top = max(top, select(0.0, abs({xj}[kj]), t * {lanes}u + sgl >= j));
        }}
        top = subgroupMax(top);
        let scale = select(1.0, top, top > 0.0);
        // The sum of squares below the diagonal, over that magnitude.
        var q2 = 0.0;
        for (var t = tj; t < {slots}u; t = t + 1u) {{
            let e = {xj}[kj] / scale;
            q2 = q2 + select(0.0, e * e, t * {lanes}u + sgl > j);
        }}
        let xnorm = sqrt(subgroupAdd(q2));
        let diag = subgroupShuffle({xdiag}[kj], j % {lanes}u);
        let alpha = select(0.0, diag / scale, j < {m}u);
        let reflect = xnorm > 0.0;
        let norm = sqrt(alpha * alpha + xnorm * xnorm);
        let beta = select(norm, -norm, alpha >= 0.0);
        let tau = select(0.0, (beta - alpha) / select(1.0, beta, reflect), reflect);
        let inv = 1.0 / select(1.0, alpha - beta, reflect);
        // The reflector: 1 on the diagonal, x * inv below (rows above j stay zero).
        for (var t = tj; t < {slots}u; t = t + 1u) {{
            let i = t * {lanes}u + sgl;
            var vi = 0.0;
            if (reflect && i >= j) {{ vi = select({xj}[kj] / scale * inv, 1.0, i == j); }}
            v[t] = vi;
            if (i >= j && i < {m}u) {{
                let at = base + {held}u + (t * {quads}u + qj) * {lanes}u + sgl;
                var w = out0[at];
                w[kj] = vi;
                out0[at] = w;
            }}
        }}
        // w = tau v^T p for the columns right of jj, a quad at a time (columns up to jj
        // masked out), then p -= v w.
        for (var q = qj; q < {quads}u; q = q + 1u) {{
            var acc = vec4<f32>();
            for (var t = tj; t < {slots}u; t = t + 1u) {{ acc = acc + v[t] * {xq}; }}
            let right = vec4<u32>(q * 4u) + vec4<u32>(0u, 1u, 2u, 3u) > vec4<u32>(jj);
            let w = tau * subgroupAdd(acc);
            for (var t = tj; t < {slots}u; t = t + 1u) {{
                let p = {xq};
                {xq} = select(p, p - v[t] * w, right);
            }}
        }}
        // The column itself: beta on the diagonal, zeros below.
        if (reflect) {{
            for (var t = tj; t < {slots}u; t = t + 1u) {{
                let i = t * {lanes}u + sgl;
                if (i >= j) {{
                    var p = {xj};
                    p[kj] = select(0.0, beta * scale, i == j);
                    {xj} = p;
                }}
            }}
        }}
        if (sgl == 0u) {{
            var taus = out0[base + {taus}u + qj];
            taus[kj] = tau;
            out0[base + {taus}u + qj] = taus;
        }}
    }}
",
        taus = 2 * held,
        xq = x("t", "q"),
        xj = x("t", "qj"),
        xdiag = x("tj", "qj"),
    );
    let state_type = TensorType::new(vec![(4 * batch * stride) as i64], ElementType::F32);
    let state = Binding {
        value: temp(0),
        ty: state_type.clone(),
    };
    // One launch takes every column where the loop bound allows its copies in and out too:
    // the state is filled from the panel and split into the results by the same kernel, each
    // lane moving only the words it works on, so no barrier is needed (`WGPU_HLO_QR_PANEL=
    // ranged`: the three kernels even so). Lavapipe, three alternating pairs, min of 12 calls:
    // qr 256 (8 panels, 71 -> 55 dispatches) 36.9 / 37.3 / 26.2 -> 36.1 / 25.4 / 25.4 ms,
    // qr 512 131 / 132 / 107 -> 124 / 119 / 90 ms, on a host whose speed drifted between
    // the pairs.
    let moves = 2 * slots * quads + b;
    let ranged = std::env::var("WGPU_HLO_QR_PANEL").is_ok_and(|v| v.trim() == "ranged");
    if let [(0, z)] = ranges.as_slice() {
        let iterations = most + moves;
        if *z == b && iterations <= target.max_invocation_iterations && !ranged {
            let kname = name.to_string();
            let comment = format!(
                "kernel {kname}: a {desc}, one subgroup per matrix, the panel as quads of columns by lanes in a state that the kernel fills and splits, the column's sums by subgroup operations\nloop iterations per invocation: at most {iterations}\nfuses: {what}"
            );
            let fill = format!(
                "    for (var t = 0u; t < {slots}u; t = t + 1u) {{
        let i = t * {lanes}u + sgl;
        for (var q = 0u; q < {quads}u; q = q + 1u) {{
            var p = vec4<f32>();
{loads}            {xq} = p;
            out0[base + {held}u + (t * {quads}u + q) * {lanes}u + sgl] = vec4<f32>();
        }}
    }}
",
                xq = x("t", "q"),
                loads = (0..4)
                    .map(|c| format!(
                        "            if (i < {m}u && q * 4u + {c}u < {b}u) {{ p[{c}] = in2[mat * {mb}u + i * {b}u + q * 4u + {c}u]; }}\n"
                    ))
                    .collect::<String>(),
            );
            let split = format!(
                "    for (var t = 0u; t < {slots}u; t = t + 1u) {{
        let i = t * {lanes}u + sgl;
        for (var q = 0u; q < {quads}u; q = q + 1u) {{
            let p = {xq};
            let w = out0[base + {held}u + (t * {quads}u + q) * {lanes}u + sgl];
{stores}        }}
    }}
    if (sgl == 0u) {{
        for (var c = 0u; c < {b}u; c = c + 1u) {{ out3[mat * {b}u + c] = out0[base + {taus}u + c / 4u][c % 4u]; }}
    }}
}}
",
                xq = x("t", "q"),
                taus = 2 * held,
                stores = (0..4)
                    .map(|c| format!(
                        "            if (i < {m}u && q * 4u + {c}u < {b}u) {{ out1[mat * {mb}u + i * {b}u + q * 4u + {c}u] = p[{c}]; out2[mat * {mb}u + i * {b}u + q * 4u + {c}u] = w[{c}]; }}\n"
                    ))
                    .collect::<String>(),
            );
            let single = kernel::in_workgroups_quads(
                &kname,
                &comment,
                (vec![params, first_row, panel], vec![state, r, v, tau]),
                &Default::default(),
                &format!("{head}{fill}{columns_loop}{split}"),
                (&[], &[0]),
                (batch, iterations),
                target,
            )?;
            return Ok(Some(Plan {
                kernels: vec![single],
                temps: vec![state_type],
                launches: vec![super::Launch::new(0, vec![0, b as u32])],
            }));
        }
    }
    let kname = format!("{name}_columns");
    let comment = format!(
        "kernel {kname}: columns jj0..jj1 (parameters) of a {desc}, one subgroup per matrix, the panel as quads of columns by lanes, the column's sums by subgroup operations\nloop iterations per invocation: at most {most}\nfuses: {what}"
    );
    let columns = kernel::in_workgroups_quads(
        &kname,
        &comment,
        (vec![params, first_row], vec![state.clone()]),
        &Default::default(),
        &format!("{head}{columns_loop}}}\n"),
        (&[], &[0]),
        (batch, most),
        target,
    )?;
    // Word `w` of a matrix's panel, quads by lanes: element (i, c).
    let words = 4 * stride;
    let init = kernel::threaded(
        &format!("{name}_init"),
        &format!(
            "kernel {name}_init: the state of a {desc}, quads of columns by lanes\nfuses: {what}"
        ),
        vec![panel],
        vec![state.clone()],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {words}u;\n    let w = tid % {words}u;\n    \
             let l = (w / 4u) % {lanes}u;\n    let tq = w / (4u * {lanes}u);\n    \
             let i = (tq / {quads}u) * {lanes}u + l;\n    let c = (tq % {quads}u) * 4u + w % 4u;\n    \
             var p = 0.0;\n    \
             if (w < {panel_words}u && i < {m}u && c < {b}u) {{ p = in0[mat * {mb}u + i * {b}u + c]; }}\n    \
             out0[tid] = p;\n",
            panel_words = 4 * held,
        ),
        batch * words,
        0,
        target,
    )?;
    let split = kernel::threaded(
        &format!("{name}_out"),
        &format!(
            "kernel {name}_out: the panel, reflectors and taus of a {desc} from its state, quads of columns by lanes\nfuses: {what}"
        ),
        vec![state],
        vec![r, v, tau],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {mb}u;\n    let ic = tid % {mb}u;\n    \
             let i = ic / {b}u;\n    let c = ic % {b}u;\n    \
             let w = (((i / {lanes}u) * {quads}u + c / 4u) * {lanes}u + i % {lanes}u) * 4u + c % 4u;\n    \
             let base = mat * {words}u;\n    \
             out0[tid] = in0[base + w];\n    out1[tid] = in0[base + {vw}u + w];\n    \
             if (ic < {b}u) {{ out2[mat * {b}u + ic] = in0[base + {tw}u + ic]; }}\n",
            vw = 4 * held,
            tw = 8 * held,
        ),
        batch * mb,
        0,
        target,
    )?;
    Ok(Some(Plan::ranged(init, columns, split, state_type, ranges)))
}

/// The busiest invocation's loop iterations for one column of an `m x b` panel in workgroups
/// of `wg` (its rows from row 0 down, the first row being known only at run time): the
/// column's passes, the reductions, and the products, either over whole columns (more columns
/// right of the diagonal than invocations) or over `s` slices of rows, `s` between the fewest
/// (every column taking part) and [`most_slices`], whose cost is largest at one of the ends.
fn column_cost(m: u64, b: u64, wg: u64) -> u64 {
    let slices = most_slices(m, b, wg);
    let log = u64::from(wg.trailing_zeros());
    let products = |s: u64| s + 2 * m.div_ceil(s);
    let shared = b.saturating_sub(1).min(wg - 1).max(1);
    let fewest = (wg / shared).clamp(1, slices);
    let whole = if b > wg {
        (b - 1).div_ceil(wg) * (2 * m + 2)
    } else {
        0
    };
    4 * m.div_ceil(wg) + 2 * log + whole.max(products(fewest)).max(products(slices)) + 4
}

/// Most slices of rows per column in the products `v^T p` (`columns_body`): as the panel's
/// columns are done, the invocations spread over fewer columns and more slices, up to about
/// `sqrt(2m)` (the slices' partial sums are added by one invocation: `s + 2m / s` steps), and
/// at least `wg / b`, where every column takes part.
fn most_slices(m: u64, b: u64, wg: u64) -> u64 {
    let root = (2 * m).isqrt().max(1);
    root.max(wg / b.max(1)).clamp(1, wg)
}

/// The columns kernel's WGSL: `batch` states of the panel (`m x b`), the reflectors (`m x b`)
/// and the `tau`s (`b`); workgroups of `wg`, at most `slices` slices of rows per column in the
/// products (`b` must not exceed `wg`); `subgroups`: the column's reductions go through
/// subgroup operations and one exchange in workgroup memory instead of a tree of barriers.
///
/// Column `jj`'s reflector changes only the columns right of it: those left of it are zero
/// from row `j` down (so `v^T p` is 0 there), and its own is overwritten. So the products
/// spread the workgroup over the `b - 1 - jj` columns right of it, in as many slices of rows
/// as fit (at most `slices`): lavapipe, a 256 x 256 QR's panels took 1.5 ms each with every
/// invocation on a fixed column of all `b`.
fn columns_body(batch: u64, m: u64, b: u64, wg: u64, slices: u64, subgroups: bool) -> String {
    let mb = m * b;
    let stride = 2 * mb + b;
    let half = wg / 2;
    let p = |i: &str, c: &str| format!("out0[base + ({i}) * {b}u + ({c})]");
    let v = |i: &str, c: &str| format!("out0[base + {mb}u + ({i}) * {b}u + ({c})]");
    format!(
        "var<workgroup> range: vec2<u32>;\nvar<workgroup> first: u32;\n\
         var<workgroup> red_max: array<f32, {wg}>;\nvar<workgroup> red_sum: array<f32, {wg}>;\n\
         var<workgroup> part: array<f32, {wg}>;\nvar<workgroup> wcol: array<f32, {b}>;\n\n{header}    \
         let mat = wid.y * nwg.x + wid.x;\n    if (mat >= {batch}u) {{ return; }}\n    \
         let base = mat * {stride}u;\n    \
         if (lid == 0u) {{ range = vec2<u32>(in0[0], in0[1]); first = u32(max(in1[0], 0)); }}\n    \
         let r = workgroupUniformLoad(&range);\n    let j0 = workgroupUniformLoad(&first);\n    \
         for (var jj = r.x; jj < r.y; jj = jj + 1u) {{\n        \
         let j = j0 + jj;\n        \
         // The column's largest magnitude from row j down.\n        \
         var t = 0.0;\n        \
         for (var i = j + lid; i < {m}u; i = i + {wg}u) {{ t = max(t, abs({pij})); }}\n        \
         {max_tree}\
         let scale = select(1.0, top, top > 0.0);\n        \
         // The sum of squares below the diagonal, over that magnitude.\n        \
         var q = 0.0;\n        \
         for (var i = j + 1u + lid; i < {m}u; i = i + {wg}u) {{ let x = {pij} / scale; q = q + x * x; }}\n        \
         {sum_tree}\
         let xnorm = sqrt(total);\n        \
         var alpha = 0.0;\n        if (j < {m}u) {{ alpha = {pjj} / scale; }}\n        \
         let reflect = xnorm > 0.0;\n        \
         let norm = sqrt(alpha * alpha + xnorm * xnorm);\n        \
         let beta = select(norm, -norm, alpha >= 0.0);\n        \
         let tau = select(0.0, (beta - alpha) / select(1.0, beta, reflect), reflect);\n        \
         let inv = 1.0 / select(1.0, alpha - beta, reflect);\n        \
         // The reflector: 1 on the diagonal, x * inv below (rows above j stay zero).\n        \
         for (var i = j + lid; i < {m}u; i = i + {wg}u) {{\n            \
         var vi = 0.0;\n            \
         if (reflect) {{ vi = select({pij} / scale * inv, 1.0, i == j); }}\n            \
         {vij} = vi;\n        }}\n        \
         storageBarrier();\n        \
         // w = tau v^T p for the columns right of jj, then p -= v w.\n        \
         let nc = {b}u - 1u - jj;\n        \
         if (nc >= {wg}u) {{\n            \
         // Whole columns per invocation: no exchange.\n            \
         for (var c = jj + 1u + lid; c < {b}u; c = c + {wg}u) {{\n                \
         var acc = 0.0;\n                \
         for (var i = j; i < {m}u; i = i + 1u) {{ acc = acc + {vij} * {pic}; }}\n                \
         let wc = tau * acc;\n                \
         for (var i = j; i < {m}u; i = i + 1u) {{ {pic} = {pic} - {vij} * wc; }}\n            }}\n        \
         }} else {{\n        \
         // A column per invocation over a slice of the rows.\n        \
         let ncd = max(nc, 1u);\n        \
         let ns = min({wg}u / ncd, {slices}u);\n        \
         let c = jj + 1u + lid % ncd;\n        let sl = lid / ncd;\n        \
         let busy = nc > 0u && sl < ns;\n        \
         var acc = 0.0;\n        \
         if (busy) {{\n            \
         for (var i = j + sl; i < {m}u; i = i + ns) {{ acc = acc + {vij} * {pic}; }}\n        }}\n        \
         part[lid] = acc;\n        workgroupBarrier();\n        \
         if (lid < nc) {{\n            var w = 0.0;\n            \
         for (var k = 0u; k < ns; k = k + 1u) {{ w = w + part[k * nc + lid]; }}\n            \
         wcol[jj + 1u + lid] = tau * w;\n        }}\n        workgroupBarrier();\n        \
         if (busy) {{\n            let wc = wcol[c];\n            \
         for (var i = j + sl; i < {m}u; i = i + ns) {{ {pic} = {pic} - {vij} * wc; }}\n        }}\n        \
         }}\n        \
         storageBarrier();\n        \
         // The column itself: beta on the diagonal, zeros below.\n        \
         if (reflect) {{\n            \
         for (var i = j + lid; i < {m}u; i = i + {wg}u) {{ {pij} = select(0.0, beta * scale, i == j); }}\n        }}\n        \
         if (lid == 0u) {{ out0[base + {two}u + jj] = tau; }}\n        \
         storageBarrier();\n    }}\n}}\n",
        header = if subgroups {
            kernel::subgroup_entry_header(wg as u32)
        } else {
            kernel::entry_header(wg as u32)
        },
        max_tree = reduction("red_max", "t", "top", "max", "max({a}, {b})", subgroups, half),
        sum_tree = reduction("red_sum", "q", "total", "add", "{a} + {b}", subgroups, half),
        pij = p("i", "jj"),
        pjj = p("j", "jj"),
        pic = p("i", "c"),
        vij = v("i", "jj"),
        two = 2 * mb,
    )
}

/// WGSL reducing each invocation's `value` over the workgroup into `result` (the same in every
/// invocation) through workgroup array `array`: `op` names the subgroup operation (`max`:
/// `subgroupMax`, else `subgroupAdd`), `combine` is the pairwise form with `{a}` and `{b}`.
fn reduction(
    array: &str,
    value: &str,
    result: &str,
    op: &str,
    combine: &str,
    subgroups: bool,
    half: u64,
) -> String {
    let pair = |a: &str, b: &str| combine.replace("{a}", a).replace("{b}", b);
    if subgroups {
        let sub = if op == "max" {
            "subgroupMax"
        } else {
            "subgroupAdd"
        };
        format!(
            "let {value}_s = {sub}({value});\n        \
             if (sgl == 0u) {{ {array}[sgid] = {value}_s; }}\n        workgroupBarrier();\n        \
             var {result} = {array}[0];\n        \
             for (var k = 1u; k < nsg; k = k + 1u) {{ {result} = {step}; }}\n        ",
            step = pair(result, &format!("{array}[k]"))
        )
    } else {
        format!(
            "{array}[lid] = {value};\n        workgroupBarrier();\n        \
             for (var s = {half}u; s > 0u; s = s >> 1u) {{\n            \
             if (lid < s) {{ {array}[lid] = {step}; }}\n            workgroupBarrier();\n        }}\n        \
             let {result} = {array}[0];\n        ",
            step = pair(&format!("{array}[lid]"), &format!("{array}[lid + s]"))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Capabilities;

    /// The columns kernel validates with its reductions through subgroups and through trees
    /// of barriers (adapters without subgroups), for GPU and CPU workgroups.
    #[test]
    fn the_columns_kernel_validates_with_and_without_subgroups() {
        for subgroup in [false, true] {
            for (m, b, wg) in [(256, 32, 256), (300, 32, 64), (70, 7, 64), (5, 1, 256)] {
                let slices = most_slices(m, b, wg);
                let wgsl = format!(
                    "var<private> {}: u32;\n@group(0) @binding(0) var<storage, read> in0: array<u32>;\n\
                     @group(0) @binding(1) var<storage, read> in1: array<i32>;\n\
                     @group(0) @binding(2) var<storage, read_write> out0: array<f32>;\n{}",
                    kernel::RUNTIME_ZERO,
                    columns_body(2, m, b, wg, slices, subgroup)
                );
                let caps = Capabilities {
                    subgroup,
                    ..Capabilities::default()
                };
                if let Err(e) = kernel::validate("householder", &wgsl, caps) {
                    panic!("subgroup {subgroup}, {m}x{b}, wg {wg}: {e}");
                }
            }
        }
    }
}
