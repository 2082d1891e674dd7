//! `cholesky` and `triangular_solve` on f32/f64 as sweeps of launches that update one buffer
//! in place, so that no invocation loops more than O(n) times (CPU Vulkan implementations such
//! as llvmpipe silently leave loops after 65535 iterations per invocation; GPUs have
//! watchdogs):
//!
//! * `cholesky`, tiled ([`tiled`]): left-looking by blocks of 64 columns, three launches per
//!   block; up to 64 columns on CPU adapters with subgroups, one launch ([`one_subgroup`]).
//!   Its fallback (and `WGPU_HLO_CHOLESKY=workgroup|columns`) is the column kernels:
//!   left-looking, one launch per column `j`, one thread per (matrix, row `i >= j`)
//!   computing `L(i, j)` from the columns before `j` (each thread also forms the pivot `L(j, j)`
//!   itself, so no launch waits on another's pivot): `j` iterations per thread. A last launch
//!   turns every matrix with a pivot that is not positive into NaNs, as XLA does.
//! * `triangular_solve`: one thread per right-hand-side vector, solving a block of rows per
//!   launch (the first rows of a long system take many per launch, later ones fewer): at most
//!   [`ROW_BLOCK_ITERATIONS`] iterations per thread and launch.
//!
//! Only the triangle of `a` the op names is read. Each kernel's comment states its bound on
//! loop iterations per invocation.

use super::{temp, Launch, Plan, PARAMS};
use crate::codegen::dtype;
use crate::codegen::expr::Binding;
use crate::codegen::kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::texture_reads;
use crate::error::{Error, Result};
use crate::ir::attr::Transpose;
use crate::ir::{ElementType, Function, Op, Operation, TensorType, Type};

/// The most loop iterations any invocation of these kernels may run (llvmpipe stops at 65535).
pub const MAX_ITERATIONS: u64 = 16_384;

/// Loop iterations a triangular-solve thread may spend on one launch's block of rows.
pub const ROW_BLOCK_ITERATIONS: u64 = 8_192;

/// Consecutive ranges `[a, b)` of `0..len` such that a launch over each keeps its busiest
/// thread within `bound` loop iterations: `overhead` per launch plus `cost(i)` per step `i`.
/// Returns them and the most any launch spends, or `None` when one step alone passes `bound`.
pub(super) fn ranges_within(
    len: u64,
    overhead: u64,
    cost: impl Fn(u64) -> u64,
    bound: u64,
) -> Option<(Vec<(u64, u64)>, u64)> {
    let mut ranges = Vec::new();
    let mut most = 0;
    let mut a = 0;
    while a < len {
        let (mut b, mut spent) = (a, overhead);
        while b < len && spent + cost(b) <= bound {
            spent += cost(b);
            b += 1;
        }
        if b == a {
            return None;
        }
        most = most.max(spent);
        ranges.push((a, b));
        a = b;
    }
    Some((ranges, most))
}

/// The plan of a solve by ranges of rows (parameters: first and end): `last` (writing the
/// result) alone for one range, else `rows` (writing a temporary of type `state`) for the
/// first and updating it in place for the others, and `last` updating it for the final one.
fn row_range_plan(
    rows: impl FnOnce() -> Result<kernel::Kernel>,
    last: kernel::Kernel,
    ranges: &[(u64, u64)],
    state: TensorType,
) -> Result<Plan> {
    let range = |&(s, e): &(u64, u64)| vec![s as u32, e as u32];
    let Some((first, rest)) = ranges.split_first() else {
        return Err(Error::internal("a solve without rows"));
    };
    if rest.is_empty() {
        return Ok(Plan {
            kernels: vec![last],
            temps: Vec::new(),
            launches: vec![Launch::new(0, range(first))],
        });
    }
    let mut launches = vec![Launch::new(0, range(first))];
    for (b, r) in rest.iter().enumerate() {
        let kernel = if b + 1 == rest.len() { 1 } else { 0 };
        launches.push(Launch::updating(kernel, range(r), 0));
    }
    Ok(Plan {
        kernels: vec![rows()?, last],
        temps: vec![state],
        launches,
    })
}

fn real_tensor(f: &Function, v: crate::ir::ValueId, what: &str) -> Result<TensorType> {
    match f.ty(v) {
        Type::Tensor(t)
            if t.is_static() && matches!(t.dtype, ElementType::F32 | ElementType::F64) =>
        {
            Ok(t.clone())
        }
        other => Err(Error::unimplemented(format!(
            "{what} on {other} (f32 and f64 are supported)"
        ))),
    }
}

fn params(len: i64) -> Binding {
    Binding {
        value: PARAMS,
        ty: TensorType::new(vec![len], ElementType::U32),
    }
}

/// The WGSL scalar type and a NaN of `t`.
fn scalar(t: ElementType) -> (&'static str, String) {
    if t == ElementType::F64 {
        ("f64", dtype::f64_literal(f64::NAN))
    } else {
        ("f32", dtype::f32_literal(f32::NAN))
    }
}

fn too_long(what: &str, iterations: u64) -> Error {
    Error::resource_exhausted(format!(
        "{what} would loop {iterations} times in one invocation (at most {MAX_ITERATIONS})"
    ))
}

/// The plan of `cholesky`: zero the result, one launch per column, then the NaN check.
pub fn cholesky(name: &str, f: &Function, op: &Operation, target: Target) -> Result<Plan> {
    let Op::Cholesky { lower } = op.op else {
        return Err(Error::internal("cholesky emitter on another op"));
    };
    let t = real_tensor(f, op.operands[0], "cholesky")?;
    let n = *t.dims().last().unwrap_or(&1) as u64;
    if t.rank() < 2 || t.dims()[t.rank() - 2] as u64 != n {
        return Err(Error::invalid("cholesky needs square matrices"));
    }
    let batch = t.num_elements() as u64 / (n * n).max(1);
    // Threads of the NaN check loop over the diagonal, then over their row.
    if 2 * n > MAX_ITERATIONS {
        return Err(too_long(&format!("cholesky of {n}x{n} matrices"), 2 * n));
    }
    let (w, nan) = scalar(t.dtype);
    let ty = t.dtype.mlir_name();
    // L(i, j) lives at out0[base + at(i, j)]; a is read from the triangle `lower` names.
    let at = |m: &str, i: &str, j: &str| {
        if lower {
            format!("{m}[base + ({i}) * {n}u + ({j})]")
        } else {
            format!("{m}[base + ({j}) * {n}u + ({i})]")
        }
    };
    let l = |i: &str, j: &str| at("out0", i, j);
    let a = |i: &str, j: &str| at("in0", i, j);
    let side = if lower { "lower" } else { "upper" };
    let what = format!("cholesky ({side}) of {batch} matrices {n}x{n} {ty}");
    let factor = Binding {
        value: temp(0),
        ty: t.clone(),
    };
    let result = Binding {
        value: op.results[0],
        ty: t.clone(),
    };
    let input = Binding {
        value: op.operands[0],
        ty: t.clone(),
    };
    let zero = kernel::threaded(
        &format!("{name}_zero"),
        &format!(
            "kernel {name}_zero: zeroes the factor of a {what}\nloop iterations per invocation: 0\nfuses: {}",
            op.name()
        ),
        Vec::new(),
        vec![factor.clone()],
        &Default::default(),
        "",
        &format!("    out0[tid] = {w}(0);\n"),
        batch * n * n,
        0,
        target,
    )?;
    let column = kernel::threaded(
        &format!("{name}_column"),
        &format!(
            "kernel {name}_column: one column j (a parameter) of a {what}, one thread per row, left-looking\nloop iterations per invocation: at most {}\nfuses: {}",
            n.saturating_sub(1),
            op.name()
        ),
        vec![input, params(1)],
        vec![factor.clone()],
        &Default::default(),
        "",
        &format!(
            "    let i = tid % {n}u;\n    let j = in1[0];\n    if (i < j) {{ return; }}\n    let base = (tid / {n}u) * {nn}u;\n{}",
            element(w, &l, &a, "    "),
            nn = n * n,
        ),
        batch * n,
        n.saturating_sub(1),
        target,
    )?;
    let check = kernel::threaded(
        &format!("{name}_check"),
        &format!(
            "kernel {name}_check: NaNs for every matrix of a {what} with a pivot that is not positive (as LAPACK's potrf reports and XLA returns), one thread per row\nloop iterations per invocation: at most {}\nfuses: {}",
            2 * n,
            op.name()
        ),
        Vec::new(),
        vec![result.clone()],
        &Default::default(),
        "",
        &format!(
            "    let i = tid % {n}u;\n    let base = (tid / {n}u) * {nn}u;\n    var ok = true;\n    for (var d = 0u; d < {n}u; d = d + 1u) {{\n        ok = ok && {ldd} > {w}(0);\n    }}\n    if (!ok) {{\n        for (var j = 0u; j < {n}u; j = j + 1u) {{\n            {lij} = {nan};\n        }}\n    }}\n",
            nn = n * n,
            ldd = l("d", "d"),
            lij = l("i", "j"),
        ),
        batch * n,
        2 * n,
        target,
    )?;
    if let Some(plan) = one_subgroup(
        name,
        (&what, &op.name()),
        (n, batch, w, lower),
        &a,
        (input_binding(op, &t), result.clone()),
        target,
    )? {
        return Ok(plan);
    }
    if let Some(plan) = tiled(
        name,
        (&what, &op.name()),
        (n, batch, w, lower),
        &a,
        (input_binding(op, &t), result.clone()),
        t.dtype,
        target,
    )? {
        return Ok(plan);
    }
    // Columns in one workgroup per matrix when the matrices are small enough: a launch per
    // range of columns instead of one per column.
    if let Some((columns, ranges)) = columns_in_workgroups(
        name,
        (&what, &op.name()),
        (n, batch, w),
        (&l, &a),
        (factor.clone(), input_binding(op, &t)),
        target,
    )? {
        let mut launches = vec![Launch::new(0, Vec::new())];
        launches.extend(
            ranges
                .into_iter()
                .map(|(j0, j1)| Launch::updating(1, vec![j0 as u32, j1 as u32], 0)),
        );
        launches.push(Launch::updating(2, Vec::new(), 0));
        return Ok(Plan {
            kernels: vec![zero, columns, check],
            temps: vec![t],
            launches,
        });
    }
    let mut launches = vec![Launch::new(0, Vec::new())];
    launches.extend((0..n as u32).map(|j| Launch::updating(1, vec![j], 0)));
    launches.push(Launch::updating(2, Vec::new(), 0));
    Ok(Plan {
        kernels: vec![zero, column, check],
        temps: vec![t],
        launches,
    })
}

