/* Fused CPU kernels of the THC codec (host/thc/codec.py is the reference).
 *
 * encode: sign flip, in-cache block Walsh-Hadamard transform, scaling, clipping, two-stage
 *         stochastic rounding to table indices, 4-bit packing (and the error-feedback residual)
 *         in one pass over memory, multi-threaded over blocks.
 * decode: lane sums -> (S/m - g/2)*inc*M/sqrt(d) -> inverse transform -> signs, one pass.
 *
 * Random numbers are the counter-based SplitMix64 hashes of host/thc/rng.py, keyed by
 * (seed, stream, worker, round) and indexed by the padded position, so results do not depend on
 * the thread count and are bit-identical to the torch path (same butterfly order, float32
 * arithmetic without FMA contraction: build with -ffp-contract=off).
 *
 * Speed (one thread): every per-element loop is branch-free and vectorizes (check with
 * -fopt-info-vec); the signs are built from the hash bits without a branch per bit; the
 * transform keeps its stage order but runs stages 1-8 in registers and the rest three at a
 * time; the table lookups of the second rounding stage use gathers where the target has them;
 * the next block's input is prefetched. An OpenMP region is entered only with 2+ threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define MIX_C1 0xBF58476D1CE4E5B9ULL
#define MIX_C2 0x94D049BB133111EBULL

static inline uint64_t hash_pos(uint64_t key, uint64_t pos) {
    uint64_t z = (pos + 1) * GOLDEN + key;
    z = (z ^ (z >> 30)) * MIX_C1;
    z = (z ^ (z >> 27)) * MIX_C2;
    return z ^ (z >> 31);
}

/* A float written through its bits (the signs) without breaking strict aliasing. */
typedef union {
    float f;
    uint32_t u;
} fbits;

#define ONE_BITS 0x3F800000u /* 1.0f; with bit 31 set, -1.0f */

/* sb[j] = ±1.0f for padded positions pos0 .. pos0+n-1: one hash per 64 positions, bit t of
 * the hash of pos >> 6 being the sign of pos = 64*(pos >> 6) + t. Branch-free: the bits are
 * random, so a branch per bit would mispredict half the time. */
static void fill_signs(fbits *restrict sb, uint64_t key, uint64_t pos0, Py_ssize_t n) {
    Py_ssize_t j = 0;
    while (j < n) {
        uint64_t pos = pos0 + (uint64_t)j;
        uint64_t w = hash_pos(key, pos >> 6);
        unsigned s = (unsigned)(pos & 63);
        Py_ssize_t run = 64 - (Py_ssize_t)s;
        if (run > n - j) run = n - j;
        if (run == 64) {
            uint32_t lo = (uint32_t)w, hi = (uint32_t)(w >> 32);
            for (unsigned t = 0; t < 32; t++) sb[j + t].u = ONE_BITS | ((lo >> t) & 1u) << 31;
            for (unsigned t = 0; t < 32; t++) sb[j + 32 + t].u = ONE_BITS | ((hi >> t) & 1u) << 31;
        } else {
            w >>= s;
            for (Py_ssize_t t = 0; t < run; t++, w >>= 1)
                sb[j + t].u = ONE_BITS | (uint32_t)(w & 1) << 31;
        }
        j += run;
    }
}

/* ------------------------------------------------------------------------------------------
 * In-place Walsh-Hadamard transform, bit-identical to the reference's stage order: stage h
 * (h = 1, 2, 4, ... n/2) replaces (x[i], x[i+h]) by (x[i] + x[i+h], x[i] - x[i+h]). Only the
 * order of butterflies *within* a stage changes here, never the stages' order or an operation,
 * so every element sees the same float32 operations on the same operands:
 *   - stages 1, 2, 4, 8 on each 16 elements in registers (shuffles and blends, no loop);
 *   - then three stages (h, 2h, 4h) per pass over the block (radix 8), then two, then one;
 *   - transforms longer than FWHT_L1 first run every stage below FWHT_L1 block by block
 *     (stages below L touch only their own L-block), so that they run in cache.
 * Vectors are GCC/clang vector extensions of VW floats: 16 with AVX-512, 8 with AVX, else 4.
 * ------------------------------------------------------------------------------------------ */
