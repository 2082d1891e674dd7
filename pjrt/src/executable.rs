//! Compilation and executables: `PJRT_Client_Compile` / `PJRT_Compile`, the executable queries
//! jaxlib makes, serialization, and `PJRT_LoadedExecutable_Execute`, which returns as soon as
//! the work is queued.

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wgpu_hlo::compile::{self, CompileOptions, ProgramFormat};
use wgpu_hlo::runtime::executable::Executable;
use wgpu_hlo::runtime::DeviceBuffer;
use wgpu_hlo::{Error, Result};

use crate::abi::{bytes, entry, get, req, set, slice, str_arg, Args};
use crate::buffer::{buffer_ref, pjrt_type, BufferObj};
use crate::client::{client_ref, ClientState, MEMORY_KIND};
use crate::compile_options;
use crate::event::into_raw_event;
use crate::ffi::*;
use crate::named_values::NamedValues;

/// Format name of StableHLO programs (bytecode or text).
const MLIR_FORMAT: &str = "mlir";
/// Prefix of our serialized executables: magic, then the compile options, then the library's
/// own serialization.
const SERIAL_MAGIC: &[u8] = b"WGPUPJRT\x01";

/// What a compiled program answers about itself, shared by its executable handles.
struct Info {
    exe: Arc<Executable>,
    compile_options: Vec<u8>,
    fingerprint: String,
    output_types: Vec<PJRT_Buffer_Type>,
    output_dims: Vec<i64>,
    output_ranks: Vec<usize>,
    output_kinds: Vec<*const c_char>,
    output_kind_sizes: Vec<usize>,
    param_kinds: Vec<*const c_char>,
    param_kind_sizes: Vec<usize>,
    cost: NamedValues,
}

// SAFETY: the raw pointers in `Info` point at the `'static` memory-kind string; everything else
// is owned and immutable after construction.
unsafe impl Send for Info {}
// SAFETY: as above.
unsafe impl Sync for Info {}

impl Info {
    fn new(exe: Arc<Executable>, compile_options: Vec<u8>) -> Result<Arc<Info>> {
        let outs = exe.output_types();
        let output_types = outs
            .iter()
            .map(|t| pjrt_type(t.dtype))
            .collect::<Result<Vec<_>>>()?;
        let kind = MEMORY_KIND.as_ptr().cast::<c_char>();
        Ok(Arc::new(Info {
            fingerprint: exe.fingerprint(),
            output_types,
            output_dims: outs.iter().flat_map(|t| t.shape.iter().copied()).collect(),
            output_ranks: outs.iter().map(|t| t.shape.len()).collect(),
            output_kinds: vec![kind; outs.len()],
            output_kind_sizes: vec![MEMORY_KIND.len(); outs.len()],
            param_kinds: vec![kind; exe.parameter_types().len()],
            param_kind_sizes: vec![MEMORY_KIND.len(); exe.parameter_types().len()],
            cost: NamedValues::new(Vec::new()),
            compile_options,
            exe,
        }))
    }

    /// Our serialization: magic, compile options (length-prefixed), library bytes.
    fn serialize(&self) -> Vec<u8> {
        let mut out = SERIAL_MAGIC.to_vec();
        out.extend_from_slice(&(self.compile_options.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.compile_options);
        out.extend_from_slice(&self.exe.serialize());
        out
    }
}

/// Splits our serialization into compile options and library bytes.
fn split_serialized(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || Error::invalid("not an executable serialized by the wgpu PJRT plugin");
    let rest = bytes.strip_prefix(SERIAL_MAGIC).ok_or_else(bad)?;
    let len_bytes: [u8; 8] = rest
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let len = usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|_| bad())?;
    let opts = rest
        .get(8..8usize.checked_add(len).ok_or_else(bad)?)
        .ok_or_else(bad)?;
    Ok((opts, &rest[8 + len..]))
}

/// A `PJRT_Executable`.
pub(crate) struct ExecutableObj {
    info: Arc<Info>,
}

/// A `PJRT_LoadedExecutable`.
pub(crate) struct LoadedObj {
    info: Arc<Info>,
    state: Arc<ClientState>,
    devices: [*mut PJRT_Device; 1],
    logical_ids: [PJRT_LogicalDeviceIds; 1],
    device_assignment: Vec<u8>,
    deleted: AtomicBool,
}

