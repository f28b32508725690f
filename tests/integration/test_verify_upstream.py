"""The upstream case end to end (pytorch/executorch#24818): a real torch plugin that imports C++ runtime
symbols without libstdc++ in DT_NEEDED, loaded from a C host whose C++ runtime is static (so no libstdc++ in
the global scope), fails with the loader's undefined-symbol error; `verify` flags missing-cxx-runtime;
`patch --fix` repairs it; the patched plugin loads and runs in that C host with correct outputs."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from toolchain.elf.patcher import remove_needed
from toolchain.elf.reader import read_elf
from toolchain.verify import verify_paths

C_HOST = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct { void* data; int32_t dtype; int32_t ndim; const int64_t* sizes; const int64_t* strides;
                 int32_t device_type; int32_t device_index; } view_t;
int main(int argc, char** argv) {
  /* argv: runtime.so plugin.so input.raw rows cols output.raw */
  if (argc != 7) return 2;
  void* rt = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);  /* supplies the shims; its C++ runtime is static */
  if (!rt) { fprintf(stderr, "host: %s\n", dlerror()); return 10; }
  void* pl = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!pl) { fprintf(stderr, "host: dlopen failed: %s\n", dlerror()); return 4; }
  int (*load)(const char*, const void*, void**) = (int (*)(const char*, const void*, void**))dlsym(rt, "aoti_host_program_load");
  int (*run)(void*, const view_t*, size_t, void**, size_t) = (int (*)(void*, const view_t*, size_t, void**, size_t))dlsym(rt, "aoti_host_program_run");
  const char* (*last)(void) = (const char* (*)(void))dlsym(rt, "aoti_host_last_error");
  int32_t (*data_ptr)(void*, void**) = (int32_t (*)(void*, void**))dlsym(rt, "aoti_torch_get_data_ptr");
  int32_t (*numel)(void*, int64_t*) = (int32_t (*)(void*, int64_t*))dlsym(rt, "aoti_torch_get_numel");
  void* prog = 0;
  if (load(argv[2], 0, &prog) != 0) { fprintf(stderr, "host: load: %s\n", last()); return 5; }
  int64_t sizes[2] = {atoll(argv[4]), atoll(argv[5])};
  size_t n = (size_t)(sizes[0] * sizes[1]);
  float* in = malloc(n * sizeof(float));
  FILE* f = fopen(argv[3], "rb");
  if (!f || fread(in, sizeof(float), n, f) != n) return 3;
  fclose(f);
  view_t v = {in, 6, 2, sizes, 0, 0, 0};
  void* out[1] = {0};
  if (run(prog, &v, 1, out, 1) != 0) { fprintf(stderr, "host: run: %s\n", last()); return 6; }
  void* p = 0; int64_t m = 0;
  data_ptr(out[0], &p); numel(out[0], &m);
  f = fopen(argv[6], "wb");
  fwrite(p, sizeof(float), (size_t)m, f);
  fclose(f);
  printf("ran: %lld outputs\n", (long long)m);
  return 0;
}
"""


@pytest.fixture(scope="module")
def static_runtime(host_build, tmp_path_factory):
    """libaoti_host.so relinked with a static, hidden libstdc++: a host without libstdc++ in its scope."""
    d = tmp_path_factory.mktemp("static-rt")
    v = host_build.variant_dir
    out = d / "libaoti_host_static.so"
    subprocess.run(["g++", "-o", str(out), "-shared", "-pthread", "-Wl,-z,noexecstack",
                    f"-Wl,--version-script={v / 'gen/link/runtime.version'}", "-Wl,-z,defs",
                    str(v / "obj/src/library.os"), "-Wl,--whole-archive", str(v / "obj/lib/libaoti_host_runtime.a"),
                    str(v / "obj/lib/libaoti_host_shims.a"), "-Wl,--no-whole-archive", "-ldl",
                    "-lopenblas", "-lsleef", "-fopenmp",  # the runtime's own libraries (issue 7)
                    "-static-libstdc++", "-static-libgcc"], check=True)
    assert not any("stdc++" in n for n in read_elf(out).needed)
    src = d / "c_host.c"
    src.write_text(C_HOST)
    exe = d / "c_host"
    subprocess.run(["gcc", "-o", str(exe), str(src), "-ldl"], check=True)
    return out, exe


