//! The compiler driver: program bytes in (StableHLO text or a portable artifact), a loaded
//! executable out — parse, passes, fusion, code generation, lowering, loading — and the dump.

pub mod lower;
pub mod merge;
pub mod program;
pub mod serial;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::codegen::loop_kernel::Target;
use crate::error::{Error, Result};
use crate::frontend::{bytecode, hlo_proto, text};
use crate::ir::{print, Attr, Function, Module, Type};
use crate::passes;
use crate::runtime::executable::{Executable, ExecutableParts};
use crate::runtime::Device;

// `passes::narrow_scatters` widens narrow float scatter sums past the default loop bound,
// which it cannot read from the target (passes come before it in the layering).
const _: () = assert!(
    passes::narrow_scatters::WIDE_SUMS_FROM == crate::target::DEFAULT_MAX_INVOCATION_ITERATIONS
);

/// Options of one compilation.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Name of the executable (and of its dump files); defaults to the module's name.
    pub name: Option<String>,
    /// Write the compiler's dump here (`WGPU_HLO_DUMP` is used when unset).
    pub dump_dir: Option<PathBuf>,
    /// The function to compile (default `main`).
    pub entry: Option<String>,
    /// Overrides `Target::max_invocation_iterations` (default: `WGPU_HLO_MAX_LOOP`, else
    /// 32768); tests set it low to exercise the split kernels with small tensors.
    pub max_loop_iterations: Option<u64>,
    /// How the program bytes are encoded.
    pub format: ProgramFormat,
    /// Lowers `Target::max_binding_size` below the adapter's `max_storage_buffer_binding_size`
    /// (never raises it); tests set it low to exercise the kernels that bind large tensors in
    /// parts with small tensors.
    pub max_binding_bytes: Option<u64>,
    /// Overrides `Target::read_once_texture_words` (default: `WGPU_HLO_TEXTURE_READS_ONCE`,
    /// else never); tests set it to exercise texture reads with elementwise kernels.
    pub read_once_texture_words: Option<u64>,
    /// Whether independent launches merge into one dispatch (`merge`; default: on, unless
    /// `WGPU_HLO_MERGE_LAUNCHES=0`); tests of fusion's own kernel counts turn it off.
    pub merge_launches: Option<bool>,
    /// Overrides `Target::scatter_sweep` (default: on, unless `WGPU_HLO_SCATTER_SWEEP=0`);
    /// tests of the sorted scatter paths turn it off on CPU adapters.
    pub scatter_sweep: Option<bool>,
}

/// The encoding of program bytes, as PJRT's `PJRT_Program.format` names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgramFormat {
    /// `"mlir"`: StableHLO text or MLIR bytecode (a portable artifact).
    #[default]
    Mlir,
    /// `"hlo"`: a serialized `HloModuleProto`.
    Hlo,
    /// `"hlo_with_config"`: a serialized `HloModuleProtoWithConfig`.
    HloWithConfig,
}

impl ProgramFormat {
    const ALL: [ProgramFormat; 3] = [
        ProgramFormat::Mlir,
        ProgramFormat::Hlo,
        ProgramFormat::HloWithConfig,
    ];

    /// The PJRT name of the format.
    pub fn name(self) -> &'static str {
        match self {
            ProgramFormat::Mlir => "mlir",
            ProgramFormat::Hlo => "hlo",
            ProgramFormat::HloWithConfig => "hlo_with_config",
        }
    }

    /// The format of a PJRT name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Parses program bytes of a format.
pub fn parse_program(bytes: &[u8], format: ProgramFormat, filename: &str) -> Result<Module> {
    match format {
        ProgramFormat::Mlir => parse(bytes, filename),
        ProgramFormat::Hlo => hlo_proto::parse_hlo_module(bytes, filename),
        ProgramFormat::HloWithConfig => hlo_proto::parse_hlo_module_with_config(bytes, filename),
    }
}

