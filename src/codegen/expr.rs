//! The fused-expression emitter every kernel kind shares: it computes the value of an IR value
//! at an index, inlining the ops fused into the kernel (elementwise ops, broadcasts, reshapes,
//! transposes, slices, pads, concatenations, iotas, dynamic slices) and loading the values
//! that live in buffers. Each (value, index) pair is computed once per scope.

use std::collections::{BTreeSet, HashMap};

use super::dtype::{self, Compute};
use super::elementwise::{self, Needs};
use crate::error::{Error, Result};
use crate::ir::{BinaryOp, ElementType, Function, Op, Operation, TensorType, Type, ValueId};
use crate::target::Capabilities;

/// An index into a tensor: a row-major linear offset, or one `u32` expression per dimension.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Index {
    /// Linear element offset (a `u32` expression).
    Linear(String),
    /// Per-dimension indices (`u32` expressions), outermost first.
    Multi(Vec<String>),
}

impl Index {
    /// The index of a 0-d tensor.
    pub fn scalar() -> Index {
        Index::Multi(Vec::new())
    }
}

/// The groups of dimensions a reshape from `odims` to `rdims` maps onto each other: pairs of
/// ranges of result and operand dimensions with equal products (a dimension of 1 a group of
/// its own, with an empty range on the other side), in order. `None` for empty tensors and
/// when the products do not line up.
pub fn reshape_groups(
    rdims: &[usize],
    odims: &[usize],
) -> Option<Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>> {
    if rdims.contains(&0) || odims.contains(&0) {
        return None;
    }
    let (r, o) = (rdims.len(), odims.len());
    let (mut i, mut j) = (0, 0);
    let mut groups = Vec::new();
    while i < r || j < o {
        if i < r && rdims[i] == 1 {
            groups.push((i..i + 1, j..j));
            i += 1;
            continue;
        }
        if j < o && odims[j] == 1 {
            groups.push((i..i, j..j + 1));
            j += 1;
            continue;
        }
        if i >= r || j >= o {
            return None;
        }
        let (si, sj) = (i, j);
        let (mut pr, mut po) = (rdims[i], odims[j]);
        (i, j) = (i + 1, j + 1);
        while pr != po {
            if pr < po {
                pr = pr.checked_mul(*rdims.get(i)?)?;
                i += 1;
            } else {
                po = po.checked_mul(*odims.get(j)?)?;
                j += 1;
            }
        }
        groups.push((si..i, sj..j));
    }
    Some(groups)
}

/// Row-major linearization of `idx` for `dims`.
pub fn linearize(idx: &[String], dims: &[usize]) -> String {
    let mut terms = Vec::new();
    let mut stride = 1usize;
    for k in (0..dims.len()).rev() {
        if dims[k] != 1 {
            terms.push(if stride == 1 {
                idx[k].clone()
            } else {
                format!("{} * {stride}u", idx[k])
            });
        }
        stride *= dims[k];
    }
    if terms.is_empty() {
        "0u".into()
    } else {
        terms.reverse();
        format!("({})", terms.join(" + "))
    }
}

/// Per-dimension indices already computed for a (linear index, shape) pair.
type DelinearCache = HashMap<(String, Vec<usize>), Vec<String>>;

/// What a kernel needs to know about a value it reads from a buffer.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The IR value.
    pub value: ValueId,
    /// Its type.
    pub ty: TensorType,
}

/// Emits the WGSL statements that compute fused values. A clone emits on from the same point
/// (a kernel tries one form, and another from the same start when the first is too large).
#[derive(Clone)]
pub struct ExprEmitter<'a> {
    f: &'a Function,
    defs: &'a HashMap<ValueId, &'a Operation>,
    fused: &'a dyn Fn(ValueId) -> bool,
    caps: Capabilities,
    adapter: &'a str,
    /// Values read from buffers, in binding order.
    pub inputs: Vec<Binding>,
    /// Leading entries of `inputs` that are another emitter's bindings (a dot's operands
    /// before its epilogue's inputs): a value read here gets a binding of its own after them,
    /// read at the emitted index, even where one of them binds the same value.
    pub foreign_inputs: usize,
    /// Library functions called.
    pub needs: Needs,
    /// Ops inlined, for the kernel's header comment.
    pub fused_ops: BTreeSet<String>,
    /// The statements emitted so far.
    pub body: String,
    indent: usize,
    memo: Vec<HashMap<(ValueId, Index), String>>,
    delinear: Vec<DelinearCache>,
    /// Depth of `memo` at which the current WGSL function starts (lookups stop there).
    function_base: usize,
    saved: Vec<(String, usize, usize)>,
    counter: usize,
    /// Open blocks, outermost first: (trip count if the block is a loop, back-edges counted
    /// inside it so far). The first entry is the function body.
    loops: Vec<(Option<u64>, u64)>,
    saved_loops: Vec<Vec<(Option<u64>, u64)>>,
    /// Most loop back-edges one call of any WGSL function emitted with `begin_function` runs.
    function_iterations: u64,
    /// The part of the contraction of one `dot_general` or `convolution` an invocation
    /// computes, for split-K partial products.
    pub contraction_chunk: Option<ContractionChunk>,
    /// Set when values too large for one binding are bound a window at a time.
    pub window: Option<Window>,
    /// Values held in a WGSL variable at every index the kernel reads them (a merged row
    /// kernel's per-row results; fusion guarantees they are read at the current row only).
    pub scalars: HashMap<ValueId, String>,
    /// Transposes being computed that move the innermost dimension: loads under them read
    /// across rows and are marked so that `texture_reads` keeps their storage binding.
    transposed: usize,
    /// Positions whose loads come in aligned groups of four (see [`Quads`]).
    pub quads: Option<Quads>,
    /// The indices of the loads made across the rows of a transposed operand, in order.
    pub across_loads: Vec<Index>,
}

/// Aligned groups of four consecutive positions: of the innermost dimension (a merged row
/// kernel's lanes holding groups of a row), or linear element offsets (a loop kernel computing
/// four elements per invocation). A 32-bit tensor of `dims` read at a multi-index ending in
/// position `p`, or any 32-bit tensor read at linear position `p`, reads the four elements of
/// `p`'s group as one `vec4` expression (`positions[p]` = the group's first position and `p`'s
/// place in it), marked [`super::texture_reads::QUAD_MARK`] so that a texture read fetches
/// them as one texel, not four. The group's first position must be a multiple of 4, and so
/// must `dims`' innermost size.
#[derive(Clone, Debug, Default)]
pub struct Quads {
    /// The shape of the tensors read this way.
    pub dims: Vec<usize>,
    /// Per position name, the first position of its group and its place in the group.
    pub positions: HashMap<String, (String, usize)>,
    /// Neighbouring lanes read neighbouring groups and each invocation sweeps on through
    /// memory (a loop kernel's four elements, a row's groups): the groups are marked
    /// [`super::texture_reads::QUAD_STREAM_MARK`], and an input read only that way is bound
    /// as `vec4`s instead of through a texture (see `texture_reads`).
    pub streaming: bool,
    /// Tensors of any shape whose innermost extent is a multiple of 4 read at a multi-index
    /// ending in a grouped position are read by groups too (not only those of `dims`), also
    /// across the rows of a transpose: the positions are then names of a tile's own
    /// coordinates, the same in every tensor (see `loop_kernel`'s transposing tiles).
    pub any_shape: bool,
    /// The grouped positions are linear (a group starting at a multiple of 4), and any
    /// tensor whose innermost extent is a multiple of 4 holds a group in one row: the
    /// per-dimension form of a group's later positions is the first one's with the innermost
    /// coordinate plus its place ([`ExprEmitter::multi`]), so what depends only on the outer
    /// coordinates (a broadcast row value, a gathered row's index) is computed once per
    /// group, and reads at the innermost coordinate are grouped too.
    pub rows: bool,
    /// Positions at which a tensor of another shape is read by groups too: a folded row's
    /// innermost positions modulo the operand's row (`reshape_keeping_group`), where a
    /// group lies within one of its rows.
    pub folded: std::collections::HashSet<String>,
}

impl Quads {
    /// The linear groups of a loop kernel's four elements per invocation (or a replayed
    /// epilogue's): positions `l0` to `l3`, `l0` the group's first, read streaming; with
    /// `rows`, see [`Quads::rows`].
    pub fn linear_fours(rows: bool) -> Quads {
        Quads {
            folded: Default::default(),
            dims: Vec::new(),
            positions: (0..4)
                .map(|e| (format!("l{e}"), ("l0".to_string(), e)))
                .collect(),
            streaming: true,
            any_shape: false,
            rows,
        }
    }
}

/// How a kernel launched in chunks reads values larger than the adapter's binding limit: each
/// launch binds only the part of such a value its invocations read, starting at element
/// `base`; an invocation may read them only at its own elements (`own`), so the host knows
/// which part every launch needs.
#[derive(Clone, Debug)]
pub struct Window {
    /// Values of more bytes than this are bound a window at a time.
    pub limit: u64,
    /// WGSL `u32` expression of the first element bound (the launch's element base).
    pub base: String,
    /// WGSL `u32` linear indices at which the invocation may read windowed values.
    pub own: std::collections::HashSet<String>,
    /// Windowed values read so far.
    pub values: BTreeSet<ValueId>,
    /// `Some`: large values read at other elements than the invocation's own are read whole
    /// (the compile driver binds them in parts, `super::parted`) and collected here, and those
    /// already here are read whole wherever they are read. `None`: such reads are refused.
    pub whole: Option<BTreeSet<ValueId>>,
    /// Windowed values may be read by groups of four ([`Quads`]) at the invocation's own
    /// elements: every launch's windows hold whole groups (the subgroup row reduction of rows
    /// whose length and chunks are multiples of 4).
    pub quads: bool,
}

impl Window {
    /// A window over values above `limit` bytes, based at WGSL expression `base`.
    pub fn new(limit: u64, base: &str) -> Window {
        Window {
            limit,
            base: base.to_string(),
            own: Default::default(),
            values: BTreeSet::new(),
            whole: None,
            quads: false,
        }
    }

    /// Whether some value was read both in windows and whole (the kernel must be emitted
    /// again with it read whole everywhere).
    pub fn is_read_both_ways(&self) -> bool {
        self.whole
            .as_ref()
            .is_some_and(|w| w.iter().any(|v| self.values.contains(v)))
    }

    /// Whether a tensor of type `t` is too large for one binding.
    pub fn is_large(&self, t: &TensorType) -> bool {
        large(t, self.limit)
    }
}

/// Whether a tensor of type `t` takes more than `limit` bytes of storage.
pub fn large(t: &TensorType, limit: u64) -> bool {
    (t.num_elements() as u64).saturating_mul(t.dtype.byte_size() as u64) > limit
}

/// Why a kernel with these bindings cannot be made on `target` (a tensor larger than one
/// binding, more storage buffers than the adapter allows), or `None` when it can.
pub fn binding_limits(
    inputs: &[Binding],
    outputs: &[Binding],
    target: &super::loop_kernel::Target,
) -> Option<String> {
    if let Some(b) = inputs
        .iter()
        .chain(outputs)
        .find(|b| large(&b.ty, target.max_binding_size))
    {
        return Some(format!("{} is larger than one binding", b.ty));
    }
    let bindings = inputs.len() + outputs.len();
    (bindings as u32 > target.max_storage_buffers).then(|| {
        format!(
            "{bindings} storage buffers, adapter {} allows {}",
            target.adapter, target.max_storage_buffers
        )
    })
}

/// The part of a contraction one invocation of a split-K stage computes: contracting indices
/// `start ..` (at most `len`) of a `dot_general`; for a `convolution`, window positions
/// `start ..` (at most `len`) and, within the output feature's group, input features
/// `feature_start ..` (at most `feature_len`). The value is then the accumulator itself, in
/// its compute type, not rounded to the result type (the fold of the partials rounds).
#[derive(Clone, Debug)]
pub struct ContractionChunk {
    /// The `dot_general` or `convolution` result.
    pub value: ValueId,
    /// WGSL `u32` expression of the first contracting index or window position.
    pub start: String,
    /// Contracting indices or window positions in the chunk.
    pub len: u64,
    /// WGSL `u32` expression of the first input feature (convolutions).
    pub feature_start: String,
    /// Input features in the chunk (convolutions).
    pub feature_len: u64,
}

