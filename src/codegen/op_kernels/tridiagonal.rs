//! Real symmetric eigendecompositions by reduction to condensed form, f32, batched, on the
//! device, instead of Jacobi sweeps (LAPACK's route): the plan for `custom_call
//! @wgpu_hlo.eigh` ([`plan`]: `ssytrd`, `ssteqr`, `sormtr`), and the bidiagonal reduction
//! ([`bidiag_stage`], `sgebrd`) the svd plans of `bidiagonal` start with. Jacobi costs about
//! ten sweeps of n^3 work, each a chain of n - 1 barrier-separated rounds; this costs one n^3
//! reduction, a QL iteration whose chains are short scalar loops, and one n^3
//! back-transformation (llvmpipe, eigh 256x256: 2.5 s -> 0.36 s), and the results come out as
//! accurate as LAPACK's.
//!
//! 1. `_tri` (`_bidiag` for svd): one workgroup per matrix reduces the scaled matrix (`g A`,
//!    `g` a power of two bringing `|A|_max` into [0.5, 1); rows padded to whole vec4s) by
//!    Householder reflections. For eigh `H_k = I - 2 u_k u_k^T`, `Q = H_0 ... H_{n-3}`,
//!    `T = Q^T A Q`: for column k, `p = A u`, `w = 2 (p - (u^T p) u)`, then
//!    `A <- A - u w^T - w u^T` on the trailing block, a vec4 of columns per thread (the rows
//!    it streams are read across the threads); `u_k` replaces row k right of the diagonal,
//!    the subdiagonal goes to `e`. Within a launch the update's pass also computes the next
//!    column's `p` (its reflector taken first from the updated row `k + 1`), so the block is
//!    read once per column instead of twice.
//!
//!    On CPU adapters with subgroups the passes over the block (and the back-transformations
//!    of step 3) share what every thread needs of a row through `subgroupBroadcast`, one
//!    lane loading it for the subgroup: llvmpipe runs every load lane by lane, so a uniform
//!    load costs as much as eight, and the broadcasts cut the loads per row (same operations
//!    in the same order, the same bits; `WGPU_HLO_{TRI,BIDIAG,BACK,QL}_BROADCAST=0`: off).
//!    The back-transformations, on every adapter, apply four reflectors per two passes over
//!    the vectors ([`back_blocked_kernel`]). On CPU adapters with read-write storage
//!    textures the reduction's block and the back-transformations' vectors live in a
//!    scratch texture within each launch ([`tri_texture`], [`BackTexture`]).
//! 2. `_ql`: the implicit QL iteration with Wilkinson-like shifts (EISPACK's tql2), in f64
//!    (in f32 on adapters without it, [`ql_in_f64`]; without vectors, the chase alone):
//!    one thread chases each bulge through `d` and `e` in workgroup memory. With vectors it
//!    logs each iteration's rotations in the state, and in the next launch the other
//!    workgroups of the matrix apply that log to `Z` (by columns, a vec4 of rows per thread,
//!    no barriers) while the chase goes on into the other log: [`QL_WAVE`] chains per sweep
//!    over `Z`, on CPU adapters each rotation loaded once per subgroup and shared by
//!    `subgroupBroadcast`. `e` is negligible below f64's epsilon of its neighbours or of the
//!    matrix's norm. Launches resume where the last one stopped (`d`, `e` and the status
//!    alternate between two copies); a matrix whose eigenvalue needs more than 30 iterations,
//!    or that is not done after the last launch, gets NaN results: never a wrong answer
//!    without a sign.
//!    Values alone (`eigvalsh`) take `_bisect` instead where it fits one launch: bisection on
//!    Sturm counts, one thread per eigenvalue ([`BISECT_KERNEL`]).
//! 3. eigh: `_values` ranks the eigenvalues (ascending), `_vectors` writes `Z`'s columns in
//!    that order, row-major, `_back` applies the reflectors to them (`V = Q Z`, a vec4 of
//!    columns per thread, the last reflectors first) and `_out` drops the padding. svd:
//!    `_values` keeps the n largest eigenvalues, descending.

use super::jacobi::{
    binding, check_results, f32_tensor, params, rank_loop, scale_kernel, tree_reduce,
    workgroup_kernel, EIGH_TARGET, SUM, SVD_TARGET,
};
use super::{temp, Launch, Plan};
use crate::codegen::expr::Binding;
use crate::codegen::kernel::{self, RUNTIME_ZERO};
use crate::codegen::loop_kernel::Target;
use crate::codegen::texture_reads::ScratchTexture;
use crate::error::{Error, Result};
use crate::ir::{ElementType, Function, Operation, TensorType, ValueId};

/// Words of a tridiagonal state's status after the matrix and `e`: the scale `g`, unused.
const TRI_STATUS: u64 = 4;
/// Words of a QL state's status after `Z`, `d` and `e`: the first eigenvalue not yet
/// converged, the iterations spent on it, the state (0 running, 1 done, 2 failed), unused.
pub(super) const QL_STATUS: u64 = 4;
/// Most QL iterations on one eigenvalue (EISPACK's 30).
pub(super) const MAX_ITERATIONS: u64 = 30;
/// QL iterations per eigenvalue the launches leave room for, on average (about 1.5 are
/// usual); past them the results are NaN.
pub(super) const PLANNED_ITERATIONS: u64 = 4;
/// Threads per workgroup of the back-transformation (several workgroups per matrix).
const BACK_WG: u64 = 16;

/// Smallest n the tridiagonal route takes by default: on CPU adapters up to 64 columns the
/// block-Jacobi kernels are faster (llvmpipe, 64x64: 4.1 against 11.8 ms), past them slower
/// (96x96: 106 against 31 ms). On GPUs (NVIDIA H200, 2026-11-30) Jacobi eigh ran 4.1 / 22 /
/// 65 / 156 / 508 / 1312 ms at 96 / 128 / 192 / 256 / 384 / 512 against 6.8 / 10.9 / 23 / 41 /
/// 96 / 178 ms here, with residuals 4-7x larger. Jacobi's fast case ends where its matrix no
/// longer fits in 48 KiB of workgroup memory (110 columns), hence 112.
const EIGH_MIN_N: MinN = MinN { cpu: 65, gpu: 112 };

/// Smallest n a route of this module or of `bidiagonal` takes by default, by adapter class.
#[derive(Clone, Copy)]
pub(super) struct MinN {
    pub cpu: u64,
    pub gpu: u64,
}

/// Loop iterations one invocation may run per launch.
pub(super) fn budget(target: Target) -> u64 {
    (target.max_invocation_iterations / 2).max(1)
}

/// Whether eigh (`var` = `WGPU_HLO_EIGH_TRIDIAGONAL`) or svd (`WGPU_HLO_SVD_BIDIAGONAL`) of
/// `n`-column matrices takes the route of this module or of `bidiagonal` (svd's needs f64
/// for its QR iteration; eigh's QL iteration runs in f32 without it, [`ql_in_f64`]): `var=0` never, `=1` always (where its steps fit the loop budget and
/// workgroup memory), otherwise from `min_n` columns (by adapter class) and on any adapter
/// where the Jacobi kernels cannot take the matrix (`fallback`).
pub(super) fn chosen(var: &str, n: u64, min_n: MinN, target: Target, fallback: bool) -> bool {
    let min_n = if target.cpu_adapter {
        min_n.cpu
    } else {
        min_n.gpu
    };
    match std::env::var(var).as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => fallback || n >= min_n,
    }
}

/// The shape of the plan: order, threads per workgroup of the reduction and QL kernels.
/// Rows of the matrices are padded to whole vec4s (`ld` elements).
#[derive(Clone, Copy)]
struct Dims {
    n: u64,
    wg: u64,
}

impl Dims {
    /// Vec4s per padded row.
    fn n4(self) -> u64 {
        self.n.div_ceil(4)
    }
    fn ld(self) -> u64 {
        4 * self.n4()
    }
    /// Padded rows of a matrix.
    fn size(self) -> u64 {
        self.n * self.ld()
    }
    /// Vec4s per thread across a row.
    fn per_thread(self) -> u64 {
        self.n4().div_ceil(self.wg)
    }
    /// Loop iterations of reduction step k.
    fn tri_step(self, k: u64) -> u64 {
        let r = self.n - 1 - k;
        let c = self.ld().div_ceil(self.wg);
        // The update's pass, the p pass (or, fused into the update's pass, the next column and
        // its reflector: another tree), the column, u and w loops.
        2 * self.per_thread() * r + 5 * c + 4 * self.wg.ilog2() as u64 + 8
    }
    /// Loop iterations of the copies of the trailing block into the scratch texture and back
    /// (`tri_texture`) in a launch from column `k`.
    fn tri_copies(self, k: u64) -> u64 {
        block_copies(self.n - k - 1, self.n4() - (k + 1) / 4, self.wg)
    }
    /// The reduction's state (f32): the matrix, `e`, status.
    fn tri_stride(self) -> u64 {
        self.size() + self.ld() + TRI_STATUS
    }
    /// Words of one of the QL state's two copies of `d`, `e` and the status.
    fn ql_slot(self) -> u64 {
        2 * self.ld() + QL_STATUS
    }
    /// The QL state (f64): Z by columns (with `vectors`), then `d`, `e` and status twice (the
    /// launches read one copy and write the other).
    fn ql_stride(self, vectors: bool) -> u64 {
        self.ql_z(vectors) + 2 * self.ql_slot()
    }
    /// Words of Z in the QL state.
    fn ql_z(self, vectors: bool) -> u64 {
        if vectors {
            self.size()
        } else {
            0
        }
    }
    /// Workgroups per matrix of the QL kernel: each repeats the (cheap, scalar) QL iteration
    /// and rotates its own rows of Z, so the rotations, which are the work, use every core.
    fn ql_groups(self, cpu: bool) -> u64 {
        self.n4().div_ceil(self.ql_rows(cpu))
    }
    /// Vec4s of rows per QL workgroup (one per thread): a power of two (llvmpipe computed
    /// wrong eigenvalues with 10 or 12 threads). On CPU adapters past 256 rows fewer
    /// workgroups, as each repeats the chase: llvmpipe, the QL kernels of eigh 512x512,
    /// 251-281 ms in 8 workgroups of 16 rows, 193-209 in 2 of 64 (three alternating runs).
    /// Below, runs disagreed: 256x256 in 2 workgroups of 32 took 29-31 ms against 33-44 in
    /// 4 of 16 in one session and 39-46 against 35-39 in the next.
    fn ql_rows(self, cpu: bool) -> u64 {
        let n4 = self.n4().next_power_of_two();
        let rows = if cpu && n4 > 64 { (n4 / 2).min(64) } else { 16 };
        rows.min(n4).max(8)
    }
}

/// A back-transformation's kernel template ([`back_blocked_kernel`]), its threads and the
/// words its comment adds: the reflectors' entries loaded once per subgroup where
/// [`broadcast_lanes`] allows for workgroups of `wg`, else by every thread
/// (`WGPU_HLO_BACK_BROADCAST=0`: by every thread). Each of the `batch` matrices of `n4`
/// vec4 columns has workgroups of its own.
pub(super) fn back_variant(
    target: Target,
    (batch, n4, wg): (u64, u64, u64),
    texture: Option<&BackTexture>,
) -> (String, u64, &'static str) {
    let lanes = broadcast_lanes(target, wg, "WGPU_HLO_BACK_BROADCAST");
    let how = if lanes.is_some() {
        ", the reflectors' entries shared through subgroups"
    } else {
        ""
    };
    (
        back_blocked_kernel(lanes, texture),
        batch * n4.div_ceil(wg) * wg,
        how,
    )
}

/// A back-transformation's vectors in a scratch texture within each launch: each thread
/// copies its vec4 of columns in from the launch's first row (`first_row` of its last
/// reflector) and back at the end, and every pass loads and stores them as texels (see
/// [`tri_texture`]; the same operations, the same bits). `binding` after the kernel's
/// others; the texture `n4` texels wide, `rows` a matrix.
pub(super) struct BackTexture {
    /// Its WGSL declaration and the kernel's record ([`scratch`]).
    pub declaration: String,
    pub texture: ScratchTexture,
}

impl BackTexture {
    /// The vectors of `batch * rows` rows and `n4` quads of columns at binding 3 (after the
    /// parameters, the reflectors and the vectors).
    pub(super) fn new(n4: u64, rows: u64) -> BackTexture {
        let (declaration, texture) = scratch(3, n4, rows, "the vectors");
        BackTexture {
            declaration,
            texture,
        }
    }
}

/// Whether a back-transformation of `batch` matrices of `rows` x `n` vectors, `budget`
/// loop iterations a launch, keeps them in a scratch texture ([`BackTexture`];
/// `WGPU_HLO_BACK_TEXTURE=0`: never): where [`block_texture`] allows and [`back_copies`]
/// leaves room for them.
pub(super) fn back_texture(target: Target, batch: u64, rows: u64, n: u64, budget: u64) -> bool {
    block_texture(target, batch, rows, n, "WGPU_HLO_BACK_TEXTURE") && back_copies(rows, budget) > 0
}

/// Loop iterations a back-transformation launch keeps for copies into a texture and back
/// (two per row) where they are at most a quarter of the `budget`, with a texture or not: the
/// launches then take the same reflectors either way, and so the four-reflector blocks and
/// the results are the same bits (the blocks start at each launch's last reflector).
pub(super) fn back_copies(rows: u64, budget: u64) -> u64 {
    let copies = 2 * rows + 2;
    if 4 * copies <= budget {
        copies
    } else {
        0
    }
}

/// A scratch texture `blk` of `n4` x `rows` texels at `binding` holding `what`: its WGSL
/// declaration and the kernel's record of it.
pub(super) fn scratch(binding: u32, n4: u64, rows: u64, what: &str) -> (String, ScratchTexture) {
    (
        format!(
            "@group(0) @binding({binding}) var blk: texture_storage_2d<rgba32float, read_write>; // {what}, {n4} x {rows} texels\n"
        ),
        ScratchTexture {
            binding,
            width: n4 as u32,
            height: rows as u32,
        },
    )
}

/// The subgroup size by which kernels of `threads` per workgroup share what every thread
/// needs of a row through `subgroupBroadcast`: on CPU adapters with subgroups of 4, 8 or 16
/// lanes (llvmpipe runs every load lane by lane), the workgroup whole subgroups, unless
/// `var` is 0.
pub(super) fn broadcast_lanes(target: Target, threads: u64, var: &str) -> Option<u64> {
    let lanes = u64::from(target.caps.subgroup_size);
    (target.cpu_adapter
        && target.caps.subgroup
        && matches!(lanes, 4 | 8 | 16)
        && threads % lanes == 0
        && !crate::fusion::switched_off(var))
    .then_some(lanes)
}

