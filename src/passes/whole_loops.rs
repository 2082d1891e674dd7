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

use std::collections::{HashMap, HashSet};

use crate::ir::{BinaryOp, ElementType, Function, Op, Operation, Region, Type, UnaryOp, ValueId};

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
    /// When each element runs until its own predicate fails ([`each_element`]): the loop's
    /// predicate is `any(P)` of an elementwise `P` ([`Each`]), and an element where `P` fails
    /// keeps its state. Then each invocation runs its own iterations (no `serial`).
    pub each: Option<Each>,
    /// Per state: the stacked output of a scan, when it is one (see [`Stacked`]).
    pub stacked: Vec<Option<Stacked>>,
    /// Products of the state's vector with a matrix from outside, in the body's order
    /// ([`Matvec`]). With any, one workgroup runs the loop, an invocation an element, and
    /// shares each product's vector and each full reduction's operand through workgroup
    /// memory (no `serial`).
    pub matvecs: Vec<Matvec>,
}

/// Most elements of a loop whose body multiplies its state by a matrix ([`Matvec`]): one
/// workgroup of an invocation per element (256: the largest workgroup every WebGPU adapter
/// allows). On lavapipe (2 cores) one workgroup runs on one core; at 256 elements it only
/// matched the loop run from the host until the invocations shared the vector through
/// their subgroup (`codegen::while_kernel::each_word`, 2026-12-05). Since then, host-run
/// against one kernel (lavapipe, 2-core EPYC, minimum of 5 calls): `fori_loop` of
/// `tanh(A @ v)`, 300 steps, at 256 156 -> 35 ms and at 192 92 -> 20 ms; 500 steps of a
/// Markov chain at 256 239 -> 57 ms and at 192 182 -> 33 ms. (Before: at 256 40 -> 31 ms,
/// `v @ A` 27 -> 32 ms, the Markov chain 47 -> 52 ms, on another host.) The limit was 128.
pub const MATVEC_MAX_ELEMENTS: usize = 256;

/// A `dot_general` in a loop's body of a vector of the state's shape `[n]` (computed from the
/// state) and an `n x n` f32 matrix that is not (from outside, or a state the body does not
/// change): `A @ v`, `v @ A` and their transposes. Full reductions may stand next to them
/// (power iteration's norm, a Jacobi iteration's tolerance), and stacked outputs (an RNN's
/// `lax.scan` returning every hidden state). `lax.fori_loop` iterating a linear map —
/// `tanh(W @ h)`, a Markov chain's `p @ T`, an explicit ODE step with a linear term — ran a
/// launch or more an iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Matvec {
    /// The product (of shape `[n]`).
    pub result: ValueId,
    /// The vector.
    pub vector: ValueId,
    /// The matrix.
    pub matrix: ValueId,
    /// The matrix's contracted dimension (0 or 1): element `e` of the product sums
    /// `matrix[j][e] * vector[j]` (0) or `matrix[e][j] * vector[j]` (1).
    pub contracted: usize,
}

/// Products in loops that run whole in one kernel of a vector with a matrix contracted on its
/// first dimension (`v @ A`, a Markov chain's `p @ T`, `A.T @ v`): each invocation would read
/// a column, an element a load, where a row is a texel fetch for four. The matrix, invariant,
/// is transposed once before the loop and the product reads that by rows (the same sums, in
/// the same order). 64 x 64 on lavapipe, 300 steps of `tanh(v @ A)`: see the commit.
pub fn matrices_by_rows(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    // Per loop (its first result): the products to rewrite and their matrices' outer values.
    let mut plans: HashMap<ValueId, Vec<(ValueId, ValueId)>> = HashMap::new();
    {
        let mut defs = HashMap::new();
        let mut loops = Vec::new();
        super::unroll::collect(&body, &mut defs, &mut loops);
        for op in loops {
            let Some(whole) = in_one_kernel(f, op) else {
                continue;
            };
            let inv = super::hoist_dots::Invariant::of(op);
            let mine: Vec<(ValueId, ValueId)> = whole
                .matvecs
                .iter()
                .filter(|m| m.contracted == 0)
                .filter_map(|m| Some((m.result, inv.outer(m.matrix)?)))
                .collect();
            if let (false, Some(&first)) = (mine.is_empty(), op.results.first()) {
                plans.insert(first, mine);
            }
        }
    }
    if !plans.is_empty() {
        by_rows(f, &mut body, &plans);
    }
    f.body = Some(body);
}

fn by_rows(
    f: &mut Function,
    region: &mut Region,
    plans: &HashMap<ValueId, Vec<(ValueId, ValueId)>>,
) {
    let mut out = Vec::with_capacity(region.ops.len());
    for mut op in std::mem::take(&mut region.ops) {
        for sub in &mut op.regions {
            by_rows(f, sub, plans);
        }
        let mine = match (op.op == Op::While, op.results.first()) {
            (true, Some(first)) => plans.get(first).cloned().unwrap_or_default(),
            _ => Vec::new(),
        };
        for (result, matrix) in mine {
            let Some(body) = op.regions.get_mut(1) else {
                continue;
            };
            let Some(dot) = body.ops.iter_mut().find(|o| o.results == [result]) else {
                continue;
            };
            let Type::Tensor(mt) = f.ty(matrix).clone() else {
                continue;
            };
            let Op::DotGeneral {
                dimension_numbers: d,
                ..
            } = &mut dot.op
            else {
                continue;
            };
            // The matrix is the operand of rank 2.
            let rank2 = |v: ValueId| matches!(f.ty(v), Type::Tensor(t) if t.rank() == 2);
            let side = match dot.operands[..] {
                [a, _] if rank2(a) => 0,
                [_, b] if rank2(b) => 1,
                _ => continue,
            };
            let contracting = if side == 0 {
                &mut d.lhs_contracting_dimensions
            } else {
                &mut d.rhs_contracting_dimensions
            };
            if contracting[..] != [0] {
                continue;
            }
            contracting[0] = 1;
            let dims = mt.dims();
            let t = f.new_value(Type::Tensor(crate::ir::TensorType::new(
                vec![dims[1] as i64, dims[0] as i64],
                mt.dtype,
            )));
            dot.operands[side] = t;
            out.push(Operation::new(
                Op::Transpose {
                    permutation: vec![1, 0],
                },
                vec![matrix],
                vec![t],
                op.loc.clone(),
            ));
        }
        out.push(op);
    }
    region.ops = out;
}

