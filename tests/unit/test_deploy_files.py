"""deploy/triton/Dockerfile and deploy/kserve/aoti-triton.yaml, checked without a container runtime or a cluster:
the Dockerfile's stages and the paths the manifest relies on, the libraries the built runtime needs against the
packages the image installs, the manifest's two KServe documents naming each other, and docs/serving.md
showing the manifest as it is. (tests/integration/test_triton_server.py starts the real Triton with the
manifest's arguments.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, VARIANT

DOCKERFILE = REPO_ROOT / "deploy" / "triton" / "Dockerfile"
MANIFEST = REPO_ROOT / "deploy" / "kserve" / "aoti-triton.yaml"
BACKENDS = "/opt/aoti/backends"
# the Ubuntu 22.04 (NGC 24.10) package of each library the runtime (libaoti_host.so) needs beyond glibc/libstdc++
RUNTIME_PACKAGES = {"libsleef.so.3": "libsleef3", "libopenblas.so.0": "libopenblas0-openmp",
                    "libgomp.so.1": "libgomp1"}
BASE_LIBRARIES = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2",
                  "libdl.so.2", "libpthread.so.0", "librt.so.1"}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
    assert not pending, "a continuation line at the end"
    return out


def stages(path: Path) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(path):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def test_dockerfile_builds_on_the_server_it_runs_in_and_fills_the_backend_directory():
    ins = instructions(DOCKERFILE)
    known = {"ARG", "FROM", "RUN", "COPY", "ENV", "EXPOSE", "CMD", "WORKDIR", "LABEL"}
    assert {i for i, _ in ins} <= known, ins
    args = dict(a.split("=", 1) for i, a in ins if i == "ARG" and "=" in a)
    # Triton 24.10 is server 2.51, the server tests/integration/test_triton_server.py runs
    assert args["TRITON_IMAGE"] == "nvcr.io/nvidia/tritonserver:24.10-py3"
    build, final = stages(DOCKERFILE)
    assert build[0] == ("FROM", "${TRITON_IMAGE} AS build") and final[0] == ("FROM", "${TRITON_IMAGE}")
    assert ("COPY", ". /src") in build and any(i == "RUN" and "pip wheel" in a and "/src" in a for i, a in build)
    assert ("COPY", "--from=build /wheels /wheels") in final
    run = " ".join(a for i, a in final if i == "RUN")
    assert "pip install" in run and f'cp -r "$(aoti-toolchain triton-backend-dir)" {BACKENDS}' in run
    assert f"test -f {BACKENDS}/aoti_toolchain/libtriton_aoti_toolchain.so" in run
    cmd = json.loads(next(a for i, a in final if i == "CMD"))
    assert cmd[0] == "tritonserver" and f"--backend-directory={BACKENDS}" in cmd
    assert ("ENV", "OMP_NUM_THREADS=1") in final
    # the .dockerignore keeps build trees and the venv out of the context (the wheel builds its own)
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {"build/", ".venv/", ".git/"} <= set(ignored)


def test_the_image_installs_every_library_the_runtime_needs():
    from toolchain.elf.reader import read_elf

    lib = BUILD_DIR / VARIANT / "dist" / "lib" / "libaoti_host.so"
    if not lib.is_file():
        pytest.skip(f"{lib} is not built (scons)")
    needed = set(read_elf(lib).needed) - BASE_LIBRARIES
    assert needed <= set(RUNTIME_PACKAGES), f"add the package of {needed - set(RUNTIME_PACKAGES)} to RUNTIME_PACKAGES"
    _, final = stages(DOCKERFILE)
    installs = " ".join(a for i, a in final if i == "RUN" and "apt-get install" in a).split()
    for soname in needed:
        assert RUNTIME_PACKAGES[soname] in installs, (soname, installs)


def _manifest() -> list[dict]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (ray[serve] brings it)")
    return list(yaml.safe_load_all(MANIFEST.read_text()))


def test_the_kserve_manifest_is_a_serving_runtime_and_an_inference_service_that_name_each_other():
    runtime, service = _manifest()
    assert (runtime["apiVersion"], runtime["kind"]) == ("serving.kserve.io/v1alpha1", "ServingRuntime")
    assert (service["apiVersion"], service["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats and model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert model["storageUri"].startswith(("s3://", "gs://", "pvc://", "https://"))
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container"  # the name KServe gives its storage initializer's mount
    assert re.fullmatch(r"[\w.-]+(:\d+)?(/[\w.-]+)+:2\.51", container["image"]), container["image"]
    args = container["args"]
    assert args[0] == "tritonserver"
    opts = dict(a.split("=", 1) for a in args[1:])
    assert opts["--model-repository"] == "/mnt/models"  # where KServe puts storageUri's content
    assert opts["--backend-directory"] == BACKENDS  # what the Dockerfile fills
    assert [p["containerPort"] for p in container["ports"]] == [int(opts["--http-port"])] == [8080]
    assert {e["name"]: e["value"] for e in container["env"]}["OMP_NUM_THREADS"] == "1"


def test_docs_show_the_manifest_as_it_is():
    text = (REPO_ROOT / "docs" / "serving.md").read_text()
    assert "```yaml\n" + MANIFEST.read_text() + "```" in text
    assert "deploy/triton/Dockerfile" in text
    # the documented build command names the Dockerfile that exists
    (build,) = [line for line in text.splitlines() if line.startswith("docker build")]
    words = shlex.split(build)
    assert (REPO_ROOT / words[words.index("-f") + 1]).is_file()


def manifest_server_args() -> list[str]:
    """The ServingRuntime's tritonserver arguments (tests/integration/test_triton_server.py runs them)."""
    runtime, _ = _manifest()
    return runtime["spec"]["containers"][0]["args"][1:]
