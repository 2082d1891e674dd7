//! The executable form of a function: a program of steps over numbered buffer slots. Kernel
//! launches read and write slots; control flow steps run nested programs; `Free` steps, placed
//! at compile time after each slot's last use, hand buffers back to the executable's pool —
//! the static buffer plan.

use std::collections::HashSet;
use std::fmt;

use crate::ir::{ElementType, TensorType};
use crate::passes::trip_count::CounterTest;

/// A buffer slot: filled with a parameter, a constant or a buffer a step produced.
pub type Slot = usize;

/// How a `while` runs.
#[derive(Clone, Debug)]
pub struct WhileStep {
    /// Slots holding the initial values.
    pub init: Vec<Slot>,
    /// Per initial value: whether the loop may take its slot's buffer instead of sharing it
    /// (the slot is dead after the loop and listed once), so that the body can update that
    /// state in place from the first iteration on (`Program::plan_updates`).
    pub init_takes: Vec<bool>,
    /// Slots the cond and body read their arguments from (shared by both regions).
    pub args: Vec<Slot>,
    /// Computes the predicate.
    pub cond: Program,
    /// The predicate's slot (a `tensor<i1>`).
    pub cond_result: Slot,
    /// Computes the next values.
    pub body: Program,
    /// The body's results.
    pub body_results: Vec<Slot>,
    /// The op's results.
    pub results: Vec<Slot>,
    /// Iterations, when known at compile time (no predicate read-back then).
    pub trip_count: Option<u64>,
    /// Otherwise, where the predicate is a conjunction of counter tests that read values
    /// computed before the loop: those values are read back once and the trip count computed
    /// from them (no predicate read-back per iteration).
    pub trips_at_start: Option<TripsAtStart>,
    /// Per initial value: whether the state starts as a buffer of any contents, not as its
    /// initial value (a stack the body only updates, every row of which the loop writes:
    /// `passes::whole_loops::every_row_written`).
    pub fresh: Vec<bool>,
}

impl WhileStep {
    /// Whether the loop reads initial value `k`: not when only states that start fresh
    /// start from its slot.
    pub fn reads_init(&self, k: usize) -> bool {
        let Some(&slot) = self.init.get(k) else {
            return false;
        };
        self.trips_at_start.is_some()
            || self
                .init
                .iter()
                .enumerate()
                .any(|(j, &s)| s == slot && !self.fresh.get(j).copied().unwrap_or(false))
    }
}

/// The slots of a loop's initial values that it reads (`reads(k)` for initial value `k`):
/// what `Step::touched` counts for `While` and `WhileKernel` alike.
fn inits_read<'a>(
    init: &'a [Slot],
    reads: impl Fn(usize) -> bool + 'a,
) -> impl Iterator<Item = Slot> + 'a {
    init.iter()
        .enumerate()
        .filter(move |&(k, _)| reads(k))
        .map(|(_, &s)| s)
}

/// A loop's trip count computed when it starts (`passes::trip_count::counter_tests`).
#[derive(Clone, Debug, PartialEq)]
pub struct TripsAtStart {
    /// The predicate's conjuncts; the loop runs the fewest iterations any allows.
    pub tests: Vec<CounterTest>,
    /// The element type of each loop operand a test reads (`Start::Init`), by its index:
    /// 32- or 64-bit integers.
    pub reads: Vec<(usize, ElementType)>,
}

