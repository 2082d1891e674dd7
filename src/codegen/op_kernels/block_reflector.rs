//! `custom_call @wgpu_hlo.block_reflector(c, v, u, start, row0)` and
//! `@wgpu_hlo.block_reflector_t(...)`, `c: [..., m, w]`, `v: [..., m, b]`, `u: [..., b, b]`
//! f32, `start`, `row0`: `i32[]` -> `[..., m, w]`: a panel of Householder reflectors in
//! compact WY form applied to the columns of `c` from `start` on, `c - V T V^T c`
//! (`_block_reflector`, the Q loop of `_householder_qr_2d`) or `c - V T^T V^T c`
//! (`_block_reflector_t`, the trailing update of `_householder_factor`), `T = u^-1` for the
//! upper triangle `u` of `T^-1`; columns left of `start` are returned as they are. `V` must be
//! zero in the rows above `row0` (the panel's reflectors are), which both passes skip.
//!
//! As JAX ops this was four kernels per panel (`V^T c` and `V y` as dots, the triangular solve
//! for `y` as its own kernel, a masked subtraction), each over every column (the shapes are
//! static in the panel loop) and every row. Here one kernel runs it, a column per invocation:
//! the pass over the rows for `s = V^T c`, `y` by substitution with `u` in registers, the pass
//! for `c -= V y` in place, skipping the columns left of `start` and the rows above `row0`.
//! On CPU adapters with subgroups of 4, 8 or 16 lanes the lanes load a row of `V` (and of `u`)
//! together, each a quad, and every lane takes the row's entries by `subgroupBroadcast`
//! (llvmpipe runs every load lane by lane: a uniform load costs as much as one per lane).
//! Columns whose rows do not fit the loop bound in one launch take a split plan: the sums `s`
//! by ranges of rows into a temporary, then `y` and the update by ranges of rows on a copy.

use super::{result_binding, temp, Launch, Plan, PARAMS};
use crate::codegen::expr::Binding;
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::codegen::texture_reads::{self, STATE_MARK};
use crate::error::{Error, Result};
use crate::ir::ops::CustomCall;
use crate::ir::{ElementType, Function, Operation, TensorType, Type};

/// `c - V T V^T c` (the Q loop).
pub const TARGET: &str = "wgpu_hlo.block_reflector";
/// `c - V T^T V^T c` (the trailing update of the factorization).
pub const TARGET_T: &str = "wgpu_hlo.block_reflector_t";

/// Invocations per workgroup: a column each.
const WG: u64 = 64;

/// Widest panel taken (registers per invocation: the panel's sums and their solution).
pub const MAX_WIDTH: u64 = 64;

/// Whether `c` names this kernel.
pub fn handles(c: &CustomCall) -> bool {
    c.call_target_name == TARGET || c.call_target_name == TARGET_T
}

/// The shape of one application: `batch` matrices `m x w`, panels of `b` reflectors, the
/// entries of `V` and `u` loaded as quads (`b % 4 == 0`), `lanes` sharing their loads.
#[derive(Clone, Copy)]
struct Shape {
    batch: u64,
    m: u64,
    w: u64,
    b: u64,
    quads: bool,
    lanes: Option<u64>,
    transpose: bool,
    /// Each invocation takes a quad of columns (with lanes and rows of whole quads; one
    /// subgroup per workgroup), else one column.
    cols4: bool,
}

impl Shape {
    /// Words (or quads) of one row of `V` or `u`.
    fn row(&self) -> u64 {
        if self.quads {
            self.b / 4
        } else {
            self.b
        }
    }

    /// Invocations per workgroup.
    fn workgroup(&self) -> u64 {
        match self.lanes {
            Some(l) if self.cols4 => l,
            _ => WG,
        }
    }

    /// Workgroups per matrix.
    fn groups_per_matrix(&self) -> u64 {
        if self.cols4 {
            (self.w / 4).div_ceil(self.workgroup())
        } else {
            self.w.div_ceil(WG)
        }
    }

    /// The type of a column's sums (`f32`, or `vec4<f32>` for a quad of columns).
    fn ty(&self) -> &'static str {
        if self.cols4 {
            "vec4<f32>"
        } else {
            "f32"
        }
    }
}

