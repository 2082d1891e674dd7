//! The `convolution` emitter: an implicit GEMM over f32 operands, without an im2col buffer.
//!
//! Output pixels (batch × output spatial positions) are the rows M, the output features of a
//! group the columns N, window positions × input features of the group the contraction K.
//! Each invocation keeps an R×C block of results in registers; for every window position it
//! works out, once per row, where that row's input pixel lies (or that it falls on padding or
//! a hole of lhs dilation), then runs over the input features reading R input and C kernel
//! values per step. CPU adapters (llvmpipe: workgroup memory and barriers emulated, every
//! load a loop over the SIMD lanes) get this register-blocked kernel with large blocks (up to
//! 32×32) and scalar loads, chosen by measurement. GPUs get a workgroup-tiled kernel: 64×64
//! tiles of 16×16 invocations with 4×4 blocks, operands staged in workgroup memory 16 steps
//! of K at a time; where its grid does not fit they get the register-blocked one with 4×4
//! blocks and `vec4` loads where the layouts allow. Any dimension numbers (the index math reads through the layouts), strides,
//! padding, lhs/rhs dilation, window reversal and feature or batch groups are covered; the
//! group becomes a batch dimension of the GEMM.
//!
//! A contraction too long for one invocation (filter gradients sum over batch × image), or a
//! result too small to keep the adapter busy, is split over chunks of window positions (and
//! of input features when a single position is too long): partial blocks go to a temporary
//! and [`partials::fold`] sums them.
//!
//! Other element types, fused producers and empty shapes are left to the per-element
//! emitter (`expr.rs`) through [`super::dot_kernel`].

use super::dot_kernel::{gemm_main, GemmSpec, GemmTile};
use super::dtype::Compute;
use super::expr::Binding;
use super::kernel::{self, Kernel};
use super::loop_kernel::Target;
use super::op_kernels::Plan;
use super::partials;
use crate::error::Result;
use crate::fusion::Group;
use crate::ir::ops::Convolution;
use crate::ir::{ElementType, Function, Op, Operation, TensorType, Type};

/// Invocations per workgroup of the register-blocked kernel.
const WORKGROUP: u64 = 64;

/// `WGPU_HLO_CONV=naive` leaves every convolution to the per-element emitter (comparisons).
fn disabled() -> bool {
    std::env::var("WGPU_HLO_CONV").is_ok_and(|v| v == "naive")
}

/// The plan computing the convolution `op` (the root of `group`) as an implicit GEMM, or
/// `None` when this emitter does not cover it (the caller falls back to the per-element one).
pub fn plan(
    name: &str,
    f: &Function,
    group: &Group,
    op: &Operation,
    target: Target,
) -> Result<Option<Plan>> {
    let Op::Convolution(c) = &op.op else {
        return Ok(None);
    };
    if disabled() || !group.members.is_empty() || group.outputs.len() != 1 {
        return Ok(None);
    }
    let Some(g) = Gemm::new(f, op, c, target) else {
        return Ok(None);
    };
    let bound = target.max_invocation_iterations.max(16);
    let Some(tiling) = g
        .tiled(bound, target)
        .or_else(|| g.shared(bound, target))
        .or_else(|| g.direct(bound, target))
    else {
        return Ok(None);
    };
    let chunks = g.windows.div_ceil(tiling.wchunk) * g.cg.div_ceil(tiling.fchunk);
    let n = g.ot.num_elements() as u64;
    if n.checked_mul(chunks)
        .is_none_or(|p| p > u32::MAX as u64 || p * 4 > target.max_binding_size)
    {
        return Ok(None);
    }
    let output = Binding {
        value: op.results[0],
        ty: g.ot.clone(),
    };
    if chunks == 1 {
        let k = g.kernel(name, op, &tiling, None, target)?;
        return Ok(Some(Plan::sequential(vec![k], Vec::new())));
    }
    let parts = partials::binding(0, ElementType::F32, n * chunks);
    let first = g.kernel(
        &format!("{name}_partials"),
        op,
        &tiling,
        Some(parts.clone()),
        target,
    )?;
    let add = |acc: &[String], vals: &[String]| format!("{0} = {0} + {1};", acc[0], vals[0]);
    partials::fold(
        name,
        first,
        vec![parts],
        n,
        chunks,
        vec![output],
        &[Compute::F32],
        "",
        &add,
        true,
        target,
    )
    .map(Some)
}

/// One spatial dimension of the convolution.
#[derive(Clone, Copy, Debug)]
struct Spatial {
    /// Input size and element stride.
    in_size: u64,
    in_stride: u64,
    /// Kernel (window) size and element stride.
    k_size: u64,
    k_stride: u64,
    /// Output size and element stride.
    out_size: u64,
    out_stride: u64,
    stride: i64,
    low: i64,
    lhs_dilation: i64,
    rhs_dilation: i64,
    reversed: bool,
}

/// How the innermost loop (over input features) reads its operands. Loads dominate on CPU
/// adapters (each is a loop over the SIMD lanes), so where the layouts allow it the operands
/// are read four floats at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inner {
    /// One feature per step, scalar loads.
    Scalar,
    /// Four features per step: input and kernel read as `vec4` along the input features
    /// (both contiguous there), each result a `dot`.
    FeatureDot,
    /// Four features per step: input read as `vec4` along its features, kernel as `vec4`
    /// along the output features (NHWC × HWIO); results kept as `vec4` over 4 columns.
    FeatureByColumn,
    /// One feature per step: kernel read as `vec4` along the output features (filter
    /// gradients: the output gradient as the kernel); results as `vec4` over 4 columns.
    Column,
}

impl Inner {
    /// Input features per step of the inner loop.
    fn step(self) -> u64 {
        match self {
            Inner::FeatureDot | Inner::FeatureByColumn => 4,
            Inner::Scalar | Inner::Column => 1,
        }
    }

    /// Whether results are `vec4` accumulators over groups of 4 columns.
    fn by_column(self) -> bool {
        matches!(self, Inner::FeatureByColumn | Inner::Column)
    }
}

/// How the work is cut: rows × columns of results per invocation, the inner loop, window
/// positions and input features per chunk of the contraction.
struct Tiling {
    /// Workgroup tiles in workgroup memory (the dot's GPU kernel, `rows` x `cols` results of
    /// 16×16 invocations) rather than independent register blocks.
    tiled: Option<GemmTile>,
    /// Shared rows (CPU adapters with one subgroup size, this size): a workgroup is one
    /// subgroup computing `rows` rows and `cols` columns per lane; see [`Gemm::shared`].
    shared: u64,
    rows: u64,
    cols: u64,
    inner: Inner,
    wchunk: u64,
    fchunk: u64,
    /// The register-blocked kernel slides its rows' inputs along the last spatial dimension
    /// (see [`Gemm::slides`]).
    slide: bool,
}

/// A convolution read as groups of GEMMs.
struct Gemm {
    lt: TensorType,
    kt: TensorType,
    ot: TensorType,
    spatial: Vec<Spatial>,
    /// GEMMs (feature or batch groups).
    groups: u64,
    /// Whether the groups split the input batch (batch_group_count) rather than its features.
    batch_groups: bool,
    /// Output batch size and the strides of the batch in the input and output.
    out_batch: u64,
    in_batch_stride: u64,
    out_batch_stride: u64,
    /// Input feature stride; kernel input and output feature strides; output feature stride.
    in_feature_stride: u64,
    k_in_stride: u64,
    k_out_stride: u64,
    out_feature_stride: u64,
    /// Rows (output pixels), columns per group (output features), input features per group,
    /// window positions.
    m: u64,
    n: u64,
    cg: u64,
    windows: u64,
}

