//! MLIR bytecode portable artifacts (VHLO) to IR.
//!
//! JAX hands PJRT a StableHLO *portable artifact*: MLIR bytecode of a module in the VHLO
//! dialect. This reader decodes it in pure Rust, with no MLIR and no Python: the bytecode
//! container (format versions 0 to 6), the builtin and VHLO attribute and type encodings, and
//! every VHLO op version from StableHLO 0.9.0 to `STABLEHLO_CURRENT_VERSION`, into the same IR
//! the text frontend produces for the equivalent StableHLO program (ops named and attributed as
//! in StableHLO's generic form, then typed by `ir::generic::build_op`).
//!
//! Stages, one file each: `cursor` (bounds-checked reads), `container` (sections and tables),
//! `structure` (ops, regions, values), `entries` with `builtin`, `vhlo_types`, `vhlo_attrs`
//! and `dense` (attributes and types, decoded lazily), then `lower` with `lower_types`,
//! `lower_attrs` and `op_attrs` (VHLO to StableHLO IR); `vhlo_ops` is the op table and
//! `version` the supported version range.
//!
//! Malformed input of any kind is an INVALID_ARGUMENT error naming the file offset and what was
//! expected there; nothing the input says is trusted to size an allocation or bound a
//! recursion.

mod builtin;
mod container;
mod cursor;
mod dense;
mod entries;
mod lower;
mod lower_attrs;
mod lower_types;
mod op_attrs;
mod structure;
mod value;
mod version;
mod vhlo_attrs;
mod vhlo_ops;
mod vhlo_types;

use crate::error::{Error, Result};
use crate::ir::Module;

/// The newest StableHLO version whose portable artifacts this reader decodes completely. The
/// PJRT plugin reports it as `stablehlo_current_version`, so JAX writes artifacts we can read.
pub const STABLEHLO_CURRENT_VERSION: &str = "1.22.0";

/// The oldest StableHLO version whose portable artifacts this reader decodes (the start of
/// StableHLO's compatibility guarantees).
pub const STABLEHLO_MINIMUM_VERSION: &str = "0.9.0";

/// True when `bytes` are MLIR bytecode (they start with the magic `ML\xefR`), so callers can
/// tell portable artifacts from StableHLO text.
pub fn is_bytecode(bytes: &[u8]) -> bool {
    container::has_magic(bytes)
}

/// Decodes a StableHLO portable artifact into a module. `filename` names the input in errors.
pub fn parse_bytecode(bytes: &[u8], filename: &str) -> Result<Module> {
    decode(bytes).map_err(|e| e.context(filename))
}

fn decode(bytes: &[u8]) -> Result<Module> {
    let c = container::Container::parse(bytes)?;
    if let Some(v) = version::Version::from_producer(&c.producer) {
        if v < version::MINIMUM {
            return Err(Error::invalid(format!(
                "the artifact was written by StableHLO {v}, older than the oldest supported \
                 version {}",
                version::MINIMUM
            )));
        }
    }
    let raw = structure::read_ir(&c)?;
    lower::lower(&c, &raw)
}
