//! Malformed and edge-case StableHLO text through the whole pipeline on the real adapter:
//! attributes out of the spec's range are INVALID_ARGUMENT naming the op (never a panic), and
//! programs whose WGSL once failed naga (constant 1 / 0, INT_MIN / -1, shifts by 32 or more,
//! zero-size operands, helpers named like WGSL built-ins) run with the right results. Inputs
//! the text fuzzer (`fuzz/fuzz_targets/text.rs`) found are kept here too.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::runner::{run_bytes, Outcome, RunOptions};
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

/// Runs `text`; returns the outcome and the report's lines.
fn run(name: &str, text: &str) -> (Outcome, String) {
    let r = run_bytes(&device(), text.as_bytes(), name, &RunOptions::default());
    (r.outcome, r.lines.join("\n"))
}

/// `text` is rejected as INVALID_ARGUMENT with a message naming `op` and `what`.
fn rejects(name: &str, text: &str, op: &str, what: &str) {
    let (outcome, lines) = run(name, text);
    assert_eq!(outcome, Outcome::Error, "{name}: {lines}");
    assert!(
        lines.contains("INVALID_ARGUMENT") && lines.contains(op) && lines.contains(what),
        "{name}: {lines}"
    );
}

/// `text` runs and every check passes.
fn passes(name: &str, text: &str) {
    let (outcome, lines) = run(name, text);
    assert_eq!(outcome, Outcome::Pass, "{name}: {lines}");
}

#[test]
fn rejects_gather_start_index_map() {
    rejects(
        "gather_start_index_map.mlir",
        r#"func.func @main() -> tensor<2x3xf32> {
  %x = stablehlo.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]> : tensor<3x3xf32>
  %i = stablehlo.constant dense<[[0], [2]]> : tensor<2x1xi32>
  %r = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [7], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>} : (tensor<3x3xf32>, tensor<2x1xi32>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"#,
        "stablehlo.gather",
        "start_index_map 7",
    );
}

#[test]
fn rejects_gather_index_vector_dim() {
    rejects(
        "gather_index_vector_dim.mlir",
        r#"func.func @main() -> tensor<2x3xf32> {
  %x = stablehlo.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]> : tensor<3x3xf32>
  %i = stablehlo.constant dense<[[0], [2]]> : tensor<2x1xi32>
  %r = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 5>, slice_sizes = array<i64: 1, 3>} : (tensor<3x3xf32>, tensor<2x1xi32>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"#,
        "stablehlo.gather",
        "index_vector_dim 5",
    );
}

#[test]
fn rejects_gather_offset_dims() {
    rejects(
        "gather_offset_dims.mlir",
        r#"func.func @main() -> tensor<2x3xf32> {
  %x = stablehlo.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]> : tensor<3x3xf32>
  %i = stablehlo.constant dense<[[0], [2]]> : tensor<2x1xi32>
  %r = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<offset_dims = [4], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>} : (tensor<3x3xf32>, tensor<2x1xi32>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"#,
        "stablehlo.gather",
        "offset_dims 4",
    );
}

#[test]
fn rejects_gather_collapsed_slice_dims() {
    rejects(
        "gather_collapsed_slice_dims.mlir",
        r#"func.func @main() -> tensor<2x3xf32> {
  %x = stablehlo.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]> : tensor<3x3xf32>
  %i = stablehlo.constant dense<[[0], [2]]> : tensor<2x1xi32>
  %r = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [9], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>} : (tensor<3x3xf32>, tensor<2x1xi32>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"#,
        "stablehlo.gather",
        "collapsed_slice_dims 9",
    );
}

