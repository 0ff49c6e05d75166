//! The vector operations the packed kernels are written in, once for AVX-512 (16 lanes,
//! one per weight row of a tile) and once for AVX2 (8 lanes: a tile in two halves).
//!
//! Every integer operation is exact and every float operation is the one the scalar
//! twin performs, so both give the same bits.

use std::arch::x86_64::*;

/// One instruction set: `I` holds `LANES` i32, `F` holds `LANES` f32, lane `r` belonging
/// to weight row `r` of the tile (half).
///
/// # Safety
/// Every method needs the CPU features of its implementation, and each pointer must be
/// valid for the bytes it reads (stated per method in lanes).
pub trait Lanes: Copy {
    type I: Copy;
    type F: Copy;
    /// A partial: `pdot`s gathered before they are added into an `I` (AVX2: in i16).
    type P: Copy;
    const LANES: usize;
    /// How much the weight bytes of a Q8_0 tile are biased: `dot_q8` computes
    /// `Σ w·x` on bytes that hold `q + Q8_BIAS`.
    const Q8_BIAS: i32;
    /// A partial holds `n` `pdot`s of weights up to `w_max` exactly while
    /// `n · w_max <= PARTIAL_CAP`.
    const PARTIAL_CAP: i32;

    unsafe fn izero() -> Self::I;
    unsafe fn fzero() -> Self::F;
    /// `4 · LANES` bytes.
    unsafe fn load(p: *const u8) -> Self::I;
    /// [`Lanes::load`]'s inverse.
    unsafe fn store_i(v: Self::I, p: *mut u8);
    /// The low and high nibbles of every byte.
    unsafe fn nibbles(v: Self::I) -> (Self::I, Self::I);
    unsafe fn pzero() -> Self::P;
    /// `p + Σ_{j<4} w[4l + j] · x[j]` per lane `l`: `w` unsigned bytes below 64, `x` four
    /// signed bytes (read at `x`).
    unsafe fn pdot(p: Self::P, w: Self::I, x: *const i8) -> Self::P;
    /// `a + b`: one partial of the `pdot`s of both (which must fit one).
    unsafe fn padd(a: Self::P, b: Self::P) -> Self::P;
    /// `acc + p` per lane.
    unsafe fn flush(acc: Self::I, p: Self::P) -> Self::I;
    /// `acc + p · s` per lane, `s` a [`Lanes::pair_scale`].
    unsafe fn flush_scaled(acc: Self::I, p: Self::P, s: Self::I) -> Self::I;
    /// `pdot` for Q8_0 bytes (`q + Q8_BIAS`, any value), added into an `I`.
    unsafe fn dot_q8(acc: Self::I, w: Self::I, x: *const i8) -> Self::I;
    /// Sets bit 4 of byte `i` where bit `i` of the `4 · LANES`-bit mask at `bits` is set.
    unsafe fn fifth_bit(v: Self::I, bits: *const u8) -> Self::I;
    /// Byte `i` negated where bit `i` of the `4 · LANES`-bit mask at `bits` is set, as
    /// the bytes of a Q8_0 tile (`q + 128`, for [`Lanes::dot_q8`]); bytes in -127..=127.
    unsafe fn signed_q8(v: Self::I, bits: *const u8) -> Self::I;
    /// Lane `l` gets the u32 at `base + SCALE · idx[l]` (unaligned).
    unsafe fn gather<const SCALE: i32>(base: *const u8, idx: Self::I) -> Self::I;
    /// `LANES` u8 at `p`, zero-extended.
    unsafe fn u8s(p: *const u8) -> Self::I;
    /// `(v >> 2t) & 3) << 4` per byte, `t` in 0..4.
    unsafe fn q6_high(v: Self::I, t: usize) -> Self::I;
    /// The 16 bytes of `t` in every 16-byte lane, for [`Lanes::lookup`].
    unsafe fn table(t: &[u8; 16]) -> Self::I;
    /// Byte `i` replaced by byte `v[i]` of the table (`v[i]` below 16).
    unsafe fn lookup(table: Self::I, v: Self::I) -> Self::I;
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn mullo(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn splat(v: i32) -> Self::I;
    /// `LANES` i8 at `p`, sign-extended.
    unsafe fn i8s(p: *const u8) -> Self::I;
    /// `2 · LANES` bytes widened to i16 (`SIGNED`: sign-extended), lane `l` holding the
    /// pair of bytes `2l, 2l + 1`.
    unsafe fn pairs<const SIGNED: bool>(p: *const u8) -> Self::I;
    /// The first (`HIGH` false) or second i16 of each lane's pair (from `pairs::<SIGNED>`),
    /// in the form `flush_scaled` takes.
    unsafe fn pair_scale<const SIGNED: bool, const HIGH: bool>(v: Self::I) -> Self::I;
    /// `acc + a.0 · b.0 + a.1 · b.1` per lane, `a` a lane of i16 pairs, `b` two i16 at `b`.
    unsafe fn madd_pairs(acc: Self::I, a: Self::I, b: *const i16) -> Self::I;
    /// `LANES` f16 at `p`.
    unsafe fn f16(p: *const u8) -> Self::F;
    /// `2^(e - 128)` for the `LANES` bytes `e` (below 255) at `p`: MXFP4's
    /// `device::formats::mxfp4::half`, bit for bit (down to the subnormal `2^-128`).
    unsafe fn e8m0_half(p: *const u8) -> Self::F;
    unsafe fn cvt(v: Self::I) -> Self::F;
    /// `v · s` per lane.
    unsafe fn scale(v: Self::F, s: f32) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn splat_f(v: f32) -> Self::F;
    unsafe fn neg(v: Self::F) -> Self::F;
    /// `a · b + c` with one rounding.
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `LANES` f32 to `out`.
    unsafe fn store(v: Self::F, out: *mut f32);
}

/// AVX-512 F/BW with VNNI: a whole tile in one register.
#[derive(Clone, Copy)]
pub struct Avx512;

impl Lanes for Avx512 {
    type I = __m512i;
    type F = __m512;
    type P = __m512i;
    const LANES: usize = 16;
    const Q8_BIAS: i32 = 128;
    /// Each i32 gathers four products of a weight and an activation in -127..=127.
    const PARTIAL_CAP: i32 = i32::MAX / (4 * 127);

