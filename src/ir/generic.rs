//! The bridge between the generic op form every frontend reads (an op name and a list of named
//! `Attr`s, as in `"stablehlo.x"(...) {attrs}`) and the typed `Op` enum. Both directions live
//! here so that reading and printing agree: `build_op` for frontends, `op_name` and `op_attrs`
//! for the printer.
//!
//! Attribute names and forms are those of StableHLO's generic form (what `stablehlo-opt
//! --mlir-print-op-generic` prints). Older spellings are accepted (integer lists as
//! `dense<...>` tensors; `broadcast` and `dot`, read as `broadcast_in_dim` and `dot_general`).
//! Attributes a known op does not define (`mhlo.sharding`, `mhlo.frontend_attributes`, ...)
//! are discardable and dropped.

use super::attr::{
    find_attr, Attr, ComparisonType, CustomCallApiVersion, DotDimensionNumbers, Precision,
    RngAlgorithm, Transpose,
};
use super::literal::Literal;
use super::ops::{BinaryOp, CheckOp, Convolution, CustomCall, Op, UnaryOp};
use super::types::{ElementType, Type};
use crate::error::{Error, Result};

/// Reads attributes of one op, naming the op in errors.
struct Attrs<'a> {
    op: &'a str,
    attrs: &'a [(String, Attr)],
}

impl<'a> Attrs<'a> {
    fn get(&self, name: &str) -> Option<&'a Attr> {
        find_attr(self.attrs, name)
    }
    fn req(&self, name: &str) -> Result<&'a Attr> {
        self.get(name)
            .ok_or_else(|| Error::invalid(format!("{}: missing attribute `{name}`", self.op)))
    }
    fn ctx<T>(&self, name: &str, r: Result<T>) -> Result<T> {
        r.map_err(|e| {
            Error::new(
                e.kind,
                format!("{}: attribute `{name}`: {}", self.op, e.message),
            )
        })
    }
    fn int(&self, name: &str) -> Result<i64> {
        self.ctx(name, self.req(name)?.as_i64())
    }
    fn int_or(&self, name: &str, default: i64) -> Result<i64> {
        match self.get(name) {
            Some(a) => self.ctx(name, a.as_i64()),
            None => Ok(default),
        }
    }
    fn float(&self, name: &str) -> Result<f64> {
        self.ctx(name, self.req(name)?.as_f64())
    }
    fn float_or(&self, name: &str, default: f64) -> Result<f64> {
        match self.get(name) {
            Some(a) => self.ctx(name, a.as_f64()),
            None => Ok(default),
        }
    }
    fn flag(&self, name: &str, default: bool) -> Result<bool> {
        match self.get(name) {
            Some(a) => self.ctx(name, a.as_bool()),
            None => Ok(default),
        }
    }
    fn ints(&self, name: &str) -> Result<Vec<i64>> {
        self.ctx(name, self.req(name)?.as_i64_list())
    }
    fn ints_or(&self, name: &str, default: impl FnOnce() -> Vec<i64>) -> Result<Vec<i64>> {
        match self.get(name) {
            Some(a) => self.ctx(name, a.as_i64_list()),
            None => Ok(default()),
        }
    }
    fn pairs_or(&self, name: &str, n: usize) -> Result<Vec<(i64, i64)>> {
        match self.get(name) {
            Some(a) => self.ctx(name, a.as_i64_pairs()),
            None => Ok(vec![(0, 0); n]),
        }
    }
    fn string(&self, name: &str) -> Result<String> {
        self.ctx(name, self.req(name)?.as_str().map(str::to_string))
    }
    fn dense(&self, name: &str) -> Result<Literal> {
        match self.req(name)? {
            Attr::Dense(l) => Ok(l.clone()),
            other => Err(Error::invalid(format!(
                "{}: attribute `{name}`: expected dense elements, got {}",
                self.op,
                other.kind()
            ))),
        }
    }
    /// The precision config; all-`DEFAULT` reads as empty (the same meaning, and what
    /// printers elide), so every spelling of a program gives the same IR.
    fn precision_config(&self) -> Result<Vec<Precision>> {
        let v = self.precision_config_as_written()?;
        Ok(if v.iter().all(|p| *p == Precision::Default) {
            Vec::new()
        } else {
            v
        })
    }
    fn precision_config_as_written(&self) -> Result<Vec<Precision>> {
        match self.get("precision_config") {
            None => Ok(Vec::new()),
            Some(Attr::Array(items)) => items
                .iter()
                .map(|a| match a {
                    Attr::Precision(p) => Ok(*p),
                    other => Err(Error::invalid(format!(
                        "{}: precision_config entry is {}, expected precision",
                        self.op,
                        other.kind()
                    ))),
                })
                .collect(),
            Some(other) => Err(Error::invalid(format!(
                "{}: precision_config is {}, expected an array",
                self.op,
                other.kind()
            ))),
        }
    }
    fn wrong(&self, name: &str, a: &Attr, expected: &str) -> Error {
        Error::invalid(format!(
            "{}: attribute `{name}` is {}, expected {expected}",
            self.op,
            a.kind()
        ))
    }
}

