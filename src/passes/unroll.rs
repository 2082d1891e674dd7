//! Counted loops (`lax.fori_loop`, `lax.scan`) with small bodies run `k` iterations per trip:
//! the body is copied `k` times, each copy reading the one before, and the loop runs a `k`-th
//! of the trips. Such a body is launch-bound (on lavapipe a launch costs 30-100 µs whatever it
//! computes, on a GPU a few µs and a barrier), and its copies fuse with each other: `k`
//! elementwise steps are one kernel, independent reductions one merged launch.
//!
//! `k` divides the trip count (no remainder loop) and is at most [`MAX_FACTOR`]. Copy `j`
//! reads the counter as `counter + j·step`, computed from the loop's own counter, and the
//! body returns `counter + k·step`, so the loop stays counted (its trip count is read at
//! compile time, never from the device) with a step of `k·step`. The numbers are those of
//! the loop as written: the same ops in the same order.
//!
//! Only loops whose bodies hold nothing but elementwise ops, data movement and reductions
//! ([`fuses_across_copies`]; no control flow, so innermost loops) and whose per-iteration
//! work is at most [`MAX_WORK`] are unrolled: larger bodies are not launch-bound, and copies
//! of kernels that do not fuse would only add kernels to compile. `WGPU_HLO_UNROLL=0` turns the pass off.

use std::collections::HashMap;

use super::trip_count::{counted, Counted};
use crate::ir::{
    BinaryOp, Function, Literal, Op, Operation, Region, Scalar, TensorType, Type, ValueId,
};

/// The most copies of a body.
pub const MAX_FACTOR: u64 = 8;

/// The most work (result elements, or multiply-adds of dots and convolutions) of one
/// iteration of an unrolled loop.
pub const MAX_WORK: u64 = 1 << 16;

/// The most ops of an unrolled body (all copies).
pub const MAX_OPS: usize = 512;

/// Applies the rewrite throughout `f`.
pub fn unroll_counted_loops(f: &mut Function) {
    if std::env::var("WGPU_HLO_UNROLL").is_ok_and(|v| v == "0") {
        return;
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    // Decide with the whole function's definitions (constants may live outside the loop).
    let mut plans: HashMap<ValueId, (Counted, u64)> = HashMap::new();
    // Scalar integer constants, wherever they are defined.
    let consts: HashMap<ValueId, i128>;
    {
        let mut defs: HashMap<ValueId, &Operation> = HashMap::new();
        let mut loops = Vec::new();
        collect(&body, &mut defs, &mut loops);
        consts = int_constants(&defs);
        for op in loops {
            if let Some(plan) = decide(f, op, &defs) {
                if let Some(&first) = op.results.first() {
                    plans.insert(first, plan);
                }
            }
        }
    }
    if !plans.is_empty() {
        rewrite_region(f, &mut body, &plans, &consts);
        super::dce::eliminate_dead_code(&mut body);
    }
    f.body = Some(body);
}

/// The values of the scalar integer constants among `defs`.
pub(crate) fn int_constants(defs: &HashMap<ValueId, &Operation>) -> HashMap<ValueId, i128> {
    defs.iter()
        .filter_map(|(&v, op)| match &op.op {
            Op::Constant(l) if l.len() == 1 && l.ty.dtype.is_int() => Some((v, l.get(0).as_i128())),
            _ => None,
        })
        .collect()
}

/// Every op's results, and the `while` ops, throughout `r`.
pub(crate) fn collect<'a>(
    r: &'a Region,
    defs: &mut HashMap<ValueId, &'a Operation>,
    loops: &mut Vec<&'a Operation>,
) {
    for op in &r.ops {
        for &v in &op.results {
            defs.insert(v, op);
        }
        if op.op == Op::While {
            loops.push(op);
        }
        for sub in &op.regions {
            collect(sub, defs, loops);
        }
    }
}

fn elements(f: &Function, v: ValueId) -> u64 {
    match f.ty(v) {
        Type::Tensor(t) => t.num_elements() as u64,
        _ => 0,
    }
}

