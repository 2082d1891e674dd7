//! `sort` and `chlo.top_k` of long rows by a radix sort ([`super::radix`]) where the order is
//! that of one `u32` key per element: a comparator `compare LT` (ascending) or `GT`
//! (descending) of the same pure function of one operand on both sides, as JAX emits for
//! `jnp.sort`, `argsort` and `lax.sort` with one key (floats canonicalized, then compared in
//! total order), or `top_k` (descending in total order). The key passes read each element through
//! the permutation, so any number of operands ride along; the rows' passes follow, so every
//! row sorts on its own. A radix sort is stable, as the comparator's `is_stable` may ask.
//!
//! The bitonic network it replaces sorts n elements in O(n log² n) compare-exchanges, one
//! global launch per stage past the workgroup block: lavapipe sorted a million floats in
//! 1.7 s. Eight 4-bit passes take each element through three launches each.

use std::collections::{HashMap, HashSet};

use super::radix::{self, Keys};
use super::sort::{gather, row_element, PERM};
use crate::codegen::dtype::Compute;
use crate::codegen::expr::{ExprEmitter, Index};
use crate::codegen::loop_kernel::Target;
use crate::codegen::reduce_kernel::region_defs;
use crate::error::Result;
use crate::ir::attr::{ComparisonDirection, ComparisonType};
use crate::ir::{ElementType, Function, Op, Operation, TensorType, ValueId};

/// How elements of the sorted operand become ascending `u32` keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Floats in IEEE total order (`TOTALORDER`).
    Float,
    /// Signed integers.
    Signed,
    /// Unsigned integers.
    Unsigned,
    /// `i1`: false first.
    Bool,
}

/// A sort's order as a key per element.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct RadixKey {
    /// The operand whose elements the key is computed from.
    pub(super) operand: usize,
    /// The comparator's argument standing for that element and the value it compares
    /// (`None`: `top_k`, the element itself).
    arg: Option<(ValueId, ValueId)>,
    /// The element type the key's value has.
    kind: Kind,
    /// Larger keys first (`GT`, `top_k`).
    descending: bool,
}

/// Whether `a` computes from argument `pa` exactly what `b` computes from `pb`: the same pure
/// ops of the region (no regions, one result) with the same attributes and types, over
/// operands that mirror each other or are the same constants (the region's, or the
/// function's that passes hoisted out of it, in `outer`).
fn mirrored(
    f: &Function,
    (local, outer): (&HashMap<ValueId, &Operation>, &HashMap<ValueId, &Operation>),
    (a, b): (ValueId, ValueId),
    (pa, pb): (ValueId, ValueId),
    depth: usize,
) -> bool {
    if a == pa || b == pb {
        return a == pa && b == pb;
    }
    if depth > 64 || f.ty(a) != f.ty(b) {
        return false;
    }
    if a == b && !local.contains_key(&a) {
        return outer
            .get(&a)
            .is_some_and(|o| matches!(o.op, Op::Constant(_)));
    }
    let (Some(oa), Some(ob)) = (local.get(&a), local.get(&b)) else {
        return false;
    };
    oa.op == ob.op
        && oa.results.len() == 1
        && ob.results.len() == 1
        && oa.operands.len() == ob.operands.len()
        && crate::passes::cse::pure(oa)
        && oa
            .operands
            .iter()
            .zip(&ob.operands)
            .all(|(&x, &y)| mirrored(f, (local, outer), (x, y), (pa, pb), depth + 1))
}

