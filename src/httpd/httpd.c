/* httpd.c: HTTP/1.x on one thread of its own with poll(2), for the agent's metrics endpoint
 * (src/agent/metrics_http.c) and the scheduler extender (src/extender/server.c).
 *
 * A scrape endpoint and an extender need little of HTTP: a few paths, bodies with a length. This
 * server does that and no more, so the agent links no HTTP library (libmicrohttpd brought GnuTLS
 * and its dependencies into the agent's memory, about 2 MiB, for TLS it never used). Requests are
 * read with the pure parser in src/core/httphead.c (fuzzed); keep-alive and pipelining work; the
 * handler answers each request on this thread, or defers the answer (httpd_defer): the connection
 * waits in the DEFERRED state, which this thread polls only for the client's close, and the
 * completing thread (httpd_complete) queues the answer and wakes this one through a pipe, which
 * starts sending it. As with a blocked client of Redis' ae.c loop, a connection waiting for its
 * answer costs this thread nothing.
 *
 * Limits, so that no client can keep the others out: each phase of a connection has a fixed
 * deadline that progress does not extend (10 s to send a request head and its body from the first
 * byte, or between requests; 10 s to take a response; 2 s of draining before a close); at most 16
 * connections, and a 17th makes room by evicting one (victim(): never a connection whose request
 * has arrived, a draining or half-sent one first, then idle ones, the oldest first; when all 16
 * are being answered, the 17th is closed instead). At most 8 answers are deferred at once
 * (HTTPD_MAX_DEFERRED), so that a slow round trip elsewhere cannot hold all 16 slots; a deferred
 * connection gets 30 s for its answer (then it is closed and the answer dropped when it comes). A
 * body longer than the configured bound is refused (413) before it is read. Responses hold their
 * body by reference (the handler's release).
 *
 * TLS (tls.c, with httpd_config.tls): the same state machine over OpenSSL on the non-blocking
 * socket. The handshake is made by the connection's first read, under the head's deadline; a read
 * or write that TLS makes wait for the other direction polls for that one (conn.want); bytes
 * OpenSSL decrypted beyond what a read took are served without waiting for poll. A handshake that
 * fails (a client certificate the client CA does not verify, not TLS at all) closes the
 * connection, logged at most once every 10 s with the number left out. */
#include "httpd/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/httphead.h"
#include "httpd/tls.h"
#include "util/log.h"
#include "util/util.h"

#define MAX_CONNS 16
#define IN_MAX 8192            /* the longest request head taken (431 beyond) */
#define PHASE_MS 10000         /* to send a head, to wait between requests, to take a response */
#define LINGER_MS 2000         /* how long unread input is drained before a close */
#define ACCEPT_PAUSE_MS 100    /* after accept failed for want of descriptors or memory */
#define DEFER_MS 30000         /* for a deferred answer to come */
#define EXTRA_MAX 256          /* a deferred answer's extra header fields */
#define TLS_LOG_MS 10000       /* at most one failed handshake logged in this time */

struct conn {
    struct httpd *m;
    int fd; /* -1: free slot */
    SSL *ssl;   /* with TLS */
    short want; /* the event TLS waits for before the state's operation can go on (0: the state's) */
    bool client_known, client_verified; /* the TLS client's certificate, once the handshake is done */
    char client_cn[128];
    enum { READING, BODY, WRITING, DRAINING, DEFERRED } state;
    unsigned gen; /* counts the slot's connections: a deferred answer finds its own or none */
    struct httpd_deferred *deferred; /* the handler's httpd_defer, while it runs */
    bool head_only, ka10; /* of the request being answered (a deferred answer's head) */
    long long since, deadline; /* when this phase started, when it must end */
    size_t in_len;
    char head[512]; /* the response's status line and header fields */
    size_t head_len;
    void (*release)(void *ref); /* the response's body and what holds it */
    void *ref;
    const char *body_ptr;
    size_t body_len;
    struct gs_http_head req;  /* the request whose body is being read (BODY) */
    char *req_body;           /* its body: req_len of req.content_length bytes */
    size_t req_len;
    size_t sent; /* of head_len + body_len */
    bool close_after;
    unsigned served; /* requests answered on this connection */
    char in[IN_MAX];
};

struct httpd_deferred {
    struct httpd *m;
    struct conn *c;
    unsigned gen;
    struct httpd_response r;
    char extra[EXTRA_MAX];
    struct httpd_deferred *next;
};