/// A `while` loop run whole inside one kernel (`codegen::while_kernel`): each launch runs up
/// to `per_launch` iterations from the state bound, and the next launch (if any) starts from
/// the state the last wrote.
#[derive(Clone, Debug)]
pub struct WhileKernelStep {
    /// Index into the executable's kernels.
    pub kernel: usize,
    /// Slots bound as inputs, in binding order: the initial values of the states that change
    /// (`states` of them), then what the regions read (values from outside the loop, the
    /// states that do not change).
    pub args: Vec<Slot>,
    /// How many of `args` are states that change: the initial values of the `results` not
    /// updated in place, in order.
    pub states: usize,
    /// The results of the states that change (the kernel's outputs before the flag).
    pub results: Vec<Slot>,
    /// Per result: `Some(k)` when it is updated in place, starting from the loop's initial
    /// value `k` (`init[k]`): its buffer when `init_takes[k]`, else a copy.
    pub in_place: Vec<Option<usize>>,
    /// The results of the states that do not change, each with its initial value's slot:
    /// `(result, initial value)`, the same buffer.
    pub same: Vec<(Slot, Slot)>,
    /// The slots of all the loop's initial values, in order (what `trips_at_start` reads).
    pub init: Vec<Slot>,
    /// The flag each launch writes (a `u32[1]`: 1 where its last iteration's predicate held).
    pub flag: Slot,
    /// Iterations a launch runs at most.
    pub per_launch: u64,
    /// Iterations, when known at compile time (no flag read back then).
    pub trip_count: Option<u64>,
    /// Or computed when the loop starts (one read-back, no flag read back).
    pub trips_at_start: Option<TripsAtStart>,
    /// Whether the flag is cleared before each launch: each element runs until its own
    /// predicate fails, and any invocation still going sets it (`codegen::while_kernel`).
    pub clear_flag: bool,
    /// Per initial value: whether the loop may take its buffer for a result updated in
    /// place (nothing later reads it: see [`Program::plan_updates`]).
    pub init_takes: Vec<bool>,
    /// Per result: whether it starts as a buffer of any contents, not as its initial value
    /// (a stacked output updated in place, every row of which the loop writes:
    /// `codegen::while_kernel::WhileKernel::fresh`).
    pub fresh: Vec<bool>,
}

impl WhileKernelStep {
    /// Whether the loop reads initial value `k`: not when only results that start fresh
    /// start from it and nothing else reads its slot.
    pub fn reads_init(&self, k: usize) -> bool {
        let Some(&slot) = self.init.get(k) else {
            return false;
        };
        let fresh_only = |k: usize| {
            let mut from = self
                .in_place
                .iter()
                .zip(&self.fresh)
                .filter(|(ip, _)| **ip == Some(k));
            let mut any = false;
            from.all(|(_, &f)| {
                any = true;
                f
            }) && any
        };
        self.trips_at_start.is_some()
            || self.args.contains(&slot)
            || self.same.iter().any(|&(_, i)| i == slot)
            || self
                .init
                .iter()
                .enumerate()
                .any(|(j, &s)| s == slot && !fresh_only(j))
    }
}

/// How an `if` / `case` runs: the selector is read back and one branch runs.
#[derive(Clone, Debug)]
pub struct BranchStep {
    /// `tensor<i1>` (if: true → branch 0) or `tensor<i32>` (case: index, out of range → last).
    pub selector: Slot,
    /// True for `if` (whose branch 0 is the true branch).
    pub is_if: bool,
    /// The branches with their result slots.
    pub branches: Vec<(Program, Vec<Slot>)>,
    /// The op's results.
    pub results: Vec<Slot>,
}

/// How a host call runs: the device work recorded so far is submitted, the arguments are read
/// back, the host function registered with the runtime runs on them, and its results are
/// uploaded — all inside the same execution.
#[derive(Clone, Debug)]
pub struct HostCallStep {
    /// The host function's id, as the program names it (`custom_call @wgpu.host_callback`'s
    /// `backend_config`).
    pub target: u64,
    /// What runs, for listings and errors (the op's location).
    pub name: String,
    /// Slots handed to the host function, in order.
    pub args: Vec<Slot>,
    /// Slots its results go to (fresh buffers).
    pub results: Vec<Slot>,
}

/// A kernel dispatched several times, each dispatch binding parts of the tensors too large
/// for one binding (`codegen::windows`), all into the same result buffers.
#[derive(Clone, Debug)]
pub struct ChunkedStep {
    /// Index into the executable's kernels.
    pub kernel: usize,
    /// Slots the dispatches write (fresh buffers, allocated once, written in parts).
    pub results: Vec<Slot>,
    /// The dispatches, in order.
    pub chunks: Vec<ChunkLaunch>,
}

/// One dispatch of a [`ChunkedStep`].
#[derive(Clone, Debug)]
pub struct ChunkLaunch {
    /// Slots bound as inputs, in binding order (its own parameters among them).
    pub args: Vec<Slot>,
    /// Per binding (`args`, then the step's results): the bytes bound, `(offset, size)`;
    /// `None`: the whole buffer.
    pub ranges: Vec<Option<(u64, u64)>>,
}

