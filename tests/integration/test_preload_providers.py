"""The runtime's preload list is the provider table's `preload = true` rows (toolchain/spec/providers.toml):
a plugin that imports a preloadable provider's symbols without listing it gets that library loaded
RTLD_GLOBAL first; one whose provider has preload = false does not."""

from __future__ import annotations

import os
import subprocess

from tests.integration.test_preload import build_host
from toolchain.spec import load_spec


def _load(host_build, so, tmp_path):
    exe = build_host(tmp_path)
    return subprocess.run([str(exe), str(host_build.lib), str(so)], capture_output=True, text=True,
                          env={**os.environ, "AOTI_HOST_LOG": "info"})


def test_a_preloadable_provider_is_preloaded(host_build, fake_plugin, tmp_path):
    gomp = next(p for p in load_spec().providers if p.name == "libgomp")
    assert gomp.preload
    so = fake_plugin("gomp_without_needed", imports=["omp_get_max_threads"])
    assert "libgomp" not in subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    proc = _load(host_build, so, tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The C host opens the runtime RTLD_LOCAL, so its own libgomp is not in the global scope: without the
    # preload dlopen fails with `undefined symbol: omp_get_max_threads`.
    assert "undefined symbol" not in proc.stdout
    assert "libgomp symbols (omp_get_max_threads) without listing libgomp.so.1: preloaded it" in proc.stderr
    assert proc.stdout.count("AOTInductorModelContainerCreateWithDevice failed") == 2


def test_a_provider_without_preload_is_left_to_the_loader(host_build, fake_plugin, tmp_path):
    libcuda = next(p for p in load_spec().providers if p.name == "libcuda")
    assert not libcuda.preload
    so = fake_plugin("libcuda_without_needed", imports=["cuInit"])
    proc = _load(host_build, so, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "preload" not in proc.stderr
    assert proc.stdout.count("undefined symbol: cuInit") == 2
