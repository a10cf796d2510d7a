/* opts.c (cli): option helpers the commands share, so every command words its usage errors the
 * same way ("gpuslice CMD: ...", exit 2). */
#include <stdarg.h>
#include <stdio.h>

#include "cli/cli.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpuslice %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return GS_EXIT_USAGE;
}

int cli_no_more_args(const char *cmd, int argc, char **argv, int first) {
    if (first < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[first]);
    return GS_EXIT_OK;
}
