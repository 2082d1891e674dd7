//! How each element type lives in WGSL: the type kernels compute in, how buffers store it
//! (always PJRT's host layout, sub-word types packed into `u32` words), loads, stores,
//! literals and the rounding that keeps narrow types exact.

use crate::error::{Error, Result};
use crate::ir::{ElementType, Scalar};
use crate::target::Capabilities;

/// The WGSL type a value is computed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compute {
    /// `bool` (for `i1`).
    Bool,
    /// `i32` (for i2..i32, sign-extended).
    I32,
    /// `u32` (for ui2..ui32, zero-extended).
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// `f32` (also for f16, bf16: rounded to their precision after every op).
    F32,
    /// `f64`.
    F64,
    /// `vec2<f32>` (complex64: real, imaginary).
    C64,
    /// `vec2<f64>` (complex128).
    C128,
}

impl Compute {
    /// The WGSL spelling.
    pub fn wgsl(self) -> &'static str {
        match self {
            Compute::Bool => "bool",
            Compute::I32 => "i32",
            Compute::U32 => "u32",
            Compute::I64 => "i64",
            Compute::U64 => "u64",
            Compute::F32 => "f32",
            Compute::F64 => "f64",
            Compute::C64 => "vec2<f32>",
            Compute::C128 => "vec2<f64>",
        }
    }
    /// Real float compute types.
    pub fn is_float(self) -> bool {
        matches!(self, Compute::F32 | Compute::F64)
    }
    /// Complex compute types.
    pub fn is_complex(self) -> bool {
        matches!(self, Compute::C64 | Compute::C128)
    }
    /// The scalar part type of a complex compute type (itself otherwise).
    pub fn part(self) -> Compute {
        match self {
            Compute::C64 => Compute::F32,
            Compute::C128 => Compute::F64,
            other => other,
        }
    }
    /// `f32`/`f64` suffix used by math library function names.
    pub fn suffix(self) -> &'static str {
        match self.part() {
            Compute::F64 => "f64",
            _ => "f32",
        }
    }
}

/// Element types the code generator handles, with the reason for those it doesn't.
pub fn compute_type(t: ElementType, caps: Capabilities, adapter: &str) -> Result<Compute> {
    use ElementType::*;
    Ok(match t {
        Pred => Compute::Bool,
        I2 | I4 | I8 | I16 | I32 => Compute::I32,
        U2 | U4 | U8 | U16 | U32 => Compute::U32,
        F16 | BF16 | F32 => Compute::F32,
        t if narrow_float(t).is_some() => Compute::F32,
        I64 | U64 | F64 | C128 => {
            let (need, what) = if matches!(t, F64 | C128) {
                (caps.f64, "SHADER_F64")
            } else {
                (caps.i64, "SHADER_INT64")
            };
            if !need {
                return Err(Error::unimplemented(format!(
                    "{t} is not supported on adapter {adapter} (it lacks {what})"
                )));
            }
            match t {
                I64 => Compute::I64,
                U64 => Compute::U64,
                F64 => Compute::F64,
                _ => Compute::C128,
            }
        }
        C64 => Compute::C64,
        other => {
            return Err(Error::unimplemented(format!(
                "element type {other} is not supported yet"
            )))
        }
    })
}

/// The format of a float type narrower than 16 bits, as the `wh_narrow_float_*` helpers take
/// it: (exponent bits, mantissa bits, exponent bias, kind); kinds as in `shaders/helpers.wgsl`.
pub fn narrow_float(t: ElementType) -> Option<(u32, u32, u32, u32)> {
    use ElementType::*;
    Some(match t {
        F8E5M2 => (5, 2, 15, 0),
        F8E4M3 => (4, 3, 7, 0),
        F8E3M4 => (3, 4, 3, 0),
        F8E4M3FN => (4, 3, 7, 1),
        F8E4M3FNUZ => (4, 3, 8, 2),
        F8E5M2FNUZ => (5, 2, 16, 2),
        F8E4M3B11FNUZ => (4, 3, 11, 2),
        F4E2M1FN => (2, 1, 1, 3),
        F6E2M3FN => (2, 3, 1, 3),
        F6E3M2FN => (3, 2, 3, 3),
        F8E8M0FNU => (8, 0, 127, 4),
        _ => return None,
    })
}

