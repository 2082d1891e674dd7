//! What the compiler knows about the adapter it compiles for: shader capabilities and limits.
//! The runtime measures them from its device ([`crate::runtime::Device::caps`] and the code
//! that builds a [`Target`]); fusion and the code generator only read them, so neither
//! depends on the runtime.

/// Shader capabilities that decide how dtypes are lowered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `SHADER_F64`: native f64.
    pub f64: bool,
    /// `SHADER_INT64`: native i64/u64.
    pub i64: bool,
    /// `SHADER_F16`: native f16 arithmetic.
    pub f16: bool,
    /// `SUBGROUP` operations.
    pub subgroup: bool,
    /// The subgroup size when the adapter has exactly one (its minimum and maximum agree:
    /// llvmpipe's 8 lanes of 256-bit AVX), else 0. Kernels that share values across a
    /// subgroup with constant lane indices need it.
    pub subgroup_size: u32,
    /// Storage textures of `rgba32float` texels a kernel may read and write
    /// (`texture_storage_2d<rgba32float, read_write>`, an adapter-specific format feature,
    /// `wgpu::Features::TEXTURE_ADAPTER_SPECIFIC_FORMAT_FEATURES`): the scratch textures of
    /// `codegen::texture_reads::ScratchTexture`. `WGPU_HLO_STORAGE_TEXTURES=0`: none.
    pub storage_textures: bool,
}

/// What the emitters need to know about the target.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Shader capabilities.
    pub caps: Capabilities,
    /// Adapter name, for error messages.
    pub adapter: &'a str,
    /// Largest workgroup count per grid dimension.
    pub max_workgroups: u32,
    /// Largest number of storage buffers a kernel may bind.
    pub max_storage_buffers: u32,
    /// The adapter is a CPU implementation (lavapipe, SwiftShader, WARP): workgroup memory and
    /// barriers are emulated and expensive there.
    pub cpu_adapter: bool,
    /// Most loop back-edges (all loops, nested ones included) one kernel invocation may run:
    /// longer work is split across invocations and launches, or refused. Drivers cut long
    /// loops short (Mesa's llvmpipe silently exits every loop of an invocation after 65535
    /// back-edges in all), and GPU watchdogs kill long invocations.
    pub max_invocation_iterations: u64,
    /// Largest buffer a kernel may bind (`max_storage_buffer_binding_size`), in bytes: larger
    /// tensors are bound in parts where the kernel allows (`codegen::windows`), else refused.
    pub max_binding_size: u64,
    /// The byte offset of a part of a buffer bound must be a multiple of this
    /// (`min_storage_buffer_offset_alignment`).
    pub min_binding_offset_alignment: u64,
    /// Bytes of workgroup memory a kernel may declare
    /// (`max_compute_workgroup_storage_size`).
    pub max_workgroup_storage: u64,
    /// Inputs of at least this many 32-bit words are read through textures
    /// (`codegen::texture_reads`; CPU adapters only), `None`: none are.
    pub texture_reads: Option<u64>,
    /// Inputs of a kernel that reads each element about once (loop kernels, updates) are
    /// read through textures from this many words (`u64::MAX`: never, the default; see
    /// `compile::lower`'s `READ_ONCE_TEXTURE_WORDS`).
    pub read_once_texture_words: u64,
    /// Largest texture width or height (`max_texture_dimension_2d`).
    pub max_texture_dimension: u32,
    /// Most sampled textures a kernel may bind (`max_sampled_textures_per_shader_stage`).
    pub max_sampled_textures: u32,
    /// Whether scatters with many windows may run by blocks of the result on CPU adapters
    /// (`codegen::op_kernels::scatter`'s `swept`; `WGPU_HLO_SCATTER_SWEEP=0` or
    /// `CompileOptions::scatter_sweep` turn it off, and the sorted paths GPUs take serve).
    pub scatter_sweep: bool,
}

/// The default of [`Target::max_invocation_iterations`]: half of llvmpipe's 65535, leaving
/// room for loops the count does not see (the few steps of library functions such as integer
/// powers) and far below what trips a GPU watchdog.
pub const DEFAULT_MAX_INVOCATION_ITERATIONS: u64 = 32768;

