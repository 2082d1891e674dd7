//! Kernels for ops that are not fused with their neighbours: one op, one kernel, reading the
//! op's operands (as materialized buffers) and writing its results. Each op family lives in
//! its own file; `emit` dispatches on the op.
//!
//! Contract: the returned kernel's `inputs` are bindings of values among the op's operands
//! (each distinct operand once, in any order) and its `outputs` are exactly the op's results,
//! in order. Bodies of region-carrying ops (scatter's combiner, sort's comparator, ...) are
//! emitted as WGSL functions with `reduce_kernel::emit_body_function`.

pub mod bidiagonal;
pub mod block_reflector;
pub mod fft;
pub mod householder;
pub mod jacobi;
pub mod linalg;
pub mod lu;
pub mod map;
pub mod per_element;
pub mod radix;
pub mod reduce_window;
pub mod rng;
pub mod scan;
pub mod scatter;
pub mod select_and_scatter;
pub mod sort;
pub mod sort_radix;
pub mod top_k;
pub mod tridiagonal;
pub mod update;

use std::collections::HashMap;

use crate::ir::TensorType;

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
        Op::Sort { .. } | Op::TopK { .. } => sort::emit(name, f, defs, op, target).map(Some),
        Op::ReduceWindow { .. } => reduce_window::emit(name, f, defs, op, target).map(Some),
        Op::RngBitGenerator { .. } => rng::emit(name, f, defs, op, target).map(Some),
        Op::SelectAndScatter { .. } => {
            select_and_scatter::emit(name, f, defs, op, target).map(Some)
        }
        _ => Ok(None),
    }
}

/// Whether in-place kernels read the old values of the words they update from their state
/// copy (`texture_reads::STATE_MARK`; the LU's trailing update, the block reflector), as
/// they may: only the invocation that loads such a word writes it, after the load.
/// `WGPU_HLO_COPY_OLD_VALUES=0` keeps the storage loads, for comparisons.
pub(super) fn old_values_from_copies() -> bool {
    !crate::fusion::switched_off("WGPU_HLO_COPY_OLD_VALUES")
}

/// The expression an in-place kernel loads the old value of a word it updates by: `copied`
/// (marked to read the state copy), or `stored` (its expression in the state) where
/// [`old_values_from_copies`] is off.
pub(super) fn old_value(stored: &str, copied: String) -> String {
    if old_values_from_copies() {
        copied
    } else {
        stored.to_string()
    }
}

/// The mark on the loads of the kernels that copy an operand into a plan's state and the
/// state into its results (the LU's `init` and `out`, the Cholesky's `init` and `finish`):
/// none, so that on hosts whose CPU adapters read inputs through textures they are read so
/// (a buffer copy into a texture, then texel fetches, where llvmpipe loads a storage vec4
/// lane by lane and component by component); the read-once policy decides as for any
/// kernel. `WGPU_HLO_STATE_IO_TEXTURES=0` keeps them storage loads. lavapipe, 2-core AMD
/// host, `bench_ab.py 'WGPU_HLO_STATE_IO_TEXTURES=0' ''`, ratios of the minimums over 12-15
/// runs: solve / inv / slogdet 512 x 512 0.97 / 0.98 / 0.97, GP likelihood / gradient n=1000
/// 0.93 / 0.97, cholesky 48 and 256 1.00.
pub(super) fn state_io_mark() -> &'static str {
    if crate::fusion::switched_off("WGPU_HLO_STATE_IO_TEXTURES") {
        crate::codegen::texture_reads::STORAGE_MARK
    } else {
        ""
    }
}

/// The binding of result `v` of a custom call named `what`, which must be a tensor of `len`
/// elements of `dtype`.
pub(super) fn result_binding(
    f: &Function,
    v: ValueId,
    dtype: crate::ir::ElementType,
    len: u64,
    what: &str,
) -> Result<super::expr::Binding> {
    match f.ty(v) {
        crate::ir::Type::Tensor(t) if t.dtype == dtype && t.num_elements() as u64 == len => {
            Ok(super::expr::Binding {
                value: v,
                ty: t.clone(),
            })
        }
        other => Err(crate::error::Error::invalid(format!(
            "{what}: a result of type {other}, expected {len} {dtype}"
        ))),
    }
}

/// The placeholder value of temporary buffer `t` in a [`Plan`]'s kernel bindings.
pub const fn temp(t: usize) -> ValueId {
    ValueId(u32::MAX - 16 - t as u32)
}

/// The placeholder value of a launch's parameter buffer (`Launch::params`, `u32`s).
pub const PARAMS: ValueId = ValueId(u32::MAX - 1);

