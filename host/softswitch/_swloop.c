/* The software switch's data plane loop in C (SoftSwitch.run, host/softswitch/switch.py).
 *
 * loop() runs batch after batch with the GIL released:
 *
 *   receive   poll() the ports, recvmmsg from each ready one into the rows of the switch's
 *             receive buffer (UDP ports with UDP_GRO: coalesced trains split into one datagram
 *             per row); a UDP datagram gets its Ethernet/IPv4/UDP header from the port's
 *             template, sender and bound address (as SoftSwitch._udp_rx);
 *   process   fp_batch (_fastpath.c) on the batch, in arrival order when it came from several
 *             ports (SO_TIMESTAMPNS);
 *   learn     the UDP reply port of every sender of the batch (all rows are accepted when
 *             fp_batch takes a batch; as SoftSwitch._learn);
 *   send      the outputs grouped by egress port, sendmmsg with UDP_SEGMENT runs (as
 *             SoftSwitch._send and GsoSender), on a second thread while the next batch is
 *             received and processed (double-buffered outputs; the aggregation state has one
 *             owner, the loop thread, so the hot path takes no lock).
 *
 * It returns to Python on a control event (stop, a configuration change: the ctl flags), every
 * timeout_ms (so that Python's signal handlers run: the loop holds no GIL to run them) or
 * with a batch that fp_batch does not take, left received in the receive buffer (rows, lengths,
 * ingress ports, senders, receive times) for Pipeline.process, the reference; its outputs are
 * sent first, so frames leave in batch order. A batch that fp_batch takes once the frames the
 * reference drops before any state are set aside (partition_rejected: junk, forged tokens,
 * unknown jobs) is processed here and only those frames go to Python. Counters are added as it runs: the job's
 * contributions and results, and the loop's own totals (LOOP_STATS).
 */
#define _GNU_SOURCE
#include "_fastpath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* SOL_UDP, UDP_SEGMENT, UDP_GRO and their control messages (shared with the slot loop). */
#include "netco_sockets.h"
/* Kernel limits: a UDP train is at most 64 KB and 128 segments (UDP_MAX_SEGMENTS). */
#define TRAIN_BYTES 65536
#define TRAIN_MAX_SEGS 128
#define GSO_MAX_BYTES 65000
#define RX_CTRL 64           /* SCM_TIMESTAMPNS (32) and UDP_GRO (24) */
#define TX_CTRL NETCO_GSO_CTL_LEN

/* the loop's totals, in the order of LOOP_STATS */
enum { S_RX, S_TX, S_BATCHES, S_CONTRIB, S_TX_LOST, S_TX_REFUSED, S_LAST_ERROR, S_GRO_TRAINS,
       S_GSO_TRAINS, S_CPU_NS, S_RESENT, S_RETX_UP, S_RELEASE, S_PARENT, S_SPLIT,
       S_LIMITED, S_TRIPS, S_TRIP_SOURCE, S_TRIP_FRAMES, S_COUNT };
const char *const loop_stat_names[S_COUNT] = {"rx", "tx", "batches", "contributions", "tx_lost",
                                              "tx_refused", "last_error", "gro_trains",
                                              "gso_trains", "cpu_ns", "resent", "retx_up",
                                              "release", "parent_result", "split_batches",
                                              "rate_limited", "rate_trips", "rate_trip_source",
                                              "rate_trip_frames"};
/* Per-source rate limit of frames that fail validation (issue 33, 4; docs/security.md): a
 * source (IPv4 address and UDP port) whose frames the reference drops before any state
 * (rejected_stateless) more than the limit (opts' invalid_limit, default RL_LIMIT_DEFAULT;
 * 0: none) times in one RL_WINDOW_NS is held for
 * RL_PENALTY_NS: every frame from it is dropped here (S_LIMITED, drops[RATE_LIMITED]),
 * before validation, the
 * job's token included. One socket can then try at most that many tokens per RL_WINDOW_NS +
 * RL_PENALTY_NS and cannot keep the Python path busy with its junk; a member's own socket
 * never sends such frames, so a flood from its address on other ports leaves it alone. */
#define RL_SLOTS RATE_LIMIT_SOURCES   /* the constants: host/protocol/layout.py RATE_LIMIT_* */
_Static_assert(RL_SLOTS == 4096, "rl_slot hashes to 12 bits");
#define RL_LIMIT_DEFAULT RATE_LIMIT_FRAMES   /* netco switch --invalid-limit */
#define RL_WINDOW_NS (RATE_LIMIT_WINDOW_US * 1000LL)
#define RL_PENALTY_NS (RATE_LIMIT_HOLD_US * 1000LL)
typedef struct {
    uint64_t src;          /* IPv4 address << 16 | UDP port; 0: free */
    int64_t n, window, until;
} rl_t;
const int loop_stat_count = S_COUNT;
/* ctl flags (uint8): stop, configuration changed */
enum { CTL_STOP, CTL_CHANGED };
/* why loop() returned */
enum { R_STOP = 0, R_CHANGED = 1, R_PENDING = 2, R_TIMEOUT = 3 };

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

typedef struct {
    int fd, number, offset, named, udp, gro, gso;
    uint32_t bind;         /* host order */
    int peer;
    uint32_t peer_addr;    /* host order */
    uint16_t peer_port;
} port_t;

typedef struct {
    fp_out_t out;
    struct mmsghdr *msg;
    struct iovec *iov;
    struct sockaddr_in *name;
    uint8_t *ctrl;         /* TX_CTRL bytes per message */
    int *count;            /* datagrams per message */
    int *run_port, *run_m0, *run_m;  /* messages of each port */
    int nrun;
    Py_ssize_t msg_cap;
} tx_t;

