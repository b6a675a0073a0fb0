/* The slot window's exchange loop in C (host/transport/slots.py is the reference).
 *
 * One call runs one whole exchange of one worker: fill the window, receive results with
 * recvmmsg (polling only when nothing waits), copy each result's lanes into the caller's
 * output array, build the slot's next packet from a header template straight into the
 * sendmmsg ring, and run the retransmission timers -- with exactly the semantics of
 * SlotWindow.exchange: per-slot rounds, stray/duplicate filtering, Karn's rule, the RTO
 * estimator with gains divided by the window, exponential backoff kept until a valid sample,
 * drain-before-judging, DEADLINE (partial) and the exact policy's give-up, which is handed back
 * to Python (it sends a PEEK and raises SlotTimeoutError there).
 *
 * Endpoints: "udp" (an unconnected UDP socket; every datagram goes to one sockaddr) and "raw"
 * (AF_PACKET: every frame is prefix + datagram, received frames are filtered like
 * RawEndpoint.recv_many does). The GIL is released for the whole loop (workers may be threads
 * of one process); a signal that interrupts poll is checked with the GIL held again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* UDP segmentation offload (Linux >= 4.18) and receive coalescing (>= 5.0): the socket
 * options and control message types of <linux/udp.h>. */
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#define GSO_MAX_SEGS 64     /* datagrams per UDP_SEGMENT message (the kernel takes <= 64) */
#define GRO_ROW 65536       /* a coalesced train: at most 64 KB */
#define GRO_MSGS 32         /* trains per recvmmsg */
#define GSO_CTL 64

#define ETH_HDR 14
#define IP_HDR 20
#define UDP_HDR 8
#define RAW_HDR (ETH_HDR + IP_HDR + UDP_HDR)

/* Header fields the loop writes and reads: byte offset and width (1, 2 or 4), big endian. */
enum { F_SLOT, F_ROUND, F_SET, F_CNT, F_OFF, F_FLAGS, F_TYPE, F_JOB, F_COUNT, F_BITMAP, NF };

typedef struct {
    int off[NF], width[NF];
} fields_t;

static inline uint32_t get_be(const uint8_t *p, int width) {
    switch (width) {
    case 1: return p[0];
    case 2: return ((uint32_t)p[0] << 8) | p[1];
    default: return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    }
}

static inline void put_be(uint8_t *p, int width, uint32_t v) {
    switch (width) {
    case 1: p[0] = (uint8_t)v; break;
    case 2: p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; break;
    default:
        p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
    }
}

static inline double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Everything one exchange needs, allocated once per call. */
typedef struct {
    /* endpoint */
    int fd, raw;
    struct sockaddr_storage dest;
    socklen_t destlen;
    const uint8_t *prefix; /* raw: Ethernet/IPv4/UDP header of a frame of this size */
    uint32_t my_ip;        /* raw: keep frames to this address (network order bytes as u32) */
    int thc_port;
    int batch;
    /* packets */
    const uint8_t *hdr_tmpl;
    int hdr_bytes;
    fields_t f;
    const uint8_t *payload;
    Py_ssize_t nb, n;
    const int64_t *elem_counts, *offsets, *base;
    int W, nbuf;
    /* results */
    uint32_t *out;
    int lanes, lane_bytes;
    int32_t *out_cnt;
    int rtype, job_id, world;
    /* config */
    double rto_min, max_rto, give_up, deadline;
    int partial;
    /* estimator */
    int have_srtt;
    double srtt, rttvar, backoff;
    /* per slot */
    int64_t *out_pkt;
    uint32_t *out_round;
    double *first_sent, *rto, *due;
    char *retried, *asked_deadline;
    /* rings */
    int frame; /* bytes per tx frame */
    int tx_cap, tx_n;
    uint8_t *txbuf;
    struct mmsghdr *txh;
    struct iovec *txv;
    int rx_row;
    uint8_t *rxbuf;
    struct mmsghdr *rxh;
    struct iovec *rxv;
    /* UDP GSO/GRO: gso > 1 sends up to gso datagrams per message and receives coalesced
     * trains (UDP_GRO set on the socket for the exchange); 0 or 1: one datagram per message */
    int gso, rx_msgs, dg_cap;
    struct mmsghdr *gh;
    uint8_t *gctl, *rxctl;
    /* stats */
    long long packets, retransmits, deadlines, stray, partial_results;
    long long min_count; /* -1: none yet */
    uint64_t missing;
    /* exit */
    int err;        /* errno of a failed system call, or -1: short result, -2: signal */
    int gave_up;    /* slot that gave up, or -1 */
    int64_t gave_up_pkt;
    uint32_t gave_up_round;
} loop_t;

