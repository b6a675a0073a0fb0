/* Closed-loop THC load generator in C (benchmarks/softswitch.py builds it with cc -O2).
 *
 * Same protocol as host/softswitch/loadgen.py, but fast enough to saturate the software
 * switch, so that the benchmark measures the switch and not the generator. Message templates
 * (W per worker, one per slot, round 0) are prepared by Python and read from a file; this
 * program only patches round/slot_set, sends, receives and counts.
 *
 * Offsets, sizes and flags come from the generated host/protocol/netco_layout.h (build with
 * -I host/protocol): THC header fields at OFF_<field> - THC_OFFSET in a message, the THC
 * header at THC_OFFSET of a raw frame.
 * usage: loadgen TEMPLATES SECONDS WARMUP RTO_MS W LEN  {udp SRC_IP DST_IP DST_PORT | raw IFNAME} ...
 * prints: {"received": N, "seconds": S, "retransmissions": R, "rounds_min": M}
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <linux/if_packet.h>
#include <linux/if_ether.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netco_layout.h"

#define MAXW 64
#define RXB 256

typedef struct {
    int fd, W, len;
    unsigned char *rows;          /* W * len */
    uint32_t *round;
    unsigned char *queued;
    struct sockaddr_in dst;
    int named;
    long long received, base;
    double progress;
    struct mmsghdr shdr[1024];
    struct iovec siov[1024];
} worker_t;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* THC header fields, as offsets in a THC message */
enum { off_slot = OFF_SLOT - THC_OFFSET, off_round = OFF_ROUND - THC_OFFSET,
       off_set = OFF_SLOT_SET - THC_OFFSET, off_flags = OFF_FLAGS - THC_OFFSET };

static void patch(worker_t *w, int s) {
    unsigned char *m = w->rows + (size_t)s * w->len + (w->named ? 0 : THC_OFFSET);
    uint32_t r = w->round[s];
    m[off_round] = r >> 24; m[off_round + 1] = r >> 16; m[off_round + 2] = r >> 8; m[off_round + 3] = r;
    m[off_set] = r & 1;
}

static void send_slots(worker_t *w, int *slots, int k) {
    for (int i = 0; i < k; i++) {
        w->siov[i].iov_base = w->rows + (size_t)slots[i] * w->len;
        w->siov[i].iov_len = w->len;
        memset(&w->shdr[i].msg_hdr, 0, sizeof(struct msghdr));
        w->shdr[i].msg_hdr.msg_iov = &w->siov[i];
        w->shdr[i].msg_hdr.msg_iovlen = 1;
        if (w->named) {
            w->shdr[i].msg_hdr.msg_name = &w->dst;
            w->shdr[i].msg_hdr.msg_namelen = sizeof(w->dst);
        }
    }
    int done = 0;
    while (done < k) {
        int r = sendmmsg(w->fd, w->shdr + done, k - done, 0);
        if (r <= 0) break;
        done += r;
    }
}

