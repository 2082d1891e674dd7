//! The verifier's attribute rules: the constraints the StableHLO spec puts on dimension
//! numbers, windows, sizes and counts (`gather` C1-C23, `scatter` C1-C25, `convolution`
//! C1-C25, ...). Every emitter indexes shapes by these attributes, so a value out of range is
//! an INVALID_ARGUMENT here, never a panic or a wrong kernel later.

use std::collections::HashSet;

use super::{check_combiner, err, same_dtype, Verifier};
use crate::error::Result;
use crate::ir::attr::{FftType, RngAlgorithm, Transpose};
use crate::ir::module::Operation;
use crate::ir::ops::{Convolution, Op};
use crate::ir::types::{TensorType, DYNAMIC};

/// Whether two dimension sizes can be equal (one of them may be unknown).
fn dim_eq(a: i64, b: i64) -> bool {
    a == b || a == DYNAMIC || b == DYNAMIC
}

/// Whether two shapes can be equal.
fn shape_eq(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| dim_eq(x, y))
}

/// Every entry of `dims` is a dimension of a rank-`rank` tensor.
fn in_range(op: &Operation, what: &str, dims: &[i64], rank: usize) -> Result<()> {
    match dims.iter().find(|&&d| d < 0 || d as usize >= rank) {
        Some(d) => Err(err(op, format!("{what} {d} out of range for rank {rank}"))),
        None => Ok(()),
    }
}

/// No entry of `dims` appears twice.
fn unique(op: &Operation, what: &str, dims: &[i64]) -> Result<()> {
    let mut seen = HashSet::new();
    match dims.iter().find(|d| !seen.insert(**d)) {
        Some(d) => Err(err(op, format!("{what} repeat dimension {d}"))),
        None => Ok(()),
    }
}

/// `dims` is in increasing order.
fn sorted(op: &Operation, what: &str, dims: &[i64]) -> Result<()> {
    if dims.windows(2).any(|w| w[0] > w[1]) {
        return Err(err(op, format!("{what} {dims:?} must be sorted")));
    }
    Ok(())
}

/// `v` has one entry per dimension of a rank-`rank` tensor.
fn arity(op: &Operation, what: &str, len: usize, rank: usize) -> Result<()> {
    if len != rank {
        return Err(err(
            op,
            format!("{what} has {len} entries, expected {rank}"),
        ));
    }
    Ok(())
}

/// Every entry of `v` is at least 1.
fn positive(op: &Operation, what: &str, v: &[i64]) -> Result<()> {
    if let Some(x) = v.iter().find(|&&x| x < 1) {
        return Err(err(op, format!("{what} must be positive, got {x}")));
    }
    Ok(())
}

/// The number of windows along one dimension (`reduce_window` C15, `convolution` C25): `None`
/// on overflow.
fn num_windows(
    size: i64,
    base_dilation: i64,
    (low, high): (i64, i64),
    window: i64,
    window_dilation: i64,
    stride: i64,
) -> Option<i64> {
    if size == DYNAMIC {
        return Some(DYNAMIC);
    }
    let dilated = if size == 0 {
        0
    } else {
        (size - 1).checked_mul(base_dilation)?.checked_add(1)?
    };
    let padded = low.checked_add(dilated)?.checked_add(high)?;
    let dilated_window = if window == 0 {
        0
    } else {
        (window - 1).checked_mul(window_dilation)?.checked_add(1)?
    };
    if padded <= 0 || dilated_window > padded {
        return Some(0);
    }
    Some((padded - dilated_window) / stride + 1)
}

/// A scalar of an integer type (`dynamic_slice` start indices, ...).
fn scalar_int(op: &Operation, what: &str, t: &TensorType) -> Result<()> {
    if t.rank() != 0 || !t.dtype.is_int() {
        return Err(err(
            op,
            format!("{what} must be a 0-d integer tensor, got {t}"),
        ));
    }
    Ok(())
}