static double cur_rto(const loop_t *L) {
    double base = L->rto_min;
    if (L->have_srtt) {
        double b = L->srtt + 4 * L->rttvar;
        base = b > L->rto_min ? b : L->rto_min;
    }
    double r = base * L->backoff;
    return r < L->max_rto ? r : L->max_rto;
}

/* Group the tx ring into UDP_SEGMENT messages of up to gso datagrams (all frames of a ring
 * have the same size and destination); returns the number of messages in L->gh. */
static int gso_messages(loop_t *L) {
    int m = 0;
    for (int k = 0; k < L->tx_n; k += L->gso, m++) {
        int c = L->tx_n - k < L->gso ? L->tx_n - k : L->gso;
        struct msghdr *h = &L->gh[m].msg_hdr;
        memset(h, 0, sizeof(*h));
        h->msg_name = &L->dest;
        h->msg_namelen = L->destlen;
        h->msg_iov = &L->txv[k];
        h->msg_iovlen = (size_t)c;
        if (c > 1) {
            h->msg_control = L->gctl + (size_t)m * GSO_CTL;
            h->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
            struct cmsghdr *cm = CMSG_FIRSTHDR(h);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t seg = (uint16_t)L->frame;
            memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
        }
    }
    return m;
}

/* Flush the tx ring; waits on a full buffer like _MsgRing.send. 0 or -1 (L->err set). */
static int flush_tx(loop_t *L) {
    int k = 0;
    struct mmsghdr *msgs = L->txh;
    int n_msgs = L->tx_n;
    if (L->gso > 1) {
        msgs = L->gh;
        n_msgs = gso_messages(L);
    }
    while (k < n_msgs) {
        int r = sendmmsg(L->fd, msgs + k, (unsigned)(n_msgs - k), 0);
        if (r >= 0) {
            k += r;
            continue;
        }
        int e = errno;
        struct pollfd p = {L->fd, POLLOUT, 0};
        if (e == EAGAIN || e == EINTR) {
            poll(&p, 1, 10);
        } else if (e == ENOBUFS) {
            poll(&p, 1, 1);
        } else {
            L->err = e;
            return -1;
        }
    }
    L->packets += L->tx_n;
    L->tx_n = 0;
    return 0;
}

/* The datagram size of a coalesced train (UDP_GRO control message), else len. */
static int gro_segment(struct msghdr *m, int len) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(c), sizeof(v));
            return v > 0 ? v : len;
        }
    return len;
}

/* recv_batch with UDP_GRO: every message a train of datagrams of one size (the last may be
 * shorter), split into dg/dl. *msgs: messages received (to tell a full batch). */
static int recv_gro(loop_t *L, const uint8_t **dg, int *dl, int *msgs) {
    for (int j = 0; j < L->rx_msgs; j++) {
        L->rxh[j].msg_hdr.msg_flags = 0;
        L->rxh[j].msg_hdr.msg_control = L->rxctl + (size_t)j * GSO_CTL;
        L->rxh[j].msg_hdr.msg_controllen = GSO_CTL;
    }
    int k = recvmmsg(L->fd, L->rxh, (unsigned)L->rx_msgs, MSG_DONTWAIT, NULL);
    *msgs = k > 0 ? k : 0;
    if (k < 0) {
        if (errno == EAGAIN || errno == EINTR) return 0;
        L->err = errno;
        return -1;
    }
    int kept = 0;
    for (int j = 0; j < k; j++) {
        const uint8_t *p = L->rxbuf + (size_t)j * L->rx_row;
        int len = (int)L->rxh[j].msg_len;
        int seg = gro_segment(&L->rxh[j].msg_hdr, len);
        for (int o = 0; o < len && kept < L->dg_cap; o += seg) {
            dg[kept] = p + o;
            dl[kept++] = len - o < seg ? len - o : seg;
        }
    }
    return kept;
}

