//! StableHLO text (MLIR assembly, pretty and generic forms) to IR.
//!
//! Reads what JAX (`jax.jit(f).lower(...).as_text()`) and `stablehlo-opt` print: a
//! `module` or a bare list of `func.func`s, every StableHLO op in its pretty and generic form,
//! CHLO, `check` and `interpreter` ops, locations with aliases defined after their use, dense
//! constants in every form, and other dialects' attributes as opaque text. Every malformed
//! input is an INVALID_ARGUMENT error whose message starts with `file:line:col: `; nesting
//! is capped so hostile input cannot exhaust the stack.
//!
//! `ir::print` writes the IR back as text this parser reads.

mod attrs;
mod chunks;
mod cursor;
mod dense;
mod location;
mod module;
mod ops;
mod parser;
mod pretty;
mod pretty_other;
mod pretty_regions;
mod scope;
mod stablehlo_attrs;
mod types;

pub use chunks::{split_chunks, Chunk};

use crate::ir::Module;
use crate::Result;

/// Deepest nesting of regions, attributes, types and locations the parser follows.
pub(crate) const MAX_DEPTH: usize = 64;

/// Parses StableHLO text into a module; `filename` names the source in locations and errors.
pub fn parse_module(src: &str, filename: &str) -> Result<Module> {
    parse_module_at(src, filename, 1)
}

/// Parses text that starts at line `first_line` of `filename` (a chunk of a file split on
/// `// -----`), so locations and errors carry the file's line numbers.
pub fn parse_module_at(src: &str, filename: &str, first_line: u32) -> Result<Module> {
    let mut p = parser::Parser::new(src, filename, first_line)?;
    p.parse_top()
}

#[cfg(test)]
mod tests;
