//! Lowering a prepared function to a program: each region is partitioned by `fusion`, every
//! kernel is code-generated (and validated) now, values get buffer slots, control flow
//! becomes nested programs, and buffer lifetimes are planned.

use std::collections::{HashMap, HashSet};

use super::program::{
    BranchStep, ChunkLaunch, ChunkedStep, HostCallStep, Program, Slot, Step, TripsAtStart,
    UpdatesStep, WhileKernelStep, WhileStep,
};
use crate::codegen::kernel::Kernel;
use crate::codegen::loop_kernel::Target;
use crate::codegen::{
    conv_kernel, dot_kernel, epilogue, expr::large, loop_kernel, op_kernels, pairwise, parted,
    prologue, reduce_kernel, row_kernel, texture_reads,
};
use crate::error::{Error, Result};
use crate::fusion::{self, Group, KernelKind, Node};
use crate::ir::HOST_CALLBACK_TARGET;
use crate::ir::{
    Attr, ElementType, Function, Literal, Op, Operation, Region, TensorType, Type, ValueId,
};
use crate::passes::trip_count::{counter_tests, trip_count, Start};

/// Everything lowering produces.
pub struct Lowered {
    /// The top-level program.
    pub program: Program,
    /// Kernels, indexed by `Step::Launch::kernel`.
    pub kernels: Vec<Kernel>,
    /// Type of every slot.
    pub slot_types: Vec<TensorType>,
    /// Slots of the parameters, in order.
    pub params: Vec<Slot>,
    /// Slots of the results, in order.
    pub results: Vec<Slot>,
    /// Constants to upload once: slot and data.
    pub constants: Vec<(Slot, Literal)>,
    /// The kernel partition of every region, for dumps.
    pub partitions: String,
}

struct Lowering<'f, 't> {
    f: &'f Function,
    all_defs: HashMap<ValueId, &'f Operation>,
    target: Target<'t>,
    slots: HashMap<ValueId, Slot>,
    slot_types: Vec<TensorType>,
    kernels: Vec<Kernel>,
    constants: Vec<(Slot, Literal)>,
    partitions: String,
    /// Per kernel index, what texture reads may take of it (see [`TexturePolicy`]).
    textures: HashMap<usize, TexturePolicy>,
}

/// Which inputs of a kernel texture reads (`codegen::texture_reads`, CPU adapters) may take:
/// not those read only through small windows or gathers (`Lowering::windowed_inputs`), and
/// in a kernel that reads each input element about once (loop kernels: elementwise work,
/// updates) none ([`READ_ONCE_TEXTURE_WORDS`]). Each texture input is a copy of the whole buffer
/// and a pass break before every launch, a fixed cost of tens of µs on llvmpipe that only
/// many loads of the input repay (a dot's operands); a GRU's scan steps, of 4096-word
/// tensors, paid it ~20 times a step.
///
/// Kernels of ops that read at data-dependent positions (sorts, scatters, gathers, `top_k`)
/// take none (`scattered`): on llvmpipe a texel fetch costs more than a storage load at a
/// random position, and the copy comes on top. With and without texture reads, lavapipe
/// (ms): sort 1M 135 / 102, scatter-add 1M 134 / 102, `searchsorted` 1M into 64k 312 / 163,
/// embedding rows 4.8 / 1.4; reductions and dots gained from them (softmax 1024² 2.1 /
/// 3.3, column sums 4096² 10.7 / 16.1, the transformer step 80 / 101). Their inputs read
/// only in marked groups of four take textures all the same: a radix sort's count and
/// placement kernels, each thread reading its own run of keys and items (2026-12-06, AMD
/// EPYC host, lavapipe: sort 1M 232 -> 87 ms; as `vec4` storage loads 188). On AMD hosts
/// scatters and `top_k` take textures as other kernels do
/// ([`crate::target::scatter_reads_through_textures`]).
#[derive(Default)]
struct TexturePolicy {
    windowed: HashSet<usize>,
    read_once: bool,
    scattered: bool,
    /// Every invocation of the kernel runs the same code over its own elements, so a small
    /// input that it reads is read by all of them ([`broadcast_inputs`]): set for the kernels
    /// of one fusion group other than horizontal ones (which run independent kernels in ranges
    /// of invocations). Updates in place, loops and library kernels leave it unset.
    broadcast: bool,
}

impl TexturePolicy {
    /// The policy of the kernels of `op` when it reads at data-dependent positions.
    fn of_op(op: &Operation) -> Option<TexturePolicy> {
        let scattered = match op.op {
            Op::Sort { .. } | Op::Gather { .. } => true,
            // On AMD hosts scatters and `top_k` gain from textures like other kernels.
            Op::Scatter { .. } | Op::TopK { .. } => {
                !crate::target::scatter_reads_through_textures()
            }
            _ => false,
        };
        scattered.then(|| TexturePolicy {
            scattered: true,
            ..Default::default()
        })
    }
}

/// Whether a gather of slices `slice_sizes` from a table of `table` elements into a result of
/// `gathered` elements reads its table through a texture on CPU adapters: where it gathers
/// rows (runs of at least four elements along the innermost dimension, which a loop kernel
/// loads as `vec4`s), from a table at most [`ROW_GATHER_TABLE_RATIO`] times the size of the
/// result (the texture is a copy of the whole table before each launch, about 0.1 ms per
/// MiB), on hosts where storage loads cost llvmpipe more than texel fetches
/// ([`crate::target::stream_reads_as_vec4`]: AMD). The AMD EPYC host of 2026-12-07,
/// lavapipe, `wgsl_bench` of the dumped kernel of `table[idx]`, 4096 rows of 1024 floats from
/// a 1024 x 1024 table: 21.9 ms loading the rows from the storage buffer, 8.1-8.6 through
/// a texture (a contiguous copy of 16 MB from the buffer, no gather, took 19.5).
fn gathers_rows(slice_sizes: &[i64], table: usize, gathered: usize) -> bool {
    slice_sizes.last().is_some_and(|&w| w >= 4)
        && table <= gathered.saturating_mul(ROW_GATHER_TABLE_RATIO)
        && !crate::target::stream_reads_as_vec4()
}

/// Largest ratio of a table's size to its gathered rows' at which a row gather reads the
/// table through a texture ([`gathers_rows`]): a texel fetch saved about 0.85 ms per 2^18
/// words gathered over a storage load there, the copy costs about 0.1 ms per 2^18 words of
/// the table, so the copy pays up to about 8; 4 leaves room for hosts that differ.
const ROW_GATHER_TABLE_RATIO: usize = 4;

/// Fewest 32-bit words of an input of a read-once kernel read through a texture (see
/// [`TexturePolicy`]): none is. From 65536 words (until 2026-11-29) they gained nothing
/// measurable (16M-element fused chain 36.8 / 38.3 ms, transpose 4096² 40 / 39, the CNN and
/// transformer steps alike) and lost where a gather's indices came through a texel fetch
/// each (`searchsorted` 1M into 64k 199 -> 143 ms, `random.normal` 16M 244 -> 215).
/// `WGPU_HLO_TEXTURE_READS_ONCE=N` (or `CompileOptions::read_once_texture_words`) sets it
/// for comparisons and tests (0: read-once kernels take textures as the others do).
///
/// Those were an Intel host's figures. On AMD hosts a storage load costs llvmpipe three to
/// four times a texel fetch (`target::stream_reads_as_vec4`), and read-once kernels take
/// textures as the others do ([`READ_ONCE_TEXTURE_WORDS_AMD`]).
const READ_ONCE_TEXTURE_WORDS: u64 = u64::MAX;

/// [`READ_ONCE_TEXTURE_WORDS`] on AMD (and Hygon) hosts: 0, the general threshold. The AMD
/// EPYC host of 2026-12-05, `bench_ab.py '' 'WGPU_HLO_TEXTURE_READS_ONCE=0'`, all rows, 5
/// alternating runs: average-pool gradient 60.0 -> 24.5 ms, transpose 4096² 69.5 -> 28.5,
/// attention of 512 heads 5.6 -> 2.7, 16M-element fused chain 88.7 -> 51.6, flax LSTM step
/// 143 -> 95, GP gradient 425 -> 302, MLP step 17.9 -> 13.0, flax CNN step 60.8 -> 49.2, inv
/// 512 122 -> 102; worse: expm 64 (min 5.75 -> 6.54: its 64 x 64 products copy their
/// operands on each of 32 launches) and a `lax.cond` loop over 4096 floats (min 0.91 ->
/// 0.98). From 16384 words expm kept its time but the RNN steps lost 5-17 % of the gain.
const READ_ONCE_TEXTURE_WORDS_AMD: u64 = 0;

