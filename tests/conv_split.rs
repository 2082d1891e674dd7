//! Convolutions split over their window: with a low loop bound per invocation (through
//! `CompileOptions::max_loop_iterations`), forward convolutions, input gradients (lhs
//! dilation, window reversal), filter gradients (batch and features swapped, the gradient as
//! the kernel), feature and batch groups, rhs dilation, strides and padding, and f16/bf16
//! results match a host reference that pads and dilates the input explicitly and accumulates
//! in f64. At the default bound, the filter gradient of a 3x3 convolution over 128 MNIST-sized
//! images (a window of 100352 steps) is right.

mod common;

use common::conv::{Conv, Ty};

const BOUND: Option<u64> = Some(64);

#[test]
fn forward_convolutions_split() {
    // 3x3 windows over 16 features (153 steps per output): whole windows split.
    let mut c = Conv::new(2, 16, [9, 9], 5, [3, 3]);
    c.pad = [(1, 1), (1, 1)];
    c.check(BOUND);
    // More input features than the bound: features split too.
    let mut c = Conv::new(2, 100, [5, 6], 3, [2, 3]);
    c.stride = [2, 1];
    c.pad = [(1, 0), (0, 2)];
    c.check(BOUND);
    // NCHW / OIHW layouts, rhs dilation, reversal.
    let mut c = Conv::new(3, 7, [11, 10], 4, [3, 4]);
    c.layouts = ["bf01", "oi01", "bf01"];
    c.rhs_dilate = [2, 1];
    c.reverse = [true, false];
    c.pad = [(2, 1), (1, 1)];
    c.check(BOUND);
}

#[test]
fn input_gradient_convolutions_split() {
    // What the transpose of a stride-2, padded 3x3 convolution looks like: the output
    // gradient dilated by the stride, padded, the kernel reversed and its features swapped.
    let mut c = Conv::new(2, 40, [5, 5], 6, [3, 3]);
    c.lhs_dilate = [2, 2];
    c.pad = [(1, 2), (1, 2)];
    c.reverse = [true, true];
    c.layouts = ["b01f", "01oi", "b01f"];
    c.check(BOUND);
}

#[test]
fn filter_gradient_convolutions_split() {
    // The gradient of a 3x3 "same" convolution over 24 images of 12x12 with respect to its
    // kernel: the input with batch and features swapped, the output gradient as the kernel,
    // its spatial size as the window (144 steps of 24 "features").
    let mut c = Conv::new(3, 24, [12, 12], 4, [12, 12]);
    c.pad = [(1, 1), (1, 1)];
    c.layouts = ["f01b", "i01o", "01bf"];
    c.check(BOUND);
    // A strided forward convolution's filter gradient: window dilated by the stride.
    let mut c = Conv::new(2, 10, [9, 9], 3, [4, 4]);
    c.rhs_dilate = [2, 2];
    c.pad = [(0, 1), (0, 1)];
    c.layouts = ["f01b", "i01o", "01bf"];
    c.check(BOUND);
}

#[test]
fn grouped_convolutions_split() {
    // Feature groups (each output feature sees 40 of the 120 input features).
    let mut c = Conv::new(2, 120, [6, 6], 6, [2, 2]);
    c.feature_groups = 3;
    c.check(BOUND);
    // Depthwise.
    let mut c = Conv::new(2, 8, [20, 20], 8, [9, 9]);
    c.feature_groups = 8;
    c.pad = [(4, 4), (4, 4)];
    c.check(BOUND);
    // Batch groups: the filter gradient of a grouped convolution.
    let mut c = Conv::new(4, 30, [7, 7], 4, [3, 3]);
    c.batch_groups = 2;
    c.check(BOUND);
}

#[test]
fn narrow_float_convolutions_split() {
    for ty in [Ty::F16, Ty::BF16] {
        let mut c = Conv::new(2, 40, [7, 7], 5, [3, 3]);
        c.pad = [(1, 1), (1, 1)];
        c.ty = ty;
        c.check(BOUND);
        // An odd number of results: the last packed word is half full.
        let mut c = Conv::new(1, 33, [3, 3], 3, [3, 3]);
        c.ty = ty;
        c.check(BOUND);
    }
}

#[test]
fn small_convolutions_are_not_split() {
    // One kernel: the convolution, with the negation of its input fused as a prologue (no
    // partials, no fold).
    let c = Conv::new(2, 3, [8, 8], 4, [3, 3]);
    assert_eq!(c.check(None), 1);
    assert_eq!(c.check(Some(1024)), 1);
}

