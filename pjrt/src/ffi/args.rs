//! The `*_Args` structs of the entry points this plugin implements, in header field order.
//! Each carries its header `STRUCT_SIZE`, checked at compile time.

use std::ffi::{c_char, c_int, c_void};

use super::base::*;
use super::enums::*;
use super::pjrt_struct;

/// Shorthand for the extension chain pointer every args struct has second.
type Ext = *mut PJRT_Extension_Base;

// ---------------------------------- errors -----------------------------------

pjrt_struct!(
    /// `PJRT_Error_Destroy_Args`.
    PJRT_Error_Destroy_Args = 24 { struct_size: usize, extension_start: Ext, error: *mut PJRT_Error }
);
pjrt_struct!(
    /// `PJRT_Error_Message_Args`.
    PJRT_Error_Message_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        error: *const PJRT_Error,
        message: *const c_char,
        message_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Error_GetCode_Args`.
    PJRT_Error_GetCode_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        error: *const PJRT_Error,
        code: PJRT_Error_Code,
    }
);
pjrt_struct!(
    /// `PJRT_Error_ForEachPayload_Args`.
    PJRT_Error_ForEachPayload_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        error: *const PJRT_Error,
        visitor: PJRT_Error_PayloadVisitor,
        user_arg: *mut c_void,
    }
);

// ---------------------------------- plugin -----------------------------------

pjrt_struct!(
    /// `PJRT_Plugin_Initialize_Args`.
    PJRT_Plugin_Initialize_Args = 16 { struct_size: usize, extension_start: Ext }
);
pjrt_struct!(
    /// `PJRT_Plugin_Attributes_Args`.
    PJRT_Plugin_Attributes_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        attributes: *const PJRT_NamedValue,
        num_attributes: usize,
    }
);

// ---------------------------------- events -----------------------------------

pjrt_struct!(
    /// `PJRT_Event_Destroy_Args`.
    PJRT_Event_Destroy_Args = 24 { struct_size: usize, extension_start: Ext, event: *mut PJRT_Event }
);
pjrt_struct!(
    /// `PJRT_Event_IsReady_Args`.
    PJRT_Event_IsReady_Args = 25 {
        struct_size: usize,
        extension_start: Ext,
        event: *mut PJRT_Event,
        is_ready: bool,
    }
);
pjrt_struct!(
    /// `PJRT_Event_Error_Args`.
    PJRT_Event_Error_Args = 24 { struct_size: usize, extension_start: Ext, event: *mut PJRT_Event }
);
pjrt_struct!(
    /// `PJRT_Event_Await_Args`.
    PJRT_Event_Await_Args = 24 { struct_size: usize, extension_start: Ext, event: *mut PJRT_Event }
);
pjrt_struct!(
    /// `PJRT_Event_OnReady_Args`.
    PJRT_Event_OnReady_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        event: *mut PJRT_Event,
        callback: PJRT_Event_OnReadyCallback,
        user_arg: *mut c_void,
    }
);
pjrt_struct!(
    /// `PJRT_Event_Create_Args`.
    PJRT_Event_Create_Args = 24 { struct_size: usize, extension_start: Ext, event: *mut PJRT_Event }
);
pjrt_struct!(
    /// `PJRT_Event_Set_Args`.
    PJRT_Event_Set_Args = 48 {
        struct_size: usize,
        extension_start: Ext,
        event: *mut PJRT_Event,
        error_code: PJRT_Error_Code,
        error_message: *const c_char,
        error_message_size: usize,
    }
);

// ---------------------------------- client -----------------------------------

pjrt_struct!(
    /// `PJRT_Client_Create_Args`.
    PJRT_Client_Create_Args = 88 {
        struct_size: usize,
        extension_start: Ext,
        create_options: *const PJRT_NamedValue,
        num_options: usize,
        kv_get_callback: *mut c_void,
        kv_get_user_arg: *mut c_void,
        kv_put_callback: *mut c_void,
        kv_put_user_arg: *mut c_void,
        client: *mut PJRT_Client,
        kv_try_get_callback: *mut c_void,
        kv_try_get_user_arg: *mut c_void,
    }
);
pjrt_struct!(
    /// `PJRT_Client_Destroy_Args`.
    PJRT_Client_Destroy_Args = 24 { struct_size: usize, extension_start: Ext, client: *mut PJRT_Client }
);
pjrt_struct!(
    /// `PJRT_Client_PlatformName_Args`.
    PJRT_Client_PlatformName_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        platform_name: *const c_char,
        platform_name_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Client_ProcessIndex_Args`.
    PJRT_Client_ProcessIndex_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        process_index: c_int,
    }
);
pjrt_struct!(
    /// `PJRT_Client_PlatformVersion_Args`.
    PJRT_Client_PlatformVersion_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        platform_version: *const c_char,
        platform_version_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Client_TopologyDescription_Args`.
    PJRT_Client_TopologyDescription_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        topology: *mut PJRT_TopologyDescription,
    }
);
pjrt_struct!(
    /// `PJRT_Client_Devices_Args` (also the layout of `AddressableDevices`).
    PJRT_Client_Devices_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        devices: *const *mut PJRT_Device,
        num_devices: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Client_AddressableDevices_Args`.
    PJRT_Client_AddressableDevices_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        addressable_devices: *const *mut PJRT_Device,
        num_addressable_devices: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Client_LookupDevice_Args`.
    PJRT_Client_LookupDevice_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        id: c_int,
        device: *mut PJRT_Device,
    }
);
pjrt_struct!(
    /// `PJRT_Client_LookupAddressableDevice_Args`.
    PJRT_Client_LookupAddressableDevice_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        local_hardware_id: c_int,
        addressable_device: *mut PJRT_Device,
    }
);
pjrt_struct!(
    /// `PJRT_Client_AddressableMemories_Args`.
    PJRT_Client_AddressableMemories_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        addressable_memories: *const *mut PJRT_Memory,
        num_addressable_memories: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Client_Compile_Args`.
    PJRT_Client_Compile_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        program: *const PJRT_Program,
        compile_options: *const c_char,
        compile_options_size: usize,
        executable: *mut PJRT_LoadedExecutable,
    }
);
pjrt_struct!(
    /// `PJRT_Client_Load_Args`.
    PJRT_Client_Load_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        executable: *mut PJRT_Executable,
        compile_options: *const c_char,
        compile_options_size: usize,
        loaded_executable: *mut PJRT_LoadedExecutable,
    }
);
pjrt_struct!(
    /// `PJRT_Client_DefaultDeviceAssignment_Args`.
    PJRT_Client_DefaultDeviceAssignment_Args = 48 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        num_replicas: c_int,
        num_partitions: c_int,
        default_assignment_size: usize,
        default_assignment: *mut c_int,
    }
);
pjrt_struct!(
    /// `PJRT_Client_BufferFromHostBuffer_Args`.
    PJRT_Client_BufferFromHostBuffer_Args = 120 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        data: *const c_void,
        type_: PJRT_Buffer_Type,
        dims: *const i64,
        num_dims: usize,
        byte_strides: *const i64,
        num_byte_strides: usize,
        host_buffer_semantics: PJRT_HostBufferSemantics,
        device: *mut PJRT_Device,
        memory: *mut PJRT_Memory,
        device_layout: *mut PJRT_Buffer_MemoryLayout,
        done_with_host_buffer: *mut PJRT_Event,
        buffer: *mut PJRT_Buffer,
    }
);
pjrt_struct!(
    /// `PJRT_Compile_Args` (ahead-of-time compile against a topology).
    PJRT_Compile_Args = 64 {
        struct_size: usize,
        extension_start: Ext,
        topology: *const PJRT_TopologyDescription,
        program: *const PJRT_Program,
        compile_options: *const c_char,
        compile_options_size: usize,
        client: *mut PJRT_Client,
        executable: *mut PJRT_Executable,
    }
);

