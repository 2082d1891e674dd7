//! Trip counts of counted loops (`lax.fori_loop`, `lax.scan`): a `while` whose condition
//! compares a loop-carried integer with a constant, whose body steps that integer by a
//! constant and whose initial value is a constant, runs a number of times known at compile
//! time — so it runs without reading the predicate back.
//!
//! A loop whose predicate is a conjunction of such tests whose counters start, or whose bounds
//! are, values computed before the loop ([`counter_tests`]: a `fori_loop` to a traced bound,
//! or diffrax's Runge-Kutta stages, which start at 0 or 1) has a trip count the runtime
//! computes once from those values, instead of reading the predicate after every iteration.

use std::collections::HashMap;

use crate::ir::attr::ComparisonDirection;
use crate::ir::{BinaryOp, ElementType, Op, Operation, Region, ValueId};

/// The most iterations a loop may be unrolled into one recording; longer loops fall back to
/// reading the predicate (they are not counted loops in practice).
const MAX_TRIP_COUNT: i128 = 1 << 31;

/// The value of `v`, a scalar integer constant.
pub fn scalar_int(v: ValueId, defs: &HashMap<ValueId, &Operation>) -> Option<i128> {
    match &defs.get(&v)?.op {
        Op::Constant(l) if l.len() == 1 && (l.ty.dtype.is_int()) => Some(l.get(0).as_i128()),
        _ => None,
    }
}

/// The number of iterations of `op` (a `while`), if it is a counted loop.
pub fn trip_count(op: &Operation, defs: &HashMap<ValueId, &Operation>) -> Option<u64> {
    if let Some(c) = counted(op, defs) {
        return Some(c.trips);
    }
    counter_tests(op, defs)?
        .iter()
        .map(|t| match (t.init, t.bound) {
            (Start::Const(i), Start::Const(b)) => t.trips(i, b),
            _ => None,
        })
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .min()
}

/// What makes a loop counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counted {
    /// Iterations.
    pub trips: u64,
    /// The loop-carried index of the counter.
    pub counter: usize,
    /// What the body adds to it each iteration.
    pub step: i128,
    /// Its initial value.
    pub init: i128,
}

/// The counter, its step and the trip count of `op` (a `while`), if it is a counted loop.
pub fn counted(op: &Operation, defs: &HashMap<ValueId, &Operation>) -> Option<Counted> {
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let pred = *cond.returned().first()?;
    let cmp = defs.get(&pred)?;
    let Op::Compare { direction, .. } = &cmp.op else {
        return None;
    };
    let (a, b) = (*cmp.operands.first()?, *cmp.operands.get(1)?);
    // Normalize to `counter DIR bound`.
    let (k, bound, dir) = if let Some(k) = cond.args.iter().position(|&x| x == a) {
        (k, scalar_int(b, defs)?, *direction)
    } else {
        let k = cond.args.iter().position(|&x| x == b)?;
        (k, scalar_int(a, defs)?, flipped(*direction))
    };
    let step = step_of(body, k, defs)?;
    let init = scalar_int(*op.operands.get(k)?, defs)?;
    let n = count(init, bound, step, dir)?;
    (0..=MAX_TRIP_COUNT).contains(&n).then_some(Counted {
        trips: n as u64,
        counter: k,
        step,
        init,
    })
}

/// A value a counter test reads: a constant, or the loop's initial value at an index (a
/// counter's start; a bound the body passes on unchanged).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Start {
    /// Known at compile time.
    Const(i128),
    /// The loop operand at this index.
    Init(usize),
}

/// One conjunct of a loop predicate: `counter DIR bound`, the counter stepped by `step` each
/// iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CounterTest {
    /// The loop-carried index of the counter.
    pub counter: usize,
    /// The counter's initial value.
    pub init: Start,
    /// What it is compared with.
    pub bound: Start,
    /// What the body adds to it.
    pub step: i128,
    /// The comparison, counter first.
    pub dir: ComparisonDirection,
}

