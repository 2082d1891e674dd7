//! `custom_call @wgpu_hlo.lu(a)`, `a: [..., m, n]` f32/f64 -> `(lu: [..., m, n], pivots:
//! [..., min(m, n)] i32, permutation: [..., m] i32)`: LU factorization with partial pivoting
//! as LAPACK's `getrf` returns it (the pivot of each column is the first row of largest
//! magnitude; a zero pivot leaves its column unscaled), which the plugin's rule for JAX's
//! `lu` emits (`python/jax_plugins/wgpu/lowerings.py`).
//!
//! By default the compiler plans it tiled ([`tiled`]): right-looking by blocks of columns,
//! three launches per block — the panel factored with partial pivoting by one workgroup per
//! matrix, the interchanges applied to the other columns with the block row of U solved,
//! the trailing matrix updated by a product — on one state buffer per matrix (the matrix
//! with rows padded to whole vec4s, then the pivots and the permutation as numbers of the
//! matrix's type). lavapipe, ms of kernel time per LU (JAX-level panels before): 512 x 512
//! 19-20 (55), 1024 x 1024 110-121 (233 per `solve`).
//!
//! The one-workgroup kernels (`WGPU_HLO_LU=workgroup`, and the fallback where no panel
//! shape fits the loop bound): right-looking, in one state buffer per matrix (the matrix,
//! then the pivots and the permutation as numbers of the matrix's type): for each column, its
//! threads find the pivot (strided, then a tree in workgroup memory), swap the rows, scale the
//! column under the pivot and update the trailing matrix (a thread per column, down its rows:
//! neighbouring threads touch neighbouring elements), a storage barrier between steps.
//! Tall matrices on CPU adapters keep their rows in registers instead ([`RowsInRegisters`]).
//! Launches take ranges of columns within the loop bound; a last kernel splits the state into
//! the three results. JAX's own lowering (a loop over columns of whole-matrix ops) launched
//! ~18 kernels a column: `slogdet` of 512 x 512 took 0.57 s on lavapipe.

use super::{result_binding, temp, Launch, Plan, PARAMS};
use crate::codegen::expr::Binding;
use crate::codegen::kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::texture_reads;
use crate::error::{Error, Result};
use crate::ir::ops::CustomCall;
use crate::ir::{ElementType, Function, Operation, TensorType, Type};

/// The custom call's target.
pub const LU_TARGET: &str = "wgpu_hlo.lu";

/// Largest `m` and `n` taken (pivots and row numbers are held exactly in f32 far beyond).
pub const MAX_DIM: u64 = 8192;

/// Whether `c` names this kernel.
pub fn handles(c: &CustomCall) -> bool {
    c.call_target_name == LU_TARGET
}

/// The plan of `custom_call @wgpu_hlo.lu` (module doc).
pub fn plan(name: &str, f: &Function, op: &Operation, target: Target) -> Result<Plan> {
    let what = format!("custom_call @{LU_TARGET}");
    let (Some(&a), [lu, pivots, perm]) = (op.operands.first(), op.results.as_slice()) else {
        return Err(Error::invalid(format!(
            "{what} takes one operand and has three results"
        )));
    };
    let at = match f.ty(a) {
        Type::Tensor(t)
            if t.is_static()
                && t.rank() >= 2
                && matches!(t.dtype, ElementType::F32 | ElementType::F64) =>
        {
            t.clone()
        }
        other => {
            return Err(Error::unimplemented(format!(
                "{what} on {other} (f32 and f64 matrices are supported)"
            )))
        }
    };
    let d = at.dims();
    let (m, n) = (d[d.len() - 2] as u64, d[d.len() - 1] as u64);
    let k = m.min(n);
    if m > MAX_DIM || n > MAX_DIM {
        return Err(Error::unimplemented(format!(
            "{what} of {m}x{n} matrices (at most {MAX_DIM})"
        )));
    }
    let batch = at.num_elements() as u64 / (m * n).max(1);
    let int_result = |v, len| result_binding(f, v, ElementType::I32, len, &what);
    let pivots = int_result(*pivots, batch * k)?;
    let perm = int_result(*perm, batch * m)?;
    let w = if at.dtype == ElementType::F64 {
        "f64"
    } else {
        "f32"
    };
    let input = Binding {
        value: a,
        ty: at.clone(),
    };
    let desc = format!(
        "LU factorization of {batch} matrices {m}x{n} {}",
        at.dtype.mlir_name()
    );
    // The tiled plan's rows are padded to whole vec4s, its state to a whole vec4 per matrix.
    let ld = n.next_multiple_of(4);
    let tiled_stride = (m * ld + k + m).next_multiple_of(4);
    let dims = (batch, m, n, k, ld, tiled_stride);
    let tiled_type = TensorType::new(vec![(batch * tiled_stride) as i64], at.dtype);
    let tiled_state = Binding {
        value: temp(0),
        ty: tiled_type.clone(),
    };
    if let Some((mut kernels, mut launches)) =
        tiled(name, (&what, &desc), w, dims, &tiled_state, target)?
    {
        let init = init_kernel(
            name,
            (&what, &desc),
            (input, tiled_state.clone()),
            w,
            dims,
            target,
        )?;
        kernels.insert(0, init);
        let out = kernels.len();
        let results = (tiled_state, at.clone(), (lu, pivots, perm));
        kernels.push(split(name, (&what, &desc), results, dims, target)?);
        launches.insert(0, Launch::new(0, Vec::new()));
        launches.push(Launch::new(out, Vec::new()));
        return Ok(Plan {
            kernels,
            temps: vec![tiled_type],
            launches,
        });
    }
    let mn = m * n;
    let stride = mn + k + m;
    let state_type = TensorType::new(vec![(batch * stride) as i64], at.dtype);
    let state = Binding {
        value: temp(0),
        ty: state_type.clone(),
    };
    let init = init_kernel(
        name,
        (&what, &desc),
        (input, state.clone()),
        w,
        (batch, m, n, k, n, stride),
        target,
    )?;
    let bound = target.max_invocation_iterations;
    let registers = RowsInRegisters::new(m, n, w, target).and_then(|rows| {
        let cost = |j: u64| rows.column_cost(j);
        super::linalg::ranges_within(k, rows.overhead(), cost, bound)
            .map(|(ranges, most)| (rows.body(w, batch, stride, mn + k, target), most, ranges))
    });
    let ((body, most, ranges), how) = match registers {
        Some(columns) => (columns, "rows in registers, a barrier between steps"),
        None => (
            storage_columns(&desc, w, (batch, m, n, k, stride), target)?,
            "a storage barrier between steps",
        ),
    };
    finish(
        name,
        &what,
        &desc,
        (init, &body, most, ranges),
        (state, state_type, at, (lu, pivots, perm)),
        (batch, m, n, k, stride),
        how,
        target,
    )
}

/// The columns kernel that updates the state buffer (module doc): its WGSL, the most loop
/// iterations of a launch and the launches' column ranges.
#[allow(clippy::type_complexity)]
fn storage_columns(
    desc: &str,
    w: &str,
    (batch, m, n, k, stride): (u64, u64, u64, u64, u64),
    target: Target,
) -> Result<(String, u64, Vec<(u64, u64)>)> {
    let mn = m * n;
    let bound = target.max_invocation_iterations;
    // CPU adapters switch between a workgroup's invocations at every barrier: fewer switch
    // faster.
    let wg = if target.cpu_adapter { 64 } else { 256 }
        .min(m.max(n).next_power_of_two())
        .max(2);
    let pivot = pivot_cost(w, wg, target);
    // The busiest thread's loop iterations for column j.
    let cost = |j: u64| {
        (m - j).div_ceil(wg) * 2
            + pivot
            + n.div_ceil(wg)
            + (n - j - 1).div_ceil(wg) * m.saturating_sub(j)
            + 1
    };
    let Some((ranges, most)) = super::linalg::ranges_within(k, 0, cost, bound) else {
        return Err(Error::resource_exhausted(format!(
            "{desc}: one column would loop {} times in one invocation (at most {bound})",
            cost(0)
        )));
    };
    let el = |i: &str, c: &str| format!("out0[base + ({i}) * {n}u + ({c})]");
    let body = format!(
        "var<workgroup> range: vec2<u32>;\nvar<workgroup> best: array<{w}, {wg}>;\nvar<workgroup> best_row: array<u32, {wg}>;\n\n{header}    \
         let mat = wid.y * nwg.x + wid.x;\n    if (mat >= {batch}u) {{ return; }}\n    let base = mat * {stride}u;\n    \
         if (lid == 0u) {{ range = vec2<u32>(in0[0], in0[1]); }}\n    let r = workgroupUniformLoad(&range);\n    \
         for (var j = r.x; j < r.y; j = j + 1u) {{\n        \
         var bv = {w}(-1);\n        var bi = j;\n        \
         for (var i = j + lid; i < {m}u; i = i + {wg}u) {{\n            let v = abs({aij});\n            if (v > bv) {{ bv = v; bi = i; }}\n        }}\n        \
         {pivot}\
         if (p != j) {{\n            for (var c = lid; c < {n}u; c = c + {wg}u) {{\n                let t = {ajc};\n                {ajc} = {apc};\n                {apc} = t;\n            }}\n        }}\n        \
         if (lid == 0u) {{\n            out0[base + {mn}u + j] = {w}(p);\n            let q = out0[base + {mk}u + j];\n            out0[base + {mk}u + j] = out0[base + {mk}u + p];\n            out0[base + {mk}u + p] = q;\n        }}\n        \
         storageBarrier();\n        let d = {ajj};\n        {recip}\
         if (d != {w}(0)) {{\n            for (var i = j + 1u + lid; i < {m}u; i = i + {wg}u) {{\n                let q0 = {aij} / d;\n                {aij} = select(q0, fma(fma(-q0, d, {aij}), rd, q0), correct && abs(q0) <= big);\n            }}\n        }}\n        \
         storageBarrier();\n        \
         for (var c = j + 1u + lid; c < {n}u; c = c + {wg}u) {{\n            let ujc = {ajc};\n            \
         for (var i = j + 1u; i < {m}u; i = i + 1u) {{\n                {aic} = {aic} - {aij} * ujc;\n            }}\n        }}\n        storageBarrier();\n    }}\n}}\n",
        header = header(w, wg, target),
        pivot = pivot_search(w, wg, target),
        recip = corrected_division(w),
        mk = mn + k,
        aij = el("i", "j"),
        ajc = el("j", "c"),
        apc = el("p", "c"),
        ajj = el("j", "j"),
        aic = el("i", "c"),
    );
    Ok((body, most, ranges))
}

