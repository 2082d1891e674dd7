//! The C entry through which a host program (the JAX package, via `ctypes`) registers the
//! function that runs host calls (`custom_call @wgpu.host_callback`): an extension beside
//! the PJRT table, exported from `libpjrt_wgpu.so`.

use std::ffi::c_void;
use std::sync::Arc;

use wgpu_hlo::runtime::host_call::{self, HostArg, HostResult};

/// Runs host function `id`: reads `num_args` operands (`arg_data[i]`, `arg_sizes[i]` bytes,
/// host layout) and fills `num_results` results (`result_data[i]`, exactly `result_sizes[i]`
/// bytes). Returns 0 on success; otherwise writes a NUL-terminated message of at most
/// `error_capacity` bytes into `error` and returns nonzero. Called on the thread that
/// executes the program; the operand pointers are valid only during the call.
pub type HostCallbackFn = unsafe extern "C" fn(
    id: u64,
    num_args: usize,
    arg_data: *const *const c_void,
    arg_sizes: *const usize,
    num_results: usize,
    result_data: *const *mut c_void,
    result_sizes: *const usize,
    error: *mut u8,
    error_capacity: usize,
) -> i32;

/// Largest error message taken back from the handler.
const ERROR_CAPACITY: usize = 64 * 1024;

/// Registers `handler` as the process-wide host-call handler (`NULL` removes it). Returns 0.
///
/// # Safety
/// `handler`, when not null, must stay callable with the contract of `HostCallbackFn` for as
/// long as programs with host calls may run (or until it is replaced).
#[no_mangle]
pub unsafe extern "C" fn wgpu_hlo_set_host_callback_handler(
    handler: Option<HostCallbackFn>,
) -> i32 {
    crate::init_logging();
    let set = std::panic::catch_unwind(|| match handler {
        None => host_call::set_handler(None),
        Some(f) => host_call::set_handler(Some(Arc::new(
            move |id: u64, args: &[HostArg<'_>], results: &mut [HostResult<'_>]| {
                call(f, id, args, results)
            },
        ))),
    });
    if set.is_err() {
        return 1;
    }
    0
}

fn call(
    f: HostCallbackFn,
    id: u64,
    args: &[HostArg<'_>],
    results: &mut [HostResult<'_>],
) -> Result<(), String> {
    let arg_data: Vec<*const c_void> = args.iter().map(|a| a.data.as_ptr().cast()).collect();
    let arg_sizes: Vec<usize> = args.iter().map(|a| a.data.len()).collect();
    let result_data: Vec<*mut c_void> = results
        .iter_mut()
        .map(|r| r.data.as_mut_ptr().cast())
        .collect();
    let result_sizes: Vec<usize> = results.iter().map(|r| r.data.len()).collect();
    let mut error = vec![0u8; ERROR_CAPACITY];
    // SAFETY: every pointer is valid for the sizes passed, for the duration of the call; the
    // registrant promised `f` follows `HostCallbackFn`'s contract.
    let rc = unsafe {
        f(
            id,
            args.len(),
            arg_data.as_ptr(),
            arg_sizes.as_ptr(),
            results.len(),
            result_data.as_ptr(),
            result_sizes.as_ptr(),
            error.as_mut_ptr(),
            error.len(),
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let end = error.iter().position(|&b| b == 0).unwrap_or(error.len());
    let msg = String::from_utf8_lossy(&error[..end]).into_owned();
    Err(if msg.is_empty() {
        format!("the host function returned error code {rc}")
    } else {
        msg
    })
}
