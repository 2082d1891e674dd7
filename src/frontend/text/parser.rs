//! The parser's state: the cursor, the top-level alias definitions (`#x = ...`, `!x = ...`,
//! which MLIR may define after their uses, as JAX does with `#loc` aliases), dialect resource
//! blobs, the nesting depth guard and the value table of the function being read.

use std::collections::HashMap;

use super::cursor::{Cursor, Pos};
use super::scope::Scope;
use super::MAX_DEPTH;
use crate::ir::{Attr, Location, Type, ValueId};
use crate::Result;

/// Where a top-level alias is defined.
#[derive(Clone, Copy)]
pub(super) struct AliasDef {
    /// `#` (attribute or location) or `!` (type).
    pub sigil: u8,
    /// Offset of the value after `=`.
    pub value_pos: Pos,
}

/// A parsed alias: its value, where its definition ends, and how much text it stands for
/// once the aliases it uses are expanded.
struct Memo<T> {
    value: T,
    end: Pos,
    size: u64,
}

/// Expansion allowance beyond 64 times the input size, in characters (JAX output with full
/// tracebacks in its locations expands to about 15 times its size).
const EXPANSION_ALLOWANCE: u64 = 16 << 20;

/// The values of the function being parsed.
#[derive(Default)]
pub(super) struct FuncState {
    /// Type of every value, indexed by `ValueId`.
    pub values: Vec<Type>,
    /// Names in scope.
    pub scope: Scope,
}

impl FuncState {
    /// Adds a value of type `ty`.
    pub fn new_value(&mut self, ty: Type) -> ValueId {
        self.values.push(ty);
        ValueId((self.values.len() - 1) as u32)
    }
}

/// Recursive-descent parser over one source text.
pub(super) struct Parser<'a> {
    /// The scanner.
    pub cur: Cursor<'a>,
    /// Top-level alias definitions found by the pre-scan.
    defs: HashMap<String, AliasDef>,
    /// Names of `#` aliases in the order they are defined.
    hash_order: Vec<String>,
    /// Whether every location alias has been read (in definition order).
    locs_resolved: bool,
    /// Parsed attribute aliases.
    attr_aliases: HashMap<String, Memo<Attr>>,
    /// Parsed type aliases.
    type_aliases: HashMap<String, Memo<Type>>,
    /// Parsed location aliases.
    loc_aliases: HashMap<String, Memo<Location>>,
    /// Text the alias uses so far expanded to: copies of aliased values in the IR. Bounded,
    /// so aliases of aliases cannot blow up exponentially.
    expansion: u64,
    /// The bound on `expansion`.
    expansion_limit: u64,
    /// Offset of the `{-#` resource section, if any.
    resources_pos: Option<Pos>,
    /// Resource blobs by name, once read.
    resources: Option<HashMap<String, Vec<u8>>>,
    /// Current nesting depth of recursive constructs.
    depth: usize,
    /// The function being parsed.
    pub func: FuncState,
}

impl<'a> Parser<'a> {
    /// A parser over `src`, after a pre-scan for top-level aliases and resources.
    pub fn new(src: &'a str, filename: &str, first_line: u32) -> Result<Self> {
        let mut p = Parser {
            cur: Cursor::new(src, filename, first_line),
            defs: HashMap::new(),
            hash_order: Vec::new(),
            locs_resolved: false,
            attr_aliases: HashMap::new(),
            type_aliases: HashMap::new(),
            loc_aliases: HashMap::new(),
            expansion: 0,
            expansion_limit: EXPANSION_ALLOWANCE + 64 * src.len() as u64,
            resources_pos: None,
            resources: None,
            depth: 0,
            func: FuncState::default(),
        };
        p.prescan()?;
        Ok(p)
    }