// ------------------------------ device descriptions ------------------------------

pjrt_struct!(
    /// `PJRT_DeviceDescription_Id_Args` (also the layout of `ProcessIndex`).
    PJRT_DeviceDescription_Id_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        device_description: *mut PJRT_DeviceDescription,
        id: c_int,
    }
);
pjrt_struct!(
    /// `PJRT_DeviceDescription_ProcessIndex_Args`.
    PJRT_DeviceDescription_ProcessIndex_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        device_description: *mut PJRT_DeviceDescription,
        process_index: c_int,
    }
);
pjrt_struct!(
    /// `PJRT_DeviceDescription_Attributes_Args`.
    PJRT_DeviceDescription_Attributes_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        device_description: *mut PJRT_DeviceDescription,
        num_attributes: usize,
        attributes: *const PJRT_NamedValue,
    }
);
pjrt_struct!(
    /// `PJRT_DeviceDescription_Kind_Args`.
    PJRT_DeviceDescription_Kind_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        device_description: *mut PJRT_DeviceDescription,
        device_kind: *const c_char,
        device_kind_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_DeviceDescription_DebugString_Args`.
    PJRT_DeviceDescription_DebugString_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        device_description: *mut PJRT_DeviceDescription,
        debug_string: *const c_char,
        debug_string_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_DeviceDescription_ToString_Args`.
    PJRT_DeviceDescription_ToString_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        device_description: *mut PJRT_DeviceDescription,
        to_string: *const c_char,
        to_string_size: usize,
    }
);

