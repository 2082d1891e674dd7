//! `PJRT_Event`: a handle on a runtime [`Event`]. Callers' callbacks run on the thread that
//! completes the event, or at once in `PJRT_Event_OnReady` when it has completed, but never
//! inside `device.poll` or `Queue::submit`: from there they go to one callback thread (see
//! [`run_off_the_poller`]).

use std::ffi::c_void;

use wgpu_hlo::runtime::Event;
use wgpu_hlo::{Error, Result};

use crate::abi::{entry, get, req, set, str_arg, Args};
use crate::error::{into_raw, kind_of};
use crate::ffi::*;

/// What a `PJRT_Event*` points to.
pub(crate) struct EventHandle {
    pub(crate) event: Event,
}

/// Hands a new event handle to the caller, who destroys it with `PJRT_Event_Destroy`.
pub(crate) fn into_raw_event(event: Event) -> *mut PJRT_Event {
    Box::into_raw(Box::new(EventHandle { event })).cast()
}

/// The event behind a caller's handle.
///
/// # Safety
/// `p` is null or a live handle from [`into_raw_event`].
unsafe fn event_ref<'a>(p: *mut PJRT_Event) -> Result<&'a EventHandle> {
    // SAFETY: per contract.
    unsafe { p.cast::<EventHandle>().as_ref() }.ok_or_else(|| Error::invalid("event is null"))
}

/// A `PJRT_Error*` for an event's outcome (null on success).
fn outcome(r: Result<()>) -> *mut PJRT_Error {
    match r {
        Ok(()) => std::ptr::null_mut(),
        Err(e) => into_raw(e),
    }
}

fn destroy(a: &Args<PJRT_Event_Destroy_Args>) -> Result<()> {
    let p = req!(a, event)?;
    if !p.is_null() {
        // SAFETY: a live handle the caller gives up.
        drop(unsafe { Box::from_raw(p.cast::<EventHandle>()) });
    }
    Ok(())
}
entry!(PJRT_Event_Destroy, PJRT_Event_Destroy_Args, destroy);

fn is_ready(a: &Args<PJRT_Event_IsReady_Args>) -> Result<()> {
    let event_handle = req!(a, event)?;
    // SAFETY: a live handle per convention.
    let e = unsafe { event_ref(event_handle) }?;
    set!(a, is_ready, e.event.is_ready());
    Ok(())
}
entry!(PJRT_Event_IsReady, PJRT_Event_IsReady_Args, is_ready);

/// `PJRT_Event_Error`: returns the event's error (a fresh copy each call) or null.
///
/// # Safety
/// PJRT calling convention.
pub(crate) unsafe extern "C" fn PJRT_Event_Error(
    args: *mut PJRT_Event_Error_Args,
) -> *mut PJRT_Error {
    let mut found = None;
    let status = crate::abi::guard("PJRT_Event_Error", || {
        // SAFETY: PJRT calling convention.
        let a = unsafe { Args::new(args, PJRT_Event_Error_Args::STRUCT_SIZE) }?;
        let event_handle = req!(a, event)?;
        // SAFETY: a live handle per convention.
        let e = unsafe { event_ref(event_handle) }?;
        if !e.event.is_ready() {
            return Err(Error::failed_precondition(
                "PJRT_Event_Error called before the event is ready",
            ));
        }
        found = e.event.error();
        Ok(())
    });
    if !status.is_null() {
        return status;
    }
    found.map(into_raw).unwrap_or(std::ptr::null_mut())
}

/// `PJRT_Event_Await`: blocks until the event completes and returns its error or null.
///
/// # Safety
/// PJRT calling convention.
pub(crate) unsafe extern "C" fn PJRT_Event_Await(
    args: *mut PJRT_Event_Await_Args,
) -> *mut PJRT_Error {
    crate::abi::guard("PJRT_Event_Await", || {
        // SAFETY: PJRT calling convention.
        let a = unsafe { Args::new(args, PJRT_Event_Await_Args::STRUCT_SIZE) }?;
        let event_handle = req!(a, event)?;
        // SAFETY: a live handle per convention.
        let e = unsafe { event_ref(event_handle) }?;
        e.event.wait()
    })
}

