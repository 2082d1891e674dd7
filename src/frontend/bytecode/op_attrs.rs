//! The attributes of one VHLO op in StableHLO's generic form: VHLO spells every attribute out,
//! flattens dimension-number structs into separate attributes and stores integer lists as
//! tensors; StableHLO drops attributes equal to their defaults, groups dimension numbers into
//! structs and uses `array<i64: ...>`. Older op versions simply lack attributes later versions
//! added, which read as those attributes' defaults.

use std::rc::Rc;

use super::lower_attrs::AttrLowering;
use super::value::{BAttr, BType};
use crate::error::{Error, Result};
use crate::ir::attr::{
    ChannelHandle, ComparisonType, ConvDimensionNumbers, CustomCallApiVersion, DotAlgorithm,
    DotDimensionNumbers, GatherDimensionNumbers, Precision, ResultAccuracyMode,
    ScatterDimensionNumbers,
};
use crate::ir::{Attr, ElementType};

/// Named decoded attributes of one op.
pub(crate) type RawAttrs = Vec<(String, Rc<BAttr>)>;

/// Integer-list attributes StableHLO keeps as `array<i64: ...>`, per op.
const I64_ARRAYS: &[(&str, &[&str])] = &[
    ("broadcast", &["broadcast_sizes"]),
    ("broadcast_in_dim", &["broadcast_dimensions"]),
    (
        "convolution",
        &["lhs_dilation", "rhs_dilation", "window_strides"],
    ),
    (
        "dynamic_broadcast_in_dim",
        &[
            "broadcast_dimensions",
            "known_expanding_dimensions",
            "known_nonexpanding_dimensions",
        ],
    ),
    (
        "dynamic_conv",
        &["lhs_dilation", "rhs_dilation", "window_strides"],
    ),
    ("dynamic_slice", &["slice_sizes"]),
    ("fft", &["fft_length"]),
    ("gather", &["slice_sizes"]),
    ("map", &["dimensions"]),
    (
        "pad",
        &["edge_padding_low", "edge_padding_high", "interior_padding"],
    ),
    ("reduce", &["dimensions"]),
    (
        "reduce_window",
        &[
            "window_dimensions",
            "window_strides",
            "base_dilations",
            "window_dilations",
        ],
    ),
    ("reverse", &["dimensions"]),
    (
        "select_and_scatter",
        &["window_dimensions", "window_strides"],
    ),
    ("slice", &["start_indices", "limit_indices", "strides"]),
    ("transpose", &["permutation"]),
];

/// Collective ops whose `channel_id` is a `channel_handle` and whose flags are unit attributes.
const COLLECTIVES: &[&str] = &[
    "all_gather",
    "all_reduce",
    "all_to_all",
    "collective_broadcast",
    "collective_permute",
    "collective_reduce",
    "reduce_scatter",
];

/// Ops with a `result_accuracy` attribute.
const RESULT_ACCURACY_OPS: &[&str] = &[
    "cbrt",
    "cosine",
    "exponential",
    "exponential_minus_one",
    "log",
    "log_plus_one",
    "logistic",
    "rsqrt",
    "sine",
    "sqrt",
    "tan",
    "tanh",
];

/// The StableHLO generic attributes of VHLO op `base` (its name without `vhlo.` and version),
/// sorted by name.
pub(crate) fn stablehlo_attrs(
    base: &str,
    mut attrs: RawAttrs,
    low: &mut AttrLowering,
) -> Result<Vec<(String, Attr)>> {
    remove_defaults(base, &mut attrs);
    let mut out = implode(base, &mut attrs)?;
    let i64_arrays = I64_ARRAYS
        .iter()
        .find(|(op, _)| *op == base)
        .map_or(&[][..], |(_, names)| *names);
    for (name, a) in attrs {
        let converted = if i64_arrays.contains(&name.as_str()) {
            Attr::DenseArray(ElementType::I64, int_list(&name, &a)?)
        } else {
            match (base, name.as_str()) {
                ("convolution" | "dynamic_conv", "window_reversal") => Attr::DenseArray(
                    ElementType::Pred,
                    int_list(&name, &a)?
                        .into_iter()
                        .map(|b| i64::from(b != 0))
                        .collect(),
                ),
                ("dynamic_conv", "padding") => continue,
                (op, "channel_id") if COLLECTIVES.contains(&op) => {
                    out.push((
                        "channel_handle".into(),
                        Attr::ChannelHandle(ChannelHandle {
                            handle: int(&name, &a)?,
                            channel_type: 0,
                        }),
                    ));
                    continue;
                }
                (op, "use_global_device_ids" | "has_dynamic_root") if COLLECTIVES.contains(&op) => {
                    match &*a {
                        BAttr::Bool(true) => Attr::Unit,
                        BAttr::Bool(false) => continue,
                        _ => return Err(wrong(&name, "a boolean")),
                    }
                }
                ("custom_call", "called_computations") => match &*a {
                    BAttr::Array(items) => Attr::Array(
                        items
                            .iter()
                            .map(|i| symbol(&name, i))
                            .collect::<Result<_>>()?,
                    ),
                    _ => return Err(wrong(&name, "an array")),
                },
                ("composite", "decomposition") | ("call", "callee") => symbol(&name, &a)?,
                _ => low.attr(&a)?,
            }
        };
        out.push((name, converted));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn take(attrs: &mut RawAttrs, name: &str) -> Option<Rc<BAttr>> {
    let i = attrs.iter().position(|(n, _)| n == name)?;
    Some(attrs.remove(i).1)
}

fn get<'a>(attrs: &'a RawAttrs, name: &str) -> Option<&'a BAttr> {
    attrs.iter().find(|(n, _)| n == name).map(|(_, a)| &**a)
}

