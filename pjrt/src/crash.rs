//! An opt-in report of a native crash (`WGPU_HLO_CRASH_REPORT=1`): on SIGSEGV, SIGBUS, SIGILL
//! or SIGFPE, the crashing thread's name, the faulting address, the instruction pointer with
//! the mapping it lies in, and a native backtrace go to stderr; then the handler that was
//! there before (Python's `faulthandler`, or the default that dumps core) runs as it would
//! have.
//!
//! Why: Python's `faulthandler` prints only Python frames. A crash on a thread that runs no
//! Python (a driver's queue thread, a compile or polling thread of ours) shows as the main
//! thread's Python stack, wherever it happened to be, which says nothing about the crash. The
//! test script turns this on, so a crash in CI names its thread and library.
//!
//! Everything the handler calls is async-signal-safe except glibc's `backtrace`, which loads
//! its unwinder on first use; [`install`] calls it once beforehand, so the handler does not.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    const SIGNALS: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

    /// The actions the signals had before [`install`], in the order of `SIGNALS`.
    static PREVIOUS: OnceLock<[libc::sigaction; 4]> = OnceLock::new();
    /// Set by the first crash: a second one (in another thread, or in the report) only
    /// hands over.
    static REPORTING: AtomicBool = AtomicBool::new(false);

    /// Writes `bytes` to stderr, ignoring errors.
    fn put(bytes: &[u8]) {
        // SAFETY: `write` on fd 2 with a valid buffer.
        unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
    }

    /// `v` as hexadecimal, without allocating.
    fn put_hex(v: usize) {
        let mut buf = [0u8; 18];
        buf[0] = b'0';
        buf[1] = b'x';
        let mut n = 2;
        let digits = if v == 0 {
            1
        } else {
            (usize::BITS - v.leading_zeros()).div_ceil(4) as usize
        };
        for i in (0..digits).rev() {
            let d = (v >> (i * 4)) & 0xf;
            buf[n] = if d < 10 {
                b'0' + d as u8
            } else {
                b'a' + d as u8 - 10
            };
            n += 1;
        }
        put(&buf[..n]);
    }

    /// `v` in decimal, without allocating.
    fn put_dec(mut v: usize) {
        let mut buf = [0u8; 20];
        let mut n = buf.len();
        loop {
            n -= 1;
            buf[n] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        put(&buf[n..]);
    }

    /// The line of `/proc/self/maps` whose range holds `addr` (read with raw syscalls).
    fn put_mapping_of(addr: usize) {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY) };
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        let mut line = [0u8; 512];
        let mut len = 0usize;
        'read: loop {
            // SAFETY: reads into a buffer of its length.
            let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if got <= 0 {
                break;
            }
            for &b in &buf[..got as usize] {
                if b != b'\n' {
                    if len < line.len() {
                        line[len] = b;
                        len += 1;
                    }
                    continue;
                }
                if range_holds(&line[..len], addr) {
                    put(b"  in mapping: ");
                    put(&line[..len]);
                    put(b"\n");
                    break 'read;
                }
                len = 0;
            }
        }
        // SAFETY: the descriptor opened above.
        unsafe { libc::close(fd) };
    }

    /// Whether a maps line (`start-end perms ...`) covers `addr`.
    fn range_holds(line: &[u8], addr: usize) -> bool {
        let hex = |s: &[u8]| {
            s.iter().try_fold(0usize, |acc, &c| {
                let d = (c as char).to_digit(16)? as usize;
                acc.checked_mul(16)?.checked_add(d)
            })
        };
        let Some(dash) = line.iter().position(|&c| c == b'-') else {
            return false;
        };
        let end = line[dash..]
            .iter()
            .position(|&c| c == b' ')
            .map_or(line.len(), |p| dash + p);
        match (hex(&line[..dash]), hex(&line[dash + 1..end])) {
            (Some(lo), Some(hi)) => lo <= addr && addr < hi,
            _ => false,
        }
    }

    extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let Some(previous) = PREVIOUS.get() else {
            return;
        };
        let slot = SIGNALS.iter().position(|&s| s == sig).unwrap_or(0);
        if !REPORTING.swap(true, Ordering::SeqCst) {
            put(b"\n== wgpu-hlo: native crash report (WGPU_HLO_CRASH_REPORT) ==\nsignal ");
            put(match sig {
                libc::SIGSEGV => b"SIGSEGV".as_slice(),
                libc::SIGBUS => b"SIGBUS",
                libc::SIGILL => b"SIGILL",
                _ => b"SIGFPE",
            });
            let mut name = [0u8; 17];
            // SAFETY: PR_GET_NAME writes at most 16 bytes.
            unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
            let n = name.iter().position(|&c| c == 0).unwrap_or(16);
            put(b" on thread \"");
            put(&name[..n]);
            put(b"\" (tid ");
            // SAFETY: `gettid` has no preconditions.
            put_dec(unsafe { libc::gettid() } as usize);
            put(b")");
            if !info.is_null() {
                put(b", fault address ");
                // SAFETY: the kernel's siginfo for this signal.
                put_hex(unsafe { (*info).si_addr() } as usize);
            }
            if !ctx.is_null() {
                // SAFETY: with SA_SIGINFO the third argument is the thread's ucontext.
                #[cfg(target_arch = "x86_64")]
                let ip = unsafe {
                    (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize]
                } as usize;
                #[cfg(target_arch = "aarch64")]
                let ip = unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.pc } as usize;
                #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
                let ip = 0usize;
                put(b", instruction ");
                put_hex(ip);
                put(b"\n");
                put_mapping_of(ip);
            } else {
                put(b"\n");
            }
            let mut frames = [std::ptr::null_mut::<libc::c_void>(); 48];
            // SAFETY: a buffer of 48 frames; the unwinder was loaded by `install`.
            let n = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int) };
            // SAFETY: the frames `backtrace` just wrote.
            unsafe { libc::backtrace_symbols_fd(frames.as_ptr(), n, 2) };
            put(b"== end of the native crash report ==\n");
        }
        // Hand over: the previous action comes back, and the fault (re-executed when this
        // returns) or a re-raised signal reaches it.
        // SAFETY: restores an action read by `sigaction` in `install`.
        unsafe { libc::sigaction(sig, &previous[slot], std::ptr::null_mut()) };
        // SAFETY: `info` is the kernel's siginfo, checked for null.
        let sent = info.is_null() || unsafe { (*info).si_code } <= 0;
        if sent {
            // SAFETY: raising a signal has no preconditions.
            unsafe { libc::raise(sig) };
        }
    }

    pub(super) fn install() {
        if !std::env::var("WGPU_HLO_CRASH_REPORT").is_ok_and(|v| v.trim() == "1") {
            return;
        }
        let mut frames = [std::ptr::null_mut::<libc::c_void>(); 4];
        // SAFETY: loads glibc's unwinder now rather than inside the handler.
        unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int) };
        // SAFETY: a zeroed sigaction is a valid "default" value to be filled in.
        let mut previous: [libc::sigaction; 4] = unsafe { std::mem::zeroed() };
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: reads the current action into a valid struct.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut previous[i]) } != 0 {
                return;
            }
        }
        if PREVIOUS.set(previous).is_err() {
            return;
        }
        for &sig in &SIGNALS {
            // SAFETY: a zeroed sigaction with our handler, SA_SIGINFO and SA_ONSTACK (a
            // thread with an alternate signal stack keeps using it).
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_crash as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
        log::debug!("native crash report installed");
    }
}

/// Installs the crash report where `WGPU_HLO_CRASH_REPORT=1` (once; see the module
/// documentation).
pub(crate) fn install() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    imp::install();
}
