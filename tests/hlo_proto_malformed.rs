//! Truncated and bit-flipped serialized `HloModuleProto`s never panic: decoding and importing
//! return `Ok` or an error (INVALID_ARGUMENT for bytes that are not a proto), and what imports
//! goes through the verifier and the passes without a panic either.

use prost::Message;
use wgpu_hlo::frontend::hlo_proto::parse_hlo_module;
use wgpu_hlo::frontend::hlo_proto::schema::*;
use wgpu_hlo::ErrorKind;

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

/// `main(x: f32[4]) -> f32[]`: a while loop that adds x to itself three times (tuple state,
/// get-tuple-element, compare, constants), then a reduce with an `add` computation.
fn module() -> HloModuleProto {
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

/// Decoding, importing, verifying and the passes: any result but a panic.
fn exercise(bytes: &[u8]) -> Option<ErrorKind> {
    match parse_hlo_module(bytes, "mutant.hlo.pb") {
        Ok(m) => wgpu_hlo::passes::prepare(&m, "main").err().map(|e| e.kind),
        Err(e) => Some(e.kind),
    }
}

#[test]
fn the_sample_imports_and_prepares() {
    let bytes = module().encode_to_vec();
    let m = parse_hlo_module(&bytes, "sample.hlo.pb").expect("the sample imports");
    let f = wgpu_hlo::passes::prepare(&m, "main").expect("the sample verifies");
    assert_eq!(f.arg_types.len(), 1);
    assert_eq!(f.result_types.len(), 1);
    let text = wgpu_hlo::ir::print::print_module(&m);
    assert!(text.contains("stablehlo.while"), "{text}");
    assert!(text.contains("stablehlo.reduce"), "{text}");
}

#[test]
fn truncations_never_panic() {
    let bytes = module().encode_to_vec();
    for n in 0..bytes.len() {
        // A cut inside a field is a decode error: INVALID_ARGUMENT. A cut between fields can
        // decode (to a smaller module) and then fail to import or verify: any error kind.
        let _ = exercise(&bytes[..n]);
    }
    assert_eq!(
        parse_hlo_module(&bytes[..bytes.len() - 1], "cut.hlo.pb")
            .err()
            .map(|e| e.kind),
        Some(ErrorKind::InvalidArgument)
    );
}

#[test]
fn bit_flips_never_panic() {
    let bytes = module().encode_to_vec();
    let mut ok = 0;
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            if exercise(&b).is_none() {
                ok += 1;
            }
        }
    }
    // Some flips hit values that keep the program valid (a constant's bits, a name).
    assert!(ok > 0);
}

#[test]
fn garbage_is_invalid_argument() {
    for bytes in [&b"\xff\xff\xff\xff"[..], b"module {}", &[0x0a, 0x80]] {
        let e = parse_hlo_module(bytes, "garbage.pb").expect_err("not a module");
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    }
}
