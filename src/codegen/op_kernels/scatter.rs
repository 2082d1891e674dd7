//! `scatter`: one thread per result element (several for packed narrow types). Each thread
//! starts from the input element and walks every scatter index in order; when the element
//! lies in that index's update window, it folds the update in with the update computation.
//! Updates to one element are therefore applied in update order, deterministically, with no
//! atomics, for any update computation and any number of inputs. A window that does not fit
//! in the input is skipped whole (XLA's semantics). Cost: result size × number of scatter
//! indices — fine for few indices; scatters with many windows placed by one index into an
//! inserted dimension (embedding gradients) sort their windows first ([`sorted`]) and visit
//! only their own: 5000x64 table, 1024 ids: 1.35 s -> 36 ms on lavapipe. With one input of
//! 32- or 64-bit elements, the sorted windows are instead folded into the input where it lies
//! ([`runs_in_place`]): work in proportion to the updates, not to the result.

use std::collections::{HashMap, HashSet};

use super::per_element::build;
use crate::codegen::dtype::Compute;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::partials;
use crate::codegen::reduce_kernel::{combine, emit_body_function, region_defs};
use crate::error::{Error, Result};
use crate::ir::{Function, Op, Operation, ValueId};
use crate::passes::narrow_scatters::{update_computation, Update};

/// Which values a scatter's kernels compute inline where they read them: the producers of
/// its indices that the compile driver runs inside the scatter (`compile::lower`), none
/// for [`emit`].
pub type Inline<'a> = &'a dyn Fn(ValueId) -> bool;

/// An `i32` expression for index value `v` of compute type `c`, saturated.
pub(crate) fn index_i32(v: &str, c: Compute) -> Result<String> {
    Ok(match c {
        Compute::I32 => v.to_string(),
        Compute::U32 => format!("i32(min({v}, 2147483647u))"),
        Compute::I64 => format!("i32(clamp({v}, -2147483648li, 2147483647li))"),
        Compute::U64 => format!("i32(min({v}, 2147483647lu))"),
        other => {
            return Err(Error::invalid(format!(
                "scatter indices of type {}",
                other.wgsl()
            )))
        }
    })
}

/// Emits the kernel for a `scatter`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    emit_with(name, f, defs, op, (target, &|_| false), false, None)
}

/// A chunked stage of a sorted scatter with add updates: invocation `t` adds run positions
/// `(t % chunks) * chunk ..` (at most `chunk`) of result element `t / chunks`'s sorted run of
/// windows — chunk 0 starting from the input element, the others from 0 — into element `t`
/// of `partials` (one binding per result).
struct Split {
    chunks: u64,
    chunk: u64,
    partials: Vec<Binding>,
}

/// The scatter kernel; with `sorted`, its first input is the permutation that sorts the update
/// windows by their (single) index, and each element binary-searches its own windows. With
/// `split` (sorted only), the chunked partials stage instead.
fn emit_with(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (target, inline): (Target, Inline),
    sorted: bool,
    split: Option<&Split>,
) -> Result<Kernel> {
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return Err(Error::internal("scatter emitter on another op"));
    };
    let n = op.results.len();
    if op.operands.len() != 2 * n + 1 {
        return Err(Error::invalid(format!(
            "scatter with {} operands and {n} results",
            op.operands.len()
        )));
    }
    let body = op
        .regions
        .first()
        .ok_or_else(|| Error::invalid("scatter without an update computation"))?;
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v) || inline(v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let inputs = &op.operands[..n];
    let indices = op.operands[n];
    let count_all: usize = {
        let it = em.ty(indices)?;
        let ivd = dn.index_vector_dim as usize;
        it.dims()
            .iter()
            .enumerate()
            .filter(|&(d, _)| d != ivd)
            .map(|(_, &x)| x)
            .product()
    };
    if sorted {
        em.inputs.push(Binding {
            value: super::temp(0),
            ty: crate::ir::TensorType::new(
                vec![(count_all as u64).next_power_of_two() as i64],
                crate::ir::ElementType::U32,
            ),
        });
    }

    let updates = &op.operands[n + 1..];
    let rt = em.ty(op.results[0])?.clone();
    let it = em.ty(indices)?.clone();
    let ut = em.ty(updates[0])?.clone();
    let results: Vec<Binding> = op
        .results
        .iter()
        .map(|&v| {
            Ok(Binding {
                value: v,
                ty: em.ty(v)?.clone(),
            })
        })
        .collect::<Result<_>>()?;
    let types: Vec<Compute> = results
        .iter()
        .map(|o| em.compute(o.ty.dtype))
        .collect::<Result<_>>()?;
    let ic = em.compute(it.dtype)?;
    let func = emit_body_function(&mut em, "k_update", body, &types)?;

    let rdims = rt.dims();
    let udims = ut.dims();
    let as_usize = |v: &[i64]| -> Vec<usize> { v.iter().map(|&d| d as usize).collect() };
    let window_dims = as_usize(&dn.update_window_dims);
    let inserted = as_usize(&dn.inserted_window_dims);
    let input_batching = as_usize(&dn.input_batching_dims);
    let scatter_dims: Vec<usize> = (0..udims.len())
        .filter(|d| !window_dims.contains(d))
        .collect();
    let scatter_sizes: Vec<usize> = scatter_dims.iter().map(|&d| udims[d]).collect();
    let count: usize = scatter_sizes.iter().product();
    let ivd = dn.index_vector_dim as usize;
    let irank = it.shape.len();
    // Input dimension -> update window dimension (for the dims a window spans).
    let spanned: Vec<usize> = (0..rdims.len())
        .filter(|d| !inserted.contains(d) && !input_batching.contains(d))
        .collect();
    let mut window_of: Vec<Option<usize>> = vec![None; rdims.len()];
    for (k, &d) in spanned.iter().enumerate() {
        window_of[d] = window_dims.get(k).copied();
    }

    let total = rt.num_elements();
    let (outs, comment) = match split {
        None => (
            results,
            format!(
                "kernel {name}: scatter of {count} update windows into {total} elements (updates in order)\nfuses: stablehlo.scatter"
            ),
        ),
        Some(s) => {
            if !sorted || s.partials.len() != n {
                return Err(Error::internal(format!(
                    "{name}: split of an unsorted scatter, or partials mismatched"
                )));
            }
            (
                s.partials.clone(),
                format!(
                    "kernel {name}: scatter partials, {} chunks of at most {} of each element's sorted update windows, for {total} elements\nfuses: stablehlo.scatter",
                    s.chunks, s.chunk
                ),
            )
        }
    };
    // The per-element kernel sorts by one index only.
    let keys = WindowKeys {
        indices,
        scatter_sizes: &scatter_sizes,
        ivd,
        irank,
        ic,
        bounds: &[],
    };
    build(name, em, outs, &func, &comment, target, |em, lin, e| {
        // The result element, and with a split this invocation's chunk of its windows.
        let elem = match split {
            None => lin.to_string(),
            Some(s) => {
                em.line(&format!("let o{e} = {lin} / {}u;", s.chunks));
                em.line(&format!("let c{e} = {lin} % {}u;", s.chunks));
                format!("o{e}")
            }
        };
        let oi = em.multi(&Index::Linear(elem.clone()), &rdims);
        let mut acc = Vec::new();
        for (i, (&x, t)) in inputs.iter().zip(&types).enumerate() {
            let v = em.value(x, &Index::Linear(elem.clone()))?;
            let a = format!("acc{e}_{i}");
            if split.is_some() {
                // Chunks after the first start from 0, the identity of add.
                let w = t.wgsl();
                em.line(&format!("var {a}: {w} = select({w}(), {v}, c{e} == 0u);"));
            } else {
                em.line(&format!("var {a}: {} = {v};", t.wgsl()));
            }
            acc.push(a);
        }
        if sorted {
            // The windows of this element's row: binary search the sorted keys, then walk them
            // (in their original order: the sort is stable).
            let d0 = dn.scatter_dims_to_operand_dims[0] as usize;
            let want = format!("want{e}");
            em.line(&format!("let {want}: i32 = i32({});", oi[d0]));
            em.line(&format!("var lo{e}: u32 = 0u;"));
            em.line(&format!("var hi{e}: u32 = {count}u;"));
            // Binary search: at most log2(count) + 1 halvings, plus the final break.
            em.open_loop("loop", u64::from(64 - (count as u64).leading_zeros()) + 1);
            em.line(&format!("if (lo{e} >= hi{e}) {{ break; }}"));
            em.line(&format!("let mid{e} = (lo{e} + hi{e}) / 2u;"));
            em.line(&format!("let sb{e} = in0[mid{e}];"));
            let key = keys.key(em, &format!("sb{e}"))?;
            em.line(&format!(
                "if ({key} < {want}) {{ lo{e} = mid{e} + 1u; }} else {{ hi{e} = mid{e}; }}"
            ));
            em.close(None);
            match split {
                None => em.open_loop(
                    &format!("for (var q: u32 = lo{e}; q < {count}u; q = q + 1u)"),
                    count as u64,
                ),
                Some(s) => {
                    let (chunk, last) = (s.chunk, count as u64);
                    em.line(&format!("let q0{e} = lo{e} + c{e} * {chunk}u;"));
                    em.open_loop(
                        &format!(
                            "for (var q: u32 = q0{e}; q < min(q0{e} + {chunk}u, {last}u); q = q + 1u)"
                        ),
                        chunk.min(last),
                    );
                }
            }
            em.line("let s = in0[q];");
            let key = keys.key(em, "s")?;
            em.line(&format!("if ({key} != {want}) {{ break; }}"));
        }
        // With batching dimensions, only the windows of this element's batch can reach it:
        // their batch positions are this element's coordinates, so the loop runs over the
        // other scatter positions only (in order, so the updates keep their order). An
        // embedding-style gradient over [batch, seq] visited every window of every element.
        let batch_pos: Vec<(usize, usize)> = input_batching
            .iter()
            .zip(&dn.scatter_indices_batching_dims)
            .map(|(&d_in, &d_idx)| {
                let d_idx = d_idx as usize;
                (if d_idx < ivd { d_idx } else { d_idx - 1 }, d_in)
            })
            .collect();
        let by_batch = !sorted
            && !batch_pos.is_empty()
            && batch_pos.iter().all(|&(pos, d_in)| {
                scatter_sizes
                    .get(pos)
                    .is_some_and(|&n| rdims.get(d_in) == Some(&n))
            });
        let si = if by_batch {
            let free: Vec<usize> = (0..scatter_sizes.len())
                .filter(|p| !batch_pos.iter().any(|&(q, _)| q == *p))
                .collect();
            let free_sizes: Vec<usize> = free.iter().map(|&p| scatter_sizes[p]).collect();
            let free_count: usize = free_sizes.iter().product();
            em.open_loop(
                &format!("for (var s: u32 = 0u; s < {free_count}u; s = s + 1u)"),
                free_count as u64,
            );
            let fi = em.multi(&Index::Linear("s".into()), &free_sizes);
            let mut si = vec![String::new(); scatter_sizes.len()];
            for (k, &p) in free.iter().enumerate() {
                si[p] = fi[k].clone();
            }
            for &(pos, d_in) in &batch_pos {
                si[pos] = oi[d_in].clone();
            }
            si
        } else {
            if !sorted {
                em.open_loop(
                    &format!("for (var s: u32 = 0u; s < {count}u; s = s + 1u)"),
                    count as u64,
                );
            }
            em.multi(&Index::Linear("s".into()), &scatter_sizes)
        };
        // Start of this index's window, per input dimension (i32).
        let mut start = window_starts(em, dn, indices, &si, rdims.len(), ic, &format!("st{e}"))?;
        for (i, &d_in) in input_batching.iter().enumerate() {
            let d_start = dn
                .scatter_indices_batching_dims
                .get(i)
                .copied()
                .unwrap_or(0) as usize;
            let pos = if d_start < ivd { d_start } else { d_start - 1 };
            let b = si.get(pos).cloned().unwrap_or_else(|| "0u".into());
            start[d_in] = format!("({} + i32({b}))", start[d_in]);
        }
        // The whole window must fit; then the element must lie inside it.
        let mut conds = Vec::new();
        let mut upd = vec![String::new(); udims.len()];
        for (k, &d) in scatter_dims.iter().enumerate() {
            upd[d] = si[k].clone();
        }
        for d in 0..rdims.len() {
            let size = window_of[d].map_or(1, |w| udims[w]);
            let st = &start[d];
            if dn.scatter_dims_to_operand_dims.contains(&(d as i64)) {
                conds.push(format!("{st} >= 0i && {st} + {size}i <= {}i", rdims[d]));
            }
            let w = format!("(i32({}) - {st})", oi[d]);
            conds.push(format!("{w} >= 0i && {w} < {size}i"));
            if let Some(wd) = window_of[d] {
                upd[wd] = format!("u32{w}");
            }
        }
        em.open(&format!("if ({})", conds.join(" && ")));
        let vals: Vec<String> = updates
            .iter()
            .map(|&u| em.value(u, &Index::Multi(upd.clone())))
            .collect::<Result<_>>()?;
        em.line(&combine("k_update", n, &acc, &vals));
        em.close(None);
        em.close(None);
        Ok(acc)
    })
}

