//! `dot_general` and `convolution` on float operands narrower than 32 bits (bf16, f16, the
//! 8-bit floats) become the same op on f32 operands with an f32 result, between `convert`s:
//! `dot(a: bf16, b: bf16) -> bf16` is `convert(dot(convert(a), convert(b)) -> f32) -> bf16`.
//!
//! The numbers are those of an f32 accumulation rounded once at the end, which is what XLA's
//! cpu and gpu backends compute for these types (a narrow float converts to f32 exactly, and
//! the product of two such values is exact in f32). The emitters of the fast dot and
//! convolution kernels (tiled, register-blocked, implicit GEMM) take f32 tensors only, so
//! before this pass a bf16 matmul ran in the naive one-thread-per-element loop kernel:
//! 256x512 @ 512x256 took 243 ms on lavapipe against 3 ms in f32. The converts are loop
//! kernels of their own (or fuse with their producers and consumers); a requested
//! `algorithm` is dropped, since its operand types no longer apply and f32 covers them.

use crate::ir::{ElementType, Function, Op, Operation, TensorType, Type, ValueId};

/// Applies the rewrite throughout `f`.
pub fn upcast_narrow_dots(f: &mut Function) {
    super::rewrite::expand_ops(f, rewritten);
}

/// Float types that convert to f32 exactly and whose products are exact in f32.
fn narrow_float(t: ElementType) -> bool {
    t.is_float() && t.bit_width() < 32 && t != ElementType::TF32
}

fn tensor(f: &Function, v: ValueId) -> Option<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) => Some(t.clone()),
        _ => None,
    }
}

/// The f32 form of `op` and the converts around it, when `op` is a dot or convolution on
/// narrow floats (each operand narrow or f32, at least one narrow, the result a float).
fn rewritten(f: &mut Function, op: &Operation) -> Option<Vec<Operation>> {
    if !matches!(op.op, Op::DotGeneral { .. } | Op::Convolution(_))
        || op.operands.len() != 2
        || op.results.len() != 1
    {
        return None;
    }
    let operands: Vec<TensorType> = op
        .operands
        .iter()
        .map(|&v| tensor(f, v))
        .collect::<Option<_>>()?;
    let result = tensor(f, op.results[0])?;
    let float = |t: ElementType| narrow_float(t) || t == ElementType::F32;
    if !operands.iter().all(|t| float(t.dtype))
        || !operands.iter().any(|t| narrow_float(t.dtype))
        || !float(result.dtype)
    {
        return None;
    }
    let mut out = Vec::new();
    let mut new_operands = Vec::new();
    for (&v, t) in op.operands.iter().zip(&operands) {
        if t.dtype == ElementType::F32 {
            new_operands.push(v);
            continue;
        }
        let wide = f.new_value(Type::Tensor(t.with_dtype(ElementType::F32)));
        out.push(Operation::new(
            Op::Convert,
            vec![v],
            vec![wide],
            op.loc.clone(),
        ));
        new_operands.push(wide);
    }
    let mut new_op = op.op.clone();
    if let Op::DotGeneral { algorithm, .. } = &mut new_op {
        *algorithm = None;
    }
    let (first, last) = if result.dtype == ElementType::F32 {
        (op.results[0], None)
    } else {
        let wide = f.new_value(Type::Tensor(result.with_dtype(ElementType::F32)));
        (wide, Some(op.results[0]))
    };
    out.push(Operation::new(
        new_op,
        new_operands,
        vec![first],
        op.loc.clone(),
    ));
    if let Some(r) = last {
        out.push(Operation::new(
            Op::Convert,
            vec![first],
            vec![r],
            op.loc.clone(),
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as ops;

    #[test]
    fn bf16_dot_runs_in_f32_between_converts() {
        let src = r#"
func.func @main(%a: tensor<4x8xbf16>, %b: tensor<8x2xbf16>) -> tensor<4x2xbf16> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xbf16>
  return %0 : tensor<4x2xbf16>
}"#;
        assert_eq!(
            ops(src),
            [
                "stablehlo.convert",
                "stablehlo.convert",
                "stablehlo.dot_general",
                "stablehlo.convert",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn f32_results_and_f32_operands_need_no_convert() {
        let src = r#"
func.func @main(%a: tensor<4x8xf16>, %b: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xf16>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}"#;
        assert_eq!(
            ops(src),
            [
                "stablehlo.convert",
                "stablehlo.dot_general",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn integer_and_f32_dots_stay() {
        let src = r#"
func.func @main(%a: tensor<4x8xi8>, %b: tensor<8x2xi8>, %c: tensor<4x8xf32>, %d: tensor<8x2xf32>) -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xi8>, tensor<8x2xi8>) -> tensor<4x2xi32>
  %1 = stablehlo.dot_general %c, %d, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return %0, %1 : tensor<4x2xi32>, tensor<4x2xf32>
}"#;
        assert_eq!(
            ops(src),
            [
                "stablehlo.dot_general",
                "stablehlo.dot_general",
                "stablehlo.return"
            ]
        );
    }
}
