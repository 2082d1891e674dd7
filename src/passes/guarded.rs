//! `while` loops over little data whose trip count is not known at compile time, run with
//! fewer launches and read-backs. Such a loop is launch-bound: on lavapipe a launch costs
//! 30-100 µs and a read-back of the predicate several times that, whatever the body computes.
//!
//! A **guarded step** is one iteration that may not happen: the condition and the body are
//! computed from the state, and each state value becomes `select(cond, next, state)`. Once the
//! condition is false the state stays as it was (bit for bit), so further guarded steps change
//! nothing: `n` guarded steps compute exactly what the loop computes whenever the loop runs at
//! most `n` iterations. Guarded steps have no control flow, so they fuse like any elementwise
//! ops: several steps are one kernel.
//!
//! Two rewrites, for loops whose predicate is a conjunction of counter tests
//! ([`counter_tests`]) and whose condition and body hold nothing but ops that fuse across
//! copies (elementwise, data movement, reductions: [`fuses_across_copies`]) over little data:
//!
//! - **At most [`MAX_STEPS`] iterations**, shown by the ranges of the values the tests start
//!   from (diffrax's Runge-Kutta stage loops: the stage counter starts at `select(p, 1, 0)` and
//!   runs to 7): the loop becomes that many guarded steps, with no loop and no read-back, so
//!   the loop around it may be unrolled in turn (`unroll`).
//! - **One counter test `i < n` (or `i > n` counting down) stepping by one, whose trip count
//!   is computed when the loop starts** (`fori_loop` to a traced bound): a loop whose body is `k` copies of the
//!   body runs while the next `k` iterations all would (`i < n - (k-1)·step`, the bound
//!   computed before the loop, and no loop where that would wrap round), then `k - 1` guarded
//!   steps run what is left. One read-back, as before, and about `k` times fewer launches.
//!
//! - **Counted at compile time, but no factor up to 8 divides the trip count** (a
//!   `fori_loop` of 97 steps), which the `unroll` pass leaves as written, with a body of
//!   elementwise ops and data movement only: a loop of `k` copies runs the whole trips, and
//!   the iterations left follow as plain copies of the body.
//!
//! Other loops whose trip count is known at compile time are the `unroll` pass's.
//! `WGPU_HLO_GUARDED=0` turns this pass off.

use std::collections::{HashMap, HashSet};

use super::rewrite::{copy_ops_within, substitute};
use super::trip_count::{counted, counter_tests, Counted, CounterTest, Start};
use super::unroll::{
    collect, constant, drop_index_wrap, fuses_across_copies, int_constants, unroll_body, work,
    MAX_FACTOR, MAX_OPS, MAX_WORK,
};
use crate::ir::attr::{ComparisonDirection, ComparisonType};
use crate::ir::{
    BinaryOp, ElementType, Function, Location, Op, Operation, Region, TensorType, Type, ValueId,
};

/// The most iterations a loop may have to become guarded steps without a loop.
pub const MAX_STEPS: u64 = 8;

/// The most iterations of a loop inside a loop that become copies of its body
/// ([`Plan::Copies`]): `jnp.searchsorted`'s search of a table of up to 65535 entries.
pub const MAX_COPIES: u64 = 16;

/// Iterations a trip of a split loop runs.
pub const FACTOR: u64 = 8;

/// Iterations a trip of a loop whose predicate is read back runs (some may be guarded steps
/// that change nothing: work wasted, where a read-back costs several launches).
pub const SPECULATE: u64 = 4;

/// What becomes of a loop.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plan {
    /// It runs at most this many iterations: as many guarded steps, no loop.
    Steps(u64),
    /// Its trip count is computed when it starts, from this test: a loop of `k` iterations a
    /// trip, then `k - 1` guarded steps.
    Split { k: u64, test: CounterTest },
    /// Its predicate is read back after every iteration: each iteration is followed by
    /// `k - 1` guarded steps, so the predicate is read back once every `k` iterations.
    Speculate { k: u64 },
    /// Counted at compile time, with no unroll factor that divides its trip count: a loop of
    /// `k` iterations a trip for the whole trips, then the iterations left as plain copies.
    Remainder { k: u64, c: Counted },
    /// Inside another loop, counted at compile time to this many iterations (at most
    /// [`MAX_COPIES`]): as many plain copies of the body, no loop, so that the loop around it
    /// has none inside and may run whole in one kernel (`whole_loops`). `jnp.interp` and
    /// `jnp.searchsorted` search by a loop of `log2(n)` steps looking the table up.
    Copies(u64),
}