/// One iteration's work: result elements of each op; the update of a `dynamic_update_slice`
/// (written in place); the inputs of a reduction; multiply-adds of dots and convolutions.
pub(crate) fn work(f: &Function, op: &Operation) -> u64 {
    let out: u64 = op.results.iter().map(|&r| elements(f, r)).sum();
    match &op.op {
        Op::Constant(_) | Op::Return => 0,
        Op::DynamicUpdateSlice => op.operands.get(1).map_or(0, |&u| elements(f, u)),
        // A reduction reads all of its inputs.
        Op::Reduce { .. } => op
            .operands
            .iter()
            .map(|&o| elements(f, o))
            .sum::<u64>()
            .max(out),
        Op::DotGeneral {
            dimension_numbers, ..
        } => {
            let contracted: u64 = match op.operands.first().map(|&a| f.ty(a)) {
                Some(Type::Tensor(t)) => dimension_numbers
                    .lhs_contracting_dimensions
                    .iter()
                    .map(|&d| t.shape.get(d as usize).copied().unwrap_or(1).max(1) as u64)
                    .product(),
                _ => 1,
            };
            out.saturating_mul(contracted)
        }
        Op::Convolution(_) => match op.operands.get(1).map(|&k| f.ty(k)) {
            // Each output element sums over the kernel's elements of one output feature.
            Some(Type::Tensor(t)) => {
                let per = t.num_elements() as u64;
                out.saturating_mul(per.max(1))
            }
            _ => out,
        },
        _ => out,
    }
}

/// Ops whose kernels fuse with their neighbours (elementwise, data movement, reductions): a
/// body of only these has copies that fuse with each other. Dots, convolutions, sorts,
/// gathers, scatters and the rest are kernels of their own in every copy, so copying them
/// saves no launch and only adds kernels to compile (a small GRU's value and gradient: 50
/// kernels, 112 with its scans unrolled).
pub(crate) fn fuses_across_copies(op: &Op) -> bool {
    op.is_elementwise()
        || matches!(
            op,
            Op::BitcastConvert
                | Op::Constant(_)
                | Op::Iota { .. }
                | Op::BroadcastInDim { .. }
                | Op::Reshape
                | Op::Transpose { .. }
                | Op::Slice { .. }
                | Op::DynamicSlice { .. }
                | Op::DynamicUpdateSlice
                | Op::Concatenate { .. }
                | Op::Pad { .. }
                | Op::Reverse { .. }
                | Op::Reduce { .. }
                | Op::Return
        )
}

/// The counter and the unroll factor of `op`, when it is a counted loop worth unrolling.
fn decide(
    f: &Function,
    op: &Operation,
    defs: &HashMap<ValueId, &Operation>,
) -> Option<(Counted, u64)> {
    // A loop that runs whole inside one kernel gains nothing from copies of its body.
    if super::whole_loops::in_one_kernel(f, op).is_some() {
        return None;
    }
    let c = counted(op, defs)?;
    let body = op.regions.get(1)?;
    let ops = body.ops.len().saturating_sub(1).max(1);
    let mut total = 0u64;
    let mut simple = true;
    body.walk(&mut |o: &Operation| {
        if !fuses_across_copies(&o.op) {
            simple = false;
        }
        total = total.saturating_add(work(f, o));
    });
    // The counter must be a scalar integer the copies can offset.
    let scalar_int = matches!(f.ty(*body.args.get(c.counter)?),
        Type::Tensor(t) if t.rank() == 0 && t.dtype.is_int());
    if !scalar_int || !simple || total > MAX_WORK || c.trips < 2 {
        return None;
    }
    let k = (2..=MAX_FACTOR.min(c.trips))
        .rev()
        .find(|&k| c.trips % k == 0 && k as usize * ops <= MAX_OPS)?;
    Some((c, k))
}

fn rewrite_region(
    f: &mut Function,
    region: &mut Region,
    plans: &HashMap<ValueId, (Counted, u64)>,
    consts: &HashMap<ValueId, i128>,
) {
    for op in &mut region.ops {
        for sub in &mut op.regions {
            rewrite_region(f, sub, plans, consts);
        }
        if op.op != Op::While {
            continue;
        }
        let Some(&(c, k)) = op.results.first().and_then(|r| plans.get(r)) else {
            continue;
        };
        if let Some(body) = op.regions.get_mut(1) {
            drop_index_wrap(body, c, consts);
            unroll_body(f, body, c, k, true);
        }
    }
}