/// One step.
#[derive(Clone, Debug)]
pub enum Step {
    /// Dispatches kernel `kernel` of the executable.
    Launch {
        /// Index into the executable's kernels.
        kernel: usize,
        /// Slots bound as inputs, in binding order.
        args: Vec<Slot>,
        /// Slots the kernel writes (fresh buffers).
        results: Vec<Slot>,
    },
    /// Runs kernel `kernel`, whose one output is `target`'s buffer updated in place (when the
    /// step may `take` it and nothing else holds it) or a copy of it; the buffer becomes
    /// `result`. For `dynamic_update_slice` into large buffers (loop-carried `lax.scan` outputs).
    Update {
        /// Index into the executable's kernels.
        kernel: usize,
        /// Slots bound as inputs, in binding order.
        args: Vec<Slot>,
        /// The buffer updated.
        target: Slot,
        /// Where the updated buffer goes.
        result: Slot,
        /// Whether `target` is dead after this step (its buffer may be reused).
        take: bool,
    },
    /// Several `Update`s as one kernel: its output `j` is `targets[j]`'s buffer updated in
    /// place (when `takes[j]` and nothing else holds it) or a copy, which becomes
    /// `results[j]` (`fusion::updates`: a scan step's stacked outputs).
    Updates(Box<UpdatesStep>),
    /// `dst` holds the same buffer as `src` (a view with another type).
    Alias {
        /// The buffer's slot.
        src: Slot,
        /// The view's slot.
        dst: Slot,
    },
    /// A `while` loop.
    While(Box<WhileStep>),
    /// A `while` loop run whole inside one kernel.
    WhileKernel(Box<WhileKernelStep>),
    /// An `if` or `case`.
    Branch(Box<BranchStep>),
    /// Hands the buffers of these slots back to the pool.
    Free(Vec<Slot>),
    /// A call of a host function.
    HostCall(Box<HostCallStep>),
    /// A kernel dispatched in parts over tensors larger than one binding.
    Chunked(Box<ChunkedStep>),
}

/// See [`Step::Updates`].
#[derive(Clone, Debug)]
pub struct UpdatesStep {
    /// Index into the executable's kernels.
    pub kernel: usize,
    /// Slots bound as inputs, in binding order.
    pub args: Vec<Slot>,
    /// The buffers updated, in output binding order.
    pub targets: Vec<Slot>,
    /// Where each updated buffer goes.
    pub results: Vec<Slot>,
    /// Whether each target is dead after this step (its buffer may be reused).
    pub takes: Vec<bool>,
    /// Slots of the kernel's other outputs (fresh buffers, bound after the targets): values
    /// of the loop kernels it computes inline that later steps read too.
    pub outputs: Vec<Slot>,
}

/// A sequence of steps.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Steps in order.
    pub steps: Vec<Step>,
}

impl Step {
    /// Slots this step reads or writes, including inside nested programs.
    pub fn touched(&self, out: &mut HashSet<Slot>) {
        match self {
            Step::Launch { args, results, .. } => {
                out.extend(args);
                out.extend(results);
            }
            Step::Alias { src, dst } => {
                out.insert(*src);
                out.insert(*dst);
            }
            Step::Update {
                args,
                target,
                result,
                ..
            } => {
                out.extend(args);
                out.insert(*target);
                out.insert(*result);
            }
            Step::Updates(u) => {
                out.extend(&u.args);
                out.extend(&u.targets);
                out.extend(&u.results);
                out.extend(&u.outputs);
            }
            Step::While(w) => {
                out.extend(inits_read(&w.init, |k| w.reads_init(k)));
                out.extend(&w.args);
                out.extend(&w.body_results);
                out.extend(&w.results);
                out.insert(w.cond_result);
                w.cond.touched(out);
                w.body.touched(out);
            }
            Step::WhileKernel(w) => {
                out.extend(inits_read(&w.init, |k| w.reads_init(k)));
                out.extend(&w.args);
                out.extend(&w.results);
                out.insert(w.flag);
                for &(r, i) in &w.same {
                    out.insert(r);
                    out.insert(i);
                }
            }
            Step::Branch(b) => {
                out.insert(b.selector);
                out.extend(&b.results);
                for (p, r) in &b.branches {
                    p.touched(out);
                    out.extend(r);
                }
            }
            Step::Free(s) => out.extend(s),
            Step::HostCall(h) => {
                out.extend(&h.args);
                out.extend(&h.results);
            }
            Step::Chunked(c) => {
                for l in &c.chunks {
                    out.extend(&l.args);
                }
                out.extend(&c.results);
            }
        }
    }

