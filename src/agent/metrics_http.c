/* metrics_http.c: GET /metrics over libmicrohttpd. */
#include "agent/metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct metrics_http {
    struct MHD_Daemon *d;
    pthread_mutex_t lock;
    char *text;
    size_t len;
    unsigned port;
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)version, (void)upload, (void)upload_size;
    struct metrics_http *m = cls;
    if (!*state) { /* first call for this request: headers only */
        *state = m;
        return MHD_YES;
    }
    int code = MHD_HTTP_OK;
    struct MHD_Response *resp;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(url, "/metrics")) {
        static const char body[] = "gpuslice serves /metrics only\n";
        code = MHD_HTTP_NOT_FOUND;
        resp = MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    } else {
        pthread_mutex_lock(&m->lock);
        resp = MHD_create_response_from_buffer(m->len, m->text ? m->text : (void *)"", MHD_RESPMEM_MUST_COPY);
        pthread_mutex_unlock(&m->lock);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    }
    if (!resp)
        return MHD_NO;
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return r;
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
    pthread_mutex_init(&m->lock, NULL);
    m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, answer, m,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sin, MHD_OPTION_CONNECTION_LIMIT, 16U,
                            MHD_OPTION_CONNECTION_TIMEOUT, 10U, MHD_OPTION_END);
    if (!m->d) {
        snprintf(err, errlen, "cannot serve metrics on %s (address in use?)", addr);
        pthread_mutex_destroy(&m->lock);
        free(m);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : (unsigned)port;
    return m;
}

unsigned metrics_http_port(const struct metrics_http *m) {
    return m->port;
}

void metrics_http_publish(struct metrics_http *m, const char *text, size_t len) {
    char *copy = malloc(len + 1);
    if (!copy)
        return;
    memcpy(copy, text, len);
    copy[len] = '\0';
    pthread_mutex_lock(&m->lock);
    free(m->text);
    m->text = copy;
    m->len = len;
    pthread_mutex_unlock(&m->lock);
}

void metrics_http_stop(struct metrics_http *m) {
    if (!m)
        return;
    MHD_stop_daemon(m->d);
    pthread_mutex_destroy(&m->lock);
    free(m->text);
    free(m);
}
