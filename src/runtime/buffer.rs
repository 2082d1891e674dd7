//! Device buffers: a tensor's bytes on the GPU in PJRT's dense host layout (so transfers are
//! plain copies), padded to 4 bytes, with a readiness event.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::device::{Device, GpuBuffer};
use super::event::Event;
use crate::error::{Error, Result};
use crate::ir::TensorType;

struct Inner {
    device: Arc<Device>,
    ty: TensorType,
    storage: Mutex<Option<Arc<GpuBuffer>>>,
    device_size: u64,
    ready: Event,
    /// Set when this buffer is read back: tells the executable that produced it to copy the
    /// same output for the host in its later executions (`Executable::read_hints`).
    read_hint: Option<Arc<AtomicBool>>,
    /// The host copy its execution made of it in its own submission, if it did.
    prefetch: Option<Arc<Prefetch>>,
    /// Set once it is read back.
    was_read: AtomicBool,
}

impl Drop for Inner {
    /// A result copied for the host but dropped unread clears its output's read hint: a
    /// program whose results were read once and are now only waited for stops paying for
    /// the copy (~20 us an execution on lavapipe).
    fn drop(&mut self) {
        if let (Some(hint), Some(_)) = (&self.read_hint, &self.prefetch) {
            if !self.was_read.load(Ordering::Relaxed) {
                hint.store(false, Ordering::Relaxed);
            }
        }
    }
}

/// What reads the bytes of a [`Prefetch`].
type PrefetchReader = Box<dyn FnOnce(Result<Vec<u8>>) + Send>;

/// The host bytes of a result copied by its own execution (after its work, in the same
/// submission), or the readers waiting for them.
#[derive(Default)]
pub(crate) struct Prefetch(Mutex<PrefetchState>);

enum PrefetchState {
    Waiting(Vec<PrefetchReader>),
    Done(Result<Vec<u8>>),
}

impl Default for PrefetchState {
    fn default() -> Self {
        PrefetchState::Waiting(Vec::new())
    }
}

impl Prefetch {
    /// Stores the bytes (or the error) and hands them to the readers waiting; once only.
    pub(crate) fn set(&self, r: Result<Vec<u8>>) {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*st, PrefetchState::Done(_)) {
            return;
        }
        let PrefetchState::Waiting(readers) =
            std::mem::replace(&mut *st, PrefetchState::Done(r.clone()))
        else {
            return;
        };
        drop(st);
        for f in readers {
            f(r.clone());
        }
    }

    fn is_done(&self) -> bool {
        matches!(
            *self.0.lock().unwrap_or_else(|p| p.into_inner()),
            PrefetchState::Done(_)
        )
    }

    /// Runs `f` with the bytes: at once if they are here, else when they come.
    fn read(&self, f: impl FnOnce(Result<Vec<u8>>) + Send + 'static) {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *st {
            PrefetchState::Waiting(readers) => readers.push(Box::new(f)),
            PrefetchState::Done(r) => {
                let r = r.clone();
                drop(st);
                f(r);
            }
        }
    }
}

/// A tensor on the device. Cheap to clone (clones share the storage).
#[derive(Clone)]
pub struct DeviceBuffer(Arc<Inner>);

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer({}, {} bytes)",
            self.0.ty, self.0.device_size
        )
    }
}

impl DeviceBuffer {
    pub(crate) fn from_gpu(
        device: &Arc<Device>,
        ty: TensorType,
        gpu: Arc<GpuBuffer>,
        ready: Event,
    ) -> DeviceBuffer {
        DeviceBuffer(Arc::new(Inner {
            device: device.clone(),
            device_size: gpu.size,
            ty,
            storage: Mutex::new(Some(gpu)),
            ready,
            read_hint: None,
            prefetch: None,
            was_read: AtomicBool::new(false),
        }))
    }

