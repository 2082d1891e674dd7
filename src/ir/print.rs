//! Printing the IR back to StableHLO text that `frontend::text` reads back to an equal module:
//! `func.func`/`func.return`/`func.call`, pretty forms for constants, elementwise ops and
//! `compare` (the bulk of any dump), and the generic form (`ir::generic::op_attrs`) for the
//! rest. Large constants print as hex blobs; locations print as trailing `loc(...)` on request.

mod attrs;
mod pretty;
mod types;

use std::fmt::Write;

pub use attrs::{fmt_float, write_attr, write_attr_dict};
pub use types::{type_text, write_loc, write_type};

use crate::ir::generic::{op_attrs, op_name};
use crate::ir::module::NamedAttrs;
use crate::ir::{Function, Module, Operation, Region, Type, ValueId};

/// What to include when printing.
#[derive(Clone, Debug, Default)]
pub struct PrintOptions {
    /// Print each op's and function's location as a trailing `loc(...)`, so a reparse gives
    /// back the same locations.
    pub locations: bool,
}

/// The module as StableHLO text, without locations.
pub fn print_module(m: &Module) -> String {
    print_module_with(m, &PrintOptions::default())
}

/// The module as StableHLO text.
pub fn print_module_with(m: &Module, opts: &PrintOptions) -> String {
    let mut p = Printer::new(opts);
    p.out.push_str("module");
    if let Some(name) = &m.name {
        p.out.push(' ');
        attrs::write_symbol(&mut p.out, name);
    }
    if !m.attrs.is_empty() {
        p.out.push_str(" attributes ");
        write_attr_dict(&mut p.out, &m.attrs);
    }
    p.out.push_str(" {\n");
    for f in &m.functions {
        p.function(f, 1);
    }
    p.out.push_str("}\n");
    p.out
}

/// One function as StableHLO text (a `func.func`), without locations.
pub fn print_function(f: &Function) -> String {
    print_function_with(f, &PrintOptions::default())
}

/// One function as StableHLO text.
pub fn print_function_with(f: &Function, opts: &PrintOptions) -> String {
    let mut p = Printer::new(opts);
    p.function(f, 0);
    p.out
}

/// Text output with indentation and value names for one function at a time.
struct Printer<'o> {
    out: String,
    opts: &'o PrintOptions,
    /// Which values are block arguments (named `%argN`; op results are `%N`).
    is_arg: Vec<bool>,
}

impl<'o> Printer<'o> {
    fn new(opts: &'o PrintOptions) -> Self {
        Printer {
            out: String::new(),
            opts,
            is_arg: Vec::new(),
        }
    }

    fn indent(&mut self, level: usize) {
        for _ in 0..level {
            self.out.push_str("  ");
        }
    }

    fn value(&mut self, v: ValueId) {
        let arg = self.is_arg.get(v.index()).copied().unwrap_or(false);
        let _ = write!(self.out, "%{}{}", if arg { "arg" } else { "" }, v.0);
    }

