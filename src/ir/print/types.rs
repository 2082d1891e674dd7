//! Text of types and locations.

use std::fmt::Write;

use super::attrs::{fmt_float, write_string};
use crate::ir::module::Location;
use crate::ir::types::{int_range, ElementType, TensorType, Type, UniformQuantization};

/// Appends the StableHLO text of `t`.
pub fn write_type(out: &mut String, t: &Type) {
    match t {
        Type::Tensor(t) => {
            out.push_str("tensor<");
            write_tensor_body(out, t);
        }
        Type::Buffer(t) => {
            out.push_str("memref<");
            write_tensor_body(out, t);
        }
        Type::Tuple(elems) => write_list(out, "tuple<", elems),
        Type::Token => out.push_str("!stablehlo.token"),
        Type::Future(elems) => write_list(out, "!stablehlo.future<", elems),
    }
}

/// The text of `t`.
pub fn type_text(t: &Type) -> String {
    let mut s = String::new();
    write_type(&mut s, t);
    s
}

fn write_list(out: &mut String, open: &str, elems: &[Type]) {
    out.push_str(open);
    for (i, e) in elems.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_type(out, e);
    }
    out.push('>');
}

/// `2x?x3xf32[, #stablehlo.bounds<...>]>` (after the opening `tensor<`).
fn write_tensor_body(out: &mut String, t: &TensorType) {
    for &d in &t.shape {
        if d < 0 {
            out.push_str("?x");
        } else {
            let _ = write!(out, "{d}x");
        }
    }
    match &t.quant {
        Some(q) => write_quant(out, q),
        None => out.push_str(t.dtype.mlir_name()),
    }
    if let Some(b) = &t.bounds {
        out.push_str(", #stablehlo.bounds<");
        for (i, &x) in b.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            if x < 0 {
                out.push('?');
            } else {
                let _ = write!(out, "{x}");
            }
        }
        out.push('>');
    }
    out.push('>');
}

/// `!quant.uniform<i8<-127:127>:f32:1, {0.1:2, 0.2:3}>`.
fn write_quant(out: &mut String, q: &UniformQuantization) {
    let storage = q.storage_type;
    let bits = storage.bit_width();
    let sign = if storage.is_unsigned_int() { 'u' } else { 'i' };
    let _ = write!(out, "!quant.uniform<{sign}{bits}");
    if (q.storage_min, q.storage_max) != int_range(storage) {
        let _ = write!(out, "<{}:{}>", q.storage_min, q.storage_max);
    }
    let _ = write!(out, ":{}", q.expressed_type.mlir_name());
    if let Some(d) = q.quantization_dimension {
        let _ = write!(out, ":{d}");
    }
    out.push_str(", ");
    let params: Vec<String> = q
        .scales
        .iter()
        .zip(&q.zero_points)
        .map(|(&s, z)| format!("{}:{z}", fmt_float(s, ElementType::F64)))
        .collect();
    if q.quantization_dimension.is_some() {
        let _ = write!(out, "{{{}}}", params.join(", "));
    } else {
        out.push_str(&params.join(", "));
    }
    out.push('>');
}

/// Appends `loc(...)`.
pub fn write_loc(out: &mut String, l: &Location) {
    out.push_str("loc(");
    write_loc_inner(out, l);
    out.push(')');
}

fn write_loc_inner(out: &mut String, l: &Location) {
    match l {
        Location::Unknown => out.push_str("unknown"),
        Location::FileLineCol { file, line, col } => {
            write_string(out, file);
            let _ = write!(out, ":{line}:{col}");
        }
        Location::FileLineColRange {
            file,
            line,
            col,
            end_line,
            end_col,
        } => {
            write_string(out, file);
            let _ = write!(out, ":{line}:{col} to {end_line}:{end_col}");
        }
        Location::Name { name, child } => {
            write_string(out, name);
            if let Some(c) = child {
                out.push('(');
                write_loc_inner(out, c);
                out.push(')');
            }
        }
        Location::CallSite { callee, caller } => {
            out.push_str("callsite(");
            write_loc_inner(out, callee);
            out.push_str(" at ");
            write_loc_inner(out, caller);
            out.push(')');
        }
        Location::Fused(locs) => {
            out.push_str("fused[");
            for (i, x) in locs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_loc_inner(out, x);
            }
            out.push(']');
        }
    }
}
