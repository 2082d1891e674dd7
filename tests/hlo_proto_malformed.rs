//! Truncated and bit-flipped serialized `HloModuleProto`s never panic: decoding and importing
//! return `Ok` or an error (INVALID_ARGUMENT for bytes that are not a proto), and what imports
//! goes through the verifier and the passes without a panic either.

mod common;

use common::hlo_sample::module;
use prost::Message;
use wgpu_hlo::frontend::hlo_proto::parse_hlo_module;
use wgpu_hlo::ErrorKind;

/// Decoding, importing, verifying and the passes: any result but a panic.
fn exercise(bytes: &[u8]) -> Option<ErrorKind> {
    match parse_hlo_module(bytes, "mutant.hlo.pb") {
        Ok(m) => wgpu_hlo::passes::prepare(&m, "main").err().map(|e| e.kind),
        Err(e) => Some(e.kind),
    }
}

#[test]
fn the_sample_imports_and_prepares() {
    let bytes = module().encode_to_vec();
    let m = parse_hlo_module(&bytes, "sample.hlo.pb").expect("the sample imports");
    let f = wgpu_hlo::passes::prepare(&m, "main").expect("the sample verifies");
    assert_eq!(f.arg_types.len(), 1);
    assert_eq!(f.result_types.len(), 1);
    let text = wgpu_hlo::ir::print::print_module(&m);
    assert!(text.contains("stablehlo.while"), "{text}");
    assert!(text.contains("stablehlo.reduce"), "{text}");
}

#[test]
fn truncations_never_panic() {
    let bytes = module().encode_to_vec();
    for n in 0..bytes.len() {
        // A cut inside a field is a decode error: INVALID_ARGUMENT. A cut between fields can
        // decode (to a smaller module) and then fail to import or verify: any error kind.
        let _ = exercise(&bytes[..n]);
    }
    assert_eq!(
        parse_hlo_module(&bytes[..bytes.len() - 1], "cut.hlo.pb")
            .err()
            .map(|e| e.kind),
        Some(ErrorKind::InvalidArgument)
    );
}

#[test]
fn bit_flips_never_panic() {
    let bytes = module().encode_to_vec();
    let mut ok = 0;
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            if exercise(&b).is_none() {
                ok += 1;
            }
        }
    }
    // Some flips hit values that keep the program valid (a constant's bits, a name).
    assert!(ok > 0);
}

#[test]
fn garbage_is_invalid_argument() {
    for bytes in [&b"\xff\xff\xff\xff"[..], b"module {}", &[0x0a, 0x80]] {
        let e = parse_hlo_module(bytes, "garbage.pb").expect_err("not a module");
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    }
}
