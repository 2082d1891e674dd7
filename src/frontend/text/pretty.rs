//! Pretty (custom assembly) forms of StableHLO ops, as `stablehlo-opt` and JAX print them
//! (`StablehloOps.td` assembly formats and the custom printers). Each produces the attribute
//! list the generic form would carry, so both forms build the same op.

use super::cursor::Pos;
use super::ops::OpParts;
use super::parser::Parser;
use crate::ir::attr::{Attr, ComparisonDirection, ComparisonType, FftType, Precision};
use crate::ir::attr::{RngAlgorithm, RngDistribution};
use crate::ir::literal::{Literal, Scalar};
use crate::ir::types::{ElementType, TensorType, Type};
use crate::ir::ValueId;
use crate::Result;

/// How a pretty op's result types follow from its signature when it is not functional.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    /// `: T` is the type of every operand and the result.
    Same,
    /// `: T` is the result type; operand types are not restated (`complex`).
    ResultOnly,
    /// `: pred_type, T` (select).
    Select,
    /// `: T1, T2, ...` are the operand and result types pairwise.
    Pairwise,
    /// `: T1, T2, ...` are the operand types; no results (return, checks).
    NoResults,
}

/// `[1, 2]` as the `array<i64: ...>` the generic form uses.
pub(super) fn i64_array(v: Vec<i64>) -> Attr {
    Attr::DenseArray(ElementType::I64, v)
}

