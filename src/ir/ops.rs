//! The op enum: every StableHLO op (plus the CHLO, `func` and `check` ops programs carry) with
//! typed attributes. Operands, results and regions live on `Operation`; this enum holds what
//! distinguishes one op from another.

use super::attr::{
    Attr, ComparisonDirection, ComparisonType, ConvDimensionNumbers, CustomCallApiVersion,
    DotAlgorithm, DotDimensionNumbers, FftType, GatherDimensionNumbers, OutputOperandAlias,
    Precision, RngAlgorithm, RngDistribution, ScatterDimensionNumbers, Transpose,
};
use super::literal::Literal;

/// Declares an elementwise op family with the op names that spell each member.
macro_rules! elementwise_ops {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum $name { $($variant),* }

        impl $name {
            /// Every member of the family.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The full op name (`stablehlo.add`, `chlo.lgamma`, ...).
            pub fn op_name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
            /// Parses a full op name.
            pub fn from_op_name(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)* _ => None }
            }
        }
    };
}

elementwise_ops!(
    /// Elementwise ops of one operand whose result has the operand's shape.
    UnaryOp {
        Abs = "stablehlo.abs",
        Cbrt = "stablehlo.cbrt",
        Ceil = "stablehlo.ceil",
        CountLeadingZeros = "stablehlo.count_leading_zeros",
        Cosine = "stablehlo.cosine",
        Exponential = "stablehlo.exponential",
        ExponentialMinusOne = "stablehlo.exponential_minus_one",
        Floor = "stablehlo.floor",
        Imag = "stablehlo.imag",
        IsFinite = "stablehlo.is_finite",
        Log = "stablehlo.log",
        LogPlusOne = "stablehlo.log_plus_one",
        Logistic = "stablehlo.logistic",
        Not = "stablehlo.not",
        Negate = "stablehlo.negate",
        Popcnt = "stablehlo.popcnt",
        Real = "stablehlo.real",
        RoundNearestAfz = "stablehlo.round_nearest_afz",
        RoundNearestEven = "stablehlo.round_nearest_even",
        Rsqrt = "stablehlo.rsqrt",
        Sign = "stablehlo.sign",
        Sine = "stablehlo.sine",
        Sqrt = "stablehlo.sqrt",
        Tan = "stablehlo.tan",
        Tanh = "stablehlo.tanh",
        Acos = "chlo.acos",
        Acosh = "chlo.acosh",
        Asin = "chlo.asin",
        Asinh = "chlo.asinh",
        Atan = "chlo.atan",
        Atanh = "chlo.atanh",
        BesselI1e = "chlo.bessel_i1e",
        Conj = "chlo.conj",
        Cosh = "chlo.cosh",
        Digamma = "chlo.digamma",
        Erf = "chlo.erf",
        ErfInv = "chlo.erf_inv",
        Erfc = "chlo.erfc",
        IsInf = "chlo.is_inf",
        IsNegInf = "chlo.is_neg_inf",
        IsPosInf = "chlo.is_pos_inf",
        Lgamma = "chlo.lgamma",
        Sinh = "chlo.sinh",
        Square = "chlo.square",
    }
);

impl UnaryOp {
    /// Ops whose result element type differs from the operand's: `i1` for the predicates,
    /// the part type for `real`/`imag` of complex operands.
    pub fn result_is_pred(self) -> bool {
        matches!(
            self,
            UnaryOp::IsFinite | UnaryOp::IsInf | UnaryOp::IsNegInf | UnaryOp::IsPosInf
        )
    }
}

