//! Code generation: one WGSL module per kernel, validated with naga at compile time.

pub mod conv_kernel;
mod dot_gemv;
pub mod dot_kernel;
mod dot_subgroup;
pub mod dtype;
pub mod elementwise;
pub mod epilogue;
pub mod expr;
pub mod kernel;
pub mod library;
pub mod loop_kernel;
pub mod math;
pub mod merged;
pub mod op_kernels;
pub mod pairwise;
pub mod parted;
pub mod partials;
pub mod prologue;
pub mod reduce_kernel;
pub mod row_kernel;
pub mod texture_reads;
pub mod while_kernel;
pub mod windows;