// ---------------------------------- devices ----------------------------------

pjrt_struct!(
    /// `PJRT_Device_GetDescription_Args`.
    PJRT_Device_GetDescription_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        device_description: *mut PJRT_DeviceDescription,
    }
);
pjrt_struct!(
    /// `PJRT_Device_IsAddressable_Args`.
    PJRT_Device_IsAddressable_Args = 25 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        is_addressable: bool,
    }
);
pjrt_struct!(
    /// `PJRT_Device_LocalHardwareId_Args`.
    PJRT_Device_LocalHardwareId_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        local_hardware_id: c_int,
    }
);
pjrt_struct!(
    /// `PJRT_Device_AddressableMemories_Args`.
    PJRT_Device_AddressableMemories_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        memories: *const *mut PJRT_Memory,
        num_memories: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Device_DefaultMemory_Args`.
    PJRT_Device_DefaultMemory_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        memory: *mut PJRT_Memory,
    }
);
pjrt_struct!(
    /// `PJRT_Device_MemoryStats_Args`: every statistic with an `_is_set` flag after it.
    PJRT_Device_MemoryStats_Args = 201 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        bytes_in_use: i64,
        peak_bytes_in_use: i64,
        peak_bytes_in_use_is_set: bool,
        num_allocs: i64,
        num_allocs_is_set: bool,
        largest_alloc_size: i64,
        largest_alloc_size_is_set: bool,
        bytes_limit: i64,
        bytes_limit_is_set: bool,
        bytes_reserved: i64,
        bytes_reserved_is_set: bool,
        peak_bytes_reserved: i64,
        peak_bytes_reserved_is_set: bool,
        bytes_reservable_limit: i64,
        bytes_reservable_limit_is_set: bool,
        largest_free_block_bytes: i64,
        largest_free_block_bytes_is_set: bool,
        pool_bytes: i64,
        pool_bytes_is_set: bool,
        peak_pool_bytes: i64,
        peak_pool_bytes_is_set: bool,
        peak_allocated_bytes: i64,
        peak_allocated_bytes_is_set: bool,
    }
);
pjrt_struct!(
    /// `PJRT_Device_GetAttributes_Args` (0.92).
    PJRT_Device_GetAttributes_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        device: *mut PJRT_Device,
        attributes: *const PJRT_NamedValue,
        num_attributes: usize,
        device_attributes: *mut PJRT_Device_Attributes,
        attributes_deleter: Option<unsafe extern "C" fn(attributes: *mut PJRT_Device_Attributes)>,
    }
);

// ---------------------------------- memories ----------------------------------

pjrt_struct!(
    /// `PJRT_Memory_Id_Args`.
    PJRT_Memory_Id_Args = 28 { struct_size: usize, extension_start: Ext, memory: *mut PJRT_Memory, id: c_int }
);
pjrt_struct!(
    /// `PJRT_Memory_Kind_Args`.
    PJRT_Memory_Kind_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        memory: *mut PJRT_Memory,
        kind: *const c_char,
        kind_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Memory_Kind_Id_Args`.
    PJRT_Memory_Kind_Id_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        memory: *mut PJRT_Memory,
        kind_id: c_int,
    }
);
pjrt_struct!(
    /// `PJRT_Memory_DebugString_Args` (also the layout of `ToString`).
    PJRT_Memory_DebugString_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        memory: *mut PJRT_Memory,
        debug_string: *const c_char,
        debug_string_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Memory_ToString_Args`.
    PJRT_Memory_ToString_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        memory: *mut PJRT_Memory,
        to_string: *const c_char,
        to_string_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Memory_AddressableByDevices_Args`.
    PJRT_Memory_AddressableByDevices_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        memory: *mut PJRT_Memory,
        devices: *const *mut PJRT_Device,
        num_devices: usize,
    }
);