typedef struct {
    port_t *ports;
    int np;
    int port_index[512];   /* port number -> index in ports, -1 none */
    int64_t *pstats, *sstats;   /* the pipeline's totals (rx, tx, contributions), the switch's */
    int64_t *gso_off;      /* per port: GSO turned off (the route could not segment) */
    int gso_segments;
    /* sender thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tx_t *pending;
    int quit;
} loop_t;

static inline void add(int64_t *s, int k, int64_t v) { __atomic_fetch_add(&s[k], v, __ATOMIC_RELAXED); }

/* total k of the loop: the pipeline's (it starts again at a pipeline commit: frames and
 * outcomes) or the switch's */
static inline void count(const loop_t *L, int k, int64_t v) {
    const int pipeline = k == S_RX || k == S_TX || k == S_CONTRIB || k == S_RESENT
                         || k == S_RETX_UP || k == S_RELEASE || k == S_PARENT;
    add(pipeline ? L->pstats : L->sstats, k, v);
}

static int64_t thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* -- send -------------------------------------------------------------------------------- */

/* one datagram at a time: messages m0.. of a run whose GSO send the route refused */
static void send_singles(loop_t *L, const port_t *p, tx_t *tx, int m0, int m1) {
    for (int m = m0; m < m1; m++) {
        struct msghdr h = tx->msg[m].msg_hdr;
        h.msg_control = NULL;
        h.msg_controllen = 0;
        h.msg_iovlen = 1;
        /* the message's datagrams are of one length; an iovec may hold several (build_tx) */
        const struct iovec *v = tx->msg[m].msg_hdr.msg_iov;
        size_t total = 0;
        for (size_t q = 0; q < tx->msg[m].msg_hdr.msg_iovlen; q++) total += v[q].iov_len;
        const size_t seg = tx->count[m] > 0 ? total / (size_t)tx->count[m] : total;
        size_t q = 0, at = 0;
        for (int d = 0; d < tx->count[m]; d++) {
            while (q < tx->msg[m].msg_hdr.msg_iovlen && at >= v[q].iov_len) { q++; at = 0; }
            if (q == tx->msg[m].msg_hdr.msg_iovlen) break;
            struct iovec one = {(uint8_t *)v[q].iov_base + at, seg};
            at += seg;
            h.msg_iov = &one;
            for (;;) {
                if (sendmsg(p->fd, &h, 0) >= 0) break;
                if (errno == EINTR) continue;
                count(L, S_TX_LOST, 1);
                if (errno != EAGAIN && errno != ENOBUFS && errno != ECONNREFUSED) {
                    count(L, S_TX_REFUSED, 1);
                    __atomic_store_n(&L->sstats[S_LAST_ERROR], errno, __ATOMIC_RELAXED);
                }
                break;
            }
        }
    }
}

/* Send every run of tx: sendmmsg; a message the kernel refuses is skipped and counted, the
 * rest of a run is lost when the socket is full (as MsgBatch.send and GsoSender.send). */
static void send_tx(loop_t *L, tx_t *tx) {
    for (int r = 0; r < tx->nrun; r++) {
        const int pi = tx->run_port[r];
        const port_t *p = &L->ports[pi];
        const int m0 = tx->run_m0[r], m = tx->run_m[r];
        int done = 0;
        while (done < m) {
            int k = sendmmsg(p->fd, tx->msg + m0 + done, (unsigned)(m - done), 0);
            if (k < 0) {
                int e = errno;
                if (e == EINTR) continue;
                if (e == EAGAIN || e == ENOBUFS || e == ECONNREFUSED) {
                    int64_t lost = 0;
                    for (int q = done; q < m; q++) lost += tx->count[m0 + q];
                    count(L, S_TX_LOST, lost);
                    break;
                }
                if (tx->count[m0 + done] > 1 && (e == EIO || e == EINVAL || e == EOPNOTSUPP)) {
                    __atomic_store_n(&L->gso_off[pi], 1, __ATOMIC_RELAXED);
                    send_singles(L, p, tx, m0 + done, m0 + m);
                    break;
                }
                count(L, S_TX_LOST, tx->count[m0 + done]);
                count(L, S_TX_REFUSED, tx->count[m0 + done]);
                __atomic_store_n(&L->sstats[S_LAST_ERROR], e, __ATOMIC_RELAXED);
                done++;
                continue;
            }
            int64_t trains = 0;
            for (int q = done; q < done + k; q++) trains += tx->count[m0 + q] > 1;
            count(L, S_GSO_TRAINS, trains);
            done += k;
        }
    }
}

static void *sender_main(void *arg) {
    loop_t *L = arg;
    int64_t t0 = thread_cpu_ns();
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->pending && !L->quit) pthread_cond_wait(&L->cv, &L->mu);
        if (!L->pending) break;
        tx_t *tx = L->pending;
        pthread_mutex_unlock(&L->mu);
        send_tx(L, tx);
        pthread_mutex_lock(&L->mu);
        L->pending = NULL;
        pthread_cond_broadcast(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    count(L, S_CPU_NS, thread_cpu_ns() - t0);
    return NULL;
}

static void post_sender(loop_t *L, tx_t *tx) {
    pthread_mutex_lock(&L->mu);
    while (L->pending) pthread_cond_wait(&L->cv, &L->mu);
    L->pending = tx;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
}

static int tx_alloc(tx_t *tx, Py_ssize_t cap) {
    memset(tx, 0, sizeof(*tx));
    tx->out.cap = cap;
    tx->msg_cap = cap;
    tx->out.buf = malloc((size_t)cap * ROW_BYTES);
    tx->out.lens = malloc((size_t)cap * sizeof(int64_t));
    tx->out.ports = malloc((size_t)cap * sizeof(int64_t));
    tx->out.arena = malloc((size_t)cap * ROW_BYTES);
    tx->out.aoff = malloc((size_t)cap * sizeof(int64_t));
    tx->msg = calloc((size_t)cap, sizeof(struct mmsghdr));
    tx->iov = calloc((size_t)cap, sizeof(struct iovec));
    tx->name = calloc((size_t)cap, sizeof(struct sockaddr_in));
    tx->ctrl = calloc((size_t)cap, TX_CTRL);
    tx->count = calloc((size_t)cap, sizeof(int));
    tx->run_port = calloc((size_t)cap, sizeof(int));
    tx->run_m0 = calloc((size_t)cap, sizeof(int));
    tx->run_m = calloc((size_t)cap, sizeof(int));
    return (tx->out.buf && tx->out.lens && tx->out.ports && tx->out.arena && tx->out.aoff
            && tx->msg && tx->iov && tx->name
            && tx->ctrl && tx->count && tx->run_port && tx->run_m0 && tx->run_m) ? 0 : -1;
}

static void tx_free(tx_t *tx) {
    free(tx->out.buf); free(tx->out.lens); free(tx->out.ports); free(tx->out.arena); free(tx->out.aoff);
    free(tx->msg); free(tx->iov);
    free(tx->name); free(tx->ctrl); free(tx->count); free(tx->run_port); free(tx->run_m0);
    free(tx->run_m);
}

/* -- learned UDP reply ports ------------------------------------------------------------- */

/* keys: job id << 32 | IPv4 address (host/softswitch/learned.py: results of two jobs with
 * members on one address go to each job's own port) */
typedef struct {
    uint64_t *addr;
    int64_t *port, *count;
    Py_ssize_t cap;
} learned_t;

static inline uint64_t learned_key(uint16_t job, uint32_t addr) {
    return ((uint64_t)job << 32) | addr;
}

static int64_t learned_get(const learned_t *t, uint64_t addr, int64_t dflt) {
    for (int64_t k = 0; k < *t->count; k++)
        if (t->addr[k] == addr) return t->port[k];
    return dflt;
}

static void learned_put(learned_t *t, uint64_t addr, int64_t port) {
    for (int64_t k = 0; k < *t->count; k++)
        if (t->addr[k] == addr) { t->port[k] = port; return; }
    if (*t->count >= t->cap) { *t->count = 0; return; }  /* the guard of SoftSwitch._learn */
    t->addr[*t->count] = addr;
    t->port[*t->count] = port;
    *t->count += 1;
}

/* Build the messages of the outputs in tx->out (nout frames): per egress port in ascending
 * port order, frames in output order, runs of one length and destination as one UDP_SEGMENT
 * message where the port sends GSO. */
static void build_tx(loop_t *L, tx_t *tx, Py_ssize_t nout, const learned_t *lt, long long thc_port) {
    int seen[512];
    int nseen = 0;
    tx->nrun = 0;
    for (Py_ssize_t i = 0; i < nout; i++) {
        int pn = (int)tx->out.ports[i];
        int dup = 0;
        for (int s = 0; s < nseen; s++) if (seen[s] == pn) { dup = 1; break; }
        if (!dup && nseen < 512) seen[nseen++] = pn;
    }
    for (int a = 1; a < nseen; a++) {   /* ascending port numbers (few ports) */
        int v = seen[a], b = a - 1;
        while (b >= 0 && seen[b] > v) { seen[b + 1] = seen[b]; b--; }
        seen[b + 1] = v;
    }
    int nm = 0, nv = 0;
    uint64_t last_addr = 0;
    int64_t last_port = -1;
    for (int s = 0; s < nseen; s++) {
        const int pn = seen[s];
        const int pi = (pn >= 0 && pn < 512) ? L->port_index[pn] : -1;
        if (pi < 0) {
            int64_t lost = 0;
            for (Py_ssize_t i = 0; i < nout; i++) lost += tx->out.ports[i] == pn;
            count(L, S_TX_LOST, lost);
            continue;
        }
        const port_t *p = &L->ports[pi];
        const int gso = p->gso && !__atomic_load_n(&L->gso_off[pi], __ATOMIC_RELAXED);
        const int m0 = nm;
        struct mmsghdr *cur = NULL;
        int cur_len = -1;
        for (Py_ssize_t i = 0; i < nout; i++) {
            if (tx->out.ports[i] != pn) continue;
            uint8_t *row = tx->out.buf + (size_t)i * ROW_BYTES;
            const int len = (int)(tx->out.lens[i] - p->offset);
            /* the THC message is in the arena (fp_out_t): a UDP datagram is those bytes, a
             * frame gets them after its own headers */
            const uint8_t *msg = tx->out.arena + tx->out.aoff[i];
            const int from_arena = p->udp && p->offset == THC_OFFSET;
            if (!from_arena && tx->out.lens[i] > PAYLOAD_OFFSET)
                memcpy(row + PAYLOAD_OFFSET, msg + THC_HEADER_BYTES,
                       (size_t)(tx->out.lens[i] - PAYLOAD_OFFSET));
            uint8_t *base = from_arena ? (uint8_t *)msg : row + p->offset;
            const size_t blen = (size_t)(len > 0 ? len : 0);
            uint32_t daddr = 0;
            uint16_t dport = 0;
            if (p->udp) {
                if (p->peer) {
                    daddr = p->peer_addr;
                    dport = p->peer_port;
                } else {
                    daddr = be32(row + OFF_DST);
                    const uint64_t k = learned_key(be16(msg + (OFF_JOB_ID - THC_OFFSET)), daddr);
                    if (k != last_addr || last_port < 0) {
                        last_addr = k;
                        last_port = learned_get(lt, k, thc_port);
                    }
                    dport = (uint16_t)last_port;
                }
            }
            /* join the open message: same length and destination, room left; a datagram
             * that follows the last one in memory extends its iovec */
            if (gso && cur && cur_len == len && tx->count[nm - 1] < L->gso_segments
                && (tx->count[nm - 1] + 1) * len <= GSO_MAX_BYTES
                && (!p->udp || (tx->name[nm - 1].sin_addr.s_addr == htonl(daddr)
                                && tx->name[nm - 1].sin_port == htons(dport)))) {
                struct iovec *last = &tx->iov[nv - 1];
                if ((uint8_t *)last->iov_base + last->iov_len == base) {
                    last->iov_len += blen;
                } else {
                    struct iovec *v = &tx->iov[nv++];
                    v->iov_base = base;
                    v->iov_len = blen;
                    cur->msg_hdr.msg_iovlen++;
                }
                tx->count[nm - 1]++;
                if (tx->count[nm - 1] == 2) {
                    netco_set_gso(&cur->msg_hdr, tx->ctrl + (size_t)(nm - 1) * TX_CTRL,
                                  (uint16_t)len);
                }
                continue;
            }
            struct iovec *v = &tx->iov[nv++];
            v->iov_base = base;
            v->iov_len = blen;
            cur = &tx->msg[nm];
            memset(cur, 0, sizeof(*cur));
            cur->msg_hdr.msg_iov = v;
            cur->msg_hdr.msg_iovlen = 1;
            if (p->udp) {
                struct sockaddr_in *sa = &tx->name[nm];
                memset(sa, 0, sizeof(*sa));
                sa->sin_family = AF_INET;
                sa->sin_addr.s_addr = htonl(daddr);
                sa->sin_port = htons(dport);
                cur->msg_hdr.msg_name = sa;
                cur->msg_hdr.msg_namelen = sizeof(*sa);
            }
            tx->count[nm] = 1;
            cur_len = len;
            nm++;
        }
        tx->run_port[tx->nrun] = pi;
        tx->run_m0[tx->nrun] = m0;
        tx->run_m[tx->nrun] = nm - m0;
        tx->nrun++;
    }
}

/* -- receive ----------------------------------------------------------------------------- */

typedef struct {
    uint8_t *buf;                  /* rows of ROW_BYTES */
    struct sockaddr_in *names;     /* SOCKADDR_IN per row (netio.py) */
    int64_t *lens, *inports, *stamps;
    Py_ssize_t batch;
    struct mmsghdr *msg;
    struct iovec *iov;
    uint8_t *ctrl;                 /* RX_CTRL per row */
    /* UDP GRO trains */
    int tmsgs;
    uint8_t *tbuf, *tctrl;
    struct mmsghdr *tmsg;
    struct iovec *tiov;
    struct sockaddr_in *tname;
    int tused;                     /* trains of tbuf holding this batch's datagrams */
    /* where a row's payload is when it was left in its train (only the THC header was copied
     * into the row), else NULL; fill_rows() copies them in before anything but fp_batch
     * reads a row */
    const uint8_t **pay;
    int64_t *stats;
} rx_t;

/* Copy every payload left in a train into its row (rows 0..n-1, lens the frames' lengths:
 * after udp_headers). */
static void fill_rows(rx_t *X, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < n; j++) {
        if (!X->pay[j]) continue;
        memcpy(X->buf + (size_t)j * ROW_BYTES + PAYLOAD_OFFSET, X->pay[j],
               (size_t)(X->lens[j] - PAYLOAD_OFFSET));
        X->pay[j] = NULL;
    }
}

