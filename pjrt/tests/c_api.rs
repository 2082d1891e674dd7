//! Calls the plugin through the function table with raw pointers, as a C caller (jaxlib) does,
//! on the real adapter: client and device queries, host round trips, events, errors for bad
//! arguments and for entries the plugin does not implement.

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use pjrt_wgpu::ffi::*;

fn api() -> &'static PJRT_Api {
    // SAFETY: GetPjrtApi returns a pointer to a static table.
    unsafe { &*pjrt_wgpu::GetPjrtApi() }
}

/// Zero-initialized args with `struct_size` set, as C callers write `Args a = {SIZE, nullptr}`.
fn args<T: PjrtStruct>() -> T {
    // SAFETY: every args struct is plain data for which all-zero is a valid value (null
    // pointers, zero sizes, `None` function pointers).
    let mut a: T = unsafe { std::mem::zeroed() };
    // SAFETY: every args struct starts with `size_t struct_size`.
    unsafe { *(&mut a as *mut T).cast::<usize>() = T::STRUCT_SIZE };
    a
}

/// Code and message of an error, which is destroyed.
fn take_error(e: *mut PJRT_Error) -> Option<(PJRT_Error_Code, String)> {
    if e.is_null() {
        return None;
    }
    let mut m: PJRT_Error_Message_Args = args();
    m.error = e;
    // SAFETY: valid args and a live error.
    unsafe { (api().PJRT_Error_Message.unwrap())(&mut m) };
    // SAFETY: the message lives as long as the error.
    let msg = unsafe { std::slice::from_raw_parts(m.message.cast::<u8>(), m.message_size) };
    let msg = String::from_utf8_lossy(msg).into_owned();
    let mut c: PJRT_Error_GetCode_Args = args();
    c.error = e;
    // SAFETY: valid args and a live error.
    assert!(unsafe { (api().PJRT_Error_GetCode.unwrap())(&mut c) }.is_null());
    let mut d: PJRT_Error_Destroy_Args = args();
    d.error = e;
    // SAFETY: valid args; the error is not used afterwards.
    unsafe { (api().PJRT_Error_Destroy.unwrap())(&mut d) };
    Some((c.code, msg))
}

fn ok(e: *mut PJRT_Error) {
    if let Some((code, msg)) = take_error(e) {
        panic!("PJRT error {code:?}: {msg}");
    }
}

struct Client(*mut PJRT_Client);
// SAFETY: the plugin's client is thread-safe; the tests share one.
unsafe impl Send for Client {}
// SAFETY: as above.
unsafe impl Sync for Client {}

fn client() -> *mut PJRT_Client {
    static C: OnceLock<Client> = OnceLock::new();
    C.get_or_init(|| {
        let mut i: PJRT_Plugin_Initialize_Args = args();
        // SAFETY: valid args.
        ok(unsafe { (api().PJRT_Plugin_Initialize.unwrap())(&mut i) });
        let mut a: PJRT_Client_Create_Args = args();
        // SAFETY: valid args.
        ok(unsafe { (api().PJRT_Client_Create.unwrap())(&mut a) });
        assert!(!a.client.is_null());
        Client(a.client)
    })
    .0
}

fn device() -> *mut PJRT_Device {
    let mut a: PJRT_Client_AddressableDevices_Args = args();
    a.client = client();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Client_AddressableDevices.unwrap())(&mut a) });
    assert_eq!(a.num_addressable_devices, 1);
    // SAFETY: one device in the client-owned array.
    unsafe { *a.addressable_devices }
}

fn string(p: *const std::ffi::c_char, n: usize) -> String {
    // SAFETY: the plugin returned `n` bytes at `p`.
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }).into_owned()
}

