//! HLO shapes and literals in IR terms: `xla.PrimitiveType` codes, array/tuple/token shapes
//! flattened to their leaves, layouts, and `LiteralProto` data in PJRT's dense host layout.

use super::schema::{LiteralProto, ShapeProto};
use crate::error::{Error, Result};
use crate::ir::{ElementType, Literal, TensorType, Type};

/// `xla.PrimitiveType` code of a tuple.
const TUPLE: i32 = 13;
/// `xla.PrimitiveType` code of an opaque value.
const OPAQUE: i32 = 14;
/// `xla.PrimitiveType` code of a token.
const TOKEN: i32 = 17;

/// Largest rank accepted.
const MAX_RANK: usize = 4096;
/// Largest element count of one array accepted (2^40).
const MAX_ELEMENTS: u64 = 1 << 40;

/// The element type of an `xla.PrimitiveType` code of an array.
pub fn element_type(code: i32) -> Result<ElementType> {
    use ElementType::*;
    Ok(match code {
        1 => Pred,
        2 => I8,
        3 => I16,
        4 => I32,
        5 => I64,
        6 => U8,
        7 => U16,
        8 => U32,
        9 => U64,
        10 => F16,
        11 => F32,
        12 => F64,
        15 => C64,
        16 => BF16,
        18 => C128,
        19 => F8E5M2,
        20 => F8E4M3FN,
        21 => I4,
        22 => U4,
        23 => F8E4M3B11FNUZ,
        24 => F8E5M2FNUZ,
        25 => F8E4M3FNUZ,
        26 => I2,
        27 => U2,
        28 => F8E4M3,
        29 => F8E3M4,
        32 => F4E2M1FN,
        33 => F8E8M0FNU,
        other => {
            return Err(Error::unimplemented(format!(
                "HLO primitive type {other} ({}) as an array element type",
                primitive_name(other)
            )))
        }
    })
}

fn primitive_name(code: i32) -> &'static str {
    match code {
        0 => "PRIMITIVE_TYPE_INVALID",
        TUPLE => "TUPLE",
        OPAQUE => "OPAQUE_TYPE",
        TOKEN => "TOKEN",
        30 => "S1",
        31 => "U1",
        34 => "BUFFER",
        _ => "unknown",
    }
}

/// The array type of a shape; tuples, tokens and dynamic dimensions are refused.
pub fn tensor_type(s: &ShapeProto) -> Result<TensorType> {
    let dtype = element_type(s.element_type)?;
    if s.is_dynamic_dimension.iter().any(|&d| d) {
        return Err(Error::unimplemented(
            "HLO shapes with dynamic dimensions (bounded dynamism)",
        ));
    }
    if let Some(&d) = s.dimensions.iter().find(|&&d| d < 0) {
        return Err(Error::invalid(format!("HLO shape with dimension size {d}")));
    }
    let elements = s
        .dimensions
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    if s.dimensions.len() > MAX_RANK || elements.is_none_or(|n| n > MAX_ELEMENTS) {
        return Err(Error::invalid(format!(
            "HLO shape {:?} is too large",
            s.dimensions
        )));
    }
    Ok(TensorType::new(s.dimensions.clone(), dtype))
}

/// The IR type of a shape (tuples nest).
pub fn ir_type(s: &ShapeProto) -> Result<Type> {
    Ok(match s.element_type {
        TUPLE => Type::Tuple(s.tuple_shapes.iter().map(ir_type).collect::<Result<_>>()?),
        TOKEN => Type::Token,
        _ => Type::Tensor(tensor_type(s)?),
    })
}

/// The leaf types of a shape in order (a tuple flattened depth-first; an array is one leaf).
pub fn leaves(s: &ShapeProto) -> Result<Vec<Type>> {
    let mut out = Vec::new();
    push_leaves(&ir_type(s)?, &mut out);
    Ok(out)
}

/// The leaves of an IR type.
pub fn push_leaves(t: &Type, out: &mut Vec<Type>) {
    match t {
        Type::Tuple(elems) => elems.iter().for_each(|e| push_leaves(e, out)),
        other => out.push(other.clone()),
    }
}

