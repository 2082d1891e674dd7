//! The `dot_general` for CPU adapters with subgroups of one known size (llvmpipe: 8 lanes of
//! 256-bit AVX): **shared rows**. A workgroup is one subgroup of `S` lanes. It computes a tile
//! of `MT` rows and `S x 4C` columns of one batch: each lane owns `4C` columns (`C` vec4
//! accumulators per row) and all `MT` rows. Per step of k a lane loads `MT / S` values of the
//! left operand (lane `j` loads rows `j`, `S + j`, ...) and the subgroup shares them with
//! `subgroupBroadcast`, which llvmpipe compiles to a vector lane move; the right operand's
//! values are the lane's own columns. So a step of k costs `MT / S + C` loads per lane for
//! `MT x 4C` multiply-adds, where the plain register-blocked kernel ([`super::dot_kernel`]'s
//! vector kernel) pays `R + C` loads for `R x 4C`.
//!
//! Why loads: Mesa 22's llvmpipe runs each storage load as a loop over the SIMD lanes, one
//! scalar load per lane and vector component, with a bounds check each; arithmetic runs 8
//! lanes wide. Measured on lavapipe (2 cores), 1024³ f32: the vector kernel's 16x16 block
//! 478 ms (4.5 GFLOP/s); shared rows 128 x 8 columns per lane 124 ms (17 GFLOP/s), 128 x 16
//! 99 ms but 2.5x the compile time (later, with texture reads, 32 rows x 8 columns per lane
//! run it in ~50 ms and compile 3x faster than 64 rows: see `tile`). Only chosen on CPU
//! adapters: a GPU's subgroups are 32-64 lanes and its loads are not lane loops (the tiled
//! kernel serves there).
//! `WGPU_HLO_DOT=subgroup` forces it where it applies, `WGPU_HLO_DOT=vec` turns it off.

use super::dot_kernel::{
    blocked_k_loop, operand_offsets, register_kernel, rhs_columns, store_block, Layout, Read, COMP,
};
use super::kernel::Kernel;
use super::loop_kernel::Target;
use super::partials;
use super::texture_reads::rewrite_indexing;
use crate::error::{Error, Result};
use crate::ir::{ElementType, Operation, TensorType};

/// Multiply-adds below which the shared-rows kernel takes its small form (scalar reads along
/// k, one vec4 column per lane: see [`SMALL_WORK`]), whose code is a fraction of the full
/// tiles': 2^20, a 64 x 128 x 128 product. The full tiles' compile time would not pay off
/// below it. Between 2^19 and 2^22 the
/// shared-rows kernel ran in 0.5-0.8x the vector kernel's GPU time on lavapipe (`wgpu-hlo
/// bench --per-kernel`: 4 x 64x64x64 0.41 -> 0.20 ms, 8 x 64x64x64 0.37-0.58 -> 0.20-0.41, the
/// transformer step's attention products 32 x 63x63x32 1.27 -> 0.78 and 32 x 63x32x63 1.47 ->
/// 1.15) for 20-60 ms more compile time, once per executable; it was 2^22 before.
/// `WGPU_HLO_DOT_MIN_WORK=N` sets it (for comparisons).
pub(super) const MIN_WORK: u64 = 1 << 20;

/// Multiply-adds below which the shared-rows kernel is not chosen at all, and the
/// register-blocked kernel serves (`WGPU_HLO_DOT_SMALL_WORK` sets it): 2^17, a 32 x 64 x 64
/// product. From it to [`MIN_WORK`] the small form serves products of at least a tile's
/// columns: a GRU step's 32x128x128 dot took 0.12 ms in the register-blocked kernel, 0.10 in
/// the small form, for ~0.1 s more compile time (lavapipe; 0.5 s more with the full tiles).
pub(super) const SMALL_WORK: u64 = 1 << 17;

