//! Singular value decompositions (`custom_call @wgpu_hlo.svd`, with U and V: [`plan`]; the
//! values alone: [`plan_values`]) by reduction to bidiagonal form and the implicitly shifted
//! QR iteration on the bidiagonal (Golub and Reinsch; LAPACK's `sgebrd`, `sbdsqr`, `sormbr`),
//! f32, batched, on the device, instead of one-sided Jacobi sweeps. Jacobi costs about ten sweeps of `m n^2` work, each a chain of
//! `n - 1` barrier-separated rounds in one workgroup; this costs one `m n^2` reduction, a QR
//! iteration whose chains are short scalar loops, and two back-transformations.
//!
//! 1. `_bidiag` ([`super::tridiagonal::bidiag_stage`]): one workgroup per matrix reduces the
//!    scaled matrix `g A` to upper bidiagonal `B = Q^T (g A) P` and keeps the reflectors.
//! 2. `_qr` (f64): `B = U_B diag(d) V_B^T` by QR sweeps, each shifted by the eigenvalue of the
//!    trailing 2x2 block of `B^T B` nearer its last diagonal entry. One thread per workgroup
//!    finds the unreduced block, chases the bulge through `d` and `e` in workgroup memory and
//!    records the rotations from the right (for `V_B`) and from the left (for `U_B`); where a
//!    diagonal entry above the block is negligible, rotations from the left first zero the
//!    superdiagonal entry next to it (the block splits). Then every thread applies the
//!    recorded rotations to its vec4 of rows of `U_B` or `V_B` (by columns; where workgroup
//!    memory holds two sets of rotations, two sweeps' chains in one pass): half the
//!    workgroups of a matrix hold rows of `V_B`, half rows of `U_B`, and all repeat the cheap
//!    scalar chase. For the values alone one workgroup per matrix chases, with no vectors
//!    (llvmpipe, 256x256: 5.2 ms, where the QL iteration on the `2n x 2n` Golub-Kahan
//!    tridiagonal this replaced took 24.3). Launches resume where the last one stopped (`d`, `e` and the status
//!    alternate between two copies); a matrix with a singular value that needs more than 30
//!    sweeps, or that is not done after the last launch, gets NaN results.
//! 3. `_values` ranks `|d|` (descending) and writes `s = |d| / g`; `_u`, `_v` write the
//!    columns of `U_B` and `V_B` in that order (a negative `d` flips its column of `V_B`);
//!    `_back_u`, `_back_v` apply the reflectors (`U = Q [U_B; 0]`, `V = P V_B`, a vec4 of
//!    columns per thread, the last reflectors first) and `_out_u`, `_out_v` drop the padding.

use super::jacobi::{binding, check_results, params};
use super::tridiagonal::{
    bidiag_stage, bidiag_stride, bidiag_subs, bidiag_workgroup, budget, ql_step, svd_operand, Ctx,
    MinN, SvdOperand, MAX_ITERATIONS, PLANNED_ITERATIONS, QL_STATUS,
};
use super::{temp, Launch, Plan};
use crate::codegen::expr::Binding;
use crate::codegen::kernel;
use crate::codegen::loop_kernel::Target;
use crate::error::Result;
use crate::ir::{ElementType, Function, Operation, TensorType};

/// Smallest n this route takes by default. CPU adapters: below 49 the Jacobi kernels are as
/// fast (llvmpipe, 48x48: 1.9 against 2.2 ms), past it slower (64x64: 13.1 against 4.0 ms;
/// 128x128: 58 against 21 ms; 256x256: 488 against 124 ms). GPUs (NVIDIA H200, 2026-11-30):
/// Jacobi 9.0 / 68.6 / 638 ms at 128 / 256 / 512 against 17.2 / 68.1 / 313 ms here.
const MIN_N: MinN = MinN { cpu: 49, gpu: 256 };

/// Smallest n [`plan_values`] takes by default. On GPUs the Jacobi kernels (H200, 2026-11-30:
/// 6.4 / 48 / 410 ms at 128 / 256 / 512) were faster than the QL route on the Golub-Kahan
/// tridiagonal this replaced (33.6 / 132 / 541 ms); this route is not yet measured there.
const VALUES_MIN_N: MinN = MinN {
    cpu: 65,
    gpu: u64::MAX,
};

/// Threads per workgroup of the back-transformations (several workgroups per matrix).
const BACK_WG: u64 = 16;

