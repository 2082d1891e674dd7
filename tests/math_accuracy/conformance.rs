//! Reads the `@inputs()` / `@expected()` constants and the check kind out of the JAX-exported
//! StableHLO test files in `shared/conformance/testdata`.

use std::path::{Path, PathBuf};

/// Element type of a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F16,
    Bf16,
    F32,
    F64,
}

impl Dtype {
    fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "f16" => Dtype::F16,
            "bf16" => Dtype::Bf16,
            "f32" => Dtype::F32,
            "f64" => Dtype::F64,
            _ => return None,
        })
    }
    fn bytes(self) -> usize {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
    /// Decodes one element from its bit pattern.
    pub fn decode(self, bits: u64) -> f64 {
        match self {
            Dtype::F16 => half::f16::from_bits(bits as u16).to_f64(),
            Dtype::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
            Dtype::F32 => f32::from_bits(bits as u32) as f64,
            Dtype::F64 => f64::from_bits(bits),
        }
    }
    /// Rounds a value to this type (round to nearest even), as bits.
    pub fn encode(self, v: f64) -> u64 {
        match self {
            Dtype::F16 => half::f16::from_f64(v).to_bits() as u64,
            Dtype::Bf16 => half::bf16::from_f64(v).to_bits() as u64,
            Dtype::F32 => (v as f32).to_bits() as u64,
            Dtype::F64 => v.to_bits(),
        }
    }
    /// Rounds an f32 result to this type, as bits (f16/bf16 computed in f32 then rounded once).
    pub fn round_f32(self, v: f32) -> u64 {
        match self {
            Dtype::F16 => half::f16::from_f32(v).to_bits() as u64,
            Dtype::Bf16 => half::bf16::from_f32(v).to_bits() as u64,
            Dtype::F32 => v.to_bits() as u64,
            Dtype::F64 => (v as f64).to_bits(),
        }
    }
    fn width(self) -> u32 {
        self.bytes() as u32 * 8
    }
    /// Distance in units in the last place, as the StableHLO checker counts it
    /// (sign-magnitude, both NaN = 0, NaN or inf against anything else = max).
    pub fn ulp_diff(self, a: u64, b: u64) -> u64 {
        if a == b {
            return 0;
        }
        let w = self.width();
        let sign = 1u64 << (w - 1);
        let mag = sign - 1;
        let (ma, mb) = (a & mag, b & mag);
        let exp_all = match self {
            Dtype::F16 => 0x7c00,
            Dtype::Bf16 => 0x7f80,
            Dtype::F32 => 0x7f80_0000,
            Dtype::F64 => 0x7ff0_0000_0000_0000,
        };
        let nan = |m: u64| m > exp_all;
        let fin = |m: u64| m < exp_all;
        if nan(ma) && nan(mb) {
            return 0;
        }
        if !(fin(ma) && fin(mb)) {
            return u64::MAX;
        }
        if (a & sign) != (b & sign) {
            ma + mb
        } else {
            ma.abs_diff(mb)
        }
    }
}

/// How a file compares its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// At most 3 ULP.
    Close,
    /// Absolute difference at most 1e-3.
    AlmostEq,
    /// Exact.
    Eq,
}

/// A tensor constant: element type (of the parts, for complex), shape and elements as bit
/// patterns (complex: re, im interleaved).
#[derive(Clone, Debug)]
pub struct Constant {
    pub dtype: Dtype,
    pub complex: bool,
    pub shape: Vec<usize>,
    pub bits: Vec<u64>,
}

/// One test file's data.
#[derive(Debug)]
pub struct Case {
    pub inputs: Vec<Constant>,
    pub expected: Constant,
    pub check: Check,
}

/// The conformance folder: `WGPU_HLO_CONFORMANCE`, else `../shared/conformance`.
pub fn root() -> PathBuf {
    match std::env::var_os("WGPU_HLO_CONFORMANCE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"),
    }
}

fn body_of<'a>(src: &'a str, func: &str) -> Option<&'a str> {
    let start = src.find(&format!("func.func private @{func}("))?;
    let rest = &src[start..];
    let end = rest.find("\n  }")?;
    Some(&rest[..end])
}