impl Gemm {
    fn new(f: &Function, op: &Operation, c: &Convolution, target: Target) -> Option<Gemm> {
        let tensor = |v| match f.ty(v) {
            Type::Tensor(t) if t.is_static() && t.dtype == ElementType::F32 => Some(t.clone()),
            _ => None,
        };
        if op.operands.len() != 2 || op.results.len() != 1 {
            return None;
        }
        let (lt, kt, ot) = (
            tensor(op.operands[0])?,
            tensor(op.operands[1])?,
            tensor(op.results[0])?,
        );
        // Every index and offset fits u32 arithmetic, every tensor one binding.
        for t in [&lt, &kt, &ot] {
            let e = t.num_elements() as u64;
            if e == 0 || e > i32::MAX as u64 || e * 4 > target.max_binding_size {
                return None;
            }
        }
        let d = &c.dimension_numbers;
        let (ld, kd, od) = (lt.dims(), kt.dims(), ot.dims());
        let (ls, ks, os) = (lt.strides(), kt.strides(), ot.strides());
        let at = |v: &[usize], i: i64| usize::try_from(i).ok().and_then(|i| v.get(i).copied());
        let sp = d.input_spatial_dimensions.len();
        if d.kernel_spatial_dimensions.len() != sp || d.output_spatial_dimensions.len() != sp {
            return None;
        }
        let get = |v: &[i64], s: usize, default: i64| v.get(s).copied().unwrap_or(default);
        let mut spatial = Vec::with_capacity(sp);
        for s in 0..sp {
            let (xi, ki, oi) = (
                d.input_spatial_dimensions[s],
                d.kernel_spatial_dimensions[s],
                d.output_spatial_dimensions[s],
            );
            let sd = Spatial {
                in_size: at(&ld, xi)? as u64,
                in_stride: at(&ls, xi)? as u64,
                k_size: at(&kd, ki)? as u64,
                k_stride: at(&ks, ki)? as u64,
                out_size: at(&od, oi)? as u64,
                out_stride: at(&os, oi)? as u64,
                stride: get(&c.window_strides, s, 1),
                low: c.padding.get(s).map_or(0, |p| p.0),
                lhs_dilation: get(&c.lhs_dilation, s, 1),
                rhs_dilation: get(&c.rhs_dilation, s, 1),
                reversed: c.window_reversal.get(s).copied().unwrap_or(false),
            };
            // Positions are computed in i32.
            let reach = (sd.out_size as i64) * sd.stride.abs()
                + (sd.k_size as i64) * sd.rhs_dilation.abs()
                + sd.low.abs()
                + (sd.in_size as i64) * sd.lhs_dilation.abs();
            if sd.stride < 1 || sd.lhs_dilation < 1 || sd.rhs_dilation < 1 || reach > 1 << 30 {
                return None;
            }
            spatial.push(sd);
        }
        let fg = c.feature_group_count.max(1) as u64;
        let bg = c.batch_group_count.max(1) as u64;
        if fg > 1 && bg > 1 {
            return None;
        }
        let groups = fg.max(bg);
        let out_features = at(&od, d.output_feature_dimension)? as u64;
        let out_batch = at(&od, d.output_batch_dimension)? as u64;
        let cg = at(&kd, d.kernel_input_feature_dimension)? as u64;
        let in_features = at(&ld, d.input_feature_dimension)? as u64;
        let in_batch = at(&ld, d.input_batch_dimension)? as u64;
        if out_features % groups != 0
            || at(&kd, d.kernel_output_feature_dimension)? as u64 != out_features
            || in_features != cg * fg
            || in_batch != out_batch * bg
        {
            return None;
        }
        let m = out_batch * spatial.iter().map(|s| s.out_size).product::<u64>();
        let windows = spatial.iter().map(|s| s.k_size).product::<u64>();
        Some(Gemm {
            spatial,
            groups,
            batch_groups: bg > 1,
            out_batch,
            in_batch_stride: at(&ls, d.input_batch_dimension)? as u64,
            out_batch_stride: at(&os, d.output_batch_dimension)? as u64,
            in_feature_stride: at(&ls, d.input_feature_dimension)? as u64,
            k_in_stride: at(&ks, d.kernel_input_feature_dimension)? as u64,
            k_out_stride: at(&ks, d.kernel_output_feature_dimension)? as u64,
            out_feature_stride: at(&os, d.output_feature_dimension)? as u64,
            m,
            n: out_features / groups,
            cg,
            windows,
            lt,
            kt,
            ot,
        })
    }

    /// The register-blocked cut (every adapter).
    fn direct(&self, bound: u64, target: Target) -> Option<Tiling> {
        let (rows, cols) = self.block(target);
        let inner = self.inner(cols, target);
        let (wchunk, fchunk) = self.chunks((rows, cols), inner, None, bound, target)?;
        Some(Tiling {
            tiled: None,
            shared: 0,
            rows,
            cols,
            inner,
            wchunk,
            fchunk,
            slide: self.slides(rows, (wchunk, fchunk / inner.step()), bound),
        })
    }

    /// Whether the register-blocked kernel of `rows` rows, looping over `wchunk` window
    /// positions and `fsteps` steps of features, slides along the last spatial dimension.
    /// Consecutive rows of a block are consecutive output positions along that dimension;
    /// with a stride and dilations of 1 there, row `i` at window position `w` reads what row
    /// `i + 1` read at `w - 1`. So for every feature the kernel walks each line of the window
    /// (its positions along the last dimension) in order: it loads all rows' inputs where
    /// the line starts, and at every position shifts them down one row and loads only the
    /// last row's, one load instead of `rows`. A block whose rows wrap to the next line (or
    /// past the end) takes lines of one position: every row loaded at every position, as
    /// without sliding. The loops nest the other way round (features outside), and each
    /// line costs a back-edge of its own. `WGPU_HLO_CONV_SLIDE=0` turns it off.
    ///
    /// Lavapipe, jax, min of 7 calls, alternating runs: `jnp.convolve` of 1M by 64 taps (one
    /// 32-row block per invocation) 79 -> 13-15 ms (jax cpu 13); 3x3 over 16x64x64x32 (lines
    /// of 64, blocks of 32 rows): depthwise 33-37 -> 22-27 ms, to 8 features 29-39 -> 23-24,
    /// to 1 feature 21-27 -> 14-15.
    fn slides(&self, rows: u64, (wchunk, fsteps): (u64, u64), bound: u64) -> bool {
        self.slide_shape(rows) && fsteps * (2 * wchunk + 1) < bound
    }

    /// Whether blocks of `rows` rows can slide ([`Gemm::slides`] but for the loop bound).
    fn slide_shape(&self, rows: u64) -> bool {
        if std::env::var("WGPU_HLO_CONV_SLIDE").is_ok_and(|v| v.trim() == "0") {
            return false;
        }
        let Some(last) = self.spatial.last() else {
            return false;
        };
        // Blocks that straddle two lines load every row at every position, and llvmpipe runs
        // 8 invocations (consecutive blocks) in lock step: one such block costs its group of 8
        // all that sliding saves, and more. So every block lies in one line (lines a multiple
        // of the rows), or at most one group in 8 holds a line's end (lines of 64 blocks or
        // more). Lavapipe, 3x3 over 8x56x56x32 (32-row blocks, 4 of 7 in one line), 8 output
        // features: 12 ms without sliding, 22 ms with.
        let lines_fit = last.out_size % rows == 0 || last.out_size >= 64 * rows;
        rows > 1
            && lines_fit
            && last.stride == 1
            && last.lhs_dilation == 1
            && last.rhs_dilation == 1
            && last.k_size > 1
            && last.out_size > 1
    }

