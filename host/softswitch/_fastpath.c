/* The software target's common case in C: the aggregation frames of one job, in a flat tree
 * or a hierarchy of switches.
 *
 * host/softswitch/pipeline.py is the reference; Pipeline.process calls this first (when built)
 * and runs its own numpy/Python path whenever this returns None. A batch qualifies when every
 * frame is an Ethernet/IPv4/UDP/THC frame of the given job that passes every check of
 * ThcValidate (version, type, lane width, element count, slot set = round parity, rank, job
 * entry with a table, slot range, sender binding of a worker or child switch, parent binding of
 * a result), carries no bytes behind its payload and no PEEK flag, and is one of: DATA (4-bit
 * indices of a worker), PARTIAL (the job's lanes from a child switch), RESULT (the job's lanes
 * from the parent of a job with one). Anything else (norms, drops by validation, routing, a
 * status request) sends the whole batch to the Python path. Then, packet by packet in arrival
 * order, the P4 program's slot logic (ThcSlot._aggregate): a new contribution (the first
 * contributor of a round overwrites), a release on DEADLINE with or without adding, the
 * result multicast or the partial sent up at completion, the stored result answered to a
 * retransmission (RESENT), a partial re-sent up (RETX), a parent's result stored and fanned
 * out, STALE and DUPLICATE drops (counted by the caller, as the reference counts them). The
 * decisions are taken first on the registers alone; only a batch taken whole then changes the
 * sums and writes its frames. Should a case turn up that is not this path's, or an output not
 * fit, the registers this call changed are restored first (undo log), so that the fallback
 * starts from the same state. A batch taken is accepted whole:
 * process() reports the rows it accepted (all of them), from which the switch learns reply
 * addresses.
 *
 * Every output is built as Pipeline._emit builds it (header rewrite, lanes truncated to the
 * job's width, members table for multicast copies, MACs swapped for answers, IPv4 checksum).
 *
 * fp_batch needs no Python object: the C switch loop (_swloop.c) calls it with the GIL
 * released.
 */
#include "_fastpath.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int take(PyObject *o, buf_t *b, int writable, Py_ssize_t min_bytes, const char *name) {
    if (PyObject_GetBuffer(o, &b->v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s buffer", name,
                     writable ? " writable" : "");
        return -1;
    }
    b->held = 1;
    if (b->v.len < min_bytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", name, b->v.len, min_bytes);
        return -1;
    }
    return 0;
}

void release_all(buf_t *bufs, int nb) {
    for (int k = 0; k < nb; k++)
        if (bufs[k].held) {
            PyBuffer_Release(&bufs[k].v);
            bufs[k].held = 0;
        }
}

/* The registers of a copy before this call's first change of them. The sums need no undo:
 * every decision (and so every rollback) is taken in the first pass over the batch, which
 * reads and writes registers only; the sums change in the second pass, which cannot fail. */
typedef struct {
    int64_t cell, reg[7];
} undo_t;

/* What the second pass does for one row of the first: a change of the copy's sums, then an
 * emission (action OUT_NONE, from the layout: none). */
enum { SUMS_NONE = 0, SUMS_ADD_DATA, SUMS_ADD_LANES, SUMS_STORE_LANES };
typedef struct {
    int64_t cell, cnt, wb;
    int32_t row;
    int8_t sums_op, fresh, action;
    uint8_t flags;
} op_t;

/* 64-bit views of the sums and of the byte -> (L[high], L[low]) table: one add per payload
 * byte (two 32-bit lanes that cannot carry into each other, see fp_batch). */
typedef uint64_t __attribute__((may_alias)) u64a;

void fp_scratch_free(fp_scratch_t *s) {
    free(s->mark);
    free(s->undo);
    free(s->ops);
    memset(s, 0, sizeof(*s));
}

/* mark[c]: the undo entry of copy c in the running call, -1 untouched (reset after every call);
 * the undo log holds one entry per copy changed. */
static int scratch_grow(fp_scratch_t *s, size_t cells, size_t n) {
    if (cells > s->mark_n) {
        int64_t *m = realloc(s->mark, cells * sizeof(int64_t));
        if (!m) return -1;
        for (size_t k = s->mark_n; k < cells; k++) m[k] = -1;
        s->mark = m;
        s->mark_n = cells;
    }
    if (n > s->undo_n) {
        void *u = realloc(s->undo, n * sizeof(undo_t));
        if (!u) return -1;
        s->undo = u;
        void *o = realloc(s->ops, n * sizeof(op_t));
        if (!o) return -1;
        s->ops = o;
        s->undo_n = n;
    }
    return 0;
}

/* One emission (ThcEmit + ThcOutput, as Pipeline._emit builds it): the frame f rewritten,
 * its payload the copy's sums s (as wide as the job's lanes, see Pipeline.sums_for) in network
 * order, once per replica -- multicast:
 * the job's group, each copy rewritten by the members table; answer: back to the ingress port;
 * up: the partial to the parent. Returns the frames written, -1 when out of room. */
