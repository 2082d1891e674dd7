//! On CPU adapters, a reduction over the leading dimensions of a large tensor into few
//! columns (a 1048576 x 16 column sum; the bias gradient or batch statistics of a
//! convolution with few channels, `N x H x W x C` into `C`) is taken as a reduction of wider
//! rows: `f` consecutive rows side by side, `[R, C]` read as `[R / f, f * C]` (the same
//! bytes; up to [`FOLDED_COLUMNS`] columns, at least [`MIN_FOLDED_ROWS`] rows), then the
//! `f` partial rows of the result are reduced. The reduce kernel's column
//! path gives a thread groups of four columns of one row at a time (`reduce_kernel`); rows
//! of 16 columns leave it one group per row and a loop step per 16 bytes (lavapipe, 2-core
//! Intel host: 1048576 x 16 sums 26 ms, against 3.5 ms for 65536 x 128 of half the bytes).
//!
//! Only single-operand reductions whose body is one associative, commutative op with its
//! identity as initial value (as `rows_first` splits) are folded, of 32-bit elements, with
//! fewer than [`MAX_COLUMNS`] columns, at least [`MIN_ELEMENTS`] elements, and a row count
//! divisible by the fold. `WGPU_HLO_FOLD_ROWS=0` turns it off.

use std::collections::HashMap;

use super::rewrite::{copy_ops_within, expand_chosen_ops};
use crate::ir::{ElementType, Function, Op, Operation, Region, Type, ValueId};

/// Reductions into this many columns or more are left as they are.
pub const MAX_COLUMNS: i64 = 64;

/// Folded rows hold at most this many columns: the column path's threads then take many
/// groups of a row (lavapipe, 1048576 x 16 sums, min of 10 calls, two runs each: rows of
/// 128 columns 15.0, 15.1 ms; of 1024 9.5, 11.0; of 4096 9.3, 11.4; unfolded 26.5-27.5).
pub const FOLDED_COLUMNS: i64 = 1024;

/// Folding stops at this many rows, which the column path cuts into chunks for the cores.
pub const MIN_FOLDED_ROWS: i64 = 512;

/// Smaller reductions are left as they are (their time is the launch's).
pub const MIN_ELEMENTS: i64 = 1 << 20;

/// Applies the fold throughout `f`.
pub fn fold_narrow_rows(f: &mut Function) {
    if std::env::var("WGPU_HLO_FOLD_ROWS").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    expand_chosen_ops(f, fold_of, fold);
}

/// How many rows `op` takes side by side, when it is a reduction this pass folds.
fn fold_of(
    f: &Function,
    ops: &[Operation],
    def: &HashMap<ValueId, usize>,
    op: &Operation,
) -> Option<i64> {
    let (dimensions, _, t) = super::rows_first::splittable_reduce(f, ops, def, op)?;
    if !matches!(
        t.dtype,
        ElementType::F32 | ElementType::I32 | ElementType::U32
    ) {
        return None;
    }
    // The leading dimensions reduced, the others kept.
    let k = dimensions.len();
    let mut sorted = dimensions.to_vec();
    sorted.sort_unstable();
    if k == 0 || k >= t.shape.len() || sorted != (0..k as i64).collect::<Vec<_>>() {
        return None;
    }
    let rows: i64 = t.shape[..k].iter().product();
    let columns: i64 = t.shape[k..].iter().product();
    if columns <= 0 || columns >= MAX_COLUMNS || rows.saturating_mul(columns) < MIN_ELEMENTS {
        return None;
    }
    let mut fold = 1;
    while fold * 2 * columns <= FOLDED_COLUMNS
        && rows % (fold * 2) == 0
        && rows / (fold * 2) >= MIN_FOLDED_ROWS
    {
        fold *= 2;
    }
    // The folded rows must come in groups of four columns (the kernel's vec4 reads).
    (fold >= 2 && (fold * columns) % 4 == 0).then_some(fold)
}