/// Matrices of at most [`TILED_BLOCK`] columns on CPU adapters with subgroups of a known size
/// (llvmpipe: 8): the whole factorization in one kernel, one subgroup per matrix, reading the
/// triangle of `a` the op names and writing the result (the other triangle zero, or NaNs
/// where a pivot is not positive). It is the tiled plan's diagonal kernel ([`shared_diag`]:
/// each lane's rows in private arrays, the pivot row's words by `subgroupShuffle`; the same
/// operations in the same order, so the same bits where `n` is a multiple of the lanes, which
/// that kernel needs) without the state buffer, so without the
/// `init` and `finish` launches around it: lavapipe runs every launch for tens of
/// microseconds, and `jnp.linalg.cholesky` of 48 x 48 was five (JAX's symmetrization and
/// masking around `init`, `diag`, `finish`). `WGPU_HLO_CHOLESKY=tiled` keeps the tiled plan.
fn one_subgroup(
    name: &str,
    (what, op_name): (&str, &str),
    (n, batch, w, lower): (u64, u64, &str, bool),
    a: &dyn Fn(&str, &str) -> String,
    (input, result): (Binding, Binding),
    target: Target,
) -> Result<Option<Plan>> {
    let lanes = u64::from(target.caps.subgroup_size);
    let mode = std::env::var("WGPU_HLO_CHOLESKY").unwrap_or_default();
    if !(target.cpu_adapter && target.caps.subgroup && matches!(lanes, 4 | 8 | 16))
        || n == 0
        || n > TILED_BLOCK
        || matches!(mode.trim(), "tiled" | "columns" | "workgroup")
    {
        return Ok(None);
    }
    let slots = n.div_ceil(lanes);
    // Per column c: its slots from c's loaded, c steps over them, the pivot's; then the
    // stores, a row of n per slot.
    let iterations: u64 = (0..n)
        .map(|c| {
            let left = slots - c / lanes;
            1 + 2 * left + c * (1 + left)
        })
        .sum::<u64>()
        + slots * (n + 1);
    if iterations > MAX_ITERATIONS.min(target.max_invocation_iterations) {
        return Ok(None);
    }
    let (m, nn) = (n - 1, n * n);
    let out = if lower {
        format!("out0[base + i * {n}u + j]")
    } else {
        format!("out0[base + j * {n}u + i]")
    };
    let body = format!(
        "{entry}    let g = wid.y * nwg.x + wid.x;
    if (g >= {batch}u) {{ return; }}
    let base = g * {nn}u;
    var x: array<array<{w}, {n}>, {slots}>;
    var acc: array<{w}, {slots}>;
    var bad = false;
    for (var c = 0u; c < {n}u; c = c + 1u) {{
        let ct = c / {lanes}u;
        let cl = c % {lanes}u;
        for (var t = ct; t < {slots}u; t = t + 1u) {{
            let i = min(t * {lanes}u + sgl, {m}u);
            acc[t] = {aic};
        }}
        for (var s = 0u; s < c; s = s + 1u) {{
            let coef = subgroupShuffle(x[ct][s], cl);
            for (var t = ct; t < {slots}u; t = t + 1u) {{
                acc[t] = acc[t] - x[t][s] * coef;
            }}
        }}
        // Every lane takes the pivot, so `bad` is the same in all of them.
        let pre = subgroupShuffle(acc[ct], cl);
        bad = bad || !(pre > {w}(0));
        let piv = sqrt(pre);
        for (var t = ct; t < {slots}u; t = t + 1u) {{
            var v = acc[t] / piv;
            if (t * {lanes}u + sgl == c) {{ v = piv; }}
            x[t][c] = v;
        }}
    }}
    for (var t = 0u; t < {slots}u; t = t + 1u) {{
        let i = t * {lanes}u + sgl;
        if (i < {n}u) {{
            for (var j = 0u; j < {n}u; j = j + 1u) {{
                var v = select({w}(0), x[t][j], j <= i);
                if (bad) {{ v = {nan}; }}
                {out} = v;
            }}
        }}
    }}
}}
",
        entry = kernel::subgroup_entry_header(lanes as u32),
        aic = a("i", "c"),
        nan = if w == "f64" {
            dtype::f64_literal(f64::NAN)
        } else {
            dtype::f32_literal(f32::NAN)
        },
    );
    let kname = format!("{name}_factor");
    let factor = kernel::in_workgroups(
        &kname,
        &format!(
            "kernel {kname}: a {what}, one subgroup per matrix, each lane's rows in private arrays, the pivot row's words from its lane by subgroupShuffle; NaNs for a matrix with a pivot that is not positive (as LAPACK's potrf reports and XLA returns)\nloop iterations per invocation: at most {iterations}\nfuses: {op_name}"
        ),
        vec![input],
        vec![result],
        &Default::default(),
        &body,
        batch,
        iterations,
        target,
    )?;
    Ok(Some(Plan {
        kernels: vec![factor],
        temps: Vec::new(),
        launches: vec![Launch::new(0, Vec::new())],
    }))
}

/// Columns per block of the tiled Cholesky ([`tiled`]), or fewer where workgroup memory
/// does not hold a block of them.
const TILED_BLOCK: u64 = 64;
/// Threads of the panel kernel (one row each) and of the update kernel (one column each).
const TILED_WG: u64 = 64;
/// Rows of a block column one workgroup of the update kernel updates.
const TILED_ROWS: u64 = 16;
/// Columns each lane of the CPU adapters' update kernel updates (one per thread elsewhere).
/// lavapipe, 1024 x 1024, the update launches' time (measured right-looking, the same loop):
/// 16 rows x 8 columns per lane 46-55 ms, 32 x 4 43-56, 64 x 4 43-47, 8 x 4 and 8 x 2 about
/// twice as long; 32 x 8 and 64 x 4 took 2 s to compile at the first call.
const UPDATE_COLUMNS_PER_LANE: u64 = 8;

