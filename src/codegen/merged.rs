//! Merged launches: independent kernels of any kind (dots, reductions, loops, op kernels) run
//! as one dispatch. Each part keeps its own WGSL: its module-scope names get a prefix
//! (`p0_`, `p1_`, ...), its bindings follow the parts before it (all inputs first, then all
//! outputs, as every kernel binds them), and its entry point's body is inlined into one
//! branch of the merged entry point, which picks the part from the flat workgroup index.
//! Inside the branch the part's builtins are `let`s that reproduce its own grid exactly:
//! its workgroup index, its `num_workgroups` (whose `z` still comes from the real builtin,
//! so [`super::kernel::RUNTIME_ZERO`] stays unknown to the shader compiler), its local index.
//!
//! A part whose workgroup is smaller than the merged one runs several of its workgroups in
//! one merged workgroup, when it needs nothing of its workgroup (no workgroup memory, barrier
//! or subgroup operation); otherwise parts must have one workgroup size. Branches on the
//! workgroup index are uniform, so barriers inside a part stay valid.
//!
//! What it is for: on llvmpipe a launch costs 30-100 µs whatever it computes (thread
//! hand-offs per dispatch), and on a GPU a few µs plus a barrier; a recurrent step's small
//! dots and elementwise kernels each compute in less. `compile::merge` decides which launches
//! merge; this module only writes the kernel.

use std::collections::HashSet;

use super::kernel::{grid, validate, Kernel};
use super::loop_kernel::Target;
use crate::error::{Error, Result};

/// What merging needs to know about one kernel ([`inspect`]).
#[derive(Clone, Debug)]
pub struct Mergeable {
    /// Invocations per workgroup.
    pub workgroup: u32,
    /// The workgroup's width (`x`; its height is `workgroup / width`).
    width: u32,
    /// The kernel uses its workgroup as a unit (workgroup memory, barriers, subgroup
    /// operations): it runs only in workgroups of its own size.
    pub scoped: bool,
    /// Bytes of workgroup memory it declares.
    pub workgroup_bytes: u64,
    /// Workgroups of its own dispatch (`x * y`).
    pub groups: u64,
    /// Inputs it reads through textures (`Kernel::texture_inputs`).
    pub textures: usize,
    /// The entry point's arguments, in order: name and builtin.
    args: Vec<(String, naga::BuiltIn)>,
    /// Module-scope names (variables, functions, constants, structs, the entry point).
    names: Vec<String>,
}

/// Whether `k` can be a part of a merged launch, and what merging needs to know: `None` for
/// kernels that read copies of their outputs (state textures, bound after every other
/// binding) or keep scratch textures (bound there too), bind tensors in parts, write nothing, use a three-dimensional grid or workgroup,
/// or an entry point argument other than the grid builtins. Inputs read through textures
/// stay textures of the merged kernel, at their renumbered bindings (until 2026-12-05 such
/// kernels were not merged, and on AMD hosts, where read-once kernels take textures, expm's
/// small products and loop steps lost their merges; `WGPU_HLO_MERGE_TEXTURES=0` refuses them
/// still, for comparisons).
pub fn inspect(k: &Kernel) -> Option<Mergeable> {
    if !k.state_textures.is_empty() || !k.scratch_textures.is_empty() || !k.parted.is_empty() {
        return None;
    }
    if k.texture_inputs.iter().any(Option::is_some)
        && crate::fusion::switched_off("WGPU_HLO_MERGE_TEXTURES")
    {
        return None;
    }
    if k.outputs.is_empty() || k.outputs.iter().any(|o| o.ty.num_elements() == 0) {
        return None;
    }
    let [x, y, z] = k.workgroups;
    if z != 1 || x == 0 || y == 0 {
        return None;
    }
    let module = naga::front::wgsl::parse_str(&k.wgsl).ok()?;
    let [ep] = module.entry_points.as_slice() else {
        return None;
    };
    if ep.stage != naga::ShaderStage::Compute
        || ep.name != "main"
        || ep.workgroup_size_overrides.is_some()
        || ep.workgroup_size[2] != 1
    {
        return None;
    }
    let mut args = Vec::new();
    let mut subgroup = false;
    for a in &ep.function.arguments {
        let Some(naga::Binding::BuiltIn(b)) = a.binding else {
            return None;
        };
        use naga::BuiltIn as B;
        match b {
            B::WorkGroupId
            | B::NumWorkGroups
            | B::LocalInvocationIndex
            | B::LocalInvocationId
            | B::GlobalInvocationId
            | B::WorkGroupSize => {}
            B::SubgroupInvocationId | B::SubgroupSize | B::SubgroupId | B::NumSubgroups => {
                subgroup = true
            }
            _ => return None,
        }
        args.push((a.name.clone()?, b));
    }
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).ok()?;
    let mut names = vec!["main".to_string()];
    let mut workgroup_bytes = 0u64;
    for (_, g) in module.global_variables.iter() {
        names.extend(g.name.clone());
        if g.space == naga::AddressSpace::WorkGroup {
            workgroup_bytes += layouter[g.ty].size as u64;
        }
    }
    for (_, f) in module.functions.iter() {
        names.extend(f.name.clone());
    }
    for (_, c) in module.constants.iter() {
        names.extend(c.name.clone());
    }
    for (_, o) in module.overrides.iter() {
        names.extend(o.name.clone());
    }
    for (_, t) in module.types.iter() {
        if let Some(n) = &t.name {
            if matches!(t.inner, naga::TypeInner::Struct { .. }) && !n.starts_with("__") {
                names.push(n.clone());
            }
        }
    }
    let code = strip_comments(&k.wgsl);
    let scoped = subgroup
        || workgroup_bytes > 0
        || code.contains("Barrier")
        || code.contains("subgroup")
        || code.contains("workgroupUniformLoad");
    let [wx, wy, _] = ep.workgroup_size;
    Some(Mergeable {
        workgroup: wx.checked_mul(wy)?,
        width: wx,
        scoped,
        workgroup_bytes,
        groups: x as u64 * y as u64,
        textures: k.texture_inputs.iter().filter(|t| t.is_some()).count(),
        args,
        names,
    })
}

