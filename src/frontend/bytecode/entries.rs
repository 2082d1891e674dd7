//! Lazy decoding of attribute and type entries by index, with a cache, a guard against entries
//! that refer to themselves, a nesting limit, and a budget for constants that expand (splats),
//! plus the primitive readers the dialect decoders share (lists, APInt, APFloat, blobs).

use std::rc::Rc;

use super::container::{Container, Entry};
use super::cursor::{error_at, Cursor};
use super::value::{BAttr, BType};
use super::{builtin, vhlo_attrs, vhlo_types};
use crate::error::{Error, Result};
use crate::ir::float;
use crate::ir::ElementType;

/// Deepest chain of entries referring to entries that is decoded.
const MAX_ENTRY_DEPTH: usize = 96;

#[derive(Clone)]
enum State<T> {
    Unread,
    InProgress,
    Done(T),
}

/// Which decoder a dialect's custom encodings go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Builtin,
    Vhlo,
    Other,
}

/// The attribute and type tables of one file, decoded on demand.
pub(crate) struct Entries<'c, 'a> {
    pub c: &'c Container<'a>,
    kinds: Vec<Kind>,
    attrs: Vec<State<Rc<BAttr>>>,
    types: Vec<State<Rc<BType>>>,
    depth: usize,
}

impl<'c, 'a> Entries<'c, 'a> {
    /// Tables over the entries of `c`.
    pub fn new(c: &'c Container<'a>) -> Self {
        let kinds = c
            .dialects
            .iter()
            .map(|d| match d.name.as_str() {
                "builtin" => Kind::Builtin,
                "vhlo" => Kind::Vhlo,
                _ => Kind::Other,
            })
            .collect();
        Entries {
            c,
            kinds,
            attrs: vec![State::Unread; c.attrs.len()],
            types: vec![State::Unread; c.types.len()],
            depth: 0,
        }
    }

    /// The attribute at `index`.
    pub fn attr(&mut self, index: u64) -> Result<Rc<BAttr>> {
        let i = checked_index(index, self.attrs.len(), "attribute")?;
        match &self.attrs[i] {
            State::Done(a) => return Ok(a.clone()),
            State::InProgress => {
                return Err(self.c.attrs[i]
                    .data
                    .error(format!("attribute {index} refers to itself")))
            }
            State::Unread => {}
        }
        let entry = self.c.attrs[i].clone();
        self.attrs[i] = State::InProgress;
        let decoded = self.nested(&entry, |e, cur| e.decode_attr(&entry, cur));
        let a = Rc::new(decoded.inspect_err(|_| self.attrs[i] = State::Unread)?);
        self.attrs[i] = State::Done(a.clone());
        Ok(a)
    }

    /// The type at `index`.
    pub fn ty(&mut self, index: u64) -> Result<Rc<BType>> {
        let i = checked_index(index, self.types.len(), "type")?;
        match &self.types[i] {
            State::Done(t) => return Ok(t.clone()),
            State::InProgress => {
                return Err(self.c.types[i]
                    .data
                    .error(format!("type {index} refers to itself")))
            }
            State::Unread => {}
        }
        let entry = self.c.types[i].clone();
        self.types[i] = State::InProgress;
        let decoded = self.nested(&entry, |e, cur| e.decode_type(&entry, cur));
        let t = Rc::new(decoded.inspect_err(|_| self.types[i] = State::Unread)?);
        self.types[i] = State::Done(t.clone());
        Ok(t)
    }

