//! Text of attributes: scalars with types, strings, symbols, arrays, dictionaries, dense arrays,
//! the typed StableHLO attributes, and dense constants (splats, nested lists, hex blobs for
//! large ones as MLIR prints them).

use std::fmt::Write;

use super::types::write_type;
use crate::ir::attr::{
    Attr, ConvDimensionNumbers, DotAlgorithm, GatherDimensionNumbers, ScatterDimensionNumbers,
};
use crate::ir::float;
use crate::ir::literal::{read_scalar, Literal, Scalar};
use crate::ir::types::{ElementType, Type};

/// Dense constants with more elements than this print as hex blobs (as MLIR does).
const HEX_THRESHOLD: usize = 100;

/// The shortest decimal text that reads back to `v` in type `t` (`1.5e-3` style, always with a
/// `.` as MLIR requires), or the hex bit pattern for infinities and NaN.
pub fn fmt_float(v: f64, t: ElementType) -> String {
    if !v.is_finite() {
        return hex_bits(float::encode(t, v), t);
    }
    let s = if t == ElementType::F32 {
        format!("{:e}", v as f32)
    } else {
        format!("{v:e}")
    };
    match s.split_once('e') {
        Some((m, e)) if !m.contains('.') => format!("{m}.0e{e}"),
        _ => s,
    }
}

/// `0x7FC00000`: a bit pattern with as many digits as the type has bytes.
fn hex_bits(bits: u64, t: ElementType) -> String {
    format!("0x{bits:0width$X}", width = t.byte_size() * 2)
}

/// Appends a quoted string, escaping `"`, `\` and bytes outside printable ASCII as `\XX`.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:02X}");
            }
        }
    }
    out.push('"');
}

/// True if `s` can be written without quotes after a sigil (`%`, `@`).
fn is_suffix_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.' | b'-'))
        && !s.bytes().next().is_some_and(|c| c.is_ascii_digit())
}

/// True if `s` is a bare identifier (attribute names).
fn is_bare_id(s: &str) -> bool {
    s.bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.'))
}

/// Appends `@name`, quoting names that need it.
pub fn write_symbol(out: &mut String, name: &str) {
    out.push('@');
    if is_suffix_id(name) {
        out.push_str(name);
    } else {
        write_string(out, name);
    }
}

/// Appends an attribute name (quoted if it is not a bare identifier).
pub fn write_attr_name(out: &mut String, name: &str) {
    if is_bare_id(name) {
        out.push_str(name);
    } else {
        write_string(out, name);
    }
}

/// Appends `{a = 1 : i64, flag}`.
pub fn write_attr_dict(out: &mut String, attrs: &[(String, Attr)]) {
    out.push('{');
    for (i, (name, a)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_attr_name(out, name);
        if *a != Attr::Unit {
            out.push_str(" = ");
            match a {
                Attr::Array(items) if name == "operand_layouts" || name == "result_layouts" => {
                    write_layouts(out, items)
                }
                _ => write_attr(out, a),
            }
        }
    }
    out.push('}');
}

/// A custom call's layouts: dense 1-d tensors of MLIR's `index` type, which the IR keeps as
/// `i64` (MLIR rejects layouts of any other element type).
fn write_layouts(out: &mut String, items: &[Attr]) {
    out.push('[');
    for (i, a) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match a {
            Attr::Dense(l) if l.ty.rank() == 1 => {
                out.push_str("dense<");
                write_dense_value(out, l);
                let _ = write!(out, "> : tensor<{}xindex>", l.len());
            }
            other => write_attr(out, other),
        }
    }
    out.push(']');
}

fn write_ints(out: &mut String, v: &[i64]) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{x}");
    }
    out.push(']');
}

/// Appends `name = [..]` struct fields, skipping empty lists, with `sep` handling.
fn field_list(out: &mut String, first: &mut bool, name: &str, v: &[i64]) {
    if v.is_empty() {
        return;
    }
    field_sep(out, first);
    let _ = write!(out, "{name} = ");
    write_ints(out, v);
}

fn field_sep(out: &mut String, first: &mut bool) {
    if !*first {
        out.push_str(", ");
    }
    *first = false;
}