    /// This buffer, told the read hint of the output it is (set when it is read back) and
    /// the host copy its execution made of it, if any. For a buffer just made (not shared).
    pub(crate) fn with_read_hint(
        mut self,
        read_hint: Option<Arc<AtomicBool>>,
        prefetch: Option<Arc<Prefetch>>,
    ) -> DeviceBuffer {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.read_hint = read_hint;
            inner.prefetch = prefetch;
        }
        self
    }

    /// The tensor type.
    pub fn ty(&self) -> &TensorType {
        &self.0.ty
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        &self.0.device
    }

    /// Bytes it occupies on the device.
    pub fn device_size(&self) -> u64 {
        self.0.device_size
    }

    /// Completes when the buffer's contents have been produced.
    pub fn ready(&self) -> Event {
        self.0.ready.clone()
    }

    /// The GPU storage; an error once deleted.
    pub(crate) fn gpu(&self) -> Result<Arc<GpuBuffer>> {
        self.0
            .storage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| Error::failed_precondition(format!("buffer {} was deleted", self.0.ty)))
    }

    /// A number that identifies the buffer's device storage while it lives: equal for handles
    /// that share storage, different for live buffers that do not (the address of the storage's
    /// bookkeeping; wgpu exposes no device addresses). An error once deleted.
    pub fn storage_id(&self) -> Result<usize> {
        Ok(Arc::as_ptr(&self.gpu()?) as usize)
    }

    /// True when the two handles share storage.
    pub fn same_storage(&self, other: &DeviceBuffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Frees the device memory now (work already queued keeps what it uses). Later uses fail
    /// with FAILED_PRECONDITION.
    pub fn delete(&self) {
        self.0
            .storage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// True after `delete`.
    pub fn is_deleted(&self) -> bool {
        self.0
            .storage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// Copies the tensor to host memory once it is ready and hands the bytes (host layout) to
    /// `done`, on whichever thread completes the transfer.
    pub fn read_to_host(&self, done: impl FnOnce(Result<Vec<u8>>) + Send + 'static) {
        let ready = &self.0.ready;
        self.0.was_read.store(true, Ordering::Relaxed);
        if let Some(h) = &self.0.read_hint {
            h.store(true, Ordering::Relaxed);
        }
        if let Some(pre) = &self.0.prefetch {
            // Copied by its execution: no read-back of its own. A deleted buffer still
            // fails, and the producer's outcome still decides (its error wins).
            if let Err(e) = self.gpu() {
                return done(Err(e));
            }
            let producer = ready.clone();
            let wait_here = producer.is_ready() && !pre.is_done();
            pre.read(move |r| producer.on_ready(move |p| done(p.and(r))));
            if wait_here {
                // Produced already: the caller, about to wait, polls for the map itself.
                let pre = pre.clone();
                self.0.device.spin_until(&mut || pre.is_done());
            }
            return;
        }
        if !ready.is_ready() && ready.is_queued() {
            // The producing work is on the queue already: the copy queued after it sees its
            // results, so completion and read-back take one round trip. The producer's
            // outcome still decides (its error wins over the bytes).
            let gpu = match self.gpu() {
                Ok(g) => g,
                Err(e) => return done(Err(e)),
            };
            let len = self.0.ty.byte_size();
            let producer = ready.clone();
            let finish = move |r: Result<Vec<u8>>| {
                producer.on_ready(move |p| done(p.and(r)));
            };
            if len == 0 {
                return finish(Ok(Vec::new()));
            }
            let what = format!("read-back of {}", self.0.ty);
            self.0.device.read_buffer(&gpu.buffer, len, &what, finish);
            return;
        }
        // Produced already: the caller, about to wait for the bytes, may poll for them
        // itself (`Device::read_buffer_spinning`); `on_ready` then runs on this thread.
        let now = ready.is_ready();
        let this = self.clone();
        self.0
            .ready
            .on_ready(move |r| match r.and_then(|()| this.gpu()) {
                Err(e) => done(Err(e)),
                Ok(gpu) => {
                    let len = this.0.ty.byte_size();
                    if len == 0 {
                        return done(Ok(Vec::new()));
                    }
                    let what = format!("read-back of {}", this.0.ty);
                    if now {
                        this.0
                            .device
                            .read_buffer_spinning(&gpu.buffer, len, &what, done);
                    } else {
                        this.0.device.read_buffer(&gpu.buffer, len, &what, done);
                    }
                }
            });
    }

    /// `read_to_host`, waiting for the bytes.
    pub fn read_to_host_blocking(&self) -> Result<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.read_to_host(move |r| {
            let _ = tx.send(r);
        });
        let limit = super::event::wait_timeout();
        match rx.recv_timeout(limit) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(super::event::deadline_error(
                &format!("the read-back of {}", self.0.ty),
                limit,
            )),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(Error::internal("read-back was dropped"))
            }
        }
    }

    /// A new buffer with the same contents (device-to-device copy, asynchronous).
    pub fn copy(&self) -> Result<DeviceBuffer> {
        let dev = self.0.device.clone();
        let dst = Arc::new(dev.alloc(self.0.device_size, "copy")?);
        let ready = Event::pending();
        let (src, r, d) = (self.clone(), ready.clone(), dst.clone());
        self.0.ready.on_ready(move |res| {
            let gpu = match res.and_then(|()| src.gpu()) {
                Ok(g) => g,
                Err(e) => return r.set(Err(e)),
            };
            let dev = &src.0.device;
            let recorded = dev.scoped("copying a buffer", || {
                let mut enc = dev
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
                enc.copy_buffer_to_buffer(&gpu.buffer, 0, &d.buffer, 0, gpu.size.min(d.size));
                Ok(enc.finish())
            });
            match recorded {
                Ok(cmd) => {
                    let done = dev.submit(vec![cmd], "a buffer copy");
                    // The copy's source and target stay alive until the copy is submitted.
                    drop(gpu);
                    done.on_ready(move |x| r.set(x));
                }
                Err(e) => r.set(Err(e)),
            }
        });
        Ok(DeviceBuffer::from_gpu(&dev, self.0.ty.clone(), dst, ready))
    }
}

