"""The model-family corpus (tests/models_corpus.py) exported for CUDA with this machine's torch, run through the
Python module and aoti-run on the GPU, against eager torch on the GPU (TF32 off).

Needs the GPU machine: tests/gpu/run.sh builds the CUDA runtime and runs this file with AOTI_GPU_ARTIFACTS,
AOTI_HOST_LIBRARY and AOTI_RUN set; anywhere else it skips, saying why. Every model is exported once (into
$AOTI_GPU_ARTIFACTS/corpus/). A model whose export fails, that the runtime refuses (a CUDA fallback the host
lacks) or whose outputs differ FAILS with the reason: the pass count is the honest corpus coverage on CUDA.
With $OUT set, one line per model (model, ok/fail, max error, missing shims, reason) goes to
$OUT/corpus-cuda.txt, so the table survives failures.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.gpu import gpu_skip_reason
from tests.models_corpus import MODELS, imported_shims

pytestmark = pytest.mark.gpu
# as the CPU corpus test (tests/integration/test_models_corpus.py), int8_linear included
RTOL, ATOL = 1e-4, 1e-5


_REASON = gpu_skip_reason("AOTI_GPU_ARTIFACTS", "AOTI_HOST_LIBRARY", "AOTI_RUN")
if _REASON:
    print(f"test_corpus_cuda: skipped: {_REASON}")
    pytest.skip(_REASON, allow_module_level=True)

ART = Path(os.environ["AOTI_GPU_ARTIFACTS"]) / "corpus"
AOTI_RUN = os.environ["AOTI_RUN"]
LIBRARY = Path(os.environ["AOTI_HOST_LIBRARY"])
RESULTS = Path(os.environ["OUT"]) / "corpus-cuda.txt" if os.environ.get("OUT") else None


def _record(line: str) -> None:
    if RESULTS is not None:
        with RESULTS.open("a") as f:
            f.write(line + "\n")


def _missing_shims(pt2: Path) -> list[str]:
    from tests.models_corpus import implemented_shims

    have = implemented_shims()
    return [s for s in imported_shims(pt2) if s not in have]


def _outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple | list) else [out]


@pytest.fixture(scope="module")
def corpus():
    """corpus(name) -> (pt2 or None, eager outputs as numpy or None, numpy inputs, error text); each model is
    exported once."""
    import torch

    from toolchain import export

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ART.mkdir(parents=True, exist_ok=True)
    build = ART / "build"
    export.prepare_build_dirs(build)
    if RESULTS is not None:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text("model\tresult\tmax_abs_err\tmissing_shims\treason\n")
    cache: dict[str, tuple[Path | None, list[np.ndarray] | None, list[np.ndarray], str, Any]] = {}

    def get(name: str):
        if name in cache:
            return cache[name]
        module, inputs = MODELS[name]()
        np_inputs = [x.numpy() for x in inputs]
        expected, pt2, error = None, None, ""
        module = module.to("cuda").eval()
        dev_inputs = [x.to("cuda") for x in inputs]
        # A model that makes tensors in forward (a mask, a scatter target) makes them on the CPU: under
        # torch.device("cuda") they are on the GPU, as its parameters are. Only those models get the context.
        context: Any = contextlib.nullcontext
        for attempt in (contextlib.nullcontext, lambda: torch.device("cuda")):
            try:
                with torch.no_grad(), attempt():
                    expected = [o.detach().cpu().numpy() for o in _outputs(module(*dev_inputs))]
                context, error = attempt, ""
                break
            except Exception:  # noqa: BLE001 - reported as this model's failure, the others still run
                error = "eager on CUDA failed:\n" + traceback.format_exc(limit=3)
        if not error:
            try:
                with context():
                    pt2 = export.export(module, dev_inputs, ART / f"{name}.pt2", build_dir=build, device="cuda")
            except Exception:  # noqa: BLE001 - as above
                error = "export for CUDA failed:\n" + traceback.format_exc(limit=3)

        def exported() -> list[np.ndarray]:
            """The outputs of torch's own exported program (core ATen, as the plugin was compiled from)."""
            with torch.no_grad(), context():
                ep = torch.export.export(module, tuple(dev_inputs)).run_decompositions()
                return [o.detach().cpu().numpy() for o in _outputs(ep.module()(*dev_inputs))]

        cache[name] = (pt2, expected, np_inputs, error, exported)
        return cache[name]

    return get


