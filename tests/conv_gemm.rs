//! f32 convolutions through the implicit-GEMM emitter (`codegen::conv_kernel`), with scalar and
//! `vec4` inner loops: odd sizes, NHWC and NCHW layouts, strides, padding, lhs and rhs
//! dilation, window reversal, feature groups (depthwise included), batch groups, the input and
//! filter gradients JAX emits; whole and split over window chunks. Each must take the GEMM
//! path and match the host reference (f64 accumulation).

mod common;

use common::conv::Conv;

/// The kernel choices are environment variables read at compile time: one test at a time.
static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `c` under `max_loop` and checks that the implicit-GEMM kernel computed it (the
/// workgroup-tiled one when `tiled`).
fn gemm(c: &Conv, max_loop: Option<u64>, inner: &str) {
    let wgsl = c.check_kernels(max_loop);
    let marker = match inner {
        "tiled" => "workgroup tiles staged",
        "shared" => "share",
        _ => "per invocation",
    };
    assert!(
        wgsl.iter()
            .any(|w| w.contains("implicit-GEMM convolution") && w.contains(marker)),
        "{c:?} did not take the implicit-GEMM path ({marker})"
    );
}

fn cases() -> Vec<Conv> {
    let mut out = Vec::new();
    // Odd sizes, "same" padding, NHWC x HWIO.
    let mut c = Conv::new(3, 5, [7, 9], 6, [3, 3]);
    c.pad = [(1, 1), (1, 1)];
    out.push(c);
    // Features a multiple of 4 (vec4 reads), strided.
    let mut c = Conv::new(2, 12, [9, 8], 8, [3, 3]);
    c.stride = [2, 2];
    c.pad = [(1, 1), (0, 1)];
    out.push(c);
    // NCHW x OIHW, uneven strides and padding, a 3x2 window.
    let mut c = Conv::new(2, 8, [10, 11], 12, [3, 2]);
    c.layouts = ["bf01", "oi01", "bf01"];
    c.stride = [2, 3];
    c.pad = [(1, 0), (2, 1)];
    out.push(c);
    // rhs dilation and window reversal.
    let mut c = Conv::new(2, 4, [12, 10], 4, [3, 2]);
    c.rhs_dilate = [2, 3];
    c.reverse = [false, true];
    c.pad = [(2, 2), (0, 3)];
    out.push(c);
    // The input gradient of a stride-2 3x3 convolution: lhs dilation, padding, reversal,
    // the kernel's features swapped.
    let mut c = Conv::new(2, 8, [5, 6], 4, [3, 3]);
    c.lhs_dilate = [2, 2];
    c.pad = [(1, 2), (2, 2)];
    c.reverse = [true, true];
    c.layouts = ["b01f", "01oi", "b01f"];
    out.push(c);
    // The filter gradient of a 3x3 "same" convolution: batch and features swapped, the
    // output gradient as the kernel.
    let mut c = Conv::new(3, 6, [8, 8], 8, [8, 8]);
    c.pad = [(1, 1), (1, 1)];
    c.layouts = ["f01b", "i01o", "01bf"];
    out.push(c);
    // Feature groups, depthwise, batch groups.
    let mut c = Conv::new(2, 16, [6, 7], 8, [3, 3]);
    c.feature_groups = 2;
    c.pad = [(1, 1), (1, 1)];
    out.push(c);
    let mut c = Conv::new(2, 8, [9, 9], 8, [5, 5]);
    c.feature_groups = 8;
    c.pad = [(2, 2), (2, 2)];
    out.push(c);
    let mut c = Conv::new(4, 8, [6, 6], 8, [3, 3]);
    c.batch_groups = 2;
    out.push(c);
    // A 1x1 convolution (a matmul over pixels).
    out.push(Conv::new(2, 20, [5, 5], 7, [1, 1]));
    out
}

/// Every case with scalar and `vec4` inner loops, with a forced large block, with the
/// workgroup-tiled kernel of GPUs and with the shared-rows subgroup kernel of CPU adapters (one test: the choices are environment variables read at
/// compile time).
#[test]
fn implicit_gemm_convolutions() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let modes = [
        ("scalar", None),
        ("vec4", None),
        ("scalar", Some("32x32")),
        ("tiled", None),
        ("shared", None),
    ];
    // The shared-rows kernel broadcasts across subgroups of one size of 4, 8 or 16 lanes
    // (llvmpipe: 8); other adapters (NVIDIA: 32) never take it, even when forced.
    let caps = common::device().caps();
    let shared = caps.subgroup && matches!(caps.subgroup_size, 4 | 8 | 16);
    for (inner, block) in modes {
        if inner == "shared" && !shared {
            eprintln!(
                "shared-rows mode skipped: subgroup size {}",
                caps.subgroup_size
            );
            continue;
        }
        std::env::set_var("WGPU_HLO_CONV_INNER", inner);
        match block {
            Some(b) => std::env::set_var("WGPU_HLO_CONV_BLOCK", b),
            None => std::env::remove_var("WGPU_HLO_CONV_BLOCK"),
        }
        let tiled = inner == "tiled";
        for (i, c) in cases().iter().enumerate() {
            if block.is_some() && i % 3 != 0 {
                continue;
            }
            gemm(c, None, inner);
            // Split over window chunks (the input gradient, the filter gradient's window, a
            // 5x5 depthwise one); the tiled kernel needs a bound of at least one K step.
            if i == 4 || i == 5 || i == 7 {
                gemm(c, Some(if tiled { 64 } else { 16 }), inner);
            }
        }
    }
    // The tiled kernel with the dot's other workgroup tiles (`WGPU_HLO_GPU_TILE`; by default
    // only large convolutions take them), whole and split.
    std::env::set_var("WGPU_HLO_CONV_INNER", "tiled");
    std::env::remove_var("WGPU_HLO_CONV_BLOCK");
    for tile in ["128x128x8", "128x64x16", "64x128x8", "64x64x8"] {
        std::env::set_var("WGPU_HLO_GPU_TILE", tile);
        for (i, c) in cases().iter().enumerate() {
            gemm(c, None, "tiled");
            if i == 4 || i == 5 || i == 7 {
                gemm(c, Some(64), "tiled");
            }
        }
    }
    std::env::remove_var("WGPU_HLO_GPU_TILE");
    std::env::remove_var("WGPU_HLO_CONV_INNER");
}

