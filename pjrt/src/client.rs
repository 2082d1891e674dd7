//! The client and what hangs off it: one device per client (the adapter wgpu picks), its
//! description, its one `"device"` memory and a topology describing the same.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use wgpu_hlo::runtime::Device;
use wgpu_hlo::{Error, Result};

use crate::abi::{entry, get, req, set, Args};
use crate::ffi::*;
use crate::named_values::{read_list, NamedValues, Value};

/// The platform name JAX registers us under.
pub const PLATFORM_NAME: &str = "wgpu";
/// The one memory kind we have.
pub const MEMORY_KIND: &str = "device";
/// Id of the memory kind (jaxlib's default memory space id).
const MEMORY_KIND_ID: i32 = 0;

/// A device description (`PJRT_DeviceDescription`).
pub(crate) struct DescriptionObj {
    id: i32,
    kind: String,
    debug_string: String,
    to_string: String,
    attributes: NamedValues,
}

/// A device (`PJRT_Device`).
pub(crate) struct DeviceObj {
    device: Arc<Device>,
    description: *mut DescriptionObj,
    memories: [*mut PJRT_Memory; 1],
    local_hardware_id: i32,
}

/// User data a framework attached to a memory: the data and its destructor.
type UserData = (usize, PJRT_UserDataDtor);

/// A memory (`PJRT_Memory`); `head` stays first so callers can reach the function table.
#[repr(C)]
pub(crate) struct MemoryObj {
    head: PJRT_Memory,
    id: i32,
    devices: [*mut PJRT_Device; 1],
    debug_string: String,
    to_string: String,
    user_data: Mutex<HashMap<usize, UserData>>,
}

/// The topology (`PJRT_TopologyDescription`): the one device of the client.
pub(crate) struct TopologyObj {
    platform_version: String,
    descriptions: [*mut PJRT_DeviceDescription; 1],
    attributes: NamedValues,
    fingerprint: u64,
}

/// Everything a client owns; buffers and executables keep it alive through an `Arc`, so the
/// handles they hand out (device, memory) stay valid even after `PJRT_Client_Destroy`.
pub(crate) struct ClientState {
    /// The runtime device.
    pub(crate) device: Arc<Device>,
    platform_version: String,
    device_obj: *mut DeviceObj,
    memory_obj: *mut MemoryObj,
    description_obj: *mut DescriptionObj,
    topology: *mut TopologyObj,
    devices: [*mut PJRT_Device; 1],
    memories: [*mut PJRT_Memory; 1],
}

// SAFETY: the raw pointers are to heap objects this state owns (created in `ClientState::new`,
// freed in `Drop`); they are only read after construction, and the objects themselves are
// either immutable or guarded by a mutex (memory user data).
unsafe impl Send for ClientState {}
// SAFETY: as above.
unsafe impl Sync for ClientState {}

/// A client (`PJRT_Client`).
pub(crate) struct Client {
    pub(crate) state: Arc<ClientState>,
}

static MEMORY_VTABLE: PJRT_Memory_FunctionTable = PJRT_Memory_FunctionTable {
    struct_size: PJRT_Memory_FunctionTable::STRUCT_SIZE,
    extension_start: std::ptr::null_mut(),
    instance_struct_size: PJRT_Memory::STRUCT_SIZE,
    get_user_data: Some(memory_get_user_data),
    set_user_data: Some(memory_set_user_data),
};

// SAFETY: immutable table whose only pointer (`extension_start`) is null.
unsafe impl Sync for PJRT_Memory_FunctionTable {}