    /// The workgroup-tiled cut, for GPUs (`WGPU_HLO_CONV_INNER=tiled` forces it, for tests):
    /// `None` on CPU adapters, where workgroup memory and barriers are emulated at a high
    /// cost, and when the tile grid exceeds the adapter's.
    fn tiled(&self, bound: u64, target: Target) -> Option<Tiling> {
        let wanted = match std::env::var("WGPU_HLO_CONV_INNER").ok().as_deref() {
            Some("tiled") => true,
            Some(_) => false,
            None => !target.cpu_adapter,
        };
        if !wanted {
            return None;
        }
        let tile = GemmTile::choose(self.groups, self.m, self.n);
        // Steps of `bk` along K, each 1 + bk back-edges; a chunk is whole window positions
        // of `fchunk` features (all of them unless one position is already too long).
        let kmax = bound.checked_sub(2)? / (1 + tile.bk) * tile.bk;
        if kmax < tile.bk {
            return None;
        }
        let fchunk = self.cg.div_ceil(self.cg.div_ceil(kmax));
        let wmax = (kmax / fchunk).clamp(1, self.windows);
        let mut wchunks = self.windows.div_ceil(wmax);
        let fchunks = self.cg.div_ceil(fchunk);
        let tiles = self.groups * self.m.div_ceil(tile.bm) * self.n.div_ceil(tile.bn);
        while tiles * wchunks * fchunks * 256 < 1 << 15
            && self.windows.div_ceil(wchunks * 2) * fchunk >= 256
        {
            wchunks *= 2;
        }
        let max = target.max_workgroups as u64;
        if self.m.div_ceil(tile.bm) > max
            || self.n.div_ceil(tile.bn) > max
            || self.groups * wchunks * fchunks > max
        {
            return None;
        }
        Some(Tiling {
            tiled: Some(tile),
            shared: 0,
            rows: tile.bm,
            cols: tile.bn,
            inner: Inner::Scalar,
            wchunk: self.windows.div_ceil(wchunks),
            fchunk,
            slide: false,
        })
    }

