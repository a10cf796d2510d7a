"""nvitop's Python API (nvitop.Device) over every GPU of the simulated node, printed as JSON for
test_monitors.py: what nvitop's own device model reads from NVML. Run with PYTHONPATH at the
monitors' install directory and LD_LIBRARY_PATH at the simulated driver root's lib directory."""
import json
import sys

from nvitop import Device, NA

out = []
for d in Device.all():
    def v(x):
        return None if x is NA else x
    out.append({"index": d.index, "name": v(d.name()), "uuid": v(d.uuid()), "bus_id": v(d.bus_id()),
                "memory_total": v(d.memory_total()), "memory_used": v(d.memory_used()),
                "temperature": v(d.temperature()), "power_usage": v(d.power_usage()),
                "power_limit": v(d.power_limit()), "max_sm_clock": v(d.max_sm_clock()),
                "max_memory_clock": v(d.max_memory_clock()), "sm_clock": v(d.sm_clock()),
                "fan_speed": v(d.fan_speed()), "performance_state": v(d.performance_state()),
                "persistence_mode": v(d.persistence_mode()),
                "ecc_uncorrected": v(d.total_volatile_uncorrected_ecc_errors()),
                "gpu_utilization": v(d.gpu_utilization()), "mig_mode": d.is_mig_mode_enabled(),
                "nvlinks": d.nvlink_link_count(), "pids": sorted(d.processes())})
json.dump(out, sys.stdout)
