//! The WGSL math library: transcendental and special functions for f32 and f64 (and complex
//! numbers as `vec2`), written in plain arithmetic so that results meet the conformance
//! tolerances on every driver instead of inheriting the looser bounds of the built-ins.
//!
//! The functions live in `shaders/math/*.wgsl`. Each one is preceded by a marker line
//! `// @fn NAME` and optionally `// @requires DEP1 DEP2` naming the other library functions it
//! calls; everything from a marker up to the next one belongs to that function. Names follow
//! `wh_<fn>_<f32|f64>` (`wh_c<fn>_<f32|f64>` for complex arguments). The code generator asks
//! for the functions a kernel calls with [`math_library`] and pastes the returned text into the
//! module.
//!
//! Functions, each as `_f32` and `_f64`: exp, expm1, log, log1p, sin, cos, tan, tanh, atan,
//! atan2(y, x), asin, acos, sinh, cosh, asinh, acosh, atanh, erf, erfc, erf_inv, lgamma,
//! digamma, polygamma(n, x), zeta(s, q), bessel_i1e, cbrt, pow(x, y), logistic, sqrt, rsqrt,
//! rem(x, y) (C `fmod`, exact), round_afz, next_after(x, y); f64 also round_even and trunc (the
//! built-ins are wrong on lavapipe above 2^31, see below). Complex (`vec2` = (re, im)):
//! cexp, cexpm1, clog, clog1p, csqrt, crsqrt, csin, ccos, ctan, csinh, ccosh, ctanh, casin,
//! cacos, catan, casinh, cacosh, catanh, cpow(a, b), cdiv(a, b), cabs (returns the scalar),
//! csign, clogistic. `tests/math_accuracy.rs` measures the errors.
//!
//! Conventions: IEEE special values as C and XLA (NaN in, NaN out; domain errors give NaN;
//! signed zeros and infinities where C gives them). Subnormal inputs and results are handled
//! exactly where the hardware keeps them and degrade to zero where it flushes them (lavapipe
//! keeps f32 and f64 subnormals in compute shaders). The f64 functions use only f64 arithmetic
//! plus `u64` bit casts, so they need `SHADER_F64` and `SHADER_INT64`; none of them calls a
//! GLSL.std.450 transcendental, which exist for 16/32-bit only. No function uses f16 types:
//! f16 and bf16 are computed by calling the f32 function and rounding the result once.
//!
//! What the code defends against (all seen on lavapipe, Mesa 22.3, and applicable to every
//! Mesa driver): `fma` is not fused (a multiply and an add), so exact products use a bit-mask
//! Dekker split; NIR applies "inexact" algebraic rewrites to every float op of a SPIR-V module
//! without NoContraction (naga emits none) - `(a + b) - b -> a`, `x - x -> 0`, `x == x ->
//! true`, folding of `(x - c1) - c2` into `x - (c1 + c2)` - so compensation terms go through an
//! opaque identity (`wh_opaque_*`) and special values are tested on the bits; and f64 `round`
//! and `trunc` return their argument unrounded from 2^31 on, so the f64 code rounds with
//! `floor` or the 2^52 trick.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::{Error, Result};

/// The library sources, in the order their functions are listed.
const SOURCES: [(&str, &str); 3] = [
    ("f32.wgsl", include_str!("../../shaders/math/f32.wgsl")),
    ("f64.wgsl", include_str!("../../shaders/math/f64.wgsl")),
    (
        "complex.wgsl",
        include_str!("../../shaders/math/complex.wgsl"),
    ),
];

/// One library function: its WGSL text (marker lines included) and the functions it calls.
#[derive(Debug)]
struct Entry {
    text: &'static str,
    requires: Vec<&'static str>,
}

/// The parsed library, keyed by function name, plus the names in source order.
#[derive(Debug)]
struct Library {
    entries: HashMap<&'static str, Entry>,
    names: Vec<&'static str>,
}

static LIBRARY: OnceLock<std::result::Result<Library, String>> = OnceLock::new();

fn library() -> Result<&'static Library> {
    LIBRARY
        .get_or_init(|| parse(&SOURCES))
        .as_ref()
        .map_err(|e| Error::internal(format!("math library: {e}")))
}