fn new_loaded(info: Arc<Info>, state: Arc<ClientState>) -> Result<*mut PJRT_LoadedExecutable> {
    if !Arc::ptr_eq(info.exe.device(), &state.device) {
        return Err(Error::invalid(
            "the executable was compiled for another wgpu client",
        ));
    }
    let obj = LoadedObj {
        devices: [state.device_handle()],
        logical_ids: [PJRT_LogicalDeviceIds {
            replica: 0,
            partition: 0,
        }],
        device_assignment: compile_options::single_device_assignment(),
        deleted: AtomicBool::new(false),
        info,
        state,
    };
    Ok(Box::into_raw(Box::new(obj)).cast())
}

/// The executable behind a caller's handle.
///
/// # Safety
/// `p` is null or a live executable handle.
unsafe fn executable_ref<'a>(p: *const PJRT_Executable) -> Result<&'a ExecutableObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<ExecutableObj>().as_ref() }
        .ok_or_else(|| Error::invalid("executable is null"))
}

/// The loaded executable behind a caller's handle.
///
/// # Safety
/// `p` is null or a live loaded-executable handle.
unsafe fn loaded_ref<'a>(p: *mut PJRT_LoadedExecutable) -> Result<&'a LoadedObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<LoadedObj>().as_ref() }
        .ok_or_else(|| Error::invalid("loaded executable is null"))
}

/// Reads a caller's `PJRT_Program` and returns its code, checking the format.
///
/// # Safety
/// `p` is null or a valid program whose strings are readable during the call.
unsafe fn program_code<'a>(p: *const PJRT_Program) -> Result<(&'a [u8], ProgramFormat)> {
    // SAFETY: per contract.
    let a = unsafe { Args::new(p.cast_mut(), PJRT_Program::STRUCT_SIZE) }?;
    let (format, format_size) = (req!(a, format)?, req!(a, format_size)?);
    // SAFETY: the caller's strings, valid during the call.
    let format = unsafe { str_arg(format, format_size, "program format") }?;
    let format = ProgramFormat::from_name(format).ok_or_else(|| {
        Error::unimplemented(format!(
            "program format {format:?} is not supported by the wgpu plugin; use \"mlir\" \
             (StableHLO bytecode or text), \"hlo\" or \"hlo_with_config\" (serialized HLO protos)"
        ))
    })?;
    let (code, code_size) = (req!(a, code)?, req!(a, code_size)?);
    // SAFETY: as above.
    Ok((
        unsafe { bytes(code.cast(), code_size, "program code") }?,
        format,
    ))
}

/// Compiles program bytes with serialized compile options for a client.
fn compile_for(
    state: &ClientState,
    (code, format): (&[u8], ProgramFormat),
    options: &[u8],
) -> Result<Arc<Info>> {
    let opts = compile_options::parse(options)?;
    log::debug!(
        "compiling {} bytes of {} with {opts:?}",
        code.len(),
        format.name()
    );
    let exe = compile::compile(
        &state.device,
        code,
        &CompileOptions {
            dump_dir: opts.dump_dir,
            format,
            ..Default::default()
        },
    )?;
    log::info!("compiled {} for {}", exe.name(), state.device.info());
    Info::new(exe, options.to_vec())
}

fn client_compile(a: &Args<PJRT_Client_Compile_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let client = unsafe { client_ref(client_handle) }?;
    let program_handle = req!(a, program)?;
    // SAFETY: the caller's program, valid during the call.
    let code = unsafe { program_code(program_handle) }?;
    let (opts, opts_size) = (req!(a, compile_options)?, req!(a, compile_options_size)?);
    // SAFETY: the caller's option bytes, valid during the call.
    let options = unsafe { bytes(opts.cast(), opts_size, "compile_options") }?;
    let info = compile_for(&client.state, code, options)?;
    set!(a, executable, new_loaded(info, client.state.clone())?);
    Ok(())
}
entry!(
    PJRT_Client_Compile,
    PJRT_Client_Compile_Args,
    client_compile
);

fn aot_compile(a: &Args<PJRT_Compile_Args>) -> Result<()> {
    let client = req!(a, client)?;
    if client.is_null() {
        return Err(Error::unimplemented(
            "the wgpu plugin compiles for a live device: PJRT_Compile needs a client",
        ));
    }
    // SAFETY: live handle per convention.
    let client = unsafe { client_ref(client) }?;
    let program_handle = req!(a, program)?;
    // SAFETY: the caller's program, valid during the call.
    let code = unsafe { program_code(program_handle) }?;
    let (opts, opts_size) = (req!(a, compile_options)?, req!(a, compile_options_size)?);
    // SAFETY: the caller's option bytes, valid during the call.
    let options = unsafe { bytes(opts.cast(), opts_size, "compile_options") }?;
    let info = compile_for(&client.state, code, options)?;
    set!(
        a,
        executable,
        Box::into_raw(Box::new(ExecutableObj { info })).cast()
    );
    Ok(())
}
entry!(PJRT_Compile, PJRT_Compile_Args, aot_compile);

