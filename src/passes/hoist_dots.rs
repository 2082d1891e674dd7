//! Products of a loop's sliced input with a loop-invariant operand, computed for every slice
//! before the loop. A `lax.scan` over `xs` whose step multiplies its slice by a weight
//! (`x_t @ W`, a recurrent cell's input projection) runs one small product per iteration; the
//! same products for every `t` are one product of `xs` with `W`, whose rows the loop then
//! reads by the same dynamic slice. One large product instead of many small ones: a kernel a
//! GPU fills and a launch per step fewer (lavapipe, the GRU of `bench_everyday`, H128 D64 T50
//! B32: three of a forward step's six products).
//!
//! A `dot_general` at the top level of a counted `while` body is hoisted when one operand is
//! `dynamic_slice(X, ...)` (optionally reshaped to drop the sliced unit dimension) that takes
//! one position of one dimension of `X` and all of the others, `X` and the other operand are
//! loop-invariant (defined outside the loop, or carried through it unchanged), and the loop
//! runs at least as many iterations as that dimension has positions (so the hoisted product
//! does no more work than the loop did). In the body the product becomes the dynamic slice of
//! the hoisted product at the same index: `dynamic_slice` clamps that index into the same
//! range in both, so every element is the product the loop computed, for any index. The
//! hoisted product is computed by another kernel, so its sums may be taken in another order.
//!
//! The gradient's side ([`Sink`]): a loop-carried sum of products of the slice with a value
//! computed in the body (`dW += x_t^T dz_t` in a backward scan), or of static slices of such a
//! product (flax's fused LSTM cell: one product for four gates, one accumulator each), becomes
//! one product after the loop, of `X` with the per-step values stacked by the loop at the
//! slices' positions. A loop-carried sum of a reduction (by `add`, from zero) of a value of
//! the body (the bias gradient `db += sum(dz_t)`), or of static slices of one (the fused LSTM
//! cell's per-gate biases, when the sums are all that read it), becomes one reduction of the
//! stacked values after the loop, sharing a product's stack of the same value, else stacked at
//! the trip counter (from 0 by 1). A flax `OptimizedLSTMCell(128)` training step (T60 B32):
//! 747 → 629 dispatches a call.
//! `WGPU_HLO_HOIST_DOTS=0` turns the pass off (for comparisons).

use std::collections::{HashMap, HashSet};

use super::trip_count::counted;
use super::unroll::collect;
use crate::ir::attr::DotDimensionNumbers;
use crate::ir::{
    ElementType, Function, Literal, Op, Operation, Region, Scalar, TensorType, Type, ValueId,
};

/// The largest hoisted product, in bytes.
const MAX_BYTES: i64 = 256 << 20;

/// A hoisted product: the new `dot_general` before the loop, and how the body reads it.
struct Hoist {
    /// The product before the loop (its result is `whole`).
    dot: Operation,
    /// The hoisted product's type.
    whole_ty: TensorType,
    /// Its value (given once planning is done).
    whole: ValueId,
    /// The position of the sliced dimension in the hoisted product.
    at: usize,
    /// The slice's index along the sliced dimension (a value of the body).
    index: ValueId,
}

/// Applies the rewrite throughout `f`.
pub fn hoist_sliced_dots(f: &mut Function) {
    if std::env::var("WGPU_HLO_HOIST_DOTS").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    // Per loop (its first result), per product in its body (the product's result): the plan.
    let mut plans: HashMap<ValueId, Plan> = HashMap::new();
    {
        let mut defs: HashMap<ValueId, &Operation> = HashMap::new();
        let mut loops = Vec::new();
        collect(&body, &mut defs, &mut loops);
        let mut found = Vec::new();
        for op in loops {
            let Some(first) = op.results.first() else {
                continue;
            };
            let hoists = plan(f, op, &defs);
            let sinks = plan_sinks(f, op, &defs);
            if !hoists.is_empty() || !sinks.is_empty() {
                found.push((*first, hoists, sinks));
            }
        }
        // The hoisted products' results are new values of `f`.
        for (first, hoists, sinks) in found {
            let mut made = Vec::new();
            for (dot_result, mut h) in hoists {
                h.whole = f.new_value(Type::Tensor(h.whole_ty.clone()));
                h.dot.results = vec![h.whole];
                made.push((dot_result, h));
            }
            plans.insert(first, (made, sinks));
        }
    }
    if !plans.is_empty() {
        rewrite_region(f, &mut body, &mut plans);
    }
    f.body = Some(body);
}

/// A loop's products to hoist (by their results in its body) and sums to take after it.
type Plan = (Vec<(ValueId, Hoist)>, Vec<Sink>);

/// Values defined anywhere within `r` (its arguments and every op's results, nested too).
fn defined_within(r: &Region, out: &mut HashSet<ValueId>) {
    out.extend(r.args.iter().copied());
    for op in &r.ops {
        out.extend(op.results.iter().copied());
        for sub in &op.regions {
            defined_within(sub, out);
        }
    }
}

/// The values a `while` loop's body reads that do not change in the loop.
pub(crate) struct Invariant {
    /// Values defined within the body.
    inside: HashSet<ValueId>,
    /// Each body argument's operand of the loop, where the body returns it unchanged.
    carried: HashMap<ValueId, ValueId>,
}

impl Invariant {
    /// The invariants of `op` (a `while`; none for any other op).
    pub(crate) fn of(op: &Operation) -> Invariant {
        let mut inside = HashSet::new();
        let mut carried = HashMap::new();
        if let [_, body] = op.regions.as_slice() {
            defined_within(body, &mut inside);
            let returned = body.returned();
            for (j, &a) in body.args.iter().enumerate() {
                if let (Some(&r), Some(&o)) = (returned.get(j), op.operands.get(j)) {
                    if r == a {
                        carried.insert(a, o);
                    }
                }
            }
        }
        Invariant { inside, carried }
    }

    /// The value outside the loop that `v` always equals within the body, if it is invariant.
    pub(crate) fn outer(&self, v: ValueId) -> Option<ValueId> {
        match self.carried.get(&v) {
            Some(&o) => Some(o),
            None => (!self.inside.contains(&v)).then_some(v),
        }
    }
}

