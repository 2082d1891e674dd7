//! Canonicalization: removes ops that are identities on one device (optimization barriers,
//! sharding annotations, no-op reshapes/converts/transposes) and folds tuple plumbing, so the
//! fusion and codegen stages see fewer kinds of ops.

use std::collections::{HashMap, HashSet};

use super::rewrite::substitute;
use crate::ir::{Attr, BinaryOp, Function, Literal, Op, Operation, Region, Scalar, Type, ValueId};

/// How a value is its root's elements moved by transposes and by reshapes that insert or
/// remove dimensions of size 1 only: `order[k]` is the root's non-unit dimension (counted
/// among those) that is the value's `k`-th non-unit dimension.
struct UnitChain {
    root: ValueId,
    order: Vec<usize>,
    /// Transposes on the way (a chain of reshapes alone is a reshape already).
    transposes: usize,
}

impl UnitChain {
    /// Whether the value holds the root's elements in the root's order (a reshape of it).
    fn is_identity(&self) -> bool {
        self.order.iter().enumerate().all(|(k, &o)| k == o)
    }
}

/// The static dimensions of tensor `v`, if it has them.
fn static_dims(f: &Function, v: ValueId) -> Option<Vec<usize>> {
    f.ty(v)
        .as_tensor()
        .filter(|t| t.is_static())
        .map(|t| t.dims())
}

/// The [`UnitChain`] of `op`'s result when `op` is a transpose, or a reshape that only inserts
/// or removes unit dimensions, of a static tensor (continuing its operand's chain in
/// `chains`, else starting at the operand).
fn unit_chain(
    f: &Function,
    op: &Operation,
    chains: &HashMap<ValueId, UnitChain>,
) -> Option<UnitChain> {
    let ([x], [r]) = (op.operands.as_slice(), op.results.as_slice()) else {
        return None;
    };
    let (xd, rd) = (static_dims(f, *x)?, static_dims(f, *r)?);
    let non_unit =
        |d: &[usize]| -> Vec<usize> { (0..d.len()).filter(|&k| d[k] != 1).collect::<Vec<_>>() };
    let (xn, rn) = (non_unit(&xd), non_unit(&rd));
    let (root, inner, transposes) = match chains.get(x) {
        Some(c) => (c.root, c.order.clone(), c.transposes),
        None => (*x, (0..xn.len()).collect(), 0),
    };
    match &op.op {
        Op::Reshape => {
            let sizes = |d: &[usize], n: &[usize]| n.iter().map(|&k| d[k]).collect::<Vec<_>>();
            (sizes(&xd, &xn) == sizes(&rd, &rn)).then_some(UnitChain {
                root,
                order: inner,
                transposes,
            })
        }
        Op::Transpose { permutation } if permutation.len() == rd.len() => {
            // Result dimension k is operand dimension permutation[k].
            let order = rn
                .iter()
                .map(|&k| {
                    let d = usize::try_from(*permutation.get(k)?).ok()?;
                    let j = xn.iter().position(|&n| n == d)?;
                    inner.get(j).copied()
                })
                .collect::<Option<Vec<_>>>()?;
            Some(UnitChain {
                root,
                order,
                transposes: transposes + 1,
            })
        }
        _ => None,
    }
}

/// Custom-call targets and ops of other dialects that are the identity on a single device.
fn is_identity_other(op: &Operation) -> bool {
    match &op.op {
        Op::CustomCall(c) => matches!(
            c.call_target_name.as_str(),
            "Sharding"
                | "SPMDFullToShardShape"
                | "SPMDShardToFullShape"
                | "mhlo.sharding"
                | "annotate_device_placement"
                | "xla.sdy.GlobalToLocalShape"
                | "xla.sdy.LocalToGlobalShape"
                | "xla.sdy.FuncResultSharding"
        ),
        Op::Other { name, attrs } if name.starts_with("stablehlo.") => {
            name.strip_prefix("stablehlo.").is_some_and(|n| {
                matches!(
                    n,
                    "all_reduce"
                        | "all_gather"
                        | "reduce_scatter"
                        | "all_to_all"
                        | "collective_broadcast"
                        | "collective_permute"
                )
            }) && one_participant(attrs)
        }
        Op::Other { name, .. } => matches!(
            name.as_str(),
            "sdy.sharding_constraint"
                | "sdy.reshard"
                | "mhlo.sharding"
                | "builtin.unrealized_conversion_cast"
        ),
        _ => false,
    }
}