fn client_load(a: &Args<PJRT_Client_Load_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    let executable = req!(a, executable)?;
    // SAFETY: live handles per convention.
    let client = unsafe { client_ref(client_handle) }?;
    // SAFETY: as above.
    let exe = unsafe { executable_ref(executable) }?;
    set!(
        a,
        loaded_executable,
        new_loaded(exe.info.clone(), client.state.clone())?
    );
    Ok(())
}
entry!(PJRT_Client_Load, PJRT_Client_Load_Args, client_load);

fn deserialize_and_load(a: &Args<PJRT_Executable_DeserializeAndLoad_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let client = unsafe { client_ref(client_handle) }?;
    let (ser, ser_size) = (
        req!(a, serialized_executable)?,
        req!(a, serialized_executable_size)?,
    );
    // SAFETY: the caller's bytes, valid during the call.
    let data = unsafe { bytes(ser.cast(), ser_size, "serialized_executable") }?;
    let (stored_options, program) = split_serialized(data)?;
    let over = get!(a, overridden_serialized_compile_options).unwrap_or(std::ptr::null());
    let over_size = get!(a, overridden_serialized_compile_options_size).unwrap_or(0);
    // SAFETY: the caller's optional override bytes, valid during the call.
    let overridden = unsafe {
        bytes(
            over.cast(),
            over_size,
            "overridden_serialized_compile_options",
        )
    }?;
    let options = if overridden.is_empty() {
        stored_options
    } else {
        overridden
    };
    let opts = compile_options::parse(options)?;
    let exe = compile::deserialize(
        &client.state.device,
        program,
        &CompileOptions {
            dump_dir: opts.dump_dir,
            ..Default::default()
        },
    )?;
    let info = Info::new(exe, options.to_vec())?;
    set!(
        a,
        loaded_executable,
        new_loaded(info, client.state.clone())?
    );
    Ok(())
}
entry!(
    PJRT_Executable_DeserializeAndLoad,
    PJRT_Executable_DeserializeAndLoad_Args,
    std::mem::offset_of!(
        PJRT_Executable_DeserializeAndLoad_Args,
        overridden_serialized_compile_options
    ),
    deserialize_and_load
);

// -------------------------------- executables --------------------------------

fn executable_destroy(a: &Args<PJRT_Executable_Destroy_Args>) -> Result<()> {
    let p = req!(a, executable)?;
    if !p.is_null() {
        // SAFETY: a live handle the caller gives up.
        drop(unsafe { Box::from_raw(p.cast::<ExecutableObj>()) });
    }
    Ok(())
}
entry!(
    PJRT_Executable_Destroy,
    PJRT_Executable_Destroy_Args,
    executable_destroy
);

/// The info behind a `PJRT_Executable` handle.
fn info_of<'a>(p: *const PJRT_Executable) -> Result<&'a Info> {
    // SAFETY: live handle per convention (every caller passes the args' handle).
    Ok(&unsafe { executable_ref(p) }?.info)
}

fn name(a: &Args<PJRT_Executable_Name_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    let n = info.exe.name();
    set!(a, executable_name, n.as_ptr().cast());
    set!(a, executable_name_size, n.len());
    Ok(())
}
entry!(PJRT_Executable_Name, PJRT_Executable_Name_Args, name);

fn num_replicas(a: &Args<PJRT_Executable_NumReplicas_Args>) -> Result<()> {
    info_of(req!(a, executable)?)?;
    set!(a, num_replicas, 1);
    Ok(())
}
entry!(
    PJRT_Executable_NumReplicas,
    PJRT_Executable_NumReplicas_Args,
    num_replicas
);

fn num_partitions(a: &Args<PJRT_Executable_NumPartitions_Args>) -> Result<()> {
    info_of(req!(a, executable)?)?;
    set!(a, num_partitions, 1);
    Ok(())
}
entry!(
    PJRT_Executable_NumPartitions,
    PJRT_Executable_NumPartitions_Args,
    num_partitions
);

