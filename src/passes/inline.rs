//! Inlining: every `func.call` (and every `composite`, through its decomposition) in the
//! entry function is replaced by the callee's body, recursively, so later stages see one
//! function. A composite the compiler implements as one op is kept as that op instead
//! ([`native_composite`]).

use std::collections::HashMap;

use super::rewrite::{copy_ops, substitute};
use crate::error::{Error, Result};
use crate::ir::{Function, Module, Op, Operation, Region, ValueId};

/// Deepest call chain accepted before a program is taken to be recursive.
const MAX_DEPTH: usize = 64;

/// Returns the function `entry` of `module` with all calls inlined.
pub fn inline_entry(module: &Module, entry: &str) -> Result<Function> {
    let f = module
        .func(entry)
        .ok_or_else(|| Error::not_found(format!("no function @{entry} in the module")))?;
    let mut f = f.clone();
    let Some(mut body) = f.body.take() else {
        return Err(Error::invalid(format!(
            "@{entry} is a declaration without a body"
        )));
    };
    inline_region(module, &mut f, &mut body, &mut vec![entry.to_string()])?;
    f.body = Some(body);
    Ok(f)
}

/// The op a composite stands for where the compiler implements it whole: JAX's
/// `chlo.top_k` (attributes `k` and `is_stable`; one real operand of 8- to 32-bit integers or
/// floats up to 64 bits, results of its type and `i32` positions) as `chlo.top_k`, whose
/// order is the decomposition's (a stable sort by `compare GT, TOTALORDER`). Its kernels
/// take the k first without sorting whole rows.
fn native_composite(f: &Function, op: &Operation) -> Option<Op> {
    use crate::ir::ElementType as E;
    let Op::Composite {
        name, attributes, ..
    } = &op.op
    else {
        return None;
    };
    if name != "chlo.top_k" || op.operands.len() != 1 || op.results.len() != 2 {
        return None;
    }
    let mut k = None;
    for (attr, value) in attributes {
        match attr.as_str() {
            "k" => k = value.as_i64().ok(),
            "is_stable" => {}
            "largest" if value.as_bool().ok() == Some(true) => {}
            _ => return None,
        }
    }
    let k = k?;
    let x = f.ty(op.operands[0]).as_tensor()?;
    let values = f.ty(op.results[0]).as_tensor()?;
    let positions = f.ty(op.results[1]).as_tensor()?;
    let n = *x.shape.last()?;
    let mut want = x.shape.clone();
    *want.last_mut()? = k;
    let typed = matches!(
        x.dtype,
        E::I8 | E::I16 | E::I32 | E::U8 | E::U16 | E::U32 | E::F16 | E::BF16 | E::F32 | E::F64
    );
    (typed
        && (0..=n).contains(&k)
        && values.dtype == x.dtype
        && positions.dtype == E::I32
        && values.shape == want
        && positions.shape == want)
        .then_some(Op::TopK { k, largest: true })
}