/// Largest upload that keeps its bytes as its host copy (see `Device::upload`): a bound on
/// the host memory small arrays hold (10,000 arrays at most 40 MB).
const UPLOAD_HOST_COPY_MAX_BYTES: usize = 4 << 10;

/// Bytes of uploads not yet carried by a submission from which an upload submits on its own:
/// `WGPU_HLO_UPLOAD_SUBMIT_BYTES` (0: every upload submits, as before), else 16 MiB.
fn upload_submit_bytes() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("WGPU_HLO_UPLOAD_SUBMIT_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(16 << 20)
    })
}

impl Device {
    /// Uploads a tensor given in host layout. The bytes are copied before this returns.
    pub fn upload(self: &Arc<Self>, ty: &TensorType, bytes: &[u8]) -> Result<DeviceBuffer> {
        if !ty.is_static() {
            return Err(Error::invalid(format!("cannot upload dynamic type {ty}")));
        }
        if bytes.len() != ty.byte_size() {
            return Err(Error::invalid(format!(
                "upload of {ty}: expected {} bytes, got {}",
                ty.byte_size(),
                bytes.len()
            )));
        }
        self.check_usable()?;
        let gpu = self.alloc(bytes.len() as u64, "upload")?;
        if !bytes.is_empty() {
            self.scoped(&format!("uploading {ty}"), || {
                if bytes.len() % 4 == 0 {
                    self.queue.write_buffer(&gpu.buffer, 0, bytes);
                } else {
                    let mut padded = bytes.to_vec();
                    padded.resize(bytes.len().next_multiple_of(4), 0);
                    self.queue.write_buffer(&gpu.buffer, 0, &padded);
                }
                Ok(())
            })?;
            // The write's staging memory is released once a submission carrying it has run.
            // The next computation's submission carries it; an empty one of its own costs
            // ~30 µs on lavapipe, as much as the rest of a small upload (`jit(f)(numpy
            // array)` puts each argument). So only once uploads since the last submission pass
            // `upload_submit_bytes()` does one submit, and a program that only puts and deletes
            // arrays still holds at most that much staging memory.
            let len = bytes.len() as u64;
            let pending = self
                .unsubmitted_upload_bytes
                .fetch_add(len, std::sync::atomic::Ordering::Relaxed)
                .saturating_add(len);
            if pending >= upload_submit_bytes() {
                self.submit(Vec::new(), "uploads");
            }
        }
        // Queue writes are ordered before every later submission, so the buffer is ready for
        // any work that can be queued after this call.
        let buf = DeviceBuffer::from_gpu(self, ty.clone(), Arc::new(gpu), Event::ready());
        if bytes.len() > UPLOAD_HOST_COPY_MAX_BYTES {
            return Ok(buf);
        }
        // A small upload keeps its bytes as its host copy: reading it back needs no copy, no
        // submission and no map (np.asarray(jax.device_put(x)) of 64 floats: 280-340 us on
        // lavapipe, a submission's round trip). Nothing writes into an uploaded buffer while
        // it can be read: a donated buffer is deleted, and reading it fails first.
        let host = Arc::new(Prefetch::default());
        host.set(Ok(bytes.to_vec()));
        Ok(buf.with_read_hint(None, Some(host)))
    }
}