impl<'a> ExprEmitter<'a> {
    /// A new emitter over function `f`: `defs` are the defining ops of values it may fuse,
    /// `fused(v)` says whether `v` is computed inline (true) or read from a buffer (false).
    pub fn new(
        f: &'a Function,
        defs: &'a HashMap<ValueId, &'a Operation>,
        fused: &'a dyn Fn(ValueId) -> bool,
        caps: Capabilities,
        adapter: &'a str,
    ) -> Self {
        ExprEmitter {
            f,
            defs,
            fused,
            caps,
            adapter,
            inputs: Vec::new(),
            foreign_inputs: 0,
            needs: Needs::new(),
            fused_ops: BTreeSet::new(),
            body: String::new(),
            indent: 1,
            memo: vec![HashMap::new()],
            delinear: vec![HashMap::new()],
            function_base: 0,
            saved: Vec::new(),
            counter: 0,
            loops: vec![(None, 0)],
            saved_loops: Vec::new(),
            function_iterations: 0,
            contraction_chunk: None,
            window: None,
            scalars: HashMap::new(),
            transposed: 0,
            quads: None,
            across_loads: Vec::new(),
        }
    }

    /// Starts emitting a separate WGSL function: statements go to a new body, and values
    /// computed outside it are not visible inside. `params` binds values to parameter names.
    pub fn begin_function(&mut self, params: &[(ValueId, String)]) {
        let body = std::mem::take(&mut self.body);
        self.saved.push((body, self.indent, self.function_base));
        self.indent = 1;
        self.memo.push(HashMap::new());
        self.delinear.push(HashMap::new());
        self.function_base = self.memo.len() - 1;
        self.saved_loops
            .push(std::mem::replace(&mut self.loops, vec![(None, 0)]));
        for (v, name) in params {
            if let Some(m) = self.memo.last_mut() {
                m.insert((*v, Index::scalar()), name.clone());
            }
        }
    }

    /// Ends the function started by `begin_function`, returning its statements.
    pub fn end_function(&mut self) -> String {
        self.memo.truncate(self.function_base);
        self.delinear.truncate(self.function_base);
        let inner = std::mem::replace(
            &mut self.loops,
            self.saved_loops.pop().unwrap_or_else(|| vec![(None, 0)]),
        );
        let cost = inner.iter().map(|l| l.1).fold(0u64, u64::saturating_add);
        self.function_iterations = self.function_iterations.max(cost);
        let (body, indent, base) = self.saved.pop().unwrap_or_default();
        self.indent = indent;
        self.function_base = base;
        std::mem::replace(&mut self.body, body)
    }

    /// Makes `v` at `idx` available under an existing WGSL name in the current scope.
    pub fn define(&mut self, v: ValueId, idx: &Index, name: &str) {
        if let Some(m) = self.memo.last_mut() {
            m.insert((v, idx.clone()), name.to_string());
        }
    }

    /// The bindings of `values` (a kernel's outputs), in order.
    pub fn bindings(&self, values: &[ValueId]) -> Result<Vec<Binding>> {
        values
            .iter()
            .map(|&v| {
                Ok(Binding {
                    value: v,
                    ty: self.ty(v)?.clone(),
                })
            })
            .collect()
    }

