//! Texture reads on CPU adapters. Mesa's llvmpipe (22.x) runs every storage-buffer load as a
//! loop over its SIMD lanes, one scalar load per lane and component with a bounds check and a
//! branch each, while a texel fetch computes all lanes' addresses as vectors. On lavapipe (2
//! cores) a dot over 128x512x512 that loads its operands from storage buffers took 11-12 ms,
//! 5.7-6.5 ms reading the same operands from textures; `x * 2 + 1` over 2^20 f32 as vec4s
//! 5.3-7 ms against 1.1-2.2 ms. The copy of a buffer into a texture is a memcpy there (64 MiB
//! in about 8 ms), paid once per launch.
//!
//! So on CPU adapters a kernel's read-only inputs of at least [`MIN_WORDS`] 32-bit words are
//! read through textures: the declaration `var<storage, read> inJ: array<E>` becomes
//! `var inJ: texture_2d<u32>` (RGBA32Uint texels, rows of [`TEXEL_ROW`]), every `inJ[i]`
//! becomes `inJ_at(i)`, which fetches the texel holding element `i` (a `vec4` element is one
//! texel; a 32-bit one is a component of texel `i / 4`) and bit-casts it back to `E`, and the
//! kernel records [`TextureInput`]s so the runtime copies each such buffer into its texture
//! before the launch. RGBA texels, not R32 ones: llvmpipe fetched 4096 x 4096 f32 column sums
//! from R32 texels no faster than from the storage buffer (69 ms) but in 25 ms from RGBA ones. The rewrite works on the finished WGSL, so
//! every emitter gets it; inputs used in any other way (`arrayLength`, pointers), read across
//! the rows of a transpose (marked [`TRANSPOSED_MARK`] by the emitter: slower from a texture),
//! of other element types, or too large for the adapter's textures keep their storage
//! binding, and a rewritten module that fails validation is dropped for the original.
//!
//! An input read only in streaming groups of four ([`QUAD_STREAM_MARK`]) needs no texture on
//! Intel hosts: it is bound as `array<vec4<E>>` and each group is one `vec4` load from the
//! buffer, at any size (the `x * 2 + 1` figure above is four scalar loads gathered into a
//! vec4, not one vec4 load). On AMD hosts it is read through a texture where it can be
//! ([`crate::target::stream_reads_as_vec4`]).

use super::kernel::{self, Kernel};
use crate::target::Capabilities;

/// Marks the index of a load that neighbouring invocations make across the rows of a
/// transposed operand: such inputs keep their storage binding (a 4096 x 4096 transpose read
/// through a texture took 174 ms on lavapipe, 120 ms from its storage buffer).
pub const TRANSPOSED_MARK: &str = "/* transposed */";

/// Marks the index of a load that is better made from the storage buffer than through a
/// texture; an input with any such load keeps its storage binding. Each emitter that marks
/// loads says why where it does (a triangular solve's right-hand sides, each element loaded
/// once by one lane: a copy into a texture would cost more than it saves). A triangular
/// solve's matrix, which every lane loads at the same place, was marked from 2026-11-29 to
/// 2026-12-05; it is read through a texture now (figures at the end of
/// `op_kernels::linalg::blocked_solve_body`).
pub const STORAGE_MARK: &str = "/* storage */";

/// Marks the loads of a complex (two-word) input that an FFT pass makes along its lines,
/// several values a thread: such an input is read through a texture (two values a texel)
/// where every load of it is marked. `jnp.fft.fft` of 64 x 1024 points reading its passes'
/// lines from the storage buffer took 32.7-33.8 ms on lavapipe, through textures 13.2-16.8;
/// an elementwise complex product, one value a thread, took 5-10 % longer through textures,
/// so unmarked complex inputs keep their buffers.
pub const PAIR_MARK: &str = "/* pair lines */";

/// Marks the first of four loads `inJ[MARK Q], inJ[Q + 1u], inJ[Q + 2u], inJ[Q + 3u]` gathered
/// in one `vec4<E>(...)`, `Q` a multiple of 4 ([`super::expr::Quads`]): read through a texture,
/// they are one texel fetch (a 1024x1024 softmax kernel on lavapipe: 6.5 -> 4.3 ms).
pub const QUAD_MARK: &str = "/* quad */";

