//! The serialized form of a compiled executable: everything `Executable::load` needs (the step
//! program, every kernel's WGSL and launch metadata, slot, parameter and result types,
//! constants, output aliases, name, fingerprint and the IR text), so that loading one does no
//! parsing, passes, fusion or code generation — only pipeline creation.
//!
//! Layout (little-endian):
//!
//! ```text
//! magic "WGPUHLOX" | format version u32 | crate version str | build id str | adapter key str
//! | body length u64 | body checksum u64 (FNV-1a) | body
//! ```
//!
//! Strings and byte strings are a u64 length and the bytes; vectors a u64 count and their
//! elements. A blob from another format, crate version, build or adapter, or a corrupt or
//! truncated one, is INVALID_ARGUMENT (the caller — JAX's compilation cache — then compiles).

use crate::codegen::expr::Binding;
use crate::codegen::kernel::Kernel;
use crate::codegen::parted::PartedBinding;
use crate::codegen::texture_reads::{ScratchTexture, StateTexture, TextureInput};
use crate::compile::program::{
    BranchStep, ChunkLaunch, ChunkedStep, HostCallStep, Program, Slot, Step, TripsAtStart,
    UpdatesStep, WhileKernelStep, WhileStep,
};
use crate::error::{Error, Result};
use crate::ir::attr::ComparisonDirection;
use crate::ir::types::{UniformQuantization, ALL_ELEMENT_TYPES};
use crate::ir::{ElementType, TensorType, ValueId};
use crate::passes::trip_count::{CounterTest, Start};
use crate::runtime::executable::ExecutableParts;
use crate::runtime::Device;

/// First bytes of every serialized executable.
pub const MAGIC: &[u8; 8] = b"WGPUHLOX";
/// Version of the layout below; bump on any change.
pub const FORMAT_VERSION: u32 = 15;
/// The crate version.
pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");
/// A hash of the compiler's sources (see `build.rs`).
pub const BUILD_ID: &str = env!("WGPU_HLO_BUILD_ID");

/// Deepest nesting of control flow a blob may have (guards the recursive reader's stack).
const MAX_DEPTH: usize = 200;