unsafe extern "C" fn memory_get_user_data(
    memory: *mut PJRT_Memory,
    key: *const c_void,
) -> *mut c_void {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: called through our table with one of our memories.
        let Some(m) = (unsafe { memory.cast::<MemoryObj>().as_ref() }) else {
            return std::ptr::null_mut();
        };
        let map = m.user_data.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(key as usize))
            .map(|(d, _)| *d as *mut c_void)
            .unwrap_or(std::ptr::null_mut())
    });
    r.unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn memory_set_user_data(
    memory: *mut PJRT_Memory,
    key: *const c_void,
    data: *mut c_void,
    dtor: PJRT_UserDataDtor,
) {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: called through our table with one of our memories.
        let Some(m) = (unsafe { memory.cast::<MemoryObj>().as_ref() }) else {
            return;
        };
        let old = m
            .user_data
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key as usize, (data as usize, dtor));
        if let Some((d, Some(f))) = old {
            // SAFETY: the framework's destructor for the data it replaced.
            unsafe { f(d as *mut c_void) }
        }
    });
    if r.is_err() {
        log::error!("PJRT_Memory set_user_data panicked");
    }
}

impl Drop for MemoryObj {
    fn drop(&mut self) {
        let map = std::mem::take(self.user_data.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (_, (data, dtor)) in map {
            if let Some(f) = dtor {
                // SAFETY: the framework's destructor for data it attached.
                unsafe { f(data as *mut c_void) }
            }
        }
    }
}

/// Moves `v` to the heap and keeps only a raw pointer (freed by `ClientState::drop`).
fn leak<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

impl ClientState {
    fn new(device: Arc<Device>) -> Arc<ClientState> {
        let info = device.info().clone();
        // The build id makes JAX's compilation cache keys differ between builds, whose
        // serialized executables do not load in each other.
        let platform_version = format!(
            "wgpu-hlo {} (build {}); {} ({}, {}{}{})",
            env!("CARGO_PKG_VERSION"),
            wgpu_hlo::compile::serial::BUILD_ID,
            info.name,
            info.backend,
            info.driver,
            if info.driver_info.is_empty() { "" } else { " " },
            info.driver_info
        );
        let attributes = NamedValues::new(vec![
            ("backend".into(), Value::Str(info.backend.clone())),
            ("device_type".into(), Value::Str(info.device_type.clone())),
            ("adapter_name".into(), Value::Str(info.name.clone())),
            ("driver".into(), Value::Str(info.driver.clone())),
            ("driver_info".into(), Value::Str(info.driver_info.clone())),
            ("vendor_id".into(), Value::Int(info.vendor as i64)),
            ("device_id".into(), Value::Int(info.device as i64)),
        ]);
        let description_obj = leak(DescriptionObj {
            id: 0,
            kind: info.name.clone(),
            debug_string: format!("wgpu:0 ({info})"),
            to_string: format!(
                "WgpuDevice(id=0, kind={:?}, backend={})",
                info.name, info.backend
            ),
            attributes,
        });
        let memory_obj = leak(MemoryObj {
            head: PJRT_Memory {
                vtable: &MEMORY_VTABLE,
            },
            id: 0,
            devices: [std::ptr::null_mut()],
            debug_string: format!("wgpu:0 memory {MEMORY_KIND:?} on {}", info.name),
            to_string: format!("MEMORY_SPACE(id=0, kind={MEMORY_KIND})"),
            user_data: Mutex::new(HashMap::new()),
        });
        let device_obj = leak(DeviceObj {
            device: device.clone(),
            description: description_obj,
            memories: [memory_obj.cast()],
            local_hardware_id: 0,
        });
        // SAFETY: just allocated above and not shared yet.
        unsafe { (*memory_obj).devices = [device_obj.cast()] };
        let fingerprint = fnv(platform_version.as_bytes());
        let topology = leak(TopologyObj {
            platform_version: platform_version.clone(),
            descriptions: [description_obj.cast()],
            attributes: NamedValues::new(Vec::new()),
            fingerprint,
        });
        Arc::new(ClientState {
            device,
            platform_version,
            device_obj,
            memory_obj,
            description_obj,
            topology,
            devices: [device_obj.cast()],
            memories: [memory_obj.cast()],
        })
    }

    /// The client's device handle.
    pub(crate) fn device_handle(&self) -> *mut PJRT_Device {
        self.devices[0]
    }