/* Append packet i on slot s with flags to the tx ring (flushing a full ring first). */
static int add_packet(loop_t *L, int s, int64_t i, uint32_t flags) {
    if (L->tx_n == L->tx_cap && flush_tx(L) < 0) return -1;
    uint8_t *fr = L->txbuf + (size_t)L->tx_n * L->frame;
    uint8_t *h = fr;
    if (L->raw) {
        memcpy(fr, L->prefix, RAW_HDR);
        h = fr + RAW_HDR;
    }
    int64_t r = L->base[s] + i / L->W;
    memcpy(h, L->hdr_tmpl, L->hdr_bytes);
    const fields_t *f = &L->f;
    put_be(h + f->off[F_SLOT], f->width[F_SLOT], (uint32_t)s);
    put_be(h + f->off[F_ROUND], f->width[F_ROUND], (uint32_t)(r & 0xFFFFFFFF));
    put_be(h + f->off[F_SET], f->width[F_SET], (uint32_t)(r & 1));
    put_be(h + f->off[F_CNT], f->width[F_CNT], (uint32_t)L->elem_counts[i]);
    put_be(h + f->off[F_OFF], f->width[F_OFF], (uint32_t)L->offsets[i]);
    put_be(h + f->off[F_FLAGS], f->width[F_FLAGS], flags);
    memcpy(h + L->hdr_bytes, L->payload + (size_t)i * L->nb, (size_t)L->nb);
    L->tx_n++;
    return 0;
}

/* Make packet i the outstanding one of slot s (sent at now, timeout r) and queue it. */
static int launch(loop_t *L, int s, int64_t i, double now, double r) {
    L->out_pkt[s] = i;
    L->out_round[s] = (uint32_t)((L->base[s] + i / L->W) & 0xFFFFFFFF);
    L->first_sent[s] = now;
    L->rto[s] = r;
    L->retried[s] = 0;
    L->asked_deadline[s] = 0;
    L->due[s] = now + r;
    return add_packet(L, s, i, 0);
}

/* Receive what waits (no blocking); returns datagrams kept, their starts/lengths in dg/dl. */
static int recv_batch(loop_t *L, const uint8_t **dg, int *dl, int *msgs) {
    if (L->gso > 1) return recv_gro(L, dg, dl, msgs);
    for (int j = 0; j < L->batch; j++) L->rxh[j].msg_hdr.msg_flags = 0;
    int k = recvmmsg(L->fd, L->rxh, (unsigned)L->batch, MSG_DONTWAIT, NULL);
    *msgs = k > 0 ? k : 0;
    if (k < 0) {
        if (errno == EAGAIN || errno == EINTR) return 0;
        L->err = errno;
        return -1;
    }
    int kept = 0;
    for (int j = 0; j < k; j++) {
        const uint8_t *p = L->rxbuf + (size_t)j * L->rx_row;
        int len = (int)L->rxh[j].msg_len;
        if (!L->raw) {
            dg[kept] = p;
            dl[kept++] = len;
            continue;
        }
        if (len < RAW_HDR) continue;
        uint32_t etype = get_be(p + 12, 2), dport = get_be(p + 36, 2), ulen = get_be(p + 38, 2);
        uint32_t dst;
        memcpy(&dst, p + 30, 4);
        if (etype != 0x0800 || p[14] != 0x45 || p[23] != 17 || (int)dport != L->thc_port
            || dst != L->my_ip)
            continue;
        int end = ETH_HDR + IP_HDR + (int)ulen;
        if (end > len) end = len;
        dg[kept] = p + RAW_HDR;
        dl[kept++] = end > RAW_HDR ? end - RAW_HDR : 0;
    }
    return kept;
}