/// [`QUAD_MARK`] for groups that neighbouring lanes read at neighbouring places, each lane
/// sweeping on through memory ([`super::expr::Quads::streaming`]). An input read only in such
/// groups is bound as `array<vec4<E>>` and each group is one `vec4` load, with no texture and
/// no copy: llvmpipe loads a `vec4` from a storage buffer in one loop over the lanes, nearly
/// as fast as a texel fetch there, while the copy into a texture costs about 0.1 ms per MiB
/// on every launch. Lavapipe, 2 cores (kernel GPU time, texture / vec4s; the copy): 4096 x
/// 4096 row sums 5.4 / 6.5 ms, 64 MiB copied in 6.6 ms; softmax 1024 x 1024 2.36 / 2.47 ms,
/// 0.2 ms; `x * 2 + 1` over 4M f32 3.3 / 3.7 ms, 1.6 ms. (Groups a thread reads a row apart,
/// as in column sums, stay [`QUAD_MARK`]: 8.2 ms from a texture, 34 ms as vec4s.) Those are
/// an Intel host's figures; on AMD hosts `vec4` loads cost three or four times a texel fetch,
/// and inputs that fit a texture are read through one
/// ([`crate::target::stream_reads_as_vec4`]).
pub const QUAD_STREAM_MARK: &str = "/* quad stream */";

/// Marks the index of a load `outJ[MARK I]` of an output the kernel updates in place, at a word
/// no invocation of the launch writes (the LU and Cholesky trailing updates read the block's
/// columns and rows and write only the trailing matrix), or one only the loading invocation
/// writes, after the load (the old value of an element it updates). On CPU adapters such
/// loads read a texture holding a copy of the words the kernel's [`state_copy_line`] names,
/// made before each launch ([`apply_state_copies`]; `WGPU_HLO_STATE_COPIES=0` keeps the
/// storage loads); elsewhere the mark is a comment. Lavapipe, 2 cores:
/// a Cholesky update of a 1000 x 1000 matrix at column 512 took 10.8 ms loading the factor's
/// transpose from the storage buffer, 2.6 ms from the texture (4 MB copied, about 0.5 ms);
/// the first LU update of a 512 x 512 matrix 3.3 and 1.65 ms.
pub const STATE_MARK: &str = "/* state copy */";

/// A line of the comment of a kernel whose loads of output `j` are marked [`STATE_MARK`]
/// (`// ` is put before it with the others): the words `from..to` of the output those loads
/// can read (a whole batch's, from its first matrix's).
pub fn state_copy_line(j: usize, (from, to): (u64, u64)) -> String {
    format!("state copy: output {j} words {from}..{to}")
}

/// A texture holding a copy of part of an output a kernel updates in place
/// ([`STATE_MARK`]): the runtime copies `texture.texels` texels from texel `first` of the
/// output's buffer into it before each launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTexture {
    /// The output copied, by its index among the kernel's outputs.
    pub output: usize,
    /// The first texel copied (16 bytes each), from the start of the buffer.
    pub first: u64,
    /// The texels copied, from `first` on.
    pub texture: TextureInput,
    /// Its binding: after every other binding of the kernel.
    pub binding: u32,
}

/// A storage texture of `rgba32float` texels a kernel reads and writes within one launch
/// (`texture_storage_2d<rgba32float, read_write>`), bound after every other binding. The
/// runtime creates it (shared by the kernels of one extent: its contents are undefined at the
/// start of each launch); the kernel fills it from its state and writes what it keeps back.
/// llvmpipe loads and stores texels with the lanes' addresses as vectors, where it runs each
/// storage-buffer access lane by lane: the tridiagonal reduction's pass over its block
/// (`op_kernels::tridiagonal`) took half the time reading and writing the block as texels.
/// Only where [`Capabilities::storage_textures`] says the adapter has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchTexture {
    /// Its binding: after every other binding of the kernel.
    pub binding: u32,
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
}

/// Texels per texture row (a power of two: the fetch splits the index with a mask and a shift).
pub const TEXEL_ROW: u32 = 4096;

/// Inputs smaller than this many 32-bit words keep their storage binding: the copy and the
/// extra pass break of a launch cost more than their loads.
pub const MIN_WORDS: u64 = 4096;

