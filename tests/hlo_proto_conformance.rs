//! The HLO proto frontend against truth: conformance programs (every third file of
//! `../shared/conformance/testdata`) converted to serialized `HloModuleProto`s by jaxlib's own
//! converter (`scripts/conformance_to_hlo.py`), run by `wgpu-hlo conformance`, must pass as
//! often as the same programs in StableHLO text (at least 99 % of the text's pass count), with
//! no file erroring. Skips (with a note) when the conformance files or a Python with jax are
//! absent: `WGPU_HLO_PYTHON`, else `$WGPU_HLO_VENV/bin/python`, else `.venv/bin/python`.

use std::path::{Path, PathBuf};
use std::process::Command;

const EVERY: usize = 3;

fn testdata() -> Option<PathBuf> {
    let root = std::env::var_os("WGPU_HLO_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"));
    let dir = root.join("testdata");
    dir.is_dir().then_some(dir)
}

fn python_with_jax() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("WGPU_HLO_PYTHON").map(PathBuf::from),
        std::env::var_os("WGPU_HLO_VENV").map(|v| PathBuf::from(v).join("bin/python")),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args([
                "-c",
                "from jax._src.lib import _jax; _jax.mlir.mlir_module_to_xla_computation",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// (passed, failed, unsupported, errors, files) and the report of a conformance run.
fn conformance(args: &[PathBuf]) -> ([usize; 5], String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wgpu-hlo"))
        .arg("conformance")
        .args(args)
        .output()
        .expect("run wgpu-hlo conformance");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let last = stdout.lines().last().unwrap_or("").to_string();
    let nums: Vec<usize> = last
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    let counts = nums
        .try_into()
        .unwrap_or_else(|_| panic!("unexpected summary {last:?}\n{stdout}"));
    (counts, stdout)
}

fn sample(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read testdata")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "mlir"))
        .collect();
    files.sort();
    files.into_iter().step_by(EVERY).collect()
}

#[test]
fn converted_programs_pass_as_often_as_their_text() {
    let Some(dir) = testdata() else {
        eprintln!("skipping: conformance testdata not found (set WGPU_HLO_CONFORMANCE)");
        return;
    };
    let Some(python) = python_with_jax() else {
        eprintln!("skipping: no Python with jax (set WGPU_HLO_PYTHON or WGPU_HLO_VENV)");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out_dir = root.join("target/hlo_conformance/sample");
    let _ = std::fs::remove_dir_all(&out_dir);
    let convert = Command::new(&python)
        .arg(root.join("scripts/conformance_to_hlo.py"))
        .arg(&out_dir)
        .arg(&dir)
        .args(["--every", &EVERY.to_string()])
        .output()
        .expect("run scripts/conformance_to_hlo.py");
    let report = String::from_utf8_lossy(&convert.stdout).into_owned();
    assert!(
        convert.status.success(),
        "conversion failed: {report}{}",
        String::from_utf8_lossy(&convert.stderr)
    );
    let text_files = sample(&dir);
    assert!(
        report.contains(&format!("converted {n} of {n} ", n = text_files.len())),
        "not every sampled program converted: {report}"
    );
    let ([text_pass, ..], _) = conformance(&text_files);
    let ([hlo_pass, _, _, hlo_errors, hlo_files], hlo_report) = conformance(&[out_dir]);
    let summary = format!(
        "HLO protos: {hlo_pass} of {hlo_files} pass; the same programs as text: {text_pass}"
    );
    eprintln!("{summary}");
    assert_eq!(hlo_files, text_files.len(), "{hlo_report}");
    assert_eq!(hlo_errors, 0, "{summary}\n{hlo_report}");
    assert!(hlo_pass * 100 >= text_pass * 99, "{summary}\n{hlo_report}");
}
