// wgpu-hlo math library, f64.
//
// Same structure and conventions as f32.wgsl (markers, bit-level special-value tests,
// compiler-proof exact products and compensations); see there. Needs `SHADER_F64` and
// `SHADER_INT64` (bit casts go through u64). No GLSL.std.450 transcendental exists for 64-bit
// floats, so everything here is f64 arithmetic plus `sqrt`, `floor`, `round` and `trunc`,
// which Vulkan and naga support on f64. lavapipe keeps f64 subnormals. Polynomial coefficients
// are near-minimax fits from scripts/fit.py.

// @fn wh_is_nan_f64
fn wh_is_nan_f64(x: f64) -> bool {
    return (bitcast<u64>(x) & 0x7ffffffffffffffflu) > 0x7ff0000000000000lu;
}

// @fn wh_is_inf_f64
fn wh_is_inf_f64(x: f64) -> bool {
    return (bitcast<u64>(x) & 0x7ffffffffffffffflu) == 0x7ff0000000000000lu;
}

// @fn wh_nan_f64
// A quiet NaN, built from a run-time value so that no NaN constant reaches the compiler.
fn wh_nan_f64(x: f64) -> f64 {
    return bitcast<f64>(bitcast<u64>(x) | 0x7ff8000000000000lu);
}

// @fn wh_inf_f64
// Infinity with the sign of `s`.
fn wh_inf_f64(s: f64) -> f64 {
    return bitcast<f64>((bitcast<u64>(s) & 0x8000000000000000lu) | 0x7ff0000000000000lu);
}

// @fn wh_copysign_f64
fn wh_copysign_f64(x: f64, s: f64) -> f64 {
    return bitcast<f64>((bitcast<u64>(x) & 0x7ffffffffffffffflu)
        | (bitcast<u64>(s) & 0x8000000000000000lu));
}

// @fn wh_opaque_f64
// x itself, hidden from algebraic simplification (see wh_opaque_f32).
fn wh_opaque_f64(x: f64) -> f64 {
    let b = bitcast<u64>(x);
    return bitcast<f64>(b ^ select(0lu, 1lu, b == 0xfffffffffffffffflu));
}

// @fn wh_split_f64
// The upper 26 significant bits of x; x minus it is exact.
fn wh_split_f64(x: f64) -> f64 {
    return bitcast<f64>(bitcast<u64>(x) & 0xfffffffff8000000lu);
}

// @fn wh_two_prod_f64
// @requires wh_split_f64
// (p, e) with p = a*b rounded and p + e = a*b (to about 2^-106 relative; no fma needed).
fn wh_two_prod_f64(a: f64, b: f64) -> vec2<f64> {
    let p = a * b;
    let ah = wh_split_f64(a);
    let al = a - ah;
    let bh = wh_split_f64(b);
    let bl = b - bh;
    let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return vec2<f64>(p, e);
}

// @fn wh_fast_two_sum_f64
// @requires wh_opaque_f64
// (s, e) with s = a + b rounded and s + e = a + b exactly, for |a| >= |b|.
fn wh_fast_two_sum_f64(a: f64, b: f64) -> vec2<f64> {
    let s = a + b;
    return vec2<f64>(s, b - (wh_opaque_f64(s) - a));
}

// @fn wh_round_even_f64
// @requires wh_opaque_f64
// Round half to even. Not the built-in `round`: lavapipe (Mesa 22) returns f64 values of
// magnitude 2^31 and above unrounded from both `round` and `trunc`.
fn wh_round_even_f64(x: f64) -> f64 {
    let a = abs(x);
    if (!(a < 0x1p52)) {
        return x;
    }
    // adding 2^52 rounds to an integer (round to nearest even); the opaque keeps the compiler
    // from cancelling the two constants
    let r = wh_opaque_f64(a + 0x1p52) - 0x1p52;
    return bitcast<f64>(bitcast<u64>(r) | (bitcast<u64>(x) & 0x8000000000000000lu));
}

// @fn wh_trunc_f64
// Round toward zero (see wh_round_even_f64 for why not the built-in).
fn wh_trunc_f64(x: f64) -> f64 {
    return select(ceil(x), floor(x), x >= 0.0);
}

// @fn wh_pow2i_f64
// 2^n for n in [-1022, 1023].
fn wh_pow2i_f64(n: i32) -> f64 {
    return bitcast<f64>(u64(n + 1023) << 52u);
}

// @fn wh_ldexp_f64
// @requires wh_pow2i_f64
// x * 2^k for x of magnitude about 1 and any k; one rounding at most (subnormal results).
fn wh_ldexp_f64(x: f64, k: i32) -> f64 {
    var y = x;
    var n = clamp(k, -2200, 2200);
    if (n > 1023) {
        y = y * 0x1p1023;
        n = n - 1023;
        if (n > 1023) {
            y = y * 0x1p1023;
            n = min(n - 1023, 1023);
        }
    } else if (n < -1022) {
        y = y * 0x1p-900;
        n = n + 900;
        if (n < -1022) {
            y = y * 0x1p-900;
            n = max(n + 900, -1022);
        }
    }
    return y * wh_pow2i_f64(n);
}

// @fn wh_exp_poly_f64
// e^r - 1 for |r| <= ln2/2 (plus a little).
fn wh_exp_poly_f64(r: f64) -> f64 {
    return r + r * r * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(2.0914679376583935e-09, r, 2.510520637395701e-08), r, 2.7557273661348637e-07), r, 2.7557255425746435e-06), r, 2.4801587325533363e-05), r, 0.00019841269874800493), r, 0.0013888888888883752), r, 0.008333333333326141), r, 0.04166666666666667), r, 0.1666666666666667), r, 0.5);
}

// @fn wh_exp_f64
// @requires wh_exp_df_f64 wh_is_nan_f64
fn wh_exp_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x)) {
        return x;
    }
    return wh_exp_df_f64(x, 0.0);
}

// @fn wh_expm1_f64
// @requires wh_exp_poly_f64 wh_exp_f64 wh_pow2i_f64 wh_is_nan_f64
fn wh_expm1_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (x > 709.0) {
        return wh_exp_f64(x);
    }
    if (x < -38.0) {
        return -1.0;
    }
    if (abs(x) < 0x1p-54) {
        return x;
    }
    let k = floor(x * 1.4426950408889634 + 0.5);
    let r = (x - k * 0.6931471803691238) - k * 1.9082149292705877e-10;
    let q = wh_exp_poly_f64(r);
    if (k == 0.0) {
        return q;
    }
    let t = wh_pow2i_f64(i32(k));
    if (k > 52.0) {
        return t * (q + 1.0) - 1.0;
    }
    return (t - 1.0) + t * q;
}

// @fn wh_log_reduced_f64
// e*ln2 + log(1 + f) + c for |f| <= sqrt(2) - 1 and a small correction c.
fn wh_log_reduced_f64(e: f64, f: f64, c: f64) -> f64 {
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * fma(fma(fma(fma(fma(fma(fma(0.13086626147840102, z, 0.13268773138656886), z, 0.15386239702814658), z, 0.18181795640132906), z, 0.22222222391713917), z, 0.28571428570803614), z, 0.4000000000000088), z, 0.6666666666666666);
    let hfsq = 0.5 * f * f;
    return e * 0.6931471803691238 + (f - (hfsq - (s * (hfsq + r) + (e * 1.9082149292705877e-10 + c))));
}

// @fn wh_frexp_f64
// (m, e) with x = m * 2^e, m in [sqrt(1/2), sqrt(2)), for finite x > 0 (subnormals too).
fn wh_frexp_f64(x: f64) -> vec2<f64> {
    var ix = bitcast<u64>(x);
    var e = -1023;
    if (ix < 0x0010000000000000lu) {
        ix = bitcast<u64>(x * 0x1p54);
        e = e - 54;
    }
    e = e + i32(ix >> 52u);
    var m = bitcast<f64>((ix & 0x000ffffffffffffflu) | 0x3ff0000000000000lu);
    if (m > 1.4142135623730951) {
        m = m * 0.5;
        e = e + 1;
    }
    return vec2<f64>(m, f64(e));
}