    /// The tensor type of `v`.
    pub fn ty(&self, v: ValueId) -> Result<&'a TensorType> {
        match self.f.values.get(v.index()) {
            Some(Type::Tensor(t)) => Ok(t),
            Some(other) => Err(Error::unimplemented(format!(
                "value of type {other} in a kernel"
            ))),
            None => Err(Error::internal(format!("value {v} out of range"))),
        }
    }

    /// The compute type of `t`.
    pub fn compute(&self, t: ElementType) -> Result<Compute> {
        dtype::compute_type(t, self.caps, self.adapter)
    }

    /// A fresh WGSL identifier with the given prefix. The underscore keeps it apart from
    /// WGSL's predeclared names: `i` + 32 was `i32`, which then shadowed the type (a
    /// convolution with 33 accumulators failed to parse).
    pub fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}_{}", self.counter)
    }

    /// Appends one statement line at the current indentation.
    pub fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.body.push_str("    ");
        }
        self.body.push_str(s);
        self.body.push('\n');
    }

    /// Opens a block that is not a loop (`if (...) {`): values computed inside are not visible
    /// after it.
    pub fn open(&mut self, header: &str) {
        self.open_block(header, None);
    }

    /// Opens a loop block (`for (...) {`, `loop {`) that runs at most `trips` times, so that
    /// [`ExprEmitter::iterations`] bounds the back-edges one invocation executes.
    pub fn open_loop(&mut self, header: &str, trips: u64) {
        self.open_block(header, Some(trips));
    }

    fn open_block(&mut self, header: &str, trips: Option<u64>) {
        self.line(format!("{header} {{").trim_start());
        self.indent += 1;
        self.memo.push(HashMap::new());
        self.delinear.push(HashMap::new());
        self.loops.push((trips, 0));
    }

    /// Ends the innermost counted block, charging its back-edges to the enclosing one.
    fn end_block(&mut self) {
        if self.loops.len() <= 1 {
            return;
        }
        if let Some((trips, inner)) = self.loops.pop() {
            // A loop of t trips runs its body t times and takes t back-edges.
            let cost = match trips {
                Some(t) => t.saturating_mul(inner.saturating_add(1)),
                None => inner,
            };
            if let Some(parent) = self.loops.last_mut() {
                parent.1 = parent.1.saturating_add(cost);
            }
        }
    }

    /// An upper bound on the loop back-edges (every loop, nested ones included) one execution
    /// of the statements emitted so far runs. Calls of region functions (reducers,
    /// comparators) are assumed to happen at most once per counted back-edge plus once.
    pub fn iterations(&self) -> u64 {
        let mut total = 0u64;
        for &(trips, inner) in self.loops.iter().rev() {
            total = total.saturating_add(inner);
            if let Some(t) = trips {
                total = t.saturating_mul(total.saturating_add(1));
            }
        }
        total.saturating_add(
            total
                .saturating_add(1)
                .saturating_mul(self.function_iterations),
        )
    }

    /// Closes the innermost block, optionally continuing with `} else ... {`.
    pub fn close(&mut self, continuation: Option<&str>) {
        self.indent = self.indent.saturating_sub(1);
        self.memo.pop();
        self.delinear.pop();
        self.end_block();
        match continuation {
            Some(c) => {
                self.line(&format!("}} {c} {{"));
                self.indent += 1;
                self.memo.push(HashMap::new());
                self.delinear.push(HashMap::new());
                self.loops.push((None, 0));
            }
            None => self.line("}"),
        }
    }

    fn lookup(&self, key: &(ValueId, Index)) -> Option<String> {
        self.memo[self.function_base..]
            .iter()
            .rev()
            .find_map(|m| m.get(key).cloned())
    }

    /// Binds `expr` to a new `let` and returns its name.
    pub fn bind(&mut self, c: Compute, expr: &str) -> String {
        let name = self.fresh("v");
        self.line(&format!("let {name}: {} = {expr};", c.wgsl()));
        name
    }

    /// The per-dimension form of `idx` for a tensor of `dims`.
    pub fn multi(&mut self, idx: &Index, dims: &[usize]) -> Vec<String> {
        match idx {
            Index::Multi(m) => m.clone(),
            Index::Linear(l) => {
                let key = (l.clone(), dims.to_vec());
                if let Some(v) = self.delinear[self.function_base..]
                    .iter()
                    .rev()
                    .find_map(|m| m.get(&key))
                {
                    return v.clone();
                }
                if let Some(out) = self.grouped_multi(l, dims) {
                    if let Some(m) = self.delinear.last_mut() {
                        m.insert(key, out.clone());
                    }
                    return out;
                }
                let group_start = self.quads.as_ref().is_some_and(|q| {
                    q.rows
                        && dims.len() >= 2
                        && dims.last().is_some_and(|&d| d % 4 == 0)
                        && q.positions.get(l).is_some_and(|(f, p)| *p == 0 && f == l)
                });
                let mut out = vec![String::new(); dims.len()];
                if dims.contains(&0) {
                    // An empty tensor has no element to address (and `% 0u` is rejected).
                    return vec!["0u".to_string(); dims.len()];
                }
                let mut stride = 1usize;
                for k in (0..dims.len()).rev() {
                    let e = if dims[k] == 1 {
                        "0u".to_string()
                    } else if k == 0 {
                        if stride == 1 {
                            l.clone()
                        } else {
                            format!("({l} / {stride}u)")
                        }
                    } else if stride == 1 {
                        format!("({l} % {}u)", dims[k])
                    } else {
                        format!("(({l} / {stride}u) % {}u)", dims[k])
                    };
                    out[k] = if e.len() > 12 {
                        let n = self.fresh("i");
                        self.line(&format!("let {n} = {e};"));
                        n
                    } else {
                        e
                    };
                    stride *= dims[k];
                }
                if group_start {
                    if let (Some(last), Some(q)) = (out.last().cloned(), self.quads.as_mut()) {
                        q.positions.insert(last.clone(), (last, 0));
                    }
                }
                if let Some(m) = self.delinear.last_mut() {
                    m.insert(key, out.clone());
                }
                out
            }
        }
    }

    /// With [`Quads::rows`], the per-dimension form of linear position `l` when it is a later
    /// position of a group and `dims` (of rank 2 or more) has an innermost extent that is a
    /// multiple of 4: the group's first position's coordinates, the innermost one plus `l`'s
    /// place in the group (a name registered as a grouped position). `None` otherwise.
    fn grouped_multi(&mut self, l: &str, dims: &[usize]) -> Option<Vec<String>> {
        let q = self.quads.as_ref()?;
        if !q.rows || dims.len() < 2 || dims.last().is_none_or(|&d| d % 4 != 0) {
            return None;
        }
        let (first, place) = q.positions.get(l)?.clone();
        if place == 0 || first == l {
            return None;
        }
        let mut out = self.multi(&Index::Linear(first), dims);
        let last0 = out.last()?.clone();
        let name = self.fresh("i");
        self.line(&format!("let {name} = {last0} + {place}u;"));
        let q = self.quads.as_mut()?;
        q.positions.insert(last0.clone(), (last0.clone(), 0));
        q.positions.insert(name.clone(), (last0, place));
        *out.last_mut()? = name;
        Some(out)
    }

    /// The linear form of `idx` for a tensor of `dims`.
    pub fn linear(&mut self, idx: &Index, dims: &[usize]) -> String {
        match idx {
            Index::Linear(l) => l.clone(),
            Index::Multi(m) => linearize(m, dims),
        }
    }

    /// The binding number of an input value (adding it on first use).
    pub fn input(&mut self, v: ValueId) -> Result<usize> {
        let skip = self.foreign_inputs;
        if let Some(i) = self.inputs.iter().skip(skip).position(|b| b.value == v) {
            return Ok(skip + i);
        }
        let ty = self.ty(v)?.clone();
        self.inputs.push(Binding { value: v, ty });
        Ok(self.inputs.len() - 1)
    }

    /// The WGSL name of the variable holding `v` at `idx` (computing it if needed).
    pub fn value(&mut self, v: ValueId, idx: &Index) -> Result<String> {
        if let Some(s) = self.scalars.get(&v) {
            return Ok(s.clone());
        }
        let key = (v, idx.clone());
        if let Some(n) = self.lookup(&key) {
            return Ok(n);
        }
        let name = self.compute_value(v, idx)?;
        if let Some(m) = self.memo.last_mut() {
            m.insert(key, name.clone());
        }
        Ok(name)
    }

    fn load(&mut self, v: ValueId, idx: &Index) -> Result<String> {
        self.load_as(v, idx, false)?
            .ok_or_else(|| Error::internal(format!("no load of input {v}")))
    }

    /// `load`, or with `raw` the element's storage bits undecoded (a `u32`), for sub-word
    /// types only (`None` for others).
    fn load_as(&mut self, v: ValueId, idx: &Index, raw: bool) -> Result<Option<String>> {
        let ty = self.ty(v)?.clone();
        if raw && dtype::per_word(ty.dtype) == 1 {
            return Ok(None);
        }
        let c = self.compute(ty.dtype)?;
        let b = self.input(v)?;
        let dims = ty.dims();
        if self.transposed > 0 {
            self.across_loads.push(idx.clone());
        }
        if let Some(name) = self.quad_load(v, &ty, c, b, idx) {
            return Ok(Some(name));
        }
        if let Some(name) = self.packed_group_load(v, &ty, c, b, idx, raw) {
            return Ok(Some(name));
        }
        let mut lin = self.linear(idx, &dims);
        if let Some(w) = self.window.as_mut().filter(|w| w.is_large(&ty)) {
            let own = w.own.contains(&lin);
            match w.whole.as_mut() {
                Some(whole) if whole.contains(&v) || !own => {
                    whole.insert(v);
                }
                _ if !own => {
                    return Err(Error::resource_exhausted(format!(
                        "a {ty} tensor of {} bytes, more than adapter {}'s \
                     max_storage_buffer_binding_size of {} bytes, is read at other elements \
                     than the invocation's own, so it cannot be bound in parts",
                        ty.byte_size(),
                        self.adapter,
                        w.limit
                    )));
                }
                _ => {
                    w.values.insert(v);
                    lin = format!("({lin} - {})", w.base);
                }
            }
        }
        for h in dtype::helpers_for(ty.dtype) {
            self.needs.insert(h.to_string());
        }
        // An index that is a constant expression outside the tensor can only be in a branch
        // that does not run (a concatenation's other operands at a constant position, as in
        // `odeint`'s state): WGSL rejects the module for it ("Accessing index 4294967295 is
        // out of bounds"), so such a load reads element 0 instead.
        if const_index(&lin).is_some_and(|v| v < 0 || v >= ty.num_elements() as i64) {
            lin = "0u".to_string();
        }
        if self.transposed > 0 {
            lin = format!("{} {lin}", super::texture_reads::TRANSPOSED_MARK);
        }
        if raw {
            let e = dtype::load_bits(ty.dtype, &format!("in{b}"), &lin).unwrap_or_default();
            return Ok(Some(self.bind(Compute::U32, &e)));
        }
        let e = dtype::load(ty.dtype, &format!("in{b}"), &lin);
        Ok(Some(self.bind(c, &e)))
    }

    /// The storage bits of `v` at `idx` (a `u32`, the low `bit_width` bits set) where they can
    /// be had without decoding a value: read from an input through broadcasts, reshapes,
    /// slices, transposes and same-width `bitcast_convert`s, or the bits of a value a
    /// `bitcast_convert` reinterprets.
    /// `None` elsewhere (a computed value). A bitcast from or to a type whose values lose
    /// bits (`dtype::lossy_values`: a bool's byte, a narrow float's NaN payload) goes through
    /// here, so that it moves bits as XLA's cpu backend does.
    pub fn raw_bits_of(&mut self, v: ValueId, idx: &Index) -> Result<Option<String>> {
        if self.scalars.contains_key(&v) || self.window.is_some() {
            return Ok(None);
        }
        if !(self.fused)(v) {
            return self.load_as(v, idx, true);
        }
        let Some(op) = self.defs.get(&v).copied() else {
            return Ok(None);
        };
        let rt = self.ty(v)?.clone();
        let rdims = rt.dims();
        match &op.op {
            Op::BroadcastInDim { dimensions } => {
                let Some(&o) = op.operands.first() else {
                    return Ok(None);
                };
                let shape = self.ty(o)?.shape.clone();
                let m = self.multi(idx, &rdims);
                let xi = broadcast_operand_index(&m, dimensions, &shape);
                self.raw_bits_of(o, &Index::Multi(xi))
            }
            Op::Reshape => {
                let Some(&o) = op.operands.first() else {
                    return Ok(None);
                };
                let lin = self.linear(idx, &rdims);
                self.raw_bits_of(o, &Index::Linear(lin))
            }
            Op::Slice { start, strides, .. } => {
                let Some(&o) = op.operands.first() else {
                    return Ok(None);
                };
                let m = self.multi(idx, &rdims);
                let xi = slice_operand_index(&m, start, strides);
                self.raw_bits_of(o, &Index::Multi(xi))
            }
            Op::Transpose { permutation } => {
                let Some(&o) = op.operands.first() else {
                    return Ok(None);
                };
                let m = self.multi(idx, &rdims);
                let xi = transpose_operand_index(&m, permutation);
                self.raw_bits_of(o, &Index::Multi(xi))
            }
            Op::BitcastConvert => {
                let Some(&o) = op.operands.first() else {
                    return Ok(None);
                };
                let ot = self.ty(o)?.clone();
                if ot.dtype.bit_width() != rt.dtype.bit_width() || rt.dtype.bit_width() > 32 {
                    return Ok(None);
                }
                if dtype::lossy_values(ot.dtype) {
                    return self.raw_bits_of(o, idx);
                }
                let oc = self.compute(ot.dtype)?;
                let x = self.value(o, idx)?;
                let bits = elementwise::raw_bits(ot.dtype, oc, &x, &mut self.needs)?;
                Ok(Some(self.bind(Compute::U32, &bits)))
            }
            _ => Ok(None),
        }
    }

    /// `v` at `idx` reinterpreted as a value of type `to` (computed as `c`) of the same width:
    /// from its stored bits where `raw_bits_of` has them, else from its value's bits.
    fn reinterpret(
        &mut self,
        v: ValueId,
        idx: &Index,
        to: ElementType,
        c: Compute,
    ) -> Result<String> {
        let t = self.ty(v)?.dtype;
        let bits = match self.raw_bits_of(v, idx)? {
            Some(bits) => bits,
            None => {
                let vc = self.compute(t)?;
                let x = self.value(v, idx)?;
                elementwise::raw_bits(t, vc, &x, &mut self.needs)?
            }
        };
        let e = elementwise::from_raw_bits(to, c, t.bit_width(), &bits)?;
        for h in dtype::helpers_for(to) {
            self.needs.insert(h.to_string());
        }
        Ok(self.bind(c, &e))
    }

    /// The group of four elements (see [`Quads`]) that `idx` reads in a tensor of type `ty`:
    /// the linear index of the group's first element (a multiple of 4) and `idx`'s place in
    /// it; `None` where `idx` is not at a grouped position of a tensor read by groups.
    fn group_of(&mut self, ty: &TensorType, idx: &Index) -> Option<(String, usize)> {
        let q = self.quads.as_ref()?;
        match idx {
            // A linear position is the element offset itself, whatever the shape.
            Index::Linear(p) => q.positions.get(p).cloned(),
            Index::Multi(m) => {
                let (first, place) = q.positions.get(m.last()?)?.clone();
                let dims = ty.dims();
                let rows_of_quads = (q.any_shape || q.rows || q.folded.contains(m.last()?))
                    && dims.last().is_some_and(|&d| d % 4 == 0);
                if dims != q.dims && !rows_of_quads {
                    return None;
                }
                let mut m0 = m.clone();
                *m0.last_mut()? = first;
                Some((self.linear(&Index::Multi(m0), &dims), place))
            }
        }
    }

    /// A load of an element of sub-word input `b` (value `v` of type `ty`: booleans, 8- and
    /// 16-bit numbers, two or four to a word) at a grouped position (see [`Quads`]): the
    /// group's four elements lie in one word (two for 16-bit types), loaded once for the
    /// group and shared by its places, each picking its bits. Through a texture each word is
    /// one texel fetch where each element made its own: a causal mask read by the
    /// attention softmax's row kernel of 64 x 256 x 256 (lavapipe, with its scores read by
    /// groups too, `wgsl_bench`: 34 -> 17 ms). With `raw`, the element's bits undecoded.
    /// `None` where the element is not grouped, the kernel's windows take no groups or its
    /// tensor is bound in windows, or the load is under a transpose.
    fn packed_group_load(
        &mut self,
        v: ValueId,
        ty: &TensorType,
        c: Compute,
        b: usize,
        idx: &Index,
        raw: bool,
    ) -> Option<String> {
        let n = dtype::per_word(ty.dtype) as usize;
        if !(n == 2 || n == 4)
            || self.transposed > 0
            || self
                .window
                .as_ref()
                .is_some_and(|w| !w.quads || w.is_large(ty))
        {
            return None;
        }
        let (lin0, place) = self.group_of(ty, idx)?;
        let bits = 32 / n;
        let word = if n == 4 {
            format!("(({lin0}) >> 2u)")
        } else {
            format!("(({lin0}) >> 1u) + {}u", place / n)
        };
        let key = (v, Index::Linear(format!("word {word}")));
        let w = match self.lookup(&key) {
            Some(w) => w,
            None => {
                let w = self.bind(Compute::U32, &format!("in{b}[{word}]"));
                if let Some(memo) = self.memo.last_mut() {
                    memo.insert(key, w.clone());
                }
                w
            }
        };
        let mask = if bits == 8 { "0xffu" } else { "0xffffu" };
        let raw_bits = format!("(({w} >> {}u) & {mask})", (place % n) * bits);
        if raw {
            return Some(self.bind(Compute::U32, &raw_bits));
        }
        for h in dtype::helpers_for(ty.dtype) {
            self.needs.insert(h.to_string());
        }
        let e = dtype::decode_bits(ty.dtype, &raw_bits);
        Some(self.bind(c, &e))
    }

    /// A load of input `b` (value `v` of type `ty`) from its group's `vec4` (see [`Quads`]), or
    /// `None` when `idx` is not at a grouped position or the tensor is not one of 32-bit words
    /// of the grouped shape.
    fn quad_load(
        &mut self,
        v: ValueId,
        ty: &TensorType,
        c: Compute,
        b: usize,
        idx: &Index,
    ) -> Option<String> {
        let q = self.quads.as_ref()?;
        let streaming = q.streaming;
        let elem = dtype::storage_elem(ty.dtype);
        if self.window.as_ref().is_some_and(|w| !w.quads)
            || (self.transposed > 0 && !q.any_shape)
            || dtype::per_word(ty.dtype) != 1
            || !matches!(elem, "f32" | "i32" | "u32")
            || c.wgsl() != elem
        {
            return None;
        }
        let (lin0, place) = self.group_of(ty, idx)?;
        // A windowed value, at the group's first element (one of the invocation's own).
        let lin0 = match self.window.as_mut().filter(|w| w.is_large(ty)) {
            Some(w) if w.own.contains(&lin0) && w.whole.is_none() => {
                w.values.insert(v);
                format!("({lin0} - {})", w.base)
            }
            Some(_) => return None,
            None => lin0,
        };
        let key = (v, Index::Linear(format!("quad {lin0}")));
        let quad = match self.lookup(&key) {
            Some(n) => n,
            None => {
                let n = self.fresh("q");
                let mark = if streaming {
                    super::texture_reads::QUAD_STREAM_MARK
                } else {
                    super::texture_reads::QUAD_MARK
                };
                self.line(&format!(
                    "let {n} = vec4<{elem}>(in{b}[{mark} {lin0}], in{b}[{lin0} + 1u], \
                     in{b}[{lin0} + 2u], in{b}[{lin0} + 3u]);"
                ));
                if let Some(memo) = self.memo.last_mut() {
                    memo.insert(key, n.clone());
                }
                n
            }
        };
        let lane = ["x", "y", "z", "w"].get(place)?;
        Some(self.bind(c, &format!("{quad}.{lane}")))
    }

    /// Whether `v` is a fused constant whose every element is 2 (or -2).
    fn is_two(&self, v: ValueId) -> bool {
        (self.fused)(v)
            && self.defs.get(&v).is_some_and(|op| match &op.op {
                Op::Constant(lit) => {
                    !lit.is_empty() && lit.is_splat() && lit.get(0).as_f64().abs() == 2.0
                }
                Op::BroadcastInDim { .. } => op.operands.first().is_some_and(|&o| self.is_two(o)),
                _ => false,
            })
    }

    /// Whether `v` is a constant whose elements are all one value (or none).
    fn splat_constant(&self, v: ValueId) -> bool {
        self.defs.get(&v).is_some_and(
            |op| matches!(&op.op, Op::Constant(lit) if lit.is_empty() || lit.is_splat()),
        )
    }

    /// Whether `v` is a fused float product.
    fn is_product(&self, v: ValueId) -> bool {
        (self.fused)(v)
            && self
                .defs
                .get(&v)
                .is_some_and(|op| matches!(op.op, Op::Binary(BinaryOp::Multiply)))
    }

    fn compute_value(&mut self, v: ValueId, idx: &Index) -> Result<String> {
        // A constant of one value is written as a literal even where the fusion left it out of
        // the group (a scalar several groups read, as a dot's epilogue reads `1.0`): a load
        // per element, a binding and a 4-byte buffer for nothing.
        if !(self.fused)(v) && !self.splat_constant(v) {
            return self.load(v, idx);
        }
        let op = *self
            .defs
            .get(&v)
            .ok_or_else(|| Error::internal(format!("fused value {v} has no defining op")))?;
        self.fused_ops.insert(op.name());
        let rt = self.ty(v)?.clone();
        let rc = self.compute(rt.dtype)?;
        let rdims = rt.dims();
        let ctx = |e: Error| e.context(format!("{} ({})", op.name(), op.loc));
        let operand_ty = |s: &Self, i: usize| -> Result<TensorType> {
            let o = op
                .operands
                .get(i)
                .ok_or_else(|| Error::internal(format!("{}: missing operand {i}", op.name())))?;
            Ok(s.ty(*o)?.clone())
        };
        let at = |s: &mut Self, i: usize, idx: &Index| -> Result<String> {
            let o = op.operands[i];
            let t = s.ty(o)?;
            // Scalars broadcast implicitly (select's predicate, clamp's bounds).
            if t.rank() == 0 && !rdims.is_empty() {
                s.value(o, &Index::scalar())
            } else {
                s.value(o, idx)
            }
        };
        match &op.op {
            Op::Unary(u) => {
                let xt = operand_ty(self, 0)?;
                let xc = self.compute(xt.dtype)?;
                let x = at(self, 0, idx)?;
                let e = elementwise::unary(*u, xt.dtype, xc, &x, &mut self.needs).map_err(ctx)?;
                for h in dtype::helpers_for(rt.dtype) {
                    self.needs.insert(h.to_string());
                }
                Ok(self.bind(rc, &e))
            }
            Op::ReducePrecision {
                exponent_bits,
                mantissa_bits,
            } => {
                let x = at(self, 0, idx)?;
                let e = self
                    .reduce_precision(rc, &x, *exponent_bits, *mantissa_bits)
                    .map_err(ctx)?;
                for h in dtype::helpers_for(rt.dtype) {
                    self.needs.insert(h.to_string());
                }
                Ok(self.bind(rc, &e))
            }
            Op::Binary(b) => {
                let xt = operand_ty(self, 0)?;
                let xc = self.compute(xt.dtype)?;
                let mut x = at(self, 0, idx)?;
                let mut y = at(self, 1, idx)?;
                if *b == BinaryOp::Multiply && matches!(xc, Compute::F32 | Compute::F64) {
                    // 2 * (a * b), jaxlib's imaginary part of a complex square: Mesa rewrites
                    // c * 2 to c + c and then a*b + a*b to b * (a + a), which overflows for
                    // a = FLT_MAX (square(3.4e38 + 1e-15i) gave inf, not 6.9e23). The product
                    // goes through wh_opaque_*, which no rewrite looks through.
                    let opaque = format!("wh_opaque_{}", xc.wgsl());
                    if self.is_two(op.operands[0]) && self.is_product(op.operands[1]) {
                        self.needs.insert(opaque.clone());
                        y = format!("{opaque}({y})");
                    } else if self.is_two(op.operands[1]) && self.is_product(op.operands[0]) {
                        self.needs.insert(opaque.clone());
                        x = format!("{opaque}({x})");
                    }
                }
                let e =
                    elementwise::binary(*b, xt.dtype, xc, &x, &y, &mut self.needs).map_err(ctx)?;
                for h in dtype::helpers_for(rt.dtype) {
                    self.needs.insert(h.to_string());
                }
                Ok(self.bind(rc, &e))
            }
            Op::Compare {
                direction,
                compare_type,
            } => {
                let xt = operand_ty(self, 0)?;
                let xc = self.compute(xt.dtype)?;
                let x = at(self, 0, idx)?;
                let y = at(self, 1, idx)?;
                let e = elementwise::compare(
                    *direction,
                    *compare_type,
                    xt.dtype,
                    xc,
                    &x,
                    &y,
                    &mut self.needs,
                )
                .map_err(ctx)?;
                Ok(self.bind(rc, &e))
            }
            Op::Select => {
                let p = at(self, 0, idx)?;
                let t = at(self, 1, idx)?;
                let f = at(self, 2, idx)?;
                Ok(self.bind(rc, &elementwise::select(&p, &t, &f)))
            }
            Op::Clamp => {
                let lo = at(self, 0, idx)?;
                let x = at(self, 1, idx)?;
                let hi = at(self, 2, idx)?;
                let e = elementwise::clamp(rc, &lo, &x, &hi, &mut self.needs).map_err(ctx)?;
                Ok(self.bind(rc, &e))
            }
            Op::BitcastConvert
                if operand_ty(self, 0)?.dtype.bit_width() != rt.dtype.bit_width() =>
            {
                let xt = operand_ty(self, 0)?;
                let e = self
                    .bitcast_resize(op.operands[0], &xt, idx, &rdims, rt.dtype, rc)
                    .map_err(ctx)?;
                for h in dtype::helpers_for(rt.dtype) {
                    self.needs.insert(h.to_string());
                }
                Ok(self.bind(rc, &e))
            }
            Op::BitcastConvert if dtype::lossy_values(operand_ty(self, 0)?.dtype) => {
                // The operand's bits as stored, where they can be read so: decoding a bool or
                // a narrow float's NaN loses bits that a bitcast keeps.
                self.reinterpret(op.operands[0], idx, rt.dtype, rc)
                    .map_err(ctx)
            }
            // A bool converted to an 8-bit integer is its byte, as XLA's cpu backend has it
            // (JAX's `view` of a bool array is this convert): 1 for every true bool, but a
            // byte viewed as a bool keeps its value through the round trip.
            Op::Convert
                if operand_ty(self, 0)?.dtype == ElementType::Pred
                    && (rt.dtype.is_signed_int() || rt.dtype.is_unsigned_int())
                    && rt.dtype.bit_width() == 8 =>
            {
                self.reinterpret(op.operands[0], idx, rt.dtype, rc)
                    .map_err(ctx)
            }
            Op::Convert | Op::BitcastConvert => {
                let xt = operand_ty(self, 0)?;
                let xc = self.compute(xt.dtype)?;
                let x = at(self, 0, idx)?;
                let e = if op.op == Op::Convert {
                    elementwise::convert(xt.dtype, xc, rt.dtype, rc, &x)
                } else {
                    elementwise::bitcast(xt.dtype, xc, rt.dtype, rc, &x, &mut self.needs)
                }
                .map_err(ctx)?;
                for h in dtype::helpers_for(rt.dtype) {
                    self.needs.insert(h.to_string());
                }
                Ok(self.bind(rc, &e))
            }
            Op::Constant(lit) => {
                let value = if lit.is_empty() {
                    dtype::zero(rc).to_string()
                } else {
                    match (rc, lit.get(0)) {
                        // Zeros, infinities and NaNs: from the run-time zero, so that no
                        // compiler folds `x / 0.0`, `x * inf`, `x + nan` with fast-math rules.
                        (Compute::F32, s)
                            if !(s.as_f64() as f32).is_normal()
                                && !(s.as_f64() as f32).is_subnormal() =>
                        {
                            format!(
                                "bitcast<f32>({:#010x}u | {})",
                                (s.as_f64() as f32).to_bits(),
                                crate::codegen::kernel::RUNTIME_ZERO
                            )
                        }
                        (_, s) => dtype::literal(rt.dtype, rc, s),
                    }
                };
                // Read through a `var`, so the arithmetic on it is evaluated at run time:
                // WGSL's constant evaluation rejects what StableHLO defines (1 / 0 = inf,
                // INT_MIN / -1, abs(INT_MIN), shifts by the width or more, NaN results).
                let name = self.fresh("k");
                self.line(&format!("var {name}: {} = {value};", rc.wgsl()));
                Ok(name)
            }
            Op::Iota { dimension } => {
                let m = self.multi(idx, &rdims);
                let i = m
                    .get(*dimension as usize)
                    .cloned()
                    .ok_or_else(|| Error::internal("iota dimension out of range"))?;
                let e = match rc {
                    Compute::U32 => i,
                    Compute::Bool => format!("({i} != 0u)"),
                    Compute::C64 | Compute::C128 => {
                        format!(
                            "{}({}({i}), {})",
                            rc.wgsl(),
                            rc.part().wgsl(),
                            dtype::zero(rc.part())
                        )
                    }
                    _ => dtype::round(rt.dtype, &format!("{}({i})", rc.wgsl())),
                };
                for h in dtype::helpers_for(rt.dtype) {
                    self.needs.insert(h.to_string());
                }
                Ok(self.bind(rc, &e))
            }
            Op::BroadcastInDim { dimensions } => {
                let xt = operand_ty(self, 0)?;
                let m = self.multi(idx, &rdims);
                let xi = broadcast_operand_index(&m, dimensions, &xt.shape);
                self.value(op.operands[0], &Index::Multi(xi))
            }
            Op::Reshape => {
                let odims = operand_ty(self, 0)?.dims();
                if let Some(xi) = self.reshape_keeping_group(idx, &rdims, &odims) {
                    return self.value(op.operands[0], &Index::Multi(xi));
                }
                if let Index::Multi(m) = idx {
                    // With grouped positions only where the innermost coordinate passes
                    // through: a new one would not be a grouped position.
                    if self.quads.is_none() || Self::innermost_passes(&rdims, &odims) {
                        if let Some(xi) = self.reshape_by_groups(m, &rdims, &odims) {
                            return self.value(op.operands[0], &Index::Multi(xi));
                        }
                    }
                }
                let lin = self.linear(idx, &rdims);
                self.value(op.operands[0], &Index::Linear(lin))
            }
            Op::Transpose { permutation } => {
                let m = self.multi(idx, &rdims);
                let xi = transpose_operand_index(&m, permutation);
                // Neighbouring invocations read across the operand's rows.
                let across = rdims.last().is_some_and(|&d| d > 1)
                    && permutation.last().map(|&p| p as usize) != Some(m.len().wrapping_sub(1));
                self.transposed += usize::from(across);
                let r = self.value(op.operands[0], &Index::Multi(xi));
                self.transposed -= usize::from(across);
                r
            }
            Op::Slice { start, strides, .. } => {
                let m = self.multi(idx, &rdims);
                let xi = slice_operand_index(&m, start, strides);
                self.shift_group(&m, &xi, start.last(), strides.last());
                self.value(op.operands[0], &Index::Multi(xi))
            }
            Op::Reverse { dimensions } => {
                let m = self.multi(idx, &rdims);
                let xi = m
                    .iter()
                    .enumerate()
                    .map(|(k, i)| {
                        if dimensions.contains(&(k as i64)) {
                            format!("({}u - {i})", rdims[k].saturating_sub(1))
                        } else {
                            i.clone()
                        }
                    })
                    .collect();
                self.value(op.operands[0], &Index::Multi(xi))
            }
            Op::Pad { low, interior, .. } => self.pad(op, idx, &rdims, rc, low, interior),
            Op::Concatenate { dimension } => {
                self.concatenate(op, idx, &rdims, rc, *dimension as usize)
            }
            Op::DynamicSlice { slice_sizes } => {
                let xt = operand_ty(self, 0)?;
                let m = self.multi(idx, &rdims);
                let mut xi = Vec::new();
                for (k, mk) in m.iter().enumerate() {
                    let (Some(&start), Some(&d), Some(&size)) =
                        (op.operands.get(k + 1), xt.shape.get(k), slice_sizes.get(k))
                    else {
                        return Err(ctx(Error::invalid(
                            "needs a start index and size per dimension",
                        )));
                    };
                    // A dimension taken whole starts at 0 whatever its start index (clamped
                    // into [0, 0]): its coordinate passes through, and with it a group of four
                    // positions (see `Quads`) of a slice along the others.
                    if size == d {
                        xi.push(mk.clone());
                        continue;
                    }
                    let s = self.start_index(start, d - size)?;
                    xi.push(format!("({s} + {mk})"));
                }
                self.value(op.operands[0], &Index::Multi(xi))
            }
            Op::DynamicUpdateSlice => {
                let ut = operand_ty(self, 1)?;
                let m = self.multi(idx, &rdims);
                let mut conds = Vec::new();
                let mut ui = Vec::new();
                for (k, mk) in m.iter().enumerate() {
                    let (Some(&start), Some(&d), Some(&size)) =
                        (op.operands.get(k + 2), rt.shape.get(k), ut.shape.get(k))
                    else {
                        return Err(ctx(Error::invalid("needs a start index per dimension")));
                    };
                    let s = self.start_index(start, d - size)?;
                    conds.push(format!("({mk} >= {s} && {mk} < {s} + {size}u)"));
                    ui.push(format!("({mk} - {s})"));
                }
                let out = self.fresh("v");
                self.line(&format!("var {out}: {};", rc.wgsl()));
                let cond = if conds.is_empty() {
                    "true".to_string()
                } else {
                    conds.join(" && ")
                };
                self.open(&format!("if ({cond})"));
                let u = self.value(op.operands[1], &Index::Multi(ui))?;
                self.line(&format!("{out} = {u};"));
                self.close(Some("else"));
                let x = self.value(op.operands[0], &Index::Multi(m))?;
                self.line(&format!("{out} = {x};"));
                self.close(None);
                Ok(out)
            }
            Op::DotGeneral {
                dimension_numbers, ..
            } => self.dot(op, idx, &rdims, rt.dtype, rc, dimension_numbers),
            Op::Convolution(c) => self.convolution(op, idx, &rdims, rt.dtype, rc, c),
            Op::Gather {
                dimension_numbers: dn,
                slice_sizes,
                ..
            } => {
                let xt = operand_ty(self, 0)?;
                let it = operand_ty(self, 1)?;
                let m = self.multi(idx, &rdims);
                let as_dims = |v: &[i64]| -> Vec<usize> { v.iter().map(|&d| d as usize).collect() };
                let offset_dims = as_dims(&dn.offset_dims);
                let collapsed = as_dims(&dn.collapsed_slice_dims);
                let operand_batching = as_dims(&dn.operand_batching_dims);
                let batch_index: Vec<String> = (0..rdims.len())
                    .filter(|d| !offset_dims.contains(d))
                    .map(|d| m[d].clone())
                    .collect();
                let ivd = dn.index_vector_dim as usize;
                let irank = it.shape.len();
                let mut full = vec!["0u".to_string(); xt.shape.len()];
                for (d_start, &d_op) in dn.start_index_map.iter().enumerate() {
                    let d_op = d_op as usize;
                    let mut si = batch_index.clone();
                    if ivd < irank {
                        si.insert(ivd.min(si.len()), format!("{d_start}u"));
                    }
                    let max = xt.shape.get(d_op).copied().unwrap_or(0)
                        - slice_sizes.get(d_op).copied().unwrap_or(0);
                    let start = self.start_index_at(op.operands[1], &Index::Multi(si), max)?;
                    *full
                        .get_mut(d_op)
                        .ok_or_else(|| ctx(Error::invalid("start_index_map out of range")))? =
                        start;
                }
                for (i, &d_op) in operand_batching.iter().enumerate() {
                    let d_start =
                        dn.start_indices_batching_dims.get(i).copied().unwrap_or(0) as usize;
                    let pos = if d_start < ivd { d_start } else { d_start - 1 };
                    let b = batch_index.get(pos).cloned().unwrap_or_else(|| "0u".into());
                    let slot = full
                        .get_mut(d_op)
                        .ok_or_else(|| ctx(Error::invalid("operand_batching_dims out of range")))?;
                    *slot = format!("({slot} + {b})");
                }
                let window_dims = (0..xt.shape.len())
                    .filter(|d| !collapsed.contains(d) && !operand_batching.contains(d));
                for (k, d_op) in window_dims.enumerate() {
                    if let (Some(od), Some(slot)) = (
                        offset_dims.get(k).and_then(|&od| m.get(od)),
                        full.get_mut(d_op),
                    ) {
                        // A window dimension no index moves stays the output's coordinate
                        // itself (grouped reads see it as such: see `Quads`).
                        *slot = if slot == "0u" {
                            od.clone()
                        } else {
                            format!("({slot} + {od})")
                        };
                    }
                }
                self.value(op.operands[0], &Index::Multi(full))
            }
            other => Err(Error::internal(format!(
                "{} cannot be fused into a loop kernel",
                crate::ir::generic::op_name(other)
            ))),
        }
    }

    /// One element of a `dot_general`: a loop over the contracting dimensions, operands
    /// computed inline (prologue fusion) and converted to the result type.
    fn dot(
        &mut self,
        op: &Operation,
        idx: &Index,
        rdims: &[usize],
        rdt: ElementType,
        rc: Compute,
        d: &crate::ir::attr::DotDimensionNumbers,
    ) -> Result<String> {
        let (lt, rt) = (
            self.ty(op.operands[0])?.clone(),
            self.ty(op.operands[1])?.clone(),
        );
        let m = self.multi(idx, rdims);
        let free = |rank: usize, batch: &[i64], contract: &[i64]| -> Vec<usize> {
            (0..rank)
                .filter(|i| !batch.contains(&(*i as i64)) && !contract.contains(&(*i as i64)))
                .collect()
        };
        let lfree = free(
            lt.rank(),
            &d.lhs_batching_dimensions,
            &d.lhs_contracting_dimensions,
        );
        let rfree = free(
            rt.rank(),
            &d.rhs_batching_dimensions,
            &d.rhs_contracting_dimensions,
        );
        let contract_dims: Vec<usize> = d
            .lhs_contracting_dimensions
            .iter()
            .map(|&c| lt.shape[c as usize] as usize)
            .collect();
        let k: usize = contract_dims.iter().product();
        let mut li = vec![String::new(); lt.rank()];
        let mut ri = vec![String::new(); rt.rank()];
        let nb = d.lhs_batching_dimensions.len();
        for (i, (&lb, &rb)) in d
            .lhs_batching_dimensions
            .iter()
            .zip(&d.rhs_batching_dimensions)
            .enumerate()
        {
            li[lb as usize] = m[i].clone();
            ri[rb as usize] = m[i].clone();
        }
        for (j, &lf) in lfree.iter().enumerate() {
            li[lf] = m[nb + j].clone();
        }
        for (j, &rf) in rfree.iter().enumerate() {
            ri[rf] = m[nb + lfree.len() + j].clone();
        }
        let acc = self.fresh("acc");
        // Narrow floats accumulate in f32 and round once at the end.
        self.line(&format!("var {acc}: {} = {};", rc.wgsl(), dtype::zero(rc)));
        let chunk = self
            .contraction_chunk
            .clone()
            .filter(|ch| op.results.first() == Some(&ch.value));
        if k > 0 {
            let c = self.fresh("c");
            match &chunk {
                Some(ch) => self.open_loop(
                    &format!(
                        "for (var {c}: u32 = {0}; {c} < min({0} + {1}u, {k}u); {c} = {c} + 1u)",
                        ch.start, ch.len
                    ),
                    ch.len.min(k as u64),
                ),
                _ => self.open_loop(
                    &format!("for (var {c}: u32 = 0u; {c} < {k}u; {c} = {c} + 1u)"),
                    k as u64,
                ),
            }
            let cm = self.multi(&Index::Linear(c.clone()), &contract_dims);
            for (j, (&lc, &rcd)) in d
                .lhs_contracting_dimensions
                .iter()
                .zip(&d.rhs_contracting_dimensions)
                .enumerate()
            {
                li[lc as usize] = cm[j].clone();
                ri[rcd as usize] = cm[j].clone();
            }
            let a = self.value(op.operands[0], &Index::Multi(li))?;
            let b = self.value(op.operands[1], &Index::Multi(ri))?;
            self.multiply_add(&acc, (&a, lt.dtype), (&b, rt.dtype), rdt, rc)?;
            self.close(None);
        }
        if chunk.is_some() {
            return Ok(acc);
        }
        for h in dtype::helpers_for(rdt) {
            self.needs.insert(h.to_string());
        }
        Ok(self.bind(rc, &dtype::round(rdt, &acc)))
    }

    /// `bitcast_convert` between widths: a wide element splits into (or is assembled from) the
    /// narrow elements along the last dimension of the narrow side, least significant first.
    fn bitcast_resize(
        &mut self,
        x: ValueId,
        xt: &TensorType,
        idx: &Index,
        rdims: &[usize],
        to: ElementType,
        rc: Compute,
    ) -> Result<String> {
        let (win, wout) = (xt.dtype.bit_width(), to.bit_width());
        let tiny_float = |t: ElementType| t.is_float() && t.bit_width() <= 8;
        let m = self.multi(idx, rdims);
        // complex<f64> is two 64-bit halves (real first).
        if xt.dtype == ElementType::C128 && win > wout && wout <= 64 && !tiny_float(to) {
            let (j, outer) = m.split_last().ok_or_else(|| {
                Error::invalid("bitcast_convert to a narrower type needs rank >= 1")
            })?;
            let v = self.value(x, &Index::Multi(outer.to_vec()))?;
            let k = 64 / wout;
            let half = format!("bitcast<u64>(select({v}.y, {v}.x, {j} < {k}u))");
            let piece = if wout == 64 {
                half
            } else {
                format!(
                    "u32((({half}) >> (({j} % {k}u) * {wout}u)) & {}lu)",
                    (1u64 << wout) - 1
                )
            };
            return elementwise::from_raw_bits(to, rc, wout, &piece);
        }
        if to == ElementType::C128 && xt.dtype.bit_width() == 64 && !tiny_float(xt.dtype) {
            let xc = self.compute(xt.dtype)?;
            let mut parts = Vec::new();
            for j in 0..2 {
                let mut xi = m.clone();
                xi.push(format!("{j}u"));
                let v = self.value(x, &Index::Multi(xi))?;
                let bits = elementwise::raw_bits(xt.dtype, xc, &v, &mut self.needs)?;
                parts.push(format!("bitcast<f64>({bits})"));
            }
            return Ok(format!("vec2<f64>({}, {})", parts[0], parts[1]));
        }
        if win.max(wout) > 64 || tiny_float(xt.dtype) || tiny_float(to) {
            return Err(Error::unimplemented(format!(
                "bitcast_convert from {} to {to}",
                xt.dtype
            )));
        }
        let xc = self.compute(xt.dtype)?;
        let wide = |w: u32| if w > 32 { ("u64", "lu") } else { ("u32", "u") };
        if win > wout {
            // One input element gives k results: m = [input index..., j].
            let (j, outer) = m.split_last().ok_or_else(|| {
                Error::invalid("bitcast_convert to a narrower type needs rank >= 1")
            })?;
            let v = self.value(x, &Index::Multi(outer.to_vec()))?;
            let bits = elementwise::raw_bits(xt.dtype, xc, &v, &mut self.needs)?;
            let (_, sfx) = wide(win);
            let piece = format!(
                "u32((({bits}) >> ({j} * {wout}u)) & {}{sfx})",
                (1u64 << wout) - 1
            );
            let piece = if wout > 32 {
                format!("u64({piece})")
            } else {
                piece
            };
            elementwise::from_raw_bits(to, rc, wout, &piece)
        } else {
            // k input elements (the last input dimension) make one result.
            let k = (wout / win.max(1)) as usize;
            let (u, _) = wide(wout);
            let acc = self.fresh("bits");
            self.line(&format!("var {acc}: {u} = {u}(0);"));
            for j in 0..k {
                let mut xi = m.clone();
                xi.push(format!("{j}u"));
                let v = self.value(x, &Index::Multi(xi))?;
                let bits = elementwise::raw_bits(xt.dtype, xc, &v, &mut self.needs)?;
                self.line(&format!(
                    "{acc} = {acc} | ({u}({bits}) << {}u);",
                    j as u32 * win
                ));
            }
            elementwise::from_raw_bits(to, rc, wout, &acc)
        }
    }

    /// `reduce_precision`: rounds the mantissa to nearest-even at `m` bits, then maps exponents
    /// beyond an `e`-bit format to ±inf (overflow) or ±0 (underflow), on the bits of the f32 or
    /// f64 value (narrow floats are computed in f32, which holds them exactly). NaNs stay NaN
    /// while mantissa bits remain; with none they become infinities, as XLA does.
    fn reduce_precision(&mut self, rc: Compute, x: &str, e: i64, m: i64) -> Result<String> {
        let (u, sfx, mbits, ebits, bias) = match rc {
            Compute::F32 => ("u32", "u", 23i64, 8i64, 127i64),
            Compute::F64 => ("u64", "lu", 52, 11, 1023),
            _ => return Err(Error::invalid("reduce_precision on a non-float type")),
        };
        if e < 1 || m < 0 {
            return Err(Error::invalid(format!(
                "reduce_precision format e{e}m{m} needs exponent_bits >= 1, mantissa_bits >= 0"
            )));
        }
        let b = self.fresh("rp");
        let orig = self.fresh("rpx");
        self.line(&format!("let {orig}: {u} = bitcast<{u}>({x});"));
        self.line(&format!("var {b}: {u} = {orig};"));
        if m < mbits {
            let shift = mbits - m;
            let last: u64 = 1u64 << shift;
            let base = (last >> 1) - 1;
            self.line(&format!(
                "{b} = ({b} + ((({b} >> {shift}u) & 1{sfx}) + {base}{sfx})) & ~{}{sfx};",
                last - 1
            ));
        }
        if e < ebits {
            let max_exp = bias + (1i64 << (e - 1)) - 1;
            let min_exp = bias - (1i64 << (e - 1)) + 2;
            let emask: u64 = ((1u64 << ebits) - 1) << mbits;
            let sign: u64 = 1u64 << (mbits + ebits);
            let ex = self.fresh("ex");
            self.line(&format!("let {ex}: {u} = {b} & {emask}{sfx};"));
            self.line(&format!(
                "if ({ex} > {}{sfx}) {{ {b} = ({b} & {sign}{sfx}) | {emask}{sfx}; }} else if ({ex} <= {}{sfx}) {{ {b} = {b} & {sign}{sfx}; }}",
                (max_exp as u64) << mbits,
                (min_exp.max(0) as u64) << mbits
            ));
        }
        // NaN on the bits (a float self-compare may be folded away): kept while mantissa bits
        // remain, else the infinity of its sign.
        let emask: u64 = ((1u64 << ebits) - 1) << mbits;
        let sign: u64 = 1u64 << (mbits + ebits);
        let nan_bits = if m > 0 {
            orig.clone()
        } else {
            format!("(({orig} & {sign}{sfx}) | {emask}{sfx})")
        };
        self.line(&format!(
            "if (({orig} & ~{sign}{sfx}) > {emask}{sfx}) {{ {b} = {nan_bits}; }}"
        ));
        Ok(format!("bitcast<{}>({b})", rc.wgsl()))
    }

    /// `acc += a * b` with both factors converted to the accumulator type (narrow floats
    /// accumulate in f32; complex multiplies; booleans are and/or).
    fn multiply_add(
        &mut self,
        acc: &str,
        (a, at): (&str, ElementType),
        (b, bt): (&str, ElementType),
        rdt: ElementType,
        rc: Compute,
    ) -> Result<()> {
        let ac = self.compute(at)?;
        let bc = self.compute(bt)?;
        let wide = |t: ElementType| match t {
            ElementType::F16 | ElementType::BF16 => ElementType::F32,
            t if dtype::narrow_float(t).is_some() => ElementType::F32,
            other => other,
        };
        let acc_t = wide(rdt);
        let a = elementwise::convert(wide(at), ac, acc_t, rc, a)?;
        let b = elementwise::convert(wide(bt), bc, acc_t, rc, b)?;
        if rc.is_complex() {
            self.needs.insert(format!("wh_cmul_{}", rc.suffix()));
            self.line(&format!(
                "{acc} = {acc} + wh_cmul_{}({a}, {b});",
                rc.suffix()
            ));
        } else if rc == Compute::Bool {
            self.line(&format!("{acc} = {acc} || ({a} && {b});"));
        } else {
            self.line(&format!("{acc} = {acc} + ({a} * {b});"));
        }
        Ok(())
    }

    /// One element of a `convolution`: a loop over the kernel window and, where the window
    /// position falls on an input element (not padding, not a hole of lhs dilation), over the
    /// input features of the output feature's group.
    fn convolution(
        &mut self,
        op: &Operation,
        idx: &Index,
        rdims: &[usize],
        rdt: ElementType,
        rc: Compute,
        c: &crate::ir::ops::Convolution,
    ) -> Result<String> {
        let (xt, kt) = (
            self.ty(op.operands[0])?.clone(),
            self.ty(op.operands[1])?.clone(),
        );
        let d = &c.dimension_numbers;
        let u = |v: i64| v.max(0) as usize;
        let m = self.multi(idx, rdims);
        let sp = d.input_spatial_dimensions.len();
        let groups = c.feature_group_count.max(1) as u64;
        let bgroups = c.batch_group_count.max(1) as u64;
        let out_features = rdims
            .get(u(d.output_feature_dimension))
            .copied()
            .unwrap_or(1) as u64;
        let out_batch = rdims.get(u(d.output_batch_dimension)).copied().unwrap_or(1) as u64;
        let cg = kt
            .shape
            .get(u(d.kernel_input_feature_dimension))
            .copied()
            .unwrap_or(0)
            .max(0) as u64;
        let of = m[u(d.output_feature_dimension)].clone();
        let ob = m[u(d.output_batch_dimension)].clone();
        // Input batch and first input feature of this output element's groups.
        let ib = if bgroups > 1 {
            format!(
                "(({of} / {}u) * {out_batch}u + {ob})",
                (out_features / bgroups).max(1)
            )
        } else {
            ob
        };
        let f0 = if groups > 1 {
            format!("(({of} / {}u) * {cg}u)", (out_features / groups).max(1))
        } else {
            "0u".to_string()
        };
        let wdims: Vec<usize> = d
            .kernel_spatial_dimensions
            .iter()
            .map(|&k| kt.shape.get(u(k)).copied().unwrap_or(0).max(0) as usize)
            .collect();
        let wcount: usize = wdims.iter().product();
        let chunk = self
            .contraction_chunk
            .clone()
            .filter(|ch| op.results.first() == Some(&ch.value));
        let acc = self.fresh("acc");
        self.line(&format!("var {acc}: {} = {};", rc.wgsl(), dtype::zero(rc)));
        if wcount > 0 && cg > 0 {
            let w = self.fresh("w");
            // All window positions and features, or the chunk of a split-K stage.
            let ((w0, w1, wtrips), (f0c, f1, ftrips)) = match &chunk {
                Some(ch) => (
                    (
                        ch.start.clone(),
                        format!("min({} + {}u, {wcount}u)", ch.start, ch.len),
                        ch.len.min(wcount as u64),
                    ),
                    (
                        ch.feature_start.clone(),
                        format!("min({} + {}u, {cg}u)", ch.feature_start, ch.feature_len),
                        ch.feature_len.min(cg),
                    ),
                ),
                None => (
                    ("0u".to_string(), format!("{wcount}u"), wcount as u64),
                    ("0u".to_string(), format!("{cg}u"), cg),
                ),
            };
            self.open_loop(
                &format!("for (var {w}: u32 = {w0}; {w} < {w1}; {w} = {w} + 1u)"),
                wtrips,
            );
            let wi = self.multi(&Index::Linear(w.clone()), &wdims);
            let mut xi = vec!["0u".to_string(); xt.rank()];
            let mut ki = vec!["0u".to_string(); kt.rank()];
            let mut conds = Vec::new();
            let get = |v: &[i64], i: usize, default: i64| v.get(i).copied().unwrap_or(default);
            for s in 0..sp {
                let xd = u(d.input_spatial_dimensions[s]);
                let od = u(d.output_spatial_dimensions.get(s).copied().unwrap_or(0));
                let stride = get(&c.window_strides, s, 1);
                let rd = get(&c.rhs_dilation, s, 1);
                let ld = get(&c.lhs_dilation, s, 1).max(1);
                let low = c.padding.get(s).map_or(0, |p| p.0);
                let p = self.fresh("p");
                self.line(&format!(
                    "let {p}: i32 = i32({}) * {stride}i + i32({}) * {rd}i - {low}i;",
                    m[od], wi[s]
                ));
                conds.push(format!("{p} >= 0i"));
                if ld > 1 {
                    conds.push(format!("{p} % {ld}i == 0i"));
                }
                conds.push(format!(
                    "{p} / {ld}i < {}i",
                    xt.shape.get(xd).copied().unwrap_or(0)
                ));
                xi[xd] = format!("u32({p} / {ld}i)");
                let kd = u(d.kernel_spatial_dimensions[s]);
                ki[kd] = if c.window_reversal.get(s).copied().unwrap_or(false) {
                    format!("({}u - {})", wdims[s] - 1, wi[s])
                } else {
                    wi[s].clone()
                };
            }
            if !conds.is_empty() {
                self.open(&format!("if ({})", conds.join(" && ")));
            }
            let f = self.fresh("f");
            self.open_loop(
                &format!("for (var {f}: u32 = {f0c}; {f} < {f1}; {f} = {f} + 1u)"),
                ftrips,
            );
            xi[u(d.input_batch_dimension)] = ib.clone();
            xi[u(d.input_feature_dimension)] = format!("({f0} + {f})");
            ki[u(d.kernel_input_feature_dimension)] = f.clone();
            ki[u(d.kernel_output_feature_dimension)] = of.clone();
            let a = self.value(op.operands[0], &Index::Multi(xi))?;
            let b = self.value(op.operands[1], &Index::Multi(ki))?;
            self.multiply_add(&acc, (&a, xt.dtype), (&b, kt.dtype), rdt, rc)?;
            self.close(None);
            if !conds.is_empty() {
                self.close(None);
            }
            self.close(None);
        }
        if chunk.is_some() {
            return Ok(acc);
        }
        for h in dtype::helpers_for(rdt) {
            self.needs.insert(h.to_string());
        }
        Ok(self.bind(rc, &dtype::round(rdt, &acc)))
    }

    /// A clamped start index of a dynamic slice: the scalar `v`, clamped to [0, max].
    fn start_index(&mut self, v: ValueId, max: i64) -> Result<String> {
        self.start_index_at(v, &Index::scalar(), max)
    }

    /// Element `at` of index tensor `v`, clamped to [0, max], as a `u32`.
    fn start_index_at(&mut self, v: ValueId, at: &Index, max: i64) -> Result<String> {
        // Once per index and bound: the elements of a group in one row share their gathered
        // row's start, and a grouped read of that row must see one name for it.
        let key = (v, Index::Linear(format!("start {max} {at:?}")));
        if let Some(n) = self.lookup(&key) {
            return Ok(n);
        }
        let n = self.start_index_unmemoized(v, at, max)?;
        if let Some(memo) = self.memo.last_mut() {
            memo.insert(key, n.clone());
        }
        Ok(n)
    }

    fn start_index_unmemoized(&mut self, v: ValueId, at: &Index, max: i64) -> Result<String> {
        let t = self.ty(v)?.dtype;
        let c = self.compute(t)?;
        let s = self.value(v, at)?;
        let max = max.max(0);
        let e = match c {
            Compute::I32 => format!("u32(clamp({s}, 0i, {max}i))"),
            Compute::U32 => format!("min({s}, {max}u)"),
            Compute::I64 => format!("u32(clamp({s}, 0li, {max}li))"),
            Compute::U64 => format!("u32(min({s}, {max}lu))"),
            _ => {
                return Err(Error::invalid(format!(
                    "dynamic slice start index of type {t}"
                )))
            }
        };
        let n = self.fresh("s");
        self.line(&format!("let {n}: u32 = {e};"));
        Ok(n)
    }

    fn pad(
        &mut self,
        op: &Operation,
        idx: &Index,
        rdims: &[usize],
        rc: Compute,
        low: &[i64],
        interior: &[i64],
    ) -> Result<String> {
        let xt = self.ty(op.operands[0])?.clone();
        let m = self.multi(idx, rdims);
        if let Some(v) = self.grouped_pad(op, &m, rdims, rc, low, interior)? {
            return Ok(v);
        }
        let pv = self.value(op.operands[1], &Index::scalar())?;
        let mut conds = Vec::new();
        let mut xi = Vec::new();
        for k in 0..m.len() {
            let (cond, x) = self.padded_coordinate(&m[k], xt.shape[k], low[k], interior[k]);
            conds.push(cond);
            xi.push(x);
        }
        if xt.num_elements() == 0 {
            return Ok(pv);
        }
        let out = self.fresh("v");
        self.line(&format!("var {out}: {} = {pv};", rc.wgsl()));
        if !conds.is_empty() {
            self.open(&format!("if ({})", conds.join(" && ")));
        }
        let x = self.value(op.operands[0], &Index::Multi(xi))?;
        self.line(&format!("{out} = {x};"));
        if !conds.is_empty() {
            self.close(None);
        }
        Ok(out)
    }

    /// Coordinate `mk` of a pad's result in its operand (`d` long, padded by `low` and
    /// `interior`): the WGSL test that it lies in the operand, and the operand's coordinate.
    fn padded_coordinate(&mut self, mk: &str, d: i64, low: i64, interior: i64) -> (String, String) {
        let step = interior + 1;
        let t = self.fresh("p");
        self.line(&format!("let {t}: i32 = i32({mk}) - ({low}i);"));
        if step == 1 {
            (
                format!("({t} >= 0i && {t} < {d}i)"),
                format!("u32(max({t}, 0i))"),
            )
        } else {
            (
                format!("({t} >= 0i && ({t} % {step}i) == 0i && ({t} / {step}i) < {d}i)"),
                format!("u32(max({t}, 0i) / {step}i)"),
            )
        }
    }

    /// A later position (`place` 1 to 3) of a group whose `vec4` its first position computed
    /// under `key`: that lane, or `None` when the `vec4` is out of scope.
    fn group_lane(&mut self, key: &(ValueId, Index), place: usize, rc: Compute) -> Option<String> {
        let lane = ["x", "y", "z", "w"][place.min(3)];
        self.lookup(key)
            .map(|c4| self.bind(rc, &format!("{c4}.{lane}")))
    }

    /// The four values of `x` at multi-index `xi` with its innermost coordinate `n0`, `n0 + 1`,
    /// `n0 + 2`, `n0 + 3`, registered as a group of their own (so `x`'s reads are grouped).
    fn group_values(&mut self, x: ValueId, xi: &[String], n0: &str) -> Result<Vec<String>> {
        let mut lanes = Vec::new();
        for p in 0..4 {
            let np = if p == 0 {
                n0.to_string()
            } else {
                format!("({n0} + {p}u)")
            };
            if let Some(q) = self.quads.as_mut() {
                q.positions.insert(np.clone(), (n0.to_string(), p));
            }
            let mut at = xi.to_vec();
            if let Some(l) = at.last_mut() {
                *l = np;
            }
            lanes.push(self.value(x, &Index::Multi(at))?);
        }
        Ok(lanes)
    }

    /// A pad at a grouped position (see [`Quads`]) that pads no dimension but outer ones, so
    /// that the group's four positions share the test of whether they lie in the operand and
    /// the operand's innermost coordinates are theirs: at the group's first position one test
    /// fills a `vec4` with the operand's four values (read as a group) or the padding value;
    /// the later positions read its lanes. Each position testing on its own read the operand's
    /// group once per position, in four branches (`jnp.pad` of 8 rows around 1024 x 2048
    /// floats: 1.6 times a copy of the same bytes). `None` where this does not apply (and for
    /// the later positions of a group whose `vec4` is out of scope).
    fn grouped_pad(
        &mut self,
        op: &Operation,
        m: &[String],
        rdims: &[usize],
        rc: Compute,
        low: &[i64],
        interior: &[i64],
    ) -> Result<Option<String>> {
        let (Some(&v), Some(&x)) = (op.results.first(), op.operands.first()) else {
            return Ok(None);
        };
        let Some(last) = m.len().checked_sub(1) else {
            return Ok(None);
        };
        let xt = self.ty(x)?.clone();
        let Some(q) = self.quads.as_ref() else {
            return Ok(None);
        };
        if !q.rows
            || last == 0
            || rdims.get(last).is_none_or(|&d| d % 4 != 0)
            || xt.dims().get(last) != rdims.get(last)
            || low.get(last) != Some(&0)
            || interior.get(last) != Some(&0)
            || !matches!(rc.wgsl(), "f32" | "i32" | "u32")
            || xt.num_elements() == 0
            || crate::fusion::switched_off("WGPU_HLO_QUAD_PADS")
        {
            return Ok(None);
        }
        let Some((first, place)) = q.positions.get(&m[last]).cloned() else {
            return Ok(None);
        };
        let key = (
            v,
            Index::Linear(format!("pad4 {} {first}", m[..last].join(" "))),
        );
        if place > 0 {
            return Ok(self.group_lane(&key, place, rc));
        }
        let pv = self.value(op.operands[1], &Index::scalar())?;
        let mut conds = Vec::new();
        let mut outer = Vec::new();
        for k in 0..last {
            let (cond, x) = self.padded_coordinate(&m[k], xt.shape[k], low[k], interior[k]);
            conds.push(cond);
            outer.push(x);
        }
        let c4 = self.fresh("c");
        self.line(&format!("var {c4} = vec4<{}>({pv});", rc.wgsl()));
        self.open(&format!("if ({})", conds.join(" && ")));
        outer.push(first.clone());
        let lanes = self.group_values(x, &outer, &first)?;
        self.line(&format!(
            "{c4} = vec4<{}>({});",
            rc.wgsl(),
            lanes.join(", ")
        ));
        self.close(None);
        if let Some(memo) = self.memo.last_mut() {
            memo.insert(key, c4.clone());
        }
        Ok(Some(self.bind(rc, &format!("{c4}.x"))))
    }

    /// After a slice with stride 1 along the innermost dimension from a multiple of 4 maps a
    /// grouped innermost coordinate `m` (see [`Quads`]) to `xi`, registers `xi`'s innermost
    /// coordinate as grouped too (its group's first position is the first one's, shifted the
    /// same way), so the operand's reads stay grouped: a fused cell's gates, slices of one
    /// product at multiples of its width.
    fn shift_group(
        &mut self,
        m: &[String],
        xi: &[String],
        start: Option<&i64>,
        stride: Option<&i64>,
    ) {
        let (Some(&start), Some(&1), Some(last), Some(shifted)) =
            (start, stride, m.last(), xi.last())
        else {
            return;
        };
        if start % 4 != 0
            || start < 0
            || self.window.is_some()
            || crate::fusion::switched_off("WGPU_HLO_QUAD_SLICES")
        {
            return;
        }
        let Some(q) = self.quads.as_mut().filter(|q| q.rows) else {
            return;
        };
        let Some((first, place)) = q.positions.get(last).cloned() else {
            return;
        };
        let first_shifted = affine(&first, 1, start);
        q.positions
            .insert(first_shifted.clone(), (first_shifted.clone(), 0));
        q.positions.insert(shifted.clone(), (first_shifted, place));
    }

    /// A concatenation whose parts all read one value through fused slices and reversals
    /// (`jnp.roll`: two slices of `x`; reflect padding: `x` between reversed slices of it),
    /// at coordinates `m` of the result along `dim`: that value read once, at the part's
    /// coordinates chosen by `select`s, where branches would read it once per part. llvmpipe
    /// runs both sides of a branch its lanes disagree on, each under a mask: `jnp.roll` of
    /// 2048 x 2048 along both axes, four texel fetches an element, took 58 ms of GPU time,
    /// against 12 ms for an elementwise chain over the same elements reading one each. `None`
    /// where the parts read different values.
    fn concatenate_by_index(
        &mut self,
        op: &Operation,
        m: &[String],
        dim: usize,
    ) -> Result<Option<String>> {
        if crate::fusion::switched_off("WGPU_HLO_CONCAT_SELECTS") {
            return Ok(None);
        }
        let mut root = None;
        // Per part: the end of its range along `dim`, and the root's coordinates.
        let mut parts: Vec<(usize, Vec<String>)> = Vec::new();
        let mut offset = 0usize;
        for &o in &op.operands {
            let size = self.ty(o)?.dims().get(dim).copied().unwrap_or(0);
            if size == 0 {
                continue;
            }
            let mut xi = m.to_vec();
            if offset > 0 {
                xi[dim] = format!("({} - {offset}u)", m[dim]);
            }
            let mut v = o;
            while (self.fused)(v) {
                let Some(d) = self.defs.get(&v).copied() else {
                    break;
                };
                match &d.op {
                    Op::Slice { start, strides, .. } => {
                        xi = slice_operand_index(&xi, start, strides);
                    }
                    Op::Reverse { dimensions } => {
                        let dims = self.ty(v)?.dims();
                        for &k in dimensions {
                            let k = k as usize;
                            if let (Some(x), Some(&n)) = (xi.get_mut(k), dims.get(k)) {
                                *x = format!("({}u - {x})", n.saturating_sub(1));
                            }
                        }
                    }
                    _ => break,
                }
                v = d.operands[0];
            }
            if root.is_some_and(|r| r != v) {
                return Ok(None);
            }
            root = Some(v);
            offset += size;
            parts.push((offset, xi));
        }
        let (Some(root), Some((_, last))) = (root, parts.last()) else {
            return Ok(None);
        };
        if parts.len() < 2 {
            return Ok(None);
        }
        // From the last part back: part i's coordinates where m[dim] < its end. Coordinates
        // the parts agree on stay as they are (a group position stays one).
        let mut idx = last.clone();
        for (end, xi) in parts.iter().rev().skip(1) {
            for (k, x) in xi.iter().enumerate() {
                if *x != idx[k] {
                    idx[k] = format!("select({}, {x}, {} < {end}u)", idx[k], m[dim]);
                }
            }
        }
        for x in idx.iter_mut() {
            if x.starts_with("select(") {
                let name = self.fresh("i");
                self.line(&format!("let {name} = {x};"));
                *x = name;
            }
        }
        self.value(root, &Index::Multi(idx)).map(Some)
    }

    /// Opens the branch of part `i` of `n` (more than one) of a concatenation: `if cond` for
    /// the first, `else if cond` for the middle ones, `else` for the last.
    fn branch_of_parts(&mut self, i: usize, n: usize, cond: &str) {
        if i == 0 {
            self.open(&format!("if {cond}"));
        } else if i + 1 == n {
            self.close(Some("else"));
        } else {
            self.close(Some(&format!("else if {cond}")));
        }
    }

    /// The operand coordinates of a reshape's result coordinates `m`, dimension group by
    /// dimension group ([`reshape_groups`]): a result dimension split from one operand
    /// dimension is that coordinate's quotient and remainder, merged ones a sum of products,
    /// and a dimension in a group of its own passes through. Through the linear position,
    /// every coordinate was a quotient and remainder of the whole offset: a repeat written
    /// `reshape(broadcast_in_dim(g))` along two dimensions took 12 divisions an element where
    /// it takes 2 (lavapipe: 10.6 ms for a 32x56x56x64 repeat of a 32x28x28x64 value,
    /// against 6.1 for a ReLU of the same size). `None` where the groups do not line up.
    fn reshape_by_groups(
        &mut self,
        m: &[String],
        rdims: &[usize],
        odims: &[usize],
    ) -> Option<Vec<String>> {
        if m.len() != rdims.len() {
            return None;
        }
        let mut xi = Vec::with_capacity(odims.len());
        for (rs, os) in reshape_groups(rdims, odims)? {
            match (rs.len(), os.len()) {
                (_, 0) => {}
                (0, n) => xi.extend(std::iter::repeat_n("0u".to_string(), n)),
                (1, 1) => xi.push(m[rs.start].clone()),
                (1, _) => {
                    let parts = self.multi(&Index::Linear(m[rs.start].clone()), &odims[os]);
                    xi.extend(parts);
                }
                (_, n) => {
                    let lin = linearize(&m[rs.clone()], &rdims[rs]);
                    let lin = if lin.len() > 12 {
                        let name = self.fresh("i");
                        self.line(&format!("let {name} = {lin};"));
                        name
                    } else {
                        lin
                    };
                    if n == 1 {
                        xi.push(lin);
                    } else {
                        xi.extend(self.multi(&Index::Linear(lin), &odims[os]));
                    }
                }
            }
        }
        (xi.len() == odims.len()).then_some(xi)
    }

    /// Whether the innermost result coordinate of a reshape from `odims` to `rdims` passes
    /// through as the operand's innermost (the last group maps one dimension to one): then a
    /// grouped position (see [`Quads`]) stays one.
    fn innermost_passes(rdims: &[usize], odims: &[usize]) -> bool {
        reshape_groups(rdims, odims)
            .and_then(|g| {
                g.into_iter()
                    .rev()
                    .find(|(r, o)| !r.is_empty() && !o.is_empty())
            })
            .is_some_and(|(r, o)| {
                r.len() == 1 && o.len() == 1 && r.end == rdims.len() && o.end == odims.len()
            })
    }

    /// The operand's index of a reshape that keeps the innermost extent (a multiple of 4), at
    /// a multi-index whose innermost coordinate is a grouped position (see [`Quads`]): that
    /// coordinate passes through, so the operand's reads stay grouped; the outer ones are
    /// re-split. `None` otherwise (the caller goes through the linear index).
    fn reshape_keeping_group(
        &mut self,
        idx: &Index,
        rdims: &[usize],
        odims: &[usize],
    ) -> Option<Vec<String>> {
        let Index::Multi(m) = idx else {
            return None;
        };
        let q = self.quads.as_ref()?;
        let (&inner, &operand_inner) = (rdims.last()?, odims.last()?);
        let folding = inner != operand_inner;
        if !(q.rows || folding && q.dims == rdims)
            || self.window.is_some()
            || operand_inner == 0
            || inner % operand_inner != 0
            || operand_inner % 4 != 0
            || m.len() != rdims.len()
            || !q.positions.contains_key(m.last()?)
        {
            return None;
        }
        let (r, o) = (rdims.len(), odims.len());
        if inner == operand_inner {
            let mut xi = if o > 1 {
                match self.reshape_by_groups(&m[..r - 1], &rdims[..r - 1], &odims[..o - 1]) {
                    Some(xi) => xi,
                    None => {
                        let outer = linearize(&m[..r - 1], &rdims[..r - 1]);
                        self.multi(&Index::Linear(outer), &odims[..o - 1])
                    }
                }
            } else {
                Vec::new()
            };
            xi.push(m[r - 1].clone());
            return Some(xi);
        }
        // Rows of several operand rows (`passes::fold_rows` reads `[R, C]` as
        // `[R / f, f * C]`): a group lies within one operand row (C a multiple of 4), at
        // the group's innermost positions modulo C, which become grouped positions of their
        // own. The operand's outer coordinates come from the group's first position, so that
        // the group's four reads share them (and their one vec4 load).
        if o < 2 {
            return None;
        }
        let pos = m[r - 1].clone();
        let (first, place) = q.positions.get(&pos)?.clone();
        let ratio = inner / operand_inner;
        let outer = linearize(&m[..r - 1], &rdims[..r - 1]);
        let lin = format!("(({outer}) * {ratio}u + {first} / {operand_inner}u)");
        let mut xi = self.multi(&Index::Linear(lin), &odims[..o - 1]);
        let at = |p: &str| format!("({p} % {operand_inner}u)");
        let (key, first_key) = (at(&pos), at(&first));
        let q = self.quads.as_mut()?;
        q.positions.insert(key.clone(), (first_key, place));
        q.folded.insert(key.clone());
        xi.push(key);
        Some(xi)
    }

    /// A concatenation at a grouped position (see [`Quads`]) whose group lies within one part:
    /// along an outer dimension (the group's positions share every coordinate but the
    /// innermost), or along the innermost one when every part has a multiple of 4 elements
    /// along it. At the group's first position the part is chosen once and its four values
    /// computed in that branch (where their reads are grouped too) into a `vec4`; the later
    /// positions read its lanes. Each position choosing its part (llvmpipe: a branch per
    /// position, each reading its part a scalar at a time) made a fused LSTM cell's gate
    /// gradients, a 32 x 512 concatenation of four products of slices, 0.17 ms a step; a
    /// concatenation of 1024 and 512 rows of 2048 floats loaded each part's `vec4` once per
    /// position, in four branches, and took three times a copy of the same bytes.
    /// `None` where this does not apply (and for the later positions of a group whose `vec4`
    /// is out of scope).
    fn grouped_concatenate(
        &mut self,
        op: &Operation,
        m: &[String],
        rc: Compute,
        dim: usize,
    ) -> Result<Option<String>> {
        let Some(v) = op.results.first().copied() else {
            return Ok(None);
        };
        if self.quads.is_none() {
            return Ok(None);
        }
        let Some(last) = m.len().checked_sub(1) else {
            return Ok(None);
        };
        let innermost = dim == last;
        let rows_of_four = self.ty(v)?.dims().last().is_some_and(|&d| d % 4 == 0);
        let Some(q) = self.quads.as_ref() else {
            return Ok(None);
        };
        if !q.rows
            || dim > last
            || !rows_of_four
            || !matches!(rc.wgsl(), "f32" | "i32" | "u32")
            || crate::fusion::switched_off("WGPU_HLO_QUAD_CONCATS")
        {
            return Ok(None);
        }
        let Some((first, place)) = q.positions.get(&m[last]).cloned() else {
            return Ok(None);
        };
        // Keyed by the outer coordinates too: the group's positions share them.
        let key = (
            v,
            Index::Linear(format!("concat4 {} {first}", m[..last].join(" "))),
        );
        if place > 0 {
            return Ok(self.group_lane(&key, place, rc));
        }
        let mut parts = Vec::new();
        for &o in &op.operands {
            let size = self.ty(o)?.dims().get(dim).copied().unwrap_or(0);
            if innermost && size % 4 != 0 {
                return Ok(None);
            }
            if size > 0 {
                parts.push((o, size));
            }
        }
        if parts.is_empty() {
            return Ok(None);
        }
        let c4 = self.fresh("c");
        self.line(&format!("var {c4}: vec4<{}>;", rc.wgsl()));
        let at = if innermost {
            first.clone()
        } else {
            m[dim].clone()
        };
        let mut offset = 0usize;
        for (i, &(o, size)) in parts.iter().enumerate() {
            let cond = format!("({at} < {}u)", offset + size);
            if parts.len() > 1 {
                self.branch_of_parts(i, parts.len(), &cond);
            }
            // The part's own coordinates of the group, registered as a group of its own (the
            // innermost ones; along an outer dimension that coordinate moves by the offset).
            let n0 = if offset == 0 || !innermost {
                first.clone()
            } else {
                format!("({first} - {offset}u)")
            };
            let mut xi = m.to_vec();
            if !innermost && offset > 0 {
                xi[dim] = format!("({} - {offset}u)", m[dim]);
            }
            let lanes = self.group_values(o, &xi, &n0)?;
            self.line(&format!(
                "{c4} = vec4<{}>({});",
                rc.wgsl(),
                lanes.join(", ")
            ));
            offset += size;
        }
        if parts.len() > 1 {
            self.close(None);
        }
        if let Some(memo) = self.memo.last_mut() {
            memo.insert(key, c4.clone());
        }
        Ok(Some(self.bind(rc, &format!("{c4}.x"))))
    }

    fn concatenate(
        &mut self,
        op: &Operation,
        idx: &Index,
        rdims: &[usize],
        rc: Compute,
        dim: usize,
    ) -> Result<String> {
        let m = self.multi(idx, rdims);
        if let Some(v) = self.concatenate_by_index(op, &m, dim)? {
            return Ok(v);
        }
        if let Some(v) = self.grouped_concatenate(op, &m, rc, dim)? {
            return Ok(v);
        }
        let out = self.fresh("v");
        self.line(&format!("var {out}: {};", rc.wgsl()));
        let mut offset = 0usize;
        let parts: Vec<(ValueId, usize)> = op
            .operands
            .iter()
            .map(|&o| Ok((o, self.ty(o)?.dims().get(dim).copied().unwrap_or(0))))
            .collect::<Result<_>>()?;
        let parts: Vec<(ValueId, usize)> = parts.into_iter().filter(|p| p.1 > 0).collect();
        for (i, (o, size)) in parts.iter().enumerate() {
            let cond = format!("({} < {}u)", m[dim], offset + size);
            if parts.len() > 1 {
                self.branch_of_parts(i, parts.len(), &cond);
            }
            let mut xi = m.clone();
            if offset > 0 {
                xi[dim] = format!("({} - {offset}u)", m[dim]);
            }
            let x = self.value(*o, &Index::Multi(xi))?;
            self.line(&format!("{out} = {x};"));
            offset += size;
        }
        if parts.len() > 1 {
            self.close(None);
        }
        Ok(out)
    }
}

