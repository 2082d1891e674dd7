//! Unit tests: pretty and generic forms build the same ops, dense constants in every form,
//! locations and aliases, and error positions.

use super::*;
use crate::ir::attr::ComparisonDirection;
use crate::ir::literal::Scalar;
use crate::ir::types::{ElementType, Type};
use crate::ir::{Attr, CheckOp, Location, Module, Op, Region};

/// Parses, panicking with the error (tests only).
fn parse(src: &str) -> Module {
    match parse_module(src, "t.mlir") {
        Ok(m) => m,
        Err(e) => panic!("{e}\n{src}"),
    }
}

fn strip(m: &mut Module) {
    fn region(r: &mut Region) {
        for op in &mut r.ops {
            op.loc = Location::Unknown;
            op.regions.iter_mut().for_each(region);
        }
    }
    for f in &mut m.functions {
        f.loc = Location::Unknown;
        if let Some(b) = &mut f.body {
            region(b);
        }
    }
}

/// Wraps ops in a function with the given signature.
fn func(args: &str, body: &str) -> String {
    format!("func.func @f({args}) {{\n{body}\n  func.return\n}}\n")
}

/// Asserts that printing `m` (with locations) and parsing the text gives `m` again.
fn assert_round_trip(m: &Module) {
    let opts = crate::ir::print::PrintOptions { locations: true };
    let text = crate::ir::print::print_module_with(m, &opts);
    let back = match parse_module(&text, "printed.mlir") {
        Ok(b) => b,
        Err(e) => panic!("{e}\n{text}"),
    };
    assert_eq!(&back, m, "\n{text}");
}

/// Asserts two function bodies over the same arguments parse to the same module, and that
/// both print and read back unchanged.
fn same(args: &str, pretty: &str, generic: &str) {
    let mut a = parse(&func(args, pretty));
    let mut b = parse(&func(args, generic));
    assert_round_trip(&a);
    assert_round_trip(&b);
    strip(&mut a);
    strip(&mut b);
    assert_eq!(a, b, "\n{pretty}\nvs\n{generic}");
}

/// The first op of the first function.
fn first_op(m: &Module) -> &crate::ir::Operation {
    &m.functions[0].body.as_ref().unwrap().ops[0]
}

