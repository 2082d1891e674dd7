//! End-to-end compilation of hand-built IR on the real adapter (independent of the text
//! frontend): fused elementwise chains, reductions, dot_general, while loops.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::compile::{compile_function, CompileOptions};
use wgpu_hlo::ir::attr::{ComparisonDirection, DotDimensionNumbers};
use wgpu_hlo::ir::{
    BinaryOp, ElementType, Function, Literal, Op, Operation, Region, Scalar, TensorType, Type,
    ValueId,
};
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

fn t(shape: &[i64], d: ElementType) -> Type {
    Type::tensor(shape.to_vec(), d)
}

struct B {
    f: Function,
    ops: Vec<Operation>,
}

impl B {
    fn new(args: Vec<Type>) -> (B, Vec<ValueId>) {
        let f = Function::new("main", args, vec![]);
        let a = f.body.as_ref().unwrap().args.clone();
        (B { f, ops: vec![] }, a)
    }
    fn op(&mut self, op: Op, operands: Vec<ValueId>, ty: Type) -> ValueId {
        let r = self.f.new_value(ty);
        self.ops
            .push(Operation::new(op, operands, vec![r], Default::default()));
        r
    }
    fn op_regions(
        &mut self,
        op: Op,
        operands: Vec<ValueId>,
        tys: Vec<Type>,
        regions: Vec<Region>,
    ) -> Vec<ValueId> {
        let rs: Vec<ValueId> = tys.into_iter().map(|t| self.f.new_value(t)).collect();
        let mut o = Operation::new(op, operands, rs.clone(), Default::default());
        o.regions = regions;
        self.ops.push(o);
        rs
    }
    fn constant(&mut self, ty: TensorType, v: Scalar) -> ValueId {
        let l = Literal::splat(ty.clone(), v);
        self.op(Op::Constant(l), vec![], Type::Tensor(ty))
    }
    fn finish(mut self, results: Vec<ValueId>) -> Function {
        self.f.result_types = results.iter().map(|r| self.f.ty(*r).clone()).collect();
        self.f.result_attrs = vec![vec![]; results.len()];
        self.ops.push(Operation::new(
            Op::Return,
            results,
            vec![],
            Default::default(),
        ));
        self.f.body.as_mut().unwrap().ops = self.ops;
        self.f
    }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn run(f: &Function, args: &[(TensorType, Vec<u8>)]) -> Vec<Vec<u8>> {
    let dev = device();
    let exe = compile_function(&dev, f, None, &CompileOptions::default()).unwrap();
    let bufs: Vec<_> = args
        .iter()
        .map(|(t, b)| dev.upload(t, b).unwrap())
        .collect();
    let outs = exe.execute_blocking(&bufs).unwrap();
    outs.iter()
        .map(|o| o.read_to_host_blocking().unwrap())
        .collect()
}

#[test]
fn fused_chain_with_broadcast_and_reduce() {
    use ElementType::F32;
    // sum(exp(x) * broadcast(y) + 1, dim 1)
    let (mut b, a) = B::new(vec![t(&[3, 4], F32), t(&[4], F32)]);
    let e = b.op(
        Op::Unary(wgpu_hlo::ir::UnaryOp::Negate),
        vec![a[0]],
        t(&[3, 4], F32),
    );
    let yb = b.op(
        Op::BroadcastInDim {
            dimensions: vec![1],
        },
        vec![a[1]],
        t(&[3, 4], F32),
    );
    let m = b.op(Op::Binary(BinaryOp::Multiply), vec![e, yb], t(&[3, 4], F32));
    let one = b.constant(TensorType::new(vec![3, 4], F32), Scalar::Float(1.0));
    let s = b.op(Op::Binary(BinaryOp::Add), vec![m, one], t(&[3, 4], F32));
    let zero = b.constant(TensorType::scalar(F32), Scalar::Float(0.0));
    let mut body = Function::new("body", vec![], vec![]);
    let _ = &mut body;
    // Reduction body over fresh values of the same function.
    let p0 = b.f.new_value(t(&[], F32));
    let p1 = b.f.new_value(t(&[], F32));
    let sum = b.f.new_value(t(&[], F32));
    let region = Region {
        args: vec![p0, p1],
        ops: vec![
            Operation::new(
                Op::Binary(BinaryOp::Add),
                vec![p0, p1],
                vec![sum],
                Default::default(),
            ),
            Operation::new(Op::Return, vec![sum], vec![], Default::default()),
        ],
    };
    let r = b.op_regions(
        Op::Reduce {
            dimensions: vec![1],
        },
        vec![s, zero],
        vec![t(&[3], F32)],
        vec![region],
    );
    let f = b.finish(vec![r[0], s]);
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let y = vec![1.0f32, 2.0, 3.0, 4.0];
    let out = run(
        &f,
        &[
            (TensorType::new(vec![3, 4], F32), f32s(&x)),
            (TensorType::new(vec![4], F32), f32s(&y)),
        ],
    );
    let sums = to_f32s(&out[0]);
    for row in 0..3 {
        let want: f32 = (0..4).map(|c| -x[row * 4 + c] * y[c] + 1.0).sum();
        assert_eq!(sums[row], want, "row {row}");
    }
    assert_eq!(to_f32s(&out[1])[5], -x[5] * y[1] + 1.0);
}

#[test]
fn dot_general_batched_and_narrow_types() {
    use ElementType::*;
    let (mut b, a) = B::new(vec![t(&[2, 3, 4], F32), t(&[2, 4, 5], F32)]);
    let d = b.op(
        Op::DotGeneral {
            dimension_numbers: DotDimensionNumbers {
                lhs_batching_dimensions: vec![0],
                rhs_batching_dimensions: vec![0],
                lhs_contracting_dimensions: vec![2],
                rhs_contracting_dimensions: vec![1],
            },
            precision_config: vec![],
            algorithm: None,
        },
        vec![a[0], a[1]],
        t(&[2, 3, 5], F32),
    );
    let c = b.op(Op::Convert, vec![d], t(&[2, 3, 5], I8));
    let f = b.finish(vec![d, c]);
    let x: Vec<f32> = (0..24).map(|i| (i % 5) as f32 - 2.0).collect();
    let y: Vec<f32> = (0..40).map(|i| (i % 3) as f32).collect();
    let out = run(
        &f,
        &[
            (TensorType::new(vec![2, 3, 4], F32), f32s(&x)),
            (TensorType::new(vec![2, 4, 5], F32), f32s(&y)),
        ],
    );
    let got = to_f32s(&out[0]);
    for bb in 0..2 {
        for i in 0..3 {
            for j in 0..5 {
                let want: f32 = (0..4)
                    .map(|k| x[bb * 12 + i * 4 + k] * y[bb * 20 + k * 5 + j])
                    .sum();
                assert_eq!(got[bb * 15 + i * 5 + j], want);
                assert_eq!(out[1][bb * 15 + i * 5 + j] as i8, want as i8);
            }
        }
    }
}

#[test]
fn while_loop_counts_with_and_without_trip_count() {
    use ElementType::*;
    for counted in [true, false] {
        // i = 0; s = x; while (i < 10) { s = s * 2 (or s + s); i += 1 }
        let (mut b, a) = B::new(vec![t(&[4], F32), t(&[], I32)]);
        let zero = b.constant(TensorType::scalar(I32), Scalar::Int(0));
        let init = if counted { zero } else { a[1] };
        let ten = b.constant(TensorType::scalar(I32), Scalar::Int(10));
        let ci = b.f.new_value(t(&[], I32));
        let cs = b.f.new_value(t(&[4], F32));
        let p = b.f.new_value(t(&[], Pred));
        let cond = Region {
            args: vec![ci, cs],
            ops: vec![
                Operation::new(
                    Op::Compare {
                        direction: ComparisonDirection::Lt,
                        compare_type: None,
                    },
                    vec![ci, ten],
                    vec![p],
                    Default::default(),
                ),
                Operation::new(Op::Return, vec![p], vec![], Default::default()),
            ],
        };
        let bi = b.f.new_value(t(&[], I32));
        let bs = b.f.new_value(t(&[4], F32));
        let one = b.f.new_value(t(&[], I32));
        let ni = b.f.new_value(t(&[], I32));
        let ns = b.f.new_value(t(&[4], F32));
        let body = Region {
            args: vec![bi, bs],
            ops: vec![
                Operation::new(
                    Op::Constant(Literal::scalar(I32, Scalar::Int(1))),
                    vec![],
                    vec![one],
                    Default::default(),
                ),
                Operation::new(
                    Op::Binary(BinaryOp::Add),
                    vec![bi, one],
                    vec![ni],
                    Default::default(),
                ),
                Operation::new(
                    Op::Binary(BinaryOp::Add),
                    vec![bs, bs],
                    vec![ns],
                    Default::default(),
                ),
                Operation::new(Op::Return, vec![ni, ns], vec![], Default::default()),
            ],
        };
        let r = b.op_regions(
            Op::While,
            vec![init, a[0]],
            vec![t(&[], I32), t(&[4], F32)],
            vec![cond, body],
        );
        let f = b.finish(vec![r[0], r[1]]);
        let out = run(
            &f,
            &[
                (TensorType::new(vec![4], F32), f32s(&[1.0, 2.0, 3.0, 0.5])),
                (TensorType::scalar(I32), 0i32.to_le_bytes().to_vec()),
            ],
        );
        assert_eq!(
            i32::from_le_bytes(out[0][..4].try_into().unwrap()),
            10,
            "counted={counted}"
        );
        assert_eq!(
            to_f32s(&out[1]),
            vec![1024.0, 2048.0, 3072.0, 512.0],
            "counted={counted}"
        );
    }
}