/// Whether the columns kernels find pivots through subgroup operations: f32 on adapters with
/// subgroups (f64 keeps the tree).
fn subgroup_pivots(w: &str, target: Target) -> bool {
    w == "f32" && target.caps.subgroup
}

/// The columns kernels' entry point header (with the subgroup builtins where
/// [`subgroup_pivots`]).
fn header(w: &str, wg: u64, target: Target) -> String {
    if subgroup_pivots(w, target) {
        kernel::subgroup_entry_header(wg as u32)
    } else {
        kernel::entry_header(wg as u32)
    }
}

/// WGSL finding column `j`'s pivot `p` (uniform) from each invocation's best magnitude `bv`
/// and its row `bi`, through workgroup arrays `best` and `best_row`: the largest magnitude,
/// the first row of it on ties, as LAPACK's `idamax`. With subgroups, each subgroup reduces
/// its lanes and one invocation the subgroups (two barriers); otherwise a tree of `log2(wg)`
/// barriers. CPU adapters switch between a workgroup's invocations at every barrier: the
/// 8 panels of a 512 x 512 LU (lavapipe, 128 invocations, 9 barriers a column by the tree)
/// took 8.7 ms of kernel time with the tree.
fn pivot_search(w: &str, wg: u64, target: Target) -> String {
    if subgroup_pivots(w, target) {
        "let sv = subgroupMax(bv);\n        \
         let sr = subgroupMin(select(0xffffffffu, bi, bv == sv));\n        \
         if (sgl == 0u) { best[sgid] = sv; best_row[sgid] = sr; }\n        \
         workgroupBarrier();\n        \
         if (lid == 0u) {\n            var tv = best[0];\n            var ti = best_row[0];\n            \
         for (var g = 1u; g < nsg; g = g + 1u) {\n                \
         let ov = best[g];\n                let oi = best_row[g];\n                \
         if (ov > tv || (ov == tv && oi < ti)) { tv = ov; ti = oi; }\n            }\n            \
         best_row[0] = ti;\n        }\n        \
         let p = workgroupUniformLoad(&best_row[0]);\n        "
            .to_string()
    } else {
        format!(
            "best[lid] = bv;\n        best_row[lid] = bi;\n        workgroupBarrier();\n        \
             for (var s = {half}u; s > 0u; s = s >> 1u) {{\n            \
             if (lid < s) {{\n                let ov = best[lid + s];\n                let oi = best_row[lid + s];\n                \
             if (ov > best[lid] || (ov == best[lid] && oi < best_row[lid])) {{ best[lid] = ov; best_row[lid] = oi; }}\n            }}\n            \
             workgroupBarrier();\n        }}\n        \
             let p = workgroupUniformLoad(&best_row[0]);\n        ",
            half = wg / 2
        )
    }
}

/// The busiest invocation's loop iterations in [`pivot_search`]: one invocation's pass over
/// the subgroups (of at least 4 lanes where the adapter does not say), or the tree's steps.
fn pivot_cost(w: &str, wg: u64, target: Target) -> u64 {
    if subgroup_pivots(w, target) {
        wg / u64::from(target.caps.subgroup_size.max(4))
    } else {
        u64::from(wg.trailing_zeros())
    }
}

/// WGSL declaring what the column's division by its pivot `d` needs to be correctly
/// rounded on any driver: `rd`, `1 / d` after one Newton step with fused operations, and
/// `correct`, whether the quotient `q0 = x / d` may take one residual correction,
/// `fma(fma(-q0, d, x), rd, q0)` (where `d` is a normal number, and `big` bounds a finite
/// `q0`). A correctly rounded quotient stays as it is (lavapipe's); NVIDIA's division is
/// approximate (a few ULP, as Vulkan allows): an H200's quotients broke a tie in the next
/// column's magnitudes that LAPACK's division keeps (pivots 1 2 3 3 for 1 2 2 3).
/// Multiplying by the reciprocal instead, as LAPACK's reference getf2 does, broke the same
/// tie on lavapipe: jax cpu's LAPACK divides.
fn corrected_division(w: &str) -> String {
    let (tiny, big) = if w == "f64" {
        ("2.2250738585072014e-308", "1.7976931348623157e308")
    } else {
        ("1.1754943508222875e-38", "3.4028234663852886e38")
    };
    format!(
        "let r0 = {w}(1) / d;\n        let rd = fma(r0, fma(-d, r0, {w}(1)), r0);\n        \
         let correct = abs(d) >= {w}({tiny}) && abs(d) <= {w}({big});\n        \
         let big = {w}({big});\n        "
    )
}

/// The plan from the `init` kernel and the columns kernel's `body` (workgroups of `wg`, at
/// most `most` loop iterations per launch over the column `ranges`): the launches and the
/// kernel splitting the state into the three results.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn finish(
    name: &str,
    what: &str,
    desc: &str,
    (init, body, most, ranges): (kernel::Kernel, &str, u64, Vec<(u64, u64)>),
    (state, state_type, at, (lu, pivots, perm)): (
        Binding,
        TensorType,
        TensorType,
        (&crate::ir::ValueId, Binding, Binding),
    ),
    (batch, m, n, k, stride): (u64, u64, u64, u64, u64),
    how: &str,
    target: Target,
) -> Result<Plan> {
    let params = Binding {
        value: PARAMS,
        ty: TensorType::new(vec![2], ElementType::U32),
    };
    let kname = format!("{name}_columns");
    let comment = format!(
        "kernel {kname}: columns j0..j1 (parameters) of an {desc}, one workgroup per matrix, right-looking, {how}\nloop iterations per invocation: at most {most}\nfuses: {what}"
    );
    let columns = kernel::in_workgroups(
        &kname,
        &comment,
        vec![params],
        vec![state.clone()],
        &Default::default(),
        body,
        batch,
        most,
        target,
    )?;
    let split = split(
        name,
        (what, desc),
        (state, at, (lu, pivots, perm)),
        (batch, m, n, k, n, stride),
        target,
    )?;
    Ok(Plan::ranged(init, columns, split, state_type, ranges))
}

/// Whether [`init_kernel`] and [`split`] move four words a thread: rows of a multiple of 4
/// elements, a state whose rows and matrices start at multiples of 4 words
/// (`WGPU_HLO_LU_QUADS=0`: a word a thread).
fn quads(n: u64, ld: u64, stride: u64) -> bool {
    n % 4 == 0
        && ld % 4 == 0
        && stride % 4 == 0
        && !crate::fusion::switched_off("WGPU_HLO_LU_QUADS")
}