struct httpd {
    int lfd;
    int wake[2];  /* written by httpd_stop */
    int ready[2]; /* written by httpd_complete */
    pthread_mutex_t mu; /* guards done and outstanding (httpd_complete's threads and this one) */
    pthread_cond_t drained;
    struct httpd_deferred *done, **done_tail; /* answers completed, for the thread to send */
    unsigned outstanding; /* deferred, not completed yet */
    pthread_t thread;
    struct httpd_config cfg;
    char what[32];
    unsigned port;
    long long accept_paused_until;
    SSL_CTX *tls;
    long long tls_logged_at; /* the last failed handshake logged, and those left out since */
    unsigned tls_unlogged;
    struct conn conns[MAX_CONNS];
};

static long long now_ms(void) {
    return (long long)(gs_now_ns() / 1000000);
}

static void phase(struct conn *c, int state, long long ms) {
    c->state = state;
    c->since = now_ms();
    c->deadline = c->since + ms;
}

static void release_response(struct conn *c) {
    if (c->release)
        c->release(c->ref);
    c->release = NULL;
    c->ref = NULL;
    c->body_ptr = NULL;
    c->head_len = c->body_len = c->sent = 0;
}

static void free_request_body(struct conn *c) {
    free(c->req_body);
    c->req_body = NULL;
    c->req_len = 0;
}

static void conn_close(struct conn *c) {
    httpd_tls_close(c->ssl, false);
    c->ssl = NULL;
    c->want = 0;
    c->client_known = c->client_verified = false;
    c->client_cn[0] = '\0';
    close(c->fd);
    release_response(c);
    free_request_body(c);
    c->fd = -1;
    c->gen++; /* its deferred answer, if any, is dropped when it comes */
    c->in_len = 0;
    c->close_after = false;
    c->served = 0;
}

static const char *reason_of(int code) {
    switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return code >= 500 ? "Internal Server Error" : code >= 400 ? "Bad Request" : "OK";
    }
}

/* A failed handshake or a bad record, logged at most once in TLS_LOG_MS. */
static void tls_failed(struct httpd *m, const char *why) {
    long long now = now_ms();
    if (m->tls_logged_at && now - m->tls_logged_at < TLS_LOG_MS) {
        m->tls_unlogged++;
        return;
    }
    if (m->tls_unlogged)
        log_warn("HTTP server (%s): TLS: %s (and %u more connections refused since the last)", m->what, why,
                 m->tls_unlogged);
    else
        log_warn("HTTP server (%s): TLS: %s", m->what, why);
    m->tls_logged_at = now;
    m->tls_unlogged = 0;
}

/* recv(2) on the connection, through TLS where it has it. */
static ssize_t conn_recv(struct conn *c, void *buf, size_t len) {
    if (!c->ssl)
        return recv(c->fd, buf, len, 0);
    char why[256] = "";
    short want = 0;
    ssize_t n = httpd_tls_read(c->ssl, buf, len, &want, why, sizeof(why));
    int e = errno;
    c->want = want == POLLOUT ? POLLOUT : 0; /* a read waits for input anyway */
    if (n < 0 && e != EAGAIN)
        tls_failed(c->m, why);
    errno = e;
    return n;
}

/* sendmsg(2) of iov on the connection, through TLS where it has it (one record a piece). */
static ssize_t conn_send(struct conn *c, const struct iovec *iov, int n_iov) {
    if (!c->ssl) {
        struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n_iov };
        return sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    }
    ssize_t sent = 0;
    for (int k = 0; k < n_iov; k++) {
        char why[256] = "";
        short want = 0;
        ssize_t w = httpd_tls_write(c->ssl, iov[k].iov_base, iov[k].iov_len, &want, why, sizeof(why));
        int e = errno;
        c->want = want == POLLIN ? POLLIN : 0; /* a write waits to be writable anyway */
        if (w < 0 && e != EAGAIN)
            tls_failed(c->m, why);
        if (w < 0) {
            errno = e;
            return sent ? sent : -1;
        }
        sent += w;
        if ((size_t)w < iov[k].iov_len)
            break;
    }
    return sent;
}

