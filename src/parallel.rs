//! Work spread over the host's cores while compiling: generated kernels are rewritten,
//! validated and turned into pipelines independently of each other, and parsing a large
//! generated WGSL module costs tens of milliseconds (naga's front end grows superlinearly with
//! a function's expressions), so a model with a hundred kernels spent seconds on one core.

use std::sync::Mutex;

/// Threads that compile work may use: `WGPU_HLO_COMPILE_THREADS` (1 = on the calling thread
/// only), else the host's available parallelism, at most 8.
pub fn compile_threads() -> usize {
    if let Some(n) = std::env::var("WGPU_HLO_COMPILE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n.clamp(1, 64);
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// Calls `f` on every item, on up to [`compile_threads`] threads (the calling thread among
/// them), each taking the next untaken item; returns when all are done. A panic in `f`
/// propagates to the caller once every thread has stopped.
pub fn for_each_mut<T: Send>(items: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
    let threads = compile_threads().min(items.len());
    if threads <= 1 {
        for (i, item) in items.iter_mut().enumerate() {
            f(i, item);
        }
        return;
    }
    let next = Mutex::new(items.iter_mut().enumerate());
    let work = || loop {
        // The lock is held only to take an item; a panicking `f` never holds it.
        let taken = next.lock().unwrap_or_else(|p| p.into_inner()).next();
        match taken {
            Some((i, item)) => f(i, item),
            None => break,
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            // Named, so that a crash report or a debugger tells compile threads apart; one
            // that cannot start leaves its share to the others and the calling thread.
            let _ = std::thread::Builder::new()
                .name("wgpu-hlo-compile".into())
                .spawn_scoped(s, work);
        }
        work();
    });
}

/// `f` of every item, in the items' order, computed as [`for_each_mut`] does.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let mut out: Vec<(Option<&T>, Option<R>)> = items.iter().map(|t| (Some(t), None)).collect();
    for_each_mut(&mut out, |_, (t, r)| *r = t.take().map(&f));
    out.into_iter().filter_map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_once_in_place() {
        let mut v: Vec<u64> = (0..1000).collect();
        for_each_mut(&mut v, |i, x| {
            assert_eq!(*x, i as u64);
            *x = *x * 2 + 1;
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == 2 * i as u64 + 1));
        assert_eq!(map(&v, |x| x + 1)[..3], [2, 4, 6]);
        let mut empty: Vec<u8> = Vec::new();
        for_each_mut(&mut empty, |_, _| unreachable!());
    }
}