/// The kernel writing a state (`batch` matrices of `m` rows of `ld` words, `ld >= n` (the
/// words past `n` zero), then the pivots, then the permutation, `stride` words per matrix)
/// from the operand: zero pivots, the identity permutation. One thread per state word.
fn init_kernel(
    name: &str,
    (what, desc): (&str, &str),
    (input, state): (Binding, Binding),
    w: &str,
    (batch, m, n, k, ld, stride): (u64, u64, u64, u64, u64, u64),
    target: Target,
) -> Result<kernel::Kernel> {
    let words = m * ld;
    let mk = words + k;
    if quads(n, ld, stride) {
        // Four words a thread (rows of a multiple of 4, aligned in the operand and the
        // state): a vec4 load of the operand, a vec4 store of the state; the pivots and the
        // permutation word by word into their quad. llvmpipe loads and stores lane by lane,
        // a vec4 for about a scalar's cost: 512 x 512, 1.0 ms with a word a thread.
        let (s4, w4, l4, n4, mn4) = (stride / 4, words / 4, ld / 4, n / 4, m * n / 4);
        let mark = super::state_io_mark();
        return kernel::in_workgroups_quads(
            &format!("{name}_init"),
            &format!("kernel {name}_init: the state of an {desc}, four words a thread\nfuses: {what}"),
            (vec![input], vec![state]),
            &Default::default(),
            &format!(
                "{}{}    if (tid >= {t}u) {{ return; }}\n    let mat = tid / {s4}u;\n    let q = tid % {s4}u;\n    \
                 var v = vec4<{w}>({w}(0));\n    \
                 if (q < {w4}u) {{\n        let c4 = q % {l4}u;\n        \
                 if (c4 < {n4}u) {{ v = in0[{mark} mat * {mn4}u + (q / {l4}u) * {n4}u + c4]; }}\n    }} else {{\n        \
                 for (var c = 0u; c < 4u; c = c + 1u) {{\n            let e = q * 4u + c;\n            \
                 if (e >= {mk}u && e < {end}u) {{ v[c] = {w}(e - {mk}u); }}\n        }}\n    }}\n    out0[tid] = v;\n}}\n",
                kernel::entry_header(256),
                kernel::thread_index(256),
                t = batch * s4,
                end = mk + m,
            ),
            (&[0], &[0]),
            ((batch * s4).div_ceil(256), 4),
            target,
        );
    }
    kernel::threaded(
        &format!("{name}_init"),
        &format!("kernel {name}_init: the state of an {desc}\nfuses: {what}"),
        vec![input],
        vec![state],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {stride}u;\n    let e = tid % {stride}u;\n    \
             if (e < {words}u) {{\n        let c = e % {ld}u;\n        \
             out0[tid] = select({w}(0), in0[mat * {mn}u + (e / {ld}u) * {n}u + min(c, {n1}u)], c < {n}u);\n    }}\n    \
             else if (e < {mk}u) {{ out0[tid] = {w}(0); }}\n    \
             else if (e < {end}u) {{ out0[tid] = {w}(e - {mk}u); }}\n    \
             else {{ out0[tid] = {w}(0); }}\n",
            mn = m * n,
            n1 = n - 1,
            end = mk + m,
        ),
        batch * stride,
        0,
        target,
    )
}

/// The kernel splitting a state (as [`init_kernel`] writes it) into the three results: one
/// thread per matrix element.
fn split(
    name: &str,
    (what, desc): (&str, &str),
    (state, at, (lu, pivots, perm)): (Binding, TensorType, (&crate::ir::ValueId, Binding, Binding)),
    (batch, m, n, k, ld, stride): (u64, u64, u64, u64, u64, u64),
    target: Target,
) -> Result<kernel::Kernel> {
    let mn = m * n;
    let words = m * ld;
    let lu = Binding { value: *lu, ty: at };
    if quads(n, ld, stride) {
        // Four elements of the factors a thread ([`init_kernel`]'s quads), the pivots and
        // the permutation word by word.
        let (s4, l4, n4, mn4) = (stride / 4, ld / 4, n / 4, mn / 4);
        let mark = super::state_io_mark();
        let word = |at: &str| format!("in0[{mark} base + ({at}) / 4u][({at}) % 4u]");
        return kernel::in_workgroups_quads(
            &format!("{name}_out"),
            &format!("kernel {name}_out: the factors, pivots and permutation of an {desc}, four elements a thread\nfuses: {what}"),
            (vec![state], vec![lu, pivots, perm]),
            &Default::default(),
            &format!(
                "{}{}    if (tid >= {t}u) {{ return; }}\n    let mat = tid / {mn4}u;\n    let q = tid % {mn4}u;\n    let base = mat * {s4}u;\n    \
                 out0[tid] = in0[{mark} base + (q / {n4}u) * {l4}u + q % {n4}u];\n    \
                 for (var c = 0u; c < 4u; c = c + 1u) {{\n        let e = q * 4u + c;\n        \
                 if (e < {k}u) {{ out1[mat * {k}u + e] = i32({pw}); }}\n        \
                 if (e < {m}u) {{ out2[mat * {m}u + e] = i32({mw}); }}\n    }}\n}}\n",
                kernel::entry_header(256),
                kernel::thread_index(256),
                t = batch * mn4,
                pw = word(&format!("{words}u + e")),
                mw = word(&format!("{}u + e", words + k)),
            ),
            (&[0], &[0]),
            ((batch * mn4).div_ceil(256), 4),
            target,
        );
    }
    kernel::threaded(
        &format!("{name}_out"),
        &format!("kernel {name}_out: the factors, pivots and permutation of an {desc}\nfuses: {what}"),
        vec![state],
        vec![lu, pivots, perm],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {mn}u;\n    let e = tid % {mn}u;\n    let base = mat * {stride}u;\n    \
             out0[tid] = in0[base + (e / {n}u) * {ld}u + e % {n}u];\n    \
             if (e < {k}u) {{ out1[mat * {k}u + e] = i32(in0[base + {words}u + e]); }}\n    \
             if (e < {m}u) {{ out2[mat * {m}u + e] = i32(in0[base + {mk}u + e]); }}\n",
            mk = words + k
        ),
        batch * mn,
        0,
        target,
    )
}

/// Most matrix elements one invocation of a [`RowsInRegisters`] kernel holds. llvmpipe keeps
/// the array in the frame of the coroutine it makes of the shader and compiles it in time
/// growing with its length (without Mesa's shader cache, the first `slogdet` of 512 x 512
/// took 0.5-1.4 s longer with 256 elements, 1.6 s with 512).
const REGISTER_ELEMENTS: u64 = 256;

/// The columns kernel of tall matrices on CPU adapters — the panels of the blocked LU
/// (`_lu_blocked`, 64 columns over all the rows): each of a workgroup's `wg` invocations
/// holds rows `lid, lid + wg, ...` (`r` of them, at least 2) of its matrix in a private
/// array for the launch, loaded at its start and stored at its end. Per column the pivot's
/// and column `j`'s rows cross workgroup memory (their owners swap them there, and every
/// invocation reads the pivot row from it, one element per column for all its rows); the
/// scaling and the trailing update touch only an invocation's own rows. llvmpipe makes each
/// storage access one load or store per lane, with bounds checks: the 8 panels of a
/// 512 x 512 LU took 58 ms in the storage kernel, 23-35 ms so. With one row per invocation
/// it gained nothing (256 x 256: 48 against 53 ms), and on a GPU the rows would spill out of
/// registers: the storage kernel serves there (`WGPU_HLO_LU_REGISTERS=0`: everywhere).
///
/// The trailing update walks the same rows of the array in every invocation (a uniform
/// index, rows at or above the pivot selected unchanged): starting each invocation at its
/// first row below the pivot made the index differ between lanes, and llvmpipe then loaded
/// and stored each element lane by lane (a 512 x 64 panel: 4.2 -> 3.3 ms).
struct RowsInRegisters {
    m: u64,
    n: u64,
    wg: u64,
    r: u64,
    /// Loop iterations of the pivot search ([`pivot_cost`]).
    pivot: u64,
}

impl RowsInRegisters {
    /// The smallest workgroup (64 to 256 invocations) whose invocations hold at least two rows
    /// and at most [`REGISTER_ELEMENTS`] each; `None` on GPUs or where none does.
    fn new(m: u64, n: u64, w: &str, target: Target) -> Option<Self> {
        if !target.cpu_adapter || std::env::var("WGPU_HLO_LU_REGISTERS").is_ok_and(|v| v == "0") {
            return None;
        }
        [64u64, 128, 256].into_iter().find_map(|wg| {
            let r = m.div_ceil(wg);
            let pivot = pivot_cost(w, wg, target);
            (r >= 2 && r * n <= REGISTER_ELEMENTS).then_some(RowsInRegisters { m, n, wg, r, pivot })
        })
    }

    /// Loop iterations per launch besides the columns: loading and storing the rows.
    fn overhead(&self) -> u64 {
        2 * self.r * self.n
    }

    /// The busiest invocation's loop iterations for column `j`: the pivot search, the tree,
    /// both row copies in and out of workgroup memory, the scaling and update of its rows.
    fn column_cost(&self, j: u64) -> u64 {
        let (n, r) = (self.n, self.r);
        2 * r + self.pivot + 4 * n + r * (n - j) + 1
    }

