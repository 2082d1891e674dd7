//! A bounds-checked reader over a slice of the bytecode file. Every read names what it expected
//! and, on failure, the absolute file offset where it stopped, so malformed input becomes an
//! error message a person can act on.

use crate::error::{Error, Result};

/// The padding byte MLIR writes before aligned data.
const ALIGNMENT_BYTE: u8 = 0xCB;

/// A position inside one section (or sub-slice) of the file.
#[derive(Clone, Debug)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// File offset of `data[0]`.
    base: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor over `data`, which starts at file offset `base`.
    pub fn new(data: &'a [u8], base: usize) -> Self {
        Cursor { data, pos: 0, base }
    }

    /// The current absolute file offset.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// True when everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// An error at the current offset.
    pub fn error(&self, what: impl std::fmt::Display) -> Error {
        error_at(self.offset(), what)
    }

    /// One byte.
    pub fn byte(&mut self, what: &str) -> Result<u8> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or_else(|| self.error(format!("expected {what}, found the end of the data")))?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `len` bytes.
    pub fn bytes(&mut self, len: u64, what: &str) -> Result<&'a [u8]> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= self.remaining())
            .ok_or_else(|| {
                self.error(format!(
                    "expected {what} of {len} bytes, only {} remain",
                    self.remaining()
                ))
            })?;
        let out = &self.data[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    /// A cursor over the next `len` bytes, which are consumed.
    pub fn sub(&mut self, len: u64, what: &str) -> Result<Cursor<'a>> {
        let start = self.offset();
        let data = self.bytes(len, what)?;
        Ok(Cursor::new(data, start))
    }

    /// Everything not read yet, consumed.
    pub fn rest(&mut self) -> Cursor<'a> {
        let start = self.offset();
        let data = &self.data[self.pos..];
        self.pos = self.data.len();
        Cursor::new(data, start)
    }

    /// A prefix varint: the count of trailing zero bits of the first byte is the number of
    /// extra bytes; the remaining bits hold the value, little-endian.
    pub fn varint(&mut self, what: &str) -> Result<u64> {
        let start = self.offset();
        let first = self.byte(what)?;
        if first & 1 == 1 {
            return Ok(u64::from(first >> 1));
        }
        if first == 0 {
            let b = self.bytes(8, what)?;
            let mut buf = [0u8; 8];
            buf.copy_from_slice(b);
            return Ok(u64::from_le_bytes(buf));
        }
        let extra = first.trailing_zeros() as usize;
        let rest = self
            .bytes(extra as u64, what)
            .map_err(|_| error_at(start, format!("expected {what}: varint runs past the end")))?;
        let mut buf = [0u8; 8];
        buf[0] = first;
        buf[1..=extra].copy_from_slice(rest);
        Ok(u64::from_le_bytes(buf) >> (extra + 1))
    }

    /// A zigzag-encoded signed varint.
    pub fn svarint(&mut self, what: &str) -> Result<i64> {
        let v = self.varint(what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A varint whose low bit is a flag: `(value << 1) | flag`.
    pub fn varint_flag(&mut self, what: &str) -> Result<(u64, bool)> {
        let v = self.varint(what)?;
        Ok((v >> 1, v & 1 == 1))
    }

    /// A count of items each taking at least `min_item_bytes` bytes of what remains; larger
    /// counts cannot be honest, so they are rejected before anything is allocated for them.
    pub fn count(&mut self, what: &str, min_item_bytes: usize) -> Result<usize> {
        let at = self.offset();
        let n = self.varint(what)?;
        let limit = self.remaining() / min_item_bytes.max(1);
        usize::try_from(n)
            .ok()
            .filter(|&n| min_item_bytes == 0 || n <= limit)
            .ok_or_else(|| {
                error_at(
                    at,
                    format!(
                        "{what} {n} exceeds the {} bytes that remain",
                        self.remaining()
                    ),
                )
            })
    }

    /// A NUL-terminated string (without the NUL).
    pub fn cstr(&mut self, what: &str) -> Result<&'a [u8]> {
        let rest = &self.data[self.pos..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.error(format!("expected {what}: no terminating NUL byte")))?;
        self.pos += nul + 1;
        Ok(&rest[..nul])
    }

    /// Skips padding bytes (0xCB) up to the next multiple of `alignment` in file offsets.
    pub fn align(&mut self, alignment: u64) -> Result<()> {
        if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 32 {
            return Err(self.error(format!("alignment {alignment} is not a power of two")));
        }
        let mask = alignment as usize - 1;
        while self.offset() & mask != 0 {
            let b = self.byte("alignment padding")?;
            if b != ALIGNMENT_BYTE {
                return Err(error_at(
                    self.offset() - 1,
                    format!("expected alignment byte 0xCB, found {b:#04x}"),
                ));
            }
        }
        Ok(())
    }

    /// A section header (`id | hasAlignment << 7`, length, optional alignment) and its data.
    pub fn section(&mut self) -> Result<(u8, Cursor<'a>)> {
        let id_and_align = self.byte("a section id")?;
        let len = self.varint("a section length")?;
        if id_and_align & 0x80 != 0 {
            let alignment = self.varint("a section alignment")?;
            self.align(alignment)?;
        }
        let id = id_and_align & 0x7f;
        let data = self.sub(len, "section data")?;
        Ok((id, data))
    }

    /// Fails unless everything has been read.
    pub fn finish(&self, what: &str) -> Result<()> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.error(format!(
                "{} unexpected trailing bytes after {what}",
                self.remaining()
            )))
        }
    }
}

/// An INVALID_ARGUMENT error naming the file offset.
pub(crate) fn error_at(offset: usize, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("malformed bytecode at offset {offset}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_every_length() {
        // 1 byte: value 5 -> 0b1011.
        assert_eq!(Cursor::new(&[0x0b], 0).varint("v").unwrap(), 5);
        // 2 bytes: value 300 -> (300 << 2) | 0b10.
        let v = (300u64 << 2) | 0b10;
        let bytes = v.to_le_bytes();
        assert_eq!(Cursor::new(&bytes[..2], 0).varint("v").unwrap(), 300);
        // 9 bytes: marker 0 then 8 raw bytes.
        let mut nine = vec![0u8];
        nine.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Cursor::new(&nine, 0).varint("v").unwrap(), u64::MAX);
        // Signed: zigzag.
        assert_eq!(Cursor::new(&[0x03], 0).svarint("v").unwrap(), -1);
        assert_eq!(Cursor::new(&[0x05], 0).svarint("v").unwrap(), 1);
    }

    #[test]
    fn truncation_names_offset_and_expectation() {
        let e = Cursor::new(&[0x02], 10).varint("a length").unwrap_err();
        assert!(e.message.contains("offset 10"), "{}", e.message);
        assert!(e.message.contains("a length"), "{}", e.message);
        let mut c = Cursor::new(&[0x05, 1, 2], 0);
        assert!(c.count("items", 1).is_ok());
        let mut c = Cursor::new(&[0xff], 0);
        assert!(c.count("items", 1).is_err());
    }

    #[test]
    fn alignment_checks_padding() {
        let mut c = Cursor::new(&[0xcb, 0xcb, 0xcb, 7], 1);
        c.align(4).unwrap();
        assert_eq!(c.byte("x").unwrap(), 7);
        let mut c = Cursor::new(&[0x00, 7], 1);
        assert!(c.align(2).is_err());
        assert!(Cursor::new(&[], 0).align(3).is_err());
    }
}