impl CounterTest {
    /// Iterations for which the test holds from the first on, given the values of `Init`
    /// starts; `None` where it does not stop within [`MAX_TRIP_COUNT`].
    pub fn trips(&self, init: i128, bound: i128) -> Option<u64> {
        let n = count(init, bound, self.step, self.dir)?;
        (0..=MAX_TRIP_COUNT).contains(&n).then_some(n as u64)
    }
}

/// A constant `i1`.
fn const_bool(v: ValueId, defs: &HashMap<ValueId, &Operation>) -> Option<bool> {
    match &defs.get(&v)?.op {
        Op::Constant(l) if l.len() == 1 && l.ty.dtype == ElementType::Pred => {
            Some(l.get(0).as_i128() != 0)
        }
        _ => None,
    }
}

/// Whether `body` returns `op` of its two arguments (either order).
fn binary_body(body: &Region, op: BinaryOp) -> bool {
    let [o, ret] = body.ops.as_slice() else {
        return false;
    };
    let [a, b] = body.args.as_slice() else {
        return false;
    };
    o.op == Op::Binary(op)
        && ret.operands.as_slice() == o.results.as_slice()
        && (o.operands.as_slice() == [*a, *b] || o.operands.as_slice() == [*b, *a])
}

/// The comparisons whose conjunction `pred` is, looking through `and`, `x != false`,
/// `x == true` and a reduction of no dimensions by `or` from `false` (equinox's loops write
/// all three); `None` where it is anything else.
fn conjuncts(
    pred: ValueId,
    defs: &HashMap<ValueId, &Operation>,
    out: &mut Vec<ValueId>,
    depth: usize,
) -> Option<()> {
    if depth > 16 {
        return None;
    }
    let op = defs.get(&pred)?;
    match &op.op {
        Op::Binary(BinaryOp::And) => {
            for &o in &op.operands {
                conjuncts(o, defs, out, depth + 1)?;
            }
            Some(())
        }
        Op::Compare { direction, .. } => {
            let (a, b) = (*op.operands.first()?, *op.operands.get(1)?);
            let through = match (direction, const_bool(a, defs), const_bool(b, defs)) {
                (ComparisonDirection::Ne, _, Some(false))
                | (ComparisonDirection::Eq, _, Some(true)) => Some(a),
                (ComparisonDirection::Ne, Some(false), _)
                | (ComparisonDirection::Eq, Some(true), _) => Some(b),
                _ => None,
            };
            match through {
                Some(x) => conjuncts(x, defs, out, depth + 1),
                None => {
                    out.push(pred);
                    Some(())
                }
            }
        }
        Op::Reduce { dimensions }
            if dimensions.is_empty()
                && op.operands.len() == 2
                && const_bool(op.operands[1], defs) == Some(false)
                && op
                    .regions
                    .first()
                    .is_some_and(|r| binary_body(r, BinaryOp::Or)) =>
        {
            conjuncts(op.operands[0], defs, out, depth + 1)
        }
        _ => None,
    }
}

/// The counter test `cmp` (a comparison in `op`'s condition) makes, if it compares a
/// loop-carried integer that the body steps by a constant with a constant or a loop-carried
/// value the body passes on unchanged.
fn counter_test(
    op: &Operation,
    cmp: ValueId,
    defs: &HashMap<ValueId, &Operation>,
) -> Option<CounterTest> {
    let [cond, body] = &op.regions[..] else {
        return None;
    };
    let cmp_op = defs.get(&cmp)?;
    let Op::Compare { direction, .. } = &cmp_op.op else {
        return None;
    };
    let (a, b) = (*cmp_op.operands.first()?, *cmp_op.operands.get(1)?);
    let start = |k: usize| -> Option<Start> {
        let v = *op.operands.get(k)?;
        Some(scalar_int(v, defs).map_or(Start::Init(k), Start::Const))
    };
    // A bound: a constant, or a loop-carried value the body returns as it came.
    let bound_of = |v: ValueId| -> Option<Start> {
        if let Some(c) = scalar_int(v, defs) {
            return Some(Start::Const(c));
        }
        let j = cond.args.iter().position(|&x| x == v)?;
        (body.returned().get(j)? == body.args.get(j)?).then_some(())?;
        start(j)
    };
    let try_side = |c: ValueId, other: ValueId, dir: ComparisonDirection| -> Option<CounterTest> {
        let k = cond.args.iter().position(|&x| x == c)?;
        let step = step_of(body, k, defs)?;
        Some(CounterTest {
            counter: k,
            init: start(k)?,
            bound: bound_of(other)?,
            step,
            dir,
        })
    };
    try_side(a, b, *direction).or_else(|| try_side(b, a, flipped(*direction)))
}

