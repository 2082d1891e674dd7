//! `PJRT_Buffer`: a runtime [`DeviceBuffer`] plus what the C API hands out by pointer (its
//! dimensions and layout), host transfers in both directions and element-type mapping.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wgpu_hlo::ir::{ElementType, TensorType};
use wgpu_hlo::runtime::{DeviceBuffer, Event};
use wgpu_hlo::{Error, Result};

use crate::abi::{entry, get, req, set, slice, Args};
use crate::client::{client_ref, ClientState};
use crate::event::into_raw_event;
use crate::ffi::*;

/// What a `PJRT_Buffer*` points to.
pub(crate) struct BufferObj {
    pub(crate) buf: DeviceBuffer,
    pub(crate) state: Arc<ClientState>,
    dims: Vec<i64>,
    minor_to_major: Vec<i64>,
    pjrt_type: PJRT_Buffer_Type,
    external_refs: AtomicUsize,
}

impl BufferObj {
    /// Wraps a device buffer for a caller.
    pub(crate) fn new(buf: DeviceBuffer, state: Arc<ClientState>) -> Result<BufferObj> {
        let pjrt_type = pjrt_type(buf.ty().dtype)?;
        let dims = buf.ty().shape.clone();
        let rank = dims.len() as i64;
        Ok(BufferObj {
            buf,
            state,
            dims,
            minor_to_major: (0..rank).rev().collect(),
            pjrt_type,
            external_refs: AtomicUsize::new(0),
        })
    }

    /// Hands the buffer to the caller, who frees it with `PJRT_Buffer_Destroy`.
    pub(crate) fn into_raw(self) -> *mut PJRT_Buffer {
        Box::into_raw(Box::new(self)).cast()
    }
}

/// The buffer behind a caller's handle.
///
/// # Safety
/// `p` is null or a live buffer handle.
pub(crate) unsafe fn buffer_ref<'a>(p: *mut PJRT_Buffer) -> Result<&'a BufferObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<BufferObj>().as_ref() }.ok_or_else(|| Error::invalid("buffer is null"))
}

/// Our element type for a PJRT buffer type.
pub(crate) fn element_type(t: PJRT_Buffer_Type) -> Result<ElementType> {
    use ElementType as E;
    Ok(match t {
        PJRT_Buffer_Type::PRED => E::Pred,
        PJRT_Buffer_Type::S2 => E::I2,
        PJRT_Buffer_Type::S4 => E::I4,
        PJRT_Buffer_Type::S8 => E::I8,
        PJRT_Buffer_Type::S16 => E::I16,
        PJRT_Buffer_Type::S32 => E::I32,
        PJRT_Buffer_Type::S64 => E::I64,
        PJRT_Buffer_Type::U2 => E::U2,
        PJRT_Buffer_Type::U4 => E::U4,
        PJRT_Buffer_Type::U8 => E::U8,
        PJRT_Buffer_Type::U16 => E::U16,
        PJRT_Buffer_Type::U32 => E::U32,
        PJRT_Buffer_Type::U64 => E::U64,
        PJRT_Buffer_Type::F16 => E::F16,
        PJRT_Buffer_Type::F32 => E::F32,
        PJRT_Buffer_Type::F64 => E::F64,
        PJRT_Buffer_Type::BF16 => E::BF16,
        PJRT_Buffer_Type::C64 => E::C64,
        PJRT_Buffer_Type::C128 => E::C128,
        PJRT_Buffer_Type::F8E5M2 => E::F8E5M2,
        PJRT_Buffer_Type::F8E4M3FN => E::F8E4M3FN,
        PJRT_Buffer_Type::F8E4M3B11FNUZ => E::F8E4M3B11FNUZ,
        PJRT_Buffer_Type::F8E5M2FNUZ => E::F8E5M2FNUZ,
        PJRT_Buffer_Type::F8E4M3FNUZ => E::F8E4M3FNUZ,
        PJRT_Buffer_Type::F8E4M3 => E::F8E4M3,
        PJRT_Buffer_Type::F8E3M4 => E::F8E3M4,
        PJRT_Buffer_Type::F8E8M0FNU => E::F8E8M0FNU,
        PJRT_Buffer_Type::F4E2M1FN => E::F4E2M1FN,
        PJRT_Buffer_Type::F6E2M3FN => E::F6E2M3FN,
        PJRT_Buffer_Type::F6E3M2FN => E::F6E3M2FN,
        other => {
            return Err(Error::unimplemented(format!(
                "PJRT buffer type {} is not supported by the wgpu plugin",
                other.0
            )))
        }
    })
}