/// The products of `op` (a `while`) to hoist, by their results in its body.
fn plan(
    f: &Function,
    op: &Operation,
    defs: &HashMap<ValueId, &Operation>,
) -> Vec<(ValueId, Hoist)> {
    let mut out = Vec::new();
    let Some(c) = counted(op, defs) else {
        return out;
    };
    let [_, body] = op.regions.as_slice() else {
        return out;
    };
    let inv = Invariant::of(op);
    let outer = |v: ValueId| inv.outer(v);
    let local: HashMap<ValueId, &Operation> = body
        .ops
        .iter()
        .flat_map(|o| o.results.iter().map(move |&r| (r, o)))
        .collect();
    for dot in &body.ops {
        let Op::DotGeneral {
            dimension_numbers,
            precision_config,
            algorithm,
        } = &dot.op
        else {
            continue;
        };
        let ([l, r], [res]) = (dot.operands.as_slice(), dot.results.as_slice()) else {
            continue;
        };
        for lhs_sliced in [true, false] {
            let (sliced, other) = if lhs_sliced { (*l, *r) } else { (*r, *l) };
            let Some(h) = hoist(
                f,
                (sliced, other),
                lhs_sliced,
                (dimension_numbers, precision_config, algorithm),
                (&local, &outer, c.trips),
                dot,
            ) else {
                continue;
            };
            out.push((*res, h));
            break;
        }
    }
    out
}

/// A dynamic slice of one position of dimension `p` of `x` (and all of its other
/// dimensions) at `index`, read directly or through a reshape that drops that dimension.
struct Slice {
    x: ValueId,
    p: usize,
    index: ValueId,
    reshaped: bool,
}

/// `v` as a [`Slice`], when it is one.
fn slice_of(f: &Function, local: &HashMap<ValueId, &Operation>, v: ValueId) -> Option<Slice> {
    let mut src = *local.get(&v)?;
    let reshaped = src.op == Op::Reshape;
    if reshaped {
        src = *local.get(src.operands.first()?)?;
    }
    let Op::DynamicSlice { slice_sizes } = &src.op else {
        return None;
    };
    let x = *src.operands.first()?;
    let xt = f.ty(x).as_tensor()?;
    if !xt.is_static() || slice_sizes.len() != xt.rank() {
        return None;
    }
    // Exactly one dimension, `p`, is cut to one position.
    let cut: Vec<usize> = (0..xt.rank())
        .filter(|&d| slice_sizes[d] != xt.shape[d])
        .collect();
    let [p] = cut.as_slice() else {
        return None;
    };
    let p = *p;
    let mut dims = slice_sizes.clone();
    if reshaped {
        dims.remove(p);
    }
    if slice_sizes[p] != 1 || f.ty(v).as_tensor()?.shape != dims {
        return None;
    }
    Some(Slice {
        x,
        p,
        index: *src.operands.get(1 + p)?,
        reshaped,
    })
}

/// The hoist of a product whose operand `sliced` (left when `lhs_sliced`) is a dynamic slice
/// of a loop-invariant tensor and whose `other` operand is loop-invariant (module doc).
#[allow(clippy::type_complexity)]
fn hoist(
    f: &Function,
    (sliced, other): (ValueId, ValueId),
    lhs_sliced: bool,
    (dn, precision_config, algorithm): (
        &DotDimensionNumbers,
        &Vec<crate::ir::attr::Precision>,
        &Option<crate::ir::attr::DotAlgorithm>,
    ),
    (local, outer, trips): (
        &HashMap<ValueId, &Operation>,
        &dyn Fn(ValueId) -> Option<ValueId>,
        u64,
    ),
    dot: &Operation,
) -> Option<Hoist> {
    let Slice {
        x,
        p,
        index,
        reshaped,
    } = slice_of(f, local, sliced)?;
    let xt = f.ty(x).as_tensor()?;
    if xt.shape[p] as u64 > trips {
        return None;
    }
    let (xo, wo) = (outer(x)?, outer(other)?);
    // Operand dimension -> dimension of `X`.
    let to_x = |d: i64| -> i64 {
        if reshaped && d as usize >= p {
            d + 1
        } else {
            d
        }
    };
    let (sb, sc) = if lhs_sliced {
        (&dn.lhs_batching_dimensions, &dn.lhs_contracting_dimensions)
    } else {
        (&dn.rhs_batching_dimensions, &dn.rhs_contracting_dimensions)
    };
    let (xb, xc): (Vec<i64>, Vec<i64>) = (
        sb.iter().map(|&d| to_x(d)).collect(),
        sc.iter().map(|&d| to_x(d)).collect(),
    );
    // The sliced dimension must be a free one.
    if xb.contains(&(p as i64)) || xc.contains(&(p as i64)) {
        return None;
    }
    let new_dn = if lhs_sliced {
        DotDimensionNumbers {
            lhs_batching_dimensions: xb.clone(),
            lhs_contracting_dimensions: xc.clone(),
            ..dn.clone()
        }
    } else {
        DotDimensionNumbers {
            rhs_batching_dimensions: xb.clone(),
            rhs_contracting_dimensions: xc.clone(),
            ..dn.clone()
        }
    };
    // The hoisted product's shape: batch dimensions, the left operand's free ones, then the
    // right's, each in order.
    let wt = f.ty(other).as_tensor()?;
    let rt = f.ty(*dot.results.first()?).as_tensor()?;
    let free = |t: &TensorType, b: &[i64], c: &[i64]| -> Vec<usize> {
        (0..t.rank())
            .filter(|&d| !b.contains(&(d as i64)) && !c.contains(&(d as i64)))
            .collect()
    };
    let x_free = free(xt, &xb, &xc);
    let (wb, wc) = if lhs_sliced {
        (&dn.rhs_batching_dimensions, &dn.rhs_contracting_dimensions)
    } else {
        (&dn.lhs_batching_dimensions, &dn.lhs_contracting_dimensions)
    };
    let w_free = free(wt, wb, wc);
    let batch: Vec<i64> = xb.iter().map(|&d| xt.shape[d as usize]).collect();
    let xs: Vec<i64> = x_free.iter().map(|&d| xt.shape[d]).collect();
    let ws: Vec<i64> = w_free.iter().map(|&d| wt.shape[d]).collect();
    let before_p = x_free.iter().filter(|&&d| d < p).count();
    let (shape, at) = if lhs_sliced {
        ([batch.clone(), xs, ws].concat(), batch.len() + before_p)
    } else {
        let at = batch.len() + ws.len() + before_p;
        ([batch, ws, xs].concat(), at)
    };
    let whole_ty = TensorType::new(shape, rt.dtype);
    // The hoisted product read at one position of `at` has the loop's product's elements.
    let mut one = whole_ty.shape.clone();
    one[at] = 1;
    let mut expected = one.clone();
    if reshaped {
        expected.remove(at);
    }
    if expected != rt.shape || whole_ty.byte_size() as i64 > MAX_BYTES {
        return None;
    }
    let (lo, ro) = if lhs_sliced { (xo, wo) } else { (wo, xo) };
    Some(Hoist {
        dot: Operation::new(
            Op::DotGeneral {
                dimension_numbers: new_dn,
                precision_config: precision_config.clone(),
                algorithm: algorithm.clone(),
            },
            vec![lo, ro],
            vec![ValueId(u32::MAX)],
            dot.loc.clone(),
        ),
        whole_ty,
        whole: ValueId(u32::MAX),
        at,
        index,
    })
}

