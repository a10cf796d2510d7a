/* quantity.h: Kubernetes' quantity text (resource.Quantity of k8s.io/apimachinery), read and
 * written in one place for every component: the DRA driver's consumedCapacity, the extender's
 * requests and capacities, fractional requests, the policy's sizes and the command-line flags.
 * Pure: no I/O, no allocation, no locale.
 *
 *   quantity  ::= sign? number suffix
 *   sign      ::= "+" | "-"
 *   number    ::= digits? ("." digits?)?     ("1", "1.", ".5"; no digits at all, as in "-", "."
 *                                            or "Gi", is 0: Kubernetes reads them so)
 *   suffix    ::= binary | decimal | exponent
 *   binary    ::= "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"        (2^10 .. 2^60)
 *   decimal   ::= "n" | "u" | "m" | "" | "k" | "M" | "G" | "T" | "P" | "E"   (10^-9 .. 10^18)
 *   exponent  ::= ("e" | "E") sign? digits                       (10^N: "1e3", "5E-3")
 *
 * No blanks anywhere; at most GS_QUANTITY_MAX characters. "G" is 10^9 and "Gi" 2^30, as in
 * Kubernetes. The value is exact: digits and suffix are multiplied out in decimal, never in
 * floating point. What differs from Kubernetes is only at the edges: a value past int64 is refused
 * (-ERANGE) where Kubernetes caps it at 2^63 - 1, and an exponent past 2^31 - 1 is no quantity
 * (Kubernetes refuses it past 2^63 and wraps it to 32 bits below). */
#ifndef GS_QUANTITY_H
#define GS_QUANTITY_H

#include <stddef.h>
#include <stdint.h>

#define GS_QUANTITY_MAX 64 /* the longest text read, in bytes */

/* gs_quantity_parse flags */
#define GS_QTY_EXACT 1u /* a value that is not a whole number of units is refused (-EDOM), not rounded */
#define GS_QTY_BYTES 2u /* one "B" may end the text, as in "8GiB" or "512MB" (the same as "8Gi", "512M"):
                         * sizes in gpuslice's own files and flags, never in Kubernetes objects */

/* The quantity s as a whole number of units of 10^scale (scale 0: units, as Quantity.Value; -3:
 * thousandths, as MilliValue; -9..9) in *out. A value that is not a whole number of units is
 * rounded away from zero, as Kubernetes rounds (a positive one up: "0.1m" is 1 milli, "1.5" is
 * 2 units), unless GS_QTY_EXACT. Returns 0, -EINVAL (not a quantity: empty, too long, a blank, an
 * unknown suffix such as "K" or "GB"; NULL), -ERANGE (beyond int64 in those units), -EDOM
 * (GS_QTY_EXACT and not whole). *out is written only on success. */
int gs_quantity_parse(const char *s, int scale, unsigned flags, int64_t *out);

/* A size in bytes in gpuslice's own files and flags (the policy, --vram): the quantity s at scale
 * 0 with GS_QTY_EXACT | GS_QTY_BYTES, within [min, max]. 0, -EINVAL, -EDOM (not whole), -ERANGE
 * (outside, a negative size included). */
int gs_quantity_bytes(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out);

/* gs_quantity_format flags */
#define GS_QTY_BINARY 1u /* the largest binary suffix that divides the value (scale 0 only): "1Gi" */

/* v units of 10^scale (-9..9) as Kubernetes writes it canonically: the largest decimal suffix
 * (n u m "" k M G T P E) that divides the value exactly ("1500m", "2", "10G"), or with
 * GS_QTY_BINARY and scale 0 the largest binary one ("10Gi", "1536Mi"). gs_quantity_parse of the
 * text at the same scale gives v back. Returns the length, or -ENOSPC (len too small: 32 always
 * fits), -EINVAL (scale out of range). */
int gs_quantity_format(int64_t v, int scale, unsigned flags, char *buf, size_t len);

#endif
