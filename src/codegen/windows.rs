//! Tensors larger than one storage binding may be (`max_storage_buffer_binding_size`: 128 MiB
//! on lavapipe and on some laptop GPUs, while one buffer may be far larger): a kernel whose
//! invocations each read and write such tensors only at their own elements is launched several
//! times, each launch over a range of invocations, binding only the part of every large tensor
//! those invocations touch (a byte range of the buffer) and telling the kernel, through its
//! parameter binding, its first invocation and the first element bound (see
//! [`super::expr::Window`]).

use super::expr::Binding;
use super::kernel::{self, WORKGROUP};
use super::loop_kernel::Target;
use super::op_kernels::{Chunk, PARAMS};
use crate::error::{Error, Result};
use crate::ir::{ElementType, TensorType};

/// The binding of a windowed kernel's parameters (binding 0, `in0`): the launch's first
/// invocation (or accumulator), the first element of its windows, and the end of its
/// invocations (dispatches round up to whole workgroups and grids: the invocations past the
/// end belong to the next launch and must not run).
pub fn params_binding() -> Binding {
    Binding {
        value: PARAMS,
        ty: TensorType::new(vec![3], ElementType::U32),
    }
}

/// The WGSL statement returning from invocations (or workgroups) `index` outside a windowed
/// launch's own range, or past `total`.
pub fn guard(index: &str, total: u64) -> String {
    format!("if ({index} >= {total}u || {index} >= in0[2]) {{ return; }}")
}

/// The greatest common divisor of `a` and `b`.
pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// The multiple of elements every window must start at: byte offsets of each of `types` that
/// are multiples of the adapter's `min_storage_buffer_offset_alignment`, whole 32-bit words of
/// packed narrow types, and whole multiples of `unit` (elements per invocation).
pub fn element_multiple(types: &[ElementType], align: u64, unit: u64) -> u64 {
    let align = align.max(4);
    types.iter().fold(lcm(unit.max(1), 4), |m, t| {
        let size = t.byte_size().max(1) as u64;
        lcm(m, align / gcd(align, size))
    })
}

/// The largest number of elements a window may hold: the binding limit over the largest
/// element size among `types`, rounded down to a multiple of `multiple`, or an error when not
/// even `multiple` elements fit.
pub fn window_elements(
    name: &str,
    types: &[ElementType],
    multiple: u64,
    target: &Target,
) -> Result<u64> {
    let size = types
        .iter()
        .map(|t| t.byte_size().max(1))
        .max()
        .unwrap_or(1) as u64;
    let n = target.max_binding_size / size / multiple * multiple;
    if n == 0 {
        return Err(Error::resource_exhausted(format!(
            "{name}: a window of {multiple} elements of {size} bytes exceeds adapter {}'s \
             max_storage_buffer_binding_size of {} bytes",
            target.adapter, target.max_binding_size
        )));
    }
    Ok(n)
}

/// The byte range `(offset, size)` of a tensor of type `t` holding its elements `e0..e1`
/// (sizes rounded up to whole words, within the buffer).
pub fn byte_range(t: &TensorType, e0: u64, e1: u64) -> (u64, u64) {
    let size = t.dtype.byte_size() as u64;
    let total = (t.num_elements() as u64 * size).max(4).next_multiple_of(4);
    let start = (e0 * size).min(total);
    let end = (e1 * size).next_multiple_of(4).min(total).max(start);
    (start, end - start)
}

/// The launch of a windowed kernel over bindings `bindings` (inputs, then outputs) running
/// invocations (or accumulators) `first..end`: parameters `[first, e0, end]`, the tensors
/// `windowed` says are bound for their elements `e0..e1`, the others whole.
pub fn chunk(
    bindings: &[Binding],
    windowed: &dyn Fn(&Binding) -> bool,
    (first, end): (u64, u64),
    (e0, e1): (u64, u64),
) -> Result<Chunk> {
    let param = |v: u64| {
        u32::try_from(v).map_err(|_| {
            Error::resource_exhausted(format!(
                "a windowed launch starts at element {v}, beyond 32-bit indexing"
            ))
        })
    };
    Ok(Chunk {
        params: vec![param(first)?, param(e0)?, param(end)?],
        ranges: bindings
            .iter()
            .map(|b| windowed(b).then(|| byte_range(&b.ty, e0, e1)))
            .collect(),
    })
}

/// The dispatch size of a launch of `invocations` invocations.
pub fn workgroups(invocations: u64, target: &Target) -> Result<[u32; 3]> {
    kernel::grid(
        invocations.div_ceil(WORKGROUP as u64),
        target.max_workgroups,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_on_aligned_words() {
        use ElementType::*;
        assert_eq!(element_multiple(&[F32], 256, 1), 64);
        assert_eq!(element_multiple(&[F32, I8], 32, 1), 32);
        assert_eq!(element_multiple(&[F32], 4, 1), 4);
        assert_eq!(element_multiple(&[C64], 32, 1), 4);
        assert_eq!(element_multiple(&[BF16], 32, 2), 16);
        let t = TensorType::new(vec![10], I8);
        assert_eq!(byte_range(&t, 4, 10), (4, 8));
        assert_eq!(byte_range(&t, 8, 10), (8, 4));
        let t = TensorType::new(vec![10], F32);
        assert_eq!(byte_range(&t, 8, 10), (32, 8));
    }
}
