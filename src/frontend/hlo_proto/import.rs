//! `HloModuleProto` → IR. The entry computation becomes `@main`; every other computation is
//! imported where it is used: inline at a `call` or `fusion`, as a region of `reduce`, `sort`,
//! `while`, `conditional`, ... Tuples are flattened: every HLO value maps to the list of its
//! leaf values, so `tuple` and `get-tuple-element` are bookkeeping and the IR sees tuples only
//! where HLO's ABI passes them whole (never, after flattening). Entry layouts are kept as
//! `mhlo.layout_mode` attributes (see `leaf_layouts`); constants are read in their literal's
//! layout and transposed to logical order.

use std::collections::HashMap;

use super::schema::{HloComputationProto, HloInstructionProto, HloModuleProto, ShapeProto};
use super::shape::{self, layout_permutation, leaves};
use crate::error::{Error, Result};
use crate::ir::attr::{
    ComparisonDirection, ComparisonType, ConvDimensionNumbers, CustomCallApiVersion,
    DotDimensionNumbers, FftType, GatherDimensionNumbers, Precision, RngAlgorithm, RngDistribution,
    ScatterDimensionNumbers, Transpose,
};
use crate::ir::literal::Scalar;
use crate::ir::module::NamedAttrs;
use crate::ir::ops::{Convolution, CustomCall};
use crate::ir::{
    Attr, BinaryOp, ElementType, Function, Literal, Location, Module, Op, Operation, Region,
    TensorType, Type, UnaryOp, ValueId,
};

/// Most operations one module may import to (inlining can multiply a small proto's size).
const MAX_OPS: usize = 1 << 20;
/// Deepest nesting of computations (calls within calls, regions within regions).
const MAX_DEPTH: usize = 256;

/// Imports a decoded module.
pub fn import_module(m: &HloModuleProto, filename: &str) -> Result<Module> {
    let comps: HashMap<i64, &HloComputationProto> =
        m.computations.iter().map(|c| (c.id, c)).collect();
    let entry = comps
        .get(&m.entry_computation_id)
        .copied()
        .or_else(|| {
            m.computations.iter().find(|c| {
                !m.entry_computation_name.is_empty() && c.name == m.entry_computation_name
            })
        })
        .ok_or_else(|| {
            Error::invalid(format!(
                "{filename}: HLO module has no entry computation (id {}, name {:?})",
                m.entry_computation_id, m.entry_computation_name
            ))
        })?;
    let mut imp = Importer {
        comps,
        f: Function::new("main", Vec::new(), Vec::new()),
        ops: 0,
        active: Vec::new(),
    };
    let params = parameters(entry)?;
    let mut ops = Vec::new();
    let mut arg_types = Vec::new();
    let mut args = Vec::new();
    let mut bound = Vec::new();
    let host = m.host_program_shape.as_ref();
    let mut arg_attrs = Vec::new();
    for (k, p) in params.iter().enumerate() {
        let s = p.shape.as_ref().ok_or_else(|| no_shape(p))?;
        let declared = host.and_then(|h| h.parameters.get(k)).unwrap_or(s);
        leaf_layouts(declared, &mut arg_attrs)?;
        let mut leaves_of_p = Vec::new();
        for t in leaves(s)? {
            let v = imp.f.new_value(t.clone());
            arg_types.push(t);
            args.push(v);
            leaves_of_p.push(v);
        }
        bound.push(leaves_of_p);
    }
    let root = imp.computation(entry, bound, &mut ops)?;
    let root_shape = host.and_then(|h| h.result.as_ref()).or_else(|| {
        entry
            .instructions
            .iter()
            .find(|i| i.id == entry.root_id)
            .and_then(|i| i.shape.as_ref())
    });
    let mut result_attrs = Vec::new();
    if let Some(s) = root_shape {
        leaf_layouts(s, &mut result_attrs)?;
    }
    let result_types = root
        .iter()
        .map(|v| imp.f.ty(*v).clone())
        .collect::<Vec<_>>();
    if arg_attrs.len() != arg_types.len() || result_attrs.len() != result_types.len() {
        return Err(Error::invalid(
            "the entry's declared program shape does not match its parameters and root",
        ));
    }
    ops.push(Operation::new(
        Op::Return,
        root,
        Vec::new(),
        Location::Unknown,
    ));
    let mut f = imp.f;
    f.arg_attrs = arg_attrs;
    f.result_attrs = result_attrs;
    f.arg_types = arg_types;
    f.result_types = result_types;
    f.body = Some(Region { args, ops });
    f.loc = Location::Name {
        name: entry.name.as_str().into(),
        child: None,
    };
    Ok(Module {
        name: (!m.name.is_empty()).then(|| m.name.clone()),
        attrs: Vec::new(),
        functions: vec![f],
    })
}

