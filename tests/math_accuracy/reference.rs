//! Host references and input sweeps for the accuracy tests.

/// A custom input generator: columns of `n` arguments.
pub type Gen = fn(&mut Rng, usize) -> Vec<Vec<f64>>;

/// One function to sweep: library base name, host reference, the input region sampled
/// densely (random bit patterns cover everything else) and the allowed error in ULP.
pub struct Case {
    pub name: &'static str,
    pub arity: usize,
    pub f: fn(&[f64]) -> f64,
    pub lo: f64,
    pub hi: f64,
    pub bound: f64,
    /// Inputs for two-argument functions whose domains the generic sampler misses.
    pub gen: Option<Gen>,
}

fn case(name: &'static str, f: fn(&[f64]) -> f64, lo: f64, hi: f64, bound: f64) -> Case {
    Case {
        name,
        arity: 1,
        f,
        lo,
        hi,
        bound,
        gen: None,
    }
}

fn case2(name: &'static str, f: fn(&[f64]) -> f64, lo: f64, hi: f64, bound: f64) -> Case {
    Case {
        name,
        arity: 2,
        f,
        lo,
        hi,
        bound,
        gen: None,
    }
}

/// erf^-1 by Newton steps on libm's erf / erfc.
pub fn erf_inv(x: f64) -> f64 {
    if x.is_nan() || x.abs() > 1.0 {
        return f64::NAN;
    }
    if x.abs() == 1.0 {
        return x * f64::INFINITY;
    }
    let a = x.abs();
    // initial guess from the logarithmic tail form
    let w = -((1.0 - a) * (1.0 + a)).ln();
    let mut y = if a < 0.9 {
        a * (0.886_226_9 + a * a * (0.232_1 + a * a * 0.127))
    } else {
        (w - (w.ln() + std::f64::consts::PI.ln()).max(0.0) * 0.5)
            .max(0.0)
            .sqrt()
    };
    let c = 2.0 / std::f64::consts::PI.sqrt();
    for _ in 0..60 {
        let d = if a < 0.5 {
            (libm::erf(y) - a) / (c * (-y * y).exp())
        } else {
            -(libm::erfc(y) - (1.0 - a)) / (c * (-y * y).exp())
        };
        y -= d;
        if d.abs() <= y.abs() * 1e-17 {
            break;
        }
    }
    y.copysign(x)
}

/// Digamma: reflection, recurrence up to x >= 12, asymptotic series.
pub fn digamma(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return x;
    }
    if x <= 0.0 && x == x.floor() {
        return f64::NAN;
    }
    if x < 0.0 {
        // cot(pi x) from the exactly reduced r = x - round(x)
        let pi = std::f64::consts::PI;
        let r = x - x.round();
        return digamma(1.0 - x) - pi / (pi * r).tan();
    }
    // near the positive root x0, psi(x) = (x - x0) sum_k 1/((x0 + k)(x + k)) avoids the
    // cancellation of the recurrence (tail of the sum by Euler-Maclaurin)
    const X0_HI: f64 = 1.4616321449683622;
    const X0_LO: f64 = 9.549995429965697e-17;
    if (x - X0_HI).abs() < 0.6 {
        let d = (x - X0_HI) - X0_LO;
        let (a, b) = (X0_HI, x);
        let k_max = 2000;
        let mut s = 0.0;
        for k in (0..k_max).rev() {
            s += 1.0 / ((a + k as f64) * (b + k as f64));
        }
        let kk = k_max as f64;
        let f = |k: f64| 1.0 / ((a + k) * (b + k));
        let integral = if (b - a).abs() < 1e-300 {
            1.0 / (kk + a)
        } else {
            ((b - a) / (kk + a)).ln_1p() / (b - a)
        };
        let df = -(2.0 * kk + a + b) * f(kk) * f(kk);
        return d * (s + integral + 0.5 * f(kk) - df / 12.0);
    }
    let mut acc = 0.0;
    let mut x = x;
    while x < 12.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let z = 1.0 / (x * x);
    let series = z
        * (1.0 / 12.0
            - z * (1.0 / 120.0
                - z * (1.0 / 252.0 - z * (1.0 / 240.0 - z * (1.0 / 132.0 - z * 691.0 / 32760.0)))));
    acc + x.ln() - 0.5 / x - series
}

