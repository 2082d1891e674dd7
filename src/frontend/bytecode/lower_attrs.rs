//! Decoded attributes to generic IR attributes (`ir::Attr`), the one-to-one part of VHLO's
//! conversion back to StableHLO. Decoded entries are shared, so the attribute trees they expand
//! to are counted against a budget proportional to the file: a small file cannot expand into an
//! exponentially large tree.

use super::lower_types::{describe, element_type, value_type};
use super::value::{BAttr, BType};
use crate::error::{Error, Result};
use crate::ir::Attr;

/// Converts attributes, spending a node budget.
pub(crate) struct AttrLowering {
    budget: u64,
}

impl AttrLowering {
    /// A converter allowed to produce about `budget` attribute nodes in total.
    pub fn new(budget: u64) -> Self {
        AttrLowering { budget }
    }

    fn spend(&mut self) -> Result<()> {
        if self.budget == 0 {
            return Err(Error::resource_exhausted(
                "attributes of the artifact expand to more nodes than its size allows",
            ));
        }
        self.budget -= 1;
        Ok(())
    }

    /// The generic IR form of `a`.
    pub fn attr(&mut self, a: &BAttr) -> Result<Attr> {
        self.spend()?;
        Ok(match a {
            BAttr::Array(items) => {
                Attr::Array(items.iter().map(|i| self.attr(i)).collect::<Result<_>>()?)
            }
            BAttr::Dict(items) => Attr::Dict(self.dict(items)?),
            BAttr::String(s) => Attr::String(s.clone()),
            BAttr::Symbol(s) => Attr::Symbol(s.clone()),
            BAttr::Type(t) => type_attr(t),
            BAttr::Unit => Attr::Unit,
            BAttr::Bool(b) => Attr::Bool(*b),
            BAttr::Int(v, t) => Attr::Int(*v, *t),
            BAttr::Float(v, t) => Attr::Float(*v, *t),
            BAttr::DenseArray(t, v) => Attr::DenseArray(*t, v.clone()),
            BAttr::Dense(l) => Attr::Dense(l.clone()),
            BAttr::Location(l) => Attr::Opaque(format!("loc({l})")),
            BAttr::ComparisonDirection(d) => Attr::ComparisonDirection(*d),
            BAttr::ComparisonType(t) => Attr::ComparisonType(*t),
            BAttr::Precision(p) => Attr::Precision(*p),
            BAttr::FftType(t) => Attr::FftType(*t),
            BAttr::RngAlgorithm(r) => Attr::RngAlgorithm(*r),
            BAttr::RngDistribution(r) => Attr::RngDistribution(*r),
            BAttr::Transpose(t) => Attr::Transpose(*t),
            BAttr::ApiVersion(v) => Attr::Int(i128::from(v.code()), crate::ir::ElementType::I32),
            BAttr::ResultAccuracyMode(m) => {
                Attr::Opaque(format!("#stablehlo<result_accuracy_mode {m}>"))
            }
            BAttr::ResultAccuracy(r) => Attr::ResultAccuracy(r.clone()),
            BAttr::OutputOperandAlias(o) => Attr::OutputOperandAlias(o.clone()),
            BAttr::TypeExtensions(b) => Attr::Opaque(format!("#stablehlo.bounds<{b:?}>")),
            BAttr::Opaque(s) => Attr::Opaque(s.clone()),
        })
    }

    /// The generic IR form of a dictionary.
    pub fn dict(&mut self, items: &[(String, std::rc::Rc<BAttr>)]) -> Result<Vec<(String, Attr)>> {
        items
            .iter()
            .map(|(k, v)| Ok((k.clone(), self.attr(v)?)))
            .collect()
    }
}

/// A type used as an attribute.
fn type_attr(t: &BType) -> Attr {
    match value_type(t) {
        Ok(v) => Attr::Type(v),
        Err(_) => match element_type(t) {
            Some(e) => Attr::Opaque(e.mlir_name().to_string()),
            None => Attr::Opaque(describe(t)),
        },
    }
}