fn upload(
    ty: PJRT_Buffer_Type,
    dims: &[i64],
    data: &[u8],
    strides: Option<&[i64]>,
) -> *mut PJRT_Buffer {
    let mut a: PJRT_Client_BufferFromHostBuffer_Args = args();
    a.client = client();
    a.data = data.as_ptr().cast();
    a.type_ = ty;
    a.dims = dims.as_ptr();
    a.num_dims = dims.len();
    if let Some(s) = strides {
        a.byte_strides = s.as_ptr();
        a.num_byte_strides = s.len();
    }
    a.host_buffer_semantics = PJRT_HostBufferSemantics::kImmutableOnlyDuringCall;
    a.device = device();
    // SAFETY: valid args; `data` outlives the call.
    ok(unsafe { (api().PJRT_Client_BufferFromHostBuffer.unwrap())(&mut a) });
    await_event(a.done_with_host_buffer);
    a.buffer
}

fn await_event(e: *mut PJRT_Event) {
    let mut w: PJRT_Event_Await_Args = args();
    w.event = e;
    // SAFETY: valid args with a live event.
    ok(unsafe { (api().PJRT_Event_Await.unwrap())(&mut w) });
    let mut d: PJRT_Event_Destroy_Args = args();
    d.event = e;
    // SAFETY: valid args; the event is not used afterwards.
    ok(unsafe { (api().PJRT_Event_Destroy.unwrap())(&mut d) });
}

fn download(b: *mut PJRT_Buffer) -> Vec<u8> {
    let mut q: PJRT_Buffer_ToHostBuffer_Args = args();
    q.src = b;
    // SAFETY: valid args (size query: dst null).
    ok(unsafe { (api().PJRT_Buffer_ToHostBuffer.unwrap())(&mut q) });
    let mut out = vec![0u8; q.dst_size];
    let mut a: PJRT_Buffer_ToHostBuffer_Args = args();
    a.src = b;
    a.dst = out.as_mut_ptr().cast();
    a.dst_size = out.len();
    // SAFETY: valid args; `out` outlives the event, awaited below.
    ok(unsafe { (api().PJRT_Buffer_ToHostBuffer.unwrap())(&mut a) });
    await_event(a.event);
    out
}

fn destroy_buffer(b: *mut PJRT_Buffer) {
    let mut d: PJRT_Buffer_Destroy_Args = args();
    d.buffer = b;
    // SAFETY: valid args; the buffer is not used afterwards.
    ok(unsafe { (api().PJRT_Buffer_Destroy.unwrap())(&mut d) });
}

#[test]
fn table_header() {
    let a = api();
    assert_eq!(a.struct_size, PJRT_API_STRUCT_SIZE);
    assert_eq!(a.struct_size, 1144);
    assert_eq!(
        (
            a.pjrt_api_version.major_version,
            a.pjrt_api_version.minor_version
        ),
        (0, 116)
    );
    // Every slot is filled.
    // SAFETY: the table is 1144 bytes: 40 bytes of header, then 138 function pointers.
    let slots = unsafe {
        std::slice::from_raw_parts(
            (a as *const PJRT_Api).cast::<u8>().add(40).cast::<usize>(),
            138,
        )
    };
    assert!(slots.iter().all(|&p| p != 0));
}

#[test]
fn plugin_attributes_report_stablehlo_versions() {
    let mut a: PJRT_Plugin_Attributes_Args = args();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Plugin_Attributes.unwrap())(&mut a) });
    // SAFETY: the plugin returned `num_attributes` values with process lifetime.
    let list = unsafe { std::slice::from_raw_parts(a.attributes, a.num_attributes) };
    let find = |n: &str| {
        list.iter()
            .find(|v| string(v.name, v.name_size) == n)
            .unwrap()
    };
    let cur = find("stablehlo_current_version");
    assert_eq!(cur.type_, PJRT_NamedValue_Type::kInt64List);
    assert_eq!(cur.value_size, 3);
    assert_eq!(find("xla_version").type_, PJRT_NamedValue_Type::kInt64);
    assert!(list
        .iter()
        .any(|v| string(v.name, v.name_size) == "stablehlo_minimum_version"));
}

