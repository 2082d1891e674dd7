//! A windowed sum over a value padded with zeros between its elements, whose windows are as
//! long as the spacing, holds one element of the value per window: it is that value with each
//! element repeated (an upsampling), and becomes `broadcast_in_dim`, `reshape` and `pad`.
//!
//! This is the gradient of every average pool whose windows equal its strides (flax's
//! `nn.avg_pool(x, (2, 2), (2, 2))`): JAX transposes the pool's windowed sum into
//! `reduce_window(pad(g, 0, low, high, interior = stride - 1), add, window)` with unit
//! strides. Per dimension with spacing `s = interior + 1` and window `s`, window `i` of the
//! padded value covers exactly one position `low + k*s` of an element `k`, the others being
//! zeros: the result is `g[ceil((i - low) / s)]` where that index lies in `g`, zero elsewhere.
//! That is the value with each element repeated `s` times along the dimension
//! (`reshape(broadcast_in_dim(g))`), shifted by `low - s + 1` (a `pad` with those edges, no
//! interior). Run as a windowed sum it was a padded copy (four times the gradient for 2 x 2
//! windows) and a kernel summing four elements per result; as index arithmetic it fuses into
//! whatever reads it (the select of a ReLU's gradient, the next convolution's operand).
//!
//! Only zeros are added to each element, so the values are the same, except that a window
//! holding `-0.0` sums to `+0.0` (`0 + -0.0`) and now gives `-0.0`, as XLA's algebraic
//! simplifier gives for `x + 0`. The sum must add (its init and the padding value zeros);
//! strides, dilations and the sum's own padding must be the unit ones.
//! `WGPU_HLO_REPEAT_WINDOWS=0` keeps the windowed sums.

use std::collections::{HashMap, HashSet};

use crate::ir::{Function, Op, Operation, Region, Type, ValueId};

/// A `pad` of a value: (the value, the padding value, low, high, interior).
type Pad = (ValueId, ValueId, Vec<i64>, Vec<i64>, Vec<i64>);

/// Applies the rewrite throughout `f`.
pub fn repeat_single_element_windows(f: &mut Function) {
    if std::env::var("WGPU_HLO_REPEAT_WINDOWS").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    let mut uses = HashMap::new();
    let mut zeros = HashSet::new();
    super::scatter_add::survey(&body, &mut uses, &mut zeros);
    let mut pads = HashMap::new();
    collect_pads(&body, &mut pads);
    rewrite_region(f, &mut body, &zeros, &pads);
    f.body = Some(body);
}

/// Every `pad` of `r` and its nested regions, by result.
fn collect_pads(r: &Region, pads: &mut HashMap<ValueId, Pad>) {
    for op in &r.ops {
        if let (
            Op::Pad {
                low,
                high,
                interior,
            },
            [x, p],
            [res],
        ) = (&op.op, op.operands.as_slice(), op.results.as_slice())
        {
            pads.insert(*res, (*x, *p, low.clone(), high.clone(), interior.clone()));
        }
        for sub in &op.regions {
            collect_pads(sub, pads);
        }
    }
}

fn rewrite_region(
    f: &mut Function,
    region: &mut Region,
    zeros: &HashSet<ValueId>,
    pads: &HashMap<ValueId, Pad>,
) {
    let ops = std::mem::take(&mut region.ops);
    for mut op in ops {
        for sub in &mut op.regions {
            rewrite_region(f, sub, zeros, pads);
        }
        match repeated(f, &op, zeros, pads) {
            Some(new) => region.ops.extend(new),
            None => region.ops.push(op),
        }
    }
}

/// Whether `v` (a per-dimension attribute of a tensor of `rank` dimensions) is empty or every
/// element is `one`.
pub(super) fn all(v: &[i64], rank: usize, one: i64) -> bool {
    v.is_empty() || (v.len() == rank && v.iter().all(|&x| x == one))
}

