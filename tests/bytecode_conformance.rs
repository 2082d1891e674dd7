//! StableHLO's VHLO test artifacts (`../shared/conformance/vhlo/*.mlir.bc`, one per StableHLO
//! version from 0.9.0 on): every one decodes, the future-version one fails cleanly, and the
//! decoded ops are the ones their paired text names.

use std::path::PathBuf;

use wgpu_hlo::frontend::bytecode::{is_bytecode, parse_bytecode};
use wgpu_hlo::ir::{Module, Op};
use wgpu_hlo::ErrorKind;

/// The conformance directory, or `None` (with a note) when it is not there.
fn vhlo_dir() -> Option<PathBuf> {
    let root = std::env::var_os("WGPU_HLO_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"));
    let dir = root.join("vhlo");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} not found (set WGPU_HLO_CONFORMANCE)",
            dir.display()
        );
        None
    }
}

fn artifacts(dir: &PathBuf) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read conformance dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".mlir.bc"))
        .collect();
    v.sort();
    v
}

fn op_count(m: &Module) -> usize {
    let mut n = 0;
    for f in &m.functions {
        if let Some(b) = &f.body {
            b.walk(&mut |_| n += 1);
        }
    }
    n
}

#[test]
fn every_vhlo_artifact_decodes() {
    let Some(dir) = vhlo_dir() else { return };
    let files = artifacts(&dir);
    assert!(
        files.len() >= 30,
        "only {} artifacts in {}",
        files.len(),
        dir.display()
    );
    let mut decoded = 0;
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        assert!(is_bytecode(&bytes), "{name}");
        let result = parse_bytecode(&bytes, &name);
        if name.starts_with("invalid_") {
            let e = result.expect_err(&name);
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{name}: {e}");
            assert!(e.message.contains("vhlo.constant_v99"), "{name}: {e}");
            assert!(e.message.contains("2.0.0"), "{name}: {e}");
            continue;
        }
        let m = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!m.functions.is_empty(), "{name}");
        assert!(op_count(&m) > 0, "{name}");
        decoded += 1;
    }
    assert!(decoded >= 30);
}

#[test]
fn newest_artifact_has_the_expected_ops() {
    let Some(dir) = vhlo_dir() else { return };
    let path = dir.join("stablehlo_legalize_to_vhlo.1_20_0.mlir.bc");
    let m = parse_bytecode(&std::fs::read(&path).unwrap(), "1_20_0").unwrap();
    let f = m.func("op_dot_general").expect("op_dot_general");
    let body = f.body.as_ref().unwrap();
    match &body.ops[0].op {
        Op::DotGeneral {
            dimension_numbers, ..
        } => {
            assert_eq!(dimension_numbers.lhs_contracting_dimensions, vec![2]);
            assert_eq!(dimension_numbers.lhs_batching_dimensions, vec![0]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(body.ops.last().unwrap().op, Op::Return);
    // `func.func private @mesh()` is a declaration.
    let mesh = m.func("mesh").expect("mesh");
    assert!(!mesh.public);
}