/// `o` as a [`Matvec`] over the state's shape `shape`.
fn matvec(f: &Function, o: &Operation, own: &HashSet<ValueId>, shape: &[usize]) -> Option<Matvec> {
    let Op::DotGeneral {
        dimension_numbers: d,
        ..
    } = &o.op
    else {
        return None;
    };
    let (&[a, b], &[result]) = (&o.operands[..], &o.results[..]) else {
        return None;
    };
    let &[n] = shape else {
        return None;
    };
    let f32_of = |v: ValueId, dims: &[usize]| matches!(f.ty(v), Type::Tensor(t) if t.dtype == ElementType::F32 && t.dims() == dims);
    if n > MATVEC_MAX_ELEMENTS
        || !d.lhs_batching_dimensions.is_empty()
        || !d.rhs_batching_dimensions.is_empty()
        || !f32_of(result, &[n])
    {
        return None;
    }
    let (&[lc], &[rc]) = (
        &d.lhs_contracting_dimensions[..],
        &d.rhs_contracting_dimensions[..],
    ) else {
        return None;
    };
    // The vector is the own operand of rank 1, contracted on its dimension 0.
    let (vector, matrix, vc, mc) = if own.contains(&a) && !own.contains(&b) {
        (a, b, lc, rc)
    } else if own.contains(&b) && !own.contains(&a) {
        (b, a, rc, lc)
    } else {
        return None;
    };
    (vc == 0 && (mc == 0 || mc == 1) && f32_of(vector, &[n]) && f32_of(matrix, &[n, n])).then_some(
        Matvec {
            result,
            vector,
            matrix,
            contracted: mc as usize,
        },
    )
}

/// The predicate of a loop whose elements each run until their own predicate fails
/// ([`each_element`]): the cond returns `any(P)`, or `also && any(P)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Each {
    /// `P`, elementwise over the state's shape (a cond value).
    pub pred: ValueId,
    /// The initial value of the reduction `any(P)` (the kernel computes `init || P`).
    pub init: ValueId,
    /// A scalar predicate computed from the scalar states (an iteration bound such as jax's
    /// series loops' `count < 2000`): each element runs while `also && (init || P)`.
    pub also: Option<ValueId>,
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
pub fn stacked(f: &Function, op: &Operation, k: usize) -> Option<Stacked> {
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

/// Whether loop `op` writes every row of its stacked output `st` (see [`Stacked`]): a counted
/// loop (`trip_count::counted`) whose row is, at iteration `t`, `t` or `-t` plus a constant
/// (`lax.scan` forwards writes row `i`, reversed `T - i - 1`; a `fori_loop` its own counter,
/// through jax's wrapping of negative indices), over consecutive rows from one end of the
/// stack past the other (rows are clamped into the stack, as `dynamic_update_slice` clamps
/// them). The output then needs no initial value: each element is written before the loop
/// ends, whatever the stack held. `defs` must hold the definitions inside the loop's regions.
pub fn every_row_written(
    f: &Function,
    op: &Operation,
    defs: &HashMap<ValueId, &Operation>,
    st: &Stacked,
) -> bool {
    let Some(c) = super::trip_count::counted(op, defs) else {
        return false;
    };
    let Some(body) = op.regions.get(1) else {
        return false;
    };
    let trips = c.trips as i128;
    let rows = st.rows as i128;
    if trips == 0 || rows == 0 || trips >= AFFINE_LIMIT {
        return false;
    }
    // The loop's integers that start at a constant and step by one: `init + step * t`.
    let mut counters = HashMap::new();
    for (k, &a) in body.args.iter().enumerate() {
        let init = op
            .operands
            .get(k)
            .and_then(|&v| super::trip_count::scalar_int(v, defs));
        let step = super::trip_count::step_of(body, k, defs);
        if let (Some(init), Some(step)) = (init, step) {
            counters.insert(a, Affine { a: step, b: init });
        }
    }
    let iters = Iterations { f, trips, counters };
    let Some(row) = iters.affine(st.row, defs, 0) else {
        return false;
    };
    let (first, last) = (row.at(0), row.at(trips - 1));
    row.a.abs() == 1 && first.min(last) <= 0 && first.max(last) >= rows - 1
}

/// Bound on the constants and values [`every_row_written`] follows: well inside `i32`, which
/// the kernel computes them in.
const AFFINE_LIMIT: i128 = 1 << 30;

/// `a * t + b` at iteration `t`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Affine {
    a: i128,
    b: i128,
}

impl Affine {
    fn at(self, t: i128) -> i128 {
        self.a * t + self.b
    }
}

/// A counted loop's iterations `0 .. trips` and its counters, for [`Iterations::affine`].
struct Iterations<'f> {
    f: &'f Function,
    trips: i128,
    counters: HashMap<ValueId, Affine>,
}

