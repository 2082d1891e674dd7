//! Folding partial results: the later stages of work split across invocations (multi-stage
//! reductions, split-K dots and convolutions). A first kernel leaves `parts` partial results for each of `n`
//! outputs in temporaries (element `o * parts + p`); fold kernels combine at most
//! `Target::max_invocation_iterations` of them per invocation, stage after stage, until one
//! remains per output and is written to the real results.

use std::collections::BTreeSet;

use super::dtype::Compute;
use super::expr::Binding;
use super::kernel::{self, Kernel};
use super::loop_kernel::Target;
use super::op_kernels::{temp, Plan};
use crate::error::{Error, Result};
use crate::ir::{ElementType, TensorType};

/// The compute type of `t` when buffers store it unpacked in that same WGSL type (so partials
/// of `t` can be kept in a temporary of `t`); `None` for packed narrow types.
pub fn unpacked(t: ElementType) -> Option<Compute> {
    use ElementType::*;
    Some(match t {
        F32 => Compute::F32,
        I32 => Compute::I32,
        U32 => Compute::U32,
        I64 => Compute::I64,
        U64 => Compute::U64,
        F64 => Compute::F64,
        C64 => Compute::C64,
        C128 => Compute::C128,
        _ => return None,
    })
}

/// [`wide`] for each of `outputs`: the partials' element types and their compute types, or
/// `None` when some output has no wide type.
pub fn wides(outputs: &[Binding]) -> Option<(Vec<ElementType>, Vec<Compute>)> {
    outputs
        .iter()
        .map(|o| wide(o.ty.dtype))
        .collect::<Option<Vec<_>>>()
        .map(|v| v.into_iter().unzip())
}

/// The element type partials of results of type `t` are kept in, with its compute type: `t`
/// itself when [`unpacked`], else the unpacked type packed narrow types compute in (f32 for
/// f16/bf16, i32/u32 for narrow integers, u32 0/1 for booleans: see [`load`], [`store`]); the
/// last fold rounds and packs them.
pub fn wide(t: ElementType) -> Option<(ElementType, Compute)> {
    use ElementType::*;
    if let Some(c) = unpacked(t) {
        return Some((t, c));
    }
    Some(match t {
        Pred => (U32, Compute::Bool),
        F16 | BF16 => (F32, Compute::F32),
        t if super::dtype::narrow_float(t).is_some() => (F32, Compute::F32),
        I2 | I4 | I8 | I16 => (I32, Compute::I32),
        U2 | U4 | U8 | U16 => (U32, Compute::U32),
        _ => return None,
    })
}

/// Element expression `e` of a partials temporary as a value of compute type `c`.
pub fn load(c: Compute, e: &str) -> String {
    if c == Compute::Bool {
        format!("({e} != 0u)")
    } else {
        e.to_string()
    }
}

/// `v`, of compute type `c`, as stored in a partials temporary.
pub fn store(c: Compute, v: &str) -> String {
    if c == Compute::Bool {
        format!("select(0u, 1u, {v})")
    } else {
        v.to_string()
    }
}

/// The binding of temporary `t`: `len` elements of `dtype`.
pub fn binding(t: usize, dtype: ElementType, len: u64) -> Binding {
    Binding {
        value: temp(t),
        ty: TensorType::new(vec![len as i64], dtype),
    }
}

/// The plan running `first` (which writes `partials`: `parts` partials per output, temporaries
/// `0..partials.len()`), then fold kernels down to `finals` (`n` elements each). `functions`
/// is WGSL the folds need (a reducer body), `combine(acc, vals)` the statement folding `vals`
/// into the accumulators `acc`; `sum`: it adds f32s (a single f32 result), which the folds
/// then sum with compensation ([`fold_kernel`]). Finals of packed narrow types (partials in
/// their [`wide`] type) are folded into wide temporaries, then rounded and packed by one more
/// kernel.
#[allow(clippy::too_many_arguments)]
pub fn fold(
    name: &str,
    first: Kernel,
    partials: Vec<Binding>,
    n: u64,
    parts: u64,
    finals: Vec<Binding>,
    types: &[Compute],
    functions: &str,
    combine: &dyn Fn(&[String], &[String]) -> String,
    sum: bool,
    target: Target,
) -> Result<Plan> {
    fold_after(
        Vec::new(),
        name,
        first,
        partials,
        (n, parts),
        finals,
        types,
        functions,
        combine,
        sum,
        target,
    )
}