/// `template` with each `(key, value)` substituted (keys are `$NAME` tokens).
pub(super) fn fill(template: &str, subs: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    // Longest keys first: `$NN` before `$N`.
    let mut subs: Vec<_> = subs.iter().collect();
    subs.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    for (k, v) in subs {
        out = out.replace(k, v);
    }
    out
}

/// What the kernels of one op's plan share: its name, description, the op, the `$` names of
/// their WGSL templates, the target.
pub(super) struct Ctx<'a> {
    pub(super) name: &'a str,
    pub(super) desc: &'a str,
    pub(super) what: &'a str,
    pub(super) subs: Vec<(&'static str, String)>,
    pub(super) target: Target<'a>,
}

impl Ctx<'_> {
    /// A kernel of `threads` threads whose body is the template `body`, filled in.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn threaded(
        &self,
        kname: &str,
        does: &str,
        inputs: Vec<Binding>,
        outputs: Vec<Binding>,
        body: &str,
        threads: u64,
        iterations: u64,
    ) -> Result<kernel::Kernel> {
        let (name, desc, what) = (self.name, self.desc, self.what);
        kernel::threaded(
            &format!("{name}_{kname}"),
            &format!("kernel {name}_{kname}: {does} of {desc}\nloop iterations per invocation: at most {iterations}\nfuses: {what}"),
            inputs,
            outputs,
            &Default::default(),
            "",
            &fill(body, &self.subs),
            threads,
            iterations,
            self.target,
        )
    }

    /// A kernel of `groups` workgroups whose body is `template` filled in with the plan's `$`
    /// names and `extra` ones; `does` is its comment after the name (the matrices included).
    /// `vec4_state`: `out0` bound as vec4s.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn grouped(
        &self,
        kname: &str,
        does: &str,
        inputs: Vec<Binding>,
        outputs: Vec<Binding>,
        (template, extra): (&str, &[(&'static str, String)]),
        groups: u64,
        iterations: u64,
        vec4_state: bool,
    ) -> Result<kernel::Kernel> {
        let (name, what) = (self.name, self.what);
        workgroup_kernel(
            &format!("{name}_{kname}"),
            &format!("kernel {name}_{kname}: {does}\nloop iterations per invocation: at most {iterations}\nfuses: {what}"),
            inputs,
            outputs,
            &fill(template, &[self.subs.as_slice(), extra].concat()),
            groups,
            iterations,
            vec4_state,
            self.target,
        )
    }

    /// The kernel `_values`: per matrix, the `n` values at offset `last` of the state bound as
    /// `in0` (`qs` f64 words per matrix; `abs`: by magnitude), divided by the reduction's scale
    /// (`in1`, at `$SIZE + scale` of each matrix's `$TS` words), written in rank order
    /// (ascending or not) to `outs.0` (NaN unless `ok`), their ranks to `outs.1`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ranked_values(
        &self,
        does: &str,
        (state, red): (&Binding, &Binding),
        outs: (Binding, &Binding),
        (batch, n): (u64, u64),
        last: u64,
        ok: &str,
        scale: &str,
        (abs, ascending): (bool, bool),
    ) -> Result<kernel::Kernel> {
        let key = |i: &str| {
            if abs {
                format!("f32(abs(in0[qb + {last}u + {i}]))")
            } else {
                format!("f32(in0[qb + {last}u + {i}])")
            }
        };
        self.threaded(
            "values",
            does,
            vec![state.clone(), red.clone()],
            vec![outs.0, outs.1.clone()],
            &format!(
                "    let mat = tid / $Nu;\n    let i = tid % $Nu;\n    let qb = mat * $QSu;\n    let g = in1[mat * $TSu + $SIZEu + {scale}];\n{rank}    out0[mat * $Nu + rank] = select(bitcast<f32>(0x7fc00000u), ki / g, {ok});\n    out1[tid] = rank;\n",
                rank = rank_loop(n, &key("i"), &key("j"), ascending),
            ),
            batch * n,
            n,
        )
    }

    /// The start of a reduction (kernels 0 and 1): the `m x n` matrices `a` into `state`
    /// (`stride` words each; rows padded to `ld` with zeros), then scaled by a power of two
    /// `g`, kept at word `g_word`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &self,
        (a, at): (ValueId, &TensorType),
        state: &Binding,
        batch: u64,
        (m, ld): (u64, u64),
        stride: u64,
        g_word: u64,
        kernels: &mut Vec<kernel::Kernel>,
        launches: &mut Vec<Launch>,
    ) -> Result<()> {
        kernels.push(self.threaded(
            "init",
            "the reduction state (padded matrix, then zeros)",
            vec![binding(a, at)],
            vec![state.clone()],
            "    let mat = tid / $TSu;\n    let e = tid % $TSu;\n    var x = 0.0;\n    if (e < $SIZEu && e % $LDu < $Nu) { x = in0[mat * $MNu + e / $LDu * $Nu + e % $LDu]; }\n    out0[tid] = x;\n",
            batch * stride,
            0,
        )?);
        launches.push(Launch::new(kernels.len() - 1, Vec::new()));
        let at_ij = |i: &str, j: &str| format!("({i}) * {ld}u + ({j})");
        kernels.push(scale_kernel(
            self.name,
            self.desc,
            self.what,
            state,
            batch,
            (m, ld),
            stride,
            g_word,
            false,
            &at_ij,
            self.target,
        )?);
        launches.push(Launch::updating(kernels.len() - 1, Vec::new(), 0));
        Ok(())
    }
}