/// The value of `e` when it is a constant WGSL integer expression of the forms the emitters
/// write (literals with `u`/`i` suffixes, `+ - * / %`, parentheses, `u32(..)`, `i32(..)`,
/// `max(..)`, `min(..)`), computed without wrapping; `None` for anything else.
pub(crate) fn const_index(e: &str) -> Option<i64> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
                self.i += 1;
            }
        }
        fn eat(&mut self, t: &str) -> bool {
            self.ws();
            if self.s[self.i..].starts_with(t.as_bytes()) {
                self.i += t.len();
                true
            } else {
                false
            }
        }
        fn sum(&mut self) -> Option<i64> {
            let mut v = self.product()?;
            loop {
                if self.eat("+") {
                    v = v.checked_add(self.product()?)?;
                } else if self.eat("-") {
                    v = v.checked_sub(self.product()?)?;
                } else {
                    return Some(v);
                }
            }
        }
        fn product(&mut self) -> Option<i64> {
            let mut v = self.atom()?;
            loop {
                if self.eat("*") {
                    v = v.checked_mul(self.atom()?)?;
                } else if self.eat("/") {
                    v = v.checked_div(self.atom()?)?;
                } else if self.eat("%") {
                    v = v.checked_rem(self.atom()?)?;
                } else {
                    return Some(v);
                }
            }
        }
        fn args(&mut self, n: usize) -> Option<Vec<i64>> {
            let mut out = Vec::new();
            for k in 0..n {
                if k > 0 && !self.eat(",") {
                    return None;
                }
                out.push(self.sum()?);
            }
            self.eat(")").then_some(out)
        }
        fn atom(&mut self) -> Option<i64> {
            self.ws();
            if self.eat("(") {
                let v = self.sum()?;
                return self.eat(")").then_some(v);
            }
            for (f, n) in [("u32(", 1), ("i32(", 1), ("max(", 2), ("min(", 2)] {
                if self.eat(f) {
                    let a = self.args(n)?;
                    return match f {
                        "max(" => a.iter().copied().max(),
                        "min(" => a.iter().copied().min(),
                        _ => a.first().copied(),
                    };
                }
            }
            let start = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).ok()?;
            let v = digits.parse::<i64>().ok()?;
            if matches!(self.s.get(self.i), Some(b'u' | b'i')) {
                self.i += 1;
            }
            Some(v)
        }
    }
    let mut p = P {
        s: e.as_bytes(),
        i: 0,
    };
    let v = p.sum()?;
    p.ws();
    (p.i == e.len()).then_some(v)
}

