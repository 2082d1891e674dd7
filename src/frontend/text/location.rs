//! Locations: `loc(unknown)`, `loc("file":line:col)`, ranges (`to line:col`, `to :col`),
//! names (`"name"(child)`), `callsite(a at b)`, `fused[...]` / `fused<meta>[...]` and `#alias`
//! references, which JAX defines at the end of the file.

use std::sync::Arc;

use super::parser::Parser;
use crate::ir::Location;
use crate::Result;

impl Parser<'_> {
    /// An optional trailing `loc(...)`.
    pub fn opt_loc(&mut self) -> Result<Option<Location>> {
        if self.cur.peek_bare_id() == Some("loc") {
            Ok(Some(self.parse_loc_keyword()?))
        } else {
            Ok(None)
        }
    }

    /// `loc(...)`.
    pub fn parse_loc_keyword(&mut self) -> Result<Location> {
        self.cur.expect_keyword("loc")?;
        self.cur.expect(b'(')?;
        let l = self.loc_inner()?;
        self.cur.expect(b')')?;
        Ok(l)
    }

    /// A location without the `loc(...)` wrapper.
    fn loc_inner(&mut self) -> Result<Location> {
        self.nested(|p| p.loc_inner_body())
    }

    fn loc_inner_body(&mut self) -> Result<Location> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        if let Some(name) = self.cur.sigil_id(b'#')? {
            return self.loc_alias(&name, start);
        }
        if self.cur.peek() == Some(b'"') {
            let text: Arc<str> = self.cur.string_lit()?.as_ref().into();
            if self.cur.eat(b':') {
                return self.file_line_col(text);
            }
            if self.cur.eat(b'(') {
                let child = self.loc_inner()?;
                self.cur.expect(b')')?;
                return Ok(Location::Name {
                    name: text,
                    child: Some(Box::new(child)),
                });
            }
            return Ok(Location::Name {
                name: text,
                child: None,
            });
        }
        match self.cur.bare_id() {
            Some("unknown") => Ok(Location::Unknown),
            Some("callsite") => {
                self.cur.expect(b'(')?;
                let callee = self.loc_inner()?;
                self.cur.expect_keyword("at")?;
                let caller = self.loc_inner()?;
                self.cur.expect(b')')?;
                Ok(Location::CallSite {
                    callee: Box::new(callee),
                    caller: Box::new(caller),
                })
            }
            Some("fused") => {
                if self.cur.peek() == Some(b'<') {
                    self.cur.skip_balanced()?;
                }
                self.cur.expect(b'[')?;
                let mut locs = Vec::new();
                if !self.cur.eat(b']') {
                    loop {
                        locs.push(self.loc_inner()?);
                        if self.cur.eat(b']') {
                            break;
                        }
                        self.cur.expect(b',')?;
                    }
                }
                Ok(Location::Fused(locs))
            }
            _ => Err(self.cur.error_at(start, "expected a location")),
        }
    }

    /// The `line:col [to [line]:col]` after `"file":`.
    fn file_line_col(&mut self, file: Arc<str>) -> Result<Location> {
        let line = self.loc_number()?;
        let col = if self.cur.eat(b':') {
            self.loc_number()?
        } else {
            0
        };
        if !self.cur.eat_keyword("to") {
            return Ok(Location::FileLineCol { file, line, col });
        }
        let (end_line, end_col) = if self.cur.eat(b':') {
            (line, self.loc_number()?)
        } else {
            let l = self.loc_number()?;
            self.cur.expect(b':')?;
            (l, self.loc_number()?)
        };
        Ok(Location::FileLineColRange {
            file,
            line,
            col,
            end_line,
            end_col,
        })
    }

    fn loc_number(&mut self) -> Result<u32> {
        let start = self.cur.pos;
        let v = self.cur.int_lit()?;
        u32::try_from(v).map_err(|_| self.cur.error_at(start, "bad line or column number"))
    }
}
