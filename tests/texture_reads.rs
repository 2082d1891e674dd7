//! Inputs read through textures (`codegen::texture_reads`, CPU adapters): values across the
//! texture's row boundary and in a partial last row, scalar (R32) and vec4 (RGBA32) texels,
//! f32 and i32, dots, reversed reads and row reductions, each against a host computation; and one
//! executable called from several threads at once with different inputs (its textures are
//! shared by every execution, so a copy that overtook another execution's reads would show as
//! a wrong number); and a serialized executable that reads through textures, loaded back. On
//! adapters that are not CPUs the kernels keep their storage reads and the same checks run
//! on them.

mod common;

use std::sync::Arc;

use common::{data, device, f32s, upload_f32};
use wgpu_hlo::codegen::texture_reads::TEXEL_ROW;
use wgpu_hlo::compile::{compile, deserialize, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::executable::Executable;

/// Elementwise kernels read each input element once and take no textures by default (see
/// `compile::lower`'s `READ_ONCE_TEXTURE_WORDS`); these tests give them textures from
/// 65536 words, as before 2026-11-29, to exercise the reads.
fn options() -> CompileOptions {
    CompileOptions {
        read_once_texture_words: Some(1 << 16),
        ..Default::default()
    }
}

fn exe(src: &str) -> Arc<Executable> {
    compile(&device(), src.as_bytes(), &options()).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

/// Texture reads are on: a CPU adapter, not switched off.
fn textures_on() -> bool {
    device().info().device_type == "Cpu"
        && std::env::var("WGPU_HLO_TEXTURE_READS").map_or(true, |v| v.trim() != "0")
        && std::env::var("WGPU_HLO_ADAPTER_CLASS").map_or(true, |v| v.trim() != "gpu")
}

/// On a CPU adapter with texture reads on, some kernel of `exe` reads through a texture.
fn check_textures(exe: &Executable) {
    if textures_on() {
        assert!(
            exe.kernels()
                .iter()
                .any(|k| k.wgsl.contains("texture_2d<u32>")),
            "no kernel reads through a texture"
        );
    }
}

/// Inputs that neighbouring lanes stream through in groups of four (`QUAD_STREAM_MARK`) are
/// read as vec4s from their buffers, not through textures: texture reads are on and the host
/// is not AMD's (`target::stream_reads_as_vec4`).
fn streams_as_vec4() -> bool {
    textures_on() && wgpu_hlo::target::stream_reads_as_vec4()
}

/// On a CPU adapter with texture reads on, some kernel of `exe` reads an input as vec4s from its
/// buffer (groups of four that neighbouring lanes stream through, `QUAD_STREAM_MARK`) and none
/// through a texture; on AMD hosts, where such inputs take textures, some kernel reads through
/// a texture.
fn check_vec4_reads(exe: &Executable) {
    if !streams_as_vec4() {
        check_textures(exe);
    } else {
        assert!(
            exe.kernels()
                .iter()
                .any(|k| k.wgsl.contains("(read as vec4s)")),
            "no kernel reads an input as vec4s"
        );
        assert!(
            exe.kernels()
                .iter()
                .all(|k| !k.wgsl.contains("texture_2d<u32>")),
            "a kernel reads through a texture"
        );
    }
}

/// `got` is `a * b + c` rounded after each operation, or rounded once (a fused multiply-add:
/// NVIDIA's Vulkan compiler contracts a multiply and an add into one, as XLA's GPU backends do).
/// Either exactly: a value read from the wrong place would match neither.
fn is_mul_add(got: f32, a: f32, b: f32, c: f32) -> bool {
    got.to_bits() == (a * b + c).to_bits() || got.to_bits() == a.mul_add(b, c).to_bits()
}

#[test]
fn elementwise_over_row_boundaries() {
    // A texture row holds TEXEL_ROW texels of four words. Four full rows and a bit, five rows
    // and a partial sixth, through textures (an elementwise kernel reads each element once,
    // so its inputs take textures from 65536 words on); a multiple of 4 elements (on CPU
    // adapters computed four per invocation, read and stored as vec4s).
    let row = 4 * TEXEL_ROW as usize;
    for n in [4 * row + 1, 5 * row + 17, 5 * row + 20] {
        let src = format!(
            "func.func @main(%x: tensor<{n}xf32>, %y: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n  %m = stablehlo.multiply %x, %y : tensor<{n}xf32>\n  %r = stablehlo.add %m, %x : tensor<{n}xf32>\n  return %r : tensor<{n}xf32>\n}}\n"
        );
        let e = exe(&src);
        if n % 4 == 0 {
            check_vec4_reads(&e);
        } else {
            check_textures(&e);
        }
        let (x, y) = (data(n, 1), data(n, 2));
        let out = e
            .execute_blocking(&[upload_f32(&[n], &x), upload_f32(&[n], &y)])
            .unwrap();
        let got = f32s(&out[0].read_to_host_blocking().unwrap());
        for i in 0..n {
            assert!(
                is_mul_add(got[i], x[i], y[i], x[i]),
                "n {n}, element {i}: got {}, want {}",
                got[i],
                x[i] * y[i] + x[i]
            );
        }
    }
}

#[test]
fn broadcast_inputs_read_through_textures() {
    // An outer product plus a scalar: 2^16 invocations read two 512-word vectors and one
    // word, each under the texture threshold, and take textures on CPU adapters all the same
    // (`compile::lower`'s `broadcast_inputs`); rows of 510 elements, so no row starts at a
    // quad boundary of the other vector and no three rows alike.
    let (m, n) = (514, 510);
    let src = format!(
        "func.func @main(%a: tensor<{m}xf32>, %b: tensor<{n}xf32>, %c: tensor<f32>) -> tensor<{m}x{n}xf32> {{\n  %0 = stablehlo.broadcast_in_dim %a, dims = [0] : (tensor<{m}xf32>) -> tensor<{m}x{n}xf32>\n  %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<{n}xf32>) -> tensor<{m}x{n}xf32>\n  %2 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{m}x{n}xf32>\n  %3 = stablehlo.multiply %0, %1 : tensor<{m}x{n}xf32>\n  %4 = stablehlo.add %3, %2 : tensor<{m}x{n}xf32>\n  return %4 : tensor<{m}x{n}xf32>\n}}\n"
    );
    let e = exe(&src);
    if textures_on() {
        let kernels = e.kernels();
        assert_eq!(kernels.len(), 1);
        assert_eq!(
            kernels[0].texture_inputs.iter().flatten().count(),
            3,
            "{}",
            kernels[0].wgsl
        );
    }
    let (a, b, c) = (data(m, 11), data(n, 12), data(1, 13));
    let out = e
        .execute_blocking(&[
            upload_f32(&[m], &a),
            upload_f32(&[n], &b),
            upload_f32(&[], &c),
        ])
        .unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    for i in 0..m {
        for j in 0..n {
            let g = got[i * n + j];
            assert!(
                is_mul_add(g, a[i], b[j], c[0]),
                "element ({i}, {j}): got {g}, want {}",
                a[i] * b[j] + c[0]
            );
        }
    }
}

#[test]
fn broadcast_inputs_of_reduction_stages_read_through_textures() {
    // A batch norm's variance, sum((x - mean)^2) over 65536 rows of 32: its partial sums run
    // few invocations, each over many rows, reading the 32-word mean at every row; the mean
    // takes a texture on CPU adapters (`broadcast_inputs` counts loop iterations).
    let (r, c) = (65536usize, 32usize);
    let src = format!(
        "func.func @main(%x: tensor<{r}x{c}xf32>, %m: tensor<{c}xf32>) -> tensor<{c}xf32> {{\n  %b = stablehlo.broadcast_in_dim %m, dims = [1] : (tensor<{c}xf32>) -> tensor<{r}x{c}xf32>\n  %d = stablehlo.subtract %x, %b : tensor<{r}x{c}xf32>\n  %s = stablehlo.multiply %d, %d : tensor<{r}x{c}xf32>\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %v = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{r}x{c}xf32>, tensor<f32>) -> tensor<{c}xf32>\n  return %v : tensor<{c}xf32>\n}}\n"
    );
    let e = exe(&src);
    if textures_on() {
        // Or by vec4s: the partial sums' kernel reads the mean by groups of four (row kernels
        // read inputs of any shape by groups since 2026-12-07), which stay vec4 loads where
        // streams are (Intel hosts) when every eligible input takes a texture
        // (`WGPU_HLO_TEXTURE_READS=all`); by default the mean still takes a texture.
        let textured = e.kernels().iter().any(|k| {
            k.inputs
                .iter()
                .zip(&k.texture_inputs)
                .any(|(b, t)| t.is_some() && b.ty.num_elements() == c)
        });
        let grouped = e.kernels().iter().any(|k| {
            k.wgsl
                .lines()
                .any(|l| l.contains(&format!("tensor<{c}xf32> (read as vec4s)")))
        });
        assert!(textured || grouped, "the mean is read from its buffer");
        if std::env::var("WGPU_HLO_TEXTURE_READS").is_err() {
            assert!(textured, "the mean is read from its buffer");
        }
    }
    let (x, m) = (data(r * c, 14), data(c, 15));
    let out = e
        .execute_blocking(&[upload_f32(&[r, c], &x), upload_f32(&[c], &m)])
        .unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    for j in 0..c {
        let want: f64 = (0..r)
            .map(|i| {
                let d = f64::from(x[i * c + j]) - f64::from(m[j]);
                d * d
            })
            .sum();
        assert!(
            (f64::from(got[j]) - want).abs() <= 1e-4 * want,
            "column {j}: got {}, want {want}",
            got[j]
        );
    }
}

#[test]
fn integers_at_computed_positions() {
    // An i32 tensor of 70000 entries read reversed (a texture read at computed positions)
    // and multiplied, an i32 elementwise kernel. Gathers read their tables from the buffer
    // (data-dependent positions, see `compile::lower`'s `TexturePolicy`).
    let n = 70000usize;
    let src = format!(
        "func.func @main(%t: tensor<{n}xi32>) -> tensor<{n}xi32> {{\n  %v = stablehlo.reverse %t, dims = [0] : tensor<{n}xi32>\n  %c = stablehlo.constant dense<3> : tensor<{n}xi32>\n  %r = stablehlo.multiply %v, %c : tensor<{n}xi32>\n  return %r : tensor<{n}xi32>\n}}\n"
    );
    let e = exe(&src);
    check_textures(&e);
    let table: Vec<i32> = (0..n as i32).map(|v| v * 7 - 1000).collect();
    let bytes: Vec<u8> = table.iter().flat_map(|x| x.to_le_bytes()).collect();
    let up = device()
        .upload(&TensorType::new(vec![n as i64], ElementType::I32), &bytes)
        .unwrap();
    let out = e.execute_blocking(&[up]).unwrap();
    let got: Vec<i32> = out[0]
        .read_to_host_blocking()
        .unwrap()
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for k in 0..n {
        assert_eq!(got[k], table[n - 1 - k] * 3, "element {k}");
    }
}

/// `[m, k] x [k, n]` against the host in f64.
fn dot_src(m: usize, k: usize, n: usize) -> String {
    format!(
        "func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n  %r = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n  return %r : tensor<{m}x{n}xf32>\n}}\n"
    )
}

fn dot_host(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk] as f64;
            for j in 0..n {
                out[i * n + j] += x * b[kk * n + j] as f64;
            }
        }
    }
    out
}

