//! `fft`. Most transforms run axis by axis in passes ([`plan`]): mixed-radix Stockham passes
//! with the small DFTs in registers, and Bluestein's convolution for lengths with a large
//! prime factor. Tiny ones ([`DIRECT_WORK`]) run as a direct DFT in one kernel ([`emit`]):
//! one thread per result element sums over every position of the transformed (innermost)
//! dimensions. Twiddles come from `sinpi/cospi` of an exactly reduced phase
//! `((k·n) mod N) / N` (or constants rounded once from f64), so their error does not grow
//! with N. `IRFFT` rebuilds the full spectrum from the half it receives (Hermitian symmetry)
//! and keeps the real part.

use std::collections::HashMap;

use super::per_element::build;
use crate::codegen::dtype::{self, Compute};
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::attr::FftType;
use crate::ir::{Function, Op, Operation, ValueId};

/// Emits the kernel for an `fft`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::Fft {
        fft_type,
        fft_length,
    } = &op.op
    else {
        return Err(Error::internal("fft emitter on another op"));
    };
    let ([x], [result]) = (&op.operands[..], &op.results[..]) else {
        return Err(Error::invalid("fft takes one operand and gives one result"));
    };
    let fused = |_: ValueId| false;
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    let out = Binding {
        value: *result,
        ty: em.ty(*result)?.clone(),
    };
    let xt = em.ty(*x)?.clone();
    let xc = em.compute(xt.dtype)?;
    let rc = em.compute(out.ty.dtype)?;
    // The complex type of the arithmetic.
    let cc = match (xc, rc) {
        (Compute::C64, _) | (_, Compute::C64) => Compute::C64,
        (Compute::C128, _) | (_, Compute::C128) => Compute::C128,
        _ => {
            return Err(Error::invalid(format!(
                "fft from {} to {}",
                xt.dtype, out.ty.dtype
            )))
        }
    };
    let real = if cc == Compute::C64 { "f32" } else { "f64" };
    let sfx = cc.suffix();
    let rdims = out.ty.dims();
    let xdims = xt.dims();
    let rank = rdims.len();
    let nf = fft_length.len();
    if nf == 0 || nf > rank || fft_length.iter().any(|&n| n < 0) {
        return Err(Error::invalid(format!(
            "fft_length {fft_length:?} on a rank-{rank} result"
        )));
    }
    let lens: Vec<usize> = fft_length.iter().map(|&n| n as usize).collect();
    let positions: usize = lens.iter().product();
    let first = rank - nf;
    let inverse = matches!(fft_type, FftType::Ifft | FftType::Irfft);
    em.needs.insert(format!("wh_cmul_{sfx}"));
    em.needs.insert(format!("wh_sinpi_cospi_{}", sfx));
    let comment = format!(
        "kernel {name}: fft {fft_type:?} of lengths {fft_length:?}, {positions} terms per element\nfuses: stablehlo.fft"
    );
    build(name, em, vec![out], "", &comment, target, |em, lin, e| {
        let ri = em.multi(&Index::Linear(lin.to_string()), &rdims);
        let acc = format!("acc{e}");
        em.line(&format!(
            "var {acc}: vec2<{real}> = vec2<{real}>(0.0, 0.0);"
        ));
        if positions > 0 {
            em.open_loop(
                &format!("for (var j: u32 = 0u; j < {positions}u; j = j + 1u)"),
                positions as u64,
            );
            let jm = em.multi(&Index::Linear("j".into()), &lens);
            em.line(&format!("var t: {real} = 0.0;"));
            for (d, &n) in lens.iter().enumerate() {
                em.line(&format!(
                    "t = t + {real}(({} * {}) % {n}u) / {real}({n});",
                    ri[first + d],
                    jm[d]
                ));
            }
            em.line(&format!("let sc = wh_sinpi_cospi_{}(2.0 * t);", sfx));
            let sign = if inverse { "" } else { "-" };
            em.line(&format!("let tw = vec2<{real}>(sc.y, {sign}sc.x);"));
            em.line(&format!("var xv: vec2<{real}>;"));
            let direct: Vec<String> = (0..rank)
                .map(|d| {
                    if d < first {
                        ri[d].clone()
                    } else {
                        jm[d - first].clone()
                    }
                })
                .collect();
            let load = |em: &mut ExprEmitter, idx: Vec<String>| -> Result<String> {
                let v = em.value(*x, &Index::Multi(idx))?;
                Ok(if xc.is_complex() {
                    v
                } else {
                    format!("vec2<{real}>({real}({v}), 0.0)")
                })
            };
            if *fft_type == FftType::Irfft {
                // Only the first n/2 + 1 entries of the last dimension are stored.
                let last = lens[nf - 1];
                let stored = xdims.get(rank - 1).copied().unwrap_or(0);
                em.open(&format!("if ({} < {stored}u)", jm[nf - 1]));
                let v = load(em, direct)?;
                em.line(&format!("xv = {v};"));
                em.close(Some("else"));
                let mirrored: Vec<String> = (0..rank)
                    .map(|d| {
                        if d < first {
                            ri[d].clone()
                        } else {
                            let n = lens[d - first];
                            format!("(({n}u - {}) % {n}u)", jm[d - first])
                        }
                    })
                    .collect();
                let v = load(em, mirrored)?;
                em.line(&format!("xv = {v} * vec2<{real}>(1.0, -1.0);"));
                em.close(None);
                let _ = last;
            } else {
                let v = load(em, direct)?;
                em.line(&format!("xv = {v};"));
            }
            em.line(&format!("{acc} = {acc} + wh_cmul_{sfx}(xv, tw);"));
            em.close(None);
            if inverse {
                em.line(&format!("{acc} = {acc} / {real}({positions});"));
            }
        }
        Ok(vec![if *fft_type == FftType::Irfft {
            format!("{acc}.x")
        } else {
            acc
        }])
    })
}