/// Loop iterations llvmpipe (lavapipe) lets one invocation run, all its loops together: past
/// them it leaves every loop, silently (Mesa's loop limiter, `LP_MAX_TGSI_LOOP_ITERATIONS`).
pub const LLVMPIPE_LOOP_LIMIT: u64 = 65535;

/// `n`, the loop budget asked for (`WGPU_HLO_MAX_LOOP`, `CompileOptions::max_loop_iterations`),
/// within what the adapter runs as written: on llvmpipe at most
/// [`DEFAULT_MAX_INVOCATION_ITERATIONS`] (half its limit, for loops the count does not see).
/// A larger budget there gave wrong results with no error (svd of 256 x 256 with
/// `WGPU_HLO_MAX_LOOP=10000000`: singular values 61 % off). GPUs have no such limiter; a
/// watchdog that kills a long kernel is an error, not a wrong result.
pub fn within_adapter_loop_limit(n: u64, adapter: &str) -> u64 {
    if adapter.contains("llvmpipe") && n > DEFAULT_MAX_INVOCATION_ITERATIONS {
        log::warn!(
            "loop budget {n} lowered to {DEFAULT_MAX_INVOCATION_ITERATIONS} on {adapter}: llvmpipe \
             stops every loop of an invocation after {LLVMPIPE_LOOP_LIMIT} iterations"
        );
        return DEFAULT_MAX_INVOCATION_ITERATIONS;
    }
    n
}

/// The loop bound from `WGPU_HLO_MAX_LOOP` (tests set it low to exercise the split kernels
/// with small tensors), else [`DEFAULT_MAX_INVOCATION_ITERATIONS`]. Values below 16 are raised
/// to 16: every split needs a few iterations to make progress.
pub fn max_invocation_iterations_from_env() -> u64 {
    std::env::var("WGPU_HLO_MAX_LOOP")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(DEFAULT_MAX_INVOCATION_ITERATIONS, |n| n.max(16))
}

/// The adapter class from `WGPU_HLO_ADAPTER_CLASS`: `cpu` (`Some(true)`) or `gpu`
/// (`Some(false)`) overrides [`Target::cpu_adapter`], which picks kernel shapes (register
/// blocks for CPU adapters, workgroup-memory tiles for GPUs). With `gpu` on lavapipe, CI runs
/// the kernels a GPU would get and checks them against the same references; anything else
/// (unset, empty, other words) leaves the adapter's own class.
pub fn cpu_adapter_from_env() -> Option<bool> {
    match std::env::var("WGPU_HLO_ADAPTER_CLASS")
        .ok()?
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "cpu" => Some(true),
        "gpu" => Some(false),
        _ => None,
    }
}

/// How column reductions on CPU adapters read their groups of four columns
/// (`codegen::reduce_kernel`'s quad columns), when a thread takes several groups a row:
/// `true` as `vec4` loads from the storage buffer, `false` as texel fetches from a copy of
/// the input in a texture. llvmpipe loads from a storage buffer lane by lane, and what that
/// costs at a row's distance depends on the host CPU. 4096 x 4096 column sums (`bench_jax`,
/// 2 cores): on the Intel host of 11-28, 11.7 ms as `vec4`s against 21-22 ms through a
/// texture; on AMD EPYC hosts, 26-28 ms as `vec4`s against 8.4-9.5 ms through a texture
/// (2048 x 2048: 7.5 against 1.9 ms; 3000 x 2048: 11 against 3 ms). So `vec4`s except on
/// AMD (and Hygon) CPUs, unless the reduction is cut into `chunked` stages of a few hundred
/// rows: then the rows a batch of lanes reads stay within the host's reach for the next
/// batch, and `vec4`s won on AMD as well (the EPYC host of 12-01, end to end: 4096 x 4096
/// 15 ms against 19 through a texture, 2048 x 2048 4-5 against 5-7).
/// `WGPU_HLO_COLUMN_READS=vec4|texture` overrides.
pub fn column_reads_as_vec4(chunked: bool) -> bool {
    match std::env::var("WGPU_HLO_COLUMN_READS")
        .as_deref()
        .map(str::trim)
    {
        Ok("vec4") => true,
        Ok("texture") => false,
        _ => chunked || !host_cpu_is_amd(),
    }
}

