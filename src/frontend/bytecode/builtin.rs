//! The builtin dialect's bytecode encodings of the attributes and types a portable artifact
//! carries: the module's and ops' attribute dictionaries, strings, integers, floats, dense
//! elements, type attributes, and every location kind.

use super::cursor::Cursor;
use super::dense::{self, BoolPacking};
use super::entries::{
    extend, float_width, read_apfloat, read_apint, read_blob, read_svarints, Entries,
};
use super::value::{BAttr, BType};
use crate::error::Result;
use crate::ir::types::{TensorType, DYNAMIC};
use crate::ir::{ElementType, Location};

/// Most nodes one location keeps; deeper parts of larger trees become `unknown`.
const MAX_LOCATION_NODES: usize = 256;

/// Builtin attribute codes, in the order MLIR assigns them.
mod code {
    pub const ARRAY: u64 = 0;
    pub const DICTIONARY: u64 = 1;
    pub const STRING: u64 = 2;
    pub const STRING_WITH_TYPE: u64 = 3;
    pub const FLAT_SYMBOL_REF: u64 = 4;
    pub const SYMBOL_REF: u64 = 5;
    pub const TYPE: u64 = 6;
    pub const UNIT: u64 = 7;
    pub const INTEGER: u64 = 8;
    pub const FLOAT: u64 = 9;
    pub const CALL_SITE_LOC: u64 = 10;
    pub const FILE_LINE_COL_LOC: u64 = 11;
    pub const FUSED_LOC: u64 = 12;
    pub const FUSED_LOC_WITH_METADATA: u64 = 13;
    pub const NAME_LOC: u64 = 14;
    pub const UNKNOWN_LOC: u64 = 15;
    pub const DENSE_RESOURCE_ELEMENTS: u64 = 16;
    pub const DENSE_ARRAY: u64 = 17;
    pub const DENSE_ELEMENTS: u64 = 18;
    pub const DENSE_STRING_ELEMENTS: u64 = 19;
    pub const SPARSE_ELEMENTS: u64 = 20;
    pub const DISTINCT: u64 = 21;
    pub const FILE_LINE_COL_RANGE: u64 = 22;
}

/// Reads a builtin attribute.
pub(crate) fn read_attr<'a>(e: &mut Entries<'_, 'a>, cur: &mut Cursor<'a>) -> Result<BAttr> {
    let at = cur.offset();
    let kind = cur.varint("a builtin attribute code")?;
    Ok(match kind {
        code::ARRAY => BAttr::Array(e.read_attrs(cur)?),
        code::DICTIONARY => BAttr::Dict(e.read_list(cur, "the size of a dictionary", |e, c| {
            let name = string_attr(e, c)?;
            let value = e.read_attr(c)?;
            Ok((name, value))
        })?),
        code::STRING => BAttr::String(e.read_string(cur)?),
        code::STRING_WITH_TYPE => {
            let s = e.read_string(cur)?;
            e.read_type(cur)?;
            BAttr::String(s)
        }
        code::FLAT_SYMBOL_REF => BAttr::Symbol(string_attr(e, cur)?),
        code::SYMBOL_REF => {
            let root = string_attr(e, cur)?;
            let nested = e.read_attrs(cur)?;
            if nested.is_empty() {
                BAttr::Symbol(root)
            } else {
                let mut text = format!("@{root}");
                for n in nested {
                    if let BAttr::Symbol(s) = &*n {
                        text.push_str("::@");
                        text.push_str(s);
                    }
                }
                BAttr::Opaque(text)
            }
        }
        code::TYPE => BAttr::Type(e.read_type(cur)?),
        code::UNIT => BAttr::Unit,
        code::INTEGER => {
            let ty = e.read_type(cur)?;
            let (width, signed, dtype) = match &*ty {
                BType::Index => (64, true, ElementType::I64),
                BType::Elem(t) if t.is_pred() => (1, false, *t),
                BType::Elem(t) if t.is_int() => (t.bit_width(), t.is_signed_int(), *t),
                other => return Err(cur.error(format!("an integer attribute of type {other:?}"))),
            };
            let v = extend(read_apint(cur, width)?, width, signed);
            if dtype.is_pred() {
                BAttr::Bool(v != 0)
            } else {
                BAttr::Int(v, dtype)
            }
        }
        code::FLOAT => {
            let ty = e.read_type(cur)?;
            let t = match &*ty {
                BType::Elem(t) if float_width(*t).is_some() => *t,
                other => return Err(cur.error(format!("a float attribute of type {other:?}"))),
            };
            BAttr::Float(read_apfloat(cur, t)?, t)
        }
        code::CALL_SITE_LOC => {
            let callee = location(e, cur)?;
            let caller = location(e, cur)?;
            loc(Location::CallSite {
                callee: Box::new(callee),
                caller: Box::new(caller),
            })
        }
        code::FILE_LINE_COL_LOC => {
            let file = string_attr(e, cur)?;
            let line = small(cur.varint("a line number")?);
            let col = small(cur.varint("a column number")?);
            loc(Location::FileLineCol {
                file: file.into(),
                line,
                col,
            })
        }
        code::FILE_LINE_COL_RANGE => {
            let file = string_attr(e, cur)?;
            let parts = e.read_list(cur, "the number of line/column values", |_, c| {
                c.varint("a line or column").map(small)
            })?;
            loc(match parts[..] {
                [] => Location::FileLineCol {
                    file: file.into(),
                    line: 0,
                    col: 0,
                },
                [line] => Location::FileLineCol {
                    file: file.into(),
                    line,
                    col: 0,
                },
                [line, col] => Location::FileLineCol {
                    file: file.into(),
                    line,
                    col,
                },
                [line, col, end_col] => Location::FileLineColRange {
                    file: file.into(),
                    line,
                    col,
                    end_line: line,
                    end_col,
                },
                [line, col, end_col, end_line] => Location::FileLineColRange {
                    file: file.into(),
                    line,
                    col,
                    end_line,
                    end_col,
                },
                _ => return Err(cur.error("a file location range of more than four values")),
            })
        }
        code::FUSED_LOC | code::FUSED_LOC_WITH_METADATA => {
            let parts = e.read_list(cur, "the number of fused locations", location)?;
            if kind == code::FUSED_LOC_WITH_METADATA {
                e.read_attr(cur)?;
            }
            loc(Location::Fused(parts))
        }
        code::NAME_LOC => {
            let name = string_attr(e, cur)?;
            let child = location(e, cur)?;
            loc(Location::Name {
                name: name.into(),
                child: (!child.is_unknown()).then(|| Box::new(child)),
            })
        }
        code::UNKNOWN_LOC => BAttr::Location(Location::Unknown),
        code::DENSE_ARRAY => {
            let ty = e.read_type(cur)?;
            let size = cur.varint("the size of a dense array")?;
            let mut blob = read_blob(cur)?;
            dense_array(&ty, size, &mut blob)?
        }
        code::DENSE_ELEMENTS => {
            let ty = e.read_type(cur)?;
            let tt = static_tensor(&ty, cur)?;
            let blob = read_blob(cur)?;
            BAttr::Dense(dense::literal(tt, blob, BoolPacking::Builtin)?)
        }
        code::DENSE_RESOURCE_ELEMENTS
        | code::DENSE_STRING_ELEMENTS
        | code::SPARSE_ELEMENTS
        | code::DISTINCT => {
            cur.rest();
            BAttr::Opaque(format!("<builtin attribute kind {kind}>"))
        }
        other => {
            return Err(super::cursor::error_at(
                at,
                format!("unknown builtin attribute code {other}"),
            ))
        }
    })
}

