//! StableHLO text (MLIR assembly, pretty and generic forms) to IR.

use crate::error::{Error, Result};
use crate::ir::Module;

/// Parses StableHLO text. (Placeholder until the text frontend lands.)
pub fn parse_module(_src: &str, _filename: &str) -> Result<Module> {
    Err(Error::unimplemented("the text frontend is not built yet"))
}