// @fn wh_log_f64
// @requires wh_log_reduced_f64 wh_frexp_f64 wh_nan_f64 wh_inf_f64
fn wh_log_f64(x: f64) -> f64 {
    let ix = bitcast<u64>(x);
    if (ix >= 0x7ff0000000000000lu || x == 0.0) {
        if (x == 0.0) {
            return wh_inf_f64(-1.0);
        }
        if ((ix & 0x7ffffffffffffffflu) >= 0x7ff0000000000000lu && ix <= 0x7ffffffffffffffflu) {
            return x;
        }
        if ((ix & 0x7ffffffffffffffflu) > 0x7ff0000000000000lu) {
            return x;
        }
        return wh_nan_f64(x);
    }
    let me = wh_frexp_f64(x);
    return wh_log_reduced_f64(me.y, me.x - 1.0, 0.0);
}

// @fn wh_log1p_f64
// @requires wh_log_reduced_f64 wh_frexp_f64 wh_nan_f64 wh_inf_f64 wh_opaque_f64
fn wh_log1p_f64(x: f64) -> f64 {
    let ix = bitcast<u64>(x);
    if ((ix & 0x7ffffffffffffffflu) >= 0x7ff0000000000000lu) {
        if (ix == 0xfff0000000000000lu) {
            return wh_nan_f64(x);
        }
        return x;
    }
    if (x <= -1.0) {
        if (x == -1.0) {
            return wh_inf_f64(-1.0);
        }
        return wh_nan_f64(x);
    }
    if (abs(x) < 0x1p-54) {
        return x;
    }
    if (x > -0.29289321881345248 && x < 0.41421356237309503) {
        return wh_log_reduced_f64(0.0, x, 0.0);
    }
    let u = 1.0 + x;
    let me = wh_frexp_f64(u);
    var c: f64 = 0.0;
    if (me.y < 54.0) {
        c = (x - (wh_opaque_f64(u) - 1.0)) / u;
    }
    return wh_log_reduced_f64(me.y, me.x - 1.0, c);
}

// @fn wh_rem_pio2_large_f64
// @requires wh_two_prod_f64 wh_fast_two_sum_f64
// Payne-Hanek reduction for finite |x| >= 2^20: x = m 2^E with m a 53-bit integer;
// (m * (the 160 bits of 2/pi that matter for this E)) mod 4 in 32-bit limbs with u64
// arithmetic. Returns (r, r_lo, j mod 4) with x = j*pi/2 + r + r_lo.
fn wh_rem_pio2_large_f64(x: f64) -> vec3<f64> {
    // 2/pi in binary, two zero words in front
    var t = array<u32, 42>(
        0u, 0u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u, 0x3c439041u,
        0xfe5163abu, 0xdebbc561u, 0xb7246e3au, 0x424dd2e0u, 0x06492eeau, 0x09d1921cu, 0xfe1deb1cu,
        0xb129a73eu, 0xe88235f5u, 0x2ebb4484u, 0xe99c7026u, 0xb45f7e41u, 0x3991d639u, 0x835339f4u,
        0x9c845f8bu, 0xbdf9283bu, 0x1ff897ffu, 0xde05980fu, 0xef2f118bu, 0x5a0a6d1fu, 0x6d367ecfu,
        0x27cb09b7u, 0x4f463f66u, 0x9e5fea2du, 0x7527bac7u, 0xebe5f17bu, 0x3d0739f7u, 0x8a5292eau,
        0x6bfb5fb1u, 0x1f8d5d08u, 0x56033046u, 0xfc7b6babu, 0xf0cfbc20u, 0x9af4361du);
    let ux = bitcast<u64>(x) & 0x7ffffffffffffffflu;
    let e = i32(ux >> 52u) - 1075;
    let m = (ux & 0x000ffffffffffffflu) | 0x0010000000000000lu;
    let m0 = m & 0xfffffffflu;
    let m1 = m >> 32u;
    // bit E-1 of 2/pi (weight 2^1 in x * 2/pi) sits at position E + 62 of the padded table
    let p0 = u32(e + 62);
    let q0 = p0 / 32u;
    let sh = p0 % 32u;
    // the window, least significant word first
    var w: array<u64, 5>;
    for (var i = 0u; i < 5u; i = i + 1u) {
        let a = t[q0 + 4u - i];
        let b = t[q0 + 5u - i];
        w[i] = u64(select((a << sh) | (b >> (32u - sh)), a, sh == 0u));
    }
    // column sums of the 32x32-bit partial products, then carries
    var c: array<u64, 8>;
    for (var i = 0u; i < 5u; i = i + 1u) {
        let lo = w[i] * m0;
        let hi = w[i] * m1;
        c[i] = c[i] + (lo & 0xfffffffflu);
        c[i + 1u] = c[i + 1u] + (lo >> 32u) + (hi & 0xfffffffflu);
        c[i + 2u] = c[i + 2u] + (hi >> 32u);
    }
    for (var i = 0u; i < 7u; i = i + 1u) {
        c[i + 1u] = c[i + 1u] + (c[i] >> 32u);
        c[i] = c[i] & 0xfffffffflu;
    }
    // x * 2/pi = (product) * 2^-158: integer bits 158, 159; fraction below, 96 bits kept
    var q = u32(c[4] >> 30u) & 3u;
    var f2 = ((c[4] << 34u) | (c[3] << 2u) | (c[2] >> 30u)) & 0xfffffffffffffffflu;
    var f1 = ((c[2] << 34u) | (c[1] << 2u) | (c[0] >> 30u)) & 0xffffffff00000000lu;
    var neg = false;
    if ((f2 >> 63u) != 0lu) {
        // fraction >= 1/2: take f - 1 and round j up
        q = (q + 1u) & 3u;
        f2 = ~f2;
        f1 = (~f1 + 0x100000000lu) & 0xffffffff00000000lu;
        if (f1 == 0lu) {
            f2 = f2 + 1lu;
        }
        neg = true;
    }
    // normalise, then f = f2 2^-64 + f1 2^-128 as a double-double
    var scale: f64 = 1.0;
    if ((f2 >> 32u) == 0lu) {
        f2 = (f2 << 32u) | (f1 >> 32u);
        f1 = f1 << 32u;
        scale = 0x1p-32;
    }
    let lz = countLeadingZeros(u32(f2 >> 32u));
    if (lz > 0u) {
        f2 = (f2 << lz) | (f1 >> (64u - lz));
        f1 = f1 << lz;
    }
    scale = scale * bitcast<f64>(u64(1023 - i32(lz)) << 52u);
    let fa = wh_fast_two_sum_f64(f64(f2 >> 11u) * 0x1p-53 * scale,
        (f64(f2 & 0x7fflu) * 0x1p-64 + f64(f1 >> 32u) * 0x1p-96) * scale);
    let ph = wh_two_prod_f64(fa.x, 1.5707963267948966);
    var r = wh_fast_two_sum_f64(ph.x, ph.y + (fa.y * 1.5707963267948966 + fa.x * 6.123233995736766e-17));
    if (neg != (x < 0.0)) {
        r = -r;
    }
    if (x < 0.0) {
        q = (4u - q) & 3u;
    }
    return vec3<f64>(r.x, r.y, f64(q));
}

// @fn wh_rem_pio2_f64
// @requires wh_round_even_f64 wh_rem_pio2_large_f64 wh_opaque_f64 wh_fast_two_sum_f64
// x = j*pi/2 + r + r_lo: returns (r, r_lo, j mod 4). For |x| < 2^20, pi/2 in three 33-bit
// parts and a tail, so every j * part is exact (Cody-Waite), with the rounding error of the
// second subtraction carried in r_lo; beyond, Payne-Hanek.
fn wh_rem_pio2_f64(x: f64) -> vec3<f64> {
    if (abs(x) >= 0x1p20) {
        return wh_rem_pio2_large_f64(x);
    }
    let j = wh_round_even_f64(x * 0.6366197723675814);
    let r1 = x - j * 1.5707963267341256;
    let w = j * 6.077100506303966e-11;
    let r2 = r1 - w;
    // two-sum error of r1 - w
    let bb = wh_opaque_f64(r2) - r1;
    let e = (r1 - (wh_opaque_f64(r2) - bb)) - (w + bb);
    let tail = e - j * 2.0222662487111665e-21 - j * 8.4784276603689e-32;
    let r = wh_fast_two_sum_f64(r2, tail);
    let q = j - 4.0 * floor(j * 0.25);
    return vec3<f64>(r.x, r.y, q);
}

