//! Splitting a test file on `// -----` lines into independent pieces, as MLIR's
//! `-split-input-file` does, keeping each piece's starting line for positions.

/// One piece of a split file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// The piece's text (without the separator lines).
    pub text: &'a str,
    /// The file line number (1-based) of the piece's first line.
    pub first_line: u32,
}

/// Splits `src` on lines whose text starts with `// -----`. A file without separators is
/// one chunk.
pub fn split_chunks(src: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0usize;
    let mut first_line = 1u32;
    let mut line_no = 1u32;
    let mut offset = 0usize;
    for line in src.split_inclusive('\n') {
        let next = offset + line.len();
        line_no += 1;
        if line.trim_start().starts_with("// -----") {
            chunks.push(Chunk {
                text: src.get(start..offset).unwrap_or(""),
                first_line,
            });
            start = next;
            first_line = line_no;
        }
        offset = next;
    }
    chunks.push(Chunk {
        text: src.get(start..).unwrap_or(""),
        first_line,
    });
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_keep_line_numbers() {
        let src = "a\nb\n// -----\nc\n  // ----- x\nd";
        let c = split_chunks(src);
        assert_eq!(c.len(), 3);
        assert_eq!(
            c[0],
            Chunk {
                text: "a\nb\n",
                first_line: 1
            }
        );
        assert_eq!(
            c[1],
            Chunk {
                text: "c\n",
                first_line: 4
            }
        );
        assert_eq!(
            c[2],
            Chunk {
                text: "d",
                first_line: 6
            }
        );
        assert_eq!(split_chunks("x").len(), 1);
    }
}
