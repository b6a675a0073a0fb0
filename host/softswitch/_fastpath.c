/* The software target's common case in C: a batch of plain worker contributions of one job.
 *
 * host/softswitch/pipeline.py is the reference; Pipeline.process calls this first (when built)
 * and runs its own numpy/Python path whenever this returns -1. A batch qualifies when every
 * frame is an Ethernet/IPv4/UDP/THC DATA frame with 4-bit indices of the given job that passes
 * every check of ThcValidate (version, type, lane width, element count, slot set = round
 * parity, rank, job entry with a table, slot range, sender binding of a worker), carries no
 * bytes behind its payload and no PEEK/DEADLINE flag, and -- packet by packet in arrival order,
 * the P4 program's slot logic -- is a new contribution to a collecting copy (or starts a newer
 * round) of a job without a parent. Anything else (a duplicate, a retransmission of a counted
 * contribution, a stale round, norms, partials, drops, routing) sends the whole batch to the
 * Python path: the registers and sums this call changed are restored first, so the fallback
 * starts from the same state.
 *
 * Per packet: the copy's registers, the table lookup (L[high nibble], L[low nibble] per byte)
 * added to the copy's 256 32-bit sums (the first contributor of a round overwrites), and at
 * completion the result built once per multicast replica, exactly as Pipeline._emit builds it
 * (header rewrite, lanes truncated to the job's width, members table, IPv4 checksum).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every frame offset, header length and protocol/data-plane constant (OFF_*, PAYLOAD_OFFSET,
 * INDICES_BYTES, COORDS_PER_PACKET, ST_*, FLAG_*, ...) comes from the generated header
 * (p4/gen.py); NETCO_LAYOUT_HASH is exported so that pipeline.py refuses a stale build. */
#include "netco_layout.h"

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

typedef struct {
    Py_buffer v;
    int held;
} buf_t;