#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
#if defined(__clang__)
#define SHUF1(a, ...) __builtin_shufflevector((a), (a), __VA_ARGS__)
#define SHUF2(a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define SHUF1(a, ...) __builtin_shuffle((a), (vi){__VA_ARGS__})
#define SHUF2(a, b, ...) __builtin_shuffle((a), (b), (vi){__VA_ARGS__})
#endif

#define FWHT_L1 4096 /* floats: 16 KiB, in L1 */

static inline vf vf_load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vf_store(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* Stages 1, 2, 4, 8 (as far as the vector reaches) within one vector: the sum goes to the
 * lower position of each pair, the difference (lower - upper) to the upper one. */
static inline vf vf_stages(vf v) {
    vf s;
#if VW == 16
    s = SHUF1(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    v = SHUF2(v + s, s - v, 0, 17, 2, 19, 4, 21, 6, 23, 8, 25, 10, 27, 12, 29, 14, 31);
    s = SHUF1(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    v = SHUF2(v + s, s - v, 0, 1, 18, 19, 4, 5, 22, 23, 8, 9, 26, 27, 12, 13, 30, 31);
    s = SHUF1(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    v = SHUF2(v + s, s - v, 0, 1, 2, 3, 20, 21, 22, 23, 8, 9, 10, 11, 28, 29, 30, 31);
    s = SHUF1(v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    return SHUF2(v + s, s - v, 0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31);
#elif VW == 8
    s = SHUF1(v, 1, 0, 3, 2, 5, 4, 7, 6);
    v = SHUF2(v + s, s - v, 0, 9, 2, 11, 4, 13, 6, 15);
    s = SHUF1(v, 2, 3, 0, 1, 6, 7, 4, 5);
    v = SHUF2(v + s, s - v, 0, 1, 10, 11, 4, 5, 14, 15);
    s = SHUF1(v, 4, 5, 6, 7, 0, 1, 2, 3);
    return SHUF2(v + s, s - v, 0, 1, 2, 3, 12, 13, 14, 15);
#else
    s = SHUF1(v, 1, 0, 3, 2);
    v = SHUF2(v + s, s - v, 0, 5, 2, 7);
    s = SHUF1(v, 2, 3, 0, 1);
    return SHUF2(v + s, s - v, 0, 1, 6, 7);
#endif
}

/* Stages 1 .. 8 of every 16-element group (n a multiple of 16), in registers. */
static void fwht_radix16(float *restrict x, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i += 16) {
#if VW == 16
        vf_store(x + i, vf_stages(vf_load(x + i)));
#elif VW == 8
        vf a = vf_stages(vf_load(x + i));
        vf b = vf_stages(vf_load(x + i + 8));
        vf_store(x + i, a + b);
        vf_store(x + i + 8, a - b);
#else
        vf a = vf_stages(vf_load(x + i)), b = vf_stages(vf_load(x + i + 4));
        vf c = vf_stages(vf_load(x + i + 8)), d = vf_stages(vf_load(x + i + 12));
        vf a1 = a + b, b1 = a - b, c1 = c + d, d1 = c - d; /* stage 4 */
        vf_store(x + i, a1 + c1);                          /* stage 8 */
        vf_store(x + i + 4, b1 + d1);
        vf_store(x + i + 8, a1 - c1);
        vf_store(x + i + 12, b1 - d1);
#endif
    }
}

/* Stages h, 2h and 4h in one pass (h a multiple of VW). */
static void fwht_radix8(float *restrict x, Py_ssize_t n, Py_ssize_t h) {
    for (Py_ssize_t i = 0; i < n; i += 8 * h) {
        for (Py_ssize_t j = i; j < i + h; j += VW) {
            float *p = x + j;
            vf v0 = vf_load(p), v1 = vf_load(p + h), v2 = vf_load(p + 2 * h);
            vf v3 = vf_load(p + 3 * h), v4 = vf_load(p + 4 * h), v5 = vf_load(p + 5 * h);
            vf v6 = vf_load(p + 6 * h), v7 = vf_load(p + 7 * h);
            vf a0 = v0 + v1, a1 = v0 - v1, a2 = v2 + v3, a3 = v2 - v3; /* stage h */
            vf a4 = v4 + v5, a5 = v4 - v5, a6 = v6 + v7, a7 = v6 - v7;
            vf b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3; /* stage 2h */
            vf b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
            vf_store(p, b0 + b4); /* stage 4h */
            vf_store(p + 4 * h, b0 - b4);
            vf_store(p + h, b1 + b5);
            vf_store(p + 5 * h, b1 - b5);
            vf_store(p + 2 * h, b2 + b6);
            vf_store(p + 6 * h, b2 - b6);
            vf_store(p + 3 * h, b3 + b7);
            vf_store(p + 7 * h, b3 - b7);
        }
    }
}

/* Stages h and 2h in one pass (h a multiple of VW). */
static void fwht_radix4(float *restrict x, Py_ssize_t n, Py_ssize_t h) {
    for (Py_ssize_t i = 0; i < n; i += 4 * h) {
        for (Py_ssize_t j = i; j < i + h; j += VW) {
            float *p = x + j;
            vf A = vf_load(p), B = vf_load(p + h), C = vf_load(p + 2 * h), D = vf_load(p + 3 * h);
            vf a1 = A + B, b1 = A - B, c1 = C + D, d1 = C - D;
            vf_store(p, a1 + c1);
            vf_store(p + 2 * h, a1 - c1);
            vf_store(p + h, b1 + d1);
            vf_store(p + 3 * h, b1 - d1);
        }
    }
}

/* Stage h alone (any h). */
static void fwht_radix2(float *restrict x, Py_ssize_t n, Py_ssize_t h) {
    for (Py_ssize_t i = 0; i < n; i += 2 * h) {
        float *restrict a = x + i;
        float *restrict b = a + h;
        for (Py_ssize_t j = 0; j < h; j++) {
            float u = a[j], v = b[j];
            a[j] = u + v;
            b[j] = u - v;
        }
    }
}

/* Stages h, 2h, ... n/2 of a transform of length n (h a power of two, a multiple of VW when
 * h >= 16). */
static void fwht_from(float *restrict x, Py_ssize_t n, Py_ssize_t h) {
    if (h >= 16) {
        for (; 8 * h <= n; h *= 8) fwht_radix8(x, n, h);
        for (; 4 * h <= n; h *= 4) fwht_radix4(x, n, h);
    }
    for (; h < n; h *= 2) fwht_radix2(x, n, h);
}

static void fwht(float *restrict x, Py_ssize_t n) {
    if (n < 16) {
        fwht_from(x, n, 1);
        return;
    }
    if (n > FWHT_L1) {
        for (Py_ssize_t i = 0; i < n; i += FWHT_L1) fwht(x + i, FWHT_L1);
        fwht_from(x, n, FWHT_L1);
        return;
    }
    fwht_radix16(x, n);
    fwht_from(x, n, 16);
}

/* Second rounding stage, q = lo[k] + (r2 < p_up[k]): two table loads per coordinate, with the
 * gather instructions where the build targets them. The scalar loop is kept scalar: without
 * gathers the vectorizer emulates them element by element, which costs more than it saves. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void round_lookup(uint8_t *restrict qb, const int32_t *restrict kb,
                         const float *restrict r2b, const int32_t *restrict lo,
                         const float *restrict pup, Py_ssize_t n) {
    Py_ssize_t j = 0;
#if defined(__AVX512F__)
    for (; j + 16 <= n; j += 16) {
        __m512i k = _mm512_loadu_si512((const void *)(kb + j));
        __m512i l = _mm512_i32gather_epi32(k, (const void *)lo, 4);
        __m512 p = _mm512_i32gather_ps(k, (const void *)pup, 4);
        __mmask16 up = _mm512_cmp_ps_mask(_mm512_loadu_ps(r2b + j), p, _CMP_LT_OQ);
        l = _mm512_mask_add_epi32(l, up, l, _mm512_set1_epi32(1));
        _mm_storeu_si128((__m128i *)(qb + j), _mm512_cvtepi32_epi8(l));
    }
#elif defined(__AVX2__)
    for (; j + 8 <= n; j += 8) {
        __m256i k = _mm256_loadu_si256((const __m256i *)(kb + j));
        __m256i l = _mm256_i32gather_epi32(lo, k, 4);
        __m256 p = _mm256_i32gather_ps(pup, k, 4);
        /* r2 < p: all ones (-1) where true, so l - mask adds one there. */
        __m256i up = _mm256_castps_si256(_mm256_cmp_ps(_mm256_loadu_ps(r2b + j), p, _CMP_LT_OQ));
        int32_t q[8];
        _mm256_storeu_si256((__m256i *)q, _mm256_sub_epi32(l, up));
        for (int t = 0; t < 8; t++) qb[j + t] = (uint8_t)q[t];
    }
#endif
    for (; j < n; j++) {
        int32_t kk = kb[j];
        qb[j] = (uint8_t)(lo[kk] + (r2b[j] < pup[kk]));
    }
}

static int get_buf(PyObject *obj, Py_buffer *view, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s buffer", name,
                     writable ? " writable" : "");
        return -1;
    }
    return 0;
}