/// An op computed by several kernel launches over temporary buffers (long sorts, sorted
/// scatters, prefix scans, factored FFTs, column sweeps of `cholesky` and `triangular_solve`). Kernel bindings name the op's operands and results,
/// temporaries ([`temp`]) or [`PARAMS`]. A launch writing a temporary gives it a fresh buffer,
/// so a kernel may read and write the same temporary (ping-pong across launches).
pub struct Plan {
    /// The kernels.
    pub kernels: Vec<Kernel>,
    /// Types of the temporaries.
    pub temps: Vec<TensorType>,
    /// What runs, in order.
    pub launches: Vec<Launch>,
}

/// One launch of a [`Plan`].
pub struct Launch {
    /// Index into `Plan::kernels`.
    pub kernel: usize,
    /// The contents of the kernel's [`PARAMS`] binding, if it has one.
    pub params: Vec<u32>,
    /// `Some(v)`: the kernel's one output is `v`'s buffer updated in place (on a copy when
    /// something else still holds it), not a fresh buffer: the kernel writes only what
    /// changes. `v` is a temporary ([`temp`], its latest buffer) or an operand of the op (a
    /// scatter's input). The output binding names a temporary (the buffer becomes its latest)
    /// or one of the op's results (the buffer becomes that result).
    pub update: Option<ValueId>,
    /// Non-empty: the kernel is dispatched once per chunk, all into the same fresh result
    /// buffers, each with its own parameters and parts of its large bindings (see
    /// `codegen::windows`); `params` is then unused.
    pub chunks: Vec<Chunk>,
}

/// One dispatch of a [`Launch`] split over parts of its large bindings.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// The contents of the kernel's [`PARAMS`] binding in this dispatch.
    pub params: Vec<u32>,
    /// Per binding (inputs, then outputs): the bytes bound, `(offset, size)`; `None`: all.
    pub ranges: Vec<Option<(u64, u64)>>,
}

impl Launch {
    /// A launch of `kernel` with `params` into fresh buffers.
    pub fn new(kernel: usize, params: Vec<u32>) -> Launch {
        Launch {
            kernel,
            params,
            update: None,
            chunks: Vec::new(),
        }
    }

    /// A launch of `kernel` once per chunk.
    pub fn chunked(kernel: usize, chunks: Vec<Chunk>) -> Launch {
        Launch {
            kernel,
            params: Vec::new(),
            update: None,
            chunks,
        }
    }

    /// A launch of `kernel` with `params` updating temporary `t` in place.
    pub fn updating(kernel: usize, params: Vec<u32>, t: usize) -> Launch {
        Launch::updating_value(kernel, params, temp(t))
    }

    /// A launch of `kernel` with `params` updating value `v` (a temporary or an operand of
    /// the op) in place.
    pub fn updating_value(kernel: usize, params: Vec<u32>, v: ValueId) -> Launch {
        Launch {
            kernel,
            params,
            update: Some(v),
            chunks: Vec::new(),
        }
    }
}

impl Plan {
    /// Every kernel once, in order.
    pub fn sequential(kernels: Vec<Kernel>, temps: Vec<TensorType>) -> Plan {
        let launches = (0..kernels.len())
            .map(|kernel| Launch::new(kernel, Vec::new()))
            .collect();
        Plan {
            kernels,
            temps,
            launches,
        }
    }

    /// `init` (writing temporary 0, of type `state`), then `sweep` once per range `(a, z)` of
    /// `ranges` (its parameters) updating that temporary in place, then `last` (reading it):
    /// the column sweeps of the LU and Householder panel kernels.
    pub fn ranged(
        init: Kernel,
        sweep: Kernel,
        last: Kernel,
        state: TensorType,
        ranges: Vec<(u64, u64)>,
    ) -> Plan {
        let mut launches = vec![Launch::new(0, Vec::new())];
        launches.extend(
            ranges
                .into_iter()
                .map(|(a, z)| Launch::updating(1, vec![a as u32, z as u32], 0)),
        );
        launches.push(Launch::new(2, Vec::new()));
        Plan {
            kernels: vec![init, sweep, last],
            temps: vec![state],
            launches,
        }
    }

    /// `init`, then `pass` once per bitonic stage `(k, j)`, then `last`.
    pub fn bitonic(
        init: Kernel,
        pass: Kernel,
        last: Kernel,
        temps: Vec<TensorType>,
        stages: Vec<(u32, u32)>,
    ) -> Plan {
        let mut launches = vec![Launch::new(0, Vec::new())];
        launches.extend(stages.into_iter().map(|(k, j)| Launch::new(1, vec![k, j])));
        launches.push(Launch::new(2, Vec::new()));
        Plan {
            kernels: vec![init, pass, last],
            temps,
            launches,
        }
    }
}