    /// The client's memory handle.
    pub(crate) fn memory_handle(&self) -> *mut PJRT_Memory {
        self.memories[0]
    }

    /// Checks that a caller's device handle is ours (null means the default device).
    pub(crate) fn check_device(&self, d: *mut PJRT_Device) -> Result<()> {
        if d.is_null() || d == self.devices[0] {
            Ok(())
        } else {
            Err(Error::invalid("device does not belong to this wgpu client"))
        }
    }

    /// Checks that a caller's memory handle is ours (null means the default memory).
    pub(crate) fn check_memory(&self, m: *mut PJRT_Memory) -> Result<()> {
        if m.is_null() || m == self.memories[0] {
            Ok(())
        } else {
            Err(Error::invalid("memory does not belong to this wgpu client"))
        }
    }
}

impl Drop for ClientState {
    fn drop(&mut self) {
        // SAFETY: allocated by `leak` in `new`, owned solely by this state, freed once here.
        unsafe {
            drop(Box::from_raw(self.topology));
            drop(Box::from_raw(self.device_obj));
            drop(Box::from_raw(self.memory_obj));
            drop(Box::from_raw(self.description_obj));
        }
    }
}

/// FNV-1a, for stable fingerprints.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The client behind a caller's handle.
///
/// # Safety
/// `p` is null or a live client handle.
pub(crate) unsafe fn client_ref<'a>(p: *mut PJRT_Client) -> Result<&'a Client> {
    // SAFETY: per contract.
    unsafe { p.cast::<Client>().as_ref() }.ok_or_else(|| Error::invalid("client is null"))
}

/// The device behind a caller's handle.
///
/// # Safety
/// `p` is null or a live device handle.
unsafe fn device_ref<'a>(p: *mut PJRT_Device) -> Result<&'a DeviceObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<DeviceObj>().as_ref() }.ok_or_else(|| Error::invalid("device is null"))
}

/// The description behind a caller's handle.
///
/// # Safety
/// `p` is null or a live description handle.
unsafe fn description_ref<'a>(p: *mut PJRT_DeviceDescription) -> Result<&'a DescriptionObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<DescriptionObj>().as_ref() }
        .ok_or_else(|| Error::invalid("device description is null"))
}

/// The memory behind a caller's handle.
///
/// # Safety
/// `p` is null or a live memory handle.
unsafe fn memory_ref<'a>(p: *mut PJRT_Memory) -> Result<&'a MemoryObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<MemoryObj>().as_ref() }.ok_or_else(|| Error::invalid("memory is null"))
}

/// The topology behind a caller's handle.
///
/// # Safety
/// `p` is null or a live topology handle.
unsafe fn topology_ref<'a>(p: *const PJRT_TopologyDescription) -> Result<&'a TopologyObj> {
    // SAFETY: per contract.
    unsafe { p.cast::<TopologyObj>().as_ref() }.ok_or_else(|| Error::invalid("topology is null"))
}

// ---------------------------------- client -----------------------------------

fn create(a: &Args<PJRT_Client_Create_Args>) -> Result<()> {
    crate::init_logging();
    let list = get!(a, create_options).unwrap_or(std::ptr::null());
    let len = get!(a, num_options).unwrap_or(0);
    // SAFETY: the caller's option array, valid during the call.
    let options = unsafe { read_list(list, len) }?;
    for (name, value) in &options {
        log::info!("ignoring client option {name} = {value:?}");
    }
    let device = Device::open()?;
    log::info!("wgpu client on {}", device.info());
    crate::floor::remember_device(&device);
    let client = Box::new(Client {
        state: ClientState::new(device),
    });
    set!(a, client, Box::into_raw(client).cast());
    Ok(())
}
entry!(
    PJRT_Client_Create,
    PJRT_Client_Create_Args,
    std::mem::offset_of!(PJRT_Client_Create_Args, kv_try_get_callback),
    create
);