/// The tiled Cholesky, left-looking by blocks: `init` copies the triangle of `a` the op
/// names into a state buffer per matrix (the factor, lower, row-major; its transpose, for
/// the columns factored so far; a word set where a pivot is not positive); per block of `b`
/// columns from `j0` (a parameter) `update` (but for the first), `diag`, and `panel` (but
/// for the last); `finish` writes the result (the other triangle zero) or NaNs for a matrix
/// with a pivot that is not positive (as LAPACK's potrf reports and XLA returns). About
/// n^3/3 flops in 3n/b launches, where the column kernels launch once per column (or per
/// range of columns in one workgroup) and reread every column before.
///
/// * `update` subtracts from the block column, from its diagonal down, the product of the
///   columns before it, `A(j0.., blk) -= L(j0.., ..j0) L(blk, ..j0)^T`, lower triangle only:
///   one thread per column, `TILED_ROWS` rows per workgroup, both factors read from the
///   transpose (the rows' words the same for every thread of the workgroup). Each element
///   is read and written once in all (right-looking, once per block before it: on lavapipe
///   the stores cost as much as the products, 1024 x 1024 47 ms against 29 left-looking).
/// * `diag` factors the diagonal block in workgroup memory, one workgroup per matrix, one
///   barrier per column: the trailing update of column `c` scales by the pivot not yet
///   rooted, `d[r][s] -= d[r][c] d[s][c] / d[c][c]`, so nothing waits for the column's own
///   scaling.
/// * `panel` solves the rows below it against it, one thread per row (the block in
///   workgroup memory), and stores the solved rows in the transpose as well, so that
///   neighbouring threads read neighbouring words there.
///
/// CPU adapters with subgroups of a known size (llvmpipe: 8) run every load lane by lane and
/// switch between a workgroup's invocations at every barrier, so there every kernel is one
/// subgroup per workgroup and loads each shared word once per subgroup (`subgroupBroadcast`
/// hands it to the other lanes): `update` 8 columns per lane, `panel` 4 rows per lane, their
/// solved words in private arrays (see [`shared_panel`]), `diag` left-looking with no
/// barrier (see [`shared_diag`]). lavapipe, ms per call of `jnp.linalg.cholesky` (this plan;
/// the column kernels in one workgroup and, from 256, JAX-level blocks of 64 on them):
/// 256 x 256 3.8-3.9 (11-14), 512 14 (29-44), 1024 55 (81-112), 2048 427 (472).
///
/// `None` (the column kernels) where the state does not fit one binding, where `n` passes
/// the loop bound, or with `WGPU_HLO_CHOLESKY=columns` or `workgroup`.
#[allow(clippy::too_many_arguments)]
fn tiled(
    name: &str,
    (what, op_name): (&str, &str),
    (n, batch, w, lower): (u64, u64, &str, bool),
    a: &dyn Fn(&str, &str) -> String,
    (input, result): (Binding, Binding),
    dtype: ElementType,
    target: Target,
) -> Result<Option<Plan>> {
    let mode = std::env::var("WGPU_HLO_CHOLESKY").unwrap_or_default();
    if matches!(mode.trim(), "columns" | "workgroup") || n < 2 {
        return Ok(None);
    }
    let bytes = if w == "f64" { 8 } else { 4 };
    let mut b = TILED_BLOCK.min(n);
    while b > 8 && b * b * bytes + 16 > target.max_workgroup_storage {
        b /= 2;
    }
    if b * b * bytes + 16 > target.max_workgroup_storage {
        return Ok(None);
    }
    let nn = n * n;
    // The factor, its transpose, then a word set where a pivot is not positive.
    let flag = 2 * nn;
    // Rows of a multiple of 4 columns (`lower`): `init` and `finish` move four elements a
    // thread as vec4s, and each matrix's state is padded to a multiple of 4 words for them.
    // llvmpipe loads and stores lane by lane, a vec4 for about a scalar's cost: 1000 x 1000,
    // init 3.3 and finish 3.7 ms with an element a thread.
    let quads = lower && n % 4 == 0 && !crate::fusion::switched_off("WGPU_HLO_CHOLESKY_QUADS");
    let stride = if quads { flag + 4 } else { flag + 1 };
    // The update kernel loops over every column before its block.
    if batch * stride * bytes > target.max_binding_size
        || n > MAX_ITERATIONS.min(target.max_invocation_iterations)
    {
        return Ok(None);
    }
    let state_ty = TensorType::new(vec![(batch * stride) as i64], dtype);
    let state = Binding {
        value: temp(0),
        ty: state_ty.clone(),
    };
    // L(i, j) and the transpose's P(k, i) = L(i, k) in the state (`base`: the matrix's offset
    // there).
    let l = |i: &str, j: &str| format!("out0[base + ({i}) * {n}u + ({j})]");
    let p = |k: &str, i: &str| format!("out0[base + {nn}u + ({k}) * {n}u + ({i})]");
    let init_scalar = || {
        kernel::threaded(
        &format!("{name}_init"),
        &format!(
            "kernel {name}_init: the state of a {what}: the triangle of the matrix it names, lower, the other triangle zero\nloop iterations per invocation: 0\nfuses: {op_name}"
        ),
        vec![input.clone()],
        vec![state.clone()],
        &Default::default(),
        "",
        &format!(
            "    let j = tid % {n}u;\n    let i = (tid / {n}u) % {n}u;\n    let mat = tid / {nn}u;\n    let base = mat * {stride}u;\n    let src = mat * {nn}u;\n    \
             if (i >= j) {{\n        {lij} = {aij};\n    }} else {{\n        {lij} = {w}(0);\n    }}\n    if (i == 0u && j == 0u) {{ out0[base + {flag}u] = {w}(0); }}\n",
            lij = l("i", "j"),
            aij = a("i", "j").replace("base +", "src +"),
        ),
        batch * nn,
        0,
        target,
    )
    };
    let mark = super::state_io_mark();
    // The element-wise masks of a quad of row `i` from column `j0`: the columns past `i`.
    let past = "vec4<u32>(j0) + vec4<u32>(0u, 1u, 2u, 3u) > vec4<u32>(i)";
    let (n4, nn4, stride4, flag4) = (n / 4, nn / 4, stride / 4, flag / 4);
    let init = if quads {
        kernel::in_workgroups_quads(
            &format!("{name}_init"),
            &format!(
                "kernel {name}_init: the state of a {what}: the lower triangle of the matrix, the other triangle zero, four elements a thread\nloop iterations per invocation: 0\nfuses: {op_name}"
            ),
            (vec![input.clone()], vec![state.clone()]),
            &Default::default(),
            &format!(
                "{}{}    if (tid >= {t}u) {{ return; }}\n    let q = tid % {nn4}u;\n    let mat = tid / {nn4}u;\n    let i = q / {n4}u;\n    let j0 = (q % {n4}u) * 4u;\n    let v = in0[{mark} mat * {nn4}u + q];\n    out0[mat * {stride4}u + q] = select(v, vec4<{w}>({w}(0)), {past});\n    if (q == 0u) {{ out0[mat * {stride4}u + {flag4}u] = vec4<{w}>({w}(0)); }}\n}}\n",
                kernel::entry_header(256),
                kernel::thread_index(256),
                t = batch * nn4,
            ),
            (&[0], &[0]),
            ((batch * nn4).div_ceil(256), 0),
            target,
        )?
    } else {
        init_scalar()?
    };
    let bb = b * b;
    // The entry point up to `j0` (the block's first column) and `bw` (its width); `sub`:
    // with the subgroup builtins; `block`: with the block `d` in workgroup memory.
    let header = |wg: u64, groups: u64, sub: bool, block: bool| {
        let entry = if sub {
            kernel::subgroup_entry_header(wg as u32)
        } else {
            kernel::entry_header(wg as u32)
        };
        let memory = if block {
            format!("var<workgroup> d: array<{w}, {bb}>;\n")
        } else {
            String::new()
        };
        format!(
            "{memory}var<workgroup> start: u32;\n\n{entry}    let g = wid.y * nwg.x + wid.x;
    if (g >= {groups}u) {{ return; }}
    if (lid == 0u) {{ start = in0[0]; }}
    let j0 = workgroupUniformLoad(&start);
    let bw = min({b}u, {n}u - j0);
"
        )
    };
    // A statement for each element of the block's lower triangle, spread over the threads:
    // `e` its index in `d`, `i`, `j` in the matrix.
    let block_elements = |wg: u64, stmt: &str| {
        format!(
            "    for (var e = lid; e < {bb}u; e = e + {wg}u) {{
        let r = e / {b}u;
        let c = e % {b}u;
        if (r < bw && c <= r) {{
            let i = j0 + r;
            let j = j0 + c;
            {stmt}
        }}
    }}
    workgroupBarrier();
"
        )
    };
    // On a CPU adapter with subgroups of a known size, a workgroup is one subgroup: each
    // lane loads one word of the rows' and broadcasts it, and takes several columns,
    // since every load there runs lane by lane.
    let lanes = u64::from(target.caps.subgroup_size);
    let shared = target.cpu_adapter
        && target.caps.subgroup
        && matches!(lanes, 4 | 8 | 16)
        && TILED_ROWS % lanes == 0
        && TILED_WG % lanes == 0
        && b % lanes == 0;
    let lij = l("i", "j");
    let dw = if target.cpu_adapter { 8 } else { 64 }.min(b.next_power_of_two());
    // The busiest diag thread: its share of the block twice, the columns' updates of its
    // rows, the pivots.
    // Per column c, thread t's rows r > c, each r - c steps.
    let updates = (0..dw)
        .map(|t| {
            (0..b)
                .map(|c| {
                    (t..b)
                        .step_by(dw as usize)
                        .filter(|&r| r > c)
                        .map(|r| 1 + r - c)
                        .sum::<u64>()
                })
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let diag_iterations =
        2 * bb.div_ceil(dw) + b + updates + 3 * b.div_ceil(dw) + b * b.div_ceil(dw);
    let diag_body = format!(
        "{}    let base = g * {stride}u;
{}    for (var c = 0u; c < bw; c = c + 1u) {{
        let dc = d[c * {b}u + c];
        for (var r = c + 1u + lid; r < bw; r = r + {dw}u) {{
            let f = d[r * {b}u + c] / dc;
            for (var s = c + 1u; s <= r; s = s + 1u) {{
                d[r * {b}u + s] = d[r * {b}u + s] - f * d[s * {b}u + c];
            }}
        }}
        workgroupBarrier();
    }}
    var piv: array<{w}, {pr}>;
    for (var r = lid; r < bw; r = r + {dw}u) {{
        let dr = d[r * {b}u + r];
        if (!(dr > {w}(0))) {{ out0[base + {flag}u] = {w}(1); }}
        piv[r / {dw}u] = sqrt(dr);
    }}
    workgroupBarrier();
    for (var r = lid; r < bw; r = r + {dw}u) {{
        d[r * {b}u + r] = piv[r / {dw}u];
    }}
    workgroupBarrier();
    for (var r = lid; r < bw; r = r + {dw}u) {{
        for (var c = 0u; c < r; c = c + 1u) {{
            d[r * {b}u + c] = d[r * {b}u + c] / d[c * {b}u + c];
        }}
    }}
    workgroupBarrier();
{}}}
",
        header(dw, batch, false, true),
        block_elements(dw, &format!("d[e] = {lij};")),
        block_elements(dw, &format!("{lij} = d[e];")),
        pr = b.div_ceil(dw),
    );
    let (diag_body, diag_iterations, how) = if shared {
        // Per column c: its slots from c's twice, c steps each over them.
        let slots = b / lanes;
        let iterations = (0..b)
            .map(|c| {
                let left = slots - c / lanes;
                1 + 2 * left + c * (1 + left)
            })
            .sum();
        (
            shared_diag(&header(lanes, batch, true, false), (n, b, w, lanes, stride, flag), &l),
            iterations,
            "one subgroup per matrix, each lane's rows in private arrays, the pivot row's words from its lane by subgroupShuffle",
        )
    } else {
        (
            diag_body,
            diag_iterations,
            "one workgroup per matrix, a barrier per column",
        )
    };
    // A kernel of one block step: the block's first column as its parameter, the state
    // updated in place.
    let step = |part: &str, does: &str, body: &str, groups: u64, iterations: u64| {
        let kname = format!("{name}_{part}");
        kernel::in_workgroups(
            &kname,
            &format!(
                "kernel {kname}: {does}, for the block of {b} columns from j0 (a parameter) of a {what}\nloop iterations per invocation: at most {iterations}\nfuses: {op_name}"
            ),
            vec![params(1)],
            vec![state.clone()],
            &Default::default(),
            body,
            groups,
            iterations,
            target,
        )
    };
    let diag = step(
        "diag",
        &format!("the diagonal block factored, {how}"),
        &diag_body,
        batch,
        diag_iterations,
    )?;
    let mut kernels = vec![init, diag];
    if n > b {
        let wg = TILED_WG;
        let r = TILED_ROWS;
        let (panel_wg, panel_rows) = if shared {
            (lanes, PANEL_ROWS_PER_LANE * lanes)
        } else {
            (wg, wg)
        };
        let chunks = (n - b).div_ceil(panel_rows);
        let panel_iterations = if shared {
            b * (b / lanes + 1)
        } else {
            bb.div_ceil(wg) + b * (b + 1) / 2
        };
        let panel_body = if shared {
            shared_panel(
                &header(panel_wg, batch * chunks, true, false),
                (n, b, w, lanes, chunks, stride),
                &l,
                &p,
            )
        } else {
            format!(
                "{}    let base = (g / {chunks}u) * {stride}u;
    let chunk = g % {chunks}u;
    if (j0 + bw + chunk * {wg}u >= {n}u) {{ return; }}
{}    let i = j0 + bw + chunk * {wg}u + lid;
    if (i >= {n}u) {{ return; }}
    for (var c = 0u; c < bw; c = c + 1u) {{
        let j = j0 + c;
        var t = {lij};
        for (var s = 0u; s < c; s = s + 1u) {{
            t = t - {pis} * d[c * {b}u + s];
        }}
        t = t / d[c * {b}u + c];
        {lij} = t;
        {pic} = t;
    }}
}}
",
                header(wg, batch * chunks, false, true),
                block_elements(wg, &format!("d[e] = {lij};")),
                pis = p("j0 + s", "i"),
                pic = p("j", "i"),
            )
        };
        let panel_how = if shared {
            "4 rows per lane of one subgroup, the block's words shared by subgroupBroadcast"
        } else {
            "one thread per row, the factored block in workgroup memory"
        };
        kernels.push(step(
            "panel",
            &format!("the rows below the diagonal block solved against it, {panel_how}, and stored in the transpose too"),
            &panel_body,
            batch * chunks,
            panel_iterations,
        )?);
        let row_blocks = (n - b).div_ceil(r);
        let strip = if shared {
            lanes * UPDATE_COLUMNS_PER_LANE
        } else {
            wg
        };
        let col_blocks = b.div_ceil(strip);
        let per_mat = row_blocks * col_blocks;
        let (threads, cols) = if shared {
            (lanes, UPDATE_COLUMNS_PER_LANE)
        } else {
            (wg, 1)
        };
        let m = n - 1;
        let mut accs = String::new();
        let mut inner = String::new();
        let mut stores = String::new();
        // On CPU adapters with quad rows the lanes load the columns' and the rows' words of
        // the transpose as vec4s (lane l the quads from column c0 + 4 l, a strip of lanes * 4
        // columns apart, and from row i0 + 4 l) and store quads of rows: a quarter of the
        // lane-by-lane loads.
        let quad_update = shared && quads && cols % 4 == 0 && r % 4 == 0 && r / 4 <= lanes;
        // The update reads only the transpose of the columns before the block, which no
        // invocation writes: from a copy on CPU adapters (`texture_reads::STATE_MARK`).
        let mark = texture_reads::STATE_MARK;
        let copied = texture_reads::state_copy_line(0, (nn, (batch - 1) * stride + 2 * nn));
        let pc = |k: &str, i: &str| format!("out0[{mark} base + {nn}u + ({k}) * {n}u + ({i})]");
        // With quads, four columns `k` of the block before a loop trip where the blocks are
        // whole fours, each accumulator summing them in one expression: the same sums in the
        // same order as a statement per `k`, but llvmpipe, which spills the 32 vec4
        // accumulators, loads and stores each once a trip (`dot_subgroup::chains`).
        let kstep =
            if quad_update && b % 4 == 0 && !crate::fusion::switched_off("WGPU_HLO_DOT_CHAINS") {
                4
            } else {
                1
            };
        if quad_update {
            let quad = |e: String| format!("out0[{mark} ({e}) >> 2u]");
            for c in 0..cols / 4 {
                accs.push_str(&format!(
                    "    let colq{c} = c0 + 4u * sgl + {}u;\n",
                    4 * lanes * c
                ));
            }
            for kk in 0..kstep {
                let k = if kk == 0 {
                    "k".to_string()
                } else {
                    format!("(k + {kk}u)")
                };
                for c in 0..cols / 4 {
                    inner.push_str(&format!(
                        "        let pq{kk}_{c} = {};\n",
                        quad(format!(
                            "base + {nn}u + {k} * {n}u + min(colq{c}, {}u)",
                            n - 4
                        ))
                    ));
                }
                // The rows' words: quad t of them from lane t (r / 4 <= lanes).
                inner.push_str(&format!(
                    "        let piq{kk} = {};\n",
                    quad(format!(
                        "base + {nn}u + {k} * {n}u + min(i0 + 4u * sgl, {}u)",
                        n - 4
                    ))
                ));
                for t in 0..r / 4 {
                    inner.push_str(&format!(
                        "        let xq{kk}_{t} = subgroupBroadcast(piq{kk}, {t}u);\n"
                    ));
                }
            }
            for q in 0..r {
                for kk in 0..kstep {
                    inner.push_str(&format!(
                        "        let x{kk}_{q} = xq{kk}_{}.{};\n",
                        q / 4,
                        ["x", "y", "z", "w"][(q % 4) as usize]
                    ));
                }
                for c in 0..cols / 4 {
                    accs.push_str(&format!("    var acc{q}_{c} = vec4<{w}>({w}(0));\n"));
                    let terms: Vec<String> = (0..kstep)
                        .map(|kk| format!("x{kk}_{q} * pq{kk}_{c}"))
                        .collect();
                    let e =
                        crate::codegen::dot_subgroup::chained_sum(&format!("acc{q}_{c}"), &terms);
                    inner.push_str(&format!("        acc{q}_{c} = {e};\n"));
                    // The quad's columns are in the block together (its width is a
                    // multiple of 4); those right of the diagonal keep their words.
                    stores.push_str(&format!(
                        "    if (i0 + {q}u < {n}u && colq{c} < j0 + bw) {{\n        \
                         let e = (base + (i0 + {q}u) * {n}u + colq{c}) >> 2u;\n        \
                         let cur = out0[e];\n        \
                         out0[e] = select(cur, cur - acc{q}_{c}, vec4<u32>(colq{c}) + vec4<u32>(0u, 1u, 2u, 3u) <= vec4<u32>(i0 + {q}u));\n    }}\n"
                    ));
                }
            }
        }
        for c in (0..cols).filter(|_| !quad_update) {
            let jc = if shared {
                format!("c0 + sgl + {}u", lanes * c)
            } else {
                "c0 + lid".to_string()
            };
            accs.push_str(&format!("    let col{c} = {jc};\n"));
            inner.push_str(&format!(
                "        let pj{c} = {};\n",
                pc("k", &format!("min(col{c}, {m}u)"))
            ));
        }
        if shared && !quad_update {
            for t in 0..r / lanes {
                inner.push_str(&format!(
                    "        let pi{t} = {};\n",
                    pc("k", &format!("min(i0 + sgl + {}u, {m}u)", lanes * t))
                ));
            }
        }
        for q in (0..r).filter(|_| !quad_update) {
            let pi = if shared {
                format!("subgroupBroadcast(pi{}, {}u)", q / lanes, q % lanes)
            } else {
                pc("k", &format!("min(i0 + {q}u, {m}u)"))
            };
            inner.push_str(&format!("        let x{q} = {pi};\n"));
            for c in 0..cols {
                accs.push_str(&format!("    var acc{q}_{c}: {w} = {w}(0);\n"));
                inner.push_str(&format!(
                    "        acc{q}_{c} = acc{q}_{c} + x{q} * pj{c};\n"
                ));
                let lq = l(&format!("i0 + {q}u"), &format!("col{c}"));
                stores.push_str(&format!(
                    "    if (i0 + {q}u < {n}u && col{c} < j0 + bw && col{c} <= i0 + {q}u) {{ {lq} = {lq} - acc{q}_{c}; }}\n"
                ));
            }
        }
        let update_body = format!(
            "{}    let base = (g / {per_mat}u) * {stride}u;
    let rb = (g % {per_mat}u) / {col_blocks}u;
    let cb = g % {col_blocks}u;
    let i0 = j0 + rb * {r}u;
    let c0 = j0 + cb * {strip}u;
    if (i0 >= {n}u || c0 >= i0 + {r}u) {{ return; }}
{accs}    for (var k = 0u; k < j0; k = k + {kstep}u) {{
{inner}    }}
{stores}}}
",
            header(threads, batch * per_mat, shared, false),
        );
        let does = format!(
            "the block column from its diagonal down loses the product of the columns before it (left-looking, lower triangle only), {r} rows by {strip} columns per workgroup{}",
            if quad_update { ", the columns' words loaded and stored as quads" } else { "" }
        );
        kernels.push(if quad_update {
            let kname = format!("{name}_update");
            kernel::in_workgroups_quads(
                &kname,
                &format!(
                    "kernel {kname}: {does}, for the block of {b} columns from j0 (a parameter) of a {what}\nloop iterations per invocation: at most {n}\nfuses: {op_name}\n{copied}"
                ),
                (vec![params(1)], vec![state.clone()]),
                &Default::default(),
                &update_body,
                (&[], &[0]),
                (batch * per_mat, n),
                target,
            )?
        } else {
            let kname = format!("{name}_update");
            kernel::in_workgroups(
                &kname,
                &format!(
                    "kernel {kname}: {does}, for the block of {b} columns from j0 (a parameter) of a {what}\nloop iterations per invocation: at most {n}\nfuses: {op_name}\n{copied}"
                ),
                vec![params(1)],
                vec![state.clone()],
                &Default::default(),
                &update_body,
                batch * per_mat,
                n,
                target,
            )?
        });
    }
    // The result: the factor, its transpose for `lower = false`, or NaNs.
    let out = if lower {
        format!("out0[src + i * {n}u + j]")
    } else {
        format!("out0[src + j * {n}u + i]")
    };
    let finish_scalar = || {
        kernel::threaded(
        &format!("{name}_finish"),
        &format!(
            "kernel {name}_finish: the result of a {what}, one thread per element: NaNs for a matrix with a pivot that is not positive (as LAPACK's potrf reports and XLA returns)\nloop iterations per invocation: 0\nfuses: {op_name}"
        ),
        vec![state.clone()],
        vec![result.clone()],
        &Default::default(),
        "",
        &format!(
            "    let j = tid % {n}u;\n    let i = (tid / {n}u) % {n}u;\n    let mat = tid / {nn}u;\n    let base = mat * {stride}u;\n    let src = mat * {nn}u;\n    \
             var v = in0[base + i * {n}u + j];\n    if (j > i) {{ v = {w}(0); }}\n    if (in0[base + {flag}u] != {w}(0)) {{ v = {nan}; }}\n    {out} = v;\n",
            nan = scalar(dtype).1,
        ),
        batch * nn,
        0,
        target,
    )
    };
    let finish = if quads {
        kernel::in_workgroups_quads(
            &format!("{name}_finish"),
            &format!(
                "kernel {name}_finish: the result of a {what}, four elements a thread: NaNs for a matrix with a pivot that is not positive (as LAPACK's potrf reports and XLA returns)\nloop iterations per invocation: 0\nfuses: {op_name}"
            ),
            (vec![state], vec![result]),
            &Default::default(),
            &format!(
                "{}{}    if (tid >= {t}u) {{ return; }}\n    let q = tid % {nn4}u;\n    let mat = tid / {nn4}u;\n    let i = q / {n4}u;\n    let j0 = (q % {n4}u) * 4u;\n    var v = select(in0[{mark} mat * {stride4}u + q], vec4<{w}>({w}(0)), {past});\n    if (in0[{mark} mat * {stride4}u + {flag4}u].x != {w}(0)) {{ v = vec4<{w}>({nan}); }}\n    out0[mat * {nn4}u + q] = v;\n}}\n",
                kernel::entry_header(256),
                kernel::thread_index(256),
                t = batch * nn4,
                nan = scalar(dtype).1,
            ),
            (&[0], &[0]),
            ((batch * nn4).div_ceil(256), 0),
            target,
        )?
    } else {
        finish_scalar()?
    };
    let finish_index = kernels.len();
    kernels.push(finish);
    let mut launches = vec![Launch::new(0, Vec::new())];
    let starts: Vec<u64> = (0..n).step_by(b as usize).collect();
    for (k, &j0) in starts.iter().enumerate() {
        if k > 0 {
            launches.push(Launch::updating(3, vec![j0 as u32], 0));
        }
        launches.push(Launch::updating(1, vec![j0 as u32], 0));
        if k + 1 < starts.len() {
            launches.push(Launch::updating(2, vec![j0 as u32], 0));
        }
    }
    launches.push(Launch::new(finish_index, Vec::new()));
    Ok(Some(Plan {
        kernels,
        temps: vec![state_ty],
        launches,
    }))
}

