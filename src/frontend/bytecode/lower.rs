//! From the decoded IR section to `ir::Module`: the `builtin.module` and its attributes, each
//! `vhlo.func_v1` as a function, each VHLO op as the StableHLO op it stands for (built with
//! `ir::generic::build_op`, as the text frontend builds ops), SSA values renumbered per
//! function, and locations kept. Ops of other dialects inside functions become `Op::Other`;
//! at module level (`sdy.mesh`, ...) they are skipped.

use std::collections::HashMap;
use std::rc::Rc;

use super::container::Container;
use super::entries::Entries;
use super::lower_attrs::AttrLowering;
use super::lower_types::{describe, value_type};
use super::op_attrs::{stablehlo_attrs, RawAttrs};
use super::structure::{Properties, RawModule, RawOp, RawRegion, Value};
use super::value::{BAttr, BType};
use super::version::{Version, CURRENT};
use super::vhlo_ops::{lookup, VhloOp};
use crate::error::{Error, Result};
use crate::ir::generic::build_op;
use crate::ir::module::NamedAttrs;
use crate::ir::{Function, Location, Module, Operation, Region, Type, ValueId};

/// Lowers the decoded IR of `c` to a module.
pub(crate) fn lower(c: &Container<'_>, raw: &RawModule) -> Result<Module> {
    // Attribute trees may be shared; allow a generous multiple of the file size in nodes.
    let total_bytes: usize = c.attrs.iter().map(|e| e.data.remaining()).sum();
    let budget = (total_bytes as u64)
        .saturating_mul(64)
        .saturating_add(1 << 20);
    let mut l = Lowerer {
        c,
        e: Entries::new(c),
        raw,
        low: AttrLowering::new(budget),
        types: HashMap::new(),
        vhlo: vec![None; c.op_names.len()],
        producer: Version::from_producer(&c.producer),
    };
    l.module()
}

struct Lowerer<'c, 'a> {
    c: &'c Container<'a>,
    e: Entries<'c, 'a>,
    raw: &'c RawModule,
    low: AttrLowering,
    /// IR types by type index.
    types: HashMap<u64, Type>,
    /// VHLO op table entries by op name index, once looked up.
    vhlo: Vec<Option<Option<&'static VhloOp>>>,
    producer: Option<Version>,
}

/// The values of one function.
#[derive(Default)]
struct FnValues {
    types: Vec<Type>,
    ids: HashMap<Value, (ValueId, bool)>,
}

impl<'c, 'a> Lowerer<'c, 'a> {
    fn module(&mut self) -> Result<Module> {
        let raw = self.raw;
        let mut module = Module::default();
        let body_ops: &[RawOp] = match &raw.ops[..] {
            [op] if self.op_name(op) == "builtin.module" => {
                let (inherent, discardable) = self.raw_attrs(op)?;
                for (name, a) in inherent.into_iter().chain(discardable) {
                    match name.as_str() {
                        "sym_name" => module.name = a.as_string().map(str::to_string),
                        "sym_visibility" => {}
                        _ => {
                            let v = self.low.attr(&a)?;
                            module.attrs.push((name, v));
                        }
                    }
                }
                match &op.regions[..] {
                    [] => &[],
                    [r] => match &r.blocks[..] {
                        [] => &[],
                        [b] => &b.ops,
                        _ => return Err(Error::invalid("a module body with several blocks")),
                    },
                    _ => return Err(Error::invalid("a module with several regions")),
                }
            }
            ops => ops,
        };
        for op in body_ops {
            match self.op_name(op) {
                "vhlo.func_v1" => {
                    let f = self.function(op)?;
                    module.functions.push(f);
                }
                name if name.starts_with("vhlo.") => {
                    return Err(Error::invalid(format!(
                        "{name} at module level (expected vhlo.func_v1)"
                    )))
                }
                // Other dialects' module-level ops (`sdy.mesh`, ...) carry nothing the
                // compiler reads.
                _ => {}
            }
        }
        Ok(module)
    }