/// Convolutions whose register-blocked kernel slides its rows' inputs along the last spatial
/// dimension (`Gemm::slides`): a `jnp.convolve`-like 1-D one over two batches (a block wraps
/// from one batch's line to the next), blocks that straddle lines, a reversed window, a
/// depthwise one split over window chunks (chunks start inside a line), vec4 reads. Each
/// must take the sliding kernel and match the host reference; with `WGPU_HLO_CONV_SLIDE=0`
/// none may. Lines of 56 outputs in blocks of 32 rows (most blocks straddle) may not.
#[test]
fn sliding_window_convolutions() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let mut cases = Vec::new();
    // Lines of 363 outputs, blocks of 4 rows: one block wraps from one batch's line into the
    // next.
    let mut c = Conv::new(2, 1, [1, 300], 1, [1, 64]);
    c.pad = [(0, 0), (63, 63)];
    cases.push((c, "scalar", "4x1", None));
    // Lines of 200, blocks of 3 rows: a block straddles every line's end.
    let mut c = Conv::new(2, 2, [3, 200], 3, [3, 3]);
    c.pad = [(1, 1), (1, 1)];
    cases.push((c, "scalar", "3x3", None));
    let mut c = Conv::new(2, 3, [5, 20], 2, [3, 5]);
    c.pad = [(1, 1), (2, 2)];
    cases.push((c, "scalar", "4x2", None));
    let mut c = Conv::new(2, 2, [4, 30], 3, [2, 4]);
    c.reverse = [false, true];
    c.pad = [(1, 0), (0, 3)];
    c.stride = [2, 1];
    cases.push((c, "scalar", "6x3", None));
    let mut c = Conv::new(2, 8, [9, 9], 8, [5, 5]);
    c.feature_groups = 8;
    c.pad = [(2, 2), (2, 2)];
    cases.push((c.clone(), "scalar", "9x1", Some(16)));
    cases.push((c, "scalar", "3x8", None));
    let mut c = Conv::new(2, 8, [6, 16], 8, [3, 3]);
    c.pad = [(1, 1), (1, 1)];
    cases.push((c, "vec4", "4x4", None));
    for slide in [true, false] {
        if slide {
            std::env::remove_var("WGPU_HLO_CONV_SLIDE");
        } else {
            std::env::set_var("WGPU_HLO_CONV_SLIDE", "0");
        }
        for (c, inner, block, max_loop) in &cases {
            std::env::set_var("WGPU_HLO_CONV_INNER", inner);
            std::env::set_var("WGPU_HLO_CONV_BLOCK", block);
            let wgsl = c.check_kernels(*max_loop);
            let slid = wgsl.iter().any(|w| w.contains("let straight"));
            assert_eq!(slid, slide, "{c:?} ({inner}, {block}): sliding {slid}");
        }
    }
    std::env::remove_var("WGPU_HLO_CONV_SLIDE");
    // A depthwise convolution over lines of 14 (no block of 4, 8 or 16 rows keeps to one
    // line) takes blocks of one line on CPU adapters.
    let d = common::device();
    if wgpu_hlo::target::cpu_adapter_from_env().unwrap_or(d.info().device_type == "Cpu") {
        let mut c = Conv::new(16, 8, [32, 14], 8, [3, 3]);
        c.feature_groups = 8;
        c.pad = [(1, 1), (1, 1)];
        std::env::set_var("WGPU_HLO_CONV_INNER", "scalar");
        std::env::remove_var("WGPU_HLO_CONV_BLOCK");
        let wgsl = c.check_kernels(None);
        assert!(
            wgsl.iter()
                .any(|w| w.contains("14x1 per invocation") && w.contains("let straight")),
            "{c:?} did not slide in blocks of one line"
        );
    }
    let mut c = Conv::new(2, 4, [4, 56], 4, [3, 3]);
    c.pad = [(1, 1), (1, 1)];
    std::env::set_var("WGPU_HLO_CONV_INNER", "scalar");
    std::env::set_var("WGPU_HLO_CONV_BLOCK", "32x4");
    let wgsl = c.check_kernels(None);
    assert!(
        !wgsl.iter().any(|w| w.contains("let straight")),
        "{c:?} slid"
    );
    std::env::remove_var("WGPU_HLO_CONV_INNER");
    std::env::remove_var("WGPU_HLO_CONV_BLOCK");
}