/* Starts sending a response (its body held until sent, then released). */
static void respond(struct conn *c, const struct httpd_response *r, bool head_only, bool keep_alive_10) {
    char date[64], ctype[160] = "";
    struct tm tm;
    time_t t = time(NULL);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&t, &tm));
    int code = r->status ? r->status : 500;
    if (r->content_type)
        snprintf(ctype, sizeof(ctype), "Content-Type: %s\r\n", r->content_type);
    int n = snprintf(c->head, sizeof(c->head),
                     "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: gpuslice\r\nContent-Length: %zu\r\n%s%s%s\r\n", code,
                     reason_of(code), date, r->body_len, ctype, r->extra ? r->extra : "",
                     c->close_after    ? "Connection: close\r\n"
                     : keep_alive_10   ? "Connection: keep-alive\r\n" /* RFC 9112 §9.3: 1.0 needs it */
                                       : "");
    c->head_len = n > 0 && (size_t)n < sizeof(c->head) ? (size_t)n : 0;
    c->release = r->release;
    c->ref = r->ref;
    c->body_ptr = r->body;
    c->body_len = head_only || !r->body ? 0 : r->body_len;
    c->sent = 0;
    phase(c, WRITING, PHASE_MS);
}

static void respond_status(struct conn *c, int code) {
    struct httpd_response r = { .status = code };
    respond(c, &r, false, false);
}

/* Whether the TLS client's certificate verified, found once per connection (after the handshake). */
static bool client_check(struct httpd *m, struct conn *c) {
    if (c->ssl && !c->client_known) {
        c->client_verified = httpd_tls_client(c->ssl, m->cfg.tls->client_names, c->client_cn, sizeof(c->client_cn));
        c->client_known = true;
    }
    return c->client_verified;
}

/* Hands a request (its body read, or none) to the handler and starts the answer. */
static void serve_request(struct httpd *m, struct conn *c, const struct gs_http_head *h, const char *body,
                          size_t body_len) {
    /* a body that was not read ends the stream here */
    c->close_after = !h->keep_alive || (h->has_body && !body);
    bool ka10 = h->minor == 0 && h->keep_alive;
    c->served++;
    c->head_only = strcmp(h->method, "HEAD") == 0;
    c->ka10 = ka10;
    c->deferred = NULL;
    client_check(m, c);
    struct httpd_request req = { h, body, body_len, c, c->client_verified, c->client_cn };
    struct httpd_response r = { 0 };
    m->cfg.handler(m->cfg.ctx, &req, &r);
    if (c->deferred) { /* httpd_complete answers */
        c->deferred = NULL;
        phase(c, DEFERRED, DEFER_MS);
        return;
    }
    respond(c, &r, c->head_only, ka10);
}

struct httpd_deferred *httpd_defer(const struct httpd_request *req) {
    struct conn *c = req->conn;
    struct httpd *m = c->m;
    if (c->deferred)
        return c->deferred;
    struct httpd_deferred *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    pthread_mutex_lock(&m->mu);
    bool room = m->outstanding < HTTPD_MAX_DEFERRED;
    m->outstanding += room;
    pthread_mutex_unlock(&m->mu);
    if (!room) {
        free(d);
        return NULL;
    }
    *d = (struct httpd_deferred){ .m = m, .c = c, .gen = c->gen };
    c->deferred = d;
    return d;
}

void httpd_complete(struct httpd_deferred *d, const struct httpd_response *r) {
    struct httpd *m = d->m;
    d->r = *r;
    d->r.extra = NULL;
    if (r->extra && strlen(r->extra) < sizeof(d->extra)) {
        memcpy(d->extra, r->extra, strlen(r->extra) + 1);
        d->r.extra = d->extra;
    } else if (r->extra) {
        log_warn("HTTP server (%s): a deferred answer's header fields (%zu bytes) left out", m->what,
                 strlen(r->extra));
    }
    d->next = NULL;
    pthread_mutex_lock(&m->mu);
    *m->done_tail = d;
    m->done_tail = &d->next;
    m->outstanding--;
    /* under the lock: httpd_stop frees m once outstanding is 0 and it holds the lock again */
    ssize_t w = write(m->ready[1], "x", 1); /* full (EAGAIN): the thread is woken already */
    (void)w;
    pthread_cond_broadcast(&m->drained);
    pthread_mutex_unlock(&m->mu);
}

/* The answers completed since the last call: each sent on its connection if that is still the one
 * that waits for it, else dropped. */
static void send_completed(struct httpd *m) {
    char buf[64];
    while (read(m->ready[0], buf, sizeof(buf)) > 0) {
    }
    pthread_mutex_lock(&m->mu);
    struct httpd_deferred *d = m->done;
    m->done = NULL;
    m->done_tail = &m->done;
    pthread_mutex_unlock(&m->mu);
    while (d) {
        struct httpd_deferred *next = d->next;
        struct conn *c = d->c;
        if (c->fd >= 0 && c->gen == d->gen && c->state == DEFERRED)
            respond(c, &d->r, c->head_only, c->ka10);
        else if (d->r.release)
            d->r.release(d->r.ref);
        free(d);
        d = next;
    }
}

