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
//!    superdiagonal entry next to it (the block splits). With vectors the chase logs each
//!    sweep's rotations (both kinds in one entry) into the state, and in the next launch the
//!    matrix's other workgroups apply that log to their vec4 of rows of `V_B` (half of them)
//!    or `U_B` (by columns, four sweeps per pass, no barriers; see the eigh QL kernel) while
//!    the chase goes on into a second log. For the values alone one workgroup per matrix
//!    chases, with no vectors
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
    back_copies, back_texture, back_variant, bidiag_stage, bidiag_stride, bidiag_subs,
    bidiag_workgroup, broadcast_lanes, budget, lane_names, ql_step, svd_operand, wave_sweep,
    BackTexture, Ctx, MinN, SvdOperand, Walk, CHASE_MAIN, MAX_ITERATIONS, PLANNED_ITERATIONS,
    QL_STATUS, QL_WAVE,
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
    let bytes = (4 * (m + ld + wg)).max(qr_bytes(n));
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
    // With vectors, two logs of the chase's rotations follow (`qr_stage`), each as long as
    // U_B where one binding holds them (shorter logs take more launches).
    let room = (target.max_binding_size / 8 / batch.max(1)).saturating_sub(2 * zs + 2 * slot) / 8;
    let log = if vectors {
        (zs / 4).min(budget).min(room).max(n + 2)
    } else {
        0
    };
    let q_stride = 2 * zs + 2 * slot + 8 * log;
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
            log,
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
        let texture = back_texture(target, batch, rows_of, n, budget);
        let copies = back_copies(rows_of, budget);
        let mut ranges = Vec::new();
        let mut hi = reflectors;
        let mut back_iters = 0;
        while hi > 0 {
            let mut lo = hi - 1;
            let mut c = copies + cost(lo);
            while lo > 0 && c + cost(lo - 1) <= budget {
                lo -= 1;
                c += cost(lo);
            }
            back_iters = back_iters.max(c);
            ranges.push((hi, lo));
            hi = lo;
        }
        // Reflector entries shared through subgroups on CPU adapters: then each matrix has
        // workgroups of its own.
        let back_tex = texture.then(|| BackTexture::new(n4, batch * rows_of));
        let (template, threads, how) =
            back_variant(target, (batch, n4, BACK_WG), back_tex.as_ref());
        let mut kernel = cx.grouped(
            &format!("back_{kname}"),
            &format!("the reflections (parameters: end and first) applied to the bidiagonal's singular vectors ({kname}) of {desc}, a vec4 of columns per thread{how}"),
            vec![params(), bi.clone()],
            vec![if kname == "u" { uz.clone() } else { vz.clone() }],
            (
                &template,
                &[
                    ("$BWG", BACK_WG.to_string()),
                    ("$BG", n4.div_ceil(BACK_WG).to_string()),
                    ("$ROWS", rows_of.to_string()),
                    ("$FIRST", first.to_string()),
                    ("$AT", at),
                ],
            ),
            threads.div_ceil(BACK_WG),
            back_iters,
            true,
        )?;
        if let Some(t) = back_tex {
            kernel.scratch_textures = vec![t.texture];
        }
        kernels.push(kernel);
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
    /// With vectors: vec4 entries of each of the two rotation logs after the slots.
    log: u64,
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
        log,
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
        batch * (2 * zs + 2 * slot + 8 * log),
        n,
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));

    // Workgroups per half (V_B's, U_B's rows) of a matrix and vec4s of rows per workgroup (a
    // power of two) of the QR kernel with vectors, besides the one that chases.
    let rows = 16.min(n4.next_power_of_two()).max(8);
    let groups = if vectors { n4.div_ceil(rows) } else { 0 };
    let (rows, cw) = if vectors { (rows, rows) } else { (8, 8) };
    let iters = if vectors {
        budget
    } else {
        budget.min(step * (n + 1))
    };
    let log_at = 2 * zs + 2 * slot;
    let main = if vectors {
        // Rotations shared through subgroups on CPU adapters.
        qr_apply_kernel(
            QL_WAVE,
            broadcast_lanes(target, rows, "WGPU_HLO_QL_BROADCAST"),
        )
    } else {
        CHASE_MAIN.to_string()
    };
    let logged = |text: &str| {
        if vectors {
            text.to_string()
        } else {
            String::new()
        }
    };
    kernels.push(cx.grouped(
        "qr",
        &format!(
            "implicitly shifted QR sweeps (f64; parameters: the launch's index{}) on the bidiagonal matrices of {desc}, resumed where the last launch stopped, {}",
            if vectors { ", and 1 chase | 2 apply" } else { "" },
            if vectors {
                format!("one workgroup per matrix chasing and logging the rotations while {groups} apply the last launch's log to V_B and {groups} to U_B ({QL_WAVE} chases per sweep, a vec4 of rows per thread)")
            } else {
                "one workgroup per matrix, no vectors".to_string()
            }
        ),
        vec![params()],
        vec![qr.clone()],
        (
            &QR_KERNEL.replace("$MAIN", &main),
            &[
                ("$G", groups.to_string()),
                ("$R", rows.to_string()),
                ("$CW", cw.to_string()),
                ("$STEP", step.to_string()),
                ("$BUDGET", budget.to_string()),
                ("$MAXIT", MAX_ITERATIONS.to_string()),
                ("$KW", QL_WAVE.to_string()),
                ("$FT", "f64".to_string()),
                ("$FS", "lf".to_string()),
                ("$LOGAT", log_at.to_string()),
                ("$LOGCAP", log.to_string()),
                ("$LOG_DECL", logged(QR_LOG_DECL)),
                ("$LOG_CHECK_CANCEL", logged(QR_LOG_CHECK_CANCEL)),
                ("$LOG_CHECK", logged(QR_LOG_CHECK)),
                ("$LOG_CHAIN", logged(QR_LOG_CHAIN)),
                ("$LOG_CANCEL", logged(QR_LOG_CANCEL)),
                (
                    "$STORE_CANCEL",
                    logged("                out0[lb + lpos + 1u + i - l] = vec4<f64>(1.0lf, 0.0lf, c, s);\n"),
                ),
                (
                    "$STORE_ROT",
                    logged("            out0[lb + lpos + 1u + j - l] = vec4<f64>(vc, c, s);\n"),
                ),
                (
                    "$LOG_END",
                    logged("    out0[lb] = vec4<f64>(f64(chains), 0.0lf, 0.0lf, 0.0lf);\n"),
                ),
            ],
        ),
        batch * (2 * groups + 1),
        iters,
        true,
    )?);
    // Room for PLANNED_ITERATIONS sweeps per singular value, each over the rest of the matrix;
    // with vectors a launch stops where its log is full, after at least `log - n - 1`
    // entries, two per rotation at worst.
    let rotations = PLANNED_ITERATIONS * n * (n + 1) / 2;
    let mut per_launch = (budget - step) / 3;
    if vectors {
        per_launch = per_launch.min(log.saturating_sub(n + 1) / 2);
    }
    let count = rotations.div_ceil(per_launch.max(1)) + 1;
    let k_qr = kernels.len() - 1;
    for i in 0..count {
        let apply = if vectors && i > 0 { 2 } else { 0 };
        launches.push(Launch::updating(k_qr, vec![i as u32, 1 | apply], 1));
    }
    if vectors {
        // The last launch's log.
        launches.push(Launch::updating(k_qr, vec![count as u32, 2], 1));
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

/// The QR kernel (see the module comment): `out0` the f64 state by vec4s (the columns of
/// `U_B` and `V_B` by fours of rows; the scalars read as components), `in0[0]` the launch's
/// index (its parity picks the copy of `d`, `e` and the status to read, and with vectors the
/// log to write); one workgroup per matrix chases, its first thread.
const QR_KERNEL: &str = r#"var<workgroup> dd: array<f64, $N>;
var<workgroup> ee: array<f64, $N>;

// sqrt(a^2 + b^2) without overflow.
fn hyp(a: f64, b: f64) -> f64 {
    let x = abs(a);
    let y = abs(b);
    let big = max(x, y);
    if (!(big > 0.0lf)) { return x + y; }
    let q = min(x, y) / big;
    return big * sqrt(1.0lf + q * q);
}

// The QR sweeps of matrix `mat` this launch runs, by its first thread (`$CW` per workgroup).
fn chase(mat: u32, lid: u32) {
    let base = mat * $QSu;
    let b4 = base >> 2u;
    let src = base + 2u * $ZSu + (in0[0] & 1u) * $SLOTu;
    let dst = base + 2u * $ZSu + (1u - (in0[0] & 1u)) * $SLOTu;
    for (var i = lid; i < $Nu; i = i + $CWu) {
        dd[i] = out0[(src + i) >> 2u][(src + i) & 3u];
        ee[i] = out0[(src + $LDu + i) >> 2u][(src + $LDu + i) & 3u];
    }
    workgroupBarrier();
    if (lid != 0u) { return; }
    let status = out0[(src + 2u * $LDu) >> 2u];
    let tol = status.w;
    var kk = u32(status.x);
    var it = u32(status.y);
    var state = u32(status.z);
$LOG_DECL    var spent = 0u;
    loop {
        if (state != 0u) { break; }
        if (kk == 0u) { state = 1u; break; }
        // Out of this launch's budget: the next launch goes on from here.
        if (spent + $STEPu > $BUDGETu) { state = 3u; break; }
        let k = kk - 1u;
        // The unreduced block [l, k] that ends at k: up to a negligible e (a split), or to a
        // negligible d just above it (then e[l] is zeroed first).
        var l = k;
        var cancel = false;
        loop {
            if (l == 0u) { break; }
            if (abs(ee[l]) <= tol) { break; }
            if (abs(dd[l - 1u]) <= tol) { cancel = true; break; }
            l = l - 1u;
        }
        spent = spent + k - l + 1u;
        if (cancel) {
$LOG_CHECK_CANCEL            // Rotations of rows l - 1 and i = l, l + 1, ... from the left carry e[l] along
            // row l - 1 until it is negligible (U_B's columns l - 1 and i).
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
$STORE_CANCEL                i = i + 1u;
            }
            spent = spent + 2u * (i - l) + 1u;
$LOG_CANCEL            continue;
        }
        if (l == k) {
            // d[k] is a singular value (its sign is fixed in V_B at the end).
            kk = k;
            it = 0u;
            continue;
        }
$LOG_CHECK        if (it >= $MAXITu) { state = 2u; break; }
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
        // The chase: a rotation of columns j, j + 1 from the right (V_B's), then one of rows
        // j, j + 1 from the left (U_B's), j = l, ..., k - 1.
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
            let vc = vec2<f64>(c, s);
            z = hyp(f, h);
            dd[j] = z;
            if (z != 0.0lf) {
                c = f / z;
                s = h / z;
            }
            f = c * g + s * y;
            x = c * y - s * g;
$STORE_ROT        }
        ee[l] = 0.0lf;
        ee[k] = f;
        dd[k] = x;
        // The chase, and (counted here) the rotation of U_B's and V_B's rows it asks for.
        spent = spent + 2u * (k - l);
$LOG_CHAIN    }
    for (var i = 0u; i < $Nu; i = i + 1u) {
        out0[(dst + i) >> 2u][(dst + i) & 3u] = dd[i];
        out0[(dst + $LDu + i) >> 2u][(dst + $LDu + i) & 3u] = ee[i];
    }
