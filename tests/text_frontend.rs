//! The text frontend and printer against the conformance files: every file parses, printing
//! and parsing again gives the same module, malformed input gives `file:line:col` errors and
//! never panics.

use std::path::{Path, PathBuf};

use wgpu_hlo::frontend::text::{parse_module, parse_module_at, split_chunks};
use wgpu_hlo::ir::print::{print_module, print_module_with, PrintOptions};
use wgpu_hlo::ir::{Location, Module, Region};
use wgpu_hlo::ErrorKind;

/// The conformance folder: `$WGPU_HLO_CONFORMANCE`, else `../shared/conformance`.
fn conformance_dir() -> PathBuf {
    match std::env::var_os("WGPU_HLO_CONFORMANCE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"),
    }
}

/// `.mlir` files of a conformance subfolder, sorted; empty if the folder is missing.
fn mlir_files(sub: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(conformance_dir().join(sub)) else {
        eprintln!("conformance folder {sub} not found; skipping");
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "mlir"))
        .collect();
    files.sort();
    files
}

/// Sets every location to unknown, for comparisons that ignore them.
fn strip_locations(m: &mut Module) {
    fn region(r: &mut Region) {
        for op in &mut r.ops {
            op.loc = Location::Unknown;
            for sub in &mut op.regions {
                region(sub);
            }
        }
    }
    for f in &mut m.functions {
        f.loc = Location::Unknown;
        if let Some(b) = &mut f.body {
            region(b);
        }
    }
}

/// Parses `text`, prints it with and without locations, and checks both read back equal.
fn round_trip(text: &str, name: &str, first_line: u32) -> Result<(), String> {
    let m = parse_module_at(text, name, first_line).map_err(|e| e.to_string())?;
    let printed = print_module_with(&m, &PrintOptions { locations: true });
    let back = parse_module(&printed, "printed.mlir")
        .map_err(|e| format!("reparse failed: {e}\n--- printed ---\n{}", head(&printed)))?;
    if back != m {
        return Err(format!(
            "{name}:{first_line}: round trip with locations differs: {}",
            first_difference(&m, &back)
        ));
    }
    let plain = print_module(&m);
    let mut back = parse_module(&plain, "plain.mlir").map_err(|e| format!("reparse: {e}"))?;
    let mut m = m;
    strip_locations(&mut m);
    strip_locations(&mut back);
    if back != m {
        return Err("round trip without locations differs".into());
    }
    Ok(())
}

fn head(s: &str) -> String {
    s.chars().take(3000).collect()
}

/// A description of the first place two modules differ.
fn first_difference(a: &Module, b: &Module) -> String {
    if a.name != b.name || a.attrs != b.attrs {
        return format!(
            "module header: {:?} {:?} vs {:?} {:?}",
            a.name, a.attrs, b.name, b.attrs
        );
    }
    for (fa, fb) in a.functions.iter().zip(&b.functions) {
        if fa == fb {
            continue;
        }
        if let (Some(ra), Some(rb)) = (&fa.body, &fb.body) {
            if let Some(d) = region_difference(ra, rb) {
                return format!("@{}: {d}", fa.name);
            }
        }
        return format!("@{}: signature or values:\n{fa:?}\nvs\n{fb:?}", fa.name);
    }
    "function count".into()
}

fn region_difference(a: &Region, b: &Region) -> Option<String> {
    for (oa, ob) in a.ops.iter().zip(&b.ops) {
        if oa == ob {
            continue;
        }
        for (ra, rb) in oa.regions.iter().zip(&ob.regions) {
            if let Some(d) = region_difference(ra, rb) {
                return Some(d);
            }
        }
        return Some(format!("{oa:?}\nvs\n{ob:?}"));
    }
    (a != b).then(|| format!("region {:?} vs {:?}", a.args, b.args))
}

/// Runs `round_trip` on every chunk of every file in `files`; panics listing failures.
fn check_files(files: &[PathBuf]) -> usize {
    let mut failures = Vec::new();
    let mut count = 0;
    for path in files {
        let Ok(src) = std::fs::read_to_string(path) else {
            failures.push(format!("{}: unreadable", path.display()));
            continue;
        };
        let name = path.display().to_string();
        for chunk in split_chunks(&src) {
            count += 1;
            if let Err(e) = round_trip(chunk.text, &name, chunk.first_line) {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} chunks failed:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    count
}

#[test]
fn interpret_files_parse_and_round_trip() {
    let files = mlir_files("interpret");
    let n = check_files(&files);
    eprintln!("{} files, {n} chunks", files.len());
}

#[test]
fn testdata_files_parse_and_round_trip() {
    let files = mlir_files("testdata");
    let n = check_files(&files);
    eprintln!("{} files, {n} chunks", files.len());
}

/// Valid VHLO test inputs: not `*invalid*`, and not the `mixed` file, whose `scf.for` has a
/// custom syntax and whose values have builtin scalar types the IR does not model.
#[test]
fn vhlo_files_parse_and_round_trip() {
    let files: Vec<PathBuf> = mlir_files("vhlo")
        .into_iter()
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
            n.is_some_and(|n| !n.contains("invalid") && !n.contains("_mixed"))
        })
        .collect();
    let n = check_files(&files);
    eprintln!("{} files, {n} chunks", files.len());
}

#[test]
fn mixed_dialect_file_fails_cleanly() {
    let path = conformance_dir().join("vhlo/stablehlo_legalize_to_vhlo_mixed.mlir");
    let Ok(src) = std::fs::read_to_string(&path) else {
        return;
    };
    let e = parse_module(&src, "mixed.mlir").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.starts_with("mixed.mlir:"), "{}", e.message);
}
