//! Decoded types to IR types, as the VHLO-to-StableHLO conversion maps them: tensors (with
//! `#stablehlo.bounds` from VHLO's type extensions, quantized element types), tuples, tokens,
//! futures and buffers. Types the IR cannot hold are UNIMPLEMENTED errors.

use super::value::{BAttr, BType, Quant};
use crate::error::{Error, Result};
use crate::ir::types::{TensorType, UniformQuantization};
use crate::ir::{ElementType, Type};

/// The IR type of a value of decoded type `t`.
pub(crate) fn value_type(t: &BType) -> Result<Type> {
    Ok(match t {
        BType::Tensor {
            shape,
            elem,
            encoding,
        } => Type::Tensor(tensor_type(shape, elem, encoding.as_deref())?),
        BType::Token => Type::Token,
        BType::Tuple(items) => {
            Type::Tuple(items.iter().map(|i| value_type(i)).collect::<Result<_>>()?)
        }
        BType::Future(items) => {
            Type::Future(items.iter().map(|i| value_type(i)).collect::<Result<_>>()?)
        }
        BType::Buffer { shape, elem } => Type::Buffer(tensor_type(shape, elem, None)?),
        other => {
            return Err(Error::unimplemented(format!(
                "values of type {} are not supported",
                describe(other)
            )))
        }
    })
}

/// The element type of a scalar type (`index` reads as `i64`).
pub(crate) fn element_type(t: &BType) -> Option<ElementType> {
    match t {
        BType::Elem(e) => Some(*e),
        BType::Index => Some(ElementType::I64),
        _ => None,
    }
}

fn tensor_type(shape: &[i64], elem: &BType, encoding: Option<&BAttr>) -> Result<TensorType> {
    let mut t = match elem {
        BType::Quant(q) => {
            let mut t = TensorType::new(shape.to_vec(), ElementType::I8);
            let quant = quantization(q)?;
            t.dtype = quant.storage_type;
            t.quant = Some(Box::new(quant));
            t
        }
        other => {
            let dtype = element_type(other).ok_or_else(|| {
                Error::unimplemented(format!(
                    "tensors of element type {} are not supported",
                    describe(other)
                ))
            })?;
            TensorType::new(shape.to_vec(), dtype)
        }
    };
    match encoding {
        None => {}
        Some(BAttr::TypeExtensions(bounds)) => {
            if bounds.len() != shape.len() {
                return Err(Error::invalid(format!(
                    "{} bounds for a tensor of rank {}",
                    bounds.len(),
                    shape.len()
                )));
            }
            t.bounds = Some(bounds.clone());
        }
        Some(other) => {
            return Err(Error::unimplemented(format!(
                "tensor encoding {other:?} is not supported"
            )))
        }
    }
    Ok(t)
}

fn quantization(q: &Quant) -> Result<UniformQuantization> {
    let signed = q.flags & 1 == 1;
    let storage = match element_type(&q.storage) {
        Some(t) if t.is_int() => {
            super::builtin::int_type(u64::from(t.bit_width()), signed).unwrap_or(t)
        }
        _ => {
            return Err(Error::invalid(format!(
                "quantized storage type {}",
                describe(&q.storage)
            )))
        }
    };
    let expressed = element_type(&q.expressed)
        .filter(|t| t.is_float())
        .ok_or_else(|| {
            Error::invalid(format!(
                "quantized expressed type {}",
                describe(&q.expressed)
            ))
        })?;
    if q.scales.len() != q.zero_points.len() {
        return Err(Error::invalid(format!(
            "{} quantization scales but {} zero points",
            q.scales.len(),
            q.zero_points.len()
        )));
    }
    Ok(UniformQuantization {
        storage_type: storage,
        storage_min: q.min,
        storage_max: q.max,
        expressed_type: expressed,
        quantization_dimension: q.axis,
        scales: q.scales.clone(),
        zero_points: q.zero_points.clone(),
    })
}

/// A short name for a decoded type in messages.
pub(crate) fn describe(t: &BType) -> String {
    match t {
        BType::Elem(e) => e.mlir_name().to_string(),
        BType::Index => "index".into(),
        BType::None => "none".into(),
        BType::Unranked(e) => format!("tensor<*x{}>", describe(e)),
        BType::Function(..) => "a function type".into(),
        BType::Quant(_) => "a quantized type".into(),
        BType::Other(s) => s.clone(),
        BType::Tensor { .. }
        | BType::Buffer { .. }
        | BType::Token
        | BType::Tuple(_)
        | BType::Future(_) => match value_type(t) {
            Ok(v) => v.to_string(),
            Err(_) => "an unsupported tensor type".into(),
        },
    }
}
