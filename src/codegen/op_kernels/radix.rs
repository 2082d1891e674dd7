//! A stable least-significant-digit radix sort of `count` items (a permutation of `0..count`,
//! `u32`) by a key each item's number computes ([`Keys`]): an `i32` that matters only in
//! `[0, limit)` (a scatter's windows: a key below 0 sorts first and one at or past `limit`
//! last, each such group in item order, so a binary search for a key in range still finds its
//! run; keys become `0..=limit + 1`), or a whole `u32` and then the item's row (a `sort` along
//! a dimension). Keys sort by [`DIGIT_BITS`] at a time: a pass per digit, each three launches
//! (per-tile digit counts, one workgroup's exclusive scan of them in digit-major order, and a
//! stable placement: every thread places its own consecutive items in order, after those of
//! the threads before it). No atomics, so the result is the same on every adapter. The first
//! launch computes every item's key once; the keys then move with the items (two arrays each
//! way), so the passes read them in order instead of through the permutation (lavapipe, a
//! million floats: the passes' kernels 240-280 → 134 ms).
//!
//! Scatters with many windows sorted them by a bitonic network, one global launch per stage:
//! 210 launches for a million windows (lavapipe: 1.5-1.8 s); a radix sort of a million
//! windows into a million rows is 6 passes.

use std::collections::HashMap;

use super::{temp, Launch, PARAMS};
use crate::codegen::expr::{Binding, ExprEmitter};
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::codegen::texture_reads::QUAD_MARK;
use crate::error::Result;
use crate::ir::{ElementType, Function, Operation, TensorType, ValueId};

/// Bits of the key each pass sorts by.
pub const DIGIT_BITS: u32 = 4;

const BUCKETS: u64 = 1 << DIGIT_BITS;

/// The tiles of the count and placement kernels over `count` items: `wg` threads, each taking
/// `per` items in turn (`items` a tile), `tiles` of them, and a digit count per tile and
/// digit (`slots`).
#[derive(Clone, Copy)]
struct Tiling {
    wg: u64,
    per: u64,
    items: u64,
    tiles: u64,
    slots: u64,
    /// How each thread keeps its digit counters.
    counters: Counters,
}

impl Tiling {
    /// CPU adapters: 32 threads of up to 128 items each, fewer items a thread for fewer than
    /// 32 tiles of that size, so that the tiles still spread over the cores. Each tile's
    /// threads share their counts through workgroup memory and barriers, and its first 16
    /// threads walk them: on llvmpipe, where workgroup memory is accessed lane by lane, those
    /// steps cost as much as counting or placing 1024 items, so larger tiles pay less for
    /// them (a 1M-item sort's count launches 14-18 -> ~8 ms, its placements 50-58 -> 40-48
    /// ms, against 64 threads of 16 items). GPUs: 128 threads of 8 items.
    fn of(count: u64, target: Target) -> Tiling {
        let (wg, per) = if target.cpu_adapter {
            // At least one thread a digit walks the counts (`tile_runs`).
            const WG: u64 = 32;
            const _: () = assert!(WG >= BUCKETS);
            let per = (count / (WG * 32)).clamp(16, 128);
            // Two passes over `per` items stay well within the adapter's loop bound; whole
            // groups of four where it allows (see `quads` in `sort`).
            let per = per.min(target.max_invocation_iterations / 8).max(1);
            (WG, if per >= 4 { per & !3 } else { per })
        } else {
            (128, 8)
        };
        let tiles = count.div_ceil(wg * per);
        Tiling {
            wg,
            per,
            items: wg * per,
            tiles,
            slots: BUCKETS * tiles,
            counters: Counters::of(target),
        }
    }
}

/// Whether CPU adapters' count and placement kernels read their runs four items at a time
/// (`WGPU_HLO_RADIX_QUADS=0`: one at a time, for comparisons).
fn quad_reads() -> bool {
    !std::env::var("WGPU_HLO_RADIX_QUADS").is_ok_and(|v| v.trim() == "0")
}

/// A vector of `n` `u32`s (counts, offsets, permutations).
fn u32s(n: u64) -> TensorType {
    TensorType::new(vec![n as i64], ElementType::U32)
}

/// Threads of the scan kernel.
const SCAN_THREADS: u64 = 256;

/// The key of item `s` (a `u32` WGSL name), emitted into `em`.
pub type KeyFn<'a> = dyn Fn(&mut ExprEmitter, &str) -> Result<String> + 'a;

