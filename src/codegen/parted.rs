//! Tensors larger than one storage binding may be (`max_storage_buffer_binding_size`: 128 MiB
//! on lavapipe and some laptop GPUs), read or written at positions the host cannot know in
//! advance: a gather from a 150 MB embedding table, the transpose, slice or reverse of a 256
//! MiB matrix, the operand of a matmul; a scatter into, or a matmul producing, such a tensor.
//! Windows (`codegen::windows`) bind the part of a tensor each launch touches, which needs
//! every invocation to read and write at its own elements; these go anywhere.
//!
//! So the buffer is bound several times, each binding one consecutive part: the binding itself
//! (`inJ` or `outJ`) holds part 0, and `inJ_p1`, `inJ_p2`, ... the next parts, bound after all
//! other bindings. Every load `inJ[i]` (or `outJ[i]`, a kernel reading back what it updates)
//! becomes `inJ_at(u32(i))`, which reads element `i` from the part holding it; every store
//! `outJ[i] = v;` becomes `outJ_put(u32(i), v);` (loads in `i` and `v` rewritten too: an update in
//! place, `outJ[i] = outJ[i] * g;`). Parts start at multiples of the adapter's
//! `min_storage_buffer_offset_alignment` and of the element size, so every element lies whole
//! in one part. The rewrite works on the finished WGSL, like `texture_reads`, so every emitter
//! gets it; a tensor used any other way (compound assignments, stores to one component of an
//! element, `arrayLength`, pointers, atomics) stays refused.

use super::kernel::{self, Kernel};
use super::texture_reads::{closing_bracket, rewrite_indexed, rewrite_indexing};
use super::windows::gcd;
use crate::error::{Error, Result};
use crate::target::Capabilities;

/// A binding of a kernel bound in parts: binding `binding` (inputs, then outputs) holds bytes
/// `0..part_bytes` of its buffer, and each further part `p` (1 ..`parts`) bytes
/// `p * part_bytes ..` (at most `part_bytes`), bound at [`Kernel::part_binding`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartedBinding {
    /// The binding: an input's number, or the number of inputs plus an output's.
    pub binding: u32,
    /// Bytes per part (the last may be shorter).
    pub part_bytes: u64,
    /// Parts, 2 or more.
    pub parts: u32,
}

impl PartedBinding {
    /// The byte range `(offset, size)` of part `p` in a buffer of `size` bytes.
    pub fn range(&self, p: u32, size: u64) -> (u64, u64) {
        let start = (u64::from(p) * self.part_bytes).min(size);
        (start, self.part_bytes.min(size - start))
    }
}

impl Kernel {
    /// The binding number of part `p` (≥ 1) of parted binding number `k` (in
    /// `Kernel::parted`): after the inputs and outputs, in order of `parted`.
    pub fn part_binding(&self, k: usize, p: u32) -> u32 {
        let before: u32 = self.parted[..k].iter().map(|q| q.parts - 1).sum();
        (self.inputs.len() + self.outputs.len()) as u32 + before + p - 1
    }

    /// The kernel's name in program listings: with its tensors bound in parts.
    pub fn listed_name(&self) -> String {
        let mut s = self.name.clone();
        for q in &self.parted {
            s.push_str(&format!(
                " ({} bound in {} parts)",
                self.binding_name(q.binding as usize),
                q.parts
            ));
        }
        s
    }

    /// The WGSL name of binding `b` (inputs, then outputs): `inJ` or `outJ`.
    pub fn binding_name(&self, b: usize) -> String {
        match b.checked_sub(self.inputs.len()) {
            None => format!("in{b}"),
            Some(j) => format!("out{j}"),
        }
    }

    /// Whether binding `b` (inputs, then outputs) is bound in parts.
    pub fn is_parted(&self, b: usize) -> bool {
        self.parted.iter().any(|q| q.binding as usize == b)
    }

    /// Storage buffers the kernel binds, its inputs' extra parts included.
    pub fn storage_bindings(&self) -> u32 {
        let parts: u32 = self.parted.iter().map(|q| q.parts - 1).sum();
        (self.inputs.len() + self.outputs.len()) as u32 + parts
    }
}