// -------------------------------- executables --------------------------------

pjrt_struct!(
    /// `PJRT_Executable_Destroy_Args`.
    PJRT_Executable_Destroy_Args = 24 { struct_size: usize, extension_start: Ext, executable: *mut PJRT_Executable }
);
pjrt_struct!(
    /// `PJRT_Executable_Name_Args`.
    PJRT_Executable_Name_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        executable_name: *const c_char,
        executable_name_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_NumReplicas_Args` (also `NumPartitions`, `NumOutputs`).
    PJRT_Executable_NumReplicas_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_replicas: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_NumPartitions_Args`.
    PJRT_Executable_NumPartitions_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_partitions: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_NumOutputs_Args`.
    PJRT_Executable_NumOutputs_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_outputs: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_SizeOfGeneratedCodeInBytes_Args`.
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        size_in_bytes: i64,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_Fingerprint_Args`.
    PJRT_Executable_Fingerprint_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        executable_fingerprint: *const c_char,
        executable_fingerprint_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_GetCostAnalysis_Args`.
    PJRT_Executable_GetCostAnalysis_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_properties: usize,
        properties: *const PJRT_NamedValue,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_GetCompiledMemoryStats_Args`.
    PJRT_Executable_GetCompiledMemoryStats_Args = 144 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        generated_code_size_in_bytes: i64,
        argument_size_in_bytes: i64,
        output_size_in_bytes: i64,
        alias_size_in_bytes: i64,
        temp_size_in_bytes: i64,
        host_generated_code_size_in_bytes: i64,
        host_argument_size_in_bytes: i64,
        host_output_size_in_bytes: i64,
        host_alias_size_in_bytes: i64,
        host_temp_size_in_bytes: i64,
        peak_memory_in_bytes: i64,
        total_size_in_bytes: i64,
        total_allocation_bytes: i64,
        indefinite_allocations: i64,
        peak_unpadded_heap_bytes: i64,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_OutputElementTypes_Args`.
    PJRT_Executable_OutputElementTypes_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        output_types: *mut PJRT_Buffer_Type,
        num_output_types: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_OutputDimensions_Args`.
    PJRT_Executable_OutputDimensions_Args = 48 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_outputs: usize,
        dims: *const i64,
        dim_sizes: *const usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_OutputMemoryKinds_Args` (also `ParameterMemoryKinds`).
    PJRT_Executable_OutputMemoryKinds_Args = 48 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_outputs: usize,
        memory_kinds: *const *const c_char,
        memory_kind_sizes: *const usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_ParameterMemoryKinds_Args` (0.102).
    PJRT_Executable_ParameterMemoryKinds_Args = 48 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        num_parameters: usize,
        memory_kinds: *const *const c_char,
        memory_kind_sizes: *const usize,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_OptimizedProgram_Args`.
    PJRT_Executable_OptimizedProgram_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        program: *mut PJRT_Program,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_Serialize_Args`.
    PJRT_Executable_Serialize_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        executable: *const PJRT_Executable,
        serialized_bytes: *const c_char,
        serialized_bytes_size: usize,
        serialized_executable: *mut PJRT_SerializedExecutable,
        serialized_executable_deleter: Option<unsafe extern "C" fn(exec: *mut PJRT_SerializedExecutable)>,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_GetCompileOptions_Args` (0.87).
    PJRT_Executable_GetCompileOptions_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_Executable,
        serialized_bytes: *const c_char,
        serialized_bytes_size: usize,
        serialized_compile_options: *mut PJRT_SerializedCompileOptions,
        serialized_compile_options_deleter:
            Option<unsafe extern "C" fn(options: *mut PJRT_SerializedCompileOptions)>,
    }
);
pjrt_struct!(
    /// `PJRT_Executable_DeserializeAndLoad_Args`.
    PJRT_Executable_DeserializeAndLoad_Args = 72 {
        struct_size: usize,
        extension_start: Ext,
        client: *mut PJRT_Client,
        serialized_executable: *const c_char,
        serialized_executable_size: usize,
        loaded_executable: *mut PJRT_LoadedExecutable,
        overridden_serialized_compile_options: *const c_char,
        overridden_serialized_compile_options_size: usize,
        load_options: *mut PJRT_LoadOptions,
    }
);

