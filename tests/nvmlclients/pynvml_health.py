"""The memory health of GPU 0 of the simulated node through nvidia-ml-py, as JSON, for
test_pynvml.py's check of a board before Ampere (retired pages rather than remapped rows)."""
import json
import sys

import pynvml as N


def val(f, *args):
    try:
        return f(*args)
    except N.NVMLError as e:
        return {"err": e.value}


N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
ids = [N.NVML_FI_DEV_RETIRED_SBE, N.NVML_FI_DEV_RETIRED_DBE, N.NVML_FI_DEV_RETIRED_PENDING, N.NVML_FI_DEV_REMAPPED_COR]
out = {"retired": [val(N.nvmlDeviceGetRetiredPages, h, c) for c in (0, 1)],
       "pending": val(N.nvmlDeviceGetRetiredPagesPendingStatus, h), "remapped": val(N.nvmlDeviceGetRemappedRows, h),
       "ecc": [[N.nvmlDeviceGetTotalEccErrors(h, t, c) for c in (0, 1)] for t in (0, 1)],
       "fields": [v.value.uiVal if v.nvmlReturn == 0 else {"err": v.nvmlReturn}
                  for v in N.nvmlDeviceGetFieldValues(h, ids)],
       "pcie": N.nvmlDeviceGetMaxPcieLinkGeneration(h), "name": N.nvmlDeviceGetName(h)}
N.nvmlShutdown()
json.dump(out, sys.stdout)