#[test]
fn elementwise_and_simple_ops_match_generic() {
    let a = "%a: tensor<2x3xf32>, %b: tensor<2x3xf32>";
    same(
        a,
        "%0 = stablehlo.add %a, %b : tensor<2x3xf32>",
        r#"%0 = "stablehlo.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>"#,
    );
    same(
        a,
        "%0 = stablehlo.compare  GT, %a, %b,  FLOAT : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>",
        r#"%0 = "stablehlo.compare"(%a, %b) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>"#,
    );
    same(
        a,
        "%0 = stablehlo.slice %a [0:2, 1:3:2] : (tensor<2x3xf32>) -> tensor<2x1xf32>",
        r#"%0 = "stablehlo.slice"(%a) <{start_indices = array<i64: 0, 1>, limit_indices = array<i64: 2, 3>, strides = array<i64: 1, 2>}> : (tensor<2x3xf32>) -> tensor<2x1xf32>"#,
    );
    same(
        a,
        "%0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>",
        r#"%0 = "stablehlo.transpose"(%a) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>"#,
    );
    same(
        a,
        "%0 = stablehlo.broadcast_in_dim %a, dims = [0, 2] : (tensor<2x3xf32>) -> tensor<2x4x3xf32>",
        r#"%0 = "stablehlo.broadcast_in_dim"(%a) {broadcast_dimensions = array<i64: 0, 2>} : (tensor<2x3xf32>) -> tensor<2x4x3xf32>"#,
    );
    same(
        a,
        "%0 = stablehlo.concatenate %a, %b, dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>",
        r#"%0 = "stablehlo.concatenate"(%a, %b) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>"#,
    );
    same(
        "%a: tensor<2x3xf32>, %v: tensor<f32>",
        "%0 = stablehlo.pad %a, %v, low = [0, 1], high = [2, -1], interior = [1, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<5x3xf32>",
        r#"%0 = "stablehlo.pad"(%a, %v) {edge_padding_low = array<i64: 0, 1>, edge_padding_high = array<i64: 2, -1>, interior_padding = array<i64: 1, 0>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<5x3xf32>"#,
    );
    same(
        "%a: tensor<4xf32>, %i: tensor<i32>",
        "%0 = stablehlo.dynamic_slice %a, %i, sizes = [2] : (tensor<4xf32>, tensor<i32>) -> tensor<2xf32>",
        r#"%0 = "stablehlo.dynamic_slice"(%a, %i) {slice_sizes = array<i64: 2>} : (tensor<4xf32>, tensor<i32>) -> tensor<2xf32>"#,
    );
    same(
        a,
        "%0 = stablehlo.reverse %a, dims = [1] : tensor<2x3xf32>\n%1 = stablehlo.iota dim = 1 : tensor<2x3xf32>",
        r#"%0 = "stablehlo.reverse"(%a) {dimensions = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
           %1 = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<2x3xf32>"#,
    );
    same(
        "%p: tensor<2x3xi1>, %a: tensor<2x3xf32>, %b: tensor<2x3xf32>",
        "%0 = stablehlo.select %p, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>\n%1 = stablehlo.clamp %a, %b, %a : tensor<2x3xf32>",
        r#"%0 = "stablehlo.select"(%p, %a, %b) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
           %1 = "stablehlo.clamp"(%a, %b, %a) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>"#,
    );
    same(
        "%a: tensor<4xf32>",
        "%t = stablehlo.tuple %a, %a : tuple<tensor<4xf32>, tensor<4xf32>>\n%0 = stablehlo.get_tuple_element %t[1] : (tuple<tensor<4xf32>, tensor<4xf32>>) -> tensor<4xf32>",
        r#"%t = "stablehlo.tuple"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tuple<tensor<4xf32>, tensor<4xf32>>
           %0 = "stablehlo.get_tuple_element"(%t) {index = 1 : i32} : (tuple<tensor<4xf32>, tensor<4xf32>>) -> tensor<4xf32>"#,
    );
    same(
        "%a: tensor<4xf32>",
        "%0 = stablehlo.reduce_precision %a, format = e5m10 : tensor<4xf32>\n%1:2 = stablehlo.optimization_barrier %a, %0 : tensor<4xf32>, tensor<4xf32>",
        r#"%0 = "stablehlo.reduce_precision"(%a) {exponent_bits = 5 : i32, mantissa_bits = 10 : i32} : (tensor<4xf32>) -> tensor<4xf32>
           %1:2 = "stablehlo.optimization_barrier"(%a, %0) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)"#,
    );
    same(
        "%a: tensor<4xf32>",
        "%0 = stablehlo.fft %a, type = RFFT, length = [4] : (tensor<4xf32>) -> tensor<3xcomplex<f32>>",
        r#"%0 = "stablehlo.fft"(%a) {fft_type = #stablehlo<fft_type RFFT>, fft_length = array<i64: 4>} : (tensor<4xf32>) -> tensor<3xcomplex<f32>>"#,
    );
    same(
        "%s: tensor<2xui64>",
        "%0:2 = stablehlo.rng_bit_generator %s, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)",
        r#"%0:2 = "stablehlo.rng_bit_generator"(%s) {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>} : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)"#,
    );
    same(
        "%a: tensor<4xf32>",
        "%0 = stablehlo.custom_call @\"foo.bar\"(%a) {has_side_effect = true, backend_config = \"\\08\\03\"} : (tensor<4xf32>) -> tensor<4xf32>",
        r#"%0 = "stablehlo.custom_call"(%a) {call_target_name = "foo.bar", has_side_effect = true, backend_config = "\08\03"} : (tensor<4xf32>) -> tensor<4xf32>"#,
    );
}

