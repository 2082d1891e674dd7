//! `cholesky` and `triangular_solve` on f32/f64: one thread per matrix (Cholesky) or per
//! right-hand-side vector (triangular solve), running the textbook serial algorithm in the
//! result buffer. Only the referenced triangle of `a` is read. Right for the small and
//! medium matrices JAX programs factor; large ones would want blocked kernels.

use crate::codegen::expr::Binding;
use crate::codegen::kernel::{self, Kernel};
use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::ir::attr::Transpose;
use crate::ir::{ElementType, Function, Op, Operation, TensorType, Type};

fn real_tensor(f: &Function, v: crate::ir::ValueId, what: &str) -> Result<TensorType> {
    match f.ty(v) {
        Type::Tensor(t)
            if t.is_static() && matches!(t.dtype, ElementType::F32 | ElementType::F64) =>
        {
            Ok(t.clone())
        }
        other => Err(Error::unimplemented(format!(
            "{what} on {other} (f32 and f64 are supported)"
        ))),
    }
}

/// Emits `cholesky` (one thread per matrix of the batch).
pub fn cholesky(name: &str, f: &Function, op: &Operation, target: Target) -> Result<Kernel> {
    let Op::Cholesky { lower } = op.op else {
        return Err(Error::internal("cholesky emitter on another op"));
    };
    let t = real_tensor(f, op.operands[0], "cholesky")?;
    let rank = t.shape.len();
    let n = *t.dims().last().unwrap_or(&1) as u64;
    let batch = t.num_elements() as u64 / (n * n).max(1);
    let ty = t.dtype.mlir_name();
    let w = if t.dtype == ElementType::F64 {
        "f64"
    } else {
        "f32"
    };
    // L(i, j) lives at out0[base + at(i, j)]; a is read from the triangle `lower` names.
    let (at, a_at) = if lower {
        ("i * N + j", "i * N + j")
    } else {
        ("j * N + i", "j * N + i")
    };
    let l = |i: &str, j: &str| {
        format!(
            "out0[base + {}]",
            at.replace('i', "I")
                .replace('j', "J")
                .replace('I', i)
                .replace('J', j)
        )
    };
    let a = |i: &str, j: &str| {
        format!(
            "in0[base + {}]",
            a_at.replace('i', "I")
                .replace('j', "J")
                .replace('I', i)
                .replace('J', j)
        )
    };
    let body = format!(
        "    let N = {n}u;\n    let base = tid * N * N;\n    for (var i = 0u; i < N; i = i + 1u) {{\n        for (var j = 0u; j < N; j = j + 1u) {{\n            {zero} = {w}(0);\n        }}\n    }}\n    for (var j = 0u; j < N; j = j + 1u) {{\n        var s: {w} = {ajj};\n        for (var k = 0u; k < j; k = k + 1u) {{\n            s = s - {ljk} * {ljk};\n        }}\n        let d = sqrt(s);\n        {ljj} = d;\n        for (var i = j + 1u; i < N; i = i + 1u) {{\n            var t: {w} = {aij};\n            for (var k = 0u; k < j; k = k + 1u) {{\n                t = t - {lik} * {ljk};\n            }}\n            {lij} = t / d;\n        }}\n    }}\n",
        zero = l("i", "j"),
        ajj = a("j", "j"),
        ljk = l("j", "k"),
        ljj = l("j", "j"),
        aij = a("i", "j"),
        lik = l("i", "k"),
        lij = l("i", "j"),
    );
    let _ = rank;
    let inputs = vec![Binding {
        value: op.operands[0],
        ty: t.clone(),
    }];
    let outputs = vec![Binding {
        value: op.results[0],
        ty: t.clone(),
    }];
    let comment = format!(
        "kernel {name}: cholesky ({}) of {batch} matrices {n}x{n} {ty}, one thread each\nfuses: stablehlo.cholesky",
        if lower { "lower" } else { "upper" }
    );
    kernel::threaded(
        name,
        &comment,
        inputs,
        outputs,
        &Default::default(),
        "",
        &body,
        batch,
        // Zeroing (n^2 + n back-edges), then per column j: j, and (j + 1) per row below it.
        (0..n as u64).fold(n as u64 * (n as u64 + 1), |s, j| {
            s + 1 + j + (n as u64 - j - 1) * (j + 1)
        }),
        target,
    )
}