/// The f32 tensor type of operand `v` with at least two dimensions, or an error naming `what`.
fn matrices(f: &Function, v: crate::ir::ValueId, what: &str) -> Result<TensorType> {
    match f.ty(v) {
        Type::Tensor(t) if t.is_static() && t.rank() >= 2 && t.dtype == ElementType::F32 => {
            Ok(t.clone())
        }
        other => Err(Error::unimplemented(format!(
            "{what} on {other} (f32 matrices are supported)"
        ))),
    }
}

/// The plan of the custom call (module doc).
pub fn plan(
    name: &str,
    f: &Function,
    op: &Operation,
    c: &CustomCall,
    target: Target,
) -> Result<Plan> {
    let transpose = c.call_target_name == TARGET_T;
    let what = format!("custom_call @{}", c.call_target_name);
    let ([cv, vv, uv, start, row0], [out]) = (op.operands.as_slice(), op.results.as_slice()) else {
        return Err(Error::invalid(format!(
            "{what} takes the matrices, the reflectors, T^-1, the first column and the first row, and has one result"
        )));
    };
    let (ct, vt, ut) = (
        matrices(f, *cv, &what)?,
        matrices(f, *vv, &what)?,
        matrices(f, *uv, &what)?,
    );
    for s in [start, row0] {
        if !matches!(f.ty(*s), Type::Tensor(t) if t.dtype == ElementType::I32 && t.num_elements() == 1)
        {
            return Err(Error::invalid(format!(
                "{what}: the first column and row must be one i32 each, got {}",
                f.ty(*s)
            )));
        }
    }
    let (cd, vd, ud) = (ct.dims(), vt.dims(), ut.dims());
    let (m, w) = (cd[cd.len() - 2] as u64, cd[cd.len() - 1] as u64);
    let b = vd[vd.len() - 1] as u64;
    let batch = ct.num_elements() as u64 / (m * w).max(1);
    let consistent = vd[vd.len() - 2] as u64 == m
        && ud[ud.len() - 2] as u64 == b
        && ud[ud.len() - 1] as u64 == b
        && cd[..cd.len() - 2] == vd[..vd.len() - 2]
        && cd[..cd.len() - 2] == ud[..ud.len() - 2];
    if !consistent {
        return Err(Error::invalid(format!(
            "{what}: matrices {ct}, reflectors {vt} and T^-1 {ut} do not match"
        )));
    }
    if b == 0 || b > MAX_WIDTH || m == 0 || w == 0 {
        return Err(Error::unimplemented(format!(
            "{what} of {m}x{w} matrices and {b} reflectors (1 to {MAX_WIDTH})"
        )));
    }
    let lanes = u64::from(target.caps.subgroup_size);
    let shape = Shape {
        batch,
        m,
        w,
        b,
        quads: b % 4 == 0,
        lanes: (target.cpu_adapter && target.caps.subgroup && matches!(lanes, 4 | 8 | 16))
            .then_some(lanes),
        transpose,
        cols4: false,
    };
    // With lanes, a quad of columns per invocation where the rows are whole quads.
    let quad_shape = Shape {
        cols4: shape.lanes.is_some()
            && w % 4 == 0
            && !crate::fusion::switched_off("WGPU_HLO_REFLECTOR_QUADS"),
        ..shape
    };
    let result = result_binding(f, *out, ElementType::F32, batch * m * w, &what)?;
    let bind = |v: crate::ir::ValueId, ty: TensorType| Binding { value: v, ty };
    let scalar = |v: &crate::ir::ValueId| match f.ty(*v) {
        Type::Tensor(t) => bind(*v, t.clone()),
        _ => bind(*v, TensorType::new(vec![], ElementType::I32)),
    };
    let (v_in, u_in) = (bind(*vv, vt.clone()), bind(*uv, ut.clone()));
    let (start_in, row0_in) = (scalar(start), scalar(row0));
    let desc = format!(
        "{batch} matrices {m}x{w} f32, {b} reflectors{}",
        if transpose { ", transposed" } else { "" }
    );
    let quads: &[usize] = if shape.quads { &[0, 1] } else { &[] };
    let bound = target.max_invocation_iterations;
    // Both passes over the rows in one launch.
    let fused = 2 * m + 4;
    if fused <= bound {
        let copies = super::old_values_from_copies();
        let comment = format!(
            "kernel {name}: a block reflector applied to {desc}, a column per invocation{}\nloop iterations per invocation: at most {fused}\nfuses: {what}\n{}",
            if shape.lanes.is_some() { ", rows of V and T^-1 shared by subgroup broadcasts" } else { "" },
            if copies {
                texture_reads::state_copy_line(0, (0, batch * m * w))
            } else {
                String::new()
            }
        );
        let s = quad_shape;
        let comment = if s.cols4 {
            comment.replace(
                ", a column per invocation",
                ", a quad of columns per invocation",
            )
        } else {
            comment
        };
        let k = kernel::in_workgroups_quads(
            name,
            &comment,
            (vec![v_in, u_in, start_in, row0_in], vec![result]),
            &Default::default(),
            &fused_body(s, copies),
            (quads, if s.cols4 { &[0] } else { &[] }),
            (batch * s.groups_per_matrix(), fused),
            target,
        )?;
        return Ok(Plan {
            kernels: vec![k],
            temps: Vec::new(),
            launches: vec![Launch::updating_value(0, Vec::new(), *cv)],
        });
    }
    split_plan(
        name,
        (&desc, &what),
        shape,
        (bind(*cv, ct.clone()), v_in, u_in, start_in, row0_in),
        result,
        target,
    )
}

