//! The MLIR bytecode container: magic, version and producer, the top-level sections, and the
//! tables every later stage indexes into (strings, dialects, op names, attribute/type entries,
//! op properties). Nothing here knows about VHLO.

use super::cursor::{error_at, Cursor};
use crate::error::{Error, Result};

/// The four magic bytes that open every MLIR bytecode file (`ML\xefR`).
pub(crate) const MAGIC: &[u8; 4] = b"ML\xefR";

/// The newest bytecode format version this reader understands.
pub(crate) const MAX_BYTECODE_VERSION: u64 = 6;

/// Bytecode format versions that changed the encoding.
pub(crate) mod format {
    /// Dialects carry optional version sections.
    pub const DIALECT_VERSIONING: u64 = 1;
    /// Isolated regions are stored in nested sections.
    pub const LAZY_LOADING: u64 = 2;
    /// Use-list orders may follow results and block arguments.
    pub const USE_LIST_ORDERING: u64 = 3;
    /// Block arguments without a location store none.
    pub const ELIDE_UNKNOWN_BLOCK_ARG_LOCATION: u64 = 4;
    /// Op properties live in their own section.
    pub const NATIVE_PROPERTIES: u64 = 5;
}

/// Top-level section ids.
mod section {
    pub const STRING: u8 = 0;
    pub const DIALECT: u8 = 1;
    pub const ATTR_TYPE: u8 = 2;
    pub const ATTR_TYPE_OFFSET: u8 = 3;
    pub const IR: u8 = 4;
    pub const RESOURCE: u8 = 5;
    pub const RESOURCE_OFFSET: u8 = 6;
    pub const DIALECT_VERSION: u8 = 7;
    pub const PROPERTIES: u8 = 8;
    pub const COUNT: usize = 9;
}

/// The id of IR sections (also used for the nested sections of isolated regions).
pub(crate) const IR_SECTION: u8 = section::IR;

/// A dialect named in the file.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// Its name (`vhlo`, `builtin`, `sdy`, ...).
    pub name: String,
}

/// An operation name named in the file.
#[derive(Debug)]
pub(crate) struct OpName {
    /// The full name, `dialect.op`.
    pub name: String,
    /// Whether the writer had the op registered (bytecode 5+); unregistered ops store their
    /// properties as an attribute.
    pub was_registered: Option<bool>,
}

/// One attribute or type entry: where its encoding lies and how it is encoded.
#[derive(Clone, Debug)]
pub(crate) struct Entry<'a> {
    /// Index into `Container::dialects`.
    pub dialect: usize,
    /// True for a dialect's own binary encoding, false for its textual assembly.
    pub custom: bool,
    /// The encoding.
    pub data: Cursor<'a>,
}

/// The parsed top level of a bytecode file.
pub(crate) struct Container<'a> {
    /// The bytecode format version (0..=6).
    pub version: u64,
    /// The producer string (`StableHLO_v1.22.0`).
    pub producer: String,
    /// The string table.
    pub strings: Vec<&'a [u8]>,
    /// Dialects, in file order.
    pub dialects: Vec<Dialect>,
    /// Operation names, in file order.
    pub op_names: Vec<OpName>,
    /// Attribute entries.
    pub attrs: Vec<Entry<'a>>,
    /// Type entries.
    pub types: Vec<Entry<'a>>,
    /// Encoded properties of registered ops (bytecode 5+).
    pub properties: Vec<Cursor<'a>>,
    /// The IR section.
    pub ir: Cursor<'a>,
}

/// True when `bytes` starts with the MLIR bytecode magic.
pub(crate) fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

