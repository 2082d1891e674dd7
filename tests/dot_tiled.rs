//! The tiled `dot_general` kernel against a host reference: operand layouts with batch, free
//! and contracting dimensions in several orders, sizes that are not multiples of the tile.

use std::sync::{Arc, OnceLock};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::Device;

fn device() -> Arc<Device> {
    static DEV: OnceLock<Arc<Device>> = OnceLock::new();
    DEV.get_or_init(|| Device::open().expect("a wgpu adapter"))
        .clone()
}

/// Deterministic pseudo-random values in [-1, 1).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn shape_str(s: &[usize], ty: &str) -> String {
    s.iter().map(|d| format!("{d}x")).collect::<String>() + ty
}

/// The dot's dimensions: free dimensions of each operand and the output shape.
struct Dims {
    lf: Vec<usize>,
    rf: Vec<usize>,
    os: Vec<usize>,
}

/// The program of one `dot_general` of element type `ty` with the given dimension numbers.
fn dot_program(
    (ls, rs): (&[usize], &[usize]),
    (lb, rb): (&[usize], &[usize]),
    (lc, rc): (&[usize], &[usize]),
    ty: &str,
) -> (String, Dims) {
    let free = |s: &[usize], b: &[usize], c: &[usize]| -> Vec<usize> {
        (0..s.len())
            .filter(|d| !b.contains(d) && !c.contains(d))
            .collect()
    };
    let (lf, rf) = (free(ls, lb, lc), free(rs, rb, rc));
    let mut os: Vec<usize> = lb.iter().map(|&d| ls[d]).collect();
    os.extend(lf.iter().map(|&d| ls[d]));
    os.extend(rf.iter().map(|&d| rs[d]));
    let list = |v: &[usize]| {
        v.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (l, r, o) = (shape_str(ls, ty), shape_str(rs, ty), shape_str(&os, ty));
    let src = format!(
        "func.func @main(%a: tensor<{l}>, %b: tensor<{r}>) -> tensor<{o}> {{\n  %r = stablehlo.dot_general %a, %b, batching_dims = [{}] x [{}], contracting_dims = [{}] x [{}] : (tensor<{l}>, tensor<{r}>) -> tensor<{o}>\n  return %r : tensor<{o}>\n}}\n",
        list(lb), list(rb), list(lc), list(rc),
    );
    (src, Dims { lf, rf, os })
}

/// Runs `dot_general` with the given dimension numbers and checks every element against a
/// host computation in f64.
fn check(ls: &[usize], rs: &[usize], lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]) {
    let (src, Dims { lf, rf, os }) = dot_program((ls, rs), (lb, rb), (lc, rc), "f32");
    let dev = device();
    let dump = std::env::temp_dir().join(format!("wgpu-hlo-dot-{}", std::process::id()));
    let exe = compile(
        &dev,
        src.as_bytes(),
        &CompileOptions {
            dump_dir: Some(dump.clone()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{src}"));
    // The dump only exercises writing it; nothing reads it back.
    let _ = std::fs::remove_dir_all(&dump);
    let mode = std::env::var("WGPU_HLO_DOT").unwrap_or_default();
    let marker = if mode == "direct" {
        "register-blocked dot_general"
    } else {
        "tiled dot_general"
    };
    assert!(
        exe.kernels().iter().any(|k| k.wgsl.contains(marker)),
        "the {mode} kernel was not used for\n{src}"
    );
    // On GPUs a long contracting dimension over few 64x64 tiles is split into chunks summed
    // by a fold (`dot_kernel::split_tiles`).
    let k_len: usize = lc.iter().map(|&d| ls[d]).product();
    let batch: usize = lb.iter().map(|&d| ls[d]).product();
    let tiles = batch
        * lf.iter().map(|&d| ls[d]).product::<usize>().div_ceil(64)
        * rf.iter().map(|&d| rs[d]).product::<usize>().div_ceil(64);
    if mode == "tiled"
        && !wgpu_hlo::compile::target(&dev).cpu_adapter
        && k_len >= 256
        && 2 * tiles <= 128
    {
        assert!(
            exe.kernels()
                .iter()
                .any(|k| k.wgsl.contains("partial sums over contracting chunks")),
            "no split-K for\n{src}"
        );
    }
    let nl: usize = ls.iter().product();
    let nr: usize = rs.iter().product();
    let (a, b) = (data(nl, 1), data(nr, 2));
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let ta = TensorType::new(ls.iter().map(|&d| d as i64).collect(), ElementType::F32);
    let tb = TensorType::new(rs.iter().map(|&d| d as i64).collect(), ElementType::F32);
    let bufs = [
        dev.upload(&ta, &bytes(&a)).unwrap(),
        dev.upload(&tb, &bytes(&b)).unwrap(),
    ];
    let out = exe.execute_blocking(&bufs).unwrap();
    let got: Vec<f32> = out[0]
        .read_to_host_blocking()
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut want = vec![0f64; got.len()];
    for_each_product(
        (ls, rs, &os),
        (lb, rb),
        (&lf, &rf),
        (lc, rc),
        |o, ao, bo| want[o] += a[ao] as f64 * b[bo] as f64,
    );
    let nk: usize = lc.iter().map(|&d| ls[d]).product();
    for (o, (g, want)) in got.iter().zip(&want).enumerate() {
        assert!(
            (*g as f64 - want).abs() <= 1e-4 * (nk as f64).sqrt() + 1e-5 * want.abs(),
            "element {o}: got {g}, want {want}\n{src}"
        );
    }
}

/// Calls `visit(o, ao, bo)` for every output element `o` of the dot of operands of shapes
/// `ls`, `rs` (output shape `os`) and every contracting step, with the operands' element
/// offsets `ao`, `bo` of that product.
fn for_each_product(
    (ls, rs, os): (&[usize], &[usize], &[usize]),
    (lb, rb): (&[usize], &[usize]),
    (lf, rf): (&[usize], &[usize]),
    (lc, rc): (&[usize], &[usize]),
    mut visit: impl FnMut(usize, usize, usize),
) {
    let strides = |s: &[usize]| -> Vec<usize> {
        let mut st = vec![1; s.len()];
        for i in (0..s.len().saturating_sub(1)).rev() {
            st[i] = st[i + 1] * s[i + 1];
        }
        st
    };
    let (sl, sr, so) = (strides(ls), strides(rs), strides(os));
    let kdims: Vec<usize> = lc.iter().map(|&d| ls[d]).collect();
    let nk: usize = kdims.iter().product();
    for o in 0..os.iter().product() {
        let oi: Vec<usize> = (0..os.len()).map(|d| o / so[d] % os[d]).collect();
        let mut li = vec![0; ls.len()];
        let mut ri = vec![0; rs.len()];
        for (j, (&x, &y)) in lb.iter().zip(rb).enumerate() {
            li[x] = oi[j];
            ri[y] = oi[j];
        }
        for (j, &x) in lf.iter().enumerate() {
            li[x] = oi[lb.len() + j];
        }
        for (j, &y) in rf.iter().enumerate() {
            ri[y] = oi[lb.len() + lf.len() + j];
        }
        for kk in 0..nk {
            let mut rem = kk;
            for (j, (&x, &y)) in lc.iter().zip(rc).enumerate().rev() {
                li[x] = rem % kdims[j];
                ri[y] = rem % kdims[j];
                rem /= kdims[j];
            }
            let ao: usize = li.iter().zip(&sl).map(|(i, s)| i * s).sum();
            let bo: usize = ri.iter().zip(&sr).map(|(i, s)| i * s).sum();
            visit(o, ao, bo);
        }
    }
}

/// Runs an integer (`ty`: i32 or ui32) `dot_general` on words spread over the whole 32-bit
/// range, so that products and sums overflow, and checks that every element equals the host's
/// wrapping sum bit for bit (i32 and u32 wrap alike: two's complement). Returns the name of
/// the kind of kernel that computed it.
fn check_int(
    ty: &str,
    (ls, rs): (&[usize], &[usize]),
    (lb, rb): (&[usize], &[usize]),
    (lc, rc): (&[usize], &[usize]),
) -> &'static str {
    let (src, Dims { lf, rf, os }) = dot_program((ls, rs), (lb, rb), (lc, rc), ty);
    let dev = device();
    let exe = compile(&dev, src.as_bytes(), &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
    let kind = ["vector dot_general", "tiled dot_general"]
        .into_iter()
        .find(|m| exe.kernels().iter().any(|k| k.wgsl.contains(m)))
        .unwrap_or("another kernel");
    let words = |n: usize, seed: u64| -> Vec<u32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Every eighth word small, so that some sums stay in range too.
                if i % 8 == 0 {
                    (x % 7) as u32
                } else {
                    (x >> 32) as u32
                }
            })
            .collect()
    };
    let (a, b) = (words(ls.iter().product(), 3), words(rs.iter().product(), 4));
    let dtype = if ty == "i32" {
        ElementType::I32
    } else {
        ElementType::U32
    };
    let bytes = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let ta = TensorType::new(ls.iter().map(|&d| d as i64).collect(), dtype);
    let tb = TensorType::new(rs.iter().map(|&d| d as i64).collect(), dtype);
    let bufs = [
        dev.upload(&ta, &bytes(&a)).unwrap(),
        dev.upload(&tb, &bytes(&b)).unwrap(),
    ];
    let out = exe.execute_blocking(&bufs).unwrap();
    let got: Vec<u32> = out[0]
        .read_to_host_blocking()
        .unwrap()
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut want = vec![0u32; got.len()];
    for_each_product(
        (ls, rs, &os),
        (lb, rb),
        (&lf, &rf),
        (lc, rc),
        |o, ao, bo| want[o] = want[o].wrapping_add(a[ao].wrapping_mul(b[bo])),
    );
    for (o, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "element {o} ({kind})\n{src}");
    }
    kind
}