fn destroy(a: &Args<PJRT_Client_Destroy_Args>) -> Result<()> {
    let p = req!(a, client)?;
    if !p.is_null() {
        // SAFETY: a live client the caller gives up.
        drop(unsafe { Box::from_raw(p.cast::<Client>()) });
    }
    Ok(())
}
entry!(PJRT_Client_Destroy, PJRT_Client_Destroy_Args, destroy);

fn platform_name(a: &Args<PJRT_Client_PlatformName_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    unsafe { client_ref(client_handle) }?;
    set!(a, platform_name, PLATFORM_NAME.as_ptr().cast());
    set!(a, platform_name_size, PLATFORM_NAME.len());
    Ok(())
}
entry!(
    PJRT_Client_PlatformName,
    PJRT_Client_PlatformName_Args,
    platform_name
);

fn process_index(a: &Args<PJRT_Client_ProcessIndex_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    unsafe { client_ref(client_handle) }?;
    set!(a, process_index, 0);
    Ok(())
}
entry!(
    PJRT_Client_ProcessIndex,
    PJRT_Client_ProcessIndex_Args,
    process_index
);

fn platform_version(a: &Args<PJRT_Client_PlatformVersion_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    set!(
        a,
        platform_version,
        c.state.platform_version.as_ptr().cast()
    );
    set!(a, platform_version_size, c.state.platform_version.len());
    Ok(())
}
entry!(
    PJRT_Client_PlatformVersion,
    PJRT_Client_PlatformVersion_Args,
    platform_version
);

fn topology_description(a: &Args<PJRT_Client_TopologyDescription_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    set!(a, topology, c.state.topology.cast());
    Ok(())
}
entry!(
    PJRT_Client_TopologyDescription,
    PJRT_Client_TopologyDescription_Args,
    topology_description
);

fn devices(a: &Args<PJRT_Client_Devices_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    set!(a, devices, c.state.devices.as_ptr());
    set!(a, num_devices, c.state.devices.len());
    Ok(())
}
entry!(PJRT_Client_Devices, PJRT_Client_Devices_Args, devices);

fn addressable_devices(a: &Args<PJRT_Client_AddressableDevices_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    set!(a, addressable_devices, c.state.devices.as_ptr());
    set!(a, num_addressable_devices, c.state.devices.len());
    Ok(())
}
entry!(
    PJRT_Client_AddressableDevices,
    PJRT_Client_AddressableDevices_Args,
    addressable_devices
);

fn lookup_device(a: &Args<PJRT_Client_LookupDevice_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    let id = req!(a, id)?;
    if id != 0 {
        return Err(Error::invalid(format!(
            "no device with id {id}: the wgpu client has one device, id 0"
        )));
    }
    set!(a, device, c.state.device_handle());
    Ok(())
}
entry!(
    PJRT_Client_LookupDevice,
    PJRT_Client_LookupDevice_Args,
    lookup_device
);

fn lookup_addressable_device(a: &Args<PJRT_Client_LookupAddressableDevice_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    let id = req!(a, local_hardware_id)?;
    if id != 0 {
        return Err(Error::invalid(format!(
            "no addressable device with local hardware id {id}: the wgpu client has one, id 0"
        )));
    }
    set!(a, addressable_device, c.state.device_handle());
    Ok(())
}
entry!(
    PJRT_Client_LookupAddressableDevice,
    PJRT_Client_LookupAddressableDevice_Args,
    lookup_addressable_device
);

fn addressable_memories(a: &Args<PJRT_Client_AddressableMemories_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    let c = unsafe { client_ref(client_handle) }?;
    set!(a, addressable_memories, c.state.memories.as_ptr());
    set!(a, num_addressable_memories, c.state.memories.len());
    Ok(())
}
entry!(
    PJRT_Client_AddressableMemories,
    PJRT_Client_AddressableMemories_Args,
    addressable_memories
);