/// Bytes of one element of a storage array of WGSL type `elem`, for the element types the
/// emitters declare.
fn stride(elem: &str) -> Option<u64> {
    match elem {
        "f32" | "i32" | "u32" => Some(4),
        "f64" | "i64" | "u64" | "vec2<f32>" | "vec2<i32>" | "vec2<u32>" => Some(8),
        "vec4<f32>" | "vec4<i32>" | "vec4<u32>" | "vec2<f64>" => Some(16),
        _ => None,
    }
}

/// The bytes per part of a buffer of elements of `stride` bytes: the largest multiple of both
/// the stride and the offset alignment `align` within `limit`.
pub fn part_bytes(limit: u64, align: u64, stride: u64) -> u64 {
    let align = align.max(4);
    let unit = align / gcd(align, stride) * stride;
    limit / unit * unit
}

/// `src` with every store `name[I] = V;` turned into `name_put(u32(I), V);` and every load
/// `name[I]` into `name_at(u32(I))`, or `None` when `name` occurs in any other way outside its
/// declaration line `decl` (a compound assignment, a pointer).
fn rewrite_output(src: &str, name: &str, decl: &str) -> Option<String> {
    let b = src.as_bytes();
    // Loads inside an index or a stored value (`outJ[I] = outJ[I] * g;`) are rewritten with
    // it, so the occurrences it covers are skipped.
    rewrite_indexed(src, name, decl, true, |open, close| {
        let index = rewrite_output(&src[open + 1..close], name, "")?;
        let before = src[..open - name.len()].trim_end();
        if before.ends_with('&') {
            return None;
        }
        let rest = &src[close + 1..];
        let value_at = close + 1 + rest.len() - rest.trim_start().len();
        let after = &src[value_at..];
        if COMPOUND.iter().any(|c| after.starts_with(c)) {
            return None;
        }
        // A store to a part of the element (`outJ[I][C] = V;`, `outJ[I].x = V;`) would need a
        // read-modify-write of the whole element, which races where invocations share one.
        if component_store(src, value_at) {
            return None;
        }
        if b.get(value_at) != Some(&b'=') || b.get(value_at + 1) == Some(&b'=') {
            return Some((close + 1, format!("{name}_at(u32({index}))")));
        }
        // The value runs to the `;` outside any parentheses or brackets.
        let mut depth = 0i32;
        for (k, &c) in b.iter().enumerate().skip(value_at + 1) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => {
                    let value = rewrite_output(src[value_at + 1..k].trim(), name, "")?;
                    return Some((k + 1, format!("{name}_put(u32({index}), {value});")));
                }
                b'{' | b'}' => return None,
                _ => {}
            }
        }
        None
    })
}

/// Compound assignments, which a tensor bound in parts cannot take.
const COMPOUND: [&str; 12] = [
    "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--",
];

/// Whether the text of `src` from `at` (just after an element access `outJ[I]`) is a chain of
/// component or member accesses (`[C]`, `.x`) followed by an assignment: a store to a part of
/// the element.
fn component_store(src: &str, mut at: usize) -> bool {
    let b = src.as_bytes();
    let mut accessed = false;
    loop {
        while b.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        match b.get(at) {
            Some(b'[') => {
                let Some(end) = closing_bracket(src, at) else {
                    return false;
                };
                at = end + 1;
                accessed = true;
            }
            Some(b'.') => {
                at += 1;
                while b
                    .get(at)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    at += 1;
                }
                accessed = true;
            }
            _ => break,
        }
    }
    if !accessed {
        return false;
    }
    let rest = &src[at..];
    let assigns = rest.starts_with('=') && !rest.starts_with("==");
    assigns || COMPOUND.iter().any(|c| rest.starts_with(c))
}