fn rank_of(t: Option<&Type>) -> usize {
    t.and_then(Type::as_tensor).map_or(0, |t| t.rank())
}

/// Builds the typed op for a generic op. `operand_types` are needed where a legacy or defaulted
/// attribute depends on ranks (`dot`, `broadcast`, `sort`'s dimension); `result_types` are
/// accepted so every frontend calls this one way.
/// Unknown ops become `Op::Other`.
pub fn build_op(
    name: &str,
    attrs: &[(String, Attr)],
    operand_types: &[Type],
    _result_types: &[Type],
) -> Result<Op> {
    let a = Attrs { op: name, attrs };
    if let Some(u) = UnaryOp::from_op_name(name) {
        return Ok(Op::Unary(u));
    }
    if let Some(b) = BinaryOp::from_op_name(name) {
        return Ok(Op::Binary(b));
    }
    let operand_rank = rank_of(operand_types.first());
    Ok(match name {
        // chlo.tan is stablehlo.tan.
        "chlo.tan" => Op::Unary(UnaryOp::Tan),
        "stablehlo.compare" => Op::Compare {
            direction: match a.req("comparison_direction")? {
                Attr::ComparisonDirection(d) => *d,
                other => {
                    return Err(a.wrong("comparison_direction", other, "comparison_direction"))
                }
            },
            compare_type: match a.get("compare_type") {
                None => None,
                Some(Attr::ComparisonType(t)) => Some(*t),
                Some(other) => return Err(a.wrong("compare_type", other, "comparison_type")),
            },
        },
        "stablehlo.select" => Op::Select,
        "stablehlo.clamp" => Op::Clamp,
        "stablehlo.convert" => Op::Convert,
        "stablehlo.bitcast_convert" => Op::BitcastConvert,
        "stablehlo.reduce_precision" => Op::ReducePrecision {
            exponent_bits: a.int("exponent_bits")?,
            mantissa_bits: a.int("mantissa_bits")?,
        },
        "stablehlo.constant" => Op::Constant(a.dense("value")?),
        "stablehlo.iota" => Op::Iota {
            dimension: a.int("iota_dimension")?,
        },
        "stablehlo.broadcast_in_dim" => Op::BroadcastInDim {
            dimensions: a.ints("broadcast_dimensions")?,
        },
        "stablehlo.broadcast" => {
            let sizes = a.ints("broadcast_sizes")?;
            let first = sizes.len() as i64;
            Op::BroadcastInDim {
                dimensions: (first..first + operand_rank as i64).collect(),
            }
        }
        "stablehlo.reshape" => Op::Reshape,
        "stablehlo.transpose" => Op::Transpose {
            permutation: a.ints("permutation")?,
        },
        "stablehlo.slice" => {
            let start = a.ints("start_indices")?;
            let n = start.len();
            Op::Slice {
                start,
                limit: a.ints("limit_indices")?,
                strides: a.ints_or("strides", || vec![1; n])?,
            }
        }
        "stablehlo.dynamic_slice" => Op::DynamicSlice {
            slice_sizes: a.ints("slice_sizes")?,
        },
        "stablehlo.dynamic_update_slice" => Op::DynamicUpdateSlice,
        "stablehlo.concatenate" => Op::Concatenate {
            dimension: a.int("dimension")?,
        },
        "stablehlo.pad" => Op::Pad {
            low: a.ints("edge_padding_low")?,
            high: a.ints("edge_padding_high")?,
            interior: a.ints("interior_padding")?,
        },
        "stablehlo.reverse" => Op::Reverse {
            dimensions: a.ints("dimensions")?,
        },
        "stablehlo.reduce" => Op::Reduce {
            dimensions: a.ints("dimensions")?,
        },
        "stablehlo.reduce_window" => {
            let window_dimensions = a.ints("window_dimensions")?;
            let n = window_dimensions.len();
            Op::ReduceWindow {
                window_strides: a.ints_or("window_strides", || vec![1; n])?,
                base_dilations: a.ints_or("base_dilations", || vec![1; n])?,
                window_dilations: a.ints_or("window_dilations", || vec![1; n])?,
                padding: a.pairs_or("padding", n)?,
                window_dimensions,
            }
        }
        "stablehlo.select_and_scatter" => {
            let n = operand_rank;
            Op::SelectAndScatter {
                window_dimensions: a.ints_or("window_dimensions", || vec![1; n])?,
                window_strides: a.ints_or("window_strides", || vec![1; n])?,
                padding: a.pairs_or("padding", n)?,
            }
        }
        "stablehlo.map" => Op::Map {
            dimensions: a.ints("dimensions")?,
        },
        "stablehlo.sort" => {
            let d = a.int_or("dimension", -1)?;
            Op::Sort {
                dimension: if d < 0 { d + operand_rank as i64 } else { d },
                is_stable: a.flag("is_stable", false)?,
            }
        }
        "stablehlo.dot_general" => Op::DotGeneral {
            dimension_numbers: match a.req("dot_dimension_numbers")? {
                Attr::DotDimensionNumbers(d) => d.clone(),
                other => return Err(a.wrong("dot_dimension_numbers", other, "#stablehlo.dot")),
            },
            precision_config: a.precision_config()?,
            algorithm: match a.get("algorithm") {
                None => None,
                Some(Attr::DotAlgorithm(d)) => Some(d.clone()),
                Some(other) => return Err(a.wrong("algorithm", other, "#stablehlo.dot_algorithm")),
            },
        },
        "stablehlo.dot" => Op::DotGeneral {
            dimension_numbers: DotDimensionNumbers {
                lhs_contracting_dimensions: vec![operand_rank.saturating_sub(1) as i64],
                rhs_contracting_dimensions: vec![0],
                ..Default::default()
            },
            precision_config: a.precision_config()?,
            algorithm: None,
        },
        "stablehlo.convolution" => {
            let dims = match a.req("dimension_numbers")? {
                Attr::ConvDimensionNumbers(d) => d.clone(),
                other => return Err(a.wrong("dimension_numbers", other, "#stablehlo.conv")),
            };
            let n = dims.input_spatial_dimensions.len();
            Op::Convolution(Box::new(Convolution {
                window_strides: a.ints_or("window_strides", || vec![1; n])?,
                padding: a.pairs_or("padding", n)?,
                lhs_dilation: a.ints_or("lhs_dilation", || vec![1; n])?,
                rhs_dilation: a.ints_or("rhs_dilation", || vec![1; n])?,
                window_reversal: match a.get("window_reversal") {
                    Some(r) => a.ctx("window_reversal", r.as_bool_list())?,
                    None => vec![false; n],
                },
                dimension_numbers: dims,
                feature_group_count: a.int_or("feature_group_count", 1)?,
                batch_group_count: a.int_or("batch_group_count", 1)?,
                precision_config: a.precision_config()?,
            }))
        }
        "stablehlo.gather" => Op::Gather {
            dimension_numbers: match a.req("dimension_numbers")? {
                Attr::GatherDimensionNumbers(d) => d.clone(),
                other => return Err(a.wrong("dimension_numbers", other, "#stablehlo.gather")),
            },
            slice_sizes: a.ints("slice_sizes")?,
            indices_are_sorted: a.flag("indices_are_sorted", false)?,
        },
        "stablehlo.scatter" => Op::Scatter {
            dimension_numbers: match a.req("scatter_dimension_numbers")? {
                Attr::ScatterDimensionNumbers(d) => d.clone(),
                other => {
                    return Err(a.wrong("scatter_dimension_numbers", other, "#stablehlo.scatter"))
                }
            },
            indices_are_sorted: a.flag("indices_are_sorted", false)?,
            unique_indices: a.flag("unique_indices", false)?,
        },
        "stablehlo.fft" => Op::Fft {
            fft_type: match a.req("fft_type")? {
                Attr::FftType(t) => *t,
                other => return Err(a.wrong("fft_type", other, "fft_type")),
            },
            fft_length: a.ints("fft_length")?,
        },
        "stablehlo.cholesky" => Op::Cholesky {
            lower: a.flag("lower", false)?,
        },
        "stablehlo.triangular_solve" => Op::TriangularSolve {
            left_side: a.flag("left_side", false)?,
            lower: a.flag("lower", false)?,
            unit_diagonal: a.flag("unit_diagonal", false)?,
            transpose_a: match a.get("transpose_a") {
                None => Transpose::NoTranspose,
                Some(Attr::Transpose(t)) => *t,
                Some(other) => return Err(a.wrong("transpose_a", other, "transpose")),
            },
        },
        "stablehlo.batch_norm_inference" => Op::BatchNormInference {
            epsilon: a.float("epsilon")?,
            feature_index: a.int("feature_index")?,
        },
        "stablehlo.batch_norm_training" => Op::BatchNormTraining {
            epsilon: a.float("epsilon")?,
            feature_index: a.int("feature_index")?,
        },
        "stablehlo.batch_norm_grad" => Op::BatchNormGrad {
            epsilon: a.float("epsilon")?,
            feature_index: a.int("feature_index")?,
        },
        "stablehlo.rng" => Op::Rng {
            distribution: match a.req("rng_distribution")? {
                Attr::RngDistribution(d) => *d,
                other => return Err(a.wrong("rng_distribution", other, "rng_distribution")),
            },
        },
        "stablehlo.rng_bit_generator" => Op::RngBitGenerator {
            algorithm: match a.get("rng_algorithm") {
                None => RngAlgorithm::Default,
                Some(Attr::RngAlgorithm(r)) => *r,
                Some(other) => return Err(a.wrong("rng_algorithm", other, "rng_algorithm")),
            },
        },
        "stablehlo.get_dimension_size" => Op::GetDimensionSize {
            dimension: a.int("dimension")?,
        },
        "stablehlo.while" => Op::While,
        "stablehlo.if" => Op::If,
        "stablehlo.case" => Op::Case,
        "func.call" | "call" => Op::Call {
            callee: a.string("callee")?,
        },
        "func.return" | "stablehlo.return" | "return" => Op::Return,
        "stablehlo.tuple" => Op::Tuple,
        "stablehlo.get_tuple_element" => Op::GetTupleElement {
            index: a.int("index")?,
        },
        "stablehlo.optimization_barrier" => Op::OptimizationBarrier,
        "stablehlo.custom_call" => Op::CustomCall(Box::new(build_custom_call(&a)?)),
        "stablehlo.composite" => Op::Composite {
            name: a.string("name")?,
            attributes: match a.get("composite_attributes") {
                None => Vec::new(),
                Some(Attr::Dict(d)) => d.clone(),
                Some(other) => return Err(a.wrong("composite_attributes", other, "a dictionary")),
            },
            decomposition: a.string("decomposition")?,
            version: a.int_or("version", 0)?,
        },
        "stablehlo.after_all" => Op::AfterAll,
        "stablehlo.create_token" => Op::CreateToken,
        "stablehlo.replica_id" => Op::ReplicaId,
        "stablehlo.partition_id" => Op::PartitionId,
        "chlo.top_k" => Op::TopK {
            k: a.int("k")?,
            largest: a.flag("largest", true)?,
        },
        "check.expect_eq" => Op::Check(CheckOp::ExpectEq),
        "check.expect_eq_const" => Op::Check(CheckOp::ExpectEqConst(a.dense("value")?)),
        "check.expect_almost_eq" => Op::Check(CheckOp::ExpectAlmostEq {
            tolerance: a.float_or("tolerance", 1e-4)?,
        }),
        "check.expect_almost_eq_const" => Op::Check(CheckOp::ExpectAlmostEqConst {
            expected: a.dense("value")?,
            tolerance: a.float_or("tolerance", 1e-4)?,
        }),
        "check.expect_close" => Op::Check(CheckOp::ExpectClose {
            max_ulp_difference: a.int_or("max_ulp_difference", 1)?.max(0) as u64,
            min_ulp_difference: a.int_or("min_ulp_difference", 0)?.max(0) as u64,
        }),
        "check.expect_serialized_eq" => Op::Check(CheckOp::ExpectSerializedEq {
            probe_id: a.string("probe_id")?,
            iteration: a.int_or("iteration", 0)?.max(0) as u32,
        }),
        "interpreter.probe" => Op::Probe {
            probe_id: a.string("probe_id")?,
        },
        _ => Op::Other {
            name: name.to_string(),
            attrs: attrs.to_vec(),
        },
    })
}

