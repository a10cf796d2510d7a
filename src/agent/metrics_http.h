/* metrics_http.h: serves the agent's latest metrics text on GET /metrics (HTTP/1.x on a thread of
 * its own). The agent renders the text; the server only hands out the last one published. */
#ifndef GS_METRICS_HTTP_H
#define GS_METRICS_HTTP_H

#include <stddef.h>

struct metrics_http;

/* addr: "HOST:PORT" or ":PORT" (all addresses); PORT 0 picks a free port. Returns NULL with the
 * reason in err. */
struct metrics_http *metrics_http_start(const char *addr, char *err, size_t errlen);
/* The port actually bound. */
unsigned metrics_http_port(const struct metrics_http *m);
/* Replaces the text served (copied). */
void metrics_http_publish(struct metrics_http *m, const char *text, size_t len);
void metrics_http_stop(struct metrics_http *m);

#endif
