/* http_client.h: a blocking HTTP/1.1 client on loopback for the tests of src/httpd and of the
 * extender's server (test_httpd.c, test_extender_server.c): one request at a time on a
 * connection, a response read whole (its Content-Length), every wait bounded (10 s). */
#ifndef GS_TEST_HTTP_CLIENT_H
#define GS_TEST_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* A connection to 127.0.0.1:port, or -1. */
static inline int hc_connect(unsigned port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = { .tv_sec = 10 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends a request (body NULL: none); 0 or -1. */
static inline int hc_send(int fd, const char *method, const char *path, const char *body) {
    char head[512];
    int n = body ? snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", method,
                            path, strlen(body))
                 : snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: t\r\n\r\n", method, path);
    if (n <= 0 || (size_t)n >= sizeof(head) || send(fd, head, (size_t)n, MSG_NOSIGNAL) != n)
        return -1;
    if (body && send(fd, body, strlen(body), MSG_NOSIGNAL) != (ssize_t)strlen(body))
        return -1;
    return 0;
}

/* Reads one response into buf (NUL-terminated): its status, *body pointing at its body in buf.
 * Returns the body's length, or -1 (closed, timed out, malformed, larger than cap). */
static inline long hc_read(int fd, char *buf, size_t cap, int *status, const char **body) {
    size_t have = 0;
    for (;;) {
        buf[have] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strstr(buf, "Content-Length: ");
            if (sscanf(buf, "HTTP/1.1 %d", status) != 1 || !cl || cl > end)
                return -1;
            size_t len = (size_t)strtoul(cl + 16, NULL, 10), at = (size_t)(end + 4 - buf);
            if (at + len >= cap)
                return -1;
            while (have < at + len) {
                ssize_t n = recv(fd, buf + have, at + len - have, 0);
                if (n <= 0)
                    return -1;
                have += (size_t)n;
            }
            buf[at + len] = '\0';
            *body = buf + at;
            return (long)len;
        }
        if (have + 1 >= cap)
            return -1;
        /* one byte at a time past the head would be slow; a whole response fits, and the
         * tests send one request per round trip, so what arrives is this response only */
        ssize_t n = recv(fd, buf + have, cap - 1 - have, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
}

/* A request and its response on a fresh connection; the status, or -1. */
static inline int hc_roundtrip(unsigned port, const char *method, const char *path, const char *body, char *buf,
                               size_t cap, const char **resp_body) {
    int fd = hc_connect(port), status = -1;
    if (fd >= 0 && hc_send(fd, method, path, body) == 0 && hc_read(fd, buf, cap, &status, resp_body) < 0)
        status = -1;
    if (fd >= 0)
        close(fd);
    return status;
}

static inline void hc_sleep_ms(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

#endif
