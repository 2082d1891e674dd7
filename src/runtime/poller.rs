//! The owner of `device.poll`: polling threads that complete submission events and drive
//! `map_async` callbacks, and the bounded non-blocking polls of a submitting thread.
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
//! - a few threads take turns at it (leader and followers): one polls; when its wait returns
//!   it gives up the turn, waking a follower only if more work is pending, and then completes
//!   the event itself, running its callbacks on this thread. A framework's callback (jaxlib
//!   sets the future a blocked thread waits on) therefore runs on the thread the device woke,
//!   without a hand-off to another thread first, and a callback that blocks holds up no
//!   completion: another thread polls meanwhile, and one is started when none is idle.
//! - a short execution may instead be completed by the thread that submitted it: it polls
//!   without blocking for a bounded time (`spin`), so on a CPU adapter, where each thread
//!   wake-up costs more than a small kernel runs, a tiny call returns with its event already
//!   complete and nobody waits for a wake-up.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::event::{deadline_error, wait_timeout, Event};
use crate::error::{Error, ErrorKind};

/// See `Poller::spin_limit`.
fn spin_limit(cpu: bool) -> Duration {
    let us = std::env::var("WGPU_HLO_SPIN_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(if cpu { 250 } else { 0 });
    Duration::from_micros(us.min(100_000))
}

/// How often the watchdog looks at the oldest submission.
const WATCHDOG_PERIOD: Duration = Duration::from_millis(200);

/// Polling threads started with the device, and the most there may be (more start only
/// while every one is inside callbacks).
const FIRST_THREADS: usize = 2;
const MAX_THREADS: usize = 16;

thread_local! {
    /// Set while this thread is inside `device.poll` or `Queue::submit` (see
    /// `inside_device_call`).
    static IN_DEVICE_CALL: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread is inside `device.poll` or `Queue::submit`, where wgpu runs
/// `map_async` callbacks: a read-back completes there, and a framework callback run there
/// that blocked on more device work would hold the poll it needs. Anywhere else (a polling
/// thread that has given up its turn, a caller's own thread) such a callback may run at once,
/// even block: another thread polls meanwhile.
pub fn inside_device_call() -> bool {
    IN_DEVICE_CALL.with(|c| c.get())
}

/// Runs `f` marked as inside a device call (see `inside_device_call`).
fn in_device_call<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_DEVICE_CALL.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(IN_DEVICE_CALL.with(|c| c.replace(true)));
    f()
}

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
    /// A thread holds the turn at `device.poll`.
    leader: bool,
    /// Threads waiting for the turn.
    idle: usize,
    /// Polling threads started.
    threads: usize,
}

/// Completion tracking for one device (see the module comment).
pub(crate) struct Poller {
    state: Mutex<State>,
    cv: Condvar,
    /// Wakes the watchdog at shutdown (its own: a `notify_one` meant for a polling thread
    /// must never wake it instead).
    watchdog_cv: Condvar,
    adapter: String,
    /// The device, polled by the polling threads and by `spin`.
    device: wgpu::Device,
    /// The longest a submission may spin for its completion (`spin_limit`).
    spin_limit: Duration,
    /// The polling threads and the watchdog, joined by `shutdown`: each holds the poller and
    /// so its device, and when that is the last clone, dropping it destroys the Vulkan
    /// instance and unloads the driver.
    /// Left to run past `main`, that unload raced the process's exit handlers, which then
    /// called into the unmapped driver (a rare SIGSEGV at exit under load, seen in CI). The
    /// watchdog was not joined until 2026-11-27: on an H200 it woke after jaxlib had
    /// destroyed the client, dropped the last clone and died inside NVIDIA's driver during
    /// the exit of most JAX processes.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// How long `shutdown` waits for the polling thread (it may be blocked in a hung driver).
const JOIN_LIMIT: Duration = Duration::from_secs(5);

impl Poller {
    /// Starts the polling threads for `device`; `cpu` says the adapter is a CPU (see
    /// `spin_limit`).
    pub(crate) fn start(
        device: wgpu::Device,
        adapter: &str,
        cpu: bool,
    ) -> crate::Result<Arc<Poller>> {
        let poller = Arc::new(Poller {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            watchdog_cv: Condvar::new(),
            adapter: adapter.to_string(),
            device,
            spin_limit: spin_limit(cpu),
            threads: Mutex::new(Vec::new()),
        });
        for _ in 0..FIRST_THREADS {
            poller.lock().threads += 1;
            if let Err(e) = poller.spawn() {
                poller.shutdown();
                return Err(e);
            }
        }
        let p = poller.clone();
        let watchdog = std::thread::Builder::new()
            .name("wgpu-hlo-watchdog".into())
            .spawn(move || p.watch());
        match watchdog {
            // Joined by `shutdown` with the polling threads: it holds the poller too.
            Ok(handle) => poller
                .threads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(handle),
            Err(e) => {
                poller.shutdown();
                return Err(Error::internal(format!(
                    "cannot start the watchdog thread: {e}"
                )));
            }
        }
        Ok(poller)
    }