fn num_outputs(a: &Args<PJRT_Executable_NumOutputs_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, num_outputs, info.exe.num_outputs());
    Ok(())
}
entry!(
    PJRT_Executable_NumOutputs,
    PJRT_Executable_NumOutputs_Args,
    num_outputs
);

fn code_size(a: &Args<PJRT_Executable_SizeOfGeneratedCodeInBytes_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    let size: usize = info.exe.kernels().iter().map(|k| k.wgsl.len()).sum();
    set!(a, size_in_bytes, i64::try_from(size).unwrap_or(i64::MAX));
    Ok(())
}
entry!(
    PJRT_Executable_SizeOfGeneratedCodeInBytes,
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args,
    code_size
);

fn fingerprint(a: &Args<PJRT_Executable_Fingerprint_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, executable_fingerprint, info.fingerprint.as_ptr().cast());
    set!(a, executable_fingerprint_size, info.fingerprint.len());
    Ok(())
}
entry!(
    PJRT_Executable_Fingerprint,
    PJRT_Executable_Fingerprint_Args,
    fingerprint
);

fn cost_analysis(a: &Args<PJRT_Executable_GetCostAnalysis_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, num_properties, info.cost.len());
    set!(a, properties, info.cost.as_ptr());
    Ok(())
}
entry!(
    PJRT_Executable_GetCostAnalysis,
    PJRT_Executable_GetCostAnalysis_Args,
    cost_analysis
);

fn compiled_memory_stats(a: &Args<PJRT_Executable_GetCompiledMemoryStats_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    let sum = |ts: &[wgpu_hlo::ir::TensorType]| -> i64 {
        i64::try_from(ts.iter().map(|t| t.byte_size()).sum::<usize>()).unwrap_or(i64::MAX)
    };
    let args_size = sum(info.exe.parameter_types());
    let out_size = sum(info.exe.output_types());
    let code: usize = info.exe.kernels().iter().map(|k| k.wgsl.len()).sum();
    set!(
        a,
        generated_code_size_in_bytes,
        i64::try_from(code).unwrap_or(i64::MAX)
    );
    set!(a, argument_size_in_bytes, args_size);
    set!(a, output_size_in_bytes, out_size);
    set!(a, alias_size_in_bytes, 0);
    set!(a, temp_size_in_bytes, 0);
    set!(a, host_generated_code_size_in_bytes, 0);
    set!(a, host_argument_size_in_bytes, 0);
    set!(a, host_output_size_in_bytes, 0);
    set!(a, host_alias_size_in_bytes, 0);
    set!(a, host_temp_size_in_bytes, 0);
    set!(a, peak_memory_in_bytes, args_size.saturating_add(out_size));
    set!(a, total_size_in_bytes, args_size.saturating_add(out_size));
    set!(a, total_allocation_bytes, 0);
    set!(a, indefinite_allocations, 0);
    set!(a, peak_unpadded_heap_bytes, 0);
    Ok(())
}
entry!(
    PJRT_Executable_GetCompiledMemoryStats,
    PJRT_Executable_GetCompiledMemoryStats_Args,
    std::mem::offset_of!(
        PJRT_Executable_GetCompiledMemoryStats_Args,
        host_generated_code_size_in_bytes
    ),
    compiled_memory_stats
);

fn output_element_types(a: &Args<PJRT_Executable_OutputElementTypes_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, output_types, info.output_types.as_ptr().cast_mut());
    set!(a, num_output_types, info.output_types.len());
    Ok(())
}
entry!(
    PJRT_Executable_OutputElementTypes,
    PJRT_Executable_OutputElementTypes_Args,
    output_element_types
);

fn output_dimensions(a: &Args<PJRT_Executable_OutputDimensions_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, num_outputs, info.output_ranks.len());
    set!(a, dims, info.output_dims.as_ptr());
    set!(a, dim_sizes, info.output_ranks.as_ptr());
    Ok(())
}
entry!(
    PJRT_Executable_OutputDimensions,
    PJRT_Executable_OutputDimensions_Args,
    output_dimensions
);

fn output_memory_kinds(a: &Args<PJRT_Executable_OutputMemoryKinds_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, num_outputs, info.output_kinds.len());
    set!(a, memory_kinds, info.output_kinds.as_ptr());
    set!(a, memory_kind_sizes, info.output_kind_sizes.as_ptr());
    Ok(())
}
entry!(
    PJRT_Executable_OutputMemoryKinds,
    PJRT_Executable_OutputMemoryKinds_Args,
    output_memory_kinds
);