#[test]
fn dot_general_and_convolution_match_generic() {
    same(
        "%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>",
        "%0 = stablehlo.dot_general %a, %b,
            batching_dims = [0] x [0],
            contracting_dims = [2] x [1],
            precision = [DEFAULT, HIGHEST],
            algorithm = <lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 3, allow_imprecise_accumulation = false>
            : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>",
        r#"%0 = "stablehlo.dot_general"(%a, %b) {
            dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>,
            precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision HIGHEST>],
            algorithm = #stablehlo.dot_algorithm<lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 3, allow_imprecise_accumulation = false>
          } : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>"#,
    );
    same(
        "%a: tensor<1x8x8x3xf32>, %k: tensor<3x3x3x4xf32>",
        "%0 = stablehlo.convolution(%a, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 1], pad = [[1, 1], [0, 2]], lhs_dilate = [1, 1], rhs_dilate = [1, 2], reverse = [false, true]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x3xf32>, tensor<3x3x3x4xf32>) -> tensor<1x4x6x4xf32>",
        r#"%0 = "stablehlo.convolution"(%a, %k) {
            window_strides = array<i64: 2, 1>, padding = dense<[[1, 1], [0, 2]]> : tensor<2x2xi64>,
            lhs_dilation = array<i64: 1, 1>, rhs_dilation = array<i64: 1, 2>, window_reversal = array<i1: false, true>,
            dimension_numbers = #stablehlo.conv<raw input_batch_dimension = 0, input_feature_dimension = 3, input_spatial_dimensions = [1, 2], kernel_input_feature_dimension = 2, kernel_output_feature_dimension = 3, kernel_spatial_dimensions = [0, 1], output_batch_dimension = 0, output_feature_dimension = 3, output_spatial_dimensions = [1, 2]>,
            feature_group_count = 1 : i64, batch_group_count = 1 : i64
          } : (tensor<1x8x8x3xf32>, tensor<3x3x3x4xf32>) -> tensor<1x4x6x4xf32>"#,
    );
    let m = parse(&func(
        "%a: tensor<2x3xf32>, %b: tensor<3x4xf32>",
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>",
    ));
    match &first_op(&m).op {
        Op::DotGeneral {
            dimension_numbers,
            precision_config,
            algorithm: None,
        } => {
            assert_eq!(dimension_numbers.lhs_contracting_dimensions, vec![1]);
            assert!(dimension_numbers.lhs_batching_dimensions.is_empty());
            // all-DEFAULT reads as empty, as jaxlib prints it
            assert!(precision_config.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn region_ops_match_generic() {
    let args = "%a: tensor<4xf32>, %b: tensor<4xi32>, %c: tensor<f32>, %d: tensor<i32>";
    same(
        args,
        "%0 = stablehlo.reduce(%a init: %c) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>",
        r#"%0 = "stablehlo.reduce"(%a, %c) ({
           ^bb0(%x: tensor<f32>, %y: tensor<f32>):
             %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
             "stablehlo.return"(%s) : (tensor<f32>) -> ()
           }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<f32>) -> tensor<f32>"#,
    );
    same(
        args,
        "%0:2 = stablehlo.reduce(%a init: %c), (%b init: %d) across dimensions = [0] : (tensor<4xf32>, tensor<4xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)
          reducer(%x0: tensor<f32>, %y0: tensor<f32>) (%x1: tensor<i32>, %y1: tensor<i32>) {
            %s = stablehlo.add %x0, %y0 : tensor<f32>
            %t = stablehlo.add %x1, %y1 : tensor<i32>
            stablehlo.return %s, %t : tensor<f32>, tensor<i32>
          }",
        r#"%0:2 = "stablehlo.reduce"(%a, %b, %c, %d) ({
           ^bb0(%x0: tensor<f32>, %x1: tensor<i32>, %y0: tensor<f32>, %y1: tensor<i32>):
             %s = stablehlo.add %x0, %y0 : tensor<f32>
             %t = stablehlo.add %x1, %y1 : tensor<i32>
             stablehlo.return %s, %t : tensor<f32>, tensor<i32>
           }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<4xi32>, tensor<f32>, tensor<i32>) -> (tensor<f32>, tensor<i32>)"#,
    );
    same(
        "%n: tensor<i64>",
        "%r0, %r1 = stablehlo.while(%i = %n, %s = %n) : tensor<i64>, tensor<i64> attributes {foo = 1 : i64}
          cond {
            %c = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
            stablehlo.return %c : tensor<i1>
          } do {
            %j = stablehlo.add %i, %s : tensor<i64>
            stablehlo.return %j, %s : tensor<i64>, tensor<i64>
          }",
        r#"%r:2 = "stablehlo.while"(%n, %n) ({
           ^bb0(%i: tensor<i64>, %s: tensor<i64>):
             %c = "stablehlo.compare"(%i, %n) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i64>, tensor<i64>) -> tensor<i1>
             "stablehlo.return"(%c) : (tensor<i1>) -> ()
           }, {
           ^bb0(%i: tensor<i64>, %s: tensor<i64>):
             %j = "stablehlo.add"(%i, %s) : (tensor<i64>, tensor<i64>) -> tensor<i64>
             "stablehlo.return"(%j, %s) : (tensor<i64>, tensor<i64>) -> ()
           }) : (tensor<i64>, tensor<i64>) -> (tensor<i64>, tensor<i64>)"#,
    );
}

