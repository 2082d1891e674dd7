//! The WGSL math library: transcendental and special functions for f32 and f64 (and complex
//! numbers as `vec2`), written in plain arithmetic so that results meet the conformance
//! tolerances on every driver instead of inheriting the looser bounds of the built-ins.
//!
//! The functions live in `shaders/math/*.wgsl`. Each one is preceded by a marker line
//! `// @fn NAME` and optionally `// @requires DEP1 DEP2` naming the other library functions it
//! calls; everything from a marker up to the next one belongs to that function. Names follow
//! `wh_<fn>_<f32|f64>` (`wh_c<fn>_<f32|f64>` for complex arguments). Kernels get the
//! functions they call, with their dependencies, from [`super::library::resolve`], the one
//! resolver of these files and `shaders/helpers.wgsl` (a math function may call a helper such
//! as `wh_div_f32`, and the other way round); this module holds the library's conventions and
//! the tests that every promised function exists.
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

#[cfg(test)]
mod tests {
    use super::super::library::has_function;

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
}