static Py_ssize_t emit(const fp_consts_t *K, const fp_job_t *J, const uint8_t *f, int64_t inport,
                       const uint32_t *s, int action, int64_t cnt, int64_t wb, int flags,
                       fp_out_t *out, Py_ssize_t nout, int W) {
    const int lane_bits = (int)J->lane_bits, lb = lane_bits / 8;
    const int plen = lane_bits * (W / 8);
    const Py_ssize_t k = action == OUT_MULTICAST ? J->ng : 1;
    if (nout + k > out->cap) return -1;
    const uint8_t *first = NULL;
    for (Py_ssize_t g = 0; g < k; g++) {
        uint8_t *o = out->buf + (size_t)(nout + g) * ROW_BYTES;
        memcpy(o, f, PAYLOAD_OFFSET);
        o[OFF_COUNT] = (uint8_t)cnt;
        put32(o + OFF_BITMAP, (uint32_t)wb);
        put16(o + OFF_SPORT, (uint32_t)K->thc_port);
        put16(o + OFF_UDP_CSUM, 0);
        o[OFF_LANE_BITS] = (uint8_t)lane_bits;
        o[OFF_TTL] = (uint8_t)K->ttl;
        o[OFF_MSG_TYPE] = (uint8_t)(action == OUT_UP ? MSG_PARTIAL : K->t_result);
        o[OFF_FLAGS] = (uint8_t)flags;
        put32(o + OFF_SRC, (uint32_t)J->self_addr);
        put16(o + OFF_UDP_LEN, (uint32_t)(UDP_HEADER_BYTES + THC_HEADER_BYTES + plen));
        put16(o + OFF_IP_LEN, (uint32_t)(UDP_HEADER_BYTES + THC_HEADER_BYTES + plen
                                        + IPV4_HEADER_BYTES));
        int64_t eport;
        if (action == OUT_UP) {
            o[OFF_RANK] = (uint8_t)J->self_id;
            put32(o + OFF_DST, (uint32_t)J->parent_addr);
            eport = J->parent_port;
        } else if (action == OUT_ANSWER) {
            memcpy(o + OFF_DST, f + OFF_SRC, 4);
            memcpy(o + OFF_DST_MAC, f + OFF_SRC_MAC, 6);
            memcpy(o + OFF_SRC_MAC, f + OFF_DST_MAC, 6);
            eport = inport;
        } else {
            o[OFF_RANK] = (uint8_t)K->rank_all;
            if (J->mhit[g]) {
                memcpy(o + OFF_DST_MAC, J->mmac + 6 * g, 6);
                put32(o + OFF_DST, J->maddr[g]);
            }
            eport = J->gports[g];
        }
        put16(o + OFF_IP_CSUM, 0);
        uint32_t cs = 0;
        for (int w = 0; w < IPV4_HEADER_BYTES / 2; w++) cs += be16(o + IPV4_OFFSET + 2 * w);
        cs = (cs & 0xFFFF) + (cs >> 16);
        cs = (cs & 0xFFFF) + (cs >> 16);
        put16(o + OFF_IP_CSUM, ~cs & 0xFFFF);
        uint8_t *d = o + PAYLOAD_OFFSET;
        if (out->arena) {
            /* one THC message per emission in the arena (fp_out_t); this row's own header
             * carries the THC header too, for the frames of AF_PACKET ports */
            if (!first) {
                uint8_t *a = out->arena + out->arena_at;
                memcpy(a, o + THC_OFFSET, PAYLOAD_OFFSET - THC_OFFSET);
                d = a + (PAYLOAD_OFFSET - THC_OFFSET);
            }
            out->aoff[nout + g] = (int64_t)out->arena_at;
        }
        if (first) {
            if (!out->arena) memcpy(d, first, (size_t)plen);   /* the same payload for every replica */
        } else if (lb == 1) {
            memcpy(d, s, (size_t)W);
        } else if (lb == 2) {
            const uint16_t *s16 = (const uint16_t *)s;
            for (int q = 0; q < W; q++) put16(d + 2 * q, s16[q]);
        } else {
            for (int q = 0; q < W; q++) put32(d + 4 * q, s[q]);
        }
        first = d;
        out->lens[nout + g] = PAYLOAD_OFFSET + plen;
        out->ports[nout + g] = eport;
    }
    if (out->arena) out->arena_at += (size_t)(PAYLOAD_OFFSET - THC_OFFSET + plen);
    return k;
}

/* CLOCK_MONOTONIC in ns (Python's time.monotonic_ns) */
static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sums element k of width lb bytes (1, 2 or 4; wrapping as the lanes do, Pipeline.sums_for):
 * set to v (over) or v added. */
static inline void put_sum(void *s, int lb, int k, uint32_t v, int over) {
    if (lb == 1) ((uint8_t *)s)[k] = (uint8_t)(over ? v : ((uint8_t *)s)[k] + v);
    else if (lb == 2) ((uint16_t *)s)[k] = (uint16_t)(over ? v : ((uint16_t *)s)[k] + v);
    else ((uint32_t *)s)[k] = over ? v : ((uint32_t *)s)[k] + v;
}

/* -- the DATA add with vectors (x86-64 with AVX2, checked at run time) --------------------
 * 16 payload bytes (32 coordinates) at a time: the nibbles looked up in the 16-entry tables
 * with a byte shuffle, interleaved back into coordinate order (high nibble first), widened to
 * 32 bits and added to (or, on a copy's first touch, written over) the sums. The same sums as
 * the 64-bit table add below, which stays for other machines and tables of wider values. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 1 where the CPU has AVX2 and NETCO_FASTPATH_SIMD is not "0" (read once; tests compare the
 * scalar add by switching it off in a fresh process) */
static int simd_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        const char *e = getenv("NETCO_FASTPATH_SIMD");
        ok = __builtin_cpu_supports("avx2") && !(e && e[0] == '0' && e[1] == 0);
    }
    return ok;
}

