"""The catalogue's board figures (src/catalog/board.c), read from its table, so that the tests check
what the simulated node answers against the catalogue itself rather than a copy of its numbers."""
import os
import re

FIELDS = ["max_graphics_mhz", "max_mem_mhz", "max_video_mhz", "app_graphics_mhz", "app_mem_mhz", "power_default_mw",
          "power_min_mw", "power_max_mw", "pcie_gen", "pcie_width", "bar1_mib", "fans", "vbios", "verified"]


def boards(root):
    with open(os.path.join(root, "src", "catalog", "board.c")) as f:
        text = f.read()
    out = {}
    for key, body in re.findall(r'\{ "([^"]+)", \{ ([^{}]*) \} \}', text):
        values = [v.strip() for v in body.split(",")]
        assert len(values) == len(FIELDS), (key, values)
        row = dict(zip(FIELDS, values))
        for k in FIELDS[:12]:
            row[k] = int(row[k])
        row["vbios"] = row["vbios"].strip('"')
        out[key] = row
    assert len(out) == 9, sorted(out)
    return out
