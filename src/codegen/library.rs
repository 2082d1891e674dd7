//! WGSL function libraries (`shaders/*.wgsl`): functions marked `// @fn NAME`, with
//! `// @requires DEP...` lines naming the functions they call. A kernel asks for the functions
//! it calls and gets their source plus their dependencies, each once, dependencies first.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The WGSL sources that make up the library, in the order they are searched.
/// One resolver serves both the small helpers (rounding, integer division, total order) and the
/// math library (`shaders/math/`), so a helper may call a math function and vice versa.
const SOURCES: &[(&str, &str)] = &[
    ("helpers.wgsl", include_str!("../../shaders/helpers.wgsl")),
    ("math/f32.wgsl", include_str!("../../shaders/math/f32.wgsl")),
    ("math/f64.wgsl", include_str!("../../shaders/math/f64.wgsl")),
    (
        "math/complex.wgsl",
        include_str!("../../shaders/math/complex.wgsl"),
    ),
];

struct Function {
    source: String,
    requires: Vec<String>,
}

fn parse(sources: &[(&str, &str)]) -> HashMap<String, Function> {
    let mut out = HashMap::new();
    for (_, text) in sources {
        let mut current: Option<(String, Function)> = None;
        for line in text.lines() {
            let t = line.trim();
            if let Some(name) = t.strip_prefix("// @fn ") {
                if let Some((n, f)) = current.take() {
                    out.insert(n, f);
                }
                current = Some((
                    name.trim().to_string(),
                    Function {
                        source: String::new(),
                        requires: Vec::new(),
                    },
                ));
                continue;
            }
            let Some((_, f)) = current.as_mut() else {
                continue;
            };
            if let Some(deps) = t.strip_prefix("// @requires ") {
                f.requires
                    .extend(deps.split_whitespace().map(str::to_string));
                continue;
            }
            f.source.push_str(line);
            f.source.push('\n');
        }
        if let Some((n, f)) = current.take() {
            out.insert(n, f);
        }
    }
    for f in out.values_mut() {
        let trimmed = f.source.trim_end().to_string();
        f.source = trimmed + "\n";
    }
    out
}

fn library() -> &'static HashMap<String, Function> {
    static LIB: OnceLock<HashMap<String, Function>> = OnceLock::new();
    LIB.get_or_init(|| parse(SOURCES))
}

/// True when the library defines `name`.
pub fn has_function(name: &str) -> bool {
    library().contains_key(name)
}

/// WGSL source of the named functions and everything they require, dependencies first.
pub fn resolve<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<String> {
    let lib = library();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut out = String::new();
    fn visit(
        lib: &HashMap<String, Function>,
        name: &str,
        done: &mut BTreeSet<String>,
        out: &mut String,
        depth: usize,
    ) -> Result<()> {
        if done.contains(name) {
            return Ok(());
        }
        if depth > 64 {
            return Err(Error::internal(format!(
                "WGSL library: dependency cycle at {name}"
            )));
        }
        let f = lib
            .get(name)
            .ok_or_else(|| Error::internal(format!("WGSL library has no function {name}")))?;
        for d in &f.requires {
            visit(lib, d, done, out, depth + 1)?;
        }
        done.insert(name.to_string());
        out.push_str(&f.source);
        out.push('\n');
        Ok(())
    }
    let mut sorted: Vec<&str> = names.into_iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    for n in sorted {
        visit(lib, n, &mut done, &mut out, 0)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_first_and_once() {
        let src = resolve(["wh_round_f16", "wh_f32_to_f16_bits"]).unwrap();
        let a = src.find("fn wh_f32_to_f16_bits").unwrap();
        let b = src.find("fn wh_round_f16").unwrap();
        assert!(a < b);
        assert_eq!(src.matches("fn wh_f32_to_f16_bits").count(), 1);
        assert!(resolve(["wh_no_such"]).is_err());
    }

    #[test]
    fn every_requirement_is_defined() {
        for (name, f) in library() {
            for d in &f.requires {
                assert!(library().contains_key(d), "{name} requires unknown {d}");
            }
        }
    }

    /// Every function, pulled in alone with its dependencies, is a valid WGSL module (a
    /// missing `@requires` shows here, not in some kernel).
    #[test]
    fn every_function_validates_alone() {
        for name in library().keys() {
            let src = resolve([name.as_str()]).unwrap();
            let module = naga::front::wgsl::parse_str(&src)
                .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        }
    }

    #[test]
    fn every_helper_validates_with_naga() {
        let names: Vec<&str> = library().keys().map(String::as_str).collect();
        let src = resolve(names).unwrap();
        let module = naga::front::wgsl::parse_str(&src)
            .map_err(|e| e.emit_to_string(&src))
            .unwrap();
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap();
    }
}
