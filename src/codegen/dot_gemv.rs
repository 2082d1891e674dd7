//! Matrix-vector products: a `dot_general` (f32) whose result has one row or one column per
//! batch (`A @ v`, `v @ A`, a `vmap` of them, a batch of dot products). The tiled and
//! register-blocked kernels compute blocks of rows x columns; with one column (or one row)
//! most of each block is padding: lavapipe ran a 4096² matrix-vector product in 33-35 ms
//! through the shared-rows kernel, whose lanes own 8 columns each, where summing the matrix's
//! rows takes 9.5 ms. A matrix-vector product reads every matrix element once, so it is
//! bound by memory; these kernels read the matrix in `vec4`s along its contiguous dimension:
//!
//! * **Along k** (the matrix's contracting dimension is contiguous, `A @ v` with `A`
//!   row-major): a team of lanes per result, each lane summing every `lanes`-th `vec4` of
//!   the row, the team's partial sums added in workgroup memory (one barrier).
//! * **Along the rows** (the matrix's free dimension is contiguous, `v @ A`): a thread per
//!   16 results (four `vec4`s, interleaved with its neighbours' so that SIMD lanes read
//!   contiguous memory), one value of the vector per step of k.
//!
//! Other layouts (neither contiguous in `vec4`s) keep the general kernels.

use super::dot_kernel::{
    blocked_k_loop, operand_offsets, read_modes, register_kernel, Layout, Read,
};
use super::kernel::{grid, Kernel};
use super::loop_kernel::Target;
use crate::error::Result;
use crate::ir::{Operation, TensorType};

/// The matrix-vector kernel for a dot of `(batch, m, n, k)` with `m == 1` or `n == 1`, or
/// `None` where it does not apply (layouts, or an invocation would loop longer than the
/// target allows).
pub(super) fn gemv(
    name: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (l, r): (&Layout, &Layout),
    (batch, m, n, k): (u64, u64, u64, u64),
    target: Target,
) -> Result<Option<Kernel>> {
    gemv_split(
        name,
        op,
        (lt, rt, ot),
        (l, r),
        (batch, m, n, k),
        None,
        target,
    )
}

/// A matrix-vector product whose results are too few to fill the device, and whose rows
/// are long, as partial sums over chunks of k ([`gemv_split`]'s `split`: `(parts, chunk)`)
/// and a fold: the plain kernel gives each result one team of lanes, and a dot product of
/// two 2^20-vectors ran in one team on lavapipe (10 ms, where summing their product took
/// 6 ms), its lanes each summing 2^15 products in sequence (1.8e-6 off, jax cpu 3.9e-8).
/// `None` where the split does not apply (the matrix not read along k, or enough results).
pub(super) fn gemv_parts(
    name: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (l, r): (&Layout, &Layout),
    (batch, m, n, k): (u64, u64, u64, u64),
    target: Target,
) -> Result<Option<(Kernel, u64)>> {
    if (m != 1 && n != 1) || m == 0 || n == 0 || batch == 0 || k % 4 != 0 {
        return Ok(None);
    }
    let (ra, rb) = read_modes((l, lt), (r, rt), k);
    let (xm, vm) = if n == 1 { (ra, rb) } else { (rb, ra) };
    if xm != Read::AlongK || vm == Read::AlongFree {
        return Ok(None);
    }
    let (lanes, teams_per_wg) = if target.cpu_adapter { (8, 8) } else { (32, 8) };
    // Workgroups wanted: a few per core of a CPU adapter, about one per multiprocessor of a
    // large GPU.
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get() as u64);
    let want = if target.cpu_adapter { 4 * cores } else { 128 };
    let teams = batch * m.max(n);
    let groups = teams.div_ceil(teams_per_wg);
    // Each lane sums at least 64 vec4s of a chunk.
    let min_chunk = 4 * lanes * 64;
    if groups >= want || k < 2 * min_chunk {
        return Ok(None);
    }
    let parts = want.div_ceil(groups).min(k / min_chunk).max(2);
    let chunk = k.div_ceil(parts).next_multiple_of(4 * lanes);
    let parts = k.div_ceil(chunk);
    if parts < 2 {
        return Ok(None);
    }
    let kernel = gemv_split(
        name,
        op,
        (lt, rt, ot),
        (l, r),
        (batch, m, n, k),
        Some((parts, chunk)),
        target,
    )?;
    Ok(kernel.map(|kernel| (kernel, parts)))
}