/// I1(x) exp(-|x|): the power series (scaled) up to 25, the asymptotic series beyond.
pub fn bessel_i1e(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a <= 25.0 {
        let h = 0.5 * a;
        let mut term = h * (-a).exp();
        let mut sum = term;
        for k in 1..400 {
            term *= h * h / (k as f64 * (k + 1) as f64);
            sum += term;
            if term < sum * 1e-18 {
                break;
            }
        }
        return sum.copysign(x);
    }
    let mut term = 1.0;
    let mut sum = 1.0;
    for k in 1..60 {
        let kk = (2 * k - 1) as f64;
        let next = term * -(4.0 - kk * kk) / (k as f64 * 8.0 * a);
        if next.abs() >= term.abs() {
            break;
        }
        term = next;
        sum += term;
    }
    (sum / (2.0 * std::f64::consts::PI).sqrt() / a.sqrt()).copysign(x)
}

/// Hurwitz zeta by Euler-Maclaurin with generous parameters.
pub fn zeta(s: f64, q: f64) -> f64 {
    if s.is_nan() || q.is_nan() || s < 1.0 {
        return f64::NAN;
    }
    if s == 1.0 {
        return f64::INFINITY;
    }
    if q <= 0.0 {
        return if q == q.floor() {
            f64::INFINITY
        } else {
            f64::NAN
        };
    }
    let n = 40.0;
    let mut sum = 0.0;
    let mut a = q;
    while a < n {
        sum += a.powf(-s);
        a += 1.0;
    }
    const B: [f64; 10] = [
        1.0 / 6.0,
        -1.0 / 30.0,
        1.0 / 42.0,
        -1.0 / 30.0,
        5.0 / 66.0,
        -691.0 / 2730.0,
        7.0 / 6.0,
        -3617.0 / 510.0,
        43867.0 / 798.0,
        -174611.0 / 330.0,
    ];
    let w = a.powf(-s);
    let mut corr = 0.0;
    let mut fac = s / a;
    let mut fact2j = 2.0;
    for (j, b) in B.iter().enumerate() {
        corr += b / fact2j * fac;
        let j = j as f64;
        fac *= (s + 2.0 * j + 1.0) * (s + 2.0 * j + 2.0) / (a * a);
        fact2j *= (2.0 * j + 3.0) * (2.0 * j + 4.0);
    }
    sum + w * (a / (s - 1.0) + 0.5 + corr)
}

fn polygamma(n: f64, x: f64) -> f64 {
    if n == 0.0 {
        return digamma(x);
    }
    let fact: f64 = (2..=n as u64).map(|k| k as f64).product();
    let z = fact * zeta(n + 1.0, x);
    if n as u64 % 2 == 1 {
        z
    } else {
        -z
    }
}

