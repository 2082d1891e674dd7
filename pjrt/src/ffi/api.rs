//! The `PJRT_Api` function table: 138 entries after the version, in header order. The header's
//! `PJRT_Api_STRUCT_SIZE` (1144 bytes at 0.116, checked against the official 0.116 plugin) is what
//! jaxlib reads from `struct_size`; every entry's offset is checked at compile time.

use std::ffi::c_void;

use super::args::*;
use super::base::*;

/// An entry point this plugin does not type: it only ever returns an UNIMPLEMENTED error, so its
/// argument struct is never read.
pub type PJRT_UntypedEntry = unsafe extern "C" fn(args: *mut c_void) -> *mut PJRT_Error;

/// An entry point taking `*mut A` and returning an error or null.
pub type PJRT_Entry<A> = unsafe extern "C" fn(args: *mut A) -> *mut PJRT_Error;

/// The PJRT C API minor version this table implements.
pub const PJRT_API_MINOR: i32 = 116;
/// The PJRT C API major version.
pub const PJRT_API_MAJOR: i32 = 0;

/// `PJRT_Api`: the function table `GetPjrtApi` returns.
#[repr(C)]
pub struct PJRT_Api {
    /// `PJRT_Api_STRUCT_SIZE`.
    pub struct_size: usize,
    /// Extension chain (none).
    pub extension_start: *mut PJRT_Extension_Base,
    /// The version this table implements.
    pub pjrt_api_version: PJRT_Api_Version,
    /// `PJRT_Error_Destroy`.
    pub PJRT_Error_Destroy: Option<unsafe extern "C" fn(args: *mut PJRT_Error_Destroy_Args)>,
    /// `PJRT_Error_Message`.
    pub PJRT_Error_Message: Option<unsafe extern "C" fn(args: *mut PJRT_Error_Message_Args)>,
    /// `PJRT_Error_GetCode`.
    pub PJRT_Error_GetCode: Option<PJRT_Entry<PJRT_Error_GetCode_Args>>,
    /// `PJRT_Plugin_Initialize`.
    pub PJRT_Plugin_Initialize: Option<PJRT_Entry<PJRT_Plugin_Initialize_Args>>,
    /// `PJRT_Plugin_Attributes`.
    pub PJRT_Plugin_Attributes: Option<PJRT_Entry<PJRT_Plugin_Attributes_Args>>,
    /// `PJRT_Event_Destroy`.
    pub PJRT_Event_Destroy: Option<PJRT_Entry<PJRT_Event_Destroy_Args>>,
    /// `PJRT_Event_IsReady`.
    pub PJRT_Event_IsReady: Option<PJRT_Entry<PJRT_Event_IsReady_Args>>,
    /// `PJRT_Event_Error`.
    pub PJRT_Event_Error: Option<PJRT_Entry<PJRT_Event_Error_Args>>,
    /// `PJRT_Event_Await`.
    pub PJRT_Event_Await: Option<PJRT_Entry<PJRT_Event_Await_Args>>,
    /// `PJRT_Event_OnReady`.
    pub PJRT_Event_OnReady: Option<PJRT_Entry<PJRT_Event_OnReady_Args>>,
    /// `PJRT_Client_Create`.
    pub PJRT_Client_Create: Option<PJRT_Entry<PJRT_Client_Create_Args>>,
    /// `PJRT_Client_Destroy`.
    pub PJRT_Client_Destroy: Option<PJRT_Entry<PJRT_Client_Destroy_Args>>,
    /// `PJRT_Client_PlatformName`.
    pub PJRT_Client_PlatformName: Option<PJRT_Entry<PJRT_Client_PlatformName_Args>>,
    /// `PJRT_Client_ProcessIndex`.
    pub PJRT_Client_ProcessIndex: Option<PJRT_Entry<PJRT_Client_ProcessIndex_Args>>,
    /// `PJRT_Client_PlatformVersion`.
    pub PJRT_Client_PlatformVersion: Option<PJRT_Entry<PJRT_Client_PlatformVersion_Args>>,
    /// `PJRT_Client_Devices`.
    pub PJRT_Client_Devices: Option<PJRT_Entry<PJRT_Client_Devices_Args>>,
    /// `PJRT_Client_AddressableDevices`.
    pub PJRT_Client_AddressableDevices: Option<PJRT_Entry<PJRT_Client_AddressableDevices_Args>>,
    /// `PJRT_Client_LookupDevice`.
    pub PJRT_Client_LookupDevice: Option<PJRT_Entry<PJRT_Client_LookupDevice_Args>>,
    /// `PJRT_Client_LookupAddressableDevice`.
    pub PJRT_Client_LookupAddressableDevice:
        Option<PJRT_Entry<PJRT_Client_LookupAddressableDevice_Args>>,
    /// `PJRT_Client_AddressableMemories`.
    pub PJRT_Client_AddressableMemories: Option<PJRT_Entry<PJRT_Client_AddressableMemories_Args>>,
    /// `PJRT_Client_Compile`.
    pub PJRT_Client_Compile: Option<PJRT_Entry<PJRT_Client_Compile_Args>>,
    /// `PJRT_Client_DefaultDeviceAssignment`.
    pub PJRT_Client_DefaultDeviceAssignment:
        Option<PJRT_Entry<PJRT_Client_DefaultDeviceAssignment_Args>>,
    /// `PJRT_Client_BufferFromHostBuffer`.
    pub PJRT_Client_BufferFromHostBuffer: Option<PJRT_Entry<PJRT_Client_BufferFromHostBuffer_Args>>,
    /// `PJRT_DeviceDescription_Id`.
    pub PJRT_DeviceDescription_Id: Option<PJRT_Entry<PJRT_DeviceDescription_Id_Args>>,
    /// `PJRT_DeviceDescription_ProcessIndex`.
    pub PJRT_DeviceDescription_ProcessIndex:
        Option<PJRT_Entry<PJRT_DeviceDescription_ProcessIndex_Args>>,
    /// `PJRT_DeviceDescription_Attributes`.
    pub PJRT_DeviceDescription_Attributes:
        Option<PJRT_Entry<PJRT_DeviceDescription_Attributes_Args>>,
    /// `PJRT_DeviceDescription_Kind`.
    pub PJRT_DeviceDescription_Kind: Option<PJRT_Entry<PJRT_DeviceDescription_Kind_Args>>,
    /// `PJRT_DeviceDescription_DebugString`.
    pub PJRT_DeviceDescription_DebugString:
        Option<PJRT_Entry<PJRT_DeviceDescription_DebugString_Args>>,
    /// `PJRT_DeviceDescription_ToString`.
    pub PJRT_DeviceDescription_ToString: Option<PJRT_Entry<PJRT_DeviceDescription_ToString_Args>>,
    /// `PJRT_Device_GetDescription`.
    pub PJRT_Device_GetDescription: Option<PJRT_Entry<PJRT_Device_GetDescription_Args>>,
    /// `PJRT_Device_IsAddressable`.
    pub PJRT_Device_IsAddressable: Option<PJRT_Entry<PJRT_Device_IsAddressable_Args>>,
    /// `PJRT_Device_LocalHardwareId`.
    pub PJRT_Device_LocalHardwareId: Option<PJRT_Entry<PJRT_Device_LocalHardwareId_Args>>,
    /// `PJRT_Device_AddressableMemories`.
    pub PJRT_Device_AddressableMemories: Option<PJRT_Entry<PJRT_Device_AddressableMemories_Args>>,
    /// `PJRT_Device_DefaultMemory`.
    pub PJRT_Device_DefaultMemory: Option<PJRT_Entry<PJRT_Device_DefaultMemory_Args>>,
    /// `PJRT_Device_MemoryStats`.
    pub PJRT_Device_MemoryStats: Option<PJRT_Entry<PJRT_Device_MemoryStats_Args>>,
    /// `PJRT_Memory_Id`.
    pub PJRT_Memory_Id: Option<PJRT_Entry<PJRT_Memory_Id_Args>>,
    /// `PJRT_Memory_Kind`.
    pub PJRT_Memory_Kind: Option<PJRT_Entry<PJRT_Memory_Kind_Args>>,
    /// `PJRT_Memory_DebugString`.
    pub PJRT_Memory_DebugString: Option<PJRT_Entry<PJRT_Memory_DebugString_Args>>,
    /// `PJRT_Memory_ToString`.
    pub PJRT_Memory_ToString: Option<PJRT_Entry<PJRT_Memory_ToString_Args>>,
    /// `PJRT_Memory_AddressableByDevices`.
    pub PJRT_Memory_AddressableByDevices: Option<PJRT_Entry<PJRT_Memory_AddressableByDevices_Args>>,
    /// `PJRT_Executable_Destroy`.
    pub PJRT_Executable_Destroy: Option<PJRT_Entry<PJRT_Executable_Destroy_Args>>,
    /// `PJRT_Executable_Name`.
    pub PJRT_Executable_Name: Option<PJRT_Entry<PJRT_Executable_Name_Args>>,
    /// `PJRT_Executable_NumReplicas`.
    pub PJRT_Executable_NumReplicas: Option<PJRT_Entry<PJRT_Executable_NumReplicas_Args>>,
    /// `PJRT_Executable_NumPartitions`.
    pub PJRT_Executable_NumPartitions: Option<PJRT_Entry<PJRT_Executable_NumPartitions_Args>>,
    /// `PJRT_Executable_NumOutputs`.
    pub PJRT_Executable_NumOutputs: Option<PJRT_Entry<PJRT_Executable_NumOutputs_Args>>,
    /// `PJRT_Executable_SizeOfGeneratedCodeInBytes`.
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes:
        Option<PJRT_Entry<PJRT_Executable_SizeOfGeneratedCodeInBytes_Args>>,
    /// `PJRT_Executable_GetCostAnalysis`.
    pub PJRT_Executable_GetCostAnalysis: Option<PJRT_Entry<PJRT_Executable_GetCostAnalysis_Args>>,
    /// `PJRT_Executable_OutputMemoryKinds`.
    pub PJRT_Executable_OutputMemoryKinds:
        Option<PJRT_Entry<PJRT_Executable_OutputMemoryKinds_Args>>,
    /// `PJRT_Executable_OptimizedProgram`.
    pub PJRT_Executable_OptimizedProgram: Option<PJRT_Entry<PJRT_Executable_OptimizedProgram_Args>>,
    /// `PJRT_Executable_Serialize`.
    pub PJRT_Executable_Serialize: Option<PJRT_Entry<PJRT_Executable_Serialize_Args>>,
    /// `PJRT_LoadedExecutable_Destroy`.
    pub PJRT_LoadedExecutable_Destroy: Option<PJRT_Entry<PJRT_LoadedExecutable_Destroy_Args>>,
    /// `PJRT_LoadedExecutable_GetExecutable`.
    pub PJRT_LoadedExecutable_GetExecutable:
        Option<PJRT_Entry<PJRT_LoadedExecutable_GetExecutable_Args>>,
    /// `PJRT_LoadedExecutable_AddressableDevices`.
    pub PJRT_LoadedExecutable_AddressableDevices:
        Option<PJRT_Entry<PJRT_LoadedExecutable_AddressableDevices_Args>>,
    /// `PJRT_LoadedExecutable_Delete`.
    pub PJRT_LoadedExecutable_Delete: Option<PJRT_Entry<PJRT_LoadedExecutable_Delete_Args>>,
    /// `PJRT_LoadedExecutable_IsDeleted`.
    pub PJRT_LoadedExecutable_IsDeleted: Option<PJRT_Entry<PJRT_LoadedExecutable_IsDeleted_Args>>,
    /// `PJRT_LoadedExecutable_Execute`.
    pub PJRT_LoadedExecutable_Execute: Option<PJRT_Entry<PJRT_LoadedExecutable_Execute_Args>>,
    /// `PJRT_Executable_DeserializeAndLoad`.
    pub PJRT_Executable_DeserializeAndLoad:
        Option<PJRT_Entry<PJRT_Executable_DeserializeAndLoad_Args>>,
    /// `PJRT_LoadedExecutable_Fingerprint`.
    pub PJRT_LoadedExecutable_Fingerprint: Option<PJRT_UntypedEntry>,
    /// `PJRT_Buffer_Destroy`.
    pub PJRT_Buffer_Destroy: Option<PJRT_Entry<PJRT_Buffer_Destroy_Args>>,
    /// `PJRT_Buffer_ElementType`.
    pub PJRT_Buffer_ElementType: Option<PJRT_Entry<PJRT_Buffer_ElementType_Args>>,
    /// `PJRT_Buffer_Dimensions`.
    pub PJRT_Buffer_Dimensions: Option<PJRT_Entry<PJRT_Buffer_Dimensions_Args>>,
    /// `PJRT_Buffer_UnpaddedDimensions`.
    pub PJRT_Buffer_UnpaddedDimensions: Option<PJRT_Entry<PJRT_Buffer_UnpaddedDimensions_Args>>,
    /// `PJRT_Buffer_DynamicDimensionIndices`.
    pub PJRT_Buffer_DynamicDimensionIndices:
        Option<PJRT_Entry<PJRT_Buffer_DynamicDimensionIndices_Args>>,
    /// `PJRT_Buffer_GetMemoryLayout`.
    pub PJRT_Buffer_GetMemoryLayout: Option<PJRT_Entry<PJRT_Buffer_GetMemoryLayout_Args>>,
    /// `PJRT_Buffer_OnDeviceSizeInBytes`.
    pub PJRT_Buffer_OnDeviceSizeInBytes: Option<PJRT_Entry<PJRT_Buffer_OnDeviceSizeInBytes_Args>>,
    /// `PJRT_Buffer_Device`.
    pub PJRT_Buffer_Device: Option<PJRT_Entry<PJRT_Buffer_Device_Args>>,
    /// `PJRT_Buffer_Memory`.
    pub PJRT_Buffer_Memory: Option<PJRT_Entry<PJRT_Buffer_Memory_Args>>,
    /// `PJRT_Buffer_Delete`.
    pub PJRT_Buffer_Delete: Option<PJRT_Entry<PJRT_Buffer_Delete_Args>>,
    /// `PJRT_Buffer_IsDeleted`.
    pub PJRT_Buffer_IsDeleted: Option<PJRT_Entry<PJRT_Buffer_IsDeleted_Args>>,
    /// `PJRT_Buffer_CopyToDevice`.
    pub PJRT_Buffer_CopyToDevice: Option<PJRT_Entry<PJRT_Buffer_CopyToDevice_Args>>,
    /// `PJRT_Buffer_ToHostBuffer`.
    pub PJRT_Buffer_ToHostBuffer: Option<PJRT_Entry<PJRT_Buffer_ToHostBuffer_Args>>,
    /// `PJRT_Buffer_IsOnCpu`.
    pub PJRT_Buffer_IsOnCpu: Option<PJRT_Entry<PJRT_Buffer_IsOnCpu_Args>>,
    /// `PJRT_Buffer_ReadyEvent`.
    pub PJRT_Buffer_ReadyEvent: Option<PJRT_Entry<PJRT_Buffer_ReadyEvent_Args>>,
    /// `PJRT_Buffer_UnsafePointer`.
    pub PJRT_Buffer_UnsafePointer: Option<PJRT_Entry<PJRT_Buffer_UnsafePointer_Args>>,
    /// `PJRT_Buffer_IncreaseExternalReferenceCount`.
    pub PJRT_Buffer_IncreaseExternalReferenceCount:
        Option<PJRT_Entry<PJRT_Buffer_IncreaseExternalReferenceCount_Args>>,
    /// `PJRT_Buffer_DecreaseExternalReferenceCount`.
    pub PJRT_Buffer_DecreaseExternalReferenceCount:
        Option<PJRT_Entry<PJRT_Buffer_DecreaseExternalReferenceCount_Args>>,
    /// `PJRT_Buffer_OpaqueDeviceMemoryDataPointer`.
    pub PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Option<PJRT_UntypedEntry>,
    /// `PJRT_CopyToDeviceStream_Destroy`.
    pub PJRT_CopyToDeviceStream_Destroy: Option<PJRT_UntypedEntry>,
    /// `PJRT_CopyToDeviceStream_AddChunk`.
    pub PJRT_CopyToDeviceStream_AddChunk: Option<PJRT_UntypedEntry>,
    /// `PJRT_CopyToDeviceStream_TotalBytes`.
    pub PJRT_CopyToDeviceStream_TotalBytes: Option<PJRT_UntypedEntry>,
    /// `PJRT_CopyToDeviceStream_GranuleSize`.
    pub PJRT_CopyToDeviceStream_GranuleSize: Option<PJRT_UntypedEntry>,
    /// `PJRT_CopyToDeviceStream_CurrentBytes`.
    pub PJRT_CopyToDeviceStream_CurrentBytes: Option<PJRT_UntypedEntry>,
    /// `PJRT_TopologyDescription_Create`.
    pub PJRT_TopologyDescription_Create: Option<PJRT_UntypedEntry>,
    /// `PJRT_TopologyDescription_Destroy`.
    pub PJRT_TopologyDescription_Destroy: Option<PJRT_Entry<PJRT_TopologyDescription_Destroy_Args>>,
    /// `PJRT_TopologyDescription_PlatformName`.
    pub PJRT_TopologyDescription_PlatformName:
        Option<PJRT_Entry<PJRT_TopologyDescription_PlatformName_Args>>,
    /// `PJRT_TopologyDescription_PlatformVersion`.
    pub PJRT_TopologyDescription_PlatformVersion:
        Option<PJRT_Entry<PJRT_TopologyDescription_PlatformVersion_Args>>,
    /// `PJRT_TopologyDescription_GetDeviceDescriptions`.
    pub PJRT_TopologyDescription_GetDeviceDescriptions:
        Option<PJRT_Entry<PJRT_TopologyDescription_GetDeviceDescriptions_Args>>,
    /// `PJRT_TopologyDescription_Serialize`.
    pub PJRT_TopologyDescription_Serialize: Option<PJRT_UntypedEntry>,
    /// `PJRT_TopologyDescription_Attributes`.
    pub PJRT_TopologyDescription_Attributes:
        Option<PJRT_Entry<PJRT_TopologyDescription_Attributes_Args>>,
    /// `PJRT_Compile`.
    pub PJRT_Compile: Option<PJRT_Entry<PJRT_Compile_Args>>,
    /// `PJRT_Executable_OutputElementTypes`.
    pub PJRT_Executable_OutputElementTypes:
        Option<PJRT_Entry<PJRT_Executable_OutputElementTypes_Args>>,
    /// `PJRT_Executable_OutputDimensions`.
    pub PJRT_Executable_OutputDimensions: Option<PJRT_Entry<PJRT_Executable_OutputDimensions_Args>>,
    /// `PJRT_Buffer_CopyToMemory`.
    pub PJRT_Buffer_CopyToMemory: Option<PJRT_Entry<PJRT_Buffer_CopyToMemory_Args>>,
    /// `PJRT_Client_CreateViewOfDeviceBuffer`.
    pub PJRT_Client_CreateViewOfDeviceBuffer: Option<PJRT_UntypedEntry>,
    /// `PJRT_Executable_Fingerprint`.
    pub PJRT_Executable_Fingerprint: Option<PJRT_Entry<PJRT_Executable_Fingerprint_Args>>,
    /// `PJRT_Client_TopologyDescription`.
    pub PJRT_Client_TopologyDescription: Option<PJRT_Entry<PJRT_Client_TopologyDescription_Args>>,
    /// `PJRT_Executable_GetCompiledMemoryStats`.
    pub PJRT_Executable_GetCompiledMemoryStats:
        Option<PJRT_Entry<PJRT_Executable_GetCompiledMemoryStats_Args>>,
    /// `PJRT_Memory_Kind_Id`.
    pub PJRT_Memory_Kind_Id: Option<PJRT_Entry<PJRT_Memory_Kind_Id_Args>>,
    /// `PJRT_ExecuteContext_Create`.
    pub PJRT_ExecuteContext_Create: Option<PJRT_UntypedEntry>,
    /// `PJRT_ExecuteContext_Destroy`.
    pub PJRT_ExecuteContext_Destroy: Option<PJRT_UntypedEntry>,
    /// `PJRT_Buffer_CopyRawToHost`.
    pub PJRT_Buffer_CopyRawToHost: Option<PJRT_Entry<PJRT_Buffer_CopyRawToHost_Args>>,
    /// `PJRT_AsyncHostToDeviceTransferManager_Destroy`.
    pub PJRT_AsyncHostToDeviceTransferManager_Destroy: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_TransferData`.
    pub PJRT_AsyncHostToDeviceTransferManager_TransferData: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_CreateBuffersForAsyncHostToDevice`.
    pub PJRT_Client_CreateBuffersForAsyncHostToDevice: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer`.
    pub PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_Device`.
    pub PJRT_AsyncHostToDeviceTransferManager_Device: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_BufferCount`.
    pub PJRT_AsyncHostToDeviceTransferManager_BufferCount: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_BufferSize`.
    pub PJRT_AsyncHostToDeviceTransferManager_BufferSize: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_SetBufferError`.
    pub PJRT_AsyncHostToDeviceTransferManager_SetBufferError: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_AddMetadata`.
    pub PJRT_AsyncHostToDeviceTransferManager_AddMetadata: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_DmaMap`.
    pub PJRT_Client_DmaMap: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_DmaUnmap`.
    pub PJRT_Client_DmaUnmap: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_CreateUninitializedBuffer`.
    pub PJRT_Client_CreateUninitializedBuffer: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_UpdateGlobalProcessInfo`.
    pub PJRT_Client_UpdateGlobalProcessInfo: Option<PJRT_UntypedEntry>,
    /// `PJRT_TopologyDescription_Deserialize`.
    pub PJRT_TopologyDescription_Deserialize: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_CreateAliasBuffer`.
    pub PJRT_Client_CreateAliasBuffer: Option<PJRT_UntypedEntry>,
    /// `PJRT_Client_FulfillAliasBuffer`.
    pub PJRT_Client_FulfillAliasBuffer: Option<PJRT_UntypedEntry>,
    /// `PJRT_LoadedExecutable_GetDeviceAssignment`.
    pub PJRT_LoadedExecutable_GetDeviceAssignment:
        Option<PJRT_Entry<PJRT_LoadedExecutable_GetDeviceAssignment_Args>>,
    /// `PJRT_Client_CreateErrorBuffer`.
    pub PJRT_Client_CreateErrorBuffer: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncHostToDeviceTransferManager_TransferLiteral`.
    pub PJRT_AsyncHostToDeviceTransferManager_TransferLiteral: Option<PJRT_UntypedEntry>,
    /// `PJRT_Buffer_CopyRawToHostFuture`.
    pub PJRT_Buffer_CopyRawToHostFuture: Option<PJRT_UntypedEntry>,
    /// `PJRT_Device_PoisonExecution`.
    pub PJRT_Device_PoisonExecution: Option<PJRT_UntypedEntry>,
    /// `PJRT_Device_CreateAsyncTrackingEvent`.
    pub PJRT_Device_CreateAsyncTrackingEvent: Option<PJRT_UntypedEntry>,
    /// `PJRT_AsyncTrackingEvent_Destroy`.
    pub PJRT_AsyncTrackingEvent_Destroy: Option<PJRT_UntypedEntry>,
    /// `PJRT_Executable_GetCompileOptions`.
    pub PJRT_Executable_GetCompileOptions:
        Option<PJRT_Entry<PJRT_Executable_GetCompileOptions_Args>>,
    /// `PJRT_Buffer_DonateWithControlDependency`.
    pub PJRT_Buffer_DonateWithControlDependency: Option<PJRT_UntypedEntry>,
    /// `PJRT_Event_Create`.
    pub PJRT_Event_Create: Option<PJRT_Entry<PJRT_Event_Create_Args>>,
    /// `PJRT_Event_Set`.
    pub PJRT_Event_Set: Option<PJRT_Entry<PJRT_Event_Set_Args>>,
    /// `PJRT_Device_GetAttributes`.
    pub PJRT_Device_GetAttributes: Option<PJRT_Entry<PJRT_Device_GetAttributes_Args>>,
    /// `PJRT_Client_Load`.
    pub PJRT_Client_Load: Option<PJRT_Entry<PJRT_Client_Load_Args>>,
    /// `PJRT_LoadedExecutable_AddressableDeviceLogicalIds`.
    pub PJRT_LoadedExecutable_AddressableDeviceLogicalIds:
        Option<PJRT_Entry<PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args>>,
    /// `PJRT_Buffer_Bitcast`.
    pub PJRT_Buffer_Bitcast: Option<PJRT_UntypedEntry>,
    /// `PJRT_Error_ForEachPayload`.
    pub PJRT_Error_ForEachPayload: Option<PJRT_Entry<PJRT_Error_ForEachPayload_Args>>,
    /// `PJRT_TopologyDescription_Fingerprint`.
    pub PJRT_TopologyDescription_Fingerprint:
        Option<PJRT_Entry<PJRT_TopologyDescription_Fingerprint_Args>>,
    /// `PJRT_Executable_ParameterMemoryKinds`.
    pub PJRT_Executable_ParameterMemoryKinds:
        Option<PJRT_Entry<PJRT_Executable_ParameterMemoryKinds_Args>>,
    /// `PJRT_Device_ClearMemoryStats`.
    pub PJRT_Device_ClearMemoryStats: Option<PJRT_UntypedEntry>,
    /// `PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace`.
    pub PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace: Option<PJRT_UntypedEntry>,
    /// `PJRT_TopologyDescription_GetMemorySpaceKindIds`.
    pub PJRT_TopologyDescription_GetMemorySpaceKindIds: Option<PJRT_UntypedEntry>,
}

