//! Frontends: bytes in, IR out. They know nothing of GPUs.

pub mod bytecode;
pub mod hlo_proto;
pub mod text;
