//! `rng_bit_generator`: the counter-based generators XLA expands it into (ThreeFry-2x32 with
//! 20 rounds, Philox-4x32 with 10 rounds), producing exactly the bits XLA does for every output
//! shape and width, so that a program gives the same random numbers on wgpu as on XLA's cpu
//! backend. `DEFAULT` is Philox, as on XLA's cpu and gpu backends.
//!
//! Counter-based generators need no sequential state: each thread computes the output word it
//! writes from its own counter (no loops; the rounds are unrolled). Thread 0 also writes the
//! updated state.
//!
//! How XLA lays the bits out (`xla/hlo/builder/lib/prng.cc`, `rng_bit_generator_expander.cc`):
//! - the state is `u64[2]` (`u64[3]` for Philox): `state[0]` is the key;
//! - ThreeFry, 64-bit outputs: element `i` is the block at counter `state[1] + i`, its two words
//!   low first;
//! - ThreeFry, 32-bit (and narrower) outputs: the shape is split in halves along its first even
//!   dimension (else its largest, rounded up); the block at counter `state[1] + h`, `h` the
//!   linear index in the half shape, gives the elements at coordinates `2c` (word 0) and `2c + 1`
//!   (word 1) of the split dimension; the new state is `state[1]` + the half shape's size;
//! - Philox: the 128-bit counter is (`state[1]`, `state[2]`), or (`state[1]`, `state[0]`) for a
//!   2-element state (whose update then drops the carry); block `b` = counter + `b`; 32-bit
//!   element `i` is word `i % 4` of block `i / 4`, 64-bit element `i` is words (0, 1) or (2, 3)
//!   of block `i / 2`;
//! - narrower outputs are the 32-bit ones truncated.

use std::collections::{BTreeSet, HashMap};

use crate::codegen::expr::Binding;
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::codegen::{dtype, elementwise};
use crate::error::{Error, Result};
use crate::ir::attr::RngAlgorithm;
use crate::ir::{ElementType, Function, Op, Operation, ValueId};

/// Rotation distances of ThreeFry-2x32.
const THREEFRY_ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];

/// The generator functions: `rng_threefry(key, counter) -> words` and
/// `rng_philox(key, counter) -> words`.
const GENERATORS: &str = "\
fn rng_rotl(v: u32, d: u32) -> u32 {
    return (v << d) | (v >> (32u - d));
}

// The high and low words of the 64-bit product a * b.
fn rng_mul_hi_lo(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return vec2<u32>(ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u), a * b);
}

";

fn threefry_function() -> String {
    let mut s = String::from(
        "fn rng_threefry(k: vec2<u32>, c: vec2<u32>) -> vec2<u32> {\n    \
         let ks = array<u32, 3>(k.x, k.y, 0x1BD11BDAu ^ k.x ^ k.y);\n    \
         var x0 = c.x + ks[0];\n    var x1 = c.y + ks[1];\n",
    );
    for group in 0..5usize {
        for r in 0..4 {
            let rot = THREEFRY_ROTATIONS[(group % 2) * 4 + r];
            s.push_str(&format!(
                "    x0 = x0 + x1; x1 = rng_rotl(x1, {rot}u) ^ x0;\n"
            ));
        }
        s.push_str(&format!(
            "    x0 = x0 + ks[{}]; x1 = x1 + ks[{}] + {}u;\n",
            (group + 1) % 3,
            (group + 2) % 3,
            group + 1
        ));
    }
    s.push_str("    return vec2<u32>(x0, x1);\n}\n\n");
    s
}

fn philox_function() -> String {
    let mut s = String::from(
        "fn rng_philox(k: vec2<u32>, c: vec4<u32>) -> vec4<u32> {\n    \
         var x = c;\n    var key = k;\n",
    );
    for _ in 0..10 {
        s.push_str(
            "    {\n        let p0 = rng_mul_hi_lo(x.x, 0xD2511F53u);\n        \
             let p1 = rng_mul_hi_lo(x.z, 0xCD9E8D57u);\n        \
             x = vec4<u32>(p1.x ^ x.y ^ key.x, p1.y, p0.x ^ x.w ^ key.y, p0.y);\n        \
             key = key + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);\n    }\n",
        );
    }
    s.push_str("    return x;\n}\n\n");
    s
}

/// The dimension XLA splits a shape along for 32-bit ThreeFry outputs (`SplitShapeIntoHalves`):
/// the first even one, else the first largest one. `None` for a 0-d shape.
fn split_dim(dims: &[usize]) -> Option<usize> {
    if dims.is_empty() {
        return None;
    }
    if let Some(d) = dims.iter().position(|d| d % 2 == 0) {
        return Some(d);
    }
    let mut best = 0;
    for (i, &d) in dims.iter().enumerate() {
        if d > dims[best] {
            best = i;
        }
    }
    Some(best)
}