/* A request that cannot be served: answer with the error and close. */
static void reject(struct conn *c, int err) {
    c->close_after = true;
    switch (err) {
    case -EPROTONOSUPPORT: respond_status(c, 505); break;
    case -ENAMETOOLONG: respond_status(c, 414); break;
    case -EOPNOTSUPP: respond_status(c, 501); break;
    case -E2BIG: respond_status(c, 431); break;
    case -EFBIG: respond_status(c, 413); break;
    case -ENOMSG: respond_status(c, 411); break;
    case -ENOMEM: respond_status(c, 503); break;
    default: respond_status(c, 400); break;
    }
}

/* The body of c->req is complete: serve it. */
static void body_done(struct httpd *m, struct conn *c) {
    serve_request(m, c, &c->req, c->req_body ? c->req_body : "", c->req_len);
    free_request_body(c);
}

/* A head has arrived whose body is to be read (cfg.max_body > 0): its bytes already received
 * (after the head, in c->in) start the body; the rest is read in the BODY state, under the same
 * deadline as the head. Returns 0 or the error to reject the request with. */
static int start_body(struct httpd *m, struct conn *c, const struct gs_http_head *h, size_t head_len) {
    if (h->chunked)
        return -ENOMSG;
    if (h->content_length > m->cfg.max_body)
        return -EFBIG;
    size_t want = (size_t)h->content_length;
    c->req_body = malloc(want ? want : 1);
    if (!c->req_body)
        return -ENOMEM;
    c->req = *h;
    size_t have = c->in_len - head_len;
    size_t take = have < want ? have : want;
    memcpy(c->req_body, c->in + head_len, take);
    c->req_len = take;
    memmove(c->in, c->in + head_len + take, have - take); /* a pipelined next request stays */
    c->in_len = have - take;
    c->state = BODY; /* the head's deadline goes on */
    return 0;
}

/* Parses what has arrived; when a whole head (and its body) is there, starts its response. */
static void process_input(struct httpd *m, struct conn *c) {
    if (c->state != READING || c->in_len == 0)
        return;
    struct gs_http_head h;
    int n = gs_http_parse_head(c->in, c->in_len, &h);
    if (n > 0 && h.has_body && m->cfg.max_body > 0 && m->cfg.tls && m->cfg.bodies_need_client &&
        !client_check(m, c)) {
        /* nothing of an unverified client's body is held: its head alone is served (the handler
         * refuses it), and the connection closes after the answer */
        serve_request(m, c, &h, NULL, 0);
        c->in_len = 0;
    } else if (n > 0 && h.has_body && m->cfg.max_body > 0) {
        int r = start_body(m, c, &h, (size_t)n);
        if (r < 0)
            reject(c, r);
        else if (c->req_len == c->req.content_length)
            body_done(m, c);
    } else if (n > 0) {
        serve_request(m, c, &h, NULL, 0);
        memmove(c->in, c->in + n, c->in_len - (size_t)n); /* a pipelined next request stays */
        c->in_len -= (size_t)n;
    } else if (n < 0) {
        reject(c, n);
    } else if (c->in_len == sizeof(c->in)) {
        reject(c, -E2BIG);
    }
}

static void on_readable(struct httpd *m, struct conn *c) {
    if (c->state == DRAINING) {
        ssize_t n = recv(c->fd, c->in, sizeof(c->in), 0); /* after close_notify: the raw socket */
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            conn_close(c);
        return;
    }
    bool body = c->state == BODY;
    char *to = body ? c->req_body + c->req_len : c->in + c->in_len;
    size_t room = body ? (size_t)c->req.content_length - c->req_len : sizeof(c->in) - c->in_len;
    if (room == 0) /* DEFERRED with a full buffer of pipelined input: read after the answer */
        return;
    ssize_t n = conn_recv(c, to, room);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c); /* a deferred connection too: its answer is dropped when it comes */
        return;
    }
    if (n > 0 && c->state == DEFERRED) {
        c->in_len += (size_t)n; /* the next request, served after the answer */
    } else if (n > 0 && body) {
        c->req_len += (size_t)n;
        if (c->req_len == c->req.content_length)
            body_done(m, c);
    } else if (n > 0) {
        if (c->in_len == 0) /* a new head starts: its own 10 s, not extended by what follows */
            phase(c, READING, PHASE_MS);
        c->in_len += (size_t)n;
        process_input(m, c);
    }
}