/// The PJRT buffer type of one of our element types.
pub(crate) fn pjrt_type(t: ElementType) -> Result<PJRT_Buffer_Type> {
    use ElementType as E;
    Ok(match t {
        E::Pred => PJRT_Buffer_Type::PRED,
        E::I2 => PJRT_Buffer_Type::S2,
        E::I4 => PJRT_Buffer_Type::S4,
        E::I8 => PJRT_Buffer_Type::S8,
        E::I16 => PJRT_Buffer_Type::S16,
        E::I32 => PJRT_Buffer_Type::S32,
        E::I64 => PJRT_Buffer_Type::S64,
        E::U2 => PJRT_Buffer_Type::U2,
        E::U4 => PJRT_Buffer_Type::U4,
        E::U8 => PJRT_Buffer_Type::U8,
        E::U16 => PJRT_Buffer_Type::U16,
        E::U32 => PJRT_Buffer_Type::U32,
        E::U64 => PJRT_Buffer_Type::U64,
        E::F16 => PJRT_Buffer_Type::F16,
        E::F32 => PJRT_Buffer_Type::F32,
        E::F64 => PJRT_Buffer_Type::F64,
        E::BF16 => PJRT_Buffer_Type::BF16,
        E::C64 => PJRT_Buffer_Type::C64,
        E::C128 => PJRT_Buffer_Type::C128,
        E::F8E5M2 => PJRT_Buffer_Type::F8E5M2,
        E::F8E4M3FN => PJRT_Buffer_Type::F8E4M3FN,
        E::F8E4M3B11FNUZ => PJRT_Buffer_Type::F8E4M3B11FNUZ,
        E::F8E5M2FNUZ => PJRT_Buffer_Type::F8E5M2FNUZ,
        E::F8E4M3FNUZ => PJRT_Buffer_Type::F8E4M3FNUZ,
        E::F8E4M3 => PJRT_Buffer_Type::F8E4M3,
        E::F8E3M4 => PJRT_Buffer_Type::F8E3M4,
        E::F8E8M0FNU => PJRT_Buffer_Type::F8E8M0FNU,
        E::F4E2M1FN => PJRT_Buffer_Type::F4E2M1FN,
        E::F6E2M3FN => PJRT_Buffer_Type::F6E2M3FN,
        E::F6E3M2FN => PJRT_Buffer_Type::F6E3M2FN,
        E::TF32 => {
            return Err(Error::unimplemented(
                "tf32 has no PJRT buffer type; it cannot cross the C API",
            ))
        }
    })
}

/// Checks that a caller's layout is the dense row-major one (the only one we store); `what`
/// names it in errors.
///
/// # Safety
/// `layout` is null or a valid layout whose arrays are readable during the call.
unsafe fn check_row_major(
    layout: *const PJRT_Buffer_MemoryLayout,
    rank: usize,
    what: &str,
) -> Result<()> {
    // SAFETY: per contract.
    let Some(l) = (unsafe { layout.as_ref() }) else {
        return Ok(());
    };
    if l.type_ == PJRT_Buffer_MemoryLayout_Type::Strides {
        // SAFETY: `type_` says the strides member is set.
        let s = unsafe { l.layout.strides };
        // SAFETY: per contract the strides array is readable.
        let strides = unsafe { slice(s.byte_strides, s.num_byte_strides, "byte_strides") }?;
        return Err(Error::unimplemented(format!(
            "{what}: strided layout {strides:?} is not supported; only dense row-major"
        )));
    }
    if l.type_ != PJRT_Buffer_MemoryLayout_Type::Tiled {
        return Err(Error::invalid(format!(
            "{what}: unknown layout type {}",
            l.type_.0
        )));
    }
    // SAFETY: `type_` says the tiled member is set.
    let t = unsafe { l.layout.tiled };
    // SAFETY: per contract the permutation is readable.
    let m2m = unsafe { slice(t.minor_to_major, t.minor_to_major_size, "minor_to_major") }?;
    let row_major = m2m.len() == rank
        && m2m
            .iter()
            .enumerate()
            .all(|(i, &d)| d == (rank - 1 - i) as i64);
    if !row_major || t.num_tiles > 0 {
        return Err(Error::unimplemented(format!(
            "{what}: layout minor_to_major={m2m:?} with {} tiles is not supported; only dense \
             row-major",
            t.num_tiles
        )));
    }
    Ok(())
}

