//! Handles and the small structs shared by many entry points: version, extension chain,
//! errors and memories (both begin with a function table since 0.105 / 0.107), named values,
//! memory layouts, programs and execute options.

use std::ffi::{c_char, c_int, c_void};

use super::enums::*;
use super::pjrt_struct;

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident;)*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            pub struct $name {
                _opaque: [u8; 0],
            }
        )*
    };
}

opaque! {
    /// `PJRT_Client`: a client handle (ours is `crate::client::Client`).
    PJRT_Client;
    /// `PJRT_Device`: a device handle.
    PJRT_Device;
    /// `PJRT_DeviceDescription`: a device description handle.
    PJRT_DeviceDescription;
    /// `PJRT_TopologyDescription`: a topology handle.
    PJRT_TopologyDescription;
    /// `PJRT_Executable`: a compiled, not loaded, executable handle.
    PJRT_Executable;
    /// `PJRT_LoadedExecutable`: a loaded executable handle.
    PJRT_LoadedExecutable;
    /// `PJRT_Buffer`: a device buffer handle.
    PJRT_Buffer;
    /// `PJRT_Event`: a completion event handle.
    PJRT_Event;
    /// `PJRT_ExecuteContext`: an execute context handle (unused by this plugin).
    PJRT_ExecuteContext;
    /// `PJRT_DeviceAssignmentSerialized`: owner of serialized device-assignment bytes.
    PJRT_DeviceAssignmentSerialized;
    /// `PJRT_SerializedExecutable`: owner of serialized executable bytes.
    PJRT_SerializedExecutable;
    /// `PJRT_SerializedCompileOptions`: owner of serialized compile-option bytes.
    PJRT_SerializedCompileOptions;
    /// `PJRT_Device_Attributes`: owner of a device's attribute list.
    PJRT_Device_Attributes;
}

pjrt_struct!(
    /// `PJRT_Extension_Base`: a link of the extension chain.
    PJRT_Extension_Base = 24 {
        struct_size: usize,
        type_: PJRT_Extension_Type,
        next: *mut PJRT_Extension_Base,
    }
);

pjrt_struct!(
    /// `PJRT_Api_Version`: the version the plugin was built against.
    PJRT_Api_Version = 24 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        major_version: c_int,
        minor_version: c_int,
    }
);

/// `PJRT_Error_PayloadVisitor`: called once per payload of an error.
pub type PJRT_Error_PayloadVisitor = Option<
    unsafe extern "C" fn(
        key: *const c_char,
        key_size: usize,
        value: *const c_char,
        value_size: usize,
        user_arg: *mut c_void,
    ),
>;

pjrt_struct!(
    /// `PJRT_Error_FunctionTable`: how a caller may inspect and free an error without the API
    /// table (0.107).
    PJRT_Error_FunctionTable = 56 {
        struct_size: usize,
        instance_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        destroy: Option<unsafe extern "C" fn(error: *mut PJRT_Error)>,
        message: Option<
            unsafe extern "C" fn(error: *const PJRT_Error, message: *mut *const c_char, size: *mut usize),
        >,
        get_code: Option<unsafe extern "C" fn(error: *const PJRT_Error) -> PJRT_Error_Code>,
        for_each_payload: Option<
            unsafe extern "C" fn(
                error: *const PJRT_Error,
                visitor: PJRT_Error_PayloadVisitor,
                user_arg: *mut c_void,
            ),
        >,
    }
);

pjrt_struct!(
    /// `PJRT_Error`: the public head of every error; implementations append their own state.
    PJRT_Error = 8 {
        vtable: *const PJRT_Error_FunctionTable,
    }
);

/// Destructor of memory user data (`void (*)(void*)`).
pub type PJRT_UserDataDtor = Option<unsafe extern "C" fn(data: *mut c_void)>;

pjrt_struct!(
    /// `PJRT_Memory_FunctionTable`: user data the framework attaches to a memory (0.105).
    PJRT_Memory_FunctionTable = 40 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        instance_struct_size: usize,
        get_user_data: Option<unsafe extern "C" fn(memory: *mut PJRT_Memory, key: *const c_void) -> *mut c_void>,
        set_user_data: Option<
            unsafe extern "C" fn(
                memory: *mut PJRT_Memory,
                key: *const c_void,
                data: *mut c_void,
                dtor: PJRT_UserDataDtor,
            ),
        >,
    }
);

pjrt_struct!(
    /// `PJRT_Memory`: the public head of every memory handle.
    PJRT_Memory = 8 {
        vtable: *const PJRT_Memory_FunctionTable,
    }
);

/// The value union of a `PJRT_NamedValue`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    /// For `kString`: `value_size` bytes.
    pub string_value: *const c_char,
    /// For `kInt64`.
    pub int64_value: i64,
    /// For `kInt64List`: `value_size` elements.
    pub int64_array_value: *const i64,
    /// For `kFloat`.
    pub float_value: f32,
    /// For `kBool`.
    pub bool_value: bool,
}

