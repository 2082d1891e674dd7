//! The IR section: operations, regions and blocks in MLIR's generic shape, with SSA values
//! numbered as the bytecode numbers them (per isolated scope, nested regions appending to
//! their parent's range, forward references allowed). Attributes and types stay indices into
//! the container's tables here; decoding them is the next stage's job.

use super::container::{format, Container, IR_SECTION};
use super::cursor::{error_at, Cursor};
use crate::error::Result;

/// Deepest region nesting accepted (guards the recursion).
const MAX_REGION_DEPTH: usize = 128;

/// Bits of an operation's encoding mask.
mod mask {
    pub const HAS_ATTRS: u8 = 0b0000_0001;
    pub const HAS_RESULTS: u8 = 0b0000_0010;
    pub const HAS_OPERANDS: u8 = 0b0000_0100;
    pub const HAS_SUCCESSORS: u8 = 0b0000_1000;
    pub const HAS_INLINE_REGIONS: u8 = 0b0001_0000;
    pub const HAS_USE_LIST_ORDERS: u8 = 0b0010_0000;
    pub const HAS_PROPERTIES: u8 = 0b0100_0000;
}

/// An SSA value, unique across the whole file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Value(pub u32);

/// Where an op's properties are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Properties {
    /// None.
    None,
    /// Index into `Container::properties` (registered ops, bytecode 5+).
    Native(usize),
    /// An attribute index (ops that were unregistered when written).
    Attr(u64),
}

/// A block.
#[derive(Debug, Default)]
pub(crate) struct RawBlock {
    /// Arguments (their types are in `RawModule::value_types`; their locations are not kept).
    pub args: Vec<Value>,
    /// Operations.
    pub ops: Vec<RawOp>,
}

/// A region: its blocks.
#[derive(Debug, Default)]
pub(crate) struct RawRegion {
    /// Blocks in order (StableHLO uses at most one).
    pub blocks: Vec<RawBlock>,
}

/// An operation in generic form.
#[derive(Debug)]
pub(crate) struct RawOp {
    /// File offset where the op's encoding starts (for error messages).
    pub offset: usize,
    /// Index into `Container::op_names`.
    pub name: usize,
    /// Location attribute index.
    pub loc: u64,
    /// Attribute index of the dictionary of (discardable, or pre-5 all) attributes.
    pub attrs: Option<u64>,
    /// Inherent attributes of bytecode 5+.
    pub props: Properties,
    /// Result values (their types are in `RawModule::value_types`).
    pub results: Vec<Value>,
    /// Operand values.
    pub operands: Vec<Value>,
    /// Number of successor blocks (StableHLO has none).
    pub num_successors: usize,
    /// Nested regions.
    pub regions: Vec<RawRegion>,
}

/// The decoded IR section: the top-level operations and the type of every value.
#[derive(Debug)]
pub(crate) struct RawModule {
    /// Operations of the top-level block (normally one `builtin.module`).
    pub ops: Vec<RawOp>,
    /// Type index of each value, indexed by `Value`.
    pub value_types: Vec<u64>,
}

/// One slot of a value scope.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Empty,
    /// Referenced before its definition.
    Forward(Value),
    Defined(Value),
}

/// The values visible in one isolated-from-above scope.
#[derive(Default)]
struct Scope {
    slots: Vec<Slot>,
    /// Next slot to define, one per region being read.
    next: Vec<usize>,
}

struct Reader<'c, 'a> {
    c: &'c Container<'a>,
    value_types: Vec<Option<u64>>,
}

/// Reads the IR section of `c`.
pub(crate) fn read_ir(c: &Container<'_>) -> Result<RawModule> {
    let mut r = Reader {
        c,
        value_types: Vec::new(),
    };
    let mut cur = c.ir.clone();
    let mut scope = Scope::default();
    scope.next.push(0);
    let block = r.block(&mut cur, &mut scope, 0)?;
    cur.finish("the IR section")?;
    if !block.args.is_empty() {
        return Err(error_at(c.ir.offset(), "the top-level block has arguments"));
    }
    let value_types = r
        .value_types
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.ok_or_else(|| error_at(c.ir.offset(), format!("value {i} is never defined")))
        })
        .collect::<Result<_>>()?;
    Ok(RawModule {
        ops: block.ops,
        value_types,
    })
}

