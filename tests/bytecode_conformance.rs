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

/// Each function of the artifact, printed as StableHLO text, against the same function of the
/// paired `.mlir` file as the text frontend reads it: the same ops, types and attributes.
#[test]
fn artifacts_match_their_text() {
    let Some(dir) = vhlo_dir() else { return };
    let mut compared = 0;
    let mut mismatched = Vec::new();
    for path in artifacts(&dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("invalid_") {
            continue;
        }
        let text_path = dir.join(name.trim_end_matches(".bc"));
        let Ok(src) = std::fs::read_to_string(&text_path) else {
            continue;
        };
        let m = parse_bytecode(&std::fs::read(&path).unwrap(), &name).unwrap();
        let chunks = wgpu_hlo::frontend::text::split_chunks(&src);
        let t =
            wgpu_hlo::frontend::text::parse_module_at(chunks[0].text, &name, chunks[0].first_line)
                .unwrap_or_else(|e| panic!("{name}: text: {e}"));
        for f in &m.functions {
            let Some(g) = t.func(&f.name) else {
                mismatched.push(format!("{name}: @{} missing in the text", f.name));
                continue;
            };
            let a = renumber(&wgpu_hlo::ir::print::print_function(f));
            let b = renumber(&wgpu_hlo::ir::print::print_function(g));
            compared += 1;
            // Known difference: `#stablehlo.replica_group_mesh_axes` (mesh collectives, which the
            // compiler does not run) is kept by the reader by mesh name only.
            if a != b
                && !(a.contains("replica_group_mesh_axes") && b.contains("replica_group_mesh_axes"))
            {
                mismatched.push(format!(
                    "{name}: @{}:\n--- bytecode\n{a}\n--- text\n{b}",
                    f.name
                ));
            }
        }
    }
    assert!(compared > 1000, "compared only {compared} functions");
    assert!(
        mismatched.is_empty(),
        "{} of {compared} functions differ; first:\n{}",
        mismatched.len(),
        mismatched
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Value names renumbered in order of first appearance, so two printings of the same program
/// compare equal whatever ids their values got.
fn renumber(text: &str) -> String {
    let mut names: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            let next = names.len();
            let k = *names.entry(text[i..j].to_string()).or_insert(next);
            out.push_str(&format!("%v{k}"));
            i = j;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}
