//! TensorFlow NextPluggableDevice entry point: `TFNPD_InitPlugin`, exported beside `GetPjrtApi`.
//!
//! A stock TensorFlow (pip, >= 2.16) `dlopen`s every library in `site-packages/tensorflow-plugins/`
//! (and `$TF_PLUGGABLE_DEVICE_LIBRARY_PATH`) and, in `InitNextPluggableDeviceModule`
//! (tensorflow/core/common_runtime/pluggable_device/pluggable_device_plugin_init.cc), looks up
//! `TFNPD_InitPlugin` and then `GetPjrtApi`: the first names the device type (`WGPU`) and its XLA
//! compilation device and returns the `TFNPD_Api` table; the second registers our PJRT C API for
//! that device type. Layouts here follow TF 2.21's
//! `tensorflow/core/common_runtime/next_pluggable_device/c/plugin_c_api.h` and
//! `xla/stream_executor/tpu/c_api_decl.h` (field order and types; the structs are re-expressed,
//! not copied).
//!
//! TensorFlow's `TF_Status` is opaque; errors are reported through `TF_SetStatus`, looked up at
//! run time in the TensorFlow library that loaded us (we link nothing of TensorFlow).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The TensorFlow device type (`tf.config.list_physical_devices("WGPU")`,
/// `tf.device("/device:WGPU:0")`).
pub const DEVICE_TYPE: &CStr = c"WGPU";
/// The XLA JIT device whose op registrations (tf2xla kernels) compile programs for `WGPU`.
pub const COMPILATION_DEVICE: &CStr = c"XLA_GPU_JIT";
/// TF_XLA_FLAGS flag without which TensorFlow `CHECK`-fails (aborts the process) when a plugin
/// asks for PJRT "on-demand" compilation; we only ask when it is set.
pub const ON_DEMAND_FLAG: &str = "--tf_xla_use_device_api_for_compile_on_demand";

/// `TFNPD_PluginParams` (TF >= 2.14): filled by the plugin in `TFNPD_InitPlugin`.
#[repr(C)]
pub struct TFNPD_PluginParams {
    /// Set by TensorFlow to the size of its struct.
    pub struct_size: usize,
    /// Reserved.
    pub ext: *mut c_void,
    /// Output: the device type.
    pub device_type: *const c_char,
    /// Output: the XLA compilation device name.
    pub compilation_device_name: *const c_char,
    /// Output: the device factory's priority.
    pub priority: i32,
    /// Output: use the PluggableDevice copy logic.
    pub is_pluggable_device: bool,
    /// Output (TF >= 2.15): register `XlaCompileOnDemandOp` kernels for the device.
    pub use_pjrt_on_demand_compile: bool,
}

/// `Int64List` of c_api_decl.h: up to [`MAX_INLINED`] values inline, else an owned heap array.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Int64List {
    values: Int64ListValues,
    size: i64,
}
#[repr(C)]
#[derive(Clone, Copy)]
union Int64ListValues {
    heap: *mut i64,
    inlined: [i64; MAX_INLINED],
}
/// `BoolList`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BoolList {
    values: BoolListValues,
    size: i64,
}
#[repr(C)]
#[derive(Clone, Copy)]
union BoolListValues {
    heap: *mut bool,
    inlined: [bool; MAX_INLINED],
}
/// `XLA_Tile`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct XLA_Tile {
    dimensions: Int64List,
}
/// `TileList`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TileList {
    values: TileListValues,
    size: i64,
}
#[repr(C)]
#[derive(Clone, Copy)]
union TileListValues {
    heap: *mut XLA_Tile,
    inlined: [XLA_Tile; MAX_INLINED],
}
/// `XLA_Layout`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct XLA_Layout {
    minor_to_major: Int64List,
    tiles: TileList,
    index_primitive_type: c_int,
    pointer_primitive_type: c_int,
    element_size_in_bits: i64,
    memory_space: i64,
    dynamic_shape_metadata_prefix_bytes: i64,
    tail_padding_alignment_in_elements: i64,
}
/// `XLA_Shape`: the "serialized" shape TensorFlow hands to
/// `TFNPD_XlaShapeToDeviceShapeRepresentation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct XLA_Shape {
    element_type: c_int,
    dimensions: Int64List,
    dynamic_dimensions: BoolList,
    tuple_shapes: *mut XLA_Shape,
    ntuple_shapes: c_int,
    has_layout: bool,
    layout: XLA_Layout,
}
/// `TPU_C_API_MAX_INLINED`.
pub const MAX_INLINED: usize = 6;