/// Drops the attributes VHLO spelled out only because it has no defaults.
fn remove_defaults(base: &str, attrs: &mut RawAttrs) {
    let zero = |a: &BAttr| matches!(a, BAttr::Int(0, _));
    let fals = |a: &BAttr| matches!(a, BAttr::Bool(false));
    let empty_array = |a: &BAttr| matches!(a, BAttr::Array(v) if v.is_empty());
    let empty_string = |a: &BAttr| matches!(a, BAttr::String(s) if s.is_empty());
    let empty_tensor = |a: &BAttr| matches!(a, BAttr::Dense(l) if l.is_empty());
    let ones = |a: &BAttr| splat(a, 1);
    let zeros = |a: &BAttr| splat(a, 0);
    let default_precision = |a: &BAttr| matches!(a, BAttr::Array(v) if v.iter().all(|p| matches!(**p, BAttr::Precision(Precision::Default))));
    match base {
        "all_gather" | "all_reduce" | "reduce_scatter" | "collective_reduce" => {
            drop_if(attrs, "channel_id", &zero);
            drop_if(attrs, "use_global_device_ids", &fals);
            drop_if(attrs, "has_dynamic_root", &fals);
        }
        "all_to_all" | "collective_permute" | "collective_broadcast" => {
            drop_if(attrs, "channel_id", &zero);
            drop_if(attrs, "has_dynamic_root", &fals);
        }
        "cholesky" => drop_if(attrs, "lower", &fals),
        "compare" => drop_if(attrs, "compare_type", &|a| {
            matches!(a, BAttr::ComparisonType(ComparisonType::NoType))
        }),
        "composite" => {
            drop_if(attrs, "version", &zero);
            drop_if(
                attrs,
                "composite_attributes",
                &|a| matches!(a, BAttr::Dict(d) if d.is_empty()),
            );
        }
        "convolution" | "dynamic_conv" => {
            drop_if(attrs, "window_strides", &ones);
            if base == "convolution" {
                drop_if(attrs, "padding", &zeros);
            }
            drop_if(attrs, "lhs_dilation", &ones);
            drop_if(attrs, "rhs_dilation", &ones);
            drop_if(attrs, "window_reversal", &zeros);
            drop_if(attrs, "precision_config", &default_precision);
        }
        "custom_call" => {
            drop_if(attrs, "has_side_effect", &fals);
            drop_if(attrs, "backend_config", &|a| {
                empty_string(a) || matches!(a, BAttr::Dict(d) if d.is_empty())
            });
            drop_if(attrs, "api_version", &|a| {
                matches!(a, BAttr::ApiVersion(CustomCallApiVersion::Original))
            });
            drop_if(attrs, "called_computations", &empty_array);
            if get(attrs, "operand_layouts").is_some_and(empty_array)
                && get(attrs, "result_layouts").is_some_and(empty_array)
            {
                take(attrs, "operand_layouts");
                take(attrs, "result_layouts");
            }
            drop_if(attrs, "output_operand_aliases", &empty_array);
            drop_if(attrs, "result_tilings", &empty_array);
        }
        "dot_general" | "dot" => drop_if(attrs, "precision_config", &default_precision),
        "dynamic_broadcast_in_dim" => {
            drop_if(attrs, "known_expanding_dimensions", &empty_tensor);
            drop_if(attrs, "known_nonexpanding_dimensions", &empty_tensor);
        }
        "gather" | "dynamic_gather" => drop_if(attrs, "indices_are_sorted", &fals),
        "infeed" => {
            drop_if(attrs, "infeed_config", &empty_string);
            drop_if(attrs, "layout", &empty_array);
        }
        "outfeed" => drop_if(attrs, "outfeed_config", &empty_string),
        "recv" | "send" => {
            drop_if(attrs, "is_host_transfer", &fals);
            drop_if(attrs, "source_target_pairs", &empty_tensor);
        }
        "reduce_window" => {
            drop_if(attrs, "window_strides", &ones);
            drop_if(attrs, "base_dilations", &ones);
            drop_if(attrs, "window_dilations", &ones);
            drop_if(attrs, "padding", &zeros);
        }
        "scatter" => {
            drop_if(attrs, "indices_are_sorted", &fals);
            drop_if(attrs, "unique_indices", &fals);
        }
        "select_and_scatter" => {
            drop_if(attrs, "window_strides", &ones);
            drop_if(attrs, "padding", &zeros);
        }
        "sort" => {
            drop_if(attrs, "dimension", &|a| matches!(a, BAttr::Int(-1, _)));
            drop_if(attrs, "is_stable", &fals);
        }
        op if RESULT_ACCURACY_OPS.contains(&op) => drop_if(attrs, "result_accuracy", &|a| {
            matches!(a, BAttr::ResultAccuracy(r)
                if r.atol == 0.0 && r.rtol == 0.0 && r.ulps == 0
                    && r.mode == ResultAccuracyMode::Default)
        }),
        _ => {}
    }
}

