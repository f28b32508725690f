"""layout_strides (the element strides of a named layout) and patch.plan (what a patch would change)."""

from __future__ import annotations

import pytest

from tests.integration import elf_builders as eb
from toolchain.errors import InputError, UsageError
from toolchain.patch import Op, plan
from toolchain.runtime import layout_strides


@pytest.mark.parametrize(("layout", "shape", "strides"), [
    ("contiguous", (2, 3, 4), [12, 4, 1]),
    ("contiguous", (5,), [1]),
    ("contiguous", (2, 0, 3), [3, 3, 1]),  # a zero-sized dim counts as 1, as torch's strides do
    ("channels_last", (2, 3, 4, 5), [60, 1, 15, 3]),
    ("channels_last_3d", (1, 2, 3, 4, 5), [120, 1, 40, 10, 2]),
    ("strides=48,1,12,3", (2, 3, 4, 4), [48, 1, 12, 3]),
])
def test_layout_strides(layout, shape, strides):
    assert layout_strides(layout, shape) == strides


@pytest.mark.parametrize(("layout", "shape"), [
    ("channels_last", (2, 3, 4)), ("channels_last_3d", (2, 3, 4, 5)), ("strides=1,2", (2, 3, 4)),
    ("strides=a,b", (2, 3)), ("strides=-1,1", (2, 3)),
])
def test_layout_strides_refuses(layout, shape):
    with pytest.raises(InputError):
        layout_strides(layout, shape)


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    return {"clean": eb.build(d, "clean", flags=["-Wl,-z,noexecstack", "-Wl,--no-as-needed", "-lm"]),
            "execstack": eb.build(d, "execstack", flags=["-Wl,-z,execstack"]),
            "runpath": eb.build(d, "runpath", flags=["-Wl,-z,noexecstack", "-Wl,-rpath,$ORIGIN",
                                                     "-Wl,--enable-new-dtags"])}


def test_plan_drops_no_ops_and_orders_add_needed_first(plugins):
    needed = "libdl.so.2"
    steps = plan(plugins["execstack"], [Op("clear-execstack"), Op("add-needed", needed), Op("add-needed", needed),
                                       Op("clear-execstack")])
    assert steps == [Op("add-needed", needed), Op("clear-execstack")]
    assert plan(plugins["clean"], [Op("clear-execstack")]) == []
    assert plan(plugins["runpath"], [Op("set-runpath", "$ORIGIN")]) == []
    assert plan(plugins["clean"], [Op("set-runpath", "$ORIGIN")]) == [Op("set-runpath", "$ORIGIN")]
    assert plan(plugins["clean"], [Op("add-needed", "libm.so.6")]) == []  # already needed


def test_plan_refuses(plugins, tmp_path):
    with pytest.raises(UsageError, match="contradictory"):
        plan(plugins["clean"], [Op("set-runpath", "$ORIGIN"), Op("set-runpath", "/opt/lib")])
    with pytest.raises(UsageError, match="would not find"):
        plan(plugins["clean"], [Op("add-needed", "libno_such_library_here.so.9")])
    with pytest.raises(UsageError, match="needs a library name"):
        plan(plugins["clean"], [Op("add-needed", "")])
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(InputError, match="cannot patch"):
        plan(junk, [Op("clear-execstack")])
