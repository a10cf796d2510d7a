/* metrics_http.c: GET /metrics over HTTP/1.x, on one thread of its own with poll(2).
 *
 * A scrape endpoint needs little of HTTP: one path, GET and HEAD, no bodies. This server does
 * that and no more, so the agent links no HTTP library (libmicrohttpd brought GnuTLS and its
 * dependencies into the agent's memory, about 2 MiB, for TLS it never used). Requests are read
 * with the pure parser in src/core/httphead.c (fuzzed); keep-alive and pipelining work.
 *
 * Limits, so that no client can keep Prometheus out: each phase of a connection has a fixed
 * deadline that progress does not extend (10 s to send a request head from its first byte, or
 * between requests; 10 s to take a response; 2 s of draining before a close); at most 16
 * connections, and a 17th makes room by evicting one (victim(): never a connection whose request
 * has arrived, a draining or half-sent one first, then idle ones, the oldest first; when all 16
 * are being answered, the 17th is closed instead). Responses share the published text by
 * reference (no copy per connection). */
#include "agent/metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/httphead.h"
#include "util/log.h"
#include "util/util.h"

#define MAX_CONNS 16
#define IN_MAX 8192            /* the longest request head taken (431 beyond) */
#define PHASE_MS 10000         /* to send a head, to wait between requests, to take a response */
#define LINGER_MS 2000         /* how long unread input is drained before a close */
#define ACCEPT_PAUSE_MS 100    /* after accept failed for want of descriptors or memory */

/* A published text, shared by the responses that send it. */
struct snap {
    unsigned refs; /* under metrics_http.lock */
    size_t cap, len;
    char text[];
};

struct conn {
    int fd; /* -1: free slot */
    enum { READING, WRITING, DRAINING } state;
    long long since, deadline; /* when this phase started, when it must end */
    size_t in_len;
    char head[512]; /* the response's status line and header fields */
    size_t head_len;
    struct snap *body; /* the response's body (a reference), or NULL */
    const char *body_ptr;
    size_t body_len;
    size_t sent; /* of head_len + body_len */
    bool close_after;
    unsigned served; /* requests answered on this connection */
    char in[IN_MAX];
};

struct metrics_http {
    int lfd;
    int wake[2]; /* written by metrics_http_stop */
    pthread_t thread;
    pthread_mutex_t lock; /* guards cur and every snap's refs */
    struct snap *cur;     /* the text served; NULL before the first publish */
    unsigned port;
    long long accept_paused_until;
    struct conn conns[MAX_CONNS];
};

static long long now_ms(void) {
    return (long long)(gs_now_ns() / 1000000);
}

static void snap_unref(struct metrics_http *m, struct snap *s) {
    if (!s)
        return;
    pthread_mutex_lock(&m->lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&m->lock);
    if (last)
        free(s);
}

static void phase(struct conn *c, int state, long long ms) {
    c->state = state;
    c->since = now_ms();
    c->deadline = c->since + ms;
}

static void release_response(struct metrics_http *m, struct conn *c) {
    snap_unref(m, c->body);
    c->body = NULL;
    c->body_ptr = NULL;
    c->head_len = c->body_len = c->sent = 0;
}

static void conn_close(struct metrics_http *m, struct conn *c) {
    close(c->fd);
    release_response(m, c);
    c->fd = -1;
    c->in_len = 0;
    c->close_after = false;
    c->served = 0;
}

/* Starts sending a response (body: a text of body_len bytes, held by ref when from a snap). */
static void respond(struct conn *c, int code, const char *reason, const char *extra, const char *body,
                    size_t body_len, struct snap *ref, bool head_only, bool keep_alive_10) {
    char date[64];
    struct tm tm;
    time_t t = time(NULL);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&t, &tm));
    int n = snprintf(c->head, sizeof(c->head),
                     "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: gpuslice\r\nContent-Length: %zu\r\n%s%s\r\n", code,
                     reason, date, body_len, extra,
                     c->close_after    ? "Connection: close\r\n"
                     : keep_alive_10   ? "Connection: keep-alive\r\n" /* RFC 9112 §9.3: 1.0 needs it */
                                       : "");
    c->head_len = n > 0 && (size_t)n < sizeof(c->head) ? (size_t)n : 0;
    c->body = ref;
    c->body_ptr = body;
    c->body_len = head_only ? 0 : body_len;
    c->sent = 0;
    phase(c, WRITING, PHASE_MS);
}

