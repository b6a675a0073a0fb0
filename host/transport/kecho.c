/* kecho: the kernel's limit for the data path's socket pattern, measured in C.
 *
 * N client threads each keep WINDOW datagrams of SIZE bytes in flight to one echo thread
 * (the software target's place) and send a new one for every one that comes back, like the
 * slot window; the echo thread sends every datagram straight back where it came from. Both
 * sides batch like the data path: sendmmsg/recvmmsg of up to BATCH messages, and with
 * GSO > 1 every message carries up to GSO datagrams as one UDP_SEGMENT super-buffer, received
 * with UDP_GRO (the kernel hands a train of same-size datagrams over in one buffer). Nothing
 * else is done per datagram, so the rate is what the kernel's socket path allows. The echo
 * answers a datagram of SIZE bytes with one of REPLY bytes (a THC result is larger than its
 * contribution).
 *
 *   kecho udp  N SIZE REPLY BATCH GSO COUNT WINDOW
 *       clients bind 127.0.0.(11+r), the echo thread one socket per client on 127.0.0.1
 *   kecho packet N SIZE REPLY BATCH GSO COUNT WINDOW NS0 IF0 SW0 [NS1 IF1 SW1 ...]
 *       AF_PACKET frames of SIZE bytes (Ethernet/IPv4/UDP included): client r opens its
 *       socket on interface IFr inside the network namespace file NSr, the echo thread on
 *       SWr (the veth peer, in the caller's namespace). GSO must be 1.
 *
 * Prints one JSON line: {"per_client_datagrams_per_s": [...], "seconds": [...]} -- round
 * trips per second of each client (COUNT datagrams each). Built at run time by
 * host/transport/kecho.py with the system cc; no binary is committed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define MAXC 32
#define MAXBUF 65536

static int n_clients, size, reply, batch, gso, window;
static long count;
static int is_packet;
static int cl_fd[MAXC], sw_fd[MAXC];
static volatile int done_clients;
static double secs[MAXC];

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    fprintf(stderr, "kecho: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* One side's message ring: batch messages of up to gso datagrams each. */
typedef struct {
    struct mmsghdr *h;
    struct iovec *iov;
    uint8_t *buf;
    char *ctl;
    struct sockaddr_in *addr;
    int msg_bytes;
} ring_t;

#define CTL 64

static void ring_init(ring_t *r) {
    r->msg_bytes = gso > 1 ? MAXBUF : (size > reply ? size : reply);
    r->h = calloc(batch, sizeof *r->h);
    r->iov = calloc(batch, sizeof *r->iov);
    r->buf = calloc((size_t)batch, r->msg_bytes);
    r->ctl = calloc(batch, CTL);
    r->addr = calloc(batch, sizeof *r->addr);
    for (int i = 0; i < batch; i++) {
        r->iov[i].iov_base = r->buf + (size_t)i * r->msg_bytes;
        r->iov[i].iov_len = r->msg_bytes;
        r->h[i].msg_hdr.msg_iov = &r->iov[i];
        r->h[i].msg_hdr.msg_iovlen = 1;
    }
}

/* Prepare receive headers (lengths and control buffers reset). */
static void ring_rx(ring_t *r) {
    for (int i = 0; i < batch; i++) {
        r->iov[i].iov_len = r->msg_bytes;
        r->h[i].msg_hdr.msg_name = is_packet ? NULL : &r->addr[i];
        r->h[i].msg_hdr.msg_namelen = is_packet ? 0 : sizeof r->addr[i];
        r->h[i].msg_hdr.msg_control = gso > 1 ? r->ctl + (size_t)i * CTL : NULL;
        r->h[i].msg_hdr.msg_controllen = gso > 1 ? CTL : 0;
        r->h[i].msg_hdr.msg_flags = 0;
    }
}

/* Segment size of a received message (UDP_GRO cmsg), or its length when not coalesced. */
static int seg_of(struct msghdr *m, int len) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(c), sizeof v);
            return v;
        }
    return len;
}

/* Set a send message: len bytes, UDP_SEGMENT = size when it holds more than one. */
static void set_tx(ring_t *r, int i, int len, struct sockaddr_in *to) {
    struct msghdr *m = &r->h[i].msg_hdr;
    r->iov[i].iov_len = len;
    m->msg_name = to;
    m->msg_namelen = to ? sizeof *to : 0;
    if (gso > 1 && len > size) {
        m->msg_control = r->ctl + (size_t)i * CTL;
        m->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
        struct cmsghdr *c = CMSG_FIRSTHDR(m);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t s = (uint16_t)size;
        memcpy(CMSG_DATA(c), &s, sizeof s);
    } else {
        m->msg_control = NULL;
        m->msg_controllen = 0;
    }
}

