//! The StableHLO text frontend, the verifier, the passes and the device-free half of the
//! compiler (fusion, code generation, naga validation of every kernel, lowering) on arbitrary
//! input: any `Ok`/`Err` is fine; a panic, an abort or a hang is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wgpu_hlo::codegen::loop_kernel::Target;
use wgpu_hlo::runtime::Capabilities;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(module) = wgpu_hlo::frontend::text::parse_module(src, "fuzz") else {
        return;
    };
    let Ok(f) = wgpu_hlo::passes::prepare(&module, "main") else {
        return;
    };
    // What lavapipe reports: no f64/i64/f16 in shaders, a CPU adapter.
    let target = Target {
        caps: Capabilities::default(),
        adapter: "fuzz",
        max_workgroups: 65535,
        max_storage_buffers: 8,
        cpu_adapter: true,
        // lavapipe's figures: the loop bound's default and a 128 MiB binding limit.
        max_invocation_iterations: 32768,
        max_binding_size: 128 << 20,
        min_binding_offset_alignment: 32,
        max_workgroup_storage: 16384,
        texture_reads: Some(1),
        max_texture_dimension: 8192,
        max_sampled_textures: 16,
    };
    let _ = wgpu_hlo::compile::lower::lower(&f, target);
});
