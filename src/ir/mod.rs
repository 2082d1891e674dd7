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

/// The `custom_call` target that names a host call: a function the host runs between device
/// work (`crate::runtime::host_call`); its `backend_config` is the function's id (decimal).
/// Fusion keeps such a call a step of its own, the lowering turns it into a host step.
pub const HOST_CALLBACK_TARGET: &str = "wgpu.host_callback";