/// Appends the StableHLO text of `a`.
pub fn write_attr(out: &mut String, a: &Attr) {
    match a {
        Attr::Unit => out.push_str("unit"),
        Attr::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Attr::Int(v, t) => {
            let _ = write!(out, "{v} : {}", t.mlir_name());
        }
        Attr::Float(v, t) => {
            let _ = write!(out, "{} : {}", fmt_float(*v, *t), t.mlir_name());
        }
        Attr::String(s) => write_string(out, s),
        Attr::Symbol(s) => write_symbol(out, s),
        Attr::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_attr(out, x);
            }
            out.push(']');
        }
        Attr::DenseArray(t, v) => write_dense_array(out, *t, v),
        Attr::Dense(l) => write_dense(out, l),
        Attr::Dict(d) => write_attr_dict(out, d),
        Attr::Type(t) => write_type(out, t),
        Attr::ComparisonDirection(x) => {
            let _ = write!(out, "#stablehlo<comparison_direction {x}>");
        }
        Attr::ComparisonType(x) => {
            let _ = write!(out, "#stablehlo<comparison_type {x}>");
        }
        Attr::Precision(x) => {
            let _ = write!(out, "#stablehlo<precision {x}>");
        }
        Attr::FftType(x) => {
            let _ = write!(out, "#stablehlo<fft_type {x}>");
        }
        Attr::RngDistribution(x) => {
            let _ = write!(out, "#stablehlo<rng_distribution {x}>");
        }
        Attr::RngAlgorithm(x) => {
            let _ = write!(out, "#stablehlo<rng_algorithm {x}>");
        }
        Attr::Transpose(x) => {
            let _ = write!(out, "#stablehlo<transpose {x}>");
        }
        Attr::DotDimensionNumbers(d) => {
            out.push_str("#stablehlo.dot<");
            let mut first = true;
            field_list(
                out,
                &mut first,
                "lhs_batching_dimensions",
                &d.lhs_batching_dimensions,
            );
            field_list(
                out,
                &mut first,
                "rhs_batching_dimensions",
                &d.rhs_batching_dimensions,
            );
            field_list(
                out,
                &mut first,
                "lhs_contracting_dimensions",
                &d.lhs_contracting_dimensions,
            );
            field_list(
                out,
                &mut first,
                "rhs_contracting_dimensions",
                &d.rhs_contracting_dimensions,
            );
            out.push('>');
        }
        Attr::DotAlgorithm(d) => {
            out.push_str("#stablehlo.dot_algorithm<");
            write_dot_algorithm_fields(out, d);
            out.push('>');
        }
        Attr::GatherDimensionNumbers(d) => write_gather(out, d),
        Attr::ScatterDimensionNumbers(d) => write_scatter(out, d),
        Attr::ConvDimensionNumbers(d) => {
            out.push_str("#stablehlo.conv<");
            write_conv_dims(out, d);
            out.push('>');
        }
        Attr::ResultAccuracy(r) => {
            let _ = write!(
                out,
                "#stablehlo.result_accuracy<atol = {}, rtol = {}, ulps = {}, \
                 mode = #stablehlo.result_accuracy_mode<{}>>",
                fmt_float(r.atol, ElementType::F64),
                fmt_float(r.rtol, ElementType::F64),
                r.ulps,
                r.mode
            );
        }
        Attr::ChannelHandle(c) => {
            let _ = write!(
                out,
                "#stablehlo.channel_handle<handle = {}, type = {}>",
                c.handle, c.channel_type
            );
        }
        Attr::OutputOperandAlias(o) => {
            out.push_str("#stablehlo.output_operand_alias<output_tuple_indices = ");
            write_ints(out, &o.output_tuple_indices);
            let _ = write!(out, ", operand_index = {}", o.operand_index);
            out.push_str(", operand_tuple_indices = ");
            write_ints(out, &o.operand_tuple_indices);
            out.push('>');
        }
        Attr::Opaque(text) => out.push_str(text),
    }
}

/// The fields of a dot algorithm (inside `<...>`).
pub fn write_dot_algorithm_fields(out: &mut String, d: &DotAlgorithm) {
    let _ = write!(
        out,
        "lhs_precision_type = {}, rhs_precision_type = {}, accumulation_type = {}, \
         lhs_component_count = {}, rhs_component_count = {}, num_primitive_operations = {}, \
         allow_imprecise_accumulation = {}",
        d.lhs_precision_type,
        d.rhs_precision_type,
        d.accumulation_type,
        d.lhs_component_count,
        d.rhs_component_count,
        d.num_primitive_operations,
        d.allow_imprecise_accumulation
    );
}

