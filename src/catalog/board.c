/* board.c: each model's board figures as the driver reports them (nvidia-smi -q's "Max Clocks",
 * "Default Applications Clocks", "Power Readings", "GPU Link Info", "BAR1 Memory Usage"), for the
 * simulated node (pure data).
 *
 * Sources, per row: `nvidia-smi -q` captures posted in public GitHub issues where one exists
 * (named in the row's comment), otherwise NVIDIA's product datasheets (boost clock, memory clock,
 * TDP, PCIe generation and width); the figures neither gives (video clock, minimum power limit,
 * BAR1 size) are taken from the nearest board of the same chip. verified = true only where a
 * capture of the model gives every clock and power figure (the two A100s). VBIOS strings follow the driver's pattern (chip family prefix:
 * 90 Turing, 92 GA100, 95 Ada, 96 Hopper, 97 Blackwell) and are not any one board's firmware. */
#include <string.h>

#include "catalog/catalog.h"
#include "util/util.h"

static const struct {
    const char *key;
    struct gs_board b;
} boards[] = {
    /* A30 datasheet: boost 1440 MHz, base 930 MHz, HBM2 933 GB/s (1215 MHz), 165 W, PCIe Gen4 x16.
     * Video clock and BAR1 as the A100 40GB (GA100); minimum power limit 100 W as the A100. */
    { "A30", { 1440, 1215, 1290, 930, 1215, 165000, 100000, 165000, 4, 16, 32768, 0, "92.00.66.00.01", false } },
    /* nvidia-smi -q of an A100-SXM4-40GB (NVIDIA/nvidia-docker issue 1648): Max Clocks 1410/1215/1290,
     * Default Applications 1095/1215, power 400 W (min 100, max 400). PCIe Gen4 x16 (datasheet). */
    { "A100-SXM4-40GB", { 1410, 1215, 1290, 1095, 1215, 400000, 100000, 400000,
      4, 16, 65536, 0, "92.00.45.00.03", true } },
    /* nvidia-smi -q of an A100 80GB SXM (NVIDIA/DCGM issue 152): Max Clocks 1410/1593/1290, Default
     * Applications 1155/1593, power 400 W (min 100, max 400). */
    { "A100-SXM4-80GB", { 1410, 1593, 1290, 1155, 1593, 400000, 100000, 400000,
      4, 16, 131072, 0, "92.00.45.00.06", true } },
    /* nvidia-smi -q of an H100 80GB HBM3 (NVIDIA/DCGM issue 120): Max Clocks 1980/2619/1545, Default
     * Applications 1980/2619. Power: datasheet's 700 W (its minimum, 200 W, unverified); PCIe Gen5 x16. */
    { "H100-SXM5-80GB", { 1980, 2619, 1545, 1980, 2619, 700000, 200000, 700000,
      5, 16, 131072, 0, "96.00.74.00.01", false } },
    /* H100 NVL datasheet: boost 1785 MHz, HBM3 (2619 MHz as the H100 SXM), 350-400 W configurable,
     * PCIe Gen5 x16. Video clock and BAR1 as the H100 SXM. */
    { "H100-NVL", { 1785, 2619, 1545, 1785, 2619, 400000, 200000, 400000, 5, 16, 131072, 0, "96.00.99.00.01", false } },
    /* nvidia-smi -q -d CLOCK of a P5e H200 (awslabs/amazon-eks-ami pull request 1985): Max and Default
     * Applications 1980/3201. Power: datasheet's 700 W; video clock as the H100 SXM; BAR1 unverified. */
    { "H200-SXM-141GB", { 1980, 3201, 1545, 1980, 3201, 700000, 200000, 700000,
      5, 16, 262144, 0, "96.00.A5.00.01", false } },
    /* HGX B200 datasheet: 1000 W per GPU, PCIe Gen5 x16; boost 1965 MHz and HBM3e 3996 MHz from
     * published specifications, not a capture. */
    { "B200", { 1965, 3996, 1965, 1965, 3996, 1000000, 200000, 1000000, 5, 16, 262144, 0, "97.00.4B.00.01", false } },
    /* nvidia-smi -q of a Tesla T4 (NVIDIA/nvidia-docker issue 1446): Max Clocks 1590/5001/1470, Default
     * Applications 585/5001. Datasheet: 70 W (min 60 W), PCIe Gen3 x16; 256 MiB BAR1. */
    { "T4", { 1590, 5001, 1470, 585, 5001, 70000, 60000, 70000, 3, 16, 256, 0, "90.04.38.00.03", false } },
    /* L4 datasheet: boost 2040 MHz, 72 W, PCIe Gen4 x16; GDDR6 6251 MHz; minimum power 40 W, video
     * clock and BAR1 unverified. */
    { "L4", { 2040, 6251, 1770, 2040, 6251, 72000, 40000, 72000, 4, 16, 32768, 0, "95.04.29.00.06", false } },
};

const struct gs_board *gs_model_board(const struct gs_model *m) {
    for (size_t i = 0; m && i < GS_ARRAY_SIZE(boards); i++)
        if (!strcmp(boards[i].key, m->key))
            return &boards[i].b;
    return NULL;
}