    fn op_name(&self, op: &RawOp) -> &'c str {
        &self.c.op_names[op.name].name
    }

    fn vhlo_op(&mut self, op: &RawOp) -> Option<&'static VhloOp> {
        if let Some(known) = self.vhlo[op.name] {
            return known;
        }
        let found = lookup(self.op_name(op));
        self.vhlo[op.name] = Some(found);
        found
    }

    /// The op's inherent attributes (properties, or the pre-5 dictionary entries the VHLO op
    /// declares) and its discardable ones.
    fn raw_attrs(&mut self, op: &RawOp) -> Result<(RawAttrs, RawAttrs)> {
        let mut inherent = RawAttrs::new();
        let mut discardable = RawAttrs::new();
        if let Some(i) = op.attrs {
            match &*self.e.attr(i)? {
                BAttr::Dict(items) => discardable = items.clone(),
                _ => return Err(self.op_error(op, "the attribute dictionary is not a dictionary")),
            }
        }
        let vhlo = self.vhlo_op(op);
        match op.props {
            Properties::None => {}
            Properties::Native(p) => {
                let mut cur = self.c.properties[p].clone();
                if let Some(v) = vhlo {
                    for name in v.property_order() {
                        let a = self.e.read_attr(&mut cur)?;
                        inherent.push((name.to_string(), a));
                    }
                    cur.finish(&format!("the properties of {}", self.op_name(op)))?;
                } else if self.op_name(op) == "builtin.module" {
                    for name in ["sym_name", "sym_visibility"] {
                        if let Some(a) = self.e.read_optional_attr(&mut cur)? {
                            inherent.push((name.to_string(), a));
                        }
                    }
                    cur.finish("the properties of builtin.module")?;
                }
            }
            Properties::Attr(i) => {
                if let BAttr::Dict(items) = &*self.e.attr(i)? {
                    inherent = items.clone();
                }
            }
        }
        if let Some(v) = vhlo {
            let (decl, rest): (RawAttrs, RawAttrs) = discardable
                .into_iter()
                .partition(|(n, _)| v.attrs.contains(&n.as_str()));
            inherent.extend(decl);
            discardable = rest;
        }
        Ok((inherent, discardable))
    }

    fn location(&mut self, index: u64) -> Result<Location> {
        Ok(match &*self.e.attr(index)? {
            BAttr::Location(l) => l.clone(),
            _ => Location::Unknown,
        })
    }

    fn ir_type(&mut self, index: u64) -> Result<Type> {
        if let Some(t) = self.types.get(&index) {
            return Ok(t.clone());
        }
        let t = value_type(&*self.e.ty(index)?)?;
        self.types.insert(index, t.clone());
        Ok(t)
    }

    fn op_error(&self, op: &RawOp, msg: impl std::fmt::Display) -> Error {
        Error::invalid(format!(
            "{} (bytecode offset {}): {msg}",
            self.op_name(op),
            op.offset
        ))
    }

    fn function(&mut self, op: &RawOp) -> Result<Function> {
        let (inherent, discardable) = self.raw_attrs(op)?;
        let attrs: RawAttrs = inherent.into_iter().chain(discardable).collect();
        let get = |n: &str| attrs.iter().find(|(k, _)| k == n).map(|(_, a)| a.clone());
        let name = get("sym_name")
            .and_then(|a| a.as_string().map(str::to_string))
            .ok_or_else(|| self.op_error(op, "missing its name (`sym_name`)"))?;
        let ctx = |e: Error| e.context(format!("function @{name}"));
        let (inputs, outputs) = match get("function_type").as_deref() {
            Some(BAttr::Type(t)) => match &**t {
                BType::Function(i, o) => (i.clone(), o.clone()),
                other => {
                    return Err(ctx(Error::invalid(format!(
                        "function_type is {}",
                        describe(other)
                    ))))
                }
            },
            _ => return Err(ctx(Error::invalid("missing its type (`function_type`)"))),
        };
        let types = |ts: &[Rc<BType>]| ts.iter().map(|t| value_type(t)).collect::<Result<Vec<_>>>();
        let arg_types = types(&inputs).map_err(ctx)?;
        let result_types = types(&outputs).map_err(ctx)?;
        let public = match get("sym_visibility").as_deref() {
            None => true,
            Some(BAttr::String(s)) => s.is_empty() || s == "public",
            Some(_) => return Err(ctx(Error::invalid("sym_visibility is not a string"))),
        };
        let arg_attrs = self
            .arg_attrs(get("arg_attrs"), arg_types.len())
            .map_err(ctx)?;
        let result_attrs = self
            .arg_attrs(get("res_attrs"), result_types.len())
            .map_err(ctx)?;
        let loc = self.location(op.loc)?;
        let mut values = FnValues::default();
        let body = match &op.regions[..] {
            [] => None,
            [r] if r.blocks.is_empty() => None,
            [r] => Some(self.region(r, &mut values, true).map_err(ctx)?),
            _ => return Err(ctx(Error::invalid("a function with several regions"))),
        };
        if let Some((v, _)) = values.ids.iter().find(|(_, (_, defined))| !defined) {
            return Err(ctx(Error::invalid(format!(
                "uses value {} that is not defined in the function",
                v.0
            ))));
        }
        Ok(Function {
            name,
            public,
            arg_types,
            result_types,
            arg_attrs,
            result_attrs,
            values: values.types,
            body,
            loc,
        })
    }

    fn arg_attrs(&mut self, a: Option<Rc<BAttr>>, n: usize) -> Result<Vec<NamedAttrs>> {
        let items = match a.as_deref() {
            None => return Ok(vec![Vec::new(); n]),
            Some(BAttr::Array(items)) if items.is_empty() => return Ok(vec![Vec::new(); n]),
            Some(BAttr::Array(items)) => items.clone(),
            Some(_) => return Err(Error::invalid("argument attributes are not an array")),
        };
        if items.len() != n {
            return Err(Error::invalid(format!(
                "{} attribute dictionaries for {n} arguments or results",
                items.len()
            )));
        }
        items
            .iter()
            .map(|d| match &**d {
                BAttr::Dict(entries) => self.low.dict(entries),
                _ => Err(Error::invalid("argument attributes are not dictionaries")),
            })
            .collect()
    }

    fn value(&mut self, fv: &mut FnValues, v: Value, define: bool) -> Result<ValueId> {
        if let Some((id, defined)) = fv.ids.get_mut(&v) {
            if define {
                if *defined {
                    return Err(Error::invalid(format!("value {} is defined twice", v.0)));
                }
                *defined = true;
            }
            return Ok(*id);
        }
        let ty_index = *self
            .raw
            .value_types
            .get(v.0 as usize)
            .ok_or_else(|| Error::internal(format!("value {} has no type", v.0)))?;
        let ty = self.ir_type(ty_index)?;
        let id =
            ValueId(u32::try_from(fv.types.len()).map_err(|_| Error::invalid("too many values"))?);
        fv.types.push(ty);
        fv.ids.insert(v, (id, define));
        Ok(id)
    }

    fn region(&mut self, r: &RawRegion, fv: &mut FnValues, top: bool) -> Result<Region> {
        let block = match &r.blocks[..] {
            [] => return Ok(Region::default()),
            [b] => b,
            _ => {
                return Err(Error::unimplemented(format!(
                    "regions with {} blocks",
                    r.blocks.len()
                )))
            }
        };
        let mut region = Region::default();
        for &arg in &block.args {
            region.args.push(self.value(fv, arg, true)?);
        }
        for op in &block.ops {
            region.ops.push(self.operation(op, fv, top)?);
        }
        Ok(region)
    }

    fn operation(&mut self, op: &RawOp, fv: &mut FnValues, top: bool) -> Result<Operation> {
        let loc = self.location(op.loc)?;
        let raw_name = self.op_name(op);
        let at = |e: Error| e.context(format!("{raw_name} at {loc}"));
        if op.num_successors > 0 {
            return Err(at(Error::unimplemented("ops with successor blocks")));
        }
        let (inherent, discardable) = self.raw_attrs(op).map_err(at)?;
        let (name, attrs) = match self.vhlo_op(op) {
            Some(v) => {
                let base = v.base();
                let name = match base {
                    "func" => return Err(at(Error::invalid("a function inside a function"))),
                    "call" => "func.call".to_string(),
                    "return" if top => "func.return".to_string(),
                    other => format!("stablehlo.{other}"),
                };
                let all = inherent.into_iter().chain(discardable).collect();
                let attrs = stablehlo_attrs(base, all, &mut self.low)
                    .map_err(|e| at(e.context(format!("op of {}", v.versions()))))?;
                (name, attrs)
            }
            None if raw_name.starts_with("vhlo.") => {
                let newer = match self.producer {
                    Some(p) if p > CURRENT => format!(
                        " (the artifact was written by StableHLO {p}; this reader supports up \
                         to {CURRENT})"
                    ),
                    _ => String::new(),
                };
                return Err(at(Error::invalid(format!("unknown VHLO operation{newer}"))));
            }
            None => {
                let mut attrs = Vec::new();
                for (n, a) in inherent.into_iter().chain(discardable) {
                    attrs.push((n, self.low.attr(&a).map_err(at)?));
                }
                (raw_name.to_string(), attrs)
            }
        };
        let mut operands = Vec::with_capacity(op.operands.len());
        let mut operand_types = Vec::with_capacity(op.operands.len());
        for &v in &op.operands {
            let id = self.value(fv, v, false).map_err(at)?;
            operand_types.push(fv.types[id.index()].clone());
            operands.push(id);
        }
        let mut results = Vec::with_capacity(op.results.len());
        let mut result_types = Vec::with_capacity(op.results.len());
        for &v in &op.results {
            let id = self.value(fv, v, true).map_err(at)?;
            result_types.push(fv.types[id.index()].clone());
            results.push(id);
        }
        let built = build_op(&name, &attrs, &operand_types, &result_types).map_err(at)?;
        let mut regions = Vec::with_capacity(op.regions.len());
        for r in &op.regions {
            regions.push(self.region(r, fv, false)?);
        }
        Ok(Operation {
            op: built,
            operands,
            results,
            regions,
            loc,
        })
    }
}