#[test]
fn client_and_device_queries() {
    let c = client();
    let mut n: PJRT_Client_PlatformName_Args = args();
    n.client = c;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Client_PlatformName.unwrap())(&mut n) });
    assert_eq!(string(n.platform_name, n.platform_name_size), "wgpu");

    let d = device();
    let mut g: PJRT_Device_GetDescription_Args = args();
    g.device = d;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Device_GetDescription.unwrap())(&mut g) });
    let mut k: PJRT_DeviceDescription_Kind_Args = args();
    k.device_description = g.device_description;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_DeviceDescription_Kind.unwrap())(&mut k) });
    assert!(!string(k.device_kind, k.device_kind_size).is_empty());
    let mut at: PJRT_DeviceDescription_Attributes_Args = args();
    at.device_description = g.device_description;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_DeviceDescription_Attributes.unwrap())(&mut at) });
    // SAFETY: returned list owned by the description.
    let attrs = unsafe { std::slice::from_raw_parts(at.attributes, at.num_attributes) };
    assert!(attrs
        .iter()
        .any(|v| string(v.name, v.name_size) == "backend"));
    assert!(attrs.iter().all(|v| matches!(
        v.type_,
        PJRT_NamedValue_Type::kString
            | PJRT_NamedValue_Type::kInt64
            | PJRT_NamedValue_Type::kInt64List
    )));

    let mut m: PJRT_Device_DefaultMemory_Args = args();
    m.device = d;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Device_DefaultMemory.unwrap())(&mut m) });
    let mut mk: PJRT_Memory_Kind_Args = args();
    mk.memory = m.memory;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Memory_Kind.unwrap())(&mut mk) });
    assert_eq!(string(mk.kind, mk.kind_size), "device");
    // The memory's function table stores framework user data.
    // SAFETY: a live memory starts with its table pointer.
    let vt = unsafe { &*(*m.memory).vtable };
    static KEY: u8 = 0;
    let key = (&KEY as *const u8).cast::<c_void>();
    // SAFETY: our memory and table.
    unsafe {
        (vt.set_user_data.unwrap())(m.memory, key, 42usize as *mut c_void, None);
        assert_eq!((vt.get_user_data.unwrap())(m.memory, key) as usize, 42);
    }

    let mut da: PJRT_Client_DefaultDeviceAssignment_Args = args();
    let mut slot = [7i32];
    da.client = c;
    da.num_replicas = 1;
    da.num_partitions = 1;
    da.default_assignment_size = 1;
    da.default_assignment = slot.as_mut_ptr();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Client_DefaultDeviceAssignment.unwrap())(&mut da) });
    assert_eq!(slot, [0]);
    da.num_replicas = 2;
    // SAFETY: valid args.
    let e = take_error(unsafe { (api().PJRT_Client_DefaultDeviceAssignment.unwrap())(&mut da) });
    assert_eq!(e.unwrap().0, PJRT_Error_Code::UNIMPLEMENTED);
}

#[test]
fn host_round_trips() {
    let f: Vec<u8> = [1.5f32, -2.0, 3.25, 8.0, 0.0, -0.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b = upload(PJRT_Buffer_Type::F32, &[2, 3], &f, None);
    assert_eq!(download(b), f);
    let mut t: PJRT_Buffer_ElementType_Args = args();
    t.buffer = b;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_ElementType.unwrap())(&mut t) });
    assert_eq!(t.type_, PJRT_Buffer_Type::F32);
    let mut dm: PJRT_Buffer_Dimensions_Args = args();
    dm.buffer = b;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_Dimensions.unwrap())(&mut dm) });
    // SAFETY: dims owned by the buffer.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(dm.dims, dm.num_dims) },
        &[2, 3]
    );
    destroy_buffer(b);

    // Odd sizes (padding to 4 bytes on the device), pred, 0-d and empty arrays.
    for (ty, dims, data) in [
        (PJRT_Buffer_Type::U8, vec![3i64], vec![1u8, 2, 3]),
        (PJRT_Buffer_Type::PRED, vec![5], vec![1, 0, 1, 1, 0]),
        (PJRT_Buffer_Type::S16, vec![], vec![0x34, 0x12]),
        (PJRT_Buffer_Type::F32, vec![0, 4], vec![]),
    ] {
        let b = upload(ty, &dims, &data, None);
        assert_eq!(download(b), data, "{ty:?} {dims:?}");
        destroy_buffer(b);
    }

    // A transposed host view (byte strides) is repacked row-major.
    let data: Vec<u8> = (0u8..6).collect();
    let b = upload(PJRT_Buffer_Type::U8, &[3, 2], &data, Some(&[1, 3]));
    assert_eq!(download(b), vec![0, 3, 1, 4, 2, 5]);
    destroy_buffer(b);
}