/// True when a collective's groups each hold one process (or none are given) and a
/// `collective_permute` sends only from process 0 to itself: on one device the collective is
/// then the identity (StableHLO spec: a one-process `all_gather`/`reduce_scatter`/`all_to_all`
/// gathers, scatters or splits into one piece; `all_reduce` reduces one value). Anything else
/// stays, and the compiler refuses it by name.
fn one_participant(attrs: &[(String, Attr)]) -> bool {
    let dense = |name: &str| {
        attrs.iter().find(|(n, _)| n == name).map(|(_, a)| match a {
            Attr::Dense(l) => Some(l),
            _ => None,
        })
    };
    let groups_ok = match dense("replica_groups") {
        None => true,
        Some(Some(l)) => {
            l.ty.rank() == 2 && l.ty.shape[1] <= 1 && l.to_i64s().iter().all(|&p| p == 0)
        }
        Some(None) => false,
    };
    let pairs_ok = match dense("source_target_pairs") {
        None => true,
        Some(Some(l)) => !l.is_empty() && l.to_i64s().iter().all(|&p| p == 0),
        Some(None) => false,
    };
    groups_ok && pairs_ok
}

/// Ops without results that do nothing on one device.
fn is_noop_other(op: &Operation) -> bool {
    matches!(&op.op, Op::Other { name, .. } if name == "sdy.sharding_group")
        && op.results.is_empty()
}

fn same_type(f: &Function, a: ValueId, b: ValueId) -> bool {
    f.ty(a) == f.ty(b)
}

/// True for a one-input `reduce` whose body is one binary op of its two arguments, whose init
/// is that op's identity (a zero constant in `zeros` for `add` and `or`, `true` for `and` of
/// booleans, one of `consts`), and whose reduced dimensions all have size 1: the reduction
/// moves no element and changes none.
fn trivial_reduce(
    f: &Function,
    op: &Operation,
    zeros: &HashSet<ValueId>,
    consts: &HashMap<ValueId, Scalar>,
) -> bool {
    let Op::Reduce { dimensions } = &op.op else {
        return false;
    };
    let ([input, init], [result], [body]) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.as_slice(),
    ) else {
        return false;
    };
    let (Type::Tensor(t), Type::Tensor(r)) = (f.ty(*input), f.ty(*result)) else {
        return false;
    };
    let sizes_one = dimensions.iter().all(|&d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| t.shape.get(d))
            .is_some_and(|&s| s == 1)
    });
    let identity = match (body.args.as_slice(), body.ops.as_slice()) {
        ([a, b], [bin, ret])
            if bin.results.len() == 1
                && (bin.operands == [*a, *b] || bin.operands == [*b, *a])
                && matches!(ret.op, Op::Return)
                && ret.operands == bin.results =>
        {
            match bin.op {
                Op::Binary(BinaryOp::Add | BinaryOp::Or) => zeros.contains(init),
                Op::Binary(BinaryOp::And) => {
                    t.dtype == crate::ir::ElementType::Pred
                        && consts.get(init) == Some(&Scalar::Bool(true))
                }
                _ => false,
            }
        }
        _ => false,
    };
    sizes_one
        && identity
        && t.dtype == r.dtype
        && t.is_static()
        && r.is_static()
        && t.num_elements() == r.num_elements()
}

/// The branch an `if` or `case` whose selector is one of `consts` runs (a `case` index out of
/// range runs the last branch, as at run time), when every branch is an argument-less region
/// returning the op's results.
fn constant_branch(op: &Operation, consts: &HashMap<ValueId, Scalar>) -> Option<usize> {
    if !matches!(op.op, Op::If | Op::Case) {
        return None;
    }
    let selector = consts.get(op.operands.first()?)?;
    let n = op.regions.len();
    let branch = match (&op.op, selector) {
        (Op::If, s) => usize::from(s.as_f64() == 0.0),
        (_, Scalar::Int(i)) => usize::try_from(*i)
            .ok()
            .filter(|&i| i < n)
            .unwrap_or(n.checked_sub(1)?),
        _ => return None,
    };
    let well_formed = op.regions.iter().all(|r| {
        r.args.is_empty()
            && r.ops.last().is_some_and(|o| o.op == Op::Return)
            && r.returned().len() == op.results.len()
    });
    (branch < n && well_formed).then_some(branch)
}

