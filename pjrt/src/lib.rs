//! PJRT C API plugin: a thin C ABI shell over the `wgpu_hlo` library, built as
//! `libpjrt_wgpu.so`. `GetPjrtApi` returns the function table of PJRT C API 0.116; every entry
//! checks its arguments and `struct_size`, catches panics, and reports failures as
//! `PJRT_Error`s with the library's error kind mapped to a PJRT code. No compiler logic lives
//! here.
#![warn(missing_docs)]
// Entry points and C structs keep the names of the C API header.
#![allow(non_snake_case)]

mod abi;
mod buffer;
mod client;
pub mod compile_options;
mod crash;
mod error;
mod event;
mod executable;
pub mod ffi;
pub mod floor;
pub mod host_callback;
mod named_values;
mod plugin;
mod table;
pub mod tfnpd;

pub use client::{MEMORY_KIND, PLATFORM_NAME};
pub use plugin::{STABLEHLO_CURRENT_VERSION, STABLEHLO_MINIMUM_VERSION};

/// Starts `env_logger` once, from `WGPU_HLO_LOG` (else `RUST_LOG`), and the native crash
/// report where asked for (`crash`); later calls do nothing.
pub(crate) fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let env = env_logger::Env::new().filter_or(
            "WGPU_HLO_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        );
        let _ = env_logger::Builder::from_env(env).try_init();
        crash::install();
    });
}

/// The entry point a PJRT framework (jaxlib's `LoadPjrtPlugin`) looks up with `dlsym`: the
/// plugin's function table, valid for the life of the process.
#[no_mangle]
pub extern "C" fn GetPjrtApi() -> *const ffi::PJRT_Api {
    &table::API
}