impl Iterations<'_> {
    /// `v` (a 32-bit integer scalar of the body) as a function `a * t + b` of the iteration,
    /// when it is: counters, constants, their sums and differences, and selects whose
    /// predicate compares such values the same way at every iteration (jax's
    /// `select(i < 0, i + n, i)` where `i` is never negative).
    fn affine(
        &self,
        v: ValueId,
        defs: &HashMap<ValueId, &Operation>,
        depth: usize,
    ) -> Option<Affine> {
        // Signed 32-bit values only (what the bounds above keep exact).
        if !matches!(self.f.ty(v), Type::Tensor(t) if t.rank() == 0 && t.dtype == ElementType::I32)
        {
            return None;
        }
        if let Some(&c) = self.counters.get(&v) {
            return Some(c);
        }
        if let Some(b) = super::trip_count::scalar_int(v, defs) {
            return Some(Affine { a: 0, b }).filter(|_| b.abs() < AFFINE_LIMIT);
        }
        if depth > 8 {
            return None;
        }
        let op = defs.get(&v)?;
        let operand =
            |i: usize| -> Option<Affine> { self.affine(*op.operands.get(i)?, defs, depth + 1) };
        let r = match &op.op {
            Op::Binary(BinaryOp::Add) => {
                let (x, y) = (operand(0)?, operand(1)?);
                Affine {
                    a: x.a + y.a,
                    b: x.b + y.b,
                }
            }
            Op::Binary(BinaryOp::Subtract) => {
                let (x, y) = (operand(0)?, operand(1)?);
                Affine {
                    a: x.a - y.a,
                    b: x.b - y.b,
                }
            }
            Op::Select => {
                let p = defs.get(op.operands.first()?)?;
                let Op::Compare { direction, .. } = &p.op else {
                    return None;
                };
                let x = self.affine(*p.operands.first()?, defs, depth + 1)?;
                let y = self.affine(*p.operands.get(1)?, defs, depth + 1)?;
                // `x - y` is linear in `t`: the comparison holds at every iteration or at
                // none when it does so at both ends.
                let d = Affine {
                    a: x.a - y.a,
                    b: x.b - y.b,
                };
                use crate::ir::attr::ComparisonDirection::*;
                let holds = |t: i128| match direction {
                    Lt => Some(d.at(t) < 0),
                    Le => Some(d.at(t) <= 0),
                    Gt => Some(d.at(t) > 0),
                    Ge => Some(d.at(t) >= 0),
                    _ => None,
                };
                let (first, last) = (holds(0)?, holds(self.trips - 1)?);
                if first != last {
                    return None;
                }
                operand(if first { 1 } else { 2 })?
            }
            _ => return None,
        };
        let ok = r.a.abs() < AFFINE_LIMIT
            && r.at(0).abs() < AFFINE_LIMIT
            && r.at(self.trips - 1).abs() < AFFINE_LIMIT;
        ok.then_some(r)
    }
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
    // The state that changes: scalars, and tensors of one shape. Packed elements (narrower
    // than a word: booleans, 8- and 16-bit types) share a word with their neighbours, so one
    // invocation carries all of a word's elements (`codegen::while_kernel`).
    let mut shape: Option<Vec<usize>> = None;
    let mut packed = false;
    for ((&v, &same), st) in op.operands.iter().zip(&invariant).zip(&stacks) {
        let t = tensor(v)?;
        if same || st.is_some() || t.rank() == 0 {
            continue;
        }
        packed |= t.dtype.byte_size() < 4;
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
    let mut matvecs = Vec::new();
    for r in [cond, body] {
        for o in &r.ops {
            if std::ptr::eq(r, body) {
                if let Some(m) = matvec(f, o, &own, &shape) {
                    // Each element sums a row of the matrix.
                    ops += shape.iter().product::<usize>() as u64;
                    own.insert(m.result);
                    matvecs.push(m);
                    continue;
                }
            }
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
            let looks_up = lookup(f, o, &own, &shape);
            if !o.regions.is_empty() || !(allowed(&o.op) || looks_up) {
                return None;
            }
            ops += 1;
            if !o.operands.iter().any(|v| own.contains(v)) || o.op == Op::Return {
                continue;
            }
            if looks_up {
                own.extend(o.results.iter().copied());
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
                if t.rank() > 0 && !same_elements(&t.dims(), &shape) {
                    return None;
                }
            }
            own.extend(o.results.iter().copied());
        }
    }
    // Products run in one workgroup, which computes the reductions too (`serial` is then
    // off).
    let workgroup = !matvecs.is_empty();
    let each = if serial && !workgroup {
        each_element(f, op, &invariant, &stacks)
    } else {
        None
    };
    let serial = serial && each.is_none() && !workgroup;
    // One invocation computing every element keeps them in private arrays of their compute
    // type, one element a word when stored: not for packed states.
    if elements.saturating_mul(ops) > MAX_ELEMENT_OPS
        || (serial && (elements > MAX_SERIAL || !stacking.is_empty() || packed))
    {
        return None;
    }
    // An invocation an element of a word's own: not with packed states.
    if workgroup && packed {
        return None;
    }
    Some(WholeLoop {
        shape,
        ops,
        invariant,
        serial,
        each,
        stacked: stacks,
        matvecs,
    })
}

/// The predicate of a loop whose cond returns `any(P)` or `also && any(P)` ([`Each`]): a
/// reduction by `or` of a tensor of the state's shape, the cond's only reduction, and a scalar
/// `also` that does not read it. (The initial value is `false` in every loop JAX writes; a
/// kernel computes `init || P` at its element, which is the loop's predicate wherever `init`
/// holds too.)
fn any_of(f: &Function, op: &Operation) -> Option<Each> {
    let [cond, _] = &op.regions[..] else {
        return None;
    };
    let &[r] = cond.returned() else {
        return None;
    };
    let mut reduces = cond
        .ops
        .iter()
        .filter(|o| matches!(o.op, Op::Reduce { .. }));
    let (Some(o), None) = (reduces.next(), reduces.next()) else {
        return None;
    };
    let &[any] = &o.results[..] else {
        return None;
    };
    let defs = cond.definitions();
    let also = if r == any {
        None
    } else {
        let a = &cond.ops[*defs.get(&r)?];
        let also = match (&a.op, &a.operands[..]) {
            (Op::Binary(BinaryOp::And), &[x, y]) if x == any => y,
            (Op::Binary(BinaryOp::And), &[x, y]) if y == any => x,
            _ => return None,
        };
        if reads(cond, &defs, also, &HashSet::from([any])) {
            return None;
        }
        Some(also)
    };
    let (Op::Reduce { .. }, [input, init], [reducer]) = (&o.op, &o.operands[..], &o.regions[..])
    else {
        return None;
    };
    let or = matches!(&reducer.ops[..], [x, _] if x.op == Op::Binary(BinaryOp::Or));
    let pred = matches!(f.ty(*input), Type::Tensor(t) if t.dtype == ElementType::Pred);
    (or && pred).then_some(Each {
        pred: *input,
        init: *init,
        also,
    })
}

