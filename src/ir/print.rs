//! Printing the IR back to StableHLO text.