int main(int argc, char **argv) {
    if (argc < 8) { fprintf(stderr, "usage: see source\n"); return 2; }
    const char *tpl = argv[1];
    double seconds = atof(argv[2]), warmup = atof(argv[3]), rto = atof(argv[4]) / 1000.0;
    int W = atoi(argv[5]), len = atoi(argv[6]);
    if (W > 1024) { fprintf(stderr, "window too large\n"); return 2; }
    FILE *f = fopen(tpl, "rb");
    if (!f) { perror("templates"); return 2; }
    worker_t *ws = calloc(MAXW, sizeof(worker_t));
    int n = 0;
    for (int a = 7; a < argc && n < MAXW; n++) {
        worker_t *w = &ws[n];
        w->W = W; w->len = len;
        w->rows = malloc((size_t)W * len);
        if (fread(w->rows, 1, (size_t)W * len, f) != (size_t)W * len) { fprintf(stderr, "short templates\n"); return 2; }
        w->round = calloc(W, sizeof(uint32_t));
        w->queued = calloc(W, 1);
        int buf = 1 << 23;
        if (!strcmp(argv[a], "udp")) {
            w->fd = socket(AF_INET, SOCK_DGRAM, 0);
            struct sockaddr_in src = {.sin_family = AF_INET};
            inet_pton(AF_INET, argv[a + 1], &src.sin_addr);
            if (bind(w->fd, (struct sockaddr *)&src, sizeof(src))) { perror("bind"); return 2; }
            w->dst.sin_family = AF_INET;
            inet_pton(AF_INET, argv[a + 2], &w->dst.sin_addr);
            w->dst.sin_port = htons(atoi(argv[a + 3]));
            w->named = 1;
            a += 4;
        } else {
            w->fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
            int one = 1;
            setsockopt(w->fd, SOL_PACKET, 23 /* PACKET_IGNORE_OUTGOING */, &one, sizeof(one));
            struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                                     .sll_ifindex = if_nametoindex(argv[a + 1])};
            if (bind(w->fd, (struct sockaddr *)&ll, sizeof(ll))) { perror("bind raw"); return 2; }
            a += 2;
        }
        setsockopt(w->fd, SOL_SOCKET, 33 /* SO_RCVBUFFORCE */, &buf, sizeof(buf));
        setsockopt(w->fd, SOL_SOCKET, 32 /* SO_SNDBUFFORCE */, &buf, sizeof(buf));
    }
    fclose(f);
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, ws[i].fd, &ev);
    }
    static unsigned char rbuf[RXB][ROW_BYTES];
    static struct mmsghdr rh[RXB];
    static struct iovec riov[RXB];
    int *slots = malloc(sizeof(int) * 1024);
    double t0 = now(), t_start = t0 + warmup, t_end = t_start + seconds;
    long long retx = 0;
    int measuring = 0;
    for (int i = 0; i < n; i++) {
        for (int s = 0; s < W; s++) slots[s] = s;
        send_slots(&ws[i], slots, W);
        ws[i].progress = t0;
    }
    struct epoll_event evs[MAXW];
    for (;;) {
        double t = now();
        if (!measuring && t >= t_start) {
            for (int i = 0; i < n; i++) ws[i].base = ws[i].received;
            measuring = 1;
        }
        if (t >= t_end) break;
        int ne = epoll_wait(ep, evs, MAXW, 5);
        for (int e = 0; e < ne; e++) {
            worker_t *w = &ws[evs[e].data.u32];
            for (int i = 0; i < RXB; i++) {
                riov[i].iov_base = rbuf[i]; riov[i].iov_len = ROW_BYTES;
                memset(&rh[i].msg_hdr, 0, sizeof(struct msghdr));
                rh[i].msg_hdr.msg_iov = &riov[i]; rh[i].msg_hdr.msg_iovlen = 1;
            }
            int k = recvmmsg(w->fd, rh, RXB, MSG_DONTWAIT, NULL);
            if (k <= 0) continue;
            w->received += k;
            int m = 0;
            int base = w->named ? 0 : THC_OFFSET;
            for (int i = 0; i < k; i++) {
                if ((int)rh[i].msg_len < base + off_round + 4) continue;
                unsigned char *p = rbuf[i] + base;
                int s = (p[off_slot] << 8) | p[off_slot + 1];
                uint32_t r = ((uint32_t)p[off_round] << 24) | (p[off_round + 1] << 16) | (p[off_round + 2] << 8) | p[off_round + 3];
                if (s < W && r == w->round[s] && !w->queued[s]) {
                    w->round[s]++;
                    w->queued[s] = 1;
                    patch(w, s);
                    slots[m++] = s;
                }
            }
            for (int i = 0; i < m; i++) w->queued[slots[i]] = 0;
            if (m) { send_slots(w, slots, m); w->progress = t; }
        }
        for (int i = 0; i < n; i++) {
            worker_t *w = &ws[i];
            if (t - w->progress > rto) {
                int hb = w->named ? 0 : THC_OFFSET;
                for (int s = 0; s < W; s++) { slots[s] = s; w->rows[(size_t)s * len + hb + off_flags] = FLAG_RETX; }
                send_slots(w, slots, W);
                for (int s = 0; s < W; s++) w->rows[(size_t)s * len + hb + off_flags] = 0;
                w->progress = t;
                retx++;
            }
        }
    }
    long long total = 0;
    uint32_t rmin = 0xffffffffu;
    for (int i = 0; i < n; i++) {
        total += ws[i].received - ws[i].base;
        for (int s = 0; s < W; s++) if (ws[i].round[s] < rmin) rmin = ws[i].round[s];
    }
    printf("{\"received\": %lld, \"seconds\": %.3f, \"retransmissions\": %lld, \"rounds_min\": %u}\n",
           total, seconds, retx, rmin);
    return 0;
}