/// Removes attribute `name` if `pred` holds for it.
fn drop_if(attrs: &mut RawAttrs, name: &str, pred: &dyn Fn(&BAttr) -> bool) {
    if get(attrs, name).is_some_and(pred) {
        take(attrs, name);
    }
}

/// True for a non-empty dense tensor whose elements all equal `v`.
fn splat(a: &BAttr, v: i64) -> bool {
    match a {
        BAttr::Dense(l) if !l.is_empty() && !l.ty.dtype.is_float() => {
            l.to_i64s().iter().all(|&x| x == v)
        }
        _ => false,
    }
}

/// Groups VHLO's flattened dimension numbers (and channel handles) into StableHLO's structs.
fn implode(base: &str, attrs: &mut RawAttrs) -> Result<Vec<(String, Attr)>> {
    let mut out = Vec::new();
    match base {
        "convolution" | "dynamic_conv" => {
            let mut i = |n: &str| int(n, &*req(attrs, n)?);
            let input_batch_dimension = i("input_batch_dimension")?;
            let input_feature_dimension = i("input_feature_dimension")?;
            let kernel_input_feature_dimension = i("kernel_input_feature_dimension")?;
            let kernel_output_feature_dimension = i("kernel_output_feature_dimension")?;
            let output_batch_dimension = i("output_batch_dimension")?;
            let output_feature_dimension = i("output_feature_dimension")?;
            let mut l = |n: &str| int_list(n, &*req(attrs, n)?);
            let d = ConvDimensionNumbers {
                input_batch_dimension,
                input_feature_dimension,
                input_spatial_dimensions: l("input_spatial_dimensions")?,
                kernel_input_feature_dimension,
                kernel_output_feature_dimension,
                kernel_spatial_dimensions: l("kernel_spatial_dimensions")?,
                output_batch_dimension,
                output_feature_dimension,
                output_spatial_dimensions: l("output_spatial_dimensions")?,
            };
            out.push(("dimension_numbers".into(), Attr::ConvDimensionNumbers(d)));
        }
        "dot_general" => {
            let mut l = |n: &str| int_list(n, &*req(attrs, n)?);
            let d = DotDimensionNumbers {
                lhs_batching_dimensions: l("lhs_batching_dimensions")?,
                rhs_batching_dimensions: l("rhs_batching_dimensions")?,
                lhs_contracting_dimensions: l("lhs_contracting_dimensions")?,
                rhs_contracting_dimensions: l("rhs_contracting_dimensions")?,
            };
            out.push(("dot_dimension_numbers".into(), Attr::DotDimensionNumbers(d)));
            if let Some(a) = dot_algorithm(attrs)? {
                out.push(("algorithm".into(), Attr::DotAlgorithm(a)));
            }
        }
        "gather" | "dynamic_gather" => {
            let mut l = |n: &str| int_list(n, &*req(attrs, n)?);
            let offset_dims = l("offset_dims")?;
            let collapsed_slice_dims = l("collapsed_slice_dims")?;
            let start_index_map = l("start_index_map")?;
            let d = GatherDimensionNumbers {
                offset_dims,
                collapsed_slice_dims,
                operand_batching_dims: optional_list(attrs, "operand_batching_dims")?,
                start_indices_batching_dims: optional_list(attrs, "start_indices_batching_dims")?,
                start_index_map,
                index_vector_dim: int("index_vector_dim", &*req(attrs, "index_vector_dim")?)?,
            };
            out.push(("dimension_numbers".into(), Attr::GatherDimensionNumbers(d)));
        }
        "scatter" => {
            let mut l = |n: &str| int_list(n, &*req(attrs, n)?);
            let update_window_dims = l("update_window_dims")?;
            let inserted_window_dims = l("inserted_window_dims")?;
            let scatter_dims_to_operand_dims = l("scatter_dims_to_operand_dims")?;
            let d = ScatterDimensionNumbers {
                update_window_dims,
                inserted_window_dims,
                input_batching_dims: optional_list(attrs, "input_batching_dims")?,
                scatter_indices_batching_dims: optional_list(
                    attrs,
                    "scatter_indices_batching_dims",
                )?,
                scatter_dims_to_operand_dims,
                index_vector_dim: int("index_vector_dim", &*req(attrs, "index_vector_dim")?)?,
            };
            out.push((
                "scatter_dimension_numbers".into(),
                Attr::ScatterDimensionNumbers(d),
            ));
        }
        "send" | "recv" => {
            let handle = int("channel_id", &*req(attrs, "channel_id")?)?;
            let channel_type = int("channel_type", &*req(attrs, "channel_type")?)?;
            out.push((
                "channel_handle".into(),
                Attr::ChannelHandle(ChannelHandle {
                    handle,
                    channel_type,
                }),
            ));
        }
        _ => {}
    }
    Ok(out)
}

