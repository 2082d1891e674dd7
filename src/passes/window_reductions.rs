//! A `reduce_window` whose windows tile its input without overlap or gaps (each window as
//! long as its stride, no padding, no dilation: the forward pass of a 2 x 2 max or average
//! pool with strides 2) becomes a `reduce` over a reshape of the input: along a pooled
//! dimension of `n = k * w` elements, `[.., n, ..]` is read as `[.., k, w, ..]` and the `w`
//! dimensions are reduced. A remainder that no window covers (`n % w` elements of a VALID
//! pool) is sliced off first.
//!
//! As a `reduce` the windows are the same elements folded with the same body, and the
//! reduction kernels fuse what computes the input (the ReLU before a pool), which the
//! `reduce_window` kernel read from a buffer written for it. Lavapipe, ReLU then a 2 x 2 pool
//! of 32x56x56x64: sum 12.6-14.4 → 7.4-7.6 ms, max 12.8-13.1 → 7.9-9.8 ms. The reduce
//! kernels fold a window's elements in row-major order, as the `reduce_window` kernel did.
//! `WGPU_HLO_WINDOW_REDUCES=0` keeps the windowed reductions.

use super::repeat_windows::all;
use crate::ir::{Function, Op, Operation, Type};

/// Applies the rewrite throughout `f`.
pub fn non_overlapping_windows_to_reductions(f: &mut Function) {
    if std::env::var("WGPU_HLO_WINDOW_REDUCES").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    super::rewrite::expand_ops(f, rewritten);
}

/// The slices, reshapes and reduce replacing `op`, when its windows tile its input.
fn rewritten(f: &mut Function, op: &Operation) -> Option<Vec<Operation>> {
    let Op::ReduceWindow {
        window_dimensions: window,
        window_strides: strides,
        base_dilations,
        window_dilations,
        padding,
    } = &op.op
    else {
        return None;
    };
    let n = op.results.len();
    if n == 0 || op.operands.len() != 2 * n || op.regions.len() != 1 {
        return None;
    }
    let it = f.ty(op.operands[0]).as_tensor()?.clone();
    let rank = it.shape.len();
    if !it.is_static()
        || window.len() != rank
        || !(strides.is_empty() || strides.len() == rank)
        || !all(base_dilations, rank, 1)
        || !all(window_dilations, rank, 1)
        || !(padding.is_empty() || padding.iter().all(|&p| p == (0, 0)))
    {
        return None;
    }
    let stride = |d: usize| strides.get(d).copied().unwrap_or(1);
    // Every window as long as its stride, and some longer than one element.
    if (0..rank).any(|d| window[d] < 1 || stride(d) != window[d]) || window.iter().all(|&w| w == 1)
    {
        return None;
    }
    // Every input of the same static shape; every result [.., n / w, ..], not empty.
    let kept: Vec<i64> = (0..rank).map(|d| it.shape[d] / window[d]).collect();
    if kept.contains(&0) {
        return None;
    }
    for k in 0..n {
        let t = f.ty(op.operands[k]).as_tensor()?;
        let r = f.ty(op.results[k]).as_tensor()?;
        if t.shape != it.shape || r.shape != kept {
            return None;
        }
    }
    let covered: Vec<i64> = (0..rank).map(|d| kept[d] * window[d]).collect();
    let mut expanded = Vec::new();
    let mut reduced = Vec::new();
    for d in 0..rank {
        expanded.push(kept[d]);
        if window[d] > 1 {
            reduced.push(expanded.len() as i64);
            expanded.push(window[d]);
        }
    }
    let loc = &op.loc;
    let mut out = Vec::new();
    let mut operands = Vec::with_capacity(2 * n);
    for k in 0..n {
        let mut v = op.operands[k];
        let dtype = f.ty(v).as_tensor()?.dtype;
        if covered != it.shape {
            let s = f.new_value(Type::tensor(covered.clone(), dtype));
            out.push(Operation::new(
                Op::Slice {
                    start: vec![0; rank],
                    limit: covered.clone(),
                    strides: vec![1; rank],
                },
                vec![v],
                vec![s],
                loc.clone(),
            ));
            v = s;
        }
        let r = f.new_value(Type::tensor(expanded.clone(), dtype));
        out.push(Operation::new(Op::Reshape, vec![v], vec![r], loc.clone()));
        operands.push(r);
    }
    operands.extend_from_slice(&op.operands[n..]);
    let mut reduce = Operation::new(
        Op::Reduce {
            dimensions: reduced,
        },
        operands,
        op.results.clone(),
        loc.clone(),
    );
    reduce.regions = op.regions.clone();
    out.push(reduce);
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as names;

    fn program(shape: &str, window: &str, strides: &str, out: &str) -> String {
        format!(
            r#"
func.func @main(%x: tensor<{shape}xf32>) -> tensor<{out}xf32> {{
  %z = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %r = "stablehlo.reduce_window"(%x, %z) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.maximum %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{window_dimensions = array<i64: {window}>, window_strides = array<i64: {strides}>}} : (tensor<{shape}xf32>, tensor<f32>) -> tensor<{out}xf32>
  return %r : tensor<{out}xf32>
}}"#
        )
    }

    #[test]
    fn a_pool_with_strides_equal_to_its_windows_is_a_reduce() {
        let src = program("2x8x8x3", "1, 2, 2, 1", "1, 2, 2, 1", "2x4x4x3");
        assert_eq!(
            names(&src),
            [
                "stablehlo.constant",
                "stablehlo.reshape",
                "stablehlo.reduce",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn an_uncovered_remainder_is_sliced_off() {
        let src = program("2x9x7x3", "1, 3, 2, 1", "1, 3, 2, 1", "2x3x3x3");
        assert_eq!(
            names(&src),
            [
                "stablehlo.constant",
                "stablehlo.slice",
                "stablehlo.reshape",
                "stablehlo.reduce",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn overlapping_windows_stay_windowed() {
        let src = program("2x9x9x3", "1, 3, 3, 1", "1, 2, 2, 1", "2x4x4x3");
        assert!(names(&src).contains(&"stablehlo.reduce_window".to_string()));
    }
}