/// Transforms whose direct sum (result elements times terms per element) is at most this run
/// as one direct kernel ([`emit`]): one launch, where passes take one or more per axis. The
/// rest run axis by axis in passes ([`plan`]). The direct kernel evaluates a sine and cosine
/// per term, so 8192 rows of 31 points took 16 ms direct and 1.5 ms in one pass of radix 31
/// on lavapipe.
pub const DIRECT_WORK: usize = 1 << 16;

/// The largest radix a pass computes in registers: one thread loads `r` values, applies
/// their twiddles, runs a straight-line `r`-point DFT and stores `r` results. Each pass reads
/// and writes every element once, so fewer, larger passes win while the DFT stays in
/// registers: 32 against 16 on lavapipe (GPU time of the passes, dumped kernel times): `fft2`
/// of 1024² 88 -> 60 ms (4 passes instead of 6), `irfft2(rfft2)` of 8x512² 167 -> 120 ms (8
/// instead of 12). The larger straight-line DFTs cost the driver about 0.5 s more to compile
/// the first call of a 1024² or 2^20-point transform (Mesa's shader cache off).
pub const MAX_RADIX: usize = 32;

/// The radices of the passes along an axis of length `n` (their product is `n`): prime
/// factors up to [`MAX_RADIX`] packed largest first into the first product they fit
/// (2^20 -> 32·32·32·32, 1000 -> 25·20·2); each larger prime is a radix of its own.
pub fn radices(n: usize) -> Vec<usize> {
    let mut primes = Vec::new();
    let mut m = n;
    let mut p = 2;
    while p * p <= m {
        while m % p == 0 {
            primes.push(p);
            m /= p;
        }
        p += 1;
    }
    if m > 1 {
        primes.push(m);
    }
    primes.sort_unstable_by(|a, b| b.cmp(a));
    let mut bins: Vec<usize> = Vec::new();
    for p in primes {
        let fits = (p <= MAX_RADIX)
            .then(|| {
                bins.iter_mut()
                    .find(|b| **b <= MAX_RADIX && **b * p <= MAX_RADIX)
            })
            .flatten();
        match fits {
            Some(b) => *b *= p,
            None => bins.push(p),
        }
    }
    if bins.is_empty() {
        bins.push(1);
    }
    bins
}

/// What one pass computes.
#[derive(Clone, Copy)]
enum Stage {
    /// A Stockham pass along a line of `n`: radix `r` after passes whose radices multiply to
    /// `ns`. With `m = ns·r`, output position `q = (j div ns)·m + (j mod ns) + k·ns`
    /// (`j < n/r`, `k < r`) is `Σ_{s<r} in[j + s·n/r] · W_m^{s·(q mod m)}`: the twiddle
    /// `W_m^{s·(j mod ns)}` times an `r`-point DFT. One thread per `r` outputs, the DFT in
    /// registers (`r <= MAX_RADIX`). The last pass of a line has `m = n` and leaves the
    /// spectrum in natural order; no pass needs a bit reversal.
    Butterfly { n: usize, r: usize, ns: usize },
    /// The same pass with one thread per output summing `r` terms (prime radices over
    /// [`MAX_PRIME_RADIX`] where Bluestein's algorithm is not used).
    Sum { n: usize, r: usize, ns: usize },
    /// The convolution filter of Bluestein's algorithm, one line of `m`: `conj(w_q)` at
    /// `q < n` and at `m - q`, with the chirp `w_q = W_{2n}^{q²}`.
    Filter { n: usize, m: usize },
}

/// What the first pass of a Stockham chain reads (Bluestein's steps folded into it).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pre {
    /// The source as it is.
    Plain,
    /// `x[q] · w_q` for `q < n`, zero up to the line's end (the source lines are `n` long).
    Chirp { n: usize },
    /// `x[q] · in1[q]`: the source times the filter's spectrum.
    Times,
}