/// What code generation depended on: the adapter (backend, ids, name, driver) and the target
/// description derived from it (shader features and the limits the emitters use).
pub fn adapter_key(device: &Device) -> String {
    let i = device.info();
    let t = super::target(device);
    let c = t.caps;
    format!(
        "{}|{:04x}:{:04x}|{}|{}|{}|{}|f64={} i64={} f16={} subgroup={}/{}|wg={} sb={} bind={} cpu={}",
        i.backend,
        i.vendor,
        i.device,
        i.device_type,
        i.name,
        i.driver,
        i.driver_info,
        c.f64,
        c.i64,
        c.f16,
        c.subgroup,
        c.subgroup_size,
        t.max_workgroups,
        t.max_storage_buffers,
        t.max_binding_size,
        t.cpu_adapter,
    )
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Encodes an executable's parts for `device`.
pub fn encode(parts: &ExecutableParts, fingerprint: &str, device: &Device) -> Vec<u8> {
    let mut body = W(Vec::new());
    body.str(&parts.name);
    body.str(fingerprint);
    body.types(&parts.param_types);
    body.types(&parts.output_types);
    body.types(&parts.slot_types);
    body.len(parts.kernels.len());
    for k in &parts.kernels {
        body.kernel(k);
    }
    body.len(parts.constants.len());
    for (slot, bytes) in &parts.constants {
        body.len(*slot);
        body.bytes(bytes);
    }
    body.program(&parts.program);
    body.slots(&parts.params);
    body.slots(&parts.results);
    body.str(&parts.ir_text);
    body.len(parts.output_aliases.len());
    for a in &parts.output_aliases {
        body.opt_len(*a);
    }
    let body = body.0;
    let mut out = W(MAGIC.to_vec());
    out.u32(FORMAT_VERSION);
    out.str(CRATE_VERSION);
    out.str(BUILD_ID);
    out.str(&adapter_key(device));
    out.u64(body.len() as u64);
    out.u64(fnv(&body));
    out.0.extend_from_slice(&body);
    out.0
}

/// Decodes a blob `encode` made for this build and an adapter like `device`'s: the parts and
/// the fingerprint.
pub fn decode(bytes: &[u8], device: &Device) -> Result<(ExecutableParts, String)> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| Error::invalid("not a serialized wgpu-hlo executable (bad magic)"))?;
    let mut r = R { b: rest, depth: 0 };
    let version = r.u32()?;
    if version != FORMAT_VERSION {
        return Err(Error::invalid(format!(
            "serialized executable has format version {version}; this build reads \
             {FORMAT_VERSION}"
        )));
    }
    let crate_version = r.str()?;
    let build = r.str()?;
    if crate_version != CRATE_VERSION || build != BUILD_ID {
        return Err(Error::invalid(format!(
            "serialized executable comes from wgpu-hlo {crate_version} (build {build}); this \
             is {CRATE_VERSION} (build {BUILD_ID})"
        )));
    }
    let key = r.str()?;
    let ours = adapter_key(device);
    if key != ours {
        return Err(Error::invalid(format!(
            "serialized executable was compiled for another adapter ({key}); this device is \
             {ours}"
        )));
    }
    let len = r.u64()?;
    let sum = r.u64()?;
    if len != r.b.len() as u64 {
        return Err(Error::invalid(format!(
            "serialized executable is truncated or padded: body of {} bytes, header says {len}",
            r.b.len()
        )));
    }
    if fnv(r.b) != sum {
        return Err(Error::invalid(
            "serialized executable is corrupt (checksum mismatch)",
        ));
    }
    let parts = r
        .parts()
        .map_err(|e| e.context("reading a serialized executable"))?;
    let fingerprint = parts.1;
    let parts = parts.0;
    if !r.b.is_empty() {
        return Err(Error::invalid(
            "serialized executable has trailing bytes after its body",
        ));
    }
    check(&parts)?;
    Ok((parts, fingerprint))
}

/// Index checks, so that a blob whose checksum matches but whose content is wrong cannot make
/// an execution index out of range.
fn check(p: &ExecutableParts) -> Result<()> {
    let bad = |what: &str| Err(Error::invalid(format!("serialized executable: {what}")));
    let n = p.slot_types.len();
    if p.params.len() != p.param_types.len() || p.results.len() != p.output_types.len() {
        return bad("parameter or result count does not match its types");
    }
    if p.output_aliases.len() != p.output_types.len()
        || p.output_aliases
            .iter()
            .flatten()
            .any(|&a| a >= p.params.len())
    {
        return bad("output aliases out of range");
    }
    if p.params.iter().chain(&p.results).any(|&s| s >= n)
        || p.constants.iter().any(|(s, _)| *s >= n)
    {
        return bad("slot out of range");
    }
    let mut touched = std::collections::HashSet::new();
    p.program.touched(&mut touched);
    if touched.iter().any(|&s| s >= n) {
        return bad("slot out of range");
    }
    if !kernels_in_range(&p.program, p.kernels.len()) {
        return bad("kernel index out of range");
    }
    Ok(())
}

