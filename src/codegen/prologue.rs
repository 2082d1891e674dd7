//! Prologues of dot and convolution kernels ([`crate::fusion::prologue`]): the loop kernels
//! computing a dot's operands become WGSL functions `wh_operand0(o)` / `wh_operand1(o)` giving
//! the operand's element at row-major offset `o`, which the dot kernel calls wherever it read
//! that operand's buffer.
//!
//! The dot emitters read their operands with plain `in0[...]` and `in1[...]` expressions
//! (element offsets into `array<f32>`, or `vec4` offsets into `array<vec4<f32>>` views). The
//! prologue takes a finished single-kernel dot, rebinds its inputs (operands not fused keep
//! their own view, the producers' inputs follow), turns each read of a fused operand into a
//! call (`wh_operand0_4(q)` assembles a `vec4` from four calls), and validates the result; any
//! kernel not of that form is refused, and the compile driver then lowers the producers and
//! the dot separately.

use std::collections::{BTreeSet, HashSet};

use super::dtype;
use super::expr::{binding_limits, ExprEmitter, Index};
use super::kernel::{self, Kernel, RUNTIME_ZERO};
use super::library;
use super::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::fusion::Group;
use crate::ir::{Function, Operation, ValueId};
use std::collections::HashMap;

/// How the rewritten kernel reads one of the dot's operands.
enum Read {
    /// From binding `k`, declared with the dot's own element type.
    Binding(usize, String),
    /// Through `wh_operand{slot}` (or its `_4` form for a `vec4` view).
    Call { vec4: bool },
}

/// The element type the dot's WGSL declares for binding `var` (`f32`, `vec4<f32>`).
fn declared_elem(wgsl: &str, var: &str) -> Option<String> {
    let decl = format!("var<storage, read> {var}: array<");
    let at = wgsl.find(&decl)? + decl.len();
    let end = wgsl[at..].find(">;")?;
    // `vec4<f32>>;` ends one character later than `f32>;`.
    let elem = &wgsl[at..at + end];
    Some(if elem.ends_with("<f32") {
        format!("{elem}>")
    } else {
        elem.to_string()
    })
}

/// The dot kernel `dot` with the loop kernels `producers` computed where it reads the operands
/// they produce.
pub fn apply(
    f: &Function,
    defs: &HashMap<ValueId, &Operation>,
    dot: Kernel,
    producers: &[Group],
    target: Target,
) -> Result<Kernel> {
    let name = dot.name.clone();
    let refuse = |why: &str| Err(Error::unimplemented(format!("{name}: prologue: {why}")));
    let [lhs, rhs] = dot.inputs.as_slice() else {
        return refuse("not a kernel of two operands");
    };
    let members: HashSet<ValueId> = producers
        .iter()
        .flat_map(|p| p.members.iter().copied())
        .collect();
    let produced = |v: ValueId| producers.iter().any(|p| p.outputs.contains(&v));
    let fused = |v: ValueId| members.contains(&v);
    let mut em = ExprEmitter::new(f, defs, &fused, target.caps, target.adapter);

    // Operands read as they are keep their bindings first, with the dot's own view.
    let mut reads = Vec::new();
    for (slot, b) in [lhs, rhs].into_iter().enumerate() {
        let elem = declared_elem(&dot.wgsl, &format!("in{slot}"))
            .filter(|e| e == "f32" || e == "vec4<f32>");
        let Some(elem) = elem else {
            return refuse(&format!("operand {slot} is not an f32 or vec4<f32> array"));
        };
        if produced(b.value) {
            reads.push(Read::Call {
                vec4: elem != "f32",
            });
        } else {
            reads.push(Read::Binding(em.input(b.value)?, elem));
        }
    }
    let mut funcs = String::new();
    for (slot, b) in [lhs, rhs].into_iter().enumerate() {
        let Some(Read::Call { vec4 }) = reads.get(slot) else {
            continue;
        };
        if slot == 1 && lhs.value == rhs.value {
            // Both operands are the same value: one function serves both.
            funcs.push_str("fn wh_operand1(o: u32) -> f32 {\n    return wh_operand0(o);\n}\n");
        } else {
            em.begin_function(&[]);
            let x = em.value(b.value, &Index::Linear("o".into()))?;
            let body = em.end_function();
            funcs.push_str(&format!(
                "\nfn wh_operand{slot}(o: u32) -> f32 {{\n{body}    return {x};\n}}\n"
            ));
        }
        if *vec4 {
            funcs.push_str(&format!(
                "fn wh_operand{slot}_4(q: u32) -> vec4<f32> {{\n    let o = q * 4u;\n    return vec4<f32>(wh_operand{slot}(o), wh_operand{slot}(o + 1u), wh_operand{slot}(o + 2u), wh_operand{slot}(o + 3u));\n}}\n"
            ));
        }
    }
    if em.iterations() > 0 {
        return refuse("its producers loop");
    }
    // A producer reading an operand kept as a `vec4` view would read it through that view.
    for (k, read) in reads.iter().enumerate() {
        if let Read::Binding(j, elem) = read {
            if elem != "f32" && funcs.contains(&format!("in{j}[")) {
                return refuse(&format!("a producer reads operand {k}, bound as {elem}"));
            }
        }
    }
    if let Some(why) = binding_limits(&em.inputs, &dot.outputs, &target) {
        return refuse(&why);
    }
    let mut needs: BTreeSet<String> = em.needs.clone();
    needs.extend(kernel::called_library_functions(&funcs));
    needs.retain(|n| !dot.wgsl.contains(&format!("fn {n}(")));

    // The dot's declarations of its bindings go; the new ones take the first one's place.
    let (mut head, mut rest, mut seen) = (String::new(), String::new(), false);
    for line in dot.wgsl.split_inclusive('\n') {
        if line.starts_with("@group(0) @binding(") {
            seen = true;
        } else if seen {
            rest.push_str(line);
        } else {
            head.push_str(line);
        }
    }
    let Some(out_elem) = declared_out(&dot.wgsl) else {
        return refuse("no f32 result binding");
    };
    let mut decls = String::new();
    for (k, b) in em.inputs.iter().enumerate() {
        let elem = match reads.iter().find_map(|r| match r {
            Read::Binding(j, e) if *j == k => Some(e.clone()),
            _ => None,
        }) {
            Some(e) => e,
            None => dtype::storage_elem(b.ty.dtype).to_string(),
        };
        decls.push_str(&format!(
            "@group(0) @binding({k}) var<storage, read> in{k}: array<{elem}>; // {} {}\n",
            b.value, b.ty
        ));
    }
    decls.push_str(&format!(
        "@group(0) @binding({}) var<storage, read_write> out0: array<{out_elem}>;\n",
        em.inputs.len()
    ));
    let needs_zero =
        funcs.contains(RUNTIME_ZERO) && !dot.wgsl.contains(&format!("var<private> {RUNTIME_ZERO}"));
    if needs_zero {
        decls.push_str(&format!("var<private> {RUNTIME_ZERO}: u32;\n"));
    }
    let Some(mut rest) = rewrite_reads(&rest, &reads) else {
        return refuse("the dot reads its operands otherwise than by index");
    };
    if needs_zero {
        // From a buffer length (below 2^31 elements), which no compiler can fold.
        let Some(at) = rest
            .find("fn main(")
            .and_then(|m| rest[m..].find(") {\n").map(|k| m + k + 4))
        else {
            return refuse("no entry point");
        };
        rest.insert_str(
            at,
            &format!("    {RUNTIME_ZERO} = arrayLength(&out0) >> 31u;\n"),
        );
    }
    head.push_str(&decls);
    let mut wgsl = head;
    wgsl.push_str(&rest);
    wgsl.push_str(&library::resolve(needs.iter().map(String::as_str))?);
    wgsl.push_str(&format!(
        "\n// prologue: fuses {}\n{funcs}",
        em.fused_ops.iter().cloned().collect::<Vec<_>>().join(", ")
    ));
    kernel::validate(&name, &wgsl, target.caps)?;
    Ok(Kernel {
        name: dot.name,
        wgsl,
        inputs: em.inputs.clone(),
        outputs: dot.outputs,
        workgroups: dot.workgroups,
        iterations: dot.iterations,
        texture_inputs: Vec::new(),
        state_textures: Vec::new(),
        scratch_textures: Vec::new(),
        parted: Vec::new(),
    })
}