fn rewrite_region(f: &mut Function, region: &mut Region, plans: &mut HashMap<ValueId, Plan>) {
    let mut out = Vec::with_capacity(region.ops.len());
    let mut subst = HashMap::new();
    for mut op in std::mem::take(&mut region.ops) {
        for sub in &mut op.regions {
            rewrite_region(f, sub, plans);
        }
        // Uses of accumulators summed after their loop read the sums.
        if !subst.is_empty() {
            for v in &mut op.operands {
                if let Some(&n) = subst.get(v) {
                    *v = n;
                }
            }
            for r in &mut op.regions {
                super::rewrite::substitute(r, &subst);
            }
        }
        let (hoists, sinks) = match (op.op == Op::While, op.results.first()) {
            (true, Some(first)) => plans.remove(first).unwrap_or_default(),
            _ => Default::default(),
        };
        if !hoists.is_empty() {
            let mut by_dot: HashMap<ValueId, Hoist> = HashMap::new();
            for (dot_result, h) in hoists {
                out.push(h.dot.clone());
                by_dot.insert(dot_result, h);
            }
            if let Some(body) = op.regions.get_mut(1) {
                read_hoisted(f, body, &by_dot);
            }
        }
        let after = if sinks.is_empty() || op.regions.len() != 2 {
            Vec::new()
        } else {
            apply_sinks(f, &mut op, &sinks, &mut out, &mut subst)
        };
        out.push(op);
        out.extend(after);
    }
    region.ops = out;
}

/// `body` with each hoisted product replaced by the dynamic slice of its hoisted value.
fn read_hoisted(f: &mut Function, body: &mut Region, by_dot: &HashMap<ValueId, Hoist>) {
    let mut out = Vec::with_capacity(body.ops.len() + 3 * by_dot.len());
    for op in std::mem::take(&mut body.ops) {
        let Some(h) = op.results.first().and_then(|r| by_dot.get(r)) else {
            out.push(op);
            continue;
        };
        let result = op.results[0];
        let whole = h.whole_ty.clone();
        let index_dtype = f
            .ty(h.index)
            .as_tensor()
            .map_or(ElementType::I32, |t| t.dtype);
        let zero = f.new_value(Type::tensor(Vec::new(), index_dtype));
        out.push(Operation::new(
            Op::Constant(Literal::scalar(index_dtype, Scalar::Int(0))),
            Vec::new(),
            vec![zero],
            op.loc.clone(),
        ));
        let mut sizes = whole.shape.clone();
        sizes[h.at] = 1;
        let starts: Vec<ValueId> = (0..whole.rank())
            .map(|d| if d == h.at { h.index } else { zero })
            .collect();
        let same_shape = f.ty(result).as_tensor().map(|t| &t.shape) == Some(&sizes);
        let slice = if same_shape {
            result
        } else {
            f.new_value(Type::tensor(sizes.clone(), whole.dtype))
        };
        out.push(Operation::new(
            Op::DynamicSlice { slice_sizes: sizes },
            [vec![h.whole], starts].concat(),
            vec![slice],
            op.loc.clone(),
        ));
        if !same_shape {
            out.push(Operation::new(
                Op::Reshape,
                vec![slice],
                vec![result],
                op.loc.clone(),
            ));
        }
    }
    body.ops = out;
}

/// A loop-carried sum of products of the loop's slice with a per-step value, taken as one
/// product after the loop: `acc + dot(A_t, B_t)` over the iterations, where `A_t` is the
/// slice at index `idx_t` of a loop-invariant `X` along dimension `p` (through a reshape that
/// drops it) and `B_t` a value of the body, is `acc + dot(X, S)` with `S` the `B_t` stacked
/// along a new leading dimension at the same positions `idx_t` (zero where no iteration
/// writes), `p` and that dimension contracted. The gradient of a recurrent cell's weights
/// (`h_t^T dz_t` summed over the steps of the backward scan) is such a sum: one
/// `[H, T B] x [T B, H]` product after the loop instead of `T` small ones in it. The positions
/// must be distinct and within `X` (an index affine in the loop's counter with a nonzero
/// slope, checked over every iteration), so that every step's `B_t` survives in `S`. The
/// loop's accumulator then stays at its initial value, and its uses after the loop read the
/// sum instead. The sum is taken in another order (one product's, not step by step).
struct Sink {
    /// The product in the body (its result), and the static slice of it that is summed, if
    /// not all of it: one product after the loop serves every slice.
    product: ValueId,
    slice: Option<Op>,
    /// The carried accumulator's position among the loop's values.
    carry: usize,
    /// The stacked per-step value and the index it is stacked at (keys of [`Stack`]).
    stack: (ValueId, ValueId),
    /// What the stack is summed by after the loop.
    sum: Summed,
    /// The product's (or reduction's) type.
    ty: TensorType,
    /// Positions of the stack (`X`'s sliced dimension).
    positions: i64,
}

/// How a [`Sink`]'s stack is summed after the loop.
enum Summed {
    /// `dot_general` (`op`) of the invariant stacked tensor `X` as read after the loop with the
    /// stack, `X` on the left when `lhs_sliced`.
    Product {
        x_after: ValueId,
        lhs_sliced: bool,
        op: Op,
    },
    /// A sum (`reduce` by `add` from zero) over the stack's first dimension and the body
    /// reduction's `dimensions` (shifted past it), by a copy of `region`.
    Reduction {
        dimensions: Vec<i64>,
        region: Region,
    },
}

