"""tests/gpu/prepare.py's job selection and its spread over --jobs processes (no export: the GPU machine
runs the jobs; run.sh skips the ones a run does not use)."""

from __future__ import annotations

import pytest

from tests.gpu import prepare
from tests.gpu.models import METHOD_PROGRAMS, MODELS


def test_default_is_every_job_and_skip_leaves_out_what_run_sh_does_not_use() -> None:
    jobs, programs = prepare.select_jobs(None, [])
    assert jobs == prepare.all_jobs() and programs == list(METHOD_PROGRAMS)
    assert {*MODELS, "sessions", "methods", "stateful_methods", "resnet18", "small_mlp_default"} == set(jobs)
    jobs, _ = prepare.select_jobs(None, ["resnet18", "mlp_default"])  # the old name of torch's default plugin
    assert "resnet18" not in jobs and "small_mlp_default" not in jobs and "sessions" in jobs


def test_a_method_programs_name_selects_the_methods_job_for_it_alone() -> None:
    assert prepare.select_jobs(["methods_mismatch", "mlp"], []) == (["mlp", "methods"], ["methods_mismatch"])
    jobs, programs = prepare.select_jobs(None, list(METHOD_PROGRAMS))
    assert "methods" not in jobs and programs == []  # no program left: no job (a worker would get no names)


def test_unknown_names_are_refused_with_the_choices() -> None:
    with pytest.raises(SystemExit, match="unknown job.*nope.*choose among.*sessions"):
        prepare.select_jobs(["nope"], [])


@pytest.mark.parametrize("n", [1, 2, 4, 40])
def test_spread_runs_each_job_once_in_at_most_n_balanced_groups(n: int) -> None:
    jobs = prepare.all_jobs()
    groups = prepare.spread(jobs, n)
    assert sorted(j for g in groups for j in g) == sorted(jobs) and len(groups) == min(n, len(jobs))
    loads = [sum(prepare.COST.get(j, 8) for j in g) for g in groups]
    # longest first to the least loaded: no group exceeds the ideal share by more than the largest job
    assert max(loads) <= sum(loads) / len(groups) + max(prepare.COST.values())