/// `op` as a reduction of `[rows / fold, fold * columns]`, then of the `[fold, columns]`
/// partial rows (reshaped back to the result's shape).
fn fold(f: &mut Function, op: Operation, fold: i64) -> Vec<Operation> {
    let (x, init, r) = (op.operands[0], op.operands[1], op.results[0]);
    let (Some(t), Some(rt)) = (f.ty(x).as_tensor().cloned(), f.ty(r).as_tensor().cloned()) else {
        return vec![op];
    };
    let k = t.shape.len() - rt.shape.len();
    let rows: i64 = t.shape[..k].iter().product();
    let columns: i64 = t.shape[k..].iter().product();
    let reshape = |operand: ValueId, result: ValueId| Operation {
        op: Op::Reshape,
        operands: vec![operand],
        results: vec![result],
        regions: vec![],
        loc: op.loc.clone(),
    };
    let wide = f.new_value(Type::tensor(vec![rows / fold, fold * columns], t.dtype));
    let partial = f.new_value(Type::tensor(vec![fold * columns], t.dtype));
    let partial_rows = f.new_value(Type::tensor(vec![fold, columns], t.dtype));
    let mut out = vec![reshape(x, wide)];
    // The first reduction's body: a copy of the original's, on arguments of its own.
    let mut map = HashMap::new();
    let mut args = Vec::new();
    for a in &op.regions[0].args {
        let n = f.new_value(f.ty(*a).clone());
        map.insert(*a, n);
        args.push(n);
    }
    let first_body = copy_ops_within(f, &op.regions[0].ops, &mut map);
    out.push(Operation {
        op: Op::Reduce {
            dimensions: vec![0],
        },
        operands: vec![wide, init],
        results: vec![partial],
        regions: vec![Region {
            args,
            ops: first_body,
        }],
        loc: op.loc.clone(),
    });
    out.push(reshape(partial, partial_rows));
    if rt.shape.len() == 1 {
        out.push(Operation {
            op: Op::Reduce {
                dimensions: vec![0],
            },
            operands: vec![partial_rows, init],
            ..op
        });
    } else {
        let flat = f.new_value(Type::tensor(vec![columns], t.dtype));
        let loc = op.loc.clone();
        out.push(Operation {
            op: Op::Reduce {
                dimensions: vec![0],
            },
            operands: vec![partial_rows, init],
            results: vec![flat],
            ..op
        });
        out.push(Operation {
            op: Op::Reshape,
            operands: vec![flat],
            results: vec![r],
            regions: vec![],
            loc,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Op;

    fn prepared(src: &str) -> Function {
        let m = crate::frontend::text::parse_module(src, "t").unwrap();
        let mut f = crate::passes::prepare(&m, "main").unwrap();
        fold_narrow_rows(&mut f);
        crate::ir::verify::verify_function(&f).unwrap();
        f
    }

    fn reduces(f: &Function) -> Vec<Vec<i64>> {
        f.body
            .as_ref()
            .unwrap()
            .ops
            .iter()
            .filter(|o| matches!(o.op, Op::Reduce { .. }))
            .map(|o| f.ty(o.operands[0]).as_tensor().unwrap().shape.clone())
            .collect()
    }

    fn column_sum(shape: &str, dims: &str, out: &str, init: &str, body: &str) -> String {
        format!(
            r#"func.func @main(%x: tensor<{shape}xf32>) -> tensor<{out}xf32> {{
  %z = stablehlo.constant dense<{init}> : tensor<f32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.{body} across dimensions = [{dims}] : (tensor<{shape}xf32>, tensor<f32>) -> tensor<{out}xf32>
  return %s : tensor<{out}xf32>
}}"#
        )
    }

    #[test]
    fn narrow_columns_are_folded_into_wide_rows() {
        let f = prepared(&column_sum("1048576x16", "0", "16", "0.0", "add"));
        assert_eq!(reduces(&f), vec![vec![16384, 1024], vec![64, 16]]);
        // Batch statistics of a 3-channel image batch: 768 columns (a multiple of 4).
        let f = prepared(&column_sum(
            "256x64x64x3",
            "0, 1, 2",
            "3",
            "0xFF800000",
            "maximum",
        ));
        assert_eq!(reduces(&f), vec![vec![4096, 768], vec![256, 3]]);
        // Several kept dimensions come back in the result's shape.
        let f = prepared(&column_sum("262144x2x4", "0", "2x4", "0.0", "add"));
        assert_eq!(reduces(&f), vec![vec![2048, 1024], vec![128, 8]]);
    }

    #[test]
    fn others_stay_whole() {
        for src in [
            column_sum("1048576x64", "0", "64", "0.0", "add"),
            column_sum("25088x32", "0", "32", "0.0", "add"),
            column_sum("1048576x16", "0", "16", "1.0", "add"),
            column_sum("1048576x16", "0", "16", "0.0", "subtract"),
            column_sum("16x65536", "1", "16", "0.0", "add"),
            column_sum("1048577x16", "0", "16", "0.0", "add"),
        ] {
            let f = prepared(&src);
            assert_eq!(reduces(&f).len(), 1, "{src}");
        }
    }
}
