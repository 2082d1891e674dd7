//! Jacobi eigendecompositions of real symmetric matrices and singular value decompositions,
//! f32, batched, on the device: `custom_call @wgpu_hlo.eigh` and `@wgpu_hlo.svd`, which the
//! JAX plugin's lowering rules emit (`python/jax_plugins/wgpu/lowerings.py`).
//!
//! * `@wgpu_hlo.eigh(a)`, `a: [..., n, n]` symmetric -> `(w: [..., n], v: [..., n, n])`,
//!   eigenvalues ascending, `a = v diag(w) v^T`: parallel two-sided (cyclic round-robin)
//!   Jacobi; on CPU adapters one-sided Jacobi on the shifted, positive definite
//!   `a + sigma I` instead, without accumulating V (see [`svd`]'s `eigh`).
//! * `@wgpu_hlo.svd(a)`, `a: [..., m, n]` with `m >= n` -> `(s: [..., n])` or
//!   `(s, u: [..., m, n], v: [..., n, n])`, singular values descending, `a = u diag(s) v^T`:
//!   parallel one-sided (Hestenes) Jacobi on the columns.
//!
//! One workgroup per matrix works on a state buffer in global memory (the matrix, the
//! accumulated rotations and a small status record). A round rotates the `n/2` disjoint index
//! pairs of a round-robin tournament at once (rotations, then rows, then columns, separated by
//! barriers); `n - 1` rounds make a sweep. Each launch runs as many rounds as keep every
//! invocation within [`ROUND_BUDGET`] loop iterations, so sweeps span launches for large `n`
//! and one launch holds several sweeps for small `n`. At the end of each sweep the workgroup
//! decides convergence from the largest off-diagonal element after the sweep (eigh) or pair
//! cosine met during it (svd) and records it in the status; rotations of pairs already within
//! the tolerance are skipped (threshold Jacobi), so the last sweeps cost little; later launches see the flag and return
//! at once. All launches (a fixed maximum of [`MAX_SWEEPS`] sweeps) go into one submission:
//! there is no host round trip per sweep. Last launches sort (a rank per index, counted) and
//! write the results.

use super::{temp, Launch, Plan, PARAMS};
use crate::codegen::expr::Binding;
use crate::codegen::kernel::{self, RUNTIME_ZERO};
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::ops::CustomCall;
use crate::ir::{ElementType, Function, Operation, TensorType, Type, ValueId};

/// The `custom_call` target of the Jacobi eigendecomposition.
pub const EIGH_TARGET: &str = "wgpu_hlo.eigh";
/// The `custom_call` target of the Jacobi singular value decomposition.
pub const SVD_TARGET: &str = "wgpu_hlo.svd";

/// Most sweeps run (each `n - 1` rounds); f32 matrices converge in well under 12.
pub const MAX_SWEEPS: u64 = 20;

/// Loop iterations one invocation may run per launch (llvmpipe leaves every loop of an
/// invocation after 65535 in all; GPU watchdogs kill long invocations).
pub const ROUND_BUDGET: u64 = 8_192;

/// Largest `n` the kernels take (their per-pair tables live in workgroup memory).
pub const MAX_N: u64 = 1024;

/// Words of the status record after each matrix's state: converged flag, the largest
/// off-diagonal measure of the sweep so far, the tolerance, unused.
const STATUS: u64 = 4;

/// Whether `c` names one of these kernels.
pub fn handles(c: &CustomCall) -> bool {
    c.call_target_name == EIGH_TARGET || c.call_target_name == SVD_TARGET
}

pub(super) fn f32_tensor(f: &Function, v: ValueId, what: &str) -> Result<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) if t.is_static() && t.dtype == ElementType::F32 && t.rank() >= 2 => {
            Ok(t.clone())
        }
        other => Err(Error::unimplemented(format!(
            "{what} on {other} (f32 matrices are supported)"
        ))),
    }
}

pub(super) fn binding(value: ValueId, ty: &TensorType) -> Binding {
    Binding {
        value,
        ty: ty.clone(),
    }
}

/// Threads per workgroup for matrices with `n` columns.
fn workgroup_size(n: u64) -> u64 {
    if n <= 32 {
        32
    } else if n <= 64 {
        64
    } else if n <= 128 {
        128
    } else {
        256
    }
}

/// The shape pieces shared by the two decompositions.
struct Shape {
    batch: u64,
    m: u64,
    n: u64,
    /// Players of the tournament: `n` rounded up to even (index `n` is a bye).
    players: u64,
    wg: u64,
}

impl Shape {
    fn half(&self) -> u64 {
        self.players / 2
    }
    fn rounds(&self) -> u64 {
        self.players - 1
    }
}

/// WGSL shared by the sweep kernels: the tournament schedule and workgroup state.
/// `builtins`: more parameters of the entry point (each starting with ", ").
fn sweep_prelude(s: &Shape, extra: &str, builtins: &str) -> String {
    format!(
        "var<workgroup> cs: array<vec2<f32>, {h}>;\nvar<workgroup> pairs: array<vec2<u32>, {h}>;\nvar<workgroup> ctl: vec4<u32>;\nvar<workgroup> worst: atomic<u32>;\n{extra}\n\
         // Player at seat j in round r (circle method): seat 0 stays, the others rotate.\n\
         fn player(r: u32, j: u32) -> u32 {{\n    if (j == 0u) {{ return 0u; }}\n    return (j - 1u + r) % {r1}u + 1u;\n}}\n\n\
         // Cosine and sine zeroing gamma in [[alpha, gamma], [gamma, beta]].\n\
         fn rotation(alpha: f32, beta: f32, gamma: f32) -> vec2<f32> {{\n    if (!(abs(gamma) > 1e-37)) {{ return vec2<f32>(1.0, 0.0); }}\n    let zeta = (beta - alpha) / (2.0 * gamma);\n    var t = sign(zeta) / (abs(zeta) + sqrt(zeta * zeta + 1.0));\n    if (zeta == 0.0) {{ t = 1.0; }}\n    let c = 1.0 / sqrt(t * t + 1.0);\n    let s = t * c;\n    // One Newton step towards c^2 + s^2 = 1: GPUs may divide and take square roots a few\n    // ULP off (Vulkan allows 2.5 and 3), and thousands of slightly non-orthogonal rotations\n    // per column would scale its norm. e = c^2 + s^2 - 1 exactly (the squares split by\n    // wh_two_prod_f32; c^2 >= 1/2, so both subtractions are exact), and the step applied as\n    // c - c e/2: a factor 1 - e/2 rounds to 1 below 6e-8, which on NVIDIA left every\n    // singular value of a 90x70 matrix 2.5e-6 low.\n    let cc = wh_two_prod_f32(c, c);\n    let ss = wh_two_prod_f32(s, s);\n    let e = ((cc.x - 1.0) + ss.x) + (cc.y + ss.y);\n    return vec2<f32>(c - c * (0.5 * e), s - s * (0.5 * e));\n}}\n\n\
         @compute @workgroup_size({wg})\n\
         fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32{builtins}) {{\n    \
         {RUNTIME_ZERO} = nwg.z >> 16u;\n    \
         let mat = wid.y * nwg.x + wid.x;\n    if (mat >= {b}u) {{ return; }}\n",
        h = s.half(),
        r1 = s.rounds(),
        wg = s.wg,
        b = s.batch,
    )
}

/// The start of a sweep launch after `sweep_prelude`: reads the status of matrix `mat`
/// (state stride `stride`, status at `status`) and the launch's rounds `[ctl.y, ctl.z)`.
fn sweep_start(stride: u64, status: u64, stat: Status) -> String {
    format!(
        "    let base = mat * {stride}u;\n    let st = base + {status}u;\n    if (lid == 0u) {{\n        ctl = vec4<u32>(select(0u, 1u, {flag} != 0.0), in0[0], in0[1], 0u);\n        atomicStore(&worst, bitcast<u32>({worst}));\n    }}\n    let c0 = workgroupUniformLoad(&ctl);\n    if (c0.x != 0u) {{ return; }}\n",
        flag = stat.word(0),
        worst = stat.word(1),
    )
}

/// Where the status record's words are: `f32`s from `st` (the state bound as `array<f32>`) or
/// the components of the vec4 `st` (bound as `array<vec4<f32>>`).
#[derive(Clone, Copy)]
enum Status {
    Scalars,
    Vec4,
    /// `f32`s from `st` of the state bound as `array<vec4<f32>>`.
    Packed,
}

impl Status {
    fn word(self, k: usize) -> String {
        match self {
            Status::Scalars => format!("out0[st + {k}u]"),
            Status::Vec4 => format!("out0[st].{}", ["x", "y", "z", "w"][k]),
            Status::Packed => packed(&format!("st + {k}u")),
        }
    }
}

/// The `f32` at index `i` (a WGSL expression) of the state bound as `array<vec4<f32>>`: a
/// place, to read or assign.
fn packed(i: &str) -> String {
    format!("out0[({i}) >> 2u][({i}) & 3u]")
}

/// The end of a round: at the end of a sweep, converged when the sweep's largest measure is
/// within the tolerance `tol` (a WGSL f32 expression).
fn round_end(s: &Shape, measure: &str, tol: &str, tail: &str, stat: Status) -> String {
    format!(
        "        if (r == {last}u) {{\n{measure}            if (lid == 0u) {{\n                let done = bitcast<f32>(atomicLoad(&worst)) <= {tol};\n                {flag} = select(0.0, 1.0, done);\n                ctl.x = select(0u, 1u, done);\n                atomicStore(&worst, 0u);\n            }}\n            let d = workgroupUniformLoad(&ctl);\n            if (d.x != 0u) {{ break; }}\n        }}\n    }}\n    workgroupBarrier();\n{tail}    if (lid == 0u) {{ {worst} = bitcast<f32>(atomicLoad(&worst)); }}\n}}\n",
        last = s.rounds() - 1,
        flag = stat.word(0),
        worst = stat.word(1),
    )
}