    fn values(&mut self, vs: &[ValueId]) {
        for (i, &v) in vs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.value(v);
        }
    }

    fn types(&mut self, ts: &[Type]) {
        for (i, t) in ts.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            write_type(&mut self.out, t);
        }
    }

    fn ty(&self, f: &Function, v: ValueId) -> Type {
        f.values.get(v.index()).cloned().unwrap_or(Type::Token)
    }

    fn loc(&mut self, l: &crate::ir::Location) {
        if self.opts.locations {
            self.out.push(' ');
            write_loc(&mut self.out, l);
        }
    }

    fn function(&mut self, f: &Function, level: usize) {
        self.is_arg = vec![false; f.values.len()];
        if let Some(body) = &f.body {
            mark_args(body, &mut self.is_arg);
        }
        self.indent(level);
        self.out.push_str(if f.public {
            "func.func public "
        } else {
            "func.func private "
        });
        attrs::write_symbol(&mut self.out, &f.name);
        self.out.push('(');
        let arg_values = f.body.as_ref().map(|b| b.args.clone()).unwrap_or_default();
        for (i, t) in f.arg_types.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            if let Some(&v) = arg_values.get(i) {
                self.value(v);
                self.out.push_str(": ");
            }
            write_type(&mut self.out, t);
            self.named_attrs(f.arg_attrs.get(i));
        }
        self.out.push(')');
        let result_attrs = f.result_attrs.iter().any(|a| !a.is_empty());
        if f.result_types.len() == 1 && !result_attrs {
            self.out.push_str(" -> ");
            self.types(&f.result_types);
        } else if !f.result_types.is_empty() {
            self.out.push_str(" -> (");
            for (i, t) in f.result_types.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                write_type(&mut self.out, t);
                self.named_attrs(f.result_attrs.get(i));
            }
            self.out.push(')');
        }
        if let Some(body) = &f.body {
            self.out.push_str(" {\n");
            for op in &body.ops {
                self.op(f, op, level + 1, true);
            }
            self.indent(level);
            self.out.push('}');
        }
        self.loc(&f.loc);
        self.out.push('\n');
    }

    fn named_attrs(&mut self, attrs: Option<&NamedAttrs>) {
        if let Some(a) = attrs.filter(|a| !a.is_empty()) {
            self.out.push(' ');
            write_attr_dict(&mut self.out, a);
        }
    }

    fn op(&mut self, f: &Function, op: &Operation, level: usize, top: bool) {
        self.indent(level);
        if !op.results.is_empty() {
            self.values(&op.results);
            self.out.push_str(" = ");
        }
        let operand_types: Vec<Type> = op.operands.iter().map(|&v| self.ty(f, v)).collect();
        let result_types: Vec<Type> = op.results.iter().map(|&v| self.ty(f, v)).collect();
        if !self.pretty(op, top, &operand_types, &result_types) {
            self.generic(f, op, level, &operand_types, &result_types);
        }
        self.loc(&op.loc);
        self.out.push('\n');
    }

    fn function_type(&mut self, ins: &[Type], outs: &[Type]) {
        self.out.push('(');
        self.types(ins);
        self.out.push_str(") -> ");
        match outs {
            [one] => write_type(&mut self.out, one),
            _ => {
                self.out.push('(');
                self.types(outs);
                self.out.push(')');
            }
        }
    }

    /// `"name"(%a) ({regions}) {attrs} : (types) -> types`.
    fn generic(&mut self, f: &Function, op: &Operation, level: usize, ins: &[Type], outs: &[Type]) {
        attrs::write_string(&mut self.out, &op_name(&op.op));
        self.out.push('(');
        self.values(&op.operands);
        self.out.push(')');
        if !op.regions.is_empty() {
            self.out.push_str(" (");
            for (i, r) in op.regions.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                self.region(f, r, level);
            }
            self.out.push(')');
        }
        let attrs = op_attrs(&op.op);
        if !attrs.is_empty() {
            self.out.push(' ');
            write_attr_dict(&mut self.out, &attrs);
        }
        self.out.push_str(" : ");
        self.function_type(ins, outs);
    }

    fn region(&mut self, f: &Function, r: &Region, level: usize) {
        self.out.push_str("{\n");
        if !r.args.is_empty() {
            self.indent(level);
            self.out.push_str("^bb0(");
            for (i, &a) in r.args.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                self.value(a);
                self.out.push_str(": ");
                let t = self.ty(f, a);
                write_type(&mut self.out, &t);
            }
            self.out.push_str("):\n");
        }
        for op in &r.ops {
            self.op(f, op, level + 1, false);
        }
        self.indent(level);
        self.out.push('}');
    }
}

/// Marks every block argument in `r` (recursively).
fn mark_args(r: &Region, is_arg: &mut [bool]) {
    for a in &r.args {
        if let Some(slot) = is_arg.get_mut(a.index()) {
            *slot = true;
        }
    }
    for op in &r.ops {
        for sub in &op.regions {
            mark_args(sub, is_arg);
        }
    }
}