/// Copies a host array with arbitrary byte strides into dense row-major bytes.
///
/// # Safety
/// Every element `sum(index[i] * byte_strides[i])` bytes from `data` is readable.
unsafe fn pack_strided(
    data: *const u8,
    dims: &[usize],
    byte_strides: &[i64],
    elem: usize,
) -> Vec<u8> {
    let count: usize = dims.iter().product();
    let mut out = Vec::with_capacity(count * elem);
    let mut index = vec![0usize; dims.len()];
    for _ in 0..count {
        let offset: i64 = index
            .iter()
            .zip(byte_strides)
            .map(|(&i, &s)| i as i64 * s)
            .sum();
        // SAFETY: per contract every element is readable at its strided offset.
        let src =
            unsafe { std::slice::from_raw_parts(data.wrapping_offset(offset as isize), elem) };
        out.extend_from_slice(src);
        for d in (0..dims.len()).rev() {
            index[d] += 1;
            if index[d] < dims[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// A validated shape: dimension sizes as `usize` and the element count, with overflow checked.
fn shape_of(dims: &[i64], dtype: ElementType) -> Result<(Vec<usize>, usize)> {
    let mut sizes = Vec::with_capacity(dims.len());
    let mut count = 1usize;
    for &d in dims {
        let d = usize::try_from(d)
            .map_err(|_| Error::invalid(format!("negative dimension in {dims:?}")))?;
        count = count
            .checked_mul(d)
            .ok_or_else(|| Error::invalid(format!("shape {dims:?} overflows")))?;
        sizes.push(d);
    }
    count
        .checked_mul(dtype.byte_size())
        .ok_or_else(|| Error::invalid(format!("shape {dims:?} overflows")))?;
    Ok((sizes, count))
}

fn from_host_buffer(a: &Args<PJRT_Client_BufferFromHostBuffer_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let client = unsafe { client_ref(client_handle) }?;
    let state = &client.state;
    let dtype = element_type(req!(a, type_)?)?;
    let (dims_ptr, num_dims) = (req!(a, dims)?, req!(a, num_dims)?);
    // SAFETY: the caller's dims array, valid during the call.
    let dims = unsafe { slice(dims_ptr, num_dims, "dims") }?.to_vec();
    let (sizes, count) = shape_of(&dims, dtype)?;
    state.check_device(get!(a, device).unwrap_or(std::ptr::null_mut()))?;
    state.check_memory(get!(a, memory).unwrap_or(std::ptr::null_mut()))?;
    let layout = get!(a, device_layout).unwrap_or(std::ptr::null_mut());
    // SAFETY: the caller's layout, valid during the call.
    unsafe {
        check_row_major(
            layout,
            dims.len(),
            "PJRT_Client_BufferFromHostBuffer device_layout",
        )
    }?;
    let elem = dtype.byte_size();
    let data = req!(a, data)?.cast::<u8>();
    let strides_ptr = get!(a, byte_strides).unwrap_or(std::ptr::null());
    let bytes: Vec<u8> = if count == 0 {
        Vec::new()
    } else if data.is_null() {
        return Err(Error::invalid(
            "PJRT_Client_BufferFromHostBuffer: data is null",
        ));
    } else {
        let dense: Vec<i64> = {
            let mut s = vec![elem as i64; sizes.len()];
            for i in (0..sizes.len().saturating_sub(1)).rev() {
                s[i] = s[i + 1] * sizes[i + 1] as i64;
            }
            s
        };
        let num_strides = get!(a, num_byte_strides).unwrap_or(0);
        // SAFETY: the caller's strides array, valid during the call.
        let strides = unsafe { slice(strides_ptr, num_strides, "byte_strides") }?;
        if strides.is_empty() || strides == dense.as_slice() {
            // SAFETY: a dense host array of `count` elements per the PJRT contract.
            unsafe { std::slice::from_raw_parts(data, count * elem) }.to_vec()
        } else if strides.len() != sizes.len() {
            return Err(Error::invalid(format!(
                "{} byte strides for a rank-{} array",
                strides.len(),
                sizes.len()
            )));
        } else {
            // SAFETY: the caller's strides describe readable elements (PJRT contract).
            unsafe { pack_strided(data, &sizes, strides, elem) }
        }
    };
    let ty = TensorType::new(dims, dtype);
    // `upload` copies the bytes before it returns, so every host-buffer semantic is met and the
    // host buffer is free at once.
    let buf = state.device.upload(&ty, &bytes)?;
    set!(a, done_with_host_buffer, into_raw_event(Event::ready()));
    set!(a, buffer, BufferObj::new(buf, state.clone())?.into_raw());
    Ok(())
}
entry!(
    PJRT_Client_BufferFromHostBuffer,
    PJRT_Client_BufferFromHostBuffer_Args,
    from_host_buffer
);

fn destroy(a: &Args<PJRT_Buffer_Destroy_Args>) -> Result<()> {
    let p = req!(a, buffer)?;
    if !p.is_null() {
        // SAFETY: a live buffer the caller gives up.
        drop(unsafe { Box::from_raw(p.cast::<BufferObj>()) });
    }
    Ok(())
}
entry!(PJRT_Buffer_Destroy, PJRT_Buffer_Destroy_Args, destroy);

fn element_type_entry(a: &Args<PJRT_Buffer_ElementType_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, type_, b.pjrt_type);
    Ok(())
}
entry!(
    PJRT_Buffer_ElementType,
    PJRT_Buffer_ElementType_Args,
    element_type_entry
);

fn dimensions(a: &Args<PJRT_Buffer_Dimensions_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, dims, b.dims.as_ptr());
    set!(a, num_dims, b.dims.len());
    Ok(())
}
entry!(
    PJRT_Buffer_Dimensions,
    PJRT_Buffer_Dimensions_Args,
    dimensions
);

fn unpadded_dimensions(a: &Args<PJRT_Buffer_UnpaddedDimensions_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, unpadded_dims, b.dims.as_ptr());
    set!(a, num_dims, b.dims.len());
    Ok(())
}
entry!(
    PJRT_Buffer_UnpaddedDimensions,
    PJRT_Buffer_UnpaddedDimensions_Args,
    unpadded_dimensions
);

fn dynamic_dimension_indices(a: &Args<PJRT_Buffer_DynamicDimensionIndices_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    unsafe { buffer_ref(buffer_handle) }?;
    static NONE: [usize; 0] = [];
    set!(a, dynamic_dim_indices, NONE.as_ptr());
    set!(a, num_dynamic_dims, 0);
    Ok(())
}
entry!(
    PJRT_Buffer_DynamicDimensionIndices,
    PJRT_Buffer_DynamicDimensionIndices_Args,
    dynamic_dimension_indices
);

fn get_memory_layout(a: &Args<PJRT_Buffer_GetMemoryLayout_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    let layout = PJRT_Buffer_MemoryLayout {
        struct_size: PJRT_Buffer_MemoryLayout::STRUCT_SIZE,
        extension_start: std::ptr::null_mut(),
        layout: PJRT_Buffer_MemoryLayout_Union {
            tiled: std::mem::ManuallyDrop::new(PJRT_Buffer_MemoryLayout_Tiled {
                struct_size: PJRT_Buffer_MemoryLayout_Tiled::STRUCT_SIZE,
                extension_start: std::ptr::null_mut(),
                minor_to_major: b.minor_to_major.as_ptr(),
                minor_to_major_size: b.minor_to_major.len(),
                tile_dims: std::ptr::null(),
                tile_dim_sizes: std::ptr::null(),
                num_tiles: 0,
            }),
        },
        type_: PJRT_Buffer_MemoryLayout_Type::Tiled,
    };
    set!(a, layout, layout);
    Ok(())
}
entry!(
    PJRT_Buffer_GetMemoryLayout,
    PJRT_Buffer_GetMemoryLayout_Args,
    get_memory_layout
);

fn on_device_size(a: &Args<PJRT_Buffer_OnDeviceSizeInBytes_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    let size = usize::try_from(b.buf.device_size())
        .map_err(|_| Error::internal("buffer size overflows usize"))?;
    set!(a, on_device_size_in_bytes, size);
    Ok(())
}
entry!(
    PJRT_Buffer_OnDeviceSizeInBytes,
    PJRT_Buffer_OnDeviceSizeInBytes_Args,
    on_device_size
);

/// `unsafe_buffer_pointer()`: not a device address (wgpu has none to give) but an identity of
/// the buffer's storage, equal exactly for buffers that share it — what JAX's callers of it
/// compare (e.g. that a no-op `convert_element_type` returns its operand, not a copy).
fn unsafe_pointer(a: &Args<PJRT_Buffer_UnsafePointer_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, buffer_pointer, b.buf.storage_id()?);
    Ok(())
}
entry!(
    PJRT_Buffer_UnsafePointer,
    PJRT_Buffer_UnsafePointer_Args,
    unsafe_pointer
);

