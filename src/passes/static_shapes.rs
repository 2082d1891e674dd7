//! Dynamic-shape ops whose shapes are in fact known become their static forms: the result type
//! is static and the shape-carrying operands (`dynamic_pad`'s paddings, `dynamic_gather`'s slice
//! sizes, `dynamic_conv`'s padding) are constants. `get_dimension_size` of a static dimension
//! becomes a constant. What stays dynamic is left for the compiler to reject by name.

use std::collections::HashMap;

use crate::ir::{
    generic, Attr, ElementType, Function, Literal, Op, Operation, Region, Scalar, TensorType, Type,
    ValueId,
};

/// Rewrites `f`'s body in place.
pub fn make_static(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    let mut constants = HashMap::new();
    collect_constants(&body, &mut constants);
    rewrite_region(f, &mut body, &constants);
    f.body = Some(body);
}

fn collect_constants(r: &Region, out: &mut HashMap<ValueId, Literal>) {
    for op in &r.ops {
        if let (Op::Constant(l), [v]) = (&op.op, &op.results[..]) {
            out.insert(*v, l.clone());
        }
        for sub in &op.regions {
            collect_constants(sub, out);
        }
    }
}

fn rewrite_region(f: &Function, r: &mut Region, constants: &HashMap<ValueId, Literal>) {
    for op in &mut r.ops {
        for sub in &mut op.regions {
            rewrite_region(f, sub, constants);
        }
        if let Some((new_op, operands)) = static_form(f, op, constants) {
            op.op = new_op;
            op.operands = operands;
        }
    }
}

fn static_tensor(f: &Function, v: ValueId) -> Option<&TensorType> {
    f.ty(v).as_tensor().filter(|t| t.is_static())
}

/// The static op and its operands for `op`, when there is one.
fn static_form(
    f: &Function,
    op: &Operation,
    constants: &HashMap<ValueId, Literal>,
) -> Option<(Op, Vec<ValueId>)> {
    if let Op::GetDimensionSize { dimension } = op.op {
        let t = f.ty(*op.operands.first()?).as_tensor()?;
        let size = *t.shape.get(usize::try_from(dimension).ok()?)?;
        if size < 0 {
            return None;
        }
        let rt = f.ty(*op.results.first()?).as_tensor()?;
        return Some((
            Op::Constant(Literal::splat(rt.clone(), Scalar::Int(size as i128))),
            Vec::new(),
        ));
    }
    let Op::Other { name, attrs } = &op.op else {
        return None;
    };
    let [result] = op.results[..] else {
        return None;
    };
    static_tensor(f, result)?;
    let ints = |v: ValueId| constants.get(&v).map(Literal::to_i64s);
    let types: Vec<Type> = op.operands.iter().map(|&v| f.ty(v).clone()).collect();
    let build = |name: &str, attrs: &[(String, Attr)], n: usize| {
        generic::build_op(name, attrs, &types[..n.min(types.len())], &[]).ok()
    };
    let ops = &op.operands;
    match name.as_str() {
        "stablehlo.dynamic_reshape" => Some((Op::Reshape, vec![*ops.first()?])),
        "stablehlo.dynamic_broadcast_in_dim" => Some((
            build("stablehlo.broadcast_in_dim", attrs, 1)?,
            vec![*ops.first()?],
        )),
        "stablehlo.dynamic_iota" => Some((build("stablehlo.iota", attrs, 0)?, Vec::new())),
        "stablehlo.dynamic_pad" => {
            let [x, v, low, high, interior] = ops[..] else {
                return None;
            };
            Some((
                Op::Pad {
                    low: ints(low)?,
                    high: ints(high)?,
                    interior: ints(interior)?,
                },
                vec![x, v],
            ))
        }
        "stablehlo.dynamic_gather" => {
            let [x, idx, sizes] = ops[..] else {
                return None;
            };
            let mut a = attrs.clone();
            a.push((
                "slice_sizes".into(),
                Attr::DenseArray(ElementType::I64, ints(sizes)?),
            ));
            Some((build("stablehlo.gather", &a, 2)?, vec![x, idx]))
        }
        "stablehlo.dynamic_conv" => {
            let [lhs, rhs, padding] = ops[..] else {
                return None;
            };
            let mut a = attrs.clone();
            a.push((
                "padding".into(),
                Attr::Dense(constants.get(&padding)?.clone()),
            ));
            Some((build("stablehlo.convolution", &a, 2)?, vec![lhs, rhs]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::text::parse_module;
    use crate::ir::Op;

    #[test]
    fn dynamic_ops_with_known_shapes_become_static() {
        let m = parse_module(
            "func.func @main(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<4x5xf32>, tensor<i32>) {
               %s = stablehlo.constant dense<[3, 2]> : tensor<2xi64>
               %r = stablehlo.dynamic_reshape %x, %s : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<3x2xf32>
               %z = stablehlo.constant dense<0.0> : tensor<f32>
               %l = stablehlo.constant dense<[1, 1]> : tensor<2xi64>
               %h = stablehlo.constant dense<[1, 1]> : tensor<2xi64>
               %i = stablehlo.constant dense<[0, 0]> : tensor<2xi64>
               %p = stablehlo.dynamic_pad %x, %z, %l, %h, %i : (tensor<2x3xf32>, tensor<f32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<4x5xf32>
               %d = stablehlo.get_dimension_size %x, dim = 1 : (tensor<2x3xf32>) -> tensor<i32>
               return %r, %p, %d : tensor<3x2xf32>, tensor<4x5xf32>, tensor<i32>
             }",
            "test.mlir",
        )
        .unwrap();
        let mut f = m.functions[0].clone();
        super::make_static(&mut f);
        let ops: Vec<&Op> = f.body.as_ref().unwrap().ops.iter().map(|o| &o.op).collect();
        assert!(ops.iter().any(|o| matches!(o, Op::Reshape)));
        assert!(ops
            .iter()
            .any(|o| matches!(o, Op::Pad { low, .. } if low == &vec![1, 1])));
        assert!(ops
            .iter()
            .all(|o| !matches!(o, Op::Other { .. } | Op::GetDimensionSize { .. })));
    }
}
