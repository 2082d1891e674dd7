//! wgpu-hlo: a StableHLO compiler and runtime on wgpu. Programs come in as StableHLO text or
//! portable artifacts, are lowered into one typed IR, fused into kernels, code-generated as
//! WGSL at compile time and run on any adapter wgpu reaches.
#![warn(missing_docs)]

pub mod codegen;
pub mod compile;
pub mod error;
pub mod frontend;
pub mod fusion;
pub mod ir;
pub mod parallel;
pub mod passes;
pub mod runner;
pub mod runtime;
pub mod target;

pub use error::{Error, ErrorKind, Result};