static void send_all(int fd, ring_t *r, int n) {
    int k = 0;
    while (k < n) {
        int s = sendmmsg(fd, r->h + k, (unsigned)(n - k), 0);
        if (s < 0) {
            if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) {
                struct pollfd p = {fd, POLLOUT, 0};
                poll(&p, 1, 1);
                continue;
            }
            die("sendmmsg");
        }
        k += s;
    }
}

/* Client: queue `want` new datagrams (in messages of up to gso) and send them. */
static void client_send(int fd, ring_t *tx, struct sockaddr_in *to, long want) {
    while (want > 0) {
        int n = 0;
        while (want > 0 && n < batch) {
            int k = gso > 1 ? (want < gso ? (int)want : gso) : 1;
            set_tx(tx, n, k * size, to);
            want -= k;
            n++;
        }
        send_all(fd, tx, n);
    }
}

typedef struct {
    int idx;
    struct sockaddr_in to;
} carg_t;

/* Ethernet/IPv4/UDP header of a client's frame: 10.77.0.(idx+1) -> 10.77.0.254, port 0x5448. */
static void frame_header(uint8_t *f, int idx) {
    static const uint8_t dst[6] = {2, 0x4e, 0x43, 0, 0, 1};
    memcpy(f, dst, 6);
    uint8_t src[6] = {2, 0, 0, 0x77, 0, (uint8_t)(idx + 1)};
    memcpy(f + 6, src, 6);
    f[12] = 0x08;
    f[13] = 0x00;
    uint8_t *ip = f + 14;
    memset(ip, 0, 20);
    ip[0] = 0x45;
    int tot = size - 14;
    ip[2] = (uint8_t)(tot >> 8);
    ip[3] = (uint8_t)tot;
    ip[8] = 64;
    ip[9] = 17;
    ip[12] = 10; ip[13] = 77; ip[14] = 0; ip[15] = (uint8_t)(idx + 1);
    ip[16] = 10; ip[17] = 77; ip[18] = 0; ip[19] = 254;
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += (uint32_t)(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    uint16_t ck = (uint16_t)~sum;
    ip[10] = (uint8_t)(ck >> 8);
    ip[11] = (uint8_t)ck;
    uint8_t *u = ip + 20;
    u[0] = 0x54; u[1] = 0x48; u[2] = 0x54; u[3] = 0x48;
    int ul = tot - 20;
    u[4] = (uint8_t)(ul >> 8);
    u[5] = (uint8_t)ul;
    u[6] = u[7] = 0;
}

static void *client(void *arg) {
    carg_t *a = arg;
    int fd = cl_fd[a->idx];
    ring_t tx, rx;
    ring_init(&tx);
    ring_init(&rx);
    memset(tx.buf, 0x5a, (size_t)batch * tx.msg_bytes);
    if (is_packet) /* Ethernet + IPv4 + UDP, as the data path's frames (not for this host) */
        for (int i = 0; i < batch; i++)
            frame_header(tx.buf + (size_t)i * tx.msg_bytes, a->idx);
    struct sockaddr_in *to = is_packet ? NULL : &a->to;
    double t0 = mono();
    long sent = window < count ? window : count, got = 0;
    client_send(fd, &tx, to, sent);
    while (got < count) {
        ring_rx(&rx);
        int k = recvmmsg(fd, rx.h, (unsigned)batch, MSG_DONTWAIT, NULL);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
            die("recvmmsg");
        if (k <= 0) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 200) == 0 && got < count) { /* a loss: keep the window full */
                long more = sent < count ? 1 : 0;
                client_send(fd, &tx, to, more ? more : 0);
                sent += more;
                if (!more)
                    got = count; /* everything sent, the rest lost: stop */
            }
            continue;
        }
        long n = 0;
        for (int i = 0; i < k; i++) {
            int len = (int)rx.h[i].msg_len;
            int seg = gso > 1 ? seg_of(&rx.h[i].msg_hdr, len) : len;
            n += seg > 0 ? (len + seg - 1) / seg : 1;
        }
        got += n;
        long more = count - sent < n ? count - sent : n;
        if (more > 0) {
            client_send(fd, &tx, to, more);
            sent += more;
        }
    }
    secs[a->idx] = mono() - t0;
    __atomic_add_fetch(&done_clients, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *echo(void *arg) {
    (void)arg;
    ring_t rx;
    ring_init(&rx);
    struct pollfd p[MAXC];
    for (int i = 0; i < n_clients; i++)
        p[i] = (struct pollfd){sw_fd[i], POLLIN, 0};
    while (__atomic_load_n(&done_clients, __ATOMIC_SEQ_CST) < n_clients) {
        int any = 0;
        for (int c = 0; c < n_clients; c++) {
            ring_rx(&rx);
            int k = recvmmsg(sw_fd[c], rx.h, (unsigned)batch, MSG_DONTWAIT, NULL);
            if (k <= 0)
                continue;
            any = 1;
            for (int i = 0; i < k; i++) {
                int len = (int)rx.h[i].msg_len;
                if (gso > 1) {
                    /* answer the train with a train: as many datagrams, REPLY bytes each */
                    int seg0 = seg_of(&rx.h[i].msg_hdr, len);
                    int cnt = seg0 > 0 ? (len + seg0 - 1) / seg0 : 1;
                    int seg = reply;
                    len = cnt * reply;
                    struct msghdr *m = &rx.h[i].msg_hdr;
                    rx.iov[i].iov_len = len;
                    m->msg_name = &rx.addr[i];
                    m->msg_namelen = sizeof rx.addr[i];
                    if (len > seg) {
                        m->msg_control = rx.ctl + (size_t)i * CTL;
                        m->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
                        struct cmsghdr *cm = CMSG_FIRSTHDR(m);
                        cm->cmsg_level = SOL_UDP;
                        cm->cmsg_type = UDP_SEGMENT;
                        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                        uint16_t s = (uint16_t)seg;
                        memcpy(CMSG_DATA(cm), &s, sizeof s);
                    } else {
                        m->msg_control = NULL;
                        m->msg_controllen = 0;
                    }
                } else {
                    rx.iov[i].iov_len = reply;
                    rx.h[i].msg_hdr.msg_control = NULL;
                    rx.h[i].msg_hdr.msg_controllen = 0;
                }
            }
            send_all(sw_fd[c], &rx, k);
        }
        if (!any)
            poll(p, (nfds_t)n_clients, 20);
    }
    return NULL;
}

static int udp_socket(const char *ip, int gro) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0)
        die("socket");
    int big = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (gro) {
        int one = 1;
        if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) < 0)
            die("UDP_GRO");
    }
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    return fd;
}

