//! Which `while` loops run whole inside one kernel (`codegen::while_kernel`): loops whose
//! every tensor of loop state is a scalar or has one shape `S`, and whose iterations compute
//! each element of `S` from the same element of the state (elementwise ops, broadcasts of
//! scalars, reads of values from outside at any element). Each invocation then carries its own
//! element through every iteration, and computes the scalars (counters, bounds, the predicate)
//! itself: the whole loop is one launch instead of one or more per iteration — a loop of 200
//! iterations over 64 floats was 200 launches on lavapipe (~100 µs each), where the host's
//! `fori_loop` takes microseconds.
//!
//! The loops [`super::guarded`] and [`super::unroll`] would rewrite are left to the kernel when
//! it takes them: copies of the body save nothing there. `WGPU_HLO_WHILE_KERNELS=0` turns the
//! kernels off (those passes then rewrite the loops as before).

use std::collections::HashSet;

use crate::ir::{Function, Op, Operation, Type, ValueId};

/// Most elements of `S` times ops of one iteration: within it a launch runs at least 8
/// iterations under `codegen::while_kernel`'s bound on one launch's work (2^28 element-ops),
/// as many as `unroll` would copy into one launch, and reads and writes the state once, not
/// once an iteration (200 iterations over 2^20 floats on lavapipe: 385-449 ms from the host,
/// a launch or more an iteration).
pub const MAX_ELEMENT_OPS: u64 = 1 << 25;

/// True unless `WGPU_HLO_WHILE_KERNELS=0`.
pub fn enabled() -> bool {
    !std::env::var("WGPU_HLO_WHILE_KERNELS").is_ok_and(|v| v.trim() == "0")
}

/// How a loop runs whole in one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct WholeLoop {
    /// The shape `S` of the state's tensors (empty when every state is a scalar).
    pub shape: Vec<usize>,
    /// Ops of one iteration (the cond's and the body's).
    pub ops: u64,
    /// Per state: whether the body returns it unchanged. JAX passes the values a loop's
    /// functions close over as such states: the kernel reads them from their buffers at any
    /// element, of any shape and type, and the loop's result is the initial value.
    pub invariant: Vec<bool>,
    /// Whether the loop reduces its tensors to scalars (a predicate to a tolerance, a norm):
    /// then one invocation computes every element, in loops over them.
    pub serial: bool,
    /// Per state: the stacked output of a scan, when it is one (see [`Stacked`]).
    pub stacked: Vec<Option<Stacked>>,
}

/// A state of shape `[T] ++ S` that the body only updates, at one row an iteration:
/// `dynamic_update_slice(ys, broadcast_in_dim(v) or reshape(v), i, ...)` with `v` of shape
/// `S` (`lax.scan`'s stacked outputs). Each invocation writes its element of the row in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Stacked {
    /// Rows (`T`).
    pub rows: usize,
    /// The value of shape `S` (or a scalar when `S` is) written at the row.
    pub value: ValueId,
    /// The row (a scalar `i32` or `u32`; clamped into the rows as `dynamic_update_slice`
    /// does).
    pub row: ValueId,
    /// The `dynamic_update_slice` (what the body returns for the state) and the op making its
    /// update from `value`.
    pub ops: [ValueId; 2],
}

