//! The discipline every entry point follows: check the args pointer, read and write only the
//! fields the caller's `struct_size` covers, and turn errors and panics into `PJRT_Error`s.

use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};

use wgpu_hlo::{Error, Result};

use crate::error::into_raw;
use crate::ffi::{PJRT_Error, PjrtStruct};

/// The caller's args struct: a pointer and the size the caller says it has. Fields beyond that
/// size are never touched, so a caller built against an older header (a smaller struct) is
/// served with the fields it knows, and a newer one's extra fields are ignored.
pub(crate) struct Args<T> {
    ptr: *mut T,
    size: usize,
}

/// Size of the `struct_size` field every args struct starts with.
const SIZE_FIELD: usize = std::mem::size_of::<usize>();

impl<T: PjrtStruct> Args<T> {
    /// Wraps the caller's pointer after checking it is non-null and that `struct_size` is at
    /// least that of the struct's first version with the fields this entry needs (`min_size`).
    ///
    /// # Safety
    /// `ptr` is null or points to a struct whose first `struct_size` bytes are readable and
    /// writable for as long as the returned value is used (the PJRT calling convention).
    pub(crate) unsafe fn new(ptr: *mut T, min_size: usize) -> Result<Self> {
        if ptr.is_null() {
            return Err(Error::invalid(format!("{}: args pointer is null", T::NAME)));
        }
        // SAFETY: non-null, and per this function's contract the struct starts with a
        // readable `size_t struct_size`; read unaligned in case the caller packed it oddly.
        let size = unsafe { ptr.cast::<usize>().read_unaligned() };
        if size < min_size.max(SIZE_FIELD) {
            return Err(Error::invalid(format!(
                "Unexpected {} size: expected at least {min_size}, got {size}; check the PJRT \
                 header version of the plugin and the caller",
                T::NAME
            )));
        }
        Ok(Args { ptr, size })
    }

    /// Pointer to the field `proj` selects, if the caller's struct covers all of it.
    pub(crate) fn field_ptr<F>(&self, proj: impl FnOnce(*const T) -> *const F) -> Option<*mut F> {
        let dummy = MaybeUninit::<T>::uninit();
        let base = dummy.as_ptr();
        let offset = proj(base) as usize - base as usize;
        if offset + std::mem::size_of::<F>() <= self.size {
            Some(self.ptr.cast::<u8>().wrapping_add(offset).cast::<F>())
        } else {
            None
        }
    }

    /// Reads a field if the caller's struct has it.
    pub(crate) fn get<F: Copy>(&self, proj: impl FnOnce(*const T) -> *const F) -> Option<F> {
        // SAFETY: `field_ptr` only returns pointers inside the caller's `struct_size` bytes,
        // readable per the contract of `new`; the read is unaligned-safe.
        self.field_ptr(proj).map(|p| unsafe { p.read_unaligned() })
    }

    /// Reads a field the entry cannot do without.
    pub(crate) fn req<F: Copy>(
        &self,
        name: &str,
        proj: impl FnOnce(*const T) -> *const F,
    ) -> Result<F> {
        self.get(proj).ok_or_else(|| {
            Error::invalid(format!(
                "{}.{name} is beyond the caller's struct_size {}",
                T::NAME,
                self.size
            ))
        })
    }

    /// Writes a field if the caller's struct has it (an older caller simply does not see it).
    pub(crate) fn set<F: Copy>(&self, proj: impl FnOnce(*const T) -> *const F, value: F) {
        if let Some(p) = self.field_ptr(proj) {
            // SAFETY: inside the caller's writable `struct_size` bytes (contract of `new`).
            unsafe { p.write_unaligned(value) }
        }
    }
}