/// What the items sort by.
pub enum Keys<'a> {
    /// An `i32` key that matters in `[0, limit)` (module doc).
    Ranged {
        /// The key.
        key: &'a KeyFn<'a>,
        /// The keys in range are below this.
        limit: u64,
        /// What each item carries through the sort: its number `s` by default; with `items`,
        /// a `u32` computed from `s` (a payload, such as the bits of a scatter's update), and
        /// the sorted "permutation" then holds those.
        items: Option<&'a KeyFn<'a>>,
    },
    /// A `u32` key (all 32 bits), then the item's row `s / row_len` of `rows` as the more
    /// significant digits: item `s` is element `s % row_len` of its row, and each row sorts
    /// on its own.
    Rows {
        /// The key.
        key: &'a KeyFn<'a>,
        /// Items per row.
        row_len: u64,
        /// Rows.
        rows: u64,
    },
}

/// A sort's kernels, launches (kernel indices into its own kernels) and the temporaries it
/// adds: the sorted permutation ends in temporary 0, whose type (`perm`) the caller owns.
pub struct Sorted {
    /// The kernels.
    pub kernels: Vec<Kernel>,
    /// Their launches, in order.
    pub launches: Vec<Launch>,
    /// The temporaries added, numbered from the `base` given.
    pub temps: Vec<TensorType>,
    /// The temporary that ends holding the items' `u32` keys in sorted order (`count`
    /// entries): for [`Keys::Ranged`], 0 for a key below 0, `limit + 1` for one at or past
    /// `limit`, else the key plus 1.
    pub keys: ValueId,
}

/// Passes a key range of `0..=top` needs.
fn passes(top: u64) -> u32 {
    (64 - top.leading_zeros()).div_ceil(DIGIT_BITS).max(1)
}