#[test]
fn rejects_dynamic_slice_sizes() {
    rejects(
        "dynamic_slice_sizes.mlir",
        r#"func.func @main() -> tensor<2xf32> {
  %x = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %s = stablehlo.constant dense<1> : tensor<i32>
  %r = stablehlo.dynamic_slice %x, %s, sizes = [5] : (tensor<3xf32>, tensor<i32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
"#,
        "stablehlo.dynamic_slice",
        "slice size 5",
    );
}

#[test]
fn rejects_convolution_feature_group_count() {
    rejects(
        "convolution_feature_group_count.mlir",
        r#"func.func @main() -> tensor<1x1x2x1xf32> {
  %x = stablehlo.constant dense<1.0> : tensor<1x1x3x1xf32>
  %w = stablehlo.constant dense<1.0> : tensor<1x2x1x1xf32>
  %r = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 0 : i64} : (tensor<1x1x3x1xf32>, tensor<1x2x1x1xf32>) -> tensor<1x1x2x1xf32>
  return %r : tensor<1x1x2x1xf32>
}
"#,
        "stablehlo.convolution",
        "feature_group_count 0",
    );
}

#[test]
fn runs_divide_by_constant_zero() {
    passes(
        "divide_by_constant_zero.mlir",
        r#"func.func @main() -> tensor<3xf32> {
  %a = stablehlo.constant dense<1.0> : tensor<3xf32>
  %b = stablehlo.constant dense<0.0> : tensor<3xf32>
  %c = stablehlo.divide %a, %b : tensor<3xf32>
  check.expect_eq_const %c, dense<0x7F800000> : tensor<3xf32>
  return %c : tensor<3xf32>
}
"#,
    );
}

#[test]
fn runs_i32_overflow_and_wide_shifts() {
    passes(
        "i32_overflow_and_wide_shifts.mlir",
        r#"func.func @main() -> tensor<2xi32> {
  %a = stablehlo.constant dense<-2147483648> : tensor<2xi32>
  %b = stablehlo.constant dense<-1> : tensor<2xi32>
  %c = stablehlo.divide %a, %b : tensor<2xi32>
  %d = stablehlo.abs %a : tensor<2xi32>
  %e = stablehlo.negate %a : tensor<2xi32>
  %s = stablehlo.constant dense<33> : tensor<2xi32>
  %one = stablehlo.constant dense<1> : tensor<2xi32>
  %f = stablehlo.shift_left %one, %s : tensor<2xi32>
  %g = stablehlo.remainder %a, %b : tensor<2xi32>
  %h = stablehlo.multiply %a, %b : tensor<2xi32>
  check.expect_eq_const %c, dense<-2147483648> : tensor<2xi32>
  check.expect_eq_const %d, dense<-2147483648> : tensor<2xi32>
  check.expect_eq_const %e, dense<-2147483648> : tensor<2xi32>
  check.expect_eq_const %f, dense<0> : tensor<2xi32>
  check.expect_eq_const %g, dense<0> : tensor<2xi32>
  check.expect_eq_const %h, dense<-2147483648> : tensor<2xi32>
  return %c : tensor<2xi32>
}
"#,
    );
}

#[test]
fn runs_zero_size_dynamic_update_slice() {
    passes(
        "zero_size_dynamic_update_slice.mlir",
        r#"func.func @main() -> tensor<3xf32> {
  %x = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %u = stablehlo.constant dense<> : tensor<0xf32>
  %s = stablehlo.constant dense<1> : tensor<i32>
  %r = stablehlo.dynamic_update_slice %x, %u, %s : (tensor<3xf32>, tensor<0xf32>, tensor<i32>) -> tensor<3xf32>
  check.expect_eq_const %r, dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  return %r : tensor<3xf32>
}
"#,
    );
}

#[test]
fn runs_zero_size_in_place_update() {
    passes(
        "zero_size_in_place_update.mlir",
        r#"func.func @main() -> tensor<2x8xf32> {
  %x = stablehlo.iota dim = 1 : tensor<2x8xf32>
  %u = stablehlo.constant dense<> : tensor<2x0xf32>
  %s = stablehlo.constant dense<1> : tensor<i32>
  %r = stablehlo.dynamic_update_slice %x, %u, %s, %s : (tensor<2x8xf32>, tensor<2x0xf32>, tensor<i32>, tensor<i32>) -> tensor<2x8xf32>
  %o = stablehlo.add %r, %r : tensor<2x8xf32>
  check.expect_eq_const %o, dense<[[0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]]> : tensor<2x8xf32>
  return %o : tensor<2x8xf32>
}
"#,
    );
}

