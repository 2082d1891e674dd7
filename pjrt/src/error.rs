//! `PJRT_Error`: our errors carry a PJRT code and a message behind the public function-table
//! head, so a caller can use either the API table or the error's own table (0.107).

use std::ffi::{c_char, c_void};

use wgpu_hlo::{Error, ErrorKind};

use crate::abi::{entry, get, guard_void, req, set, Args};
use crate::ffi::*;

/// Our error object. `head` must stay the first field: callers read the table through it.
#[repr(C)]
pub(crate) struct ErrorObj {
    head: PJRT_Error,
    code: PJRT_Error_Code,
    message: String,
}

/// The PJRT code of an error kind.
pub(crate) fn code_of(kind: ErrorKind) -> PJRT_Error_Code {
    match kind {
        ErrorKind::InvalidArgument => PJRT_Error_Code::INVALID_ARGUMENT,
        ErrorKind::Unimplemented => PJRT_Error_Code::UNIMPLEMENTED,
        ErrorKind::ResourceExhausted => PJRT_Error_Code::RESOURCE_EXHAUSTED,
        ErrorKind::Internal => PJRT_Error_Code::INTERNAL,
        ErrorKind::FailedPrecondition => PJRT_Error_Code::FAILED_PRECONDITION,
        ErrorKind::NotFound => PJRT_Error_Code::NOT_FOUND,
        ErrorKind::Unavailable => PJRT_Error_Code::UNAVAILABLE,
        ErrorKind::OutOfRange => PJRT_Error_Code::OUT_OF_RANGE,
        ErrorKind::Cancelled => PJRT_Error_Code::CANCELLED,
        ErrorKind::DeadlineExceeded => PJRT_Error_Code::DEADLINE_EXCEEDED,
    }
}

/// The error kind closest to a PJRT code (for errors a caller hands us).
pub(crate) fn kind_of(code: PJRT_Error_Code) -> ErrorKind {
    match code {
        PJRT_Error_Code::INVALID_ARGUMENT => ErrorKind::InvalidArgument,
        PJRT_Error_Code::UNIMPLEMENTED => ErrorKind::Unimplemented,
        PJRT_Error_Code::RESOURCE_EXHAUSTED => ErrorKind::ResourceExhausted,
        PJRT_Error_Code::FAILED_PRECONDITION => ErrorKind::FailedPrecondition,
        PJRT_Error_Code::NOT_FOUND => ErrorKind::NotFound,
        PJRT_Error_Code::UNAVAILABLE => ErrorKind::Unavailable,
        PJRT_Error_Code::OUT_OF_RANGE => ErrorKind::OutOfRange,
        PJRT_Error_Code::CANCELLED => ErrorKind::Cancelled,
        PJRT_Error_Code::DEADLINE_EXCEEDED => ErrorKind::DeadlineExceeded,
        _ => ErrorKind::Internal,
    }
}

static ERROR_VTABLE: PJRT_Error_FunctionTable = PJRT_Error_FunctionTable {
    struct_size: PJRT_Error_FunctionTable::STRUCT_SIZE,
    instance_size: PJRT_Error::STRUCT_SIZE,
    extension_start: std::ptr::null_mut(),
    destroy: Some(vt_destroy),
    message: Some(vt_message),
    get_code: Some(vt_get_code),
    for_each_payload: Some(vt_for_each_payload),
};

// SAFETY: the table is immutable and its only pointer (`extension_start`) is null.
unsafe impl Sync for PJRT_Error_FunctionTable {}

/// Allocates a `PJRT_Error` for `e`; the caller frees it with `PJRT_Error_Destroy`.
pub(crate) fn into_raw(e: Error) -> *mut PJRT_Error {
    log::debug!("returning error {e}");
    let obj = Box::new(ErrorObj {
        head: PJRT_Error {
            vtable: &ERROR_VTABLE,
        },
        code: code_of(e.kind),
        message: e.message,
    });
    Box::into_raw(obj).cast()
}

/// Our error object behind `p`, if `p` is one of ours.
///
/// # Safety
/// `p` is null or a live `PJRT_Error`.
unsafe fn ours<'a>(p: *const PJRT_Error) -> Option<&'a ErrorObj> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a live PJRT_Error starts with its vtable pointer.
    let vt = unsafe { (*p).vtable };
    if std::ptr::eq(vt, &ERROR_VTABLE) {
        // SAFETY: errors with our table were allocated by `into_raw` as `ErrorObj`.
        Some(unsafe { &*p.cast::<ErrorObj>() })
    } else {
        None
    }
}

/// Frees any `PJRT_Error` (ours or one with another function table).
///
/// # Safety
/// `p` is null or a live error not used afterwards.
pub(crate) unsafe fn destroy(p: *mut PJRT_Error) {
    if p.is_null() {
        return;
    }
    // SAFETY: live error per contract.
    if unsafe { ours(p) }.is_some() {
        // SAFETY: allocated by `into_raw` as a boxed `ErrorObj`.
        drop(unsafe { Box::from_raw(p.cast::<ErrorObj>()) });
    } else if let Some(d) = unsafe { (*p).vtable.as_ref() }.and_then(|t| t.destroy) {
        // SAFETY: a foreign error is destroyed through its own table.
        unsafe { d(p) }
    }
}

