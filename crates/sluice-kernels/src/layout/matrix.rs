//! The weight matrix in the grouped layout that `packed.rs` describes and builds: its
//! fields, the accessors the kernels read it through, and the share of a matmul one task
//! computes (`Part`).

use half::f16;

use super::prefetch::Prefetch;

/// Rows per group.
pub const GROUP: usize = 16;
/// Bytes per chunk (16 rows x 4 quants).
pub(crate) const CHUNK: usize = 64;

static SPECIALISED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turns on or off the one-row (decode) loops compiled for the common prefetch hint and
/// scale storage (`x86/avx512/matmul/lone.rs`, and `tile` of one row in
/// `x86/avx2/matmul.rs`); off, the general loop runs every
/// case. The knob `benches/forward.rs` (`:generic`) and the tests turn to compare both in
/// one process: the numbers are the same bits either way.
pub fn set_specialised(on: bool) {
    SPECIALISED.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `set_specialised` left the specialised one-row loops on (the default).
#[inline(always)]
pub(crate) fn specialised() -> bool {
    SPECIALISED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The one-row loops' compiled prefetch cases: the hint read at run time, none, or into
/// L2 (the default).
pub(crate) const PF_ANY: u8 = 0;
pub(crate) const PF_OFF: u8 = 1;
pub(crate) const PF_L2: u8 = 2;

/// The one-row loops' compiled scale cases: read as the matrix says at run time, f16
/// lanes, or factored (i8 lanes times f16 super-block factors).
pub(crate) const SC_ANY: u8 = 0;
pub(crate) const SC_HALF: u8 = 1;
pub(crate) const SC_FACTORED: u8 = 2;

/// The prefetch case of a matmul of `n` activation rows under `hint`: only few rows
/// (decode) prefetch.
#[inline(always)]
pub(crate) fn prefetch_case(n: usize, hint: u8) -> u8 {
    match hint {
        _ if n > PREFETCH_ROWS => PF_OFF,
        h if h == Prefetch::L2 as u8 => PF_L2,
        h if h == Prefetch::Off as u8 => PF_OFF,
        _ => PF_ANY,
    }
}

/// The scale case of `p`'s scales as stored (not expanded).
#[inline(always)]
pub(crate) fn scale_case(p: &PackedMatrix) -> u8 {
    if p.factored > 0 {
        SC_FACTORED
    } else if p.half {
        SC_HALF
    } else {
        SC_ANY
    }
}

/// 0: not yet decided; 1: off; 2: on.
static GFNI: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the AVX-512 matmul splits nibbles with GFNI's affine transform (one instruction
/// where a shift and a mask are two): on where the CPU has GFNI, unless `set_gfni` turned
/// it off. The numbers are the same bits either way.
#[inline]
pub(crate) fn gfni() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    match GFNI.load(Relaxed) {
        0 => set_gfni(true),
        v => v == 2,
    }
}

/// Turns the GFNI nibble split on (where the CPU has it) or off, and returns whether it is
/// on: the knob `benches/forward.rs` turns to compare both in one process.
pub fn set_gfni(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    let has = std::is_x86_feature_detected!("gfni");
    #[cfg(not(target_arch = "x86_64"))]
    let has = false;
    let on = on && has;
    GFNI.store(1 + on as u8, std::sync::atomic::Ordering::Relaxed);
    on
}

/// The AVX2 matmul's integer products: `vpmaddubsw` and `vpmaddwd` (no VNNI), or one
/// 256-bit `vpdpbusd` in its EVEX form (AVX-512 VNNI with VL) or its VEX form (AVX-VNNI,
/// the AVX2-only Intel cores from Alder Lake on). The integer sums are exact either way,
/// so the numbers are the same bits.
pub(crate) const VNNI_NONE: u8 = 0;
pub(crate) const VNNI_EVEX: u8 = 1;
pub(crate) const VNNI_VEX: u8 = 2;

/// `u8::MAX` until decided.
static VNNI256: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(u8::MAX);

/// Which `vpdpbusd` the AVX2 matmul uses (`VNNI_*`). By default the VEX form where the CPU
/// has AVX-VNNI and none elsewhere: a CPU with AVX-512 VNNI runs the AVX-512 kernels, and
/// its AVX2 level (`SLUICE_KERNEL=avx2`) stands for an AVX2 CPU without VNNI unless
/// `SLUICE_AVX2_VNNI=1` asks for the EVEX form (`set_avx2_vnni`).
#[inline]
pub(crate) fn vnni256() -> u8 {
    use std::sync::atomic::Ordering::Relaxed;
    match VNNI256.load(Relaxed) {
        u8::MAX => {
            let on = std::env::var("SLUICE_AVX2_VNNI").map_or(None, |v| Some(v != "0"));
            #[cfg(target_arch = "x86_64")]
            let vex = std::is_x86_feature_detected!("avxvnni");
            #[cfg(not(target_arch = "x86_64"))]
            let vex = false;
            set_avx2_vnni(on.unwrap_or(vex));
            VNNI256.load(Relaxed)
        }
        v => v,
    }
}

/// Turns the AVX2 matmul's `vpdpbusd` on (the VEX form where the CPU has AVX-VNNI, else
/// the EVEX form where it has AVX-512 VNNI with VL) or off, and returns whether it is on:
/// the knob the tests and benches turn to compare both in one process.
pub fn set_avx2_vnni(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    let v = {
        use std::is_x86_feature_detected as has;
        if !on {
            VNNI_NONE
        } else if has!("avxvnni") {
            VNNI_VEX
        } else if has!("avx512vnni") && has!("avx512vl") {
            VNNI_EVEX
        } else {
            VNNI_NONE
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let v = {
        let _ = on;
        VNNI_NONE
    };
    VNNI256.store(v, std::sync::atomic::Ordering::Relaxed);
    v != VNNI_NONE
}

/// The AVX2 matmul's `vpdpbusd` in force: `"vex"`, `"evex"` or `"off"` (`set_avx2_vnni`).
pub fn avx2_vnni() -> &'static str {
    match vnni256() {
        VNNI_VEX => "vex",
        VNNI_EVEX => "evex",
        _ => "off",
    }
}

/// Forces one `vpdpbusd` form (`VNNI_*`) whatever the CPU has: only for the test of a
/// form the CPU has (`x86/avx2/vnni.rs`).
#[cfg(test)]
pub(crate) fn force_avx2_vnni(v: u8) {
    VNNI256.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// Activation rows up to which a matmul is bound by reading its weights (the AVX2 kernel
/// prefetches each block once, by the tile of the first half).
pub(crate) const PREFETCH_ROWS: usize = 4;

/// The share of one matmul that one task computes: the weight rows of groups `groups`
/// against activation rows `rows`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Groups of `GROUP` weight rows.
    pub groups: std::ops::Range<usize>,
    /// Activation rows.
    pub rows: std::ops::Range<usize>,
}

/// A weight matrix in the grouped layout.
pub struct PackedMatrix {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// Columns per block.
    pub(crate) bk: usize,
    /// Two quants per byte.
    pub(crate) nibbles: bool,
    /// Quants may exceed 63 (only the AVX2 path cares).
    pub(crate) wide: bool,
    /// Quants are signed bytes and the offsets zero: Q8_0 packed for AVX2 and the
    /// portable path, where `|w| · (x · sign w)` needs one `vpmaddubsw` per chunk instead
    /// of two. (AVX-512 packs Q8_0 as `q + 128` for `vpdpbusd`.)
    pub(crate) signed: bool,
    /// Bits of the largest quant (4, 5, 6 or 8): how many chunks' pair sums the AVX2
    /// kernel can add in 16 bits, and with `nibbles`, how many bits above the nibble the
    /// high plane keeps (`high`).
    pub(crate) bits: u32,
    /// The offset as a fixed multiple of the scale (`m = k·d`), not stored.
    pub(crate) m_of_d: Option<f32>,
    /// Scales stored as f16 (else f32).
    pub(crate) half: bool,
    /// Blocks per super-block when the scales are factored as the K-quants store them
    /// (`formats::k_factors`): `d` and `m` then hold one i8 per lane and block, and
    /// `dsup`/`msup` one f16 per lane and super-block, `d = dsup · d[..]` exactly.
    /// 0: `d` and `m` hold the whole values (f16 or f32, `half`).
    pub(crate) factored: usize,
    pub(crate) qs: super::HugeBytes,
    pub(crate) d: super::HugeBytes,
    pub(crate) m: super::HugeBytes,
    pub(crate) dsup: super::HugeBytes,
    pub(crate) msup: super::HugeBytes,
}

impl PackedMatrix {
    pub(crate) const fn quant_bytes(bk: usize, nibbles: bool, high: usize) -> usize {
        let chunks = bk / 4;
        let planes = if high > 0 { CHUNK } else { 0 };
        if nibbles {
            chunks / 2 * CHUNK + planes
        } else {
            chunks * CHUNK
        }
    }

    /// Quant bytes of one (group, block).
    pub(crate) fn block_quant_bytes(&self) -> usize {
        Self::quant_bytes(self.bk, self.nibbles, self.high())
    }

    /// Bits above the nibble kept in the high plane (0, 1 or 2).
    pub(crate) fn high(&self) -> usize {
        high_bits(self.nibbles, self.bits)
    }

    /// Offset of the high plane inside a block's quant bytes.
    pub(crate) fn high_plane(&self) -> usize {
        self.bk / 8 * CHUNK
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The arrays a matmul reads, each laid out by group: quants, scales, offsets and
    /// super-block factors (those stored).
    pub(crate) fn arrays(&self) -> impl Iterator<Item = &[u8]> {
        [&self.qs, &self.d, &self.m, &self.dsup, &self.msup]
            .into_iter()
            .filter(|v| !v.is_empty())
            .map(|v| &v[..])
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row groups.
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(GROUP)
    }

    /// Blocks per row.
    pub(crate) fn blocks(&self) -> usize {
        self.cols / self.bk
    }

    /// Quants of (group, block).
    #[inline(always)]
    pub(crate) fn quants(&self, g: usize, b: usize) -> *const u8 {
        self.block(g, b).as_ptr()
    }

    /// Bytes of one (group, block)'s 16 scale lanes as stored: i8 when `factored`, else
    /// f16 or f32 (`half`).
    #[inline(always)]
    pub(crate) fn lane_bytes(&self) -> usize {
        GROUP
            * if self.factored > 0 {
                1
            } else if self.half {
                2
            } else {
                4
            }
    }

    /// Scales and offsets of (group, block): 16 lanes each (`lane_bytes`). The offsets'
    /// pointer is null when they are derived (`m_of_d`).
    #[inline(always)]
    pub(crate) fn scales(&self, g: usize, b: usize) -> (*const u8, *const u8) {
        let size = self.lane_bytes();
        let i = (g * self.blocks() + b) * size;
        let m = if self.m_of_d.is_some() {
            std::ptr::null()
        } else {
            self.m[i..i + size].as_ptr()
        };
        (self.d[i..i + size].as_ptr(), m)
    }

    /// With `factored`, the f16 super-block scales and offsets (16 lanes each) that block
    /// `b` of group `g` multiplies its integers by; null pointers otherwise (and for
    /// derived offsets).
    #[inline(always)]
    pub(crate) fn supers(&self, g: usize, b: usize) -> (*const u8, *const u8) {
        if self.factored == 0 {
            return (std::ptr::null(), std::ptr::null());
        }
        let supers = self.blocks() / self.factored;
        let i = (g * supers + b / self.factored) * GROUP * 2;
        let m = if self.m_of_d.is_some() {
            std::ptr::null()
        } else {
            self.msup[i..i + GROUP * 2].as_ptr()
        };
        (self.dsup[i..i + GROUP * 2].as_ptr(), m)
    }

    /// The scale of row `j` of (group, block).
    pub(crate) fn scale_of(&self, g: usize, b: usize, j: usize) -> f32 {
        self.scale_at(&self.d, &self.dsup, g, b, j)
    }

    /// The offset of row `j` of (group, block).
    pub(crate) fn offset_at(&self, g: usize, b: usize, j: usize) -> f32 {
        match self.m_of_d {
            Some(k) => k * self.scale_of(g, b, j),
            None => self.scale_at(&self.m, &self.msup, g, b, j),
        }
    }

    fn scale_at(&self, v: &[u8], sup: &[u8], g: usize, b: usize, j: usize) -> f32 {
        let i = (g * self.blocks() + b) * GROUP + j;
        if let (Some(supers), Some(s)) = (
            self.blocks().checked_div(self.factored),
            b.checked_div(self.factored),
        ) {
            let k = (g * supers + s) * GROUP + j;
            let s = f16::from_le_bytes([sup[2 * k], sup[2 * k + 1]]).to_f32();
            (v[i] as i8) as f32 * s
        } else if self.half {
            f16::from_le_bytes([v[2 * i], v[2 * i + 1]]).to_f32()
        } else {
            f32::from_le_bytes(v[4 * i..4 * i + 4].try_into().expect("4 bytes"))
        }
    }

    /// A stored quant as the integer it stands for.
    #[inline(always)]
    pub(crate) fn value(&self, q: u8) -> i32 {
        if self.signed {
            q as i8 as i32
        } else {
            q as i32
        }
    }

    /// The quant bytes of (group, block).
    #[inline(always)]
    fn block(&self, g: usize, b: usize) -> &[u8] {
        let qb = self.block_quant_bytes();
        &self.qs[(g * self.blocks() + b) * qb..][..qb]
    }

    /// Quant `t` of row `j` in a block's quant bytes `q`.
    #[inline(always)]
    fn quant_in(&self, q: &[u8], j: usize, t: usize) -> u8 {
        let (c, tt) = (t / 4, t % 4);
        if !self.nibbles {
            return q[c * CHUNK + 4 * j + tt];
        }
        let half = self.bk / 8;
        let byte = q[(c % half) * CHUNK + 4 * j + tt];
        let lo = if c < half { byte & 0xF } else { byte >> 4 };
        let high = self.high();
        if high == 0 {
            return lo;
        }
        let mask = (1u8 << high) - 1;
        lo | (((q[self.high_plane() + 4 * j + tt] >> (high * c)) & mask) << 4)
    }

    /// All quants of (group, block) as `u[row * bk + t]`.
    pub(crate) fn unpack(&self, g: usize, b: usize, u: &mut [u8]) {
        let q = self.block(g, b);
        let bk = self.bk;
        for j in 0..GROUP {
            for t in 0..bk {
                u[j * bk + t] = self.quant_in(q, j, t);
            }
        }
    }

    /// Row `r` as f32 (`w = d * u + m`).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        let (g, j) = (r / GROUP, r % GROUP);
        for b in 0..self.blocks() {
            let d = self.scale_of(g, b, j);
            let m = self.offset_at(g, b, j);
            let q = self.block(g, b);
            for t in 0..self.bk {
                out[b * self.bk + t] = d * self.value(self.quant_in(q, j, t)) as f32 + m;
            }
        }
    }

    /// Writes the 16 lanes of group `g` for activation row `i` (rows past the end are
    /// padding and are dropped).
    ///
    /// # Safety
    /// As `matmul_groups`.
    #[inline(always)]
    pub(crate) unsafe fn store(
        &self,
        g: usize,
        i: usize,
        lanes: &[f32; GROUP],
        y: *mut f32,
        stride: usize,
    ) {
        let valid = (self.rows - g * GROUP).min(GROUP);
        for (j, v) in lanes.iter().take(valid).enumerate() {
            // SAFETY: in bounds and exclusive by the caller's contract.
            unsafe { *y.add(i * stride + g * GROUP + j) = *v };
        }
    }
}

/// `s` when the offset is `-2^s·d` and the kernels take it inside the integer sum; 0
/// otherwise. Such quants are `u` in `0..2^(s+1)`, so `|u - 2^s| ≤ 2^s`, and a 16-bit lane
/// of the AVX2 kernel, which sums `bk/2` products with activations of at most 127, stays
/// exact while `bk/2 · 2^s · 127 < 2^15`: Q4_0 (s = 3) and Q5_0 (4) in blocks of 32, Q6_K
/// (5) in blocks of 16.
pub(crate) fn folded_shift(p: &PackedMatrix) -> i32 {
    let s = p.bits as i32 - 1;
    let fits = p.bk * (1 << s) <= 512;
    match p.m_of_d {
        Some(k) if !p.signed && p.bits <= 6 && fits && k == -((1 << s) as f32) => s,
        _ => 0,
    }
}

/// Bits above the nibble in the high plane of quants of `bits` bits (none unless packed
/// as nibbles).
pub(crate) const fn high_bits(nibbles: bool, bits: u32) -> usize {
    if nibbles { bits as usize - 4 } else { 0 }
}
