//! Memory for weights: byte buffers carved from 2 MB-aligned anonymous mappings that ask
//! the kernel for transparent huge pages.
//!
//! A decode token reads every weight once, about 100 MB for the default model, spread
//! over several hundred matrices. From malloc those lie on 4 KB pages (most matrices are
//! under 1 MB, and the heap grows in small steps, so even where the system allows huge
//! pages none are used), and every 4 KB of weights costs a TLB miss: in a VM a
//! two-dimensional page walk. Carved from shared 2 MB-aligned chunks advised
//! `MADV_HUGEPAGE`, the same weights sit on huge pages wherever the system allows them
//! (`/sys/kernel/mm/transparent_hugepage/enabled` set to `madvise` or `always`), and
//! elsewhere on ordinary pages, with the same contents. A chunk is unmapped when the last
//! buffer carved from it is dropped, so a replaced model's memory goes back to the system
//! at once. `SLUICE_HUGE_PAGES=0` leaves out the advice.

use std::sync::{Arc, Mutex, Weak};

/// A huge page (x86-64 and arm64 with 4 KB base pages).
const HUGE: usize = 2 << 20;
/// Chunks shared by small buffers; a buffer over a quarter of this gets its own mapping.
const CHUNK: usize = 16 << 20;
/// Every buffer starts on a cache line.
const ALIGN: usize = 64;

/// One anonymous mapping; `start` is the offset of its first 2 MB boundary.
struct Chunk {
    map: memmap2::MmapMut,
    start: usize,
}

impl Chunk {
    /// A zeroed mapping with `len` bytes from a 2 MB boundary, advised huge pages.
    fn new(len: usize) -> Self {
        let map = memmap2::MmapMut::map_anon(len + HUGE).unwrap_or_else(|e| {
            // Like `Vec`'s allocation failure: the process cannot go on without it.
            panic!("mapping {len} bytes for weights: {e}")
        });
        let start = map.as_ptr().align_offset(HUGE);
        #[cfg(target_os = "linux")]
        if huge_pages() {
            // Only advice: where huge pages are off or unsupported it fails and nothing changes.
            let _ = map.advise_range(memmap2::Advice::HugePage, start, len);
        }
        Self { map, start }
    }

    fn base(&self) -> *mut u8 {
        // SAFETY: `start` < `HUGE` and the mapping is `len + HUGE` bytes.
        unsafe { self.map.as_ptr().add(self.start) as *mut u8 }
    }
}

/// Whether weights ask for huge pages: yes unless `SLUICE_HUGE_PAGES=0` (read once), which
/// keeps them on ordinary pages, to compare or to save the memory of part-used huge pages.
fn huge_pages() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SLUICE_HUGE_PAGES").as_deref() != Ok("0"))
}

/// The chunk small buffers are carved from now, and how much of it is used: weak, so a
/// chunk whose buffers are all dropped is unmapped even while it is the current one.
static CURRENT: Mutex<(Weak<Chunk>, usize)> = Mutex::new((Weak::new(), 0));

/// Types whose all-zero bytes are a valid value: what a [`Huge`] or [`Scratch`] array holds.
///
/// # Safety
/// Every bit pattern of zeros must be a valid `Self`.
pub unsafe trait Zero: Copy {}
// SAFETY: zero bytes are 0 and 0.0.
unsafe impl Zero for u8 {}
// SAFETY: as above.
unsafe impl Zero for i8 {}
// SAFETY: as above.
unsafe impl Zero for u16 {}
// SAFETY: as above.
unsafe impl Zero for u64 {}
// SAFETY: as above.
unsafe impl Zero for f32 {}

/// A zeroed array on huge pages where the system allows (see the module's note).
pub struct Huge<T: Zero> {
    ptr: *mut T,
    len: usize,
    /// Keeps the mapping alive; `None` for the empty array.
    _chunk: Option<Arc<Chunk>>,
}

/// Quants, scales and factors: bytes.
pub type HugeBytes = Huge<u8>;

// SAFETY: a `Huge` owns its elements exclusively (no two arrays overlap: each is carved
// from space no other array was given), as a `Vec` does; the shared `Chunk` is only
// unmapped when the last owner drops it. `T: Zero` types are plain numbers.
unsafe impl<T: Zero> Send for Huge<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Zero> Sync for Huge<T> {}

impl<T: Zero> Huge<T> {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len * size_of::<T>();
        if bytes == 0 {
            return Self::default();
        }
        if bytes > CHUNK / 4 {
            let chunk = Arc::new(Chunk::new(bytes.next_multiple_of(HUGE)));
            return Self {
                ptr: chunk.base().cast(),
                len,
                _chunk: Some(chunk),
            };
        }
        let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
        let (weak, used) = &mut *current;
        let chunk = match weak.upgrade() {
            Some(c) if *used + bytes <= CHUNK => c,
            _ => {
                let c = Arc::new(Chunk::new(CHUNK));
                *weak = Arc::downgrade(&c);
                *used = 0;
                c
            }
        };
        // SAFETY: `used + bytes <= CHUNK`, inside the mapping; this space was never handed
        // out (the offset only grows), so it is still zero, and `used` is a multiple of
        // `ALIGN` (64), so aligned for any `Zero` type.
        let ptr = unsafe { chunk.base().add(*used) }.cast();
        *used = (*used + bytes).next_multiple_of(ALIGN);
        Self {
            ptr,
            len,
            _chunk: Some(chunk),
        }
    }

    /// A copy of `values`.
    pub fn copied(values: &[T]) -> Self {
        let mut b = Self::zeroed(values.len());
        b.copy_from_slice(values);
        b
    }
}