typedef struct {
    double due;
    int slot;
} expired_t;

static int cmp_expired(const void *a, const void *b) {
    const expired_t *x = a, *y = b;
    if (x->due < y->due) return -1;
    if (x->due > y->due) return 1;
    return x->slot - y->slot;
}

/* The exchange; 0 done, 1 gave up (L->gave_up), -1 error (L->err). Runs without the GIL. */
static int run_loop(loop_t *L, PyThreadState **ts) {
    const fields_t *f = &L->f;
    const int W = L->W;
    const int64_t n = L->n;
    const double gain_srtt = 0.125 / L->nbuf, gain_var = 0.25 / L->nbuf;
    int64_t done = 0;
    const uint8_t **dg = malloc(sizeof(*dg) * (size_t)L->dg_cap);
    int *dl = malloc(sizeof(*dl) * (size_t)L->dg_cap);
    int msgs = 0;
    expired_t *exp = malloc(sizeof(*exp) * (size_t)W);
    int rc = 0;
    if (!dg || !dl || !exp) {
        L->err = ENOMEM;
        rc = -1;
        goto out;
    }
    double now = mono();
    double r0 = cur_rto(L);
    if (!L->have_srtt) {
        double m = L->nbuf / 64.0;
        r0 = r0 * (m > 1.0 ? m : 1.0);
        if (r0 > L->max_rto) r0 = L->max_rto;
    }
    for (int s = 0; s < L->nbuf; s++)
        if (launch(L, s, s, now, r0) < 0) { rc = -1; goto out; }
    if (flush_tx(L) < 0) { rc = -1; goto out; }
    const size_t need = (size_t)L->hdr_bytes + (size_t)L->lanes * L->lane_bytes;
    while (done < n) {
        /* wait for the earliest live timer */
        double first = INFINITY;
        for (int s = 0; s < W; s++)
            if (L->out_pkt[s] >= 0 && L->due[s] < first) first = L->due[s];
        double wait = isinf(first) ? 0.05 : first - mono();
        if (wait < 0) wait = 0;
        if (wait > 0.05) wait = 0.05;
        int k = recv_batch(L, dg, dl, &msgs);
        if (k < 0) { rc = -1; goto out; }
        if (k == 0) {
            struct pollfd p = {L->fd, POLLIN, 0};
            int ms = (int)ceil(wait * 1000);
            int pr = poll(&p, 1, ms);
            if (pr < 0 && errno == EINTR) {
                PyEval_RestoreThread(*ts);
                int sig = PyErr_CheckSignals();
                *ts = PyEval_SaveThread();
                if (sig < 0) { L->err = -2; rc = -1; goto out; }
            }
            if (pr > 0) {
                k = recv_batch(L, dg, dl, &msgs);
                if (k < 0) { rc = -1; goto out; }
            }
        }
        now = mono();
        const double rto_now = cur_rto(L);
        double srtt = L->srtt, rttvar = L->rttvar;
        int have = L->have_srtt, sampled = 0;
        for (int j = 0; j < k; j++) {
            const uint8_t *h = dg[j];
            if (dl[j] < L->hdr_bytes) {
                L->stray++;
                continue;
            }
            uint32_t s = get_be(h + f->off[F_SLOT], f->width[F_SLOT]);
            if (s >= (uint32_t)W || (int)get_be(h + f->off[F_TYPE], f->width[F_TYPE]) != L->rtype
                || (int)get_be(h + f->off[F_JOB], f->width[F_JOB]) != L->job_id
                || L->out_pkt[s] < 0
                || get_be(h + f->off[F_ROUND], f->width[F_ROUND]) != L->out_round[s]
                || (get_be(h + f->off[F_FLAGS], f->width[F_FLAGS]) & 0x08 /* PEEK */)) {
                L->stray++;
                continue;
            }
            int64_t i = L->out_pkt[s];
            uint32_t cnt = get_be(h + f->off[F_COUNT], f->width[F_COUNT]);
            /* on_result: the lanes (big endian) into out[i*lanes ..], the count */
            if ((size_t)dl[j] < need) {
                L->err = -1;
                rc = -1;
                goto out;
            }
            const uint8_t *pl = h + L->hdr_bytes;
            uint32_t *o = L->out + (size_t)i * L->lanes;
            if (L->lane_bytes == 1) {
                for (int q = 0; q < L->lanes; q++) o[q] = pl[q];
            } else if (L->lane_bytes == 2) {
                for (int q = 0; q < L->lanes; q++) o[q] = ((uint32_t)pl[2 * q] << 8) | pl[2 * q + 1];
            } else {
                for (int q = 0; q < L->lanes; q++) o[q] = get_be(pl + 4 * q, 4);
            }
            if (L->out_cnt) L->out_cnt[i] = (int32_t)cnt;
            if (!L->retried[s]) { /* Karn: no samples from retransmitted packets */
                double rtt = now - L->first_sent[s];
                if (!have) {
                    srtt = rtt;
                    rttvar = rtt / 2;
                    have = 1;
                } else {
                    rttvar = (1 - gain_var) * rttvar + gain_var * fabs(srtt - rtt);
                    srtt = (1 - gain_srtt) * srtt + gain_srtt * rtt;
                }
                sampled = 1;
            }
            if ((int)cnt < L->world) {
                L->partial_results++;
                uint32_t bm = get_be(h + f->off[F_BITMAP], f->width[F_BITMAP]);
                for (int r = 0; r < L->world; r++)
                    if (!((bm >> r) & 1)) L->missing |= (uint64_t)1 << r;
            }
            if (L->min_count < 0 || (long long)cnt < L->min_count) L->min_count = cnt;
            done++;
            int64_t nxt = i + W;
            if (nxt < n) {
                if (launch(L, (int)s, nxt, now, rto_now) < 0) { rc = -1; goto out; }
            } else {
                L->out_pkt[s] = -1;
            }
        }
        if (sampled) {
            L->srtt = srtt;
            L->rttvar = rttvar;
            L->have_srtt = 1;
            L->backoff = 1.0;
        }
        if (msgs >= (L->gso > 1 ? L->rx_msgs : L->batch)) {
            /* more results may wait: read them before judging any timeout */
            if (L->tx_n && flush_tx(L) < 0) { rc = -1; goto out; }
            continue;
        }
        int ne = 0;
        for (int s = 0; s < W; s++)
            if (L->out_pkt[s] >= 0 && L->due[s] <= now) {
                exp[ne].due = L->due[s];
                exp[ne++].slot = s;
            }
        if (ne > 1) qsort(exp, (size_t)ne, sizeof(*exp), cmp_expired);
        for (int e = 0; e < ne; e++) {
            int s = exp[e].slot;
            int64_t i = L->out_pkt[s];
            uint32_t flags = 0x01; /* RETX */
            if (L->partial && now - L->first_sent[s] >= L->deadline) {
                flags |= 0x04; /* DEADLINE */
                if (!L->asked_deadline[s]) {
                    L->deadlines++;
                    L->asked_deadline[s] = 1;
                }
            } else if (!L->partial && now - L->first_sent[s] >= L->give_up) {
                L->gave_up = s;
                L->gave_up_pkt = i;
                L->gave_up_round = L->out_round[s];
                rc = 1;
                goto out;
            }
            if (add_packet(L, s, i, flags) < 0) { rc = -1; goto out; }
            if (!L->retried[s]) {
                L->backoff *= 2;
                if (L->backoff > 64.0) L->backoff = 64.0;
            }
            L->retried[s] = 1;
            L->retransmits++;
            L->rto[s] *= 2;
            if (L->rto[s] > L->max_rto) L->rto[s] = L->max_rto;
            L->due[s] = now + L->rto[s];
        }
        if (L->tx_n && flush_tx(L) < 0) { rc = -1; goto out; }
    }
out:
    free(dg);
    free(dl);
    free(exp);
    return rc;
}