fn gen_zeta(rng: &mut Rng, n: usize) -> Vec<Vec<f64>> {
    let u = |rng: &mut Rng| (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let s = (0..n).map(|_| 1.0 + 20.0 * u(rng) * u(rng)).collect();
    let q = (0..n)
        .map(|_| 0.01 + 100.0 * u(rng) * u(rng) * u(rng))
        .collect();
    vec![s, q]
}

fn gen_polygamma(rng: &mut Rng, n: usize) -> Vec<Vec<f64>> {
    let u = |rng: &mut Rng| (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let k = (0..n).map(|_| (rng.next() % 8) as f64).collect();
    let x = (0..n)
        .map(|_| 0.05 + 50.0 * u(rng) * u(rng) * u(rng))
        .collect();
    vec![k, x]
}

pub fn cases_f32() -> Vec<Case> {
    use std::f64::consts::PI;
    vec![
        case("exp", |a| a[0].exp(), -104.0, 89.0, 1.0),
        case("expm1", |a| a[0].exp_m1(), -20.0, 89.0, 1.5),
        case("log", |a| a[0].ln(), 0.0, f64::MAX, 1.0),
        case("log1p", |a| a[0].ln_1p(), -1.0, f64::MAX, 1.0),
        case("sin", |a| a[0].sin(), -4096.0 * PI, f64::MAX, 2.0),
        case("cos", |a| a[0].cos(), -4096.0 * PI, f64::MAX, 2.0),
        case("tan", |a| a[0].tan(), -4096.0 * PI, f64::MAX, 3.0),
        case("tanh", |a| a[0].tanh(), -10.0, 10.0, 1.5),
        case("atan", |a| a[0].atan(), -1e10, 1e10, 1.5),
        case2("atan2", |a| a[0].atan2(a[1]), -1e6, 1e6, 1.5),
        case("asin", |a| a[0].asin(), -1.0, 1.0, 1.5),
        case("acos", |a| a[0].acos(), -1.0, 1.0, 1.5),
        case("sinh", |a| a[0].sinh(), -90.0, 90.0, 2.5),
        case("cosh", |a| a[0].cosh(), -90.0, 90.0, 2.5),
        case("asinh", |a| a[0].asinh(), -1e10, 1e10, 2.0),
        case("acosh", |a| a[0].acosh(), 1.0, 1e10, 2.0),
        case("atanh", |a| a[0].atanh(), -1.0, 1.0, 2.0),
        case("erf", |a| libm::erf(a[0]), -5.0, 5.0, 2.0),
        case("erfc", |a| libm::erfc(a[0]), -5.0, 10.1, 3.0),
        case("cbrt", |a| a[0].cbrt(), -1e30, 1e30, 1.0),
        case("sqrt", |a| a[0].sqrt(), 0.0, f64::MAX, 0.5),
        case("rsqrt", |a| 1.0 / a[0].sqrt(), 0.0, f64::MAX, 1.0),
        case(
            "logistic",
            |a| {
                if a[0] < 0.0 {
                    let e = a[0].exp();
                    e / (1.0 + e)
                } else {
                    1.0 / (1.0 + (-a[0]).exp())
                }
            },
            -110.0,
            110.0,
            2.0,
        ),
        case2("pow", |a| a[0].powf(a[1]), -100.0, 100.0, 1.5),
        // wh_div_f32, every HLO f32 division: operands over the whole range (NVIDIA's
        // built-in gave 0 for divisors past 2^126)
        case2("div", |a| a[0] / a[1], f64::MIN, f64::MAX, 0.5),
        // f32 erf_inv mirrors XLA's (Giles) approximation, inaccurate as |x| -> 1
        case("erf_inv", |a| erf_inv(a[0]), -1.0, 1.0, 100.0),
        // lgamma and digamma lose relative accuracy right next to their zeros on the negative
        // axis (the reflection formula cancels there; the absolute error stays ~1 ULP of the
        // terms); elsewhere they are within a few ULP
        case("lgamma", |a| libm::lgamma(a[0]), -20.0, 1e6, 256.0),
        case("digamma", |a| digamma(a[0]), -20.0, 1e6, 256.0),
        case("bessel_i1e", |a| bessel_i1e(a[0]), -1e4, 1e4, 3.0),
        Case {
            gen: Some(gen_zeta),
            ..case2("zeta", |a| zeta(a[0], a[1]), 0.0, 0.0, 8.0)
        },
        Case {
            gen: Some(gen_polygamma),
            ..case2("polygamma", |a| polygamma(a[0], a[1]), 0.0, 0.0, 16.0)
        },
    ]
}

pub fn cases_f64() -> Vec<Case> {
    let mut v = cases_f32();
    for c in &mut v {
        // the f64 references are std/libm results, themselves up to 1 ULP off: a bound of 2
        // here means at most 1 ULP from libm's value plus libm's own error
        c.bound = match c.name {
            "erfc" => 4.0,
            "erf_inv" => 3.0,
            // exact on the host: wh_div_f64 corrects the built-in's quotient
            "div" => 0.5,
            // the host's power series for I1 loses ~10 ULP itself between 8 and 25
            "bessel_i1e" => 10.0,
            "digamma" => 1024.0,
            // the host's Euler-Maclaurin reference is itself a few ULP off for large s
            "zeta" => 16.0,
            _ => c.bound.max(2.0),
        };
        // std's f64 versions lose accuracy at the extremes; musl's (libm) do not
        match c.name {
            "asinh" => c.f = |a| libm::asinh(a[0]),
            "acosh" => {
                c.f = |a| {
                    if a[0] < 1.0 {
                        f64::NAN
                    } else {
                        libm::acosh(a[0])
                    }
                }
            }
            "atanh" => c.f = |a| libm::atanh(a[0]),
            _ => {}
        }
    }
    v
}

/// A deterministic xorshift generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn scale() -> usize {
    std::env::var("WGPU_HLO_MATH_SWEEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

const SPECIAL_F32: [u32; 16] = [
    0x0000_0000,
    0x8000_0000,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0x0000_0001,
    0x8000_0001,
    0x0080_0000,
    0x7f7f_ffff,
    0xff7f_ffff,
    0x3f80_0000,
    0xbf80_0000,
    0x4000_0000,
    0xc000_0000,
    0x3f00_0000,
    0xbf00_0000,
];

/// f32 inputs: specials, every binade of [lo, hi] (both signs where the range allows) and
/// random bit patterns.
pub fn inputs_f32(c: &Case) -> Vec<Vec<f32>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ c.name.len() as u64);
    if let Some(gen) = c.gen {
        return gen(&mut rng, 4000 * scale())
            .into_iter()
            .map(|col| col.into_iter().map(|v| v as f32).collect())
            .collect();
    }
    let per_binade = 24 * scale();
    let mut col: Vec<f32> = SPECIAL_F32.iter().map(|&b| f32::from_bits(b)).collect();
    for e in 0..255u32 {
        for _ in 0..per_binade {
            let m = (rng.next() as u32) & 0x007f_ffff;
            let s = (rng.next() as u32) & 0x8000_0000;
            let v = f32::from_bits(s | (e << 23) | m) as f64;
            if v >= c.lo && v <= c.hi {
                col.push(v as f32);
            } else if -v >= c.lo && -v <= c.hi {
                col.push(-v as f32);
            }
        }
    }
    // uniform samples in the range (catches interior points of wide binades)
    let span = (c.hi.min(1e6) - c.lo.max(-1e6)).max(0.0);
    for _ in 0..2000 * scale() {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        col.push((c.lo.max(-1e6) + u * span) as f32);
    }
    for _ in 0..2000 * scale() {
        col.push(f32::from_bits(rng.next() as u32));
    }
    // The floats nearest to multiples of pi/2 and their neighbours, through the Cody-Waite
    // range and past it: the remainder is tiny there, so any bit lost in the reduction shows
    // (sin(-1033.584) was 11.8 ULP off before the reduction took its third part first).
    if matches!(c.name, "sin" | "cos" | "tan") {
        for k in 1..=2700u32 {
            let v = (f64::from(k) * std::f64::consts::FRAC_PI_2) as f32;
            for d in [-1i64, 0, 1] {
                let b = (i64::from(v.to_bits()) + d) as u32;
                col.push(f32::from_bits(b));
                col.push(-f32::from_bits(b));
            }
        }
    }
    if c.arity == 1 {
        return vec![col];
    }
    let n = col.len();
    let mut other: Vec<f32> = (0..n)
        .map(|_| col[(rng.next() % n as u64) as usize])
        .collect();
    // small integers and halves for pow's exponent cases
    for k in 0..n / 8 {
        other[k * 8] = ((rng.next() % 41) as f32 - 20.0) * if k % 3 == 0 { 0.5 } else { 1.0 };
    }
    vec![col, other]
}

const SPECIAL_F64: [u64; 12] = [
    0,
    0x8000_0000_0000_0000,
    0x7ff0_0000_0000_0000,
    0xfff0_0000_0000_0000,
    0x7ff8_0000_0000_0000,
    1,
    0x8000_0000_0000_0001,
    0x0010_0000_0000_0000,
    0x7fef_ffff_ffff_ffff,
    0x3ff0_0000_0000_0000,
    0xbff0_0000_0000_0000,
    0x3fe0_0000_0000_0000,
];

pub fn inputs_f64(c: &Case) -> Vec<Vec<f64>> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ c.name.len() as u64);
    if let Some(gen) = c.gen {
        return gen(&mut rng, 4000 * scale());
    }
    let per_binade = 4 * scale();
    let mut col: Vec<f64> = SPECIAL_F64.iter().map(|&b| f64::from_bits(b)).collect();
    for e in 0..2047u64 {
        for _ in 0..per_binade {
            let m = rng.next() & 0x000f_ffff_ffff_ffff;
            let s = rng.next() & 0x8000_0000_0000_0000;
            let v = f64::from_bits(s | (e << 52) | m);
            if v >= c.lo && v <= c.hi {
                col.push(v);
            } else if -v >= c.lo && -v <= c.hi {
                col.push(-v);
            }
        }
    }
    let span = (c.hi.min(1e6) - c.lo.max(-1e6)).max(0.0);
    for _ in 0..2000 * scale() {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        col.push(c.lo.max(-1e6) + u * span);
    }
    for _ in 0..2000 * scale() {
        col.push(f64::from_bits(rng.next()));
    }
    // The doubles nearest to multiples of pi/2 and their neighbours, through the Cody-Waite
    // range (2^20) and past it (see `inputs_f32`).
    if matches!(c.name, "sin" | "cos" | "tan") {
        let ks = (1..=1000u32).chain((0..3100u32).map(|i| 1000 + 222 * i));
        for k in ks {
            let k = f64::from(k);
            let v = k.mul_add(std::f64::consts::FRAC_PI_2, k * 6.123233995736766e-17);
            for d in [-1i64, 0, 1] {
                let b = (v.to_bits() as i64 + d) as u64;
                col.push(f64::from_bits(b));
                col.push(-f64::from_bits(b));
            }
        }
    }
    if c.arity == 1 {
        return vec![col];
    }
    let n = col.len();
    let mut other: Vec<f64> = (0..n)
        .map(|_| col[(rng.next() % n as u64) as usize])
        .collect();
    for k in 0..n / 8 {
        other[k * 8] = ((rng.next() % 41) as f64 - 20.0) * if k % 3 == 0 { 0.5 } else { 1.0 };
    }
    vec![col, other]
}

