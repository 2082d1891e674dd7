//! Attribute values: the typed enums and structs that StableHLO ops carry, and `Attr`, the
//! generic attribute tree the frontends build before `ir::generic` turns it into typed ops.

use std::fmt;

use super::literal::Literal;
use super::types::{ElementType, Type};
use crate::error::{Error, Result};

/// Declares a StableHLO enum attribute with its textual case names.
macro_rules! attr_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum $name { $($variant),* }

        impl $name {
            /// Every case, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The spelling used in StableHLO text (`GT`, `FLOAT`, ...).
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
            /// Parses the StableHLO spelling.
            pub fn from_name(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)* _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

attr_enum!(
    /// `compare`'s `comparison_direction`.
    ComparisonDirection { Eq = "EQ", Ne = "NE", Ge = "GE", Gt = "GT", Le = "LE", Lt = "LT" }
);
attr_enum!(
    /// `compare`'s optional `compare_type`.
    ComparisonType {
        NoType = "NOTYPE",
        Float = "FLOAT",
        TotalOrder = "TOTALORDER",
        Signed = "SIGNED",
        Unsigned = "UNSIGNED",
    }
);
attr_enum!(
    /// Entries of `precision_config`.
    Precision { Default = "DEFAULT", High = "HIGH", Highest = "HIGHEST" }
);
attr_enum!(
    /// `fft`'s `fft_type`.
    FftType { Fft = "FFT", Ifft = "IFFT", Rfft = "RFFT", Irfft = "IRFFT" }
);
attr_enum!(
    /// `rng`'s `rng_distribution`.
    RngDistribution { Uniform = "UNIFORM", Normal = "NORMAL" }
);
attr_enum!(
    /// `rng_bit_generator`'s `rng_algorithm`.
    RngAlgorithm { Default = "DEFAULT", ThreeFry = "THREE_FRY", Philox = "PHILOX" }
);
attr_enum!(
    /// `triangular_solve`'s `transpose_a`.
    Transpose {
        TransposeInvalid = "TRANSPOSE_INVALID",
        NoTranspose = "NO_TRANSPOSE",
        Transpose = "TRANSPOSE",
        Adjoint = "ADJOINT",
    }
);
attr_enum!(
    /// The mode of a `result_accuracy` attribute.
    ResultAccuracyMode { Default = "DEFAULT", Highest = "HIGHEST", Tolerance = "TOLERANCE" }
);
attr_enum!(
    /// `custom_call`'s `api_version`.
    CustomCallApiVersion {
        Unspecified = "API_VERSION_UNSPECIFIED",
        Original = "API_VERSION_ORIGINAL",
        StatusReturning = "API_VERSION_STATUS_RETURNING",
        StatusReturningUnified = "API_VERSION_STATUS_RETURNING_UNIFIED",
        TypedFfi = "API_VERSION_TYPED_FFI",
    }
);

impl CustomCallApiVersion {
    /// The integer code used in the generic form (`api_version = 1 : i32`).
    pub fn code(self) -> i64 {
        Self::ALL.iter().position(|&v| v == self).unwrap_or(0) as i64
    }
    /// From the integer code.
    pub fn from_code(code: i64) -> Option<Self> {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }
}

/// `#stablehlo.dot<...>`: which dimensions of `dot_general` are batch and contracting ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DotDimensionNumbers {
    pub lhs_batching_dimensions: Vec<i64>,
    pub rhs_batching_dimensions: Vec<i64>,
    pub lhs_contracting_dimensions: Vec<i64>,
    pub rhs_contracting_dimensions: Vec<i64>,
}

/// `#stablehlo.dot_algorithm<...>`: the requested precision recipe of a `dot_general`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DotAlgorithm {
    pub lhs_precision_type: ElementType,
    pub rhs_precision_type: ElementType,
    pub accumulation_type: ElementType,
    pub lhs_component_count: i64,
    pub rhs_component_count: i64,
    pub num_primitive_operations: i64,
    pub allow_imprecise_accumulation: bool,
}

/// `#stablehlo.gather<...>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct GatherDimensionNumbers {
    pub offset_dims: Vec<i64>,
    pub collapsed_slice_dims: Vec<i64>,
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
    pub start_index_map: Vec<i64>,
    pub index_vector_dim: i64,
}

/// `#stablehlo.scatter<...>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ScatterDimensionNumbers {
    pub update_window_dims: Vec<i64>,
    pub inserted_window_dims: Vec<i64>,
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
    pub scatter_dims_to_operand_dims: Vec<i64>,
    pub index_vector_dim: i64,
}

/// `#stablehlo.conv<...>` (printed as `[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ConvDimensionNumbers {
    pub input_batch_dimension: i64,
    pub input_feature_dimension: i64,
    pub input_spatial_dimensions: Vec<i64>,
    pub kernel_input_feature_dimension: i64,
    pub kernel_output_feature_dimension: i64,
    pub kernel_spatial_dimensions: Vec<i64>,
    pub output_batch_dimension: i64,
    pub output_feature_dimension: i64,
    pub output_spatial_dimensions: Vec<i64>,
}