/// Applies the rewrites throughout `f`.
pub fn guard_loops(f: &mut Function) {
    if std::env::var("WGPU_HLO_GUARDED").is_ok_and(|v| v == "0") {
        return;
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    let mut plans: HashMap<ValueId, Plan> = HashMap::new();
    // Scalar integer constants, wherever they are defined.
    let consts: HashMap<ValueId, i128>;
    {
        let mut defs: HashMap<ValueId, &Operation> = HashMap::new();
        let mut loops = Vec::new();
        collect(&body, &mut defs, &mut loops);
        consts = int_constants(&defs);
        // Loops inside another loop's condition or body.
        let mut nested: HashSet<ValueId> = HashSet::new();
        for op in &loops {
            for r in &op.regions {
                r.walk(&mut |o: &Operation| {
                    if o.op == Op::While {
                        nested.extend(o.results.first().copied());
                    }
                });
            }
        }
        for op in loops {
            let inner = op.results.first().is_some_and(|r| nested.contains(r));
            if let (Some(plan), Some(&first)) = (decide(f, op, &defs, inner), op.results.first()) {
                plans.insert(first, plan);
            }
        }
    }
    if !plans.is_empty() {
        rewrite_region(f, &mut body, &plans, &consts);
        super::dce::eliminate_dead_code(&mut body);
    }
    f.body = Some(body);
}

/// The smallest and largest values of an integer type.
fn type_range(d: ElementType) -> Option<(i128, i128)> {
    if !d.is_int() {
        return None;
    }
    let bits = d.bit_width();
    Some(if d.is_unsigned_int() {
        (0, (1i128 << bits) - 1)
    } else {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    })
}

/// The element type of a 0-d integer value.
fn scalar_int_type(f: &Function, v: ValueId) -> Option<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) if t.rank() == 0 && t.dtype.is_int() => Some(t.clone()),
        _ => None,
    }
}

/// Lower and upper bounds of a value, each where known.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Range {
    lo: Option<i128>,
    hi: Option<i128>,
}

impl Range {
    const UNKNOWN: Range = Range { lo: None, hi: None };

    fn point(c: i128) -> Range {
        Range {
            lo: Some(c),
            hi: Some(c),
        }
    }
}

/// What is known of the range of the 0-d integer (or `i1`) value `v` from the ops defining it:
/// constants, `select`, `clamp`, `maximum`, `minimum`, conversions of booleans and of integers
/// that stay in range, and adding a constant where nothing wraps round.
fn range(f: &Function, v: ValueId, defs: &HashMap<ValueId, &Operation>, depth: usize) -> Range {
    let Some(op) = defs.get(&v).filter(|_| depth < 16) else {
        return Range::UNKNOWN;
    };
    let Type::Tensor(t) = f.ty(v) else {
        return Range::UNKNOWN;
    };
    let own = if t.dtype == ElementType::Pred {
        Some((0, 1))
    } else {
        type_range(t.dtype)
    };
    let Some((tlo, thi)) = own.filter(|_| t.rank() == 0) else {
        return Range::UNKNOWN;
    };
    let of = |i: usize| {
        op.operands
            .get(i)
            .map_or(Range::UNKNOWN, |&o| range(f, o, defs, depth + 1))
    };
    let both = |a: Option<i128>, b: Option<i128>, g: fn(i128, i128) -> i128| Some(g(a?, b?));
    let r = match &op.op {
        Op::Constant(l) if l.len() == 1 => Range::point(l.get(0).as_i128()),
        Op::Select => {
            let (a, b) = (of(1), of(2));
            Range {
                lo: both(a.lo, b.lo, i128::min),
                hi: both(a.hi, b.hi, i128::max),
            }
        }
        // min(max(x, lo), hi): at most hi, at least the smaller of lo and hi.
        Op::Clamp => {
            let (lo, hi) = (of(0), of(2));
            Range {
                lo: both(lo.lo, hi.lo, i128::min),
                hi: hi.hi,
            }
        }
        Op::Binary(BinaryOp::Maximum) => {
            let (a, b) = (of(0), of(1));
            Range {
                lo: match (a.lo, b.lo) {
                    (Some(x), Some(y)) => Some(x.max(y)),
                    (x, y) => x.or(y),
                },
                hi: both(a.hi, b.hi, i128::max),
            }
        }
        Op::Binary(BinaryOp::Minimum) => {
            let (a, b) = (of(0), of(1));
            Range {
                lo: both(a.lo, b.lo, i128::min),
                hi: match (a.hi, b.hi) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    (x, y) => x.or(y),
                },
            }
        }
        Op::Convert => {
            let x = of(0);
            match (x.lo, x.hi) {
                (Some(a), Some(b)) if tlo <= a && b <= thi => x,
                _ => Range::UNKNOWN,
            }
        }
        Op::Binary(BinaryOp::Add) => {
            let (a, b) = (of(0), of(1));
            let sum = Range {
                lo: both(a.lo, b.lo, |x, y| x + y),
                hi: both(a.hi, b.hi, |x, y| x + y),
            };
            // Only where no sum can wrap round.
            match (sum.lo, sum.hi) {
                (Some(x), Some(y)) if tlo <= x && y <= thi => sum,
                _ => Range::UNKNOWN,
            }
        }
        _ => Range::UNKNOWN,
    };
    // Whatever is unknown is the type's own bound.
    Range {
        lo: Some(r.lo.map_or(tlo, |x| x.max(tlo))),
        hi: Some(r.hi.map_or(thi, |x| x.min(thi))),
    }
}

