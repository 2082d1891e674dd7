//! Attributes: numbers with types, strings, symbols, arrays, dictionaries, `array<...>`,
//! `dense<...>`, types as attributes, aliases, the typed `#stablehlo` attributes, and anything
//! else (other dialects, affine maps) kept as opaque text after a balanced skip.

use super::cursor::{Number, NumberKind};
use super::parser::Parser;
use crate::ir::attr::Attr;
use crate::ir::float;
use crate::ir::types::ElementType;
use crate::Result;

/// Bare keywords that start a type when they appear where an attribute is expected.
const TYPE_KEYWORDS: &[&str] = &["tensor", "tuple", "memref", "complex", "none", "vector"];

impl Parser<'_> {
    /// An attribute value.
    pub fn parse_attr(&mut self) -> Result<Attr> {
        self.nested(|p| p.parse_attr_inner())
    }

    fn parse_attr_inner(&mut self) -> Result<Attr> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        match self.cur.byte_at(0) {
            Some(b'"') => {
                let s = self.cur.string_lit()?.into_owned();
                if self.cur.peek() == Some(b':') && self.cur.byte_at(1) != Some(b':') {
                    self.cur.pos += 1;
                    self.cur.skip_ws();
                    let tpos = self.cur.pos;
                    self.type_attr(tpos)?;
                }
                Ok(Attr::String(s))
            }
            Some(b'@') => self.symbol_attr(),
            Some(b'[') => {
                self.cur.pos += 1;
                let mut items = Vec::new();
                if !self.cur.eat(b']') {
                    loop {
                        items.push(self.parse_attr()?);
                        if self.cur.eat(b']') {
                            break;
                        }
                        self.cur.expect(b',')?;
                    }
                }
                Ok(Attr::Array(items))
            }
            Some(b'{') => Ok(Attr::Dict(self.attr_dict()?)),
            Some(b'#') => {
                self.cur.pos += 1;
                let name = self.cur.suffix_id()?.into_owned();
                if self.cur.byte_at(0) == Some(b'<') {
                    return self.dialect_attr(&name, start);
                }
                if self.is_attr_alias(&name) {
                    return self.attr_alias(&name, start);
                }
                Ok(Attr::Opaque(format!("#{name}")))
            }
            Some(b'!') | Some(b'(') => self.type_attr(start),
            Some(c) if c.is_ascii_digit() || c == b'-' => self.number_attr(),
            _ => {
                let Some(id) = self.cur.peek_bare_id() else {
                    return Err(self.cur.expected("an attribute"));
                };
                match id {
                    "true" | "false" => {
                        self.cur.pos += id.len();
                        if self.cur.peek() == Some(b':') && self.cur.byte_at(1) != Some(b':') {
                            self.cur.pos += 1;
                            self.parse_attr_type()?;
                        }
                        Ok(Attr::Bool(id == "true"))
                    }
                    "unit" => {
                        self.cur.pos += id.len();
                        Ok(Attr::Unit)
                    }
                    "dense" => {
                        self.cur.pos += id.len();
                        self.dense_attr()
                    }
                    "dense_resource" => {
                        self.cur.pos += id.len();
                        self.dense_resource_attr()
                    }
                    "array" => {
                        self.cur.pos += id.len();
                        self.dense_array_attr()
                    }
                    _ if TYPE_KEYWORDS.contains(&id)
                        || ElementType::from_mlir_name(id).is_some() =>
                    {
                        self.type_attr(start)
                    }
                    _ => {
                        self.cur.pos += id.len();
                        if self.cur.byte_at(0) == Some(b'<') || self.cur.byte_at(0) == Some(b'[') {
                            self.cur.skip_balanced()?;
                            if self.cur.byte_at(0) == Some(b'<') {
                                self.cur.skip_balanced()?;
                            }
                            let text = self.cur.src.get(start..self.cur.pos).unwrap_or("");
                            return Ok(Attr::Opaque(text.to_string()));
                        }
                        Err(self
                            .cur
                            .error_at(start, format!("unknown attribute `{id}`")))
                    }
                }
            }
        }
    }

    /// `@name`, `@"name"`; nested references `@a::@b` are kept opaque.
    fn symbol_attr(&mut self) -> Result<Attr> {
        let start = self.cur.pos;
        let Some(name) = self.cur.sigil_id(b'@')? else {
            return Err(self.cur.expected("a symbol"));
        };
        if self.cur.rest().starts_with("::") {
            while self.cur.eat_str("::") {
                self.cur.sigil_id(b'@')?;
            }
            let text = self.cur.src.get(start..self.cur.pos).unwrap_or("");
            return Ok(Attr::Opaque(text.to_string()));
        }
        Ok(Attr::Symbol(name.into_owned()))
    }

    /// A type written as an attribute: an IR type, or opaque text for scalar and function
    /// types the IR has no value type for.
    fn type_attr(&mut self, start: usize) -> Result<Attr> {
        if self.cur.peek() == Some(b'(') {
            self.function_type()?;
        } else if let Some(id) = self.cur.peek_bare_id() {
            if id == "complex" || ElementType::from_mlir_name(id).is_some() || id == "none" {
                if id == "none" {
                    self.cur.pos += id.len();
                } else {
                    self.scalar_type(start)?;
                }
                let text = self.cur.src.get(start..self.cur.pos).unwrap_or("");
                return Ok(Attr::Opaque(text.to_string()));
            }
            if id == "vector" {
                self.cur.pos += id.len();
                self.cur.skip_balanced()?;
                let text = self.cur.src.get(start..self.cur.pos).unwrap_or("");
                return Ok(Attr::Opaque(text.to_string()));
            }
            return Ok(Attr::Type(self.parse_type()?));
        } else {
            return Ok(Attr::Type(self.parse_type()?));
        }
        let text = self.cur.src.get(start..self.cur.pos).unwrap_or("");
        Ok(Attr::Opaque(text.to_string()))
    }

    /// The type after `:` of a scalar attribute.
    fn parse_attr_type(&mut self) -> Result<ElementType> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        self.scalar_type(start)
    }

    /// `1`, `-2 : i32`, `1.5 : f32`, `0x7FC00000 : f32` (bits), `1.0` (f64).
    fn number_attr(&mut self) -> Result<Attr> {
        let start = self.cur.pos;
        let n = self.cur.number()?;
        let ty = if self.cur.peek() == Some(b':') && self.cur.byte_at(1) != Some(b':') {
            self.cur.pos += 1;
            Some(self.parse_attr_type()?)
        } else {
            None
        };
        let ty = ty.unwrap_or(if n.kind == NumberKind::Float {
            ElementType::F64
        } else {
            ElementType::I64
        });
        if ty.is_float() {
            let v = float_value(n, ty)
                .ok_or_else(|| self.cur.error_at(start, "bad floating-point literal"))?;
            return Ok(Attr::Float(v, ty));
        }
        if ty.is_complex() {
            return Err(self
                .cur
                .error_at(start, "complex scalar attributes are not supported"));
        }
        let v = n
            .to_i128()
            .ok_or_else(|| self.cur.error_at(start, "expected an integer literal"))?;
        Ok(Attr::Int(v, ty))
    }

    /// `{name = value, flag, "quoted" = value}`.
    pub fn attr_dict(&mut self) -> Result<Vec<(String, Attr)>> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        self.cur.expect(b'{')?;
        self.nested(|p| {
            let mut out = Vec::new();
            if p.cur.eat(b'}') {
                return Ok(out);
            }
            loop {
                let name = match p.cur.peek() {
                    Some(b'"') => p.cur.string_lit()?.into_owned(),
                    _ => p.cur.expect_bare_id("an attribute name")?.to_string(),
                };
                let value = if p.cur.eat(b'=') {
                    p.parse_attr()?
                } else {
                    Attr::Unit
                };
                out.push((name, value));
                if p.cur.eat(b'}') {
                    return p.sorted_attrs(out, start);
                }
                p.cur.expect(b',')?;
            }
        })
    }

    /// Sorts attributes by name, as MLIR dictionaries are; duplicate names are an error.
    pub fn sorted_attrs(
        &self,
        mut attrs: Vec<(String, Attr)>,
        pos: usize,
    ) -> Result<Vec<(String, Attr)>> {
        attrs.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = attrs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(self
                .cur
                .error_at(pos, format!("duplicate attribute `{}`", w[0].0)));
        }
        Ok(attrs)
    }

    /// An optional attribute dictionary.
    pub fn opt_attr_dict(&mut self) -> Result<Vec<(String, Attr)>> {
        if self.cur.peek() == Some(b'{') {
            self.attr_dict()
        } else {
            Ok(Vec::new())
        }
    }

    /// `array<i64: 1, 2>`, `array<i1: true>`, `array<f32: 1.5>` (floats kept as bit patterns).
    fn dense_array_attr(&mut self) -> Result<Attr> {
        self.cur.expect(b'<')?;
        self.cur.skip_ws();
        let start = self.cur.pos;
        let t = self.scalar_type(start)?;
        let mut values = Vec::new();
        if self.cur.eat(b':') {
            loop {
                self.cur.skip_ws();
                let item = self.cur.pos;
                let v = if t.is_pred() {
                    if self.cur.eat_keyword("true") {
                        1
                    } else if self.cur.eat_keyword("false") {
                        0
                    } else {
                        (self.cur.int_lit()? != 0) as i64
                    }
                } else if t.is_float() {
                    let n = self.cur.number()?;
                    let bits = float_bits(n, t)
                        .ok_or_else(|| self.cur.error_at(item, "bad floating-point literal"))?;
                    bits as i64
                } else {
                    self.cur.int_lit()?
                };
                values.push(v);
                if !self.cur.eat(b',') {
                    break;
                }
            }
        }
        self.cur.expect(b'>')?;
        Ok(Attr::DenseArray(t, values))
    }
}

/// The value of a float literal for type `t`: decimal text rounded once to `t`, or a hex bit
/// pattern of `t`.
pub(super) fn float_value(n: Number, t: ElementType) -> Option<f64> {
    if n.kind == NumberKind::Hex {
        let bits = u64::from_str_radix(n.digits, 16).ok()?;
        if n.negative {
            return None;
        }
        return Some(float::decode(t, bits));
    }
    match t {
        ElementType::F32 => n.to_f32().map(f64::from),
        ElementType::F64 => n.to_f64(),
        _ => n.to_f64().map(|v| float::decode(t, float::encode(t, v))),
    }
}

/// The bit pattern of a float literal in type `t`.
pub(super) fn float_bits(n: Number, t: ElementType) -> Option<u64> {
    if n.kind == NumberKind::Hex {
        return if n.negative {
            None
        } else {
            u64::from_str_radix(n.digits, 16).ok()
        };
    }
    match t {
        ElementType::F32 => n.to_f32().map(|v| v.to_bits() as u64),
        ElementType::F64 => n.to_f64().map(f64::to_bits),
        _ => n.to_f64().map(|v| float::encode(t, v)),
    }
}