/// The element type of the dot's result binding `out0`.
fn declared_out(wgsl: &str) -> Option<String> {
    let decl = "var<storage, read_write> out0: array<";
    let at = wgsl.find(decl)? + decl.len();
    let end = wgsl[at..].find(">;")?;
    let elem = &wgsl[at..at + end];
    (elem == "f32").then(|| elem.to_string())
}

/// `src` with each `in0[e]` / `in1[e]` read as `reads` says; `None` when an operand binding
/// appears otherwise (its length taken, say).
fn rewrite_reads(src: &str, reads: &[Read]) -> Option<String> {
    let mut out = String::new();
    let mut rest = src;
    loop {
        let next = ["in0", "in1"]
            .iter()
            .enumerate()
            .filter_map(|(slot, t)| {
                let mut from = 0;
                while let Some(k) = rest[from..].find(t) {
                    let at = from + k;
                    let before = rest[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                        from = at + t.len();
                        continue;
                    }
                    let after = rest[at + t.len()..].chars().next();
                    if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                        from = at + t.len();
                        continue;
                    }
                    return Some((at, slot));
                }
                None
            })
            .min();
        let Some((at, slot)) = next else {
            out.push_str(rest);
            return Some(out);
        };
        out.push_str(&rest[..at]);
        let after = rest[at + 3..].strip_prefix('[')?;
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
        let index = &after[..end];
        match reads.get(slot)? {
            Read::Binding(k, _) => out.push_str(&format!("in{k}[{index}]")),
            Read::Call { vec4: false } => out.push_str(&format!("wh_operand{slot}({index})")),
            Read::Call { vec4: true } => out.push_str(&format!("wh_operand{slot}_4({index})")),
        }
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::{declared_elem, rewrite_reads, Read};

    #[test]
    fn reads_become_calls_or_renamed_bindings() {
        let reads = [Read::Call { vec4: true }, Read::Binding(0, "f32".into())];
        let src = "let a = in0[lhs_off(b, m, k) >> 2u]; let w = in1[rhs_off(b, n, k)] + win1[0];";
        assert_eq!(
            rewrite_reads(src, &reads).as_deref(),
            Some(
                "let a = wh_operand0_4(lhs_off(b, m, k) >> 2u); let w = in0[rhs_off(b, n, k)] + win1[0];"
            )
        );
        assert_eq!(rewrite_reads("let n = arrayLength(&in0);", &reads), None);
    }

    #[test]
    fn declared_elements() {
        let w = "@group(0) @binding(0) var<storage, read> in0: array<vec4<f32>>;\n@group(0) @binding(1) var<storage, read> in1: array<f32>; // %1\n";
        assert_eq!(declared_elem(w, "in0").as_deref(), Some("vec4<f32>"));
        assert_eq!(declared_elem(w, "in1").as_deref(), Some("f32"));
        assert_eq!(declared_elem(w, "in2"), None);
    }
}