/// The most iterations for which test `t` of loop `op` can hold, from the ranges of the values
/// it starts from; `None` where that is not bounded or a counter could wrap round.
fn most_trips(
    f: &Function,
    op: &Operation,
    t: &CounterTest,
    defs: &HashMap<ValueId, &Operation>,
) -> Option<u64> {
    let ty = scalar_int_type(f, *op.operands.get(t.counter)?)?;
    let (tlo, thi) = type_range(ty.dtype)?;
    let range_of = |s: Start| -> Option<(i128, i128)> {
        let r = match s {
            Start::Const(c) => Range::point(c),
            Start::Init(k) => range(f, *op.operands.get(k)?, defs, 0),
        };
        Some((r.lo?.max(tlo), r.hi?.min(thi)))
    };
    let (il, ih) = range_of(t.init)?;
    let (bl, bh) = range_of(t.bound)?;
    if il > ih || bl > bh {
        return None;
    }
    use ComparisonDirection::*;
    // The count is monotonic in the start and the bound for ordered tests: the corners bound
    // it. Other tests only at single values.
    let ordered = matches!(t.dir, Lt | Le | Gt | Ge);
    if !ordered && (il != ih || bl != bh) {
        return None;
    }
    // A counter stepping past its type's end wraps round and may pass the test again.
    let edge = if t.step > 0 { bh + t.step } else { bl + t.step };
    if !(tlo..=thi).contains(&edge) {
        return None;
    }
    let mut most = 0;
    for init in [il, ih] {
        for bound in [bl, bh] {
            let n = t.trips(init, bound)?;
            let last = init + n as i128 * t.step;
            if !(tlo..=thi).contains(&last) {
                return None;
            }
            most = most.max(n);
        }
    }
    Some(most)
}