#[test]
fn mnist_filter_gradient_at_the_default_bound() {
    // 128 images of 28x28x1, 3x3 "same" convolution to 8 features: the kernel gradient sums
    // 128 x 28 x 28 = 100352 products per element, which one invocation cannot run.
    let mut c = Conv::new(1, 128, [28, 28], 8, [28, 28]);
    c.pad = [(1, 1), (1, 1)];
    c.layouts = ["f01b", "i01o", "01bf"];
    assert!(c.check(None) > 2);
    // The same over 8 images of 112x112.
    let mut c = Conv::new(1, 8, [112, 112], 4, [112, 112]);
    c.pad = [(1, 1), (1, 1)];
    c.layouts = ["f01b", "i01o", "01bf"];
    assert!(c.check(None) > 2);
}

#[test]
fn cnn_input_gradient_is_not_split_on_cpu_adapters() {
    // A CNN's second 3x3 convolution (32x14x14x32 -> 64 features), its input gradient: the
    // output gradient against the reversed kernel, features swapped. The shared-rows kernel
    // of CPU adapters runs it in 49 workgroups of one subgroup, plenty for the cores: no
    // chunks, no partials and no fold (its lanes were once counted as the workgroups, and it
    // was cut in two: 1.3 ms of fold and partials of 12 ms on lavapipe).
    if !cpu_class_with_subgroups_of_8() {
        return;
    }
    let mut c = Conv::new(32, 64, [14, 14], 32, [3, 3]);
    c.pad = [(1, 1), (1, 1)];
    c.reverse = [true, true];
    c.layouts = ["b01f", "01oi", "b01f"];
    let wgsl = c.check_kernels(None);
    let conv: Vec<&String> = wgsl
        .iter()
        .filter(|w| w.contains("implicit-GEMM convolution"))
        .collect();
    assert_eq!(
        conv.len(),
        1,
        "{:?}",
        wgsl.iter().map(|w| w.lines().next()).collect::<Vec<_>>()
    );
    assert!(
        conv[0].contains("share") && conv[0].contains(", 1 chunks of 9 positions"),
        "{}",
        conv[0].lines().next().unwrap_or("")
    );
}

#[test]
fn few_output_features_keep_the_register_blocked_kernel_on_cpu_adapters() {
    // The shared-rows kernel's lanes cover 4 output features each, 8 lanes a subgroup: with
    // fewer than 16 features most lanes computed clamped copies. A depthwise 3x3 (one output
    // feature a group) and a 32 -> 8 features 3x3 take the register-blocked kernel instead
    // (lavapipe: 170 -> 66 ms and 85 -> 45 ms at 16x64x64x32); 16 features stay shared.
    if !cpu_class_with_subgroups_of_8() {
        return;
    }
    let mut depthwise = Conv::new(16, 32, [32, 32], 32, [3, 3]);
    depthwise.feature_groups = 32;
    let narrow = Conv::new(4, 32, [32, 32], 8, [3, 3]);
    let wide = Conv::new(4, 32, [32, 32], 16, [3, 3]);
    for (mut c, shared) in [(depthwise, false), (narrow, false), (wide, true)] {
        c.pad = [(1, 1), (1, 1)];
        let wgsl = c.check_kernels(None);
        let conv = wgsl
            .iter()
            .find(|w| w.contains("implicit-GEMM convolution"))
            .map(|w| w.lines().next().unwrap_or(""));
        assert_eq!(
            conv.is_some_and(|w| w.contains("share")),
            shared,
            "{c:?}: {conv:?}"
        );
    }
}

/// Whether the kernels are the CPU class's on an adapter with subgroups of 8 lanes (lavapipe),
/// where the shared-rows convolution applies; says why not otherwise. The class is the
/// adapter's unless `WGPU_HLO_ADAPTER_CLASS` says otherwise (CI runs these tests with the GPU
/// class on lavapipe too).
fn cpu_class_with_subgroups_of_8() -> bool {
    let d = common::device();
    let caps = d.caps();
    let cpu_class =
        wgpu_hlo::target::cpu_adapter_from_env().unwrap_or(d.info().device_type == "Cpu");
    let applies = cpu_class && caps.subgroup && caps.subgroup_size == 8;
    if !applies {
        eprintln!("skipped: not the CPU kernel class with subgroups of 8");
    }
    applies
}