/// WGSL statements (inside a function of `i: u32`, the element's linear index, with `key` and
/// `s1` (a `vec2<u32>`, the low and high words of `state[1]`) in scope) returning the 32 bits of
/// ThreeFry output element `i`.
fn threefry32_body(dims: &[usize]) -> String {
    let Some(s) = split_dim(dims) else {
        return "    return rng_threefry(key, rng_add64(s1, 0u)).x;\n".into();
    };
    let mut half = dims.to_vec();
    half[s] = dims[s].div_ceil(2);
    let mut body = String::new();
    let mut terms = Vec::new();
    let (mut stride, mut hstride) = (1usize, 1usize);
    for k in (0..dims.len()).rev() {
        let c = format!("((i / {stride}u) % {}u)", dims[k].max(1));
        if k == s {
            body.push_str(&format!("    let cs = {c};\n"));
            terms.push(format!("(cs / 2u) * {hstride}u"));
        } else if dims[k] != 1 {
            terms.push(format!("{c} * {hstride}u"));
        }
        stride *= dims[k];
        hstride *= half[k];
    }
    body.push_str(&format!(
        "    let h = {};\n    let w = rng_threefry(key, rng_add64(s1, h));\n    \
         return select(w.x, w.y, (cs & 1u) == 1u);\n",
        terms.join(" + ")
    ));
    body
}

