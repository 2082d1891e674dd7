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

/// The VHLO test inputs, the `*invalid*` ones included (they are invalid for the VHLO
/// conversion, not as StableHLO text), except the `mixed` file, whose `scf.for` has a custom
/// syntax and whose values have builtin scalar types the IR does not model.
#[test]
fn vhlo_files_parse_and_round_trip() {
    let files: Vec<PathBuf> = mlir_files("vhlo")
        .into_iter()
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
            n.is_some_and(|n| !n.contains("_mixed"))
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

/// A small deterministic generator for the fuzz test.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// True if `msg` starts with `name:line:col: `.
fn has_position(msg: &str, name: &str) -> bool {
    let Some(rest) = msg.strip_prefix(name).and_then(|r| r.strip_prefix(':')) else {
        return false;
    };
    let mut parts = rest.splitn(3, ':');
    let num =
        |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()));
    num(parts.next()) && num(parts.next()) && parts.next().is_some_and(|s| s.starts_with(' '))
}

/// Random truncations and character changes of real files never panic, and every error is
/// INVALID_ARGUMENT with a `file:line:col: ` prefix.
#[test]
fn mutated_inputs_never_panic() {
    let mut sources: Vec<String> = mlir_files("interpret")
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|s| {
            split_chunks(&s)
                .into_iter()
                .map(|c| c.text.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let vhlo = conformance_dir().join("vhlo/stablehlo_legalize_to_vhlo.mlir");
    if let Ok(s) = std::fs::read_to_string(vhlo) {
        sources.push(s);
    }
    for name in [
        "testdata/cumsum_float32_8_9.mlir",
        "testdata/sort_float32_5.mlir",
    ] {
        if let Ok(s) = std::fs::read_to_string(conformance_dir().join(name)) {
            sources.push(s);
        }
    }
    sources.push(
        "#loc1 = loc(\"a\"(#loc2))\nfunc.func @f(%a: tensor<2xf32> loc(#loc1)) {\n  \
         %0 = stablehlo.reduce(%a init: %a) applies stablehlo.add across dimensions = [0] : \
         (tensor<2xf32>, tensor<2xf32>) -> tensor<f32> loc(callsite(#loc1 at #loc2))\n  \
         func.return\n}\n#loc2 = loc(\"f.py\":1:2 to :3)\n"
            .to_string(),
    );
    const CHARS: &[u8] = b"{}[]()<>\"%#@!:,=-x0123456789 \nabfi.^";
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut runs = 0;
    for src in &sources {
        for round in 0..6 {
            let mut bytes = src.as_bytes().to_vec();
            if round % 3 == 0 {
                bytes.truncate(rng.below(bytes.len() + 1));
            } else {
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(bytes.len());
                    if let Some(b) = bytes.get_mut(i) {
                        *b = CHARS[rng.below(CHARS.len())];
                    }
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            runs += 1;
            if let Err(e) = parse_module(&text, "fuzz.mlir") {
                assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
                assert!(has_position(&e.message, "fuzz.mlir"), "{}", e.message);
            }
        }
    }
    eprintln!("{runs} mutated inputs");
}

/// Parse time of the largest testdata file (a debug build reads a 3.6 MB hex constant).
#[test]
fn largest_file_parses_quickly() {
    let Some(path) = mlir_files("testdata")
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
    else {
        return;
    };
    let src = std::fs::read_to_string(&path).unwrap_or_default();
    let t = std::time::Instant::now();
    let m = parse_module(&src, "big.mlir").map(|m| m.functions.len());
    let elapsed = t.elapsed();
    eprintln!(
        "{}: {} bytes parsed in {elapsed:?}",
        path.display(),
        src.len()
    );
    assert!(m.is_ok());
    assert!(elapsed.as_secs_f64() < 2.0);
}

/// Malformed inputs give INVALID_ARGUMENT errors at the right chunk-relative line.
#[test]
fn errors_carry_file_line_numbers_of_chunks() {
    let src = "func.func @ok() {\n  func.return\n}\n// -----\nfunc.func @bad() {\n  %0 = stablehlo.add %x, %x : tensor<f32>\n  func.return\n}\n";
    let chunks = split_chunks(src);
    assert_eq!(chunks.len(), 2);
    assert!(parse_module_at(chunks[0].text, "c.mlir", chunks[0].first_line).is_ok());
    let e = parse_module_at(chunks[1].text, "c.mlir", chunks[1].first_line).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(
        e.message
            .starts_with("c.mlir:6:22: use of undefined value `%x`"),
        "{}",
        e.message
    );
    for bad in [
        "",
        "module {",
        "func.func @f(",
        "func.func @f() -> tensor<f32 {",
        "module { module {} }",
    ] {
        if let Err(e) = parse_module(bad, "b.mlir") {
            assert!(has_position(&e.message, "b.mlir"), "{}", e.message);
        }
    }
}