static void on_writable(struct httpd *m, struct conn *c) {
    struct iovec iov[2];
    int n_iov = 0;
    size_t total = c->head_len + c->body_len;
    if (c->sent < c->head_len)
        iov[n_iov++] = (struct iovec){ c->head + c->sent, c->head_len - c->sent };
    if (c->body_len) {
        size_t off = c->sent > c->head_len ? c->sent - c->head_len : 0;
        iov[n_iov++] = (struct iovec){ (char *)c->body_ptr + off, c->body_len - off };
    }
    ssize_t n = conn_send(c, iov, n_iov);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(c);
        return;
    }
    c->sent += (size_t)n;
    if (c->sent < total)
        return;
    release_response(c);
    if (c->close_after) {
        /* Closing with unread input would reset the connection, and the client could lose the
         * response (RFC 9112 §9.6): shut the write side and drain until the client closes. */
        httpd_tls_close(c->ssl, true); /* TLS's close_notify first */
        c->ssl = NULL;
        shutdown(c->fd, SHUT_WR);
        phase(c, DRAINING, LINGER_MS);
        return;
    }
    phase(c, READING, PHASE_MS); /* waiting for the next request */
    process_input(m, c);
}

static struct conn *free_slot(struct httpd *m) {
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
    if (c->state == BODY)
        return 1;
    if (c->state != READING)
        return -1;
    return c->in_len ? 1 : c->served ? 3 : 2;
}

/* The connection that makes room for a new one when all are taken, or NULL when every one is
 * being answered. What has arrived on each connection is read first, so one whose request is
 * complete is answered (and no longer a candidate) rather than evicted with its request
 * waiting; a connection that closed frees its slot. Among the candidates of the lowest rank, the
 * one whose phase started longest ago. */
static struct conn *victim(struct httpd *m) {
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

static void accept_one(struct httpd *m) {
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
            conn_close(slot);
        else
            slot = free_slot(m);
    }
    if (!slot) { /* every connection is being answered: this one waits for none of them */
        close(fd);
        return;
    }
    if (m->tls && !(slot->ssl = httpd_tls_new(m->tls, fd))) {
        close(fd);
        return;
    }
    slot->fd = fd;
    phase(slot, READING, PHASE_MS);
}

/* Whether c has input OpenSSL decrypted and the state would read now (poll does not see it). */
static bool tls_buffered(const struct conn *c) {
    if (!c->ssl || c->want || (c->state != READING && c->state != BODY))
        return false;
    if (c->state == READING && c->in_len == sizeof(c->in))
        return false;
    return httpd_tls_pending(c->ssl);
}

static void *serve(void *arg) {
    struct httpd *m = arg;
    /* a TLS write to a peer gone raises SIGPIPE on this thread (OpenSSL writes without
     * MSG_NOSIGNAL): blocked here, the write fails with EPIPE instead */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    for (;;) {
        struct pollfd p[3 + MAX_CONNS];
        int idx[MAX_CONNS];
        bool buffered[MAX_CONNS];
        int np = 0, nc = 0;
        long long now = now_ms(), next = now + PHASE_MS;
        p[np++] = (struct pollfd){ .fd = m->wake[0], .events = POLLIN };
        p[np++] = (struct pollfd){ .fd = m->ready[0], .events = POLLIN };
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *c = &m->conns[i];
            if (c->fd < 0)
                continue;
            if (c->deadline <= now) {
                conn_close(c);
                continue;
            }
            if (c->deadline < next)
                next = c->deadline;
            buffered[nc] = tls_buffered(c);
            if (buffered[nc])
                next = now;
            idx[nc++] = i;
            short events = c->want                                               ? c->want
                           : c->state == WRITING                                 ? POLLOUT
                           : c->state == DEFERRED && c->in_len == sizeof(c->in) ? 0
                                                                                : POLLIN;
            p[np++] = (struct pollfd){ .fd = c->fd, .events = events };
        }
        bool listening = m->accept_paused_until <= now;
        if (listening)
            p[np++] = (struct pollfd){ .fd = m->lfd, .events = POLLIN };
        else if (m->accept_paused_until < next)
            next = m->accept_paused_until;
        int r = poll(p, (nfds_t)np, (int)(next - now));
        if (r < 0 && errno != EINTR) {
            log_warn("HTTP server (%s): poll: %s; retrying in 100 ms", m->what, strerror(errno));
            usleep(100000);
            continue;
        }
        if (r < 0)
            continue;
        if (p[0].revents)
            break;
        for (int k = 0; k < nc; k++) {
            struct conn *c = &m->conns[idx[k]];
            short ev = p[2 + k].revents;
            if ((!ev && !buffered[k]) || c->fd < 0)
                continue;
            if (c->state == DEFERRED && c->in_len == sizeof(c->in))
                conn_close(c); /* POLLHUP or POLLERR: nothing to answer any more */
            else if (c->state == WRITING)
                on_writable(m, c);
            else
                on_readable(m, c);
        }
        if (listening && p[np - 1].revents & POLLIN)
            accept_one(m);
        if (p[1].revents)
            send_completed(m);
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (m->conns[i].fd >= 0)
            conn_close(&m->conns[i]);
    return NULL;
}

