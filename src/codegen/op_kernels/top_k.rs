//! `chlo.top_k` of long rows by radix selection: the k elements that come first in top_k's
//! order (NaN, then larger values; ties by position) are those whose pair (key, position)
//! is at most the k-th smallest pair, with the `u32` key of [`super::sort_radix`]. Passes of
//! [`SELECT_BITS`] decide that pair's bits from the top, the key's and then the position's:
//! each counts, per tile of a row, the elements that agree with the bits decided so far by
//! their next digit (a histogram in workgroup memory), and one workgroup per row then finds
//! the digit where the running count reaches the number still to take. The k chosen
//! elements are then written out in position order (a count per tile, then each tile's
//! placement after those of the tiles before it), ranked among themselves by their pairs,
//! and gathered. Nothing depends on the order of atomic operations, so the results are the
//! same on every adapter, and the same as a full sort's.
//!
//! A full radix sort of a million floats sorts all 32 bits in 8 passes of three launches and
//! moves every element in each; selection reads the row 4 + log256(n) times and moves k.

use std::collections::HashMap;

use super::sort::gather;
use super::sort_radix::{element_key, radix_key, RadixKey};
use super::{temp, Launch, Plan, PARAMS};
use crate::codegen::expr::{Binding, ExprEmitter};
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::error::Result;
use crate::ir::{ElementType, Function, Op, Operation, TensorType, ValueId};

/// Bits of the (key, position) pair each pass decides.
const SELECT_BITS: u32 = 8;

/// Digits of a pass.
const BINS: u64 = 1 << SELECT_BITS;

/// Most `k` that selection serves: the chosen elements rank among themselves in O(k²) per
/// row, which also bounds `rows * k²` ([`RANK_WORK`]).
const K_MAX: u64 = 4096;

/// Elements each lane of a tile takes on CPU adapters (tiles of 64 lanes). Alternated in one
/// process (`examples/bench_ab.py`, 20 runs), against 16: top_k of 1M (k = 100) 0.69× at 64,
/// 0.66× at 256; of 8 x 50000 (k = 64) 0.80× at 64, 0.76× at 256.
const CPU_PER: u64 = 256;

/// Most candidates (elements at or below the bound) the direct selection ranks in workgroup
/// memory; rows with more take the radix passes. Random rows have about k: 77 for k = 64 of
/// 50000, 100 for k = 100 of 2^20.
const DIRECT_CAP: u64 = 512;

/// Most lanes a row's bound ranks (`bound`) instead of bisecting: lanes^2 / 4 loads per
/// workgroup of 64.
const RANKED_LANES: u64 = 1024;

/// Most comparisons of the ranking of the chosen elements, over all rows.
const RANK_WORK: u64 = 1 << 28;

/// What both selections need of a `top_k` of the largest: its `k`, the radix key of its
/// elements and its operand; `None` for another op or an operand without such a key.
fn largest_k(
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
) -> Option<(u64, RadixKey, ValueId)> {
    let Op::TopK { k, largest: true } = &op.op else {
        return None;
    };
    let k = u64::try_from(*k).ok()?;
    Some((k, radix_key(f, defs, op)?, *op.operands.first()?))
}