/// `wh_narrow_float_to_f32(bits, ...)` for narrow float type `t` (see [`narrow_float`]).
pub fn narrow_float_decode(t: ElementType, bits: &str) -> Option<String> {
    let (e, m, bias, kind) = narrow_float(t)?;
    Some(format!(
        "wh_narrow_float_to_f32({bits}, {e}u, {m}u, {bias}u, {kind}u)"
    ))
}

/// `wh_f32_to_narrow_float(v, ...)` for narrow float type `t` (see [`narrow_float`]).
pub fn narrow_float_encode(t: ElementType, v: &str) -> Option<String> {
    let (e, m, bias, kind) = narrow_float(t)?;
    Some(format!(
        "wh_f32_to_narrow_float({v}, {e}u, {m}u, {bias}u, {kind}u)"
    ))
}

/// The WGSL element type of a storage array holding `t` (sub-word types: packed `u32`).
pub fn storage_elem(t: ElementType) -> &'static str {
    use ElementType::*;
    match t {
        F32 => "f32",
        I32 => "i32",
        U32 => "u32",
        F64 => "f64",
        I64 => "i64",
        U64 => "u64",
        C64 => "vec2<f32>",
        C128 => "vec2<f64>",
        _ => "u32",
    }
}

/// Elements of `t` per 32-bit word when packed (1 for types of 32 bits or more).
pub fn per_word(t: ElementType) -> u32 {
    match t.byte_size() {
        1 => 4,
        2 => 2,
        _ => 1,
    }
}

/// Bits of the storage unit of `t` in host layout (8 for `i1` and sub-byte types).
pub fn storage_bits(t: ElementType) -> u32 {
    (t.byte_size() * 8) as u32
}

/// A WGSL expression loading element `idx` (a `u32` expression) of buffer `buf`.
pub fn load(t: ElementType, buf: &str, idx: &str) -> String {
    match per_word(t) {
        1 => format!("{buf}[{idx}]"),
        _ => decode_bits(t, &load_bits(t, buf, idx).unwrap_or_default()),
    }
}

/// The value of a sub-word element of type `t` from its storage bits `raw` (a `u32` in the
/// low bits, the rest clear), as [`load`] computes it.
pub fn decode_bits(t: ElementType, raw: &str) -> String {
    use ElementType::*;
    match t {
        Pred => format!("({raw} != 0u)"),
        F16 => format!("wh_f16_bits_to_f32({raw})"),
        BF16 => format!("bitcast<f32>({raw} << 16u)"),
        t if narrow_float(t).is_some() => narrow_float_decode(t, raw).unwrap_or_default(),
        t if t.is_signed_int() => {
            let sh = 32 - t.bit_width();
            format!("((bitcast<i32>({raw}) << {sh}u) >> {sh}u)")
        }
        t if t.is_unsigned_int() => {
            let m = (1u64 << t.bit_width()) - 1;
            format!("({raw} & {m}u)")
        }
        _ => raw.to_string(),
    }
}

/// The storage bits of element `idx` of a sub-word tensor in `buf` as they are (a `u32` in
/// the low bits), without decoding; `None` for types of whole words.
pub fn load_bits(t: ElementType, buf: &str, idx: &str) -> Option<String> {
    let n = per_word(t);
    if n == 1 {
        return None;
    }
    let bits = 32 / n;
    let mask = if bits == 8 { "0xffu" } else { "0xffffu" };
    let (word, lane) = if n == 4 { ("2u", "3u") } else { ("1u", "1u") };
    Some(format!(
        "(({buf}[({idx}) >> {word}] >> ((({idx}) & {lane}) * {bits}u)) & {mask})"
    ))
}