/// A scalar constant of the counter's type and the op defining it.
pub(crate) fn constant(
    f: &mut Function,
    ty: &TensorType,
    v: i128,
    loc: &crate::ir::Location,
) -> (ValueId, Operation) {
    let value = f.new_value(Type::Tensor(ty.clone()));
    let op = Operation::new(
        Op::Constant(Literal::scalar(ty.dtype, Scalar::Int(v))),
        vec![],
        vec![value],
        loc.clone(),
    );
    (value, op)
}

/// JAX wraps a dynamic index `i` as `select(i < 0, i + size, i)` (negative indices count from
/// the end). A counted loop's counter is never negative when its first and last values are
/// not: the wrap of the counter is the counter itself, and the copies of an unrolled body then
/// index by it directly (which [`stacking`] looks for).
pub(crate) fn drop_index_wrap(body: &mut Region, c: Counted, consts: &HashMap<ValueId, i128>) {
    let Some(&counter) = body.args.get(c.counter) else {
        return;
    };
    let last = c.init + (c.trips as i128 - 1).max(0) * c.step;
    if c.init.min(last) < 0 {
        return;
    }
    let def = |v: ValueId| body.ops.iter().find(|o| o.results.contains(&v));
    let mut subst = HashMap::new();
    for op in &body.ops {
        let (Op::Select, [p, a, b], [r]) = (&op.op, &op.operands[..], &op.results[..]) else {
            continue;
        };
        if *b != counter {
            continue;
        }
        let negative = def(*p).is_some_and(|o| {
            matches!(
                o.op,
                Op::Compare {
                    direction: crate::ir::attr::ComparisonDirection::Lt,
                    ..
                }
            ) && o.operands.first() == Some(&counter)
                && o.operands.get(1).and_then(|z| consts.get(z)) == Some(&0)
        });
        let wrapped = def(*a).is_some_and(|o| {
            o.op == Op::Binary(BinaryOp::Add)
                && o.operands.len() == 2
                && o.operands.contains(&counter)
                && o.operands.iter().any(|z| consts.contains_key(z))
        });
        if negative && wrapped {
            subst.insert(*r, counter);
        }
    }
    super::rewrite::substitute(body, &subst);
}

/// Copies `body` `k` times (see the module's text); with `stack`, `k` stacked updates of
/// adjacent elements become one (which needs `c`'s trip count and first value).
pub(crate) fn unroll_body(f: &mut Function, body: &mut Region, c: Counted, k: u64, stack: bool) {
    let Some(ret) = body.ops.pop() else {
        return;
    };
    if ret.op != Op::Return {
        body.ops.push(ret);
        return;
    }
    let args = body.args.clone();
    let Some(&counter) = args.get(c.counter) else {
        body.ops.push(ret);
        return;
    };
    let counter_ty = match f.ty(counter) {
        Type::Tensor(t) => t.clone(),
        _ => {
            body.ops.push(ret);
            return;
        }
    };
    let loc = ret.loc.clone();
    let original = std::mem::take(&mut body.ops);
    let mut ops = original.clone();
    let mut returned = ret.operands.clone();
    // The counter as copy `j` reads it: the loop's counter plus j steps.
    let offset = |f: &mut Function, ops: &mut Vec<Operation>, j: i128| -> ValueId {
        let (step, def) = constant(f, &counter_ty, j * c.step, &loc);
        ops.push(def);
        let v = f.new_value(Type::Tensor(counter_ty.clone()));
        ops.push(Operation::new(
            Op::Binary(BinaryOp::Add),
            vec![counter, step],
            vec![v],
            loc.clone(),
        ));
        v
    };
    // Where each copy's ops start in `ops`, and the counter it reads.
    let mut starts = vec![0usize];
    let mut counters = vec![counter];
    for j in 1..k as i128 {
        let mut map: HashMap<ValueId, ValueId> = HashMap::new();
        for (i, &a) in args.iter().enumerate() {
            let now = if i == c.counter {
                let v = offset(f, &mut ops, j);
                counters.push(v);
                v
            } else {
                returned.get(i).copied().unwrap_or(a)
            };
            map.insert(a, now);
        }
        starts.push(ops.len());
        ops.extend(super::rewrite::copy_ops_within(f, &original, &mut map));
        returned = ret
            .operands
            .iter()
            .map(|v| map.get(v).copied().unwrap_or(*v))
            .collect();
    }
    // The loop's own counter steps k times at once.
    if let Some(slot) = returned.get_mut(c.counter) {
        *slot = offset(f, &mut ops, k as i128);
    }
    ops.push(Operation::new(Op::Return, returned, vec![], loc.clone()));
    // Stacked outputs: k updates of adjacent elements become one.
    let combined: Vec<(Vec<usize>, [Operation; 2])> = (0..original.len())
        .filter(|_| stack)
        .filter_map(|p| {
            stacking(
                f,
                &ops,
                &original,
                &args,
                p,
                (&starts, &counters),
                c,
                k,
                &loc,
            )
        })
        .collect();
    if !combined.is_empty() {
        let mut drop = std::collections::HashSet::new();
        let mut insert: HashMap<usize, [Operation; 2]> = HashMap::new();
        for (at, new) in combined {
            if let Some(&last) = at.last() {
                drop.extend(at);
                insert.insert(last, new);
            }
        }
        let mut out = Vec::with_capacity(ops.len());
        for (i, o) in ops.into_iter().enumerate() {
            if let Some(new) = insert.remove(&i) {
                out.extend(new);
            } else if !drop.contains(&i) {
                out.push(o);
            }
        }
        ops = out;
    }
    body.ops = ops;
}