#[test]
fn runs_zero_size_operands() {
    passes(
        "zero_size_operands.mlir",
        r#"func.func @main() -> (tensor<3xf32>, tensor<0xf32>, tensor<0x0xf32>, tensor<0x2xf32>, tensor<0xf32>, tensor<0xf32>, tensor<0xf32>, tensor<0x4xf32>, tensor<0xf32>) {
  %x = stablehlo.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %e = stablehlo.constant dense<> : tensor<0xf32>
  %c = stablehlo.concatenate %x, %e, dim = 0 : (tensor<3xf32>, tensor<0xf32>) -> tensor<3xf32>
  check.expect_eq_const %c, dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [0] : (tensor<0xf32>, tensor<f32>) -> tensor<f32>
  check.expect_eq_const %r, dense<0.0> : tensor<f32>
  %p = stablehlo.pad %e, %z, low = [1], high = [1], interior = [2] : (tensor<0xf32>, tensor<f32>) -> tensor<2xf32>
  check.expect_eq_const %p, dense<0.0> : tensor<2xf32>
  %s = "stablehlo.sort"(%e) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %lt = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) {dimension = 0 : i64} : (tensor<0xf32>) -> tensor<0xf32>
  %m = stablehlo.constant dense<> : tensor<0x4xf32>
  %n = stablehlo.constant dense<> : tensor<4x0xf32>
  %d = stablehlo.dot_general %n, %m, contracting_dims = [1] x [0] : (tensor<4x0xf32>, tensor<0x4xf32>) -> tensor<4x4xf32>
  check.expect_eq_const %d, dense<0.0> : tensor<4x4xf32>
  %d2 = stablehlo.dot_general %m, %n, contracting_dims = [1] x [0] : (tensor<0x4xf32>, tensor<4x0xf32>) -> tensor<0x0xf32>
  %i = stablehlo.constant dense<> : tensor<0x1xi32>
  %g = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 2>} : (tensor<3xf32>, tensor<0x1xi32>) -> tensor<0x2xf32>
  %u = stablehlo.constant dense<> : tensor<0xf32>
  %sc = "stablehlo.scatter"(%x, %i, %u) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s2 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s2 : tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>} : (tensor<3xf32>, tensor<0x1xi32>, tensor<0xf32>) -> tensor<3xf32>
  check.expect_eq_const %sc, dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %rw = "stablehlo.reduce_window"(%e, %z) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s3 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s3 : tensor<f32>
  }) {window_dimensions = array<i64: 2>} : (tensor<0xf32>, tensor<f32>) -> tensor<0xf32>
  %ds = stablehlo.constant dense<0> : tensor<i32>
  %dsl = stablehlo.dynamic_slice %x, %ds, sizes = [0] : (tensor<3xf32>, tensor<i32>) -> tensor<0xf32>
  %ez = stablehlo.dynamic_update_slice %e, %e, %ds : (tensor<0xf32>, tensor<0xf32>, tensor<i32>) -> tensor<0xf32>
  %tr = stablehlo.transpose %n, dims = [1, 0] : (tensor<4x0xf32>) -> tensor<0x4xf32>
  %rv = stablehlo.reverse %e, dims = [0] : tensor<0xf32>
  return %c, %s, %d2, %g, %rw, %dsl, %ez, %tr, %rv : tensor<3xf32>, tensor<0xf32>, tensor<0x0xf32>, tensor<0x2xf32>, tensor<0xf32>, tensor<0xf32>, tensor<0xf32>, tensor<0x4xf32>, tensor<0xf32>
}
"#,
    );
}