/// Bluestein's steps folded into the first and last passes of a Stockham chain.
#[derive(Clone, Copy, Debug)]
struct Fold {
    pre: Pre,
    /// The filter's spectrum, read by [`Pre::Times`].
    spectrum: Option<usize>,
    /// The last pass multiplies each output `q` by `w_q` (Bluestein's last step).
    post_chirp: Option<usize>,
    /// The sign of the chirp (the transform's direction): `exp(+...)` when set.
    chirp_inverse: bool,
}

impl Fold {
    const NONE: Fold = Fold {
        pre: Pre::Plain,
        spectrum: None,
        post_chirp: None,
        chirp_inverse: false,
    };
}

/// One kernel of the plan.
struct Pass {
    stage: Stage,
    /// The sign of its exponentials: `exp(+...)` when set.
    inverse: bool,
    /// Sources (`None`: the operand; `src2` only for [`Pre::Times`]) and output (`None`: the
    /// op's result).
    src: Option<usize>,
    src2: Option<usize>,
    dst: Option<usize>,
    outer: usize,
    inner: usize,
    line_in: usize,
    line_out: usize,
    /// Extend the source by conjugate symmetry to this length (IRFFT's last axis).
    hermitian: Option<usize>,
    /// Divide by this at the end (inverse transforms).
    scale: Option<usize>,
    /// What the pass reads, and whether its outputs take the chirp.
    pre: Pre,
    post_chirp: Option<usize>,
    chirp_inverse: bool,
}

/// Prime radices up to this run in registers too (an odd prime's DFT unrolled in about
/// `p²/2` multiplications: 8192 rows of 61 points in 5 ms on lavapipe, compiled in under a
/// second; 127 took 5 s to compile and 251 45 s).
pub const MAX_PRIME_RADIX: usize = 64;

/// Whether an axis whose length has a prime factor over [`MAX_PRIME_RADIX`] takes
/// Bluestein's algorithm (one convolution by FFTs of a smooth length of at least `2n - 1`;
/// 64 rows of 1009 points: 110 ms summed, 7 ms by Bluestein on lavapipe) rather than a pass
/// summing that many terms per element. `WGPU_HLO_FFT_BLUESTEIN=0` turns it off (for
/// comparisons and to test the summing pass).
fn bluestein_enabled() -> bool {
    std::env::var("WGPU_HLO_FFT_BLUESTEIN").map_or(true, |v| v != "0")
}

/// Bluestein is used for lengths below this: its chirp phase `q² mod 2n` is computed in u32
/// by [`CHIRP_SQMOD`] and converted to a float exactly.
const BLUESTEIN_BELOW: usize = 1 << 23;

/// The smallest `2^a·3^b·5^c` of at least `n`.
fn smooth_at_least(n: usize) -> usize {
    let mut best = n.next_power_of_two();
    let mut p5 = 1;
    while p5 < best {
        let mut p35 = p5;
        while p35 < best {
            let mut v = p35;
            while v < n {
                v *= 2;
            }
            best = best.min(v);
            p35 *= 3;
        }
        p5 *= 5;
    }
    best
}

/// `q² mod 2n` for `q < n < 2^23` in u32 arithmetic: Horner over 4-bit digits of `q`, so no
/// partial value exceeds 2^29.
const CHIRP_SQMOD: &str = "fn k_sqmod(q: u32, m: u32) -> u32 {
    var r: u32 = 0u;
    for (var d: i32 = 20; d >= 0; d = d - 4) {
        r = (r * 16u + q * ((q >> u32(d)) & 15u)) % m;
    }
    return r;
}

";

/// The planner's state: temporaries and the passes so far.
struct Planner {
    cdt: crate::ir::ElementType,
    temps: Vec<crate::ir::TensorType>,
    passes: Vec<Pass>,
}

/// The common part of a pass: where it reads and writes, and its line geometry.
#[derive(Clone, Copy)]
struct Lines {
    src: Option<usize>,
    outer: usize,
    inner: usize,
    line_in: usize,
}

