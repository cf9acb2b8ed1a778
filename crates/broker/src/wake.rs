//! An eventfd the Python event loop watches: the data plane writes to it when it queues work
//! for Python and nothing was queued before, so a burst costs Python one wake-up.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct Wake {
    fd: OwnedFd,
    /// Set from the first signal until Python has taken the work (`clear`).
    signaled: AtomicBool,
}

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: eventfd returns a new descriptor or -1; the OwnedFd takes ownership of it.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Wake {
            // SAFETY: fd is a valid descriptor owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            signaled: AtomicBool::new(false),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the descriptor readable, unless it already is for work not yet taken.
    pub fn signal(&self) {
        if !self.signaled.swap(true, Ordering::AcqRel) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our own descriptor. A full counter
            // (EAGAIN) still leaves it readable, which is all that matters.
            unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Called by the reader before it takes the queued work: later work signals again.
    pub fn clear(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN (nothing to read) is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        self.signaled.store(false, Ordering::Release);
    }
}
