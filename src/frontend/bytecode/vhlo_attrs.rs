//! VHLO's attribute encodings: a leading code per attribute (VHLO's fixed order), then its
//! parameters. Enums become the typed `ir::attr` enums right away.

use std::rc::Rc;

use super::builtin::static_tensor;
use super::cursor::{error_at, Cursor};
use super::dense::{self, BoolPacking};
use super::entries::{
    extend, float_width, read_apfloat, read_apint, read_blob, read_svarints, Entries,
};
use super::value::{BAttr, BType};
use crate::error::Result;
use crate::ir::attr::{
    ComparisonDirection, ComparisonType, CustomCallApiVersion, FftType, OutputOperandAlias,
    Precision, ResultAccuracy, ResultAccuracyMode, RngAlgorithm, RngDistribution, Transpose,
};
use crate::ir::ElementType;

/// Reads a VHLO attribute.
pub(crate) fn read_attr<'a>(e: &mut Entries<'_, 'a>, cur: &mut Cursor<'a>) -> Result<BAttr> {
    let at = cur.offset();
    let code = cur.varint("a VHLO attribute code")?;
    Ok(match code {
        1 => BAttr::Array(e.read_attrs(cur)?),
        2 => match cur.varint("a boolean")? {
            0 => BAttr::Bool(false),
            1 => BAttr::Bool(true),
            v => return Err(error_at(at, format!("boolean value {v}"))),
        },
        3 => BAttr::ComparisonDirection(enumerated(cur, ComparisonDirection::ALL)?),
        4 => BAttr::ComparisonType(enumerated(cur, ComparisonType::ALL)?),
        5 => BAttr::ApiVersion(enumerated(cur, CustomCallApiVersion::ALL)?),
        6 => BAttr::Dict(e.read_list(cur, "the size of a dictionary", |e, c| {
            let key_at = c.clone();
            let key = e.read_attr(c)?;
            let value = e.read_attr(c)?;
            let key = key
                .as_string()
                .ok_or_else(|| key_at.error("a dictionary key that is not a string"))?
                .to_string();
            Ok((key, value))
        })?),
        7 => BAttr::FftType(enumerated(cur, FftType::ALL)?),
        8 => {
            let ty = e.read_type(cur)?;
            let t = match &*ty {
                BType::Elem(t) if float_width(*t).is_some() => *t,
                other => return Err(error_at(at, format!("a float attribute of type {other:?}"))),
            };
            BAttr::Float(read_apfloat(cur, t)?, t)
        }
        9 => {
            let ty = e.read_type(cur)?;
            let (width, signed, t) = match &*ty {
                BType::Index => (64, true, ElementType::I64),
                BType::Elem(t) if t.is_int() => (t.bit_width(), t.is_signed_int(), *t),
                BType::Elem(t) if t.is_pred() => (1, false, *t),
                other => {
                    return Err(error_at(
                        at,
                        format!("an integer attribute of type {other:?}"),
                    ))
                }
            };
            let v = extend(read_apint(cur, width)?, width, signed);
            if t.is_pred() {
                BAttr::Bool(v != 0)
            } else {
                BAttr::Int(v, t)
            }
        }
        10 => {
            let output_tuple_indices = read_svarints(cur, "the number of output tuple indices")?;
            let operand_index = cur.svarint("an operand index")?;
            let operand_tuple_indices = read_svarints(cur, "the number of operand tuple indices")?;
            BAttr::OutputOperandAlias(OutputOperandAlias {
                output_tuple_indices,
                operand_index,
                operand_tuple_indices,
            })
        }
        11 => BAttr::Precision(enumerated(cur, Precision::ALL)?),
        12 => BAttr::RngAlgorithm(enumerated(cur, RngAlgorithm::ALL)?),
        13 => {
            // UNIFORM = 1, NORMAL = 2.
            let v = cur.varint("an enum value")?;
            match v {
                1 => BAttr::RngDistribution(RngDistribution::Uniform),
                2 => BAttr::RngDistribution(RngDistribution::Normal),
                v => return Err(error_at(at, format!("rng_distribution value {v}"))),
            }
        }
        14 => BAttr::String(e.read_string(cur)?),
        15 => {
            let ty = e.read_type(cur)?;
            let tt = static_tensor(&ty, cur)?;
            let blob = read_blob(cur)?;
            BAttr::Dense(dense::literal(tt, blob, BoolPacking::Vhlo)?)
        }
        16 => BAttr::Transpose(enumerated(cur, Transpose::ALL)?),
        17 => BAttr::Type(e.read_type(cur)?),
        18 => BAttr::TypeExtensions(
            read_svarints(cur, "the number of bounds")?
                .into_iter()
                .map(|b| {
                    if b == i64::MIN {
                        crate::ir::types::DYNAMIC
                    } else {
                        b
                    }
                })
                .collect(),
        ),
        19 => BAttr::ResultAccuracyMode(enumerated(cur, ResultAccuracyMode::ALL)?),
        20 => {
            let atol = read_apfloat(cur, ElementType::F64)?;
            let rtol = read_apfloat(cur, ElementType::F64)?;
            let ulps = cur.svarint("ulps")?;
            let mode_at = cur.offset();
            let mode = match &*e.read_attr(cur)? {
                BAttr::ResultAccuracyMode(m) => *m,
                _ => return Err(error_at(mode_at, "expected a result accuracy mode")),
            };
            BAttr::ResultAccuracy(ResultAccuracy {
                atol,
                rtol,
                ulps,
                mode,
            })
        }
        21 => {
            let pre = cur.svarint("a sub-axis pre-size")?;
            let size = cur.svarint("a sub-axis size")?;
            BAttr::Opaque(format!(
                "#stablehlo.sub_axis_info<pre_size = {pre}, size = {size}>"
            ))
        }
        22 => {
            let name = e.read_attr(cur)?;
            let has_sub = cur.varint("a sub-axis flag")?;
            if has_sub != 0 {
                e.read_attr(cur)?;
            }
            BAttr::Opaque(format!("#stablehlo.axis_ref<{}>", text(&name)))
        }
        23 => {
            let mesh = e.read_attr(cur)?;
            e.read_attr(cur)?;
            BAttr::Opaque(format!(
                "#stablehlo.replica_group_mesh_axes<{}>",
                text(&mesh)
            ))
        }
        24 => {
            let name = e.read_attr(cur)?;
            let size = cur.svarint("a mesh axis size")?;
            BAttr::Opaque(format!("#stablehlo.mesh_axis<{} = {size}>", text(&name)))
        }
        25 => {
            e.read_attr(cur)?;
            e.read_optional_attr(cur)?;
            BAttr::Opaque("#stablehlo.mesh<...>".into())
        }
        other => return Err(error_at(at, format!("unknown VHLO attribute code {other}"))),
    })
}

fn text(a: &Rc<BAttr>) -> String {
    match &**a {
        BAttr::String(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// Reads an enum value: its position in `all` (VHLO numbers cases from 0 in StableHLO's order).
fn enumerated<T: Copy>(cur: &mut Cursor<'_>, all: &[T]) -> Result<T> {
    let at = cur.offset();
    let v = cur.varint("an enum value")?;
    usize::try_from(v)
        .ok()
        .and_then(|i| all.get(i))
        .copied()
        .ok_or_else(|| error_at(at, format!("enum value {v} out of range")))
}
