//! The VHLO operation table: every op and op version from VHLO 0.9.0 on, the StableHLO versions
//! it is valid in, and its inherent attributes. Bytecode 5+ stores those attributes as
//! properties, in byte-wise sorted name order (ODS sorts them); older bytecode keeps them in the
//! op's attribute dictionary.
//!
//! The table re-states the op definitions of openxla/stablehlo `VhloOps.td`.

use super::version::Version;

/// One VHLO op version.
#[derive(Debug)]
pub(crate) struct VhloOp {
    /// Mnemonic without the dialect prefix (`dot_general_v2`).
    pub mnemonic: &'static str,
    /// First StableHLO version with this op version.
    pub min: Version,
    /// Last StableHLO version with it; `None` while current.
    pub max: Option<Version>,
    /// Inherent attributes in declaration order.
    pub attrs: &'static [&'static str],
}

impl VhloOp {
    /// The op's name without the version suffix (`dot_general`).
    pub fn base(&self) -> &'static str {
        match self.mnemonic.rfind("_v") {
            Some(i) => &self.mnemonic[..i],
            None => self.mnemonic,
        }
    }

    /// The StableHLO versions this op version belongs to, for messages (`1.6.0 to 1.20.0`).
    pub fn versions(&self) -> String {
        match self.max {
            Some(max) => format!("StableHLO {} to {max}", self.min),
            None => format!("StableHLO {} and later", self.min),
        }
    }

    /// The inherent attributes in the order bytecode 5+ stores them.
    pub fn property_order(&self) -> Vec<&'static str> {
        let mut v = self.attrs.to_vec();
        v.sort_unstable();
        v
    }
}

const fn op(
    mnemonic: &'static str,
    min: (u32, u32, u32),
    max: Option<(u32, u32, u32)>,
    attrs: &'static [&'static str],
) -> VhloOp {
    VhloOp {
        mnemonic,
        min: Version::new(min.0, min.1, min.2),
        max: match max {
            Some(m) => Some(Version::new(m.0, m.1, m.2)),
            None => None,
        },
        attrs,
    }
}