/// [`gemv`], or with `split = Some((parts, chunk))` (the matrix read along k only) its
/// partials stage: each team sums `chunk` steps of k of one result, into a temporary of
/// `parts` f32 partials per result, element-major, that a fold adds up.
fn gemv_split(
    name: &str,
    op: &Operation,
    (lt, rt, ot): (&TensorType, &TensorType, &TensorType),
    (l, r): (&Layout, &Layout),
    (batch, m, n, k): (u64, u64, u64, u64),
    split: Option<(u64, u64)>,
    target: Target,
) -> Result<Option<Kernel>> {
    if (m != 1 && n != 1) || m == 0 || n == 0 || k < 4 || batch == 0 {
        return Ok(None);
    }
    let (parts, chunk) = split.unwrap_or((1, k));
    let (ra, rb) = read_modes((l, lt), (r, rt), k);
    // The matrix is the operand with the rows (the lhs when n == 1).
    let (rows, matrix_is_lhs) = if n == 1 { (m, true) } else { (n, false) };
    let (xm, vm) = if matrix_is_lhs { (ra, rb) } else { (rb, ra) };
    let (x, v) = if matrix_is_lhs {
        ("in0", "in1")
    } else {
        ("in1", "in0")
    };
    let (xoff, voff) = if matrix_is_lhs {
        ("lhs_off", "rhs_off")
    } else {
        ("rhs_off", "lhs_off")
    };
    // The vector's value(s) at step `kx`: a vec4 of k .. k+3, or one value.
    let vec4_at = |kx: &str| {
        match vm {
        Read::AlongK => format!("{v}[{voff}(b, 0u, {kx}) >> 2u]"),
        _ => format!(
            "vec4<f32>({v}[{voff}(b, 0u, {kx})], {v}[{voff}(b, 0u, {kx} + 1u)], {v}[{voff}(b, 0u, {kx} + 2u)], {v}[{voff}(b, 0u, {kx} + 3u)])"
        ),
    }
    };
    let header = |wg: u64| {
        format!(
            "@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
             @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n"
        )
    };
    let total = batch * rows;
    let mut body = operand_offsets(l, r);
    let (workgroups, iterations, how) = match xm {
        Read::AlongK if vm != Read::AlongFree => {
            // Lanes per result: a GPU's 32-lane groups read 512 contiguous bytes a step; a
            // CPU adapter's SIMD width is 8.
            let (lanes, wg) = if target.cpu_adapter {
                (8u64, 64u64)
            } else {
                (32, 256)
            };
            let per_wg = wg / lanes;
            let iterations = chunk.div_ceil(4 * lanes);
            if iterations > target.max_invocation_iterations {
                return Ok(None);
            }
            body.push_str(&format!("var<workgroup> part: array<f32, {wg}>;\n\n"));
            body.push_str(&header(wg));
            body.push_str(&format!(
                "    let g = wid.y * nwg.x + wid.x;\n    let lane = lid % {lanes}u;\n    \
                 let team = g * {per_wg}u + lid / {lanes}u;\n    \
                 let t = min(team, {last}u);\n    let tr = t % {total}u;\n    \
                 let ke = min((t / {total}u) * {chunk}u + {chunk}u, {k}u);\n    \
                 let b = tr / {rows}u;\n    let row = tr % {rows}u;\n    \
                 var acc = vec4<f32>();\n    var acc2 = vec4<f32>();\n    \
                 var k = (t / {total}u) * {chunk}u + lane * 4u;\n    \
                 for (; k + {step}u < ke; k = k + {step2}u) {{\n        \
                 acc = acc + {x}[{xoff}(b, row, k) >> 2u] * {w};\n        \
                 acc2 = acc2 + {x}[{xoff}(b, row, k + {step}u) >> 2u] * {w2};\n    }}\n    \
                 if (k < ke) {{ acc = acc + {x}[{xoff}(b, row, k) >> 2u] * {w}; }}\n    \
                 acc = acc + acc2;\n    \
                 part[lid] = (acc.x + acc.y) + (acc.z + acc.w);\n    workgroupBarrier();\n    \
                 if (lane == 0u && team < {teams}u) {{\n        var s = 0.0f;\n        \
                 for (var i = 0u; i < {lanes}u; i = i + 1u) {{ s = s + part[lid + i]; }}\n        \
                 out0[{store}] = s;\n    }}\n}}\n",
                teams = total * parts,
                last = total * parts - 1,
                store = if split.is_some() {
                    format!("tr * {parts}u + t / {total}u")
                } else {
                    "t".to_string()
                },
                step = 4 * lanes,
                step2 = 8 * lanes,
                w = vec4_at("k"),
                w2 = vec4_at(&format!("k + {}u", 4 * lanes)),
            ));
            let how = match split {
                Some(_) => format!(
                    "{lanes} lanes per result and chunk, vec4 reads along k; {parts} partial sums over contracting chunks of {chunk}"
                ),
                None => format!("{lanes} lanes per result, vec4 reads along k"),
            };
            (
                grid((total * parts).div_ceil(per_wg), target.max_workgroups)?,
                iterations + lanes,
                how,
            )
        }
        _ if split.is_some() => return Ok(None),
        Read::AlongFree if rows % 4 == 0 => {
            // Each thread owns 4 vec4s of results, 8 vec4s apart, so that 8 neighbouring
            // threads (a CPU adapter's SIMD lanes) read 8 contiguous vec4s of a matrix row
            // per load, and one value of the vector feeds 16 results.
            let quads = rows / 4;
            let groups = quads.div_ceil(32);
            let threads = batch * groups * 8;
            let (kstep, iterations) = if vm == Read::AlongK {
                (4, k / 4)
            } else {
                (1, k)
            };
            if iterations > target.max_invocation_iterations {
                return Ok(None);
            }
            body.push_str(&header(64));
            body.push_str(&super::kernel::thread_index(64));
            body.push_str(&format!(
                "    if (tid >= {threads}u) {{ return; }}\n    let b = tid / {}u;\n    \
                 let qb = ((tid / 8u) % {groups}u) * 32u + tid % 8u;\n",
                groups * 8
            ));
            for j in 0..4 {
                body.push_str(&format!(
                    "    let q{j} = min(qb + {}u, {}u) * 4u;\n    var acc{j} = vec4<f32>();\n",
                    8 * j,
                    quads - 1
                ));
            }
            // The loop's body, then the loop (in blocks of k where it is long).
            let outer = std::mem::take(&mut body);
            let steps: Vec<(String, String)> = if kstep == 4 {
                body.push_str(&format!("        let w = {};\n", vec4_at("k")));
                ["x", "y", "z", "w"]
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (format!("k + {i}u"), format!("w.{c}")))
                    .collect()
            } else {
                vec![("k".to_string(), format!("{v}[{voff}(b, 0u, k)]"))]
            };
            for (kx, w) in &steps {
                for j in 0..4 {
                    body.push_str(&format!(
                        "        acc{j} = acc{j} + {x}[{xoff}(b, q{j}, {kx}) >> 2u] * {w};\n"
                    ));
                }
            }
            let accs: Vec<String> = (0..4).map(|j| format!("acc{j}")).collect();
            let k_loop = blocked_k_loop(
                &accs,
                "vec4<f32>",
                ("0u", &format!("{k}u"), kstep),
                k,
                &body,
            );
            body = outer;
            body.push_str(&k_loop);
            for j in 0..4 {
                body.push_str(&format!(
                    "    if (qb + {}u < {quads}u) {{\n        let o{j} = b * {rows}u + q{j};\n        \
                     out0[o{j}] = acc{j}.x;\n        out0[o{j} + 1u] = acc{j}.y;\n        \
                     out0[o{j} + 2u] = acc{j}.z;\n        out0[o{j} + 3u] = acc{j}.w;\n    }}\n",
                    8 * j
                ));
            }
            body.push_str("}\n");
            (
                grid(threads.div_ceil(64), target.max_workgroups)?,
                iterations,
                "a thread per 16 results, vec4 reads along the rows".to_string(),
            )
        }
        _ => return Ok(None),
    };
    // Every matrix element is read once, by neighbouring lanes at neighbouring places: from
    // the buffer, not through a texture, whose copy would double the memory traffic on CPU
    // adapters (lavapipe, 4096² `v @ A`: 31 ms a call with the copy, 22 ms of it the kernel).
    let mark = super::texture_reads::STORAGE_MARK;
    let body = body
        .replace("in0[", &format!("in0[{mark} "))
        .replace("in1[", &format!("in1[{mark} "));
    let comment = format!(
        "kernel {name}: matrix-vector dot_general {lt} x {rt} -> {ot} (batch {batch}, {m}x{n}, contracting {k}; {how}; reads {ra:?} x {rb:?})\nfuses: stablehlo.dot_general"
    );
    let mut kernel = register_kernel(
        name,
        &comment,
        op,
        (lt, rt, ot),
        (ra, rb),
        &body,
        (workgroups, iterations),
        target,
    )?;
    if split.is_some() {
        kernel.outputs = vec![super::partials::binding(
            0,
            crate::ir::ElementType::F32,
            total * parts,
        )];
    }
    Ok(Some(kernel))
}
