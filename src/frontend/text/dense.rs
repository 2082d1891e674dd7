//! Dense element attributes: `dense<splat>`, nested lists, `dense<"0x...">` hex blobs of raw
//! little-endian host bytes (one byte per `i1`, or MLIR's older bit-packed `i1` form),
//! complex `(re, im)` pairs, float bit patterns (`0x7FC00000`), `dense<>`, and
//! `dense_resource<name>` blobs from the `{-# dialect_resources #-}` section.

use super::attrs::float_bits;
use super::cursor::{Number, NumberKind, Pos};
use super::parser::Parser;
use crate::ir::attr::Attr;
use crate::ir::literal::{push_scalar, Literal, Scalar};
use crate::ir::types::{ElementType, TensorType, Type};
use crate::Result;

/// The largest constant accepted, in host bytes.
const MAX_CONSTANT_BYTES: usize = 1 << 31;

/// One element as written.
enum Elem<'a> {
    Num(Number<'a>),
    Bool(bool),
    Special(f64),
    Complex(Box<Elem<'a>>, Box<Elem<'a>>),
}

/// The written value of a `dense<...>`.
enum Body<'a> {
    /// `dense<>`.
    Empty,
    /// `dense<"0x...">` (the hex digits after `0x`).
    Hex(&'a str),
    /// Elements row-major, the nesting shape, and whether it was a bare splat.
    Elements(Vec<Elem<'a>>, Vec<i64>, bool),
}

impl<'a> Parser<'a> {
    /// `dense<...> : tensor<...>` after the `dense` keyword.
    pub fn dense_attr(&mut self) -> Result<Attr> {
        self.cur.expect(b'<')?;
        self.cur.skip_ws();
        let body_pos = self.cur.pos;
        let body = if self.cur.eat(b'>') {
            Body::Empty
        } else {
            let b = if self.cur.peek() == Some(b'"') {
                let raw = self.cur.string_raw()?;
                let hex = raw
                    .strip_prefix("0x")
                    .or_else(|| raw.strip_prefix("0X"))
                    .ok_or_else(|| {
                        self.cur
                            .error_at(body_pos, "string elements are not supported")
                    })?;
                Body::Hex(hex)
            } else if self.cur.peek() == Some(b'[') {
                let mut elems = Vec::new();
                let shape = self.dense_list(&mut elems)?;
                Body::Elements(elems, shape, false)
            } else {
                let e = self.dense_elem()?;
                Body::Elements(vec![e], Vec::new(), true)
            };
            self.cur.expect(b'>')?;
            b
        };
        self.cur.expect(b':')?;
        self.cur.skip_ws();
        let type_pos = self.cur.pos;
        let ty = match self.parse_type()? {
            Type::Tensor(t) => t,
            other => {
                return Err(self
                    .cur
                    .error_at(type_pos, format!("dense elements of type {other}")))
            }
        };
        if !ty.is_static() {
            return Err(self
                .cur
                .error_at(type_pos, format!("dense elements of dynamic type {ty}")));
        }
        let data = self.dense_bytes(body, &ty, body_pos)?;
        let splat = data.len() == ty.dtype.byte_size() && ty.byte_size() != data.len();
        if splat {
            Literal::splat_bytes(ty, data)
        } else {
            Literal::new(ty, data)
        }
        .map(Attr::Dense)
        .map_err(|e| self.cur.error_at(body_pos, e.message))
    }

    /// `dense_resource<name> : tensor<...>` after the keyword.
    pub fn dense_resource_attr(&mut self) -> Result<Attr> {
        self.cur.expect(b'<')?;
        self.cur.skip_ws();
        let pos = self.cur.pos;
        let name = self.cur.suffix_id()?.into_owned();
        self.cur.expect(b'>')?;
        self.cur.expect(b':')?;
        let ty = match self.parse_type()? {
            Type::Tensor(t) if t.is_static() => t,
            other => {
                return Err(self
                    .cur
                    .error_at(pos, format!("dense_resource of type {other}")))
            }
        };
        let n = self.constant_elements(&ty, pos)?;
        let data = self.resource(&name, pos)?;
        let data = if ty.dtype.is_pred() {
            unpack_bools(data, n)
                .ok_or_else(|| self.cur.error_at(pos, "resource does not fit the type"))?
        } else {
            data
        };
        Literal::new(ty, data)
            .map(Attr::Dense)
            .map_err(|e| self.cur.error_at(pos, e.message))
    }

    /// The element count of constant type `ty`, refusing sizes past `MAX_CONSTANT_BYTES`.
    fn constant_elements(&self, ty: &TensorType, pos: Pos) -> Result<usize> {
        let n = ty.shape.iter().try_fold(1usize, |acc, &d| {
            usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        });
        match n {
            Some(n) if n.saturating_mul(ty.dtype.byte_size()) <= MAX_CONSTANT_BYTES => Ok(n),
            _ => Err(self
                .cur
                .error_at(pos, format!("constant of type {ty} is too large"))),
        }
    }

    /// A bracketed list (nested lists or elements); returns its shape.
    fn dense_list(&mut self, out: &mut Vec<Elem<'a>>) -> Result<Vec<i64>> {
        self.nested(|p| {
            p.cur.expect(b'[')?;
            let start = p.cur.pos;
            let mut inner: Option<Vec<i64>> = None;
            let mut count = 0i64;
            if p.cur.eat(b']') {
                return Ok(vec![0]);
            }
            loop {
                let shape = if p.cur.peek() == Some(b'[') {
                    p.dense_list(out)?
                } else {
                    out.push(p.dense_elem()?);
                    Vec::new()
                };
                match &inner {
                    None => inner = Some(shape),
                    Some(s) if *s == shape => {}
                    Some(_) => return Err(p.cur.error_at(start, "non-rectangular dense list")),
                }
                count += 1;
                if p.cur.eat(b']') {
                    break;
                }
                p.cur.expect(b',')?;
            }
            let mut shape = vec![count];
            shape.extend(inner.unwrap_or_default());
            Ok(shape)
        })
    }

    /// One element: number, `true`/`false`, `inf`/`nan`, or `(re, im)`.
    fn dense_elem(&mut self) -> Result<Elem<'a>> {
        self.nested(|p| p.dense_elem_inner())
    }

    fn dense_elem_inner(&mut self) -> Result<Elem<'a>> {
        if self.cur.eat(b'(') {
            let re = self.dense_elem()?;
            self.cur.expect(b',')?;
            let im = self.dense_elem()?;
            self.cur.expect(b')')?;
            return Ok(Elem::Complex(Box::new(re), Box::new(im)));
        }
        let negative = self.cur.peek() == Some(b'-') && !self.cur.at_number();
        if negative {
            self.cur.pos += 1;
        }
        if self.cur.at_number() {
            return Ok(Elem::Num(self.cur.number()?));
        }
        let sign = if negative { -1.0 } else { 1.0 };
        match self.cur.bare_id() {
            Some("true") if !negative => Ok(Elem::Bool(true)),
            Some("false") if !negative => Ok(Elem::Bool(false)),
            Some("inf") => Ok(Elem::Special(sign * f64::INFINITY)),
            Some("nan") => Ok(Elem::Special(f64::NAN)),
            _ => Err(self.cur.expected("a dense element")),
        }
    }

    /// The host bytes of `body` for type `ty`.
    fn dense_bytes(&self, body: Body, ty: &TensorType, pos: Pos) -> Result<Vec<u8>> {
        let n = self.constant_elements(ty, pos)?;
        let size = ty.dtype.byte_size();
        match body {
            Body::Empty => {
                if n != 0 {
                    return Err(self.cur.error_at(pos, format!("empty dense for type {ty}")));
                }
                Ok(Vec::new())
            }
            Body::Hex(hex) => {
                let bytes = decode_hex_digits(hex)
                    .ok_or_else(|| self.cur.error_at(pos, "malformed hex data"))?;
                if ty.dtype.is_pred() {
                    return unpack_bools(bytes, n)
                        .ok_or_else(|| self.cur.error_at(pos, "hex data does not fit the type"));
                }
                if bytes.len() == n * size {
                    Ok(bytes)
                } else if bytes.len() == size {
                    // A splat stays one element (`Literal::splat_bytes`).
                    Ok(bytes)
                } else {
                    Err(self.cur.error_at(
                        pos,
                        format!(
                            "hex data has {} bytes, type {ty} needs {}",
                            bytes.len(),
                            n * size
                        ),
                    ))
                }
            }
            Body::Elements(elems, shape, splat) => {
                let exact = elems.len() == n && (shape == ty.shape || n == 0);
                if !splat && !exact && elems.len() != 1 {
                    return Err(self
                        .cur
                        .error_at(pos, format!("dense list of shape {shape:?} for type {ty}")));
                }
                let mut one = Vec::with_capacity(size * elems.len());
                for e in &elems {
                    self.push_elem(&mut one, ty.dtype, e, pos)?;
                }
                if (exact && !splat) || n > 0 {
                    // A splat stays one element (`Literal::splat_bytes`).
                    Ok(one)
                } else {
                    Ok(Vec::new())
                }
            }
        }
    }

    /// Appends the bytes of element `e` in type `t`.
    fn push_elem(&self, out: &mut Vec<u8>, t: ElementType, e: &Elem, pos: Pos) -> Result<()> {
        let bad = |what: &str| {
            self.cur
                .error_at(pos, format!("{what} for element type {t}"))
        };
        if let Some(part) = t.complex_part() {
            let Elem::Complex(re, im) = e else {
                return Err(bad("expected a complex `(re, im)` element"));
            };
            self.push_elem(out, part, re, pos)?;
            return self.push_elem(out, part, im, pos);
        }
        match e {
            Elem::Complex(..) => Err(bad("unexpected complex element")),
            Elem::Bool(b) => {
                if t.is_pred() || t.is_int() {
                    push_scalar(out, t, Scalar::Int(*b as i128));
                    Ok(())
                } else {
                    Err(bad("unexpected boolean"))
                }
            }
            Elem::Special(v) => {
                if t.is_float() {
                    push_scalar(out, t, Scalar::Float(*v));
                    Ok(())
                } else {
                    Err(bad("unexpected inf/nan"))
                }
            }
            Elem::Num(n) => {
                if t.is_float() {
                    let bits = float_bits(*n, t).ok_or_else(|| bad("bad float literal"))?;
                    if n.kind == NumberKind::Hex && t.bit_width() < 64 && bits >> t.bit_width() != 0
                    {
                        return Err(bad("hex bit pattern too wide"));
                    }
                    out.extend_from_slice(&bits.to_le_bytes()[..t.byte_size().min(8)]);
                    return Ok(());
                }
                let v = n.to_i128().ok_or_else(|| bad("expected an integer"))?;
                let bits = t.bit_width();
                let (lo, hi) = if t.is_unsigned_int() || t.is_pred() {
                    (0i128, (1i128 << bits) - 1)
                } else {
                    (-(1i128 << (bits - 1)), (1i128 << bits) - 1)
                };
                if v < lo || v > hi {
                    return Err(bad(&format!("integer {v} out of range")));
                }
                push_scalar(out, t, Scalar::Int(v));
                Ok(())
            }
        }
    }
}

