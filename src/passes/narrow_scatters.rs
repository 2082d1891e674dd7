//! `scatter` into a tensor of a type narrower than 32 bits (bf16, f16, the 8-bit floats, 8-
//! and 16-bit integers; booleans when the scatter sets) whose update computation sets
//! (`return update`) or is one `add`, `multiply`, `maximum` or `minimum` of the current value
//! and the update becomes the same scatter on a 32-bit type (f32, i32, u32) between
//! `convert`s.
//!
//! The scatter kernels fold runs of equal indices in place only for 32-bit and wider results
//! (neighbouring 8- and 16-bit elements share a 32-bit word, so two invocations writing them
//! would race), so narrow scatters took the per-element kernel, which cannot split runs longer
//! than one invocation may loop: `jax.ops.segment_sum` of 100k bf16 values, or any bf16/i8
//! `segment_max` or `.at[].set` with more than 32768 updates, was refused with
//! RESOURCE_EXHAUSTED on lavapipe (an embedding gradient in bf16 over 64k tokens would be).
//!
//! Sets, maxima and minima give the same bits (narrow values convert to the wide type and
//! back exactly). Integer sums and products wrap the same way (the convert back keeps the low
//! bits, and arithmetic modulo 2^k commutes with that). Float sums and products would be
//! computed in f32 and rounded once, where cpu and the StableHLO interpreter round after every
//! update (closer to the exact result, but not the conformance files' bits: a 3x5x4 f16
//! scatter-add came out 16 ULP from its reference), so those widen only where the narrow
//! kernel cannot serve: more update windows than one invocation may loop over by default
//! ([`WIDE_SUMS_FROM`]). A bf16 `segment_sum` of 100k
//! values then lands within one bf16 rounding of the exact sums (cpu's sequential bf16 sums:
//! 12x further).

use crate::ir::{BinaryOp, ElementType, Function, Op, Operation, Region, TensorType, Type};

/// Float sums and products of more update windows than this widen: the default loop bound
/// (`target::DEFAULT_MAX_INVOCATION_ITERATIONS`, which `compile` checks this equals; passes
/// do not see the adapter). With `WGPU_HLO_MAX_LOOP` set lower, scatters between the two
/// are refused as before; set higher, the ones between widen where the narrow kernel would
/// have served too.
pub const WIDE_SUMS_FROM: u64 = 32768;

/// Applies the rewrite throughout `f`.
pub fn widen_narrow_scatters(f: &mut Function) {
    super::rewrite::expand_ops(f, rewritten);
}

/// The 32-bit type a narrow element type widens to.
fn wide(t: ElementType) -> Option<ElementType> {
    if t.bit_width() >= 32 || t == ElementType::TF32 {
        return None;
    }
    if t.is_float() {
        Some(ElementType::F32)
    } else if t.is_signed_int() {
        Some(ElementType::I32)
    } else if t.is_unsigned_int() || t == ElementType::Pred {
        Some(ElementType::U32)
    } else {
        None
    }
}

/// What a scatter's update computation does (`update_computation`; the scatter kernels
/// read it too).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Update {
    /// `return update`.
    Set,
    /// One binary op of the current value and the update (in the order given: whether the
    /// current value comes first).
    Binary(BinaryOp, bool),
}

/// What the update computation `region` (arguments: the current value, the update) does,
/// when it is one of the forms [`Update`] names.
pub fn update_computation(region: &Region) -> Option<Update> {
    let [a, u] = region.args.as_slice() else {
        return None;
    };
    match region.ops.as_slice() {
        [ret] if ret.op == Op::Return && ret.operands == [*u] => Some(Update::Set),
        [comb, ret] => {
            let Op::Binary(b) = comb.op else {
                return None;
            };
            let known = matches!(
                b,
                BinaryOp::Add | BinaryOp::Multiply | BinaryOp::Maximum | BinaryOp::Minimum
            );
            let first = if comb.operands == [*a, *u] {
                true
            } else if comb.operands == [*u, *a] {
                false
            } else {
                return None;
            };
            (known && ret.op == Op::Return && ret.operands == comb.results)
                .then_some(Update::Binary(b, first))
        }
        _ => None,
    }
}

fn tensor(f: &Function, v: crate::ir::ValueId) -> Option<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) => Some(t.clone()),
        _ => None,
    }
}

