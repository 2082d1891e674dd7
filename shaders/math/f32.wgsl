// wgpu-hlo math library, f32.
//
// Every function is preceded by `// @fn NAME` and, if it calls other library functions,
// `// @requires ...`; src/codegen/math.rs splits the file at these markers and hands the code
// generator the functions a kernel uses plus their dependencies.
//
// Only f32 arithmetic, `fma`, `sqrt`, `floor`/`round`/`trunc` and u32 bit casts are used; no
// GLSL.std.450 transcendental built-in is called, because drivers may implement those with
// errors far beyond the 3-ULP conformance bound (Vulkan allows 3 + 2|x| ULP for exp). Special
// values are recognised from their bits, so a driver that assumes "no NaN, no infinity" in
// float compares cannot drop them. Subnormal inputs and results are exact where the hardware
// keeps them (lavapipe does, in compute shaders) and become zero where it flushes them.
// Polynomial coefficients are near-minimax fits made by scripts/fit.py.
//
// Compilers are hostile to careful float code: Mesa (lavapipe, RADV, ANV, ...) applies
// "inexact" rewrites such as (a + b) - b -> a and x == x -> true to every float op of a SPIR-V
// module without NoContraction (naga emits none), and `fma` is not always fused (lavapipe
// computes it as a multiply and an add). So exact products use a bit-mask split
// (wh_two_prod_f32, correct whether or not fma fuses), compensation steps go through
// wh_opaque_f32, and special values are tested on the bits.

// @fn wh_is_nan_f32
fn wh_is_nan_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// @fn wh_is_inf_f32
fn wh_is_inf_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

// @fn wh_nan_f32
// A quiet NaN. Built from a run-time value so that no NaN constant reaches the shader compiler.
fn wh_nan_f32(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) | 0x7fc00000u);
}

// @fn wh_inf_f32
// Infinity with the sign of `s`.
fn wh_inf_f32(s: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(s) & 0x80000000u) | 0x7f800000u);
}

// @fn wh_copysign_f32
fn wh_copysign_f32(x: f32, s: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
}

// @fn wh_opaque_f32
// x itself, computed so that the shader compiler cannot see that it is x: keeps compensation
// terms such as (1 + x) - 1 from being simplified away. Only a NaN payload could change.
fn wh_opaque_f32(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    return bitcast<f32>(b ^ select(0u, 1u, b == 0xffffffffu));
}

// @fn wh_split_f32
// The upper 12 significant bits of x (x minus it is exact and has at most 12 bits).
fn wh_split_f32(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) & 0xfffff000u);
}

// @fn wh_two_prod_f32
// @requires wh_split_f32
// (p, e) with p = a*b rounded and p + e = a*b exactly (Dekker; no fma needed).
fn wh_two_prod_f32(a: f32, b: f32) -> vec2<f32> {
    let p = a * b;
    let ah = wh_split_f32(a);
    let al = a - ah;
    let bh = wh_split_f32(b);
    let bl = b - bh;
    let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return vec2<f32>(p, e);
}

// @fn wh_ldexp_f32
// x * 2^k for x of magnitude about 1 and any k; exact unless the result is subnormal, which is
// then rounded once.
fn wh_ldexp_f32(x: f32, k: i32) -> f32 {
    var y = x;
    var n = clamp(k, -300, 300);
    if (n > 127) {
        y = y * 0x1p127f;
        n = n - 127;
        if (n > 127) {
            y = y * 0x1p127f;
            n = min(n - 127, 127);
        }
    } else if (n < -126) {
        y = y * 0x1p-100f;
        n = n + 100;
        if (n < -126) {
            y = y * 0x1p-100f;
            n = max(n + 100, -126);
        }
    }
    return y * bitcast<f32>(u32(n + 127) << 23u);
}

// @fn wh_exp_poly_f32
// e^r - 1 for |r| <= ln2/2 (plus a little).
fn wh_exp_poly_f32(r: f32) -> f32 {
    let p = fma(fma(fma(fma(fma(1.9890980911441147e-4, r, 1.3933641603216529e-3), r,
        8.33331048488617e-3), r, 4.166646674275398e-2), r, 0.1666666716337204), r, 0.5);
    return fma(r * r, p, r);
}

// @fn wh_exp_f32
// @requires wh_exp_poly_f32 wh_is_nan_f32 wh_opaque_f32
// Without branches (a SIMD driver such as llvmpipe runs every branch under a lane mask, and
// a kernel inlines this many times): the argument is clamped, 2^k1 is added to the exponent
// bits of m = e^r in [0.7, 1.5) (exact), and 2^k2 multiplied in only for results outside the
// normal range (one rounding). The clamp's ends need no selects of their own: at the upper
// one (just above ln FLT_MAX) m > 1 and k = 128, so the product overflows to inf; at the lower
// one it is under half the smallest subnormal and rounds to 0 (a select each cost 6 % of the
// lavapipe softmax kernel). Only NaN, which the clamp may not keep, is chosen by a select.
// In straight-line code lavapipe reassociated 1 + (r + r^2 p) (up to 1.7 ULP): the polynomial
// goes through wh_opaque_f32.
fn wh_exp_f32(x: f32) -> f32 {
    let c = clamp(x, -104.0, 88.72283935546875);
    let k = round(c * 1.4426950216293335);
    // ln2_hi has 16 significant bits, so k * ln2_hi and the first step are exact.
    let r = fma(-k, 1.428606765330187e-6, fma(-k, 0.693145751953125, c));
    let m = 1.0 + wh_opaque_f32(wh_exp_poly_f32(r));
    let ki = i32(k);
    let k1 = clamp(ki, -125, 127);
    let k2 = ki - k1;
    let y = bitcast<f32>(bitcast<i32>(m) + (k1 << 23u)) * bitcast<f32>(u32(k2 + 127) << 23u);
    return select(y, x, wh_is_nan_f32(x));
}

// @fn wh_expm1_f32
// @requires wh_exp_poly_f32 wh_exp_f32 wh_is_nan_f32
fn wh_expm1_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (x > 88.0) {
        return wh_exp_f32(x);
    }
    if (x < -18.0) {
        return -1.0;
    }
    if (abs(x) < 0x1p-25f) {
        return x;
    }
    let k = round(x * 1.4426950216293335);
    let r = fma(-k, 1.428606765330187e-6, fma(-k, 0.693145751953125, x));
    let q = wh_exp_poly_f32(r);
    if (k == 0.0) {
        return q;
    }
    let t = bitcast<f32>(u32(i32(k) + 127) << 23u);
    return fma(t, q, t - 1.0);
}

// @fn wh_log_reduced_f32
// e*ln2 + log(1 + f) + c for |f| <= sqrt(2) - 1 and a small correction c.
fn wh_log_reduced_f32(e: f32, f: f32, c: f32) -> f32 {
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * fma(fma(fma(0.2333046793937683, z, 0.2855082154273987), z,
        0.4000012278556824), z, 0.6666666865348816);
    let hfsq = 0.5 * f * f;
    return fma(e, 0.693145751953125,
        (f - (hfsq - (s * (hfsq + r) + fma(e, 1.428606765330187e-6, c)))));
}