/// The kernel choices are environment variables read at compile time: one test at a time.
static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every case with the tiled and the register-blocked kernel (one test: the kernel choice is
/// an environment variable read at compile time).
#[test]
fn tiled_and_register_blocked_kernels() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    for mode in ["tiled", "direct"] {
        std::env::set_var("WGPU_HLO_DOT", mode);
        // Plain matmul with ragged edges.
        check(&[70, 33], &[33, 90], &[], &[], &[1], &[0]);
        // Transposed operands: lhs [K, M] and rhs [N, K].
        check(&[40, 65], &[66, 40], &[], &[], &[0], &[1]);
        // Batched, with the batch dimension in the middle.
        check(&[40, 3, 30], &[30, 3, 50], &[1], &[1], &[2], &[0]);
        // Several free and contracting dimensions.
        check(&[4, 9, 5, 6], &[6, 5, 70], &[], &[], &[2, 3], &[1, 0]);
        // Long contracting dimensions over few tiles (split-K on GPUs): a dense layer's
        // 32x128 from 3136, its transposed weights, a batched one and two contracting dims.
        check(&[32, 3136], &[3136, 128], &[], &[], &[1], &[0]);
        check(&[32, 3136], &[128, 3136], &[], &[], &[1], &[1]);
        check(&[3, 70, 300], &[3, 300, 50], &[0], &[0], &[2], &[1]);
        check(&[4, 9, 16, 20], &[20, 16, 70], &[], &[], &[2, 3], &[1, 0]);
    }
    std::env::remove_var("WGPU_HLO_DOT");
}

