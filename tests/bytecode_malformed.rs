//! Malformed artifacts: every truncation and a deterministic set of byte flips of real
//! artifacts decode to a clean error (or, rarely, a valid module) — never a panic.

use std::path::PathBuf;

use wgpu_hlo::frontend::bytecode::parse_bytecode;

fn samples() -> Vec<(String, Vec<u8>)> {
    let root = std::env::var_os("WGPU_HLO_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"));
    ["0_9_0", "1_0_0", "1_20_0"]
        .iter()
        .filter_map(|v| {
            let p = root.join(format!("vhlo/stablehlo_legalize_to_vhlo.{v}.mlir.bc"));
            Some((v.to_string(), std::fs::read(p).ok()?))
        })
        .collect()
}

#[test]
fn truncations_are_errors_that_name_an_offset() {
    let s = samples();
    if s.is_empty() {
        eprintln!("skipping: conformance files not found");
        return;
    }
    for (v, bytes) in &s {
        // Every prefix up to 512 bytes (the header and first sections), then every 61st.
        let cuts = (0..bytes.len().min(512)).chain((512..bytes.len()).step_by(61));
        for cut in cuts {
            let r = std::panic::catch_unwind(|| parse_bytecode(&bytes[..cut], "t"));
            let r = r.unwrap_or_else(|_| panic!("{v}: panic on a {cut}-byte prefix"));
            let e = r.expect_err(&format!("{v}: a {cut}-byte prefix decoded"));
            assert_eq!(
                e.kind,
                wgpu_hlo::ErrorKind::InvalidArgument,
                "{v}: prefix {cut}: {e}"
            );
            assert!(e.message.contains("bytecode"), "{v}: prefix {cut}: {e}");
        }
    }
}

#[test]
fn byte_flips_never_panic() {
    let s = samples();
    let mut runs = 0;
    for (v, bytes) in &s {
        let mut state: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..1000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut b = bytes.clone();
            let flips = 1 + (state % 4) as usize;
            for k in 0..flips {
                let pos = ((state >> (8 * k)) as usize).wrapping_mul(2654435761) % b.len();
                b[pos] ^= 1 << ((state >> 40) % 8);
            }
            let r = std::panic::catch_unwind(|| parse_bytecode(&b, "f").map(|_| ()));
            assert!(
                r.is_ok(),
                "{v}: panic after flipping bytes (seed state {state:#x})"
            );
            runs += 1;
        }
    }
    eprintln!("{runs} mutated artifacts decoded without a panic");
}
