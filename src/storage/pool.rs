//! Freed private buffers kept for reuse ([`BufferPool`]): hot-swap's relocations and
//! returns to the original alternate between the same few sizes (a tensor oscillating
//! between two types), and a fresh buffer costs a page fault per 4 KiB page, which is more
//! than reading the tensor's bytes from the page cache. A kept buffer's pages are resident.
//!
//! The pool is bounded in bytes and in buffers, so what it holds never exceeds one tensor's
//! worth of memory (the bound the owner gives) however many tensors are swapped.

use std::collections::VecDeque;

use crate::device::DeviceAllocation;

/// Buffers kept for reuse, keyed by device and exact length, oldest first.
#[derive(Debug)]
pub struct BufferPool {
    limit_bytes: u64,
    buffers: VecDeque<DeviceAllocation>,
}

impl BufferPool {
    /// At most this many buffers are kept (a lookup scans them all).
    pub const MAX_BUFFERS: usize = 4;

    /// A pool that keeps at most `limit_bytes` bytes in at most [`Self::MAX_BUFFERS`] buffers.
    pub fn new(limit_bytes: u64) -> BufferPool {
        BufferPool {
            limit_bytes,
            buffers: VecDeque::new(),
        }
    }

    /// A kept buffer of exactly `len` bytes on registry device `device`, if any. Its bytes
    /// are whatever it held before: the caller overwrites all of them.
    pub fn take(&mut self, device: usize, len: usize) -> Option<DeviceAllocation> {
        let at = self
            .buffers
            .iter()
            .position(|b| b.device_index() == device && b.len() == len)?;
        self.buffers.remove(at)
    }

    /// Keeps `buffer` for reuse. The oldest kept buffers are freed to stay within the bounds;
    /// a buffer larger than the byte limit is freed at once.
    pub fn give(&mut self, buffer: DeviceAllocation) {
        if buffer.len() as u64 > self.limit_bytes {
            return;
        }
        while self.buffers.len() >= Self::MAX_BUFFERS
            || self.bytes() + buffer.len() as u64 > self.limit_bytes
        {
            self.buffers.pop_front();
        }
        self.buffers.push_back(buffer);
    }

    /// Frees every kept buffer; returns how many bytes that gave back.
    pub fn clear(&mut self) -> u64 {
        let bytes = self.bytes();
        self.buffers.clear();
        bytes
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.len() as u64).sum()
    }

    /// Buffers held.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The byte bound.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Registry;

    fn registry() -> &'static Registry {
        Box::leak(Box::new(Registry::with_virtual_gpus(&[1 << 20])))
    }

    #[test]
    fn reuses_a_buffer_of_the_same_device_and_length() {
        let reg = registry();
        let cpu = reg.cpu();
        let mut pool = BufferPool::new(1000);
        let mut a = cpu.allocate(100).unwrap();
        a.write(0, &[7; 100]).unwrap();
        let addr = a.host_slice().unwrap().as_ptr();
        pool.give(a);
        assert_eq!((pool.len(), pool.bytes()), (1, 100));
        assert!(
            pool.take(cpu.index(), 99).is_none(),
            "length must match exactly"
        );
        let gpu = reg.gpus().next().unwrap().index();
        assert!(pool.take(gpu, 100).is_none(), "device must match");
        let b = pool.take(cpu.index(), 100).expect("the kept buffer");
        assert_eq!(
            b.host_slice().unwrap().as_ptr(),
            addr,
            "the same memory comes back"
        );
        assert!(pool.is_empty());
    }

    #[test]
    fn stays_within_its_bounds() {
        let reg = registry();
        let cpu = reg.cpu();
        let mut pool = BufferPool::new(250);
        pool.give(cpu.allocate(300).unwrap());
        assert!(pool.is_empty(), "a buffer over the limit is not kept");
        for len in [100, 101, 102] {
            pool.give(cpu.allocate(len).unwrap());
            assert!(pool.bytes() <= 250, "{}", pool.bytes());
        }
        // 100 + 101 fit; 102 evicts the oldest (100).
        assert_eq!(pool.len(), 2);
        assert!(pool.take(cpu.index(), 100).is_none());
        assert!(pool.take(cpu.index(), 101).is_some());
        let mut pool = BufferPool::new(u64::MAX);
        for len in 1..=10 {
            pool.give(cpu.allocate(len).unwrap());
        }
        assert_eq!(pool.len(), BufferPool::MAX_BUFFERS);
        assert!(pool.take(cpu.index(), 10).is_some(), "the newest are kept");
        assert!(pool.take(cpu.index(), 1).is_none(), "the oldest went first");
    }

    #[test]
    fn a_kept_gpu_buffer_holds_its_capacity_until_cleared() {
        let reg = registry();
        let gpu = reg.gpus().next().unwrap();
        let mut pool = BufferPool::new(1 << 20);
        pool.give(gpu.allocate(4096).unwrap());
        assert_eq!(gpu.used(), 4096);
        assert_eq!(pool.clear(), 4096);
        assert_eq!(gpu.used(), 0);
    }
}