/// Rows each lane of the CPU adapters' panel kernel solves (module of [`tiled`]).
const PANEL_ROWS_PER_LANE: u64 = 4;

/// The panel kernel of [`tiled`] for CPU adapters with subgroups of `lanes`: one subgroup
/// per workgroup, [`PANEL_ROWS_PER_LANE`] rows per lane, each row's solved words in a private
/// array (indexed alike by every lane), the factored block's words read once per subgroup
/// (each lane loads one, `subgroupBroadcast` hands it to the others).
fn shared_panel(
    header: &str,
    (n, b, w, lanes, chunks, stride): (u64, u64, &str, u64, u64, u64),
    l: &dyn Fn(&str, &str) -> String,
    p: &dyn Fn(&str, &str) -> String,
) -> String {
    let rr = PANEL_ROWS_PER_LANE;
    let m = n - 1;
    let mut s = format!(
        "{header}    let base = (g / {chunks}u) * {stride}u;\n    let first = j0 + bw + (g % {chunks}u) * {}u;\n    if (first >= {n}u) {{ return; }}\n",
        rr * lanes
    );
    for t in 0..rr {
        s.push_str(&format!(
            "    let i{t} = first + {}u + sgl;\n    let r{t} = min(i{t}, {m}u);\n    var x{t}: array<{w}, {b}>;\n",
            t * lanes
        ));
    }
    s.push_str("    for (var c = 0u; c < bw; c = c + 1u) {\n        let j = j0 + c;\n");
    for t in 0..rr {
        s.push_str(&format!(
            "        var t{t} = {};\n",
            l(&format!("r{t}"), "j")
        ));
    }
    s.push_str(&format!(
        "        for (var s0 = 0u; s0 < c; s0 = s0 + {lanes}u) {{\n            let v = select({w}(0), {}, s0 + sgl < c);\n",
        l("j", "j0 + min(s0 + sgl, c)")
    ));
    for u in 0..lanes {
        s.push_str(&format!(
            "            let c{u} = subgroupBroadcast(v, {u}u);\n"
        ));
        for t in 0..rr {
            s.push_str(&format!(
                "            t{t} = t{t} - x{t}[s0 + {u}u] * c{u};\n"
            ));
        }
    }
    s.push_str(&format!("        }}\n        let piv = {};\n", l("j", "j")));
    for t in 0..rr {
        s.push_str(&format!(
            "        t{t} = t{t} / piv;\n        x{t}[c] = t{t};\n        if (i{t} < {n}u) {{\n            {} = t{t};\n            {} = t{t};\n        }}\n",
            l(&format!("i{t}"), "j"),
            p("j", &format!("i{t}")),
        ));
    }
    s.push_str("    }\n}\n");
    s
}

