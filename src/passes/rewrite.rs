//! Small utilities passes share: value substitution, copying a region between functions, and
//! replacing ops by others throughout a function.

use std::collections::HashMap;

use crate::ir::{Function, Operation, Region, ValueId};

/// Replaces every op of `f` (nested regions first) for which `rewritten` gives a list of ops by
/// that list; the others stay.
pub fn expand_ops(
    f: &mut Function,
    rewritten: fn(&mut Function, &Operation) -> Option<Vec<Operation>>,
) {
    fn walk(
        f: &mut Function,
        region: &mut Region,
        rewritten: fn(&mut Function, &Operation) -> Option<Vec<Operation>>,
    ) {
        let ops = std::mem::take(&mut region.ops);
        for mut op in ops {
            for sub in &mut op.regions {
                walk(f, sub, rewritten);
            }
            match rewritten(f, &op) {
                Some(new) => region.ops.extend(new),
                None => region.ops.push(op),
            }
        }
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    walk(f, &mut body, rewritten);
    f.body = Some(body);
}

/// Picks an op of a region for `expand_chosen_ops` (the region's ops, the index of the op
/// defining each value there, the op), with what `Apply` needs to rewrite it.
pub type Choose<K> = fn(&Function, &[Operation], &HashMap<ValueId, usize>, &Operation) -> Option<K>;

/// Rewrites an op `Choose` picked into the ops that replace it.
pub type Apply<K> = fn(&mut Function, Operation, K) -> Vec<Operation>;

/// Replaces, in every region of `f` (nested regions first), each op that `choose` picks by the
/// ops `apply` makes of it; `choose` sees the op's region as it was (its ops, and the index of
/// the op defining each value there), so that it can look at an op's operands' producers.
pub fn expand_chosen_ops<K>(f: &mut Function, choose: Choose<K>, apply: Apply<K>) {
    fn walk<K>(f: &mut Function, region: &mut Region, choose: Choose<K>, apply: Apply<K>) {
        for op in &mut region.ops {
            for sub in &mut op.regions {
                walk(f, sub, choose, apply);
            }
        }
        let def = region.definitions();
        let mut chosen: HashMap<usize, K> = region
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| choose(f, &region.ops, &def, op).map(|k| (i, k)))
            .collect();
        if chosen.is_empty() {
            return;
        }
        for (i, op) in std::mem::take(&mut region.ops).into_iter().enumerate() {
            match chosen.remove(&i) {
                Some(k) => region.ops.extend(apply(f, op, k)),
                None => region.ops.push(op),
            }
        }
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    walk(f, &mut body, choose, apply);
    f.body = Some(body);
}

/// Replaces every use of a key of `subst` by its value, in `region` and all nested regions.
/// Chains (a → b, b → c) are followed.
pub fn substitute(region: &mut Region, subst: &HashMap<ValueId, ValueId>) {
    if subst.is_empty() {
        return;
    }
    let resolve = |mut v: ValueId| {
        let mut hops = 0;
        while let Some(&n) = subst.get(&v) {
            v = n;
            hops += 1;
            if hops > subst.len() {
                break;
            }
        }
        v
    };
    for op in &mut region.ops {
        for v in &mut op.operands {
            *v = resolve(*v);
        }
        for r in &mut op.regions {
            substitute(r, subst);
        }
    }
}

/// Copies ops of `from` (a region of function `src`) into function `dst`, giving every value
/// the copy defines a fresh id in `dst`. `map` must already map the values the ops read from
/// outside the copied ops (e.g. block arguments to call operands); it is extended with every
/// value defined by the copied ops.
pub fn copy_ops(
    src: &Function,
    ops: &[Operation],
    dst: &mut Function,
    map: &mut HashMap<ValueId, ValueId>,
) -> Vec<Operation> {
    copy_with(&mut Across { src, dst }, ops, map)
}

/// Copies `ops` of `f` within `f` itself, like [`copy_ops`]: every value the copies define is
/// fresh, `map` maps what they read from outside (and is extended with what they define).
pub fn copy_ops_within(
    f: &mut Function,
    ops: &[Operation],
    map: &mut HashMap<ValueId, ValueId>,
) -> Vec<Operation> {
    copy_with(&mut Within(f), ops, map)
}

/// Where copied values get their fresh ids: a new value of the same type as `v`.
trait Fresh {
    fn fresh(&mut self, v: ValueId) -> ValueId;
}

/// Copies from one function into another.
struct Across<'a> {
    src: &'a Function,
    dst: &'a mut Function,
}

/// Copies within one function.
struct Within<'a>(&'a mut Function);

fn type_of(f: &Function, v: ValueId) -> crate::ir::Type {
    f.values
        .get(v.index())
        .cloned()
        .unwrap_or(crate::ir::Type::Token)
}

impl Fresh for Across<'_> {
    fn fresh(&mut self, v: ValueId) -> ValueId {
        self.dst.new_value(type_of(self.src, v))
    }
}

impl Fresh for Within<'_> {
    fn fresh(&mut self, v: ValueId) -> ValueId {
        let ty = type_of(self.0, v);
        self.0.new_value(ty)
    }
}

fn copy_with(
    cx: &mut impl Fresh,
    ops: &[Operation],
    map: &mut HashMap<ValueId, ValueId>,
) -> Vec<Operation> {
    ops.iter().map(|op| copy_op(cx, op, map)).collect()
}

/// A fresh value for `v`, recorded in `map`.
fn fresh(cx: &mut impl Fresh, v: ValueId, map: &mut HashMap<ValueId, ValueId>) -> ValueId {
    let n = cx.fresh(v);
    map.insert(v, n);
    n
}

fn copy_op(cx: &mut impl Fresh, op: &Operation, map: &mut HashMap<ValueId, ValueId>) -> Operation {
    let operands = op
        .operands
        .iter()
        .map(|v| map.get(v).copied().unwrap_or(*v))
        .collect();
    let regions = op
        .regions
        .iter()
        .map(|r| {
            let args = r.args.iter().map(|&a| fresh(cx, a, map)).collect();
            Region {
                args,
                ops: copy_with(cx, &r.ops, map),
            }
        })
        .collect();
    let results = op.results.iter().map(|&r| fresh(cx, r, map)).collect();
    Operation {
        op: op.op.clone(),
        operands,
        results,
        regions,
        loc: op.loc.clone(),
    }
}