/// How a sorted scatter keys its update windows: the indices operand, its scatter sizes (its
/// dimensions but the index vector's), the index vector dimension, its rank, the indices'
/// compute type, and `bounds`: with at most one entry, a window's key is its (single) scatter
/// index; with more (the sizes of the operand dimensions the index vector places a window in,
/// all inserted), the row-major position of that point, or -1 when it lies outside (such a
/// window is skipped whole).
#[derive(Clone, Copy)]
struct WindowKeys<'a> {
    indices: ValueId,
    scatter_sizes: &'a [usize],
    ivd: usize,
    irank: usize,
    ic: Compute,
    bounds: &'a [i64],
}

impl WindowKeys<'_> {
    /// The number of update windows.
    fn count(&self) -> usize {
        self.scatter_sizes.iter().product()
    }

    /// The key of update window `s` (a `u32` WGSL name), an `i32`.
    fn key(&self, em: &mut ExprEmitter, s: &str) -> Result<String> {
        let (indices, ivd, irank, ic) = (self.indices, self.ivd, self.irank, self.ic);
        let si = em.multi(&Index::Linear(s.to_string()), self.scatter_sizes);
        if self.bounds.len() <= 1 {
            return index_component(em, indices, &si, 0, ivd, irank, ic);
        }
        let mut inside = Vec::new();
        let mut at = "0i".to_string();
        for (c, &size) in self.bounds.iter().enumerate() {
            let v = index_component(em, indices, &si, c, ivd, irank, ic)?;
            let name = format!("{s}_k{c}");
            em.line(&format!("let {name}: i32 = {v};"));
            inside.push(format!("{name} >= 0i && {name} < {size}i"));
            at = format!("({at} * {size}i + {name})");
        }
        Ok(format!("select(-1i, {at}, {})", inside.join(" && ")))
    }
}

/// Most windows (padded to a power of two) the one-workgroup sort takes.
const ONE_WORKGROUP_SORT_MAX: u64 = 4096;

/// Invocations of the one-workgroup sort.
const ONE_WORKGROUP_SORT_THREADS: u64 = 256;

/// The stable bitonic sort of the `count` window numbers (padded to `p`, a power of two) by
/// their index, whole in one workgroup: the permutation and the keys live in workgroup memory,
/// each compare-exchange stage ends with a barrier. `None` when `p` is over
/// [`ONE_WORKGROUP_SORT_MAX`], the arrays do not fit the adapter's workgroup memory or its
/// loops pass `target.max_invocation_iterations`, or with
/// `WGPU_HLO_SCATTER_SORT=passes` (one launch per stage, for comparisons).
fn one_workgroup_sort(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    keys: WindowKeys,
    p: u64,
    target: Target,
    inline: Inline,
) -> Result<Option<Kernel>> {
    let count = keys.count() as u64;
    let passes = std::env::var("WGPU_HLO_SCATTER_SORT").is_ok_and(|v| v.trim() == "passes");
    if passes || p > ONE_WORKGROUP_SORT_MAX || 8 * p > target.max_workgroup_storage {
        return Ok(None);
    }
    // CPU adapters switch between the invocations at every barrier: fewer switch faster
    // (lavapipe, 512 windows: 1.15 -> 0.87 ms).
    let threads = if target.cpu_adapter {
        64
    } else {
        ONE_WORKGROUP_SORT_THREADS
    };
    let wg = threads.min(p / 2).max(1);
    let mut em = ExprEmitter::new(f, defs, inline, target.caps, target.adapter);
    em.open_loop(
        &format!("for (var t = lid; t < {p}u; t = t + {wg}u)"),
        p.div_ceil(wg),
    );
    em.line("perm[t] = t;");
    em.line(&format!("let s = min(t, {}u);", count - 1));
    let key = keys.key(&mut em, "s")?;
    em.line(&format!("keys[t] = {key};"));
    em.close(None);
    em.line("workgroupBarrier();");
    let log = u64::from(p.trailing_zeros());
    em.open_loop(&format!("for (var k = 2u; k <= {p}u; k = k << 1u)"), log);
    em.open_loop("for (var j = k >> 1u; j > 0u; j = j >> 1u)", log);
    super::sort::open_pairs(&mut em, p / 2, wg);
    em.line("let a = perm[i];");
    em.line("let b = perm[l];");
    // Window b goes before window a: padding last, then by index, then by window number.
    em.line(&format!(
        "let b_first = b < {count}u && (a >= {count}u || keys[b] < keys[a] || (keys[b] == keys[a] && b < a));"
    ));
    em.line("let ascending = (i & k) == 0u;");
    em.open("if (select(!b_first, b_first, ascending))");
    em.line("perm[i] = b;");
    em.line("perm[l] = a;");
    em.close(None);
    em.close(None);
    em.line("workgroupBarrier();");
    em.close(None);
    em.close(None);
    em.open_loop(
        &format!("for (var t = lid; t < {p}u; t = t + {wg}u)"),
        p.div_ceil(wg),
    );
    em.line("out0[t] = perm[t];");
    em.close(None);
    // Loops past the adapter's bound: the network a launch per stage instead.
    if em.iterations() > target.max_invocation_iterations {
        return Ok(None);
    }
    let perm = Binding {
        value: super::temp(0),
        ty: crate::ir::TensorType::new(vec![p as i64], crate::ir::ElementType::U32),
    };
    let source = format!(
        "var<workgroup> perm: array<u32, {p}>;\nvar<workgroup> keys: array<i32, {p}>;\n\n{}{}}}\n",
        crate::codegen::kernel::entry_header(wg as u32),
        em.body
    );
    let comment = format!(
        "kernel {name}: stable bitonic sort of {count} scatter windows by index in one workgroup ({p} padded, {} stages)\nloop iterations per invocation: at most {}\nfuses: stablehlo.scatter",
        log * (log + 1) / 2,
        em.iterations()
    );
    let wgsl = crate::codegen::kernel::assemble(
        name,
        &comment,
        &em.inputs,
        std::slice::from_ref(&perm),
        &em.needs,
        &source,
        target.caps,
    )?;
    Ok(Some(Kernel {
        name: name.to_string(),
        wgsl,
        inputs: em.inputs.clone(),
        outputs: vec![perm],
        workgroups: [1, 1, 1],
        iterations: em.iterations(),
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    }))
}

/// Component `c` of the index vector of scatter index `si` (positions in the scatter
/// dimensions of `indices`), as an `i32` expression.
fn index_component(
    em: &mut ExprEmitter,
    indices: ValueId,
    si: &[String],
    c: usize,
    ivd: usize,
    irank: usize,
    ic: Compute,
) -> Result<String> {
    let mut at = si.to_vec();
    if ivd < irank {
        at.insert(ivd.min(at.len()), format!("{c}u"));
    }
    let v = em.value(indices, &Index::Multi(at))?;
    index_i32(&v, ic)
}

/// The start of scatter index `si`'s window in each of the `rank` operand dimensions: `i32`
/// WGSL names `{tag}_{c}` bound here where the index vector places a component, `0i` elsewhere
/// (before batching offsets).
pub(crate) fn window_starts(
    em: &mut ExprEmitter,
    dn: &crate::ir::attr::ScatterDimensionNumbers,
    indices: ValueId,
    si: &[String],
    rank: usize,
    ic: Compute,
    tag: &str,
) -> Result<Vec<String>> {
    let ivd = dn.index_vector_dim as usize;
    let irank = em.ty(indices)?.rank();
    let mut start = vec!["0i".to_string(); rank];
    for (c, &d_in) in dn.scatter_dims_to_operand_dims.iter().enumerate() {
        let v = index_component(em, indices, si, c, ivd, irank, ic)?;
        let name = format!("{tag}_{c}");
        em.line(&format!("let {name}: i32 = {v};"));
        if let Some(slot) = start.get_mut(d_in as usize) {
            *slot = name;
        }
    }
    Ok(start)
}