type Fn = Option<unsafe extern "C" fn()>;

/// `TFNPD_Api`: the plugin's table. TensorFlow calls only the last three entries and
/// `TFNPD_SameDevicePjRtBufferCopy` with its default flags (PJRT allocator and transfers); the
/// legacy event/allocator/tensor-transfer entries stay null, as the header allows.
#[repr(C)]
pub struct TFNPD_Api {
    struct_size: usize,
    priv_: *mut c_void,
    legacy: [Fn; 16],
    same_device_pjrt_buffer_copy:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> *mut c_void>,
    xla_shape_to_device_shape_representation: Option<
        unsafe extern "C" fn(*mut XLA_Shape, c_int, bool, c_int, *mut XLA_Shape, *mut c_void),
    >,
    get_device_count: Option<unsafe extern "C" fn(*mut c_void) -> i32>,
    init_plugin_internal_device_states: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: the table is immutable and its pointers are functions or null.
unsafe impl Sync for TFNPD_Api {}

static API: TFNPD_Api = TFNPD_Api {
    struct_size: std::mem::size_of::<TFNPD_Api>(),
    priv_: std::ptr::null_mut(),
    legacy: [None; 16],
    same_device_pjrt_buffer_copy: Some(same_device_pjrt_buffer_copy),
    xla_shape_to_device_shape_representation: Some(xla_shape_to_device_shape_representation),
    get_device_count: Some(get_device_count),
    init_plugin_internal_device_states: Some(init_plugin_internal_device_states),
};

/// `TF_Code` values used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum TfCode {
    /// `TF_INTERNAL`.
    Internal = 13,
    /// `TF_UNIMPLEMENTED`.
    Unimplemented = 12,
}

#[cfg(target_os = "linux")]
mod dl {
    use std::ffi::{c_char, c_int, c_void};
    extern "C" {
        pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        pub fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    }
    pub const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
    pub const RTLD_LAZY: c_int = 0x1;
    pub const RTLD_NOLOAD: c_int = 0x4;
}

/// A function of the TensorFlow library that loaded us, by name: first among the global
/// symbols, then in an already-loaded `libtensorflow_framework.so.2` (never loading it).
#[cfg(target_os = "linux")]
fn tf_symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym/dlopen with valid NUL-terminated strings; RTLD_NOLOAD never loads code.
    unsafe {
        let p = dl::dlsym(dl::RTLD_DEFAULT, name.as_ptr());
        if !p.is_null() {
            return Some(p);
        }
        let h = dl::dlopen(
            c"libtensorflow_framework.so.2".as_ptr(),
            dl::RTLD_LAZY | dl::RTLD_NOLOAD,
        );
        if h.is_null() {
            return None;
        }
        let p = dl::dlsym(h, name.as_ptr());
        (!p.is_null()).then_some(p)
    }
}
#[cfg(not(target_os = "linux"))]
fn tf_symbol(_name: &CStr) -> Option<*mut c_void> {
    None
}

/// Reports `msg` through TensorFlow's `TF_SetStatus`; logs it when that cannot be found.
fn set_status(status: *mut c_void, code: TfCode, msg: &str) {
    log::error!("wgpu NextPluggableDevice: {msg}");
    if status.is_null() {
        return;
    }
    let Some(f) = tf_symbol(c"TF_SetStatus") else {
        return;
    };
    let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `TF_SetStatus(TF_Status*, TF_Code, const char*)` of TensorFlow's C API; `status`
    // is the live status TensorFlow passed us; TF copies the message.
    unsafe {
        let f: unsafe extern "C" fn(*mut c_void, c_int, *const c_char) = std::mem::transmute(f);
        f(status, code as c_int, text.as_ptr());
    }
}

/// Runs `f`, turning a panic into a TF error (no unwinding across the C ABI).
fn guarded<R>(status: *mut c_void, fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(e) => {
            set_status(
                status,
                TfCode::Internal,
                &format!(
                    "panic in the wgpu plugin: {}",
                    wgpu_hlo::error::panic_message(e.as_ref())
                ),
            );
            fallback
        }
    }
}

