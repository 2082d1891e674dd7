//! `fft` as a direct DFT: one thread per result element sums over every position of the
//! transformed (innermost) dimensions — O(N) per element for lengths N up to a few thousand,
//! which is what programs send (JAX's `jnp.fft` on signal-sized axes). Twiddles come from
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
            em.open(&format!(
                "for (var j: u32 = 0u; j < {positions}u; j = j + 1u)"
            ));
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
