//! How far ahead, and into which cache, a few-row (decode) matmul asks for its weights:
//! one distance for nibble quants, one for whole bytes (8-bit), each a knob
//! `benches/forward.rs` turns. Results never depend on them.

/// Bytes ahead of the quants being read that a few-row matmul prefetches, by default. A
/// decode step streams each matrix from memory once, and the hardware prefetcher ramps up
/// too late for matrices of a few hundred KB. Asking 2 KB ahead into L1 made a decode step's
/// layers 15% faster than no prefetch where it was first tuned (`benches/forward`, SmolLM2
/// and Gemma 3); on an AMD EPYC (Zen 4) VM, 4 KB ahead into L2 ([`Prefetch::L2`]) took
/// 12-23% less time per decode token again than 2 KB into L1, and 2, 8, 16 or 32 KB, or
/// the start of each task or the scales asked for as well, did no better
/// (`SLUICE_BENCH_PREFETCH`, `benches/forward.rs`). Since each compute thread streams one
/// contiguous share of a matmul's tasks (`threads.rs`), 8 KB ahead is 1-2% faster than
/// 4 KB with the VM's two vCPUs on one core's two hardware threads, and 8% with them on
/// two cores (a prefetch now runs on into the thread's next task). A prefetch into L1
/// ties up one of the few L1 miss buffers per line until it arrives; into L2 it does not.
pub(crate) const PREFETCH_AHEAD: usize = 8192;

/// Where a few-row matmul's prefetches bring the weights ([`set_prefetch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Prefetch {
    /// No software prefetch: the hardware prefetchers alone.
    Off = 0,
    /// Into L1 (`prefetcht0`).
    L1 = 1,
    /// Into L2 (`prefetcht1`), the default.
    L2 = 2,
    /// Non-temporal (`prefetchnta`).
    Nta = 3,
}

/// `ahead << 2 | hint`.
static PREFETCH: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(PREFETCH_AHEAD << 2 | Prefetch::L2 as usize);

/// Sets how far ahead (bytes) and where a few-row (decode) matmul prefetches its weights
/// (the distance of nibble quants; whole bytes have their own, `set_prefetch_whole_bytes`):
/// the knob `benches/forward.rs` turns to compare settings on one machine, in one process.
/// Results never depend on it.
pub fn set_prefetch(ahead: usize, hint: Prefetch) {
    PREFETCH.store(
        ahead << 2 | hint as usize,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The prefetch distance and hint (`Prefetch as u8`) in force.
#[inline(always)]
pub(crate) fn prefetch() -> (usize, u8) {
    let v = PREFETCH.load(std::sync::atomic::Ordering::Relaxed);
    (v >> 2, (v & 3) as u8)
}

/// Bytes ahead that a few-row matmul over whole-byte (8-bit, Q8_0) quants prefetches on
/// an AMD CPU, by default. On the 2-vCPU AMD EPYC (Zen 4) VM a SmolLM2 Q8_0 decode token
/// took 4.35 ms asking 8 KB ahead and 3.81-3.96 at 0-4 KB, while the nibble formats still
/// gained from 8 KB (Q4_1: 3.09 against 3.38 ms at 2 KB). With 8-bit quants asked for 2 KB
/// ahead and the rest 8 KB, a token took 5.31 ms instead of 6.56 on Gemma 3 270M (whose
/// 168 MB output head is Q8_0), 2.83 instead of 2.99 on SmolLM2 Q4_K_M and 4.22 instead
/// of 4.59 on Q8_0; 0, 1, 2 and 3 KB were alike (`SLUICE_BENCH_PREFETCH=8192:l2:w8192,
/// 8192:l2:w2048` of `benches/forward.rs`, medians of 30 alternating runs). An 8-bit
/// matmul spends half the instructions per byte of a nibble one, so the hardware
/// prefetcher keeps up with it alone and far prefetches only compete for the miss
/// buffers. Only the AVX-512 one-row loop (`lone`) reads it: the AVX2 kernel on the same
/// CPU took 6.07 ms per SmolLM2 Q8_0 token at 2 KB against 4.80 at 8 KB, so it keeps one
/// distance for every format. Elsewhere (Intel) 8-bit quants go as far as the rest, as
/// tuned there.
const WHOLE_BYTES_AHEAD_AMD: usize = 2048;

/// `usize::MAX` until chosen: [`set_prefetch_whole_bytes`], or the CPU's default.
static WHOLE_BYTES_AHEAD: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Sets how far ahead (bytes) a few-row matmul over 8-bit quants prefetches, apart from
/// the other formats' distance (`set_prefetch`); `None` restores the CPU's default. A knob
/// for `benches/forward.rs`: results never depend on it.
pub fn set_prefetch_whole_bytes(ahead: Option<usize>) {
    let v = ahead.unwrap_or_else(whole_bytes_default);
    WHOLE_BYTES_AHEAD.store(v, std::sync::atomic::Ordering::Relaxed);
}

fn whole_bytes_default() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 0 (the vendor) exists on every x86_64 CPU.
        let id = std::arch::x86_64::__cpuid(0);
        let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat();
        if vendor == *b"AuthenticAMD" {
            return WHOLE_BYTES_AHEAD_AMD;
        }
    }
    PREFETCH_AHEAD
}