/// Multiply-adds below which the shared-rows kernel's tiles keep to one vec4 of columns per
/// lane (32 rows x 4 columns, not 32 x 8), from [`NARROW_MIN_WORK`]: 2^25, a 512 x 512 x 128
/// product. The wider tile
/// holds twice the accumulators, which the driver spills, and its compile time is what a
/// cold first call waits for: llvmpipe compiles each pipeline at its first dispatch, one
/// after another on its queue's thread (0.45-1.0 s for a 32 x 8 tile, about half for 32 x
/// 4). Below 2^25 the narrower tile ran as fast (lavapipe, 2-core Intel host, minimum
/// kernel times over 10 calls, two alternating pairs: the `bench_jax` transformer step's 47
/// products 39.5-40.9 -> 40.9-41.4 ms, the MLP step's 8.0-8.1 -> 8.1), and the first call
/// of the transformer step with the Mesa shader cache off took 17.4 -> 7.5 s, the MLP step
/// 3.6 -> 1.9 s. Above it the wider tile pays (256 x 4096 x 256: 15 against 22 ms, see
/// [`tile`]). `WGPU_HLO_DOT_MID_WORK=N` sets it (0: the wide tile wherever it fits).
pub(super) const MID_WORK: u64 = 1 << 25;

/// Multiply-adds from which products below [`MID_WORK`] take the narrower tile: 2^22. Below
/// it the wide tile's fewer, longer workgroups ran faster, and such products are a
/// recurrent step's, run once per step (the hand-written GRU's steps of 32 x 128 x 384,
/// 50 of them per call: its products' kernel time 34.6-34.7 -> 36.0-36.1 ms a call with the
/// narrow tile), where the compile is paid back.
pub(super) const NARROW_MIN_WORK: u64 = 1 << 22;