/// The stacked output state `k` is, if it is one (see [`Stacked`]); `shape` is not yet known,
/// the caller checks it.
fn stacked(f: &Function, op: &Operation, k: usize) -> Option<Stacked> {
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let (arg, carg) = (*body.args.get(k)?, *cond.args.get(k)?);
    let returned = body.ops.last().filter(|o| o.op == Op::Return)?;
    let result = *returned.operands.get(k)?;
    let mut uses = 0;
    let mut cond_reads = false;
    body.walk(&mut |o: &Operation| uses += o.operands.iter().filter(|&&v| v == arg).count());
    cond.walk(&mut |o: &Operation| cond_reads |= o.operands.contains(&carg));
    let dus = body.ops.iter().find(|o| o.operands.first() == Some(&arg))?;
    if uses != 1 || cond_reads || dus.op != Op::DynamicUpdateSlice || dus.results != [result] {
        return None;
    }
    let (Some(&ys), Some(&update), Some(&row)) = (
        dus.operands.first(),
        dus.operands.get(1),
        dus.operands.get(2),
    ) else {
        return None;
    };
    // The result leaves the body only as the state.
    let mut result_uses = 0;
    body.walk(&mut |o: &Operation| {
        result_uses += o.operands.iter().filter(|&&v| v == result).count()
    });
    let maker = body.ops.iter().find(|o| o.results.contains(&update))?;
    let mut update_uses = 0;
    body.walk(&mut |o: &Operation| {
        update_uses += o.operands.iter().filter(|&&v| v == update).count()
    });
    let [value] = maker.operands[..] else {
        return None;
    };
    let (Type::Tensor(yt), Type::Tensor(vt), Type::Tensor(rt)) = (f.ty(ys), f.ty(value), f.ty(row))
    else {
        return None;
    };
    let mut want = vec![1usize];
    want.extend(vt.dims());
    let Type::Tensor(ut) = f.ty(update) else {
        return None;
    };
    let makes = match &maker.op {
        Op::Reshape => true,
        Op::BroadcastInDim { dimensions } => dimensions
            .iter()
            .enumerate()
            .all(|(i, &d)| d == i as i64 + 1),
        _ => false,
    };
    let ok = ys == arg
        && result_uses == 1
        && update_uses == 1
        && makes
        && ut.dims() == want
        && yt.rank() == vt.rank() + 1
        && yt.dims().get(1..) == Some(&vt.dims()[..])
        && yt.dtype == vt.dtype
        && yt.dtype.byte_size() >= 4
        && rt.rank() == 0
        && matches!(
            rt.dtype,
            crate::ir::ElementType::I32 | crate::ir::ElementType::U32
        )
        && dus.operands[3..]
            .iter()
            .all(|&v| matches!(f.ty(v), Type::Tensor(t) if t.rank() == 0));
    ok.then(|| Stacked {
        rows: yt.dims()[0],
        value,
        row,
        ops: [result, update],
    })
}

/// How loop `op` runs whole in one kernel, when it can.
pub fn in_one_kernel(f: &Function, op: &Operation) -> Option<WholeLoop> {
    if op.op != Op::While || !enabled() {
        return None;
    }
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let tensor = |v: ValueId| match f.ty(v) {
        Type::Tensor(t) => Some(t),
        _ => None,
    };
    if cond.args.len() != op.operands.len() || body.args.len() != op.operands.len() {
        return None;
    }
    let returned = body.ops.last().filter(|o| o.op == Op::Return)?;
    let invariant: Vec<bool> = (0..op.operands.len())
        .map(|k| returned.operands.get(k) == body.args.get(k))
        .collect();
    let stacks: Vec<Option<Stacked>> = (0..op.operands.len()).map(|k| stacked(f, op, k)).collect();
    // The state that changes: scalars, and tensors of one shape whose elements are words (a
    // packed element shares its word with other invocations' elements).
    let mut shape: Option<Vec<usize>> = None;
    for ((&v, &same), st) in op.operands.iter().zip(&invariant).zip(&stacks) {
        let t = tensor(v)?;
        if same || st.is_some() || t.rank() == 0 {
            continue;
        }
        if t.dtype.byte_size() < 4 {
            return None;
        }
        let dims = t.dims();
        match &shape {
            Some(s) if *s != dims => return None,
            Some(_) => {}
            None => shape = Some(dims),
        }
    }
    let shape = shape.unwrap_or_default();
    let elements: u64 = shape.iter().map(|&d| d as u64).product();
    if elements == 0 {
        return None;
    }
    // A stacked output's rows are of the state's shape.
    let mut stacking: HashSet<ValueId> = HashSet::new();
    for st in stacks.iter().flatten() {
        if tensor(st.value)?.dims() != shape || st.rows == 0 {
            return None;
        }
        stacking.extend(st.ops);
    }
    // Values that hold the element of `S` of each invocation: the tensor states that change
    // and what is computed from them element by element.
    let mut own: HashSet<ValueId> = HashSet::new();
    for r in [cond, body] {
        for ((&a, &same), st) in r.args.iter().zip(&invariant).zip(&stacks) {
            if !same && st.is_none() && tensor(a)?.rank() > 0 {
                own.insert(a);
            }
        }
    }
    let mut ops = 0u64;
    let mut serial = false;
    for r in [cond, body] {
        for o in &r.ops {
            if o.results.iter().any(|v| stacking.contains(v)) {
                // A stacked output's update: written in place (see `Stacked`).
                ops += 1;
                continue;
            }
            if full_reduction(f, o, &shape) {
                // Reads every element: one invocation computes them all (`serial`).
                serial = true;
                ops += 2;
                continue;
            }
            if !o.regions.is_empty() || !allowed(&o.op) {
                return None;
            }
            ops += 1;
            if !o.operands.iter().any(|v| own.contains(v)) || o.op == Op::Return {
                continue;
            }
            // Read at the invocation's own element only: ops that keep each element in place.
            let in_place = o.op.is_elementwise()
                || matches!(o.op, Op::BitcastConvert | Op::Reshape)
                || matches!(&o.op, Op::BroadcastInDim { dimensions }
                    if dimensions.iter().enumerate().all(|(i, &d)| d == i as i64));
            if !in_place {
                return None;
            }
            for &v in o.operands.iter().chain(&o.results) {
                let t = tensor(v)?;
                if t.rank() > 0 && t.dims() != shape {
                    return None;
                }
            }
            own.extend(o.results.iter().copied());
        }
    }
    if elements.saturating_mul(ops) > MAX_ELEMENT_OPS
        || (serial && (elements > MAX_SERIAL || !stacking.is_empty()))
    {
        return None;
    }
    Some(WholeLoop {
        shape,
        ops,
        invariant,
        serial,
        stacked: stacks,
    })
}

