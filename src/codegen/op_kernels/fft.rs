//! `fft`. Transforms of more than [`PASSES_FROM`] terms run axis by axis in factored passes
//! ([`plan`]: 1000x1000 complex along one axis, 7 s -> 0.48 s on lavapipe); small ones as a
//! direct DFT in one kernel: one thread per result element sums over every position of the
//! transformed (innermost) dimensions. Twiddles come from
//! `sinpi/cospi` of an exactly reduced phase `((k·n) mod N) / N`, so their error does not grow
//! with N. `IRFFT` rebuilds the full spectrum from the half it receives (Hermitian symmetry)
//! and keeps the real part.

use std::collections::HashMap;

use super::per_element::build;
use crate::codegen::dtype::Compute;
use crate::codegen::expr::{Binding, ExprEmitter, Index};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::attr::FftType;
use crate::ir::{Function, Op, Operation, ValueId};

/// Emits the kernel for an `fft`.
pub fn emit(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::Fft {
        fft_type,
        fft_length,
    } = &op.op
    else {
        return Err(Error::internal("fft emitter on another op"));
    };
    let ([x], [result]) = (&op.operands[..], &op.results[..]) else {
        return Err(Error::invalid("fft takes one operand and gives one result"));
    };
    let fused = |_: ValueId| false;
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);
    let out = Binding {
        value: *result,
        ty: em.ty(*result)?.clone(),
    };
    let xt = em.ty(*x)?.clone();
    let xc = em.compute(xt.dtype)?;
    let rc = em.compute(out.ty.dtype)?;
    // The complex type of the arithmetic.
    let cc = match (xc, rc) {
        (Compute::C64, _) | (_, Compute::C64) => Compute::C64,
        (Compute::C128, _) | (_, Compute::C128) => Compute::C128,
        _ => {
            return Err(Error::invalid(format!(
                "fft from {} to {}",
                xt.dtype, out.ty.dtype
            )))
        }
    };
    let real = if cc == Compute::C64 { "f32" } else { "f64" };
    let sfx = cc.suffix();
    let rdims = out.ty.dims();
    let xdims = xt.dims();
    let rank = rdims.len();
    let nf = fft_length.len();
    if nf == 0 || nf > rank || fft_length.iter().any(|&n| n < 0) {
        return Err(Error::invalid(format!(
            "fft_length {fft_length:?} on a rank-{rank} result"
        )));
    }
    let lens: Vec<usize> = fft_length.iter().map(|&n| n as usize).collect();
    let positions: usize = lens.iter().product();
    let first = rank - nf;
    let inverse = matches!(fft_type, FftType::Ifft | FftType::Irfft);
    em.needs.insert(format!("wh_cmul_{sfx}"));
    em.needs.insert(format!("wh_sinpi_cospi_{}", sfx));
    let comment = format!(
        "kernel {name}: fft {fft_type:?} of lengths {fft_length:?}, {positions} terms per element\nfuses: stablehlo.fft"
    );
    build(name, em, vec![out], "", &comment, target, |em, lin, e| {
        let ri = em.multi(&Index::Linear(lin.to_string()), &rdims);
        let acc = format!("acc{e}");
        em.line(&format!(
            "var {acc}: vec2<{real}> = vec2<{real}>(0.0, 0.0);"
        ));
        if positions > 0 {
            em.open_loop(
                &format!("for (var j: u32 = 0u; j < {positions}u; j = j + 1u)"),
                positions as u64,
            );
            let jm = em.multi(&Index::Linear("j".into()), &lens);
            em.line(&format!("var t: {real} = 0.0;"));
            for (d, &n) in lens.iter().enumerate() {
                em.line(&format!(
                    "t = t + {real}(({} * {}) % {n}u) / {real}({n});",
                    ri[first + d],
                    jm[d]
                ));
            }
            em.line(&format!("let sc = wh_sinpi_cospi_{}(2.0 * t);", sfx));
            let sign = if inverse { "" } else { "-" };
            em.line(&format!("let tw = vec2<{real}>(sc.y, {sign}sc.x);"));
            em.line(&format!("var xv: vec2<{real}>;"));
            let direct: Vec<String> = (0..rank)
                .map(|d| {
                    if d < first {
                        ri[d].clone()
                    } else {
                        jm[d - first].clone()
                    }
                })
                .collect();
            let load = |em: &mut ExprEmitter, idx: Vec<String>| -> Result<String> {
                let v = em.value(*x, &Index::Multi(idx))?;
                Ok(if xc.is_complex() {
                    v
                } else {
                    format!("vec2<{real}>({real}({v}), 0.0)")
                })
            };
            if *fft_type == FftType::Irfft {
                // Only the first n/2 + 1 entries of the last dimension are stored.
                let last = lens[nf - 1];
                let stored = xdims.get(rank - 1).copied().unwrap_or(0);
                em.open(&format!("if ({} < {stored}u)", jm[nf - 1]));
                let v = load(em, direct)?;
                em.line(&format!("xv = {v};"));
                em.close(Some("else"));
                let mirrored: Vec<String> = (0..rank)
                    .map(|d| {
                        if d < first {
                            ri[d].clone()
                        } else {
                            let n = lens[d - first];
                            format!("(({n}u - {}) % {n}u)", jm[d - first])
                        }
                    })
                    .collect();
                let v = load(em, mirrored)?;
                em.line(&format!("xv = {v} * vec2<{real}>(1.0, -1.0);"));
                em.close(None);
                let _ = last;
            } else {
                let v = load(em, direct)?;
                em.line(&format!("xv = {v};"));
            }
            em.line(&format!("{acc} = {acc} + wh_cmul_{sfx}(xv, tw);"));
            em.close(None);
            if inverse {
                em.line(&format!("{acc} = {acc} / {real}({positions});"));
            }
        }
        Ok(vec![if *fft_type == FftType::Irfft {
            format!("{acc}.x")
        } else {
            acc
        }])
    })
}

