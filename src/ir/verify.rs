//! The verifier: checks that values are defined before use and that the shapes and element
//! types of the ops the compiler handles agree with the StableHLO spec. Errors name the op and
//! its location, so a malformed program is reported, never compiled into a wrong kernel.

mod attrs;

use std::collections::HashSet;

use super::attr::ComparisonType;
use super::module::{Function, Module, Operation, Region, ValueId};
use super::ops::{BinaryOp, Op, UnaryOp};
use super::types::{ElementType, TensorType, Type};
use crate::error::{Error, Result};

/// Verifies every function with a body.
pub fn verify_module(m: &Module) -> Result<()> {
    for f in &m.functions {
        verify_function(f)?;
    }
    Ok(())
}

/// Verifies one function.
pub fn verify_function(f: &Function) -> Result<()> {
    let Some(body) = &f.body else {
        return Ok(());
    };
    let mut v = Verifier {
        f,
        defined: HashSet::new(),
    };
    if body.args.len() != f.arg_types.len() {
        return Err(Error::invalid(format!(
            "{}: @{} has {} block arguments for {} parameters",
            f.loc,
            f.name,
            body.args.len(),
            f.arg_types.len()
        )));
    }
    for (a, t) in body.args.iter().zip(&f.arg_types) {
        v.check_id(*a, &f.loc)?;
        if f.ty(*a) != t {
            return Err(Error::invalid(format!(
                "{}: @{}: argument type {} differs from the signature's {t}",
                f.loc,
                f.name,
                f.ty(*a)
            )));
        }
    }
    v.region(body, Some(&f.result_types))
}

struct Verifier<'a> {
    f: &'a Function,
    defined: HashSet<ValueId>,
}

fn err(op: &Operation, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{}: {}: {msg}", op.loc, op.name()))
}

/// The combiner region of a reduce, reduce_window or scatter over `n` operands takes `2n`
/// scalars and returns `n`.
fn check_combiner(op: &Operation, n: usize) -> Result<()> {
    let body = op
        .regions
        .first()
        .ok_or_else(|| err(op, "the combiner region is missing"))?;
    if body.args.len() != 2 * n || body.returned().len() != n {
        return Err(err(
            op,
            format!("body must take {} scalars and return {n}", 2 * n),
        ));
    }
    Ok(())
}

impl<'a> Verifier<'a> {
    fn check_id(&mut self, v: ValueId, loc: &super::module::Location) -> Result<()> {
        if v.index() >= self.f.values.len() {
            return Err(Error::invalid(format!("{loc}: value {v} has no type")));
        }
        self.defined.insert(v);
        Ok(())
    }

    fn region(&mut self, r: &Region, returns: Option<&[Type]>) -> Result<()> {
        for op in &r.ops {
            for &o in &op.operands {
                if !self.defined.contains(&o) {
                    return Err(err(op, format!("operand {o} is used before it is defined")));
                }
            }
            for reg in &op.regions {
                for &a in &reg.args {
                    self.check_id(a, &op.loc)?;
                }
                self.region(reg, None)?;
            }
            for &res in &op.results {
                self.check_id(res, &op.loc)?;
            }
            self.op(op)?;
            self.attributes(op)?;
        }
        match r.ops.last() {
            Some(last) if last.op == Op::Return => {
                if let Some(types) = returns {
                    let got: Vec<&Type> = last.operands.iter().map(|v| self.f.ty(*v)).collect();
                    if got.len() != types.len() || got.iter().zip(types).any(|(a, b)| *a != b) {
                        return Err(err(
                            last,
                            format!(
                                "returns ({}) but the function is declared to return ({})",
                                list(&got),
                                list(&types.iter().collect::<Vec<_>>())
                            ),
                        ));
                    }
                }
                Ok(())
            }
            Some(last) => Err(err(last, "region does not end in a return")),
            None => Err(Error::invalid(format!(
                "{}: @{}: empty region",
                self.f.loc, self.f.name
            ))),
        }
    }

