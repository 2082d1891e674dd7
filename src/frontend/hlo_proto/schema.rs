//! The wire schema of a serialized `HloModuleProto` (and of `HloModuleProtoWithConfig`), declared
//! by hand for `prost`: only the fields the importer reads, with the field numbers and wire types
//! of XLA's `xla/service/hlo.proto` and `xla/xla_data.proto`. Fields not declared here are
//! skipped by the decoder. Enums are read as plain `int32` and interpreted by the importer, so an
//! unknown enum value is an error message there rather than a decode failure.

#![allow(missing_docs)]

/// `xla.HloModuleProtoWithConfig`: a module and its compile configuration (ignored).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloModuleProtoWithConfig {
    #[prost(message, optional, tag = "1")]
    pub hlo_module: Option<HloModuleProto>,
}

/// `xla.HloModuleProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloModuleProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub entry_computation_name: String,
    #[prost(message, repeated, tag = "3")]
    pub computations: Vec<HloComputationProto>,
    #[prost(message, optional, tag = "4")]
    pub host_program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "6")]
    pub entry_computation_id: i64,
}

/// `xla.HloComputationProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloComputationProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub instructions: Vec<HloInstructionProto>,
    #[prost(message, optional, tag = "4")]
    pub program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "5")]
    pub id: i64,
    #[prost(int64, tag = "6")]
    pub root_id: i64,
}

/// `xla.HloInstructionProto.SliceDimensions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SliceDimensions {
    #[prost(int64, tag = "1")]
    pub start: i64,
    #[prost(int64, tag = "2")]
    pub limit: i64,
    #[prost(int64, tag = "3")]
    pub stride: i64,
}

/// `xla.HloInstructionProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HloInstructionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub opcode: String,
    #[prost(message, optional, tag = "3")]
    pub shape: Option<ShapeProto>,
    #[prost(message, optional, tag = "7")]
    pub metadata: Option<OpMetadata>,
    #[prost(message, optional, tag = "8")]
    pub literal: Option<LiteralProto>,
    #[prost(int64, tag = "9")]
    pub parameter_number: i64,
    #[prost(int64, tag = "13")]
    pub tuple_index: i64,
    #[prost(int64, repeated, tag = "14")]
    pub dimensions: Vec<i64>,
    #[prost(message, optional, tag = "15")]
    pub window: Option<Window>,
    #[prost(message, optional, tag = "16")]
    pub convolution_dimension_numbers: Option<ConvolutionDimensionNumbers>,
    #[prost(message, repeated, tag = "17")]
    pub slice_dimensions: Vec<SliceDimensions>,
    #[prost(int32, tag = "18")]
    pub exponent_bits: i32,
    #[prost(int32, tag = "19")]
    pub mantissa_bits: i32,
    #[prost(int64, repeated, tag = "20")]
    pub dynamic_slice_sizes: Vec<i64>,
    #[prost(message, optional, tag = "21")]
    pub padding_config: Option<PaddingConfig>,
    /// `xla.RandomDistribution`.
    #[prost(int32, tag = "23")]
    pub distribution: i32,
    #[prost(float, tag = "24")]
    pub epsilon: f32,
    #[prost(int64, tag = "25")]
    pub feature_index: i64,
    #[prost(string, tag = "28")]
    pub custom_call_target: String,
    #[prost(message, optional, tag = "30")]
    pub dot_dimension_numbers: Option<DotDimensionNumbers>,
    /// `xla.FftType`.
    #[prost(int32, tag = "31")]
    pub fft_type: i32,
    #[prost(int64, repeated, tag = "32")]
    pub fft_length: Vec<i64>,
    #[prost(message, optional, tag = "33")]
    pub gather_dimension_numbers: Option<GatherDimensionNumbers>,
    #[prost(int64, repeated, tag = "34")]
    pub gather_slice_sizes: Vec<i64>,
    #[prost(int64, tag = "35")]
    pub id: i64,
    #[prost(int64, repeated, tag = "36")]
    pub operand_ids: Vec<i64>,
    #[prost(int64, repeated, tag = "38")]
    pub called_computation_ids: Vec<i64>,
    #[prost(bytes = "vec", tag = "43")]
    pub backend_config: Vec<u8>,
    #[prost(message, optional, tag = "48")]
    pub scatter_dimension_numbers: Option<ScatterDimensionNumbers>,
    #[prost(int64, tag = "50")]
    pub feature_group_count: i64,
    #[prost(message, optional, tag = "51")]
    pub precision_config: Option<PrecisionConfig>,
    #[prost(int64, tag = "58")]
    pub batch_group_count: i64,
    #[prost(message, optional, tag = "59")]
    pub triangular_solve_options: Option<TriangularSolveOptions>,
    #[prost(bool, tag = "60")]
    pub is_stable: bool,
    #[prost(message, optional, tag = "62")]
    pub cholesky_options: Option<CholeskyOptions>,
    #[prost(string, tag = "63")]
    pub comparison_direction: String,
    #[prost(bool, tag = "65")]
    pub custom_call_has_side_effect: bool,
    #[prost(bool, tag = "67")]
    pub indices_are_sorted: bool,
    #[prost(bool, tag = "69")]
    pub unique_indices: bool,
    /// `xla.RandomAlgorithm`.
    #[prost(int32, tag = "70")]
    pub rng_algorithm: i32,
    #[prost(string, tag = "72")]
    pub comparison_type: String,
    /// The comparison's order, `PARTIAL` or `TOTAL`: newer XLA versions (jaxlib 0.12's) write
    /// this field instead of `comparison_type` (seen on the wire; `compare ..., order=TOTAL` in
    /// HLO text).
    #[prost(string, tag = "102")]
    pub comparison_order: String,
    /// `xla.CustomCallApiVersion`.
    #[prost(int32, tag = "77")]
    pub custom_call_api_version: i32,
    #[prost(int64, tag = "81")]
    pub k: i64,
    #[prost(bool, tag = "85")]
    pub largest: bool,
}

