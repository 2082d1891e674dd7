// Small WGSL helpers the code generator calls: narrow-float rounding, XLA semantics of
// min/max, integer division and powers, total-order keys. One function per `// @fn` marker;
// `// @requires` names the helpers a function calls. Only what a kernel uses is emitted.

// @fn wh_f32_to_f16_bits
// f32 -> binary16 bits (low 16 bits), round to nearest even; NaN stays NaN, overflow -> inf.
// A NaN keeps the top 10 bits of its payload, quiet or signaling, so binary16 data moved
// through a kernel (read as f32 by wh_f16_bits_to_f32, written back) keeps its bits; one whose
// kept payload would be zero (not a NaN any more) becomes the quiet NaN.
fn wh_f32_to_f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        let payload = (a >> 13u) & 0x3ffu;
        return sign | select(0x7e00u, 0x7c00u | payload, payload != 0u);
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        let t = a + 0xfffu + ((a >> 13u) & 1u);
        return sign | ((t - 0x38000000u) >> 13u);
    }
    // Subnormal or zero: count units of 2^-24, rounding half to even.
    let v = bitcast<f32>(a) * 16777216.0f;
    return sign | u32(round(v));
}

// @fn wh_f16_bits_to_f32
// binary16 bits (low 16 bits) -> f32, exactly, in plain integer arithmetic (naga asks for an
// extra capability for unpack2x16float).
fn wh_f16_bits_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0x1fu) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24 is exact in f32.
        return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8f));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// @fn wh_round_f16
// @requires wh_f32_to_f16_bits wh_f16_bits_to_f32
// Rounds an f32 to the nearest binary16 value (returned as f32).
fn wh_round_f16(x: f32) -> f32 {
    return wh_f16_bits_to_f32(wh_f32_to_f16_bits(x));
}

// @fn wh_f32_to_bf16_bits
// f32 -> bfloat16 bits (low 16 bits), round to nearest even. A NaN keeps its top 16 bits,
// quiet or signaling, so bfloat16 data moved through a kernel keeps its bits; one whose kept
// payload would be zero (not a NaN any more) becomes quiet.
fn wh_f32_to_bf16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        let h = b >> 16u;
        return select(h | 0x40u, h, (h & 0x7fu) != 0u);
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

// @fn wh_round_bf16
// @requires wh_f32_to_bf16_bits
// Rounds an f32 to the nearest bfloat16 value (returned as f32).
fn wh_round_bf16(x: f32) -> f32 {
    return bitcast<f32>(wh_f32_to_bf16_bits(x) << 16u);
}

// @fn wh_narrow_float_to_f32
// The bits of an 8-bit-or-narrower float (e exponent bits, m mantissa bits, exponent bias
// `bias`) -> f32, exactly. `kind`: 0 IEEE-like (inf, NaN, -0), 1 "FN" (no inf; the all-ones
// code is NaN), 2 "FNUZ" (no inf, no -0; the code of -0 is NaN), 3 no inf and no NaN
// (f4/f6), 4 f8E8M0FNU (exponent only; 0xff is NaN). NaNs decode to the quiet NaN with their
// sign (FNUZ: positive, as XLA's cpu backend has it; ml_dtypes gives it the sign bit).
fn wh_narrow_float_to_f32(bits: u32, e: u32, m: u32, bias: u32, kind: u32) -> f32 {
    if (kind == 4u) {
        if (bits == 0xffu) { return bitcast<f32>(0x7fc00000u); }
        if (bits == 0u) { return bitcast<f32>(0x00400000u); }
        return bitcast<f32>(bits << 23u);
    }
    let sbit = 1u << (e + m);
    let sign = select(0u, 0x80000000u, (bits & sbit) != 0u);
    let top = (1u << e) - 1u;
    let ex = (bits >> m) & top;
    let mant = bits & ((1u << m) - 1u);
    if (kind == 0u && ex == top) {
        return bitcast<f32>(sign | select(0x7fc00000u, 0x7f800000u, mant == 0u));
    }
    if (kind == 1u && (bits & (sbit - 1u)) == sbit - 1u) {
        return bitcast<f32>(sign | 0x7fc00000u);
    }
    if (kind == 2u && bits == sbit) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (ex == 0u) {
        // mant * 2^(1 - bias - m), exact (a normal f32 for every format here).
        return bitcast<f32>(sign | bitcast<u32>(f32(mant) * bitcast<f32>((128u - bias - m) << 23u)));
    }
    return bitcast<f32>(sign | ((ex + 127u - bias) << 23u) | (mant << (23u - m)));
}