/// The diag kernel of [`tiled`] for CPU adapters with subgroups of `lanes`: one subgroup
/// per matrix, left-looking, lane `l` holding rows `l`, `l + lanes`, ... of the block in
/// private arrays; column `c` takes row `c`'s words from its lane (`subgroupShuffle`), so no
/// barrier is needed (lavapipe: each barrier switches between a workgroup's invocations).
fn shared_diag(
    header: &str,
    (n, b, w, lanes, stride, flag): (u64, u64, &str, u64, u64, u64),
    l: &dyn Fn(&str, &str) -> String,
) -> String {
    let slots = b / lanes;
    let m = n - 1;
    format!(
        "{header}    let base = g * {stride}u;
    var x: array<array<{w}, {b}>, {slots}>;
    var acc: array<{w}, {slots}>;
    for (var c = 0u; c < bw; c = c + 1u) {{
        let ct = c / {lanes}u;
        let cl = c % {lanes}u;
        let j = j0 + c;
        for (var t = ct; t < {slots}u; t = t + 1u) {{
            let i = min(j0 + t * {lanes}u + sgl, {m}u);
            acc[t] = {lij};
        }}
        for (var s = 0u; s < c; s = s + 1u) {{
            let coef = subgroupShuffle(x[ct][s], cl);
            for (var t = ct; t < {slots}u; t = t + 1u) {{
                acc[t] = acc[t] - x[t][s] * coef;
            }}
        }}
        let pre = subgroupShuffle(acc[ct], cl);
        if (sgl == cl && !(pre > {w}(0))) {{ out0[base + {flag}u] = {w}(1); }}
        let piv = sqrt(pre);
        for (var t = ct; t < {slots}u; t = t + 1u) {{
            let r = t * {lanes}u + sgl;
            var v = acc[t] / piv;
            if (r == c) {{ v = piv; }}
            x[t][c] = v;
            if (r < bw && r >= c) {{
                let i = j0 + r;
                {lij} = v;
            }}
        }}
    }}
}}
",
        lij = l("i", "j"),
    )
}

/// The statements computing `L(i, j)` (WGSL `i`, `j`, with `base` the matrix's offset) from
/// the columns before `j`, left-looking; each thread forms the pivot `L(j, j)` itself in the
/// same loop, so no thread waits on another's pivot.
fn element(
    w: &str,
    l: &dyn Fn(&str, &str) -> String,
    a: &dyn Fn(&str, &str) -> String,
    indent: &str,
) -> String {
    let lines = [
        format!("var s: {w} = {};", a("j", "j")),
        format!("var t: {w} = {};", a("i", "j")),
        "for (var k = 0u; k < j; k = k + 1u) {".to_string(),
        format!("    let ljk = {};", l("j", "k")),
        "    s = s - ljk * ljk;".to_string(),
        format!("    t = t - {} * ljk;", l("i", "k")),
        "}".to_string(),
        "let d = sqrt(s);".to_string(),
        "if (i == j) {".to_string(),
        format!("    {} = d;", l("j", "j")),
        "} else {".to_string(),
        format!("    {} = t / d;", l("i", "j")),
        "}".to_string(),
    ];
    lines.iter().map(|x| format!("{indent}{x}\n")).collect()
}

fn input_binding(op: &Operation, t: &TensorType) -> Binding {
    Binding {
        value: op.operands[0],
        ty: t.clone(),
    }
}

/// Largest order the one-workgroup Cholesky takes; larger matrices keep a launch per column
/// (a single workgroup would leave a GPU mostly idle).
pub const WORKGROUP_CHOLESKY_MAX: u64 = 512;

/// The left-looking Cholesky with one workgroup per matrix: each launch factors the columns
/// `[j0, j1)` (parameters), its threads striding over the rows of a column, a storage
/// barrier between columns (the next column reads this one). The ranges keep every thread
/// within the loop bound. `None` (keep a launch per column) past
/// [`WORKGROUP_CHOLESKY_MAX`], when one column alone would pass the bound, or with
/// `WGPU_HLO_CHOLESKY=columns`.
#[allow(clippy::type_complexity)]
fn columns_in_workgroups(
    name: &str,
    (what, op_name): (&str, &str),
    (n, batch, w): (u64, u64, &str),
    (l, a): (&dyn Fn(&str, &str) -> String, &dyn Fn(&str, &str) -> String),
    (factor, input): (Binding, Binding),
    target: Target,
) -> Result<Option<(kernel::Kernel, Vec<(u64, u64)>)>> {
    let off = std::env::var("WGPU_HLO_CHOLESKY").is_ok_and(|v| v.trim() == "columns");
    if off || n > WORKGROUP_CHOLESKY_MAX || n == 0 {
        return Ok(None);
    }
    // CPU adapters switch between a workgroup's invocations at every barrier: fewer switch
    // faster.
    let wg = if target.cpu_adapter { 64 } else { 256 }.min(n.next_power_of_two());
    let bound = MAX_ITERATIONS.min(target.max_invocation_iterations);
    // The busiest thread's loop iterations for column j: its rows, each j long, plus the
    // column loop's own.
    let cost = |j: u64| (n - j).div_ceil(wg) * (j + 1) + 1;
    let Some((ranges, most)) = ranges_within(n, 0, cost, bound) else {
        return Ok(None);
    };
    let nn = n * n;
    let body = format!(
        "var<workgroup> range: vec2<u32>;\n\n@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n    \
         {zero} = nwg.z >> 16u;\n    let mat = wid.y * nwg.x + wid.x;\n    if (mat >= {batch}u) {{ return; }}\n    let base = mat * {nn}u;\n    \
         if (lid == 0u) {{ range = vec2<u32>(in1[0], in1[1]); }}\n    let r = workgroupUniformLoad(&range);\n    \
         for (var j = r.x; j < r.y; j = j + 1u) {{\n        \
         for (var i = j + lid; i < {n}u; i = i + {wg}u) {{\n{}        }}\n        \
         storageBarrier();\n    }}\n}}\n",
        element(w, l, a, "            "),
        zero = kernel::RUNTIME_ZERO,
    );
    let kname = format!("{name}_columns");
    let comment = format!(
        "kernel {kname}: columns j0..j1 (parameters) of a {what}, one workgroup per matrix, left-looking, a storage barrier between columns\nloop iterations per invocation: at most {most}\nfuses: {op_name}"
    );
    Ok(Some((
        kernel::in_workgroups(
            &kname,
            &comment,
            vec![input, params(2)],
            vec![factor],
            &Default::default(),
            &body,
            batch,
            most,
            target,
        )?,
        ranges,
    )))
}