static bool known_method(const char *m) {
    static const char *const known[] = { "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT" };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(m, known[i]) == 0)
            return true;
    return false;
}

static void serve_request(struct metrics_http *m, struct conn *c, const struct gs_http_head *h) {
    static const char not_found[] = "gpuslice serves /metrics only\n";
    bool get = strcmp(h->method, "GET") == 0, head = strcmp(h->method, "HEAD") == 0;
    c->close_after = !h->keep_alive || h->has_body; /* bodies are not read: the stream ends here */
    bool ka10 = h->minor == 0 && h->keep_alive;
    c->served++;
    if (!get && !head) {
        if (known_method(h->method))
            respond(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", "", 0, NULL, false, ka10);
        else
            respond(c, 501, "Not Implemented", "", "", 0, NULL, false, ka10);
        return;
    }
    if (strcmp(h->path, "/metrics") != 0) {
        respond(c, 404, "Not Found", "Content-Type: text/plain; charset=utf-8\r\n", not_found,
                sizeof(not_found) - 1, NULL, head, ka10);
        return;
    }
    pthread_mutex_lock(&m->lock);
    struct snap *s = m->cur;
    if (s)
        s->refs++;
    pthread_mutex_unlock(&m->lock);
    respond(c, 200, "OK", "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n", s ? s->text : "",
            s ? s->len : 0, s, head, ka10);
}

/* A request head that cannot be served: answer with the error and close. */
static void reject(struct conn *c, int err) {
    c->close_after = true;
    switch (err) {
    case -EPROTONOSUPPORT: respond(c, 505, "HTTP Version Not Supported", "", "", 0, NULL, false, false); break;
    case -ENAMETOOLONG: respond(c, 414, "URI Too Long", "", "", 0, NULL, false, false); break;
    case -EOPNOTSUPP: respond(c, 501, "Not Implemented", "", "", 0, NULL, false, false); break;
    case -E2BIG: respond(c, 431, "Request Header Fields Too Large", "", "", 0, NULL, false, false); break;
    default: respond(c, 400, "Bad Request", "", "", 0, NULL, false, false); break;
    }
}

/* Parses what has arrived; when a whole head is there, starts its response. */
static void process_input(struct metrics_http *m, struct conn *c) {
    if (c->state != READING || c->in_len == 0)
        return;
    struct gs_http_head h;
    int n = gs_http_parse_head(c->in, c->in_len, &h);
    if (n > 0) {
        serve_request(m, c, &h);
        memmove(c->in, c->in + n, c->in_len - (size_t)n); /* a pipelined next request stays */
        c->in_len -= (size_t)n;
    } else if (n < 0) {
        reject(c, n);
    } else if (c->in_len == sizeof(c->in)) {
        reject(c, -E2BIG);
    }
}

static void on_readable(struct metrics_http *m, struct conn *c) {
    if (c->state == DRAINING) {
        ssize_t n = recv(c->fd, c->in, sizeof(c->in), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            conn_close(m, c);
        return;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(m, c);
        return;
    }
    if (n > 0) {
        if (c->in_len == 0) /* a new head starts: its own 10 s, not extended by what follows */
            phase(c, READING, PHASE_MS);
        c->in_len += (size_t)n;
        process_input(m, c);
    }
}

static void on_writable(struct metrics_http *m, struct conn *c) {
    struct iovec iov[2];
    int n_iov = 0;
    size_t total = c->head_len + c->body_len;
    if (c->sent < c->head_len)
        iov[n_iov++] = (struct iovec){ c->head + c->sent, c->head_len - c->sent };
    if (c->body_len) {
        size_t off = c->sent > c->head_len ? c->sent - c->head_len : 0;
        iov[n_iov++] = (struct iovec){ (char *)c->body_ptr + off, c->body_len - off };
    }
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n_iov };
    ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(m, c);
        return;
    }
    c->sent += (size_t)n;
    if (c->sent < total)
        return;
    release_response(m, c);
    if (c->close_after) {
        /* Closing with unread input would reset the connection, and the client could lose the
         * response (RFC 9112 §9.6): shut the write side and drain until the client closes. */
        shutdown(c->fd, SHUT_WR);
        phase(c, DRAINING, LINGER_MS);
        return;
    }
    phase(c, READING, PHASE_MS); /* waiting for the next request */
    process_input(m, c);
}