/// Most elements of `S` a loop with reductions computes in one invocation. Its tensors live
/// in private arrays, which llvmpipe handles at a cost that grows with their length: a
/// bisection over 1024 floats (23 iterations) took 34 s in one invocation; over 64, 0.4 ms.
/// Longer states run from the host (as guarded steps).
pub const MAX_SERIAL: u64 = 64;

/// True for a `reduce` of one tensor of shape `shape` to a scalar whose reducer is one binary
/// op of its two arguments (`add`, `or`, `max`, ...): a predicate such as `jnp.any(...)` or
/// a norm. The whole-loop kernel computes it with a loop over the elements.
fn full_reduction(f: &Function, o: &Operation, shape: &[usize]) -> bool {
    let (Op::Reduce { .. }, [input, init], [result], [reducer]) =
        (&o.op, &o.operands[..], &o.results[..], &o.regions[..])
    else {
        return false;
    };
    let rank0 = |v: &ValueId| matches!(f.ty(*v), Type::Tensor(t) if t.rank() == 0);
    let of_shape =
        matches!(f.ty(*input), Type::Tensor(t) if !shape.is_empty() && t.dims() == shape);
    let [a, b] = &reducer.args[..] else {
        return false;
    };
    let simple = match &reducer.ops[..] {
        [op, ret] => {
            matches!(op.op, Op::Binary(_))
                && ret.op == Op::Return
                && ret.operands == op.results
                && (op.operands == [*a, *b] || op.operands == [*b, *a])
        }
        _ => false,
    };
    of_shape && rank0(init) && rank0(result) && simple
}

/// Ops a whole-loop kernel computes inline: those whose copies fuse (`unroll`), less the
/// reductions and updates (full reductions and stacked outputs are found apart).
fn allowed(op: &Op) -> bool {
    super::unroll::fuses_across_copies(op)
        && !matches!(op, Op::Reduce { .. } | Op::DynamicUpdateSlice)
}

#[cfg(test)]
mod tests {
    use crate::ir::{Function, Op, Operation};

    fn prepared(src: &str) -> Function {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        crate::passes::prepare(&m, "main").expect("prepare")
    }

    /// The loops left after the passes: whether each runs whole in one kernel, and its ops.
    fn loops(f: &Function) -> Vec<(bool, usize)> {
        let mut out = Vec::new();
        if let Some(b) = &f.body {
            b.walk(&mut |o: &Operation| {
                if o.op == Op::While {
                    let ops = o.regions.iter().map(|r| r.ops.len()).sum();
                    out.push((super::in_one_kernel(f, o).is_some(), ops));
                }
            });
        }
        out
    }