/// The radix sort of `count` items (`what`, for the kernels' comments, which name the op
/// `fuses`) by `keys` (module doc): its own temporaries are numbered from `base` on, the
/// result is temporary 0 (of type `perm`, at least `count` entries; only the first `count`
/// are written). `fused` says which values the key computes inline (a comparator's body)
/// rather than reads. `None` where it does not serve: no items, keys past `u32`, or kernels
/// that would loop past the adapter's bound.
#[allow(clippy::too_many_arguments)]
pub fn sort(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    fused: &dyn Fn(ValueId) -> bool,
    keys: Keys,
    count: u64,
    perm: &TensorType,
    base: usize,
    (what, fuses): (&str, &str),
    target: Target,
) -> Result<Option<Sorted>> {
    let n_passes = match keys {
        Keys::Ranged { limit, .. } if limit < (u32::MAX - 2) as u64 => passes(limit + 1),
        Keys::Rows { row_len, rows, .. } if row_len * rows == count => {
            32 / DIGIT_BITS + if rows > 1 { passes(rows - 1) } else { 0 }
        }
        _ => return Ok(None),
    };
    if count == 0 || count >= u32::MAX as u64 {
        return Ok(None);
    }
    let Tiling {
        wg,
        per,
        items: tile_items,
        tiles,
        slots,
        counters,
    } = Tiling::of(count, target);
    let (a, b, counts, offsets) = (temp(0), temp(base), temp(base + 1), temp(base + 2));
    // Each item's key rides along with it (`ka` with `a`, `kb` with `b`): computed once, then
    // read in order, instead of read through the permutation and computed again in every
    // pass's two kernels.
    let (ka, kb) = (temp(base + 3), temp(base + 4));
    let temps = vec![
        perm.clone(),
        u32s(slots),
        u32s(slots),
        u32s(count),
        u32s(count),
    ];
    let bind = |value, ty: TensorType| Binding { value, ty };
    // The `u32` key of item `s`.
    let key_of = |em: &mut ExprEmitter, s: &str| -> Result<String> {
        match &keys {
            Keys::Ranged { key, limit, .. } => {
                let k = key(em, s)?;
                em.line(&format!("let k_{s}: i32 = {k};"));
                Ok(format!(
                    "select(select(u32(k_{s}) + 1u, {top}u, k_{s} >= {limit}i), 0u, k_{s} < 0i)",
                    top = limit + 1,
                ))
            }
            Keys::Rows { key, .. } => key(em, s),
        }
    };
    // Rows sort by their own passes after the key's (item `s` is in row `s / row_len`).
    let row_len = match keys {
        Keys::Rows { row_len, rows, .. } if rows > 1 => Some(row_len),
        _ => None,
    };
    let row_passes = row_len.is_some();
    // The digit of an item in a pass, from its key or, in the rows' passes, its number
    // (`key` and `item`: WGSL expressions of them).
    let digit = |key: &str, item: &str| -> String {
        match row_len {
            Some(row_len) => format!(
                "(select(({item} / {row_len}u) >> ((shift - 32u) & 31u), {key} >> shift, shift < 32u) & {}u)",
                BUCKETS - 1
            ),
            None => format!("(({key} >> shift) & {}u)", BUCKETS - 1),
        }
    };
    // On CPU adapters each thread reads its run of keys (and items) four at a time, marked as
    // groups so that texture reads make them `vec4` loads (`lower`: sorts take no textures,
    // but their groups of four do): llvmpipe loads storage lane by lane, one load per lane
    // and word, and a thread's run is contiguous. A run of whole groups (`per` a multiple of
    // four, `first` too) leaves only the last group partly past `count`, and buffers are
    // whole groups long.
    let quads = target.cpu_adapter && per % 4 == 0 && quad_reads();
    // With selects, the counting loops keep their counts in bytes (see `tile_kernel`).
    const _: () = assert!(BUCKETS == 16);
    let packed = counters.selects && per < 256 && quad_reads();
    // Count (place = false) or place the items of tile `w` from `from` (`to`: the placement's
    // output), with the tile's digit offsets from `offsets` when placing.
    let tile_kernel = |place: bool, from, to| -> Result<Kernel> {
        let no_fusion = |_: ValueId| false;
        let mut em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
        let (kfrom, kto) = if from == a { (ka, kb) } else { (kb, ka) };
        // in0: the keys, in1: the parameters, then the items where read, then the offsets.
        em.inputs.push(bind(kfrom, u32s(count)));
        em.inputs.push(bind(PARAMS, u32s(1)));
        let mut next = 2;
        let items = if place || row_passes {
            em.inputs.push(bind(from, perm.clone()));
            next += 1;
            format!("in{}", next - 1)
        } else {
            String::new()
        };
        if place {
            em.inputs.push(bind(offsets, u32s(slots)));
        }
        em.line("let w = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (w >= {tiles}u) {{ return; }}"));
        em.line("let shift = in1[0];");
        em.line(&format!("let first = w * {tile_items}u + lid * {per}u;"));
        em.line(&format!("var c: array<u32, {BUCKETS}>;"));
        // `body(em, key, item)` for each of the thread's items in order (`i` its index).
        let each_item = |em: &mut ExprEmitter,
                         read_items: bool,
                         body: &dyn Fn(&mut ExprEmitter, &str, &str)| {
            if !quads {
                em.open_loop(&format!("for (var e = 0u; e < {per}u; e = e + 1u)"), per);
                em.line("let i = first + e;");
                em.line(&format!("if (i >= {count}u) {{ break; }}"));
                body(em, "in0[i]", &format!("{items}[i]"));
                em.close(None);
                return;
            }
            em.open_loop(
                &format!("for (var e = 0u; e < {per}u; e = e + 4u)"),
                per / 4,
            );
            em.line("let i4 = first + e;");
            em.line(&format!("if (i4 >= {count}u) {{ break; }}"));
            let group = |arr: &str| {
                format!(
                    "vec4<u32>({arr}[{QUAD_MARK} i4], {arr}[i4 + 1u], {arr}[i4 + 2u], {arr}[i4 + 3u])"
                )
            };
            em.line(&format!("let k4 = {};", group("in0")));
            if read_items {
                em.line(&format!("let t4 = {};", group(&items)));
            }
            for q in 0..4 {
                em.open(&format!("if (i4 + {q}u < {count}u)"));
                em.line(&format!("let i = i4 + {q}u;"));
                body(em, &format!("k4[{q}]"), &format!("t4[{q}]"));
                em.close(None);
            }
            em.close(None);
        };
        if packed {
            counters.count_in_bytes(&mut em, &|em, bump| {
                each_item(em, row_passes, &|em, key, item| {
                    em.line(&format!("let d = {};", digit(key, item)));
                    bump(em);
                })
            });
        } else {
            each_item(&mut em, row_passes, &|em, key, item| {
                em.line(&format!("let d = {};", digit(key, item)));
                counters.bump(em);
            });
        }
        let offsets_in = format!("in{next}");
        tile_runs(
            &mut em,
            counters,
            place.then_some(offsets_in.as_str()),
            (wg, tiles),
        );
        if place {
            each_item(&mut em, true, &|em, key, item| {
                em.line(&format!("let d = {};", digit(key, item)));
                let at = counters.at_digit(em);
                em.line(&format!("out0[{at}] = {item};"));
                em.line(&format!("out1[{at}] = {key};"));
                counters.bump(em);
            });
        }
        let outs = if place {
            vec![bind(to, perm.clone()), bind(kto, u32s(count))]
        } else {
            vec![bind(counts, u32s(slots))]
        };
        let kname = format!(
            "{name}_radix_{}{}",
            if place { "place" } else { "count" },
            if from == a { "" } else { "_back" }
        );
        let comment = format!(
            "kernel {kname}: {} of a stable radix sort of {count} {what} ({DIGIT_BITS}-bit digit at the shift in the parameters; {tiles} tiles of {tile_items})\nloop iterations per invocation: at most {}\nfuses: {fuses}",
            if place { "placement pass" } else { "digit counts per tile" },
            em.iterations()
        );
        tile_kernel_of(&em, (&kname, &comment), outs, (wg, tiles), target)
    };
    let scan = scan_kernel(
        name,
        (slots, count),
        (counts, offsets),
        (what, fuses),
        target,
    )?;
    // Passes alternate between the two permutations and end in `a`: an odd number starts
    // from `b`.
    let start = if n_passes % 2 == 0 { a } else { b };
    let kstart = if start == a { ka } else { kb };
    let init = {
        let mut em = ExprEmitter::new(f, defs, fused, target.caps, target.adapter);
        em.line("let s = tid;");
        let k = key_of(&mut em, "s")?;
        let item = match &keys {
            Keys::Ranged {
                items: Some(items), ..
            } => items(&mut em, "s")?,
            _ => "s".to_string(),
        };
        em.line(&format!("out0[tid] = {item};"));
        em.line(&format!("out1[tid] = {k};"));
        kernel::threaded(
            &format!("{name}_radix_init"),
            &format!(
                "kernel {name}_radix_init: the {} of {count} {what} and their keys before a radix sort\nfuses: {fuses}",
                if matches!(keys, Keys::Ranged { items: Some(_), .. }) { "payloads" } else { "identity permutation" }
            ),
            em.inputs.clone(),
            vec![bind(start, perm.clone()), bind(kstart, u32s(count))],
            &em.needs,
            "",
            &em.body,
            count,
            em.iterations(),
            target,
        )?
    };
    let kernels = vec![
        init,
        tile_kernel(false, a, b)?,
        tile_kernel(true, a, b)?,
        tile_kernel(false, b, a)?,
        tile_kernel(true, b, a)?,
        scan,
    ];
    if kernels
        .iter()
        .any(|k| k.iterations > target.max_invocation_iterations)
    {
        return Ok(None);
    }
    let mut launches = vec![Launch::new(0, Vec::new())];
    let mut from = start;
    for pass in 0..n_passes {
        let shift = vec![pass * DIGIT_BITS];
        let (count_k, place_k) = if from == a { (1, 2) } else { (3, 4) };
        launches.push(Launch::new(count_k, shift.clone()));
        launches.push(Launch::new(5, Vec::new()));
        launches.push(Launch::new(place_k, shift));
        from = if from == a { b } else { a };
    }
    Ok(Some(Sorted {
        kernels,
        launches,
        temps,
        // The passes end in `a`, whose keys ride in `ka`.
        keys: ka,
    }))
}