#[test]
fn copy_delete_and_ready_event() {
    let data = vec![9u8; 16];
    let b = upload(PJRT_Buffer_Type::S32, &[4], &data, None);
    let mut c: PJRT_Buffer_CopyToDevice_Args = args();
    c.buffer = b;
    c.dst_device = device();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_CopyToDevice.unwrap())(&mut c) });
    let mut del: PJRT_Buffer_Delete_Args = args();
    del.buffer = b;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_Delete.unwrap())(&mut del) });
    let mut isd: PJRT_Buffer_IsDeleted_Args = args();
    isd.buffer = b;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_IsDeleted.unwrap())(&mut isd) });
    assert!(isd.is_deleted);
    assert_eq!(download(c.dst_buffer), data);

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn on_ready(error: *mut PJRT_Error, user_arg: *mut c_void) {
        assert!(error.is_null());
        assert_eq!(user_arg as usize, 5);
        CALLS.fetch_add(1, Ordering::SeqCst);
    }
    let mut r: PJRT_Buffer_ReadyEvent_Args = args();
    r.buffer = c.dst_buffer;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_ReadyEvent.unwrap())(&mut r) });
    let mut o: PJRT_Event_OnReady_Args = args();
    o.event = r.event;
    o.callback = Some(on_ready);
    o.user_arg = 5usize as *mut c_void;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_OnReady.unwrap())(&mut o) });
    await_event(r.event);
    // The callback runs on the callback thread, soon after the event completes.
    assert!(eventually(|| CALLS.load(Ordering::SeqCst) == 1));
    destroy_buffer(b);
    destroy_buffer(c.dst_buffer);
}

/// True once `f` holds, polling for up to a minute.
fn eventually(f: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(60) {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    f()
}

#[test]
fn ready_callbacks_may_wait_on_the_device() {
    // jaxlib's continuations run inside these callbacks. One run inside `device.poll` that
    // waited for device work would stop every completion; they run on the thread that
    // completed the event (a polling thread that gave up its turn) or, on an event already
    // complete, on the caller's thread, and may wait there.
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn on_ready(error: *mut PJRT_Error, _: *mut c_void) {
        // A read-back: completed by a polling thread, waited for here.
        let b = upload(PJRT_Buffer_Type::S32, &[4], &[7u8; 16], None);
        let back = download(b);
        destroy_buffer(b);
        let bit = if error.is_null() && back == [7u8; 16] {
            1
        } else {
            2
        };
        SEEN.fetch_or(bit, Ordering::SeqCst);
    }
    let b = upload(PJRT_Buffer_Type::S32, &[4], &[1u8; 16], None);
    let mut r: PJRT_Buffer_ReadyEvent_Args = args();
    r.buffer = b;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_ReadyEvent.unwrap())(&mut r) });
    let mut o: PJRT_Event_OnReady_Args = args();
    o.event = r.event;
    o.callback = Some(on_ready);
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_OnReady.unwrap())(&mut o) });
    await_event(r.event);
    assert!(eventually(|| SEEN.load(Ordering::SeqCst) != 0));
    assert_eq!(SEEN.load(Ordering::SeqCst), 1);
    // On the completed event a callback runs at once, on this thread (as in XLA's own
    // plugins): a caller waiting on the future it sets needs no other thread to wake it.
    static INLINE: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn mark(error: *mut PJRT_Error, arg: *mut c_void) {
        let here = arg as usize == thread_tag();
        INLINE.store(
            if here && error.is_null() { 1 } else { 2 },
            Ordering::SeqCst,
        );
    }
    fn thread_tag() -> usize {
        thread_local!(static TAG: u8 = const { 0 });
        TAG.with(|t| t as *const u8 as usize)
    }
    let mut r: PJRT_Buffer_ReadyEvent_Args = args();
    r.buffer = b;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Buffer_ReadyEvent.unwrap())(&mut r) });
    let mut o: PJRT_Event_OnReady_Args = args();
    o.event = r.event;
    o.callback = Some(mark);
    o.user_arg = thread_tag() as *mut c_void;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_OnReady.unwrap())(&mut o) });
    assert_eq!(INLINE.load(Ordering::SeqCst), 1);
    await_event(r.event);
    destroy_buffer(b);
}