/// The tiled kernel with every workgroup tile (`WGPU_HLO_GPU_TILE`, read at compile time):
/// ragged edges in every direction, contracting lengths off the staging step, transposed
/// operands, batches, and split-K.
#[test]
fn every_gpu_tile() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("WGPU_HLO_DOT", "tiled");
    for tile in [
        "64x64x16",
        "64x64x8",
        "128x64x8",
        "64x128x16",
        "128x128x8",
        "128x128x16",
    ] {
        std::env::set_var("WGPU_HLO_GPU_TILE", tile);
        check(&[70, 33], &[33, 90], &[], &[], &[1], &[0]);
        check(&[200, 37], &[37, 131], &[], &[], &[1], &[0]);
        check(&[37, 200], &[131, 37], &[], &[], &[0], &[1]);
        check(&[40, 3, 30], &[30, 3, 150], &[1], &[1], &[2], &[0]);
        check(&[4, 9, 5, 6], &[6, 5, 70], &[], &[], &[2, 3], &[1, 0]);
        check(&[32, 3136], &[128, 3136], &[], &[], &[1], &[1]);
        check(&[3, 130, 300], &[3, 300, 50], &[0], &[0], &[2], &[1]);
    }
    std::env::remove_var("WGPU_HLO_GPU_TILE");
    // The default choice for a large dot: 128x128 tiles.
    check(&[2048, 24], &[24, 2048], &[], &[], &[1], &[0]);
    std::env::remove_var("WGPU_HLO_DOT");
}

/// Integer products (i32, u32) on the vector kernel (the CPU adapters' choice), the tiled
/// kernel and by default, bit for bit against the host's wrapping sums. Before, every integer
/// dot ran one invocation per result over k (lavapipe: 404 ms for a 512² i32 matmul).
#[test]
fn integer_dots_take_the_register_blocked_and_tiled_kernels() {
    let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
    type Case = (
        (&'static [usize], &'static [usize]),
        (&'static [usize], &'static [usize]),
        (&'static [usize], &'static [usize]),
    );
    let cases: [Case; 5] = [
        // Plain matmul with ragged edges.
        ((&[70, 33], &[33, 90]), (&[], &[]), (&[1], &[0])),
        // Transposed operands: lhs [K, M] and rhs [N, K].
        ((&[40, 65], &[66, 40]), (&[], &[]), (&[0], &[1])),
        // Batched, with the batch dimension in the middle.
        ((&[40, 3, 32], &[32, 3, 52]), (&[1], &[1]), (&[2], &[0])),
        // Several free and contracting dimensions.
        ((&[4, 9, 5, 6], &[6, 5, 70]), (&[], &[]), (&[2, 3], &[1, 0])),
        // Square, vec4 reads along both free dimensions.
        ((&[128, 128], &[128, 128]), (&[], &[]), (&[1], &[0])),
    ];
    for (mode, want) in [
        ("vec", "vector dot_general"),
        ("tiled", "tiled dot_general"),
        ("", ""),
    ] {
        std::env::set_var("WGPU_HLO_DOT", mode);
        for ty in ["i32", "ui32"] {
            for (shapes, batch, contract) in cases {
                let kind = check_int(ty, shapes, batch, contract);
                if mode.is_empty() {
                    assert_ne!(kind, "another kernel", "{ty} {shapes:?}");
                } else {
                    assert_eq!(kind, want, "{ty} {shapes:?}");
                }
            }
        }
    }
    std::env::remove_var("WGPU_HLO_DOT");
}
