//! The one typed IR every frontend lowers into and every later stage reads.

pub mod attr;
pub mod float;
pub mod generic;
pub mod literal;
pub mod module;
pub mod ops;
pub mod print;
pub mod types;
pub mod verify;

pub use attr::Attr;
pub use literal::{Literal, Scalar};
pub use module::{Function, Location, Module, Operation, Region, ValueId};
pub use ops::{BinaryOp, CheckOp, Op, UnaryOp};
pub use types::{ElementType, TensorType, Type};