fn inline_region(
    module: &Module,
    f: &mut Function,
    region: &mut Region,
    stack: &mut Vec<String>,
) -> Result<()> {
    let ops = std::mem::take(&mut region.ops);
    let mut out: Vec<Operation> = Vec::with_capacity(ops.len());
    let mut subst: HashMap<ValueId, ValueId> = HashMap::new();
    for mut op in ops {
        for r in &mut op.regions {
            inline_region(module, f, r, stack)?;
        }
        if let Some(native) = native_composite(f, &op) {
            op.op = native;
        }
        let callee = match &op.op {
            Op::Call { callee } => Some(callee.clone()),
            Op::Composite { decomposition, .. } => Some(decomposition.clone()),
            _ => None,
        };
        let Some(callee) = callee else {
            out.push(op);
            continue;
        };
        if stack.len() >= MAX_DEPTH || stack.contains(&callee) {
            return Err(Error::unimplemented(format!(
                "{}: recursive call to @{callee} ({})",
                op.loc,
                stack.join(" -> ")
            )));
        }
        let g = module.func(&callee).ok_or_else(|| {
            Error::invalid(format!("{}: call to unknown function @{callee}", op.loc))
        })?;
        let body = g.body.as_ref().ok_or_else(|| {
            Error::unimplemented(format!(
                "{}: call to @{callee}, which has no body (external function)",
                op.loc
            ))
        })?;
        if body.args.len() != op.operands.len() {
            return Err(Error::invalid(format!(
                "{}: call to @{callee} passes {} arguments, the function takes {}",
                op.loc,
                op.operands.len(),
                body.args.len()
            )));
        }
        let mut map: HashMap<ValueId, ValueId> = body
            .args
            .iter()
            .copied()
            .zip(op.operands.iter().copied())
            .collect();
        let copied = copy_ops(g, &body.ops, f, &mut map);
        // Inline the callee's own calls first, with its return still in place, so the
        // returned values get the same substitutions as their uses.
        let mut inlined = Region {
            args: Vec::new(),
            ops: copied,
        };
        stack.push(callee.clone());
        inline_region(module, f, &mut inlined, stack)?;
        stack.pop();
        let ret = match inlined.ops.pop() {
            Some(r) if r.op == Op::Return => r,
            _ => {
                return Err(Error::invalid(format!(
                    "@{callee}: body does not end in a return"
                )))
            }
        };
        if ret.operands.len() != op.results.len() {
            return Err(Error::invalid(format!(
                "{}: @{callee} returns {} values, the call expects {}",
                op.loc,
                ret.operands.len(),
                op.results.len()
            )));
        }
        out.extend(inlined.ops);
        for (r, v) in op.results.iter().zip(&ret.operands) {
            subst.insert(*r, *v);
        }
    }
    region.ops = out;
    substitute(region, &subst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{BinaryOp, ElementType, Type};

    fn scalar() -> Type {
        Type::tensor(vec![], ElementType::F32)
    }

    /// @main(x) = call @twice(x); @twice(y) = y + y
    fn module(recursive: bool) -> Module {
        let mut main = Function::new("main", vec![scalar()], vec![scalar()]);
        let x = main.body.as_ref().unwrap().args[0];
        let r = main.new_value(scalar());
        let body = main.body.as_mut().unwrap();
        body.ops.push(Operation::new(
            Op::Call {
                callee: "twice".into(),
            },
            vec![x],
            vec![r],
            Default::default(),
        ));
        body.ops.push(Operation::new(
            Op::Return,
            vec![r],
            vec![],
            Default::default(),
        ));
        let mut twice = Function::new("twice", vec![scalar()], vec![scalar()]);
        let y = twice.body.as_ref().unwrap().args[0];
        let s = twice.new_value(scalar());
        let op = if recursive {
            Op::Call {
                callee: "twice".into(),
            }
        } else {
            Op::Binary(BinaryOp::Add)
        };
        let operands = if recursive { vec![y] } else { vec![y, y] };
        let tb = twice.body.as_mut().unwrap();
        tb.ops
            .push(Operation::new(op, operands, vec![s], Default::default()));
        tb.ops.push(Operation::new(
            Op::Return,
            vec![s],
            vec![],
            Default::default(),
        ));
        Module {
            functions: vec![main, twice],
            ..Default::default()
        }
    }

    #[test]
    fn calls_are_replaced_by_bodies() {
        let f = inline_entry(&module(false), "main").unwrap();
        let body = f.body.unwrap();
        assert_eq!(body.ops.len(), 2);
        assert_eq!(body.ops[0].op, Op::Binary(BinaryOp::Add));
        assert_eq!(body.ops[0].operands, vec![body.args[0], body.args[0]]);
        assert_eq!(body.ops[1].operands, body.ops[0].results);
    }

    #[test]
    fn recursion_is_an_error() {
        let e = inline_entry(&module(true), "main").unwrap_err();
        assert!(e.message.contains("recursive"), "{e}");
    }

    /// JAX 0.12's `lax.top_k(x, k)` on `x` of type `ty`.
    fn top_k_module(ty: &str, k: i64) -> String {
        format!(
            r#"
func.func public @main(%x: tensor<3x50x{ty}>) -> (tensor<3x{k}x{ty}>, tensor<3x{k}xi32>) {{
  %v, %i = "stablehlo.composite"(%x) {{composite_attributes = {{is_stable = true, k = {k} : i64}}, decomposition = @chlo.top_k.impl, name = "chlo.top_k", version = 1 : i32}} : (tensor<3x50x{ty}>) -> (tensor<3x{k}x{ty}>, tensor<3x{k}xi32>)
  return %v, %i : tensor<3x{k}x{ty}>, tensor<3x{k}xi32>
}}
func.func private @chlo.top_k.impl(%x: tensor<3x50x{ty}>) -> (tensor<3x{k}x{ty}>, tensor<3x{k}xi32>) {{
  %i = stablehlo.iota dim = 1 : tensor<3x50xi32>
  %s:2 = "stablehlo.sort"(%x, %i) <{{dimension = 1 : i64, is_stable = true}}> ({{
  ^bb0(%a: tensor<{ty}>, %b: tensor<{ty}>, %c: tensor<i32>, %d: tensor<i32>):
    %0 = stablehlo.compare GT, %a, %b, TOTALORDER : (tensor<{ty}>, tensor<{ty}>) -> tensor<i1>
    stablehlo.return %0 : tensor<i1>
  }}) : (tensor<3x50x{ty}>, tensor<3x50xi32>) -> (tensor<3x50x{ty}>, tensor<3x50xi32>)
  %v = stablehlo.slice %s#0 [0:3, 0:{k}] : (tensor<3x50x{ty}>) -> tensor<3x{k}x{ty}>
  %j = stablehlo.slice %s#1 [0:3, 0:{k}] : (tensor<3x50xi32>) -> tensor<3x{k}xi32>
  return %v, %j : tensor<3x{k}x{ty}>, tensor<3x{k}xi32>
}}"#
        )
    }

    #[test]
    fn top_k_composites_stay_one_op() {
        let ops = |ty: &str| -> Vec<String> {
            let m = crate::frontend::text::parse_module(&top_k_module(ty, 7), "t")
                .expect("the test module parses");
            let f = inline_entry(&m, "main").expect("inlines");
            f.body
                .map(|b| b.ops.iter().map(Operation::name).collect())
                .unwrap_or_default()
        };
        assert_eq!(ops("f32"), ["chlo.top_k", "stablehlo.return"]);
        // Complex values have no top_k kernel: the decomposition is inlined.
        assert!(ops("complex<f32>").contains(&"stablehlo.sort".to_string()));
    }
}
