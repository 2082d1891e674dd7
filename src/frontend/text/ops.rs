//! Op statements: result names (`%0`, `%0:2`, `%a, %b`), the generic form
//! `"dialect.op"(%a) <{props}> ({regions}) {attrs} : (types) -> types`, single-block regions
//! (`^bb0(%x: T):` headers included), and building the typed op through `ir::generic`.

use super::cursor::Pos;
use super::parser::Parser;
use crate::ir::generic::build_op;
use crate::ir::{Attr, Location, Operation, Region, Type, ValueId};
use crate::Result;

/// An op being assembled from text, before it becomes a typed `Operation`.
#[derive(Default)]
pub(super) struct OpParts {
    /// Full op name (`stablehlo.add`).
    pub name: String,
    /// Operand values.
    pub operands: Vec<ValueId>,
    /// Attributes in the generic form's names.
    pub attrs: Vec<(String, Attr)>,
    /// Result types.
    pub result_types: Vec<Type>,
    /// Nested regions.
    pub regions: Vec<Region>,
    /// A location the op's own syntax already read (else the trailing `loc(...)`).
    pub loc: Option<Location>,
}

impl OpParts {
    /// An op named `name` with nothing else yet.
    pub fn named(name: &str) -> Self {
        OpParts {
            name: name.to_string(),
            ..OpParts::default()
        }
    }
}

/// A block argument as declared: name, type, and where it was written.
pub(super) type ArgDecl = (String, Type, Pos);

