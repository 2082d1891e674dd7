//! The static `PJRT_Api` table `GetPjrtApi` returns. Entries this plugin does not support are
//! functions that return an UNIMPLEMENTED error naming the entry: no slot is null, so a caller
//! that calls without checking gets an error rather than a crash.

use std::ffi::c_void;

use wgpu_hlo::Error;

use crate::ffi::*;
use crate::{buffer, client, error, event, executable, plugin};

/// Defines a function that only returns UNIMPLEMENTED for the named entry.
macro_rules! unimplemented_entries {
    ($($name:ident),* $(,)?) => {
        $(
            #[allow(non_snake_case)]
            unsafe extern "C" fn $name(_args: *mut c_void) -> *mut PJRT_Error {
                crate::error::into_raw(Error::unimplemented(concat!(
                    stringify!($name),
                    " is not implemented by the wgpu PJRT plugin"
                )))
            }
        )*
    };
}

unimplemented_entries!(
    PJRT_LoadedExecutable_Fingerprint,
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer,
    PJRT_CopyToDeviceStream_Destroy,
    PJRT_CopyToDeviceStream_AddChunk,
    PJRT_CopyToDeviceStream_TotalBytes,
    PJRT_CopyToDeviceStream_GranuleSize,
    PJRT_CopyToDeviceStream_CurrentBytes,
    PJRT_TopologyDescription_Create,
    PJRT_TopologyDescription_Serialize,
    PJRT_Client_CreateViewOfDeviceBuffer,
    PJRT_ExecuteContext_Create,
    PJRT_ExecuteContext_Destroy,
    PJRT_AsyncHostToDeviceTransferManager_Destroy,
    PJRT_AsyncHostToDeviceTransferManager_TransferData,
    PJRT_Client_CreateBuffersForAsyncHostToDevice,
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer,
    PJRT_AsyncHostToDeviceTransferManager_Device,
    PJRT_AsyncHostToDeviceTransferManager_BufferCount,
    PJRT_AsyncHostToDeviceTransferManager_BufferSize,
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError,
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata,
    PJRT_Client_DmaMap,
    PJRT_Client_DmaUnmap,
    PJRT_Client_CreateUninitializedBuffer,
    PJRT_Client_UpdateGlobalProcessInfo,
    PJRT_TopologyDescription_Deserialize,
    PJRT_Client_CreateAliasBuffer,
    PJRT_Client_FulfillAliasBuffer,
    PJRT_Client_CreateErrorBuffer,
    PJRT_AsyncHostToDeviceTransferManager_TransferLiteral,
    PJRT_Buffer_CopyRawToHostFuture,
    PJRT_Device_PoisonExecution,
    PJRT_Device_CreateAsyncTrackingEvent,
    PJRT_AsyncTrackingEvent_Destroy,
    PJRT_Buffer_DonateWithControlDependency,
    PJRT_Buffer_Bitcast,
    PJRT_Device_ClearMemoryStats,
    PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace,
    PJRT_TopologyDescription_GetMemorySpaceKindIds,
);