/// Bytes of an `i1` blob: one byte per element, a one-byte splat (`0x00`, `0x01`, or `0xFF` as
/// older MLIR wrote it), or MLIR's older bit-packed form; normalized to 0/1 bytes. `None` if
/// the length fits none of these.
fn unpack_bools(bytes: Vec<u8>, n: usize) -> Option<Vec<u8>> {
    let single = match bytes.as_slice() {
        [b @ (0x00 | 0x01 | 0xFF)] => Some(*b != 0),
        _ => None,
    };
    if bytes.len() == n {
        Some(bytes.into_iter().map(|b| (b != 0) as u8).collect())
    } else if let Some(v) = single {
        Some(vec![v as u8; n])
    } else if bytes.len() == n.div_ceil(8) {
        Some(
            (0..n)
                .map(|i| bytes.get(i / 8).map_or(0, |b| (b >> (i % 8)) & 1))
                .collect(),
        )
    } else {
        None
    }
}

/// Decodes `"0x..."` text (with its prefix) into bytes.
pub(super) fn decode_hex(raw: &str) -> Option<Vec<u8>> {
    decode_hex_digits(raw.strip_prefix("0x").or_else(|| raw.strip_prefix("0X"))?)
}

/// The value of each ASCII byte as a hex digit, `0xFF` for non-digits.
const HEX_DIGIT: [u8; 256] = {
    let mut t = [0xFF; 256];
    let mut i = 0;
    while i < 16 {
        t[b"0123456789abcdef"[i] as usize] = i as u8;
        t[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Decodes hex digits (an even number of them) into bytes. A plain indexed loop: it keeps
/// multi-megabyte blobs fast in debug builds, and `2 * i + 1 < digits.len()` always holds.
fn decode_hex_digits(hex: &str) -> Option<Vec<u8>> {
    let digits = hex.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    let n = digits.len() / 2;
    let mut out = vec![0u8; n];
    let mut bad = 0u8;
    let mut i = 0;
    while i < n {
        let h = HEX_DIGIT[digits[2 * i] as usize];
        let l = HEX_DIGIT[digits[2 * i + 1] as usize];
        bad |= h | l;
        out[i] = h << 4 | (l & 0x0F);
        i += 1;
    }
    (bad & 0xF0 == 0).then_some(out)
}