/* sums s of lb bytes each (1, 2 or 4: as wide as the job's lanes) */
__attribute__((target("avx2"))) static void add_indices_simd(void *s, const uint8_t *p,
                                                             int ibytes, int lb,
                                                             const uint8_t *th,
                                                             const uint8_t *tl, int fresh) {
    const __m128i TH = _mm_loadu_si128((const __m128i *)th);
    const __m128i TL = _mm_loadu_si128((const __m128i *)tl);
    const __m128i M = _mm_set1_epi8(0x0F);
    int k = 0;
    if (lb == 1) {
        /* 8-bit sums: 32 index bytes (64 lanes) per step. vpshufb and the unpacks work within
         * each 128-bit half, so the halves come out as lanes 0-15 | 32-47 and 16-31 | 48-63
         * and are put in order with two permutes. */
        const __m256i TH2 = _mm256_broadcastsi128_si256(TH), TL2 = _mm256_broadcastsi128_si256(TL);
        const __m256i M2 = _mm256_set1_epi8(0x0F);
        for (; k + 32 <= ibytes; k += 32) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(p + k));
            const __m256i vh = _mm256_shuffle_epi8(TH2, _mm256_and_si256(_mm256_srli_epi16(x, 4), M2));
            const __m256i vl = _mm256_shuffle_epi8(TL2, _mm256_and_si256(x, M2));
            const __m256i u0 = _mm256_unpacklo_epi8(vh, vl), u1 = _mm256_unpackhi_epi8(vh, vl);
            const __m256i c0 = _mm256_permute2x128_si256(u0, u1, 0x20);
            const __m256i c1 = _mm256_permute2x128_si256(u0, u1, 0x31);
            __m256i *d = (__m256i *)((uint8_t *)s + 2 * k);
            _mm256_storeu_si256(d, fresh ? c0 : _mm256_add_epi8(c0, _mm256_loadu_si256(d)));
            _mm256_storeu_si256(d + 1, fresh ? c1 : _mm256_add_epi8(c1, _mm256_loadu_si256(d + 1)));
        }
    }
    for (; k + 16 <= ibytes; k += 16) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(p + k));
        const __m128i vh = _mm_shuffle_epi8(TH, _mm_and_si128(_mm_srli_epi16(x, 4), M));
        const __m128i vl = _mm_shuffle_epi8(TL, _mm_and_si128(x, M));
        const __m128i c0 = _mm_unpacklo_epi8(vh, vl), c1 = _mm_unpackhi_epi8(vh, vl);
        if (lb == 1) {
            __m128i *d = (__m128i *)((uint8_t *)s + 2 * k);
            _mm_storeu_si128(d, fresh ? c0 : _mm_add_epi8(c0, _mm_loadu_si128(d)));
            _mm_storeu_si128(d + 1, fresh ? c1 : _mm_add_epi8(c1, _mm_loadu_si128(d + 1)));
        } else if (lb == 2) {
            __m256i *d = (__m256i *)((uint16_t *)s + 2 * k);
            const __m256i a0 = _mm256_cvtepu8_epi16(c0), a1 = _mm256_cvtepu8_epi16(c1);
            _mm256_storeu_si256(d, fresh ? a0 : _mm256_add_epi16(a0, _mm256_loadu_si256(d)));
            _mm256_storeu_si256(d + 1, fresh ? a1 : _mm256_add_epi16(a1, _mm256_loadu_si256(d + 1)));
        } else {
            __m256i a[4] = {_mm256_cvtepu8_epi32(c0), _mm256_cvtepu8_epi32(_mm_srli_si128(c0, 8)),
                            _mm256_cvtepu8_epi32(c1), _mm256_cvtepu8_epi32(_mm_srli_si128(c1, 8))};
            __m256i *d = (__m256i *)((uint32_t *)s + 2 * k);
            for (int q = 0; q < 4; q++) {
                if (!fresh) a[q] = _mm256_add_epi32(a[q], _mm256_loadu_si256(d + q));
                _mm256_storeu_si256(d + q, a[q]);
            }
        }
    }
    for (; k < ibytes; k++) {
        put_sum(s, lb, 2 * k, th[p[k] >> 4], fresh);
        put_sum(s, lb, 2 * k + 1, tl[p[k] & 15], fresh);
    }
}
#else
static int simd_ok(void) { return 0; }
static void add_indices_simd(void *s, const uint8_t *p, int ibytes, int lb, const uint8_t *th,
                             const uint8_t *tl, int fresh) {
    (void)s; (void)p; (void)ibytes; (void)lb; (void)th; (void)tl; (void)fresh;
}
#endif

/* the lanes of a PARTIAL or parent RESULT (lb bytes each, network order) as 32-bit values */
static inline uint32_t lane_at(const uint8_t *p, int lb, int q) {
    return lb == 1 ? p[q] : lb == 2 ? be16(p + 2 * q) : be32(p + 4 * q);
}