fn constants(body: &str) -> Option<Vec<Constant>> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(p) = rest.find("stablehlo.constant dense<") {
        rest = &rest[p + "stablehlo.constant dense<".len()..];
        let close = rest.find("> : tensor<")?;
        let value = &rest[..close];
        let ty_start = close + "> : tensor<".len();
        let ty_end = ty_start + rest[ty_start..].find('>')?;
        let ty = &rest[ty_start..ty_end];
        // complex<f32> closes its own bracket first
        let (ty, complex) = match ty.find("complex<") {
            Some(k) => (format!("{}{}", &ty[..k], &ty[k + "complex<".len()..]), true),
            None => (ty.to_string(), false),
        };
        let ty_end = if complex { ty_end + 1 } else { ty_end };
        let mut parts: Vec<&str> = ty.split('x').collect();
        let dtype = Dtype::parse(parts.pop()?)?;
        let shape: Vec<usize> = parts
            .iter()
            .map(|d| d.parse().ok())
            .collect::<Option<_>>()?;
        let width = if complex { 2 } else { 1 };
        let n: usize = shape.iter().product::<usize>() * width;
        let mut bits = decode(value, dtype)?;
        if bits.len() == width && n != width {
            bits = bits.repeat(n / width);
        }
        if bits.len() != n {
            return None;
        }
        out.push(Constant {
            dtype,
            complex,
            shape,
            bits,
        });
        rest = &rest[ty_end..];
    }
    Some(out)
}

fn decode(value: &str, dtype: Dtype) -> Option<Vec<u64>> {
    let value = value.trim();
    if let Some(hex) = value.strip_prefix("\"0x") {
        let hex = hex.strip_suffix('"')?;
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
            .collect::<Option<_>>()?;
        let w = dtype.bytes();
        return Some(
            bytes
                .chunks_exact(w)
                .map(|c| c.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64))
                .collect(),
        );
    }
    value
        .split(|c: char| "[](),".contains(c) || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()
            } else {
                let v: f64 = match t {
                    "inf" => f64::INFINITY,
                    "-inf" => f64::NEG_INFINITY,
                    "nan" => f64::NAN,
                    _ => t.parse().ok()?,
                };
                Some(dtype.encode(v))
            }
        })
        .collect()
}

/// Reads one file; `None` if it does not have the inputs/expected shape this harness knows.
pub fn read(path: &Path) -> Option<Case> {
    let src = std::fs::read_to_string(path).ok()?;
    let inputs = constants(body_of(&src, "inputs")?)?;
    let mut expected = constants(body_of(&src, "expected")?)?;
    if expected.len() != 1 || inputs.is_empty() {
        return None;
    }
    let check = if src.contains("@check.expect_close") {
        Check::Close
    } else if src.contains("@check.expect_almost_eq") {
        Check::AlmostEq
    } else if src.contains("@check.expect_eq") {
        Check::Eq
    } else {
        return None;
    };
    Some(Case {
        inputs,
        expected: expected.remove(0),
        check,
    })
}

/// Broadcasts `c` to `shape` (NumPy rules, aligned on the right); complex parts stay paired.
pub fn broadcast(c: &Constant, shape: &[usize]) -> Vec<u64> {
    let n: usize = shape.iter().product();
    let width = if c.complex { 2 } else { 1 };
    if c.bits.len() == n * width {
        return c.bits.clone();
    }
    let pad = shape.len() - c.shape.len();
    let src_shape: Vec<usize> = std::iter::repeat_n(1, pad)
        .chain(c.shape.iter().copied())
        .collect();
    (0..n)
        .flat_map(|flat| {
            let mut rem = flat;
            let mut idx = 0;
            let mut stride = 1;
            for d in (0..shape.len()).rev() {
                let i = rem % shape[d];
                rem /= shape[d];
                let si = if src_shape[d] == 1 { 0 } else { i };
                idx += si * stride;
                stride *= src_shape[d];
            }
            (0..width).map(move |p| c.bits[idx * width + p])
        })
        .collect()
}