    fn tensor(&self, op: &Operation, v: ValueId) -> Result<&'a TensorType> {
        match self.f.ty(v) {
            Type::Tensor(t) => Ok(t),
            other => Err(err(op, format!("expected a tensor, got {other}"))),
        }
    }

    fn operands(&self, op: &Operation) -> Result<Vec<&'a TensorType>> {
        op.operands.iter().map(|v| self.tensor(op, *v)).collect()
    }

    fn results(&self, op: &Operation) -> Result<Vec<&'a TensorType>> {
        op.results.iter().map(|v| self.tensor(op, *v)).collect()
    }

    fn counts(&self, op: &Operation, operands: usize, results: usize) -> Result<()> {
        if op.operands.len() != operands || op.results.len() != results {
            return Err(err(
                op,
                format!(
                    "expects {operands} operand(s) and {results} result(s), got {} and {}",
                    op.operands.len(),
                    op.results.len()
                ),
            ));
        }
        Ok(())
    }

    fn op(&self, op: &Operation) -> Result<()> {
        if let Op::Other { name, .. } = &op.op {
            if !is_known_op_name(name) {
                return Err(err(op, format!("unknown op `{name}`")));
            }
        }
        match &op.op {
            Op::Unary(u) => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                same_shape(op, x, r)?;
                let want = unary_result_dtype(*u, x.dtype);
                if r.dtype != want {
                    return Err(err(
                        op,
                        format!("result type {r} should have element type {want}"),
                    ));
                }
                unary_dtype_ok(op, *u, x.dtype)
            }
            Op::Binary(b) => {
                self.counts(op, 2, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                same_shape(op, t[0], t[1])?;
                same_shape(op, t[0], r)?;
                if t[0].dtype != t[1].dtype {
                    return Err(err(
                        op,
                        format!("operand types differ: {} vs {}", t[0], t[1]),
                    ));
                }
                let want = if *b == BinaryOp::Complex {
                    t[0].dtype.complex_of().ok_or_else(|| {
                        err(
                            op,
                            format!("complex needs f32 or f64 parts, got {}", t[0].dtype),
                        )
                    })?
                } else {
                    t[0].dtype
                };
                if r.dtype != want {
                    return Err(err(
                        op,
                        format!("result type {r} should have element type {want}"),
                    ));
                }
                binary_dtype_ok(op, *b, t[0].dtype)
            }
            Op::Compare { compare_type, .. } => {
                self.counts(op, 2, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                if t[0] != t[1] {
                    return Err(err(
                        op,
                        format!("operand types differ: {} vs {}", t[0], t[1]),
                    ));
                }
                same_shape(op, t[0], r)?;
                if r.dtype != ElementType::Pred {
                    return Err(err(op, "result must be i1"));
                }
                if let Some(ct) = compare_type {
                    let ok = match ct {
                        ComparisonType::Float | ComparisonType::TotalOrder => {
                            t[0].dtype.is_float() || t[0].dtype.is_complex()
                        }
                        ComparisonType::Signed => {
                            t[0].dtype.is_signed_int() || t[0].dtype.is_pred()
                        }
                        ComparisonType::Unsigned => {
                            t[0].dtype.is_unsigned_int() || t[0].dtype.is_pred()
                        }
                        ComparisonType::NoType => true,
                    };
                    if !ok {
                        return Err(err(op, format!("compare type {ct} on {}", t[0].dtype)));
                    }
                }
                Ok(())
            }
            Op::Select => {
                self.counts(op, 3, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                if t[0].dtype != ElementType::Pred || (t[0].rank() != 0 && t[0].shape != t[1].shape)
                {
                    return Err(err(
                        op,
                        format!("pred {} must be i1, scalar or of the operands' shape", t[0]),
                    ));
                }
                if t[1] != t[2] || t[1] != r {
                    return Err(err(
                        op,
                        format!(
                            "on_true {}, on_false {} and result {r} must agree",
                            t[1], t[2]
                        ),
                    ));
                }
                Ok(())
            }
            Op::Clamp => {
                self.counts(op, 3, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                for b in [t[0], t[2]] {
                    if b.dtype != t[1].dtype || (b.rank() != 0 && b.shape != t[1].shape) {
                        return Err(err(
                            op,
                            format!("bound {b} must be a scalar or match {}", t[1]),
                        ));
                    }
                }
                if r != t[1] {
                    return Err(err(op, "result must have the operand's type"));
                }
                Ok(())
            }
            Op::Convert => {
                self.counts(op, 1, 1)?;
                same_shape(
                    op,
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                )
            }
            Op::BitcastConvert => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                let (xb, rb) = (x.dtype.bit_width(), r.dtype.bit_width());
                let ok = if xb == rb {
                    x.shape == r.shape
                } else if xb > rb {
                    r.rank() == x.rank() + 1
                        && r.shape[..x.rank()] == x.shape[..]
                        && r.shape.last().copied() == Some((xb / rb) as i64)
                } else {
                    x.rank() == r.rank() + 1
                        && x.shape[..r.rank()] == r.shape[..]
                        && x.shape.last().copied() == Some((rb / xb) as i64)
                };
                if !ok {
                    return Err(err(op, format!("cannot bitcast {x} to {r}")));
                }
                Ok(())
            }
            Op::Constant(l) => {
                self.counts(op, 0, 1)?;
                let r = self.tensor(op, op.results[0])?;
                if &l.ty != r {
                    return Err(err(op, format!("value of type {} for result {r}", l.ty)));
                }
                Ok(())
            }
            Op::Iota { dimension } => {
                self.counts(op, 0, 1)?;
                let r = self.tensor(op, op.results[0])?;
                if *dimension < 0 || *dimension as usize >= r.rank() {
                    return Err(err(
                        op,
                        format!("dimension {dimension} out of range for {r}"),
                    ));
                }
                Ok(())
            }
            Op::BroadcastInDim { dimensions } => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                same_dtype(op, x, r)?;
                if dimensions.len() != x.rank() {
                    return Err(err(
                        op,
                        format!(
                            "{} dimensions for an operand of rank {}",
                            dimensions.len(),
                            x.rank()
                        ),
                    ));
                }
                let mut seen = HashSet::new();
                for (i, &d) in dimensions.iter().enumerate() {
                    if d < 0 || d as usize >= r.rank() || !seen.insert(d) {
                        return Err(err(
                            op,
                            format!("bad broadcast dimension {d} for result {r}"),
                        ));
                    }
                    let (xs, rs) = (x.shape[i], r.shape[d as usize]);
                    if xs != 1 && xs != rs {
                        return Err(err(
                            op,
                            format!("operand dimension {i} of size {xs} cannot broadcast to {rs}"),
                        ));
                    }
                }
                Ok(())
            }
            Op::Reshape => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                same_dtype(op, x, r)?;
                if x.is_static() && r.is_static() && x.num_elements() != r.num_elements() {
                    return Err(err(op, format!("cannot reshape {x} to {r}")));
                }
                Ok(())
            }
            Op::Transpose { permutation } => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                same_dtype(op, x, r)?;
                let mut sorted = permutation.clone();
                sorted.sort_unstable();
                if sorted != (0..x.rank() as i64).collect::<Vec<_>>()
                    || r.rank() != x.rank()
                    || permutation
                        .iter()
                        .enumerate()
                        .any(|(i, &p)| r.shape[i] != x.shape[p as usize])
                {
                    return Err(err(
                        op,
                        format!("permutation {permutation:?} does not take {x} to {r}"),
                    ));
                }
                Ok(())
            }
            Op::Slice {
                start,
                limit,
                strides,
            } => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                same_dtype(op, x, r)?;
                if start.len() != x.rank()
                    || limit.len() != x.rank()
                    || strides.len() != x.rank()
                    || r.rank() != x.rank()
                {
                    return Err(err(
                        op,
                        "start/limit/strides must have one entry per dimension",
                    ));
                }
                for i in 0..x.rank() {
                    let (s, l, st, d) = (start[i], limit[i], strides[i], x.shape[i]);
                    if s < 0 || l < s || l > d || st <= 0 {
                        return Err(err(
                            op,
                            format!("bad slice {s}:{l}:{st} of dimension {i} (size {d})"),
                        ));
                    }
                    let n = if l == s { 0 } else { (l - s - 1) / st + 1 };
                    if r.shape[i] != n {
                        return Err(err(
                            op,
                            format!("result dimension {i} should be {n}, is {}", r.shape[i]),
                        ));
                    }
                }
                Ok(())
            }
            Op::Concatenate { dimension } => {
                if op.operands.is_empty() || op.results.len() != 1 {
                    return Err(err(op, "needs at least one operand and one result"));
                }
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                let d = *dimension;
                if d < 0 || d as usize >= r.rank() {
                    return Err(err(op, format!("dimension {d} out of range")));
                }
                let mut total = 0;
                for x in &t {
                    same_dtype(op, x, r)?;
                    if x.rank() != r.rank() {
                        return Err(err(op, format!("operand {x} has the wrong rank")));
                    }
                    for i in 0..r.rank() {
                        if i != d as usize && x.shape[i] != r.shape[i] {
                            return Err(err(op, format!("operand {x} does not match result {r}")));
                        }
                    }
                    total += x.shape[d as usize];
                }
                if total != r.shape[d as usize] {
                    return Err(err(
                        op,
                        format!(
                            "sizes add up to {total}, result has {}",
                            r.shape[d as usize]
                        ),
                    ));
                }
                Ok(())
            }
            Op::Pad {
                low,
                high,
                interior,
            } => {
                self.counts(op, 2, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                same_dtype(op, t[0], r)?;
                if t[1].rank() != 0 || t[1].dtype != t[0].dtype {
                    return Err(err(
                        op,
                        "padding value must be a scalar of the operand's type",
                    ));
                }
                let n = t[0].rank();
                if low.len() != n || high.len() != n || interior.len() != n || r.rank() != n {
                    return Err(err(op, "padding needs one entry per dimension"));
                }
                for i in 0..n {
                    let d = t[0].shape[i];
                    if interior[i] < 0 {
                        return Err(err(op, "negative interior padding"));
                    }
                    let want = (d - 1)
                        .max(0)
                        .checked_mul(interior[i])
                        .and_then(|x| x.checked_add(d))
                        .and_then(|x| x.checked_add(low[i]))
                        .and_then(|x| x.checked_add(high[i]))
                        .ok_or_else(|| err(op, "padding sizes overflow"))?;
                    if want < 0 || r.shape[i] != want {
                        return Err(err(op, format!("result dimension {i} should be {want}")));
                    }
                }
                Ok(())
            }
            Op::Reverse { dimensions } => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                if x != r {
                    return Err(err(op, "result must have the operand's type"));
                }
                let mut seen = HashSet::new();
                for &d in dimensions {
                    if d < 0 || d as usize >= x.rank() || !seen.insert(d) {
                        return Err(err(op, format!("bad dimension {d}")));
                    }
                }
                Ok(())
            }
            Op::Reduce { dimensions } => {
                let n = op.results.len();
                if n == 0 || op.operands.len() != 2 * n || op.regions.len() != 1 {
                    return Err(err(
                        op,
                        "needs N inputs, N init values, N results and a body",
                    ));
                }
                let t = self.operands(op)?;
                let r = self.results(op)?;
                let shape = &t[0].shape;
                let mut seen = HashSet::new();
                for &d in dimensions {
                    if d < 0 || d as usize >= shape.len() || !seen.insert(d) {
                        return Err(err(op, format!("bad dimension {d}")));
                    }
                }
                let kept: Vec<i64> = shape
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !dimensions.contains(&(*i as i64)))
                    .map(|(_, &s)| s)
                    .collect();
                for i in 0..n {
                    if &t[i].shape != shape {
                        return Err(err(op, "inputs must have one shape"));
                    }
                    if t[n + i].rank() != 0
                        || t[n + i].dtype != t[i].dtype && t[n + i].dtype != r[i].dtype
                    {
                        return Err(err(op, format!("init value {} must be a scalar", t[n + i])));
                    }
                    if r[i].shape != kept {
                        return Err(err(
                            op,
                            format!("result {} should have shape {kept:?}", r[i]),
                        ));
                    }
                }
                check_combiner(op, n)
            }
            Op::DotGeneral {
                dimension_numbers: d,
                ..
            } => {
                self.counts(op, 2, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                let (l, rh) = (t[0], t[1]);
                let check_dims = |dims: &[i64], x: &TensorType| {
                    dims.iter().all(|&v| v >= 0 && (v as usize) < x.rank())
                        && dims.iter().collect::<HashSet<_>>().len() == dims.len()
                };
                if d.lhs_batching_dimensions.len() != d.rhs_batching_dimensions.len()
                    || d.lhs_contracting_dimensions.len() != d.rhs_contracting_dimensions.len()
                    || !check_dims(
                        &[
                            &d.lhs_batching_dimensions[..],
                            &d.lhs_contracting_dimensions[..],
                        ]
                        .concat(),
                        l,
                    )
                    || !check_dims(
                        &[
                            &d.rhs_batching_dimensions[..],
                            &d.rhs_contracting_dimensions[..],
                        ]
                        .concat(),
                        rh,
                    )
                {
                    return Err(err(op, "bad dot dimension numbers"));
                }
                for (a, b) in d
                    .lhs_batching_dimensions
                    .iter()
                    .zip(&d.rhs_batching_dimensions)
                    .chain(
                        d.lhs_contracting_dimensions
                            .iter()
                            .zip(&d.rhs_contracting_dimensions),
                    )
                {
                    if l.shape[*a as usize] != rh.shape[*b as usize] {
                        return Err(err(
                            op,
                            format!("lhs dimension {a} and rhs dimension {b} differ in size"),
                        ));
                    }
                }
                let mut want: Vec<i64> = d
                    .lhs_batching_dimensions
                    .iter()
                    .map(|&i| l.shape[i as usize])
                    .collect();
                for (i, &s) in l.shape.iter().enumerate() {
                    let i = i as i64;
                    if !d.lhs_batching_dimensions.contains(&i)
                        && !d.lhs_contracting_dimensions.contains(&i)
                    {
                        want.push(s);
                    }
                }
                for (i, &s) in rh.shape.iter().enumerate() {
                    let i = i as i64;
                    if !d.rhs_batching_dimensions.contains(&i)
                        && !d.rhs_contracting_dimensions.contains(&i)
                    {
                        want.push(s);
                    }
                }
                if r.shape != want {
                    return Err(err(op, format!("result {r} should have shape {want:?}")));
                }
                Ok(())
            }
            Op::While => {
                if op.regions.len() != 2 || op.operands.len() != op.results.len() {
                    return Err(err(
                        op,
                        "needs cond and body regions and one result per operand",
                    ));
                }
                for (a, b) in op.operands.iter().zip(&op.results) {
                    if self.f.ty(*a) != self.f.ty(*b) {
                        return Err(err(op, "result types must match operand types"));
                    }
                }
                let cond = &op.regions[0];
                let ok = cond.returned().len() == 1
                    && matches!(self.f.ty(cond.returned()[0]), Type::Tensor(t) if t.dtype == ElementType::Pred && t.rank() == 0);
                if !ok {
                    return Err(err(op, "cond must return one tensor<i1>"));
                }
                for reg in &op.regions {
                    if reg.args.len() != op.operands.len() {
                        return Err(err(op, "regions must take one argument per operand"));
                    }
                }
                if op.regions[1].returned().len() != op.operands.len() {
                    return Err(err(op, "body must return one value per operand"));
                }
                Ok(())
            }
            Op::If | Op::Case => {
                if op.operands.len() != 1 || op.regions.is_empty() {
                    return Err(err(op, "needs one selector operand and branch regions"));
                }
                let sel = self.tensor(op, op.operands[0])?;
                let want = if op.op == Op::If {
                    ElementType::Pred
                } else {
                    ElementType::I32
                };
                if sel.rank() != 0
                    || sel.dtype != want
                    || (op.op == Op::If && op.regions.len() != 2)
                {
                    return Err(err(op, format!("selector must be tensor<{want}>")));
                }
                for reg in &op.regions {
                    let ret = reg.returned();
                    if ret.len() != op.results.len()
                        || ret
                            .iter()
                            .zip(&op.results)
                            .any(|(a, b)| self.f.ty(*a) != self.f.ty(*b))
                    {
                        return Err(err(op, "every branch must return the op's result types"));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

fn list(types: &[&Type]) -> String {
    types
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn same_shape(op: &Operation, a: &TensorType, b: &TensorType) -> Result<()> {
    if a.shape != b.shape {
        return Err(err(op, format!("shapes differ: {a} vs {b}")));
    }
    Ok(())
}

fn same_dtype(op: &Operation, a: &TensorType, b: &TensorType) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(err(op, format!("element types differ: {a} vs {b}")));
    }
    Ok(())
}

/// The element type of a unary op's result.
pub fn unary_result_dtype(u: UnaryOp, x: ElementType) -> ElementType {
    if u.result_is_pred() {
        return ElementType::Pred;
    }
    match u {
        UnaryOp::Real | UnaryOp::Imag | UnaryOp::Abs => x.complex_part().unwrap_or(x),
        _ => x,
    }
}

fn unary_dtype_ok(op: &Operation, u: UnaryOp, x: ElementType) -> Result<()> {
    use UnaryOp::*;
    let ok = match u {
        Not => x.is_int() || x.is_pred(),
        Popcnt | CountLeadingZeros => x.is_int(),
        Abs | Negate | Sign => !x.is_pred(),
        Real | Imag | Conj => x.is_float() || x.is_complex(),
        IsFinite | IsInf | IsNegInf | IsPosInf | Ceil | Floor | RoundNearestAfz
        | RoundNearestEven | Digamma | ErfInv | Lgamma | BesselI1e | Erf | Erfc => x.is_float(),
        _ => x.is_float() || x.is_complex(),
    };
    if ok {
        Ok(())
    } else {
        Err(err(op, format!("not defined on element type {x}")))
    }
}

fn binary_dtype_ok(op: &Operation, b: BinaryOp, x: ElementType) -> Result<()> {
    use BinaryOp::*;
    let ok = match b {
        And | Or | Xor => x.is_int() || x.is_pred(),
        ShiftLeft | ShiftRightArithmetic | ShiftRightLogical | Mulhi => x.is_int(),
        Atan2 | Power => !x.is_pred(),
        Complex => x == ElementType::F32 || x == ElementType::F64,
        NextAfter | Polygamma | Zeta => x.is_float(),
        Remainder | Maximum | Minimum => !x.is_complex() || matches!(b, Maximum | Minimum),
        Add | Subtract | Multiply | Divide => true,
    };
    if ok {
        Ok(())
    } else {
        Err(err(op, format!("not defined on element type {x}")))
    }
}

/// Every op of the StableHLO spec, plus the older names the dialect still accepts.
const STABLEHLO_OPS: &[&str] = &[
    "abs",
    "add",
    "after_all",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "and",
    "async_done",
    "async_start",
    "batch_norm_grad",
    "batch_norm_inference",
    "batch_norm_training",
    "bitcast_convert",
    "broadcast_in_dim",
    "case",
    "cbrt",
    "ceil",
    "cholesky",
    "clamp",
    "collective_broadcast",
    "collective_permute",
    "collective_reduce",
    "compare",
    "complex",
    "composite",
    "concatenate",
    "constant",
    "convert",
    "convolution",
    "cosine",
    "count_leading_zeros",
    "custom_call",
    "divide",
    "dot_general",
    "dynamic_broadcast_in_dim",
    "dynamic_conv",
    "dynamic_gather",
    "dynamic_iota",
    "dynamic_pad",
    "dynamic_reshape",
    "dynamic_slice",
    "dynamic_update_slice",
    "exponential",
    "exponential_minus_one",
    "fft",
    "floor",
    "gather",
    "get_dimension_size",
    "get_tuple_element",
    "if",
    "imag",
    "infeed",
    "iota",
    "is_finite",
    "log",
    "log_plus_one",
    "logistic",
    "map",
    "maximum",
    "minimum",
    "multiply",
    "negate",
    "not",
    "optimization_barrier",
    "or",
    "outfeed",
    "pad",
    "partition_id",
    "popcnt",
    "power",
    "real",
    "recv",
    "reduce",
    "reduce_precision",
    "reduce_scatter",
    "reduce_window",
    "remainder",
    "replica_id",
    "reshape",
    "reverse",
    "rng",
    "rng_bit_generator",
    "round_nearest_afz",
    "round_nearest_even",
    "rsqrt",
    "scatter",
    "select",
    "select_and_scatter",
    "send",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "sign",
    "sine",
    "slice",
    "sort",
    "sqrt",
    "subtract",
    "tan",
    "tanh",
    "transpose",
    "triangular_solve",
    "tuple",
    "uniform_dequantize",
    "uniform_quantize",
    "while",
    "xor",
    "return",
    "broadcast",
    "create_token",
    "cross-replica-sum",
    "dot",
    "einsum",
    "unary_einsum",
    "torch_index_select",
    "trace",
    "real_dynamic_slice",
    "compute_reshape_shape",
    "cstr_reshapable",
    "set_dimension_size",
    "tuple",
];

/// False for a `stablehlo.` op name that is not a StableHLO op (a typo or a made-up op: a bad
/// program), true for everything else (ops of other dialects are the compiler's business).
fn is_known_op_name(name: &str) -> bool {
    match name.strip_prefix("stablehlo.") {
        Some(op) => STABLEHLO_OPS.contains(&op),
        None => true,
    }
}
