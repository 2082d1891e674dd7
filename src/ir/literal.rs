//! Dense tensor data in PJRT's host layout: row-major, little-endian, one byte per `i1` and per
//! sub-byte element, complex numbers as (real, imaginary) pairs.

use std::fmt;
use std::sync::Arc;

use super::float;
use super::types::{ElementType, TensorType};
use crate::error::{Error, Result};

/// One element's value, wide enough for every element type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `i1`.
    Bool(bool),
    /// Any integer type (exact for i64 and u64).
    Int(i128),
    /// Any real float type, widened exactly to f64.
    Float(f64),
    /// A complex number (real, imaginary).
    Complex(f64, f64),
}

impl Scalar {
    /// The value as f64 (booleans 0/1, complex: real part).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
            Scalar::Complex(r, _) => r,
        }
    }
    /// The value as an integer (floats truncated, complex: real part).
    pub fn as_i128(self) -> i128 {
        match self {
            Scalar::Bool(b) => b as i128,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i128,
            Scalar::Complex(r, _) => r as i128,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x:?}"),
            Scalar::Complex(r, i) => write!(f, "({r:?}, {i:?})"),
        }
    }
}

/// A constant tensor: its type and its bytes in host layout.
#[derive(Clone)]
pub struct Literal {
    /// Shape and element type (static).
    pub ty: TensorType,
    /// `ty.byte_size()` bytes, or one element's bytes for a splat of any size (a splat is
    /// never expanded: JAX's `erf_inv` of 16M elements carries twenty full-shape splats),
    /// shared cheaply between copies of the IR. [`Literal::bytes`] has every element's.
    pub data: Arc<[u8]>,
}

impl PartialEq for Literal {
    /// The same type and elements, however each is stored.
    fn eq(&self, other: &Literal) -> bool {
        if self.ty != other.ty {
            return false;
        }
        if self.data.len() == other.data.len() {
            return self.data == other.data;
        }
        let size = self.ty.dtype.byte_size();
        self.is_splat() && other.is_splat() && self.data.get(..size) == other.data.get(..size)
    }
}

impl fmt::Debug for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Literal({}, {} bytes)", self.ty, self.data.len())
    }
}

impl Literal {
    /// Wraps bytes, checking their length against the type.
    pub fn new(ty: TensorType, data: Vec<u8>) -> Result<Literal> {
        if !ty.is_static() {
            return Err(Error::invalid(format!("constant of dynamic type {ty}")));
        }
        if data.len() != ty.byte_size() {
            return Err(Error::invalid(format!(
                "constant of type {ty} needs {} bytes, got {}",
                ty.byte_size(),
                data.len()
            )));
        }
        Ok(Literal {
            ty,
            data: data.into(),
        })
    }

    /// All-zero tensor (0, false, +0.0).
    pub fn zeros(ty: TensorType) -> Literal {
        let n = ty.byte_size();
        Literal {
            ty,
            data: vec![0u8; n].into(),
        }
    }

    /// A tensor with every element equal to `v` (converted to the element type), stored as
    /// one element.
    pub fn splat(ty: TensorType, v: Scalar) -> Literal {
        let mut one = Vec::with_capacity(ty.dtype.byte_size());
        push_scalar(&mut one, ty.dtype, v);
        Literal {
            ty,
            data: one.into(),
        }
    }

    /// A tensor with every element's bytes (host layout) equal to `one`, stored as one
    /// element.
    pub fn splat_bytes(ty: TensorType, one: Vec<u8>) -> Result<Literal> {
        if !ty.is_static() {
            return Err(Error::invalid(format!("constant of dynamic type {ty}")));
        }
        if one.len() != ty.dtype.byte_size() {
            return Err(Error::invalid(format!(
                "an element of type {ty} needs {} bytes, got {}",
                ty.dtype.byte_size(),
                one.len()
            )));
        }
        Ok(Literal {
            ty,
            data: one.into(),
        })
    }

    /// Every element's bytes in host layout (`ty.byte_size()` of them): a splat expanded.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        let full = self.ty.byte_size();
        if self.data.len() == full {
            return std::borrow::Cow::Borrowed(&self.data);
        }
        let mut out = Vec::with_capacity(full);
        while out.len() < full {
            out.extend_from_slice(&self.data);
        }
        out.truncate(full);
        std::borrow::Cow::Owned(out)
    }

    /// A tensor from one value per element, converting each to the element type.
    pub fn from_scalars(ty: TensorType, values: &[Scalar]) -> Result<Literal> {
        if values.len() != ty.num_elements() {
            return Err(Error::invalid(format!(
                "constant of type {ty} needs {} elements, got {}",
                ty.num_elements(),
                values.len()
            )));
        }
        let mut data = Vec::with_capacity(ty.byte_size());
        for &v in values {
            push_scalar(&mut data, ty.dtype, v);
        }
        Literal::new(ty, data)
    }

    /// A 0-d literal.
    pub fn scalar(dtype: ElementType, v: Scalar) -> Literal {
        Literal::splat(TensorType::scalar(dtype), v)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.ty.num_elements()
    }

    /// True for empty tensors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` (row-major linear index). Out-of-range indices read as zero.
    pub fn get(&self, i: usize) -> Scalar {
        let size = self.ty.dtype.byte_size();
        let at = if self.data.len() == size && i < self.len() {
            0
        } else {
            i
        };
        match self.data.get(at * size..(at + 1) * size) {
            Some(bytes) => read_scalar(self.ty.dtype, bytes),
            None => read_scalar(self.ty.dtype, &vec![0u8; size]),
        }
    }

    /// Every element, row-major.
    pub fn scalars(&self) -> Vec<Scalar> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// True when all elements are bitwise equal (the constant is a splat).
    pub fn is_splat(&self) -> bool {
        let size = self.ty.dtype.byte_size();
        if size == 0 || self.data.len() <= size {
            return true;
        }
        let first = &self.data[..size];
        self.data.chunks(size).all(|c| c == first)
    }

    /// Elements as i64 (for index-like constants).
    pub fn to_i64s(&self) -> Vec<i64> {
        self.scalars().iter().map(|s| s.as_i128() as i64).collect()
    }
}

