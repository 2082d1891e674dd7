//! WGSL expressions for the elementwise ops, with XLA's semantics on every dtype: wrap-around
//! of narrow integers, integer division by zero, NaN-propagating min/max, saturating
//! float-to-int conversion, shifts past the bit width, narrow floats rounded after each op.
//! Arguments are WGSL variable names (each is used freely, possibly several times).

use std::collections::BTreeSet;

use super::dtype::{self, Compute};
use crate::error::{Error, Result};
use crate::ir::attr::{ComparisonDirection, ComparisonType};
use crate::ir::{BinaryOp, ElementType, UnaryOp};

/// Names of library functions (helpers and math) a kernel calls.
pub type Needs = BTreeSet<String>;

fn need(needs: &mut Needs, name: String) -> String {
    needs.insert(name.clone());
    name
}

fn unsupported(what: &str, t: ElementType) -> Error {
    Error::unimplemented(format!("{what} on element type {t}"))
}

/// The math library's name for a real or complex function (`wh_exp_f32`, `wh_cexp_f64`).
fn math(needs: &mut Needs, name: &str, c: Compute) -> String {
    let prefix = if c.is_complex() { "c" } else { "" };
    need(needs, format!("wh_{prefix}{name}_{}", c.suffix()))
}

/// Bit width of the integer value set of `t` (its storage width for `i1`).
fn width(t: ElementType) -> u32 {
    t.bit_width()
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// `unary(x)` for an op whose operand has element type `t`.
pub fn unary(u: UnaryOp, t: ElementType, c: Compute, x: &str, needs: &mut Needs) -> Result<String> {
    use UnaryOp::*;
    let z = dtype::zero(c);
    let e = match u {
        // IEEE 754 defines abs and negate of a float as operations on its sign bit alone, NaN
        // included (XLA cpu keeps a NaN's payload and flips or clears its sign). Written as
        // such: NVIDIA's driver compiled `-x` of a NaN to its canonical NaN 0x7fffffff on an
        // H200, so `top_k(-x)` put every NaN first, where cpu puts the negated -NaNs first
        // and the negated +NaNs last.
        Abs => match c {
            Compute::C64 | Compute::C128 => return Ok(format!("{}({x})", math(needs, "abs", c))),
            Compute::U32 | Compute::U64 | Compute::Bool => x.to_string(),
            Compute::F32 => format!("bitcast<f32>(bitcast<u32>({x}) & 0x7fffffffu)"),
            Compute::F64 => format!("bitcast<f64>(bitcast<u64>({x}) & 0x7ffffffffffffffflu)"),
            _ => format!("abs({x})"),
        },
        Negate => match c {
            Compute::U32 => format!("(0u - {x})"),
            Compute::U64 => format!("(0lu - {x})"),
            Compute::Bool => x.to_string(),
            Compute::F32 => format!("bitcast<f32>(bitcast<u32>({x}) ^ 0x80000000u)"),
            Compute::F64 => format!("bitcast<f64>(bitcast<u64>({x}) ^ 0x8000000000000000lu)"),
            Compute::C64 => {
                format!("bitcast<vec2<f32>>(bitcast<vec2<u32>>({x}) ^ vec2<u32>(0x80000000u))")
            }
            _ => format!("(-{x})"),
        },
        Not => match c {
            Compute::Bool => format!("(!{x})"),
            Compute::I32 | Compute::U32 | Compute::I64 | Compute::U64 => format!("(~{x})"),
            _ => return Err(unsupported("not", t)),
        },
        Sign => match c {
            Compute::F32 | Compute::F64 => {
                let n = need(needs, format!("wh_is_nan_{}", c.wgsl()));
                format!("select(sign({x}), {x}, {x} == {z} || {n}({x}))")
            }
            Compute::I32 => format!("sign({x})"),
            Compute::U32 => format!("select(0u, 1u, {x} != 0u)"),
            Compute::I64 => format!("select(select(0li, 1li, {x} > 0li), -1li, {x} < 0li)"),
            Compute::U64 => format!("select(0lu, 1lu, {x} != 0lu)"),
            Compute::C64 | Compute::C128 => return Ok(format!("{}({x})", math(needs, "sign", c))),
            Compute::Bool => x.to_string(),
        },
        Popcnt | CountLeadingZeros => {
            let f = if u == Popcnt {
                "countOneBits"
            } else {
                "countLeadingZeros"
            };
            let w = width(t);
            match c {
                Compute::I32 | Compute::U32 if w < 32 => {
                    let base = format!("{f}(bitcast<u32>({x}) & {}u)", mask(w));
                    let adjusted = if u == CountLeadingZeros {
                        format!("({base} - {}u)", 32 - w)
                    } else {
                        base
                    };
                    if c == Compute::I32 {
                        format!("i32({adjusted})")
                    } else {
                        adjusted
                    }
                }
                Compute::I32 | Compute::U32 => format!("{f}({x})"),
                Compute::I64 | Compute::U64 => {
                    // naga has no 64-bit polyfill for these: split into 32-bit halves.
                    let v = if c == Compute::I64 {
                        format!("bitcast<u64>({x})")
                    } else {
                        x.to_string()
                    };
                    let lo = format!("u32({v} & 0xfffffffflu)");
                    let hi = format!("u32({v} >> 32u)");
                    let r = if u == Popcnt {
                        format!("(countOneBits({lo}) + countOneBits({hi}))")
                    } else {
                        format!(
                            "select(countLeadingZeros({hi}), 32u + countLeadingZeros({lo}), {hi} == 0u)"
                        )
                    };
                    format!("{}({r})", c.wgsl())
                }
                _ => {
                    return Err(unsupported(
                        if u == Popcnt {
                            "popcnt"
                        } else {
                            "count_leading_zeros"
                        },
                        t,
                    ))
                }
            }
        }
        Ceil | Floor | RoundNearestEven if c.is_float() => {
            let f = match u {
                Ceil => "ceil",
                Floor => "floor",
                _ => "round",
            };
            format!("{f}({x})")
        }
        RoundNearestAfz if c.is_float() => {
            return Ok(format!("{}({x})", math(needs, "round_afz", c)))
        }
        IsFinite | IsInf | IsPosInf | IsNegInf if c.is_float() => {
            let (bits, abs_mask, inf, neg_inf) = if c == Compute::F32 {
                (
                    format!("bitcast<u32>({x})"),
                    "0x7fffffffu",
                    "0x7f800000u",
                    "0xff800000u",
                )
            } else {
                (
                    format!("bitcast<u64>({x})"),
                    "0x7ffffffffffffffflu",
                    "0x7ff0000000000000lu",
                    "0xfff0000000000000lu",
                )
            };
            return Ok(match u {
                IsFinite => format!("(({bits} & {inf}) != {inf})"),
                IsInf => format!("(({bits} & {abs_mask}) == {inf})"),
                IsPosInf => format!("({bits} == {inf})"),
                _ => format!("({bits} == {neg_inf})"),
            });
        }
        Real => {
            return Ok(if c.is_complex() {
                format!("{x}.x")
            } else {
                x.to_string()
            })
        }
        Imag => {
            return Ok(if c.is_complex() {
                format!("{x}.y")
            } else {
                dtype::zero(c).to_string()
            })
        }
        Conj => match c {
            Compute::C64 | Compute::C128 => format!("{}({x}.x, -{x}.y)", c.wgsl()),
            _ => x.to_string(),
        },
        Square => match c {
            Compute::C64 | Compute::C128 => format!("{}({x})", math(needs, "square", c)),
            _ => format!("({x} * {x})"),
        },
        Cbrt if c.is_complex() => {
            // The principal cube root, exp(log(z) / 3).
            let e = math(needs, "exp", c);
            let l = math(needs, "log", c);
            format!("{e}({l}({x}) / 3.0)")
        }
        _ if c.is_float() || c.is_complex() => {
            let name = match u {
                Cbrt => "cbrt",
                Cosine => "cos",
                Exponential => "exp",
                ExponentialMinusOne => "expm1",
                Log => "log",
                LogPlusOne => "log1p",
                Logistic => "logistic",
                Rsqrt => "rsqrt",
                Sine => "sin",
                Sqrt => "sqrt",
                Tan => "tan",
                Tanh => "tanh",
                Acos => "acos",
                Acosh => "acosh",
                Asin => "asin",
                Asinh => "asinh",
                Atan => "atan",
                Atanh => "atanh",
                BesselI1e => "bessel_i1e",
                Cosh => "cosh",
                Digamma => "digamma",
                Erf => "erf",
                ErfInv => "erf_inv",
                Erfc => "erfc",
                Lgamma => "lgamma",
                Sinh => "sinh",
                _ => return Err(unsupported(u.op_name(), t)),
            };
            format!("{}({x})", math(needs, name, c))
        }
        _ => return Err(unsupported(u.op_name(), t)),
    };
    Ok(dtype::round(t, &e))
}

/// `x OP y` for a binary op on operands of element type `t` (the result type for `complex`
/// is the complex type; `t` is the part type then).
pub fn binary(
    b: BinaryOp,
    t: ElementType,
    c: Compute,
    x: &str,
    y: &str,
    needs: &mut Needs,
) -> Result<String> {
    use BinaryOp::*;
    let cx = c.is_complex();
    let e = match b {
        Add => match c {
            Compute::Bool => format!("({x} || {y})"),
            _ => format!("({x} + {y})"),
        },
        Subtract => match c {
            Compute::Bool => format!("({x} != {y})"),
            _ => format!("({x} - {y})"),
        },
        Multiply => match c {
            Compute::Bool => format!("({x} && {y})"),
            _ if cx => format!("{}({x}, {y})", math(needs, "mul", c)),
            _ => format!("({x} * {y})"),
        },
        // Floats through `wh_div_f32` / `wh_div_f64` (helpers.wgsl, math/f64.wgsl): IEEE
        // results where a driver's fast math folds x / x.
        Divide => match c {
            _ if cx => format!("{}({x}, {y})", math(needs, "div", c)),
            Compute::Bool => return Err(unsupported("divide", t)),
            _ => format!("{}({x}, {y})", need(needs, format!("wh_div_{}", c.wgsl()))),
        },
        Remainder => match c {
            Compute::F32 | Compute::F64 => format!("{}({x}, {y})", math(needs, "rem", c)),
            Compute::I32 | Compute::U32 | Compute::I64 | Compute::U64 => {
                format!("{}({x}, {y})", need(needs, format!("wh_rem_{}", c.wgsl())))
            }
            _ => return Err(unsupported("remainder", t)),
        },
        Maximum | Minimum => {
            let mx = b == Maximum;
            match c {
                Compute::Bool => format!("({x} {} {y})", if mx { "||" } else { "&&" }),
                Compute::F32 | Compute::F64 => format!(
                    "{}({x}, {y})",
                    need(
                        needs,
                        format!("wh_{}_{}", if mx { "max" } else { "min" }, c.wgsl())
                    )
                ),
                // Complex numbers order lexicographically: real part, then imaginary part.
                _ if cx => {
                    let o = if mx { ">" } else { "<" };
                    format!(
                        "select({y}, {x}, ({x}).x {o} ({y}).x || (({x}).x == ({y}).x && ({x}).y {o}= ({y}).y))"
                    )
                }
                _ => format!("{}({x}, {y})", if mx { "max" } else { "min" }),
            }
        }
        Power => match c {
            Compute::F32 | Compute::F64 | Compute::C64 | Compute::C128 => {
                format!("{}({x}, {y})", math(needs, "pow", c))
            }
            Compute::Bool => return Err(unsupported("power", t)),
            _ => format!("{}({x}, {y})", need(needs, format!("wh_pow_{}", c.wgsl()))),
        },
        Atan2 if c.is_float() => format!("{}({x}, {y})", math(needs, "atan2", c)),
        NextAfter if c.is_float() => format!("{}({x}, {y})", math(needs, "next_after", c)),
        Polygamma if c.is_float() => format!("{}({x}, {y})", math(needs, "polygamma", c)),
        Zeta if c.is_float() => format!("{}({x}, {y})", math(needs, "zeta", c)),
        Complex => {
            let cc = match c {
                Compute::F32 => Compute::C64,
                Compute::F64 => Compute::C128,
                _ => return Err(unsupported("complex", t)),
            };
            return Ok(format!("{}({x}, {y})", cc.wgsl()));
        }
        And | Or | Xor => {
            let (lop, bop) = match b {
                And => ("&&", "&"),
                Or => ("||", "|"),
                _ => ("!=", "^"),
            };
            match c {
                Compute::Bool => format!("({x} {lop} {y})"),
                Compute::I32 | Compute::U32 | Compute::I64 | Compute::U64 => {
                    format!("({x} {bop} {y})")
                }
                _ => return Err(unsupported(b.op_name(), t)),
            }
        }
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => shift(b, t, c, x, y)?,
        Mulhi => {
            let w = width(t);
            match c {
                Compute::I32 | Compute::U32 if w < 32 => format!("(({x} * {y}) >> {w}u)"),
                Compute::I32 => format!("i32((i64({x}) * i64({y})) >> 32u)"),
                Compute::U32 => format!("u32((u64({x}) * u64({y})) >> 32u)"),
                Compute::I64 | Compute::U64 => {
                    format!(
                        "{}({x}, {y})",
                        need(needs, format!("wh_mulhi_{}", c.wgsl()))
                    )
                }
                _ => return Err(unsupported("mulhi", t)),
            }
        }
        _ => return Err(unsupported(b.op_name(), t)),
    };
    Ok(dtype::round(t, &e))
}

fn shift(b: BinaryOp, t: ElementType, c: Compute, x: &str, y: &str) -> Result<String> {
    let w = width(t);
    let (mut amount, in_range, zero) = match c {
        Compute::I32 => (
            format!("bitcast<u32>({y})"),
            format!("bitcast<u32>({y}) < {w}u"),
            "0i",
        ),
        Compute::U32 => (y.to_string(), format!("{y} < {w}u"), "0u"),
        Compute::I64 => (
            format!("u32(bitcast<u64>({y}))"),
            format!("bitcast<u64>({y}) < {w}lu"),
            "0li",
        ),
        Compute::U64 => (dtype::cast("u32", y), format!("{y} < {w}lu"), "0lu"),
        _ => return Err(unsupported(b.op_name(), t)),
    };
    // A literal amount is folded here (clamped: the out-of-range case is selected away, but
    // naga rejects constant shifts by the width or more).
    let lit = y.trim_matches(|c| c == '(' || c == ')');
    let digits = lit.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if let Ok(v) = digits.parse::<i128>() {
        amount = format!("{}u", v.clamp(0, w as i128 - 1));
    }
    let signed = matches!(c, Compute::I32 | Compute::I64);
    Ok(match b {
        BinaryOp::ShiftLeft => format!("select({zero}, {x} << {amount}, {in_range})"),
        BinaryOp::ShiftRightLogical => {
            // Shift the w-bit pattern as unsigned.
            let pattern = match c {
                Compute::I32 => format!("(bitcast<u32>({x}) & {}u)", mask(w)),
                Compute::I64 => format!("bitcast<u64>({x})"),
                _ => x.to_string(),
            };
            let shifted = format!("({pattern} >> {amount})");
            let back = match c {
                Compute::I32 => format!("bitcast<i32>({shifted})"),
                Compute::I64 => format!("bitcast<i64>({shifted})"),
                _ => shifted,
            };
            format!("select({zero}, {back}, {in_range})")
        }
        _ => {
            // Arithmetic: replicate the sign bit of the w-bit pattern.
            let max = w - 1;
            let clamped = format!("select({max}u, {amount}, {in_range})");
            if signed {
                format!("({x} >> {clamped})")
            } else if c == Compute::U32 {
                let sh = 32 - w;
                format!("bitcast<u32>(((bitcast<i32>({x} << {sh}u) >> {sh}u) >> {clamped}))")
            } else {
                format!("bitcast<u64>((bitcast<i64>({x}) >> {clamped}))")
            }
        }
    })
}

/// `x DIR y` (an `i1` result) for operands of element type `t`.
pub fn compare(
    dir: ComparisonDirection,
    compare_type: Option<ComparisonType>,
    t: ElementType,
    c: Compute,
    x: &str,
    y: &str,
    needs: &mut Needs,
) -> Result<String> {
    let op = match dir {
        ComparisonDirection::Eq => "==",
        ComparisonDirection::Ne => "!=",
        ComparisonDirection::Ge => ">=",
        ComparisonDirection::Gt => ">",
        ComparisonDirection::Le => "<=",
        ComparisonDirection::Lt => "<",
    };
    if c.is_complex() {
        return match dir {
            ComparisonDirection::Eq => {
                let n = need(
                    needs,
                    format!(
                        "wh_is_nan_{}",
                        c.wgsl().trim_start_matches("vec2<").trim_end_matches('>')
                    ),
                );
                Ok(format!(
                    "(all({x} == {y}) && !({n}({x}.x) || {n}({x}.y) || {n}({y}.x) || {n}({y}.y)))"
                ))
            }
            ComparisonDirection::Ne => {
                let n = need(
                    needs,
                    format!(
                        "wh_is_nan_{}",
                        c.wgsl().trim_start_matches("vec2<").trim_end_matches('>')
                    ),
                );
                Ok(format!(
                    "(any({x} != {y}) || {n}({x}.x) || {n}({x}.y) || {n}({y}.x) || {n}({y}.y))"
                ))
            }
            _ => Err(unsupported("ordered compare", t)),
        };
    }
    if c == Compute::Bool {
        return Ok(format!("(select(0u, 1u, {x}) {op} select(0u, 1u, {y}))"));
    }
    if compare_type == Some(ComparisonType::TotalOrder) && c.is_float() {
        let k = need(needs, format!("wh_total_order_{}", c.wgsl()));
        return Ok(format!("({k}({x}) {op} {k}({y}))"));
    }
    if matches!(c, Compute::F32 | Compute::F64) {
        // NaN tests on the bits: Mesa may evaluate f64 `!=` as an ordered compare.
        let n = need(needs, format!("wh_is_nan_{}", c.wgsl()));
        return Ok(match dir {
            ComparisonDirection::Ne => format!("(({x} != {y}) || {n}({x}) || {n}({y}))"),
            _ => format!("(({x} {op} {y}) && !{n}({x}) && !{n}({y}))"),
        });
    }
    if c == Compute::I64 && !matches!(dir, ComparisonDirection::Eq | ComparisonDirection::Ne) {
        // Signed 64-bit order as unsigned order with the sign bits flipped: Mesa 22.3's
        // llvmpipe got `i64(u) < k` wrong for a u32 `u` and a constant `k` (every
        // `iota(i64) >= 300` was true), while its u64 compares are right.
        return Ok(format!(
            "((bitcast<u64>({x}) ^ 0x8000000000000000lu) {op} (bitcast<u64>({y}) ^ 0x8000000000000000lu))"
        ));
    }
    Ok(format!("({x} {op} {y})"))
}

/// `select(pred, on_true, on_false)`.
pub fn select(p: &str, t: &str, f: &str) -> String {
    format!("select({f}, {t}, {p})")
}

/// `clamp(lo, x, hi)` with NaN-propagating bounds for floats.
pub fn clamp(c: Compute, lo: &str, x: &str, hi: &str, needs: &mut Needs) -> Result<String> {
    Ok(match c {
        Compute::F32 | Compute::F64 => {
            let mx = need(needs, format!("wh_max_{}", c.wgsl()));
            let mn = need(needs, format!("wh_min_{}", c.wgsl()));
            format!("{mn}({mx}({x}, {lo}), {hi})")
        }
        Compute::Bool => format!("(({x} || {lo}) && {hi})"),
        Compute::C64 | Compute::C128 => return Err(Error::unimplemented("clamp on complex")),
        _ => format!("min(max({x}, {lo}), {hi})"),
    })
}

/// Saturation bounds for converting float type `f` to integers in [lo, hi]: `lo` as a float,
/// the largest float <= `hi`, and the next float above it (from which on the result is `hi`).
fn sat_bounds(f: Compute, lo: i128, hi: i128) -> (String, String, String) {
    if f == Compute::F32 {
        let mut below = hi as f32;
        if below as i128 > hi {
            below = f32::from_bits(below.to_bits() - 1);
        }
        let above = f32::from_bits(below.to_bits() + 1);
        (
            dtype::f32_literal(lo as f32),
            dtype::f32_literal(below),
            dtype::f32_literal(above),
        )
    } else {
        let mut below = hi as f64;
        if below as i128 > hi {
            below = f64::from_bits(below.to_bits() - 1);
        }
        let above = f64::from_bits(below.to_bits() + 1);
        (
            dtype::f64_literal(lo as f64),
            dtype::f64_literal(below),
            dtype::f64_literal(above),
        )
    }
}

thread_local! {
    static WIDEN_VIA_F64: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Resets the widening mode when a compilation ends (also by unwinding).
pub struct WideningGuard(bool);

impl Drop for WideningGuard {
    fn drop(&mut self) {
        WIDEN_VIA_F64.with(|w| w.set(self.0));
    }
}

/// Spells i32/u32 → i64/u64 widening through f64 on this thread until the guard drops: lavapipe
/// (Mesa 22.3) miscompiles `i64(i32)`/`u64(u32)` in some kernels, copying the low word into the
/// high one (3 became 3 + 3 * 2^32). Exact (f64 holds every 32-bit integer); only for adapters
/// that have f64 and need it — plain casts elsewhere (e.g. Metal has i64 but no f64).
pub fn widen_via_f64(on: bool) -> WideningGuard {
    WideningGuard(WIDEN_VIA_F64.with(|w| w.replace(on)))
}

/// `u64(x)` for a `u32` expression `x`, spelled as [`widen_via_f64`] asks on this thread.
pub fn widen_u32_to_u64(x: &str) -> String {
    int_cast(Compute::U32, Compute::U64, x)
}

fn int_cast(from: Compute, to: Compute, x: &str) -> String {
    use Compute::*;
    let via_f64 = WIDEN_VIA_F64.with(|w| w.get());
    match (from, to) {
        (a, b) if a == b => x.to_string(),
        (I32, U32) => format!("bitcast<u32>({x})"),
        (U32, I32) => format!("bitcast<i32>({x})"),
        (I32, I64) if !via_f64 => format!("i64({x})"),
        (U32, I64) if !via_f64 => format!("i64({x})"),
        (U32, U64) if !via_f64 => format!("u64({x})"),
        (I32, U64) if !via_f64 => format!("bitcast<u64>(i64({x}))"),
        (I32, I64) => format!("i64(f64({x}))"),
        (U32, I64) => format!("i64(f64({x}))"),
        (U32, U64) => format!("u64(f64({x}))"),
        (I32, U64) => format!("bitcast<u64>(i64(f64({x})))"),
        (I64, I32) | (I64, U32) | (U64, U32) => dtype::cast(to.wgsl(), x),
        (U64, I32) => format!("i32(bitcast<i64>({x}))"),
        (I64, U64) => format!("bitcast<u64>({x})"),
        (U64, I64) => format!("bitcast<i64>({x})"),
        _ => dtype::cast(to.wgsl(), x),
    }
}

/// `convert` from element type `from` to `to`.
pub fn convert(
    from: ElementType,
    fc: Compute,
    to: ElementType,
    tc: Compute,
    x: &str,
) -> Result<String> {
    use Compute::*;
    if from == to {
        return Ok(x.to_string());
    }
    // Complex sources: the real part (complex -> complex converts both parts).
    if fc.is_complex() {
        if tc.is_complex() {
            return Ok(format!("{}({x})", tc.wgsl()));
        }
        let part = from.complex_part().unwrap_or(ElementType::F32);
        return convert(part, fc.part(), to, tc, &format!("{x}.x"));
    }
    if tc.is_complex() {
        let part = to.complex_part().unwrap_or(ElementType::F32);
        let re = convert(from, fc, part, tc.part(), x)?;
        return Ok(format!("{}({re}, {})", tc.wgsl(), dtype::zero(tc.part())));
    }
    let e = match (fc, tc) {
        (_, Bool) => format!("({x} != {})", dtype::zero(fc)),
        (Bool, _) => format!(
            "select({}, {}, {x})",
            dtype::zero(tc),
            dtype::literal(to, tc, crate::ir::Scalar::Int(1))
        ),
        (I32 | U32 | I64 | U64, I32 | U32 | I64 | U64) => int_cast(fc, tc, x),
        (I32 | U32 | I64 | U64, F32 | F64) => dtype::cast(tc.wgsl(), x),
        (F32 | F64, I32 | U32 | I64 | U64) => {
            let (lo, hi) = crate::ir::types::int_range(to);
            let hi = if to == ElementType::U64 {
                u64::MAX as i128
            } else {
                hi as i128
            };
            let (lo_l, hi_l, above_l) = sat_bounds(fc, lo as i128, hi);
            let max_lit = dtype::literal(to, tc, crate::ir::Scalar::Int(hi));
            let nan = format!("wh_is_nan_{}", fc.wgsl());
            format!(
                "select(select({}(clamp({x}, {lo_l}, {hi_l})), {max_lit}, {x} >= {above_l}), {}, {nan}({x}))",
                tc.wgsl(),
                dtype::zero(tc)
            )
        }
        (F32, F64) | (F64, F32) => dtype::cast(tc.wgsl(), x),
        (F32, F32) | (F64, F64) => x.to_string(),
        _ => return Err(Error::unimplemented(format!("convert from {from} to {to}"))),
    };
    Ok(dtype::round(to, &e))
}

/// `bitcast_convert` between element types of the same width.
pub fn bitcast(
    from: ElementType,
    fc: Compute,
    to: ElementType,
    tc: Compute,
    x: &str,
    needs: &mut Needs,
) -> Result<String> {
    if from.bit_width() != to.bit_width() {
        return Err(Error::unimplemented(format!(
            "bitcast_convert from {from} to {to} (different widths) inside a fused kernel"
        )));
    }
    let bits = raw_bits(from, fc, x, needs)?;
    from_raw_bits(to, tc, from.bit_width(), &bits)
}

/// The raw bits of value `x` (element type `t`, computed as `c`) as an unsigned integer: a
/// `u32` for types up to 32 bits (only the low `bit_width` bits set), else a `u64`.
pub fn raw_bits(t: ElementType, c: Compute, x: &str, needs: &mut Needs) -> Result<String> {
    use Compute::*;
    let w = t.bit_width();
    Ok(match (t, c) {
        (ElementType::F16, _) => format!("{}({x})", need(needs, "wh_f32_to_f16_bits".into())),
        (ElementType::BF16, _) => format!("{}({x})", need(needs, "wh_f32_to_bf16_bits".into())),
        (t, _) if dtype::narrow_float(t).is_some() => {
            need(needs, "wh_f32_to_narrow_float".into());
            dtype::narrow_float_encode(t, x).unwrap_or_default()
        }
        (ElementType::Pred, _) => format!("select(0u, 1u, {x})"),
        (_, I32) if w < 32 => format!("(bitcast<u32>({x}) & {}u)", mask(w)),
        (_, U32) if w < 32 => format!("({x} & {}u)", mask(w)),
        (_, F32 | I32) if w == 32 => format!("bitcast<u32>({x})"),
        (_, F64 | I64) => format!("bitcast<u64>({x})"),
        (_, C64) => format!("((u64(bitcast<u32>({x}.y)) << 32u) | u64(bitcast<u32>({x}.x)))"),
        (_, U32 | U64) => x.to_string(),
        _ => return Err(Error::unimplemented(format!("bitcast_convert from {t}"))),
    })
}

/// The value of element type `t` (computed as `c`) whose raw bits are `bits` (`w` bits wide, in
/// a `u32` up to 32 bits, else a `u64`).
pub fn from_raw_bits(t: ElementType, c: Compute, w: u32, bits: &str) -> Result<String> {
    use Compute::*;
    Ok(match (t, c) {
        (ElementType::F16, _) => format!("wh_f16_bits_to_f32(({bits}) & 0xffffu)"),
        (ElementType::BF16, _) => format!("bitcast<f32>((({bits}) & 0xffffu) << 16u)"),
        (t, _) if dtype::narrow_float(t).is_some() => {
            let m = mask(t.bit_width());
            dtype::narrow_float_decode(t, &format!("(({bits}) & {m}u)")).unwrap_or_default()
        }
        (ElementType::Pred, _) => format!("(({bits}) != 0u)"),
        (t, I32) if w < 32 => dtype::round(t, &format!("bitcast<i32>({bits})")),
        (t, U32) if w < 32 => dtype::round(t, bits),
        (_, F32 | I32) => format!("bitcast<{}>({bits})", c.wgsl()),
        (_, U32 | U64) => bits.to_string(),
        (_, F64 | I64) => format!("bitcast<{}>({bits})", c.wgsl()),
        (_, C64) => format!(
            "vec2<f32>(bitcast<f32>(u32(({bits}) & 0xfffffffflu)), bitcast<f32>(u32(({bits}) >> 32u)))"
        ),
        _ => return Err(Error::unimplemented(format!("bitcast_convert to {t}"))),
    })
}