static PyObject *py_encode(PyObject *self, PyObject *args) {
    /* One segment: `count` chunks of `length` real elements, each padded to `padded`
     * (a multiple of `block`), starting at padded position `offset`; per-chunk constants. */
    PyObject *ox, *opay, *ores, *oscale, *oa1, *ob1, *olo, *op, *olev;
    Py_ssize_t count, length, padded, B, offset;
    float rs, T, inv_delta;
    int G, bits, nthreads;
    unsigned long long skey, rkey;
    if (!PyArg_ParseTuple(args, "OOOnnnnnOOOfffiOOOiKKi", &ox, &opay, &ores, &count, &length,
                          &padded, &B, &offset, &oscale, &oa1, &ob1, &rs, &T, &inv_delta, &G,
                          &olo, &op, &olev, &bits, &skey, &rkey, &nthreads))
        return NULL;
    Py_buffer bx, bpay, bres = {0}, bsc, ba1, bb1, blo, bp, blev;
    if (get_buf(ox, &bx, 0, "x") < 0) return NULL;
    if (get_buf(opay, &bpay, 1, "payload") < 0) { PyBuffer_Release(&bx); return NULL; }
    int have_res = ores != Py_None;
    if (have_res && get_buf(ores, &bres, 1, "residual") < 0) {
        PyBuffer_Release(&bx); PyBuffer_Release(&bpay); return NULL;
    }
    int got = 0;
    if (get_buf(oscale, &bsc, 0, "scale") == 0) got++;
    if (got == 1 && get_buf(oa1, &ba1, 0, "a1") == 0) got++;
    if (got == 2 && get_buf(ob1, &bb1, 0, "b1") == 0) got++;
    if (got == 3 && get_buf(olo, &blo, 0, "lo") == 0) got++;
    if (got == 4 && get_buf(op, &bp, 0, "p_up") == 0) got++;
    if (got == 5 && get_buf(olev, &blev, 0, "levels") == 0) got++;
    if (got < 6) {
        Py_buffer *all[] = {&bsc, &ba1, &bb1, &blo, &bp, &blev};
        for (int i = 0; i < got; i++) PyBuffer_Release(all[i]);
        PyBuffer_Release(&bx); PyBuffer_Release(&bpay);
        if (have_res) PyBuffer_Release(&bres);
        return NULL;
    }
    const float *x = (const float *)bx.buf;
    uint8_t *pay = (uint8_t *)bpay.buf;
    float *res = have_res ? (float *)bres.buf : NULL;
    const float *scale = (const float *)bsc.buf, *a1 = (const float *)ba1.buf;
    const float *b1 = (const float *)bb1.buf;
    const int32_t *lo = (const int32_t *)blo.buf;
    const float *pup = (const float *)bp.buf;
    const float *lev = (const float *)blev.buf;
    int nibbles = bits <= 4;
    Py_ssize_t base = nibbles ? offset / 2 : offset;
    Py_ssize_t nblocks = count * padded / B;
    /* Blocks share a byte only with odd block lengths or odd offsets: then run serially. */
    if (nibbles && ((B & 1) || (offset & 1))) nthreads = 1;
    int fail = 0;
    /* First chunk whose transform (or residual) overflowed float32, or -1: the caller raises.
     * An overflowed coordinate is encoded as 0 so that no index leaves the tables. */
    Py_ssize_t bad_chunk = -1;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        size_t fb = ((size_t)B * 4 + 63) / 64 * 64;
        float *buf = (float *)aligned_alloc(64, fb);
        float *rbuf = have_res ? (float *)aligned_alloc(64, fb) : NULL;
        fbits *sb = (fbits *)aligned_alloc(64, fb);
        int32_t *kb = (int32_t *)aligned_alloc(64, fb);
        float *r2b = (float *)aligned_alloc(64, fb);
        uint8_t *qb = (uint8_t *)malloc((size_t)B);
        if (!buf || (have_res && !rbuf) || !qb || !sb || !kb || !r2b) {
#pragma omp atomic write
            fail = 1;
        } else {
            const float kmax = (float)(G - 2), lowT = -T;
#pragma omp for schedule(static)
            for (Py_ssize_t bi = 0; bi < nblocks; bi++) {
                Py_ssize_t p0 = bi * B;             /* padded position in the segment */
                Py_ssize_t c = p0 / padded;         /* chunk */
                Py_ssize_t j0 = p0 - c * padded;    /* position in the chunk */
                Py_ssize_t xi = c * length + j0;    /* real element index */
                Py_ssize_t valid = length - j0;
                if (valid > B) valid = B;
                if (valid < 0) valid = 0;
                float sc = scale[c], ca = a1[c], cb = b1[c];
                uint64_t gp0 = (uint64_t)(offset + p0); /* global padded position of j = 0 */
                fill_signs(sb, skey, gp0, B);
                const float *restrict xs = x + xi;
                if (valid == B && bi + 1 < nblocks) { /* the next block's input, into L1 */
                    const char *nx = (const char *)(xs + B);
                    for (Py_ssize_t o = 0; o < B * 4; o += 64) __builtin_prefetch(nx + o, 0, 3);
                }
                for (Py_ssize_t j = 0; j < valid; j++) buf[j] = xs[j] * sb[j].f;
                for (Py_ssize_t j = valid; j < B; j++) buf[j] = 0.0f * sb[j].f;
                fwht(buf, B);
                /* Scale, clip and the first rounding stage onto the fine grid, with the two
                 * uniforms of each coordinate's stochastic rounding: the hash of position p is
                 * mix((p + 1) * GOLDEN + rkey), as hash_pos; both uniforms are below 2^24, so
                 * their conversions through int32 are exact. u >= 0 (z >= -T), so floorf(u) is
                 * the truncation (float)(int32_t)u. The loop vectorizes. */
                int overflow = 0;
                for (Py_ssize_t j = 0; j < B; j++) {
                    uint64_t h = (gp0 + (uint64_t)j + 1) * GOLDEN + rkey;
                    h = (h ^ (h >> 30)) * MIX_C1;
                    h = (h ^ (h >> 27)) * MIX_C2;
                    h ^= h >> 31;
                    float r1 = (float)(int32_t)(uint32_t)(h >> 40) * (1.0f / 16777216.0f);
                    r2b[j] = (float)(int32_t)(uint32_t)((h >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
                    float y = buf[j] * rs;
                    float z = y * sc;
                    overflow |= !(fabsf(y) <= FLT_MAX);
                    z = z != z ? 0.0f : z;
                    z = z < lowT ? lowT : (z > T ? T : z);
                    float u = (z + T) * inv_delta;
                    float k0 = (float)(int32_t)u;
                    k0 = k0 < 0.0f ? 0.0f : k0;
                    k0 = k0 > kmax ? kmax : k0;
                    float frac = u - k0;
                    kb[j] = (int32_t)k0 + (r1 < frac);
                    buf[j] = y;
                }
                round_lookup(qb, kb, r2b, lo, pup, B);
                if (nibbles && !(gp0 & 1) && !(B & 1)) {
                    uint8_t *restrict dst = pay + (gp0 / 2 - (uint64_t)base);
                    const uint8_t *restrict qs = qb;
                    size_t half = (size_t)B / 2;
                    for (size_t k = 0; k < half; k++)
                        dst[k] = (uint8_t)(qs[2 * k] << 4 | qs[2 * k + 1]);
                } else if (nibbles) {
                    for (Py_ssize_t j = 0; j < B; j++) {
                        Py_ssize_t gp = offset + p0 + j;
                        uint8_t *dst = pay + (gp / 2 - base);
                        if (gp & 1) *dst |= qb[j];
                        else *dst = (uint8_t)(qb[j] << 4);
                    }
                } else {
                    memcpy(pay + (offset + p0 - base), qb, (size_t)B);
                }
                if (rbuf) {
                    for (Py_ssize_t j = 0; j < B; j++) rbuf[j] = buf[j] - (lev[qb[j]] * ca - cb);
                    fwht(rbuf, B);
                    float *restrict rs_out = res + xi;
                    for (Py_ssize_t j = 0; j < valid; j++) {
                        float v = rbuf[j] * rs * sb[j].f;
                        rs_out[j] = v;
                        overflow |= !(fabsf(v) <= FLT_MAX);
                    }
                }
                if (overflow) {
#pragma omp critical(thc_overflow)
                    if (bad_chunk < 0 || c < bad_chunk) bad_chunk = c;
                }
            }
        }
        free(buf);
        free(rbuf);
        free(qb);
        free(sb);
        free(kb);
        free(r2b);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx); PyBuffer_Release(&bpay);
    if (have_res) PyBuffer_Release(&bres);
    PyBuffer_Release(&bsc); PyBuffer_Release(&ba1); PyBuffer_Release(&bb1);
    PyBuffer_Release(&blo); PyBuffer_Release(&bp); PyBuffer_Release(&blev);
    if (fail) return PyErr_NoMemory();
    return PyLong_FromSsize_t(bad_chunk);
}

/* buf[j] = float(S[p0 + j]) * a - cb, j < B, for each lane type (kept apart so each loop
 * vectorizes); a = ca / m, or ca / count[p0 + j] with per-coordinate counts. */
static void load_sums(float *restrict buf, const void *s, char kind, Py_ssize_t p0, Py_ssize_t B,
                      const int32_t *cnt, float ca, float a, float cb) {
#define LOAD(T)                                                                       \
    do {                                                                              \
        const T *restrict src = (const T *)s + p0;                                    \
        if (cnt) {                                                                    \
            const int32_t *restrict cn = cnt + p0;                                    \
            for (Py_ssize_t j = 0; j < B; j++)                                        \
                buf[j] = (float)src[j] * (ca / (float)cn[j]) - cb;                    \
        } else {                                                                      \
            for (Py_ssize_t j = 0; j < B; j++) buf[j] = (float)src[j] * a - cb;       \
        }                                                                             \
    } while (0)
    switch (kind) {
    case 'B': LOAD(uint8_t); break;
    case 'H': LOAD(uint16_t); break;
    case 'I': LOAD(uint32_t); break;
    case 'h': LOAD(int16_t); break;
    case 'i': LOAD(int32_t); break;
    default: LOAD(int64_t); break;
    }
#undef LOAD
}

static PyObject *py_decode(PyObject *self, PyObject *args) {
    PyObject *os, *ocnt, *oout, *oa1, *ob1;
    Py_ssize_t m, count, length, padded, B, offset;
    float rs;
    unsigned long long skey;
    int nthreads;
    if (!PyArg_ParseTuple(args, "OOnOnnnnnOOfKi", &os, &ocnt, &m, &oout, &count, &length, &padded,
                          &B, &offset, &oa1, &ob1, &rs, &skey, &nthreads))
        return NULL;
    Py_buffer bs, bc = {0}, bo, ba1, bb1;
    if (get_buf(os, &bs, 0, "sums") < 0) return NULL;
    char kind;
    const char *f = bs.format ? bs.format : "B";
    while (*f == '<' || *f == '=' || *f == '@' || *f == '!' || *f == '>') f++;
    switch (*f) {
    case 'B': case 'b': kind = 'B'; break;
    case 'H': kind = 'H'; break;
    case 'I': case 'L': kind = bs.itemsize == 4 ? 'I' : 'q'; break;
    case 'h': kind = 'h'; break;
    case 'i': kind = 'i'; break;
    case 'l': case 'q': kind = bs.itemsize == 4 ? 'i' : 'q'; break;
    default:
        PyBuffer_Release(&bs);
        PyErr_Format(PyExc_TypeError, "sums: unsupported integer format '%s'", bs.format);
        return NULL;
    }
    int have_cnt = ocnt != Py_None;
    if (have_cnt && get_buf(ocnt, &bc, 0, "counts") < 0) { PyBuffer_Release(&bs); return NULL; }
    if (get_buf(oout, &bo, 1, "out") < 0) {
        PyBuffer_Release(&bs);
        if (have_cnt) PyBuffer_Release(&bc);
        return NULL;
    }
    if (get_buf(oa1, &ba1, 0, "a1") < 0 || get_buf(ob1, &bb1, 0, "b1") < 0) {
        PyBuffer_Release(&bs); PyBuffer_Release(&bo);
        if (have_cnt) PyBuffer_Release(&bc);
        return NULL;
    }
    const void *s = bs.buf;
    const int32_t *cnt = have_cnt ? (const int32_t *)bc.buf : NULL;
    float *out = (float *)bo.buf;
    const float *a1 = (const float *)ba1.buf, *b1 = (const float *)bb1.buf;
    Py_ssize_t nblocks = count * padded / B;
    int fail = 0;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        size_t fb = ((size_t)B * 4 + 63) / 64 * 64;
        float *buf = (float *)aligned_alloc(64, fb);
        fbits *sb = (fbits *)aligned_alloc(64, fb);
        if (!buf || !sb) {
#pragma omp atomic write
            fail = 1;
        } else {
#pragma omp for schedule(static)
            for (Py_ssize_t bi = 0; bi < nblocks; bi++) {
                Py_ssize_t p0 = bi * B;
                Py_ssize_t c = p0 / padded;
                Py_ssize_t j0 = p0 - c * padded;
                Py_ssize_t xi = c * length + j0;
                Py_ssize_t valid = length - j0;
                if (valid > B) valid = B;
                if (valid < 0) valid = 0;
                float ca = a1[c], cb = b1[c];
                if (bi + 1 < nblocks) { /* the next block's sums, into L1 */
                    const char *ns = (const char *)s + (size_t)(p0 + B) * (size_t)bs.itemsize;
                    for (Py_ssize_t o = 0; o < B * bs.itemsize; o += 64) __builtin_prefetch(ns + o, 0, 3);
                }
                load_sums(buf, s, kind, p0, B, cnt, ca, ca / (float)m, cb);
                fwht(buf, B);
                fill_signs(sb, skey, (uint64_t)(offset + p0), B);
                float *restrict o = out + xi;
                for (Py_ssize_t j = 0; j < valid; j++) o[j] = buf[j] * rs * sb[j].f;
            }
        }
        free(buf);
        free(sb);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bs);
    if (have_cnt) PyBuffer_Release(&bc);
    PyBuffer_Release(&bo); PyBuffer_Release(&ba1); PyBuffer_Release(&bb1);
    if (fail) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *py_chunk_sumsq(PyObject *self, PyObject *args) {
    /* out[c] = sum of squares of x[c*length .. (c+1)*length), accumulated in double. */
    PyObject *ox, *oout;
    Py_ssize_t length;
    int nthreads;
    if (!PyArg_ParseTuple(args, "OnOi", &ox, &length, &oout, &nthreads)) return NULL;
    Py_buffer bx, bo;
    if (get_buf(ox, &bx, 0, "x") < 0) return NULL;
    if (get_buf(oout, &bo, 1, "out") < 0) { PyBuffer_Release(&bx); return NULL; }
    const float *x = (const float *)bx.buf;
    double *out = (double *)bo.buf;
    Py_ssize_t count = bo.len / 8;
    Py_BEGIN_ALLOW_THREADS
    if (count >= nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (Py_ssize_t c = 0; c < count; c++) {
            double acc = 0.0;
            const float *p = x + c * length;
            for (Py_ssize_t i = 0; i < length; i++) acc += (double)p[i] * (double)p[i];
            out[c] = acc;
        }
    } else {
        for (Py_ssize_t c = 0; c < count; c++) {
            double acc = 0.0;
            const float *p = x + c * length;
#pragma omp parallel for reduction(+ : acc) num_threads(nthreads) schedule(static)
            for (Py_ssize_t i = 0; i < length; i++) acc += (double)p[i] * (double)p[i];
            out[c] = acc;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx); PyBuffer_Release(&bo);
    Py_RETURN_NONE;
}

static PyObject *py_accumulate(PyObject *self, PyObject *args) {
    /* acc[i] += lut[payload byte][nibble]: the integer aggregation of one packed contribution. */
    PyObject *oacc, *opay, *olut;
    if (!PyArg_ParseTuple(args, "OOO", &oacc, &opay, &olut)) return NULL;
    Py_buffer ba, bp, bl;
    if (get_buf(oacc, &ba, 1, "acc") < 0) return NULL;
    if (get_buf(opay, &bp, 0, "payload") < 0) { PyBuffer_Release(&ba); return NULL; }
    if (get_buf(olut, &bl, 0, "lut") < 0) { PyBuffer_Release(&ba); PyBuffer_Release(&bp); return NULL; }
    Py_ssize_t nb = bp.len;
    const uint8_t *pay = (const uint8_t *)bp.buf;
    const int32_t *lut = (const int32_t *)bl.buf; /* 16 entries */
    Py_ssize_t cap = ba.len / ba.itemsize;
    if (cap < 2 * nb) nb = cap / 2;
    Py_BEGIN_ALLOW_THREADS
    if (ba.itemsize == 1) {
        uint8_t *acc = (uint8_t *)ba.buf;
        for (Py_ssize_t i = 0; i < nb; i++) {
            acc[2 * i] += (uint8_t)lut[pay[i] >> 4];
            acc[2 * i + 1] += (uint8_t)lut[pay[i] & 15];
        }
    } else if (ba.itemsize == 2) {
        uint16_t *acc = (uint16_t *)ba.buf;
        for (Py_ssize_t i = 0; i < nb; i++) {
            acc[2 * i] += (uint16_t)lut[pay[i] >> 4];
            acc[2 * i + 1] += (uint16_t)lut[pay[i] & 15];
        }
    } else {
        uint32_t *acc = (uint32_t *)ba.buf;
        for (Py_ssize_t i = 0; i < nb; i++) {
            acc[2 * i] += (uint32_t)lut[pay[i] >> 4];
            acc[2 * i + 1] += (uint32_t)lut[pay[i] & 15];
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ba); PyBuffer_Release(&bp); PyBuffer_Release(&bl);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"chunk_sumsq", py_chunk_sumsq, METH_VARARGS, "Per-chunk sums of squares (double)."},
    {"encode", py_encode, METH_VARARGS, "Fused THC encode of one segment of chunks."},
    {"decode", py_decode, METH_VARARGS, "Fused THC decode of one segment of chunks."},
    {"accumulate", py_accumulate, METH_VARARGS, "Add one packed 4-bit contribution to lanes."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_fused",
                                    "Fused CPU kernels of the THC codec.", -1, methods};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&moddef); }
