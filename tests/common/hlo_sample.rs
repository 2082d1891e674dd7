//! A small `HloModuleProto` built with the frontend's own schema, shared by the HLO proto
//! tests: `main(x: f32[4]) -> f32[]` adds x to itself in a three-trip while loop (tuple state,
//! get-tuple-element, compare, constants), then sums it with a reduce over an `add`
//! computation: sum(8 x).

use wgpu_hlo::frontend::hlo_proto::schema::*;

fn shape(ty: i32, dims: &[i64]) -> ShapeProto {
    let m2m = (0..dims.len() as i64).rev().collect();
    ShapeProto {
        element_type: ty,
        dimensions: dims.to_vec(),
        layout: Some(LayoutProto {
            minor_to_major: m2m,
        }),
        ..Default::default()
    }
}

fn tuple(elems: Vec<ShapeProto>) -> ShapeProto {
    ShapeProto {
        element_type: 13,
        tuple_shapes: elems,
        ..Default::default()
    }
}

const F32: i32 = 11;
const S32: i32 = 4;
const PRED: i32 = 1;

fn inst(id: i64, opcode: &str, s: ShapeProto, operands: &[i64]) -> HloInstructionProto {
    HloInstructionProto {
        id,
        name: format!("{opcode}.{id}"),
        opcode: opcode.into(),
        shape: Some(s),
        operand_ids: operands.to_vec(),
        ..Default::default()
    }
}

fn param(id: i64, n: i64, s: ShapeProto) -> HloInstructionProto {
    HloInstructionProto {
        parameter_number: n,
        ..inst(id, "parameter", s, &[])
    }
}

fn computation(id: i64, name: &str, instructions: Vec<HloInstructionProto>) -> HloComputationProto {
    let root_id = instructions.last().map_or(0, |i| i.id);
    HloComputationProto {
        id,
        name: name.into(),
        instructions,
        root_id,
        ..Default::default()
    }
}

/// The sample module.
pub fn module() -> HloModuleProto {
    let v4 = || shape(F32, &[4]);
    let state = || tuple(vec![shape(S32, &[]), v4()]);
    let add = computation(
        1,
        "add",
        vec![
            param(10, 0, shape(F32, &[])),
            param(11, 1, shape(F32, &[])),
            inst(12, "add", shape(F32, &[]), &[10, 11]),
        ],
    );
    let cond = computation(
        2,
        "cond",
        vec![
            param(20, 0, state()),
            HloInstructionProto {
                tuple_index: 0,
                ..inst(21, "get-tuple-element", shape(S32, &[]), &[20])
            },
            HloInstructionProto {
                literal: Some(LiteralProto {
                    shape: Some(shape(S32, &[])),
                    s32s: vec![3],
                    ..Default::default()
                }),
                ..inst(22, "constant", shape(S32, &[]), &[])
            },
            HloInstructionProto {
                comparison_direction: "LT".into(),
                ..inst(23, "compare", shape(PRED, &[]), &[21, 22])
            },
        ],
    );
    let body = computation(
        3,
        "body",
        vec![
            param(30, 0, state()),
            HloInstructionProto {
                tuple_index: 0,
                ..inst(31, "get-tuple-element", shape(S32, &[]), &[30])
            },
            HloInstructionProto {
                tuple_index: 1,
                ..inst(32, "get-tuple-element", v4(), &[30])
            },
            HloInstructionProto {
                literal: Some(LiteralProto {
                    shape: Some(shape(S32, &[])),
                    s32s: vec![1],
                    ..Default::default()
                }),
                ..inst(33, "constant", shape(S32, &[]), &[])
            },
            inst(34, "add", shape(S32, &[]), &[31, 33]),
            inst(35, "add", v4(), &[32, 32]),
            inst(36, "tuple", state(), &[34, 35]),
        ],
    );
    let main = computation(
        4,
        "main",
        vec![
            param(40, 0, v4()),
            HloInstructionProto {
                literal: Some(LiteralProto {
                    shape: Some(shape(S32, &[])),
                    s32s: vec![0],
                    ..Default::default()
                }),
                ..inst(41, "constant", shape(S32, &[]), &[])
            },
            inst(42, "tuple", state(), &[41, 40]),
            HloInstructionProto {
                // HLO lists a while's body first, then its condition.
                called_computation_ids: vec![3, 2],
                ..inst(43, "while", state(), &[42])
            },
            HloInstructionProto {
                tuple_index: 1,
                ..inst(44, "get-tuple-element", v4(), &[43])
            },
            HloInstructionProto {
                literal: Some(LiteralProto {
                    shape: Some(shape(F32, &[])),
                    f32s: vec![0.0],
                    ..Default::default()
                }),
                ..inst(45, "constant", shape(F32, &[]), &[])
            },
            HloInstructionProto {
                dimensions: vec![0],
                called_computation_ids: vec![1],
                ..inst(46, "reduce", shape(F32, &[]), &[44, 45])
            },
        ],
    );
    HloModuleProto {
        name: "malformed_test".into(),
        entry_computation_name: "main".into(),
        entry_computation_id: 4,
        computations: vec![add, cond, body, main],
        ..Default::default()
    }
}
