//! Products of one loop-body value with several loop-invariant weights become one product.
//! A recurrent cell multiplies its state by a weight per gate (flax's `GRUCell`: `h @ W_hr`,
//! `h @ W_hz`, `h @ W_hn`, three kernels every step); with the weights concatenated once
//! before the loop, the step computes `h @ [W_hr W_hz W_hn]` in one kernel and reads each
//! gate's columns through a static slice, which fuses into the kernels reading it. One launch
//! a step instead of three (or of one merged launch and one more where the merged kernels'
//! code bound on CPU adapters splits them), a kernel three times as wide for a GPU to fill,
//! and the state read once.
//!
//! Applies to `dot_general`s at the top level of a `while` body with the same left operand
//! (a value of the body), no batch dimensions, one contracting dimension on each side, a
//! rank-2 right operand that is loop-invariant (defined outside the loop, or carried through
//! it unchanged), and the same dimension numbers, precision config, algorithm and element
//! types, in a counted loop whose iterations amortize the concatenation ([`COPY_PER_TRIP`]).
//! The concatenation runs before the loop; the merged product takes the first one's
//! place. Every element is the same sum of the same products as before (each output column
//! contracts the same row of the state with the same weight column); the kernel computing it
//! may differ, so the order of the sum may too. `WGPU_HLO_MERGE_DOTS=0` turns it off.

use std::collections::HashMap;

use super::hoist_dots::Invariant;
use super::trip_count::counted;
use super::unroll::collect;
use crate::ir::{Function, Op, Operation, Region, TensorType, Type, ValueId};

/// Most bytes of concatenated weights per merged product.
const MAX_BYTES: u64 = 64 << 20;

/// Most bytes of weights concatenated per iteration of the loop: the copy runs once a call
/// and saves launches every step, so a few steps of large weights (two 4096² products in a
/// loop of 10) would copy more than they save. A GRU of 128 features over 60 steps copies
/// 3.3 KB a step.
const COPY_PER_TRIP: u64 = 64 << 10;

/// Applies the rewrite throughout `f`.
pub fn merge_shared_lhs_dots(f: &mut Function) {
    if std::env::var("WGPU_HLO_MERGE_DOTS").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    let Some(mut body) = f.body.take() else {
        return;
    };
    // Each counted loop's trip count, by its first result.
    let mut trips = HashMap::new();
    {
        let mut defs = HashMap::new();
        let mut loops = Vec::new();
        collect(&body, &mut defs, &mut loops);
        for op in loops {
            if let (Some(c), Some(&first)) = (counted(op, &defs), op.results.first()) {
                trips.insert(first, c.trips);
            }
        }
    }
    rewrite_region(f, &mut body, &trips);
    f.body = Some(body);
}

fn rewrite_region(f: &mut Function, region: &mut Region, trips: &HashMap<ValueId, u64>) {
    let mut out = Vec::with_capacity(region.ops.len());
    for mut op in std::mem::take(&mut region.ops) {
        for sub in &mut op.regions {
            rewrite_region(f, sub, trips);
        }
        let n = op.results.first().and_then(|r| trips.get(r)).copied();
        if let (Op::While, 2, Some(n)) = (&op.op, op.regions.len(), n) {
            out.extend(merge_in_body(f, &mut op, n));
        }
        out.push(op);
    }
    region.ops = out;
}

/// What groups a product with others: its left operand and everything but the weight's
/// free extent.
#[derive(PartialEq)]
struct Key {
    lhs: ValueId,
    op: Op,
    weight_dtype: crate::ir::ElementType,
    weight_contracted: i64,
    result_dtype: crate::ir::ElementType,
}

/// A product of the body that may merge: its position, key, outer weight, weight's free
/// extent and result type.
struct Candidate {
    at: usize,
    key: Key,
    weight: ValueId,
    free: i64,
    result: ValueId,
    result_ty: TensorType,
}