fn layouts(a: &Attrs, name: &str) -> Result<Option<Vec<Vec<i64>>>> {
    match a.get(name) {
        None => Ok(None),
        Some(Attr::Array(items)) => items
            .iter()
            .map(|i| a.ctx(name, i.as_i64_list_any_rank()))
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(other) => Err(a.wrong(name, other, "an array of layouts")),
    }
}

fn build_custom_call(a: &Attrs) -> Result<CustomCall> {
    Ok(CustomCall {
        call_target_name: a.string("call_target_name")?,
        has_side_effect: a.flag("has_side_effect", false)?,
        backend_config: a.get("backend_config").cloned(),
        api_version: match a.get("api_version") {
            None => CustomCallApiVersion::Original,
            Some(v) => {
                let code = a.ctx("api_version", v.as_i64())?;
                CustomCallApiVersion::from_code(code).ok_or_else(|| {
                    Error::invalid(format!("{}: unknown api_version {code}", a.op))
                })?
            }
        },
        called_computations: match a.get("called_computations") {
            None => Vec::new(),
            Some(Attr::Array(items)) => items
                .iter()
                .map(|i| a.ctx("called_computations", i.as_str().map(str::to_string)))
                .collect::<Result<_>>()?,
            Some(other) => return Err(a.wrong("called_computations", other, "an array")),
        },
        operand_layouts: layouts(a, "operand_layouts")?,
        result_layouts: layouts(a, "result_layouts")?,
        output_operand_aliases: match a.get("output_operand_aliases") {
            None => Vec::new(),
            Some(Attr::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Attr::OutputOperandAlias(o) => Ok(o.clone()),
                    other => Err(a.wrong("output_operand_aliases", other, "output_operand_alias")),
                })
                .collect::<Result<_>>()?,
            Some(other) => return Err(a.wrong("output_operand_aliases", other, "an array")),
        },
    })
}