/// The loop's integer induction variables: per body argument stepped by a constant from a
/// constant initial value, its step and initial value.
fn inductions(
    op: &Operation,
    body: &Region,
    local: &HashMap<ValueId, &Operation>,
    defs: &HashMap<ValueId, &Operation>,
) -> HashMap<ValueId, (i128, i128)> {
    let constant = |v: ValueId| match &local.get(&v).or_else(|| defs.get(&v))?.op {
        Op::Constant(l) if l.len() == 1 && l.ty.dtype.is_int() => Some(l.get(0).as_i128()),
        _ => None,
    };
    let mut out = HashMap::new();
    for (m, (&arg, &ret)) in body.args.iter().zip(body.returned()).enumerate() {
        let (Some(next), Some(init)) = (
            local.get(&ret),
            op.operands.get(m).and_then(|&v| constant(v)),
        ) else {
            continue;
        };
        let step = match (&next.op, next.operands.as_slice()) {
            (Op::Binary(crate::ir::BinaryOp::Add), &[a, c]) if a == arg => constant(c),
            (Op::Binary(crate::ir::BinaryOp::Add), &[c, a]) if a == arg => constant(c),
            (Op::Binary(crate::ir::BinaryOp::Subtract), &[a, c]) if a == arg => {
                constant(c).map(|c| -c)
            }
            _ => None,
        };
        if let Some(step) = step {
            out.insert(arg, (step, init));
        }
    }
    out
}

/// What [`affine`] reads: the loop's induction variables and trip count, the body's and the
/// function's definitions.
struct Iteration<'a> {
    inductions: HashMap<ValueId, (i128, i128)>,
    trips: u64,
    local: &'a HashMap<ValueId, &'a Operation>,
    defs: &'a HashMap<ValueId, &'a Operation>,
}

/// `v` in iteration `t` (from 0) as `slope * t + offset`, when it is affine in the loop's
/// induction variables. JAX's wrap of a negative index (`select(v < 0, v + n, v)`) is `v`
/// where `v` is never negative.
fn affine(v: ValueId, it: &Iteration, depth: usize) -> Option<(i128, i128)> {
    if let Some(&(step, init)) = it.inductions.get(&v) {
        return Some((step, init));
    }
    if depth > 8 {
        return None;
    }
    let op = it.local.get(&v).or_else(|| it.defs.get(&v))?;
    let sub = |k: usize| affine(*op.operands.get(k)?, it, depth + 1);
    match &op.op {
        Op::Constant(l) if l.len() == 1 && l.ty.dtype.is_int() => Some((0, l.get(0).as_i128())),
        Op::Binary(crate::ir::BinaryOp::Add) => {
            let (a, b) = (sub(0)?, sub(1)?);
            Some((a.0 + b.0, a.1 + b.1))
        }
        Op::Binary(crate::ir::BinaryOp::Subtract) => {
            let (a, b) = (sub(0)?, sub(1)?);
            Some((a.0 - b.0, a.1 - b.1))
        }
        Op::Select => {
            let (&[_, wrapped, x], cmp) =
                (op.operands.as_slice(), it.local.get(op.operands.first()?)?)
            else {
                return None;
            };
            let lt = matches!(
                &cmp.op,
                Op::Compare {
                    direction: crate::ir::attr::ComparisonDirection::Lt,
                    ..
                }
            );
            let zero = cmp.operands.get(1).and_then(|&z| affine(z, it, depth + 1)) == Some((0, 0));
            let adds_to_x = it.local.get(&wrapped).is_some_and(|w| {
                matches!(w.op, Op::Binary(crate::ir::BinaryOp::Add))
                    && w.operands.first() == Some(&x)
            });
            if !(lt && zero && adds_to_x && cmp.operands.first() == Some(&x)) {
                return None;
            }
            // Never negative, nor past i32 (where the program's value would wrap negative).
            let (s, o) = affine(x, it, depth + 1)?;
            let last = s * (it.trips as i128 - 1) + o;
            (o.min(last) >= 0 && o.max(last) <= i128::from(i32::MAX)).then_some((s, o))
        }
        _ => None,
    }
}

/// Uses of each value throughout `r` (nested regions included).
fn count_uses(r: &Region, uses: &mut HashMap<ValueId, usize>) {
    for op in &r.ops {
        for &v in &op.operands {
            *uses.entry(v).or_default() += 1;
        }
        for sub in &op.regions {
            count_uses(sub, uses);
        }
    }
}