/// The widened scatter and its converts, when `op` is a narrow scatter this pass takes.
fn rewritten(f: &mut Function, op: &Operation) -> Option<Vec<Operation>> {
    if !matches!(op.op, Op::Scatter { .. }) {
        return None;
    }
    let ([x, indices, updates], [result], [body]) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.as_slice(),
    ) else {
        return None;
    };
    let (xt, ut, rt) = (tensor(f, *x)?, tensor(f, *updates)?, tensor(f, *result)?);
    let w = wide(xt.dtype)?;
    let update = update_computation(body)?;
    if ut.dtype != xt.dtype
        || rt.dtype != xt.dtype
        || (xt.dtype == ElementType::Pred && update != Update::Set)
    {
        return None;
    }
    if let (true, Update::Binary(BinaryOp::Add | BinaryOp::Multiply, _)) =
        (xt.dtype.is_float(), update)
    {
        let Op::Scatter {
            dimension_numbers: dn,
            ..
        } = &op.op
        else {
            return None;
        };
        let windows: usize = ut
            .dims()
            .iter()
            .enumerate()
            .filter(|(d, _)| !dn.update_window_dims.contains(&(*d as i64)))
            .map(|(_, &n)| n)
            .product();
        if (windows as u64) <= WIDE_SUMS_FROM {
            return None;
        }
    }
    let loc = op.loc.clone();
    let mut out = Vec::new();
    let widen = |f: &mut Function, v, t: &TensorType, out: &mut Vec<Operation>| {
        let wv = f.new_value(Type::Tensor(t.with_dtype(w)));
        out.push(Operation::new(Op::Convert, vec![v], vec![wv], loc.clone()));
        wv
    };
    let xw = widen(f, *x, &xt, &mut out);
    let uw = widen(f, *updates, &ut, &mut out);
    let scalar = || Type::Tensor(TensorType::new(Vec::new(), w));
    let (a, u) = (f.new_value(scalar()), f.new_value(scalar()));
    let ops = match update {
        Update::Set => vec![Operation::new(Op::Return, vec![u], Vec::new(), loc.clone())],
        Update::Binary(b, first) => {
            let c = f.new_value(scalar());
            let operands = if first { vec![a, u] } else { vec![u, a] };
            vec![
                Operation::new(Op::Binary(b), operands, vec![c], loc.clone()),
                Operation::new(Op::Return, vec![c], Vec::new(), loc.clone()),
            ]
        }
    };
    let rw = f.new_value(Type::Tensor(rt.with_dtype(w)));
    let mut scatter = Operation::new(op.op.clone(), vec![xw, *indices, uw], vec![rw], loc.clone());
    scatter.regions = vec![Region {
        args: vec![a, u],
        ops,
    }];
    out.push(scatter);
    out.push(Operation::new(Op::Convert, vec![rw], vec![*result], loc));
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as ops;

    fn scatter(ty: &str, body: &str) -> String {
        format!(
            r#"
func.func @main(%x: tensor<8x{ty}>, %i: tensor<3x1xi32>, %u: tensor<3x{ty}>) -> tensor<8x{ty}> {{
  %0 = "stablehlo.scatter"(%x, %i, %u) ({{
  ^bb0(%a: tensor<{ty}>, %b: tensor<{ty}>):
    {body}
  }}) {{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}} : (tensor<8x{ty}>, tensor<3x1xi32>, tensor<3x{ty}>) -> tensor<8x{ty}>
  return %0 : tensor<8x{ty}>
}}"#
        )
    }

    const WIDENED: [&str; 5] = [
        "stablehlo.convert",
        "stablehlo.convert",
        "stablehlo.scatter",
        "stablehlo.convert",
        "stablehlo.return",
    ];

    #[test]
    fn narrow_sums_maxima_and_sets_widen() {
        for ty in ["bf16", "f16", "i8", "ui16"] {
            let add = format!(
                "%s = stablehlo.add %a, %b : tensor<{ty}>\n    stablehlo.return %s : tensor<{ty}>"
            );
            // Few float sums keep their type (rounded after every update, as references are).
            let want: &[&str] = if ty.starts_with('f') || ty.starts_with('b') {
                &["stablehlo.scatter", "stablehlo.return"]
            } else {
                &WIDENED
            };
            assert_eq!(ops(&scatter(ty, &add)), want, "{ty} add");
            let max = format!("%s = stablehlo.maximum %b, %a : tensor<{ty}>\n    stablehlo.return %s : tensor<{ty}>");
            assert_eq!(ops(&scatter(ty, &max)), WIDENED, "{ty} max");
            let set = format!("stablehlo.return %b : tensor<{ty}>");
            assert_eq!(ops(&scatter(ty, &set)), WIDENED, "{ty} set");
        }
        assert_eq!(
            ops(&scatter("i1", "stablehlo.return %b : tensor<i1>")),
            WIDENED
        );
    }

    #[test]
    fn wide_types_and_other_computations_stay() {
        let kept = ["stablehlo.scatter", "stablehlo.return"];
        let add = "%s = stablehlo.add %a, %b : tensor<f32>\n    stablehlo.return %s : tensor<f32>";
        assert_eq!(ops(&scatter("f32", add)), kept);
        let sub =
            "%s = stablehlo.subtract %a, %b : tensor<bf16>\n    stablehlo.return %s : tensor<bf16>";
        assert_eq!(ops(&scatter("bf16", sub)), kept);
        let first = "stablehlo.return %a : tensor<bf16>";
        assert_eq!(ops(&scatter("bf16", first)), kept);
        let or = "%s = stablehlo.or %a, %b : tensor<i1>\n    stablehlo.return %s : tensor<i1>";
        assert_eq!(ops(&scatter("i1", or)), kept);
    }
}