/// The broadcast, reshape and pad replacing `op`, when it is a windowed sum of one element per
/// window over a zero-padded value.
fn repeated(
    f: &mut Function,
    op: &Operation,
    zeros: &HashSet<ValueId>,
    pads: &HashMap<ValueId, Pad>,
) -> Option<Vec<Operation>> {
    let Op::ReduceWindow {
        window_dimensions,
        window_strides,
        base_dilations,
        window_dilations,
        padding,
    } = &op.op
    else {
        return None;
    };
    let ([x, init], [r], [body]) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.as_slice(),
    ) else {
        return None;
    };
    if !zeros.contains(init) || !super::scatter_add::adds_its_arguments(body) {
        return None;
    }
    let (g, pad_value, low, high, interior) = pads.get(x)?;
    if !zeros.contains(pad_value) {
        return None;
    }
    let gt = f.ty(*g).as_tensor()?.clone();
    let rt = f.ty(*r).as_tensor()?.clone();
    let rank = gt.shape.len();
    if !gt.is_static()
        || !rt.is_static()
        || rt.dtype != gt.dtype
        || rt.shape.len() != rank
        || window_dimensions.len() != rank
        || [low, high, interior].iter().any(|v| v.len() != rank)
        || !all(window_strides, rank, 1)
        || !all(base_dilations, rank, 1)
        || !all(window_dilations, rank, 1)
        || !(padding.is_empty() || padding.iter().all(|&p| p == (0, 0)))
    {
        return None;
    }
    // Per dimension: the spacing, which the window must equal, and the result's extent.
    let mut spacing = Vec::with_capacity(rank);
    for d in 0..rank {
        let s = interior[d].checked_add(1)?;
        if interior[d] < 0 || window_dimensions[d] != s || gt.shape[d] < 1 {
            return None;
        }
        // The padded extent less the window, plus one.
        let extent = gt.shape[d]
            .checked_mul(s)?
            .checked_add(low[d])?
            .checked_add(high[d])?
            .checked_sub(2 * s - 2)?;
        if extent != rt.shape[d] {
            return None;
        }
        spacing.push(s);
    }
    let loc = &op.loc;
    let mut out = Vec::new();
    // Each element repeated along the dimensions spaced out: a new dimension of `s` after each.
    let mut expanded = Vec::new();
    let mut positions = Vec::new();
    let mut repeated = Vec::new();
    for (&n, &s) in gt.shape.iter().zip(&spacing) {
        positions.push(expanded.len() as i64);
        expanded.push(n);
        if s > 1 {
            expanded.push(s);
        }
        repeated.push(n * s);
    }
    let mut v = *g;
    if expanded.len() > rank {
        let b = f.new_value(Type::tensor(expanded, gt.dtype));
        out.push(Operation::new(
            Op::BroadcastInDim {
                dimensions: positions,
            },
            vec![v],
            vec![b],
            loc.clone(),
        ));
        let s = f.new_value(Type::tensor(repeated.clone(), gt.dtype));
        out.push(Operation::new(Op::Reshape, vec![b], vec![s], loc.clone()));
        v = s;
    }
    let shift_low: Vec<i64> = (0..rank).map(|d| low[d] - spacing[d] + 1).collect();
    let shift_high: Vec<i64> = (0..rank).map(|d| high[d] - spacing[d] + 1).collect();
    if shift_low.iter().chain(&shift_high).all(|&e| e == 0) {
        // The repeats are the result: let the last op define it.
        match out.last_mut() {
            Some(last) => last.results = vec![*r],
            None => return None,
        }
        return Some(out);
    }
    out.push(Operation::new(
        Op::Pad {
            low: shift_low,
            high: shift_high,
            interior: vec![0; rank],
        },
        vec![v, *init],
        vec![*r],
        loc.clone(),
    ));
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as names;

    fn program(
        window: &str,
        interior: &str,
        low: &str,
        high: &str,
        padded: &str,
        out: &str,
    ) -> String {
        format!(
            r#"
func.func @main(%g: tensor<2x7x7x3xf32>) -> tensor<{out}xf32> {{
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %p = "stablehlo.pad"(%g, %z) {{edge_padding_high = array<i64: {high}>, edge_padding_low = array<i64: {low}>, interior_padding = array<i64: {interior}>}} : (tensor<2x7x7x3xf32>, tensor<f32>) -> tensor<{padded}xf32>
  %r = "stablehlo.reduce_window"(%p, %z) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{window_dimensions = array<i64: {window}>}} : (tensor<{padded}xf32>, tensor<f32>) -> tensor<{out}xf32>
  return %r : tensor<{out}xf32>
}}"#
        )
    }

    #[test]
    fn an_average_pools_gradient_is_a_repeat() {
        // 2 x 2 windows with strides 2, padding VALID: the gradient of 14x14 -> 7x7.
        let src = program(
            "1, 2, 2, 1",
            "0, 1, 1, 0",
            "0, 1, 1, 0",
            "0, 1, 1, 0",
            "2x15x15x3",
            "2x14x14x3",
        );
        assert_eq!(
            names(&src),
            [
                "stablehlo.broadcast_in_dim",
                "stablehlo.reshape",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn shifted_repeats_are_padded() {
        // 3 x 3 windows with strides 3, from 15 x 15 with one row and column left over.
        let src = program(
            "1, 3, 3, 1",
            "0, 2, 2, 0",
            "0, 2, 2, 0",
            "0, 3, 3, 0",
            "2x24x24x3",
            "2x22x22x3",
        );
        assert_eq!(
            names(&src),
            [
                "stablehlo.constant",
                "stablehlo.broadcast_in_dim",
                "stablehlo.reshape",
                "stablehlo.pad",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn overlapping_windows_stay_sums() {
        // 3 x 3 windows with strides 2 hold two elements along each dimension.
        let src = program(
            "1, 3, 3, 1",
            "0, 1, 1, 0",
            "0, 2, 2, 0",
            "0, 2, 2, 0",
            "2x17x17x3",
            "2x15x15x3",
        );
        assert!(names(&src).contains(&"stablehlo.reduce_window".to_string()));
    }
}