/// The rows of a matrix's `V` or `u` this kernel reads: the statements loading row `base`
/// (a WGSL expression, in quads or words) of `src` from entry `from` on under the name
/// `p`, and each entry's expression by index. With lanes, lane `l` loads quad (or word)
/// `l + t lanes` and the entries come by `subgroupBroadcast`.
fn row_entries(s: Shape, src: &str, base: &str, p: &str, from: u64) -> (String, Vec<String>) {
    let row = s.row();
    let unit = if s.quads { 4 } else { 1 };
    let first = from / unit;
    let mut code = String::new();
    let mut entries = vec![String::new(); s.b as usize];
    match s.lanes {
        Some(l) => {
            for t in first / l..row.div_ceil(l) {
                code.push_str(&format!(
                    "        let {p}{t} = {src}[{base} + min(sgl + {off}u, {last}u)];\n",
                    off = t * l,
                    last = row - 1
                ));
            }
            for q in first..row {
                code.push_str(&format!(
                    "        let {p}b{q} = subgroupBroadcast({p}{t}, {lane}u);\n",
                    t = q / l,
                    lane = q % l
                ));
            }
        }
        None => {
            for q in first..row {
                code.push_str(&format!("        let {p}b{q} = {src}[{base} + {q}u];\n"));
            }
        }
    }
    for (k, e) in entries.iter_mut().enumerate().skip(from as usize) {
        let k = k as u64;
        *e = if s.quads {
            format!("{p}b{}.{}", k / 4, ["x", "y", "z", "w"][(k % 4) as usize])
        } else {
            format!("{p}b{k}")
        };
    }
    (code, entries)
}

