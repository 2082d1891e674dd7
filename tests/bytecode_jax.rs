//! Artifacts written at test time by the installed jaxlib (`scripts/jax_artifacts.py`, run
//! with `WGPU_HLO_PYTHON`) for real JAX programs — an MLP grad step, a conv net, jax.random,
//! while/cond/scan, sort, gather/scatter, cumsum — at every StableHLO version jaxlib can
//! target, and as `jax.export` writes them: decoding gives the program of jaxlib's own text.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use wgpu_hlo::frontend::bytecode::parse_bytecode;
use wgpu_hlo::frontend::text::parse_module;
use wgpu_hlo::ir::print::print_function;
use wgpu_hlo::ir::Module;

fn renumber(text: &str) -> String {
    let mut names: HashMap<String, usize> = HashMap::new();
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
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

fn functions(m: &Module) -> HashMap<String, String> {
    m.functions
        .iter()
        .map(|f| (f.name.clone(), renumber(&print_function(f))))
        .collect()
}

#[test]
fn jaxlib_artifacts_decode_to_their_text_at_every_version() {
    let Some(python) = std::env::var_os("WGPU_HLO_PYTHON") else {
        eprintln!("skipping: set WGPU_HLO_PYTHON to a Python with jax (scripts/setup.sh does)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("wgpu-hlo-jax-artifacts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/jax_artifacts.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .env("JAX_PLATFORMS", "cpu")
        .output()
        .expect("run the artifact script");
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named 'jax'") {
            eprintln!("skipping: jax is not installed for {python:?}");
            return;
        }
        panic!("artifact script failed:\n{err}");
    }
    let mut texts: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut checked = 0;
    let mut versions = std::collections::BTreeSet::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in &entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".mlirbc") else {
            continue;
        };
        let (program, version) = stem.split_once('.').unwrap();
        let bytes = std::fs::read(path).unwrap();
        let decoded = parse_bytecode(&bytes, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
        if version == "export" {
            // What JAX sends a plugin: it must decode and name its entry point.
            assert!(decoded.func("main").is_some(), "{name}: no @main");
            checked += 1;
            continue;
        }
        versions.insert(version.to_string());
        let want = texts.entry(program.to_string()).or_insert_with(|| {
            let src = std::fs::read_to_string(dir.join(format!("{program}.mlir"))).unwrap();
            let m = parse_module(&src, program).unwrap_or_else(|e| panic!("{program}.mlir: {e}"));
            functions(&m)
        });
        let got = functions(&decoded);
        for (fname, text) in want.iter() {
            let g = got
                .get(fname)
                .unwrap_or_else(|| panic!("{name}: @{fname} missing"));
            assert_eq!(g, text, "{name}: @{fname} differs");
        }
        checked += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{checked} artifacts decoded and matched, versions {versions:?}");
    assert!(checked > 100, "only {checked} artifacts");
    assert!(
        versions.contains("1.22.0") && versions.contains("0.9.0"),
        "{versions:?}"
    );
}