fn device(a: &Args<PJRT_Buffer_Device_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, device, b.state.device_handle());
    Ok(())
}
entry!(PJRT_Buffer_Device, PJRT_Buffer_Device_Args, device);

fn memory(a: &Args<PJRT_Buffer_Memory_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, memory, b.state.memory_handle());
    Ok(())
}
entry!(PJRT_Buffer_Memory, PJRT_Buffer_Memory_Args, memory);

fn delete(a: &Args<PJRT_Buffer_Delete_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    b.buf.delete();
    Ok(())
}
entry!(PJRT_Buffer_Delete, PJRT_Buffer_Delete_Args, delete);

fn is_deleted(a: &Args<PJRT_Buffer_IsDeleted_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, is_deleted, b.buf.is_deleted());
    Ok(())
}
entry!(
    PJRT_Buffer_IsDeleted,
    PJRT_Buffer_IsDeleted_Args,
    is_deleted
);

fn is_on_cpu(a: &Args<PJRT_Buffer_IsOnCpu_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    unsafe { buffer_ref(buffer_handle) }?;
    set!(a, is_on_cpu, false);
    Ok(())
}
entry!(PJRT_Buffer_IsOnCpu, PJRT_Buffer_IsOnCpu_Args, is_on_cpu);

fn ready_event(a: &Args<PJRT_Buffer_ReadyEvent_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    set!(a, event, into_raw_event(b.buf.ready()));
    Ok(())
}
entry!(
    PJRT_Buffer_ReadyEvent,
    PJRT_Buffer_ReadyEvent_Args,
    ready_event
);

