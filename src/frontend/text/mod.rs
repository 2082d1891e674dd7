//! StableHLO text (MLIR assembly, pretty and generic forms) to IR.