fn default_device_assignment(a: &Args<PJRT_Client_DefaultDeviceAssignment_Args>) -> Result<()> {
    let client_handle = req!(a, client)?;
    // SAFETY: live handle per convention.
    unsafe { client_ref(client_handle) }?;
    let replicas = req!(a, num_replicas)?;
    let partitions = req!(a, num_partitions)?;
    if replicas != 1 || partitions != 1 {
        return Err(Error::unimplemented(format!(
            "the wgpu client has one device; {replicas} replicas x {partitions} partitions \
             need more"
        )));
    }
    let size = req!(a, default_assignment_size)?;
    let out = req!(a, default_assignment)?;
    if size < 1 || out.is_null() {
        return Err(Error::invalid("default_assignment needs room for 1 entry"));
    }
    // SAFETY: the caller's array of `size >= 1` ints.
    unsafe { *out = 0 };
    Ok(())
}
entry!(
    PJRT_Client_DefaultDeviceAssignment,
    PJRT_Client_DefaultDeviceAssignment_Args,
    default_device_assignment
);

// ------------------------------ device descriptions ------------------------------

fn description_id(a: &Args<PJRT_DeviceDescription_Id_Args>) -> Result<()> {
    let device_description_handle = req!(a, device_description)?;
    // SAFETY: live handle per convention.
    let d = unsafe { description_ref(device_description_handle) }?;
    set!(a, id, d.id);
    Ok(())
}
entry!(
    PJRT_DeviceDescription_Id,
    PJRT_DeviceDescription_Id_Args,
    description_id
);

fn description_process_index(a: &Args<PJRT_DeviceDescription_ProcessIndex_Args>) -> Result<()> {
    let device_description_handle = req!(a, device_description)?;
    // SAFETY: live handle per convention.
    unsafe { description_ref(device_description_handle) }?;
    set!(a, process_index, 0);
    Ok(())
}
entry!(
    PJRT_DeviceDescription_ProcessIndex,
    PJRT_DeviceDescription_ProcessIndex_Args,
    description_process_index
);

fn description_attributes(a: &Args<PJRT_DeviceDescription_Attributes_Args>) -> Result<()> {
    let device_description_handle = req!(a, device_description)?;
    // SAFETY: live handle per convention.
    let d = unsafe { description_ref(device_description_handle) }?;
    set!(a, num_attributes, d.attributes.len());
    set!(a, attributes, d.attributes.as_ptr());
    Ok(())
}
entry!(
    PJRT_DeviceDescription_Attributes,
    PJRT_DeviceDescription_Attributes_Args,
    description_attributes
);

fn description_kind(a: &Args<PJRT_DeviceDescription_Kind_Args>) -> Result<()> {
    let device_description_handle = req!(a, device_description)?;
    // SAFETY: live handle per convention.
    let d = unsafe { description_ref(device_description_handle) }?;
    set!(a, device_kind, d.kind.as_ptr().cast());
    set!(a, device_kind_size, d.kind.len());
    Ok(())
}
entry!(
    PJRT_DeviceDescription_Kind,
    PJRT_DeviceDescription_Kind_Args,
    description_kind
);

fn description_debug_string(a: &Args<PJRT_DeviceDescription_DebugString_Args>) -> Result<()> {
    let device_description_handle = req!(a, device_description)?;
    // SAFETY: live handle per convention.
    let d = unsafe { description_ref(device_description_handle) }?;
    set!(a, debug_string, d.debug_string.as_ptr().cast());
    set!(a, debug_string_size, d.debug_string.len());
    Ok(())
}
entry!(
    PJRT_DeviceDescription_DebugString,
    PJRT_DeviceDescription_DebugString_Args,
    description_debug_string
);

fn description_to_string(a: &Args<PJRT_DeviceDescription_ToString_Args>) -> Result<()> {
    let device_description_handle = req!(a, device_description)?;
    // SAFETY: live handle per convention.
    let d = unsafe { description_ref(device_description_handle) }?;
    set!(a, to_string, d.to_string.as_ptr().cast());
    set!(a, to_string_size, d.to_string.len());
    Ok(())
}
entry!(
    PJRT_DeviceDescription_ToString,
    PJRT_DeviceDescription_ToString_Args,
    description_to_string
);