    fn nested<T>(
        &mut self,
        entry: &Entry<'a>,
        f: impl FnOnce(&mut Self, &mut Cursor<'a>) -> Result<T>,
    ) -> Result<T> {
        let mut cur = entry.data.clone();
        if self.depth >= MAX_ENTRY_DEPTH {
            return Err(cur.error(format!(
                "attributes and types nested deeper than {MAX_ENTRY_DEPTH} levels"
            )));
        }
        self.depth += 1;
        let r = f(self, &mut cur);
        self.depth -= 1;
        let v = r?;
        cur.finish("an attribute or type entry")?;
        Ok(v)
    }

    fn decode_attr(&mut self, entry: &Entry<'a>, cur: &mut Cursor<'a>) -> Result<BAttr> {
        let dialect = &self.c.dialects[entry.dialect].name;
        if !entry.custom {
            let text = String::from_utf8_lossy(cur.cstr("an attribute in assembly form")?);
            return Ok(BAttr::Opaque(text.into_owned()));
        }
        match self.kinds[entry.dialect] {
            Kind::Builtin => builtin::read_attr(self, cur),
            Kind::Vhlo => vhlo_attrs::read_attr(self, cur),
            Kind::Other => {
                let n = cur.rest().remaining();
                Ok(BAttr::Opaque(format!("#{dialect}<{n} bytes of bytecode>")))
            }
        }
    }

    fn decode_type(&mut self, entry: &Entry<'a>, cur: &mut Cursor<'a>) -> Result<BType> {
        let dialect = &self.c.dialects[entry.dialect].name;
        if !entry.custom {
            let text = String::from_utf8_lossy(cur.cstr("a type in assembly form")?);
            return Ok(match ElementType::from_mlir_name(&text) {
                Some(t) => BType::Elem(t),
                None => BType::Other(text.into_owned()),
            });
        }
        match self.kinds[entry.dialect] {
            Kind::Builtin => builtin::read_type(self, cur),
            Kind::Vhlo => vhlo_types::read_type(self, cur),
            Kind::Other => {
                cur.rest();
                Ok(BType::Other(format!("a type of dialect `{dialect}`")))
            }
        }
    }

    /// Reads an attribute reference.
    pub fn read_attr(&mut self, cur: &mut Cursor<'a>) -> Result<Rc<BAttr>> {
        let at = cur.offset();
        let i = cur.varint("an attribute index")?;
        self.attr(i).map_err(|e| locate(e, at))
    }

    /// Reads an optional attribute reference (`index << 1 | present`).
    pub fn read_optional_attr(&mut self, cur: &mut Cursor<'a>) -> Result<Option<Rc<BAttr>>> {
        let at = cur.offset();
        let (i, present) = cur.varint_flag("an optional attribute index")?;
        if present {
            self.attr(i).map(Some).map_err(|e| locate(e, at))
        } else {
            Ok(None)
        }
    }

    /// Reads a type reference.
    pub fn read_type(&mut self, cur: &mut Cursor<'a>) -> Result<Rc<BType>> {
        let at = cur.offset();
        let i = cur.varint("a type index")?;
        self.ty(i).map_err(|e| locate(e, at))
    }

    /// Reads a list: a count, then `item` that many times.
    pub fn read_list<T>(
        &mut self,
        cur: &mut Cursor<'a>,
        what: &str,
        mut item: impl FnMut(&mut Self, &mut Cursor<'a>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let n = cur.count(what, 1)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self, cur)?);
        }
        Ok(out)
    }

    /// Reads a list of attribute references.
    pub fn read_attrs(&mut self, cur: &mut Cursor<'a>) -> Result<Vec<Rc<BAttr>>> {
        self.read_list(cur, "the number of attributes in a list", |e, c| {
            e.read_attr(c)
        })
    }

    /// Reads a list of type references.
    pub fn read_types(&mut self, cur: &mut Cursor<'a>) -> Result<Vec<Rc<BType>>> {
        self.read_list(cur, "the number of types in a list", |e, c| e.read_type(c))
    }

    /// Reads a string-table reference as text.
    pub fn read_string(&mut self, cur: &mut Cursor<'a>) -> Result<String> {
        Ok(String::from_utf8_lossy(self.c.string(cur, "a string index")?).into_owned())
    }
}

fn checked_index(index: u64, len: usize, what: &str) -> Result<usize> {
    usize::try_from(index)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| Error::invalid(format!("{what} index {index} out of range ({len} entries)")))
}

/// Adds the offset of a reference to errors that carry none.
fn locate(e: Error, at: usize) -> Error {
    if e.message.contains("offset") {
        e
    } else {
        error_at(at, e.message)
    }
}

