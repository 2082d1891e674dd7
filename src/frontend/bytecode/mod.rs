//! MLIR bytecode portable artifacts (VHLO) to IR.

use crate::error::{Error, Result};
use crate::ir::Module;

/// True for MLIR bytecode (magic `ML\xefR`).
pub fn is_bytecode(bytes: &[u8]) -> bool {
    bytes.starts_with(b"ML\xefR")
}

/// Decodes a portable artifact. (Placeholder until the bytecode reader lands.)
pub fn parse_bytecode(_bytes: &[u8], _filename: &str) -> Result<Module> {
    Err(Error::unimplemented("the bytecode reader is not built yet"))
}