fn no_shape(i: &HloInstructionProto) -> Error {
    Error::invalid(format!("HLO instruction {} has no shape", i.name))
}

/// The `mhlo.layout_mode` attribute of each leaf of an entry shape: its layout where it is not
/// the default row-major one, as JAX writes an explicit layout in StableHLO (`"{0,1}"`). An
/// entry layout says how the caller's device buffers are laid out, not what the values are;
/// this plugin's buffers are always row-major (and it reports so through PJRT), so the values
/// are read and written in logical order and the layout is kept, visibly, as an attribute.
fn leaf_layouts(s: &ShapeProto, out: &mut Vec<NamedAttrs>) -> Result<()> {
    if s.element_type == 13 {
        return s.tuple_shapes.iter().try_for_each(|t| leaf_layouts(t, out));
    }
    let mut attrs = Vec::new();
    if layout_permutation(s)?.is_some() {
        let m2m: Vec<String> = s
            .layout
            .iter()
            .flat_map(|l| l.minor_to_major.iter().map(i64::to_string))
            .collect();
        log::info!(
            "HLO entry layout {{{}}} of {:?}: values are read in logical order; wgpu buffers are row-major",
            m2m.join(","),
            s.dimensions
        );
        attrs.push((
            "mhlo.layout_mode".to_string(),
            Attr::String(format!("{{{}}}", m2m.join(","))),
        ));
    }
    out.push(attrs);
    Ok(())
}

/// The parameter instructions of a computation in parameter-number order, checked to be
/// numbered 0..n.
fn parameters(c: &HloComputationProto) -> Result<Vec<&HloInstructionProto>> {
    let mut ps: Vec<&HloInstructionProto> = c
        .instructions
        .iter()
        .filter(|i| i.opcode == "parameter")
        .collect();
    ps.sort_by_key(|i| i.parameter_number);
    for (k, p) in ps.iter().enumerate() {
        if p.parameter_number != k as i64 {
            return Err(Error::invalid(format!(
                "computation {}: parameters are not numbered 0..{}",
                c.name,
                ps.len()
            )));
        }
    }
    Ok(ps)
}

struct Importer<'a> {
    comps: HashMap<i64, &'a HloComputationProto>,
    f: Function,
    ops: usize,
    active: Vec<i64>,
}

/// The operands of one instruction: the leaves of each operand.
type Operands = Vec<Vec<ValueId>>;

fn location(i: &HloInstructionProto) -> Location {
    let md = i.metadata.as_ref();
    let name = md
        .map(|m| m.op_name.as_str())
        .filter(|n| !n.is_empty())
        .unwrap_or(&i.name);
    let child = md.filter(|m| !m.source_file.is_empty()).map(|m| {
        Box::new(Location::file_line_col(
            &m.source_file,
            m.source_line.max(0) as u32,
            m.source_column.max(0) as u32,
        ))
    });
    Location::Name {
        name: name.into(),
        child,
    }
}

fn one(v: &[ValueId], what: &str) -> Result<ValueId> {
    match v {
        [x] => Ok(*x),
        _ => Err(Error::invalid(format!(
            "{what} has {} leaves, expected one array",
            v.len()
        ))),
    }
}

fn singles(operands: &Operands) -> Result<Vec<ValueId>> {
    operands
        .iter()
        .enumerate()
        .map(|(k, o)| one(o, &format!("operand {k}")))
        .collect()
}

fn arity(operands: &Operands, n: usize) -> Result<()> {
    if operands.len() == n {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "takes {n} operands, got {}",
            operands.len()
        )))
    }
}

fn unary(opcode: &str) -> Option<UnaryOp> {
    use UnaryOp::*;
    Some(match opcode {
        "abs" => Abs,
        "cbrt" => Cbrt,
        "ceil" => Ceil,
        "clz" => CountLeadingZeros,
        "cosine" => Cosine,
        "erf" => Erf,
        "exponential" => Exponential,
        "exponential-minus-one" => ExponentialMinusOne,
        "floor" => Floor,
        "imag" => Imag,
        "is-finite" => IsFinite,
        "log" => Log,
        "log-plus-one" => LogPlusOne,
        "logistic" => Logistic,
        "not" => Not,
        "negate" => Negate,
        "popcnt" => Popcnt,
        "real" => Real,
        "round-nearest-afz" => RoundNearestAfz,
        "round-nearest-even" => RoundNearestEven,
        "rsqrt" => Rsqrt,
        "sign" => Sign,
        "sine" => Sine,
        "sqrt" => Sqrt,
        "tan" => Tan,
        "tanh" => Tanh,
        _ => return None,
    })
}