impl<'a> Container<'a> {
    /// Parses the header and every top-level section.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        if !has_magic(bytes) {
            return Err(Error::invalid(
                "not MLIR bytecode: the file does not start with the magic bytes ML\\xefR",
            ));
        }
        let mut top = Cursor::new(bytes, 0);
        top.bytes(4, "the magic number")?;
        let version_at = top.offset();
        let version = top.varint("the bytecode version")?;
        if version > MAX_BYTECODE_VERSION {
            return Err(error_at(
                version_at,
                format!(
                    "bytecode version {version} is newer than the newest supported version \
                     {MAX_BYTECODE_VERSION}"
                ),
            ));
        }
        let producer = String::from_utf8_lossy(top.cstr("the producer string")?).into_owned();

        let mut sections: [Option<Cursor<'a>>; section::COUNT] = Default::default();
        while !top.is_empty() {
            let at = top.offset();
            let (id, data) = top.section()?;
            let slot = sections
                .get_mut(usize::from(id))
                .ok_or_else(|| error_at(at, format!("unknown section id {id}")))?;
            if slot.is_some() {
                return Err(error_at(at, format!("duplicate top-level section {id}")));
            }
            *slot = Some(data);
        }
        let mut take = |id: u8, name: &str| -> Result<Cursor<'a>> {
            sections[usize::from(id)].take().ok_or_else(|| {
                Error::invalid(format!(
                    "malformed bytecode: missing the {name} section (id {id})"
                ))
            })
        };
        let string_data = take(section::STRING, "string")?;
        let dialect_data = take(section::DIALECT, "dialect")?;
        let attr_type_data = take(section::ATTR_TYPE, "attribute/type")?;
        let attr_type_offsets = take(section::ATTR_TYPE_OFFSET, "attribute/type offset")?;
        let ir = take(section::IR, "IR")?;
        let has_resource = sections[usize::from(section::RESOURCE)].is_some();
        let has_resource_offsets = sections[usize::from(section::RESOURCE_OFFSET)].is_some();
        if has_resource != has_resource_offsets {
            return Err(Error::invalid(
                "malformed bytecode: a resource section needs its offset section and vice versa",
            ));
        }
        if let Some(s) = &sections[usize::from(section::DIALECT_VERSION)] {
            return Err(s.error("a dialect version section at the top level"));
        }

        let strings = parse_strings(string_data)?;
        let mut c = Container {
            version,
            producer,
            strings,
            dialects: Vec::new(),
            op_names: Vec::new(),
            attrs: Vec::new(),
            types: Vec::new(),
            properties: Vec::new(),
            ir,
        };
        c.parse_dialects(dialect_data)?;
        c.parse_attr_type_offsets(attr_type_data, attr_type_offsets)?;
        if let Some(props) = sections[usize::from(section::PROPERTIES)].take() {
            c.properties = parse_properties(props)?;
        }
        Ok(c)
    }

    /// The string at `index`, read from `cur`.
    pub fn string(&self, cur: &mut Cursor<'a>, what: &str) -> Result<&'a [u8]> {
        let at = cur.offset();
        let i = cur.varint(what)?;
        self.string_at(i, at)
    }

    /// The string at `index`; `at` is the offset reported on failure.
    pub fn string_at(&self, index: u64, at: usize) -> Result<&'a [u8]> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.strings.get(i))
            .copied()
            .ok_or_else(|| {
                error_at(
                    at,
                    format!(
                        "string index {index} out of range ({} strings)",
                        self.strings.len()
                    ),
                )
            })
    }

    fn parse_dialects(&mut self, mut cur: Cursor<'a>) -> Result<()> {
        let n = cur.count("the number of dialects", 1)?;
        self.dialects.reserve(n);
        for _ in 0..n {
            let at = cur.offset();
            let (name_index, has_version) = if self.version < format::DIALECT_VERSIONING {
                (cur.varint("a dialect name")?, false)
            } else {
                cur.varint_flag("a dialect name")?
            };
            let name = String::from_utf8_lossy(self.string_at(name_index, at)?).into_owned();
            if has_version {
                // Dialect versions matter to dialects that upgrade old IR on load; VHLO
                // versions ops by name instead, so the section is checked and skipped.
                let at = cur.offset();
                let (id, _) = cur.section()?;
                if id != section::DIALECT_VERSION {
                    return Err(error_at(
                        at,
                        format!("expected a dialect version section, found section {id}"),
                    ));
                }
            }
            self.dialects.push(Dialect { name });
        }
        if self.version >= format::ELIDE_UNKNOWN_BLOCK_ARG_LOCATION {
            cur.varint("the number of operation names")?;
        }
        while !cur.is_empty() {
            let dialect = self.dialect_index(&mut cur)?;
            let n = cur.count("the number of operation names in a dialect group", 1)?;
            for _ in 0..n {
                let at = cur.offset();
                let (index, was_registered) = if self.version < format::NATIVE_PROPERTIES {
                    (cur.varint("an operation name")?, None)
                } else {
                    let (i, r) = cur.varint_flag("an operation name")?;
                    (i, Some(r))
                };
                let short = String::from_utf8_lossy(self.string_at(index, at)?);
                let dialect_name = &self.dialects[dialect].name;
                let name = if short.is_empty() {
                    dialect_name.clone()
                } else {
                    format!("{dialect_name}.{short}")
                };
                self.op_names.push(OpName {
                    name,
                    was_registered,
                });
            }
        }
        Ok(())
    }

    fn dialect_index(&self, cur: &mut Cursor<'a>) -> Result<usize> {
        let at = cur.offset();
        let i = cur.varint("a dialect index")?;
        usize::try_from(i)
            .ok()
            .filter(|&i| i < self.dialects.len())
            .ok_or_else(|| {
                error_at(
                    at,
                    format!(
                        "dialect index {i} out of range ({} dialects)",
                        self.dialects.len()
                    ),
                )
            })
    }

    fn parse_attr_type_offsets(&mut self, data: Cursor<'a>, mut offsets: Cursor<'a>) -> Result<()> {
        let num_attrs = offsets.count("the number of attributes", 1)?;
        let num_types = offsets.count("the number of types", 1)?;
        if num_attrs.saturating_add(num_types) > offsets.remaining() {
            return Err(offsets.error(format!(
                "{num_attrs} attributes and {num_types} types cannot fit in {} bytes of offsets",
                offsets.remaining()
            )));
        }
        let mut body = data;
        let mut attrs = Vec::with_capacity(num_attrs);
        let mut types = Vec::with_capacity(num_types);
        for (out, total) in [(&mut attrs, num_attrs), (&mut types, num_types)] {
            while out.len() < total {
                let dialect = self.dialect_index(&mut offsets)?;
                let at = offsets.offset();
                let n = offsets.count("the number of entries in a dialect group", 1)?;
                if n > total - out.len() {
                    return Err(error_at(
                        at,
                        format!("a dialect group of {n} entries overruns the entry count {total}"),
                    ));
                }
                for _ in 0..n {
                    let (size, custom) = offsets.varint_flag("an entry size")?;
                    let data = body.sub(size, "an attribute or type entry")?;
                    out.push(Entry {
                        dialect,
                        custom,
                        data,
                    });
                }
            }
        }
        offsets.finish("the attribute/type offset section")?;
        self.attrs = attrs;
        self.types = types;
        Ok(())
    }
}

