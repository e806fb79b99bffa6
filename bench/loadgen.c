/*
 * bench/loadgen.c: a length-prefixed request/response load generator (epoll, one thread), so
 * that in bench/server.py the load generator is not the bottleneck: the Python one tops out
 * near the echo floor itself at 64 connections, which hides the servers' own latency.
 *
 *   loadgen HOST PORT CONNS WINDOW WARMUP_S DURATION_S REQUEST_HEX
 *
 * Opens CONNS TCP connections (TCP_NODELAY) and keeps WINDOW requests in flight on each: every
 * response frame read is matched to the oldest request of its connection (Kafka answers in
 * order) and its correlation id checked, and the replacements of all responses of one read go
 * out in one write. REQUEST_HEX is one request frame (4-byte size included); its correlation id
 * (frame bytes 8..11) is set per request. Latency = response read time - send time, recorded
 * after WARMUP_S for DURATION_S into a 1 us histogram (capped at 10 s). Prints one JSON line:
 *   {"requests": N, "seconds": S, "rps": R, "p50_us": X, "p99_us": Y, "errors": E}
 * Exits 2 on a connection error or a wrong correlation id (counted in "errors" first).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HIST_US 10000000
#define RBUF (1 << 16)

typedef struct {
    int fd;
    int32_t next_corr, expect_corr;
    uint64_t *sent; /* ring of send times, WINDOW entries */
    int head, count;
    unsigned char rbuf[RBUF];
    size_t rlen;
} Conn;

static unsigned char *req;
static size_t req_len;
static int window;
static uint32_t *hist;
static uint64_t recorded, errors;

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int
write_all(int fd, const unsigned char *b, size_t n)
{
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1; /* blocking sockets: EAGAIN cannot happen */
        }
        b += w, n -= (size_t)w;
    }
    return 0;
}

/* Queue k new requests on c into out (capacity checked by the caller). */
static size_t
fill(Conn *c, int k, unsigned char *out, uint64_t t)
{
    size_t n = 0;
    for (int i = 0; i < k; i++) {
        memcpy(out + n, req, req_len);
        uint32_t corr = (uint32_t)c->next_corr++;
        out[n + 8] = corr >> 24, out[n + 9] = corr >> 16, out[n + 10] = corr >> 8;
        out[n + 11] = corr;
        n += req_len;
        c->sent[(c->head + c->count) % window] = t;
        c->count++;
    }
    return n;
}

int
main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: loadgen HOST PORT CONNS WINDOW WARMUP_S DURATION_S REQUEST_HEX\n");
        return 1;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]), conns = atoi(argv[3]);
    window = atoi(argv[4]);
    double warmup = atof(argv[5]), duration = atof(argv[6]);
    const char *hex = argv[7];
    req_len = strlen(hex) / 2;
    if (conns < 1 || window < 1 || req_len < 12) {
        fprintf(stderr, "bad arguments\n");
        return 1;
    }
    req = malloc(req_len);
    for (size_t i = 0; i < req_len; i++)
        sscanf(hex + 2 * i, "%2hhx", &req[i]);
    hist = calloc(HIST_US + 1, sizeof *hist);
    unsigned char *out = malloc(req_len * (size_t)window);
    Conn *cs = calloc((size_t)conns, sizeof *cs);
    int ep = epoll_create1(0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    for (int i = 0; i < conns; i++) {
        Conn *c = &cs[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            perror("connect");
            return 2;
        }
        c->sent = calloc((size_t)window, sizeof(uint64_t));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    uint64_t t0 = now_ns();
    for (int i = 0; i < conns; i++) {
        size_t n = fill(&cs[i], window, out, now_ns());
        if (write_all(cs[i].fd, out, n) < 0) {
            perror("write");
            return 2;
        }
    }
    uint64_t rec_from = t0 + (uint64_t)(warmup * 1e9);
    uint64_t rec_to = rec_from + (uint64_t)(duration * 1e9);
    struct epoll_event evs[256];
    uint64_t t = t0;
    while (t < rec_to) {
        int k = epoll_wait(ep, evs, 256, 100);
        if (k < 0 && errno != EINTR) {
            perror("epoll_wait");
            return 2;
        }
        for (int e = 0; e < k; e++) {
            Conn *c = evs[e].data.ptr;
            ssize_t r = read(c->fd, c->rbuf + c->rlen, RBUF - c->rlen);
            if (r <= 0) {
                if (r < 0 && errno == EINTR)
                    continue;
                fprintf(stderr, "connection closed by the server\n");
                errors++;
                goto done;
            }
            t = now_ns();
            c->rlen += (size_t)r;
            size_t pos = 0;
            int answered = 0;
            while (c->rlen - pos >= 8) {
                const unsigned char *f = c->rbuf + pos;
                uint32_t size = ((uint32_t)f[0] << 24) | (f[1] << 16) | (f[2] << 8) | f[3];
                if (size < 4 || size > RBUF - 4) {
                    fprintf(stderr, "bad response size %u\n", size);
                    errors++;
                    goto done;
                }
                if (c->rlen - pos < 4 + size)
                    break;
                int32_t corr = (int32_t)(((uint32_t)f[4] << 24) | (f[5] << 16) | (f[6] << 8) | f[7]);
                if (corr != c->expect_corr || c->count == 0) {
                    fprintf(stderr, "correlation id %d, expected %d\n", corr, c->expect_corr);
                    errors++;
                    goto done;
                }
                c->expect_corr++;
                uint64_t sent = c->sent[c->head];
                c->head = (c->head + 1) % window;
                c->count--;
                if (t >= rec_from && t <= rec_to) {
                    uint64_t us = (t - sent) / 1000;
                    hist[us > HIST_US ? HIST_US : us]++;
                    recorded++;
                }
                answered++;
                pos += 4 + size;
            }
            memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
            c->rlen -= pos;
            if (answered && t < rec_to) {
                size_t n = fill(c, answered, out, t);
                if (write_all(c->fd, out, n) < 0) {
                    perror("write");
                    errors++;
                    goto done;
                }
            }
        }
        t = now_ns();
    }
done:;
    uint64_t p50 = 0, p99 = 0, acc = 0;
    int have50 = 0;
    for (uint64_t us = 0; us <= HIST_US && recorded; us++) {
        acc += hist[us];
        if (!have50 && acc * 2 >= recorded + 1) {
            p50 = us;
            have50 = 1;
        }
        if (acc * 100 >= recorded * 99 + 1) {
            p99 = us;
            break;
        }
    }
    printf("{\"requests\": %llu, \"seconds\": %.6f, \"rps\": %.1f, \"p50_us\": %llu, "
           "\"p99_us\": %llu, \"errors\": %llu}\n",
           (unsigned long long)recorded, duration, recorded / duration, (unsigned long long)p50,
           (unsigned long long)p99, (unsigned long long)errors);
    return errors ? 2 : 0;
}