/// `PJRT_Api_STRUCT_SIZE`: the end of the last entry.
pub const PJRT_API_STRUCT_SIZE: usize = 1144;

const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(PJRT_Api, pjrt_api_version) == 16);
    assert!(offset_of!(PJRT_Api, PJRT_Error_Destroy) == 40);
    assert!(offset_of!(PJRT_Api, PJRT_Error_Message) == 48);
    assert!(offset_of!(PJRT_Api, PJRT_Error_GetCode) == 56);
    assert!(offset_of!(PJRT_Api, PJRT_Plugin_Initialize) == 64);
    assert!(offset_of!(PJRT_Api, PJRT_Plugin_Attributes) == 72);
    assert!(offset_of!(PJRT_Api, PJRT_Event_Destroy) == 80);
    assert!(offset_of!(PJRT_Api, PJRT_Event_IsReady) == 88);
    assert!(offset_of!(PJRT_Api, PJRT_Event_Error) == 96);
    assert!(offset_of!(PJRT_Api, PJRT_Event_Await) == 104);
    assert!(offset_of!(PJRT_Api, PJRT_Event_OnReady) == 112);
    assert!(offset_of!(PJRT_Api, PJRT_Client_Create) == 120);
    assert!(offset_of!(PJRT_Api, PJRT_Client_Destroy) == 128);
    assert!(offset_of!(PJRT_Api, PJRT_Client_PlatformName) == 136);
    assert!(offset_of!(PJRT_Api, PJRT_Client_ProcessIndex) == 144);
    assert!(offset_of!(PJRT_Api, PJRT_Client_PlatformVersion) == 152);
    assert!(offset_of!(PJRT_Api, PJRT_Client_Devices) == 160);
    assert!(offset_of!(PJRT_Api, PJRT_Client_AddressableDevices) == 168);
    assert!(offset_of!(PJRT_Api, PJRT_Client_LookupDevice) == 176);
    assert!(offset_of!(PJRT_Api, PJRT_Client_LookupAddressableDevice) == 184);
    assert!(offset_of!(PJRT_Api, PJRT_Client_AddressableMemories) == 192);
    assert!(offset_of!(PJRT_Api, PJRT_Client_Compile) == 200);
    assert!(offset_of!(PJRT_Api, PJRT_Client_DefaultDeviceAssignment) == 208);
    assert!(offset_of!(PJRT_Api, PJRT_Client_BufferFromHostBuffer) == 216);
    assert!(offset_of!(PJRT_Api, PJRT_DeviceDescription_Id) == 224);
    assert!(offset_of!(PJRT_Api, PJRT_DeviceDescription_ProcessIndex) == 232);
    assert!(offset_of!(PJRT_Api, PJRT_DeviceDescription_Attributes) == 240);
    assert!(offset_of!(PJRT_Api, PJRT_DeviceDescription_Kind) == 248);
    assert!(offset_of!(PJRT_Api, PJRT_DeviceDescription_DebugString) == 256);
    assert!(offset_of!(PJRT_Api, PJRT_DeviceDescription_ToString) == 264);
    assert!(offset_of!(PJRT_Api, PJRT_Device_GetDescription) == 272);
    assert!(offset_of!(PJRT_Api, PJRT_Device_IsAddressable) == 280);
    assert!(offset_of!(PJRT_Api, PJRT_Device_LocalHardwareId) == 288);
    assert!(offset_of!(PJRT_Api, PJRT_Device_AddressableMemories) == 296);
    assert!(offset_of!(PJRT_Api, PJRT_Device_DefaultMemory) == 304);
    assert!(offset_of!(PJRT_Api, PJRT_Device_MemoryStats) == 312);
    assert!(offset_of!(PJRT_Api, PJRT_Memory_Id) == 320);
    assert!(offset_of!(PJRT_Api, PJRT_Memory_Kind) == 328);
    assert!(offset_of!(PJRT_Api, PJRT_Memory_DebugString) == 336);
    assert!(offset_of!(PJRT_Api, PJRT_Memory_ToString) == 344);
    assert!(offset_of!(PJRT_Api, PJRT_Memory_AddressableByDevices) == 352);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_Destroy) == 360);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_Name) == 368);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_NumReplicas) == 376);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_NumPartitions) == 384);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_NumOutputs) == 392);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_SizeOfGeneratedCodeInBytes) == 400);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_GetCostAnalysis) == 408);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_OutputMemoryKinds) == 416);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_OptimizedProgram) == 424);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_Serialize) == 432);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_Destroy) == 440);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_GetExecutable) == 448);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_AddressableDevices) == 456);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_Delete) == 464);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_IsDeleted) == 472);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_Execute) == 480);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_DeserializeAndLoad) == 488);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_Fingerprint) == 496);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_Destroy) == 504);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_ElementType) == 512);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_Dimensions) == 520);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_UnpaddedDimensions) == 528);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_DynamicDimensionIndices) == 536);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_GetMemoryLayout) == 544);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_OnDeviceSizeInBytes) == 552);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_Device) == 560);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_Memory) == 568);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_Delete) == 576);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_IsDeleted) == 584);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_CopyToDevice) == 592);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_ToHostBuffer) == 600);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_IsOnCpu) == 608);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_ReadyEvent) == 616);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_UnsafePointer) == 624);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_IncreaseExternalReferenceCount) == 632);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_DecreaseExternalReferenceCount) == 640);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_OpaqueDeviceMemoryDataPointer) == 648);
    assert!(offset_of!(PJRT_Api, PJRT_CopyToDeviceStream_Destroy) == 656);
    assert!(offset_of!(PJRT_Api, PJRT_CopyToDeviceStream_AddChunk) == 664);
    assert!(offset_of!(PJRT_Api, PJRT_CopyToDeviceStream_TotalBytes) == 672);
    assert!(offset_of!(PJRT_Api, PJRT_CopyToDeviceStream_GranuleSize) == 680);
    assert!(offset_of!(PJRT_Api, PJRT_CopyToDeviceStream_CurrentBytes) == 688);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_Create) == 696);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_Destroy) == 704);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_PlatformName) == 712);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_PlatformVersion) == 720);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_GetDeviceDescriptions) == 728);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_Serialize) == 736);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_Attributes) == 744);
    assert!(offset_of!(PJRT_Api, PJRT_Compile) == 752);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_OutputElementTypes) == 760);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_OutputDimensions) == 768);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_CopyToMemory) == 776);
    assert!(offset_of!(PJRT_Api, PJRT_Client_CreateViewOfDeviceBuffer) == 784);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_Fingerprint) == 792);
    assert!(offset_of!(PJRT_Api, PJRT_Client_TopologyDescription) == 800);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats) == 808);
    assert!(offset_of!(PJRT_Api, PJRT_Memory_Kind_Id) == 816);
    assert!(offset_of!(PJRT_Api, PJRT_ExecuteContext_Create) == 824);
    assert!(offset_of!(PJRT_Api, PJRT_ExecuteContext_Destroy) == 832);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_CopyRawToHost) == 840);
    assert!(offset_of!(PJRT_Api, PJRT_AsyncHostToDeviceTransferManager_Destroy) == 848);
    assert!(offset_of!(PJRT_Api, PJRT_AsyncHostToDeviceTransferManager_TransferData) == 856);
    assert!(offset_of!(PJRT_Api, PJRT_Client_CreateBuffersForAsyncHostToDevice) == 864);
    assert!(
        offset_of!(
            PJRT_Api,
            PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer
        ) == 872
    );
    assert!(offset_of!(PJRT_Api, PJRT_AsyncHostToDeviceTransferManager_Device) == 880);
    assert!(offset_of!(PJRT_Api, PJRT_AsyncHostToDeviceTransferManager_BufferCount) == 888);
    assert!(offset_of!(PJRT_Api, PJRT_AsyncHostToDeviceTransferManager_BufferSize) == 896);
    assert!(
        offset_of!(
            PJRT_Api,
            PJRT_AsyncHostToDeviceTransferManager_SetBufferError
        ) == 904
    );
    assert!(offset_of!(PJRT_Api, PJRT_AsyncHostToDeviceTransferManager_AddMetadata) == 912);
    assert!(offset_of!(PJRT_Api, PJRT_Client_DmaMap) == 920);
    assert!(offset_of!(PJRT_Api, PJRT_Client_DmaUnmap) == 928);
    assert!(offset_of!(PJRT_Api, PJRT_Client_CreateUninitializedBuffer) == 936);
    assert!(offset_of!(PJRT_Api, PJRT_Client_UpdateGlobalProcessInfo) == 944);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_Deserialize) == 952);
    assert!(offset_of!(PJRT_Api, PJRT_Client_CreateAliasBuffer) == 960);
    assert!(offset_of!(PJRT_Api, PJRT_Client_FulfillAliasBuffer) == 968);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_GetDeviceAssignment) == 976);
    assert!(offset_of!(PJRT_Api, PJRT_Client_CreateErrorBuffer) == 984);
    assert!(
        offset_of!(
            PJRT_Api,
            PJRT_AsyncHostToDeviceTransferManager_TransferLiteral
        ) == 992
    );
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_CopyRawToHostFuture) == 1000);
    assert!(offset_of!(PJRT_Api, PJRT_Device_PoisonExecution) == 1008);
    assert!(offset_of!(PJRT_Api, PJRT_Device_CreateAsyncTrackingEvent) == 1016);
    assert!(offset_of!(PJRT_Api, PJRT_AsyncTrackingEvent_Destroy) == 1024);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_GetCompileOptions) == 1032);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_DonateWithControlDependency) == 1040);
    assert!(offset_of!(PJRT_Api, PJRT_Event_Create) == 1048);
    assert!(offset_of!(PJRT_Api, PJRT_Event_Set) == 1056);
    assert!(offset_of!(PJRT_Api, PJRT_Device_GetAttributes) == 1064);
    assert!(offset_of!(PJRT_Api, PJRT_Client_Load) == 1072);
    assert!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_AddressableDeviceLogicalIds) == 1080);
    assert!(offset_of!(PJRT_Api, PJRT_Buffer_Bitcast) == 1088);
    assert!(offset_of!(PJRT_Api, PJRT_Error_ForEachPayload) == 1096);
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_Fingerprint) == 1104);
    assert!(offset_of!(PJRT_Api, PJRT_Executable_ParameterMemoryKinds) == 1112);
    assert!(offset_of!(PJRT_Api, PJRT_Device_ClearMemoryStats) == 1120);
    assert!(
        offset_of!(
            PJRT_Api,
            PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace
        ) == 1128
    );
    assert!(offset_of!(PJRT_Api, PJRT_TopologyDescription_GetMemorySpaceKindIds) == 1136);
    assert!(std::mem::size_of::<PJRT_Api>() == PJRT_API_STRUCT_SIZE);
};