static struct conn *free_slot(struct metrics_http *m) {
    for (int i = 0; i < MAX_CONNS; i++)
        if (m->conns[i].fd < 0)
            return &m->conns[i];
    return NULL;
}

/* How readily a connection gives up its slot: one draining after its last response first, then
 * one with half a request head (a slow or hostile client), then an idle one that never sent a
 * request, then an idle keep-alive one; never one being answered (-1). */
static int eviction_rank(const struct conn *c) {
    if (c->state == DRAINING)
        return 0;
    if (c->state != READING)
        return -1;
    return c->in_len ? 1 : c->served ? 3 : 2;
}

/* The connection that makes room for a new one when all are taken, or NULL when every one is
 * being answered. What has arrived on each connection is read first, so one whose request is
 * complete is answered (and no longer a candidate) rather than evicted with its request
 * waiting; a connection that closed frees its slot. Among the candidates of the lowest rank, the
 * one whose phase started longest ago. */
static struct conn *victim(struct metrics_http *m) {
    for (int i = 0; i < MAX_CONNS; i++)
        if (m->conns[i].fd >= 0 && m->conns[i].state != WRITING)
            on_readable(m, &m->conns[i]);
    struct conn *best = free_slot(m);
    if (best)
        return NULL; /* a slot freed itself: the caller finds it */
    int best_rank = 4;
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &m->conns[i];
        int rank = eviction_rank(c);
        if (rank >= 0 && (rank < best_rank || (rank == best_rank && c->since < best->since))) {
            best = c;
            best_rank = rank;
        }
    }
    return best;
}

static void accept_one(struct metrics_http *m) {
    int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        /* Out of descriptors or memory, the connection stays queued and the socket readable:
         * stop looking at it for a while rather than spin. */
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            m->accept_paused_until = now_ms() + ACCEPT_PAUSE_MS;
        return;
    }
    struct conn *slot = free_slot(m);
    if (!slot) {
        if ((slot = victim(m)) != NULL)
            conn_close(m, slot);
        else
            slot = free_slot(m);
    }
    if (!slot) { /* every connection is being answered: this one waits for none of them */
        close(fd);
        return;
    }
    slot->fd = fd;
    phase(slot, READING, PHASE_MS);
}