#[test]
fn runs_regions_calling_select() {
    passes(
        "regions_calling_select.mlir",
        r#"func.func @main() -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %x = stablehlo.constant dense<[3.0, 1.0, 4.0, 1.5]> : tensor<4xf32>
  %src = stablehlo.constant dense<[10.0, 20.0]> : tensor<2xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%x, %src, %z) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %ge = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %t = stablehlo.constant dense<true> : tensor<i1>
    %s = stablehlo.select %ge, %t, %ge : tensor<i1>, tensor<i1>
    stablehlo.return %s : tensor<i1>
  }, {
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {window_dimensions = array<i64: 2>, window_strides = array<i64: 2>} : (tensor<4xf32>, tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
  check.expect_eq_const %r, dense<[10.0, 0.0, 20.0, 0.0]> : tensor<4xf32>
  %m = "stablehlo.map"(%x, %x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %gt = stablehlo.compare GT, %a, %z : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %s = stablehlo.select %gt, %a, %b : tensor<i1>, tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  check.expect_eq_const %m, dense<[3.0, 1.0, 4.0, 1.5]> : tensor<4xf32>
  %so = "stablehlo.sort"(%x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %lt = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %f = stablehlo.constant dense<false> : tensor<i1>
    %s = stablehlo.select %lt, %lt, %f : tensor<i1>, tensor<i1>
    stablehlo.return %s : tensor<i1>
  }) {dimension = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  check.expect_eq_const %so, dense<[1.0, 1.5, 3.0, 4.0]> : tensor<4xf32>
  return %r, %m, %so : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
"#,
    );
}

#[test]
fn runs_reduce_precision_extremes() {
    passes(
        "reduce_precision_extremes.mlir",
        r#"func.func @main() -> (tensor<2xf32>, tensor<2xf32>) {
  %x = stablehlo.constant dense<[1.5, 3.0e38]> : tensor<2xf32>
  %a = stablehlo.reduce_precision %x, format = e30m100 : tensor<2xf32>
  %b = stablehlo.reduce_precision %x, format = e5m2 : tensor<2xf32>
  check.expect_eq_const %a, dense<[1.5, 3.0e38]> : tensor<2xf32>
  check.expect_eq_const %b, dense<[1.5, 0x7F800000]> : tensor<2xf32>
  return %a, %b : tensor<2xf32>, tensor<2xf32>
}
"#,
    );
}

/// One op of a one-function program over `args`, for the verifier table.
fn program(args: &str, body: &str, result: &str) -> String {
    format!("func.func @main({args}) -> {result} {{\n  %r = {body}\n  return %r : {result}\n}}\n")
}