/// The kernel of a count or placement body `em` (workgroups of `wg`, one per tile, sharing
/// `cnt`).
fn tile_kernel_of(
    em: &ExprEmitter,
    (kname, comment): (&str, &str),
    outs: Vec<Binding>,
    (wg, tiles): (u64, u64),
    target: Target,
) -> Result<Kernel> {
    let source = format!(
        "var<workgroup> cnt: array<u32, {}>;\n\n{}{}}}\n",
        BUCKETS * wg,
        kernel::entry_header(wg as u32),
        em.body
    );
    kernel::in_workgroups(
        kname,
        comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        &source,
        tiles,
        em.iterations(),
        target,
    )
}

/// WGSL a caller has emitted at its place (see [`Counters::count_in_bytes`]).
type Emit<'a> = &'a dyn Fn(&mut ExprEmitter);

/// How a tile kernel's thread keeps its per-digit counters `c` (an `array<u32, BUCKETS>`):
/// indexed by the item's digit `d`, or (`selects`) touched only at constant indices, a
/// digit's counter read through a chain of selects and every counter bumped by a compare.
/// llvmpipe runs a private array at a varying index as a loop over its SIMD lanes, a load or
/// store per lane, for each access; at constant indices the counters are registers.
/// `WGPU_HLO_RADIX_SELECTS=0` / `=1` overrides the default (selects on CPU adapters).
#[derive(Clone, Copy)]
struct Counters {
    selects: bool,
}

