//! A 2-d convolution test harness: StableHLO source for any layouts, window attributes and
//! groups, and a host reference that pads and dilates the input explicitly and accumulates in
//! f64.

use super::{data, device};

use wgpu_hlo::compile::{compile, CompileOptions};
use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::DeviceBuffer;

/// Element types the tests run in.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Ty {
    F32,
    F16,
    BF16,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::F32 => "f32",
            Ty::F16 => "f16",
            Ty::BF16 => "bf16",
        }
    }

    fn element(self) -> ElementType {
        match self {
            Ty::F32 => ElementType::F32,
            Ty::F16 => ElementType::F16,
            Ty::BF16 => ElementType::BF16,
        }
    }

    /// `v` rounded to this type (the values the device sees).
    fn round(self, v: f32) -> f32 {
        match self {
            Ty::F32 => v,
            Ty::F16 => half::f16::from_f32(v).to_f32(),
            Ty::BF16 => half::bf16::from_f32(v).to_f32(),
        }
    }

    fn bytes(self, v: &[f32]) -> Vec<u8> {
        match self {
            Ty::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Ty::F16 => v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
            Ty::BF16 => v
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect(),
        }
    }

    fn values(self, b: &[u8]) -> Vec<f32> {
        match self {
            Ty::F32 => b
                .chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Ty::F16 => b
                .chunks(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Ty::BF16 => b
                .chunks(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        }
    }

    /// Relative precision of one rounding to this type.
    fn eps(self) -> f64 {
        match self {
            Ty::F32 => 0.0,
            Ty::F16 => 1.0 / 1024.0,
            Ty::BF16 => 1.0 / 128.0,
        }
    }
}

/// A 2-d convolution: logical sizes, window attributes and the physical layouts of its
/// operands and result (letters as in StableHLO's `dim_numbers`, e.g. "b01f", "01io").
#[derive(Clone, Debug)]
pub struct Conv {
    /// Input batch, features, spatial sizes.
    pub n: usize,
    pub c: usize,
    pub hw: [usize; 2],
    /// Output features, kernel spatial sizes.
    pub o: usize,
    pub k: [usize; 2],
    pub stride: [usize; 2],
    pub pad: [(usize, usize); 2],
    pub lhs_dilate: [usize; 2],
    pub rhs_dilate: [usize; 2],
    pub reverse: [bool; 2],
    pub feature_groups: usize,
    pub batch_groups: usize,
    pub layouts: [&'static str; 3],
    pub ty: Ty,
}

impl Conv {
    pub fn new(n: usize, c: usize, hw: [usize; 2], o: usize, k: [usize; 2]) -> Conv {
        Conv {
            n,
            c,
            hw,
            o,
            k,
            stride: [1, 1],
            pad: [(0, 0), (0, 0)],
            lhs_dilate: [1, 1],
            rhs_dilate: [1, 1],
            reverse: [false, false],
            feature_groups: 1,
            batch_groups: 1,
            layouts: ["b01f", "01io", "b01f"],
            ty: Ty::F32,
        }
    }

    /// Padded, dilated input size along spatial dimension `s`.
    fn padded(&self, s: usize) -> usize {
        (self.hw[s] - 1) * self.lhs_dilate[s] + 1 + self.pad[s].0 + self.pad[s].1
    }

    fn out_spatial(&self, s: usize) -> usize {
        let window = (self.k[s] - 1) * self.rhs_dilate[s] + 1;
        (self.padded(s) - window) / self.stride[s] + 1
    }

    /// Logical sizes of the lhs, rhs and result by layout letter.
    fn sizes(&self, which: usize) -> [(char, usize); 4] {
        let [h, w] = self.hw;
        let [kh, kw] = self.k;
        match which {
            0 => [('b', self.n), ('f', self.c), ('0', h), ('1', w)],
            1 => [
                ('o', self.o),
                ('i', self.c / self.feature_groups),
                ('0', kh),
                ('1', kw),
            ],
            _ => [
                ('b', self.n / self.batch_groups),
                ('f', self.o),
                ('0', self.out_spatial(0)),
                ('1', self.out_spatial(1)),
            ],
        }
    }

    fn size(&self, which: usize, letter: char) -> usize {
        self.sizes(which)
            .iter()
            .find(|(l, _)| *l == letter)
            .map_or(0, |p| p.1)
    }

    pub fn shape(&self, which: usize) -> Vec<usize> {
        self.layouts[which]
            .chars()
            .map(|l| self.size(which, l))
            .collect()
    }

    /// Offset of the element at logical indices `at` (by letter) in the physical layout.
    fn offset(&self, which: usize, at: &[(char, usize)]) -> usize {
        self.layouts[which].chars().fold(0, |off, l| {
            let i = at.iter().find(|(c, _)| *c == l).map_or(0, |p| p.1);
            off * self.size(which, l) + i
        })
    }

    fn tensor(&self, which: usize) -> String {
        let dims: String = self.shape(which).iter().map(|d| format!("{d}x")).collect();
        format!("tensor<{dims}{}>", self.ty.name())
    }

    pub fn source(&self) -> String {
        let dn = |l: &str| {
            let parts: Vec<String> = l.chars().map(|c| c.to_string()).collect();
            format!("[{}]", parts.join(", "))
        };
        let pair = |v: [usize; 2]| format!("[{}, {}]", v[0], v[1]);
        let (x, k, r) = (self.tensor(0), self.tensor(1), self.tensor(2));
        format!(
            "func.func @main(%x: {x}, %k: {k}) -> {r} {{\n  %nx = stablehlo.negate %x : {x}\n  %c = stablehlo.convolution(%nx, %k) dim_numbers = {}x{}->{}, window = {{stride = {}, pad = [[{}, {}], [{}, {}]], lhs_dilate = {}, rhs_dilate = {}, reverse = [{}, {}]}} {{batch_group_count = {} : i64, feature_group_count = {} : i64}} : ({x}, {k}) -> {r}\n  return %c : {r}\n}}\n",
            dn(self.layouts[0]),
            dn(self.layouts[1]),
            dn(self.layouts[2]),
            pair(self.stride),
            self.pad[0].0,
            self.pad[0].1,
            self.pad[1].0,
            self.pad[1].1,
            pair(self.lhs_dilate),
            pair(self.rhs_dilate),
            self.reverse[0],
            self.reverse[1],
            self.batch_groups,
            self.feature_groups,
        )
    }

    /// The result from the definition: the input padded and dilated explicitly, then every
    /// window position times the kernel, in f64. Also the sum of absolute products per
    /// element (for error bounds).
    pub fn reference(&self, x: &[f32], k: &[f32]) -> (Vec<f64>, Vec<f64>) {
        let [ph, pw] = [self.padded(0), self.padded(1)];
        // xp[n][c][i][j], zero where padding or a dilation hole.
        let mut xp = vec![0f64; self.n * self.c * ph * pw];
        for n in 0..self.n {
            for c in 0..self.c {
                for i in 0..self.hw[0] {
                    for j in 0..self.hw[1] {
                        let pi = self.pad[0].0 + i * self.lhs_dilate[0];
                        let pj = self.pad[1].0 + j * self.lhs_dilate[1];
                        let v = x[self.offset(0, &[('b', n), ('f', c), ('0', i), ('1', j)])];
                        xp[((n * self.c + c) * ph + pi) * pw + pj] = -(v as f64);
                    }
                }
            }
        }
        let shape = self.shape(2);
        let total: usize = shape.iter().product();
        let (mut out, mut mag) = (vec![0f64; total], vec![0f64; total]);
        let (ob, oh, ow) = (self.size(2, 'b'), self.out_spatial(0), self.out_spatial(1));
        let cg = self.c / self.feature_groups;
        for b in 0..ob {
            for f in 0..self.o {
                let n = f / (self.o / self.batch_groups) * ob + b;
                let g = f / (self.o / self.feature_groups);
                for i in 0..oh {
                    for j in 0..ow {
                        let (mut s, mut a) = (0f64, 0f64);
                        for ci in 0..cg {
                            let c = g * cg + ci;
                            for u in 0..self.k[0] {
                                for v in 0..self.k[1] {
                                    let pi = i * self.stride[0] + u * self.rhs_dilate[0];
                                    let pj = j * self.stride[1] + v * self.rhs_dilate[1];
                                    let xv = xp[((n * self.c + c) * ph + pi) * pw + pj];
                                    let ku = if self.reverse[0] {
                                        self.k[0] - 1 - u
                                    } else {
                                        u
                                    };
                                    let kv = if self.reverse[1] {
                                        self.k[1] - 1 - v
                                    } else {
                                        v
                                    };
                                    let kk = k[self
                                        .offset(1, &[('o', f), ('i', ci), ('0', ku), ('1', kv)])]
                                        as f64;
                                    s += xv * kk;
                                    a += (xv * kk).abs();
                                }
                            }
                        }
                        let o = self.offset(2, &[('b', b), ('f', f), ('0', i), ('1', j)]);
                        out[o] = s;
                        mag[o] = a;
                    }
                }
            }
        }
        (out, mag)
    }

    /// Window steps times input features per group: the length of one output's sum.
    pub fn terms(&self) -> usize {
        self.k[0] * self.k[1] * self.c / self.feature_groups
    }

    /// Compiles under `max_loop`, runs on pseudo-random data, compares with the reference;
    /// returns the number of kernels.
    pub fn check(&self, max_loop: Option<u64>) -> usize {
        self.check_kernels(max_loop).len()
    }

    /// [`Conv::check`], returning the WGSL of every kernel of the executable.
    pub fn check_kernels(&self, max_loop: Option<u64>) -> Vec<String> {
        let src = self.source();
        let opts = CompileOptions {
            max_loop_iterations: max_loop,
            ..Default::default()
        };
        let exe =
            compile(&device(), src.as_bytes(), &opts).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let (xs, ks) = (self.shape(0), self.shape(1));
        let x: Vec<f32> = data(xs.iter().product(), 11)
            .into_iter()
            .map(|v| self.ty.round(v))
            .collect();
        let k: Vec<f32> = data(ks.iter().product(), 12)
            .into_iter()
            .map(|v| self.ty.round(v))
            .collect();
        let upload = |shape: &[usize], v: &[f32]| -> DeviceBuffer {
            let t = TensorType::new(shape.iter().map(|&d| d as i64).collect(), self.ty.element());
            device().upload(&t, &self.ty.bytes(v)).unwrap()
        };
        let out = exe
            .execute_blocking(&[upload(&xs, &x), upload(&ks, &k)])
            .unwrap();
        let got = self.ty.values(&out[0].read_to_host_blocking().unwrap());
        let (want, mag) = self.reference(&x, &k);
        assert_eq!(got.len(), want.len());
        let terms = self.terms() as f64;
        for (o, ((&g, &w), &m)) in got.iter().zip(&want).zip(&mag).enumerate() {
            // f32 accumulation in any order, then one rounding to the result type.
            let tol = 2e-7 * terms.sqrt() * m.max(1.0) + self.ty.eps() * w.abs() + 1e-6;
            assert!(
                (g as f64 - w).abs() <= tol,
                "{self:?} bound {max_loop:?}, element {o}: got {g}, want {w}\n{src}"
            );
        }
        let kernels = exe.kernels().len();
        let wgsl = exe.kernels().iter().map(|k| k.wgsl.clone()).collect();
        // The negation and the convolution, unless split (partials and at least one fold).
        // An inner loop step covers up to 4 input features (vec4 loads).
        if let Some(bound) = max_loop {
            if (self.terms() as u64) > 4 * bound {
                assert!(kernels > 2, "{self:?} was not split");
            }
        }
        wgsl
    }
}