// @fn wh_log_f32
// @requires wh_log_reduced_f32 wh_nan_f32 wh_inf_f32
fn wh_log_f32(x: f32) -> f32 {
    var ix = bitcast<u32>(x);
    if (ix >= 0x7f800000u || x == 0.0) {
        // negative, +-0, +inf, NaN
        if (x == 0.0) {
            return wh_inf_f32(-1.0);
        }
        if ((ix & 0x7fffffffu) > 0x7f800000u || ix == 0x7f800000u) {
            return x;
        }
        return wh_nan_f32(x);
    }
    var e = -127;
    if (ix < 0x00800000u) {
        ix = bitcast<u32>(x * 0x1p23f);
        e = e - 23;
    }
    e = e + i32(ix >> 23u);
    var m = bitcast<f32>((ix & 0x007fffffu) | 0x3f800000u);
    if (m > 1.4142135381698608) {
        m = m * 0.5;
        e = e + 1;
    }
    return wh_log_reduced_f32(f32(e), m - 1.0, 0.0);
}

// @fn wh_log1p_f32
// @requires wh_log_reduced_f32 wh_nan_f32 wh_inf_f32 wh_opaque_f32
fn wh_log1p_f32(x: f32) -> f32 {
    let ix = bitcast<u32>(x);
    if ((ix & 0x7fffffffu) >= 0x7f800000u) {
        // NaN, +inf -> itself; -inf -> NaN
        if (ix == 0xff800000u) {
            return wh_nan_f32(x);
        }
        return x;
    }
    if (x <= -1.0) {
        if (x == -1.0) {
            return wh_inf_f32(-1.0);
        }
        return wh_nan_f32(x);
    }
    if (abs(x) < 0x1p-24f) {
        return x;
    }
    if (x > -0.29289321881 && x < 0.41421356237) {
        return wh_log_reduced_f32(0.0, x, 0.0);
    }
    let u = 1.0 + x;
    let iu = bitcast<u32>(u);
    var e = i32(iu >> 23u) - 127;
    var m = bitcast<f32>((iu & 0x007fffffu) | 0x3f800000u);
    if (m > 1.4142135381698608) {
        m = m * 0.5;
        e = e + 1;
    }
    // c: what rounding 1 + x lost, relative to u.
    var c = 0.0;
    if (e < 24) {
        c = (x - (wh_opaque_f32(u) - 1.0)) / u;
    }
    return wh_log_reduced_f32(f32(e), m - 1.0, c);
}

// @fn wh_mul_wide_u32
// The full 64-bit product of two u32, as (high word, low word).
fn wh_mul_wide_u32(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(hi, (mid << 16u) | (p00 & 0xffffu));
}

// @fn wh_rem_pio2_large_f32
// @requires wh_mul_wide_u32 wh_two_prod_f32 wh_fast_two_sum_f32
// Payne-Hanek reduction for finite |x| >= 2^-6: x = m 2^E with m a 24-bit integer;
// (m * (the 96 bits of 2/pi that matter for this E)) mod 4 in integer arithmetic. Returns
// (r, r_lo, j mod 4) as wh_rem_pio2_f32 does.
fn wh_rem_pio2_large_f32(x: f32) -> vec3<f32> {
    // 2/pi in binary, one zero word in front
    var t = array<u32, 9>(0u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u,
        0x3c439041u, 0xfe5163abu, 0xdebbc561u);
    let ux = bitcast<u32>(x) & 0x7fffffffu;
    let e = i32(ux >> 23u) - 150;
    let m = (ux & 0x007fffffu) | 0x00800000u;
    // bit E-1 of 2/pi (weight 2^1 in x * 2/pi) sits at position E + 30 of the padded table
    let p0 = u32(e + 30);
    let q0 = p0 / 32u;
    let sh = p0 % 32u;
    var w: array<u32, 3>;
    for (var i = 0u; i < 3u; i = i + 1u) {
        let a = t[q0 + i];
        let b = t[q0 + i + 1u];
        w[i] = select((a << sh) | (b >> (32u - sh)), a, sh == 0u);
    }
    // 120-bit product m * (w0 w1 w2), words p_0 (top) .. p_3
    let l2 = wh_mul_wide_u32(m, w[2]);
    let l1 = wh_mul_wide_u32(m, w[1]);
    let l0 = wh_mul_wide_u32(m, w[0]);
    let p3 = l2.y;
    let s2 = l2.x + l1.y;
    let c2 = select(0u, 1u, s2 < l2.x);
    let s1a = l1.x + l0.y;
    let c1a = select(0u, 1u, s1a < l1.x);
    let s1 = s1a + c2;
    let c1 = c1a + select(0u, 1u, s1 < s1a);
    let p2 = s2;
    let p1 = s1;
    let p0w = l0.x + c1;
    // integer part mod 4: bits 94 and 95 (the top of p1); fraction: the 64 bits below
    var q = (p1 >> 30u) & 3u;
    var fh = (p1 << 2u) | (p2 >> 30u);
    var fl = (p2 << 2u) | (p3 >> 30u);
    var neg = false;
    if ((fh & 0x80000000u) != 0u) {
        // fraction >= 1/2: take f - 1 (negate the 64-bit value) and round j up
        q = (q + 1u) & 3u;
        fh = ~fh;
        fl = ~fl + 1u;
        if (fl == 0u) {
            fh = fh + 1u;
        }
        neg = true;
    }
    // normalise the 64-bit fraction and turn it into f32 hi + lo
    var scale = 0x1p-32f;
    if (fh == 0u) {
        fh = fl;
        fl = 0u;
        scale = 0x1p-64f;
    }
    let lz = countLeadingZeros(fh);
    if (lz > 0u) {
        fh = (fh << lz) | (fl >> (32u - lz));
        fl = fl << lz;
    }
    let unit = scale * bitcast<f32>(u32(127 - i32(lz)) << 23u);
    let fhi = f32(fh & 0xffffff00u) * unit;
    let flo = (f32(fh & 0xffu) + f32(fl) * 0x1p-32f) * unit;
    // r = f * pi/2, pi/2 = 1.5707963705062866 - 4.371138828673793e-8
    let ph = wh_two_prod_f32(fhi, 1.5707963705062866);
    var r = wh_fast_two_sum_f32(ph.x,
        ph.y + (flo * 1.5707963705062866 - fhi * 4.371138828673793e-8));
    if (neg != (x < 0.0)) {
        r = -r;
    }
    if (x < 0.0) {
        q = (4u - q) & 3u;
    }
    return vec3<f32>(r.x, r.y, f32(q));
}

// @fn wh_rem_pio2_f32
// @requires wh_rem_pio2_large_f32 wh_opaque_f32 wh_fast_two_sum_f32
// x = j*pi/2 + r + r_lo: returns (r, r_lo, j mod 4). For |x| < 4096, pi/2 is split into four
// 12-bit parts and a tail so that every j * part is exact (Cody-Waite), the third part taken
// from the remainder before the rounding errors of the two subtractions are added: near a
// multiple of pi/2 the remainder is far smaller than j times that part, and folding the part
// into the small error terms first lost the remainder's low bits (sin(-1033.584) was 11.8 ULP
// off, jax cpu 0.2). Beyond 4096, Payne-Hanek.
fn wh_rem_pio2_f32(x: f32) -> vec3<f32> {
    if (abs(x) >= 4096.0) {
        return wh_rem_pio2_large_f32(x);
    }
    let j = round(x * 0.6366197466850281);
    let r1 = x - j * 1.5703125;
    let w = j * 4.837512969970703e-4;
    let r2 = r1 - w;
    // two-sum error of r1 - w
    let bb = wh_opaque_f32(r2) - r1;
    let e = (r1 - (wh_opaque_f32(r2) - bb)) - (w + bb);
    let v = j * 7.549533620476723e-8;
    let r3 = r2 - v;
    // two-sum error of r2 - v
    let b3 = wh_opaque_f32(r3) - r2;
    let e3 = (r2 - (wh_opaque_f32(r3) - b3)) - (v + b3);
    let tail = (e + e3) - j * 2.5632829192545614e-12 - j * 6.123234262925839e-17;
    let r = wh_fast_two_sum_f32(r3, tail);
    let q = j - 4.0 * floor(j * 0.25);
    return vec3<f32>(r.x, r.y, q);
}