/// The entry point's start: the matrix, the invocation's column `col`, whether it is updated
/// (`live`), the first row `row0`, and the bases of its column in `c` (`cb`), of the matrix's
/// `V` (`vb`) and `u` (`ub`). Subgroups (invocations without lanes) that hold no column from
/// `start` on return. `start` and `row0` are inputs `first` and `first + 1`.
fn header(s: Shape, first: usize) -> String {
    let (m, w, row) = (s.m, s.w, s.row());
    let gpm = s.groups_per_matrix();
    if let (true, Some(l)) = (s.cols4, s.lanes) {
        // A quad of columns per lane, one subgroup per workgroup.
        return format!(
            "{entry}    let g = wid.y * nwg.x + wid.x;
    if (g >= {groups}u) {{ return; }}
    let mat = g / {gpm}u;
    let q0 = (g % {gpm}u) * {l}u;
    let start = u32(max(in{first}[0], 0));
    let row0 = min(u32(max(in{second}[0], 0)), {m}u);
    if (4u * q0 + {l4}u <= start || 4u * q0 >= {w}u) {{ return; }}
    let c4 = 4u * (q0 + sgl);
    let live4 = (vec4<u32>(c4) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(start)) & vec4<bool>(c4 < {w}u);
    let live = c4 + 3u >= start && c4 < {w}u;
    let cb = mat * {mw4}u + min(c4 / 4u, {wl4}u);
    let vb = mat * {mv}u;
    let ub = mat * {mu}u;
",
            entry = kernel::subgroup_entry_header(l as u32),
            groups = s.batch * gpm,
            second = first + 1,
            l4 = 4 * l,
            mw4 = m * w / 4,
            wl4 = w / 4 - 1,
            mv = m * row,
            mu = s.b * row,
        );
    }
    let (entry, c0, quit) = match s.lanes {
        Some(l) => (
            kernel::subgroup_entry_header(WG as u32),
            format!("sgid * {l}u"),
            format!("c0 + {l}u <= start || c0 >= {w}u"),
        ),
        None => (
            kernel::entry_header(WG as u32),
            "lid".to_string(),
            format!("c0 < start || c0 >= {w}u"),
        ),
    };
    let lane = if s.lanes.is_some() { " + sgl" } else { "" };
    format!(
        "{entry}    let g = wid.y * nwg.x + wid.x;
    if (g >= {groups}u) {{ return; }}
    let mat = g / {gpm}u;
    let c0 = (g % {gpm}u) * {WG}u + {c0};
    let start = u32(max(in{first}[0], 0));
    let row0 = min(u32(max(in{second}[0], 0)), {m}u);
    if ({quit}) {{ return; }}
    let col = c0{lane};
    let live = col >= start && col < {w}u;
    let cb = mat * {mw}u + min(col, {wl}u);
    let vb = mat * {mv}u;
    let ub = mat * {mu}u;
",
        groups = s.batch * gpm,
        second = first + 1,
        mw = m * w,
        wl = w - 1,
        mv = m * row,
        mu = s.b * row,
    )
}

/// Statements solving for `y` in place of the sums `s0 ..`: `T^-1^T y = s` by forward
/// substitution (transposed), else `T^-1 y = s` by back substitution, a row of `u` (input
/// `src`) at a time.
fn solve(s: Shape, src: &str) -> String {
    let row = s.row();
    let mut code = String::new();
    let rows: Vec<u64> = if s.transpose {
        (0..s.b).collect()
    } else {
        (0..s.b).rev().collect()
    };
    for k in rows {
        let (loads, u) = row_entries(s, src, &format!("ub + {}u", k * row), &format!("u{k}_"), k);
        code.push_str(&format!("        // row {k} of T^-1\n"));
        code.push_str(&loads.replace("        let", "    let"));
        if s.transpose {
            code.push_str(&divide(s, k, &u[k as usize]));
            for j in k + 1..s.b {
                code.push_str(&format!(
                    "    s{j} = fma({ty}(-{}), s{k}, s{j});\n",
                    u[j as usize],
                    ty = s.ty()
                ));
            }
        } else {
            for j in k + 1..s.b {
                code.push_str(&format!(
                    "    s{k} = fma({ty}(-{}), s{j}, s{k});\n",
                    u[j as usize],
                    ty = s.ty()
                ));
            }
            code.push_str(&divide(s, k, &u[k as usize]));
        }
    }
    code
}

/// `s{k} /= d` (each component of a quad by itself).
fn divide(s: Shape, k: u64, d: &str) -> String {
    if s.cols4 {
        format!(
            "    s{k} = vec4<f32>(wh_div_f32(s{k}.x, {d}), wh_div_f32(s{k}.y, {d}), wh_div_f32(s{k}.z, {d}), wh_div_f32(s{k}.w, {d}));\n"
        )
    } else {
        format!("    s{k} = wh_div_f32(s{k}, {d});\n")
    }
}

/// The pass over rows `lo .. hi` (WGSL expressions) adding `V^T c` to the sums `s0 ..`, the
/// column's words loaded as `{c}index]` (`c`: `out0[`, maybe with a [`STATE_MARK`], or an
/// input's `inK[`).
fn sums_pass(s: Shape, (v, c): (&str, &str), lo: &str, hi: &str) -> String {
    let (loads, e) = row_entries(s, v, &format!("vb + i * {}u", s.row()), "vr", 0);
    let (ty, stride) = (s.ty(), if s.cols4 { s.w / 4 } else { s.w });
    let mut code = format!(
        "    for (var i = {lo}; i < {hi}; i = i + 1u) {{
        var x = {ty}();
        if (live) {{ x = {c}cb + i * {stride}u]; }}
{loads}"
    );
    for (k, e) in e.iter().enumerate() {
        code.push_str(&format!("        s{k} = fma({ty}({e}), x, s{k});\n"));
    }
    code.push_str("    }\n");
    code
}