int fp_batch(const fp_consts_t *K, fp_state_t *S, const fp_job_t *J, const uint8_t *buf,
             const int64_t *lens, const int64_t *ports, Py_ssize_t n, const int64_t *order,
             const uint8_t *const *pay, fp_out_t *out, fp_result_t *res, fp_scratch_t *scratch) {
    const long long slot_base = J->slot_base, num_slots = J->num_slots, expected = J->expected,
                    has_parent = J->has_parent, lane_bits = J->lane_bits,
                    pool_slots = S->pool_slots;
    const long long version = K->version, t_data = K->t_data, index_bits = K->index_bits,
                    thc_port = K->thc_port, max_workers = K->max_workers;
    const int job_id = J->job_id, jn = J->jn;
    if (lane_bits != 8 && lane_bits != 16 && lane_bits != 32) return 0;
    if (!J->lut_narrow) return 0;   /* never with the P4Info's 8-bit table values */
    if (has_parent && !J->tree) return 0;
    const u64a *lut2 = (const u64a *)J->lut;
    int64_t *const *R = S->R;
    int64_t *st_round = R[0], *st_state = R[1], *st_contrib = R[2], *st_nc = R[3],
            *st_cnt = R[4], *st_wb = R[5], *st_tent = R[6];
    uint32_t *sums = S->sums;
    const int W = (int)S->coords, ibytes = W / 2;   /* packet width; DATA index bytes */
    if (W < COORDS_PER_PACKET || W > MAX_COORDS_PER_PACKET || W % COORDS_PER_PACKET) return 0;
    const int plen = (int)(lane_bits * (W / 8));
    if (plen > MAX_PAYLOAD_BYTES) return 0;
    const int lb = (int)(lane_bits / 8);
    Py_ssize_t nu = 0;
    int handled = 0;
    undo_t *undo = NULL;
    /* the job's presence row (absent ranks, misses), saved before its first change */
    int64_t *const pres = J->presence;
    int64_t pres_saved[PRESENCE_COLS];
    int pres_dirty = 0;
    int64_t now = 0;   /* the call's time (CLOCK_MONOTONIC, ns): its ranks heard from then */
#define PRES_SAVE() \
    do { \
        if (!pres_dirty) { memcpy(pres_saved, pres, sizeof(pres_saved)); pres_dirty = 1; } \
    } while (0)
    int64_t *mark = NULL;

    /* 1. stateless checks of every frame (ThcValidate for this case): any miss -> Python.
     *    DATA: 4-bit indices from a worker; PARTIAL: the job's lanes from a child switch;
     *    RESULT: the job's lanes from the parent. No PEEK, no norms, no bytes behind. */
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint8_t *f = buf + (size_t)j * ROW_BYTES;
        int64_t L = lens[j];
        const int t = f[OFF_MSG_TYPE];
        if (be16(f + OFF_ETHERTYPE) != ETHERTYPE_IPV4
            || (f[OFF_VERIHL] & 0x0F) != IPV4_HEADER_BYTES / 4
            || (be16(f + OFF_FRAG) & 0x1FFF) != 0 || f[OFF_PROTO] != IP_PROTO_UDP
            || be16(f + OFF_DPORT) != (uint32_t)thc_port || f[OFF_VERSION] != version
            || (int)be16(f + OFF_JOB_ID) != job_id
            || be16(f + OFF_ELEM_COUNT) > W || f[OFF_SLOT_SET] > 1
            || f[OFF_SLOT_SET] != (f[OFF_ROUND + 3] & 1)
            || (f[OFF_FLAGS] & FLAG_PEEK)
            || (long long)be32(f + OFF_TOKEN) != J->token) /* issue 16: the job's token */
            goto not_handled;
        if (t == t_data) {
            if (L != PAYLOAD_OFFSET + ibytes || f[OFF_LANE_BITS] != index_bits)
                goto not_handled;
        } else if (t == MSG_PARTIAL || (t == MSG_RESULT && has_parent)) {
            if (L != PAYLOAD_OFFSET + plen || f[OFF_LANE_BITS] != lane_bits) goto not_handled;
        } else {
            goto not_handled;
        }
        uint32_t slot = be16(f + OFF_SLOT);
        if ((long long)slot >= num_slots || slot_base + (long long)slot >= pool_slots)
            goto not_handled;
        if (t == MSG_RESULT) {   /* the parent binding of a result */
            if (ports[j] != J->parent_port || (long long)be32(f + OFF_SRC) != J->parent_addr)
                goto not_handled;
            continue;
        }
        if (f[OFF_RANK] >= max_workers) goto not_handled;
        /* the binding, its UDP port included (issue 33): another is BAD_SENDER in Python */
        if (!fp_sender_bound(S, jn, f[OFF_RANK], ports[j], be32(f + OFF_SRC), t == MSG_PARTIAL,
                             be16(f + OFF_SPORT)))
            goto not_handled;
    }

    /* 2. the slot logic (ThcSlot._aggregate), packet by packet in arrival order, on the
     *    registers only (undo log for the fallback); every decision of the reference:
     *    contribution, release (DEADLINE), answer with the stored result (RESENT), partial
     *    re-sent up (RETX), parent result, STALE and DUPLICATE drops (counted by the caller).
     *    What each row does to the sums and which frames it emits is written down (ops) and
     *    done in step 3, in the same order: nothing reads the sums to decide, so the outcome is
     *    the reference's, and a rollback never has sums to restore. */
    if (scratch_grow(scratch, (size_t)pool_slots * 4, (size_t)(n ? n : 1)) < 0) return -1;
    undo = scratch->undo;
    mark = scratch->mark;
    op_t *const ops = scratch->ops;
    Py_ssize_t nops = 0;
    fp_result_t z;
    memset(&z, 0, sizeof(z));