$LOG_END    out0[(dst + 2u * $LDu) >> 2u] = vec4<f64>(f64(kk), f64(it), f64(select(state, 0u, state == 3u)), tol);
}
$MAIN"#;

/// Workgroup memory of the QR kernel for order `n`: `d` and `e` (f64).
fn qr_bytes(n: u64) -> u64 {
    16 * n
}

/// With vectors, the chase's log (lane 0's, see [`QR_LOG_CHECK`]): the next entry, the
/// chains logged, the chases in the current wave, its rows, the loop iterations of the
/// waves before.
const QR_LOG_DECL: &str = "    let lb = b4 + ($LOGATu >> 2u) + (in0[0] & 1u) * $LOGCAPu;\n    var lpos = 1u;\n    var chains = 0u;\n    var wn = 0u;\n    var wlo = 0u;\n    var whi = 0u;\n    var wcost = 0u;\n";

/// Before a sweep on [l, k] with vectors: stop the launch where its rotations do not fit the
/// log, or their wave (up to `$KW` chases in a row) would take the next launch's
/// application past its loop budget.
const QR_LOG_CHECK: &str = r#"        let fresh = wn == 0u || wn == $KWu;
        let done = select(wcost, wcost + whi - wlo + $KWu + 2u, fresh && wn > 0u);
        let nlo = select(min(wlo, l), l, fresh);
        let nhi = select(max(whi, k), k, fresh);
        if (lpos + 1u + k - l > $LOGCAPu || done + nhi - nlo + $KWu + 2u > $BUDGETu) { state = 3u; break; }
