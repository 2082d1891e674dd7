//! Completion events: set once by the device's poller thread when queued GPU work finishes,
//! awaited or observed by callbacks from any thread. Every blocking wait has a deadline
//! (`WGPU_HLO_TIMEOUT`, seconds): past it the wait fails with DEADLINE_EXCEEDED naming what
//! it waited for, never a hang.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// Default for `WGPU_HLO_TIMEOUT`: long enough for the slowest legitimate program on a
/// software adapter, short enough that a lost completion is an error within minutes.
const DEFAULT_TIMEOUT_SECS: f64 = 600.0;

/// The deadline in nanoseconds; 0 until first read from the environment.
static TIMEOUT_NANOS: AtomicU64 = AtomicU64::new(0);

/// How long a blocking wait may last: `set_wait_timeout`'s value, else `WGPU_HLO_TIMEOUT`
/// (seconds, fractions allowed), else 600 s.
pub fn wait_timeout() -> Duration {
    let n = TIMEOUT_NANOS.load(Ordering::Relaxed);
    if n != 0 {
        return Duration::from_nanos(n);
    }
    let d = std::env::var("WGPU_HLO_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs_f64(DEFAULT_TIMEOUT_SECS));
    let _ = TIMEOUT_NANOS.compare_exchange(0, nanos(d), Ordering::Relaxed, Ordering::Relaxed);
    Duration::from_nanos(TIMEOUT_NANOS.load(Ordering::Relaxed))
}

/// Sets the deadline of every later wait in this process (overrides `WGPU_HLO_TIMEOUT`).
pub fn set_wait_timeout(limit: Duration) {
    TIMEOUT_NANOS.store(nanos(limit), Ordering::Relaxed);
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// The error of a wait that ran past its deadline.
pub fn deadline_error(what: &str, waited: Duration) -> Error {
    Error::new(
        ErrorKind::DeadlineExceeded,
        format!(
            "timed out after {:.1} s waiting for {what} (WGPU_HLO_TIMEOUT sets the limit in seconds)",
            waited.as_secs_f64()
        ),
    )
}

type Callback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

enum State {
    Pending(Vec<Callback>),
    Done(Result<()>),
}

struct Inner {
    state: Mutex<State>,
    cv: Condvar,
    /// What completes it, for error messages (`execution of jit_f`, `read-back`, ...).
    what: String,
    /// The work that completes it is already on the device queue: later queue work is
    /// ordered after it without anyone waiting on the host.
    queued: bool,
}

/// A one-shot completion signal with an optional error. Cheap to clone; all clones observe
/// the same completion.
#[derive(Clone)]
pub struct Event(Arc<Inner>);

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event(ready: {})", self.is_ready())
    }
}