impl Parser<'_> {
    /// One op statement.
    pub fn parse_operation(&mut self) -> Result<Operation> {
        self.nested(|p| p.parse_operation_inner())
    }

    fn parse_operation_inner(&mut self) -> Result<Operation> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        let mut names: Vec<(String, usize, Pos)> = Vec::new();
        if self.cur.peek() == Some(b'%') {
            loop {
                self.cur.skip_ws();
                let npos = self.cur.pos;
                let Some(name) = self.cur.sigil_id(b'%')? else {
                    return Err(self.cur.expected("a result name"));
                };
                let count = if self.cur.byte_at(0) == Some(b':') {
                    self.cur.pos += 1;
                    let c = self.cur.int_lit()?;
                    usize::try_from(c)
                        .ok()
                        .filter(|&c| (1..=1 << 20).contains(&c))
                        .ok_or_else(|| self.cur.error_at(npos, "bad result count"))?
                } else {
                    1
                };
                names.push((name.into_owned(), count, npos));
                if !self.cur.eat(b',') {
                    break;
                }
            }
            self.cur.expect(b'=')?;
        }
        let expected: usize = names.iter().map(|n| n.1).sum();
        self.cur.skip_ws();
        let parts = if self.cur.peek() == Some(b'"') {
            let name = self.cur.string_lit()?.into_owned();
            self.generic_op(&name, start)?
        } else {
            let Some(name) = self.cur.bare_id() else {
                return Err(self.cur.expected("an operation"));
            };
            self.pretty_op(name, start, expected)?
        };
        let loc = match parts.loc.clone() {
            Some(l) => l,
            None => self.opt_loc()?.unwrap_or_else(|| self.cur.location(start)),
        };
        self.finish_op(start, names, parts, loc)
    }

    /// Builds the typed op, defines its results and binds their names.
    fn finish_op(
        &mut self,
        start: Pos,
        names: Vec<(String, usize, Pos)>,
        parts: OpParts,
        loc: Location,
    ) -> Result<Operation> {
        let expected: usize = names.iter().map(|n| n.1).sum();
        if expected != parts.result_types.len() {
            return Err(self.cur.error_at(
                start,
                format!(
                    "`{}` defines {} result(s) but {} name(s) are given",
                    parts.name,
                    parts.result_types.len(),
                    expected
                ),
            ));
        }
        let attrs = self.sorted_attrs(parts.attrs, start)?;
        let operand_types: Vec<Type> = parts.operands.iter().map(|&v| self.value_type(v)).collect();
        let op = build_op(&parts.name, &attrs, &operand_types, &parts.result_types)
            .map_err(|e| self.cur.error_at(start, e.message))?;
        let results: Vec<ValueId> = parts
            .result_types
            .into_iter()
            .map(|t| self.func.new_value(t))
            .collect();
        let mut next = results.iter();
        for (name, count, npos) in names {
            let group: Vec<ValueId> = next.by_ref().take(count).copied().collect();
            if !self.func.scope.bind(&name, group) {
                return Err(self
                    .cur
                    .error_at(npos, format!("redefinition of value `%{name}`")));
            }
        }
        Ok(Operation {
            op,
            operands: parts.operands,
            results,
            regions: parts.regions,
            loc,
        })
    }

    /// The generic form after the quoted op name.
    pub fn generic_op(&mut self, name: &str, start: Pos) -> Result<OpParts> {
        let mut parts = OpParts::named(name);
        self.cur.expect(b'(')?;
        parts.operands = self.value_list_until(b')')?;
        if self.cur.peek() == Some(b'[') {
            return Err(self
                .cur
                .error("ops with successor blocks are not supported"));
        }
        if self.cur.eat(b'<') {
            parts.attrs = self.attr_dict()?;
            self.cur.expect(b'>')?;
        }
        if self.cur.eat(b'(') {
            loop {
                parts.regions.push(self.parse_region(Vec::new())?);
                if self.cur.eat(b')') {
                    break;
                }
                self.cur.expect(b',')?;
            }
        }
        if self.cur.peek() == Some(b'{') {
            let more = self.attr_dict()?;
            parts.attrs.extend(more);
        }
        self.cur.expect(b':')?;
        let (inputs, results) = self.function_type()?;
        self.check_operands(start, &parts.operands, &inputs)?;
        parts.result_types = results;
        Ok(parts)
    }

    /// Values separated by commas up to `close` (consumed).
    pub fn value_list_until(&mut self, close: u8) -> Result<Vec<ValueId>> {
        let mut out = Vec::new();
        if self.cur.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.value_use()?);
            if self.cur.eat(close) {
                return Ok(out);
            }
            self.cur.expect(b',')?;
        }
    }

    /// Checks operand count and types against the types a signature lists.
    pub fn check_operands(&self, start: Pos, operands: &[ValueId], types: &[Type]) -> Result<()> {
        if operands.len() != types.len() {
            return Err(self.cur.error_at(
                start,
                format!(
                    "{} operand(s) given but the type lists {}",
                    operands.len(),
                    types.len()
                ),
            ));
        }
        for (i, (&v, t)) in operands.iter().zip(types).enumerate() {
            let actual = self.value_type(v);
            if actual != *t {
                return Err(self.cur.error_at(
                    start,
                    format!("operand #{i} has type {actual}, but the op's type says {t}"),
                ));
            }
        }
        Ok(())
    }

    /// A single-block region `{ [^bb(args):] ops }`. `args` are block arguments declared by
    /// the op's own syntax (pretty `while`, `reduce`), added before any in a `^bb` header.
    pub fn parse_region(&mut self, args: Vec<ArgDecl>) -> Result<Region> {
        self.nested(|p| {
            p.cur.expect(b'{')?;
            p.func.scope.push();
            let r = p.region_body(args);
            p.func.scope.pop();
            r
        })
    }

    fn region_body(&mut self, args: Vec<ArgDecl>) -> Result<Region> {
        let mut region = Region::default();
        for (name, ty, pos) in args {
            region.args.push(self.define_arg(&name, ty, pos)?);
        }
        if self.cur.peek() == Some(b'^') {
            self.cur.sigil_id(b'^')?;
            if self.cur.eat(b'(') && !self.cur.eat(b')') {
                loop {
                    let (name, ty, pos) = self.block_arg_decl()?;
                    region.args.push(self.define_arg(&name, ty, pos)?);
                    if self.cur.eat(b')') {
                        break;
                    }
                    self.cur.expect(b',')?;
                }
            }
            self.cur.expect(b':')?;
        }
        loop {
            if self.cur.eat(b'}') {
                return Ok(region);
            }
            if self.cur.peek() == Some(b'^') {
                return Err(self
                    .cur
                    .error("regions with several blocks are not supported"));
            }
            if self.cur.at_end() {
                return Err(self.cur.expected("`}`"));
            }
            let op = self.parse_operation()?;
            region.ops.push(op);
        }
    }

    /// `%name: type [loc(...)]`.
    pub fn block_arg_decl(&mut self) -> Result<ArgDecl> {
        self.cur.skip_ws();
        let pos = self.cur.pos;
        let Some(name) = self.cur.sigil_id(b'%')? else {
            return Err(self.cur.expected("a block argument `%name`"));
        };
        self.cur.expect(b':')?;
        let ty = self.parse_type()?;
        self.opt_loc()?;
        Ok((name.into_owned(), ty, pos))
    }

    /// Defines a block argument value named `name`.
    pub fn define_arg(&mut self, name: &str, ty: Type, pos: Pos) -> Result<ValueId> {
        let v = self.func.new_value(ty);
        if !self.func.scope.bind(name, vec![v]) {
            return Err(self
                .cur
                .error_at(pos, format!("redefinition of value `%{name}`")));
        }
        Ok(v)
    }
}