    /// The kernel's WGSL: scalar `w`, `batch` matrices in states of `stride` elements whose
    /// pivots start at element `m * n` and permutation at `mk`.
    fn body(&self, w: &str, batch: u64, stride: u64, mk: u64, target: Target) -> String {
        let RowsInRegisters { m, n, wg, r, .. } = *self;
        let mn = m * n;
        format!(
            "var<workgroup> range: vec2<u32>;\nvar<workgroup> best: array<{w}, {wg}>;\n\
             var<workgroup> best_row: array<u32, {wg}>;\nvar<workgroup> prow: array<{w}, {n}>;\n\
             var<workgroup> jrow: array<{w}, {n}>;\n\n{header}    \
             let mat = wid.y * nwg.x + wid.x;\n    if (mat >= {batch}u) {{ return; }}\n    \
             let base = mat * {stride}u;\n    \
             if (lid == 0u) {{ range = vec2<u32>(in0[0], in0[1]); }}\n    \
             let r = workgroupUniformLoad(&range);\n    \
             var a: array<{w}, {rn}>;\n    \
             for (var t = 0u; t < {r}u; t = t + 1u) {{\n        let i = lid + t * {wg}u;\n        \
             if (i < {m}u) {{\n            for (var c = 0u; c < {n}u; c = c + 1u) {{ a[t * {n}u + c] = out0[base + i * {n}u + c]; }}\n        }}\n    }}\n    \
             for (var j = r.x; j < r.y; j = j + 1u) {{\n        \
             var bv = {w}(-1);\n        var bi = j;\n        \
             for (var t = 0u; t < {r}u; t = t + 1u) {{\n            let i = lid + t * {wg}u;\n            \
             if (i >= j && i < {m}u) {{\n                let v = abs(a[t * {n}u + j]);\n                if (v > bv) {{ bv = v; bi = i; }}\n            }}\n        }}\n        \
             {pivot}\
             if (lid == p % {wg}u) {{\n            let t = p / {wg}u;\n            for (var c = 0u; c < {n}u; c = c + 1u) {{ prow[c] = a[t * {n}u + c]; }}\n        }}\n        \
             if (lid == j % {wg}u) {{\n            let t = j / {wg}u;\n            for (var c = 0u; c < {n}u; c = c + 1u) {{ jrow[c] = a[t * {n}u + c]; }}\n        }}\n        \
             workgroupBarrier();\n        \
             if (lid == p % {wg}u) {{\n            let t = p / {wg}u;\n            for (var c = 0u; c < {n}u; c = c + 1u) {{ a[t * {n}u + c] = jrow[c]; }}\n        }}\n        \
             if (lid == j % {wg}u) {{\n            let t = j / {wg}u;\n            for (var c = 0u; c < {n}u; c = c + 1u) {{ a[t * {n}u + c] = prow[c]; }}\n        }}\n        \
             if (lid == 0u) {{\n            out0[base + {mn}u + j] = {w}(p);\n            let q = out0[base + {mk}u + j];\n            \
             out0[base + {mk}u + j] = out0[base + {mk}u + p];\n            out0[base + {mk}u + p] = q;\n        }}\n        \
             let d = prow[j];\n        {recip}\
             var l: array<{w}, {r}>;\n        \
             for (var t = 0u; t < {r}u; t = t + 1u) {{\n            let i = lid + t * {wg}u;\n            \
             var lt = {w}(0);\n            \
             if (i > j && i < {m}u) {{\n                lt = a[t * {n}u + j];\n                \
             if (d != {w}(0)) {{\n                    let q0 = lt / d;\n                    lt = select(q0, fma(fma(-q0, d, lt), rd, q0), correct && abs(q0) <= big);\n                    a[t * {n}u + j] = lt;\n                }}\n            }}\n            l[t] = lt;\n        }}\n        \
             for (var c = j + 1u; c < {n}u; c = c + 1u) {{\n            let u = prow[c];\n            \
             for (var t = 0u; t < {r}u; t = t + 1u) {{\n                let x = a[t * {n}u + c];\n                \
             a[t * {n}u + c] = select(x, x - l[t] * u, lid + t * {wg}u > j);\n            }}\n        }}\n        \
             workgroupBarrier();\n    }}\n    \
             for (var t = 0u; t < {r}u; t = t + 1u) {{\n        let i = lid + t * {wg}u;\n        \
             if (i < {m}u) {{\n            for (var c = 0u; c < {n}u; c = c + 1u) {{ out0[base + i * {n}u + c] = a[t * {n}u + c]; }}\n        }}\n    }}\n}}\n",
            header = header(w, wg, target),
            pivot = pivot_search(w, wg, target),
            recip = corrected_division(w),
            rn = r * n,
        )
    }
}

/// Columns per block of the tiled LU ([`tiled`]) where nothing asks for fewer.
const TILED_BLOCK: u64 = 64;

/// [`TILED_BLOCK`] on CPU adapters: the panel kernel's cost grows with the block's width
/// (each column's step runs over the whole block in every invocation) and the update's
/// falls. lavapipe, 512 x 512 / 1024 x 1024 LU, ms of kernel time in all (panels, updates):
/// 16 columns 26 (8.5, 12) / 131 (23, 86), 32 columns 23 (10, 7) / 122 (45, 55), 64
/// columns 45 (30, 6) / 258 (158, 57).
const TILED_BLOCK_CPU: u64 = 32;

/// Rows of the trailing matrix one workgroup of the tiled LU's update kernel updates.
const UPDATE_ROWS: u64 = 16;

/// Columns each lane of the CPU adapters' update kernel updates (one per thread elsewhere).
const UPDATE_COLUMNS_PER_LANE: u64 = 8;

/// Groups of four columns each lane of the CPU adapters' update kernel updates, f32.
const UPDATE_VEC4S_PER_LANE: u64 = 2;

/// Threads per workgroup of the tiled LU's row and update kernels on GPUs (one column each).
const TILED_WG: u64 = 64;

/// How the tiled LU's panel kernel holds its rows: `r` rows per invocation of `wg` in
/// private arrays (CPU adapters), or `r == 0`: in the state, swapped there.
#[derive(Clone, Copy)]
struct PanelShape {
    b: u64,
    wg: u64,
    r: u64,
}

impl PanelShape {
    /// The widest block (64, 32 or 16 columns, at most `k`) whose panel fits: on CPU adapters
    /// rows in private arrays of at most [`REGISTER_ELEMENTS`] (the smallest workgroup, from
    /// 8 invocations, that holds them: see [`shared_register_panel`]), else in the state with
    /// a workgroup of up to 256, within `bound` loop iterations per invocation. With
    /// workgroups of at least 64, batches of small matrices took longer than the
    /// one-workgroup kernels (lavapipe, LU of 100000 x 4 x 4 / 20000 x 16 x 16 / 3000 x 40 x
    /// 40: 1953 / 2421 / 1436 ms against 329 / 755 / 1276); from 8 they take 141 / 217 / 182.
    fn choose(m: u64, k: u64, w: &str, target: Target, bound: u64) -> Option<PanelShape> {
        let registers =
            target.cpu_adapter && !std::env::var("WGPU_HLO_LU_REGISTERS").is_ok_and(|v| v == "0");
        let top = if target.cpu_adapter {
            TILED_BLOCK_CPU
        } else {
            TILED_BLOCK
        };
        let blocks = [top, 32, 16].map(|b| b.min(k));
        if registers {
            let found = blocks.into_iter().find_map(|b| {
                [8u64, 16, 32, 64, 128, 256].into_iter().find_map(|wg| {
                    let r = m.div_ceil(wg);
                    let shape = PanelShape { b, wg, r };
                    (r * b <= REGISTER_ELEMENTS && shape.iterations(m, w, target) <= bound)
                        .then_some(shape)
                })
            });
            if found.is_some() {
                return found;
            }
        }
        let wg = 256.min(m.next_power_of_two()).max(32);
        blocks
            .into_iter()
            .map(|b| PanelShape { b, wg, r: 0 })
            .find(|shape| shape.iterations(m, w, target) <= bound)
    }

    /// The busiest invocation's loop iterations in one launch of the panel kernel.
    fn iterations(&self, m: u64, w: &str, target: Target) -> u64 {
        let PanelShape { b, wg, r } = *self;
        let pivot = pivot_cost(w, wg, target);
        if r > 0 {
            // Load and store its rows; per column the search, the pivot row's copy, the
            // positions, the scaling and the update of its rows.
            2 * r * b + b * (3 * r + pivot + b + r * b + 1)
        } else {
            let rows = m.div_ceil(wg);
            b * (rows + pivot + b.div_ceil(wg) + rows * b + 1)
        }
    }
}