static void *serve(void *arg) {
    struct metrics_http *m = arg;
    for (;;) {
        struct pollfd p[2 + MAX_CONNS];
        int idx[MAX_CONNS];
        int np = 0, nc = 0;
        long long now = now_ms(), next = now + PHASE_MS;
        p[np++] = (struct pollfd){ .fd = m->wake[0], .events = POLLIN };
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *c = &m->conns[i];
            if (c->fd < 0)
                continue;
            if (c->deadline <= now) {
                conn_close(m, c);
                continue;
            }
            if (c->deadline < next)
                next = c->deadline;
            idx[nc++] = i;
            p[np++] = (struct pollfd){ .fd = c->fd, .events = c->state == WRITING ? POLLOUT : POLLIN };
        }
        bool listening = m->accept_paused_until <= now;
        if (listening)
            p[np++] = (struct pollfd){ .fd = m->lfd, .events = POLLIN };
        else if (m->accept_paused_until < next)
            next = m->accept_paused_until;
        int r = poll(p, (nfds_t)np, (int)(next - now));
        if (r < 0 && errno != EINTR) {
            log_warn("Metrics server: poll: %s; retrying in 100 ms", strerror(errno));
            usleep(100000);
            continue;
        }
        if (r <= 0)
            continue;
        if (p[0].revents)
            break;
        for (int k = 0; k < nc; k++) {
            struct conn *c = &m->conns[idx[k]];
            short ev = p[1 + k].revents;
            if (!ev || c->fd < 0)
                continue;
            if (c->state == WRITING)
                on_writable(m, c);
            else
                on_readable(m, c);
        }
        if (listening && p[np - 1].revents & POLLIN)
            accept_one(m);
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (m->conns[i].fd >= 0)
            conn_close(m, &m->conns[i]);
    return NULL;
}

struct metrics_http *metrics_http_start(const char *addr, char *err, size_t errlen) {
    const char *colon = strrchr(addr, ':');
    char host[64] = "";
    char *end;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || colon[1] == '\0' || *end || port > 65535 || (size_t)(colon - addr) >= sizeof(host)) {
        snprintf(err, errlen, "metrics address '%s': expected HOST:PORT or :PORT", addr);
        return NULL;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    if (host[0] && inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
        snprintf(err, errlen, "metrics address '%s': '%s' is not an IPv4 address", addr, host);
        return NULL;
    }
    struct metrics_http *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->wake[0] = m->wake[1] = -1;
    for (int i = 0; i < MAX_CONNS; i++)
        m->conns[i].fd = -1;
    pthread_mutex_init(&m->lock, NULL);
    int one = 1;
    m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->lfd < 0 || setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(m->lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(m->lfd, 64) < 0) {
        snprintf(err, errlen, "cannot serve metrics on %s: %s", addr, strerror(errno));
        goto fail;
    }
    socklen_t sl = sizeof(sin);
    if (getsockname(m->lfd, (struct sockaddr *)&sin, &sl) < 0 || pipe2(m->wake, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "cannot serve metrics on %s: %s", addr, strerror(errno));
        goto fail;
    }
    m->port = ntohs(sin.sin_port);
    int r = pthread_create(&m->thread, NULL, serve, m);
    if (r) {
        snprintf(err, errlen, "cannot serve metrics on %s: %s", addr, strerror(r));
        goto fail;
    }
    return m;
fail:
    if (m->lfd >= 0)
        close(m->lfd);
    if (m->wake[0] >= 0) {
        close(m->wake[0]);
        close(m->wake[1]);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
    return NULL;
}

unsigned metrics_http_port(const struct metrics_http *m) {
    return m->port;
}

void metrics_http_publish(struct metrics_http *m, const char *text, size_t len) {
    pthread_mutex_lock(&m->lock);
    struct snap *s = m->cur;
    if (s && s->refs == 1 && s->cap >= len) { /* no response holds it: rewritten in place */
        memcpy(s->text, text, len);
        s->len = len;
        pthread_mutex_unlock(&m->lock);
        return;
    }
    pthread_mutex_unlock(&m->lock);
    struct snap *n = malloc(sizeof(*n) + len + 1);
    if (!n)
        return;
    n->refs = 1;
    n->cap = n->len = len;
    memcpy(n->text, text, len);
    pthread_mutex_lock(&m->lock);
    struct snap *old = m->cur;
    m->cur = n;
    pthread_mutex_unlock(&m->lock);
    snap_unref(m, old);
}

void metrics_http_stop(struct metrics_http *m) {
    if (!m)
        return;
    ssize_t w = write(m->wake[1], "x", 1);
    (void)w;
    pthread_join(m->thread, NULL);
    close(m->lfd);
    close(m->wake[0]);
    close(m->wake[1]);
    snap_unref(m, m->cur);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
