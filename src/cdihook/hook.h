/* hook.h: gpuslice-cdi-hook, the createContainer hook the node's CDI spec names. Pure half: the
 * OCI state (stdin) and the bundle's config.json give the container's root; the links and the
 * linker configuration to write into it. The I/O half (main.c) writes them under the root with
 * openat2(RESOLVE_IN_ROOT), so that no symlink of the (hostile) image leads outside it, and runs
 * the image's own ldconfig chrooted into the root, without capabilities. */
#ifndef GS_CDIHOOK_H
#define GS_CDIHOOK_H

#include <stddef.h>

#define CH_MAX_JSON (4u << 20) /* larger state or config.json texts are refused */

/* The "bundle" of the OCI state JSON (an absolute path). 0 or -EINVAL with the reason in err. */
int ch_state_bundle(const char *text, size_t len, char *bundle, size_t n, char *err, size_t errlen);

/* The container's root: config.json's root.path, relative to the bundle unless absolute. A root
 * of "/" or with ".." components is refused. 0 or -EINVAL with the reason in err. */
int ch_config_root(const char *text, size_t len, const char *bundle, char *root, size_t n, char *err, size_t errlen);

/* The development link of a versioned library the hook creates beside it, as nvidia-ctk's
 * create-symlinks does ("libcuda.so.1" -> "libcuda.so"), or NULL for other names. */
const char *ch_dev_link(const char *soname);

/* The sonames ch_dev_link knows, NULL-terminated. */
extern const char *const ch_linked[];

/* The text of the linker configuration entry for dir ("DIR\n"), in buf. -ENAMETOOLONG, -EINVAL
 * (not an absolute path, or one with a newline). */
int ch_ldconf_text(const char *dir, char *buf, size_t n);

/* A path inside the root: absolute, no "..", no empty component, no newline. */
int ch_path_ok(const char *path);

#endif