/// Attribute values the spec forbids, op by op: each is INVALID_ARGUMENT before codegen.
#[test]
fn the_verifier_rejects_attributes_out_of_range() {
    let body2 = "({\n  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n    %s = stablehlo.add %a, %b : tensor<f32>\n    stablehlo.return %s : tensor<f32>\n  })";
    let cases: Vec<(&str, String)> = vec![
        (
            "iota dimension",
            program("", "stablehlo.iota dim = 3 : tensor<4xf32>", "tensor<4xf32>"),
        ),
        (
            "transpose permutation",
            program(
                "%x: tensor<2x3xf32>",
                "stablehlo.transpose %x, dims = [0, 0] : (tensor<2x3xf32>) -> tensor<2x2xf32>",
                "tensor<2x2xf32>",
            ),
        ),
        (
            "sort dimension",
            program(
                "%x: tensor<4xf32>",
                "\"stablehlo.sort\"(%x) ({\n  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n    %l = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>\n    stablehlo.return %l : tensor<i1>\n  }) {dimension = 3 : i64} : (tensor<4xf32>) -> tensor<4xf32>",
                "tensor<4xf32>",
            ),
        ),
        (
            "reduce_window arity",
            program(
                "%x: tensor<4xf32>, %z: tensor<f32>",
                &format!("\"stablehlo.reduce_window\"(%x, %z) {body2} {{window_dimensions = array<i64: 2, 2>}} : (tensor<4xf32>, tensor<f32>) -> tensor<3xf32>"),
                "tensor<3xf32>",
            ),
        ),
        (
            "reduce_window stride",
            program(
                "%x: tensor<4xf32>, %z: tensor<f32>",
                &format!("\"stablehlo.reduce_window\"(%x, %z) {body2} {{window_dimensions = array<i64: 2>, window_strides = array<i64: 0>}} : (tensor<4xf32>, tensor<f32>) -> tensor<3xf32>"),
                "tensor<3xf32>",
            ),
        ),
        (
            "scatter dims",
            program(
                "%x: tensor<3xf32>, %i: tensor<1x1xi32>, %u: tensor<1xf32>",
                &format!("\"stablehlo.scatter\"(%x, %i, %u) {body2} {{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [], inserted_window_dims = [0], scatter_dims_to_operand_dims = [4], index_vector_dim = 1>}} : (tensor<3xf32>, tensor<1x1xi32>, tensor<1xf32>) -> tensor<3xf32>"),
                "tensor<3xf32>",
            ),
        ),
        (
            "dynamic_update_slice too large",
            program(
                "%x: tensor<3xf32>, %u: tensor<4xf32>, %s: tensor<i32>",
                "stablehlo.dynamic_update_slice %x, %u, %s : (tensor<3xf32>, tensor<4xf32>, tensor<i32>) -> tensor<3xf32>",
                "tensor<3xf32>",
            ),
        ),
        (
            "convolution dimension numbers",
            program(
                "%x: tensor<1x4x1xf32>, %w: tensor<2x1x1xf32>",
                "stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x1xf32>, tensor<2x1x1xf32>) -> tensor<1x3x1xf32>",
                "tensor<1x3x1xf32>",
            ),
        ),
        (
            "convolution groups",
            program(
                "%x: tensor<1x4x2xf32>, %w: tensor<2x1x2xf32>",
                "stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {stride = [1]} {batch_group_count = 2 : i64, feature_group_count = 2 : i64} : (tensor<1x4x2xf32>, tensor<2x1x2xf32>) -> tensor<1x3x2xf32>",
                "tensor<1x3x2xf32>",
            ),
        ),
        (
            "fft length",
            program(
                "%x: tensor<4xcomplex<f32>>",
                "stablehlo.fft %x, type = FFT, length = [4, 4, 4, 4] : (tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>>",
                "tensor<4xcomplex<f32>>",
            ),
        ),
        (
            "get_dimension_size dimension",
            program(
                "%x: tensor<4xf32>",
                "stablehlo.get_dimension_size %x, dim = 2 : (tensor<4xf32>) -> tensor<i32>",
                "tensor<i32>",
            ),
        ),
        (
            "batch_norm feature_index",
            program(
                "%x: tensor<2x3xf32>, %s: tensor<3xf32>",
                "\"stablehlo.batch_norm_inference\"(%x, %s, %s, %s, %s) {epsilon = 0.001 : f32, feature_index = 5 : i64} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>",
                "tensor<2x3xf32>",
            ),
        ),
        (
            "slice limits",
            program(
                "%x: tensor<4xf32>",
                "stablehlo.slice %x [2:9:9223372036854775807] : (tensor<4xf32>) -> tensor<1xf32>",
                "tensor<1xf32>",
            ),
        ),
        (
            "pad overflow",
            program(
                "%x: tensor<4xf32>, %z: tensor<f32>",
                "stablehlo.pad %x, %z, low = [0], high = [0], interior = [9223372036854775807] : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>",
                "tensor<4xf32>",
            ),
        ),
    ];
    for (what, text) in cases {
        let verdict = wgpu_hlo::frontend::text::parse_module(&text, "t.mlir")
            .and_then(|m| wgpu_hlo::passes::prepare(&m, "main"));
        match verdict {
            Ok(_) => panic!("{what}: accepted\n{text}"),
            Err(e) => {
                let op = what.split(' ').next().unwrap_or_default();
                assert!(
                    e.kind == wgpu_hlo::ErrorKind::InvalidArgument
                        && e.to_string().contains(&format!("stablehlo.{op}")),
                    "{what}: {e}\n{text}"
                );
            }
        }
    }
}