/// What becomes of `op` (a `while`), if anything.
fn decide(
    f: &Function,
    op: &Operation,
    defs: &HashMap<ValueId, &Operation>,
    inner: bool,
) -> Option<Plan> {
    if op.op != Op::While {
        return None;
    }
    // A loop that runs whole inside one kernel gains nothing from copies of its body, only
    // from having no loop at all (`Plan::Steps`: no launch, no read-back of its trip count).
    let whole = super::whole_loops::in_one_kernel(f, op).is_some();
    let known = counted(op, defs);
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    // Only tensors (a token could not be selected), and little of them: each guarded step
    // selects the whole state.
    let mut state = 0u64;
    for &v in &op.operands {
        let Type::Tensor(t) = f.ty(v) else {
            return None;
        };
        state = state.saturating_add(t.num_elements() as u64);
    }
    let mut simple = true;
    // Copies that fuse with each other, gathers included (a loop kernel computes a gather
    // inline at any index, `fusion::is_fusible`), with no reductions or updates.
    let mut copyable = true;
    let mut total = state;
    let mut ops = op.operands.len();
    for r in [cond, body] {
        r.walk(&mut |o: &Operation| {
            simple &= fuses_across_copies(&o.op);
            copyable &= (fuses_across_copies(&o.op) || matches!(o.op, Op::Gather { .. }))
                && !matches!(o.op, Op::Reduce { .. } | Op::DynamicUpdateSlice);
            total = total.saturating_add(work(f, o));
            ops += 1;
        });
    }
    if let Some(c) = known.filter(|_| inner && copyable) {
        if c.trips <= MAX_COPIES && (c.trips as usize).saturating_mul(ops) <= MAX_OPS {
            return Some(Plan::Copies(c.trips));
        }
    }
    if !simple || total > MAX_WORK || state > MAX_WORK {
        return None;
    }
    if let Some(c) = known {
        return remainder_plan(f, op, c, ops).filter(|_| !whole);
    }
    // The loop's copies and the guarded steps after it (Split), or an iteration and its
    // guarded steps (Speculate).
    let k = (2..=FACTOR)
        .rev()
        .find(|&k| (2 * k - 1) as usize * ops <= MAX_OPS)?;
    let Some(tests) = counter_tests(op, defs) else {
        let k = k.min(SPECULATE);
        return (!whole).then_some(Plan::Speculate { k });
    };
    if let Some(n) = tests
        .iter()
        .filter_map(|t| most_trips(f, op, t, defs))
        .min()
    {
        if n <= MAX_STEPS && (n as usize) * ops <= MAX_OPS {
            return Some(Plan::Steps(n));
        }
    }
    let [test] = tests.as_slice() else {
        return None;
    };
    if whole {
        return None;
    }
    use ComparisonDirection::*;
    // Stepping by one, the counter meets the bound before it could wrap round: when the
    // loop of k stops, fewer than k iterations are left.
    if !matches!((test.dir, test.step), (Lt, 1) | (Gt, -1)) {
        return None;
    }
    let ty = scalar_int_type(f, *op.operands.get(test.counter)?)?;
    let (tlo, thi) = type_range(ty.dtype)?;
    match test.bound {
        Start::Const(b) if !(tlo..=thi).contains(&(b - (k as i128 - 1) * test.step)) => None,
        Start::Init(j) if scalar_int_type(f, *op.operands.get(j)?)?.dtype != ty.dtype => None,
        _ => Some(Plan::Split { k, test: *test }),
    }
}

/// The plan for loop `op`, counted at compile time (`c`), of `ops` ops a step: a remainder
/// where no factor the `unroll` pass would take divides its trip count.
fn remainder_plan(f: &Function, op: &Operation, c: Counted, ops: usize) -> Option<Plan> {
    let body = op.regions.get(1)?;
    let body_ops = body.ops.len().saturating_sub(1).max(1);
    // What `unroll` does with it.
    let divides =
        (2..=MAX_FACTOR.min(c.trips)).any(|k| c.trips % k == 0 && k as usize * body_ops <= MAX_OPS);
    let ty = scalar_int_type(f, *body.args.get(c.counter)?)?;
    let (tlo, thi) = type_range(ty.dtype)?;
    // Bodies of elementwise ops and data movement only: reductions and stacked outputs
    // copied this way compiled for seconds (a 97-step scan stacking a `max` per step: 0.1 ->
    // 12.9 s) and ran no faster on lavapipe.
    let mut plain = true;
    body.walk(&mut |o: &Operation| {
        plain &= !matches!(o.op, Op::Reduce { .. } | Op::DynamicUpdateSlice);
    });
    if divides || c.trips < 3 || !plain {
        return None;
    }
    let k = (2..=MAX_FACTOR.min(c.trips))
        .rev()
        .find(|&k| (k + c.trips % k) as usize * ops <= MAX_OPS)?;
    // The counter's values up to the last trip's bound stay in its type.
    let reach = c.init + (c.trips / k * k) as i128 * c.step;
    ((tlo..=thi).contains(&reach) && (tlo..=thi).contains(&(c.init + c.trips as i128 * c.step)))
        .then_some(Plan::Remainder { k, c })
}