/// `i * stride + start` as a `u32` expression, simplified.
fn affine(i: &str, stride: i64, start: i64) -> String {
    let scaled = if stride == 1 {
        i.to_string()
    } else {
        format!("{i} * {stride}u")
    };
    if start == 0 {
        scaled
    } else {
        format!("({scaled} + {start}u)")
    }
}

/// The operand's index of a `slice` read at `m` (the result's per-dimension index).
fn slice_operand_index(m: &[String], start: &[i64], strides: &[i64]) -> Vec<String> {
    m.iter()
        .zip(start.iter().zip(strides))
        .map(|(i, (&s, &st))| affine(i, st, s))
        .collect()
}

/// The operand's index of a `transpose` by `permutation` read at `m`.
fn transpose_operand_index(m: &[String], permutation: &[i64]) -> Vec<String> {
    let mut xi = vec![String::new(); m.len()];
    for (i, &p) in permutation.iter().enumerate() {
        xi[p as usize] = m[i].clone();
    }
    xi
}

/// The operand's index of a `broadcast_in_dim` read at `m` (the result's per-dimension
/// index): dimension `dimensions[i]` of the result, or 0 where the operand's is of size 1.
fn broadcast_operand_index(m: &[String], dimensions: &[i64], shape: &[i64]) -> Vec<String> {
    dimensions
        .iter()
        .zip(shape)
        .map(|(&d, &s)| {
            if s == 1 {
                "0u".to_string()
            } else {
                m[d as usize].clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{const_index, reshape_groups};

    #[test]
    fn reshapes_map_groups_of_dimensions() {
        let g = |r: &[usize], o: &[usize]| {
            reshape_groups(r, o).map(|g| {
                g.into_iter()
                    .map(|(a, b)| (a.start, a.end, b.start, b.end))
                    .collect::<Vec<_>>()
            })
        };
        // A repeat: [32, 28, 2, 28, 64] read as [32, 56, 28, 64].
        assert_eq!(
            g(&[32, 56, 28, 64], &[32, 28, 2, 28, 64]),
            Some(vec![(0, 1, 0, 1), (1, 2, 1, 3), (2, 3, 3, 4), (3, 4, 4, 5)])
        );
        // Merged, with dimensions of 1 on either side.
        assert_eq!(
            g(&[6, 1, 4], &[2, 3, 4, 1]),
            Some(vec![(0, 1, 0, 2), (1, 2, 2, 2), (2, 3, 2, 3), (3, 3, 3, 4)])
        );
        // Groups that only line up together: [6, 4] as [4, 6].
        assert_eq!(g(&[6, 4], &[4, 6]), Some(vec![(0, 2, 0, 2)]));
        assert_eq!(g(&[], &[1, 1]), Some(vec![(0, 0, 0, 1), (0, 0, 1, 2)]));
        assert_eq!(g(&[0, 4], &[4, 0]), None);
        assert_eq!(g(&[6], &[4]), None);
    }

    #[test]
    fn constant_indices_evaluate() {
        assert_eq!(const_index("(((0u + 1u) - 2u))"), Some(-1));
        assert_eq!(const_index("u32(max(3i - 5i, 0i))"), Some(0));
        assert_eq!(const_index("(2u * 3u + 7u % 4u)"), Some(9));
        assert_eq!(const_index("(tid + 1u)"), None);
        assert_eq!(const_index("0u"), Some(0));
        assert_eq!(const_index("(1u - )"), None);
    }
}