elementwise_ops!(
    /// Elementwise ops of two operands of one shape.
    BinaryOp {
        Add = "stablehlo.add",
        Atan2 = "stablehlo.atan2",
        Complex = "stablehlo.complex",
        Divide = "stablehlo.divide",
        Maximum = "stablehlo.maximum",
        Minimum = "stablehlo.minimum",
        Multiply = "stablehlo.multiply",
        Power = "stablehlo.power",
        Remainder = "stablehlo.remainder",
        ShiftLeft = "stablehlo.shift_left",
        ShiftRightArithmetic = "stablehlo.shift_right_arithmetic",
        ShiftRightLogical = "stablehlo.shift_right_logical",
        Subtract = "stablehlo.subtract",
        And = "stablehlo.and",
        Or = "stablehlo.or",
        Xor = "stablehlo.xor",
        NextAfter = "chlo.next_after",
        Polygamma = "chlo.polygamma",
        Zeta = "chlo.zeta",
        Mulhi = "chlo.mulhi",
    }
);

/// The `check` dialect's assertions (interpreter tests) and the `check.*` custom calls of the
/// exported JAX tests, in one form.
#[derive(Clone, Debug, PartialEq)]
pub enum CheckOp {
    /// Operands: actual, expected. Element-wise `==` (IEEE for floats).
    ExpectEq,
    /// Operand: actual.
    ExpectEqConst(Literal),
    /// Operands: actual, expected; absolute tolerance.
    ExpectAlmostEq {
        /// Largest allowed |actual - expected|.
        tolerance: f64,
    },
    /// Operand: actual.
    ExpectAlmostEqConst {
        /// The expected values.
        expected: Literal,
        /// Largest allowed |actual - expected|.
        tolerance: f64,
    },
    /// Operands: actual, expected; distance in units in the last place.
    ExpectClose {
        /// Largest allowed ULP distance.
        max_ulp_difference: u64,
        /// Smallest required ULP distance (normally 0).
        min_ulp_difference: u64,
    },
    /// Operand: actual; compared with what `interpreter.probe` recorded under `probe_id`.
    ExpectSerializedEq {
        /// The probe's name.
        probe_id: String,
        /// Which recording of the probe (in loops).
        iteration: u32,
    },
}

/// `convolution`'s attributes.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Convolution {
    pub window_strides: Vec<i64>,
    pub padding: Vec<(i64, i64)>,
    pub lhs_dilation: Vec<i64>,
    pub rhs_dilation: Vec<i64>,
    pub window_reversal: Vec<bool>,
    pub dimension_numbers: ConvDimensionNumbers,
    pub feature_group_count: i64,
    pub batch_group_count: i64,
    pub precision_config: Vec<Precision>,
}

/// `custom_call`'s attributes.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct CustomCall {
    pub call_target_name: String,
    pub has_side_effect: bool,
    /// A string, or a dictionary for the typed-FFI API.
    pub backend_config: Option<Attr>,
    pub api_version: CustomCallApiVersion,
    pub called_computations: Vec<String>,
    pub operand_layouts: Option<Vec<Vec<i64>>>,
    pub result_layouts: Option<Vec<Vec<i64>>>,
    pub output_operand_aliases: Vec<OutputOperandAlias>,
}

