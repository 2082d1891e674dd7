//! Element types, tensor types and value types of the StableHLO type system.

use std::fmt;

/// A tensor element type (StableHLO spec "TensorElementType"). Signless MLIR integers (`i8`)
/// and signed ones (`si8`) are both the signed types here, as in StableHLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum ElementType {
    Pred,
    I2,
    I4,
    I8,
    I16,
    I32,
    I64,
    U2,
    U4,
    U8,
    U16,
    U32,
    U64,
    F4E2M1FN,
    F6E2M3FN,
    F6E3M2FN,
    F8E3M4,
    F8E4M3,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E4M3B11FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0FNU,
    BF16,
    F16,
    F32,
    F64,
    TF32,
    /// `complex<f32>`
    C64,
    /// `complex<f64>`
    C128,
}

/// Every element type, for tables and tests.
pub const ALL_ELEMENT_TYPES: [ElementType; 31] = {
    use ElementType::*;
    [
        Pred,
        I2,
        I4,
        I8,
        I16,
        I32,
        I64,
        U2,
        U4,
        U8,
        U16,
        U32,
        U64,
        F4E2M1FN,
        F6E2M3FN,
        F6E3M2FN,
        F8E3M4,
        F8E4M3,
        F8E4M3FN,
        F8E4M3FNUZ,
        F8E4M3B11FNUZ,
        F8E5M2,
        F8E5M2FNUZ,
        F8E8M0FNU,
        BF16,
        F16,
        F32,
        F64,
        TF32,
        C64,
        C128,
    ]
};

impl ElementType {
    /// The MLIR spelling (`i1`, `i8`, `ui8`, `bf16`, `complex<f32>`, ...).
    pub fn mlir_name(self) -> &'static str {
        use ElementType::*;
        match self {
            Pred => "i1",
            I2 => "i2",
            I4 => "i4",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            U2 => "ui2",
            U4 => "ui4",
            U8 => "ui8",
            U16 => "ui16",
            U32 => "ui32",
            U64 => "ui64",
            F4E2M1FN => "f4E2M1FN",
            F6E2M3FN => "f6E2M3FN",
            F6E3M2FN => "f6E3M2FN",
            F8E3M4 => "f8E3M4",
            F8E4M3 => "f8E4M3",
            F8E4M3FN => "f8E4M3FN",
            F8E4M3FNUZ => "f8E4M3FNUZ",
            F8E4M3B11FNUZ => "f8E4M3B11FNUZ",
            F8E5M2 => "f8E5M2",
            F8E5M2FNUZ => "f8E5M2FNUZ",
            F8E8M0FNU => "f8E8M0FNU",
            BF16 => "bf16",
            F16 => "f16",
            F32 => "f32",
            F64 => "f64",
            TF32 => "tf32",
            C64 => "complex<f32>",
            C128 => "complex<f64>",
        }
    }

    /// Parses an MLIR spelling; accepts `siN` as a synonym of `iN` and `index` as `i64`.
    pub fn from_mlir_name(name: &str) -> Option<Self> {
        use ElementType::*;
        let name = match name {
            "si2" => "i2",
            "si4" => "i4",
            "si8" => "i8",
            "si16" => "i16",
            "si32" => "i32",
            "si64" => "i64",
            "index" => "i64",
            other => other,
        };
        ALL_ELEMENT_TYPES
            .iter()
            .copied()
            .find(|t| t.mlir_name() == name)
            .or(match name {
                "complex<f32>" => Some(C64),
                "complex<f64>" => Some(C128),
                _ => None,
            })
    }

    /// Width of one element in bits (complex: both parts).
    pub fn bit_width(self) -> u32 {
        use ElementType::*;
        match self {
            Pred => 1,
            I2 | U2 => 2,
            I4 | U4 | F4E2M1FN => 4,
            F6E2M3FN | F6E3M2FN => 6,
            I8 | U8 | F8E3M4 | F8E4M3 | F8E4M3FN | F8E4M3FNUZ | F8E4M3B11FNUZ | F8E5M2
            | F8E5M2FNUZ | F8E8M0FNU => 8,
            I16 | U16 | BF16 | F16 => 16,
            I32 | U32 | F32 | TF32 => 32,
            I64 | U64 | F64 | C64 => 64,
            C128 => 128,
        }
    }

    /// Bytes per element in the dense host layout PJRT uses: sub-byte types take one byte each,
    /// `pred` one byte, `tf32` four.
    pub fn byte_size(self) -> usize {
        (self.bit_width() as usize).div_ceil(8)
    }

    /// `i1`.
    pub fn is_pred(self) -> bool {
        self == ElementType::Pred
    }
    /// Signed integers (not `i1`).
    pub fn is_signed_int(self) -> bool {
        use ElementType::*;
        matches!(self, I2 | I4 | I8 | I16 | I32 | I64)
    }
    /// Unsigned integers.
    pub fn is_unsigned_int(self) -> bool {
        use ElementType::*;
        matches!(self, U2 | U4 | U8 | U16 | U32 | U64)
    }
    /// Signed or unsigned integers (not `i1`).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }
    /// Real floating-point types of any width.
    pub fn is_float(self) -> bool {
        !self.is_pred() && !self.is_int() && !self.is_complex()
    }
    /// `complex<f32>` and `complex<f64>`.
    pub fn is_complex(self) -> bool {
        matches!(self, ElementType::C64 | ElementType::C128)
    }
    /// The part type of a complex type (`f32` for `complex<f32>`).
    pub fn complex_part(self) -> Option<ElementType> {
        match self {
            ElementType::C64 => Some(ElementType::F32),
            ElementType::C128 => Some(ElementType::F64),
            _ => None,
        }
    }
    /// The complex type whose parts are `self`.
    pub fn complex_of(self) -> Option<ElementType> {
        match self {
            ElementType::F32 => Some(ElementType::C64),
            ElementType::F64 => Some(ElementType::C128),
            _ => None,
        }
    }
    /// For floats: (exponent bits, mantissa bits) of the format.
    pub fn float_format(self) -> Option<(u32, u32)> {
        use ElementType::*;
        Some(match self {
            F4E2M1FN => (2, 1),
            F6E2M3FN => (2, 3),
            F6E3M2FN => (3, 2),
            F8E3M4 => (3, 4),
            F8E4M3 | F8E4M3FN | F8E4M3FNUZ | F8E4M3B11FNUZ => (4, 3),
            F8E5M2 | F8E5M2FNUZ => (5, 2),
            F8E8M0FNU => (8, 0),
            BF16 => (8, 7),
            F16 => (5, 10),
            F32 => (8, 23),
            F64 => (11, 52),
            TF32 => (8, 10),
            _ => return None,
        })
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir_name())
    }
}

