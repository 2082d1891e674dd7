//! Pretty forms of the ops that make up most of a dump (`func.return`, `func.call`,
//! constants, elementwise ops, `compare`, shape ops, `dot_general`, `custom_call`), written
//! as `stablehlo-opt` prints them; everything else goes through the generic form.

use std::fmt::Write;

use super::attrs::{write_attr_dict, write_dense, write_dot_algorithm_fields, write_symbol};
use super::Printer;
use crate::ir::generic::{op_attrs, op_name};
use crate::ir::{Op, Operation, Type};

/// `[1, 2]`.
fn ints(out: &mut String, v: &[i64]) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{x}");
    }
    out.push(']');
}

impl Printer<'_> {
    /// The pretty form of `op`; false if it is printed generically. `top` is true at function
    /// level (where the terminator is `func.return`).
    pub(super) fn pretty(
        &mut self,
        op: &Operation,
        top: bool,
        ins: &[Type],
        outs: &[Type],
    ) -> bool {
        if !op.regions.is_empty() {
            return false;
        }
        let single = outs.len() == 1;
        match &op.op {
            Op::Return => {
                self.out.push_str(if top {
                    "func.return"
                } else {
                    "stablehlo.return"
                });
                if !op.operands.is_empty() {
                    self.out.push(' ');
                    self.values(&op.operands);
                    self.out.push_str(" : ");
                    self.types(ins);
                }
            }
            Op::Constant(l) if outs == [Type::Tensor(l.ty.clone())] => {
                self.out.push_str("stablehlo.constant ");
                write_dense(&mut self.out, l);
            }
            Op::Call { callee } => {
                self.out.push_str("func.call ");
                write_symbol(&mut self.out, callee);
                self.out.push('(');
                self.values(&op.operands);
                self.out.push_str(") : ");
                self.function_type(ins, outs);
            }
            Op::Unary(_) | Op::Binary(_) if single => {
                let name = op_name(&op.op);
                if !name.starts_with("stablehlo.") {
                    return false;
                }
                let _ = write!(self.out, "{name} ");
                self.values(&op.operands);
                self.out.push_str(" : ");
                if ins.iter().all(|t| outs.first() == Some(t)) {
                    self.types(outs);
                } else {
                    self.function_type(ins, outs);
                }
            }
            Op::Compare {
                direction,
                compare_type,
            } if op.operands.len() == 2 => {
                let _ = write!(self.out, "stablehlo.compare {direction}, ");
                self.values(&op.operands);
                if let Some(t) = compare_type {
                    let _ = write!(self.out, ", {t}");
                }
                self.tail(ins, outs);
            }
            Op::Convert | Op::BitcastConvert | Op::Reshape | Op::Select | Op::Clamp if single => {
                let _ = write!(self.out, "{} ", op_name(&op.op));
                self.values(&op.operands);
                self.tail(ins, outs);
            }
            Op::BroadcastInDim { dimensions: d }
            | Op::Transpose { permutation: d }
            | Op::Reverse { dimensions: d }
                if single && op.operands.len() == 1 =>
            {
                let _ = write!(self.out, "{} ", op_name(&op.op));
                self.values(&op.operands);
                self.out.push_str(", dims = ");
                ints(&mut self.out, d);
                self.tail(ins, outs);
            }
            Op::Iota { dimension } if single && op.operands.is_empty() => {
                let _ = write!(self.out, "stablehlo.iota dim = {dimension} : ");
                self.types(outs);
            }
            Op::Concatenate { dimension } if single && !op.operands.is_empty() => {
                self.out.push_str("stablehlo.concatenate ");
                self.values(&op.operands);
                let _ = write!(self.out, ", dim = {dimension}");
                self.tail(ins, outs);
            }
            Op::Slice {
                start,
                limit,
                strides,
            } if single
                && op.operands.len() == 1
                && start.len() == limit.len()
                && start.len() == strides.len() =>
            {
                self.out.push_str("stablehlo.slice ");
                self.values(&op.operands);
                self.out.push_str(" [");
                for (i, ((s, l), st)) in start.iter().zip(limit).zip(strides).enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    let _ = write!(self.out, "{s}:{l}");
                    if *st != 1 {
                        let _ = write!(self.out, ":{st}");
                    }
                }
                self.out.push(']');
                self.tail(ins, outs);
            }
            Op::DotGeneral {
                dimension_numbers: d,
                precision_config,
                algorithm,
            } if single && op.operands.len() == 2 => {
                self.out.push_str("stablehlo.dot_general ");
                self.values(&op.operands);
                self.out.push_str(", ");
                if !d.lhs_batching_dimensions.is_empty() || !d.rhs_batching_dimensions.is_empty() {
                    self.out.push_str("batching_dims = ");
                    ints(&mut self.out, &d.lhs_batching_dimensions);
                    self.out.push_str(" x ");
                    ints(&mut self.out, &d.rhs_batching_dimensions);
                    self.out.push_str(", ");
                }
                self.out.push_str("contracting_dims = ");
                ints(&mut self.out, &d.lhs_contracting_dimensions);
                self.out.push_str(" x ");
                ints(&mut self.out, &d.rhs_contracting_dimensions);
                if !precision_config.is_empty() {
                    let names: Vec<&str> = precision_config.iter().map(|p| p.name()).collect();
                    let _ = write!(self.out, ", precision = [{}]", names.join(", "));
                }
                if let Some(a) = algorithm {
                    self.out.push_str(", algorithm = <");
                    write_dot_algorithm_fields(&mut self.out, a);
                    self.out.push('>');
                }
                self.tail(ins, outs);
            }
            Op::CustomCall(c) => {
                self.out.push_str("stablehlo.custom_call ");
                write_symbol(&mut self.out, &c.call_target_name);
                self.out.push('(');
                self.values(&op.operands);
                self.out.push(')');
                let attrs: Vec<_> = op_attrs(&op.op)
                    .into_iter()
                    .filter(|(n, _)| n != "call_target_name")
                    .collect();
                if !attrs.is_empty() {
                    self.out.push(' ');
                    write_attr_dict(&mut self.out, &attrs);
                }
                self.out.push_str(" : ");
                self.function_type(ins, outs);
            }
            _ => return false,
        }
        true
    }

    /// ` : (ins) -> outs`.
    fn tail(&mut self, ins: &[Type], outs: &[Type]) {
        self.out.push_str(" : ");
        self.function_type(ins, outs);
    }
}
