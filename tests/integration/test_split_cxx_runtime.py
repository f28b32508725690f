"""A plugin that carries its own C++ runtime and exports it (as the torch 2.11 CUDA plugins built on the GPU
machine do: its g++ links libstdc++ statically) in a process where the shared libstdc++.so.6 is loaded outside
the plugin's scope (numpy and torch load it RTLD_LOCAL). The plugin's GNU_UNIQUE symbols bind process-wide to
the shared copy, its other std:: references to its own, and std::regex crashed on the null facet that split
leaves (GPU run 4). The runtime makes libstdc++.so.6 global before such a plugin so that all of them bind to
one runtime. Checked here with a C host (no C++ runtime of its own in the global scope) that loads
libstdc++.so.6 and the host library RTLD_LOCAL, then a real g++ -static-libstdc++ plugin through the C API."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration import elf_builders as eb

PLUGIN_SRC = r"""
#include <iostream>
#include <regex>
#include <string>
extern "C" __attribute__((visibility("default"))) void* cerr_seen(void) { return static_cast<void*>(&std::cerr); }
extern "C" __attribute__((visibility("default"))) int regex_ok(void) {
  std::regex re("(cpu|cuda|xpu|mps)(:([0-9]+))?");
  return std::regex_match(std::string("cuda:0"), re) ? 1 : 0;
}
"""

HOST_SRC = r"""
#include <dlfcn.h>
#include <stdio.h>
typedef int (*load_fn)(const char*, const void*, void**);
int main(int argc, char** argv) {
  (void)argc;
  void* cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);  /* what numpy and torch do */
  void* host = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!cxx || !host) { printf("setup failed: %s\n", dlerror()); return 2; }
  void* prog = 0;
  int rc = ((load_fn)dlsym(host, "aoti_host_program_load"))(argv[2], 0, &prog);
  printf("load status %d\n", rc);
  void* plugin = dlopen(argv[2], RTLD_NOW | RTLD_NOLOAD);
  if (!plugin) { printf("plugin not loaded\n"); return 3; }
  void* seen = ((void* (*)(void))dlsym(plugin, "cerr_seen"))();
  printf("std::cerr: %s\n", seen == dlsym(cxx, "_ZSt4cerr") ? "shared" : "own copy");
  printf("regex: %d\n", ((int (*)(void))dlsym(plugin, "regex_ok"))());
  return 0;
}
"""


@pytest.fixture(scope="module")
def split_setup(host_build, tmp_path_factory):
    work = tmp_path_factory.mktemp("split-cxx")
    plugin = eb.build(work, "static_cxx_plugin", cxx=True, extra=PLUGIN_SRC,
                      flags=["-Wl,-z,noexecstack", "-static-libstdc++"])
    exported = subprocess.run(["readelf", "--dyn-syms", "-W", str(plugin)], capture_output=True, text=True).stdout
    assert " UNIQUE " in exported and "_ZSt4cerr" in exported, "the fixture must export a static C++ runtime"
    host = work / "c_host"
    subprocess.run(["gcc", "-o", str(host), "-x", "c", "-", "-ldl"], input=HOST_SRC, text=True, check=True)
    return host, plugin, host_build.lib


def test_plugin_with_exported_cxx_runtime_binds_to_one_runtime(split_setup):
    host, plugin, lib = split_setup
    proc = subprocess.run([str(host), str(lib), str(plugin)], capture_output=True, text=True,
                          env={"AOTI_HOST_LOG": "info", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "std::cerr: shared" in proc.stdout, proc.stdout + proc.stderr
    assert "regex: 1" in proc.stdout
    assert "carries its own exported C++ runtime" in proc.stderr and "made global" in proc.stderr
