//! Epilogues of dot and convolution kernels ([`crate::fusion::epilogue`]): the elementwise
//! kernel reading a dot's result becomes a WGSL function `epilogue0(i, d)` that the dot
//! kernel calls where it stored each output element: `d` is the element (at row-major
//! offset `i` of the result), and the function computes and writes the epilogue's outputs at
//! `i` (and the dot result itself when something else reads it).
//!
//! The dot emitters write their result with plain `out0[offset] = value;` statements into an
//! `array<f32>` binding after their two operand bindings. The epilogue takes a finished
//! single-kernel dot, replaces that binding with its own inputs and outputs and each store
//! with a call, and validates the result; any kernel not of that form is refused, and the
//! compile driver then lowers the two kernels separately.

use std::collections::{BTreeSet, HashMap};

use super::dtype;
use super::expr::{binding_limits, Binding, ExprEmitter, Index};
use super::kernel::{self, Kernel, RUNTIME_ZERO};
use super::library;
use super::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::fusion::Group;
use crate::ir::{ElementType, Function, Op, Operation, ValueId};

/// Most stores per invocation the CPU-adapter list takes. llvmpipe keeps private arrays in
/// the frame of the coroutine it makes of every compute shader, and compiles it in time
/// growing with their length (without Mesa's shader cache, `relu(x @ w + b)`: 128 entries
/// 9.4 s against 1.3 s unfused; 512 entries 69 s against 3.7 s; 1024 entries over ten
/// minutes, which looked like a hung execution). Larger lists keep the epilogue as a kernel
/// of its own.
pub(crate) const MAX_LISTED_STORES: usize = 32;

/// Most full-size tensors (the epilogue's outputs and its inputs of the dot's size) a replayed
/// epilogue ([`replay`]) may read or write; more and the epilogue runs as a kernel of its own.
/// A replay reads and writes one element at a time, where llvmpipe loops over the lanes for
/// each storage access, and the elementwise kernels store four elements at a time. Alternated
/// in one process (`examples/bench_ab.py`, 12 runs), B/A of separate kernels against replays:
/// any replay: MLP step 0.92, flax CNN 0.97, transformer step 0.955, GP gradient 0.93, matmul
/// 512 + tanh 1.04; replays of at most 2 streams: MLP 0.93; at most 1: MLP 0.99, CNN 0.99,
/// transformer 0.97, matmul + tanh 1.025. `WGPU_HLO_EPILOGUE_REPLAY_MAX=N` sets it.
///
/// Per-kernel times (`WGPU_HLO_DUMP`) put a replay's extra cost near 0.7 ns per element per
/// stream, a launch near 40 µs: epilogues below [`REPLAY_SEPARATE_FROM`] elements times
/// streams are replayed whatever their streams (the SGD updates of a 128 x 128 layer).
pub(crate) const REPLAY_MAX_STREAMS: usize = 1;

/// Elements times full-size streams from which an epilogue of more than
/// [`REPLAY_MAX_STREAMS`] streams runs as a kernel of its own.
const REPLAY_SEPARATE_FROM: u64 = 1 << 16;