/// The plan for `custom_call @wgpu_hlo.svd` with U and V (`a: [..., m, n]`, `m >= n` ->
/// `(s: [..., n], u: [..., m, n], v: [..., n, n])`) when this route is chosen for it
/// (`WGPU_HLO_SVD_BIDIAGONAL`), else `None` (the Jacobi kernels take it). `fallback`: the
/// Jacobi kernels refused the matrix.
pub fn plan(
    name: &str,
    f: &Function,
    op: &Operation,
    target: Target,
    fallback: bool,
) -> Result<Option<Plan>> {
    plan_svd(name, f, op, target, fallback, true)
}

/// The plan for `custom_call @wgpu_hlo.svd` without U and V (`a: [..., m, n]`, `m >= n` ->
/// `s: [..., n]`): the bidiagonal reduction, then the QR sweeps' chase alone.
pub fn plan_values(
    name: &str,
    f: &Function,
    op: &Operation,
    target: Target,
    fallback: bool,
) -> Result<Option<Plan>> {
    plan_svd(name, f, op, target, fallback, false)
}

/// [`plan`] (`vectors`) or [`plan_values`].
fn plan_svd(
    name: &str,
    f: &Function,
    op: &Operation,
    target: Target,
    fallback: bool,
    vectors: bool,
) -> Result<Option<Plan>> {
    let (results, min_n) = if vectors {
        (3, MIN_N)
    } else {
        (1, VALUES_MIN_N)
    };
    let Some(SvdOperand {
        what,
        a,
        at,
        m,
        n,
        batch,
    }) = svd_operand(f, op, results, min_n, target, fallback)?
    else {
        return Ok(None);
    };
    let budget = budget(target);
    let step = ql_step(n);
    let Some(wg) = bidiag_workgroup(m, n, target, budget, step + 1) else {
        return Ok(None);
    };
    let ld = 4 * n.div_ceil(4);
    // Workgroup memory: the reduction's column, row and tree; the QR kernel's d, e and the
    // rotations its workgroup applies (f64), its control words.
    let bytes = (4 * (m + ld + wg)).max(qr_bytes(n, false));
    if bytes > target.max_workgroup_storage
        || batch > target.max_workgroups as u64 * target.max_workgroups as u64
    {
        return Ok(None);
    }
    let d = at.dims();
    let r = d.len();
    let n4 = ld / 4;
    let size = m * ld;
    let mut want = vec![d[..r - 1].to_vec(), d.clone(), d.clone()];
    want[0][r - 2] = d[r - 1];
    want[2][r - 2] = d[r - 1];
    want.truncate(results);
    let res = check_results(f, op, &want, &what)?;
    let desc = format!("{batch} {m}x{n} f32 matrices");
    // The reduction's state (f32): the matrix (rows padded to `ld`), d, e, the scale g.
    let stride = bidiag_stride(m, n);
    // The QR state (f64): U_B and V_B by columns (`zs` words each), then two copies of d, e
    // and the status (the first singular value not yet converged counted from the end, the
    // sweeps spent on it, the state: 0 running, 1 done, 2 failed; the tolerance).
    let zs = if vectors { n * ld } else { 0 };
    let slot = 2 * ld + QL_STATUS;
    let q_stride = 2 * zs + 2 * slot;
    let bi_t = TensorType::new(vec![(batch * stride) as i64], ElementType::F32);
    let qr_t = TensorType::new(vec![(batch * q_stride) as i64], ElementType::F64);
    let rank_t = TensorType::new(vec![(batch * n) as i64], ElementType::U32);
    let bi = binding(temp(0), &bi_t);
    let qr = binding(temp(1), &qr_t);
    let ranks = binding(temp(2), &rank_t);
    let cx = Ctx {
        name,
        desc: &desc,
        what: &what,
        subs: [
            bidiag_subs((batch, m, n, wg), q_stride),
            vec![("$ZS", zs.to_string()), ("$SLOT", slot.to_string())],
        ]
        .concat(),
        target,
    };
    let mut kernels = Vec::new();
    let mut launches = Vec::new();
    bidiag_stage(
        &cx,
        (a, &at),
        &bi,
        (batch, m, n, wg),
        vectors,
        &mut kernels,
        &mut launches,
    )?;

    let last = qr_stage(
        &Qr {
            cx: &cx,
            bi: &bi,
            qr: &qr,
            batch,
            n,
            zs,
            slot,
            budget,
            step,
        },
        (binding(op.results[0], &res[0]), &ranks),
        &mut kernels,
        &mut launches,
    )?;
    if !vectors {
        return Ok(Some(Plan {
            kernels,
            temps: vec![bi_t, qr_t, rank_t],
            launches,
        }));
    }
    let ok = format!("in0[qb + {}u] == 1.0lf", last + 2 * ld + 2);
    let uz_t = TensorType::new(vec![(batch * size) as i64], ElementType::F32);
    let vz_t = TensorType::new(vec![(batch * zs) as i64], ElementType::F32);
    let uz = binding(temp(3), &uz_t);
    let vz = binding(temp(4), &vz_t);
    // U_B's and V_B's columns in the order of the singular values, row-major (rows padded to
    // LD, U_B's below n zero).
    for (kname, rows_of, z, out, sign) in [
        ("u", m, "", &uz, ""),
        (
            "v",
            n,
            "$ZSu + ",
            &vz,
            " * select(-1.0, 1.0, in0[qb + LASTu + col] >= 0.0lf)",
        ),
    ] {
        let per = rows_of * ld;
        kernels.push(cx.threaded(
            kname,
            &format!("the bidiagonal's {} singular vectors, in the order of the singular values", if kname == "u" { "left" } else { "right" }),
            vec![qr.clone(), ranks.clone()],
            vec![out.clone()],
            &format!(
                "    let mat = tid / {per}u;\n    let row = (tid / $LDu) % {rows_of}u;\n    let col = tid % $LDu;\n    let qb = mat * $QSu;\n    if (col >= $Nu || row >= $Nu) {{\n        out0[tid] = 0.0;\n        return;\n    }}\n    out0[mat * {per}u + row * $LDu + in1[mat * $Nu + col]] = select(bitcast<f32>(0x7fc00000u), f32(in0[qb + {z}col * $LDu + row]){sign}, {ok});\n",
                sign = sign.replace("LAST", &last.to_string()),
            ),
            batch * per,
            0,
        )?);
        launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    }

    // U = Q [U_B; 0], V = P V_B: reflectors from the last, as many per launch as the budget
    // allows; each thread takes a vec4 of columns.
    for (kname, rows_of, t, first, at, reflectors) in [
        ("u", m, 3, "k", format!("sb + i * {ld}u + k"), n),
        ("v", n, 4, "k + 1u", format!("sb + k * {ld}u + i"), n - 1),
    ] {
        let from = |k: u64| if kname == "u" { k } else { k + 1 };
        let cost = |k: u64| {
            let rows = rows_of - from(k);
            2 * rows + rows.div_ceil(32) + 1
        };
        let mut ranges = Vec::new();
        let mut hi = reflectors;
        let mut back_iters = 0;
        while hi > 0 {
            let mut lo = hi - 1;
            let mut c = cost(lo);
            while lo > 0 && c + cost(lo - 1) <= budget {
                lo -= 1;
                c += cost(lo);
            }
            back_iters = back_iters.max(c);
            ranges.push((hi, lo));
            hi = lo;
        }
        let threads = batch * n4;
        kernels.push(cx.grouped(
            &format!("back_{kname}"),
            &format!("the reflections (parameters: end and first) applied to the bidiagonal's singular vectors ({kname}) of {desc}, a vec4 of columns per thread"),
            vec![params(), bi.clone()],
            vec![if kname == "u" { uz.clone() } else { vz.clone() }],
            (
                BACK_KERNEL,
                &[
                    ("$BWG", BACK_WG.to_string()),
                    ("$T", threads.to_string()),
                    ("$ROWS", rows_of.to_string()),
                    ("$FIRST", first.to_string()),
                    ("$AT", at),
                ],
            ),
            threads.div_ceil(BACK_WG),
            back_iters,
            true,
        )?);
        let k_back = kernels.len() - 1;
        for (hi, lo) in ranges {
            launches.push(Launch::updating(k_back, vec![hi as u32, lo as u32], t));
        }
    }
    // The vectors without the row padding.
    for (kname, rows_of, z, out) in [("u", m, &uz, 1), ("v", n, &vz, 2)] {
        let per = rows_of * n;
        kernels.push(cx.threaded(
            &format!("out_{kname}"),
            &format!("singular vectors ({kname})"),
            vec![z.clone()],
            vec![binding(op.results[out], &res[out])],
            &format!("    let mat = tid / {per}u;\n    let e = tid % {per}u;\n    out0[tid] = in0[mat * {}u + e / $Nu * $LDu + e % $Nu];\n", rows_of * ld),
            batch * per,
            0,
        )?);
        launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    }
    Ok(Some(Plan {
        kernels,
        temps: vec![bi_t, qr_t, rank_t, uz_t, vz_t],
        launches,
    }))
}

