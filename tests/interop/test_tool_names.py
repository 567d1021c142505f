"""What other tools call costlearn's configs (costlearn.interop.tool_names): the registry keyed by (family, tool)
the importers and exporters ask, Inductor's names both ways, and nothing for a pair it does not list."""
from __future__ import annotations

import pytest

from costlearn.core.problem import Problem
from costlearn.families import FAMILIES, get_family
from costlearn.families.triton_mm import VENDOR, TritonMMConfig
from costlearn.interop import IMPORTERS
from costlearn.interop.inductor.names import config_from_choice, config_from_entry, lut_entry
from costlearn.interop.tool_names import FROM_TOOL, TO_TOOL, config_from_tool, from_tool, to_tool

P = Problem(100, 64, 96, "float16")


def test_every_pair_names_a_registered_family_and_a_known_tool():
    for family, tool in [*FROM_TOOL, *TO_TOOL]:
        assert family in FAMILIES and (tool in IMPORTERS.names() or tool == "triton"), (family, tool)


@pytest.mark.parametrize("family", FAMILIES.names())
def test_a_pair_with_no_mapping_answers_none(family):
    config = get_family(family).all_configs()[0]
    assert from_tool(family, "no-such-tool", "extern_mm") is None
    assert to_tool(family, "no-such-tool", config, P) is None
    if family != "triton_mm":
        assert from_tool(family, "inductor", "extern_mm") is None and to_tool(family, "inductor", config, P) is None


def test_inductor_names_map_to_triton_mm_both_ways():
    t = TritonMMConfig(64, 128, 32, 4, 3)
    assert config_from_tool("inductor", "extern_mm") == ("triton_mm", VENDOR)
    assert config_from_tool("inductor", "extern_mm")[1] is VENDOR
    choice = "type=triton_BLOCK-M=64_BLOCK-K=32_BLOCK-N=128_numstages=3_numwarps=4"
    assert config_from_tool("inductor", choice) == ("triton_mm", TritonMMConfig(64, 128, 32, 4, 3, 8))
    assert config_from_tool("inductor", "not an mm choice") is None and config_from_choice("vendor") is None
    with pytest.raises(ValueError, match="power of two"):
        config_from_tool("inductor", choice.replace("BLOCK-M=64", "BLOCK-M=48"))
    for config in (t, VENDOR):
        entry = to_tool("triton_mm", "inductor", config, P)
        assert entry == lut_entry(config, P)
        assert from_tool("triton_mm", "inductor-lut", entry) == config == config_from_entry(entry)
    with pytest.raises(TypeError, match="must be a TritonMMConfig or VendorCall"):
        to_tool("triton_mm", "inductor", get_family("gemm").all_configs()[0], P)


def test_triton_autotune_values_map_to_triton_mm():
    values = dict(block_m=64, block_n=32, block_k=16, num_warps=2, num_stages=4, group_m=1)
    assert from_tool("triton_mm", "triton", values) == TritonMMConfig(64, 32, 16, 2, 4, 1)
    with pytest.raises(TypeError):
        from_tool("triton_mm", "triton", dict(values, num_warps=None))
    with pytest.raises(KeyError):
        from_tool("triton_mm", "triton", {k: v for k, v in values.items() if k != "group_m"})


def test_a_mapping_added_from_outside_is_asked(monkeypatch):
    """A new (family, tool) pair is one entry: config_from_tool asks it, in registry order."""
    gemm = get_family("gemm").all_configs()[0]
    monkeypatch.setitem(FROM_TOOL, ("gemm", "kernel-tuner"), lambda choice: gemm if choice == "mine" else None)
    assert config_from_tool("kernel-tuner", "mine") == ("gemm", gemm)
    assert config_from_tool("kernel-tuner", "other") is None
