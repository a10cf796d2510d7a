/* metrics_http.c: GET /metrics over HTTP/1.x, on one thread of its own with poll(2).
 *
 * A scrape endpoint needs little of HTTP: one path, GET and HEAD, no bodies. This server does
 * that and no more, so the agent links no HTTP library (libmicrohttpd brought GnuTLS and its
 * dependencies into the agent's memory, about 2 MiB, for TLS it never used). Requests are read
 * with the pure parser in src/core/httphead.c (fuzzed); keep-alive and pipelining work, a
 * connection idle for 10 s is closed, and at most 16 connections are served at once (more wait
 * in the listen backlog). */
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
#include <time.h>
#include <unistd.h>

#include "core/httphead.h"

#define MAX_CONNS 16
#define IN_MAX 8192            /* the longest request head taken (431 beyond) */
#define IDLE_TIMEOUT_MS 10000
#define LINGER_MS 2000         /* how long unread input is drained before a close */

struct conn {
    int fd; /* -1: free slot */
    size_t in_len;
    char *out; /* response being sent, NULL while reading */
    size_t out_len, out_off;
    bool close_after;
    bool draining; /* response sent, write side shut: reading until the client closes */
    long long deadline;
    char in[IN_MAX];
};

struct metrics_http {
    int lfd;
    int wake[2]; /* written by metrics_http_stop */
    pthread_t thread;
    pthread_mutex_t lock; /* guards text and len */
    char *text; /* cap bytes */
    size_t len, cap;
    unsigned port;
    struct conn conns[MAX_CONNS];
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(struct conn *c) {
    close(c->fd);
    free(c->out);
    c->fd = -1;
    c->out = NULL;
    c->in_len = c->out_len = c->out_off = 0;
    c->close_after = c->draining = false;
}

/* Builds the response for one request into c->out. */
static int respond(struct conn *c, int code, const char *reason, const char *extra,
                   const char *body, size_t body_len, bool head_only) {
    char date[64];
    struct tm tm;
    time_t t = time(NULL);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&t, &tm));
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nDate: %s\r\nServer: gpuslice\r\nContent-Length: %zu\r\n%s%s\r\n", code,
                     reason, date, body_len, extra, c->close_after ? "Connection: close\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(head))
        return -EOVERFLOW;
    size_t total = (size_t)n + (head_only ? 0 : body_len);
    char *out = malloc(total ? total : 1);
    if (!out)
        return -ENOMEM;
    memcpy(out, head, (size_t)n);
    if (!head_only && body_len)
        memcpy(out + n, body, body_len);
    c->out = out;
    c->out_len = total;
    c->out_off = 0;
    return 0;
}

