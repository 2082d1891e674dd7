//! Dense element data: MLIR's raw buffers (one element after another in the type's storage
//! width, a single element for a splat, booleans possibly bit-packed) turned into `Literal`s in
//! PJRT's host layout.

use super::cursor::Cursor;
use crate::error::Result;
use crate::ir::types::TensorType;
use crate::ir::{ElementType, Literal};

/// How booleans were packed, which differs between the builtin and VHLO writers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BoolPacking {
    /// VHLO's `tensor_v1`: a single 0xFF byte is a true splat; otherwise a blob of
    /// `ceil(n / 8)` bytes (when that differs from `n`) holds one bit per element.
    Vhlo,
    /// The builtin dialect: a blob of `ceil(n / 8)` bytes that differs from both `n` and 1 holds
    /// one bit per element.
    Builtin,
}

/// Bytes MLIR's raw buffers use per element of `t`.
fn storage_bytes(t: ElementType) -> usize {
    match t {
        ElementType::Pred => 1,
        ElementType::TF32 => 3,
        ElementType::C64 => 8,
        ElementType::C128 => 16,
        t => (t.bit_width() as usize).div_ceil(8),
    }
}

/// The number of elements of a static shape, if it is static and does not overflow.
pub(crate) fn element_count(shape: &[i64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| {
        u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

/// Builds the literal of type `ty` from a raw buffer `blob`.
pub(crate) fn literal(
    ty: TensorType,
    mut blob: Cursor<'_>,
    packing: BoolPacking,
) -> Result<Literal> {
    let at = blob.clone();
    let raw = blob.bytes(blob.remaining() as u64, "dense data")?;
    let n = element_count(&ty.shape).ok_or_else(|| {
        at.error(format!(
            "dense elements of non-static or oversized type {ty}"
        ))
    })?;
    let dtype = ty.dtype;
    if dtype == ElementType::Pred {
        return bool_literal(ty, raw, n, packing, &at);
    }
    let width = storage_bytes(dtype);
    let host = dtype.byte_size();
    let full = n.checked_mul(width as u64);
    // A splat is one element's bytes; MLIR writes one even for empty tensors.
    let elements: &[u8] = if full == Some(raw.len() as u64) || raw.len() == width {
        raw
    } else {
        return Err(at.error(format!(
            "{} bytes of dense data do not fit type {ty} ({n} elements of {width} bytes)",
            raw.len()
        )));
    };
    let splat = elements.len() == width && n != 1;
    let mut one = Vec::with_capacity(host);
    let convert = |src: &[u8], out: &mut Vec<u8>| {
        let start = out.len();
        out.extend_from_slice(src);
        out.resize(start + host, 0);
        let bits = dtype.bit_width();
        if bits < 8 {
            out[start] &= (1u8 << bits) - 1;
        }
    };
    let total = n.saturating_mul(host as u64);
    if splat {
        // Kept as one element, however large the tensor (`Literal::splat_bytes`).
        convert(elements, &mut one);
        return Literal::splat_bytes(ty, one).map_err(|err| at.error(err.message));
    }
    let data = if width == host && dtype.bit_width() >= 8 {
        elements.to_vec()
    } else {
        let mut data = Vec::with_capacity(total as usize);
        for chunk in elements.chunks_exact(width) {
            convert(chunk, &mut data);
        }
        data
    };
    Literal::new(ty, data).map_err(|err| at.error(err.message))
}

fn bool_literal(
    ty: TensorType,
    raw: &[u8],
    n: u64,
    packing: BoolPacking,
    at: &Cursor<'_>,
) -> Result<Literal> {
    let packed = n.div_ceil(8);
    let len = raw.len() as u64;
    let splat_value = match packing {
        BoolPacking::Vhlo if len == 1 && raw[0] == 0xff => Some(true),
        _ => None,
    };
    let unpack = match packing {
        BoolPacking::Vhlo => splat_value.is_none() && len == packed && len != n,
        BoolPacking::Builtin => len == packed && len != n && len != 1,
    };
    let one = |v: bool| Literal::splat_bytes(ty.clone(), vec![u8::from(v)]);
    let data: Vec<u8> = if let Some(v) = splat_value {
        return one(v).map_err(|err| at.error(err.message));
    } else if unpack {
        (0..n)
            .map(|i| (raw[(i / 8) as usize] >> (i % 8)) & 1)
            .collect()
    } else if len == n {
        raw.iter().map(|&b| u8::from(b != 0)).collect()
    } else if len == 1 && n != 0 {
        return one(raw[0] != 0).map_err(|err| at.error(err.message));
    } else {
        return Err(at.error(format!(
            "{len} bytes of dense data do not fit boolean type {ty}"
        )));
    };
    Literal::new(ty, data).map_err(|err| at.error(err.message))
}