/// The tiled LU: right-looking by blocks of `b` columns (LAPACK's getrf), three launches per
/// block on the state buffer [`plan`] keeps (the matrix, the pivots, the permutation):
///
/// * `panel` factors the block's columns from its diagonal down with partial pivoting, one
///   workgroup per matrix, and records the pivots (the rows' global numbers) and the
///   permutation. On CPU adapters each invocation holds rows of the panel in a private
///   array and the interchanges move no words: each row keeps its position in the order
///   LAPACK's interchanges give (the pivot is the first of the largest magnitudes in that
///   order), and the rows go to their positions when stored; only the pivot row's words
///   cross workgroup memory, one copy per column. Elsewhere the panel's words of the two
///   rows are swapped in the state, one thread per row below the pivot scales and updates.
/// * `rows` applies the block's interchanges to every other column (one thread per
///   column) and, right of the block, solves its rows against the block's unit lower
///   triangle: the block row of U.
/// * `update`: the trailing matrix loses the product of the block's columns below it and
///   the block row right of it, `A22 -= L21 U12`, [`UPDATE_ROWS`] rows per workgroup.
///
/// CPU adapters with subgroups of a known size run `rows` and `update` as one subgroup per
/// workgroup, each shared word loaded by one lane and handed to the others by
/// `subgroupBroadcast` (llvmpipe runs every load lane by lane).
///
/// `None` (the one-workgroup kernels) with `WGPU_HLO_LU=workgroup`, where the state does not
/// fit one binding, or where no panel shape stays within the loop bound.
#[allow(clippy::too_many_arguments)]
fn tiled(
    name: &str,
    (what, desc): (&str, &str),
    w: &str,
    (batch, m, n, k, ld, stride): (u64, u64, u64, u64, u64, u64),
    state: &Binding,
    target: Target,
) -> Result<Option<(Vec<kernel::Kernel>, Vec<Launch>)>> {
    if std::env::var("WGPU_HLO_LU").is_ok_and(|v| v.trim() == "workgroup") {
        return Ok(None);
    }
    let bytes = if w == "f64" { 8 } else { 4 };
    if batch * stride * bytes > target.max_binding_size {
        return Ok(None);
    }
    let bound = target.max_invocation_iterations;
    let chosen = PanelShape::choose(m, k, w, target, bound);
    let Some(shape) = chosen else {
        return Ok(None);
    };
    let PanelShape { b, wg, r } = shape;
    // The matrix's words, then the pivots, then the permutation.
    let mn = m * ld;
    let mk = mn + k;
    let a = |i: &str, c: &str| format!("out0[base + ({i}) * {ld}u + ({c})]");
    let params = Binding {
        value: PARAMS,
        ty: TensorType::new(vec![1], ElementType::U32),
    };
    // The entry point up to `j0` (the block's first column) and `bw` (its width).
    let start = |header: &str, groups: u64| {
        format!(
            "var<workgroup> start: u32;\n\n{header}    let g = wid.y * nwg.x + wid.x;
    if (g >= {groups}u) {{ return; }}
    if (lid == 0u) {{ start = in0[0]; }}
    let j0 = workgroupUniformLoad(&start);
    let bw = min({b}u, {k}u - j0);
"
        )
    };
    // A kernel of the plan updating the state in place (read and written as vec4s with
    // `quads`).
    let step_of = |part: &str, does: &str, body: String, quads: bool, (groups, iterations)| {
        let kname = format!("{name}_{part}");
        kernel::in_workgroups_vec4(
            &kname,
            &format!(
                "kernel {kname}: {does}, for the block of {b} columns from j0 (a parameter) of an {desc}\nloop iterations per invocation: at most {iterations}\nfuses: {what}"
            ),
            vec![params.clone()],
            vec![state.clone()],
            &Default::default(),
            &body,
            if quads { &[0] } else { &[] },
            (groups, iterations),
            target,
        )
    };
    let step = |part: &str, does: &str, body: String, groups: u64, iterations: u64| {
        step_of(part, does, body, false, (groups, iterations))
    };
    let memory = format!(
        "var<workgroup> best: array<{w}, {wg}>;\nvar<workgroup> best_row: array<u32, {wg}>;\n"
    );
    let record = format!(
        "if (lid == 0u) {{\n            out0[base + {mn}u + j0 + c] = {w}(j0 + p);\n            \
         let q = out0[base + {mk}u + j0 + c];\n            \
         out0[base + {mk}u + j0 + c] = out0[base + {mk}u + j0 + p];\n            \
         out0[base + {mk}u + j0 + p] = q;\n        }}\n        "
    );
    let lanes = u64::from(target.caps.subgroup_size);
    let shared = target.cpu_adapter && target.caps.subgroup && matches!(lanes, 4 | 8 | 16);
    let (panel_body, panel_how) = if r > 0 && shared && w == "f32" && wg % lanes == 0 {
        (
            shared_register_panel(
                &start(&kernel::subgroup_entry_header(wg as u32), batch),
                (m, ld, stride, mn, mk),
                shape,
                lanes,
            ),
            format!("{r} rows per invocation of {wg} in private arrays, interchanged by their positions, each subgroup's candidate pivot row in workgroup memory (one barrier per column)"),
        )
    } else if r > 0 {
        let rb = r * b;
        (
            format!(
                "{memory}var<workgroup> prow: array<{w}, {b}>;\n{}    let base = g * {stride}u;
    let rows = {m}u - j0;
    var a: array<{w}, {rb}>;
    var pos: array<u32, {r}>;
    for (var t = 0u; t < {r}u; t = t + 1u) {{
        let s = lid + t * {wg}u;
        pos[t] = s;
        if (s < rows) {{
            for (var c = 0u; c < bw; c = c + 1u) {{ a[t * {b}u + c] = {load}; }}
        }}
    }}
    for (var c = 0u; c < bw; c = c + 1u) {{
        var bv = {w}(-1);
        var bi = c;
        for (var t = 0u; t < {r}u; t = t + 1u) {{
            if (lid + t * {wg}u < rows && pos[t] >= c) {{
                let v = abs(a[t * {b}u + c]);
                if (v > bv || (v == bv && pos[t] < bi)) {{ bv = v; bi = pos[t]; }}
            }}
        }}
        {pivot}for (var t = 0u; t < {r}u; t = t + 1u) {{
            if (lid + t * {wg}u < rows && pos[t] == p) {{
                for (var q = c; q < bw; q = q + 1u) {{ prow[q] = a[t * {b}u + q]; }}
            }}
            if (pos[t] == c) {{ pos[t] = p; }} else if (pos[t] == p) {{ pos[t] = c; }}
        }}
        {record}workgroupBarrier();
        let d = prow[c];
        {recip}var l: array<{w}, {r}>;
        for (var t = 0u; t < {r}u; t = t + 1u) {{
            var lt = {w}(0);
            if (pos[t] > c) {{
                lt = a[t * {b}u + c];
                if (d != {w}(0)) {{
                    let q0 = lt / d;
                    lt = select(q0, fma(fma(-q0, d, lt), rd, q0), correct && abs(q0) <= big);
                    a[t * {b}u + c] = lt;
                }}
            }}
            l[t] = lt;
        }}
        for (var q = c + 1u; q < bw; q = q + 1u) {{
            let u = prow[q];
            for (var t = 0u; t < {r}u; t = t + 1u) {{
                let x = a[t * {b}u + q];
                a[t * {b}u + q] = select(x, x - l[t] * u, pos[t] > c);
            }}
        }}
    }}
    for (var t = 0u; t < {r}u; t = t + 1u) {{
        if (lid + t * {wg}u < rows) {{
            for (var c = 0u; c < bw; c = c + 1u) {{ {store} = a[t * {b}u + c]; }}
        }}
    }}
}}
",
                start(&header(w, wg, target), batch),
                load = a("j0 + s", "j0 + c"),
                store = a("j0 + pos[t]", "j0 + c"),
                pivot = pivot_search(w, wg, target),
                recip = corrected_division(w),
            ),
            format!("{r} rows per invocation of {wg} in private arrays, interchanged by their positions"),
        )
    } else {
        (
            format!(
                "{memory}{}    let base = g * {stride}u;
    for (var c = 0u; c < bw; c = c + 1u) {{
        let j = j0 + c;
        var bv = {w}(-1);
        var bi = j;
        for (var i = j + lid; i < {m}u; i = i + {wg}u) {{
            let v = abs({aij});
            if (v > bv) {{ bv = v; bi = i; }}
        }}
        {pivot}if (p != j) {{
            for (var q = lid; q < bw; q = q + {wg}u) {{
                let t = {ajq};
                {ajq} = {apq};
                {apq} = t;
            }}
        }}
        let pp = p - j0;
        {record}storageBarrier();
        let d = {ajj};
        {recip}for (var i = j + 1u + lid; i < {m}u; i = i + {wg}u) {{
            var lt = {aij};
            if (d != {w}(0)) {{
                let q0 = lt / d;
                lt = select(q0, fma(fma(-q0, d, lt), rd, q0), correct && abs(q0) <= big);
                {aij} = lt;
            }}
            for (var q = c + 1u; q < bw; q = q + 1u) {{
                {aiq} = {aiq} - lt * {ajq};
            }}
        }}
        storageBarrier();
    }}
}}
",
                start(&header(w, wg, target), batch),
                aij = a("i", "j"),
                ajj = a("j", "j"),
                ajq = a("j", "j0 + q"),
                apq = a("p", "j0 + q"),
                aiq = a("i", "j0 + q"),
                pivot = pivot_search(w, wg, target),
                recip = corrected_division(w),
                record = record.replace("j0 + p", "j0 + pp"),
            ),
            format!("a workgroup of {wg}, the rows swapped in the state"),
        )
    };
    let panel = step(
        "panel",
        &format!("the block's columns from the diagonal down factored with partial pivoting, one workgroup per matrix, {panel_how}"),
        panel_body,
        batch,
        shape.iterations(m, w, target),
    )?;
    let mut kernels = vec![panel];
    // One subgroup per workgroup where the adapter is a CPU with subgroups of a known size.
    let threads = if shared { lanes } else { TILED_WG };
    let lane = if shared { "sgl" } else { "lid" };
    let entry = |threads: u64| {
        if shared {
            kernel::subgroup_entry_header(threads as u32)
        } else {
            kernel::entry_header(threads as u32)
        }
    };
    let has_rows = n > b;
    let has_update = m > b && n > b;
    // On CPU adapters with subgroups, a lane takes four adjacent columns as one vec4 where
    // whole quads stay on one side of the block (columns, rows, the block and its start in
    // multiples of 4 words): the interchanges move vec4s and the solve carries vec4s, the
    // same operations per column in the same order (bit for bit the column-per-lane kernel's
    // results) with a quarter of the lane-by-lane loads and stores.
    let quad_rows = shared
        && w == "f32"
        && quads(n, ld, stride)
        && k % 4 == 0
        && b % 4 == 0
        && !crate::fusion::switched_off("WGPU_HLO_LU_QUAD_ROWS");
    if has_rows && quad_rows {
        let groups = batch * n.div_ceil(4 * lanes);
        let (body, iterations) =
            quad_rows_body(&start(&entry(lanes), groups), (m, n, ld, stride, b), lanes);
        kernels.push(step_of(
            "rows",
            "the block's row interchanges applied to every other column, four adjacent columns per lane as a vec4, and the block row of U right of it solved against the block's unit lower triangle",
            body,
            true,
            (groups, iterations),
        )?);
    } else if has_rows {
        let per = n.div_ceil(threads);
        let xs = b.div_ceil(lanes.max(1)) * lanes.max(1);
        let solve = if shared {
            let mut s = format!(
                "        for (var k0 = 0u; k0 < i; k0 = k0 + {lanes}u) {{\n            let v = select({w}(0), {}, k0 + sgl < i);\n",
                a("j0 + i", "j0 + min(k0 + sgl, i)")
            );
            for u in 0..lanes {
                s.push_str(&format!(
                    "            s = s - x[k0 + {u}u] * subgroupBroadcast(v, {u}u);\n"
                ));
            }
            s.push_str("        }\n");
            s
        } else {
            format!(
                "        for (var q = 0u; q < i; q = q + 1u) {{ s = s - {} * x[q]; }}\n",
                a("j0 + i", "j0 + q")
            )
        };
        let rows_body = format!(
            "{}    let base = (g / {per}u) * {stride}u;
    let first = (g % {per}u) * {threads}u;
    let idx = first + {lane};
    let live = idx + bw < {n}u;
    let c = select(idx, idx + bw, idx >= j0);
    let cc = min(c, {n1}u);
    if (live) {{
        for (var q = 0u; q < bw; q = q + 1u) {{
            let pr = u32(out0[base + {mn}u + j0 + q]);
            if (pr != j0 + q) {{
                let t = {aqc};
                {aqc} = {apc};
                {apc} = t;
            }}
        }}
    }}
    if (first + {threads}u > j0 && first + bw < {n}u) {{
        var x: array<{w}, {xs}>;
        for (var i = 0u; i < bw; i = i + 1u) {{
            var s = {aic};
{solve}            x[i] = s;
            if (live && c >= j0 + bw) {{ {aic} = s; }}
        }}
    }}
}}
",
            start(&entry(threads), batch * per),
            n1 = n - 1,
            aqc = a("j0 + q", "c"),
            apc = a("pr", "c"),
            aic = a("j0 + i", "cc"),
        );
        let rows_iterations = b + b * if shared { b.div_ceil(lanes) } else { b };
        kernels.push(step(
            "rows",
            "the block's row interchanges applied to every other column, one thread per column, and the block row of U right of it solved against the block's unit lower triangle",
            rows_body,
            batch * per,
            rows_iterations,
        )?);
    }
    let vec4_update = shared && w == "f32" && b % 4 == 0 && UPDATE_ROWS % lanes == 0;
    if has_update && vec4_update {
        let rr = UPDATE_ROWS;
        let strip = lanes * 4 * UPDATE_VEC4S_PER_LANE;
        let row_blocks = (m - b).div_ceil(rr);
        let col_blocks = (n - b).div_ceil(strip);
        let per = row_blocks * col_blocks;
        let body = shared_vec4_update(
            &start(&entry(lanes), batch * per),
            (m, n, ld, stride),
            (rr, lanes, per, col_blocks),
        );
        let kname = format!("{name}_update");
        kernels.push(kernel::in_workgroups_vec4(
            &kname,
            &format!(
                "kernel {kname}: the trailing matrix loses the product of the block's columns below it and the block row right of it, {rr} rows by {strip} columns per workgroup of one subgroup, the state's words four at a time, for the block of {b} columns from j0 (a parameter) of an {desc}\nloop iterations per invocation: at most {}\nfuses: {what}\n{}",
                b / 4,
                texture_reads::state_copy_line(0, (0, (batch - 1) * stride + mn))
            ),
            vec![params.clone()],
            vec![state.clone()],
            &Default::default(),
            &body,
            &[0],
            (batch * per, b / 4),
            target,
        )?);
    } else if has_update {
        let rr = UPDATE_ROWS;
        let cols = if shared { UPDATE_COLUMNS_PER_LANE } else { 1 };
        // The block's columns below it and its row right of it, which no invocation writes,
        // and the old values of each invocation's own elements: from a copy on CPU adapters
        // (`texture_reads::STATE_MARK`, see [`shared_vec4_update`]).
        let load = |i: &str, c: &str| {
            format!(
                "out0[{} base + ({i}) * {ld}u + ({c})]",
                texture_reads::STATE_MARK
            )
        };
        let strip = if shared { lanes * cols } else { TILED_WG };
        let row_blocks = (m - b).div_ceil(rr);
        let col_blocks = (n - b).div_ceil(strip);
        let per = row_blocks * col_blocks;
        let mut accs = String::new();
        let mut inner = String::new();
        let mut stores = String::new();
        for c in 0..cols {
            let col = if shared {
                format!("c0 + sgl + {}u", lanes * c)
            } else {
                "c0 + lid".to_string()
            };
            accs.push_str(&format!("    let col{c} = {col};\n"));
            inner.push_str(&format!(
                "        let u{c} = {};\n",
                load("kc", &format!("min(col{c}, {}u)", n - 1))
            ));
        }
        if shared {
            for t in 0..rr / lanes {
                inner.push_str(&format!(
                    "        let l{t} = {};\n",
                    load(&format!("min(i0 + sgl + {}u, {}u)", lanes * t, m - 1), "kc")
                ));
            }
        }
        for q in 0..rr {
            let x = if shared {
                format!("subgroupBroadcast(l{}, {}u)", q / lanes, q % lanes)
            } else {
                load(&format!("min(i0 + {q}u, {}u)", m - 1), "kc")
            };
            inner.push_str(&format!("        let x{q} = {x};\n"));
            for c in 0..cols {
                accs.push_str(&format!("    var acc{q}_{c}: {w} = {w}(0);\n"));
                inner.push_str(&format!("        acc{q}_{c} = acc{q}_{c} + x{q} * u{c};\n"));
                let (i, col) = (format!("i0 + {q}u"), format!("col{c}"));
                let e = a(&i, &col);
                let old = super::old_value(&e, load(&i, &col));
                stores.push_str(&format!(
                    "    if (i0 + {q}u < {m}u && col{c} < {n}u) {{ {e} = {old} - acc{q}_{c}; }}\n"
                ));
            }
        }
        let update_body = format!(
            "{}    let base = (g / {per}u) * {stride}u;
    let rb = (g % {per}u) / {col_blocks}u;
    let cb = g % {col_blocks}u;
    let i0 = j0 + bw + rb * {rr}u;
    let c0 = j0 + bw + cb * {strip}u;
    if (i0 >= {m}u || c0 >= {n}u) {{ return; }}
{accs}    for (var kk = 0u; kk < bw; kk = kk + 1u) {{
        let kc = j0 + kk;
{inner}    }}
{stores}}}
",
            start(&entry(if shared { lanes } else { TILED_WG }), batch * per),
        );
        let kname = format!("{name}_update");
        kernels.push(kernel::in_workgroups_vec4(
            &kname,
            &format!(
                "kernel {kname}: the trailing matrix loses the product of the block's columns below it and the block row right of it, {rr} rows by {strip} columns per workgroup, for the block of {b} columns from j0 (a parameter) of an {desc}\nloop iterations per invocation: at most {b}\nfuses: {what}\n{}",
                texture_reads::state_copy_line(0, (0, (batch - 1) * stride + mn))
            ),
            vec![params.clone()],
            vec![state.clone()],
            &Default::default(),
            &update_body,
            &[],
            (batch * per, b),
            target,
        )?);
    }
    // Kernel 0 is the plan's `init`, 1 the panel.
    let rows_index = 2;
    let update_index = rows_index + usize::from(has_rows);
    // The blocks whose rows fit half the panel's take a panel kernel of their own on fewer
    // invocations (CPU adapters, where invocations cost more than rows).
    let lower = if r > 0 && shared && w == "f32" && m >= 4 * b {
        let half = m.div_ceil(2);
        [8u64, 16, 32, 64, 128, 256]
            .into_iter()
            .filter(|&g| g % lanes == 0 && g < wg)
            .map(|g| PanelShape {
                b,
                wg: g,
                r: half.div_ceil(g),
            })
            .find(|s| s.r * b <= REGISTER_ELEMENTS && s.iterations(half, w, target) <= bound)
    } else {
        None
    };
    let lower_index = kernels.len() + 1;
    if let Some(low) = lower {
        kernels.push(step(
            "panel_lower",
            &format!(
                "the block's columns from the diagonal down factored with partial pivoting where at most {} rows remain, one workgroup per matrix, {} rows per invocation of {} in private arrays, interchanged by their positions, one barrier per column",
                low.r * low.wg,
                low.r,
                low.wg
            ),
            shared_register_panel(
                &start(&kernel::subgroup_entry_header(low.wg as u32), batch),
                (m, ld, stride, mn, mk),
                low,
                lanes,
            ),
            batch,
            low.iterations(m.div_ceil(2), w, target),
        )?);
    }
    let mut launches = Vec::new();
    for j0 in (0..k).step_by(b as usize) {
        let bw = b.min(k - j0);
        let panel = match lower {
            Some(low) if m - j0 <= low.r * low.wg => lower_index,
            _ => 1,
        };
        launches.push(Launch::updating(panel, vec![j0 as u32], 0));
        if has_rows {
            launches.push(Launch::updating(rows_index, vec![j0 as u32], 0));
        }
        if has_update && j0 + bw < m && j0 + bw < n {
            launches.push(Launch::updating(update_index, vec![j0 as u32], 0));
        }
    }
    Ok(Some((kernels, launches)))
}

