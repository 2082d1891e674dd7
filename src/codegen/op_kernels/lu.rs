//! `custom_call @wgpu_hlo.lu(a)`, `a: [..., m, n]` f32/f64 -> `(lu: [..., m, n], pivots:
//! [..., min(m, n)] i32, permutation: [..., m] i32)`: LU factorization with partial pivoting
//! as LAPACK's `getrf` returns it (the pivot of each column is the first row of largest
//! magnitude; a zero pivot leaves its column unscaled), which the plugin's rule for JAX's
//! `lu` emits (`python/jax_plugins/wgpu/lowerings.py`).
//!
//! One workgroup per matrix, right-looking, in one state buffer per matrix (the matrix, then
//! the pivots and the permutation as numbers of the matrix's type): for each column, its
//! threads find the pivot (strided, then a tree in workgroup memory), swap the rows, scale the
//! column under the pivot and update the trailing matrix (a thread per column, down its rows:
//! neighbouring threads touch neighbouring elements), a storage barrier between steps.
//! Tall matrices on CPU adapters keep their rows in registers instead ([`RowsInRegisters`]).
//! Launches take ranges of columns within the loop bound; a last kernel splits the state into
//! the three results. JAX's own lowering (a loop over columns of whole-matrix ops) launched
//! ~18 kernels a column: `slogdet` of 512 x 512 took 0.57 s on lavapipe.

use super::{result_binding, temp, Plan, PARAMS};
use crate::codegen::expr::Binding;
use crate::codegen::kernel;
use crate::codegen::loop_kernel::Target;
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
    let mn = m * n;
    let stride = mn + k + m;
    let state_type = TensorType::new(vec![(batch * stride) as i64], at.dtype);
    let state = Binding {
        value: temp(0),
        ty: state_type.clone(),
    };
    let input = Binding {
        value: a,
        ty: at.clone(),
    };
    let desc = format!(
        "LU factorization of {batch} matrices {m}x{n} {}",
        at.dtype.mlir_name()
    );
    // The state: the matrix, zero pivots, the identity permutation.
    let init = kernel::threaded(
        &format!("{name}_init"),
        &format!("kernel {name}_init: the state of an {desc}\nfuses: {what}"),
        vec![input],
        vec![state.clone()],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {stride}u;\n    let e = tid % {stride}u;\n    \
             if (e < {mn}u) {{ out0[tid] = in0[mat * {mn}u + e]; }}\n    \
             else if (e < {mk}u) {{ out0[tid] = {w}(0); }}\n    \
             else {{ out0[tid] = {w}(e - {mk}u); }}\n",
            mk = mn + k
        ),
        batch * stride,
        0,
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
    let mn = m * n;
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
    // The results from the state: one thread per matrix element.
    let lu = Binding {
        value: *lu,
        ty: at.clone(),
    };
    let split = kernel::threaded(
        &format!("{name}_out"),
        &format!("kernel {name}_out: the factors, pivots and permutation of an {desc}\nfuses: {what}"),
        vec![state],
        vec![lu, pivots, perm],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {mn}u;\n    let e = tid % {mn}u;\n    let base = mat * {stride}u;\n    \
             out0[tid] = in0[base + e];\n    \
             if (e < {k}u) {{ out1[mat * {k}u + e] = i32(in0[base + {mn}u + e]); }}\n    \
             if (e < {m}u) {{ out2[mat * {m}u + e] = i32(in0[base + {mk}u + e]); }}\n",
            mk = mn + k
        ),
        batch * mn,
        0,
        target,
    )?;
    Ok(Plan::ranged(init, columns, split, state_type, ranges))
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