/// Splits the sources at `// @fn` markers. Text before the first marker of a file is a file
/// comment and is dropped.
fn parse(sources: &[(&str, &'static str)]) -> std::result::Result<Library, String> {
    let mut entries = HashMap::new();
    let mut names = Vec::new();
    for (file, src) in sources {
        let mut starts: Vec<(usize, &'static str)> = Vec::new();
        let mut offset = 0;
        for line in src.split_inclusive('\n') {
            if let Some(name) = line.trim().strip_prefix("// @fn ") {
                starts.push((offset, name.trim()));
            }
            offset += line.len();
        }
        for (k, &(start, name)) in starts.iter().enumerate() {
            let end = starts.get(k + 1).map_or(src.len(), |s| s.0);
            let text = &src[start..end];
            let requires = text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("// @requires "))
                .flat_map(str::split_whitespace)
                .collect();
            if entries.insert(name, Entry { text, requires }).is_some() {
                return Err(format!("{file}: function `{name}` defined twice"));
            }
            names.push(name);
        }
    }
    for name in &names {
        for dep in &entries[name].requires {
            if !entries.contains_key(dep) {
                return Err(format!("`{name}` requires unknown function `{dep}`"));
            }
        }
    }
    Ok(Library { entries, names })
}

/// Whether the math library defines a function of this name.
pub fn has_function(name: &str) -> bool {
    library().is_ok_and(|lib| lib.entries.contains_key(name))
}

/// Every function name the library defines, in source order.
pub fn function_names() -> Result<Vec<&'static str>> {
    Ok(library()?.names.clone())
}

/// WGSL source text of the requested functions and everything they call, each once,
/// dependencies before their callers. An unknown name is an internal error: the code generator
/// should only ask for functions it knows exist.
pub fn math_library<'a>(used: impl IntoIterator<Item = &'a str>) -> Result<String> {
    let lib = library()?;
    let mut out = String::new();
    // 0 = unvisited, 1 = on the stack, 2 = emitted.
    let mut state: HashMap<&str, u8> = HashMap::new();
    for name in used {
        let Some((&key, _)) = lib.entries.get_key_value(name) else {
            return Err(Error::internal(format!(
                "math library has no function `{name}`"
            )));
        };
        emit(lib, key, &mut state, &mut out)?;
    }
    Ok(out)
}

fn emit(
    lib: &'static Library,
    name: &'static str,
    state: &mut HashMap<&'static str, u8>,
    out: &mut String,
) -> Result<()> {
    match state.get(name) {
        Some(2) => return Ok(()),
        Some(_) => {
            return Err(Error::internal(format!(
                "math library: dependency cycle through `{name}`"
            )))
        }
        None => {}
    }
    state.insert(name, 1);
    let entry = &lib.entries[name];
    for dep in &entry.requires {
        emit(lib, dep, state, out)?;
    }
    out.push_str(entry.text);
    if !entry.text.ends_with('\n') {
        out.push('\n');
    }
    state.insert(name, 2);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(src: &str) -> std::result::Result<(), String> {
        let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
        let caps = naga::valid::Capabilities::FLOAT64 | naga::valid::Capabilities::SHADER_INT64;
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .map_err(|e| e.emit_to_string(src))?;
        Ok(())
    }

    #[test]
    fn library_parses() {
        let names = function_names().unwrap();
        assert!(names.len() > 10);
        assert!(has_function("wh_exp_f32"));
        assert!(!has_function("wh_nonexistent_f32"));
    }

    /// The functions the code generator relies on exist in both precisions.
    #[test]
    fn the_promised_functions_exist() {
        let real = [
            "exp",
            "expm1",
            "log",
            "log1p",
            "sin",
            "cos",
            "tan",
            "tanh",
            "atan",
            "atan2",
            "asin",
            "acos",
            "sinh",
            "cosh",
            "asinh",
            "acosh",
            "atanh",
            "erf",
            "erfc",
            "erf_inv",
            "lgamma",
            "digamma",
            "polygamma",
            "zeta",
            "bessel_i1e",
            "cbrt",
            "pow",
            "logistic",
            "sqrt",
            "rsqrt",
            "rem",
            "round_afz",
            "next_after",
        ];
        let complex = [
            "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "sinh", "cosh",
            "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "pow", "div", "abs", "sign",
            "logistic",
        ];
        for ty in ["f32", "f64"] {
            for f in real {
                assert!(has_function(&format!("wh_{f}_{ty}")), "wh_{f}_{ty}");
            }
            for f in complex {
                assert!(has_function(&format!("wh_c{f}_{ty}")), "wh_c{f}_{ty}");
            }
        }
        assert!(has_function("wh_round_even_f64") && has_function("wh_trunc_f64"));
    }

    #[test]
    fn unknown_name_is_an_error() {
        let err = math_library(["wh_nonexistent_f32"]).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::Internal);
    }

    #[test]
    fn dependencies_come_first_and_once() {
        let lib = library().unwrap();
        let (&name, _) = lib
            .entries
            .iter()
            .find(|(_, e)| !e.requires.is_empty())
            .unwrap();
        let dep = lib.entries[name].requires[0];
        let src = math_library([name, dep, name]).unwrap();
        let marker = |n: &str| format!("// @fn {n}\n");
        let d = src.find(&marker(dep)).unwrap();
        let f = src.find(&marker(name)).unwrap();
        assert!(d < f);
        assert_eq!(src.matches(&marker(name)).count(), 1);
    }

    #[test]
    fn parse_rejects_unknown_dependency() {
        let src = "// @fn a\n// @requires b\nfn a() {}\n";
        assert!(parse(&[("t.wgsl", src)]).is_err());
    }

    /// Every function, pulled in alone with its dependencies, is a valid WGSL module.
    #[test]
    fn every_function_validates_alone() {
        for name in function_names().unwrap() {
            let src = math_library([name]).unwrap();
            if let Err(e) = validate(&src) {
                panic!("{name}: {e}");
            }
        }
    }
}