/// Whether computing value `v` of region `r` (`defs`: its definitions) reads one of
/// `targets`.
fn reads(
    r: &crate::ir::Region,
    defs: &HashMap<ValueId, usize>,
    v: ValueId,
    targets: &HashSet<ValueId>,
) -> bool {
    let mut seen = HashSet::new();
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        if targets.contains(&x) {
            return true;
        }
        if !seen.insert(x) {
            continue;
        }
        if let Some(&i) = defs.get(&x) {
            if let Some(o) = r.ops.get(i) {
                stack.extend(o.operands.iter().copied());
            }
        }
    }
    false
}

/// Whether anything in `f` reads `v`.
fn used(f: &Function, v: ValueId) -> bool {
    let mut found = false;
    if let Some(b) = &f.body {
        b.walk(&mut |o: &Operation| found |= o.operands.contains(&v));
    }
    found
}

/// How the elements of loop `op` (whose ops already compute each element from its own: see
/// [`in_one_kernel`]) may each run until their own predicate fails: the loop runs while
/// `any(P)` (or `also && any(P)`, [`any_of`]) for an elementwise `P`, the body has no
/// reductions, every tensor state that changes has the state's shape (no stacked outputs),
/// and where `P` fails the body returns each tensor state as it is. `jax.vmap` of a
/// `while_loop` whose predicate becomes batched has this form (the body selects
/// `where(P, body(x), x)` with `P` recomputed), and so do loops masking their updates with a
/// state (`enabled`) that `P` is, such as jax's series for `gammainc` and `betainc`.
///
/// Then element `e`'s state stops changing at the first iteration where `P` fails at `e`, and
/// never depends on other elements: the state the loop ends with at `e` is the state after
/// `e`'s own iterations, whatever the others do. The proof is symbolic: the body's returned
/// values are followed through `select`s (and `and`, `not`, identity broadcasts) with every
/// value computed as `P` is (the same ops on the same states and outside values) taken as
/// false, and must come back to the state itself.
///
/// Scalar states that change (a counter) are computed from scalars only (the body has no
/// reductions), so alike at every element that is still running after as many iterations:
/// each invocation carries its own copy. `P` must not read them (an element stopped would
/// start again when they change), and the loop's result for them must be unused (it is the
/// value after the longest-running element's iterations, which no invocation knows).
fn each_element(
    f: &Function,
    op: &Operation,
    invariant: &[bool],
    stacks: &[Option<Stacked>],
) -> Option<Each> {
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let each = any_of(f, op)?;
    if body.ops.iter().any(|o| !o.regions.is_empty()) || stacks.iter().any(Option::is_some) {
        return None;
    }
    let rank = |k: usize| match f.ty(op.operands[k]) {
        Type::Tensor(t) => t.rank(),
        _ => 0,
    };
    let counters: HashSet<ValueId> = (0..op.operands.len())
        .filter(|&k| !invariant.get(k).copied().unwrap_or(true) && rank(k) == 0)
        .filter_map(|k| cond.args.get(k).copied())
        .collect();
    let cdefs = cond.definitions();
    if reads(cond, &cdefs, each.pred, &counters) {
        return None;
    }
    let p = each.pred;
    let next = body.returned();
    let proof = Proof {
        f,
        cond,
        body,
        cdefs,
        bdefs: body.definitions(),
        p,
        same_memo: Default::default(),
        eval_memo: Default::default(),
    };
    let frozen = (0..op.operands.len()).all(|k| {
        if invariant.get(k).copied().unwrap_or(true) {
            return true;
        }
        if rank(k) == 0 {
            return op.results.get(k).is_some_and(|&r| !used(f, r));
        }
        let Some(&n) = next.get(k) else {
            return false;
        };
        let frozen = proof.eval(n, 0);
        frozen == Sym::Arg(k) || (frozen == Sym::False && cond.args.get(k) == Some(&p))
    });
    frozen.then_some(each)
}

/// What a body value is where the loop's predicate fails ([`each_element`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sym {
    False,
    True,
    /// The state of this index, as the iteration found it.
    Arg(usize),
    /// Anything else.
    Other,
}

/// Recursion bound of [`Proof`]'s walks: past it a value is [`Sym::Other`] (no proof).
const PROOF_DEPTH: usize = 64;

struct Proof<'a> {
    f: &'a Function,
    cond: &'a crate::ir::Region,
    body: &'a crate::ir::Region,
    cdefs: HashMap<ValueId, usize>,
    bdefs: HashMap<ValueId, usize>,
    /// The cond's predicate (a cond value).
    p: ValueId,
    /// Answers so far (a value reached along many paths is followed once: without them a
    /// chain of ops using the one before twice took time exponential in its length). An
    /// answer cut short by the depth bound is "no", kept: a proof may only fail for it.
    same_memo: std::cell::RefCell<HashMap<(ValueId, ValueId), bool>>,
    eval_memo: std::cell::RefCell<HashMap<ValueId, Sym>>,
}