/// [`fold`] in a plan that already has temporaries `prior` (`0..prior.len()`, which `first`
/// may read): the partials are temporaries `prior.len()..`, and the fold's own are numbered
/// after them. The plan's temporaries start with `prior`.
#[allow(clippy::too_many_arguments)]
pub fn fold_after(
    prior: Vec<TensorType>,
    name: &str,
    first: Kernel,
    partials: Vec<Binding>,
    (n, parts): (u64, u64),
    finals: Vec<Binding>,
    types: &[Compute],
    functions: &str,
    combine: &dyn Fn(&[String], &[String]) -> String,
    sum: bool,
    target: Target,
) -> Result<Plan> {
    let per = target.max_invocation_iterations.max(2);
    let base = prior.len();
    if partials
        .iter()
        .enumerate()
        .any(|(i, b)| b.value != temp(base + i))
    {
        return Err(Error::internal(format!(
            "{name}: partials are not the temporaries after the plan's others"
        )));
    }
    let mut temps = prior;
    temps.extend(partials.iter().map(|b| b.ty.clone()));
    let mut kernels = vec![first];
    let packed = finals
        .iter()
        .any(|b| super::dtype::per_word(b.ty.dtype) > 1);
    let (mut input, mut parts) = (partials, parts);
    loop {
        let groups = parts.div_ceil(per);
        let output = if groups == 1 && !packed {
            finals.clone()
        } else {
            let base = temps.len();
            let out: Vec<Binding> = input
                .iter()
                .enumerate()
                .map(|(i, b)| binding(base + i, b.ty.dtype, n * groups))
                .collect();
            temps.extend(out.iter().map(|b| b.ty.clone()));
            out
        };
        if output.len() != types.len() || input.len() != types.len() {
            return Err(Error::internal(format!(
                "{name}: partials and results differ in number"
            )));
        }
        let stage = kernels.len();
        kernels.push(fold_kernel(
            &format!("{name}_fold{stage}"),
            input,
            output.clone(),
            (n, parts, groups, per),
            types,
            functions,
            combine,
            sum,
            target,
        )?);
        if groups == 1 {
            if packed {
                kernels.push(pack_kernel(
                    &format!("{name}_pack"),
                    output,
                    finals,
                    types,
                    n,
                    target,
                )?);
            }
            break;
        }
        (input, parts) = (output, groups);
    }
    Ok(Plan::sequential(kernels, temps))
}

/// Rounds `n` wide values of each `input` (the [`wide`] type of the matching `output`) to the
/// output's type and stores them packed: invocation `t` writes word `t` of every output.
fn pack_kernel(
    name: &str,
    input: Vec<Binding>,
    output: Vec<Binding>,
    types: &[Compute],
    n: u64,
    target: Target,
) -> Result<Kernel> {
    use super::dtype;
    if input.len() != output.len() || types.len() != output.len() {
        return Err(Error::internal(format!(
            "{name}: partials and results differ in number"
        )));
    }
    let per = output
        .iter()
        .map(|b| dtype::per_word(b.ty.dtype) as u64)
        .max()
        .unwrap_or(1);
    let mut needs = BTreeSet::new();
    let mut body = String::new();
    for (j, (o, &c)) in output.iter().zip(types).enumerate() {
        let t = o.ty.dtype;
        for h in dtype::helpers_for(t) {
            needs.insert(h.to_string());
        }
        let p = dtype::per_word(t) as u64;
        if p == 1 {
            // Invocation `t` stores elements `t * per ..` of an unpacked output.
            for e in 0..per {
                body.push_str(&format!(
                    "    if (tid * {per}u + {e}u < {n}u) {{ out{j}[tid * {per}u + {e}u] = {}; }}\n",
                    store(
                        c,
                        &dtype::round(t, &load(c, &format!("in{j}[tid * {per}u + {e}u]")))
                    )
                ));
            }
            continue;
        }
        let bits = 32 / p;
        for q in 0..per / p {
            body.push_str(&format!("    var w{j}_{q}: u32 = 0u;\n"));
            for e in 0..p {
                let i = format!("(tid * {per}u + {}u)", q * p + e);
                let v = dtype::round(t, &load(c, &format!("in{j}[{i}]")));
                body.push_str(&format!(
                    "    if ({i} < {n}u) {{ w{j}_{q} = w{j}_{q} | ({} << {}u); }}\n",
                    dtype::to_bits(t, &v),
                    e * bits
                ));
            }
            let word = format!("tid * {}u + {q}u", per / p);
            body.push_str(&format!(
                "    if ({word} < {}u) {{ out{j}[{word}] = w{j}_{q}; }}\n",
                n.div_ceil(p)
            ));
        }
    }
    let comment = format!(
        "kernel {name}: rounds and packs {n} folded partials into each of {} results",
        output.len()
    );
    kernel::threaded(
        name,
        &comment,
        input,
        output,
        &needs,
        "",
        &body,
        n.div_ceil(per),
        0,
        target,
    )
}

