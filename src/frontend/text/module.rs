//! Top level: `module @name attributes {...} { ... }` or a bare list of `func.func`s (as in
//! the interpreter tests), alias definitions and resource sections, other dialects' module-level
//! ops (`sdy.mesh ...`, skipped), and functions with their argument and result attributes.

use std::collections::HashSet;

use super::cursor::Pos;
use super::ops::ArgDecl;
use super::parser::{FuncState, Parser};
use crate::ir::module::NamedAttrs;
use crate::ir::{Function, Module, Type};
use crate::Result;

/// A function argument as declared (declarations may leave it unnamed).
struct FuncArg {
    name: Option<String>,
    ty: Type,
    pos: Pos,
}

impl Parser<'_> {
    /// The whole input as one module.
    pub fn parse_top(&mut self) -> Result<Module> {
        let mut module = Module::default();
        let mut names = HashSet::new();
        let mut saw_module = false;
        while !self.cur.at_end() {
            match self.cur.peek() {
                Some(b'#') | Some(b'!') => self.skip_alias_definition()?,
                Some(b'{') if self.cur.rest().starts_with("{-#") => {
                    self.skip_resources_section()?
                }
                _ => {
                    self.cur.skip_ws();
                    let pos = self.cur.pos;
                    if self.cur.eat_keyword("module") {
                        if saw_module || !module.functions.is_empty() {
                            return Err(self
                                .cur
                                .error_at(pos, "only one module per input is supported"));
                        }
                        saw_module = true;
                        self.module_body(&mut module, &mut names)?;
                    } else {
                        if saw_module {
                            return Err(self.cur.error_at(pos, "function outside the module"));
                        }
                        self.module_item(&mut module, &mut names)?;
                    }
                }
            }
        }
        Ok(module)
    }

    /// `[@name] [attributes {..}] { items } [loc(..)]` after `module`.
    fn module_body(&mut self, module: &mut Module, names: &mut HashSet<String>) -> Result<()> {
        if let Some(name) = self.cur.sigil_id(b'@')? {
            module.name = Some(name.into_owned());
        }
        if self.cur.eat_keyword("attributes") {
            module.attrs = self.attr_dict()?;
        }
        self.cur.expect(b'{')?;
        loop {
            if self.cur.eat(b'}') {
                break;
            }
            if self.cur.at_end() {
                return Err(self.cur.expected("`}` closing the module"));
            }
            self.module_item(module, names)?;
        }
        self.opt_loc()?;
        Ok(())
    }

    /// One item inside a module: a function, or another dialect's op (skipped).
    fn module_item(&mut self, module: &mut Module, names: &mut HashSet<String>) -> Result<()> {
        self.cur.skip_ws();
        let pos = self.cur.pos;
        match self.cur.peek_bare_id() {
            Some("func.func") => {
                let f = self.parse_func()?;
                if !names.insert(f.name.clone()) {
                    return Err(self
                        .cur
                        .error_at(pos, format!("redefinition of function `@{}`", f.name)));
                }
                module.functions.push(f);
                Ok(())
            }
            Some(id) if id.contains('.') && id != "func.func" => self.skip_statement(),
            _ => Err(self.cur.expected("`func.func` or `module`")),
        }
    }

    /// Skips an op of another dialect up to the end of its line (across brackets).
    fn skip_statement(&mut self) -> Result<()> {
        let mut depth = 0usize;
        loop {
            let Some(c) = self.cur.byte_at(0) else {
                return Ok(());
            };
            match c {
                b'"' => {
                    self.cur.string_raw()?;
                    continue;
                }
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    if depth == 0 {
                        return Ok(());
                    }
                    depth -= 1;
                }
                b'\n' if depth == 0 => return Ok(()),
                _ => {}
            }
            let len = self.cur.rest().chars().next().map_or(1, char::len_utf8);
            self.cur.pos += len;
        }
    }

    /// `func.func [public|private] @name(args) [-> results] [attributes {..}] [{ body }]
    /// [loc(..)]`.
    fn parse_func(&mut self) -> Result<Function> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        self.cur.expect_keyword("func.func")?;
        let public = if self.cur.eat_keyword("private") || self.cur.eat_keyword("nested") {
            false
        } else {
            self.cur.eat_keyword("public");
            true
        };
        self.cur.skip_ws();
        let Some(name) = self.cur.sigil_id(b'@')? else {
            return Err(self.cur.expected("a function name `@name`"));
        };
        let name = name.into_owned();
        self.func = FuncState::default();
        let (args, arg_attrs) = self.func_args()?;
        let (result_types, result_attrs) = if self.cur.eat_arrow() {
            self.func_results()?
        } else {
            (Vec::new(), Vec::new())
        };
        if self.cur.eat_keyword("attributes") {
            self.attr_dict()?;
        }
        let arg_types: Vec<Type> = args.iter().map(|a| a.ty.clone()).collect();
        let body = if self.cur.peek() == Some(b'{') {
            let mut decls: Vec<ArgDecl> = Vec::with_capacity(args.len());
            for a in args {
                let Some(n) = a.name else {
                    return Err(self
                        .cur
                        .error_at(a.pos, "a function with a body needs named arguments"));
                };
                decls.push((n, a.ty, a.pos));
            }
            Some(self.parse_region(decls)?)
        } else {
            None
        };
        let loc = self.opt_loc()?.unwrap_or_else(|| self.cur.location(start));
        Ok(Function {
            name,
            public,
            arg_types,
            result_types,
            arg_attrs,
            result_attrs,
            values: std::mem::take(&mut self.func.values),
            body,
            loc,
        })
    }

    /// `(%a: T {attrs} loc(..), ...)` or, for declarations, `(T, ...)`.
    fn func_args(&mut self) -> Result<(Vec<FuncArg>, Vec<NamedAttrs>)> {
        self.cur.expect(b'(')?;
        let mut args = Vec::new();
        let mut attrs = Vec::new();
        if self.cur.eat(b')') {
            return Ok((args, attrs));
        }
        loop {
            self.cur.skip_ws();
            let pos = self.cur.pos;
            let name = match self.cur.sigil_id(b'%')? {
                Some(n) => {
                    let n = n.into_owned();
                    self.cur.expect(b':')?;
                    Some(n)
                }
                None => None,
            };
            let ty = self.parse_type()?;
            args.push(FuncArg { name, ty, pos });
            attrs.push(self.opt_attr_dict()?);
            self.opt_loc()?;
            if self.cur.eat(b')') {
                return Ok((args, attrs));
            }
            self.cur.expect(b',')?;
        }
    }

    /// `T` or `(T {attrs}, ...)` after `->`.
    fn func_results(&mut self) -> Result<(Vec<Type>, Vec<NamedAttrs>)> {
        if !self.cur.eat(b'(') {
            return Ok((vec![self.parse_type()?], vec![Vec::new()]));
        }
        let mut types = Vec::new();
        let mut attrs = Vec::new();
        if self.cur.eat(b')') {
            return Ok((types, attrs));
        }
        loop {
            types.push(self.parse_type()?);
            attrs.push(self.opt_attr_dict()?);
            if self.cur.eat(b')') {
                return Ok((types, attrs));
            }
            self.cur.expect(b',')?;
        }
    }
}