// @fn wh_sin_kernel_f32
// sin(r) for |r| <= pi/4.
fn wh_sin_kernel_f32(r: f32) -> f32 {
    let z = r * r;
    let p = fma(fma(fma(2.7249925551586784e-6, z, -1.9840087043121457e-4), z,
        8.333331905305386e-3), z, -0.1666666716337204);
    return fma(r * z, p, r);
}

// @fn wh_cos_kernel_f32
// cos(r) for |r| <= pi/4.
fn wh_cos_kernel_f32(r: f32) -> f32 {
    let z = r * r;
    let p = fma(fma(fma(-2.730095900460583e-7, z, 2.480059993104078e-5), z,
        -1.38888880610466e-3), z, 4.16666679084301e-2);
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    return w + (((1.0 - w) - hz) + z * z * p);
}

// @fn wh_sin_f32
// @requires wh_rem_pio2_f32 wh_sin_kernel_f32 wh_cos_kernel_f32 wh_nan_f32
fn wh_sin_f32(x: f32) -> f32 {
    if (abs(x) < 0x1p-12f) {
        return x;
    }
    if ((bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u) {
        return wh_nan_f32(x);
    }
    let rq = wh_rem_pio2_f32(x);
    let q = u32(rq.z);
    var v: f32;
    if ((q & 1u) == 0u) {
        v = wh_sin_kernel_f32(rq.x) + rq.y * (1.0 - 0.5 * rq.x * rq.x);
    } else {
        v = wh_cos_kernel_f32(rq.x) - rq.y * rq.x;
    }
    return select(v, -v, q >= 2u);
}

// @fn wh_cos_f32
// @requires wh_rem_pio2_f32 wh_sin_kernel_f32 wh_cos_kernel_f32 wh_nan_f32
fn wh_cos_f32(x: f32) -> f32 {
    if (abs(x) < 0x1p-12f) {
        return 1.0;
    }
    if ((bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u) {
        return wh_nan_f32(x);
    }
    let rq = wh_rem_pio2_f32(x);
    let q = u32(rq.z);
    var v: f32;
    if ((q & 1u) == 0u) {
        v = wh_cos_kernel_f32(rq.x) - rq.y * rq.x;
    } else {
        v = wh_sin_kernel_f32(rq.x) + rq.y * (1.0 - 0.5 * rq.x * rq.x);
    }
    return select(v, -v, q == 1u || q == 2u);
}

// @fn wh_tan_f32
// @requires wh_rem_pio2_f32 wh_nan_f32 wh_opaque_f32 wh_two_prod_f32
fn wh_tan_f32(x: f32) -> f32 {
    if (abs(x) < 0x1p-12f) {
        return x;
    }
    if ((bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u) {
        return wh_nan_f32(x);
    }
    let rq = wh_rem_pio2_f32(x);
    let r = rq.x;
    let z = r * r;
    // sin r = r + sl and cos r = w + cl, each left as an unevaluated sum
    let sl = r * z * fma(fma(fma(2.7249925551586784e-6, z, -1.9840087043121457e-4), z,
        8.333331905305386e-3), z, -0.1666666716337204) + rq.y * (1.0 - 0.5 * z);
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    let cl = ((1.0 - wh_opaque_f32(w)) - hz) + z * z * fma(fma(fma(-2.730095900460583e-7, z,
        2.480059993104078e-5), z, -1.38888880610466e-3), z, 4.16666679084301e-2) - rq.y * r;
    var nh = r;
    var nl = sl;
    var dh = w;
    var dl = cl;
    var sgn = 1.0;
    if ((u32(rq.z) & 1u) != 0u) {
        // tan = -cos / sin
        nh = w;
        nl = cl;
        dh = r;
        dl = sl;
        sgn = -1.0;
    }
    // q = n / d with the division's residual folded back: q + (n - q d) / d
    let q = (nh + nl) / (dh + dl);
    let qd = wh_two_prod_f32(q, dh);
    let res = ((nh - qd.x) - qd.y) + nl - q * dl;
    return sgn * (q + res / (dh + dl));
}

// @fn wh_atan_kernel_f32
// atan(t) for |t| <= 7/16.
fn wh_atan_kernel_f32(t: f32) -> f32 {
    let z = t * t;
    let p = fma(fma(fma(fma(fma(fma(-0.03829481080174446, z, 0.07028349488973618), z,
        -0.09009037911891937), z, 0.11105795204639435), z, -0.1428554803133011), z,
        0.19999997317790985), z, -0.3333333432674408);
    return fma(t * z, p, t);
}

// @fn wh_atan_pos_f32
// @requires wh_atan_kernel_f32 wh_opaque_f32
// atan(a) for a >= 0 (a may be +inf): reduced around 0, 1/2, 1, 3/2 and infinity so that the
// final sum never cancels.
fn wh_atan_pos_f32(a: f32) -> f32 {
    if (a > 0x1p26f) {
        return 1.5707963705062866;
    }
    if (a < 0.4375) {
        return wh_atan_kernel_f32(a);
    }
    if (a < 0.6875) {
        return 0.46364760398864746
            + wh_opaque_f32(wh_atan_kernel_f32((2.0 * a - 1.0) / (2.0 + a)) + 5.01215868808913e-9);
    }
    if (a < 1.1875) {
        return 0.7853981852531433
            + wh_opaque_f32(wh_atan_kernel_f32((a - 1.0) / (a + 1.0)) - 2.1855694143368964e-8);
    }
    if (a < 2.4375) {
        return 0.9827937483787537
            + wh_opaque_f32(wh_atan_kernel_f32((a - 1.5) / (1.0 + 1.5 * a)) - 2.5131424052915463e-8);
    }
    return 1.5707963705062866 + wh_opaque_f32(wh_atan_kernel_f32(-1.0 / a) - 4.371138828673793e-8);
}

// @fn wh_atan_f32
// @requires wh_atan_pos_f32 wh_copysign_f32 wh_is_nan_f32
fn wh_atan_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x) || abs(x) < 0x1p-12f) {
        return x;
    }
    return wh_copysign_f32(wh_atan_pos_f32(abs(x)), x);
}

// @fn wh_atan2_f32
// @requires wh_atan_pos_f32 wh_copysign_f32 wh_is_nan_f32 wh_is_inf_f32 wh_opaque_f32 wh_div_f32
fn wh_atan2_f32(y: f32, x: f32) -> f32 {
    if (wh_is_nan_f32(x) || wh_is_nan_f32(y)) {
        return x + y;
    }
    let xneg = (bitcast<u32>(x) & 0x80000000u) != 0u;
    var a: f32;
    if (y == 0.0) {
        a = select(0.0, 3.1415927410125732, xneg);
    } else if (x == 0.0) {
        a = 1.5707963705062866;
    } else if (wh_is_inf_f32(x)) {
        if (wh_is_inf_f32(y)) {
            a = select(0.7853981852531433, 2.356194490192345, xneg);
        } else {
            a = select(0.0, 3.1415927410125732, xneg);
        }
    } else if (wh_is_inf_f32(y)) {
        a = 1.5707963705062866;
    } else {
        // wh_div_f32: NVIDIA's built-in quotient was 0 for divisors past 2^126.
        let t = wh_atan_pos_f32(wh_div_f32(abs(y), abs(x)));
        if (xneg) {
            a = 3.1415927410125732 - wh_opaque_f32(t + 8.742277657347586e-8);
        } else {
            a = t;
        }
    }
    return wh_copysign_f32(a, y);
}