/// Parses program bytes: MLIR bytecode (portable artifact) or StableHLO text; a serialized
/// `HloModuleProto` when `filename` ends in `.pb`.
pub fn parse(bytes: &[u8], filename: &str) -> Result<Module> {
    if hlo_proto::is_hlo_proto_file(filename) {
        return hlo_proto::parse_hlo_module(bytes, filename);
    }
    if bytecode::is_bytecode(bytes) {
        return bytecode::parse_bytecode(bytes, filename);
    }
    let src = std::str::from_utf8(bytes).map_err(|e| {
        Error::invalid(format!(
            "{filename}: neither MLIR bytecode nor UTF-8 text: {e}"
        ))
    })?;
    text::parse_module(src, filename)
}

/// The target description of a device for the emitters.
pub fn target(device: &Device) -> Target<'_> {
    let l = device.limits();
    let cpu_adapter =
        crate::target::cpu_adapter_from_env().unwrap_or(device.info().device_type == "Cpu");
    Target {
        caps: device.caps(),
        adapter: &device.info().name,
        max_workgroups: l.max_compute_workgroups_per_dimension,
        max_storage_buffers: l.max_storage_buffers_per_shader_stage,
        cpu_adapter,
        max_invocation_iterations: crate::target::within_adapter_loop_limit(
            crate::codegen::loop_kernel::max_invocation_iterations_from_env(),
            &device.info().name,
        ),
        max_binding_size: l.max_storage_buffer_binding_size,
        min_binding_offset_alignment: l.min_storage_buffer_offset_alignment as u64,
        max_workgroup_storage: l.max_compute_workgroup_storage_size as u64,
        texture_reads: if cpu_adapter {
            crate::codegen::texture_reads::min_words_from_env()
        } else {
            None
        },
        read_once_texture_words: lower::read_once_texture_words_from_env(),
        max_texture_dimension: l.max_texture_dimension_2d,
        max_sampled_textures: l.max_sampled_textures_per_shader_stage,
        scatter_sweep: !std::env::var("WGPU_HLO_SCATTER_SWEEP").is_ok_and(|v| v.trim() == "0"),
    }
}

/// Compiles program bytes for `device`.
pub fn compile(
    device: &Arc<Device>,
    program: &[u8],
    options: &CompileOptions,
) -> Result<Arc<Executable>> {
    let name = options.name.clone().unwrap_or_else(|| "module".into());
    let module = parse_program(program, options.format, &name)?;
    let entry = options.entry.clone().unwrap_or_else(|| "main".into());
    let f = passes::prepare(&module, &entry)?;
    compile_function(device, &f, Some(&module), options)
}

/// Loads an executable from `Executable::serialize` bytes: no parsing, passes or code
/// generation, only pipeline creation. Bytes from another format version, build or adapter,
/// and corrupt or truncated ones, are INVALID_ARGUMENT. `options.name` renames it.
pub fn deserialize(
    device: &Arc<Device>,
    bytes: &[u8],
    options: &CompileOptions,
) -> Result<Arc<Executable>> {
    let start = std::time::Instant::now();
    let (mut parts, stored) = serial::decode(bytes, device)?;
    let decoded = start.elapsed();
    if crate::runtime::executable::fingerprint(&parts) != stored {
        return Err(Error::invalid(
            "serialized executable is corrupt (its fingerprint does not match its program)",
        ));
    }
    if let Some(name) = &options.name {
        parts.name = name.clone();
    }
    let exe = Executable::load(device, parts)?;
    log::debug!(
        "loaded {} ({} kernels) from {} bytes: decoded in {decoded:?}, loaded in {:?}",
        exe.name(),
        exe.kernels().len(),
        bytes.len(),
        start.elapsed() - decoded
    );
    Ok(exe)
}

/// Parameter indices that results may reuse, from `tf.aliasing_output` argument attributes.
fn output_aliases(f: &Function) -> Vec<Option<usize>> {
    let mut out = vec![None; f.result_types.len()];
    for (i, attrs) in f.arg_attrs.iter().enumerate() {
        if let Some(Attr::Int(o, _)) = crate::ir::attr::find_attr(attrs, "tf.aliasing_output") {
            if let Some(slot) = usize::try_from(*o).ok().and_then(|o| out.get_mut(o)) {
                *slot = Some(i);
            }
        }
    }
    out
}