/// Marker for a dimension whose size is not known at compile time (`?`).
pub const DYNAMIC: i64 = -1;

/// Uniform quantization parameters of a quantized tensor type (`!quant.uniform<...>`). Kept so
/// programs round-trip; the compiler rejects them with UNIMPLEMENTED.
#[derive(Clone, Debug, PartialEq)]
pub struct UniformQuantization {
    /// The integer type values are stored in.
    pub storage_type: ElementType,
    /// Smallest storable value.
    pub storage_min: i64,
    /// Largest storable value.
    pub storage_max: i64,
    /// The float type values stand for.
    pub expressed_type: ElementType,
    /// Per-axis quantization dimension, if any.
    pub quantization_dimension: Option<i64>,
    /// One scale per tensor or per slice.
    pub scales: Vec<f64>,
    /// One zero point per tensor or per slice.
    pub zero_points: Vec<i64>,
}

/// A ranked tensor type: shape (dimension sizes, `DYNAMIC` where unknown) and element type.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorType {
    /// Dimension sizes, outermost first; `DYNAMIC` for `?`.
    pub shape: Vec<i64>,
    /// The element type (the storage type for quantized tensors).
    pub dtype: ElementType,
    /// Upper bounds of dynamic dimensions (`#stablehlo.bounds<...>`), `DYNAMIC` where unbounded.
    pub bounds: Option<Vec<i64>>,
    /// Quantization parameters of a quantized tensor.
    pub quant: Option<Box<UniformQuantization>>,
}