/// The pass over rows `lo .. hi` subtracting `V y` from the column (`y` in `s0 ..`), its old
/// words loaded as `{old}index]` (`out0[`, maybe with a [`STATE_MARK`]).
fn update_pass(s: Shape, (v, old): (&str, &str), lo: &str, hi: &str) -> String {
    let (loads, e) = row_entries(s, v, &format!("vb + i * {}u", s.row()), "vr", 0);
    let ty = s.ty();
    let mut code = format!(
        "    for (var i = {lo}; i < {hi}; i = i + 1u) {{\n{loads}        var d = {ty}();\n"
    );
    for (k, e) in e.iter().enumerate() {
        code.push_str(&format!("        d = fma({ty}({e}), s{k}, d);\n"));
    }
    if s.cols4 {
        // Columns left of `start` keep their words.
        code.push_str(&format!(
            "        if (live) {{ let at = cb + i * {}u; let c = {old}at]; out0[at] = select(c, c - d, live4); }}\n    }}\n",
            s.w / 4
        ));
    } else {
        code.push_str(&format!(
            "        if (live) {{ let at = cb + i * {w}u; out0[at] = {old}at] - d; }}\n    }}\n",
            w = s.w
        ));
    }
    code
}

/// The sums' declarations, zero.
fn sums(s: Shape) -> String {
    (0..s.b)
        .map(|k| format!("    var s{k} = {}();\n", s.ty()))
        .collect()
}

/// The one-launch kernel: inputs `V`, `u`, `start`, `row0`; the output `c`, in place. Each
/// invocation reads its own columns before it writes them, every word once in each pass, so
/// both passes may load the words as they were before the launch: from a copy on CPU
/// adapters ([`STATE_MARK`], the kernel's comment names the words). Lavapipe, 2-core AMD
/// host, the trailing update of a 512 x 512 QR by 32 reflectors (`wgsl_bench`, the copy not
/// counted): GPU time 2.62 ms loading from the state, 1.76 with the sums' pass from the copy,
/// 0.98 with both. Without `copies` (`WGPU_HLO_COPY_OLD_VALUES=0`) both load from the state.
fn fused_body(s: Shape, copies: bool) -> String {
    let c = if copies {
        format!("out0[{STATE_MARK} ")
    } else {
        "out0[".to_string()
    };
    format!(
        "{}{}{}{}{}}}\n",
        header(s, 2),
        sums(s),
        sums_pass(s, ("in0", &c), "row0", &format!("{}u", s.m)),
        solve(s, "in1"),
        update_pass(s, ("in0", &c), "row0", &format!("{}u", s.m)),
    )
}