// ---------------------------------- devices ----------------------------------

fn device_get_description(a: &Args<PJRT_Device_GetDescription_Args>) -> Result<()> {
    let device_handle = req!(a, device)?;
    // SAFETY: live handle per convention.
    let d = unsafe { device_ref(device_handle) }?;
    set!(a, device_description, d.description.cast());
    Ok(())
}
entry!(
    PJRT_Device_GetDescription,
    PJRT_Device_GetDescription_Args,
    device_get_description
);

fn device_is_addressable(a: &Args<PJRT_Device_IsAddressable_Args>) -> Result<()> {
    let device_handle = req!(a, device)?;
    // SAFETY: live handle per convention.
    unsafe { device_ref(device_handle) }?;
    set!(a, is_addressable, true);
    Ok(())
}
entry!(
    PJRT_Device_IsAddressable,
    PJRT_Device_IsAddressable_Args,
    device_is_addressable
);

fn device_local_hardware_id(a: &Args<PJRT_Device_LocalHardwareId_Args>) -> Result<()> {
    let device_handle = req!(a, device)?;
    // SAFETY: live handle per convention.
    let d = unsafe { device_ref(device_handle) }?;
    set!(a, local_hardware_id, d.local_hardware_id);
    Ok(())
}
entry!(
    PJRT_Device_LocalHardwareId,
    PJRT_Device_LocalHardwareId_Args,
    device_local_hardware_id
);

fn device_addressable_memories(a: &Args<PJRT_Device_AddressableMemories_Args>) -> Result<()> {
    let device_handle = req!(a, device)?;
    // SAFETY: live handle per convention.
    let d = unsafe { device_ref(device_handle) }?;
    set!(a, memories, d.memories.as_ptr());
    set!(a, num_memories, d.memories.len());
    Ok(())
}
entry!(
    PJRT_Device_AddressableMemories,
    PJRT_Device_AddressableMemories_Args,
    device_addressable_memories
);

fn device_default_memory(a: &Args<PJRT_Device_DefaultMemory_Args>) -> Result<()> {
    let device_handle = req!(a, device)?;
    // SAFETY: live handle per convention.
    let d = unsafe { device_ref(device_handle) }?;
    set!(a, memory, d.memories[0]);
    Ok(())
}
entry!(
    PJRT_Device_DefaultMemory,
    PJRT_Device_DefaultMemory_Args,
    device_default_memory
);

fn device_memory_stats(a: &Args<PJRT_Device_MemoryStats_Args>) -> Result<()> {
    let device = req!(a, device)?;
    // SAFETY: live handle per convention.
    let stats = unsafe { device_ref(device) }?.device.memory_stats();
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    set!(a, bytes_in_use, clamp(stats.bytes_in_use));
    set!(a, peak_bytes_in_use, clamp(stats.peak_bytes_in_use));
    set!(a, peak_bytes_in_use_is_set, true);
    set!(a, num_allocs, clamp(stats.num_allocs));
    set!(a, num_allocs_is_set, true);
    set!(a, largest_alloc_size, clamp(stats.largest_alloc_size));
    set!(a, largest_alloc_size_is_set, true);
    for_each_unset_stat(a);
    Ok(())
}
entry!(
    PJRT_Device_MemoryStats,
    PJRT_Device_MemoryStats_Args,
    std::mem::offset_of!(PJRT_Device_MemoryStats_Args, bytes_limit),
    device_memory_stats
);

/// Marks the statistics we do not track as unset.
fn for_each_unset_stat(a: &Args<PJRT_Device_MemoryStats_Args>) {
    set!(a, bytes_limit_is_set, false);
    set!(a, bytes_reserved_is_set, false);
    set!(a, peak_bytes_reserved_is_set, false);
    set!(a, bytes_reservable_limit_is_set, false);
    set!(a, largest_free_block_bytes_is_set, false);
    set!(a, pool_bytes_is_set, false);
    set!(a, peak_pool_bytes_is_set, false);
    set!(a, peak_allocated_bytes_is_set, false);
}