/// Transforms with more terms per element than this run axis by axis, each axis split in two
/// passes (see [`plan`]).
pub const PASSES_FROM: usize = 64;

/// `(n1, n2)` with `n1 * n2 = n` and `n1 <= n2` as close to √n as the factors allow; `None`
/// for primes.
fn split(n: usize) -> Option<(usize, usize)> {
    let mut n1 = (n as f64).sqrt().floor() as usize;
    while n1 > 1 {
        if n % n1 == 0 {
            return Some((n1, n / n1));
        }
        n1 -= 1;
    }
    None
}

/// The sums one pass computes along its axis.
#[derive(Clone, Copy)]
enum Stage {
    /// `out[k] = Σ_{j<n} in[j] W_n^{jk}`.
    Direct { n: usize },
    /// `out[k1·n2 + m] = W_n^{m·k1} Σ_{j<n1} in[n2·j + m] W_{n1}^{j·k1}`.
    First { n1: usize, n2: usize },
    /// `out[k] = Σ_{m<n2} in[(k mod n1)·n2 + m] W_{n2}^{m·(k div n1)}`.
    Second { n1: usize, n2: usize },
}

/// One pass: its source (`None`: the operand), its output (`None`: the op's result), lines.
struct Pass {
    stage: Stage,
    src: Option<usize>,
    dst: Option<usize>,
    outer: usize,
    inner: usize,
    line_in: usize,
    line_out: usize,
    /// Extend the source by conjugate symmetry to this length (IRFFT's last axis).
    hermitian: Option<usize>,
    /// Divide by this at the end (inverse transforms).
    scale: Option<usize>,
}

