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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* sb[j] = ±1.0f for padded positions pos0 .. pos0+n-1: one hash per 64 positions. */
static void fill_signs(float *restrict sb, uint64_t key, uint64_t pos0, Py_ssize_t n) {
    Py_ssize_t j = 0;
    while (j < n) {
        uint64_t pos = pos0 + (uint64_t)j;
        uint64_t w = hash_pos(key, pos >> 6);
        Py_ssize_t run = 64 - (Py_ssize_t)(pos & 63);
        if (run > n - j) run = n - j;
        w >>= (pos & 63);
        for (Py_ssize_t t = 0; t < run; t++, w >>= 1) sb[j + t] = (w & 1) ? -1.0f : 1.0f;
        j += run;
    }
}

static void fwht(float *restrict x, Py_ssize_t n) {
    for (Py_ssize_t h = 1; h < n; h <<= 1) {
        for (Py_ssize_t i = 0; i < n; i += 2 * h) {
            float *restrict a = x + i;
            float *restrict b = x + i + h;
            for (Py_ssize_t j = 0; j < h; j++) {
                float u = a[j], v = b[j];
                a[j] = u + v;
                b[j] = u - v;
            }
        }
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
#pragma omp parallel num_threads(nthreads)
    {
        size_t fb = ((size_t)B * 4 + 63) / 64 * 64;
        float *buf = (float *)aligned_alloc(64, fb);
        float *rbuf = have_res ? (float *)aligned_alloc(64, fb) : NULL;
        float *sb = (float *)aligned_alloc(64, fb);
        uint8_t *qb = (uint8_t *)malloc((size_t)B);
        if (!buf || (have_res && !rbuf) || !qb || !sb) {
#pragma omp atomic write
            fail = 1;
        } else {
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
                fill_signs(sb, skey, (uint64_t)(offset + p0), B);
                for (Py_ssize_t j = 0; j < valid; j++) buf[j] = x[xi + j] * sb[j];
                for (Py_ssize_t j = valid; j < B; j++) buf[j] = 0.0f * sb[j];
                fwht(buf, B);
                int overflow = 0;
                for (Py_ssize_t j = 0; j < B; j++) {
                    float y = buf[j] * rs;
                    float z = y * sc;
                    overflow |= !isfinite(y);
                    if (isnan(z)) z = 0.0f;
                    z = z < -T ? -T : (z > T ? T : z);
                    float u = (z + T) * inv_delta;
                    float k0 = floorf(u);
                    if (k0 < 0.0f) k0 = 0.0f;
                    if (k0 > (float)(G - 2)) k0 = (float)(G - 2);
                    float frac = u - k0;
                    uint64_t h = hash_pos(rkey, (uint64_t)(offset + p0 + j));
                    float r1 = (float)(h >> 40) * (1.0f / 16777216.0f);
                    float r2 = (float)((h >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
                    int kk = (int)k0 + (r1 < frac);
                    int q = lo[kk] + (r2 < pup[kk]);
                    qb[j] = (uint8_t)q;
                    if (rbuf) rbuf[j] = y - (lev[q] * ca - cb);
                }
                if (nibbles) {
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
                    fwht(rbuf, B);
                    for (Py_ssize_t j = 0; j < valid; j++) {
                        res[xi + j] = rbuf[j] * rs * sb[j];
                        overflow |= !isfinite(res[xi + j]);
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
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx); PyBuffer_Release(&bpay);
    if (have_res) PyBuffer_Release(&bres);
    PyBuffer_Release(&bsc); PyBuffer_Release(&ba1); PyBuffer_Release(&bb1);
    PyBuffer_Release(&blo); PyBuffer_Release(&bp); PyBuffer_Release(&blev);
    if (fail) return PyErr_NoMemory();
    return PyLong_FromSsize_t(bad_chunk);
}

/* buf[j] = float(S[p0 + j]), j < B, for each lane type (kept apart so each loop vectorizes). */
static void load_sums(float *restrict buf, const void *s, char kind, Py_ssize_t p0, Py_ssize_t B) {
#define LOAD(T)                                                               \
    do {                                                                      \
        const T *restrict src = (const T *)s + p0;                            \
        for (Py_ssize_t j = 0; j < B; j++) buf[j] = (float)src[j];            \
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
#pragma omp parallel num_threads(nthreads)
    {
        size_t fb = ((size_t)B * 4 + 63) / 64 * 64;
        float *buf = (float *)aligned_alloc(64, fb);
        float *sb = (float *)aligned_alloc(64, fb);
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
                load_sums(buf, s, kind, p0, B);
                if (cnt) {
                    for (Py_ssize_t j = 0; j < B; j++)
                        buf[j] = buf[j] * (ca / (float)cnt[p0 + j]) - cb;
                } else {
                    float a = ca / (float)m;
                    for (Py_ssize_t j = 0; j < B; j++) buf[j] = buf[j] * a - cb;
                }
                fwht(buf, B);
                fill_signs(sb, skey, (uint64_t)(offset + p0), B);
                for (Py_ssize_t j = 0; j < valid; j++) out[xi + j] = buf[j] * rs * sb[j];
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
