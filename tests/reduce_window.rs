//! `reduce_window` over NHWC tensors as pooling layers and their gradients make them (windows
//! over H and W, strides, padding, base and window dilation), against a host reference of the
//! spec: every window position, padding and holes between dilated elements contributing the
//! init value. On CPU adapters, windows that leave the innermost dimension alone (a multiple
//! of 4) compute four results per thread reading groups of four; the others one per thread.

mod common;

use common::{data, device, f32s, upload_f32};

use wgpu_hlo::compile::{compile, CompileOptions};

/// One `reduce_window` case over a `[n, h, w, c]` input.
struct Case {
    x: [usize; 4],
    window: [usize; 4],
    strides: [usize; 4],
    base: [usize; 4],
    wdil: [usize; 4],
    pad: [(usize, usize); 4],
    /// "add" (init 0) or "maximum" (init -inf).
    body: &'static str,
}

// Index loops over the four dimensions read clearest as such.
#[allow(clippy::needless_range_loop)]
impl Case {
    fn out(&self) -> [usize; 4] {
        let mut o = [0; 4];
        for d in 0..4 {
            let dilated = (self.x[d] - 1) * self.base[d] + 1 + self.pad[d].0 + self.pad[d].1;
            let span = (self.window[d] - 1) * self.wdil[d] + 1;
            o[d] = if dilated < span {
                0
            } else {
                (dilated - span) / self.strides[d] + 1
            };
        }
        o
    }

    fn init(&self) -> f32 {
        if self.body == "add" {
            0.0
        } else {
            f32::NEG_INFINITY
        }
    }