/// Blocks of rows `[start, end)` (in solving order) such that a thread's iterations over a
/// block, `sum(i + 1)` over its rows `i`, stay within [`ROW_BLOCK_ITERATIONS`] (one row at
/// least).
fn row_blocks(k: u64) -> Vec<(u64, u64)> {
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < k {
        let mut end = start + 1;
        let mut cost = start + 1;
        while end < k && cost + end < ROW_BLOCK_ITERATIONS {
            cost += end + 1;
            end += 1;
        }
        blocks.push((start, end));
        start = end;
    }
    blocks
}

/// Whether a triangular solve of `k` rows and `vectors` right-hand sides (over the batch) takes
/// a workgroup per vector rather than a thread. CPU adapters run a workgroup on one core and
/// switch between its invocations at every barrier, so only a few long vectors gain there
/// (lavapipe, 1000 rows: 1 vector 15 -> 6-7 ms, 2 matrices of 1: 15-18 -> 6, 4 matrices of
/// 1: 21 -> 12, 2 vectors of one matrix 14-15 -> 11-12, 3: 16 either way, 4: 17-18 -> 21-23;
/// 1 vector of 128 rows 0.37 either way, 512: 3.8 -> 1.8, 2000: 52 -> 21). A GPU leaves
/// most of its lanes idle with a thread per vector (not measured yet).
fn workgroup_solve(target: Target, k: u64, vectors: u64) -> bool {
    if target.cpu_adapter {
        k >= 128 && vectors <= 3
    } else {
        k >= 64 && vectors <= 1024
    }
}

/// The shape of a triangular solve: `k` rows, `vectors` right-hand sides over the batch, the
/// WGSL scalar `w`, whether S is lower triangular (rows solved in ascending order) and has a
/// unit diagonal.
struct Solve<'a> {
    k: u64,
    vectors: u64,
    w: &'a str,
    s_lower: bool,
    unit: bool,
}

/// WGSL defining `mat`, `col`, `abase` and `bbase` from the vector `tid`, and the words for
/// the kernels' comments.
struct Preamble {
    mats: String,
    what: String,
}

/// A triangular solve with one workgroup per right-hand-side vector, right-looking: the rows
/// still to solve live in workgroup memory; each row's solution is divided out by every
/// thread, which then subtract its multiples from their strided later rows, a barrier
/// between rows. Each launch solves rows `[r0, r1)` (parameters, in solving order; it loads
/// the rows left from the right-hand side in the first launch, else from the output, and
/// stores those it leaves), and the ranges keep every thread within the loop bound. Two
/// kernels, writing a temporary and the result. `None` (a thread per vector) where
/// [`workgroup_solve`] says so, where the rows (in f64 on adapters with f64) do not fit in
/// workgroup memory, or with `WGPU_HLO_TRIANGULAR_SOLVE=threads`.
#[allow(clippy::type_complexity)]
fn vectors_in_workgroups(
    name: &str,
    op_name: &str,
    s: Solve,
    (a_el, el): (&dyn Fn(&str, &str) -> String, &dyn Fn(&str) -> String),
    (inputs, result): (&[Binding], Binding),
    pre: Preamble,
    target: Target,
) -> Result<Option<(kernel::Kernel, kernel::Kernel, Vec<(u64, u64)>)>> {
    let off = std::env::var("WGPU_HLO_TRIANGULAR_SOLVE").is_ok_and(|v| v.trim() == "threads");
    let k = s.k;
    // The rows live in f64 where the adapter has f64, as the thread kernel's sums (closer to
    // the exact solution than f32 sums: 2.4e-6 of the largest value against cpu at 5000 rows
    // in f32 rows, 2.7e-7 in f64); where they do not fit in workgroup memory the thread
    // kernel serves.
    let acc = if target.caps.f64 { "f64" } else { s.w };
    let bytes = if acc == "f64" { 8 * k } else { 4 * k };
    if off || !workgroup_solve(target, k, s.vectors) || bytes + 8 > target.max_workgroup_storage {
        return Ok(None);
    }
    if let Some(found) = vectors_in_subgroups(
        name,
        op_name,
        &s,
        (a_el, el),
        (inputs, &result),
        &pre,
        target,
    )? {
        return Ok(Some(found));
    }
    // CPU adapters switch between a workgroup's invocations at every barrier: fewer switch
    // faster.
    let wg = if target.cpu_adapter { 64 } else { 256 }.min(k.next_power_of_two());
    let bound = MAX_ITERATIONS.min(target.max_invocation_iterations);
    // The busiest thread's loop iterations for row ii (in solving order): its later rows,
    // plus the row loop's own; each launch also loads and stores the rows left.
    let copy = 2 * k.div_ceil(wg);
    let cost = |ii: u64| (k - 1 - ii).div_ceil(wg) + 1;
    let Some((ranges, most)) = ranges_within(k, copy, cost, bound) else {
        return Ok(None);
    };
    let w = s.w;
    let t = solve_terms(s.k, &s, acc, (a_el, el));
    // The rows still to solve live in workgroup memory in `acc`; a launch loads them (from
    // the right-hand side in the first, else from the output), and stores those it leaves.
    let body = t.fill(&format!(
        "var<workgroup> range: vec2<u32>;\nvar<workgroup> rest: array<{acc}, {k}>;\n\n@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n    \
         {zero} = nwg.z >> 16u;\n    let tid = wid.y * nwg.x + wid.x;\n    if (tid >= {vectors}u) {{ return; }}\n    {mats}\n    \
         if (lid == 0u) {{ range = vec2<u32>(in2[0], in2[1]); }}\n    let r = workgroupUniformLoad(&range);\n    \
         for (var q = r.x + lid; q < {k}u; q = q + {wg}u) {{\n        let p = $RQ;\n        \
         if (r.x == 0u) {{ rest[p] = {acc}(in1[bbase + $ELP]); }} else {{ rest[p] = {acc}($XP); }}\n    }}\n    workgroupBarrier();\n    \
         for (var ii = r.x; ii < r.y; ii = ii + 1u) {{\n        let i = $RI;\n        let xi = rest[i] / $DIAG;\n        if (lid == 0u) {{ $XI = {w}(xi); }}\n        \
         for (var q = ii + 1u + lid; q < {k}u; q = q + {wg}u) {{\n            let p = $RQ;\n            rest[p] = rest[p] - {acc}($AIP) * xi;\n        }}\n        \
         workgroupBarrier();\n    }}\n    \
         for (var q = r.y + lid; q < {k}u; q = q + {wg}u) {{\n        let p = $RQ;\n        $XP = {w}(rest[p]);\n    }}\n}}\n",
        zero = kernel::RUNTIME_ZERO,
        vectors = s.vectors,
        mats = pre.mats,
    ));
    let (rows, last) = solve_kernel_pair(
        (name, op_name, &pre.what),
        "one workgroup per right-hand side, right-looking, a barrier between rows",
        &body,
        (inputs, &result),
        (s.vectors, most),
        target,
    )?;
    Ok(Some((rows, last, ranges)))
}

/// The WGSL terms of the per-vector solve kernels ([`vectors_in_workgroups`],
/// [`vectors_in_subgroups`]): rows `ii` and `q` in solving order as matrix rows, the
/// solution's elements `i` and `p`, the right-hand side's offset of `p`, `S(p, i)`, and the
/// diagonal `S(i, i)` in `acc`.
struct SolveTerms {
    ri: String,
    rq: String,
    xi: String,
    xp: String,
    elp: String,
    aip: String,
    diag: String,
}

/// A solve's matrix element `S(i, j)` and the right-hand side's offset of element `v`.
type SolveElements<'a> = (&'a dyn Fn(&str, &str) -> String, &'a dyn Fn(&str) -> String);

impl SolveTerms {
    /// `text` with `$RI`, `$RQ`, `$XI`, `$XP`, `$ELP`, `$AIP` and `$DIAG` filled in.
    fn fill(&self, text: &str) -> String {
        [
            ("$RI", &self.ri),
            ("$RQ", &self.rq),
            ("$XI", &self.xi),
            ("$XP", &self.xp),
            ("$ELP", &self.elp),
            ("$AIP", &self.aip),
            ("$DIAG", &self.diag),
        ]
        .iter()
        .fold(text.to_string(), |t, (k, v)| t.replace(k, v))
    }
}

fn solve_terms(k: u64, s: &Solve, acc: &str, (a_el, el): SolveElements) -> SolveTerms {
    let row = |v: &str| {
        if s.s_lower {
            v.to_string()
        } else {
            format!("({k}u - 1u - {v})")
        }
    };
    let x = |v: &str| format!("out0[bbase + {}]", el(v));
    SolveTerms {
        ri: row("ii"),
        rq: row("q"),
        xi: x("i"),
        xp: x("p"),
        elp: el("p"),
        aip: a_el("p", "i"),
        diag: if s.unit {
            format!("{acc}(1)")
        } else {
            format!("{acc}({})", a_el("i", "i"))
        },
    }
}

