//! Bit-exact encoding and decoding of the small floating-point formats (f16, bf16, tf32 and the
//! f8/f6/f4 families) to and from f64, for constants and host-side checks.

use super::types::ElementType;

/// How a format spends its special encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE-754: all-ones exponent is inf (mantissa 0) or NaN.
    Ieee,
    /// "FN": no infinities; only all-ones exponent and mantissa is NaN.
    FiniteNanAllOnes,
    /// "FNUZ": no infinities, no negative zero; the negative-zero pattern is NaN.
    FiniteNanNegZero,
    /// No infinities and no NaN at all (f4/f6 MX types).
    FiniteOnly,
    /// f8E8M0FNU: unsigned exponent-only; 0xFF is NaN.
    ExponentOnly,
}

/// Layout of one floating-point format.
#[derive(Clone, Copy, Debug)]
struct Format {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    specials: Specials,
}

fn format(t: ElementType) -> Option<Format> {
    use ElementType::*;
    let ieee = |e: u32, m: u32| Format {
        exp_bits: e,
        man_bits: m,
        bias: (1 << (e - 1)) - 1,
        specials: Specials::Ieee,
    };
    Some(match t {
        F16 => ieee(5, 10),
        BF16 => ieee(8, 7),
        TF32 => ieee(8, 10),
        F8E5M2 => ieee(5, 2),
        F8E4M3 => ieee(4, 3),
        F8E3M4 => ieee(3, 4),
        F8E4M3FN => Format {
            specials: Specials::FiniteNanAllOnes,
            ..ieee(4, 3)
        },
        F8E4M3FNUZ => Format {
            exp_bits: 4,
            man_bits: 3,
            bias: 8,
            specials: Specials::FiniteNanNegZero,
        },
        F8E4M3B11FNUZ => Format {
            exp_bits: 4,
            man_bits: 3,
            bias: 11,
            specials: Specials::FiniteNanNegZero,
        },
        F8E5M2FNUZ => Format {
            exp_bits: 5,
            man_bits: 2,
            bias: 16,
            specials: Specials::FiniteNanNegZero,
        },
        F4E2M1FN => Format {
            specials: Specials::FiniteOnly,
            ..ieee(2, 1)
        },
        F6E2M3FN => Format {
            specials: Specials::FiniteOnly,
            ..ieee(2, 3)
        },
        F6E3M2FN => Format {
            specials: Specials::FiniteOnly,
            ..ieee(3, 2)
        },
        F8E8M0FNU => Format {
            exp_bits: 8,
            man_bits: 0,
            bias: 127,
            specials: Specials::ExponentOnly,
        },
        _ => return None,
    })
}

