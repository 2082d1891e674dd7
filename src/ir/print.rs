//! Printing the IR back to StableHLO text.

use crate::ir::{Function, Module};

/// Prints a module. (Placeholder until the printer lands.)
pub fn print_module(m: &Module) -> String {
    format!("{m:#?}")
}

/// Prints a function. (Placeholder until the printer lands.)
pub fn print_function(f: &Function) -> String {
    format!("{f:#?}")
}