// @fn wh_sin_kernel_f64
// sin(r) for |r| <= pi/4.
fn wh_sin_kernel_f64(r: f64) -> f64 {
    let z = r * r;
    return r + r * z * fma(fma(fma(fma(fma(fma(-7.586697117706918e-13, z, 1.6058531618986147e-10), z, -2.5052106232447578e-08), z, 2.7557319219339167e-06), z, -0.00019841269841265065), z, 0.008333333333333331), z, -0.16666666666666666);
}

// @fn wh_cos_kernel_f64
// @requires wh_opaque_f64
// cos(r) for |r| <= pi/4.
fn wh_cos_kernel_f64(r: f64) -> f64 {
    let z = r * r;
    let p = fma(fma(fma(fma(fma(fma(4.7458719020432915e-14, z, -1.1470460887609959e-11), z, 2.087675579108042e-09), z, -2.7557319221402824e-07), z, 2.4801587301584645e-05), z, -0.0013888888888888887), z, 0.041666666666666664);
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    return w + (((1.0 - wh_opaque_f64(w)) - hz) + z * z * p);
}

// @fn wh_sin_f64
// @requires wh_rem_pio2_f64 wh_sin_kernel_f64 wh_cos_kernel_f64 wh_nan_f64
fn wh_sin_f64(x: f64) -> f64 {
    if (abs(x) < 0x1p-27) {
        return x;
    }
    if ((bitcast<u64>(x) & 0x7ffffffffffffffflu) >= 0x7ff0000000000000lu) {
        return wh_nan_f64(x);
    }
    let rq = wh_rem_pio2_f64(x);
    let q = u32(rq.z);
    var v: f64;
    if ((q & 1u) == 0u) {
        v = wh_sin_kernel_f64(rq.x) + rq.y * (1.0 - 0.5 * rq.x * rq.x);
    } else {
        v = wh_cos_kernel_f64(rq.x) - rq.y * rq.x;
    }
    return select(v, -v, q >= 2u);
}

// @fn wh_cos_f64
// @requires wh_rem_pio2_f64 wh_sin_kernel_f64 wh_cos_kernel_f64 wh_nan_f64
fn wh_cos_f64(x: f64) -> f64 {
    if (abs(x) < 0x1p-27) {
        return 1.0;
    }
    if ((bitcast<u64>(x) & 0x7ffffffffffffffflu) >= 0x7ff0000000000000lu) {
        return wh_nan_f64(x);
    }
    let rq = wh_rem_pio2_f64(x);
    let q = u32(rq.z);
    var v: f64;
    if ((q & 1u) == 0u) {
        v = wh_cos_kernel_f64(rq.x) - rq.y * rq.x;
    } else {
        v = wh_sin_kernel_f64(rq.x) + rq.y * (1.0 - 0.5 * rq.x * rq.x);
    }
    return select(v, -v, q == 1u || q == 2u);
}

// @fn wh_tan_f64
// @requires wh_rem_pio2_f64 wh_nan_f64 wh_opaque_f64 wh_two_prod_f64
fn wh_tan_f64(x: f64) -> f64 {
    if (abs(x) < 0x1p-27) {
        return x;
    }
    if ((bitcast<u64>(x) & 0x7ffffffffffffffflu) >= 0x7ff0000000000000lu) {
        return wh_nan_f64(x);
    }
    let rq = wh_rem_pio2_f64(x);
    let r = rq.x;
    let z = r * r;
    // sin r = r + sl and cos r = w + cl, each left as an unevaluated sum
    let sl = r * z * fma(fma(fma(fma(fma(fma(-7.586697117706918e-13, z, 1.6058531618986147e-10), z, -2.5052106232447578e-08), z, 2.7557319219339167e-06), z, -0.00019841269841265065), z, 0.008333333333333331), z, -0.16666666666666666) + rq.y * (1.0 - 0.5 * z);
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    let cl = ((1.0 - wh_opaque_f64(w)) - hz) + z * z * fma(fma(fma(fma(fma(fma(4.7458719020432915e-14, z, -1.1470460887609959e-11), z, 2.087675579108042e-09), z, -2.7557319221402824e-07), z, 2.4801587301584645e-05), z, -0.0013888888888888887), z, 0.041666666666666664) - rq.y * r;
    var nh = r;
    var nl = sl;
    var dh = w;
    var dl = cl;
    var sgn: f64 = 1.0;
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
    let qd = wh_two_prod_f64(q, dh);
    let res = ((nh - qd.x) - qd.y) + nl - q * dl;
    return sgn * (q + res / (dh + dl));
}

// @fn wh_atan_kernel_f64
// atan(t) for |t| <= 7/16.
fn wh_atan_kernel_f64(t: f64) -> f64 {
    let z = t * t;
    return t + t * z * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(0.014773184616983806, z, -0.033128134256069586), z, 0.04492259293193656), z, -0.05216679739313656), z, 0.05876946456755061), z, -0.06666241923359964), z, 0.07692285554889286), z, -0.09090908355602592), z, 0.11111111096645038), z, -0.14285714285566806), z, 0.1999999999999941), z, -0.3333333333333333);
}

// @fn wh_atan_pos_f64
// @requires wh_atan_kernel_f64 wh_opaque_f64
// atan(a) for a >= 0 (a may be +inf), reduced around 0, 1/2, 1, 3/2 and infinity.
fn wh_atan_pos_f64(a: f64) -> f64 {
    if (a > 0x1p60) {
        return 1.5707963267948966;
    }
    if (a < 0.4375) {
        return wh_atan_kernel_f64(a);
    }
    if (a < 0.6875) {
        return 0.4636476090008061 + wh_opaque_f64(wh_atan_kernel_f64((2.0 * a - 1.0) / (2.0 + a)) + 2.2698777452961687e-17);
    }
    if (a < 1.1875) {
        return 0.7853981633974483 + wh_opaque_f64(wh_atan_kernel_f64((a - 1.0) / (a + 1.0)) + 3.061616997868383e-17);
    }
    if (a < 2.4375) {
        return 0.982793723247329 + wh_opaque_f64(wh_atan_kernel_f64((a - 1.5) / (1.0 + 1.5 * a)) + 1.3903311031230998e-17);
    }
    return 1.5707963267948966 + wh_opaque_f64(wh_atan_kernel_f64(-1.0 / a) + 6.123233995736766e-17);
}

// @fn wh_atan_f64
// @requires wh_atan_pos_f64 wh_copysign_f64 wh_is_nan_f64
fn wh_atan_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x) || abs(x) < 0x1p-27) {
        return x;
    }
    return wh_copysign_f64(wh_atan_pos_f64(abs(x)), x);
}

// @fn wh_atan2_f64
// @requires wh_atan_pos_f64 wh_copysign_f64 wh_is_nan_f64 wh_is_inf_f64 wh_opaque_f64
fn wh_atan2_f64(y: f64, x: f64) -> f64 {
    if (wh_is_nan_f64(x) || wh_is_nan_f64(y)) {
        return x + y;
    }
    let xneg = (bitcast<u64>(x) & 0x8000000000000000lu) != 0lu;
    var a: f64;
    if (y == 0.0) {
        a = select(f64(0.0), 3.141592653589793, xneg);
    } else if (x == 0.0) {
        a = 1.5707963267948966;
    } else if (wh_is_inf_f64(x)) {
        if (wh_is_inf_f64(y)) {
            a = select(f64(0.7853981633974483), 2.356194490192344929, xneg);
        } else {
            a = select(f64(0.0), 3.141592653589793, xneg);
        }
    } else if (wh_is_inf_f64(y)) {
        a = 1.5707963267948966;
    } else {
        let t = wh_atan_pos_f64(abs(y) / abs(x));
        if (xneg) {
            a = 3.141592653589793 - wh_opaque_f64(t - 1.2246467991473532e-16);
        } else {
            a = t;
        }
    }
    return wh_copysign_f64(a, y);
}

// @fn wh_asin_poly_f64
// (asin(s) - s) / s^3 as a polynomial in z = s^2, z <= 1/4.
fn wh_asin_poly_f64(z: f64) -> f64 {
    return fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(0.02961201126495512, z, -0.01924167174674304), z, 0.019554513336123378), z, 0.0030448799094556773), z, 0.009319560794767446), z, 0.009621842970100282), z, 0.011566459612121669), z, 0.01396378001220357), z, 0.017352816540325496), z, 0.02237215744350722), z, 0.03038194447553234), z, 0.044642857142551895), z, 0.07500000000000118), z, 0.16666666666666666);
}