static int take(PyObject *o, buf_t *b, int writable, Py_ssize_t min_bytes, const char *name) {
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

/* mark[c]: this call's undo entry of copy c, -1 untouched (reset after every call; the GIL
 * is held throughout, so one array serves all calls) */
static int64_t *mark = NULL;
static size_t mark_n = 0;

static int grow_mark(size_t cells) {
    if (cells <= mark_n) return 0;
    int64_t *m = realloc(mark, cells * sizeof(int64_t));
    if (!m) return -1;
    for (size_t k = mark_n; k < cells; k++) m[k] = -1;
    mark = m;
    mark_n = cells;
    return 0;
}

typedef struct {
    int64_t cell, reg[6];
    uint32_t sums[COORDS_PER_PACKET];
} undo_t;

static const char *doc =
    "process(buf, lens, ports, n, order, job_id, jn, job (slot_base, num_slots, expected,\n"
    "        has_parent, lane_bits, self_addr, index), lut, sender_keys, sender_is_switch,\n"
    "        pool_slots, regs (round, state, contrib, nc, cnt, wb), sums, group ports,\n"
    "        member_hit, member_mac, member_addr, out_buf, out_lens, out_ports,\n"
    "        consts (version, T_DATA, index_bits, T_RESULT, rank_all, thc_port,\n"
    "        max_workers, result_ttl))\n"
    "-> None (not handled: nothing changed) or (frames out, contributions, results).";

static PyObject *py_process(PyObject *self, PyObject *args) {
    PyObject *obuf, *olens, *oports, *oorder, *ojob, *olut, *oskeys, *osw, *oregs, *osums,
        *ogports, *omhit, *ommac, *omaddr, *ooutbuf, *ooutlens, *ooutports, *oconst;
    Py_ssize_t n;
    int job_id, jn;
    long long pool_slots;
    if (!PyArg_ParseTuple(args, "OOOnOiiOOOOLOOOOOOOOOO", &obuf, &olens, &oports, &n, &oorder,
                          &job_id, &jn, &ojob, &olut, &oskeys, &osw, &pool_slots, &oregs,
                          &osums, &ogports, &omhit, &ommac, &omaddr, &ooutbuf, &ooutlens,
                          &ooutports, &oconst))
        return NULL;
    long long J[8], K[8];
    if (!PyArg_ParseTuple(ojob, "LLLLLLLL", &J[0], &J[1], &J[2], &J[3], &J[4], &J[5], &J[6],
                          &J[7]))
        return NULL;
    if (!PyArg_ParseTuple(oconst, "LLLLLLLL", &K[0], &K[1], &K[2], &K[3], &K[4], &K[5], &K[6],
                          &K[7]))
        return NULL;
    const long long slot_base = J[0], num_slots = J[1], expected = J[2], has_parent = J[3],
                    lane_bits = J[4], self_addr = J[5], token = J[7];
    const long long version = K[0], t_data = K[1], index_bits = K[2], t_result = K[3],
                    rank_all = K[4], thc_port = K[5], max_workers = K[6], ttl = K[7];
    if (!PyTuple_Check(oregs) || PyTuple_GET_SIZE(oregs) != 6) {
        PyErr_SetString(PyExc_TypeError, "regs: a tuple of 6 int64 arrays");
        return NULL;
    }
    PyObject *result = NULL;
    buf_t bb = {0}, bl = {0}, bp = {0}, bo = {0}, blut = {0}, bsk = {0}, bsw = {0}, bsums = {0},
          bg = {0}, bmh = {0}, bmm = {0}, bma = {0}, bob = {0}, bol = {0}, bop = {0};
    buf_t br[6];
    memset(br, 0, sizeof(br));
    undo_t *undo = NULL;
    Py_ssize_t nu = 0;
    if (take(obuf, &bb, 0, (Py_ssize_t)ROW_BYTES * n, "buf") < 0) goto done;
    if (take(olens, &bl, 0, 8 * n, "lens") < 0) goto done;
    if (take(oports, &bp, 0, 8 * n, "ports") < 0) goto done;
    if (oorder != Py_None && take(oorder, &bo, 0, 8 * n, "order") < 0) goto done;
    if (take(olut, &blut, 0, 256 * 8, "lut") < 0) goto done;
    if (take(oskeys, &bsk, 0, 0, "sender_keys") < 0) goto done;
    if (take(osw, &bsw, 0, bsk.v.len / 8, "sender_is_switch") < 0) goto done;
    for (int k = 0; k < 6; k++)
        if (take(PyTuple_GET_ITEM(oregs, k), &br[k], 1, 8 * pool_slots * 4, "regs") < 0)
            goto done;
    if (take(osums, &bsums, 1, 4 * COORDS_PER_PACKET * pool_slots * 4, "sums") < 0) goto done;
    if (take(ogports, &bg, 0, 0, "group") < 0) goto done;
    Py_ssize_t ng = bg.v.len / 8;
    if (take(omhit, &bmh, 0, ng, "member_hit") < 0) goto done;
    if (take(ommac, &bmm, 0, 6 * ng, "member_mac") < 0) goto done;
    if (take(omaddr, &bma, 0, 4 * ng, "member_addr") < 0) goto done;
    if (take(ooutlens, &bol, 1, 0, "out_lens") < 0) goto done;
    Py_ssize_t cap = bol.v.len / 8;
    if (take(ooutbuf, &bob, 1, (Py_ssize_t)ROW_BYTES * cap, "out_buf") < 0) goto done;
    if (take(ooutports, &bop, 1, 8 * cap, "out_ports") < 0) goto done;
    if (lane_bits != 8 && lane_bits != 16 && lane_bits != 32) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }

    const uint8_t *buf = bb.v.buf;
    const int64_t *lens = bl.v.buf, *ports = bp.v.buf, *order = bo.held ? bo.v.buf : NULL;
    const uint32_t *lut = blut.v.buf;
    const uint64_t *skeys = bsk.v.buf;
    const uint8_t *sw = bsw.v.buf;
    const Py_ssize_t nsk = bsk.v.len / 8;
    int64_t *R[6];
    for (int k = 0; k < 6; k++) R[k] = br[k].v.buf;
    int64_t *st_round = R[0], *st_state = R[1], *st_contrib = R[2], *st_nc = R[3],
            *st_cnt = R[4], *st_wb = R[5];
    uint32_t *sums = bsums.v.buf;
    const int64_t *gports = bg.v.buf;
    const uint8_t *mhit = bmh.v.buf, *mmac = bmm.v.buf;
    const uint32_t *maddr = bma.v.buf;
    uint8_t *obuf_ = bob.v.buf;
    int64_t *olens_ = bol.v.buf, *oports_ = bop.v.buf;
    const int plen = (int)(lane_bits * (COORDS_PER_PACKET / 8));
    const int lb = (int)(lane_bits / 8);

    /* 1. stateless checks of every frame (ThcValidate for this case): any miss -> Python */
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint8_t *f = buf + (size_t)j * ROW_BYTES;
        int64_t L = lens[j];
        if (L != PAYLOAD_OFFSET + INDICES_BYTES || be16(f + OFF_ETHERTYPE) != ETHERTYPE_IPV4
            || (f[OFF_VERIHL] & 0x0F) != IPV4_HEADER_BYTES / 4
            || (be16(f + OFF_FRAG) & 0x1FFF) != 0 || f[OFF_PROTO] != IP_PROTO_UDP
            || be16(f + OFF_DPORT) != (uint32_t)thc_port || f[OFF_VERSION] != version
            || f[OFF_MSG_TYPE] != t_data || f[OFF_LANE_BITS] != index_bits
            || (int)be16(f + OFF_JOB_ID) != job_id || f[OFF_RANK] >= max_workers
            || be16(f + OFF_ELEM_COUNT) > COORDS_PER_PACKET || f[OFF_SLOT_SET] > 1
            || f[OFF_SLOT_SET] != (f[OFF_ROUND + 3] & 1)
            || (f[OFF_FLAGS] & (FLAG_DEADLINE | FLAG_PEEK))
            || (long long)be32(f + OFF_TOKEN) != token) /* issue 16: the job's token */
            goto not_handled;
        uint32_t slot = be16(f + OFF_SLOT);
        if ((long long)slot >= num_slots || slot_base + (long long)slot >= pool_slots)
            goto not_handled;
        uint64_t key = ((uint64_t)jn << 49) | ((uint64_t)f[OFF_RANK] << 41)
                       | ((uint64_t)ports[j] << 32) | (uint64_t)be32(f + OFF_SRC);
        Py_ssize_t lo = 0, hi = nsk; /* searchsorted (left) */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (skeys[mid] < key) lo = mid + 1;
            else hi = mid;
        }
        if (lo >= nsk || skeys[lo] != key || sw[lo] != 0) goto not_handled;
    }

    /* 2. the slot logic, packet by packet in arrival order (undo log for the fallback) */
    undo = malloc(sizeof(undo_t) * (size_t)(n ? n : 1));
    if (!undo || grow_mark((size_t)pool_slots * 4) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    long long nout = 0, ncontrib = 0, nresults = 0;
    for (Py_ssize_t q = 0; q < n; q++) {
        Py_ssize_t j = order ? order[q] : q;
        if (j < 0 || j >= n) goto rollback;
        const uint8_t *f = buf + (size_t)j * ROW_BYTES;
        int64_t c = ((slot_base + be16(f + OFF_SLOT)) << 2) | f[OFF_SLOT_SET];
        int64_t r = be32(f + OFF_ROUND);
        int64_t bit = (int64_t)1 << f[OFF_RANK];
        /* remember the copy before its first change in this call */
        if (mark[c] < 0) {
            mark[c] = nu;
            undo[nu].cell = c;
            for (int k = 0; k < 6; k++) undo[nu].reg[k] = R[k][c];
            memcpy(undo[nu].sums, sums + (size_t)c * COORDS_PER_PACKET, sizeof(undo[nu].sums));
            nu++;
        }
        int64_t st = st_state[c];
        int fresh = st == ST_EMPTY;
        if (!fresh && st_round[c] != r) {
            if ((r - st_round[c]) & 0x80000000LL) goto rollback; /* stale */
            if (((r - st_round[c]) & 0xFFFFFFFFLL) >= ROUND_WINDOW
                && !(f[OFF_FLAGS] & FLAG_START))
                goto rollback; /* far ahead (issue 16, H2): AHEAD in the Python path */
            fresh = 1;
        }
        int64_t cb, nc, cnt, wb;
        if (fresh) {
            cb = nc = cnt = wb = 0;
            st = ST_COLLECTING;
        } else {
            cb = st_contrib[c]; nc = st_nc[c]; cnt = st_cnt[c]; wb = st_wb[c];
        }
        if ((cb & bit) || st != ST_COLLECTING) goto rollback; /* duplicate, resent, stale */
        cnt += 1;
        wb |= bit;
        cb |= bit;
        nc += 1;
        uint32_t *s = sums + (size_t)c * COORDS_PER_PACKET;
        const uint8_t *p = f + PAYLOAD_OFFSET;
        if (fresh) {
            for (int k = 0; k < INDICES_BYTES; k++) {
                const uint32_t *pair = lut + 2 * p[k];
                s[2 * k] = pair[0];
                s[2 * k + 1] = pair[1];
            }
            st_round[c] = r;
        } else {
            for (int k = 0; k < INDICES_BYTES; k++) {
                const uint32_t *pair = lut + 2 * p[k];
                s[2 * k] += pair[0];
                s[2 * k + 1] += pair[1];
            }
        }
        ncontrib++;
        if (nc >= expected) {
            if (has_parent) goto rollback; /* partial up: the Python path */
            st = ST_FINAL;
            nresults++;
            /* the result, once per replica (Pipeline._emit, OUT_MULTICAST) */
            if (nout + ng > cap) goto rollback;
            for (Py_ssize_t g = 0; g < ng; g++) {
                uint8_t *o = obuf_ + (size_t)nout * ROW_BYTES;
                memcpy(o, f, PAYLOAD_OFFSET);
                o[OFF_COUNT] = (uint8_t)cnt;
                put32(o + OFF_BITMAP, (uint32_t)wb);
                put16(o + OFF_SPORT, (uint32_t)thc_port);
                put16(o + OFF_UDP_CSUM, 0);
                o[OFF_LANE_BITS] = (uint8_t)lane_bits;
                o[OFF_TTL] = (uint8_t)ttl;
                o[OFF_MSG_TYPE] = (uint8_t)t_result;
                o[OFF_FLAGS] = 0;
                o[OFF_RANK] = (uint8_t)rank_all;
                put32(o + OFF_SRC, (uint32_t)self_addr);
                put16(o + OFF_UDP_LEN, (uint32_t)(UDP_HEADER_BYTES + THC_HEADER_BYTES + plen));
                put16(o + OFF_IP_LEN, (uint32_t)(UDP_HEADER_BYTES + THC_HEADER_BYTES + plen
                                                + IPV4_HEADER_BYTES));
                if (mhit[g]) {
                    memcpy(o, mmac + 6 * g, 6);
                    put32(o + OFF_DST, maddr[g]);
                }
                put16(o + OFF_IP_CSUM, 0);
                uint32_t cs = 0;
                for (int w = 0; w < IPV4_HEADER_BYTES / 2; w++) cs += be16(o + IPV4_OFFSET + 2 * w);
                cs = (cs & 0xFFFF) + (cs >> 16);
                cs = (cs & 0xFFFF) + (cs >> 16);
                put16(o + OFF_IP_CSUM, ~cs & 0xFFFF);
                uint8_t *d = o + PAYLOAD_OFFSET;
                if (lb == 1) {
                    for (int k = 0; k < COORDS_PER_PACKET; k++) d[k] = (uint8_t)s[k];
                } else if (lb == 2) {
                    for (int k = 0; k < COORDS_PER_PACKET; k++) put16(d + 2 * k, s[k] & 0xFFFF);
                } else {
                    for (int k = 0; k < COORDS_PER_PACKET; k++) put32(d + 4 * k, s[k]);
                }
                olens_[nout] = PAYLOAD_OFFSET + plen;
                oports_[nout] = gports[g];
                nout++;
            }
        }
        st_state[c] = st;
        st_contrib[c] = cb;
        st_nc[c] = nc;
        st_cnt[c] = cnt;
        st_wb[c] = wb;
    }
    result = Py_BuildValue("(LLL)", nout, ncontrib, nresults);
    goto done;
rollback:
    for (Py_ssize_t u = nu - 1; u >= 0; u--) {
        int64_t c = undo[u].cell;
        for (int k = 0; k < 6; k++) R[k][c] = undo[u].reg[k];
        memcpy(sums + (size_t)c * COORDS_PER_PACKET, undo[u].sums, sizeof(undo[u].sums));
    }
not_handled:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t u = 0; u < nu; u++) mark[undo[u].cell] = -1;
    free(undo);
    {
        buf_t *all[] = {&bb, &bl, &bp, &bo, &blut, &bsk, &bsw, &bsums, &bg, &bmh, &bmm, &bma,
                        &bob, &bol, &bop, &br[0], &br[1], &br[2], &br[3], &br[4], &br[5]};
        for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
            if (all[k]->held) PyBuffer_Release(&all[k]->v);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"process", py_process, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_fastpath",
                                    "The software target's common case in C (pipeline.py).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastpath(void) {
    methods[0].ml_doc = doc;
    PyObject *m = PyModule_Create(&moddef);
    if (m && PyModule_AddStringConstant(m, "LAYOUT_HASH", NETCO_LAYOUT_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
