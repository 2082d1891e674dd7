//! Host-side evaluation of the conformance checks, with the semantics of StableHLO's reference
//! checker: `expect_eq` is element-wise `==` (IEEE for floats, so NaN never equals NaN;
//! complex numbers part by part), `expect_almost_eq` an absolute tolerance (equal values,
//! including equal infinities, and two NaNs pass; any other non-finite pair fails), and
//! `expect_close` a distance in ULPs (identical bits and two NaNs are 0 apart; a non-finite
//! value that is not bitwise equal is infinitely far; finite values of opposite signs add
//! their distances from zero).

use crate::ir::literal::read_scalar;
use crate::ir::{float, ElementType, Scalar, TensorType};
use crate::passes::checks::Comparison;

/// The first element that fails a check.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Row-major linear index.
    pub index: usize,
    /// Multi-dimensional index.
    pub multi_index: Vec<usize>,
    /// The actual element, printed.
    pub actual: String,
    /// The expected element, printed.
    pub expected: String,
    /// ULP distance, for float and complex elements (`u64::MAX`: not comparable).
    pub ulp: Option<u64>,
    /// How many elements fail in total.
    pub count: usize,
    /// Number of elements compared.
    pub total: usize,
}

/// Compares `actual` with `expected`, both in host layout of `ty`. `None` when all elements
/// pass; a shape or size mismatch reports element 0.
pub fn compare(
    comparison: &Comparison,
    ty: &TensorType,
    actual: &[u8],
    expected: &[u8],
) -> Option<Mismatch> {
    let dtype = ty.dtype;
    let size = dtype.byte_size();
    let n = ty.num_elements();
    let mut first: Option<Mismatch> = None;
    let mut count = 0;
    if actual.len() != n * size || expected.len() != n * size {
        return Some(Mismatch {
            index: 0,
            multi_index: vec![],
            actual: format!("{} bytes", actual.len()),
            expected: format!("{} bytes", expected.len()),
            ulp: None,
            count: n.max(1),
            total: n,
        });
    }
    for i in 0..n {
        let a = &actual[i * size..(i + 1) * size];
        let e = &expected[i * size..(i + 1) * size];
        let (ok, ulp) = element_ok(comparison, dtype, a, e);
        if !ok {
            count += 1;
            if first.is_none() {
                first = Some(Mismatch {
                    index: i,
                    multi_index: unravel(i, &ty.dims()),
                    actual: read_scalar(dtype, a).to_string(),
                    expected: read_scalar(dtype, e).to_string(),
                    ulp,
                    count: 0,
                    total: n,
                });
            }
        }
    }
    first.map(|mut m| {
        m.count = count;
        m
    })
}

fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    for (k, &d) in dims.iter().enumerate().rev() {
        if d > 0 {
            out[k] = i % d;
            i /= d;
        }
    }
    out
}

/// Bits of one float element (or of one part of a complex element).
fn bits(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

/// Whether one element passes, and its ULP distance when the element type has one.
fn element_ok(c: &Comparison, dtype: ElementType, a: &[u8], e: &[u8]) -> (bool, Option<u64>) {
    if let Some(part) = dtype.complex_part() {
        let h = a.len() / 2;
        let (re_ok, re_ulp) = element_ok(c, part, &a[..h], &e[..h]);
        let (im_ok, im_ulp) = element_ok(c, part, &a[h..], &e[h..]);
        let ulp = match (re_ulp, im_ulp) {
            (Some(x), Some(y)) => Some(x.max(y)),
            _ => None,
        };
        return (re_ok && im_ok, ulp);
    }
    if !dtype.is_float() {
        // Integers and booleans compare exactly under every check.
        let x = read_scalar(dtype, a);
        let y = read_scalar(dtype, e);
        return (x == y, None);
    }
    let ulp = ulp_distance(dtype, bits(a), bits(e));
    let x = read_scalar(dtype, a).as_f64();
    let y = read_scalar(dtype, e).as_f64();
    let ok = match c {
        Comparison::Eq => x == y,
        Comparison::AlmostEq { tolerance } => almost_equal(x, y, *tolerance),
        Comparison::Close { max_ulp, min_ulp } => ulp <= *max_ulp && ulp >= *min_ulp,
    };
    (ok, Some(ulp))
}

fn almost_equal(x: f64, y: f64, tolerance: f64) -> bool {
    if x == y {
        return true;
    }
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    if !x.is_finite() || !y.is_finite() {
        return false;
    }
    (x - y).abs() <= tolerance
}

/// ULP distance between two floats of `dtype` given by their bits.
pub fn ulp_distance(dtype: ElementType, a: u64, b: u64) -> u64 {
    let width = dtype.bit_width().min(64);
    let mask = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let (a, b) = (a & mask, b & mask);
    if a == b {
        return 0;
    }
    let fa = float::decode(dtype, a);
    let fb = float::decode(dtype, b);
    if fa.is_finite() && fb.is_finite() {
        let sign = 1u64 << (width - 1);
        let has_sign = float_has_sign(dtype);
        let (ma, sa) = if has_sign {
            (a & !sign & mask, a & sign != 0)
        } else {
            (a, false)
        };
        let (mb, sb) = if has_sign {
            (b & !sign & mask, b & sign != 0)
        } else {
            (b, false)
        };
        return if sa != sb {
            ma.saturating_add(mb)
        } else {
            ma.abs_diff(mb)
        };
    }
    if fa.is_nan() && fb.is_nan() {
        return 0;
    }
    u64::MAX
}

fn float_has_sign(dtype: ElementType) -> bool {
    !matches!(dtype, ElementType::F8E8M0FNU)
}

/// A scalar as the report prints it.
pub fn show(s: Scalar) -> String {
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn ulp_distances_follow_the_reference() {
        let d =
            |a: f32, b: f32| ulp_distance(ElementType::F32, a.to_bits() as u64, b.to_bits() as u64);
        assert_eq!(d(1.0, 1.0), 0);
        assert_eq!(d(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(d(-0.0, 0.0), 0);
        assert_eq!(d(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(d(f32::NAN, -f32::NAN), 0);
        assert_eq!(d(f32::INFINITY, f32::MAX), u64::MAX);
    }

    #[test]
    fn checks_report_the_first_mismatch() {
        let ty = TensorType::new(vec![2, 2], ElementType::F32);
        let a = f32s(&[1.0, 2.0, 3.0, f32::NAN]);
        let e = f32s(&[1.0, 2.0, 3.5, f32::NAN]);
        let m = compare(&Comparison::Eq, &ty, &a, &e).unwrap();
        assert_eq!(
            (m.index, m.multi_index.clone(), m.count),
            (2, vec![1, 0], 2)
        );
        let close = Comparison::Close {
            max_ulp: 3,
            min_ulp: 0,
        };
        assert_eq!(compare(&close, &ty, &a, &e).unwrap().count, 1);
        let almost = Comparison::AlmostEq { tolerance: 0.6 };
        assert!(compare(&almost, &ty, &a, &e).is_none());
    }
}