fn candidate(f: &Function, inv: &Invariant, at: usize, op: &Operation) -> Option<Candidate> {
    let Op::DotGeneral {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return None;
    };
    let ([l, r], [res]) = (op.operands.as_slice(), op.results.as_slice()) else {
        return None;
    };
    if !dn.lhs_batching_dimensions.is_empty()
        || !dn.rhs_batching_dimensions.is_empty()
        || dn.lhs_contracting_dimensions.len() != 1
        || dn.rhs_contracting_dimensions.len() != 1
        || inv.outer(*l).is_some()
    {
        return None;
    }
    let weight = inv.outer(*r)?;
    let wt = f.ty(*r).as_tensor()?;
    let rt = f.ty(*res).as_tensor()?;
    let contracted = dn.rhs_contracting_dimensions[0];
    if wt.rank() != 2 || !wt.is_static() || !rt.is_static() || !(0..2).contains(&contracted) {
        return None;
    }
    let free = wt.shape[1 - contracted as usize];
    // The result's last dimension is the weight's free one (no batch dimensions).
    if rt.shape.last() != Some(&free) {
        return None;
    }
    Some(Candidate {
        at,
        key: Key {
            lhs: *l,
            op: op.op.clone(),
            weight_dtype: wt.dtype,
            weight_contracted: contracted,
            result_dtype: rt.dtype,
        },
        weight,
        free,
        result: *res,
        result_ty: rt.clone(),
    })
}

/// Merges the products of `op`'s body, a loop of `trips` iterations (see the module
/// comment); returns the concatenations to run before the loop.
fn merge_in_body(f: &mut Function, op: &mut Operation, trips: u64) -> Vec<Operation> {
    let inv = Invariant::of(op);
    let Some(body) = op.regions.get(1) else {
        return Vec::new();
    };
    let candidates: Vec<Candidate> = body
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| candidate(f, &inv, i, o))
        .collect();
    // Groups in order of their first product.
    let mut groups: Vec<Vec<&Candidate>> = Vec::new();
    for c in &candidates {
        match groups.iter_mut().find(|g| g[0].key == c.key) {
            Some(g) => g.push(c),
            None => groups.push(vec![c]),
        }
    }
    let mut before = Vec::new();
    // Per first product's position: the ops replacing it; later products' positions: dropped.
    let mut replace: HashMap<usize, Vec<Operation>> = HashMap::new();
    let mut dropped = std::collections::HashSet::new();
    for g in groups.into_iter().filter(|g| g.len() > 1) {
        let first = g[0];
        let Some(wt) = f.ty(first.weight).as_tensor().cloned() else {
            continue;
        };
        let axis = 1 - first.key.weight_contracted as usize;
        let total: i64 = g.iter().map(|c| c.free).sum();
        let mut shape = wt.shape.clone();
        shape[axis] = total;
        let whole_w = TensorType::new(shape, wt.dtype);
        let bytes = whole_w.byte_size() as u64;
        if bytes > MAX_BYTES || bytes > trips.saturating_mul(COPY_PER_TRIP) {
            continue;
        }
        let loc = body.ops[first.at].loc.clone();
        let w = f.new_value(Type::Tensor(whole_w));
        before.push(Operation::new(
            Op::Concatenate {
                dimension: axis as i64,
            },
            g.iter().map(|c| c.weight).collect(),
            vec![w],
            loc.clone(),
        ));
        let mut rshape = first.result_ty.shape.clone();
        let last = rshape.len() - 1;
        rshape[last] = total;
        let d = f.new_value(Type::tensor(rshape.clone(), first.result_ty.dtype));
        let mut ops = vec![Operation::new(
            first.key.op.clone(),
            vec![first.key.lhs, w],
            vec![d],
            loc.clone(),
        )];
        let mut offset = 0;
        for c in &g {
            let mut start = vec![0; rshape.len()];
            let mut limit = rshape.clone();
            start[last] = offset;
            limit[last] = offset + c.free;
            offset += c.free;
            ops.push(Operation::new(
                Op::Slice {
                    start,
                    limit,
                    strides: vec![1; rshape.len()],
                },
                vec![d],
                vec![c.result],
                loc.clone(),
            ));
            if c.at != first.at {
                dropped.insert(c.at);
            }
        }
        replace.insert(first.at, ops);
    }
    if replace.is_empty() {
        return before;
    }
    if let Some(body) = op.regions.get_mut(1) {
        let mut out = Vec::with_capacity(body.ops.len());
        for (i, o) in std::mem::take(&mut body.ops).into_iter().enumerate() {
            if let Some(ops) = replace.remove(&i) {
                out.extend(ops);
            } else if !dropped.contains(&i) {
                out.push(o);
            }
        }
        body.ops = out;
    }
    before
}