/// The full op name of `op` (`stablehlo.add`, `func.call`, `check.expect_eq`, ...). `Return`
/// is `stablehlo.return`; the printer spells it `func.return` at function level.
pub fn op_name(op: &Op) -> String {
    let s = match op {
        Op::Unary(u) => u.op_name(),
        Op::Binary(b) => b.op_name(),
        Op::Compare { .. } => "stablehlo.compare",
        Op::Select => "stablehlo.select",
        Op::Clamp => "stablehlo.clamp",
        Op::Convert => "stablehlo.convert",
        Op::BitcastConvert => "stablehlo.bitcast_convert",
        Op::ReducePrecision { .. } => "stablehlo.reduce_precision",
        Op::Constant(_) => "stablehlo.constant",
        Op::Iota { .. } => "stablehlo.iota",
        Op::BroadcastInDim { .. } => "stablehlo.broadcast_in_dim",
        Op::Reshape => "stablehlo.reshape",
        Op::Transpose { .. } => "stablehlo.transpose",
        Op::Slice { .. } => "stablehlo.slice",
        Op::DynamicSlice { .. } => "stablehlo.dynamic_slice",
        Op::DynamicUpdateSlice => "stablehlo.dynamic_update_slice",
        Op::Concatenate { .. } => "stablehlo.concatenate",
        Op::Pad { .. } => "stablehlo.pad",
        Op::Reverse { .. } => "stablehlo.reverse",
        Op::Reduce { .. } => "stablehlo.reduce",
        Op::ReduceWindow { .. } => "stablehlo.reduce_window",
        Op::SelectAndScatter { .. } => "stablehlo.select_and_scatter",
        Op::Map { .. } => "stablehlo.map",
        Op::Sort { .. } => "stablehlo.sort",
        Op::DotGeneral { .. } => "stablehlo.dot_general",
        Op::Convolution(_) => "stablehlo.convolution",
        Op::Gather { .. } => "stablehlo.gather",
        Op::Scatter { .. } => "stablehlo.scatter",
        Op::Fft { .. } => "stablehlo.fft",
        Op::Cholesky { .. } => "stablehlo.cholesky",
        Op::TriangularSolve { .. } => "stablehlo.triangular_solve",
        Op::BatchNormInference { .. } => "stablehlo.batch_norm_inference",
        Op::BatchNormTraining { .. } => "stablehlo.batch_norm_training",
        Op::BatchNormGrad { .. } => "stablehlo.batch_norm_grad",
        Op::Rng { .. } => "stablehlo.rng",
        Op::RngBitGenerator { .. } => "stablehlo.rng_bit_generator",
        Op::GetDimensionSize { .. } => "stablehlo.get_dimension_size",
        Op::While => "stablehlo.while",
        Op::If => "stablehlo.if",
        Op::Case => "stablehlo.case",
        Op::Call { .. } => "func.call",
        Op::Return => "stablehlo.return",
        Op::Tuple => "stablehlo.tuple",
        Op::GetTupleElement { .. } => "stablehlo.get_tuple_element",
        Op::OptimizationBarrier => "stablehlo.optimization_barrier",
        Op::CustomCall(_) => "stablehlo.custom_call",
        Op::Composite { .. } => "stablehlo.composite",
        Op::AfterAll => "stablehlo.after_all",
        Op::CreateToken => "stablehlo.create_token",
        Op::ReplicaId => "stablehlo.replica_id",
        Op::PartitionId => "stablehlo.partition_id",
        Op::TopK { .. } => "chlo.top_k",
        Op::Check(c) => match c {
            CheckOp::ExpectEq => "check.expect_eq",
            CheckOp::ExpectEqConst(_) => "check.expect_eq_const",
            CheckOp::ExpectAlmostEq { .. } => "check.expect_almost_eq",
            CheckOp::ExpectAlmostEqConst { .. } => "check.expect_almost_eq_const",
            CheckOp::ExpectClose { .. } => "check.expect_close",
            CheckOp::ExpectSerializedEq { .. } => "check.expect_serialized_eq",
        },
        Op::Probe { .. } => "interpreter.probe",
        Op::Other { name, .. } => return name.clone(),
    };
    s.to_string()
}

