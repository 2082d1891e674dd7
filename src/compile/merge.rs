//! Launch merging: small launches that do not depend on each other become one dispatch
//! (`codegen::merged` writes the kernel). Fusion's horizontal pass merges tiny loop kernels
//! before code generation; this pass works on the finished program, so it merges any kernels:
//! the independent dots of a recurrent step, a reduction beside an elementwise kernel, an op
//! kernel beside a loop.
//!
//! In each run of steps between control flow, host calls and chunked launches (in-place
//! updates are crossed by launches that read neither the updated buffer nor its result), a
//! launch joins the earliest open merged launch whose position already has all
//! its arguments: it moves up to it. Moving a launch up never moves a use past a `Free`
//! (frees follow last uses) and only lengthens the life of the moved launch's own results,
//! which is why only launches of small results move ([`MAX_PART_BYTES`]).
//! `WGPU_HLO_MERGE_LAUNCHES=0` (or `CompileOptions::merge_launches`) turns it off.

use std::collections::HashMap;

use super::program::{Program, Slot, Step, UpdatesStep};
use crate::codegen::kernel::Kernel;
use crate::codegen::merged::{self, Mergeable};
use crate::target::Target;

/// Most launches one merged launch takes (its WGSL, and its driver compile, grow with each).
pub const MAX_PARTS: usize = 8;

/// Bytes of results a launch may write to be merged on a GPU: the launch's own cost is then
/// a good share of its time, and moving it up holds little memory longer. A guess: no GPU has
/// measured it.
pub const MAX_PART_BYTES: u64 = 1 << 20;

/// [`MAX_PART_BYTES`] on CPU adapters. A GRU step's dots (32 x 128 results, 16 KiB) compute in
/// less than a launch costs on llvmpipe; an MLP's 128 x 512 dots (256 KiB) do not, and merged
/// two of them ran slower than apart (0.84 against 0.29 + 0.25 ms).
pub const MAX_PART_BYTES_CPU: u64 = 1 << 16;

/// Most WGSL bytes of the parts of one merged kernel on CPU adapters: llvmpipe's compile time
/// grows faster than the code (5 dots of a GRU's backward step: 0.95 s merged against 0.55 s
/// apart).
pub const MAX_WGSL_BYTES_CPU: usize = 16 << 10;

/// WGSL bytes of a part of one workgroup that may join a merged kernel on CPU adapters past
/// [`MAX_WGSL_BYTES_CPU`]: a loop's counter (~0.7 KiB) beside an LSTM step's 23 KiB dot adds
/// little to the driver's compile, and saves a launch (~50 µs on llvmpipe) every step. Small
/// kernels of many workgroups do not join: betainc's 1.8 KiB sum over 4096 floats beside its
/// 57 KiB series kernel made one launch of 0.76 ms where the two took 0.33 + 0.06.
pub const TINY_WGSL_BYTES: usize = 2 << 10;

/// Whether parts of at most [`TINY_WGSL_BYTES`] join past the WGSL bound;
/// `WGPU_HLO_TINY_PARTS=0` turns it off (for comparisons).
fn tiny_parts() -> bool {
    !crate::fusion::switched_off("WGPU_HLO_TINY_PARTS")
}

/// [`MAX_PART_BYTES`], or [`MAX_PART_BYTES_CPU`] on CPU adapters.
fn max_part_bytes(cpu_adapter: bool) -> u64 {
    if cpu_adapter {
        MAX_PART_BYTES_CPU
    } else {
        MAX_PART_BYTES
    }
}

struct Cx<'a, 'b> {
    kernels: &'a [Kernel],
    infos: HashMap<usize, Option<Mergeable>>,
    made: Vec<Kernel>,
    target: Target<'b>,
}

impl Cx<'_, '_> {
    fn info(&mut self, k: usize) -> Option<Mergeable> {
        let kernels = self.kernels;
        let cpu = self.target.cpu_adapter;
        self.infos
            .entry(k)
            .or_insert_with(|| {
                let kernel = kernels.get(k)?;
                let bytes: u64 = kernel.outputs.iter().map(|o| o.ty.byte_size() as u64).sum();
                if bytes > max_part_bytes(cpu) {
                    return None;
                }
                merged::inspect(kernel)
            })
            .clone()
    }

    /// [`Cx::info`] of an update step's kernel, whose outputs are the buffers it updates in
    /// part: bounded by what its invocations write (at most 4 words each an output) instead.
    fn updates_info(&mut self, k: usize) -> Option<Mergeable> {
        let kernel = self.kernels.get(k)?;
        let info = merged::inspect(kernel)?;
        let max = max_part_bytes(self.target.cpu_adapter);
        let written = info
            .groups
            .saturating_mul(u64::from(info.workgroup))
            .saturating_mul(16 * kernel.outputs.len() as u64);
        (written <= max).then_some(info)
    }
}