// @fn wh_asin_f64
// @requires wh_asin_poly_f64 wh_copysign_f64 wh_nan_f64 wh_is_nan_f64 wh_two_prod_f64
fn wh_asin_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a > 1.0) {
        return wh_nan_f64(x);
    }
    if (a < 0x1p-27) {
        return x;
    }
    if (a <= 0.5) {
        let z = a * a;
        return wh_copysign_f64(a + a * z * wh_asin_poly_f64(z), x);
    }
    let z = 0.5 * (1.0 - a);
    let s = sqrt(z);
    let ss = wh_two_prod_f64(s, s);
    let sl = select(((z - ss.x) - ss.y) / (2.0 * s), 0.0, s == 0.0);
    let tail = 2.0 * (sl + s * z * wh_asin_poly_f64(z));
    let r = (1.5707963267948966 - 2.0 * s) + (6.123233995736766e-17 - tail);
    return wh_copysign_f64(r, x);
}

// @fn wh_acos_f64
// @requires wh_asin_poly_f64 wh_nan_f64 wh_is_nan_f64 wh_two_prod_f64 wh_opaque_f64
fn wh_acos_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a > 1.0) {
        return wh_nan_f64(x);
    }
    if (a <= 0.5) {
        let z = x * x;
        let p = x + x * z * wh_asin_poly_f64(z);
        return 1.5707963267948966 - wh_opaque_f64(p - 6.123233995736766e-17);
    }
    let z = 0.5 * (1.0 - a);
    let s = sqrt(z);
    let ss = wh_two_prod_f64(s, s);
    let sl = select(((z - ss.x) - ss.y) / (2.0 * s), 0.0, s == 0.0);
    let v = 2.0 * s + 2.0 * (sl + s * z * wh_asin_poly_f64(z));
    if (x > 0.0) {
        return v;
    }
    return 3.141592653589793 - wh_opaque_f64(v - 1.2246467991473532e-16);
}

// @fn wh_sinh_f64
// @requires wh_expm1_f64 wh_exp_f64 wh_copysign_f64 wh_is_nan_f64 wh_inf_f64 wh_opaque_f64
fn wh_sinh_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a >= 710.5) {
        return wh_inf_f64(x);
    }
    if (a < 0x1p-27) {
        return x;
    }
    if (a < 1.0) {
        let z = a * a;
        return wh_copysign_f64(a + a * z * fma(fma(fma(fma(fma(fma(fma(fma(8.309171941866942e-18, z, 2.8112909646770106e-15), z, 7.647165414593481e-13), z, 1.605904382690051e-10), z, 2.505210838547607e-08), z, 2.7557319223985825e-06), z, 0.0001984126984126984), z, 0.008333333333333333), z, 0.16666666666666666), x);
    }
    var r: f64;
    if (a < 22.0) {
        let e = wh_expm1_f64(a);
        r = 0.5 * (e + e / (e + 1.0));
    } else if (a < 709.0) {
        r = 0.5 * wh_exp_f64(a);
    } else {
        let t = wh_exp_f64(0.5 * a);
        // The half is opaque, as in wh_sinh_f32: (e^(a/2))^2 / 2 would overflow first.
        r = wh_opaque_f64(0.5 * t) * t;
    }
    return wh_copysign_f64(r, x);
}

// @fn wh_cosh_f64
// @requires wh_expm1_f64 wh_exp_f64 wh_is_nan_f64 wh_inf_f64 wh_opaque_f64
fn wh_cosh_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a >= 710.5) {
        return wh_inf_f64(1.0);
    }
    if (a < 0x1p-27) {
        return 1.0;
    }
    if (a < 0.3466) {
        let e = wh_expm1_f64(a);
        return 1.0 + (e * e) / (2.0 + 2.0 * e);
    }
    if (a < 22.0) {
        let t = wh_exp_f64(a);
        return 0.5 * t + 0.5 / t;
    }
    if (a < 709.0) {
        return 0.5 * wh_exp_f64(a);
    }
    let t = wh_exp_f64(0.5 * a);
    return wh_opaque_f64(0.5 * t) * t;
}

// @fn wh_tanh_f64
// @requires wh_expm1_f64 wh_copysign_f64 wh_is_nan_f64
fn wh_tanh_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x) || a < 0x1p-27) {
        return x;
    }
    if (a > 19.1) {
        return wh_copysign_f64(1.0, x);
    }
    if (a < 0.55) {
        let z = a * a;
        return wh_copysign_f64(a + a * z * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-3.0095084486657237e-06, z, 1.3343110444710785e-05), z, -3.806913419944137e-05), z, 9.653771195496335e-05), z, -0.000239048242168132), z, 0.0005900154482039874), z, -0.001455833163252327), z, 0.003592127952591601), z, -0.008863235526193567), z, 0.021869488536057545), z, -0.05396825396825263), z, 0.13333333333333333), z, -0.3333333333333333), x);
    }
    let e = wh_expm1_f64(2.0 * a);
    return wh_copysign_f64(1.0 - 2.0 / (e + 2.0), x);
}

// @fn wh_asinh_f64
// @requires wh_log_f64 wh_log1p_f64 wh_copysign_f64 wh_is_nan_f64
fn wh_asinh_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x) || a < 0x1p-27 || bitcast<u64>(a) == 0x7ff0000000000000lu) {
        return x;
    }
    if (a >= 0x1p28) {
        return wh_copysign_f64(wh_log_f64(a) + 0.6931471805599453, x);
    }
    var r: f64;
    if (a > 2.0) {
        r = wh_log_f64(2.0 * a + 1.0 / (sqrt(a * a + 1.0) + a));
    } else {
        let z = a * a;
        r = wh_log1p_f64(a + z / (1.0 + sqrt(1.0 + z)));
    }
    return wh_copysign_f64(r, x);
}

// @fn wh_acosh_f64
// @requires wh_log_f64 wh_log1p_f64 wh_nan_f64 wh_is_nan_f64
fn wh_acosh_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (x < 1.0) {
        return wh_nan_f64(x);
    }
    if (x >= 0x1p28) {
        if (bitcast<u64>(x) >= 0x7ff0000000000000lu) {
            return x;
        }
        return wh_log_f64(x) + 0.6931471805599453;
    }
    if (x > 2.0) {
        return wh_log_f64(2.0 * x - 1.0 / (x + sqrt(x * x - 1.0)));
    }
    let t = x - 1.0;
    return wh_log1p_f64(t + sqrt(2.0 * t + t * t));
}

// @fn wh_atanh_f64
// @requires wh_log1p_f64 wh_copysign_f64 wh_nan_f64 wh_inf_f64 wh_is_nan_f64
fn wh_atanh_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a >= 1.0) {
        if (a == 1.0) {
            return wh_inf_f64(x);
        }
        return wh_nan_f64(x);
    }
    if (a < 0x1p-28) {
        return x;
    }
    var r: f64;
    if (a < 0.5) {
        r = 0.5 * wh_log1p_f64(2.0 * a + 2.0 * a * a / (1.0 - a));
    } else {
        r = 0.5 * wh_log1p_f64(2.0 * a / (1.0 - a));
    }
    return wh_copysign_f64(r, x);
}

// @fn wh_erf_small_f64
// @requires wh_opaque_f64
// erf(x) for |x| <= 1: x (2/sqrt(pi) + x^2 Q(x^2)), the constant carried in two parts.
fn wh_erf_small_f64(x: f64) -> f64 {
    let z = x * x;
    let q = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-1.7988652209572032e-14, z, 4.1558617352790287e-13), z, -6.652074187842492e-12), z, 9.41507214265476e-11), z, -1.2289855746585177e-09), z, 1.4807147150533316e-08), z, -1.636584253801154e-07), z, 1.6462114292902008e-06), z, -1.4925650356656707e-05), z, 0.0001205533298176089), z, -0.0008548327023450544), z, 0.005223977625442186), z, -0.026866170645131252), z, 0.11283791670955126), z, -0.37612638903183754);
    return wh_opaque_f64(x) * 1.1283791670955126 + x * (z * q + 1.533545961316588e-17);
}