/// What an operation does. Named after the StableHLO spec; attributes typed.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// An elementwise op of one operand.
    Unary(UnaryOp),
    /// An elementwise op of two operands.
    Binary(BinaryOp),
    /// `compare`.
    Compare {
        /// The relation tested.
        direction: ComparisonDirection,
        /// How floats/integers are ordered; derived from the element type when absent.
        compare_type: Option<ComparisonType>,
    },
    /// `select(pred, on_true, on_false)`.
    Select,
    /// `clamp(min, operand, max)`.
    Clamp,
    /// `convert`: element type conversion.
    Convert,
    /// `bitcast_convert`: reinterpretation of bits.
    BitcastConvert,
    /// `reduce_precision`.
    ReducePrecision {
        /// Exponent bits kept.
        exponent_bits: i64,
        /// Mantissa bits kept.
        mantissa_bits: i64,
    },
    /// `constant`.
    Constant(Literal),
    /// `iota`.
    Iota {
        /// The dimension that counts up.
        dimension: i64,
    },
    /// `broadcast_in_dim` (also the reading of the legacy `broadcast`).
    BroadcastInDim {
        /// Result dimension of each operand dimension.
        dimensions: Vec<i64>,
    },
    /// `reshape`.
    Reshape,
    /// `transpose`.
    Transpose {
        /// Operand dimension of each result dimension.
        permutation: Vec<i64>,
    },
    /// `slice`.
    Slice {
        /// First index per dimension.
        start: Vec<i64>,
        /// One past the last index per dimension.
        limit: Vec<i64>,
        /// Step per dimension.
        strides: Vec<i64>,
    },
    /// `dynamic_slice(operand, start_indices...)`.
    DynamicSlice {
        /// Result shape.
        slice_sizes: Vec<i64>,
    },
    /// `dynamic_update_slice(operand, update, start_indices...)`.
    DynamicUpdateSlice,
    /// `concatenate`.
    Concatenate {
        /// The dimension joined along.
        dimension: i64,
    },
    /// `pad(operand, padding_value)`.
    Pad {
        /// Padding before each dimension (may be negative).
        low: Vec<i64>,
        /// Padding after each dimension (may be negative).
        high: Vec<i64>,
        /// Padding between elements.
        interior: Vec<i64>,
    },
    /// `reverse`.
    Reverse {
        /// Dimensions reversed.
        dimensions: Vec<i64>,
    },
    /// `reduce(inputs..., init_values...)` with a body region.
    Reduce {
        /// Dimensions reduced away.
        dimensions: Vec<i64>,
    },
    /// `reduce_window(inputs..., init_values...)` with a body region; defaults filled in.
    ReduceWindow {
        /// Window size per dimension.
        window_dimensions: Vec<i64>,
        /// Window step per dimension.
        window_strides: Vec<i64>,
        /// Dilation of the input.
        base_dilations: Vec<i64>,
        /// Dilation of the window.
        window_dilations: Vec<i64>,
        /// (low, high) padding per dimension.
        padding: Vec<(i64, i64)>,
    },
    /// `select_and_scatter(operand, source, init_value)` with select and scatter regions.
    SelectAndScatter {
        /// Window size per dimension.
        window_dimensions: Vec<i64>,
        /// Window step per dimension.
        window_strides: Vec<i64>,
        /// (low, high) padding per dimension.
        padding: Vec<(i64, i64)>,
    },
    /// `map(inputs...)` with a computation region.
    Map {
        /// Must be all dimensions, in order.
        dimensions: Vec<i64>,
    },
    /// `sort(inputs...)` with a comparator region.
    Sort {
        /// The dimension sorted along (non-negative after building).
        dimension: i64,
        /// Whether equal elements keep their order.
        is_stable: bool,
    },
    /// `dot_general` (also the reading of the legacy `dot`).
    DotGeneral {
        /// Batch and contracting dimensions.
        dimension_numbers: DotDimensionNumbers,
        /// Per-operand precision hints.
        precision_config: Vec<Precision>,
        /// Requested algorithm, if any.
        algorithm: Option<DotAlgorithm>,
    },
    /// `convolution(lhs, rhs)`.
    Convolution(Box<Convolution>),
    /// `gather(operand, start_indices)`.
    Gather {
        /// Dimension numbers.
        dimension_numbers: GatherDimensionNumbers,
        /// Slice size per operand dimension.
        slice_sizes: Vec<i64>,
        /// Hint.
        indices_are_sorted: bool,
    },
    /// `scatter(inputs..., scatter_indices, updates...)` with an update region.
    Scatter {
        /// Dimension numbers.
        dimension_numbers: ScatterDimensionNumbers,
        /// Hint.
        indices_are_sorted: bool,
        /// Hint.
        unique_indices: bool,
    },
    /// `fft`.
    Fft {
        /// Transform kind.
        fft_type: FftType,
        /// Transform lengths (innermost dimensions).
        fft_length: Vec<i64>,
    },
    /// `cholesky(a)`.
    Cholesky {
        /// Whether the lower triangle is computed.
        lower: bool,
    },
    /// `triangular_solve(a, b)`.
    TriangularSolve {
        /// Solve op(a) x = b (true) or x op(a) = b (false).
        left_side: bool,
        /// Whether a is lower triangular.
        lower: bool,
        /// Whether a's diagonal is taken as ones.
        unit_diagonal: bool,
        /// op(a).
        transpose_a: Transpose,
    },
    /// `batch_norm_inference(operand, scale, offset, mean, variance)`.
    BatchNormInference {
        /// Added to the variance.
        epsilon: f64,
        /// The feature dimension.
        feature_index: i64,
    },
    /// `batch_norm_training(operand, scale, offset)`.
    BatchNormTraining {
        /// Added to the variance.
        epsilon: f64,
        /// The feature dimension.
        feature_index: i64,
    },
    /// `batch_norm_grad(operand, scale, mean, variance, grad_output)`.
    BatchNormGrad {
        /// Added to the variance.
        epsilon: f64,
        /// The feature dimension.
        feature_index: i64,
    },
    /// `rng(a, b, shape)`.
    Rng {
        /// Uniform or normal.
        distribution: RngDistribution,
    },
    /// `rng_bit_generator(initial_state)`.
    RngBitGenerator {
        /// The generator.
        algorithm: RngAlgorithm,
    },
    /// `get_dimension_size`.
    GetDimensionSize {
        /// The dimension asked about.
        dimension: i64,
    },
    /// `while(operands...)` with cond and body regions.
    While,
    /// `if(pred)` with true and false regions.
    If,
    /// `case(index)` with one region per branch.
    Case,
    /// `func.call`.
    Call {
        /// The called function's name.
        callee: String,
    },
    /// `func.return` / `stablehlo.return`: the terminator of a function or region.
    Return,
    /// `tuple`.
    Tuple,
    /// `get_tuple_element`.
    GetTupleElement {
        /// Element index.
        index: i64,
    },
    /// `optimization_barrier`: identity that blocks reordering.
    OptimizationBarrier,
    /// `custom_call`.
    CustomCall(Box<CustomCall>),
    /// `composite`: a named op with a decomposition function.
    Composite {
        /// The composite's name.
        name: String,
        /// Its attributes.
        attributes: Vec<(String, Attr)>,
        /// The function that implements it.
        decomposition: String,
        /// Its version.
        version: i64,
    },
    /// `after_all(tokens...)`.
    AfterAll,
    /// `create_token`.
    CreateToken,
    /// `replica_id`.
    ReplicaId,
    /// `partition_id`.
    PartitionId,
    /// `chlo.top_k(operand)`: results values and indices.
    TopK {
        /// How many.
        k: i64,
        /// Largest (true) or smallest.
        largest: bool,
    },
    /// A `check` dialect assertion.
    Check(CheckOp),
    /// `interpreter.probe`: identity that records its operand under `probe_id`.
    Probe {
        /// The recording's name.
        probe_id: String,
    },
    /// An op the compiler has no semantics for (collectives, send/recv, infeed/outfeed, async,
    /// dynamic-shape ops, ops of other dialects): kept whole so programs read and print back,
    /// and rejected by the compiler with UNIMPLEMENTED naming it.
    Other {
        /// The full op name.
        name: String,
        /// Its attributes as read.
        attrs: Vec<(String, Attr)>,
    },
}

impl Op {
    /// Elementwise ops: each result element from the element of each operand at the same index
    /// (or from a 0-d operand). Fusion fuses them into any kernel; unrolling copies them.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_)
                | Op::Binary(_)
                | Op::Compare { .. }
                | Op::Select
                | Op::Clamp
                | Op::Convert
                | Op::ReducePrecision { .. }
        )
    }
}