/// What [`qr_stage`] works on: the reduction's state `bi`, the QR state `qr` (per matrix:
/// U_B and V_B by columns, `zs` words each, none without vectors; then two copies of d, e and
/// the status, `slot` words each), the loop budget and the worst case of one QR sweep.
struct Qr<'a> {
    cx: &'a Ctx<'a>,
    bi: &'a Binding,
    qr: &'a Binding,
    batch: u64,
    n: u64,
    zs: u64,
    slot: u64,
    budget: u64,
    step: u64,
}

/// The QR sweeps on the bidiagonal matrices in `q.bi`: the state's initialization, the QR
/// kernel and its launches (rotating U_B and V_B where `q.zs > 0`, else the chase alone), and
/// the kernel writing the singular values, descending, to `out.0` and their ranks to `out.1`.
/// Returns the offset of the copy of d, e and status the last launch wrote.
fn qr_stage(
    q: &Qr,
    out: (Binding, &Binding),
    kernels: &mut Vec<kernel::Kernel>,
    launches: &mut Vec<Launch>,
) -> Result<u64> {
    let Qr {
        cx,
        bi,
        qr,
        batch,
        n,
        zs,
        slot,
        budget,
        step,
    } = *q;
    let (desc, target) = (cx.desc, cx.target);
    let n4 = n.div_ceil(4);
    let ld = 4 * n4;
    let vectors = zs > 0;
    // The QR state: U_B = V_B = I, d, e (e[i] = B[i-1, i], e[0] = 0), the status and the
    // tolerance (1e-14 of max |d_i| + |e_i|, which bounds |B|) in the first copy.
    let identity = if vectors {
        "    if (e < 2u * $ZSu) {\n        let z = e % $ZSu;\n        x = select(0.0lf, 1.0lf, z / $LDu == z % $LDu);\n    } else "
    } else {
        "    "
    };
    kernels.push(cx.threaded(
        "qr_init",
        if vectors {
            "the bidiagonal QR state (U_B = V_B = I, d, e, status, tolerance; f64)"
        } else {
            "the bidiagonal QR state (d, e, status, tolerance; f64)"
        },
        vec![bi.clone()],
        vec![qr.clone()],
        &format!("    let mat = tid / $QSu;\n    let e = tid % $QSu;\n    let sb = mat * $TSu + $SIZEu;\n    var x = 0.0lf;\n{identity}if (e < 2u * $ZSu + $SLOTu) {{\n        let j = e - 2u * $ZSu;\n        if (j < $Nu) {{\n            x = f64(in0[sb + j]);\n        }} else if (j >= $LDu && j < $LDu + $Nu && j > $LDu) {{\n            x = f64(in0[sb + j - 1u]);\n        }} else if (j == 2u * $LDu) {{\n            x = f64($Nu);\n        }} else if (j == 2u * $LDu + 3u) {{\n            var top = 0.0;\n            for (var i = 0u; i < $Nu; i = i + 1u) {{\n                var t = abs(in0[sb + i]);\n                if (i > 0u) {{ t = t + abs(in0[sb + $LDu + i - 1u]); }}\n                top = max(top, t);\n            }}\n            x = 1e-14lf * f64(top);\n        }}\n    }}\n    out0[tid] = x;\n"),
        batch * (2 * zs + 2 * slot),
        n,
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));

    // Workgroups per matrix and vec4s of rows per workgroup (a power of two) of the QR kernel.
    // Each workgroup repeats the scalar chase: on CPU adapters as few as keep both halves
    // busy (llvmpipe, 256x256: 73 ms in 8 workgroups of 16 rows, 52 ms in 2 of 64). Without
    // vectors one workgroup (of 8: only its first thread works).
    let rows = if target.cpu_adapter { 64 } else { 16 };
    let rows = if vectors {
        rows.min(n4.next_power_of_two()).max(8)
    } else {
        8
    };
    let groups = n4.div_ceil(rows);
    let parts = if vectors { 2 * groups } else { 1 };
    let iters = budget.min(step * (n + 1));
    // Two sweeps' rotations per pass over U_B and V_B where both sets fit workgroup memory
    // (`WGPU_HLO_TWO_CHAINS=0`: one).
    let two = vectors
        && qr_bytes(n, true) <= target.max_workgroup_storage
        && !crate::fusion::switched_off("WGPU_HLO_TWO_CHAINS");
    let mut chains = two_chains(two);
    if !vectors {
        for (k, v) in chains.iter_mut() {
            if *k == "$STORE_ROT" {
                v.clear();
            }
        }
    }
    kernels.push(cx.grouped(
        "qr",
        &format!("implicitly shifted QR sweeps (f64; parameter: the launch's index) on the bidiagonal matrices of {desc}, resumed where the last launch stopped, {parts} workgroups per matrix{}", if vectors { "" } else { ", no vectors" }),
        vec![params()],
        vec![qr.clone()],
        (
            QR_KERNEL,
            &[
                vec![
                    ("$G", groups.to_string()),
                    ("$PARTS", parts.to_string()),
                    ("$R", rows.to_string()),
                    ("$STEP", step.to_string()),
                    ("$BUDGET", budget.to_string()),
                    ("$MAXIT", MAX_ITERATIONS.to_string()),
                    ("$VECTORS", vectors.to_string()),
                ],
                chains,
            ]
            .concat(),
        ),
        batch * parts,
        iters,
        true,
    )?);
    // Room for PLANNED_ITERATIONS sweeps per singular value, each over the rest of the matrix.
    let rotations = PLANNED_ITERATIONS * n * (n + 1) / 2;
    let count = (rotations * 3).div_ceil(budget - step) + 1;
    let k_qr = kernels.len() - 1;
    for i in 0..count {
        launches.push(Launch::updating(k_qr, vec![i as u32, 0], 1));
    }
    let last = 2 * zs + (count % 2) * slot;
    let ok = format!("in0[qb + {}u] == 1.0lf", last + 2 * ld + 2);

    kernels.push(cx.ranked_values(
        "singular values, descending, and their ranks",
        (qr, bi),
        out,
        (batch, n),
        last,
        &ok,
        "2u * $LDu",
        (true, false),
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    Ok(last)
}

/// The back-transformation (see the module comment): `out0` the padded row-major vectors
/// (`$ROWS` rows) by vec4s, `in1` the reduction's state (reflector `k`'s element `i` at
/// `$AT`, from row `$FIRST`), `in0` the reflectors' end and first index.
const BACK_KERNEL: &str = r#"// Entry i of reflector k, and the reflector's first row.
fn refl(sb: u32, k: u32, i: u32) -> f32 {
    return in1[$AT];
}
fn first_row(k: u32) -> u32 {
    return $FIRST;
}

@compute @workgroup_size($BWG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    $RZ = nwg.z >> 16u;
    let tid = (wid.y * nwg.x + wid.x) * $BWGu + lid;
    if (tid >= $Tu) { return; }
    let mat = tid / $N4u;
    let sb = mat * $TSu;
    let zb = mat * ($ROWSu * $N4u) + tid % $N4u;
    var kk = in0[0];
    loop {
        if (kk <= in0[1]) { break; }
        if (kk >= in0[1] + 2u) {
            // Two reflections in one pass over the columns: H_b H_a Z with a = kk - 1 first,
            // b = kk - 2 (its first row one above a's), is
            // Z - u_a (2 u_a^T Z) - u_b 2 (u_b^T Z - (u_b . u_a) 2 u_a^T Z).
            // Sums by blocks of 32 rows (one running f32 sum over a tall U's column rounds
            // m times).
            let a = kk - 1u;
            let b = a - 1u;
            let fa = first_row(a);
            let fb = first_row(b);
            var c = 0.0;
            var da = vec4<f32>(0.0);
            var db = refl(sb, b, fb) * out0[zb + fb * $N4u];
            for (var i0 = fa; i0 < $ROWSu; i0 = i0 + 32u) {
                var pc = 0.0;
                var pa = vec4<f32>(0.0);
                var pb = vec4<f32>(0.0);
                for (var i = i0; i < min(i0 + 32u, $ROWSu); i = i + 1u) {
                    let z = out0[zb + i * $N4u];
                    let ra = refl(sb, a, i);
                    let rb = refl(sb, b, i);
                    pc = pc + rb * ra;
                    pa = pa + ra * z;
                    pb = pb + rb * z;
                }
                c = c + pc;
                da = da + pa;
                db = db + pb;
            }
            da = 2.0 * da;
            db = 2.0 * (db - c * da);
            out0[zb + fb * $N4u] = out0[zb + fb * $N4u] - refl(sb, b, fb) * db;
            for (var i = fa; i < $ROWSu; i = i + 1u) {
                out0[zb + i * $N4u] = out0[zb + i * $N4u] - refl(sb, a, i) * da - refl(sb, b, i) * db;
            }
            kk = kk - 2u;
            continue;
        }
        let k = kk - 1u;
        let f = first_row(k);
        var dot = vec4<f32>(0.0);
        for (var i0 = f; i0 < $ROWSu; i0 = i0 + 32u) {
            var part = vec4<f32>(0.0);
            for (var i = i0; i < min(i0 + 32u, $ROWSu); i = i + 1u) {
                part = part + refl(sb, k, i) * out0[zb + i * $N4u];
            }
            dot = dot + part;
        }
        dot = 2.0 * dot;
        for (var i = f; i < $ROWSu; i = i + 1u) {
            out0[zb + i * $N4u] = out0[zb + i * $N4u] - refl(sb, k, i) * dot;
        }
        kk = k;
    }
}
"#;

/// The QR kernel (see the module comment): `out0` the f64 state by vec4s (the columns of
/// `U_B` and `V_B` by fours of rows; the scalars read as components), `in0[0]` the launch's
/// index (its parity picks the copy of `d`, `e` and the status to read).
/// Workgroup memory of the QR kernel for order `n`: `d`, `e` and `n` rotations (f64), two
/// vec4s of control words; with `two`, a second set of rotations and its chain.
fn qr_bytes(n: u64, two: bool) -> u64 {
    32 * n + 32 + if two { 16 * n + 4 } else { 0 }
}

/// The QR kernel's pieces for one chain per pass over U_B and V_B, or (`two`) two chases'
/// chains in one pass where the second's rows lie within the first's: the second chain's
/// rotation j - 1 follows the first's rotation j once the first has finished column j, with
/// its own carry and the identity outside its rows; each column is loaded and stored once for
/// both, in the order of applying one chain after the other.
fn two_chains(two: bool) -> Vec<(&'static str, String)> {
    if !two {
        return vec![
            ("$DECL2", String::new()),
            ("$CHAINS", "1".into()),
            ("$STORE_ROT", "rot[j] = vec2<f64>(c, s);".into()),
            ("$SET_CH2", String::new()),
            ("$LOAD_CH2", String::new()),
            ("$NOT_TWO", String::new()),
            ("$TWO_Z", String::new()),
        ];
    }
    vec![
        (
            "$DECL2",
            "var<workgroup> rot2: array<vec2<f64>, $N>;\nvar<workgroup> ch2: u32;\n".into(),
        ),
        ("$CHAINS", "2".into()),
        (
            "$STORE_ROT",
            "if (chain_i == 0u) { rot[j] = vec2<f64>(c, s); } else { rot2[j] = vec2<f64>(c, s); }"
                .into(),
        ),
        ("$SET_CH2", "            ch2 = lo2 | (hi2 << 16u);".into()),
        (
            "$LOAD_CH2",
            "        let c2 = workgroupUniformLoad(&ch2);\n        let lo2 = c2 & 65535u;\n        let hi2 = c2 >> 16u;\n".into(),
        ),
        ("$NOT_TWO", " && lo2 == hi2".into()),
        ("$TWO_Z", QR_Z_TWO.into()),
    ]
}

/// Two chains' rotations of columns (j, j + 1) in one pass (see [`two_chains`]).
const QR_Z_TWO: &str = r#"            } else if (ch.w == 0u) {
                let lo1 = ch.x;
                let hi1 = ch.y;
                var carry = out0[zb + lo1 * $N4u + r4];
                // Column lo1 after the first chain's rotation lo1: where the second starts.
                let cs0 = rot[lo1];
                let z0 = out0[zb + (lo1 + 1u) * $N4u + r4];
                var carry2 = cs0.x * carry + cs0.y * z0;
                carry = cs0.x * z0 - cs0.y * carry;
                for (var j = lo1 + 1u; j < hi1; j = j + 1u) {
                    let cs = rot[j];
                    let zj = out0[zb + (j + 1u) * $N4u + r4];
                    let y = cs.x * carry + cs.y * zj;
                    carry = cs.x * zj - cs.y * carry;
                    let i = j - 1u;
                    let g = select(vec2<f64>(1.0lf, 0.0lf), rot2[i], i >= lo2 && i < hi2);
                    out0[zb + i * $N4u + r4] = g.x * carry2 + g.y * y;
                    carry2 = g.x * y - g.y * carry2;
                }
                let i = hi1 - 1u;
                let g = select(vec2<f64>(1.0lf, 0.0lf), rot2[i], i >= lo2 && i < hi2);
                out0[zb + i * $N4u + r4] = g.x * carry2 + g.y * carry;
                out0[zb + hi1 * $N4u + r4] = g.x * carry - g.y * carry2;
"#;

const QR_KERNEL: &str = r#"var<workgroup> dd: array<f64, $N>;
var<workgroup> ee: array<f64, $N>;
// The rotations this workgroup applies: V_B's (from the right) or U_B's (from the left).
// Keeping only one kind takes 683-1023 columns within llvmpipe's 32 KiB (Jacobi took 10.3 s
// for 700 x 690, this 2.1 s).
var<workgroup> rot: array<vec2<f64>, $N>;
var<workgroup> ctl: vec4<u32>;
var<workgroup> chain: vec4<u32>;
$DECL2
// sqrt(a^2 + b^2) without overflow.
fn hyp(a: f64, b: f64) -> f64 {
    let x = abs(a);
    let y = abs(b);
    let big = max(x, y);
    if (!(big > 0.0lf)) { return x + y; }
    let q = min(x, y) / big;
    return big * sqrt(1.0lf + q * q);
}

@compute @workgroup_size($R)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    $RZ = nwg.z >> 16u;
    let gid = wid.y * nwg.x + wid.x;
    let mat = gid / $PARTSu;
    let part = gid % $PARTSu;
    if (mat >= $Bu) { return; }
    let base = mat * $QSu;
    let b4 = base >> 2u;
    let src = base + 2u * $ZSu + (in0[0] & 1u) * $SLOTu;
    let dst = base + 2u * $ZSu + (1u - (in0[0] & 1u)) * $SLOTu;
    for (var i = lid; i < $Nu; i = i + $Ru) {
        dd[i] = out0[(src + i) >> 2u][(src + i) & 3u];
        ee[i] = out0[(src + $LDu + i) >> 2u][(src + $LDu + i) & 3u];
    }
    let status = out0[(src + 2u * $LDu) >> 2u];
    let tol = status.w;
    if (lid == 0u) {
        ctl = vec4<u32>(u32(status.x), u32(status.y), u32(status.z), 0u);
    }
    let c0 = workgroupUniformLoad(&ctl);
    // This workgroup's rows: of U_B in the second half of the matrix's workgroups, else of V_B.
    let on_u = part >= $Gu;
    let r4 = (part % $Gu) * $Ru + lid;
    let zb = b4 + select($ZSu / 4u, 0u, on_u);
    if (c0.z == 0u) {
    var used = 0u;
    loop {
        if (lid == 0u) {
            var kk = ctl.x;
            var it = ctl.y;
            var state = 0u;
            var spent = used;
            // The chains of this round: the first, and (with two chains) a second sweep's
            // when both chase the bulge and the second's rows lie within the first's (the
            // usual case: the same block again).
            var kind1 = 0u;
            var lo1 = 0u;
            var hi1 = 0u;
            var lo2 = 0u;
            var hi2 = 0u;
            for (var chain_i = 0u; chain_i < $CHAINSu; chain_i = chain_i + 1u) {
                var kind = 0u;
                var lo = 0u;
                var hi = 0u;
                var ran = false;
                loop {
                    if (kk == 0u) { state = 1u; break; }
                    // Out of this launch's budget: the next launch goes on from here.
                    if (spent + $STEPu > $BUDGETu) { state = 3u; break; }
                    let k = kk - 1u;
                    // The unreduced block [l, k] that ends at k: up to a negligible e (a split), or
                    // to a negligible d just above it (then e[l] is zeroed first).
                    var l = k;
                    var cancel = false;
                    loop {
                        if (l == 0u) { break; }
                        if (abs(ee[l]) <= tol) { break; }
                        if (abs(dd[l - 1u]) <= tol) { cancel = true; break; }
                        l = l - 1u;
                    }
                    // A second chain that is not a chase within the first's rows waits for the
                    // next round.
                    if (chain_i == 1u && (cancel || l < lo1 || k > hi1)) { break; }
                    spent = spent + k - l + 1u;
                    if (cancel) {
                        // Rotations of rows l - 1 and i = l, l + 1, ... from the left carry e[l]
                        // along row l - 1 until it is negligible (U_B's columns l - 1 and i).
                        var c = 0.0lf;
                        var s = 1.0lf;
                        var i = l;
                        loop {
                            if (i > k) { break; }
                            let f = s * ee[i];
                            ee[i] = c * ee[i];
                            if (abs(f) <= tol) { break; }
                            let g = dd[i];
                            let h = hyp(f, g);
                            dd[i] = h;
                            c = g / h;
                            s = -f / h;
                            rot[i] = vec2<f64>(c, s);
                            i = i + 1u;
                        }
                        spent = spent + i - l + 1u;
                        if (i > l) {
                            kind = 1u;
                            lo = l;
                            hi = i;
                            ran = true;
                            break;
                        }
                        continue;
                    }
                    if (l == k) {
                        // d[k] is a singular value (its sign is fixed in V_B at the end).
                        kk = k;
                        it = 0u;
                        continue;
                    }
                    if (it >= $MAXITu) { state = 2u; break; }
                    it = it + 1u;
                    // The shift: of the trailing 2x2 block of B^T B, the eigenvalue nearer d[k]^2.
                    var x = dd[l];
                    let y0 = dd[k - 1u];
                    let z0 = dd[k];
                    let g0 = ee[k - 1u];
                    let h0 = ee[k];
                    var f = ((y0 - z0) * (y0 + z0) + (g0 - h0) * (g0 + h0)) / (2.0lf * h0 * y0);
                    let r = hyp(f, 1.0lf);
                    f = ((x - z0) * (x + z0) + h0 * (y0 / (f + select(-r, r, f >= 0.0lf)) - h0)) / x;
                    // The chase: a rotation of columns j, j + 1 from the right (V_B's), then one
                    // of rows j, j + 1 from the left (U_B's), j = l, ..., k - 1.
                    var c = 1.0lf;
                    var s = 1.0lf;
                    for (var j = l; j < k; j = j + 1u) {
                        var g = ee[j + 1u];
                        var y = dd[j + 1u];
                        var h = s * g;
                        g = c * g;
                        var z = hyp(f, h);
                        ee[j] = z;
                        c = f / z;
                        s = h / z;
                        f = x * c + g * s;
                        g = g * c - x * s;
                        h = y * s;
                        y = y * c;
                        if (!on_u) { $STORE_ROT }
                        z = hyp(f, h);
                        dd[j] = z;
                        if (z != 0.0lf) {
                            c = f / z;
                            s = h / z;
                        }
                        f = c * g + s * y;
                        x = c * y - s * g;
                        if (on_u) { $STORE_ROT }
                    }
                    ee[l] = 0.0lf;
                    ee[k] = f;
                    dd[k] = x;
                    kind = 0u;
                    lo = l;
                    hi = k;
                    spent = spent + k - l;
                    ran = true;
                    break;
                }
                if (chain_i == 0u) {
                    kind1 = kind;
                    lo1 = lo;
                    hi1 = hi;
                    // A second chain only after a chase.
                    if (!ran || kind1 != 0u) { break; }
                } else {
                    if (ran) {
                        lo2 = lo;
                        hi2 = hi;
                    }
                    // What stopped the second chain stops the next round's first again.
                    state = 0u;
                }
            }
            ctl = vec4<u32>(kk, it, state, 0u);
            chain = vec4<u32>(lo1, hi1, spent, kind1);
$SET_CH2
        }
        let c = workgroupUniformLoad(&ctl);
        let ch = workgroupUniformLoad(&chain);
        if (c.z != 0u) { break; }
$LOAD_CH2
        if ($VECTORS && r4 < $N4u) {
            if (ch.w == 0u$NOT_TWO) {
                // The chase's rotations of columns (j, j + 1), j = lo, ..., hi - 1.
                var carry = out0[zb + ch.x * $N4u + r4];
                for (var j = ch.x; j < ch.y; j = j + 1u) {
                    let cs = rot[j];
                    let zj = out0[zb + (j + 1u) * $N4u + r4];
                    out0[zb + j * $N4u + r4] = cs.x * carry + cs.y * zj;
                    carry = cs.x * zj - cs.y * carry;
                }
                out0[zb + ch.y * $N4u + r4] = carry;
$TWO_Z            } else if (on_u) {
                // The cancellation's rotations of columns (lo - 1, i), i = lo, ..., hi - 1.
                let p = zb + (ch.x - 1u) * $N4u + r4;
                var carry = out0[p];
                for (var i = ch.x; i < ch.y; i = i + 1u) {
                    let cs = rot[i];
                    let zi = out0[zb + i * $N4u + r4];
                    out0[zb + i * $N4u + r4] = cs.x * zi - cs.y * carry;
                    carry = cs.x * carry + cs.y * zi;
                }
                out0[p] = carry;
            }
        }
        used = ch.z + (ch.y - ch.x);
        workgroupBarrier();
    }
    }
    if (part != 0u) { return; }
    workgroupBarrier();
    for (var i = lid; i < $Nu; i = i + $Ru) {
        out0[(dst + i) >> 2u][(dst + i) & 3u] = dd[i];
        out0[(dst + $LDu + i) >> 2u][(dst + $LDu + i) & 3u] = ee[i];
    }
    if (lid == 0u) {
        let c = ctl;
        out0[(dst + 2u * $LDu) >> 2u] = vec4<f64>(f64(c.x), f64(c.y), f64(select(c.z, 0u, c.z == 3u)), tol);
    }
}
"#;