// @fn wh_f32_to_narrow_float
// f32 -> the bits of a narrow float (parameters as for wh_narrow_float_to_f32), rounding to
// nearest even (f8E8M0FNU: half up), with ml_dtypes' and XLA's rules: what overflows becomes
// inf (IEEE-like), NaN (FN, FNUZ) or the largest finite value (no-NaN types); NaN becomes the
// quiet NaN with its sign, FNUZ's NaN, or (types without NaN) -0 as XLA's cpu backend has it;
// FNUZ has no -0; f8E8M0FNU has no zero and no sign (zero and negatives become NaN).
fn wh_f32_to_narrow_float(x: f32, e: u32, m: u32, bias: u32, kind: u32) -> u32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    let neg = (b >> 31u) == 1u;
    if (kind == 4u) {
        if (neg || a == 0u || a >= 0x7f800000u) { return 0xffu; }
        if (a < 0x00800000u) { return select(0u, 1u, a > 0x00400000u); }
        return min((a + 0x400000u) >> 23u, 0xffu);
    }
    let sbit = 1u << (e + m);
    let sign = select(0u, sbit, neg);
    let top = (1u << e) - 1u;
    var max_code = sbit - 1u;
    var over = sign | max_code;
    if (kind == 0u) {
        max_code = (top << m) - 1u;
        over = sign | (top << m);
    } else if (kind == 1u) {
        max_code = sbit - 2u;
        over = sign | (sbit - 1u);
    } else if (kind == 2u) {
        over = sbit;
    }
    if (a > 0x7f800000u) {
        if (kind == 0u) { return sign | (top << m) | (1u << (m - 1u)); }
        if (kind == 3u) { return sbit; }
        return over;
    }
    if (a == 0x7f800000u) { return over; }
    var r = 0u;
    if ((a >> 23u) >= 128u - bias) {
        let sh = 23u - m;
        let t = a + ((1u << (sh - 1u)) - 1u) + ((a >> sh) & 1u);
        r = (t >> sh) - ((127u - bias) << m);
    } else {
        // Units of the smallest subnormal, 2^(1 - bias - m), rounded half to even.
        r = u32(round(bitcast<f32>(a) * bitcast<f32>((126u + bias + m) << 23u)));
    }
    if (r > max_code) { return over; }
    if (r == 0u && kind == 2u) { return 0u; }
    return sign | r;
}

// @fn wh_max_f32
// @requires wh_is_nan_f32
// IEEE maximum: NaN if either is NaN, +0 > -0. Selects, not branches: a SIMD driver
// (llvmpipe) runs a branch under a lane mask, and relu is this function. Both NaN tests are
// needed: `select(a, b, b > a)` alone keeps a NaN `a` in IEEE arithmetic, but NVIDIA's
// driver makes a maximum instruction of it that returns `b` (max(NaN, inf) gave inf on an
// H200), so a NaN is chosen explicitly, last.
fn wh_max_f32(a: f32, b: f32) -> f32 {
    var m = select(b, a, a > b);
    m = select(m, bitcast<f32>(bitcast<u32>(a) & bitcast<u32>(b)), a == b);
    m = select(m, b, wh_is_nan_f32(b));
    return select(m, a, wh_is_nan_f32(a));
}

// @fn wh_min_f32
// @requires wh_is_nan_f32
// IEEE minimum: NaN if either is NaN, -0 < +0 (both NaN tests needed, as in `wh_max_f32`).
fn wh_min_f32(a: f32, b: f32) -> f32 {
    var m = select(b, a, a < b);
    m = select(m, bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b)), a == b);
    m = select(m, b, wh_is_nan_f32(b));
    return select(m, a, wh_is_nan_f32(a));
}

// @fn wh_max_fold_f32
// The maximum of a reduction's accumulator `a` and element `b` without NaN tests, +0 > -0:
// the caller keeps its own NaN test (`reduce_kernel::Fold`), so a compiler that makes a
// maximum instruction of the compare and select changes nothing.
fn wh_max_fold_f32(a: f32, b: f32) -> f32 {
    let m = select(b, a, a > b);
    return select(m, bitcast<f32>(bitcast<u32>(a) & bitcast<u32>(b)), a == b);
}