static void cmsgs(struct msghdr *h, int *seg, int64_t *stamp) {
    *seg = 0;
    *stamp = 0;
    if (h->msg_controllen == 0) return;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(c), sizeof(v));
            *seg = v;
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec t;
            memcpy(&t, CMSG_DATA(c), sizeof(t));
            *stamp = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
        }
    }
}

/* Receive from port p into rows start..; returns rows written, 0 nothing, -errno failure. */
static Py_ssize_t rx_port(rx_t *X, const port_t *p, Py_ssize_t start) {
    const Py_ssize_t room = X->batch - start;
    const int width = ROW_BYTES - p->offset;
    if (p->gro) {
        /* the batch's trains stay where they are received (a DATA payload is added from
         * there): each port's go after the last port's */
        const int t0 = X->tused;
        struct mmsghdr *tm = X->tmsg + t0;
        int m = (int)(room / TRAIN_MAX_SEGS);
        if (m > X->tmsgs - t0) m = X->tmsgs - t0;
        if (m <= 0) return 0;
        for (int j = 0; j < m; j++) {
            tm[j].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
            tm[j].msg_hdr.msg_controllen = RX_CTRL;
        }
        int k = recvmmsg(p->fd, tm, (unsigned)m, MSG_DONTWAIT, NULL);
        if (k < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -errno;
        X->tused = t0 + k;
        Py_ssize_t row = start;
        for (int j = 0; j < k; j++) {
            int seg;
            int64_t stamp;
            cmsgs(&tm[j].msg_hdr, &seg, &stamp);
            const int total = (int)tm[j].msg_len;
            if (seg <= 0) seg = total ? total : 1;
            if (total > seg) add(X->stats, S_GRO_TRAINS, 1);
            const uint8_t *src = X->tbuf + (size_t)(t0 + j) * TRAIN_BYTES;
            int at = 0;
            do {
                int piece = total - at < seg ? total - at : seg;
                int cut = piece < width ? piece : width;
                /* a UDP port's row gets the THC header; the payload stays in the train */
                const int keep = p->offset == THC_OFFSET && cut > THC_HEADER_BYTES;
                memcpy(X->buf + (size_t)row * ROW_BYTES + p->offset, src + at,
                       (size_t)(keep ? THC_HEADER_BYTES : cut));
                X->pay[row] = keep ? src + at + THC_HEADER_BYTES : NULL;
                X->lens[row] = cut;
                X->names[row] = X->tname[t0 + j];
                X->stamps[row] = stamp;
                X->inports[row] = p->number;
                row++;
                at += piece;
            } while (at < total);
        }
        return row - start;
    }
    for (Py_ssize_t j = start; j < X->batch; j++) {
        struct msghdr *h = &X->msg[j].msg_hdr;
        X->iov[j].iov_base = X->buf + (size_t)j * ROW_BYTES + p->offset;
        X->iov[j].iov_len = (size_t)width;
        h->msg_iov = &X->iov[j];
        h->msg_iovlen = 1;
        h->msg_name = p->named ? (void *)&X->names[j] : NULL;
        h->msg_namelen = p->named ? sizeof(struct sockaddr_in) : 0;
        h->msg_control = X->ctrl + (size_t)j * RX_CTRL;
        h->msg_controllen = RX_CTRL;
        h->msg_flags = 0;
        X->pay[j] = NULL;
    }
    int k = recvmmsg(p->fd, X->msg + start, (unsigned)room, MSG_DONTWAIT, NULL);
    if (k < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -errno;
    for (Py_ssize_t j = start; j < start + k; j++) {
        int seg;
        cmsgs(&X->msg[j].msg_hdr, &seg, &X->stamps[j]);
        X->lens[j] = X->msg[j].msg_len;
        X->inports[j] = p->number;
    }
    return k;
}

/* Ethernet/IPv4/UDP header of UDP datagram rows a..b (SoftSwitch._udp_rx) */
static void udp_headers(rx_t *X, const port_t *p, const uint8_t *tmpl, Py_ssize_t a, Py_ssize_t b) {
    for (Py_ssize_t j = a; j < b; j++) {
        uint8_t *f = X->buf + (size_t)j * ROW_BYTES;
        const int64_t L = X->lens[j];
        /* in two constant pieces: as one, the compiler emits rep movsb, whose start-up cost
         * was most of this loop's */
        memcpy(f, tmpl, 32);
        memcpy(f + 32, tmpl + 32, THC_OFFSET - 32);
        memcpy(f + OFF_SRC, &X->names[j].sin_addr.s_addr, 4);   /* network order already */
        put32(f + OFF_DST, p->bind);
        memcpy(f + OFF_SPORT, &X->names[j].sin_port, 2);
        put16(f + OFF_IP_LEN, (uint32_t)(L + UDP_HEADER_BYTES + IPV4_HEADER_BYTES));
        put16(f + OFF_UDP_LEN, (uint32_t)(L + UDP_HEADER_BYTES));
        X->lens[j] = L + THC_OFFSET;
    }
}

typedef struct {
    int64_t stamp, row;
} ord_t;

static int by_stamp(const void *a, const void *b) {
    const ord_t *x = a, *y = b;
    if (x->stamp != y->stamp) return x->stamp < y->stamp ? -1 : 1;
    return x->row < y->row ? -1 : (x->row > y->row);
}

/* The arrival order of rows 0..m-1 (receive stamps st) into order, as sorting them by
 * (stamp, row) gives: each port's rows come in arrival order already, so the batch is a few
 * runs of non-decreasing stamps, merged here in O(m) (on a tie, the earlier row first); more
 * than ORDER_RUNS runs are sorted. Returns 0 when the rows are in arrival order as they are
 * (order not written). */
#define ORDER_RUNS 8
static int arrival_order(const int64_t *st, Py_ssize_t m, int64_t *order, ord_t *ord) {
    Py_ssize_t start[ORDER_RUNS + 1], pos[ORDER_RUNS];
    int nr = 1;
    start[0] = 0;
    for (Py_ssize_t j = 1; j < m; j++) {
        if (st[j] >= st[j - 1]) continue;
        if (nr == ORDER_RUNS) {
            for (Py_ssize_t q = 0; q < m; q++) { ord[q].stamp = st[q]; ord[q].row = q; }
            qsort(ord, (size_t)m, sizeof(ord_t), by_stamp);
            for (Py_ssize_t q = 0; q < m; q++) order[q] = ord[q].row;
            return 1;
        }
        start[nr++] = j;
    }
    if (nr == 1) return 0;
    start[nr] = m;
    for (int r = 0; r < nr; r++) pos[r] = start[r];
    for (Py_ssize_t k = 0; k < m; k++) {
        int best = -1;
        for (int r = 0; r < nr; r++)
            if (pos[r] < start[r + 1] && (best < 0 || st[pos[r]] < st[pos[best]])) best = r;
        order[k] = pos[best]++;
    }
    return 1;
}

/* -- frames the reference drops before any state ------------------------------------------ */

/* 1 if Pipeline.process drops frame f (length L) before it touches any state or sends
 * anything (ThcParser, then the first checks of ThcValidate; a rejected packet touches no
 * state): not IPv4 or cut short before UDP (NOT_IPV4), a THC header cut short (SHORT),
 * another protocol version (BAD_VERSION), a job the switch does not have (UNKNOWN_JOB), or
 * a job's id with another token (BAD_SENDER or an earlier reason). Such frames do not depend
 * on the order they are processed in, so the loop may leave them to Python after the rest of
 * their batch (issue 16: fuzz from member addresses made every batch it hit a Python batch).
 * 0 for everything else, including frames whose fate this cannot tell (routed traffic, jobs
 * the C path does not take). */
static int rejected_stateless(const uint8_t *f, int64_t L, int64_t inport, const fp_consts_t *K,
                              const fp_state_t *S, const int32_t *job_map, const fp_job_t *jobs,
                              const int *has_job, Py_ssize_t njobs) {
    if (L < ETH_HEADER_BYTES || be16(f + OFF_ETHERTYPE) != ETHERTYPE_IPV4) return 1;
    if (L < ETH_HEADER_BYTES + IPV4_HEADER_BYTES) return 1;
    if ((f[OFF_VERIHL] & 0x0F) != IPV4_HEADER_BYTES / 4 || (be16(f + OFF_FRAG) & 0x1FFF) != 0
        || f[OFF_PROTO] != IP_PROTO_UDP)
        return 0;                       /* IPv4, not UDP as the parser takes it: routed */
    if (L < THC_OFFSET) return 1;       /* UDP cut short */
    if (be16(f + OFF_DPORT) != (uint32_t)K->thc_port) return 0;   /* routed */
    if (L < PAYLOAD_OFFSET) return 1;                             /* SHORT */
    if (f[OFF_VERSION] != K->version) return 1;                   /* BAD_VERSION */
    const int jn = job_map[be16(f + OFF_JOB_ID)];
    if (jn < 0) return 1;                                         /* UNKNOWN_JOB */
    if (jn >= njobs || !has_job[jn]) return 0;
    if ((long long)be32(f + OFF_TOKEN) != jobs[jn].token) return 1;   /* BAD_SENDER (or earlier) */
    /* the job's token, from an address, rank, ingress port or UDP port the sender table does
     * not bind (issue 33: a token holder beside a member, on another port): BAD_SENDER or an
     * earlier reason, so this frame, too, is counted by the rate limit */
    const uint32_t t = f[OFF_MSG_TYPE];
    if (t != MSG_DATA && t != MSG_NORM && t != MSG_PARTIAL && t != MSG_NORM_PARTIAL) return 0;
    if (f[OFF_RANK] >= MAX_WORKERS) return 1;                     /* MALFORMED */
    return !fp_sender_bound(S, jobs[jn].jn, f[OFF_RANK], inport, be32(f + OFF_SRC),
                            t == MSG_PARTIAL || t == MSG_NORM_PARTIAL, be16(f + OFF_SPORT));
}

/* Move the batch's rows that rejected_stateless() marks to the front (rows 0..m-1), the others
 * after them, each group in arrival order; returns m. */
static Py_ssize_t partition_rejected(rx_t *X, Py_ssize_t n, uint8_t *pbuf,
                                     struct sockaddr_in *pnames, int64_t *pvals,
                                     const fp_consts_t *K, const fp_state_t *S,
                                     const int32_t *job_map,
                                     const fp_job_t *jobs, const int *has_job, Py_ssize_t njobs) {
    Py_ssize_t m = 0;
    for (Py_ssize_t j = 0; j < n; j++)
        m += rejected_stateless(X->buf + (size_t)j * ROW_BYTES, X->lens[j], X->inports[j], K, S,
                                job_map, jobs, has_job, njobs);
    if (m == 0 || m == n) return m;
    Py_ssize_t a = 0, b = m;
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint8_t *f = X->buf + (size_t)j * ROW_BYTES;
        Py_ssize_t to = rejected_stateless(f, X->lens[j], X->inports[j], K, S, job_map, jobs,
                                           has_job, njobs) ? a++ : b++;
        int64_t len = X->lens[j];
        memcpy(pbuf + (size_t)to * ROW_BYTES, f,
               (size_t)(len > 0 && len < ROW_BYTES ? len : ROW_BYTES));
        pnames[to] = X->names[j];
        pvals[3 * to] = len;
        pvals[3 * to + 1] = X->inports[j];
        pvals[3 * to + 2] = X->stamps[j];
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t len = pvals[3 * j];
        memcpy(X->buf + (size_t)j * ROW_BYTES, pbuf + (size_t)j * ROW_BYTES,
               (size_t)(len > 0 && len < ROW_BYTES ? len : ROW_BYTES));
        X->names[j] = pnames[j];
        X->lens[j] = len;
        X->inports[j] = pvals[3 * j + 1];
        X->stamps[j] = pvals[3 * j + 2];
    }
    return m;
}

/* The source of a frame (whole row, IPv4 long enough for UDP), or 0. */
static inline uint64_t rl_source(const uint8_t *f, int64_t len) {
    if (len < THC_OFFSET || be16(f + OFF_ETHERTYPE) != ETHERTYPE_IPV4) return 0;
    return ((uint64_t)be32(f + OFF_SRC) << 16) | be16(f + OFF_SPORT);
}

static inline rl_t *rl_slot(rl_t *rl, uint64_t src) {
    return &rl[(src * 0x9E3779B97F4A7C15ull) >> 52];   /* Fibonacci hash, 12 bits */
}

/* Count a rejected frame of source src at time t; a source past RL_LIMIT in its window is
 * held until t + RL_PENALTY_NS (reported once: S_TRIPS, S_TRIP_SOURCE, S_TRIP_FRAMES). A
 * slot another source shares is taken over once its window and penalty are over. Returns
 * RL_COUNTED, RL_TRIPPED (this frame put its source over the limit) or RL_HELD (its source is
 * held already: the frame is dropped as RATE_LIMITED, not counted). */
enum { RL_COUNTED, RL_TRIPPED, RL_HELD };
static int rl_note(rl_t *rl, int64_t *rl_until, uint64_t src, int64_t t, int64_t limit,
                   const loop_t *L) {
    rl_t *e = rl_slot(rl, src);
    if (e->until > t) return e->src == src ? RL_HELD : RL_COUNTED;   /* another's: no count */
    if (e->src != src || t - e->window >= RL_WINDOW_NS) {
        e->src = src;
        e->window = t;
        e->n = 0;
    }
    if (++e->n == limit + 1) {
        e->until = t + RL_PENALTY_NS;
        if (e->until > *rl_until) *rl_until = e->until;
        count(L, S_TRIPS, 1);
        __atomic_store_n(&L->sstats[S_TRIP_SOURCE], (int64_t)src, __ATOMIC_RELAXED);
        __atomic_store_n(&L->sstats[S_TRIP_FRAMES], e->n, __ATOMIC_RELAXED);
        return RL_TRIPPED;
    }
    return RL_COUNTED;
}

/* Whether row j's source is held at t. */
static inline int rl_is_held(const rx_t *X, Py_ssize_t j, const rl_t *rl, int64_t t) {
    const uint64_t src = rl_source(X->buf + (size_t)j * ROW_BYTES, X->lens[j]);
    if (!src) return 0;
    const rl_t *e = rl_slot(rl, src);
    return e->src == src && e->until > t;
}

/* Drop rows 0..n-1 (whole rows) that are marked (drop[j]) or, with drop NULL, whose source is
 * held, keeping the others in order; *lo (when given) becomes the number of kept rows among
 * the first *lo. Returns the rows kept; the dropped ones are counted as RATE_LIMITED. */
static Py_ssize_t rl_drop(rx_t *X, Py_ssize_t n, const uint8_t *drop, const rl_t *rl, int64_t t,
                          Py_ssize_t *lo, const loop_t *L, int64_t *drops) {
    Py_ssize_t k = 0, klo = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (drop ? drop[j] : rl_is_held(X, j, rl, t)) continue;
        if (k != j) {
            memcpy(X->buf + (size_t)k * ROW_BYTES, X->buf + (size_t)j * ROW_BYTES, ROW_BYTES);
            X->names[k] = X->names[j];
            X->lens[k] = X->lens[j];
            X->inports[k] = X->inports[j];
            X->stamps[k] = X->stamps[j];
        }
        if (lo && j < *lo) klo++;
        k++;
    }
    if (lo) *lo = klo;
    if (k < n) {
        count(L, S_LIMITED, n - k);
        add(drops, DROP_RATE_LIMITED, n - k);
    }
    return k;
}