fn write_gather(out: &mut String, d: &GatherDimensionNumbers) {
    out.push_str("#stablehlo.gather<");
    let mut first = true;
    field_list(out, &mut first, "offset_dims", &d.offset_dims);
    field_list(
        out,
        &mut first,
        "collapsed_slice_dims",
        &d.collapsed_slice_dims,
    );
    field_list(
        out,
        &mut first,
        "operand_batching_dims",
        &d.operand_batching_dims,
    );
    field_list(
        out,
        &mut first,
        "start_indices_batching_dims",
        &d.start_indices_batching_dims,
    );
    field_list(out, &mut first, "start_index_map", &d.start_index_map);
    field_sep(out, &mut first);
    let _ = write!(out, "index_vector_dim = {}>", d.index_vector_dim);
}

fn write_scatter(out: &mut String, d: &ScatterDimensionNumbers) {
    out.push_str("#stablehlo.scatter<");
    let mut first = true;
    field_list(out, &mut first, "update_window_dims", &d.update_window_dims);
    field_list(
        out,
        &mut first,
        "inserted_window_dims",
        &d.inserted_window_dims,
    );
    field_list(
        out,
        &mut first,
        "input_batching_dims",
        &d.input_batching_dims,
    );
    field_list(
        out,
        &mut first,
        "scatter_indices_batching_dims",
        &d.scatter_indices_batching_dims,
    );
    field_list(
        out,
        &mut first,
        "scatter_dims_to_operand_dims",
        &d.scatter_dims_to_operand_dims,
    );
    field_sep(out, &mut first);
    let _ = write!(out, "index_vector_dim = {}>", d.index_vector_dim);
}

/// `[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]` when the numbers form permutations, else the
/// `raw` struct form.
pub fn write_conv_dims(out: &mut String, d: &ConvDimensionNumbers) {
    let parts = [
        conv_layout(
            d.input_batch_dimension,
            d.input_feature_dimension,
            &d.input_spatial_dimensions,
            ['b', 'f'],
        ),
        conv_layout(
            d.kernel_input_feature_dimension,
            d.kernel_output_feature_dimension,
            &d.kernel_spatial_dimensions,
            ['i', 'o'],
        ),
        conv_layout(
            d.output_batch_dimension,
            d.output_feature_dimension,
            &d.output_spatial_dimensions,
            ['b', 'f'],
        ),
    ];
    if let [Some(i), Some(k), Some(o)] = parts {
        let _ = write!(out, "{i}x{k}->{o}");
        return;
    }
    let mut s = String::new();
    let _ = write!(
        s,
        "raw input_batch_dimension = {}, input_feature_dimension = {}, input_spatial_dimensions = ",
        d.input_batch_dimension, d.input_feature_dimension
    );
    write_ints(&mut s, &d.input_spatial_dimensions);
    let _ = write!(
        s,
        ", kernel_input_feature_dimension = {}, kernel_output_feature_dimension = {}, \
         kernel_spatial_dimensions = ",
        d.kernel_input_feature_dimension, d.kernel_output_feature_dimension
    );
    write_ints(&mut s, &d.kernel_spatial_dimensions);
    let _ = write!(
        s,
        ", output_batch_dimension = {}, output_feature_dimension = {}, output_spatial_dimensions = ",
        d.output_batch_dimension, d.output_feature_dimension
    );
    write_ints(&mut s, &d.output_spatial_dimensions);
    out.push_str(&s);
}

/// `[b, 0, 1, f]` for one operand, if the dimensions are a permutation.
fn conv_layout(a: i64, b: i64, spatial: &[i64], names: [char; 2]) -> Option<String> {
    let n = spatial.len() + 2;
    let mut slots: Vec<Option<String>> = vec![None; n];
    let mut put = |pos: i64, text: String| -> Option<()> {
        let slot = slots.get_mut(usize::try_from(pos).ok()?)?;
        if slot.is_some() {
            return None;
        }
        *slot = Some(text);
        Some(())
    };
    put(a, names[0].to_string())?;
    put(b, names[1].to_string())?;
    for (i, &s) in spatial.iter().enumerate() {
        put(s, i.to_string())?;
    }
    let items: Option<Vec<String>> = slots.into_iter().collect();
    Some(format!("[{}]", items?.join(", ")))
}