unsafe extern "C" fn attributes_deleter(_attributes: *mut PJRT_Device_Attributes) {
    // The attribute list belongs to the device description; nothing to free.
}

fn device_get_attributes(a: &Args<PJRT_Device_GetAttributes_Args>) -> Result<()> {
    let device_handle = req!(a, device)?;
    // SAFETY: live handle per convention.
    let d = unsafe { device_ref(device_handle) }?;
    // SAFETY: a device's description lives as long as the device.
    let desc = unsafe { description_ref(d.description.cast()) }?;
    set!(a, attributes, desc.attributes.as_ptr());
    set!(a, num_attributes, desc.attributes.len());
    set!(a, device_attributes, std::ptr::null_mut());
    let deleter: unsafe extern "C" fn(*mut PJRT_Device_Attributes) = attributes_deleter;
    set!(a, attributes_deleter, Some(deleter));
    Ok(())
}
entry!(
    PJRT_Device_GetAttributes,
    PJRT_Device_GetAttributes_Args,
    device_get_attributes
);

// ---------------------------------- memories ----------------------------------

fn memory_id(a: &Args<PJRT_Memory_Id_Args>) -> Result<()> {
    let memory_handle = req!(a, memory)?;
    // SAFETY: live handle per convention.
    let m = unsafe { memory_ref(memory_handle) }?;
    set!(a, id, m.id);
    Ok(())
}
entry!(PJRT_Memory_Id, PJRT_Memory_Id_Args, memory_id);

fn memory_kind(a: &Args<PJRT_Memory_Kind_Args>) -> Result<()> {
    let memory_handle = req!(a, memory)?;
    // SAFETY: live handle per convention.
    unsafe { memory_ref(memory_handle) }?;
    set!(a, kind, MEMORY_KIND.as_ptr().cast());
    set!(a, kind_size, MEMORY_KIND.len());
    Ok(())
}
entry!(PJRT_Memory_Kind, PJRT_Memory_Kind_Args, memory_kind);

fn memory_kind_id(a: &Args<PJRT_Memory_Kind_Id_Args>) -> Result<()> {
    let memory_handle = req!(a, memory)?;
    // SAFETY: live handle per convention.
    unsafe { memory_ref(memory_handle) }?;
    set!(a, kind_id, MEMORY_KIND_ID);
    Ok(())
}
entry!(
    PJRT_Memory_Kind_Id,
    PJRT_Memory_Kind_Id_Args,
    memory_kind_id
);

fn memory_debug_string(a: &Args<PJRT_Memory_DebugString_Args>) -> Result<()> {
    let memory_handle = req!(a, memory)?;
    // SAFETY: live handle per convention.
    let m = unsafe { memory_ref(memory_handle) }?;
    set!(a, debug_string, m.debug_string.as_ptr().cast());
    set!(a, debug_string_size, m.debug_string.len());
    Ok(())
}
entry!(
    PJRT_Memory_DebugString,
    PJRT_Memory_DebugString_Args,
    memory_debug_string
);

fn memory_to_string(a: &Args<PJRT_Memory_ToString_Args>) -> Result<()> {
    let memory_handle = req!(a, memory)?;
    // SAFETY: live handle per convention.
    let m = unsafe { memory_ref(memory_handle) }?;
    set!(a, to_string, m.to_string.as_ptr().cast());
    set!(a, to_string_size, m.to_string.len());
    Ok(())
}
entry!(
    PJRT_Memory_ToString,
    PJRT_Memory_ToString_Args,
    memory_to_string
);