fn i64s(v: &[i64]) -> Attr {
    Attr::DenseArray(ElementType::I64, v.to_vec())
}

fn int(v: i64, t: ElementType) -> Attr {
    Attr::Int(v as i128, t)
}

fn pairs(p: &[(i64, i64)]) -> Attr {
    let ty = super::types::TensorType::new(vec![p.len() as i64, 2], ElementType::I64);
    let values: Vec<super::literal::Scalar> = p
        .iter()
        .flat_map(|&(l, h)| [l, h])
        .map(|x| super::literal::Scalar::Int(x as i128))
        .collect();
    match Literal::from_scalars(ty.clone(), &values) {
        Ok(l) => Attr::Dense(l),
        Err(_) => Attr::Dense(Literal::zeros(ty)),
    }
}

fn precisions(p: &[Precision]) -> Option<(String, Attr)> {
    (!p.is_empty()).then(|| {
        (
            "precision_config".to_string(),
            Attr::Array(p.iter().map(|&x| Attr::Precision(x)).collect()),
        )
    })
}

/// The attributes of `op` in StableHLO's generic form, in the order `stablehlo-opt` prints
/// them (sorted by name). Reading them back with `build_op` gives `op` again.
pub fn op_attrs(op: &Op) -> Vec<(String, Attr)> {
    use ElementType::{I32, I64};
    let mut v: Vec<(String, Attr)> = Vec::new();
    let mut put = |n: &str, a: Attr| v.push((n.to_string(), a));
    match op {
        Op::Compare {
            direction,
            compare_type,
        } => {
            put(
                "comparison_direction",
                Attr::ComparisonDirection(*direction),
            );
            if let Some(t) = compare_type {
                put("compare_type", Attr::ComparisonType(*t));
            }
        }
        Op::ReducePrecision {
            exponent_bits,
            mantissa_bits,
        } => {
            put("exponent_bits", int(*exponent_bits, I32));
            put("mantissa_bits", int(*mantissa_bits, I32));
        }
        Op::Constant(l) => put("value", Attr::Dense(l.clone())),
        Op::Iota { dimension } => put("iota_dimension", int(*dimension, I64)),
        Op::BroadcastInDim { dimensions } => put("broadcast_dimensions", i64s(dimensions)),
        Op::Transpose { permutation } => put("permutation", i64s(permutation)),
        Op::Slice {
            start,
            limit,
            strides,
        } => {
            put("start_indices", i64s(start));
            put("limit_indices", i64s(limit));
            put("strides", i64s(strides));
        }
        Op::DynamicSlice { slice_sizes } => put("slice_sizes", i64s(slice_sizes)),
        Op::Concatenate { dimension } => put("dimension", int(*dimension, I64)),
        Op::Pad {
            low,
            high,
            interior,
        } => {
            put("edge_padding_low", i64s(low));
            put("edge_padding_high", i64s(high));
            put("interior_padding", i64s(interior));
        }
        Op::Reverse { dimensions } | Op::Reduce { dimensions } | Op::Map { dimensions } => {
            put("dimensions", i64s(dimensions))
        }
        Op::ReduceWindow {
            window_dimensions,
            window_strides,
            base_dilations,
            window_dilations,
            padding,
        } => {
            put("window_dimensions", i64s(window_dimensions));
            put("window_strides", i64s(window_strides));
            put("base_dilations", i64s(base_dilations));
            put("window_dilations", i64s(window_dilations));
            put("padding", pairs(padding));
        }
        Op::SelectAndScatter {
            window_dimensions,
            window_strides,
            padding,
        } => {
            put("window_dimensions", i64s(window_dimensions));
            put("window_strides", i64s(window_strides));
            put("padding", pairs(padding));
        }
        Op::Sort {
            dimension,
            is_stable,
        } => {
            put("dimension", int(*dimension, I64));
            put("is_stable", Attr::Bool(*is_stable));
        }
        Op::DotGeneral {
            dimension_numbers,
            precision_config,
            algorithm,
        } => {
            put(
                "dot_dimension_numbers",
                Attr::DotDimensionNumbers(dimension_numbers.clone()),
            );
            if let Some((n, a)) = precisions(precision_config) {
                put(&n, a);
            }
            if let Some(al) = algorithm {
                put("algorithm", Attr::DotAlgorithm(al.clone()));
            }
        }
        Op::Convolution(c) => {
            put("window_strides", i64s(&c.window_strides));
            put("padding", pairs(&c.padding));
            put("lhs_dilation", i64s(&c.lhs_dilation));
            put("rhs_dilation", i64s(&c.rhs_dilation));
            put(
                "window_reversal",
                Attr::DenseArray(
                    ElementType::Pred,
                    c.window_reversal.iter().map(|&b| b as i64).collect(),
                ),
            );
            put(
                "dimension_numbers",
                Attr::ConvDimensionNumbers(c.dimension_numbers.clone()),
            );
            put("feature_group_count", int(c.feature_group_count, I64));
            put("batch_group_count", int(c.batch_group_count, I64));
            if let Some((n, a)) = precisions(&c.precision_config) {
                put(&n, a);
            }
        }
        Op::Gather {
            dimension_numbers,
            slice_sizes,
            indices_are_sorted,
        } => {
            put(
                "dimension_numbers",
                Attr::GatherDimensionNumbers(dimension_numbers.clone()),
            );
            put("slice_sizes", i64s(slice_sizes));
            put("indices_are_sorted", Attr::Bool(*indices_are_sorted));
        }
        Op::Scatter {
            dimension_numbers,
            indices_are_sorted,
            unique_indices,
        } => {
            put(
                "scatter_dimension_numbers",
                Attr::ScatterDimensionNumbers(dimension_numbers.clone()),
            );
            put("indices_are_sorted", Attr::Bool(*indices_are_sorted));
            put("unique_indices", Attr::Bool(*unique_indices));
        }
        Op::Fft {
            fft_type,
            fft_length,
        } => {
            put("fft_type", Attr::FftType(*fft_type));
            put("fft_length", i64s(fft_length));
        }
        Op::Cholesky { lower } => put("lower", Attr::Bool(*lower)),
        Op::TriangularSolve {
            left_side,
            lower,
            unit_diagonal,
            transpose_a,
        } => {
            put("left_side", Attr::Bool(*left_side));
            put("lower", Attr::Bool(*lower));
            put("unit_diagonal", Attr::Bool(*unit_diagonal));
            put("transpose_a", Attr::Transpose(*transpose_a));
        }
        Op::BatchNormInference {
            epsilon,
            feature_index,
        }
        | Op::BatchNormTraining {
            epsilon,
            feature_index,
        }
        | Op::BatchNormGrad {
            epsilon,
            feature_index,
        } => {
            put("epsilon", Attr::Float(*epsilon, ElementType::F32));
            put("feature_index", int(*feature_index, I64));
        }
        Op::Rng { distribution } => put("rng_distribution", Attr::RngDistribution(*distribution)),
        Op::RngBitGenerator { algorithm } => put("rng_algorithm", Attr::RngAlgorithm(*algorithm)),
        Op::GetDimensionSize { dimension } => put("dimension", int(*dimension, I64)),
        Op::Call { callee } => put("callee", Attr::Symbol(callee.clone())),
        Op::GetTupleElement { index } => put("index", int(*index, I32)),
        Op::CustomCall(c) => {
            put("call_target_name", Attr::String(c.call_target_name.clone()));
            if c.has_side_effect {
                put("has_side_effect", Attr::Bool(true));
            }
            if let Some(b) = &c.backend_config {
                put("backend_config", b.clone());
            }
            if c.api_version != CustomCallApiVersion::Original {
                put("api_version", int(c.api_version.code(), I32));
            }
            if !c.called_computations.is_empty() {
                put(
                    "called_computations",
                    Attr::Array(
                        c.called_computations
                            .iter()
                            .map(|s| Attr::Symbol(s.clone()))
                            .collect(),
                    ),
                );
            }
            let layout_attr = |ls: &Vec<Vec<i64>>| {
                Attr::Array(
                    ls.iter()
                        .map(|l| {
                            let ty = super::types::TensorType::new(
                                vec![l.len() as i64],
                                ElementType::I64,
                            );
                            let vals: Vec<super::literal::Scalar> = l
                                .iter()
                                .map(|&x| super::literal::Scalar::Int(x as i128))
                                .collect();
                            Literal::from_scalars(ty.clone(), &vals)
                                .map(Attr::Dense)
                                .unwrap_or(Attr::Dense(Literal::zeros(ty)))
                        })
                        .collect(),
                )
            };
            if let Some(l) = &c.operand_layouts {
                put("operand_layouts", layout_attr(l));
            }
            if let Some(l) = &c.result_layouts {
                put("result_layouts", layout_attr(l));
            }
            if !c.output_operand_aliases.is_empty() {
                put(
                    "output_operand_aliases",
                    Attr::Array(
                        c.output_operand_aliases
                            .iter()
                            .map(|o| Attr::OutputOperandAlias(o.clone()))
                            .collect(),
                    ),
                );
            }
        }
        Op::Composite {
            name,
            attributes,
            decomposition,
            version,
        } => {
            put("name", Attr::String(name.clone()));
            if !attributes.is_empty() {
                put("composite_attributes", Attr::Dict(attributes.clone()));
            }
            put("decomposition", Attr::Symbol(decomposition.clone()));
            if *version != 0 {
                put("version", int(*version, I32));
            }
        }
        Op::TopK { k, largest } => {
            put("k", int(*k, I64));
            if !largest {
                put("largest", Attr::Bool(false));
            }
        }
        Op::Check(c) => match c {
            CheckOp::ExpectEq => {}
            CheckOp::ExpectEqConst(l) => put("value", Attr::Dense(l.clone())),
            CheckOp::ExpectAlmostEq { tolerance } => {
                put("tolerance", Attr::Float(*tolerance, ElementType::F64))
            }
            CheckOp::ExpectAlmostEqConst {
                expected,
                tolerance,
            } => {
                put("value", Attr::Dense(expected.clone()));
                put("tolerance", Attr::Float(*tolerance, ElementType::F64));
            }
            CheckOp::ExpectClose {
                max_ulp_difference,
                min_ulp_difference,
            } => {
                put(
                    "max_ulp_difference",
                    Attr::Int(*max_ulp_difference as i128, ElementType::U64),
                );
                put(
                    "min_ulp_difference",
                    Attr::Int(*min_ulp_difference as i128, ElementType::U64),
                );
            }
            CheckOp::ExpectSerializedEq {
                probe_id,
                iteration,
            } => {
                put("probe_id", Attr::String(probe_id.clone()));
                put("iteration", Attr::Int(*iteration as i128, ElementType::U32));
            }
        },
        Op::Probe { probe_id } => put("probe_id", Attr::String(probe_id.clone())),
        Op::Other { attrs, .. } => v.extend(attrs.iter().cloned()),
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert
        | Op::BitcastConvert
        | Op::Reshape
        | Op::DynamicUpdateSlice
        | Op::While
        | Op::If
        | Op::Case
        | Op::Return
        | Op::Tuple
        | Op::OptimizationBarrier
        | Op::AfterAll
        | Op::CreateToken
        | Op::ReplicaId
        | Op::PartitionId => {}
    }
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The comparison type a `compare` without `compare_type` uses for its operand element type.
pub fn default_compare_type(dtype: ElementType) -> ComparisonType {
    if dtype.is_float() || dtype.is_complex() {
        ComparisonType::Float
    } else if dtype.is_unsigned_int() || dtype.is_pred() {
        ComparisonType::Unsigned
    } else {
        ComparisonType::Signed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::attr::ComparisonDirection;

    fn t(shape: &[i64]) -> Type {
        Type::tensor(shape.to_vec(), ElementType::F32)
    }

    #[test]
    fn every_typed_op_round_trips_through_generic_form() {
        let ops = vec![
            Op::Unary(UnaryOp::Lgamma),
            Op::Binary(BinaryOp::Atan2),
            Op::Compare {
                direction: ComparisonDirection::Gt,
                compare_type: Some(ComparisonType::TotalOrder),
            },
            Op::Slice {
                start: vec![0, 1],
                limit: vec![2, 3],
                strides: vec![1, 2],
            },
            Op::ReduceWindow {
                window_dimensions: vec![2, 2],
                window_strides: vec![1, 1],
                base_dilations: vec![1, 1],
                window_dilations: vec![1, 1],
                padding: vec![(0, 1), (1, 0)],
            },
            Op::Sort {
                dimension: 1,
                is_stable: true,
            },
            Op::TopK {
                k: 3,
                largest: true,
            },
            Op::Check(CheckOp::ExpectClose {
                max_ulp_difference: 3,
                min_ulp_difference: 0,
            }),
        ];
        for op in ops {
            let name = op_name(&op);
            let attrs = op_attrs(&op);
            let back = build_op(&name, &attrs, &[t(&[4, 4])], &[t(&[4, 4])]).unwrap();
            assert_eq!(back, op, "{name}");
        }
    }

    #[test]
    fn legacy_forms_are_normalized() {
        let op = build_op(
            "stablehlo.broadcast",
            &[(
                "broadcast_sizes".into(),
                Attr::DenseArray(ElementType::I64, vec![5]),
            )],
            &[t(&[2, 3])],
            &[t(&[5, 2, 3])],
        )
        .unwrap();
        assert_eq!(
            op,
            Op::BroadcastInDim {
                dimensions: vec![1, 2]
            }
        );
        let sort = build_op("stablehlo.sort", &[], &[t(&[2, 3])], &[]).unwrap();
        assert_eq!(
            sort,
            Op::Sort {
                dimension: 1,
                is_stable: false
            }
        );
    }

    #[test]
    fn missing_attribute_names_op_and_attribute() {
        let e = build_op("stablehlo.iota", &[], &[], &[t(&[4])]).unwrap_err();
        assert!(e.message.contains("stablehlo.iota"));
        assert!(e.message.contains("iota_dimension"));
    }
}
