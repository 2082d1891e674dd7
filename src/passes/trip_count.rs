//! Trip counts of counted loops (`lax.fori_loop`, `lax.scan`): a `while` whose condition
//! compares a loop-carried integer with a constant, whose body steps that integer by a
//! constant and whose initial value is a constant, runs a number of times known at compile
//! time — so it runs without reading the predicate back.

use std::collections::HashMap;

use crate::ir::attr::ComparisonDirection;
use crate::ir::{BinaryOp, Op, Operation, ValueId};

/// The most iterations a loop may be unrolled into one recording; longer loops fall back to
/// reading the predicate (they are not counted loops in practice).
const MAX_TRIP_COUNT: i128 = 1 << 31;

fn scalar_int(v: ValueId, defs: &HashMap<ValueId, &Operation>) -> Option<i128> {
    match &defs.get(&v)?.op {
        Op::Constant(l) if l.len() == 1 && (l.ty.dtype.is_int()) => Some(l.get(0).as_i128()),
        _ => None,
    }
}

/// The number of iterations of `op` (a `while`), if it is a counted loop.
pub fn trip_count(op: &Operation, defs: &HashMap<ValueId, &Operation>) -> Option<u64> {
    counted(op, defs).map(|c| c.trips)
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
        let flipped = match direction {
            ComparisonDirection::Lt => ComparisonDirection::Gt,
            ComparisonDirection::Le => ComparisonDirection::Ge,
            ComparisonDirection::Gt => ComparisonDirection::Lt,
            ComparisonDirection::Ge => ComparisonDirection::Le,
            d => *d,
        };
        (k, scalar_int(a, defs)?, flipped)
    };
    let next = *body.returned().get(k)?;
    let arg = *body.args.get(k)?;
    let step_op = defs.get(&next)?;
    let step = match &step_op.op {
        Op::Binary(BinaryOp::Add) => {
            let (x, y) = (*step_op.operands.first()?, *step_op.operands.get(1)?);
            if x == arg {
                scalar_int(y, defs)?
            } else if y == arg {
                scalar_int(x, defs)?
            } else {
                return None;
            }
        }
        Op::Binary(BinaryOp::Subtract) if *step_op.operands.first()? == arg => {
            -scalar_int(*step_op.operands.get(1)?, defs)?
        }
        _ => return None,
    };
    let init = scalar_int(*op.operands.get(k)?, defs)?;
    let n = count(init, bound, step, dir)?;
    (0..=MAX_TRIP_COUNT).contains(&n).then_some(Counted {
        trips: n as u64,
        counter: k,
        step,
        init,
    })
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
}
