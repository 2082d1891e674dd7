//! Pretty forms of ops with regions whose block arguments the op syntax declares:
//! `stablehlo.while(%it = %x) : T cond {...} do {...}`, both forms of `stablehlo.reduce`
//! (`applies <op>` and `reducer(%a: T, %c: T) (%b: T, %d: T) {...}`, whose block arguments
//! interleave with the operand pairs), and `chlo.scan`.

use super::cursor::Pos;
use super::ops::{ArgDecl, OpParts};
use super::parser::Parser;
use crate::ir::attr::Attr;
use crate::ir::generic::build_op;
use crate::ir::types::{ElementType, TensorType, Type};
use crate::ir::{Op, Operation, Region};
use crate::Result;

impl Parser<'_> {
    /// `stablehlo.while(%it = %x, ...) : T, ... [attributes {..}] cond { } do { }`.
    pub fn while_pretty(&mut self, start: Pos) -> Result<OpParts> {
        let mut p = OpParts::named("stablehlo.while");
        self.cur.expect(b'(')?;
        let mut iter_names = Vec::new();
        if !self.cur.eat(b')') {
            loop {
                self.cur.skip_ws();
                let npos = self.cur.pos;
                let Some(name) = self.cur.sigil_id(b'%')? else {
                    return Err(self.cur.expected("an iteration argument `%name`"));
                };
                iter_names.push((name.into_owned(), npos));
                self.cur.expect(b'=')?;
                p.operands.push(self.value_use()?);
                if self.cur.eat(b')') {
                    break;
                }
                self.cur.expect(b',')?;
            }
        }
        let mut types = Vec::new();
        if !p.operands.is_empty() {
            self.cur.expect(b':')?;
            loop {
                types.push(self.parse_type()?);
                if !self.cur.eat(b',') {
                    break;
                }
            }
        }
        self.check_operands(start, &p.operands, &types)?;
        if self.cur.eat_keyword("attributes") {
            p.attrs = self.attr_dict()?;
        }
        let args: Vec<ArgDecl> = iter_names
            .iter()
            .zip(&types)
            .map(|((n, pos), t)| (n.clone(), t.clone(), *pos))
            .collect();
        self.cur.expect_keyword("cond")?;
        p.regions.push(self.parse_region(args.clone())?);
        self.cur.expect_keyword("do")?;
        p.regions.push(self.parse_region(args)?);
        p.result_types = types;
        Ok(p)
    }

    /// `stablehlo.reduce(%x init: %c), ... applies <op> across dimensions = [..] : fn` or
    /// `... across dimensions = [..] : fn reducer(%a: T, %c: T) (%b: T, %d: T) { ... }`.
    pub fn reduce_pretty(&mut self, start: Pos) -> Result<OpParts> {
        let mut p = OpParts::named("stablehlo.reduce");
        let mut inits = Vec::new();
        loop {
            self.cur.expect(b'(')?;
            p.operands.push(self.value_use()?);
            self.cur.expect_keyword("init")?;
            self.cur.expect(b':')?;
            inits.push(self.value_use()?);
            self.cur.expect(b')')?;
            if !self.cur.eat(b',') {
                break;
            }
        }
        p.operands.extend(inits);
        let applies = if self.cur.eat_keyword("applies") {
            self.cur.skip_ws();
            let ipos = self.cur.pos;
            let inner = if self.cur.peek() == Some(b'"') {
                self.cur.string_lit()?.into_owned()
            } else {
                self.cur.expect_bare_id("an op name")?.to_string()
            };
            Some((inner, ipos))
        } else {
            None
        };
        self.cur.expect_keyword("across")?;
        self.cur.expect_keyword("dimensions")?;
        self.cur.expect(b'=')?;
        let dims = self.int_list()?;
        p.attrs.push((
            "dimensions".into(),
            Attr::DenseArray(ElementType::I64, dims),
        ));
        let more = self.opt_attr_dict()?;
        p.attrs.extend(more);
        self.cur.expect(b':')?;
        let (inputs, results) = self.function_type()?;
        self.check_operands(start, &p.operands, &inputs)?;
        p.result_types = results;
        match applies {
            Some((inner, ipos)) => {
                let loc = self.opt_loc()?.unwrap_or_else(|| self.cur.location(start));
                let elem = match inputs.first() {
                    Some(Type::Tensor(t)) => {
                        let mut s = TensorType::scalar(t.dtype);
                        s.quant = t.quant.clone();
                        Type::Tensor(s)
                    }
                    _ => return Err(self.cur.error_at(start, "reduce needs tensor inputs")),
                };
                let region = self.applies_region(&inner, elem, ipos, &loc)?;
                p.regions.push(region);
                p.loc = Some(loc);
            }
            None => {
                self.cur.expect_keyword("reducer")?;
                let mut firsts = Vec::new();
                let mut seconds = Vec::new();
                while self.cur.eat(b'(') {
                    firsts.push(self.block_arg_decl()?);
                    self.cur.expect(b',')?;
                    seconds.push(self.block_arg_decl()?);
                    self.cur.expect(b')')?;
                }
                firsts.extend(seconds);
                p.regions.push(self.parse_region(firsts)?);
            }
        }
        Ok(p)
    }

    /// The body `^bb0(%a: T, %b: T): %r = <inner>(%a, %b); return %r` of a compact reduce.
    fn applies_region(
        &mut self,
        inner: &str,
        elem: Type,
        ipos: Pos,
        loc: &crate::ir::Location,
    ) -> Result<Region> {
        let a = self.func.new_value(elem.clone());
        let b = self.func.new_value(elem.clone());
        let op = build_op(
            inner,
            &[],
            &[elem.clone(), elem.clone()],
            std::slice::from_ref(&elem),
        )
        .map_err(|e| self.cur.error_at(ipos, e.message))?;
        if !matches!(op, Op::Binary(_)) {
            return Err(self
                .cur
                .error_at(ipos, format!("`{inner}` is not a binary elementwise op")));
        }
        let ret = build_op("stablehlo.return", &[], std::slice::from_ref(&elem), &[])
            .map_err(|e| self.cur.error_at(ipos, e.message))?;
        let r = self.func.new_value(elem);
        Ok(Region {
            args: vec![a, b],
            ops: vec![
                Operation::new(op, vec![a, b], vec![r], loc.clone()),
                Operation::new(ret, vec![r], Vec::new(), loc.clone()),
            ],
        })
    }

    /// `chlo.scan(%in...) inits(%init...) dimension=N [attributes {..}] { region } : fn`.
    pub fn scan_pretty(&mut self, start: Pos) -> Result<OpParts> {
        let mut p = OpParts::named("chlo.scan");
        self.cur.expect(b'(')?;
        p.operands = self.value_list_until(b')')?;
        let num_inputs = p.operands.len();
        self.cur.expect_keyword("inits")?;
        self.cur.expect(b'(')?;
        let inits = self.value_list_until(b')')?;
        let num_inits = inits.len();
        p.operands.extend(inits);
        self.keyword_eq("dimension")?;
        let d = self.cur.int_lit()?;
        p.attrs
            .push(("dimension".into(), Attr::Int(d as i128, ElementType::I64)));
        if self.cur.eat_keyword("attributes") {
            let more = self.attr_dict()?;
            p.attrs.extend(more);
        }
        p.regions.push(self.parse_region(Vec::new())?);
        self.cur.expect(b':')?;
        let (inputs, results) = self.function_type()?;
        self.check_operands(start, &p.operands, &inputs)?;
        let num_outputs = results
            .len()
            .checked_sub(num_inits)
            .ok_or_else(|| self.cur.error_at(start, "too few results for the carries"))?;
        let seg = |a: usize, b: usize| Attr::DenseArray(ElementType::I32, vec![a as i64, b as i64]);
        p.attrs
            .push(("operandSegmentSizes".into(), seg(num_inputs, num_inits)));
        p.attrs
            .push(("resultSegmentSizes".into(), seg(num_outputs, num_inits)));
        p.result_types = results;
        Ok(p)
    }
}