/// The two kernels of a per-vector solve by ranges of rows: `_rows` writing a temporary of
/// the result's type, and the last, writing the result.
fn solve_kernel_pair(
    (name, op_name, what): (&str, &str, &str),
    how: &str,
    body: &str,
    (inputs, result): (&[Binding], &Binding),
    (vectors, most): (u64, u64),
    target: Target,
) -> Result<(kernel::Kernel, kernel::Kernel)> {
    let kernel_for = |suffix: &str, out: Binding| -> Result<kernel::Kernel> {
        let kname = format!("{name}{suffix}");
        let comment = format!(
            "kernel {kname}: rows r0..r1 (parameters, in solving order) of {what}, {how}\nloop iterations per invocation: at most {most}\nfuses: {op_name}"
        );
        kernel::in_workgroups(
            &kname,
            &comment,
            inputs.to_vec(),
            vec![out],
            &Default::default(),
            body,
            vectors,
            most,
            target,
        )
    };
    let rows = kernel_for(
        "_rows",
        Binding {
            value: temp(0),
            ty: result.ty.clone(),
        },
    )?;
    Ok((rows, kernel_for("", result.clone())?))
}

/// Most rows each lane of [`vectors_in_subgroups`] holds in its private array.
const SUBGROUP_SOLVE_ROWS: u64 = 256;

/// [`vectors_in_workgroups`] on CPU adapters with subgroups of a known size (llvmpipe: 8): a
/// workgroup is one subgroup, each lane holds its rows still to solve (every `lanes`-th, in
/// solving order) in a private array instead of workgroup memory, and each row's solution
/// reaches the other lanes by `subgroupShuffle` instead of a barrier. llvmpipe loads and
/// stores workgroup memory lane by lane, where a private array indexed alike by every lane is
/// one vector access: the update of a row costs one load of the matrix instead of three
/// loads and stores. The same operations in the same order as the workgroup kernel; the rows
/// left at the end of a launch are stored in the result's type, and the launches split the
/// rows elsewhere (a lane's loop bound), so results may differ in the last bit. lavapipe,
/// one vector of 1000 rows: 5.4-5.6 -> 2.3-2.5 ms a call; in `bench_everyday.py`'s GP
/// likelihood each of the two solves 5.2-5.5 -> 2.1-2.3 ms of device time.
/// `WGPU_HLO_TRIANGULAR_SOLVE=workgroup` keeps the workgroup kernel.
#[allow(clippy::type_complexity)]
fn vectors_in_subgroups(
    name: &str,
    op_name: &str,
    s: &Solve,
    (a_el, el): (&dyn Fn(&str, &str) -> String, &dyn Fn(&str) -> String),
    (inputs, result): (&[Binding], &Binding),
    pre: &Preamble,
    target: Target,
) -> Result<Option<(kernel::Kernel, kernel::Kernel, Vec<(u64, u64)>)>> {
    let lanes = u64::from(target.caps.subgroup_size);
    let k = s.k;
    let rows = k.div_ceil(lanes.max(1));
    if !(target.cpu_adapter && target.caps.subgroup && matches!(lanes, 4 | 8 | 16))
        || rows > SUBGROUP_SOLVE_ROWS
        || std::env::var("WGPU_HLO_TRIANGULAR_SOLVE").is_ok_and(|v| v.trim() == "workgroup")
    {
        return Ok(None);
    }
    let acc = if target.caps.f64 { "f64" } else { s.w };
    let bound = MAX_ITERATIONS.min(target.max_invocation_iterations);
    // The busiest lane's loop iterations for row ii (in solving order): its slots from ii's
    // on, plus the row loop's own; each launch also loads and stores its slots.
    let cost = |ii: u64| rows - ii / lanes + 1;
    let Some((ranges, most)) = ranges_within(k, 2 * rows, cost, bound) else {
        return Ok(None);
    };
    let w = s.w;
    let t = solve_terms(s.k, s, acc, (a_el, el));
    let body = t.fill(&format!(
        "var<workgroup> range: vec2<u32>;\n\n{entry}    let tid = wid.y * nwg.x + wid.x;\n    if (tid >= {vectors}u) {{ return; }}\n    {mats}\n    \
         if (lid == 0u) {{ range = vec2<u32>(in2[0], in2[1]); }}\n    let r = workgroupUniformLoad(&range);\n    \
         var rest: array<{acc}, {rows}>;\n    \
         for (var m = r.x / {lanes}u; m < {rows}u; m = m + 1u) {{\n        let q = sgl + m * {lanes}u;\n        if (q >= r.x && q < {k}u) {{\n            let p = $RQ;\n            \
         if (r.x == 0u) {{ rest[m] = {acc}(in1[bbase + $ELP]); }} else {{ rest[m] = {acc}($XP); }}\n        }}\n    }}\n    \
         for (var ii = r.x; ii < r.y; ii = ii + 1u) {{\n        let i = $RI;\n        let mi = ii / {lanes}u;\n        \
         let xi = subgroupShuffle(rest[mi] / $DIAG, ii % {lanes}u);\n        if (sgl == ii % {lanes}u) {{ $XI = {w}(xi); }}\n        \
         for (var m = mi; m < {rows}u; m = m + 1u) {{\n            let q = sgl + m * {lanes}u;\n            if (q > ii && q < {k}u) {{\n                let p = $RQ;\n                rest[m] = rest[m] - {acc}($AIP) * xi;\n            }}\n        }}\n    }}\n    \
         for (var m = r.y / {lanes}u; m < {rows}u; m = m + 1u) {{\n        let q = sgl + m * {lanes}u;\n        if (q >= r.y && q < {k}u) {{\n            let p = $RQ;\n            $XP = {w}(rest[m]);\n        }}\n    }}\n}}\n",
        entry = kernel::subgroup_entry_header(lanes as u32),
        vectors = s.vectors,
        mats = pre.mats,
    ));
    let (rows_k, last) = solve_kernel_pair(
        (name, op_name, &pre.what),
        "one subgroup per right-hand side, right-looking, each lane's rows in a private array, each row's solution by subgroupShuffle",
        &body,
        (inputs, result),
        (s.vectors, most),
        target,
    )?;
    Ok(Some((rows_k, last, ranges)))
}

/// Most rows a thread-per-vector solve keeps its solved values of in a private array
/// ([`blocked_solve_body`]), per adapter class. lavapipe, lower 512-vector solves, plain /
/// blocked kernel (ms): 64 rows 1.72 / 0.83, 128: 8.9 / 3.2, 256: 35 / 12.5, 512: 138 / 50,
/// 1024: 600 / 230. On GPUs a long private array leaves registers for local memory: 64 is a
/// guess, not measured on a GPU.
const PRIVATE_SOLVE_MAX: (u64, u64) = (1024, 64);