    /// The kernel this step launches (a launch, an update or several, a chunked launch).
    pub fn kernel_mut(&mut self) -> Option<&mut usize> {
        match self {
            Step::Launch { kernel, .. } | Step::Update { kernel, .. } => Some(kernel),
            Step::Updates(u) => Some(&mut u.kernel),
            Step::Chunked(c) => Some(&mut c.kernel),
            Step::WhileKernel(w) => Some(&mut w.kernel),
            _ => None,
        }
    }

    /// The programs nested in this step: a loop's cond and body, a branch's arms.
    pub fn nested_mut(&mut self) -> Vec<&mut Program> {
        match self {
            Step::While(w) => vec![&mut w.cond, &mut w.body],
            Step::Branch(b) => b.branches.iter_mut().map(|(p, _)| p).collect(),
            _ => Vec::new(),
        }
    }

    /// Slots this step defines (writes for the first time).
    fn defines(&self, out: &mut HashSet<Slot>) {
        match self {
            Step::Launch { results, .. } => out.extend(results),
            Step::Update { result, .. } => {
                out.insert(*result);
            }
            Step::Updates(u) => {
                out.extend(&u.results);
                out.extend(&u.outputs);
            }
            Step::Alias { dst, .. } => {
                out.insert(*dst);
            }
            Step::While(w) => out.extend(&w.results),
            Step::WhileKernel(w) => {
                out.extend(&w.results);
                out.insert(w.flag);
                out.extend(w.same.iter().map(|s| s.0));
            }
            Step::Branch(b) => out.extend(&b.results),
            Step::Free(_) => {}
            Step::HostCall(h) => out.extend(&h.results),
            Step::Chunked(c) => out.extend(&c.results),
        }
    }
}

impl Program {
    /// Slots the program's own steps define (not those it reads from outside).
    pub fn defined(&self) -> HashSet<Slot> {
        let mut out = HashSet::new();
        for s in &self.steps {
            s.defines(&mut out);
        }
        out
    }

    /// Slots touched anywhere in the program.
    pub fn touched(&self, out: &mut HashSet<Slot>) {
        for s in &self.steps {
            s.touched(out);
        }
    }

    /// Calls `f` on every kernel index the program's steps hold, nested programs included.
    pub fn for_each_kernel_mut(&mut self, f: &mut impl FnMut(&mut usize)) {
        for step in &mut self.steps {
            if let Some(k) = step.kernel_mut() {
                f(k);
            }
            for p in step.nested_mut() {
                p.for_each_kernel_mut(f);
            }
        }
    }

    /// Decides which `Update` steps may take their target's buffer, and which initial values
    /// of a `While` the loop may take: slots this program defines or receives as arguments
    /// (`args`: a loop body's), not among its results (`keep`), and not touched by any later
    /// step.
    pub fn plan_updates(&mut self, keep: &[Slot], args: &[Slot]) {
        let mut defined = HashSet::new();
        for s in &self.steps {
            s.defines(&mut defined);
        }
        let n = self.steps.len();
        let mut later: Vec<HashSet<Slot>> = vec![HashSet::new(); n + 1];
        for i in (0..n).rev() {
            let mut t = later[i + 1].clone();
            self.steps[i].touched(&mut t);
            later[i] = t;
        }
        for (i, step) in self.steps.iter_mut().enumerate() {
            let may_take = |target: &Slot| {
                (defined.contains(target) || args.contains(target))
                    && !keep.contains(target)
                    && !later[i + 1].contains(target)
            };
            match step {
                Step::Update { target, take, .. } => *take = may_take(target),
                Step::Updates(u) => u.takes = u.targets.iter().map(may_take).collect(),
                Step::While(w) => {
                    let once = |s: &Slot| w.init.iter().filter(|&t| t == s).count() == 1;
                    w.init_takes = w.init.iter().map(|s| may_take(s) && once(s)).collect();
                }
                Step::WhileKernel(w) => {
                    // Not also read by the kernel as it runs, nor another state's start.
                    let once = |s: &Slot| {
                        w.init.iter().filter(|&t| t == s).count() == 1 && !w.args.contains(s)
                    };
                    w.init_takes = w.init.iter().map(|s| may_take(s) && once(s)).collect();
                }
                _ => {}
            }
        }
    }

