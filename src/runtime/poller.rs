//! The one owner of `device.poll`: a thread that completes submission events and drives
//! `map_async` callbacks.
//!
//! Why it is built this way:
//! - it only ever waits for a submission index that `Queue::submit` has already returned,
//!   and waits without a timeout. wgpu-core asserts, after a wait, that an empty queue means
//!   the fence reached the index waited for. Two ways break that under concurrent submits
//!   (whose `submit` runs a non-blocking maintenance of its own): `Wait { submission_index:
//!   None }` reads an index a concurrent `submit` has advanced but not yet registered; and a
//!   wait that times out reads a stale fence value while the other maintenance retires the
//!   submission. The panic that follows used to kill the poller and hang every later wait.
//!   A wait on a registered index that returns only once the fence reached it has neither.
//! - an event is completed only after a wait for its own index succeeded, so submissions may
//!   be recorded here in any order without a lock around `submit` (wgpu fires callbacks
//!   from inside `submit`; a lock held across it could deadlock against them).
//! - a watchdog thread enforces the deadline (`WGPU_HLO_TIMEOUT`) on the oldest submission,
//!   since the poller itself may be blocked in the driver; if polling fails or panics, or the
//!   deadline passes, every pending event completes with the error and every later submission
//!   fails with it: nothing waits forever.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::event::{deadline_error, wait_timeout, Event};
use crate::error::{Error, ErrorKind};

/// How often the watchdog looks at the oldest submission.
const WATCHDOG_PERIOD: Duration = Duration::from_millis(200);

struct Pending {
    index: wgpu::SubmissionIndex,
    event: Event,
    since: Instant,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    /// `map_async` callbacks not yet called.
    maps: usize,
    /// Resources were released: one non-blocking poll lets wgpu free them.
    sweep: bool,
    /// Set once polling failed for good; every later submission fails with it.
    broken: Option<Error>,
    shutdown: bool,
}