// @fn wh_asin_poly_f32
// (asin(s) - s) / s^3 as a polynomial in z = s^2, z <= 1/4.
fn wh_asin_poly_f32(z: f32) -> f32 {
    return fma(fma(fma(fma(fma(fma(0.03097454085946083, z, 0.01057441532611847), z,
        0.02361181750893593), z, 0.030269138514995575), z, 0.044647663831710815), z,
        0.07499992102384567), z, 0.1666666716337204);
}

// @fn wh_asin_f32
// @requires wh_asin_poly_f32 wh_copysign_f32 wh_nan_f32 wh_is_nan_f32 wh_two_prod_f32 wh_opaque_f32
fn wh_asin_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a > 1.0) {
        return wh_nan_f32(x);
    }
    if (a < 0x1p-12f) {
        return x;
    }
    if (a <= 0.5) {
        let z = a * a;
        return wh_copysign_f32(fma(a * z, wh_asin_poly_f32(z), a), x);
    }
    // asin(a) = pi/2 - 2 asin(s), s = sqrt((1 - a)/2), with s carried to extra precision.
    let z = 0.5 * (1.0 - a);
    let s = sqrt(z);
    let ss = wh_two_prod_f32(s, s);
    let sl = select(((z - ss.x) - ss.y) / (2.0 * s), 0.0, s == 0.0);
    let tail = 2.0 * (sl + s * z * wh_asin_poly_f32(z));
    // The small part is opaque so that no compiler regroups the sum (1.73 ULP on NVIDIA).
    let r = (1.5707963705062866 - 2.0 * s) + wh_opaque_f32(-4.371138828673793e-8 - tail);
    return wh_copysign_f32(r, x);
}

// @fn wh_acos_f32
// @requires wh_asin_poly_f32 wh_nan_f32 wh_is_nan_f32 wh_two_prod_f32 wh_opaque_f32
fn wh_acos_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a > 1.0) {
        return wh_nan_f32(x);
    }
    if (a <= 0.5) {
        let z = x * x;
        let p = fma(x * z, wh_asin_poly_f32(z), x);
        return 1.5707963705062866 - wh_opaque_f32(p + 4.371138828673793e-8);
    }
    let z = 0.5 * (1.0 - a);
    let s = sqrt(z);
    let ss = wh_two_prod_f32(s, s);
    let sl = select(((z - ss.x) - ss.y) / (2.0 * s), 0.0, s == 0.0);
    let v = 2.0 * s + 2.0 * (sl + s * z * wh_asin_poly_f32(z));
    if (x > 0.0) {
        return v;
    }
    return 3.1415927410125732 - wh_opaque_f32(v + 8.742277657347586e-8);
}

// @fn wh_sinh_f32
// @requires wh_expm1_f32 wh_exp_f32 wh_copysign_f32 wh_is_nan_f32 wh_inf_f32 wh_opaque_f32
fn wh_sinh_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a >= 89.5) {
        return wh_inf_f32(x);
    }
    if (a < 0x1p-12f) {
        return x;
    }
    if (a < 1.0) {
        let z = a * a;
        let p = fma(fma(fma(fma(2.5456706964632758e-8, z, 2.7553769541555084e-6), z,
            1.984128321055323e-4), z, 8.333333767950535e-3), z, 0.1666666716337204);
        return wh_copysign_f32(fma(a * z, p, a), x);
    }
    var r: f32;
    if (a < 9.0) {
        let e = wh_expm1_f32(a);
        r = 0.5 * (e + e / (e + 1.0));
    } else if (a < 88.0) {
        r = 0.5 * wh_exp_f32(a);
    } else {
        // e^a / 2 past FLT_MAX's logarithm as (e^(a/2) / 2) e^(a/2); the half goes through
        // wh_opaque_f32 so that no compiler reorders it to (e^(a/2))^2 / 2, which overflows (the
        // NVIDIA H200's Vulkan driver gave inf for sinh(89.009) before it was opaque).
        let t = wh_exp_f32(0.5 * a);
        r = wh_opaque_f32(0.5 * t) * t;
    }
    return wh_copysign_f32(r, x);
}

// @fn wh_cosh_f32
// @requires wh_expm1_f32 wh_exp_f32 wh_is_nan_f32 wh_inf_f32 wh_opaque_f32
fn wh_cosh_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a >= 89.5) {
        return wh_inf_f32(1.0);
    }
    if (a < 0x1p-12f) {
        return 1.0;
    }
    if (a < 0.3466) {
        let e = wh_expm1_f32(a);
        return 1.0 + (e * e) / (2.0 + 2.0 * e);
    }
    if (a < 9.0) {
        let t = wh_exp_f32(a);
        return 0.5 * t + 0.5 / t;
    }
    if (a < 88.0) {
        return 0.5 * wh_exp_f32(a);
    }
    // As in wh_sinh_f32: the half is opaque, so that the product cannot overflow first.
    let t = wh_exp_f32(0.5 * a);
    return wh_opaque_f32(0.5 * t) * t;
}

// @fn wh_tanh_f32
// @requires wh_exp_poly_f32 wh_copysign_f32 wh_is_nan_f32
// Without branches (llvmpipe runs every branch under a lane mask, and a lane of each range in
// one vector is the rule): both ranges are computed and one chosen. |x| < 1: an odd
// polynomial. 1 <= |x| <= 9.1: 1 - 2 / (e^2|x| + 1), with e^2|x| - 1 computed as wh_expm1_f32
// does for arguments in [2, 18.2] (k >= 3 there, so none of its special cases applies); the
// clamp keeps the unused lanes finite. Within 0.86 ULP on 8M samples (the branching form:
// 0.94; Mesa rounds the straight-line code a little differently for 1 <= |x| < 3.2).
fn wh_tanh_f32(x: f32) -> f32 {
    let a = abs(x);
    let z = a * a;
    let p = fma(fma(fma(fma(fma(fma(fma(fma(-4.8467110900674015e-05, z, 0.000337689823936671), z, -0.0012421575374901295), z, 0.00347838643938303), z, -0.008826250210404396), z, 0.0218625757843256), z, -0.05396759510040283), z, 0.13333331048488617), z, -0.3333333432674408);
    let small = fma(a * z, p, a);
    let y = clamp(2.0 * a, 2.0, 18.2);
    let k = round(y * 1.4426950216293335);
    let r = fma(-k, 1.428606765330187e-6, fma(-k, 0.693145751953125, y));
    let t = bitcast<f32>(u32(i32(k) + 127) << 23u);
    let e = fma(t, wh_exp_poly_f32(r), t - 1.0);
    let large = select(1.0 - 2.0 / (e + 2.0), 1.0, a > 9.1);
    let v = wh_copysign_f32(select(large, small, a < 1.0), x);
    return select(v, x, wh_is_nan_f32(x) || a < 0x1p-12f);
}

// @fn wh_asinh_f32
// @requires wh_log_f32 wh_log1p_f32 wh_copysign_f32 wh_is_nan_f32
fn wh_asinh_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x) || a < 0x1p-12f || bitcast<u32>(a) == 0x7f800000u) {
        return x;
    }
    if (a >= 0x1p30f) {
        return wh_copysign_f32(wh_log_f32(a) + 0.6931471824645996, x);
    }
    var r: f32;
    if (a > 2.0) {
        r = wh_log_f32(2.0 * a + 1.0 / (sqrt(a * a + 1.0) + a));
    } else {
        let z = a * a;
        r = wh_log1p_f32(a + z / (1.0 + sqrt(1.0 + z)));
    }
    return wh_copysign_f32(r, x);
}