/// `#stablehlo.result_accuracy<...>` on transcendental ops.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct ResultAccuracy {
    pub atol: f64,
    pub rtol: f64,
    pub ulps: i64,
    pub mode: ResultAccuracyMode,
}

/// `#stablehlo.channel_handle<handle = H, type = T>`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ChannelHandle {
    pub handle: i64,
    pub channel_type: i64,
}

/// `#stablehlo.output_operand_alias<...>` of a `custom_call`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct OutputOperandAlias {
    pub output_tuple_indices: Vec<i64>,
    pub operand_index: i64,
    pub operand_tuple_indices: Vec<i64>,
}

/// A generic attribute value as the frontends read it, before it becomes a typed op field.
/// Structured StableHLO attributes are already typed here; attributes of other dialects that
/// nothing reads are kept as `Opaque` so they can be skipped safely.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// `unit` (presence only).
    Unit,
    /// `true` / `false`.
    Bool(bool),
    /// An integer with its type (`3 : i64`; `index` is read as `i64`).
    Int(i128, ElementType),
    /// A float with its type (`1.0 : f32`).
    Float(f64, ElementType),
    /// A string.
    String(String),
    /// A symbol reference `@name`.
    Symbol(String),
    /// `[a, b, ...]`.
    Array(Vec<Attr>),
    /// `array<i64: 1, 2>` (booleans as 0/1 with `ElementType::Pred`).
    DenseArray(ElementType, Vec<i64>),
    /// `dense<...> : tensor<...>` (and other elements attributes).
    Dense(Literal),
    /// `{name = value, ...}`.
    Dict(Vec<(String, Attr)>),
    /// A type used as an attribute.
    Type(Type),
    /// `#stablehlo<comparison_direction GT>`.
    ComparisonDirection(ComparisonDirection),
    /// `#stablehlo<comparison_type FLOAT>`.
    ComparisonType(ComparisonType),
    /// `#stablehlo<precision HIGH>`.
    Precision(Precision),
    /// `#stablehlo<fft_type FFT>`.
    FftType(FftType),
    /// `#stablehlo<rng_distribution UNIFORM>`.
    RngDistribution(RngDistribution),
    /// `#stablehlo<rng_algorithm DEFAULT>`.
    RngAlgorithm(RngAlgorithm),
    /// `#stablehlo<transpose NO_TRANSPOSE>`.
    Transpose(Transpose),
    /// `#stablehlo.dot<...>`.
    DotDimensionNumbers(DotDimensionNumbers),
    /// `#stablehlo.dot_algorithm<...>`.
    DotAlgorithm(DotAlgorithm),
    /// `#stablehlo.gather<...>`.
    GatherDimensionNumbers(GatherDimensionNumbers),
    /// `#stablehlo.scatter<...>`.
    ScatterDimensionNumbers(ScatterDimensionNumbers),
    /// `#stablehlo.conv<...>`.
    ConvDimensionNumbers(ConvDimensionNumbers),
    /// `#stablehlo.result_accuracy<...>`.
    ResultAccuracy(ResultAccuracy),
    /// `#stablehlo.channel_handle<...>`.
    ChannelHandle(ChannelHandle),
    /// `#stablehlo.output_operand_alias<...>`.
    OutputOperandAlias(OutputOperandAlias),
    /// An attribute of another dialect (`#sdy.sharding<...>`, ...), kept as its text.
    Opaque(String),
}