/// True for the element types whose values, as the kernels compute with them, do not keep
/// every bit pattern: a bool is 0 or 1 (the byte may hold any value), a narrow float's or
/// half's NaN becomes the quiet NaN. A `bitcast_convert` from or to them moves raw bits
/// (`ExprEmitter::raw_bits_of`) where it can.
pub fn lossy_values(t: ElementType) -> bool {
    matches!(t, ElementType::Pred | ElementType::F16 | ElementType::BF16)
        || narrow_float(t).is_some()
}

/// The storage bits (a `u32` in the low `storage_bits(t)` bits) of a computed value, for
/// packing sub-word types.
pub fn to_bits(t: ElementType, v: &str) -> String {
    use ElementType::*;
    match t {
        Pred => format!("select(0u, 1u, {v})"),
        F16 => "wh_f32_to_f16_bits(V)".replace('V', v),
        BF16 => "wh_f32_to_bf16_bits(V)".replace('V', v),
        t if narrow_float(t).is_some() => narrow_float_encode(t, v).unwrap_or_default(),
        t if t.is_signed_int() => format!("(bitcast<u32>({v}) & {}u)", mask(storage_bits(t))),
        _ => format!("({v} & {}u)", mask(storage_bits(t))),
    }
}

fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// Helper functions `load`/`to_bits`/`round` may call for `t`.
pub fn helpers_for(t: ElementType) -> &'static [&'static str] {
    match t {
        ElementType::F16 => &["wh_f32_to_f16_bits", "wh_round_f16"],
        ElementType::BF16 => &["wh_f32_to_bf16_bits", "wh_round_bf16"],
        t if narrow_float(t).is_some() => &["wh_f32_to_narrow_float", "wh_narrow_float_to_f32"],
        _ => &[],
    }
}

/// Wraps an arithmetic result back into the value set of `t`: integer wrap-around for narrow
/// integers, rounding to f16/bf16 precision. Identity for natively computed types.
pub fn round(t: ElementType, v: &str) -> String {
    use ElementType::*;
    match t {
        F16 => format!("wh_round_f16({v})"),
        BF16 => format!("wh_round_bf16({v})"),
        t if narrow_float(t).is_some() => {
            let bits = narrow_float_encode(t, v).unwrap_or_default();
            narrow_float_decode(t, &bits).unwrap_or_default()
        }
        I2 | I4 | I8 | I16 => {
            let sh = 32 - t.bit_width();
            format!("(({v} << {sh}u) >> {sh}u)")
        }
        U2 | U4 | U8 | U16 => format!("({v} & {}u)", mask(t.bit_width())),
        _ => v.to_string(),
    }
}

/// A WGSL literal of compute type `c` for the value `s` of element type `t`.
pub fn literal(t: ElementType, c: Compute, s: Scalar) -> String {
    match c {
        Compute::Bool => (s.as_i128() != 0 || s.as_f64() != 0.0).to_string(),
        Compute::I32 => {
            let v = s.as_i128() as i32;
            if v == i32::MIN {
                "i32(-2147483648)".into()
            } else {
                format!("{v}i")
            }
        }
        Compute::U32 => format!("{}u", s.as_i128() as u32),
        Compute::I64 => format!("bitcast<i64>({}lu)", s.as_i128() as i64 as u64),
        Compute::U64 => format!("{}lu", s.as_i128() as u64),
        Compute::F32 => f32_literal(s.as_f64() as f32),
        Compute::F64 => f64_literal(s.as_f64()),
        Compute::C64 | Compute::C128 => {
            let (re, im) = match s {
                Scalar::Complex(r, i) => (r, i),
                other => (other.as_f64(), 0.0),
            };
            let p = c.part();
            let lit = |x: f64| literal(t.complex_part().unwrap_or(t), p, Scalar::Float(x));
            format!("{}({}, {})", c.wgsl(), lit(re), lit(im))
        }
    }
}

