"""Compares `gpuslice inspect --json` with nvidia-smi's view of the same GPUs.

usage: compare_inspect.py INSPECT.json NVIDIA_SMI.csv NVIDIA_SMI_L.txt
The CSV has the columns index,uuid,name,memory.total,pci.bus_id,pci.device_id,mig.mode.current,
mig.mode.pending,driver_version (nounits). Exits 1 on any mismatch and prints each check."""
import csv
import json
import re
import sys


def main(inspect_path, csv_path, list_path):
    doc = json.load(open(inspect_path))
    rows = [[c.strip() for c in r] for r in csv.reader(open(csv_path)) if r]
    failures = []

    def check(what, got, want):
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {what}: gpuslice={got!r} nvidia-smi={want!r}")
        if not ok:
            failures.append(what)

    check("GPU count", len(doc["gpus"]), len(rows))
    for row, g in zip(rows, doc["gpus"]):
        idx, uuid, name, mem, bus, devid, mig_cur, mig_pend, driver = row
        check(f"GPU {idx} index", str(g["index"]), idx)
        check(f"GPU {idx} uuid", g.get("uuid"), uuid)
        check(f"GPU {idx} name", g.get("name"), name)
        check(f"GPU {idx} memory.total MiB", str(g.get("memory", {}).get("total_mib")), mem)
        check(f"GPU {idx} pci bus id", (g.get("pci_bus_id") or "").upper(), bus.upper())
        check(f"GPU {idx} pci device id", (g.get("pci_device_id") or "").upper(), devid.upper())
        check(f"GPU {idx} driver", doc["driver_version"], driver)
        mig = g.get("mig", {})
        if mig.get("capable"):
            check(f"GPU {idx} MIG current", mig["current"].lower(), mig_cur.lower())
            check(f"GPU {idx} MIG pending", mig["pending"].lower(), mig_pend.lower())
        else:
            # nvidia-smi prints [N/A] (or [Not Supported]) for GPUs without MIG.
            check(f"GPU {idx} MIG not supported", True, mig_cur.upper() in ("[N/A]", "N/A", "[NOT SUPPORTED]"))
    # MIG devices: nvidia-smi -L prints "  MIG 1g.10gb Device 0: (UUID: MIG-...)" under each GPU.
    smi_mig = set(re.findall(r"UUID: (MIG-[0-9a-fA-F-]+)\)", open(list_path).read()))
    ours = {d["uuid"] for g in doc["gpus"] for d in g.get("mig", {}).get("devices", [])}
    check("MIG device UUIDs", sorted(ours), sorted(smi_mig))
    print(f"{len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