/// The prefetch distance and hint of a matrix whose quants are nibbles (`nib`: the
/// distance `set_prefetch` set) or whole bytes (their own, `set_prefetch_whole_bytes`).
#[inline(always)]
pub(crate) fn prefetch_for(nib: bool) -> (usize, u8) {
    let (ahead, hint) = prefetch();
    if nib {
        return (ahead, hint);
    }
    let mut v = WHOLE_BYTES_AHEAD.load(std::sync::atomic::Ordering::Relaxed);
    if v == usize::MAX {
        v = whole_bytes_default();
        WHOLE_BYTES_AHEAD.store(v, std::sync::atomic::Ordering::Relaxed);
    }
    // Nothing ahead: no prefetch at all.
    (v, if v == 0 { Prefetch::Off as u8 } else { hint })
}

/// Key blocks (16 positions each) ahead of the one being weighed whose values the
/// AVX-512 and AVX2 one-row attention kernels ask for, into L2, in their weighted sums.
/// The score pass asked for each block's values into L1 as it went, but a long row's keys
/// push them out before the weighted sums come back for them. On the 2-vCPU AMD EPYC
/// (Zen 4) VM, at AVX-512, a SmolLM2 Q4_1 decode token took 3-5% less time from
/// positions 2,000 and 4,000 (6.66 against 6.98 ms, 8.77 against 9.12, 10.20 against
/// 10.55; one thread 11.03 against 11.55; 4 and 8 blocks alike), and the same time from
/// 6,000 and 8,000, on Gemma 3 270M from 4,000 and at position 64 (`SLUICE_BENCH_AT=N
/// SLUICE_BENCH_PREFETCH=8192:l2:v0,8192:l2:v4 cargo bench --bench forward`, medians of
/// 30 alternating runs). Asking for the keys 4, 8 or 16 blocks ahead instead of 1, into
/// L1 or L2, changed nothing. The AVX2 kernel (`SLUICE_KERNEL=avx2`, same CPU) gained
/// more: 6.01 against 6.64 ms from 2,000, 8.01 against 8.93 from 3,000, 12.32 against
/// 13.65 from 6,000, 16.3 against 18.0 from 8,000, and the same at position 64.
pub const VALUES_AHEAD: usize = 4;

static ATTN_VALUES_AHEAD: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(VALUES_AHEAD);

/// Sets how many key blocks ahead decode attention's weighted sums ask for their values
/// (0: none; [`VALUES_AHEAD`] by default): a knob for `benches/forward.rs`. Results never
/// depend on it.
pub fn set_attention_values_ahead(blocks: usize) {
    // At most 64 blocks: a block index plus it never overflows.
    ATTN_VALUES_AHEAD.store(blocks.min(64), std::sync::atomic::Ordering::Relaxed);
}

/// The value blocks ahead in force.
#[inline(always)]
pub(crate) fn attention_values_ahead() -> usize {
    ATTN_VALUES_AHEAD.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn whole_byte_quants_prefetch_their_own_distance() {
        // Nibbles go the distance of `set_prefetch`; whole bytes theirs, and 0 asks nothing.
        let (ahead, hint) = prefetch();
        assert_eq!(prefetch_for(true), (ahead, hint));
        set_prefetch_whole_bytes(Some(3072));
        assert_eq!(prefetch_for(false), (3072, hint));
        set_prefetch_whole_bytes(Some(0));
        assert_eq!(prefetch_for(false), (0, Prefetch::Off as u8));
        set_prefetch_whole_bytes(None);
        let amd = std::arch::x86_64::__cpuid(0).ebx.to_le_bytes() == *b"Auth";
        let expected = if amd {
            WHOLE_BYTES_AHEAD_AMD
        } else {
            PREFETCH_AHEAD
        };
        assert_eq!(prefetch_for(false), (expected, hint));
    }
}
