//! Our own `#[repr(C)]` definitions of the PJRT C API, version 0.116 (what jaxlib 0.12 speaks).
//!
//! Only what this plugin reads or writes is typed here; every other entry of the function table is
//! an untyped pointer to a function that returns UNIMPLEMENTED. Every struct carries a
//! compile-time check that its `STRUCT_SIZE` (offset of the last field plus its size, the
//! header's `PJRT_STRUCT_SIZE`) and, for the table, each field offset match the header.
#![allow(non_camel_case_types, non_upper_case_globals)]

pub mod api;
pub mod args;
pub mod base;
pub mod enums;

pub use api::*;
pub use args::*;
pub use base::*;
pub use enums::*;

/// Facts about a PJRT struct: its C name (for error messages) and `STRUCT_SIZE`, the value a
/// caller built against the same header puts in `struct_size`.
pub trait PjrtStruct {
    /// The C name of the struct.
    const NAME: &'static str;
    /// `PJRT_STRUCT_SIZE(struct, last_field)` of the header.
    const STRUCT_SIZE: usize;
}

/// Declares a `#[repr(C)]` PJRT struct whose fields are given in header order, implements
/// [`PjrtStruct`] for it and checks at compile time that the end of its last field (the
/// header's `STRUCT_SIZE`) is the number given after `=`.
macro_rules! pjrt_struct {
    ($(#[$m:meta])* $name:ident = $size:literal {
        $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)?
    }) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            $(
                $(#[$fm])*
                #[doc = concat!("`", stringify!($field), "` (see the PJRT C API header).")]
                pub $field: $ty,
            )*
        }
        impl $crate::ffi::PjrtStruct for $name {
            const NAME: &'static str = stringify!($name);
            const STRUCT_SIZE: usize = $size;
        }
        const _: () = {
            let mut end = 0usize;
            $(
                let e = ::core::mem::offset_of!($name, $field) + ::core::mem::size_of::<$ty>();
                if e > end {
                    end = e;
                }
            )*
            assert!(end == $size, concat!("layout of ", stringify!($name), " differs from the header"));
        };
    };
}
pub(crate) use pjrt_struct;