/// Columns of the panel per copy of [`shared_register_panel`]'s column loop: the copy for
/// columns from `lo` leaves the block's words left of `lo` alone. lavapipe, the panels of a
/// 512 x 512 LU: 8 columns 8.2 ms (0.49 s to compile the plan), 16 8.9-10 ms (0.37-0.44 s),
/// one copy 9.4 ms (0.23 s).
const PANEL_CHUNK: u64 = 16;

/// The body and loop bound of [`tiled`]'s rows step with a vec4 of four adjacent columns per
/// lane (`lanes` a subgroup, one subgroup a workgroup, `entry` the entry point up to `j0` and
/// `bw`), the state bound as vec4s: the block's row interchanges applied to every column
/// outside it, then the block row of U right of it solved against the block's unit lower
/// triangle, four columns at a time. Needs `n`, `ld`, `stride` and the block width multiples
/// of 4 ([`quads`]).
fn quad_rows_body(
    entry: &str,
    (m, n, ld, stride, b): (u64, u64, u64, u64, u64),
    lanes: u64,
) -> (String, u64) {
    let per = n.div_ceil(4 * lanes);
    let mn = m * ld;
    let xs = b.div_ceil(lanes) * lanes;
    // A word of the state, and the vec4 of the row's four columns from c (a multiple of 4).
    let word = |e: &str| format!("out0[({e}) >> 2u][({e}) & 3u]");
    let quad = |i: &str, c: &str| format!("out0[(base + ({i}) * {ld}u + ({c})) >> 2u]");
    let mut solve = format!(
        "        for (var k0 = 0u; k0 < i; k0 = k0 + {lanes}u) {{\n            let v = select(0.0, {}, k0 + sgl < i);\n",
        word(&format!("base + (j0 + i) * {ld}u + j0 + min(k0 + sgl, i)"))
    );
    for u in 0..lanes {
        solve.push_str(&format!(
            "            s = s - x[k0 + {u}u] * subgroupBroadcast(v, {u}u);\n"
        ));
    }
    solve.push_str("        }\n");
    let body = format!(
        "{entry}    let base = (g / {per}u) * {stride}u;
    let first = (g % {per}u) * {lanes}u * 4u;
    let idx = first + sgl * 4u;
    let live = idx + bw < {n}u;
    let c = select(idx, idx + bw, idx >= j0);
    let cc = min(c, {n4}u);
    if (live) {{
        for (var q = 0u; q < bw; q = q + 1u) {{
            let pr = u32({pivot});
            if (pr != j0 + q) {{
                let t = {aqc};
                {aqc} = {apc};
                {apc} = t;
            }}
        }}
    }}
    if (first + {span}u > j0 && first + bw < {n}u) {{
        var x: array<vec4<f32>, {xs}>;
        for (var i = 0u; i < bw; i = i + 1u) {{
            var s = {aic};
{solve}            x[i] = s;
            if (live && c >= j0 + bw) {{ {aic} = s; }}
        }}
    }}
}}
",
        n4 = n - 4,
        span = 4 * lanes,
        pivot = word(&format!("base + {mn}u + j0 + q")),
        aqc = quad("j0 + q", "c"),
        apc = quad("pr", "c"),
        aic = quad("j0 + i", "cc"),
    );
    (body, b + b * b.div_ceil(lanes))
}

