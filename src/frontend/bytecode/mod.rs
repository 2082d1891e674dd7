//! MLIR bytecode portable artifacts (VHLO) to IR.