    /// Removes launches none of whose results a later step reads or `keep` holds (the
    /// program's results): a stack of zeros a loop starts from where the loop writes every
    /// row ([`WhileKernelStep::fresh`]). Launches only write their results.
    pub fn drop_unread_launches(&mut self, keep: &[Slot]) {
        let mut live: HashSet<Slot> = keep.iter().copied().collect();
        let mut dropped = vec![false; self.steps.len()];
        for (i, step) in self.steps.iter().enumerate().rev() {
            match step {
                Step::Launch { results, .. } if !results.iter().any(|r| live.contains(r)) => {
                    dropped[i] = true;
                }
                _ => step.touched(&mut live),
            }
        }
        let mut i = 0;
        self.steps.retain(|_| {
            i += 1;
            !dropped[i - 1]
        });
    }

    /// Inserts `Free` steps after the last use of every slot this program defines, except
    /// those in `keep` (its results).
    pub fn plan_frees(&mut self, keep: &[Slot]) {
        let mut defined = HashSet::new();
        for s in &self.steps {
            s.defines(&mut defined);
        }
        let keep: HashSet<Slot> = keep.iter().copied().collect();
        let mut last_use = std::collections::HashMap::new();
        for (i, s) in self.steps.iter().enumerate() {
            let mut t = HashSet::new();
            s.touched(&mut t);
            for slot in t {
                last_use.insert(slot, i);
            }
        }
        let mut frees: Vec<Vec<Slot>> = vec![Vec::new(); self.steps.len()];
        for (slot, i) in last_use {
            if defined.contains(&slot) && !keep.contains(&slot) {
                frees[i].push(slot);
            }
        }
        let steps = std::mem::take(&mut self.steps);
        for (s, mut f) in steps.into_iter().zip(frees) {
            self.steps.push(s);
            if !f.is_empty() {
                f.sort_unstable();
                self.steps.push(Step::Free(f));
            }
        }
    }

