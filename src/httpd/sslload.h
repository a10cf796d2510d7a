/* sslload.h: OpenSSL's libssl (and the libcrypto it needs) loaded when the first TLS server is
 * started, not at program start: every gpuslice command links src/httpd, and the agent, whose
 * metrics endpoint is plain HTTP, would map both (about 1.7 MB resident) for nothing. tls.c calls
 * OpenSSL through this table by the usual names (the macros below); include this header instead
 * of <openssl/ssl.h>. Internal to src/httpd. */
#ifndef GS_HTTPD_SSLLOAD_H
#define GS_HTTPD_SSLLOAD_H

#include <stddef.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct gs_ssl {
    const SSL_METHOD *(*TLS_server_method)(void);
    SSL_CTX *(*SSL_CTX_new)(const SSL_METHOD *m);
    void (*SSL_CTX_free)(SSL_CTX *c);
    uint64_t (*SSL_CTX_set_options)(SSL_CTX *c, uint64_t op);
    long (*SSL_CTX_ctrl)(SSL_CTX *c, int cmd, long larg, void *parg);
    int (*SSL_CTX_set_num_tickets)(SSL_CTX *c, size_t n);
    int (*SSL_CTX_use_certificate_chain_file)(SSL_CTX *c, const char *f);
    int (*SSL_CTX_use_PrivateKey_file)(SSL_CTX *c, const char *f, int type);
    int (*SSL_CTX_check_private_key)(const SSL_CTX *c);
    STACK_OF(X509_NAME) *(*SSL_load_client_CA_file)(const char *f);
    int (*SSL_CTX_load_verify_locations)(SSL_CTX *c, const char *f, const char *path);
    void (*SSL_CTX_set_client_CA_list)(SSL_CTX *c, STACK_OF(X509_NAME) *l);
    void (*SSL_CTX_set_verify)(SSL_CTX *c, int mode, SSL_verify_cb cb);
    void (*SSL_CTX_set_verify_depth)(SSL_CTX *c, int depth);
    SSL *(*SSL_new)(SSL_CTX *c);
    int (*SSL_set_fd)(SSL *s, int fd);
    void (*SSL_set_accept_state)(SSL *s);
    int (*SSL_is_init_finished)(const SSL *s);
    int (*SSL_shutdown)(SSL *s);
    void (*SSL_free)(SSL *s);
    int (*SSL_get_error)(const SSL *s, int r);
    int (*SSL_read)(SSL *s, void *buf, int n);
    int (*SSL_write)(SSL *s, const void *buf, int n);
    int (*SSL_pending)(const SSL *s);
    X509 *(*SSL_get0_peer_certificate)(const SSL *s);
    long (*SSL_get_verify_result)(const SSL *s);
    unsigned long (*ERR_get_error)(void);
    unsigned long (*ERR_peek_error)(void);
    void (*ERR_error_string_n)(unsigned long e, char *buf, size_t len);
    void (*ERR_clear_error)(void);
    void (*OPENSSL_sk_pop_free)(OPENSSL_STACK *st, void (*fn)(void *));
    void (*X509_NAME_free)(X509_NAME *n);
    int (*X509_NAME_get_text_by_NID)(const X509_NAME *n, int nid, char *buf, int len);
    X509_NAME *(*X509_get_subject_name)(const X509 *x);
    int (*X509_check_host)(X509 *x, const char *name, size_t len, unsigned int flags, char **peer);
};

extern struct gs_ssl gs_ssl;

/* Loads libssl (GPUSLICE_LIBSSL, else libssl.so.3) once per process. 0, or -ENOENT with why in
 * err. Thread-safe. */
int gs_ssl_load(char *err, size_t errlen);

#ifndef GS_SSL_TABLE_ONLY /* sslload.c names the fields themselves */
#define TLS_server_method (*gs_ssl.TLS_server_method)
#define SSL_CTX_new (*gs_ssl.SSL_CTX_new)
#define SSL_CTX_free (*gs_ssl.SSL_CTX_free)
#define SSL_CTX_set_options (*gs_ssl.SSL_CTX_set_options)
#define SSL_CTX_ctrl (*gs_ssl.SSL_CTX_ctrl)
#define SSL_CTX_set_num_tickets (*gs_ssl.SSL_CTX_set_num_tickets)
#define SSL_CTX_use_certificate_chain_file (*gs_ssl.SSL_CTX_use_certificate_chain_file)
#define SSL_CTX_use_PrivateKey_file (*gs_ssl.SSL_CTX_use_PrivateKey_file)
#define SSL_CTX_check_private_key (*gs_ssl.SSL_CTX_check_private_key)
#define SSL_load_client_CA_file (*gs_ssl.SSL_load_client_CA_file)
#define SSL_CTX_load_verify_locations (*gs_ssl.SSL_CTX_load_verify_locations)
#define SSL_CTX_set_client_CA_list (*gs_ssl.SSL_CTX_set_client_CA_list)
#define SSL_CTX_set_verify (*gs_ssl.SSL_CTX_set_verify)
#define SSL_CTX_set_verify_depth (*gs_ssl.SSL_CTX_set_verify_depth)
#define SSL_new (*gs_ssl.SSL_new)
#define SSL_set_fd (*gs_ssl.SSL_set_fd)
#define SSL_set_accept_state (*gs_ssl.SSL_set_accept_state)
#define SSL_is_init_finished (*gs_ssl.SSL_is_init_finished)
#define SSL_shutdown (*gs_ssl.SSL_shutdown)
#define SSL_free (*gs_ssl.SSL_free)
#define SSL_get_error (*gs_ssl.SSL_get_error)
#define SSL_read (*gs_ssl.SSL_read)
#define SSL_write (*gs_ssl.SSL_write)
#define SSL_pending (*gs_ssl.SSL_pending)
#define SSL_get0_peer_certificate (*gs_ssl.SSL_get0_peer_certificate)
#define SSL_get_verify_result (*gs_ssl.SSL_get_verify_result)
#define ERR_get_error (*gs_ssl.ERR_get_error)
#define ERR_peek_error (*gs_ssl.ERR_peek_error)
#define ERR_error_string_n (*gs_ssl.ERR_error_string_n)
#define ERR_clear_error (*gs_ssl.ERR_clear_error)
#define OPENSSL_sk_pop_free (*gs_ssl.OPENSSL_sk_pop_free)
#define X509_NAME_free (*gs_ssl.X509_NAME_free)
#define X509_NAME_get_text_by_NID (*gs_ssl.X509_NAME_get_text_by_NID)
#define X509_get_subject_name (*gs_ssl.X509_get_subject_name)
#define X509_check_host (*gs_ssl.X509_check_host)
#endif

#endif