#[test]
fn older_callers_get_only_the_fields_they_have() {
    // A caller built before 0.113 knows MemoryStats up to `peak_pool_bytes_is_set` (185 bytes):
    // nothing past that may be written.
    const OLD: usize = 185;
    let mut raw = [0xABu8; std::mem::size_of::<PJRT_Device_MemoryStats_Args>()];
    let a = raw.as_mut_ptr().cast::<PJRT_Device_MemoryStats_Args>();
    // SAFETY: `raw` is large enough and suitably aligned for the header fields written here.
    unsafe {
        a.cast::<usize>().write_unaligned(OLD);
        a.cast::<u8>().add(8).cast::<usize>().write_unaligned(0);
        a.cast::<u8>()
            .add(16)
            .cast::<*mut PJRT_Device>()
            .write_unaligned(device());
    }
    // SAFETY: valid memory for `OLD` bytes.
    ok(unsafe { (api().PJRT_Device_MemoryStats.unwrap())(a) });
    assert!(
        raw[OLD..].iter().all(|&b| b == 0xAB),
        "wrote past the caller's struct_size"
    );
    // SAFETY: `num_allocs` lies inside the caller's struct and was written.
    let num_allocs = unsafe { std::ptr::addr_of!((*a).num_allocs).read_unaligned() };
    assert!(num_allocs >= 0);
}

#[test]
fn created_events_carry_errors() {
    let mut c: PJRT_Event_Create_Args = args();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_Create.unwrap())(&mut c) });
    let mut r: PJRT_Event_IsReady_Args = args();
    r.event = c.event;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_IsReady.unwrap())(&mut r) });
    assert!(!r.is_ready);
    let msg = "boom";
    let mut s: PJRT_Event_Set_Args = args();
    s.event = c.event;
    s.error_code = PJRT_Error_Code::INTERNAL;
    s.error_message = msg.as_ptr().cast();
    s.error_message_size = msg.len();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_Set.unwrap())(&mut s) });
    let mut e: PJRT_Event_Error_Args = args();
    e.event = c.event;
    // SAFETY: valid args.
    let err = take_error(unsafe { (api().PJRT_Event_Error.unwrap())(&mut e) }).unwrap();
    assert_eq!(err, (PJRT_Error_Code::INTERNAL, "boom".into()));
    let mut d: PJRT_Event_Destroy_Args = args();
    d.event = c.event;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Event_Destroy.unwrap())(&mut d) });
}

