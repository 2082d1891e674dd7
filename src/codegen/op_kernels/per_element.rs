//! The skeleton shared by standalone kernels that compute each result element independently
//! (scatter, reduce_window, sort): one thread per element — several for packed narrow
//! types, packed into whole words — with the element's value computed by a callback.

use crate::codegen::dtype;
use crate::codegen::expr::{Binding, ExprEmitter};
use crate::codegen::kernel::{self, Kernel, WORKGROUP};
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};

/// Builds the kernel. `element(em, lin, e)` emits the statements computing the results at
/// linear index `lin` (a `u32` WGSL name; `e` numbers the element within the thread, for
/// unique variable names) and returns one compute-typed expression per output. `functions`
/// is WGSL placed before the entry point (update computations, comparators).
pub fn build(
    name: &str,
    mut em: ExprEmitter,
    outs: Vec<Binding>,
    functions: &str,
    comment: &str,
    target: Target,
    mut element: impl FnMut(&mut ExprEmitter, &str, u64) -> Result<Vec<String>>,
) -> Result<Kernel> {
    let total = outs.first().map_or(0, |o| o.ty.num_elements() as u64);
    let per = outs
        .iter()
        .map(|o| dtype::per_word(o.ty.dtype))
        .max()
        .unwrap_or(1) as u64;
    let threads = total.div_ceil(per);
    for (j, o) in outs.iter().enumerate() {
        for h in dtype::helpers_for(o.ty.dtype) {
            em.needs.insert(h.to_string());
        }
        let p = dtype::per_word(o.ty.dtype) as u64;
        if p > 1 {
            for q in 0..per / p {
                em.line(&format!("var w{j}_{q}: u32 = 0u;"));
            }
        }
    }
    for e in 0..per {
        let lin = format!("l{e}");
        em.line(&format!("let {lin} = tid * {per}u + {e}u;"));
        em.open(&format!("if ({lin} < {total}u)"));
        let vals = element(&mut em, &lin, e)?;
        if vals.len() != outs.len() {
            return Err(Error::internal(format!(
                "{name}: {} values for {} outputs",
                vals.len(),
                outs.len()
            )));
        }
        for (j, (o, v)) in outs.iter().zip(&vals).enumerate() {
            let p = dtype::per_word(o.ty.dtype) as u64;
            if p == 1 {
                em.line(&format!("out{j}[{lin}] = {v};"));
            } else {
                let bits = 32 / p;
                let q = e / p;
                let shift = (e % p) * bits;
                em.line(&format!(
                    "w{j}_{q} = w{j}_{q} | ({} << {shift}u);",
                    dtype::to_bits(o.ty.dtype, v)
                ));
            }
        }
        em.close(None);
    }
    for (j, o) in outs.iter().enumerate() {
        let p = dtype::per_word(o.ty.dtype) as u64;
        if p > 1 {
            let words = total.div_ceil(p);
            for q in 0..per / p {
                let w = format!("tid * {}u + {q}u", per / p);
                em.line(&format!(
                    "if ({w} < {words}u) {{ out{j}[{w}] = w{j}_{q}; }}"
                ));
            }
        }
    }
    let bindings = em.inputs.len() + outs.len();
    if bindings as u32 > target.max_storage_buffers {
        return Err(Error::unimplemented(format!(
            "{name}: needs {bindings} storage buffers, adapter {} allows {}",
            target.adapter, target.max_storage_buffers
        )));
    }
    let mut main = functions.to_string();
    main.push_str(&kernel::entry_header(WORKGROUP));
    main.push_str(&kernel::thread_index(WORKGROUP));
    main.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
    main.push_str(&em.body);
    main.push_str("}\n");
    let wgsl = kernel::assemble(
        name,
        comment,
        &em.inputs,
        &outs,
        &em.needs,
        &main,
        target.caps,
    )?;
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs: em.inputs.clone(),
        outputs: outs,
        workgroups: kernel::grid(threads.div_ceil(WORKGROUP as u64), target.max_workgroups)?,
        iterations: em.iterations(),
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}