pjrt_struct!(
    /// `PJRT_NamedValue`: a key-value pair (attributes, options).
    PJRT_NamedValue = 56 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        name: *const c_char,
        name_size: usize,
        type_: PJRT_NamedValue_Type,
        value: PJRT_NamedValue_Value,
        value_size: usize,
    }
);

pjrt_struct!(
    /// `PJRT_Buffer_MemoryLayout_Tiled`: minor-to-major order plus optional tiles.
    PJRT_Buffer_MemoryLayout_Tiled = 56 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        minor_to_major: *const i64,
        minor_to_major_size: usize,
        tile_dims: *const i64,
        tile_dim_sizes: *const usize,
        num_tiles: usize,
    }
);

pjrt_struct!(
    /// `PJRT_Buffer_MemoryLayout_Strides`: byte strides per dimension.
    PJRT_Buffer_MemoryLayout_Strides = 32 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        byte_strides: *const i64,
        num_byte_strides: usize,
    }
);

/// The layout union of a `PJRT_Buffer_MemoryLayout`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_Buffer_MemoryLayout_Union {
    /// For `Tiled`.
    pub tiled: std::mem::ManuallyDrop<PJRT_Buffer_MemoryLayout_Tiled>,
    /// For `Strides`.
    pub strides: std::mem::ManuallyDrop<PJRT_Buffer_MemoryLayout_Strides>,
}

impl Clone for PJRT_Buffer_MemoryLayout_Tiled {
    fn clone(&self) -> Self {
        *self
    }
}
impl Copy for PJRT_Buffer_MemoryLayout_Tiled {}
impl Clone for PJRT_Buffer_MemoryLayout_Strides {
    fn clone(&self) -> Self {
        *self
    }
}
impl Copy for PJRT_Buffer_MemoryLayout_Strides {}

impl Clone for PJRT_Buffer_MemoryLayout {
    fn clone(&self) -> Self {
        *self
    }
}
impl Copy for PJRT_Buffer_MemoryLayout {}

pjrt_struct!(
    /// `PJRT_Buffer_MemoryLayout`: a tiled or strided layout.
    PJRT_Buffer_MemoryLayout = 76 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        layout: PJRT_Buffer_MemoryLayout_Union,
        type_: PJRT_Buffer_MemoryLayout_Type,
    }
);
const _: () = assert!(std::mem::size_of::<PJRT_Buffer_MemoryLayout>() == 80);

pjrt_struct!(
    /// `PJRT_Program`: program bytes and their format (`"mlir"`, `"hlo"`, ...).
    PJRT_Program = 48 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        code: *mut c_char,
        code_size: usize,
        format: *const c_char,
        format_size: usize,
    }
);

pjrt_struct!(
    /// `PJRT_ExecuteOptions`: per-execution options.
    PJRT_ExecuteOptions = 144 {
        struct_size: usize,
        extension_start: *mut PJRT_Extension_Base,
        send_callbacks: *mut *mut c_void,
        recv_callbacks: *mut *mut c_void,
        num_send_ops: usize,
        num_recv_ops: usize,
        launch_id: c_int,
        non_donatable_input_indices: *const i64,
        num_non_donatable_input_indices: usize,
        context: *mut PJRT_ExecuteContext,
        call_location: *const c_char,
        num_tasks: usize,
        task_ids: *mut c_int,
        incarnation_ids: *mut i64,
        multi_slice_config: *mut c_void,
        use_major_to_minor_data_layout_for_callbacks: bool,
        hlo_output_callbacks: *mut c_void,
        num_hlo_output_callbacks: usize,
    }
);

pjrt_struct!(
    /// `PJRT_LogicalDeviceIds`: replica and partition of an addressable device.
    PJRT_LogicalDeviceIds = 8 {
        replica: c_int,
        partition: c_int,
    }
);

pjrt_struct!(
    /// `PJRT_LoadOptions`: options of `DeserializeAndLoad` (0.111); nothing here uses them.
    PJRT_LoadOptions = 32 {
        struct_size: usize,
        computation_origin: *const i32,
        computation_origin_size: usize,
        multi_slice_config: *mut c_void,
    }
);

/// `PJRT_Event_OnReadyCallback`: receives the event's error (owned by the callback) and the
/// caller's argument.
pub type PJRT_Event_OnReadyCallback =
    Option<unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void)>;

/// `PJRT_CallbackError`: how a callback the plugin calls may create an error.
pub type PJRT_CallbackError = Option<
    unsafe extern "C" fn(
        code: PJRT_Error_Code,
        message: *const c_char,
        size: usize,
    ) -> *mut PJRT_Error,
>;