fn lock(inner: &Inner) -> MutexGuard<'_, State> {
    // A callback that panicked while holding the lock must not wedge every later waiter.
    inner.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Event {
    fn with_state(state: State) -> Event {
        Self::make(state, String::from("an event"), false)
    }

    fn make(state: State, what: String, queued: bool) -> Event {
        Event(Arc::new(Inner {
            state: Mutex::new(state),
            cv: Condvar::new(),
            what,
            queued,
        }))
    }

    /// A pending event for work already submitted to the device queue (`what` names it).
    pub(crate) fn queued(what: impl Into<String>) -> Event {
        Self::make(State::Pending(Vec::new()), what.into(), true)
    }

    /// True when the work behind this event is on the device queue or done, so queue work
    /// submitted later is ordered after it without a host wait.
    pub fn is_queued(&self) -> bool {
        self.0.queued || self.is_ready()
    }

    /// What the event stands for.
    pub fn what(&self) -> &str {
        &self.0.what
    }

    /// An event that has already completed successfully.
    pub fn ready() -> Event {
        Self::with_state(State::Done(Ok(())))
    }

    /// An event that has already failed with `e`.
    pub fn failed(e: Error) -> Event {
        Self::with_state(State::Done(Err(e)))
    }

    /// A pending event; completing it is the job of whoever holds the returned `Event` and
    /// calls `set`.
    pub fn pending() -> Event {
        Self::with_state(State::Pending(Vec::new()))
    }

    /// Completes the event with `result` and runs the registered callbacks. Later calls are
    /// ignored (the first result wins).
    pub fn set(&self, result: Result<()>) {
        let callbacks = {
            let mut st = lock(&self.0);
            match &mut *st {
                State::Done(_) => return,
                State::Pending(cbs) => {
                    let cbs = std::mem::take(cbs);
                    *st = State::Done(result.clone());
                    cbs
                }
            }
        };
        self.0.cv.notify_all();
        for cb in callbacks {
            cb(result.clone());
        }
    }

    /// True once the event has completed (successfully or not).
    pub fn is_ready(&self) -> bool {
        matches!(*lock(&self.0), State::Done(_))
    }

    /// The error the event completed with, if it has completed with one.
    pub fn error(&self) -> Option<Error> {
        match &*lock(&self.0) {
            State::Done(Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    /// Blocks until the event completes and returns its result; DEADLINE_EXCEEDED after
    /// `wait_timeout()`.
    pub fn wait(&self) -> Result<()> {
        let limit = wait_timeout();
        match self.wait_timeout(limit) {
            Some(r) => r,
            None => Err(deadline_error(&self.0.what, limit)),
        }
    }

    /// Blocks up to `timeout`; `None` if the event is still pending then.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<()>> {
        let st = lock(&self.0);
        let (st, _) = self
            .0
            .cv
            .wait_timeout_while(st, timeout, |s| matches!(s, State::Pending(_)))
            .unwrap_or_else(|p| p.into_inner());
        match &*st {
            State::Done(r) => Some(r.clone()),
            State::Pending(_) => None,
        }
    }

    /// Runs `f` with the result once the event completes — at once, on this thread, if it
    /// already has; otherwise on the thread that completes it.
    pub fn on_ready(&self, f: impl FnOnce(Result<()>) + Send + 'static) {
        let mut st = lock(&self.0);
        match &mut *st {
            State::Pending(cbs) => cbs.push(Box::new(f)),
            State::Done(r) => {
                let r = r.clone();
                drop(st);
                f(r);
            }
        }
    }

    /// An event that completes when all of `events` have, with the first error among them.
    pub fn all(events: &[Event]) -> Event {
        // Each distinct event once: an execution's inputs often share their producer's event.
        let mut pending: Vec<&Event> = Vec::new();
        for e in events {
            if !e.is_ready() && !pending.iter().any(|p| Arc::ptr_eq(&p.0, &e.0)) {
                pending.push(e);
            }
        }
        if let Some(e) = events.iter().find_map(Event::error) {
            return Event::failed(e);
        }
        if pending.is_empty() {
            return Event::ready();
        }
        let what = joined_label(pending.iter().map(|e| e.what()));
        let queued = pending.iter().all(|e| e.is_queued());
        let joined = Event::make(State::Pending(Vec::new()), what, queued);
        let remaining = Arc::new(Mutex::new((pending.len(), None::<Error>)));
        for e in pending {
            let joined = joined.clone();
            let remaining = remaining.clone();
            e.on_ready(move |r| {
                let mut g = remaining.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(err) = r {
                    g.1.get_or_insert(err);
                }
                g.0 -= 1;
                if g.0 == 0 {
                    let result = match g.1.take() {
                        Some(err) => Err(err),
                        None => Ok(()),
                    };
                    drop(g);
                    joined.set(result);
                }
            });
        }
        joined
    }
}

/// Most bytes of a joined event's label. Labels nest (an execution's event joins its inputs'
/// events, themselves joins of earlier executions): unbounded, a training loop enqueued
/// ahead grew them geometrically, until one allocation of 409 GB aborted the process.
const MAX_LABEL: usize = 240;

/// `labels` joined by ", " within [`MAX_LABEL`] bytes, then how many were left out.
fn joined_label<'a>(labels: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    let mut left_out = 0usize;
    for l in labels {
        if out.is_empty() {
            let mut end = l.len().min(MAX_LABEL);
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            out.push_str(&l[..end]);
        } else if out.len() + 2 + l.len() <= MAX_LABEL {
            out.push_str(", ");
            out.push_str(l);
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        out.push_str(&format!(" and {left_out} more"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn joined_labels_stay_bounded() {
        // Steps enqueued ahead: each joins its own event with ten pending inputs, all from
        // the step before.
        let mut prev = Event::queued("execution of jit_step");
        for _ in 0..60 {
            let inputs: Vec<Event> = (0..10)
                .map(|_| prev.clone())
                .chain([Event::queued("execution of jit_step")])
                .collect();
            prev = Event::all(&inputs);
            assert!(prev.what().len() <= MAX_LABEL + 32, "{}", prev.what().len());
        }
        let many: Vec<Event> = (0..100)
            .map(|i| Event::queued(format!("run {i}")))
            .collect();
        let w = Event::all(&many).what().to_string();
        assert!(w.starts_with("run 0, run 1") && w.ends_with("more"), "{w}");
    }

    #[test]
    fn callbacks_run_once_and_waiters_wake() {
        let e = Event::pending();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        e.on_ready(move |r| {
            assert!(r.is_ok());
            h.fetch_add(1, Ordering::SeqCst);
        });
        let e2 = e.clone();
        let t = std::thread::spawn(move || e2.wait());
        e.set(Ok(()));
        e.set(Err(Error::internal("ignored")));
        assert!(t.join().unwrap().is_ok());
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert!(e.error().is_none());
    }

    #[test]
    fn all_reports_first_error() {
        let a = Event::pending();
        let b = Event::pending();
        let j = Event::all(&[a.clone(), b.clone(), Event::ready()]);
        a.set(Err(Error::internal("boom")));
        assert!(!j.is_ready());
        b.set(Ok(()));
        assert_eq!(j.wait().unwrap_err().message, "boom");
    }
}