    /// Runs `f` one nesting level deeper, failing cleanly past `MAX_DEPTH`.
    pub fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.depth >= MAX_DEPTH {
            return Err(self.cur.error("nesting too deep"));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// Finds top-level `#name =` / `!name =` definitions and the `{-# ... #-}` section.
    fn prescan(&mut self) -> Result<()> {
        let mut depth = 0usize;
        loop {
            self.cur.skip_ws();
            let Some(c) = self.cur.byte_at(0) else {
                break;
            };
            match c {
                b'"' => {
                    self.cur.string_raw()?;
                }
                b'{' if depth == 0 && self.cur.rest().starts_with("{-#") => {
                    self.resources_pos = Some(self.cur.pos);
                    match self.cur.rest().find("#-}") {
                        Some(i) => self.cur.pos += i + 3,
                        None => return Err(self.cur.error("unterminated `{-#` section")),
                    }
                }
                b'{' | b'(' | b'[' => {
                    depth += 1;
                    self.cur.pos += 1;
                }
                b'}' | b')' | b']' => {
                    depth = depth.saturating_sub(1);
                    self.cur.pos += 1;
                }
                b'#' | b'!' if depth == 0 => {
                    self.cur.pos += 1;
                    let name = match self.cur.suffix_id() {
                        Ok(n) => n.into_owned(),
                        Err(_) => continue,
                    };
                    if self.cur.peek() == Some(b'=') && self.cur.byte_at(1) != Some(b'=') {
                        self.cur.pos += 1;
                        if c == b'#' {
                            self.hash_order.push(name.clone());
                        }
                        self.defs.insert(
                            name,
                            AliasDef {
                                sigil: c,
                                value_pos: self.cur.pos,
                            },
                        );
                    }
                }
                _ => {
                    let len = self.cur.rest().chars().next().map_or(1, char::len_utf8);
                    self.cur.pos += len;
                }
            }
        }
        self.cur.pos = 0;
        Ok(())
    }

    /// Parses `f` at `pos` and comes back, returning the result and where it ended.
    fn parse_at<T>(
        &mut self,
        pos: Pos,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<(T, Pos)> {
        let saved = self.cur.pos;
        self.cur.pos = pos;
        let r = self.nested(f);
        let end = self.cur.pos;
        self.cur.pos = saved;
        Ok((r?, end))
    }

    /// The definition of alias `name` with the given sigil, or an error at `use_pos`.
    fn alias_def(&self, sigil: u8, name: &str, use_pos: Pos) -> Result<AliasDef> {
        match self.defs.get(name) {
            Some(d) if d.sigil == sigil => Ok(*d),
            _ => Err(self.cur.error_at(
                use_pos,
                format!("undefined alias `{}{name}`", sigil as char),
            )),
        }
    }

    /// True if `#name` is a defined alias.
    pub fn is_attr_alias(&self, name: &str) -> bool {
        self.defs.get(name).is_some_and(|d| d.sigil == b'#')
    }

    /// Counts `size` characters of alias expansion, failing past the limit.
    fn charge(&mut self, size: u64, pos: Pos) -> Result<()> {
        self.expansion = self.expansion.saturating_add(size);
        if self.expansion > self.expansion_limit {
            return Err(self.cur.error_at(pos, "aliases expand to too much text"));
        }
        Ok(())
    }

    /// Parses the definition of alias `name` with `f`, returning the value, the end of the
    /// definition and its expanded size.
    fn parse_alias<T>(
        &mut self,
        sigil: u8,
        name: &str,
        use_pos: Pos,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<Memo<T>> {
        let def = self.alias_def(sigil, name, use_pos)?;
        let before = self.expansion;
        let (value, end) = self.parse_at(def.value_pos, f)?;
        let own = end.saturating_sub(def.value_pos) as u64;
        let size = own.saturating_add(self.expansion - before);
        self.charge(size, use_pos)?;
        Ok(Memo { value, end, size })
    }

    /// The attribute `#name` stands for.
    pub fn attr_alias(&mut self, name: &str, use_pos: Pos) -> Result<Attr> {
        if let Some((v, size)) = self
            .attr_aliases
            .get(name)
            .map(|m| (m.value.clone(), m.size))
        {
            self.charge(size, use_pos)?;
            return Ok(v);
        }
        let m = self.parse_alias(b'#', name, use_pos, |p| p.parse_attr())?;
        let v = m.value.clone();
        self.attr_aliases.insert(name.to_string(), m);
        Ok(v)
    }

    /// The type `!name` stands for.
    pub fn type_alias(&mut self, name: &str, use_pos: Pos) -> Result<Type> {
        if let Some((v, size)) = self
            .type_aliases
            .get(name)
            .map(|m| (m.value.clone(), m.size))
        {
            self.charge(size, use_pos)?;
            return Ok(v);
        }
        let m = self.parse_alias(b'!', name, use_pos, |p| p.parse_type())?;
        let v = m.value.clone();
        self.type_aliases.insert(name.to_string(), m);
        Ok(v)
    }

    /// The location `#name` stands for (its definition is `loc(...)`).
    pub fn loc_alias(&mut self, name: &str, use_pos: Pos) -> Result<Location> {
        if !self.locs_resolved && !self.loc_aliases.contains_key(name) {
            self.resolve_locs_in_order()?;
        }
        if let Some((v, size)) = self
            .loc_aliases
            .get(name)
            .map(|m| (m.value.clone(), m.size))
        {
            self.charge(size, use_pos)?;
            return Ok(v);
        }
        let m = self.parse_alias(b'#', name, use_pos, |p| p.parse_loc_keyword())?;
        let v = m.value.clone();
        self.loc_aliases.insert(name.to_string(), m);
        Ok(v)
    }

    /// Reads every location alias in definition order. MLIR prints an alias after the ones it
    /// refers to, so each read finds its parts already read: long `callsite` chains (one link
    /// per Python frame in JAX output) never recurse deeply.
    fn resolve_locs_in_order(&mut self) -> Result<()> {
        self.locs_resolved = true;
        let saved = self.cur.pos;
        for name in std::mem::take(&mut self.hash_order) {
            let Some(def) = self.defs.get(&name).copied() else {
                continue;
            };
            self.cur.pos = def.value_pos;
            let is_loc = self.cur.peek_str("loc(");
            self.cur.pos = saved;
            if is_loc && !self.loc_aliases.contains_key(&name) {
                self.loc_alias(&name, def.value_pos)?;
            }
        }
        Ok(())
    }

    /// Reads a top-level alias definition at the cursor (`#x = ...` or `!x = ...`) and moves
    /// past it.
    pub fn skip_alias_definition(&mut self) -> Result<()> {
        let start = self.cur.pos;
        let Some(sigil) = self.cur.peek() else {
            return Err(self.cur.expected("an alias definition"));
        };
        self.cur.pos += 1;
        let name = self.cur.suffix_id()?.into_owned();
        self.cur.expect(b'=')?;
        let end = if sigil == b'!' {
            if !self.type_aliases.contains_key(&name) {
                self.type_alias(&name, start)?;
            }
            self.type_aliases.get(&name).map(|m| m.end)
        } else if self.cur.peek_str("loc(") {
            if !self.loc_aliases.contains_key(&name) {
                self.loc_alias(&name, start)?;
            }
            self.loc_aliases.get(&name).map(|m| m.end)
        } else {
            if !self.attr_aliases.contains_key(&name) {
                self.attr_alias(&name, start)?;
            }
            self.attr_aliases.get(&name).map(|m| m.end)
        };
        self.cur.pos = end.unwrap_or(self.cur.pos);
        Ok(())
    }

    /// Moves past a `{-# ... #-}` section at the cursor.
    pub fn skip_resources_section(&mut self) -> Result<()> {
        match self.cur.rest().find("#-}") {
            Some(i) => {
                self.cur.pos += i + 3;
                Ok(())
            }
            None => Err(self.cur.error("unterminated `{-#` section")),
        }
    }

    /// The bytes of resource blob `name` (without its alignment prefix).
    pub fn resource(&mut self, name: &str, use_pos: Pos) -> Result<Vec<u8>> {
        if self.resources.is_none() {
            let map = match self.resources_pos {
                Some(pos) => self.parse_at(pos, |p| p.parse_resources())?.0,
                None => HashMap::new(),
            };
            self.resources = Some(map);
        }
        let blob = self.resources.as_ref().and_then(|m| m.get(name));
        match blob {
            Some(b) => Ok(b.get(4..).unwrap_or(&[]).to_vec()),
            None => Err(self
                .cur
                .error_at(use_pos, format!("undefined resource `{name}`"))),
        }
    }

    /// Reads `{-# key: { ... }, ... #-}`, collecting every `name: "0x..."` blob.
    fn parse_resources(&mut self) -> Result<HashMap<String, Vec<u8>>> {
        if !self.cur.eat_str("{-#") {
            return Err(self.cur.expected("`{-#`"));
        }
        let mut out = HashMap::new();
        while !self.cur.eat_str("#-}") {
            self.resource_entry(&mut out)?;
            self.cur.eat(b',');
        }
        Ok(out)
    }

    /// One `key: value` of the resource section; values are strings or nested `{...}`.
    fn resource_entry(&mut self, out: &mut HashMap<String, Vec<u8>>) -> Result<()> {
        let key = match self.cur.peek() {
            Some(b'"') => self.cur.string_lit()?.into_owned(),
            _ => self.cur.suffix_id()?.into_owned(),
        };
        self.cur.expect(b':')?;
        if self.cur.eat(b'{') {
            self.nested(|p| {
                while !p.cur.eat(b'}') {
                    p.resource_entry(out)?;
                    p.cur.eat(b',');
                }
                Ok(())
            })
        } else if self.cur.peek() == Some(b'"') {
            let start = self.cur.pos;
            let raw = self.cur.string_raw()?;
            let bytes = super::dense::decode_hex(raw)
                .ok_or_else(|| self.cur.error_at(start, "expected a hex blob \"0x...\""))?;
            out.insert(key, bytes);
            Ok(())
        } else {
            let start = self.cur.pos;
            let _ = self
                .parse_attr()
                .map_err(|_| self.cur.error_at(start, "bad resource"))?;
            Ok(())
        }
    }

    /// Reads a `%name` or `%name#N` use and returns the value.
    pub fn value_use(&mut self) -> Result<ValueId> {
        self.cur.skip_ws();
        let start = self.cur.pos;
        let Some(name) = self.cur.sigil_id(b'%')? else {
            return Err(self.cur.expected("a value `%name`"));
        };
        let index = if self.cur.byte_at(0) == Some(b'#') {
            self.cur.pos += 1;
            let n = self.cur.number()?;
            n.to_i128()
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| self.cur.error_at(start, "bad result number"))?
        } else {
            0
        };
        match self.func.scope.get(&name).and_then(|vs| vs.get(index)) {
            Some(&v) => Ok(v),
            None => Err(self.cur.error_at(
                start,
                format!("use of undefined value `%{name}`{}", suffix(index)),
            )),
        }
    }

    /// The type of value `v`.
    pub fn value_type(&self, v: ValueId) -> Type {
        self.func
            .values
            .get(v.index())
            .cloned()
            .unwrap_or(Type::Token)
    }
}

fn suffix(index: usize) -> String {
    if index == 0 {
        String::new()
    } else {
        format!(" (result #{index})")
    }
}
