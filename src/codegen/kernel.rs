//! A generated kernel: its WGSL module, its buffer bindings and its dispatch size; plus the
//! pieces every emitter shares — module assembly, naga validation, grid sizing.

use super::dtype;
use super::expr::Binding;
use super::library;
use crate::error::{Error, Result};
use crate::target::Capabilities;

/// Threads per workgroup of the elementwise kernels.
pub const WORKGROUP: u32 = 256;

/// A compiled kernel, ready for a pipeline.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Unique name within the executable (`fusion_3`, `reduce_1`, ...).
    pub name: String,
    /// The WGSL module.
    pub wgsl: String,
    /// Buffers read, bound at 0..inputs.len() (read-only storage).
    pub inputs: Vec<Binding>,
    /// Buffers written, bound after the inputs (read-write storage).
    pub outputs: Vec<Binding>,
    /// Workgroups to dispatch.
    pub workgroups: [u32; 3],
    /// An upper bound on the loop back-edges (all loops, nested ones included) one invocation
    /// executes: the compile driver rejects kernels over `Target::max_invocation_iterations`
    /// (drivers cut long loops short, as Mesa's llvmpipe does, or watchdogs kill them).
    pub iterations: u64,
    /// Per input: read through a texture the runtime fills before each launch
    /// ([`super::texture_reads`]); empty when none is.
    pub texture_inputs: Vec<Option<super::texture_reads::TextureInput>>,
    /// Textures holding a copy of part of an output the kernel updates in place, made before
    /// each launch, for the loads of words that launch does not write
    /// ([`super::texture_reads::STATE_MARK`]); bound after every other binding. Empty when
    /// none is.
    pub state_textures: Vec<super::texture_reads::StateTexture>,
    /// Storage textures the kernel reads and writes as scratch space within one launch
    /// ([`super::texture_reads::ScratchTexture`]), bound after every other binding. Empty
    /// when none is.
    pub scratch_textures: Vec<super::texture_reads::ScratchTexture>,
    /// Tensors larger than one binding, bound in parts ([`super::parted`]); empty when none
    /// is.
    pub parted: Vec<super::parted::PartedBinding>,
}

/// Workgroup counts for `groups` workgroups: x up to the per-dimension limit, the rest in y.
pub fn grid(groups: u64, max_per_dim: u32) -> Result<[u32; 3]> {
    let max = max_per_dim.max(1) as u64;
    if groups <= max {
        return Ok([groups.max(1) as u32, 1, 1]);
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(Error::resource_exhausted(format!(
            "kernel needs {groups} workgroups, more than the adapter's {max}x{max} grid"
        )));
    }
    let x = groups.div_ceil(y);
    Ok([x as u32, y as u32, 1])
}

/// The WGSL statement computing the flat thread index `tid` from a 2-d grid.
pub fn thread_index(workgroup: u32) -> String {
    format!("    let tid = (wid.y * nwg.x + wid.x) * {workgroup}u + lid;\n")
}

/// The entry point header all grid-style kernels use.
pub fn entry_header(workgroup: u32) -> String {
    format!(
        "@compute @workgroup_size({workgroup})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n    \
         {RUNTIME_ZERO} = nwg.z >> 16u;\n"
    )
}

/// [`entry_header`] with the subgroup builtins as well: `sgl` (the lane in its subgroup),
/// `sgid` (the subgroup in its workgroup) and `nsg` (subgroups per workgroup).
pub fn subgroup_entry_header(workgroup: u32) -> String {
    format!(
        "@compute @workgroup_size({workgroup})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32, \
         @builtin(subgroup_invocation_id) sgl: u32, @builtin(subgroup_id) sgid: u32, \
         @builtin(num_subgroups) nsg: u32) {{\n    {RUNTIME_ZERO} = nwg.z >> 16u;\n"
    )
}

/// A module-scope `u32` that the entry point sets to 0 from a value the shader compiler cannot
/// know (`num_workgroups.z < 2^16`). Constants whose arithmetic IEEE defines but fast-math
/// folding breaks (lavapipe folded `x / 0.0` to 0 for every `x`) are built from it, so they
/// are evaluated at run time.
pub const RUNTIME_ZERO: &str = "wh_rt_zero";