// @fn wh_erfc_pos_f64
// @requires wh_exp_df_f64 wh_two_prod_f64
// erfc(a) for a >= 0.5: exp(-a^2) * h(1/a) / a with h fitted on four intervals.
fn wh_erfc_pos_f64(a: f64) -> f64 {
    if (a > 27.3) {
        return 0.0;
    }
    let t = 1.0 / a;
    var h: f64;
    if (a < 0.9) {
        let u = t - 1.5;
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(4.4164017673987336e-07, u, -1.335730611434699e-06), u, 2.3052628858325933e-06), u, -3.5426117662109958e-06), u, 5.065126482690422e-06), u, -5.581051143172369e-06), u, 1.4900986697259505e-06), u, 1.5639136101688974e-05), u, -6.387495202295859e-05), u, 0.0001778170368234343), u, -0.00041474248189529483), u, 0.0008465767821690646), u, -0.0014927625249532021), u, 0.0020637031905842845), u, -0.0011647369991681972), u, -0.005933200786462673), u, 0.0331569509540308), u, -0.11839802134553717), u, 0.35952293862040013);
    } else if (a < 1.6) {
        let u = t - 0.868;
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-0.0015175288352011693, u, 0.0009670428631435722), u, 0.0004676447722678346), u, -0.001867499829643995), u, 0.0034178602184644726), u, -0.004835492008877082), u, 0.005484102860895143), u, -0.004556122132481578), u, 0.0011591446220890662), u, 0.005400283417061547), u, -0.01502099519385672), u, 0.025731345617863093), u, -0.031868958505769304), u, 0.02114073586016375), u, 0.029963055197402333), u, -0.16312933727541187), u, 0.4485546691219104);
    } else if (a < 4.0) {
        let u = t - 0.4375;
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(1.7528676496833369, u, -1.1214779425023433), u, 0.1151118885220492), u, 0.3426045557194728), u, -0.46460304584487977), u, 0.3693689492085956), u, -0.163393006457164), u, -0.03925124766465956), u, 0.16151638351102474), u, -0.1764360325851926), u, 0.10129466184620409), u, 0.016883482514040045), u, -0.11862338329137222), u, 0.14755024073790107), u, -0.061579853395232184), u, -0.16112858879188047), u, 0.5210682012454139);
    } else {
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-2822.619209852199, t, 7021.3828778136885), t, -7466.869103232981), t, 4091.4882127343544), t, -869.813102971948), t, -290.65151666616237), t, 232.87069422337558), t, -37.24812250443651), t, -9.812916259540334), t, -0.9425037562727572), t, 3.802317982694427), t, -0.008214164759544947), t, -1.057331076786813), t, -2.570188029249357e-05), t, 0.4231431351245623), t, -2.537022668712681e-08), t, -0.28209479130898213), t, -5.2037819282155654e-12), t, 0.564189583547783);
    }
    let sq = wh_two_prod_f64(a, a);
    return wh_exp_df_f64(-sq.x, -sq.y) * (h / a);
}

// @fn wh_erf_f64
// @requires wh_erf_small_f64 wh_erfc_pos_f64 wh_copysign_f64 wh_is_nan_f64
fn wh_erf_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a <= 1.0) {
        return wh_erf_small_f64(x);
    }
    if (a > 6.0) {
        return wh_copysign_f64(1.0, x);
    }
    return wh_copysign_f64(1.0 - wh_erfc_pos_f64(a), x);
}

// @fn wh_erfc_f64
// @requires wh_erf_small_f64 wh_erfc_pos_f64 wh_is_nan_f64
fn wh_erfc_f64(x: f64) -> f64 {
    let a = abs(x);
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (a < 0.5) {
        return 1.0 - wh_erf_small_f64(x);
    }
    let c = wh_erfc_pos_f64(a);
    if (x < 0.0) {
        return 2.0 - c;
    }
    return c;
}

// @fn wh_div_f64
// @requires wh_two_prod_f64
// IEEE x / y on any driver: NaN where a compiler folds x / x to 1 (see wh_div_f32), and the
// built-in's quotient (Vulkan lets it be a few ULP off) corrected once with an exact residual
// where that residual is exact (every magnitude within 2^-900..2^1000).
fn wh_div_f64(a: f64, b: f64) -> f64 {
    let ua = bitcast<u64>(a) & 0x7ffffffffffffffflu;
    let ub = bitcast<u64>(b) & 0x7ffffffffffffffflu;
    if ((ua | ub) == 0lu || (ua >= 0x7ff0000000000000lu && ub >= 0x7ff0000000000000lu)) {
        return bitcast<f64>(ua | 0x7ff8000000000000lu);
    }
    let q = a / b;
    let uq = bitcast<u64>(q) & 0x7ffffffffffffffflu;
    let lo = 0x07b0000000000000lu;
    let hi = 0x7e70000000000000lu;
    if (ua < lo || ua >= hi || ub < lo || ub >= hi || uq < lo || uq >= hi) {
        return q;
    }
    let p = wh_two_prod_f64(q, b);
    let r = (a - p.x) - p.y;
    return q + r / b;
}

// @fn wh_sqrt_f64
// @requires wh_two_prod_f64
// Correctly rounded square root on any driver: the built-in's result is corrected once with
// an exact residual.
fn wh_sqrt_f64(x: f64) -> f64 {
    let s = sqrt(x);
    if (!(x > 0x1p-900) || x > 0x1p1000) {
        return s;
    }
    let p = wh_two_prod_f64(s, s);
    let r = (x - p.x) - p.y;
    return s + r * (0.5 / s);
}

// @fn wh_rsqrt_f64
// @requires wh_nan_f64 wh_two_prod_f64 wh_pow2i_f64
// 1/sqrt(x) within 1 ULP: x scaled into [1, 4) by an even power of two, a division-free
// first guess from the f64 built-in, then a Newton step with an exact residual.
fn wh_rsqrt_f64(x: f64) -> f64 {
    var ix = bitcast<u64>(x);
    if (!(x > 0.0) || ix >= 0x7ff0000000000000lu) {
        if (x == 0.0) {
            return 1.0 / x;
        }
        if (ix == 0x7ff0000000000000lu) {
            return 0.0;
        }
        return wh_nan_f64(x);
    }
    var k = 0;
    if (ix < 0x0010000000000000lu) {
        ix = bitcast<u64>(x * 0x1p54);
        k = -54;
    }
    let e = i32(ix >> 52u) - 1023 + k;
    let ee = e & ~1;
    let m = bitcast<f64>((ix & 0x000ffffffffffffflu) | (u64(1023 + e - ee) << 52u));
    let y = 1.0 / sqrt(m);
    let t = wh_two_prod_f64(y, y);
    let u = wh_two_prod_f64(m, t.x);
    let r = ((1.0 - u.x) - u.y) - m * t.y;
    let z = y + (y * 0.5) * r;
    return z * wh_pow2i_f64(-ee / 2);
}

// @fn wh_cbrt_f64
// @requires wh_ldexp_f64 wh_two_prod_f64
fn wh_cbrt_f64(x: f64) -> f64 {
    let a = abs(x);
    if (a == 0.0 || bitcast<u64>(a) >= 0x7ff0000000000000lu) {
        return x + x;
    }
    var ia = bitcast<u64>(a);
    var e = -1023;
    if (ia < 0x0010000000000000lu) {
        ia = bitcast<u64>(a * 0x1p54);
        e = e - 54;
    }
    e = e + i32(ia >> 52u);
    let q = e - 3 * i32(floor(f64(e) / 3.0));
    let m = bitcast<f64>((ia & 0x000ffffffffffffflu) | 0x3ff0000000000000lu) * f64(1 << u32(q));
    let k = (e - q) / 3;
    var y = (-0.012327 * m + 0.2538) * m + 0.75853;
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    y = y - (y - m / (y * y)) * (1.0 / 3.0);
    let y2 = wh_two_prod_f64(y, y);
    let y3 = wh_two_prod_f64(y2.x, y);
    let r = ((y3.x - m) + y3.y) + y2.y * y;
    y = y - r / (3.0 * y2.x);
    let v = wh_ldexp_f64(y, k);
    return select(v, -v, x < 0.0);
}