/// Every VHLO op version.
pub(crate) static VHLO_OPS: &[VhloOp] = &[
    op("abs_v1", (0, 9, 0), None, &[]),
    op("add_v1", (0, 9, 0), None, &[]),
    op("after_all_v1", (0, 9, 0), None, &[]),
    op(
        "all_gather_v1",
        (0, 9, 0),
        Some((1, 4, 0)),
        &[
            "all_gather_dim",
            "replica_groups",
            "channel_id",
            "use_global_device_ids",
        ],
    ),
    op(
        "all_gather_v2",
        (1, 5, 0),
        None,
        &[
            "all_gather_dim",
            "replica_groups",
            "channel_id",
            "use_global_device_ids",
        ],
    ),
    op(
        "all_reduce_v1",
        (0, 9, 0),
        Some((1, 4, 0)),
        &["replica_groups", "channel_id", "use_global_device_ids"],
    ),
    op(
        "all_reduce_v2",
        (1, 5, 0),
        None,
        &["replica_groups", "channel_id", "use_global_device_ids"],
    ),
    op(
        "all_to_all_v1",
        (0, 9, 0),
        Some((1, 4, 0)),
        &[
            "split_dimension",
            "concat_dimension",
            "split_count",
            "replica_groups",
            "channel_id",
        ],
    ),
    op(
        "all_to_all_v2",
        (1, 5, 0),
        None,
        &[
            "split_dimension",
            "concat_dimension",
            "split_count",
            "replica_groups",
            "channel_id",
        ],
    ),
    op("and_v1", (0, 9, 0), None, &[]),
    op("async_start_v1", (1, 15, 0), None, &[]),
    op("async_done_v1", (1, 15, 0), None, &[]),
    op("atan2_v1", (0, 9, 0), None, &[]),
    op(
        "batch_norm_grad_v1",
        (0, 9, 0),
        None,
        &["epsilon", "feature_index"],
    ),
    op(
        "batch_norm_inference_v1",
        (0, 9, 0),
        None,
        &["epsilon", "feature_index"],
    ),
    op(
        "batch_norm_training_v1",
        (0, 9, 0),
        None,
        &["epsilon", "feature_index"],
    ),
    op("bitcast_convert_v1", (0, 9, 0), None, &[]),
    op(
        "broadcast_in_dim_v1",
        (0, 9, 0),
        None,
        &["broadcast_dimensions"],
    ),
    op("broadcast_v1", (0, 9, 0), None, &["broadcast_sizes"]),
    op("call_v1", (0, 9, 0), None, &["callee"]),
    op("case_v1", (0, 9, 0), None, &[]),
    op("cbrt_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("cbrt_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("ceil_v1", (0, 9, 0), None, &[]),
    op("cholesky_v1", (0, 9, 0), None, &["lower"]),
    op("clamp_v1", (0, 9, 0), None, &[]),
    op("count_leading_zeros_v1", (0, 9, 0), None, &[]),
    op(
        "collective_broadcast_v1",
        (0, 16, 0),
        Some((1, 19, 0)),
        &["replica_groups", "channel_id"],
    ),
    op(
        "collective_broadcast_v2",
        (1, 20, 0),
        None,
        &["replica_groups", "channel_id", "has_dynamic_root"],
    ),
    op(
        "collective_reduce_v1",
        (1, 19, 0),
        None,
        &[
            "replica_groups",
            "channel_id",
            "use_global_device_ids",
            "has_dynamic_root",
        ],
    ),
    op(
        "collective_permute_v1",
        (0, 9, 0),
        None,
        &["source_target_pairs", "channel_id"],
    ),
    op(
        "compare_v1",
        (0, 9, 0),
        None,
        &["comparison_direction", "compare_type"],
    ),
    op("complex_v1", (0, 9, 0), None, &[]),
    op(
        "composite_v1",
        (0, 19, 0),
        Some((1, 13, 0)),
        &["name", "composite_attributes", "decomposition", "version"],
    ),
    op(
        "composite_v2",
        (1, 14, 0),
        None,
        &["name", "composite_attributes", "decomposition", "version"],
    ),
    op("concatenate_v1", (0, 9, 0), None, &["dimension"]),
    op("constant_v1", (0, 9, 0), None, &["value"]),
    op("convert_v1", (0, 9, 0), None, &[]),
    op(
        "convolution_v1",
        (0, 9, 0),
        None,
        &[
            "window_strides",
            "padding",
            "lhs_dilation",
            "rhs_dilation",
            "window_reversal",
            "input_batch_dimension",
            "input_feature_dimension",
            "input_spatial_dimensions",
            "kernel_input_feature_dimension",
            "kernel_output_feature_dimension",
            "kernel_spatial_dimensions",
            "output_batch_dimension",
            "output_feature_dimension",
            "output_spatial_dimensions",
            "feature_group_count",
            "batch_group_count",
            "precision_config",
        ],
    ),
    op("cosine_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("cosine_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("create_token_v1", (0, 9, 0), None, &[]),
    op("cross-replica-sum_v1", (0, 9, 0), None, &["replica_groups"]),
    op(
        "custom_call_v1",
        (0, 9, 0),
        Some((1, 17, 0)),
        &[
            "call_target_name",
            "has_side_effect",
            "backend_config",
            "api_version",
            "called_computations",
            "operand_layouts",
            "result_layouts",
            "output_operand_aliases",
        ],
    ),
    op(
        "custom_call_v2",
        (1, 18, 0),
        None,
        &[
            "call_target_name",
            "has_side_effect",
            "backend_config",
            "api_version",
            "called_computations",
            "operand_layouts",
            "result_layouts",
            "output_operand_aliases",
            "result_tilings",
        ],
    ),
    op("divide_v1", (0, 9, 0), None, &[]),
    op(
        "dot_general_v1",
        (0, 9, 0),
        Some((1, 5, 0)),
        &[
            "lhs_batching_dimensions",
            "rhs_batching_dimensions",
            "lhs_contracting_dimensions",
            "rhs_contracting_dimensions",
            "precision_config",
        ],
    ),
    op(
        "dot_general_v2",
        (1, 6, 0),
        None,
        &[
            "lhs_batching_dimensions",
            "rhs_batching_dimensions",
            "lhs_contracting_dimensions",
            "rhs_contracting_dimensions",
            "precision_config",
            "lhs_precision_type",
            "rhs_precision_type",
            "accumulation_type",
            "lhs_component_count",
            "rhs_component_count",
            "num_primitive_operations",
            "allow_imprecise_accumulation",
        ],
    ),
    op("dot_v1", (0, 9, 0), None, &["precision_config"]),
    op(
        "dynamic_broadcast_in_dim_v1",
        (0, 9, 0),
        None,
        &[
            "broadcast_dimensions",
            "known_expanding_dimensions",
            "known_nonexpanding_dimensions",
        ],
    ),
    op(
        "dynamic_conv_v1",
        (0, 9, 0),
        Some((0, 19, 0)),
        &[
            "window_strides",
            "padding",
            "lhs_dilation",
            "rhs_dilation",
            "window_reversal",
            "input_batch_dimension",
            "input_feature_dimension",
            "input_spatial_dimensions",
            "kernel_input_feature_dimension",
            "kernel_output_feature_dimension",
            "kernel_spatial_dimensions",
            "output_batch_dimension",
            "output_feature_dimension",
            "output_spatial_dimensions",
            "feature_group_count",
            "batch_group_count",
            "precision_config",
        ],
    ),
    op(
        "dynamic_conv_v2",
        (0, 20, 0),
        None,
        &[
            "window_strides",
            "lhs_dilation",
            "rhs_dilation",
            "window_reversal",
            "input_batch_dimension",
            "input_feature_dimension",
            "input_spatial_dimensions",
            "kernel_input_feature_dimension",
            "kernel_output_feature_dimension",
            "kernel_spatial_dimensions",
            "output_batch_dimension",
            "output_feature_dimension",
            "output_spatial_dimensions",
            "feature_group_count",
            "batch_group_count",
            "precision_config",
        ],
    ),
    op(
        "dynamic_gather_v1",
        (0, 9, 0),
        Some((1, 0, 0)),
        &[
            "offset_dims",
            "collapsed_slice_dims",
            "start_index_map",
            "index_vector_dim",
            "indices_are_sorted",
        ],
    ),
    op(
        "dynamic_gather_v2",
        (1, 1, 0),
        None,
        &[
            "offset_dims",
            "collapsed_slice_dims",
            "operand_batching_dims",
            "start_indices_batching_dims",
            "start_index_map",
            "index_vector_dim",
            "indices_are_sorted",
        ],
    ),
    op("dynamic_iota_v1", (0, 9, 0), None, &["iota_dimension"]),
    op("dynamic_pad_v1", (0, 9, 0), None, &[]),
    op("dynamic_reshape_v1", (0, 9, 0), None, &[]),
    op("dynamic_slice_v1", (0, 9, 0), None, &["slice_sizes"]),
    op("dynamic_update_slice_v1", (0, 9, 0), None, &[]),
    op("einsum_v1", (0, 9, 0), None, &["einsum_config"]),
    op("exponential_minus_one_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op(
        "exponential_minus_one_v2",
        (1, 10, 0),
        None,
        &["result_accuracy"],
    ),
    op("exponential_v1", (0, 9, 0), Some((1, 8, 0)), &[]),
    op("exponential_v2", (1, 9, 0), None, &["result_accuracy"]),
    op("fft_v1", (0, 9, 0), None, &["fft_type", "fft_length"]),
    op("floor_v1", (0, 9, 0), None, &[]),
    op(
        "func_v1",
        (0, 9, 0),
        None,
        &[
            "sym_name",
            "function_type",
            "sym_visibility",
            "arg_attrs",
            "res_attrs",
        ],
    ),
    op(
        "gather_v1",
        (0, 9, 0),
        Some((1, 0, 0)),
        &[
            "offset_dims",
            "collapsed_slice_dims",
            "start_index_map",
            "index_vector_dim",
            "slice_sizes",
            "indices_are_sorted",
        ],
    ),
    op(
        "gather_v2",
        (1, 1, 0),
        None,
        &[
            "offset_dims",
            "collapsed_slice_dims",
            "operand_batching_dims",
            "start_indices_batching_dims",
            "start_index_map",
            "index_vector_dim",
            "slice_sizes",
            "indices_are_sorted",
        ],
    ),
    op("get_dimension_size_v1", (0, 9, 0), None, &["dimension"]),
    op("get_tuple_element_v1", (0, 9, 0), None, &["index"]),
    op("if_v1", (0, 9, 0), None, &[]),
    op("imag_v1", (0, 9, 0), None, &[]),
    op("infeed_v1", (0, 9, 0), None, &["infeed_config", "layout"]),
    op("iota_v1", (0, 9, 0), None, &["iota_dimension"]),
    op("is_finite_v1", (0, 9, 0), None, &[]),
    op("log_plus_one_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("log_plus_one_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("logistic_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("logistic_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("log_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("log_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("map_v1", (0, 9, 0), None, &["dimensions"]),
    op("maximum_v1", (0, 9, 0), None, &[]),
    op("minimum_v1", (0, 9, 0), None, &[]),
    op("multiply_v1", (0, 9, 0), None, &[]),
    op("negate_v1", (0, 9, 0), None, &[]),
    op("not_v1", (0, 9, 0), None, &[]),
    op("optimization_barrier_v1", (0, 9, 0), None, &[]),
    op("or_v1", (0, 9, 0), None, &[]),
    op("outfeed_v1", (0, 9, 0), None, &["outfeed_config"]),
    op(
        "pad_v1",
        (0, 9, 0),
        None,
        &["edge_padding_low", "edge_padding_high", "interior_padding"],
    ),
    op("partition_id_v1", (0, 9, 0), None, &[]),
    op("popcnt_v1", (0, 9, 0), None, &[]),
    op("power_v1", (0, 9, 0), None, &[]),
    op("real_dynamic_slice_v1", (0, 9, 0), None, &[]),
    op("real_v1", (0, 9, 0), None, &[]),
    op(
        "recv_v1",
        (0, 9, 0),
        Some((1, 11, 0)),
        &["channel_id", "channel_type", "is_host_transfer"],
    ),
    op(
        "recv_v2",
        (1, 12, 0),
        None,
        &[
            "channel_id",
            "channel_type",
            "is_host_transfer",
            "source_target_pairs",
        ],
    ),
    op("reduce_v1", (0, 9, 0), None, &["dimensions"]),
    op(
        "reduce_precision_v1",
        (0, 9, 0),
        None,
        &["exponent_bits", "mantissa_bits"],
    ),
    op(
        "reduce_scatter_v1",
        (0, 9, 0),
        None,
        &[
            "scatter_dimension",
            "replica_groups",
            "channel_id",
            "use_global_device_ids",
        ],
    ),
    op(
        "reduce_window_v1",
        (0, 9, 0),
        None,
        &[
            "window_dimensions",
            "window_strides",
            "base_dilations",
            "window_dilations",
            "padding",
        ],
    ),
    op("remainder_v1", (0, 9, 0), None, &[]),
    op("replica_id_v1", (0, 9, 0), None, &[]),
    op("reshape_v1", (0, 9, 0), None, &[]),
    op("return_v1", (0, 9, 0), None, &[]),
    op("reverse_v1", (0, 9, 0), None, &["dimensions"]),
    op("rng_bit_generator_v1", (0, 9, 0), None, &["rng_algorithm"]),
    op("rng_v1", (0, 9, 0), None, &["rng_distribution"]),
    op("round_nearest_even_v1", (0, 9, 0), None, &[]),
    op("round_nearest_afz_v1", (0, 9, 0), None, &[]),
    op("rsqrt_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("rsqrt_v2", (1, 10, 0), None, &["result_accuracy"]),
    op(
        "scatter_v1",
        (0, 9, 0),
        Some((1, 0, 0)),
        &[
            "update_window_dims",
            "inserted_window_dims",
            "scatter_dims_to_operand_dims",
            "index_vector_dim",
            "indices_are_sorted",
            "unique_indices",
        ],
    ),
    op(
        "scatter_v2",
        (1, 1, 0),
        None,
        &[
            "update_window_dims",
            "inserted_window_dims",
            "input_batching_dims",
            "scatter_indices_batching_dims",
            "scatter_dims_to_operand_dims",
            "index_vector_dim",
            "indices_are_sorted",
            "unique_indices",
        ],
    ),
    op(
        "select_and_scatter_v1",
        (0, 9, 0),
        None,
        &["window_dimensions", "window_strides", "padding"],
    ),
    op("select_v1", (0, 9, 0), None, &[]),
    op(
        "send_v1",
        (0, 9, 0),
        Some((1, 11, 0)),
        &["channel_id", "channel_type", "is_host_transfer"],
    ),
    op(
        "send_v2",
        (1, 12, 0),
        None,
        &[
            "channel_id",
            "channel_type",
            "is_host_transfer",
            "source_target_pairs",
        ],
    ),
    op("set_dimension_size_v1", (0, 9, 0), None, &["dimension"]),
    op("shift_left_v1", (0, 9, 0), None, &[]),
    op("shift_right_arithmetic_v1", (0, 9, 0), None, &[]),
    op("shift_right_logical_v1", (0, 9, 0), None, &[]),
    op("sign_v1", (0, 9, 0), None, &[]),
    op("sine_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("sine_v2", (1, 10, 0), None, &["result_accuracy"]),
    op(
        "slice_v1",
        (0, 9, 0),
        None,
        &["start_indices", "limit_indices", "strides"],
    ),
    op("sort_v1", (0, 9, 0), None, &["dimension", "is_stable"]),
    op("sqrt_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("sqrt_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("subtract_v1", (0, 9, 0), None, &[]),
    op("tan_v1", (1, 4, 0), Some((1, 9, 0)), &[]),
    op("tan_v2", (1, 10, 0), None, &["result_accuracy"]),
    op("tanh_v1", (0, 9, 0), Some((1, 9, 0)), &[]),
    op("tanh_v2", (1, 10, 0), None, &["result_accuracy"]),
    op(
        "torch_index_select_v1",
        (0, 9, 0),
        None,
        &["dim", "batch_dims"],
    ),
    op("transpose_v1", (0, 9, 0), None, &["permutation"]),
    op(
        "triangular_solve_v1",
        (0, 9, 0),
        None,
        &["left_side", "lower", "unit_diagonal", "transpose_a"],
    ),
    op("tuple_v1", (0, 9, 0), None, &[]),
    op("unary_einsum_v1", (0, 9, 0), None, &["einsum_config"]),
    op("uniform_dequantize_v1", (0, 9, 0), None, &[]),
    op("uniform_quantize_v1", (0, 9, 0), None, &[]),
    op("while_v1", (0, 9, 0), None, &[]),
    op("xor_v1", (0, 9, 0), None, &[]),
];

/// The VHLO op named `name` (`vhlo.add_v1`).
pub(crate) fn lookup(name: &str) -> Option<&'static VhloOp> {
    let mnemonic = name.strip_prefix("vhlo.")?;
    VHLO_OPS.iter().find(|o| o.mnemonic == mnemonic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_one_op_follow_each_other() {
        for o in VHLO_OPS {
            let n: u32 = o.mnemonic[o.mnemonic.rfind("_v").unwrap() + 2..]
                .parse()
                .unwrap();
            if n > 1 {
                let prev = format!("vhlo.{}_v{}", o.base(), n - 1);
                let p = lookup(&prev).unwrap_or_else(|| panic!("{prev} missing"));
                let end = p.max.unwrap_or_else(|| panic!("{prev} still current"));
                assert!(end < o.min, "{prev} overlaps {}", o.mnemonic);
            }
            if let Some(max) = o.max {
                assert!(o.min <= max, "{}", o.mnemonic);
                let next = format!("vhlo.{}_v{}", o.base(), n + 1);
                assert!(
                    lookup(&next).is_some(),
                    "{} retired without {next}",
                    o.mnemonic
                );
            }
        }
    }

    #[test]
    fn property_order_is_bytewise() {
        let dot = lookup("vhlo.dot_general_v2").unwrap().property_order();
        assert_eq!(dot[0], "accumulation_type");
        assert_eq!(dot[dot.len() - 1], "rhs_precision_type");
        let f = lookup("vhlo.func_v1").unwrap().property_order();
        assert_eq!(
            f,
            [
                "arg_attrs",
                "function_type",
                "res_attrs",
                "sym_name",
                "sym_visibility"
            ]
        );
        let c = lookup("vhlo.compare_v1").unwrap().property_order();
        assert_eq!(c, ["compare_type", "comparison_direction"]);
        assert!(lookup("vhlo.constant_v99").is_none());
        assert_eq!(VHLO_OPS.len(), 145);
    }
}
