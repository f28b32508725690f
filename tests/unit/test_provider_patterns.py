"""verify's provider lookup (toolchain.verify.checks._provider) matches exactly what fnmatch.fnmatchcase does
with each provider's symbol_patterns, for the spec's providers and for patterns the prefix fast path does not
take."""

from __future__ import annotations

import fnmatch

from toolchain.spec import Provider, load_spec
from toolchain.verify.checks import _provider

NAMES = ["", "_Z", "_ZNSt6vectorIiE", "__cxa_throw", "__cxa", "__gxx_personality_v0", "__gxx_personality_v01",
         "exp", "expf", "ex", "log1p", "sqrt", "cuInit", "cuda", "cudaMalloc", "cu", "cub", "cufftPlan1d",
         "Sleef_expf8_u10", "GOMP_parallel", "omp_get_num_threads", "_Unwind_Resume", "__cpu_model", "malloc",
         "aoti_torch_cpu_add", "a*b", "a\\b", "ab", "axb", "a?", "[x]", "x", "\n_Z", "_Z\n", "cuA\n", "cu[A-Z]"]
ODD = ("*", "a*b", "a?", "[x]", "a\\*", "cu[A-Z]*", "x", "**", "")


def _fnmatch(name: str, providers) -> str | None:
    for p in providers:
        if any(fnmatch.fnmatchcase(name, pat) for pat in p.symbol_patterns):
            return p.name
    return None


def test_spec_providers_match_as_fnmatch():
    providers = load_spec().providers
    for name in NAMES + [s.name for s in load_spec().shims]:
        got = _provider(name, providers)
        assert (got.name if got else None) == _fnmatch(name, providers), name


def test_odd_patterns_match_as_fnmatch():
    for i, pat in enumerate(ODD):
        for extra in ((), ("exp*",), ("cu[A-Z]*", "Sleef_*", "x")):
            providers = (Provider(f"p{i}", ("libp.so",), (pat, *extra), False),)
            for name in NAMES:
                got = _provider(name, providers)
                assert (got.name if got else None) == _fnmatch(name, providers), (pat, extra, name)