    fn source(&self) -> String {
        let t = |s: [usize; 4]| format!("tensor<{}x{}x{}x{}xf32>", s[0], s[1], s[2], s[3]);
        let a = |v: [usize; 4]| format!("{}, {}, {}, {}", v[0], v[1], v[2], v[3]);
        let init = if self.body == "add" {
            "0.0"
        } else {
            "0xFF800000"
        };
        let pad = self
            .pad
            .iter()
            .map(|(l, h)| format!("[{l}, {h}]"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "func.func @main(%x: {xt}) -> {ot} {{\n  %z = stablehlo.constant dense<{init}> : tensor<f32>\n  %r = \"stablehlo.reduce_window\"(%x, %z) ({{\n  ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n    %s = stablehlo.{body} %a, %b : tensor<f32>\n    stablehlo.return %s : tensor<f32>\n  }}) {{window_dimensions = array<i64: {w}>, window_strides = array<i64: {st}>, base_dilations = array<i64: {bd}>, window_dilations = array<i64: {wd}>, padding = dense<[{pad}]> : tensor<4x2xi64>}} : ({xt}, tensor<f32>) -> {ot}\n  return %r : {ot}\n}}\n",
            xt = t(self.x),
            ot = t(self.out()),
            body = self.body,
            w = a(self.window),
            st = a(self.strides),
            bd = a(self.base),
            wd = a(self.wdil),
        )
    }

    fn reference(&self, x: &[f32]) -> Vec<f32> {
        let o = self.out();
        let mut out = Vec::new();
        for i in 0..o[0] * o[1] * o[2] * o[3] {
            let oi = [
                i / (o[1] * o[2] * o[3]),
                i / (o[2] * o[3]) % o[1],
                i / o[3] % o[2],
                i % o[3],
            ];
            let mut acc = self.init();
            let wn: usize = self.window.iter().product();
            for w in 0..wn {
                let wi = [
                    w / (self.window[1] * self.window[2] * self.window[3]),
                    w / (self.window[2] * self.window[3]) % self.window[1],
                    w / self.window[3] % self.window[2],
                    w % self.window[3],
                ];
                let mut at = 0usize;
                let mut inside = true;
                for d in 0..4 {
                    let p = (oi[d] * self.strides[d] + wi[d] * self.wdil[d]) as i64
                        - self.pad[d].0 as i64;
                    let b = self.base[d] as i64;
                    if p < 0 || p % b != 0 || p / b >= self.x[d] as i64 {
                        inside = false;
                        break;
                    }
                    at = at * self.x[d] + (p / b) as usize;
                }
                let v = if inside { x[at] } else { self.init() };
                acc = if self.body == "add" {
                    acc + v
                } else {
                    acc.max(v)
                };
            }
            out.push(acc);
        }
        out
    }
}

fn case(x: [usize; 4], window: [usize; 4], strides: [usize; 4], body: &'static str) -> Case {
    Case {
        x,
        window,
        strides,
        base: [1; 4],
        wdil: [1; 4],
        pad: [(0, 0); 4],
        body,
    }
}

#[test]
fn pooling_windows_match_the_spec() {
    let mut cases = vec![
        // Max pooling 2x2 stride 2; average pooling's sum 3x3 stride 1 with same padding.
        case([4, 14, 14, 32], [1, 2, 2, 1], [1, 2, 2, 1], "maximum"),
        Case {
            pad: [(0, 0), (1, 1), (1, 1), (0, 0)],
            ..case([2, 9, 9, 12], [1, 3, 3, 1], [1; 4], "add")
        },
        // The average-pooling gradient: a base-dilated, padded 2x2 sum.
        Case {
            base: [1, 2, 2, 1],
            pad: [(0, 0), (1, 1), (1, 1), (0, 0)],
            ..case([3, 7, 7, 8], [1, 2, 2, 1], [1; 4], "add")
        },
        // Window dilation; channels not a multiple of 4 (one result per thread).
        Case {
            wdil: [1, 2, 1, 1],
            ..case([2, 10, 6, 16], [1, 3, 2, 1], [1, 1, 2, 1], "maximum")
        },
        case([2, 8, 8, 6], [1, 2, 2, 1], [1, 2, 2, 1], "add"),
        // Windows over the channels, and padding on them: one result per thread.
        case([2, 5, 5, 16], [1, 1, 1, 4], [1, 1, 1, 4], "maximum"),
        Case {
            pad: [(0, 0), (0, 0), (0, 0), (1, 3)],
            ..case([2, 4, 4, 8], [1, 2, 2, 1], [1; 4], "add")
        },
    ];
    // A window longer than the unrolled ones.
    cases.push(case([1, 12, 12, 8], [1, 5, 5, 1], [1, 1, 1, 1], "add"));
    for (k, c) in cases.iter().enumerate() {
        let n: usize = c.x.iter().product();
        let x: Vec<f32> = data(n, 40 + k as u64)
            .iter()
            .map(|v| (v * 8.0).round() / 4.0)
            .collect();
        let src = c.source();
        let exe = compile(&device(), src.as_bytes(), &CompileOptions::default())
            .unwrap_or_else(|e| panic!("case {k}: {e}\n{src}"));
        let out = exe.execute_blocking(&[upload_f32(&c.x, &x)]).unwrap();
        let got = f32s(&out[0].read_to_host_blocking().unwrap());
        let want = c.reference(&x);
        assert_eq!(got.len(), want.len(), "case {k}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Quarters sum exactly in f32 in any order.
            assert_eq!(g, w, "case {k} ({:?}), element {i}", c.x);
        }
        // On lavapipe (default settings) the first case reads groups of four.
        let lavapipe_defaults = device().info().name.contains("llvmpipe")
            && ["WGPU_HLO_TEXTURE_READS", "WGPU_HLO_QUAD_READS"]
                .iter()
                .all(|v| std::env::var(v).is_err())
            && std::env::var("WGPU_HLO_ADAPTER_CLASS").is_err();
        if lavapipe_defaults && k == 0 {
            assert!(
                exe.kernels().iter().any(|k| k.wgsl.contains("_quad(")),
                "max pooling: no quad reads"
            );
        }
    }
}