/* -- the loop's own memory, kept between calls (a capsule: new_memory()) ------------------- */

typedef struct {
    Py_ssize_t batch, cap;
    int np, tmsgs, busy;
    tx_t tx[2];
    struct mmsghdr *msg;
    struct iovec *iov;
    uint8_t *ctrl, *tbuf, *tctrl;
    struct mmsghdr *tmsg;
    struct iovec *tiov;
    struct sockaddr_in *tname;
    struct pollfd *pfd;
    ord_t *ord;
    int64_t *order;
    const uint8_t **pay;   /* rx_t.pay */
    /* partition_rejected: one batch of rows, names and (len, inport, stamp) triples */
    uint8_t *pbuf;
    struct sockaddr_in *pnames;
    int64_t *pvals;
    uint8_t *rl_mark;      /* rows the rate limit drops in the batch where a source trips */
    fp_scratch_t scratch;
    /* the rate limit's sources (kept across runs and reallocations) and when the last
     * penalty ends (0: none running) */
    rl_t rl[RL_SLOTS];
    int64_t rl_until;
} mem_t;

static void mem_release(mem_t *m) {
    tx_free(&m->tx[0]);
    tx_free(&m->tx[1]);
    free(m->msg); free(m->iov); free(m->ctrl); free(m->tbuf); free(m->tctrl); free(m->tmsg);
    free(m->tiov); free(m->tname); free(m->pfd); free(m->ord); free(m->order);
    free(m->pay);
    free(m->pbuf); free(m->pnames); free(m->pvals); free(m->rl_mark);
    fp_scratch_free(&m->scratch);
    memset(m, 0, sizeof(*m));
}

