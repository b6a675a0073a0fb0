/* The software target's C data path, shared by its two sources:
 *
 *   _fastpath.c  the common case of one batch (fp_batch) and its Python entry point process();
 *   _swloop.c    the switch loop in C (loop()): receive (recvmmsg, UDP GRO trains split),
 *                fp_batch, learn, send (sendmmsg, UDP GSO) on a second thread, batch after
 *                batch with the GIL released, until a control event or a batch fp_batch does
 *                not take (handed back to host/softswitch/pipeline.py, the reference).
 *
 * Every frame offset and size comes from the generated netco_layout.h (p4/gen.py). */
#ifndef NETCO_FASTPATH_H
#define NETCO_FASTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "netco_layout.h"

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* A held Python buffer (released by release_all). */
typedef struct {
    Py_buffer v;
    int held;
} buf_t;

int take(PyObject *o, buf_t *b, int writable, Py_ssize_t min_bytes, const char *name);

/* The protocol constants Python passes (host/softswitch/controls/native.py, _NATIVE_CONSTS,
 * with the pipeline's absent_silence_ns: NativePath.native_consts). */
typedef struct {
    long long version, t_data, index_bits, t_result, rank_all, thc_port, max_workers, ttl;
    long long absent_after;         /* controls/common.py ABSENT_AFTER */
    long long absent_silence_ns;    /* the pipeline's absent_silence_ns */
} fp_consts_t;

/* columns of a job's presence row (host/softswitch/config.py, Compiled.presence) */
enum { PRESENCE_MASK = 0, PRESENCE_ABSENT = 1, PRESENCE_MISS = 2 };
#define PRESENCE_HEARD (PRESENCE_MISS + MAX_WORKERS)
#define PRESENCE_COLS (PRESENCE_HEARD + MAX_WORKERS)

/* One job with a THC table (Pipeline's compiled configuration). */
typedef struct {
    int job_id, jn;
    long long slot_base, num_slots, expected, has_parent, lane_bits, self_addr, index, token;
    const uint32_t *lut;            /* 256 (high, low nibble) pairs */
    int lut_narrow;                 /* MAX_WORKERS x the largest table value < 2^32 */
    int lut_nibbles;                /* lut is tab_hi[b >> 4], tab_lo[b & 15], values < 256 */
    uint8_t tab_hi[16], tab_lo[16]; /* the table per nibble (the vector add, fp_batch) */
    const int64_t *gports;          /* the job's multicast group ports */
    const uint8_t *mhit, *mmac;     /* members table per group port */
    const uint32_t *maddr;
    Py_ssize_t ng;
    int64_t *presence;              /* PRESENCE_COLS: ranks, absent ranks, misses (written) */
    int64_t *rank_counts;           /* MAX_WORKERS: rank_contributions of the job (or NULL) */
    /* the tree (a job with a parent): given (tree = 1) with the job's last tuple item */
    int tree;
    long long parent_port, parent_addr, self_id;
} fp_job_t;

/* The aggregation state and sender table shared by the jobs. */
typedef struct {
    const uint64_t *skeys;
    const uint8_t *sw;
    const uint16_t *sport;          /* the UDP source port a binding names, 0: any (issue 33) */
    Py_ssize_t nsk;
    long long pool_slots;
    long long coords;               /* the switch's packet width (--coords-per-packet) */
    int64_t *R[7];                  /* round, state, contrib, nc, cnt, wb, tentative per copy */
    uint32_t *sums;                 /* rows of coords; data copies as wide as their lanes */
} fp_state_t;

/* Whether (job number jn, rank, ingress port, source address) is a bound sender of the kind
 * the message type asks for (a child switch for partials) and sends from the UDP port its
 * binding names (0: any; issue 33): ThcValidate's senders lookup. */