/// Reads a signed varint list.
pub(crate) fn read_svarints(cur: &mut Cursor<'_>, what: &str) -> Result<Vec<i64>> {
    let n = cur.count(what, 1)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(cur.svarint(what)?);
    }
    Ok(out)
}

/// Reads an integer of `width` bits as MLIR's `readAPIntWithKnownWidth` encodes it, returning
/// its bits (two's complement, truncated to `width`).
pub(crate) fn read_apint(cur: &mut Cursor<'_>, width: u32) -> Result<u128> {
    let mask = |v: u128| {
        if width >= 128 {
            v
        } else {
            v & ((1u128 << width) - 1)
        }
    };
    if width <= 8 {
        return Ok(mask(u128::from(cur.byte("an 8-bit integer")?)));
    }
    if width <= 64 {
        let v = cur.svarint("an integer")? as u64;
        return Ok(mask(u128::from(v)));
    }
    let at = cur.offset();
    let words = cur.varint("the number of words of a wide integer")?;
    if words == 0 || words > 2 {
        return Err(error_at(
            at,
            format!("integers wider than 128 bits are not supported ({words} words)"),
        ));
    }
    let lo = cur.svarint("an integer word")? as u64;
    let hi = if words == 2 {
        cur.svarint("an integer word")? as u64
    } else {
        0
    };
    Ok(mask((u128::from(hi) << 64) | u128::from(lo)))
}

/// Sign- or zero-extends the low `width` bits of `bits`.
pub(crate) fn extend(bits: u128, width: u32, signed: bool) -> i128 {
    if width == 0 || width >= 128 {
        return bits as i128;
    }
    if signed {
        let shift = 128 - width;
        ((bits << shift) as i128) >> shift
    } else {
        (bits & ((1u128 << width) - 1)) as i128
    }
}

/// Bits MLIR uses for a value of float type `t` (`tf32` is 19).
pub(crate) fn float_width(t: ElementType) -> Option<u32> {
    match t {
        ElementType::TF32 => Some(19),
        t if t.is_float() => Some(t.bit_width()),
        _ => None,
    }
}

/// Reads a float of type `t` as MLIR's `readAPFloatWithKnownSemantics` encodes it.
pub(crate) fn read_apfloat(cur: &mut Cursor<'_>, t: ElementType) -> Result<f64> {
    let at = cur.offset();
    let width =
        float_width(t).ok_or_else(|| error_at(at, format!("{t} is not a floating-point type")))?;
    let bits = read_apint(cur, width)?;
    Ok(float::decode(t, bits as u64))
}

/// Reads a blob: a byte length, then the bytes.
pub(crate) fn read_blob<'a>(cur: &mut Cursor<'a>) -> Result<Cursor<'a>> {
    let len = cur.varint("a blob length")?;
    cur.sub(len, "blob data")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apint_widths() {
        assert_eq!(read_apint(&mut Cursor::new(&[0xff], 0), 8).unwrap(), 0xff);
        // -1 as a zigzag varint is 1 -> 0x03; truncated to 32 bits.
        assert_eq!(
            read_apint(&mut Cursor::new(&[0x03], 0), 32).unwrap(),
            0xffff_ffff
        );
        assert_eq!(extend(0xffff_ffff, 32, true), -1);
        assert_eq!(extend(0xffff_ffff, 32, false), 0xffff_ffff);
        assert_eq!(extend(0xf, 4, true), -1);
    }

    #[test]
    fn apfloat_reads_bits() {
        // 1.0f32 = 0x3f800000, zigzag-encoded as a varint.
        let bits: u64 = 0x3f80_0000;
        let z = bits << 1;
        // 5-byte varint: 4 trailing zero bits in the marker.
        let enc = (z << 5) | 0b10000;
        let bytes = enc.to_le_bytes();
        let v = read_apfloat(&mut Cursor::new(&bytes[..5], 0), ElementType::F32).unwrap();
        assert_eq!(v, 1.0);
    }
}