/// The predicate of `op` (a `while`) as a conjunction of counter tests, if it is one: the loop
/// runs the fewest iterations any of them allows.
pub fn counter_tests(
    op: &Operation,
    defs: &HashMap<ValueId, &Operation>,
) -> Option<Vec<CounterTest>> {
    let cond = op.regions.first()?;
    let pred = *cond.returned().first()?;
    let mut cmps = Vec::new();
    conjuncts(pred, defs, &mut cmps, 0)?;
    if cmps.is_empty() {
        return None;
    }
    cmps.iter().map(|&c| counter_test(op, c, defs)).collect()
}

/// `d` with its operands swapped (`a < b` is `b > a`).
fn flipped(d: ComparisonDirection) -> ComparisonDirection {
    match d {
        ComparisonDirection::Lt => ComparisonDirection::Gt,
        ComparisonDirection::Le => ComparisonDirection::Ge,
        ComparisonDirection::Gt => ComparisonDirection::Lt,
        ComparisonDirection::Ge => ComparisonDirection::Le,
        d => d,
    }
}

/// What `body` adds to its loop-carried value `k` each iteration, if it returns that value plus
/// (or minus) a constant.
/// What the body adds to loop-carried integer `k` each iteration, when it adds a constant.
pub fn step_of(body: &Region, k: usize, defs: &HashMap<ValueId, &Operation>) -> Option<i128> {
    let next = *body.returned().get(k)?;
    let arg = *body.args.get(k)?;
    let step_op = defs.get(&next)?;
    match &step_op.op {
        Op::Binary(BinaryOp::Add) => {
            let (x, y) = (*step_op.operands.first()?, *step_op.operands.get(1)?);
            if x == arg {
                scalar_int(y, defs)
            } else if y == arg {
                scalar_int(x, defs)
            } else {
                None
            }
        }
        Op::Binary(BinaryOp::Subtract) if *step_op.operands.first()? == arg => {
            Some(-scalar_int(*step_op.operands.get(1)?, defs)?)
        }
        _ => None,
    }
}