/// The panel kernel of [`tiled`] on CPU adapters with subgroups of `lanes`, f32: each
/// invocation holds `r` rows of `b` words as separate variables, every index a constant
/// (llvmpipe puts a private array indexed at run time in per-invocation scratch memory and
/// loads and stores it lane by lane). Column `c`'s words are picked by selects; the update
/// runs over the words from the column's chunk of [`PANEL_CHUNK`] on, each kept or updated
/// by a select. One barrier per column: each subgroup's candidate (the largest magnitude of
/// its rows at or below the diagonal, the first in LAPACK's order on ties; a NaN counts
/// below every number, so a column of NaNs keeps its pivot) writes its row to workgroup
/// memory; after the barrier each subgroup picks the pivot among the candidates (each lane
/// a share of them, then subgroup operations) and reads its words there. The candidates
/// alternate between two buffers by column: the next column's are written after its
/// search, which no invocation finishes before every other has passed this column's
/// barrier.
///
/// llvmpipe runs a workgroup's subgroups as coroutines on one thread, switching at each
/// barrier, and each switch costs more than a column's arithmetic: lavapipe, the 16 panels
/// of a 512 x 512 LU (32 columns), 64 / 128 / 256 invocations (8 / 4 / 2 rows each) 8.8 /
/// 13.5 / 28.7 ms (with every invocation scanning all the candidates 9.5 / 18 / 44 ms; 32
/// invocations, 16 rows, 6.6 ms but 1.7 s to compile), hence [`PanelShape`]'s smallest
/// workgroup. With the dynamically indexed private arrays of the other register variant
/// they took 30 ms at 64 columns.
fn shared_register_panel(
    start: &str,
    (m, ld, stride, mn, mk): (u64, u64, u64, u64, u64),
    PanelShape { b, wg, r }: PanelShape,
    lanes: u64,
) -> String {
    let groups = wg / lanes;
    let a = |i: &str, c: &str| format!("out0[base + ({i}) * {ld}u + ({c})]");
    let mut s = format!(
        "var<workgroup> cand_v: array<f32, {g2}>;
var<workgroup> cand_p: array<u32, {g2}>;
var<workgroup> cand_row: array<f32, {g2b}>;
{start}    let base = g * {stride}u;
    let rows = {m}u - j0;
",
        g2 = 2 * groups,
        g2b = 2 * groups * b,
    );
    for t in 0..r {
        s.push_str(&format!(
            "    let s{t} = lid + {}u;\n    let on{t} = s{t} < rows;\n    var pos{t} = s{t};\n",
            t * wg
        ));
        for q in 0..b {
            s.push_str(&format!(
                "    var a{t}_{q} = 0.0;\n    if (on{t} && {q}u < bw) {{ a{t}_{q} = {}; }}\n",
                a(&format!("j0 + s{t}"), &format!("j0 + {q}u"))
            ));
        }
    }
    for lo in (0..b).step_by(PANEL_CHUNK as usize) {
        s.push_str(&format!(
            "    for (var c = {lo}u; c < min(bw, {hi}u); c = c + 1u) {{\n        var bv = -2.0;\n        var bi = 0xffffffffu;\n        var bt = 0u;\n",
            hi = (lo + PANEL_CHUNK).min(b)
        ));
        for t in 0..r {
            s.push_str(&format!("        var x{t} = a{t}_{lo};\n"));
            for q in lo + 1..(lo + PANEL_CHUNK).min(b) {
                s.push_str(&format!(
                    "        x{t} = select(x{t}, a{t}_{q}, c == {q}u);\n"
                ));
            }
            s.push_str(&format!(
                "        if (on{t} && pos{t} >= c) {{
                let y = abs(x{t});
                let v = select(-1.0, y, y == y);
                if (v > bv || (v == bv && pos{t} < bi)) {{ bv = v; bi = pos{t}; bt = {t}u; }}
            }}
    "
            ));
        }
        s.push_str(
            "        let sv = subgroupMax(bv);
            let sp = subgroupMin(select(0xffffffffu, bi, bv == sv));
            let who = subgroupMin(select(0xffffffffu, sgl, bv == sv && bi == sp));
            let half = (c & 1u) * GROUPSu;
            if (sgl == who) {
                cand_v[half + sgid] = sv;
                cand_p[half + sgid] = sp;
                let row = (half + sgid) * Bu;
    "
            .replace("GROUPS", &groups.to_string())
            .replace("B", &b.to_string())
            .as_str(),
        );
        for q in lo..b {
            let mut v = "a0_Q".replace('Q', &q.to_string());
            for t in 1..r {
                v = format!("select({v}, a{t}_{q}, bt == {t}u)");
            }
            s.push_str(&format!("            cand_row[row + {q}u] = {v};\n"));
        }
        s.push_str(&format!(
            "        }}
            workgroupBarrier();
            var wv = -3.0;
            var wp = 0xffffffffu;
            var wh = 0u;
            for (var h = sgl; h < {groups}u; h = h + {lanes}u) {{
                let ov = cand_v[half + h];
                let op = cand_p[half + h];
                if (ov > wv || (ov == wv && op < wp)) {{ wv = ov; wp = op; wh = h; }}
            }}
            let mv = subgroupMax(wv);
            let p = subgroupMin(select(0xffffffffu, wp, wv == mv));
            let wsg = subgroupMin(select(0xffffffffu, wh, wv == mv && wp == p));
            let prow = (half + wsg) * {b}u;
            if (lid == 0u) {{
                out0[base + {mn}u + j0 + c] = f32(j0 + p);
                let q = out0[base + {mk}u + j0 + c];
                out0[base + {mk}u + j0 + c] = out0[base + {mk}u + j0 + p];
                out0[base + {mk}u + j0 + p] = q;
            }}
            let d = cand_row[prow + c];
            {recip}",
            recip = corrected_division("f32"),
        ));
        for t in 0..r {
            s.push_str(&format!(
                "pos{t} = select(select(pos{t}, c, pos{t} == p), p, pos{t} == c);
            let act{t} = pos{t} > c;
            var l{t} = x{t};
            if (d != 0.0) {{
                let q0 = x{t} / d;
                l{t} = select(q0, fma(fma(-q0, d, x{t}), rd, q0), correct && abs(q0) <= big);
            }}
            "
            ));
        }
        for q in lo..b {
            s.push_str(&format!("let u{q} = cand_row[prow + {q}u];\n        "));
            for t in 0..r {
                s.push_str(&format!(
                    "a{t}_{q} = select(a{t}_{q}, select(l{t}, a{t}_{q} - l{t} * u{q}, c < {q}u), act{t} && c <= {q}u);\n        "
                ));
            }
        }
        s.push_str("\n    }\n");
    }
    for t in 0..r {
        s.push_str(&format!("    if (on{t}) {{\n"));
        for q in 0..b {
            s.push_str(&format!(
                "        if ({q}u < bw) {{ {} = a{t}_{q}; }}\n",
                a(&format!("j0 + pos{t}"), &format!("j0 + {q}u"))
            ));
        }
        s.push_str("    }\n");
    }
    s.push_str("}\n");
    s
}