fn parameter_memory_kinds(a: &Args<PJRT_Executable_ParameterMemoryKinds_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    set!(a, num_parameters, info.param_kinds.len());
    set!(a, memory_kinds, info.param_kinds.as_ptr());
    set!(a, memory_kind_sizes, info.param_kind_sizes.as_ptr());
    Ok(())
}
entry!(
    PJRT_Executable_ParameterMemoryKinds,
    PJRT_Executable_ParameterMemoryKinds_Args,
    parameter_memory_kinds
);

fn optimized_program(a: &Args<PJRT_Executable_OptimizedProgram_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    let p = req!(a, program)?;
    // SAFETY: the caller's program struct, valid during the call.
    let prog = unsafe { Args::new(p, std::mem::offset_of!(PJRT_Program, format)) }?;
    let text = info.exe.ir_text();
    set!(prog, format, MLIR_FORMAT.as_ptr().cast());
    set!(prog, format_size, MLIR_FORMAT.len());
    let code = req!(prog, code)?;
    if code.is_null() {
        set!(prog, code_size, text.len());
        return Ok(());
    }
    let room = req!(prog, code_size)?;
    if room < text.len() {
        return Err(Error::invalid(format!(
            "program code buffer of {room} bytes; the optimized program needs {}",
            text.len()
        )));
    }
    // SAFETY: the caller's buffer has `room >= text.len()` writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), code.cast::<u8>(), text.len()) };
    set!(prog, code_size, text.len());
    Ok(())
}
entry!(
    PJRT_Executable_OptimizedProgram,
    PJRT_Executable_OptimizedProgram_Args,
    optimized_program
);

unsafe extern "C" fn free_serialized_executable(p: *mut PJRT_SerializedExecutable) {
    if !p.is_null() {
        // SAFETY: allocated as `Box<Vec<u8>>` by `serialize`.
        drop(unsafe { Box::from_raw(p.cast::<Vec<u8>>()) });
    }
}

fn serialize(a: &Args<PJRT_Executable_Serialize_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    let data = Box::new(info.serialize());
    set!(a, serialized_bytes, data.as_ptr().cast());
    set!(a, serialized_bytes_size, data.len());
    let deleter: unsafe extern "C" fn(*mut PJRT_SerializedExecutable) = free_serialized_executable;
    set!(a, serialized_executable_deleter, Some(deleter));
    set!(a, serialized_executable, Box::into_raw(data).cast());
    Ok(())
}
entry!(
    PJRT_Executable_Serialize,
    PJRT_Executable_Serialize_Args,
    serialize
);

unsafe extern "C" fn free_compile_options(p: *mut PJRT_SerializedCompileOptions) {
    if !p.is_null() {
        // SAFETY: allocated as `Box<Vec<u8>>` by `get_compile_options`.
        drop(unsafe { Box::from_raw(p.cast::<Vec<u8>>()) });
    }
}

fn get_compile_options(a: &Args<PJRT_Executable_GetCompileOptions_Args>) -> Result<()> {
    let info = info_of(req!(a, executable)?)?;
    let data = Box::new(info.compile_options.clone());
    set!(a, serialized_bytes, data.as_ptr().cast());
    set!(a, serialized_bytes_size, data.len());
    let deleter: unsafe extern "C" fn(*mut PJRT_SerializedCompileOptions) = free_compile_options;
    set!(a, serialized_compile_options_deleter, Some(deleter));
    set!(a, serialized_compile_options, Box::into_raw(data).cast());
    Ok(())
}
entry!(
    PJRT_Executable_GetCompileOptions,
    PJRT_Executable_GetCompileOptions_Args,
    get_compile_options
);

// ----------------------------- loaded executables -----------------------------

fn loaded_destroy(a: &Args<PJRT_LoadedExecutable_Destroy_Args>) -> Result<()> {
    let p = req!(a, executable)?;
    if !p.is_null() {
        // SAFETY: a live handle the caller gives up.
        drop(unsafe { Box::from_raw(p.cast::<LoadedObj>()) });
    }
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_Destroy,
    PJRT_LoadedExecutable_Destroy_Args,
    loaded_destroy
);