    // A loop of STEPS over 64 floats and a counter; BODY computes %a from %v.
    const LOOP: &str = r#"
func.func @main(%x: tensor<64xf32>, %w: tensor<64xf32>, %n: tensor<i32>) -> tensor<64xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<64xf32>
   cond {
    %p = stablehlo.compare LT, %i, BOUND : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    BODY
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %a : tensor<i32>, tensor<64xf32>
  }
  return %r#1 : tensor<64xf32>
}"#;

    fn lp(bound: &str, body: &str) -> String {
        let (decl, bound) = match bound.parse::<i64>() {
            Ok(n) => (
                format!("%nb = stablehlo.constant dense<{n}> : tensor<i32>\n    "),
                "%nb",
            ),
            Err(_) => (String::new(), bound),
        };
        LOOP.replace("BOUND", bound)
            .replace("    %p = ", &format!("    {decl}%p = "))
            .replace("BODY", body)
    }

    const SINE_PLUS_W: &str = "%s = stablehlo.sine %v : tensor<64xf32>
    %a = stablehlo.add %s, %w : tensor<64xf32>";

    #[test]
    fn elementwise_loops_run_whole_and_are_not_copied() {
        // 1000 steps known at compile time, and a traced bound: one loop each, its body as
        // written (no copies from `unroll` or `guarded`).
        let f = prepared(&lp("1000", SINE_PLUS_W));
        assert_eq!(loops(&f), vec![(true, 8)]);
        let f = prepared(&lp("%n", SINE_PLUS_W));
        assert_eq!(loops(&f), vec![(true, 7)]);
    }

    #[test]
    fn loops_reading_other_elements_do_not() {
        // A reverse reads element 63 - e for element e; a reduction all of them.
        let rev = "%s = stablehlo.sine %v : tensor<64xf32>
    %a = stablehlo.reverse %s, dims = [0] : tensor<64xf32>";
        let f = prepared(&lp("%n", rev));
        assert!(loops(&f).iter().all(|l| !l.0), "{:?}", loops(&f));
        // A slice of a value from outside, read at any element, is fine.
        let sliced = "%q = stablehlo.slice %w [0:32] : (tensor<64xf32>) -> tensor<32xf32>
    %c = stablehlo.concatenate %q, %q, dim = 0 : (tensor<32xf32>, tensor<32xf32>) -> tensor<64xf32>
    %a = stablehlo.multiply %v, %c : tensor<64xf32>";
        let f = prepared(&lp("%n", sliced));
        assert!(matches!(loops(&f)[..], [(true, _)]), "{:?}", loops(&f));
    }

    #[test]
    fn short_loops_still_become_steps() {
        // At most 7 iterations (from 0 or a clamp into [0, 1]) is no loop at all: `guarded`
        // still writes them as steps.
        let src = lp("7", SINE_PLUS_W).replace(
            "%r:2 = stablehlo.while(%i = %c0",
            "%c1 = stablehlo.constant dense<1> : tensor<i32>
  %st = stablehlo.clamp %c0, %n, %c1 : (tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<i32>
  %r:2 = stablehlo.while(%i = %st",
        );
        assert_eq!(loops(&prepared(&src)), vec![]);
    }

    #[test]
    fn reductions_to_scalars_run_in_one_invocation() {
        // `jnp.any(v > 0.5)` as the predicate: whole, serial.
        let src = r#"
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %r = stablehlo.while(%v = %x) : tensor<64xf32>
   cond {
    %h = stablehlo.constant dense<0.5> : tensor<f32>
    %hb = stablehlo.broadcast_in_dim %h, dims = [] : (tensor<f32>) -> tensor<64xf32>
    %g = stablehlo.compare GT, %v, %hb : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xi1>
    %f = stablehlo.constant dense<false> : tensor<i1>
    %a = stablehlo.reduce(%g init: %f) applies stablehlo.or across dimensions = [0] : (tensor<64xi1>, tensor<i1>) -> tensor<i1>
    stablehlo.return %a : tensor<i1>
  } do {
    %s = stablehlo.sine %v : tensor<64xf32>
    stablehlo.return %s : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}"#;
        let f = prepared(src);
        let mut found = Vec::new();
        if let Some(b) = &f.body {
            b.walk(&mut |o: &Operation| {
                if o.op == Op::While {
                    found.push(super::in_one_kernel(&f, o).map(|w| (w.serial, w.shape)));
                }
            });
        }
        assert_eq!(found, vec![Some((true, vec![64]))]);
    }
}
