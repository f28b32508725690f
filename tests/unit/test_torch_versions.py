"""The torch-version matrix's record (toolchain/torch_versions.json, measured by `nox -s torch_versions`) against
the spec and the docs, without downloading anything: a spec change that drops a shim a supported torch release's
plugins import fails here, naming the release; docs/torch-versions.md is the record's rendering; the record still
meets the acceptance (three or more releases pass, among them 2.11, the GPU machine's torch); and inspect's
inference of the writing release holds for every package measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.spec import load_spec
from toolchain.torch_versions import newest_per_minor, reduced_requirements
from toolchain.torch_window import Record, render_markdown, verdict

REPO = Path(__file__).resolve().parents[2]
REFRESH = "nox -s torch_versions (python -m toolchain.torch_versions) measures and rewrites both"


@pytest.fixture(scope="module")
def record() -> Record:
    rec = Record.load()
    assert rec is not None, f"toolchain/torch_versions.json is missing or unreadable: {REFRESH}"
    return rec


def test_every_shim_a_supported_release_imports_is_in_the_spec(record):
    names = {s.name for s in load_spec().shims}
    lost = [(r.version, s) for r in record.passing() for s in sorted(r.imports) if s not in names]
    assert not lost, ("toolchain/spec/shims.toml lacks shims that plugins of a supported torch release import "
                      f"(release, shim): {lost}; keep the rows (and their implementations) or narrow the window "
                      f"by re-measuring: {REFRESH}")


# Shims a release's plugin runtime code mentions that this runtime leaves out on purpose, with why.
NOT_PROVIDED = {
    "aoti_torch_delete_c10_value_object": "frees the IValues of ops run through torch's proxy executor, which only a "
                                          "libtorch host has (verify's proxy-executor finding)",
}


def test_every_shim_the_plugin_runtime_code_of_a_supported_release_calls_is_in_the_spec(record):
    """CUDA plugins and optional features (pinned constant copies in 2.14+, the caching allocator for weights)
    import what the corpus on the CPU never does: the record also holds every shim each release's aoti_runtime
    code mentions, so dropping one of those rows fails here too."""
    names = {s.name for s in load_spec().shims}
    lost = [(r.version, s) for r in record.passing() for s in r.raw["runtime_refs"]
            if s not in names and s not in NOT_PROVIDED]
    assert not lost, f"(release, shim) its plugin runtime code can call, not in toolchain/spec/shims.toml: {lost}"
    assert {"aoti_torch_empty_strided_pinned", "aoti_torch_is_defined", "aoti_torch_dtype_element_size",
            "aoti_torch_dtype_uint8"} <= set(record.passing()[-1].raw["runtime_refs"])


def test_the_record_meets_the_acceptance(record):
    passing = [r.version for r in record.passing()]
    assert len(passing) >= 3, f"only {passing} pass"
    assert any(v.startswith("2.11.") for v in passing), "2.11 (the GPU machine's torch) must be in the window"
    for r in record.passing():
        pk = r.raw["packages"]
        assert set(pk) == {"stateless", "dynamic_batch", "multi_output", "vectorised"}, (r.version, sorted(pk))
        assert all(p["aoti_run"] == "pass" and p["python"] == "pass" and not p["error"] for p in pk.values())
        assert pk["vectorised"]["sleef"], f"{r.version}: the vectorised package calls no Sleef function"
        assert pk["dynamic_batch"]["cases"] == 3


def test_docs_are_the_rendered_record(record):
    doc = (REPO / "docs" / "torch-versions.md").read_text()
    assert doc == render_markdown(record), ("docs/torch-versions.md is not the record's rendering: "
                                            "python -m toolchain.torch_versions --render-only rewrites it")


def test_each_measured_package_is_attributed_to_its_own_release(record):
    for r in record.releases:
        for name, p in (r.raw.get("packages") or {}).items():
            if p["exported"]:
                writers = record.writers(p["entry_points"], p["imports"])
                assert r.version in writers, (r.version, name, writers)


def test_a_plugin_outside_every_release_is_said_so(record):
    r = record.passing()[0]
    eps, imports = sorted(r.entry_points), sorted(r.always_imported)
    assert record.writers(eps[:-1], imports) == []  # an entry point fewer than any release exports
    names = {s.name for s in load_spec().shims}
    v = verdict(record, eps, [*imports, "aoti_torch_from_a_future_torch"], names)
    assert v["covered"] is False and v["missing_shims"] == ["aoti_torch_from_a_future_torch"]
    recorded = verdict(record, eps, imports, names, recorded_torch="2.9.0")
    assert recorded["written_by"] == ["2.9.0"] and recorded["in_window"] is False


# What `pip index versions torch` printed here (pip 23.2), and torch 2.12.1's wheel METADATA requirements.
PIP_INDEX = """torch (2.15.0)
Available versions: 2.15.0, 2.14.1, 2.14.0, 2.13.0+cpu, 2.13.0, 2.12.1, 2.12.0, 2.11.0, 2.10.0, 2.9.1, 2.0.0
  INSTALLED: 2.13.0+cpu"""
METADATA_2_12_1 = """Metadata-Version: 2.4
Name: torch
Version: 2.12.1
Requires-Dist: filelock
Requires-Dist: typing-extensions>=4.10.0
Requires-Dist: setuptools<82
Requires-Dist: sympy>=1.13.3
Requires-Dist: networkx>=2.5.1
Requires-Dist: jinja2
Requires-Dist: fsspec>=0.8.5
Requires-Dist: cuda-toolkit[cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2; platform_system == "Linux"
Requires-Dist: nvidia-cublas<=13.1.1.3,>=13.1.0.3; platform_system == "Linux"
Requires-Dist: cuda-bindings<14,>=13.0.3; platform_system == "Linux"
Requires-Dist: nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"
Requires-Dist: nvidia-cusparselt-cu13==0.8.1; platform_system == "Linux"
Requires-Dist: nvidia-nccl-cu13==2.29.7; platform_system == "Linux"
Requires-Dist: nvidia-nvshmem-cu13==3.4.5; platform_system == "Linux"
Requires-Dist: triton==3.7.1; platform_system == "Linux"
Requires-Dist: optree>=0.13.0; extra == "optree"
Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"
"""


def test_releases_are_the_newest_patch_of_each_minor_from_the_oldest_asked():
    listed = PIP_INDEX.split("Available versions:")[1].splitlines()[0].split(",")
    assert newest_per_minor([v.strip() for v in listed], "2.11") == ["2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]


def test_a_cpu_venv_gets_only_the_cuda_libraries_import_loads():
    reqs = reduced_requirements(METADATA_2_12_1)
    assert "cuda-toolkit[cudart,cufft,cufile,cupti,curand,cusparse,nvjitlink]==13.0.2" in reqs
    assert not [r for r in reqs if r.startswith(("triton", "cuda-bindings", "optree", "opt-einsum"))]
    assert "nvidia-cudnn-cu13==9.20.0.48" in reqs and "setuptools<82" in reqs and len(reqs) == 13