/// Where an update window lands in a result of `rdims`: the conditions (WGSL, one per
/// dimension an index places the window in) under which the window, starting at `start`
/// (from [`window_starts`]), fits (XLA skips a window that does not, whole), and the position
/// per result dimension of the window element at coordinates `wi` (one per update window
/// dimension, in order; sizes `window_sizes`).
pub(crate) fn window_place(
    dn: &crate::ir::attr::ScatterDimensionNumbers,
    start: &[String],
    rdims: &[usize],
    window_sizes: &[usize],
    wi: &[String],
) -> (Vec<String>, Vec<String>) {
    let spanned: Vec<usize> = (0..rdims.len())
        .filter(|d| !dn.inserted_window_dims.contains(&(*d as i64)))
        .collect();
    let mut conds = Vec::new();
    let mut pos = Vec::new();
    for (d, st) in start.iter().enumerate() {
        let k = spanned.iter().position(|&x| x == d);
        let size = k.and_then(|k| window_sizes.get(k)).copied().unwrap_or(1);
        if dn.scatter_dims_to_operand_dims.contains(&(d as i64)) {
            conds.push(format!("{st} >= 0i && {st} + {size}i <= {}i", rdims[d]));
        }
        let off = k
            .and_then(|k| wi.get(k))
            .cloned()
            .unwrap_or_else(|| "0u".into());
        pos.push(format!("(u32({st}) + {off})"));
    }
    (conds, pos)
}

/// `conds` joined into one WGSL condition (`true` for none).
pub(crate) fn all_of(conds: &[String]) -> String {
    if conds.is_empty() {
        "true".to_string()
    } else {
        conds.join(" && ")
    }
}

/// How a scatter's update elements are laid out: the update dimensions that span a window
/// (`window_dims`, of sizes `window_sizes`, `w` elements a window) and those that number the
/// windows (`scatter_dims`).
struct Windows {
    window_dims: Vec<usize>,
    window_sizes: Vec<usize>,
    scatter_dims: Vec<usize>,
    w: u64,
}

impl Windows {
    /// The layout of updates of dimensions `udims` under `dn`.
    fn new(dn: &crate::ir::attr::ScatterDimensionNumbers, udims: &[usize]) -> Result<Windows> {
        let window_dims: Vec<usize> = dn.update_window_dims.iter().map(|&d| d as usize).collect();
        let Some(window_sizes) = window_dims
            .iter()
            .map(|&d| udims.get(d).copied())
            .collect::<Option<Vec<usize>>>()
        else {
            return Err(Error::invalid(format!(
                "scatter update_window_dims {:?} past the updates' rank {}",
                dn.update_window_dims,
                udims.len()
            )));
        };
        let scatter_dims = (0..udims.len())
            .filter(|d| !window_dims.contains(d))
            .collect();
        let w = window_sizes.iter().product::<usize>() as u64;
        Ok(Windows {
            window_dims,
            window_sizes,
            scatter_dims,
            w,
        })
    }

    /// The update element (WGSL index per update dimension) of the window at scatter
    /// coordinates `si`, window coordinates `wi`.
    fn update_at(&self, si: &[String], wi: &[String]) -> Vec<String> {
        let mut upd = vec![String::new(); self.scatter_dims.len() + self.window_dims.len()];
        for (k, &d) in self.scatter_dims.iter().enumerate() {
            upd[d] = si[k].clone();
        }
        for (k, &d) in self.window_dims.iter().enumerate() {
            upd[d] = wi[k].clone();
        }
        upd
    }
}

/// The sizes of the scatter dimensions of `indices` (all but the index vector dimension
/// `ivd`): one update window per element of their product.
fn scatter_sizes(indices: &crate::ir::TensorType, ivd: usize) -> Vec<usize> {
    indices
        .dims()
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != ivd)
        .map(|(_, &n)| n)
        .collect()
}

/// A scatter of one input: its dimension numbers, operands, result and update computation,
/// and the input's and updates' types.
struct OneInput<'a> {
    dn: &'a crate::ir::attr::ScatterDimensionNumbers,
    x: ValueId,
    indices: ValueId,
    updates: ValueId,
    result: ValueId,
    body: &'a crate::ir::Region,
    xt: &'a crate::ir::TensorType,
    ut: &'a crate::ir::TensorType,
}

/// `op` as [`OneInput`], or `None` for another op or a scatter of several inputs.
fn one_input<'a>(f: &'a Function, op: &'a Operation) -> Option<OneInput<'a>> {
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return None;
    };
    let ([x, indices, updates], [result], Some(body)) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.first(),
    ) else {
        return None;
    };
    Some(OneInput {
        dn,
        x: *x,
        indices: *indices,
        updates: *updates,
        result: *result,
        body,
        xt: f.ty(*x).as_tensor()?,
        ut: f.ty(*updates).as_tensor()?,
    })
}

/// Invocations per workgroup of an [`atomic`] scatter.
const ATOMIC_WORKGROUP: u32 = 256;

/// A scatter of many windows into a 32-bit integer result whose update computation is one
/// `add`, `maximum` or `minimum`: one invocation per update element folds it into the result
/// in place with the matching WGSL atomic. Integer addition (wrapping), maximum and minimum
/// are associative and commutative, so the result does not depend on the order the atomics
/// land in: it equals the plain kernel's (and jax cpu's) bit for bit on every adapter. One
/// launch, work in proportion to the updates, for any window layout. `jnp.zeros(m,
/// jnp.int32).at[i].add(v)` of 1M values at random places into 1M took 25 ms on lavapipe
/// bucketed and walked by blocks ([`swept`]); see the commit for its time now.
///
/// `None` for few windows (the plain kernel: [`sorts_first`]), other update computations or
/// types (64-bit integers have no WGSL atomics, and float sums would depend on the order),
/// several inputs, batching dimensions, dynamic shapes, results larger than one binding, or
/// `WGPU_HLO_SCATTER_ATOMIC=0`.
fn atomic(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
    inline: Inline,
) -> Result<Option<super::Plan>> {
    use crate::ir::{BinaryOp, ElementType};
    let Some(OneInput {
        dn,
        x,
        indices,
        updates,
        result,
        body,
        xt,
        ut,
    }) = one_input(f, op)
    else {
        return Ok(None);
    };
    let Some(it) = f.ty(indices).as_tensor() else {
        return Ok(None);
    };
    let function = match update_computation(body) {
        Some(Update::Binary(BinaryOp::Add, _)) => "atomicAdd",
        Some(Update::Binary(BinaryOp::Maximum, _)) => "atomicMax",
        Some(Update::Binary(BinaryOp::Minimum, _)) => "atomicMin",
        _ => return Ok(None),
    };
    if std::env::var("WGPU_HLO_SCATTER_ATOMIC").is_ok_and(|v| v.trim() == "0")
        || !matches!(xt.dtype, ElementType::I32 | ElementType::U32)
        || ut.dtype != xt.dtype
        || f.ty(result).as_tensor().map(|t| t.dtype) != Some(xt.dtype)
        || !xt.is_static()
        || !ut.is_static()
        || !it.is_static()
        || !dn.input_batching_dims.is_empty()
        || !dn.scatter_indices_batching_dims.is_empty()
        || crate::codegen::expr::large(xt, target.max_binding_size)
    {
        return Ok(None);
    }
    let rdims = xt.dims();
    let windows = Windows::new(dn, &ut.dims())?;
    let ivd = dn.index_vector_dim as usize;
    let scatter_sizes = scatter_sizes(it, ivd);
    let count = scatter_sizes.iter().product::<usize>() as u64;
    let threads = count.saturating_mul(windows.w);
    if threads == 0 || threads >= u32::MAX as u64 || !sorts_first(count, xt.num_elements() as u64) {
        return Ok(None);
    }
    let ic = crate::codegen::dtype::compute_type(it.dtype, target.caps, target.adapter)?;
    let mut em = ExprEmitter::new(f, defs, inline, target.caps, target.adapter);
    let w = windows.w;
    em.line(&format!("if (tid >= {threads}u) {{ return; }}"));
    em.line(&format!("let s = tid / {w}u;"));
    em.line(&format!("let e = tid % {w}u;"));
    let wi = em.multi(&Index::Linear("e".into()), &windows.window_sizes);
    let si = em.multi(&Index::Linear("s".into()), &scatter_sizes);
    let start = window_starts(&mut em, dn, indices, &si, rdims.len(), ic, "st")?;
    let (fits, pos) = window_place(dn, &start, &rdims, &windows.window_sizes, &wi);
    em.open(&format!("if ({})", all_of(&fits)));
    let at = crate::codegen::expr::linearize(&pos, &rdims);
    let u = em.value(updates, &Index::Multi(windows.update_at(&si, &wi)))?;
    em.line(&format!("{function}(&out0[{at}], {u});"));
    em.close(None);
    let outputs = vec![Binding {
        value: result,
        ty: xt.clone(),
    }];
    let comment = format!(
        "kernel {name}: scatter of {count} update windows of {w} elements into {xt} in place, one invocation per update element folding it in with {function} (integer: the result does not depend on the order)\nfuses: stablehlo.scatter"
    );
    let source = format!(
        "{}{}{}}}\n",
        crate::codegen::kernel::entry_header(ATOMIC_WORKGROUP),
        crate::codegen::kernel::thread_index(ATOMIC_WORKGROUP),
        em.body
    );
    let wgsl =
        crate::codegen::kernel::module_text(&comment, &em.inputs, &outputs, &em.needs, &source)?;
    let elem = crate::codegen::dtype::storage_elem(xt.dtype);
    let decl = format!("var<storage, read_write> out0: array<{elem}>;");
    if !wgsl.contains(&decl) {
        return Err(Error::internal(format!("{name}: no declaration of out0")));
    }
    let wgsl = wgsl.replacen(
        &decl,
        &format!("var<storage, read_write> out0: array<atomic<{elem}>>;"),
        1,
    );
    crate::codegen::kernel::validate(name, &wgsl, target.caps)?;
    let kernel = Kernel {
        name: name.to_string(),
        wgsl,
        inputs: em.inputs.clone(),
        outputs,
        workgroups: crate::codegen::kernel::grid(
            threads.div_ceil(u64::from(ATOMIC_WORKGROUP)),
            target.max_workgroups,
        )?,
        iterations: em.iterations(),
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    };
    Ok(Some(super::Plan {
        kernels: vec![kernel],
        temps: Vec::new(),
        launches: vec![super::Launch::updating_value(0, Vec::new(), x)],
    }))
}

/// Scatters with more update windows than this, each placed by one index into an inserted
/// dimension, sort their windows first (see [`sorted`]).
pub const SORTED_FROM: usize = 64;

/// Whether a scatter of `count` update windows into a result of `results` elements sorts its
/// windows first: past [`SORTED_FROM`] windows, or from 16 windows when the plain kernel's
/// checks (every element against every window) reach 2^26. The gradient of a 64-token lookup
/// in a 50257 x 768 embedding table: 4.2 s plain on lavapipe.
fn sorts_first(count: u64, results: u64) -> bool {
    count > SORTED_FROM as u64 || (count >= 16 && count.saturating_mul(results) >= 1 << 26)
}