// @fn wh_logistic_f64
// @requires wh_exp_f64 wh_is_nan_f64
// 1 / (1 + exp(-x)); e / (1 + e) with e = exp(x) for x < 0 (keeps tiny results accurate).
// One exponential, e = exp(-|x|), chosen without branches (as wh_logistic_f32).
fn wh_logistic_f64(x: f64) -> f64 {
    let e = wh_exp_f64(-abs(x));
    let d = 1.0 + e;
    let v = select(e / d, 1.0 / d, x >= 0.0);
    return select(v, x, wh_is_nan_f64(x));
}

// @fn wh_round_afz_f64
// @requires wh_trunc_f64
// Round half away from zero.
fn wh_round_afz_f64(x: f64) -> f64 {
    let t = wh_trunc_f64(x);
    let d = abs(x - t);
    return select(t, t + sign(x), d >= 0.5);
}

// @fn wh_next_after_f64
// @requires wh_is_nan_f64
fn wh_next_after_f64(x: f64, y: f64) -> f64 {
    if (wh_is_nan_f64(x) || wh_is_nan_f64(y)) {
        return x + y;
    }
    let ux = bitcast<u64>(x);
    let uy = bitcast<u64>(y);
    if (ux == uy || x == y) {
        return y;
    }
    if ((ux & 0x7ffffffffffffffflu) == 0lu) {
        return bitcast<f64>((uy & 0x8000000000000000lu) | 1lu);
    }
    let up = (x < y) == (x > 0.0);
    return bitcast<f64>(select(ux - 1lu, ux + 1lu, up));
}

// @fn wh_rem_f64
// @requires wh_nan_f64
// C fmod: exact. Long division on the integer significands, up to 10 exponent bits per step
// (at most 208 steps for the widest exponent gap).
fn wh_rem_f64(x: f64, y: f64) -> f64 {
    let ux = bitcast<u64>(x);
    let uy = bitcast<u64>(y);
    let ax = ux & 0x7ffffffffffffffflu;
    let ay = uy & 0x7ffffffffffffffflu;
    let sx = ux & 0x8000000000000000lu;
    if (ax >= 0x7ff0000000000000lu || ay > 0x7ff0000000000000lu || ay == 0lu) {
        return wh_nan_f64(x + y);
    }
    if (ay == 0x7ff0000000000000lu || ax < ay) {
        return x;
    }
    var ex = i32(ax >> 52u);
    var ey = i32(ay >> 52u);
    var mx = ax & 0x000ffffffffffffflu;
    var my = ay & 0x000ffffffffffffflu;
    if (ex == 0) {
        ex = 1;
    } else {
        mx = mx | 0x0010000000000000lu;
    }
    if (ey == 0) {
        ey = 1;
    } else {
        my = my | 0x0010000000000000lu;
    }
    var d = ex - ey;
    mx = mx % my;
    for (var i = 0; i < 220; i = i + 1) {
        if (d <= 0 || mx == 0lu) {
            break;
        }
        let s = min(d, 10);
        mx = (mx << u32(s)) % my;
        d = d - s;
    }
    if (mx == 0lu) {
        return bitcast<f64>(sx);
    }
    var sh = 0;
    for (var i = 0; i < 53; i = i + 1) {
        if ((mx << u32(sh)) >= 0x0010000000000000lu) {
            break;
        }
        sh = sh + 1;
    }
    if (ey - sh < 1) {
        return bitcast<f64>(sx | (mx << u32(ey - 1)));
    }
    return bitcast<f64>(sx | (u64(ey - sh) << 52u) | ((mx << u32(sh)) & 0x000ffffffffffffflu));
}

// @fn wh_exp_df_f64
// @requires wh_exp_poly_f64 wh_ldexp_f64 wh_inf_f64 wh_fast_two_sum_f64 wh_opaque_f64
// exp(h + l) for a double-double argument (|l| <= ulp(h)), with the reduced argument and
// 1 + r carried to extra precision: within about 0.6 ULP.
fn wh_exp_df_f64(h: f64, l: f64) -> f64 {
    if (h > 709.782712893383973096) {
        return wh_inf_f64(1.0);
    }
    if (h < -745.2) {
        return 0.0;
    }
    let k = floor(h * 1.4426950408889634 + 0.5);
    // 0.6931471803691238 has 32 significant bits: k * 0.6931471803691238 and the first difference are exact.
    // the opaque keeps the compiler from adding h and l first (which would drop l)
    let rr = wh_fast_two_sum_f64(wh_opaque_f64(h - k * 0.6931471803691238), l - k * 1.9082149292705877e-10);
    let r = rr.x;
    let p = r * r * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(2.0914679376583935e-09, r, 2.510520637395701e-08), r, 2.7557273661348637e-07), r, 2.7557255425746435e-06), r, 2.4801587325533363e-05), r, 0.00019841269874800493), r, 0.0013888888888883752), r, 0.008333333333326141), r, 0.04166666666666667), r, 0.1666666666666667), r, 0.5);
    let s = wh_fast_two_sum_f64(1.0, r);
    let v = s.x + (s.y + (p + rr.y * (1.0 + r)));
    return wh_ldexp_f64(v, i32(k));
}

// @fn wh_erf_inv_f64
// @requires wh_erf_f64 wh_erfc_f64 wh_exp_f64 wh_log1p_f64 wh_log_f64 wh_is_nan_f64
// @requires wh_nan_f64 wh_inf_f64 wh_copysign_f64
// Inverse error function: Giles' single-precision approximation (see wh_erf_inv_f32), or the
// asymptotic form in the far tail, as a first guess, then Newton steps on erf (|x| <= 1/2) or
// on erfc (1 - |x|, exact, beyond).
fn wh_erf_inv_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x)) {
        return x;
    }
    let a = abs(x);
    if (a >= 1.0) {
        if (a == 1.0) {
            return wh_inf_f64(x);
        }
        return wh_nan_f64(x);
    }
    if (a < 0x1p-30) {
        return x * 0.88622692545275801365;
    }
    let w = -(wh_log1p_f64(-a) + wh_log1p_f64(a));
    var y: f64;
    if (w < 5.0) {
        let v = w - 2.5;
        var p: f64 = 2.81022636e-08;
        p = p * v + 3.43273939e-07;
        p = p * v - 3.5233877e-06;
        p = p * v - 4.39150654e-06;
        p = p * v + 0.00021858087;
        p = p * v - 0.00125372503;
        p = p * v - 0.00417768164;
        p = p * v + 0.246640727;
        p = p * v + 1.50140941;
        y = p * a;
    } else if (w < 16.0) {
        let v = sqrt(w) - 3.0;
        var p: f64 = -0.000200214257;
        p = p * v + 0.000100950558;
        p = p * v + 0.00134934322;
        p = p * v - 0.00367342844;
        p = p * v + 0.00573950773;
        p = p * v - 0.0076224613;
        p = p * v + 0.00943887047;
        p = p * v + 1.00167406;
        p = p * v + 2.83297682;
        y = p * a;
    } else {
        // erfc(y) ~ exp(-y^2) / (y sqrt(pi))
        let l = -wh_log_f64(1.0 - a);
        y = sqrt(l - 0.5 * wh_log_f64(3.141592653589793 * l));
    }
    let q = 1.0 - a;
    for (var i = 0; i < 3; i = i + 1) {
        var f: f64;
        if (a <= 0.5) {
            f = wh_erf_f64(y) - a;
        } else {
            f = q - wh_erfc_f64(y);
        }
        y = y - f / (1.1283791670955126 * wh_exp_f64(-y * y));
    }
    return wh_copysign_f64(y, x);
}

// @fn wh_sinpi_cospi_f64
// @requires wh_sin_kernel_f64 wh_cos_kernel_f64 wh_round_even_f64
// (sin(pi x), cos(pi x)) for finite x, with the argument reduced exactly.
fn wh_sinpi_cospi_f64(x: f64) -> vec2<f64> {
    let r = x - 2.0 * wh_round_even_f64(0.5 * x);
    let q = wh_round_even_f64(2.0 * r);
    let d = r - 0.5 * q;
    // pi * d in double-double, folded into one argument
    let t = d * 3.141592653589793 + d * 1.2246467991473532e-16;
    let s = wh_sin_kernel_f64(t);
    let c = wh_cos_kernel_f64(t);
    let iq = i32(q) & 3;
    if (iq == 0) {
        return vec2<f64>(s, c);
    }
    if (iq == 1) {
        return vec2<f64>(c, -s);
    }
    if (iq == 2) {
        return vec2<f64>(-s, -c);
    }
    return vec2<f64>(-c, s);
}