fn binary(opcode: &str) -> Option<BinaryOp> {
    use BinaryOp::*;
    Some(match opcode {
        "add" => Add,
        "atan2" => Atan2,
        "complex" => Complex,
        "divide" => Divide,
        "maximum" => Maximum,
        "minimum" => Minimum,
        "multiply" => Multiply,
        "power" => Power,
        "remainder" => Remainder,
        "shift-left" => ShiftLeft,
        "shift-right-arithmetic" => ShiftRightArithmetic,
        "shift-right-logical" => ShiftRightLogical,
        "subtract" => Subtract,
        "and" => And,
        "or" => Or,
        "xor" => Xor,
        _ => return None,
    })
}

fn precision(code: i32) -> Result<Precision> {
    Ok(match code {
        0 => Precision::Default,
        1 => Precision::High,
        2 => Precision::Highest,
        other => return Err(Error::invalid(format!("precision {other}"))),
    })
}

fn precision_config(i: &HloInstructionProto) -> Result<Vec<Precision>> {
    let v: Vec<Precision> = i
        .precision_config
        .as_ref()
        .map(|p| p.operand_precision.iter().map(|&c| precision(c)).collect())
        .transpose()?
        .unwrap_or_default();
    Ok(if v.iter().all(|p| *p == Precision::Default) {
        Vec::new()
    } else {
        v
    })
}

/// Window fields of reduce-window / select-and-scatter / convolution.
struct WindowParts {
    sizes: Vec<i64>,
    strides: Vec<i64>,
    padding: Vec<(i64, i64)>,
    base_dilations: Vec<i64>,
    window_dilations: Vec<i64>,
    reversal: Vec<bool>,
}

fn window(i: &HloInstructionProto, rank: usize) -> WindowParts {
    let one_if_zero = |x: i64| if x == 0 { 1 } else { x };
    match &i.window {
        Some(w) => WindowParts {
            sizes: w.dimensions.iter().map(|d| d.size).collect(),
            strides: w.dimensions.iter().map(|d| one_if_zero(d.stride)).collect(),
            padding: w
                .dimensions
                .iter()
                .map(|d| (d.padding_low, d.padding_high))
                .collect(),
            base_dilations: w
                .dimensions
                .iter()
                .map(|d| one_if_zero(d.base_dilation))
                .collect(),
            window_dilations: w
                .dimensions
                .iter()
                .map(|d| one_if_zero(d.window_dilation))
                .collect(),
            reversal: w.dimensions.iter().map(|d| d.window_reversal).collect(),
        },
        None => WindowParts {
            sizes: vec![1; rank],
            strides: vec![1; rank],
            padding: vec![(0, 0); rank],
            base_dilations: vec![1; rank],
            window_dilations: vec![1; rank],
            reversal: vec![false; rank],
        },
    }
}