fn copy_to_device(a: &Args<PJRT_Buffer_CopyToDevice_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    b.state.check_device(req!(a, dst_device)?)?;
    let copy = b.buf.copy()?;
    set!(
        a,
        dst_buffer,
        BufferObj::new(copy, b.state.clone())?.into_raw()
    );
    Ok(())
}
entry!(
    PJRT_Buffer_CopyToDevice,
    PJRT_Buffer_CopyToDevice_Args,
    copy_to_device
);

fn copy_to_memory(a: &Args<PJRT_Buffer_CopyToMemory_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    b.state.check_memory(req!(a, dst_memory)?)?;
    let copy = b.buf.copy()?;
    set!(
        a,
        dst_buffer,
        BufferObj::new(copy, b.state.clone())?.into_raw()
    );
    Ok(())
}
entry!(
    PJRT_Buffer_CopyToMemory,
    PJRT_Buffer_CopyToMemory_Args,
    copy_to_memory
);

fn increase_refs(a: &Args<PJRT_Buffer_IncreaseExternalReferenceCount_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    b.external_refs.fetch_add(1, Ordering::AcqRel);
    Ok(())
}
entry!(
    PJRT_Buffer_IncreaseExternalReferenceCount,
    PJRT_Buffer_IncreaseExternalReferenceCount_Args,
    increase_refs
);

fn decrease_refs(a: &Args<PJRT_Buffer_DecreaseExternalReferenceCount_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    b.external_refs
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .map_err(|_| Error::failed_precondition("external reference count is already zero"))?;
    Ok(())
}
entry!(
    PJRT_Buffer_DecreaseExternalReferenceCount,
    PJRT_Buffer_DecreaseExternalReferenceCount_Args,
    decrease_refs
);

/// A caller's destination pointer, written once from the thread that completes a read-back.
struct HostDst(*mut u8);
// SAFETY: the PJRT contract keeps the destination alive and untouched by the caller until the
// returned event completes; we write it exactly once before completing that event.
unsafe impl Send for HostDst {}