/// The key `op` sorts by, where one serves (module doc).
pub(super) fn radix_key(
    f: &Function,
    outer: &HashMap<ValueId, &Operation>,
    op: &Operation,
) -> Option<RadixKey> {
    let element_kind = |v: ValueId| f.ty(v).as_tensor().map(|t| t.dtype);
    match &op.op {
        Op::TopK { largest: true, .. } => {
            let kind = match element_kind(*op.operands.first()?)? {
                ElementType::F32 | ElementType::F16 | ElementType::BF16 => Kind::Float,
                ElementType::I2
                | ElementType::I4
                | ElementType::I8
                | ElementType::I16
                | ElementType::I32 => Kind::Signed,
                ElementType::U2
                | ElementType::U4
                | ElementType::U8
                | ElementType::U16
                | ElementType::U32 => Kind::Unsigned,
                _ => return None,
            };
            Some(RadixKey {
                operand: 0,
                arg: None,
                kind,
                descending: true,
            })
        }
        Op::Sort { .. } => {
            let r = op.regions.first()?;
            let &[ret] = r.returned() else {
                return None;
            };
            if r.args.len() != 2 * op.operands.len() {
                return None;
            }
            let local: HashMap<ValueId, &Operation> = r
                .ops
                .iter()
                .flat_map(|o| o.results.iter().map(move |&v| (v, o)))
                .collect();
            let cmp = local.get(&ret)?;
            let Op::Compare {
                direction,
                compare_type,
            } = &cmp.op
            else {
                return None;
            };
            let descending = match direction {
                ComparisonDirection::Lt => false,
                ComparisonDirection::Gt => true,
                _ => return None,
            };
            let (&x, &y) = (cmp.operands.first()?, cmp.operands.get(1)?);
            let operand = (0..op.operands.len()).find(|&i| {
                let args = (r.args[2 * i], r.args[2 * i + 1]);
                mirrored(f, (&local, outer), (x, y), args, 0)
            })?;
            let kind = match (element_kind(x)?, compare_type) {
                (
                    ElementType::F32 | ElementType::F16 | ElementType::BF16,
                    Some(ComparisonType::TotalOrder),
                ) => Kind::Float,
                (
                    ElementType::I8 | ElementType::I16 | ElementType::I32,
                    None | Some(ComparisonType::NoType | ComparisonType::Signed),
                ) => Kind::Signed,
                (
                    ElementType::U8 | ElementType::U16 | ElementType::U32,
                    None | Some(ComparisonType::NoType | ComparisonType::Unsigned),
                ) => Kind::Unsigned,
                (
                    ElementType::Pred,
                    None | Some(ComparisonType::NoType | ComparisonType::Unsigned),
                ) => Kind::Bool,
                _ => return None,
            };
            Some(RadixKey {
                operand,
                arg: Some((r.args[2 * operand], x)),
                kind,
                descending,
            })
        }
        _ => None,
    }
}

/// Emits the `u32` key of `x`'s element at linear index `at` (a WGSL expression): ascending
/// in `rk`'s order, named after `tag`.
pub(super) fn element_key(
    em: &mut ExprEmitter,
    rk: &RadixKey,
    x: ValueId,
    at: String,
    tag: &str,
) -> Result<String> {
    let v = em.value(x, &Index::Linear(at))?;
    let xv = format!("x_{tag}");
    em.line(&format!("let {xv} = {v};"));
    let kv = match rk.arg {
        Some((arg, value)) => {
            em.define(arg, &Index::scalar(), &xv);
            em.value(value, &Index::scalar())?
        }
        None => xv,
    };
    let c = em.compute(em.ty(rk.arg.map_or(x, |a| a.1))?.dtype)?;
    let bits = match (rk.kind, c) {
        (Kind::Float, Compute::F32) => {
            em.needs.insert("wh_total_order_f32".into());
            format!("(bitcast<u32>(wh_total_order_f32({kv})) ^ 0x80000000u)")
        }
        (Kind::Signed, Compute::I32) => format!("(bitcast<u32>({kv}) ^ 0x80000000u)"),
        (Kind::Unsigned, Compute::U32) => kv.clone(),
        (Kind::Bool, Compute::Bool) => format!("select(0u, 1u, {kv})"),
        _ => {
            return Err(crate::error::Error::internal(format!(
                "radix sort key of {:?} computed as {c:?}",
                rk.kind
            )))
        }
    };
    Ok(if rk.descending {
        format!("(~{bits})")
    } else {
        bits
    })
}