/// The parts of the state a sweep kernel keeps in workgroup memory while it runs, when they
/// fit (`WGPU_HLO_JACOBI_LOCAL=0`: never): `(array, offset in the state, length)`.
struct Local(Vec<(&'static str, u64, u64)>, bool);

impl Local {
    /// `packed`: the state is bound as `array<vec4<f32>>` (its `f32`s read with [`packed`]).
    fn new(
        arrays: Vec<(&'static str, u64, u64)>,
        other_bytes: u64,
        packed: bool,
        target: Target,
    ) -> Local {
        let bytes: u64 = arrays.iter().map(|a| 4 * a.2).sum::<u64>() + other_bytes;
        let allowed = std::env::var("WGPU_HLO_JACOBI_LOCAL").map_or(true, |v| v != "0");
        let arrays = if allowed && bytes <= target.max_workgroup_storage {
            arrays
        } else {
            Vec::new()
        };
        Local(arrays, packed)
    }

    /// The state's `f32` at `base + i`.
    fn state(&self, i: &str) -> String {
        if self.1 {
            packed(&format!("base + {i}"))
        } else {
            format!("out0[base + {i}]")
        }
    }
    /// Element `(i, j)` (a WGSL expression) of the `cols`-column matrix at `offset`.
    fn at(&self, offset: u64, cols: u64, i: &str, j: &str) -> String {
        match self.0.iter().find(|a| a.1 == offset) {
            Some((name, _, _)) => format!("{name}[({i}) * {cols}u + ({j})]"),
            None => self.state(&format!("{offset}u + ({i}) * {cols}u + ({j})")),
        }
    }
    fn decls(&self) -> String {
        self.0
            .iter()
            .map(|(name, _, len)| format!("var<workgroup> {name}: array<f32, {len}>;\n"))
            .collect()
    }
    fn copies(&self, wg: u64, load: bool) -> String {
        let mut out = String::new();
        for (name, off, len) in &self.0 {
            let (dst, src) = if load {
                (format!("{name}[e]"), self.state(&format!("{off}u + e")))
            } else {
                (self.state(&format!("{off}u + e")), format!("{name}[e]"))
            };
            out.push_str(&format!(
                "    for (var e = lid; e < {len}u; e = e + {wg}u) {{ {dst} = {src}; }}\n"
            ));
        }
        if load && !self.0.is_empty() {
            out.push_str("    workgroupBarrier();\n");
        }
        out
    }
    /// The barrier after a phase that wrote the state.
    fn sync(&self) -> &'static str {
        if self.0.is_empty() {
            "        storageBarrier();\n"
        } else {
            "        workgroupBarrier();\n"
        }
    }
    /// Loop iterations of loading and storing.
    fn iterations(&self, wg: u64) -> u64 {
        self.0.iter().map(|a| 2 * a.2.div_ceil(wg)).sum()
    }
}

/// The launches of the sweeps and their iterations per invocation: `per_round` iterations
/// per round, `per_sweep` per sweep ended, `fixed` once per launch.
fn sweep_launches(
    s: &Shape,
    per_round: u64,
    per_sweep: u64,
    fixed: u64,
    budget: u64,
) -> Result<(Vec<Launch>, u64)> {
    let cost = |rounds: u64| rounds * per_round + (rounds / s.rounds() + 1) * per_sweep + fixed;
    if cost(1) > budget {
        return Err(Error::resource_exhausted(format!(
            "a Jacobi round on {}x{} matrices would loop {} times in one invocation (at most {budget})",
            s.m,
            s.n,
            cost(1)
        )));
    }
    let mut per_launch = ((budget - fixed) / per_round).max(1);
    while per_launch > 1 && cost(per_launch) > budget {
        per_launch -= 1;
    }
    let total = MAX_SWEEPS * s.rounds();
    let mut launches = Vec::new();
    let mut r0 = 0;
    while r0 < total {
        let r1 = (r0 + per_launch).min(total);
        launches.push(Launch::updating(1, vec![r0 as u32, r1 as u32], 0));
        r0 = r1;
    }
    Ok((launches, cost(per_launch)))
}

fn shape(what: &str, t: &TensorType, target: Target) -> Result<Shape> {
    let d = t.dims();
    let (m, n) = (d[d.len() - 2] as u64, d[d.len() - 1] as u64);
    if n == 0 || m < n {
        return Err(Error::invalid(format!(
            "{what} needs m >= n >= 1 (got {m}x{n})"
        )));
    }
    if n > MAX_N {
        return Err(Error::unimplemented(format!(
            "{what} of {m}x{n} matrices (n <= {MAX_N} is supported)"
        )));
    }
    let batch = t.num_elements() as u64 / (m * n);
    // On CPU adapters the work of a workgroup is serial anyway; fewer invocations cost fewer
    // barrier switches (llvmpipe, 48x48: svd 22 -> 19 ms, eigh 30 -> 27 ms with 16 instead of 64).
    let wg = if target.cpu_adapter && n <= 64 {
        16
    } else {
        workgroup_size(n)
    };
    if batch > target.max_workgroups as u64 * target.max_workgroups as u64 {
        return Err(Error::resource_exhausted(format!(
            "{what} of {batch} matrices: more workgroups than the adapter's grid"
        )));
    }
    Ok(Shape {
        batch,
        m,
        n,
        players: n + n % 2,
        wg,
    })
}

fn budget(target: Target) -> u64 {
    ROUND_BUDGET
        .min(target.max_invocation_iterations / 2)
        .max(1)
}

/// Counted rank of index `i` among `count` keys `key(j)` (ascending or descending), NaNs last,
/// ties by index: `rank` ends up as a WGSL `var`.
pub(super) fn rank_loop(count: u64, key_i: &str, key_j: &str, ascending: bool) -> String {
    let cmp = if ascending { "<" } else { ">" };
    format!(
        "    let ki = {key_i};\n    let ni = (bitcast<u32>(ki) & 0x7fffffffu) > 0x7f800000u;\n    var rank = 0u;\n    for (var j = 0u; j < {count}u; j = j + 1u) {{\n        let kj = {key_j};\n        let nj = (bitcast<u32>(kj) & 0x7fffffffu) > 0x7f800000u;\n        let before = select(select(kj {cmp} ki || (kj == ki && j < i), true, ni), ni && j < i, nj);\n        if (before) {{ rank = rank + 1u; }}\n    }}\n"
    )
}

/// A loop over the tasks `(k, x)`, pair `k < half` and `x < len`, of the workgroup's threads
/// (thread `lid` starts at task `lid`, strides by `wg`), without divisions: `body` sees the
/// pair's players `p`, `q` (both real, byes skipped), its rotation `rot` and `x` under `var`.
fn pair_tasks(half: u64, len: u64, wg: u64, var: &str, body: &str) -> String {
    format!(
        "        {{\n            var k = lid / {len}u;\n            var {var} = lid % {len}u;\n            loop {{\n                if (k >= {half}u) {{ break; }}\n                let pq = pairs[k];\n                if (pq.y != 0xffffffffu) {{\n                    let p = pq.x;\n                    let q = pq.y;\n                    let rot = cs[k];\n{body}                }}\n                {var} = {var} + {dj}u;\n                k = k + {dk}u;\n                if ({var} >= {len}u) {{\n                    {var} = {var} - {len}u;\n                    k = k + 1u;\n                }}\n            }}\n        }}\n",
        dj = wg % len,
        dk = wg / len,
    )
}

/// The loop storing round `r`'s pairs in `pairs` (a bye as `(0, 0xffffffff)`).
fn pair_table(s: &Shape) -> String {
    format!(
        "        for (var k = lid; k < {h}u; k = k + {wg}u) {{\n            let p = player(r, k);\n            let q = player(r, {nm1}u - k);\n            pairs[k] = select(vec2<u32>(0u, 0xffffffffu), vec2<u32>(p, q), p < {n}u && q < {n}u);\n        }}\n",
        h = s.half(),
        wg = s.wg,
        nm1 = s.players - 1,
        n = s.n,
    )
}

pub(super) fn params() -> Binding {
    Binding {
        value: PARAMS,
        ty: TensorType::new(vec![2], ElementType::U32),
    }
}

/// The plan of `custom_call @wgpu_hlo.eigh` or `@wgpu_hlo.svd`.
pub fn plan(
    name: &str,
    f: &Function,
    op: &Operation,
    c: &CustomCall,
    target: Target,
) -> Result<Plan> {
    use super::{bidiagonal, tridiagonal};
    // A matrix whose Jacobi round would run past the loop budget (eigh of 1024 x 1024 on a
    // GPU: 13355 iterations a round in a workgroup of 256) takes the reduction to condensed
    // form instead, where it can (values-only svd, eigh): a result, not RESOURCE_EXHAUSTED.
    let or_condensed = |r: Result<Plan>, alt: &dyn Fn() -> Result<Option<Plan>>| match r {
        Err(e) if e.kind == crate::error::ErrorKind::ResourceExhausted => match alt()? {
            Some(p) => Ok(p),
            None => Err(e),
        },
        r => r,
    };
    if c.call_target_name != EIGH_TARGET {
        let condensed = |fallback| -> Result<Option<Plan>> {
            match bidiagonal::plan_values(name, f, op, target, fallback)? {
                Some(p) => Ok(Some(p)),
                None => bidiagonal::plan(name, f, op, target, fallback),
            }
        };
        match condensed(false)? {
            Some(p) => Ok(p),
            None => or_condensed(svd(name, f, op, target, false), &|| condensed(true)),
        }
    } else if let Some(p) = tridiagonal::plan(name, f, op, target, false)? {
        Ok(p)
    } else {
        let jacobi = if eigh_one_sided(target) {
            svd(name, f, op, target, true)
        } else {
            eigh(name, f, op, target)
        };
        or_condensed(jacobi, &|| tridiagonal::plan(name, f, op, target, true))
    }
}

/// Whether eigh runs as one-sided Jacobi on the shifted matrix ([`svd`] with `eigh`): on CPU
/// adapters (`WGPU_HLO_EIGH_ONE_SIDED=0`: never, `=1`: on every adapter).
fn eigh_one_sided(target: Target) -> bool {
    match std::env::var("WGPU_HLO_EIGH_ONE_SIDED").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => target.cpu_adapter,
    }
}

/// The shift of the one-sided eigh: `B = A + SHIFT * |A|_F I` is positive definite with
/// condition at most 5 (|A|_2 <= |A|_F), so its singular vectors are its eigenvectors and
/// the normalized columns of `B V` lose at most a few epsilons.
const SHIFT: f32 = 1.5;

pub(super) fn check_results(
    f: &Function,
    op: &Operation,
    want: &[Vec<usize>],
    what: &str,
) -> Result<Vec<TensorType>> {
    if op.operands.len() != 1 || op.results.len() != want.len() {
        return Err(Error::invalid(format!(
            "{what} takes one operand and returns {} results",
            want.len()
        )));
    }
    let mut out = Vec::new();
    for (&r, w) in op.results.iter().zip(want) {
        let t = match f.ty(r) {
            Type::Tensor(t) if t.dtype == ElementType::F32 && t.is_static() => t.clone(),
            other => return Err(Error::invalid(format!("{what} result of type {other}"))),
        };
        if &t.dims() != w {
            return Err(Error::invalid(format!(
                "{what}: result {t} does not match the operand (want dims {w:?})"
            )));
        }
        out.push(t);
    }
    Ok(out)
}

fn eigh(name: &str, f: &Function, op: &Operation, target: Target) -> Result<Plan> {
    let what = format!("custom_call @{EIGH_TARGET}");
    let at = f32_tensor(
        f,
        *op.operands
            .first()
            .ok_or_else(|| Error::invalid(format!("{what} without operand")))?,
        &what,
    )?;
    let s = shape(&what, &at, target)?;
    if s.m != s.n {
        return Err(Error::invalid(format!("{what} needs square matrices")));
    }
    let d = at.dims();
    // Without vectors (`passes::dce::drop_unused_vectors`) the last kernel is left out.
    let vectors = op.results.len() != 1;
    let mut want = vec![d[..d.len() - 1].to_vec(), d.clone()];
    want.truncate(if vectors { 2 } else { 1 });
    let res = check_results(f, op, &want, &what)?;
    // The state is padded to an even order (a zero row and column, whose rotations are all
    // the identity): every round then has n/2 real pairs.
    let n0 = s.n;
    let s = Shape {
        m: s.players,
        n: s.players,
        ..s
    };
    let (n, h, wg, batch) = (s.n, s.half(), s.wg, s.batch);
    let nn = n * n;
    // Iterations: per round the rotations, the rows, the columns (and vectors), the round;
    // per launch the norm's sum and its tree.
    // V by columns in workgroup memory when it fits next to the row-major matrix.
    let other = 16 * h + 4 * wg + 32;
    let columns = Columns::new(n, &[("vc", n, nn)], other + 4 * nn, target);
    // Otherwise V by columns of vec4s in the state (bound as `array<vec4<f32>>`, the matrix
    // and status read as `f32`s of it): its rotations then read and write whole vec4s, not
    // elements of a row-major V (llvmpipe: 256x256 7.1 -> 4.5 s, 80x80 179 -> 118 ms).
    let v_global = (columns.is_none() && columns_allowed()).then(|| n.div_ceil(4));
    // The state: X row-major, V (row-major, or `v_global` by columns of `lv` vec4s), status.
    let stride = nn + v_global.map_or(nn, |lv| 4 * lv * n) + STATUS;
    let status = stride - STATUS;
    let state_t = TensorType::new(vec![(batch * stride) as i64], ElementType::F32);
    let rank_t = TensorType::new(vec![(batch * n0) as i64], ElementType::U32);
    let state = binding(temp(0), &state_t);
    let desc = format!("{batch} symmetric {n0}x{n0} f32 matrices");

    let init = kernel::threaded(
        &format!("{name}_init"),
        &format!("kernel {name}_init: Jacobi state (matrix, identity, status) of {desc}\nloop iterations per invocation: 0\nfuses: {what}"),
        vec![binding(op.operands[0], &at)],
        vec![state.clone()],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {stride}u;\n    let e = tid % {stride}u;\n    var x = 0.0;\n    if (e < {nn}u) {{\n        let i = e / {n}u;\n        let j = e % {n}u;\n        if (i < {n0}u && j < {n0}u) {{\n            x = in0[mat * {n0n0}u + i * {n0}u + j];\n        }}\n    }} else if (e < {status}u) {{\n        let d = e - {nn}u;\n        x = select(0.0, 1.0, d / {vcol}u == d % {vcol}u);\n    }}\n    out0[tid] = x;\n",
            n0n0 = n0 * n0,
            vcol = v_global.map_or(n, |lv| 4 * lv),
        ),
        batch * stride,
        0,
        target,
    )?;

    let local = Local::new(
        if columns.is_some() || v_global.is_some() {
            vec![("wx", 0, nn)]
        } else {
            vec![("wx", 0, nn), ("wv", nn, nn)]
        },
        other + columns.as_ref().map_or(0, Columns::bytes),
        v_global.is_some(),
        target,
    );
    let stat = if v_global.is_some() {
        Status::Packed
    } else {
        Status::Scalars
    };
    let rows_v = columns.as_ref().map_or(v_global.unwrap_or(n), |c| c.l(0));
    let block_tasks = h * (h + 1) / 2;
    let per_round = 2 * h.div_ceil(wg) + block_tasks.div_ceil(wg) + (h * rows_v).div_ceil(wg) + 3;
    let fixed = 2 * nn.div_ceil(wg) + 4 * wg.ilog2() as u64 + 2;
    let fixed = fixed + local.iterations(wg) + columns.as_ref().map_or(0, |c| c.iterations(wg));
    let (sweeps, iterations) =
        sweep_launches(&s, per_round, nn.div_ceil(wg) + 1, fixed, budget(target))?;
    let x = |i: &str, j: &str| local.at(0, n, i, j);
    let v = |i: &str, j: &str| local.at(nn, n, i, j);
    let mut phases = pair_table(&s);
    // Rotations; a pair within the tolerance keeps the identity (threshold Jacobi).
    phases.push_str(&format!(
        "        for (var k = lid; k < {h}u; k = k + {wg}u) {{\n            let pq = pairs[k];\n            var rot = vec2<f32>(1.0, 0.0);\n            if (pq.y != 0xffffffffu) {{\n                let p = pq.x;\n                let q = pq.y;\n                let apq = {xpq};\n                if (abs(apq) > tol) {{\n                    rot = rotation({xpp}, {xqq}, apq);\n                }}\n            }}\n            cs[k] = rot;\n        }}\n        workgroupBarrier();\n",
        xpq = x("p", "q"),
        xpp = x("p", "p"),
        xqq = x("q", "q"),
    ));
    // X <- J^T X J by 2x2 blocks, one task per unordered pair of pairs {k, k2}: task t takes
    // k = t % h and k2 = k + t / h (mod h), for t < h (h + 1) / 2 (for even h the last
    // distance, h / 2, only from the first half of k). X stays exactly symmetric: each block
    // is also written to its mirror; the pair's own element (k2 == k) is zeroed. V <- V J.
    phases.push_str(&format!(
        "        for (var t = lid; t < {tasks}u; t = t + {wg}u) {{\n            let k = t % {h}u;\n            var k2 = k + t / {h}u;\n            if (k2 >= {h}u) {{ k2 = k2 - {h}u; }}\n            let pq = pairs[k];\n            let pq2 = pairs[k2];\n            if (pq.y != 0xffffffffu && pq2.y != 0xffffffffu) {{\n                let rot = cs[k];\n                let rot2 = cs[k2];\n                if (rot.y != 0.0 || rot2.y != 0.0) {{\n                    let p = pq.x;\n                    let q = pq.y;\n                    let p2 = pq2.x;\n                    let q2 = pq2.y;\n                    let a = {xpp2};\n                    let b = {xpq2};\n                    let c = {xqp2};\n                    let d = {xqq2};\n                    let a1 = rot.x * a - rot.y * c;\n                    let b1 = rot.x * b - rot.y * d;\n                    let c1 = rot.y * a + rot.x * c;\n                    let d1 = rot.y * b + rot.x * d;\n                    var na = rot2.x * a1 - rot2.y * b1;\n                    var nb = rot2.y * a1 + rot2.x * b1;\n                    var nc = rot2.x * c1 - rot2.y * d1;\n                    var nd = rot2.y * c1 + rot2.x * d1;\n                    if (k2 == k) {{\n                        // The pair's own block: its diagonal by t = s / c (Rutishauser), two\n                        // roundings each instead of six.\n                        let tb = rot.y / rot.x * b;\n                        na = a - tb;\n                        nd = d + tb;\n                        nb = 0.0;\n                        nc = 0.0;\n                    }}\n                    {xpp2} = na;\n                    {xpq2} = nb;\n                    {xqp2} = nc;\n                    {xqq2} = nd;\n                    if (k2 != k) {{\n                        {xp2p} = na;\n                        {xq2p} = nb;\n                        {xp2q} = nc;\n                        {xq2q} = nd;\n                    }}\n                }}\n            }}\n        }}\n",
        tasks = block_tasks,
        xpp2 = x("p", "p2"),
        xpq2 = x("p", "q2"),
        xqp2 = x("q", "p2"),
        xqq2 = x("q", "q2"),
        xp2p = x("p2", "p"),
        xq2p = x("q2", "p"),
        xp2q = x("p2", "q"),
        xq2q = x("q2", "q"),
    ));
    let rotate_v = match (&columns, v_global) {
        (Some(c), _) => rotate("vc[p * {l}u + i]", "vc[q * {l}u + i]", c.l(0)),
        (None, Some(lv)) => rotate("out0[vb + p * {l}u + i]", "out0[vb + q * {l}u + i]", lv),
        (None, None) => rotate(&v("i", "p"), &v("i", "q"), 0),
    };
    phases.push_str(&pair_tasks(
        h,
        rows_v,
        wg,
        "i",
        &format!("                    if (rot.y != 0.0) {{\n{rotate_v}                    }}\n"),
    ));
    phases.push_str(if v_global.is_some() {
        "        storageBarrier();\n        workgroupBarrier();\n"
    } else {
        local.sync()
    });
    let (col_decls, col_load, col_store) = match &columns {
        Some(c) => (c.decls(), c.copies(wg, true), c.copies(wg, false)),
        None => Default::default(),
    };
    let mut body = sweep_prelude(
        &s,
        &format!(
            "var<workgroup> red: array<f32, {wg}>;\n{}{col_decls}",
            local.decls()
        ),
        "",
    );
    body.push_str(&sweep_start(stride, status, stat));
    if v_global.is_some() {
        body.push_str(&format!("    let vb = (base + {nn}u) >> 2u;\n"));
    }
    body.push_str(&local.copies(wg, true));
    body.push_str(&col_load);
    body.push_str(&format!(
        "    if (c0.y == 0u) {{\n        // The tolerance: one epsilon of the Frobenius norm, summed over the matrix scaled by\n        // its largest magnitude (squares of entries past 1e19 overflowed: an infinite\n        // tolerance skipped every rotation and returned the diagonal).\n        var top = 0.0;\n        for (var e = lid; e < {nn}u; e = e + {wg}u) {{\n            top = max(top, abs({xe}));\n        }}\n        red[lid] = top;\n{tmax}        top = red[0];\n        workgroupBarrier();\n        let g = select(1.0, 1.0 / top, top > 0.0 && top <= 3.4028235e38);\n        var acc = 0.0;\n        for (var e = lid; e < {nn}u; e = e + {wg}u) {{\n            let a = {xe} * g;\n            acc = acc + a * a;\n        }}\n        red[lid] = acc;\n{tsum}        if (lid == 0u) {{ {tol_at} = 1.1920929e-7 * sqrt(red[0]) / g; }}\n    }}\n    storageBarrier();\n    // Rotations of elements within the tolerance are skipped (threshold Jacobi).\n    let tol = {tol_at};\n\
         for (var g = c0.y; g < c0.z; g = g + 1u) {{\n        let r = g % {r1}u;\n\
{phases}",
        phases = phases,
        tmax = tree_reduce(wg / 2, MAX, "        "),
        tsum = tree_reduce(wg / 2, SUM, "        "),
        xe = local.state("e"),
        tol_at = stat.word(2),
        r1 = s.rounds(),
    ));
    // Converged when no off-diagonal element exceeds the tolerance after a sweep.
    let measure = format!(
        "            for (var e = lid; e < {nn}u; e = e + {wg}u) {{\n                if (e % {n1}u != 0u) {{ atomicMax(&worst, bitcast<u32>(abs({xe}))); }}\n            }}\n            workgroupBarrier();\n",
        n1 = n + 1,
        xe = x("e / {n}u", "e % {n}u").replace("{n}", &n.to_string()),
    );
    body.push_str(&round_end(
        &s,
        &measure,
        &stat.word(2),
        &(local.copies(wg, false) + &col_store),
        stat,
    ));
    let sweep_k = workgroup_kernel(
        &format!("{name}_sweep"),
        &format!("kernel {name}_sweep: rounds (parameters: first and end) of parallel two-sided Jacobi on {desc}, one workgroup per matrix\nloop iterations per invocation: at most {iterations}\nfuses: {what}"),
        vec![params()],
        vec![state.clone()],
        &body,
        batch,
        iterations,
        v_global.is_some(),
        target,
    )?;

    let rank = kernel::threaded(
        &format!("{name}_values"),
        &format!("kernel {name}_values: eigenvalues of {desc}, ascending, and their ranks\nloop iterations per invocation: at most {n}\nfuses: {what}"),
        vec![state.clone()],
        vec![binding(op.results[0], &res[0]), binding(temp(1), &rank_t)],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {n0}u;\n    let i = tid % {n0}u;\n    let base = mat * {stride}u;\n{}    out0[mat * {n0}u + rank] = ki;\n    out1[tid] = rank;\n",
            rank_loop(n0, &format!("in0[base + i * {}u]", n + 1), &format!("in0[base + j * {}u]", n + 1), true)
        ),
        batch * n0,
        n0,
        target,
    )?;
    let mut launches = vec![Launch::new(0, Vec::new())];
    launches.extend(sweeps);
    launches.push(Launch::new(2, Vec::new()));
    let Some(res_v) = res.get(1) else {
        return Ok(Plan {
            kernels: vec![init, sweep_k, rank],
            temps: vec![state_t, rank_t],
            launches,
        });
    };
    let vectors = kernel::threaded(
        &format!("{name}_vectors"),
        &format!("kernel {name}_vectors: eigenvectors of {desc} in the order of their eigenvalues\nloop iterations per invocation: 0\nfuses: {what}"),
        vec![state, binding(temp(1), &rank_t)],
        vec![binding(op.results[1], res_v)],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {n0n0}u;\n    let row = (tid / {n0}u) % {n0}u;\n    let col = tid % {n0}u;\n    out0[mat * {n0n0}u + row * {n0}u + in1[mat * {n0}u + col]] = in0[mat * {stride}u + {nn}u + {v_rc}];\n",
            v_rc = match v_global {
                Some(lv) => format!("col * {}u + row", 4 * lv),
                None => format!("row * {n}u + col"),
            },
            n0n0 = n0 * n0
        ),
        batch * n0 * n0,
        0,
        target,
    )?;
    launches.push(Launch::new(3, Vec::new()));
    Ok(Plan {
        kernels: vec![init, sweep_k, rank, vectors],
        temps: vec![state_t, rank_t],
        launches,
    })
}