/// Number of leaves of a type.
pub fn leaf_count(t: &Type) -> usize {
    match t {
        Type::Tuple(elems) => elems.iter().map(leaf_count).sum(),
        _ => 1,
    }
}

/// The permutation that reads a row-major tensor stored in a layout back in logical order, or
/// `None` when the layout is absent or the default (major-to-minor = logical order).
/// `transpose(physical, perm)` gives the logical tensor, where `physical` has the dimensions in
/// major-to-minor order.
pub fn layout_permutation(s: &ShapeProto) -> Result<Option<Vec<i64>>> {
    let Some(layout) = &s.layout else {
        return Ok(None);
    };
    let m2m = &layout.minor_to_major;
    let rank = s.dimensions.len();
    if m2m.is_empty() {
        return Ok(None);
    }
    let mut seen = vec![false; rank];
    for &d in m2m {
        match usize::try_from(d).ok().and_then(|d| seen.get_mut(d)) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(Error::invalid(format!(
                    "layout minor_to_major {m2m:?} is not a permutation of {rank} dimensions"
                )))
            }
        }
    }
    if m2m.len() != rank {
        return Err(Error::invalid(format!(
            "layout minor_to_major {m2m:?} is not a permutation of {rank} dimensions"
        )));
    }
    // Physical position i (major first) holds logical dimension m2m[rank-1-i].
    let major_to_minor: Vec<i64> = m2m.iter().rev().copied().collect();
    if major_to_minor
        .iter()
        .enumerate()
        .all(|(i, &d)| d == i as i64)
    {
        return Ok(None);
    }
    let mut perm = vec![0i64; rank];
    for (i, &d) in major_to_minor.iter().enumerate() {
        perm[d as usize] = i as i64;
    }
    Ok(Some(perm))
}

/// The dimensions of a shape in major-to-minor order of its layout.
pub fn physical_dims(s: &ShapeProto) -> Vec<i64> {
    match &s.layout {
        Some(l) if l.minor_to_major.len() == s.dimensions.len() => l
            .minor_to_major
            .iter()
            .rev()
            .filter_map(|&d| usize::try_from(d).ok().and_then(|d| s.dimensions.get(d)))
            .copied()
            .collect(),
        _ => s.dimensions.clone(),
    }
}