/// `xla.OpMetadata` (the parts that make a location).
#[derive(Clone, PartialEq, prost::Message)]
pub struct OpMetadata {
    #[prost(string, tag = "1")]
    pub op_type: String,
    #[prost(string, tag = "2")]
    pub op_name: String,
    #[prost(string, tag = "3")]
    pub source_file: String,
    #[prost(int32, tag = "4")]
    pub source_line: i32,
    #[prost(int32, tag = "18")]
    pub source_column: i32,
}

/// `xla.LayoutProto` (dense layouts only: tiling and memory spaces are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayoutProto {
    #[prost(int64, repeated, tag = "1")]
    pub minor_to_major: Vec<i64>,
}

/// `xla.ShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShapeProto {
    /// `xla.PrimitiveType`.
    #[prost(int32, tag = "2")]
    pub element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    pub dimensions: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    pub tuple_shapes: Vec<ShapeProto>,
    #[prost(message, optional, tag = "5")]
    pub layout: Option<LayoutProto>,
    #[prost(bool, repeated, tag = "6")]
    pub is_dynamic_dimension: Vec<bool>,
}

/// `xla.ProgramShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProgramShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub parameters: Vec<ShapeProto>,
    #[prost(message, optional, tag = "2")]
    pub result: Option<ShapeProto>,
}

/// `xla.LiteralProto`: one field per element type; 16-bit and narrower types as packed
/// little-endian bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteralProto {
    #[prost(message, optional, tag = "1")]
    pub shape: Option<ShapeProto>,
    #[prost(bool, repeated, tag = "2")]
    pub preds: Vec<bool>,
    #[prost(bytes = "vec", tag = "3")]
    pub u8s: Vec<u8>,
    #[prost(int32, repeated, tag = "4")]
    pub s32s: Vec<i32>,
    #[prost(int64, repeated, tag = "5")]
    pub s64s: Vec<i64>,
    #[prost(uint32, repeated, tag = "6")]
    pub u32s: Vec<u32>,
    #[prost(uint64, repeated, tag = "7")]
    pub u64s: Vec<u64>,
    #[prost(float, repeated, tag = "8")]
    pub f32s: Vec<f32>,
    #[prost(double, repeated, tag = "9")]
    pub f64s: Vec<f64>,
    #[prost(message, repeated, tag = "10")]
    pub tuple_literals: Vec<LiteralProto>,
    #[prost(bytes = "vec", tag = "11")]
    pub f16s: Vec<u8>,
    #[prost(float, repeated, tag = "12")]
    pub c64s: Vec<f32>,
    #[prost(bytes = "vec", tag = "13")]
    pub bf16s: Vec<u8>,
    #[prost(bytes = "vec", tag = "15")]
    pub s8s: Vec<u8>,
    #[prost(bytes = "vec", tag = "16")]
    pub u16s: Vec<u8>,
    #[prost(bytes = "vec", tag = "17")]
    pub s16s: Vec<u8>,
    #[prost(double, repeated, tag = "18")]
    pub c128s: Vec<f64>,
    #[prost(bytes = "vec", tag = "19")]
    pub f8e5m2s: Vec<u8>,
    #[prost(bytes = "vec", tag = "20")]
    pub f8e4m3fns: Vec<u8>,
    #[prost(bytes = "vec", tag = "21")]
    pub s4s: Vec<u8>,
    #[prost(bytes = "vec", tag = "22")]
    pub u4s: Vec<u8>,
    #[prost(bytes = "vec", tag = "23")]
    pub f8e4m3b11fnuzs: Vec<u8>,
    #[prost(bytes = "vec", tag = "24")]
    pub f8e5m2fnuzs: Vec<u8>,
    #[prost(bytes = "vec", tag = "25")]
    pub f8e4m3fnuzs: Vec<u8>,
    #[prost(bytes = "vec", tag = "26")]
    pub s2s: Vec<u8>,
    #[prost(bytes = "vec", tag = "27")]
    pub u2s: Vec<u8>,
    #[prost(bytes = "vec", tag = "28")]
    pub f8e4m3s: Vec<u8>,
    #[prost(bytes = "vec", tag = "29")]
    pub f8e3m4s: Vec<u8>,
    #[prost(bytes = "vec", tag = "32")]
    pub f4e2m1fns: Vec<u8>,
    #[prost(bytes = "vec", tag = "33")]
    pub f8e8m0fnus: Vec<u8>,
}