/// The plan for `custom_call @wgpu_hlo.eigh` when the tridiagonal route is chosen for it,
/// else `None` (the Jacobi kernels take it).
///
/// `fallback`: the Jacobi kernels refused the matrix (a round past the loop budget: eigh of
/// 1024 x 1024 on GPUs), so this route is taken wherever it can be.
pub fn plan(
    name: &str,
    f: &Function,
    op: &Operation,
    target: Target,
    fallback: bool,
) -> Result<Option<Plan>> {
    let what = format!("custom_call @{EIGH_TARGET}");
    let (a, at, m, n) = matrix_operand(f, op, &what)?;
    let d = at.dims();
    if m != n || n == 0 || !chosen("WGPU_HLO_EIGH_TRIDIAGONAL", n, EIGH_MIN_N, target, fallback) {
        return Ok(None);
    }
    let batch = at.num_elements() as u64 / (n * n);
    let budget = budget(target);
    // Fewer threads cost fewer barrier switches on CPU adapters; more, where a step needs them
    // to stay within the loop budget.
    let first = if target.cpu_adapter {
        cpu_tri_workgroup(n)
    } else {
        256
    };
    let Some(wg) = [first, 256]
        .into_iter()
        .map(|wg| wg.min(n.div_ceil(4).next_power_of_two()).max(8))
        .find(|&wg| {
            let s = Dims { n, wg };
            s.tri_step(0) <= budget && ql_step(n) <= budget && 2 * n < budget
        })
    else {
        return Ok(None);
    };
    let s = Dims { n, wg };
    // Workgroup memory: the reduction's u, w, (u, w) pairs, the next column's u and p, and
    // tree; QL's d, e and rotations (f64).
    let bytes = (4 * (6 * s.ld() + wg + 4)).max(ql_bytes(n));
    if bytes > target.max_workgroup_storage
        || batch > target.max_workgroups as u64 * target.max_workgroups as u64
    {
        return Ok(None);
    }
    // Without vectors (`passes::dce::drop_unused_vectors`: `eigvalsh`) no Z is kept: the QL
    // iteration is the chase alone, and no back-transformation follows.
    let vectors = op.results.len() != 1;
    let mut want = vec![d[..d.len() - 1].to_vec(), d.clone()];
    want.truncate(if vectors { 2 } else { 1 });
    let res = check_results(f, op, &want, &what)?;
    let desc = format!("{batch} symmetric {n}x{n} f32 matrices");
    let (ld, n4, size) = (s.ld(), s.n4(), s.size());
    let tri_t = TensorType::new(vec![(batch * s.tri_stride()) as i64], ElementType::F32);
    let in_f64 = ql_in_f64(target);
    // With vectors, a log of each chase launch's rotations follows (`ql_stage`), as long as
    // Z where one binding holds it (shorter logs take more launches).
    let word = if in_f64 { 8 } else { 4 };
    let room =
        (target.max_binding_size / word / batch.max(1)).saturating_sub(s.ql_stride(vectors)) / 4;
    let log = if vectors {
        (size / 4).min(budget).min(room / 2).max(n + 2)
    } else {
        0
    };
    let qs = s.ql_stride(vectors) + 8 * log;
    let ql_t = TensorType::new(
        vec![(batch * qs) as i64],
        if in_f64 {
            ElementType::F64
        } else {
            ElementType::F32
        },
    );
    let rank_t = TensorType::new(vec![(batch * n) as i64], ElementType::U32);
    let z_t = TensorType::new(vec![(batch * size) as i64], ElementType::F32);
    let tri = binding(temp(0), &tri_t);
    let ql = binding(temp(1), &ql_t);
    let ranks = binding(temp(2), &rank_t);
    let zs = binding(temp(3), &z_t);
    let cx = Ctx {
        name,
        desc: &desc,
        what: &what,
        subs: vec![
            ("$N", n.to_string()),
            ("$N4", n4.to_string()),
            ("$LD", ld.to_string()),
            ("$SIZE", size.to_string()),
            ("$NN", (n * n).to_string()),
            ("$MN", (n * n).to_string()),
            ("$WG", wg.to_string()),
            ("$B", batch.to_string()),
            ("$TS", s.tri_stride().to_string()),
            ("$QS", qs.to_string()),
            ("$RZ", RUNTIME_ZERO.to_string()),
        ],
        target,
    };
    let mut kernels = Vec::new();
    let mut launches = Vec::new();
    cx.start(
        (a, &at),
        &tri,
        batch,
        (n, ld),
        s.tri_stride(),
        size + ld,
        &mut kernels,
        &mut launches,
    )?;

    // The reduction, as many steps per launch as the budget allows.
    let steps = n.saturating_sub(2);
    if steps > 0 {
        let tree = tree_reduce(wg / 2, SUM, "        ");
        // Rows' coefficients shared through subgroups on CPU adapters.
        let tri_lanes = broadcast_lanes(target, wg, "WGPU_HLO_TRI_BROADCAST");
        let texture = tri_texture(target, batch, n) && 4 * s.tri_copies(0) <= budget;
        let (declaration, block) = scratch(2, n4, batch * n, "the trailing block");
        let (declaration, next_row, block_end, barrier) = if texture {
            (
                declaration,
                "textureLoad(blk, vec2<u32>(j >> 2u, ty + r0))[j & 3u]",
                // The rows reduced keep their reflectors right of the diagonal.
                block_out("i < end", "cols > vec4<u32>(i)"),
                "        textureBarrier();\n",
            )
        } else {
            (
                String::new(),
                "out0[(row + $LDu + j) >> 2u][(row + $LDu + j) & 3u]",
                String::new(),
                "",
            )
        };
        let body = fill(
            &format!("{declaration}{TRI_KERNEL}"),
            &[
                cx.subs.clone(),
                vec![
                    ("$TREE", tree),
                    ("$REFLECTION", REFLECTION.to_string()),
                    (
                        "$BLOCK_IN",
                        if texture {
                            block_in("first + 1u", "$Nu")
                        } else {
                            String::new()
                        },
                    ),
                    ("$NEXT_ROW", next_row.to_string()),
                    ("$BLOCK_OUT", block_end),
                    ("$TEXTURE_BARRIER", barrier.to_string()),
                    ("$UPDATE_NEXT", tri_update(true, tri_lanes, texture)),
                    ("$UPDATE_LAST", tri_update(false, tri_lanes, texture)),
                    (
                        "$LANE_BUILTIN",
                        if tri_lanes.is_some() {
                            ", @builtin(subgroup_invocation_id) sgl: u32"
                        } else {
                            ""
                        }
                        .to_string(),
                    ),
                ],
            ]
            .concat(),
        );
        let mut tri_iters = 0;
        let mut k0 = 0;
        while k0 < steps {
            // The copies of the block into its texture and back, once per launch.
            let copies = if texture { s.tri_copies(k0) } else { 0 };
            let mut cost = copies + s.tri_step(k0);
            let mut k1 = k0 + 1;
            while k1 < steps && cost + s.tri_step(k1) <= budget {
                cost += s.tri_step(k1);
                k1 += 1;
            }
            tri_iters = tri_iters.max(cost);
            launches.push(Launch::updating(
                kernels.len(),
                vec![k0 as u32, k1 as u32],
                0,
            ));
            k0 = k1;
        }
        let mut kernel = workgroup_kernel(
            &format!("{name}_tri"),
            &format!("kernel {name}_tri: Householder reduction to tridiagonal form (parameters: first and end column) of {desc}, one workgroup per matrix\nloop iterations per invocation: at most {tri_iters}\nfuses: {what}"),
            vec![params()],
            vec![tri.clone()],
            &body,
            batch,
            tri_iters,
            true,
            target,
        )?;
        if texture {
            kernel.scratch_textures = vec![block];
        }
        kernels.push(kernel);
    }

    // The values alone, where every eigenvalue's bisection fits one launch: one thread per
    // eigenvalue (`WGPU_HLO_EIGH_BISECT=0`: the QL iteration's chase instead).
    let bisect_iters = BISECT_STEPS * (n + 1) + 2 * n;
    if !vectors && bisect_iters <= budget && !crate::fusion::switched_off("WGPU_HLO_EIGH_BISECT") {
        let groups = n.div_ceil(BISECT_WG);
        kernels.push(cx.grouped(
            "bisect",
            &format!("eigenvalues of the tridiagonal matrices of {desc} by bisection on Sturm counts, one thread per eigenvalue, {groups} workgroups per matrix"),
            vec![tri.clone()],
            vec![binding(op.results[0], &res[0])],
            (
                BISECT_KERNEL,
                &[
                    ("$BWG", BISECT_WG.to_string()),
                    ("$G", groups.to_string()),
                    ("$STEPS", BISECT_STEPS.to_string()),
                ],
            ),
            batch * groups,
            bisect_iters,
            false,
        )?);
        launches.push(Launch::new(kernels.len() - 1, Vec::new()));
        return Ok(Some(Plan {
            kernels,
            temps: vec![tri_t],
            launches,
        }));
    }

    // The QL state (f64): Z = I by columns, d, e (e[n-1] = 0), status in the first copy.
    kernels.push(cx.threaded(
        "ql_init",
        "the QL state (Z = I, d, e, status)",
        vec![tri.clone()],
        vec![ql.clone()],
        &fill(
            &format!("    let mat = tid / $QSu;\n    let e = tid % $QSu;\n    let sb = mat * $TSu;\n    var x = 0.0$FS;\n    if (e < {zs}u) {{\n        x = select(0.0$FS, 1.0$FS, e / $LDu == e % $LDu);\n    }} else if (e < {zs}u + $LDu) {{\n        let i = e - {zs}u;\n        if (i < $Nu) {{ x = $FT(in0[sb + i * $LDu + i]); }}\n    }} else if (e < {zs}u + 2u * $LDu) {{\n        let i = e - {zs}u - $LDu;\n        if (i + 2u < $Nu) {{\n            x = $FT(in0[sb + $SIZEu + i]);\n        }} else if (i + 2u == $Nu) {{\n            x = $FT(in0[sb + i * $LDu + i + 1u]);\n        }}\n    }}\n    out0[tid] = x;\n", zs = s.ql_z(vectors)),
            &ql_float(in_f64),
        ),
        batch * qs,
        0,
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    let (last, ok) = ql_stage(
        &Ql {
            cx: &cx,
            state: &ql,
            batch,
            order: n,
            z: vectors.then(|| {
                (
                    s.ql_groups(target.cpu_adapter),
                    s.ql_rows(target.cpu_adapter),
                )
            }),
            stride: qs,
            log,
            f64: in_f64,
            slot: s.ql_slot(),
            budget,
        },
        &mut kernels,
        &mut launches,
        1,
    )?;
    if vectors && !in_f64 {
        // In f32 each of the QL iteration's ~2n sweeps rounds the eigenvalues it passes, and
        // they drift (256x256: 1.9e-6 of the largest), while the vectors stay accurate: each
        // eigenvalue becomes the Rayleigh quotient z^T T z / z^T z of its vector on the
        // tridiagonal matrix, summed with compensation (1.9e-6 -> 2.1e-7; with rounded sums
        // as large as the drift).
        kernels.push(cx.threaded(
            "rayleigh",
            "the eigenvalues as Rayleigh quotients of the tridiagonal matrices' eigenvectors",
            vec![tri.clone()],
            vec![ql.clone()],
            &format!("    let mat = tid / $Nu;\n    let i = tid % $Nu;\n    let qb = mat * $QSu;\n    let sb = mat * $TSu;\n    let zb = qb + i * $LDu;\n{RAYLEIGH}    out0[qb + {last}u + i] = (num + cn) / (den + cd);\n"),
            batch * n,
            n,
        )?);
        launches.push(Launch::updating(kernels.len() - 1, Vec::new(), 1));
    }

    // Eigenvalues ascending (NaN unless the QL iteration finished), their ranks.
    kernels.push(cx.ranked_values(
        "eigenvalues, ascending, and their ranks",
        (&ql, &tri),
        (binding(op.results[0], &res[0]), &ranks),
        (batch, n),
        last,
        &ok,
        "$LDu",
        (false, true),
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    let Some(res_v) = res.get(1) else {
        return Ok(Some(Plan {
            kernels,
            temps: vec![tri_t, ql_t, rank_t],
            launches,
        }));
    };
    // Z's columns in eigenvalue order, row-major (rows padded to LD with zeros).
    kernels.push(cx.threaded(
        "vectors",
        "eigenvectors of the tridiagonal matrices, in the order of their eigenvalues",
        vec![ql.clone(), ranks.clone()],
        vec![zs.clone()],
        &format!(
            "    let mat = tid / $SIZEu;\n    let row = (tid / $LDu) % $Nu;\n    let col = tid % $LDu;\n    let qb = mat * $QSu;\n    if (col >= $Nu) {{\n        out0[tid] = 0.0;\n        return;\n    }}\n    out0[mat * $SIZEu + row * $LDu + in1[mat * $Nu + col]] = select(bitcast<f32>(0x7fc00000u), f32(in0[qb + col * $LDu + row]), {ok});\n"
        ),
        batch * size,
        0,
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));

    // V = Q Z: reflectors k from the last, as many per launch as the budget allows; each
    // thread takes a vec4 of columns.
    if steps > 0 {
        let cost = |k: u64| 2 * (n - 1 - k) + 1;
        let texture = back_texture(target, batch, n, n, budget);
        let copies = back_copies(n, budget);
        let mut ranges = Vec::new();
        let mut hi = steps;
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
        let back_tex = texture.then(|| BackTexture::new(n4, batch * n));
        let (template, threads, how) =
            back_variant(target, (batch, n4, BACK_WG), back_tex.as_ref());
        let mut kernel = cx.grouped(
            "back",
            &format!("the reflections (parameters: end and first) applied to the tridiagonal matrices' eigenvectors of {desc}, a vec4 of columns per thread{how}"),
            vec![params(), tri.clone()],
            vec![zs.clone()],
            (
                &template,
                &[
                    ("$BWG", BACK_WG.to_string()),
                    ("$BG", n4.div_ceil(BACK_WG).to_string()),
                    ("$ROWS", n.to_string()),
                    ("$AT", format!("sb + k * {ld}u + i")),
                    ("$FIRST", "k + 1u".to_string()),
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
            launches.push(Launch::updating(k_back, vec![hi as u32, lo as u32], 3));
        }
    }
    // The vectors without the row padding.
    kernels.push(cx.threaded(
        "out",
        "eigenvectors",
        vec![zs.clone()],
        vec![binding(op.results[1], res_v)],
        "    let mat = tid / $NNu;\n    let e = tid % $NNu;\n    out0[tid] = in0[mat * $SIZEu + e / $Nu * $LDu + e % $Nu];\n",
        batch * n * n,
        0,
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    Ok(Some(Plan {
        kernels,
        temps: vec![tri_t, ql_t, rank_t, z_t],
        launches,
    }))
}

/// The f32 matrices `op` (the custom call `what`) takes: the operand, its type, and the
/// rows and columns of each matrix.
fn matrix_operand(
    f: &Function,
    op: &Operation,
    what: &str,
) -> Result<(ValueId, TensorType, u64, u64)> {
    let Some(&a) = op.operands.first() else {
        return Err(Error::invalid(format!("{what} without operand")));
    };
    let at = f32_tensor(f, a, what)?;
    let d = at.dims();
    let (m, n) = (d[d.len() - 2] as u64, d[d.len() - 1] as u64);
    Ok((a, at, m, n))
}

/// The operand of a `custom_call @wgpu_hlo.svd` that a bidiagonal plan takes: `at` of
/// `batch` `m x n` matrices, `m >= n >= 2`.
pub(super) struct SvdOperand {
    pub(super) what: String,
    pub(super) a: ValueId,
    pub(super) at: TensorType,
    pub(super) m: u64,
    pub(super) n: u64,
    pub(super) batch: u64,
}

/// The operand of `op` when a bidiagonal plan with `results` results takes it: f32, `m >=
/// n >= 2`, the route chosen ([`chosen`] with `min_n`); else `None`.
pub(super) fn svd_operand(
    f: &Function,
    op: &Operation,
    results: usize,
    min_n: MinN,
    target: Target,
    fallback: bool,
) -> Result<Option<SvdOperand>> {
    let what = format!("custom_call @{SVD_TARGET}");
    let (a, at, m, n) = matrix_operand(f, op, &what)?;
    // The bidiagonal QR iteration runs in f64 only: in f32 its singular values came out 1e-5
    // (256x256) to 5e-5 (1000x999) of the largest off, 30-500 times Jacobi's error.
    if op.results.len() != results
        || m < n
        || n < 2
        || !target.caps.f64
        || !chosen("WGPU_HLO_SVD_BIDIAGONAL", n, min_n, target, fallback)
    {
        return Ok(None);
    }
    let batch = at.num_elements() as u64 / (m * n);
    Ok(Some(SvdOperand {
        what,
        a,
        at,
        m,
        n,
        batch,
    }))
}

/// The `$` names the bidiagonal reduction's kernels use, for `batch` `m x n` matrices in
/// workgroups of `wg`, and `$QS`, the words per matrix of the state that follows it.
pub(super) fn bidiag_subs(
    (batch, m, n, wg): (u64, u64, u64, u64),
    q_stride: u64,
) -> Vec<(&'static str, String)> {
    let n4 = n.div_ceil(4);
    vec![
        ("$M", m.to_string()),
        ("$MN", (m * n).to_string()),
        ("$N", n.to_string()),
        ("$N4", n4.to_string()),
        ("$LD", (4 * n4).to_string()),
        ("$SIZE", (m * 4 * n4).to_string()),
        ("$WG", wg.to_string()),
        ("$B", batch.to_string()),
        ("$TS", bidiag_stride(m, n).to_string()),
        ("$QS", q_stride.to_string()),
        ("$RZ", RUNTIME_ZERO.to_string()),
        ("$TREE", tree_reduce(wg / 2, SUM, "        ")),
    ]
}

/// Words of the bidiagonal reduction's state per `m x n` matrix: the rows padded to whole
/// vec4s, `d`, `e`, the scale and 3 unused.
pub(super) fn bidiag_stride(m: u64, n: u64) -> u64 {
    let ld = 4 * n.div_ceil(4);
    m * ld + 2 * ld + 4
}

/// Loop iterations of step `k` of the bidiagonal reduction of `m x n` matrices in
/// workgroups of `wg` threads.
fn bidiag_cost(m: u64, n: u64, wg: u64, k: u64) -> u64 {
    let n4 = n.div_ceil(4);
    let c = |x: u64| x.div_ceil(wg);
    let rows = m - k;
    2 * c(m)
        + c(n4) * (2 * rows + rows.div_ceil(32))
        + c(4 * n4)
        + c(n)
        + 2 * c(m) * n4
        + 4 * wg.ilog2() as u64
        + 8
}

/// Threads per workgroup of the tridiagonal reduction of `n x n` matrices on CPU adapters,
/// where each costs barrier switches in every step (llvmpipe runs a workgroup's invocations
/// 8 at a time on one core): 16 to 256 columns, 32 to 448, else 64. Lavapipe, the reduction's
/// kernel time (min of 4 executions, ms) with 64 / 32 / 16 threads: 128 4.1 / - / 3.4, 256
/// 24.3 / 21.2 / 20.4 (24.0 / - / 20.0 in a second run), 384 74.4 / 64.4 / 75.1, 512 153 /
/// 161 / 180: past 256 columns fewer threads loop longer over more columns each.
fn cpu_tri_workgroup(n: u64) -> u64 {
    match n {
        0..=256 => 16,
        257..=448 => 32,
        _ => 64,
    }
}

/// Threads per workgroup of the bidiagonal reduction of `m x n` matrices (fewer on CPU
/// adapters, where they cost barrier switches: 32 to 256 rows, else 64; lavapipe, the
/// reduction's kernel time of svd 128 x 128 8.2-10.3 ms with 64 threads, 5.5-5.7 with 32;
/// 256 and 384 rows the same either way), where its first step fits the loop budget and the
/// iteration that follows it needs at most `next` iterations a step; else `None`.
pub(super) fn bidiag_workgroup(
    m: u64,
    n: u64,
    target: Target,
    budget: u64,
    next: u64,
) -> Option<u64> {
    let first = match (target.cpu_adapter, m) {
        (true, 0..=256) => 32,
        (true, _) => 64,
        (false, _) => 256,
    };
    [first, 256]
        .into_iter()
        .map(|wg| wg.min(m.next_power_of_two()).max(8))
        .find(|&wg| bidiag_cost(m, n, wg, 0) <= budget && next <= budget)
}

/// The bidiagonal reduction of the `m x n` matrices `a`: its state in temporary 0 (`bi`:
/// rows padded to whole vec4s, then `d`, `e` and the scale, [`Ctx::start`]), its kernel and
/// launches (as many columns per launch as the budget allows). `keep`: the
/// reflectors stay in the state (the left one of column `k` in column `k` from row `k`, the
/// right one in row `k` from column `k + 1`, both normalized to `H = I - 2 u u^T`), for the
/// back-transformations of a full decomposition.
pub(super) fn bidiag_stage(
    cx: &Ctx,
    a: (ValueId, &TensorType),
    bi: &Binding,
    (batch, m, n, wg): (u64, u64, u64, u64),
    keep: bool,
    kernels: &mut Vec<kernel::Kernel>,
    launches: &mut Vec<Launch>,
) -> Result<()> {
    let (name, desc, what) = (cx.name, cx.desc, cx.what);
    let ld = 4 * n.div_ceil(4);
    let size = m * ld;
    cx.start(
        a,
        bi,
        batch,
        (m, ld),
        bidiag_stride(m, n),
        size + 2 * ld,
        kernels,
        launches,
    )?;
    let budget = budget(cx.target);
    let k_bidiag = kernels.len();
    // Both reflections' updates deferred into the next pass over the block where workgroup
    // memory holds their vectors (`WGPU_HLO_BIDIAG_DEFER=0`: never).
    let defer = 4 * (3 * m + 2 * ld + wg) <= cx.target.max_workgroup_storage
        && !crate::fusion::switched_off("WGPU_HLO_BIDIAG_DEFER");
    // The block in a scratch texture within each launch, as the tridiagonal reduction's
    // (`tri_texture`; `WGPU_HLO_BIDIAG_TEXTURE=0`: never).
    let copies = |k: u64| block_copies(m - k, ld / 4 - k / 4, wg);
    let texture = defer
        && block_texture(cx.target, batch, m, n, "WGPU_HLO_BIDIAG_TEXTURE")
        && 4 * copies(0) <= budget;
    let mut iters = 0;
    let mut k0 = 0;
    while k0 < n {
        let mut c = if texture { copies(k0) } else { 0 } + bidiag_cost(m, n, wg, k0);
        let mut k1 = k0 + 1;
        while k1 < n && c + bidiag_cost(m, n, wg, k1) <= budget {
            c += bidiag_cost(m, n, wg, k1);
            k1 += 1;
        }
        iters = iters.max(c);
        launches.push(Launch::updating(k_bidiag, vec![k0 as u32, k1 as u32], 0));
        k0 = k1;
    }
    let (keep_left, keep_right, sync) = if keep {
        (
            "            let at = base + i * $LDu + k;\n            out0[at >> 2u][at & 3u] = vi;\n",
            "                out0[(row + j) >> 2u][(row + j) & 3u] = rr[j >> 2u][j & 3u];\n",
            // The column's vec4s are rewritten next, by other threads.
            "        storageBarrier();\n",
        )
    } else {
        ("", "", "")
    };
    let (template, how) = if defer {
        (
            BIDIAG_DEFER_KERNEL,
            ", each reflection's update applied in the next pass over the block",
        )
    } else {
        (BIDIAG_KERNEL, "")
    };
    // Rows' and columns' vectors shared through subgroups on CPU adapters.
    let shared = broadcast_lanes(cx.target, wg, "WGPU_HLO_BIDIAG_BROADCAST").filter(|_| defer);
    let mut template = template.to_string();
    if defer {
        for (key, text) in bidiag_passes(shared) {
            template = template.replace(key, &text);
        }
    }
    if texture {
        template = bidiag_in_texture(&template, keep)?;
    }
    let body = fill(
        &template
            .replace("$KEEPL\n", keep_left)
            .replace("$KEEPR\n", keep_right)
            .replace("$KEEPSYNC\n", sync)
            .replace("$REFLECTION", REFLECTION),
        &cx.subs,
    );
    let (declaration, block) = scratch(2, ld / 4, batch * m, "the trailing block");
    let body = if texture {
        format!("{declaration}{body}")
    } else {
        body
    };
    let mut kernel = workgroup_kernel(
        &format!("{name}_bidiag"),
        &format!("kernel {name}_bidiag: Householder reduction to bidiagonal form (parameters: first and end column) of {desc}, one workgroup per matrix{how}\nloop iterations per invocation: at most {iters}\nfuses: {what}"),
        vec![params()],
        vec![bi.clone()],
        &body,
        batch,
        iters,
        true,
        cx.target,
    )?;
    if texture {
        kernel.scratch_textures = vec![block];
    }
    kernels.push(kernel);
    Ok(())
}

/// The deferred bidiagonal reduction's `template` (its passes filled in) with the block read
/// and written in a scratch texture within the launch (see [`tri_texture`]): copied in from
/// row `first` and `first`'s quad of columns, back at the end but for what went to the state
/// directly (with `keep`, the reflectors: column `k` from row `k`, row `k` right of `k`,
/// for the launch's columns `k`). Errors if the template no longer has a place rewritten.
fn bidiag_in_texture(template: &str, keep: bool) -> Result<String> {
    fn swap_in(t: &mut String, from: &str, to: &str) -> Result<()> {
        if !t.contains(from) {
            return Err(Error::internal(format!(
                "bidiagonal reduction in a texture: the kernel has no `{from}`"
            )));
        }
        *t = t.replace(from, to);
        Ok(())
    }
    let mut t = template.to_string();
    swap_in(
        &mut t,
        "    let b4 = base >> 2u;\n",
        &format!(
            "    let b4 = base >> 2u;\n    let first = in0[0];\n    let end = in0[1];\n{}",
            block_in("first", "$Mu")
        ),
    )?;
    swap_in(
        &mut t,
        "let at = base + i * $LDu + k;\n            let x = (out0[at >> 2u][at & 3u] - ",
        "let x = (textureLoad(blk, vec2<u32>(k >> 2u, ty + i))[k & 3u] - ",
    )?;
    swap_in(
        &mut t,
        "let e = b4 + i * $N4u + j4;",
        "let e = vec2<u32>(j4, ty + i);",
    )?;
    swap_in(&mut t, "(out0[e] - ", "(textureLoad(blk, e) - ")?;
    swap_in(&mut t, "out0[e] = x;", "textureStore(blk, e, x);")?;
    swap_in(
        &mut t,
        "y = out0[(row + j) >> 2u][(row + j) & 3u] - ",
        "y = textureLoad(blk, vec2<u32>(j >> 2u, ty + k))[j & 3u] - ",
    )?;
    swap_in(&mut t, "let rb = b4 + i * $N4u;", "let rb = ty + i;")?;
    swap_in(
        &mut t,
        "out0[rb + j4] = (out0[rb + j4] - vi * ss[j4]) - t * rr[j4];",
        "textureStore(blk, vec2<u32>(j4, rb), (textureLoad(blk, vec2<u32>(j4, rb)) - vi * ss[j4]) - t * rr[j4]);",
    )?;
    // The rows pass: `out0[rb + j4]` (a thread's own loads) or `out0[rb + j0 + Qu]` (shared
    // by subgroups).
    if t.contains("out0[rb + j4]") {
        swap_in(
            &mut t,
            "out0[rb + j4]",
            "textureLoad(blk, vec2<u32>(j4, rb))",
        )?;
    } else {
        for q in 0.. {
            let from = format!("out0[rb + j0 + {q}u]");
            if !t.contains(&from) {
                if q == 0 {
                    return Err(Error::internal(
                        "bidiagonal reduction in a texture: no loads of the rows pass",
                    ));
                }
                break;
            }
            swap_in(
                &mut t,
                &from,
                &format!("textureLoad(blk, vec2<u32>(j0 + {q}u, rb))"),
            )?;
        }
    }
    swap_in(
        &mut t,
        "        storageBarrier();\n        workgroupBarrier();\n        if (k + 1u < $Nu) {",
        "        storageBarrier();\n        textureBarrier();\n        workgroupBarrier();\n        if (k + 1u < $Nu) {",
    )?;
    swap_in(
        &mut t,
        "            storageBarrier();\n            workgroupBarrier();\n        }\n    }\n}\n",
        &format!(
            "            storageBarrier();\n            textureBarrier();\n            workgroupBarrier();\n        }}\n    }}\n{}}}\n",
            // With `keep`, the reflectors: the entries whose smaller index is one of the
            // launch's columns.
            if keep {
                block_out(
                    "true",
                    "min(cols, vec4<u32>(i)) >= vec4<u32>(first) & min(cols, vec4<u32>(i)) < \
                     vec4<u32>(end) & cols < vec4<u32>($Nu)",
                )
            } else {
                block_out("false", "cols < cols")
            }
        ),
    )?;
    if t.contains("out0[e]") || t.contains("out0[rb") {
        return Err(Error::internal(
            "bidiagonal reduction in a texture: loads of the block left in the state",
        ));
    }
    Ok(t)
}

/// The deferred bidiagonal reduction's two passes over the block for column `k`: by columns
/// (a vec4 of them per thread: the pending updates applied, `2 v^T A`) and by rows (a row per
/// thread: `2 A u`; the `apply` branch follows). With `lanes` (CPU adapters with subgroups of
/// that size) the threads of a subgroup load the rows' `(v_i, v'_i, z_i)`, or the columns'
/// `s_j` and `u_j`, for as many rows or vec4s of columns, one each, and every step takes
/// them by `subgroupBroadcast` (llvmpipe loads lane by lane: one load serves `lanes`); the
/// loops are subgroup-uniform, the threads past the block masked.
fn bidiag_passes(lanes: Option<u64>) -> [(&'static str, String); 4] {
    let Some(l) = lanes else {
        return [
            (
                "$COLS_PASS",
                "        for (var j4 = (k >> 2u) + lid; j4 < $N4u; j4 = j4 + $WGu) {
            let cols = 4u * j4 + vec4<u32>(0u, 1u, 2u, 3u);
            let live = cols > vec4<u32>(k);
            let sj = select(vec4<f32>(0.0), ss[j4], live);
            let uj = select(vec4<f32>(0.0), rr[j4], live);
            // Summed by blocks of 32 rows: over a tall column one running f32 sum rounds
            // m times (3000 x 64: U orthogonal to 6.7e-6).
            var s = vec4<f32>(0.0);
            for (var i0 = k; i0 < $Mu; i0 = i0 + 32u) {
                var part = vec4<f32>(0.0);
                for (var i = i0; i < min(i0 + 32u, $Mu); i = i + 1u) {
                    let e = b4 + i * $N4u + j4;
                    let c = cv[i];
                    let x = (out0[e] - c.x * sj) - zz[i] * uj;
                    out0[e] = x;
                    part = part + c.y * x;
                }
                s = s + part;
            }
            ss[j4] = select(vec4<f32>(0.0), 2.0 * s, live);
        }
"
                .to_string(),
            ),
            (
                "$ROWS_PASS",
                "            for (var i = k + 1u + lid; i < $Mu; i = i + $WGu) {
                let rb = b4 + i * $N4u;
                let vi = cv[i].y;
                var t = 0.0;
                for (var j4 = (k + 1u) >> 2u; j4 < $N4u; j4 = j4 + 1u) {
                    t = t + dot(out0[rb + j4] - vi * ss[j4], rr[j4]);
                }
                t = 2.0 * t;
"
                .to_string(),
            ),
            ("$ROWS_END", String::new()),
            ("$LANE_BUILTIN", String::new()),
        ];
    };
    let mut cols = format!(
        "        for (var jb = k >> 2u; jb < $N4u; jb = jb + $WGu) {{
            let act = jb + lid < $N4u;
            let j4 = min(jb + lid, $N4u - 1u);
            let cols = 4u * j4 + vec4<u32>(0u, 1u, 2u, 3u);
            let live = cols > vec4<u32>(k);
            let sj = select(vec4<f32>(0.0), ss[j4], live);
            let uj = select(vec4<f32>(0.0), rr[j4], live);
            // Summed by blocks of 32 rows: over a tall column one running f32 sum rounds
            // m times (3000 x 64: U orthogonal to 6.7e-6).
            var s = vec4<f32>(0.0);
            for (var i0 = k; i0 < $Mu; i0 = i0 + 32u) {{
                var part = vec4<f32>(0.0);
                for (var i1 = i0; i1 < min(i0 + 32u, $Mu); i1 = i1 + {l}u) {{
                    let il = min(i1 + sgl, $Mu - 1u);
                    let cl = vec3<f32>(cv[il], zz[il]);
"
    );
    for q in 0..l {
        cols.push_str(&format!(
            "                    {{
                        let c = subgroupBroadcast(cl, {q}u);
                        let i = i1 + {q}u;
                        if (act && i < $Mu) {{
                            let e = b4 + i * $N4u + j4;
                            let x = (out0[e] - c.x * sj) - c.z * uj;
                            out0[e] = x;
                            part = part + c.y * x;
                        }}
                    }}
"
        ));
    }
    cols.push_str(
        "                }
                s = s + part;
            }
            if (act) {
                ss[j4] = select(vec4<f32>(0.0), 2.0 * s, live);
            }
        }
",
    );
    let mut rows = format!(
        "            for (var ib = k + 1u; ib < $Mu; ib = ib + $WGu) {{
                let act = ib + lid < $Mu;
                let i = min(ib + lid, $Mu - 1u);
                let rb = b4 + i * $N4u;
                let vi = cv[i].y;
                var t = 0.0;
                for (var j0 = (k + 1u) >> 2u; j0 < $N4u; j0 = j0 + {l}u) {{
                    let jl = min(j0 + sgl, $N4u - 1u);
                    let sl = ss[jl];
                    let rl = rr[jl];
"
    );
    for q in 0..l {
        rows.push_str(&format!(
            "                    if (j0 + {q}u < $N4u) {{
                        t = t + dot(out0[rb + j0 + {q}u] - vi * subgroupBroadcast(sl, {q}u), subgroupBroadcast(rl, {q}u));
                    }}
"
        ));
    }
    rows.push_str("                }\n                t = 2.0 * t;\n                if (act) {\n");
    [
        ("$COLS_PASS", cols),
        ("$ROWS_PASS", rows),
        ("$ROWS_END", "                }\n".to_string()),
        (
            "$LANE_BUILTIN",
            ", @builtin(subgroup_invocation_id) sgl: u32".to_string(),
        ),
    ]
}

/// The bidiagonal reduction ([`bidiag_stage`]): `out0` the state by vec4s (the matrix's
/// rows padded to `LD`, then d, e and the scale), `in0` the first and end column.
const BIDIAG_KERNEL: &str = r#"var<workgroup> red: array<f32, $WG>;
var<workgroup> cc: array<f32, $M>;
var<workgroup> rr: array<vec4<f32>, $N4>;

$REFLECTION
@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    $RZ = nwg.z >> 16u;
    let mat = wid.y * nwg.x + wid.x;
    if (mat >= $Bu) { return; }
    let base = mat * $TSu;
    let b4 = base >> 2u;
    for (var k = in0[0]; k < in0[1]; k = k + 1u) {
        // From the left: column k from row k.
        var acc = 0.0;
        for (var i = k + lid; i < $Mu; i = i + $WGu) {
            let at = base + i * $LDu + k;
            let x = out0[at >> 2u][at & 3u];
            cc[i] = x;
            if (i > k) { acc = acc + x * x; }
        }
        red[lid] = acc;
$TREE        let h = reflection(cc[k], red[0]);
        workgroupBarrier();
        for (var i = k + lid; i < $Mu; i = i + $WGu) {
            let vi = select(cc[i], h.y, i == k) * h.z;
            cc[i] = vi;
$KEEPL
        }
        if (lid == 0u) {
            let at = base + $SIZEu + k;
            out0[at >> 2u][at & 3u] = h.x;
        }
$KEEPSYNC
        workgroupBarrier();
        // On the columns right of k (a vec4 of them per thread; k and left of it untouched).
        for (var j4 = (k >> 2u) + lid; j4 < $N4u; j4 = j4 + $WGu) {
            let cols = 4u * j4 + vec4<u32>(0u, 1u, 2u, 3u);
            // Summed by blocks of 32 rows: over a tall column one running f32 sum rounds
            // m times (3000 x 64: U orthogonal to 6.7e-6).
            var s = vec4<f32>(0.0);
            for (var i0 = k; i0 < $Mu; i0 = i0 + 32u) {
                var part = vec4<f32>(0.0);
                for (var i = i0; i < min(i0 + 32u, $Mu); i = i + 1u) {
                    part = part + cc[i] * out0[b4 + i * $N4u + j4];
                }
                s = s + part;
            }
            s = select(vec4<f32>(0.0), 2.0 * s, cols > vec4<u32>(k));
            for (var i = k; i < $Mu; i = i + 1u) {
                let e = b4 + i * $N4u + j4;
                out0[e] = out0[e] - cc[i] * s;
            }
        }
        storageBarrier();
        workgroupBarrier();
        if (k + 1u < $Nu) {
            // From the right: row k from column k + 1 (at the last but one column nothing to
            // zero: e_k is the entry itself).
            let row = base + k * $LDu;
            var acc2 = 0.0;
            for (var j = lid; j < $LDu; j = j + $WGu) {
                var y = 0.0;
                if (j > k && j < $Nu) { y = out0[(row + j) >> 2u][(row + j) & 3u]; }
                rr[j >> 2u][j & 3u] = y;
                if (j > k + 1u) { acc2 = acc2 + y * y; }
            }
            red[lid] = acc2;
$TREE            let g = reflection(rr[(k + 1u) >> 2u][(k + 1u) & 3u], red[0]);
            workgroupBarrier();
            for (var j = k + 1u + lid; j < $Nu; j = j + $WGu) {
                rr[j >> 2u][j & 3u] = select(rr[j >> 2u][j & 3u], g.y, j == k + 1u) * g.z;
$KEEPR
            }
            if (lid == 0u) {
                let at = base + $SIZEu + $LDu + k;
                out0[at >> 2u][at & 3u] = g.x;
            }
            workgroupBarrier();
            // On the rows below k (a row per thread, by vec4s).
            for (var i = k + 1u + lid; i < $Mu; i = i + $WGu) {
                let rb = b4 + i * $N4u;
                var s = 0.0;
                for (var j4 = (k + 1u) >> 2u; j4 < $N4u; j4 = j4 + 1u) {
                    s = s + dot(out0[rb + j4], rr[j4]);
                }
                s = 2.0 * s;
                for (var j4 = (k + 1u) >> 2u; j4 < $N4u; j4 = j4 + 1u) {
                    out0[rb + j4] = out0[rb + j4] - s * rr[j4];
                }
            }
            storageBarrier();
            workgroupBarrier();
        }
    }
}
"#;

/// [`BIDIAG_KERNEL`] with each reflection's update deferred: two passes over the block per
/// column instead of four, one of them without writes. Column `k`'s left reflection `v`
/// (`cv.y`) and its products `2 v^T A` (`ss`) are not applied where computed; the pass that
/// finds `2 A u` by rows (`zz`) for the right reflection `u` (`rr`) reads each row with the left
/// update subtracted, and the next column's pass subtracts both updates as it reads the block,
/// writes it, and sums its own `v^T A` from what it wrote. The reduced column and row are read
/// with the pending updates subtracted too. The last column of a launch applies everything
/// (the next launch starts from the matrix) and zeroes `cv.x` and `zz`: nothing pending. Each element is
/// computed as `(a - v_i s_j) - z_i u_j`, in the order and rounding of the kernel without
/// deferral, so the results are the same to the bit. Workgroup memory: `4 (3 m + 2 ld + wg)`
/// bytes against `4 (m + ld + wg)`; taller matrices keep [`BIDIAG_KERNEL`]. llvmpipe, the kernel's time on one 256 x 256 matrix: 38.0 -> 26.0 ms; 512 x 512:
/// 295 -> 217 ms.
const BIDIAG_DEFER_KERNEL: &str = r#"var<workgroup> red: array<f32, $WG>;
// The pending left reflection (x) and the column's new one (y), from row k.
var<workgroup> cv: array<vec2<f32>, $M>;
// 2 A u by rows of the pending right reflection.
var<workgroup> zz: array<f32, $M>;
// The right reflection u (pending while pr).
var<workgroup> rr: array<vec4<f32>, $N4>;
// 2 v^T A by columns of the pending left reflection.
var<workgroup> ss: array<vec4<f32>, $N4>;

$REFLECTION
@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32$LANE_BUILTIN) {
    $RZ = nwg.z >> 16u;
    let mat = wid.y * nwg.x + wid.x;
    if (mat >= $Bu) { return; }
    let base = mat * $TSu;
    let b4 = base >> 2u;
    // Nothing pending (zero vectors): the products below subtract exact zeros.
    for (var i = lid; i < $Mu; i = i + $WGu) {
        cv[i] = vec2<f32>(0.0);
        zz[i] = 0.0;
    }
    for (var j4 = lid; j4 < $N4u; j4 = j4 + $WGu) {
        rr[j4] = vec4<f32>(0.0);
        ss[j4] = vec4<f32>(0.0);
    }
    workgroupBarrier();
    for (var k = in0[0]; k < in0[1]; k = k + 1u) {
        // From the left: column k from row k, the pending updates subtracted.
        let sk = ss[k >> 2u][k & 3u];
        let uk = rr[k >> 2u][k & 3u];
        var acc = 0.0;
        for (var i = k + lid; i < $Mu; i = i + $WGu) {
            let at = base + i * $LDu + k;
            let x = (out0[at >> 2u][at & 3u] - cv[i].x * sk) - zz[i] * uk;
            cv[i].y = x;
            if (i > k) { acc = acc + x * x; }
        }
        red[lid] = acc;
$TREE        let h = reflection(cv[k].y, red[0]);
        workgroupBarrier();
        for (var i = k + lid; i < $Mu; i = i + $WGu) {
            let vi = select(cv[i].y, h.y, i == k) * h.z;
            cv[i].y = vi;
$KEEPL
        }
        if (lid == 0u) {
            let at = base + $SIZEu + k;
            out0[at >> 2u][at & 3u] = h.x;
        }
$KEEPSYNC
        workgroupBarrier();
        // On the columns right of k (a vec4 of them per thread; k and left of it rewritten
        // unchanged): the pending updates applied and written, and 2 v^T A of the result.
$COLS_PASS        storageBarrier();
        workgroupBarrier();
        if (k + 1u < $Nu) {
            // From the right: row k from column k + 1, the left update subtracted (at the last
            // but one column nothing to zero: e_k is the entry itself).
            let row = base + k * $LDu;
            let vk = cv[k].y;
            var acc2 = 0.0;
            for (var j = lid; j < $LDu; j = j + $WGu) {
                var y = 0.0;
                if (j > k && j < $Nu) {
                    y = out0[(row + j) >> 2u][(row + j) & 3u] - vk * ss[j >> 2u][j & 3u];
                }
                rr[j >> 2u][j & 3u] = y;
                if (j > k + 1u) { acc2 = acc2 + y * y; }
            }
            red[lid] = acc2;
$TREE            let g = reflection(rr[(k + 1u) >> 2u][(k + 1u) & 3u], red[0]);
            workgroupBarrier();
            for (var j = k + 1u + lid; j < $Nu; j = j + $WGu) {
                rr[j >> 2u][j & 3u] = select(rr[j >> 2u][j & 3u], g.y, j == k + 1u) * g.z;
$KEEPR
            }
            if (lid == 0u) {
                let at = base + $SIZEu + $LDu + k;
                out0[at >> 2u][at & 3u] = g.x;
            }
            workgroupBarrier();
            // On the rows below k (a row per thread, by vec4s): 2 A u of the rows with the
            // left update subtracted; the last column of a launch writes both updates.
            let apply = k + 1u == in0[1];
$ROWS_PASS                if (apply) {
                    for (var j4 = (k + 1u) >> 2u; j4 < $N4u; j4 = j4 + 1u) {
                        out0[rb + j4] = (out0[rb + j4] - vi * ss[j4]) - t * rr[j4];
                    }
                    cv[i].x = 0.0;
                    zz[i] = 0.0;
                } else {
                    cv[i].x = vi;
                    zz[i] = t;
                }
$ROWS_END            }
            storageBarrier();
            workgroupBarrier();
        }
    }
}
"#;

/// Threads per workgroup of [`BISECT_KERNEL`].
const BISECT_WG: u64 = 64;

/// Most bisection steps per eigenvalue: the interval starts at most 2.0003 times the matrix's
/// norm wide (up to 1024 columns) and stops at 2 epsilons of the norm, which 24 halvings
/// reach; one more for margin. A matrix takes bisection where its steps fit one launch
/// (llvmpipe: up to 605 columns).
const BISECT_STEPS: u64 = 25;

/// Eigenvalues of the symmetric tridiagonal matrices in the reduction's state (`in0`, the
/// matrices scaled by `g`) by bisection (LAPACK's `sstebz`): the thread of eigenvalue `k`
/// (ascending) halves an interval within the Gershgorin bounds, keeping the half in which
/// the Sturm count (the negative pivots of `T - x I = L D L^T`, the number of eigenvalues
/// below `x`) passes `k`, down to 2 f32 epsilons of `|T|`; every thread of a workgroup reads
/// the matrix's `d` and `e^2` from workgroup memory. No iteration to converge or fail, f32
/// only (adapters without f64 too), and each eigenvalue independent of the others: within a
/// few epsilons of `|T|` (the count is exact for a matrix within a few epsilons of `T`),
/// where the QL iteration's chase is one thread and its eigenvalues drift in f32. Writes
/// `w = x / g`, ascending.
const BISECT_KERNEL: &str = r#"var<workgroup> dd: array<f32, $N>;
var<workgroup> e2: array<f32, $N>;
var<workgroup> bounds: vec2<f32>;

@compute @workgroup_size($BWG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    $RZ = nwg.z >> 16u;
    let gid = wid.y * nwg.x + wid.x;
    let mat = gid / $Gu;
    let k = (gid % $Gu) * $BWGu + lid;
    if (mat >= $Bu) { return; }
    let sb = mat * $TSu;
    // e_j couples rows j and j + 1: the reduction's e, the last one still in the matrix.
    for (var j = lid; j < $Nu; j = j + $BWGu) {
        dd[j] = in0[sb + j * $LDu + j];
        var e = 0.0;
        if (j + 2u < $Nu) {
            e = in0[sb + $SIZEu + j];
        } else if (j + 2u == $Nu) {
            e = in0[sb + j * $LDu + j + 1u];
        }
        e2[j] = e * e;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var lo = dd[0];
        var hi = dd[0];
        var ep = 0.0;
        for (var j = 0u; j < $Nu; j = j + 1u) {
            let e = sqrt(e2[j]);
            lo = min(lo, dd[j] - ep - e);
            hi = max(hi, dd[j] + ep + e);
            ep = e;
        }
        bounds = vec2<f32>(lo, hi);
    }
    let b = workgroupUniformLoad(&bounds);
    if (k >= $Nu) { return; }
    let tnorm = max(abs(b.x), abs(b.y));
    // Widened as LAPACK does, so that every eigenvalue lies inside.
    // The smallest pivot magnitude: above f32's smallest normal number.
    let pivmin = 1e-37;
    let pad = 2.4e-7 * tnorm * f32($Nu) + 4.0 * pivmin;
    let tol = 2.4e-7 * tnorm;
    var lo = b.x - pad;
    var hi = b.y + pad;
    // The eigenvalues below lo and below hi (a pivot of exactly 0 counts as negative).
    var clo = 0u;
    var chi = $Nu;
    for (var it = 0u; it < $STEPSu; it = it + 1u) {
        if (hi - lo <= tol) { break; }
        let x = 0.5 * (lo + hi);
        // The eigenvalues below x.
        var count = 0u;
        var q = dd[0] - x;
        for (var j = 0u; j < $Nu; j = j + 1u) {
            if (j > 0u) { q = (dd[j] - x) - e2[j - 1u] / q; }
            if (abs(q) < pivmin) { q = -pivmin; }
            if (q < 0.0) { count = count + 1u; }
        }
        if (count > k) {
            hi = x;
            chi = count;
        } else {
            lo = x;
            clo = count;
        }
    }
    // Where every eigenvalue in [lo, hi] is a diagonal entry with zero couplings on both
    // sides, all equal, it is exactly that entry: a diagonal or zero matrix gives its own
    // entries, as the QL iteration does (a midpoint within the tolerance would not).
    var m = 0u;
    var vmin = 3.0e38;
    var vmax = -3.0e38;
    for (var j = 0u; j < $Nu; j = j + 1u) {
        let alone = e2[j] == 0.0 && (j == 0u || e2[j - 1u] == 0.0);
        // (Within the pivots' clamp of the ends: a zero pivot counts as negative.)
        if (alone && dd[j] >= lo - 2.0 * pivmin && dd[j] <= hi + 2.0 * pivmin) {
            m = m + 1u;
            vmin = min(vmin, dd[j]);
            vmax = max(vmax, dd[j]);
        }
    }
    var w = 0.5 * (lo + hi);
    if (m > 0u && m == chi - clo && vmin == vmax) { w = vmin; }
    // The scale g, a power of two: the division is exact.
    let g = in0[sb + $SIZEu + $LDu];
    out0[mat * $Nu + k] = w / g;
}
"#;

/// The Rayleigh quotient of column `zb..` of an f32 QL state's Z on the tridiagonal matrix
/// of the reduction's state at `sb` (`in0`): `num / den` plus their compensations `cn`, `cd`
/// (Neumaier's summation: the error of each sum about one rounding of its largest term).
const RAYLEIGH: &str = "    var num = 0.0;
    var cn = 0.0;
    var den = 0.0;
    var cd = 0.0;
    var zp = 0.0;
    var ep = 0.0;
    var zj = out0[zb];
    for (var j = 0u; j < $Nu; j = j + 1u) {
        var ej = 0.0;
        var zn = 0.0;
        if (j + 1u < $Nu) {
            zn = out0[zb + j + 1u];
            if (j + 2u < $Nu) { ej = in0[sb + $SIZEu + j]; } else { ej = in0[sb + j * $LDu + j + 1u]; }
        }
        let t = zj * (in0[sb + j * $LDu + j] * zj + ep * zp + ej * zn);
        let s1 = num + t;
        cn = cn + select((t - s1) + num, (num - s1) + t, abs(num) >= abs(t));
        num = s1;
        let q = zj * zj;
        let s2 = den + q;
        cd = cd + select((q - s2) + den, (den - s2) + q, abs(den) >= abs(q));
        den = s2;
        zp = zj;
        ep = ej;
        zj = zn;
    }
";

/// A QL stage ([`ql_stage`]): the state `state` (f64) holds, per matrix (`stride` words), Z
/// by columns, then two copies (`slot` words each) of `d`, `e` (each `ld = slot / 2 - 2`
/// words) and status.
struct Ql<'a> {
    cx: &'a Ctx<'a>,
    state: &'a Binding,
    batch: u64,
    order: u64,
    /// Workgroups per matrix and vec4s of Z's rows per workgroup; `None`: no Z (the chase
    /// alone, one workgroup per matrix).
    z: Option<(u64, u64)>,
    /// The state and the arithmetic in f64 (else f32: [`ql_in_f64`]).
    f64: bool,
    stride: u64,
    /// With Z: vec4 entries of each of the two rotation logs at the end of each matrix's
    /// state.
    log: u64,
    slot: u64,
    budget: u64,
}

/// Whether the QL iteration of eigh runs in f64 on `target`: where the adapter has f64
/// (`WGPU_HLO_QL_F32=1`: never). Without it (Metal, many mobile GPUs) it runs in f32, as
/// LAPACK's `ssteqr` does, with a convergence test at f32's epsilon instead of 1e-12, so that
/// eigh keeps the tridiagonal route there instead of Jacobi sweeps only.
fn ql_in_f64(target: Target) -> bool {
    target.caps.f64 && !std::env::var("WGPU_HLO_QL_F32").is_ok_and(|v| v.trim() == "1")
}

/// The `$` names of the QL kernels' float type: the type, the literal suffix and the
/// convergence tolerance (relative to the neighbouring diagonal entries).
fn ql_float(f64: bool) -> [(&'static str, String); 4] {
    let (ty, suffix, tol, abs) = if f64 {
        ("f64", "lf", "1e-12lf", "2.220446049250313e-16lf")
    } else {
        ("f32", "f", "1.1920929e-7f", "5.9604645e-8f")
    };
    [
        ("$FT", ty.to_string()),
        ("$FS", suffix.to_string()),
        ("$QTOL", tol.to_string()),
        ("$QABS", abs.to_string()),
    ]
}

/// Workgroup memory of the QL kernel for order `n`: `d` and `e` (f64), the control words.
fn ql_bytes(n: u64) -> u64 {
    8 * 2 * n + 8
}

/// Loop iterations per QL (or bidiagonal QR) rotation: the search, the chase and a thread's
/// rotation of its rows.
const QL_PER_ROTATION: u64 = 3;

/// Worst-case loop iterations of one QL (or bidiagonal QR) iteration on order `n`.
pub(super) fn ql_step(n: u64) -> u64 {
    QL_PER_ROTATION * n + 4
}

/// The QL kernel and its launches (updating temporary `t`, the state); returns the offset of
/// the copy of `d`, `e` and status the last launch wrote, and the WGSL test that the matrix
/// at `qb` of the state bound as `in0` finished.
fn ql_stage(
    q: &Ql,
    kernels: &mut Vec<kernel::Kernel>,
    launches: &mut Vec<Launch>,
    t: usize,
) -> Result<(u64, String)> {
    let (name, desc, what, target) = (q.cx.name, q.cx.desc, q.cx.what, q.cx.target);
    let n = q.order;
    let ld = (q.slot - QL_STATUS) / 2;
    let (n4, size) = if q.z.is_some() {
        (ld / 4, n * ld)
    } else {
        (0, 0)
    };
    let step = ql_step(n);
    // The logs (with Z, two: one written while the other is applied): their first word
    // in each matrix's state.
    let log_at = q.stride - 8 * q.log;
    let (groups, rows) = q.z.unwrap_or((0, 8));
    let logged = q.z.is_some();
    // With Z the chase's rotations are logged only as far as their application stays within
    // the budget too.
    let iters = if logged {
        q.budget
    } else {
        q.budget.min(step * (n + 1))
    };
    // Rotations shared through subgroups on CPU adapters.
    let main = if logged {
        ql_apply_kernel(
            QL_WAVE,
            broadcast_lanes(target, rows, "WGPU_HLO_QL_BROADCAST"),
        )
    } else {
        CHASE_MAIN.to_string()
    };
    let body = fill(
        &QL_KERNEL.replace("$MAIN", &main),
        &[
            (
                "$STORE_ROT",
                if logged {
                    "            out0[lb + lpos + 1u + i - l] = vec4<$FT>(c, s, 0.0$FS, 0.0$FS);"
                } else {
                    ""
                }
                .to_string(),
            ),
            (
                "$LOG_DECL",
                if logged { QL_LOG_DECL } else { "" }.to_string(),
            ),
            (
                "$LOG_CHECK",
                if logged { QL_LOG_CHECK } else { "" }.to_string(),
            ),
            (
                "$LOG_CHAIN",
                if logged { QL_LOG_CHAIN } else { "" }.to_string(),
            ),
            (
                "$LOG_END",
                if logged {
                    "    out0[lb] = vec4<$FT>($FT(chains), 0.0$FS, 0.0$FS, 0.0$FS);\n"
                } else {
                    ""
                }
                .to_string(),
            ),
            ("$KW", QL_WAVE.to_string()),
            ("$LOGAT", log_at.to_string()),
            ("$LOGCAP", q.log.to_string()),
            ("$N", n.to_string()),
            ("$N4", n4.to_string()),
            ("$LD", ld.to_string()),
            ("$SIZE", size.to_string()),
            ("$B", q.batch.to_string()),
            ("$QS", q.stride.to_string()),
            ("$RZ", RUNTIME_ZERO.to_string()),
            ("$SLOT", q.slot.to_string()),
            ("$STEP", step.to_string()),
            ("$BUDGET", q.budget.to_string()),
            ("$MAXIT", MAX_ITERATIONS.to_string()),
            ("$G", groups.to_string()),
            ("$R", rows.to_string()),
            ("$CW", rows.to_string()),
        ]
        .into_iter()
        .chain(ql_float(q.f64))
        .collect::<Vec<_>>(),
    );
    let float = if q.f64 { "f64" } else { "f32" };
    let how = if logged {
        format!(", one workgroup per matrix chasing and logging the rotations while {groups} apply the last launch's log to Z ({QL_WAVE} chains per sweep, a vec4 of rows per thread; parameters: the launch's index, and 1 chase | 2 apply)")
    } else {
        ", one workgroup per matrix".to_string()
    };
    kernels.push(workgroup_kernel(
        &format!("{name}_ql"),
        &format!("kernel {name}_ql: implicit QL iterations ({float}; parameter: the launch's index) on the tridiagonal matrices of {desc}, resumed where the last launch stopped{how}\nloop iterations per invocation: at most {iters}\nfuses: {what}"),
        vec![params()],
        vec![q.state.clone()],
        &body,
        q.batch * (groups + 1),
        iters,
        true,
        target,
    )?);
    let k = kernels.len() - 1;
    // Room for PLANNED_ITERATIONS iterations per eigenvalue, each over the rest of the matrix;
    // a launch stops at its loop budget or (with Z) where its log is full, after at least
    // `log - n - 1` entries, two per rotation at worst (chains of one rotation).
    let rotations = PLANNED_ITERATIONS * n * (n + 1) / 2;
    let mut per_launch = (q.budget - step) / QL_PER_ROTATION;
    if logged {
        per_launch = per_launch.min(q.log.saturating_sub(n + 1) / 2);
    }
    let count = rotations.div_ceil(per_launch.max(1)) + 1;
    for i in 0..count {
        let apply = if logged && i > 0 { 2 } else { 0 };
        launches.push(Launch::updating(k, vec![i as u32, 1 | apply], t));
    }
    if logged {
        // The last launch's log.
        launches.push(Launch::updating(k, vec![count as u32, 2], t));
    }
    let last = size + (count % 2) * q.slot;
    let one = if q.f64 { "1.0lf" } else { "1.0" };
    Ok((last, format!("in0[qb + {}u] == {one}", last + 2 * ld + 2)))
}

/// Chains of QL rotations applied in one sweep over Z: each row of Z is loaded and stored
/// once per wave. llvmpipe, eigh 256x256, the rotations' device time (without subgroup
/// broadcasts): 2 chains 25-30 ms, 3 20-24, 4 16-17, 5 15-16, 8 26 (its carries spill).
pub(super) const QL_WAVE: u64 = 4;

/// The chase's log (lane 0's): the next entry, the chains logged, and the waves of `$KW`
/// chains the application will sweep: the current one's rows and the loop iterations of
/// the ones before.
const QL_LOG_DECL: &str = "    let lb = b4 + ($LOGATu >> 2u) + (in0[0] & 1u) * $LOGCAPu;\n    var lpos = 1u;\n    var chains = 0u;\n    var wlo = 0u;\n    var wm = 0u;\n    var wcost = 0u;\n";

/// Before a QL iteration on [l, m] with Z: stop the launch where its rotations do not fit
/// the log, or their wave would take the next launch's application past its loop budget.
const QL_LOG_CHECK: &str = r#"        let fresh = chains % $KWu == 0u;
        let done = select(wcost, wcost + wm - wlo + $KWu + 2u, fresh && chains > 0u);
        let nlo = select(min(wlo, l), l, fresh);
        let nm = select(max(wm, m), m, fresh);
        if (lpos + 1u + m - l > $LOGCAPu || done + nm - nlo + $KWu + 2u > $BUDGETu) { state = 3u; break; }
"#;

/// After a QL iteration with Z: its chain's header (first and last row, the row of the
/// first logged rotation) before its rotations.
const QL_LOG_CHAIN: &str = r#"        out0[lb + lpos] = vec4<$FT>($FT(lo), $FT(m), $FT(l), 0.0$FS);
        lpos = lpos + 1u + m - l;
        chains = chains + 1u;
        wcost = done;
        wlo = nlo;
        wm = nm;
"#;

/// How [`wave_sweep`] walks a wave's rows: `$T` stands for the step. The row step `$T`
/// loads (while `$T <= hi - lo`), chain `j`'s rotation index at step `$T` (`$J` for `j`),
/// the row the last chain finishes at step `$T` (from `$KW`), and the rotation's
/// components of an entry `r`.
pub(super) struct Walk {
    pub(super) load: &'static str,
    pub(super) rotation: &'static str,
    pub(super) store: &'static str,
    pub(super) components: &'static str,
}

/// The sweep of one wave of `k` logged chains over Z's rows `b4 + row * $N4 + r4` (by the
/// threads with `act`): chain `j` is a carry that takes the rows chain `j - 1` finished, one
/// step behind it, its rotation the identity outside `[a_j, b_j)` (which passes its carry on
/// exactly), so each row of Z is loaded and stored once per wave instead of once per chain.
/// Rotation `i` of chain `j` is entry `f_j + i` of the log at `lb`; the wave spans `[lo,
/// hi]`, its carries are `q_j`. With `lanes`, each lane of a subgroup loads every chain's
/// rotation for one of `lanes` steps, which the steps take by `subgroupBroadcast`
/// (llvmpipe loads lane by lane: one load serves `lanes` steps instead of one).
pub(super) fn wave_sweep(k: u64, lanes: Option<u64>, walk: &Walk) -> String {
    // Chain j's rotation for step `t` (identity outside its rows) into `cs`.
    let rotation = |j: u64, t: &str, cs: &str, pad: &str| {
        let i = walk
            .rotation
            .replace("$T", t)
            .replace("$J", &format!("{j}u"));
        let comps = walk.components;
        format!("{pad}{{\n{pad}    let i = {i};\n{pad}    let live = {t} > {j}u && i >= a{j} && i < b{j};\n{pad}    let r = out0[lb + select(0u, f{j} + i, live)];\n{pad}    {cs} = select(vec2<$FT>(1.0$FS, 0.0$FS), {comps}, live);\n{pad}}}\n")
    };
    // Step `t` of every chain, the rotations from `cs(j)`.
    let step = |t: &str, cs: &dyn Fn(u64) -> String, pad: &str| {
        let load = walk.load.replace("$T", t);
        let store = walk.store.replace("$T", t);
        let mut out = format!("{pad}var x = vec4<$FT>(0.0$FS);\n{pad}if (act && {t} <= hi - lo) {{ x = out0[b4 + ({load}) * $N4u + r4]; }}\n");
        for j in 0..k {
            out.push_str(&format!("{pad}{{\n{pad}    let cs = {};\n{pad}    let y = cs.y * x + cs.x * q{j};\n{pad}    q{j} = cs.x * x - cs.y * q{j};\n{pad}    x = y;\n{pad}}}\n", cs(j)));
        }
        out.push_str(&format!("{pad}if (act && {t} >= $KWu && {t} <= hi - lo + $KWu) {{ out0[b4 + ({store}) * $N4u + r4] = x; }}\n"));
        out
    };
    match lanes {
        Some(l) => {
            let mut body = format!("        for (var t0 = 0u; t0 <= hi - lo + $KWu; t0 = t0 + {l}u) {{\n            let tq = t0 + sgl;\n");
            for j in 0..k {
                body.push_str(&format!(
                    "            var s{j} = vec2<$FT>(1.0$FS, 0.0$FS);\n"
                ));
                body.push_str(&rotation(j, "tq", &format!("s{j}"), "            "));
            }
            for u in 0..l {
                body.push_str(&format!(
                    "            {{\n                let t = t0 + {u}u;\n"
                ));
                body.push_str(&step(
                    "t",
                    &|j| format!("subgroupBroadcast(s{j}, {u}u)"),
                    "                ",
                ));
                body.push_str("            }\n");
            }
            body.push_str("        }\n");
            body
        }
        None => {
            let mut body =
                "        for (var t = 0u; t <= hi - lo + $KWu; t = t + 1u) {\n".to_string();
            for j in 0..k {
                body.push_str(&format!(
                    "            var s{j} = vec2<$FT>(1.0$FS, 0.0$FS);\n"
                ));
                body.push_str(&rotation(j, "t", &format!("s{j}"), "            "));
            }
            body.push_str(&step("t", &|j| format!("s{j}"), "            "));
            body.push_str("        }\n");
            body
        }
    }
}

/// With subgroup broadcasts: the lane's index as an argument, a parameter and the entry
/// point's builtin (`sgl`); else nothing.
pub(super) fn lane_names(shared: bool) -> (&'static str, &'static str, &'static str) {
    if shared {
        (
            ", sgl",
            ", sgl: u32",
            ", @builtin(subgroup_invocation_id) sgl: u32",
        )
    } else {
        ("", "", "")
    }
}

/// The QL kernel's application of the chains the last launch logged to Z (by columns in
/// `out0`, a vec4 of rows per thread), [`QL_WAVE`] at a time ([`wave_sweep`]); chains run
/// from their last row down. No barriers: the threads' rows are their own.
fn ql_apply_kernel(k: u64, lanes: Option<u64>) -> String {
    let mut heads = String::new();
    for j in 0..k {
        heads.push_str(&format!(
            "        let ok{j} = c + {j}u < count;\n        let hd{j} = out0[lb + select(0u, h, ok{j})];\n        let a{j} = select(0u, u32(hd{j}.x), ok{j});\n        let b{j} = select(0u, u32(hd{j}.y), ok{j});\n        let f{j} = h + 1u - u32(hd{j}.z);\n        if (ok{j}) {{\n            lo = min(lo, a{j});\n            hi = max(hi, b{j});\n            h = f{j} + b{j};\n        }}\n        var q{j} = vec4<$FT>(0.0$FS);\n"
        ));
    }
    let sweep = wave_sweep(
        k,
        lanes,
        &Walk {
            load: "hi - $T",
            rotation: "hi + $J - $T",
            store: "hi + $KWu - $T",
            components: "r.xy",
        },
    );
    let (lane_arg, lane_param, lane_builtin) = lane_names(lanes.is_some());
    let last = k - 1;
    format!(
        r#"
// The rotations the last launch logged, applied to the rows `r4` of matrix `mat`'s Z (by
// every thread, `act` those with rows).
fn apply(mat: u32, r4: u32, act: bool{lane_param}) {{
    let b4 = mat * ($QSu >> 2u);
    let lb = b4 + ($LOGATu >> 2u) + ((in0[0] + 1u) & 1u) * $LOGCAPu;
    let count = u32(out0[lb].x);
    // The next chain's header.
    var h = 1u;
    for (var c = 0u; c < count; c = c + $KWu) {{
        // This wave's chains (headers: first and last row, the row of the first logged
        // rotation; chain j's rotation i at entry f_j + i) and the rows they span.
        var lo = 0xffffffffu;
        var hi = 0u;
{heads}        // Step t: chain 0 takes row hi - t, chain j row hi + j - t; chain {last} finishes
        // row hi + {last} - t + 1.
{sweep}    }}
}}

// Per matrix, workgroup 0 chases (where `in0[1]` has bit 0) and logs, the others rotate Z
// by the last launch's log (bit 1).
@compute @workgroup_size($R)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32{lane_builtin}) {{
    $RZ = nwg.z >> 16u;
    let gid = wid.y * nwg.x + wid.x;
    let mat = gid / ($Gu + 1u);
    let part = gid % ($Gu + 1u);
    if (mat >= $Bu) {{ return; }}
    if (part == 0u) {{
        if ((in0[1] & 1u) != 0u) {{ chase(mat, lid); }}
        return;
    }}
    let r4 = (part - 1u) * $Ru + lid;
    if ((in0[1] & 2u) != 0u) {{ apply(mat, min(r4, $N4u - 1u), r4 < $N4u{lane_arg}); }}
}}
"#
    )
}

/// The back-transformation of eigh's and svd's vectors: four reflectors applied per two
/// passes over the vectors (a vec4 of columns per thread), where one at a time takes eight
/// passes. With `k_1 = kk - 1` first, down to `k_4 = kk - 4`, and `G_ji = u_j . u_i`:
/// `H_4 H_3 H_2 H_1 z = z - sum_j y_j u_j` for `y_j = 2 (u_j^T z - sum_{i<j} G_ji y_i)`.
/// The multiply-adds per reflector are those of one at a time, plus the six of `G` per row;
/// the loads and stores of the vectors a quarter. With `lanes` (CPU adapters) each row's
/// entries are loaded by one lane of a subgroup and shared by `subgroupBroadcast` (llvmpipe
/// loads lane by lane), each lane sums the products `G_ji` of its own rows and the subgroup
/// adds them; else every thread loads the entries and sums `G` itself. llvmpipe, eigh 256²,
/// 32 reflectors in one launch by `wgsl_bench` (lanes of 8): 13.9 ms with two per pass,
/// 3.7 with four, 4.0 with eight. Sums by blocks of 32 rows (one running f32 sum over a tall
/// U's column rounds m times). The reflectors left past the last four go one at a time.
///
/// Template words beyond the plan's: `$ROWS` (rows of the vectors), `$AT` (the index of
/// entry `i` of reflector `k` in `in1`, from `sb`), `$FIRST` (reflector `k`'s first row),
/// `$BG` workgroups per matrix of `$BWG` threads. Every thread runs the loops (clamped to
/// the last vec4 of columns), those past the matrix's columns store nothing.
pub(super) fn back_blocked_kernel(lanes: Option<u64>, texture: Option<&BackTexture>) -> String {
    // Reflectors per pass: four, one vec4 of entries per row.
    let b = 4;
    let step = lanes.unwrap_or(1);
    let comp = |j: usize| ["x", "y", "z", "w"][j];
    // The row a lane loads, and the entries of row `i1 + q` as every thread takes them.
    let lane_row = if lanes.is_some() { "i1 + sgl" } else { "i1" };
    let share = |q: u64| {
        if lanes.is_some() {
            format!("subgroupBroadcast(rl, {q}u)")
        } else {
            "rl".to_string()
        }
    };
    // Rows `from..end` by `step`: the lane's entries `rl` (`load`, then `pre` on them),
    // `body` on row `i` with the entries `r`.
    let rows = |from: &str, end: &str, load: &str, pre: &str, body: &str, pad: &str| {
        let mut out = format!(
            "{pad}for (var i1 = {from}; i1 < {end}; i1 = i1 + {step}u) {{\n{pad}    let il = min({lane_row}, $ROWSu - 1u);\n"
        );
        // Whether the lane's row is one of the block's (the four entries are masked by it).
        if load.contains("live") {
            out.push_str(&format!("{pad}    let live = {lane_row} < {end};\n"));
        }
        out.push_str(&format!("{pad}    let rl = {load};\n"));
        for line in pre.lines() {
            out.push_str(&format!("{pad}    {line}\n"));
        }
        for q in 0..step {
            out.push_str(&format!(
                "{pad}    if (i1 + {q}u < {end}) {{\n{pad}        let i = i1 + {q}u;\n{pad}        let r = {};\n",
                share(q)
            ));
            for line in body.lines() {
                out.push_str(&format!("{pad}        {line}\n"));
            }
            out.push_str(&format!("{pad}    }}\n"));
        }
        out.push_str(&format!("{pad}}}\n"));
        out
    };
    let entries: Vec<String> = (1..=b)
        .map(|j| format!("entry(sb, kk - {j}u, il, live)"))
        .collect();
    let block_load = format!("vec4<f32>({})", entries.join(", "));
    let pairs: Vec<(usize, usize)> = (0..b).flat_map(|j| (0..j).map(move |i| (j, i))).collect();
    let mut decl = String::new();
    let mut part_decl = String::new();
    let mut add = String::new();
    let mut gram = String::new();
    let mut dot_body = "let z = out0[zb + i * $N4u];\n".to_string();
    let mut solve = String::new();
    let mut update = "let e = zb + i * $N4u;\nlet z = out0[e]".to_string();
    for j in 0..b {
        decl.push_str(&format!("        var s{j} = vec4<f32>(0.0);\n"));
        part_decl.push_str(&format!("            var p{j} = vec4<f32>(0.0);\n"));
        add.push_str(&format!("            s{j} = s{j} + p{j};\n"));
        dot_body.push_str(&format!("p{j} = p{j} + r.{} * z;\n", comp(j)));
        let terms: String = (0..j).map(|i| format!(" - g{j}{i} * y{i}")).collect();
        solve.push_str(&format!("        let y{j} = 2.0 * (s{j}{terms});\n"));
        update.push_str(&format!(" - r.{} * y{j}", comp(j)));
    }
    update.push_str(";\nif (act) { out0[e] = z; }");
    for &(j, i) in &pairs {
        decl.push_str(&format!("        var g{j}{i} = 0.0;\n"));
        part_decl.push_str(&format!("            var h{j}{i} = 0.0;\n"));
        add.push_str(&format!("            g{j}{i} = g{j}{i} + h{j}{i};\n"));
        gram.push_str(&format!(
            "h{j}{i} = h{j}{i} + rl.{} * rl.{};\n",
            comp(j),
            comp(i)
        ));
        if lanes.is_some() {
            solve.insert_str(0, &format!("        g{j}{i} = subgroupAdd(g{j}{i});\n"));
        }
    }
    let dot_block = rows(
        "i0",
        "min(i0 + 32u, $ROWSu)",
        &block_load,
        &gram,
        &dot_body,
        "            ",
    );
    let update_block = rows("f", "$ROWSu", &block_load, "", &update, "        ");
    // One reflector: the entries of `k` alone.
    let dot_one = rows(
        "i0",
        "min(i0 + 32u, $ROWSu)",
        "refl(sb, k, il)",
        "",
        "part = part + r * out0[zb + i * $N4u];",
        "            ",
    );
    let update_one = rows(
        "f",
        "$ROWSu",
        "refl(sb, k, il)",
        "",
        "let z = out0[zb + i * $N4u] - r * dot;\nif (act) { out0[zb + i * $N4u] = z; }",
        "        ",
    );
    // With a texture: the thread's column of texels from the launch's first row, copied in
    // and back (by active threads only: an idle one shares the last thread's column), and
    // every load and store of the vectors one of its texels.
    let (decl_tex, copy_in, copy_out) = match texture {
        Some(t) => (
            t.declaration.clone(),
            "    let cz = min(col, $N4u - 1u);\n    let tz = mat * $ROWSu;\n    let r0 = first_row(in0[1]);\n    if (act) {\n        for (var i = r0; i < $ROWSu; i = i + 1u) {\n            textureStore(blk, vec2<u32>(cz, tz + i), out0[zb + i * $N4u]);\n        }\n    }\n    textureBarrier();\n",
            "    textureBarrier();\n    if (act) {\n        for (var i = r0; i < $ROWSu; i = i + 1u) {\n            out0[zb + i * $N4u] = textureLoad(blk, vec2<u32>(cz, tz + i));\n        }\n    }\n",
        ),
        None => (String::new(), "", ""),
    };
    let in_texture = |code: String| {
        if texture.is_none() {
            return code;
        }
        code.replace("let e = zb + i * $N4u;", "let e = vec2<u32>(cz, tz + i);")
            .replace("out0[e] = z;", "textureStore(blk, e, z);")
            .replace("out0[e]", "textureLoad(blk, e)")
            .replace(
                "out0[zb + i * $N4u] = z;",
                "textureStore(blk, vec2<u32>(cz, tz + i), z);",
            )
            .replace(
                "out0[zb + i * $N4u]",
                "textureLoad(blk, vec2<u32>(cz, tz + i))",
            )
    };
    let (dot_block, update_block, dot_one, update_one) = (
        in_texture(dot_block),
        in_texture(update_block),
        in_texture(dot_one),
        in_texture(update_one),
    );
    let lane_builtin = if lanes.is_some() {
        ", @builtin(subgroup_invocation_id) sgl: u32"
    } else {
        ""
    };
    format!(
        r#"{decl_tex}// Entry i of reflector k, and the reflector's first row.
fn refl(sb: u32, k: u32, i: u32) -> f32 {{
    return in1[$AT];
}}
fn first_row(k: u32) -> u32 {{
    return $FIRST;
}}
// Entry il of reflector k where `live` and il is one of its rows, else zero.
fn entry(sb: u32, k: u32, il: u32, live: bool) -> f32 {{
    return select(0.0, refl(sb, k, il), live && il >= first_row(k));
}}

@compute @workgroup_size($BWG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32{lane_builtin}) {{
    $RZ = nwg.z >> 16u;
    let gid = wid.y * nwg.x + wid.x;
    let mat = gid / $BGu;
    if (mat >= $Bu) {{ return; }}
    let col = (gid % $BGu) * $BWGu + lid;
    let act = col < $N4u;
    let sb = mat * $TSu;
    let zb = mat * ($ROWSu * $N4u) + min(col, $N4u - 1u);
    var kk = in0[0];
{copy_in}    // Reflectors kk - 1 down to kk - {b}, in two passes (see the function's comment).
    loop {{
        if (kk < in0[1] + {b}u) {{ break; }}
        let f = first_row(kk - {b}u);
{decl}        for (var i0 = f; i0 < $ROWSu; i0 = i0 + 32u) {{
{part_decl}{dot_block}{add}        }}
{solve}{update_block}        kk = kk - {b}u;
    }}
    loop {{
        if (kk <= in0[1]) {{ break; }}
        let k = kk - 1u;
        let f = first_row(k);
        var dot = vec4<f32>(0.0);
        for (var i0 = f; i0 < $ROWSu; i0 = i0 + 32u) {{
            var part = vec4<f32>(0.0);
{dot_one}            dot = dot + part;
        }}
        dot = 2.0 * dot;
{update_one}        kk = k;
    }}
{copy_out}}}
"#
    )
}

/// The reduction kernel (see the module comment): `out0` the state by vec4s (its scalars
/// read as components), `in0` the first and end column.
/// The reduction kernels' reflection of x = (x0, rest) with |rest|^2 = tail, as (the entry
/// left on the diagonal side, v0, 1 / |v|, unused): v = x - alpha e_1, alpha = -sign(x0) |x|,
/// u = v / |v|; none (u = 0, x0 left) when rest is zero (below 1e-18 of the scaled matrix).
const REFLECTION: &str = r#"fn reflection(x0: f32, tail: f32) -> vec4<f32> {
    let root = sqrt(tail + x0 * x0);
    let alpha = select(root, -root, x0 >= 0.0);
    let v0 = x0 - alpha;
    let vv = tail + v0 * v0;
    var inv = 1.0 / sqrt(vv);
    // A Newton step: GPUs may take square roots a few ULP off, and every reflection's
    // error stays in the vectors.
    inv = inv * (1.5 - 0.5 * inv * inv * vv);
    let live = tail > 1e-36;
    return vec4<f32>(select(x0, alpha, live), v0, select(0.0, inv, live), 0.0);
}
"#;

const TRI_KERNEL: &str = r#"var<workgroup> red: array<f32, $WG>;
var<workgroup> uu: array<f32, $LD>;
var<workgroup> ww: array<f32, $LD>;
// (u_i, w_i) of the update, loaded together: llvmpipe loads a vector from one address for
// little more than a scalar.
var<workgroup> uw: array<vec2<f32>, $LD>;
// The next column's reflector and p = A u of the updated matrix, computed as the update
// passes over the matrix (the column's own pass over it would read the block once more).
var<workgroup> un: array<f32, $LD>;
var<workgroup> pn: array<f32, $LD>;

$REFLECTION
@compute @workgroup_size($WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32$LANE_BUILTIN) {
    $RZ = nwg.z >> 16u;
    let mat = wid.y * nwg.x + wid.x;
    if (mat >= $Bu) { return; }
    let base = mat * $TSu;
    let b4 = base >> 2u;
    let first = in0[0];
    let end = in0[1];
$BLOCK_IN    for (var k = first; k < end; k = k + 1u) {
        let r0 = k + 1u;
        let row = base + k * $LDu;
        let fused = k > first;
        // The per-column loops over u, w and the next column start at r0's quad: nothing
        // before it is read again (the pass takes whole quads from r0's on, zero below r0).
        if (!fused) {
            // Column k below the diagonal (row k right of it): its squared norm past the
            // first.
            var acc = 0.0;
            for (var i = lid; i < $LDu; i = i + $WGu) {
                var x = 0.0;
                if (i >= r0 && i < $Nu) { x = out0[(row + i) >> 2u][(row + i) & 3u]; }
                uu[i] = x;
                if (i > r0) { acc = acc + x * x; }
            }
            red[lid] = acc;
$TREE            let x0 = uu[r0];
            let h = reflection(x0, red[0]);
            workgroupBarrier();
            for (var i = r0 + lid; i < $Nu; i = i + $WGu) {
                let u = select(uu[i], h.y, i == r0) * h.z;
                uu[i] = u;
                out0[(row + i) >> 2u][(row + i) & 3u] = u;
            }
            if (lid == 0u) {
                let ei = base + $SIZEu + k;
                out0[ei >> 2u][ei & 3u] = h.x;
            }
        } else {
            // The reflector and e[k] the last update's pass computed.
            for (var i = (r0 & 0xfffffffcu) + lid; i < $LDu; i = i + $WGu) {
                let u = un[i];
                uu[i] = u;
                if (i >= r0 && i < $Nu) { out0[(row + i) >> 2u][(row + i) & 3u] = u; }
            }
        }
        workgroupBarrier();
        // p = A u on the trailing block (a vec4 of columns per thread), K = u^T p.
        var kp = 0.0;
        for (var j4 = (r0 >> 2u) + lid; j4 < $N4u; j4 = j4 + $WGu) {
            let j = 4u * j4;
            var p = vec4<f32>(0.0);
            if (fused) {
                p = vec4<f32>(pn[j], pn[j + 1u], pn[j + 2u], pn[j + 3u]);
            } else {
                for (var i = r0; i < $Nu; i = i + 1u) {
                    p = p + out0[b4 + i * $N4u + j4] * uu[i];
                }
            }
            kp = kp + dot(p, vec4<f32>(uu[j], uu[j + 1u], uu[j + 2u], uu[j + 3u]));
            ww[j] = p.x;
            ww[j + 1u] = p.y;
            ww[j + 2u] = p.z;
            ww[j + 3u] = p.w;
        }
        red[lid] = kp;
$TREE        let kk = red[0];
        // w = 2 (p - K u) (zero outside the trailing block); A <- A - u w^T - w u^T.
        for (var j = (r0 & 0xfffffffcu) + lid; j < $LDu; j = j + $WGu) {
            let w = select(0.0, 2.0 * (ww[j] - kk * uu[j]), j >= r0 && j < $Nu);
            ww[j] = w;
            uw[j] = vec2<f32>(uu[j], w);
        }
        workgroupBarrier();
        if (k + 1u < end) {
            // The next column: row r0 of the updated block past the diagonal, as the pass
            // below computes it, and its reflector, into un.
            let c0 = uw[r0];
            var acc = 0.0;
            for (var j = (r0 & 0xfffffffcu) + lid; j < $LDu; j = j + $WGu) {
                var x = 0.0;
                if (j > r0 && j < $Nu) {
                    x = $NEXT_ROW - c0.x * ww[j] - c0.y * uu[j];
                }
                un[j] = x;
                if (j > r0 + 1u) { acc = acc + x * x; }
            }
            red[lid] = acc;
$TREE            let x0 = un[r0 + 1u];
            let h = reflection(x0, red[0]);
            workgroupBarrier();
            for (var j = r0 + 1u + lid; j < $Nu; j = j + $WGu) {
                un[j] = select(un[j], h.y, j == r0 + 1u) * h.z;
            }
            if (lid == 0u) {
                let ei = base + $SIZEu + r0;
                out0[ei >> 2u][ei & 3u] = h.x;
            }
            workgroupBarrier();
            // The update, and p = A u of the updated block for the next column (its rows
            // from r0 + 1; un is zero above).
$UPDATE_NEXT        } else {
$UPDATE_LAST        }
        storageBarrier();
$TEXTURE_BARRIER        workgroupBarrier();
    }
$BLOCK_OUT}
"#;

/// The tridiagonal reduction's pass over the trailing block for column `k`: `A -= u w^T +
/// w u^T`, a vec4 of columns per thread, and with `next` also `p = A u` of the updated block
/// for the next column's reflector `un`. With `lanes` (CPU adapters with subgroups of that
/// size) the threads of a subgroup load `(u_i, w_i)` (and `un_i`) for as many rows, one row
/// each, and every row takes them by `subgroupBroadcast`: llvmpipe loads lane by lane, so
/// one load serves `lanes` rows instead of one.
fn tri_update(next: bool, lanes: Option<u64>, texture: bool) -> String {
    let pad = "                ";
    let row = |c: &str, i: &str, guard: Option<&str>| {
        let mut out = match guard {
            Some(g) => format!("{pad}if ({g}) {{\n"),
            None => format!("{pad}{{\n"),
        };
        let (load, store) = if texture {
            out.push_str(&format!("{pad}    let e = vec2<u32>(j4, ty + {i});\n"));
            ("textureLoad(blk, e)", "textureStore(blk, e, ")
        } else {
            out.push_str(&format!("{pad}    let e = b4 + {i} * $N4u + j4;\n"));
            ("out0[e]", "out0[e] = (")
        };
        if next {
            out.push_str(&format!("{pad}    let a = {load} - {c}.x * w4 - {c}.y * u4;\n{pad}    {store}a);\n{pad}    p = p + a * {c}.z;\n"));
        } else {
            out.push_str(&format!(
                "{pad}    {store}{load} - {c}.x * w4 - {c}.y * u4);\n"
            ));
        }
        out.push_str(&format!("{pad}}}\n"));
        out
    };
    let un = if next { "un[ir]" } else { "0.0" };
    let (head, rows, act) = match lanes {
        Some(l) => {
            let mut rows = format!("            for (var i0 = r0; i0 < $Nu; i0 = i0 + {l}u) {{\n                let ir = min(i0 + sgl, $Nu - 1u);\n                let cl = vec3<f32>(uw[ir], {un});\n");
            for q in 0..l {
                rows.push_str(&format!("                {{\n                    let c = subgroupBroadcast(cl, {q}u);\n"));
                rows.push_str(
                    &row(
                        "c",
                        &format!("(i0 + {q}u)"),
                        Some(&format!("act && i0 + {q}u < $Nu")),
                    )
                    .replace(pad, &format!("{pad}    ")),
                );
                rows.push_str("                }\n");
            }
            rows.push_str("            }\n");
            // Every lane of a subgroup runs the rows (the broadcasts need them all): the
            // columns loop is uniform, `act` the threads with columns.
            (
                "            for (var jb = r0 >> 2u; jb < $N4u; jb = jb + $WGu) {\n                let j4 = min(jb + lid, $N4u - 1u);\n                let act = jb + lid < $N4u;\n",
                rows,
                Some("act"),
            )
        }
        None => {
            let mut rows = format!("            for (var ir = r0; ir < $Nu; ir = ir + 1u) {{\n                let c = vec3<f32>(uw[ir], {un});\n");
            rows.push_str(&row("c", "ir", None).replace(pad, "                "));
            rows.push_str("            }\n");
            (
                "            for (var j4 = (r0 >> 2u) + lid; j4 < $N4u; j4 = j4 + $WGu) {\n",
                rows,
                None,
            )
        }
    };
    let mut out = head.to_string();
    out.push_str("                let j = 4u * j4;\n                let u4 = vec4<f32>(uu[j], uu[j + 1u], uu[j + 2u], uu[j + 3u]);\n                let w4 = vec4<f32>(ww[j], ww[j + 1u], ww[j + 2u], ww[j + 3u]);\n");
    if next {
        out.push_str("                var p = vec4<f32>(0.0);\n");
    }
    out.push_str(
        &rows
            .replace("\n            ", "\n                ")
            .replacen("            for", "                for", 1),
    );
    if next {
        let store = "pn[j] = p.x;\n        pn[j + 1u] = p.y;\n        pn[j + 2u] = p.z;\n        pn[j + 3u] = p.w;\n";
        match act {
            Some(a) => out.push_str(&format!(
                "                if ({a}) {{\n                    {}                }}\n",
                store.replace("\n        ", "\n                    ")
            )),
            None => out.push_str(&format!(
                "                {}",
                store.replace("\n        ", "\n                ")
            )),
        }
    }
    out.push_str("            }\n");
    out
}

/// Whether the tridiagonal reduction of `batch` matrices of order `n` keeps its trailing
/// block in a scratch texture (`texture_storage_2d<rgba32float, read_write>`, a vec4 of
/// columns per texel, matrix `mat`'s rows from texel row `mat * n`) within each launch,
/// instead of the state's storage buffer: on CPU adapters with such textures, where the
/// texture fits (`WGPU_HLO_TRI_TEXTURE=0`: never). llvmpipe runs every storage-buffer access
/// lane by lane, a texel load or store with the lanes' addresses as vectors: the first 13
/// columns of eigh 256 (`wgsl_bench` on the dumped kernel) took 9.4-9.7 ms reading and
/// writing the block in the buffer, 5.0-5.2 ms in the texture. The launch copies the block
/// in first (rows and quads of columns from `first + 1`'s: nothing before them is read) and
/// back at its end, but for the reflectors right of the diagonal of the rows it reduced,
/// which went to the state directly: the same operations in the same order, the same bits.
fn tri_texture(target: Target, batch: u64, n: u64) -> bool {
    block_texture(target, batch, n, n, "WGPU_HLO_TRI_TEXTURE")
}

/// Loop iterations of a launch's copies of a block of `rows` by `quads` vec4s into its scratch
/// texture and back, `wg` threads. The reductions take their texture only where the first
/// launch's copies are at most a quarter of the loop budget (llvmpipe: up to 256 columns
/// with 16 threads, 512 with 64): larger ones would leave few columns per launch to share
/// them.
fn block_copies(rows: u64, quads: u64, wg: u64) -> u64 {
    2 * (rows * quads).div_ceil(wg) + 2
}

/// Whether a reduction of `batch` matrices of `m` x `n` keeps its block in a scratch texture
/// ([`tri_texture`]): on CPU adapters with read-write storage textures, where the texture fits
/// and `var` is not `0`.
fn block_texture(target: Target, batch: u64, m: u64, n: u64, var: &str) -> bool {
    let max = u64::from(target.max_texture_dimension);
    target.cpu_adapter
        && target.caps.storage_textures
        && batch * m <= max
        && n.div_ceil(4) <= max
        && !crate::fusion::switched_off(var)
}

/// The start of a launch of a reduction in texture mode ([`tri_texture`]): the block of
/// `rows` rows a matrix, from row `c0` and `c0`'s quad of columns, into the texture.
fn block_in(c0: &str, rows: &str) -> String {
    format!(
        r#"    let ty = mat * {rows};
    let c0 = {c0};
    let q0 = min(c0 >> 2u, $N4u);
    let bh = select(0u, {rows} - c0, c0 < {rows});
    let bw = $N4u - q0;
    for (var t = lid; t < bh * bw; t = t + $WGu) {{
        let i = c0 + t / bw;
        let j4 = q0 + t % bw;
        textureStore(blk, vec2<u32>(j4, ty + i), out0[b4 + i * $N4u + j4]);
    }}
    textureBarrier();
"#
    )
}

/// The end of a launch in texture mode: the block back into the state but for the entries
/// the launch wrote to the state directly, `kept` (a `vec4<bool>` of the columns `cols` of
/// row `i`) where `guard` holds.
fn block_out(guard: &str, kept: &str) -> String {
    format!(
        r#"    for (var t = lid; t < bh * bw; t = t + $WGu) {{
        let i = c0 + t / bw;
        let j4 = q0 + t % bw;
        let at = b4 + i * $N4u + j4;
        var v = textureLoad(blk, vec2<u32>(j4, ty + i));
        if ({guard}) {{
            let cols = 4u * j4 + vec4<u32>(0u, 1u, 2u, 3u);
            v = select(v, out0[at], {kept});
        }}
        out0[at] = v;
    }}
"#
    )
}

/// The QL kernel (see the module comment): `out0` the f64 state by vec4s (Z's rows by
/// fours; the scalars read as components); one workgroup per matrix, its first thread
/// chasing.
const QL_KERNEL: &str = r#"var<workgroup> dd: array<$FT, $N>;
var<workgroup> ee: array<$FT, $N>;

// sqrt(a^2 + b^2) without overflow.
fn hyp(a: $FT, b: $FT) -> $FT {
    let x = abs(a);
    let y = abs(b);
    let big = max(x, y);
    if (!(big > 0.0$FS)) { return x + y; }
    let q = min(x, y) / big;
    return big * sqrt(1.0$FS + q * q);
}

// The QL iterations of matrix `mat` this launch runs, by its first thread (`$CW` per
// workgroup).
fn chase(mat: u32, lid: u32) {
    let base = mat * $QSu;
    let b4 = base >> 2u;
    // This launch's copy of d, e and the status, and the copy it writes.
    let src = base + $SIZEu + (in0[0] & 1u) * $SLOTu;
    let dst = base + $SIZEu + (1u - (in0[0] & 1u)) * $SLOTu;
    for (var i = lid; i < $Nu; i = i + $CWu) {
        dd[i] = out0[(src + i) >> 2u][(src + i) & 3u];
        ee[i] = out0[(src + $LDu + i) >> 2u][(src + $LDu + i) & 3u];
    }
    workgroupBarrier();
    if (lid != 0u) { return; }
    // Deflation where e is negligible next to its neighbours or to the matrix.
    var tnorm = 0.0$FS;
    for (var i = 0u; i < $Nu; i = i + 1u) {
        tnorm = max(tnorm, abs(dd[i]) + abs(ee[i]));
    }
    let small = max($QABS * tnorm, 1e-30$FS);
    let s0 = out0[(src + 2u * $LDu) >> 2u];
    var l = u32(s0.x);
    var it = u32(s0.y);
    var state = u32(s0.z);
$LOG_DECL    var spent = 0u;
    loop {
        if (state != 0u) { break; }
        if (l >= $Nu) { state = 1u; break; }
        // Out of this launch's budget: the next launch goes on from here.
        if (spent + $STEPu > $BUDGETu) { state = 3u; break; }
        // The first negligible e from l (far below f32's precision): [l, m] is an
        // unreduced block.
        var m = l;
        loop {
            if (m + 1u >= $Nu) { break; }
            let e = abs(ee[m]);
            if (e <= $QTOL * (abs(dd[m]) + abs(dd[m + 1u])) || e <= small) { break; }
            m = m + 1u;
        }
        spent = spent + m - l + 1u;
        if (m == l) {
            l = l + 1u;
            it = 0u;
            continue;
        }
$LOG_CHECK        if (it >= $MAXITu) { state = 2u; break; }
        it = it + 1u;
        // One QL iteration on [l, m], shifted by the eigenvalue of the leading 2x2 block
        // nearer d[l]; rotations m-1 down to l.
        let el = ee[l];
        var g = (dd[l + 1u] - dd[l]) / (2.0$FS * el);
        var r = hyp(g, 1.0$FS);
        g = dd[m] - dd[l] + el / (g + select(-r, r, g >= 0.0$FS));
        var s = 1.0$FS;
        var c = 1.0$FS;
        var p = 0.0$FS;
        var i = m;
        var lo = l;
        loop {
            if (i == l) { break; }
            i = i - 1u;
            let f = s * ee[i];
            let b = c * ee[i];
            r = hyp(f, g);
            ee[i + 1u] = r;
            if (r == 0.0$FS) {
                // Underflow: the rotations so far stand, the iteration restarts.
                dd[i + 1u] = dd[i + 1u] - p;
                ee[m] = 0.0$FS;
                lo = i + 1u;
                break;
            }
            s = f / r;
            c = g / r;
            g = dd[i + 1u] - p;
            r = (dd[i] - g) * s + 2.0$FS * c * b;
            p = s * r;
            dd[i + 1u] = g + p;
            g = c * r - b;
$STORE_ROT
        }
        if (lo == l) {
            dd[l] = dd[l] - p;
            ee[l] = g;
            ee[m] = 0.0$FS;
        }
        // The chase, and (counted here) the rotation of Z's rows it asks for.
        spent = spent + 2u * (m - l);
$LOG_CHAIN    }
    for (var i = 0u; i < $Nu; i = i + 1u) {
        out0[(dst + i) >> 2u][(dst + i) & 3u] = dd[i];
        out0[(dst + $LDu + i) >> 2u][(dst + $LDu + i) & 3u] = ee[i];
    }
$LOG_END    out0[(dst + 2u * $LDu) >> 2u] = vec4<$FT>($FT(l), $FT(it), $FT(select(state, 0u, state == 3u)), 0.0$FS);
}
$MAIN"#;

/// The entry point of a chase without vectors (the QL kernel's, svd's QR kernel's): one
/// workgroup of 8 per matrix.
pub(super) const CHASE_MAIN: &str = r#"
@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    $RZ = nwg.z >> 16u;
    let mat = wid.y * nwg.x + wid.x;
    if (mat >= $Bu) { return; }
    chase(mat, lid);
}
"#;
