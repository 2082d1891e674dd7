//! Completion events: set once by the device's poller thread when queued GPU work finishes,
//! awaited or observed by callbacks from any thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};

type Callback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

enum State {
    Pending(Vec<Callback>),
    Done(Result<()>),
}

struct Inner {
    state: Mutex<State>,
    cv: Condvar,
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
        Event(Arc::new(Inner {
            state: Mutex::new(state),
            cv: Condvar::new(),
        }))
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

    /// Blocks until the event completes and returns its result.
    pub fn wait(&self) -> Result<()> {
        let mut st = lock(&self.0);
        loop {
            if let State::Done(r) = &*st {
                return r.clone();
            }
            st = self.0.cv.wait(st).unwrap_or_else(|p| p.into_inner());
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
        let pending: Vec<&Event> = events.iter().filter(|e| !e.is_ready()).collect();
        if let Some(e) = events.iter().find_map(Event::error) {
            return Event::failed(e);
        }
        if pending.is_empty() {
            return Event::ready();
        }
        let joined = Event::pending();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