#[test]
fn check_chlo_and_call_ops() {
    let m = parse(
        r#"func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
func.func @main(%a: tensor<2xf32>) {
  %0 = call @g(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %1 = chlo.lgamma %0 : tensor<2xf32> -> tensor<2xf32>
  %2 = chlo.next_after %1, %0 : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  %v, %i = chlo.top_k(%2, k = 1) : tensor<2xf32> -> (tensor<1xf32>, tensor<1xi32>)
  %p = interpreter.probe %2, probe_id = "p" : tensor<2xf32>
  check.expect_eq_const %0, dense<[1.0, 2.0]> : tensor<2xf32>
  check.expect_almost_eq_const %1, dense<0.5> : tensor<2xf32> {tolerance = 0.1 : f64}
  check.expect_almost_eq %1, %2, tolerance = 0.25 : tensor<2xf32>
  check.expect_close %1, %2, max_ulp_difference = 3 : tensor<2xf32>, tensor<2xf32>
  check.expect_serialized_eq %p, probe_id = "p", iter = 2 : tensor<2xf32>
  func.return
}
"#,
    );
    assert_round_trip(&m);
    let ops = &m.functions[1].body.as_ref().unwrap().ops;
    assert_eq!(ops[0].op, Op::Call { callee: "g".into() });
    assert_eq!(ops[3].results.len(), 2);
    match &ops[6].op {
        Op::Check(CheckOp::ExpectAlmostEqConst {
            expected,
            tolerance,
        }) => {
            assert_eq!(*tolerance, 0.1);
            assert_eq!(expected.scalars(), vec![Scalar::Float(0.5); 2]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ops[8].op,
        Op::Check(CheckOp::ExpectClose {
            max_ulp_difference: 3,
            min_ulp_difference: 0
        })
    );
    assert_eq!(
        ops[9].op,
        Op::Check(CheckOp::ExpectSerializedEq {
            probe_id: "p".into(),
            iteration: 2
        })
    );
}

/// The dense literal of `stablehlo.constant <text>`.
fn constant(text: &str) -> crate::ir::Literal {
    let m = parse(&format!(
        "func.func @f() {{\n  %0 = stablehlo.constant {text}\n  func.return\n}}"
    ));
    assert_round_trip(&m);
    match &first_op(&m).op {
        Op::Constant(l) => l.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn dense_constants_in_every_form() {
    use Scalar::*;
    assert_eq!(
        constant("dense<[[1, -2], [3, 4]]> : tensor<2x2xi8>").scalars(),
        vec![Int(1), Int(-2), Int(3), Int(4)]
    );
    assert_eq!(
        constant("dense<255> : tensor<3xui8>").scalars(),
        vec![Int(255); 3]
    );
    assert_eq!(
        constant("dense<[true, false]> : tensor<2xi1>").scalars(),
        vec![Bool(true), Bool(false)]
    );
    assert_eq!(
        constant(r#"dense<"0x0100"> : tensor<2xi1>"#).scalars(),
        vec![Bool(true), Bool(false)]
    );
    assert_eq!(
        constant(r#"dense<"0x05"> : tensor<3xi1>"#).scalars(),
        vec![Bool(true), Bool(false), Bool(true)]
    );
    assert_eq!(
        constant(r#"dense<"0x0000803F00000040"> : tensor<2xf32>"#).scalars(),
        vec![Float(1.0), Float(2.0)]
    );
    assert_eq!(
        constant(r#"dense<"0x0000803F"> : tensor<3xf32>"#).scalars(),
        vec![Float(1.0); 3]
    );
    let nan = constant("dense<[0x7FC00000, 0xFF800000, -0.0, 1.5e+2]> : tensor<4xf32>");
    assert!(nan.get(0).as_f64().is_nan());
    assert_eq!(nan.get(1), Float(f64::NEG_INFINITY));
    assert!(nan.get(2).as_f64().is_sign_negative());
    assert_eq!(nan.get(3), Float(150.0));
    assert_eq!(
        constant("dense<[(1.5, -2.0), (0.0, 1.0)]> : tensor<2xcomplex<f32>>").scalars(),
        vec![Complex(1.5, -2.0), Complex(0.0, 1.0)]
    );
    assert_eq!(
        constant("dense<0.1> : tensor<bf16>").get(0),
        Float(half::bf16::from_f64(0.1).to_f64())
    );
    assert_eq!(constant("dense<> : tensor<0x3xf32>").len(), 0);
    assert_eq!(
        constant("dense<18446744073709551615> : tensor<ui64>").get(0),
        Int(u64::MAX as i128)
    );
    let big = format!(
        "dense<\"0x{}\"> : tensor<1000000xf32>",
        "0000C03F".repeat(1_000_000)
    );
    let t = std::time::Instant::now();
    let l = constant(&big);
    assert!(t.elapsed().as_secs_f64() < 2.0, "{:?}", t.elapsed());
    let m = parse(&format!(
        "func.func @f() {{\n  %0 = stablehlo.constant {big}\n  func.return\n}}"
    ));
    let t = std::time::Instant::now();
    assert_round_trip(&m);
    assert_eq!(l.get(999_999), Float(1.5));
    assert!(t.elapsed().as_secs_f64() < 2.0, "{:?}", t.elapsed());
}

#[test]
fn attributes_of_other_dialects_stay_opaque() {
    let m = parse(
        r#"#map = affine_map<(d0) -> (d0)>
module @m attributes {mhlo.num_partitions = 1 : i32, sdy.meshes = #sdy.mesh<["a"=2, "b"=4]>, x = #map, y = [@a::@b, unit, 1.5, "s", array<i1: true>, {k}]} {
  sdy.mesh @mesh = <["x"=2]>
  func.func private @decl(tensor<f32>, tensor<f32>) -> tensor<f32>
}"#,
    );
    assert_round_trip(&m);
    assert_eq!(m.name.as_deref(), Some("m"));
    let attr = |n: &str| m.attrs.iter().find(|a| a.0 == n).map(|a| a.1.clone());
    assert_eq!(
        attr("mhlo.num_partitions"),
        Some(Attr::Int(1, ElementType::I32))
    );
    assert_eq!(
        attr("sdy.meshes"),
        Some(Attr::Opaque(r#"#sdy.mesh<["a"=2, "b"=4]>"#.into()))
    );
    assert_eq!(
        attr("x"),
        Some(Attr::Opaque("affine_map<(d0) -> (d0)>".into()))
    );
    assert_eq!(
        attr("y"),
        Some(Attr::Array(vec![
            Attr::Opaque("@a::@b".into()),
            Attr::Unit,
            Attr::Float(1.5, ElementType::F64),
            Attr::String("s".into()),
            Attr::DenseArray(ElementType::Pred, vec![1]),
            Attr::Dict(vec![("k".into(), Attr::Unit)]),
        ]))
    );
    let f = &m.functions[0];
    assert!(f.body.is_none() && !f.public);
    assert_eq!(f.arg_types.len(), 2);
}

#[test]
fn types_of_every_kind() {
    let m = parse(
        r#"!t = tensor<2xf32>
func.func @f(%a: tensor<2x?x0xbf16, #stablehlo.bounds<?, 4, ?>>, %b: !stablehlo.token, %c: tuple<tensor<i1>, tuple<>>,
             %d: tensor<3x!quant.uniform<i8<-127:127>:f32:0, {0.5:1, 0.25:-2, 1.0}>>, %e: !t,
             %g: tensor<?xf32, #stablehlo.type_extensions<bounds = [8]>>, %h: memref<4xf8E4M3FN>,
             %i: tensor<2xui4>, %j: tensor<complex<f64>>, %k: !stablehlo.future<tensor<f32>>) {
  func.return
}"#,
    );
    assert_round_trip(&m);
    let t = &m.functions[0].arg_types;
    let Type::Tensor(a) = &t[0] else { panic!() };
    assert_eq!(a.shape, vec![2, -1, 0]);
    assert_eq!(a.bounds, Some(vec![-1, 4, -1]));
    assert_eq!(t[1], Type::Token);
    let Type::Tensor(d) = &t[3] else { panic!() };
    let q = d.quant.as_ref().unwrap();
    assert_eq!((q.storage_min, q.storage_max), (-127, 127));
    assert_eq!(q.scales, vec![0.5, 0.25, 1.0]);
    assert_eq!(q.zero_points, vec![1, -2, 0]);
    assert_eq!(t[4], Type::tensor(vec![2], ElementType::F32));
    let Type::Tensor(g) = &t[5] else { panic!() };
    assert_eq!(g.bounds, Some(vec![8]));
    assert!(matches!(t[6], Type::Buffer(_)));
    assert_eq!(t[8], Type::tensor(vec![], ElementType::C128));
    assert!(matches!(t[9], Type::Future(_)));
}

#[test]
fn jax_locations_with_aliases_at_the_end() {
    let src = r#"#loc1 = loc("x")
module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf32> {mhlo.sharding = "{replicated}"} loc("x")) -> (tensor<3xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.sine %arg0 : tensor<3xf32> loc(#loc8)
    %1 = stablehlo.cosine %0 : tensor<3xf32> loc(#loc9)
    %2 = stablehlo.add %0, %1 : tensor<3xf32> loc(fused[#loc2, "n"])
    %3 = stablehlo.abs %2 : tensor<3xf32> loc("f.py":3:1 to 4:2)
    return %3 : tensor<3xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("/p/f.py":10:4 to :20)
#loc3 = loc("f"(#loc2))
#loc7 = loc("/p/g.py":2:1)
#loc8 = loc(callsite(#loc3 at #loc7))
#loc9 = loc("jit(f)/cos"(#loc2))
"#;
    let m = parse(src);
    assert_round_trip(&m);
    let f = &m.functions[0];
    assert_eq!(f.loc, Location::Unknown);
    let ops = &f.body.as_ref().unwrap().ops;
    let range = Location::FileLineColRange {
        file: "/p/f.py".into(),
        line: 10,
        col: 4,
        end_line: 10,
        end_col: 20,
    };
    assert_eq!(
        ops[0].loc,
        Location::CallSite {
            callee: Box::new(Location::Name {
                name: "f".into(),
                child: Some(Box::new(range.clone()))
            }),
            caller: Box::new(Location::file_line_col("/p/g.py", 2, 1)),
        }
    );
    assert_eq!(ops[1].loc.name(), Some("jit(f)/cos"));
    assert_eq!(
        ops[2].loc,
        Location::Fused(vec![
            range,
            Location::Name {
                name: "n".into(),
                child: None
            }
        ])
    );
    assert!(matches!(
        ops[3].loc,
        Location::FileLineColRange { end_line: 4, .. }
    ));
    assert_eq!(ops[4].loc, Location::Unknown);
    assert_eq!(f.arg_attrs[0][0].0, "mhlo.sharding");
    assert_eq!(f.result_attrs[0][0].1, Attr::String("result".into()));
}

#[test]
fn ops_without_loc_get_their_source_position() {
    let m = parse_module_at(
        "func.func @f(%a: tensor<f32>) {\n  %0 = stablehlo.negate %a : tensor<f32>\n  func.return\n}",
        "x.mlir",
        7,
    )
    .unwrap();
    assert_eq!(first_op(&m).loc, Location::file_line_col("x.mlir", 8, 3));
}

#[test]
fn dense_resources() {
    let m = parse(
        r#"func.func @f() {
  %0 = stablehlo.constant dense_resource<blob1> : tensor<2xi32>
  func.return
}
{-#
  dialect_resources: {
    builtin: {
      blob1: "0x040000000100000002000000"
    }
  }
#-}
"#,
    );
    match &first_op(&m).op {
        Op::Constant(l) => assert_eq!(l.to_i64s(), vec![1, 2]),
        other => panic!("{other:?}"),
    }
}

/// The error message for `src`, which must fail.
fn error(src: &str) -> String {
    match parse_module_at(src, "bad.mlir", 10) {
        Ok(_) => panic!("parsed: {src}"),
        Err(e) => {
            assert_eq!(e.kind, crate::ErrorKind::InvalidArgument);
            e.message
        }
    }
}

#[test]
fn malformed_input_reports_line_and_column() {
    let f = |body: &str| format!("func.func @f(%a: tensor<2xf32>) {{\n  {body}\n  func.return\n}}");
    let cases = [
        (f("%0 = stablehlo.add %a, %b : tensor<2xf32>"), "bad.mlir:11:26: use of undefined value `%b`"),
        (f("%0 = stablehlo.add %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>"), "bad.mlir:11:3: 1 operand(s) given"),
        (f("%0 = stablehlo.abs %a : tensor<2xfoo>"), "bad.mlir:11:36: unknown element type `foo`"),
        (f("%0 = stablehlo.constant dense<[1, 2, 3]> : tensor<2xf32>"), "bad.mlir:11:33: dense list of shape [3]"),
        (f("%0 = stablehlo.constant dense<300> : tensor<2xi8>"), "bad.mlir:11:33: integer 300 out of range"),
        (f("%0 = \"stablehlo.iota\"() : () -> tensor<2xf32>"), "bad.mlir:11:3: stablehlo.iota: missing attribute `iota_dimension`"),
        (f("%0 = stablehlo.compare XX, %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>"), "bad.mlir:11:26: unknown direction `XX`"),
        (f("%0:2 = stablehlo.abs %a : tensor<2xf32>"), "bad.mlir:11:3: `stablehlo.abs` defines 1 result(s) but 2 name(s)"),
        (f("%0 = stablehlo.abs %a : tensor<2xf32>\n  %0 = stablehlo.abs %a : tensor<2xf32>"), "bad.mlir:12:3: redefinition of value `%0`"),
        ("func.func @f() {\n  %0 = stablehlo.constant dense<1.0> : tensor<f32>".to_string(), "bad.mlir:11:"),
        ("func.func @f() { \"x\"".to_string(), "bad.mlir:10:"),
        (f("%0 = stablehlo.abs %a : tensor<2xf32> loc(#nope)"), "bad.mlir:11:45: undefined alias `#nope`"),
        (f("%0 = stablehlo.custom_call @x(%a) {k = #sdy.foo<[}>} : (tensor<2xf32>) -> ()"), "bad.mlir:11:"),
        (f("%0 = stablehlo.abs %a : tensor<2xf32> loc(\"unterminated)"), "bad.mlir:11:"),
    ];
    let mut bad = Vec::new();
    for (src, want) in cases {
        let msg = error(&src);
        if !msg.starts_with(want) {
            bad.push(format!("got `{msg}`, want `{want}...`"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for n in [40usize, 10_000] {
        let attr = format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let src = format!("module attributes {{a = {attr}}} {{\n}}");
        let r = parse_module(&src, "deep.mlir");
        if n > MAX_DEPTH {
            assert!(r.unwrap_err().message.contains("nesting too deep"));
        } else {
            assert!(r.is_ok());
        }
        let mut body = String::new();
        for _ in 0..n {
            body.push_str("%r = \"stablehlo.case\"(%i) ({\n");
        }
        let src = format!("func.func @f(%i: tensor<i32>) {{\n{body}");
        let r = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse_module(&src, "deep.mlir").is_err())
            .unwrap()
            .join()
            .unwrap();
        assert!(r);
    }
}

#[test]
fn comparison_direction_spellings() {
    let m = parse(&func(
        "%a: tensor<f32>",
        r#"%0 = "stablehlo.compare"(%a, %a) {comparison_direction = #stablehlo.comparison_direction<NE>} : (tensor<f32>, tensor<f32>) -> tensor<i1>"#,
    ));
    assert_eq!(
        first_op(&m).op,
        Op::Compare {
            direction: ComparisonDirection::Ne,
            compare_type: None
        }
    );
}

#[test]
fn lenient_forms_of_if_case_and_other_dialects() {
    same(
        "%p: tensor<i1>, %a: tensor<f32>",
        "%0 = stablehlo.if %p -> (tensor<f32>) {\n stablehlo.return %a : tensor<f32>\n } else {\n stablehlo.return %a : tensor<f32>\n }",
        r#"%0 = "stablehlo.if"(%p) ({
             "stablehlo.return"(%a) : (tensor<f32>) -> ()
           }, {
             "stablehlo.return"(%a) : (tensor<f32>) -> ()
           }) : (tensor<i1>) -> tensor<f32>"#,
    );
    same(
        "%i: tensor<i32>, %a: tensor<f32>",
        "%0 = stablehlo.case(%i) ({\n stablehlo.return %a : tensor<f32>\n }) : (tensor<i32>) -> tensor<f32>",
        r#"%0 = "stablehlo.case"(%i) ({
             "stablehlo.return"(%a) : (tensor<f32>) -> ()
           }) : (tensor<i32>) -> tensor<f32>"#,
    );
    let m = parse(&func(
        "%a: tensor<8xf32>",
        r#"%0 = sdy.sharding_constraint %a <@mesh, [{"x"}]> : tensor<8xf32>
           %1 = arith.addf %0, %0 {fastmath = #arith.fastmath<none>} : tensor<8xf32>"#,
    ));
    assert_round_trip(&m);
    let ops = &m.functions[0].body.as_ref().unwrap().ops;
    assert_eq!(
        ops[0].op,
        Op::Other {
            name: "sdy.sharding_constraint".into(),
            attrs: vec![(
                "sharding".into(),
                Attr::Opaque(r#"#sdy.sharding<@mesh, [{"x"}]>"#.into())
            )]
        }
    );
    assert_eq!(ops[1].results.len(), 1);
}

#[test]
fn hostile_sizes_and_nesting_fail_cleanly() {
    let cases = [
        "dense<1.0> : tensor<99999999999x99999999999xf32>".to_string(),
        "dense<1.0> : tensor<4000000000xf32>".to_string(),
        format!(
            "dense<{}1.0, 2.0{}> : tensor<complex<f32>>",
            "(".repeat(5000),
            ")".repeat(5000)
        ),
        format!(
            "dense<1.0> : tensor<{}f32{}>",
            "complex<".repeat(5000),
            ">".repeat(5000)
        ),
    ];
    for c in cases {
        let src = format!("func.func @f() {{\n  %0 = stablehlo.constant {c}\n  func.return\n}}");
        let r = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse_module(&src, "h.mlir").map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        assert!(r.unwrap_err().message.starts_with("h.mlir:2:"));
    }
}

#[test]
fn shardy_ops_read_as_opaque_ops() {
    let m = parse(
        r#"module @jit_f attributes {mhlo.num_partitions = 2 : i32} {
  sdy.mesh @mesh = <["a"=2]> loc(#loc)
  func.func public @main(%arg0: tensor<2x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> (tensor<2x4xf32> {jax.result_info = "result"}) {
    %0 = sdy.sharding_constraint %arg0 <@mesh, [{"a"}, {}]> : tensor<2x4xf32> loc(#loc)
    %1 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{"a"}, {}]>] out_shardings=[<@mesh, [{"a"}, {}]>] manual_axes={"a"} (%arg1: tensor<1x4xf32> loc("s"(#loc))) {
      %2 = stablehlo.negate %arg1 : tensor<1x4xf32> loc(#loc)
      sdy.return %2 : tensor<1x4xf32> loc(#loc)
    } : (tensor<2x4xf32>) -> tensor<2x4xf32> loc(#loc)
    return %1 : tensor<2x4xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
"#,
    );
    assert_round_trip(&m);
    let op = &m.functions[0].body.as_ref().unwrap().ops[1];
    assert_eq!(op.name(), "sdy.manual_computation");
    assert_eq!(op.regions[0].ops.len(), 2);
}

#[test]
fn long_location_chains() {
    let mut defs = String::from("#loc0 = loc(\"f.py\":1:1)\n");
    for i in 1..300 {
        defs.push_str(&format!(
            "#loc{i} = loc(callsite(\"fn{i}\"(\"f.py\":{i}:1) at #loc{}))\n",
            i - 1
        ));
    }
    let body = "func.func @f(%a: tensor<f32>) {\n  %0 = stablehlo.abs %a : tensor<f32> loc(#loc299)\n  func.return\n}\n";
    let src = format!("{body}{defs}");
    let m = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || parse_module(&src, "chain.mlir"))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(first_op(&m).loc.name(), Some("fn299"));
    // Defined in the wrong order, the chain is too deep: an error, not a crash.
    let mut rev = String::new();
    for i in (1..300).rev() {
        rev.push_str(&format!(
            "#loc{i} = loc(callsite(#loc{} at #loc0))\n",
            i - 1
        ));
    }
    let src = format!("{body}#loc0 = loc(unknown)\n{rev}");
    let r = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || parse_module(&src, "chain.mlir"))
        .unwrap()
        .join()
        .unwrap();
    assert!(r.unwrap_err().message.contains("nesting too deep"));
}

#[test]
fn exponential_alias_expansion_is_refused() {
    let body = "func.func @f(%a: tensor<f32>) {\n  %0 = stablehlo.abs %a : tensor<f32> loc(#l60)\n  func.return\n}\n";
    let mut locs = String::from("#l0 = loc(\"x\")\n");
    let mut attrs = String::from("#a0 = \"x\"\n");
    for i in 1..=60 {
        locs.push_str(&format!("#l{i} = loc(fused[#l{}, #l{}])\n", i - 1, i - 1));
        attrs.push_str(&format!("#a{i} = [#a{}, #a{}]\n", i - 1, i - 1));
    }
    let e = parse_module(&format!("{body}{locs}"), "x.mlir").unwrap_err();
    assert!(
        e.message.contains("aliases expand to too much text"),
        "{}",
        e.message
    );
    let src = format!("{attrs}module attributes {{k = #a60}} {{\n}}");
    let e = parse_module(&src, "x.mlir").unwrap_err();
    assert!(
        e.message.contains("aliases expand to too much text"),
        "{}",
        e.message
    );
}
