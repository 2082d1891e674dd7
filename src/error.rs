//! The one error type of the library. Its kinds map 1:1 onto PJRT error codes so the plugin
//! can hand them to a framework unchanged.

use std::fmt;

/// What went wrong, in the vocabulary of PJRT (and absl::Status) error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller's program, bytes or arguments are malformed.
    InvalidArgument,
    /// Well-formed input that this backend does not support (yet).
    Unimplemented,
    /// Out of device memory or over an adapter limit.
    ResourceExhausted,
    /// A bug or an unexpected driver failure.
    Internal,
    /// The object is in the wrong state for the call (e.g. a deleted buffer).
    FailedPrecondition,
    /// Something looked up by name does not exist.
    NotFound,
    /// No adapter or device is available.
    Unavailable,
    /// An index or size is out of range.
    OutOfRange,
    /// The device was lost or the work was cancelled.
    Cancelled,
    /// A wait ran past its deadline.
    DeadlineExceeded,
}

impl ErrorKind {
    /// The canonical upper-case name (`INVALID_ARGUMENT`, ...), as absl prints it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
            ErrorKind::Unimplemented => "UNIMPLEMENTED",
            ErrorKind::ResourceExhausted => "RESOURCE_EXHAUSTED",
            ErrorKind::Internal => "INTERNAL",
            ErrorKind::FailedPrecondition => "FAILED_PRECONDITION",
            ErrorKind::NotFound => "NOT_FOUND",
            ErrorKind::Unavailable => "UNAVAILABLE",
            ErrorKind::OutOfRange => "OUT_OF_RANGE",
            ErrorKind::Cancelled => "CANCELLED",
            ErrorKind::DeadlineExceeded => "DEADLINE_EXCEEDED",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error with a kind and a message that names the op, its location and the adapter where
/// those are known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    /// The PJRT-compatible category.
    pub kind: ErrorKind,
    /// Human-readable explanation.
    pub message: String,
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of the given kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// Malformed input.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    /// Valid input this backend cannot handle.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unimplemented, message)
    }
    /// An internal failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    /// Out of memory or over a limit.
    pub fn resource_exhausted(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ResourceExhausted, message)
    }
    /// Wrong object state.
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, message)
    }
    /// Missing adapter or device.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    /// Something named was not found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    /// Index or size out of range.
    pub fn out_of_range(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::OutOfRange, message)
    }

    /// Prefixes the message with context (an op name and location, a file, an adapter), keeping
    /// the kind.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

/// Adds context to the error of a `Result` lazily.
pub trait ResultExt<T> {
    /// Prefixes the error message with the context the closure returns.
    fn with_context<C: fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn with_context<C: fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.context(f()))
    }
}

/// Returns early with an `Error` of the given kind built with `format!`.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::ErrorKind::$kind, format!($($arg)*)))
    };
}

/// The text of a caught panic's payload (`panic!` with a literal or a formatted message), or
/// `"unknown panic"`: for turning panics caught at a boundary into errors.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_kind_and_context() {
        let e = Error::unimplemented("op foo on dtype f8E4M3").context("a.mlir:3:5");
        assert_eq!(
            e.to_string(),
            "UNIMPLEMENTED: a.mlir:3:5: op foo on dtype f8E4M3"
        );
        assert_eq!(e.kind, ErrorKind::Unimplemented);
    }
}