static int serve_request(struct metrics_http *m, struct conn *c, const struct gs_http_head *h) {
    static const char not_found[] = "gpuslice serves /metrics only\n";
    bool get = strcmp(h->method, "GET") == 0, head = strcmp(h->method, "HEAD") == 0;
    c->close_after = !h->keep_alive || h->has_body; /* bodies are not read: the stream ends here */
    if (!get && !head)
        return respond(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", "", 0, false);
    if (strcmp(h->path, "/metrics") != 0)
        return respond(c, 404, "Not Found", "Content-Type: text/plain; charset=utf-8\r\n", not_found,
                       sizeof(not_found) - 1, head);
    pthread_mutex_lock(&m->lock);
    int r = respond(c, 200, "OK", "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
                    m->text ? m->text : "", m->len, head);
    pthread_mutex_unlock(&m->lock);
    return r;
}

/* A request head that cannot be served: answer with the error and close. */
static int reject(struct conn *c, int err) {
    c->close_after = true;
    switch (err) {
    case -EPROTONOSUPPORT:
        return respond(c, 505, "HTTP Version Not Supported", "", "", 0, false);
    case -ENAMETOOLONG:
        return respond(c, 414, "URI Too Long", "", "", 0, false);
    case -EOPNOTSUPP:
        return respond(c, 501, "Not Implemented", "", "", 0, false);
    case -E2BIG:
        return respond(c, 431, "Request Header Fields Too Large", "", "", 0, false);
    default:
        return respond(c, 400, "Bad Request", "", "", 0, false);
    }
}

/* Parses what has arrived; when a whole head is there, starts its response. */
static void process_input(struct metrics_http *m, struct conn *c) {
    if (c->out || c->in_len == 0)
        return;
    struct gs_http_head h;
    int n = gs_http_parse_head(c->in, c->in_len, &h);
    int r;
    if (n > 0) {
        r = serve_request(m, c, &h);
        memmove(c->in, c->in + n, c->in_len - (size_t)n); /* a pipelined next request stays */
        c->in_len -= (size_t)n;
    } else if (n < 0) {
        r = reject(c, n);
    } else if (c->in_len == sizeof(c->in)) {
        r = reject(c, -E2BIG);
    } else {
        return;
    }
    if (r < 0)
        conn_close(c);
}

static void on_readable(struct metrics_http *m, struct conn *c) {
    if (c->draining) {
        ssize_t n = recv(c->fd, c->in, sizeof(c->in), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            conn_close(c);
        return;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
        return;
    }
    if (n > 0) {
        c->in_len += (size_t)n;
        c->deadline = now_ms() + IDLE_TIMEOUT_MS;
        process_input(m, c);
    }
}

static void on_writable(struct metrics_http *m, struct conn *c) {
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(c);
        return;
    }
    c->out_off += (size_t)n;
    c->deadline = now_ms() + IDLE_TIMEOUT_MS;
    if (c->out_off < c->out_len)
        return;
    free(c->out);
    c->out = NULL;
    if (c->close_after) {
        /* Closing with unread input would reset the connection, and the client could lose the
         * response (RFC 9112 §9.6): shut the write side and drain until the client closes. */
        shutdown(c->fd, SHUT_WR);
        c->draining = true;
        c->deadline = now_ms() + LINGER_MS;
        return;
    }
    process_input(m, c);
}

static void accept_one(struct metrics_http *m) {
    int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &m->conns[i];
        if (c->fd < 0) {
            c->fd = fd;
            c->deadline = now_ms() + IDLE_TIMEOUT_MS;
            return;
        }
    }
    close(fd); /* not reached: the listen socket is polled only while a slot is free */
}

static void *serve(void *arg) {
    struct metrics_http *m = arg;
    for (;;) {
        struct pollfd p[2 + MAX_CONNS];
        int idx[MAX_CONNS];
        int np = 0, nc = 0;
        long long now = now_ms(), next = now + IDLE_TIMEOUT_MS;
        p[np++] = (struct pollfd){ .fd = m->wake[0], .events = POLLIN };
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
            idx[nc++] = i;
            p[np++] = (struct pollfd){ .fd = c->fd, .events = c->out ? POLLOUT : POLLIN };
        }
        bool room = nc < MAX_CONNS;
        if (room)
            p[np++] = (struct pollfd){ .fd = m->lfd, .events = POLLIN };
        int r = poll(p, (nfds_t)np, (int)(next - now));
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (p[0].revents)
            break;
        for (int k = 0; k < nc; k++) {
            struct conn *c = &m->conns[idx[k]];
            short ev = p[1 + k].revents;
            if (!ev)
                continue;
            if (c->out && (ev & (POLLOUT | POLLERR | POLLHUP)))
                on_writable(m, c);
            else if (!c->out && (ev & (POLLIN | POLLERR | POLLHUP)))
                on_readable(m, c);
        }
        if (room && p[np - 1].revents & POLLIN)
            accept_one(m);
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (m->conns[i].fd >= 0)
            conn_close(&m->conns[i]);
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
    if (len + 1 > m->cap) { /* grown only: the text is republished every loop iteration */
        char *bigger = realloc(m->text, len + 1);
        if (!bigger) {
            pthread_mutex_unlock(&m->lock);
            return;
        }
        m->text = bigger;
        m->cap = len + 1;
    }
    memcpy(m->text, text, len);
    m->text[len] = '\0';
    m->len = len;
    pthread_mutex_unlock(&m->lock);
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
    pthread_mutex_destroy(&m->lock);
    free(m->text);
    free(m);
}