#define OP(cell_, sop_, fresh_, act_, cnt_, wb_, fl_) \
    do { \
        const Py_ssize_t k_ = (act_) == OUT_MULTICAST ? J->ng : (act_) == OUT_NONE ? 0 : 1; \
        if (z.nout + k_ > out->cap) goto rollback; \
        z.nout += k_; \
        ops[nops++] = (op_t){.cell = (cell_), .cnt = (cnt_), .wb = (wb_), .row = (int32_t)j, \
                             .sums_op = (int8_t)(sop_), .fresh = (int8_t)(fresh_), \
                             .action = (int8_t)(act_), .flags = (uint8_t)(fl_)}; \
    } while (0)
    for (Py_ssize_t q = 0; q < n; q++) {
        Py_ssize_t j = order ? order[q] : q;
        if (j < 0 || j >= n) goto rollback;
        const uint8_t *f = buf + (size_t)j * ROW_BYTES;
        const int t = f[OFF_MSG_TYPE], fl = f[OFF_FLAGS];
        int64_t c = ((slot_base + be16(f + OFF_SLOT)) << 2) | f[OFF_SLOT_SET];
        /* the 48-bit round (ROUND_BITS): low 32 bits in round, high 16 in round_hi */
        int64_t r = (int64_t)be32(f + OFF_ROUND) | ((int64_t)be16(f + OFF_ROUND_HI) << 32);
        /* remember the copy's registers before its first change in this call */
        if (mark[c] < 0) {
            mark[c] = nu;
            undo[nu].cell = c;
            for (int k = 0; k < 7; k++) undo[nu].reg[k] = R[k][c];
            nu++;
        }
        int64_t st = st_state[c];
        if (t == MSG_RESULT) {
            /* a result from our parent: store it and fan it out */
            if (st_round[c] != r || (st != ST_SENT_UP && st != ST_FINAL)) {
                z.nstale++;
                continue;
            }
            int64_t pc = f[OFF_COUNT], pb = be32(f + OFF_BITMAP);
            st_state[c] = ST_FINAL;
            st_cnt[c] = pc;
            st_wb[c] = pb;
            z.nparent++;
            OP(c, SUMS_STORE_LANES, 1, OUT_MULTICAST, pc, pb, 0);
            z.nresults++;
            continue;
        }
        const int is_sw = t == MSG_PARTIAL;
        int64_t bit = (int64_t)1 << f[OFF_RANK];
        int64_t a_cnt = is_sw ? f[OFF_COUNT] : 1;
        int64_t a_wb = is_sw ? (int64_t)be32(f + OFF_BITMAP) : bit;
        int fresh = st == ST_EMPTY;
        const int from_empty = fresh;   /* opened from empty: tentative (a restart's repairs) */
        if (!fresh && st_round[c] != r) {
            const int64_t ahead = (r - st_round[c]) & ROUND_MASK;
            if (ahead & ROUND_OLDER) { /* serial-number arithmetic: older */
                z.nstale++;
                continue;
            }
            if (!(f[OFF_FLAGS] & FLAG_START)) {
                if (ahead >= ROUND_WINDOW)
                    goto rollback; /* far ahead (issue 16, H2): dropped as AHEAD by Python */
                /* a copy moves on only to its next round (two on), and while it collects
                 * only if it was opened from empty (a restart's repairs): a member lapping
                 * the others (issue 33) is dropped as AHEAD (ThcSlot, _laps) */
                if (ahead != 2 || (st != ST_FINAL && !st_tent[c])) {
                    z.nahead++;
                    continue;
                }
            }
            fresh = 1;
        }
        const int rk = f[OFF_RANK];
        /* heard from now: present again; a first transmission opening a copy for a session
         * also forgets who was absent, not the miss streaks (ThcSlot, _heard) */
        const int64_t keep = (fl & (FLAG_START | FLAG_RETX)) == FLAG_START ? 0 : ~bit;
        if (!now) now = mono_ns();
        PRES_SAVE();
        pres[PRESENCE_ABSENT] &= keep;
        pres[PRESENCE_MISS + rk] = 0;
        pres[PRESENCE_HEARD + rk] = now;
        int64_t cb, nc, cnt, wb;
        if (fresh) {
            cb = nc = cnt = wb = 0;
            st = ST_COLLECTING;
        } else {
            cb = st_contrib[c]; nc = st_nc[c]; cnt = st_cnt[c]; wb = st_wb[c];
        }
        int release = 0, sop = SUMS_NONE;
        if (cb & bit) {
            /* retransmission of a counted contribution: never counted twice */
            if (st == ST_FINAL) {
                OP(c, SUMS_NONE, 0, OUT_ANSWER, cnt, wb, FLAG_RESENT);
                z.nresent++;
                continue;
            } else if (st == ST_SENT_UP) {
                OP(c, SUMS_NONE, 0, OUT_UP, cnt, wb,
                   FLAG_RETX | (fl & (FLAG_DEADLINE | FLAG_START)));
                z.nresults++;
                z.nretx_up++;
                continue;
            } else if (fl & FLAG_DEADLINE) {
                release = 1;   /* release now, add nothing */
                z.nrelease++;
            } else {
                z.ndup++;
                continue;
            }
        } else if (st == ST_FINAL) {
            /* released early (deadline) without this contributor: send it the result */
            OP(c, SUMS_NONE, 0, OUT_ANSWER, cnt, wb, FLAG_RESENT);
            z.nresent++;
            continue;
        } else if (st != ST_COLLECTING) {
            z.nstale++;   /* sent up without it */
            continue;
        } else {
            cnt += a_cnt;
            wb |= a_wb;
            cb |= bit;
            nc += 1;
            sop = t == t_data ? SUMS_ADD_DATA : SUMS_ADD_LANES;
            if (fresh) {
                st_round[c] = r;
                st_tent[c] = from_empty;
            }
            z.ncontrib++;
            const int64_t ab = pres[PRESENCE_ABSENT];
            release = nc >= expected || (fl & FLAG_DEADLINE)
                      || (ab && !(pres[PRESENCE_MASK] & ~(cb | ab)));
        }
        int act = OUT_NONE, ofl = 0;
        if (release) {
            if ((fl & FLAG_DEADLINE) && nc < expected) {
                /* a deadline release without the ranks of missing: counted for each; a rank
                 * missed absent_after times in a row and not heard from for absent_silence_ns
                 * or longer is held absent (ThcSlot, _missed) */
                int64_t missing = pres[PRESENCE_MASK] & ~cb;
                while (missing) {
                    const int q = __builtin_ctzll((unsigned long long)missing);
                    int64_t m = pres[PRESENCE_MISS + q];
                    m = m + 1 > 255 ? 255 : m + 1;
                    pres[PRESENCE_MISS + q] = m;
                    if (m >= K->absent_after
                        && now - pres[PRESENCE_HEARD + q] >= K->absent_silence_ns)
                        pres[PRESENCE_ABSENT] |= (int64_t)1 << q;
                    missing &= missing - 1;
                }
            }
            if (has_parent) {
                st = ST_SENT_UP;
                act = OUT_UP;
                ofl = fl & (FLAG_DEADLINE | FLAG_START);
            } else {
                st = ST_FINAL;
                act = OUT_MULTICAST;
            }
            z.nresults++;
        }
        if (sop != SUMS_NONE || act != OUT_NONE) OP(c, sop, fresh, act, cnt, wb, ofl);
        st_state[c] = st;
        st_contrib[c] = cb;
        st_nc[c] = nc;
        st_cnt[c] = cnt;
        st_wb[c] = wb;
    }