/// `f` without the argument and result attributes the bytecode reader kept only as opaque
/// placeholders (`sdy.sharding = #sdy<6 bytes of bytecode>`: dialects it does not decode).
/// The executable's IR text is handed to frameworks (`PJRT_Executable_OptimizedProgram`,
/// which jaxlib parses when it serializes an executable for its cache), so it must parse.
fn printable_signature(f: &Function) -> std::borrow::Cow<'_, Function> {
    let opaque = |a: &Attr| matches!(a, Attr::Opaque(s) if s.ends_with(" bytes of bytecode>"));
    let has = |v: &[crate::ir::module::NamedAttrs]| v.iter().flatten().any(|(_, a)| opaque(a));
    if !has(&f.arg_attrs) && !has(&f.result_attrs) {
        return std::borrow::Cow::Borrowed(f);
    }
    let mut g = f.clone();
    for attrs in g.arg_attrs.iter_mut().chain(g.result_attrs.iter_mut()) {
        attrs.retain(|(_, a)| !opaque(a));
    }
    std::borrow::Cow::Owned(g)
}

static DUMP_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Where dumps go: the option, else `WGPU_HLO_DUMP`. An empty path (`WGPU_HLO_DUMP=`, an empty
/// `--xla_dump_to`) means no dump, not the current directory.
fn dump_dir(options: &CompileOptions) -> Option<PathBuf> {
    options
        .dump_dir
        .clone()
        .or_else(|| std::env::var_os("WGPU_HLO_DUMP").map(PathBuf::from))
        .filter(|d| !d.as_os_str().is_empty())
}

/// Compiles a prepared function (inlined, canonicalized, verified).
pub fn compile_function(
    device: &Arc<Device>,
    f: &Function,
    module: Option<&Module>,
    options: &CompileOptions,
) -> Result<Arc<Executable>> {
    let start = std::time::Instant::now();
    // A driver workaround (lavapipe's i64 widening miscompile): keyed on the real adapter, not
    // on the kernel-shape class `WGPU_HLO_ADAPTER_CLASS` may override.
    let _widening = crate::codegen::elementwise::widen_via_f64(
        device.caps().f64 && device.info().device_type == "Cpu",
    );
    let name = options
        .name
        .clone()
        .or_else(|| module.and_then(|m| m.name.clone()))
        .unwrap_or_else(|| f.name.clone());
    let tensor = |t: &Type| -> Result<crate::ir::TensorType> {
        match t {
            Type::Tensor(t) if t.is_static() => Ok(t.clone()),
            other => Err(Error::unimplemented(format!(
                "@{}: parameters and results of type {other} are not supported",
                f.name
            ))),
        }
    };
    let param_types = f.arg_types.iter().map(tensor).collect::<Result<Vec<_>>>()?;
    let output_types = f
        .result_types
        .iter()
        .map(tensor)
        .collect::<Result<Vec<_>>>()?;
    let mut target = target(device);
    if let Some(n) = options.max_loop_iterations {
        target.max_invocation_iterations =
            crate::target::within_adapter_loop_limit(n.max(16), target.adapter);
    }
    if let Some(n) = options.max_binding_bytes {
        target.max_binding_size = target.max_binding_size.min(n.max(4));
    }
    if let Some(n) = options.read_once_texture_words {
        target.read_once_texture_words = n;
    }
    if let Some(on) = options.scatter_sweep {
        target.scatter_sweep = on;
    }
    // CPU adapters' dots read operands along their free dimensions faster: large ones get
    // such operands written transposed (`passes::dot_layout`).
    let mut relaid: Option<Function> = None;
    if crate::codegen::dot_kernel::shared_rows_serve(&target) {
        let g = relaid.get_or_insert_with(|| f.clone());
        passes::dot_layout::transpose_operands_along_free(g);
    }
    // CPU adapters' column reductions want rows of many columns (`passes::fold_rows`).
    if target.cpu_adapter {
        passes::fold_rows::fold_narrow_rows(relaid.get_or_insert_with(|| f.clone()));
    }
    let f = relaid.as_ref().unwrap_or(f);
    let mut lowered = match lower::lower(f, target) {
        Ok(l) => l,
        Err(e) => {
            // Dump what was read, so a failing program can be inspected.
            if let Some(dir) = dump_dir(options) {
                let _ = write_failed_dump(&dir, &name, module, f, &e);
            }
            return Err(e.context(format!("compiling {name} for {}", device.info())));
        }
    };
    let merging = options
        .merge_launches
        .unwrap_or_else(|| !crate::fusion::switched_off("WGPU_HLO_MERGE_LAUNCHES"));
    if merging {
        merge::merge_launches(&mut lowered.program, &mut lowered.kernels, target);
    }
    merge::compact(&mut lowered.program, &mut lowered.kernels);
    let ir_text = print::print_function(&printable_signature(f));
    let dump = dump_dir(options);
    let parts = ExecutableParts {
        name: name.clone(),
        param_types,
        output_types,
        slot_types: lowered.slot_types,
        kernels: lowered.kernels,
        constants: lowered
            .constants
            .into_iter()
            .map(|(s, l)| (s, l.bytes().into_owned()))
            .collect(),
        program: lowered.program,
        params: lowered.params,
        results: lowered.results,
        ir_text,
        output_aliases: output_aliases(f),
    };
    let dumped = match &dump {
        Some(dir) => Some(write_dump(
            dir,
            &name,
            module,
            f,
            &parts,
            &lowered.partitions,
        )?),
        None => None,
    };
    let generated = start.elapsed();
    let exe = Executable::load(device, parts)?;
    if let Some(prefix) = dumped {
        exe.dump_kernel_times_to(PathBuf::from(format!(
            "{}.kernel_times.txt",
            prefix.display()
        )));
    }
    log::debug!(
        "compiled {name} ({} kernels): generated in {generated:?}, loaded in {:?}",
        exe.kernels().len(),
        start.elapsed() - generated
    );
    Ok(exe)
}

fn dump_prefix(dir: &std::path::Path, name: &str) -> PathBuf {
    let seq = DUMP_SEQ.fetch_add(1, Ordering::Relaxed);
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("module_{seq:04}.{safe}"))
}