impl Counters {
    fn of(target: Target) -> Counters {
        let selects = match std::env::var("WGPU_HLO_RADIX_SELECTS")
            .as_deref()
            .map(str::trim)
        {
            Ok("0") => false,
            Ok("1") => true,
            _ => target.cpu_adapter,
        };
        Counters { selects }
    }

    /// Counts one more item of digit `d`.
    fn bump(self, em: &mut ExprEmitter) {
        if !self.selects {
            em.line("c[d] = c[d] + 1u;");
            return;
        }
        for k in 0..BUCKETS {
            em.line(&format!("c[{k}] = c[{k}] + select(0u, 1u, d == {k}u);"));
        }
    }

    /// Counts the items `walk` visits (each giving its digit `d` and then calling its second
    /// argument) into `c`, four digits' counts a word, a byte each, while walking (a thread
    /// counts at most 255 items): a bump is four selects instead of sixteen.
    fn count_in_bytes(self, em: &mut ExprEmitter, walk: &dyn Fn(&mut ExprEmitter, Emit)) {
        em.line("var p0 = 0u;\n    var p1 = 0u;\n    var p2 = 0u;\n    var p3 = 0u;");
        walk(em, &|em| {
            em.line("let inc = 1u << ((d & 3u) << 3u);");
            for w in 0..4 {
                em.line(&format!(
                    "p{w} = p{w} + select(0u, inc, (d >> 2u) == {w}u);"
                ));
            }
        });
        for k in 0..BUCKETS {
            em.line(&format!(
                "c[{k}] = (p{} >> {}u) & 255u;",
                k / 4,
                8 * (k % 4)
            ));
        }
    }

    /// Digit `d`'s counter, a WGSL expression (bound to `cd` with selects).
    fn at_digit(self, em: &mut ExprEmitter) -> &'static str {
        if !self.selects {
            return "c[d]";
        }
        em.line("var cd = c[0];");
        for k in 1..BUCKETS {
            em.line(&format!("cd = select(cd, c[{k}], d == {k}u);"));
        }
        "cd"
    }

    /// `line(k)` for every digit `k` (a WGSL name or constant): a loop, or unrolled with
    /// selects so that `c` is indexed only by constants.
    fn each_digit(self, em: &mut ExprEmitter, line: &dyn Fn(&str) -> String) {
        if self.selects {
            for k in 0..BUCKETS {
                em.line(&line(&format!("{k}u")));
            }
        } else {
            em.open_loop(
                &format!("for (var d = 0u; d < {BUCKETS}u; d = d + 1u)"),
                BUCKETS,
            );
            em.line(&line("d"));
            em.close(None);
        }
    }
}

/// After a tile's threads have counted their items' digits (`c`, per thread), WGSL that
/// shares the counts (`cnt`, digit-major) and has thread `d` of the first [`BUCKETS`] walk
/// digit `d`'s counts over the `wg` threads: counting (`offsets: None`), the tile's total
/// into `out0`; placing (`offsets`: the binding of the scan's offsets), each thread's first
/// position per digit, back into its `c`.
fn tile_runs(
    em: &mut ExprEmitter,
    counters: Counters,
    offsets: Option<&str>,
    (wg, tiles): (u64, u64),
) {
    counters.each_digit(em, &|d| format!("cnt[{d} * {wg}u + lid] = c[{d}];"));
    em.line("workgroupBarrier();");
    em.open(&format!("if (lid < {BUCKETS}u)"));
    match offsets {
        Some(o) => em.line(&format!("var run = {o}[lid * {tiles}u + w];")),
        None => em.line("var run = 0u;"),
    }
    em.open_loop(&format!("for (var t = 0u; t < {wg}u; t = t + 1u)"), wg);
    em.line(&format!("let v = cnt[lid * {wg}u + t];"));
    if offsets.is_some() {
        em.line(&format!("cnt[lid * {wg}u + t] = run;"));
    }
    em.line("run = run + v;");
    em.close(None);
    if offsets.is_none() {
        em.line(&format!("out0[lid * {tiles}u + w] = run;"));
    }
    em.close(None);
    if offsets.is_some() {
        em.line("workgroupBarrier();");
        counters.each_digit(em, &|d| format!("c[{d}] = cnt[{d} * {wg}u + lid];"));
    }
}