/// An input a kernel reads through a texture: the runtime copies the first `texels` texels
/// (RGBA32Uint, 16 bytes each) of the bound buffer into a texture of [`TextureInput::extent`]
/// before each launch. Buffers are allocated in multiples of 16 bytes, so the last texel is
/// whole even when the input's words are not a multiple of 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextureInput {
    /// Texels copied from the start of the buffer.
    pub texels: u64,
}

impl TextureInput {
    /// Width and height of the texture: rows of [`TEXEL_ROW`] texels (one shorter row for
    /// small inputs).
    pub fn extent(&self) -> (u32, u32) {
        let row = u64::from(TEXEL_ROW);
        (
            self.texels.min(row) as u32,
            self.texels.div_ceil(row) as u32,
        )
    }

    /// Bytes per texel.
    pub const TEXEL_BYTES: u64 = 16;
}

/// `WGPU_HLO_TEXTURE_READS`: `0` turns texture reads off, `all` reads every eligible input
/// through a texture whatever its size (tests use it to run small programs through them), a
/// number N from N words on.
pub fn min_words_from_env() -> Option<u64> {
    match std::env::var("WGPU_HLO_TEXTURE_READS")
        .as_deref()
        .map(str::trim)
    {
        Ok("0") => None,
        Ok("all") => Some(1),
        Ok(n) => Some(
            n.parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .unwrap_or(MIN_WORDS),
        ),
        _ => Some(MIN_WORDS),
    }
}

/// Is `c` part of a WGSL identifier?
fn ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Byte offsets of the whole-word occurrences of `name` in `src`.
fn occurrences(src: &str, name: &str) -> Vec<usize> {
    let b = src.as_bytes();
    src.match_indices(name)
        .map(|(i, _)| i)
        .filter(|&i| {
            let before = i == 0 || !ident_char(b[i - 1]);
            let end = i + name.len();
            let after = end >= b.len() || !ident_char(b[end]);
            before && after
        })
        .collect()
}