/// Code and message of any `PJRT_Error`.
///
/// # Safety
/// `p` is a live error.
pub(crate) unsafe fn inspect(p: *const PJRT_Error) -> (PJRT_Error_Code, String) {
    // SAFETY: live error per contract.
    if let Some(e) = unsafe { ours(p) } {
        return (e.code, e.message.clone());
    }
    // SAFETY: live error per contract; a foreign one is read through its own table.
    let Some(vt) = (unsafe { (*p).vtable.as_ref() }) else {
        return (
            PJRT_Error_Code::UNKNOWN,
            "foreign error without a function table".into(),
        );
    };
    let code = vt
        .get_code
        .map(|f| unsafe { f(p) })
        .unwrap_or(PJRT_Error_Code::UNKNOWN);
    let mut msg: *const c_char = std::ptr::null();
    let mut len = 0usize;
    if let Some(f) = vt.message {
        // SAFETY: the foreign table's own accessor.
        unsafe { f(p, &mut msg, &mut len) };
    }
    // SAFETY: the message has the error's lifetime.
    let text = unsafe { crate::abi::bytes(msg.cast(), len, "message") }
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    (code, text)
}

unsafe extern "C" fn vt_destroy(error: *mut PJRT_Error) {
    // SAFETY: called through our table on one of our live errors.
    guard_void("PJRT_Error vtable destroy", || unsafe { destroy(error) });
}

unsafe extern "C" fn vt_message(
    error: *const PJRT_Error,
    message: *mut *const c_char,
    size: *mut usize,
) {
    guard_void("PJRT_Error vtable message", || {
        // SAFETY: called through our table on one of our live errors.
        if let Some(e) = unsafe { ours(error) } {
            if !message.is_null() && !size.is_null() {
                // SAFETY: the caller's out-pointers.
                unsafe {
                    *message = e.message.as_ptr().cast();
                    *size = e.message.len();
                }
            }
        }
    });
}

unsafe extern "C" fn vt_get_code(error: *const PJRT_Error) -> PJRT_Error_Code {
    // SAFETY: called through our table on one of our live errors.
    unsafe { ours(error) }
        .map(|e| e.code)
        .unwrap_or(PJRT_Error_Code::UNKNOWN)
}

unsafe extern "C" fn vt_for_each_payload(
    _error: *const PJRT_Error,
    _visitor: PJRT_Error_PayloadVisitor,
    _user_arg: *mut c_void,
) {
    // Our errors carry no payloads.
}

/// `PJRT_Error_Destroy`.
///
/// # Safety
/// PJRT calling convention.
pub(crate) unsafe extern "C" fn PJRT_Error_Destroy(args: *mut PJRT_Error_Destroy_Args) {
    guard_void("PJRT_Error_Destroy", || {
        // SAFETY: PJRT calling convention.
        let Ok(a) = (unsafe { Args::new(args, PJRT_Error_Destroy_Args::STRUCT_SIZE) }) else {
            return;
        };
        if let Some(e) = get!(a, error) {
            // SAFETY: the caller hands over a live error.
            unsafe { destroy(e) }
        }
    });
}

/// `PJRT_Error_Message`.
///
/// # Safety
/// PJRT calling convention.
pub(crate) unsafe extern "C" fn PJRT_Error_Message(args: *mut PJRT_Error_Message_Args) {
    guard_void("PJRT_Error_Message", || {
        // SAFETY: PJRT calling convention.
        let Ok(a) = (unsafe { Args::new(args, PJRT_Error_Message_Args::STRUCT_SIZE) }) else {
            return;
        };
        let Some(p) = get!(a, error).filter(|p| !p.is_null()) else {
            set!(a, message, std::ptr::null());
            set!(a, message_size, 0);
            return;
        };
        // SAFETY: a live error per convention.
        if let Some(e) = unsafe { ours(p) } {
            set!(a, message, e.message.as_ptr().cast());
            set!(a, message_size, e.message.len());
        } else if let Some(f) = unsafe { (*p).vtable.as_ref() }.and_then(|t| t.message) {
            let mut msg: *const c_char = std::ptr::null();
            let mut len = 0usize;
            // SAFETY: the foreign error's own accessor.
            unsafe { f(p, &mut msg, &mut len) };
            set!(a, message, msg);
            set!(a, message_size, len);
        }
    });
}

fn get_code(a: &Args<PJRT_Error_GetCode_Args>) -> wgpu_hlo::Result<()> {
    let p = req!(a, error)?;
    if p.is_null() {
        return Err(Error::invalid("PJRT_Error_GetCode: error is null"));
    }
    // SAFETY: a live error per convention.
    let (code, _) = unsafe { inspect(p) };
    set!(a, code, code);
    Ok(())
}
entry!(PJRT_Error_GetCode, PJRT_Error_GetCode_Args, get_code);

fn for_each_payload(a: &Args<PJRT_Error_ForEachPayload_Args>) -> wgpu_hlo::Result<()> {
    let p = req!(a, error)?;
    // SAFETY: a live error per convention.
    if !p.is_null() && unsafe { ours(p) }.is_none() {
        if let Some(f) = unsafe { (*p).vtable.as_ref() }.and_then(|t| t.for_each_payload) {
            let visitor = get!(a, visitor).flatten();
            let user_arg = get!(a, user_arg).unwrap_or(std::ptr::null_mut());
            // SAFETY: the foreign error's own visitor hook.
            unsafe { f(p, visitor, user_arg) };
        }
    }
    Ok(())
}
entry!(
    PJRT_Error_ForEachPayload,
    PJRT_Error_ForEachPayload_Args,
    for_each_payload
);
