#!/usr/bin/env bash
# check_cuda_h.sh: compares the guard's hand-declared CUDA API (guard/cuda_api.h) with the CUDA
# toolkit's cuda.h in each directory of GS_CUDA_INCLUDE (colon-separated; scripts/test.sh sets it
# from scripts/cuda-headers.sh, the headers of NVIDIA's CUDA runtime wheels) and wherever a toolkit
# is installed (/usr/local/cuda*/include): every function of
# GS_CUDA_HOOKED_FUNCTIONS and the typedefs of the functions the guard calls must have cuda.h's
# signature; struct sizes and field offsets and the enum values the guard uses must match.
# Usage: check_cuda_h.sh PATH/TO/cuda_api.h CC [CC ARGS...]. Fails if a GS_CUDA_INCLUDE directory
# has no cuda.h; exits 77 (skipped) only when GS_CUDA_INCLUDE is unset and no toolkit is installed
# (the fast loop, scripts/fast.sh).
set -eu
api=$1
shift
[ "$#" -gt 0 ] || set -- cc

found=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The X-macro and the typedefs, without the rest of cuda_api.h (whose types cuda.h defines too).
sed -n '/^#define GS_CUDA_HOOKED_FUNCTIONS/,/[^\\]$/p' "$api" > "$tmp/hooked.h"
# (each typedef from its first line to the one ending in ';'; a sed range would run on to the next
# typedef when the first line already ends the declaration)
awk '/^typedef CUresult \(\*cu[A-Za-z_0-9]*_fn\)/ { p = 1 } p { print } p && /;$/ { p = 0 }' "$api" > "$tmp/typedefs.h"
grep -q GS_CUDA_HOOKED_FUNCTIONS "$tmp/hooked.h" || { echo "no GS_CUDA_HOOKED_FUNCTIONS in $api"; exit 1; }