impl<'a> Importer<'a> {
    fn comp(&self, id: i64) -> Result<&'a HloComputationProto> {
        self.comps
            .get(&id)
            .copied()
            .ok_or_else(|| Error::invalid(format!("no computation with id {id}")))
    }

    fn called(&self, i: &HloInstructionProto, n: usize) -> Result<Vec<&'a HloComputationProto>> {
        if i.called_computation_ids.len() != n {
            return Err(Error::invalid(format!(
                "calls {} computations, expected {n}",
                i.called_computation_ids.len()
            )));
        }
        i.called_computation_ids
            .iter()
            .map(|&id| self.comp(id))
            .collect()
    }

    fn emit(
        &mut self,
        ops: &mut Vec<Operation>,
        op: Op,
        operands: Vec<ValueId>,
        result_types: Vec<Type>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        self.ops += 1;
        if self.ops > MAX_OPS {
            return Err(Error::resource_exhausted(format!(
                "HLO module imports to more than {MAX_OPS} operations"
            )));
        }
        let results: Vec<ValueId> = result_types
            .into_iter()
            .map(|t| self.f.new_value(t))
            .collect();
        ops.push(Operation::new(op, operands, results.clone(), loc.clone()));
        Ok(results)
    }

    /// Imports the instructions of `c` into `ops` with its parameters bound to `params`;
    /// returns the root's leaves.
    fn computation(
        &mut self,
        c: &'a HloComputationProto,
        params: Operands,
        ops: &mut Vec<Operation>,
    ) -> Result<Vec<ValueId>> {
        if self.active.contains(&c.id) {
            return Err(Error::invalid(format!(
                "computation {} calls itself",
                c.name
            )));
        }
        if self.active.len() >= MAX_DEPTH {
            return Err(Error::invalid(format!(
                "computations nest deeper than {MAX_DEPTH}"
            )));
        }
        self.active.push(c.id);
        let r = self.computation_body(c, params, ops);
        self.active.pop();
        r
    }

    fn computation_body(
        &mut self,
        c: &'a HloComputationProto,
        params: Operands,
        ops: &mut Vec<Operation>,
    ) -> Result<Vec<ValueId>> {
        let mut values: HashMap<i64, (Vec<ValueId>, Type)> = HashMap::new();
        for i in &c.instructions {
            let v = self
                .instruction(i, &params, &values, ops)
                .map_err(|e| e.context(format!("{}: {} = {}", c.name, i.name, i.opcode)))?;
            let ty = shape::ir_type(i.shape.as_ref().ok_or_else(|| no_shape(i))?)?;
            values.insert(local_id(i.id), (v, ty));
        }
        values
            .remove(&local_id(c.root_id))
            .map(|(v, _)| v)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "computation {}: root id {} is not one of its instructions",
                    c.name, c.root_id
                ))
            })
    }

    /// A region whose arguments are fresh values of `c`'s parameter leaves.
    fn region(&mut self, c: &'a HloComputationProto, loc: &Location) -> Result<Region> {
        let mut args = Vec::new();
        let mut bound = Vec::new();
        for p in parameters(c)? {
            let s = p.shape.as_ref().ok_or_else(|| no_shape(p))?;
            let vs: Vec<ValueId> = leaves(s)?
                .into_iter()
                .map(|t| self.f.new_value(t))
                .collect();
            args.extend(vs.iter().copied());
            bound.push(vs);
        }
        self.region_with(c, args, bound, loc)
    }

    /// A region with the given arguments, `c`'s parameters bound to `bound`.
    fn region_with(
        &mut self,
        c: &'a HloComputationProto,
        args: Vec<ValueId>,
        bound: Operands,
        loc: &Location,
    ) -> Result<Region> {
        let mut ops = Vec::new();
        let root = self.computation(c, bound, &mut ops)?;
        ops.push(Operation::new(Op::Return, root, Vec::new(), loc.clone()));
        Ok(Region { args, ops })
    }

    fn instruction(
        &mut self,
        i: &'a HloInstructionProto,
        params: &Operands,
        values: &HashMap<i64, (Vec<ValueId>, Type)>,
        ops: &mut Vec<Operation>,
    ) -> Result<Vec<ValueId>> {
        let operand_values = i
            .operand_ids
            .iter()
            .map(|id| {
                values.get(&local_id(*id)).ok_or_else(|| {
                    Error::invalid(format!("operand id {id} is not defined before its use"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let operands: Operands = operand_values.iter().map(|(v, _)| v.clone()).collect();
        let s = i.shape.as_ref().ok_or_else(|| no_shape(i))?;
        let loc = location(i);
        let op = i.opcode.as_str();
        if op == "parameter" {
            let p = usize::try_from(i.parameter_number)
                .ok()
                .and_then(|n| params.get(n))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "parameter {} of a computation given {} operands",
                        i.parameter_number,
                        params.len()
                    ))
                })?;
            let want = leaves(s)?;
            if want.len() != p.len() || want.iter().zip(p).any(|(t, v)| self.f.ty(*v) != t) {
                return Err(Error::invalid(format!(
                    "parameter {} has shape {}, its argument differs",
                    i.parameter_number,
                    shape::ir_type(s)?
                )));
            }
            return Ok(p.clone());
        }
        let results = leaves(s)?;
        if let Some(u) = unary(op) {
            arity(&operands, 1)?;
            return self.emit(ops, Op::Unary(u), singles(&operands)?, results, &loc);
        }
        if let Some(b) = binary(op) {
            arity(&operands, 2)?;
            return self.emit(ops, Op::Binary(b), singles(&operands)?, results, &loc);
        }
        let result_tensor = || -> Result<TensorType> { shape::tensor_type(s) };
        let simple = match op {
            "tuple" => return Ok(operands.concat()),
            "get-tuple-element" => {
                arity(&operands, 1)?;
                let (leaves, ty) = operand_values[0];
                return tuple_element(leaves, ty, i.tuple_index);
            }
            "copy" | "domain" => {
                arity(&operands, 1)?;
                return Ok(operands[0].clone());
            }
            "call" | "fusion" => {
                let called = self.called(i, 1)?;
                let c = called
                    .first()
                    .copied()
                    .ok_or_else(|| Error::invalid("call without a computation"))?;
                return self.computation(c, operands, ops);
            }
            "constant" => return self.constant(i, s, ops, &loc),
            "compare" => Op::Compare {
                direction: ComparisonDirection::from_name(&i.comparison_direction).ok_or_else(
                    || Error::invalid(format!("comparison direction {:?}", i.comparison_direction)),
                )?,
                compare_type: self.compare_type(i, &operands)?,
            },
            "select" => Op::Select,
            "clamp" => Op::Clamp,
            "convert" => Op::Convert,
            "bitcast-convert" => Op::BitcastConvert,
            "reduce-precision" => Op::ReducePrecision {
                exponent_bits: i.exponent_bits.into(),
                mantissa_bits: i.mantissa_bits.into(),
            },
            "iota" => Op::Iota {
                dimension: dim0(i)?,
            },
            "broadcast" => Op::BroadcastInDim {
                dimensions: i.dimensions.clone(),
            },
            "reshape" => Op::Reshape,
            "bitcast" => {
                let from = operands
                    .first()
                    .and_then(|o| o.first())
                    .map(|v| self.f.ty(*v));
                let to = result_tensor()?;
                if from.and_then(Type::as_tensor).map(|t| t.dtype) != Some(to.dtype) {
                    return Err(Error::unimplemented(
                        "bitcast that changes the element type (use bitcast-convert)",
                    ));
                }
                Op::Reshape
            }
            "transpose" => Op::Transpose {
                permutation: i.dimensions.clone(),
            },
            "slice" => Op::Slice {
                start: i.slice_dimensions.iter().map(|d| d.start).collect(),
                limit: i.slice_dimensions.iter().map(|d| d.limit).collect(),
                strides: i.slice_dimensions.iter().map(|d| d.stride).collect(),
            },
            "dynamic-slice" => Op::DynamicSlice {
                slice_sizes: i.dynamic_slice_sizes.clone(),
            },
            "dynamic-update-slice" => Op::DynamicUpdateSlice,
            "concatenate" => Op::Concatenate {
                dimension: dim0(i)?,
            },
            "pad" => {
                let pc = i
                    .padding_config
                    .as_ref()
                    .map(|p| &p.dimensions[..])
                    .unwrap_or(&[]);
                Op::Pad {
                    low: pc.iter().map(|d| d.edge_padding_low).collect(),
                    high: pc.iter().map(|d| d.edge_padding_high).collect(),
                    interior: pc.iter().map(|d| d.interior_padding).collect(),
                }
            }
            "reverse" => Op::Reverse {
                dimensions: i.dimensions.clone(),
            },
            "dot" => {
                let d = i.dot_dimension_numbers.clone().unwrap_or_default();
                Op::DotGeneral {
                    dimension_numbers: DotDimensionNumbers {
                        lhs_batching_dimensions: d.lhs_batch_dimensions,
                        rhs_batching_dimensions: d.rhs_batch_dimensions,
                        lhs_contracting_dimensions: d.lhs_contracting_dimensions,
                        rhs_contracting_dimensions: d.rhs_contracting_dimensions,
                    },
                    precision_config: precision_config(i)?,
                    algorithm: None,
                }
            }
            "convolution" => {
                let d = i.convolution_dimension_numbers.clone().unwrap_or_default();
                let w = window(i, d.input_spatial_dimensions.len());
                Op::Convolution(Box::new(Convolution {
                    window_strides: w.strides,
                    padding: w.padding,
                    lhs_dilation: w.base_dilations,
                    rhs_dilation: w.window_dilations,
                    window_reversal: w.reversal,
                    dimension_numbers: ConvDimensionNumbers {
                        input_batch_dimension: d.input_batch_dimension,
                        input_feature_dimension: d.input_feature_dimension,
                        input_spatial_dimensions: d.input_spatial_dimensions,
                        kernel_input_feature_dimension: d.kernel_input_feature_dimension,
                        kernel_output_feature_dimension: d.kernel_output_feature_dimension,
                        kernel_spatial_dimensions: d.kernel_spatial_dimensions,
                        output_batch_dimension: d.output_batch_dimension,
                        output_feature_dimension: d.output_feature_dimension,
                        output_spatial_dimensions: d.output_spatial_dimensions,
                    },
                    feature_group_count: i.feature_group_count.max(1),
                    batch_group_count: i.batch_group_count.max(1),
                    precision_config: precision_config(i)?,
                }))
            }
            "gather" => {
                let d = i.gather_dimension_numbers.clone().unwrap_or_default();
                Op::Gather {
                    dimension_numbers: GatherDimensionNumbers {
                        offset_dims: d.offset_dims,
                        collapsed_slice_dims: d.collapsed_slice_dims,
                        operand_batching_dims: d.operand_batching_dims,
                        start_indices_batching_dims: d.start_indices_batching_dims,
                        start_index_map: d.start_index_map,
                        index_vector_dim: d.index_vector_dim,
                    },
                    slice_sizes: i.gather_slice_sizes.clone(),
                    indices_are_sorted: i.indices_are_sorted,
                }
            }
            "fft" => Op::Fft {
                fft_type: match i.fft_type {
                    0 => FftType::Fft,
                    1 => FftType::Ifft,
                    2 => FftType::Rfft,
                    3 => FftType::Irfft,
                    other => return Err(Error::invalid(format!("fft type {other}"))),
                },
                fft_length: i.fft_length.clone(),
            },
            "cholesky" => Op::Cholesky {
                lower: i.cholesky_options.as_ref().is_some_and(|o| o.lower),
            },
            "triangular-solve" => {
                let o = i.triangular_solve_options.clone().unwrap_or_default();
                Op::TriangularSolve {
                    left_side: o.left_side,
                    lower: o.lower,
                    unit_diagonal: o.unit_diagonal,
                    transpose_a: match o.transpose_a {
                        1 => Transpose::NoTranspose,
                        2 => Transpose::Transpose,
                        3 => Transpose::Adjoint,
                        other => {
                            return Err(Error::invalid(format!(
                                "triangular-solve transpose_a {other}"
                            )))
                        }
                    },
                }
            }
            "batch-norm-inference" => Op::BatchNormInference {
                epsilon: i.epsilon.into(),
                feature_index: i.feature_index,
            },
            "batch-norm-training" => Op::BatchNormTraining {
                epsilon: i.epsilon.into(),
                feature_index: i.feature_index,
            },
            "batch-norm-grad" => Op::BatchNormGrad {
                epsilon: i.epsilon.into(),
                feature_index: i.feature_index,
            },
            "rng-bit-generator" => Op::RngBitGenerator {
                algorithm: match i.rng_algorithm {
                    0 => RngAlgorithm::Default,
                    1 => RngAlgorithm::ThreeFry,
                    2 => RngAlgorithm::Philox,
                    other => return Err(Error::invalid(format!("rng algorithm {other}"))),
                },
            },
            "get-dimension-size" => Op::GetDimensionSize {
                dimension: dim0(i)?,
            },
            "optimization-barrier" => {
                let flat = operands.concat();
                return self.emit(ops, Op::OptimizationBarrier, flat, results, &loc);
            }
            "after-all" => {
                let flat = operands.concat();
                return self.emit(ops, Op::AfterAll, flat, results, &loc);
            }
            "replica-id" => Op::ReplicaId,
            "partition-id" => Op::PartitionId,
            "top-k" | "topk" => Op::TopK {
                k: i.k,
                largest: i.largest,
            },
            "rng" => return self.rng(i, s, &operands, ops, &loc),
            "custom-call" => return self.custom_call(i, operands, results, ops, &loc),
            "reduce" | "reduce-window" | "sort" | "scatter" | "map" | "select-and-scatter" => {
                return self.with_region(i, operands, results, ops, &loc)
            }
            "while" => return self.while_loop(i, operands, results, ops, &loc),
            "conditional" => return self.conditional(i, operands, results, ops, &loc),
            other => {
                return Err(Error::unimplemented(format!("HLO opcode `{other}`")));
            }
        };
        let flat = singles(&operands)?;
        self.emit(ops, simple, flat, results, &loc)
    }

    /// `comparison_type` when written; else `order=TOTAL` on floats as `TOTALORDER` (on
    /// integers every order is total, and the type follows from the element type).
    fn compare_type(
        &self,
        i: &HloInstructionProto,
        operands: &Operands,
    ) -> Result<Option<ComparisonType>> {
        if !i.comparison_type.is_empty() {
            let t = i.comparison_type.as_str();
            return ComparisonType::from_name(t)
                .map(Some)
                .ok_or_else(|| Error::invalid(format!("comparison type {t:?}")));
        }
        let float = operands
            .first()
            .and_then(|o| o.first())
            .and_then(|v| self.f.ty(*v).as_tensor())
            .is_some_and(|t| t.dtype.is_float() || t.dtype.is_complex());
        match i.comparison_order.as_str() {
            "" | "PARTIAL" => Ok(None),
            "TOTAL" => Ok(float.then_some(ComparisonType::TotalOrder)),
            other => Err(Error::invalid(format!("comparison order {other:?}"))),
        }
    }

    fn constant(
        &mut self,
        i: &HloInstructionProto,
        s: &ShapeProto,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        let lit = i
            .literal
            .as_ref()
            .ok_or_else(|| Error::invalid("constant without a literal"))?;
        self.literal(lit, s, ops, loc)
    }

    /// The leaves of a literal: one constant per array (read in its layout's order, then
    /// transposed to logical order where the layout is not row-major).
    fn literal(
        &mut self,
        lit: &super::schema::LiteralProto,
        s: &ShapeProto,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        match s.element_type {
            13 => {
                if lit.tuple_literals.len() != s.tuple_shapes.len() {
                    return Err(Error::invalid(format!(
                        "tuple constant has {} elements, its shape {}",
                        lit.tuple_literals.len(),
                        s.tuple_shapes.len()
                    )));
                }
                let mut out = Vec::new();
                for (l, es) in lit.tuple_literals.iter().zip(&s.tuple_shapes) {
                    out.extend(self.literal(l, es, ops, loc)?);
                }
                Ok(out)
            }
            17 => self.emit(ops, Op::AfterAll, Vec::new(), vec![Type::Token], loc),
            _ => {
                // The literal's own shape carries the layout its data is stored in.
                let stored = lit.shape.as_ref().unwrap_or(s);
                if stored.dimensions != s.dimensions || stored.element_type != s.element_type {
                    return Err(Error::invalid(
                        "constant's literal shape differs from the instruction's",
                    ));
                }
                let physical = shape::physical_literal(lit, stored)?;
                let pty = Type::Tensor(physical.ty.clone());
                let c = self.emit(ops, Op::Constant(physical), Vec::new(), vec![pty], loc)?;
                match layout_permutation(stored)? {
                    None => Ok(c),
                    Some(permutation) => self.emit(
                        ops,
                        Op::Transpose { permutation },
                        c,
                        vec![Type::Tensor(shape::tensor_type(s)?)],
                        loc,
                    ),
                }
            }
        }
    }

    /// `rng(a, b)` with the result shape as the IR's third operand.
    fn rng(
        &mut self,
        i: &HloInstructionProto,
        s: &ShapeProto,
        operands: &Operands,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        arity(operands, 2)?;
        let distribution = match i.distribution {
            1 => RngDistribution::Uniform,
            2 => RngDistribution::Normal,
            other => return Err(Error::invalid(format!("rng distribution {other}"))),
        };
        let dims = &s.dimensions;
        let shape_ty = TensorType::new(vec![dims.len() as i64], ElementType::I64);
        let scalars: Vec<Scalar> = dims.iter().map(|&d| Scalar::Int(d.into())).collect();
        let shape_lit = Literal::from_scalars(shape_ty.clone(), &scalars)?;
        let shape_v = self.emit(
            ops,
            Op::Constant(shape_lit),
            Vec::new(),
            vec![Type::Tensor(shape_ty)],
            loc,
        )?;
        let mut flat = singles(operands)?;
        flat.extend(shape_v);
        self.emit(ops, Op::Rng { distribution }, flat, leaves(s)?, loc)
    }

    fn custom_call(
        &mut self,
        i: &HloInstructionProto,
        operands: Operands,
        results: Vec<Type>,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        if !i.called_computation_ids.is_empty() {
            return Err(Error::unimplemented(format!(
                "custom-call target {:?} with called computations",
                i.custom_call_target
            )));
        }
        let backend_config = match std::str::from_utf8(&i.backend_config) {
            Ok("") => None,
            Ok(text) => Some(crate::ir::Attr::String(text.to_string())),
            Err(_) => {
                return Err(Error::unimplemented(format!(
                    "custom-call target {:?} with a binary backend_config",
                    i.custom_call_target
                )))
            }
        };
        let api_version = CustomCallApiVersion::from_code(i.custom_call_api_version.into())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "custom-call api version {}",
                    i.custom_call_api_version
                ))
            })?;
        let op = Op::CustomCall(Box::new(CustomCall {
            call_target_name: i.custom_call_target.clone(),
            has_side_effect: i.custom_call_has_side_effect,
            backend_config,
            api_version,
            called_computations: Vec::new(),
            operand_layouts: None,
            result_layouts: None,
            output_operand_aliases: Vec::new(),
        }));
        self.emit(ops, op, operands.concat(), results, loc)
    }

    /// Ops whose called computations are regions with arguments: reduce, reduce-window, sort,
    /// scatter, map, select-and-scatter.
    fn with_region(
        &mut self,
        i: &'a HloInstructionProto,
        operands: Operands,
        results: Vec<Type>,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        let flat = singles(&operands)?;
        let rank = flat
            .first()
            .and_then(|v| self.f.ty(*v).as_tensor())
            .map_or(0, TensorType::rank);
        let (op, comps) = match i.opcode.as_str() {
            "reduce" => (
                Op::Reduce {
                    dimensions: i.dimensions.clone(),
                },
                self.called(i, 1)?,
            ),
            "reduce-window" => {
                let w = window(i, rank);
                (
                    Op::ReduceWindow {
                        window_dimensions: w.sizes,
                        window_strides: w.strides,
                        base_dilations: w.base_dilations,
                        window_dilations: w.window_dilations,
                        padding: w.padding,
                    },
                    self.called(i, 1)?,
                )
            }
            "select-and-scatter" => {
                let w = window(i, rank);
                (
                    Op::SelectAndScatter {
                        window_dimensions: w.sizes,
                        window_strides: w.strides,
                        padding: w.padding,
                    },
                    self.called(i, 2)?,
                )
            }
            "sort" => (
                Op::Sort {
                    dimension: dim0(i)?,
                    is_stable: i.is_stable,
                },
                self.called(i, 1)?,
            ),
            "map" => (
                Op::Map {
                    dimensions: (0..rank as i64).collect(),
                },
                self.called(i, 1)?,
            ),
            _ => {
                let d = i.scatter_dimension_numbers.clone().unwrap_or_default();
                (
                    Op::Scatter {
                        dimension_numbers: ScatterDimensionNumbers {
                            update_window_dims: d.update_window_dims,
                            inserted_window_dims: d.inserted_window_dims,
                            input_batching_dims: d.input_batching_dims,
                            scatter_indices_batching_dims: d.scatter_indices_batching_dims,
                            scatter_dims_to_operand_dims: d.scatter_dims_to_operand_dims,
                            index_vector_dim: d.index_vector_dim,
                        },
                        indices_are_sorted: i.indices_are_sorted,
                        unique_indices: i.unique_indices,
                    },
                    self.called(i, 1)?,
                )
            }
        };
        let regions = comps
            .into_iter()
            .map(|c| self.region(c, loc))
            .collect::<Result<Vec<_>>>()?;
        let out = self.emit(ops, op, flat, results, loc)?;
        if let Some(last) = ops.last_mut() {
            last.regions = regions;
        }
        Ok(out)
    }

    /// `while`: the loop state (one tuple in HLO) flattened into the IR's operands; the
    /// condition and body computations become regions over the flattened state.
    fn while_loop(
        &mut self,
        i: &'a HloInstructionProto,
        operands: Operands,
        results: Vec<Type>,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        arity(&operands, 1)?;
        // HLO lists the body first, then the condition; the IR's regions are cond, body.
        let comps = self.called(i, 2)?;
        let state = operands.concat();
        let mut regions = Vec::new();
        for c in comps.into_iter().rev() {
            let args: Vec<ValueId> = state
                .iter()
                .map(|v| {
                    let t = self.f.ty(*v).clone();
                    self.f.new_value(t)
                })
                .collect();
            regions.push(self.region_with(c, args.clone(), vec![args], loc)?);
        }
        let out = self.emit(ops, Op::While, state, results, loc)?;
        if let Some(last) = ops.last_mut() {
            last.regions = regions;
        }
        Ok(out)
    }

    /// `conditional`: `if` on a predicate (true branch first), `case` on an index. Each
    /// branch computation's parameter is bound to its operand, captured from outside.
    fn conditional(
        &mut self,
        i: &'a HloInstructionProto,
        operands: Operands,
        results: Vec<Type>,
        ops: &mut Vec<Operation>,
        loc: &Location,
    ) -> Result<Vec<ValueId>> {
        let n = i.called_computation_ids.len();
        arity(&operands, n + 1)?;
        let comps = self.called(i, n)?;
        let selector = one(&operands[0], "the branch selector")?;
        let is_pred = self
            .f
            .ty(selector)
            .as_tensor()
            .is_some_and(|t| t.dtype == ElementType::Pred);
        let mut regions = Vec::new();
        for (c, arg) in comps.into_iter().zip(operands.iter().skip(1)) {
            let mut body = Vec::new();
            let root = self.computation(c, vec![arg.clone()], &mut body)?;
            body.push(Operation::new(Op::Return, root, Vec::new(), loc.clone()));
            regions.push(Region {
                args: Vec::new(),
                ops: body,
            });
        }
        let op = if is_pred {
            if regions.len() != 2 {
                return Err(Error::invalid(
                    "a predicated conditional needs two branches",
                ));
            }
            Op::If
        } else {
            Op::Case
        };
        let out = self.emit(ops, op, vec![selector], results, loc)?;
        if let Some(last) = ops.last_mut() {
            last.regions = regions;
        }
        Ok(out)
    }
}