    /// Starts one more polling thread (counted in `threads` by the caller).
    fn spawn(self: &Arc<Self>) -> crate::Result<()> {
        let p = self.clone();
        let spawned = std::thread::Builder::new()
            .name("wgpu-hlo-poller".into())
            .spawn(move || p.run());
        match spawned {
            Ok(handle) => {
                self.threads
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(handle);
                Ok(())
            }
            Err(e) => {
                self.lock().threads -= 1;
                Err(Error::internal(format!(
                    "cannot start a poller thread: {e}"
                )))
            }
        }
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
    /// them; `what` names the work in errors. With a nonzero `spin` (at most `spin_limit`),
    /// this thread first polls for the work's completion for up to that long, and returns
    /// the event completed if it saw it finish (see `spin`).
    pub(crate) fn submit(
        &self,
        queue: &wgpu::Queue,
        cmds: Vec<wgpu::CommandBuffer>,
        what: &str,
        spin: Duration,
        after: impl FnOnce(&Event),
    ) -> Event {
        if let Some(e) = self.broken() {
            let event = Event::failed(e);
            after(&event);
            return event;
        }
        let index = in_device_call(|| queue.submit(cmds));
        let event = Event::queued(what);
        // Before the spin: a read-back mapped here completes in the poll that sees the
        // submission finish (`Device::map_reads` without waking).
        after(&event);
        let done = !spin.is_zero() && self.spin(spin.min(self.spin_limit));
        let mut st = self.lock();
        if let Some(e) = st.broken.clone() {
            drop(st);
            event.set(Err(e));
            return event;
        }
        if done && st.queue.is_empty() {
            // A map that `after` started and the spin's polls did not finish is left to
            // the polling threads.
            let maps = st.maps > 0;
            drop(st);
            if maps {
                self.cv.notify_one();
            }
            event.set(Ok(()));
            return event;
        }
        st.queue.push_back(Pending {
            index,
            event: event.clone(),
            since: Instant::now(),
        });
        drop(st);
        self.cv.notify_one();
        event
    }

    /// The longest `submit` may spin for a submission's completion: `WGPU_HLO_SPIN_US`
    /// (microseconds) if set, else 250 µs on a CPU adapter and none on others.
    pub(crate) fn spin_limit(&self) -> Duration {
        self.spin_limit
    }

    /// Polls without blocking, yielding the CPU between polls, until no submission is in
    /// flight (true) or `budget` has passed (false). Only when no event of ours is pending
    /// when it starts: then an empty queue means the submission just made has finished.
    ///
    /// Why: a short execution's event is otherwise completed by a polling thread that the
    /// driver wakes, and the caller waiting on it is woken by that thread in turn. On a CPU
    /// adapter (lavapipe) each wake-up costs 10-30 µs of a core the device's own threads
    /// need, more than a small kernel runs: the caller that sees the work finish itself gets
    /// its event completed, and no thread has to wake (a non-blocking poll is what every
    /// `Queue::submit` runs too, so it cannot race the polling threads' waits).
    fn spin(&self, budget: Duration) -> bool {
        if !self.lock().queue.is_empty() {
            return false;
        }
        let start = Instant::now();
        loop {
            match self.poll(wgpu::PollType::Poll) {
                Some(Ok(wgpu::PollStatus::QueueEmpty)) => return true,
                Some(Ok(_)) => {}
                _ => return false,
            }
            if start.elapsed() >= budget {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Polls without blocking, yielding the CPU between polls, until `done()` (the caller's
    /// own test, such as a map callback having run) or `budget` has passed; returns whether
    /// `done()` said so. A non-blocking poll cannot race the polling threads' waits (see
    /// `spin`).
    pub(crate) fn spin_until(&self, budget: Duration, done: &mut dyn FnMut() -> bool) -> bool {
        let start = Instant::now();
        loop {
            if done() {
                return true;
            }
            if self.poll(wgpu::PollType::Poll).is_none_or(|r| r.is_err()) {
                return done();
            }
            if done() {
                return true;
            }
            if start.elapsed() >= budget {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Counts a `map_async` whose callback is still to come (the poller keeps polling).
    pub(crate) fn map_started(&self) {
        self.lock().maps += 1;
        self.cv.notify_one();
    }

    /// `map_started` without waking a polling thread: for a map started inside `submit`'s
    /// `after`, which wakes one itself unless its spin saw the map finish.
    pub(crate) fn map_started_quietly(&self) {
        self.lock().maps += 1;
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
            self.cv.notify_one();
        }
    }

    /// Stops the threads (pending events fail) and waits, up to `JOIN_LIMIT` in all, until
    /// they have exited and dropped their hold on the device.
    pub(crate) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.cv.notify_all();
        self.watchdog_cv.notify_all();
        self.break_with(Error::new(
            ErrorKind::Cancelled,
            format!("the device on {} was closed", self.adapter),
        ));
        let handles = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let start = Instant::now();
        for handle in handles {
            if handle.thread().id() == std::thread::current().id() {
                // The last reference was dropped by a callback on a polling thread itself.
                continue;
            }
            while !handle.is_finished() {
                if start.elapsed() > JOIN_LIMIT {
                    log::warn!(
                        "a poller of {} did not stop within {JOIN_LIMIT:?}; leaving it",
                        self.adapter
                    );
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let _ = handle.join();
        }
    }

    /// One polling thread: waits for the turn, polls, gives the turn up, then completes
    /// what the poll finished (see the module comment).
    fn run(self: Arc<Self>) {
        loop {
            let target = {
                let mut st = self.lock();
                st.idle += 1;
                while !st.shutdown
                    && st.broken.is_none()
                    && (st.leader || (st.queue.is_empty() && st.maps == 0 && !st.sweep))
                {
                    st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                st.idle -= 1;
                if st.shutdown || st.broken.is_some() {
                    return;
                }
                st.leader = true;
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
            let polled = self.poll(poll_type);
            if target.is_none() && matches!(polled, Some(Ok(_))) {
                // Only map callbacks are due: they fire on a later poll. The turn is kept
                // meanwhile, so the threads do not take turns at polling idly.
                std::thread::sleep(Duration::from_micros(200));
            }
            let (done, more, spawn) = {
                let mut st = self.lock();
                st.leader = false;
                let done = match (&polled, &target) {
                    (Some(Ok(_)), Some(_)) => st.queue.pop_front(),
                    _ => None,
                };
                let more = !st.queue.is_empty() || st.maps > 0 || st.sweep;
                // Every other thread is inside callbacks, any of which may block: one more
                // keeps the device polled while this one runs its own.
                let spawn = done.is_some() && st.idle == 0 && st.threads < MAX_THREADS;
                if spawn {
                    st.threads += 1;
                }
                (done, more, spawn)
            };
            if more {
                self.cv.notify_one();
            }
            match polled {
                None => return,
                Some(Err(e)) => {
                    self.break_with(Error::new(
                        ErrorKind::Unavailable,
                        format!("polling the device on {} failed: {e}", self.adapter),
                    ));
                    return;
                }
                Some(Ok(_)) => {}
            }
            if spawn {
                if let Err(e) = self.spawn() {
                    log::warn!("{e}");
                }
            }
            if let Some(p) = done {
                let set =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.event.set(Ok(()))));
                if set.is_err() {
                    log::error!("a completion callback panicked on {}", self.adapter);
                }
            }
        }
    }

    /// The watchdog: fails everything once the oldest submission is older than the deadline.
    fn watch(&self) {
        loop {
            let limit = wait_timeout();
            let overdue = {
                let st = self.lock();
                // Woken early by `shutdown`.
                let (st, _) = self
                    .watchdog_cv
                    .wait_timeout_while(st, WATCHDOG_PERIOD, |st| {
                        !st.shutdown && st.broken.is_none()
                    })
                    .unwrap_or_else(|p| p.into_inner());
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
    fn poll(&self, poll_type: wgpu::PollType) -> Option<Result<wgpu::PollStatus, wgpu::PollError>> {
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            in_device_call(|| self.device.poll(poll_type))
        }));
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