/// The update kernel of [`tiled`] on CPU adapters with subgroups of `lanes`, f32: one
/// subgroup per workgroup, `rr` rows by [`UPDATE_VEC4S_PER_LANE`] groups of four columns per
/// lane, the state read and written as `vec4`s (llvmpipe loads a `vec4` from a storage
/// buffer in one loop over the lanes, a scalar in one loop each). Per four steps of the
/// block each lane loads four words of each of its rows of the block's columns (handed to
/// the other lanes by `subgroupBroadcast`) and four of the block row for each group.
fn shared_vec4_update(
    start: &str,
    (m, n, ld, stride): (u64, u64, u64, u64),
    (rr, lanes, per, col_blocks): (u64, u64, u64, u64),
) -> String {
    let groups = UPDATE_VEC4S_PER_LANE;
    let strip = lanes * 4 * groups;
    let at = |i: &str, c: &str| format!("out0[(base + ({i}) * {ld}u + {c}) / 4u]");
    // The block's columns below it and its row right of it, which no invocation writes, and
    // the old values of the elements each invocation updates (only it writes them): from a
    // copy on CPU adapters (`texture_reads::STATE_MARK`). Reading the old values from the
    // copy, not the state: 512 x 512 LU, first update (480 x 480 x 32), lavapipe on a 2-core
    // AMD host, GPU time 1.47-1.48 -> 0.82-0.86 ms; llvmpipe loads from a storage buffer lane
    // by lane and component by component, with bounds checks, and with k only 32 the
    // read-modify-write of the tile cost more than the products (1.02 ms with no product).
    // `WGPU_HLO_COPY_OLD_VALUES=0` keeps the storage loads.
    let load = |i: &str, c: &str| {
        format!(
            "out0[{} (base + ({i}) * {ld}u + {c}) / 4u]",
            texture_reads::STATE_MARK
        )
    };
    let mut s = format!(
        "{start}    let base = (g / {per}u) * {stride}u;
    let rb = (g % {per}u) / {col_blocks}u;
    let cb = g % {col_blocks}u;
    let i0 = j0 + bw + rb * {rr}u;
    let c0 = j0 + bw + cb * {strip}u;
    if (i0 >= {m}u || c0 >= {n}u) {{ return; }}
"
    );
    for v in 0..groups {
        s.push_str(&format!(
            "    let cs{v} = c0 + sgl * {}u + {}u;\n    let cl{v} = min(cs{v}, {}u);\n",
            4 * groups,
            4 * v,
            ld - 4
        ));
        for q in 0..rr {
            s.push_str(&format!("    var acc{q}_{v} = vec4<f32>();\n"));
        }
    }
    s.push_str("    for (var kk = 0u; kk < bw; kk = kk + 4u) {\n        let kc = j0 + kk;\n");
    for t in 0..rr / lanes {
        s.push_str(&format!(
            "        let l{t} = {};\n",
            load(&format!("min(i0 + sgl + {}u, {}u)", lanes * t, m - 1), "kc")
        ));
    }
    for e in 0..4 {
        for v in 0..groups {
            s.push_str(&format!(
                "        let u{e}_{v} = {};\n",
                load(&format!("kc + {e}u"), &format!("cl{v}"))
            ));
        }
    }
    // Each accumulator takes the four steps in one expression: the same sums in the same
    // order as a statement per step, but llvmpipe, which spills the accumulators, loads and
    // stores each once a trip (`dot_subgroup::chains`; `WGPU_HLO_DOT_CHAINS=0`: a statement
    // per step).
    let chained = !crate::fusion::switched_off("WGPU_HLO_DOT_CHAINS");
    for q in 0..rr {
        for e in 0..4 {
            let comp = ["x", "y", "z", "w"][e as usize];
            s.push_str(&format!(
                "        let x{q}_{e} = subgroupBroadcast(l{}.{comp}, {}u);\n",
                q / lanes,
                q % lanes
            ));
        }
        for v in 0..groups {
            if chained {
                let terms: Vec<String> = (0..4).map(|e| format!("x{q}_{e} * u{e}_{v}")).collect();
                let e = crate::codegen::dot_subgroup::chained_sum(&format!("acc{q}_{v}"), &terms);
                s.push_str(&format!("        acc{q}_{v} = {e};\n"));
            } else {
                for e in 0..4 {
                    s.push_str(&format!(
                        "        acc{q}_{v} = acc{q}_{v} + x{q}_{e} * u{e}_{v};\n"
                    ));
                }
            }
        }
    }
    s.push_str("    }\n");
    for q in 0..rr {
        for v in 0..groups {
            let (i, c) = (format!("i0 + {q}u"), format!("cs{v}"));
            let e = at(&i, &c);
            let old = super::old_value(&e, load(&i, &c));
            s.push_str(&format!(
                "    if (i0 + {q}u < {m}u && cs{v} < {n}u) {{ {e} = {old} - acc{q}_{v}; }}\n"
            ));
        }
    }
    s.push_str("}\n");
    s
}