/// `dot_general`'s algorithm: absent in version 1, all `none` when unset.
fn dot_algorithm(attrs: &mut RawAttrs) -> Result<Option<DotAlgorithm>> {
    const NAMES: [&str; 7] = [
        "lhs_precision_type",
        "rhs_precision_type",
        "accumulation_type",
        "lhs_component_count",
        "rhs_component_count",
        "num_primitive_operations",
        "allow_imprecise_accumulation",
    ];
    let parts: Vec<Option<Rc<BAttr>>> = NAMES.iter().map(|n| take(attrs, n)).collect();
    let is_none = |a: &Option<Rc<BAttr>>| {
        a.as_deref()
            .is_none_or(|a| matches!(a, BAttr::Type(t) if matches!(**t, BType::None)))
    };
    if parts.iter().all(is_none) {
        return Ok(None);
    }
    let get = |i: usize| {
        parts[i]
            .clone()
            .ok_or_else(|| Error::invalid(format!("missing attribute `{}`", NAMES[i])))
    };
    let elem = |i: usize| -> Result<ElementType> {
        match &*get(i)? {
            BAttr::Type(t) => super::lower_types::element_type(t),
            _ => None,
        }
        .ok_or_else(|| wrong(NAMES[i], "an element type"))
    };
    Ok(Some(DotAlgorithm {
        lhs_precision_type: elem(0)?,
        rhs_precision_type: elem(1)?,
        accumulation_type: elem(2)?,
        lhs_component_count: int(NAMES[3], &*get(3)?)?,
        rhs_component_count: int(NAMES[4], &*get(4)?)?,
        num_primitive_operations: int(NAMES[5], &*get(5)?)?,
        allow_imprecise_accumulation: match &*get(6)? {
            BAttr::Bool(b) => *b,
            _ => return Err(wrong(NAMES[6], "a boolean")),
        },
    }))
}

fn req(attrs: &mut RawAttrs, name: &str) -> Result<Rc<BAttr>> {
    take(attrs, name).ok_or_else(|| Error::invalid(format!("missing attribute `{name}`")))
}

fn optional_list(attrs: &mut RawAttrs, name: &str) -> Result<Vec<i64>> {
    match take(attrs, name) {
        Some(a) => int_list(name, &a),
        None => Ok(Vec::new()),
    }
}

fn wrong(name: &str, expected: &str) -> Error {
    Error::invalid(format!("attribute `{name}` is not {expected}"))
}

fn int(name: &str, a: &BAttr) -> Result<i64> {
    match a {
        BAttr::Int(v, _) => i64::try_from(*v).map_err(|_| wrong(name, "a 64-bit integer")),
        _ => Err(wrong(name, "an integer")),
    }
}

fn int_list(name: &str, a: &BAttr) -> Result<Vec<i64>> {
    match a {
        BAttr::Dense(l) if !l.ty.dtype.is_float() && !l.ty.dtype.is_complex() => Ok(l.to_i64s()),
        _ => Err(wrong(name, "an integer tensor")),
    }
}

fn symbol(name: &str, a: &BAttr) -> Result<Attr> {
    match a {
        BAttr::String(s) => Ok(Attr::Symbol(s.clone())),
        _ => Err(wrong(name, "a symbol name")),
    }
}