/// Completion tracking for one device (see the module comment).
pub(crate) struct Poller {
    state: Mutex<State>,
    cv: Condvar,
    adapter: String,
    /// The polling thread, joined by `shutdown`: it holds a `wgpu::Device`, and when its
    /// clone is the last one, dropping it destroys the Vulkan instance and unloads the driver.
    /// Left to run past `main`, that unload raced the process's exit handlers, which then
    /// called into the unmapped driver (a rare SIGSEGV at exit under load, seen in CI).
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// How long `shutdown` waits for the polling thread (it may be blocked in a hung driver).
const JOIN_LIMIT: Duration = Duration::from_secs(5);

impl Poller {
    /// Starts the polling thread for `device`.
    pub(crate) fn start(device: wgpu::Device, adapter: &str) -> crate::Result<Arc<Poller>> {
        let poller = Arc::new(Poller {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            adapter: adapter.to_string(),
            thread: Mutex::new(None),
        });
        let p = poller.clone();
        let handle = std::thread::Builder::new()
            .name("wgpu-hlo-poller".into())
            .spawn(move || p.run(device))
            .map_err(|e| Error::internal(format!("cannot start the poller thread: {e}")))?;
        *poller.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        let p = poller.clone();
        std::thread::Builder::new()
            .name("wgpu-hlo-watchdog".into())
            .spawn(move || p.watch())
            .map_err(|e| Error::internal(format!("cannot start the watchdog thread: {e}")))?;
        Ok(poller)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error that stopped polling, if it has stopped.
    pub(crate) fn broken(&self) -> Option<Error> {
        self.lock().broken.clone()
    }

    /// Marks the device unusable: pending events fail with `e`, later submissions too.
    pub(crate) fn break_with(&self, e: Error) {
        let drained: Vec<Pending> = {
            let mut st = self.lock();
            if st.broken.is_none() {
                st.broken = Some(e.clone());
            }
            st.queue.drain(..).collect()
        };
        self.cv.notify_all();
        for p in drained {
            p.event.set(Err(e.clone()));
        }
    }

    /// Submits `cmds` with `queue` and returns the event completed when the device has run
    /// them; `what` names the work in errors.
    pub(crate) fn submit(
        &self,
        queue: &wgpu::Queue,
        cmds: Vec<wgpu::CommandBuffer>,
        what: &str,
    ) -> Event {
        if let Some(e) = self.broken() {
            return Event::failed(e);
        }
        let index = queue.submit(cmds);
        let event = Event::queued(what);
        let mut st = self.lock();
        if let Some(e) = st.broken.clone() {
            drop(st);
            event.set(Err(e));
            return event;
        }
        st.queue.push_back(Pending {
            index,
            event: event.clone(),
            since: Instant::now(),
        });
        drop(st);
        self.cv.notify_all();
        event
    }

    /// Counts a `map_async` whose callback is still to come (the poller keeps polling).
    pub(crate) fn map_started(&self) {
        self.lock().maps += 1;
        self.cv.notify_all();
    }

    /// The callback of a `map_async` has run.
    pub(crate) fn map_finished(&self) {
        let mut st = self.lock();
        st.maps = st.maps.saturating_sub(1);
    }

    /// Asks for one non-blocking poll so wgpu frees released resources.
    pub(crate) fn sweep(&self) {
        let mut st = self.lock();
        if !st.sweep {
            st.sweep = true;
            drop(st);
            self.cv.notify_all();
        }
    }

    /// Stops the thread (pending events fail) and waits, up to `JOIN_LIMIT`, until it has
    /// exited and dropped its device handle.
    pub(crate) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
        self.break_with(Error::new(
            ErrorKind::Cancelled,
            format!("the device on {} was closed", self.adapter),
        ));
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(handle) = handle else { return };
        if handle.thread().id() == std::thread::current().id() {
            // The last reference was dropped by a callback on the poller thread itself.
            return;
        }
        let start = Instant::now();
        while !handle.is_finished() {
            if start.elapsed() > JOIN_LIMIT {
                log::warn!(
                    "the poller of {} did not stop within {JOIN_LIMIT:?}; leaving it",
                    self.adapter
                );
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = handle.join();
    }

    fn run(self: Arc<Self>, device: wgpu::Device) {
        loop {
            let target = {
                let mut st = self.lock();
                while !st.shutdown && st.queue.is_empty() && st.maps == 0 && !st.sweep {
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                if st.shutdown {
                    return;
                }
                st.sweep = false;
                st.queue.front().map(|p| p.index.clone())
            };
            let poll_type = match &target {
                Some(index) => wgpu::PollType::Wait {
                    submission_index: Some(index.clone()),
                    timeout: None,
                },
                None => wgpu::PollType::Poll,
            };
            match self.poll(&device, poll_type) {
                None => return,
                Some(Err(e)) => {
                    self.break_with(Error::new(
                        ErrorKind::Unavailable,
                        format!("polling the device on {} failed: {e}", self.adapter),
                    ));
                    return;
                }
                Some(Ok(_)) => {
                    if target.is_some() {
                        let done = self.lock().queue.pop_front();
                        if let Some(p) = done {
                            p.event.set(Ok(()));
                        }
                    } else {
                        // Only map callbacks are due: they fire on a later poll.
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }
        }
    }

    /// The watchdog: fails everything once the oldest submission is older than the deadline.
    fn watch(&self) {
        loop {
            std::thread::sleep(WATCHDOG_PERIOD);
            let limit = wait_timeout();
            let overdue = {
                let st = self.lock();
                if st.shutdown || st.broken.is_some() {
                    return;
                }
                st.queue
                    .front()
                    .filter(|p| p.since.elapsed() > limit)
                    .map(|p| p.event.what().to_string())
            };
            if let Some(what) = overdue {
                self.break_with(deadline_error(
                    &format!("{what} on {}", self.adapter),
                    limit,
                ));
                return;
            }
        }
    }

    /// One `device.poll`; `None` when it panicked (the poller is then broken).
    fn poll(
        &self,
        device: &wgpu::Device,
        poll_type: wgpu::PollType,
    ) -> Option<Result<wgpu::PollStatus, wgpu::PollError>> {
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.poll(poll_type)));
        match polled {
            Ok(r) => Some(r),
            Err(panic) => {
                let msg = crate::error::panic_message(panic.as_ref());
                self.break_with(Error::new(
                    ErrorKind::Unavailable,
                    format!("polling the device on {} panicked: {msg}", self.adapter),
                ));
                None
            }
        }
    }
}