fn check_dot(got: &[f32], want: &[f64], k: usize, what: &str) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 2e-6 * k as f64 + 1e-5,
            "{what}, element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn dots_and_row_sums() {
    let (m, k, n) = (128, 520, 264);
    let e = exe(&dot_src(m, k, n));
    check_textures(&e);
    let (a, b) = (data(m * k, 3), data(k * n, 4));
    let out = e
        .execute_blocking(&[upload_f32(&[m, k], &a), upload_f32(&[k, n], &b)])
        .unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    check_dot(&got, &dot_host(&a, &b, m, k, n), k, "dot");

    let (r, c) = (300, 1000);
    let src = format!(
        "func.func @main(%x: tensor<{r}x{c}xf32>) -> tensor<{r}xf32> {{\n  %z = stablehlo.constant dense<0.0> : tensor<f32>\n  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<{r}x{c}xf32>, tensor<f32>) -> tensor<{r}xf32>\n  return %s : tensor<{r}xf32>\n}}\n"
    );
    let e = exe(&src);
    // Rows of a multiple of 4: each lane streams through groups of four of its row.
    check_vec4_reads(&e);
    let x = data(r * c, 5);
    let out = e.execute_blocking(&[upload_f32(&[r, c], &x)]).unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    for i in 0..r {
        let want: f64 = x[i * c..(i + 1) * c].iter().map(|&v| v as f64).sum();
        assert!(
            (got[i] as f64 - want).abs() < 1e-3,
            "row {i}: {} vs {want}",
            got[i]
        );
    }
}

