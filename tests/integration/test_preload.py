"""The libstdc++ preload: a plugin that uses the C++ runtime without listing it (upstream `_ZSt4cerr`)."""

from __future__ import annotations

import os
import subprocess

C_HOST = r"""
#include <dlfcn.h>
#include <stdio.h>
typedef struct { const char* w; const char* d; size_t n; } opts_t;
int main(int argc, char** argv) {
  /* A C host: the runtime library opened RTLD_LOCAL, so its libstdc++ is not in the global scope. */
  void* rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!rt) { fprintf(stderr, "host: %s\n", dlerror()); return 10; }
  int (*load)(const char*, const opts_t*, void**) = (int (*)(const char*, const opts_t*, void**))dlsym(rt, "aoti_host_program_load");
  const char* (*last)(void) = (const char* (*)(void))dlsym(rt, "aoti_host_last_error");
  for (int i = 0; i < 2; ++i) {
    void* prog = 0;
    int rc = load(argv[2], 0, &prog);
    printf("load %d: status %d: %s\n", i, rc, last());
  }
  return 0;
}
"""


def build_host(tmp_path):
    src = tmp_path / "c_host.c"
    src.write_text(C_HOST)
    exe = tmp_path / "c_host"
    subprocess.run(["gcc", str(src), "-ldl", "-o", str(exe)], check=True)
    return exe


def test_plugin_without_libstdcxx_in_needed_gets_the_preload(host_build, fake_plugin, tmp_path):
    so = fake_plugin("cxx_without_needed", imports=["_ZSt4cerr"])
    ldd = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    assert "libstdc++" not in ldd
    exe = build_host(tmp_path)
    proc = subprocess.run([str(exe), str(host_build.lib), str(so)], capture_output=True, text=True,
                          env={**os.environ, "AOTI_HOST_LOG": "info"})
    assert proc.returncode == 0, proc.stderr
    # Without the preload dlopen fails with `undefined symbol: _ZSt4cerr`; with it the plugin loads and
    # only its stub CreateWithDevice (returns 1) fails.
    assert "undefined symbol" not in proc.stdout
    assert "preloaded it RTLD_GLOBAL" in proc.stderr and "_ZSt4cerr" in proc.stderr
    assert proc.stdout.count("AOTInductorModelContainerCreateWithDevice failed") == 2