/// The table. Read-only; every pointer in it is to a function or null.
pub(crate) static API: PJRT_Api = PJRT_Api {
    struct_size: PJRT_API_STRUCT_SIZE,
    extension_start: std::ptr::null_mut(),
    pjrt_api_version: PJRT_Api_Version {
        struct_size: PJRT_Api_Version::STRUCT_SIZE,
        extension_start: std::ptr::null_mut(),
        major_version: PJRT_API_MAJOR,
        minor_version: PJRT_API_MINOR,
    },
    PJRT_Error_Destroy: Some(error::PJRT_Error_Destroy),
    PJRT_Error_Message: Some(error::PJRT_Error_Message),
    PJRT_Error_GetCode: Some(error::PJRT_Error_GetCode),
    PJRT_Plugin_Initialize: Some(plugin::PJRT_Plugin_Initialize),
    PJRT_Plugin_Attributes: Some(plugin::PJRT_Plugin_Attributes),
    PJRT_Event_Destroy: Some(event::PJRT_Event_Destroy),
    PJRT_Event_IsReady: Some(event::PJRT_Event_IsReady),
    PJRT_Event_Error: Some(event::PJRT_Event_Error),
    PJRT_Event_Await: Some(event::PJRT_Event_Await),
    PJRT_Event_OnReady: Some(event::PJRT_Event_OnReady),
    PJRT_Client_Create: Some(client::PJRT_Client_Create),
    PJRT_Client_Destroy: Some(client::PJRT_Client_Destroy),
    PJRT_Client_PlatformName: Some(client::PJRT_Client_PlatformName),
    PJRT_Client_ProcessIndex: Some(client::PJRT_Client_ProcessIndex),
    PJRT_Client_PlatformVersion: Some(client::PJRT_Client_PlatformVersion),
    PJRT_Client_Devices: Some(client::PJRT_Client_Devices),
    PJRT_Client_AddressableDevices: Some(client::PJRT_Client_AddressableDevices),
    PJRT_Client_LookupDevice: Some(client::PJRT_Client_LookupDevice),
    PJRT_Client_LookupAddressableDevice: Some(client::PJRT_Client_LookupAddressableDevice),
    PJRT_Client_AddressableMemories: Some(client::PJRT_Client_AddressableMemories),
    PJRT_Client_Compile: Some(executable::PJRT_Client_Compile),
    PJRT_Client_DefaultDeviceAssignment: Some(client::PJRT_Client_DefaultDeviceAssignment),
    PJRT_Client_BufferFromHostBuffer: Some(buffer::PJRT_Client_BufferFromHostBuffer),
    PJRT_DeviceDescription_Id: Some(client::PJRT_DeviceDescription_Id),
    PJRT_DeviceDescription_ProcessIndex: Some(client::PJRT_DeviceDescription_ProcessIndex),
    PJRT_DeviceDescription_Attributes: Some(client::PJRT_DeviceDescription_Attributes),
    PJRT_DeviceDescription_Kind: Some(client::PJRT_DeviceDescription_Kind),
    PJRT_DeviceDescription_DebugString: Some(client::PJRT_DeviceDescription_DebugString),
    PJRT_DeviceDescription_ToString: Some(client::PJRT_DeviceDescription_ToString),
    PJRT_Device_GetDescription: Some(client::PJRT_Device_GetDescription),
    PJRT_Device_IsAddressable: Some(client::PJRT_Device_IsAddressable),
    PJRT_Device_LocalHardwareId: Some(client::PJRT_Device_LocalHardwareId),
    PJRT_Device_AddressableMemories: Some(client::PJRT_Device_AddressableMemories),
    PJRT_Device_DefaultMemory: Some(client::PJRT_Device_DefaultMemory),
    PJRT_Device_MemoryStats: Some(client::PJRT_Device_MemoryStats),
    PJRT_Memory_Id: Some(client::PJRT_Memory_Id),
    PJRT_Memory_Kind: Some(client::PJRT_Memory_Kind),
    PJRT_Memory_DebugString: Some(client::PJRT_Memory_DebugString),
    PJRT_Memory_ToString: Some(client::PJRT_Memory_ToString),
    PJRT_Memory_AddressableByDevices: Some(client::PJRT_Memory_AddressableByDevices),
    PJRT_Executable_Destroy: Some(executable::PJRT_Executable_Destroy),
    PJRT_Executable_Name: Some(executable::PJRT_Executable_Name),
    PJRT_Executable_NumReplicas: Some(executable::PJRT_Executable_NumReplicas),
    PJRT_Executable_NumPartitions: Some(executable::PJRT_Executable_NumPartitions),
    PJRT_Executable_NumOutputs: Some(executable::PJRT_Executable_NumOutputs),
    PJRT_Executable_SizeOfGeneratedCodeInBytes: Some(
        executable::PJRT_Executable_SizeOfGeneratedCodeInBytes,
    ),
    PJRT_Executable_GetCostAnalysis: Some(executable::PJRT_Executable_GetCostAnalysis),
    PJRT_Executable_OutputMemoryKinds: Some(executable::PJRT_Executable_OutputMemoryKinds),
    PJRT_Executable_OptimizedProgram: Some(executable::PJRT_Executable_OptimizedProgram),
    PJRT_Executable_Serialize: Some(executable::PJRT_Executable_Serialize),
    PJRT_LoadedExecutable_Destroy: Some(executable::PJRT_LoadedExecutable_Destroy),
    PJRT_LoadedExecutable_GetExecutable: Some(executable::PJRT_LoadedExecutable_GetExecutable),
    PJRT_LoadedExecutable_AddressableDevices: Some(
        executable::PJRT_LoadedExecutable_AddressableDevices,
    ),
    PJRT_LoadedExecutable_Delete: Some(executable::PJRT_LoadedExecutable_Delete),
    PJRT_LoadedExecutable_IsDeleted: Some(executable::PJRT_LoadedExecutable_IsDeleted),
    PJRT_LoadedExecutable_Execute: Some(executable::PJRT_LoadedExecutable_Execute),
    PJRT_Executable_DeserializeAndLoad: Some(executable::PJRT_Executable_DeserializeAndLoad),
    PJRT_LoadedExecutable_Fingerprint: Some(PJRT_LoadedExecutable_Fingerprint),
    PJRT_Buffer_Destroy: Some(buffer::PJRT_Buffer_Destroy),
    PJRT_Buffer_ElementType: Some(buffer::PJRT_Buffer_ElementType),
    PJRT_Buffer_Dimensions: Some(buffer::PJRT_Buffer_Dimensions),
    PJRT_Buffer_UnpaddedDimensions: Some(buffer::PJRT_Buffer_UnpaddedDimensions),
    PJRT_Buffer_DynamicDimensionIndices: Some(buffer::PJRT_Buffer_DynamicDimensionIndices),
    PJRT_Buffer_GetMemoryLayout: Some(buffer::PJRT_Buffer_GetMemoryLayout),
    PJRT_Buffer_OnDeviceSizeInBytes: Some(buffer::PJRT_Buffer_OnDeviceSizeInBytes),
    PJRT_Buffer_Device: Some(buffer::PJRT_Buffer_Device),
    PJRT_Buffer_Memory: Some(buffer::PJRT_Buffer_Memory),
    PJRT_Buffer_Delete: Some(buffer::PJRT_Buffer_Delete),
    PJRT_Buffer_IsDeleted: Some(buffer::PJRT_Buffer_IsDeleted),
    PJRT_Buffer_CopyToDevice: Some(buffer::PJRT_Buffer_CopyToDevice),
    PJRT_Buffer_ToHostBuffer: Some(buffer::PJRT_Buffer_ToHostBuffer),
    PJRT_Buffer_IsOnCpu: Some(buffer::PJRT_Buffer_IsOnCpu),
    PJRT_Buffer_ReadyEvent: Some(buffer::PJRT_Buffer_ReadyEvent),
    PJRT_Buffer_UnsafePointer: Some(buffer::PJRT_Buffer_UnsafePointer),
    PJRT_Buffer_IncreaseExternalReferenceCount: Some(
        buffer::PJRT_Buffer_IncreaseExternalReferenceCount,
    ),
    PJRT_Buffer_DecreaseExternalReferenceCount: Some(
        buffer::PJRT_Buffer_DecreaseExternalReferenceCount,
    ),
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Some(PJRT_Buffer_OpaqueDeviceMemoryDataPointer),
    PJRT_CopyToDeviceStream_Destroy: Some(PJRT_CopyToDeviceStream_Destroy),
    PJRT_CopyToDeviceStream_AddChunk: Some(PJRT_CopyToDeviceStream_AddChunk),
    PJRT_CopyToDeviceStream_TotalBytes: Some(PJRT_CopyToDeviceStream_TotalBytes),
    PJRT_CopyToDeviceStream_GranuleSize: Some(PJRT_CopyToDeviceStream_GranuleSize),
    PJRT_CopyToDeviceStream_CurrentBytes: Some(PJRT_CopyToDeviceStream_CurrentBytes),
    PJRT_TopologyDescription_Create: Some(PJRT_TopologyDescription_Create),
    PJRT_TopologyDescription_Destroy: Some(client::PJRT_TopologyDescription_Destroy),
    PJRT_TopologyDescription_PlatformName: Some(client::PJRT_TopologyDescription_PlatformName),
    PJRT_TopologyDescription_PlatformVersion: Some(
        client::PJRT_TopologyDescription_PlatformVersion,
    ),
    PJRT_TopologyDescription_GetDeviceDescriptions: Some(
        client::PJRT_TopologyDescription_GetDeviceDescriptions,
    ),
    PJRT_TopologyDescription_Serialize: Some(PJRT_TopologyDescription_Serialize),
    PJRT_TopologyDescription_Attributes: Some(client::PJRT_TopologyDescription_Attributes),
    PJRT_Compile: Some(executable::PJRT_Compile),
    PJRT_Executable_OutputElementTypes: Some(executable::PJRT_Executable_OutputElementTypes),
    PJRT_Executable_OutputDimensions: Some(executable::PJRT_Executable_OutputDimensions),
    PJRT_Buffer_CopyToMemory: Some(buffer::PJRT_Buffer_CopyToMemory),
    PJRT_Client_CreateViewOfDeviceBuffer: Some(PJRT_Client_CreateViewOfDeviceBuffer),
    PJRT_Executable_Fingerprint: Some(executable::PJRT_Executable_Fingerprint),
    PJRT_Client_TopologyDescription: Some(client::PJRT_Client_TopologyDescription),
    PJRT_Executable_GetCompiledMemoryStats: Some(
        executable::PJRT_Executable_GetCompiledMemoryStats,
    ),
    PJRT_Memory_Kind_Id: Some(client::PJRT_Memory_Kind_Id),
    PJRT_ExecuteContext_Create: Some(PJRT_ExecuteContext_Create),
    PJRT_ExecuteContext_Destroy: Some(PJRT_ExecuteContext_Destroy),
    PJRT_Buffer_CopyRawToHost: Some(buffer::PJRT_Buffer_CopyRawToHost),
    PJRT_AsyncHostToDeviceTransferManager_Destroy: Some(
        PJRT_AsyncHostToDeviceTransferManager_Destroy,
    ),
    PJRT_AsyncHostToDeviceTransferManager_TransferData: Some(
        PJRT_AsyncHostToDeviceTransferManager_TransferData,
    ),
    PJRT_Client_CreateBuffersForAsyncHostToDevice: Some(
        PJRT_Client_CreateBuffersForAsyncHostToDevice,
    ),
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: Some(
        PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer,
    ),
    PJRT_AsyncHostToDeviceTransferManager_Device: Some(
        PJRT_AsyncHostToDeviceTransferManager_Device,
    ),
    PJRT_AsyncHostToDeviceTransferManager_BufferCount: Some(
        PJRT_AsyncHostToDeviceTransferManager_BufferCount,
    ),
    PJRT_AsyncHostToDeviceTransferManager_BufferSize: Some(
        PJRT_AsyncHostToDeviceTransferManager_BufferSize,
    ),
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError: Some(
        PJRT_AsyncHostToDeviceTransferManager_SetBufferError,
    ),
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata: Some(
        PJRT_AsyncHostToDeviceTransferManager_AddMetadata,
    ),
    PJRT_Client_DmaMap: Some(PJRT_Client_DmaMap),
    PJRT_Client_DmaUnmap: Some(PJRT_Client_DmaUnmap),
    PJRT_Client_CreateUninitializedBuffer: Some(PJRT_Client_CreateUninitializedBuffer),
    PJRT_Client_UpdateGlobalProcessInfo: Some(PJRT_Client_UpdateGlobalProcessInfo),
    PJRT_TopologyDescription_Deserialize: Some(PJRT_TopologyDescription_Deserialize),
    PJRT_Client_CreateAliasBuffer: Some(PJRT_Client_CreateAliasBuffer),
    PJRT_Client_FulfillAliasBuffer: Some(PJRT_Client_FulfillAliasBuffer),
    PJRT_LoadedExecutable_GetDeviceAssignment: Some(
        executable::PJRT_LoadedExecutable_GetDeviceAssignment,
    ),
    PJRT_Client_CreateErrorBuffer: Some(PJRT_Client_CreateErrorBuffer),
    PJRT_AsyncHostToDeviceTransferManager_TransferLiteral: Some(
        PJRT_AsyncHostToDeviceTransferManager_TransferLiteral,
    ),
    PJRT_Buffer_CopyRawToHostFuture: Some(PJRT_Buffer_CopyRawToHostFuture),
    PJRT_Device_PoisonExecution: Some(PJRT_Device_PoisonExecution),
    PJRT_Device_CreateAsyncTrackingEvent: Some(PJRT_Device_CreateAsyncTrackingEvent),
    PJRT_AsyncTrackingEvent_Destroy: Some(PJRT_AsyncTrackingEvent_Destroy),
    PJRT_Executable_GetCompileOptions: Some(executable::PJRT_Executable_GetCompileOptions),
    PJRT_Buffer_DonateWithControlDependency: Some(PJRT_Buffer_DonateWithControlDependency),
    PJRT_Event_Create: Some(event::PJRT_Event_Create),
    PJRT_Event_Set: Some(event::PJRT_Event_Set),
    PJRT_Device_GetAttributes: Some(client::PJRT_Device_GetAttributes),
    PJRT_Client_Load: Some(executable::PJRT_Client_Load),
    PJRT_LoadedExecutable_AddressableDeviceLogicalIds: Some(
        executable::PJRT_LoadedExecutable_AddressableDeviceLogicalIds,
    ),
    PJRT_Buffer_Bitcast: Some(PJRT_Buffer_Bitcast),
    PJRT_Error_ForEachPayload: Some(error::PJRT_Error_ForEachPayload),
    PJRT_TopologyDescription_Fingerprint: Some(client::PJRT_TopologyDescription_Fingerprint),
    PJRT_Executable_ParameterMemoryKinds: Some(executable::PJRT_Executable_ParameterMemoryKinds),
    PJRT_Device_ClearMemoryStats: Some(PJRT_Device_ClearMemoryStats),
    PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace: Some(
        PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace,
    ),
    PJRT_TopologyDescription_GetMemorySpaceKindIds: Some(
        PJRT_TopologyDescription_GetMemorySpaceKindIds,
    ),
};

// SAFETY: the table is immutable; its raw pointers (`extension_start`) are null and the
// function pointers are plain code addresses.
unsafe impl Sync for PJRT_Api {}
