//! The device's buffer pool: storage buffers no tensor uses any more, by size, for the next
//! allocation of that size. Bounded (`WGPU_HLO_POOL_MB`, default 256 MiB): past the bound
//! buffers are released to wgpu instead, so memory stays flat however many tensors come and go.

use std::collections::HashMap;
use std::sync::Mutex;

/// Default bound on pooled bytes.
const DEFAULT_POOL_BYTES: u64 = 256 << 20;

struct Inner {
    by_size: HashMap<u64, Vec<wgpu::Buffer>>,
    bytes: u64,
}

/// Free buffers by size (thread-safe).
pub(crate) struct Pool {
    inner: Mutex<Inner>,
    limit: u64,
}

impl Pool {
    /// An empty pool with the configured bound.
    pub(crate) fn new() -> Pool {
        let limit = std::env::var("WGPU_HLO_POOL_MB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|mb| mb << 20)
            .unwrap_or(DEFAULT_POOL_BYTES);
        Pool {
            inner: Mutex::new(Inner {
                by_size: HashMap::new(),
                bytes: 0,
            }),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free buffer of exactly `size` bytes, if one is pooled.
    pub(crate) fn take(&self, size: u64) -> Option<wgpu::Buffer> {
        let mut g = self.lock();
        let b = g.by_size.get_mut(&size)?.pop()?;
        g.bytes -= size;
        Some(b)
    }

    /// Keeps `buffer` for reuse; false (the buffer is released) when the pool is full.
    pub(crate) fn put(&self, size: u64, buffer: wgpu::Buffer) -> bool {
        let mut g = self.lock();
        if g.bytes + size > self.limit {
            return false;
        }
        g.bytes += size;
        g.by_size.entry(size).or_default().push(buffer);
        true
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}