/// `WGPU_HLO_TEXTURE_READS_ONCE=N`, else [`READ_ONCE_TEXTURE_WORDS`] ([`READ_ONCE_TEXTURE_WORDS_AMD`]
/// on AMD hosts).
pub(crate) fn read_once_texture_words_from_env() -> u64 {
    std::env::var("WGPU_HLO_TEXTURE_READS_ONCE")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(if crate::target::host_cpu_is_amd() {
            READ_ONCE_TEXTURE_WORDS_AMD
        } else {
            READ_ONCE_TEXTURE_WORDS
        })
}

/// Dots and convolutions of fewer multiply-adds count as read-once kernels (their operands
/// are read a few times each, as a scan step's `[32, 128] @ [128, 128]`).
const SMALL_DOT_TEXTURE_MACS: u64 = 1 << 22;

/// Fewest loads a launch may make of its small inputs (invocations times the loop iterations
/// each may run) for [`broadcast_inputs`] to read them through textures: below this the copy
/// and the pass break weigh against a few thousand loads.
const BROADCAST_MIN_LOADS: u64 = 1 << 14;

/// Loads per 32-bit word of an input (and words of the kernel's largest tensor per word of
/// the input) from which [`broadcast_inputs`] takes it.
const BROADCAST_LOADS_PER_WORD: u64 = 8;

/// The inputs of `kernel` smaller than `min_words` words (which texture reads leave in
/// their storage buffers) that it reads many times over: at least
/// [`BROADCAST_LOADS_PER_WORD`] invocations (times loop iterations) per word, in a
/// launch of at least [`BROADCAST_MIN_LOADS`], and as many times smaller than the
/// largest tensor the kernel reads or writes. Such an input is a broadcast (a bias added to
/// every row, a batch norm's per-channel scale or mean, the vectors of an outer product),
/// and llvmpipe runs each storage load as a loop over its lanes where a texel fetch is one
/// vector operation; the copy into a texture is of a few KiB. Lavapipe, AMD EPYC host, 2
/// cores (ms, storage / texture): `jnp.outer` of two 2048-vectors 24.2 / 8.8, batch norm
/// over 16 x 64 x 64 x 32 29-32 / 18.4-18.8, and 19-22 / 10.6-12.2 once the partial sums of
/// its variance read the mean through a texture too (counting their loop iterations).
fn broadcast_inputs(kernel: &Kernel, min_words: u64) -> Vec<usize> {
    let Some(per_workgroup) = workgroup_invocations(&kernel.wgsl) else {
        return Vec::new();
    };
    // Invocations times loop iterations: a reduction's partial sums run few invocations,
    // each over many rows, and may read a small input (a mean) at every row.
    let loads = kernel
        .workgroups
        .iter()
        .map(|&g| u64::from(g))
        .product::<u64>()
        * per_workgroup
        * kernel.iterations.max(1);
    if loads < BROADCAST_MIN_LOADS {
        return Vec::new();
    }
    // The largest tensor the kernel reads or writes: a broadcast input is much smaller (a
    // fold's partial sums, the largest it touches, are read once each however many
    // iterations its invocations may loop).
    let largest = kernel
        .inputs
        .iter()
        .chain(&kernel.outputs)
        .map(|b| (b.ty.byte_size() as u64).div_ceil(4))
        .max()
        .unwrap_or(0);
    kernel
        .inputs
        .iter()
        .enumerate()
        .filter(|&(j, b)| {
            let words = (b.ty.byte_size() as u64).div_ceil(4);
            kernel.texture_inputs.get(j).is_none_or(Option::is_none)
                && words < min_words
                && words * BROADCAST_LOADS_PER_WORD <= loads
                && words * BROADCAST_LOADS_PER_WORD <= largest
        })
        .map(|(j, _)| j)
        .collect()
}

/// The invocations of one workgroup of a kernel's entry point, from its `@workgroup_size`.
fn workgroup_invocations(wgsl: &str) -> Option<u64> {
    let rest = wgsl.split("@workgroup_size(").nth(1)?;
    let dims = rest.split(')').next()?;
    dims.split(',')
        .map(|d| d.trim().trim_end_matches('u').parse::<u64>().ok())
        .try_fold(1u64, |acc, d| Some(acc * d?))
}

fn collect_defs<'f>(r: &'f Region, out: &mut HashMap<ValueId, &'f Operation>) {
    for op in &r.ops {
        for v in &op.results {
            out.insert(*v, op);
        }
        for sub in &op.regions {
            collect_defs(sub, out);
        }
    }
}

/// Lowers `f` (inlined, canonicalized, verified) for `target`.
pub fn lower(f: &Function, target: Target) -> Result<Lowered> {
    let body = f
        .body
        .as_ref()
        .ok_or_else(|| Error::invalid(format!("@{} has no body", f.name)))?;
    let mut all_defs = HashMap::new();
    collect_defs(body, &mut all_defs);
    let mut l = Lowering {
        f,
        all_defs,
        target,
        slots: HashMap::new(),
        slot_types: Vec::new(),
        kernels: Vec::new(),
        constants: Vec::new(),
        partitions: String::new(),
        textures: HashMap::new(),
    };
    let params = body
        .args
        .iter()
        .map(|&a| l.new_slot(a))
        .collect::<Result<Vec<_>>>()?;
    let mut program = l.region(body, "main")?;
    let results = l.returned(body)?;
    program.drop_unread_launches(&results);
    program.plan_updates(&results, &[]);
    program.plan_frees(&results);
    if let Some(min_words) = target.texture_reads {
        // Kernels bound to parts of buffers (windows over large tensors) keep storage reads;
        // their groups of four (a windowed subgroup row reduction's) become vec4 loads.
        let mut windowed = HashSet::new();
        chunked_kernels(&program, &mut windowed);
        // Each rewrite re-validates its kernel (a WGSL parse): spread over the cores.
        let none = TexturePolicy::default();
        let policies = &l.textures;
        let read_once_words = target.read_once_texture_words;
        crate::parallel::for_each_mut(&mut l.kernels, |k, kernel| {
            let policy = policies.get(&k).unwrap_or(&none);
            if windowed.contains(&k) {
                texture_reads::apply(
                    kernel,
                    u64::MAX,
                    target.max_texture_dimension,
                    target.max_sampled_textures,
                    target.caps,
                    &policy.windowed,
                    false,
                    None,
                );
                return;
            }
            // Loads of words an in-place update does not write, from a copy of them.
            texture_reads::apply_state_copies(
                kernel,
                target.max_texture_dimension,
                target.max_sampled_textures,
                target.caps,
            );
            // Kernels that read at data-dependent positions: only inputs read in marked groups
            // of four (a radix sort's runs of keys and items, each thread's own) take textures
            // or `vec4` loads, the others keep their buffers.
            // `WGPU_HLO_TEXTURE_READS=all` (min_words 1) keeps every eligible input.
            // `WGPU_HLO_TEXTURE_READS_ONCE=0`: no read-once policy (for comparisons).
            let min_words =
                if !policy.scattered && policy.read_once && min_words > 1 && read_once_words > 0 {
                    min_words.max(read_once_words)
                } else {
                    min_words
                };
            texture_reads::apply(
                kernel,
                min_words,
                target.max_texture_dimension,
                target.max_sampled_textures,
                target.caps,
                &policy.windowed,
                policy.scattered,
                None,
            );
            // Small inputs that many invocations read (a bias, per-channel scales, the two
            // vectors of an outer product), whatever the threshold above.
            if policy.broadcast && min_words > 1 {
                for j in broadcast_inputs(kernel, min_words) {
                    texture_reads::apply(
                        kernel,
                        1,
                        target.max_texture_dimension,
                        target.max_sampled_textures,
                        target.caps,
                        &policy.windowed,
                        policy.scattered,
                        Some(j),
                    );
                }
            }
        });
    }
    Ok(Lowered {
        program,
        kernels: l.kernels,
        slot_types: l.slot_types,
        params,
        results,
        constants: l.constants,
        partitions: l.partitions,
    })
}

