//! VHLO's type encodings: a leading code per type (the order of codes is VHLO's, fixed forever),
//! then the type's parameters.

use super::builtin::shape;
use super::cursor::{error_at, Cursor};
use super::entries::{read_apfloat, read_svarints, Entries};
use super::value::{BType, Quant};
use crate::error::Result;
use crate::ir::ElementType;

/// Reads a VHLO type.
pub(crate) fn read_type<'a>(e: &mut Entries<'_, 'a>, cur: &mut Cursor<'a>) -> Result<BType> {
    use ElementType::*;
    let at = cur.offset();
    let code = cur.varint("a VHLO type code")?;
    let elem = |t| Ok(BType::Elem(t));
    match code {
        0 => elem(Pred),
        1 => {
            let part = e.read_type(cur)?;
            match &*part {
                BType::Elem(F32) => elem(C64),
                BType::Elem(F64) => elem(C128),
                other => Err(error_at(at, format!("complex type of {other:?}"))),
            }
        }
        2 => elem(BF16),
        3 => elem(F16),
        4 => elem(F32),
        5 => elem(F64),
        6 => elem(F8E4M3FN),
        7 => elem(F8E5M2),
        8 => {
            let inputs = e.read_types(cur)?;
            let outputs = e.read_types(cur)?;
            Ok(BType::Function(inputs, outputs))
        }
        9 => Ok(BType::Index),
        10 => elem(I4),
        11 => elem(I8),
        12 => elem(I16),
        13 => elem(I32),
        14 => elem(I64),
        15 => elem(U4),
        16 => elem(U8),
        17 => elem(U16),
        18 => elem(U32),
        19 => elem(U64),
        20 | 21 => {
            let encoding = if code == 21 {
                Some(e.read_attr(cur)?)
            } else {
                None
            };
            let shape = shape(cur)?;
            let elem = e.read_type(cur)?;
            Ok(BType::Tensor {
                shape,
                elem,
                encoding,
            })
        }
        22 => Ok(BType::Token),
        23 => Ok(BType::Tuple(e.read_types(cur)?)),
        24 => {
            let flags = cur.varint("quantization flags")?;
            let storage = e.read_type(cur)?;
            let expressed = e.read_type(cur)?;
            let scale = read_apfloat(cur, F64)?;
            let zero_point = cur.svarint("a zero point")?;
            let min = cur.svarint("a storage minimum")?;
            let max = cur.svarint("a storage maximum")?;
            Ok(BType::Quant(Box::new(Quant {
                flags,
                storage,
                expressed,
                axis: None,
                scales: vec![scale],
                zero_points: vec![zero_point],
                min,
                max,
            })))
        }
        25 => Ok(BType::Unranked(e.read_type(cur)?)),
        26 => Ok(BType::Other("!shape.witness".into())),
        27 => elem(F8E4M3FNUZ),
        28 => elem(F8E5M2FNUZ),
        29 => elem(F8E4M3B11FNUZ),
        30 => {
            let flags = cur.varint("quantization flags")?;
            let storage = e.read_type(cur)?;
            let expressed = e.read_type(cur)?;
            let axis = cur.varint("a quantized dimension")?;
            let min = cur.svarint("a storage minimum")?;
            let max = cur.svarint("a storage maximum")?;
            let scales = e.read_list(cur, "the number of scales", |_, c| read_apfloat(c, F64))?;
            let zero_points = read_svarints(cur, "the number of zero points")?;
            Ok(BType::Quant(Box::new(Quant {
                flags,
                storage,
                expressed,
                axis: Some(i64::try_from(axis).unwrap_or(i64::MAX)),
                scales,
                zero_points,
                min,
                max,
            })))
        }
        31 => elem(I2),
        32 => elem(U2),
        33 => Ok(BType::None),
        34 => elem(TF32),
        35 => elem(F8E4M3),
        36 => elem(F8E3M4),
        37 => elem(F4E2M1FN),
        38 => elem(F6E2M3FN),
        39 => elem(F6E3M2FN),
        40 => elem(F8E8M0FNU),
        41 => {
            let shape = shape(cur)?;
            let elem = e.read_type(cur)?;
            Ok(BType::Buffer { shape, elem })
        }
        42 => Ok(BType::Future(e.read_types(cur)?)),
        other => Err(error_at(at, format!("unknown VHLO type code {other}"))),
    }
}