fn rewrite_region(
    f: &mut Function,
    region: &mut Region,
    plans: &HashMap<ValueId, Plan>,
    consts: &HashMap<ValueId, i128>,
) {
    let mut subst: HashMap<ValueId, ValueId> = HashMap::new();
    for mut op in std::mem::take(&mut region.ops) {
        for sub in &mut op.regions {
            rewrite_region(f, sub, plans, consts);
        }
        let plan = match op.results.first().and_then(|r| plans.get(r)) {
            Some(&p) if op.op == Op::While => p,
            _ => {
                region.ops.push(op);
                continue;
            }
        };
        let results = match plan {
            Plan::Steps(n) => steps(f, &op, op.operands.clone(), n, true, &mut region.ops),
            Plan::Copies(n) => steps(f, &op, op.operands.clone(), n, false, &mut region.ops),
            Plan::Split { k, test } => split(f, &op, k, test, &mut region.ops),
            Plan::Remainder { k, c } => remainder(f, &op, k, c, consts, &mut region.ops),
            Plan::Speculate { k } => match speculate(f, &op, k) {
                Some(w) => {
                    region.ops.push(w);
                    continue;
                }
                None => None,
            },
        };
        match results {
            Some(values) => {
                for (&r, v) in op.results.iter().zip(values) {
                    subst.insert(r, v);
                }
            }
            None => region.ops.push(op),
        }
    }
    substitute(region, &subst);
}

/// The ops of `r` before its `Return`, and what it returns.
fn split_return(r: &Region) -> Option<(&[Operation], &[ValueId])> {
    let (ret, ops) = r.ops.split_last()?;
    (ret.op == Op::Return).then_some((ops, &ret.operands[..]))
}

/// The ops of region `r` (but its return) copied with its arguments standing for `args`,
/// appended to `out`; what it returns, as copied.
fn inline(
    f: &mut Function,
    r: &Region,
    args: &[ValueId],
    out: &mut Vec<Operation>,
) -> Option<Vec<ValueId>> {
    let (ops, ret) = split_return(r)?;
    let mut map: HashMap<ValueId, ValueId> =
        r.args.iter().copied().zip(args.iter().copied()).collect();
    out.extend(copy_ops_within(f, ops, &mut map));
    Some(
        ret.iter()
            .map(|v| map.get(v).copied().unwrap_or(*v))
            .collect(),
    )
}

/// `n` iterations of loop `op` from `state`, appended to `out`: guarded steps, or plain
/// copies of the body where the loop is known to run them; the state after them.
fn steps(
    f: &mut Function,
    op: &Operation,
    mut state: Vec<ValueId>,
    n: u64,
    guarded: bool,
    out: &mut Vec<Operation>,
) -> Option<Vec<ValueId>> {
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let mut ops = Vec::new();
    for _ in 0..n {
        let p = match guarded {
            true => Some(*inline(f, cond, &state, &mut ops)?.first()?),
            false => None,
        };
        let next = inline(f, body, &state, &mut ops)?;
        if next.len() != state.len() {
            return None;
        }
        let Some(p) = p else {
            state = next;
            continue;
        };
        let mut selected = Vec::with_capacity(state.len());
        for (&s, r) in state.iter().zip(next) {
            if r == s {
                selected.push(s);
                continue;
            }
            let v = f.new_value(f.ty(s).clone());
            ops.push(Operation::new(
                Op::Select,
                vec![p, r, s],
                vec![v],
                op.loc.clone(),
            ));
            selected.push(v);
        }
        state = selected;
    }
    out.extend(ops);
    Some(state)
}

/// What a rewritten loop's counter is compared with.
enum Bound {
    /// A constant.
    Const(i128),
    /// The loop operand at this index.
    Arg(usize),
}