"#;

/// After a sweep with vectors: its chain's header (first and last column, kind 0) before
/// its rotations.
const QR_LOG_CHAIN: &str = r#"        out0[lb + lpos] = vec4<f64>(f64(l), f64(k), 0.0lf, 0.0lf);
        lpos = lpos + 1u + k - l;
        chains = chains + 1u;
        wcost = done;
        wlo = nlo;
        whi = nhi;
        wn = select(wn + 1u, 1u, fresh);
"#;

/// Before a cancellation with vectors: as [`QR_LOG_CHECK`], for at most `k - l + 1`
/// rotations applied on their own (they end the wave before them).
const QR_LOG_CHECK_CANCEL: &str = r#"            let done = select(wcost, wcost + whi - wlo + $KWu + 2u, wn > 0u);
            if (lpos + 2u + k - l > $LOGCAPu || done + k - l + 3u > $BUDGETu) { state = 3u; break; }
"#;

/// After a cancellation with vectors: its chain's header (first and end column, kind 1).
const QR_LOG_CANCEL: &str = r#"            if (i > l) {
                out0[lb + lpos] = vec4<f64>(f64(l), f64(i), 1.0lf, 0.0lf);
                lpos = lpos + 1u + i - l;
                chains = chains + 1u;
                wcost = done + i - l + 2u;
                wn = 0u;
            }