fn count(init: i128, bound: i128, step: i128, dir: ComparisonDirection) -> Option<i128> {
    use ComparisonDirection::*;
    let holds = |i: i128| match dir {
        Lt => i < bound,
        Le => i <= bound,
        Gt => i > bound,
        Ge => i >= bound,
        Ne => i != bound,
        Eq => i == bound,
    };
    if !holds(init) {
        return Some(0);
    }
    if step == 0 {
        return None;
    }
    let n = match (dir, step > 0) {
        (Lt, true) => (bound - init + step - 1) / step,
        (Le, true) => (bound - init) / step + 1,
        (Gt, false) => (init - bound + (-step) - 1) / (-step),
        (Ge, false) => (init - bound) / (-step) + 1,
        (Ne, _) if (bound - init) % step == 0 && (bound - init) / step > 0 => (bound - init) / step,
        _ => return None,
    };
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ComparisonDirection::*;

    #[test]
    fn counts() {
        assert_eq!(count(0, 10, 1, Lt), Some(10));
        assert_eq!(count(0, 10, 3, Lt), Some(4));
        assert_eq!(count(0, 10, 1, Le), Some(11));
        assert_eq!(count(10, 0, -2, Gt), Some(5));
        assert_eq!(count(5, 5, 1, Lt), Some(0));
        assert_eq!(count(0, 10, -1, Lt), None);
        assert_eq!(count(0, 9, 2, Ne), None);
    }

    /// The `while` of `src`'s @main, its defs, canonicalized (before `guarded` rewrites
    /// such loops).
    fn tests_of(src: &str) -> (Option<u64>, Option<Vec<CounterTest>>) {
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let mut f = crate::passes::inline::inline_entry(&m, "main").expect("inline");
        crate::passes::canonicalize::canonicalize(&mut f);
        let body = f.body.as_ref().expect("body");
        let mut defs = HashMap::new();
        crate::passes::unroll::collect(body, &mut defs, &mut Vec::new());
        let w = body.ops.iter().find(|o| o.op == Op::While).expect("while");
        (trip_count(w, &defs), counter_tests(w, &defs))
    }

    // Two counters, as equinox's checkpointed loops test them (diffrax's Runge-Kutta
    // stages): `any(i < 7) & (j != false)`-style wrapping, i starting at START.
    const TWO: &str = r#"
func.func @main(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %start = START
  %r:3 = stablehlo.while(%i = %start, %j = %c0, %v = %x) : tensor<i32>, tensor<i32>, tensor<4xf32>
   cond {
    %n = stablehlo.constant dense<7> : tensor<i32>
    %f = stablehlo.constant dense<false> : tensor<i1>
    %a = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %a2 = stablehlo.compare NE, %a, %f : (tensor<i1>, tensor<i1>) -> tensor<i1>
    %a3 = stablehlo.reduce(%a2 init: %f) applies stablehlo.or across dimensions = [] : (tensor<i1>, tensor<i1>) -> tensor<i1>
    %b = stablehlo.compare LT, %j, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %b2 = stablehlo.compare NE, %b, %f : (tensor<i1>, tensor<i1>) -> tensor<i1>
    %p2 = stablehlo.and %a3, %b2 : tensor<i1>
    stablehlo.return %p2 : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %s = stablehlo.sine %v : tensor<4xf32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %j2 = stablehlo.add %j, %one : tensor<i32>
    stablehlo.return %i2, %j2, %s : tensor<i32>, tensor<i32>, tensor<4xf32>
  }
  return %r#2 : tensor<4xf32>
}"#;

    #[test]
    fn conjunctions_of_counter_tests() {
        // Constant starts: the fewer trips of the two, at compile time.
        let (n, tests) =
            tests_of(&TWO.replace("START", "stablehlo.constant dense<2> : tensor<i32>"));
        assert_eq!(n, Some(5));
        assert_eq!(tests.map(|t| t.len()), Some(2));
        // A start chosen at run time (0 or 1): computed when the loop starts.
        let (n, tests) = tests_of(&TWO.replace(
            "START",
            "stablehlo.select %p, %c0, %c1 : (tensor<i1>, tensor<i32>, tensor<i32>) -> tensor<i32>",
        ));
        assert_eq!(n, None);
        let tests = tests.expect("counter tests");
        assert_eq!(tests[0].init, Start::Init(0));
        assert_eq!(tests[0].bound, Start::Const(7));
        assert_eq!(tests[1].init, Start::Const(0));
        assert_eq!(tests[0].trips(1, 7), Some(6));
    }

    const TO_N: &str = r#"
func.func @main(%x: tensor<4xf32>, %n: tensor<i32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %c0, %m = %n, %v = %x) : tensor<i32>, tensor<i32>, tensor<4xf32>
   cond {
    %p = stablehlo.compare LT, %i, %m : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %s = stablehlo.sine %v : tensor<4xf32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i2, NEXT_M, %s : tensor<i32>, tensor<i32>, tensor<4xf32>
  }
  return %r#2 : tensor<4xf32>
}"#;

    #[test]
    fn bounds_passed_on_unchanged() {
        // `fori_loop(0, n)` with a traced n: the bound is the loop operand n passes through.
        let (n, tests) = tests_of(&TO_N.replace("NEXT_M", "%m"));
        assert_eq!(n, None);
        let tests = tests.expect("counter tests");
        assert_eq!(tests.len(), 1);
        assert_eq!(
            (tests[0].init, tests[0].bound),
            (Start::Const(0), Start::Init(1))
        );
        // A bound the body changes is no bound.
        let (_, tests) = tests_of(&TO_N.replace("NEXT_M", "%i2"));
        assert_eq!(tests, None);
    }
}