/// An open merged launch: where it runs and what it holds.
struct Group {
    /// Index into the rewritten steps.
    pos: usize,
    parts: Vec<Mergeable>,
    bindings: usize,
    /// WGSL bytes of the parts.
    wgsl: usize,
    /// Inputs the parts read through textures (of its `bindings`).
    textures: usize,
    /// Its first part is an `Updates` step's kernel.
    updates: bool,
}

/// Merges launches throughout `program` (nested programs included), appending the merged
/// kernels to `kernels` (the kernels they replace stay until [`compact`]).
pub fn merge_launches(program: &mut Program, kernels: &mut Vec<Kernel>, target: Target) {
    let mut cx = Cx {
        kernels,
        infos: HashMap::new(),
        made: Vec::new(),
        target,
    };
    rewrite(program, &mut cx);
    let made = std::mem::take(&mut cx.made);
    kernels.extend(made);
}

fn rewrite(p: &mut Program, cx: &mut Cx) {
    for step in &mut p.steps {
        for nested in step.nested_mut() {
            rewrite(nested, cx);
        }
    }
    let steps = std::mem::take(&mut p.steps);
    let mut out: Vec<Vec<Step>> = Vec::with_capacity(steps.len());
    let mut open: Vec<Group> = Vec::new();
    let mut defined_at: HashMap<Slot, usize> = HashMap::new();
    for step in steps {
        let here = out.len();
        match step {
            Step::Launch {
                kernel,
                ref args,
                ref results,
            } => {
                let Some(info) = cx.info(kernel) else {
                    for &r in results {
                        defined_at.insert(r, here);
                    }
                    out.push(vec![step]);
                    continue;
                };
                let bindings = args.len() + results.len();
                let wgsl = cx.kernels.get(kernel).map_or(0, |k| k.wgsl.len());
                let ready = |pos: usize| {
                    args.iter()
                        .all(|a| defined_at.get(a).is_none_or(|&d| d < pos))
                };
                // An update step's kernel skips its dispatch when an input is empty (the
                // runtime's rule), which a launch joining it may not.
                let any_empty = cx
                    .kernels
                    .get(kernel)
                    .is_none_or(|k| k.inputs.iter().any(|i| i.ty.num_elements() == 0));
                let joined = open.iter_mut().find(|g| {
                    ready(g.pos)
                        && !(g.updates && any_empty)
                        && accepts(g, &info, (bindings, wgsl), cx.target)
                });
                let pos = match joined {
                    Some(g) => {
                        g.textures += info.textures;
                        g.parts.push(info);
                        g.bindings += bindings;
                        g.wgsl += wgsl;
                        g.pos
                    }
                    None => {
                        open.push(Group {
                            pos: here,
                            textures: info.textures,
                            parts: vec![info],
                            bindings,
                            wgsl,
                            updates: false,
                        });
                        out.push(Vec::new());
                        here
                    }
                };
                for &r in results {
                    defined_at.insert(r, pos);
                }
                out[pos].push(step);
            }
            Step::Alias { dst, .. } => {
                defined_at.insert(dst, here);
                out.push(vec![step]);
            }
            Step::Free(_) => out.push(vec![step]),
            // An in-place update: launches after it that neither read its buffer nor its
            // result may still move up across it (the unrolled steps of a scan: each
            // step's reduction, then its update of the stack).
            Step::Update { target, result, .. } => {
                defined_at.insert(target, here);
                defined_at.insert(result, here);
                out.push(vec![step]);
            }
            // Merged in-place updates: launches after them may join their kernel (a scan
            // step's counter beside the update step computing its carry), not move above it.
            Step::Updates(ref u) => {
                for &s in u.targets.iter().chain(&u.results).chain(&u.outputs) {
                    defined_at.insert(s, here);
                }
                if let Some(info) = cx.updates_info(u.kernel) {
                    open.push(Group {
                        pos: here,
                        textures: info.textures,
                        bindings: u.args.len() + u.targets.len() + u.outputs.len(),
                        wgsl: cx.kernels.get(u.kernel).map_or(0, |k| k.wgsl.len()),
                        parts: vec![info],
                        updates: true,
                    });
                }
                out.push(vec![step]);
            }
            other => {
                // Control flow, host calls, chunked launches: nothing moves across.
                open.clear();
                out.push(vec![other]);
            }
        }
    }
    for at in out {
        if at.len() < 2 {
            p.steps.extend(at);
            continue;
        }
        match merged_launch(&at, cx) {
            Some(step) => p.steps.push(step),
            None => p.steps.extend(at),
        }
    }
}

