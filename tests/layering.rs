//! Imports run one way: frontend → ir → passes → fusion → codegen (→ compile → runtime).
//! Each front layer may use only the layers before it (plus `error` and `target`, the
//! adapter description the runtime measures and the compiler reads). Test modules
//! (`#[cfg(test)]` and after) are not checked: they may parse text with the frontend.
//! `compile` and `runtime` are not checked yet: `compile` still loads what it generated onto a
//! `runtime::Device`, and the runtime runs `compile`'s program type.

use std::path::Path;

const LAYERS: [&str; 9] = [
    "error", "target", "frontend", "ir", "passes", "fusion", "codegen", "compile", "runtime",
];

/// Modules `layer` may import.
fn allowed(layer: &str) -> &'static [&'static str] {
    match layer {
        "target" => &["error", "target"],
        "ir" => &["error", "ir"],
        "frontend" => &["error", "ir", "frontend"],
        "passes" => &["error", "ir", "passes"],
        "fusion" => &["error", "target", "ir", "passes", "fusion"],
        "codegen" => &["error", "target", "ir", "passes", "fusion", "codegen"],
        _ => &LAYERS,
    }
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn front_layers_import_only_earlier_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    for layer in ["target", "ir", "frontend", "passes", "fusion", "codegen"] {
        let mut fs = Vec::new();
        files(&src.join(layer), &mut fs);
        files(&src.join(format!("{layer}.rs")), &mut fs);
        assert!(!fs.is_empty(), "no sources for {layer}");
        for f in fs {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (n, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                let mut rest = line;
                while let Some(i) = rest.find("crate::") {
                    rest = &rest[i + 7..];
                    let module: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if LAYERS.contains(&module.as_str())
                        && !allowed(layer).contains(&module.as_str())
                    {
                        bad.push(format!(
                            "{}:{}: {layer} uses crate::{module}",
                            f.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layering:\n{}",
        bad.join("\n")
    );
}