/// Reads `range` of the buffer's host bytes into `dst` asynchronously; the event completes
/// after the copy.
fn read_into(b: &BufferObj, dst: HostDst, range: std::ops::Range<usize>) -> Event {
    let done = Event::pending();
    let d = done.clone();
    b.buf.read_to_host(move |r| {
        let dst = dst;
        let r = r.and_then(|bytes| {
            let src = bytes.get(range.clone()).ok_or_else(|| {
                Error::internal(format!(
                    "read-back of {} bytes, wanted {range:?}",
                    bytes.len()
                ))
            })?;
            if !src.is_empty() {
                // SAFETY: `dst` has room for `range.len()` bytes (checked by the caller of
                // `read_into`) and stays valid until `d` completes (PJRT contract).
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0, src.len()) };
            }
            Ok(())
        });
        d.set(r);
    });
    done
}

fn to_host_buffer(a: &Args<PJRT_Buffer_ToHostBuffer_Args>) -> Result<()> {
    let src_handle = req!(a, src)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(src_handle) }?;
    let layout = get!(a, host_layout).unwrap_or(std::ptr::null_mut());
    // SAFETY: the caller's layout, valid during the call.
    unsafe { check_row_major(layout, b.dims.len(), "PJRT_Buffer_ToHostBuffer host_layout") }?;
    let size = b.buf.ty().byte_size();
    let dst = req!(a, dst)?;
    if dst.is_null() {
        set!(a, dst_size, size);
        set!(a, event, std::ptr::null_mut());
        return Ok(());
    }
    let dst_size = req!(a, dst_size)?;
    if dst_size < size {
        return Err(Error::invalid(format!(
            "`dst_size` must be >= {size}, got {dst_size}"
        )));
    }
    let event = read_into(b, HostDst(dst.cast()), 0..size);
    set!(a, event, into_raw_event(event));
    Ok(())
}
entry!(
    PJRT_Buffer_ToHostBuffer,
    PJRT_Buffer_ToHostBuffer_Args,
    to_host_buffer
);

fn copy_raw_to_host(a: &Args<PJRT_Buffer_CopyRawToHost_Args>) -> Result<()> {
    let buffer_handle = req!(a, buffer)?;
    // SAFETY: live handle per convention.
    let b = unsafe { buffer_ref(buffer_handle) }?;
    let dst: *mut c_void = req!(a, dst)?;
    let offset =
        usize::try_from(req!(a, offset)?).map_err(|_| Error::invalid("negative offset"))?;
    let len = usize::try_from(req!(a, transfer_size)?)
        .map_err(|_| Error::invalid("negative transfer_size"))?;
    let size = b.buf.ty().byte_size();
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= size)
        .ok_or_else(|| {
            Error::out_of_range(format!(
                "raw copy of [{offset}, +{len}) from a {size}-byte buffer"
            ))
        })?;
    if dst.is_null() && len > 0 {
        return Err(Error::invalid("PJRT_Buffer_CopyRawToHost: dst is null"));
    }
    let event = read_into(b, HostDst(dst.cast()), offset..end);
    set!(a, event, into_raw_event(event));
    Ok(())
}
entry!(
    PJRT_Buffer_CopyRawToHost,
    PJRT_Buffer_CopyRawToHost_Args,
    copy_raw_to_host
);

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu_hlo::ir::types::ALL_ELEMENT_TYPES;

    #[test]
    fn element_types_round_trip() {
        for t in ALL_ELEMENT_TYPES {
            if let Ok(p) = pjrt_type(t) {
                assert_eq!(element_type(p).unwrap(), t);
            }
        }
        assert!(element_type(PJRT_Buffer_Type::TOKEN).is_err());
        assert!(element_type(PJRT_Buffer_Type(999)).is_err());
    }

    #[test]
    fn strided_pack_transposes() {
        // A 2x3 row-major i8 array read column-major (a transposed view).
        let data: [u8; 6] = [0, 1, 2, 3, 4, 5];
        // View as 3x2 with strides (1, 3): element [i][j] = data[i + 3j].
        let out = unsafe { pack_strided(data.as_ptr(), &[3, 2], &[1, 3], 1) };
        assert_eq!(out, vec![0, 3, 1, 4, 2, 5]);
    }
}
