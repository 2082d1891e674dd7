//! WGSL code generation.

pub mod math;