fn kernels_in_range(p: &Program, n: usize) -> bool {
    p.steps.iter().all(|s| match s {
        Step::Launch { kernel, .. } | Step::Update { kernel, .. } => *kernel < n,
        Step::Chunked(c) => c.kernel < n,
        Step::Updates(u) => u.kernel < n,
        Step::WhileKernel(w) => w.kernel < n,
        Step::While(w) => kernels_in_range(&w.cond, n) && kernels_in_range(&w.body, n),
        Step::Branch(b) => b.branches.iter().all(|(p, _)| kernels_in_range(p, n)),
        Step::Alias { .. } | Step::Free(_) | Step::HostCall(_) => true,
    })
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, v: usize) {
        self.u64(v as u64);
    }
    fn start(&mut self, v: Start) {
        match v {
            Start::Const(c) => {
                self.u8(0);
                self.i64(c as i64);
            }
            Start::Init(k) => {
                self.u8(1);
                self.len(k);
            }
        }
    }
    fn opt_len(&mut self, v: Option<usize>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.len(v);
            }
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn i64s(&mut self, v: &[i64]) {
        self.len(v.len());
        for x in v {
            self.i64(*x);
        }
    }
    fn slots(&mut self, v: &[Slot]) {
        self.len(v.len());
        for s in v {
            self.len(*s);
        }
    }
    fn dtype(&mut self, d: ElementType) {
        // Every dtype is in the table; the position is its code.
        let code = ALL_ELEMENT_TYPES
            .iter()
            .position(|t| *t == d)
            .unwrap_or(255);
        self.u8(code as u8);
    }
    fn ty(&mut self, t: &TensorType) {
        self.i64s(&t.shape);
        self.dtype(t.dtype);
        match &t.bounds {
            None => self.u8(0),
            Some(b) => {
                self.u8(1);
                self.i64s(b);
            }
        }
        match &t.quant {
            None => self.u8(0),
            Some(q) => {
                self.u8(1);
                self.dtype(q.storage_type);
                self.i64(q.storage_min);
                self.i64(q.storage_max);
                self.dtype(q.expressed_type);
                match q.quantization_dimension {
                    None => self.u8(0),
                    Some(d) => {
                        self.u8(1);
                        self.i64(d);
                    }
                }
                self.len(q.scales.len());
                for s in &q.scales {
                    self.u64(s.to_bits());
                }
                self.i64s(&q.zero_points);
            }
        }
    }
    fn types(&mut self, v: &[TensorType]) {
        self.len(v.len());
        for t in v {
            self.ty(t);
        }
    }
    fn bindings(&mut self, v: &[Binding]) {
        self.len(v.len());
        for b in v {
            self.u32(b.value.0);
            self.ty(&b.ty);
        }
    }
    fn kernel(&mut self, k: &Kernel) {
        self.str(&k.name);
        self.str(&k.wgsl);
        self.bindings(&k.inputs);
        self.bindings(&k.outputs);
        for w in k.workgroups {
            self.u32(w);
        }
        self.u64(k.iterations);
        self.len(k.texture_inputs.len());
        for t in &k.texture_inputs {
            // 0: a storage binding; else the texels copied.
            self.u64(t.map_or(0, |t| t.texels));
        }
        self.len(k.parted.len());
        for p in &k.parted {
            self.u32(p.binding);
            self.u64(p.part_bytes);
            self.u32(p.parts);
        }
        self.len(k.state_textures.len());
        for t in &k.state_textures {
            self.len(t.output);
            self.u64(t.first);
            self.u64(t.texture.texels);
            self.u32(t.binding);
        }
        self.len(k.scratch_textures.len());
        for t in &k.scratch_textures {
            self.u32(t.binding);
            self.u32(t.width);
            self.u32(t.height);
        }
    }
    /// A loop's trip count known at compile time, or how it is computed at the start.
    fn trips(&mut self, trip_count: Option<u64>, at_start: Option<&TripsAtStart>) {
        match trip_count {
            None => self.u8(0),
            Some(n) => {
                self.u8(1);
                self.u64(n);
            }
        }
        match at_start {
            None => self.u8(0),
            Some(t) => {
                self.u8(1);
                self.len(t.tests.len());
                for c in &t.tests {
                    self.len(c.counter);
                    self.start(c.init);
                    self.start(c.bound);
                    self.i64(c.step as i64);
                    let dir = ComparisonDirection::ALL
                        .iter()
                        .position(|d| *d == c.dir)
                        .unwrap_or(0);
                    self.u8(dir as u8);
                }
                self.len(t.reads.len());
                for &(k, d) in &t.reads {
                    self.len(k);
                    self.dtype(d);
                }
            }
        }
    }

    fn program(&mut self, p: &Program) {
        self.len(p.steps.len());
        for s in &p.steps {
            match s {
                Step::Launch {
                    kernel,
                    args,
                    results,
                } => {
                    self.u8(0);
                    self.len(*kernel);
                    self.slots(args);
                    self.slots(results);
                }
                Step::Update {
                    kernel,
                    args,
                    target,
                    result,
                    take,
                } => {
                    self.u8(1);
                    self.len(*kernel);
                    self.slots(args);
                    self.len(*target);
                    self.len(*result);
                    self.u8(*take as u8);
                }
                Step::Updates(u) => {
                    self.u8(8);
                    self.len(u.kernel);
                    self.slots(&u.args);
                    self.slots(&u.targets);
                    self.slots(&u.results);
                    self.len(u.takes.len());
                    for &t in &u.takes {
                        self.u8(t as u8);
                    }
                    self.slots(&u.outputs);
                }
                Step::Alias { src, dst } => {
                    self.u8(2);
                    self.len(*src);
                    self.len(*dst);
                }
                Step::While(w) => {
                    self.u8(3);
                    self.slots(&w.init);
                    for &t in &w.init_takes {
                        self.u8(t as u8);
                    }
                    for k in 0..w.init.len() {
                        self.u8(w.fresh.get(k).copied().unwrap_or(false) as u8);
                    }
                    self.slots(&w.args);
                    self.program(&w.cond);
                    self.len(w.cond_result);
                    self.program(&w.body);
                    self.slots(&w.body_results);
                    self.slots(&w.results);
                    self.trips(w.trip_count, w.trips_at_start.as_ref());
                }
                Step::WhileKernel(w) => {
                    self.u8(9);
                    self.len(w.kernel);
                    self.slots(&w.args);
                    self.len(w.states);
                    self.slots(&w.results);
                    let (r, i): (Vec<Slot>, Vec<Slot>) = w.same.iter().copied().unzip();
                    self.slots(&r);
                    self.slots(&i);
                    self.slots(&w.init);
                    self.len(w.flag);
                    self.u64(w.per_launch);
                    self.trips(w.trip_count, w.trips_at_start.as_ref());
                    self.u8(w.clear_flag as u8);
                    // Per result: 0, or 1 + the initial value it starts from in place.
                    for ip in &w.in_place {
                        self.len(ip.map_or(0, |k| k + 1));
                    }
                    for &t in &w.init_takes {
                        self.u8(t as u8);
                    }
                    for j in 0..w.results.len() {
                        self.u8(w.fresh.get(j).copied().unwrap_or(false) as u8);
                    }
                }
                Step::Branch(b) => {
                    self.u8(4);
                    self.len(b.selector);
                    self.u8(b.is_if as u8);
                    self.len(b.branches.len());
                    for (p, r) in &b.branches {
                        self.program(p);
                        self.slots(r);
                    }
                    self.slots(&b.results);
                }
                Step::Free(s) => {
                    self.u8(5);
                    self.slots(s);
                }
                // The id names a callable in the loading process's registry: JAX's cache key
                // holds the module text with that id, assigned by the lowering that asked.
                Step::HostCall(h) => {
                    self.u8(6);
                    self.u64(h.target);
                    self.str(&h.name);
                    self.slots(&h.args);
                    self.slots(&h.results);
                }
                Step::Chunked(c) => {
                    self.u8(7);
                    self.len(c.kernel);
                    self.slots(&c.results);
                    self.len(c.chunks.len());
                    for l in &c.chunks {
                        self.slots(&l.args);
                        self.len(l.ranges.len());
                        for r in &l.ranges {
                            match r {
                                None => self.u8(0),
                                Some((offset, size)) => {
                                    self.u8(1);
                                    self.u64(*offset);
                                    self.u64(*size);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

struct R<'a> {
    b: &'a [u8],
    depth: usize,
}

fn truncated() -> Error {
    Error::invalid("serialized executable is truncated")
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.b.len() {
            return Err(truncated());
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.take(N)?.try_into().map_err(|_| truncated())
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    fn bool(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            t => Err(Error::invalid(format!("bad flag {t}"))),
        }
    }
    /// `n` flags.
    fn bools(&mut self, n: usize) -> Result<Vec<bool>> {
        (0..n).map(|_| self.bool()).collect()
    }
    /// A size or index: must fit in usize.
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| Error::invalid("size out of range"))
    }
    /// A count of elements of at least `min_size` bytes each: no more than the rest can hold
    /// (so a corrupt count cannot make us allocate without bound).
    fn count(&mut self, min_size: usize) -> Result<usize> {
        let n = self.len()?;
        if n.saturating_mul(min_size.max(1)) > self.b.len() {
            return Err(truncated());
        }
        Ok(n)
    }
    fn start(&mut self) -> Result<Start> {
        Ok(if self.bool()? {
            Start::Init(self.len()?)
        } else {
            Start::Const(self.i64()? as i128)
        })
    }
    fn opt_len(&mut self) -> Result<Option<usize>> {
        Ok(if self.bool()? {
            Some(self.len()?)
        } else {
            None
        })
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.count(1)?;
        self.take(n)
    }
    fn str(&mut self) -> Result<String> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| Error::invalid("serialized executable has a string that is not UTF-8"))
    }
    fn i64s(&mut self) -> Result<Vec<i64>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.i64()).collect()
    }
    fn slots(&mut self) -> Result<Vec<Slot>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.len()).collect()
    }
    fn dtype(&mut self) -> Result<ElementType> {
        let c = self.u8()?;
        ALL_ELEMENT_TYPES
            .get(c as usize)
            .copied()
            .ok_or_else(|| Error::invalid(format!("bad element type code {c}")))
    }
    fn ty(&mut self) -> Result<TensorType> {
        let shape = self.i64s()?;
        let dtype = self.dtype()?;
        let bounds = if self.bool()? {
            Some(self.i64s()?)
        } else {
            None
        };
        let quant = if self.bool()? {
            let storage_type = self.dtype()?;
            let storage_min = self.i64()?;
            let storage_max = self.i64()?;
            let expressed_type = self.dtype()?;
            let quantization_dimension = if self.bool()? {
                Some(self.i64()?)
            } else {
                None
            };
            let n = self.count(8)?;
            let scales = (0..n)
                .map(|_| self.u64().map(f64::from_bits))
                .collect::<Result<Vec<_>>>()?;
            let zero_points = self.i64s()?;
            Some(Box::new(UniformQuantization {
                storage_type,
                storage_min,
                storage_max,
                expressed_type,
                quantization_dimension,
                scales,
                zero_points,
            }))
        } else {
            None
        };
        Ok(TensorType {
            shape,
            dtype,
            bounds,
            quant,
        })
    }
    fn types(&mut self) -> Result<Vec<TensorType>> {
        let n = self.count(11)?;
        (0..n).map(|_| self.ty()).collect()
    }
    fn bindings(&mut self) -> Result<Vec<Binding>> {
        let n = self.count(15)?;
        (0..n)
            .map(|_| {
                Ok(Binding {
                    value: ValueId(self.u32()?),
                    ty: self.ty()?,
                })
            })
            .collect()
    }
    fn kernel(&mut self) -> Result<Kernel> {
        Ok(Kernel {
            name: self.str()?,
            wgsl: self.str()?,
            inputs: self.bindings()?,
            outputs: self.bindings()?,
            workgroups: [self.u32()?, self.u32()?, self.u32()?],
            iterations: self.u64()?,
            texture_inputs: {
                let n = self.count(8)?;
                (0..n)
                    .map(|_| {
                        Ok(Some(self.u64()?)
                            .filter(|&t| t > 0)
                            .map(|texels| TextureInput { texels }))
                    })
                    .collect::<Result<_>>()?
            },
            parted: {
                let n = self.count(16)?;
                (0..n)
                    .map(|_| {
                        Ok(PartedBinding {
                            binding: self.u32()?,
                            part_bytes: self.u64()?,
                            parts: self.u32()?,
                        })
                    })
                    .collect::<Result<_>>()?
            },
            state_textures: {
                let n = self.count(8 + 8 + 8 + 4)?;
                (0..n)
                    .map(|_| {
                        Ok(StateTexture {
                            output: self.len()?,
                            first: self.u64()?,
                            texture: TextureInput {
                                texels: self.u64()?,
                            },
                            binding: self.u32()?,
                        })
                    })
                    .collect::<Result<_>>()?
            },
            scratch_textures: {
                let n = self.count(4 + 4 + 4)?;
                (0..n)
                    .map(|_| {
                        Ok(ScratchTexture {
                            binding: self.u32()?,
                            width: self.u32()?,
                            height: self.u32()?,
                        })
                    })
                    .collect::<Result<_>>()?
            },
        })
    }
    fn trip_count(&mut self) -> Result<Option<u64>> {
        Ok(if self.bool()? {
            Some(self.u64()?)
        } else {
            None
        })
    }

    fn trips_at_start(&mut self) -> Result<Option<TripsAtStart>> {
        if !self.bool()? {
            return Ok(None);
        }
        let n = self.count(35)?;
        let mut tests = Vec::with_capacity(n);
        for _ in 0..n {
            tests.push(CounterTest {
                counter: self.len()?,
                init: self.start()?,
                bound: self.start()?,
                step: self.i64()? as i128,
                dir: *ComparisonDirection::ALL
                    .get(self.u8()? as usize)
                    .ok_or_else(|| Error::invalid("bad comparison direction"))?,
            });
        }
        let n = self.count(9)?;
        let mut reads = Vec::with_capacity(n);
        for _ in 0..n {
            reads.push((self.len()?, self.dtype()?));
        }
        Ok(Some(TripsAtStart { tests, reads }))
    }

    fn program(&mut self) -> Result<Program> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error::invalid(format!(
                "serialized executable nests control flow deeper than {MAX_DEPTH}"
            )));
        }
        let n = self.count(1)?;
        let mut steps = Vec::with_capacity(n);
        for _ in 0..n {
            steps.push(match self.u8()? {
                0 => Step::Launch {
                    kernel: self.len()?,
                    args: self.slots()?,
                    results: self.slots()?,
                },
                1 => Step::Update {
                    kernel: self.len()?,
                    args: self.slots()?,
                    target: self.len()?,
                    result: self.len()?,
                    take: self.bool()?,
                },
                2 => Step::Alias {
                    src: self.len()?,
                    dst: self.len()?,
                },
                3 => {
                    let init = self.slots()?;
                    let init_takes = self.bools(init.len())?;
                    let fresh = self.bools(init.len())?;
                    Step::While(Box::new(WhileStep {
                        init,
                        init_takes,
                        fresh,
                        args: self.slots()?,
                        cond: self.program()?,
                        cond_result: self.len()?,
                        body: self.program()?,
                        body_results: self.slots()?,
                        results: self.slots()?,
                        trip_count: self.trip_count()?,
                        trips_at_start: self.trips_at_start()?,
                    }))
                }
                9 => {
                    let mut w = WhileKernelStep {
                        kernel: self.len()?,
                        args: self.slots()?,
                        states: self.len()?,
                        results: self.slots()?,
                        same: {
                            let r = self.slots()?;
                            let i = self.slots()?;
                            if r.len() != i.len() {
                                return Err(Error::invalid(
                                    "a loop kernel's unchanged results and initial values differ \
                                     in number",
                                ));
                            }
                            r.into_iter().zip(i).collect()
                        },
                        init: self.slots()?,
                        flag: self.len()?,
                        per_launch: self.u64()?,
                        trip_count: self.trip_count()?,
                        trips_at_start: self.trips_at_start()?,
                        clear_flag: self.bool()?,
                        in_place: Vec::new(),
                        init_takes: Vec::new(),
                        fresh: Vec::new(),
                    };
                    w.in_place = w
                        .results
                        .iter()
                        .map(|_| {
                            let v = self.len()?;
                            Ok(v.checked_sub(1))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    w.init_takes = self.bools(w.init.len())?;
                    w.fresh = self.bools(w.results.len())?;
                    if w.in_place.iter().flatten().any(|&k| k >= w.init.len()) {
                        return Err(Error::invalid(
                            "a loop kernel's result starts from a missing initial value",
                        ));
                    }
                    Step::WhileKernel(Box::new(w))
                }
                4 => {
                    let selector = self.len()?;
                    let is_if = self.bool()?;
                    let nb = self.count(16)?;
                    let mut branches = Vec::with_capacity(nb);
                    for _ in 0..nb {
                        let p = self.program()?;
                        branches.push((p, self.slots()?));
                    }
                    Step::Branch(Box::new(BranchStep {
                        selector,
                        is_if,
                        branches,
                        results: self.slots()?,
                    }))
                }
                5 => Step::Free(self.slots()?),
                6 => Step::HostCall(Box::new(HostCallStep {
                    target: self.u64()?,
                    name: self.str()?,
                    args: self.slots()?,
                    results: self.slots()?,
                })),
                7 => {
                    let kernel = self.len()?;
                    let results = self.slots()?;
                    let n = self.count(8)?;
                    let mut chunks = Vec::with_capacity(n);
                    for _ in 0..n {
                        let args = self.slots()?;
                        let nr = self.count(1)?;
                        let mut ranges = Vec::with_capacity(nr);
                        for _ in 0..nr {
                            ranges.push(if self.bool()? {
                                Some((self.u64()?, self.u64()?))
                            } else {
                                None
                            });
                        }
                        chunks.push(ChunkLaunch { args, ranges });
                    }
                    Step::Chunked(Box::new(ChunkedStep {
                        kernel,
                        results,
                        chunks,
                    }))
                }
                8 => {
                    let kernel = self.len()?;
                    let args = self.slots()?;
                    let targets = self.slots()?;
                    let results = self.slots()?;
                    let n = self.count(1)?;
                    let takes = (0..n).map(|_| self.bool()).collect::<Result<Vec<_>>>()?;
                    let outputs = self.slots()?;
                    if results.len() != targets.len() || takes.len() != targets.len() {
                        return Err(Error::invalid(
                            "an updates step whose targets, results and takes differ in number",
                        ));
                    }
                    Step::Updates(Box::new(UpdatesStep {
                        kernel,
                        args,
                        targets,
                        results,
                        takes,
                        outputs,
                    }))
                }
                t => return Err(Error::invalid(format!("bad step tag {t}"))),
            });
        }
        self.depth -= 1;
        Ok(Program { steps })
    }
    fn parts(&mut self) -> Result<(ExecutableParts, String)> {
        let name = self.str()?;
        let fingerprint = self.str()?;
        let param_types = self.types()?;
        let output_types = self.types()?;
        let slot_types = self.types()?;
        let nk = self.count(16)?;
        let kernels = (0..nk).map(|_| self.kernel()).collect::<Result<Vec<_>>>()?;
        let nc = self.count(16)?;
        let mut constants = Vec::with_capacity(nc);
        for _ in 0..nc {
            let slot = self.len()?;
            constants.push((slot, self.bytes()?.to_vec()));
        }
        let program = self.program()?;
        let params = self.slots()?;
        let results = self.slots()?;
        let ir_text = self.str()?;
        let na = self.count(1)?;
        let output_aliases = (0..na)
            .map(|_| self.opt_len())
            .collect::<Result<Vec<_>>>()?;
        Ok((
            ExecutableParts {
                name,
                param_types,
                output_types,
                slot_types,
                kernels,
                constants,
                program,
                params,
                results,
                ir_text,
                output_aliases,
            },
            fingerprint,
        ))
    }
}