static inline int fp_sender_bound(const fp_state_t *S, long long jn, uint32_t rank, long long port,
                                  uint32_t src, int partial, uint32_t udp_port) {
    const uint64_t key = ((uint64_t)jn << 49) | ((uint64_t)rank << 41) | ((uint64_t)port << 32)
                         | (uint64_t)src;
    Py_ssize_t lo = 0, hi = S->nsk;   /* searchsorted (left) */
    while (lo < hi) {
        const Py_ssize_t mid = (lo + hi) / 2;
        if (S->skeys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= S->nsk || S->skeys[lo] != key || S->sw[lo] != partial) return 0;
    return S->sport[lo] == 0 || S->sport[lo] == udp_port;
}

/* Scratch of one caller (the undo log of the fallback); zero-initialize, free with
 * fp_scratch_free. */
typedef struct {
    int64_t *mark;
    size_t mark_n;
    void *undo;
    void *ops;          /* the second pass's work, one entry per row (undo_n of both) */
    size_t undo_n;
} fp_scratch_t;

void fp_scratch_free(fp_scratch_t *s);

/* Where fp_batch writes its frames: rows of ROW_BYTES, lengths, egress ports. With an arena
 * (the C loop's sender), every emission's THC message (header and lanes) is written once,
 * packed after the last one in the arena, at aoff[i] for each of its frames (the replicas of
 * a multicast share it: they differ in their Ethernet and IPv4 headers only), and the rows get
 * those headers, not the lanes: a UDP port sends the arena's bytes (consecutive results to one
 * address are one iovec per UDP_SEGMENT message, not one per datagram and a copy per member),
 * an AF_PACKET port gets the lanes copied into the row. Without (Python's process()), every
 * row is a whole frame. */
typedef struct {
    uint8_t *buf;
    int64_t *lens, *ports;
    uint8_t *arena;         /* cap * ROW_BYTES bytes, or NULL */
    int64_t *aoff;
    size_t arena_at;        /* bytes used (fp_batch starts it at 0) */
    Py_ssize_t cap;
} fp_out_t;

/* The batch's counts when fp_batch took it. */
typedef struct {
    long long nout, ncontrib, nresults;
    /* answers with the stored result (resent counter), partials re-sent up, releases without
     * adding (DEADLINE), parent results stored, and the STALE, DUPLICATE and AHEAD drops */
    long long nresent, nretx_up, nrelease, nparent, nstale, ndup, nahead;
} fp_result_t;

/* Rows 0..n-1 of buf (lens, ingress ports; order: arrival order or NULL; pay: where each
 * row's payload is when not at its PAYLOAD_OFFSET -- a UDP datagram read in place in its GRO
 * train -- or NULL: every row whole) through the common
 * case (worker contributions, partials of child switches, results of the parent, with or
 * without DEADLINE). 1: taken (every row accepted -- STALE/DUPLICATE drops among them are
 * counted in res --, state changed, frames in out), 0: not its case (nothing changed), -1: out
 * of memory. Needs no Python (called with the GIL released). */
int fp_batch(const fp_consts_t *k, fp_state_t *st, const fp_job_t *job, const uint8_t *buf,
             const int64_t *lens, const int64_t *ports, Py_ssize_t n, const int64_t *order,
             const uint8_t *const *pay, fp_out_t *out, fp_result_t *res, fp_scratch_t *scratch);

/* Parse the Python-side descriptions (held buffers appended to bufs[*nb]). 0 ok, -1 error. */
int fp_parse_consts(PyObject *o, fp_consts_t *k);
int fp_parse_job(PyObject *o, fp_job_t *j, buf_t *bufs, int *nb);
int fp_parse_state(PyObject *o, fp_state_t *st, buf_t *bufs, int *nb);
void release_all(buf_t *bufs, int nb);

PyObject *py_loop(PyObject *self, PyObject *args);
extern const char *loop_doc;
PyObject *py_new_memory(PyObject *self, PyObject *args);
extern const char *new_memory_doc;
PyObject *py_arrival_order(PyObject *self, PyObject *arg);
extern const char *arrival_order_doc;
/* the names of the loop's totals (the module's LOOP_STATS, in order) */
extern const char *const loop_stat_names[];
extern const int loop_stat_count;

#endif
