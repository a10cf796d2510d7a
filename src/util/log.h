/* log.h: one line per event to stderr, written with a single write(2): a UTC timestamp, the
 * level and the message, nothing else (no key=value fields of their own):
 *   2026-11-29T18:00:00.123Z level=error msg="nvmlDeviceCreateGpuInstanceWithPlacement(GPU 1, profile 9, start 4): In use"
 * Quotes, backslashes and newlines in the message are escaped, so an event stays one line; a
 * message is cut at about 1 KiB. */
#ifndef GS_LOG_H
#define GS_LOG_H

enum gs_log_level { GS_LOG_ERROR = 0, GS_LOG_WARN, GS_LOG_INFO, GS_LOG_DEBUG };

void gs_log_set_level(enum gs_log_level level);
/* Parses "error|warn|info|debug"; returns 0 or -EINVAL. */
int gs_log_parse_level(const char *s, enum gs_log_level *out);
/* fmt forms the message, printed as msg="..." and followed by nothing else: put the context
 * (GPU, file, field, errno text) in the message itself. Events less severe than the level set
 * with gs_log_set_level (default info) are dropped. errno is preserved. Returns -1, for chaining as
 * `return gs_log...`. */
int gs_log(enum gs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) gs_log(GS_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) gs_log(GS_LOG_WARN, __VA_ARGS__)
#define log_info(...) gs_log(GS_LOG_INFO, __VA_ARGS__)
#define log_debug(...) gs_log(GS_LOG_DEBUG, __VA_ARGS__)

#endif