/// Decodes the low bits of `bits` as a value of float type `t` (f32/f64 included).
pub fn decode(t: ElementType, bits: u64) -> f64 {
    match t {
        ElementType::F32 => return f32::from_bits(bits as u32) as f64,
        ElementType::F64 => return f64::from_bits(bits),
        _ => {}
    }
    let Some(f) = format(t) else {
        return f64::NAN;
    };
    let man_mask = (1u64 << f.man_bits) - 1;
    let exp_mask = (1u64 << f.exp_bits) - 1;
    let man = bits & man_mask;
    let exp = (bits >> f.man_bits) & exp_mask;
    if f.specials == Specials::ExponentOnly {
        if exp == exp_mask {
            return f64::NAN;
        }
        return 2f64.powi(exp as i32 - f.bias);
    }
    let sign_bit = (bits >> (f.man_bits + f.exp_bits)) & 1;
    let sign = if sign_bit == 1 { -1.0 } else { 1.0 };
    match f.specials {
        Specials::Ieee if exp == exp_mask => {
            return if man == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        Specials::FiniteNanAllOnes if exp == exp_mask && man == man_mask => return f64::NAN,
        Specials::FiniteNanNegZero if sign_bit == 1 && exp == 0 && man == 0 => return f64::NAN,
        _ => {}
    }
    let m = man as f64 / (1u64 << f.man_bits) as f64;
    if exp == 0 {
        sign * m * 2f64.powi(1 - f.bias)
    } else {
        sign * (1.0 + m) * 2f64.powi(exp as i32 - f.bias)
    }
}

/// Encodes `v` in float type `t`, rounding to nearest even. Values beyond the largest finite
/// number become infinity where the format has one, NaN otherwise (f4/f6: saturate).
pub fn encode(t: ElementType, v: f64) -> u64 {
    match t {
        ElementType::F32 => return (v as f32).to_bits() as u64,
        ElementType::F64 => return v.to_bits(),
        ElementType::F16 => return half::f16::from_f64(v).to_bits() as u64,
        ElementType::BF16 => return half::bf16::from_f64(v).to_bits() as u64,
        _ => {}
    }
    let Some(f) = format(t) else {
        return 0;
    };
    let exp_mask = (1u64 << f.exp_bits) - 1;
    let man_mask = (1u64 << f.man_bits) - 1;
    let sign_shift = f.man_bits + f.exp_bits;
    let nan_bits = match f.specials {
        Specials::Ieee => (exp_mask << f.man_bits) | (1 << f.man_bits.saturating_sub(1)),
        Specials::FiniteNanAllOnes => (exp_mask << f.man_bits) | man_mask,
        Specials::FiniteNanNegZero => 1 << sign_shift,
        Specials::FiniteOnly => (exp_mask << f.man_bits) | man_mask,
        Specials::ExponentOnly => exp_mask,
    };
    if v.is_nan() {
        return nan_bits;
    }
    if f.specials == Specials::ExponentOnly {
        if v <= 0.0 {
            return nan_bits;
        }
        let e = v.log2().round() as i32 + f.bias;
        return if e < 0 {
            0
        } else if e as u64 >= exp_mask {
            nan_bits
        } else {
            e as u64
        };
    }
    let sign = if v.is_sign_negative() { 1u64 } else { 0 };
    let a = v.abs();
    // Largest finite encoding.
    let (max_exp, max_man) = match f.specials {
        Specials::Ieee => (exp_mask - 1, man_mask),
        Specials::FiniteNanAllOnes => (exp_mask, man_mask - 1),
        _ => (exp_mask, man_mask),
    };
    let overflow = |sign: u64| -> u64 {
        match f.specials {
            Specials::Ieee => (sign << sign_shift) | (exp_mask << f.man_bits),
            Specials::FiniteOnly => (sign << sign_shift) | (max_exp << f.man_bits) | max_man,
            _ => nan_bits,
        }
    };
    if a.is_infinite() {
        return overflow(sign);
    }
    if a == 0.0 {
        return if f.specials == Specials::FiniteNanNegZero {
            0
        } else {
            sign << sign_shift
        };
    }
    // Scale to an integer count of the smallest subnormal step and round to nearest even.
    let min_exp = 1 - f.bias; // exponent of the smallest normal
    let e = (a.log2().floor() as i32).max(min_exp);
    let step = 2f64.powi(e - f.man_bits as i32);
    let q = a / step;
    let mut n = q.floor();
    let frac = q - n;
    if frac > 0.5 || (frac == 0.5 && (n as u64) % 2 == 1) {
        n += 1.0;
    }
    let mut n = n as u64;
    let mut biased = if a < 2f64.powi(min_exp) {
        // Subnormal: n counts steps of the smallest subnormal.
        if n >> f.man_bits != 0 {
            // Rounded up into the normals.
            n &= man_mask;
            1
        } else {
            0
        }
    } else {
        (e + f.bias) as u64
    };
    if biased > 0 && n >> f.man_bits >= 2 {
        // Mantissa overflowed into the next binade.
        n >>= 1;
        biased += 1;
    }
    let man = n & man_mask;
    if biased > max_exp || (biased == max_exp && man > max_man) {
        return overflow(sign);
    }
    let bits = (biased << f.man_bits) | man;
    if bits == 0 && f.specials == Specials::FiniteNanNegZero {
        return 0;
    }
    (sign << sign_shift) | bits
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElementType::*;

    #[test]
    fn f8_e4m3fn_round_trips_every_code() {
        for bits in 0u64..256 {
            let v = decode(F8E4M3FN, bits);
            if v.is_nan() {
                continue;
            }
            assert_eq!(encode(F8E4M3FN, v), bits, "bits {bits:#x} value {v}");
        }
        assert_eq!(decode(F8E4M3FN, 0x7e), 448.0);
        assert!(decode(F8E4M3FN, 0x7f).is_nan());
    }

    #[test]
    fn all_small_formats_round_trip() {
        for t in [
            F8E5M2,
            F8E4M3,
            F8E3M4,
            F8E4M3FNUZ,
            F8E4M3B11FNUZ,
            F8E5M2FNUZ,
            F4E2M1FN,
            F6E2M3FN,
            F6E3M2FN,
            TF32,
        ] {
            let width = t.bit_width();
            for bits in 0u64..(1 << width.min(12)) {
                let v = decode(t, bits);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(decode(t, encode(t, v)), v, "{t} bits {bits:#x}");
            }
        }
    }

    #[test]
    fn rounding_and_specials() {
        assert_eq!(decode(F8E5M2, encode(F8E5M2, 1e10)), f64::INFINITY);
        assert!(decode(F8E4M3FNUZ, 0x80).is_nan());
        assert_eq!(
            decode(F16, encode(F16, 1.0 / 3.0)),
            half::f16::from_f64(1.0 / 3.0).to_f64()
        );
        assert_eq!(decode(F8E8M0FNU, 127), 1.0);
        assert_eq!(decode(F4E2M1FN, 0x7), 6.0);
    }
}