// @fn wh_lgamma2_f64
// lgamma(2 + t) for t in [-1/2, 1] (a fit of lgamma(2 + t) / t around t = 1/4).
fn wh_lgamma2_f64(t: f64) -> f64 {
    let u = t - 0.25;
    return t * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-7.135464237889196e-10, u, 1.6745384179884184e-09), u, -1.6293480456023983e-09), u, 3.860519873475313e-09), u, -1.2418204184662834e-08), u, 2.9480096579462314e-08), u, -6.760609166204548e-08), u, 1.6170408002708597e-07), u, -3.8973068683359195e-07), u, 9.407205499699823e-07), u, -2.2836007331843055e-06), u, 5.583759412110102e-06), u, -1.377178115760907e-05), u, 3.433618547258759e-05), u, -8.680583178509343e-05), u, 0.00022352008471632342), u, -0.0005901656743986245), u, 0.0016148854204133295), u, -0.004662626671212215), u, 0.01468832371731914), u, -0.05429540385214996), u, 0.29223842821659285), u, 0.4994868595695864);
}

// @fn wh_lgamma_pos_f64
// @requires wh_log_f64 wh_log1p_f64 wh_lgamma2_f64
// log(Gamma(x)) for finite x > 0; see wh_lgamma_pos_f32.
fn wh_lgamma_pos_f64(x: f64) -> f64 {
    if (x >= 12.0) {
        let z = 1.0 / (x * x);
        let corr = (0.08333333333333333 + z * (-0.002777777777777778 + z * (0.0007936507936507937
            + z * (-0.0005952380952380953 + z * (0.0008417508417508417
            + z * (-0.0019175269175269176 + z * (0.00641025641025641
            + z * -0.029550653594771242))))))) / x;
        return (x - 0.5) * (wh_log_f64(x) - 1.0) + (0.4189385332046727 + corr);
    }
    if (x >= 3.0) {
        let t = x - floor(x);
        var prod: f64 = 1.0;
        var b = 2.0 + t;
        for (var i = 0; i < 10; i = i + 1) {
            if (b >= x - 0.5) {
                break;
            }
            prod = prod * b;
            b = b + 1.0;
        }
        return wh_lgamma2_f64(t) + wh_log_f64(prod);
    }
    if (x >= 1.5) {
        return wh_lgamma2_f64(x - 2.0);
    }
    if (x >= 0.5) {
        let t = x - 1.0;
        return wh_lgamma2_f64(t) - wh_log1p_f64(t);
    }
    return wh_lgamma2_f64(x) - (wh_log_f64(x) + wh_log1p_f64(x));
}

// @fn wh_lgamma_f64
// @requires wh_lgamma_pos_f64 wh_sinpi_cospi_f64 wh_log_f64 wh_is_nan_f64 wh_inf_f64
// log|Gamma(x)|; +inf at the poles (0 and the negative integers) and at +-inf.
fn wh_lgamma_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x)) {
        return x;
    }
    let ax = abs(x);
    if (bitcast<u64>(ax) == 0x7ff0000000000000lu || (x <= 0.0 && floor(x) == x)) {
        return wh_inf_f64(1.0);
    }
    if (x > 0.0) {
        return wh_lgamma_pos_f64(x);
    }
    if (ax < 0x1p-60) {
        return -wh_log_f64(ax);
    }
    let s = abs(wh_sinpi_cospi_f64(x).x);
    return 1.1447298858494002 - wh_log_f64(ax * s) - wh_lgamma_pos_f64(ax);
}

// @fn wh_digamma_f64
// @requires wh_log_f64 wh_sinpi_cospi_f64 wh_is_nan_f64 wh_nan_f64 wh_opaque_f64
// psi(x); see wh_digamma_f32.
fn wh_digamma_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x) || bitcast<u64>(x) == 0x7ff0000000000000lu) {
        return x;
    }
    if (x <= 0.0 && floor(x) == x) {
        return wh_nan_f64(x);
    }
    if (abs(x) < 0x1p-60) {
        return -1.0 / x - 0.5772156649015329;
    }
    // (0, 1) and (2, 3] are moved into [1, 2] by one step of the recurrence
    var y0 = x;
    var step: f64 = 0.0;
    if (x > 0.0 && x < 1.0) {
        y0 = x + 1.0;
        step = -1.0 / x;
    } else if (x > 2.0 && x <= 3.0) {
        y0 = x - 1.0;
        step = 1.0 / y0;
    }
    if (y0 >= 1.0 && y0 <= 2.0) {
        let t = wh_opaque_f64(y0 - 1.4616321449683622) - 9.549995429965697e-17;
        let u = t - 0.04;
        return step + t * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(0.00011881232908510335, u, -0.00017395263809348775), u, 9.05011158463028e-05), u, -0.0001417541070215314), u, 0.0003195167338615949), u, -0.000476498406129518), u, 0.0006775736022228465), u, -0.0010185903400699568), u, 0.0015382143107710384), u, -0.002310059930337602), u, 0.0034687170692900273), u, -0.0052115174284323796), u, 0.007832843581763302), u, -0.011779609851802418), u, 0.01773327132276921), u, -0.02674311673620717), u, 0.04045396641392186), u, -0.061524472461641604), u, 0.0944850196055082), u, -0.14778642758342148), u, 0.23981734474868116), u, -0.42284340522737573), u, 0.9503650948036063);
    }
    var acc: f64 = 0.0;
    var y = x;
    if (x < 0.0) {
        let sc = wh_sinpi_cospi_f64(x);
        acc = -1.0 / x - 3.141592653589793 * sc.y / sc.x;
        y = -x;
    }
    for (var i = 0; i < 12; i = i + 1) {
        if (y >= 12.0) {
            break;
        }
        acc = acc - 1.0 / y;
        y = y + 1.0;
    }
    let z = 1.0 / (y * y);
    let series = z * (0.08333333333333333 + z * (-0.008333333333333333
        + z * (0.003968253968253968 + z * (-0.004166666666666667 + z * (0.007575757575757576
        + z * (-0.021092796092796094 + z * (0.08333333333333333 + z * -0.4432598039215686)))))));
    return acc + (wh_log_f64(y) - 0.5 / y - series);
}

// @fn wh_log_df_f64
// @requires wh_split_f64 wh_two_prod_f64 wh_fast_two_sum_f64 wh_opaque_f64 wh_frexp_f64
// ln(x) as hi + lo accurate to about 2^-66 relative, for finite x > 0.
fn wh_log_df_f64(x: f64) -> vec2<f64> {
    let me = wh_frexp_f64(x);
    let m = me.x;
    let u = m - 1.0;
    let mp1 = m + 1.0;
    let v = 1.0 / mp1;
    let s_h = wh_split_f64(u * v);
    let t_h = wh_split_f64(mp1);
    let t_l = m - (wh_opaque_f64(t_h) - 1.0);
    let s_l = v * ((u - s_h * t_h) - s_h * t_l);
    let s = s_h + s_l;
    let z = s * s;
    // ln(m) = 2s + (2/3) s^3 + s^5 R(s^2); the first two terms in double-double
    let sh2 = s_h * s_h;
    let p3 = wh_two_prod_f64(sh2, s_h);
    let c = wh_two_prod_f64(0.66666666666666663, p3.x);
    let low = c.y + 3.700743415417188e-17 * p3.x
        + 0.66666666666666663 * (p3.y + 3.0 * s_l * (sh2 + s_h * s_l));
    let rest = s * z * z * fma(fma(fma(fma(fma(fma(fma(0.11723051028097753, z, 0.11706248540922386), z, 0.13334804238225345), z, 0.15384594970895457), z, 0.18181818335314404), z, 0.22222222221656232), z, 0.28571428571429364), z, 0.4);
    let a = wh_fast_two_sum_f64(2.0 * s_h, c.x);
    let lm = wh_fast_two_sum_f64(a.x, a.y + (2.0 * s_l + (low + rest)));
    // + e ln2
    let fe = me.y;
    let b = wh_fast_two_sum_f64(fe * 0.6931471803691238, lm.x);
    let d = wh_two_prod_f64(fe, 1.9082149292705877e-10);
    let lo = b.y + (lm.y + (d.y + fe * 1.1612227229362532e-26));
    let g = wh_fast_two_sum_f64(b.x, d.x);
    return wh_fast_two_sum_f64(g.x, g.y + lo);
}