impl Proof<'_> {
    /// Whether cond value `c` and body value `b` are computed alike: the same ops on the same
    /// states (by index) and outside values.
    fn same(&self, c: ValueId, b: ValueId, depth: usize) -> bool {
        if let Some(&known) = self.same_memo.borrow().get(&(c, b)) {
            return known;
        }
        let answer = self.same_uncached(c, b, depth);
        self.same_memo.borrow_mut().insert((c, b), answer);
        answer
    }

    fn same_uncached(&self, c: ValueId, b: ValueId, depth: usize) -> bool {
        if depth > PROOF_DEPTH || self.f.ty(c) != self.f.ty(b) {
            return false;
        }
        if let Some(i) = self.cond.args.iter().position(|&a| a == c) {
            return self.body.args.get(i) == Some(&b);
        }
        match (self.cdefs.get(&c), self.bdefs.get(&b)) {
            (None, None) => c == b && !self.body.args.contains(&b),
            (Some(&i), Some(&j)) => {
                let (co, bo) = (&self.cond.ops[i], &self.body.ops[j]);
                co.op == bo.op
                    && co.regions.is_empty()
                    && bo.regions.is_empty()
                    && co.operands.len() == bo.operands.len()
                    && co.results.iter().position(|&r| r == c)
                        == bo.results.iter().position(|&r| r == b)
                    && co
                        .operands
                        .iter()
                        .zip(&bo.operands)
                        .all(|(&x, &y)| self.same(x, y, depth + 1))
            }
            _ => false,
        }
    }

    /// Body value `v` where the predicate fails.
    fn eval(&self, v: ValueId, depth: usize) -> Sym {
        if let Some(&known) = self.eval_memo.borrow().get(&v) {
            return known;
        }
        let answer = self.eval_uncached(v, depth);
        self.eval_memo.borrow_mut().insert(v, answer);
        answer
    }

    fn eval_uncached(&self, v: ValueId, depth: usize) -> Sym {
        if depth > PROOF_DEPTH {
            return Sym::Other;
        }
        if self.same(self.p, v, 0) {
            return Sym::False;
        }
        if let Some(k) = self.body.args.iter().position(|&a| a == v) {
            return Sym::Arg(k);
        }
        let Some(&j) = self.bdefs.get(&v) else {
            return Sym::Other;
        };
        let o = &self.body.ops[j];
        let is_pred =
            |x: ValueId| matches!(self.f.ty(x), Type::Tensor(t) if t.dtype == ElementType::Pred);
        match (&o.op, &o.operands[..]) {
            (Op::Select, &[c, a, b]) => match self.eval(c, depth + 1) {
                Sym::False => self.eval(b, depth + 1),
                Sym::True => self.eval(a, depth + 1),
                _ => match (self.eval(a, depth + 1), self.eval(b, depth + 1)) {
                    (x, y) if x == y && x != Sym::Other => x,
                    _ => Sym::Other,
                },
            },
            (Op::BroadcastInDim { dimensions }, &[x]) => {
                let identity = self.f.ty(x) == self.f.ty(v)
                    && dimensions.iter().enumerate().all(|(i, &d)| d == i as i64);
                let scalar = matches!(self.f.ty(x), Type::Tensor(t) if t.rank() == 0);
                match self.eval(x, depth + 1) {
                    s @ (Sym::False | Sym::True) if identity || scalar => s,
                    s @ Sym::Arg(_) if identity => s,
                    _ => Sym::Other,
                }
            }
            (Op::Binary(BinaryOp::And), &[x, y]) if is_pred(v) => {
                match (self.eval(x, depth + 1), self.eval(y, depth + 1)) {
                    (Sym::False, _) | (_, Sym::False) => Sym::False,
                    (Sym::True, Sym::True) => Sym::True,
                    _ => Sym::Other,
                }
            }
            (Op::Unary(UnaryOp::Not), &[x]) if is_pred(v) => match self.eval(x, depth + 1) {
                Sym::False => Sym::True,
                Sym::True => Sym::False,
                _ => Sym::Other,
            },
            _ => Sym::Other,
        }
    }
}

/// Most elements of `S` a loop with reductions computes in one invocation. Its tensors live
/// in private arrays, which llvmpipe handles at a cost that grows with their length: a
/// bisection over 1024 floats (23 iterations) took 34 s in one invocation; over 64, 0.4 ms.
/// Longer states run from the host (as guarded steps).
pub const MAX_SERIAL: u64 = 64;