/// Whether an input a kernel reads only in streaming groups of four
/// (`codegen::texture_reads::QUAD_STREAM_MARK`: a row kernel's, a loop kernel's, a subgroup
/// row reduction's groups) and that could be read through a texture is read as `vec4` loads
/// from its storage buffer instead (no copy) on CPU adapters. On the Intel host of 11-27 the
/// kernel's `vec4` loads cost little more than texel fetches (4096 x 4096 row sums 6.5 against
/// 5.4 ms, the copy 6.6 ms), so `vec4`s. On the AMD EPYC host of 12-05, `bench_ab.py`, 5
/// alternating runs, everything included: 4096 x 4096 row sums 57.4 -> 14.4 ms through
/// textures, column sums 56.9 -> 14.3, layernorm 4096 x 1024 18.8 -> 7.3, logsumexp rows
/// 17.3 -> 7.1, softmax 1024 x 1024 8.9 -> 4.2, 65536 row dots of 32 14.5 -> 4.0 (the layernorm
/// kernel alone, `wgsl_bench`: 18.8 against 5.5 ms). So textures on AMD (and Hygon) CPUs,
/// as for column reads. `WGPU_HLO_STREAM_READS=vec4|texture` overrides.
pub fn stream_reads_as_vec4() -> bool {
    match std::env::var("WGPU_HLO_STREAM_READS")
        .as_deref()
        .map(str::trim)
    {
        Ok("vec4") => true,
        Ok("texture") => false,
        _ => !host_cpu_is_amd(),
    }
}

/// Whether the kernels of scatters and `top_k` read their inputs through textures as other
/// kernels do on CPU adapters, not only the inputs they read in marked groups of four
/// (`compile::lower`'s `TexturePolicy`: sorts and gathers keep that policy everywhere). On
/// the Intel host of 11-27 a texel fetch at a data-dependent position cost llvmpipe more than
/// a storage load and the copy came on top; on AMD hosts a storage load costs three or four
/// times a texel fetch (see [`stream_reads_as_vec4`]), and kernels whose lanes each read
/// their own run or increasing positions gain from textures. The AMD EPYC host of 12-06,
/// lavapipe, dumped device time of the call (three alternating pairs): a scatter-add of 1M
/// floats at random indices 48.7-53.3 -> 37.9-42.4 ms (its walk over bucketed windows 26-31
/// -> 19-22 ms); `top_k` 1M k=100 12.4-13.0 -> 9.0-9.3 ms (minimum of a pair each). Whole
/// calls, minimum of 12, two alternating pairs (`WGPU_HLO_SCATTER_TEXTURES=0` / default):
/// that scatter-add 45.5-48.5 -> 32.5-36.6 ms, `top_k` 1M 10.5-11.2 -> 6.5-7.9, an int32
/// scatter-add 23-25 -> 18-23, `top_k` of 1024 rows 6.3-6.5 -> 4.1-6.6, segment sums and
/// bincounts within the noise. Sorts, the permutation, gathers and
/// embeddings did not gain (`jnp.take` 1M, `random.permutation` 1M, `median` 1M slower), so
/// they keep their storage loads. `WGPU_HLO_SCATTER_TEXTURES=1|0` overrides.
pub fn scatter_reads_through_textures() -> bool {
    match std::env::var("WGPU_HLO_SCATTER_TEXTURES")
        .as_deref()
        .map(str::trim)
    {
        Ok("1") => true,
        Ok("0") => false,
        _ => host_cpu_is_amd(),
    }
}

/// Whether the host CPU is AMD's (or Hygon's, the same cores): its vendor string
/// (`cpuid` leaf 0), read once.
pub fn host_cpu_is_amd() -> bool {
    static AMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AMD.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `cpuid` exists on every x86-64 CPU and leaf 0 on every one of them.
            #[allow(unused_unsafe)]
            let r = unsafe { std::arch::x86_64::__cpuid(0) };
            let mut vendor = Vec::with_capacity(12);
            for w in [r.ebx, r.edx, r.ecx] {
                vendor.extend_from_slice(&w.to_le_bytes());
            }
            vendor == b"AuthenticAMD" || vendor == b"HygonGenuine"
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}
