//! A `convolution` with lhs dilation `d > 1` (a transposed convolution, and the input
//! gradient of every strided convolution) becomes one convolution per output phase, without
//! dilation, and an interleave of their results.
//!
//! The dilated input has `d - 1` holes between its values, so of a window of `K` taps only
//! about `K / d` meet a value at any output position; the implicit-GEMM kernel still runs
//! every tap (it cannot skip a tap for some rows of a block but not others, and neighbouring
//! rows alternate phases). Output positions `o = d·i + p` of one phase `p` all meet the same
//! taps `k = k0 + d·m` (`k0 = (low - p) mod d`), reading input `i + m + c` with
//! `c = (p + k0 - low) / d`: an ordinary convolution of the undilated input with the kernel
//! slice `k0::d` and low padding `-c` (possibly negative). The phases' results, padded to
//! `ceil(O / d)`, interleave by a reshape that inserts a unit axis after the spatial one, a
//! concatenate along it, a reshape that merges the two, and a slice back to `O`.
//!
//! Over two spatial dimensions of stride 2 that is four convolutions of a quarter of the work
//! each. On lavapipe a 3x3 `conv_transpose` of stride 2 over 8x32x32x64 took 46 ms before
//! (the same as a dense convolution with the dilated input's 4x the rows).
//!
//! The rewrite applies per spatial dimension where the window stride and rhs dilation are 1
//! and the window is not reversed, and only when the convolution does at least
//! [`MIN_WORK`] multiply-adds: a small one is cheaper as one launch than as `d^s` launches
//! and an interleave.

use crate::ir::ops::Convolution;
use crate::ir::{Function, Literal, Op, Operation, TensorType, Type, ValueId};

/// Multiply-adds (output elements x taps x input features per group) below which a
/// convolution is left as it is.
pub const MIN_WORK: u64 = 1 << 22;

/// [`MIN_WORK`], or `WGPU_HLO_CONV_PHASES_MIN_WORK` (tests force the rewrite on small
/// convolutions with 0; a huge value turns it off for comparisons).
fn min_work() -> u64 {
    std::env::var("WGPU_HLO_CONV_PHASES_MIN_WORK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MIN_WORK)
}

/// Applies the rewrite throughout `f`.
pub fn split_dilated_convolutions(f: &mut Function) {
    super::rewrite::expand_ops(f, rewritten);
}

fn tensor(f: &Function, v: ValueId) -> Option<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) if t.is_static() => Some(t.clone()),
        _ => None,
    }
}

/// One spatial dimension the rewrite splits into phases.
#[derive(Clone, Copy, Debug)]
struct Split {
    /// Index among the spatial dimensions.
    s: usize,
    /// The lhs dilation `d`.
    d: i64,
    /// Input length, kernel length, output length, low padding.
    l: i64,
    k: i64,
    o: i64,
    low: i64,
    /// The output axis and the kernel axis of this dimension.
    out_axis: usize,
    k_axis: usize,
}

impl Split {
    /// Results per phase after padding: `ceil(o / d)`.
    fn q(&self) -> i64 {
        (self.o + self.d - 1) / self.d
    }

    /// Phase `p`'s first tap `k0`, its tap count, its low padding and its output count.
    fn phase(&self, p: i64) -> (i64, i64, i64, i64) {
        let k0 = (self.low - p).rem_euclid(self.d);
        let taps = if k0 < self.k {
            (self.k - k0 + self.d - 1) / self.d
        } else {
            0
        };
        let c = (p + k0 - self.low).div_euclid(self.d);
        let outs = if p < self.o {
            (self.o - p + self.d - 1) / self.d
        } else {
            0
        };
        (k0, taps, -c, outs)
    }
}