// @fn wh_min_fold_f32
// The minimum counterpart of `wh_max_fold_f32`, -0 < +0.
fn wh_min_fold_f32(a: f32, b: f32) -> f32 {
    let m = select(b, a, a < b);
    return select(m, bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b)), a == b);
}

// @fn wh_max_f64
// @requires wh_is_nan_f64
fn wh_max_f64(a: f64, b: f64) -> f64 {
    if (wh_is_nan_f64(a)) { return a; }
    if (wh_is_nan_f64(b)) { return b; }
    if (a == b) { return bitcast<f64>(bitcast<u64>(a) & bitcast<u64>(b)); }
    return select(b, a, a > b);
}

// @fn wh_min_f64
// @requires wh_is_nan_f64
fn wh_min_f64(a: f64, b: f64) -> f64 {
    if (wh_is_nan_f64(a)) { return a; }
    if (wh_is_nan_f64(b)) { return b; }
    if (a == b) { return bitcast<f64>(bitcast<u64>(a) | bitcast<u64>(b)); }
    return select(b, a, a < b);
}

// @fn wh_div_f32
// IEEE x / y where a driver's fast math would not keep it:
// - NVIDIA's Vulkan compiler folds x / x to 1, so inf/inf, 0/0 and NaN/NaN of one value gave
//   1. Both zero, or both infinite or NaN, is NaN.
// - Vulkan bounds the built-in's error only for divisors of magnitude 2^-126 to 2^126, and
//   NVIDIA's multiplies by the divisor's reciprocal, which is flushed to zero past 2^126
//   (1e30 / 1e38 gave 0): both operands are scaled by 1/4 there (exact, unless the dividend is
//   so small that the quotient underflows anyway).
// Every other case is the built-in's quotient: correctly rounded on lavapipe, up to 1.75 ULP
// off on NVIDIA (Vulkan allows 2.5). A correction by the residual a - q b (a Dekker product)
// made atan2 worse there, not better (1.53 -> 1.65 ULP), so it is not applied.
fn wh_div_f32(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a) & 0x7fffffffu;
    let ub = bitcast<u32>(b) & 0x7fffffffu;
    let nan = (ua | ub) == 0u || (ua >= 0x7f800000u && ub >= 0x7f800000u);
    let s = select(1.0, 0.25, ub > 0x7e800000u);
    return select((a * s) / (b * s), bitcast<f32>(ua | 0x7fc00000u), nan);
}

// @fn wh_div_i32
// XLA integer division: x / 0 = -1, INT_MIN / -1 = INT_MIN.
fn wh_div_i32(a: i32, b: i32) -> i32 {
    if (b == 0i) { return -1i; }
    if (b == -1i) { return bitcast<i32>(0u - bitcast<u32>(a)); }
    return a / b;
}

// @fn wh_rem_i32
// XLA integer remainder: x % 0 = x, INT_MIN % -1 = 0; sign of the dividend.
fn wh_rem_i32(a: i32, b: i32) -> i32 {
    if (b == 0i) { return a; }
    if (b == -1i) { return 0i; }
    return a % b;
}

// @fn wh_div_u32
fn wh_div_u32(a: u32, b: u32) -> u32 {
    if (b == 0u) { return 0xffffffffu; }
    return a / b;
}

// @fn wh_rem_u32
fn wh_rem_u32(a: u32, b: u32) -> u32 {
    if (b == 0u) { return a; }
    return a % b;
}

// @fn wh_div_i64
fn wh_div_i64(a: i64, b: i64) -> i64 {
    if (b == 0li) { return -1li; }
    if (b == -1li) { return bitcast<i64>(0lu - bitcast<u64>(a)); }
    return a / b;
}

// @fn wh_rem_i64
fn wh_rem_i64(a: i64, b: i64) -> i64 {
    if (b == 0li) { return a; }
    if (b == -1li) { return 0li; }
    return a % b;
}

// @fn wh_div_u64
fn wh_div_u64(a: u64, b: u64) -> u64 {
    if (b == 0lu) { return 0xfffffffffffffffflu; }
    return a / b;
}

// @fn wh_rem_u64
fn wh_rem_u64(a: u64, b: u64) -> u64 {
    if (b == 0lu) { return a; }
    return a % b;
}