# Layout and constants, printed from either header.
cat > "$tmp/layout.c" <<'EOC'
#include <stddef.h>
#include <stdio.h>
#include HEADER
#define S(t) printf("sizeof %s %zu\n", #t, sizeof(t));
#define O(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f));
#define V(c) printf("value %s %lld\n", #c, (long long)(c));
int main(void)
{
    S(CUdevice) S(CUdeviceptr) S(cuuint64_t) S(CUmemGenericAllocationHandle) S(CUarray_format)
    S(CUDA_ARRAY_DESCRIPTOR) O(CUDA_ARRAY_DESCRIPTOR, Width) O(CUDA_ARRAY_DESCRIPTOR, Height)
    O(CUDA_ARRAY_DESCRIPTOR, Format) O(CUDA_ARRAY_DESCRIPTOR, NumChannels)
    S(CUDA_ARRAY3D_DESCRIPTOR) O(CUDA_ARRAY3D_DESCRIPTOR, Width) O(CUDA_ARRAY3D_DESCRIPTOR, Height)
    O(CUDA_ARRAY3D_DESCRIPTOR, Depth) O(CUDA_ARRAY3D_DESCRIPTOR, Format) O(CUDA_ARRAY3D_DESCRIPTOR, NumChannels)
    O(CUDA_ARRAY3D_DESCRIPTOR, Flags)
    S(CUmemLocation) O(CUmemLocation, type) O(CUmemLocation, id)
    S(CUmemAllocationProp) O(CUmemAllocationProp, type) O(CUmemAllocationProp, requestedHandleTypes)
    O(CUmemAllocationProp, location) O(CUmemAllocationProp, win32HandleMetaData) O(CUmemAllocationProp, allocFlags)
    S(CUlaunchConfig) O(CUlaunchConfig, gridDimX) O(CUlaunchConfig, blockDimZ) O(CUlaunchConfig, sharedMemBytes)
    O(CUlaunchConfig, hStream) O(CUlaunchConfig, attrs) O(CUlaunchConfig, numAttrs)
    V(CUDA_SUCCESS) V(CUDA_ERROR_INVALID_VALUE) V(CUDA_ERROR_OUT_OF_MEMORY) V(CUDA_ERROR_NOT_INITIALIZED)
    V(CUDA_ERROR_INVALID_DEVICE) V(CUDA_ERROR_INVALID_CONTEXT) V(CUDA_ERROR_INVALID_HANDLE) V(CUDA_ERROR_NOT_FOUND)
    V(CUDA_ERROR_NOT_SUPPORTED) V(CUDA_ERROR_UNKNOWN) V(CUDA_ERROR_NOT_READY) V(CU_EVENT_DEFAULT)
    V(CU_GET_PROC_ADDRESS_DEFAULT) V(CU_GET_PROC_ADDRESS_LEGACY_STREAM) V(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
    V(CU_GET_PROC_ADDRESS_SUCCESS) V(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) V(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    V(CU_AD_FORMAT_UNSIGNED_INT8) V(CU_AD_FORMAT_UNSIGNED_INT16) V(CU_AD_FORMAT_UNSIGNED_INT32)
    V(CU_AD_FORMAT_SIGNED_INT8) V(CU_AD_FORMAT_SIGNED_INT16) V(CU_AD_FORMAT_SIGNED_INT32) V(CU_AD_FORMAT_HALF)
    V(CU_AD_FORMAT_FLOAT)
    V(CU_MEM_LOCATION_TYPE_INVALID) V(CU_MEM_LOCATION_TYPE_DEVICE) V(CU_MEM_ALLOCATION_TYPE_PINNED)
    V(CU_MEM_ALLOC_GRANULARITY_MINIMUM) V(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return 0;
}
EOC

"$@" -std=c11 -I"$(dirname "$api")" -DHEADER='"cuda_api.h"' -o "$tmp/layout_guard" "$tmp/layout.c"
"$tmp/layout_guard" > "$tmp/guard.txt"

status=0
seen=" "
named=${GS_CUDA_INCLUDE:-}
for inc in /usr/local/cuda*/include; do
    [ -f "$inc/cuda.h" ] && named="${named:+$named:}$inc"
done
IFS=: read -r -a incs <<<"$named"
for inc in "${incs[@]}"; do
    if [ ! -f "$inc/cuda.h" ]; then
        echo "FAIL: GS_CUDA_INCLUDE names $inc, which has no cuda.h"
        status=1
        continue
    fi
    real=$(readlink -f "$inc/cuda.h")
    case "$seen" in *" $real "*) continue ;; esac
    seen="$seen$real "
    found=1
    echo "checking $api against $inc/cuda.h"
    cat > "$tmp/sig.c" <<'EOC'
#include <cuda.h>
#include "hooked.h"
#include "typedefs.h"
/* Each hooked function, with the guard's parameter list, must have cuda.h's type. */
#define CHECK(name, params, args) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(name), CUresult params), #name " differs from cuda.h");
GS_CUDA_HOOKED_FUNCTIONS(CHECK)
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuCtxGetDevice), cuCtxGetDevice_fn), "cuCtxGetDevice");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuDeviceGet), cuDeviceGet_fn), "cuDeviceGet");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuMemGetAllocationGranularity), cuMemGetAllocationGranularity_fn),
               "cuMemGetAllocationGranularity");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuEventCreate), cuEventCreate_fn), "cuEventCreate");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuEventRecord), cuEventRecord_fn), "cuEventRecord");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuEventQuery), cuEventQuery_fn), "cuEventQuery");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuEventElapsedTime), cuEventElapsedTime_fn),
               "cuEventElapsedTime");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuEventDestroy_v2), cuEventDestroy_v2_fn), "cuEventDestroy_v2");
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuGetProcAddress_v2), cuGetProcAddress_v2_fn),
               "cuGetProcAddress_v2");
/* cuda.h >= 12 names the 4-argument ABI only under __CUDA_API_VERSION_INTERNAL. */
typedef CUresult cuGetProcAddress_v1_t(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
_Static_assert(__builtin_types_compatible_p(cuGetProcAddress_v1_t *, cuGetProcAddress_fn), "cuGetProcAddress");
int main(void) { return 0; }
EOC
    if ! "$@" -std=c11 -fsyntax-only -I"$inc" -I"$tmp" "$tmp/sig.c"; then
        echo "FAIL: signatures in $api differ from $inc/cuda.h"
        status=1
    fi
    "$@" -std=c11 -I"$inc" -DHEADER='<cuda.h>' -o "$tmp/layout_cuda" "$tmp/layout.c"
    "$tmp/layout_cuda" > "$tmp/cuda.txt"
    if ! diff -u "$tmp/cuda.txt" "$tmp/guard.txt"; then
        echo "FAIL: layouts or values in $api differ from $inc/cuda.h (- cuda.h, + guard)"
        status=1
    fi
    # Every name the guard hooks exists in this cuda.h (the check above would not compile otherwise).
    names=$(sed -n 's/^ *X(\(cu[A-Za-z_0-9]*\),.*/\1/p' "$tmp/hooked.h" | sort -u)
    # shellcheck disable=SC2086 # $names split into words on purpose
    echo "hooked: $(echo $names | wc -w) functions:" $names
done
if [ "$found" = 0 ] && [ "$status" = 0 ]; then
    echo "no cuda.h (GS_CUDA_INCLUDE unset, none under /usr/local/cuda*/include): skipped"
    exit 77
fi
[ "$status" = 0 ] && echo "guard/cuda_api.h matches cuda.h"
exit "$status"