impl Parser<'_> {
    /// Values separated by commas, stopping at the first non-value; a comma after the last
    /// value is consumed (it introduces the keyword attributes that follow).
    pub fn operand_list(&mut self) -> Result<Vec<ValueId>> {
        let mut out = Vec::new();
        while self.cur.peek() == Some(b'%') {
            out.push(self.value_use()?);
            if !self.cur.eat(b',') {
                break;
            }
        }
        Ok(out)
    }

    /// `kw =`.
    pub fn keyword_eq(&mut self, kw: &str) -> Result<()> {
        self.cur.expect_keyword(kw)?;
        self.cur.expect(b'=')
    }

    /// `[1, -2, ...]`.
    pub fn int_list(&mut self) -> Result<Vec<i64>> {
        self.cur.expect(b'[')?;
        let mut out = Vec::new();
        if self.cur.eat(b']') {
            return Ok(out);
        }
        loop {
            out.push(self.cur.int_lit()?);
            if self.cur.eat(b']') {
                return Ok(out);
            }
            self.cur.expect(b',')?;
        }
    }

    /// The common tail `attr-dict : signature`; sets the result types by `rule` and checks
    /// the operands against the types the signature gives them.
    pub fn sig_tail(&mut self, parts: &mut OpParts, start: Pos, rule: Rule) -> Result<()> {
        let more = self.opt_attr_dict()?;
        parts.attrs.extend(more);
        self.cur.expect(b':')?;
        self.signature_results(parts, start, rule)
    }

    /// Reads the signature after `:` and sets the result types by `rule`.
    pub fn signature_results(&mut self, parts: &mut OpParts, start: Pos, rule: Rule) -> Result<()> {
        self.cur.skip_ws();
        let sig_pos = self.cur.pos;
        let sig = self.signature()?;
        if let Some(inputs) = &sig.inputs {
            self.check_operands(start, &parts.operands, inputs)?;
            parts.result_types = sig.types;
            return Ok(());
        }
        let mut types = sig.types;
        let one = |p: &Self, types: &mut Vec<Type>| -> Result<Type> {
            match (types.pop(), types.is_empty()) {
                (Some(t), true) => Ok(t),
                _ => Err(p.cur.error_at(sig_pos, "expected a single type")),
            }
        };
        parts.result_types = match rule {
            Rule::Same => {
                let t = one(self, &mut types)?;
                let operand_types = vec![t.clone(); parts.operands.len()];
                self.check_operands(start, &parts.operands, &operand_types)?;
                vec![t]
            }
            Rule::ResultOnly => vec![one(self, &mut types)?],
            Rule::Select => {
                if types.len() != 2 {
                    return Err(self.cur.error_at(sig_pos, "expected `pred_type, type`"));
                }
                types.pop().into_iter().collect()
            }
            Rule::Pairwise => {
                self.check_operands(start, &parts.operands, &types)?;
                types
            }
            Rule::NoResults => {
                if types.len() == 1 && parts.operands.len() > 1 {
                    let all = vec![types.remove(0); parts.operands.len()];
                    self.check_operands(start, &parts.operands, &all)?;
                } else {
                    self.check_operands(start, &parts.operands, &types)?;
                }
                Vec::new()
            }
        };
        Ok(())
    }

    /// A pretty-form op named `name` (already consumed); `expected` is the number of result
    /// names before `=`.
    pub fn pretty_op(&mut self, name: &str, start: Pos, expected: usize) -> Result<OpParts> {
        if let Some(short) = name.strip_prefix("stablehlo.") {
            return self.stablehlo_pretty(name, short, start);
        }
        self.other_pretty(name, start, expected)
    }

    fn stablehlo_pretty(&mut self, name: &str, short: &str, start: Pos) -> Result<OpParts> {
        let mut p = OpParts::named(name);
        let paren_syntax = matches!(short, "convolution" | "reduce" | "while" | "constant");
        if self.cur.peek() == Some(b'(') && !paren_syntax {
            // The generic form with an unquoted name.
            return self.generic_op(name, start);
        }
        match short {
            "if" => {
                p.operands.push(self.value_use()?);
                if self.cur.eat_arrow() {
                    p.result_types = self.result_types()?;
                }
                p.regions.push(self.parse_region(Vec::new())?);
                self.cur.expect_keyword("else")?;
                p.regions.push(self.parse_region(Vec::new())?);
                return Ok(p);
            }
            "constant" => return self.constant_pretty(name, start),
            "while" => return self.while_pretty(start),
            "reduce" => return self.reduce_pretty(start),
            "return" => {
                p.operands = self.operand_list()?;
                p.attrs = self.opt_attr_dict()?;
                if self.cur.eat(b':') {
                    self.signature_results(&mut p, start, Rule::NoResults)?;
                }
                return Ok(p);
            }
            "iota" => {
                self.keyword_eq("dim")?;
                let d = self.cur.int_lit()?;
                p.attrs.push((
                    "iota_dimension".into(),
                    Attr::Int(d as i128, ElementType::I64),
                ));
            }
            "dynamic_iota" | "get_dimension_size" | "set_dimension_size" | "concatenate" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("dim")?;
                let d = self.cur.int_lit()?;
                let attr = if short == "dynamic_iota" {
                    "iota_dimension"
                } else {
                    "dimension"
                };
                p.attrs
                    .push((attr.into(), Attr::Int(d as i128, ElementType::I64)));
            }
            "compare" => {
                self.cur.skip_ws();
                let dpos = self.cur.pos;
                let d = self.cur.expect_bare_id("a comparison direction")?;
                let d = ComparisonDirection::from_name(d)
                    .ok_or_else(|| self.cur.error_at(dpos, format!("unknown direction `{d}`")))?;
                p.attrs
                    .push(("comparison_direction".into(), Attr::ComparisonDirection(d)));
                self.cur.expect(b',')?;
                p.operands.push(self.value_use()?);
                self.cur.expect(b',')?;
                p.operands.push(self.value_use()?);
                if self.cur.eat(b',') {
                    self.cur.skip_ws();
                    let tpos = self.cur.pos;
                    let t = self.cur.expect_bare_id("a comparison type")?;
                    let t = ComparisonType::from_name(t).ok_or_else(|| {
                        self.cur
                            .error_at(tpos, format!("unknown comparison type `{t}`"))
                    })?;
                    p.attrs
                        .push(("compare_type".into(), Attr::ComparisonType(t)));
                }
            }
            "slice" => {
                p.operands.push(self.value_use()?);
                let (s, l, st) = self.slice_ranges()?;
                p.attrs.push(("start_indices".into(), i64_array(s)));
                p.attrs.push(("limit_indices".into(), i64_array(l)));
                p.attrs.push(("strides".into(), i64_array(st)));
            }
            "dynamic_slice" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("sizes")?;
                let v = self.int_list()?;
                p.attrs.push(("slice_sizes".into(), i64_array(v)));
            }
            "broadcast" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("sizes")?;
                let v = self.int_list()?;
                p.attrs.push(("broadcast_sizes".into(), i64_array(v)));
            }
            "broadcast_in_dim" | "dynamic_broadcast_in_dim" | "transpose" | "reverse" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("dims")?;
                let v = self.int_list()?;
                let attr = match short {
                    "transpose" => "permutation",
                    "reverse" => "dimensions",
                    _ => "broadcast_dimensions",
                };
                p.attrs.push((attr.into(), i64_array(v)));
            }
            "cholesky" => {
                p.operands = self.operand_list()?;
                if self.cur.eat_keyword("lower") {
                    self.cur.expect(b'=')?;
                    let b = self.bool_lit()?;
                    p.attrs.push(("lower".into(), Attr::Bool(b)));
                }
            }
            "pad" => {
                p.operands = self.operand_list()?;
                for (kw, attr) in [
                    ("low", "edge_padding_low"),
                    ("high", "edge_padding_high"),
                    ("interior", "interior_padding"),
                ] {
                    if kw != "low" {
                        self.cur.expect(b',')?;
                    }
                    self.keyword_eq(kw)?;
                    let v = self.int_list()?;
                    p.attrs.push((attr.into(), i64_array(v)));
                }
            }
            "get_tuple_element" => {
                p.operands.push(self.value_use()?);
                self.cur.expect(b'[')?;
                let i = self.cur.int_lit()?;
                self.cur.expect(b']')?;
                p.attrs
                    .push(("index".into(), Attr::Int(i as i128, ElementType::I32)));
            }
            "tuple" | "complex" => {
                p.operands = self.operand_list()?;
                self.sig_tail(&mut p, start, Rule::ResultOnly)?;
                return Ok(p);
            }
            "select" => {
                p.operands = self.operand_list()?;
                self.sig_tail(&mut p, start, Rule::Select)?;
                return Ok(p);
            }
            "optimization_barrier" => {
                p.attrs = self.opt_attr_dict()?;
                if self.cur.eat(b'(') {
                    self.cur.expect(b')')?;
                    return Ok(p);
                }
                p.operands = self.operand_list()?;
                self.cur.expect(b':')?;
                self.signature_results(&mut p, start, Rule::Pairwise)?;
                return Ok(p);
            }
            "fft" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("type")?;
                let t = self.enum_keyword("fft type", FftType::from_name)?;
                p.attrs.push(("fft_type".into(), Attr::FftType(t)));
                self.cur.expect(b',')?;
                self.keyword_eq("length")?;
                let v = self.int_list()?;
                p.attrs.push(("fft_length".into(), i64_array(v)));
            }
            "rng" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("distribution")?;
                let d = self.enum_keyword("distribution", RngDistribution::from_name)?;
                p.attrs
                    .push(("rng_distribution".into(), Attr::RngDistribution(d)));
            }
            "rng_bit_generator" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("algorithm")?;
                let a = self.enum_keyword("algorithm", RngAlgorithm::from_name)?;
                p.attrs
                    .push(("rng_algorithm".into(), Attr::RngAlgorithm(a)));
            }
            "reduce_precision" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("format")?;
                self.cur.skip_ws();
                let fpos = self.cur.pos;
                let f = self.cur.expect_bare_id("a format `e#m#`")?;
                let (e, m) = exponent_mantissa(f)
                    .ok_or_else(|| self.cur.error_at(fpos, format!("bad format `{f}`")))?;
                p.attrs
                    .push(("exponent_bits".into(), Attr::Int(e, ElementType::I32)));
                p.attrs
                    .push(("mantissa_bits".into(), Attr::Int(m, ElementType::I32)));
            }
            "einsum" | "unary_einsum" => {
                p.operands = self.operand_list()?;
                self.keyword_eq("config")?;
                let c = self.cur.string_lit()?.into_owned();
                p.attrs.push(("einsum_config".into(), Attr::String(c)));
            }
            "custom_call" => {
                self.cur.skip_ws();
                let Some(target) = self.cur.sigil_id(b'@')? else {
                    return Err(self.cur.expected("a call target `@name`"));
                };
                p.attrs
                    .push(("call_target_name".into(), Attr::String(target.into_owned())));
                self.cur.expect(b'(')?;
                p.operands = self.value_list_until(b')')?;
            }
            "composite" => {
                let n = self.cur.string_lit()?.into_owned();
                p.attrs.push(("name".into(), Attr::String(n)));
                p.operands = self.operand_list()?;
                if self.cur.eat(b'(') {
                    loop {
                        p.regions.push(self.parse_region(Vec::new())?);
                        if self.cur.eat(b')') {
                            break;
                        }
                        self.cur.expect(b',')?;
                    }
                }
            }
            "dot" => {
                p.operands = self.operand_list()?;
                if self.cur.peek_bare_id() == Some("precision") {
                    let pc = self.precision_config()?;
                    p.attrs.push(("precision_config".into(), pc));
                }
            }
            "dot_general" => {
                p.operands = self.operand_list()?;
                self.dot_general_attrs(&mut p)?;
            }
            "convolution" => {
                self.cur.expect(b'(')?;
                p.operands = self.value_list_until(b')')?;
                self.convolution_attrs(&mut p)?;
            }
            _ => {
                p.operands = self.operand_list()?;
            }
        }
        self.sig_tail(&mut p, start, Rule::Same)?;
        Ok(p)
    }

    /// An enum case written as a bare keyword (`FFT`, `UNIFORM`).
    fn enum_keyword<T>(&mut self, what: &str, from: impl Fn(&str) -> Option<T>) -> Result<T> {
        self.cur.skip_ws();
        let pos = self.cur.pos;
        let k = self.cur.expect_bare_id(what)?;
        from(k).ok_or_else(|| self.cur.error_at(pos, format!("unknown {what} `{k}`")))
    }

    /// `stablehlo.constant [attr-dict] dense<...> : T`, or the parenthesized generic variant.
    fn constant_pretty(&mut self, name: &str, start: Pos) -> Result<OpParts> {
        let mut p = OpParts::named(name);
        if self.cur.eat(b'(') {
            self.cur.expect(b')')?;
            if self.cur.eat(b'<') {
                p.attrs = self.attr_dict()?;
                self.cur.expect(b'>')?;
            }
            let more = self.opt_attr_dict()?;
            p.attrs.extend(more);
            self.cur.expect(b':')?;
            let (inputs, results) = self.function_type()?;
            self.check_operands(start, &[], &inputs)?;
            p.result_types = results;
            return Ok(p);
        }
        p.attrs = self.opt_attr_dict()?;
        self.cur.skip_ws();
        let vpos = self.cur.pos;
        let value = self.parse_attr()?;
        let ty = match &value {
            Attr::Dense(l) => Type::Tensor(l.ty.clone()),
            other => {
                return Err(self.cur.error_at(
                    vpos,
                    format!("expected dense elements, got {}", other.kind()),
                ))
            }
        };
        p.attrs.push(("value".into(), value));
        p.result_types = vec![ty];
        Ok(p)
    }

    /// `[0:2, 1:3:2]`.
    fn slice_ranges(&mut self) -> Result<(Vec<i64>, Vec<i64>, Vec<i64>)> {
        let (mut s, mut l, mut st) = (Vec::new(), Vec::new(), Vec::new());
        self.cur.expect(b'[')?;
        if self.cur.eat(b']') {
            return Ok((s, l, st));
        }
        loop {
            s.push(self.cur.int_lit()?);
            self.cur.expect(b':')?;
            l.push(self.cur.int_lit()?);
            st.push(if self.cur.eat(b':') {
                self.cur.int_lit()?
            } else {
                1
            });
            if self.cur.eat(b']') {
                return Ok((s, l, st));
            }
            self.cur.expect(b',')?;
        }
    }

    /// `precision = [DEFAULT, HIGH]`.
    fn precision_config(&mut self) -> Result<Attr> {
        self.keyword_eq("precision")?;
        self.cur.expect(b'[')?;
        let mut items = Vec::new();
        if !self.cur.eat(b']') {
            loop {
                items.push(Attr::Precision(
                    self.enum_keyword("precision", Precision::from_name)?,
                ));
                if self.cur.eat(b']') {
                    break;
                }
                self.cur.expect(b',')?;
            }
        }
        Ok(Attr::Array(items))
    }

    /// `[batching_dims = [..] x [..],] contracting_dims = [..] x [..]
    /// [, precision = [..]] [, algorithm = <...>]`.
    fn dot_general_attrs(&mut self, p: &mut OpParts) -> Result<()> {
        let mut d = crate::ir::attr::DotDimensionNumbers::default();
        if self.cur.eat_keyword("batching_dims") {
            self.cur.expect(b'=')?;
            d.lhs_batching_dimensions = self.int_list()?;
            self.cur.expect_keyword("x")?;
            d.rhs_batching_dimensions = self.int_list()?;
            self.cur.expect(b',')?;
        }
        self.keyword_eq("contracting_dims")?;
        d.lhs_contracting_dimensions = self.int_list()?;
        self.cur.expect_keyword("x")?;
        d.rhs_contracting_dimensions = self.int_list()?;
        p.attrs
            .push(("dot_dimension_numbers".into(), Attr::DotDimensionNumbers(d)));
        while self.cur.eat(b',') {
            if self.cur.peek_bare_id() == Some("precision") {
                let pc = self.precision_config()?;
                p.attrs.push(("precision_config".into(), pc));
            } else {
                self.keyword_eq("algorithm")?;
                self.cur.expect(b'<')?;
                let a = self.dot_algorithm_body()?;
                p.attrs.push(("algorithm".into(), Attr::DotAlgorithm(a)));
            }
        }
        Ok(())
    }

    /// `dim_numbers = [..]x[..]->[..], window = {stride = [..], pad = [[..]], lhs_dilate = [..],
    /// rhs_dilate = [..], reverse = [..]}`.
    fn convolution_attrs(&mut self, p: &mut OpParts) -> Result<()> {
        self.keyword_eq("dim_numbers")?;
        let d = self.conv_dims_compact()?;
        p.attrs
            .push(("dimension_numbers".into(), Attr::ConvDimensionNumbers(d)));
        self.cur.expect(b',')?;
        self.keyword_eq("window")?;
        self.cur.expect(b'{')?;
        if self.cur.eat(b'}') {
            return Ok(());
        }
        loop {
            self.cur.skip_ws();
            let kpos = self.cur.pos;
            let key = self.cur.expect_bare_id("a window attribute")?;
            self.cur.expect(b'=')?;
            match key {
                "stride" | "lhs_dilate" | "rhs_dilate" => {
                    let v = self.int_list()?;
                    let attr = match key {
                        "stride" => "window_strides",
                        "lhs_dilate" => "lhs_dilation",
                        _ => "rhs_dilation",
                    };
                    p.attrs.push((attr.into(), i64_array(v)));
                }
                "pad" => {
                    let pairs = self.pad_pairs()?;
                    p.attrs
                        .push(("padding".into(), pairs_attr(&pairs, kpos, self)?));
                }
                "reverse" => {
                    let v = self.bool_list()?;
                    p.attrs.push((
                        "window_reversal".into(),
                        Attr::DenseArray(ElementType::Pred, v),
                    ));
                }
                other => {
                    return Err(self
                        .cur
                        .error_at(kpos, format!("unknown window attribute `{other}`")))
                }
            }
            if self.cur.eat(b'}') {
                return Ok(());
            }
            self.cur.expect(b',')?;
        }
    }

    /// `[[lo, hi], ...]`.
    fn pad_pairs(&mut self) -> Result<Vec<(i64, i64)>> {
        self.cur.expect(b'[')?;
        let mut out = Vec::new();
        if self.cur.eat(b']') {
            return Ok(out);
        }
        loop {
            let start = self.cur.pos;
            let v = self.int_list()?;
            match v.as_slice() {
                [lo, hi] => out.push((*lo, *hi)),
                _ => return Err(self.cur.error_at(start, "expected a pair `[low, high]`")),
            }
            if self.cur.eat(b']') {
                return Ok(out);
            }
            self.cur.expect(b',')?;
        }
    }

    /// `[true, false]` or `[1, 0]`, as 0/1.
    fn bool_list(&mut self) -> Result<Vec<i64>> {
        self.cur.expect(b'[')?;
        let mut out = Vec::new();
        if self.cur.eat(b']') {
            return Ok(out);
        }
        loop {
            let v = if self.cur.at_number() {
                (self.cur.int_lit()? != 0) as i64
            } else {
                self.bool_lit()? as i64
            };
            out.push(v);
            if self.cur.eat(b']') {
                return Ok(out);
            }
            self.cur.expect(b',')?;
        }
    }
}

/// `e5m10` → (5, 10).
fn exponent_mantissa(f: &str) -> Option<(i128, i128)> {
    let rest = f.strip_prefix('e')?;
    let (e, m) = rest.split_once('m')?;
    Some((e.parse().ok()?, m.parse().ok()?))
}

/// Padding pairs as the `Nx2` i64 tensor of the generic form.
pub(super) fn pairs_attr(pairs: &[(i64, i64)], pos: Pos, p: &Parser) -> Result<Attr> {
    let ty = TensorType::new(vec![pairs.len() as i64, 2], ElementType::I64);
    let values: Vec<Scalar> = pairs
        .iter()
        .flat_map(|&(l, h)| [l, h])
        .map(|x| Scalar::Int(x as i128))
        .collect();
    Literal::from_scalars(ty, &values)
        .map(Attr::Dense)
        .map_err(|e| p.cur.error_at(pos, e.message))
}
