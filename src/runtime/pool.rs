//! The device's buffer pool: storage buffers no tensor uses any more, by size, for the next
//! allocation of that size. Bounded (`WGPU_HLO_POOL_MB`, default 256 MiB, 1 GiB on discrete
//! GPUs): past the bound the least recently pooled buffers are released to wgpu, so memory
//! stays flat however many tensors come and go, and the pool follows the sizes a program uses
//! now. (Refusing the
//! newcomer instead kept the sizes of an earlier phase: on an H200 a loop over 256 MiB results
//! after one over 64 MiB ones allocated a fresh 256 MiB buffer per call, 7.3 ms for a 0.23 ms
//! kernel.)

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Default bound on pooled bytes: CPU adapters and integrated GPUs, whose memory is the
/// system's.
const DEFAULT_POOL_BYTES: u64 = 256 << 20;

/// Default bound on discrete GPUs, with memory of their own. A step's working set past the
/// bound makes the least-recently-pooled order evict the buffers the next call needs: on an
/// H200, after a few 256 MiB programs, the flax CNN step took 6.0 ms a call instead of 2.0
/// (fresh buffers each call) under 256 MiB.
const DEFAULT_POOL_BYTES_DISCRETE: u64 = 1 << 30;

/// A number that tells pooled buffers apart (a hash of the handle; never 0), by which an
/// executable asks for the buffers its slots had in earlier calls: a training step whose
/// temporaries and results come back in other places each call binds new combinations of
/// buffers, and every dispatch then missed the bind-group cache (a small transformer's
/// step: 90 bind groups created per call, in wgpu-core and the driver).
pub(crate) fn buffer_key(buffer: &wgpu::Buffer) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    buffer.hash(&mut h);
    h.finish().max(1)
}

struct Inner {
    /// Free buffers by size, each with the stamp it was pooled at (oldest first) and its
    /// [`buffer_key`].
    by_size: HashMap<u64, Vec<(u64, u64, wgpu::Buffer)>>,
    /// Sizes by stamp: the eviction order.
    order: BTreeMap<u64, u64>,
    next: u64,
    bytes: u64,
}

/// Free buffers by size (thread-safe).
pub(crate) struct Pool {
    inner: Mutex<Inner>,
    limit: u64,
}

impl Pool {
    /// An empty pool with the configured bound (`WGPU_HLO_POOL_MB`, else by whether the
    /// adapter is a `discrete` GPU).
    pub(crate) fn new(discrete: bool) -> Pool {
        let limit = std::env::var("WGPU_HLO_POOL_MB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|mb| mb << 20)
            .unwrap_or(if discrete {
                DEFAULT_POOL_BYTES_DISCRETE
            } else {
                DEFAULT_POOL_BYTES
            });
        Pool {
            inner: Mutex::new(Inner {
                by_size: HashMap::new(),
                order: BTreeMap::new(),
                next: 0,
                bytes: 0,
            }),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free buffer of exactly `size` bytes and its key, if one is pooled: the most recent
    /// of those whose [`buffer_key`] is in `prefer` (earlier keys first), else the most
    /// recent.
    pub(crate) fn take(&self, size: u64, prefer: &[u64]) -> Option<(u64, wgpu::Buffer)> {
        let mut g = self.lock();
        let list = g.by_size.get_mut(&size)?;
        let at = prefer
            .iter()
            .filter(|&&k| k != 0)
            .find_map(|&k| list.iter().rposition(|(_, key, _)| *key == k));
        let (stamp, key, b) = match at {
            Some(i) => list.remove(i),
            None => list.pop()?,
        };
        g.order.remove(&stamp);
        g.bytes -= size;
        Some((key, b))
    }

    /// Keeps `buffer` (whose [`buffer_key`] is `key`) for reuse, releasing the least recently pooled buffers past the bound
    /// (or `buffer` itself when it alone exceeds it). Returns the buffers released, whose
    /// cached bind groups the caller forgets so that their memory goes.
    pub(crate) fn put(&self, size: u64, key: u64, buffer: wgpu::Buffer) -> Vec<wgpu::Buffer> {
        if size > self.limit {
            return vec![buffer];
        }
        let mut g = self.lock();
        let mut released = Vec::new();
        while g.bytes + size > self.limit {
            let Some((stamp, old)) = g.order.pop_first() else {
                break;
            };
            if let Some(list) = g.by_size.get_mut(&old) {
                if let Some(i) = list.iter().position(|(s, _, _)| *s == stamp) {
                    released.push(list.remove(i).2);
                }
            }
            g.bytes -= old;
        }
        let stamp = g.next;
        g.next += 1;
        g.order.insert(stamp, size);
        g.bytes += size;
        g.by_size
            .entry(size)
            .or_default()
            .push((stamp, key, buffer));
        released
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}
