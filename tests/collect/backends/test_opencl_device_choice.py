"""Which OpenCL device the backend measures on, when some compilers fail.

Fake platforms and devices: the choice is logic, not a measurement, and has
to hold on machines whose OpenCL stacks differ from this one's.
"""

import types

import pytest

cl = pytest.importorskip("pyopencl")

from costlearn.collect.backends import BackendUnavailable  # noqa: E402
from costlearn.collect.backends import opencl  # noqa: E402

GENERIC = "Build on <Device 'pthread-AMD EPYC'>:\n\nerror: unknown target CPU 'generic'\nDevice failed to build"


def _device(name, kind, platform):
    return types.SimpleNamespace(name=name, type=kind, platform=platform)


def _machine(monkeypatch, devices_by_platform, failing):
    """Fake platforms holding ``devices_by_platform``; ``_open`` fails on the named devices."""
    platforms = []
    for version, names in devices_by_platform:
        plat = types.SimpleNamespace(version=version)
        plat.get_devices = (lambda ds: lambda: ds)([_device(n, k, plat) for n, k in names])
        platforms.append(plat)
    monkeypatch.setattr(opencl.cl, "get_platforms", lambda: platforms)

    def fake_open(device):
        if device.name in failing:
            raise cl.RuntimeError(cl._cl._ErrorRecord(msg=GENERIC, code=-11, routine="clBuildProgram"))
        return f"ctx:{device.name}", f"program:{device.name}"
    monkeypatch.setattr(opencl, "_open", fake_open)


def test_a_pocl_whose_llvm_does_not_know_the_cpu_is_passed_over_for_one_that_compiles(monkeypatch):
    cpu = cl.device_type.CPU
    _machine(monkeypatch, [("PoCL 3.0 wheel, LLVM 14", [("pthread-AMD EPYC", cpu)]),
                           ("PoCL 3.1 Debian, LLVM 15", [("pthread-skylake-avx512-AMD EPYC", cpu)])],
             failing={"pthread-AMD EPYC"})
    device, ctx, program = opencl._pick_device(None)
    assert device.name == "pthread-skylake-avx512-AMD EPYC" and ctx.endswith(device.name)


def test_a_gpu_is_still_chosen_before_a_cpu(monkeypatch):
    _machine(monkeypatch, [("PoCL", [("cpu0", cl.device_type.CPU)]), ("Vendor", [("gpu0", cl.device_type.GPU)])],
             failing=set())
    assert opencl._pick_device(None)[0].name == "gpu0"


def test_no_device_that_compiles_is_one_clear_error_naming_each_compiler_and_the_remedy(monkeypatch):
    _machine(monkeypatch, [("PoCL 3.0 wheel, LLVM 14", [("pthread-AMD EPYC", cl.device_type.CPU)])],
             failing={"pthread-AMD EPYC"})
    with pytest.raises(BackendUnavailable) as err:
        opencl._pick_device(None)
    text = str(err.value)
    assert "'pthread-AMD EPYC' (PoCL 3.0 wheel, LLVM 14): error: unknown target CPU 'generic'" in text
    assert "apt install pocl-opencl-icd" in text and "\n" not in text


def test_an_asked_for_device_whose_compiler_fails_is_refused_not_replaced(monkeypatch):
    cpu = cl.device_type.CPU
    _machine(monkeypatch, [("A", [("broken", cpu)]), ("B", [("working", cpu)])], failing={"broken"})
    with pytest.raises(BackendUnavailable, match="'broken'"):
        opencl._pick_device(0)
    assert opencl._pick_device(1)[0].name == "working"