/// A loop over `operands` (`op`'s, then bounds it passes on unchanged) whose condition is
/// `counter dir bound` and whose body is `k` copies of `op`'s (`c`: its counter and step);
/// with `stack` (the constants of the function: `c`'s first and last values are the loop's
/// own), stacked updates of the copies join (`unroll::stacking`).
fn unrolled_loop(
    f: &mut Function,
    op: &Operation,
    operands: Vec<ValueId>,
    (dir, bound): (ComparisonDirection, Bound),
    (k, c): (u64, Counted),
    stack: Option<&HashMap<ValueId, i128>>,
) -> Option<Operation> {
    let body = op.regions.get(1)?;
    let ty = scalar_int_type(f, *operands.get(c.counter)?)?;
    let loc = op.loc.clone();
    let fresh = |f: &mut Function| -> Vec<ValueId> {
        operands
            .iter()
            .map(|&v| f.new_value(f.ty(v).clone()))
            .collect()
    };
    let cond_args = fresh(f);
    let mut cond_ops = Vec::new();
    let b = match bound {
        Bound::Const(v) => {
            let (v, d) = constant(f, &ty, v, &loc);
            cond_ops.push(d);
            v
        }
        Bound::Arg(j) => *cond_args.get(j)?,
    };
    let (p, d) = compare(f, dir, &ty, *cond_args.get(c.counter)?, b, &loc);
    cond_ops.push(d);
    cond_ops.push(Operation::new(Op::Return, vec![p], vec![], loc.clone()));
    // A copy of the body, passing the bounds on, then copied k times.
    let args = fresh(f);
    let mut ops = Vec::new();
    let mut returned = inline(f, body, &args, &mut ops)?;
    returned.extend(args.get(op.operands.len()..)?.iter().copied());
    ops.push(Operation::new(Op::Return, returned, vec![], loc.clone()));
    let mut new_body = Region { args, ops };
    if let Some(consts) = stack {
        drop_index_wrap(&mut new_body, c, consts);
    }
    unroll_body(f, &mut new_body, c, k, stack.is_some());
    let results = fresh(f);
    let mut w = Operation::new(Op::While, operands, results, loc);
    w.regions = vec![
        Region {
            args: cond_args,
            ops: cond_ops,
        },
        new_body,
    ];
    Some(w)
}

/// Loop `op`, counted (`c`), as a loop of `k` iterations a trip for the whole trips, then the
/// `c.trips % k` iterations left as plain copies; appended to `out`; the state after them.
fn remainder(
    f: &mut Function,
    op: &Operation,
    k: u64,
    c: Counted,
    consts: &HashMap<ValueId, i128>,
    out: &mut Vec<Operation>,
) -> Option<Vec<ValueId>> {
    // counter < init + trips·k·step (or > counting down): the whole trips.
    let bound = Bound::Const(c.init + (c.trips / k * k) as i128 * c.step);
    let dir = if c.step > 0 {
        ComparisonDirection::Lt
    } else {
        ComparisonDirection::Gt
    };
    let w = unrolled_loop(
        f,
        op,
        op.operands.clone(),
        (dir, bound),
        (k, c),
        Some(consts),
    )?;
    let mut rest = Vec::new();
    let state = steps(f, op, w.results.clone(), c.trips % k, false, &mut rest)?;
    out.push(w);
    out.extend(rest);
    Some(state)
}

/// Loop `op` with each iteration followed by `k - 1` guarded steps.
fn speculate(f: &mut Function, op: &Operation, k: u64) -> Option<Operation> {
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let (body_ops, body_ret) = split_return(body)?;
    let mut ops = body_ops.to_vec();
    let state = steps(f, op, body_ret.to_vec(), k - 1, true, &mut ops)?;
    ops.push(Operation::new(Op::Return, state, vec![], op.loc.clone()));
    let mut w = Operation::new(
        Op::While,
        op.operands.clone(),
        op.results.clone(),
        op.loc.clone(),
    );
    w.regions = vec![
        cond.clone(),
        Region {
            args: body.args.clone(),
            ops,
        },
    ];
    Some(w)
}

fn compare(
    f: &mut Function,
    dir: ComparisonDirection,
    ty: &TensorType,
    a: ValueId,
    b: ValueId,
    loc: &Location,
) -> (ValueId, Operation) {
    let p = f.new_value(Type::Tensor(TensorType::scalar(ElementType::Pred)));
    let op = Operation::new(
        Op::Compare {
            direction: dir,
            compare_type: Some(if ty.dtype.is_unsigned_int() {
                ComparisonType::Unsigned
            } else {
                ComparisonType::Signed
            }),
        },
        vec![a, b],
        vec![p],
        loc.clone(),
    );
    (p, op)
}