/// Sorts of at least this many elements in all take the radix sort where a key serves (rows
/// too short for it rank in one kernel, before either: [`super::sort::BITONIC_FROM`]).
/// Lavapipe, f32 along rows, radix against bitonic (ms): 1 x 1000 2.5 / 1.2, 1 x 2048 2.4 /
/// 2.6, 1 x 4096 3.6 / 5.1, 8 x 1000 4.9 / 10.1, 128 x 1000 41 / 59, 4096 x 300 344 / 751,
/// 16 x 65536 257 / 1082, 1 x 2^20 203 / 1749. A radix sort costs 26 launches or more
/// whatever its length; the bitonic network's stages within a block run in one.
pub const RADIX_FROM: u64 = 4096;

/// The radix plan for `op` along `dim` (`n` elements, `inner` after it, `rows` rows), or
/// `None` where no key serves (module doc) or the kernels would not fit the adapter.
/// `WGPU_HLO_SORT=bitonic` keeps the bitonic network for every row; `=radix` takes the radix
/// sort at any length.
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (dim, n, inner, rows): (usize, usize, usize, u64),
    target: Target,
) -> Result<Option<super::Plan>> {
    let choice = std::env::var("WGPU_HLO_SORT").unwrap_or_default();
    if choice.trim() == "bitonic" || (rows * (n as u64) < RADIX_FROM && choice.trim() != "radix") {
        return Ok(None);
    }
    if matches!(op.op, Op::TopK { .. }) && inner == 1 {
        if let Some(plan) = super::top_k::plan(name, f, defs, op, (n, rows), target)? {
            return Ok(Some(plan));
        }
    }
    let Some(rk) = radix_key(f, defs, op) else {
        return Ok(None);
    };
    let count = rows * n as u64;
    let Some(&x) = op.operands.get(rk.operand) else {
        return Ok(None);
    };
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    if let Some(r) = op.regions.first() {
        region_defs(r, &mut all_defs, &mut body_vals);
    }
    let fused = |v: ValueId| body_vals.contains(&v);
    let key = |em: &mut ExprEmitter, s: &str| -> Result<String> {
        let at = row_element(&format!("({s} / {n}u)"), &format!("{s} % {n}u"), n, inner);
        element_key(em, &rk, x, at, s)
    };
    let perm = TensorType::new(vec![count as i64], ElementType::U32);
    let Some(sorted) = radix::sort(
        name,
        f,
        &all_defs,
        &fused,
        Keys::Rows {
            key: &key,
            row_len: n as u64,
            rows,
        },
        count,
        &perm,
        1,
        ("elements", &op.name()),
        target,
    )?
    else {
        return Ok(None);
    };
    debug_assert_eq!(PERM, super::temp(0));
    let gathered = gather(name, f, defs, op, (dim, n, inner), (n as u64, true), target)?;
    let mut kernels = sorted.kernels;
    let mut launches = sorted.launches;
    launches.push(super::Launch::new(kernels.len(), Vec::new()));
    kernels.push(gathered);
    let mut temps = vec![perm];
    temps.extend(sorted.temps);
    Ok(Some(super::Plan {
        kernels,
        temps,
        launches,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::text::parse_module;

    /// The key of the first `sort` or `top_k` in `src`'s main function.
    fn key_of(src: &str) -> Option<RadixKey> {
        let m = parse_module(src, "test").expect("the test module parses");
        let f = m.functions.first()?;
        let op = f
            .body
            .as_ref()?
            .ops
            .iter()
            .find(|o| matches!(o.op, Op::Sort { .. } | Op::TopK { .. }))?;
        let outer = f
            .body
            .as_ref()?
            .ops
            .iter()
            .flat_map(|o| o.results.iter().map(move |&v| (v, o)))
            .collect();
        radix_key(f, &outer, op)
    }

    #[test]
    fn jax_comparators_give_keys() {
        // jnp.argsort of floats: canonicalized operands compared in total order.
        let argsort = r#"
func.func @main(%x: tensor<8xf32>, %i: tensor<8xi32>) -> tensor<8xi32> {
  %0:2 = "stablehlo.sort"(%x, %i) <{dimension = 0 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.compare EQ, %a, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %2 = stablehlo.select %1, %z, %a : tensor<i1>, tensor<f32>
    %3 = stablehlo.compare EQ, %b, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %4 = stablehlo.select %3, %z, %b : tensor<i1>, tensor<f32>
    %5 = stablehlo.compare LT, %2, %4, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %5 : tensor<i1>
  }) : (tensor<8xf32>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xi32>)
  return %0#1 : tensor<8xi32>
}"#;
        let k = key_of(argsort).expect("a key");
        assert_eq!((k.operand, k.kind, k.descending), (0, Kind::Float, false));

        // The same with the constant hoisted out of the comparator, as the passes leave it.
        let hoisted = r#"
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.sort"(%x) <{dimension = 0 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.compare EQ, %a, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %2 = stablehlo.select %1, %z, %a : tensor<i1>, tensor<f32>
    %3 = stablehlo.compare EQ, %b, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %4 = stablehlo.select %3, %z, %b : tensor<i1>, tensor<f32>
    %5 = stablehlo.compare LT, %2, %4, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %5 : tensor<i1>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}"#;
        assert!(key_of(hoisted).is_some());
        // A value of the function that is not a constant: no key.
        let captured = hoisted
            .replace(
                "%z = stablehlo.constant dense<0.0> : tensor<f32>",
                "%z = stablehlo.negate %w : tensor<f32>",
            )
            .replace(
                "(%x: tensor<8xf32>)",
                "(%x: tensor<8xf32>, %w: tensor<f32>)",
            );
        assert_eq!(key_of(&captured), None);

        // Descending on the second operand, signed.
        let by_second = r#"
func.func @main(%x: tensor<8xf32>, %i: tensor<8xi32>) -> tensor<8xf32> {
  %0:2 = "stablehlo.sort"(%x, %i) <{dimension = 0 : i64}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
    %1 = stablehlo.compare GT, %c, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  }) : (tensor<8xf32>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xi32>)
  return %0#0 : tensor<8xf32>
}"#;
        let k = key_of(by_second).expect("a key");
        assert_eq!((k.operand, k.kind, k.descending), (1, Kind::Signed, true));
    }

    #[test]
    fn other_comparators_keep_the_network() {
        let wrap = |body: &str| {
            format!(
                r#"
func.func @main(%x: tensor<8xf32>, %i: tensor<8xi32>) -> tensor<8xf32> {{
  %0:2 = "stablehlo.sort"(%x, %i) <{{dimension = 0 : i64}}> ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
{body}
  }}) : (tensor<8xf32>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xi32>)
  return %0#0 : tensor<8xf32>
}}"#
            )
        };
        // Partial float order, a non-strict comparison, keys from different operands, a
        // function of the other side's second operand, two keys.
        for body in [
            "%1 = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n stablehlo.return %1 : tensor<i1>",
            "%1 = stablehlo.compare LE, %c, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n stablehlo.return %1 : tensor<i1>",
            "%1 = stablehlo.compare LT, %c, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n stablehlo.return %1 : tensor<i1>",
            "%1 = stablehlo.add %c, %d : tensor<i32>\n %2 = stablehlo.compare LT, %1, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n stablehlo.return %2 : tensor<i1>",
            "%1 = stablehlo.compare LT, %c, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n %2 = stablehlo.compare EQ, %c, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n %3 = stablehlo.compare LT, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>\n %4 = stablehlo.and %2, %3 : tensor<i1>\n %5 = stablehlo.or %1, %4 : tensor<i1>\n stablehlo.return %5 : tensor<i1>",
        ] {
            assert_eq!(key_of(&wrap(body)), None, "{body}");
        }
    }
}