/// The plan for columns longer than one launch's loop bound: `_sums` adds `V^T c` over ranges
/// of rows into temporary 0 (`b` words per column), `_copy` copies `c` into temporary 1,
/// `_apply` solves for `y` and updates ranges of rows there, `_out` copies it to the result.
fn split_plan(
    name: &str,
    (desc, what): (&str, &str),
    s: Shape,
    (c_in, v_in, u_in, start_in, row0_in): (Binding, Binding, Binding, Binding, Binding),
    result: Binding,
    target: Target,
) -> Result<Plan> {
    let bound = target.max_invocation_iterations;
    let Some((ranges, most)) = super::linalg::ranges_within(s.m, 4, |_| 1, bound) else {
        return Err(Error::resource_exhausted(format!(
            "{what}: {desc}: a launch's loop bound {bound} takes no row"
        )));
    };
    let (b, w) = (s.b, s.w);
    let words = s.batch * w * b;
    let sums_t = TensorType::new(vec![words as i64], ElementType::F32);
    let copy_t = TensorType::new(vec![(s.batch * s.m * w) as i64], ElementType::F32);
    let (sums_b, copy_b) = (
        Binding {
            value: temp(0),
            ty: sums_t.clone(),
        },
        Binding {
            value: temp(1),
            ty: copy_t.clone(),
        },
    );
    let params = Binding {
        value: PARAMS,
        ty: TensorType::new(vec![3], ElementType::U32),
    };
    let quads: &[usize] = if s.quads { &[1] } else { &[] };
    let range = "    let lo = max(row0, in0[0]);\n    let hi = min({m}u, in0[1]);\n"
        .replace("{m}", &s.m.to_string());
    let sb = format!("(mat * {w}u + min(col, {wl}u)) * {b}u", wl = w - 1);
    // Statements moving the column's sums between `s0 ..` and its words from `sb` where
    // `guard` holds, one per sum.
    let moves = |guard: &str, each: &dyn Fn(u64) -> String| {
        let mut code = format!("    if ({guard}) {{\n        let sb = {sb};\n");
        for k in 0..b {
            code.push_str(&format!("        {};\n", each(k)));
        }
        code.push_str("    }\n");
        code
    };
    // The sums of this column so far (none on the first range).
    let load = moves("live && in0[2] == 0u", &|k| {
        format!("s{k} = out0[sb + {k}u]")
    });
    let store = moves("live", &|k| format!("out0[sb + {k}u] = s{k}"));
    // `_sums` reads `c` itself (input 4), which no launch of the plan writes.
    let sums_body = format!(
        "{}{}{range}{load}{}{store}}}\n",
        header(s, 2),
        sums(s),
        sums_pass(s, ("in1", "in4["), "lo", "hi"),
    );
    let sums_k = kernel::in_workgroups_quads(
        &format!("{name}_sums"),
        &format!(
            "kernel {name}_sums: V^T c over rows in0[0]..in0[1] for a block reflector applied to {desc}\nloop iterations per invocation: at most {most}\nfuses: {what}"
        ),
        (
            vec![params.clone(), v_in.clone(), start_in.clone(), row0_in.clone(), c_in.clone()],
            vec![sums_b.clone()],
        ),
        &Default::default(),
        &sums_body,
        (quads, &[]),
        (s.batch * s.groups_per_matrix(), most),
        target,
    )?;
    let read = moves("live", &|k| format!("s{k} = in5[sb + {k}u]"));
    let apply_body = format!(
        "{}{}{range}{read}{}{}}}\n",
        header(s, 3),
        sums(s),
        solve(s, "in2"),
        update_pass(s, ("in1", "out0["), "lo", "hi"),
    );
    let apply_quads: &[usize] = if s.quads { &[1, 2] } else { &[] };
    let apply = kernel::in_workgroups_quads(
        &format!("{name}_apply"),
        &format!(
            "kernel {name}_apply: rows in0[0]..in0[1] of a block reflector applied to {desc}\nloop iterations per invocation: at most {most}\nfuses: {what}"
        ),
        (
            vec![params, v_in, u_in, start_in, row0_in, sums_b],
            vec![copy_b.clone()],
        ),
        &Default::default(),
        &apply_body,
        (apply_quads, &[]),
        (s.batch * s.groups_per_matrix(), most),
        target,
    )?;
    let n = s.batch * s.m * w;
    let copy = |kname: String, from: Binding, to: Binding| -> Result<Kernel> {
        kernel::threaded(
            &kname,
            &format!(
                "kernel {kname}: a copy for a block reflector applied to {desc}\nfuses: {what}"
            ),
            vec![from],
            vec![to],
            &Default::default(),
            "",
            "    out0[tid] = in0[tid];\n",
            n,
            0,
            target,
        )
    };
    let copy_in = copy(format!("{name}_copy"), c_in, copy_b.clone())?;
    let copy_out = copy(format!("{name}_out"), copy_b, result)?;
    let mut launches = Vec::new();
    for (i, &(lo, hi)) in ranges.iter().enumerate() {
        let p = vec![lo as u32, hi as u32, u32::from(i == 0)];
        launches.push(if i == 0 {
            Launch::new(0, p)
        } else {
            Launch::updating(0, p, 0)
        });
    }
    launches.push(Launch::new(1, Vec::new()));
    for &(lo, hi) in &ranges {
        launches.push(Launch::updating(2, vec![lo as u32, hi as u32, 0], 1));
    }
    launches.push(Launch::new(3, Vec::new()));
    Ok(Plan {
        kernels: vec![sums_k, copy_in, apply, copy_out],
        temps: vec![sums_t, copy_t],
        launches,
    })
}
