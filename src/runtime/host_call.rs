//! Host functions a program calls between device work (`custom_call @wgpu.host_callback`):
//! one process-wide handler, registered by whoever can run them (the JAX package, through the
//! PJRT plugin's `wgpu_hlo_set_host_callback_handler`), resolves a call's id to a function.
//! Without a handler a host call fails with a clear error.

use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::ir::TensorType;

pub use crate::ir::HOST_CALLBACK_TARGET;

/// A host function's operand: its type and its bytes in host (dense, row-major) layout.
pub struct HostArg<'a> {
    /// The tensor type.
    pub ty: &'a TensorType,
    /// `ty.byte_size()` bytes.
    pub data: &'a [u8],
}

/// A host function's result to fill: its type and `ty.byte_size()` bytes, zeroed.
pub struct HostResult<'a> {
    /// The tensor type.
    pub ty: &'a TensorType,
    /// The bytes to write, in host layout.
    pub data: &'a mut [u8],
}

/// Runs host function `id` on the arguments, filling every result; an `Err` carries the
/// failure's message (a Python traceback, for callbacks) to the execution's caller.
pub type HostHandler = dyn Fn(u64, &[HostArg<'_>], &mut [HostResult<'_>]) -> std::result::Result<(), String>
    + Send
    + Sync;

static HANDLER: RwLock<Option<Arc<HostHandler>>> = RwLock::new(None);

/// Registers the process-wide handler (replacing any earlier one); `None` removes it.
pub fn set_handler(handler: Option<Arc<HostHandler>>) {
    *HANDLER.write().unwrap_or_else(|p| p.into_inner()) = handler;
}

/// Calls host function `id` (named `name` in errors) through the registered handler.
pub(crate) fn call(
    id: u64,
    name: &str,
    args: &[HostArg<'_>],
    results: &mut [HostResult<'_>],
) -> Result<()> {
    // The lock is not held during the call: the function may itself run programs.
    let handler = HANDLER
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or_else(|| {
            Error::failed_precondition(format!(
                "{name}: host call #{id} needs a host-call handler, and none is registered \
                 (host callbacks run through the JAX plugin package, jax-wgpu)"
            ))
        })?;
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(id, args, results)));
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(msg)) => Err(Error::internal(format!(
            "host callback error calling {name}: {msg}"
        ))),
        Err(p) => Err(Error::internal(format!(
            "host callback {name} panicked: {}",
            crate::error::panic_message(p.as_ref())
        ))),
    }
}