/// A separable, factored FFT: one axis at a time, each axis of length `n = n1 · n2` in two
/// passes (`n1` then `n2` terms per element, twiddles between: the "four-step" Cooley-Tukey
/// split), so O(Σ √n) work per element instead of the direct DFT's O(Π n); prime lengths take
/// one direct pass. `RFFT` transforms the last axis first (real in, half spectrum out),
/// `IRFFT` last (half spectrum extended by conjugate symmetry, real part out).
pub fn plan(
    name: &str,
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Option<super::Plan>> {
    use crate::ir::{ElementType, TensorType};
    let Op::Fft {
        fft_type,
        fft_length,
    } = &op.op
    else {
        return Ok(None);
    };
    let (Some(xt), Some(rt)) = (
        f.ty(op.operands[0]).as_tensor(),
        f.ty(op.results[0]).as_tensor(),
    ) else {
        return Ok(None);
    };
    let rank = rt.rank();
    let nf = fft_length.len();
    if nf == 0 || nf > rank || fft_length.iter().any(|&n| n <= 0) || rt.num_elements() == 0 {
        return Ok(None);
    }
    let lens: Vec<usize> = fft_length.iter().map(|&n| n as usize).collect();
    if lens.iter().product::<usize>() <= PASSES_FROM {
        return Ok(None);
    }
    let cdt = if xt.dtype == ElementType::C128 || rt.dtype == ElementType::C128 {
        ElementType::C128
    } else {
        ElementType::C64
    };
    let real = if cdt == ElementType::C128 {
        "f64"
    } else {
        "f32"
    };
    let inverse = matches!(fft_type, FftType::Ifft | FftType::Irfft);
    let first = rank - nf;
    let axes: Vec<usize> = if *fft_type == FftType::Irfft {
        (first..rank).collect()
    } else {
        (first..rank).rev().collect()
    };
    // Plan the passes.
    let mut temps: Vec<TensorType> = Vec::new();
    let mut passes: Vec<Pass> = Vec::new();
    let mut shape = xt.dims();
    let mut src: Option<usize> = None;
    for (ai, &axis) in axes.iter().enumerate() {
        let n = lens[axis - first];
        let last = axis == rank - 1;
        let line_in = shape[axis];
        let line_out = match fft_type {
            FftType::Rfft if last => n / 2 + 1,
            _ => n,
        };
        let hermitian = (*fft_type == FftType::Irfft && last).then_some(n);
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let final_axis = ai + 1 == axes.len();
        let mut temp_of = |len: usize, shape: &[usize]| {
            let mut s = shape.to_vec();
            s[axis] = len;
            temps.push(TensorType::new(s.iter().map(|&d| d as i64).collect(), cdt));
            temps.len() - 1
        };
        let stages = match split(n).filter(|_| n > 16) {
            Some((n1, n2)) => vec![
                (Stage::First { n1, n2 }, n),
                (Stage::Second { n1, n2 }, line_out),
            ],
            None => vec![(Stage::Direct { n }, line_out)],
        };
        let count = stages.len();
        let mut lin = line_in;
        for (si, (stage, lout)) in stages.into_iter().enumerate() {
            let last_pass = si + 1 == count;
            let dst = if final_axis && last_pass {
                None
            } else {
                Some(temp_of(lout, &shape))
            };
            passes.push(Pass {
                stage,
                src,
                dst,
                outer,
                inner,
                line_in: lin,
                line_out: lout,
                hermitian: if si == 0 { hermitian } else { None },
                scale: (inverse && last_pass).then_some(n),
            });
            src = dst;
            lin = lout;
        }
        shape[axis] = line_out;
    }
    // Emit them.
    let src_real = !matches!(xt.dtype, ElementType::C64 | ElementType::C128);
    let mut kernels = Vec::new();
    for (pi, p) in passes.iter().enumerate() {
        let no_fusion = |_: ValueId| false;
        let mut em = ExprEmitter::new(f, defs, &no_fusion, target.caps, target.adapter);
        if let Some(t) = p.src {
            em.inputs.push(Binding {
                value: super::temp(t),
                ty: temps[t].clone(),
            });
        }
        em.needs.insert(format!("wh_cmul_{real}"));
        em.needs.insert(format!("wh_sinpi_cospi_{real}"));
        let (lin, lout, inner) = (p.line_in, p.line_out, p.inner);
        em.line(&format!("let o = tid / {}u;", lout * inner));
        em.line(&format!("let k = (tid / {inner}u) % {lout}u;"));
        em.line(&format!("let i = tid % {inner}u;"));
        let sign = if inverse { "" } else { "-" };
        // exp(∓2πi e/m) as a complex number.
        let w = |e: &str, m: usize| {
            format!("k_tw(wh_sinpi_cospi_{real}(2.0 * {real}(({e}) % {m}u) / {real}({m})))")
        };
        let read = |em: &mut ExprEmitter, pos: &str| -> Result<String> {
            let at = |q: &str| format!("(o * {}u + ({q}) * {inner}u + i)", lin * inner);
            let load = |em: &mut ExprEmitter, q: &str| -> Result<String> {
                Ok(match p.src {
                    Some(_) => format!("in0[{}]", at(q)),
                    None => {
                        let v = em.value(op.operands[0], &Index::Linear(at(q)))?;
                        if src_real {
                            format!("vec2<{real}>({real}({v}), 0.0)")
                        } else {
                            v
                        }
                    }
                })
            };
            let v = em.fresh("x");
            em.line(&format!("var {v}: vec2<{real}>;"));
            match p.hermitian {
                Some(n) => {
                    em.open(&format!("if ({pos} < {lin}u)"));
                    let a = load(em, pos)?;
                    em.line(&format!("{v} = {a};"));
                    em.close(Some("else"));
                    let b = load(em, &format!("({n}u - ({pos}))"))?;
                    em.line(&format!("{v} = {b} * vec2<{real}>(1.0, -1.0);"));
                    em.close(None);
                }
                None => {
                    let a = load(em, pos)?;
                    em.line(&format!("{v} = {a};"));
                }
            }
            Ok(v)
        };
        em.line(&format!("var acc: vec2<{real}> = vec2<{real}>(0.0, 0.0);"));
        let (terms, what) = match p.stage {
            Stage::Direct { n } => {
                em.open_loop(
                    &format!("for (var j: u32 = 0u; j < {n}u; j = j + 1u)"),
                    n as u64,
                );
                let x = read(&mut em, "j")?;
                em.line(&format!(
                    "acc = acc + wh_cmul_{real}({x}, {});",
                    w("j * k", n)
                ));
                em.close(None);
                (n, "direct DFT".to_string())
            }
            Stage::First { n1, n2 } => {
                em.line(&format!("let k1 = k / {n2}u;"));
                em.line(&format!("let m = k % {n2}u;"));
                em.open_loop(
                    &format!("for (var j: u32 = 0u; j < {n1}u; j = j + 1u)"),
                    n1 as u64,
                );
                let x = read(&mut em, &format!("{n2}u * j + m"))?;
                em.line(&format!(
                    "acc = acc + wh_cmul_{real}({x}, {});",
                    w("j * k1", n1)
                ));
                em.close(None);
                em.line(&format!(
                    "acc = wh_cmul_{real}(acc, {});",
                    w("m * k1", n1 * n2)
                ));
                (n1, format!("first of {n1}x{n2}"))
            }
            Stage::Second { n1, n2 } => {
                em.line(&format!("let k1 = k % {n1}u;"));
                em.line(&format!("let k2 = k / {n1}u;"));
                em.open_loop(
                    &format!("for (var m: u32 = 0u; m < {n2}u; m = m + 1u)"),
                    n2 as u64,
                );
                let x = read(&mut em, &format!("k1 * {n2}u + m"))?;
                em.line(&format!(
                    "acc = acc + wh_cmul_{real}({x}, {});",
                    w("m * k2", n2)
                ));
                em.close(None);
                (n2, format!("second of {n1}x{n2}"))
            }
        };
        if let Some(n) = p.scale {
            em.line(&format!("acc = acc / {real}({n});"));
        }
        let (out, value) = match p.dst {
            Some(t) => (
                Binding {
                    value: super::temp(t),
                    ty: temps[t].clone(),
                },
                "acc".to_string(),
            ),
            None => (
                Binding {
                    value: op.results[0],
                    ty: rt.clone(),
                },
                if *fft_type == FftType::Irfft {
                    "acc.x".to_string()
                } else {
                    "acc".to_string()
                },
            ),
        };
        em.line(&format!("out0[tid] = {value};"));
        let threads = (p.outer * lout * inner) as u64;
        let kname = format!("{name}_pass{pi}");
        let tw = format!(
            "fn k_tw(sc: vec2<{real}>) -> vec2<{real}> {{\n    return vec2<{real}>(sc.y, {sign}sc.x);\n}}\n\n"
        );
        let comment = format!(
            "kernel {kname}: fft {fft_type:?} pass {pi} ({what}: {terms} terms per element)\nfuses: stablehlo.fft"
        );
        kernels.push(crate::codegen::kernel::threaded(
            &kname,
            &comment,
            em.inputs.clone(),
            vec![out],
            &em.needs,
            &tw,
            &em.body,
            threads,
            em.iterations(),
            target,
        )?);
    }
    Ok(Some(super::Plan::sequential(kernels, temps)))
}