/// Whether TF_XLA_FLAGS turns on the Device API for on-demand compilation (see
/// [`ON_DEMAND_FLAG`]); a flag given as `=false` / `=0` does not.
pub fn on_demand_flag_set(tf_xla_flags: &str) -> bool {
    tf_xla_flags.split_whitespace().any(|f| {
        f == ON_DEMAND_FLAG
            || f.strip_prefix(ON_DEMAND_FLAG)
                .and_then(|rest| rest.strip_prefix('='))
                .is_some_and(|v| matches!(v, "true" | "1"))
    })
}

/// The NextPluggableDevice entry TensorFlow looks up with `dlsym`.
///
/// # Safety
/// `params` is null or TensorFlow's `TFNPD_PluginParams` whose `struct_size` says how much of
/// it exists; `status` is null or a live `TF_Status`.
#[no_mangle]
pub unsafe extern "C" fn TFNPD_InitPlugin(
    params: *mut TFNPD_PluginParams,
    status: *mut c_void,
) -> *const TFNPD_Api {
    guarded(status, std::ptr::null(), || {
        crate::init_logging();
        if params.is_null() {
            set_status(status, TfCode::Internal, "TFNPD_InitPlugin: params is null");
            return std::ptr::null();
        }
        let base = std::mem::offset_of!(TFNPD_PluginParams, priority) + std::mem::size_of::<i32>();
        // SAFETY: non-null; TensorFlow's struct starts with `size_t struct_size`.
        let size = unsafe { (*params).struct_size };
        if size < base + 1 {
            set_status(
                status,
                TfCode::Internal,
                &format!("TFNPD_PluginParams too small ({size} bytes): TensorFlow too old"),
            );
            return std::ptr::null();
        }
        let on_demand = on_demand_flag_set(&std::env::var("TF_XLA_FLAGS").unwrap_or_default());
        // SAFETY: every field written lies within the caller's `struct_size`, checked above
        // (`use_pjrt_on_demand_compile` only when the caller's struct has it).
        unsafe {
            (*params).device_type = DEVICE_TYPE.as_ptr();
            (*params).compilation_device_name = COMPILATION_DEVICE.as_ptr();
            // Below the CPU's: ops go to WGPU where placed there (`tf.device`), not by default.
            (*params).priority = 0;
            (*params).is_pluggable_device = true;
            let od = std::mem::offset_of!(TFNPD_PluginParams, use_pjrt_on_demand_compile);
            if size > od {
                (*params).use_pjrt_on_demand_compile = on_demand;
            }
        }
        if !on_demand {
            log::info!(
                "wgpu NextPluggableDevice: set TF_XLA_FLAGS={ON_DEMAND_FLAG} to run TensorFlow \
                 ops on WGPU through PJRT"
            );
        }
        &API as *const TFNPD_Api
    })
}

unsafe extern "C" fn get_device_count(status: *mut c_void) -> i32 {
    guarded(status, 0, || {
        // One adapter; whether it opens is told by the PJRT client when TF creates it.
        1
    })
}

unsafe extern "C" fn init_plugin_internal_device_states(status: *mut c_void) {
    guarded(status, (), || {
        // TensorFlow's own `TF_CreateAndSetPjRtCApiClient` would create the PJRT client here,
        // but pip TensorFlow does not export it (see python/tensorflow_wgpu); nothing to do.
    })
}

/// Checks that `s` owns no heap memory (every list inline, no tuple), so a bitwise copy is a
/// valid independent shape that TensorFlow may destroy separately.
fn all_inline(s: &XLA_Shape) -> Result<(), String> {
    let small = |n: i64| (0..=MAX_INLINED as i64).contains(&n);
    // TensorFlow leaves `tuple_shapes` uninitialized when `ntuple_shapes` is 0 (ApiConverter::ToC),
    // so only the count says whether there is a tuple.
    if s.ntuple_shapes != 0 {
        return Err("tuple shapes".into());
    }
    if !small(s.dimensions.size) || !small(s.dynamic_dimensions.size) {
        return Err(format!("rank {} above {MAX_INLINED}", s.dimensions.size));
    }
    if s.has_layout {
        let l = &s.layout;
        if !small(l.minor_to_major.size) || !small(l.tiles.size) {
            return Err("a layout with more than 6 dimensions or tiles".into());
        }
        // SAFETY: tiles.size <= MAX_INLINED, so the inline member is the live one.
        let tiles = unsafe { &l.tiles.values.inlined[..l.tiles.size as usize] };
        if tiles.iter().any(|t| !small(t.dimensions.size)) {
            return Err("a tile of more than 6 dimensions".into());
        }
    }
    Ok(())
}