/// Loop `op` as a loop of `k` iterations a trip, run while all `k` would run, then `k - 1`
/// guarded steps; appended to `out`; the state after them.
fn split(
    f: &mut Function,
    op: &Operation,
    k: u64,
    test: CounterTest,
    out: &mut Vec<Operation>,
) -> Option<Vec<ValueId>> {
    let ty = scalar_int_type(f, *op.operands.get(test.counter)?)?;
    let (tlo, thi) = type_range(ty.dtype)?;
    let loc = op.loc.clone();
    // How far the counter moves in the k - 1 iterations after the one tested.
    let ahead = (k as i128 - 1) * test.step;
    let mut pre = Vec::new();
    let mut operands = op.operands.clone();
    // The new bound: a constant, or an operand computed before the loop.
    let bound = match test.bound {
        Start::Const(b) => Bound::Const(b - ahead),
        Start::Init(j) => {
            let n = *op.operands.get(j)?;
            // n - ahead, or, where that would wrap round, the value no counter passes the
            // test against (the loop then runs no trip: fewer than k iterations are left).
            let (never, edge, dir) = if test.step > 0 {
                (tlo, tlo + ahead, ComparisonDirection::Lt)
            } else {
                (thi, thi + ahead, ComparisonDirection::Gt)
            };
            let (c_ahead, d1) = constant(f, &ty, ahead, &loc);
            let (c_edge, d2) = constant(f, &ty, edge, &loc);
            let (c_never, d3) = constant(f, &ty, never, &loc);
            let moved = f.new_value(Type::Tensor(ty.clone()));
            let d4 = Operation::new(
                Op::Binary(BinaryOp::Subtract),
                vec![n, c_ahead],
                vec![moved],
                loc.clone(),
            );
            let (wraps, d5) = compare(f, dir, &ty, n, c_edge, &loc);
            let bounded = f.new_value(Type::Tensor(ty.clone()));
            let d6 = Operation::new(
                Op::Select,
                vec![wraps, c_never, moved],
                vec![bounded],
                loc.clone(),
            );
            pre.extend([d1, d2, d3, d4, d5, d6]);
            operands.push(bounded);
            Bound::Arg(operands.len() - 1)
        }
    };
    // Only the counter and its step matter without stacking.
    let c = Counted {
        trips: 0,
        counter: test.counter,
        step: test.step,
        init: 0,
    };
    let w = unrolled_loop(f, op, operands, (test.dir, bound), (k, c), None)?;
    let state = w.results.get(..op.operands.len())?.to_vec();
    let mut rest = Vec::new();
    let state = steps(f, op, state, k - 1, true, &mut rest)?;
    out.extend(pre);
    out.push(w);
    out.extend(rest);
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(src: &str) -> Function {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        crate::passes::prepare(&m, "main").expect("prepare")
    }

    fn whiles(f: &Function) -> usize {
        let mut n = 0;
        if let Some(b) = &f.body {
            b.walk(&mut |o: &Operation| n += usize::from(o.op == Op::While));
        }
        n
    }

    // A loop from START to BOUND by STEP over four floats. Its reverse reads other elements
    // than each its own: it does not run whole in one kernel (`whole_loops`).
    const LOOP: &str = r#"
func.func @main(%x: tensor<4xf32>, %p: tensor<i1>, %n: tensor<i32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %start = START
  %r:3 = stablehlo.while(%i = %start, %m = %n, %v = %x) : tensor<i32>, tensor<i32>, tensor<4xf32>
   cond {
    BOUND
    %t = stablehlo.compare DIR, %i, %b : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %t : tensor<i1>
  } do {
    %s = stablehlo.constant dense<STEP> : tensor<i32>
    %y0 = stablehlo.sine %v : tensor<4xf32>
    %y = stablehlo.reverse %y0, dims = [0] : tensor<4xf32>
    %i2 = stablehlo.add %i, %s : tensor<i32>
    stablehlo.return %i2, %m, %y : tensor<i32>, tensor<i32>, tensor<4xf32>
  }
  return %r#2 : tensor<4xf32>
}"#;

    fn lp(start: &str, bound: &str, dir: &str, step: i64) -> String {
        LOOP.replace("START", start)
            .replace("BOUND", bound)
            .replace("DIR", dir)
            .replace("STEP", &step.to_string())
    }

    const SEL: &str =
        "stablehlo.select %p, %c0, %c1 : (tensor<i1>, tensor<i32>, tensor<i32>) -> tensor<i32>";
    const SEVEN: &str = "%b = stablehlo.constant dense<7> : tensor<i32>";

    #[test]
    fn bounded_loops_become_guarded_steps() {
        // Starts at 0 or 1, runs to 7: at most 7 iterations, no loop left.
        let f = prepared(&lp(SEL, SEVEN, "LT", 1));
        assert_eq!(whiles(&f), 0);
        // Counting down from 0 or 1 past -7.
        let f = prepared(&lp(
            SEL,
            "%b = stablehlo.constant dense<-7> : tensor<i32>",
            "GT",
            -1,
        ));
        assert_eq!(whiles(&f), 0);
        // Starts at a clamp of an argument into [0, 1].
        let clamp =
            "stablehlo.clamp %c0, %n, %c1 : (tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<i32>";
        assert_eq!(whiles(&prepared(&lp(clamp, SEVEN, "LT", 1))), 0);
    }

    #[test]
    fn loops_that_may_run_longer_stay() {
        // 0 or 1 to 100: more than MAX_STEPS, and not one test of a traced bound: kept
        // (its trip count is computed when it starts; split into a loop of 8 and the rest).
        let src = lp(
            SEL,
            "%b = stablehlo.constant dense<100> : tensor<i32>",
            "LT",
            1,
        );
        assert!(matches!(parse_one(&src), Some(Plan::Split { .. })));
        // A start from an argument: unbounded, computed when the loop starts.
        let m = parse_one(&lp("stablehlo.add %n, %c0 : tensor<i32>", SEVEN, "LT", 1));
        assert!(matches!(m, Some(Plan::Split { .. })));
        // A counter near the end of its type, stepping by 3, could wrap round and keep
        // running: neither guarded steps nor a split.
        let near = "%near = stablehlo.constant dense<2147483642> : tensor<i32>";
        let big = "stablehlo.select %p, %c0, %near : (tensor<i1>, tensor<i32>, tensor<i32>) -> tensor<i32>";
        let src = lp(
            big,
            "%b = stablehlo.constant dense<2147483647> : tensor<i32>",
            "LT",
            3,
        )
        .replace("%start = ", &format!("{near}\n  %start = "));
        assert_eq!(parse_one(&src), None);
    }

    /// The plan for the one `while` of `src` before any pass rewrites it.
    fn parse_one(src: &str) -> Option<Plan> {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let mut f = crate::passes::inline::inline_entry(&m, "main").expect("inline");
        crate::passes::canonicalize::canonicalize(&mut f);
        let body = f.body.as_ref().expect("body");
        let mut defs = HashMap::new();
        let mut loops = Vec::new();
        collect(body, &mut defs, &mut loops);
        let op = loops.first().expect("a while");
        decide(&f, op, &defs, false)
    }

    #[test]
    fn traced_bounds_split() {
        // fori_loop(0, n): a loop of FACTOR copies, and FACTOR - 1 guarded steps.
        let src = lp(
            "stablehlo.constant dense<0> : tensor<i32>",
            "%b = stablehlo.add %m, %m : tensor<i32>",
            "LT",
            1,
        )
        .replace("%i, %b", "%i, %m");
        assert!(matches!(
            parse_one(&src),
            Some(Plan::Split { k: FACTOR, .. })
        ));
        let f = prepared(&src);
        assert_eq!(whiles(&f), 1);
    }

    #[test]
    fn counted_loops_no_factor_divides_take_a_remainder() {
        let src = |n: i64| {
            lp(
                "stablehlo.constant dense<0> : tensor<i32>",
                &format!("%b = stablehlo.constant dense<{n}> : tensor<i32>"),
                "LT",
                1,
            )
        };
        // 37 iterations: 4 trips of 8, then 5 copies.
        assert!(matches!(
            parse_one(&src(37)),
            Some(Plan::Remainder {
                k: 8,
                c: Counted { trips: 37, .. }
            })
        ));
        // 40 = 5 x 8 is the unroll pass's.
        assert_eq!(parse_one(&src(40)), None);
        let f = prepared(&src(37));
        assert_eq!(whiles(&f), 1);
    }
}