/// The sums of `op` (a `while`) to take after the loop ([`Sink`]).
fn plan_sinks(f: &Function, op: &Operation, defs: &HashMap<ValueId, &Operation>) -> Vec<Sink> {
    let mut out = Vec::new();
    let Some(c) = counted(op, defs) else {
        return out;
    };
    let [cond, body] = op.regions.as_slice() else {
        return out;
    };
    let mut inside = HashSet::new();
    defined_within(body, &mut inside);
    let returned = body.returned();
    let local: HashMap<ValueId, &Operation> = body
        .ops
        .iter()
        .flat_map(|o| o.results.iter().map(move |&r| (r, o)))
        .collect();
    let (mut uses, mut cond_uses) = (HashMap::new(), HashMap::new());
    count_uses(body, &mut uses);
    count_uses(cond, &mut cond_uses);
    let once = |v: ValueId| uses.get(&v).copied().unwrap_or(0) == 1;
    // The loop's carried sums: carry `j` returned as `arg_j + d`, `arg_j` read only there
    // (and not by the condition), `d` of the same static type read only there.
    let mut sums: Vec<(usize, ValueId, TensorType)> = Vec::new();
    for (j, (&arg, &ret)) in body.args.iter().zip(returned).enumerate() {
        if j == c.counter
            || !once(arg)
            || cond.args.get(j).is_none_or(|a| cond_uses.contains_key(a))
        {
            continue;
        }
        let Some(add) = local.get(&ret) else {
            continue;
        };
        let d = match (&add.op, add.operands.as_slice()) {
            (Op::Binary(crate::ir::BinaryOp::Add), &[a, b]) if a == arg => b,
            (Op::Binary(crate::ir::BinaryOp::Add), &[a, b]) if b == arg => a,
            _ => continue,
        };
        let Some(ty) = f.ty(arg).as_tensor().cloned() else {
            continue;
        };
        if d != arg && once(d) && f.ty(d).as_tensor() == Some(&ty) && ty.is_static() {
            sums.push((j, d, ty));
        }
    }
    for &(j, d, _) in &sums {
        let Some(mut dot) = local.get(&d).copied() else {
            continue;
        };
        // A static slice of the product (a fused cell's gates, one accumulator each).
        let slice = match &dot.op {
            Op::Slice { .. } => {
                let Some(p) = dot.operands.first().and_then(|o| local.get(o)) else {
                    continue;
                };
                let slice = dot.op.clone();
                dot = p;
                Some(slice)
            }
            _ => None,
        };
        let Some(&product) = dot.results.first() else {
            continue;
        };
        let Some(pt) = f.ty(product).as_tensor().cloned() else {
            continue;
        };
        let Op::DotGeneral {
            dimension_numbers: dn,
            precision_config,
            algorithm,
        } = &dot.op
        else {
            continue;
        };
        let [l, r] = dot.operands.as_slice() else {
            continue;
        };
        for lhs_sliced in [true, false] {
            let (a, b) = if lhs_sliced { (*l, *r) } else { (*r, *l) };
            if !inside.contains(&b) {
                continue;
            }
            let Some(s) = sink(
                f,
                (a, b),
                lhs_sliced,
                dn,
                (&local, defs, &inside, op, body),
                c.trips,
                &pt,
            ) else {
                continue;
            };
            let Summed::Product {
                x_after,
                lhs_sliced,
                op: Op::DotGeneral {
                    dimension_numbers, ..
                },
            } = s.sum
            else {
                continue;
            };
            out.push(Sink {
                carry: j,
                product,
                slice: slice.clone(),
                sum: Summed::Product {
                    x_after,
                    lhs_sliced,
                    op: Op::DotGeneral {
                        dimension_numbers,
                        precision_config: precision_config.clone(),
                        algorithm: algorithm.clone(),
                    },
                },
                ..s
            });
            break;
        }
    }
    // A product stays in the loop if anything but the sunk sums reads it there (it would be
    // computed in both places).
    let sunk = |p: ValueId| out.iter().filter(|s| s.product == p).count();
    let keep: Vec<bool> = out
        .iter()
        .map(|s| uses.get(&s.product).copied().unwrap_or(0) == sunk(s.product))
        .collect();
    let mut out: Vec<Sink> = out
        .into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect();
    // Sums of reductions of a body value (a bias gradient: `db += sum(dz_t, batch)`), stacked
    // with a product's stack of the same value, or at the trip counter (from 0 by 1).
    let taken: HashSet<usize> = out.iter().map(|s| s.carry).collect();
    let constant = |v: ValueId| match &local.get(&v).or_else(|| defs.get(&v))?.op {
        Op::Constant(l) => Some(l.clone()),
        _ => None,
    };
    let mut reductions: Vec<(ValueId, Sink)> = Vec::new();
    for (j, d, ty) in sums {
        if taken.contains(&j) {
            continue;
        }
        // A static slice of the reduction (a fused cell's per-gate biases: one reduction, an
        // accumulator per slice), whose operand `top` other slices may read too.
        let mut top = d;
        let mut slice = None;
        if let Some(s) = local.get(&d).filter(|o| matches!(o.op, Op::Slice { .. })) {
            let Some(&o) = s.operands.first() else {
                continue;
            };
            slice = Some(s.op.clone());
            top = o;
        }
        // Through reshapes that come back to the reduction's shape (JAX's `keepdims` round
        // trip), each read only by the next.
        let mut red = local.get(&top).copied();
        while let Some(r) = red.filter(|r| r.op == Op::Reshape) {
            red = r
                .operands
                .first()
                .filter(|&&o| once(o))
                .and_then(|o| local.get(o).copied());
        }
        let Some(red) = red else {
            continue;
        };
        let Some(&reduced) = red.results.first() else {
            continue;
        };
        let Some(rt) = f.ty(reduced).as_tensor().cloned() else {
            continue;
        };
        if f.ty(top).as_tensor() != Some(&rt) || (slice.is_none() && rt != ty) {
            continue;
        }
        let (Op::Reduce { dimensions }, [v, init], [region]) =
            (&red.op, red.operands.as_slice(), red.regions.as_slice())
        else {
            continue;
        };
        let adds = matches!(
            (region.args.as_slice(), region.ops.as_slice()),
            ([a0, a1], [o, r]) if matches!(o.op, Op::Binary(crate::ir::BinaryOp::Add))
                && (o.operands == [*a0, *a1] || o.operands == [*a1, *a0])
                && r.op == Op::Return
                && r.operands == o.results
        );
        let zero = constant(*init).is_some_and(|l| {
            !l.is_empty()
                && l.is_splat()
                && (matches!(l.get(0), Scalar::Float(x) if x == 0.0)
                    || matches!(l.get(0), Scalar::Int(0)))
        });
        let Some(vt) = f.ty(*v).as_tensor() else {
            continue;
        };
        if !adds || !zero || !inside.contains(v) || !vt.is_static() || vt.dtype != ty.dtype {
            continue;
        }
        let stack = match out.iter().find(|s| s.stack.0 == *v) {
            Some(s) => Some((s.stack, s.positions)),
            None => match body.args.get(c.counter) {
                Some(&counter) if c.init == 0 && c.step == 1 => {
                    Some(((*v, counter), c.trips as i64))
                }
                _ => None,
            },
        };
        let Some((stack, positions)) = stack else {
            continue;
        };
        if (vt.num_elements() as i64)
            .saturating_mul(positions)
            .saturating_mul(4)
            > MAX_BYTES
        {
            continue;
        }
        reductions.push((
            top,
            Sink {
                product: reduced,
                slice,
                carry: j,
                stack,
                sum: Summed::Reduction {
                    dimensions: dimensions.clone(),
                    region: region.clone(),
                },
                ty: rt,
                positions,
            },
        ));
    }
    // A sliced reduction is taken out only when the sunk sums are all that read it.
    let readers = |top: ValueId| reductions.iter().filter(|(t, _)| *t == top).count();
    let whole: Vec<bool> = reductions
        .iter()
        .map(|(top, _)| uses.get(top).copied().unwrap_or(0) == readers(*top))
        .collect();
    out.extend(
        reductions
            .into_iter()
            .zip(whole)
            .filter_map(|((_, s), w)| w.then_some(s)),
    );
    out
}