// @fn wh_acosh_f32
// @requires wh_log_f32 wh_log1p_f32 wh_nan_f32 wh_is_nan_f32
fn wh_acosh_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (x < 1.0) {
        return wh_nan_f32(x);
    }
    if (x >= 0x1p30f) {
        if (bitcast<u32>(x) >= 0x7f800000u) {
            return x;
        }
        return wh_log_f32(x) + 0.6931471824645996;
    }
    if (x > 2.0) {
        return wh_log_f32(2.0 * x - 1.0 / (x + sqrt(x * x - 1.0)));
    }
    let t = x - 1.0;
    return wh_log1p_f32(t + sqrt(2.0 * t + t * t));
}

// @fn wh_atanh_f32
// @requires wh_log1p_f32 wh_copysign_f32 wh_nan_f32 wh_inf_f32 wh_is_nan_f32
fn wh_atanh_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a >= 1.0) {
        if (a == 1.0) {
            return wh_inf_f32(x);
        }
        return wh_nan_f32(x);
    }
    if (a < 0x1p-12f) {
        return x;
    }
    var r: f32;
    if (a < 0.5) {
        r = 0.5 * wh_log1p_f32(2.0 * a + 2.0 * a * a / (1.0 - a));
    } else {
        r = 0.5 * wh_log1p_f32(2.0 * a / (1.0 - a));
    }
    return wh_copysign_f32(r, x);
}

// @fn wh_erf_small_f32
// @requires wh_opaque_f32
// erf(x) for |x| <= 1: x (2/sqrt(pi) + x^2 Q(x^2)), the constant carried in two parts.
fn wh_erf_small_f32(x: f32) -> f32 {
    if (abs(x) < 0x1p-60f) {
        return x * 1.128379225730896;
    }
    let z = x * x;
    let q = fma(fma(fma(fma(fma(fma(-1.021674779622117e-5, z, 1.1451736645540223e-4), z,
        -8.508544997312129e-4), z, 5.222611129283905e-3), z, -0.026865946128964424), z,
        0.11283790320158005), z, -0.37612637877464294);
    // the opaque x keeps the compiler from factoring x out of the two products
    return fma(wh_opaque_f32(x), 1.128379225730896, x * fma(z, q, -5.8635382771399236e-8));
}

// @fn wh_erfc_pos_f32
// @requires wh_exp_df_f32 wh_two_prod_f32
// erfc(a) for 0.5 <= a: exp(-a^2) * h(1/a) / a with h fitted on three intervals.
fn wh_erfc_pos_f32(a: f32) -> f32 {
    if (a > 10.1) {
        return 0.0;
    }
    let t = 1.0 / a;
    var h: f32;
    if (a < 1.6) {
        let u = t - 1.25;
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(3.666029806481674e-5, u,
            1.9636259821709245e-4), u, -1.0053872829303145e-3), u, 2.2816327400505543e-3), u,
            -4.008117131888866e-3), u, 5.86898485198617e-3), u, -5.742452573031187e-3), u,
            -2.8686877340078354e-3), u, 0.03673933818936348), u, -0.1359654664993286), u,
            0.39128047227859497);
    } else if (a < 4.0) {
        let u = t - 0.4375;
        h = fma(fma(fma(fma(fma(fma(fma(-0.17789815366268158, u, 0.11203128844499588), u,
            0.016906674951314926), u, -0.11885488778352737), u, 0.14755010604858398), u,
            -0.061578236520290375), u, -0.16112859547138214), u, 0.5210682153701782);
    } else {
        h = fma(fma(fma(fma(fma(fma(0.07550378143787384, t, -0.5296733975410461), t,
            0.539033055305481), t, -0.01401092391461134), t, -0.28114965558052063), t,
            -3.281066892668605e-5), t, 0.5641900300979614);
    }
    // exp(-a^2) with a^2 = hi + lo exactly.
    let sq = wh_two_prod_f32(a, a);
    return wh_exp_df_f32(-sq.x, -sq.y) * (h / a);
}

// @fn wh_erf_f32
// @requires wh_erf_small_f32 wh_erfc_pos_f32 wh_copysign_f32 wh_is_nan_f32
fn wh_erf_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a <= 1.0) {
        return wh_erf_small_f32(x);
    }
    if (a > 4.0) {
        return wh_copysign_f32(1.0, x);
    }
    return wh_copysign_f32(1.0 - wh_erfc_pos_f32(a), x);
}

// @fn wh_erfc_f32
// @requires wh_erf_small_f32 wh_erfc_pos_f32 wh_is_nan_f32
fn wh_erfc_f32(x: f32) -> f32 {
    let a = abs(x);
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (a < 0.5) {
        return 1.0 - wh_erf_small_f32(x);
    }
    let c = wh_erfc_pos_f32(a);
    if (x < 0.0) {
        return 2.0 - c;
    }
    return c;
}

// @fn wh_sqrt_f32
// @requires wh_two_prod_f32
// Correctly rounded square root on any driver: the built-in's result (a few ULP at worst) is
// corrected once with an exact residual (past 2^126 the built-in's, as the square could
// overflow). Arguments under 2^-100 are scaled by 2^64 first (the root by 2^-32 after), so
// that the residual stays a normal number: a driver that flushes subnormals lost the
// correction there (0.89 ULP on NVIDIA).
fn wh_sqrt_f32(x: f32) -> f32 {
    let small = x < 0x1p-100f;
    let xs = select(x, x * 0x1p64f, small);
    if (!(xs > 0.0) || x > 0x1p126f) {
        // zeros, negative numbers, NaN, the largest numbers and infinity
        return sqrt(x);
    }
    let s = sqrt(xs);
    let p = wh_two_prod_f32(s, s);
    let r = (xs - p.x) - p.y;
    return (s + r * (0.5 / s)) * select(1.0, 0x1p-32f, small);
}

// @fn wh_rsqrt_f32
// @requires wh_nan_f32 wh_two_prod_f32
// 1/sqrt(x) within 1 ULP: x is scaled into [1, 4) by an even power of two and the built-in's
// result is corrected by one Newton step with an fma residual.
fn wh_rsqrt_f32(x: f32) -> f32 {
    var ix = bitcast<u32>(x);
    if (!(x > 0.0) || ix >= 0x7f800000u) {
        if (x == 0.0) {
            return 1.0 / x;
        }
        if (ix == 0x7f800000u) {
            return 0.0;
        }
        return wh_nan_f32(x);
    }
    var k = 0;
    if (ix < 0x00800000u) {
        ix = bitcast<u32>(x * 0x1p24f);
        k = -24;
    }
    let e = i32(ix >> 23u) - 127 + k;
    let ee = e & ~1;
    let m = bitcast<f32>((ix & 0x007fffffu) | (u32(127 + e - ee) << 23u));
    var y = inverseSqrt(m);
    y = y + y * 0.5 * (1.0 - m * y * y);
    let t = wh_two_prod_f32(y, y);
    let u = wh_two_prod_f32(m, t.x);
    let r = ((1.0 - u.x) - u.y) - m * t.y;
    let z = y + (y * 0.5) * r;
    return z * bitcast<f32>(u32(127 - ee / 2) << 23u);
}