/// A caller's callback and argument, called once after the event completes (where: see
/// [`run_off_the_poller`]).
struct Callback {
    f: unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void),
    user_arg: *mut c_void,
}
// SAFETY: the PJRT contract for `PJRT_Event_OnReady` lets the callback run on any thread with
// the caller's `user_arg`; we only pass the pointer back.
unsafe impl Send for Callback {}

fn on_ready(a: &Args<PJRT_Event_OnReady_Args>) -> Result<()> {
    let event_handle = req!(a, event)?;
    // SAFETY: a live handle per convention.
    let e = unsafe { event_ref(event_handle) }?;
    let f =
        req!(a, callback)?.ok_or_else(|| Error::invalid("PJRT_Event_OnReady: callback is null"))?;
    let cb = Callback {
        f,
        user_arg: get!(a, user_arg).unwrap_or(std::ptr::null_mut()),
    };
    e.event.on_ready(move |r| {
        run_off_the_poller(Box::new(move || {
            let cb = cb;
            let err = outcome(r);
            // SAFETY: the caller's callback with its own argument; it takes ownership of `err`.
            let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
                (cb.f)(err, cb.user_arg)
            }));
            if call.is_err() {
                log::error!("PJRT_Event_OnReady callback panicked");
            }
        }));
    });
    Ok(())
}

/// A caller's callback with its outcome, ready to run.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// Runs a caller's `PJRT_Event_OnReady` callback where it cannot stop completions. A caller's
/// callback runs code we do not control (jaxlib's future continuations), and one that blocked
/// on anything needing the device poll (another event, a read-back) while the thread it runs
/// on held the poll would stop every completion in the process until the watchdog fails them
/// all. A thread outside `device.poll` and `Queue::submit` (`inside_device_call`) runs it at
/// once: a polling thread that has given up its turn, so the waiter it wakes is one thread
/// hop from the device's signal; a caller's own thread, in `PJRT_Event_OnReady` on an event
/// already complete (as XLA's own plugins do), so the caller finds its future set with no hop
/// at all. A thread inside a device call (where read-backs complete) hands it to one callback
/// thread, which runs them in order; there such a callback only holds up later ones.
fn run_off_the_poller(job: Job) {
    if !wgpu_hlo::runtime::inside_device_call() {
        job();
        return;
    }
    use std::sync::mpsc::{channel, Sender};
    use std::sync::OnceLock;
    static RUNNER: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    let runner = RUNNER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("wgpu-hlo-events".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    });
    let job = match runner {
        Some(tx) => match tx.send(job) {
            Ok(()) => return,
            Err(std::sync::mpsc::SendError(job)) => job,
        },
        // No thread could be started: run it here rather than never.
        None => job,
    };
    job();
}
entry!(PJRT_Event_OnReady, PJRT_Event_OnReady_Args, on_ready);

fn create(a: &Args<PJRT_Event_Create_Args>) -> Result<()> {
    set!(a, event, into_raw_event(Event::pending()));
    Ok(())
}
entry!(PJRT_Event_Create, PJRT_Event_Create_Args, create);

fn set_event(a: &Args<PJRT_Event_Set_Args>) -> Result<()> {
    let event_handle = req!(a, event)?;
    // SAFETY: a live handle per convention.
    let e = unsafe { event_ref(event_handle) }?;
    let code = req!(a, error_code)?;
    if code == PJRT_Error_Code::OK {
        e.event.set(Ok(()));
    } else {
        let text = get!(a, error_message).unwrap_or(std::ptr::null());
        let len = get!(a, error_message_size).unwrap_or(0);
        // SAFETY: caller's message bytes, valid during the call.
        let msg = unsafe { str_arg(text, len, "error_message") }?;
        e.event.set(Err(Error::new(kind_of(code), msg)));
    }
    Ok(())
}
entry!(PJRT_Event_Set, PJRT_Event_Set_Args, set_event);
