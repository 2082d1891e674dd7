//! Kernels whose float arithmetic the driver must evaluate as written (GPU adapters by
//! default, `WGPU_HLO_STRICT_FLOAT`; Vulkan adapters with `Features::PASSTHROUGH_SHADERS`).
//!
//! Vulkan lets a driver contract and reassociate float operations unless the SPIR-V result
//! carries the `NoContraction` decoration, and NVIDIA's does: on an H200 `(0.5 * t) * t`
//! became `0.5 * (t * t)` (f32 `sinh(89)` gave inf), the double-double logarithm of f64 `pow`
//! lost its low part for bases near 1e-40 and 3e38, and the tails of `jax.random.normal`
//! moved by a ULP of the uniform (`(f - 1) * 2 + lo` distributed into `2 f + (lo - 2)`, up to
//! 1 % off at 5 sigma). XLA's semantics are one IEEE rounding per operation. naga emits no
//! such decoration, so here the WGSL is translated by naga ourselves, every float arithmetic
//! result is decorated, and the SPIR-V is passed through to the driver with an explicit
//! pipeline layout (a passed-through module has no reflection).
//!
//! On by default on GPU adapters whose Vulkan driver takes SPIR-V as given
//! (`Features::PASSTHROUGH_SHADERS`); `WGPU_HLO_STRICT_FLOAT=0` turns it off, `=1` asks for it
//! on CPU adapters too (lavapipe keeps one rounding per operation without it). Measured on an
//! H200 (2026-11-30): with it the conformance files gave 1252 passed and 5 failed against 1249
//! and 8 (f64 `power`, `asinh` of complex128 and `random_gamma` f64 fixed), and the JAX
//! comparisons all passed (`jax.random.normal`'s tails failed without it). It forbids the
//! `a * b + c` contractions a GEMM's inner loop needs, so the GEMM writes `fma` explicitly;
//! elementwise kernels ran about 5 % longer.

use crate::error::{Error, Result};

/// What `WGPU_HLO_STRICT_FLOAT` asks for: `Some(true)` for `1`, `Some(false)` for `0`, `None`
/// when unset (or anything else): the default, strict on GPU adapters.
pub(crate) fn requested() -> Option<bool> {
    match std::env::var("WGPU_HLO_STRICT_FLOAT")
        .as_deref()
        .map(str::trim)
    {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// Whether kernels on an adapter go through [`translate`] unless the device cannot pass SPIR-V
/// through: `WGPU_HLO_STRICT_FLOAT` when set to 0 or 1, else on GPU adapters (`cpu` false).
pub fn wanted(cpu: bool) -> bool {
    requested().unwrap_or(!cpu)
}

/// `wgsl` (entry point `main`) as SPIR-V words with every float arithmetic result decorated
/// `NoContraction`, and its workgroup size: what a strict device passes through to the driver,
/// for harnesses that create their own pipelines (`tests/math_accuracy`).
pub fn strict_spirv(wgsl: &str, label: &str) -> Result<(Vec<u32>, (u32, u32, u32))> {
    let k = translate(wgsl, label)?;
    Ok((k.words, k.workgroup_size))
}

/// A kernel translated for passing through: SPIR-V words, the workgroup size and the
/// layout entries of bind group 0.
pub(crate) struct StrictKernel {
    pub words: Vec<u32>,
    pub workgroup_size: (u32, u32, u32),
    pub entries: Vec<wgpu::BindGroupLayoutEntry>,
    /// Float results decorated.
    pub decorated: usize,
}

/// Translates a kernel's WGSL (entry point `main`, bindings in group 0) to SPIR-V with every
/// float arithmetic result decorated `NoContraction`.
pub(crate) fn translate(wgsl: &str, label: &str) -> Result<StrictKernel> {
    // The module the compiler parsed from this very text, where it still has it.
    let module = match crate::codegen::kernel::parsed_module(wgsl) {
        Some(m) => m,
        None => naga::front::wgsl::parse_str(wgsl)
            .map_err(|e| Error::internal(format!("kernel {label}: {}", e.emit_to_string(wgsl))))?,
    };
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| Error::internal(format!("kernel {label}: {}", e.emit_to_string(wgsl))))?;
    let ep = module
        .entry_points
        .iter()
        .find(|e| e.name == "main")
        .ok_or_else(|| Error::internal(format!("kernel {label}: no entry point main")))?;
    let [x, y, z] = ep.workgroup_size;
    let mut entries = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(binding) = &var.binding else {
            continue;
        };
        if binding.group != 0 {
            return Err(Error::internal(format!(
                "kernel {label}: binding in group {}",
                binding.group
            )));
        }
        let ty = match (var.space, &module.types[var.ty].inner) {
            (naga::AddressSpace::Storage { access }, _) => wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: !access.contains(naga::StorageAccess::STORE),
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            (naga::AddressSpace::Uniform, _) => wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            (
                naga::AddressSpace::Handle,
                naga::TypeInner::Image {
                    dim: naga::ImageDimension::D2,
                    arrayed: false,
                    class:
                        naga::ImageClass::Sampled {
                            kind: naga::ScalarKind::Uint,
                            multi: false,
                        },
                },
            ) => wgpu::BindingType::Texture {
                sample_type: wgpu::TextureSampleType::Uint,
                view_dimension: wgpu::TextureViewDimension::D2,
                multisampled: false,
            },
            _ => {
                return Err(Error::unimplemented(format!(
                    "kernel {label}: strict floats: binding {} of an unexpected kind",
                    binding.binding
                )))
            }
        };
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: binding.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty,
            count: None,
        });
    }
    entries.sort_by_key(|e| e.binding);
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        flags: naga::back::spv::WriterFlags::empty(),
        fake_missing_bindings: true,
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            buffer: naga::proc::BoundsCheckPolicy::Restrict,
            image_load: naga::proc::BoundsCheckPolicy::Restrict,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    let mut words = naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| Error::internal(format!("kernel {label}: SPIR-V: {e}")))?;
    let decorated = add_no_contraction(&mut words);
    Ok(StrictKernel {
        words,
        workgroup_size: (x, y, z),
        entries,
        decorated,
    })
}