/// Binds binding `j` of `kernel` (inputs, then outputs; a tensor of more than `limit` bytes)
/// in parts: declares the parts, adds `inJ_at` (inputs) or `outJ_put` (outputs), rewrites its
/// loads or stores and records it in `kernel.parted`. RESOURCE_EXHAUSTED when the tensor is
/// used other than by loads (inputs) or plain stores (outputs), when the parts would exceed
/// `max_bindings` storage buffers, or when its elements are not ones this knows.
pub fn apply(
    kernel: &mut Kernel,
    j: usize,
    (limit, align, max_bindings): (u64, u64, u32),
    caps: Capabilities,
    adapter: &str,
) -> Result<()> {
    let output = j >= kernel.inputs.len();
    let b = kernel
        .inputs
        .iter()
        .chain(&kernel.outputs)
        .nth(j)
        .ok_or_else(|| Error::internal(format!("{}: no binding {j} to part", kernel.name)))?;
    let bytes = b.ty.byte_size() as u64;
    let refuse = |why: String| {
        Error::resource_exhausted(format!(
            "kernel {} {} a {} tensor of {bytes} bytes, more than adapter {adapter}'s \
             max_storage_buffer_binding_size of {limit} bytes, and {why}",
            kernel.name,
            if output { "writes" } else { "reads" },
            b.ty
        ))
    };
    let name = kernel.binding_name(j);
    let access = if output { "read_write" } else { "read" };
    let marker = format!("var<storage, {access}> {name}: array<");
    let Some(decl) = kernel
        .wgsl
        .lines()
        .find(|l| l.contains(&marker))
        .map(str::to_string)
    else {
        return Err(refuse("its binding is not a storage array".into()));
    };
    let elem = decl
        .split(&marker)
        .nth(1)
        .and_then(|r| r.rsplit_once(">;"))
        .map(|(e, _)| e.to_string())
        .unwrap_or_default();
    let Some(stride) = stride(&elem) else {
        return Err(refuse(format!(
            "its elements ({elem}) cannot be bound in parts"
        )));
    };
    let part = part_bytes(limit, align, stride);
    if part == 0 {
        return Err(refuse("not one element fits a binding".into()));
    }
    let parts = u32::try_from(bytes.div_ceil(part)).unwrap_or(u32::MAX);
    let part_elems = part / stride;
    if u64::from(parts) * part_elems > 1 << 32 {
        return Err(refuse(
            "it has more elements than 32-bit indices reach".into(),
        ));
    }
    let bindings = kernel.storage_bindings() + parts - 1;
    if bindings > max_bindings {
        return Err(refuse(format!(
            "bound in {parts} parts the kernel would bind {bindings} storage buffers, more \
             than the adapter's {max_bindings}"
        )));
    }
    let rewritten = if output {
        rewrite_output(&kernel.wgsl, &name, &decl)
    } else {
        rewrite_indexing(&kernel.wgsl, &name, &decl, "_at(u32(", "))", None)
    };
    let Some(mut wgsl) = rewritten else {
        return Err(refuse(format!(
            "the kernel uses it other than by {}, so it cannot be bound in parts",
            if output {
                "loads and plain stores"
            } else {
                "loads"
            }
        )));
    };
    kernel.parted.push(PartedBinding {
        binding: j as u32,
        part_bytes: part,
        parts,
    });
    let k = kernel.parted.len() - 1;
    let mut decls = String::new();
    for p in 1..parts {
        let at = kernel.part_binding(k, p);
        decls.push_str(&format!(
            "\n@group(0) @binding({at}) var<storage, {access}> {name}_p{p}: array<{elem}>; // \
             part {p} of {name}"
        ));
    }
    // Loads for every binding (an output's are used where the kernel reads back what it
    // updates), stores for outputs.
    let mut body = accessor(
        &format!("\nfn {name}_at(i: u32) -> {elem} {{\n"),
        &name,
        (parts, part_elems),
        |part, from| format!("return {part}[i - {from}u];"),
    );
    if output {
        body.push_str(&accessor(
            &format!("\nfn {name}_put(i: u32, v: {elem}) {{\n"),
            &name,
            (parts, part_elems),
            |part, from| format!("{part}[i - {from}u] = v; return;"),
        ));
    }
    let note = if decl.contains("//") { "" } else { " //" };
    wgsl = wgsl.replacen(
        &decl,
        &format!("{}{note} (part 0 of {parts}){decls}", decl.trim_end()),
        1,
    );
    wgsl.push_str(&body);
    kernel::validate(&kernel.name, &wgsl, caps)?;
    kernel.wgsl = wgsl;
    Ok(())
}