static int packet_socket(const char *ifname) {
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0)
        die("socket(AF_PACKET)");
    int big = 8 << 20, one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    struct sockaddr_ll a = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                            .sll_ifindex = (int)if_nametoindex(ifname)};
    if (!a.sll_ifindex)
        die(ifname);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind(AF_PACKET)");
    return fd;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr,
                "usage: kecho udp|packet N SIZE REPLY BATCH GSO COUNT WINDOW [NS IF SW]...\n");
        return 2;
    }
    is_packet = strcmp(argv[1], "packet") == 0;
    n_clients = atoi(argv[2]);
    size = atoi(argv[3]);
    reply = atoi(argv[4]);
    batch = atoi(argv[5]);
    gso = atoi(argv[6]);
    count = atol(argv[7]);
    window = atoi(argv[8]);
    if (n_clients < 1 || n_clients > MAXC || size < 1 || size > 9000 || reply < 1 ||
        reply > 9000 || batch < 1 || gso < 1 || gso * size > 65000 || gso * reply > 65000 ||
        (is_packet && gso != 1) || window < 1) {
        fprintf(stderr, "kecho: bad arguments\n");
        return 2;
    }
    carg_t args[MAXC];
    if (is_packet) {
        if (argc < 9 + 3 * n_clients) {
            fprintf(stderr, "kecho: packet mode needs NS IF SW per client\n");
            return 2;
        }
        int home = open("/proc/self/ns/net", O_RDONLY);
        for (int i = 0; i < n_clients; i++) {
            int ns = open(argv[9 + 3 * i], O_RDONLY);
            if (ns < 0 || setns(ns, CLONE_NEWNET) < 0)
                die(argv[9 + 3 * i]);
            cl_fd[i] = packet_socket(argv[10 + 3 * i]);
            close(ns);
            if (setns(home, CLONE_NEWNET) < 0)
                die("setns home");
            sw_fd[i] = packet_socket(argv[11 + 3 * i]);
            args[i].idx = i;
        }
    } else {
        for (int i = 0; i < n_clients; i++) {
            char ip[32];
            snprintf(ip, sizeof ip, "127.0.0.%d", 11 + i);
            cl_fd[i] = udp_socket(ip, gso > 1);
            sw_fd[i] = udp_socket("127.0.0.1", gso > 1);
            struct sockaddr_in a;
            socklen_t l = sizeof a;
            getsockname(sw_fd[i], (struct sockaddr *)&a, &l);
            args[i].idx = i;
            args[i].to = a;
        }
    }
    pthread_t e, c[MAXC];
    pthread_create(&e, NULL, echo, NULL);
    for (int i = 0; i < n_clients; i++)
        pthread_create(&c[i], NULL, client, &args[i]);
    for (int i = 0; i < n_clients; i++)
        pthread_join(c[i], NULL);
    pthread_join(e, NULL);
    printf("{\"per_client_datagrams_per_s\": [");
    for (int i = 0; i < n_clients; i++)
        printf("%s%.1f", i ? ", " : "", (double)count / secs[i]);
    printf("], \"seconds\": [");
    for (int i = 0; i < n_clients; i++)
        printf("%s%.6f", i ? ", " : "", secs[i]);
    printf("]}\n");
    return 0;
}