fn rewritten(f: &mut Function, op: &Operation) -> Option<Vec<Operation>> {
    let Op::Convolution(c) = &op.op else {
        return None;
    };
    let ([x, w], [result]) = (&op.operands[..], &op.results[..]) else {
        return None;
    };
    let (xt, wt, rt) = (tensor(f, *x)?, tensor(f, *w)?, tensor(f, *result)?);
    let dn = &c.dimension_numbers;
    let sp = dn.input_spatial_dimensions.len();
    let get = |v: &[i64], s: usize| v.get(s).copied().unwrap_or(1);
    let mut splits = Vec::new();
    for s in 0..sp {
        let d = get(&c.lhs_dilation, s);
        if d <= 1
            || get(&c.window_strides, s) != 1
            || get(&c.rhs_dilation, s) != 1
            || c.window_reversal.get(s).copied().unwrap_or(false)
        {
            continue;
        }
        let (xa, ka, oa) = (
            *dn.input_spatial_dimensions.get(s)? as usize,
            *dn.kernel_spatial_dimensions.get(s)? as usize,
            *dn.output_spatial_dimensions.get(s)? as usize,
        );
        let split = Split {
            s,
            d,
            l: *xt.shape.get(xa)?,
            k: *wt.shape.get(ka)?,
            o: *rt.shape.get(oa)?,
            low: c.padding.get(s).map_or(0, |p| p.0),
            out_axis: oa,
            k_axis: ka,
        };
        if split.l < 1 || split.k < 1 || split.o < 1 {
            continue;
        }
        splits.push(split);
    }
    if splits.is_empty() || rt.num_elements() == 0 {
        return None;
    }
    let taps: i64 = dn
        .kernel_spatial_dimensions
        .iter()
        .map(|&a| wt.shape.get(a as usize).copied().unwrap_or(1))
        .product();
    let cin = *wt.shape.get(dn.kernel_input_feature_dimension as usize)?;
    let work = (rt.num_elements() as u64)
        .saturating_mul(taps.max(0) as u64)
        .saturating_mul(cin.max(0) as u64);
    if work < min_work() {
        return None;
    }
    let mut out = Vec::new();
    let loc = op.loc.clone();
    let zero = f.new_value(Type::Tensor(TensorType::scalar(rt.dtype)));
    out.push(Operation::new(
        Op::Constant(Literal::zeros(TensorType::scalar(rt.dtype))),
        vec![],
        vec![zero],
        loc.clone(),
    ));
    // Every combination of phases, the first split's phase varying slowest.
    let count: i64 = splits.iter().map(|s| s.d).product();
    let mut phase_shape = rt.shape.clone();
    for sp in &splits {
        phase_shape[sp.out_axis] = sp.q();
    }
    let mut parts: Vec<ValueId> = Vec::with_capacity(count as usize);
    for n in 0..count {
        let mut rest = n;
        let mut phases = vec![0i64; splits.len()];
        for (i, sp) in splits.iter().enumerate().rev() {
            phases[i] = rest % sp.d;
            rest /= sp.d;
        }
        let mut cv: Convolution = (**c).clone();
        let (mut start, mut limit, mut strides) = (
            vec![0i64; wt.rank()],
            wt.shape.clone(),
            vec![1i64; wt.rank()],
        );
        let mut conv_shape = rt.shape.clone();
        let mut empty = false;
        let mut pad_high = vec![0i64; rt.rank()];
        for (sp, &p) in splits.iter().zip(&phases) {
            let (k0, t, low, outs) = sp.phase(p);
            if t == 0 || outs == 0 {
                empty = true;
                break;
            }
            start[sp.k_axis] = k0;
            limit[sp.k_axis] = k0 + sp.d * (t - 1) + 1;
            strides[sp.k_axis] = sp.d;
            if cv.lhs_dilation.len() < sp.s + 1 {
                cv.lhs_dilation.resize(sp.s + 1, 1);
            }
            cv.lhs_dilation[sp.s] = 1;
            if cv.padding.len() < sp.s + 1 {
                cv.padding.resize(sp.s + 1, (0, 0));
            }
            // outs = l + low + high - t + 1.
            cv.padding[sp.s] = (low, outs - sp.l - low + t - 1);
            conv_shape[sp.out_axis] = outs;
            pad_high[sp.out_axis] = sp.q() - outs;
        }
        let part_ty = TensorType::new(phase_shape.clone(), rt.dtype);
        if empty {
            let v = f.new_value(Type::Tensor(part_ty));
            out.push(Operation::new(
                Op::BroadcastInDim { dimensions: vec![] },
                vec![zero],
                vec![v],
                loc.clone(),
            ));
            parts.push(v);
            continue;
        }
        let kshape: Vec<i64> = (0..wt.rank())
            .map(|a| (limit[a] - start[a] + strides[a] - 1) / strides[a])
            .collect();
        let ks = f.new_value(Type::Tensor(TensorType::new(kshape, wt.dtype)));
        out.push(Operation::new(
            Op::Slice {
                start,
                limit,
                strides,
            },
            vec![*w],
            vec![ks],
            loc.clone(),
        ));
        let cvv = f.new_value(Type::Tensor(TensorType::new(conv_shape, rt.dtype)));
        out.push(Operation::new(
            Op::Convolution(Box::new(cv)),
            vec![*x, ks],
            vec![cvv],
            loc.clone(),
        ));
        if pad_high.iter().all(|&h| h == 0) {
            parts.push(cvv);
            continue;
        }
        let v = f.new_value(Type::Tensor(part_ty));
        out.push(Operation::new(
            Op::Pad {
                low: vec![0; rt.rank()],
                high: pad_high,
                interior: vec![0; rt.rank()],
            },
            vec![cvv, zero],
            vec![v],
            loc.clone(),
        ));
        parts.push(v);
    }
    // Interleave, the last split first: groups of `d` consecutive parts differ in its phase.
    let mut shape = phase_shape;
    for sp in splits.iter().rev() {
        let a = sp.out_axis;
        let mut unit = shape.clone();
        unit.insert(a + 1, 1);
        let mut joined = shape.clone();
        joined.insert(a + 1, sp.d);
        let mut merged = shape.clone();
        merged[a] = sp.q() * sp.d;
        let mut next = Vec::with_capacity(parts.len() / sp.d as usize);
        for group in parts.chunks(sp.d as usize) {
            let mut units = Vec::with_capacity(group.len());
            for &g in group {
                let u = f.new_value(Type::Tensor(TensorType::new(unit.clone(), rt.dtype)));
                out.push(Operation::new(Op::Reshape, vec![g], vec![u], loc.clone()));
                units.push(u);
            }
            let j = f.new_value(Type::Tensor(TensorType::new(joined.clone(), rt.dtype)));
            out.push(Operation::new(
                Op::Concatenate {
                    dimension: (a + 1) as i64,
                },
                units,
                vec![j],
                loc.clone(),
            ));
            let m = f.new_value(Type::Tensor(TensorType::new(merged.clone(), rt.dtype)));
            out.push(Operation::new(Op::Reshape, vec![j], vec![m], loc.clone()));
            if merged[a] == sp.o {
                next.push(m);
                continue;
            }
            let mut limit = merged.clone();
            limit[a] = sp.o;
            let mut sliced = merged.clone();
            sliced[a] = sp.o;
            let s = f.new_value(Type::Tensor(TensorType::new(sliced, rt.dtype)));
            out.push(Operation::new(
                Op::Slice {
                    start: vec![0; rt.rank()],
                    limit,
                    strides: vec![1; rt.rank()],
                },
                vec![m],
                vec![s],
                loc.clone(),
            ));
            next.push(s);
        }
        parts = next;
        shape[a] = sp.o;
    }
    // The last op defines the convolution's result.
    let last = out.last_mut()?;
    if parts.len() != 1 || last.results.len() != 1 || last.results[0] != parts[0] {
        return None;
    }
    last.results[0] = *result;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_cover_every_tap_once() {
        // Brute force: for each output position, the taps meeting an input value.
        for d in 2..4i64 {
            for k in 1..6i64 {
                for low in -3..6i64 {
                    let l = 5i64;
                    let o = (l - 1) * d + 1 + low + 2 - k + 1;
                    if o < 1 {
                        continue;
                    }
                    let sp = Split {
                        s: 0,
                        d,
                        l,
                        k,
                        o,
                        low,
                        out_axis: 0,
                        k_axis: 0,
                    };
                    for pos in 0..o {
                        let want: Vec<(i64, i64)> = (0..k)
                            .filter_map(|t| {
                                let j = pos + t - low;
                                (j >= 0 && j % d == 0 && j / d < l).then_some((t, j / d))
                            })
                            .collect();
                        let (p, i) = (pos % d, pos / d);
                        let (k0, taps, plow, _) = sp.phase(p);
                        let got: Vec<(i64, i64)> = (0..taps)
                            .filter_map(|m| {
                                let j = i + m - plow;
                                (j >= 0 && j < l).then_some((k0 + d * m, j))
                            })
                            .collect();
                        assert_eq!(got, want, "d {d} k {k} low {low} o {pos}");
                    }
                }
            }
        }
    }
}