/* buffers for batch rows, cap output frames, np ports, tmsgs trains; 0 ok, -1 no memory */
static int mem_ensure(mem_t *m, Py_ssize_t batch, Py_ssize_t cap, int np, int tmsgs) {
    if (m->msg && m->batch >= batch && m->cap >= cap && m->np >= np && m->tmsgs == tmsgs)
        return 0;
    fp_scratch_t keep = m->scratch;
    m->scratch = (fp_scratch_t){0};
    rl_t *rl = malloc(sizeof(m->rl));
    if (rl) memcpy(rl, m->rl, sizeof(m->rl));
    const int64_t rl_until = m->rl_until;
    mem_release(m);
    m->scratch = keep;
    if (rl) {
        memcpy(m->rl, rl, sizeof(m->rl));
        m->rl_until = rl_until;
        free(rl);
    }
    m->batch = batch;
    m->cap = cap;
    m->np = np;
    m->tmsgs = tmsgs;
    m->msg = calloc((size_t)batch, sizeof(struct mmsghdr));
    m->iov = calloc((size_t)batch, sizeof(struct iovec));
    m->ctrl = calloc((size_t)batch, RX_CTRL);
    m->tbuf = malloc((size_t)tmsgs * TRAIN_BYTES);
    m->tctrl = calloc((size_t)tmsgs, RX_CTRL);
    m->tmsg = calloc((size_t)tmsgs, sizeof(struct mmsghdr));
    m->tiov = calloc((size_t)tmsgs, sizeof(struct iovec));
    m->tname = calloc((size_t)tmsgs, sizeof(struct sockaddr_in));
    m->pfd = calloc((size_t)(np ? np : 1), sizeof(struct pollfd));
    m->ord = malloc((size_t)batch * sizeof(ord_t));
    m->order = malloc((size_t)batch * sizeof(int64_t));
    m->pay = calloc((size_t)batch, sizeof(*m->pay));
    m->pbuf = malloc((size_t)batch * ROW_BYTES);
    m->rl_mark = calloc((size_t)batch, 1);
    m->pnames = malloc((size_t)batch * sizeof(struct sockaddr_in));
    m->pvals = malloc((size_t)batch * 3 * sizeof(int64_t));
    if (!m->msg || !m->iov || !m->ctrl || !m->tbuf || !m->tctrl || !m->tmsg || !m->tiov
        || !m->tname || !m->pfd || !m->ord || !m->order || !m->pay || !m->pbuf || !m->pnames
        || !m->pvals || !m->rl_mark
        || tx_alloc(&m->tx[0], cap) < 0
        || tx_alloc(&m->tx[1], cap) < 0) {
        mem_release(m);
        return -1;
    }
    for (int j = 0; j < tmsgs; j++) {
        m->tiov[j].iov_base = m->tbuf + (size_t)j * TRAIN_BYTES;
        m->tiov[j].iov_len = TRAIN_BYTES;
        m->tmsg[j].msg_hdr.msg_iov = &m->tiov[j];
        m->tmsg[j].msg_hdr.msg_iovlen = 1;
        m->tmsg[j].msg_hdr.msg_name = &m->tname[j];
        m->tmsg[j].msg_hdr.msg_control = m->tctrl + (size_t)j * RX_CTRL;
    }
    return 0;
}