/// Canonicalizes `f`'s body in place.
pub fn canonicalize(f: &mut Function) {
    let Some(mut body) = f.body.take() else {
        return;
    };
    canonicalize_region(f, &mut body);
    f.body = Some(body);
}

fn canonicalize_region(f: &Function, region: &mut Region) {
    let mut subst: HashMap<ValueId, ValueId> = HashMap::new();
    // Tuples built in this region: result value -> element values.
    let mut tuples: HashMap<ValueId, Vec<ValueId>> = HashMap::new();
    // Zero constants defined in this region (candidates for a sum's init).
    let mut zeros: HashSet<ValueId> = HashSet::new();
    // Transposes defined in this region: result -> (permutation, operand).
    let mut transposes: HashMap<ValueId, (Vec<i64>, ValueId)> = HashMap::new();
    // Scalar constants defined in this region (candidates for a branch's selector).
    let mut consts: HashMap<ValueId, Scalar> = HashMap::new();
    // Values moved from a root by transposes and reshapes of unit dimensions only.
    let mut chains: HashMap<ValueId, UnitChain> = HashMap::new();
    let ops = std::mem::take(&mut region.ops);
    let mut out = Vec::with_capacity(ops.len());
    for mut op in ops {
        for v in &mut op.operands {
            while let Some(&n) = subst.get(v) {
                *v = n;
            }
        }
        for r in &mut op.regions {
            substitute(r, &subst);
            canonicalize_region(f, r);
        }
        // transpose(transpose(x, p), q) is transpose(x, r) with r[i] = p[q[i]]: JAX's
        // gradient of `t.T` transposes back a transpose, and composed the pair is the identity
        // (a 50257 x 768 embedding table's gradient was transposed twice, 0.2 s on lavapipe).
        if let (Op::Transpose { permutation }, [operand]) = (&mut op.op, op.operands.as_mut_slice())
        {
            if let Some((inner, x)) = transposes.get(operand) {
                let composed: Option<Vec<i64>> = permutation
                    .iter()
                    .map(|&q| usize::try_from(q).ok().and_then(|q| inner.get(q).copied()))
                    .collect();
                if let Some(c) = composed.filter(|c| c.len() == inner.len()) {
                    *permutation = c;
                    *operand = *x;
                }
            }
        }
        // Transposes and reshapes that only move unit dimensions, chained back to the root's
        // order: a reshape of the root (`jnp.linalg.inv`'s result went 512x512 -> 512x1x512,
        // transposed, -> 512x512, transposed back; the reads under the transposes were taken
        // for reads across rows, one element at a time).
        if let Some(chain) = unit_chain(f, &op, &chains) {
            if chain.transposes > 0 && chain.is_identity() {
                op.op = Op::Reshape;
                op.operands = vec![chain.root];
            } else if let [r] = op.results.as_slice() {
                chains.insert(*r, chain);
            }
        }
        // An `if` or `case` on a constant is its branch: the runtime would read the selector
        // back from the device, a full synchronization, to learn what the compiler knows
        // (JAX's `cho_solve` and `jnp.diag` gradients emit such cases, chained).
        if let Some(branch) = constant_branch(&op, &consts) {
            let mut r = std::mem::take(&mut op.regions[branch]);
            if let Some(ret) = r.ops.pop() {
                for (res, v) in op.results.iter().zip(ret.operands) {
                    subst.insert(*res, v);
                }
            }
            for moved in &r.ops {
                if let (Op::Constant(l), [v]) = (&moved.op, moved.results.as_slice()) {
                    if l.len() == 1 {
                        consts.insert(*v, l.get(0));
                    }
                }
            }
            out.extend(r.ops);
            continue;
        }
        let identity = match &op.op {
            Op::OptimizationBarrier => op.operands.len() == op.results.len(),
            Op::Reshape | Op::Convert | Op::BitcastConvert => {
                op.operands.len() == 1
                    && op.results.len() == 1
                    && same_type(f, op.operands[0], op.results[0])
            }
            Op::Transpose { permutation } => {
                permutation.iter().enumerate().all(|(i, &p)| p == i as i64)
                    && op.operands.len() == 1
                    && op.results.len() == 1
                    && same_type(f, op.operands[0], op.results[0])
            }
            Op::BroadcastInDim { dimensions } => {
                dimensions.iter().enumerate().all(|(i, &p)| p == i as i64)
                    && op.operands.len() == 1
                    && op.results.len() == 1
                    && same_type(f, op.operands[0], op.results[0])
            }
            _ => {
                is_identity_other(&op)
                    && op.operands.len() == op.results.len()
                    && op
                        .operands
                        .iter()
                        .zip(&op.results)
                        .all(|(a, b)| same_type(f, *a, *b))
            }
        };
        if identity {
            for (r, v) in op.results.iter().zip(&op.operands) {
                subst.insert(*r, *v);
            }
            continue;
        }
        if is_noop_other(&op) {
            continue;
        }
        if let Op::Constant(l) = &op.op {
            let zero = match l.get(0) {
                Scalar::Complex(re, im) => re == 0.0 && im == 0.0,
                v => v.as_f64() == 0.0,
            };
            if op.results.len() == 1 && l.len() == 1 && zero {
                zeros.insert(op.results[0]);
            }
            if let ([r], 1) = (op.results.as_slice(), l.len()) {
                consts.insert(*r, l.get(0));
            }
        }
        if trivial_reduce(f, &op, &zeros, &consts) {
            // A sum over dimensions of size 1 moves no element: it is the reshape XLA also
            // makes of it (`x + 0` is `x`), and loop fusion then reads it in place instead of
            // launching a reduction kernel (JAX's bias gradients of a `[1, n]` reshape). So
            // is an `and` from `true` (the bounds check of a gather with `mode="fill"` of one
            // index: it then fuses into loop kernels, which compute no reductions inline).
            // Over no dimensions at all (equinox's `any` of a scalar) it is its input.
            if let ([x, ..], [r]) = (op.operands.as_slice(), op.results.as_slice()) {
                if same_type(f, *x, *r) {
                    subst.insert(*r, *x);
                    continue;
                }
            }
            op.op = Op::Reshape;
            op.operands.truncate(1);
            op.regions.clear();
        }
        // One device: the replica and partition ids are 0.
        if matches!(op.op, Op::ReplicaId | Op::PartitionId) {
            if let Some(Type::Tensor(t)) = op.results.first().map(|&r| f.ty(r)) {
                op.op = Op::Constant(Literal::splat(t.clone(), Scalar::Int(0)));
            }
        }
        match &op.op {
            Op::Transpose { permutation } if op.results.len() == 1 && op.operands.len() == 1 => {
                transposes.insert(op.results[0], (permutation.clone(), op.operands[0]));
            }
            Op::Tuple if op.results.len() == 1 => {
                tuples.insert(op.results[0], op.operands.clone());
            }
            Op::GetTupleElement { index } if op.results.len() == 1 => {
                let elem = op
                    .operands
                    .first()
                    .and_then(|t| tuples.get(t))
                    .and_then(|elems| elems.get(usize::try_from(*index).ok()?))
                    .copied();
                if let Some(e) = elem {
                    if matches!(f.ty(e), Type::Tensor(_)) || f.ty(e) == f.ty(op.results[0]) {
                        subst.insert(op.results[0], e);
                        continue;
                    }
                }
            }
            _ => {}
        }
        out.push(op);
    }
    region.ops = out;
    substitute(region, &subst);
}

