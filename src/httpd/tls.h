/* tls.h: TLS for src/httpd's connections (OpenSSL), internal to src/httpd: the server's context
 * (its certificate and key, the CAs a client certificate must chain to) and a connection's reads
 * and writes on a non-blocking socket. Users of the server see struct httpd_tls (httpd.h). */
#ifndef GS_HTTPD_TLS_H
#define GS_HTTPD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "httpd/httpd.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

/* The context of t: TLS 1.2 or later, the server's certificate chain and key (checked to match),
 * client certificates asked for and verified against t->client_ca_file (a certificate that does
 * not verify ends the handshake; none at all is allowed, the request then unauthenticated). NULL
 * with the file and OpenSSL's reason in err. */
SSL_CTX *httpd_tls_ctx(const struct httpd_tls *t, const char *what, char *err, size_t errlen);
void httpd_tls_ctx_free(SSL_CTX *ctx);

/* A server-side connection on fd; NULL without memory. */
SSL *httpd_tls_new(SSL_CTX *ctx, int fd);
/* Sends close_notify (once, not waiting) and frees s. NULL is fine. */
void httpd_tls_close(SSL *s, bool notify);

/* SSL_read / SSL_write in recv(2)'s terms: >0 bytes, 0 the peer's end, -1 with errno EAGAIN (then
 * *want is the poll(2) event the connection waits for: POLLIN or POLLOUT) or another errno (EPROTO:
 * the handshake failed or a record was bad; the reason in err). The handshake is made by the
 * first read. */
ssize_t httpd_tls_read(SSL *s, void *buf, size_t len, short *want, char *err, size_t errlen);
ssize_t httpd_tls_write(SSL *s, const void *buf, size_t len, short *want, char *err, size_t errlen);
/* Bytes decrypted and not read yet (poll(2) does not see them). */
bool httpd_tls_pending(SSL *s);

/* Once the handshake is done: whether the client presented a certificate that verified and that
 * names one of names (NULL: any; matched as a DNS name in its subjectAltName, else its CN); its
 * subject's CN into cn. */
bool httpd_tls_client(SSL *s, const char *const *names, char *cn, size_t cnlen);

#endif
