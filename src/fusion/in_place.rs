//! Which updates run in place: a `dynamic_update_slice` or `scatter` that writes a small part
//! of a large buffer becomes a step that updates that buffer where it lies instead of a kernel
//! that rewrites all of it. Fusion decides (such an op is not fused into a consumer), the
//! lowering and the update kernels follow.

use crate::ir::{ElementType, Function, Op, Operation};

/// Whether `op` is a `dynamic_update_slice` worth running in place: 32/64-bit elements and an
/// update at most a quarter of the operand.
pub fn in_place(f: &Function, op: &Operation) -> bool {
    if op.op != Op::DynamicUpdateSlice || op.operands.len() < 2 {
        return false;
    }
    let (Some(xt), Some(ut)) = (
        f.ty(op.operands[0]).as_tensor(),
        f.ty(op.operands[1]).as_tensor(),
    ) else {
        return false;
    };
    xt.is_static()
        && ut.is_static()
        && xt.dtype.byte_size() >= 4
        && xt.dtype != ElementType::Pred
        && ut.num_elements() * 4 <= xt.num_elements()
}

/// Whether `op` is a `scatter` that can update its operand in place: one input, 32/64-bit
/// elements, windows that cannot overlap (`unique_indices`, or a single window), no batching
/// dimensions, and updates at most a quarter of the operand (`x.at[i].set(v)` in a loop).
pub fn in_place_scatter(f: &Function, op: &Operation) -> bool {
    let Op::Scatter {
        dimension_numbers: dn,
        unique_indices,
        ..
    } = &op.op
    else {
        return false;
    };
    if op.results.len() != 1 || op.operands.len() != 3 || !dn.input_batching_dims.is_empty() {
        return false;
    }
    let (Some(xt), Some(it), Some(ut)) = (
        f.ty(op.operands[0]).as_tensor(),
        f.ty(op.operands[1]).as_tensor(),
        f.ty(op.operands[2]).as_tensor(),
    ) else {
        return false;
    };
    let ivd = dn.index_vector_dim as usize;
    let windows: usize = it
        .dims()
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != ivd)
        .map(|(_, &x)| x)
        .product();
    xt.is_static()
        && ut.is_static()
        && xt.dtype.byte_size() >= 4
        && xt.dtype != ElementType::Pred
        && (*unique_indices || windows <= 1)
        && ut.num_elements() * 4 <= xt.num_elements()
}