/// For the original op at `p`: when it is a `dynamic_update_slice` stacking a step's output
/// at the counter (`lax.scan`'s outputs: `stack[i] = y`), the positions in `ops` of its `k`
/// copies and what replaces them: one update of the `k` steps' outputs concatenated,
/// written at the first copy's counter (one in-place update a trip instead of `k`). Only
/// where that writes the same elements: the update is `step` long along the counter's
/// dimension (so the copies' updates are adjacent), the other start indices are constants,
/// every stacked state but the last is read only by the next copy's update, and no start
/// index is ever clamped (`0 <= init`, `init + trips·step <= size`).
#[allow(clippy::too_many_arguments)]
fn stacking(
    f: &mut Function,
    ops: &[Operation],
    original: &[Operation],
    args: &[ValueId],
    p: usize,
    (starts, counters): (&[usize], &[ValueId]),
    c: Counted,
    k: u64,
    loc: &crate::ir::Location,
) -> Option<(Vec<usize>, [Operation; 2])> {
    let op = original.get(p)?;
    if op.op != Op::DynamicUpdateSlice || op.operands.len() < 3 || c.step <= 0 || c.init < 0 {
        return None;
    }
    let counter = *counters.first()?;
    let idx = &op.operands[2..];
    let d = idx.iter().position(|&v| v == counter)?;
    let (Type::Tensor(target), Type::Tensor(update)) =
        (f.ty(op.operands[0]).clone(), f.ty(op.operands[1]).clone())
    else {
        return None;
    };
    let (size, len) = (*target.shape.get(d)?, *update.shape.get(d)?);
    let reach = c.init + c.trips as i128 * c.step;
    if len as i128 != c.step || reach > size as i128 {
        return None;
    }
    // The other start indices are the same in every copy: constants of the body (each copy
    // has its own copy of them) or values from outside the loop (not its arguments).
    for (i, &v) in idx.iter().enumerate() {
        if i == d {
            continue;
        }
        let same = match original.iter().find(|o| o.results.contains(&v)) {
            Some(o) => matches!(o.op, Op::Constant(_)),
            None => !args.contains(&v),
        };
        if !same {
            return None;
        }
    }
    let at: Vec<usize> = starts.iter().map(|&s| s + p).collect();
    let dus: Vec<&Operation> = at.iter().map(|&i| ops.get(i)).collect::<Option<_>>()?;
    for (j, o) in dus.iter().enumerate() {
        let chained = j == 0 || o.operands.first() == dus[j - 1].results.first();
        if o.op != Op::DynamicUpdateSlice || o.operands.get(2 + d) != counters.get(j) || !chained {
            return None;
        }
    }
    // Each stacked state but the last is read by the next copy's update only.
    for o in &dus[..dus.len() - 1] {
        let r = o.results[0];
        let uses: usize = ops
            .iter()
            .map(|x| x.operands.iter().filter(|&&v| v == r).count())
            .sum();
        if uses != 1 {
            return None;
        }
    }
    let first = dus[0];
    let last = dus[dus.len() - 1].results[0];
    let updates: Vec<ValueId> = dus.iter().map(|o| o.operands[1]).collect();
    let mut joined = update.clone();
    joined.shape[d] = len * k as i64;
    let cat = f.new_value(Type::Tensor(joined));
    let mut operands = vec![first.operands[0], cat];
    operands.extend(first.operands[2..].iter().copied());
    Some((
        at,
        [
            Operation::new(
                Op::Concatenate {
                    dimension: d as i64,
                },
                updates,
                vec![cat],
                loc.clone(),
            ),
            Operation::new(Op::DynamicUpdateSlice, operands, vec![last], loc.clone()),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use crate::passes::prepare;

    fn loop_of(src: &str) -> (usize, Option<u64>) {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f = prepare(&m, "main").expect("prepare");
        let body = f.body.as_ref().expect("body");
        let mut defs = std::collections::HashMap::new();
        super::collect(body, &mut defs, &mut Vec::new());
        let w = body
            .ops
            .iter()
            .find(|o| o.op == crate::ir::Op::While)
            .expect("while");
        let sines = w.regions[1]
            .ops
            .iter()
            .filter(|o| o.name() == "stablehlo.sine")
            .count();
        (sines, super::super::trip_count::trip_count(w, &defs))
    }

    // The reverse reads other elements of the state than each its own: the loop does not run
    // whole in one kernel (`whole_loops`), which these tests would otherwise see.
    const FORI: &str = r#"
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<64xf32>
   cond {
    %n = stablehlo.constant dense<TRIPS> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %s0 = stablehlo.sine %v : tensor<64xf32>
    %s = stablehlo.reverse %s0, dims = [0] : tensor<64xf32>
    %f = stablehlo.convert %i : (tensor<i32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<64xf32>
    %a = stablehlo.add %s, %b : tensor<64xf32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %a : tensor<i32>, tensor<64xf32>
  }
  return %r#1 : tensor<64xf32>
}"#;

    const SCAN: &str = r#"
func.func @main(%x: tensor<64xf32>) -> tensor<STACKx2xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s0 = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<STACKx2xf32>
  %r:3 = stablehlo.while(%i = %c0, %v = %x, %s = %s0) : tensor<i32>, tensor<64xf32>, tensor<STACKx2xf32>
   cond {
    %n = stablehlo.constant dense<16> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %a = stablehlo.sine %v : tensor<64xf32>
    %y = stablehlo.slice %a [0:2] : (tensor<64xf32>) -> tensor<2xf32>
    %u = stablehlo.reshape %y : (tensor<2xf32>) -> tensor<1x2xf32>
    %t = stablehlo.dynamic_update_slice %s, %u, %i, %zero : (tensor<STACKx2xf32>, tensor<1x2xf32>, tensor<i32>, tensor<i32>) -> tensor<STACKx2xf32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %a, %t : tensor<i32>, tensor<64xf32>, tensor<STACKx2xf32>
  }
  return %r#2 : tensor<STACKx2xf32>
}"#;

    fn updates_in_body(src: &str) -> usize {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f = prepare(&m, "main").expect("prepare");
        let body = f.body.as_ref().expect("body");
        let w = body
            .ops
            .iter()
            .find(|o| o.op == crate::ir::Op::While)
            .expect("while");
        w.regions[1]
            .ops
            .iter()
            .filter(|o| o.op == crate::ir::Op::DynamicUpdateSlice)
            .count()
    }

    #[test]
    fn stacked_outputs_take_one_update_a_trip() {
        // 16 steps, 8 a trip: the eight adjacent one-row updates are one of eight rows.
        assert_eq!(updates_in_body(&SCAN.replace("STACK", "16")), 1);
        // A stack shorter than the steps would clamp the last updates: they stay apart.
        assert_eq!(updates_in_body(&SCAN.replace("STACK", "12")), 8);
    }

    #[test]
    fn counted_loops_run_k_iterations_a_trip() {
        assert_eq!(loop_of(&FORI.replace("TRIPS", "1000")), (8, Some(125)));
        assert_eq!(loop_of(&FORI.replace("TRIPS", "12")), (6, Some(2)));
        // A prime trip count has no factor: `guarded` makes it a loop of 8 copies for 124
        // trips (then 5 copies after it), which this pass unrolls by 4 in turn.
        assert_eq!(loop_of(&FORI.replace("TRIPS", "997")), (32, Some(31)));
    }
}