/// The sorted plan for `op`, or `None` when the plain kernel serves: the update windows are
/// sorted by index first (a stable bitonic sort of the window numbers), so each result element
/// visits only its own windows — O(log n + hits) instead of O(n) — in the original order:
/// results are identical to the plain kernel's. For scatters like an embedding gradient
/// (`table.at[ids].add(rows)`). When an element's run may be longer than one invocation may
/// loop (`Target::max_invocation_iterations`) and the update computation adds, the run is
/// split into chunks whose partial sums are folded ([`partials::fold_after`]); other update
/// computations keep the one kernel, which the compile driver then refuses.
pub fn sorted(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
    inline: Inline,
) -> Result<Option<super::Plan>> {
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return Ok(None);
    };
    let n = op.results.len();
    // Each window placed by its index in inserted dimensions only: windows with equal
    // indices coincide, others are disjoint.
    if op.operands.len() != 2 * n + 1
        || dn.scatter_dims_to_operand_dims.is_empty()
        || !dn
            .scatter_dims_to_operand_dims
            .iter()
            .all(|d| dn.inserted_window_dims.contains(d))
        || !dn.input_batching_dims.is_empty()
    {
        return atomic(name, f, defs, op, target, inline);
    }
    // The sizes of those dimensions: with several, windows sort by the position of their
    // point (which must fit an i32), and only the in-place stage serves.
    let bounds: Vec<i64> = {
        let rdims = op
            .results
            .first()
            .and_then(|&r| f.ty(r).as_tensor())
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        dn.scatter_dims_to_operand_dims
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .ok()
                    .and_then(|d| rdims.get(d))
                    .copied()
                    .unwrap_or(0)
            })
            .collect()
    };
    let points = bounds.iter().try_fold(1i64, |a, &b| a.checked_mul(b));
    if bounds.len() > 1 && !points.is_some_and(|p| p > 0 && p < i32::MAX as i64) {
        return atomic(name, f, defs, op, target, inline);
    }
    let indices = op.operands[n];
    let Some(it) = f.ty(indices).as_tensor() else {
        return Ok(None);
    };
    let ivd = dn.index_vector_dim as usize;
    let irank = it.rank();
    let scatter_sizes = scatter_sizes(it, ivd);
    let keys = WindowKeys {
        indices,
        scatter_sizes: &scatter_sizes,
        ivd,
        irank,
        ic: crate::codegen::dtype::compute_type(it.dtype, target.caps, target.adapter)?,
        bounds: &bounds,
    };
    let count = keys.count();
    let results = op
        .results
        .first()
        .and_then(|&r| f.ty(r).as_tensor())
        .map_or(0, |t| t.num_elements() as u64);
    if !sorts_first(count as u64, results) {
        return Ok(None);
    }
    if let Some(plan) = privatized(name, f, defs, op, keys, target, inline)? {
        return Ok(Some(plan));
    }
    if let Some(plan) = atomic(name, f, defs, op, target, inline)? {
        return Ok(Some(plan));
    }
    // Keys that matter lie in [0, limit): the single index's dimension, or the points.
    let limit = bounds.iter().map(|&b| b.max(0) as u64).product::<u64>();
    if let Some(plan) = swept(name, f, defs, op, keys, limit, (target, inline))? {
        return Ok(Some(plan));
    }
    let p = (count as u64).next_power_of_two();
    let perm_type = crate::ir::TensorType::new(vec![p as i64], crate::ir::ElementType::U32);
    let init =
        super::sort::identity_kernel(&format!("{name}_init"), 1, p, target, "stablehlo.scatter")?;
    let pass = {
        let mut em = ExprEmitter::new(f, defs, inline, target.caps, target.adapter);
        em.inputs.push(Binding {
            value: super::temp(0),
            ty: perm_type.clone(),
        });
        em.inputs.push(Binding {
            value: super::PARAMS,
            ty: crate::ir::TensorType::new(vec![2], crate::ir::ElementType::U32),
        });
        em.line("let i = tid;");
        em.line("let k = in1[0];");
        em.line("let j = in1[1];");
        em.line("let l = i ^ j;");
        em.line("let pi = in0[i];");
        em.line("let pl = in0[l];");
        em.line("let first = select(pl, pi, i < l);");
        em.line("let second = select(pi, pl, i < l);");
        em.line("let ascending = (min(i, l) & k) == 0u;");
        em.line(&format!("let fc = min(first, {}u);", count - 1));
        em.line(&format!("let sc = min(second, {}u);", count - 1));
        let kf = keys.key(&mut em, "fc")?;
        let ks = keys.key(&mut em, "sc")?;
        em.line(&format!(
            "let second_first = second < {count}u && (first >= {count}u || {ks} < {kf} || ({ks} == {kf} && second < first));"
        ));
        em.line("let swap = select(!second_first && first != second, second_first, ascending);");
        em.line("out0[tid] = select(pi, pl, swap);");
        let outputs = vec![Binding {
            value: super::temp(0),
            ty: perm_type.clone(),
        }];
        let comment = format!(
            "kernel {name}_pass: one stage of the stable bitonic sort of {count} scatter windows by index\nfuses: stablehlo.scatter"
        );
        crate::codegen::kernel::threaded(
            &format!("{name}_pass"),
            &comment,
            em.inputs.clone(),
            outputs,
            &em.needs,
            "",
            &em.body,
            p,
            em.iterations(),
            target,
        )?
    };
    let stages = super::sort::bitonic_stages(p);
    let bound = target.max_invocation_iterations;
    // Few enough windows: the whole network in one workgroup, one launch instead of one per
    // stage (45 for 512 windows, each a dispatch and a pipeline barrier).
    let one = one_workgroup_sort(&format!("{name}_sort"), f, defs, keys, p, target, inline)?;
    let bitonic = std::env::var("WGPU_HLO_SCATTER_SORT").is_ok_and(|v| v.trim() == "bitonic");
    // The sort's kernels, launches and added temporaries (numbered from `base`): the
    // one-workgroup sort, else a radix sort, else a bitonic pass per stage.
    let sorter = |base: usize, payload: bool| -> Result<SortParts> {
        if let Some(sort) = &one {
            return Ok((
                vec![sort.clone()],
                vec![super::Launch::new(0, Vec::new())],
                Vec::new(),
                None,
            ));
        }
        if !bitonic {
            let key = |em: &mut ExprEmitter, s: &str| keys.key(em, s);
            // The payload: the bits of window `s`'s one update element.
            let item = |em: &mut ExprEmitter, s: &str| -> Result<String> {
                let si = em.multi(&Index::Linear(s.to_string()), keys.scatter_sizes);
                let v = em.value(op.operands[2], &Index::Multi(si))?;
                Ok(format!("bitcast<u32>({v})"))
            };
            let what = if payload {
                "scatter updates"
            } else {
                "scatter windows"
            };
            let sorted = super::radix::sort(
                name,
                f,
                defs,
                inline,
                super::radix::Keys::Ranged {
                    key: &key,
                    limit,
                    items: if payload { Some(&item) } else { None },
                },
                count as u64,
                &perm_type,
                base,
                (what, "stablehlo.scatter"),
                target,
            )?;
            if let Some(r) = sorted {
                return Ok((r.kernels, r.launches, r.temps, Some(r.keys)));
            }
        }
        let (kernels, launches) = sort_launches(None, init.clone(), pass.clone(), &stages);
        Ok((kernels, launches, Vec::new(), None))
    };
    let payload = carries_updates(f, op, &bounds) && one.is_none();
    let (mut kernels, mut launches, extra, sorted_keys) = sorter(1, payload)?;
    let partials = 1 + extra.len();
    if let Some((runs, more)) = runs_in_place(
        &format!("{name}_runs"),
        f,
        defs,
        op,
        (keys, sorted_keys),
        (partials, payload && sorted_keys.is_some()),
        (target, inline),
    )? {
        // The chunks' partials (if any) fresh, then the runs folded into the input.
        let last = runs.len() - 1;
        for (i, run) in runs.into_iter().enumerate() {
            launches.push(if i == last {
                super::Launch::updating_value(kernels.len(), Vec::new(), op.operands[0])
            } else {
                super::Launch::new(kernels.len(), Vec::new())
            });
            kernels.push(run);
        }
        return Ok(Some(super::Plan {
            kernels,
            temps: [vec![perm_type.clone()], extra, more].concat(),
            launches,
        }));
    }
    if bounds.len() > 1 {
        return Ok(None);
    }
    let scatter = emit_with(name, f, defs, op, (target, inline), true, None)?;
    let then_scatter = |scatter: Kernel| -> Result<super::Plan> {
        let (mut kernels, mut launches, extra, _) = sorter(1, false)?;
        launches.push(super::Launch::new(kernels.len(), Vec::new()));
        kernels.push(scatter);
        Ok(super::Plan {
            kernels,
            temps: [vec![perm_type.clone()], extra].concat(),
            launches,
        })
    };
    if scatter.iterations <= bound {
        return then_scatter(scatter).map(Some);
    }
    // Too many windows for one invocation: split each element's run into chunks when the
    // updates add (0 is an identity); anything else keeps the kernel the driver refuses.
    let Some(types) = adds(f, op) else {
        return then_scatter(scatter).map(Some);
    };
    let total = scatter
        .outputs
        .first()
        .map_or(0, |o| o.ty.num_elements() as u64);
    let count = count as u64;
    let mut chunk = count.div_ceil(scatter.iterations.div_ceil(bound).max(2));
    while chunk >= 1 {
        let chunks = count.div_ceil(chunk);
        let split = Split {
            chunks,
            chunk,
            partials: scatter
                .outputs
                .iter()
                .enumerate()
                .map(|(i, o)| partials::binding(1 + i, o.ty.dtype, total * chunks))
                .collect(),
        };
        let first = emit_with(
            &format!("{name}_partials"),
            f,
            defs,
            op,
            (target, inline),
            true,
            Some(&split),
        )?;
        if first.iterations <= bound {
            let k = types.len();
            let add = move |acc: &[String], vals: &[String]| {
                acc.iter()
                    .zip(vals)
                    .take(k)
                    .map(|(a, v)| format!("{a} = {a} + {v};"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let fold = partials::fold_after(
                vec![perm_type.clone()],
                name,
                first,
                split.partials,
                (total, chunks),
                scatter.outputs.clone(),
                &types,
                "",
                &add,
                true,
                target,
            )?;
            // The sort's launches, then the partials and folds.
            let (mut kernels, mut launches, extra, _) = sorter(fold.temps.len(), false)?;
            let shift = kernels.len();
            launches.extend(
                fold.launches
                    .into_iter()
                    .map(|l| super::Launch::new(l.kernel + shift, l.params)),
            );
            kernels.extend(fold.kernels);
            return Ok(Some(super::Plan {
                kernels,
                temps: [fold.temps, extra].concat(),
                launches,
            }));
        }
        chunk /= 2;
    }
    then_scatter(scatter).map(Some)
}

/// Most elements of the partial results a [`privatized`] scatter-add keeps (16 MiB of 32-bit
/// words).
const PRIVATE_MAX: u64 = 1 << 22;

/// Fewest chunks (invocations) a [`privatized`] scatter-add runs in: fewer would leave a CPU's
/// cores and SIMD lanes idle.
const PRIVATE_MIN_CHUNKS: u64 = 64;

/// A scatter of many update windows into a small result on a CPU adapter, without sorting,
/// when its update computation is one add, maximum or minimum (or an integer multiply): the
/// windows are cut into `chunks` consecutive chunks, invocation `c` folds the updates of chunk
/// `c`, in order, into its own copy of the result filled with the computation's identity
/// (`partial[c]`, which stays in the core's cache), and each result element then folds its
/// input value and the chunks' partials, in chunk order. Three launches, work in proportion to
/// the updates plus `chunks` times the result; deterministic (no atomics). Float sums
/// associate by chunk as in the sorted path's chunked folds; the other computations give the
/// plain kernel's result bit for bit in any grouping ([`private_monoid`]). `jax.ops.segment_sum`
/// of 1M values into 1000 segments on lavapipe took 105 ms sorted (3 radix passes and the
/// folds); see the commit for its time. `jax.ops.segment_max` of the same took 20 ms bucketed
/// and walked by blocks ([`swept`]), and an int32 `segment_min` 13 ms with atomics (every
/// invocation contending for 1000 words).
///
/// `None` (the sorted path serves) on GPUs, for other update computations, other than 32-bit
/// unpacked results, updates fewer than 256 times the result (few chunks, or filling copies
/// costing more than the updates: a scatter-add of 1M values at random indices into 1M), or
/// partials past [`PRIVATE_MAX`]. `WGPU_HLO_SCATTER_PRIVATE=0` turns it off.
fn privatized(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    keys: WindowKeys,
    target: Target,
    inline: Inline,
) -> Result<Option<super::Plan>> {
    let Some(OneInput {
        dn,
        x,
        indices,
        updates,
        result,
        body,
        xt,
        ut,
    }) = one_input(f, op)
    else {
        return Ok(None);
    };
    use crate::ir::ElementType as E;
    if !target.cpu_adapter
        || std::env::var("WGPU_HLO_SCATTER_PRIVATE").is_ok_and(|v| v.trim() == "0")
        || !matches!(xt.dtype, E::F32 | E::I32 | E::U32)
        || !private_monoid(body, xt.dtype)
        || !xt.is_static()
        || !ut.is_static()
    {
        return Ok(None);
    }
    let Some(identity) = monoid_identity(f, op, target) else {
        return Ok(None);
    };
    let rdims = xt.dims();
    let r = xt.num_elements() as u64;
    let windows = Windows::new(dn, &ut.dims())?;
    let (window_sizes, w) = (&windows.window_sizes, windows.w);
    let count = keys.count() as u64;
    let bound = target.max_invocation_iterations;
    if r == 0 || w == 0 || count == 0 || w > bound {
        return Ok(None);
    }
    // Zeroing the partials should cost at most a quarter of the updates; no chunk may loop
    // past the bound.
    let updates_total = count.saturating_mul(w);
    let chunks = (updates_total / (4 * r))
        .max(updates_total.div_ceil(bound))
        .min(count);
    if chunks < PRIVATE_MIN_CHUNKS || chunks.saturating_mul(r) > PRIVATE_MAX {
        return Ok(None);
    }
    let grouped = private_groups(f, indices, dn, w, count);
    let per = count.div_ceil(chunks);
    let per = if grouped {
        per.next_multiple_of(4)
    } else {
        per
    };
    let chunks = count.div_ceil(per);
    let dtype = xt.dtype;
    let partial_len = (chunks * r).next_multiple_of(4);
    let partial_type = crate::ir::TensorType::new(vec![partial_len as i64], dtype);
    let partial = Binding {
        value: super::temp(0),
        ty: partial_type.clone(),
    };
    let elem = crate::codegen::dtype::storage_elem(dtype);
    let fuses = "\nfuses: stablehlo.scatter";

    // The update computation as a function (`k_update(current, update)`), for the chunks'
    // folds and the final one.
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v) || inline(v);
    let emitter = || -> Result<(ExprEmitter, String)> {
        let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
        let t = em.compute(dtype)?;
        let func = emit_body_function(&mut em, "k_update", body, &[t])?;
        Ok((em, func))
    };

    // The identity, four words an invocation (a vec4 store each: llvmpipe stores scalars lane
    // by lane).
    let zero = {
        use crate::codegen::kernel as k;
        let kname = format!("{name}_zero");
        let comment = format!(
            "kernel {kname}: fills {chunks} partial results of {r} elements with the update computation's identity ({identity}){fuses}"
        );
        let threads = partial_len / 4;
        let wg = k::WORKGROUP;
        let main = format!(
            "{}{}    if (tid >= {threads}u) {{ return; }}\n    out0[tid] = vec4<{elem}>({identity});\n}}\n",
            k::entry_header(wg),
            k::thread_index(wg)
        );
        let outputs = vec![partial.clone()];
        let wgsl = k::module_text(&comment, &[], &outputs, &Default::default(), &main)?;
        let decl = format!("var<storage, read_write> out0: array<{elem}>;");
        if !wgsl.contains(&decl) {
            return Err(Error::internal(format!("{kname}: no declaration of out0")));
        }
        let wgsl = wgsl.replacen(
            &decl,
            &format!("var<storage, read_write> out0: array<vec4<{elem}>>;"),
            1,
        );
        k::validate(&kname, &wgsl, target.caps)?;
        Kernel {
            name: kname,
            wgsl,
            inputs: Vec::new(),
            outputs,
            workgroups: k::grid(threads.div_ceil(u64::from(wg)), target.max_workgroups)?,
            iterations: 0,
            texture_inputs: Vec::new(),
            state_textures: Vec::new(),
            scratch_textures: Vec::new(),
            parted: Vec::new(),
        }
    };

    // Chunk `tid`'s windows folded into its partial, in order.
    let accumulate = {
        let (mut em, func) = emitter()?;
        em.line(&format!("let base = tid * {r}u;"));
        em.line(&format!("let last = min(tid * {per}u + {per}u, {count}u);"));
        if grouped {
            private_quads(
                &mut em,
                dn,
                (indices, updates),
                keys.ic,
                &rdims,
                window_sizes,
                per,
            )?;
        } else {
            em.open_loop(
                &format!("for (var s: u32 = tid * {per}u; s < last; s = s + 1u)"),
                per,
            );
            let si = em.multi(&Index::Linear("s".into()), keys.scatter_sizes);
            let start = window_starts(&mut em, dn, indices, &si, rdims.len(), keys.ic, "st")?;
            let (conds, _) = window_place(dn, &start, &rdims, window_sizes, &[]);
            em.open(&format!("if ({})", all_of(&conds)));
            if w > 1 {
                em.open_loop(&format!("for (var e: u32 = 0u; e < {w}u; e = e + 1u)"), w);
            } else {
                em.line("let e = 0u;");
            }
            let wi = em.multi(&Index::Linear("e".into()), window_sizes);
            let (_, pos) = window_place(dn, &start, &rdims, window_sizes, &wi);
            let at = crate::codegen::expr::linearize(&pos, &rdims);
            let u = em.value(updates, &Index::Multi(windows.update_at(&si, &wi)))?;
            em.line(&format!("let at = base + {at};"));
            em.line(&fold_at(&u));
            if w > 1 {
                em.close(None);
            }
            em.close(None);
            em.close(None);
        }
        let kname = format!("{name}_private");
        let how = if grouped {
            ", indices and updates read four at a time"
        } else {
            ""
        };
        let comment = format!(
            "kernel {kname}: each of {chunks} chunks of {per} of {count} update windows of {w} elements folded, in order, into its own partial result of {r} elements{how}{fuses}"
        );
        crate::codegen::kernel::threaded(
            &kname,
            &comment,
            em.inputs.clone(),
            vec![partial.clone()],
            &em.needs,
            &func,
            &em.body,
            chunks,
            em.iterations(),
            target,
        )?
    };

    // Each result element: its input value, then the chunks' partials in order.
    let fold = {
        let (mut em, func) = emitter()?;
        em.inputs.push(partial.clone());
        em.line("var acc = out0[tid];");
        em.open_loop(
            &format!("for (var c: u32 = 0u; c < {chunks}u; c = c + 1u)"),
            chunks,
        );
        let index = em.inputs.len() - 1;
        em.line(&combine(
            "k_update",
            1,
            &["acc".to_string()],
            &[format!("in{index}[c * {r}u + tid]")],
        ));
        em.close(None);
        em.line("out0[tid] = acc;");
        let kname = format!("{name}_fold");
        let comment = format!(
            "kernel {kname}: scatter into {xt} in place: each element's input value and {chunks} partial results folded, in order{fuses}"
        );
        crate::codegen::kernel::threaded(
            &kname,
            &comment,
            em.inputs.clone(),
            vec![Binding {
                value: result,
                ty: xt.clone(),
            }],
            &em.needs,
            &func,
            &em.body,
            r,
            em.iterations(),
            target,
        )?
    };
    if [&zero, &accumulate, &fold]
        .iter()
        .any(|k| k.iterations > bound)
    {
        return Ok(None);
    }
    Ok(Some(super::Plan {
        kernels: vec![zero, accumulate, fold],
        temps: vec![partial_type],
        launches: vec![
            super::Launch::new(0, Vec::new()),
            super::Launch::updating_value(1, Vec::new(), super::temp(0)),
            super::Launch::updating_value(2, Vec::new(), x),
        ],
    }))
}

/// The statement folding update `u` into the partial's element `at` with the update
/// computation's function (`k_update`, [`privatized`]).
fn fold_at(u: &str) -> String {
    combine("k_update", 1, &["out0[at]".to_string()], &[u.to_string()])
}

/// Whether a [`privatized`] scatter may group the update computation `body`'s folds by
/// chunks: one add (integer sums wrap exactly; float sums reassociate by chunk, as the sorted
/// path's chunked folds do), an integer multiply (wrapping: exact in any grouping), or a
/// maximum or minimum. These give the plain kernel's result bit for bit in any grouping: over
/// integers they are associative and commutative; over floats `wh_max_f32`/`wh_min_f32` are
/// IEEE's, which order -0 below +0 and give equal values' one bit pattern, and of two NaNs
/// return the first operand, so a chunk keeps the first (or, with the update first, the last)
/// NaN of its windows in the order the computation names, and the chunk-ordered final fold
/// keeps the same NaN the plain kernel's one pass does. A float multiply would round
/// differently by chunk: it is left to the sorted path.
fn private_monoid(body: &crate::ir::Region, dtype: crate::ir::ElementType) -> bool {
    use crate::ir::BinaryOp as B;
    match update_computation(body) {
        Some(Update::Binary(B::Add | B::Maximum | B::Minimum, _)) => true,
        Some(Update::Binary(B::Multiply, _)) => !dtype.is_float(),
        _ => false,
    }
}

/// Whether a [`privatized`] scatter-add's chunks read their windows' indices and updates in
/// groups of four ([`private_quads`]): windows of one element (`w`), indices of one component
/// per window (`count` of them), so that window `s`'s index and update are element `s` of
/// their tensors, and `WGPU_HLO_SCATTER_QUADS=0` not set.
fn private_groups(
    f: &Function,
    indices: ValueId,
    dn: &crate::ir::attr::ScatterDimensionNumbers,
    w: u64,
    count: u64,
) -> bool {
    let one_component =
        matches!(f.ty(indices), crate::ir::Type::Tensor(t) if t.num_elements() as u64 == count);
    w == 1
        && dn.scatter_dims_to_operand_dims.len() == 1
        && one_component
        && !crate::fusion::switched_off("WGPU_HLO_SCATTER_QUADS")
}

/// The loop of a [`privatized`] scatter-add's chunk (`per` windows, a multiple of 4, from
/// `tid * per`, up to `last`) over windows of one element ([`private_groups`]), four windows
/// a trip: their indices and updates are loaded as one group of four each, marked
/// [`crate::codegen::texture_reads::QUAD_MARK`], so that on CPU adapters they come through a
/// texture even where scatters otherwise keep their buffers (Intel hosts), one texel fetch for four elements
/// instead of four lane-by-lane storage loads; then each window, in order, is added into the
/// chunk's partial (`out0` from `base`) where it fits. A group's last loads may read past the
/// chunk (its values unused) but not past the tensor's buffer, which holds whole groups of
/// four words.
fn private_quads(
    em: &mut ExprEmitter,
    dn: &crate::ir::attr::ScatterDimensionNumbers,
    (indices, updates): (ValueId, ValueId),
    ic: Compute,
    rdims: &[usize],
    window_sizes: &[usize],
    per: u64,
) -> Result<()> {
    let names: Vec<String> = (0..4)
        .map(|q| {
            if q == 0 {
                "s".to_string()
            } else {
                format!("s_{q}")
            }
        })
        .collect();
    em.quads = Some(crate::codegen::expr::Quads {
        positions: names
            .iter()
            .enumerate()
            .map(|(q, n)| (n.clone(), (names[0].clone(), q)))
            .collect(),
        ..Default::default()
    });
    em.line("let e = 0u;");
    let wi = em.multi(&Index::Linear("e".into()), window_sizes);
    em.open_loop(
        &format!("for (var s: u32 = tid * {per}u; s < last; s = s + 4u)"),
        per / 4,
    );
    let mut windows = Vec::new();
    for (q, s) in names.iter().enumerate() {
        if q > 0 {
            em.line(&format!("let {s} = s + {q}u;"));
        }
        let index = em.value(indices, &Index::Linear(s.clone()))?;
        let start_name = format!("st{q}");
        em.line(&format!(
            "let {start_name}: i32 = {};",
            index_i32(&index, ic)?
        ));
        let u = em.value(updates, &Index::Linear(s.clone()))?;
        windows.push((s.clone(), start_name, u));
    }
    for (s, start_name, u) in windows {
        let mut start = vec!["0i".to_string(); rdims.len()];
        if let Some(slot) = dn
            .scatter_dims_to_operand_dims
            .first()
            .and_then(|&d| start.get_mut(d as usize))
        {
            *slot = start_name;
        }
        let (mut conds, _) = window_place(dn, &start, rdims, window_sizes, &[]);
        conds.insert(0, format!("{s} < last"));
        let (_, pos) = window_place(dn, &start, rdims, window_sizes, &wi);
        let at = crate::codegen::expr::linearize(&pos, rdims);
        em.open(&format!("if ({})", all_of(&conds)));
        em.line(&format!("let at = base + {at};"));
        em.line(&fold_at(&u));
        em.close(None);
    }
    em.close(None);
    em.quads = None;
    Ok(())
}

/// Fewest invocations a [`swept`] scatter gives each core of a CPU adapter (two SIMD groups of
/// 8 lanes: llvmpipe runs 8 invocations of a workgroup as one vector).
const SWEEP_LANES_PER_CORE: u64 = 16;

/// Invocations per workgroup of a [`swept`] scatter: one SIMD group, so that consecutive
/// blocks of the result spread over the cores (llvmpipe gives each workgroup to one thread).
const SWEEP_WORKGROUP: u64 = 8;

/// Blocks of a [`swept`] scatter whose windows are bucketed first: one radix pass (keys
/// `0..=BUCKETED_BLOCKS + 1`, 16 digits).
const BUCKETED_BLOCKS: u64 = 14;

/// A scatter on a CPU adapter by blocks of the result: the points the indices place windows
/// at (`[0, limit)`) are cut into ranges (blocks); invocation `t` owns window element `t % W`
/// of the windows landing in block `t / W` and folds them, in update order, into the result in
/// place. Each result element is written by one invocation only, in update order, so the
/// result is the plain kernel's for any update computation, with no atomics; launches of at
/// most the loop bound each walk the windows, all updating the result in place.
///
/// - Windows of 8 elements or more: no sort. Enough blocks for [`SWEEP_LANES_PER_CORE`]
///   invocations a core, each walking every window (the lanes of a SIMD group, one block,
///   read the same index and update neighbouring elements).
/// - Narrower windows: a lane per block would read every index to update one element in
///   eight, so the windows are first bucketed by block (one stable counting pass, `radix::bucket`,
///   [`BUCKETED_BLOCKS`] blocks) and each invocation walks only its own bucket.
///
/// A scatter-add of 1M values at random places into 1M (lavapipe) took 127 ms sorted: six
/// radix passes over the windows before the runs were folded.
///
/// The bucketed walk of that scatter (14 invocations, 31 launches, 19-22 ms of ~40 on the AMD
/// EPYC host of 2026-12-06) costs its read-modify-writes at random places of each block, not
/// its reads or its launches. Tried and dropped, dumped device times: the placement writing
/// each window's index and update in bucket order, so that the walk reads them in order (walk
/// 21 -> 19 ms, placement 8 -> 13 ms); four windows a loop trip, so that a launch walks four
/// times as many (31 launches -> 7, the walk's time unchanged).
///
/// `None` (the sorted paths serve) on GPUs (a handful of invocations each walking many
/// windows would leave the device idle), for several inputs, packed (narrower than 32-bit)
/// results, or with `Target::scatter_sweep` off (`WGPU_HLO_SCATTER_SWEEP=0`).
fn swept(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    keys: WindowKeys,
    limit: u64,
    (target, inline): (Target, Inline),
) -> Result<Option<super::Plan>> {
    let Some(OneInput {
        dn,
        x,
        indices,
        updates,
        result,
        body,
        xt,
        ut,
    }) = one_input(f, op)
    else {
        return Ok(None);
    };
    if !target.cpu_adapter
        || !target.scatter_sweep
        || !xt.is_static()
        || !ut.is_static()
        || xt.dtype.byte_size() < 4
        || xt.dtype == crate::ir::ElementType::Pred
    {
        return Ok(None);
    }
    let rdims = xt.dims();
    let windows = Windows::new(dn, &ut.dims())?;
    let (window_sizes, w) = (&windows.window_sizes, windows.w);
    let count = keys.count() as u64;
    let bound = target.max_invocation_iterations;
    if w == 0 || count == 0 || limit == 0 || limit > i32::MAX as u64 || count >= u32::MAX as u64 {
        return Ok(None);
    }
    let bucketed = w < SWEEP_WORKGROUP;
    // Few narrow windows: the one-workgroup sort and the runs' fold take two launches, the
    // bucketing pass and the walk four.
    if bucketed && count <= ONE_WORKGROUP_SORT_MAX {
        return Ok(None);
    }
    let blocks = if bucketed {
        BUCKETED_BLOCKS
    } else {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
        (SWEEP_LANES_PER_CORE * cores.clamp(1, 64)).div_ceil(w)
    };
    let per = limit.div_ceil(blocks.clamp(1, limit));
    let blocks = limit.div_ceil(per);
    let threads = blocks * w;

    // The bucketing sort (bucketed only): window numbers by block, stable, in temporary 0 (the
    // result's copy the launches update follows its temporaries).
    let perm_type = crate::ir::TensorType::new(
        vec![count.next_power_of_two() as i64],
        crate::ir::ElementType::U32,
    );
    let sort = if bucketed {
        let block_key = |em: &mut ExprEmitter, s: &str| -> Result<String> {
            let k = keys.key(em, s)?;
            em.line(&format!("let kb_{s}: i32 = {k};"));
            Ok(format!("select(-1i, kb_{s} / {per}i, kb_{s} >= 0i)"))
        };
        match super::radix::bucket(
            name,
            f,
            defs,
            inline,
            (&block_key, blocks),
            count,
            &perm_type,
            1,
            ("scatter windows by block", "stablehlo.scatter"),
            target,
        )? {
            Some(sorted) => Some(sorted),
            None => return Ok(None),
        }
    } else {
        None
    };

    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let fused = |v: ValueId| body_vals.contains(&v) || inline(v);
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    em.inputs.push(Binding {
        value: super::PARAMS,
        ty: crate::ir::TensorType::new(vec![1], crate::ir::ElementType::U32),
    });
    let t = em.compute(xt.dtype)?;
    let func = emit_body_function(&mut em, "k_update", body, &[t])?;
    em.line(&format!("let e = tid % {w}u;"));
    em.line(&format!("let b = tid / {w}u;"));
    let wi = em.multi(&Index::Linear("e".into()), window_sizes);
    // The windows this launch walks: positions [first, last) of the sorted windows (the
    // block's bucket), or of all windows.
    let chunk = match &sort {
        Some(sorted) => {
            em.inputs.push(Binding {
                value: super::temp(0),
                ty: perm_type.clone(),
            });
            let tiles = sorted.tiles;
            em.inputs.push(Binding {
                value: sorted.offsets,
                ty: crate::ir::TensorType::new(
                    vec![(tiles * 16) as i64],
                    crate::ir::ElementType::U32,
                ),
            });
            // The bucket: block b's windows have key b + 1 (radix::bucket), and the digit-major
            // offsets say where each key's windows start.
            em.line(&format!("let start_lo = in2[(b + 1u) * {tiles}u];"));
            em.line(&format!("let end_lo = in2[(b + 2u) * {tiles}u];"));
            let chunk = bound.saturating_sub(em.iterations()).max(1);
            em.line(&format!("let first = start_lo + in0[0] * {chunk}u;"));
            em.line(&format!("let last = min(first + {chunk}u, end_lo);"));
            em.open_loop("for (var q: u32 = first; q < last; q = q + 1u)", chunk);
            em.line("let s = in1[q];");
            chunk
        }
        None => {
            let chunk = count.min(bound);
            em.line(&format!("let first = in0[0] * {chunk}u;"));
            em.line(&format!("let last = min(first + {chunk}u, {count}u);"));
            em.open_loop("for (var s: u32 = first; s < last; s = s + 1u)", chunk);
            let key = keys.key(&mut em, "s")?;
            em.line(&format!("let key: i32 = {key};"));
            em.open(&format!(
                "if (key >= i32(b) * {per}i && key < i32(b + 1u) * {per}i)"
            ));
            chunk
        }
    };
    let si = em.multi(&Index::Linear("s".into()), keys.scatter_sizes);
    let start = window_starts(&mut em, dn, indices, &si, rdims.len(), keys.ic, "st")?;
    let (fits, pos) = window_place(dn, &start, &rdims, window_sizes, &wi);
    em.open(&format!("if ({})", all_of(&fits)));
    let at = crate::codegen::expr::linearize(&pos, &rdims);
    em.line(&format!("let at = {at};"));
    let u = em.value(updates, &Index::Multi(windows.update_at(&si, &wi)))?;
    em.line(&format!("var acc: {} = out0[at];", t.wgsl()));
    em.line(&combine("k_update", 1, &["acc".to_string()], &[u]));
    em.line("out0[at] = acc;");
    em.close(None);
    if sort.is_none() {
        em.close(None);
    }
    em.close(None);
    let iterations = em.iterations();
    if iterations > bound {
        return Ok(None);
    }
    let walks = count.div_ceil(chunk);
    let source = format!(
        "{func}{}{}    if (tid >= {threads}u) {{ return; }}\n{}}}\n",
        crate::codegen::kernel::entry_header(SWEEP_WORKGROUP as u32),
        crate::codegen::kernel::thread_index(SWEEP_WORKGROUP as u32),
        em.body
    );
    let how = if sort.is_some() {
        "walks its block's windows, bucketed by a radix pass, in order"
    } else {
        "walks every window in order and folds those landing in its block"
    };
    // The walk writing the result (the last launch) or the copy of the input that the
    // launches before it update (temporary `copy`).
    let (mut kernels, mut launches, mut temps) = match sort {
        Some(sorted) => (
            sorted.kernels,
            sorted.launches,
            [vec![perm_type], sorted.temps].concat(),
        ),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    let copy = temps.len();
    let walk = |kname: &str, out: ValueId| -> Result<Kernel> {
        let comment = format!(
            "kernel {kname}: scatter of {count} update windows of {w} elements in place into {xt}, by {blocks} blocks of {per} places, {chunk} windows per launch (the launch's number in the parameters): each invocation {how}\nloop iterations per invocation: at most {iterations}\nfuses: stablehlo.scatter"
        );
        crate::codegen::kernel::in_workgroups(
            kname,
            &comment,
            em.inputs.clone(),
            vec![Binding {
                value: out,
                ty: xt.clone(),
            }],
            &em.needs,
            &source,
            threads.div_ceil(SWEEP_WORKGROUP),
            iterations,
            target,
        )
    };
    let last = kernels.len();
    kernels.push(walk(name, result)?);
    if walks == 1 {
        launches.push(super::Launch::updating_value(last, vec![0], x));
    } else {
        kernels.push(walk(&format!("{name}_walk"), super::temp(copy))?);
        temps.push(xt.clone());
        launches.push(super::Launch::updating_value(last + 1, vec![0], x));
        for j in 1..walks {
            let k = if j + 1 == walks { last } else { last + 1 };
            launches.push(super::Launch::updating(k, vec![j as u32], copy));
        }
    }
    Ok(Some(super::Plan {
        kernels,
        temps,
        launches,
    }))
}

/// A sort's kernels, launches and the temporaries it adds.
type SortParts = (
    Vec<Kernel>,
    Vec<super::Launch>,
    Vec<crate::ir::TensorType>,
    Option<ValueId>,
);

/// The kernels and launches that sort the windows: the one-workgroup sort when there is one,
/// else the identity permutation and one pass per bitonic stage.
fn sort_launches(
    one: Option<Kernel>,
    init: Kernel,
    pass: Kernel,
    stages: &[(u32, u32)],
) -> (Vec<Kernel>, Vec<super::Launch>) {
    match one {
        Some(sort) => (vec![sort], vec![super::Launch::new(0, Vec::new())]),
        None => {
            let mut launches = vec![super::Launch::new(0, Vec::new())];
            launches.extend(
                stages
                    .iter()
                    .map(|&(k, j)| super::Launch::new(1, vec![k, j])),
            );
            (vec![init, pass], launches)
        }
    }
}

/// Sorted positions per chunk of a long scatter-add folded in place ([`runs_in_place`]).
fn run_chunk(count: u64) -> u64 {
    let mut c = 1024;
    while c * c < count {
        c *= 2;
    }
    c
}

/// The last stage of a sorted scatter that updates its input in place, or `None` where it
/// cannot: more than one input, or elements narrower than 32 bits (packed, so two windows
/// could share a word). Invocation `t` takes window element `t % W` of sorted window `t / W`;
/// the first window of each run of equal indices folds the whole run into its element, in the
/// original order (the sort is stable), and the others do nothing. Windows with different
/// indices are disjoint (the index places them in an inserted dimension), so no two
/// invocations write one element. Work: the update elements, not the result's: the gradient
/// of a 64-token lookup in a 50257 x 768 table searched every one of its 38.6M elements
/// (0.56 s on lavapipe).
///
/// Runs may be as long as all the windows. Past the loop bound, scatters that add fold by
/// chunks of sorted positions ([`run_chunk`]): a first kernel sums, for each chunk that
/// continues the run before it, that run's windows within the chunk into a partial (temporary
/// `partials`); the run's first window then folds its windows up to the chunk's end and the
/// partials of the chunks the run goes on through, in order. Other combiners and types
/// (other than 32-bit) keep `None`.
/// Returns the kernels, in launch order, and the temporaries they add.
fn runs_in_place(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    (keys, sorted_keys): (WindowKeys, Option<ValueId>),
    (partials, payload): (usize, bool),
    (target, inline): (Target, Inline),
) -> Result<Option<(Vec<Kernel>, Vec<crate::ir::TensorType>)>> {
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return Ok(None);
    };
    let ([x, indices, updates], [result], Some(body)) = (
        op.operands.as_slice(),
        op.results.as_slice(),
        op.regions.first(),
    ) else {
        return Ok(None);
    };
    let (Some(xt), Some(ut)) = (f.ty(*x).as_tensor(), f.ty(*updates).as_tensor()) else {
        return Ok(None);
    };
    let count = keys.count() as u64;
    // An update computation that returns the update (`x.at[i].set(v)`): the last window of
    // each run is its result, with no walk, so no run is too long.
    let overwrite = overwrites(op);
    let long = count > target.max_invocation_iterations && !overwrite;
    if !xt.is_static()
        || !ut.is_static()
        || xt.dtype.byte_size() < 4
        || xt.dtype == crate::ir::ElementType::Pred
        || count == 0
        || (long && monoid_identity(f, op, target).is_none())
        || std::env::var("WGPU_HLO_SCATTER_IN_PLACE").is_ok_and(|v| v.trim() == "0")
    {
        return Ok(None);
    }
    let chunk = if long { run_chunk(count) } else { count };
    let chunks = count.div_ceil(chunk);
    let mut all_defs = defs.clone();
    let mut body_vals = HashSet::new();
    region_defs(body, &mut all_defs, &mut body_vals);
    let rdims = xt.dims();
    let windows = Windows::new(dn, &ut.dims())?;
    let (window_sizes, w) = (&windows.window_sizes, windows.w);
    let perm = Binding {
        value: super::temp(0),
        ty: crate::ir::TensorType::new(
            vec![count.next_power_of_two() as i64],
            crate::ir::ElementType::U32,
        ),
    };
    let partial_type = crate::ir::TensorType::new(vec![(chunks * w) as i64], xt.dtype);
    let partial = Binding {
        value: super::temp(partials),
        ty: partial_type.clone(),
    };
    // The emitter of one kernel, with the permutation as `in0` (and the partials as `in1`),
    // the update computation as `k_update`, and `e` the window element: its compute type,
    // the function's text and the window element's coordinates.
    let fused = |v: ValueId| body_vals.contains(&v) || inline(v);
    // With the sort's keys in sorted order (`sorted_keys`), the runs are found in them, read
    // in order, instead of by each window's index read through the permutation.
    let keys_binding = sorted_keys.map(|value| Binding {
        value,
        ty: crate::ir::TensorType::new(vec![count as i64], crate::ir::ElementType::U32),
    });
    // Returns the compute type, the function's text, the window element's coordinates and
    // the WGSL name of the sorted keys' binding (when there is one).
    #[allow(clippy::type_complexity)]
    let setup = |em: &mut ExprEmitter,
                 with_partials: bool|
     -> Result<(Compute, String, Vec<String>, Option<String>)> {
        em.inputs.push(perm.clone());
        if with_partials {
            em.inputs.push(partial.clone());
        }
        let kn = keys_binding.as_ref().map(|b| {
            em.inputs.push(b.clone());
            format!("in{}", em.inputs.len() - 1)
        });
        let t = em.compute(xt.dtype)?;
        let func = emit_body_function(em, "k_update", body, &[t])?;
        em.line(&format!("let e = tid % {w}u;"));
        let wi = em.multi(&Index::Linear("e".into()), window_sizes);
        Ok((t, func, wi, kn))
    };
    // The key of sorted position `pos` (WGSL), the window number there named `var`; and the
    // type of the `key` variable it is compared with.
    let key_at = |em: &mut ExprEmitter, kn: &Option<String>, pos: &str, var: &str| {
        em.line(&format!("let {var} = in0[{pos}];"));
        match kn {
            Some(k) => Ok(format!("{k}[{pos}]")),
            None => keys.key(em, var),
        }
    };
    let key_type = if sorted_keys.is_some() { "u32" } else { "i32" };
    // Folds update window `sq` (a WGSL name), element `e`, into `acc`.
    let fold = |em: &mut ExprEmitter, wi: &[String]| -> Result<()> {
        if payload {
            // The sort carried the update's bits.
            let t = em.compute(xt.dtype)?;
            let u = format!("bitcast<{}>(sq)", t.wgsl());
            em.line(&combine("k_update", 1, &["acc".to_string()], &[u]));
            return Ok(());
        }
        let sq = em.multi(&Index::Linear("sq".into()), keys.scatter_sizes);
        let u = em.value(*updates, &Index::Multi(windows.update_at(&sq, wi)))?;
        em.line(&combine("k_update", 1, &["acc".to_string()], &[u]));
        Ok(())
    };
    // Folds the windows from sorted position `p` up to `end` while their key is `key`.
    let walk =
        |em: &mut ExprEmitter, kn: &Option<String>, end: &str, wi: &[String]| -> Result<()> {
            em.open_loop(
                &format!("for (var q: u32 = p; q < {end}; q = q + 1u)"),
                chunk,
            );
            let kq = key_at(em, kn, "q", "sq")?;
            em.line(&format!("if ({kq} != key) {{ break; }}"));
            fold(em, wi)?;
            em.close(None);
            Ok(())
        };
    let mut kernels = Vec::new();
    if long {
        // The partial of each chunk that continues a run: its windows of that run.
        let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
        let (t, func, wi, kn) = setup(&mut em, false)?;
        em.line(&format!("let c = tid / {w}u;"));
        em.line(&format!("let p = c * {chunk}u;"));
        let identity = monoid_identity(f, op, target).unwrap_or_else(|| format!("{}(0)", t.wgsl()));
        em.line(&format!("var acc: {} = {identity};", t.wgsl()));
        let key = key_at(&mut em, &kn, "p", "s")?;
        em.line(&format!("let key: {key_type} = {key};"));
        let before = key_at(&mut em, &kn, "max(p, 1u) - 1u", "sp")?;
        em.open(&format!("if (p > 0u && {before} == key)"));
        walk(&mut em, &kn, &format!("min(p + {chunk}u, {count}u)"), &wi)?;
        em.close(None);
        em.line("out0[tid] = acc;");
        let kname = format!("{name}_chunks");
        let comment = format!(
            "kernel {kname}: the partial sums of the runs of equal indices that go on into each chunk of {chunk} of {count} sorted scatter windows of {w} elements\nfuses: stablehlo.scatter"
        );
        kernels.push(crate::codegen::kernel::threaded(
            &kname,
            &comment,
            em.inputs.clone(),
            vec![partial.clone()],
            &em.needs,
            &func,
            &em.body,
            chunks * w,
            em.iterations(),
            target,
        )?);
    }
    let mut em = ExprEmitter::new(f, &all_defs, &fused, target.caps, target.adapter);
    let (t, func, wi, kn) = setup(&mut em, long)?;
    em.line(&format!("let p = tid / {w}u;"));
    let key = key_at(&mut em, &kn, "p", "s")?;
    em.line(&format!("let key: {key_type} = {key};"));
    let before = key_at(&mut em, &kn, "max(p, 1u) - 1u", "sp")?;
    if overwrite {
        // Only the last window of a run goes on.
        let after = key_at(&mut em, &kn, &format!("min(p + 1u, {}u)", count - 1), "sn")?;
        em.open(&format!("if (p + 1u == {count}u || {after} != key)"));
    } else {
        // Only the first window of a run goes on: where its element lands.
        em.open(&format!("if (p == 0u || {before} != key)"));
    }
    if payload {
        // One-element windows at every dimension of the result: the sorted key (the
        // element's row-major position plus 1; 0 and past the size: outside) is the place.
        em.open(&format!("if (key >= 1u && key <= {}u)", xt.num_elements()));
        em.line("let at = key - 1u;");
    } else {
        let si = em.multi(&Index::Linear("s".into()), keys.scatter_sizes);
        let start = window_starts(&mut em, dn, *indices, &si, rdims.len(), keys.ic, "st")?;
        let (fits, pos) = window_place(dn, &start, &rdims, window_sizes, &wi);
        let at = crate::codegen::expr::linearize(&pos, &rdims);
        em.open(&format!("if ({})", all_of(&fits)));
        em.line(&format!("let at = {at};"));
    }
    em.line(&format!("var acc: {} = out0[at];", t.wgsl()));
    if overwrite {
        em.line("let sq = s;");
        fold(&mut em, &wi)?;
    } else {
        walk(
            &mut em,
            &kn,
            &format!("min((p / {chunk}u + 1u) * {chunk}u, {count}u)"),
            &wi,
        )?;
    }
    if long {
        // Then the partials of the chunks the run goes on through.
        em.open_loop(
            &format!("for (var c: u32 = p / {chunk}u + 1u; c < {chunks}u; c = c + 1u)"),
            chunks,
        );
        let kq = key_at(&mut em, &kn, &format!("c * {chunk}u"), "sq")?;
        em.line(&format!("if ({kq} != key) {{ break; }}"));
        em.line(&format!("acc = k_update(acc, in1[c * {w}u + e]);"));
        em.close(None);
    }
    em.line("out0[at] = acc;");
    em.close(None);
    em.close(None);
    let outs = vec![Binding {
        value: *result,
        ty: xt.clone(),
    }];
    let comment = format!(
        "kernel {name}: scatter of {count} sorted update windows of {w} elements in place into {xt}, each run of equal indices {}{}{}\nfuses: stablehlo.scatter",
        if overwrite { "written by its last window (the update computation overwrites)" } else { "folded by its first window" },
        if payload { " (the updates sorted with their indices)" } else { "" },
        if long { format!(" (by chunks of {chunk}: its windows in its own, then the partials of the others)") } else { String::new() }
    );
    kernels.push(crate::codegen::kernel::threaded(
        name,
        &comment,
        em.inputs.clone(),
        outs,
        &em.needs,
        &func,
        &em.body,
        count * w,
        em.iterations(),
        target,
    )?);
    if kernels
        .iter()
        .any(|k| k.iterations > target.max_invocation_iterations)
    {
        return Ok(None);
    }
    let temps = if long { vec![partial_type] } else { Vec::new() };
    Ok(Some((kernels, temps)))
}

/// Whether the sort of `op`'s windows carries the updates themselves ([`runs_in_place`] then
/// reads them in sorted order instead of gathering each through the permutation, and places
/// each run by its key): one input of a 32-bit type, one-element windows placed by an index
/// vector over every dimension of the result in order (`bounds`: their sizes), so a window's
/// key is its element's row-major position. `x.at[i].add(v)` of a million values at random
/// places spent 40 ms of 120 in the two random gathers on lavapipe.
/// `WGPU_HLO_SCATTER_PAYLOAD=0` turns it off.
fn carries_updates(f: &Function, op: &Operation, bounds: &[i64]) -> bool {
    let Op::Scatter {
        dimension_numbers: dn,
        ..
    } = &op.op
    else {
        return false;
    };
    let ([x, _, u], [_]) = (op.operands.as_slice(), op.results.as_slice()) else {
        return false;
    };
    let (Some(xt), Some(ut)) = (f.ty(*x).as_tensor(), f.ty(*u).as_tensor()) else {
        return false;
    };
    let rank = xt.rank();
    !std::env::var("WGPU_HLO_SCATTER_PAYLOAD").is_ok_and(|v| v.trim() == "0")
        && matches!(
            xt.dtype,
            crate::ir::ElementType::F32 | crate::ir::ElementType::I32 | crate::ir::ElementType::U32
        )
        && ut.dtype == xt.dtype
        && xt.is_static()
        && dn.update_window_dims.is_empty()
        && dn.scatter_dims_to_operand_dims.len() == rank
        && dn
            .scatter_dims_to_operand_dims
            .iter()
            .enumerate()
            .all(|(i, &d)| d == i as i64)
        && bounds.len() == rank
        && xt.num_elements() < (u32::MAX - 2) as usize
}

/// Whether `op`'s update computation returns the update (a scatter that sets, as
/// `x.at[i].set(v)`): of the windows of one index the last in update order wins, as on cpu.
fn overwrites(op: &Operation) -> bool {
    op.results.len() == 1 && op.regions.first().and_then(update_computation) == Some(Update::Set)
}

/// The identity (a WGSL literal) of `op`'s update computation when it is one `add`,
/// `multiply`, `maximum` or `minimum` of the current value and the update, of one f32, f64,
/// i32, i64, u32 or u64 result (64-bit ones only exist where the adapter has them): runs past
/// one invocation's loop bound are then folded by chunks whose partials start from it
/// ([`runs_in_place`]). `None` otherwise. (`jax.ops.segment_max` of 100k values was refused
/// on lavapipe before: its runs could pass the bound.)
fn monoid_identity(f: &Function, op: &Operation, target: Target) -> Option<String> {
    use crate::ir::{BinaryOp, ElementType, Scalar};
    let (Some(Update::Binary(b, _)), [result]) = (
        op.regions.first().and_then(update_computation),
        op.results.as_slice(),
    ) else {
        return None;
    };
    let dtype = f.ty(*result).as_tensor()?.dtype;
    let (min, max) = match dtype {
        ElementType::F32 | ElementType::F64 => (
            Scalar::Float(f64::NEG_INFINITY),
            Scalar::Float(f64::INFINITY),
        ),
        ElementType::I32 => (Scalar::Int(i32::MIN as i128), Scalar::Int(i32::MAX as i128)),
        ElementType::I64 => (Scalar::Int(i64::MIN as i128), Scalar::Int(i64::MAX as i128)),
        ElementType::U32 => (Scalar::Int(0), Scalar::Int(u32::MAX as i128)),
        ElementType::U64 => (Scalar::Int(0), Scalar::Int(u64::MAX as i128)),
        _ => return None,
    };
    let one = |x: i128| {
        if dtype.is_float() {
            Scalar::Float(x as f64)
        } else {
            Scalar::Int(x)
        }
    };
    let value = match b {
        BinaryOp::Add => one(0),
        BinaryOp::Multiply => one(1),
        BinaryOp::Maximum => min,
        BinaryOp::Minimum => max,
        _ => return None,
    };
    let c = crate::codegen::dtype::compute_type(dtype, target.caps, target.adapter).ok()?;
    Some(crate::codegen::dtype::literal(dtype, c, value))
}

/// The compute types of `op`'s results when its update computation is one `add` of the
/// current value and the update, for results kept unpacked in their own type (so partial
/// sums fit a temporary of that type); `None` otherwise.
fn adds(f: &Function, op: &Operation) -> Option<Vec<Compute>> {
    let body = op.regions.first()?;
    let [add, ret] = body.ops.as_slice() else {
        return None;
    };
    let [a, u] = body.args.as_slice() else {
        return None;
    };
    let is_add = add.op == Op::Binary(crate::ir::BinaryOp::Add)
        && (add.operands == [*a, *u] || add.operands == [*u, *a])
        && ret.op == Op::Return
        && ret.operands == add.results
        && op.results.len() == 1;
    if !is_add {
        return None;
    }
    op.results
        .iter()
        .map(|&r| partials::unpacked(f.ty(r).as_tensor()?.dtype))
        .collect()
}
