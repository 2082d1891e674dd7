//! A `dot_general` of f32 operands with no free dimension on either side (every dimension is a
//! batch or a contracting one: `vmap(jnp.dot)` of vectors, `einsum('ijk,ijk->ij')`, `x @ y`
//! of two vectors) becomes a `multiply` and a `reduce` adding the contracted dimensions:
//! `dot_general(a, b, batch [0] x [0], contracting [1] x [1])` is
//! `reduce(a * b, add, dimensions [1])`. Each output is one row's sum of products, which is a
//! reduction, not a matrix product: as a dot it was a batch of 1 x 1 products, and its
//! operands were materialized. As a reduction its operands fuse into the reduce kernel (a
//! squared distance written `einsum('ijk,ijk->ij', d, d)` with `d = x[:, None] - y[None]`
//! reads `x` and `y`, not the 1024 x 1024 x 64 difference), and short rows take the row
//! kernels.
//!
//! The sums are f32 sums of f32 products, as the dot's were; the reduce kernels add in
//! blocks, as XLA's cpu backend vectorizes the same reduction. Narrow floats reach here as
//! f32 between `convert`s (`narrow_dots`), so their products are exact as before.
//! `WGPU_HLO_VECTOR_DOTS=0` keeps these dots.

use crate::ir::{
    BinaryOp, ElementType, Function, Literal, Location, Op, Operation, Region, Scalar, Type,
    ValueId,
};

/// Applies the rewrite throughout `f`.
pub fn vector_dots_to_reductions(f: &mut Function) {
    if std::env::var("WGPU_HLO_VECTOR_DOTS").is_ok_and(|v| v.trim() == "0") {
        return;
    }
    super::rewrite::expand_ops(f, rewritten);
}

/// `perm` of `dims` (`None` unless `perm` is a permutation of them).
fn permuted(dims: &[i64], perm: &[i64]) -> Option<Vec<i64>> {
    let mut seen = vec![false; dims.len()];
    let mut out = Vec::with_capacity(perm.len());
    for &p in perm {
        let p = usize::try_from(p).ok()?;
        if *seen.get(p)? {
            return None;
        }
        seen[p] = true;
        out.push(dims[p]);
    }
    seen.iter().all(|&s| s).then_some(out)
}

/// `v` transposed by `perm` (no op when `perm` is the identity).
fn transposed(
    f: &mut Function,
    v: ValueId,
    perm: Vec<i64>,
    out: &mut Vec<Operation>,
    loc: &Location,
) -> Option<ValueId> {
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Some(v);
    }
    let t = f.ty(v).as_tensor()?.clone();
    let shape = permuted(&t.shape, &perm)?;
    let r = f.new_value(Type::tensor(shape, t.dtype));
    out.push(Operation::new(
        Op::Transpose { permutation: perm },
        vec![v],
        vec![r],
        loc.clone(),
    ));
    Some(r)
}

/// The multiply and reduce of `op`, when it is a dot of static f32 operands without free
/// dimensions and without a requested algorithm.
fn rewritten(f: &mut Function, op: &Operation) -> Option<Vec<Operation>> {
    let Op::DotGeneral {
        dimension_numbers: d,
        algorithm: None,
        ..
    } = &op.op
    else {
        return None;
    };
    let ([a, b], [r]) = (op.operands.as_slice(), op.results.as_slice()) else {
        return None;
    };
    let (a, b, r) = (*a, *b, *r);
    let (lt, rt, res) = (
        f.ty(a).as_tensor()?.clone(),
        f.ty(b).as_tensor()?.clone(),
        f.ty(r).as_tensor()?.clone(),
    );
    if ![&lt, &rt, &res]
        .iter()
        .all(|t| t.dtype == ElementType::F32 && t.is_static())
    {
        return None;
    }
    let lhs: Vec<i64> = d
        .lhs_batching_dimensions
        .iter()
        .chain(&d.lhs_contracting_dimensions)
        .copied()
        .collect();
    let rhs: Vec<i64> = d
        .rhs_batching_dimensions
        .iter()
        .chain(&d.rhs_contracting_dimensions)
        .copied()
        .collect();
    // No free dimension: each operand is its batch and contracting dimensions.
    let shape = permuted(&lt.shape, &lhs)?;
    if permuted(&rt.shape, &rhs)? != shape {
        return None;
    }
    let batch = d.lhs_batching_dimensions.len();
    if res.shape != shape[..batch] {
        return None;
    }
    let loc = &op.loc;
    let mut out = Vec::new();
    let ta = transposed(f, a, lhs, &mut out, loc)?;
    let tb = transposed(f, b, rhs, &mut out, loc)?;
    let contracted = shape.len() > batch;
    let product = if contracted {
        f.new_value(Type::tensor(shape.clone(), ElementType::F32))
    } else {
        r
    };
    out.push(Operation::new(
        Op::Binary(BinaryOp::Multiply),
        vec![ta, tb],
        vec![product],
        loc.clone(),
    ));
    if !contracted {
        return Some(out);
    }
    let scalar = || Type::tensor(Vec::new(), ElementType::F32);
    let zero = f.new_value(scalar());
    out.push(Operation::new(
        Op::Constant(Literal::scalar(ElementType::F32, Scalar::Float(0.0))),
        Vec::new(),
        vec![zero],
        loc.clone(),
    ));
    let (x, y, s) = (
        f.new_value(scalar()),
        f.new_value(scalar()),
        f.new_value(scalar()),
    );
    let body = Region {
        args: vec![x, y],
        ops: vec![
            Operation::new(Op::Binary(BinaryOp::Add), vec![x, y], vec![s], loc.clone()),
            Operation::new(Op::Return, vec![s], Vec::new(), loc.clone()),
        ],
    };
    let mut reduce = Operation::new(
        Op::Reduce {
            dimensions: (batch as i64..shape.len() as i64).collect(),
        },
        vec![product, zero],
        vec![r],
        loc.clone(),
    );
    reduce.regions = vec![body];
    out.push(reduce);
    Some(out)
}

#[cfg(test)]
mod tests {
    use crate::passes::prepared_op_names as ops;

    fn names(src: &str) -> Vec<String> {
        ops(src)
    }

    #[test]
    fn batched_vector_dots_become_reductions() {
        let src = r#"
func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>) -> tensor<64xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [1], contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64xf32>
  return %0 : tensor<64xf32>
}"#;
        assert_eq!(
            names(src),
            [
                "stablehlo.transpose",
                "stablehlo.multiply",
                "stablehlo.constant",
                "stablehlo.reduce",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn products_with_free_dimensions_and_other_types_stay() {
        let src = r#"
func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>, %c: tensor<8xi32>, %d: tensor<8xi32>) -> (tensor<4x2xf32>, tensor<i32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %1 = stablehlo.dot_general %c, %d, contracting_dims = [0] x [0] : (tensor<8xi32>, tensor<8xi32>) -> tensor<i32>
  return %0, %1 : tensor<4x2xf32>, tensor<i32>
}"#;
        assert_eq!(
            names(src),
            [
                "stablehlo.dot_general",
                "stablehlo.dot_general",
                "stablehlo.return"
            ]
        );
    }

    #[test]
    fn a_dot_without_contraction_is_a_product() {
        let src = r#"
func.func @main(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [] x [] : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %0 : tensor<16xf32>
}"#;
        assert_eq!(names(src), ["stablehlo.multiply", "stablehlo.return"]);
    }
}