/// The offset of the `]` that closes the `[` at offset `open` of `src`.
pub(crate) fn closing_bracket(src: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &c) in src.as_bytes().iter().enumerate().skip(open) {
        match c {
            b'[' => depth += 1,
            b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// `src` with every `name[...]` turned into `name_at(...)` (brackets matched), or `None` when
/// `name` occurs in any other way outside its declaration line `decl`, is read across the
/// rows of a transpose, or has a load marked [`STORAGE_MARK`].
fn rewrite_uses(src: &str, name: &str, decl: &str) -> Option<String> {
    rewrite_indexed(src, name, decl, false, |open, close| {
        let index = &src[open..close];
        if index.contains(TRANSPOSED_MARK) || index.contains(STORAGE_MARK) {
            return None;
        }
        Some((close + 1, format!("{name}_at({})", &src[open + 1..close])))
    })
}

/// `src` with every `name[I]` turned into `name` `open` `I` `close` (brackets matched), or
/// `None` when `name` occurs in any other way outside its declaration line `decl`, or an
/// index `I` contains `refuse`.
pub(crate) fn rewrite_indexing(
    src: &str,
    name: &str,
    decl: &str,
    open_with: &str,
    close_with: &str,
    refuse: Option<&str>,
) -> Option<String> {
    rewrite_indexed(src, name, decl, false, |open, close| {
        if refuse.is_some_and(|m| src[open..close].contains(m)) {
            return None;
        }
        Some((
            close + 1,
            format!("{name}{open_with}{}{close_with}", &src[open + 1..close]),
        ))
    })
}

/// `src` with every occurrence of `name` outside its declaration line `decl` replaced: each
/// must be indexed, `name[...]`, and `replace(open, close)` (the offsets of its brackets)
/// gives the end of the text it replaces and the replacement, or `None` to give up. `None`
/// when `name` occurs unindexed or a replacement gives up, or when it occurs inside the text
/// a replacement took, unless `covers_nested` (the replacement rewrote those itself).
pub(crate) fn rewrite_indexed(
    src: &str,
    name: &str,
    decl: &str,
    covers_nested: bool,
    mut replace: impl FnMut(usize, usize) -> Option<(usize, String)>,
) -> Option<String> {
    let decl_at = src.find(decl)?;
    let decl_end = decl_at + decl.len();
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len() + 64);
    let mut last = 0;
    for i in occurrences(src, name) {
        if i < last {
            if covers_nested {
                continue;
            }
            return None;
        }
        if (decl_at..decl_end).contains(&i) {
            continue;
        }
        let open = i + name.len();
        if b.get(open) != Some(&b'[') {
            return None;
        }
        let close = closing_bracket(src, open)?;
        let (end, with) = replace(open, close)?;
        out.push_str(&src[last..i]);
        out.push_str(&with);
        last = end;
    }
    out.push_str(&src[last..]);
    Some(out)
}

/// `src` with every group of four loads of `name` marked `mark` ([`QUAD_MARK`] or
/// [`QUAD_STREAM_MARK`]), written
/// `vec4<elem>(name[MARK Q], name[Q + 1u], name[Q + 2u], name[Q + 3u])`, turned into
/// `name_quad(Q)`; the count of groups replaced. A group written any other way is left to be
/// read element by element.
fn rewrite_quads(src: &str, name: &str, elem: &str, mark: &str) -> (String, usize) {
    let start = format!("vec4<{elem}>({name}[{mark} ");
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    let mut count = 0;
    while let Some(at) = rest.find(&start) {
        let after = &rest[at + start.len()..];
        // Q ends at the bracket that closes the first load's.
        let open = at + start.find('[').unwrap_or(0);
        let end = closing_bracket(rest, open).map(|close| close - (at + start.len()));
        let whole = end.and_then(|e| {
            let q = &after[..e];
            let tail = format!(", {name}[{q} + 1u], {name}[{q} + 2u], {name}[{q} + 3u])");
            after[e + 1..]
                .starts_with(&tail)
                .then(|| (q.to_string(), e + 1 + tail.len()))
        });
        match whole {
            Some((q, len)) => {
                out.push_str(&rest[..at]);
                out.push_str(&format!("{name}_quad({q})"));
                rest = &after[len..];
                count += 1;
            }
            None => {
                out.push_str(&rest[..at + start.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    (out, count)
}

/// The declaration line of input `j` and its element type, when it is a read-only storage
/// array of 32-bit words, or of vec2s (complex numbers: two to a texel, [`PAIR_MARK`]) or
/// vec4s of them.
fn declaration(src: &str, j: usize) -> Option<(String, &'static str, u32)> {
    let name = format!("var<storage, read> in{j}: array<");
    declared(src, &name).or_else(|| {
        let line = src.lines().find(|l| l.contains(&name))?;
        let elem = line.split(&name).nth(1)?.split(">;").next()?;
        let elem = match elem {
            "vec2<f32>" => "vec2<f32>",
            "vec2<u32>" => "vec2<u32>",
            "vec2<i32>" => "vec2<i32>",
            _ => return None,
        };
        Some((line.to_string(), elem, 2))
    })
}

/// The line declaring `name` (`var<storage, ACCESS> NAME: array<`), its element type and the
/// element's words, when that is a 32-bit word or a vec4 of them.
fn declared(src: &str, name: &str) -> Option<(String, &'static str, u32)> {
    let line = src.lines().find(|l| l.contains(name))?;
    let rest = line.split(name).nth(1)?;
    let elem = rest.split(">;").next()?;
    let (elem, words) = match elem {
        "f32" => ("f32", 1),
        "u32" => ("u32", 1),
        "i32" => ("i32", 1),
        "vec4<f32>" => ("vec4<f32>", 4),
        "vec4<u32>" => ("vec4<u32>", 4),
        "vec4<i32>" => ("vec4<i32>", 4),
        _ => return None,
    };
    Some((line.to_string(), elem, words))
}

/// Rewrites `kernel`'s eligible inputs to texture reads (see the module documentation): inputs
/// of at least `min_words` words whose texture fits `max_dimension`, at most `max_textures` of
/// them; inputs read only in streaming groups of four to `vec4` storage reads, whatever their
/// size. With `grouped_only` (kernels that read other inputs at data-dependent positions) an
/// input takes a texture only where every load of it is a marked group of four. With `only`,
/// input `only` alone is considered. Inputs already read through textures keep them. Returns
/// whether any was rewritten.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    kernel: &mut Kernel,
    min_words: u64,
    max_dimension: u32,
    max_textures: u32,
    caps: Capabilities,
    windowed: &std::collections::HashSet<usize>,
    grouped_only: bool,
    only: Option<usize>,
) -> bool {
    let mut wgsl = kernel.wgsl.clone();
    let mut inputs = kernel.texture_inputs.clone();
    inputs.resize(kernel.inputs.len(), None);
    let mut helpers = String::new();
    for (j, b) in kernel.inputs.iter().enumerate() {
        if inputs.iter().flatten().count() + kernel.state_textures.len() >= max_textures as usize {
            break;
        }
        if only.is_some_and(|o| o != j) || inputs[j].is_some() {
            continue;
        }
        // An input bound in parts (`super::parted`) is bound as ranges of its buffer.
        if kernel.is_parted(j) {
            continue;
        }
        let Some((decl, elem, texel_words)) = declaration(&wgsl, j) else {
            continue;
        };
        let name = format!("in{j}");
        let words = (b.ty.byte_size() as u64).div_ceil(4);
        let input = TextureInput {
            texels: words.div_ceil(4),
        };
        // Too small to pay for its copy, read only through small windows (the copy is of the
        // whole input, on every launch), or too large for the adapter's textures.
        // A complex input only where an FFT pass reads it along its lines (every load marked).
        let pairs = texel_words != 2 || {
            let marked = wgsl.matches(&format!("{name}[{PAIR_MARK}")).count();
            marked > 0 && occurrences(&wgsl, &name).len() == marked + 1
        };
        let texture = pairs
            && words >= min_words.max(1)
            && !windowed.contains(&j)
            && input.extent().1 <= max_dimension
            && (!grouped_only
                || texel_words == 1 && {
                    let (g, _) = rewrite_quads(&wgsl, &name, elem, QUAD_MARK);
                    let (g, _) = rewrite_quads(&g, &name, elem, QUAD_STREAM_MARK);
                    occurrences(&g, &name).len() == 1
                });
        // Read only in streaming groups, or only in groups and not through a texture: vec4
        // loads from the buffer itself (whatever its size; buffers are allocated in multiples
        // of 16 bytes, so the last group is whole). llvmpipe loads a storage `vec4` with one
        // pass over the SIMD lanes, four scalars with four: a gathered 8192 x 128 table summed
        // by columns (`e[i].sum(0)`), 2.1 -> 0.9 ms. On AMD hosts a streaming input that can
        // take a texture takes it (`target::stream_reads_as_vec4`).
        if texel_words == 1 {
            let (grouped, streams) = rewrite_quads(&wgsl, &name, elem, QUAD_STREAM_MARK);
            let (grouped, streams) = if texture {
                (grouped, streams)
            } else {
                let (g, q) = rewrite_quads(&grouped, &name, elem, QUAD_MARK);
                (g, streams + q)
            };
            let textured = texture && !crate::target::stream_reads_as_vec4();
            if streams > 0 && occurrences(&grouped, &name).len() == 1 && !textured {
                let (head, comment) = decl.split_once("//").unwrap_or((&decl, ""));
                let new_decl = format!(
                    "{} //{} (read as vec4s)",
                    head.trim_end().replacen(
                        &format!("array<{elem}>"),
                        &format!("array<vec4<{elem}>>"),
                        1
                    ),
                    comment.trim_end()
                );
                wgsl = grouped.replacen(&decl, &new_decl, 1);
                helpers.push_str(&format!(
                    "\nfn {name}_quad(i: u32) -> vec4<{elem}> {{\n    return {name}[i >> 2u];\n}}\n"
                ));
                continue;
            }
        }
        if !texture {
            continue;
        }
        let (grouped, quads) = if texel_words == 1 {
            let (g, q) = rewrite_quads(&wgsl, &name, elem, QUAD_MARK);
            let (g, streams) = rewrite_quads(&g, &name, elem, QUAD_STREAM_MARK);
            (g, q + streams)
        } else {
            (wgsl.clone(), 0)
        };
        let Some(rewritten) = rewrite_uses(&grouped, &name, &decl) else {
            continue;
        };
        let (head, comment) = decl.split_once("//").unwrap_or((&decl, ""));
        let Some(binding) = head.split("var<storage").next() else {
            continue;
        };
        let new_decl = format!(
            "{binding}var {name}: texture_2d<u32>; //{} (read through a texture of {} x {} texels)",
            comment.trim_end(),
            input.extent().0,
            input.extent().1
        );
        wgsl = rewritten.replacen(&decl, &new_decl, 1);
        let shift = TEXEL_ROW.trailing_zeros();
        let mask = TEXEL_ROW - 1;
        if quads > 0 {
            helpers.push_str(&format!(
                "\nfn {name}_quad(i: u32) -> vec4<{elem}> {{\n    let t = i >> 2u;\n    return \
                 bitcast<vec4<{elem}>>(textureLoad({name}, vec2<u32>(t & {mask}u, t >> {shift}u), \
                 0));\n}}\n"
            ));
        }
        helpers.push_str(&if texel_words == 1 {
            format!(
                "\nfn {name}_at(i: u32) -> {elem} {{\n    let t = i >> 2u;\n    return \
                 bitcast<{elem}>(textureLoad({name}, vec2<u32>(t & {mask}u, t >> {shift}u), \
                 0)[i & 3u]);\n}}\n"
            )
        } else if texel_words == 2 {
            // Two elements a texel: its first or second half.
            format!(
                "\nfn {name}_at(i: u32) -> {elem} {{\n    let t = i >> 1u;\n    let v = \
                 textureLoad({name}, vec2<u32>(t & {mask}u, t >> {shift}u), 0);\n    return \
                 bitcast<{elem}>(select(v.xy, v.zw, (i & 1u) == 1u));\n}}\n"
            )
        } else {
            format!(
                "\nfn {name}_at(i: u32) -> {elem} {{\n    return bitcast<{elem}>(textureLoad({name}, \
                 vec2<u32>(i & {mask}u, i >> {shift}u), 0));\n}}\n"
            )
        });
        inputs[j] = Some(input);
    }
    if helpers.is_empty() {
        return false;
    }
    wgsl.push_str(&helpers);
    if let Err(e) = kernel::validate(&kernel.name, &wgsl, caps) {
        log::warn!(
            "{}: texture reads dropped, the rewritten kernel does not validate: {e}",
            kernel.name
        );
        return false;
    }
    kernel.wgsl = wgsl;
    kernel.texture_inputs = inputs;
    true
}

/// Rewrites the loads of `kernel`'s outputs marked [`STATE_MARK`] to fetches from textures
/// the runtime fills with a copy of the words the kernel's [`state_copy_line`] names before
/// each launch, bound after every other binding, while the number of textures stays within
/// `max_textures` and each texture within `max_dimension` rows. Kernels bound in parts keep
/// their loads. Returns whether any output was rewritten.
pub fn apply_state_copies(
    kernel: &mut Kernel,
    max_dimension: u32,
    max_textures: u32,
    caps: Capabilities,
) -> bool {
    // Scratch textures take the bindings after every other one, as state textures would.
    if !kernel.parted.is_empty()
        || !kernel.scratch_textures.is_empty()
        || !kernel.wgsl.contains(STATE_MARK)
        || crate::fusion::switched_off("WGPU_HLO_STATE_COPIES")
    {
        return false;
    }
    let mut wgsl = kernel.wgsl.clone();
    let mut states = Vec::new();
    let mut helpers = String::new();
    let textures = kernel.texture_inputs.iter().flatten().count();
    let first_binding = (kernel.inputs.len() + kernel.outputs.len()) as u32;
    for j in 0..kernel.outputs.len() {
        if textures + states.len() >= max_textures as usize {
            break;
        }
        let line = format!("// state copy: output {j} words ");
        let Some((from, to)) = wgsl
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .and_then(|r| r.trim().split_once(".."))
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
            .filter(|(a, b)| a < b)
        else {
            continue;
        };
        let name = format!("out{j}");
        let Some((decl, elem, texel_words)) =
            declared(&wgsl, &format!("var<storage, read_write> {name}: array<"))
        else {
            continue;
        };
        let first = from / 4;
        let texture = TextureInput {
            texels: to.div_ceil(4) - first,
        };
        if texture.extent().1 > max_dimension {
            continue;
        }
        let mut marked = 0;
        let src = wgsl.clone();
        let Some(rewritten) = rewrite_indexed(&src, &name, &decl, false, |open, close| {
            let index = &src[open + 1..close];
            Some(match index.trim_start().strip_prefix(STATE_MARK) {
                Some(rest) => {
                    marked += 1;
                    (close + 1, format!("{name}_copy_at({})", rest.trim()))
                }
                None => (close + 1, src[open - name.len()..=close].to_string()),
            })
        }) else {
            continue;
        };
        if marked == 0 {
            continue;
        }
        let binding = first_binding + states.len() as u32;
        let (w, h) = texture.extent();
        wgsl = rewritten.replacen(
            &decl,
            &format!(
                "{decl}\n@group(0) @binding({binding}) var {name}_copy: texture_2d<u32>; // words \
                 {from}..{to} of {name}, copied before each launch into a texture of {w} x {h} \
                 texels"
            ),
            1,
        );
        let shift = TEXEL_ROW.trailing_zeros();
        let mask = TEXEL_ROW - 1;
        helpers.push_str(&if texel_words == 1 {
            format!(
                "\nfn {name}_copy_at(i: u32) -> {elem} {{\n    let t = (i >> 2u) - {first}u;\n    \
                 return bitcast<{elem}>(textureLoad({name}_copy, vec2<u32>(t & {mask}u, t >> \
                 {shift}u), 0)[i & 3u]);\n}}\n"
            )
        } else {
            format!(
                "\nfn {name}_copy_at(i: u32) -> {elem} {{\n    let t = i - {first}u;\n    return \
                 bitcast<{elem}>(textureLoad({name}_copy, vec2<u32>(t & {mask}u, t >> {shift}u), \
                 0));\n}}\n"
            )
        });
        states.push(StateTexture {
            output: j,
            first,
            texture,
            binding,
        });
    }
    if states.is_empty() {
        return false;
    }
    wgsl.push_str(&helpers);
    if let Err(e) = kernel::validate(&kernel.name, &wgsl, caps) {
        log::warn!(
            "{}: state copies dropped, the rewritten kernel does not validate: {e}",
            kernel.name
        );
        return false;
    }
    kernel.wgsl = wgsl;
    kernel.state_textures = states;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_groups_of_four_become_one_fetch() {
        let q = "(o * 1024u + rc3_0)";
        let group =
            format!("vec4<f32>(in2[{QUAD_MARK} {q}], in2[{q} + 1u], in2[{q} + 2u], in2[{q} + 3u])");
        let src = format!("let a = {group};\nlet b = in2[7u];\nlet c = {group}.y;\n");
        let (out, n) = rewrite_quads(&src, "in2", "f32", QUAD_MARK);
        assert_eq!(n, 2, "{out}");
        assert!(out.contains(&format!("let a = in2_quad({q});")), "{out}");
        assert!(out.contains(&format!("let c = in2_quad({q}).y;")), "{out}");
        assert!(out.contains("let b = in2[7u];"), "{out}");
        // Another element type, another input, or a group that is not four consecutive loads
        // of the same index stays as it is.
        assert_eq!(rewrite_quads(&src, "in2", "i32", QUAD_MARK).1, 0);
        assert_eq!(rewrite_quads(&src, "in1", "f32", QUAD_MARK).1, 0);
        let odd = format!(
            "let a = vec4<f32>(in2[{QUAD_MARK} {q}], in2[{q} + 1u], in2[{q} + 3u], in2[{q} + 2u]);"
        );
        let (same, n) = rewrite_quads(&odd, "in2", "f32", QUAD_MARK);
        assert_eq!((same.as_str(), n), (odd.as_str(), 0));
    }

    #[test]
    fn uses_are_rewritten_with_nested_brackets() {
        let src = "@group(0) @binding(1) var<storage, read> in1: array<f32>; // %1\n\
                   fn f() { let a = in1[idx[2] + 1u]; let in10 = 3; let b = in1[0u]; }\n";
        let decl = src.lines().next().unwrap();
        let out = rewrite_uses(src, "in1", decl).unwrap();
        assert!(out.contains("let a = in1_at(idx[2] + 1u);"), "{out}");
        assert!(out.contains("let b = in1_at(0u);"), "{out}");
        assert!(out.contains("let in10 = 3;"), "{out}");
        // Any other use keeps the binding, and so does a transposed read.
        let other = format!("{src}fn g() -> u32 {{ return arrayLength(&in1); }}\n");
        assert!(rewrite_uses(&other, "in1", decl).is_none());
        let across = format!("{src}fn h() -> f32 {{ return in1[{TRANSPOSED_MARK} 5u]; }}\n");
        assert!(rewrite_uses(&across, "in1", decl).is_none());
    }

    /// A kernel updating `out0` (`elem` words) in place from `body`, with `line` in its
    /// comment.
    fn in_place(elem: &str, line: &str, body: &str) -> Kernel {
        use crate::ir::{ElementType, TensorType, ValueId};
        let binding = |v, ty| crate::codegen::expr::Binding {
            value: ValueId(v),
            ty: TensorType::new(vec![64], ty),
        };
        Kernel {
            name: "k".into(),
            wgsl: format!(
                "// kernel k\n// {line}\n\
                 @group(0) @binding(0) var<storage, read> in0: array<u32>; // %1\n\
                 @group(0) @binding(1) var<storage, read_write> out0: array<{elem}>; // %2\n\
                 @compute @workgroup_size(8)\nfn main(@builtin(local_invocation_index) lid: u32) \
                 {{\n{body}}}\n"
            ),
            inputs: vec![binding(1, ElementType::U32)],
            outputs: vec![binding(2, ElementType::F32)],
            workgroups: [1, 1, 1],
            iterations: 0,
            texture_inputs: Vec::new(),
            state_textures: Vec::new(),
            scratch_textures: Vec::new(),
            parted: Vec::new(),
        }
    }

    #[test]
    fn marked_loads_of_a_state_read_its_copy() {
        let caps = Capabilities::default();
        let line = state_copy_line(0, (20, 60));
        let body = format!(
            "    let a = out0[{STATE_MARK} lid + 20u + in0[0]];\n    out0[lid] = out0[lid] + a;\n"
        );
        let mut k = in_place("f32", &line, &body);
        assert!(apply_state_copies(&mut k, 8192, 16, caps), "{}", k.wgsl);
        // Words 20..60: texels 5..15, bound after the input and the output.
        assert_eq!(
            k.state_textures,
            vec![StateTexture {
                output: 0,
                first: 5,
                texture: TextureInput { texels: 10 },
                binding: 2
            }]
        );
        assert!(
            k.wgsl.contains("let a = out0_copy_at(lid + 20u + in0[0]);"),
            "{}",
            k.wgsl
        );
        assert!(k.wgsl.contains("out0[lid] = out0[lid] + a;"), "{}", k.wgsl);
        assert!(k
            .wgsl
            .contains("@group(0) @binding(2) var out0_copy: texture_2d<u32>;"));
        assert!(k.wgsl.contains("let t = (i >> 2u) - 5u;"), "{}", k.wgsl);
        // vec4 elements: a texel each.
        let mut k = in_place("vec4<f32>", &line, &body);
        assert!(apply_state_copies(&mut k, 8192, 16, caps), "{}", k.wgsl);
        assert!(k.wgsl.contains("let t = i - 5u;"), "{}", k.wgsl);
        // No line naming the words, another use of the output than indexing, no room for
        // another texture, or a texture taller than the adapter allows: storage loads.
        let mut k = in_place("f32", "no copy", &body);
        assert!(!apply_state_copies(&mut k, 8192, 16, caps));
        let other = format!("{body}    let n = arrayLength(&out0);\n");
        let mut k = in_place("f32", &line, &other);
        assert!(!apply_state_copies(&mut k, 8192, 16, caps));
        let mut k = in_place("f32", &line, &body);
        assert!(!apply_state_copies(&mut k, 8192, 0, caps));
        let tall = state_copy_line(0, (0, 4 * 4096 * 3));
        let mut k = in_place("f32", &tall, &body);
        assert!(!apply_state_copies(&mut k, 2, 16, caps));
        assert!(apply_state_copies(&mut k, 3, 16, caps));
    }

    #[test]
    fn extents_are_rows_of_texels() {
        assert_eq!(TextureInput { texels: 10_000 }.extent(), (4096, 3));
        assert_eq!(TextureInput { texels: 100 }.extent(), (100, 1));
    }
}