#define MEM_CAPSULE "netco.softswitch.loop_memory"

static void mem_destroy(PyObject *cap) {
    mem_t *m = PyCapsule_GetPointer(cap, MEM_CAPSULE);
    if (m) {
        mem_release(m);
        free(m);
    }
}

const char *new_memory_doc =
    "new_memory() -> the buffers of one switch's loop() (pass the same one to every call)";

PyObject *py_new_memory(PyObject *self, PyObject *args) {
    mem_t *m = calloc(1, sizeof(mem_t));
    if (!m) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(m, MEM_CAPSULE, mem_destroy);
    if (!cap) free(m);
    return cap;
}

const char *arrival_order_doc =
    "arrival_order(stamps) -> the row order loop() processes a batch of several ports in\n"
    "  (stamps: int64 receive times per row, each port's rows in arrival order): a list of\n"
    "  rows, or None when they are in order as they are";

PyObject *py_arrival_order(PyObject *self, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    PyObject *res = NULL;
    const Py_ssize_t m = v.len / 8;
    int64_t *order = NULL;
    ord_t *ord = NULL;
    if (v.itemsize != 8 || !v.format || (strcmp(v.format, "q") && strcmp(v.format, "l"))) {
        PyErr_SetString(PyExc_TypeError, "stamps: expected int64");
        goto done;
    }
    order = malloc((size_t)(m ? m : 1) * sizeof(int64_t));
    ord = malloc((size_t)(m ? m : 1) * sizeof(ord_t));
    if (!order || !ord) {
        PyErr_NoMemory();
        goto done;
    }
    if (!arrival_order(v.buf, m, order, ord)) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    res = PyList_New(m);
    for (Py_ssize_t k = 0; res && k < m; k++) {
        PyObject *x = PyLong_FromLongLong(order[k]);
        if (!x) { Py_CLEAR(res); break; }
        PyList_SET_ITEM(res, k, x);
    }
done:
    free(order);
    free(ord);
    PyBuffer_Release(&v);
    return res;
}

/* -- the loop ---------------------------------------------------------------------------- */

const char *loop_doc =
    "loop(memory, ctl, stats, ports, rx, jobs, job_map, state, consts, learned, counters, opts)\n"
    "  memory: new_memory() of this switch (buffers kept between calls)\n"
    "  ctl: uint8 [stop, changed] (Python sets them; read every batch)\n"
    "  stats: (pipeline, switch) int64 arrays of len(LOOP_STATS), added to: rx, tx and\n"
    "         contributions to the pipeline's, the rest to the switch's\n"
    "  ports: tuple of (fd, number, offset, named, udp, bind, peer, peer_addr, peer_port, gro,\n"
    "         gso); gso_off: int64 per port (set to 1 where the route refused GSO)\n"
    "  rx: (buf, names, lens, inports, stamps) of the switch's receive batch\n"
    "  jobs: tuple indexed by job number: a job as process() takes it, or None\n"
    "  job_map: int32 job id -> job number; state, consts: as process() takes them\n"
    "  learned: (addr uint32, port int64, count int64[1]) UDP reply ports\n"
    "  counters: (contributions, results, resent, drops) int64 arrays\n"
    "  opts: (batch, timeout_ms, send_thread, udp_template, gso_segments, gro_msgs, gso_off\n"
    "         [, spin_us[, invalid_limit]]): spin_us, with nothing to receive poll that long\n"
    "         (sched_yield between tries) before sleeping (host/busywait.py; default 0);\n"
    "         invalid_limit, frames failing validation per source and second before the\n"
    "         source is held for 2 s (default 1000, 0: no limit)\n"
    "-> (reason, n, several_ports): reason 0 stop, 1 configuration changed, 2 a batch of n rows\n"
    "   for the Python pipeline is in rx (several_ports: order it by rx stamps), 3 timeout_ms\n"
    "   passed (Python's signal handlers run between calls).";

#define MAX_JOB_BUFS (7 * (MAX_JOBS + 1))   /* fp_parse_job takes at most 7 */