#[test]
fn bad_arguments_are_errors_not_crashes() {
    // Null args.
    // SAFETY: null is an allowed (rejected) input.
    let e = take_error(unsafe { (api().PJRT_Client_PlatformName.unwrap())(null_mut()) }).unwrap();
    assert_eq!(e.0, PJRT_Error_Code::INVALID_ARGUMENT);
    // struct_size too small.
    let mut n: PJRT_Client_PlatformName_Args = args();
    n.struct_size = 8;
    n.client = client();
    // SAFETY: valid memory with a wrong size field.
    let e = take_error(unsafe { (api().PJRT_Client_PlatformName.unwrap())(&mut n) }).unwrap();
    assert_eq!(e.0, PJRT_Error_Code::INVALID_ARGUMENT);
    assert!(e.1.contains("PJRT_Client_PlatformName_Args"), "{}", e.1);
    // A larger struct (newer caller) is fine.
    #[repr(C)]
    struct Bigger {
        inner: PJRT_Client_PlatformName_Args,
        extra: [u64; 4],
    }
    let mut big = Bigger {
        inner: args(),
        extra: [0; 4],
    };
    big.inner.struct_size = std::mem::size_of::<Bigger>();
    big.inner.client = client();
    // SAFETY: valid memory for the larger size.
    ok(unsafe { (api().PJRT_Client_PlatformName.unwrap())(&mut big.inner) });
    // Null handle.
    let mut n: PJRT_Client_PlatformName_Args = args();
    // SAFETY: valid args with a null client.
    let e = take_error(unsafe { (api().PJRT_Client_PlatformName.unwrap())(&mut n) }).unwrap();
    assert_eq!(e.0, PJRT_Error_Code::INVALID_ARGUMENT);
    // Unsupported element type, short host buffer.
    let mut a: PJRT_Client_BufferFromHostBuffer_Args = args();
    a.client = client();
    a.type_ = PJRT_Buffer_Type::TOKEN;
    // SAFETY: valid args.
    let e =
        take_error(unsafe { (api().PJRT_Client_BufferFromHostBuffer.unwrap())(&mut a) }).unwrap();
    assert_eq!(e.0, PJRT_Error_Code::UNIMPLEMENTED);
    // Unsupported program format and unreadable programs.
    let mut opts: Vec<u8> = Vec::new();
    for (fmt, code) in [
        ("tpu_binary", &b"x"[..]),
        ("hlo", &b"x"[..]),
        ("mlir", &b"\xff\xfe not a program"[..]),
    ] {
        let mut p: PJRT_Program = args();
        p.code = code.as_ptr().cast_mut().cast();
        p.code_size = code.len();
        p.format = fmt.as_ptr().cast();
        p.format_size = fmt.len();
        let mut c: PJRT_Client_Compile_Args = args();
        c.client = client();
        c.program = &p;
        c.compile_options = opts.as_mut_ptr().cast();
        // SAFETY: valid args.
        let e = take_error(unsafe { (api().PJRT_Client_Compile.unwrap())(&mut c) }).unwrap();
        assert_ne!(e.0, PJRT_Error_Code::OK, "{fmt}");
    }
    // Entries the plugin does not implement answer UNIMPLEMENTED.
    let mut dm: [u64; 8] = [0; 8];
    dm[0] = 64;
    // SAFETY: an untyped entry never reads its args.
    let e =
        take_error(unsafe { (api().PJRT_Client_DmaMap.unwrap())(dm.as_mut_ptr().cast()) }).unwrap();
    assert_eq!(e.0, PJRT_Error_Code::UNIMPLEMENTED);
    assert!(e.1.contains("PJRT_Client_DmaMap"));
    // ForEachPayload exists and succeeds (no payloads).
    let mut tmp: PJRT_Event_Error_Args = args();
    // SAFETY: null event → an error object to inspect.
    let err = unsafe { (api().PJRT_Event_Error.unwrap())(&mut tmp) };
    let mut fe: PJRT_Error_ForEachPayload_Args = args();
    fe.error = err;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Error_ForEachPayload.unwrap())(&mut fe) });
    // The error's own function table works too.
    // SAFETY: a live error starts with its table pointer.
    let code = unsafe { ((*(*err).vtable).get_code.unwrap())(err) };
    assert_eq!(code, PJRT_Error_Code::INVALID_ARGUMENT);
    assert!(take_error(err).is_some());
    let _ = null::<u8>();
}