/// True for a `reduce` of one tensor of shape `shape` to a scalar whose reducer is one binary
/// op of its two arguments (`add`, `or`, `max`, ...): a predicate such as `jnp.any(...)` or
/// a norm. The whole-loop kernel computes it with a loop over the elements.
pub(crate) fn full_reduction(f: &Function, o: &Operation, shape: &[usize]) -> bool {
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

/// True when `dims` lists the elements of `shape` in the same order: `shape` itself, or it
/// followed by dimensions of 1 (the `S x 1` indices of a gather). A value of `dims` then has
/// each invocation's element at the same linear position.
fn same_elements(dims: &[usize], shape: &[usize]) -> bool {
    dims.len() >= shape.len()
        && dims[..shape.len()] == *shape
        && dims[shape.len()..].iter().all(|&d| d == 1)
}

/// True for a `gather` that looks each element of `S` up in a table: one element of a table
/// that is not of the invocation's own elements (a value from outside, or computed from
/// scalars), at an index of its own (indices of shape `S` or `S x 1`, the index vector
/// last), giving a value of the state's shape or of it with trailing dimensions of size 1.
/// `jnp.take(table, i)` and `table[i]` in a loop's body, the `S x 1` gathers of
/// `jnp.searchsorted`'s search; the kernel reads the table at the computed place, as it reads
/// other values from outside at any element.
fn lookup(f: &Function, o: &Operation, own: &HashSet<ValueId>, shape: &[usize]) -> bool {
    let (
        Op::Gather {
            dimension_numbers: d,
            slice_sizes,
            ..
        },
        [table, indices],
        [result],
    ) = (&o.op, &o.operands[..], &o.results[..])
    else {
        return false;
    };
    let (Type::Tensor(tt), Type::Tensor(it), Type::Tensor(rt)) =
        (f.ty(*table), f.ty(*indices), f.ty(*result))
    else {
        return false;
    };
    // The table's dimensions that are not collapsed are the result's last, of size 1
    // (`jnp.searchsorted` gathers `S x 1`).
    let kept = tt.rank().saturating_sub(d.collapsed_slice_dims.len());
    let trailing: Vec<i64> = (shape.len()..shape.len() + kept)
        .map(|k| k as i64)
        .collect();
    !shape.is_empty()
        && !own.contains(table)
        && rt.rank() == shape.len() + kept
        && same_elements(&rt.dims(), shape)
        && d.offset_dims == trailing
        && d.operand_batching_dims.is_empty()
        && d.start_indices_batching_dims.is_empty()
        && d.start_index_map.len() == 1
        && slice_sizes.iter().all(|&s| s == 1)
        && d.index_vector_dim == shape.len() as i64
        && same_elements(&it.dims(), shape)
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
    fn lookups_in_a_table_run_whole() {
        // A gather of one element of %w (from outside) at an index computed from the state:
        // one loop kernel. Looking the state itself up reads other elements: not.
        let take = |table: &str| {
            format!(
                "%k = stablehlo.convert %v : (tensor<64xf32>) -> tensor<64xi32>
    %ix = stablehlo.broadcast_in_dim %k, dims = [0] : (tensor<64xi32>) -> tensor<64x1xi32>
    %a = \"stablehlo.gather\"({table}, %ix) <{{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1>}}> : (tensor<64xf32>, tensor<64x1xi32>) -> tensor<64xf32>"
            )
        };
        let f = prepared(&lp("%n", &take("%w")));
        assert!(matches!(loops(&f)[..], [(true, _)]), "{:?}", loops(&f));
        let f = prepared(&lp("%n", &take("%v")));
        assert!(loops(&f).iter().all(|l| !l.0), "{:?}", loops(&f));
    }

    #[test]
    fn a_search_inside_a_loop_runs_whole() {
        // A loop of 6 steps counted at compile time inside the body, gathering %w as 64 x 1
        // (an offset dimension, as `jnp.searchsorted` does): its body copied six times
        // (`guarded`), no loop inside, and the outer loop one kernel.
        let inner = r#"%z = stablehlo.constant dense<0> : tensor<i32>
    %q:2 = stablehlo.while(%k = %z, %u = %v) : tensor<i32>, tensor<64xf32>
     cond {
      %six = stablehlo.constant dense<6> : tensor<i32>
      %pk = stablehlo.compare LT, %k, %six : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %pk : tensor<i1>
    } do {
      %one1 = stablehlo.constant dense<1> : tensor<i32>
      %ki = stablehlo.convert %u : (tensor<64xf32>) -> tensor<64xi32>
      %ix = stablehlo.broadcast_in_dim %ki, dims = [0] : (tensor<64xi32>) -> tensor<64x1xi32>
      %g = "stablehlo.gather"(%w, %ix) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1>}> : (tensor<64xf32>, tensor<64x1xi32>) -> tensor<64x1xf32>
      %gr = stablehlo.reshape %g : (tensor<64x1xf32>) -> tensor<64xf32>
      %u2 = stablehlo.add %u, %gr : tensor<64xf32>
      %k2 = stablehlo.add %k, %one1 : tensor<i32>
      stablehlo.return %k2, %u2 : tensor<i32>, tensor<64xf32>
    }
    %a = stablehlo.sine %q#1 : tensor<64xf32>"#;
        let f = prepared(&lp("%n", inner));
        assert!(matches!(loops(&f)[..], [(true, _)]), "{:?}", loops(&f));
        // Sixteen steps are still copied (`guarded::MAX_COPIES`); seventeen stay a loop
        // inside (and the outer loop runs from the host).
        let f = prepared(&lp("%n", &inner.replace("dense<6>", "dense<16>")));
        assert!(matches!(loops(&f)[..], [(true, _)]), "{:?}", loops(&f));
        let f = prepared(&lp("%n", &inner.replace("dense<6>", "dense<17>")));
        assert_eq!(loops(&f).len(), 2, "{:?}", loops(&f));
        assert!(!loops(&f)[0].0, "{:?}", loops(&f));
    }

    /// A loop of `%n` steps of `tanh(PRODUCT)` over a vector of 64 (`%v`) and a matrix from
    /// outside (`%m`).
    fn matvec_loop(product: &str) -> String {
        r#"
func.func @main(%x: tensor<64xf32>, %m: tensor<64x64xf32>, %n: tensor<i32>) -> tensor<64xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<64xf32>
   cond {
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %d = PRODUCT
    %a = stablehlo.tanh %d : tensor<64xf32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %a : tensor<i32>, tensor<64xf32>
  }
  return %r#1 : tensor<64xf32>
}"#
        .replace("PRODUCT", product)
    }

    fn dot(lhs: &str, rhs: &str, lc: usize, rc: usize) -> String {
        let ty = |v: &str| {
            if v == "%m" {
                "tensor<64x64xf32>"
            } else {
                "tensor<64xf32>"
            }
        };
        format!(
            "stablehlo.dot_general {lhs}, {rhs}, contracting_dims = [{lc}] x [{rc}] : ({}, {}) -> tensor<64xf32>",
            ty(lhs),
            ty(rhs)
        )
    }

    /// The products of the one loop left, as `whole_loops` sees them.
    fn matvecs(f: &Function) -> Vec<super::Matvec> {
        let mut out = Vec::new();
        if let Some(b) = &f.body {
            b.walk(&mut |o: &Operation| {
                if o.op == Op::While {
                    out.extend(
                        super::in_one_kernel(f, o)
                            .map(|w| w.matvecs)
                            .unwrap_or_default(),
                    );
                }
            });
        }
        out
    }

    #[test]
    fn products_with_a_matrix_run_whole() {
        // A @ v reads rows as it is; v @ A and A.T @ v read the matrix transposed before the
        // loop (`matrices_by_rows`), by rows too.
        for (lhs, rhs, lc, rc) in [("%m", "%v", 1, 0), ("%v", "%m", 0, 0), ("%m", "%v", 0, 0)] {
            let f = prepared(&matvec_loop(&dot(lhs, rhs, lc, rc)));
            let found = matvecs(&f);
            assert_eq!(found.len(), 1, "{lhs} {rhs}: {found:?}");
            assert_eq!(found[0].contracted, 1, "{lhs} {rhs}: {found:?}");
            let names: Vec<String> = f
                .body
                .iter()
                .flat_map(|b| b.ops.iter().map(|o| o.name()))
                .collect();
            let transposed = names.contains(&"stablehlo.transpose".to_string());
            assert_eq!(
                transposed,
                lc == 0 && lhs == "%m" || rhs == "%m" && rc == 0,
                "{names:?}"
            );
        }
        // With a norm after the product (power iteration): one workgroup computes both (no
        // serial form).
        let normed = format!(
            "{}\n    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %sq = stablehlo.multiply %d0, %d0 : tensor<64xf32>
    %s = stablehlo.reduce(%sq init: %z) applies stablehlo.add across dimensions = [0] : (tensor<64xf32>, tensor<f32>) -> tensor<f32>
    %sb = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<64xf32>
    %d = stablehlo.divide %d0, %sb : tensor<64xf32>",
            dot("%m", "%v", 1, 0)
        );
        let src = matvec_loop(&normed)
            .replace("%d = stablehlo.dot_general", "%d0 = stablehlo.dot_general");
        let f = prepared(&src);
        assert_eq!(matvecs(&f).len(), 1);
        let mut serial = None;
        if let Some(b) = &f.body {
            b.walk(&mut |o: &Operation| {
                if o.op == Op::While {
                    serial = super::in_one_kernel(&f, o).map(|w| w.serial);
                }
            });
        }
        assert_eq!(serial, Some(false));
        // The state times itself (no matrix from outside) does not.
        let own = "stablehlo.multiply %v, %v : tensor<64xf32>\n    %q = stablehlo.broadcast_in_dim %v, dims = [0] : (tensor<64xf32>) -> tensor<64x64xf32>\n    %d2 = stablehlo.dot_general %q, %v, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64xf32>";
        let f = prepared(&matvec_loop(own).replace("stablehlo.tanh %d", "stablehlo.tanh %d2"));
        assert!(loops(&f).iter().all(|l| !l.0), "{:?}", loops(&f));
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

#[cfg(test)]
mod each_tests {
    use crate::ir::{Function, Op, Operation};

    /// Each loop left after the passes: `(serial, each)` where it runs whole in one kernel.
    fn whole(src: &str) -> Vec<Option<(bool, bool)>> {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f: Function = crate::passes::prepare(&m, "main").expect("prepare");
        let mut found = Vec::new();
        if let Some(b) = &f.body {
            b.walk(&mut |o: &Operation| {
                if o.op == Op::While {
                    found.push(super::in_one_kernel(&f, o).map(|w| (w.serial, w.each.is_some())));
                }
            });
        }
        found
    }

    // Halves the elements above 1 while any is: the cond's predicate `any(v > 1)`, the body
    // NEXT (of %v and %big, `v > 1` recomputed as the batching of a while loop writes it).
    const HALVING: &str = r#"
func.func @main(%x: tensor<1000xf32>) -> tensor<1000xf32> {
  %f = stablehlo.constant dense<false> : tensor<i1>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %r = stablehlo.while(%v = %x) : tensor<1000xf32>
   cond {
    %ob = stablehlo.broadcast_in_dim %one, dims = [] : (tensor<f32>) -> tensor<1000xf32>
    %g = stablehlo.compare GT, %v, %ob : (tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xi1>
    %a = stablehlo.reduce(%g init: %f) applies stablehlo.or across dimensions = [0] : (tensor<1000xi1>, tensor<i1>) -> tensor<i1>
    stablehlo.return %a : tensor<i1>
  } do {
    %h = stablehlo.constant dense<0.5> : tensor<f32>
    %hb = stablehlo.broadcast_in_dim %h, dims = [] : (tensor<f32>) -> tensor<1000xf32>
    %ob = stablehlo.broadcast_in_dim %one, dims = [] : (tensor<f32>) -> tensor<1000xf32>
    %big = stablehlo.compare CMP, %v, %ob : (tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xi1>
    %w = stablehlo.multiply %v, %hb : tensor<1000xf32>
    NEXT
    stablehlo.return %n : tensor<1000xf32>
  }
  return %r : tensor<1000xf32>
}"#;

    fn halving(cmp: &str, next: &str) -> String {
        HALVING.replace("CMP", cmp).replace("NEXT", next)
    }

    #[test]
    fn masked_loops_run_each_element_on_its_own() {
        let masked = "%n = stablehlo.select %big, %w, %v : (tensor<1000xi1>, tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>";
        assert_eq!(whole(&halving("GT", masked)), vec![Some((false, true))]);
        // The mask negated twice, and through an `and` with another predicate.
        let twice = "%nb = stablehlo.not %big : tensor<1000xi1>
    %n = stablehlo.select %nb, %v, %w : (tensor<1000xi1>, tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>";
        assert_eq!(whole(&halving("GT", twice)), vec![Some((false, true))]);
        let and = "%z = stablehlo.compare NE, %w, %hb : (tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xi1>
    %both = stablehlo.and %z, %big : tensor<1000xi1>
    %n = stablehlo.select %both, %w, %v : (tensor<1000xi1>, tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>";
        assert_eq!(whole(&halving("GT", and)), vec![Some((false, true))]);
    }

    #[test]
    fn long_predicates_are_proved_quickly() {
        // `P` at the end of a chain of 60 ops each using the one before twice (in the cond,
        // and recomputed in the body): followed once each, not 2^60 times.
        let chain = |pre: &str| -> String {
            let mut out = format!("%{pre}0 = stablehlo.multiply %v, %v : tensor<1000xf32>\n");
            for i in 1..60 {
                out += &format!(
                    "    %{pre}{i} = stablehlo.multiply %{pre}{j}, %{pre}{j} : tensor<1000xf32>\n",
                    j = i - 1
                );
            }
            out
        };
        let src = halving(
            "GT",
            "%n = stablehlo.select %big, %w, %v : (tensor<1000xi1>, tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>",
        )
        .replace(
            "%g = stablehlo.compare GT, %v, %ob",
            &format!("{}    %g = stablehlo.compare GT, %c59, %ob", chain("c")),
        )
        .replace(
            "%big = stablehlo.compare GT, %v, %ob",
            &format!("{}    %big = stablehlo.compare GT, %b59, %ob", chain("b")),
        );
        assert_eq!(whole(&src), vec![Some((false, true))]);
    }

    #[test]
    fn loops_that_change_stopped_elements_do_not() {
        // Halving every element while any is above 1 (elements at or below 1 still change),
        // and a mask that is not the predicate (`>=`: an element at 1 still changes): 1000
        // elements, too many for one invocation, so the loops run from the host.
        let all = "%n = stablehlo.multiply %v, %hb : tensor<1000xf32>";
        assert_eq!(whole(&halving("GT", all)).iter().flatten().count(), 0);
        let masked = "%n = stablehlo.select %big, %w, %v : (tensor<1000xi1>, tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>";
        assert_eq!(whole(&halving("GE", masked)).iter().flatten().count(), 0);
    }

    // A series masked by an `enabled` state, with an iteration bound on a scalar counter (the
    // form of jax's `gammainc` and `betainc` loops): divides by the counter until below 1.
    const SERIES: &str = r#"
func.func @main(%x: tensor<1000xf32>) -> RESULT_TYPE {
  %t = stablehlo.constant dense<true> : tensor<i1>
  %f = stablehlo.constant dense<false> : tensor<i1>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %on0 = stablehlo.broadcast_in_dim %t, dims = [] : (tensor<i1>) -> tensor<1000xi1>
  %r:3 = stablehlo.while(%on = %on0, %k = %z, %v = %x) : tensor<1000xi1>, tensor<f32>, tensor<1000xf32>
   cond {
    %lim = stablehlo.constant dense<50.0> : tensor<f32>
    %c = stablehlo.compare LT, %k, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
    PRED
    %a = stablehlo.reduce(%p init: %f) applies stablehlo.or across dimensions = [0] : (tensor<1000xi1>, tensor<i1>) -> tensor<i1>
    %b = stablehlo.and %c, %a : tensor<i1>
    stablehlo.return %b : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1.0> : tensor<f32>
    %ob = stablehlo.broadcast_in_dim %one, dims = [] : (tensor<f32>) -> tensor<1000xf32>
    %k2 = stablehlo.add %k, %one : tensor<f32>
    %kb = stablehlo.broadcast_in_dim %k2, dims = [] : (tensor<f32>) -> tensor<1000xf32>
    %w = stablehlo.divide %v, %kb : tensor<1000xf32>
    MASK
    %n = stablehlo.select %m, %w, %v : (tensor<1000xi1>, tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>
    %big = stablehlo.compare GT, %n, %ob : (tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xi1>
    %onb = stablehlo.and %on, %big : tensor<1000xi1>
    %on2 = stablehlo.select %m, %onb, %on : (tensor<1000xi1>, tensor<1000xi1>, tensor<1000xi1>) -> tensor<1000xi1>
    stablehlo.return %on2, %k2, %n : tensor<1000xi1>, tensor<f32>, tensor<1000xf32>
  }
  return RESULT
}"#;

    fn series(pred: &str, result: &str, result_type: &str) -> String {
        // The body recomputes the predicate as the cond does (`%p` as `%m`).
        let mask = pred
            .replace("%p =", "%m =")
            .replace("%kb", "%kc")
            .replace("%g", "%h");
        SERIES
            .replace("MASK", &mask)
            .replace("PRED", pred)
            .replace("RESULT_TYPE", result_type)
            .replace("RESULT", result)
    }

    #[test]
    fn masked_series_with_a_counter_run_each_element_on_its_own() {
        // The mask packs four to a word and the counter is a scalar state: each element runs
        // while `k < 50 && on`, carrying its own copy of the counter.
        let mask = "%p = stablehlo.reshape %on : (tensor<1000xi1>) -> tensor<1000xi1>";
        let f32s = "tensor<1000xf32>";
        assert_eq!(
            whole(&series(mask, "%r#2 : tensor<1000xf32>", f32s)),
            vec![Some((false, true))]
        );
        // The counter's result read after the loop: no invocation knows it (the longest
        // running element's count), so the loop runs from the host.
        let both = series(
            mask,
            "%r#2, %r#1 : tensor<1000xf32>, tensor<f32>",
            "(tensor<1000xf32>, tensor<f32>)",
        );
        assert_eq!(whole(&both), vec![None]);
        // A predicate reading the counter (an element stopped may start again), though the
        // body keeps the state where it fails.
        let reads =
            "%kb = stablehlo.broadcast_in_dim %k, dims = [] : (tensor<f32>) -> tensor<1000xf32>
    %g = stablehlo.compare GT, %v, %kb : (tensor<1000xf32>, tensor<1000xf32>) -> tensor<1000xi1>
    %p = stablehlo.and %on, %g : tensor<1000xi1>";
        assert_eq!(
            whole(&series(reads, "%r#2 : tensor<1000xf32>", f32s)),
            vec![None]
        );
    }
}
