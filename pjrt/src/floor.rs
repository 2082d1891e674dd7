//! The raw-wgpu floor and the device's copy bandwidth as C symbols
//! (`wgpu_pjrt_raw_wgpu_floor_ms`, `wgpu_pjrt_copy_bandwidth_gbs`), so a framework can put the
//! plugin's per-call cost next to what wgpu itself costs on the same device, and a kernel's
//! bandwidth next to the device's own copy (`jax_plugins.wgpu.raw_wgpu_floor_ms`,
//! `copy_bandwidth_gbs`, `examples/bench_jax.py`).

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, Weak};

use wgpu_hlo::runtime::Device;

/// The device of the most recently created client.
static LATEST: Mutex<Option<Weak<Device>>> = Mutex::new(None);

/// Records `device` as the plugin's device (`PJRT_Client_Create` calls this).
pub(crate) fn remember_device(device: &Arc<Device>) {
    *LATEST.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::downgrade(device));
}

/// The device of the live client created last, else a fresh device (closed again after use).
fn device() -> wgpu_hlo::Result<Arc<Device>> {
    let latest = LATEST
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(Weak::upgrade);
    match latest {
        Some(d) => Ok(d),
        None => Device::open(),
    }
}

/// Writes `msg` NUL-terminated into `buf` of `len` bytes (truncated to fit).
///
/// # Safety
/// `buf` is null or valid for `len` bytes of writes.
unsafe fn write_message(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: `buf` holds `len` bytes and `n < len`.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
}

/// The raw-wgpu floor on the plugin's own device (that of the client created last; a fresh
/// device when no client lives): the median over `runs` (at least 1) of one empty compute
/// dispatch plus a 4-byte map round trip through wgpu alone, in milliseconds, stored in
/// `*out_ms`. Returns 0 on success; otherwise nonzero with a message in `error` (`error_len`
/// bytes, NUL-terminated, may be null). Never unwinds.
///
/// # Safety
/// `out_ms` is null or valid for one `double` write; `error` is null or valid for
/// `error_len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn wgpu_pjrt_raw_wgpu_floor_ms(
    runs: u32,
    out_ms: *mut f64,
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    let measured = catch_unwind(AssertUnwindSafe(|| {
        device()?.raw_floor_ms(runs.max(1) as usize)
    }));
    let msg = match measured {
        Ok(Ok(ms)) => {
            if out_ms.is_null() {
                "out_ms is null".to_string()
            } else {
                // SAFETY: the caller's pointer, valid for one write.
                unsafe { *out_ms = ms };
                return 0;
            }
        }
        Ok(Err(e)) => e.to_string(),
        Err(p) => format!(
            "the floor measurement panicked: {}",
            wgpu_hlo::error::panic_message(p.as_ref())
        ),
    };
    // SAFETY: per the contract above.
    unsafe { write_message(error, error_len, &msg) };
    1
}

/// The device's `copy_buffer_to_buffer` bandwidth on the plugin's own device (as
/// [`wgpu_pjrt_raw_wgpu_floor_ms`] chooses it): `runs` copies of `bytes` between two device
/// buffers, in GB/s of bytes read plus written, stored in `*out_gbs`. Returns 0 on success;
/// otherwise nonzero with a message in `error`. Never unwinds.
///
/// # Safety
/// `out_gbs` is null or valid for one `double` write; `error` is null or valid for
/// `error_len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn wgpu_pjrt_copy_bandwidth_gbs(
    bytes: u64,
    runs: u32,
    out_gbs: *mut f64,
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    let measured = catch_unwind(AssertUnwindSafe(|| {
        device()?.copy_bandwidth_gbs(bytes, runs.max(1) as usize)
    }));
    let msg = match measured {
        Ok(Ok(v)) => {
            if out_gbs.is_null() {
                "out_gbs is null".to_string()
            } else {
                // SAFETY: the caller's pointer, valid for one write.
                unsafe { *out_gbs = v };
                return 0;
            }
        }
        Ok(Err(e)) => e.to_string(),
        Err(p) => format!(
            "the bandwidth measurement panicked: {}",
            wgpu_hlo::error::panic_message(p.as_ref())
        ),
    };
    // SAFETY: per the contract above.
    unsafe { write_message(error, error_len, &msg) };
    1
}