/// The kernels `program` launches over parts of buffers (`Step::Chunked`), nested programs
/// included.
fn chunked_kernels(program: &Program, out: &mut HashSet<usize>) {
    for step in &program.steps {
        match step {
            Step::Chunked(c) => {
                out.insert(c.kernel);
            }
            Step::While(w) => {
                chunked_kernels(&w.cond, out);
                chunked_kernels(&w.body, out);
            }
            Step::Branch(b) => {
                for (p, _) in &b.branches {
                    chunked_kernels(p, out);
                }
            }
            _ => {}
        }
    }
}

impl<'f, 't> Lowering<'f, 't> {
    fn tensor(&self, v: ValueId) -> Result<TensorType> {
        match self.f.values.get(v.index()) {
            Some(Type::Tensor(t)) if t.is_static() => Ok(t.clone()),
            Some(Type::Tensor(t)) => Err(Error::unimplemented(format!(
                "dynamic shapes ({t}) are not supported"
            ))),
            Some(other) => Err(Error::unimplemented(format!(
                "values of type {other} are not supported"
            ))),
            None => Err(Error::internal(format!("value {v} out of range"))),
        }
    }

    /// Fresh slots for `values`, in order.
    fn new_slots(&mut self, values: &[ValueId]) -> Result<Vec<Slot>> {
        values.iter().map(|&v| self.new_slot(v)).collect()
    }

    /// The slots of `op`'s operands.
    fn operand_slots(&self, op: &Operation) -> Result<Vec<Slot>> {
        op.operands.iter().map(|v| self.slot(*v, op)).collect()
    }

    fn new_slot(&mut self, v: ValueId) -> Result<Slot> {
        let t = self.tensor(v)?;
        self.slot_types.push(t);
        let s = self.slot_types.len() - 1;
        self.slots.insert(v, s);
        Ok(s)
    }

    fn slot(&self, v: ValueId, op: &Operation) -> Result<Slot> {
        self.slots.get(&v).copied().ok_or_else(|| {
            Error::internal(format!(
                "{} ({}): value {v} has no buffer",
                op.name(),
                op.loc
            ))
        })
    }

    /// How the trip count of `op` (a `while` not counted at compile time) is computed when it
    /// starts, if its predicate is a conjunction of counter tests on 0-d 32- or 64-bit
    /// integers (`passes::trip_count::counter_tests`).
    fn trips_at_start(&self, op: &Operation) -> Option<TripsAtStart> {
        let tests = counter_tests(op, &self.all_defs)?;
        // Constants travel as i64 (in a serialized executable too).
        let fits = |v: i128| i64::try_from(v).is_ok();
        if !tests.iter().all(|t| {
            fits(t.step)
                && [t.init, t.bound]
                    .iter()
                    .all(|s| !matches!(s, Start::Const(c) if !fits(*c)))
        }) {
            return None;
        }
        let mut reads: Vec<(usize, ElementType)> = Vec::new();
        for t in &tests {
            // The counters (whose type bounds their range) and every value read.
            for k in [Some(t.counter), start_index(t.init), start_index(t.bound)]
                .into_iter()
                .flatten()
            {
                let ty = self.tensor(*op.operands.get(k)?).ok()?;
                if !ty.dims().is_empty()
                    || !ty.dtype.is_int()
                    || !matches!(ty.dtype.byte_size(), 4 | 8)
                {
                    return None;
                }
                if !reads.iter().any(|r| r.0 == k) {
                    reads.push((k, ty.dtype));
                }
            }
        }
        Some(TripsAtStart { tests, reads })
    }

    fn returned(&self, region: &Region) -> Result<Vec<Slot>> {
        let ret = region
            .ops
            .last()
            .filter(|o| o.op == Op::Return)
            .ok_or_else(|| Error::invalid("region does not end in a return"))?;
        ret.operands.iter().map(|v| self.slot(*v, ret)).collect()
    }

    fn region(&mut self, region: &'f Region, label: &str) -> Result<Program> {
        // One binding is left for a kernel's parameters.
        let budget = (self.target.max_storage_buffers as usize)
            .saturating_sub(1)
            .max(2);
        let part = fusion::partition(self.f, region, budget, self.target.cpu_adapter);
        self.partitions
            .push_str(&format!("region {label}:\n{}", part.describe(region)));
        let defs: HashMap<ValueId, &Operation> = region
            .ops
            .iter()
            .flat_map(|op| op.results.iter().map(move |r| (*r, op)))
            .collect();
        let mut program = Program::default();
        // A kernel computing only a scatter's indices, waiting to run inside that scatter's
        // kernels (`fusion::prologue::scatter_indices`): the scatter's op index and the kernel.
        let mut waiting: Option<(usize, &Group)> = None;
        for (k, node) in part.nodes.iter().enumerate() {
            if let Node::Kernel(g) = node {
                if let Some(si) =
                    fusion::prologue::scatter_indices(self.f, region, g, &part.nodes[k + 1..])
                {
                    if let Some((_, earlier)) = waiting.replace((si, g)) {
                        program.steps.extend(self.kernel(earlier, region, &defs)?);
                    }
                    continue;
                }
            }
            match (node, waiting) {
                (Node::Op(i), Some((si, g))) if *i == si => {
                    waiting = None;
                    if let Some(steps) = self.plan_steps(&region.ops[si], Some(g))? {
                        program.steps.extend(steps);
                        continue;
                    }
                    program.steps.extend(self.kernel(g, region, &defs)?);
                }
                (Node::Kernel(_) | Node::Constant(_) | Node::Alias { .. }, _) | (_, None) => {}
                (_, Some((_, g))) => {
                    waiting = None;
                    program.steps.extend(self.kernel(g, region, &defs)?);
                }
            }
            match node {
                Node::Kernel(g)
                    if g.outputs
                        .iter()
                        .all(|&v| self.tensor(v).is_ok_and(|t| t.num_elements() == 0)) =>
                {
                    // Nothing to compute: empty results are (empty) constants.
                    for &v in &g.outputs {
                        let ty = self.tensor(v)?;
                        let s = self.new_slot(v)?;
                        self.constants.push((s, crate::ir::Literal::zeros(ty)));
                    }
                }
                Node::Kernel(g) => {
                    let steps = self.kernel(g, region, &defs)?;
                    program.steps.extend(steps);
                }
                Node::Constant(i) => {
                    let op = &region.ops[*i];
                    if let (Op::Constant(lit), Some(&r)) = (&op.op, op.results.first()) {
                        let s = self.new_slot(r)?;
                        self.constants.push((s, lit.clone()));
                    }
                }
                Node::Alias { op, value, source } => {
                    let src = self.slot(*source, &region.ops[*op])?;
                    let dst = self.new_slot(*value)?;
                    program.steps.push(Step::Alias { src, dst });
                }
                Node::Updates {
                    ops,
                    producers,
                    outputs,
                } => {
                    let ops: Vec<&Operation> = ops.iter().map(|&i| &region.ops[i]).collect();
                    program
                        .steps
                        .extend(self.updates_step(&ops, producers, outputs, region, &defs)?);
                }
                Node::Op(i) => {
                    let op = &region.ops[*i];
                    if let Some(steps) = self.plan_steps(op, None)? {
                        program.steps.extend(steps);
                    } else if let Some(step) = self.op_step(op)? {
                        program.steps.push(step);
                    }
                }
            }
        }
        if let Some((_, g)) = waiting {
            program.steps.extend(self.kernel(g, region, &defs)?);
        }
        Ok(program)
    }

