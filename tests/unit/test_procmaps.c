/* test_procmaps.c: finding a mapped file in /proc/PID/maps text (src/core/procmaps.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/procmaps.h"

static const char maps[] =
    "55d0c8a00000-55d0c8a02000 r--p 00000000 fd:01 1835082                    /usr/bin/python3.11\n"
    "7f3a1c000000-7f3a1c021000 rw-p 00000000 00:00 0 \n"
    "7f3a20000000-7f3a201e9000 rw-s 00000000 00:2a 917                        /run/gpuslice/guard/region\n"
    "7f3a30000000-7f3a30001000 rw-s 00000000 103:05 4242                      /dev/shm/with space (deleted)\n"
    "7ffd5c9f2000-7ffd5c9f4000 r-xp 00000000 00:00 0                          [vdso]\n";

static void test_finds_mapping(void **state) {
    (void)state;
    assert_true(gs_maps_has_file(maps, 0x00, 0x2a, 917));
    assert_true(gs_maps_has_file(maps, 0xfd, 0x01, 1835082));
    assert_true(gs_maps_has_file(maps, 0x103, 0x05, 4242)); /* hex majors above 255, deleted files */
}

static void test_needs_device_and_inode(void **state) {
    (void)state;
    assert_false(gs_maps_has_file(maps, 0x00, 0x2b, 917));  /* same inode on another file system */
    assert_false(gs_maps_has_file(maps, 0x01, 0x2a, 917));
    assert_false(gs_maps_has_file(maps, 0x00, 0x2a, 918));
    assert_false(gs_maps_has_file(maps, 0x00, 0x00, 0));    /* anonymous mappings are nobody's file */
    assert_false(gs_maps_has_file("", 0x00, 0x2a, 917));
}

static void test_malformed_lines_skipped(void **state) {
    (void)state;
    static const char bad[] = "garbage\n"
                              "7f-7f rw-s 0 zz:2a 917 /x\n"
                              "7f-7f rw-s 0 00:2a 917x /x\n"
                              "7f-7f rw-s 0 00:2a\n"
                              "7f-7f rw-s 0 00:2a 99999999999999999999999 /x\n"
                              "7f-7f rw-s 0 1000:2a 917 /x\n"
                              "7f-7f rw-s 0 00:2a 917 /ok";
    assert_true(gs_maps_has_file(bad, 0x00, 0x2a, 917)); /* only the last line, without a newline */
    assert_false(gs_maps_has_file(bad, 0x1000, 0x2a, 917));
    assert_false(gs_maps_has_file("7f-7f rw-s 0 00:2a 917x /x\n7f-7f rw-s 0 zz:2a 917 /x", 0, 0x2a, 917));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_mapping),
        cmocka_unit_test(test_needs_device_and_inode),
        cmocka_unit_test(test_malformed_lines_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