/// A serialized `HloModuleProto` of `main(x: f32[4]) -> f32[4] { ROOT add(x, x) }`.
fn hlo_add_module() -> wgpu_hlo::frontend::hlo_proto::schema::HloModuleProto {
    use wgpu_hlo::frontend::hlo_proto::schema::*;
    let v4 = ShapeProto {
        element_type: 11,
        dimensions: vec![4],
        layout: Some(LayoutProto {
            minor_to_major: vec![0],
        }),
        ..Default::default()
    };
    let inst = |id: i64, opcode: &str, operands: Vec<i64>| HloInstructionProto {
        id,
        name: format!("{opcode}.{id}"),
        opcode: opcode.into(),
        shape: Some(v4.clone()),
        operand_ids: operands,
        ..Default::default()
    };
    HloModuleProto {
        name: "add".into(),
        entry_computation_id: 1,
        computations: vec![HloComputationProto {
            id: 1,
            name: "main".into(),
            instructions: vec![inst(1, "parameter", vec![]), inst(2, "add", vec![1, 1])],
            root_id: 2,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn hlo_program_formats_compile() {
    use prost::Message;
    let proto = hlo_add_module();
    let with_config = wgpu_hlo::frontend::hlo_proto::schema::HloModuleProtoWithConfig {
        hlo_module: Some(proto.clone()),
    };
    let mut opts: Vec<u8> = Vec::new();
    for (fmt, code) in [
        ("hlo", proto.encode_to_vec()),
        ("hlo_with_config", with_config.encode_to_vec()),
    ] {
        let mut p: PJRT_Program = args();
        p.code = code.as_ptr().cast_mut().cast();
        p.code_size = code.len();
        p.format = fmt.as_ptr().cast();
        p.format_size = fmt.len();
        let mut c: PJRT_Client_Compile_Args = args();
        c.client = client();
        c.program = &p;
        c.compile_options = opts.as_mut_ptr().cast();
        // SAFETY: valid args.
        ok(unsafe { (api().PJRT_Client_Compile.unwrap())(&mut c) });
        assert!(!c.executable.is_null(), "{fmt}");
        let mut d: PJRT_LoadedExecutable_Destroy_Args = args();
        d.executable = c.executable;
        // SAFETY: valid args; the executable is not used afterwards.
        ok(unsafe { (api().PJRT_LoadedExecutable_Destroy.unwrap())(&mut d) });
    }
}

#[test]
fn concurrent_transfers_from_many_threads() {
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..16u8 {
                    let data: Vec<u8> = (0..64).map(|k| k ^ t ^ i).collect();
                    let b = upload(PJRT_Buffer_Type::U8, &[64], &data, None);
                    assert_eq!(download(b), data);
                    destroy_buffer(b);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn buffers_outlive_their_client() {
    let mut c: PJRT_Client_Create_Args = args();
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Client_Create.unwrap())(&mut c) });
    let data = [1u8, 2, 3, 4];
    let dims = [4i64];
    let mut a: PJRT_Client_BufferFromHostBuffer_Args = args();
    a.client = c.client;
    a.data = data.as_ptr().cast();
    a.type_ = PJRT_Buffer_Type::U8;
    a.dims = dims.as_ptr();
    a.num_dims = 1;
    // SAFETY: valid args.
    ok(unsafe { (api().PJRT_Client_BufferFromHostBuffer.unwrap())(&mut a) });
    await_event(a.done_with_host_buffer);
    let mut d: PJRT_Client_Destroy_Args = args();
    d.client = c.client;
    // SAFETY: valid args; the client is not used afterwards.
    ok(unsafe { (api().PJRT_Client_Destroy.unwrap())(&mut d) });
    let mut dev: PJRT_Buffer_Device_Args = args();
    dev.buffer = a.buffer;
    // SAFETY: valid args; the buffer keeps its client's state alive.
    ok(unsafe { (api().PJRT_Buffer_Device.unwrap())(&mut dev) });
    assert!(!dev.device.is_null());
    assert_eq!(download(a.buffer), data);
    destroy_buffer(a.buffer);
}
