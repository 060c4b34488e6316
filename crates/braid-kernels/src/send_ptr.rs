//! A raw pointer that rayon tasks may share.
//!
//! The matmul and attention tasks each write their own part of one output buffer. Handing every
//! task a `&mut` slice of the whole buffer would be undefined behaviour even though the parts
//! they write do not overlap, since two live `&mut` may never cover the same memory. So they
//! get the buffer's raw pointer instead, and each write says why its element is its task's own.
//! Raw pointers are neither `Send` nor `Sync`; this wrapper is, and moves that proof to the
//! places that dereference it.

/// A `*mut T` that can cross into rayon tasks. It grants nothing by itself: every dereference
/// is an `unsafe` block that must show the pointee is live and not accessed by anyone else.
pub struct SendPtr<T>(*mut T);

impl<T> SendPtr<T> {
    pub fn new(ptr: *mut T) -> Self {
        Self(ptr)
    }

    /// The pointer. A method rather than a public field: a closure that named the field would
    /// capture only the bare pointer (edition 2021's disjoint captures) and not be `Send`.
    pub fn get(&self) -> *mut T {
        self.0
    }
}

// SAFETY: the wrapper only carries the address to another thread; reading or writing through it
// needs an `unsafe` block, whose caller must rule out data races. `T: Send` is required, as for
// `&mut T`, so no value that must stay on its thread is reached from another one.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as for `Send`: sharing `&SendPtr` only shares the address, and `T: Sync` is required,
// as for `&T`.
unsafe impl<T: Send + Sync> Sync for SendPtr<T> {}