/// The [`Sink`] of an accumulated `dot(a, b)` (`a` the left operand when `lhs_sliced`), when
/// `a` is a reshaped slice of a loop-invariant tensor at distinct positions and `b` is stacked.
#[allow(clippy::type_complexity)]
fn sink(
    f: &Function,
    (a, b): (ValueId, ValueId),
    lhs_sliced: bool,
    dn: &DotDimensionNumbers,
    (local, defs, inside, op, body): (
        &HashMap<ValueId, &Operation>,
        &HashMap<ValueId, &Operation>,
        &HashSet<ValueId>,
        &Operation,
        &Region,
    ),
    trips: u64,
    ty: &TensorType,
) -> Option<Sink> {
    let Slice {
        x,
        p,
        index,
        reshaped: true,
    } = slice_of(f, local, a)?
    else {
        return None;
    };
    let xt = f.ty(x).as_tensor()?;
    // Distinct positions within X: an affine index of the counter, checked at both ends.
    let it = Iteration {
        inductions: inductions(op, body, local, defs),
        trips,
        local,
        defs,
    };
    let (slope, offset) = affine(index, &it, 0)?;
    if slope == 0 || trips == 0 {
        return None;
    }
    let (first, last) = (offset, slope * (trips as i128 - 1) + offset);
    let size = i128::from(xt.shape[p]);
    if first.min(last) < 0 || first.max(last) >= size {
        return None;
    }
    // X as it is after the loop: carried unchanged, or from outside.
    let x_after = match body.args.iter().position(|&v| v == x) {
        Some(j) if body.returned().get(j) == Some(&x) => *op.results.get(j)?,
        Some(_) => return None,
        None if inside.contains(&x) => return None,
        None => x,
    };
    let bt = f.ty(b).as_tensor()?;
    if !bt.is_static() || (bt.num_elements() as i64) * xt.shape[p] * 4 > MAX_BYTES {
        return None;
    }
    let to_x = |d: &i64| if *d as usize >= p { d + 1 } else { *d };
    let up = |d: &i64| d + 1;
    let (ab, ac, bb, bc) = if lhs_sliced {
        (
            &dn.lhs_batching_dimensions,
            &dn.lhs_contracting_dimensions,
            &dn.rhs_batching_dimensions,
            &dn.rhs_contracting_dimensions,
        )
    } else {
        (
            &dn.rhs_batching_dimensions,
            &dn.rhs_contracting_dimensions,
            &dn.lhs_batching_dimensions,
            &dn.lhs_contracting_dimensions,
        )
    };
    let xb: Vec<i64> = ab.iter().map(to_x).collect();
    let mut xc: Vec<i64> = ac.iter().map(to_x).collect();
    xc.push(p as i64);
    let sb: Vec<i64> = bb.iter().map(up).collect();
    let mut sc: Vec<i64> = bc.iter().map(up).collect();
    sc.push(0);
    let dims = if lhs_sliced {
        DotDimensionNumbers {
            lhs_batching_dimensions: xb,
            rhs_batching_dimensions: sb,
            lhs_contracting_dimensions: xc,
            rhs_contracting_dimensions: sc,
        }
    } else {
        DotDimensionNumbers {
            lhs_batching_dimensions: sb,
            rhs_batching_dimensions: xb,
            lhs_contracting_dimensions: sc,
            rhs_contracting_dimensions: xc,
        }
    };
    // The product after the loop has the accumulator's shape.
    let free = |shape: &[i64], batch: &[i64], contract: &[i64]| -> Vec<i64> {
        (0..shape.len() as i64)
            .filter(|d| !batch.contains(d) && !contract.contains(d))
            .map(|d| shape[d as usize])
            .collect()
    };
    let stack_shape = [vec![xt.shape[p]], bt.shape.clone()].concat();
    let (ls, rs) = if lhs_sliced {
        (&xt.shape, &stack_shape)
    } else {
        (&stack_shape, &xt.shape)
    };
    let batch: Vec<i64> = dims
        .lhs_batching_dimensions
        .iter()
        .map(|&d| ls[d as usize])
        .collect();
    let shape = [
        batch,
        free(
            ls,
            &dims.lhs_batching_dimensions,
            &dims.lhs_contracting_dimensions,
        ),
        free(
            rs,
            &dims.rhs_batching_dimensions,
            &dims.rhs_contracting_dimensions,
        ),
    ]
    .concat();
    if shape != ty.shape || bt.dtype != ty.dtype {
        return None;
    }
    Some(Sink {
        carry: 0,
        product: ValueId(u32::MAX),
        slice: None,
        positions: xt.shape[p],
        stack: (b, index),
        sum: Summed::Product {
            x_after,
            lhs_sliced,
            op: Op::DotGeneral {
                dimension_numbers: dims,
                precision_config: Vec::new(),
                algorithm: None,
            },
        },
        ty: ty.clone(),
    })
}