/// Reads field `$f` of an [`Args`] if present: `get!(args, field)`.
macro_rules! get {
    ($a:expr, $f:ident) => {
        // SAFETY: `addr_of!` on the dummy base inside `field_ptr` only computes an address.
        $a.get(|p| unsafe { ::core::ptr::addr_of!((*p).$f) })
    };
}
/// Reads a required field `$f` of an [`Args`]: `req!(args, field)?`.
macro_rules! req {
    ($a:expr, $f:ident) => {
        // SAFETY: `addr_of!` on the dummy base inside `field_ptr` only computes an address.
        $a.req(stringify!($f), |p| unsafe {
            ::core::ptr::addr_of!((*p).$f)
        })
    };
}
/// Writes field `$f` of an [`Args`] if present: `set!(args, field, value)`.
macro_rules! set {
    ($a:expr, $f:ident, $v:expr) => {
        // SAFETY: `addr_of!` on the dummy base inside `field_ptr` only computes an address.
        $a.set(|p| unsafe { ::core::ptr::addr_of!((*p).$f) }, $v)
    };
}
pub(crate) use {get, req, set};

/// Runs an entry point's body: its `Err` becomes a `PJRT_Error`, and so does a panic, which
/// never unwinds into the C caller.
pub(crate) fn guard(name: &'static str, body: impl FnOnce() -> Result<()>) -> *mut PJRT_Error {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => into_raw(e),
        Err(payload) => {
            let msg = wgpu_hlo::error::panic_message(payload.as_ref());
            into_raw(Error::internal(format!("{name} panicked: {msg}")))
        }
    }
}

/// Runs a `void` entry point's body, swallowing panics (there is no way to report them).
pub(crate) fn guard_void(name: &'static str, body: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(body)).is_err() {
        log::error!("{name} panicked");
    }
}

/// Defines `unsafe extern "C" fn $name(args: *mut $args) -> *mut PJRT_Error` that checks the
/// args struct (at least `$min` bytes, default its full `STRUCT_SIZE`) and runs `$body` under
/// [`guard`].
macro_rules! entry {
    ($name:ident, $args:ty, $body:path) => {
        $crate::abi::entry!(
            $name,
            $args,
            <$args as $crate::ffi::PjrtStruct>::STRUCT_SIZE,
            $body
        );
    };
    ($name:ident, $args:ty, $min:expr, $body:path) => {
        #[doc = concat!("`", stringify!($name), "` entry point of the function table.")]
        ///
        /// # Safety
        /// `args` is null or a valid args struct per the PJRT calling convention.
        pub(crate) unsafe extern "C" fn $name(args: *mut $args) -> *mut $crate::ffi::PJRT_Error {
            $crate::abi::guard(stringify!($name), || {
                // SAFETY: the PJRT calling convention (this function's contract).
                let a = unsafe { $crate::abi::Args::new(args, $min) }?;
                $body(&a)
            })
        }
    };
}
pub(crate) use entry;

/// Borrows the bytes `[ptr, ptr + len)` given by a caller; null with length 0 is the empty
/// slice.
///
/// # Safety
/// Unless null or `len == 0`, `ptr` points to `len` readable bytes that outlive `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!(
            "{what} is null but its size is {len}"
        )));
    }
    // SAFETY: non-null and `len` readable bytes per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrows `len` elements at `ptr` (see [`bytes`]).
///
/// # Safety
/// Unless null or `len == 0`, `ptr` points to `len` readable, aligned `T`s that outlive `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!(
            "{what} is null but has {len} elements"
        )));
    }
    // SAFETY: per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A UTF-8 string given as pointer and length.
///
/// # Safety
/// As for [`bytes`].
pub(crate) unsafe fn str_arg<'a>(
    ptr: *const std::ffi::c_char,
    len: usize,
    what: &str,
) -> Result<&'a str> {
    // SAFETY: forwarded contract.
    let b = unsafe { bytes(ptr.cast(), len, what) }?;
    std::str::from_utf8(b).map_err(|e| Error::invalid(format!("{what} is not UTF-8: {e}")))
}
