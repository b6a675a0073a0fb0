/* Linux socket constants and UDP offload control messages shared by the data path's C loops:
 * the transport's slot loop (host/transport/_slotloop.c), the software target's switch loop
 * (host/softswitch/_swloop.c) and the kernel-limit probe (host/transport/kecho.c).
 *
 * UDP segmentation offload (Linux >= 4.18) and receive coalescing (>= 5.0): the socket options
 * and control message types of <linux/udp.h>, defined here for C libraries whose headers
 * predate them. Hand-written (unlike netco_layout.h next to it, which p4/gen.py generates).
 */
#ifndef NETCO_SOCKETS_H
#define NETCO_SOCKETS_H

#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

/* Bytes of control buffer one UDP_SEGMENT control message takes. */
#define NETCO_GSO_CTL_LEN CMSG_SPACE(sizeof(uint16_t))

/* Make h a UDP_SEGMENT message of seg-byte datagrams: its control message is written into ctl
 * (at least NETCO_GSO_CTL_LEN bytes, aligned for struct cmsghdr). */
static inline void netco_set_gso(struct msghdr *h, void *ctl, uint16_t seg) {
    h->msg_control = ctl;
    h->msg_controllen = NETCO_GSO_CTL_LEN;
    struct cmsghdr *cm = CMSG_FIRSTHDR(h);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
}

/* The datagram size of a received coalesced train (its UDP_GRO control message), else len. */
static inline int netco_gro_segment(struct msghdr *m, int len) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(c), sizeof(v));
            return v > 0 ? v : len;
        }
    return len;
}

#endif /* NETCO_SOCKETS_H */