/// Device shape = host shape (no padding, no special layout): a copy of the input.
unsafe extern "C" fn xla_shape_to_device_shape_representation(
    serialized_xla_shape: *mut XLA_Shape,
    _data_type: c_int,
    _use_fast_memory: bool,
    _layout_preference: c_int,
    serialized_device_shape: *mut XLA_Shape,
    status: *mut c_void,
) {
    guarded(status, (), || {
        if serialized_xla_shape.is_null() || serialized_device_shape.is_null() {
            set_status(
                status,
                TfCode::Internal,
                "XlaShapeToDeviceShape: null shape",
            );
            return;
        }
        // SAFETY: TensorFlow passes a valid, initialized XLA_Shape.
        let src = unsafe { *serialized_xla_shape };
        if let Err(why) = all_inline(&src) {
            set_status(
                status,
                TfCode::Unimplemented,
                &format!("UNIMPLEMENTED: wgpu device shapes for {why}"),
            );
            return;
        }
        // SAFETY: the destination is TensorFlow's default-initialized (heap-free) XLA_Shape; the
        // copy owns no heap memory (checked), so each side is destroyed independently.
        unsafe { serialized_device_shape.write(src) };
    })
}

unsafe extern "C" fn same_device_pjrt_buffer_copy(
    _src: *mut c_void,
    _client: *mut c_void,
    status: *mut c_void,
) -> *mut c_void {
    set_status(
        status,
        TfCode::Unimplemented,
        "UNIMPLEMENTED: WGPU-to-WGPU tensor copy through TFNPD_SameDevicePjRtBufferCopy",
    );
    std::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_tf_2_21_headers() {
        // Sizes of TF 2.21's structs on x86-64 (from the header's field types).
        assert_eq!(std::mem::size_of::<Int64List>(), 56);
        assert_eq!(std::mem::size_of::<BoolList>(), 16);
        assert_eq!(std::mem::size_of::<TileList>(), 344);
        assert_eq!(std::mem::size_of::<XLA_Layout>(), 440);
        assert_eq!(std::mem::size_of::<XLA_Shape>(), 536);
        assert_eq!(std::mem::size_of::<TFNPD_Api>(), 2 * 8 + 20 * 8);
        assert_eq!(std::mem::size_of::<TFNPD_PluginParams>(), 40);
    }

    #[test]
    fn on_demand_flag() {
        assert!(on_demand_flag_set(ON_DEMAND_FLAG));
        assert!(on_demand_flag_set(&format!("--x=1 {ON_DEMAND_FLAG}=true")));
        assert!(!on_demand_flag_set(&format!("{ON_DEMAND_FLAG}=false")));
        assert!(!on_demand_flag_set(""));
    }

    #[test]
    fn init_fills_params_and_returns_the_table() {
        let mut p = TFNPD_PluginParams {
            struct_size: std::mem::size_of::<TFNPD_PluginParams>(),
            ext: std::ptr::null_mut(),
            device_type: std::ptr::null(),
            compilation_device_name: std::ptr::null(),
            priority: -1,
            is_pluggable_device: false,
            use_pjrt_on_demand_compile: true,
        };
        // SAFETY: a valid params struct; a null status is allowed.
        let api = unsafe { TFNPD_InitPlugin(&mut p, std::ptr::null_mut()) };
        assert!(!api.is_null());
        // SAFETY: set to static C strings above.
        assert_eq!(unsafe { CStr::from_ptr(p.device_type) }, DEVICE_TYPE);
        assert_eq!(p.priority, 0);
        // SAFETY: the static table.
        let n = unsafe { ((*api).get_device_count.unwrap())(std::ptr::null_mut()) };
        assert_eq!(n, 1);
    }

    #[test]
    fn shape_copy_refuses_heap_shapes() {
        // SAFETY: all-zero is a valid (scalar, inline) XLA_Shape.
        let mut s: XLA_Shape = unsafe { std::mem::zeroed() };
        s.dimensions.size = 2;
        // SAFETY: as above.
        let mut out: XLA_Shape = unsafe { std::mem::zeroed() };
        // SAFETY: valid shapes; null status.
        unsafe {
            xla_shape_to_device_shape_representation(
                &mut s,
                1,
                false,
                0,
                &mut out,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(out.dimensions.size, 2);
        s.dimensions.size = 7;
        assert!(all_inline(&s).is_err());
    }
}