fn loaded_get_executable(a: &Args<PJRT_LoadedExecutable_GetExecutable_Args>) -> Result<()> {
    let loaded_executable_handle = req!(a, loaded_executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(loaded_executable_handle) }?;
    let exe = Box::new(ExecutableObj {
        info: l.info.clone(),
    });
    set!(a, executable, Box::into_raw(exe).cast());
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_GetExecutable,
    PJRT_LoadedExecutable_GetExecutable_Args,
    loaded_get_executable
);

fn loaded_addressable_devices(
    a: &Args<PJRT_LoadedExecutable_AddressableDevices_Args>,
) -> Result<()> {
    let executable_handle = req!(a, executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(executable_handle) }?;
    set!(a, addressable_devices, l.devices.as_ptr());
    set!(a, num_addressable_devices, l.devices.len());
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_AddressableDevices,
    PJRT_LoadedExecutable_AddressableDevices_Args,
    loaded_addressable_devices
);

fn loaded_logical_ids(
    a: &Args<PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args>,
) -> Result<()> {
    let executable_handle = req!(a, executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(executable_handle) }?;
    set!(
        a,
        addressable_device_logical_ids,
        l.logical_ids.as_ptr().cast_mut()
    );
    set!(a, num_addressable_device_logical_ids, l.logical_ids.len());
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds,
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args,
    loaded_logical_ids
);

unsafe extern "C" fn free_device_assignment(_p: *mut PJRT_DeviceAssignmentSerialized) {
    // The bytes belong to the loaded executable; nothing to free.
}

fn loaded_device_assignment(
    a: &Args<PJRT_LoadedExecutable_GetDeviceAssignment_Args>,
) -> Result<()> {
    let executable_handle = req!(a, executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(executable_handle) }?;
    set!(a, serialized_bytes, l.device_assignment.as_ptr().cast());
    set!(a, serialized_bytes_size, l.device_assignment.len());
    set!(a, serialized_device_assignment, std::ptr::null_mut());
    let deleter: unsafe extern "C" fn(*mut PJRT_DeviceAssignmentSerialized) =
        free_device_assignment;
    set!(a, serialized_device_assignment_deleter, Some(deleter));
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_GetDeviceAssignment,
    PJRT_LoadedExecutable_GetDeviceAssignment_Args,
    loaded_device_assignment
);

fn loaded_delete(a: &Args<PJRT_LoadedExecutable_Delete_Args>) -> Result<()> {
    let executable_handle = req!(a, executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(executable_handle) }?;
    l.deleted.store(true, Ordering::Release);
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_Delete,
    PJRT_LoadedExecutable_Delete_Args,
    loaded_delete
);

fn loaded_is_deleted(a: &Args<PJRT_LoadedExecutable_IsDeleted_Args>) -> Result<()> {
    let executable_handle = req!(a, executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(executable_handle) }?;
    set!(a, is_deleted, l.deleted.load(Ordering::Acquire));
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_IsDeleted,
    PJRT_LoadedExecutable_IsDeleted_Args,
    loaded_is_deleted
);

/// Which arguments are donated: those a result may alias (`tf.aliasing_output`), minus the ones
/// the caller marks non-donatable.
fn donation(exe: &Executable, num_args: usize, non_donatable: &[i64]) -> Vec<bool> {
    let mut donated = vec![false; num_args];
    for i in exe.output_aliases().into_iter().flatten() {
        if let Some(d) = donated.get_mut(i) {
            *d = true;
        }
    }
    for &i in non_donatable {
        if let Some(d) = usize::try_from(i).ok().and_then(|i| donated.get_mut(i)) {
            *d = false;
        }
    }
    donated
}

