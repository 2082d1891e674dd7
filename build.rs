//! Computes a build id: a hash of the compiler's sources (`src/`, `shaders/`, `Cargo.toml`,
//! `Cargo.lock`). Serialized executables carry it, so an executable compiled by one build is
//! never loaded by another whose code generation may differ, even at the same crate version.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut all = Vec::new();
    for d in ["src", "shaders"] {
        println!("cargo:rerun-if-changed={d}");
        files(&root.join(d), &mut all);
    }
    for f in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={f}");
        all.push(root.join(f));
    }
    all.sort();
    // FNV-1a over every file's relative path and contents.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for p in &all {
        let rel = p.strip_prefix(&root).unwrap_or(p);
        eat(rel.to_string_lossy().as_bytes());
        eat(&[0]);
        if let Ok(bytes) = std::fs::read(p) {
            eat(&(bytes.len() as u64).to_le_bytes());
            eat(&bytes);
        }
    }
    println!("cargo:rustc-env=WGPU_HLO_BUILD_ID={h:016x}");
}
