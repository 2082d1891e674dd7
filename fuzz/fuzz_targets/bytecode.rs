//! The bytecode reader on arbitrary bytes: any result is fine, a panic or a hang is not.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wgpu_hlo::frontend::bytecode::parse_bytecode(data, "fuzz");
});