/// Assembles a module: header comment, `enable`s, bindings, library functions, then `body`
/// (entry point and any kernel-specific functions). Validates it with naga.
pub fn assemble(
    name: &str,
    comment: &str,
    inputs: &[Binding],
    outputs: &[Binding],
    needs: &std::collections::BTreeSet<String>,
    body: &str,
    caps: Capabilities,
) -> Result<String> {
    let s = module_text(comment, inputs, outputs, needs, body)?;
    validate(name, &s, caps)?;
    Ok(s)
}

/// A kernel whose `body` (its entry point included, workgroup memory and barriers as it
/// likes) runs `groups` workgroups: the module [`assemble`]d, and the [`Kernel`] around it.
#[allow(clippy::too_many_arguments)]
pub fn in_workgroups(
    name: &str,
    comment: &str,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    needs: &std::collections::BTreeSet<String>,
    body: &str,
    groups: u64,
    iterations: u64,
    target: super::loop_kernel::Target,
) -> Result<Kernel> {
    in_workgroups_vec4(
        name,
        comment,
        inputs,
        outputs,
        needs,
        body,
        &[],
        (groups, iterations),
        target,
    )
}

/// [`in_workgroups`] for a kernel whose outputs `vec4_outputs` store four elements at a time:
/// they are declared as arrays of `vec4`s of their storage element.
#[allow(clippy::too_many_arguments)]
pub fn in_workgroups_vec4(
    name: &str,
    comment: &str,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    needs: &std::collections::BTreeSet<String>,
    body: &str,
    vec4_outputs: &[usize],
    (groups, iterations): (u64, u64),
    target: super::loop_kernel::Target,
) -> Result<Kernel> {
    in_workgroups_quads(
        name,
        comment,
        (inputs, outputs),
        needs,
        body,
        (&[], vec4_outputs),
        (groups, iterations),
        target,
    )
}