impl TensorType {
    /// A static tensor type.
    pub fn new(shape: Vec<i64>, dtype: ElementType) -> Self {
        TensorType {
            shape,
            dtype,
            bounds: None,
            quant: None,
        }
    }
    /// A 0-d tensor of `dtype`.
    pub fn scalar(dtype: ElementType) -> Self {
        Self::new(Vec::new(), dtype)
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// True when every dimension size is known.
    pub fn is_static(&self) -> bool {
        self.shape.iter().all(|&d| d >= 0)
    }
    /// Number of elements (0 for empty tensors); dynamic dimensions count as 0.
    pub fn num_elements(&self) -> usize {
        self.shape.iter().map(|&d| d.max(0) as usize).product()
    }
    /// Size of the dense host representation in bytes.
    pub fn byte_size(&self) -> usize {
        self.num_elements() * self.dtype.byte_size()
    }
    /// Static dimension sizes as `usize` (dynamic ones as 0).
    pub fn dims(&self) -> Vec<usize> {
        self.shape.iter().map(|&d| d.max(0) as usize).collect()
    }
    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let dims = self.dims();
        let mut strides = vec![1usize; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        strides
    }
    /// The same shape with another element type.
    pub fn with_dtype(&self, dtype: ElementType) -> TensorType {
        TensorType::new(self.shape.clone(), dtype)
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for &d in &self.shape {
            if d < 0 {
                f.write_str("?x")?;
            } else {
                write!(f, "{d}x")?;
            }
        }
        match &self.quant {
            None => f.write_str(self.dtype.mlir_name())?,
            Some(q) => {
                write!(f, "!quant.uniform<{}", q.storage_type)?;
                let (lo, hi) = int_range(q.storage_type);
                if q.storage_min != lo || q.storage_max != hi {
                    write!(f, "<{}:{}>", q.storage_min, q.storage_max)?;
                }
                write!(f, ":{}", q.expressed_type)?;
                if let Some(d) = q.quantization_dimension {
                    write!(f, ":{d}")?;
                }
                f.write_str(", ")?;
                let params: Vec<String> = q
                    .scales
                    .iter()
                    .zip(&q.zero_points)
                    .map(|(s, z)| format!("{s:e}:{z}"))
                    .collect();
                if q.quantization_dimension.is_some() {
                    write!(f, "{{{}}}", params.join(","))?;
                } else {
                    f.write_str(&params.join(","))?;
                }
                f.write_str(">")?;
            }
        }
        if let Some(b) = &self.bounds {
            let b: Vec<String> = b
                .iter()
                .map(|&x| if x < 0 { "?".into() } else { x.to_string() })
                .collect();
            write!(f, ", #stablehlo.bounds<{}>", b.join(", "))?;
        }
        f.write_str(">")
    }
}

/// The full value range of an integer element type as (min, max), saturating at i64.
pub fn int_range(t: ElementType) -> (i64, i64) {
    let bits = t.bit_width();
    if t.is_signed_int() {
        let max = if bits >= 64 {
            i64::MAX
        } else {
            (1i64 << (bits - 1)) - 1
        };
        (-max - 1, max)
    } else if t.is_unsigned_int() {
        let max = if bits >= 64 {
            i64::MAX
        } else {
            (1i64 << bits) - 1
        };
        (0, max)
    } else {
        (0, 1)
    }
}

/// The type of an SSA value.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// A ranked tensor.
    Tensor(TensorType),
    /// A tuple of values (legacy HLO ABI).
    Tuple(Vec<Type>),
    /// `!stablehlo.token`.
    Token,
    /// `!stablehlo.future<T, ...>`: values of an asynchronous op.
    Future(Vec<Type>),
    /// `memref<...>`: a buffer (only `custom_call`s read and write them).
    Buffer(TensorType),
}

impl Type {
    /// The tensor type, if this is one.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }
    /// Shorthand for a tensor type.
    pub fn tensor(shape: Vec<i64>, dtype: ElementType) -> Type {
        Type::Tensor(TensorType::new(shape, dtype))
    }
}

impl From<TensorType> for Type {
    fn from(t: TensorType) -> Self {
        Type::Tensor(t)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => t.fmt(f),
            Type::Token => f.write_str("!stablehlo.token"),
            Type::Tuple(elems) => write_list(f, "tuple<", elems),
            Type::Future(elems) => write_list(f, "!stablehlo.future<", elems),
            Type::Buffer(t) => {
                let s = t.to_string();
                write!(f, "memref<{}", s.strip_prefix("tensor<").unwrap_or(&s))
            }
        }
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, open: &str, elems: &[Type]) -> fmt::Result {
    f.write_str(open)?;
    for (i, e) in elems.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{e}")?;
    }
    f.write_str(">")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in ALL_ELEMENT_TYPES {
            assert_eq!(ElementType::from_mlir_name(t.mlir_name()), Some(t));
        }
        assert_eq!(ElementType::from_mlir_name("si32"), Some(ElementType::I32));
    }

    #[test]
    fn tensor_display_and_sizes() {
        let t = TensorType::new(vec![2, DYNAMIC, 3], ElementType::BF16);
        assert_eq!(t.to_string(), "tensor<2x?x3xbf16>");
        let s = TensorType::scalar(ElementType::C64);
        assert_eq!(s.to_string(), "tensor<complex<f32>>");
        assert_eq!(s.byte_size(), 8);
        assert_eq!(
            TensorType::new(vec![2, 3, 4], ElementType::F32).strides(),
            vec![12, 4, 1]
        );
        assert_eq!(
            TensorType::new(vec![0, 3], ElementType::F32).num_elements(),
            0
        );
    }
}
