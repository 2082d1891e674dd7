//! Inlining: every `func.call` (and every `composite`, through its decomposition) in the
//! entry function is replaced by the callee's body, recursively, so later stages see one
//! function.

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
        let mut copied = copy_ops(g, &body.ops, f, &mut map);
        let ret = match copied.pop() {
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
        let mut inlined = Region {
            args: Vec::new(),
            ops: copied,
        };
        stack.push(callee);
        inline_region(module, f, &mut inlined, stack)?;
        stack.pop();
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
}
