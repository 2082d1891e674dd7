//! Check extraction for the conformance runner: the `check.*` ops and `check.expect_*` custom
//! calls are removed from the program and the values they inspect become extra results, to be
//! compared on the host after execution.

use crate::error::{Error, Result};
use crate::ir::{CheckOp, Function, Literal, Location, Op, Operation};

/// How a check compares.
#[derive(Clone, Debug, PartialEq)]
pub enum Comparison {
    /// Element-wise `==` (IEEE for floats: NaN never equals NaN).
    Eq,
    /// |actual - expected| <= tolerance (element-wise; complex parts separately).
    AlmostEq {
        /// Absolute tolerance.
        tolerance: f64,
    },
    /// ULP distance within [min, max].
    Close {
        /// Largest allowed distance.
        max_ulp: u64,
        /// Smallest required distance.
        min_ulp: u64,
    },
}

/// What a check's actual value is compared against.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// Another result of the program, by index.
    Result(usize),
    /// A constant.
    Const(Literal),
}

/// One extracted check.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// Which check op it was (`check.expect_close`, ...), for reports.
    pub name: String,
    /// The comparison.
    pub comparison: Comparison,
    /// Index of the result holding the actual value.
    pub actual: usize,
    /// The expected value.
    pub expected: Expected,
    /// Where the check is in the source.
    pub loc: Location,
}

fn custom_check(op: &Operation) -> Option<Comparison> {
    let Op::CustomCall(c) = &op.op else {
        return None;
    };
    match c.call_target_name.as_str() {
        "check.expect_eq" => Some(Comparison::Eq),
        "check.expect_almost_eq" => Some(Comparison::AlmostEq { tolerance: 1e-3 }),
        "check.expect_close" => Some(Comparison::Close {
            max_ulp: 3,
            min_ulp: 0,
        }),
        _ => None,
    }
}

/// Removes the checks of `f`'s body (top level only) and appends the values they read to the
/// function's results. Returns the checks, in program order.
pub fn extract_checks(f: &mut Function) -> Result<Vec<Check>> {
    let Some(mut body) = f.body.take() else {
        return Ok(Vec::new());
    };
    let mut checks = Vec::new();
    let mut extra = Vec::new();
    let base = f.result_types.len();
    let mut kept = Vec::with_capacity(body.ops.len());
    for op in body.ops.drain(..) {
        let comparison = match &op.op {
            Op::Check(c) => match c {
                CheckOp::ExpectEq | CheckOp::ExpectEqConst(_) => Comparison::Eq,
                CheckOp::ExpectAlmostEq { tolerance }
                | CheckOp::ExpectAlmostEqConst { tolerance, .. } => Comparison::AlmostEq {
                    tolerance: *tolerance,
                },
                CheckOp::ExpectClose {
                    max_ulp_difference,
                    min_ulp_difference,
                } => Comparison::Close {
                    max_ulp: *max_ulp_difference,
                    min_ulp: *min_ulp_difference,
                },
                CheckOp::ExpectSerializedEq { .. } => {
                    return Err(Error::unimplemented(format!(
                        "{}: check.expect_serialized_eq (interpreter probes)",
                        op.loc
                    )))
                }
            },
            _ => match custom_check(&op) {
                Some(c) => c,
                None => {
                    kept.push(op);
                    continue;
                }
            },
        };
        let name = op.name();
        let name = if let Op::CustomCall(c) = &op.op {
            c.call_target_name.clone()
        } else {
            name
        };
        let Some(&actual) = op.operands.first() else {
            return Err(Error::invalid(format!(
                "{}: {name} without operands",
                op.loc
            )));
        };
        let actual_index = base + extra.len();
        extra.push(actual);
        let expected = match &op.op {
            Op::Check(CheckOp::ExpectEqConst(l))
            | Op::Check(CheckOp::ExpectAlmostEqConst { expected: l, .. }) => {
                Expected::Const(l.clone())
            }
            _ => {
                let Some(&e) = op.operands.get(1) else {
                    return Err(Error::invalid(format!(
                        "{}: {name} needs an expected operand",
                        op.loc
                    )));
                };
                extra.push(e);
                Expected::Result(base + extra.len() - 1)
            }
        };
        checks.push(Check {
            name,
            comparison,
            actual: actual_index,
            expected,
            loc: op.loc.clone(),
        });
    }
    body.ops = kept;
    match body.ops.last_mut() {
        Some(ret) if ret.op == Op::Return => ret.operands.extend(extra.iter().copied()),
        _ => {
            return Err(Error::invalid(format!(
                "@{}: body does not end in a return",
                f.name
            )))
        }
    }
    for v in &extra {
        f.result_types.push(f.ty(*v).clone());
        f.result_attrs.push(Vec::new());
    }
    f.body = Some(body);
    Ok(checks)
}