    /// The shared-rows cut for CPU adapters with subgroups of one size (llvmpipe), as in the
    /// dot's `dot_subgroup`: a workgroup is one subgroup of `S` lanes computing `rows` output
    /// pixels and `S x cols` output features of a group; each lane loads `rows / S` input
    /// values per step (its own pixels) and the subgroup shares them with `subgroupBroadcast`
    /// (a vector lane move in llvmpipe, whose loads are loops over the lanes), while the
    /// kernel values are the lane's own columns, four per load when the output features are
    /// contiguous. Conv 3x3 8x56x56x64 -> 64 on lavapipe: 32x32 register blocks 266 ms, shared
    /// 64 rows x 8 columns per lane 95 ms. `WGPU_HLO_CONV_INNER=shared` forces it where it
    /// applies; any other value of that switch turns it off.
    fn shared(&self, bound: u64, target: Target) -> Option<Tiling> {
        let forced = match std::env::var("WGPU_HLO_CONV_INNER").ok().as_deref() {
            Some("shared") => true,
            Some(_) => return None,
            None => false,
        };
        let s = target.caps.subgroup_size as u64;
        if !(forced || target.cpu_adapter) || !target.caps.subgroup || !matches!(s, 4 | 8 | 16) {
            return None;
        }
        // Small convolutions keep the register-blocked kernel, cheaper to compile.
        let work = self.groups * self.m * self.n * self.cg * self.windows;
        if !forced && work < super::dot_subgroup::MIN_CONV_WORK {
            return None;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
        // Largest first; no wider than the columns (lanes past them compute clamped copies).
        // At most 256 accumulators a lane (32 x 8): the 512 of 64 x 8 and 128 x 4 took the
        // driver 1.7-1.9 s to compile each, and ran no faster (lavapipe, 2-core Intel host,
        // minimum of 12 calls, three alternating pairs: conv 3x3 8x56x56x64 -> 64 51.0-51.9
        // -> 50.7-51.0 ms, its filter gradient 117.8-118.5 -> 111.0-112.4, 32x14x14x64 -> 32
        // 8.5-8.6 -> 7.8-7.9; first call with the Mesa shader cache off: 1.9 -> 0.65 s, the
        // flax CNN step 10.4 -> 5.0 s). `WGPU_HLO_CONV_TALL_TILES=1` brings them back.
        let tall = std::env::var("WGPU_HLO_CONV_TALL_TILES").is_ok_and(|v| v.trim() == "1");
        let shapes = [
            (64, 8),
            (128, 4),
            (32, 8),
            (64, 4),
            (32, 4),
            (16, 4),
            (8, 4),
        ];
        let shapes = &shapes[if tall { 0 } else { 2 }..];
        let count = |(rows, cols): (u64, u64)| {
            self.groups * self.m.div_ceil(rows) * self.n.div_ceil(s * cols)
        };
        // Lanes past the columns compute clamped copies: at most half of them may (a lane
        // block of 4 columns, 8 lanes, over 16 output features), unless the kernel is forced
        // (tests cover its ragged columns that way). With fewer features the
        // register-blocked kernel is faster (lavapipe, alternating runs, ms: a depthwise 3x3
        // over 16x64x64x32 170 -> 66, 32 -> 8 features 85 -> 45, 32 -> 1 70 -> 35, a 1-D
        // `jnp.convolve` of 1M by 64 285 -> 130; 1 -> 16 features stays shared, 14 against 17).
        let usable = |&(r, c): &(u64, u64)| {
            r % s == 0 && (s * c <= self.n || (c == 4 && (forced || 2 * self.n >= s * c)))
        };
        let (rows, cols) = shapes
            .iter()
            .copied()
            .filter(usable)
            .find(|&b| count(b) >= 2 * cores)
            .or_else(|| shapes.iter().copied().rfind(usable))?;
        let inner = if self.k_out_stride == 1 && self.n % 4 == 0 {
            Inner::Column
        } else {
            Inner::Scalar
        };
        // Chunks as for a register block of `rows` x `cols` (one feature per step).
        let (wchunk, fchunk) = self.chunks((rows, cols), Inner::Scalar, Some(s), bound, target)?;
        Some(Tiling {
            tiled: None,
            shared: s,
            rows,
            cols,
            inner,
            wchunk,
            fchunk,
            slide: false,
        })
    }

    /// The shared-rows kernel of [`Gemm::shared`] (results or, with `partials`, each chunk's
    /// partial sums as in [`Gemm::kernel`]).
    fn shared_kernel(
        &self,
        name: &str,
        op: &Operation,
        tiling: &Tiling,
        partials: Option<Binding>,
        target: Target,
    ) -> Result<Kernel> {
        let &Tiling {
            shared: sg,
            rows,
            cols,
            inner,
            wchunk,
            fchunk,
            ..
        } = tiling;
        let (m, n, cg, windows) = (self.m, self.n, self.cg, self.windows);
        let cols_tile = sg * cols;
        let (mb, nb) = (m.div_ceil(rows), n.div_ceil(cols_tile));
        let (wchunks, fchunks) = (windows.div_ceil(wchunk), cg.div_ceil(fchunk));
        let chunks = wchunks * fchunks;
        let groups_total = self.groups * mb * nb * chunks;
        let workgroups = kernel::grid(groups_total, target.max_workgroups)?;
        let pixels = m / self.out_batch.max(1);
        let vec_cols = inner == Inner::Column;
        let mut b = String::new();
        // The output offset of row `m` at feature 0.
        b.push_str(&format!(
            "fn o_at(m: u32) -> u32 {{\n    var r = m % {pixels}u;\n    var off = (m / {pixels}u) * {}u;\n",
            self.out_batch_stride
        ));
        for sd in self.spatial.iter().rev() {
            b.push_str(&format!(
                "    off = off + (r % {os}u) * {}u;\n    r = r / {os}u;\n",
                sd.out_stride,
                os = sd.out_size,
            ));
        }
        b.push_str("    return off;\n}\n\n");
        b.push_str(&format!(
            "@compute @workgroup_size({sg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
             @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {{\n    \
             {} = nwg.z >> 16u;\n    let t = wid.y * nwg.x + wid.x;\n",
            kernel::RUNTIME_ZERO
        ));
        b.push_str(&format!(
            "    if (t >= {groups_total}u) {{ return; }}\n    let chunk = t % {chunks}u;\n    let nblk = (t / {chunks}u) % {nb}u;\n    let mblk = (t / {}u) % {mb}u;\n    let g = t / {}u;\n    let w0 = (chunk / {fchunks}u) * {wchunk}u;\n    let w1 = min(w0 + {wchunk}u, {windows}u);\n    let f0 = (chunk % {fchunks}u) * {fchunk}u;\n    let f1 = min(f0 + {fchunk}u, {cg}u);\n",
            chunks * nb,
            chunks * nb * mb,
        ));
        let (batch_base, feature_base) = if self.batch_groups {
            (format!("g * {}u", self.out_batch), "0u".to_string())
        } else {
            ("0u".to_string(), format!("g * {cg}u"))
        };
        b.push_str(&format!(
            "    let xg = ({batch_base}) * {}u + ({feature_base}) * {}u;\n",
            self.in_batch_stride, self.in_feature_stride
        ));
        // The rows this lane loads for the subgroup: its input batch offset and window
        // origin per spatial dimension (rows past m are computed and dropped).
        let loads = rows / sg;
        for i in 0..loads {
            b.push_str(&format!(
                "    let m{i} = min(mblk * {rows}u + {}u + sl, {}u);\n    let ob{i} = m{i} / {pixels}u;\n    var r{i} = m{i} % {pixels}u;\n    let xb{i} = xg + ob{i} * {}u;\n",
                i * sg,
                m - 1,
                self.in_batch_stride,
            ));
            for (s, sd) in self.spatial.iter().enumerate().rev() {
                b.push_str(&format!(
                    "    let os{i}_{s} = r{i} % {}u;\n    r{i} = r{i} / {}u;\n    let q{i}_{s} = i32(os{i}_{s}) * {}i - ({}i);\n",
                    sd.out_size, sd.out_size, sd.stride, sd.low
                ));
            }
        }
        // The lane's columns: kernel offsets of its output features.
        let n_last = if vec_cols { n - 4 } else { n - 1 };
        let col_loads = if vec_cols { cols / 4 } else { cols };
        for j in 0..col_loads {
            let step = if vec_cols { 4 * j } else { j };
            b.push_str(&format!(
                "    let of{j} = g * {n}u + min(nblk * {cols_tile}u + sl * {cols}u + {step}u, {n_last}u);\n    let kc{j} = of{j} * {}u;\n",
                self.k_out_stride,
            ));
        }
        for i in 0..rows {
            for q in 0..cols / 4 {
                b.push_str(&format!("    var acc{i}_{q} = vec4<f32>(0.0f);\n"));
            }
        }
        b.push_str("    for (var w = w0; w < w1; w = w + 1u) {\n        var rw = w;\n        var kw = 0u;\n");
        for (s, sd) in self.spatial.iter().enumerate().rev() {
            let kidx = if sd.reversed {
                format!("({}u - ws{s})", sd.k_size - 1)
            } else {
                format!("ws{s}")
            };
            b.push_str(&format!(
                "        let ws{s} = rw % {k}u;\n        rw = rw / {k}u;\n        kw = kw + {kidx} * {}u;\n        let wd{s} = i32(ws{s}) * {}i;\n",
                sd.k_stride,
                sd.rhs_dilation,
                k = sd.k_size,
            ));
        }
        for i in 0..loads {
            let mut conds = Vec::new();
            let mut off = format!("xb{i}");
            for (s, sd) in self.spatial.iter().enumerate() {
                b.push_str(&format!("        let p{i}_{s} = q{i}_{s} + wd{s};\n"));
                let ld = sd.lhs_dilation;
                conds.push(format!("p{i}_{s} >= 0i"));
                if ld > 1 {
                    conds.push(format!("p{i}_{s} % {ld}i == 0i"));
                    conds.push(format!("p{i}_{s} / {ld}i < {}i", sd.in_size));
                    off.push_str(&format!(" + u32(p{i}_{s} / {ld}i) * {}u", sd.in_stride));
                } else {
                    conds.push(format!("p{i}_{s} < {}i", sd.in_size));
                    off.push_str(&format!(" + u32(p{i}_{s}) * {}u", sd.in_stride));
                }
            }
            if conds.is_empty() {
                conds.push("true".to_string());
            }
            b.push_str(&format!(
                "        let v{i} = {};\n        let x{i} = select(0u, {off}, v{i});\n",
                conds.join(" && ")
            ));
        }
        // Uniform control flow throughout (the broadcasts need it): padding reads as 0.
        // Four features a loop trip where every chunk of features is whole fours, each
        // accumulator summing them in one expression (`dot_subgroup`'s chains: the same sums
        // in the same order, the spilled accumulators loaded and stored once a trip).
        let fstep = if super::dot_subgroup::chains(cg, fchunk) {
            4
        } else {
            1
        };
        b.push_str(&format!(
            "        for (var f = f0; f < f1; f = f + {fstep}u) {{\n"
        ));
        let (xs, ks) = (self.in_feature_stride, self.k_in_stride);
        for ff in 0..fstep {
            let fx = if ff == 0 {
                "f".to_string()
            } else {
                format!("(f + {ff}u)")
            };
            for i in 0..loads {
                b.push_str(&format!(
                    "            let a{ff}_{i} = select(0.0f, in0[x{i} + {fx} * {xs}u], v{i});\n"
                ));
            }
            for q in 0..cols / 4 {
                let w = if vec_cols {
                    format!("in1[(kc{q} + kw + {fx} * {ks}u) >> 2u]")
                } else {
                    format!(
                        "vec4<f32>(in1[kc{} + kw + {fx} * {ks}u], in1[kc{} + kw + {fx} * {ks}u], in1[kc{} + kw + {fx} * {ks}u], in1[kc{} + kw + {fx} * {ks}u])",
                        4 * q,
                        4 * q + 1,
                        4 * q + 2,
                        4 * q + 3
                    )
                };
                b.push_str(&format!("            let b{ff}_{q} = {w};\n"));
            }
        }
        for i in 0..rows {
            for ff in 0..fstep {
                b.push_str(&format!(
                    "            let s{ff}_{i} = subgroupBroadcast(a{ff}_{}, {}u);\n",
                    i / sg,
                    i % sg
                ));
            }
            for q in 0..cols / 4 {
                let terms: Vec<String> = (0..fstep)
                    .map(|ff| format!("s{ff}_{i} * b{ff}_{q}"))
                    .collect();
                let e = super::dot_subgroup::chained_sum(&format!("acc{i}_{q}"), &terms);
                b.push_str(&format!("            acc{i}_{q} = {e};\n"));
            }
        }
        b.push_str("        }\n    }\n");
        // The stores of a row: inline for blocks an epilogue may list (CPU adapters list the
        // entry point's stores), else one call per row of `store_row` (after the entry
        // point), which keeps the entry point's expressions few: naga's WGSL front end takes
        // time superlinear in them (see `dot_kernel::store_block`).
        let store_row = |b: &mut String, indent: &str, row_acc: &dyn Fn(u64) -> String| {
            for j in 0..cols {
                let col = format!("nblk * {cols_tile}u + sl * {cols}u + {j}u");
                let o = format!("orow + (g * {n}u + {col}) * {}u", self.out_feature_stride);
                let at = if partials.is_some() {
                    format!("({o}) * {chunks}u + chunk")
                } else {
                    o
                };
                b.push_str(&format!(
                    "{indent}if ({col} < {n}u) {{ out0[{at}] = {}.{}; }}\n",
                    row_acc(j / 4),
                    ["x", "y", "z", "w"][j as usize % 4]
                ));
            }
        };
        let calls = rows * cols > super::epilogue::MAX_LISTED_STORES as u64;
        let chunk_arg = if partials.is_some() { ", chunk" } else { "" };
        for i in 0..rows {
            if calls {
                let accs: String = (0..cols.div_ceil(4))
                    .map(|q| format!(", acc{i}_{q}"))
                    .collect();
                b.push_str(&format!(
                    "    store_row(mblk * {rows}u + {i}u, nblk, g, sl{chunk_arg}{accs});\n"
                ));
                continue;
            }
            b.push_str(&format!(
                "    if (mblk * {rows}u + {i}u < {m}u) {{\n        let orow = o_at(mblk * {rows}u + {i}u);\n"
            ));
            store_row(&mut b, "        ", &|q| format!("acc{i}_{q}"));
            b.push_str("    }\n");
        }
        b.push_str("}\n");
        if calls {
            let chunk_param = if partials.is_some() {
                ", chunk: u32"
            } else {
                ""
            };
            let params: String = (0..cols.div_ceil(4))
                .map(|q| format!(", a{q}: vec4<f32>"))
                .collect();
            b.push_str(&format!(
                "\nfn store_row(row: u32, nblk: u32, g: u32, sl: u32{chunk_param}{params}) {{\n    if (row >= {m}u) {{ return; }}\n    let orow = o_at(row);\n"
            ));
            store_row(&mut b, "    ", &|q| format!("a{q}"));
            b.push_str("}\n");
        }
        if partials.is_none() && calls {
            // The block this invocation stored, for an epilogue on CPU adapters.
            let block = format!(
                "    for (var i = 0u; i < {rows}u; i = i + 1u) {{\n        \
                 let row = mblk * {rows}u + i;\n        \
                 if (row >= {m}u) {{ break; }}\n        \
                 let orow = o_at(row);\n        \
                 for (var j = 0u; j < {cols}u; j = j + 1u) {{\n            \
                 let col = nblk * {cols_tile}u + sl * {cols}u + j;\n            \
                 if (col < {n}u) {{ let o = orow + (g * {n}u + col) * {}u; wh_ep_element(o); }}\n        \
                 }}\n    }}\n",
                self.out_feature_stride
            );
            b.push_str(&super::epilogue::replay_function(
                "mblk: u32, nblk: u32, g: u32, sl: u32",
                "mblk, nblk, g, sl",
                rows * cols,
                &block,
            ));
        }
        let (lt, kt, ot) = (&self.lt, &self.kt, &self.ot);
        let comment = format!(
            "kernel {name}: implicit-GEMM convolution {lt} x {kt} -> {ot} ({} groups of {m}x{n}, contracting {windows} window positions x {cg} features; subgroups of {sg} share {rows} rows, {cols} columns per lane, kernel read {inner:?}, {chunks} chunks of {wchunk} positions x {fchunk} features)\nfuses: stablehlo.convolution",
            self.groups
        );
        let iterations = wchunk * (fchunk + 1) + 1;
        self.module(
            name,
            op,
            (&comment, &b),
            [false, vec_cols],
            partials,
            (workgroups, iterations),
            target,
        )
    }

    /// The inner loop's reading of the operands (see [`Inner`]) for blocks of `cols` columns.
    /// `vec4` views need the contiguous dimension's size (and so every other stride and
    /// every base offset) to be a multiple of 4. CPU adapters read scalars: llvmpipe gathers
    /// a `vec4` a component at a time, and the wider live values cost more than they save
    /// (conv 3x3 8x56x56x64, 16x16 blocks: 434 ms scalar, 666 ms `vec4`).
    /// `WGPU_HLO_CONV_INNER=scalar|vec4` forces one (tests, experiments).
    fn inner(&self, cols: u64, target: Target) -> Inner {
        let vec4 = match std::env::var("WGPU_HLO_CONV_INNER").ok().as_deref() {
            Some("scalar") => false,
            Some("vec4") => true,
            _ => !target.cpu_adapter,
        };
        if !vec4 {
            return Inner::Scalar;
        }
        let features = self.in_feature_stride == 1 && self.cg % 4 == 0;
        let columns = self.k_out_stride == 1 && self.n % 4 == 0 && cols % 4 == 0;
        match (features, self.k_in_stride == 1 && self.cg % 4 == 0, columns) {
            (true, true, _) => Inner::FeatureDot,
            (true, false, true) => Inner::FeatureByColumn,
            (false, _, true) => Inner::Column,
            _ => Inner::Scalar,
        }
    }

    /// Rows × columns per invocation. On CPU adapters every storage load is a loop over the
    /// SIMD lanes (Mesa's llvmpipe), so blocks are large (R + C loads feed R × C multiply-adds), chosen to keep
    /// the busiest core's share of loads smallest; on GPUs 4×4. `WGPU_HLO_CONV_BLOCK=RxC`
    /// forces one (experiments).
    fn block(&self, target: Target) -> (u64, u64) {
        let fit = |(r, c): (u64, u64)| (r.clamp(1, 32).min(self.m), c.clamp(1, 32).min(self.n));
        if let Some(forced) = std::env::var("WGPU_HLO_CONV_BLOCK").ok().and_then(|s| {
            let (r, c) = s.split_once('x')?;
            Some((r.parse::<u64>().ok()?, c.parse::<u64>().ok()?))
        }) {
            return fit(forced);
        }
        if !target.cpu_adapter {
            return fit((4, 4));
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
        // Loads per line of the window (k positions along the last spatial dimension) and
        // feature, in quarters: r + c at each position, or where the block slides c and one
        // row, the other rows where the line starts, and a quarter of a load per row and
        // position for the shift. Without that quarter, 3x3 over 8x56x56x32 to 8 features
        // took sliding 8x8 blocks over 16x8 ones: GPU time 11.6-14.6 -> 15.4-17.8 ms; with
        // it, its depthwise one still slides in 8x1 blocks (12.4-15.0 -> 9.0-11.9 ms; 5x5
        // 26-32 -> 17-18).
        let k = self.spatial.last().map_or(1, |s| s.k_size);
        let cost = |(r, c): (u64, u64)| {
            let threads = self.groups * self.m.div_ceil(r) * self.n.div_ceil(c);
            let groups = threads.div_ceil(WORKGROUP);
            let loads = if self.slide_shape(r) {
                4 * ((c + 1) * k + r - 1) + r * k
            } else {
                4 * (r + c) * k
            };
            groups.div_ceil(cores) * threads.min(WORKGROUP).div_ceil(8) * loads
        };
        // Blocks of 32 halve the loads again (conv 3x3 8x56x56x64: 16x16 433 ms, 32x16
        // 351 ms, 32x32 266 ms; 32x14x14x32 -> 64: 110, 89, 67 ms) but take ~0.6 s more to
        // compile: only for convolutions of 2^26 multiply-adds or more.
        let large = self.groups * self.m * self.n * self.cg * self.windows >= 1 << 26;
        let wide = [(32, 32), (32, 16), (16, 32)];
        let blocks = [(16, 16), (16, 8), (8, 16), (8, 8), (8, 4), (4, 4)];
        // A block of one whole line of up to 32 outputs, where that can slide (lines of 7,
        // 14 or 28 have no other block that keeps to one line).
        let line = self.spatial.last().map_or(0, |s| s.out_size);
        let lines = [(line, 16), (line, 8), (line, 4)]
            .into_iter()
            .filter(|_| (5..=32).contains(&line) && self.slide_shape(line));
        wide.into_iter()
            .filter(|_| large)
            .chain(blocks)
            .chain(lines)
            .map(fit)
            .min_by_key(|&b| cost(b))
            .unwrap_or((4, 4))
    }

    /// Window positions and input features per chunk of the contraction: every invocation
    /// within `bound` loop back-edges, and enough invocations to keep the adapter busy.
    /// `shared`: the subgroup size of the shared-rows kernel, whose workgroups are one
    /// subgroup each, `cols` columns a lane.
    fn chunks(
        &self,
        (rows, cols): (u64, u64),
        inner: Inner,
        shared: Option<u64>,
        bound: u64,
        target: Target,
    ) -> Option<(u64, u64)> {
        // One window position costs a back-edge per step of features plus its own, and the
        // block one more. Feature chunks are whole steps.
        let budget = bound.checked_sub(2)?;
        let step = inner.step();
        let steps = self.cg / step;
        let fchunk = step
            * if steps < budget / 2 {
                steps
            } else {
                let half = budget / 2;
                steps.div_ceil(steps.div_ceil(half))
            };
        let per_window = fchunk / step + 1;
        let wmax = (budget / per_window).clamp(1, self.windows);
        let mut wchunks = self.windows.div_ceil(wmax);
        // Parallelism: split the windows further while invocations are few and each chunk
        // still sums a good number of products.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
        // Invocations, and how many the adapter wants: four workgroups a core on CPU adapters
        // (llvmpipe runs a workgroup on one thread). The shared-rows kernel's workgroups are
        // one subgroup: counted by its lanes it looked 8x short of work (the input gradient
        // of a CNN's 3x3 convolution, 32x14x14x64 -> 32 features: 49 workgroups for 2 cores,
        // cut in two chunks whose partials and fold cost 1.3 ms of its 12).
        let (threads, want) = match shared {
            Some(sg) if target.cpu_adapter => (
                self.groups * self.m.div_ceil(rows) * self.n.div_ceil(sg * cols),
                cores * 4,
            ),
            _ => (
                self.groups * self.m.div_ceil(rows) * self.n.div_ceil(cols),
                if target.cpu_adapter {
                    cores * WORKGROUP * 4
                } else {
                    1 << 15
                },
            ),
        };
        let fchunks = self.cg.div_ceil(fchunk);
        while threads * wchunks * fchunks < want
            && self.windows.div_ceil(wchunks * 2) * fchunk >= 256
        {
            wchunks *= 2;
        }
        let wchunk = self.windows.div_ceil(wchunks);
        Some((wchunk, fchunk))
    }

    /// The kernel: results to the output, or (`partials`) partial sums of each chunk of the
    /// contraction, element `output * chunks + chunk`.
    fn kernel(
        &self,
        name: &str,
        op: &Operation,
        tiling: &Tiling,
        partials: Option<Binding>,
        target: Target,
    ) -> Result<Kernel> {
        if let Some(tile) = tiling.tiled {
            return self.tiled_kernel(name, op, tiling, tile, partials, target);
        }
        if tiling.shared > 0 {
            return self.shared_kernel(name, op, tiling, partials, target);
        }
        let &Tiling {
            tiled: _,
            shared: _,
            rows,
            cols,
            inner,
            wchunk,
            fchunk,
            slide,
        } = tiling;
        let (m, n, cg, windows) = (self.m, self.n, self.cg, self.windows);
        let (mb, nb) = (m.div_ceil(rows), n.div_ceil(cols));
        let (wchunks, fchunks) = (windows.div_ceil(wchunk), cg.div_ceil(fchunk));
        let chunks = wchunks * fchunks;
        let threads = self.groups * mb * nb * chunks;
        let workgroups = kernel::grid(threads.div_ceil(WORKGROUP), target.max_workgroups)?;
        let pixels = m / self.out_batch.max(1);
        let mut b = String::new();
        b.push_str(&kernel::entry_header(WORKGROUP as u32));
        b.push_str(&kernel::thread_index(WORKGROUP as u32));
        b.push_str(&format!(
            "    if (tid >= {threads}u) {{ return; }}\n    let chunk = tid % {chunks}u;\n    let nblk = (tid / {chunks}u) % {nb}u;\n    let mblk = (tid / {}u) % {mb}u;\n    let g = tid / {}u;\n    let w0 = (chunk / {fchunks}u) * {wchunk}u;\n    let w1 = min(w0 + {wchunk}u, {windows}u);\n    let f0 = (chunk % {fchunks}u) * {fchunk}u;\n    let f1 = min(f0 + {fchunk}u, {cg}u);\n",
            chunks * nb,
            chunks * nb * mb,
        ));
        // Input batch and feature base of the group.
        let (batch_base, feature_base) = if self.batch_groups {
            (format!("g * {}u", self.out_batch), "0u".to_string())
        } else {
            ("0u".to_string(), format!("g * {cg}u"))
        };
        b.push_str(&format!(
            "    let xg = ({batch_base}) * {}u + ({feature_base}) * {}u;\n",
            self.in_batch_stride, self.in_feature_stride
        ));
        // Per row: output offset, input batch offset, window origin per spatial dimension.
        for i in 0..rows {
            b.push_str(&format!(
                "    let m{i} = min(mblk * {rows}u + {i}u, {}u);\n    let ob{i} = m{i} / {pixels}u;\n    var r{i} = m{i} % {pixels}u;\n    var orow{i} = ob{i} * {}u;\n    let xb{i} = xg + ob{i} * {}u;\n",
                m - 1,
                self.out_batch_stride,
                self.in_batch_stride,
            ));
            for (s, sd) in self.spatial.iter().enumerate().rev() {
                b.push_str(&format!(
                    "    let os{i}_{s} = r{i} % {}u;\n    r{i} = r{i} / {}u;\n    orow{i} = orow{i} + os{i}_{s} * {}u;\n    let q{i}_{s} = i32(os{i}_{s}) * {}i - ({}i);\n",
                    sd.out_size, sd.out_size, sd.out_stride, sd.stride, sd.low
                ));
            }
        }
        // Per column: kernel and output offsets of the output feature.
        for j in 0..cols {
            b.push_str(&format!(
                "    let of{j} = g * {n}u + min(nblk * {cols}u + {j}u, {}u);\n    let kc{j} = of{j} * {}u;\n",
                n - 1,
                self.k_out_stride,
            ));
        }
        for i in 0..rows {
            if inner.by_column() {
                for q in 0..cols / 4 {
                    b.push_str(&format!("    var acc{i}_{q} = vec4<f32>(0.0f);\n"));
                }
            } else {
                for j in 0..cols {
                    b.push_str(&format!("    var acc{i}_{j} = 0.0f;\n"));
                }
            }
        }
        // The window position per spatial dimension and the kernel offset, at `w`.
        let mut window = String::from("var rw = w;\nvar kw = 0u;\n");
        for (s, sd) in self.spatial.iter().enumerate().rev() {
            let kidx = if sd.reversed {
                format!("({}u - ws{s})", sd.k_size - 1)
            } else {
                format!("ws{s}")
            };
            window.push_str(&format!(
                "let ws{s} = rw % {k}u;\nrw = rw / {k}u;\nkw = kw + {kidx} * {}u;\nlet wd{s} = i32(ws{s}) * {}i;\n",
                sd.k_stride,
                sd.rhs_dilation,
                k = sd.k_size,
            ));
        }
        // Where row `i`'s input pixel is, and whether it is one (not padding, not a hole).
        let position = |i: u64| {
            let mut lines = String::new();
            let mut conds = Vec::new();
            let mut off = format!("xb{i}");
            for (s, sd) in self.spatial.iter().enumerate() {
                lines.push_str(&format!("let p{i}_{s} = q{i}_{s} + wd{s};\n"));
                let ld = sd.lhs_dilation;
                conds.push(format!("p{i}_{s} >= 0i"));
                if ld > 1 {
                    conds.push(format!("p{i}_{s} % {ld}i == 0i"));
                    conds.push(format!("p{i}_{s} / {ld}i < {}i", sd.in_size));
                    off.push_str(&format!(" + u32(p{i}_{s} / {ld}i) * {}u", sd.in_stride));
                } else {
                    conds.push(format!("p{i}_{s} < {}i", sd.in_size));
                    off.push_str(&format!(" + u32(p{i}_{s}) * {}u", sd.in_stride));
                }
            }
            if conds.is_empty() {
                conds.push("true".to_string());
            }
            lines.push_str(&format!(
                "let v{i} = {};\nlet x{i} = select(0u, {off}, v{i});\n",
                conds.join(" && ")
            ));
            lines
        };
        let step = inner.step();
        let (xs, ks) = (self.in_feature_stride, self.k_in_stride);
        let quads = cols / 4;
        // Row `i`'s input at feature `f` (zero off the input).
        let a_type = if inner.step() == 4 {
            "vec4<f32>"
        } else {
            "f32"
        };
        let load = |i: u64| match inner {
            Inner::Scalar | Inner::Column => format!("select(0.0f, in0[x{i} + f * {xs}u], v{i})"),
            Inner::FeatureDot | Inner::FeatureByColumn => {
                format!("select(vec4<f32>(0.0f), in0[(x{i} + f) >> 2u], v{i})")
            }
        };
        // The kernel's values at feature `f` and the multiply-adds into the block.
        let mut fma = String::new();
        match inner {
            Inner::Scalar => {
                for j in 0..cols {
                    fma.push_str(&format!("let b{j} = in1[kc{j} + kw + f * {ks}u];\n"));
                }
                for i in 0..rows {
                    for j in 0..cols {
                        fma.push_str(&format!("acc{i}_{j} = acc{i}_{j} + a{i} * b{j};\n"));
                    }
                }
            }
            Inner::FeatureDot => {
                for j in 0..cols {
                    fma.push_str(&format!("let b{j} = in1[(kc{j} + kw + f) >> 2u];\n"));
                }
                for i in 0..rows {
                    for j in 0..cols {
                        fma.push_str(&format!("acc{i}_{j} = acc{i}_{j} + dot(a{i}, b{j});\n"));
                    }
                }
            }
            Inner::FeatureByColumn => {
                for q in 0..quads {
                    for t in 0..4 {
                        fma.push_str(&format!(
                            "let b{t}_{q} = in1[(kc{} + kw + (f + {t}u) * {ks}u) >> 2u];\n",
                            4 * q
                        ));
                    }
                }
                for i in 0..rows {
                    for q in 0..quads {
                        fma.push_str(&format!(
                            "acc{i}_{q} = acc{i}_{q} + a{i}.x * b0_{q} + a{i}.y * b1_{q} + a{i}.z * b2_{q} + a{i}.w * b3_{q};\n"
                        ));
                    }
                }
            }
            Inner::Column => {
                for q in 0..quads {
                    fma.push_str(&format!(
                        "let b{q} = in1[(kc{} + kw + f * {ks}u) >> 2u];\n",
                        4 * q
                    ));
                }
                for i in 0..rows {
                    for q in 0..quads {
                        fma.push_str(&format!("acc{i}_{q} = acc{i}_{q} + a{i} * b{q};\n"));
                    }
                }
            }
        }
        let indent = |text: &str, depth: usize| {
            let pad = " ".repeat(4 * depth);
            text.lines()
                .map(|l| format!("{pad}{l}\n"))
                .collect::<String>()
        };
        if slide {
            // Features outside, window positions inside in order; see [`Gemm::slides`].
            let last = self.spatial.len() - 1;
            let out = self.spatial[last].out_size;
            b.push_str(&format!(
                "    let straight = mblk * {rows}u + {r1}u < {m}u && os0_{last} + {r1}u < {out}u;\n",
                r1 = rows - 1
            ));
            for i in 0..rows {
                b.push_str(&format!("    var a{i}: {a_type};\n"));
            }
            // llvmpipe runs both sides of an `if` under a lane mask, so the full loads sit in
            // a loop over the lines of the window (a block that is not straight takes lines
            // of one position), and the body shifts and loads the last row only: before a
            // line, rows 0 .. R-2's inputs at its first position go to a1 .. a(R-1).
            let k = self.spatial[last].k_size;
            b.push_str(&format!(
                "    for (var f = f0; f < f1; f = f + {step}u) {{\n        var w = w0;\n        loop {{\n            if (w >= w1) {{ break; }}\n"
            ));
            b.push_str(&indent(&window, 3));
            for i in 0..rows - 1 {
                b.push_str(&indent(&position(i), 3));
                b.push_str(&format!("            a{} = {};\n", i + 1, load(i)));
            }
            b.push_str(&format!(
                "            let end = select(w + 1u, min(w1, w - ws{last} + {k}u), straight);\n            for (; w < end; w = w + 1u) {{\n"
            ));
            b.push_str(&indent(&window, 4));
            for i in 1..rows {
                b.push_str(&format!("                a{} = a{i};\n", i - 1));
            }
            let r1 = rows - 1;
            b.push_str(&indent(&position(r1), 4));
            b.push_str(&format!("                a{r1} = {};\n", load(r1)));
            b.push_str(&indent(&fma, 4));
            b.push_str("            }\n        }\n    }\n");
        } else {
            b.push_str("    for (var w = w0; w < w1; w = w + 1u) {\n");
            b.push_str(&indent(&window, 2));
            let mut any = Vec::new();
            for i in 0..rows {
                b.push_str(&indent(&position(i), 2));
                any.push(format!("v{i}"));
            }
            b.push_str(&format!(
                "        if ({}) {{\n            for (var f = f0; f < f1; f = f + {step}u) {{\n",
                any.join(" || "),
            ));
            for i in 0..rows {
                b.push_str(&format!("                let a{i} = {};\n", load(i)));
            }
            b.push_str(&indent(&fma, 4));
            b.push_str("            }\n        }\n    }\n");
        }
        for i in 0..rows {
            for j in 0..cols {
                let o = format!("orow{i} + of{j} * {}u", self.out_feature_stride);
                let at = if partials.is_some() {
                    format!("({o}) * {chunks}u + chunk")
                } else {
                    o
                };
                b.push_str(&format!(
                    "    if (mblk * {rows}u + {i}u < {m}u && nblk * {cols}u + {j}u < {n}u) {{ out0[{at}] = {}; }}\n",
                    if inner.by_column() {
                        format!("acc{i}_{}.{}", j / 4, ["x", "y", "z", "w"][j as usize % 4])
                    } else {
                        format!("acc{i}_{j}")
                    }
                ));
            }
        }
        b.push_str("}\n");
        let (lt, kt, ot) = (&self.lt, &self.kt, &self.ot);
        let comment = format!(
            "kernel {name}: implicit-GEMM convolution {lt} x {kt} -> {ot} ({} groups of {m}x{n}, contracting {windows} window positions x {cg} features; {rows}x{cols} per invocation, {inner:?} inner loop, {chunks} chunks of {wchunk} positions x {fchunk} features)\nfuses: stablehlo.convolution",
            self.groups
        );
        // The operands' bindings are `vec4` views where the inner loop reads them so.
        let views = [
            matches!(inner, Inner::FeatureDot | Inner::FeatureByColumn),
            inner != Inner::Scalar,
        ];
        let iterations = if slide {
            fchunk / step * (2 * wchunk + 1) + 1
        } else {
            wchunk * (fchunk / step + 1) + 1
        };
        self.module(
            name,
            op,
            (&comment, &b),
            views,
            partials,
            (workgroups, iterations),
            target,
        )
    }

    /// The kernel of WGSL `body` (reading `in0`, `in1` as `vec4` where `views` say so and
    /// writing `out0`: the result, or `partials`), dispatched over `workgroups`, looping at
    /// most `iterations` times per invocation.
    #[allow(clippy::too_many_arguments)]
    fn module(
        &self,
        name: &str,
        op: &Operation,
        (comment, body): (&str, &str),
        views: [bool; 2],
        partials: Option<Binding>,
        (workgroups, iterations): ([u32; 3], u64),
        target: Target,
    ) -> Result<Kernel> {
        let inputs = vec![
            Binding {
                value: op.operands[0],
                ty: self.lt.clone(),
            },
            Binding {
                value: op.operands[1],
                ty: self.kt.clone(),
            },
        ];
        let outputs = vec![partials.unwrap_or(Binding {
            value: op.results[0],
            ty: self.ot.clone(),
        })];
        let mut wgsl = String::new();
        for line in comment.lines() {
            wgsl.push_str(&format!("// {line}\n"));
        }
        wgsl.push_str(&format!("var<private> {}: u32;\n", kernel::RUNTIME_ZERO));
        for (i, (bd, vec)) in inputs.iter().zip(views).enumerate() {
            let elem = if vec { "vec4<f32>" } else { "f32" };
            wgsl.push_str(&format!(
                "@group(0) @binding({i}) var<storage, read> in{i}: array<{elem}>; // {} {}\n",
                bd.value, bd.ty
            ));
        }
        wgsl.push_str(&format!(
            "@group(0) @binding(2) var<storage, read_write> out0: array<f32>; // {} {}\n\n",
            outputs[0].value, outputs[0].ty
        ));
        wgsl.push_str(body);
        kernel::validate(name, &wgsl, target.caps)?;
        Ok(Kernel {
            name: name.to_string(),
            wgsl,
            inputs,
            outputs,
            workgroups,
            iterations,
            texture_inputs: Vec::new(),
            state_textures: Vec::new(),
            scratch_textures: Vec::new(),
            parted: Vec::new(),
        })
    }

    /// WGSL functions of the tiled kernel: `a_at(g, m, w, f)`, the input value row `m` of
    /// group `g` multiplies at window position `w`, input feature `f` (0 on padding and
    /// dilation holes); `b_at(g, n, w, f)`, the kernel value; `o_at(m)`, the output offset of
    /// row `m` at feature 0.
    fn element_functions(&self) -> String {
        let pixels = self.m / self.out_batch.max(1);
        let (batch_base, feature_base) = if self.batch_groups {
            (format!("g * {}u", self.out_batch), "0u".to_string())
        } else {
            ("0u".to_string(), format!("g * {}u", self.cg))
        };
        let mut a = format!(
            "fn a_at(g: u32, m: u32, w: u32, f: u32) -> f32 {{\n    var r = m % {pixels}u;\n    var rw = w;\n    var off = (({batch_base}) + m / {pixels}u) * {}u + (({feature_base}) + f) * {}u;\n    var ok = true;\n",
            self.in_batch_stride, self.in_feature_stride
        );
        let mut b = format!(
            "fn b_at(g: u32, n: u32, w: u32, f: u32) -> f32 {{\n    var rw = w;\n    var off = (g * {}u + n) * {}u + f * {}u;\n",
            self.n, self.k_out_stride, self.k_in_stride
        );
        let mut o = format!(
            "fn o_at(m: u32) -> u32 {{\n    var r = m % {pixels}u;\n    var off = (m / {pixels}u) * {}u;\n",
            self.out_batch_stride
        );
        for (s, sd) in self.spatial.iter().enumerate().rev() {
            let ld = sd.lhs_dilation;
            a.push_str(&format!(
                "    let os{s} = r % {os}u;\n    r = r / {os}u;\n    let ws{s} = rw % {k}u;\n    rw = rw / {k}u;\n    let p{s} = i32(os{s}) * {}i + i32(ws{s}) * {}i - ({}i);\n    ok = ok && p{s} >= 0i && p{s} % {ld}i == 0i && p{s} / {ld}i < {}i;\n    off = off + u32(p{s} / {ld}i) * {}u;\n",
                sd.stride,
                sd.rhs_dilation,
                sd.low,
                sd.in_size,
                sd.in_stride,
                os = sd.out_size,
                k = sd.k_size,
            ));
            let kidx = if sd.reversed {
                format!("({}u - ws{s})", sd.k_size - 1)
            } else {
                format!("ws{s}")
            };
            b.push_str(&format!(
                "    let ws{s} = rw % {k}u;\n    rw = rw / {k}u;\n    off = off + {kidx} * {}u;\n",
                sd.k_stride,
                k = sd.k_size,
            ));
            o.push_str(&format!(
                "    off = off + (r % {os}u) * {}u;\n    r = r / {os}u;\n",
                sd.out_stride,
                os = sd.out_size,
            ));
        }
        a.push_str("    if (!ok) {\n        return 0.0f;\n    }\n    return in0[off];\n}\n\n");
        b.push_str("    return in1[off];\n}\n\n");
        o.push_str("    return off;\n}\n\n");
        a + &b + &o
    }

    /// The workgroup-tiled kernel (GPUs): the dot's tiled GEMM ([`gemm_main`]) over one group
    /// and one chunk of the contraction (window position-major, feature-minor) per workgroup.
    fn tiled_kernel(
        &self,
        name: &str,
        op: &Operation,
        tiling: &Tiling,
        tile: GemmTile,
        partials: Option<Binding>,
        target: Target,
    ) -> Result<Kernel> {
        let (m, n, cg, windows) = (self.m, self.n, self.cg, self.windows);
        let (wchunk, fchunk) = (tiling.wchunk, tiling.fchunk);
        let (wchunks, fchunks) = (windows.div_ceil(wchunk), cg.div_ceil(fchunk));
        let chunks = wchunks * fchunks;
        let workgroups = [
            n.div_ceil(tile.bn) as u32,
            m.div_ceil(tile.bm) as u32,
            (self.groups * chunks) as u32,
        ];
        // With every feature in one chunk the feature count is a constant: the step's
        // division into (window position, feature) is then by a constant.
        let features = if fchunks == 1 {
            format!("    let f0 = 0u;\n    let flen = {cg}u;\n")
        } else {
            format!("    let f0 = (chunk % {fchunks}u) * {fchunk}u;\n    let flen = min(f0 + {fchunk}u, {cg}u) - f0;\n")
        };
        let prelude = format!(
            "    let g = wid.z / {chunks}u;\n    let chunk = wid.z % {chunks}u;\n    let w0 = (chunk / {fchunks}u) * {wchunk}u;\n    let w1 = min(w0 + {wchunk}u, {windows}u);\n{features}    let kb = 0u;\n    let ke = (w1 - w0) * flen;\n"
        );
        let lhs = |row: &str, k: &str| format!("a_at(g, {row}, w0 + {k} / flen, f0 + {k} % flen)");
        let rhs = |col: &str, k: &str| format!("b_at(g, {col}, w0 + {k} / flen, f0 + {k} % flen)");
        let o = format!("orow + (g * {n}u + n) * {}u", self.out_feature_stride);
        let at = if partials.is_some() {
            format!("({o}) * {chunks}u + chunk")
        } else {
            o
        };
        let mut b = self.element_functions();
        b.push_str(&gemm_main(&GemmSpec {
            tile,
            m_bound: m,
            n_bound: n,
            prelude,
            lhs: &lhs,
            rhs: &rhs,
            // Tile loads walk the features when they are the operand's contiguous dimension.
            lhs_k_inner: self.in_feature_stride == 1,
            rhs_k_inner: self.k_in_stride == 1,
            row: "            let orow = o_at(m);\n".to_string(),
            at,
            ty: "f32",
        }));
        let (lt, kt, ot) = (&self.lt, &self.kt, &self.ot);
        let comment = format!(
            "kernel {name}: implicit-GEMM convolution {lt} x {kt} -> {ot} ({} groups of {m}x{n}, contracting {windows} window positions x {cg} features; {}x{} workgroup tiles staged {} steps at a time, {}x{} per invocation, {chunks} chunks of {wchunk} positions x {fchunk} features)\nfuses: stablehlo.convolution",
            self.groups,
            tile.bm,
            tile.bn,
            tile.bk,
            tile.bm / 16,
            tile.bn / 16
        );
        // Steps of `bk` along the chunk's K, each one loop of `bk` products.
        let iterations = (wchunk * fchunk).div_ceil(tile.bk) * (1 + tile.bk) + 1;
        self.module(
            name,
            op,
            (&comment, &b),
            [false, false],
            partials,
            (workgroups, iterations),
            target,
        )
    }
}