#undef OP

    /* 3. the sums and the frames, in the order decided (room for the frames was counted) */
    Py_ssize_t nout = 0;
    out->arena_at = 0;
    const int vec = J->lut_nibbles && simd_ok();
    for (Py_ssize_t o = 0; o < nops; o++) {
        const op_t *op = ops + o;
        const uint8_t *f = buf + (size_t)op->row * ROW_BYTES;
        const uint8_t *p = pay && pay[op->row] ? pay[op->row] : f + PAYLOAD_OFFSET;
        uint32_t *s = sums + (size_t)op->cell * W;
        /* the sums as wide as the job's lanes (lb bytes each, Pipeline.sums_for) */
        switch (op->sums_op) {
        case SUMS_ADD_DATA:
            if (vec) {
                add_indices_simd(s, p, ibytes, lb, J->tab_hi, J->tab_lo, op->fresh);
            } else if (lb == 4) {
                /* both lanes of a byte in one 64-bit add: every sum of this job stays below
                 * 2^32 (J->lut_narrow), so the low lane never carries into the high one */
                u64a *s2 = (u64a *)s;
                if (op->fresh) for (int k = 0; k < ibytes; k++) s2[k] = lut2[p[k]];
                else for (int k = 0; k < ibytes; k++) s2[k] += lut2[p[k]];
            } else {
                for (int k = 0; k < ibytes; k++) {
                    put_sum(s, lb, 2 * k, J->lut[2 * p[k]], op->fresh);
                    put_sum(s, lb, 2 * k + 1, J->lut[2 * p[k] + 1], op->fresh);
                }
            }
            break;
        case SUMS_ADD_LANES:
        case SUMS_STORE_LANES: {
            const int over = op->sums_op == SUMS_STORE_LANES || op->fresh;
            if (lb == 1 && over) memcpy(s, p, (size_t)W);
            else for (int k = 0; k < W; k++) put_sum(s, lb, k, lane_at(p, lb, k), over);
            break;
        }
        default:
            break;
        }
        /* rank_contributions.count(index * MAX_WORKERS + rank): one per contribution added */
        if (J->rank_counts && (op->sums_op == SUMS_ADD_DATA || op->sums_op == SUMS_ADD_LANES)
            && f[OFF_RANK] < MAX_WORKERS)
            J->rank_counts[f[OFF_RANK]]++;
        if (op->action != OUT_NONE)
            nout += emit(K, J, f, ports[op->row], s, op->action, op->cnt, op->wb, op->flags,
                         out, nout, W);
    }
    *res = z;
    handled = 1;
    goto done;
rollback:
    if (pres_dirty) memcpy(pres, pres_saved, sizeof(pres_saved));
    for (Py_ssize_t u = nu - 1; u >= 0; u--) {
        int64_t c = undo[u].cell;
        for (int k = 0; k < 7; k++) R[k][c] = undo[u].reg[k];
    }
not_handled:
    handled = 0;
done:
    for (Py_ssize_t u = 0; u < nu; u++) mark[undo[u].cell] = -1;
    return handled;
#undef PRES_SAVE
}

/* -- Python-side descriptions ------------------------------------------------------------- */

int fp_parse_consts(PyObject *o, fp_consts_t *k) {
    return PyArg_ParseTuple(o, "LLLLLLLLLL", &k->version, &k->t_data, &k->index_bits,
                            &k->t_result, &k->rank_all, &k->thc_port, &k->max_workers, &k->ttl,
                            &k->absent_after, &k->absent_silence_ns) ? 0 : -1;
}

