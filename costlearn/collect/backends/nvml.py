"""Reading GPU clocks, temperature and throttle reasons (NVML bit meanings;
``nvidia-smi`` query as the fallback). Read-only: nothing here sets anything.
Importable without CuPy."""
from __future__ import annotations

import shutil
import subprocess

__all__ = ["throttle_fields", "smi_clocks", "ClockReader"]

# NVML clocks-throttle-reason bits that slow a running kernel (nvml.h,
# nvmlClocksThrottleReason*). Idle (0x1), application-clock settings (0x2),
# sync boost (0x10) and display clocks (0x100) are not listed: they are not a
# measurement hazard.
_THROTTLE_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                  0x80: "hw_power_brake"}


def throttle_fields(mask: int) -> dict:
    """``throttled`` and ``throttle_reasons`` (names joined by ';') from an
    NVML clocks-throttle-reasons bit mask."""
    names = [name for bit, name in _THROTTLE_BITS.items() if mask & bit]
    return dict(throttled=bool(names), throttle_reasons=";".join(names))


def smi_clocks(index: int) -> dict:
    """Clocks through ``nvidia-smi`` (read-only query); empty when absent."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", "--format=csv,noheader,nounits",
             "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,clocks_throttle_reasons.active"],
            capture_output=True, text=True, timeout=10).stdout.strip()
        sm, mem, temp, mask = [x.strip() for x in out.split(",")]
        return dict(sm_clock_mhz=float(sm), mem_clock_mhz=float(mem), temperature_c=float(temp),
                    **throttle_fields(int(mask, 16)))
    except (OSError, ValueError, subprocess.SubprocessError):
        return {}


class ClockReader:
    """Reads one GPU's SM and memory clocks (MHz), temperature (C) and active
    throttle reasons, through NVML (``pynvml``) where installed, else one
    ``nvidia-smi --query-gpu`` call per read; read only, nothing is set.
    Throttle reasons other than idle and application-clock settings mark the
    rows ``throttled``.

    Parameters
    ----------
    index : int
        The GPU's ordinal.
    """

    def __init__(self, index: int):
        self.index = int(index)
        self._nvml = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(self.index))
        except Exception:  # NVML is optional: nvidia-smi, else no clocks
            self._nvml = None

    def read(self) -> dict:
        """The clock columns (``sm_clock_mhz``, ``mem_clock_mhz``,
        ``temperature_c``, ``throttled``, ``throttle_reasons``) now; empty
        when nothing can be read."""
        if self._nvml is not None:
            nv, h = self._nvml
            try:
                out = dict(sm_clock_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                           mem_clock_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                           temperature_c=float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)))
                mask = int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
                return dict(out, **throttle_fields(mask))
            except Exception:  # a failed NVML read leaves the clock columns NaN
                return {}
        return smi_clocks(self.index)