#[test]
fn operands_past_the_binding_limit_read_through_textures() {
    // A dot whose operands pass the binding limit (8 KiB at a 4 KiB limit here; a 6000 x 6000
    // f32 matrix is 144 MB against lavapipe's 128 MiB) reads them through textures on CPU
    // adapters instead of in parts: lavapipe on an AMD host, 6000^3 80 s -> 17-20 s.
    let (m, k, n) = (40, 52, 44);
    let options = CompileOptions {
        max_binding_bytes: Some(4096),
        ..options()
    };
    let src = dot_src(m, k, n);
    let e = compile(&device(), src.as_bytes(), &options).unwrap_or_else(|e| panic!("{e}"));
    if textures_on() {
        let kernels = e.kernels();
        let dot = kernels
            .iter()
            .find(|k| k.wgsl.contains("dot_general"))
            .expect("a dot kernel");
        assert!(
            dot.texture_inputs.iter().flatten().count() == dot.inputs.len()
                && dot
                    .parted
                    .iter()
                    .all(|p| p.binding as usize >= dot.inputs.len()),
            "{}",
            dot.wgsl
        );
    }
    let (a, b) = (data(m * k, 6), data(k * n, 7));
    let out = e
        .execute_blocking(&[upload_f32(&[m, k], &a), upload_f32(&[k, n], &b)])
        .unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    check_dot(&got, &dot_host(&a, &b, m, k, n), k, "dot");
}