// @fn wh_cbrt_f32
// @requires wh_ldexp_f32 wh_two_prod_f32
fn wh_cbrt_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a == 0.0 || bitcast<u32>(a) >= 0x7f800000u) {
        return x + x;
    }
    var ia = bitcast<u32>(a);
    var e = -127;
    if (ia < 0x00800000u) {
        ia = bitcast<u32>(a * 0x1p24f);
        e = e - 24;
    }
    e = e + i32(ia >> 23u);
    // a = m * 2^e with m in [1, 2); make e a multiple of 3 and m in [1, 8).
    let q = e - 3 * i32(floor(f32(e) / 3.0));
    let m = bitcast<f32>((ia & 0x007fffffu) | 0x3f800000u) * f32(1 << u32(q));
    let k = (e - q) / 3;
    // initial guess, then Newton steps on y^3 = m
    var y = fma(fma(-0.012327, m, 0.2538), m, 0.75853);
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    // last step with an fma residual
    let y2 = wh_two_prod_f32(y, y);
    let y3 = wh_two_prod_f32(y2.x, y);
    let r = ((y3.x - m) + y3.y) + y2.y * y;
    y = y - r / (3.0 * y2.x);
    let v = wh_ldexp_f32(y, k);
    return select(v, -v, x < 0.0);
}

// @fn wh_logistic_f32
// @requires wh_exp_f32 wh_is_nan_f32
// 1 / (1 + exp(-x)); for x < 0 computed as e / (1 + e) with e = exp(x), so that the tiny
// results for large negative x keep their relative accuracy. One exponential, e = exp(-|x|),
// serves both, chosen without branches (llvmpipe ran both exponentials for a vector holding
// both signs).
fn wh_logistic_f32(x: f32) -> f32 {
    let e = wh_exp_f32(-abs(x));
    let d = 1.0 + e;
    let v = select(e / d, 1.0 / d, x >= 0.0);
    return select(v, x, wh_is_nan_f32(x));
}

// @fn wh_round_afz_f32
// Round half away from zero.
fn wh_round_afz_f32(x: f32) -> f32 {
    let t = trunc(x);
    let d = abs(x - t);
    return select(t, t + sign(x), d >= 0.5);
}

// @fn wh_rem_f32
// @requires wh_nan_f32
// C fmod: x - trunc(x/y) * y, exact. Long division on the integer significands, one
// exponent step (up to 8 bits) per iteration, at most 33 iterations.
fn wh_rem_f32(x: f32, y: f32) -> f32 {
    let ux = bitcast<u32>(x);
    let uy = bitcast<u32>(y);
    let ax = ux & 0x7fffffffu;
    let ay = uy & 0x7fffffffu;
    let sx = ux & 0x80000000u;
    if (ax >= 0x7f800000u || ay > 0x7f800000u || ay == 0u) {
        return wh_nan_f32(x + y);
    }
    if (ay == 0x7f800000u || ax < ay) {
        return x;
    }
    var ex = i32(ax >> 23u);
    var ey = i32(ay >> 23u);
    var mx = ax & 0x007fffffu;
    var my = ay & 0x007fffffu;
    if (ex == 0) {
        ex = 1;
    } else {
        mx = mx | 0x00800000u;
    }
    if (ey == 0) {
        ey = 1;
    } else {
        my = my | 0x00800000u;
    }
    // mx * 2^ex mod my * 2^ey, with mx, my < 2^24: shift mx left by at most 8 bits a step
    // (keeps it below 2^32) and reduce.
    var d = ex - ey;
    mx = mx % my;
    for (var i = 0; i < 40; i = i + 1) {
        if (d <= 0 || mx == 0u) {
            break;
        }
        let s = min(d, 8);
        mx = (mx << u32(s)) % my;
        d = d - s;
    }
    if (mx == 0u) {
        return bitcast<f32>(sx);
    }
    // result = mx * 2^(ey - 150); normalize, or leave subnormal
    let sh = i32(countLeadingZeros(mx)) - 8;
    if (ey - sh < 1) {
        return bitcast<f32>(sx | (mx << u32(ey - 1)));
    }
    return bitcast<f32>(sx | (u32(ey - sh) << 23u) | ((mx << u32(sh)) & 0x007fffffu));
}

// @fn wh_next_after_f32
// @requires wh_is_nan_f32
fn wh_next_after_f32(x: f32, y: f32) -> f32 {
    if (wh_is_nan_f32(x) || wh_is_nan_f32(y)) {
        return x + y;
    }
    let ux = bitcast<u32>(x);
    let uy = bitcast<u32>(y);
    if (ux == uy || x == y) {
        return y;
    }
    if ((ux & 0x7fffffffu) == 0u) {
        return bitcast<f32>((uy & 0x80000000u) | 1u);
    }
    // away from zero when y is beyond x in x's direction
    let up = (x < y) == (x > 0.0);
    return bitcast<f32>(select(ux - 1u, ux + 1u, up));
}

// @fn wh_fast_two_sum_f32
// @requires wh_opaque_f32
// (s, e) with s = a + b rounded and s + e = a + b exactly, for |a| >= |b|.
fn wh_fast_two_sum_f32(a: f32, b: f32) -> vec2<f32> {
    let s = a + b;
    return vec2<f32>(s, b - (wh_opaque_f32(s) - a));
}

// @fn wh_log_df_f32
// @requires wh_split_f32 wh_two_prod_f32 wh_fast_two_sum_f32 wh_opaque_f32
// ln(x) as an unevaluated sum hi + lo accurate to about 2^-36 relative, for finite x > 0.
fn wh_log_df_f32(x: f32) -> vec2<f32> {
    var ix = bitcast<u32>(x);
    var e = -127;
    if (ix < 0x00800000u) {
        ix = bitcast<u32>(x * 0x1p23f);
        e = e - 23;
    }
    e = e + i32(ix >> 23u);
    var m = bitcast<f32>((ix & 0x007fffffu) | 0x3f800000u);
    if (m > 1.4142135381698608) {
        m = m * 0.5;
        e = e + 1;
    }
    // s = (m - 1) / (m + 1) = s_h + s_l
    let u = m - 1.0;
    let mp1 = m + 1.0;
    let v = 1.0 / mp1;
    let s_h = wh_split_f32(u * v);
    let t_h = wh_split_f32(mp1);
    let t_l = m - (wh_opaque_f32(t_h) - 1.0);
    let s_l = v * ((u - s_h * t_h) - s_h * t_l);
    // ln(m) = 2 atanh(s) = 2s (1 + w)
    let s = s_h + s_l;
    let z = s * s;
    let w = z * 0.5 * fma(fma(fma(fma(0.1936265379190445, z, 0.22191400825977325), z,
        0.28571754693984985), z, 0.3999999761581421), z, 0.6666666865348816);
    let lm = wh_fast_two_sum_f32(2.0 * s_h, 2.0 * s_l + 2.0 * s * w);
    // + e ln2, with ln2 = 0.693145751953125 (exact times e) + 1.4286067653e-6 + 5.4979e-14
    let fe = f32(e);
    let a = wh_fast_two_sum_f32(fe * 0.693145751953125, lm.x);
    let b = wh_two_prod_f32(fe, 1.428606765330187e-6);
    let lo = a.y + (lm.y + (b.y + fe * 5.497923148104107e-14));
    let c = wh_fast_two_sum_f32(a.x, b.x);
    return wh_fast_two_sum_f32(c.x, c.y + lo);
}

// @fn wh_exp_df_f32
// @requires wh_exp_poly_f32 wh_ldexp_f32 wh_inf_f32 wh_opaque_f32
// exp(h + l) for a double-float argument (|l| <= ulp(h)).
fn wh_exp_df_f32(h: f32, l: f32) -> f32 {
    if (h > 88.72283935546875) {
        return wh_inf_f32(1.0);
    }
    if (h < -104.0) {
        return 0.0;
    }
    let k = round(h * 1.4426950216293335);
    // the opaque keeps the compiler from adding h and l first (which would drop l)
    let r = wh_opaque_f32(h - k * 0.693145751953125) + (l - k * 1.428606765330187e-6);
    return wh_ldexp_f32(1.0 + wh_exp_poly_f32(r), i32(k));
}