    fn fmt_indented(
        &self,
        f: &mut fmt::Formatter<'_>,
        indent: usize,
        kernels: &[String],
    ) -> fmt::Result {
        let pad = "  ".repeat(indent);
        for s in &self.steps {
            match s {
                Step::Launch {
                    kernel,
                    args,
                    results,
                } => writeln!(
                    f,
                    "{pad}launch {} {args:?} -> {results:?}",
                    kernels.get(*kernel).map(String::as_str).unwrap_or("?")
                )?,
                Step::Alias { src, dst } => writeln!(f, "{pad}view {dst} = {src}")?,
                Step::Update {
                    kernel,
                    args,
                    target,
                    result,
                    take,
                } => writeln!(
                    f,
                    "{pad}update {} {args:?} into {target}{} -> {result}",
                    kernels.get(*kernel).map(String::as_str).unwrap_or("?"),
                    if *take { " (in place)" } else { " (copy)" }
                )?,
                Step::Updates(u) => writeln!(
                    f,
                    "{pad}updates {} {:?} into {:?} ({}) -> {:?}{}",
                    kernels.get(u.kernel).map(String::as_str).unwrap_or("?"),
                    u.args,
                    u.targets,
                    u.takes
                        .iter()
                        .map(|&t| if t { "in place" } else { "copy" })
                        .collect::<Vec<_>>()
                        .join(", "),
                    u.results,
                    if u.outputs.is_empty() {
                        String::new()
                    } else {
                        format!(", writing {:?}", u.outputs)
                    }
                )?,
                Step::Free(s) => writeln!(f, "{pad}free {s:?}")?,
                Step::HostCall(h) => writeln!(
                    f,
                    "{pad}host call #{} ({}) {:?} -> {:?}",
                    h.target, h.name, h.args, h.results
                )?,
                Step::Chunked(c) => {
                    writeln!(
                        f,
                        "{pad}launch {} in {} parts -> {:?}",
                        kernels.get(c.kernel).map(String::as_str).unwrap_or("?"),
                        c.chunks.len(),
                        c.results
                    )?;
                    for l in &c.chunks {
                        writeln!(f, "{pad}  {:?} bytes {:?}", l.args, l.ranges)?;
                    }
                }
                Step::While(w) => {
                    let fresh: Vec<String> = w
                        .fresh
                        .iter()
                        .enumerate()
                        .filter(|(_, &f)| f)
                        .map(|(k, _)| k.to_string())
                        .collect();
                    writeln!(
                        f,
                        "{pad}while {:?} -> {:?} (trip count: {}{})",
                        w.init,
                        w.results,
                        trips_text(w.trip_count, w.trips_at_start.as_ref(), "read back"),
                        if fresh.is_empty() {
                            String::new()
                        } else {
                            format!("; states {} fresh (every row written)", fresh.join(", "))
                        }
                    )?;
                    writeln!(f, "{pad}  cond {:?} -> {}", w.args, w.cond_result)?;
                    w.cond.fmt_indented(f, indent + 2, kernels)?;
                    writeln!(f, "{pad}  body -> {:?}", w.body_results)?;
                    w.body.fmt_indented(f, indent + 2, kernels)?;
                }
                Step::WhileKernel(w) => {
                    // Results updated in place, each from the initial value it starts as.
                    let starts: Vec<String> = w
                        .results
                        .iter()
                        .zip(&w.in_place)
                        .enumerate()
                        .filter_map(|(j, (r, ip))| {
                            let k = (*ip)?;
                            let init = w.init.get(k)?;
                            let taken = w.init_takes.get(k).copied().unwrap_or(false);
                            if w.fresh.get(j).copied().unwrap_or(false) {
                                return Some(format!("{r} fresh (every row written)"));
                            }
                            Some(format!(
                                "{r} from {init}{}",
                                if taken { " (taken)" } else { "" }
                            ))
                        })
                        .collect();
                    writeln!(
                        f,
                        "{pad}while in kernel {} {:?} -> {:?} ({} iterations a launch; trip count: {}{}{})",
                        kernels.get(w.kernel).map(String::as_str).unwrap_or("?"),
                        w.args,
                        w.results,
                        w.per_launch,
                        trips_text(w.trip_count, w.trips_at_start.as_ref(), "flag read back"),
                        if w.clear_flag {
                            ", each element until its own predicate fails"
                        } else {
                            ""
                        },
                        if starts.is_empty() {
                            String::new()
                        } else {
                            format!("; in place: {}", starts.join(", "))
                        }
                    )?
                }
                Step::Branch(b) => {
                    writeln!(
                        f,
                        "{pad}{} on {} -> {:?}",
                        if b.is_if { "if" } else { "case" },
                        b.selector,
                        b.results
                    )?;
                    for (i, (p, r)) in b.branches.iter().enumerate() {
                        writeln!(f, "{pad}  branch {i} -> {r:?}")?;
                        p.fmt_indented(f, indent + 2, kernels)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A readable listing, naming kernels by `kernels[i]`.
    pub fn listing(&self, kernels: &[String]) -> String {
        struct L<'a>(&'a Program, &'a [String]);
        impl fmt::Display for L<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_indented(f, 0, self.1)
            }
        }
        L(self, kernels).to_string()
    }
}

/// The type of every slot, indexed by slot.
pub type SlotTypes = Vec<TensorType>;

/// How a loop's trip count is had, for listings: a number, computed at the start from the
/// loop operands read, or `otherwise`.
fn trips_text(trip_count: Option<u64>, at_start: Option<&TripsAtStart>, otherwise: &str) -> String {
    match (trip_count, at_start) {
        (Some(n), _) => n.to_string(),
        (None, Some(t)) => format!(
            "computed at the start from {:?}",
            t.reads.iter().map(|r| r.0).collect::<Vec<_>>()
        ),
        (None, None) => otherwise.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(target: Slot, result: Slot) -> Step {
        Step::Update {
            kernel: 0,
            args: vec![],
            target,
            result,
            take: false,
        }
    }

    fn takes(p: &Program) -> Vec<bool> {
        p.steps
            .iter()
            .filter_map(|s| match s {
                Step::Update { take, .. } => Some(*take),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn updates_take_only_dead_owned_buffers() {
        let launch = |args: Vec<Slot>, results: Vec<Slot>| Step::Launch {
            kernel: 0,
            args,
            results,
        };
        // 1 is defined here and dead after its update; 2 is read later; 0 comes from outside.
        let mut p = Program {
            steps: vec![
                launch(vec![], vec![1, 2]),
                update(1, 3),
                update(2, 4),
                launch(vec![2], vec![5]),
                update(0, 6),
            ],
        };
        p.plan_updates(&[3, 4, 5, 6], &[]);
        assert_eq!(takes(&p), vec![true, false, false]);
        // A loop body may take its own arguments, unless it returns them.
        p.plan_updates(&[3, 4, 5, 6], &[0]);
        assert_eq!(takes(&p), vec![true, false, true]);
        p.plan_updates(&[0, 3, 4, 5, 6], &[0]);
        assert_eq!(takes(&p), vec![true, false, false]);
    }

    #[test]
    fn launches_read_by_nothing_but_fresh_results_are_dropped() {
        let launch = |args: Vec<Slot>, results: Vec<Slot>| Step::Launch {
            kernel: 0,
            args,
            results,
        };
        // A loop kernel whose result 11 starts fresh from initial value 7 (never read) and
        // whose result 10 starts from initial value 6 (read): the launch of 7 goes, and the
        // launch of 8, whose result only the dropped launch read, goes too.
        let w = |fresh: bool| WhileKernelStep {
            kernel: 1,
            args: vec![5],
            states: 0,
            results: vec![10, 11],
            in_place: vec![Some(0), Some(1)],
            same: vec![],
            init: vec![6, 7],
            flag: 12,
            per_launch: 64,
            trip_count: Some(50),
            trips_at_start: None,
            clear_flag: false,
            init_takes: vec![false, false],
            fresh: vec![false, fresh],
        };
        for fresh in [true, false] {
            let mut p = Program {
                steps: vec![
                    launch(vec![], vec![5]),
                    launch(vec![], vec![6]),
                    launch(vec![], vec![8]),
                    launch(vec![8], vec![7]),
                    launch(vec![], vec![9]),
                    Step::WhileKernel(Box::new(w(fresh))),
                ],
            };
            p.drop_unread_launches(&[10, 11]);
            let written: Vec<Vec<Slot>> = p
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Launch { results, .. } => Some(results.clone()),
                    _ => None,
                })
                .collect();
            if fresh {
                assert_eq!(written, vec![vec![5], vec![6]]);
            } else {
                assert_eq!(written, vec![vec![5], vec![6], vec![8], vec![7]]);
            }
        }
    }

    #[test]
    fn loops_take_initial_values_dead_after_them() {
        let launch = |args: Vec<Slot>, results: Vec<Slot>| Step::Launch {
            kernel: 0,
            args,
            results,
        };
        // 1 is dead after the loop; 2 is read later; 3 is listed twice; 0 comes from outside.
        let w = WhileStep {
            init: vec![0, 1, 2, 3, 3],
            init_takes: vec![false; 5],
            args: vec![10, 11, 12, 13, 14],
            cond: Program { steps: vec![] },
            cond_result: 15,
            body: Program { steps: vec![] },
            body_results: vec![10, 11, 12, 13, 14],
            results: vec![20, 21, 22, 23, 24],
            trip_count: Some(3),
            trips_at_start: None,
            fresh: vec![false; 5],
        };
        let mut p = Program {
            steps: vec![
                launch(vec![], vec![1, 2, 3]),
                Step::While(Box::new(w)),
                launch(vec![2], vec![25]),
            ],
        };
        p.plan_updates(&[20, 21, 22, 23, 24, 25], &[]);
        let Step::While(w) = &p.steps[1] else {
            unreachable!()
        };
        assert_eq!(w.init_takes, vec![false, true, false, false, false]);
    }
}