// @fn wh_pow_f64
// @requires wh_log_df_f64 wh_exp_df_f64 wh_two_prod_f64 wh_fast_two_sum_f64 wh_is_nan_f64
// @requires wh_nan_f64 wh_inf_f64
// x^y with C99 special cases; exp(y ln x) with ln x and the product in double-double.
fn wh_pow_f64(x: f64, y: f64) -> f64 {
    let ax = abs(x);
    let ay = abs(y);
    if (y == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (wh_is_nan_f64(x) || wh_is_nan_f64(y)) {
        return x + y;
    }
    let y_int = floor(y) == y;
    let y_odd = y_int && ay < 0x1p53 && (y - 2.0 * floor(0.5 * y)) == 1.0;
    let x_neg = (bitcast<u64>(x) & 0x8000000000000000lu) != 0lu;
    if (bitcast<u64>(ay) == 0x7ff0000000000000lu) {
        if (ax == 1.0) {
            return 1.0;
        }
        if ((ax > 1.0) == (y > 0.0)) {
            return wh_inf_f64(1.0);
        }
        return 0.0;
    }
    let neg = x_neg && y_odd;
    if (x == 0.0 || bitcast<u64>(ax) == 0x7ff0000000000000lu) {
        let big = (x == 0.0) == (y < 0.0);
        var r: f64 = 0.0;
        if (big) {
            r = wh_inf_f64(1.0);
        }
        return select(r, -r, neg);
    }
    if (x_neg && !y_int) {
        return wh_nan_f64(x);
    }
    let l = wh_log_df_f64(ax);
    var r: f64;
    if (abs(l.x) * ay > 2000.0) {
        r = select(f64(0.0), wh_inf_f64(1.0), (l.x > 0.0) == (y > 0.0));
    } else {
        let p = wh_two_prod_f64(l.x, y);
        let q = wh_fast_two_sum_f64(p.x, p.y + l.y * y);
        r = wh_exp_df_f64(q.x, q.y);
    }
    return select(r, -r, neg);
}

// @fn wh_bessel_i1e_f64
// @requires wh_exp_f64 wh_is_nan_f64 wh_is_inf_f64 wh_copysign_f64
// I1(x) exp(-|x|); see wh_bessel_i1e_f32. Beyond 8 two fits in 1/x (split at 32).
fn wh_bessel_i1e_f64(x: f64) -> f64 {
    if (wh_is_nan_f64(x)) {
        return x;
    }
    if (wh_is_inf_f64(x)) {
        // h / sqrt(a) below gave inf at a = inf on one lavapipe host (AMD EPYC with AVX-512).
        return wh_copysign_f64(0.0, x);
    }
    let a = abs(x);
    if (a <= 8.0) {
        let z = a * a;
        return x * fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(5.255438093674345e-51, z, 5.618718795983033e-48), z, 9.446649623370268e-45), z, 1.2766214362296355e-41), z, 1.5644452567861228e-38), z, 1.7019559662373366e-35), z, 1.633888130892543e-32), z, 1.37246551282913e-29), z, 9.991549132667242e-27), z, 6.234726652804545e-24), z, 3.2919356728204178e-21), z, 1.4484516960384623e-18), z, 5.214426105738813e-16), z, 1.5017547184527745e-13), z, 3.363930569334215e-11), z, 5.651403356481481e-09), z, 6.781684027777778e-07), z, 5.425347222222222e-05), z, 0.0026041666666666665), z, 0.0625), z, 0.5) * wh_exp_f64(-a);
    }
    let t = 1.0 / a;
    var h: f64;
    if (a <= 32.0) {
        let u = t - 0.078125;
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(3390146755771.155, u, 160136386738.39096), u, -60578968967.757065), u, -2474892821.438952), u, 592697952.7848923), u, 23961633.385164212), u, -4474373.292449942), u, -261674.7982957501), u, 25651.810888230702), u, 3279.6266768482783), u, 48.3824635862131), u, -20.87998600639681), u, -3.6122790451223357), u, -0.6042723448151376), u, -0.15692741571441385), u, -0.07016330418941218), u, -0.05920361367779182), u, -0.15779419137469936), u, 0.38694711997975734);
    } else {
        h = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(-127.75687165781642, t, -3.8120238024535564), t, -3.0702396384149426), t, -0.7864020489318213), t, -0.270075630512976), t, -0.1107352832571823), t, -0.05752571574857455), t, -0.0409071673782994), t, -0.04675104848463507), t, -0.1496033551505372), t, 0.3989422804014327);
    }
    return wh_copysign_f64(h / sqrt(a), x);
}

// @fn wh_zeta_f64
// @requires wh_pow_f64 wh_is_nan_f64 wh_nan_f64 wh_inf_f64
// Hurwitz zeta(s, q) = sum over k >= 0 of (q + k)^-s, for s > 1: the first terms summed until
// q + k >= 12 + s/2, the rest by Euler-Maclaurin (12 Bernoulli terms). As XLA: s = 1 gives +inf,
// s < 1 NaN, q a non-positive integer +inf, q < 0 otherwise NaN unless s is an integer.
// Negative q below -8 is not supported (NaN).
fn wh_zeta_f64(s: f64, q: f64) -> f64 {
    if (wh_is_nan_f64(s) || wh_is_nan_f64(q)) {
        return s + q;
    }
    if (s == 1.0) {
        return wh_inf_f64(1.0);
    }
    if (s < 1.0) {
        return wh_nan_f64(s);
    }
    if (q <= 0.0) {
        if (floor(q) == q) {
            return wh_inf_f64(1.0);
        }
        if (floor(s) != s || q < -8.0) {
            return wh_nan_f64(s);
        }
    }
    var sum: f64 = 0.0;
    var a = q;
    // start the asymptotic part late enough for large s too
    let a0 = 12.0 + 0.5 * min(s, 64.0);
    for (var k = 0; k < 64; k = k + 1) {
        if (a >= a0) {
            break;
        }
        sum = sum + wh_pow_f64(a, -s);
        a = a + 1.0;
    }
    let w = wh_pow_f64(a, -s);
    var b = array<f64, 12>(0.08333333333333333, -0.001388888888888889, 3.306878306878307e-05, -8.267195767195768e-07, 2.08767569878681e-08, -5.284190138687493e-10, 1.3382536530684679e-11, -3.3896802963225827e-13, 8.586062056277845e-15, -2.174868698558062e-16, 5.5090028283602295e-18, -1.3954464685812522e-19);
    // terms B_2j/(2j)! s (s+1)...(s+2j-2) a^(-s-2j+1)
    var fac = s / a;
    var corr: f64 = 0.0;
    let ia2 = 1.0 / (a * a);
    for (var j = 0; j < 12; j = j + 1) {
        let term = b[j] * fac;
        corr = corr + term;
        if (abs(term) <= abs(corr) * 0x1p-55) {
            break;
        }
        fac = fac * (s + f64(2 * j + 1)) * (s + f64(2 * j + 2)) * ia2;
    }
    return sum + w * (a / (s - 1.0) + 0.5 + corr);
}

// @fn wh_polygamma_f64
// @requires wh_zeta_f64 wh_digamma_f64 wh_is_nan_f64 wh_nan_f64
// polygamma(n, x), the n-th derivative of digamma: digamma for n = 0, else
// (-1)^(n+1) n! zeta(n + 1, x). NaN unless n is a non-negative integer.
fn wh_polygamma_f64(n: f64, x: f64) -> f64 {
    if (wh_is_nan_f64(n) || wh_is_nan_f64(x)) {
        return n + x;
    }
    if (n < 0.0 || floor(n) != n) {
        return wh_nan_f64(n);
    }
    if (n == 0.0) {
        return wh_digamma_f64(x);
    }
    var fact: f64 = 1.0;
    for (var k = 2; k <= 171; k = k + 1) {
        if (f64(k) > n) {
            break;
        }
        fact = fact * f64(k);
    }
    let z = fact * wh_zeta_f64(n + 1.0, x);
    return select(-z, z, (n - 2.0 * floor(0.5 * n)) == 1.0);
}