@pytest.mark.slow
def test_upstream_cxx_runtime_case_end_to_end(export_example, static_runtime, tmp_path):
    rt, host = static_runtime
    pt2, module, inputs = export_example("mlp", "embedded")
    with zipfile.ZipFile(pt2) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".so")]
        (tmp_path / "orig.so").write_bytes(zf.read(member))
    plugin = tmp_path / "plugin.so"
    remove_needed(tmp_path / "orig.so", plugin, "libstdc++.so.6")
    x = inputs[0].detach().numpy().astype(np.float32)
    x.tofile(tmp_path / "in.raw")
    expected = module(*inputs).detach().numpy()

    def run_host(so):
        return subprocess.run([str(host), str(rt), str(so), str(tmp_path / "in.raw"), str(x.shape[0]),
                               str(x.shape[1]), str(tmp_path / "out.raw")], capture_output=True, text=True)

    # 1. the loader's error, from a C host
    proc = run_host(plugin)
    assert proc.returncode == 4, proc.stderr
    assert "undefined symbol: " in proc.stderr
    bad_symbol = proc.stderr.split("undefined symbol: ")[1].split()[0].rstrip(",")

    # 2. verify names it: missing-cxx-runtime, with the symbol the loader hit among those it lists
    report = verify_paths([plugin], host=rt)
    cxx = [f for f in report.findings if f.rule == "missing-cxx-runtime"]
    assert len(cxx) == 1 and cxx[0].severity == "error" and report.exit_code == 1
    assert cxx[0].fix_op == ("add-needed", "libstdc++.so.6")
    cli = subprocess.run([sys.executable, "-m", "toolchain", "verify", str(plugin), "--host", str(rt), "--format",
                          "json"], capture_output=True, text=True)
    assert cli.returncode == 1
    data = json.loads(cli.stdout)
    assert "missing-cxx-runtime" in {f["rule"] for f in data["findings"]}
    assert bad_symbol.startswith(("_Z", "__cxa", "__gxx")), bad_symbol

    # 3. patch --fix repairs it (and clears the exec stack verify also proposes), proven before writing
    fixed = tmp_path / "fixed.so"
    cli = subprocess.run([sys.executable, "-m", "toolchain", "patch", str(plugin), "--fix", "--host", str(rt),
                          "-o", str(fixed)], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    elf = read_elf(fixed)
    assert elf.needed == (*read_elf(plugin).needed, "libstdc++.so.6")  # appended after the existing ones
    assert not elf.exec_stack
    assert verify_paths([fixed], host=rt).exit_code == 0

    # 4. it loads and runs in the same C host, with eager PyTorch's outputs
    proc = run_host(fixed)
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "out.raw", dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    # 5. patching twice changes nothing
    again = tmp_path / "again.so"
    cli = subprocess.run([sys.executable, "-m", "toolchain", "patch", str(fixed), "--fix", "--host", str(rt),
                          "-o", str(again)], capture_output=True, text=True)
    assert cli.returncode == 0 and "nothing to change" in cli.stdout, cli.stdout + cli.stderr
    assert again.read_bytes() == fixed.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["embedded", "blob"])
def test_real_plugins_pass_in_our_hosts_strictly(export_example, host_build, weights):
    pt2, _m, _i = export_example("mlp", weights)
    for host in (host_build.lib, host_build.aoti_run):
        report = verify_paths([pt2], host=host)
        plugin = [f for f in report.findings if ".pt2!" in f.file]
        assert report.exit_code == 0, [f.message for f in report.findings if f.severity == "error"]
        # export clears the executable stack inductor leaves and rebinds the GNU_UNIQUE symbols that made every
        # Inductor .so NODELETE (docs/verify.md, "Unloading"): nothing is left, --strict passes
        assert sorted({f.rule for f in plugin}) == []
    strict = verify_paths([pt2], host=host_build.lib, strict=True)
    assert strict.exit_code == 0