    /// The steps of kernel `g`: one launch, or a plan's launches. A merged kernel (rows,
    /// epilogue, horizontal) its emitter refuses is lowered as its parts.
    fn kernel(
        &mut self,
        g: &Group,
        region: &'f Region,
        defs: &HashMap<ValueId, &Operation>,
    ) -> Result<Vec<Step>> {
        let root = &region.ops[g.root];
        let name = format!("{}_{}", kind_name(g.kind), self.kernels.len());
        let in_context = |e: Error| {
            if e.message.contains(&root.loc.to_string()) {
                e
            } else {
                e.context(format!("{} at {}", root.name(), root.loc))
            }
        };
        // Reductions and dots too long for one invocation become several launches.
        let plan = match g.kind {
            KernelKind::Loop => None,
            KernelKind::Rows
            | KernelKind::Epilogue
            | KernelKind::Horizontal
            | KernelKind::Prologue => {
                let merged = match g.kind {
                    KernelKind::Epilogue => self.epilogue_kernel(g, region, defs, &name),
                    KernelKind::Prologue => self.prologue_kernel(g, region, defs, &name),
                    _ => self.merged_kernel(g, region, defs, &name),
                };
                return match merged {
                    Ok(steps) => Ok(steps),
                    Err(e) => {
                        log::debug!("{name}: lowering its {} parts apart: {e}", g.parts.len());
                        let mut steps = Vec::new();
                        for p in &g.parts {
                            steps.extend(self.kernel(p, region, defs)?);
                        }
                        Ok(steps)
                    }
                };
            }
            KernelKind::Reduce => {
                if let Some(steps) = self.pairwise_kernel(g, root, defs, &name)? {
                    return Ok(steps);
                }
                Some(reduce_kernel::plan(
                    &name,
                    self.f,
                    defs,
                    g,
                    root,
                    self.target,
                ))
            }
            // Convolutions the implicit-GEMM emitter covers; the rest as dots.
            KernelKind::Dot => Some(
                conv_kernel::plan(&name, self.f, g, root, self.target)
                    .transpose()
                    .unwrap_or_else(|| dot_kernel::plan(&name, self.f, defs, g, root, self.target)),
            ),
        };
        if let Some(plan) = plan {
            let plan = plan.map_err(in_context)?;
            // A reduction of a gather (the rows of an embedding table, summed) reads the
            // table at data-dependent positions too (see `windowed_inputs`).
            let first = self.kernels.len();
            let windowed: Vec<HashSet<usize>> = plan
                .kernels
                .iter()
                .map(|k| self.windowed_inputs(k, g, root))
                .collect();
            let steps = self.launch_plan(plan, root, &name)?;
            for (i, w) in windowed.into_iter().enumerate() {
                let policy = self.textures.entry(first + i).or_default();
                policy.windowed.extend(w);
                // The stages of a reduction or product (partial sums, folds, split-K): each
                // runs one code over its invocations, as a single kernel would.
                policy.broadcast = !policy.scattered && !matches!(g.kind, KernelKind::Horizontal);
            }
            return Ok(steps);
        }
        let mut kernel =
            loop_kernel::emit(&name, self.f, defs, g, self.target).map_err(in_context)?;
        // Tensors larger than one binding: launched a window at a time.
        if let Some(plan) = loop_kernel::windowed_plan(&name, self.f, defs, g, &kernel, self.target)
            .map_err(in_context)?
        {
            return self.launch_plan(plan, root, &name);
        }
        self.check(&mut kernel, root)?;
        self.launch(kernel, g, root)
    }

    /// One launch of `kernel`, the kernel of `g`.
    fn launch(&mut self, kernel: Kernel, g: &Group, root: &Operation) -> Result<Vec<Step>> {
        let args = kernel
            .inputs
            .iter()
            .map(|b| self.slot(b.value, root))
            .collect::<Result<Vec<_>>>()?;
        let results = self.new_slots(&g.outputs)?;
        // A small product reads its operands a few times each: like a read-once kernel.
        let small_dot = crate::fusion::prologue::dot_size(self.f, root)
            .is_some_and(|d| d.macs < SMALL_DOT_TEXTURE_MACS);
        let policy = TexturePolicy {
            windowed: self.windowed_inputs(&kernel, g, root),
            read_once: matches!(g.kind, KernelKind::Loop | KernelKind::Horizontal) || small_dot,
            scattered: false,
            broadcast: !matches!(g.kind, KernelKind::Horizontal),
        };
        self.textures.insert(self.kernels.len(), policy);
        self.kernels.push(kernel);
        Ok(vec![Step::Launch {
            kernel: self.kernels.len() - 1,
            args,
            results,
        }])
    }

    /// The inputs of `kernel` (the kernel of `g`, built around `root`) that it reads only
    /// through windows of at most a quarter of them or through gathers: every op of the
    /// group reading such an input is a `slice` or `dynamic_slice` of a small result (a scan
    /// step's row of its stacked residuals) or a `gather` (a lookup in a table). On CPU adapters texture reads copy each
    /// input whole before every launch: a GRU's backward step copied 400-800 KB stacks per
    /// kernel to read 16 KB of each (its value and gradient took 326 ms with texture reads,
    /// 224 ms without, on lavapipe).
    fn windowed_inputs(&self, kernel: &Kernel, g: &Group, root: &Operation) -> HashSet<usize> {
        let mut users: Vec<&Operation> = g
            .members
            .iter()
            .filter_map(|m| self.all_defs.get(m).copied())
            .collect();
        for part in &g.parts {
            users.extend(
                part.members
                    .iter()
                    .filter_map(|m| self.all_defs.get(m).copied()),
            );
            users.extend(
                part.outputs
                    .iter()
                    .filter_map(|m| self.all_defs.get(m).copied()),
            );
        }
        users.push(root);
        let mut out = HashSet::new();
        for (j, b) in kernel.inputs.iter().enumerate() {
            let Ok(t) = self.tensor(b.value) else {
                continue;
            };
            let size = t.num_elements();
            let mut readers = users
                .iter()
                .filter(|op| op.operands.contains(&b.value))
                .peekable();
            if readers.peek().is_none() {
                continue;
            }
            // Gathers read at data-dependent positions whatever their size (see
            // `TexturePolicy`: `jnp.take` of 1M from 1M 9.4 -> 4.3 ms without the texture),
            // unless they gather rows from a table that is not much larger than what they
            // gather ([`gathers_rows`]).
            let windows = readers.all(|op| {
                op.operands.first() == Some(&b.value)
                    && match &op.op {
                        Op::Gather { slice_sizes, .. } => !op
                            .results
                            .first()
                            .and_then(|&r| self.tensor(r).ok())
                            .is_some_and(|r| gathers_rows(slice_sizes, size, r.num_elements())),
                        Op::Slice { .. } | Op::DynamicSlice { .. } => op
                            .results
                            .first()
                            .and_then(|&r| self.tensor(r).ok())
                            .is_some_and(|r| r.num_elements() * 4 <= size),
                        _ => false,
                    }
            });
            if windows {
                out.insert(j);
            }
        }
        out
    }