/// One-sided Jacobi: the singular value decomposition, or with `eigh` the eigendecomposition
/// of a symmetric `A` from that of `B = A + sigma I` ([`SHIFT`]): a shift kernel adds sigma
/// to the diagonal (and keeps it in the status record), the sweeps rotate the columns of B
/// without accumulating V, the eigenvectors are the normalized columns of `B V` (for a
/// positive definite B, `U = V`) and the eigenvalues their Rayleigh quotients in A. Against
/// the two-sided kernel a round moves two columns, not four and a row-major matrix
/// (llvmpipe, 48x48: 27 -> 11 ms; 256x256: 5.0 -> 2.6 s), and the eigenvalues come out 5-10x
/// more accurate; residuals grow 2-5x (to 1.6e-6 |A| at 48x48, 7e-6 at 256x256).
fn svd(name: &str, f: &Function, op: &Operation, target: Target, eigh: bool) -> Result<Plan> {
    let what = format!(
        "custom_call @{}",
        if eigh { EIGH_TARGET } else { SVD_TARGET }
    );
    let at = f32_tensor(
        f,
        *op.operands
            .first()
            .ok_or_else(|| Error::invalid(format!("{what} without operand")))?,
        &what,
    )?;
    let mut s = shape(&what, &at, target)?;
    let d = at.dims();
    let r = d.len();
    if eigh && s.m != s.n {
        return Err(Error::invalid(format!("{what} needs square matrices")));
    }
    if eigh && scale_iterations(s.n * s.n, true) > target.max_invocation_iterations {
        // The shift kernel would pass the loop bound (WGPU_HLO_MAX_LOOP set low).
        return self::eigh(name, f, op, target);
    }
    let uv = !eigh && op.results.len() == 3;
    let mut want = vec![d[..r - 1].to_vec()];
    want[0][r - 2] = d[r - 1];
    // eigh without vectors (`passes::dce::drop_unused_vectors`): the vectors' kernel is left
    // out.
    let eigh_vectors = eigh && op.results.len() != 1;
    if eigh_vectors {
        want.push(d.clone());
    }
    if uv {
        want.push(d.clone());
        let mut vd = d.clone();
        vd[r - 2] = d[r - 1];
        want.push(vd);
    }
    let res = check_results(f, op, &want, &what)?;
    let (m, n, h, wg, batch) = (s.m, s.n, s.half(), s.wg, s.batch);
    let (mn, nn) = (m * n, n * n);
    let vsize = if uv { nn } else { 0 };
    let desc = format!("{batch} {m}x{n} f32 matrices");

    // The three column products of each pair in `parts` partial sums.
    let parts = (wg / h).max(1);
    let slots = h * parts;
    // Pairs count as orthogonal below these cosines: 4 epsilons, or sqrt(m) / 4 past 256 rows
    // where the products' rounding grows. U (or eigh's vectors) is orthogonal to about this
    // much: the m epsilons used before left eigh residuals of 1.7e-5 at 48x48 and 3e-4 at
    // 256x256 (now 1.6e-6 and 7e-6), and svd's U at 256x256 orthogonal to 3e-5 (now 9e-7; pinv
    // 2.6e-4 -> 1.1e-5 of |pinv|, jax cpu 1.5e-6), for one sweep more at most. Singular
    // values alone took m epsilons until 2026-12-01, on the grounds that their error is of the
    // order of the cosines squared: that holds for well-separated values only. A pair of close
    // ones left at cosine c is off by about c |s| to first order, and the singular values of a
    // tall random matrix cluster: 3000x40 came out 9.7e-5 of |s| off (numpy in f64 against
    // jax cpu 1.6e-7), now 6e-7.
    let tol_eps = 4f32.max((m as f32).sqrt() / 4.0);
    let tolc = format!("{:e}", tol_eps * f32::EPSILON);
    let shared = 16 * h + 16 * slots + 32;
    let mut by_columns = vec![("wc", m, 0)];
    if uv {
        by_columns.push(("vc", n, mn));
    }
    // By columns in workgroup memory when they fit, else in the state buffer.
    let columns = Columns::new(n, &by_columns, shared, target).or_else(|| {
        let mut arrays = vec![("wc", m)];
        if uv {
            arrays.push(("vc", n));
        }
        Columns::in_state(n, &arrays)
    });
    let global = columns.as_ref().filter(|c| c.global);
    // The state: the matrix, V (when `uv`) and the status record, row-major or (`global`)
    // by columns of vec4s; `stride` and `status` in f32s.
    let (stride, status) = match global {
        Some(c) => (4 * (c.state_vec4s() + 1), 4 * c.state_vec4s()),
        None => (mn + vsize + STATUS, mn + vsize),
    };
    // Element (i, j) (WGSL expressions) of the matrix and of V in a matrix's state.
    let w_at = |i: &str, j: &str| match global {
        Some(c) => format!("({j}) * {}u + ({i})", 4 * c.l(0)),
        None => format!("({i}) * {n}u + ({j})"),
    };
    let v_at = |i: &str, j: &str| match global {
        Some(c) => format!("{}u + ({j}) * {}u + ({i})", 4 * c.arrays[1].3, 4 * c.l(1)),
        None => format!("{mn}u + ({i}) * {n}u + ({j})"),
    };
    let state_t = TensorType::new(vec![(batch * stride) as i64], ElementType::F32);
    let vec_t = TensorType::new(vec![(batch * n) as i64], ElementType::F32);
    let rank_t = TensorType::new(vec![(batch * n) as i64], ElementType::U32);
    let state = binding(temp(0), &state_t);
    let fill = match global {
        Some(c) => {
            let (lw4, wend) = (4 * c.l(0), 4 * c.l(0) * n);
            let vfill = if uv {
                format!(" else if (e < {status}u) {{\n        let d = e - {wend}u;\n        x = select(0.0, 1.0, d / {lv4}u == d % {lv4}u);\n    }}", lv4 = 4 * c.l(1))
            } else {
                String::new()
            };
            format!("    if (e < {wend}u) {{\n        let i = e % {lw4}u;\n        if (i < {m}u) {{ x = in0[mat * {mn}u + i * {n}u + e / {lw4}u]; }}\n    }}{vfill}\n")
        }
        None => format!(
            "    if (e < {mn}u) {{\n        x = in0[mat * {mn}u + e];\n    }} else if (e < {vend}u) {{\n        let d = e - {mn}u;\n        x = select(0.0, 1.0, d / {n}u == d % {n}u);\n    }}\n",
            vend = mn + vsize
        ),
    };
    let init = kernel::threaded(
        &format!("{name}_init"),
        &format!("kernel {name}_init: Jacobi state (matrix, identity, status) of {desc}\nloop iterations per invocation: 0\nfuses: {what}"),
        vec![binding(op.operands[0], &at)],
        vec![state.clone()],
        &Default::default(),
        "",
        &format!("    let mat = tid / {stride}u;\n    let e = tid % {stride}u;\n    var x = 0.0;\n{fill}    out0[tid] = x;\n"),
        batch * stride,
        0,
        target,
    )?;
    let blocks = columns
        .as_ref()
        .filter(|c| !c.global)
        .and_then(|_| Blocks::new(m, n, uv, target));
    let (sweeps, sweep_k) = if let Some(b) = blocks {
        block_sweep(
            name, &desc, &what, &s, b, &state, stride, status, &tolc, target,
        )?
    } else {
        let in_registers = columns
            .as_ref()
            .is_some_and(|c| !c.global && pairs_in_registers(c, target));
        let streamed = global.is_some_and(|_| pairs_streamed(target));
        if in_registers || streamed {
            // One invocation per pair, in whole subgroups of 8 (llvmpipe's 256-bit lanes).
            s.wg = h.next_multiple_of(8);
        }
        let (h, wg) = (s.half(), s.wg);
        // Row tasks per pair: rows of the matrix and of V (vec4s of 4 rows in the column layout).
        let (rows_w, rows_v) = match &columns {
            Some(c) => (c.l(0), c.l(1)),
            None => (m, n),
        };
        let per_round = if in_registers {
            2
        } else if streamed {
            2 * rows_w + rows_v + 2
        } else {
            h.div_ceil(wg)
                + 2
                + slots.div_ceil(wg) * rows_w.div_ceil(parts)
                + h.div_ceil(wg) * parts
                + (h * rows_w).div_ceil(wg)
                + if uv { (h * rows_v).div_ceil(wg) } else { 0 }
                + 1
        };
        let mut arrays = vec![("ww", 0, mn)];
        if uv {
            arrays.push(("wv", mn, nn));
        }
        let local = Local::new(
            if columns.is_some() {
                Vec::new()
            } else {
                arrays
            },
            shared,
            false,
            target,
        );
        let fixed = 2 + match &columns {
            Some(c) => c.iterations(wg),
            None => local.iterations(wg),
        };
        let (sweeps, iterations) = sweep_launches(&s, per_round, 0, fixed, budget(target))?;
        let w = |i: &str, j: &str| local.at(0, n, i, j);
        let v = |i: &str, j: &str| local.at(mn, n, i, j);
        let decls = match &columns {
            Some(c) => c.decls(),
            None => local.decls(),
        };
        let mut body = sweep_prelude(
            &s,
            &if in_registers || streamed {
                decls
            } else {
                format!("var<workgroup> part: array<vec3<f32>, {slots}>;\n{decls}")
            },
            "",
        );
        body.push_str(&match global {
            Some(_) => sweep_start(stride / 4, status / 4, Status::Vec4),
            None => sweep_start(stride, status, Status::Scalars),
        });
        let (load, store) = match &columns {
            Some(c) => (c.copies(wg, true), c.copies(wg, false)),
            None => (local.copies(wg, true), local.copies(wg, false)),
        };
        body.push_str(&load);
        let mut phases = String::new();
        if let (true, Some(c)) = (in_registers, &columns) {
            phases.push_str(&register_round(&s, c, uv, &tolc));
        } else if let (true, Some(c)) = (streamed, global) {
            phases.push_str(&stream_round(&s, c, uv, &tolc));
        } else {
            phases.push_str(&pair_table(&s));
            phases.push_str("        workgroupBarrier();\n");
            // One partial sum: the products of rows `i` of columns p and q.
            let (products, rotate_w, rotate_v) = match &columns {
        Some(c) => (
            format!(
                "                let pc = p * {lq}u;\n                let qc = q * {lq}u;\n                for (var i = e % {parts}u; i < {lq}u; i = i + {parts}u) {{\n                    let a = {a};\n                    let b = {b};\n                    acc = acc + vec3<f32>(dot(a, a), dot(b, b), dot(a, b));\n                }}\n",
                lq = c.l(0),
                a = c.at(0, "pc + i"),
                b = c.at(0, "qc + i"),
            ),
            rotate(&c.at(0, "p * {l}u + i"), &c.at(0, "q * {l}u + i"), c.l(0)),
            rotate(&c.at(1, "p * {l}u + i"), &c.at(1, "q * {l}u + i"), c.l(1)),
        ),
        None => (
            format!(
                "                for (var i = e % {parts}u; i < {m}u; i = i + {parts}u) {{\n                    let a = {wip};\n                    let b = {wiq};\n                    acc = acc + vec3<f32>(a * a, b * b, a * b);\n                }}\n",
                wip = w("i", "p"),
                wiq = w("i", "q"),
            ),
            rotate(&w("i", "p"), &w("i", "q"), 0),
            rotate(&v("i", "p"), &v("i", "q"), 0),
        ),
    };
            phases.push_str(&format!(
        "        for (var e = lid; e < {slots}u; e = e + {wg}u) {{\n            let pq = pairs[e / {parts}u];\n            var acc = vec3<f32>(0.0, 0.0, 0.0);\n            if (pq.y != 0xffffffffu) {{\n                let p = pq.x;\n                let q = pq.y;\n{products}            }}\n            part[e] = acc;\n        }}\n        workgroupBarrier();\n\
         for (var k = lid; k < {h}u; k = k + {wg}u) {{\n            var acc = vec3<f32>(0.0, 0.0, 0.0);\n            for (var t = 0u; t < {parts}u; t = t + 1u) {{\n                acc = acc + part[k * {parts}u + t];\n            }}\n            let norms = sqrt(acc.x * acc.y);\n            if (norms > 0.0) {{\n                atomicMax(&worst, bitcast<u32>(abs(acc.z) / norms));\n            }}\n            // Pairs orthogonal to working precision are skipped (threshold Jacobi).\n            if (abs(acc.z) > {tolc} * norms) {{\n                cs[k] = rotation(acc.x, acc.y, acc.z);\n            }} else {{\n                pairs[k] = vec2<u32>(0u, 0xffffffffu);\n            }}\n        }}\n        workgroupBarrier();\n",
        tolc = tolc,
    ));
            phases.push_str(&pair_tasks(h, rows_w, wg, "i", &rotate_w));
            if uv {
                phases.push_str(&pair_tasks(h, rows_v, wg, "i", &rotate_v));
            }
        }
        body.push_str(&format!(
            "    for (var g = c0.y; g < c0.z; g = g + 1u) {{\n        let r = g % {r1}u;\n{phases}",
            r1 = s.rounds(),
        ));
        body.push_str(if columns.is_some() && global.is_none() {
            "        workgroupBarrier();\n"
        } else {
            local.sync()
        });
        // Converged when every pair's cosine stayed within m epsilons during a sweep.
        let stat = if global.is_some() {
            Status::Vec4
        } else {
            Status::Scalars
        };
        body.push_str(&round_end(&s, "", &tolc, &store, stat));
        let by = if global.is_some() {
            ", the state by columns of vec4s"
        } else {
            ""
        };
        let sweep_k = workgroup_kernel(
        &format!("{name}_sweep"),
        &format!("kernel {name}_sweep: rounds (parameters: first and end) of parallel one-sided Jacobi on {desc}, one workgroup per matrix{by}\nloop iterations per invocation: at most {iterations}\nfuses: {what}"),
        vec![params()],
        vec![state.clone()],
        &body,
        batch,
        iterations,
        global.is_some(),
        target,
    )?;
        (sweeps, sweep_k)
    };
    let norms = kernel::threaded(
        &format!("{name}_norms"),
        &format!("kernel {name}_norms: column norms of the rotated {desc}\nloop iterations per invocation: at most {m}\nfuses: {what}"),
        vec![state.clone()],
        vec![binding(temp(1), &vec_t)],
        &Default::default(),
        "",
        &format!(
            "    let base = (tid / {n}u) * {stride}u;\n    let j = tid % {n}u;\n    var acc = 0.0;\n    for (var i = 0u; i < {m}u; i = i + 1u) {{\n        let a = in0[base + {wij}];\n        acc = acc + a * a;\n    }}\n    out0[tid] = sqrt(acc);\n",
            wij = w_at("i", "j"),
        ),
        batch * n,
        m,
        target,
    )?;
    // The normalized columns of the rotated matrix, in the order of the ranks: U, or with
    // `eigh` the eigenvectors.
    let normalized = |kname: &str, vectors: &str, out: Binding| {
        kernel::threaded(
            &format!("{name}_{kname}"),
            &format!("kernel {name}_{kname}: {vectors} of {desc} in the order of their values\nloop iterations per invocation: 0\nfuses: {what}"),
            vec![state.clone(), binding(temp(1), &vec_t), binding(temp(2), &rank_t)],
            vec![out],
            &Default::default(),
            "",
            &format!(
                "    let mat = tid / {mn}u;\n    let row = (tid / {n}u) % {m}u;\n    let col = tid % {n}u;\n    let sv = in1[mat * {n}u + col];\n    let a = in0[mat * {stride}u + {wrc}];\n    out0[mat * {mn}u + row * {n}u + in2[mat * {n}u + col]] = select(a, a / sv, sv > 0.0);\n",
                wrc = w_at("row", "col"),
            ),
            batch * mn,
            0,
            target,
        )
    };
    if eigh {
        // The eigenvalues as Rayleigh quotients u^T A u of the unshifted A (the column norms
        // less sigma would carry the rounding of B's larger norm): first the terms
        // `u_ji (A u_i)_j`, then their sums and ranks.
        // One invocation per 4x4 block of `A U` (rows j0.., eigenvectors i0..): 8 loads per
        // 16 products, not 2 per 1 (llvmpipe, 48x48: 2.0 -> 0.6 ms); it leaves each
        // eigenvector's partial sum over its 4 rows.
        let nb4 = n.div_ceil(4);
        let terms_t = TensorType::new(vec![(batch * n * nb4) as i64], ElementType::F32);
        let n1 = n - 1;
        let col = |c: u64| format!("min(i0 + {c}u, {n1}u)");
        let row = |r: u64| format!("min(j0 + {r}u, {n1}u)");
        let w_row = |r: &str| {
            format!(
                "vec4<f32>({})",
                (0..4)
                    .map(|c| format!("in1[base + {}]", w_at(r, &col(c))))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut body = format!(
            "    let mat = tid / {q}u;\n    let i0 = ((tid / {nb4}u) % {nb4}u) * 4u;\n    let jb = tid % {nb4}u;\n    let j0 = jb * 4u;\n    let base = mat * {stride}u;\n    let ab = mat * {nn}u;\n    var acc0 = vec4<f32>();\n    var acc1 = vec4<f32>();\n    var acc2 = vec4<f32>();\n    var acc3 = vec4<f32>();\n    for (var k = 0u; k < {n}u; k = k + 1u) {{\n        let wk = {wk};\n",
            q = nb4 * nb4,
            wk = w_row("k"),
        );
        for r in 0..4 {
            body.push_str(&format!(
                "        acc{r} = acc{r} + in0[ab + {} * {n}u + k] * wk;\n",
                row(r)
            ));
        }
        body.push_str("    }\n    var t = vec4<f32>();\n");
        for r in 0..4 {
            body.push_str(&format!(
                "    if (j0 + {r}u < {n}u) {{ t = t + {} * acc{r}; }}\n",
                w_row(&row(r))
            ));
        }
        body.push_str(&format!(
            "    let sv = vec4<f32>({});\n    let q = select(vec4<f32>(), t / (sv * sv), sv > vec4<f32>());\n",
            (0..4)
                .map(|c| format!("in2[mat * {n}u + {}]", col(c)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for c in 0..4 {
            body.push_str(&format!(
                "    if (i0 + {c}u < {n}u) {{ out0[(mat * {n}u + i0 + {c}u) * {nb4}u + jb] = q[{c}]; }}\n"
            ));
        }
        let terms = kernel::threaded(
            &format!("{name}_rayleigh"),
            &format!("kernel {name}_rayleigh: partial Rayleigh quotients u_i^T A u_i of {desc}, 4 rows each\nloop iterations per invocation: at most {n}\nfuses: {what}"),
            vec![binding(op.operands[0], &at), state.clone(), binding(temp(1), &vec_t)],
            vec![binding(temp(3), &terms_t)],
            &Default::default(),
            "",
            &body,
            batch * nb4 * nb4,
            n,
            target,
        )?;
        let sums = kernel::threaded(
            &format!("{name}_quotients"),
            &format!("kernel {name}_quotients: the Rayleigh quotients of {desc}\nloop iterations per invocation: at most {nb4}\nfuses: {what}"),
            vec![binding(temp(3), &terms_t)],
            vec![binding(temp(4), &vec_t)],
            &Default::default(),
            "",
            &format!("    var acc = 0.0;\n    for (var j = 0u; j < {nb4}u; j = j + 1u) {{ acc = acc + in0[tid * {nb4}u + j]; }}\n    out0[tid] = acc;\n"),
            batch * n,
            nb4,
            target,
        )?;
        let values = kernel::threaded(
            &format!("{name}_values"),
            &format!("kernel {name}_values: eigenvalues of {desc}, ascending, and their ranks\nloop iterations per invocation: at most {n}\nfuses: {what}"),
            vec![binding(temp(4), &vec_t)],
            vec![binding(op.results[0], &res[0]), binding(temp(2), &rank_t)],
            &Default::default(),
            "",
            &format!(
                "    let mat = tid / {n}u;\n    let i = tid % {n}u;\n{}    out0[mat * {n}u + rank] = ki;\n    out1[tid] = rank;\n",
                rank_loop(n, "in0[tid]", &format!("in0[mat * {n}u + j]"), true)
            ),
            batch * n,
            n,
            target,
        )?;
        let shift = scale_kernel(
            name,
            &desc,
            &what,
            &state,
            batch,
            (n, n),
            stride,
            status + 3,
            true,
            &w_at,
            target,
        )?;
        let mut kernels = vec![init, sweep_k, norms, terms, sums, values];
        if eigh_vectors {
            kernels.push(normalized(
                "vectors",
                "eigenvectors",
                binding(op.results[1], &res[1]),
            )?);
        }
        let mut launches = vec![
            Launch::new(0, Vec::new()),
            Launch::updating(kernels.len(), Vec::new(), 0),
        ];
        launches.extend(sweeps);
        launches.extend((2..kernels.len()).map(|k| Launch::new(k, Vec::new())));
        kernels.push(shift);
        return Ok(Plan {
            kernels,
            temps: vec![state_t, vec_t.clone(), rank_t, terms_t, vec_t],
            launches,
        });
    }
    // Past the loop bound (more than about 4M elements a matrix) the matrix stays unscaled.
    let scale = (scale_iterations(mn, false) <= target.max_invocation_iterations)
        .then(|| {
            scale_kernel(
                name,
                &desc,
                &what,
                &state,
                batch,
                (m, n),
                stride,
                status + 3,
                false,
                &w_at,
                target,
            )
        })
        .transpose()?;
    let values = kernel::threaded(
        &format!("{name}_values"),
        &format!("kernel {name}_values: singular values of {desc} (the column norms over the scale), descending, and their ranks\nloop iterations per invocation: at most {n}\nfuses: {what}"),
        if scale.is_some() {
            vec![binding(temp(1), &vec_t), state.clone()]
        } else {
            vec![binding(temp(1), &vec_t)]
        },
        vec![binding(op.results[0], &res[0]), binding(temp(2), &rank_t)],
        &Default::default(),
        "",
        &format!(
            "    let mat = tid / {n}u;\n    let i = tid % {n}u;\n{inv}{}    out0[mat * {n}u + rank] = ki * inv;\n    out1[tid] = rank;\n",
            rank_loop(n, "in0[tid]", &format!("in0[mat * {n}u + j]"), false),
            inv = if scale.is_some() {
                format!("    // 1 / g, exactly: g is a power of two.\n    let inv = bitcast<f32>((254u << 23u) - bitcast<u32>(in1[mat * {stride}u + {}u]));\n", status + 3)
            } else {
                "    let inv = 1.0;\n".to_string()
            },
        ),
        batch * n,
        n,
        target,
    )?;
    let mut kernels = vec![init, sweep_k, norms, values];
    let mut launches = vec![Launch::new(0, Vec::new())];
    launches.extend(sweeps);
    launches.push(Launch::new(2, Vec::new()));
    launches.push(Launch::new(3, Vec::new()));
    let mut temps = vec![state_t, vec_t.clone(), rank_t.clone()];
    if uv {
        // U into a temporary, its columns for numerically zero singular values completed to
        // an orthonormal basis, then the result; straight into the result where one column's
        // completion would pass the loop budget (very tall matrices).
        let u_t = TensorType::new(vec![(batch * m * n) as i64], ElementType::F32);
        let u_tmp = binding(temp(3), &u_t);
        let complete =
            completion_cost(m, n, n.saturating_sub(1), target) <= completion_budget(target);
        kernels.push(normalized(
            "u",
            "left singular vectors",
            if complete {
                u_tmp.clone()
            } else {
                binding(op.results[1], &res[1])
            },
        )?);
        kernels.push(kernel::threaded(
            &format!("{name}_v"),
            &format!("kernel {name}_v: right singular vectors of {desc} in the order of their values\nloop iterations per invocation: 0\nfuses: {what}"),
            vec![state, binding(temp(2), &rank_t)],
            vec![binding(op.results[2], &res[2])],
            &Default::default(),
            "",
            &format!(
                "    let mat = tid / {nn}u;\n    let row = (tid / {n}u) % {n}u;\n    let col = tid % {n}u;\n    out0[mat * {nn}u + row * {n}u + in1[mat * {n}u + col]] = in0[mat * {stride}u + {vrc}];\n",
                vrc = v_at("row", "col"),
            ),
            batch * nn,
            0,
            target,
        )?);
        launches.push(Launch::new(4, Vec::new()));
        launches.push(Launch::new(5, Vec::new()));
        if complete {
            complete_u(
                (name, &desc, &what),
                (&u_tmp, &vec_t),
                binding(op.results[1], &res[1]),
                (batch, m, n),
                target,
                &mut kernels,
                &mut launches,
            )?;
            temps.push(u_t);
        }
    }
    if let Some(scale) = scale {
        // Scaled right after the state is made.
        launches.insert(1, Launch::updating(kernels.len(), Vec::new(), 0));
        kernels.push(scale);
    }
    Ok(Plan {
        kernels,
        temps,
        launches,
    })
}

/// Threads per workgroup of [`COMPLETE_U`] (CPU adapters: fewer, barriers cost there).
fn complete_threads(target: Target) -> u64 {
    if target.cpu_adapter {
        64
    } else {
        256
    }
}

/// Loop iterations one launch of [`COMPLETE_U`] may run.
fn completion_budget(target: Target) -> u64 {
    (target.max_invocation_iterations / 2).max(1)
}

/// Loop iterations of [`COMPLETE_U`] on column `j` of `m x n` matrices: the row norms, the
/// two projections, the norm's sum, the tolerance's loops.
fn completion_cost(m: u64, n: u64, j: u64, target: Target) -> u64 {
    let w = complete_threads(target);
    4 * m.div_ceil(w) * j.max(1) + j.div_ceil(w) * m + w + 2 * n + 8
}

/// The columns of one-sided Jacobi's `U` (temporary 3, `m x n` row-major, columns by
/// descending singular value) whose singular value is numerically zero (at most `n` f32
/// epsilons of the largest) replaced by an orthonormal completion of the others, as LAPACK
/// returns: Jacobi leaves such a column zero (`s = 0`) or rounding noise, and `U^T U` was
/// not the identity for rank-deficient matrices (a rank-one 8 x 8: zero columns, `|U^T U -
/// I|` 1.0). Launches take ranges of columns within the loop budget; then the result.
#[allow(clippy::too_many_arguments)]
fn complete_u(
    (name, desc, what): (&str, &str, &str),
    (u, vec_t): (&Binding, &TensorType),
    out: Binding,
    (batch, m, n): (u64, u64, u64),
    target: Target,
    kernels: &mut Vec<kernel::Kernel>,
    launches: &mut Vec<Launch>,
) -> Result<()> {
    let w = complete_threads(target);
    let cost = |j: u64| completion_cost(m, n, j, target);
    let budget = completion_budget(target);
    let mut ranges = Vec::new();
    let mut j0 = 0;
    let mut iters = 0;
    while j0 < n {
        let mut c = cost(j0);
        let mut j1 = j0 + 1;
        while j1 < n && c + cost(j1) <= budget {
            c += cost(j1);
            j1 += 1;
        }
        iters = c.max(iters);
        ranges.push((j0, j1));
        j0 = j1;
    }
    let body = COMPLETE_U
        .replace("$W", &w.to_string())
        .replace("$MN", &(m * n).to_string())
        .replace("$M", &m.to_string())
        .replace("$N", &n.to_string())
        .replace("$B", &batch.to_string())
        .replace("$TOL", &format!("{:e}", n as f64 * f64::from(f32::EPSILON)))
        .replace("$RZ", kernel::RUNTIME_ZERO);
    kernels.push(workgroup_kernel(
        &format!("{name}_u_complete"),
        &format!("kernel {name}_u_complete: the left singular vectors of {desc} for numerically zero singular values completed to an orthonormal basis (parameters: first and end column), one workgroup per matrix\nloop iterations per invocation: at most {iters}\nfuses: {what}"),
        vec![params(), binding(temp(1), vec_t)],
        vec![u.clone()],
        &body,
        batch,
        iters,
        false,
        target,
    )?);
    let k = kernels.len() - 1;
    for (j0, j1) in ranges {
        launches.push(Launch::updating(k, vec![j0 as u32, j1 as u32], 3));
    }
    kernels.push(kernel::threaded(
        &format!("{name}_u_out"),
        &format!("kernel {name}_u_out: left singular vectors of {desc}\nloop iterations per invocation: 0\nfuses: {what}"),
        vec![u.clone()],
        vec![out],
        &Default::default(),
        "",
        "    out0[tid] = in0[tid];\n",
        batch * m * n,
        0,
        target,
    )?);
    launches.push(Launch::new(kernels.len() - 1, Vec::new()));
    Ok(())
}

/// [`complete_u`]'s kernel: `out0` U (`m x n` row-major, updated), `in1` the singular values
/// of the columns in their original order (scaled), `in0` the first and end column. Column
/// `j` (from the first numerically zero one) starts as `e_k` for the row `k` the columns
/// before it cover least (its squared residual is then at least `1 - j / m`), is projected
/// off them twice (classical Gram-Schmidt with reorthogonalization) and normalized.
const COMPLETE_U: &str = r#"var<workgroup> cc: array<f32, $N>;
var<workgroup> rv: array<f32, $W>;
var<workgroup> ri: array<u32, $W>;
var<workgroup> pick: u32;
var<workgroup> total: f32;

@compute @workgroup_size($W)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    $RZ = nwg.z >> 16u;
    let mat = wid.y * nwg.x + wid.x;
    if (mat >= $Bu) { return; }
    let ub = mat * $MNu;
    // The columns with singular values above the tolerance (none completed where it is not
    // a number: NaN results stay as they are).
    var smax = 0.0;
    for (var c = 0u; c < $Nu; c = c + 1u) {
        smax = max(smax, in1[mat * $Nu + c]);
    }
    let tol = smax * $TOL;
    var r = 0u;
    for (var c = 0u; c < $Nu; c = c + 1u) {
        if (in1[mat * $Nu + c] > tol) { r = r + 1u; }
    }
    if (!(tol >= 0.0) || smax != smax) { r = $Nu; }
    let first = max(in0[0], r);
    let end = in0[1];
    for (var j = first; j < end; j = j + 1u) {
        // The row the columns before j cover least.
        var bv = 3.0e38;
        var bi = 0u;
        for (var k = lid; k < $Mu; k = k + $Wu) {
            var sq = 0.0;
            for (var i = 0u; i < j; i = i + 1u) {
                let x = out0[ub + k * $Nu + i];
                sq = sq + x * x;
            }
            if (sq < bv) {
                bv = sq;
                bi = k;
            }
        }
        rv[lid] = bv;
        ri[lid] = bi;
        workgroupBarrier();
        if (lid == 0u) {
            var b = rv[0];
            var kb = ri[0];
            for (var t = 1u; t < $Wu; t = t + 1u) {
                if (rv[t] < b || (rv[t] == b && ri[t] < kb)) {
                    b = rv[t];
                    kb = ri[t];
                }
            }
            pick = kb;
        }
        let k = workgroupUniformLoad(&pick);
        // x = e_k less its projections on the columns before j, into column j.
        for (var row = lid; row < $Mu; row = row + $Wu) {
            var x = select(0.0, 1.0, row == k);
            for (var i = 0u; i < j; i = i + 1u) {
                x = x - out0[ub + row * $Nu + i] * out0[ub + k * $Nu + i];
            }
            out0[ub + row * $Nu + j] = x;
        }
        storageBarrier();
        workgroupBarrier();
        // Again: c = U^T x, x -= U c.
        for (var i = lid; i < j; i = i + $Wu) {
            var c = 0.0;
            for (var row = 0u; row < $Mu; row = row + 1u) {
                c = c + out0[ub + row * $Nu + i] * out0[ub + row * $Nu + j];
            }
            cc[i] = c;
        }
        workgroupBarrier();
        var part = 0.0;
        for (var row = lid; row < $Mu; row = row + $Wu) {
            var x = out0[ub + row * $Nu + j];
            for (var i = 0u; i < j; i = i + 1u) {
                x = x - out0[ub + row * $Nu + i] * cc[i];
            }
            out0[ub + row * $Nu + j] = x;
            part = part + x * x;
        }
        rv[lid] = part;
        workgroupBarrier();
        if (lid == 0u) {
            var t = 0.0;
            for (var q = 0u; q < $Wu; q = q + 1u) {
                t = t + rv[q];
            }
            total = t;
        }
        let inv = 1.0 / sqrt(workgroupUniformLoad(&total));
        for (var row = lid; row < $Mu; row = row + $Wu) {
            out0[ub + row * $Nu + j] = out0[ub + row * $Nu + j] * inv;
        }
        storageBarrier();
        workgroupBarrier();
    }
}
"#;

/// A tree reduction of `red[0..2 half]` into `red[0]` by `combine` (a WGSL expression of
/// `red[lid]` and `red[lid + w]`), every invocation of the workgroup taking part, with
/// `indent` before each line; it ends with a barrier, so `red[0]` may be read at once.
pub(super) fn tree_reduce(half: u64, combine: &str, indent: &str) -> String {
    format!(
        "{indent}for (var w = {half}u; w > 0u; w = w >> 1u) {{\n{indent}    workgroupBarrier();\n{indent}    if (lid < w) {{ red[lid] = {combine}; }}\n{indent}}}\n{indent}workgroupBarrier();\n"
    )
}

/// The combining steps of [`tree_reduce`].
pub(super) const MAX: &str = "max(red[lid], red[lid + w])";
pub(super) const SUM: &str = "red[lid] + red[lid + w]";

/// Threads of [`scale_kernel`].
const SCALE_WG: u64 = 256;

/// Loop iterations per invocation of [`scale_kernel`] on `mn` elements.
fn scale_iterations(mn: u64, shift: bool) -> u64 {
    let passes = if shift { 3 } else { 2 };
    passes * mn.div_ceil(SCALE_WG) + 2 * SCALE_WG.ilog2() as u64
}

/// The kernel before the one-sided sweeps ([`svd`]) that scales each `m x n` matrix of the
/// state (element `(i, j)` at `w_at(i, j)` from the matrix's `stride`) by a power of two `g`
/// that brings its largest magnitude into [0.5, 1), and keeps `g` at `word` (an offset).
/// Column products of entries past 1e19 overflowed, and below 1e-19 underflowed: svd values
/// went to inf, or 32% off, with no error. With `shift` (eigh) it also adds sigma = [`SHIFT`]
/// times the scaled matrix's Frobenius norm (1 for a zero matrix) to the diagonal.
#[allow(clippy::too_many_arguments)]
pub(super) fn scale_kernel(
    name: &str,
    desc: &str,
    what: &str,
    state: &Binding,
    batch: u64,
    (m, n): (u64, u64),
    stride: u64,
    word: u64,
    shift: bool,
    w_at: &dyn Fn(&str, &str) -> String,
    target: Target,
) -> Result<kernel::Kernel> {
    const WG: u64 = SCALE_WG;
    let mn = m * n;
    let we = w_at(&format!("e / {n}u"), &format!("e % {n}u"));
    let mut body = format!(
        "var<workgroup> red: array<f32, {WG}>;\n\n@compute @workgroup_size({WG})\n\
         fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n    \
         {RUNTIME_ZERO} = nwg.z >> 16u;\n    let mat = wid.y * nwg.x + wid.x;\n    if (mat >= {batch}u) {{ return; }}\n    let base = mat * {stride}u;\n    var top = 0.0;\n    for (var e = lid; e < {mn}u; e = e + {WG}u) {{\n        top = max(top, abs(out0[base + {we}]));\n    }}\n    red[lid] = top;\n{tmax}    top = red[0];\n    workgroupBarrier();\n    // g = 2^-x with top g in [0.5, 1) (x clamped to keep g normal); 1 for zero, inf, NaN.\n    let biased = i32((bitcast<u32>(top) >> 23u) & 0xffu);\n    let x = clamp(biased - 126, -125, 126);\n    let g = select(1.0, bitcast<f32>(u32(127 - x) << 23u), top > 0.0 && biased < 255);\n",
        tmax = tree_reduce(WG / 2, MAX, "    "),
    );
    if shift {
        body.push_str(&format!(
            "    var acc = 0.0;\n    for (var e = lid; e < {mn}u; e = e + {WG}u) {{\n        let a = out0[base + {we}] * g;\n        acc = acc + a * a;\n    }}\n    red[lid] = acc;\n{tsum}    let norm = sqrt(red[0]);\n    let sigma = select(1.0, {SHIFT:?} * norm, norm > 0.0);\n",
            tsum = tree_reduce(WG / 2, SUM, "    "),
        ));
    }
    body.push_str(&format!(
        "    for (var e = lid; e < {mn}u; e = e + {WG}u) {{\n        let i = e / {n}u;\n        let j = e % {n}u;\n        out0[base + {wij}] = out0[base + {wij}] * g{diag};\n    }}\n    if (lid == 0u) {{ out0[base + {word}u] = g; }}\n}}\n",
        wij = w_at("i", "j"),
        diag = if shift { " + select(0.0, sigma, i == j)" } else { "" },
    ));
    let iterations = scale_iterations(mn, shift);
    let (kname, does) = if shift {
        (
            "shift",
            format!("B = g A + sigma I, sigma = {SHIFT} |g A|_F"),
        )
    } else {
        ("scale", "g A".to_string())
    };
    workgroup_kernel(
        &format!("{name}_{kname}"),
        &format!("kernel {name}_{kname}: {does}, g a power of two bringing |A|_max into [0.5, 1), of {desc}, one workgroup per matrix\nloop iterations per invocation: at most {iterations}\nfuses: {what}"),
        Vec::new(),
        vec![state.clone()],
        &body,
        batch,
        iterations,
        false,
        target,
    )
}

/// Most vec4s per column for [`register_round`]: 16 (64 rows).
const REGISTER_VEC4S: u64 = 16;

/// Whether a one-sided Jacobi round runs one invocation per pair with both columns in
/// registers ([`register_round`]): on CPU adapters, for columns of at most [`REGISTER_VEC4S`]
/// vec4s (`WGPU_HLO_JACOBI_REGISTERS=0`: never).
fn pairs_in_registers(c: &Columns, target: Target) -> bool {
    target.cpu_adapter
        && c.l(0) <= REGISTER_VEC4S
        && c.l(1) <= REGISTER_VEC4S
        && std::env::var("WGPU_HLO_JACOBI_REGISTERS").map_or(true, |v| v != "0")
}

/// One round of one-sided Jacobi with one invocation per pair (`lid < h`): it loads its two
/// columns of `wc` once into registers (the loops unrolled), forms the three products, and
/// when the pair is not yet orthogonal rotates the registers back into `wc` and the pair's
/// columns of `vc` (when `uv`). Pairs of one round are disjoint, so one barrier per round
/// suffices where the split kernel needs four, and every column is read once instead of
/// twice. On llvmpipe, where each workgroup-memory access is a loop over the lanes and a
/// barrier switches coroutines, that is what a round costs (48x48: 19 -> 11 ms). On a GPU
/// it would leave most of the workgroup idle: the split kernel serves there.
fn register_round(s: &Shape, c: &Columns, uv: bool, tolc: &str) -> String {
    let (lw, lv) = (c.l(0), c.l(1));
    let mut out = pair_round_start(s, lw);
    for i in 0..lw {
        out.push_str(&format!(
            "                let a{i} = wc[pc + {i}u];\n                let b{i} = wc[qc + {i}u];\n                acc = acc + vec3<f32>(dot(a{i}, a{i}), dot(b{i}, b{i}), dot(a{i}, b{i}));\n"
        ));
    }
    out.push_str(&pair_rotation(tolc));
    for i in 0..lw {
        out.push_str(&format!(
            "                    wc[pc + {i}u] = rot.x * a{i} - rot.y * b{i};\n                    wc[qc + {i}u] = rot.y * a{i} + rot.x * b{i};\n"
        ));
    }
    if uv {
        out.push_str(&format!(
            "                    let pv = p * {lv}u;\n                    let qv = q * {lv}u;\n"
        ));
        for i in 0..lv {
            out.push_str(&format!(
                "                    let va{i} = vc[pv + {i}u];\n                    let vb{i} = vc[qv + {i}u];\n                    vc[pv + {i}u] = rot.x * va{i} - rot.y * vb{i};\n                    vc[qv + {i}u] = rot.y * va{i} + rot.x * vb{i};\n"
            ));
        }
    }
    out.push_str("                }\n            }\n        }\n");
    out
}

/// The start of a round with one invocation per pair (`lid < h`): its players `p`, `q`, their
/// columns' first vec4s `pc`, `qc` (`lw` vec4s a column) and the products `acc`, still zero.
fn pair_round_start(s: &Shape, lw: u64) -> String {
    format!(
        "        if (lid < {h}u) {{\n            let p = player(r, lid);\n            let q = player(r, {nm1}u - lid);\n            if (p < {n}u && q < {n}u) {{\n                let pc = p * {lw}u;\n                let qc = q * {lw}u;\n                var acc = vec3<f32>(0.0, 0.0, 0.0);\n",
        h = s.half(),
        nm1 = s.rounds(),
        n = s.n,
    )
}

/// After the products `acc` of a pair: the sweep's largest cosine, and when the pair is not
/// yet orthogonal (`tolc`) the opening of the block that rotates by `rot`.
fn pair_rotation(tolc: &str) -> String {
    format!("                let norms = sqrt(acc.x * acc.y);\n                if (norms > 0.0) {{\n                    atomicMax(&worst, bitcast<u32>(abs(acc.z) / norms));\n                }}\n                // Pairs orthogonal to working precision are skipped (threshold Jacobi).\n                if (abs(acc.z) > {tolc} * norms) {{\n                    let rot = rotation(acc.x, acc.y, acc.z);\n")
}

/// The block schedule of one-sided Jacobi for CPU adapters ([`block_sweep`]): `players`
/// blocks of one subgroup's `lanes` columns (zero columns pad `n`), two blocks a subgroup,
/// `l` vec4s a column.
#[derive(Clone, Copy)]
struct Blocks {
    lanes: u64,
    players: u64,
    l: u64,
    /// vec4s of V's rows below the matrix's in each column (0 without V).
    lv: u64,
}

/// Most vec4s of a column, V's included, for [`block_sweep`]: each lane holds two columns in
/// registers, and llvmpipe's compile time grows with them (48x48 with V: 24).
const BLOCK_VEC4S: u64 = 24;

impl Blocks {
    /// On CPU adapters with one subgroup size of 4 to 32 lanes, for columns of at most
    /// [`REGISTER_VEC4S`] vec4s ([`BLOCK_VEC4S`] with V's, when `uv`) whose padded matrix
    /// fits in workgroup memory (`WGPU_HLO_JACOBI_BLOCKS=0`: never).
    fn new(m: u64, n: u64, uv: bool, target: Target) -> Option<Blocks> {
        let lanes = u64::from(target.caps.subgroup_size);
        let l = m.div_ceil(4);
        let lv = if uv { n.div_ceil(4) } else { 0 };
        let players = n.div_ceil(lanes.max(1)).next_multiple_of(2);
        let allowed = std::env::var("WGPU_HLO_JACOBI_BLOCKS").map_or(true, |v| v != "0");
        (allowed
            && target.cpu_adapter
            && target.caps.subgroup
            && matches!(lanes, 4 | 8 | 16 | 32)
            && l <= REGISTER_VEC4S
            && l + lv <= BLOCK_VEC4S
            && players / 2 * lanes <= 256
            && 16 * players * lanes * (l + lv) + 24 * players + 32 <= target.max_workgroup_storage)
            .then_some(Blocks {
                lanes,
                players,
                l,
                lv,
            })
    }
}

/// The sweep kernel of one-sided Jacobi by blocks, for CPU adapters, and its launches.
///
/// The round-robin schedule of the other kernels gives each invocation one pair a round and
/// moves both columns through workgroup memory, where on llvmpipe every access is a loop over
/// the 8 lanes: 48 vec4 accesses per pair. Here the columns are cut into blocks of one
/// subgroup's `lanes` columns, and the blocks meet in a round-robin of their own: in a block
/// round each subgroup loads two blocks X and Y, one column of each per lane, and pairs every
/// column of X with every column of Y while Y's columns turn around the subgroup by
/// `subgroupShuffle` (a register move on llvmpipe); in the first block round of a sweep each
/// subgroup also pairs the columns within its two blocks, half the lanes each, on a round
/// robin of shuffles. Every pair meets once a sweep, and each column crosses workgroup memory
/// twice per `lanes` pairs (llvmpipe, 48x48, 8 sweeps: 7.9 -> 1.3 ms).
#[allow(clippy::too_many_arguments)]
fn block_sweep(
    name: &str,
    desc: &str,
    what: &str,
    s: &Shape,
    b: Blocks,
    state: &Binding,
    stride: u64,
    status: u64,
    tolc: &str,
    target: Target,
) -> Result<(Vec<Launch>, kernel::Kernel)> {
    let (lanes, l, m, n) = (b.lanes, b.l, s.m, s.n);
    // vec4s a column: the matrix's, then V's.
    let lc = l + b.lv;
    let half = lanes / 2;
    let bs = Shape {
        batch: s.batch,
        m,
        n,
        players: b.players,
        wg: b.players / 2 * lanes,
    };
    let (wg, last) = (bs.wg, bs.players - 1);
    let total = b.players * lanes * lc;
    let fixed = 2 + 2 * total.div_ceil(wg);
    let (launches, iterations) = sweep_launches(&bs, 2 * lanes + 1, 0, fixed, budget(target))?;
    let mut body = sweep_prelude(
        &bs,
        &format!("var<workgroup> wc: array<vec4<f32>, {total}>;\n"),
        ", @builtin(subgroup_invocation_id) c: u32, @builtin(subgroup_id) sg: u32",
    );
    body.push_str(&sweep_start(stride, status, Status::Scalars));
    // The state is row-major (the matrix, then V); `wc` holds it by columns of `lc` vec4s,
    // each the matrix's rows then V's, and then the zero columns. Element e of `wc`: column
    // `p`, rows from `i` of the matrix (`k < l`) or of V.
    let rows = |load: bool, ind: &str| {
        // Rows `i..i + 4` of the part at `off` (f32s into the state) with `count` rows.
        let part = |off: u64, count: u64, first: &str| {
            let mut out = format!("{ind}    let i = {first};\n");
            for t in 0..4 {
                let at = format!("out0[base + {off}u + (i + {t}u) * {n}u + p]");
                let stmt = if load {
                    format!("x[{t}] = {at};")
                } else {
                    format!("{at} = x[{t}];")
                };
                out.push_str(&if count % 4 == 0 || t == 0 {
                    format!("{ind}    {stmt}\n")
                } else {
                    format!("{ind}    if (i + {t}u < {count}u) {{ {stmt} }}\n")
                });
            }
            out
        };
        let matrix = part(0, m, "k * 4u");
        if b.lv == 0 {
            matrix
        } else {
            let v = part(m * n, n, &format!("(k - {l}u) * 4u"));
            format!("{ind}if (k < {l}u) {{\n{matrix}{ind}}} else {{\n{v}{ind}}}\n")
        }
    };
    body.push_str(&format!(
        "    for (var e = lid; e < {total}u; e = e + {wg}u) {{\n        let p = e / {lc}u;\n        let k = e % {lc}u;\n        var x = vec4<f32>();\n        if (p < {n}u) {{\n{}        }}\n        wc[e] = x;\n    }}\n    workgroupBarrier();\n",
        rows(true, "            ")
    ));
    // Lane c of the within-block round robin: the half of the subgroup it serves (X: the low
    // lanes, Y: the high), its seat `cc` in that half and the lanes its slots come from.
    body.push_str(&format!(
        "    let lo = c < {half}u;\n    let cc = c % {half}u;\n    let h0 = c - cc;\n    let src_a = select(h0 + cc - 1u, h0, cc == 0u);\n    let src_b = select(c + 1u, c, cc == {hm1}u);\n    let next = (c + 1u) % {lanes}u;\n    var wl = 0.0;\n",
        hm1 = half - 1
    ));
    let decl = |v: &str| {
        (0..lc)
            .map(|i| format!("    var {v}{i}: vec4<f32>;\n"))
            .collect::<String>()
    };
    body.push_str(&decl("a"));
    body.push_str(&decl("b"));
    // The pair (a, b) of this lane: its products, cosine and rotation (identity when
    // orthogonal to working precision).
    let pair = |ind: &str| {
        let mut o = format!("{ind}{{\n{ind}    var acc = vec3<f32>();\n");
        for i in 0..l {
            o.push_str(&format!(
                "{ind}    acc = acc + vec3<f32>(dot(a{i}, a{i}), dot(b{i}, b{i}), dot(a{i}, b{i}));\n"
            ));
        }
        o.push_str(&format!(
            "{ind}    let norms = sqrt(acc.x * acc.y);\n{ind}    wl = max(wl, select(0.0, abs(acc.z) / norms, norms > 0.0));\n{ind}    let rot = select(vec2<f32>(1.0, 0.0), rotation(acc.x, acc.y, acc.z), abs(acc.z) > {tolc} * norms);\n"
        ));
        for i in 0..lc {
            o.push_str(&format!(
                "{ind}    let t{i} = a{i};\n{ind}    a{i} = rot.x * t{i} - rot.y * b{i};\n{ind}    b{i} = rot.y * t{i} + rot.x * b{i};\n"
            ));
        }
        o.push_str(&format!("{ind}}}\n"));
        o
    };
    // Both slots at once from other lanes: `new_a`, `new_b` are WGSL expressions of `{a}` and
    // `{b}` (this lane's vec4 i of each slot).
    let shuffle = |ind: &str, new_a: &str, new_b: &str| {
        let inner = format!("{ind}    ");
        let stmts = (0..lc)
            .map(|i| {
                let (ai, bi) = (format!("a{i}"), format!("b{i}"));
                let f = |e: &str| e.replace("{a}", &ai).replace("{b}", &bi);
                format!(
                    "{inner}let na{i} = {};\n{inner}let nb{i} = {};\n{inner}a{i} = na{i};\n{inner}b{i} = nb{i};\n",
                    f(new_a),
                    f(new_b)
                )
            })
            .collect::<String>();
        format!("{ind}{{\n{stmts}{ind}}}\n")
    };
    let sh = |v: &str, lane: &str| format!("subgroupShuffle({v}, ({lane}) % {lanes}u)");
    let mut round = format!(
        "    for (var g = c0.y; g < c0.z; g = g + 1u) {{\n        let r = g % {last}u;\n        let xb = player(r, sg) * {bl}u + c * {lc}u;\n        let yb = player(r, {last}u - sg) * {bl}u + c * {lc}u;\n",
        bl = lanes * lc
    );
    for i in 0..lc {
        round.push_str(&format!(
            "        a{i} = wc[xb + {i}u];\n        b{i} = wc[yb + {i}u];\n"
        ));
    }
    // Within the blocks, at the first block round of a sweep (each block is in one subgroup
    // then): the low lanes hold X's columns c and lanes - 1 - c, the high ones Y's, and each
    // half runs the circle method on its `lanes` columns (seat cc in slot a, its opponent in b).
    round.push_str("        if (r == 0u) {\n");
    round.push_str(&shuffle(
        "            ",
        &format!("select({}, {{a}}, lo)", sh("{b}", "cc")),
        &format!(
            "select({}, {}, lo)",
            sh("{b}", &format!("{} - cc", lanes - 1)),
            sh("{a}", &format!("{} - cc", lanes - 1))
        ),
    ));
    round.push_str(&format!(
        "            for (var t = 0u; t < {}u; t = t + 1u) {{\n",
        lanes - 1
    ));
    round.push_str(&pair("                "));
    round.push_str(&shuffle(
        "                ",
        &format!(
            "select(select({}, {}, cc == 1u), {{a}}, cc == 0u)",
            sh("{a}", "src_a"),
            sh("{b}", "h0")
        ),
        &format!("select({}, {{a}}, cc == {}u)", sh("{b}", "src_b"), half - 1),
    ));
    round.push_str("            }\n");
    round.push_str(&shuffle(
        "            ",
        &format!(
            "select({}, {{a}}, lo)",
            sh("{b}", &format!("{} - c", lanes - 1))
        ),
        &format!(
            "select({}, {}, lo)",
            sh("{b}", &format!("{} - c", half + lanes - 1)),
            sh("{a}", &format!("{half}u + c"))
        ),
    ));
    round.push_str("        }\n");
    // Across the blocks: X's column c meets Y's columns c, c + 1, ... as they turn.
    round.push_str(&format!(
        "        for (var t = 0u; t < {lanes}u; t = t + 1u) {{\n"
    ));
    round.push_str(&pair("            "));
    for i in 0..lc {
        round.push_str(&format!(
            "            b{i} = subgroupShuffle(b{i}, next);\n"
        ));
    }
    round.push_str("        }\n");
    for i in 0..lc {
        round.push_str(&format!(
            "        wc[xb + {i}u] = a{i};\n        wc[yb + {i}u] = b{i};\n"
        ));
    }
    round.push_str("        atomicMax(&worst, bitcast<u32>(wl));\n        wl = 0.0;\n        workgroupBarrier();\n");
    body.push_str(&round);
    let store = format!(
        "    for (var e = lid; e < {nl}u; e = e + {wg}u) {{\n        let p = e / {lc}u;\n        let k = e % {lc}u;\n        let x = wc[e];\n{}    }}\n",
        rows(false, "        "),
        nl = n * lc
    );
    body.push_str(&round_end(&bs, "", tolc, &store, Status::Scalars));
    let k = workgroup_kernel(
        &format!("{name}_sweep"),
        &format!("kernel {name}_sweep: block rounds (parameters: first and end) of one-sided Jacobi on {desc}, blocks of {lanes} columns, one workgroup per matrix\nloop iterations per invocation: at most {iterations}\nfuses: {what}"),
        vec![params()],
        vec![state.clone()],
        &body,
        s.batch,
        iterations,
        false,
        target,
    )?;
    Ok((launches, k))
}

/// Whether a one-sided Jacobi round on columns in the state buffer runs one invocation per
/// pair ([`stream_round`]): on CPU adapters (`WGPU_HLO_JACOBI_STREAM=0`: never).
fn pairs_streamed(target: Target) -> bool {
    target.cpu_adapter && std::env::var("WGPU_HLO_JACOBI_STREAM").map_or(true, |v| v != "0")
}

/// One round of one-sided Jacobi on columns in the state buffer ([`Columns::in_state`]) with
/// one invocation per pair (`lid < h`): it streams its two columns once for the three
/// products and, when the pair is not yet orthogonal, once more to rotate them and its
/// columns of V (when `uv`). Pairs of one round are disjoint, so one barrier per round
/// suffices, and no invocation reloads the pair table or its rotation per element as the
/// split round's row tasks do. For CPU adapters only: on a GPU the split round's lanes read
/// consecutive vec4s of one column, these read one column each.
fn stream_round(s: &Shape, c: &Columns, uv: bool, tolc: &str) -> String {
    let (lw, lv) = (c.l(0), c.l(1));
    let mut out = pair_round_start(s, lw);
    out.push_str(&format!(
        "                for (var i = 0u; i < {lw}u; i = i + 1u) {{\n                    let a = {a};\n                    let b = {b};\n                    acc = acc + vec3<f32>(dot(a, a), dot(b, b), dot(a, b));\n                }}\n",
        a = c.at(0, "pc + i"),
        b = c.at(0, "qc + i"),
    ));
    out.push_str(&pair_rotation(tolc));
    out.push_str(&format!(
        "                    for (var i = 0u; i < {lw}u; i = i + 1u) {{\n{rw}                    }}\n",
        rw = rotate(&c.at(0, "pc + i"), &c.at(0, "qc + i"), 0).replace("\n    ", "\n        "),
    ));
    if uv {
        out.push_str(&format!(
            "                    let pv = p * {lv}u;\n                    let qv = q * {lv}u;\n                    for (var i = 0u; i < {lv}u; i = i + 1u) {{\n{rv}                    }}\n",
            rv = rotate(&c.at(1, "pv + i"), &c.at(1, "qv + i"), 0).replace("\n    ", "\n        "),
        ));
    }
    out.push_str("                }\n            }\n        }\n");
    out
}

/// The statements rotating the pair of elements `a_at`, `b_at` (WGSL places; `{l}` in them is
/// replaced by `l`) by the pair's `rot`.
fn rotate(a_at: &str, b_at: &str, l: u64) -> String {
    let (a_at, b_at) = (
        a_at.replace("{l}", &l.to_string()),
        b_at.replace("{l}", &l.to_string()),
    );
    format!(
        "                    let a = {a_at};\n                    let b = {b_at};\n                    {a_at} = rot.x * a - rot.y * b;\n                    {b_at} = rot.y * a + rot.x * b;\n"
    )
}

/// The one-sided Jacobi state of one matrix by columns, 4 rows to a vec4 (`wc`: the `m x n`
/// matrix, `vc`: the `n x n` V): a rotation of columns p and q and their products then read
/// and write whole vec4s, a quarter of the accesses of a row-major copy (on llvmpipe every
/// memory access of an invocation costs about the same whatever its width). Rows past `m`
/// (or `n`) are zeros, which rotations keep zero.
///
/// In workgroup memory when it fits: the state in the storage buffer stays row-major and the
/// copies in and out transpose. Otherwise (`global`) the columns live in the state buffer
/// itself, which the sweep kernel binds as `array<vec4<f32>>` (`WGPU_HLO_JACOBI_COLUMNS=0`:
/// neither).
struct Columns {
    /// Columns of every array.
    n: u64,
    /// `(array, vec4s per column, rows, offset)`: the offset of the row-major copy in the
    /// state (`f32`s), or when `global` of the array itself (vec4s).
    arrays: Vec<(&'static str, u64, u64, u64)>,
    global: bool,
}

impl Columns {
    /// `arrays`: `(name, rows, offset)`; `None` when they and `other_bytes` do not fit in the
    /// adapter's workgroup memory.
    fn new(
        n: u64,
        arrays: &[(&'static str, u64, u64)],
        other_bytes: u64,
        target: Target,
    ) -> Option<Columns> {
        let arrays: Vec<_> = arrays
            .iter()
            .map(|&(name, rows, off)| (name, rows.div_ceil(4), rows, off))
            .collect();
        let allowed =
            std::env::var("WGPU_HLO_JACOBI_LOCAL").map_or(true, |v| v != "0") && columns_allowed();
        let c = Columns {
            n,
            arrays,
            global: false,
        };
        (allowed && c.bytes() + other_bytes <= target.max_workgroup_storage).then_some(c)
    }

    /// The arrays `(name, rows)` one after the other in the state buffer, from vec4 0.
    fn in_state(n: u64, arrays: &[(&'static str, u64)]) -> Option<Columns> {
        let mut off = 0;
        let mut out = Vec::new();
        for &(name, rows) in arrays {
            let l = rows.div_ceil(4);
            out.push((name, l, rows, off));
            off += l * n;
        }
        columns_allowed().then_some(Columns {
            n,
            arrays: out,
            global: true,
        })
    }

    /// vec4s of the arrays in the state (`global`).
    fn state_vec4s(&self) -> u64 {
        self.arrays.iter().map(|a| a.1 * self.n).sum()
    }

    /// Element `index` (a WGSL expression, in vec4s) of array `i`.
    fn at(&self, i: usize, index: &str) -> String {
        match self.arrays.get(i) {
            Some(&(_, _, _, off)) if self.global => format!("out0[base + {off}u + {index}]"),
            Some(&(name, ..)) => format!("{name}[{index}]"),
            None => format!("out0[{index}]"),
        }
    }

    /// Bytes of workgroup memory.
    fn bytes(&self) -> u64 {
        if self.global {
            return 0;
        }
        self.arrays.iter().map(|a| 16 * a.1 * self.n).sum()
    }

    /// vec4s per column of array `i`.
    fn l(&self, i: usize) -> u64 {
        self.arrays.get(i).map_or(0, |a| a.1)
    }

    fn decls(&self) -> String {
        if self.global {
            return String::new();
        }
        self.arrays
            .iter()
            .map(|(name, l, _, _)| {
                format!("var<workgroup> {name}: array<vec4<f32>, {}>;\n", l * self.n)
            })
            .collect()
    }

    /// The loops copying the state in (`load`) or out, one vec4 per task.
    fn copies(&self, wg: u64, load: bool) -> String {
        let n = self.n;
        let mut out = String::new();
        if self.global {
            return out;
        }
        for &(name, l, rows, off) in &self.arrays {
            let mut lanes = String::new();
            for (t, c) in ["x", "y", "z", "w"].iter().enumerate() {
                let at = format!("out0[base + {off}u + (i + {t}u) * {n}u + p]");
                let stmt = if load {
                    format!("x.{c} = {at};")
                } else {
                    format!("{at} = x.{c};")
                };
                // Only the last vec4 of a column holds padding; its first row is real.
                if rows % 4 == 0 || t == 0 {
                    lanes.push_str(&format!("        {stmt}\n"));
                } else {
                    lanes.push_str(&format!("        if (i + {t}u < {rows}u) {{ {stmt} }}\n"));
                }
            }
            let head = format!(
                "    for (var e = lid; e < {total}u; e = e + {wg}u) {{\n        let p = e / {l}u;\n        let i = (e % {l}u) * 4u;\n",
                total = l * n
            );
            if load {
                out.push_str(&format!(
                    "{head}        var x = vec4<f32>();\n{lanes}        {name}[e] = x;\n    }}\n"
                ));
            } else {
                out.push_str(&format!(
                    "{head}        let x = {name}[e];\n{lanes}    }}\n"
                ));
            }
        }
        if load {
            out.push_str("    workgroupBarrier();\n");
        }
        out
    }

    /// Loop iterations of loading and storing.
    fn iterations(&self, wg: u64) -> u64 {
        if self.global {
            return 0;
        }
        self.arrays
            .iter()
            .map(|(_, l, _, _)| 2 * (l * self.n).div_ceil(wg))
            .sum()
    }
}

/// Whether the Jacobi states may be kept by columns (`WGPU_HLO_JACOBI_COLUMNS=0`: never).
fn columns_allowed() -> bool {
    std::env::var("WGPU_HLO_JACOBI_COLUMNS").map_or(true, |v| v != "0")
}

/// A kernel of `groups` workgroups whose module body (entry point included) is `body`; with
/// `vec4_state` its first output (f32 or f64) is bound as an array of vec4s.
#[allow(clippy::too_many_arguments)]
pub(super) fn workgroup_kernel(
    name: &str,
    comment: &str,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    body: &str,
    groups: u64,
    iterations: u64,
    vec4_state: bool,
    target: Target,
) -> Result<kernel::Kernel> {
    let mut wgsl = kernel::module_text(comment, &inputs, &outputs, &Default::default(), body)?;
    if vec4_state {
        let Some(scalar) = ["f32", "f64"]
            .into_iter()
            .find(|t| wgsl.contains(&format!("var<storage, read_write> out0: array<{t}>;")))
        else {
            return Err(Error::internal(format!(
                "{name}: no f32 or f64 `out0` to bind as vec4s"
            )));
        };
        wgsl = wgsl.replacen(
            &format!("var<storage, read_write> out0: array<{scalar}>;"),
            &format!("var<storage, read_write> out0: array<vec4<{scalar}>>;"),
            1,
        );
    }
    kernel::validate(name, &wgsl, target.caps)?;
    Ok(kernel::Kernel {
        name: name.to_string(),
        wgsl,
        inputs,
        outputs,
        workgroups: kernel::grid(groups, target.max_workgroups)?,
        iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}