fn memory_addressable_by_devices(a: &Args<PJRT_Memory_AddressableByDevices_Args>) -> Result<()> {
    let memory_handle = req!(a, memory)?;
    // SAFETY: live handle per convention.
    let m = unsafe { memory_ref(memory_handle) }?;
    set!(a, devices, m.devices.as_ptr());
    set!(a, num_devices, m.devices.len());
    Ok(())
}
entry!(
    PJRT_Memory_AddressableByDevices,
    PJRT_Memory_AddressableByDevices_Args,
    memory_addressable_by_devices
);

// --------------------------------- topology ---------------------------------

fn topology_destroy(a: &Args<PJRT_TopologyDescription_Destroy_Args>) -> Result<()> {
    // Our only topologies belong to their clients (`PJRT_Client_TopologyDescription`), which
    // free them; there is nothing for a caller to destroy.
    // SAFETY: live handle per convention (or null).
    let p = req!(a, topology)?;
    if !p.is_null() {
        unsafe { topology_ref(p) }?;
    }
    Ok(())
}
entry!(
    PJRT_TopologyDescription_Destroy,
    PJRT_TopologyDescription_Destroy_Args,
    topology_destroy
);

fn topology_platform_name(a: &Args<PJRT_TopologyDescription_PlatformName_Args>) -> Result<()> {
    let topology_handle = req!(a, topology)?;
    // SAFETY: live handle per convention.
    unsafe { topology_ref(topology_handle) }?;
    set!(a, platform_name, PLATFORM_NAME.as_ptr().cast());
    set!(a, platform_name_size, PLATFORM_NAME.len());
    Ok(())
}
entry!(
    PJRT_TopologyDescription_PlatformName,
    PJRT_TopologyDescription_PlatformName_Args,
    topology_platform_name
);

fn topology_platform_version(
    a: &Args<PJRT_TopologyDescription_PlatformVersion_Args>,
) -> Result<()> {
    let topology_handle = req!(a, topology)?;
    // SAFETY: live handle per convention.
    let t = unsafe { topology_ref(topology_handle) }?;
    set!(a, platform_version, t.platform_version.as_ptr().cast());
    set!(a, platform_version_size, t.platform_version.len());
    Ok(())
}
entry!(
    PJRT_TopologyDescription_PlatformVersion,
    PJRT_TopologyDescription_PlatformVersion_Args,
    topology_platform_version
);

fn topology_device_descriptions(
    a: &Args<PJRT_TopologyDescription_GetDeviceDescriptions_Args>,
) -> Result<()> {
    let topology_handle = req!(a, topology)?;
    // SAFETY: live handle per convention.
    let t = unsafe { topology_ref(topology_handle) }?;
    set!(a, descriptions, t.descriptions.as_ptr());
    set!(a, num_descriptions, t.descriptions.len());
    Ok(())
}
entry!(
    PJRT_TopologyDescription_GetDeviceDescriptions,
    PJRT_TopologyDescription_GetDeviceDescriptions_Args,
    topology_device_descriptions
);

fn topology_attributes(a: &Args<PJRT_TopologyDescription_Attributes_Args>) -> Result<()> {
    let topology_handle = req!(a, topology)?;
    // SAFETY: live handle per convention.
    let t = unsafe { topology_ref(topology_handle) }?;
    set!(a, attributes, t.attributes.as_ptr());
    set!(a, num_attributes, t.attributes.len());
    Ok(())
}
entry!(
    PJRT_TopologyDescription_Attributes,
    PJRT_TopologyDescription_Attributes_Args,
    topology_attributes
);

fn topology_fingerprint(a: &Args<PJRT_TopologyDescription_Fingerprint_Args>) -> Result<()> {
    let topology_handle = req!(a, topology)?;
    // SAFETY: live handle per convention.
    let t = unsafe { topology_ref(topology_handle) }?;
    set!(a, fingerprint, t.fingerprint);
    Ok(())
}
entry!(
    PJRT_TopologyDescription_Fingerprint,
    PJRT_TopologyDescription_Fingerprint_Args,
    topology_fingerprint
);