/* (job_id, jn, (slot_base, num_slots, expected, has_parent, lane_bits, self_addr, index, token),
 *  lut, group ports, member_hit, member_mac, member_addr, presence[, (parent_port, parent_addr,
 *  self_id)[, rank_counts]]); takes 7 buffers. Without the tree a job with a parent is not the
 *  C path's case; rank_counts (None or MAX_WORKERS int64, written) is the job's row of
 *  ingress.thc_slot.rank_contributions. */
int fp_parse_job(PyObject *o, fp_job_t *j, buf_t *bufs, int *nb) {
    PyObject *params, *olut, *og, *oh, *om, *oa, *opres, *otree = NULL, *orank = NULL;
    if (!PyArg_ParseTuple(o, "iiOOOOOOO|OO", &j->job_id, &j->jn, &params, &olut, &og, &oh, &om,
                          &oa, &opres, &otree, &orank))
        return -1;
    if (!PyArg_ParseTuple(params, "LLLLLLLL", &j->slot_base, &j->num_slots, &j->expected,
                          &j->has_parent, &j->lane_bits, &j->self_addr, &j->index, &j->token))
        return -1;
    j->tree = 0;
    if (otree && otree != Py_None) {
        if (!PyArg_ParseTuple(otree, "LLL", &j->parent_port, &j->parent_addr, &j->self_id))
            return -1;
        j->tree = 1;
    }
    buf_t *b = bufs + *nb;
    if (take(olut, &b[0], 0, 256 * 8, "lut") < 0) return (*nb += 1, -1);
    if (take(og, &b[1], 0, 0, "group") < 0) return (*nb += 2, -1);
    j->ng = b[1].v.len / 8;
    if (take(oh, &b[2], 0, j->ng, "member_hit") < 0) return (*nb += 3, -1);
    if (take(om, &b[3], 0, 6 * j->ng, "member_mac") < 0) return (*nb += 4, -1);
    if (take(oa, &b[4], 0, 4 * j->ng, "member_addr") < 0) return (*nb += 5, -1);
    if (take(opres, &b[5], 1, 8 * PRESENCE_COLS, "presence") < 0) return (*nb += 6, -1);
    j->rank_counts = NULL;
    if (orank && orank != Py_None) {
        if (take(orank, &b[6], 1, 8 * MAX_WORKERS, "rank_counts") < 0) return (*nb += 7, -1);
        j->rank_counts = b[6].v.buf;
        *nb += 1;
    }
    *nb += 6;
    j->presence = b[5].v.buf;
    j->lut = b[0].v.buf;
    /* every sum of this job's DATA stays below 2^32: at most MAX_WORKERS contributions of the
     * table's largest value (the 64-bit add of fp_batch needs that) */
    uint32_t top = 0;
    for (int k = 0; k < 512; k++) top = j->lut[k] > top ? j->lut[k] : top;
    j->lut_narrow = (uint64_t)top * MAX_WORKERS < ((uint64_t)1 << 32);
    /* the table per nibble, where the byte table is one (THC step 8: high nibble first) */
    j->lut_nibbles = top < 256;
    for (int v = 0; v < 16; v++) {
        j->tab_hi[v] = (uint8_t)j->lut[2 * (v << 4)];
        j->tab_lo[v] = (uint8_t)j->lut[2 * v + 1];
    }
    for (int b = 0; b < 256 && j->lut_nibbles; b++)
        j->lut_nibbles = j->lut[2 * b] == j->tab_hi[b >> 4] && j->lut[2 * b + 1] == j->tab_lo[b & 15];
    j->gports = b[1].v.buf;
    j->mhit = b[2].v.buf;
    j->mmac = b[3].v.buf;
    j->maddr = b[4].v.buf;
    return 0;
}

/* (sender_keys, sender_is_switch, sender_port, pool_slots, coords, regs (7 int64 arrays),
 * sums); takes 11 buffers */
int fp_parse_state(PyObject *o, fp_state_t *st, buf_t *bufs, int *nb) {
    PyObject *osk, *osw, *osp, *oregs, *osums;
    if (!PyArg_ParseTuple(o, "OOOLLOO", &osk, &osw, &osp, &st->pool_slots, &st->coords, &oregs,
                          &osums))
        return -1;
    if (st->coords < COORDS_PER_PACKET || st->coords > MAX_COORDS_PER_PACKET
        || st->coords % COORDS_PER_PACKET) {
        PyErr_Format(PyExc_ValueError, "coords: %lld is not a packet width", st->coords);
        return -1;
    }
    if (!PyTuple_Check(oregs) || PyTuple_GET_SIZE(oregs) != 7) {
        PyErr_SetString(PyExc_TypeError, "regs: a tuple of 7 int64 arrays");
        return -1;
    }
    buf_t *b = bufs + *nb;
    int k = 0;
    int rc = -1;
    if (take(osk, &b[k++], 0, 0, "sender_keys") < 0) goto out;
    if (take(osw, &b[k], 0, b[0].v.len / 8, "sender_is_switch") < 0) { k++; goto out; }
    k++;
    if (take(osp, &b[k], 0, 2 * (b[0].v.len / 8), "sender_port") < 0) { k++; goto out; }
    k++;
    for (int r = 0; r < 7; r++) {
        if (take(PyTuple_GET_ITEM(oregs, r), &b[k], 1, 8 * st->pool_slots * 4, "regs") < 0) {
            k++;
            goto out;
        }
        st->R[r] = b[k++].v.buf;
    }
    if (take(osums, &b[k], 1, 4 * st->coords * st->pool_slots * 4, "sums") < 0) {
        k++;
        goto out;
    }
    st->sums = b[k++].v.buf;
    st->skeys = b[0].v.buf;
    st->nsk = b[0].v.len / 8;
    st->sw = b[1].v.buf;
    st->sport = b[2].v.buf;
    rc = 0;
out:
    *nb += k;
    return rc;
}