/// Rewrites `op` (a `while`) for `sinks`: the stacks' zeros go to `before`, the loop carries
/// the stacks, its accumulators stay at their initial values, and the returned ops (after the
/// loop) take the products; `subst` maps each accumulator's result to its sum.
fn apply_sinks(
    f: &mut Function,
    op: &mut Operation,
    sinks: &[Sink],
    before: &mut Vec<Operation>,
    subst: &mut HashMap<ValueId, ValueId>,
) -> Vec<Operation> {
    let mut after = Vec::new();
    let loc = op.loc.clone();
    // One stack per stacked value, index and size.
    let mut stacks: Vec<((ValueId, ValueId, i64), ValueId)> = Vec::new();
    let mut updates = Vec::new();
    for s in sinks {
        let key = (s.stack.0, s.stack.1, s.positions);
        if stacks.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let Some(bt) = f.ty(s.stack.0).as_tensor().cloned() else {
            continue;
        };
        let st = TensorType::new([vec![s.positions], bt.shape.clone()].concat(), bt.dtype);
        let zeros = f.new_value(Type::Tensor(st.clone()));
        before.push(Operation::new(
            Op::Constant(Literal::zeros(st.clone())),
            Vec::new(),
            vec![zeros],
            loc.clone(),
        ));
        let (cond_arg, body_arg, result) = (
            f.new_value(Type::Tensor(st.clone())),
            f.new_value(Type::Tensor(st.clone())),
            f.new_value(Type::Tensor(st.clone())),
        );
        op.operands.push(zeros);
        op.results.push(result);
        op.regions[0].args.push(cond_arg);
        op.regions[1].args.push(body_arg);
        // In the body: the step's value at its position.
        let one = f.new_value(Type::tensor([vec![1], bt.shape.clone()].concat(), bt.dtype));
        updates.push(Operation::new(
            Op::Reshape,
            vec![s.stack.0],
            vec![one],
            loc.clone(),
        ));
        let index_dtype = f
            .ty(s.stack.1)
            .as_tensor()
            .map_or(ElementType::I32, |t| t.dtype);
        let zero = f.new_value(Type::tensor(Vec::new(), index_dtype));
        updates.push(Operation::new(
            Op::Constant(Literal::scalar(index_dtype, Scalar::Int(0))),
            Vec::new(),
            vec![zero],
            loc.clone(),
        ));
        let stacked = f.new_value(Type::Tensor(st.clone()));
        let starts = std::iter::once(s.stack.1).chain(std::iter::repeat_n(zero, bt.rank()));
        updates.push(Operation::new(
            Op::DynamicUpdateSlice,
            [vec![body_arg, one], starts.collect()].concat(),
            vec![stacked],
            loc.clone(),
        ));
        stacks.push((key, result));
        let body = &mut op.regions[1];
        if let Some(ret) = body.ops.last_mut() {
            ret.operands.push(stacked);
        }
    }
    let body = &mut op.regions[1];
    let ret = body.ops.pop();
    body.ops.extend(updates);
    if let Some(mut ret) = ret {
        for s in sinks {
            let key = (s.stack.0, s.stack.1, s.positions);
            if !stacks.iter().any(|(k, _)| *k == key) {
                continue;
            }
            if let (Some(slot), Some(&arg)) =
                (ret.operands.get_mut(s.carry), body.args.get(s.carry))
            {
                *slot = arg;
            }
        }
        body.ops.push(ret);
    }
    // The products after the loop, by the body's product they stand for.
    let mut products: HashMap<ValueId, ValueId> = HashMap::new();
    for s in sinks {
        let key = (s.stack.0, s.stack.1, s.positions);
        let (Some(&(_, stack)), Some(&acc)) = (
            stacks.iter().find(|(k, _)| *k == key),
            op.results.get(s.carry),
        ) else {
            continue;
        };
        let Some(acc_ty) = f.ty(acc).as_tensor().cloned() else {
            continue;
        };
        let product = match products.get(&s.product) {
            Some(&p) => p,
            None => {
                let p = f.new_value(Type::Tensor(s.ty.clone()));
                match &s.sum {
                    Summed::Product {
                        x_after,
                        lhs_sliced,
                        op: dot,
                    } => {
                        let operands = if *lhs_sliced {
                            vec![*x_after, stack]
                        } else {
                            vec![stack, *x_after]
                        };
                        after.push(Operation::new(dot.clone(), operands, vec![p], loc.clone()));
                    }
                    Summed::Reduction { dimensions, region } => {
                        let dtype = s.ty.dtype;
                        let zero = f.new_value(Type::tensor(Vec::new(), dtype));
                        after.push(Operation::new(
                            Op::Constant(Literal::zeros(TensorType::new(Vec::new(), dtype))),
                            Vec::new(),
                            vec![zero],
                            loc.clone(),
                        ));
                        let mut map = HashMap::new();
                        let args: Vec<ValueId> = region
                            .args
                            .iter()
                            .map(|&a| {
                                let n = f.new_value(f.ty(a).clone());
                                map.insert(a, n);
                                n
                            })
                            .collect();
                        let ops = super::rewrite::copy_ops_within(f, &region.ops, &mut map);
                        let mut reduce = Operation::new(
                            Op::Reduce {
                                dimensions: std::iter::once(0)
                                    .chain(dimensions.iter().map(|d| d + 1))
                                    .collect(),
                            },
                            vec![stack, zero],
                            vec![p],
                            loc.clone(),
                        );
                        reduce.regions = vec![Region { args, ops }];
                        after.push(reduce);
                    }
                }
                products.insert(s.product, p);
                p
            }
        };
        let part = match &s.slice {
            Some(slice) => {
                let v = f.new_value(Type::Tensor(acc_ty.clone()));
                after.push(Operation::new(
                    slice.clone(),
                    vec![product],
                    vec![v],
                    loc.clone(),
                ));
                v
            }
            None => product,
        };
        let sum = f.new_value(Type::Tensor(acc_ty));
        after.push(Operation::new(
            Op::Binary(crate::ir::BinaryOp::Add),
            vec![acc, part],
            vec![sum],
            loc.clone(),
        ));
        subst.insert(acc, sum);
    }
    after
}

#[cfg(test)]
mod tests {
    use crate::ir::{Function, Op};
    use crate::passes::prepare;

