//! The memory allocator, and what it reports about kubegate's memory.
//!
//! jemalloc rather than glibc's malloc: terminate mode allocates and frees a few dozen small
//! objects per request (header maps, frames, futures), and glibc's allocator took ~10% of its
//! CPU under load; jemalloc cut CPU per request by ~11% at the same memory per idle connection
//! (mimalloc saved as much CPU but held 48 KiB per idle TLS connection instead of 31; see
//! bench/README.md).

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The allocator's view of the heap, in bytes.
pub struct HeapFigures {
    /// Bytes the program holds in allocations.
    pub allocated: u64,
    /// Bytes of the allocator's pages that are resident (what it holds, freed memory it keeps
    /// for reuse, its metadata): of the process's RSS, the part the heap accounts for.
    pub resident: u64,
}

/// The figures now (the allocator refreshes them only when asked to).
pub fn heap() -> Option<HeapFigures> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    Some(HeapFigures {
        allocated: tikv_jemalloc_ctl::stats::allocated::read().ok()? as u64,
        resident: tikv_jemalloc_ctl::stats::resident::read().ok()? as u64,
    })
}
