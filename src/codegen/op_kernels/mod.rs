//! Kernels for ops that are not fused with their neighbours: one op, one kernel, reading the
//! op's operands (as materialized buffers) and writing its results. Each op family lives in
//! its own file; `emit` dispatches on the op.
//!
//! Contract: the returned kernel's `inputs` are bindings of values among the op's operands
//! (each distinct operand once, in any order) and its `outputs` are exactly the op's results,
//! in order. Bodies of region-carrying ops (scatter's combiner, sort's comparator, ...) are
//! emitted as WGSL functions with `reduce_kernel::emit_body_function`.

pub mod fft;
pub mod linalg;
pub mod map;
pub mod per_element;
pub mod reduce_window;
pub mod scan;
pub mod scatter;
pub mod select_and_scatter;
pub mod sort;
pub mod update;

use std::collections::HashMap;

use super::kernel::Kernel;
use super::loop_kernel::Target;
use crate::error::Result;
use crate::ir::{Function, Op, Operation, ValueId};

/// The kernel for `op`, or `None` when no standalone kernel handles it.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<Kernel>> {
    match &op.op {
        Op::Fft { .. } => fft::emit(name, f, defs, op, target).map(Some),
        Op::Map { .. } => map::emit(name, f, defs, op, target).map(Some),
        Op::Scatter { .. } => scatter::emit(name, f, defs, op, target).map(Some),
        Op::Cholesky { .. } => linalg::cholesky(name, f, op, target).map(Some),
        Op::TriangularSolve { .. } => linalg::triangular_solve(name, f, op, target).map(Some),
        Op::Sort { .. } | Op::TopK { .. } => sort::emit(name, f, defs, op, target).map(Some),
        Op::ReduceWindow { .. } => reduce_window::emit(name, f, defs, op, target).map(Some),
        Op::SelectAndScatter { .. } => {
            select_and_scatter::emit(name, f, defs, op, target).map(Some)
        }
        _ => Ok(None),
    }
}