/// Reads a builtin type.
pub(crate) fn read_type<'a>(e: &mut Entries<'_, 'a>, cur: &mut Cursor<'a>) -> Result<BType> {
    use ElementType::*;
    let at = cur.offset();
    let kind = cur.varint("a builtin type code")?;
    let elem = |t: ElementType| Ok(BType::Elem(t));
    match kind {
        0 => {
            let v = cur.varint("an integer type")?;
            let (width, signedness) = (v >> 2, v & 3);
            let t = match (width, signedness) {
                (1, _) => Some(Pred),
                (w, 0 | 1) => int_type(w, true),
                (w, 2) => int_type(w, false),
                _ => None,
            };
            Ok(match t {
                Some(t) => BType::Elem(t),
                None => BType::Other(format!("a {width}-bit integer type")),
            })
        }
        1 => Ok(BType::Index),
        2 => {
            let inputs = e.read_types(cur)?;
            let results = e.read_types(cur)?;
            Ok(BType::Function(inputs, results))
        }
        3 => elem(BF16),
        4 => elem(F16),
        5 => elem(F32),
        6 => elem(F64),
        7 | 8 => Ok(BType::Other(format!("builtin type kind {kind}"))),
        9 => {
            let part = e.read_type(cur)?;
            match &*part {
                BType::Elem(F32) => elem(C64),
                BType::Elem(F64) => elem(C128),
                other => Ok(BType::Other(format!("complex<{other:?}>"))),
            }
        }
        12 => Ok(BType::None),
        13 | 14 => {
            let encoding = if kind == 14 {
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
        15 => Ok(BType::Tuple(e.read_types(cur)?)),
        18 => Ok(BType::Unranked(e.read_type(cur)?)),
        10 | 11 | 16 | 17 | 19 | 20 => {
            cur.rest();
            Ok(BType::Other(format!("builtin type kind {kind}")))
        }
        21 => elem(TF32),
        22 => elem(F8E5M2),
        23 => elem(F8E4M3),
        24 => elem(F8E4M3FN),
        25 => elem(F8E5M2FNUZ),
        26 => elem(F8E4M3FNUZ),
        27 => elem(F8E4M3B11FNUZ),
        28 => elem(F8E3M4),
        29 => elem(F4E2M1FN),
        30 => elem(F6E2M3FN),
        31 => elem(F6E3M2FN),
        32 => elem(F8E8M0FNU),
        other => Err(super::cursor::error_at(
            at,
            format!("unknown builtin type code {other}"),
        )),
    }
}

/// A StableHLO integer element type of `width` bits.
pub(crate) fn int_type(width: u64, signed: bool) -> Option<ElementType> {
    use ElementType::*;
    Some(match (width, signed) {
        (2, true) => I2,
        (4, true) => I4,
        (8, true) => I8,
        (16, true) => I16,
        (32, true) => I32,
        (64, true) => I64,
        (2, false) => U2,
        (4, false) => U4,
        (8, false) => U8,
        (16, false) => U16,
        (32, false) => U32,
        (64, false) => U64,
        _ => return None,
    })
}

/// Reads a shape: signed sizes, MLIR's dynamic marker mapped to `DYNAMIC`.
pub(crate) fn shape(cur: &mut Cursor<'_>) -> Result<Vec<i64>> {
    let at = cur.clone();
    let dims = read_svarints(cur, "the rank of a shape")?;
    dims.into_iter()
        .map(|d| match d {
            i64::MIN => Ok(DYNAMIC),
            d if d >= 0 => Ok(d),
            d => Err(at.error(format!("negative dimension size {d}"))),
        })
        .collect()
}

/// The static tensor type of a dense elements attribute.
pub(crate) fn static_tensor(ty: &BType, cur: &Cursor<'_>) -> Result<TensorType> {
    match ty {
        BType::Tensor { shape, elem, .. } => match &**elem {
            BType::Elem(_) | BType::Index if dense::element_count(shape).is_none() => {
                Err(cur.error("dense elements of a dynamic or oversized shape"))
            }
            BType::Elem(t) => Ok(TensorType::new(shape.clone(), *t)),
            BType::Index => Ok(TensorType::new(shape.clone(), ElementType::I64)),
            other => Err(cur.error(format!("dense elements of element type {other:?}"))),
        },
        other => Err(cur.error(format!("dense elements of non-tensor type {other:?}"))),
    }
}

fn dense_array(ty: &BType, size: u64, blob: &mut Cursor<'_>) -> Result<BAttr> {
    let t = match ty {
        BType::Elem(t) => *t,
        other => return Err(blob.error(format!("a dense array of {other:?}"))),
    };
    let width = if t.is_pred() {
        1
    } else {
        (t.bit_width() as usize).div_ceil(8)
    };
    if size.checked_mul(width as u64) != Some(blob.remaining() as u64) {
        return Err(blob.error(format!(
            "a dense array of {size} {t} elements in {} bytes",
            blob.remaining()
        )));
    }
    let raw = blob.bytes(blob.remaining() as u64, "dense array data")?;
    if t.is_float() {
        let text: Vec<String> = raw
            .chunks_exact(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                format!("{:?}", crate::ir::float::decode(t, u64::from_le_bytes(b)))
            })
            .collect();
        return Ok(BAttr::Opaque(format!("array<{t}: {}>", text.join(", "))));
    }
    let signed = t.is_signed_int();
    let values = raw
        .chunks_exact(width)
        .map(|c| {
            let mut b = [0u8; 16];
            b[..c.len()].copy_from_slice(c);
            let bits = t.bit_width();
            extend(u128::from_le_bytes(b), bits, signed) as i64
        })
        .collect();
    Ok(BAttr::DenseArray(t, values))
}

fn string_attr<'a>(e: &mut Entries<'_, 'a>, cur: &mut Cursor<'a>) -> Result<String> {
    let at = cur.clone();
    let a = e.read_attr(cur)?;
    a.as_string()
        .map(str::to_string)
        .ok_or_else(|| at.error("expected a string attribute"))
}

/// Reads a location reference; other attributes in its place read as `unknown`.
fn location<'a>(e: &mut Entries<'_, 'a>, cur: &mut Cursor<'a>) -> Result<Location> {
    let a = e.read_attr(cur)?;
    Ok(match &*a {
        BAttr::Location(l) => l.clone(),
        _ => Location::Unknown,
    })
}

fn loc(l: Location) -> BAttr {
    let mut budget = MAX_LOCATION_NODES;
    BAttr::Location(prune(l, &mut budget))
}

/// Keeps at most `budget` nodes of `l`, replacing the rest with `unknown`.
fn prune(l: Location, budget: &mut usize) -> Location {
    if *budget == 0 {
        return Location::Unknown;
    }
    *budget -= 1;
    match l {
        Location::Name { name, child } => Location::Name {
            name,
            child: child.map(|c| Box::new(prune(*c, budget))),
        },
        Location::CallSite { callee, caller } => Location::CallSite {
            callee: Box::new(prune(*callee, budget)),
            caller: Box::new(prune(*caller, budget)),
        },
        Location::Fused(parts) => {
            Location::Fused(parts.into_iter().map(|p| prune(p, budget)).collect())
        }
        other => other,
    }
}

fn small(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
