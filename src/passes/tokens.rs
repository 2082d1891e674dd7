//! Tokens become empty tensors. A `!stablehlo.token` orders side effects (host callbacks) by
//! data dependence and carries no data; the runtime already runs steps in dependence order,
//! so a token is represented as `tensor<0xi1>` — what JAX hands over as a runtime token
//! (`np.zeros(0, bool)`) — and `create_token` / `after_all` become empty constants. Loops and
//! branches then carry tokens like any other (empty) value.

use crate::ir::{ElementType, Function, Literal, Op, Region, TensorType, Type};

/// The type a token becomes.
pub fn token_tensor() -> TensorType {
    TensorType::new(vec![0], ElementType::Pred)
}

fn replace(t: &mut Type) {
    if *t == Type::Token {
        *t = Type::Tensor(token_tensor());
    }
}

/// Rewrites every token of `f` (signature, values, token ops) as an empty tensor.
pub fn lower_tokens(f: &mut Function) {
    if !f
        .values
        .iter()
        .chain(&f.arg_types)
        .chain(&f.result_types)
        .any(|t| *t == Type::Token)
    {
        return;
    }
    f.arg_types.iter_mut().for_each(replace);
    f.result_types.iter_mut().for_each(replace);
    f.values.iter_mut().for_each(replace);
    if let Some(body) = f.body.as_mut() {
        rewrite_region(body);
    }
}

fn rewrite_region(region: &mut Region) {
    for op in &mut region.ops {
        if matches!(op.op, Op::AfterAll | Op::CreateToken) {
            op.op = Op::Constant(Literal::zeros(token_tensor()));
            op.operands.clear();
        }
        for r in &mut op.regions {
            rewrite_region(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::text::parse_module;

    #[test]
    fn tokens_become_empty_tensors() {
        let src = r#"
func.func @main(%t: !stablehlo.token, %x: tensor<f32>) -> (!stablehlo.token, tensor<f32>) {
  %a = stablehlo.create_token : !stablehlo.token
  %b = stablehlo.after_all %t, %a : !stablehlo.token
  return %b, %x : !stablehlo.token, tensor<f32>
}
"#;
        let m = parse_module(src, "t").expect("parses");
        let mut f = m.functions[0].clone();
        lower_tokens(&mut f);
        let empty = Type::Tensor(token_tensor());
        assert_eq!(f.arg_types[0], empty);
        assert_eq!(f.result_types[0], empty);
        assert!(f.values.iter().all(|t| *t != Type::Token));
        let body = f.body.as_ref().expect("body");
        assert!(body.ops[..2]
            .iter()
            .all(|o| matches!(o.op, Op::Constant(_)) && o.operands.is_empty()));
        crate::ir::verify::verify_function(&f).expect("verifies");
    }
}