// ----------------------------- loaded executables -----------------------------

pjrt_struct!(
    /// `PJRT_LoadedExecutable_Destroy_Args` (also `Delete`).
    PJRT_LoadedExecutable_Destroy_Args = 24 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_Delete_Args`.
    PJRT_LoadedExecutable_Delete_Args = 24 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_IsDeleted_Args`.
    PJRT_LoadedExecutable_IsDeleted_Args = 25 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
        is_deleted: bool,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_GetExecutable_Args`.
    PJRT_LoadedExecutable_GetExecutable_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        loaded_executable: *mut PJRT_LoadedExecutable,
        executable: *mut PJRT_Executable,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_AddressableDevices_Args`.
    PJRT_LoadedExecutable_AddressableDevices_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
        addressable_devices: *const *mut PJRT_Device,
        num_addressable_devices: usize,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args` (0.96).
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
        addressable_device_logical_ids: *mut PJRT_LogicalDeviceIds,
        num_addressable_device_logical_ids: usize,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_GetDeviceAssignment_Args` (0.79).
    PJRT_LoadedExecutable_GetDeviceAssignment_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
        serialized_bytes: *const c_char,
        serialized_bytes_size: usize,
        serialized_device_assignment: *mut PJRT_DeviceAssignmentSerialized,
        serialized_device_assignment_deleter:
            Option<unsafe extern "C" fn(da: *mut PJRT_DeviceAssignmentSerialized)>,
    }
);
pjrt_struct!(
    /// `PJRT_LoadedExecutable_Execute_Args`.
    PJRT_LoadedExecutable_Execute_Args = 80 {
        struct_size: usize,
        extension_start: Ext,
        executable: *mut PJRT_LoadedExecutable,
        options: *mut PJRT_ExecuteOptions,
        argument_lists: *const *const *mut PJRT_Buffer,
        num_devices: usize,
        num_args: usize,
        output_lists: *const *mut *mut PJRT_Buffer,
        device_complete_events: *mut *mut PJRT_Event,
        execute_device: *mut PJRT_Device,
    }
);

// ---------------------------------- buffers ----------------------------------