/// The leaves of element `index` of a tuple value.
fn tuple_element(tuple: &[ValueId], ty: &Type, index: i64) -> Result<Vec<ValueId>> {
    let Type::Tuple(elems) = ty else {
        return Err(Error::invalid("get-tuple-element of a non-tuple"));
    };
    let k = usize::try_from(index)
        .ok()
        .filter(|&k| k < elems.len())
        .ok_or_else(|| {
            Error::invalid(format!(
                "tuple index {index} out of range for {} elements",
                elems.len()
            ))
        })?;
    let start: usize = elems[..k].iter().map(shape::leaf_count).sum();
    let len = shape::leaf_count(&elems[k]);
    tuple
        .get(start..start + len)
        .map(<[ValueId]>::to_vec)
        .ok_or_else(|| Error::invalid("tuple value has fewer leaves than its shape"))
}

fn dim0(i: &HloInstructionProto) -> Result<i64> {
    i.dimensions
        .first()
        .copied()
        .ok_or_else(|| Error::invalid("missing `dimensions`"))
}

/// An instruction id within its computation. XLA numbers instructions
/// `(computation id << 32) | local id`, and TensorFlow's bridge names some operands (and
/// roots) by the local id alone; ids are unique within a computation either way.
fn local_id(id: i64) -> i64 {
    id & 0xffff_ffff
}