"#;

/// The QR kernel with vectors: workgroup 0 of each matrix chases and logs, the others
/// apply the last launch's log to their rows of `V_B` (the first half) or `U_B`: chases
/// [`super::tridiagonal::QL_WAVE`] at a time by [`wave_sweep`] (from their first column
/// up; a log entry holds `V_B`'s rotation, then `U_B`'s), a cancellation (`U_B` alone) on
/// its own. No barriers: the threads' rows are their own.
fn qr_apply_kernel(k: u64, lanes: Option<u64>) -> String {
    let mut heads = String::new();
    for j in 0..k {
        let prev = if j == 0 {
            "true".to_string()
        } else {
            format!("ok{}", j - 1)
        };
        heads.push_str(&format!(
            "        let hd{j} = out0[lb + select(0u, h, {prev} && c + {j}u < count)];\n        let ok{j} = {prev} && c + {j}u < count && hd{j}.z == 0.0lf;\n        let a{j} = select(0u, u32(hd{j}.x), ok{j});\n        let b{j} = select(0u, u32(hd{j}.y), ok{j});\n        let f{j} = h + 1u - a{j};\n        if (ok{j}) {{\n            lo = min(lo, a{j});\n            hi = max(hi, b{j});\n            h = f{j} + b{j};\n            c = c + 1u;\n        }}\n        var q{j} = vec4<f64>(0.0lf);\n"
        ));
    }
    let sweep = wave_sweep(
        k,
        lanes,
        &Walk {
            load: "lo + $T",
            rotation: "lo + $T - $J - 1u",
            store: "lo + $T - $KWu",
            components: "select(r.xy, r.zw, on_u)",
        },
    );
    let (lane_arg, lane_param, lane_builtin) = lane_names(lanes.is_some());
    format!(
        r#"
// The rotations the last launch logged, applied to the rows `r4` of matrix `mat`'s U_B
// (`on_u`) or V_B (by every thread, `act` those with rows).
fn apply(mat: u32, r4: u32, act: bool, on_u: bool{lane_param}) {{
    let base4 = mat * ($QSu >> 2u);
    let b4 = base4 + select($ZSu / 4u, 0u, on_u);
    let lb = base4 + ($LOGATu >> 2u) + ((in0[0] + 1u) & 1u) * $LOGCAPu;
    let count = u32(out0[lb].x);
    // The next chain's header (first and last or end column, kind).
    var h = 1u;
    var c = 0u;
    loop {{
        if (c >= count) {{ break; }}
        let hc = out0[lb + h];
        if (hc.z != 0.0lf) {{
            // A cancellation: rotations of columns (lo - 1, i), i = lo, ..., end - 1 (U_B's).
            let lo = u32(hc.x);
            let end = u32(hc.y);
            if (on_u && act) {{
                let p = b4 + (lo - 1u) * $N4u + r4;
                var carry = out0[p];
                for (var i = lo; i < end; i = i + 1u) {{
                    let cs = out0[lb + h + 1u + i - lo].zw;
                    let zi = out0[b4 + i * $N4u + r4];
                    out0[b4 + i * $N4u + r4] = cs.x * zi - cs.y * carry;
                    carry = cs.x * carry + cs.y * zi;
                }}
                out0[p] = carry;
            }}
            h = h + 1u + end - lo;
            c = c + 1u;
            continue;
        }}
        // The next chases, up to $KW in a row (headers: first and last column; chain j's
        // rotation i at entry f_j + i) and the columns they span. Step t: chain 0 takes
        // column lo + t, chain j column lo + t - j; the last finishes column lo + t - $KW.
        var lo = 0xffffffffu;
        var hi = 0u;
{heads}{sweep}    }}
}}

@compute @workgroup_size($R)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32{lane_builtin}) {{
    $RZ = nwg.z >> 16u;
    let gid = wid.y * nwg.x + wid.x;
    let mat = gid / (2u * $Gu + 1u);
    let part = gid % (2u * $Gu + 1u);
    if (mat >= $Bu) {{ return; }}
    if (part == 0u) {{
        if ((in0[1] & 1u) != 0u) {{ chase(mat, lid); }}
        return;
    }}
    let on_u = part > $Gu;
    let r4 = ((part - 1u) % $Gu) * $Ru + lid;
    if ((in0[1] & 2u) != 0u) {{ apply(mat, min(r4, $N4u - 1u), r4 < $N4u, on_u{lane_arg}); }}
}}
"#
    )
}
