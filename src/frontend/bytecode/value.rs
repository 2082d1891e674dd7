//! Decoded attribute and type entries: one tree shape for the builtin and VHLO dialects (and an
//! opaque leaf for everything else), shared through `Rc` because entries reference each other
//! by index and may be referenced many times.

use std::rc::Rc;

use crate::ir::attr::{
    ComparisonDirection, ComparisonType, CustomCallApiVersion, FftType, OutputOperandAlias,
    Precision, ResultAccuracy, ResultAccuracyMode, RngAlgorithm, RngDistribution, Transpose,
};
use crate::ir::{ElementType, Literal, Location};

/// A decoded type.
#[derive(Debug)]
pub(crate) enum BType {
    /// An element type (`i32`, `f32`, `complex<f32>`, `i1`, ...).
    Elem(ElementType),
    /// `index`.
    Index,
    /// `none` (VHLO's "absent" marker).
    None,
    /// A ranked tensor; dynamic sizes are `ir::types::DYNAMIC`.
    Tensor {
        /// Dimension sizes.
        shape: Vec<i64>,
        /// The element type.
        elem: Rc<BType>,
        /// The encoding attribute, if any (`TypeExtensions` for bounded dynamic shapes).
        encoding: Option<Rc<BAttr>>,
    },
    /// An unranked tensor.
    Unranked(Rc<BType>),
    /// A ranked buffer (`memref`).
    Buffer {
        /// Dimension sizes.
        shape: Vec<i64>,
        /// The element type.
        elem: Rc<BType>,
    },
    /// `!stablehlo.token`.
    Token,
    /// `tuple<...>`.
    Tuple(Vec<Rc<BType>>),
    /// `!stablehlo.future<...>`.
    Future(Vec<Rc<BType>>),
    /// A function type.
    Function(Vec<Rc<BType>>, Vec<Rc<BType>>),
    /// A uniform quantized type (per tensor or per axis).
    Quant(Box<Quant>),
    /// Anything else, described for error messages.
    Other(String),
}

/// A uniform quantized element type as VHLO stores it.
#[derive(Debug)]
pub(crate) struct Quant {
    /// Bit 0: signed storage.
    pub flags: u64,
    /// The storage type.
    pub storage: Rc<BType>,
    /// The expressed type.
    pub expressed: Rc<BType>,
    /// Per-axis dimension.
    pub axis: Option<i64>,
    /// Scales.
    pub scales: Vec<f64>,
    /// Zero points.
    pub zero_points: Vec<i64>,
    /// Storage range.
    pub min: i64,
    /// Storage range.
    pub max: i64,
}

/// A decoded attribute.
#[derive(Debug)]
pub(crate) enum BAttr {
    /// An array.
    Array(Vec<Rc<BAttr>>),
    /// A dictionary with string keys.
    Dict(Vec<(String, Rc<BAttr>)>),
    /// A string.
    String(String),
    /// A flat symbol reference.
    Symbol(String),
    /// A type.
    Type(Rc<BType>),
    /// `unit`.
    Unit,
    /// A boolean.
    Bool(bool),
    /// An integer with its type.
    Int(i128, ElementType),
    /// A float with its type.
    Float(f64, ElementType),
    /// `array<T: ...>` of integers or booleans.
    DenseArray(ElementType, Vec<i64>),
    /// Dense elements.
    Dense(Literal),
    /// A location.
    Location(Location),
    /// `comparison_direction`.
    ComparisonDirection(ComparisonDirection),
    /// `comparison_type`.
    ComparisonType(ComparisonType),
    /// `precision`.
    Precision(Precision),
    /// `fft_type`.
    FftType(FftType),
    /// `rng_algorithm`.
    RngAlgorithm(RngAlgorithm),
    /// `rng_distribution`.
    RngDistribution(RngDistribution),
    /// `transpose`.
    Transpose(Transpose),
    /// `custom_call` api version.
    ApiVersion(CustomCallApiVersion),
    /// `result_accuracy` mode.
    ResultAccuracyMode(ResultAccuracyMode),
    /// `result_accuracy`.
    ResultAccuracy(ResultAccuracy),
    /// `output_operand_alias`.
    OutputOperandAlias(OutputOperandAlias),
    /// Bounds of a dynamic tensor type (a tensor encoding).
    TypeExtensions(Vec<i64>),
    /// An attribute of another dialect (or one with no counterpart here), as text.
    Opaque(String),
}

impl BAttr {
    /// The string, for string attributes.
    pub fn as_string(&self) -> Option<&str> {
        match self {
            BAttr::String(s) => Some(s),
            _ => None,
        }
    }
}
