//! Passes over the IR. Each pass is one file with its own tests; `prepare` runs the standard
//! pipeline that turns a parsed module into the single function the compiler lowers.

pub mod canonicalize;
pub mod checks;
pub mod conv_phases;
pub mod cse;
pub mod dce;
pub mod dot_layout;
pub mod dot_transpose;
pub mod fold_rows;
pub mod guarded;
pub mod hoist_dots;
pub mod inline;
pub mod merge_dots;
pub mod narrow_dots;
pub mod narrow_scatters;
pub mod repeat_windows;
pub mod rewrite;
pub mod rows_first;
pub mod scatter_add;
pub mod speculate;
pub mod static_shapes;
pub mod tokens;
pub mod trip_count;
pub mod unroll;
pub mod vector_dots;
pub mod whole_loops;
pub mod window_reductions;

use crate::error::Result;
use crate::ir::{verify, Function, Module};

/// Verifies `module`, inlines everything into `entry`, turns tokens into empty tensors, makes
/// known dynamic shapes static, canonicalizes, merges repeated ops (`cse`), adds scatters into zeros into what they are
/// added to (`scatter_add`), reduces rows first where a full reduction reads per-row values
/// (`rows_first`), folds transposes of dot results and of dot
/// operands into the dots (`dot_transpose`), computes products of a loop's slices with loop-invariant
/// operands before the loop (`hoist_dots`), runs dots and convolutions of narrow floats in f32 (`narrow_dots`), turns dots
/// without free dimensions into a multiply and a reduction (`vector_dots`), windowed sums holding
/// one element per window into repeats (`repeat_windows`), windowed reductions whose windows
/// tile their input into reductions of a reshape (`window_reductions`), scatters into narrow
/// types that set, add, multiply or take maxima/minima in 32 bits (`narrow_scatters`), splits
/// convolutions with lhs dilation into one per output phase (`conv_phases`), unrolls counted
/// loops with small bodies (`unroll`), removes dead code and the vectors of decompositions
/// nothing reads (`dce::drop_unused_vectors`), then verifies the result again.
pub fn prepare(module: &Module, entry: &str) -> Result<Function> {
    verify::verify_module(module)?;
    let mut f = inline::inline_entry(module, entry)?;
    tokens::lower_tokens(&mut f);
    static_shapes::make_static(&mut f);
    // (Canonicalization drops optimization barriers: a barrier in a branch keeps the
    // conditional.)
    let kept = speculate::with_barriers(&f);
    canonicalize::canonicalize(&mut f);
    // Transposes composed away leave dead ones, which would count as uses of a dot's result.
    if let Some(body) = f.body.as_mut() {
        dce::eliminate_dead_code(body);
    }
    speculate::speculate_conditionals(&mut f, &kept);
    cse::eliminate_common_subexpressions(&mut f);
    scatter_add::scatter_add_into_operand(&mut f);
    rows_first::reduce_rows_first(&mut f);
    dot_transpose::transpose_into_dot(&mut f);
    dot_transpose::operand_transposes_into_dot(&mut f);
    hoist_dots::hoist_sliced_dots(&mut f);
    merge_dots::merge_shared_lhs_dots(&mut f);
    narrow_dots::upcast_narrow_dots(&mut f);
    vector_dots::vector_dots_to_reductions(&mut f);
    repeat_windows::repeat_single_element_windows(&mut f);
    window_reductions::non_overlapping_windows_to_reductions(&mut f);
    narrow_scatters::widen_narrow_scatters(&mut f);
    conv_phases::split_dilated_convolutions(&mut f);
    guarded::guard_loops(&mut f);
    unroll::unroll_counted_loops(&mut f);
    whole_loops::matrices_by_rows(&mut f);
    if let Some(body) = f.body.as_mut() {
        dce::eliminate_dead_code(body);
        dce::drop_unused_vectors(body);
    }
    verify::verify_function(&f)?;
    Ok(f)
}

/// The names of the ops `prepare` leaves in `@main` of the module `src` (tests of the passes).
#[cfg(test)]
pub(crate) fn prepared_op_names(src: &str) -> Vec<String> {
    let m = crate::frontend::text::parse_module(src, "t").expect("parse");
    let f = prepare(&m, "main").expect("prepare");
    f.body
        .as_ref()
        .map(|b| b.ops.iter().map(|o| o.name()).collect())
        .unwrap_or_default()
}