impl<'a> Verifier<'a> {
    /// The attribute rules of the ops that have them; ops without any pass.
    pub(super) fn attributes(&self, op: &Operation) -> Result<()> {
        match &op.op {
            Op::ReducePrecision {
                exponent_bits,
                mantissa_bits,
            } => {
                self.counts(op, 1, 1)?;
                let (x, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                if x != r || !x.dtype.is_float() {
                    return Err(err(
                        op,
                        format!("result {r} must be operand type {x}, a float"),
                    ));
                }
                if *exponent_bits < 1 || *mantissa_bits < 0 {
                    return Err(err(
                        op,
                        format!(
                            "exponent_bits {exponent_bits} must be >= 1, mantissa_bits \
                             {mantissa_bits} >= 0"
                        ),
                    ));
                }
                Ok(())
            }
            Op::DynamicSlice { slice_sizes } => self.dynamic_slice(op, slice_sizes),
            Op::DynamicUpdateSlice => self.dynamic_update_slice(op),
            Op::Gather {
                dimension_numbers: d,
                slice_sizes,
                ..
            } => self.gather(op, d, slice_sizes),
            Op::Scatter {
                dimension_numbers: d,
                ..
            } => self.scatter(op, d),
            Op::Convolution(c) => self.convolution(op, c),
            Op::ReduceWindow {
                window_dimensions,
                window_strides,
                base_dilations,
                window_dilations,
                padding,
            } => self.reduce_window(
                op,
                window_dimensions,
                window_strides,
                base_dilations,
                window_dilations,
                padding,
            ),
            Op::SelectAndScatter {
                window_dimensions,
                window_strides,
                padding,
            } => self.select_and_scatter(op, window_dimensions, window_strides, padding),
            Op::Sort { dimension, .. } => {
                let n = op.operands.len();
                if n == 0 || op.results.len() != n || op.regions.len() != 1 {
                    return Err(err(op, "needs N inputs, N results and a comparator"));
                }
                let t = self.operands(op)?;
                let r = self.results(op)?;
                for (x, y) in t.iter().zip(&r) {
                    if x != y || !shape_eq(&x.shape, &t[0].shape) {
                        return Err(err(op, "inputs and results must have one shape and types"));
                    }
                }
                in_range(op, "dimension", &[*dimension], t[0].rank())?;
                if op.regions[0].args.len() != 2 * n || op.regions[0].returned().len() != 1 {
                    return Err(err(op, format!("comparator must take {} scalars", 2 * n)));
                }
                Ok(())
            }
            Op::TopK { k, .. } => {
                self.counts(op, 1, 2)?;
                let x = self.tensor(op, op.operands[0])?;
                let r = self.results(op)?;
                let Some(&last) = x.shape.last() else {
                    return Err(err(op, "operand must have rank >= 1"));
                };
                if *k < 0 || (last != DYNAMIC && *k > last) {
                    return Err(err(op, format!("k = {k} out of range for {x}")));
                }
                let mut want = x.shape.clone();
                if let Some(l) = want.last_mut() {
                    *l = *k;
                }
                if !shape_eq(&r[0].shape, &want)
                    || !shape_eq(&r[1].shape, &want)
                    || r[0].dtype != x.dtype
                    || !r[1].dtype.is_int()
                {
                    return Err(err(
                        op,
                        format!("results should be {want:?} values and indices"),
                    ));
                }
                Ok(())
            }
            Op::Map { dimensions } => {
                if op.operands.is_empty() || op.results.len() != 1 || op.regions.len() != 1 {
                    return Err(err(op, "needs inputs, one result and a computation"));
                }
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                if t.iter().any(|x| !shape_eq(&x.shape, &r.shape)) {
                    return Err(err(op, "inputs and result must have one shape"));
                }
                if *dimensions != (0..r.rank() as i64).collect::<Vec<_>>() {
                    return Err(err(
                        op,
                        format!("dimensions {dimensions:?} must be 0..{}", r.rank()),
                    ));
                }
                if op.regions[0].args.len() != t.len() || op.regions[0].returned().len() != 1 {
                    return Err(err(op, "computation must take one scalar per input"));
                }
                Ok(())
            }
            Op::Fft {
                fft_type,
                fft_length,
            } => self.fft(op, *fft_type, fft_length),
            Op::Cholesky { .. } => {
                self.counts(op, 1, 1)?;
                let (a, r) = (
                    self.tensor(op, op.operands[0])?,
                    self.tensor(op, op.results[0])?,
                );
                let n = a.rank();
                if a != r || n < 2 || !dim_eq(a.shape[n - 2], a.shape[n - 1]) {
                    return Err(err(
                        op,
                        format!("operand {a} must be a batch of square matrices, result {r} alike"),
                    ));
                }
                Ok(())
            }
            Op::TriangularSolve {
                left_side,
                transpose_a,
                ..
            } => {
                self.counts(op, 2, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                let (a, b) = (t[0], t[1]);
                let n = a.rank();
                let ok = n >= 2
                    && b.rank() == n
                    && a.dtype == b.dtype
                    && shape_eq(&a.shape[..n - 2], &b.shape[..n - 2])
                    && dim_eq(a.shape[n - 2], a.shape[n - 1])
                    && dim_eq(
                        a.shape[n - 1],
                        b.shape[if *left_side { n - 2 } else { n - 1 }],
                    );
                if !ok || b != r {
                    return Err(err(op, format!("cannot solve {a} against {b} into {r}")));
                }
                if *transpose_a == Transpose::TransposeInvalid {
                    return Err(err(op, "transpose_a is TRANSPOSE_INVALID"));
                }
                Ok(())
            }
            Op::BatchNormInference { feature_index, .. } => {
                self.counts(op, 5, 1)?;
                self.batch_norm(op, *feature_index, &[0], 1..5, &[0], &[])
            }
            Op::BatchNormTraining { feature_index, .. } => {
                self.counts(op, 3, 3)?;
                self.batch_norm(op, *feature_index, &[0], 1..3, &[0], &[1, 2])
            }
            Op::BatchNormGrad { feature_index, .. } => {
                self.counts(op, 5, 3)?;
                self.batch_norm(op, *feature_index, &[0, 4], 1..4, &[0], &[1, 2])
            }
            Op::Rng { .. } => {
                self.counts(op, 3, 1)?;
                let t = self.operands(op)?;
                let r = self.tensor(op, op.results[0])?;
                if t[0].rank() != 0
                    || t[1].rank() != 0
                    || t[0].dtype != t[1].dtype
                    || t[0].dtype != r.dtype
                    || t[2].rank() != 1
                    || !t[2].dtype.is_int()
                    || !dim_eq(t[2].shape[0], r.rank() as i64)
                {
                    return Err(err(
                        op,
                        "needs scalar bounds of the result's type and a 1-d shape",
                    ));
                }
                Ok(())
            }
            Op::RngBitGenerator { algorithm } => {
                self.counts(op, 1, 2)?;
                let s = self.tensor(op, op.operands[0])?;
                let r = self.results(op)?;
                let sizes: &[i64] = match algorithm {
                    RngAlgorithm::ThreeFry => &[2],
                    RngAlgorithm::Philox => &[2, 3],
                    RngAlgorithm::Default => &[2, 3],
                };
                if s != r[0] || s.rank() != 1 || !sizes.contains(&s.shape[0]) {
                    return Err(err(
                        op,
                        format!("state {s} does not suit {algorithm} (result {})", r[0]),
                    ));
                }
                Ok(())
            }
            Op::GetDimensionSize { dimension } => {
                self.counts(op, 1, 1)?;
                let x = self.tensor(op, op.operands[0])?;
                in_range(op, "dimension", &[*dimension], x.rank())
            }
            Op::Check(_) | Op::Probe { .. } => {
                if op.operands.is_empty() || op.operands.len() > 2 {
                    return Err(err(op, "takes one or two operands"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn dynamic_slice(&self, op: &Operation, slice_sizes: &[i64]) -> Result<()> {
        if op.operands.is_empty() || op.results.len() != 1 {
            return Err(err(op, "needs an operand, start indices and one result"));
        }
        let t = self.operands(op)?;
        let r = self.tensor(op, op.results[0])?;
        let x = t[0];
        same_dtype(op, x, r)?;
        arity(op, "start_indices", t.len() - 1, x.rank())?;
        arity(op, "slice_sizes", slice_sizes.len(), x.rank())?;
        for s in &t[1..] {
            scalar_int(op, "start index", s)?;
            if s.dtype != t[1].dtype {
                return Err(err(op, "start indices must have one type"));
            }
        }
        for (i, (&s, &d)) in slice_sizes.iter().zip(&x.shape).enumerate() {
            if s < 0 || (d != DYNAMIC && s > d) {
                return Err(err(
                    op,
                    format!("slice size {s} of dimension {i} outside 0..={d}"),
                ));
            }
        }
        if !shape_eq(&r.shape, slice_sizes) {
            return Err(err(
                op,
                format!("result {r} should have shape {slice_sizes:?}"),
            ));
        }
        Ok(())
    }

    fn dynamic_update_slice(&self, op: &Operation) -> Result<()> {
        if op.operands.len() < 2 || op.results.len() != 1 {
            return Err(err(
                op,
                "needs an operand, an update, start indices and a result",
            ));
        }
        let t = self.operands(op)?;
        let r = self.tensor(op, op.results[0])?;
        let (x, u) = (t[0], t[1]);
        if x != r {
            return Err(err(
                op,
                format!("result {r} must have the operand's type {x}"),
            ));
        }
        same_dtype(op, x, u)?;
        arity(op, "update rank", u.rank(), x.rank())?;
        arity(op, "start_indices", t.len() - 2, x.rank())?;
        for s in &t[2..] {
            scalar_int(op, "start index", s)?;
            if s.dtype != t[2].dtype {
                return Err(err(op, "start indices must have one type"));
            }
        }
        if u.shape
            .iter()
            .zip(&x.shape)
            .any(|(&a, &b)| a != DYNAMIC && b != DYNAMIC && a > b)
        {
            return Err(err(op, format!("update {u} is larger than operand {x}")));
        }
        Ok(())
    }

    fn gather(
        &self,
        op: &Operation,
        d: &crate::ir::attr::GatherDimensionNumbers,
        slice_sizes: &[i64],
    ) -> Result<()> {
        self.counts(op, 2, 1)?;
        let t = self.operands(op)?;
        let r = self.tensor(op, op.results[0])?;
        let (x, idx) = (t[0], t[1]);
        same_dtype(op, x, r)?;
        if !idx.dtype.is_int() {
            return Err(err(op, format!("start_indices {idx} must be integers")));
        }
        let (xr, ir, rr) = (x.rank(), idx.rank(), r.rank());
        arity(
            op,
            "offset_dims + collapsed_slice_dims + operand_batching_dims",
            d.offset_dims.len() + d.collapsed_slice_dims.len() + d.operand_batching_dims.len(),
            xr,
        )?;
        let ivd = d.index_vector_dim;
        if ivd < 0 || ivd as usize > ir {
            return Err(err(
                op,
                format!("index_vector_dim {ivd} out of range for {idx}"),
            ));
        }
        let ivd = ivd as usize;
        let index_len = if ivd < ir { idx.shape[ivd] } else { 1 };
        if !dim_eq(d.start_index_map.len() as i64, index_len) {
            return Err(err(
                op,
                format!(
                    "start_index_map has {} entries for index vectors of {index_len}",
                    d.start_index_map.len()
                ),
            ));
        }
        unique(op, "offset_dims", &d.offset_dims)?;
        sorted(op, "offset_dims", &d.offset_dims)?;
        in_range(op, "offset_dims", &d.offset_dims, rr)?;
        unique(
            op,
            "collapsed_slice_dims and operand_batching_dims",
            &[&d.collapsed_slice_dims[..], &d.operand_batching_dims[..]].concat(),
        )?;
        sorted(op, "collapsed_slice_dims", &d.collapsed_slice_dims)?;
        in_range(op, "collapsed_slice_dims", &d.collapsed_slice_dims, xr)?;
        sorted(op, "operand_batching_dims", &d.operand_batching_dims)?;
        in_range(op, "operand_batching_dims", &d.operand_batching_dims, xr)?;
        unique(
            op,
            "start_indices_batching_dims",
            &d.start_indices_batching_dims,
        )?;
        in_range(
            op,
            "start_indices_batching_dims",
            &d.start_indices_batching_dims,
            ir,
        )?;
        if d.start_indices_batching_dims.contains(&(ivd as i64)) {
            return Err(err(
                op,
                "index_vector_dim is one of start_indices_batching_dims",
            ));
        }
        arity(
            op,
            "start_indices_batching_dims",
            d.start_indices_batching_dims.len(),
            d.operand_batching_dims.len(),
        )?;
        for (&a, &b) in d
            .operand_batching_dims
            .iter()
            .zip(&d.start_indices_batching_dims)
        {
            if !dim_eq(x.shape[a as usize], idx.shape[b as usize]) {
                return Err(err(
                    op,
                    format!("operand batching dimension {a} and index dimension {b} differ"),
                ));
            }
        }
        unique(
            op,
            "start_index_map and operand_batching_dims",
            &[&d.start_index_map[..], &d.operand_batching_dims[..]].concat(),
        )?;
        in_range(op, "start_index_map", &d.start_index_map, xr)?;
        arity(op, "slice_sizes", slice_sizes.len(), xr)?;
        for (i, (&s, &dim)) in slice_sizes.iter().zip(&x.shape).enumerate() {
            if s < 0 || (dim != DYNAMIC && s > dim) {
                return Err(err(
                    op,
                    format!("slice size {s} of dimension {i} outside 0..={dim}"),
                ));
            }
        }
        for &c in d
            .collapsed_slice_dims
            .iter()
            .chain(&d.operand_batching_dims)
        {
            if slice_sizes[c as usize] > 1 {
                return Err(err(
                    op,
                    format!("collapsed or batching dimension {c} has slice size > 1"),
                ));
            }
        }
        // C22: batch dimensions of the indices around the slice's offset dimensions.
        let mut batch = idx.shape.clone();
        if ivd < ir {
            batch.remove(ivd);
        }
        let offsets: Vec<i64> = slice_sizes
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let i = *i as i64;
                !d.collapsed_slice_dims.contains(&i) && !d.operand_batching_dims.contains(&i)
            })
            .map(|(_, &s)| s)
            .collect();
        if batch.len() + offsets.len() != rr {
            return Err(err(
                op,
                format!(
                    "result {r} should have rank {}",
                    batch.len() + offsets.len()
                ),
            ));
        }
        let (mut b, mut o) = (batch.iter(), offsets.iter());
        let want: Vec<i64> = (0..rr as i64)
            .map(|i| {
                if d.offset_dims.contains(&i) {
                    o.next()
                } else {
                    b.next()
                }
                .copied()
                .unwrap_or(DYNAMIC)
            })
            .collect();
        if !shape_eq(&r.shape, &want) {
            return Err(err(op, format!("result {r} should have shape {want:?}")));
        }
        Ok(())
    }

    fn scatter(&self, op: &Operation, d: &crate::ir::attr::ScatterDimensionNumbers) -> Result<()> {
        let n = op.results.len();
        if n == 0 || op.operands.len() != 2 * n + 1 || op.regions.len() != 1 {
            return Err(err(
                op,
                "needs N inputs, the indices, N updates, N results and a body",
            ));
        }
        let t = self.operands(op)?;
        let r = self.results(op)?;
        let (inputs, idx, updates) = (&t[..n], t[n], &t[n + 1..]);
        let x = inputs[0];
        let u = updates[0];
        for i in 0..n {
            if !shape_eq(&inputs[i].shape, &x.shape)
                || !shape_eq(&updates[i].shape, &u.shape)
                || updates[i].dtype != inputs[i].dtype
                || r[i].dtype != inputs[i].dtype
                || !shape_eq(&r[i].shape, &x.shape)
            {
                return Err(err(
                    op,
                    "inputs, updates and results must agree in shape and element type",
                ));
            }
        }
        if !idx.dtype.is_int() {
            return Err(err(op, format!("scatter_indices {idx} must be integers")));
        }
        let (xr, ir, ur) = (x.rank(), idx.rank(), u.rank());
        arity(
            op,
            "update_window_dims + inserted_window_dims + input_batching_dims",
            d.update_window_dims.len() + d.inserted_window_dims.len() + d.input_batching_dims.len(),
            xr,
        )?;
        unique(op, "update_window_dims", &d.update_window_dims)?;
        sorted(op, "update_window_dims", &d.update_window_dims)?;
        in_range(op, "update_window_dims", &d.update_window_dims, ur)?;
        unique(
            op,
            "inserted_window_dims and input_batching_dims",
            &[&d.inserted_window_dims[..], &d.input_batching_dims[..]].concat(),
        )?;
        sorted(op, "inserted_window_dims", &d.inserted_window_dims)?;
        in_range(op, "inserted_window_dims", &d.inserted_window_dims, xr)?;
        sorted(op, "input_batching_dims", &d.input_batching_dims)?;
        in_range(op, "input_batching_dims", &d.input_batching_dims, xr)?;
        unique(
            op,
            "scatter_indices_batching_dims",
            &d.scatter_indices_batching_dims,
        )?;
        in_range(
            op,
            "scatter_indices_batching_dims",
            &d.scatter_indices_batching_dims,
            ir,
        )?;
        let ivd = d.index_vector_dim;
        if ivd < 0 || ivd as usize > ir {
            return Err(err(
                op,
                format!("index_vector_dim {ivd} out of range for {idx}"),
            ));
        }
        if d.scatter_indices_batching_dims.contains(&ivd) {
            return Err(err(
                op,
                "index_vector_dim is one of scatter_indices_batching_dims",
            ));
        }
        let ivd = ivd as usize;
        arity(
            op,
            "scatter_indices_batching_dims",
            d.scatter_indices_batching_dims.len(),
            d.input_batching_dims.len(),
        )?;
        for (&a, &b) in d
            .input_batching_dims
            .iter()
            .zip(&d.scatter_indices_batching_dims)
        {
            if !dim_eq(x.shape[a as usize], idx.shape[b as usize]) {
                return Err(err(
                    op,
                    format!("input batching dimension {a} and index dimension {b} differ"),
                ));
            }
        }
        let index_len = if ivd < ir { idx.shape[ivd] } else { 1 };
        if !dim_eq(d.scatter_dims_to_operand_dims.len() as i64, index_len) {
            return Err(err(
                op,
                format!(
                    "scatter_dims_to_operand_dims has {} entries for index vectors of {index_len}",
                    d.scatter_dims_to_operand_dims.len()
                ),
            ));
        }
        unique(
            op,
            "scatter_dims_to_operand_dims and input_batching_dims",
            &[
                &d.scatter_dims_to_operand_dims[..],
                &d.input_batching_dims[..],
            ]
            .concat(),
        )?;
        in_range(
            op,
            "scatter_dims_to_operand_dims",
            &d.scatter_dims_to_operand_dims,
            xr,
        )?;
        // C4: the updates' scatter dimensions follow the indices, their window dimensions fit
        // in the input's.
        let mut scatter_sizes = idx.shape.clone();
        if ivd < ir {
            scatter_sizes.remove(ivd);
        }
        let window_bounds: Vec<i64> = (0..xr as i64)
            .filter(|i| !d.inserted_window_dims.contains(i) && !d.input_batching_dims.contains(i))
            .map(|i| x.shape[i as usize])
            .collect();
        if scatter_sizes.len() + window_bounds.len() != ur {
            return Err(err(
                op,
                format!(
                    "updates {u} should have rank {}",
                    scatter_sizes.len() + window_bounds.len()
                ),
            ));
        }
        let (mut s, mut w) = (scatter_sizes.iter(), window_bounds.iter());
        for (i, &size) in u.shape.iter().enumerate() {
            let ok = if d.update_window_dims.contains(&(i as i64)) {
                w.next()
                    .is_some_and(|&b| size == DYNAMIC || b == DYNAMIC || size <= b)
            } else {
                s.next().is_some_and(|&b| dim_eq(size, b))
            };
            if !ok {
                return Err(err(
                    op,
                    format!("updates {u} do not fit input {x} and indices {idx}"),
                ));
            }
        }
        check_combiner(op, n)
    }

    fn convolution(&self, op: &Operation, c: &Convolution) -> Result<()> {
        self.counts(op, 2, 1)?;
        let t = self.operands(op)?;
        let r = self.tensor(op, op.results[0])?;
        let (lhs, rhs) = (t[0], t[1]);
        let n = lhs.rank();
        if rhs.rank() != n || r.rank() != n || n < 2 {
            return Err(err(
                op,
                format!("lhs {lhs}, rhs {rhs} and result {r} need one rank >= 2"),
            ));
        }
        let s = n - 2;
        arity(op, "window_strides", c.window_strides.len(), s)?;
        positive(op, "window_strides", &c.window_strides)?;
        arity(op, "padding", c.padding.len(), s)?;
        arity(op, "lhs_dilation", c.lhs_dilation.len(), s)?;
        positive(op, "lhs_dilation", &c.lhs_dilation)?;
        arity(op, "rhs_dilation", c.rhs_dilation.len(), s)?;
        positive(op, "rhs_dilation", &c.rhs_dilation)?;
        arity(op, "window_reversal", c.window_reversal.len(), s)?;
        let d = &c.dimension_numbers;
        arity(
            op,
            "input_spatial_dimensions",
            d.input_spatial_dimensions.len(),
            s,
        )?;
        arity(
            op,
            "kernel_spatial_dimensions",
            d.kernel_spatial_dimensions.len(),
            s,
        )?;
        arity(
            op,
            "output_spatial_dimensions",
            d.output_spatial_dimensions.len(),
            s,
        )?;
        let input = [
            &[d.input_batch_dimension, d.input_feature_dimension][..],
            &d.input_spatial_dimensions,
        ]
        .concat();
        let kernel = [
            &[
                d.kernel_input_feature_dimension,
                d.kernel_output_feature_dimension,
            ][..],
            &d.kernel_spatial_dimensions,
        ]
        .concat();
        let output = [
            &[d.output_batch_dimension, d.output_feature_dimension][..],
            &d.output_spatial_dimensions,
        ]
        .concat();
        for (what, dims) in [
            ("input dimensions", &input),
            ("kernel dimensions", &kernel),
            ("output dimensions", &output),
        ] {
            unique(op, what, dims)?;
            in_range(op, what, dims, n)?;
        }
        let (fg, bg) = (c.feature_group_count, c.batch_group_count);
        if fg < 1 || bg < 1 || (fg != 1 && bg != 1) {
            return Err(err(
                op,
                format!(
                    "feature_group_count {fg} and batch_group_count {bg} must be positive, \
                     one of them 1"
                ),
            ));
        }
        if !c.precision_config.is_empty() && c.precision_config.len() != 2 {
            return Err(err(op, "precision_config needs two entries"));
        }
        let dim = |x: &TensorType, i: i64| x.shape[i as usize];
        let batch = dim(lhs, d.input_batch_dimension);
        let features = dim(lhs, d.input_feature_dimension);
        let kin = dim(rhs, d.kernel_input_feature_dimension);
        let kout = dim(rhs, d.kernel_output_feature_dimension);
        let divides = |x: i64, g: i64| x == DYNAMIC || x % g == 0;
        if !divides(batch, bg)
            || !divides(features, fg)
            || !divides(kout, bg)
            || !divides(kout, fg)
            || (features != DYNAMIC && !dim_eq(kin, features / fg))
        {
            return Err(err(
                op,
                format!(
                    "lhs {lhs} and rhs {rhs} do not fit feature_group_count {fg}, \
                     batch_group_count {bg}"
                ),
            ));
        }
        let mut want = vec![0; n];
        want[d.output_batch_dimension as usize] = if batch == DYNAMIC {
            DYNAMIC
        } else {
            batch / bg
        };
        want[d.output_feature_dimension as usize] = kout;
        for i in 0..s {
            let w = num_windows(
                dim(lhs, d.input_spatial_dimensions[i]),
                c.lhs_dilation[i],
                c.padding[i],
                dim(rhs, d.kernel_spatial_dimensions[i]),
                c.rhs_dilation[i],
                c.window_strides[i],
            )
            .ok_or_else(|| err(op, "window arithmetic overflows"))?;
            want[d.output_spatial_dimensions[i] as usize] = w;
        }
        if !shape_eq(&r.shape, &want) {
            return Err(err(op, format!("result {r} should have shape {want:?}")));
        }
        Ok(())
    }

    fn reduce_window(
        &self,
        op: &Operation,
        window: &[i64],
        strides: &[i64],
        base_dilations: &[i64],
        window_dilations: &[i64],
        padding: &[(i64, i64)],
    ) -> Result<()> {
        let n = op.results.len();
        if n == 0 || op.operands.len() != 2 * n || op.regions.len() != 1 {
            return Err(err(
                op,
                "needs N inputs, N init values, N results and a body",
            ));
        }
        let t = self.operands(op)?;
        let r = self.results(op)?;
        let x = t[0];
        let rank = x.rank();
        arity(op, "window_dimensions", window.len(), rank)?;
        positive(op, "window_dimensions", window)?;
        arity(op, "window_strides", strides.len(), rank)?;
        positive(op, "window_strides", strides)?;
        arity(op, "base_dilations", base_dilations.len(), rank)?;
        positive(op, "base_dilations", base_dilations)?;
        arity(op, "window_dilations", window_dilations.len(), rank)?;
        positive(op, "window_dilations", window_dilations)?;
        arity(op, "padding", padding.len(), rank)?;
        let mut want = Vec::with_capacity(rank);
        for i in 0..rank {
            want.push(
                num_windows(
                    x.shape[i],
                    base_dilations[i],
                    padding[i],
                    window[i],
                    window_dilations[i],
                    strides[i],
                )
                .ok_or_else(|| err(op, "window arithmetic overflows"))?,
            );
        }
        for i in 0..n {
            if !shape_eq(&t[i].shape, &x.shape) {
                return Err(err(op, "inputs must have one shape"));
            }
            if t[n + i].rank() != 0 || t[n + i].dtype != t[i].dtype {
                return Err(err(
                    op,
                    format!("init value {} must be a scalar of {}", t[n + i], t[i].dtype),
                ));
            }
            if !shape_eq(&r[i].shape, &want) {
                return Err(err(
                    op,
                    format!("result {} should have shape {want:?}", r[i]),
                ));
            }
        }
        check_combiner(op, n)
    }

    fn select_and_scatter(
        &self,
        op: &Operation,
        window: &[i64],
        strides: &[i64],
        padding: &[(i64, i64)],
    ) -> Result<()> {
        self.counts(op, 3, 1)?;
        if op.regions.len() != 2 {
            return Err(err(op, "needs select and scatter regions"));
        }
        let t = self.operands(op)?;
        let r = self.tensor(op, op.results[0])?;
        let (x, source, init) = (t[0], t[1], t[2]);
        if x != r || source.dtype != x.dtype || init.dtype != x.dtype || init.rank() != 0 {
            return Err(err(
                op,
                format!("operand {x}, source {source}, init {init} and result {r} must agree"),
            ));
        }
        let rank = x.rank();
        arity(op, "window_dimensions", window.len(), rank)?;
        positive(op, "window_dimensions", window)?;
        arity(op, "window_strides", strides.len(), rank)?;
        positive(op, "window_strides", strides)?;
        arity(op, "padding", padding.len(), rank)?;
        let mut want = Vec::with_capacity(rank);
        for i in 0..rank {
            want.push(
                num_windows(x.shape[i], 1, padding[i], window[i], 1, strides[i])
                    .ok_or_else(|| err(op, "window arithmetic overflows"))?,
            );
        }
        if !shape_eq(&source.shape, &want) {
            return Err(err(
                op,
                format!("source {source} should have shape {want:?}"),
            ));
        }
        let (select, scatter) = (&op.regions[0], &op.regions[1]);
        if select.args.len() != 2
            || select.returned().len() != 1
            || scatter.args.len() != 2
            || scatter.returned().len() != 1
        {
            return Err(err(op, "select and scatter must each take two scalars"));
        }
        Ok(())
    }

    fn fft(&self, op: &Operation, fft_type: FftType, fft_length: &[i64]) -> Result<()> {
        self.counts(op, 1, 1)?;
        let (x, r) = (
            self.tensor(op, op.operands[0])?,
            self.tensor(op, op.results[0])?,
        );
        let k = fft_length.len();
        if !(1..=3).contains(&k) || k > x.rank() || x.rank() != r.rank() {
            return Err(err(
                op,
                format!("fft_length {fft_length:?} does not suit {x} -> {r}"),
            ));
        }
        let types_ok = match fft_type {
            FftType::Fft | FftType::Ifft => x.dtype.is_complex() && x.dtype == r.dtype,
            FftType::Rfft => x.dtype.complex_of() == Some(r.dtype),
            FftType::Irfft => r.dtype.complex_of() == Some(x.dtype),
        };
        if !types_ok {
            return Err(err(
                op,
                format!("{fft_type} from {} to {}", x.dtype, r.dtype),
            ));
        }
        // The real side's trailing dimensions are the transform lengths; the complex side of a
        // real transform keeps n / 2 + 1 of the last one.
        let n = x.rank();
        let real = match fft_type {
            FftType::Rfft => Some(x),
            FftType::Irfft => Some(r),
            _ => None,
        };
        if let Some(real) = real {
            if !shape_eq(&real.shape[n - k..], fft_length) {
                return Err(err(
                    op,
                    format!("fft_length {fft_length:?} differs from {real}'s trailing dimensions"),
                ));
            }
        }
        let mut want = x.shape.clone();
        let half = |v: i64| if v == 0 || v == DYNAMIC { v } else { v / 2 + 1 };
        match fft_type {
            FftType::Rfft => want[n - 1] = half(x.shape[n - 1]),
            FftType::Irfft => want[n - 1] = r.shape[n - 1],
            _ => {}
        }
        if fft_type == FftType::Irfft && !dim_eq(x.shape[n - 1], half(r.shape[n - 1])) {
            return Err(err(
                op,
                format!("operand {x} should have {} last", half(r.shape[n - 1])),
            ));
        }
        if !shape_eq(&r.shape, &want) {
            return Err(err(op, format!("result {r} should have shape {want:?}")));
        }
        Ok(())
    }

    /// `batch_norm_*`: `full` operands and results have the operand's type, `features` ones are
    /// 1-d of its feature dimension's size.
    fn batch_norm(
        &self,
        op: &Operation,
        feature_index: i64,
        full: &[usize],
        features: std::ops::Range<usize>,
        full_results: &[usize],
        feature_results: &[usize],
    ) -> Result<()> {
        let t = self.operands(op)?;
        let r = self.results(op)?;
        let x = t[0];
        in_range(op, "feature_index", &[feature_index], x.rank())?;
        if !x.dtype.is_float() {
            return Err(err(op, format!("operand {x} must be a float tensor")));
        }
        let want = TensorType::new(vec![x.shape[feature_index as usize]], x.dtype);
        let full_ok = full
            .iter()
            .map(|&i| t[i])
            .chain(full_results.iter().map(|&i| r[i]))
            .all(|y| y.dtype == x.dtype && shape_eq(&y.shape, &x.shape));
        let features_ok = features
            .map(|i| t[i])
            .chain(feature_results.iter().map(|&i| r[i]))
            .all(|y| y.dtype == x.dtype && shape_eq(&y.shape, &want.shape));
        if !full_ok || !features_ok {
            return Err(err(
                op,
                format!(
                    "operands and results must be {x} or {want} for feature_index {feature_index}"
                ),
            ));
        }
        Ok(())
    }
}