const OP_DECORATE: u32 = 71;
const DECORATION_NO_CONTRACTION: u32 = 42;

/// SPIR-V opcodes of float arithmetic whose result `NoContraction` applies to (result id in
/// word 2): OpFNegate, OpFAdd, OpFSub, OpFMul, OpFDiv, OpFRem, OpFMod, OpVectorTimesScalar,
/// OpMatrixTimesScalar, OpVectorTimesMatrix, OpMatrixTimesVector, OpMatrixTimesMatrix,
/// OpOuterProduct, OpDot.
fn is_float_arithmetic(op: u32) -> bool {
    matches!(op, 127 | 129 | 131 | 133 | 136 | 140..=148)
}

/// Decorates every float arithmetic result of the module `words` with `NoContraction`; the
/// decorations go before the module's first annotation (or, without one, before its first
/// type declaration), where the annotation section is. Returns how many it added.
fn add_no_contraction(words: &mut Vec<u32>) -> usize {
    const HEADER: usize = 5;
    let mut ids = Vec::new();
    let mut insert_at = None;
    let mut first_type = None;
    let mut i = HEADER;
    while i < words.len() {
        let op = words[i] & 0xffff;
        let count = (words[i] >> 16) as usize;
        if count == 0 {
            break;
        }
        if (71..=75).contains(&op) && insert_at.is_none() {
            insert_at = Some(i);
        }
        if (19..=39).contains(&op) && first_type.is_none() {
            first_type = Some(i);
        }
        if is_float_arithmetic(op) && count >= 3 {
            ids.push(words[i + 2]);
        }
        i += count;
    }
    let Some(at) = insert_at.or(first_type) else {
        return 0;
    };
    let decorations: Vec<u32> = ids
        .iter()
        .flat_map(|&id| [(3 << 16) | OP_DECORATE, id, DECORATION_NO_CONTRACTION])
        .collect();
    words.splice(at..at, decorations);
    ids.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_float_operation_is_decorated_and_the_module_validates() {
        let wgsl = "@group(0) @binding(0) var<storage, read> a: array<f32>;\n\
                    @group(0) @binding(1) var<storage, read_write> b: array<f32>;\n\
                    @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n\
                    let x = a[g.x];\n    b[g.x] = (0.5 * x) * x + x / 3.0 - x;\n}\n";
        let k = translate(wgsl, "t").unwrap();
        assert_eq!(k.workgroup_size, (64, 1, 1));
        assert_eq!(k.entries.len(), 2);
        assert!(k.decorated >= 5, "{}", k.decorated);
        let n = k
            .words
            .windows(3)
            .filter(|w| w[0] == (3 << 16) | OP_DECORATE && w[2] == DECORATION_NO_CONTRACTION)
            .count();
        assert_eq!(n, k.decorated);
    }
}