/// Rows solved together by [`blocked_solve_body`] (`WGPU_HLO_TRSM_ROWS`, default 4; 1 keeps
/// the plain kernel), or `None` for the plain kernel (past [`PRIVATE_SOLVE_MAX`] rows).
/// lavapipe, 64 rows: 1 row 1.72 ms, 2: 0.96, 4: 0.83, 8: 1.49 (registers spill).
fn private_rows(k: u64, target: Target) -> Option<u64> {
    let rows = std::env::var("WGPU_HLO_TRSM_ROWS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(4);
    let max = if target.cpu_adapter {
        PRIVATE_SOLVE_MAX.0
    } else {
        PRIVATE_SOLVE_MAX.1
    };
    (rows > 1 && rows <= 8 && k <= max).then_some(rows)
}

/// The body of a thread-per-vector triangular solve that keeps the vector's solved values in
/// a private array (in solving order, each rounded to the result's type as the plain kernel
/// reads them back) and solves `rows` rows together: one pass over the solved values serves
/// all of them (`rows` loads of the matrix and one private load per `rows` multiply-adds,
/// against two storage loads per multiply-add), then the small triangle among them. Every
/// row sums in the same order as the plain kernel, so the results are identical.
#[allow(clippy::too_many_arguments)]
fn blocked_solve_body(
    s: &Solve,
    acc: &str,
    rows: u64,
    preamble: String,
    a_el: &dyn Fn(&str, &str) -> String,
    x: &dyn Fn(&str) -> String,
    b: &dyn Fn(&str) -> String,
) -> String {
    let (k, w) = (s.k, s.w);
    // Row of solving step `v`.
    let row = |v: &str| {
        if s.s_lower {
            format!("({v})")
        } else {
            format!("({k}u - 1u - ({v}))")
        }
    };
    let diag = |i: &str| {
        if s.unit {
            format!("{acc}({w}(1))")
        } else {
            format!("{acc}({})", a_el(i, i))
        }
    };
    let mut o = String::new();
    o.push_str(&format!("    {preamble}\n"));
    o.push_str(&format!("    var xs: array<{acc}, {k}>;\n"));
    o.push_str("    let r0 = in2[0];\n    let r1 = in2[1];\n");
    // The values solved by earlier launches.
    o.push_str(&format!(
        "    for (var jj = 0u; jj < r0; jj = jj + 1u) {{ xs[jj] = {acc}({}); }}\n",
        x(&row("jj"))
    ));
    o.push_str("    var ii = r0;\n");
    o.push_str(&format!(
        "    for (; ii + {rows}u <= r1; ii = ii + {rows}u) {{\n"
    ));
    for t in 0..rows {
        o.push_str(&format!(
            "        let i{t} = {};\n",
            row(&format!("ii + {t}u"))
        ));
        o.push_str(&format!(
            "        var s{t}: {acc} = {acc}({});\n",
            b(&format!("i{t}"))
        ));
    }
    o.push_str("        for (var jj = 0u; jj < ii; jj = jj + 1u) {\n");
    o.push_str(&format!("            let j = {};\n", row("jj")));
    o.push_str("            let xj = xs[jj];\n");
    for t in 0..rows {
        o.push_str(&format!(
            "            s{t} = s{t} - {acc}({}) * xj;\n",
            a_el(&format!("i{t}"), "j")
        ));
    }
    o.push_str("        }\n");
    for t in 0..rows {
        o.push_str(&format!(
            "        let x{t} = {acc}({w}(s{t} / {}));\n",
            diag(&format!("i{t}"))
        ));
        o.push_str(&format!("        xs[ii + {t}u] = x{t};\n"));
        o.push_str(&format!("        {} = {w}(x{t});\n", x(&format!("i{t}"))));
        for u in t + 1..rows {
            o.push_str(&format!(
                "        s{u} = s{u} - {acc}({}) * x{t};\n",
                a_el(&format!("i{u}"), &format!("i{t}"))
            ));
        }
    }
    o.push_str("    }\n");
    // The rows left over, one at a time.
    o.push_str("    for (; ii < r1; ii = ii + 1u) {\n");
    o.push_str(&format!("        let i = {};\n", row("ii")));
    o.push_str(&format!("        var s: {acc} = {acc}({});\n", b("i")));
    o.push_str("        for (var jj = 0u; jj < ii; jj = jj + 1u) {\n");
    o.push_str(&format!(
        "            s = s - {acc}({}) * xs[jj];\n",
        a_el("i", &row("jj"))
    ));
    o.push_str("        }\n");
    o.push_str(&format!(
        "        let xi = {acc}({w}(s / {}));\n",
        diag("i")
    ));
    o.push_str("        xs[ii] = xi;\n");
    o.push_str(&format!("        {} = {w}(xi);\n", x("i")));
    o.push_str("    }\n");
    // Each right-hand side element is loaded once, from its buffer. The matrix, whose elements
    // every lane loads at the same place, is read through a texture where the input allows:
    // on lavapipe (2-core EPYC host, 2026-12-05; lower solves, minimum of 10 calls, storage
    // -> texture) 64 rows x 64 vectors 1.17 -> 0.58 ms, 64 x 512 4.3 -> 1.9, 128 x 512 16.5
    // -> 7.0, 512 x 512 28.8 -> 25.2, the same bits. (On 2026-11-29's host textures for both
    // operands measured the other way, 64 x 512 1.78 against 0.83 ms; here both through
    // textures ran as the matrix alone.) `WGPU_HLO_TRSM_TEXTURE=0` reads the matrix from
    // its buffer.
    let mark = crate::codegen::texture_reads::STORAGE_MARK;
    let o = o.replace("in1[", &format!("in1[{mark} "));
    if std::env::var("WGPU_HLO_TRSM_TEXTURE").is_ok_and(|v| v.trim() == "0") {
        return o.replace("in0[", &format!("in0[{mark} "));
    }
    o
}

/// The plan of `triangular_solve`: one thread per right-hand-side vector, one launch per
/// block of rows (`row_blocks`), each updating the solution in place.
pub fn triangular_solve(name: &str, f: &Function, op: &Operation, target: Target) -> Result<Plan> {
    let Op::TriangularSolve {
        left_side,
        lower,
        unit_diagonal,
        transpose_a,
    } = &op.op
    else {
        return Err(Error::internal("triangular_solve emitter on another op"));
    };
    let at = real_tensor(f, op.operands[0], "triangular_solve")?;
    let bt = real_tensor(f, op.operands[1], "triangular_solve")?;
    let bd = bt.dims();
    let r = bd.len();
    if r < 2 {
        return Err(Error::invalid("triangular_solve needs matrices"));
    }
    let (m, n) = (bd[r - 2] as u64, bd[r - 1] as u64);
    let batch = bt.num_elements() as u64 / (m * n).max(1);
    let k = if *left_side { m } else { n };
    if k > MAX_ITERATIONS {
        return Err(too_long(&format!("triangular_solve of {k}x{k} systems"), k));
    }
    // Real operands: the adjoint is the transpose.
    let transposed = !matches!(transpose_a, Transpose::NoTranspose);
    // T = op(a); on the right side we solve with S = T^T along the rows of b.
    // S(i, j) = a[?]: track which physical element it is.
    let s_transposed = transposed ^ !*left_side;
    let s_lower = *lower ^ s_transposed;
    let a_el = |i: &str, j: &str| {
        if s_transposed {
            format!("in0[abase + {j} * {k}u + {i}]")
        } else {
            format!("in0[abase + {i} * {k}u + {j}]")
        }
    };
    // Element v of the vector this thread solves: a column of b (left) or a row (right).
    let (vec_count, el) = if *left_side {
        (n, format!("v * {n}u + col"))
    } else {
        (m, format!("col * {n}u + v"))
    };
    let (w, _) = scalar(bt.dtype);
    // f32 systems are solved with f64 sums where the adapter has f64 (closer to the exact
    // solution than any f32 summation order).
    let acc = if target.caps.f64 { "f64" } else { w };
    let x = |v: &str| format!("out0[bbase + {}]", el.replace('v', v));
    let b = |v: &str| format!("in1[bbase + {}]", el.replace('v', v));
    let diag = if *unit_diagonal {
        format!("{w}(1)")
    } else {
        a_el("i", "i")
    };
    // Rows run in solving order: `ii` counts solved rows, `i` is the row (descending for an
    // upper-triangular S), `j` runs over the rows solved before it, in solving order (as
    // `blocked_solve_body` sums, so both kernels give the same bits).
    let (i_def, inner) = if s_lower {
        ("let i = ii;", "for (var j = 0u; j < i; j = j + 1u)")
    } else {
        (
            "let i = K - 1u - ii;",
            "for (var j = K - 1u; j > i; j = j - 1u)",
        )
    };
    let rows = private_rows(k, target);
    let body = match rows {
        Some(rows) => blocked_solve_body(
            &Solve {
                k,
                vectors: batch * vec_count,
                w,
                s_lower,
                unit: *unit_diagonal,
            },
            acc,
            rows,
            format!("let mat = tid / {vec_count}u;\n    let col = tid % {vec_count}u;\n    let abase = mat * {k}u * {k}u;\n    let bbase = mat * {m}u * {n}u;"),
            &a_el,
            &x,
            &b,
        ),
        None => format!(
            "    let K = {k}u;\n    let mat = tid / {vec_count}u;\n    let col = tid % {vec_count}u;\n    let abase = mat * {k}u * {k}u;\n    let bbase = mat * {m}u * {n}u;\n    for (var ii = in2[0]; ii < in2[1]; ii = ii + 1u) {{\n        {i_def}\n        var s: {acc} = {acc}({bi});\n        {inner} {{\n            s = s - {acc}({aij}) * {acc}({xj});\n        }}\n        {xi} = {w}(s / {acc}({diag}));\n    }}\n",
            bi = b("i"),
            aij = a_el("i", "j"),
            xj = x("j"),
            xi = x("i"),
        ),
    };
    let inputs = vec![
        Binding {
            value: op.operands[0],
            ty: at.clone(),
        },
        Binding {
            value: op.operands[1],
            ty: bt.clone(),
        },
        params(2),
    ];
    let result = Binding {
        value: op.results[0],
        ty: bt.clone(),
    };
    if let Some((rows, last, ranges)) = vectors_in_workgroups(
        name,
        &op.name(),
        Solve {
            k,
            vectors: batch * vec_count,
            w,
            s_lower,
            unit: *unit_diagonal,
        },
        (&a_el, &|v: &str| el.replace('v', v)),
        (&inputs, result.clone()),
        Preamble {
            mats: format!("let mat = tid / {vec_count}u;\n    let col = tid % {vec_count}u;\n    let abase = mat * {k}u * {k}u;\n    let bbase = mat * {m}u * {n}u;"),
            what: format!(
                "{batch} triangular systems {k}x{k} {}",
                bt.dtype.mlir_name()
            ),
        },
        target,
    )? {
        return row_range_plan(|| Ok(rows), last, &ranges, bt);
    }
    let blocks = row_blocks(k);
    let most = blocks
        .iter()
        .map(|&(s, e)| (s + 1..=e).sum::<u64>())
        .max()
        .unwrap_or(0);
    let solve = |suffix: &str, out: Binding| {
        let comment = format!(
            "kernel {name}{suffix}: a block of rows (parameters: first and end, in solving order) of {batch} triangular systems {k}x{k} {}, one thread per right-hand side{}\nloop iterations per invocation: at most {most}\nfuses: {}",
            bt.dtype.mlir_name(),
            rows.map_or(String::new(), |r| format!(
                ", {r} rows at a time, solved values in private memory"
            )),
            op.name()
        );
        kernel::threaded(
            &format!("{name}{suffix}"),
            &comment,
            inputs.clone(),
            vec![out],
            &Default::default(),
            "",
            &body,
            batch * vec_count,
            // Inner steps of the block's rows, plus one back-edge per row (and, blocked, the
            // reload of the rows solved before).
            most + if rows.is_some() { 2 * k } else { k },
            target,
        )
    };
    // One launch: the kernel is named as the op's; else a first, middle and last kind.
    let last = solve(if blocks.len() == 1 { "" } else { "_last" }, result)?;
    let state = Binding {
        value: temp(0),
        ty: bt.clone(),
    };
    row_range_plan(|| solve("_rows", state), last, &blocks, bt.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_blocks_cover_the_rows_within_the_budget() {
        for k in [1u64, 2, 100, 128, 129, 1000, 1024, 9000, 16_384] {
            let blocks = row_blocks(k);
            assert_eq!(blocks.first().map(|b| b.0), Some(0));
            assert_eq!(blocks.last().map(|b| b.1), Some(k));
            for w in blocks.windows(2) {
                assert_eq!(w[0].1, w[1].0);
            }
            for &(s, e) in &blocks {
                let cost: u64 = (s + 1..=e).sum();
                assert!(e == s + 1 || cost <= ROW_BLOCK_ITERATIONS, "{k}: {s}..{e}");
            }
        }
        assert_eq!(row_blocks(100).len(), 1);
        assert!(row_blocks(1024).len() <= 80);
    }
}