    #[inline(always)]
    unsafe fn izero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn fzero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        _mm512_loadu_si512(p as *const _)
    }
    #[inline(always)]
    unsafe fn store_i(v: __m512i, p: *mut u8) {
        _mm512_storeu_si512(p as *mut _, v)
    }
    #[inline(always)]
    unsafe fn nibbles(v: __m512i) -> (__m512i, __m512i) {
        let low = _mm512_set1_epi8(0x0F);
        (
            _mm512_and_si512(v, low),
            _mm512_and_si512(_mm512_srli_epi16::<4>(v), low),
        )
    }
    #[inline(always)]
    unsafe fn pzero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn pdot(p: __m512i, w: __m512i, x: *const i8) -> __m512i {
        _mm512_dpbusd_epi32(p, w, _mm512_set1_epi32((x as *const i32).read_unaligned()))
    }
    #[inline(always)]
    unsafe fn padd(a: __m512i, b: __m512i) -> __m512i {
        _mm512_add_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn flush(acc: __m512i, p: __m512i) -> __m512i {
        _mm512_add_epi32(acc, p)
    }
    #[inline(always)]
    unsafe fn flush_scaled(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
        _mm512_add_epi32(acc, _mm512_mullo_epi32(p, s))
    }
    #[inline(always)]
    unsafe fn dot_q8(acc: __m512i, w: __m512i, x: *const i8) -> __m512i {
        Self::pdot(acc, w, x)
    }
    #[inline(always)]
    unsafe fn fifth_bit(v: __m512i, bits: *const u8) -> __m512i {
        let k = (bits as *const u64).read_unaligned();
        _mm512_or_si512(v, _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x10)))
    }
    #[inline(always)]
    unsafe fn signed_q8(v: __m512i, bits: *const u8) -> __m512i {
        let k = (bits as *const u64).read_unaligned();
        let q = _mm512_mask_sub_epi8(v, k, _mm512_setzero_si512(), v);
        _mm512_xor_si512(q, _mm512_set1_epi8(i8::MIN))
    }
    #[inline(always)]
    unsafe fn gather<const SCALE: i32>(base: *const u8, idx: __m512i) -> __m512i {
        _mm512_i32gather_epi32::<SCALE>(idx, base as *const _)
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m512i {
        _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn q6_high(v: __m512i, t: usize) -> __m512i {
        let three = _mm512_set1_epi8(3);
        let s = match t {
            0 => v,
            1 => _mm512_srli_epi16::<2>(v),
            2 => _mm512_srli_epi16::<4>(v),
            _ => _mm512_srli_epi16::<6>(v),
        };
        _mm512_slli_epi16::<4>(_mm512_and_si512(s, three))
    }
    #[inline(always)]
    unsafe fn table(t: &[u8; 16]) -> __m512i {
        _mm512_broadcast_i32x4(_mm_loadu_si128(t.as_ptr() as *const __m128i))
    }
    #[inline(always)]
    unsafe fn lookup(table: __m512i, v: __m512i) -> __m512i {
        _mm512_shuffle_epi8(table, v)
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        _mm512_or_si512(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512i, b: __m512i) -> __m512i {
        _mm512_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn mullo(a: __m512i, b: __m512i) -> __m512i {
        _mm512_mullo_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn splat(v: i32) -> __m512i {
        _mm512_set1_epi32(v)
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> __m512i {
        _mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn pairs<const SIGNED: bool>(p: *const u8) -> __m512i {
        let v = _mm256_loadu_si256(p as *const __m256i);
        if SIGNED {
            _mm512_cvtepi8_epi16(v)
        } else {
            _mm512_cvtepu8_epi16(v)
        }
    }
    #[inline(always)]
    unsafe fn pair_scale<const SIGNED: bool, const HIGH: bool>(v: __m512i) -> __m512i {
        match (SIGNED, HIGH) {
            (_, false) => _mm512_srai_epi32::<16>(_mm512_slli_epi32::<16>(v)),
            (true, true) => _mm512_srai_epi32::<16>(v),
            (false, true) => _mm512_srli_epi32::<16>(v),
        }
    }
    #[inline(always)]
    unsafe fn madd_pairs(acc: __m512i, a: __m512i, b: *const i16) -> __m512i {
        let bv = _mm512_set1_epi32((b as *const i32).read_unaligned());
        _mm512_dpwssd_epi32(acc, a, bv)
    }
    #[inline(always)]
    unsafe fn f16(p: *const u8) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }
    /// `e << 23` is `2^(e - 127)` for `e` from 1, and the floor `2^-127` stands for `e`
    /// 0; halving a power of two is exact down to `2^-149`.
    #[inline(always)]
    unsafe fn e8m0_half(p: *const u8) -> __m512 {
        let e = _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i));
        let bits = _mm512_max_epi32(_mm512_slli_epi32::<23>(e), _mm512_set1_epi32(0x0040_0000));
        _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0.5))
    }
    #[inline(always)]
    unsafe fn cvt(v: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(v)
    }
    #[inline(always)]
    unsafe fn scale(v: __m512, s: f32) -> __m512 {
        _mm512_mul_ps(v, _mm512_set1_ps(s))
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> __m512 {
        _mm512_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn neg(v: __m512) -> __m512 {
        _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(v),
            _mm512_set1_epi32(i32::MIN),
        ))
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn store(v: __m512, out: *mut f32) {
        _mm512_storeu_ps(out, v)
    }
}

/// AVX2 with FMA and F16C: half a tile per register, `maddubs` for the byte products.
#[derive(Clone, Copy)]
pub struct Avx2;

impl Lanes for Avx2 {
    type I = __m256i;
    type F = __m256;
    /// 16 i16, two per lane: `maddubs` pair sums, added without widening.
    type P = __m256i;
    const LANES: usize = 8;
    const Q8_BIAS: i32 = 0;
    /// Each i16 gathers two products of a weight and an activation in -127..=127.
    const PARTIAL_CAP: i32 = i16::MAX as i32 / (2 * 127);

    #[inline(always)]
    unsafe fn izero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn fzero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p as *const __m256i)
    }
    #[inline(always)]
    unsafe fn store_i(v: __m256i, p: *mut u8) {
        _mm256_storeu_si256(p as *mut __m256i, v)
    }
    #[inline(always)]
    unsafe fn nibbles(v: __m256i) -> (__m256i, __m256i) {
        let low = _mm256_set1_epi8(0x0F);
        (
            _mm256_and_si256(v, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
        )
    }
    #[inline(always)]
    unsafe fn pzero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn pdot(p: __m256i, w: __m256i, x: *const i8) -> __m256i {
        let xv = _mm256_set1_epi32((x as *const i32).read_unaligned());
        _mm256_add_epi16(p, _mm256_maddubs_epi16(w, xv))
    }
    #[inline(always)]
    unsafe fn padd(a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi16(a, b)
    }
    #[inline(always)]
    unsafe fn flush(acc: __m256i, p: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
    }
    /// `s` holds each lane's scale in both of its i16.
    #[inline(always)]
    unsafe fn flush_scaled(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    }
    /// The bytes hold `q + 128`; flipping the top bit gives `q` as i8, and the sign
    /// trick keeps `maddubs` from saturating.
    #[inline(always)]
    unsafe fn dot_q8(acc: __m256i, w: __m256i, x: *const i8) -> __m256i {
        let q = _mm256_xor_si256(w, _mm256_set1_epi8(i8::MIN));
        let xv = _mm256_set1_epi32((x as *const i32).read_unaligned());
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q));
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
    #[inline(always)]
    unsafe fn fifth_bit(v: __m256i, bits: *const u8) -> __m256i {
        _mm256_or_si256(v, _mm256_and_si256(bit_mask(bits), _mm256_set1_epi8(0x10)))
    }
    /// `(v ^ m) - m` negates the bytes where `m` is all ones.
    #[inline(always)]
    unsafe fn signed_q8(v: __m256i, bits: *const u8) -> __m256i {
        let m = bit_mask(bits);
        let q = _mm256_sub_epi8(_mm256_xor_si256(v, m), m);
        _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN))
    }
    #[inline(always)]
    unsafe fn gather<const SCALE: i32>(base: *const u8, idx: __m256i) -> __m256i {
        _mm256_i32gather_epi32::<SCALE>(base as *const _, idx)
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> __m256i {
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
    }
    /// Bits `2t..2t + 2` shifted to 4..6 in one shift (none for `t` = 2); the mask drops
    /// what the 16-bit shift carried over from the neighbouring byte.
    #[inline(always)]
    unsafe fn q6_high(v: __m256i, t: usize) -> __m256i {
        let s = match t {
            0 => _mm256_slli_epi16::<4>(v),
            1 => _mm256_slli_epi16::<2>(v),
            2 => v,
            _ => _mm256_srli_epi16::<2>(v),
        };
        _mm256_and_si256(s, _mm256_set1_epi8(0x30))
    }
    #[inline(always)]
    unsafe fn table(t: &[u8; 16]) -> __m256i {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr() as *const __m128i))
    }
    #[inline(always)]
    unsafe fn lookup(table: __m256i, v: __m256i) -> __m256i {
        _mm256_shuffle_epi8(table, v)
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        _mm256_or_si256(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256i, b: __m256i) -> __m256i {
        _mm256_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn mullo(a: __m256i, b: __m256i) -> __m256i {
        _mm256_mullo_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn splat(v: i32) -> __m256i {
        _mm256_set1_epi32(v)
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> __m256i {
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn pairs<const SIGNED: bool>(p: *const u8) -> __m256i {
        let v = _mm_loadu_si128(p as *const __m128i);
        if SIGNED {
            _mm256_cvtepi8_epi16(v)
        } else {
            _mm256_cvtepu8_epi16(v)
        }
    }
    /// The chosen i16 copied into both halves of its lane, for `madd` (`shuffle_epi8`
    /// picks within each 128-bit half).
    #[inline(always)]
    unsafe fn pair_scale<const SIGNED: bool, const HIGH: bool>(v: __m256i) -> __m256i {
        let first = if HIGH { 0x0302_0302 } else { 0x0100_0100 };
        let step = 0x0404_0404;
        let pick = _mm256_setr_epi32(
            first,
            first + step,
            first + 2 * step,
            first + 3 * step,
            first,
            first + step,
            first + 2 * step,
            first + 3 * step,
        );
        _mm256_shuffle_epi8(v, pick)
    }
    #[inline(always)]
    unsafe fn madd_pairs(acc: __m256i, a: __m256i, b: *const i16) -> __m256i {
        let bv = _mm256_set1_epi32((b as *const i32).read_unaligned());
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, bv))
    }
    #[inline(always)]
    unsafe fn f16(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    /// As AVX-512's.
    #[inline(always)]
    unsafe fn e8m0_half(p: *const u8) -> __m256 {
        let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
        let bits = _mm256_max_epi32(_mm256_slli_epi32::<23>(e), _mm256_set1_epi32(0x0040_0000));
        _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0.5))
    }
    #[inline(always)]
    unsafe fn cvt(v: __m256i) -> __m256 {
        _mm256_cvtepi32_ps(v)
    }
    #[inline(always)]
    unsafe fn scale(v: __m256, s: f32) -> __m256 {
        _mm256_mul_ps(v, _mm256_set1_ps(s))
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn splat_f(v: f32) -> __m256 {
        _mm256_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn neg(v: __m256) -> __m256 {
        _mm256_xor_ps(v, _mm256_set1_ps(-0.0))
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn store(v: __m256, out: *mut f32) {
        _mm256_storeu_ps(out, v)
    }
}

/// All ones in byte `i` where bit `i` of the 32-bit mask at `bits` is set, else zero.
#[inline(always)]
unsafe fn bit_mask(bits: *const u8) -> __m256i {
    let bits = (bits as *const u32).read_unaligned();
    let shuffle = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0,
    );
    let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuffle);
    let mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, mask), _mm256_set1_epi64x(-1))
}