static const char *doc =
    "process(buf, lens, ports, n, order, job, state, consts, out, accepted)\n"
    "  job: (job_id, jn, (slot_base, num_slots, expected, has_parent, lane_bits, self_addr,\n"
    "        index, token), lut, group ports, member_hit, member_mac, member_addr, presence\n"
    "        [, (parent_port, parent_addr, self_id)])\n"
    "  state: (sender_keys, sender_is_switch, sender_port, pool_slots, coords, regs (round,\n"
    "          state, contrib, nc, cnt, wb, tentative), sums)\n"
    "  consts: (version, T_DATA, index_bits, T_RESULT, rank_all, thc_port, max_workers,\n"
    "           result_ttl, absent_after, absent_silence_ns)\n"
    "  out: (out_buf, out_lens, out_ports); accepted: int64 array of >= n rows\n"
    "-> None (not handled: nothing changed) or (frames out, contributions, results, accepted,\n"
    "   resent, retx_up, release, parent_result, stale, duplicate): the rows accepted are\n"
    "   written to accepted[:accepted count]; stale and duplicate rows were dropped (counted).";

/* one scratch per thread that calls process() */
static _Thread_local fp_scratch_t py_scratch;

static PyObject *py_process(PyObject *self, PyObject *args) {
    PyObject *obuf, *olens, *oports, *oorder, *ojob, *ostate, *oconst, *oout, *oacc;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOOnOOOOOO", &obuf, &olens, &oports, &n, &oorder, &ojob,
                          &ostate, &oconst, &oout, &oacc))
        return NULL;
    PyObject *ob, *ol, *op;
    if (!PyArg_ParseTuple(oout, "OOO", &ob, &ol, &op)) return NULL;
    fp_consts_t K;
    if (fp_parse_consts(oconst, &K) < 0) return NULL;
    buf_t bufs[32];
    memset(bufs, 0, sizeof(bufs));
    int nb = 0;
    PyObject *result = NULL;
    fp_job_t J;
    fp_state_t S;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "n < 0");
        goto done;
    }
    if (take(obuf, &bufs[nb++], 0, (Py_ssize_t)ROW_BYTES * n, "buf") < 0) goto done;
    if (take(olens, &bufs[nb++], 0, 8 * n, "lens") < 0) goto done;
    if (take(oports, &bufs[nb++], 0, 8 * n, "ports") < 0) goto done;
    const int64_t *order = NULL;
    if (oorder != Py_None) {
        if (take(oorder, &bufs[nb++], 0, 8 * n, "order") < 0) goto done;
        order = bufs[nb - 1].v.buf;
    }
    if (take(oacc, &bufs[nb++], 1, 8 * n, "accepted") < 0) goto done;
    int64_t *acc = bufs[nb - 1].v.buf;
    if (take(ol, &bufs[nb++], 1, 0, "out_lens") < 0) goto done;
    fp_out_t out = {.lens = bufs[nb - 1].v.buf, .cap = bufs[nb - 1].v.len / 8};
    if (take(ob, &bufs[nb++], 1, (Py_ssize_t)ROW_BYTES * out.cap, "out_buf") < 0) goto done;
    out.buf = bufs[nb - 1].v.buf;
    if (take(op, &bufs[nb++], 1, 8 * out.cap, "out_ports") < 0) goto done;
    out.ports = bufs[nb - 1].v.buf;
    if (fp_parse_job(ojob, &J, bufs, &nb) < 0) goto done;
    if (fp_parse_state(ostate, &S, bufs, &nb) < 0) goto done;
    fp_result_t r;
    int h = fp_batch(&K, &S, &J, bufs[0].v.buf, bufs[1].v.buf, bufs[2].v.buf, n, order, NULL, &out,
                     &r, &py_scratch);
    if (h < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (h == 0) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) acc[j] = j;   /* a batch taken is accepted whole */
    result = Py_BuildValue("(LLLnLLLLLLL)", r.nout, r.ncontrib, r.nresults, n, r.nresent,
                           r.nretx_up, r.nrelease, r.nparent, r.nstale, r.ndup, r.nahead);
done:
    release_all(bufs, nb);
    return result;
}

static PyMethodDef methods[] = {
    {"process", py_process, METH_VARARGS, NULL},
    {"loop", py_loop, METH_VARARGS, NULL},
    {"new_memory", py_new_memory, METH_NOARGS, NULL},
    {"arrival_order", py_arrival_order, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_fastpath",
                                    "The software target's data path in C (pipeline.py, switch.py).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastpath(void) {
    methods[0].ml_doc = doc;
    methods[1].ml_doc = loop_doc;
    methods[2].ml_doc = new_memory_doc;
    methods[3].ml_doc = arrival_order_doc;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    PyObject *names = PyTuple_New(loop_stat_count);
    for (int k = 0; names && k < loop_stat_count; k++)
        PyTuple_SET_ITEM(names, k, PyUnicode_FromString(loop_stat_names[k]));
    if (!names || PyModule_AddObject(m, "LOOP_STATS", names) < 0
        || PyModule_AddStringConstant(m, "LAYOUT_HASH", NETCO_LAYOUT_HASH) < 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