struct httpd *httpd_start(const struct httpd_config *cfg, char *err, size_t errlen) {
    const char *addr = cfg->addr, *what = cfg->what ? cfg->what : "HTTP";
    const char *colon = strrchr(addr, ':');
    char host[64] = "";
    char *end;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (!colon || colon[1] == '\0' || *end || port > 65535 || (size_t)(colon - addr) >= sizeof(host)) {
        snprintf(err, errlen, "%s address '%s': expected HOST:PORT or :PORT", what, addr);
        return NULL;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    if (host[0] && inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
        snprintf(err, errlen, "%s address '%s': '%s' is not an IPv4 address", what, addr, host);
        return NULL;
    }
    struct httpd *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->wake[0] = m->wake[1] = m->ready[0] = m->ready[1] = -1;
    m->cfg = *cfg;
    snprintf(m->what, sizeof(m->what), "%s", what);
    for (int i = 0; i < MAX_CONNS; i++) {
        m->conns[i].fd = -1;
        m->conns[i].m = m;
    }
    m->done_tail = &m->done;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->drained, NULL);
    m->lfd = -1;
    if (cfg->tls && !(m->tls = httpd_tls_ctx(cfg->tls, what, err, errlen)))
        goto fail;
    int one = 1;
    m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->lfd < 0 || setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(m->lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(m->lfd, 64) < 0) {
        snprintf(err, errlen, "cannot serve %s on %s: %s", what, addr, strerror(errno));
        goto fail;
    }
    socklen_t sl = sizeof(sin);
    if (getsockname(m->lfd, (struct sockaddr *)&sin, &sl) < 0 || pipe2(m->wake, O_CLOEXEC) < 0 ||
        pipe2(m->ready, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "cannot serve %s on %s: %s", what, addr, strerror(errno));
        goto fail;
    }
    m->port = ntohs(sin.sin_port);
    int r = pthread_create(&m->thread, NULL, serve, m);
    if (r) {
        snprintf(err, errlen, "cannot serve %s on %s: %s", what, addr, strerror(r));
        goto fail;
    }
    return m;
fail:
    if (m->lfd >= 0)
        close(m->lfd);
    for (int i = 0; i < 2; i++) {
        if (m->wake[i] >= 0)
            close(m->wake[i]);
        if (m->ready[i] >= 0)
            close(m->ready[i]);
    }
    httpd_tls_ctx_free(m->tls);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->drained);
    free(m);
    return NULL;
}

bool httpd_addr_is_loopback(const char *addr) {
    const char *colon = strrchr(addr, ':');
    char host[64];
    if (!colon || (size_t)(colon - addr) >= sizeof(host) || colon == addr)
        return false;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

unsigned httpd_port(const struct httpd *m) {
    return m->port;
}

void httpd_stop(struct httpd *m) {
    if (!m)
        return;
    ssize_t w = write(m->wake[1], "x", 1);
    (void)w;
    pthread_join(m->thread, NULL);
    /* every connection is closed: the answers still to come are dropped as they come */
    pthread_mutex_lock(&m->mu);
    while (m->outstanding)
        pthread_cond_wait(&m->drained, &m->mu);
    pthread_mutex_unlock(&m->mu);
    send_completed(m);
    close(m->lfd);
    for (int i = 0; i < 2; i++) {
        close(m->wake[i]);
        close(m->ready[i]);
    }
    httpd_tls_ctx_free(m->tls);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->drained);
    free(m);
}