/// [`sort`]'s parts for keys that one pass sorts, without the keys: [`bucket`].
pub struct Bucketed {
    /// The kernels.
    pub kernels: Vec<Kernel>,
    /// Their launches, in order.
    pub launches: Vec<Launch>,
    /// The temporaries added, numbered from the `base` given.
    pub temps: Vec<TensorType>,
    /// The temporary holding the digit-major exclusive scan of the tiles' digit counts: the
    /// items of key `d` start at entry `d * tiles` (and end where key `d + 1`'s start).
    pub offsets: ValueId,
    /// Tiles the items were counted in.
    pub tiles: u64,
}

/// The stable sort of `count` items (`0..count`, into temporary 0 of type `perm`) by an `i32`
/// key that matters in `[0, limit)`, as [`Keys::Ranged`], where the keys `0..=limit + 1` fit
/// one digit: one pass that computes each item's key where it is needed (in the count and
/// in the placement), with no first launch writing the identity permutation and the keys,
/// and no keys moved: the placement reads and writes one word per item instead of three and
/// two. The count kernel keeps each thread's digit counts (a third temporary), and the
/// placement starts from them instead of counting its items again. Where a key's items start
/// is in the scan's offsets ([`Bucketed::offsets`]). `None` where the keys need more than one
/// digit or the kernels would loop past the adapter's bound (then [`sort`] serves).
#[allow(clippy::too_many_arguments)]
pub fn bucket(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    fused: &dyn Fn(ValueId) -> bool,
    (key, limit): (&KeyFn, u64),
    count: u64,
    perm: &TensorType,
    base: usize,
    (what, fuses): (&str, &str),
    target: Target,
) -> Result<Option<Bucketed>> {
    if limit + 1 >= BUCKETS || count == 0 || count >= u32::MAX as u64 {
        return Ok(None);
    }
    let Tiling {
        wg,
        per,
        items: tile_items,
        tiles,
        slots,
        counters,
    } = Tiling::of(count, target);
    let bind = |value, ty: TensorType| Binding { value, ty };
    let (counts, offsets, lanes) = (temp(base), temp(base + 1), temp(base + 2));
    // Each thread's digit counts, thread-major: the count kernel writes them and the
    // placement starts from them, where it counted its items again (1M scatter windows on
    // lavapipe: a quarter of the placement's time).
    let lane_slots = tiles * wg * BUCKETS;
    let tile_kernel = |place: bool| -> Result<Kernel> {
        let mut em = ExprEmitter::new(f, defs, fused, target.caps, target.adapter);
        if place {
            em.inputs.push(bind(offsets, u32s(slots)));
            em.inputs.push(bind(lanes, u32s(lane_slots)));
        }
        em.line("let w = wid.y * nwg.x + wid.x;");
        em.line(&format!("if (w >= {tiles}u) {{ return; }}"));
        em.line(&format!("let first = w * {tile_items}u + lid * {per}u;"));
        em.line(&format!("var c: array<u32, {BUCKETS}>;"));
        if place {
            counters.each_digit(&mut em, &|d| {
                format!("c[{d}] = in1[(w * {wg}u + lid) * {BUCKETS}u + {d}];")
            });
            tile_runs(&mut em, counters, Some("in0"), (wg, tiles));
        }
        // This thread's items in turn: count their digits, or place each after the items of
        // its digit before it.
        em.open_loop(&format!("for (var e = 0u; e < {per}u; e = e + 1u)"), per);
        em.line("let i = first + e;");
        em.line(&format!("if (i >= {count}u) {{ break; }}"));
        let k = key(&mut em, "i")?;
        em.line(&format!("let k_i: i32 = {k};"));
        em.line(&format!(
            "let d = select(select(u32(k_i) + 1u, {top}u, k_i >= {limit}i), 0u, k_i < 0i);",
            top = limit + 1
        ));
        if place {
            let at = counters.at_digit(&mut em);
            em.line(&format!("out0[{at}] = i;"));
        }
        counters.bump(&mut em);
        em.close(None);
        if !place {
            counters.each_digit(&mut em, &|d| {
                format!("out1[(w * {wg}u + lid) * {BUCKETS}u + {d}] = c[{d}];")
            });
            tile_runs(&mut em, counters, None, (wg, tiles));
        }
        let outs = if place {
            vec![bind(temp(0), perm.clone())]
        } else {
            vec![bind(counts, u32s(slots)), bind(lanes, u32s(lane_slots))]
        };
        let kname = format!("{name}_bucket_{}", if place { "place" } else { "count" });
        let comment = format!(
            "kernel {kname}: {} of a stable one-digit sort of {count} {what} (keys computed in place; {tiles} tiles of {tile_items})\nloop iterations per invocation: at most {}\nfuses: {fuses}",
            if place { "placement" } else { "digit counts per tile" },
            em.iterations()
        );
        tile_kernel_of(&em, (&kname, &comment), outs, (wg, tiles), target)
    };
    let kernels = vec![
        tile_kernel(false)?,
        scan_kernel(
            name,
            (slots, count),
            (counts, offsets),
            (what, fuses),
            target,
        )?,
        tile_kernel(true)?,
    ];
    if kernels
        .iter()
        .any(|k| k.iterations > target.max_invocation_iterations)
    {
        return Ok(None);
    }
    Ok(Some(Bucketed {
        kernels,
        launches: (0..3).map(|k| Launch::new(k, Vec::new())).collect(),
        temps: vec![u32s(slots), u32s(slots), u32s(lane_slots)],
        offsets,
        tiles,
    }))
}