impl<T: Zero> Default for Huge<T> {
    fn default() -> Self {
        Self {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
            _chunk: None,
        }
    }
}

impl<T: Zero> std::ops::Deref for Huge<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised `T`s this array owns (dangling and
        // aligned only when empty).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Zero> std::ops::DerefMut for Huge<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Zero> Clone for Huge<T> {
    fn clone(&self) -> Self {
        Self::copied(self)
    }
}

impl<T: Zero> std::fmt::Debug for Huge<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Huge({} x {} bytes)", self.len, size_of::<T>())
    }
}

/// A zeroed array on its own anonymous mapping, unmapped when dropped: the large
/// temporaries of packing a matrix (an output head's decoded quants are 28 MB for the
/// default model, 168 MB for Gemma 3 270M). From malloc they would end at the top of the
/// loading thread's arena, which glibc's `malloc_trim` does not return for any arena
/// but the main one, and each thread that ever loaded a model would keep them resident.
pub struct Scratch<T: Zero> {
    map: memmap2::MmapMut,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Zero> Scratch<T> {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        let bytes = (len * size_of::<T>()).max(1);
        let map = memmap2::MmapMut::map_anon(bytes)
            .unwrap_or_else(|e| panic!("mapping {bytes} bytes of scratch: {e}"));
        Self {
            map,
            len,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: Zero> std::ops::Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the mapping is page-aligned (so aligned for `T`), at least `len` `T`s
        // long, zero-initialised (valid `T`s by `Zero`) and owned by `self`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr() as *const T, self.len) }
    }
}

impl<T: Zero> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, exclusive through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr() as *mut T, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_never_overlap() {
        let sizes = [1, 63, 64, 100, 4096, 1 << 20, 5 << 20, 3, CHUNK / 4];
        let mut bufs: Vec<HugeBytes> = sizes.iter().map(|&n| HugeBytes::zeroed(n)).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert!(b.iter().all(|&x| x == 0));
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            b.fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u8 + 1),
                "buffer {i} was overwritten"
            );
        }
        let big = &bufs[6];
        assert_eq!(
            big.as_ptr() as usize % HUGE,
            0,
            "a big buffer starts on a huge page"
        );
        let c = bufs[2].clone();
        assert_eq!(&c[..], &bufs[2][..]);
        assert_ne!(c.as_ptr(), bufs[2].as_ptr());
        assert!(HugeBytes::default().is_empty());
        let mut f = Scratch::<f32>::zeroed(1000);
        assert!(f.iter().all(|&x| x == 0.0));
        f[999] = 1.5;
        assert_eq!(f.len(), 1000);
        assert!(Scratch::<u8>::zeroed(0).is_empty());
    }

    #[test]
    fn a_mapping_lives_as_long_as_its_buffers() {
        let a = HugeBytes::zeroed(1000);
        let weak = Arc::downgrade(a._chunk.as_ref().expect("a chunk"));
        assert!(weak.upgrade().is_some(), "a keeps its chunk mapped");
        // Small buffers share chunks with other tests' buffers; a big one has its own.
        let big = HugeBytes::zeroed(CHUNK);
        let w = Arc::downgrade(big._chunk.as_ref().expect("a chunk"));
        drop(big);
        assert!(w.upgrade().is_none(), "a buffer's own mapping goes with it");
        drop(a);
    }

    /// The `AnonHugePages` figure (KB) of the mapping holding `addr`, from /proc/self/smaps.
    #[cfg(target_os = "linux")]
    fn huge_kb_at(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let hex = |v: &str| usize::from_str_radix(v, 16).ok();
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'))
                .and_then(|(a, b)| Some(hex(a)?..hex(b)?));
            if let Some(range) = range {
                inside = range.contains(&addr);
                continue;
            }
            if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                return kb.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn weights_sit_on_huge_pages_where_the_system_allows_them() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        let allowed = mode.as_deref().is_ok_and(|m| !m.contains("[never]"));
        if !allowed || !huge_pages() {
            eprintln!("SKIPPED weights_sit_on_huge_pages: transparent huge pages are off here");
            return;
        }
        let mut b = HugeBytes::zeroed(8 << 20);
        b.fill(1);
        let kb = huge_kb_at(b.as_ptr() as usize).expect("the buffer's mapping in smaps");
        assert!(kb >= 8 << 10, "{kb} KB of an 8 MB buffer on huge pages");
    }
}