def _compare(got: list[np.ndarray], want: list[np.ndarray], what: str) -> tuple[float, str]:
    """(max abs error over float outputs, failure text or "")."""
    if len(got) != len(want):
        return float("nan"), f"{what}: {len(got)} outputs, eager has {len(want)}"
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return float("nan"), f"{what} output {k}: {g.dtype}{g.shape} vs eager {w.dtype}{w.shape}"
        if g.size:
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))))
        try:
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{what} output {k}")
        except AssertionError as e:
            return worst, str(e)
    return worst, ""


def _exporting_torch_differs(name: str, got: list[np.ndarray], expected: list[np.ndarray], exported: Any) -> str:
    """When the exported program torch itself runs differs from eager in an output's shape, and our outputs
    (`got`, the Python module's) match that program's: the reason (the export, not the runtime, changed the
    result); else ""."""
    import torch

    try:
        want = exported()
    except Exception:  # noqa: BLE001 - no verdict without the exported program
        return ""
    if all(w.shape == e.shape for w, e in zip(want, expected, strict=False)) and len(want) == len(expected):
        return ""
    _, msg = _compare(got, want, f"python {name} against the exported program")
    if msg:
        return ""
    diffs = [f"output {k}: exported {w.shape} vs eager {e.shape}" for k, (w, e) in enumerate(zip(want, expected,
                                                                                                 strict=False))
             if w.shape != e.shape]
    return (f"torch {torch.__version__}'s own exported program of {name} differs from eager ({'; '.join(diffs)}); "
            "the plugin and the runtime match the exported program")


@pytest.mark.parametrize("name", list(MODELS))
def test_corpus_model_on_cuda(corpus, name: str, tmp_path: Path) -> None:
    from toolchain import runtime

    pt2, expected, inputs, error, exported = corpus(name)
    errors = [error] if error else []
    missing: list[str] = []
    py_out: list[np.ndarray] | None = None
    worst = 0.0
    if pt2 is not None and expected is not None:
        missing = _missing_shims(pt2)
        try:
            prog = runtime.load(pt2, device="cuda", library_path=LIBRARY)
            try:
                py_out = [np.array(o) for o in prog.run(inputs)]  # copies: they outlive the program
                err, msg = _compare(py_out, expected, f"python {name}")
            finally:
                prog.close()
            worst = max(worst, err)
            if msg:
                errors.append(msg)
        except Exception as e:  # noqa: BLE001 - a refusal (missing shim) is this model's failure
            errors.append(f"runtime.load/run refused: {type(e).__name__}: {e}")
        args = [AOTI_RUN, str(pt2), "--device", "cuda", "-o", str(tmp_path / "out"), "--quiet"]
        for k, x in enumerate(inputs):
            np.save(tmp_path / f"in{k}.npy", x)
            args += ["-i", str(tmp_path / f"in{k}.npy")]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            errors.append(f"aoti-run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        else:
            got = [np.load(tmp_path / "out" / f"output_{k}.npy") for k in range(len(expected))]
            err, msg = _compare(got, expected, f"aoti-run {name}")
            worst = max(worst, err)
            if msg:
                errors.append(msg)
    torch_bug = ""
    only_shapes = all(" vs eager " in e and e.startswith((f"python {name} output", f"aoti-run {name} output"))
                      for e in errors)
    if errors and only_shapes and not missing and py_out is not None and expected is not None:
        torch_bug = _exporting_torch_differs(name, py_out, expected, exported)
    reason = ""
    if torch_bug:
        _record(f"{name}\ttorch-export-differs\t{worst:.3g}\t-\t{torch_bug[:240]}")
        pytest.xfail(torch_bug)
    if errors:  # a traceback's last line names the exception; a comparison's first lines say what differs
        lines = [ln.strip() for ln in errors[0].strip().splitlines() if ln.strip()]
        reason = (lines[-1] if "Traceback" in errors[0] else " ".join(lines[:4]))[:240].replace("\t", " ")
    _record(f"{name}\t{'fail' if errors else 'ok'}\t{worst:.3g}\t{','.join(missing) or '-'}\t{reason or '-'}")
    if errors:
        shims = f"\nimports shims the host lacks: {', '.join(missing)}" if missing else ""
        pytest.fail(f"{name} on CUDA:{shims}\n" + "\n---\n".join(errors), pytrace=False)