/// A function (`header` opens it) that does `access(part, first element)` on the part of
/// binding `name` holding element `i`.
fn accessor(
    header: &str,
    name: &str,
    (parts, part_elems): (u32, u64),
    access: impl Fn(&str, u64) -> String,
) -> String {
    let mut body = header.to_string();
    for p in 1..parts {
        let source = if p == 1 {
            name.to_string()
        } else {
            format!("{name}_p{}", p - 1)
        };
        body.push_str(&format!(
            "    if (i < {}u) {{ {} }}\n",
            u64::from(p) * part_elems,
            access(&source, u64::from(p - 1) * part_elems)
        ));
    }
    body.push_str(&format!(
        "    {}\n}}\n",
        access(
            &format!("{name}_p{}", parts - 1),
            u64::from(parts - 1) * part_elems
        )
    ));
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::expr::Binding;
    use crate::ir::{ElementType, TensorType, ValueId};

    fn kernel(elem: &str, n: i64) -> Kernel {
        let wgsl = format!(
            "@group(0) @binding(0) var<storage, read> in0: array<u32>; // %0\n\
             @group(0) @binding(1) var<storage, read> in1: array<{elem}>; // %1\n\
             @group(0) @binding(2) var<storage, read_write> out0: array<{elem}>; // %2\n\
             @compute @workgroup_size(64)\n\
             fn main(@builtin(global_invocation_id) g: vec3<u32>) {{\n    \
             out0[g.x] = in1[in0[g.x] + in1_k()];\n}}\n\
             fn in1_k() -> u32 {{ return 3u; }}\n"
        );
        Kernel {
            name: "k".into(),
            wgsl,
            inputs: vec![
                Binding {
                    value: ValueId(0),
                    ty: TensorType::new(vec![4], ElementType::U32),
                },
                Binding {
                    value: ValueId(1),
                    ty: TensorType::new(vec![n], ElementType::F32),
                },
            ],
            outputs: vec![Binding {
                value: ValueId(2),
                ty: TensorType::new(vec![4], ElementType::F32),
            }],
            workgroups: [1, 1, 1],
            iterations: 0,
            texture_inputs: Vec::new(),
            state_textures: Vec::new(),
            scratch_textures: Vec::new(),
            parted: Vec::new(),
        }
    }

    #[test]
    fn parts_are_aligned_and_bound_after_the_outputs() {
        assert_eq!(part_bytes(1 << 27, 256, 4), 1 << 27);
        assert_eq!(part_bytes(1000, 256, 4), 768);
        assert_eq!(part_bytes(1000, 32, 12), 960);
        // 250 M f32 (1000 MB) in parts of at most 256 MiB: 4 parts.
        let mut k = kernel("f32", 250_000_000);
        apply(&mut k, 1, (1 << 28, 256, 8), Capabilities::default(), "a").unwrap();
        assert_eq!(
            k.parted,
            vec![PartedBinding {
                binding: 1,
                part_bytes: 1 << 28,
                parts: 4
            }]
        );
        assert_eq!(k.part_binding(0, 1), 3);
        assert_eq!(k.part_binding(0, 3), 5);
        assert_eq!(k.storage_bindings(), 6);
        assert!(
            k.wgsl
                .contains("out0[g.x] = in1_at(u32(in0[g.x] + in1_k()));"),
            "{}",
            k.wgsl
        );
        assert!(k
            .wgsl
            .contains("@binding(5) var<storage, read> in1_p3: array<f32>;"));
        assert!(k
            .wgsl
            .contains("if (i < 134217728u) { return in1_p1[i - 67108864u]; }"));
        assert!(
            k.wgsl.contains("return in1_p3[i - 201326592u];"),
            "{}",
            k.wgsl
        );
        let last = k.parted[0].range(3, 1_000_000_000);
        assert_eq!(last, (3 << 28, 1_000_000_000 - (3 << 28)));
        // Too many bindings, or a use other than indexing: refused.
        let mut k = kernel("f32", 250_000_000);
        let e = apply(&mut k, 1, (1 << 28, 256, 5), Capabilities::default(), "a").unwrap_err();
        assert!(e.message.contains("6 storage buffers"), "{e}");
        let mut k = kernel("f32", 250_000_000);
        k.wgsl
            .push_str("fn n() -> u32 { return arrayLength(&in1); }\n");
        assert!(apply(&mut k, 1, (1 << 28, 256, 8), Capabilities::default(), "a").is_err());
    }

    #[test]
    fn stores_go_through_the_part_holding_their_element() {
        let large = TensorType::new(vec![100_000_000], ElementType::F32);
        let mut k = kernel("f32", 4);
        k.outputs[0].ty = large.clone();
        apply(&mut k, 2, (1 << 28, 256, 8), Capabilities::default(), "a").unwrap();
        assert_eq!(k.part_binding(0, 1), 3);
        assert!(
            k.wgsl
                .contains("out0_put(u32(g.x), in1[in0[g.x] + in1_k()]);"),
            "{}",
            k.wgsl
        );
        assert!(k
            .wgsl
            .contains("@binding(3) var<storage, read_write> out0_p1: array<f32>;"));
        assert!(k
            .wgsl
            .contains("if (i < 67108864u) { out0[i - 0u] = v; return; }"));
        assert!(k.wgsl.contains("out0_p1[i - 67108864u] = v; return;"));
        // An output read back (a scatter updating in place) reads the part holding it.
        let mut k = kernel("f32", 4);
        k.outputs[0].ty = large.clone();
        k.wgsl
            .push_str("fn h() { let r = out0[1u] + 2.0; out0[1u] = r; let c = out0[2u] == r; }\n");
        apply(&mut k, 2, (1 << 28, 256, 8), Capabilities::default(), "a").unwrap();
        assert!(
            k.wgsl.contains(
                "let r = out0_at(u32(1u)) + 2.0; out0_put(u32(1u), r); let c = out0_at(u32(2u)) == r;"
            ),
            "{}",
            k.wgsl
        );
        assert!(k.wgsl.contains("return out0_p1[i - 67108864u];"));
        // A component of an element read back is a load.
        let mut k = kernel("vec4<f32>", 4);
        k.outputs[0].ty = large.clone();
        k.wgsl
            .push_str("fn h() { let r = out0[1u][2u] + out0[3u].y; let c = out0[2u][1u] == r; }\n");
        apply(&mut k, 2, (1 << 28, 256, 8), Capabilities::default(), "a").unwrap();
        assert!(
            k.wgsl.contains(
                "let r = out0_at(u32(1u))[2u] + out0_at(u32(3u)).y; let c = out0_at(u32(2u))[1u] == r;"
            ),
            "{}",
            k.wgsl
        );
        // A store whose index or value reads the tensor (an update in place).
        let mut k = kernel("f32", 4);
        k.outputs[0].ty = large.clone();
        k.wgsl.push_str(
            "fn h(g: f32) { out0[u32(out0[0u]) + 1u] = out0[(2u) * 3u] * g + out0[u32(out0[4u])]; }\n",
        );
        apply(&mut k, 2, (1 << 28, 256, 8), Capabilities::default(), "a").unwrap();
        assert!(
            k.wgsl.contains(
                "out0_put(u32(u32(out0_at(u32(0u))) + 1u), out0_at(u32((2u) * 3u)) * g + out0_at(u32(u32(out0_at(u32(4u))))));"
            ),
            "{}",
            k.wgsl
        );
        // Compound assignments, pointers and stores to a component of an element (a
        // read-modify-write that would race where invocations share the element) keep their
        // one binding.
        for other in [
            "out0[1u] += 1.0;",
            "let p = &out0[1u];",
            "out0[1u][2u] = 1.0;",
            "out0[1u][min(2u, 3u)] = 1.0;",
            "out0[1u].x = 1.0;",
            "out0[1u] [2u]+= 1.0;",
        ] {
            let mut k = kernel("f32", 4);
            k.outputs[0].ty = large.clone();
            k.wgsl.push_str(&format!("fn h() {{ {other} }}\n"));
            let e = apply(&mut k, 2, (1 << 28, 256, 8), Capabilities::default(), "a");
            assert!(e.is_err(), "{other}");
        }
    }
}
