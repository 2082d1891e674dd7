//! Types: `tensor<2x?x3xf32, #stablehlo.bounds<...>>`, element types (incl. `complex<...>`
//! and `!quant.uniform<...>`), `tuple<...>`, `!stablehlo.token`, `!stablehlo.future<...>`,
//! `memref<...>`, type aliases, and the function types of op signatures.

use super::parser::Parser;
use crate::ir::types::{ElementType, TensorType, Type, UniformQuantization, DYNAMIC};
use crate::Result;

/// What follows the `:` of a pretty op: a plain type or a function type.
pub(super) enum SigType {
    /// A value type.
    Value(Type),
    /// `(inputs) -> results`.
    Func(Vec<Type>, Vec<Type>),
}

/// The type signature of a pretty op (`T`, `T, T`, `(T, T) -> T`, `T -> T`, `T, T -> (T, T)`).
pub(super) struct Signature {
    /// Operand types, when the signature names them.
    pub inputs: Option<Vec<Type>>,
    /// Result types for a functional signature; the plain type list otherwise.
    pub types: Vec<Type>,
}

impl Parser<'_> {
    /// A value type.
    pub fn parse_type(&mut self) -> Result<Type> {
        self.nested(|p| p.parse_type_inner())
    }

    fn parse_type_inner(&mut self) -> Result<Type> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        if let Some(name) = self.cur.sigil_id(b'!')? {
            return match name.as_ref() {
                "stablehlo.token" => Ok(Type::Token),
                "stablehlo.future" => {
                    self.cur.expect(b'<')?;
                    Ok(Type::Future(self.type_list_until(b'>')?))
                }
                other if self.cur.byte_at(0) != Some(b'<') => self.type_alias(other, start),
                other => Err(self
                    .cur
                    .error_at(start, format!("unsupported type `!{other}<...>`"))),
            };
        }
        let Some(id) = self.cur.bare_id() else {
            return Err(self.cur.expected("a type"));
        };
        match id {
            "tensor" => {
                self.cur.expect(b'<')?;
                Ok(Type::Tensor(self.tensor_body(false)?))
            }
            "memref" => {
                self.cur.expect(b'<')?;
                Ok(Type::Buffer(self.tensor_body(true)?))
            }
            "tuple" => {
                self.cur.expect(b'<')?;
                Ok(Type::Tuple(self.type_list_until(b'>')?))
            }
            other => {
                let what = if ElementType::from_mlir_name(other).is_some() || other == "complex" {
                    format!("scalar type `{other}` is not supported as a value type")
                } else {
                    format!("unknown type `{other}`")
                };
                Err(self.cur.error_at(start, what))
            }
        }
    }

    /// Types separated by commas up to the closing `close` (consumed); may be empty.
    fn type_list_until(&mut self, close: u8) -> Result<Vec<Type>> {
        let mut out = Vec::new();
        if self.cur.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.parse_type()?);
            if self.cur.eat(close) {
                return Ok(out);
            }
            self.cur.expect(b',')?;
        }
    }

    /// `( T, ... )`.
    pub fn paren_type_list(&mut self) -> Result<Vec<Type>> {
        self.cur.expect(b'(')?;
        self.type_list_until(b')')
    }

    /// `(inputs) -> results` where results are one type or a parenthesized list.
    pub fn function_type(&mut self) -> Result<(Vec<Type>, Vec<Type>)> {
        let inputs = self.paren_type_list()?;
        self.cur.expect_arrow()?;
        Ok((inputs, self.result_types()?))
    }

    /// The result side of a function type: `T` or `(T, ...)`.
    pub fn result_types(&mut self) -> Result<Vec<Type>> {
        if self.cur.peek() == Some(b'(') {
            self.paren_type_list()
        } else {
            Ok(vec![self.parse_type()?])
        }
    }

    /// A type or a function type.
    pub fn sig_type(&mut self) -> Result<SigType> {
        if self.cur.peek() == Some(b'(') {
            let (i, r) = self.function_type()?;
            Ok(SigType::Func(i, r))
        } else {
            Ok(SigType::Value(self.parse_type()?))
        }
    }

    /// The signature after the `:` of a pretty op.
    pub fn signature(&mut self) -> Result<Signature> {
        let start = self.cur.pos;
        let mut list = vec![self.sig_type()?];
        while self.cur.eat(b',') {
            list.push(self.sig_type()?);
        }
        if self.cur.eat_arrow() {
            let inputs = list
                .into_iter()
                .map(|t| match t {
                    SigType::Value(t) => Ok(t),
                    SigType::Func(..) => Err(self.cur.error_at(start, "unexpected function type")),
                })
                .collect::<Result<Vec<_>>>()?;
            return Ok(Signature {
                inputs: Some(inputs),
                types: self.result_types()?,
            });
        }
        if list.len() == 1 {
            if let Some(SigType::Func(..)) = list.first() {
                if let Some(SigType::Func(i, r)) = list.pop() {
                    return Ok(Signature {
                        inputs: Some(i),
                        types: r,
                    });
                }
            }
        }
        let types = list
            .into_iter()
            .map(|t| match t {
                SigType::Value(t) => Ok(t),
                SigType::Func(..) => Err(self.cur.error_at(start, "unexpected function type")),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Signature {
            inputs: None,
            types,
        })
    }

    /// The inside of `tensor<...>` / `memref<...>` after `<`, including the closing `>`.
    fn tensor_body(&mut self, memref: bool) -> Result<TensorType> {
        let mut shape = Vec::new();
        self.cur.skip_ws();
        loop {
            let c = self.cur.byte_at(0);
            if c == Some(b'?') {
                if self.cur.byte_at(1) != Some(b'x') {
                    return Err(self.cur.expected("`x` after `?`"));
                }
                shape.push(DYNAMIC);
                self.cur.pos += 2;
            } else if c.is_some_and(|c| c.is_ascii_digit()) {
                let start = self.cur.pos;
                let len = self
                    .cur
                    .rest()
                    .bytes()
                    .take_while(u8::is_ascii_digit)
                    .count();
                let digits = self.cur.rest().get(..len).unwrap_or("");
                let d: i64 = digits
                    .parse()
                    .map_err(|_| self.cur.error_at(start, "dimension size too large"))?;
                self.cur.pos += len;
                if self.cur.byte_at(0) != Some(b'x') {
                    return Err(self.cur.expected("`x` after a dimension size"));
                }
                self.cur.pos += 1;
                shape.push(d);
            } else if c == Some(b'*') {
                return Err(self.cur.error("unranked types are not supported"));
            } else {
                break;
            }
            if shape.len() > 4096 {
                return Err(self.cur.error("too many dimensions"));
            }
        }
        let (dtype, quant) = self.element_type()?;
        let mut ty = TensorType::new(shape, dtype);
        ty.quant = quant;
        while self.cur.eat(b',') {
            if memref {
                self.parse_attr()?;
            } else {
                ty.bounds = self.tensor_encoding()?;
            }
        }
        self.cur.expect(b'>')?;
        if let Some(b) = &ty.bounds {
            if b.len() != ty.rank() {
                return Err(self.cur.error(format!(
                    "{} bounds for a rank-{} tensor",
                    b.len(),
                    ty.rank()
                )));
            }
        }
        Ok(ty)
    }

    /// A tensor encoding: `#stablehlo.bounds<...>` or `#stablehlo.type_extensions<bounds = [...]>`
    /// give bounds; other encodings are read and dropped.
    fn tensor_encoding(&mut self) -> Result<Option<Vec<i64>>> {
        if self.cur.eat_str("#stablehlo.bounds<") {
            let mut b = Vec::new();
            if !self.cur.eat(b'>') {
                loop {
                    b.push(self.dim_size()?);
                    if self.cur.eat(b'>') {
                        break;
                    }
                    self.cur.expect(b',')?;
                }
            }
            return Ok(Some(b));
        }
        if self.cur.eat_str("#stablehlo.type_extensions<") {
            self.cur.expect_keyword("bounds")?;
            self.cur.expect(b'=')?;
            let b = self.dim_list()?;
            self.cur.expect(b'>')?;
            return Ok(Some(b));
        }
        self.parse_attr()?;
        Ok(None)
    }

    /// An integer or `?` (dynamic).
    pub fn dim_size(&mut self) -> Result<i64> {
        if self.cur.eat(b'?') {
            Ok(DYNAMIC)
        } else {
            self.cur.int_lit()
        }
    }

    /// `[d, ?, ...]`.
    pub fn dim_list(&mut self) -> Result<Vec<i64>> {
        self.cur.expect(b'[')?;
        let mut out = Vec::new();
        if self.cur.eat(b']') {
            return Ok(out);
        }
        loop {
            out.push(self.dim_size()?);
            if self.cur.eat(b']') {
                return Ok(out);
            }
            self.cur.expect(b',')?;
        }
    }

    /// An element type, with quantization parameters for `!quant.uniform<...>`.
    pub fn element_type(&mut self) -> Result<(ElementType, Option<Box<UniformQuantization>>)> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        if self.cur.eat_str("!quant.uniform<") {
            let q = self.quant_uniform()?;
            return Ok((q.storage_type, Some(Box::new(q))));
        }
        Ok((self.scalar_type(start)?, None))
    }

    /// A plain element type name (`f32`, `ui8`, `index`, `complex<f32>`).
    pub fn scalar_type(&mut self, start: usize) -> Result<ElementType> {
        self.nested(|p| p.scalar_type_inner(start))
    }

    fn scalar_type_inner(&mut self, start: usize) -> Result<ElementType> {
        let Some(id) = self.cur.bare_id() else {
            return Err(self.cur.expected("an element type"));
        };
        if id == "complex" {
            self.cur.expect(b'<')?;
            let part_start = self.cur.pos;
            let part = self.scalar_type(part_start)?;
            self.cur.expect(b'>')?;
            return part.complex_of().ok_or_else(|| {
                self.cur
                    .error_at(start, format!("unsupported type `complex<{part}>`"))
            });
        }
        ElementType::from_mlir_name(id).ok_or_else(|| {
            self.cur
                .error_at(start, format!("unknown element type `{id}`"))
        })
    }

    /// The inside of `!quant.uniform<...>` after `<`:
    /// `storage[<min:max>]:expressed[:axis], scale[:zp] | {scale[:zp], ...}>`.
    fn quant_uniform(&mut self) -> Result<UniformQuantization> {
        let start = self.cur.pos;
        let Some(storage) = self.cur.bare_id() else {
            return Err(self.cur.expected("a quantized storage type"));
        };
        let storage_type = quant_storage_type(storage).ok_or_else(|| {
            self.cur
                .error_at(start, format!("bad storage type `{storage}`"))
        })?;
        let (mut storage_min, mut storage_max) = crate::ir::types::int_range(storage_type);
        if self.cur.eat(b'<') {
            storage_min = self.cur.int_lit()?;
            self.cur.expect(b':')?;
            storage_max = self.cur.int_lit()?;
            self.cur.expect(b'>')?;
        }
        self.cur.expect(b':')?;
        let expressed_start = self.cur.pos;
        let expressed_type = self.scalar_type(expressed_start)?;
        let quantization_dimension = if self.cur.eat(b':') {
            Some(self.cur.int_lit()?)
        } else {
            None
        };
        self.cur.expect(b',')?;
        let mut scales = Vec::new();
        let mut zero_points = Vec::new();
        if self.cur.eat(b'{') {
            loop {
                let (s, z) = self.quant_param()?;
                scales.push(s);
                zero_points.push(z);
                if self.cur.eat(b'}') {
                    break;
                }
                self.cur.expect(b',')?;
            }
        } else {
            let (s, z) = self.quant_param()?;
            scales.push(s);
            zero_points.push(z);
        }
        self.cur.expect(b'>')?;
        Ok(UniformQuantization {
            storage_type,
            storage_min,
            storage_max,
            expressed_type,
            quantization_dimension,
            scales,
            zero_points,
        })
    }

    /// `scale[:zero_point]`.
    fn quant_param(&mut self) -> Result<(f64, i64)> {
        let start = self.cur.pos;
        let scale = self
            .cur
            .number()?
            .to_f64()
            .ok_or_else(|| self.cur.error_at(start, "bad scale"))?;
        let zp = if self.cur.eat(b':') {
            self.cur.int_lit()?
        } else {
            0
        };
        Ok((scale, zp))
    }
}

/// The storage type of a quantized type: `i8`, `u8`, `si8`, `ui8`, ...
fn quant_storage_type(name: &str) -> Option<ElementType> {
    if let Some(bits) = name.strip_prefix('u') {
        let bits = bits.strip_prefix('i').unwrap_or(bits);
        return ElementType::from_mlir_name(&format!("ui{bits}"));
    }
    let t = ElementType::from_mlir_name(name)?;
    t.is_signed_int().then_some(t)
}