#[cfg(test)]
mod tests {
    use crate::frontend::text::parse_module;
    use crate::passes::prepare;
    use crate::passes::prepared_op_names as ops;

    fn sum(init: &str, dims: &str, body: &str) -> String {
        format!(
            "func.func @main(%x: tensor<1x512xf32>) -> tensor<512xf32> {{
  %z = stablehlo.constant dense<{init}> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %z) applies stablehlo.{body} across dimensions = [{dims}] : (tensor<1x512xf32>, tensor<f32>) -> tensor<512xf32>
  return %0 : tensor<512xf32>
}}"
        )
    }

    #[test]
    fn branches_on_constants_are_inlined() {
        // A case on 1, then a case on its result (2: out of range, the last branch), then an
        // `if` on a constant false: only the chosen branches' ops remain, and no branch op.
        let src =
            "func.func @main(%x: tensor<4xf32>, %p: tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>) {
  %one = stablehlo.constant dense<1> : tensor<i32>
  %s = \"stablehlo.case\"(%one) ({
    %a = stablehlo.constant dense<7> : tensor<i32>
    stablehlo.return %a : tensor<i32>
  }, {
    %b = stablehlo.constant dense<2> : tensor<i32>
    stablehlo.return %b : tensor<i32>
  }) : (tensor<i32>) -> tensor<i32>
  %y = \"stablehlo.case\"(%s) ({
    %c = stablehlo.negate %x : tensor<4xf32>
    stablehlo.return %c : tensor<4xf32>
  }, {
    %d = stablehlo.exponential %x : tensor<4xf32>
    stablehlo.return %d : tensor<4xf32>
  }) : (tensor<i32>) -> tensor<4xf32>
  %f = stablehlo.constant dense<false> : tensor<i1>
  %z = \"stablehlo.if\"(%f) ({
    %e = stablehlo.sine %y : tensor<4xf32>
    stablehlo.return %e : tensor<4xf32>
  }, {
    %g = stablehlo.cosine %y : tensor<4xf32>
    stablehlo.return %g : tensor<4xf32>
  }) : (tensor<i1>) -> tensor<4xf32>
  %w = \"stablehlo.if\"(%p) ({
    stablehlo.return %x : tensor<4xf32>
  }, {
    stablehlo.return %z : tensor<4xf32>
  }) : (tensor<i1>) -> tensor<4xf32>
  return %z, %w : tensor<4xf32>, tensor<4xf32>
}";
        let names = ops(src);
        assert!(names.iter().any(|n| n.contains("exponential")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("cosine")), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("negate")), "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n.contains("sine") && !n.contains("cosine")),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.contains("case")), "{names:?}");
        // The `if` on an argument stays here, and `speculate` makes it a select.
        assert!(!names.iter().any(|n| n.contains("if")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("select")), "{names:?}");
    }

    #[test]
    fn a_sum_over_a_dimension_of_size_one_is_a_reshape() {
        let names = ops(&sum("0.0", "0", "add"));
        assert!(!names.iter().any(|n| n.contains("reduce")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("reshape")), "{names:?}");
    }

    #[test]
    fn an_and_or_or_of_one_element_from_its_identity_is_a_reshape() {
        let reduce = |init: &str, body: &str| {
            format!(
                "func.func @main(%x: tensor<512x1xi1>) -> tensor<512xi1> {{
  %z = stablehlo.constant dense<{init}> : tensor<i1>
  %0 = stablehlo.reduce(%x init: %z) applies stablehlo.{body} across dimensions = [1] : (tensor<512x1xi1>, tensor<i1>) -> tensor<512xi1>
  return %0 : tensor<512xi1>
}}"
            )
        };
        for (init, body, kept) in [
            ("true", "and", false),
            ("false", "or", false),
            ("false", "and", true),
            ("true", "or", true),
        ] {
            let names = ops(&reduce(init, body));
            assert_eq!(
                names.iter().any(|n| n.contains("reduce")),
                kept,
                "{init} {body}: {names:?}"
            );
        }
    }

    #[test]
    fn transposes_of_transposes_compose() {
        // Back to the start: nothing left. Two rotations of a 3-d tensor: one transpose.
        let back = "func.func @main(%x: tensor<3x5xf32>) -> tensor<3x5xf32> {
  %t = stablehlo.transpose %x, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  %u = stablehlo.transpose %t, dims = [1, 0] : (tensor<5x3xf32>) -> tensor<3x5xf32>
  return %u : tensor<3x5xf32>
}";
        assert!(
            ops(back).iter().all(|n| !n.contains("transpose")),
            "{:?}",
            ops(back)
        );
        let rotate = "func.func @main(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %t = stablehlo.transpose %x, dims = [1, 2, 0] : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %u = stablehlo.transpose %t, dims = [1, 2, 0] : (tensor<3x4x2xf32>) -> tensor<4x2x3xf32>
  return %u : tensor<4x2x3xf32>
}";
        let m = parse_module(rotate, "t").expect("parse");
        let f = prepare(&m, "main").expect("prepare");
        let body = f.body.as_ref().expect("body");
        let t: Vec<_> = body
            .ops
            .iter()
            .filter_map(|o| match &o.op {
                crate::ir::Op::Transpose { permutation } => Some(permutation.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(t, vec![vec![2, 0, 1]]);
    }

    #[test]
    fn transposes_through_unit_reshapes_compose() {
        // `jnp.linalg.inv`'s result: back to the root's order through unit dimensions, a
        // reshape of it (here the root itself).
        let back = "func.func @main(%x: tensor<6x5xf32>) -> tensor<6x5xf32> {
  %a = stablehlo.reshape %x : (tensor<6x5xf32>) -> tensor<6x1x5xf32>
  %b = stablehlo.transpose %a, dims = [2, 0, 1] : (tensor<6x1x5xf32>) -> tensor<5x6x1xf32>
  %c = stablehlo.reshape %b : (tensor<5x6x1xf32>) -> tensor<5x6xf32>
  %d = stablehlo.transpose %c, dims = [1, 0] : (tensor<5x6xf32>) -> tensor<6x5xf32>
  return %d : tensor<6x5xf32>
}";
        assert!(
            ops(back).iter().all(|n| !n.contains("transpose")),
            "{:?}",
            ops(back)
        );
        // Only unit dimensions move: a reshape. Dimensions of the root swapped: the
        // transpose stays.
        let unit = "func.func @main(%x: tensor<1x4x1x3xf32>) -> tensor<4x1x3x1xf32> {
  %t = stablehlo.transpose %x, dims = [1, 0, 3, 2] : (tensor<1x4x1x3xf32>) -> tensor<4x1x3x1xf32>
  return %t : tensor<4x1x3x1xf32>
}";
        assert!(
            ops(unit).iter().all(|n| !n.contains("transpose")),
            "{:?}",
            ops(unit)
        );
        let swapped = "func.func @main(%x: tensor<6x5xf32>) -> tensor<5x6xf32> {
  %a = stablehlo.reshape %x : (tensor<6x5xf32>) -> tensor<6x1x5xf32>
  %b = stablehlo.transpose %a, dims = [2, 1, 0] : (tensor<6x1x5xf32>) -> tensor<5x1x6xf32>
  %c = stablehlo.reshape %b : (tensor<5x1x6xf32>) -> tensor<5x6xf32>
  return %c : tensor<5x6xf32>
}";
        assert!(
            ops(swapped).iter().any(|n| n.contains("transpose")),
            "{:?}",
            ops(swapped)
        );
        // A reshape that merges dimensions ends the chain.
        let merged = "func.func @main(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %a = stablehlo.transpose %x, dims = [1, 0, 2] : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %b = stablehlo.reshape %a : (tensor<3x2x4xf32>) -> tensor<6x4xf32>
  %c = stablehlo.reshape %b : (tensor<6x4xf32>) -> tensor<3x2x4xf32>
  %d = stablehlo.transpose %c, dims = [1, 0, 2] : (tensor<3x2x4xf32>) -> tensor<2x3x4xf32>
  return %d : tensor<2x3x4xf32>
}";
        assert_eq!(
            ops(merged)
                .iter()
                .filter(|n| n.contains("transpose"))
                .count(),
            2,
            "{:?}",
            ops(merged)
        );
    }

    #[test]
    fn other_inits_and_bodies_stay_reductions() {
        for (init, body) in [("1.0", "add"), ("0.0", "maximum"), ("0.0", "multiply")] {
            let names = ops(&sum(init, "0", body));
            assert!(
                names.iter().any(|n| n.contains("reduce")),
                "{init} {body}: {names:?}"
            );
        }
    }
}