// @fn wh_pow_i32
// Integer power by squaring; negative exponents give 0 unless the base is 1 or -1 (XLA).
fn wh_pow_i32(base: i32, e: i32) -> i32 {
    if (e < 0i) {
        if (base == 1i) { return 1i; }
        if (base == -1i) { return select(1i, -1i, (e & 1i) != 0i); }
        return 0i;
    }
    var r = 1i;
    var b = base;
    var x = e;
    while (x > 0i) {
        if ((x & 1i) != 0i) { r = r * b; }
        b = b * b;
        x = x >> 1u;
    }
    return r;
}

// @fn wh_pow_u32
fn wh_pow_u32(base: u32, e: u32) -> u32 {
    var r = 1u;
    var b = base;
    var x = e;
    while (x > 0u) {
        if ((x & 1u) != 0u) { r = r * b; }
        b = b * b;
        x = x >> 1u;
    }
    return r;
}

// @fn wh_pow_i64
fn wh_pow_i64(base: i64, e: i64) -> i64 {
    if (e < 0li) {
        if (base == 1li) { return 1li; }
        if (base == -1li) { return select(1li, -1li, (e & 1li) != 0li); }
        return 0li;
    }
    var r = 1li;
    var b = base;
    var x = e;
    while (x > 0li) {
        if ((x & 1li) != 0li) { r = r * b; }
        b = b * b;
        x = x >> 1u;
    }
    return r;
}

// @fn wh_pow_u64
fn wh_pow_u64(base: u64, e: u64) -> u64 {
    var r = 1lu;
    var b = base;
    var x = e;
    while (x > 0lu) {
        if ((x & 1lu) != 0lu) { r = r * b; }
        b = b * b;
        x = x >> 1u;
    }
    return r;
}

// @fn wh_total_order_f32
// A signed integer key whose order is the IEEE total order of the float.
fn wh_total_order_f32(x: f32) -> i32 {
    let i = bitcast<i32>(x);
    return i ^ ((i >> 31u) & 0x7fffffffi);
}

// @fn wh_total_order_f64
fn wh_total_order_f64(x: f64) -> i64 {
    let i = bitcast<i64>(x);
    return i ^ ((i >> 63u) & 0x7fffffffffffffffli);
}

// @fn wh_cmul_f32
// Complex product (a.x + i a.y)(b.x + i b.y), as XLA computes it (no special-value repair).
fn wh_cmul_f32(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// @fn wh_csquare_f32
// @requires wh_opaque_f32
// z^2 = (x^2 - y^2, 2 x y). Not as wh_cmul_f32(z, z): Mesa factored x*y + y*x into
// y*(x + x), which overflows for x = FLT_MAX (square(3.4e38 + 1e-15i) gave inf for the
// imaginary part, not 6.9e23) and rounds a subnormal x y differently; the product goes
// through wh_opaque_f32 and is doubled after.
fn wh_csquare_f32(z: vec2<f32>) -> vec2<f32> {
    let p = wh_opaque_f32(z.x * z.y);
    return vec2<f32>(z.x * z.x - z.y * z.y, p + p);
}

// @fn wh_csquare_f64
// @requires wh_opaque_f64
// As wh_csquare_f32.
fn wh_csquare_f64(z: vec2<f64>) -> vec2<f64> {
    let p = wh_opaque_f64(z.x * z.y);
    return vec2<f64>(z.x * z.x - z.y * z.y, p + p);
}

// @fn wh_cmul_f64
fn wh_cmul_f64(a: vec2<f64>, b: vec2<f64>) -> vec2<f64> {
    return vec2<f64>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// @fn wh_mulhi_u64
// High 64 bits of the 128-bit product, from 32-bit limbs.
fn wh_mulhi_u64(a: u64, b: u64) -> u64 {
    let al = a & 0xfffffffflu;
    let ah = a >> 32u;
    let bl = b & 0xfffffffflu;
    let bh = b >> 32u;
    let ll = al * bl;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = (ll >> 32u) + (lh & 0xfffffffflu) + (hl & 0xfffffffflu);
    return ah * bh + (lh >> 32u) + (hl >> 32u) + (mid >> 32u);
}

// @fn wh_mulhi_i64
// @requires wh_mulhi_u64
// High 64 bits of the signed 128-bit product: the unsigned one, corrected for negative factors.
fn wh_mulhi_i64(a: i64, b: i64) -> i64 {
    var h = wh_mulhi_u64(bitcast<u64>(a), bitcast<u64>(b));
    if (a < 0li) { h = h - bitcast<u64>(b); }
    if (b < 0li) { h = h - bitcast<u64>(a); }
    return bitcast<i64>(h);
}