/// The dump of a compilation that failed: the module, the IR after passes and the error.
fn write_failed_dump(
    dir: &std::path::Path,
    name: &str,
    module: Option<&Module>,
    f: &Function,
    error: &Error,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let prefix = dump_prefix(dir, name);
    if let Some(m) = module {
        std::fs::write(
            format!("{}.module.mlir", prefix.display()),
            print::print_module(m),
        )?;
    }
    std::fs::write(
        format!("{}.after_passes.mlir", prefix.display()),
        print::print_function(f),
    )?;
    std::fs::write(
        format!("{}.error.txt", prefix.display()),
        format!("{error}\n"),
    )
}

fn write_dump(
    dir: &std::path::Path,
    name: &str,
    module: Option<&Module>,
    f: &Function,
    parts: &ExecutableParts,
    partitions: &str,
) -> Result<PathBuf> {
    let prefix = dump_prefix(dir, name);
    let io =
        |e: std::io::Error| Error::invalid(format!("writing the dump to {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let write = |suffix: &str, text: &str| -> Result<()> {
        std::fs::write(format!("{}.{suffix}", prefix.display()), text).map_err(io)
    };
    if let Some(m) = module {
        write("module.mlir", &print::print_module(m))?;
    }
    write("after_passes.mlir", &print::print_function(f))?;
    write("partition.txt", partitions)?;
    let names: Vec<String> = parts
        .kernels
        .iter()
        .map(crate::codegen::kernel::Kernel::listed_name)
        .collect();
    write("program.txt", &parts.program.listing(&names))?;
    for k in &parts.kernels {
        write(&format!("{}.wgsl", k.name), &k.wgsl)?;
    }
    Ok(prefix)
}
