"""bench/bench_models_gpu.py on the CPU (--device cpu: the GPU run's code path without graphs): a row exported,
timed on every side and checked against eager, the JSON and markdown it writes; its output check; a budget that
stops it before anything is measured still leaves a table."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

BENCH = REPO_ROOT / "bench" / "bench_models_gpu.py"


def load_bench():
    sys.path.insert(0, str(BENCH.parent))
    import bench_models_gpu

    return bench_models_gpu


def test_check_is_relative_to_the_largest_eager_value():
    bench = load_bench()
    ref = np.array([100.0, 1.0, -0.5], np.float32)
    # within 1e-4 * (|eager| + max|eager|): about 1e-2 on every element here
    assert bench.check([ref + np.float32(0.009)], [ref], 1e-4)["ok"]
    res = bench.check([ref + np.array([0, 0.03, 0], np.float32)], [ref], 1e-4)
    assert not res["ok"] and "output 0: 1 of 3 elements" in res["error"]
    assert res["err"] == pytest.approx(0.03 / 100, rel=1e-3)
    assert bench.check([ref + np.array([0, 0.03, 0], np.float32)], [ref], 2e-2)["ok"]  # bf16's rtol
    assert not bench.check([np.array([np.nan, 1, 0], np.float32)], [ref], 2e-2)["ok"]
    assert not bench.check([ref[:2]], [ref], 1e-2)["ok"]  # shape
    assert not bench.check([ref], [ref, ref], 1e-2)["ok"]  # count


def run_bench(tmp_path, host_build, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--models", "tiny_convnet", "--dtypes",
                           "fp32", "--batches", "2", "--seconds", "0.05", "--jobs", "1", "--work", str(tmp_path / "w"),
                           "--json", str(out), "--markdown", str(tmp_path / "rows.md"), "--aoti-run",
                           str(host_build.aoti_run), *args], capture_output=True, text=True, timeout=600)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


@pytest.mark.long  # one export of a small CNN (30-100 s on the 2-core machine) and its timing
def test_cpu_row_is_timed_and_checked_on_every_side(tmp_path, host_build, torch):
    proc, res = run_bench(tmp_path, host_build)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = res["rows"]
    assert (row["model"], row["dtype"], row["batch"], row["status"]) == ("tiny_convnet", "fp32", 2, "measured")
    sides = {"eager", "torch_runner", "aoti_run", "python"}
    assert set(row["check"]) == sides, row
    for side in sides:
        assert row["check"][side]["ok"], (side, row["check"][side])
        assert 0 <= row["check"][side]["err"] < 1e-4
        assert row["us"][side] > 0 and row["calls"][side] >= 5
    assert row["ratios"]["ours_vs_torch_runner"] == pytest.approx(row["us"]["aoti_run"] / row["us"]["torch_runner"])
    assert row["ratios"]["python_vs_torch_runner"] > 0
    # ours against the same package under torch's runner (the bf16 rows' second check), and it holds here
    assert row["vs_torch_runner"]["aoti_run"]["ok"], row["vs_torch_runner"]
    assert not any("graph" in k for k in row["us"])  # no graphs on the CPU
    assert row["ok"] is True and row["torch_runner_load_s"] >= 0
    md = (tmp_path / "rows.md").read_text().splitlines()
    assert md[0].startswith("| model | dtype | batch | eager ms | torch runner ms | aoti-run ms | Python ms |")
    assert md[2].startswith("| tiny_convnet | fp32 | 2 |") and "ok (max err" in md[2]
    # the export is cached: a second run finds it
    proc = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--models", "tiny_convnet", "--dtypes",
                           "fp32", "--batches", "2", "--work", str(tmp_path / "w"), "--export-only"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "(0 to export" in proc.stdout and "1 of 1 rows exported" in proc.stdout, \
        proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.long  # starts an export process and stops it
def test_budget_stops_with_a_table(tmp_path, host_build, torch):
    proc, res = run_bench(tmp_path, host_build, "--budget-s", "4", "--reexport")
    (row,) = res["rows"]
    assert row["status"].startswith("not measured") and row["us"] == {}, row
    assert "0 of 1 rows measured" in proc.stdout and "| tiny_convnet | fp32 | 2 |" in proc.stdout
    assert res["meta"]["elapsed_s"] < 30