PyObject *py_loop(PyObject *self, PyObject *args) {
    PyObject *omem, *octl, *ostats, *oports, *orx, *ojobs, *omap, *ostate, *oconst, *olearn,
        *ocount, *oopts;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO", &omem, &octl, &ostats, &oports, &orx, &ojobs,
                          &omap, &ostate, &oconst, &olearn, &ocount, &oopts))
        return NULL;
    mem_t *mem = PyCapsule_GetPointer(omem, MEM_CAPSULE);
    if (!mem) return NULL;
    if (mem->busy) {
        PyErr_SetString(PyExc_RuntimeError, "loop(): this memory is in use by another call");
        return NULL;
    }
    Py_ssize_t batch;
    int timeout_ms, send_thread, gso_segments, gro_msgs, spin_us = 0;
    long long invalid_limit = RL_LIMIT_DEFAULT;
    PyObject *otmpl, *ogsooff;
    if (!PyArg_ParseTuple(oopts, "niiOiiO|iL", &batch, &timeout_ms, &send_thread, &otmpl,
                          &gso_segments, &gro_msgs, &ogsooff, &spin_us, &invalid_limit))
        return NULL;
    if (spin_us < 0 || invalid_limit < 0) {
        PyErr_SetString(PyExc_ValueError, "loop(): spin_us < 0 or invalid_limit < 0");
        return NULL;
    }
    const int64_t spin_ns = (int64_t)spin_us * 1000;
    PyObject *orb, *orn, *orl, *ori, *ors;
    if (!PyArg_ParseTuple(orx, "OOOOO", &orb, &orn, &orl, &ori, &ors)) return NULL;
    PyObject *ola, *olp, *olc;
    if (!PyArg_ParseTuple(olearn, "OOO", &ola, &olp, &olc)) return NULL;
    PyObject *occ, *ocr, *ocs, *ocd;
    if (!PyArg_ParseTuple(ocount, "OOOO", &occ, &ocr, &ocs, &ocd)) return NULL;
    if (!PyTuple_Check(oports) || !PyTuple_Check(ojobs) || PyTuple_GET_SIZE(ojobs) > MAX_JOBS + 1) {
        PyErr_SetString(PyExc_TypeError, "ports and jobs: tuples (at most MAX_JOBS + 1 jobs)");
        return NULL;
    }
    fp_consts_t K;
    if (fp_parse_consts(oconst, &K) < 0) return NULL;

    buf_t bufs[32 + MAX_JOB_BUFS];
    memset(bufs, 0, sizeof(bufs));
    int nb = 0;
    PyObject *result = NULL;
    loop_t L;
    memset(&L, 0, sizeof(L));
    rx_t X;
    memset(&X, 0, sizeof(X));
    tx_t *tx = mem->tx;
    const Py_ssize_t njobs = PyTuple_GET_SIZE(ojobs);
    fp_job_t jobs[MAX_JOBS + 1];
    int has_job[MAX_JOBS + 1] = {0};
    fp_state_t S;
    const Py_ssize_t np_ = PyTuple_GET_SIZE(oports);
    int sender_started = 0;
    pthread_t sender;

    if (batch <= 0) {
        PyErr_SetString(PyExc_ValueError, "batch must be positive");
        goto done;
    }
    if (take(octl, &bufs[nb++], 1, 2, "ctl") < 0) goto done;
    volatile uint8_t *ctl = bufs[nb - 1].v.buf;
    PyObject *ops, *oss;
    if (!PyArg_ParseTuple(ostats, "OO", &ops, &oss)) goto done;
    if (take(ops, &bufs[nb++], 1, 8 * S_COUNT, "pipeline stats") < 0) goto done;
    L.pstats = bufs[nb - 1].v.buf;
    if (take(oss, &bufs[nb++], 1, 8 * S_COUNT, "switch stats") < 0) goto done;
    L.sstats = bufs[nb - 1].v.buf;
    if (take(ogsooff, &bufs[nb++], 1, 8 * np_, "gso_off") < 0) goto done;
    L.gso_off = bufs[nb - 1].v.buf;
    if (take(otmpl, &bufs[nb++], 0, THC_OFFSET, "udp_template") < 0) goto done;
    const uint8_t *tmpl = bufs[nb - 1].v.buf;
    if (take(orb, &bufs[nb++], 1, (Py_ssize_t)ROW_BYTES * batch, "rx buf") < 0) goto done;
    X.buf = bufs[nb - 1].v.buf;
    if (take(orn, &bufs[nb++], 1, (Py_ssize_t)sizeof(struct sockaddr_in) * batch, "rx names") < 0)
        goto done;
    X.names = bufs[nb - 1].v.buf;
    if (take(orl, &bufs[nb++], 1, 8 * batch, "rx lens") < 0) goto done;
    X.lens = bufs[nb - 1].v.buf;
    if (take(ori, &bufs[nb++], 1, 8 * batch, "rx inports") < 0) goto done;
    X.inports = bufs[nb - 1].v.buf;
    if (take(ors, &bufs[nb++], 1, 8 * batch, "rx stamps") < 0) goto done;
    X.stamps = bufs[nb - 1].v.buf;
    X.batch = batch;
    X.stats = L.sstats;
    learned_t lt;
    if (take(ola, &bufs[nb++], 1, 0, "learned addr") < 0) goto done;
    lt.addr = bufs[nb - 1].v.buf;
    lt.cap = bufs[nb - 1].v.len / 8;
    if (take(olp, &bufs[nb++], 1, 8 * lt.cap, "learned port") < 0) goto done;
    lt.port = bufs[nb - 1].v.buf;
    if (take(olc, &bufs[nb++], 1, 8, "learned count") < 0) goto done;
    lt.count = bufs[nb - 1].v.buf;
    if (take(occ, &bufs[nb++], 1, 0, "contributions") < 0) goto done;
    int64_t *c_contrib = bufs[nb - 1].v.buf;
    const Py_ssize_t n_contrib = bufs[nb - 1].v.len / 8;
    if (take(ocr, &bufs[nb++], 1, 0, "results") < 0) goto done;
    int64_t *c_results = bufs[nb - 1].v.buf;
    const Py_ssize_t n_results = bufs[nb - 1].v.len / 8;
    if (take(ocs, &bufs[nb++], 1, 0, "resent") < 0) goto done;
    int64_t *c_resent = bufs[nb - 1].v.buf;
    const Py_ssize_t n_resent = bufs[nb - 1].v.len / 8;
    if (take(ocd, &bufs[nb++], 1, 8 * DROP_REASONS, "drops") < 0) goto done;
    int64_t *c_drops = bufs[nb - 1].v.buf;
    if (take(omap, &bufs[nb++], 0, 4 * 65536, "job_map") < 0) goto done;
    const int32_t *job_map = bufs[nb - 1].v.buf;
    if (fp_parse_state(ostate, &S, bufs, &nb) < 0) goto done;
    Py_ssize_t max_ng = 1;
    for (Py_ssize_t j = 0; j < njobs; j++) {
        PyObject *o = PyTuple_GET_ITEM(ojobs, j);
        if (o == Py_None) continue;
        if (fp_parse_job(o, &jobs[j], bufs, &nb) < 0) goto done;
        has_job[j] = 1;
        if (jobs[j].ng > max_ng) max_ng = jobs[j].ng;
    }
    L.ports = calloc((size_t)(np_ ? np_ : 1), sizeof(port_t));
    if (!L.ports) { PyErr_NoMemory(); goto done; }
    L.np = (int)np_;
    for (int k = 0; k < 512; k++) L.port_index[k] = -1;
    for (Py_ssize_t k = 0; k < np_; k++) {
        port_t *p = &L.ports[k];
        unsigned long bind, peer_addr;
        int peer_port;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(oports, k), "iiiiikikiii", &p->fd, &p->number,
                              &p->offset, &p->named, &p->udp, &bind, &p->peer, &peer_addr,
                              &peer_port, &p->gro, &p->gso))
            goto done;
        if (p->number < 0 || p->number >= 512 || p->offset < 0 || p->offset >= ROW_BYTES) {
            PyErr_SetString(PyExc_ValueError, "port number 0..511, offset within a row");
            goto done;
        }
        p->bind = (uint32_t)bind;
        p->peer_addr = (uint32_t)peer_addr;
        p->peer_port = (uint16_t)peer_port;
        L.port_index[p->number] = (int)k;
    }
    L.gso_segments = gso_segments > 0 ? gso_segments : 1;
    /* receive structures, outputs */
    if (mem_ensure(mem, batch, batch * max_ng, (int)np_, gro_msgs > 0 ? gro_msgs : 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    X.msg = mem->msg;
    X.iov = mem->iov;
    X.ctrl = mem->ctrl;
    X.tmsgs = mem->tmsgs;
    X.tbuf = mem->tbuf;
    X.tctrl = mem->tctrl;
    X.tmsg = mem->tmsg;
    X.pay = mem->pay;
    X.tiov = mem->tiov;
    X.tname = mem->tname;
    struct pollfd *pfd = mem->pfd;
    ord_t *ord = mem->ord;
    int64_t *order = mem->order;
    fp_scratch_t *scratch = &mem->scratch;
    for (Py_ssize_t k = 0; k < np_; k++) {
        pfd[k].fd = L.ports[k].fd;
        pfd[k].events = POLLIN;
    }

    int reason = R_STOP, several = 0, err = 0;
    Py_ssize_t pending_n = 0;
    mem->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_init(&L.mu, NULL);
    pthread_cond_init(&L.cv, NULL);
    if (send_thread && pthread_create(&sender, NULL, sender_main, &L) == 0) sender_started = 1;
    const int64_t cpu0 = thread_cpu_ns();
    const int64_t until = now_ns() + (int64_t)timeout_ms * 1000000LL;
    int cur = 0;
    for (;;) {
        if (__atomic_load_n(&ctl[CTL_STOP], __ATOMIC_ACQUIRE)) { reason = R_STOP; break; }
        if (__atomic_load_n(&ctl[CTL_CHANGED], __ATOMIC_ACQUIRE)) { reason = R_CHANGED; break; }
        /* back to Python every timeout_ms, so that its signal handlers run */
        if (now_ns() >= until) { reason = R_TIMEOUT; break; }
        int ready = poll(pfd, (nfds_t)np_, spin_ns > 0 ? 0 : timeout_ms);
        if (ready == 0 && spin_ns > 0) {
            /* poll a while before sleeping, giving the CPU to anything runnable between the
             * tries: a sleeping switch costs every worker a wake-up per train it sends
             * (host/busywait.py) */
            const int64_t t_end = now_ns() + spin_ns;
            while (ready == 0 && now_ns() < t_end) {
                sched_yield();
                ready = poll(pfd, (nfds_t)np_, 0);
            }
            if (ready == 0) ready = poll(pfd, (nfds_t)np_, timeout_ms);
        }
        if (ready < 0) {
            if (errno == EINTR) { reason = R_TIMEOUT; break; }
            err = errno;
            break;
        }
        if (ready == 0) { reason = R_TIMEOUT; break; }
        /* a configuration written while poll() waited: the frames stay in the sockets for the
         * next run, with the new configuration (never one batch with the old one) */
        if (__atomic_load_n(&ctl[CTL_STOP], __ATOMIC_ACQUIRE)) { reason = R_STOP; break; }
        if (__atomic_load_n(&ctl[CTL_CHANGED], __ATOMIC_ACQUIRE)) { reason = R_CHANGED; break; }
        Py_ssize_t n = 0;
        int nports = 0;
        X.tused = 0;
        for (Py_ssize_t k = 0; k < np_ && n < batch; k++) {
            if (!(pfd[k].revents & (POLLIN | POLLERR))) continue;
            const port_t *p = &L.ports[k];
            Py_ssize_t got = rx_port(&X, p, n);
            if (got < 0) { err = (int)-got; break; }
            if (got == 0) continue;
            if (p->udp) udp_headers(&X, p, tmpl, n, n + got);
            for (Py_ssize_t j = n; j < n + got; j++) X.inports[j] = p->number;
            n += got;
            nports++;
        }
        if (err) break;
        if (n == 0) continue;
        int64_t t_rl = 0;
        if (mem->rl_until) {          /* a source is held: its frames go first */
            t_rl = now_ns();
            if (t_rl >= mem->rl_until) {
                mem->rl_until = 0;
            } else {
                fill_rows(&X, n);
                n = rl_drop(&X, n, NULL, mem->rl, t_rl, NULL, &L, c_drops);
                if (n == 0) continue;
            }
        }
        several = nports > 1;
        /* pass 0: the whole batch; pass 1, where fp_batch did not take it: the frames the
         * reference drops before any state go to the front (rows 0..lo-1, left to Python
         * after this batch) and fp_batch gets the rest */
        Py_ssize_t lo = 0;
        int h = 0, jn = -1;
        fp_result_t r;
        for (int pass = 0; pass < 2 && h == 0; pass++) {
            if (pass == 1) {
                fill_rows(&X, n);   /* whole rows from here on: the partition, Python */
                lo = partition_rejected(&X, n, mem->pbuf, mem->pnames, mem->pvals, &K, &S, job_map,
                                        jobs, has_job, njobs);
                /* the rejected rows: 0..lo-1 (lo == n: all of them) */
                if (lo && invalid_limit) {
                    /* count the rejected rows; a source that goes over the limit in this batch
                     * is held from its next frame on: its later rejected rows and every row of
                     * it the fast path would take are dropped here (RATE_LIMITED) */
                    if (!t_rl) t_rl = now_ns();
                    int tripped = 0, any = 0;
                    for (Py_ssize_t j = 0; j < n; j++) {
                        int held = 0;
                        if (j < lo) {
                            const uint64_t src = rl_source(X.buf + (size_t)j * ROW_BYTES, X.lens[j]);
                            const int v = src ? rl_note(mem->rl, &mem->rl_until, src, t_rl,
                                                        invalid_limit, &L) : RL_COUNTED;
                            tripped |= v == RL_TRIPPED;
                            held = v == RL_HELD;
                        } else if (tripped) {
                            held = rl_is_held(&X, j, mem->rl, t_rl);
                        }
                        mem->rl_mark[j] = (uint8_t)held;
                        any |= held;
                    }
                    if (tripped || any) {
                        n = rl_drop(&X, n, mem->rl_mark, mem->rl, t_rl, &lo, &L, c_drops);
                        if (n == 0) break;
                    }
                }
                if (lo == 0 || lo == n) { lo = 0; break; }
            }
            const Py_ssize_t m = n - lo;
            const int64_t *ordp = NULL;
            if (several && m > 1 && arrival_order(X.stamps + lo, m, order, ord)) ordp = order;
            const uint8_t *b0 = X.buf + (size_t)lo * ROW_BYTES;
            jn = job_map[be16(b0 + OFF_JOB_ID)];
            if (jn >= 0 && jn < njobs && has_job[jn])
                h = fp_batch(&K, &S, &jobs[jn], b0, X.lens + lo, X.inports + lo, m, ordp,
                             pass ? NULL : X.pay, &tx[cur].out, &r, scratch);
        }
        if (h < 0) { err = ENOMEM; break; }
        if (n == 0) continue;    /* every row dropped by the rate limit */
        if (h == 0) { reason = R_PENDING; pending_n = n; break; }
        const fp_job_t *J = &jobs[jn];
        count(&L, S_RX, n - lo);
        if (lo) count(&L, S_SPLIT, 1);
        count(&L, S_TX, r.nout);
        count(&L, S_BATCHES, 1);
        count(&L, S_CONTRIB, r.ncontrib);
        if (J->index >= 0 && J->index < n_contrib) add(c_contrib, (int)J->index, r.ncontrib);
        if (J->index >= 0 && J->index < n_results) add(c_results, (int)J->index, r.nresults);
        if (J->index >= 0 && J->index < n_resent) add(c_resent, (int)J->index, r.nresent);
        if (r.nstale) add(c_drops, DROP_STALE, r.nstale);
        if (r.ndup) add(c_drops, DROP_DUPLICATE, r.ndup);
        if (r.nahead) add(c_drops, DROP_AHEAD, r.nahead);
        if (r.nresent) count(&L, S_RESENT, r.nresent);
        if (r.nretx_up) count(&L, S_RETX_UP, r.nretx_up);
        if (r.nrelease) count(&L, S_RELEASE, r.nrelease);
        if (r.nparent) count(&L, S_PARENT, r.nparent);
        /* learn every sender's UDP port (all rows accepted) */
        uint64_t last_a = 0;
        int last_p = -1;
        for (Py_ssize_t j = lo; j < n; j++) {
            const int pi = L.port_index[X.inports[j]];
            if (pi < 0 || !L.ports[pi].udp) continue;
            const uint8_t *bj = X.buf + (size_t)j * ROW_BYTES;
            uint64_t a = learned_key(be16(bj + OFF_JOB_ID), ntohl(X.names[j].sin_addr.s_addr));
            int pt = ntohs(X.names[j].sin_port);
            if (a == last_a && pt == last_p) continue;
            last_a = a;
            last_p = pt;
            learned_put(&lt, a, pt);
        }
        if (r.nout) {
            build_tx(&L, &tx[cur], r.nout, &lt, K.thc_port);
            if (sender_started) {
                post_sender(&L, &tx[cur]);
                cur ^= 1;
            } else {
                send_tx(&L, &tx[cur]);
            }
        }
        if (lo) { reason = R_PENDING; pending_n = lo; break; }   /* the rejected rows */
    }
    if (sender_started) {
        pthread_mutex_lock(&L.mu);
        while (L.pending) pthread_cond_wait(&L.cv, &L.mu);
        L.quit = 1;
        pthread_cond_broadcast(&L.cv);
        pthread_mutex_unlock(&L.mu);
        pthread_join(sender, NULL);
    }
    count(&L, S_CPU_NS, thread_cpu_ns() - cpu0);
    pthread_cond_destroy(&L.cv);
    pthread_mutex_destroy(&L.mu);
    Py_END_ALLOW_THREADS
    mem->busy = 0;
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = Py_BuildValue("(inO)", reason, pending_n, several ? Py_True : Py_False);
done:
    free(L.ports);
    release_all(bufs, nb);
    return result;
}