/// Emits the kernel for a `rng_bit_generator`.
pub fn emit(
    name: &str,
    f: &Function,
    _defs: &HashMap<ValueId, &Operation>,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::RngBitGenerator { algorithm } = op.op else {
        return Err(Error::internal("rng emitter on another op"));
    };
    let ([state], [new_state, data]) = (&op.operands[..], &op.results[..]) else {
        return Err(Error::invalid(
            "rng_bit_generator takes one state and gives a state and the bits",
        ));
    };
    let tensor = |v: ValueId| {
        f.ty(v)
            .as_tensor()
            .cloned()
            .ok_or_else(|| Error::invalid("rng_bit_generator works on tensors"))
    };
    let (st, dt) = (tensor(*state)?, tensor(*data)?);
    if !target.caps.i64 {
        return Err(Error::unimplemented(format!(
            "rng_bit_generator: its u64 state is not supported on adapter {} (it lacks \
             SHADER_INT64)",
            target.adapter
        )));
    }
    let t = dt.dtype;
    if !t.is_int() || !matches!(t.bit_width(), 8 | 16 | 32 | 64) || st.dtype != ElementType::U64 {
        return Err(Error::unimplemented(format!(
            "rng_bit_generator producing {t} from a {} state",
            st.dtype
        )));
    }
    let state_len = st.num_elements();
    let philox = algorithm != RngAlgorithm::ThreeFry;
    if state_len < 2 || (!philox && state_len != 2) || state_len > 3 {
        return Err(Error::invalid(format!(
            "rng_bit_generator: a state of {state_len} elements does not suit {algorithm}"
        )));
    }
    let dims = dt.dims();
    let n = dt.num_elements() as u64;
    let wide = t.bit_width() == 64;

    let mut functions = String::from(GENERATORS);
    functions.push_str(
        "// A 64-bit counter (low, high words) plus a 32-bit offset.\n\
         fn rng_add64(c: vec2<u32>, d: u32) -> vec2<u32> {\n    \
         let lo = c.x + d;\n    return vec2<u32>(lo, c.y + select(0u, 1u, lo < c.x));\n}\n\n",
    );
    let lo = |e: &str| format!("u32({e} & 0xfffffffflu)");
    let hi = |e: &str| format!("u32({e} >> 32u)");
    let word = |k: usize| {
        format!(
            "vec2<u32>({}, {})",
            lo(&format!("in0[{k}]")),
            hi(&format!("in0[{k}]"))
        )
    };
    // The element function: `rng_bits(i)` gives element i's bits, a u32 (low 32 bits for
    // narrower types) or a vec2<u32> (low, high) for 64-bit types.
    let ret = if wide { "vec2<u32>" } else { "u32" };
    let blocks: u64;
    let new_counter: String;
    if philox {
        functions.push_str(&philox_function());
        let counter_hi = if state_len == 3 { word(2) } else { word(0) };
        functions.push_str(&format!(
            "fn rng_bits(i: u32) -> {ret} {{\n    let key = {};\n    let lo = {};\n    \
             let hi = {counter_hi};\n",
            word(0),
            word(1)
        ));
        let (per_block, pick) = if wide {
            (
                2,
                "let w = rng_philox(key, ctr);\n    \
                 return select(w.xy, w.zw, (i & 1u) == 1u);\n",
            )
        } else {
            (4, "var w = rng_philox(key, ctr);\n    return w[i & 3u];\n")
        };
        functions.push_str(&format!(
            "    let b = i / {per_block}u;\n    let l = rng_add64(lo, b);\n    \
             let carry = select(0u, 1u, l.y < lo.y || (l.y == lo.y && l.x < lo.x));\n    \
             let h = rng_add64(hi, carry);\n    let ctr = vec4<u32>(l.x, l.y, h.x, h.y);\n    {pick}}}\n\n"
        ));
        blocks = n.div_ceil(per_block);
        new_counter = if state_len == 3 {
            format!(
                "    let c1 = in0[1] + {blocks}lu;\n    out0[1] = c1;\n    \
                 out0[2] = in0[2] + select(0lu, 1lu, c1 < in0[1]);\n"
            )
        } else {
            format!("    out0[1] = in0[1] + {blocks}lu;\n")
        };
    } else {
        functions.push_str(&threefry_function());
        functions.push_str(&format!(
            "fn rng_bits(i: u32) -> {ret} {{\n    let key = {};\n    let s1 = {};\n",
            word(0),
            word(1)
        ));
        if wide {
            functions.push_str("    return rng_threefry(key, rng_add64(s1, i));\n}\n\n");
            blocks = n;
        } else {
            functions.push_str(&threefry32_body(&dims));
            functions.push_str("}\n\n");
            blocks = match split_dim(&dims) {
                None => 1,
                Some(s) => {
                    let mut half = dims.clone();
                    half[s] = dims[s].div_ceil(2);
                    half.iter().product::<usize>() as u64
                }
            };
        }
        new_counter = format!("    out0[1] = in0[1] + {blocks}lu;\n");
    }

    // One thread per output word (per element for 32- and 64-bit types).
    let per = dtype::per_word(t) as u64;
    let words = n.div_ceil(per);
    let mut body = String::from("    if (tid == 0u) {\n");
    for k in 0..state_len {
        body.push_str(&format!("        out0[{k}] = in0[{k}];\n"));
    }
    body.push_str(&new_counter.replace("    ", "        "));
    body.push_str("    }\n");
    if n == 0 {
        // Bound all the same: the pipeline layout follows the module's bindings.
        body.push_str("    _ = &out1;\n");
    } else {
        body.push_str(&format!("    if (tid < {words}u) {{\n"));
        if wide {
            let lo64 = elementwise::widen_u32_to_u64("v.x");
            let hi64 = elementwise::widen_u32_to_u64("v.y");
            let v = format!("(({hi64} << 32u) | {lo64})");
            let v = if t == ElementType::I64 {
                format!("bitcast<i64>({v})")
            } else {
                v
            };
            body.push_str(&format!(
                "        let v = rng_bits(tid);\n        out1[tid] = {v};\n"
            ));
        } else if per == 1 {
            let v = if t == ElementType::I32 {
                "bitcast<i32>(rng_bits(tid))"
            } else {
                "rng_bits(tid)"
            };
            body.push_str(&format!("        out1[tid] = {v};\n"));
        } else {
            let bits = 32 / per;
            body.push_str("        var packed = 0u;\n");
            for e in 0..per {
                body.push_str(&format!(
                    "        if (tid * {per}u + {e}u < {n}u) {{ packed = packed | \
                     ((rng_bits(tid * {per}u + {e}u) & {:#x}u) << {}u); }}\n",
                    (1u64 << bits) - 1,
                    e * bits
                ));
            }
            body.push_str("        out1[tid] = packed;\n");
        }
        body.push_str("    }\n");
    }
    let comment = format!(
        "kernel {name}: rng_bit_generator {algorithm} ({}), {n} x {t}",
        if philox {
            "Philox-4x32-10"
        } else {
            "ThreeFry-2x32-20"
        }
    );
    let inputs = vec![Binding {
        value: *state,
        ty: st.clone(),
    }];
    let outputs = vec![
        Binding {
            value: *new_state,
            ty: st,
        },
        Binding {
            value: *data,
            // An empty output is never written; bound as `u32`s, the smallest binding there is.
            ty: if n == 0 {
                crate::ir::TensorType::new(vec![0], ElementType::U32)
            } else {
                dt
            },
        },
    ];
    kernel::threaded(
        name,
        &comment,
        inputs,
        outputs,
        &BTreeSet::new(),
        &functions,
        &body,
        words.max(1),
        0,
        target,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_xla() {
        assert_eq!(split_dim(&[]), None);
        assert_eq!(split_dim(&[5, 7]), Some(1));
        assert_eq!(split_dim(&[5, 4, 6]), Some(1));
        assert_eq!(split_dim(&[3, 9, 9]), Some(1));
        assert_eq!(split_dim(&[0]), Some(0));
    }
}
