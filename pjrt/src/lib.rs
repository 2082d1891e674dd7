//! PJRT C API plugin: a thin C ABI shell over the `wgpu_hlo` library.