/// The exclusive scan of the `slots` digit-major counts (`counts` into `offsets`) of a sort of
/// `count` items: each thread sums its run of slots, one thread scans those sums, each
/// thread writes its run's offsets.
fn scan_kernel(
    name: &str,
    (slots, count): (u64, u64),
    (counts, offsets): (ValueId, ValueId),
    (what, fuses): (&str, &str),
    target: Target,
) -> Result<Kernel> {
    let bind = |value, ty: TensorType| Binding { value, ty };
    let run = slots.div_ceil(SCAN_THREADS);
    let body = format!(
        "var<workgroup> part: array<u32, {SCAN_THREADS}>;\n\n{}    \
         let first = lid * {run}u;\n    var sum = 0u;\n    \
         for (var j = 0u; j < {run}u; j = j + 1u) {{\n        let i = first + j;\n        if (i >= {slots}u) {{ break; }}\n        sum = sum + in0[i];\n    }}\n    \
         part[lid] = sum;\n    workgroupBarrier();\n    \
         if (lid == 0u) {{\n        var at = 0u;\n        for (var t = 0u; t < {SCAN_THREADS}u; t = t + 1u) {{\n            let v = part[t];\n            part[t] = at;\n            at = at + v;\n        }}\n    }}\n    \
         workgroupBarrier();\n    var at = part[lid];\n    \
         for (var j = 0u; j < {run}u; j = j + 1u) {{\n        let i = first + j;\n        if (i >= {slots}u) {{ break; }}\n        let v = in0[i];\n        out0[i] = at;\n        at = at + v;\n    }}\n}}\n",
        kernel::entry_header(SCAN_THREADS as u32)
    );
    let iterations = 2 * run + SCAN_THREADS;
    let kname = format!("{name}_radix_scan");
    let comment = format!(
        "kernel {kname}: exclusive scan of the {slots} digit counts (digit-major) of a radix sort of {count} {what}, one workgroup\nloop iterations per invocation: at most {iterations}\nfuses: {fuses}"
    );
    kernel::in_workgroups(
        &kname,
        &comment,
        vec![bind(counts, u32s(slots))],
        vec![bind(offsets, u32s(slots))],
        &Default::default(),
        &body,
        1,
        iterations,
        target,
    )
}

#[cfg(test)]
mod tests {
    use super::passes;

    #[test]
    fn passes_cover_the_key_range() {
        // Keys 0..=top: 4 bits a pass.
        assert_eq!(passes(1), 1);
        assert_eq!(passes(15), 1);
        assert_eq!(passes(16), 2);
        assert_eq!(passes(1001), 3);
        assert_eq!(passes((1 << 20) + 1), 6);
    }
}