// @fn wh_pow_f32
// @requires wh_log_df_f32 wh_exp_df_f32 wh_two_prod_f32 wh_fast_two_sum_f32 wh_is_nan_f32
// @requires wh_nan_f32 wh_inf_f32
// x^y with C99 special cases; exp(y ln x) with ln x and the product carried in double-float.
fn wh_pow_f32(x: f32, y: f32) -> f32 {
    let ax = abs(x);
    let ay = abs(y);
    if (y == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (wh_is_nan_f32(x) || wh_is_nan_f32(y)) {
        return x + y;
    }
    let y_int = floor(y) == y;
    let y_odd = y_int && ay < 0x1p24f && (i32(ay) & 1) == 1;
    let x_neg = (bitcast<u32>(x) & 0x80000000u) != 0u;
    if (bitcast<u32>(ay) == 0x7f800000u) {
        if (ax == 1.0) {
            return 1.0;
        }
        if ((ax > 1.0) == (y > 0.0)) {
            return wh_inf_f32(1.0);
        }
        return 0.0;
    }
    // the sign the result carries for negative x (and -0, -inf) with odd integer y
    let neg = x_neg && y_odd;
    if (x == 0.0 || bitcast<u32>(ax) == 0x7f800000u) {
        // 0^y and inf^y
        let big = (x == 0.0) == (y < 0.0);
        var r = 0.0;
        if (big) {
            r = wh_inf_f32(1.0);
        }
        return select(r, -r, neg);
    }
    if (x_neg && !y_int) {
        return wh_nan_f32(x);
    }
    let l = wh_log_df_f32(ax);
    var r: f32;
    if (abs(l.x) * ay > 256.0) {
        // certain overflow or underflow (also keeps the products below finite)
        r = select(0.0, wh_inf_f32(1.0), (l.x > 0.0) == (y > 0.0));
    } else {
        let p = wh_two_prod_f32(l.x, y);
        let q = wh_fast_two_sum_f32(p.x, p.y + l.y * y);
        r = wh_exp_df_f32(q.x, q.y);
    }
    return select(r, -r, neg);
}

// @fn wh_erf_inv_f32
// @requires wh_log1p_f32 wh_is_nan_f32 wh_nan_f32 wh_inf_f32
// Inverse error function: M. Giles, "Approximating the erfinv function" (GPU Computing Gems
// Jade, 2011), single-precision variant, with w = -log1p(-x*x) exactly as XLA's CHLO
// decomposition computes it, so results agree with XLA's to about 1 ULP - including its loss
// of accuracy as |x| -> 1, where x*x rounds away the digits of 1 - x^2.
fn wh_erf_inv_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x)) {
        return x;
    }
    let a = abs(x);
    if (a >= 1.0) {
        if (a == 1.0) {
            return wh_inf_f32(x);
        }
        return wh_nan_f32(x);
    }
    var w = -wh_log1p_f32(-x * x);
    var p: f32;
    if (w < 5.0) {
        w = w - 2.5;
        p = 2.81022636e-08;
        p = p * w + 3.43273939e-07;
        p = p * w - 3.5233877e-06;
        p = p * w - 4.39150654e-06;
        p = p * w + 0.00021858087;
        p = p * w - 0.00125372503;
        p = p * w - 0.00417768164;
        p = p * w + 0.246640727;
        p = p * w + 1.50140941;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = p * w + 0.000100950558;
        p = p * w + 0.00134934322;
        p = p * w - 0.00367342844;
        p = p * w + 0.00573950773;
        p = p * w - 0.0076224613;
        p = p * w + 0.00943887047;
        p = p * w + 1.00167406;
        p = p * w + 2.83297682;
    }
    return p * x;
}

// @fn wh_sinpi_cospi_f32
// @requires wh_sin_kernel_f32 wh_cos_kernel_f32
// (sin(pi x), cos(pi x)) for finite x, with the argument reduced exactly.
fn wh_sinpi_cospi_f32(x: f32) -> vec2<f32> {
    // r = x - 2 round(x / 2) in [-1, 1], exact
    let r = x - 2.0 * round(0.5 * x);
    let q = round(2.0 * r);
    let t = (r - 0.5 * q) * 3.1415927410125732;
    let s = wh_sin_kernel_f32(t);
    let c = wh_cos_kernel_f32(t);
    let iq = i32(q) & 3;
    if (iq == 0) {
        return vec2<f32>(s, c);
    }
    if (iq == 1) {
        return vec2<f32>(c, -s);
    }
    if (iq == 2) {
        return vec2<f32>(-s, -c);
    }
    return vec2<f32>(-c, s);
}

// @fn wh_lgamma2_f32
// lgamma(2 + t) for t in [-1/2, 1] (a fit of lgamma(2 + t) / t around t = 1/4).
fn wh_lgamma2_f32(t: f32) -> f32 {
    let u = t - 0.25;
    return t * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-1.79925136762904e-05, u, 4.4632623030338436e-05), u, -8.429839363088831e-05), u, 0.00021740728698205203), u, -0.0005907983868382871), u, 0.0016164274420589209), u, -0.004662562161684036), u, 0.014688166789710522), u, -0.05429540574550629), u, 0.2922384440898895), u, 0.49948686361312866);
}

// @fn wh_lgamma_pos_f32
// @requires wh_log_f32 wh_log1p_f32 wh_lgamma2_f32
// log(Gamma(x)) for finite x > 0: Stirling's series from 12 on; below it lgamma(2 + t) and the
// recurrence Gamma(x + 1) = x Gamma(x), arranged so that nothing cancels near the zeros at 1
// and 2.
fn wh_lgamma_pos_f32(x: f32) -> f32 {
    if (x >= 12.0) {
        let z = 1.0 / (x * x);
        let corr = (0.0833333333 - z * (0.00277777778 - z * (7.93650794e-4 - z * 5.95238095e-4))) / x;
        return (x - 0.5) * (wh_log_f32(x) - 1.0) + (0.41893853320467274 + corr);
    }
    if (x >= 3.0) {
        // lgamma(x) = lgamma(2 + t) + log((2 + t)(3 + t)...(x - 1))
        let t = x - floor(x);
        var prod = 1.0;
        var b = 2.0 + t;
        for (var i = 0; i < 10; i = i + 1) {
            if (b >= x - 0.5) {
                break;
            }
            prod = prod * b;
            b = b + 1.0;
        }
        return wh_lgamma2_f32(t) + wh_log_f32(prod);
    }
    if (x >= 1.5) {
        return wh_lgamma2_f32(x - 2.0);
    }
    if (x >= 0.5) {
        let t = x - 1.0;
        return wh_lgamma2_f32(t) - wh_log1p_f32(t);
    }
    return wh_lgamma2_f32(x) - (wh_log_f32(x) + wh_log1p_f32(x));
}

// @fn wh_lgamma_f32
// @requires wh_lgamma_pos_f32 wh_sinpi_cospi_f32 wh_log_f32 wh_is_nan_f32 wh_inf_f32
// log|Gamma(x)|; +inf at the poles (0 and the negative integers) and at +-inf.
fn wh_lgamma_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x)) {
        return x;
    }
    let ax = abs(x);
    if (bitcast<u32>(ax) == 0x7f800000u || (x <= 0.0 && floor(x) == x)) {
        return wh_inf_f32(1.0);
    }
    if (x > 0.0) {
        return wh_lgamma_pos_f32(x);
    }
    // reflection: lgamma(x) = log(pi / |x sin(pi x)|) - lgamma(-x)
    if (ax < 0x1p-20f) {
        return -wh_log_f32(ax);
    }
    let s = abs(wh_sinpi_cospi_f32(x).x);
    return 1.1447298858494002 - wh_log_f32(ax * s) - wh_lgamma_pos_f32(ax);
}