fn parse_strings(mut cur: Cursor<'_>) -> Result<Vec<&[u8]>> {
    let n = cur.count("the number of strings", 1)?;
    let mut sizes = Vec::with_capacity(n);
    for _ in 0..n {
        sizes.push(cur.varint("a string length")?);
    }
    // The sizes are stored in reverse, so the last size belongs to the first string; the data
    // follows the sizes and its end is the end of the section.
    let data_start = cur.offset();
    let data = cur.rest();
    let mut total: u64 = 0;
    for &s in &sizes {
        total = total.saturating_add(s);
    }
    if total != data.remaining() as u64 {
        return Err(error_at(
            data_start,
            format!(
                "string lengths add up to {total} bytes but the string data has {}",
                data.remaining()
            ),
        ));
    }
    let mut data = data;
    let mut strings = Vec::with_capacity(n);
    for &size in sizes.iter().rev() {
        let at = data.offset();
        let s = data.bytes(size, "string data")?;
        match s.split_last() {
            Some((0, body)) => strings.push(body),
            _ => return Err(error_at(at, "a string without its terminating NUL byte")),
        }
    }
    Ok(strings)
}

fn parse_properties(mut cur: Cursor<'_>) -> Result<Vec<Cursor<'_>>> {
    if cur.is_empty() {
        return Ok(Vec::new());
    }
    let n = cur.count("the number of op properties", 1)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let size = cur.varint("the size of an op's properties")?;
        out.push(cur.sub(size, "an op's properties")?);
    }
    cur.finish("the properties section")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_magic_and_future_versions() {
        assert!(Container::parse(b"MLIR").is_err());
        let e = Container::parse(b"ML\xefR\x0fStableHLO\0").err().unwrap();
        assert!(e.message.contains("newer"), "{}", e.message);
        let e = Container::parse(b"ML\xefR\x0dStableHLO\0").err().unwrap();
        assert!(e.message.contains("missing"), "{}", e.message);
    }

    #[test]
    fn strings_are_stored_with_reversed_lengths() {
        // Two strings "ab" and "c": lengths reversed [2, 3], data "ab\0c\0".
        let sec = [0x05, 0x05, 0x07, b'a', b'b', 0, b'c', 0];
        let s = parse_strings(Cursor::new(&sec, 0)).unwrap();
        assert_eq!(s, vec![&b"ab"[..], &b"c"[..]]);
        assert!(parse_strings(Cursor::new(&sec[..7], 0)).is_err());
    }
}
