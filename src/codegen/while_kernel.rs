//! A `while` loop run whole inside one kernel (the loops `passes::whole_loops` picks): each
//! invocation loads its element of the loop state (and the scalars, which every invocation
//! computes alike), runs the iterations in a WGSL loop — the predicate, then the body — and
//! stores the state when the predicate fails. A launch runs at most [`WhileKernel::per_launch`]
//! iterations (the per-invocation loop budget, and a bound on one launch's work): it writes a
//! flag word, 1 when it stopped there with the predicate still true, and the runtime launches
//! again from the state written (`compile::program::WhileKernelStep`).
//!
//! The kernel's bindings: the initial values of the states that change and are not updated in
//! place first (one per state, in order), then the values from outside the loop and the
//! states that do not change, which its regions read; its outputs are the results of the
//! states that change, then the flag (a `u32[1]`). A tensor state each invocation reads and
//! writes at its own elements only is updated in place (`WhileKernel::in_place`): its output
//! starts as the initial value and is read and written, one binding instead of two, and no
//! new buffer a launch. States packed several to a word (booleans, 8- and 16-bit types) are
//! carried a word's elements to an invocation, one element after the other.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::dtype;
use super::expr::{Binding, ExprEmitter, Index};
use super::kernel::{self, Kernel, WORKGROUP};
use super::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::{ElementType, Op, Operation, TensorType, ValueId};
use crate::passes::whole_loops;

/// The placeholder value of the flag binding.
pub const FLAG: ValueId = ValueId(u32::MAX - 2);

/// Bound on one launch's work: elements times ops times iterations (about 0.1 s of a 2-core
/// CPU adapter; far below what trips a GPU watchdog).
const MAX_LAUNCH_WORK: u64 = 1 << 28;

/// The placeholder value of the binding of state `k`'s initial value (the lowering binds the
/// loop's operand `k` there).
pub fn state_placeholder(k: usize) -> ValueId {
    ValueId(u32::MAX - 1024 - k as u32)
}

/// A loop's kernel.
#[derive(Clone, Debug)]
pub struct WhileKernel {
    /// The kernel.
    pub kernel: Kernel,
    /// Iterations one launch runs at most.
    pub per_launch: u64,
    /// The states that change, in order: the first inputs are their initial values and the
    /// first outputs their results. The others' results are their initial values.
    pub changing: Vec<usize>,
    /// Each element runs until its own predicate fails (`whole_loops::WholeLoop::each`): the
    /// flag is set by any invocation, so it must be cleared before each launch.
    pub each: bool,
    /// Per state that changes (as `changing`): whether its result is updated in place. Its
    /// output binding starts as the state's initial value (the runtime's copy, or the
    /// initial value's buffer when no one else needs it) and it has no input binding.
    pub in_place: Vec<bool>,
    /// Per state that changes (as `changing`): whether its result needs no initial value, a
    /// stacked output updated in place every row of which the loop writes
    /// (`whole_loops::every_row_written`): its buffer starts as it is, and the initial value
    /// is not read.
    pub fresh: Vec<bool>,
}

/// True unless `WGPU_HLO_WHILE_IN_PLACE=0`: then no result is updated in place (each launch
/// writes fresh ones from bindings of the initial values), for comparisons.
fn in_place_enabled() -> bool {
    !std::env::var("WGPU_HLO_WHILE_IN_PLACE").is_ok_and(|v| v.trim() == "0")
}

/// True unless `WGPU_HLO_FRESH_ROWS=0`: then stacked outputs whose every row the loop writes
/// still start from their initial values (for comparisons).
pub(crate) fn fresh_rows_enabled() -> bool {
    !std::env::var("WGPU_HLO_FRESH_ROWS").is_ok_and(|v| v.trim() == "0")
}

/// The state whose initial value the input placeholder `v` stands for.
pub fn placeholder_state(v: ValueId) -> Option<usize> {
    let k = (u32::MAX - 1024).checked_sub(v.0)?;
    (k < (1 << 20)).then_some(k as usize)
}