fn execute(a: &Args<PJRT_LoadedExecutable_Execute_Args>) -> Result<()> {
    let executable_handle = req!(a, executable)?;
    // SAFETY: live handle per convention.
    let l = unsafe { loaded_ref(executable_handle) }?;
    if l.deleted.load(Ordering::Acquire) {
        return Err(Error::failed_precondition(format!(
            "executable {} was deleted",
            l.info.exe.name()
        )));
    }
    let num_devices = req!(a, num_devices)?;
    if num_devices != 1 {
        return Err(Error::unimplemented(format!(
            "the wgpu plugin executes on one device; {num_devices} argument lists were given"
        )));
    }
    if let Some(d) = get!(a, execute_device) {
        l.state.check_device(d)?;
    }
    let mut non_donatable: &[i64] = &[];
    let opts = req!(a, options)?;
    if !opts.is_null() {
        // SAFETY: the caller's options, valid during the call.
        let o = unsafe { Args::new(opts, std::mem::offset_of!(PJRT_ExecuteOptions, launch_id)) }?;
        if get!(o, num_send_ops).unwrap_or(0) > 0 || get!(o, num_recv_ops).unwrap_or(0) > 0 {
            return Err(Error::unimplemented(
                "host send/recv callbacks are not supported by the wgpu plugin",
            ));
        }
        if get!(o, num_hlo_output_callbacks).unwrap_or(0) > 0 {
            return Err(Error::unimplemented(
                "HLO output callbacks are not supported by the wgpu plugin",
            ));
        }
        let list = get!(o, non_donatable_input_indices).unwrap_or(std::ptr::null());
        let len = get!(o, num_non_donatable_input_indices).unwrap_or(0);
        // SAFETY: the caller's index array, valid during the call.
        non_donatable = unsafe { slice(list, len, "non_donatable_input_indices") }?;
    }
    let num_args = req!(a, num_args)?;
    let lists = req!(a, argument_lists)?;
    // SAFETY: one argument list per device, as the caller promises.
    let lists = unsafe { slice(lists, 1, "argument_lists") }?;
    // SAFETY: `num_args` buffer handles in the list.
    let handles = unsafe { slice(lists[0], num_args, "argument list") }?;
    let mut args: Vec<DeviceBuffer> = Vec::with_capacity(num_args);
    for (i, &h) in handles.iter().enumerate() {
        // SAFETY: live buffer handles per convention.
        let b = unsafe { buffer_ref(h) }.map_err(|e| e.context(format!("argument {i}")))?;
        if !Arc::ptr_eq(&b.state, &l.state) && !Arc::ptr_eq(&b.state.device, &l.state.device) {
            return Err(Error::invalid(format!(
                "argument {i} belongs to another wgpu client"
            )));
        }
        args.push(b.buf.clone());
    }
    let donated = donation(&l.info.exe, num_args, non_donatable);
    let (outs, done) = l.info.exe.execute(&args, &donated)?;
    let out_lists = req!(a, output_lists)?;
    // SAFETY: one output list per device, each with room for `num_outputs` handles.
    let out_lists = unsafe { slice(out_lists, 1, "output_lists") }?;
    let out_list = out_lists[0];
    if out_list.is_null() && !outs.is_empty() {
        return Err(Error::invalid("output list is null"));
    }
    for (j, out) in outs.into_iter().enumerate() {
        let h = BufferObj::new(out, l.state.clone())?.into_raw();
        // SAFETY: the caller's output list has `num_outputs` slots.
        unsafe { *out_list.add(j) = h };
    }
    if let Some(events) = get!(a, device_complete_events).filter(|e| !e.is_null()) {
        // SAFETY: the caller's array has one slot per device.
        unsafe { *events = into_raw_event(done) };
    }
    Ok(())
}
entry!(
    PJRT_LoadedExecutable_Execute,
    PJRT_LoadedExecutable_Execute_Args,
    std::mem::offset_of!(PJRT_LoadedExecutable_Execute_Args, execute_device),
    execute
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;
    use wgpu_hlo::ir::{Attr, BinaryOp, ElementType, Function, Op, Operation, Type};

    struct Handle(*mut PJRT_Client);
    // SAFETY: the client is thread-safe; tests share one.
    unsafe impl Send for Handle {}
    // SAFETY: as above.
    unsafe impl Sync for Handle {}

    fn client() -> *mut PJRT_Client {
        static C: OnceLock<Handle> = OnceLock::new();
        C.get_or_init(|| {
            let mut a: PJRT_Client_Create_Args = zeroed();
            // SAFETY: valid args.
            assert!(unsafe { crate::client::PJRT_Client_Create(&mut a) }.is_null());
            Handle(a.client)
        })
        .0
    }

    fn zeroed<T: PjrtStruct>() -> T {
        // SAFETY: args structs are plain data; all-zero is valid.
        let mut a: T = unsafe { std::mem::zeroed() };
        // SAFETY: they start with `size_t struct_size`.
        unsafe { *(&mut a as *mut T).cast::<usize>() = T::STRUCT_SIZE };
        a
    }

    /// `x + y` on f32[4], with `x` donated to the result when `alias` is set.
    fn add_program(alias: bool) -> Function {
        let ty = Type::tensor(vec![4], ElementType::F32);
        let mut f = Function::new("main", vec![ty.clone(), ty.clone()], vec![ty.clone()]);
        let args = f.body.as_ref().map(|b| b.args.clone()).unwrap_or_default();
        let r = f.new_value(ty);
        let ops = vec![
            Operation::new(
                Op::Binary(BinaryOp::Add),
                args.clone(),
                vec![r],
                Default::default(),
            ),
            Operation::new(Op::Return, vec![r], vec![], Default::default()),
        ];
        if let Some(b) = f.body.as_mut() {
            b.ops = ops;
        }
        f.result_attrs = vec![vec![]];
        if alias {
            f.arg_attrs[0] = vec![("tf.aliasing_output".into(), Attr::Int(0, ElementType::I32))];
        }
        f
    }

    fn upload(v: &[f32]) -> *mut PJRT_Buffer {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let dims = [v.len() as i64];
        let mut a: PJRT_Client_BufferFromHostBuffer_Args = zeroed();
        a.client = client();
        a.data = bytes.as_ptr().cast();
        a.type_ = PJRT_Buffer_Type::F32;
        a.dims = dims.as_ptr();
        a.num_dims = 1;
        // SAFETY: valid args.
        assert!(unsafe { crate::buffer::PJRT_Client_BufferFromHostBuffer(&mut a) }.is_null());
        a.buffer
    }

    fn read(b: *mut PJRT_Buffer) -> Vec<f32> {
        // SAFETY: a live buffer handle.
        let buf = unsafe { buffer_ref(b) }.unwrap();
        buf.buf
            .read_to_host_blocking()
            .unwrap()
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn is_deleted(b: *mut PJRT_Buffer) -> bool {
        // SAFETY: a live buffer handle.
        unsafe { buffer_ref(b) }.unwrap().buf.is_deleted()
    }

    fn run(alias: bool, non_donatable: &[i64]) -> (Vec<f32>, bool) {
        // SAFETY: a live client handle.
        let state = unsafe { client_ref(client()) }.unwrap().state.clone();
        let exe = compile::compile_function(
            &state.device,
            &add_program(alias),
            None,
            &CompileOptions::default(),
            vec![],
        )
        .unwrap();
        let loaded = new_loaded(Info::new(exe, vec![]).unwrap(), state).unwrap();
        let (x, y) = (upload(&[1.0, 2.0, 3.0, 4.0]), upload(&[10.0; 4]));
        let list = [x, y];
        let lists = [list.as_ptr()];
        let mut out = [std::ptr::null_mut::<PJRT_Buffer>(); 1];
        let outs = [out.as_mut_ptr()];
        let mut done = [std::ptr::null_mut::<PJRT_Event>(); 1];
        let mut opts: PJRT_ExecuteOptions = zeroed();
        opts.non_donatable_input_indices = non_donatable.as_ptr();
        opts.num_non_donatable_input_indices = non_donatable.len();
        let mut a: PJRT_LoadedExecutable_Execute_Args = zeroed();
        a.executable = loaded;
        a.options = &mut opts;
        a.argument_lists = lists.as_ptr();
        a.num_devices = 1;
        a.num_args = 2;
        a.output_lists = outs.as_ptr();
        a.device_complete_events = done.as_mut_ptr();
        // SAFETY: valid args with live handles.
        let err = unsafe { PJRT_LoadedExecutable_Execute(&mut a) };
        assert!(err.is_null());
        // SAFETY: the event handle the execution returned.
        let ev = unsafe { &*done[0].cast::<crate::event::EventHandle>() };
        ev.event.wait().unwrap();
        (read(out[0]), is_deleted(x))
    }

    #[test]
    fn execute_queues_and_donates() {
        assert_eq!(run(false, &[]), (vec![11.0, 12.0, 13.0, 14.0], false));
        assert_eq!(run(true, &[]), (vec![11.0, 12.0, 13.0, 14.0], true));
        assert_eq!(run(true, &[0]), (vec![11.0, 12.0, 13.0, 14.0], false));
    }

    #[test]
    fn serialized_envelope_splits() {
        let mut data = SERIAL_MAGIC.to_vec();
        data.extend_from_slice(&3u64.to_le_bytes());
        data.extend_from_slice(b"abcprogram");
        let (o, p) = split_serialized(&data).unwrap();
        assert_eq!(o, b"abc");
        assert_eq!(p, b"program");
        assert!(split_serialized(b"nope").is_err());
        data.truncate(SERIAL_MAGIC.len() + 4);
        assert!(split_serialized(&data).is_err());
    }
}