/// One fold stage: invocation `t` folds partials `g * per ..` (at most `per`) of output `o`,
/// where `o = t / groups`, `g = t % groups`, into element `t` of `output`.
///
/// `sum` (a single f32 result whose combine adds): Neumaier's compensated summation, the
/// rounding error of every addition kept in a second accumulator and added at the end, so
/// the fold's error is about one rounding of the result however many partials it adds. A
/// plain sequential fold of thousands of partials rounded at the scale of the total every
/// time: lavapipe, the sum of 2^26 values around 1 as 4096 partials was 9.5e-7 off (8 ulp),
/// XLA's cpu 2.9e-9. The running sum goes through `wh_opaque_f32` so that no rewrite of
/// `(a + b) - a` into `b` erases the compensation; a total that is not finite (an infinity,
/// a NaN), or a compensation of zero, leaves the plain sum as IEEE addition makes it (the
/// sign of a zero total included: -0 + +0 would be +0).
#[allow(clippy::too_many_arguments)]
fn fold_kernel(
    name: &str,
    input: Vec<Binding>,
    output: Vec<Binding>,
    (n, parts, groups, per): (u64, u64, u64, u64),
    types: &[Compute],
    functions: &str,
    combine: &dyn Fn(&[String], &[String]) -> String,
    sum: bool,
    target: Target,
) -> Result<Kernel> {
    let mut body = String::new();
    body.push_str(&format!(
        "    let o = tid / {groups}u;\n    let p0 = o * {parts}u + (tid % {groups}u) * {per}u;\n    let p1 = min(p0 + {per}u, (o + 1u) * {parts}u);\n"
    ));
    let mut needs = BTreeSet::new();
    if sum && types == [Compute::F32] {
        needs.insert("wh_opaque_f32".to_string());
        body.push_str(
            "    var acc0: f32 = in0[p0];
    var comp0: f32 = -0.0f;
    for (var p: u32 = p0 + 1u; p < p1; p = p + 1u) {
        let t = in0[p];
        let s = wh_opaque_f32(acc0 + t);
        comp0 = comp0 + select((t - s) + acc0, (acc0 - s) + t, abs(acc0) >= abs(t));
        acc0 = s;
    }
    let finite = (bitcast<u32>(acc0) & 0x7f800000u) != 0x7f800000u;
    out0[tid] = select(acc0, acc0 + comp0, finite && comp0 != 0.0f);
",
        );
    } else {
        let acc: Vec<String> = (0..types.len()).map(|j| format!("acc{j}")).collect();
        let vals: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(j, &t)| load(t, &format!("in{j}[p]")))
            .collect();
        for (j, &t) in types.iter().enumerate() {
            body.push_str(&format!(
                "    var acc{j}: {} = {};\n",
                t.wgsl(),
                load(t, &format!("in{j}[p0]"))
            ));
        }
        body.push_str("    for (var p: u32 = p0 + 1u; p < p1; p = p + 1u) {\n        ");
        body.push_str(&combine(&acc, &vals));
        body.push_str("\n    }\n");
        for (j, &t) in types.iter().enumerate() {
            body.push_str(&format!(
                "    out{j}[tid] = {};\n",
                store(t, &format!("acc{j}"))
            ));
        }
    }
    let comment = format!(
        "kernel {name}: folds {parts} partials into {groups} for each of {n} outputs (at most {per} per invocation)"
    );
    kernel::threaded(
        name,
        &comment,
        input,
        output,
        &needs,
        functions,
        &body,
        n * groups,
        per,
        target,
    )
}