/// The kernel of loop `op`, or `None` where the loop does not run whole in one kernel.
/// `defs` must hold the definitions inside the loop's regions.
pub fn emit(
    name: &str,
    f: &crate::ir::Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<WhileKernel>> {
    let mut plain = false;
    match emit_form(name, f, defs, op, target, &mut plain)? {
        None if plain => emit_form(name, f, defs, op, target, &mut plain),
        k => Ok(k),
    }
}

/// [`emit`], a workgroup loop kernel in its plain form (an element an invocation, rows read
/// from the buffers) where `plain`. Sets `plain` where the other form did not fit an
/// invocation's loop budget (its rows' loads) and the plain one may.
fn emit_form(
    name: &str,
    f: &crate::ir::Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
    plain: &mut bool,
) -> Result<Option<WhileKernel>> {
    let Some(whole_loops::WholeLoop {
        shape,
        ops,
        invariant,
        serial,
        each,
        stacked,
        matvecs,
    }) = whole_loops::in_one_kernel(f, op)
    else {
        return Ok(None);
    };
    let [cond, body] = &op.regions[..] else {
        return Ok(None);
    };
    let n: u64 = shape.iter().map(|&d| d as u64).product();
    let mut members: HashSet<ValueId> = HashSet::new();
    for r in [cond, body] {
        r.walk(&mut |o: &Operation| members.extend(o.results.iter().copied()));
    }
    let inits = &op.operands;
    let fused = |v: ValueId| members.contains(&v);
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    let own = Index::Linear("tid".to_string());
    let at = |t: &TensorType| {
        if t.rank() == 0 {
            Index::scalar()
        } else {
            own.clone()
        }
    };
    // The states that change, each in a variable: (state index, variable, type). The others
    // are read from their buffers wherever the regions read them.
    let mut states: Vec<(usize, String, TensorType)> = Vec::new();
    // With `serial`: the region arguments of the tensor states, and their arrays.
    let mut elements: Vec<(ValueId, String)> = Vec::new();
    // Stacked outputs: (output binding, how).
    let mut rows: Vec<(usize, whole_loops::Stacked)> = Vec::new();
    // Per state that changes, in order: whether its result is updated in place — the tensor
    // states outside `serial`, which each invocation reads and writes at its own elements
    // only (the runtime starts the result from the initial value). One binding for both: a
    // loop of 15 states (jax's `gammainc` series) took 31 bindings where lavapipe has 32.
    let mut in_place: Vec<bool> = Vec::new();
    // The states carried into words (output bindings): those packing several to a word.
    let mut into_words: Vec<usize> = Vec::new();
    // Elements per invocation: all of a word's, where a changing state packs several to a
    // word (booleans: 4), carried one after the other; each invocation writes whole words.
    let mut pack = 1u64;
    let updating = in_place_enabled();
    // Whether every stacked output is updated in place (its rows then written by the
    // iterations only, which [`quads_for`] needs).
    let mut rows_in_place = true;
    for (k, &v) in inits.iter().enumerate() {
        if invariant.get(k).copied().unwrap_or(false) {
            continue;
        }
        let t = em.ty(v)?;
        let mine = !serial && !matches!(stacked.get(k), Some(Some(_))) && t.rank() > 0;
        if mine && dtype::per_word(t.dtype) > 1 {
            pack = pack.max(u64::from(dtype::per_word(t.dtype)));
            into_words.push(in_place.len());
        }
        // A scan's stacked output is too: each invocation writes its own elements of the rows
        // (32-bit types, an element a word), and the rows not written keep the initial value.
        let rows =
            !serial && matches!(stacked.get(k), Some(Some(_))) && dtype::per_word(t.dtype) == 1;
        if matches!(stacked.get(k), Some(Some(_))) {
            rows_in_place &= rows && updating;
        }
        in_place.push((mine || rows) && updating);
    }
    // Products with a matrix: one workgroup, an invocation an element or four
    // ([`workgroup_form`]).
    let workgroup = !matvecs.is_empty();
    if workgroup && (n as usize > whole_loops::MATVEC_MAX_ELEMENTS || pack > 1 || serial) {
        return Ok(None);
    }
    let stacks = stacked.iter().any(Option::is_some);
    // A workgroup's form: its elements an invocation (chains) and whether the matrices'
    // rows are held in private memory ([`workgroup_form`]).
    let (workgroup_chains, private_rows) = if workgroup && !*plain {
        let buffered = matvecs
            .iter()
            .filter(|mv| !members.contains(&mv.matrix))
            .count() as u64;
        workgroup_form(target, n, buffered, each.is_none() && !stacks)
    } else {
        (1, false)
    };
    // Loops stacking rows: four adjacent elements an invocation, each row's four stored as
    // one `vec4` ([`quads_for`]).
    let quads = stacks
        && !*plain
        && rows_in_place
        && !(serial || workgroup || each.is_some() || pack > 1)
        && quads_for(target, n, ops);
    let chains = if workgroup {
        workgroup_chains
    } else if quads {
        4
    } else if serial || each.is_some() || pack > 1 || stacks {
        1
    } else {
        chains(target, n, ops)
    };
    // The element each chain carries: chain 0 the invocation's own, chain `c` the one
    // `c * n / chains` after it; with `quads` the one `c` after it, from the invocation's
    // `4 * wh_q` (`tid` within the block that carries them).
    let chain_at = |c: u64| {
        if c == 0 {
            "tid".to_string()
        } else {
            format!("wh_t{c}")
        }
    };
    if quads {
        em.line("let wh_q = tid;");
        em.open("");
        em.line("let tid = wh_q * 4u;");
    }
    for c in 1..chains {
        let at = if quads { c } else { c * (n / chains) };
        em.line(&format!("let wh_t{c} = tid + {at}u;"));
    }
    // Per tensor state's region arguments, the variable of each chain (chain 0's is the
    // state's own variable).
    let mut chain_vars: Vec<(Vec<ValueId>, Vec<String>)> = Vec::new();
    if pack > 1 {
        em.line("let wh_base = tid;");
        for j in &into_words {
            em.line(&format!("var wh_word_{j} = 0u;"));
        }
        em.open_loop(
            &format!("for (var wh_j = 0u; wh_j < {pack}u; wh_j = wh_j + 1u)"),
            pack,
        );
        em.line(&format!("let tid = wh_base * {pack}u + wh_j;"));
        em.line(&format!("if (tid >= {n}u) {{ break; }}"));
    }
    for (k, &v) in inits.iter().enumerate() {
        if invariant.get(k).copied().unwrap_or(false) {
            continue;
        }
        let t = em.ty(v)?.clone();
        let c = em.compute(t.dtype)?;
        // Stored back as they are computed: one word per element (or the scalar's word).
        let word = dtype::per_word(t.dtype) == 1;
        if word && c.wgsl() != dtype::storage_elem(t.dtype) {
            return Ok(None);
        }
        let j = states.len();
        let updated = in_place.get(j).copied().unwrap_or(false);
        // Read from its output where updated in place, else from a binding of its own (a
        // placeholder value: the same value read inside the loop, or another state starting
        // from it, binds apart).
        let b = if updated {
            format!("out{j}")
        } else {
            let b = em.inputs.len();
            em.inputs.push(Binding {
                value: state_placeholder(k),
                ty: t.clone(),
            });
            format!("in{b}")
        };
        for h in dtype::helpers_for(t.dtype) {
            em.needs.insert(h.to_string());
        }
        let var = format!("st_{k}");
        if let Some(Some(st)) = stacked.get(k) {
            // A scan's stacked output, where each iteration writes one row (each invocation
            // its own column): updated in place, or its rows first copied into the output.
            let j = states.len();
            if !updated {
                em.open_loop(
                    &format!("for (var t = 0u; t < {}u; t = t + 1u)", st.rows),
                    st.rows as u64,
                );
                let x = dtype::load(t.dtype, &b, &format!("t * {n}u + tid"));
                em.line(&format!("out{j}[t * {n}u + tid] = {x};"));
                em.close(None);
            }
            rows.push((j, st.clone()));
        } else if serial && t.rank() > 0 {
            // Every element, in a private array; read at the element a loop over them is at.
            em.line(&format!("var {var}: array<{}, {n}>;", c.wgsl()));
            em.open_loop(&format!("for (var e = 0u; e < {n}u; e = e + 1u)"), n);
            let x = dtype::load(t.dtype, &b, "e");
            em.line(&format!("{var}[e] = {x};"));
            em.close(None);
            for r in [cond, body] {
                if let Some(&a) = r.args.get(k) {
                    elements.push((a, var.clone()));
                }
            }
        } else {
            let index = if t.rank() == 0 { "0u" } else { "tid" };
            let x = dtype::load(t.dtype, &b, index);
            em.line(&format!("var {var}: {} = {x};", c.wgsl()));
            let args: Vec<ValueId> = [cond, body]
                .iter()
                .filter_map(|r| r.args.get(k).copied())
                .collect();
            for &a in &args {
                em.scalars.insert(a, var.clone());
            }
            if t.rank() > 0 && chains > 1 {
                for ch in 1..chains {
                    let x = dtype::load(t.dtype, &b, &chain_at(ch));
                    em.line(&format!("var {}: {} = {x};", chain_var(&var, ch), c.wgsl()));
                }
                chain_vars.push((args, (0..chains).map(|ch| chain_var(&var, ch)).collect()));
            }
        }
        states.push((k, var, t));
    }
    // What the loop reads and does not change — values from outside, states the body returns
    // as they are — loaded once, before it: scalars, and in the per-element form tensors of
    // shape `S` at the invocation's element. Each load inside the loop ran every iteration
    // (200 iterations over 2^20 floats on lavapipe, four scalar constants: 486-717 ms).
    let mut region_args: HashSet<ValueId> = HashSet::new();
    let mut outside: Vec<ValueId> = Vec::new();
    for r in [cond, body] {
        r.walk(&mut |o: &Operation| {
            for sub in &o.regions {
                region_args.extend(sub.args.iter().copied());
            }
        });
    }
    for r in [cond, body] {
        for (k, &a) in r.args.iter().enumerate() {
            if invariant.get(k).copied().unwrap_or(false) {
                outside.push(a);
            }
        }
        r.walk(&mut |o: &Operation| {
            for &v in &o.operands {
                let mine = members.contains(&v)
                    || region_args.contains(&v)
                    || cond.args.contains(&v)
                    || body.args.contains(&v);
                if !mine && !outside.contains(&v) {
                    outside.push(v);
                }
            }
        });
    }
    for v in outside {
        let t = em.ty(v)?.clone();
        if t.rank() == 0 {
            em.value(v, &Index::scalar())?;
        } else if !serial && t.dims() == shape {
            for ch in 0..chains {
                em.value(v, &Index::Linear(chain_at(ch)))?;
            }
        }
    }
    // Where the rows a workgroup's invocations hold are loaded (before the loop; known once
    // the body's products are emitted).
    let rows_at = em.body.len();
    em.line("var wh_go = true;");
    let before_loop = em.iterations();
    em.open_loop(
        "for (var wh_k = 0u; wh_k < WH_PER_LAUNCHu; wh_k = wh_k + 1u)",
        1,
    );
    let returned = |r: &crate::ir::Region| -> Result<Vec<ValueId>> {
        r.ops
            .last()
            .filter(|o| o.op == Op::Return)
            .map(|o| o.operands.clone())
            .ok_or_else(|| Error::invalid(format!("{name}: a loop region without a return")))
    };
    let pred = *returned(cond)?
        .first()
        .ok_or_else(|| Error::invalid(format!("{name}: the loop's cond returns nothing")))?;
    if em.ty(pred)?.dtype != ElementType::Pred {
        return Ok(None);
    }
    // With `workgroup`, the products and reductions go through workgroup memory.
    let mut shared = Shared {
        n,
        at: (0..chains).map(chain_at).collect(),
        private_rows,
        decls: String::new(),
        rows: String::new(),
        row_iterations: 0,
        lanes: if workgroup {
            subgroup_lanes(target)
        } else {
            None
        },
    };
    if serial {
        reductions(&mut em, cond, &elements, n)?;
    } else if workgroup {
        shared_ops(
            f,
            &mut em,
            cond,
            (&[], &members),
            &mut shared,
            &mut chain_vars,
        )?;
    }
    let p = match each {
        // `any(P)` from `init`: `init || P` at this invocation's element (and `also`).
        Some(whole_loops::Each { pred, init, also }) => {
            let i = em.value(init, &Index::scalar())?;
            let e = em.value(pred, &own)?;
            match also {
                Some(a) => format!("({} && ({i} || {e}))", em.value(a, &Index::scalar())?),
                None => format!("({i} || {e})"),
            }
        }
        // With chains, a scalar: the same for every chain.
        None => em.value(pred, &Index::scalar())?,
    };
    if workgroup {
        // Every invocation computes the same scalar predicate, but from storage: made uniform
        // through workgroup memory, so that the barriers below are in uniform control flow.
        em.line(&format!(
            "if (tid == 0u) {{ wh_pred = select(0u, 1u, {p}); }}"
        ));
        em.open("if (workgroupUniformLoad(&wh_pred) == 0u)");
    } else {
        em.open(&format!("if (!{p})"));
    }
    em.line("wh_go = false;");
    em.line("break;");
    em.close(None);
    if workgroup {
        shared_ops(
            f,
            &mut em,
            body,
            (&matvecs, &members),
            &mut shared,
            &mut chain_vars,
        )?;
        shared.decls.push_str("var<workgroup> wh_pred: u32;\n");
        em.body.insert_str(rows_at, &shared.rows);
    }
    let next = returned(body)?;
    if next.len() != inits.len() {
        return Err(Error::invalid(format!(
            "{name}: the loop's body returns {} values for {} states",
            next.len(),
            inits.len()
        )));
    }
    // Every next value is computed before any state changes (a body may swap its states).
    let mut lets = Vec::new();
    let is_stacked = |k: usize| matches!(stacked.get(k), Some(Some(_)));
    let in_vars: Vec<&(usize, String, TensorType)> = states
        .iter()
        .filter(|(k, _, t)| (!serial || t.rank() == 0) && !is_stacked(*k))
        .collect();
    if serial {
        reductions(&mut em, body, &elements, n)?;
    }
    // Per chain (the scalars in chain 0's only): each state's variable and its next value.
    for ch in 0..chains {
        use_chain(&mut em, &chain_vars, ch as usize);
        for (k, var, t) in &in_vars {
            if ch > 0 && t.rank() == 0 {
                continue;
            }
            let at = if t.rank() == 0 {
                Index::scalar()
            } else {
                Index::Linear(chain_at(ch))
            };
            let x = em.value(next[*k], &at)?;
            let c = em.compute(t.dtype)?;
            lets.push((chain_var(var, ch), em.bind(c, &x)));
        }
    }
    use_chain(&mut em, &chain_vars, 0);
    if serial {
        // Each element's next values from its own (and the scalars, not yet changed): in
        // place, element by element.
        em.open_loop(&format!("for (var e = 0u; e < {n}u; e = e + 1u)"), n);
        elements_at_e(&mut em, &elements, true);
        let e = Index::Linear("e".to_string());
        let mut element_lets = Vec::new();
        for (k, var, t) in states.iter().filter(|s| s.2.rank() > 0) {
            let x = em.value(next[*k], &e)?;
            let c = em.compute(t.dtype)?;
            element_lets.push((var.clone(), em.bind(c, &x)));
        }
        elements_at_e(&mut em, &elements, false);
        for (var, x) in element_lets {
            em.line(&format!("{var}[e] = {x};"));
        }
        em.close(None);
    }
    // The rows stacked outputs take this iteration (from the states before it changes).
    let mut row_stores = Vec::new();
    for (j, st) in &rows {
        let vt = em.ty(st.value)?.clone();
        let v = if quads {
            // The four chains' elements, one `vec4` (the output is declared as `vec4`s).
            let mut four = Vec::new();
            for ch in 0..chains {
                use_chain(&mut em, &chain_vars, ch as usize);
                four.push(em.value(st.value, &Index::Linear(chain_at(ch)))?);
            }
            use_chain(&mut em, &chain_vars, 0);
            format!(
                "vec4<{}>({})",
                dtype::storage_elem(vt.dtype),
                four.join(", ")
            )
        } else {
            em.value(st.value, &at(&vt))?
        };
        let r = em.value(st.row, &Index::scalar())?;
        let last = st.rows - 1;
        let clamped = match em.ty(st.row)?.dtype {
            ElementType::I32 => format!("u32(clamp({r}, 0i, {last}i))"),
            _ => format!("min({r}, {last}u)"),
        };
        let row = em.bind(super::dtype::Compute::U32, &clamped);
        row_stores.push(if quads {
            format!("out{j}[{row} * {}u + wh_q] = {v};", n / 4)
        } else {
            format!("out{j}[{row} * {n}u + tid] = {v};")
        });
    }
    for s in &row_stores {
        em.line(s);
    }
    for (var, x) in &lets {
        em.line(&format!("{var} = {x};"));
    }
    em.close(None);
    let with_loop = em.iterations();
    // The results: each invocation its elements, the first the scalars and the flag.
    let mut outs: Vec<Binding> = Vec::new();
    let mut scalar_stores = Vec::new();
    for (j, (k, var, t)) in states.iter().enumerate() {
        let r = *op
            .results
            .get(*k)
            .ok_or_else(|| Error::invalid(format!("{name}: loop result {k} missing")))?;
        outs.push(Binding {
            value: r,
            ty: t.clone(),
        });
        if is_stacked(*k) {
            // Written in place by the iterations.
        } else if t.rank() > 0 && serial {
            em.open_loop(&format!("for (var e = 0u; e < {n}u; e = e + 1u)"), n);
            em.line(&format!("out{j}[e] = {var}[e];"));
            em.close(None);
        } else if into_words.contains(&j) {
            // Into the word (all of whose elements this invocation carries), stored after
            // its last element.
            let per = dtype::per_word(t.dtype);
            let bits = 32 / per;
            em.line(&format!(
                "wh_word_{j} = wh_word_{j} | ({} << ((tid % {per}u) * {bits}u));",
                dtype::to_bits(t.dtype, var)
            ));
            em.open(&format!(
                "if (tid % {per}u == {}u || tid + 1u == {n}u)",
                per - 1
            ));
            em.line(&format!("out{j}[tid / {per}u] = wh_word_{j};"));
            em.line(&format!("wh_word_{j} = 0u;"));
            em.close(None);
        } else if t.rank() > 0 {
            for ch in 0..chains {
                em.line(&format!(
                    "out{j}[{}] = {};",
                    chain_at(ch),
                    chain_var(var, ch)
                ));
            }
        } else if dtype::per_word(t.dtype) == 1 {
            scalar_stores.push(format!("out{j}[0] = {var};"));
        } else {
            for h in dtype::helpers_for(t.dtype) {
                em.needs.insert(h.to_string());
            }
            scalar_stores.push(format!("out{j}[0] = {};", dtype::to_bits(t.dtype, var)));
        }
    }
    let flag = outs.len();
    outs.push(Binding {
        value: FLAG,
        ty: TensorType::new(vec![1], ElementType::U32),
    });
    // The flag: 1 where the launch stopped with the predicate still true. With `each`, any
    // invocation whose element still goes sets it (the runtime clears it before the launch),
    // and writes the scalars: every element still going has run as many iterations, so they
    // agree on them (elements that stopped read them next launch, and stop again).
    let flag_store = format!("out{flag}[0] = 1u;");
    if each.is_some() {
        em.open("if (wh_go)");
        em.line(&flag_store);
        for s in &scalar_stores {
            em.line(s);
        }
        em.close(None);
    } else {
        scalar_stores.push(format!("out{flag}[0] = select(0u, 1u, wh_go);"));
        em.open("if (tid == 0u)");
        for s in &scalar_stores {
            em.line(s);
        }
        em.close(None);
    }
    if pack > 1 || quads {
        em.close(None);
    }
    let bindings = em.inputs.len() + outs.len();
    if bindings as u32 > target.max_storage_buffers {
        return Ok(None);
    }
    if em
        .inputs
        .iter()
        .chain(&outs)
        .any(|b| super::expr::large(&b.ty, target.max_binding_size))
    {
        return Ok(None);
    }
    // Iterations per launch: within the invocation's loop budget (an iteration's own loops,
    // such as an integer power's, counted) and the launch's work bound.
    // An iteration's back-edges, and those of the copies and stores around the loop.
    let per_iteration = with_loop.saturating_sub(before_loop).max(1);
    let fixed = em
        .iterations()
        .saturating_sub(per_iteration)
        .saturating_add(shared.row_iterations);
    let by_budget = target.max_invocation_iterations.saturating_sub(fixed) / per_iteration;
    // Chains run a light iteration up to three times as fast (see [`chains`]), a heavy one
    // less so: a launch holds twice the iterations (a body of `sin`, `exp` and `tanh` over
    // 2^20 floats on lavapipe, 2 cores: 30 iterations in 0.17 s, against 15 in 0.10 s).
    let by_work =
        MAX_LAUNCH_WORK.saturating_mul(chains.min(2)) / n.saturating_mul(ops.max(1)).max(1);
    let per_launch = by_budget.min(by_work);
    if per_launch == 0 {
        *plain = !*plain && (private_rows || chains > 1);
        return Ok(None);
    }
    // With `serial` one invocation computes every element; with `workgroup` one workgroup.
    let threads = if serial { 1 } else { n.div_ceil(pack) / chains };
    let wg = if serial {
        1
    } else if workgroup {
        threads as u32
    } else if target.cpu_adapter
        && (threads <= 64 || (chains > 1 && threads < 64 * WORKGROUP as u64))
    {
        // Small workgroups where there are few invocations (with chains: fewer than 64
        // workgroups of the usual size), so that the adapter's threads share them.
        64
    } else {
        WORKGROUP
    };
    let lanes = shared.lanes;
    let mut text = shared.decls;
    if let Some(lanes) = lanes {
        // Whole subgroups: the invocations past the elements repeat the last one.
        let wg = (wg as u64).div_ceil(lanes).saturating_mul(lanes) as u32;
        text.push_str(&kernel::subgroup_entry_header(wg));
        text.push_str(&format!(
            "    let tid = min(lid, {}u);\n",
            threads.saturating_sub(1)
        ));
    } else {
        text.push_str(&kernel::entry_header(wg));
        text.push_str(&kernel::thread_index(wg));
    }
    if !workgroup {
        // (A workgroup's invocations are its elements, and all meet its barriers.)
        text.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
    }
    // On a CPU adapter a bound of at most [`ROLLED_BELOW`] iterations is made a run-time
    // value (see there; GPU compilers unroll by their own measure, unmeasured here). Not with
    // barriers in the loop: its bound must be uniform.
    let bound = if target.cpu_adapter && per_launch <= ROLLED_BELOW && !workgroup {
        format!("{per_launch}u + {}", kernel::RUNTIME_ZERO)
    } else {
        format!("{per_launch}u")
    };
    text.push_str(&em.body.replace("WH_PER_LAUNCHu", &bound));
    text.push_str("}\n");
    let comment = format!(
        "kernel {name}: a while loop whole, over {n} elements of state{}{}, at most \
         {per_launch} iterations a launch\nfuses: {}",
        if serial {
            " (one invocation: it reduces them)"
        } else if workgroup && private_rows && lanes.is_some() {
            " (one workgroup: it multiplies them by a matrix, each invocation holding its rows, \
             the vector shared through subgroups)"
        } else if workgroup && private_rows {
            " (one workgroup: it multiplies them by a matrix, each invocation holding its rows)"
        } else if workgroup && lanes.is_some() {
            " (one workgroup: it multiplies them by a matrix, the vector shared through subgroups)"
        } else if workgroup {
            " (one workgroup: it multiplies them by a matrix)"
        } else if each.is_some() {
            " (each until its own predicate fails: the loop runs while any holds)"
        } else {
            ""
        },
        if quads {
            " (4 adjacent elements an invocation, rows stored as vec4s)".to_string()
        } else if chains > 1 {
            format!(" ({chains} elements an invocation, side by side)")
        } else {
            String::new()
        },
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let needs: BTreeSet<String> = em.needs.iter().cloned().collect();
    let vec4_outs: Vec<usize> = if quads {
        rows.iter().map(|(j, _)| *j).collect()
    } else {
        Vec::new()
    };
    let mut kernel = kernel::in_workgroups_vec4(
        name,
        &comment,
        em.inputs.clone(),
        outs,
        &needs,
        &text,
        &vec4_outs,
        (
            threads.div_ceil(wg as u64),
            fixed.saturating_add(per_launch.saturating_mul(per_iteration)),
        ),
        target,
    )?;
    if each.is_some() {
        // Invocations set the flag concurrently: an atomic word.
        let decl = format!("var<storage, read_write> out{flag}: array<u32>;");
        if !kernel.wgsl.contains(&decl) || !kernel.wgsl.contains(&flag_store) {
            return Err(Error::internal(format!(
                "{name}: no flag out{flag} to make atomic"
            )));
        }
        kernel.wgsl = kernel
            .wgsl
            .replacen(
                &decl,
                &format!("var<storage, read_write> out{flag}: array<atomic<u32>>;"),
                1,
            )
            .replacen(&flag_store, &format!("atomicStore(&out{flag}[0], 1u);"), 1);
        kernel::validate(name, &kernel.wgsl, target.caps)?;
    }
    Ok(Some(WhileKernel {
        kernel,
        per_launch,
        changing: states.iter().map(|s| s.0).collect(),
        each: each.is_some(),
        fresh: states
            .iter()
            .zip(&in_place)
            .map(|((k, _, _), &ip)| {
                ip && fresh_rows_enabled()
                    && matches!(stacked.get(*k), Some(Some(st))
                        if whole_loops::every_row_written(f, op, defs, st))
            })
            .collect(),
        in_place,
    }))
}

/// Makes each tensor state's region argument read its array at element `e` (`on`), or stop
/// doing so. Within a loop over the elements every read of such an argument is at that
/// element (`whole_loops`), whatever form its index takes.
fn elements_at_e(em: &mut ExprEmitter, elements: &[(ValueId, String)], on: bool) {
    for (a, var) in elements {
        if on {
            em.scalars.insert(*a, format!("{var}[e]"));
        } else {
            em.scalars.remove(a);
        }
    }
}

/// Most `vec4` words of matrix rows an invocation of a workgroup loop kernel holds in private
/// memory, over its products and elements, with several elements an invocation.
/// llvmpipe keeps an invocation's private array as one SIMD vector per word, so each step's
/// reads of a row are vector loads where a texel fetch is a loop over the lanes; but its
/// compiler takes longer the more such words a shader holds. 300 steps of `tanh(A @ v)` by
/// hand (`examples/wgsl_bench.rs`, lavapipe, 2 cores, kernel ms; first dispatch, compile
/// included): n = 64 from a texture, an element an invocation 2.1-2.5 (0.1 s); rows held, an
/// element an invocation 1.2-1.3 (0.1 s); four elements an invocation 0.4-0.6 (0.17 s), eight
/// 0.55-0.8 (2.7 s: 128 words). n = 128: texture 9.2-10.4 (0.07 s), rows held one element an
/// invocation 4.3 (0.15 s), four 2.7 (2.2 s). n = 32: texture 0.55, four 0.17-0.27 (0.1 s).
const PRIVATE_ROW_QUADS: u64 = 64;

/// Most such words an invocation carrying two elements holds: at n = 100, two elements an
/// invocation (50 words) 1.6 ms (0.14 s), one 2.9 ms, four (100 words) 2.1 ms but 1.4 s to
/// compile; at n = 128 two (64 words in arrays of 32) 4.1-4.6 ms and 0.75 s to compile.
const PRIVATE_ROW_QUADS_TWO: u64 = 50;

/// Most such words an invocation carrying one element holds.
const PRIVATE_ROW_QUADS_ONE: u64 = 32;

/// A workgroup loop kernel's form on `target` for `n` elements and `buffered` products whose
/// matrix has a buffer: elements an invocation (chains; only where `may_chain`: no stacked
/// rows) and whether each invocation holds its rows of those matrices in private memory,
/// loaded once before the loop. On CPU adapters: four elements an invocation where the words
/// held stay within [`PRIVATE_ROW_QUADS`] (fewer invocations: llvmpipe runs a workgroup's SIMD
/// vectors as coroutines switched at every barrier), else two within
/// [`PRIVATE_ROW_QUADS_TWO`], else one, the rows held within [`PRIVATE_ROW_QUADS_ONE`] words. GPUs keep an element an invocation and read the rows from
/// their buffers (unmeasured there). `WGPU_HLO_WHILE_PRIVATE_ROWS=0` turns both off (the form
/// of 2026-12-04).
fn workgroup_form(target: Target, n: u64, buffered: u64, may_chain: bool) -> (u64, bool) {
    let off = std::env::var("WGPU_HLO_WHILE_PRIVATE_ROWS").is_ok_and(|v| v.trim() == "0");
    if !target.cpu_adapter || off {
        return (1, false);
    }
    let quads = n.div_ceil(4).saturating_mul(buffered);
    if may_chain && n % CHAINS == 0 && quads.saturating_mul(CHAINS) <= PRIVATE_ROW_QUADS {
        (CHAINS, true)
    } else if may_chain && n % 2 == 0 && quads.saturating_mul(2) <= PRIVATE_ROW_QUADS_TWO {
        (2, true)
    } else {
        (1, quads <= PRIVATE_ROW_QUADS_ONE)
    }
}

/// What the products and reductions of a workgroup loop kernel share ([`shared_ops`]).
struct Shared {
    /// Elements of the state.
    n: u64,
    /// The element each chain of an invocation carries (chain 0's: `tid`).
    at: Vec<String>,
    /// Whether each invocation holds its rows of the matrices with buffers in private memory.
    private_rows: bool,
    /// Declarations of the workgroup arrays (module scope).
    decls: String,
    /// Statements loading the rows held, before the loop.
    rows: String,
    /// Loop iterations of `rows`.
    row_iterations: u64,
    /// The subgroup's lanes where each invocation reads the vector of a product a word in
    /// every `lanes` and takes the others from its subgroup ([`subgroup_lanes`]).
    lanes: Option<u64>,
}

/// A workgroup loop kernel's products and full reductions in `region`, in its order (each may
/// read the ones before it): every invocation shares its elements of the operand (one a
/// chain) through workgroup memory between two barriers. A product ([`whole_loops::Matvec`]):
/// each invocation sums its rows of the matrix against the vector, in order — from the rows it
/// holds (`Shared::private_rows`), else from the buffer. A reduction: invocation 0 folds the
/// elements in order (as one invocation folds them in the serial form), and all read its result
/// through `workgroupUniformLoad` (uniform: a predicate computed from it may guard the
/// barriers). A product's value per chain is added to `chain_vars`.
fn shared_ops(
    f: &crate::ir::Function,
    em: &mut ExprEmitter,
    region: &crate::ir::Region,
    (matvecs, members): (&[whole_loops::Matvec], &HashSet<ValueId>),
    sh: &mut Shared,
    chain_vars: &mut Vec<(Vec<ValueId>, Vec<String>)>,
) -> Result<()> {
    let n = sh.n;
    let at = sh.at.clone();
    let chains = at.len();
    // Four elements of the vector a `vec4` where `n` allows (one workgroup load for four:
    // 64 x 64, 504 iterations on lavapipe, 5.2-5.5 -> 2.8-3.0 ms).
    let quads = n % 4 == 0;
    // Each chain's element of `v` (the chain's state variables in use).
    let per_chain = |em: &mut ExprEmitter,
                     chain_vars: &Vec<(Vec<ValueId>, Vec<String>)>,
                     v: ValueId|
     -> Result<Vec<String>> {
        let mut xs = Vec::new();
        for (ch, e) in at.iter().enumerate() {
            use_chain(em, chain_vars, ch);
            xs.push(em.value(v, &Index::Linear(e.clone()))?);
        }
        use_chain(em, chain_vars, 0);
        Ok(xs)
    };
    for o in &region.ops {
        // Names unique in the kernel: the arrays declared so far.
        let m = sh.decls.matches("var<workgroup>").count();
        if let Some(mv) = matvecs.iter().find(|mv| o.results == [mv.result]) {
            let xs = per_chain(em, chain_vars, mv.vector)?;
            em.line("workgroupBarrier();");
            if quads {
                sh.decls.push_str(&format!(
                    "var<workgroup> wh_vec{m}: array<vec4<f32>, {}>;\n",
                    n / 4
                ));
            } else {
                sh.decls
                    .push_str(&format!("var<workgroup> wh_vec{m}: array<f32, {n}>;\n"));
            }
            for (e, x) in at.iter().zip(&xs) {
                if quads {
                    em.line(&format!("wh_vec{m}[{e} >> 2u][{e} & 3u] = {x};"));
                } else {
                    em.line(&format!("wh_vec{m}[{e}] = {x};"));
                }
            }
            em.line("workgroupBarrier();");
            let dots: Vec<String> = (0..chains)
                .map(|ch| chain_var(&format!("wh_dot{m}"), ch as u64))
                .collect();
            for d in &dots {
                em.line(&format!("var {d}: f32 = 0.0;"));
            }
            if chains > 1 {
                chain_vars.push((vec![mv.result], dots.clone()));
            }
            em.scalars.insert(mv.result, dots[0].clone());
            let j = format!("wh_j{m}");
            if members.contains(&mv.matrix) {
                // A matrix the loop computes (from values that do not change: `(2 * A) @ v`,
                // a slice of a matrix at the counter): each element where it is read.
                // Each chain's sum gains element `(j, its row)` times `x`.
                let element = |em: &mut ExprEmitter, j: &str, x: &str| -> Result<()> {
                    for (e, d) in at.iter().zip(&dots) {
                        let place = if mv.contracted == 0 {
                            vec![j.to_string(), e.clone()]
                        } else {
                            vec![e.clone(), j.to_string()]
                        };
                        let a = em.value(mv.matrix, &Index::Multi(place))?;
                        em.line(&format!("{d} = {d} + {a} * {x};"));
                    }
                    Ok(())
                };
                if let Some(lanes) = sh.lanes {
                    let per = if quads { 4 } else { 1 };
                    each_word(
                        em,
                        (&format!("wh_vec{m}"), &format!("wh_v{m}")),
                        n / per,
                        lanes,
                        &mut |em, w| {
                            for c in 0..per {
                                let j = if quads {
                                    format!("({w} * 4u + {c}u)")
                                } else {
                                    w.to_string()
                                };
                                let x = if quads {
                                    format!("wh_v{m}.{}", ["x", "y", "z", "w"][c as usize])
                                } else {
                                    format!("wh_v{m}")
                                };
                                element(em, &j, &x)?;
                            }
                            Ok(())
                        },
                    )?;
                    continue;
                }
                em.open_loop(
                    &format!("for (var {j} = 0u; {j} < {n}u; {j} = {j} + 1u)"),
                    n,
                );
                let x = if quads {
                    format!("wh_vec{m}[{j} >> 2u][{j} & 3u]")
                } else {
                    format!("wh_vec{m}[{j}]")
                };
                element(em, &j, &x)?;
                em.close(None);
                continue;
            }
            let a = em.input(mv.matrix)?;
            let storage = crate::codegen::texture_reads::STORAGE_MARK;
            // Element `(row e, j)` of the matrix as the product reads it.
            let element = |e: &str, j: &str| {
                if mv.contracted == 1 {
                    format!("in{a}[{storage} {e} * {n}u + {j}]")
                } else {
                    format!("in{a}[{storage} ({j}) * {n}u + {e}]")
                }
            };
            // Elements `(row e, j..j + 4)`: of a row, one load (a texel fetch, or a `vec4`
            // load; `texture_reads`); of a column, four from the buffer.
            let quad = |e: &str, j: &str| {
                if mv.contracted == 1 {
                    let q = format!("({e} * {n}u + {j})");
                    let mark = crate::codegen::texture_reads::QUAD_MARK;
                    format!("vec4<f32>(in{a}[{mark} {q}], in{a}[{q} + 1u], in{a}[{q} + 2u], in{a}[{q} + 3u])")
                } else {
                    let parts: Vec<String> =
                        (0..4).map(|c| element(e, &format!("{j} + {c}u"))).collect();
                    format!("vec4<f32>({})", parts.join(", "))
                }
            };
            let (words, ty) = if quads {
                (n / 4, "vec4<f32>")
            } else {
                (n, "f32")
            };
            let rows: Vec<String> = (0..chains)
                .map(|ch| chain_var(&format!("wh_row{m}"), ch as u64))
                .collect();
            if sh.private_rows {
                // Each chain's row in private memory, loaded before the loop, by texel fetches
                // where the input is read through a texture: with four scalar loads from the
                // buffer instead, llvmpipe took 0.8-0.9 s to compile the kernel of
                // `tanh(A @ v)` at n = 64, 0.15-0.2 s with one.
                for (e, row) in at.iter().zip(&rows) {
                    let q = format!("wh_q{m}");
                    let load = if quads {
                        quad(e, &format!("4u * {q}"))
                    } else {
                        element(e, &q)
                    };
                    sh.rows.push_str(&format!(
                        "    var {row}: array<{ty}, {words}>;\n    for (var {q} = 0u; {q} < {words}u; {q} = {q} + 1u) {{ {row}[{q}] = {load}; }}\n"
                    ));
                    sh.row_iterations = sh.row_iterations.saturating_add(words);
                }
            }
            // Four elements of the row a step where `n` allows, else one (a column: the
            // invocations read neighbouring elements); summed in order.
            let step = if quads { 4 } else { 1 };
            // The products of a word `w` of the vector (`wh_v{m}`) with the rows.
            let mut word = |em: &mut ExprEmitter, w: &str| -> Result<()> {
                for (ch, ((e, d), row)) in at.iter().zip(&dots).zip(&rows).enumerate() {
                    if quads {
                        let load = if sh.private_rows {
                            format!("{row}[{w}]")
                        } else {
                            quad(e, &format!("({w}) * 4u"))
                        };
                        let r = chain_var(&format!("wh_a{m}"), ch as u64);
                        em.line(&format!("let {r} = {load};"));
                        let mut sum = d.clone();
                        for comp in ["x", "y", "z", "w"] {
                            sum = format!("({sum} + {r}.{comp} * wh_v{m}.{comp})");
                        }
                        em.line(&format!("{d} = {sum};"));
                    } else {
                        let x = if sh.private_rows {
                            format!("{row}[{w}]")
                        } else {
                            element(e, w)
                        };
                        em.line(&format!("{d} = {d} + {x} * wh_v{m};"));
                    }
                }
                Ok(())
            };
            if let Some(lanes) = sh.lanes {
                each_word(
                    em,
                    (&format!("wh_vec{m}"), &format!("wh_v{m}")),
                    words,
                    lanes,
                    &mut word,
                )?;
                continue;
            }
            em.open_loop(
                &format!("for (var {j} = 0u; {j} < {n}u; {j} = {j} + {step}u)"),
                words,
            );
            if quads {
                em.line(&format!("let wh_v{m} = wh_vec{m}[{j} >> 2u];"));
                word(em, &format!("{j} >> 2u"))?;
            } else {
                em.line(&format!("let wh_v{m} = wh_vec{m}[{j}];"));
                word(em, &j)?;
            }
            em.close(None);
            continue;
        }
        if !whole_loops::full_reduction(f, o, &[n as usize]) {
            continue;
        }
        let Some(fold) = Fold::of(o)? else {
            continue;
        };
        let c = em.compute(em.ty(fold.result)?.dtype)?.wgsl();
        let xs = per_chain(em, chain_vars, fold.input)?;
        if let Some(lanes) = sh.lanes.filter(|_| matches!(c, "f32" | "i32" | "u32")) {
            // Every subgroup folds the elements in order, each lane loading one word in
            // `lanes` and taking the others from its subgroup ([`each_word`]); four
            // elements a word where `n` allows.
            let per = if quads { 4 } else { 1 };
            let ty = if quads {
                format!("vec4<{c}>")
            } else {
                c.to_string()
            };
            sh.decls.push_str(&format!(
                "var<workgroup> wh_red{m}: array<{ty}, {}>;\n",
                n / per
            ));
            sh.decls
                .push_str(&format!("var<workgroup> wh_sum{m}: {c};\n"));
            em.line("workgroupBarrier();");
            for (e, x) in at.iter().zip(&xs) {
                if quads {
                    em.line(&format!("wh_red{m}[{e} >> 2u][{e} & 3u] = {x};"));
                } else {
                    em.line(&format!("wh_red{m}[{e}] = {x};"));
                }
            }
            em.line("workgroupBarrier();");
            let start = em.value(fold.init, &Index::scalar())?;
            em.line(&format!("var wh_acc{m}: {c} = {start};"));
            let acc = format!("wh_acc{m}");
            let w = format!("wh_w{m}");
            each_word(
                em,
                (&format!("wh_red{m}"), &w),
                n / per,
                lanes,
                &mut |em, _| {
                    let parts: Vec<String> = if quads {
                        ["x", "y", "z", "w"]
                            .iter()
                            .map(|p| format!("{w}.{p}"))
                            .collect()
                    } else {
                        vec![w.clone()]
                    };
                    for x in parts {
                        // (A block each: the reducer's values are remembered per block.)
                        em.open("");
                        let y = fold.step(em, &acc, x)?;
                        em.line(&format!("{acc} = {y};"));
                        em.close(None);
                    }
                    Ok(())
                },
            )?;
            // (Each subgroup's sum is the same; the analysis of uniformity knows one
            // read from workgroup memory.)
            em.line(&format!("if (tid == 0u) {{ wh_sum{m} = {acc}; }}"));
            em.line(&format!("let wh_r{m} = workgroupUniformLoad(&wh_sum{m});"));
            em.scalars.insert(fold.result, format!("wh_r{m}"));
            continue;
        }
        sh.decls
            .push_str(&format!("var<workgroup> wh_red{m}: array<{c}, {n}>;\n"));
        sh.decls
            .push_str(&format!("var<workgroup> wh_sum{m}: {c};\n"));
        em.line("workgroupBarrier();");
        for (e, x) in at.iter().zip(&xs) {
            em.line(&format!("wh_red{m}[{e}] = {x};"));
        }
        em.line("workgroupBarrier();");
        em.open("if (tid == 0u)");
        let start = em.value(fold.init, &Index::scalar())?;
        em.line(&format!("var wh_acc{m}: {c} = {start};"));
        let j = format!("wh_j{m}");
        em.open_loop(
            &format!("for (var {j} = 0u; {j} < {n}u; {j} = {j} + 1u)"),
            n,
        );
        let y = fold.step(em, &format!("wh_acc{m}"), format!("wh_red{m}[{j}]"))?;
        em.line(&format!("wh_acc{m} = {y};"));
        em.close(None);
        em.line(&format!("wh_sum{m} = wh_acc{m};"));
        em.close(None);
        em.line(&format!("let wh_r{m} = workgroupUniformLoad(&wh_sum{m});"));
        em.scalars.insert(fold.result, format!("wh_r{m}"));
    }
    Ok(())
}

/// Runs `word` for each word `w` of a workgroup array (`words` of them, in order), with the
/// word in the variable `value`, sharing the array through the subgroup: each lane
/// loads one word in every `lanes` and `subgroupBroadcast` hands each to all lanes. Where the
/// words do not fill the last load, lanes past them load the last word (unused).
fn each_word(
    em: &mut ExprEmitter,
    (array, value): (&str, &str),
    words: u64,
    lanes: u64,
    word: &mut dyn FnMut(&mut ExprEmitter, &str) -> Result<()>,
) -> Result<()> {
    let full = words / lanes;
    let rest = words % lanes;
    if full > 0 {
        let b = format!("{value}_b");
        em.open_loop(
            &format!("for (var {b} = 0u; {b} < {full}u; {b} = {b} + 1u)"),
            full,
        );
        em.line(&format!("let {value}_s = {array}[{b} * {lanes}u + sgl];"));
        for l in 0..lanes {
            em.open("");
            em.line(&format!(
                "let {value} = subgroupBroadcast({value}_s, {l}u);"
            ));
            word(em, &format!("({b} * {lanes}u + {l}u)"))?;
            em.close(None);
        }
        em.close(None);
    }
    if rest > 0 {
        let first = full * lanes;
        em.line(&format!(
            "let {value}_last = {array}[min({first}u + sgl, {}u)];",
            words - 1
        ));
        for l in 0..rest {
            em.open("");
            em.line(&format!(
                "let {value} = subgroupBroadcast({value}_last, {l}u);"
            ));
            word(em, &format!("{}u", first + l))?;
            em.close(None);
        }
    }
    Ok(())
}

/// The lanes of the subgroups through which a workgroup loop kernel's invocations share the
/// vectors of its products, on CPU adapters whose subgroups have one known size (llvmpipe: 8):
/// each reads one word in every `lanes` of the workgroup array, where each read a whole row of
/// words. Mesa 22's llvmpipe runs each workgroup-memory load as a loop over the SIMD lanes, so
/// those reads were the loop's cost: 500 steps of a 100-state Markov chain `p @ T` (two
/// elements an invocation, rows held; lavapipe, 2-core EPYC, `examples/wgsl_bench.rs`) 19.6
/// -> 4.4 ms. The workgroup then holds whole subgroups: the invocations past the elements
/// repeat the last one (same values to the same places). GPUs keep the workgroup reads
/// (unmeasured). `WGPU_HLO_WHILE_SUBGROUPS=0` turns it off.
fn subgroup_lanes(target: Target) -> Option<u64> {
    let s = u64::from(target.caps.subgroup_size);
    let off = std::env::var("WGPU_HLO_WHILE_SUBGROUPS").is_ok_and(|v| v.trim() == "0");
    (target.cpu_adapter && target.caps.subgroup && matches!(s, 4 | 8 | 16 | 32) && !off)
        .then_some(s)
}

/// A reduction's operands, result and reducer: the reducer's two arguments and the value it
/// returns.
struct Fold {
    input: ValueId,
    init: ValueId,
    result: ValueId,
    a: ValueId,
    b: ValueId,
    folded: ValueId,
}

impl Fold {
    /// `o` as a [`Fold`]; `None` for another op.
    fn of(o: &Operation) -> Result<Option<Fold>> {
        let (Op::Reduce { .. }, [input, init], [result], [reducer]) =
            (&o.op, &o.operands[..], &o.results[..], &o.regions[..])
        else {
            return Ok(None);
        };
        let (Some(&a), Some(&b), Some(ret)) = (
            reducer.args.first(),
            reducer.args.get(1),
            reducer.ops.last(),
        ) else {
            return Err(Error::invalid("a reduction without a reducer"));
        };
        let &[folded] = &ret.operands[..] else {
            return Err(Error::invalid("a reducer returning other than one value"));
        };
        Ok(Some(Fold {
            input: *input,
            init: *init,
            result: *result,
            a,
            b,
            folded,
        }))
    }

    /// The reducer applied to `acc` and `x` (WGSL expressions), emitted into `em`.
    fn step(&self, em: &mut ExprEmitter, acc: &str, x: String) -> Result<String> {
        em.scalars.insert(self.a, acc.to_string());
        em.scalars.insert(self.b, x);
        let y = em.value(self.folded, &Index::scalar());
        em.scalars.remove(&self.a);
        em.scalars.remove(&self.b);
        y
    }
}

/// Computes the full reductions of `region` (`whole_loops::full_reduction`), in order, each
/// into a variable by a loop over the `n` elements; later values read the variable.
fn reductions(
    em: &mut ExprEmitter,
    region: &crate::ir::Region,
    elements: &[(ValueId, String)],
    n: u64,
) -> Result<()> {
    for o in &region.ops {
        let Some(fold) = Fold::of(o)? else {
            continue;
        };
        let t = em.ty(fold.result)?.clone();
        let c = em.compute(t.dtype)?;
        let start = em.value(fold.init, &Index::scalar())?;
        let acc = em.fresh("red");
        em.line(&format!("var {acc}: {} = {start};", c.wgsl()));
        em.open_loop(&format!("for (var e = 0u; e < {n}u; e = e + 1u)"), n);
        elements_at_e(em, elements, true);
        let x = em.value(fold.input, &Index::Linear("e".to_string()))?;
        elements_at_e(em, elements, false);
        let y = fold.step(em, &acc, x)?;
        em.line(&format!("{acc} = {y};"));
        em.close(None);
        em.scalars.insert(fold.result, acc);
    }
    Ok(())
}

/// Elements each invocation of a CPU adapter's loop kernel carries side by side, in chains
/// that do not depend on each other ([`chains`]).
const CHAINS: u64 = 4;

/// Bound on a launch's iterations up to which the kernel states it as a value known at run
/// time only (`32u + wh_rt_zero`): llvmpipe's compiler unrolls a loop of a few dozen constant
/// iterations whole, and the unrolled loop ran slower. 32 iterations of `x * 0.999 + 0.001`
/// over 2^20 floats (with the loop's break test): 17 ms unrolled and 13 ms rolled one element
/// an invocation, 13 ms and 5 ms four side by side; at 64 iterations, not unrolled whole, the
/// constant was the faster (19 and 23 ms, 6.3 and 7.1 ms), and a body of `sin`, `exp` and
/// `tanh` at 15 iterations ran alike either way.
const ROLLED_BELOW: u64 = 32;

/// Most ops of a loop (its condition's and body's) carried in chains. A body that long is no
/// short chain of arithmetic, and four copies of it took llvmpipe seconds to compile:
/// `jnp.interp` into a table of 60000 points in a `fori_loop` over 4096 floats (its search
/// copied 16 times, `guarded::Plan::Copies`: 9166 lines of WGSL) 2.1 s on the first call with
/// chains, 0.4 s without, and 2.9 / 3.3 ms a call after; into 1000 points 0.42 / 0.19 s and
/// 1.8 / 1.9 ms; over 16384 floats 0.55 / 0.22 s, 7.6 / 6.4 ms.
const CHAINS_MAX_OPS: u64 = 64;

/// Least elements of state for chains: below it the invocations are too few to keep the
/// adapter's threads busy.
const CHAINS_MIN_ELEMENTS: u64 = 4096;

/// Elements each invocation carries, side by side, through every iteration of a loop whose
/// predicate is a scalar (not reducing its elements, carrying packed words or stacking rows).
/// A CPU adapter runs an invocation's iterations one after the other, each waiting for the
/// last one's results (llvmpipe: a lane of a SIMD vector each, the vector through the whole
/// loop), so a loop whose iteration is one short chain of arithmetic runs at the latency of
/// its ops, not their throughput: 128 iterations of `x * 0.999 + 0.001` over 2^20 floats took
/// 33 ms one element an invocation and 11 ms four side by side. A GPU hides that latency with
/// other invocations; there it is 1. Loops whose elements each stop on their own keep one: a
/// vector then runs until the last of its 32 elements stops, not of its 8 (jax's `gammainc`
/// series over 2^16 elements: 4.1 and 2.2 ms a kernel with one, 5.0 and 2.9 with four), and
/// so do loops stacking rows, whose time goes to storing them (`lax.scan` of 50 steps over
/// 2^16 floats: 12-20 ms a kernel with one, 24-26 with four).
/// Loops of more than [`CHAINS_MAX_OPS`] ops keep one: each chain is a copy of the body in
/// the shader. `WGPU_HLO_WHILE_CHAINS=K` sets it (1 turns chains off) whatever the body.
fn chains(target: Target, n: u64, ops: u64) -> u64 {
    let k = match std::env::var("WGPU_HLO_WHILE_CHAINS") {
        Ok(v) => v.trim().parse::<u64>().unwrap_or(CHAINS).max(1),
        Err(_) if target.cpu_adapter && ops <= CHAINS_MAX_OPS => CHAINS,
        Err(_) => 1,
    };
    if k == 1 || n % k != 0 || n < CHAINS_MIN_ELEMENTS.max(k) {
        1
    } else {
        k
    }
}

/// Whether a loop stacking rows on `target`, over `n` elements of state with `ops` ops,
/// carries four adjacent elements an invocation and stores each row's four as one `vec4`.
/// llvmpipe stores a vector's lanes one by one, so such loops spend their time storing rows:
/// a `lax.scan` of 50 steps over 2^16 floats took 17.5 ms a kernel an element an invocation
/// and 8.1 ms four adjacent ones with `vec4` rows (`examples/wgsl_bench.rs`, lavapipe, 2
/// cores; four strided ones with scalar stores took longer than one). CPU adapters only (a
/// GPU stores a warp's adjacent words together), loops of at most [`CHAINS_MAX_OPS`] ops (a
/// copy of the body per element), `n` a multiple of 4. `WGPU_HLO_WHILE_QUADS=0` turns it off.
fn quads_for(target: Target, n: u64, ops: u64) -> bool {
    let off = std::env::var("WGPU_HLO_WHILE_QUADS").is_ok_and(|v| v.trim() == "0");
    !off && target.cpu_adapter && ops <= CHAINS_MAX_OPS && n % 4 == 0 && n >= 4
}

/// The variable of chain `ch` of the state held in `var` (chain 0's is `var` itself).
fn chain_var(var: &str, ch: u64) -> String {
    if ch == 0 {
        var.to_string()
    } else {
        format!("{var}_{ch}")
    }
}

/// Points the region arguments of the tensor states at chain `ch`'s variables.
fn use_chain(em: &mut ExprEmitter, chain_vars: &[(Vec<ValueId>, Vec<String>)], ch: usize) {
    for (args, vars) in chain_vars {
        if let Some(var) = vars.get(ch) {
            for &a in args {
                em.scalars.insert(a, var.clone());
            }
        }
    }
}