    /// In-place updates merged by fusion (`fusion::updates`) as one step, computing the
    /// values of `producers` inline, or, when the merged kernel cannot be made, the producers'
    /// kernels and each update as its own step.
    fn updates_step(
        &mut self,
        ops: &[&'f Operation],
        producers: &[Group],
        outputs: &[ValueId],
        region: &'f Region,
        defs: &HashMap<ValueId, &Operation>,
    ) -> Result<Vec<Step>> {
        use crate::codegen::op_kernels::update;
        let name = format!("updates_{}", self.kernels.len());
        let inline: HashSet<ValueId> = producers
            .iter()
            .flat_map(|g| g.members.iter().copied())
            .collect();
        let merged = update::emit_many(
            &name,
            self.f,
            &self.all_defs,
            ops,
            &inline,
            outputs,
            self.target,
        )
        .and_then(|mut kernel| {
            let first = ops
                .first()
                .copied()
                .ok_or_else(|| Error::internal("no updates"))?;
            self.check(&mut kernel, first)?;
            if !kernel.parted.is_empty() {
                return Err(Error::unimplemented("updates of tensors bound in parts"));
            }
            Ok(kernel)
        });
        match merged {
            Ok(kernel) => {
                let mut args = Vec::with_capacity(kernel.inputs.len());
                for (b, op) in kernel.inputs.iter().zip(std::iter::repeat(ops[0])) {
                    args.push(self.slot(b.value, op)?);
                }
                let mut targets = Vec::with_capacity(ops.len());
                let mut results = Vec::with_capacity(ops.len());
                for op in ops {
                    targets.push(self.slot(op.operands[0], op)?);
                    results.push(self.new_slot(op.results[0])?);
                }
                let mut written = Vec::with_capacity(outputs.len());
                for &v in outputs {
                    written.push(self.new_slot(v)?);
                }
                // The stacks that a scan step's updates read one row of inline (a GRU's
                // `[50, 32, 128]` residuals) keep their textures: read from their buffers as
                // `vec4`s instead (`windowed_inputs`'s rule), the GRU's value and gradient
                // (`bench_everyday.py`) took 102-145 ms against 102-111, AMD EPYC host,
                // 2026-12-06.
                self.textures.insert(
                    self.kernels.len(),
                    TexturePolicy {
                        windowed: HashSet::new(),
                        read_once: true,
                        scattered: false,
                        broadcast: false,
                    },
                );
                self.kernels.push(kernel);
                Ok(vec![Step::Updates(Box::new(UpdatesStep {
                    kernel: self.kernels.len() - 1,
                    args,
                    takes: vec![false; targets.len()],
                    targets,
                    results,
                    outputs: written,
                }))])
            }
            Err(e) => {
                log::debug!("{name}: {} updates apart: {e}", ops.len());
                let mut steps = Vec::new();
                for g in producers {
                    steps.extend(self.kernel(g, region, defs)?);
                }
                for op in ops {
                    if let Some(step) = self.op_step(op)? {
                        steps.push(step);
                    }
                }
                Ok(steps)
            }
        }
    }

    /// The reduce `op` of `g` (a `Reduce` group, or a row group of that one reduction) as one
    /// tiled launch ([`pairwise`]) where that emitter takes it; `None` where it refuses.
    fn pairwise_kernel(
        &mut self,
        g: &Group,
        op: &Operation,
        defs: &HashMap<ValueId, &Operation>,
        name: &str,
    ) -> Result<Option<Vec<Step>>> {
        match pairwise::emit(name, self.f, defs, g, op, self.target) {
            Ok(mut kernel) => {
                self.check(&mut kernel, op)?;
                Ok(Some(self.launch(kernel, g, op)?))
            }
            Err(e) => {
                log::debug!("{name}: {e}");
                Ok(None)
            }
        }
    }

    /// The merged row kernel (kind `Rows`) or horizontal kernel of `g` as one launch, when its
    /// emitter accepts it and it passes the checks.
    fn merged_kernel(
        &mut self,
        g: &Group,
        region: &'f Region,
        defs: &HashMap<ValueId, &Operation>,
        name: &str,
    ) -> Result<Vec<Step>> {
        let root = &region.ops[g.root];
        if let [pass] = g.passes.as_slice() {
            if let [r] = pass.as_slice() {
                if let Some(op) = region.ops.get(*r) {
                    if let Some(steps) = self.pairwise_kernel(g, op, defs, name)? {
                        return Ok(steps);
                    }
                }
            }
        }
        let mut kernel = if g.kind == KernelKind::Rows {
            row_kernel::emit(name, self.f, defs, &region.ops, g, self.target)?
        } else {
            loop_kernel::emit_horizontal(name, self.f, defs, g, self.target)?
        };
        self.check(&mut kernel, root)?;
        self.launch(kernel, g, root)
    }

    /// The dot of `g` (kind `Epilogue`) with its epilogue at its stores, when the dot is one
    /// kernel and the epilogue emitter accepts it.
    fn epilogue_kernel(
        &mut self,
        g: &Group,
        region: &'f Region,
        defs: &HashMap<ValueId, &Operation>,
        name: &str,
    ) -> Result<Vec<Step>> {
        let [dot, ep] = g.parts.as_slice() else {
            return Err(Error::internal(format!(
                "{name}: epilogue without its two parts"
            )));
        };
        let root = &region.ops[dot.root];
        let kernel = self.single_dot_kernel(dot, root, defs, name)?;
        let mut kernel = epilogue::apply(self.f, defs, kernel, ep, &g.outputs, self.target)?;
        self.check(&mut kernel, root)?;
        self.launch(kernel, g, root)
    }

    /// The dot of `g` (kind `Prologue`: producers, then a `Dot` or `Epilogue` group) reading
    /// its fused operands through the producers, with its epilogue if it has one, when the
    /// dot is one kernel and the emitters accept both.
    fn prologue_kernel(
        &mut self,
        g: &Group,
        region: &'f Region,
        defs: &HashMap<ValueId, &Operation>,
        name: &str,
    ) -> Result<Vec<Step>> {
        let Some((inner, producers)) = g.parts.split_last() else {
            return Err(Error::internal(format!("{name}: prologue without parts")));
        };
        let (dot, ep) = match (inner.kind, inner.parts.as_slice()) {
            (KernelKind::Dot, _) => (inner, None),
            (KernelKind::Epilogue, [dot, ep]) => (dot, Some(ep)),
            _ => {
                return Err(Error::internal(format!(
                    "{name}: prologue of a {:?} kernel",
                    inner.kind
                )))
            }
        };
        let root = &region.ops[dot.root];
        let kernel = self.single_dot_kernel(dot, root, defs, name)?;
        let mut kernel = prologue::apply(self.f, defs, kernel, producers, self.target)?;
        let Some(ep) = ep else {
            self.check(&mut kernel, root)?;
            return self.launch(kernel, g, root);
        };
        match epilogue::apply(self.f, defs, kernel.clone(), ep, &g.outputs, self.target) {
            Ok(mut merged) => {
                self.check(&mut merged, root)?;
                self.launch(merged, g, root)
            }
            // The dot with its prologue, then the epilogue as a kernel of its own.
            Err(e) => {
                log::debug!("{name}: epilogue apart: {e}");
                self.check(&mut kernel, root)?;
                let mut steps = self.launch(kernel, dot, root)?;
                steps.extend(self.kernel(ep, region, defs)?);
                Ok(steps)
            }
        }
    }

    /// The one kernel of dot or convolution group `dot` (rooted at `root`), or an error when
    /// its plan takes several launches or temporaries (split-K).
    fn single_dot_kernel(
        &self,
        dot: &Group,
        root: &Operation,
        defs: &HashMap<ValueId, &Operation>,
        name: &str,
    ) -> Result<Kernel> {
        let plan = conv_kernel::plan(name, self.f, dot, root, self.target)
            .transpose()
            .unwrap_or_else(|| {
                dot_kernel::plan_whole(name, self.f, defs, dot, root, self.target)
            })?;
        let single = plan.temps.is_empty()
            && plan.launches.len() == 1
            && plan.launches.iter().all(|l| {
                l.kernel == 0 && l.params.is_empty() && l.update.is_none() && l.chunks.is_empty()
            });
        match (single, plan.kernels.into_iter().next()) {
            (true, Some(kernel)) => Ok(kernel),
            _ => Err(Error::unimplemented(format!(
                "{name}: the dot is not a single kernel"
            ))),
        }
    }

    /// The steps of an op computed by a multi-kernel plan (long sorts, scatters sorted by index,
    /// long prefix scans, large FFTs, `cholesky`, `triangular_solve`), or `None` for other ops.
    /// With `inline`, the kernel computing a scatter's indices that
    /// [`fusion::prologue::scatter_indices`] held back: its values are computed where the
    /// scatter's kernels read them, and `None` where the plan does not take them (a kernel
    /// binds one of them, no plan, or an error), `inline` then running first as before.
    fn plan_steps(
        &mut self,
        op: &'f Operation,
        inline: Option<&Group>,
    ) -> Result<Option<Vec<Step>>> {
        use crate::codegen::op_kernels::{
            block_reflector, fft, householder, jacobi, linalg, lu, reduce_window, scan, scatter,
            sort,
        };
        use crate::fusion::in_place::in_place_scatter;
        if op
            .results
            .iter()
            .all(|&v| self.tensor(v).is_ok_and(|t| t.num_elements() == 0))
        {
            return Ok(None);
        }
        let name = format!("{}_{}", op_kernel_prefix(op), self.kernels.len());
        let (f, defs, target) = (self.f, &self.all_defs, self.target);
        let plan = match op.op {
            // Long prefix scans, else windows too long for one invocation, split.
            Op::ReduceWindow { .. } => match scan::plan(&name, f, defs, op, target) {
                Ok(None) => reduce_window::plan(&name, f, defs, op, target),
                other => other,
            },
            Op::Fft { .. } => fft::plan(&name, f, defs, op, target),
            Op::Sort { .. } | Op::TopK { .. } => sort::bitonic(&name, f, defs, op, target),
            Op::Cholesky { .. } => linalg::cholesky(&name, f, op, target).map(Some),
            Op::TriangularSolve { .. } => linalg::triangular_solve(&name, f, op, target).map(Some),
            Op::CustomCall(ref c) if jacobi::handles(c) => {
                jacobi::plan(&name, f, op, c, target).map(Some)
            }
            Op::CustomCall(ref c) if lu::handles(c) => lu::plan(&name, f, op, target).map(Some),
            Op::CustomCall(ref c) if block_reflector::handles(c) => {
                block_reflector::plan(&name, f, op, c, target).map(Some)
            }
            Op::CustomCall(ref c) if householder::handles(c) => {
                householder::plan(&name, f, op, target).map(Some)
            }
            // Non-overlapping scatters update in place instead (`op_step`).
            Op::Scatter { .. } if !in_place_scatter(f, op) => {
                let held = |v: ValueId| inline.is_some_and(|g| g.members.contains(&v));
                scatter::sorted(&name, f, defs, op, target, &held)
            }
            _ => return Ok(None),
        };
        if let Some(g) = inline {
            let takes = plan.as_ref().is_ok_and(|p| {
                p.as_ref().is_some_and(|p| {
                    p.kernels
                        .iter()
                        .flat_map(|k| k.inputs.iter().chain(&k.outputs))
                        .all(|b| !g.members.contains(&b.value))
                })
            });
            if !takes {
                return Ok(None);
            }
        }
        let Some(plan) = plan.map_err(|e| e.context(format!("{} at {}", op.name(), op.loc)))?
        else {
            return Ok(None);
        };
        self.launch_plan(plan, op, &name).map(Some)
    }

    /// Refuses a kernel the target cannot run correctly: one whose invocations loop more than
    /// `max_invocation_iterations` times (drivers would cut the loops short), or that binds a
    /// buffer larger than the adapter's `max_storage_buffer_binding_size`.
    fn check(&self, kernel: &mut Kernel, op: &Operation) -> Result<()> {
        self.check_parts(kernel, op, &[])
    }

    /// Whether the kernels of `op` read each element of an input of `elements` elements
    /// several times: a product or convolution with four or more multiply-adds per element,
    /// the linear algebra kernels.
    fn reads_many_times(&self, op: &Operation, elements: u64) -> bool {
        match &op.op {
            Op::DotGeneral { .. } | Op::Convolution(_) => {
                crate::fusion::prologue::dot_size(self.f, op)
                    .is_some_and(|d| d.macs >= elements.saturating_mul(4))
            }
            Op::Cholesky { .. } | Op::TriangularSolve { .. } | Op::CustomCall(_) => true,
            _ => false,
        }
    }

    /// [`Self::check`] of a kernel whose binding `i` is bound in the byte ranges `parts[i]`
    /// where that is not empty: each range is checked against the binding limit and the
    /// offset alignment instead of the whole tensor. Other inputs larger than one binding are
    /// bound in parts (`codegen::parted`), which rewrites the kernel.
    fn check_parts(
        &self,
        kernel: &mut Kernel,
        op: &Operation,
        parts: &[Vec<(u64, u64)>],
    ) -> Result<()> {
        let t = &self.target;
        let bindings: Vec<_> = kernel
            .inputs
            .iter()
            .chain(&kernel.outputs)
            .cloned()
            .collect();
        let chunked = parts.iter().any(|p| !p.is_empty());
        for (j, b) in bindings.iter().enumerate() {
            let windowed = parts.get(j).is_some_and(|p| !p.is_empty());
            if !windowed && !kernel.is_parted(j) && large(&b.ty, t.max_binding_size) {
                // On CPU adapters an input that fits a texture is read through one instead:
                // a texture has no binding limit, and llvmpipe fetches texels three or four
                // times faster than it loads from storage buffers on AMD hosts. Lavapipe
                // (AMD, 2 cores), 6000 x 6000 x 6000 f32 dot: 80 s with its operands in
                // parts, 3000^3 2.0-2.6 s through textures against 7.0 s from storage. Only
                // where the kernel reads each element several times: the copy into the texture
                // is of the whole input, on every launch (read-once kernels take no textures,
                // see `READ_ONCE_TEXTURE_WORDS`).
                if j < kernel.inputs.len()
                    && !chunked
                    && self.reads_many_times(op, b.ty.num_elements() as u64)
                    && t.texture_reads.is_some()
                    && kernel.texture_inputs.get(j).is_none_or(Option::is_none)
                    && texture_reads::apply(
                        kernel,
                        1,
                        t.max_texture_dimension,
                        t.max_sampled_textures,
                        t.caps,
                        &HashSet::new(),
                        TexturePolicy::of_op(op).is_some(),
                        Some(j),
                    )
                {
                    continue;
                }
                parted::apply(
                    kernel,
                    j,
                    (
                        t.max_binding_size,
                        t.min_binding_offset_alignment,
                        t.max_storage_buffers,
                    ),
                    t.caps,
                    t.adapter,
                )
                .map_err(|e| e.context(format!("{} at {}", op.name(), op.loc)))?;
            }
        }
        if kernel.iterations > t.max_invocation_iterations {
            return Err(Error::resource_exhausted(format!(
                "{} at {}: kernel {} would run up to {} loop iterations per invocation, more than \
                 the {} allowed on adapter {} (WGPU_HLO_MAX_LOOP); it cannot be split further",
                op.name(),
                op.loc,
                kernel.name,
                kernel.iterations,
                t.max_invocation_iterations,
                t.adapter
            )));
        }
        for (i, b) in kernel.inputs.iter().chain(&kernel.outputs).enumerate() {
            if kernel.is_parted(i) || kernel.texture_inputs.get(i).is_some_and(Option::is_some) {
                continue;
            }
            if let Some(parts) = parts.get(i).filter(|p| !p.is_empty()) {
                let align = t.min_binding_offset_alignment.max(1);
                if let Some((offset, size)) = parts
                    .iter()
                    .find(|&&(o, s)| o % align != 0 || s > t.max_binding_size || s % 4 != 0)
                {
                    return Err(Error::internal(format!(
                        "{} at {}: kernel {} binds bytes {offset}..+{size} of a {} tensor, \
                         not a valid part on adapter {}",
                        op.name(),
                        op.loc,
                        kernel.name,
                        b.ty,
                        t.adapter
                    )));
                }
                continue;
            }
            let bytes = b.ty.num_elements() as u64 * b.ty.dtype.byte_size() as u64;
            if bytes > t.max_binding_size {
                return Err(Error::resource_exhausted(format!(
                    "{} at {}: kernel {} binds a {} buffer of {bytes} bytes, more than adapter \
                     {}'s max_storage_buffer_binding_size of {} bytes",
                    op.name(),
                    op.loc,
                    kernel.name,
                    b.ty,
                    t.adapter,
                    t.max_binding_size
                )));
            }
        }
        Ok(())
    }

    /// The launches of `plan`, computing `op`'s results.
    fn launch_plan(
        &mut self,
        plan: op_kernels::Plan,
        op: &'f Operation,
        name: &str,
    ) -> Result<Vec<Step>> {
        use crate::codegen::op_kernels as k;
        let mut plan = plan;
        for (i, kernel) in plan.kernels.iter_mut().enumerate() {
            // The parts of each binding that chunked launches bind.
            let mut parts = vec![Vec::new(); kernel.inputs.len() + kernel.outputs.len()];
            for c in plan
                .launches
                .iter()
                .filter(|l| l.kernel == i)
                .flat_map(|l| &l.chunks)
            {
                for (p, r) in parts.iter_mut().zip(&c.ranges) {
                    p.extend(*r);
                }
            }
            self.check_parts(kernel, op, &parts)?;
        }
        // Each launch writing a temporary gives it a fresh slot: `current[t]` is its latest.
        let mut current: Vec<Option<Slot>> = vec![None; plan.temps.len()];
        let temp_of = |v: ValueId| (0..plan.temps.len()).find(|&t| k::temp(t) == v);
        let first = self.kernels.len();
        if TexturePolicy::of_op(op).is_some() {
            for k in first..first + plan.kernels.len() {
                self.textures
                    .insert(k, TexturePolicy::of_op(op).unwrap_or_default());
            }
        }
        // A small product's operands are read a few times each (see `TexturePolicy`).
        if crate::fusion::prologue::dot_size(self.f, op)
            .is_some_and(|d| d.macs < SMALL_DOT_TEXTURE_MACS)
        {
            for k in first..first + plan.kernels.len() {
                self.textures.insert(
                    k,
                    TexturePolicy {
                        windowed: HashSet::new(),
                        read_once: true,
                        scattered: false,
                        broadcast: false,
                    },
                );
            }
        }
        let kernels: Vec<(Vec<ValueId>, Vec<ValueId>)> = plan
            .kernels
            .iter()
            .map(|kl| {
                (
                    kl.inputs.iter().map(|b| b.value).collect(),
                    kl.outputs.iter().map(|b| b.value).collect(),
                )
            })
            .collect();
        self.kernels.extend(plan.kernels);
        let mut steps = Vec::new();
        for launch in plan.launches {
            let (inputs, outputs) = &kernels[launch.kernel];
            if !launch.chunks.is_empty() {
                // One dispatch per chunk, all into the same fresh results.
                let mut chunks = Vec::new();
                for c in &launch.chunks {
                    let mut args = Vec::new();
                    for &v in inputs {
                        args.push(if v == k::PARAMS {
                            self.params_slot(&c.params)?
                        } else if let Some(t) = temp_of(v) {
                            current[t].ok_or_else(|| {
                                Error::internal(format!(
                                    "{name}: temporary {t} read before written"
                                ))
                            })?
                        } else {
                            self.slot(v, op)?
                        });
                    }
                    chunks.push(ChunkLaunch {
                        args,
                        ranges: c.ranges.clone(),
                    });
                }
                let mut results = Vec::new();
                for &v in outputs {
                    results.push(match temp_of(v) {
                        Some(t) => {
                            let s = self.anonymous_slot(plan.temps[t].clone());
                            current[t] = Some(s);
                            s
                        }
                        None => self.new_slot(v)?,
                    });
                }
                steps.push(Step::Chunked(Box::new(ChunkedStep {
                    kernel: first + launch.kernel,
                    results,
                    chunks,
                })));
                continue;
            }
            let mut args = Vec::new();
            for &v in inputs {
                args.push(if v == k::PARAMS {
                    self.params_slot(&launch.params)?
                } else if let Some(t) = temp_of(v) {
                    current[t].ok_or_else(|| {
                        Error::internal(format!("{name}: temporary {t} read before written"))
                    })?
                } else {
                    self.slot(v, op)?
                });
            }
            // The buffer updated in place, if any: the latest of its temporary.
            let target = match launch.update {
                Some(v) => {
                    if outputs.len() != 1 {
                        return Err(Error::internal(format!(
                            "{name}: an updating launch needs one output"
                        )));
                    }
                    Some(match temp_of(v) {
                        Some(t) => current.get(t).copied().flatten().ok_or_else(|| {
                            Error::internal(format!("{name}: temporary {t} updated before written"))
                        })?,
                        None if op.operands.contains(&v) => self.slot(v, op)?,
                        None => {
                            return Err(Error::internal(format!(
                                "{name}: an update of {v}, neither a temporary nor an operand"
                            )))
                        }
                    })
                }
                None => None,
            };
            let mut results = Vec::new();
            for &v in outputs {
                results.push(match temp_of(v) {
                    Some(t) => {
                        let s = self.anonymous_slot(plan.temps[t].clone());
                        current[t] = Some(s);
                        s
                    }
                    None => self.new_slot(v)?,
                });
            }
            steps.push(match (target, results.first()) {
                (Some(target), Some(&result)) => Step::Update {
                    kernel: first + launch.kernel,
                    args,
                    target,
                    result,
                    take: false,
                },
                _ => Step::Launch {
                    kernel: first + launch.kernel,
                    args,
                    results,
                },
            });
        }
        Ok(steps)
    }

    /// A constant slot holding a launch's parameters (`u32`s).
    fn params_slot(&mut self, params: &[u32]) -> Result<Slot> {
        let ty = crate::ir::TensorType::new(vec![params.len() as i64], crate::ir::ElementType::U32);
        let values: Vec<crate::ir::Scalar> = params
            .iter()
            .map(|&p| crate::ir::Scalar::Int(p as i128))
            .collect();
        let lit = crate::ir::Literal::from_scalars(ty.clone(), &values)?;
        let s = self.anonymous_slot(ty);
        self.constants.push((s, lit));
        Ok(s)
    }

    /// A buffer slot for an intermediate that is no value of the program.
    fn anonymous_slot(&mut self, t: crate::ir::TensorType) -> Slot {
        self.slot_types.push(t);
        self.slot_types.len() - 1
    }

    /// The loop `op` run whole inside one kernel (`codegen::while_kernel`), where it can be.
    fn while_kernel(&mut self, op: &'f Operation) -> Result<Option<Step>> {
        let name = format!("while_{}", self.kernels.len());
        let emitted =
            crate::codegen::while_kernel::emit(&name, self.f, &self.all_defs, op, self.target);
        let wk = match emitted {
            Ok(Some(wk)) => wk,
            Ok(None) => return Ok(None),
            Err(e) => {
                log::debug!("{name}: the loop at {} runs from the host: {e}", op.loc);
                return Ok(None);
            }
        };
        let mut kernel = wk.kernel;
        if let Err(e) = self.check(&mut kernel, op) {
            log::debug!("{name}: the loop at {} runs from the host: {e}", op.loc);
            return Ok(None);
        }
        // The first inputs are the initial values of the states that change and are not
        // updated in place (under placeholders); the regions' arguments of the others read
        // their initial values.
        let changing = &wk.changing;
        let arg_of = |v: ValueId| {
            op.regions
                .iter()
                .find_map(|r| r.args.iter().position(|&a| a == v))
        };
        let mut states = 0;
        let args = kernel
            .inputs
            .iter()
            .map(|b| {
                let k = match crate::codegen::while_kernel::placeholder_state(b.value) {
                    Some(k) => {
                        states += 1;
                        Some(k)
                    }
                    None => arg_of(b.value),
                };
                match k.and_then(|k| op.operands.get(k)) {
                    Some(&v) => self.slot(v, op),
                    None => self.slot(b.value, op),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let in_place: Vec<Option<usize>> = changing
            .iter()
            .zip(&wk.in_place)
            .map(|(&k, &ip)| ip.then_some(k))
            .collect();
        let mut results = Vec::new();
        let mut same = Vec::new();
        for (k, (&r, &v)) in op.results.iter().zip(&op.operands).enumerate() {
            let s = self.new_slot(r)?;
            if changing.contains(&k) {
                results.push(s);
            } else {
                same.push((s, self.slot(v, op)?));
            }
        }
        let flag = self.anonymous_slot(TensorType::new(vec![1], crate::ir::ElementType::U32));
        // A loop whose elements stop on their own has no trip count: the flag says when.
        let (trip_count, trips_at_start) = match trip_count(op, &self.all_defs) {
            _ if wk.each => (None, None),
            Some(n) => (Some(n), None),
            None => (None, self.trips_at_start(op)),
        };
        self.kernels.push(kernel);
        Ok(Some(Step::WhileKernel(Box::new(WhileKernelStep {
            kernel: self.kernels.len() - 1,
            args,
            states,
            results,
            in_place,
            same,
            init: self.operand_slots(op)?,
            flag,
            per_launch: wk.per_launch,
            trip_count,
            trips_at_start,
            clear_flag: wk.each,
            init_takes: vec![false; op.operands.len()],
            // Only with the trip count known here (what `every_row_written` proves from).
            fresh: wk
                .fresh
                .iter()
                .map(|&f| f && trip_count.is_some())
                .collect(),
        }))))
    }

    /// A step for an op that is not a kernel.
    fn op_step(&mut self, op: &'f Operation) -> Result<Option<Step>> {
        let unsupported = || {
            let what = match &op.op {
                Op::CustomCall(c) => format!("{} @{}", op.name(), c.call_target_name),
                _ => op.name().to_string(),
            };
            Error::unimplemented(format!(
                "{}: op {what} is not supported on adapter {}",
                op.loc, self.target.adapter
            ))
        };
        match &op.op {
            Op::Return => Ok(None),
            // `lax.dce_sink`: keeps its operand's computation alive and does nothing else.
            Op::CustomCall(c) if c.call_target_name == "dce_sink" && op.results.is_empty() => {
                Ok(None)
            }
            Op::While => {
                if let Some(step) = self.while_kernel(op)? {
                    return Ok(Some(step));
                }
                let [cond, body] = &op.regions[..] else {
                    return Err(Error::invalid(format!(
                        "{}: while needs two regions",
                        op.loc
                    )));
                };
                let init = self.operand_slots(op)?;
                // Both regions read the loop state from the same slots.
                let args = self.new_slots(&cond.args)?;
                for (b, &s) in body.args.iter().zip(&args) {
                    self.slots.insert(*b, s);
                }
                let mut cond_p = self.region(cond, "while.cond")?;
                let cond_result = *self.returned(cond)?.first().ok_or_else(|| {
                    Error::invalid(format!("{}: while cond returns nothing", op.loc))
                })?;
                cond_p.drop_unread_launches(&[cond_result]);
                cond_p.plan_updates(&[cond_result], &[]);
                cond_p.plan_frees(&[cond_result]);
                let mut body_p = self.region(body, "while.body")?;
                let body_results = self.returned(body)?;
                body_p.drop_unread_launches(&body_results);
                body_p.plan_updates(&body_results, &args);
                body_p.plan_frees(&body_results);
                let results = op
                    .results
                    .iter()
                    .map(|&r| self.new_slot(r))
                    .collect::<Result<Vec<_>>>()?;
                let trip_count = trip_count(op, &self.all_defs);
                let trips_at_start = match trip_count {
                    Some(_) => None,
                    None => self.trips_at_start(op),
                };
                // Stacks every row of which the loop writes need no initial value (each
                // started as a copy of the zeros they share: a GRU's ten residual stacks).
                let fresh = (0..init.len())
                    .map(|k| {
                        trip_count.is_some()
                            && crate::codegen::while_kernel::fresh_rows_enabled()
                            && crate::passes::whole_loops::stacked(self.f, op, k).is_some_and(
                                |st| {
                                    crate::passes::whole_loops::every_row_written(
                                        self.f,
                                        op,
                                        &self.all_defs,
                                        &st,
                                    )
                                },
                            )
                    })
                    .collect();
                Ok(Some(Step::While(Box::new(WhileStep {
                    init_takes: vec![false; init.len()],
                    fresh,
                    init,
                    args,
                    cond: cond_p,
                    cond_result,
                    body: body_p,
                    body_results,
                    results,
                    trip_count,
                    trips_at_start,
                }))))
            }
            Op::If | Op::Case => {
                let selector = self.slot(op.operands[0], op)?;
                let mut branches = Vec::new();
                for (i, r) in op.regions.iter().enumerate() {
                    let mut p = self.region(r, &format!("{}.branch{i}", op.name()))?;
                    let res = self.returned(r)?;
                    p.drop_unread_launches(&res);
                    p.plan_updates(&res, &[]);
                    p.plan_frees(&res);
                    branches.push((p, res));
                }
                let results = op
                    .results
                    .iter()
                    .map(|&r| self.new_slot(r))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Some(Step::Branch(Box::new(BranchStep {
                    selector,
                    is_if: op.op == Op::If,
                    branches,
                    results,
                }))))
            }
            Op::CustomCall(c) if c.call_target_name == HOST_CALLBACK_TARGET => {
                let target = host_call_id(c.backend_config.as_ref()).ok_or_else(|| {
                    Error::invalid(format!(
                        "{}: custom_call @{HOST_CALLBACK_TARGET} needs the host function's id \
                         (a decimal number) as its backend_config",
                        op.loc
                    ))
                })?;
                let args = self.operand_slots(op)?;
                let results = self.new_slots(&op.results)?;
                Ok(Some(Step::HostCall(Box::new(HostCallStep {
                    target,
                    name: format!("@{HOST_CALLBACK_TARGET} at {}", op.loc),
                    args,
                    results,
                }))))
            }
            Op::DynamicUpdateSlice | Op::Scatter { .. }
                if crate::fusion::in_place::in_place(self.f, op)
                    || crate::fusion::in_place::in_place_scatter(self.f, op) =>
            {
                use crate::codegen::op_kernels::update;
                let name = format!("update_{}", self.kernels.len());
                let mut kernel = if op.op == Op::DynamicUpdateSlice {
                    update::emit(&name, self.f, &self.all_defs, op, self.target)
                } else {
                    update::emit_scatter(&name, self.f, &self.all_defs, op, self.target)
                }
                .map_err(|e| e.context(format!("{} at {}", op.name(), op.loc)))?;
                self.check(&mut kernel, op)?;
                let args = kernel
                    .inputs
                    .iter()
                    .map(|b| self.slot(b.value, op))
                    .collect::<Result<Vec<_>>>()?;
                let target = self.slot(op.operands[0], op)?;
                let result = self.new_slot(op.results[0])?;
                if let Some(policy) = TexturePolicy::of_op(op) {
                    self.textures.insert(self.kernels.len(), policy);
                }
                self.kernels.push(kernel);
                Ok(Some(Step::Update {
                    kernel: self.kernels.len() - 1,
                    args,
                    target,
                    result,
                    take: false,
                }))
            }
            _ if !op.results.is_empty()
                && op
                    .results
                    .iter()
                    .all(|&v| self.tensor(v).is_ok_and(|t| t.num_elements() == 0)) =>
            {
                // Nothing to compute: empty results are (empty) constants.
                for &v in &op.results {
                    let ty = self.tensor(v)?;
                    let s = self.new_slot(v)?;
                    self.constants.push((s, crate::ir::Literal::zeros(ty)));
                }
                Ok(None)
            }
            _ => {
                let name = format!("{}_{}", op_kernel_prefix(op), self.kernels.len());
                let Some(mut kernel) =
                    op_kernels::emit(&name, self.f, &self.all_defs, op, self.target).map_err(
                        |e| {
                            if e.message.contains(&op.loc.to_string()) {
                                e
                            } else {
                                e.context(format!("{} at {}", op.name(), op.loc))
                            }
                        },
                    )?
                else {
                    return Err(unsupported());
                };
                self.check(&mut kernel, op)?;
                let args = kernel
                    .inputs
                    .iter()
                    .map(|b| self.slot(b.value, op))
                    .collect::<Result<Vec<_>>>()?;
                let results = self.new_slots(&op.results)?;
                if let Some(policy) = TexturePolicy::of_op(op) {
                    self.textures.insert(self.kernels.len(), policy);
                }
                self.kernels.push(kernel);
                Ok(Some(Step::Launch {
                    kernel: self.kernels.len() - 1,
                    args,
                    results,
                }))
            }
        }
    }
}

/// The id of a host call: its `backend_config`, a decimal number (as a string, or as the
/// `id` entry of a typed-FFI dictionary).
fn host_call_id(config: Option<&Attr>) -> Option<u64> {
    match config? {
        Attr::String(s) => s.trim().parse().ok(),
        Attr::Dict(entries) => match crate::ir::attr::find_attr(entries, "id")? {
            Attr::Int(v, _) => u64::try_from(*v).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Kernel name prefix of a standalone op (`scatter`, `sort`, ...).
fn op_kernel_prefix(op: &Operation) -> String {
    let n = op.name();
    n.rsplit('.').next().unwrap_or("op").to_string()
}

fn kind_name(k: KernelKind) -> &'static str {
    match k {
        KernelKind::Loop => "fusion",
        KernelKind::Reduce => "reduce",
        KernelKind::Dot => "dot",
        KernelKind::Rows => "rows",
        KernelKind::Epilogue | KernelKind::Prologue => "dot",
        KernelKind::Horizontal => "horizontal",
    }
}

/// The loop operand a counter test's value is, if it is not a constant.
fn start_index(s: Start) -> Option<usize> {
    match s {
        Start::Init(k) => Some(k),
        Start::Const(_) => None,
    }
}