/// An exact f32 literal (bit pattern for anything that isn't a small integer).
pub fn f32_literal(x: f32) -> String {
    if x.is_finite()
        && x == x.trunc()
        && x.abs() < 16_777_216.0
        && !(x == 0.0 && x.is_sign_negative())
    {
        format!("{x:.1}f")
    } else {
        format!("bitcast<f32>({:#010x}u)", x.to_bits())
    }
}

/// An exact f64 literal.
pub fn f64_literal(x: f64) -> String {
    if x.is_finite() && x == x.trunc() && x.abs() < 9.0e15 && !(x == 0.0 && x.is_sign_negative()) {
        format!("{x:.1}lf")
    } else {
        format!("bitcast<f64>({:#018x}lu)", x.to_bits())
    }
}

/// A zero of compute type `c`.
pub fn zero(c: Compute) -> &'static str {
    match c {
        Compute::Bool => "false",
        Compute::I32 => "0i",
        Compute::U32 => "0u",
        Compute::I64 => "0li",
        Compute::U64 => "0lu",
        Compute::F32 => "0.0f",
        Compute::F64 => "0.0lf",
        Compute::C64 => "vec2<f32>(0.0f, 0.0f)",
        Compute::C128 => "vec2<f64>(0.0lf, 0.0lf)",
    }
}

/// `to(x)` for a scalar WGSL type `to`. When `x` is a 64-bit literal (`1.0lf`, `32lu`, `-5li`)
/// the conversion is done here, because naga's constant evaluator rejects casts of 64-bit
/// literals.
pub fn cast(to: &str, x: &str) -> String {
    fold_literal_cast(to, x).unwrap_or_else(|| format!("{to}({x})"))
}

fn fold_literal_cast(to: &str, x: &str) -> Option<String> {
    let t = x.trim().trim_start_matches('(').trim_end_matches(')');
    let (num, suffix) = if let Some(n) = t.strip_suffix("lf") {
        (n, "lf")
    } else if let Some(n) = t.strip_suffix("lu") {
        (n, "lu")
    } else if let Some(n) = t.strip_suffix("li") {
        (n, "li")
    } else {
        return None;
    };
    if num.is_empty()
        || !num
            .chars()
            .all(|c| c.is_ascii_hexdigit() || "+-.xXeE".contains(c))
    {
        return None;
    }
    let value: f64 = match suffix {
        "lf" => num.parse().ok()?,
        _ => {
            let i: i128 = if let Some(h) = num.strip_prefix("0x") {
                i128::from_str_radix(h, 16).ok()?
            } else {
                num.parse().ok()?
            };
            match to {
                "u32" => return Some(format!("{}u", i as u32)),
                "i32" => return Some(format!("{}i", i as i32)),
                "u64" => return Some(format!("{}lu", i as u64)),
                "i64" => return Some(format!("{}li", i as i64)),
                _ => i as f64,
            }
        }
    };
    match to {
        "f32" => {
            let v = value as f32;
            v.is_finite()
                .then(|| format!("bitcast<f32>({}u)", v.to_bits()))
        }
        "f64" => value
            .is_finite()
            .then(|| format!("bitcast<f64>({}lu)", value.to_bits())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_exact() {
        assert_eq!(f32_literal(2.0), "2.0f");
        assert_eq!(f32_literal(f32::NAN), "bitcast<f32>(0x7fc00000u)");
        assert_eq!(f32_literal(-0.0), "bitcast<f32>(0x80000000u)");
        assert_eq!(
            literal(
                ElementType::I32,
                Compute::I32,
                Scalar::Int(i32::MIN as i128)
            ),
            "i32(-2147483648)"
        );
    }
}
