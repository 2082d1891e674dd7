//! The `dot_general` emitter. Every output element is a loop over the contracting dimensions
//! with the operands' producers computed inline; the loop emitter around it handles packing
//! and the dispatch grid.

use std::collections::HashMap;

use super::kernel::Kernel;
use super::loop_kernel::{self, Target};
use crate::error::Result;
use crate::fusion::Group;
use crate::ir::{Function, Operation, ValueId};

/// Emits the kernel for `group`, whose root `op` is a `dot_general`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let mut g = group.clone();
    g.members.extend(op.results.iter().copied());
    loop_kernel::emit(name, f, defs, &g, target)
}
