/* sslload.c: libssl by dlopen, on first use (sslload.h). */
#define GS_SSL_TABLE_ONLY
#include "httpd/sslload.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct gs_ssl gs_ssl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[512];

/* each function of the table by its name, in the table's order */
#define F(name) { #name, (void **)&gs_ssl.name }
static const struct {
    const char *name;
    void **slot;
} table[] = {
    F(TLS_server_method), F(SSL_CTX_new), F(SSL_CTX_free), F(SSL_CTX_set_options), F(SSL_CTX_ctrl),
    F(SSL_CTX_set_num_tickets), F(SSL_CTX_use_certificate_chain_file), F(SSL_CTX_use_PrivateKey_file),
    F(SSL_CTX_check_private_key), F(SSL_load_client_CA_file), F(SSL_CTX_load_verify_locations),
    F(SSL_CTX_set_client_CA_list), F(SSL_CTX_set_verify), F(SSL_CTX_set_verify_depth), F(SSL_new), F(SSL_set_fd),
    F(SSL_set_accept_state), F(SSL_is_init_finished), F(SSL_shutdown), F(SSL_free), F(SSL_get_error), F(SSL_read),
    F(SSL_write), F(SSL_pending), F(SSL_get0_peer_certificate), F(SSL_get_verify_result), F(ERR_get_error),
    F(ERR_peek_error), F(ERR_error_string_n), F(ERR_clear_error), F(OPENSSL_sk_pop_free), F(X509_NAME_free),
    F(X509_NAME_get_text_by_NID), F(X509_get_subject_name), F(X509_check_host),
};
#undef F

static void load(void) {
    const char *lib = getenv("GPUSLICE_LIBSSL");
    if (!lib || !*lib)
        lib = "libssl.so.3";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_err, sizeof(load_err), "cannot load %s (%s): install libssl3 for TLS", lib, dlerror());
        load_rc = -ENOENT;
        return;
    }
    for (size_t k = 0; k < sizeof(table) / sizeof(table[0]); k++) {
        *table[k].slot = dlsym(h, table[k].name); /* libcrypto's through libssl's dependencies */
        if (!*table[k].slot) {
            snprintf(load_err, sizeof(load_err), "%s: no symbol %s (OpenSSL 3 is needed)", lib, table[k].name);
            load_rc = -ENOENT;
            return;
        }
    }
    /* h stays open for the life of the process */
}

int gs_ssl_load(char *err, size_t errlen) {
    pthread_once(&once, load);
    if (load_rc < 0 && err && errlen)
        snprintf(err, errlen, "%s", load_err);
    return load_rc;
}