// @fn wh_digamma_f32
// @requires wh_log_f32 wh_sinpi_cospi_f32 wh_is_nan_f32 wh_nan_f32 wh_opaque_f32
// psi(x) = d/dx log Gamma(x): the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then
// the asymptotic series; reflection for x < 0. NaN at the poles and at -inf.
fn wh_digamma_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x) || x == bitcast<f32>(0x7f800000u)) {
        return x;
    }
    if (x <= 0.0 && floor(x) == x) {
        return wh_nan_f32(x);
    }
    if (abs(x) < 0x1p-20f) {
        return -1.0 / x - 0.5772156649015329;
    }
    // on [1, 2], around the positive root x0 = 1.46163214496836...: a fit of psi(x0 + t) / t
    // (0, 1) and (2, 3] are moved into [1, 2] by one step of the recurrence
    var y0 = x;
    var step: f32 = 0.0;
    if (x > 0.0 && x < 1.0) {
        y0 = x + 1.0;
        step = -1.0 / x;
    } else if (x > 2.0 && x <= 3.0) {
        y0 = x - 1.0;
        step = 1.0 / y0;
    }
    if (y0 >= 1.0 && y0 <= 2.0) {
        let t = wh_opaque_f32(y0 - 1.4616321325302124) - 1.243815006546356e-8;
        let u = t - 0.04;
        return step + t * fma(fma(fma(fma(fma(fma(fma(fma(fma(-0.0159063171595335, u, 0.02367541939020157), u, -0.025738222524523735), u, 0.03907358646392822), u, -0.0616229809820652), u, 0.0946117714047432), u, -0.14778290688991547), u, 0.23981332778930664), u, -0.42284342646598816), u, 0.9503651261329651);
    }
    var acc = 0.0;
    var y = x;
    if (x < 0.0) {
        // psi(x) = psi(-x) - 1/x - pi cot(pi x)
        let sc = wh_sinpi_cospi_f32(x);
        acc = -1.0 / x - 3.1415927410125732 * sc.y / sc.x;
        y = -x;
    }
    for (var i = 0; i < 10; i = i + 1) {
        if (y >= 10.0) {
            break;
        }
        acc = acc - 1.0 / y;
        y = y + 1.0;
    }
    let z = 1.0 / (y * y);
    let series = z * (0.0833333333 - z * (0.00833333333 - z * (0.00396825397
        - z * 0.00416666667)));
    return acc + (wh_log_f32(y) - 0.5 / y - series);
}

// @fn wh_bessel_i1e_f32
// @requires wh_exp_f32 wh_is_nan_f32 wh_is_inf_f32 wh_copysign_f32
// Exponentially scaled modified Bessel function of the first kind, order 1: I1(x) exp(-|x|).
// |x| <= 8: x (I1(x)/x as a polynomial in x^2) exp(-|x|); beyond, a fit of
// I1(x) exp(-x) sqrt(x) in 1/x.
fn wh_bessel_i1e_f32(x: f32) -> f32 {
    if (wh_is_nan_f32(x)) {
        return x;
    }
    if (wh_is_inf_f32(x)) {
        // h / sqrt(a) below gave inf at a = inf on one lavapipe host (AMD EPYC with AVX-512).
        return wh_copysign_f32(0.0, x);
    }
    let a = abs(x);
    if (a <= 8.0) {
        let z = a * a;
        return x * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(6.3589024913873835e-21, z, 9.338660252619013e-19), z, 5.678116596259132e-16), z, 1.47632150645019e-13), z, 3.3728023846046895e-11), z, 5.6494275924023896e-09), z, 6.781957040402631e-07), z, 5.425325070973486e-05), z, 0.002604167675599456), z, 0.0625), z, 0.5) * wh_exp_f32(-a);
    }
    let t = 1.0 / a;
    let h = fma(fma(fma(fma(fma(fma(fma(-10.16189956665039, t, 2.379142999649048), t, -0.4306406080722809), t, -0.03759874403476715), t, -0.04156003147363663), t, -0.04674070328474045), t, -0.14960341155529022), t, 0.3989422917366028);
    return wh_copysign_f32(h / sqrt(a), x);
}

// @fn wh_zeta_f32
// @requires wh_pow_f32 wh_is_nan_f32 wh_nan_f32 wh_inf_f32
// Hurwitz zeta(s, q) = sum over k >= 0 of (q + k)^-s, for s > 1: the first terms summed until
// q + k >= 9 + s/2, the rest by Euler-Maclaurin (8 Bernoulli terms). As XLA: s = 1 gives +inf,
// s < 1 NaN, q a non-positive integer +inf, q < 0 otherwise NaN unless s is an integer.
// Negative q below -8 is not supported (NaN).
fn wh_zeta_f32(s: f32, q: f32) -> f32 {
    if (wh_is_nan_f32(s) || wh_is_nan_f32(q)) {
        return s + q;
    }
    if (s == 1.0) {
        return wh_inf_f32(1.0);
    }
    if (s < 1.0) {
        return wh_nan_f32(s);
    }
    if (q <= 0.0) {
        if (floor(q) == q) {
            return wh_inf_f32(1.0);
        }
        if (floor(s) != s || q < -8.0) {
            return wh_nan_f32(s);
        }
    }
    var sum: f32 = 0.0;
    var a = q;
    // start the asymptotic part late enough for large s too
    let a0 = 9.0 + 0.5 * min(s, 64.0);
    for (var k = 0; k < 48; k = k + 1) {
        if (a >= a0) {
            break;
        }
        sum = sum + wh_pow_f32(a, -s);
        a = a + 1.0;
    }
    let w = wh_pow_f32(a, -s);
    var b = array<f32, 8>(0.08333333333333333, -0.001388888888888889, 3.306878306878307e-05, -8.267195767195768e-07, 2.08767569878681e-08, -5.284190138687493e-10, 1.3382536530684679e-11, -3.3896802963225827e-13);
    // terms B_2j/(2j)! s (s+1)...(s+2j-2) a^(-s-2j+1)
    var fac = s / a;
    var corr: f32 = 0.0;
    let ia2 = 1.0 / (a * a);
    for (var j = 0; j < 8; j = j + 1) {
        let term = b[j] * fac;
        corr = corr + term;
        if (abs(term) <= abs(corr) * 0x1p-26f) {
            break;
        }
        fac = fac * (s + f32(2 * j + 1)) * (s + f32(2 * j + 2)) * ia2;
    }
    return sum + w * (a / (s - 1.0) + 0.5 + corr);
}

// @fn wh_polygamma_f32
// @requires wh_zeta_f32 wh_digamma_f32 wh_is_nan_f32 wh_nan_f32
// polygamma(n, x), the n-th derivative of digamma: digamma for n = 0, else
// (-1)^(n+1) n! zeta(n + 1, x). NaN unless n is a non-negative integer.
fn wh_polygamma_f32(n: f32, x: f32) -> f32 {
    if (wh_is_nan_f32(n) || wh_is_nan_f32(x)) {
        return n + x;
    }
    if (n < 0.0 || floor(n) != n) {
        return wh_nan_f32(n);
    }
    if (n == 0.0) {
        return wh_digamma_f32(x);
    }
    var fact: f32 = 1.0;
    for (var k = 2; k <= 35; k = k + 1) {
        if (f32(k) > n) {
            break;
        }
        fact = fact * f32(k);
    }
    let z = fact * wh_zeta_f32(n + 1.0, x);
    return select(-z, z, (n - 2.0 * floor(0.5 * n)) == 1.0);
}