/// [`MID_WORK`], or `WGPU_HLO_DOT_MID_WORK` where that is a number.
fn mid_work() -> u64 {
    std::env::var("WGPU_HLO_DOT_MID_WORK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(MID_WORK)
}

/// [`SMALL_WORK`], or `WGPU_HLO_DOT_SMALL_WORK` where that is a number.
fn small_work() -> u64 {
    std::env::var("WGPU_HLO_DOT_SMALL_WORK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(SMALL_WORK)
}

/// [`MIN_WORK`], or `WGPU_HLO_DOT_MIN_WORK` where that is a number.
fn min_work() -> u64 {
    std::env::var("WGPU_HLO_DOT_MIN_WORK")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(MIN_WORK)
}

/// Multiply-adds below which a convolution keeps the register-blocked kernel (the shared
/// convolution's tiles are larger, and cost the driver more to compile).
pub(super) const MIN_CONV_WORK: u64 = 1 << 22;

/// Whether a product whose operands are read along their free dimensions (or as scalars)
/// takes four steps of k per loop trip, each accumulator summing them in one expression (see
/// the kernel's loop): where every contracting range is whole steps (`k`, and a split's
/// chunks, multiples of 4). `WGPU_HLO_DOT_CHAINS=0` keeps one step a trip.
///
/// The shared convolution ([`super::conv_kernel`]) asks the same of its input features
/// (`k`) and their chunks (`chunk`).
pub(super) fn chains(k: u64, chunk: u64) -> bool {
    k % 4 == 0 && chunk % 4 == 0 && !crate::fusion::switched_off("WGPU_HLO_DOT_CHAINS")
}

/// `acc` plus `terms` in order, as one expression: `((acc + t0) + t1) + t2` (the sums of a
/// statement `acc = acc + t` per term, in their order: see [`chains`]).
pub(super) fn chained_sum(acc: &str, terms: &[String]) -> String {
    let mut e = acc.to_string();
    for (j, t) in terms.iter().enumerate() {
        e = format!("{e} + {t}");
        if j + 1 < terms.len() {
            e = format!("({e})");
        }
    }
    e
}

/// Rows per subgroup tile and vec4 columns per lane for a `batch x m x n` result: the
/// largest of (32, 2), (32, 1), (16, 1), (8, 1) (rows a multiple of `S`, and of `4S` when the
/// left operand is read along m) that still gives every core two workgroups, else the
/// smallest; without (32, 2) when `one_vec4` (products below [`MID_WORK`]).
///
/// Taller tiles do not pay on llvmpipe (Mesa 22.3, 2 cores, texture reads; cold = the first
/// call with empty pipeline and shader caches, mostly the driver's compile):
///
/// | product | 128 x 2 | 64 x 2 | 32 x 2 | 32 x 1 |
/// | --- | --- | --- | --- | --- |
/// | 2048³ steady | 439 ms | 387 ms | 376 ms | 511 ms |
/// | 1024³ steady | 55 ms | 50 ms | 51 ms | 52-60 ms |
/// | 4096 x 256 x 1024 | 57 ms | 54 ms | 54 ms | 60 ms |
/// | 256 x 4096 x 256 | 17 ms | 15 ms | 15 ms | 22 ms |
/// | cold, any of these | 7-8 s | 2.0-2.5 s | 0.7-1.1 s | 0.35-0.8 s |
///
/// (64 rows hold 128 vec4 accumulators per lane, which the driver's register allocator
/// spills.)
///
/// `WGPU_HLO_DOT_TILE=ROWSxVEC4S` forces a tile (rows a multiple of the unit, 1-4 vec4s a
/// lane), for sweeps on other hosts. On the 2-core AMD EPYC host of 2026-12-06 a sweep of
/// 1024³ (8x4 to 64x2, `wgpu-hlo bench --runs 12`) found nothing outside its noise: four
/// alternating pairs of 32x2 against 16x2 gave minima of 107-117 against 75-123 ms.
fn tile(batch: u64, m: u64, n: u64, s: u64, rows_unit: u64, one_vec4: bool) -> (u64, u64) {
    if let Some(forced) = forced_tile(rows_unit) {
        return forced;
    }
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get() as u64);
    let shapes: &[(u64, u64)] = if one_vec4 {
        &[(32, 1), (16, 1), (8, 1)]
    } else {
        &[(32, 2), (32, 1), (16, 1), (8, 1)]
    };
    let fits = |&&(mt, cv): &&(u64, u64)| mt % rows_unit == 0 && mt >= rows_unit && cv >= 1;
    let usable: Vec<&(u64, u64)> = shapes.iter().filter(fits).collect();
    for &&(mt, cv) in &usable {
        // No taller than the rows (rounded up to the unit).
        if mt > m.next_multiple_of(rows_unit) && mt > rows_unit {
            continue;
        }
        let wgs = batch * m.div_ceil(mt) * n.div_ceil(s * 4 * cv);
        if wgs >= 2 * cores {
            return (mt, cv);
        }
    }
    usable
        .last()
        .map_or((rows_unit, 1), |&&(mt, cv)| (mt.max(rows_unit), cv))
}

/// The tile `WGPU_HLO_DOT_TILE` names, where it is one `tile` can take.
fn forced_tile(rows_unit: u64) -> Option<(u64, u64)> {
    let v = std::env::var("WGPU_HLO_DOT_TILE").ok()?;
    let (a, b) = v.trim().split_once('x')?;
    let (mt, cv) = (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?);
    (mt >= rows_unit && mt % rows_unit == 0 && mt <= 64 && (1..=4).contains(&cv))
        .then_some((mt, cv))
}

/// A shared-rows dot split along its contracting dimension: `parts` chunks of `chunk` steps
/// (a multiple of 4), each workgroup summing one chunk of its tile into a partials temporary,
/// element-major (`element * parts + part`), that a fold adds up.
#[derive(Clone, Copy, Debug)]
pub(super) struct KSplit {
    pub parts: u64,
    pub chunk: u64,
}

/// The shared-rows kernel, or `None` when it does not apply: no subgroups or no single
/// subgroup size, or operand layouts it does not read (the left operand must be readable
/// along k or m in vec4s or as scalars, the right along n or k in vec4s or as scalars: all
/// layouts are, so only sizes decide). With `split`, the partials stage of [`KSplit`]: its
/// one output is the partials temporary (`op_kernels::temp(0)`).
#[allow(clippy::too_many_arguments)]
pub(super) fn shared_rows(
    name: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (l, r): (&Layout, &Layout),
    (ra, rb): (Read, Read),
    (batch, m, n, k): (u64, u64, u64, u64),
    split: Option<KSplit>,
    target: Target,
) -> Result<Option<Kernel>> {
    let s = target.caps.subgroup_size as u64;
    if !target.caps.subgroup || !matches!(s, 4 | 8 | 16 | 32) || k == 0 {
        return Ok(None);
    }
    // Its unrolled tiles cost the driver more to compile than the register-blocked kernel's
    // (llvmpipe: ~0.2 s against ~0.05 s): only for products big enough to pay that back,
    // unless forced.
    let forced = std::env::var("WGPU_HLO_DOT").is_ok_and(|v| v == "subgroup");
    let work = batch * m * n * k;
    // Small products only where a tile's columns are all used (the register-blocked kernel
    // served a 512 x 128 x 10 product in 0.15-0.19 ms, this one in 0.21-0.25).
    if !forced && (work < small_work() || (work < min_work() && n < 4 * s)) {
        return Ok(None);
    }
    // Nor where the tile's columns would be half empty or more: a lane takes at least four
    // columns, a tile at least `4 S`. Lavapipe, ms a call, shared rows -> register-blocked
    // (`/tmp` script, two alternating rounds): 4096x1024 @ 1024x8 16-18 -> 5-10, 512 batches
    // of 64x8 @ 8x8 (the survey's attention of 512 heads of 8 steps) 4.3 -> 1.1, 8 of 512x64
    // @ 64x8 1.3-4.1 -> 0.5-0.7, 64 of 128x64 @ 64x16 1.8-2.6 -> 1.0-1.3, 2048x512 @ 512x16
    // 2.0-2.3 -> 2.1-2.5; at 24 columns (4096x256 @ 256x24) shared rows stay ahead, 2.0-3.1
    // against 3.1-3.6. Contractions too long for one kernel keep the shared rows' split
    // (`dot_kernel::split_shared_rows`), which sums each chunk in blocks; the general
    // split-K's partials did not (8x200000 @ 200000x8: 1.8e-6 off, jax cpu 3.6e-7).
    if !forced && split.is_none() && n <= 2 * s {
        return Ok(None);
    }
    // Below `min_work`, operands read along k come as scalars: a step of k instead of four
    // per loop trip, a quarter of the code to compile for the same loads.
    let small = work < min_work() && !forced;
    let scalar = |r: Read| {
        if r == Read::AlongK && small {
            Read::Scalar
        } else {
            r
        }
    };
    let (ra, rb) = (scalar(ra), scalar(rb));
    let rows_unit = if ra == Read::AlongFree { 4 * s } else { s };
    let narrow = (NARROW_MIN_WORK..mid_work()).contains(&work) && !forced;
    let (mt, cv) = tile(batch, m, n, s, rows_unit, small || narrow);
    let cols_lane = 4 * cv;
    let cols_tile = s * cols_lane;
    let kstep =
        if ra == Read::AlongK || rb == Read::AlongK || chains(k, split.map_or(k, |s| s.chunk)) {
            4
        } else {
            1
        };
    let (mtiles, ntiles) = (m.div_ceil(mt), n.div_ceil(cols_tile));
    let tiles = batch * mtiles * ntiles;
    let (parts, chunk) = split.map_or((1, k), |s| (s.parts, s.chunk));
    if split.is_some() && (chunk % 4 != 0 || parts * chunk < k) {
        return Ok(None);
    }
    let groups = tiles * parts;
    let workgroups = super::kernel::grid(groups, target.max_workgroups)?;
    let mut body = operand_offsets(l, r);
    if split.is_some() {
        body.push_str("var<private> wh_part: u32;\n");
    }
    body.push_str(&format!(
        "@compute @workgroup_size({s})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {{\n\
         \x20   let g0 = wid.y * nwg.x + wid.x;\n\
         \x20   if (g0 >= {groups}u) {{ return; }}\n\
         \x20   let g = g0 % {tiles}u;\n\
         \x20   let kb = (g0 / {tiles}u) * {chunk}u;\n\
         \x20   let ke = min(kb + {chunk}u, {k}u);\n\
         \x20   let b = g / {};\n\
         \x20   let m0 = ((g / {ntiles}u) % {mtiles}u) * {mt}u;\n\
         \x20   let n0 = (g % {ntiles}u) * {cols_tile}u + sl * {cols_lane}u;\n",
        format_args!("{}u", mtiles * ntiles)
    ));
    // The rows this lane loads for the subgroup (clamped: rows past m are computed and
    // dropped), and its own columns.
    let lane_loads = if ra == Read::AlongFree {
        mt / (4 * s)
    } else {
        mt / s
    };
    for g in 0..lane_loads {
        let row = if ra == Read::AlongFree {
            format!("m0 + {}u + sl * 4u", 4 * s * g)
        } else {
            format!("m0 + {}u + sl", s * g)
        };
        let last = if ra == Read::AlongFree { m - 4 } else { m - 1 };
        body.push_str(&format!("    let mr{g} = min({row}, {last}u);\n"));
    }
    match rb {
        Read::AlongFree => {
            for c in 0..cv {
                body.push_str(&format!(
                    "    let nq{c} = min(n0 + {}u, {}u);\n",
                    4 * c,
                    n - 4
                ));
            }
        }
        _ => {
            for j in 0..cols_lane {
                body.push_str(&format!("    let nj{j} = min(n0 + {j}u, {}u);\n", n - 1));
            }
        }
    }
    for i in 0..mt {
        for c in 0..cv {
            body.push_str(&format!("    var acc{i}_{c} = vec4<f32>();\n"));
        }
    }
    if split.is_some() {
        body.push_str(&format!("    wh_part = g0 / {tiles}u;\n"));
    }
    // The loop's body, then the loop (in blocks of k where it is long: `blocked_k_loop`).
    let outer = std::mem::take(&mut body);
    if ra == Read::AlongK {
        for g in 0..lane_loads {
            body.push_str(&format!(
                "        let av{g} = in0[lhs_off(b, mr{g}, k) >> 2u];\n"
            ));
        }
    }
    if rb == Read::AlongK {
        for j in 0..cols_lane {
            body.push_str(&format!(
                "        let wk{j} = in1[rhs_off(b, nj{j}, k) >> 2u];\n"
            ));
        }
    }
    // Per step of k of a loop trip, each row's value as the subgroup sees it.
    let mut sources: Vec<Vec<(String, u64)>> = Vec::new();
    for kk in 0..kstep {
        let kx = if kk == 0 {
            "k".to_string()
        } else {
            format!("k + {kk}u")
        };
        // This lane's share of the left operand at this step, and each row's value as the
        // subgroup sees it: (source, lane).
        let row_src: Vec<(String, u64)> = match ra {
            Read::AlongK => (0..mt)
                .map(|i| (format!("av{}.{}", i / s, COMP[kk as usize]), i % s))
                .collect(),
            Read::AlongFree => {
                for g in 0..lane_loads {
                    body.push_str(&format!(
                        "        let am{kk}_{g} = in0[lhs_off(b, mr{g}, {kx}) >> 2u];\n"
                    ));
                }
                (0..mt)
                    .map(|i| {
                        let g = i / (4 * s);
                        let within = i % (4 * s);
                        (
                            format!("am{kk}_{g}.{}", COMP[(within % 4) as usize]),
                            within / 4,
                        )
                    })
                    .collect()
            }
            Read::Scalar => {
                for g in 0..lane_loads {
                    body.push_str(&format!(
                        "        let sa{kk}_{g} = in0[lhs_off(b, mr{g}, {kx})];\n"
                    ));
                }
                (0..mt)
                    .map(|i| (format!("sa{kk}_{}", i / s), i % s))
                    .collect()
            }
        };
        for c in 0..cv {
            let w = rhs_columns(rb, c, kk, &kx, "f32");
            body.push_str(&format!("        let w{kk}_{c} = {w};\n"));
        }
        sources.push(row_src);
    }
    // Each accumulator takes the loop trip's steps of k in one expression,
    // `((acc + x0 * w0) + x1 * w1) + ...`: the same sums in the same order as a statement per
    // step, but the driver, which spills the accumulators (a lane holds 32-64 vec4s, SIMD
    // registers hold 16 of llvmpipe's), loads and stores each once a trip instead of once a
    // step. Lavapipe, 2-core Intel host, the 1024^3 kernel (`wgsl_bench`): 69-70 -> 55 ms
    // with four steps a trip (two: 57 ms; eight: 60 ms; `fma` in the chain: 56-58 ms), and
    // the first dispatch with Mesa's shader cache off 0.67 -> 0.75 s.
    for i in 0..mt {
        for (kk, row_src) in sources.iter().enumerate() {
            let (src, lane) = &row_src[i as usize];
            body.push_str(&format!(
                "        let x{kk}_{i} = subgroupBroadcast({src}, {lane}u);\n"
            ));
        }
        for c in 0..cv {
            let terms: Vec<String> = (0..sources.len())
                .map(|kk| format!("x{kk}_{i} * w{kk}_{c}"))
                .collect();
            let e = chained_sum(&format!("acc{i}_{c}"), &terms);
            body.push_str(&format!("        acc{i}_{c} = {e};\n"));
        }
    }
    let accs: Vec<String> = (0..mt)
        .flat_map(|i| (0..cv).map(move |c| format!("acc{i}_{c}")))
        .collect();
    let k_loop = blocked_k_loop(&accs, "vec4<f32>", ("kb", "ke", kstep), chunk, &body);
    body = outer;
    body.push_str(&k_loop);
    let (stores, store_row) = store_block(mt, cols_lane, m, n, split.is_none(), "f32");
    body.push_str(&stores);
    body.push_str("}\n");
    body.push_str(&store_row);
    let how = match split {
        Some(_) => format!("; {parts} partial sums over contracting chunks of {chunk}"),
        None => String::new(),
    };
    let comment = format!(
        "kernel {name}: shared-rows dot_general {lt} x {rt} -> {ot} (batch {batch}, {m}x{n}, contracting {k}; subgroups of {s} share {mt} rows, {cols_lane} columns per lane, reads {ra:?} x {rb:?}{how})\nfuses: stablehlo.dot_general"
    );
    let mut kernel = register_kernel(
        name,
        &comment,
        op,
        (lt, rt, ot),
        (ra, rb),
        &body,
        (workgroups, chunk.div_ceil(kstep)),
        target,
    )?;
    if split.is_some() {
        // Each result element's partial sums sit together: element * parts + part.
        let decl = "@group(0) @binding(2) var<storage, read_write> out0: array<f32>;";
        let close = format!(") * {parts}u + wh_part]");
        let wgsl = rewrite_indexing(&kernel.wgsl, "out0", decl, "[(", &close, None)
            .ok_or_else(|| Error::internal(format!("{name}: partial stores not rewritten")))?;
        super::kernel::validate(name, &wgsl, target.caps)?;
        kernel.wgsl = wgsl;
        kernel.outputs = vec![partials::binding(
            0,
            ElementType::F32,
            batch * m * n * parts,
        )];
    }
    Ok(Some(kernel))
}