impl<'a> Reader<'_, 'a> {
    fn new_value(&mut self, ty: Option<u64>, cur: &Cursor<'_>) -> Result<Value> {
        let id = u32::try_from(self.value_types.len()).map_err(|_| cur.error("too many values"))?;
        self.value_types.push(ty);
        Ok(Value(id))
    }

    /// Defines the next value of the innermost region being read.
    fn define(&mut self, scope: &mut Scope, ty: u64, cur: &Cursor<'_>) -> Result<Value> {
        let next = scope
            .next
            .last_mut()
            .ok_or_else(|| cur.error("a value outside any region"))?;
        let slot = scope.slots.get_mut(*next).ok_or_else(|| {
            cur.error(format!(
                "value {next} lies outside the range the region declared"
            ))
        })?;
        *next += 1;
        let v = match *slot {
            Slot::Empty => self.new_value(Some(ty), cur)?,
            Slot::Forward(v) => {
                self.value_types[v.0 as usize] = Some(ty);
                v
            }
            Slot::Defined(_) => return Err(cur.error("a value is defined twice")),
        };
        *slot = Slot::Defined(v);
        Ok(v)
    }

    fn operand(&mut self, scope: &mut Scope, cur: &mut Cursor<'_>) -> Result<Value> {
        let at = cur.offset();
        let i = cur.varint("an operand")?;
        let n = scope.slots.len();
        let slot = usize::try_from(i)
            .ok()
            .and_then(|i| scope.slots.get_mut(i))
            .ok_or_else(|| error_at(at, format!("operand index {i} out of range ({n} values)")))?;
        match *slot {
            Slot::Defined(v) | Slot::Forward(v) => Ok(v),
            Slot::Empty => {
                let v = self.new_value(None, cur)?;
                *slot = Slot::Forward(v);
                Ok(v)
            }
        }
    }

    fn type_index(&self, cur: &mut Cursor<'_>) -> Result<u64> {
        let at = cur.offset();
        let t = cur.varint("a type index")?;
        self.check_type(t, at)
    }

    fn check_type(&self, t: u64, at: usize) -> Result<u64> {
        if (t as usize) < self.c.types.len() && t <= usize::MAX as u64 {
            Ok(t)
        } else {
            Err(error_at(
                at,
                format!("type index {t} out of range ({} types)", self.c.types.len()),
            ))
        }
    }

    fn attr_index(&self, cur: &mut Cursor<'_>, what: &str) -> Result<u64> {
        let at = cur.offset();
        let a = cur.varint(what)?;
        if (a as usize) < self.c.attrs.len() && a <= usize::MAX as u64 {
            Ok(a)
        } else {
            Err(error_at(
                at,
                format!(
                    "attribute index {a} out of range ({} attributes)",
                    self.c.attrs.len()
                ),
            ))
        }
    }

    fn block(&mut self, cur: &mut Cursor<'a>, scope: &mut Scope, depth: usize) -> Result<RawBlock> {
        let at = cur.offset();
        let (num_ops, has_args) = cur.varint_flag("a block header")?;
        // Each op takes at least three bytes (name, mask, location).
        if num_ops > (cur.remaining() / 3) as u64 {
            return Err(error_at(
                at,
                format!(
                    "a block of {num_ops} ops cannot fit in {} bytes",
                    cur.remaining()
                ),
            ));
        }
        let mut block = RawBlock::default();
        if has_args {
            let n = cur.count("the number of block arguments", 1)?;
            block.args.reserve(n);
            for _ in 0..n {
                let at = cur.offset();
                let ty = if self.c.version >= format::ELIDE_UNKNOWN_BLOCK_ARG_LOCATION {
                    let (ty, has_loc) = cur.varint_flag("a block argument type")?;
                    let ty = self.check_type(ty, at)?;
                    if has_loc {
                        self.attr_index(cur, "a block argument location")?;
                    }
                    ty
                } else {
                    let ty = self.type_index(cur)?;
                    self.attr_index(cur, "a block argument location")?;
                    ty
                };
                let value = self.define(scope, ty, cur)?;
                block.args.push(value);
            }
            if self.c.version >= format::USE_LIST_ORDERING {
                let has_orders = cur.byte("the use-list flag of block arguments")?;
                if has_orders != 0 {
                    skip_use_lists(cur, n)?;
                }
            }
        }
        for _ in 0..num_ops {
            let op = self.op(cur, scope, depth)?;
            block.ops.push(op);
        }
        Ok(block)
    }

    fn op(&mut self, cur: &mut Cursor<'a>, scope: &mut Scope, depth: usize) -> Result<RawOp> {
        let offset = cur.offset();
        let name_index = cur.varint("an operation name index")?;
        let name = usize::try_from(name_index)
            .ok()
            .filter(|&i| i < self.c.op_names.len())
            .ok_or_else(|| {
                error_at(
                    offset,
                    format!(
                        "operation name index {name_index} out of range ({} names)",
                        self.c.op_names.len()
                    ),
                )
            })?;
        let m = cur.byte("an operation encoding mask")?;
        let loc = self.attr_index(cur, "an operation location")?;
        let attrs = if m & mask::HAS_ATTRS != 0 {
            Some(self.attr_index(cur, "an operation attribute dictionary")?)
        } else {
            None
        };
        let props = if m & mask::HAS_PROPERTIES != 0 {
            match self.c.op_names[name].was_registered {
                None => {
                    return Err(cur.error(format!(
                        "properties on an op in bytecode version {}, which has none",
                        self.c.version
                    )))
                }
                Some(true) => {
                    let at = cur.offset();
                    let i = cur.varint("a properties index")?;
                    let i = usize::try_from(i)
                        .ok()
                        .filter(|&i| i < self.c.properties.len())
                        .ok_or_else(|| {
                            error_at(
                                at,
                                format!(
                                    "properties index {i} out of range ({} entries)",
                                    self.c.properties.len()
                                ),
                            )
                        })?;
                    Properties::Native(i)
                }
                Some(false) => Properties::Attr(self.attr_index(cur, "properties")?),
            }
        } else {
            Properties::None
        };
        let mut result_types = Vec::new();
        if m & mask::HAS_RESULTS != 0 {
            let n = cur.count("the number of results", 1)?;
            result_types.reserve(n);
            for _ in 0..n {
                result_types.push(self.type_index(cur)?);
            }
        }
        let mut operands = Vec::new();
        if m & mask::HAS_OPERANDS != 0 {
            let n = cur.count("the number of operands", 1)?;
            operands.reserve(n);
            for _ in 0..n {
                operands.push(self.operand(scope, cur)?);
            }
        }
        let mut num_successors = 0;
        if m & mask::HAS_SUCCESSORS != 0 {
            num_successors = cur.count("the number of successors", 1)?;
            for _ in 0..num_successors {
                cur.varint("a successor block index")?;
            }
        }
        if self.c.version >= format::USE_LIST_ORDERING && m & mask::HAS_USE_LIST_ORDERS != 0 {
            skip_use_lists(cur, result_types.len())?;
        }
        let (num_regions, isolated) = if m & mask::HAS_INLINE_REGIONS != 0 {
            let at = cur.offset();
            let (n, iso) = cur.varint_flag("the number of regions")?;
            if n > cur.remaining() as u64 {
                return Err(error_at(
                    at,
                    format!("{n} regions cannot fit in the remaining bytes"),
                ));
            }
            (n as usize, iso)
        } else {
            (0, false)
        };
        let mut results = Vec::with_capacity(result_types.len());
        for &ty in &result_types {
            results.push(self.define(scope, ty, cur)?);
        }
        let mut regions = Vec::with_capacity(num_regions);
        if num_regions > 0 {
            if depth >= MAX_REGION_DEPTH {
                return Err(cur.error(format!(
                    "regions nested deeper than {MAX_REGION_DEPTH} levels"
                )));
            }
            if isolated && self.c.version >= format::LAZY_LOADING {
                let at = cur.offset();
                let (id, mut sub) = cur.section()?;
                if id != IR_SECTION {
                    return Err(error_at(
                        at,
                        format!(
                            "expected an IR section for an isolated region, found section {id}"
                        ),
                    ));
                }
                let mut inner = Scope::default();
                for _ in 0..num_regions {
                    regions.push(self.region(&mut sub, &mut inner, depth + 1)?);
                }
                sub.finish("the regions of an isolated op")?;
            } else if isolated {
                let mut inner = Scope::default();
                for _ in 0..num_regions {
                    regions.push(self.region(cur, &mut inner, depth + 1)?);
                }
            } else {
                for _ in 0..num_regions {
                    regions.push(self.region(cur, scope, depth + 1)?);
                }
            }
        }
        Ok(RawOp {
            offset,
            name,
            loc,
            attrs,
            props,
            results,
            operands,
            num_successors,
            regions,
        })
    }

    fn region(
        &mut self,
        cur: &mut Cursor<'a>,
        scope: &mut Scope,
        depth: usize,
    ) -> Result<RawRegion> {
        let num_blocks = cur.count("the number of blocks in a region", 1)?;
        if num_blocks == 0 {
            return Ok(RawRegion::default());
        }
        let at = cur.offset();
        let num_values = cur.varint("the number of values in a region")?;
        // Every value is defined by a block argument or an op result of at least one byte.
        if num_values > cur.remaining() as u64 {
            return Err(error_at(
                at,
                format!("a region of {num_values} values cannot fit in the remaining bytes"),
            ));
        }
        let start = scope.slots.len();
        scope.slots.resize(start + num_values as usize, Slot::Empty);
        scope.next.push(start);
        let mut region = RawRegion::default();
        for _ in 0..num_blocks {
            let b = self.block(cur, scope, depth)?;
            region.blocks.push(b);
        }
        for (i, s) in scope.slots[start..].iter().enumerate() {
            if let Slot::Forward(_) = s {
                return Err(cur.error(format!(
                    "value {} of a region is used but never defined",
                    start + i
                )));
            }
        }
        scope.slots.truncate(start);
        scope.next.pop();
        Ok(region)
    }
}

/// Skips a use-list order encoding for a range of `num_values` values.
fn skip_use_lists(cur: &mut Cursor<'_>, num_values: usize) -> Result<()> {
    let lists = if num_values > 1 {
        cur.count("the number of use-list orders", 1)?
    } else {
        1
    };
    for _ in 0..lists {
        if num_values > 1 {
            cur.varint("a use-list value index")?;
        }
        let (n, _pairs) = cur.varint_flag("a use-list length")?;
        if n > cur.remaining() as u64 {
            return Err(cur.error(format!("a use list of {n} entries cannot fit")));
        }
        for _ in 0..n {
            cur.varint("a use-list index")?;
        }
    }
    Ok(())
}