impl Planner {
    /// A temporary of `dims`: one of the same type that is not in `live`, else a new one.
    fn temp(&mut self, dims: &[usize], live: &[Option<usize>]) -> usize {
        let ty = crate::ir::TensorType::new(dims.iter().map(|&d| d as i64).collect(), self.cdt);
        match (0..self.temps.len()).find(|&t| self.temps[t] == ty && !live.contains(&Some(t))) {
            Some(t) => t,
            None => {
                self.temps.push(ty);
                self.temps.len() - 1
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        stage: Stage,
        inverse: bool,
        at: Lines,
        dst: Option<usize>,
        line_out: usize,
        hermitian: Option<usize>,
        scale: Option<usize>,
    ) {
        self.passes.push(Pass {
            stage,
            inverse,
            src: at.src,
            src2: None,
            dst,
            outer: at.outer,
            inner: at.inner,
            line_in: at.line_in,
            line_out,
            hermitian,
            scale,
            pre: Pre::Plain,
            post_chirp: None,
            chirp_inverse: false,
        });
    }

    /// The Stockham passes of a length-`n` transform of the lines `at` (their axis is `axis`
    /// of `dims`). The last pass keeps `line_out` outputs, divides by `scale`, and writes the
    /// op's result when `to_result`; temporaries avoid `live`. Returns the last output.
    #[allow(clippy::too_many_arguments)]
    fn stockham(
        &mut self,
        dims: &[usize],
        axis: usize,
        n: usize,
        mut at: Lines,
        line_out: usize,
        hermitian: Option<usize>,
        inverse: bool,
        scale: Option<usize>,
        to_result: bool,
        live: &[Option<usize>],
        fold: Fold,
    ) -> Option<usize> {
        let rs = radices(n);
        let mut ns = 1;
        for (si, &r) in rs.iter().enumerate() {
            let last = si + 1 == rs.len();
            let lout = if last { line_out } else { n };
            let dst = if last && to_result {
                None
            } else {
                let mut d = dims.to_vec();
                d[axis] = lout;
                let mut avoid = live.to_vec();
                avoid.push(at.src);
                Some(self.temp(&d, &avoid))
            };
            let stage = if r <= MAX_RADIX.max(MAX_PRIME_RADIX) {
                Stage::Butterfly { n, r, ns }
            } else {
                Stage::Sum { n, r, ns }
            };
            let h = if si == 0 { hermitian } else { None };
            self.push(stage, inverse, at, dst, lout, h, scale.filter(|_| last));
            if let Some(p) = self.passes.last_mut() {
                if si == 0 {
                    p.pre = fold.pre;
                    p.src2 = fold.spectrum;
                }
                if last {
                    p.post_chirp = fold.post_chirp;
                }
                p.chirp_inverse = fold.chirp_inverse;
            }
            at.src = dst;
            at.line_in = lout;
            ns *= r;
        }
        at.src
    }

    /// Bluestein's algorithm for the lines `at` of length `n`: chirp, a circular convolution
    /// of length `m` by forward and inverse FFTs, chirp. The chirps and the product with the
    /// filter's spectrum are folded into the first and last passes of the two transforms
    /// (10 kernels -> 7 for two radices, three passes over the padded lines fewer).
    #[allow(clippy::too_many_arguments)]
    fn bluestein(
        &mut self,
        dims: &[usize],
        axis: usize,
        n: usize,
        at: Lines,
        line_out: usize,
        hermitian: Option<usize>,
        inverse: bool,
        scale: Option<usize>,
        to_result: bool,
    ) -> Option<usize> {
        let m = smooth_at_least(2 * n - 1);
        // The filter's spectrum: one line of m.
        let line = Lines {
            src: None,
            outer: 1,
            inner: 1,
            line_in: m,
        };
        let b0 = self.temp(&[m], &[at.src]);
        self.push(
            Stage::Filter { n, m },
            inverse,
            line,
            Some(b0),
            m,
            None,
            None,
        );
        if let Some(p) = self.passes.last_mut() {
            p.chirp_inverse = inverse;
        }
        let line = Lines {
            src: Some(b0),
            ..line
        };
        let b = self.stockham(
            &[m],
            0,
            m,
            line,
            m,
            None,
            false,
            None,
            false,
            &[at.src],
            Fold::NONE,
        );
        // The chirped lines, padded to m (read so by the first pass), and their spectrum.
        let mut padded = dims.to_vec();
        padded[axis] = m;
        let chirped = Fold {
            pre: Pre::Chirp { n },
            chirp_inverse: inverse,
            ..Fold::NONE
        };
        let a = self.stockham(
            &padded,
            axis,
            m,
            at,
            m,
            hermitian,
            false,
            None,
            false,
            &[b],
            chirped,
        );
        // Times the filter's spectrum (read by the first inverse pass), back, and chirped
        // again by the last.
        let lines = Lines {
            src: a,
            line_in: m,
            ..at
        };
        let back = Fold {
            pre: Pre::Times,
            spectrum: b,
            post_chirp: Some(n),
            chirp_inverse: inverse,
        };
        let scale = Some(m * scale.unwrap_or(1));
        self.stockham(
            &padded,
            axis,
            m,
            lines,
            line_out,
            None,
            true,
            scale,
            to_result,
            &[b],
            back,
        )
    }
}

/// `x · W_m^e` for a constant exponent, `W_m = exp(∓2πi/m)` (`-` forward): the quarter turns
/// are swaps and negations, the rest a multiplication by literals rounded once from f64.
fn const_twiddle(x: &str, e: usize, m: usize, inverse: bool, real: &str) -> String {
    let e = e % m;
    let lit = |v: f64| {
        if real == "f64" {
            dtype::f64_literal(v)
        } else {
            dtype::f32_literal(v as f32)
        }
    };
    if e == 0 {
        return x.to_string();
    }
    if 2 * e == m {
        return format!("(-{x})");
    }
    // exp(-iπ/2) = -i forward, +i inverse; three quarters the other way.
    let quarter = 4 * e == m;
    if quarter || 4 * e == 3 * m {
        let minus_i = quarter != inverse;
        return if minus_i {
            format!("vec2<{real}>({x}.y, -{x}.x)")
        } else {
            format!("vec2<{real}>(-{x}.y, {x}.x)")
        };
    }
    let angle = 2.0 * std::f64::consts::PI * e as f64 / m as f64;
    let (c, s) = (
        angle.cos(),
        if inverse { angle.sin() } else { -angle.sin() },
    );
    format!(
        "vec2<{real}>({x}.x * {c} - {x}.y * {s}, {x}.x * {s} + {x}.y * {c})",
        c = lit(c),
        s = lit(s)
    )
}

/// Emits a straight-line DFT of the complex values named by `xs`; returns the names of its
/// `r` results. Composite `r = a·b` splits Cooley-Tukey style (`a` interleaved DFTs of `b`
/// points, constant twiddles, `b` DFTs of `a` points); primes sum directly.
fn small_dft(em: &mut ExprEmitter, xs: &[String], inverse: bool, real: &str) -> Vec<String> {
    let r = xs.len();
    if r <= 1 {
        return xs.to_vec();
    }
    match (2..r).find(|a| r % a == 0) {
        None if r == 2 => {
            let (y0, y1) = (em.fresh("y"), em.fresh("y"));
            em.line(&format!("let {y0} = {} + {};", xs[0], xs[1]));
            em.line(&format!("let {y1} = {} - {};", xs[0], xs[1]));
            vec![y0, y1]
        }
        None => {
            // An odd prime: pair x_s with x_{r-s}. With a_s = x_s + x_{r-s},
            // b_s = x_s - x_{r-s} and θ = 2π·s·k/r, X_k = x_0 + Σ a_s cos θ ∓ i Σ b_s sin θ
            // and X_{r-k} the same with ±: a quarter of the direct sum's multiplications.
            let lit = |v: f64| {
                if real == "f64" {
                    dtype::f64_literal(v)
                } else {
                    dtype::f32_literal(v as f32)
                }
            };
            let h = (r - 1) / 2;
            let mut a = Vec::with_capacity(h);
            let mut b = Vec::with_capacity(h);
            for s in 1..=h {
                let (p, q) = (em.fresh("a"), em.fresh("b"));
                em.line(&format!("let {p} = {} + {};", xs[s], xs[r - s]));
                em.line(&format!("let {q} = {} - {};", xs[s], xs[r - s]));
                a.push(p);
                b.push(q);
            }
            let mut out = vec![String::new(); r];
            let y0 = em.fresh("y");
            em.line(&format!("let {y0} = {} + {};", xs[0], a.join(" + ")));
            out[0] = y0;
            for k in 1..=h {
                let mut cs = vec![xs[0].clone()];
                let mut ss = Vec::with_capacity(h);
                for s in 1..=h {
                    let e = (s * k) % r;
                    let angle = 2.0 * std::f64::consts::PI * e as f64 / r as f64;
                    cs.push(format!("{} * {}", a[s - 1], lit(angle.cos())));
                    ss.push(format!("{} * {}", b[s - 1], lit(angle.sin())));
                }
                let (c, t) = (em.fresh("c"), em.fresh("s"));
                em.line(&format!("let {c} = {};", cs.join(" + ")));
                em.line(&format!("let {t} = {};", ss.join(" + ")));
                // ∓ i·t: forward X_k = c - i t, X_{r-k} = c + i t.
                let minus_i = format!("vec2<{real}>({t}.y, -{t}.x)");
                let (yk, yr) = (em.fresh("y"), em.fresh("y"));
                let (pk, pr) = if inverse { ("-", "+") } else { ("+", "-") };
                em.line(&format!("let {yk} = {c} {pk} {minus_i};"));
                em.line(&format!("let {yr} = {c} {pr} {minus_i};"));
                out[k] = yk;
                out[r - k] = yr;
            }
            out
        }
        Some(a) => {
            let b = r / a;
            // x[a·s2 + s1]: a DFTs of b points, then twiddles W_r^{s1·k2}.
            let cols: Vec<Vec<String>> = (0..a)
                .map(|s1| {
                    let part: Vec<String> = (0..b).map(|s2| xs[a * s2 + s1].clone()).collect();
                    let ys = small_dft(em, &part, inverse, real);
                    ys.iter()
                        .enumerate()
                        .map(|(k2, y)| {
                            let t = const_twiddle(y, s1 * k2, r, inverse, real);
                            if t == *y {
                                t
                            } else {
                                let z = em.fresh("z");
                                em.line(&format!("let {z} = {t};"));
                                z
                            }
                        })
                        .collect()
                })
                .collect();
            // X[k2 + b·k1] = DFT_a over s1.
            let mut out = vec![String::new(); r];
            for k2 in 0..b {
                let col: Vec<String> = (0..a).map(|s1| cols[s1][k2].clone()).collect();
                for (k1, v) in small_dft(em, &col, inverse, real).into_iter().enumerate() {
                    out[k2 + b * k1] = v;
                }
            }
            out
        }
    }
}

/// A separable FFT in passes: one axis at a time (`RFFT` transforms the last axis first, real
/// in and half spectrum out; `IRFFT` last, half spectrum extended by conjugate symmetry, real
/// part out). An axis of length `n` takes one Stockham pass per radix of [`radices`]`(n)`: a
/// 1M-point FFT is 4 passes of radix 32, where the four-step split this replaces made two
/// passes of 1024 complex multiply-adds per element. A length with a prime factor over
/// [`MAX_PRIME_RADIX`] is a convolution of smooth length instead ([`Planner::bluestein`]).
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<super::Plan>> {
    use crate::ir::ElementType;
    let Op::Fft {
        fft_type,
        fft_length,
    } = &op.op
    else {
        return Ok(None);
    };
    let (Some(xt), Some(rt)) = (
        f.ty(op.operands[0]).as_tensor(),
        f.ty(op.results[0]).as_tensor(),
    ) else {
        return Ok(None);
    };
    let rank = rt.rank();
    let nf = fft_length.len();
    if nf == 0 || nf > rank || fft_length.iter().any(|&n| n <= 0) || rt.num_elements() == 0 {
        return Ok(None);
    }
    let lens: Vec<usize> = fft_length.iter().map(|&n| n as usize).collect();
    if lens
        .iter()
        .product::<usize>()
        .saturating_mul(rt.num_elements())
        <= DIRECT_WORK
    {
        return Ok(None);
    }
    let cdt = if xt.dtype == ElementType::C128 || rt.dtype == ElementType::C128 {
        ElementType::C128
    } else {
        ElementType::C64
    };
    let real = if cdt == ElementType::C128 {
        "f64"
    } else {
        "f32"
    };
    let inverse = matches!(fft_type, FftType::Ifft | FftType::Irfft);
    let first = rank - nf;
    let axes: Vec<usize> = if *fft_type == FftType::Irfft {
        (first..rank).collect()
    } else {
        (first..rank).rev().collect()
    };
    let mut pl = Planner {
        cdt,
        temps: Vec::new(),
        passes: Vec::new(),
    };
    let mut shape = xt.dims();
    let mut src: Option<usize> = None;
    for (ai, &axis) in axes.iter().enumerate() {
        let n = lens[axis - first];
        let last = axis == rank - 1;
        let line_out = match fft_type {
            FftType::Rfft if last => n / 2 + 1,
            _ => n,
        };
        let hermitian = (*fft_type == FftType::Irfft && last).then_some(n);
        let at = Lines {
            src,
            outer: shape[..axis].iter().product(),
            inner: shape[axis + 1..].iter().product(),
            line_in: shape[axis],
        };
        let to_result = ai + 1 == axes.len();
        let scale = inverse.then_some(n);
        let largest = radices(n).into_iter().max().unwrap_or(1);
        src = if largest > MAX_PRIME_RADIX && n < BLUESTEIN_BELOW && bluestein_enabled() {
            pl.bluestein(
                &shape, axis, n, at, line_out, hermitian, inverse, scale, to_result,
            )
        } else {
            pl.stockham(
                &shape,
                axis,
                n,
                at,
                line_out,
                hermitian,
                inverse,
                scale,
                to_result,
                &[],
                Fold::NONE,
            )
        };
        shape[axis] = line_out;
    }
    let Planner { temps, passes, .. } = pl;
    // Emit them.
    let src_real = !matches!(xt.dtype, ElementType::C64 | ElementType::C128);
    let mut kernels = Vec::new();
    for (pi, p) in passes.iter().enumerate() {
        let no_fusion = |_: ValueId| false;
        let mut em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
        for t in [p.src, p.src2].into_iter().flatten() {
            em.inputs.push(Binding {
                value: super::temp(t),
                ty: temps[t].clone(),
            });
        }
        em.needs.insert(format!("wh_cmul_{real}"));
        em.needs.insert(format!("wh_sinpi_cospi_{real}"));
        let (lin, lout, inner) = (p.line_in, p.line_out, p.inner);
        // The value at line position `pos` of the source, complex.
        let read = |em: &mut ExprEmitter, pos: &str| -> Result<String> {
            let at = |q: &str| format!("(o * {}u + ({q}) * {inner}u + i)", lin * inner);
            let load = |em: &mut ExprEmitter, q: &str| -> Result<String> {
                Ok(match p.src {
                    Some(_) => format!(
                        "in0[{} {}]",
                        crate::codegen::texture_reads::PAIR_MARK,
                        at(q)
                    ),
                    // A complex64 operand read along its lines too (nothing fuses into a
                    // pass; its storage is the pass's `vec2<f32>`).
                    None if xt.dtype == ElementType::C64 && real == "f32" => {
                        let b = em.input(op.operands[0])?;
                        format!(
                            "in{b}[{} {}]",
                            crate::codegen::texture_reads::PAIR_MARK,
                            at(q)
                        )
                    }
                    None => {
                        let v = em.value(op.operands[0], &Index::Linear(at(q)))?;
                        if src_real {
                            format!("vec2<{real}>({real}({v}), 0.0)")
                        } else {
                            v
                        }
                    }
                })
            };
            let v = em.fresh("x");
            match p.hermitian {
                Some(n) => {
                    em.line(&format!("var {v}: vec2<{real}>;"));
                    em.open(&format!("if ({pos} < {lin}u)"));
                    let a = load(em, pos)?;
                    em.line(&format!("{v} = {a};"));
                    em.close(Some("else"));
                    let b = load(em, &format!("({n}u - ({pos}))"))?;
                    em.line(&format!("{v} = {b} * vec2<{real}>(1.0, -1.0);"));
                    em.close(None);
                }
                None => {
                    let a = load(em, pos)?;
                    em.line(&format!("let {v} = {a};"));
                }
            }
            Ok(v)
        };
        let out_ty = match p.dst {
            Some(t) => temps[t].clone(),
            None => rt.clone(),
        };
        let real_out = p.dst.is_none() && *fft_type == FftType::Irfft;
        let finish = |v: &str| {
            let v = match p.scale {
                Some(n) => format!("({v} / {real}({n}))"),
                None => v.to_string(),
            };
            if real_out {
                format!("{v}.x")
            } else {
                v
            }
        };
        // Lines of `len` positions, one thread per position: `o`, `q`, `i`.
        let per_position = |em: &mut ExprEmitter, len: usize| {
            em.line(&format!("let o = tid / {}u;", len * inner));
            em.line(&format!("let q = (tid / {inner}u) % {len}u;"));
            em.line(&format!("let i = tid % {inner}u;"));
        };
        // The chirp W_{2n}^{q²} at position `q` (`k_cw`: the transform's sign).
        let chirp = |em: &mut ExprEmitter, q: &str, n: usize| {
            let phase = if 2 * n <= 1 << 16 {
                format!("(({q}) * ({q})) % {}u", 2 * n)
            } else {
                format!("k_sqmod({q}, {}u)", 2 * n)
            };
            let w = em.fresh("w");
            em.line(&format!(
                "let {w} = k_cw(wh_sinpi_cospi_{real}({real}({phase}) / {real}({n})));"
            ));
            w
        };
        let sign = |inverse: bool| if inverse { "" } else { "-" };
        let mut functions = format!(
            "fn k_tw(sc: vec2<{real}>) -> vec2<{real}> {{\n    return vec2<{real}>(sc.y, {}sc.x);\n}}\n\n\
             fn k_cw(sc: vec2<{real}>) -> vec2<{real}> {{\n    return vec2<{real}>(sc.y, {}sc.x);\n}}\n\n",
            sign(p.inverse),
            sign(p.chirp_inverse)
        );
        let (threads, what) = match p.stage {
            Stage::Butterfly { n, r, ns } => {
                let (m, stride) = (ns * r, n / r);
                em.line(&format!("let o = tid / {}u;", stride * inner));
                em.line(&format!("let j = (tid / {inner}u) % {stride}u;"));
                em.line(&format!("let i = tid % {inner}u;"));
                em.line(&format!("let jm = j % {ns}u;"));
                em.line(&format!("let base = (j / {ns}u) * {m}u + jm;"));
                let mut xs = Vec::with_capacity(r);
                for s in 0..r {
                    let pos = format!("(j + {}u)", s * stride);
                    let x = match p.pre {
                        Pre::Plain => read(&mut em, &pos)?,
                        Pre::Chirp { n } => {
                            let c = em.fresh("c");
                            em.line(&format!("var {c} = vec2<{real}>(0.0, 0.0);"));
                            em.open(&format!("if ({pos} < {n}u)"));
                            let x = read(&mut em, &pos)?;
                            let w = chirp(&mut em, &pos, n);
                            em.line(&format!("{c} = wh_cmul_{real}({x}, {w});"));
                            em.close(None);
                            c
                        }
                        Pre::Times => {
                            let x = read(&mut em, &pos)?;
                            let c = em.fresh("c");
                            em.line(&format!("let {c} = wh_cmul_{real}({x}, in1[{pos}]);"));
                            c
                        }
                    };
                    if s == 0 || ns == 1 {
                        xs.push(x);
                    } else {
                        let t = em.fresh("t");
                        em.line(&format!(
                            "let {t} = wh_cmul_{real}({x}, k_tw(wh_sinpi_cospi_{real}(2.0 * {real}({s}u * jm) / {real}({m}))));"
                        ));
                        xs.push(t);
                    }
                }
                let ys = small_dft(&mut em, &xs, p.inverse, real);
                let at = |pos: &str| format!("o * {}u + ({pos}) * {inner}u + i", lout * inner);
                for (k, y) in ys.iter().enumerate() {
                    let pos = format!("base + {}u", k * ns);
                    // A last pass of an RFFT (or of Bluestein's convolution) keeps the first
                    // `lout` outputs.
                    if lout < n {
                        em.open(&format!("if ({pos} < {lout}u)"));
                    }
                    let y = match p.post_chirp {
                        Some(nc) => {
                            let w = chirp(&mut em, &pos, nc);
                            format!("wh_cmul_{real}({y}, {w})")
                        }
                        None => y.clone(),
                    };
                    em.line(&format!("out0[{}] = {};", at(&pos), finish(&y)));
                    if lout < n {
                        em.close(None);
                    }
                }
                let folded = match (p.pre, p.post_chirp) {
                    (Pre::Chirp { n }, _) => format!(", reading the lines of {n} chirped"),
                    (Pre::Times, Some(_)) => {
                        ", reading the product with the filter's spectrum, chirping its outputs"
                            .to_string()
                    }
                    (Pre::Times, None) => {
                        ", reading the product with the filter's spectrum".to_string()
                    }
                    (Pre::Plain, Some(_)) => ", chirping its outputs".to_string(),
                    (Pre::Plain, None) => String::new(),
                };
                (
                    p.outer * stride * inner,
                    format!("line of {n}, radix {r} after {ns}, in registers{folded}"),
                )
            }
            Stage::Sum { n, r, ns } => {
                if p.pre != Pre::Plain || p.post_chirp.is_some() {
                    return Err(Error::internal("a summed FFT pass with Bluestein's steps"));
                }
                let (m, stride) = (ns * r, n / r);
                per_position(&mut em, lout);
                em.line(&format!("let e = q % {m}u;"));
                em.line(&format!("let j = (q / {m}u) * {ns}u + q % {ns}u;"));
                em.line(&format!("var acc: vec2<{real}> = vec2<{real}>(0.0, 0.0);"));
                // The phase s·e mod m, kept reduced (s·e overflows u32 for large primes).
                em.line("var ph: u32 = 0u;");
                em.open_loop(
                    &format!("for (var s: u32 = 0u; s < {r}u; s = s + 1u)"),
                    r as u64,
                );
                let x = read(&mut em, &format!("(j + s * {stride}u)"))?;
                em.line(&format!(
                    "acc = acc + wh_cmul_{real}({x}, k_tw(wh_sinpi_cospi_{real}(2.0 * {real}(ph) / {real}({m}))));"
                ));
                em.line("ph = ph + e;");
                em.line(&format!("if (ph >= {m}u) {{ ph = ph - {m}u; }}"));
                em.close(None);
                em.line(&format!("out0[tid] = {};", finish("acc")));
                (
                    p.outer * lout * inner,
                    format!("line of {n}, radix {r} after {ns}, summed"),
                )
            }
            Stage::Filter { n, m } => {
                em.line("var q = tid;");
                em.line(&format!("if (q > {m}u - {n}u) {{ q = {m}u - q; }}"));
                em.line(&format!("var acc: vec2<{real}> = vec2<{real}>(0.0, 0.0);"));
                em.open(&format!("if (q < {n}u)"));
                let w = chirp(&mut em, "q", n);
                em.line(&format!("acc = {w} * vec2<{real}>(1.0, -1.0);"));
                em.close(None);
                em.line("out0[tid] = acc;");
                (m, format!("Bluestein filter of {n} in {m}"))
            }
        };
        if em.body.contains("k_sqmod(") {
            functions.push_str(CHIRP_SQMOD);
        }
        let out = Binding {
            value: match p.dst {
                Some(t) => super::temp(t),
                None => op.results[0],
            },
            ty: out_ty,
        };
        let kname = format!("{name}_pass{pi}");
        let comment = format!(
            "kernel {kname}: fft {fft_type:?} of lengths {fft_length:?}, pass {pi}: {what}\nfuses: stablehlo.fft"
        );
        kernels.push(crate::codegen::kernel::threaded(
            &kname,
            &comment,
            em.inputs.clone(),
            vec![out],
            &em.needs,
            &functions,
            &em.body,
            threads as u64,
            em.iterations(),
            target,
        )?);
    }
    Ok(Some(super::Plan::sequential(kernels, temps)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radices_pack_small_primes() {
        assert_eq!(radices(1 << 20), vec![32; 4]);
        assert_eq!(radices(512), vec![32, 16]);
        assert_eq!(radices(1000), vec![25, 20, 2]);
        assert_eq!(radices(1009), vec![1009]);
        assert_eq!(radices(2 * 1009), vec![1009, 2]);
        assert_eq!(radices(15015), vec![13, 11, 21, 5]);
        assert_eq!(radices(1), vec![1]);
        assert_eq!(smooth_at_least(2017), 2025);
        assert_eq!(smooth_at_least(4097), 4320);
        assert_eq!(smooth_at_least(1), 1);
        for n in 1..5000 {
            let s = smooth_at_least(n);
            assert!(s >= n && radices(s).iter().all(|&r| r <= MAX_RADIX));
            let rs = radices(n);
            assert_eq!(rs.iter().product::<usize>(), n);
        }
    }
}