/// The selection plan of a `top_k` of `rows` rows of `n` (module doc), or `None` where it
/// does not serve: `k` past [`K_MAX`] or [`RANK_WORK`], a type without a `u32` key, kernels
/// that would loop past the adapter's bound. `WGPU_HLO_TOP_K=sort` sorts whole rows instead.
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (n, rows): (usize, u64),
    target: Target,
) -> Result<Option<Plan>> {
    let Some((k, rk, x)) = largest_k(f, defs, op) else {
        return Ok(None);
    };
    let n = n as u64;
    if std::env::var("WGPU_HLO_TOP_K").is_ok_and(|v| v.trim() == "sort")
        || k == 0
        || k > n
        || k > K_MAX
        || rows.saturating_mul(k * k) > RANK_WORK
        || rows.saturating_mul(n) >= u32::MAX as u64
    {
        return Ok(None);
    }
    // CPU adapters: long tiles. The digit pass sums every tile's histogram in one workgroup
    // (one core), and each pass writes them all; 16 elements a lane made 1024 tiles of a
    // million. `WGPU_HLO_TOP_K_PER=N` sets the elements a lane takes there.
    let (wg, per): (u64, u64) = if target.cpu_adapter {
        let per = std::env::var("WGPU_HLO_TOP_K_PER")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&p: &u64| (1..=4096).contains(&p))
            .unwrap_or(CPU_PER);
        (64, per)
    } else {
        (256, 8)
    };
    let tile = wg * per;
    let tiles = n.div_ceil(tile);
    let groups = rows * tiles;
    let index_bits = 64 - (n - 1).leading_zeros();
    let index_passes = index_bits.div_ceil(SELECT_BITS);

    let u32s = |len: u64| TensorType::new(vec![len as i64], ElementType::U32);
    let bind = |value, ty: TensorType| Binding { value, ty };
    // Temporaries: 0 the chosen positions in order (what `gather` reads), 1 each row's state
    // (key bits, position bits, elements still to take, unused), 2 the tiles' histograms,
    // 3 the tiles' counts of chosen elements, 4 the chosen (key, position) pairs, 5 each
    // lane's smallest key, 6 each row's bound on the k-th key (see `bounded`).
    let (perm, state, hist, counts, chosen) = (temp(0), temp(1), temp(2), temp(3), temp(4));
    let (minima, bounds) = (temp(5), temp(6));
    // Rows with at least 2k lanes first bound the k-th key (CPU adapters, where the first
    // histogram pass's workgroup atomics over every element are most of the time): the k-th
    // smallest of the lanes' smallest keys. At least k elements lie at or below it, so the
    // chosen ones all do, and the passes count only those.
    let lanes = tiles * wg;
    let bounded = target.cpu_adapter
        && lanes >= 2 * k
        // The bisection's loops (32 rounds over the row's lanes) within the loop bound.
        && 32 * (tiles + 2 * wg) < target.max_invocation_iterations
        && !std::env::var("WGPU_HLO_TOP_K_BOUND").is_ok_and(|v| v.trim() == "0");
    // The direct selection (below) where the bound is and k leaves it room; rows it takes
    // keep their result's positions after the states.
    let direct_on = bounded
        && 2 * k <= DIRECT_CAP
        && !std::env::var("WGPU_HLO_TOP_K_DIRECT").is_ok_and(|v| v.trim() == "0");
    let slots_at = rows * 4;
    let state_len = slots_at + if direct_on { rows * k } else { 0 };
    let temps = vec![
        u32s(rows * k),
        u32s(state_len),
        u32s(groups * BINS),
        u32s(groups),
        u32s(rows * k * 2),
        u32s(rows * lanes),
        u32s(rows),
    ];
    let what = format!("top_k of {rows} rows of {n} by radix selection, k = {k}");
    let fuses = op.name();
    let no_fusion = |_: ValueId| false;
    let emitter = || ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
    // The key of the element at row position `i` of row `row`, as `key`.
    let key_line = |em: &mut ExprEmitter| -> Result<()> {
        let key = element_key(em, &rk, x, format!("row * {n}u + i"), "e")?;
        em.line(&format!("let key = {key};"));
        Ok(())
    };
    // The start of a tile kernel: its row, tile and this thread's first position.
    let tile_start = |em: &mut ExprEmitter| {
        em.line("let g = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (g >= {groups}u) {{ return; }}"));
        em.line(&format!("let row = g / {tiles}u;"));
        em.line(&format!("let t = g % {tiles}u;"));
        em.line(&format!("let first = t * {tile}u + lid * {per}u;"));
    };
    // Over the invocation's elements: `span` of them (its `per`, or none in a lane whose
    // smallest key is past the k-th: `live_span`).
    let items_loop = |em: &mut ExprEmitter| {
        em.open_loop("for (var e = 0u; e < span; e = e + 1u)", per);
        em.line("let i = first + e;");
        em.line(&format!("if (i >= {n}u) {{ break; }}"));
    };
    // `span` for the kernels run once `tk` is known: with lanes' smallest keys (input `m`),
    // a lane holding none at or below `tk` walks nothing (k of n: most lanes).
    let live_span = |em: &mut ExprEmitter, m: Option<usize>| match m {
        Some(m) => em.line(&format!(
            "let span = select(0u, {per}u, in{m}[g * {wg}u + lid] <= tk);"
        )),
        None => em.line(&format!("let span = {per}u;")),
    };
    // Whether the element is chosen, once every pass has run.
    let chosen_test = "(key < tk || (key == tk && i <= ti))";
    // This thread's chosen elements, in `part[lid]` for the whole workgroup.
    let count_mine = |em: &mut ExprEmitter| -> Result<()> {
        em.line("var c = 0u;");
        items_loop(em);
        key_line(em)?;
        em.line(&format!("if {chosen_test} {{ c = c + 1u; }}"));
        em.close(None);
        em.line("part[lid] = c;");
        em.line("workgroupBarrier();");
        Ok(())
    };
    // `s`: the sum of the workgroup's `part`.
    let sum_parts = |em: &mut ExprEmitter| {
        em.line("var s = 0u;");
        em.open_loop(&format!("for (var q = 0u; q < {wg}u; q = q + 1u)"), wg);
        em.line("s = s + part[q];");
        em.close(None);
    };
    let finish = |em: ExprEmitter,
                  kname: &str,
                  about: &str,
                  outputs: Vec<Binding>,
                  shared: &str,
                  wg: u64,
                  launches: u64|
     -> Result<Kernel> {
        let iterations = em.iterations();
        let comment = format!(
            "kernel {kname}: {about} of a {what}\nloop iterations per invocation: at most {iterations}\nfuses: {fuses}"
        );
        let source = format!(
            "{shared}\n{}{}}}\n",
            kernel::entry_header(wg as u32),
            em.body
        );
        kernel::in_workgroups(
            kname,
            &comment,
            em.inputs.clone(),
            outputs,
            &em.needs,
            &source,
            launches,
            iterations,
            target,
        )
    };

    let init = kernel::threaded(
        &format!("{name}_select_init"),
        &format!("kernel {name}_select_init: the rows' states before a {what}\nfuses: {fuses}"),
        Vec::new(),
        vec![bind(state, u32s(state_len))],
        &Default::default(),
        "",
        &format!("    out0[tid] = select(0u, {k}u, tid % 4u == 2u);\n"),
        rows * 4,
        0,
        target,
    )?;

    // Histogram of the next digit among the elements that agree with the decided bits.
    let histogram = {
        let mut em = emitter();
        em.inputs.push(bind(state, u32s(state_len)));
        em.inputs.push(bind(PARAMS, u32s(3)));
        if bounded {
            em.inputs.push(bind(bounds, u32s(rows)));
            em.inputs.push(bind(minima, u32s(rows * lanes)));
        }
        tile_start(&mut em);
        // A row whose k-th pair is known already counts nothing, and its digit pass reads
        // no histogram: the workgroup leaves at once (random floats: the last 3-4 of 7
        // passes).
        em.line("if (lid == 0u) { row_done = in0[row * 4u + 3u]; }");
        em.line("if (workgroupUniformLoad(&row_done) != 0u) { return; }");
        // After the first pass, a tile's candidates are those it counted in the previous
        // pass's chosen digit (its histogram of that pass is still here): a tile without any
        // writes an empty histogram and reads nothing (random floats, k = 100 of 1M: from the
        // third pass on, all but a few tiles).
        em.line("let shift = in1[0];");
        em.line("let by_position = in1[1] != 0u;");
        em.line("let head = in1[2] != 0u;");
        em.line("let tk = in0[row * 4u];");
        em.line("let ti = in0[row * 4u + 1u];");
        em.line(if bounded {
            "let bnd = in2[row];"
        } else {
            "let bnd = 0xffffffffu;"
        });
        em.open("if (lid == 0u)");
        em.line("var prev = 1u;");
        em.line(&format!(
            "if (!by_position && !head) {{ prev = out0[g * {BINS}u + ((tk >> (shift + 8u)) & {m}u)]; }}",
            m = BINS - 1
        ));
        em.line(&format!(
            "if (by_position && head) {{ prev = out0[g * {BINS}u + (tk & {m}u)]; }}",
            m = BINS - 1
        ));
        em.line(&format!(
            "if (by_position && !head) {{ prev = out0[g * {BINS}u + ((ti >> (shift + 8u)) & {m}u)]; }}",
            m = BINS - 1
        ));
        em.line("candidates = prev;");
        em.close(None);
        em.open("if (workgroupUniformLoad(&candidates) == 0u)");
        em.open_loop(
            &format!("for (var b = lid; b < {BINS}u; b = b + {wg}u)"),
            BINS / wg,
        );
        em.line(&format!("out0[g * {BINS}u + b] = 0u;"));
        em.close(None);
        em.line("return;");
        em.close(None);
        em.open_loop(
            &format!("for (var b = lid; b < {BINS}u; b = b + {wg}u)"),
            BINS / wg,
        );
        em.line("atomicStore(&h[b], 0u);");
        em.close(None);
        em.line("workgroupBarrier();");
        // A lane whose smallest key is past the bound counts nothing: it walks nothing.
        if bounded {
            em.line(&format!(
                "let span = select(0u, {per}u, in3[g * {wg}u + lid] <= bnd);"
            ));
        } else {
            em.line(&format!("let span = {per}u;"));
        }
        em.open_loop("for (var e = 0u; e < span; e = e + 1u)", per);
        em.line("let i = first + e;");
        em.line(&format!("if (i >= {n}u) {{ break; }}"));
        key_line(&mut em)?;
        em.line("var m: bool;");
        em.line("var d: u32;");
        em.open("if (by_position)");
        em.line("m = key == tk && (head || (i >> (shift + 8u)) == (ti >> (shift + 8u)));");
        em.line(&format!("d = (i >> shift) & {}u;", BINS - 1));
        em.close(Some("else"));
        em.line("m = head || (key >> (shift + 8u)) == (tk >> (shift + 8u));");
        em.line(&format!("d = (key >> shift) & {}u;", BINS - 1));
        em.close(None);
        em.line("if (m && key <= bnd) { atomicAdd(&h[d], 1u); }");
        em.close(None);
        em.line("workgroupBarrier();");
        em.open_loop(
            &format!("for (var b = lid; b < {BINS}u; b = b + {wg}u)"),
            BINS / wg,
        );
        em.line(&format!("out0[g * {BINS}u + b] = atomicLoad(&h[b]);"));
        em.close(None);
        finish(
            em,
            &format!("{name}_select_histogram"),
            "digit histograms per tile (shift, phase and first pass in the parameters)",
            vec![bind(hist, u32s(groups * BINS))],
            &format!(
                "var<workgroup> h: array<atomic<u32>, {BINS}>;\nvar<workgroup> row_done: u32;\nvar<workgroup> candidates: u32;\n"
            ),
            wg,
            groups,
        )?
    };

    // One workgroup per row: the digit where the running count reaches what is left to take.
    let choose = {
        let sw = wg.min(BINS);
        let mut em = emitter();
        // The state is updated in place (`out0`): rows the direct selection took keep the
        // positions it left after the states.
        em.inputs.push(bind(hist, u32s(groups * BINS)));
        em.inputs.push(bind(PARAMS, u32s(3)));
        if bounded {
            em.inputs.push(bind(bounds, u32s(rows)));
        }
        em.line("let row = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (row >= {rows}u) {{ return; }}"));
        // A finished row's histograms were not written (above).
        em.open_loop(
            &format!("for (var b = lid; b < {BINS}u && out0[row * 4u + 3u] == 0u; b = b + {sw}u)"),
            BINS / sw,
        );
        em.line("var s = 0u;");
        em.open_loop(
            &format!("for (var t = 0u; t < {tiles}u; t = t + 1u)"),
            tiles,
        );
        em.line(&format!("s = s + in0[(row * {tiles}u + t) * {BINS}u + b];"));
        em.close(None);
        em.line("tot[b] = s;");
        em.close(None);
        em.line("workgroupBarrier();");
        em.open("if (lid == 0u)");
        em.line("let shift = in1[0];");
        em.line("var tk = out0[row * 4u];");
        em.line("var ti = out0[row * 4u + 1u];");
        em.line("let rem = out0[row * 4u + 2u];");
        em.line("var done = out0[row * 4u + 3u];");
        em.open("if (done == 0u)");
        em.line("var acc = 0u;");
        em.line(&format!("var pick = {}u;", BINS - 1));
        em.line("var whole = false;");
        em.open_loop(&format!("for (var b = 0u; b < {BINS}u; b = b + 1u)"), BINS);
        em.line("let c = tot[b];");
        em.line("if (acc + c >= rem) { pick = b; whole = acc + c == rem; break; }");
        em.line("acc = acc + c;");
        em.close(None);
        em.line(
            "if (in1[1] != 0u) { ti = ti | (pick << shift); } else { tk = tk | (pick << shift); }",
        );
        // Every element left with these bits is taken: the pair's remaining bits are all
        // ones (the largest key with them, any position), and the passes left count nothing.
        em.open("if (whole)");
        em.line("let low = select((1u << shift) - 1u, 0u, shift == 0u);");
        // Only elements at or below the row's bound were counted: the taken keys stop there.
        em.line(if bounded {
            "if (in1[1] != 0u) { ti = ti | low; } else { tk = min(tk | low, in2[row]); ti = 0xffffffffu; }"
        } else {
            "if (in1[1] != 0u) { ti = ti | low; } else { tk = tk | low; ti = 0xffffffffu; }"
        });
        em.line("done = 1u;");
        em.close(None);
        em.line("out0[row * 4u + 2u] = rem - min(acc, rem);");
        em.close(Some("else"));
        em.line("out0[row * 4u + 2u] = rem;");
        em.close(None);
        em.line("out0[row * 4u] = tk;");
        em.line("out0[row * 4u + 1u] = ti;");
        em.line("out0[row * 4u + 3u] = done;");
        em.close(None);
        finish(
            em,
            &format!("{name}_select_digit"),
            "the next digit of each row's k-th (key, position) pair",
            vec![bind(state, u32s(state_len))],
            &format!("var<workgroup> tot: array<u32, {BINS}>;\n"),
            sw,
            rows,
        )?
    };

    // Each lane's smallest key (`bounded`).
    let lane_minima = || -> Result<Kernel> {
        let mut em = emitter();
        tile_start(&mut em);
        em.line(&format!("let span = {per}u;"));
        em.line("var low = 0xffffffffu;");
        items_loop(&mut em);
        key_line(&mut em)?;
        em.line("low = min(low, key);");
        em.close(None);
        em.line(&format!("out0[g * {wg}u + lid] = low;"));
        finish(
            em,
            &format!("{name}_select_lanes"),
            "each lane's smallest key",
            vec![bind(minima, u32s(rows * lanes))],
            "",
            wg,
            groups,
        )
    };

    // One workgroup per row: the k-th smallest of its lanes' smallest keys, by bisection of
    // the key range (at least k lanes hold a key at or below it); for rows of at most
    // RANKED_LANES lanes by ranking them instead (the same key): each lane's smallest key
    // counts those before it in (key, lane) order, four lanes a load, and the one with k - 1
    // before it is the bound. The bisection's 32 rounds of barriers and serial sums took
    // 0.1 ms a row on lavapipe.
    let bound = || -> Result<Kernel> {
        let mut em = emitter();
        em.inputs.push(bind(minima, u32s(rows * lanes)));
        em.line("let row = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (row >= {rows}u) {{ return; }}"));
        if lanes <= RANKED_LANES
            && !std::env::var("WGPU_HLO_TOP_K_RANKED").is_ok_and(|v| v.trim() == "0")
        {
            let l4 = lanes.div_ceil(4);
            em.open_loop(
                &format!("for (var q = lid; q < {l4}u; q = q + {wg}u)"),
                l4.div_ceil(wg),
            );
            em.line("var v = vec4<u32>(0xffffffffu);");
            em.open_loop("for (var c = 0u; c < 4u; c = c + 1u)", 4);
            em.line(&format!(
                "if (q * 4u + c < {lanes}u) {{ v[c] = in0[row * {lanes}u + q * 4u + c]; }}"
            ));
            em.close(None);
            em.line("mins[q] = v;");
            em.close(None);
            em.line("workgroupBarrier();");
            em.open_loop(
                &format!("for (var j = lid; j < {lanes}u; j = j + {wg}u)"),
                lanes.div_ceil(wg),
            );
            em.line("let mj = mins[j / 4u][j % 4u];");
            em.line("var r = 0u;");
            em.open_loop(&format!("for (var q = 0u; q < {l4}u; q = q + 1u)"), l4);
            em.line("let m = mins[q];");
            em.line("let at = vec4<u32>(q * 4u) + vec4<u32>(0u, 1u, 2u, 3u);");
            em.line(
                "let before = (m < vec4<u32>(mj)) | ((m == vec4<u32>(mj)) & (at < vec4<u32>(j)));",
            );
            em.line("r = r + dot(select(vec4<u32>(0u), vec4<u32>(1u), before), vec4<u32>(1u));");
            em.close(None);
            em.line(&format!("if (r == {}u) {{ out0[row] = mj; }}", k - 1));
            em.close(None);
            return finish(
                em,
                &format!("{name}_select_bound"),
                "each row's bound on its k-th key, ranked",
                vec![bind(bounds, u32s(rows))],
                &format!("var<workgroup> mins: array<vec4<u32>, {l4}>;\n"),
                wg,
                rows,
            );
        }
        em.line("var lo = 0u;");
        em.line("var hi = 0xffffffffu;");
        em.open_loop("for (var it = 0u; it < 32u; it = it + 1u)", 32);
        em.line("let mid = lo + (hi - lo) / 2u;");
        em.line("var c = 0u;");
        em.open_loop(
            &format!("for (var q = lid; q < {lanes}u; q = q + {wg}u)"),
            lanes.div_ceil(wg),
        );
        em.line(&format!(
            "if (in0[row * {lanes}u + q] <= mid) {{ c = c + 1u; }}"
        ));
        em.close(None);
        em.line("part[lid] = c;");
        em.line("workgroupBarrier();");
        em.open("if (lid == 0u)");
        sum_parts(&mut em);
        em.line("total = s;");
        em.close(None);
        em.line(&format!(
            "if (workgroupUniformLoad(&total) >= {k}u) {{ hi = mid; }} else {{ lo = mid + 1u; }}"
        ));
        em.close(None);
        em.line("if (lid == 0u) { out0[row] = hi; }");
        finish(
            em,
            &format!("{name}_select_bound"),
            "each row's bound on its k-th key",
            vec![bind(bounds, u32s(rows))],
            &format!("var<workgroup> part: array<u32, {wg}>;\nvar<workgroup> total: u32;\n"),
            wg,
            rows,
        )
    };

    // One workgroup per row (`bounded`): the elements at or below the bound, where at most
    // DIRECT_CAP, gathered in workgroup memory (in any order) and ranked by (key, position);
    // the k-th pair is the row's, and the row is done, so the radix passes skip it. At least
    // k elements lie at or below the bound, so the k-th pair of the row lies among them.
    // Where more do, the row is left as it was.
    let direct = || -> Result<Kernel> {
        let mut em = emitter();
        em.inputs.push(bind(minima, u32s(rows * lanes)));
        em.inputs.push(bind(bounds, u32s(rows)));
        em.line("let row = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (row >= {rows}u) {{ return; }}"));
        em.line("if (lid == 0u) { atomicStore(&found, 0u); atomicStore(&nlive, 0u); }");
        em.line("workgroupBarrier();");
        em.line("let bnd = in1[row];");
        // The live lanes (a candidate each at least, so at most DIRECT_CAP of them where the
        // row is taken), listed so that the walk below spreads their elements over the
        // threads evenly: neighbouring threads read neighbouring elements, and no lane of a
        // SIMD batch idles through a dead lane's span.
        em.open_loop(
            &format!("for (var q = lid; q < {lanes}u; q = q + {wg}u)"),
            lanes.div_ceil(wg),
        );
        em.open(&format!("if (in0[row * {lanes}u + q] <= bnd)"));
        em.line("let at = atomicAdd(&nlive, 1u);");
        em.line(&format!("if (at < {DIRECT_CAP}u) {{ live[at] = q; }}"));
        em.close(None);
        em.close(None);
        em.line("workgroupBarrier();");
        em.line("if (lid == 0u) { nlv = atomicLoad(&nlive); }");
        em.line("let nl = workgroupUniformLoad(&nlv);");
        em.line(&format!("if (nl > {DIRECT_CAP}u) {{ return; }}"));
        em.open_loop("for (var li = 0u; li < nl; li = li + 1u)", DIRECT_CAP);
        em.line("let q = live[li];");
        em.line(&format!(
            "let first = (q / {wg}u) * {tile}u + (q % {wg}u) * {per}u;"
        ));
        em.open_loop(
            &format!("for (var e = lid; e < {per}u; e = e + {wg}u)"),
            per.div_ceil(wg),
        );
        em.line("let i = first + e;");
        em.line(&format!("if (i >= {n}u) {{ break; }}"));
        key_line(&mut em)?;
        em.open("if (key <= bnd)");
        em.line("let slot = atomicAdd(&found, 1u);");
        em.line(&format!(
            "if (slot < {DIRECT_CAP}u) {{ cand[slot] = vec2<u32>(key, i); }}"
        ));
        em.close(None);
        em.close(None);
        em.close(None);
        em.line("workgroupBarrier();");
        em.line("let c = atomicLoad(&found);");
        em.line(&format!("if (c > {DIRECT_CAP}u) {{ return; }}"));
        em.open_loop(
            &format!("for (var j = lid; j < c; j = j + {wg}u)"),
            DIRECT_CAP.div_ceil(wg),
        );
        em.line("let pj = cand[j];");
        em.line("var r = 0u;");
        em.open_loop("for (var q = 0u; q < c; q = q + 1u)", DIRECT_CAP);
        em.line("let pq = cand[q];");
        em.line("if (pq.x < pj.x || (pq.x == pj.x && pq.y < pj.y)) { r = r + 1u; }");
        em.close(None);
        // The chosen: the first k pairs, each at its place in the result. Done marked 2: the
        // passes skip the row as any done one, the count and the ranking too.
        em.line(&format!(
            "if (r < {k}u) {{ out0[{slots_at}u + row * {k}u + r] = pj.y; }}"
        ));
        em.open(&format!("if (r == {}u)", k - 1));
        em.line("out0[row * 4u] = pj.x;");
        em.line("out0[row * 4u + 1u] = pj.y;");
        em.line("out0[row * 4u + 2u] = 0u;");
        em.line("out0[row * 4u + 3u] = 2u;");
        em.close(None);
        em.close(None);
        finish(
            em,
            &format!("{name}_select_direct"),
            "each row's k-th (key, position) pair ranked among its elements at or below the bound, where those are few",
            vec![bind(state, u32s(state_len))],
            &format!(
                "var<workgroup> cand: array<vec2<u32>, {DIRECT_CAP}>;\nvar<workgroup> live: array<u32, {DIRECT_CAP}>;\nvar<workgroup> found: atomic<u32>;\nvar<workgroup> nlive: atomic<u32>;\nvar<workgroup> nlv: u32;\n"
            ),
            wg,
            rows,
        )
    };

    // The number of chosen elements in each tile.
    let count = {
        let mut em = emitter();
        em.inputs.push(bind(state, u32s(state_len)));
        if bounded {
            em.inputs.push(bind(minima, u32s(rows * lanes)));
        }
        tile_start(&mut em);
        // A row the direct selection took counts nothing (so its tiles place nothing).
        em.line("if (lid == 0u) { skip = in0[row * 4u + 3u]; }");
        em.open("if (workgroupUniformLoad(&skip) == 2u)");
        em.line("if (lid == 0u) { out0[g] = 0u; }");
        em.line("return;");
        em.close(None);
        em.line("let tk = in0[row * 4u];");
        em.line("let ti = in0[row * 4u + 1u];");
        live_span(&mut em, bounded.then_some(1));
        count_mine(&mut em)?;
        em.open("if (lid == 0u)");
        sum_parts(&mut em);
        em.line("out0[g] = s;");
        em.close(None);
        finish(
            em,
            &format!("{name}_select_count"),
            "the chosen elements per tile",
            vec![bind(counts, u32s(groups))],
            &format!("var<workgroup> part: array<u32, {wg}>;\nvar<workgroup> skip: u32;\n"),
            wg,
            groups,
        )?
    };

    // The chosen (key, position) pairs of each row in position order.
    let place = {
        let mut em = emitter();
        em.inputs.push(bind(state, u32s(state_len)));
        em.inputs.push(bind(counts, u32s(groups)));
        if bounded {
            em.inputs.push(bind(minima, u32s(rows * lanes)));
        }
        tile_start(&mut em);
        // A tile with nothing chosen (most of them: k of n) places nothing.
        em.line("if (lid == 0u) { base = in1[g]; }");
        em.line("if (workgroupUniformLoad(&base) == 0u) { return; }");
        em.line("let tk = in0[row * 4u];");
        em.line("let ti = in0[row * 4u + 1u];");
        live_span(&mut em, bounded.then_some(2));
        // The tile's first slot: the chosen elements of the row's earlier tiles.
        em.line("var o = 0u;");
        em.open_loop(
            &format!("for (var q = lid; q < t; q = q + {wg}u)"),
            tiles.div_ceil(wg),
        );
        em.line(&format!("o = o + in1[row * {tiles}u + q];"));
        em.close(None);
        em.line("part[lid] = o;");
        em.line("workgroupBarrier();");
        em.open("if (lid == 0u)");
        sum_parts(&mut em);
        em.line("base = s;");
        em.close(None);
        em.line("workgroupBarrier();");
        count_mine(&mut em)?;
        em.open("if (lid == 0u)");
        em.line("var s = base;");
        em.open_loop(&format!("for (var q = 0u; q < {wg}u; q = q + 1u)"), wg);
        em.line("let v = part[q];");
        em.line("part[q] = s;");
        em.line("s = s + v;");
        em.close(None);
        em.close(None);
        em.line("workgroupBarrier();");
        em.line("var at = part[lid];");
        items_loop(&mut em);
        key_line(&mut em)?;
        em.open(&format!("if {chosen_test}"));
        em.line(&format!(
            "let slot = (row * {k}u + min(at, {}u)) * 2u;",
            k - 1
        ));
        em.line("out0[slot] = key;");
        em.line("out0[slot + 1u] = i;");
        em.line("at = at + 1u;");
        em.close(None);
        em.close(None);
        finish(
            em,
            &format!("{name}_select_place"),
            "the chosen (key, position) pairs in position order",
            vec![bind(chosen, u32s(rows * k * 2))],
            &format!("var<workgroup> part: array<u32, {wg}>;\nvar<workgroup> base: u32;\n"),
            wg,
            groups,
        )?
    };

    // Each chosen element's rank among its row's by (key, position): its result's place.
    let rank = kernel::threaded(
        &format!("{name}_select_rank"),
        &format!(
            "kernel {name}_select_rank: the chosen elements in order of a {what}\nloop iterations per invocation: at most {k}\nfuses: {fuses}"
        ),
        vec![bind(chosen, u32s(rows * k * 2)), bind(state, u32s(state_len))],
        vec![bind(perm, u32s(rows * k))],
        &Default::default(),
        "",
        &format!(
            "    if (in1[(tid / {k}u) * 4u + 3u] == 2u) {{\n        out0[tid] = in1[{slots_at}u + tid];\n        return;\n    }}\n    let base = (tid / {k}u) * {k}u;\n    let kj = in0[tid * 2u];\n    let ij = in0[tid * 2u + 1u];\n    var r = 0u;\n    for (var q = 0u; q < {k}u; q = q + 1u) {{\n        let kq = in0[(base + q) * 2u];\n        let iq = in0[(base + q) * 2u + 1u];\n        if (kq < kj || (kq == kj && iq < ij)) {{ r = r + 1u; }}\n    }}\n    out0[base + r] = ij;\n"
        ),
        rows * k,
        k,
        target,
    )?;

    let dim = f
        .ty(x)
        .as_tensor()
        .map_or(0, |t| t.rank().saturating_sub(1));
    let gathered = gather(name, f, defs, op, (dim, n as usize, 1), (k, false), target)?;
    let mut kernels = vec![init, histogram, choose, count, place, rank, gathered];
    if bounded {
        kernels.push(lane_minima()?);
        kernels.push(bound()?);
    }
    if kernels
        .iter()
        .any(|kn| kn.iterations > target.max_invocation_iterations)
    {
        return Ok(None);
    }
    // The direct selection where k leaves it room (`WGPU_HLO_TOP_K_DIRECT=0`: the radix
    // passes alone).
    let direct = if direct_on {
        Some(direct()?).filter(|kn| kn.iterations <= target.max_invocation_iterations)
    } else {
        None
    };
    let mut launches = vec![Launch::new(0, Vec::new())];
    if bounded {
        launches.push(Launch::new(7, Vec::new()));
        launches.push(Launch::new(8, Vec::new()));
    }
    if let Some(d) = direct {
        launches.push(Launch::updating(kernels.len(), Vec::new(), 1));
        kernels.push(d);
    }
    let mut pass = |shift: u32, by_position: bool, head: bool| {
        let p = vec![shift, u32::from(by_position), u32::from(head)];
        // Every pass after the first reads its tile's histogram of the pass before (which
        // tiles still hold candidates), so the histograms stay one buffer, updated in place.
        // (As fresh outputs, passes got other buffers once launches merged: wrong top_k
        // results with the GPU kernel class.)
        let first = shift == 32 - SELECT_BITS && !by_position;
        launches.push(if first {
            Launch::new(1, p.clone())
        } else {
            Launch::updating(1, p.clone(), 2)
        });
        launches.push(Launch::updating(2, p, 1));
    };
    for d in 0..32 / SELECT_BITS {
        pass(32 - SELECT_BITS * (d + 1), false, d == 0);
    }
    for d in 0..index_passes {
        pass(SELECT_BITS * (index_passes - 1 - d), true, d == 0);
    }
    for kn in 3..7 {
        launches.push(Launch::new(kn, Vec::new()));
    }
    Ok(Some(Plan {
        kernels,
        temps,
        launches,
    }))
}