/// The worst error seen for one function.
#[derive(Clone, Debug)]
pub struct Worst {
    pub ulp: f64,
    pub args: Vec<f64>,
    pub got: f64,
    pub want: f64,
    pub count: usize,
    pub missing: bool,
}

impl Worst {
    fn new() -> Self {
        Worst {
            ulp: 0.0,
            args: Vec::new(),
            got: 0.0,
            want: 0.0,
            count: 0,
            missing: false,
        }
    }
    pub fn missing() -> Self {
        Worst {
            missing: true,
            ..Worst::new()
        }
    }
}

/// Error of `got` against the exact `want` in ULPs of the target type (mantissa bits `p`,
/// minimum exponent `emin`). NaN must match NaN, infinities must match exactly.
fn ulp_error(got: f64, want: f64, p: i32, emin: i32, max: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let want = if want.abs() > max * (1.0 + 2f64.powi(-p - 1)) {
        want.signum() * f64::INFINITY
    } else {
        want
    };
    if want.is_infinite() || got.is_infinite() {
        return if want == got { 0.0 } else { f64::INFINITY };
    }
    if want == 0.0 && got == 0.0 && want.is_sign_negative() != got.is_sign_negative() {
        // a zero of the wrong sign
        return f64::INFINITY;
    }
    let e = if want == 0.0 {
        emin
    } else {
        (want.abs().log2().floor() as i32).max(emin)
    };
    let ulp = if e - (p - 1) < -1022 {
        2f64.powi(-1022) * 2f64.powi(e - (p - 1) + 1022)
    } else {
        2f64.powi(e - (p - 1))
    };
    if got == want {
        return 0.0;
    }
    (got - want).abs() / ulp
}