/// The dot kernel `dot` (outputs `[d]`) with the loop kernel `epilogue` computed at its
/// stores, writing `outputs` (the merged group's, in order).
pub fn apply(
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    dot: Kernel,
    epilogue: &Group,
    outputs: &[ValueId],
    target: Target,
) -> Result<Kernel> {
    let name = dot.name.clone();
    let refuse = |why: &str| Err(Error::unimplemented(format!("{name}: epilogue: {why}")));
    let [d] = dot.outputs.as_slice() else {
        return refuse("not a kernel of one result");
    };
    if d.ty.dtype != ElementType::F32 {
        return refuse("result is not f32");
    }
    let decl = "var<storage, read_write> out0: array<f32>;";
    let Some(at) = dot.wgsl.find(decl) else {
        return refuse("no f32 result binding");
    };
    let line_start = dot.wgsl[..at].rfind('\n').map_or(0, |k| k + 1);
    let line_end = dot.wgsl[at..]
        .find('\n')
        .map_or(dot.wgsl.len(), |k| at + k + 1);
    // CPU adapters replay a large stored block through the epilogue (see `replay`).
    let replayed = if target.cpu_adapter {
        replay(&dot.wgsl[line_end..])
    } else {
        None
    };

    let fused = |v: ValueId| epilogue.members.contains(&v);
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    // The dot's inputs (its operands, or a prologue's inputs) keep their bindings, one per
    // binding even where a value is bound twice (`x @ x.T`); the epilogue's own inputs
    // follow. Deduplicated, the epilogue's first input took the second operand's binding
    // number, and the epilogue of every Gram matrix was refused as reading the dot's inputs.
    // An epilogue reading an operand of the dot (`where(p, r, r @ r)`, a residual `x + x @ w`)
    // binds it again: the dot's binding may hold it in another layout or as a texture.
    em.inputs.extend(dot.inputs.iter().cloned());
    em.foreign_inputs = dot.inputs.len();
    em.scalars.insert(d.value, "d".to_string());
    // Values of no dimensions that full-size ones read (a loop counter, a step size, a
    // predicate computed from them) are the same at every element: a function the dot's
    // entry point calls first computes them into private variables, where each element
    // computed them again (expm's squaring step loaded four scalars per element).
    let uniform = uniform_values(f, defs, epilogue, d.value);
    let mut uniform_decls = String::new();
    let mut uniform_fn = String::new();
    if !uniform.is_empty() {
        em.begin_function(&[]);
        let mut names = Vec::new();
        for (k, &u) in uniform.iter().enumerate() {
            let x = em.value(u, &Index::scalar())?;
            let name = format!("wh_ep_u{k}");
            let ty = em.compute(em.ty(u)?.dtype)?.wgsl();
            em.line(&format!("{name} = {x};"));
            uniform_decls.push_str(&format!("var<private> {name}: {ty};\n"));
            names.push((u, name));
        }
        if let Some(cond) = skip_condition(defs, epilogue, d.value, outputs, &names) {
            em.line(&format!("{SKIP} = {cond};"));
            uniform_decls.push_str(&format!("var<private> {SKIP}: bool;\n"));
        }
        // Loaded once an invocation: a texture's copy would cost more than it saves.
        let body = storage_loads(
            with_runtime_zero(em.end_function()),
            dot.inputs.len()..em.inputs.len(),
        );
        uniform_fn = format!("\nfn epilogue_uniform() {{\n{body}}}\n");
        em.scalars.extend(names);
    }
    // A replay may visit aligned groups of four (`QUAD_STUB`), elements, or both.
    let quad = replayed
        .as_ref()
        .is_some_and(|(s, _)| s.contains(QUAD_CALL));
    let element = replayed
        .as_ref()
        .is_none_or(|(s, _)| s.contains("epilogue0(o, out0[o])"));
    let mut outs = Vec::new();
    for &v in outputs {
        let ty = em.ty(v)?.clone();
        if ty.dtype != ElementType::F32 || ty.shape != d.ty.shape {
            return refuse(&format!(
                "output {ty} is not an f32 tensor of the dot's shape"
            ));
        }
        outs.push(Binding { value: v, ty });
    }
    let mut body = String::new();
    if element {
        let idx = Index::Linear("i".into());
        for (j, &v) in outputs.iter().enumerate() {
            let x = em.value(v, &idx)?;
            em.line(&format!("out{j}[i] = {x};"));
        }
        body = std::mem::take(&mut em.body);
    }
    // Outputs stored as `vec4`s: all but the dot's own (which its stores write element by
    // element), where no element-wise epilogue writes them.
    let vec4_outs = quad && !element;
    let quad_body = if quad {
        quad_epilogue(&mut em, d.value, outputs, vec4_outs)?
    } else {
        String::new()
    };
    if (0..dot.inputs.len())
        .any(|j| body.contains(&format!("in{j}[")) || quad_body.contains(&format!("in{j}[")))
    {
        return refuse("it reads the dot's inputs");
    }
    if replayed.is_some() {
        let elements = d.ty.num_elements();
        let full = em.inputs[dot.inputs.len()..]
            .iter()
            .filter(|b| b.ty.num_elements() >= elements)
            .count();
        let max: usize = std::env::var("WGPU_HLO_EPILOGUE_REPLAY_MAX")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(REPLAY_MAX_STREAMS);
        let streams = full + outs.len();
        if streams > max && (streams * elements) as u64 >= REPLAY_SEPARATE_FROM {
            return refuse(&format!(
                "{streams} full-size tensors of {elements} elements: a kernel of its own is cheaper than a replay"
            ));
        }
    }
    if replayed.is_some() {
        // A replayed epilogue reads one element at a time, where a texel fetch costs more
        // than llvmpipe's loop of scalar loads (`texture_reads::STORAGE_MARK`); its groups of
        // four are left to the texture rewrite (a `vec4` load, or a texel fetch).
        body = storage_loads(body, dot.inputs.len()..em.inputs.len());
    }
    let body = with_runtime_zero(body);
    let quad_body = with_runtime_zero(storage_loads(quad_body, dot.inputs.len()..em.inputs.len()));
    if let Some(why) = binding_limits(&em.inputs, &outs, &target) {
        return refuse(&why);
    }
    let mut needs: BTreeSet<String> = em.needs.clone();
    needs.extend(kernel::called_library_functions(&body));
    needs.extend(kernel::called_library_functions(&quad_body));
    // Library functions a prologue already brought in.
    needs.retain(|n| !dot.wgsl.contains(&format!("fn {n}(")));

    // Bindings: the epilogue's inputs after the operands, then its outputs.
    let mut decls = String::new();
    for (k, b) in em.inputs.iter().enumerate().skip(dot.inputs.len()) {
        decls.push_str(&format!(
            "@group(0) @binding({k}) var<storage, read> in{k}: array<{}>; // {} {}\n",
            dtype::storage_elem(b.ty.dtype),
            b.value,
            b.ty
        ));
    }
    for (j, b) in outs.iter().enumerate() {
        let elem = if vec4_outs && j > 0 {
            "vec4<f32>"
        } else {
            "f32"
        };
        decls.push_str(&format!(
            "@group(0) @binding({}) var<storage, read_write> out{j}: array<{elem}>; // {} {}\n",
            em.inputs.len() + j,
            b.value,
            b.ty
        ));
    }
    if (body.contains(RUNTIME_ZERO)
        || quad_body.contains(RUNTIME_ZERO)
        || uniform_fn.contains(RUNTIME_ZERO))
        && !dot.wgsl.contains(&format!("var<private> {RUNTIME_ZERO}"))
    {
        decls.push_str(&format!("var<private> {RUNTIME_ZERO}: u32;\n"));
    }
    decls.push_str(&uniform_decls);
    let unexpected = || Error::unimplemented(format!("{name}: epilogue: unexpected stores"));
    let (mut rest, stores) = match &replayed {
        Some((src, _)) => (src.clone(), 0),
        None => {
            stores_to_calls(&dot.wgsl[line_end..], target.cpu_adapter).ok_or_else(unexpected)?
        }
    };
    if !uniform_fn.is_empty() {
        let open = rest
            .find("fn main(")
            .and_then(|m| rest[m..].find("{\n").map(|b| m + b + 2))
            .ok_or_else(unexpected)?;
        rest.insert_str(open, "    epilogue_uniform();\n");
        if uniform_decls.contains(SKIP) {
            rest = skip_contraction(&rest);
        }
    }
    let mut iterations = dot.iterations.saturating_add(em.iterations());
    if let Some((_, elements)) = replayed {
        iterations = iterations.saturating_add(elements * (1 + em.iterations()));
    } else if target.cpu_adapter {
        // llvmpipe compiles each inlined copy of the epilogue (the register-blocked kernels
        // store 32 elements) for tens of seconds: the stores fill a list, and one loop at the
        // end of the kernel runs the epilogue once per element.
        let end = main_end(&rest).ok_or_else(unexpected)?;
        let first = rest.find("wh_ep_d[").ok_or_else(unexpected)?;
        // Stores in a function main calls (a register block's `store_row`) may run more
        // than once per invocation: the list would overflow.
        if rest.match_indices("wh_ep_d[").any(|(at, _)| at > end) {
            return refuse("the dot kernel stores outside its entry point");
        }
        if rest[first..end].contains("return") {
            return refuse("the dot kernel returns after its first store");
        }
        if stores > MAX_LISTED_STORES {
            return refuse(&format!(
                "{stores} stores per invocation (a list of at most {MAX_LISTED_STORES})"
            ));
        }
        // Each store runs at most once per invocation, so the list holds them all.
        if rest
            .match_indices("wh_ep_d[")
            .any(|(at, _)| inside_loop(&rest, at))
        {
            return refuse("the dot kernel stores inside a loop");
        }
        rest.insert_str(
            end,
            "    for (var k: u32 = 0u; k < wh_ep_n; k = k + 1u) { epilogue0(wh_ep_i[k], wh_ep_d[k]); }\n",
        );
        decls.push_str(&format!(
            "var<private> wh_ep_i: array<u32, {stores}>;\nvar<private> wh_ep_d: array<f32, {stores}>;\nvar<private> wh_ep_n: u32;\n"
        ));
        iterations = iterations.saturating_add(stores as u64 * (1 + em.iterations()));
    }
    let mut wgsl = String::new();
    wgsl.push_str(&dot.wgsl[..line_start]);
    wgsl.push_str(&decls);
    wgsl.push_str(&rest);
    wgsl.push_str(&library::resolve(needs.iter().map(String::as_str))?);
    wgsl.push_str(&uniform_fn);
    let fuses = em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ");
    if element {
        wgsl.push_str(&format!(
            "\n// epilogue: fuses {fuses}\nfn epilogue0(i: u32, d: f32) {{\n{body}}}\n"
        ));
    }
    if quad {
        wgsl.push_str(&format!(
            "\n// epilogue: fuses {fuses} (the aligned group of four elements from i)\n\
             fn epilogue0q(i: u32) {{\n    let d = vec4<f32>(out0[i], out0[i + 1u], out0[i + 2u], \
             out0[i + 3u]);\n{quad_body}}}\n"
        ));
    }
    kernel::validate(&name, &wgsl, target.caps)?;
    Ok(Kernel {
        name: dot.name,
        wgsl,
        inputs: em.inputs.clone(),
        outputs: outs,
        workgroups: dot.workgroups,
        iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// The statements of `epilogue0q(i)`, the epilogue of the four elements from `i` (a multiple
/// of 4 in a row whose length is a multiple of 4) whose dot results are `d.x` to `d.w`: each
/// input read at them is read by its aligned group of four ([`super::expr::Quads`]), and
/// each output is stored element by element, or with `vec4_outs` all but the first as one
/// `vec4` (the first is the dot's own result binding, which its stores write by elements).
fn quad_epilogue(
    em: &mut ExprEmitter,
    d: ValueId,
    outputs: &[ValueId],
    vec4_outs: bool,
) -> Result<String> {
    // An error refuses the whole epilogue, and `apply` drops `em` with it: the state set
    // here need not be restored then.
    em.begin_function(&[]);
    let saved = em.quads.replace(super::expr::Quads::linear_fours(true));
    let saved_d = em.scalars.get(&d).cloned();
    let mut values: Vec<Vec<String>> = vec![Vec::new(); outputs.len()];
    for (e, lane) in ["x", "y", "z", "w"].iter().enumerate() {
        em.line(&format!("let l{e} = i + {e}u;"));
        em.scalars.insert(d, format!("d.{lane}"));
        for (j, &v) in outputs.iter().enumerate() {
            values[j].push(em.value(v, &Index::Linear(format!("l{e}")))?);
        }
    }
    for (j, vals) in values.iter().enumerate() {
        if vec4_outs && j > 0 && vals.len() == 4 {
            em.line(&format!(
                "out{j}[i >> 2u] = vec4<f32>({});",
                vals.join(", ")
            ));
        } else {
            for (e, x) in vals.iter().enumerate() {
                em.line(&format!("out{j}[l{e}] = {x};"));
            }
        }
    }
    let body = em.end_function();
    em.quads = saved;
    match saved_d {
        Some(name) => em.scalars.insert(d, name),
        None => em.scalars.remove(&d),
    };
    Ok(body)
}

/// `body` with its loads of inputs `inputs` marked to keep their storage bindings
/// (`texture_reads::STORAGE_MARK`), but for the first loads of groups of four
/// (`texture_reads::QUAD_MARK`, `QUAD_STREAM_MARK`), which the texture rewrite reads as
/// groups.
fn storage_loads(mut body: String, inputs: std::ops::Range<usize>) -> String {
    use crate::codegen::texture_reads::{QUAD_MARK, QUAD_STREAM_MARK, STORAGE_MARK};
    for j in inputs {
        let open = format!("in{j}[");
        let mut out = String::with_capacity(body.len());
        let mut rest = body.as_str();
        while let Some(at) = rest.find(&open) {
            let after = &rest[at + open.len()..];
            let boundary = rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            out.push_str(&rest[..at + open.len()]);
            let grouped = after.starts_with(QUAD_MARK) || after.starts_with(QUAD_STREAM_MARK);
            if boundary && !grouped {
                out.push_str(STORAGE_MARK);
                out.push(' ');
            }
            rest = after;
            // A group's other three loads, `, inJ[Q + 1u], inJ[Q + 2u], inJ[Q + 3u]`, stay as
            // they are (the rewrite matches them as written).
            if boundary && grouped {
                let close = crate::codegen::texture_reads::closing_bracket(
                    &body[body.len() - rest.len() - 1..],
                    0,
                );
                if let Some(close) = close {
                    let start = if after.starts_with(QUAD_MARK) {
                        QUAD_MARK.len()
                    } else {
                        QUAD_STREAM_MARK.len()
                    };
                    let q = after[start..close - 1].trim();
                    let tail = format!(", in{j}[{q} + 1u], in{j}[{q} + 2u], in{j}[{q} + 3u]");
                    if after[close..].starts_with(&tail) {
                        out.push_str(&after[..close + tail.len()]);
                        rest = &after[close + tail.len()..];
                    }
                }
            }
        }
        out.push_str(rest);
        body = out;
    }
    body
}

/// `body` setting the run-time zero first where it uses it: constants are built from it, and
/// it comes from a buffer length (below 2^31 elements), which no compiler can fold.
fn with_runtime_zero(body: String) -> String {
    if body.contains(RUNTIME_ZERO) {
        format!("    {RUNTIME_ZERO} = arrayLength(&out0) >> 31u;\n{body}")
    } else {
        body
    }
}

/// The values of no dimensions that ops of `epilogue` with dimensions read (not `d`, not
/// constants), in value order: each is the same at every element of the dot's result.
fn uniform_values(
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    epilogue: &Group,
    d: ValueId,
) -> Vec<ValueId> {
    let zero_d = |v: ValueId| {
        f.values
            .get(v.index())
            .and_then(|t| t.as_tensor())
            .is_some_and(|t| t.shape.is_empty())
    };
    let mut out = BTreeSet::new();
    for m in &epilogue.members {
        let Some(op) = defs.get(m) else { continue };
        if op.results.iter().all(|&r| zero_d(r)) {
            continue;
        }
        for &o in &op.operands {
            let constant = defs
                .get(&o)
                .is_some_and(|c| matches!(c.op, Op::Constant(_)));
            if o != d && zero_d(o) && !constant {
                out.insert(o);
            }
        }
    }
    out.into_iter().collect()
}

/// The private `bool` an epilogue's uniform function sets where no output reads the dot's
/// result ([`skip_condition`]), and the dot's contraction then runs no step
/// ([`skip_contraction`]).
const SKIP: &str = "wh_ep_skip";

/// A WGSL condition on the uniform values' variables (`names`) under which no output of the
/// epilogue reads the dot's result `d`: each output is `select(p, t, e)` of a predicate `p`
/// that is a uniform value (or a broadcast or reshape of one) and one side that does not
/// depend on `d` (an output that does not depend on `d` at all reads it under any
/// condition). `None` where some output is otherwise.
///
/// `jax.scipy.linalg.expm`'s squaring loop runs 16 steps of `where(i < s, r @ r, r)`: with
/// `s` of 1 or 2 for a matrix of norm near 1, most steps compute a product only to drop it.
/// On lavapipe each 64 x 64 product took 0.3 ms of the call's 9.8 (16 of them: 5 ms).
fn skip_condition(
    defs: &HashMap<ValueId, &Operation>,
    epilogue: &Group,
    d: ValueId,
    outputs: &[ValueId],
    names: &[(ValueId, String)],
) -> Option<String> {
    // Memoized: an epilogue's values form a DAG whose shared operands (`x * x` chained) would
    // make a plain recursion exponential in its depth.
    fn depends(
        defs: &HashMap<ValueId, &Operation>,
        epilogue: &Group,
        d: ValueId,
        v: ValueId,
        seen: &mut HashMap<ValueId, bool>,
        depth: usize,
    ) -> bool {
        // Past this depth, dependent (no skip): the recursion stays shallow.
        if v == d || depth > 256 {
            return true;
        }
        if !epilogue.members.contains(&v) {
            return false;
        }
        if let Some(&known) = seen.get(&v) {
            return known;
        }
        // Provisionally independent: the IR has no cycles, so this is never read back early.
        seen.insert(v, false);
        let result = match defs.get(&v) {
            None => true,
            Some(op) => {
                !op.regions.is_empty()
                    || op
                        .operands
                        .iter()
                        .any(|&o| depends(defs, epilogue, d, o, seen, depth + 1))
            }
        };
        seen.insert(v, result);
        result
    }
    let mut seen = HashMap::new();
    let uniform_of = |mut p: ValueId| -> Option<&str> {
        for _ in 0..8 {
            if let Some((_, name)) = names.iter().find(|(u, _)| *u == p) {
                return Some(name);
            }
            let op = defs.get(&p).filter(|_| epilogue.members.contains(&p))?;
            match (&op.op, op.operands.as_slice()) {
                (Op::BroadcastInDim { .. } | Op::Reshape, [x]) => p = *x,
                _ => return None,
            }
        }
        None
    };
    let mut conds = Vec::new();
    for &v in outputs {
        if !depends(defs, epilogue, d, v, &mut seen, 0) {
            continue;
        }
        let op = defs.get(&v).filter(|_| epilogue.members.contains(&v))?;
        let (Op::Select, [p, t, e]) = (&op.op, op.operands.as_slice()) else {
            return None;
        };
        let u = uniform_of(*p)?;
        match (
            depends(defs, epilogue, d, *t, &mut seen, 0),
            depends(defs, epilogue, d, *e, &mut seen, 0),
        ) {
            (false, true) => conds.push(u.to_string()),
            (true, false) => conds.push(format!("!{u}")),
            _ => return None,
        }
    }
    (!conds.is_empty()).then(|| conds.join(" && "))
}

/// `src` (a dot kernel whose entry point calls the epilogue's uniform function first) with its
/// contraction cut to no step where [`SKIP`] is set: the one `let ke = E;` (the end of the
/// invocation's contracting range, which every step and tile load tests) becomes
/// `select(E, kb, SKIP)`, and the dot's result is zero, which the epilogue does not read.
/// Unchanged where the kernel has no such line, more than one, or sums partial contractions.
fn skip_contraction(src: &str) -> String {
    const KE: &str = "\n    let ke = ";
    if src.matches(KE).count() != 1 || src.contains("wh_part") || !src.contains("let kb = ") {
        return src.to_string();
    }
    let Some(at) = src.find(KE).map(|k| k + KE.len()) else {
        return src.to_string();
    };
    let Some(end) = src[at..].find(";\n").map(|k| at + k) else {
        return src.to_string();
    };
    format!(
        "{}select({}, kb, {SKIP}){}",
        &src[..at],
        &src[at..end],
        &src[end..]
    )
}

/// The function an emitter appends to a kernel whose invocations store a block of results
/// too large for the epilogue's list ([`replay`]): `wh_ep_replay(params)` runs `block`, which
/// visits each element the invocation stored, in order, as `wh_ep_element(o);` (`o` a `u32`
/// `let` holding its offset in the result). `args` are the entry point's arguments for
/// `params`, `elements` the most elements `block` visits. The kernel itself never calls it;
/// `wh_ep_element` is an empty function until [`replay`] makes it the epilogue.
///
/// A block may visit an aligned group of four elements of one row as `wh_ep_quad(o);` (`o` a
/// multiple of 4, the row's length a multiple of 4, all four stored): the epilogue then
/// computes the four together and reads its inputs by groups ([`QUAD_STUB`]).
pub(crate) fn replay_function(params: &str, args: &str, elements: u64, block: &str) -> String {
    format!(
        "\n// {REPLAY_MARK} wh_ep_replay({args}); {elements}\nfn wh_ep_replay({params}) {{\n{block}}}\n{ELEMENT_STUB}\n{QUAD_STUB}\n"
    )
}

const REPLAY_MARK: &str = "wh_ep_replay call:";
const ELEMENT_STUB: &str = "fn wh_ep_element(o: u32) {}";
/// The function a replayed block calls per aligned group of four elements. [`replay`] makes
/// the calls `epilogue0q(o);`, an epilogue computing the four elements at once: each input it
/// reads at them is one aligned group ([`super::expr::Quads`]), loaded as one `vec4` (llvmpipe
/// runs a storage load as a loop over its SIMD lanes: one loop where the element-wise replay
/// made four), and each output but the dot's own is stored as one `vec4`.
/// `WGPU_HLO_EPILOGUE_QUADS=0` replays such groups element by element.
const QUAD_STUB: &str = "fn wh_ep_quad(o: u32) {}";
/// The call [`replay`] makes of each [`QUAD_STUB`] call.
const QUAD_CALL: &str = "epilogue0q(o);";

/// On CPU adapters, a kernel with a [`replay_function`] keeps its stores (into the epilogue's
/// first output, an f32 tensor of the dot's shape), and its entry point ends with the call of
/// that function, which reads each element of the block back and runs the epilogue on it:
/// one copy of the epilogue in the shader however many elements an invocation stores. The
/// shared-rows dots store 128-256 elements an invocation, the convolutions up to 512, past
/// what the list of stores takes ([`MAX_LISTED_STORES`]), and their epilogues ran as kernels
/// of their own. `src` (the kernel after the result's binding) made so, and the elements per
/// invocation; `None` without the function, or with `WGPU_HLO_EPILOGUE_REPLAY=0`.
fn replay(src: &str) -> Option<(String, u64)> {
    if std::env::var("WGPU_HLO_EPILOGUE_REPLAY").is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    let at = src.find(REPLAY_MARK)?;
    let line = src[at + REPLAY_MARK.len()..].lines().next()?;
    let (call, elements) = line.split_once(';')?;
    let elements: u64 = elements.trim().parse().ok()?;
    if !src.contains(ELEMENT_STUB) {
        return None;
    }
    let quads = !crate::fusion::switched_off("WGPU_HLO_EPILOGUE_QUADS");
    let mut out = src
        .replacen(ELEMENT_STUB, "", 1)
        .replacen(QUAD_STUB, "", 1)
        .replace("wh_ep_element(o);", "epilogue0(o, out0[o]);")
        .replace(
            "wh_ep_quad(o);",
            if quads {
                QUAD_CALL
            } else {
                "for (var e = 0u; e < 4u; e = e + 1u) { epilogue0(o + e, out0[o + e]); }"
            },
        );
    let end = main_end(&out)?;
    out.insert_str(end, &format!("    {};\n", call.trim()));
    Some((out, elements))
}

/// `src` with each statement `out0[offset] = value;` made `epilogue0(offset, value);`, or with
/// `buffered`, appended to the list `wh_ep_i`/`wh_ep_d` (`wh_ep_n` entries); and how many
/// statements it changed. `None` when `out0` appears otherwise (read back, or stored in
/// another form).
fn stores_to_calls(src: &str, buffered: bool) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut rest = src;
    let mut count = 0;
    while let Some(k) = rest.find("out0[") {
        out.push_str(&rest[..k]);
        let after = &rest[k + "out0[".len()..];
        // The offset: up to the matching bracket.
        let mut depth = 1usize;
        let mut end = None;
        for (p, c) in after.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(p);
                        break;
                    }
                }
                ';' | '{' | '}' => return None,
                _ => {}
            }
        }
        let end = end?;
        let offset = &after[..end];
        let value_and_rest = after[end + 1..].strip_prefix(" = ")?;
        let semi = value_and_rest.find(';')?;
        let value = &value_and_rest[..semi];
        if value.contains("out0") || value.contains('{') || value.contains('}') {
            return None;
        }
        if buffered {
            out.push_str(&format!(
                "wh_ep_i[wh_ep_n] = {offset}; wh_ep_d[wh_ep_n] = {value}; wh_ep_n = wh_ep_n + 1u;"
            ));
        } else {
            out.push_str(&format!("epilogue0({offset}, {value});"));
        }
        count += 1;
        rest = &value_and_rest[semi + 1..];
    }
    out.push_str(rest);
    Some((out, count))
}

