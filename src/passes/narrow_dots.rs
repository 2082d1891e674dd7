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
//!
//! Integer dots likewise run on 32-bit words: `dot(a: i8, b: i8) -> i32` (an int8 matmul with
//! `preferred_element_type=int32`) is `dot(convert(a) -> i32, convert(b) -> i32) -> i32`, and
//! a result narrower than 32 bits is the 32-bit dot converted down. That is the dot's own
//! definition (each operand converted to the accumulation type, products and sums wrapping), and
//! a sum wrapped at 32 bits then truncated equals one wrapped at the narrow width. The dot
//! emitters' integer kernels take i32 and u32 only; before, an int8 512² matmul ran one
//! invocation per result element (lavapipe: 419 ms against 19 ms for the i32 product).

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

/// Integer types of at most 32 bits (not `i1`).
fn word_int(t: ElementType) -> bool {
    t.is_int() && t.bit_width() <= 32
}

/// The type `op` (a dot or convolution) should compute in, when that is not its own: f32 for
/// narrow floats (each operand narrow or f32, at least one narrow, the result a float); for a
/// dot of integers of at most 32 bits, the result's type if it is 32 bits wide, else i32 or u32
/// by its signedness.
fn wide_type(op: &Operation, operands: &[TensorType], result: &TensorType) -> Option<ElementType> {
    let float = |t: ElementType| narrow_float(t) || t == ElementType::F32;
    if operands.iter().all(|t| float(t.dtype))
        && operands.iter().any(|t| narrow_float(t.dtype))
        && float(result.dtype)
    {
        return Some(ElementType::F32);
    }
    if !matches!(op.op, Op::DotGeneral { .. })
        || !operands.iter().all(|t| word_int(t.dtype))
        || !word_int(result.dtype)
    {
        return None;
    }
    let wide = match result.dtype {
        t if t.bit_width() == 32 => t,
        t if t.is_signed_int() => ElementType::I32,
        _ => ElementType::U32,
    };
    let all_wide = operands.iter().all(|t| t.dtype == wide) && result.dtype == wide;
    (!all_wide).then_some(wide)
}

/// The form of `op` computed in its wide type ([`wide_type`]) and the converts around it.
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
    let wide_ty = wide_type(op, &operands, &result)?;
    let mut out = Vec::new();
    let mut new_operands = Vec::new();
    for (&v, t) in op.operands.iter().zip(&operands) {
        if t.dtype == wide_ty {
            new_operands.push(v);
            continue;
        }
        let wide = f.new_value(Type::Tensor(t.with_dtype(wide_ty)));
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
    let (first, last) = if result.dtype == wide_ty {
        (op.results[0], None)
    } else {
        let wide = f.new_value(Type::Tensor(result.with_dtype(wide_ty)));
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
    fn word_sized_dots_stay() {
        let src = r#"
func.func @main(%a: tensor<4x8xi32>, %b: tensor<8x2xi32>, %c: tensor<4x8xf32>, %d: tensor<8x2xf32>) -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xi32>, tensor<8x2xi32>) -> tensor<4x2xi32>
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

    #[test]
    fn narrow_integer_dots_run_on_words() {
        let src = r#"
func.func @main(%a: tensor<4x8xi8>, %b: tensor<8x2xi8>, %c: tensor<4x8xui8>) -> (tensor<4x2xi32>, tensor<4x2xi8>, tensor<4x2xui16>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xi8>, tensor<8x2xi8>) -> tensor<4x2xi32>
  %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xi8>, tensor<8x2xi8>) -> tensor<4x2xi8>
  %2 = stablehlo.dot_general %c, %b, contracting_dims = [1] x [0] : (tensor<4x8xui8>, tensor<8x2xi8>) -> tensor<4x2xui16>
  return %0, %1, %2 : tensor<4x2xi32>, tensor<4x2xi8>, tensor<4x2xui16>
}"#;
        let m = crate::frontend::text::parse_module(src, "t").expect("parse");
        let f = crate::passes::prepare(&m, "main").expect("prepare");
        let types: Vec<String> = f
            .body
            .iter()
            .flat_map(|b| b.ops.iter())
            .filter(|o| o.name() == "stablehlo.dot_general")
            .map(|o| format!("{}", f.ty(o.results[0])))
            .collect();
        assert_eq!(
            types,
            ["tensor<4x2xi32>", "tensor<4x2xi32>", "tensor<4x2xui32>"]
        );
    }
}