/// On an adapter that flushes subnormals (`flush`), inputs with a subnormal argument are left
/// out and a zero counts as exact where the result is below the smallest normal number.
pub fn worst_f32(c: &Case, args: &[Vec<f32>], got: &[f32], flush: bool) -> Worst {
    let mut w = Worst::new();
    for (k, &g) in got.iter().enumerate() {
        let a: Vec<f64> = args.iter().map(|col| col[k] as f64).collect();
        if flush && args.iter().any(|col| col[k].is_subnormal()) {
            continue;
        }
        let want = (c.f)(&a);
        let u = if flush && g == 0.0 && want.abs() < f32::MIN_POSITIVE as f64 {
            0.0
        } else {
            ulp_error(g as f64, want, 24, -126, f32::MAX as f64)
        };
        w.count += 1;
        if u > w.ulp || (u.is_nan() && !w.ulp.is_nan()) {
            w = Worst {
                ulp: u,
                args: a,
                got: g as f64,
                want,
                count: w.count,
                missing: false,
            };
        }
    }
    w
}

/// As `worst_f32`, for f64.
pub fn worst_f64(c: &Case, args: &[Vec<f64>], got: &[f64], flush: bool) -> Worst {
    let mut w = Worst::new();
    for (k, &g) in got.iter().enumerate() {
        let a: Vec<f64> = args.iter().map(|col| col[k]).collect();
        if flush && a.iter().any(|v| v.is_subnormal()) {
            continue;
        }
        let want = (c.f)(&a);
        let u = if flush && g == 0.0 && want.abs() < f64::MIN_POSITIVE {
            0.0
        } else {
            ulp_error(g, want, 53, -1022, f64::MAX)
        };
        w.count += 1;
        if u > w.ulp {
            w = Worst {
                ulp: u,
                args: a,
                got: g,
                want,
                count: w.count,
                missing: false,
            };
        }
    }
    w
}

pub fn print_and_check(ty: &str, report: &[(&str, f64, Worst)]) {
    let mut over = Vec::new();
    println!("{ty}: function, max error (ULP), bound, worst input");
    for (name, bound, w) in report {
        if w.missing {
            println!("  {name:<12} missing");
            continue;
        }
        println!(
            "  {name:<12} {:>8.3} (bound {bound}) over {} inputs; worst at {:?}: got {:e}, want {:e}",
            w.ulp, w.count, w.args, w.got, w.want
        );
        if w.ulp.is_nan() || w.ulp > *bound {
            over.push(*name);
        }
    }
    assert!(over.is_empty(), "{ty}: over the bound: {over:?}");
}