    /// A scan over `xs: [T, 4, 8]` whose step multiplies its slice by `w` (the slice on the
    /// left when `left`, else on the right), reshaped to drop its unit dimension or not
    /// (`reshape`), with `trips` iterations.
    fn scan(t: usize, trips: usize, left: bool, reshape: bool) -> String {
        let sliced = if reshape {
            "%x2 = stablehlo.reshape %x1 : (tensor<1x4x8xf32>) -> tensor<4x8xf32>"
        } else {
            ""
        };
        let dot = match (left, reshape) {
            (true, true) => "%d = stablehlo.dot_general %x2, %w, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>",
            (false, true) => "%d0 = stablehlo.dot_general %w, %x2, contracting_dims = [0] x [1] : (tensor<8x16xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>\n    %d = stablehlo.transpose %d0, dims = [1, 0] : (tensor<16x4xf32>) -> tensor<4x16xf32>",
            _ => "%d1 = stablehlo.dot_general %x1, %w, contracting_dims = [2] x [0] : (tensor<1x4x8xf32>, tensor<8x16xf32>) -> tensor<1x4x16xf32>\n    %d = stablehlo.reshape %d1 : (tensor<1x4x16xf32>) -> tensor<4x16xf32>",
        };
        format!(
            r#"
func.func @main(%xs: tensor<{t}x4x8xf32>, %w: tensor<8x16xf32>, %h0: tensor<4x16xf32>) -> tensor<4x16xf32> {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %c0, %h = %h0, %v = %xs) : tensor<i32>, tensor<4x16xf32>, tensor<{t}x4x8xf32>
   cond {{
    %n = stablehlo.constant dense<{trips}> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }} do {{
    %one = stablehlo.constant dense<1> : tensor<i32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %x1 = stablehlo.dynamic_slice %v, %i, %zero, %zero, sizes = [1, 4, 8] : (tensor<{t}x4x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x4x8xf32>
    {sliced}
    {dot}
    %e = stablehlo.tanh %d : tensor<4x16xf32>
    %a = stablehlo.add %h, %e : tensor<4x16xf32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %a, %v : tensor<i32>, tensor<4x16xf32>, tensor<{t}x4x8xf32>
  }}
  return %r#1 : tensor<4x16xf32>
}}"#
        )
    }

    /// Dots outside the loop and within its body.
    fn dots(src: &str) -> (usize, usize) {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f: Function = prepare(&m, "main").expect("prepare");
        let body = f.body.as_ref().expect("body");
        let is_dot = |o: &&crate::ir::Operation| matches!(o.op, Op::DotGeneral { .. });
        let outside = body.ops.iter().filter(is_dot).count();
        let mut inside = 0;
        for w in body.ops.iter().filter(|o| o.op == Op::While) {
            w.regions[1].walk(&mut |o| inside += usize::from(is_dot(&o)));
        }
        (outside, inside)
    }

    #[test]
    fn a_product_of_the_slice_with_an_invariant_is_hoisted() {
        // Long enough not to be unrolled (which copies the body, not the hoisted product).
        assert_eq!(dots(&scan(300, 300, true, true)), (1, 0));
        assert_eq!(dots(&scan(300, 300, false, true)), (1, 0));
        assert_eq!(dots(&scan(300, 300, true, false)), (1, 0));
    }

    /// A loop summing `x_t^T b_t` into an accumulator, `b_t` computed in the body, the slice
    /// taken at `i + shift`.
    fn accumulating(shift: i64) -> String {
        format!(
            r#"
func.func @main(%xs: tensor<300x4x8xf32>, %h0: tensor<4x16xf32>) -> tensor<8x16xf32> {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %a0 = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
  %r:4 = stablehlo.while(%i = %c0, %h = %h0, %v = %xs, %acc = %a0) : tensor<i32>, tensor<4x16xf32>, tensor<300x4x8xf32>, tensor<8x16xf32>
   cond {{
    %n = stablehlo.constant dense<300> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }} do {{
    %one = stablehlo.constant dense<1> : tensor<i32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %s = stablehlo.constant dense<{shift}> : tensor<i32>
    %k = stablehlo.add %i, %s : tensor<i32>
    %x1 = stablehlo.dynamic_slice %v, %k, %zero, %zero, sizes = [1, 4, 8] : (tensor<300x4x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x4x8xf32>
    %x2 = stablehlo.reshape %x1 : (tensor<1x4x8xf32>) -> tensor<4x8xf32>
    %b = stablehlo.tanh %h : tensor<4x16xf32>
    %d = stablehlo.dot_general %x2, %b, contracting_dims = [0] x [0] : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    %a = stablehlo.add %acc, %d : tensor<8x16xf32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %b, %v, %a : tensor<i32>, tensor<4x16xf32>, tensor<300x4x8xf32>, tensor<8x16xf32>
  }}
  return %r#3 : tensor<8x16xf32>
}}"#
        )
    }

    /// `fori_loop(start, 40)` as JAX writes it: a trip counter and the loop index, which
    /// reads `xs` through JAX's wrap of negative indices, shifted by `shift`.
    fn fori(start: i64, shift: i64) -> String {
        format!(
            r#"
func.func @main(%xs: tensor<40x4x8xf32>, %h0: tensor<4x16xf32>) -> tensor<8x16xf32> {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %st = stablehlo.constant dense<{start}> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %a0 = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
  %r:5 = stablehlo.while(%n = %c0, %i = %st, %h = %h0, %v = %xs, %acc = %a0) : tensor<i32>, tensor<i32>, tensor<4x16xf32>, tensor<40x4x8xf32>, tensor<8x16xf32>
   cond {{
    %trips = stablehlo.constant dense<{trips}> : tensor<i32>
    %p = stablehlo.compare LT, %n, %trips : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }} do {{
    %one = stablehlo.constant dense<1> : tensor<i32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %len = stablehlo.constant dense<40> : tensor<i32>
    %s = stablehlo.constant dense<{shift}> : tensor<i32>
    %k = stablehlo.add %i, %s : tensor<i32>
    %neg = stablehlo.compare LT, %k, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %kw = stablehlo.add %k, %len : tensor<i32>
    %ki = stablehlo.select %neg, %kw, %k : (tensor<i1>, tensor<i32>, tensor<i32>) -> tensor<i32>
    %x1 = stablehlo.dynamic_slice %v, %ki, %zero, %zero, sizes = [1, 4, 8] : (tensor<40x4x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x4x8xf32>
    %x2 = stablehlo.reshape %x1 : (tensor<1x4x8xf32>) -> tensor<4x8xf32>
    %b = stablehlo.tanh %h : tensor<4x16xf32>
    %d = stablehlo.dot_general %x2, %b, contracting_dims = [0] x [0] : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    %a = stablehlo.add %acc, %d : tensor<8x16xf32>
    %n1 = stablehlo.add %n, %one : tensor<i32>
    %i1 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %n1, %i1, %b, %v, %a : tensor<i32>, tensor<i32>, tensor<4x16xf32>, tensor<40x4x8xf32>, tensor<8x16xf32>
  }}
  return %r#4 : tensor<8x16xf32>
}}"#,
            trips = 40 - start
        )
    }

    #[test]
    fn a_loop_index_apart_from_the_trip_counter_and_wrapped_places_the_sum() {
        assert_eq!(dots(&fori(0, 0)), (1, 0));
        assert_eq!(dots(&fori(2, -2)), (1, 0));
        // Index -1 (wrapped to 39) is not affine in the loop index: kept.
        assert_eq!(dots(&fori(1, -2)), (0, 1));
    }

    #[test]
    fn a_sum_of_products_with_the_slice_is_taken_after_the_loop() {
        assert_eq!(dots(&accumulating(0)), (1, 0));
        // Positions past the stacked tensor (the last step's slice is clamped): kept.
        assert_eq!(dots(&accumulating(1)), (0, 1));
    }

    #[test]
    fn loops_shorter_than_the_sliced_dimension_keep_their_products() {
        assert_eq!(dots(&scan(300, 100, true, true)), (0, 1));
    }
}