#[test]
fn threads_share_an_executable_with_textures() {
    // 2^22 multiply-adds: products below it read their operands from their buffers.
    let (m, k, n) = (128, 256, 128);
    let e = exe(&dot_src(m, k, n));
    check_textures(&e);
    let threads = 6;
    let calls = 15;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let e = e.clone();
            std::thread::spawn(move || {
                let (a, b) = (data(m * k, 100 + t), data(k * n, 200 + t));
                let want = dot_host(&a, &b, m, k, n);
                for c in 0..calls {
                    let out = e
                        .execute_blocking(&[upload_f32(&[m, k], &a), upload_f32(&[k, n], &b)])
                        .unwrap();
                    let got = f32s(&out[0].read_to_host_blocking().unwrap());
                    check_dot(&got, &want, k, &format!("thread {t}, call {c}"));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread's results");
    }
}

#[test]
fn serialized_executables_keep_their_texture_reads() {
    let (m, k, n) = (128, 520, 264);
    let e = exe(&dot_src(m, k, n));
    let blob = e.serialize();
    let back = deserialize(&device(), &blob, &CompileOptions::default()).unwrap();
    check_textures(&back);
    assert_eq!(back.serialize(), blob);
    let (a, b) = (data(m * k, 7), data(k * n, 8));
    let out = back
        .execute_blocking(&[upload_f32(&[m, k], &a), upload_f32(&[k, n], &b)])
        .unwrap();
    let got = f32s(&out[0].read_to_host_blocking().unwrap());
    check_dot(&got, &dot_host(&a, &b, m, k, n), k, "deserialized dot");
}

#[test]
fn executables_take_turns_in_shared_textures() {
    // Textures are shared device-wide by extent and slot: a chain of two 256x256 dots (two
    // kernels, each reading two 65536-word inputs) and an elementwise kernel over 65536
    // elements (its `x` read reversed as well: through a texture; its `y` streamed as vec4s)
    // all read through the same two textures. On a device of its own so the texture
    // count is this test's; threads run both executables at once, each checked exactly.
    let dev = wgpu_hlo::runtime::Device::open().expect("a wgpu adapter");
    let n = 256usize;
    let chain = format!(
        "func.func @main(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>, %c: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{\n  %s = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>\n  %r = stablehlo.dot_general %s, %c, contracting_dims = [1] x [0] : (tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>\n  return %r : tensor<{n}x{n}xf32>\n}}\n"
    );
    let len = n * n;
    let ew = format!(
        "func.func @main(%x: tensor<{len}xf32>, %y: tensor<{len}xf32>) -> tensor<{len}xf32> {{\n  %v = stablehlo.reverse %x, dims = [0] : tensor<{len}xf32>\n  %m = stablehlo.multiply %v, %y : tensor<{len}xf32>\n  %r = stablehlo.subtract %m, %x : tensor<{len}xf32>\n  return %r : tensor<{len}xf32>\n}}\n"
    );
    let opts = options();
    let a_exe = compile(&dev, chain.as_bytes(), &opts).unwrap();
    let b_exe = compile(&dev, ew.as_bytes(), &opts).unwrap();
    check_textures(&a_exe);
    check_textures(&b_exe);
    if streams_as_vec4() {
        assert!(
            b_exe.kernels()[0].wgsl.contains("(read as vec4s)"),
            "the elementwise kernel streams y as vec4s"
        );
    }
    // Three kernels reading two inputs of 256 KiB each: two textures, not six.
    let input_bytes = (len as u64) * 4;
    let want = if textures_on() { 2 * input_bytes } else { 0 };
    assert_eq!(dev.memory_stats().texture_bytes, want);
    if textures_on() {
        // (GPU adapters may split each dot over contracting chunks and fold them: 4 kernels
        // on an H200.) Each dot reads its left operand along k, which CPU adapters write
        // transposed first from 256 rows of the other operand (`passes::dot_layout`): two
        // copies besides.
        let dots = a_exe
            .kernels()
            .iter()
            .filter(|k| {
                k.wgsl
                    .lines()
                    .next()
                    .is_some_and(|l| l.contains("dot_general"))
            })
            .count();
        assert_eq!(dots, 2, "the chain runs as two dot kernels");
        assert!(a_exe.kernels().len() <= 4);
    }
    let d = dev.clone();
    let up = move |shape: Vec<i64>, v: &[f32]| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        d.upload(&TensorType::new(shape, ElementType::F32), &bytes)
            .unwrap()
    };
    let handles: Vec<_> = (0..6u64)
        .map(|t| {
            let (a_exe, b_exe, up) = (a_exe.clone(), b_exe.clone(), up.clone());
            std::thread::spawn(move || {
                let (x, y, z) = (data(len, 300 + t), data(len, 400 + t), data(len, 500 + t));
                let s: Vec<f32> = dot_host(&x, &y, n, n, n)
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                let want_chain = dot_host(&s, &z, n, n, n);
                let sq = vec![n as i64, n as i64];
                for c in 0..8 {
                    if (t + c) % 2 == 0 {
                        let out = a_exe
                            .execute_blocking(&[
                                up(sq.clone(), &x),
                                up(sq.clone(), &y),
                                up(sq.clone(), &z),
                            ])
                            .unwrap();
                        let got = f32s(&out[0].read_to_host_blocking().unwrap());
                        for (i, (&g, &w)) in got.iter().zip(&want_chain).enumerate() {
                            assert!(
                                (g as f64 - w).abs() <= 1e-3 * (1.0 + w.abs()),
                                "thread {t}, call {c}, chain element {i}: got {g}, want {w}"
                            );
                        }
                    } else {
                        let out = b_exe
                            .execute_blocking(&[up(vec![len as i64], &x), up(vec![len as i64], &y)])
                            .unwrap();
                        let got = f32s(&out[0].read_to_host_blocking().unwrap());
                        for i in 0..len {
                            let (a, b) = (x[len - 1 - i], y[i]);
                            assert!(
                                is_mul_add(got[i], a, b, -x[i]),
                                "thread {t}, call {c}, element {i}: got {}, want {}",
                                got[i],
                                a * b - x[i]
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread's results");
    }
}