/// Most `k` the per-row selection ([`per_row`]) keeps in registers.
const ROW_K_MAX: u64 = 16;

/// Longest rows for the per-row selection (one lane walks its row alone). Lavapipe, ms,
/// per row / radix selection: 64 x 8192 (k = 8) 2.0 / 3.7, 128 x 16384 7.0 / 9.2, 128 x
/// 32768 13.1 / 10.4, 64 x 32768 (k = 5) 8.5 / 9.5.
const ROW_MAX_N: u64 = 16384;

/// Fewest rows for the per-row selection: an invocation a row, so fewer leave a CPU
/// adapter's SIMD lanes idle (8 rows of 50000 keep the radix selection).
const ROW_MIN_ROWS: u64 = 64;

/// `top_k` of many rows and a small `k` on a CPU adapter: one invocation per row walks it in
/// order, keeping the k smallest (key, position) pairs (the key of [`super::sort_radix`],
/// the order of the radix selection) sorted in registers. Each element is compared with the
/// k-th pair; one that comes before it is inserted by `k` selects over the registers (no
/// array indexed per lane), shifting the later ones down. Positions only grow, so an element
/// whose key ties a kept one stays after it: the same elements and order as the radix
/// selection and a full sort. The positions are written in order and gathered.
///
/// Lavapipe, 2 cores, ms (before: radix selection, made for a few long rows, 20 launches each
/// reading every row; rows of 128 or fewer ranked; jax cpu in brackets): 1024 x 1024, k = 8
/// 95 -> 4.0 (3.9), 512 x 1000, k = 16 49 -> 3.5 (3.0), 256 x 4096, k = 16 16.5 -> 5.2 (3.5),
/// 1000 x 128, k = 10 25 -> 0.8 (1.3), 4096 x 64, k = 4 27 -> 1.0 (2.0).
/// `None` on GPUs (an invocation a row walking it alone: unmeasured there), for fewer than
/// [`ROW_MIN_ROWS`] rows or rows past [`ROW_MAX_N`], `k` past [`ROW_K_MAX`], or with
/// `WGPU_HLO_TOP_K=select` (the radix selection) or `=sort`.
pub fn per_row(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (n, rows): (usize, u64),
    target: Target,
) -> Result<Option<Plan>> {
    let Some((k, rk, x)) = largest_k(f, defs, op) else {
        return Ok(None);
    };
    let n = n as u64;
    let choice = std::env::var("WGPU_HLO_TOP_K").unwrap_or_default();
    if !target.cpu_adapter
        || matches!(choice.trim(), "select" | "sort")
        || k == 0
        || k > ROW_K_MAX
        || k >= n
        || rows < ROW_MIN_ROWS
        || n > ROW_MAX_N
        || rows.saturating_mul(n) >= u32::MAX as u64
        || n > target.max_invocation_iterations
    {
        return Ok(None);
    }
    let perm = temp(0);
    let no_fusion = |_: ValueId| false;
    let mut em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
    let wg = 64u32;
    em.line(&format!("if (tid >= {rows}u) {{ return; }}"));
    em.line("let row = tid;");
    // The kept pairs, sorted: (wh_k{j}, wh_p{j}); none yet (a position past every row's).
    for j in 0..k {
        em.line(&format!("var wh_k{j} = 0xffffffffu;"));
        em.line(&format!("var wh_p{j} = 0xffffffffu;"));
    }
    em.open_loop(&format!("for (var i = 0u; i < {n}u; i = i + 1u)"), n);
    let key = element_key(&mut em, &rk, x, format!("row * {n}u + i"), "e")?;
    em.line(&format!("let key = {key};"));
    let last = k - 1;
    // Whether (key, i) comes before kept pair j.
    let before = |j: u64| format!("(key < wh_k{j} || (key == wh_k{j} && i < wh_p{j}))");
    em.open(&format!("if {}", before(last)));
    for j in 0..k {
        em.line(&format!("let wh_b{j} = {};", before(j)));
    }
    // From the last down, each takes the one before it where the new pair comes before
    // both, the new pair where it comes before this one only.
    for j in (0..k).rev() {
        for (reg, new) in [("wh_k", "key"), ("wh_p", "i")] {
            let from = if j == 0 {
                new.to_string()
            } else {
                format!("select({new}, {reg}{}, wh_b{})", j - 1, j - 1)
            };
            em.line(&format!("{reg}{j} = select({reg}{j}, {from}, wh_b{j});"));
        }
    }
    em.close(None);
    em.close(None);
    for j in 0..k {
        em.line(&format!("out0[row * {k}u + {j}u] = wh_p{j};"));
    }
    let iterations = em.iterations();
    let what = format!("top_k of {rows} rows of {n}, k = {k}");
    let comment = format!(
        "kernel {name}_rows: each row's k first elements, kept in registers, an invocation a row, of a {what}\nloop iterations per invocation: at most {iterations}\nfuses: {}",
        op.name()
    );
    let source = format!(
        "{}{}{}}}\n",
        kernel::entry_header(wg),
        kernel::thread_index(wg),
        em.body
    );
    let select = kernel::in_workgroups(
        &format!("{name}_rows"),
        &comment,
        em.inputs.clone(),
        vec![Binding {
            value: perm,
            ty: TensorType::new(vec![(rows * k) as i64], ElementType::U32),
        }],
        &em.needs,
        &source,
        rows.div_ceil(u64::from(wg)),
        iterations,
        target,
    )?;
    if select.iterations > target.max_invocation_iterations {
        return Ok(None);
    }
    let dim = f
        .ty(x)
        .as_tensor()
        .map_or(0, |t| t.rank().saturating_sub(1));
    let gathered = gather(name, f, defs, op, (dim, n as usize, 1), (k, false), target)?;
    Ok(Some(Plan {
        kernels: vec![select, gathered],
        temps: vec![TensorType::new(vec![(rows * k) as i64], ElementType::U32)],
        launches: vec![Launch::new(0, Vec::new()), Launch::new(1, Vec::new())],
    }))
}