/// `array<i64: 1, 2>`; `i1` as booleans, floats from their bit patterns.
fn write_dense_array(out: &mut String, t: ElementType, v: &[i64]) {
    let _ = write!(out, "array<{}", t.mlir_name());
    for (i, &x) in v.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { ", " });
        if t.is_pred() {
            out.push_str(if x != 0 { "true" } else { "false" });
        } else if t.is_float() {
            let bits = x as u64;
            let value = float::decode(t, bits);
            if value.is_finite() {
                out.push_str(&fmt_float(value, t));
            } else {
                out.push_str(&hex_bits(bits, t));
            }
        } else {
            let _ = write!(out, "{x}");
        }
    }
    out.push('>');
}

/// `dense<...> : tensor<...>`.
pub fn write_dense(out: &mut String, l: &Literal) {
    out.push_str("dense<");
    write_dense_value(out, l);
    out.push_str("> : ");
    write_type(out, &Type::Tensor(l.ty.clone()));
}

/// The part between `dense<` and `>`.
fn write_dense_value(out: &mut String, l: &Literal) {
    let n = l.len();
    let size = l.ty.dtype.byte_size();
    if n == 0 {
        return;
    }
    if l.is_splat() {
        write_element(out, l, 0);
        return;
    }
    if l.data.len() < n * size {
        return;
    }
    if n > HEX_THRESHOLD && !l.ty.dtype.is_pred() {
        out.push_str("\"0x");
        // 16 bytes per `write!` keeps large constants fast even in debug builds.
        for chunk in l.data.chunks(16) {
            let mut word = [0u8; 16];
            word[..chunk.len()].copy_from_slice(chunk);
            let text = format!("{:032X}", u128::from_be_bytes(word));
            out.push_str(text.get(..chunk.len() * 2).unwrap_or(""));
        }
        out.push('"');
        return;
    }
    let dims = l.ty.dims();
    let mut index = 0;
    write_nested(out, l, &dims, &mut index);
}

fn write_nested(out: &mut String, l: &Literal, dims: &[usize], index: &mut usize) {
    let Some((&d, rest)) = dims.split_first() else {
        write_element(out, l, *index);
        *index += 1;
        return;
    };
    out.push('[');
    for i in 0..d {
        if i > 0 {
            out.push_str(", ");
        }
        write_nested(out, l, rest, index);
    }
    out.push(']');
}

/// One element from the literal's bytes; floats exact (hex for inf/NaN, keeping payloads).
fn write_element(out: &mut String, l: &Literal, i: usize) {
    let t = l.ty.dtype;
    let size = t.byte_size();
    let bytes = l.data.get(i * size..(i + 1) * size).unwrap_or(&[]);
    if let Some(part) = t.complex_part() {
        let half = size / 2;
        out.push('(');
        write_float_bytes(out, part, bytes.get(..half).unwrap_or(&[]));
        out.push_str(", ");
        write_float_bytes(out, part, bytes.get(half..).unwrap_or(&[]));
        out.push(')');
        return;
    }
    if t.is_float() {
        write_float_bytes(out, t, bytes);
        return;
    }
    match read_scalar(t, bytes) {
        Scalar::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        s => {
            let _ = write!(out, "{}", s.as_i128());
        }
    }
}

fn write_float_bytes(out: &mut String, t: ElementType, bytes: &[u8]) {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    let bits = u64::from_le_bytes(buf);
    let v = float::decode(t, bits);
    if v.is_finite() {
        out.push_str(&fmt_float(v, t));
    } else {
        out.push_str(&hex_bits(bits, t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_with_a_dot_and_round_trip() {
        assert_eq!(fmt_float(1.0, ElementType::F64), "1.0e0");
        assert_eq!(fmt_float(0.1f32 as f64, ElementType::F32), "1.0e-1");
        assert_eq!(fmt_float(-1.5e-7, ElementType::F64), "-1.5e-7");
        assert_eq!(fmt_float(f64::INFINITY, ElementType::F32), "0x7F800000");
        assert_eq!(fmt_float(f64::NAN, ElementType::BF16), "0x7FC0");
    }

    #[test]
    fn strings_escape() {
        let mut s = String::new();
        write_string(&mut s, "a\"b\n\u{8}");
        assert_eq!(s, r#""a\"b\0A\08""#);
    }
}