/// Emits `triangular_solve` (one thread per right-hand-side vector).
pub fn triangular_solve(
    name: &str,
    f: &Function,
    op: &Operation,
    target: Target,
) -> Result<Kernel> {
    let Op::TriangularSolve {
        left_side,
        lower,
        unit_diagonal,
        transpose_a,
    } = &op.op
    else {
        return Err(Error::internal("triangular_solve emitter on another op"));
    };
    let at = real_tensor(f, op.operands[0], "triangular_solve")?;
    let bt = real_tensor(f, op.operands[1], "triangular_solve")?;
    let bd = bt.dims();
    let r = bd.len();
    if r < 2 {
        return Err(Error::invalid("triangular_solve needs matrices"));
    }
    let (m, n) = (bd[r - 2] as u64, bd[r - 1] as u64);
    let batch = bt.num_elements() as u64 / (m * n).max(1);
    let k = if *left_side { m } else { n };
    let transposed = !matches!(transpose_a, Transpose::NoTranspose);
    // T = op(a); on the right side we solve with S = T^T along the rows of b.
    // S(i, j) = a[?]: track which physical element it is.
    let s_transposed = transposed ^ !*left_side;
    let s_lower = *lower ^ s_transposed;
    let a_el = |i: &str, j: &str| {
        if s_transposed {
            format!("in0[abase + {j} * {k}u + {i}]")
        } else {
            format!("in0[abase + {i} * {k}u + {j}]")
        }
    };
    // Element v of the vector this thread solves: a column of b (left) or a row (right).
    let (vec_count, el) = if *left_side {
        (n, format!("v * {n}u + col"))
    } else {
        (m, "col * NN + v".replace("NN", &format!("{n}u")))
    };
    let w = if bt.dtype == ElementType::F64 {
        "f64"
    } else {
        "f32"
    };
    // f32 systems are solved with f64 sums where the adapter has f64 (closer to the exact
    // solution than any f32 summation order).
    let acc = if target.caps.f64 { "f64" } else { w };
    let x = |v: &str| format!("out0[bbase + {}]", el.replace('v', v));
    let b = |v: &str| format!("in1[bbase + {}]", el.replace('v', v));
    let diag = if *unit_diagonal {
        format!("{w}(1)")
    } else {
        a_el("i", "i")
    };
    let (outer, inner) = if s_lower {
        (
            "for (var i = 0u; i < K; i = i + 1u)".to_string(),
            "for (var j = 0u; j < i; j = j + 1u)".to_string(),
        )
    } else {
        (
            "for (var ii = 0u; ii < K; ii = ii + 1u)".to_string(),
            "for (var j = i + 1u; j < K; j = j + 1u)".to_string(),
        )
    };
    let i_def = if s_lower {
        ""
    } else {
        "        let i = K - 1u - ii;\n"
    };
    let body = format!(
        "    let K = {k}u;\n    let mat = tid / {vec_count}u;\n    let col = tid % {vec_count}u;\n    let abase = mat * {k}u * {k}u;\n    let bbase = mat * {m}u * {n}u;\n    {outer} {{\n{i_def}        var s: {acc} = {acc}({bi});\n        {inner} {{\n            s = s - {acc}({aij}) * {acc}({xj});\n        }}\n        {xi} = {w}(s / {acc}({diag}));\n    }}\n",
        bi = b("i"),
        aij = a_el("i", "j"),
        xj = x("j"),
        xi = x("i"),
    );
    let inputs = vec![
        Binding {
            value: op.operands[0],
            ty: at.clone(),
        },
        Binding {
            value: op.operands[1],
            ty: bt.clone(),
        },
    ];
    let outputs = vec![Binding {
        value: op.results[0],
        ty: bt.clone(),
    }];
    let comment = format!(
        "kernel {name}: triangular_solve of {batch} systems {k}x{k}, one thread per right-hand side\nfuses: stablehlo.triangular_solve"
    );
    kernel::threaded(
        name,
        &comment,
        inputs,
        outputs,
        &Default::default(),
        "",
        &body,
        batch * vec_count,
        // K rows, each with at most K - 1 inner steps.
        k * (k + 1) / 2 + k,
        target,
    )
}