static int get_buf(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t min_bytes,
                   const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s buffer", name,
                     writable ? " writable" : "");
        return -1;
    }
    if (view->len < min_bytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", name, view->len, min_bytes);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static const char *run_doc =
    "run(fd, raw, dest, prefix, my_ip, thc_port, batch, header, fields, payload, nb, n,\n"
    "    elem_counts, offsets, base, W, out, lanes, lane_bytes, out_cnt, rtype, job_id, world,\n"
    "    rto, max_rto, give_up, deadline, partial, srtt, rttvar, backoff, gso=0)\n"
    "-> (status, srtt, rttvar, backoff, packets, retransmits, deadlines, stray, partial_results,\n"
    "    min_count, missing_bitmap, gave_up_slot, gave_up_packet, gave_up_round)\n\n"
    "One exchange of SlotWindow (host/transport/slots.py) in C. srtt < 0: none yet.\n"
    "status 0: done; 1: the exact policy gave up on a slot (the caller asks and raises).\n"
    "gso > 1 (UDP only): up to gso datagrams per UDP_SEGMENT message, results received as\n"
    "UDP_GRO trains (the option is set on the socket for the call and cleared after it).";

static PyObject *py_run(PyObject *self, PyObject *args) {
    int fd, raw, thc_port, batch, W, lanes, lane_bytes, rtype, job_id, world, partial;
    Py_ssize_t nb, n;
    PyObject *odest, *oprefix, *omyip, *oheader, *ofields, *opay, *oelem, *ooff, *obase, *oout,
        *ocnt;
    double rto, max_rto, give_up, deadline, srtt, rttvar, backoff;
    int gso = 0;
    if (!PyArg_ParseTuple(args, "iiOOOiiOOOnnOOOiOiiOiiiddddpddd|i", &fd, &raw, &odest, &oprefix,
                          &omyip, &thc_port, &batch, &oheader, &ofields, &opay, &nb, &n, &oelem,
                          &ooff, &obase, &W, &oout, &lanes, &lane_bytes, &ocnt, &rtype, &job_id,
                          &world, &rto, &max_rto, &give_up, &deadline, &partial, &srtt, &rttvar,
                          &backoff, &gso))
        return NULL;
    if (W < 1 || n < 1 || batch < 1 || nb < 0 || world < 1 || world > 64
        || (lane_bytes != 1 && lane_bytes != 2 && lane_bytes != 4) || lanes < 0) {
        PyErr_SetString(PyExc_ValueError, "bad sizes");
        return NULL;
    }
    loop_t L;
    memset(&L, 0, sizeof(L));
    Py_buffer bdest = {0}, bprefix = {0}, bmyip = {0}, bheader = {0}, bpay = {0}, belem = {0},
              boff = {0}, bbase = {0}, bout = {0}, bcnt = {0};
    PyObject *result = NULL;
    int have_cnt = ocnt != Py_None;
    if (get_buf(oheader, &bheader, 0, 1, "header") < 0) goto done;
    L.hdr_bytes = (int)bheader.len;
    if (get_buf(opay, &bpay, 0, nb * n, "payload") < 0) goto done;
    if (get_buf(oelem, &belem, 0, 8 * n, "elem_counts") < 0) goto done;
    if (get_buf(ooff, &boff, 0, 8 * n, "offsets") < 0) goto done;
    if (get_buf(obase, &bbase, 0, 8 * (Py_ssize_t)W, "base") < 0) goto done;
    if (get_buf(oout, &bout, 1, 4 * (Py_ssize_t)lanes * n, "out") < 0) goto done;
    if (have_cnt && get_buf(ocnt, &bcnt, 1, 4 * n, "out_cnt") < 0) goto done;
    if (raw) {
        if (get_buf(oprefix, &bprefix, 0, RAW_HDR, "prefix") < 0) goto done;
        if (get_buf(omyip, &bmyip, 0, 4, "my_ip") < 0) goto done;
        memcpy(&L.my_ip, bmyip.buf, 4);
        L.prefix = bprefix.buf;
    } else {
        if (get_buf(odest, &bdest, 0, 1, "dest") < 0) goto done;
        if (bdest.len > (Py_ssize_t)sizeof(L.dest)) {
            PyErr_SetString(PyExc_ValueError, "dest: sockaddr too long");
            goto done;
        }
        memcpy(&L.dest, bdest.buf, (size_t)bdest.len);
        L.destlen = (socklen_t)bdest.len;
    }
    if (!PyTuple_Check(ofields) || PyTuple_GET_SIZE(ofields) != 2 * NF) {
        PyErr_SetString(PyExc_ValueError, "fields: a tuple of (offset, width) pairs, flattened");
        goto done;
    }
    for (int j = 0; j < NF; j++) {
        L.f.off[j] = (int)PyLong_AsLong(PyTuple_GET_ITEM(ofields, 2 * j));
        L.f.width[j] = (int)PyLong_AsLong(PyTuple_GET_ITEM(ofields, 2 * j + 1));
        if (PyErr_Occurred()) goto done;
        if ((L.f.width[j] != 1 && L.f.width[j] != 2 && L.f.width[j] != 4) || L.f.off[j] < 0
            || L.f.off[j] + L.f.width[j] > L.hdr_bytes) {
            PyErr_SetString(PyExc_ValueError, "fields: a field outside the header");
            goto done;
        }
    }
    L.fd = fd;
    L.raw = raw;
    L.thc_port = thc_port;
    L.batch = batch;
    L.hdr_tmpl = bheader.buf;
    L.payload = bpay.buf;
    L.nb = nb;
    L.n = n;
    L.elem_counts = belem.buf;
    L.offsets = boff.buf;
    L.base = bbase.buf;
    L.W = W;
    L.nbuf = (int)(n < W ? n : W);
    L.out = bout.buf;
    L.lanes = lanes;
    L.lane_bytes = lane_bytes;
    L.out_cnt = have_cnt ? bcnt.buf : NULL;
    L.rtype = rtype;
    L.job_id = job_id;
    L.world = world;
    L.rto_min = rto;
    L.max_rto = max_rto;
    L.give_up = give_up;
    L.deadline = deadline;
    L.partial = partial;
    L.have_srtt = srtt >= 0;
    L.srtt = L.have_srtt ? srtt : 0.0;
    L.rttvar = rttvar;
    L.backoff = backoff;
    L.min_count = -1;
    L.gave_up = -1;
    L.frame = (raw ? RAW_HDR : 0) + L.hdr_bytes + (int)nb;
    L.tx_cap = batch > W ? batch : W;
    L.gso = raw ? 0 : (gso > GSO_MAX_SEGS ? GSO_MAX_SEGS : gso);
    if (L.gso > 1 && (size_t)L.gso * (size_t)L.frame > 65000) L.gso = 65000 / L.frame;
    L.rx_row = L.gso > 1 ? GRO_ROW : 2048 + RAW_HDR;
    L.rx_msgs = L.gso > 1 ? GRO_MSGS : batch;
    L.dg_cap = L.gso > 1 ? GRO_MSGS * 2 * GSO_MAX_SEGS : batch;
    L.out_pkt = malloc(sizeof(int64_t) * (size_t)W);
    L.out_round = calloc((size_t)W, sizeof(uint32_t));
    L.first_sent = calloc((size_t)W, sizeof(double));
    L.rto = calloc((size_t)W, sizeof(double));
    L.due = calloc((size_t)W, sizeof(double));
    L.retried = calloc((size_t)W, 1);
    L.asked_deadline = calloc((size_t)W, 1);
    L.txbuf = malloc((size_t)L.tx_cap * (size_t)L.frame);
    L.txh = calloc((size_t)L.tx_cap, sizeof(struct mmsghdr));
    L.txv = calloc((size_t)L.tx_cap, sizeof(struct iovec));
    L.rxbuf = malloc((size_t)L.rx_msgs * (size_t)L.rx_row);
    L.rxh = calloc((size_t)L.rx_msgs, sizeof(struct mmsghdr));
    L.rxv = calloc((size_t)L.rx_msgs, sizeof(struct iovec));
    if (L.gso > 1) {
        L.gh = calloc((size_t)L.tx_cap, sizeof(struct mmsghdr));
        L.gctl = calloc((size_t)L.tx_cap, GSO_CTL);
        L.rxctl = calloc((size_t)L.rx_msgs, GSO_CTL);
        if (!L.gh || !L.gctl || !L.rxctl) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (!L.out_pkt || !L.out_round || !L.first_sent || !L.rto || !L.due || !L.retried
        || !L.asked_deadline || !L.txbuf || !L.txh || !L.txv || !L.rxbuf || !L.rxh || !L.rxv) {
        PyErr_NoMemory();
        goto done;
    }
    for (int j = 0; j < W; j++) L.out_pkt[j] = -1;
    for (int j = 0; j < L.tx_cap; j++) {
        L.txv[j].iov_base = L.txbuf + (size_t)j * L.frame;
        L.txv[j].iov_len = (size_t)L.frame;
        L.txh[j].msg_hdr.msg_iov = &L.txv[j];
        L.txh[j].msg_hdr.msg_iovlen = 1;
        if (!raw) {
            L.txh[j].msg_hdr.msg_name = &L.dest;
            L.txh[j].msg_hdr.msg_namelen = L.destlen;
        }
    }
    for (int j = 0; j < L.rx_msgs; j++) {
        L.rxv[j].iov_base = L.rxbuf + (size_t)j * L.rx_row;
        L.rxv[j].iov_len = (size_t)L.rx_row;
        L.rxh[j].msg_hdr.msg_iov = &L.rxv[j];
        L.rxh[j].msg_hdr.msg_iovlen = 1;
    }
    int rc, on = 1, off = 0;
    if (L.gso > 1 && setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on)) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    {
        PyThreadState *ts = PyEval_SaveThread();
        rc = run_loop(&L, &ts);
        PyEval_RestoreThread(ts);
    }
    if (L.gso > 1) setsockopt(fd, SOL_UDP, UDP_GRO, &off, sizeof(off));
    if (rc < 0) {
        if (L.err == -2) {
            /* the signal handler's exception is set */
        } else if (L.err == -1) {
            PyErr_SetString(PyExc_ValueError, "a result datagram is shorter than its lanes");
        } else {
            errno = L.err;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        goto done;
    }
    result = Py_BuildValue("(idddLLLLLLKiLk)", rc, L.have_srtt ? L.srtt : -1.0, L.rttvar,
                           L.backoff, L.packets, L.retransmits, L.deadlines, L.stray,
                           L.partial_results, L.min_count, (unsigned long long)L.missing,
                           L.gave_up, (long long)L.gave_up_pkt, (unsigned long)L.gave_up_round);
done:
    free(L.out_pkt);
    free(L.out_round);
    free(L.first_sent);
    free(L.rto);
    free(L.due);
    free(L.retried);
    free(L.asked_deadline);
    free(L.txbuf);
    free(L.txh);
    free(L.txv);
    free(L.rxbuf);
    free(L.rxh);
    free(L.rxv);
    free(L.gh);
    free(L.gctl);
    free(L.rxctl);
    if (bdest.obj) PyBuffer_Release(&bdest);
    if (bprefix.obj) PyBuffer_Release(&bprefix);
    if (bmyip.obj) PyBuffer_Release(&bmyip);
    if (bheader.obj) PyBuffer_Release(&bheader);
    if (bpay.obj) PyBuffer_Release(&bpay);
    if (belem.obj) PyBuffer_Release(&belem);
    if (boff.obj) PyBuffer_Release(&boff);
    if (bbase.obj) PyBuffer_Release(&bbase);
    if (bout.obj) PyBuffer_Release(&bout);
    if (bcnt.obj) PyBuffer_Release(&bcnt);
    return result;
}

static PyMethodDef methods[] = {
    {"run", py_run, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_slotloop",
                                    "The slot window's exchange loop in C (slots.py).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__slotloop(void) {
    methods[0].ml_doc = run_doc;
    return PyModule_Create(&moddef);
}