/// `xla.WindowDimension`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WindowDimension {
    #[prost(int64, tag = "1")]
    pub size: i64,
    #[prost(int64, tag = "2")]
    pub stride: i64,
    #[prost(int64, tag = "3")]
    pub padding_low: i64,
    #[prost(int64, tag = "4")]
    pub padding_high: i64,
    #[prost(int64, tag = "5")]
    pub window_dilation: i64,
    #[prost(int64, tag = "6")]
    pub base_dilation: i64,
    #[prost(bool, tag = "7")]
    pub window_reversal: bool,
}

/// `xla.Window`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Window {
    #[prost(message, repeated, tag = "1")]
    pub dimensions: Vec<WindowDimension>,
}

/// `xla.GatherDimensionNumbers`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GatherDimensionNumbers {
    #[prost(int64, repeated, tag = "1")]
    pub offset_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub collapsed_slice_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub start_index_map: Vec<i64>,
    #[prost(int64, tag = "4")]
    pub index_vector_dim: i64,
    #[prost(int64, repeated, tag = "5")]
    pub operand_batching_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "6")]
    pub start_indices_batching_dims: Vec<i64>,
}

/// `xla.ScatterDimensionNumbers`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScatterDimensionNumbers {
    #[prost(int64, repeated, tag = "1")]
    pub update_window_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub inserted_window_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub scatter_dims_to_operand_dims: Vec<i64>,
    #[prost(int64, tag = "4")]
    pub index_vector_dim: i64,
    #[prost(int64, repeated, tag = "5")]
    pub input_batching_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "6")]
    pub scatter_indices_batching_dims: Vec<i64>,
}

/// `xla.ConvolutionDimensionNumbers`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConvolutionDimensionNumbers {
    #[prost(int64, tag = "3")]
    pub kernel_input_feature_dimension: i64,
    #[prost(int64, tag = "4")]
    pub kernel_output_feature_dimension: i64,
    #[prost(int64, repeated, tag = "6")]
    pub kernel_spatial_dimensions: Vec<i64>,
    #[prost(int64, tag = "7")]
    pub input_batch_dimension: i64,
    #[prost(int64, tag = "8")]
    pub input_feature_dimension: i64,
    #[prost(int64, tag = "9")]
    pub output_batch_dimension: i64,
    #[prost(int64, tag = "10")]
    pub output_feature_dimension: i64,
    #[prost(int64, repeated, tag = "11")]
    pub input_spatial_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "12")]
    pub output_spatial_dimensions: Vec<i64>,
}

/// `xla.DotDimensionNumbers`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DotDimensionNumbers {
    #[prost(int64, repeated, tag = "1")]
    pub lhs_contracting_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub rhs_contracting_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub lhs_batch_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "4")]
    pub rhs_batch_dimensions: Vec<i64>,
}

/// `xla.PaddingConfig.PaddingConfigDimension`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PaddingConfigDimension {
    #[prost(int64, tag = "1")]
    pub edge_padding_low: i64,
    #[prost(int64, tag = "2")]
    pub edge_padding_high: i64,
    #[prost(int64, tag = "3")]
    pub interior_padding: i64,
}

/// `xla.PaddingConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PaddingConfig {
    #[prost(message, repeated, tag = "1")]
    pub dimensions: Vec<PaddingConfigDimension>,
}

/// `xla.PrecisionConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PrecisionConfig {
    /// `xla.PrecisionConfig.Precision` per operand.
    #[prost(int32, repeated, tag = "1")]
    pub operand_precision: Vec<i32>,
    /// `xla.PrecisionConfig.Algorithm`.
    #[prost(int32, tag = "2")]
    pub algorithm: i32,
}

/// `xla.TriangularSolveOptions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TriangularSolveOptions {
    #[prost(bool, tag = "1")]
    pub left_side: bool,
    #[prost(bool, tag = "2")]
    pub lower: bool,
    #[prost(bool, tag = "3")]
    pub unit_diagonal: bool,
    /// `xla.TriangularSolveOptions.Transpose`.
    #[prost(int32, tag = "4")]
    pub transpose_a: i32,
}

/// `xla.CholeskyOptions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CholeskyOptions {
    #[prost(bool, tag = "1")]
    pub lower: bool,
}
