//! Program structure: modules of functions, functions of single-block regions, operations with
//! SSA values, and source locations.

use std::fmt;
use std::sync::Arc;

use super::attr::Attr;
use super::ops::Op;
use super::types::Type;

/// An SSA value, numbered within its function (`Function::values`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The index into `Function::values`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Where an op came from: MLIR's location kinds.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Location {
    /// `loc(unknown)`.
    #[default]
    Unknown,
    /// `loc("file":line:col)`.
    FileLineCol {
        /// Source file.
        file: Arc<str>,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        col: u32,
    },
    /// `loc("file":line:col to end_line:end_col)`.
    FileLineColRange {
        /// Source file.
        file: Arc<str>,
        /// First line.
        line: u32,
        /// First column.
        col: u32,
        /// Last line.
        end_line: u32,
        /// Last column.
        end_col: u32,
    },
    /// `loc("name"(child))`.
    Name {
        /// The name (JAX: the op's path, e.g. `jit(f)/add`).
        name: Arc<str>,
        /// Where it is, if known.
        child: Option<Box<Location>>,
    },
    /// `loc(callsite(callee at caller))`.
    CallSite {
        /// The location inside the callee.
        callee: Box<Location>,
        /// The call's location.
        caller: Box<Location>,
    },
    /// `loc(fused[...])`.
    Fused(Vec<Location>),
}

impl Location {
    /// A file:line:col location.
    pub fn file_line_col(file: &str, line: u32, col: u32) -> Location {
        Location::FileLineCol {
            file: file.into(),
            line,
            col,
        }
    }

    /// True for `loc(unknown)`.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Location::Unknown)
    }

    /// The innermost file position (`file:line:col`) this location leads to, if any.
    pub fn file_position(&self) -> Option<String> {
        match self {
            Location::Unknown => None,
            Location::FileLineCol { file, line, col }
            | Location::FileLineColRange {
                file, line, col, ..
            } => Some(format!("{file}:{line}:{col}")),
            Location::Name { child, .. } => child.as_ref().and_then(|c| c.file_position()),
            Location::CallSite { callee, caller } => {
                callee.file_position().or_else(|| caller.file_position())
            }
            Location::Fused(locs) => locs.iter().find_map(Location::file_position),
        }
    }

    /// The first name (`jit(f)/add`) in this location, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Location::Name { name, .. } => Some(name),
            Location::CallSite { callee, caller } => callee.name().or_else(|| caller.name()),
            Location::Fused(locs) => locs.iter().find_map(Location::name),
            _ => None,
        }
    }
}

/// A short human form for error messages: `file:line:col (name)`, or `unknown location`.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.file_position(), self.name()) {
            (Some(p), Some(n)) => write!(f, "{p} ({n})"),
            (Some(p), None) => f.write_str(&p),
            (None, Some(n)) => write!(f, "\"{n}\""),
            (None, None) => f.write_str("unknown location"),
        }
    }
}

/// One operation: what it does, what it reads and defines, its nested regions, where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// The op and its attributes.
    pub op: Op,
    /// Values read.
    pub operands: Vec<ValueId>,
    /// Values defined.
    pub results: Vec<ValueId>,
    /// Nested single-block regions (bodies of reduce, while, if, ...).
    pub regions: Vec<Region>,
    /// Source location.
    pub loc: Location,
}

impl Operation {
    /// An operation without regions.
    pub fn new(op: Op, operands: Vec<ValueId>, results: Vec<ValueId>, loc: Location) -> Self {
        Operation {
            op,
            operands,
            results,
            regions: Vec::new(),
            loc,
        }
    }

    /// The op's full name (`stablehlo.add`).
    pub fn name(&self) -> String {
        super::generic::op_name(&self.op)
    }
}

/// A single-block region: block arguments and a list of operations ending in `Return`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Region {
    /// Block arguments.
    pub args: Vec<ValueId>,
    /// Operations in order; the last is the terminator.
    pub ops: Vec<Operation>,
}

impl Region {
    /// The index in `ops` of the op defining each value (block arguments have none).
    pub fn definitions(&self) -> std::collections::HashMap<ValueId, usize> {
        self.ops
            .iter()
            .enumerate()
            .flat_map(|(i, op)| op.results.iter().map(move |r| (*r, i)))
            .collect()
    }

    /// The values the terminator returns (empty if there is no `Return`).
    pub fn returned(&self) -> &[ValueId] {
        match self.ops.last() {
            Some(op) if op.op == Op::Return => &op.operands,
            _ => &[],
        }
    }

    /// Visits every operation, nested ones included, in program order.
    pub fn walk(&self, f: &mut impl FnMut(&Operation)) {
        for op in &self.ops {
            f(op);
            for r in &op.regions {
                r.walk(f);
            }
        }
    }
}

/// A named attribute list (argument/result attributes, module attributes).
pub type NamedAttrs = Vec<(String, Attr)>;

/// A function: signature, value table and body.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Symbol name without `@`.
    pub name: String,
    /// `public` (callable from outside) or `private`.
    pub public: bool,
    /// Argument types.
    pub arg_types: Vec<Type>,
    /// Result types.
    pub result_types: Vec<Type>,
    /// Per-argument attributes (`tf.aliasing_output`, `mhlo.sharding`, ...).
    pub arg_attrs: Vec<NamedAttrs>,
    /// Per-result attributes (`jax.result_info`, ...).
    pub result_attrs: Vec<NamedAttrs>,
    /// The type of every value of the function, indexed by `ValueId`.
    pub values: Vec<Type>,
    /// The body; `None` for declarations.
    pub body: Option<Region>,
    /// Source location.
    pub loc: Location,
}

impl Function {
    /// An empty function with the given signature: its body's arguments are fresh values.
    pub fn new(name: &str, arg_types: Vec<Type>, result_types: Vec<Type>) -> Function {
        let mut f = Function {
            name: name.to_string(),
            public: true,
            arg_attrs: vec![Vec::new(); arg_types.len()],
            result_attrs: vec![Vec::new(); result_types.len()],
            arg_types: arg_types.clone(),
            result_types,
            values: Vec::new(),
            body: None,
            loc: Location::Unknown,
        };
        let args = arg_types.into_iter().map(|t| f.new_value(t)).collect();
        f.body = Some(Region {
            args,
            ops: Vec::new(),
        });
        f
    }

    /// Adds a value of type `ty` to the function's table.
    pub fn new_value(&mut self, ty: Type) -> ValueId {
        self.values.push(ty);
        ValueId((self.values.len() - 1) as u32)
    }

    /// The type of `v`. Values come from this function's own table.
    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.index()]
    }
}

/// A module: named functions and module attributes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Module {
    /// `module @name`, if named.
    pub name: Option<String>,
    /// Module attributes (`mhlo.num_replicas`, ...).
    pub attrs: NamedAttrs,
    /// Functions in order of appearance.
    pub functions: Vec<Function>,
}

impl Module {
    /// The function named `name`.
    pub fn func(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// Mutable access to the function named `name`.
    pub fn func_mut(&mut self, name: &str) -> Option<&mut Function> {
        self.functions.iter_mut().find(|f| f.name == name)
    }
}