/// Whether offset `at` of `src` lies inside a `for`, `loop` or `while` body.
fn inside_loop(src: &str, at: usize) -> bool {
    let mut stack: Vec<bool> = Vec::new();
    let mut stmt = 0;
    // Parentheses open: a `for` header's semicolons do not end a statement.
    let mut parens = 0usize;
    for (p, c) in src[..at].char_indices() {
        match c {
            '(' => parens += 1,
            ')' => parens = parens.saturating_sub(1),
            ';' if parens > 0 => {}
            '{' => {
                let head = src[stmt..p].trim_start();
                stack.push(
                    head.starts_with("for")
                        || head.starts_with("loop")
                        || head.starts_with("while"),
                );
                stmt = p + 1;
            }
            '}' => {
                stack.pop();
                stmt = p + 1;
            }
            ';' => stmt = p + 1,
            _ => {}
        }
    }
    stack.contains(&true)
}

/// The offset of the closing brace of `fn main` in `src`.
fn main_end(src: &str) -> Option<usize> {
    let start = src.find("fn main(")?;
    let open = start + src[start..].find(") {")? + 2;
    let mut depth = 0usize;
    for (p, c) in src[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + p);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{replay, replay_function, storage_loads, stores_to_calls};
    use crate::codegen::texture_reads::{QUAD_STREAM_MARK, STORAGE_MARK};

    #[test]
    fn replayed_groups_of_four_call_the_grouped_epilogue() {
        let block = "    let o = m0 * 4u;\n    wh_ep_quad(o);\n";
        let src = format!(
            "fn main() {{\n    out0[3u] = 1.0;\n}}\n{}",
            replay_function("m0: u32", "7u", 256, block)
        );
        let (out, _) = replay(&src).unwrap_or_default();
        assert!(out.contains("    epilogue0q(o);"), "{out}");
        assert!(!out.contains("wh_ep_quad"), "{out}");
    }

    #[test]
    fn storage_marks_leave_groups_of_four_to_the_texture_rewrite() {
        let body = format!(
            "let q = vec4<f32>(in3[{QUAD_STREAM_MARK} (i + 4u)], in3[(i + 4u) + 1u], \
             in3[(i + 4u) + 2u], in3[(i + 4u) + 3u]);\nlet v = in3[j] + in13[k] + xin3[2u];\n"
        );
        let out = storage_loads(body, 3..4);
        assert_eq!(
            out,
            format!(
                "let q = vec4<f32>(in3[{QUAD_STREAM_MARK} (i + 4u)], in3[(i + 4u) + 1u], \
                 in3[(i + 4u) + 2u], in3[(i + 4u) + 3u]);\nlet v = in3[{STORAGE_MARK} j] + in13[k] \
                 + xin3[2u];\n"
            )
        );
    }

    #[test]
    fn replay_calls_the_block_function_at_the_end_of_main() {
        let block = "    let o = m0 + 1u;\n    wh_ep_element(o);\n";
        let src = format!(
            "fn main() {{\n    if (a) {{ return; }}\n    out0[3u] = 1.0;\n}}\n{}",
            replay_function("m0: u32", "7u", 256, block)
        );
        let (out, elements) = replay(&src).unwrap_or_default();
        assert_eq!(elements, 256);
        assert!(
            out.contains("    out0[3u] = 1.0;\n    wh_ep_replay(7u);\n}"),
            "{out}"
        );
        assert!(out.contains("    epilogue0(o, out0[o]);"), "{out}");
        assert!(!out.contains("wh_ep_element"), "{out}");
        // Kernels without it: the list or the inline calls serve.
        assert!(replay("fn main() {\n    out0[0u] = 1.0;\n}\n").is_none());
    }

    #[test]
    fn stores_become_calls() {
        let src = "if (m < 4u) { out0[(b * 4u + m) * 8u + n] = acc0_1.y; }\nout0[i] = a[j];\n";
        assert_eq!(
            stores_to_calls(src, false),
            Some((
                "if (m < 4u) { epilogue0((b * 4u + m) * 8u + n, acc0_1.y); }\nepilogue0(i, a[j]);\n"
                    .to_string(),
                2
            ))
        );
        let (buffered, n) = stores_to_calls(src, true).unwrap_or_default();
        assert_eq!(n, 2);
        assert!(buffered.starts_with("if (m < 4u) { wh_ep_i[wh_ep_n] = (b * 4u + m) * 8u + n;"));
    }

    #[test]
    fn reads_are_refused() {
        assert_eq!(stores_to_calls("let x = out0[i] + 1.0;", false), None);
        assert_eq!(stores_to_calls("out0[i] = out0[i] + 1.0;", true), None);
        assert_eq!(stores_to_calls("out0[i] += 1.0;", false), None);
    }

    #[test]
    fn stores_in_loops_are_found() {
        let src =
            "fn main() {\n    for (var k = 0u; k < 4u; k++) { if (k > 1u) { X; } }\n    Y;\n}";
        let x = src.find('X').unwrap_or_default();
        let y = src.find('Y').unwrap_or_default();
        assert!(super::inside_loop(src, x));
        assert!(!super::inside_loop(src, y));
    }

    #[test]
    fn main_end_is_its_closing_brace() {
        let src = "fn f() { }\nfn main(a: u32) {\n    if (a > 0u) { return; }\n}\nfn g() {}\n";
        let end = super::main_end(src).unwrap_or_default();
        assert_eq!(&src[end..end + 2], "}\n");
        assert!(src[..end].ends_with("return; }\n"));
    }
}