/// Whether group `g` can take a part `info` with `bindings` bindings and `wgsl` bytes of
/// code, within the adapter's storage buffers and workgroup memory per kernel.
fn accepts(g: &Group, info: &Mergeable, (bindings, wgsl): (usize, usize), t: Target) -> bool {
    let max_wgsl = if t.cpu_adapter {
        MAX_WGSL_BYTES_CPU
    } else {
        usize::MAX
    };
    // Textures count against the sampled textures, not the storage buffers.
    let storage = g.bindings.saturating_sub(g.textures) + bindings.saturating_sub(info.textures);
    if g.parts.len() >= MAX_PARTS
        || storage > t.max_storage_buffers as usize
        || g.textures + info.textures > t.max_sampled_textures as usize
        || (g.wgsl + wgsl > max_wgsl
            && !(wgsl <= TINY_WGSL_BYTES && info.groups == 1 && tiny_parts()))
    {
        return false;
    }
    let bytes: u64 = g.parts.iter().map(|p| p.workgroup_bytes).sum::<u64>() + info.workgroup_bytes;
    let mut all: Vec<&Mergeable> = g.parts.iter().collect();
    all.push(info);
    bytes <= t.max_workgroup_storage && merged::workgroup_of(&all, t.cpu_adapter).is_some()
}

/// One launch of the merged kernel of these launches, or `None` when the kernel cannot be
/// written (the launches then run one after another, where the first of them ran).
fn merged_launch(launches: &[Step], cx: &mut Cx) -> Option<Step> {
    // Parts whose invocations loop longest first: workgroups start in order, so the longest
    // ones start first rather than trailing after everything else.
    // An update step leads its group and stays first: its outputs (the buffers it updates,
    // then those it writes) are then the merged kernel's first, as the runtime binds them.
    let (updates, launches) = match launches.split_first() {
        Some((Step::Updates(u), rest)) => (Some(u), rest),
        _ => (None, launches),
    };
    let mut launches: Vec<&Step> = launches.iter().collect();
    launches.sort_by_key(|s| match s {
        Step::Launch { kernel, .. } => {
            std::cmp::Reverse(cx.kernels.get(*kernel).map_or(0, |k| k.iterations))
        }
        _ => std::cmp::Reverse(0),
    });
    let mut parts = Vec::with_capacity(launches.len() + 1);
    let mut all_args = Vec::new();
    let mut all_results = Vec::new();
    if let Some(u) = updates {
        parts.push((u.kernel, cx.updates_info(u.kernel)?));
        all_args.extend(u.args.iter().copied());
        all_results.extend(u.outputs.iter().copied());
    }
    for s in &launches {
        let Step::Launch {
            kernel,
            args,
            results,
        } = s
        else {
            return None;
        };
        parts.push((*kernel, cx.info(*kernel)?));
        all_args.extend(args.iter().copied());
        all_results.extend(results.iter().copied());
    }
    let name = parts
        .iter()
        .map(|(k, _)| cx.kernels[*k].name.as_str())
        .collect::<Vec<_>>()
        .join("+");
    let refs: Vec<(&Kernel, &Mergeable)> =
        parts.iter().map(|(k, m)| (&cx.kernels[*k], m)).collect();
    let kernel = match merged::merge(&name, &refs, cx.target) {
        Ok(k) => k,
        Err(e) => {
            log::debug!("launches not merged: {e}");
            return None;
        }
    };
    cx.made.push(kernel);
    let kernel = cx.kernels.len() + cx.made.len() - 1;
    Some(match updates {
        Some(u) => Step::Updates(Box::new(UpdatesStep {
            kernel,
            args: all_args,
            targets: u.targets.clone(),
            results: u.results.clone(),
            takes: u.takes.clone(),
            outputs: all_results,
        })),
        None => Step::Launch {
            kernel,
            args: all_args,
            results: all_results,
        },
    })
}

/// Drops the kernels no step refers to (those merged launches replaced, and any an emitter
/// made but lowering did not launch) and renumbers the steps' references: each kernel left
/// is a pipeline the driver compiles when the executable loads.
pub fn compact(program: &mut Program, kernels: &mut Vec<Kernel>) {
    let mut used = vec![false; kernels.len()];
    program.for_each_kernel_mut(&mut |k| {
        if let Some(u) = used.get_mut(*k) {
            *u = true;
        }
    });
    let mut index = vec![usize::MAX; kernels.len()];
    let mut next = 0;
    for (i, &u) in used.iter().enumerate() {
        if u {
            index[i] = next;
            next += 1;
        }
    }
    program.for_each_kernel_mut(&mut |k| {
        if let Some(&n) = index.get(*k) {
            *k = n;
        }
    });
    let mut i = 0;
    kernels.retain(|_| {
        i += 1;
        used[i - 1]
    });
}