/// Whether parts of these workgroup sizes and kinds can share one launch, and its workgroup
/// size: the largest; every smaller part must divide it and not be scoped. On CPU adapters
/// a smaller part must also be one workgroup (a loop's counter): llvmpipe runs a workgroup
/// on one thread, so packing a part's workgroups together costs parallelism, and it runs the
/// code under a branch that differs between lanes for all lanes, so idle lanes cost as much
/// as busy ones (merging a GRU step's 64-lane dots with its 256-lane loops either way made
/// it 20-25 % slower).
pub fn workgroup_of(parts: &[&Mergeable], cpu_adapter: bool) -> Option<u32> {
    let w = parts.iter().map(|p| p.workgroup).max()?;
    let fits = |p: &&Mergeable| {
        let packs = !p.scoped && p.workgroup > 0 && w % p.workgroup == 0;
        p.workgroup == w || (packs && (!cpu_adapter || p.groups == 1))
    };
    parts.iter().all(fits).then_some(w)
}

/// The merged kernel of `parts` (each with its [`inspect`] result), named `name`. Its inputs
/// are the parts' inputs in order, its outputs the parts' outputs in order.
pub fn merge(name: &str, parts: &[(&Kernel, &Mergeable)], target: Target) -> Result<Kernel> {
    let infos: Vec<&Mergeable> = parts.iter().map(|(_, m)| *m).collect();
    let w = workgroup_of(&infos, target.cpu_adapter)
        .ok_or_else(|| Error::internal(format!("{name}: parts of incompatible workgroups")))?;
    let total_inputs: usize = parts.iter().map(|(k, _)| k.inputs.len()).sum();
    let mut comment = format!(
        "// kernel {name}: {} independent kernels in one launch ({})\n",
        parts.len(),
        parts
            .iter()
            .map(|(k, _)| k.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut modules = String::new();
    let mut branches = String::new();
    let mut subgroup_args: Vec<naga::BuiltIn> = Vec::new();
    let (mut in_base, mut out_base, mut start) = (0usize, 0usize, 0u64);
    for (i, (k, m)) in parts.iter().enumerate() {
        let prefix = format!("p{i}_");
        let names: HashSet<&str> = m.names.iter().map(String::as_str).collect();
        let text = rename(&k.wgsl, &names, &prefix);
        let (rest, body) = split_entry(&text, &format!("{prefix}main"))
            .ok_or_else(|| Error::internal(format!("{name}: no entry point in {}", k.name)))?;
        for line in k.wgsl.lines().take_while(|l| l.starts_with("//")) {
            comment.push_str(&format!(
                "// part {i}: {}\n",
                line.trim_start_matches("// ")
            ));
        }
        let n_in = k.inputs.len();
        let rest = rebind(&rest, |b| {
            if b < n_in {
                in_base + b
            } else {
                total_inputs + out_base + (b - n_in)
            }
        })
        .ok_or_else(|| Error::internal(format!("{name}: unexpected bindings in {}", k.name)))?;
        modules.push_str(&format!("// ---- part {i}: {}\n", k.name));
        modules.push_str(
            &rest
                .lines()
                .skip_while(|l| l.starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        modules.push('\n');
        // The part's grid, as its own dispatch had it.
        let [gx, gy, _] = k.workgroups;
        // Several workgroups of a smaller part share one merged workgroup.
        let repack = w / m.workgroup;
        let end = start + (m.groups).div_ceil(repack as u64);
        let (q, lid) = if repack == 1 {
            (format!("wh_m_g - {start}u"), "wh_m_lid".to_string())
        } else {
            (
                format!(
                    "(wh_m_g - {start}u) * {repack}u + wh_m_lid / {}u",
                    m.workgroup
                ),
                format!("wh_m_lid % {}u", m.workgroup),
            )
        };
        // Two-dimensional workgroups are laid out row by row (`local_invocation_index`).
        let (wx, wy) = (m.width, m.workgroup / m.width.max(1));
        let mut lets = String::new();
        for (arg, b) in &m.args {
            use naga::BuiltIn as B;
            let value = match b {
                B::WorkGroupId => format!("vec3<u32>(wh_m_q % {gx}u, wh_m_q / {gx}u, 0u)"),
                B::NumWorkGroups => format!("vec3<u32>({gx}u, {gy}u, wh_m_nwg.z)"),
                B::LocalInvocationIndex => "wh_m_l".to_string(),
                B::LocalInvocationId => format!("vec3<u32>(wh_m_l % {wx}u, wh_m_l / {wx}u, 0u)"),
                B::GlobalInvocationId => format!(
                    "vec3<u32>((wh_m_q % {gx}u) * {wx}u + wh_m_l % {wx}u, \
                     (wh_m_q / {gx}u) * {wy}u + wh_m_l / {wx}u, 0u)"
                ),
                B::WorkGroupSize => format!("vec3<u32>({wx}u, {wy}u, 1u)"),
                other => {
                    if m.workgroup != w {
                        return Err(Error::internal(format!(
                            "{name}: {} uses subgroups in a larger workgroup",
                            k.name
                        )));
                    }
                    if !subgroup_args.contains(other) {
                        subgroup_args.push(*other);
                    }
                    subgroup_arg(*other).0.to_string()
                }
            };
            lets.push_str(&format!("            let {arg} = {value};\n"));
        }
        let guard = if repack == 1 {
            String::new()
        } else {
            format!("        if (wh_m_q >= {}u) {{ return; }}\n", m.groups)
        };
        branches.push_str(&format!(
            "    if (wh_m_g < {end}u) {{\n        // part {i}: {}\n        let wh_m_q = {q};\n        \
             let wh_m_l = {lid};\n{guard}        {{\n{lets}{body}\n        }}\n        return;\n    }}\n",
            k.name
        ));
        in_base += n_in;
        out_base += k.outputs.len();
        start = end;
    }
    let mut params = String::from(
        "@builtin(workgroup_id) wh_m_wid: vec3<u32>, @builtin(num_workgroups) wh_m_nwg: \
         vec3<u32>, @builtin(local_invocation_index) wh_m_lid: u32",
    );
    for b in &subgroup_args {
        let (arg, builtin) = subgroup_arg(*b);
        params.push_str(&format!(", @builtin({builtin}) {arg}: u32"));
    }
    let wgsl = format!(
        "{comment}{modules}\n@compute @workgroup_size({w})\nfn main({params}) {{\n    \
         let wh_m_g = wh_m_wid.y * wh_m_nwg.x + wh_m_wid.x;\n{branches}}}\n"
    );
    validate(name, &wgsl, target.caps)?;
    let mut inputs = Vec::with_capacity(total_inputs);
    let mut outputs = Vec::new();
    let mut texture_inputs = Vec::with_capacity(total_inputs);
    for (k, _) in parts {
        inputs.extend(k.inputs.iter().cloned());
        texture_inputs
            .extend((0..k.inputs.len()).map(|j| k.texture_inputs.get(j).copied().flatten()));
    }
    if texture_inputs.iter().all(Option::is_none) {
        texture_inputs.clear();
    }
    for (k, _) in parts {
        outputs.extend(k.outputs.iter().cloned());
    }
    Ok(Kernel {
        name: name.to_string(),
        wgsl,
        inputs,
        outputs,
        workgroups: grid(start, target.max_workgroups)?,
        iterations: parts.iter().map(|(k, _)| k.iterations).max().unwrap_or(0),
        texture_inputs,
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// The merged entry point's argument for a subgroup builtin: its name and WGSL spelling.
fn subgroup_arg(b: naga::BuiltIn) -> (&'static str, &'static str) {
    use naga::BuiltIn as B;
    match b {
        B::SubgroupInvocationId => ("wh_m_sgi", "subgroup_invocation_id"),
        B::SubgroupSize => ("wh_m_sgs", "subgroup_size"),
        B::SubgroupId => ("wh_m_sid", "subgroup_id"),
        _ => ("wh_m_nsg", "num_subgroups"),
    }
}

/// `src` without its comments (for the scans of [`inspect`]).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// `src` with every identifier in `names` prefixed, except member accesses (`.x`) and text in
/// line comments. Shadowing stays consistent: a local of a renamed name is renamed with it.
fn rename(src: &str, names: &HashSet<&str>, prefix: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len() + src.len() / 8);
    let mut i = 0;
    let mut last_sig = 0u8;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = src[i..].find('\n').map_or(b.len(), |k| i + k);
            out.push_str(&src[i..end]);
            i = end;
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push_str(&src[s..i]);
            last_sig = b'0';
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let ident = &src[s..i];
            if last_sig != b'.' && names.contains(ident) {
                out.push_str(prefix);
            }
            out.push_str(ident);
            last_sig = b'a';
        } else {
            let len = src[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&src[i..i + len]);
            if !c.is_ascii_whitespace() {
                last_sig = c;
            }
            i += len;
        }
    }
    out
}

/// Splits a module at its entry point `entry`: the module without it (attributes, header and
/// body removed) and the body between its braces.
fn split_entry(src: &str, entry: &str) -> Option<(String, String)> {
    let header = src.find(&format!("fn {entry}("))?;
    let attrs = src[..header].rfind("@compute")?;
    let open = header + src[header..].find('{')?;
    let close = matching_brace(src, open)?;
    let mut rest = String::with_capacity(src.len());
    rest.push_str(&src[..attrs]);
    rest.push_str(&src[close + 1..]);
    Some((rest, src[open + 1..close].to_string()))
}

/// The index of the `}` closing the `{` at `open`, skipping line comments.
fn matching_brace(src: &str, open: usize) -> Option<usize> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = src[i..].find('\n').map_or(b.len(), |k| i + k);
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `src` with each `@binding(n)` replaced by `@binding(map(n))`; `None` when a binding is
/// not in group 0 or does not parse.
fn rebind(src: &str, map: impl Fn(usize) -> usize) -> Option<String> {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        match line.find("@binding(") {
            None => out.push_str(line),
            Some(at) => {
                if !line.starts_with("@group(0) ") {
                    return None;
                }
                let num_start = at + "@binding(".len();
                let num_end = num_start + line[num_start..].find(')')?;
                let n: usize = line[num_start..num_end].trim().parse().ok()?;
                out.push_str(&line[..num_start]);
                out.push_str(&map(n).to_string());
                out.push_str(&line[num_end..]);
            }
        }
        out.push('\n');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_names_not_members_or_comments() {
        let names: HashSet<&str> = ["in0", "f", "x"].into_iter().collect();
        let src = "let a = in0[f(v.x)] + x; // in0 x\nlet b = 1.5e3f + x.x;";
        let out = rename(src, &names, "p1_");
        assert_eq!(
            out,
            "let a = p1_in0[p1_f(v.x)] + p1_x; // in0 x\nlet b = 1.5e3f + p1_x.x;"
        );
    }

    #[test]
    fn splits_the_entry_point() {
        let src = "var<private> z: u32;\n@compute @workgroup_size(64)\nfn p0_main(@builtin(workgroup_id) wid: vec3<u32>) {\n    if (wid.x > 0u) { return; } // }\n}\nfn g() {}\n";
        let (rest, body) = split_entry(src, "p0_main").unwrap();
        assert_eq!(rest, "var<private> z: u32;\n\nfn g() {}\n");
        assert_eq!(body, "\n    if (wid.x > 0u) { return; } // }\n");
    }

    #[test]
    fn rebinds() {
        let src = "@group(0) @binding(1) var<storage, read> in1: array<f32>;\nfn f() {}";
        assert_eq!(
            rebind(src, |b| b + 3).unwrap(),
            "@group(0) @binding(4) var<storage, read> in1: array<f32>;\nfn f() {}\n"
        );
    }
}