/// [`in_workgroups_vec4`] for a kernel that also loads inputs `vec4_inputs` four elements at
/// a time: they are declared as arrays of `vec4`s of their storage element as well.
#[allow(clippy::too_many_arguments)]
pub fn in_workgroups_quads(
    name: &str,
    comment: &str,
    (inputs, outputs): (Vec<Binding>, Vec<Binding>),
    needs: &std::collections::BTreeSet<String>,
    body: &str,
    (vec4_inputs, vec4_outputs): (&[usize], &[usize]),
    (groups, iterations): (u64, u64),
    target: super::loop_kernel::Target,
) -> Result<Kernel> {
    let wgsl = module_text(comment, &inputs, &outputs, needs, body)?;
    let wgsl = declare_vec4s(name, wgsl, (&outputs, "out", "read_write"), vec4_outputs)?;
    let wgsl = declare_vec4s(name, wgsl, (&inputs, "in", "read"), vec4_inputs)?;
    validate(name, &wgsl, target.caps)?;
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs,
        outputs,
        workgroups: grid(groups, target.max_workgroups)?,
        iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// `wgsl` (from [`module_text`]) with bindings `js` of `bindings` (named `{prefix}J`,
/// declared with `access`: the inputs or the outputs) declared as arrays of `vec4`s of their
/// storage element.
fn declare_vec4s(
    name: &str,
    mut wgsl: String,
    (bindings, prefix, access): (&[Binding], &str, &str),
    js: &[usize],
) -> Result<String> {
    for &j in js {
        let t = bindings
            .get(j)
            .map(|o| super::dtype::storage_elem(o.ty.dtype))
            .ok_or_else(|| Error::internal(format!("{name}: no binding {prefix}{j}")))?;
        let decl = format!("var<storage, {access}> {prefix}{j}: array<{t}>;");
        if !wgsl.contains(&decl) {
            return Err(Error::internal(format!(
                "{name}: no declaration of {prefix}{j}"
            )));
        }
        let vec4 = format!("var<storage, {access}> {prefix}{j}: array<vec4<{t}>>;");
        wgsl = wgsl.replacen(&decl, &vec4, 1);
    }
    Ok(wgsl)
}

/// [`assemble`] without the validation, for emitters that change a declaration afterwards
/// (and validate then).
pub fn module_text(
    comment: &str,
    inputs: &[Binding],
    outputs: &[Binding],
    needs: &std::collections::BTreeSet<String>,
    body: &str,
) -> Result<String> {
    let mut s = String::new();
    for line in comment.lines() {
        s.push_str("// ");
        s.push_str(line);
        s.push('\n');
    }
    s.push_str(&format!("var<private> {RUNTIME_ZERO}: u32;\n"));
    for (i, b) in inputs.iter().enumerate() {
        s.push_str(&format!(
            "@group(0) @binding({i}) var<storage, read> in{i}: array<{}>; // {} {}\n",
            dtype::storage_elem(b.ty.dtype),
            b.value,
            b.ty
        ));
    }
    for (j, b) in outputs.iter().enumerate() {
        s.push_str(&format!(
            "@group(0) @binding({}) var<storage, read_write> out{j}: array<{}>; // {} {}\n",
            inputs.len() + j,
            dtype::storage_elem(b.ty.dtype),
            b.value,
            b.ty
        ));
    }
    s.push('\n');
    // Emitters register what they call, but inline snippets (loads of packed types, ...) may
    // call library functions too: pick up every `wh_*(` the body mentions.
    let mut all = needs.clone();
    all.extend(called_library_functions(body));
    s.push_str(&library::resolve(all.iter().map(String::as_str))?);
    s.push_str(body);
    Ok(s)
}

/// Library functions called in `body`: identifiers `wh_...` followed by `(` that the library
/// defines.
pub(crate) fn called_library_functions(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = body.as_bytes();
    let mut i = 0;
    while let Some(k) = body[i..].find("wh_") {
        let start = i + k;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if boundary && bytes.get(end) == Some(&b'(') && library::has_function(&body[start..end]) {
            out.push(body[start..end].to_string());
        }
        i = end.max(start + 3);
    }
    out
}

/// Modules [`validate`] parsed, by their WGSL text, for the runtime to hand to wgpu instead of
/// the text ([`parsed_module`]): wgpu would parse each kernel again, twice on CPU adapters
/// (the device's pipeline and the warming helper's, `runtime::warm`). naga 30's WGSL front
/// end types each new expression after skipping over every earlier one of its function
/// (`Typifier::grow` walks the expression arena from its start), so a parse takes time
/// quadratic in a function's length: the LU panel kernel of `inv` 512 (1837 lines, 115 KB)
/// took 86 ms, and parsing was 30 % of the CPU time of compiling and loading that program on
/// lavapipe. A clone of the module costs a fraction of that. Bounded: past
/// [`PARSED_MAX_BYTES`] of WGSL the entries used least recently go.
#[derive(Default)]
struct Parsed {
    modules: std::collections::HashMap<String, (naga::Module, u64)>,
    /// Use stamps: the next one, and each entry's text by its last.
    clock: u64,
    by_use: std::collections::BTreeMap<u64, String>,
    bytes: usize,
}

/// WGSL bytes whose parsed modules [`validate`] keeps at most.
const PARSED_MAX_BYTES: usize = 4 << 20;

fn parsed() -> &'static std::sync::Mutex<Parsed> {
    static P: std::sync::OnceLock<std::sync::Mutex<Parsed>> = std::sync::OnceLock::new();
    P.get_or_init(Default::default)
}

/// Keeps `module`, parsed from `wgsl` and valid, for [`parsed_module`].
fn keep_parsed(wgsl: &str, module: naga::Module) {
    if wgsl.len() > PARSED_MAX_BYTES {
        return;
    }
    // A poisoned lock (a panic while holding it) only loses the shortcut.
    let Ok(mut p) = parsed().lock() else {
        return;
    };
    let p = &mut *p;
    if p.modules.contains_key(wgsl) {
        return;
    }
    while p.bytes + wgsl.len() > PARSED_MAX_BYTES {
        let Some((_, old)) = p.by_use.pop_first() else {
            break;
        };
        p.modules.remove(&old);
        p.bytes -= old.len();
    }
    p.clock += 1;
    p.bytes += wgsl.len();
    p.by_use.insert(p.clock, wgsl.to_string());
    p.modules.insert(wgsl.to_string(), (module, p.clock));
}