pjrt_struct!(
    /// `PJRT_Buffer_Destroy_Args`.
    PJRT_Buffer_Destroy_Args = 24 { struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer }
);
pjrt_struct!(
    /// `PJRT_Buffer_ElementType_Args`.
    PJRT_Buffer_ElementType_Args = 28 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        type_: PJRT_Buffer_Type,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_Dimensions_Args`.
    PJRT_Buffer_Dimensions_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        dims: *const i64,
        num_dims: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_DynamicDimensionIndices_Args`.
    PJRT_Buffer_DynamicDimensionIndices_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        dynamic_dim_indices: *const usize,
        num_dynamic_dims: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_GetMemoryLayout_Args`.
    PJRT_Buffer_GetMemoryLayout_Args = 104 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        layout: PJRT_Buffer_MemoryLayout,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_ToHostBuffer_Args`.
    PJRT_Buffer_ToHostBuffer_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        src: *mut PJRT_Buffer,
        host_layout: *mut PJRT_Buffer_MemoryLayout,
        dst: *mut c_void,
        dst_size: usize,
        event: *mut PJRT_Event,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_UnsafePointer_Args`.
    PJRT_Buffer_UnsafePointer_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        buffer_pointer: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_OnDeviceSizeInBytes_Args`.
    PJRT_Buffer_OnDeviceSizeInBytes_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        on_device_size_in_bytes: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_IsDeleted_Args` (also `IsOnCpu`).
    PJRT_Buffer_IsDeleted_Args = 25 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        is_deleted: bool,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_IsOnCpu_Args`.
    PJRT_Buffer_IsOnCpu_Args = 25 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        is_on_cpu: bool,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_CopyRawToHost_Args`.
    PJRT_Buffer_CopyRawToHost_Args = 56 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        dst: *mut c_void,
        offset: i64,
        transfer_size: i64,
        event: *mut PJRT_Event,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_CopyToDevice_Args`.
    PJRT_Buffer_CopyToDevice_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        dst_device: *mut PJRT_Device,
        dst_buffer: *mut PJRT_Buffer,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_CopyToMemory_Args`.
    PJRT_Buffer_CopyToMemory_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        dst_memory: *mut PJRT_Memory,
        dst_buffer: *mut PJRT_Buffer,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_Device_Args`.
    PJRT_Buffer_Device_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        device: *mut PJRT_Device,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_Memory_Args`.
    PJRT_Buffer_Memory_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        memory: *mut PJRT_Memory,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_ReadyEvent_Args`.
    PJRT_Buffer_ReadyEvent_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        event: *mut PJRT_Event,
    }
);

// --------------------------------- topology ---------------------------------

pjrt_struct!(
    /// `PJRT_TopologyDescription_Destroy_Args`.
    PJRT_TopologyDescription_Destroy_Args = 24 {
        struct_size: usize,
        extension_start: Ext,
        topology: *mut PJRT_TopologyDescription,
    }
);
pjrt_struct!(
    /// `PJRT_TopologyDescription_PlatformName_Args` (also `PlatformVersion`).
    PJRT_TopologyDescription_PlatformName_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        topology: *const PJRT_TopologyDescription,
        platform_name: *const c_char,
        platform_name_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_TopologyDescription_PlatformVersion_Args`.
    PJRT_TopologyDescription_PlatformVersion_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        topology: *mut PJRT_TopologyDescription,
        platform_version: *const c_char,
        platform_version_size: usize,
    }
);
pjrt_struct!(
    /// `PJRT_TopologyDescription_GetDeviceDescriptions_Args`.
    PJRT_TopologyDescription_GetDeviceDescriptions_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        topology: *const PJRT_TopologyDescription,
        descriptions: *const *mut PJRT_DeviceDescription,
        num_descriptions: usize,
    }
);
pjrt_struct!(
    /// `PJRT_TopologyDescription_Attributes_Args`.
    PJRT_TopologyDescription_Attributes_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        topology: *mut PJRT_TopologyDescription,
        attributes: *const PJRT_NamedValue,
        num_attributes: usize,
    }
);
pjrt_struct!(
    /// `PJRT_TopologyDescription_Fingerprint_Args` (0.101).
    PJRT_TopologyDescription_Fingerprint_Args = 32 {
        struct_size: usize,
        extension_start: Ext,
        topology: *const PJRT_TopologyDescription,
        fingerprint: u64,
    }
);

pjrt_struct!(
    /// `PJRT_Buffer_UnpaddedDimensions_Args`.
    PJRT_Buffer_UnpaddedDimensions_Args = 40 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
        unpadded_dims: *const i64,
        num_dims: usize,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_Delete_Args`.
    PJRT_Buffer_Delete_Args = 24 { struct_size: usize, extension_start: Ext, buffer: *mut PJRT_Buffer }
);
pjrt_struct!(
    /// `PJRT_Buffer_IncreaseExternalReferenceCount_Args`.
    PJRT_Buffer_IncreaseExternalReferenceCount_Args = 24 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
    }
);
pjrt_struct!(
    /// `PJRT_Buffer_DecreaseExternalReferenceCount_Args`.
    PJRT_Buffer_DecreaseExternalReferenceCount_Args = 24 {
        struct_size: usize,
        extension_start: Ext,
        buffer: *mut PJRT_Buffer,
    }
);
