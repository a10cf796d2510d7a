/* tls.c: TLS for src/httpd (tls.h) with OpenSSL. The context asks for a client certificate and
 * verifies one that is sent against the client CA file (OpenSSL's chain check, with the purpose
 * "TLS client": a certificate whose extended key usage leaves out clientAuth is refused); one
 * that does not verify ends the handshake with an alert. No session tickets and no renegotiation,
 * so that after the handshake a read only reads and a write only writes, except for what TLS
 * itself may ask (handled through *want). libssl is loaded with the first context (sslload.h). */
#include "httpd/tls.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "httpd/sslload.h"

/* OpenSSL's last error queue entry as text, the queue cleared. */
static void ossl_reason(char *to, size_t len) {
    unsigned long e = ERR_get_error();
    unsigned long last = e;
    while ((e = ERR_get_error()) != 0)
        last = e;
    if (last)
        ERR_error_string_n(last, to, len);
    else
        snprintf(to, len, "%s", "no reason given");
}

SSL_CTX *httpd_tls_ctx(const struct httpd_tls *t, const char *what, char *err, size_t errlen) {
    char why[256];
    if (!t->cert_file || !t->key_file || !t->client_ca_file) {
        snprintf(err, errlen, "%s: TLS needs a certificate, its key and a client CA file", what);
        return NULL;
    }
    if (gs_ssl_load(why, sizeof(why)) < 0) {
        snprintf(err, errlen, "cannot serve %s: %s", what, why);
        return NULL;
    }
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        ossl_reason(why, sizeof(why));
        snprintf(err, errlen, "%s: TLS: %s", what, why);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const char *file = t->cert_file;
    if (SSL_CTX_use_certificate_chain_file(ctx, file) != 1)
        goto fail;
    file = t->key_file;
    if (SSL_CTX_use_PrivateKey_file(ctx, file, SSL_FILETYPE_PEM) != 1)
        goto fail;
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ossl_reason(why, sizeof(why));
        snprintf(err, errlen, "cannot serve %s: TLS key %s does not match the certificate %s (%s)", what, t->key_file,
                 t->cert_file, why);
        SSL_CTX_free(ctx);
        return NULL;
    }
    file = t->client_ca_file;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(file);
    if (!names || SSL_CTX_load_verify_locations(ctx, file, NULL) != 1) {
        sk_X509_NAME_pop_free(names, X509_NAME_free);
        goto fail;
    }
    SSL_CTX_set_client_CA_list(ctx, names); /* the CAs named in the CertificateRequest */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_verify_depth(ctx, 4);
    return ctx;
fail:
    ossl_reason(why, sizeof(why));
    snprintf(err, errlen, "cannot serve %s: TLS file %s: %s%s", what, file, errno == ENOENT ? "no such file; " : "", why);
    SSL_CTX_free(ctx);
    return NULL;
}

void httpd_tls_ctx_free(SSL_CTX *ctx) {
    if (ctx) /* without TLS, libssl was never loaded */
        SSL_CTX_free(ctx);
}

SSL *httpd_tls_new(SSL_CTX *ctx, int fd) {
    SSL *s = SSL_new(ctx);
    if (!s)
        return NULL;
    if (SSL_set_fd(s, fd) != 1) {
        SSL_free(s);
        return NULL;
    }
    SSL_set_accept_state(s);
    return s;
}

void httpd_tls_close(SSL *s, bool notify) {
    if (!s)
        return;
    if (notify && SSL_is_init_finished(s))
        (void)SSL_shutdown(s); /* close_notify, not waiting for the peer's */
    SSL_free(s);
    ERR_clear_error();
}

/* r of SSL_read/SSL_write in recv(2)'s terms */
static ssize_t outcome(SSL *s, int r, short *want, char *err, size_t errlen) {
    if (r > 0) {
        *want = 0;
        return r;
    }
    int e = SSL_get_error(s, r);
    switch (e) {
    case SSL_ERROR_WANT_READ: *want = POLLIN; errno = EAGAIN; return -1;
    case SSL_ERROR_WANT_WRITE: *want = POLLOUT; errno = EAGAIN; return -1;
    case SSL_ERROR_ZERO_RETURN: ERR_clear_error(); return 0;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() != 0)
            break; /* OpenSSL's reason, below */
        if (errno == 0 || r == 0) /* an end without close_notify */
            return 0;
        snprintf(err, errlen, "%s", strerror(errno)); /* the socket's own error */
        return -1;
    default: break;
    }
    ossl_reason(err, errlen);
    errno = EPROTO;
    return -1;
}

ssize_t httpd_tls_read(SSL *s, void *buf, size_t len, short *want, char *err, size_t errlen) {
    ERR_clear_error();
    errno = 0;
    int n = len > 1u << 30 ? 1 << 30 : (int)len;
    return outcome(s, SSL_read(s, buf, n), want, err, errlen);
}

ssize_t httpd_tls_write(SSL *s, const void *buf, size_t len, short *want, char *err, size_t errlen) {
    ERR_clear_error();
    errno = 0;
    int n = len > 1u << 30 ? 1 << 30 : (int)len;
    return outcome(s, SSL_write(s, buf, n), want, err, errlen);
}

bool httpd_tls_pending(SSL *s) {
    return SSL_pending(s) > 0;
}

bool httpd_tls_client(SSL *s, const char *const *names, char *cn, size_t cnlen) {
    cn[0] = '\0';
    X509 *x = SSL_get0_peer_certificate(s);
    if (!x || SSL_get_verify_result(s) != X509_V_OK)
        return false;
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, (int)cnlen) < 0)
        cn[0] = '\0';
    if (!names || !names[0])
        return true;
    for (size_t k = 0; names[k]; k++)
        if (X509_check_host(x, names[k], strlen(names[k]), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, NULL) == 1)
            return true;
    return false;
}
