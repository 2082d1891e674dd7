//! Pretty forms outside the `stablehlo` dialect: `func.return`/`return`, `func.call`/`call`,
//! CHLO (`chlo.lgamma %x : T -> T`, `chlo.top_k(%x, k = 2)`, `chlo.scan`), the `check` ops of
//! the interpreter tests, `interpreter.probe`/`print`, Shardy's `sdy.manual_computation`, and a
//! fallback for other dialects' simple `name %a, %b {attrs} : types` ops.

use super::cursor::Pos;
use super::ops::OpParts;
use super::parser::Parser;
use super::pretty::Rule;
use crate::ir::attr::Attr;
use crate::ir::types::ElementType;
use crate::Result;

impl Parser<'_> {
    /// A pretty op of a dialect other than `stablehlo`.
    pub fn other_pretty(&mut self, name: &str, start: Pos, expected: usize) -> Result<OpParts> {
        let canonical = match name {
            "return" => "func.return",
            "call" => "func.call",
            other => other,
        };
        let mut p = OpParts::named(canonical);
        match canonical {
            "func.return" => {
                p.operands = self.operand_list()?;
                p.attrs = self.opt_attr_dict()?;
                if self.cur.eat(b':') {
                    self.signature_results(&mut p, start, Rule::NoResults)?;
                }
            }
            "func.call" => {
                self.cur.skip_ws();
                let Some(callee) = self.cur.sigil_id(b'@')? else {
                    return Err(self.cur.expected("a callee `@name`"));
                };
                p.attrs
                    .push(("callee".into(), Attr::Symbol(callee.into_owned())));
                self.cur.expect(b'(')?;
                p.operands = self.value_list_until(b')')?;
                let more = self.opt_attr_dict()?;
                p.attrs.extend(more);
                self.cur.expect(b':')?;
                let (inputs, results) = self.function_type()?;
                self.check_operands(start, &p.operands, &inputs)?;
                p.result_types = results;
            }
            "chlo.scan" => return self.scan_pretty(start),
            "sdy.manual_computation" => return self.manual_computation_pretty(start),
            "chlo.top_k" => {
                self.cur.expect(b'(')?;
                p.operands.push(self.value_use()?);
                self.cur.expect(b',')?;
                self.keyword_eq("k")?;
                let k = self.cur.int_lit()?;
                p.attrs
                    .push(("k".into(), Attr::Int(k as i128, ElementType::I64)));
                if self.cur.eat(b',') {
                    self.keyword_eq("is_stable")?;
                    let b = self.bool_lit()?;
                    p.attrs.push(("is_stable".into(), Attr::Bool(b)));
                }
                self.cur.expect(b')')?;
                self.sig_tail(&mut p, start, Rule::Pairwise)?;
            }
            "check.expect_eq_const" | "check.expect_almost_eq_const" => {
                p.operands.push(self.value_use()?);
                self.cur.expect(b',')?;
                let v = self.parse_attr()?;
                p.attrs.push(("value".into(), v));
                if self.cur.eat(b',') {
                    self.keyword_eq("tolerance")?;
                    let t = self.float_lit()?;
                    p.attrs
                        .push(("tolerance".into(), Attr::Float(t, ElementType::F64)));
                }
                let more = self.opt_attr_dict()?;
                p.attrs.extend(more);
            }
            "check.expect_eq" | "check.expect_almost_eq" => {
                p.operands = self.operand_list()?;
                if self.cur.eat_keyword("tolerance") {
                    self.cur.expect(b'=')?;
                    let t = self.float_lit()?;
                    p.attrs
                        .push(("tolerance".into(), Attr::Float(t, ElementType::F64)));
                }
                self.sig_tail(&mut p, start, Rule::NoResults)?;
            }
            "check.expect_close" => {
                p.operands = self.operand_list()?;
                for kw in ["max_ulp_difference", "min_ulp_difference"] {
                    if self.cur.eat_keyword(kw) {
                        self.cur.expect(b'=')?;
                        let v = self.cur.int_lit()?;
                        p.attrs
                            .push((kw.into(), Attr::Int(v as i128, ElementType::U64)));
                        self.cur.eat(b',');
                    }
                }
                self.cur.expect(b':')?;
                let more = self.opt_attr_dict()?;
                p.attrs.extend(more);
                self.signature_results(&mut p, start, Rule::NoResults)?;
            }
            "check.expect_serialized_eq" | "interpreter.probe" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("probe_id")?;
                let id = self.cur.string_lit()?.into_owned();
                p.attrs.push(("probe_id".into(), Attr::String(id)));
                if self.cur.eat(b',') {
                    self.keyword_eq("iter")?;
                    let v = self.cur.int_lit()?;
                    p.attrs
                        .push(("iteration".into(), Attr::Int(v as i128, ElementType::U32)));
                }
                let rule = if canonical == "interpreter.probe" {
                    Rule::Same
                } else {
                    Rule::NoResults
                };
                self.sig_tail(&mut p, start, rule)?;
            }
            "interpreter.print" => {
                p.operands = self.operand_list()?;
                self.sig_tail(&mut p, start, Rule::NoResults)?;
            }
            "chlo.constant" => {
                p.attrs = self.opt_attr_dict()?;
                self.cur.skip_ws();
                let vpos = self.cur.pos;
                let v = self.parse_attr()?;
                let Attr::Dense(l) = &v else {
                    return Err(self.cur.error_at(vpos, "expected dense elements"));
                };
                p.result_types = vec![l.ty.clone().into()];
                p.attrs.push(("value".into(), v));
            }
            _ => return self.fallback_pretty(p, start, expected),
        }
        Ok(p)
    }

    /// `sdy.manual_computation(%x) in_shardings=[..] out_shardings=[..] manual_axes={..}
    /// (%arg: T, ...) { region } : fn`; the shardings are kept as opaque attributes in their
    /// generic spelling.
    fn manual_computation_pretty(&mut self, start: Pos) -> Result<OpParts> {
        let mut p = OpParts::named("sdy.manual_computation");
        self.cur.expect(b'(')?;
        p.operands = self.value_list_until(b')')?;
        for key in ["in_shardings", "out_shardings"] {
            self.keyword_eq(key)?;
            let text = self.cur.skip_balanced()?;
            p.attrs.push((
                key.into(),
                Attr::Opaque(format!("#sdy.sharding_per_value<{text}>")),
            ));
        }
        self.keyword_eq("manual_axes")?;
        let text = self.cur.skip_balanced()?;
        p.attrs.push((
            "manual_axes".into(),
            Attr::Opaque(format!("#sdy<manual_axes{text}>")),
        ));
        self.cur.expect(b'(')?;
        let mut args = Vec::new();
        if !self.cur.eat(b')') {
            loop {
                args.push(self.block_arg_decl()?);
                if self.cur.eat(b')') {
                    break;
                }
                self.cur.expect(b',')?;
            }
        }
        p.regions.push(self.parse_region(args)?);
        self.cur.expect(b':')?;
        let (inputs, results) = self.function_type()?;
        self.check_operands(start, &p.operands, &inputs)?;
        p.result_types = results;
        Ok(p)
    }

    /// A float literal (decimal or integer text).
    fn float_lit(&mut self) -> Result<f64> {
        self.cur.skip_ws();
        let pos = self.cur.pos;
        let n = self.cur.number()?;
        n.to_f64()
            .ok_or_else(|| self.cur.error_at(pos, "expected a number"))
    }

    /// `name %a, %b {attrs} : types` for CHLO and other dialects' simple ops: the signature
    /// gives the result types (functional), or the one result has the last listed type. The inline
    /// sharding of `sdy.sharding_constraint %x <@mesh, [...]>` is kept as an opaque
    /// `#sdy.sharding<...>` named `sharding`; a `(` starts the generic form with an unquoted
    /// name.
    fn fallback_pretty(&mut self, mut p: OpParts, start: Pos, expected: usize) -> Result<OpParts> {
        let name = p.name.clone();
        let unsupported = |e: crate::Error| {
            crate::Error::invalid(format!(
                "{} (unsupported syntax for `{name}`; other dialects' ops are read in their \
                 generic form or as `name operands attr-dict : types`)",
                e.message
            ))
        };
        if self.cur.peek() == Some(b'(') {
            return self.generic_op(&name, start);
        }
        p.operands = self.operand_list()?;
        if self.cur.peek() == Some(b'<') && name.starts_with("sdy.") {
            let text = self.cur.skip_balanced()?;
            p.attrs.push((
                "sharding".into(),
                Attr::Opaque(format!("#sdy.sharding{text}")),
            ));
        }
        let more = self.opt_attr_dict().map_err(unsupported)?;
        p.attrs.extend(more);
        if !self.cur.eat(b':') {
            if expected == 0 {
                return Ok(p);
            }
            return Err(unsupported(self.cur.expected("`:`")));
        }
        self.cur.skip_ws();
        let sig_pos = self.cur.pos;
        let sig = self.signature().map_err(unsupported)?;
        if let Some(inputs) = &sig.inputs {
            self.check_operands(start, &p.operands, inputs)?;
            p.result_types = sig.types;
        } else if expected == 0 {
            p.result_types = Vec::new();
        } else if expected == sig.types.len() {
            p.result_types = sig.types;
        } else if expected == 1 {
            p.result_types = sig.types.last().cloned().into_iter().collect();
        } else {
            return Err(self.cur.error_at(
                sig_pos,
                format!("cannot tell the result types of `{}`", p.name),
            ));
        }
        Ok(p)
    }
}