/// The dense bytes of an array literal in the order its values are stored (its layout's
/// physical order), checked against the element count.
pub fn literal_bytes(l: &LiteralProto, t: &TensorType) -> Result<Vec<u8>> {
    use ElementType::*;
    let n = t.num_elements();
    let count = |len: usize, what: &str| -> Result<()> {
        if len == n {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "constant of type {t}: {what} holds {len} values, expected {n}"
            )))
        }
    };
    let bytes = |b: &[u8], width: usize, what: &str| -> Result<Vec<u8>> {
        if b.len() != n * width {
            return Err(Error::invalid(format!(
                "constant of type {t}: {what} holds {} bytes, expected {}",
                b.len(),
                n * width
            )));
        }
        Ok(b.to_vec())
    };
    Ok(match t.dtype {
        Pred => {
            count(l.preds.len(), "preds")?;
            l.preds.iter().map(|&b| b as u8).collect()
        }
        I8 => bytes(&l.s8s, 1, "s8s")?,
        U8 => bytes(&l.u8s, 1, "u8s")?,
        I4 => bytes(&l.s4s, 1, "s4s")?,
        U4 => bytes(&l.u4s, 1, "u4s")?,
        I2 => bytes(&l.s2s, 1, "s2s")?,
        U2 => bytes(&l.u2s, 1, "u2s")?,
        I16 => bytes(&l.s16s, 2, "s16s")?,
        U16 => bytes(&l.u16s, 2, "u16s")?,
        F16 => bytes(&l.f16s, 2, "f16s")?,
        BF16 => bytes(&l.bf16s, 2, "bf16s")?,
        F8E5M2 => bytes(&l.f8e5m2s, 1, "f8e5m2s")?,
        F8E4M3FN => bytes(&l.f8e4m3fns, 1, "f8e4m3fns")?,
        F8E4M3B11FNUZ => bytes(&l.f8e4m3b11fnuzs, 1, "f8e4m3b11fnuzs")?,
        F8E5M2FNUZ => bytes(&l.f8e5m2fnuzs, 1, "f8e5m2fnuzs")?,
        F8E4M3FNUZ => bytes(&l.f8e4m3fnuzs, 1, "f8e4m3fnuzs")?,
        F8E4M3 => bytes(&l.f8e4m3s, 1, "f8e4m3s")?,
        F8E3M4 => bytes(&l.f8e3m4s, 1, "f8e3m4s")?,
        F4E2M1FN => bytes(&l.f4e2m1fns, 1, "f4e2m1fns")?,
        F8E8M0FNU => bytes(&l.f8e8m0fnus, 1, "f8e8m0fnus")?,
        I32 => {
            count(l.s32s.len(), "s32s")?;
            l.s32s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        I64 => {
            count(l.s64s.len(), "s64s")?;
            l.s64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        U32 => {
            count(l.u32s.len(), "u32s")?;
            l.u32s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        U64 => {
            count(l.u64s.len(), "u64s")?;
            l.u64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        F32 => {
            count(l.f32s.len(), "f32s")?;
            l.f32s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        F64 => {
            count(l.f64s.len(), "f64s")?;
            l.f64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        C64 => {
            count(l.c64s.len() / 2, "c64s")?;
            if l.c64s.len() % 2 != 0 {
                return Err(Error::invalid("c64s holds an odd number of floats"));
            }
            l.c64s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        C128 => {
            count(l.c128s.len() / 2, "c128s")?;
            if l.c128s.len() % 2 != 0 {
                return Err(Error::invalid("c128s holds an odd number of doubles"));
            }
            l.c128s.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        other => {
            return Err(Error::unimplemented(format!(
                "HLO constant of element type {}",
                other.mlir_name()
            )))
        }
    })
}

/// An array literal as stored: its physical type (dimensions major-to-minor) and bytes.
pub fn physical_literal(l: &LiteralProto, s: &ShapeProto) -> Result<Literal> {
    let logical = tensor_type(s)?;
    let physical = TensorType::new(physical_dims(s), logical.dtype);
    let data = literal_bytes(l, &physical)?;
    Literal::new(physical, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::hlo_proto::schema::LayoutProto;

    fn shape(dims: &[i64], m2m: &[i64]) -> ShapeProto {
        ShapeProto {
            element_type: 11,
            dimensions: dims.to_vec(),
            layout: Some(LayoutProto {
                minor_to_major: m2m.to_vec(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn default_layouts_need_no_permutation() {
        assert_eq!(layout_permutation(&shape(&[2, 3], &[1, 0])).unwrap(), None);
        assert_eq!(layout_permutation(&shape(&[], &[])).unwrap(), None);
    }

    #[test]
    fn column_major_reads_back_through_a_transpose() {
        let s = shape(&[2, 3], &[0, 1]);
        assert_eq!(physical_dims(&s), vec![3, 2]);
        assert_eq!(layout_permutation(&s).unwrap(), Some(vec![1, 0]));
        assert!(layout_permutation(&shape(&[2, 3], &[0, 0])).is_err());
    }

    #[test]
    fn packed_and_repeated_literals() {
        let t = TensorType::new(vec![2], ElementType::F16);
        let l = LiteralProto {
            f16s: vec![0, 0x3c, 0, 0x40],
            ..Default::default()
        };
        assert_eq!(literal_bytes(&l, &t).unwrap(), vec![0, 0x3c, 0, 0x40]);
        let short = LiteralProto {
            f16s: vec![0, 0x3c],
            ..Default::default()
        };
        assert!(literal_bytes(&short, &t).is_err());
        let t = TensorType::new(vec![2], ElementType::C64);
        let l = LiteralProto {
            c64s: vec![1.0, 2.0, 3.0, 4.0],
            ..Default::default()
        };
        assert_eq!(literal_bytes(&l, &t).unwrap().len(), 16);
    }
}