impl Attr {
    /// A short description of the attribute's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Unit => "unit",
            Attr::Bool(_) => "bool",
            Attr::Int(..) => "integer",
            Attr::Float(..) => "float",
            Attr::String(_) => "string",
            Attr::Symbol(_) => "symbol",
            Attr::Array(_) => "array",
            Attr::DenseArray(..) => "dense array",
            Attr::Dense(_) => "dense elements",
            Attr::Dict(_) => "dictionary",
            Attr::Type(_) => "type",
            Attr::ComparisonDirection(_) => "comparison_direction",
            Attr::ComparisonType(_) => "comparison_type",
            Attr::Precision(_) => "precision",
            Attr::FftType(_) => "fft_type",
            Attr::RngDistribution(_) => "rng_distribution",
            Attr::RngAlgorithm(_) => "rng_algorithm",
            Attr::Transpose(_) => "transpose",
            Attr::DotDimensionNumbers(_) => "dot dimension numbers",
            Attr::DotAlgorithm(_) => "dot algorithm",
            Attr::GatherDimensionNumbers(_) => "gather dimension numbers",
            Attr::ScatterDimensionNumbers(_) => "scatter dimension numbers",
            Attr::ConvDimensionNumbers(_) => "conv dimension numbers",
            Attr::ResultAccuracy(_) => "result_accuracy",
            Attr::ChannelHandle(_) => "channel_handle",
            Attr::OutputOperandAlias(_) => "output_operand_alias",
            Attr::Opaque(_) => "opaque",
        }
    }

    /// The value as an integer (integers, booleans, 1-element integer tensors).
    pub fn as_i64(&self) -> Result<i64> {
        match self {
            Attr::Int(v, _) => i64::try_from(*v)
                .map_err(|_| Error::invalid(format!("integer attribute {v} out of range"))),
            Attr::Bool(b) => Ok(*b as i64),
            Attr::Dense(l) if l.len() == 1 && !l.ty.dtype.is_float() => {
                Ok(l.get(0).as_i128() as i64)
            }
            other => Err(Error::invalid(format!(
                "expected an integer attribute, got {}",
                other.kind()
            ))),
        }
    }

    /// The value as a float.
    pub fn as_f64(&self) -> Result<f64> {
        match self {
            Attr::Float(v, _) => Ok(*v),
            Attr::Int(v, _) => Ok(*v as f64),
            other => Err(Error::invalid(format!(
                "expected a float attribute, got {}",
                other.kind()
            ))),
        }
    }

    /// The value as a boolean (`true`/`false`, a unit attribute, or an `i1` integer).
    pub fn as_bool(&self) -> Result<bool> {
        match self {
            Attr::Bool(b) => Ok(*b),
            Attr::Unit => Ok(true),
            Attr::Int(v, _) => Ok(*v != 0),
            other => Err(Error::invalid(format!(
                "expected a boolean attribute, got {}",
                other.kind()
            ))),
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Result<&str> {
        match self {
            Attr::String(s) | Attr::Symbol(s) => Ok(s),
            other => Err(Error::invalid(format!(
                "expected a string attribute, got {}",
                other.kind()
            ))),
        }
    }

    /// A list of integers from any of the forms versions of StableHLO used for one:
    /// `array<i64: ...>`, `[1, 2]`, or a 1-d integer `dense<...>` tensor.
    pub fn as_i64_list(&self) -> Result<Vec<i64>> {
        match self {
            Attr::DenseArray(_, v) => Ok(v.clone()),
            Attr::Array(items) => items.iter().map(Attr::as_i64).collect(),
            Attr::Dense(l) if !l.ty.dtype.is_float() && l.ty.rank() <= 1 => Ok(l.to_i64s()),
            other => Err(Error::invalid(format!(
                "expected a list of integers, got {}",
                other.kind()
            ))),
        }
    }

    /// A list of booleans (`array<i1: ...>`, a `dense<...>` of `i1`, or `[true, false]`).
    pub fn as_bool_list(&self) -> Result<Vec<bool>> {
        match self {
            Attr::DenseArray(_, v) => Ok(v.iter().map(|&x| x != 0).collect()),
            Attr::Array(items) => items.iter().map(Attr::as_bool).collect(),
            Attr::Dense(l) => Ok(l.to_i64s().into_iter().map(|x| x != 0).collect()),
            other => Err(Error::invalid(format!(
                "expected a list of booleans, got {}",
                other.kind()
            ))),
        }
    }

    /// A list of (low, high) pairs from an `Nx2` integer tensor (the `padding` attributes).
    pub fn as_i64_pairs(&self) -> Result<Vec<(i64, i64)>> {
        let flat = self.as_i64_list_any_rank()?;
        if flat.len() % 2 != 0 {
            return Err(Error::invalid("expected an Nx2 list of integer pairs"));
        }
        Ok(flat.chunks(2).map(|c| (c[0], c[1])).collect())
    }

    /// Integers of an integer tensor of any rank, row-major.
    pub fn as_i64_list_any_rank(&self) -> Result<Vec<i64>> {
        match self {
            Attr::Dense(l) if !l.ty.dtype.is_float() => Ok(l.to_i64s()),
            other => other.as_i64_list(),
        }
    }
}

/// Looks up `name` in an attribute list.
pub fn find_attr<'a>(attrs: &'a [(String, Attr)], name: &str) -> Option<&'a Attr> {
    attrs.iter().find(|(n, _)| n == name).map(|(_, a)| a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::types::TensorType;

    #[test]
    fn enums_parse_their_names() {
        for d in ComparisonDirection::ALL {
            assert_eq!(ComparisonDirection::from_name(d.name()), Some(*d));
        }
        assert_eq!(Transpose::from_name("ADJOINT"), Some(Transpose::Adjoint));
        assert_eq!(
            CustomCallApiVersion::from_code(4),
            Some(CustomCallApiVersion::TypedFfi)
        );
    }

    #[test]
    fn integer_lists_accept_every_form() {
        let dense = Literal::from_scalars(
            TensorType::new(vec![2], ElementType::I64),
            &[
                crate::ir::literal::Scalar::Int(1),
                crate::ir::literal::Scalar::Int(2),
            ],
        )
        .unwrap();
        for a in [
            Attr::DenseArray(ElementType::I64, vec![1, 2]),
            Attr::Array(vec![
                Attr::Int(1, ElementType::I64),
                Attr::Int(2, ElementType::I64),
            ]),
            Attr::Dense(dense),
        ] {
            assert_eq!(a.as_i64_list().unwrap(), vec![1, 2]);
        }
    }
}