/// Appends the host-layout bytes of `v` converted to `dtype`.
pub fn push_scalar(out: &mut Vec<u8>, dtype: ElementType, v: Scalar) {
    use ElementType::*;
    let bits_u64 = |out: &mut Vec<u8>, bits: u64, bytes: usize| {
        out.extend_from_slice(&bits.to_le_bytes()[..bytes]);
    };
    match dtype {
        Pred => out.push(match v {
            Scalar::Bool(b) => b as u8,
            other => (other.as_f64() != 0.0) as u8,
        }),
        C64 | C128 => {
            let (re, im) = match v {
                Scalar::Complex(r, i) => (r, i),
                other => (other.as_f64(), 0.0),
            };
            if dtype == C64 {
                out.extend_from_slice(&(re as f32).to_le_bytes());
                out.extend_from_slice(&(im as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&re.to_le_bytes());
                out.extend_from_slice(&im.to_le_bytes());
            }
        }
        t if t.is_int() => {
            let i = v.as_i128();
            // Wrap to the type's width (two's complement), as a cast would.
            let bits = t.bit_width();
            let mask: u128 = if bits >= 128 {
                u128::MAX
            } else {
                (1u128 << bits) - 1
            };
            bits_u64(out, (i as u128 & mask) as u64, t.byte_size());
        }
        t => {
            let bits = float::encode(t, v.as_f64());
            bits_u64(out, bits, t.byte_size());
        }
    }
}

/// Reads one element of type `dtype` from its host-layout bytes.
pub fn read_scalar(dtype: ElementType, bytes: &[u8]) -> Scalar {
    use ElementType::*;
    let mut buf = [0u8; 16];
    let n = bytes.len().min(16);
    buf[..n].copy_from_slice(&bytes[..n]);
    let lo = u64::from_le_bytes(buf[..8].try_into().unwrap_or([0; 8]));
    let hi = u64::from_le_bytes(buf[8..].try_into().unwrap_or([0; 8]));
    match dtype {
        Pred => Scalar::Bool(buf[0] & 1 != 0),
        C64 => Scalar::Complex(
            f32::from_bits(lo as u32) as f64,
            f32::from_bits((lo >> 32) as u32) as f64,
        ),
        C128 => Scalar::Complex(f64::from_bits(lo), f64::from_bits(hi)),
        t if t.is_signed_int() => {
            let bits = t.bit_width();
            let shift = 64 - bits;
            Scalar::Int((((lo << shift) as i64) >> shift) as i128)
        }
        t if t.is_unsigned_int() => {
            let bits = t.bit_width();
            let v = if bits >= 64 {
                lo
            } else {
                lo & ((1u64 << bits) - 1)
            };
            Scalar::Int(v as i128)
        }
        t => {
            let bits = t.bit_width().min(64);
            let v = if bits >= 64 {
                lo
            } else {
                lo & ((1u64 << bits) - 1)
            };
            Scalar::Float(float::decode(t, v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElementType::*;

    #[test]
    fn scalars_round_trip_per_dtype() {
        let cases = [
            (I8, Scalar::Int(-3)),
            (U8, Scalar::Int(250)),
            (I4, Scalar::Int(-8)),
            (U64, Scalar::Int(u64::MAX as i128)),
            (I64, Scalar::Int(i64::MIN as i128)),
            (BF16, Scalar::Float(1.5)),
            (F16, Scalar::Float(-0.25)),
            (F64, Scalar::Float(1.0 / 3.0)),
            (Pred, Scalar::Bool(true)),
            (C64, Scalar::Complex(1.5, -2.0)),
        ];
        for (t, v) in cases {
            let lit = Literal::scalar(t, v);
            assert_eq!(lit.get(0), v, "{t}");
            assert_eq!(lit.data.len(), t.byte_size());
        }
    }

    #[test]
    fn length_is_checked() {
        assert!(Literal::new(TensorType::new(vec![2], F32), vec![0; 7]).is_err());
        let l = Literal::splat(TensorType::new(vec![2, 2], I32), Scalar::Int(7));
        assert!(l.is_splat());
        assert_eq!(l.to_i64s(), vec![7, 7, 7, 7]);
        assert_eq!(l.get(4), Scalar::Int(0));
    }

    #[test]
    fn splats_stay_one_element_and_compare_as_expanded() {
        let t = TensorType::new(vec![1 << 30], F32);
        let big = Literal::splat(t.clone(), Scalar::Float(2.0));
        assert_eq!(big.data.len(), 4);
        assert_eq!(big.get(123_456_789), Scalar::Float(2.0));
        let t = TensorType::new(vec![3], F32);
        let small = Literal::splat(t.clone(), Scalar::Float(2.0));
        let full = Literal::new(t.clone(), small.bytes().into_owned()).expect("literal");
        assert_eq!(full.data.len(), 12);
        assert_eq!(small, full);
        assert_eq!(full, small);
        let other = Literal::splat(t, Scalar::Float(3.0));
        assert_ne!(small, other);
    }
}