/// A copy of the module [`validate`] parsed from exactly `wgsl`, if it still has it.
/// `WGPU_HLO_PARSED_MODULES=0` turns the handoff off (wgpu then parses every kernel's text).
pub fn parsed_module(wgsl: &str) -> Option<naga::Module> {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var("WGPU_HLO_PARSED_MODULES").is_ok_and(|v| v.trim() == "0"))
    {
        return None;
    }
    let mut p = parsed().lock().ok()?;
    let p = &mut *p;
    p.clock += 1;
    let now = p.clock;
    let (module, stamp) = p.modules.get_mut(wgsl)?;
    let text = p.by_use.remove(stamp)?;
    *stamp = now;
    p.by_use.insert(now, text);
    Some(module.clone())
}

/// Parses and validates a WGSL module with naga; a failure is an internal error naming the
/// kernel (a code generator bug, never a runtime surprise). The module is kept for the
/// runtime ([`parsed_module`]).
pub fn validate(name: &str, wgsl: &str, caps: Capabilities) -> Result<()> {
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| {
        // Some parse errors carry no source span: show the module then.
        let text = e.emit_to_string(wgsl);
        let shown = if text.contains('│') {
            text
        } else {
            format!("{text}\n{wgsl}")
        };
        Error::internal(format!(
            "kernel {name}: generated WGSL does not parse: {shown}"
        ))
    })?;
    let mut c = naga::valid::Capabilities::empty();
    if caps.f64 {
        c |= naga::valid::Capabilities::FLOAT64;
    }
    if caps.i64 {
        c |= naga::valid::Capabilities::SHADER_INT64;
    }
    if caps.f16 {
        c |= naga::valid::Capabilities::SHADER_FLOAT16;
    }
    if caps.subgroup {
        c |= naga::valid::Capabilities::SUBGROUP;
    }
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), c)
        .validate(&module)
        .map_err(|e| {
            Error::internal(format!(
                "kernel {name}: generated WGSL is invalid: {}",
                e.emit_to_string(wgsl)
            ))
        })?;
    keep_parsed(wgsl, module);
    Ok(())
}

/// A kernel of `threads` invocations (`tid` = 0..threads): `functions` placed before the entry
/// point, `body` (statements) inside it, whose invocations run at most `iterations` loop
/// back-edges. The shared tail of the standalone op kernels.
#[allow(clippy::too_many_arguments)]
pub fn threaded(
    name: &str,
    comment: &str,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    needs: &std::collections::BTreeSet<String>,
    functions: &str,
    body: &str,
    threads: u64,
    iterations: u64,
    target: super::loop_kernel::Target,
) -> Result<Kernel> {
    let wg = small_launch_workgroup(threads);
    let mut main = functions.to_string();
    main.push_str(&entry_header(wg));
    main.push_str(&thread_index(wg));
    main.push_str(&format!("    if (tid >= {threads}u) {{ return; }}\n"));
    main.push_str(body);
    main.push_str("}\n");
    let wgsl = assemble(name, comment, &inputs, &outputs, needs, &main, target.caps)?;
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs,
        outputs,
        workgroups: grid(threads.div_ceil(wg as u64), target.max_workgroups)?,
        iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// Threads per workgroup for a launch of `threads` invocations: `WORKGROUP`, halved (down to
/// 32) while the launch would have fewer than 4 workgroups. A launch of one workgroup runs
/// on one core of a CPU adapter (lavapipe gives each workgroup to one thread) and on one
/// compute unit of a GPU: the 64-thread triangular solve of a 256x256 Cholesky's panels
/// took 5.8 ms in one workgroup of 256 and 3.1 ms in two of 32 on lavapipe.
fn small_launch_workgroup(threads: u64) -> u32 {
    let mut wg = WORKGROUP;
    while wg > 32 && threads.div_ceil(wg as u64) < 4 {
        wg /= 2;
    }
    wg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_launches_get_smaller_workgroups() {
        assert_eq!(small_launch_workgroup(1), 32);
        assert_eq!(small_launch_workgroup(64), 32);
        assert_eq!(small_launch_workgroup(256), 64);
        assert_eq!(small_launch_workgroup(512), 128);
        assert_eq!(small_launch_workgroup(1024), 256);
        assert_eq!(small_launch_workgroup(1 << 20), 256);
    }

    #[test]
    fn grids_split_over_y() {
        assert_eq!(grid(10, 65535).unwrap(), [10, 1, 1]);
        let g = grid(100_000, 65535).unwrap();
        assert!(g[0] as u64 * g[1] as u64 >= 100_000 && g[0] <= 65535);
        assert!(grid(u64::MAX / 2, 65535).is_err());
    }
}
