"""nox sessions. Sessions only run commands; the project's logic lives in toolchain/ and tests/.

    nox -l                      the sessions and the build matrix
    nox -s lint tests           the default sessions (the default pytest run: tests marked long are skipped)
    nox -s slow                 only the tests marked long (other variants, fuzzing, fresh venvs and clones, Ray)
    nox -s build                every cell of cuda x cxx x stdlib (CUDA cells compile and link; no GPU needed)
    nox -t cpu                  only the CPU cells
    nox -s e2e                  real torch plugins through every host the build session built
    nox -s gpu                  on the GPU machine only (not a default session)
    nox -s release              sdist, wheels, runtime archives, repair, verify, fresh-venv test (toolchain.release)
    nox -s fuzz                 verify/inspect on 20,000 mutated real plugins (AOTI_FUZZ_CASES)
    nox -s fuzz_native -- --seconds 600    the runtime's libFuzzer targets (clang), 10 minutes each
    nox -s torch_versions       every torch release from 2.11 that pip installs here: export, run, record (downloads)

The lint, build, e2e, gpu and release sessions run in the current environment (`bash .ci/setup` makes .venv
with scons, lief, torch): they build C++ and need no package of their own.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    return str(BIN / name) if (BIN / name).exists() else (shutil.which(name) or name)


@nox.session(venv_backend="none", tags=["lint"])
def lint(session: nox.Session) -> None:
    """ruff, mypy, the import floors (import-linter contracts in pyproject.toml) and the generated rules
    reference and coverage table, in the current environment (the dev extra: pip install -e '.[dev]')."""
    session.run(_tool("ruff"), "check", "toolchain", "tests", "bench", "noxfile.py", "SConstruct")
    session.run(_tool("mypy"), "toolchain")
    session.run(_tool("lint-imports"), str(ROOT / "pyproject.toml"))  # also a test: tests/unit/test_import_layers.py
    session.run(sys.executable, "-m", "toolchain.rules_doc", "--check")
    # the coverage table against toolchain/torch_ops.json and shims.toml (tests/unit/test_coverage.py also
    # checks the data against the installed torch)
    session.run(sys.executable, "-m", "toolchain.coverage", "--check", "--no-torch")


@nox.session(tags=["tests"])
def tests(session: nox.Session) -> None:
    session.install("-e", ".[torch,dev]")
    session.run("python", "-m", "pytest", "tests", *session.posargs)


# The matrix: cuda x cxx x stdlib, ids named like the variant directories (build/<id>-release).
_CXX = {"g++": "gcc", "clang++": "clang"}
CELLS = [
    nox.param(cuda, cxx, stdlib,
              id="-".join([("cuda" if cuda == "on" else "cpu"), _CXX[cxx], *(["libcxx"] if stdlib == "libc++" else [])]),
              tags=["cuda" if cuda == "on" else "cpu"])
    for cuda in ("off", "on") for cxx in ("g++", "clang++") for stdlib in ("libstdc++", "libc++")
]


@nox.session(venv_backend="none", tags=["build"])
@nox.parametrize(("cuda", "cxx", "stdlib"), CELLS)
def build(session: nox.Session, cuda: str, cxx: str, stdlib: str) -> None:
    """Build one variant; CPU cells also run its native tests and link test."""
    if cxx == "g++" and stdlib == "libc++":
        session.skip("g++ with libc++ is not a supported configuration (scons refuses it): use cxx=clang++")
    if cuda == "on" and stdlib == "libc++":
        session.skip("nvcc does not support libc++ on x86-64 (scons refuses cuda=on stdlib=libc++)")
    if not shutil.which(cxx):
        session.skip(f"{cxx} is not installed (bash .ci/setup installs Debian's clang, libc++-dev, libc++abi-dev)")
    if cuda == "on":
        sys.path.insert(0, str(ROOT))
        from toolchain.scons.nvcc import find_nvcc

        if find_nvcc() is None:
            session.skip("nvcc not found: the CUDA cells need the CUDA toolkit (not a GPU)")
    args = [f"cuda={cuda}", f"cxx={cxx}", f"stdlib={stdlib}", *session.posargs]
    session.run(_tool("scons"), "-Q", "-j2", *args)
    if cuda == "off":
        variant = "-".join(["cpu", cxx.rstrip("+").replace("g", "gcc", 1) if cxx == "g++" else "clang",
                            *(["libcxx"] if stdlib == "libc++" else []), "release"])
        session.run(sys.executable, "-m", "pytest", "tests/integration/test_build_matrix.py", "-q",
                    "-k", f"native_tests_of_every_built_cpu_variant and {variant}")


@nox.session(venv_backend="none", tags=["e2e"])
def e2e(session: nox.Session) -> None:
    """Real torch plugins (exported here) through every CPU host the build session built."""
    session.run(sys.executable, "-m", "pytest", "tests/integration/test_build_matrix.py", "-q", "-k", "e2e",
                *session.posargs)


@nox.session(venv_backend="none", default=False, tags=["gpu"])
def gpu(session: nox.Session) -> None:
    """What runs on the GPU machine: the CUDA variant's run checks (tests/gpu/run.sh, from the GPU issue)."""
    session.run("bash", str(ROOT / "tests" / "gpu" / "run.sh"), *session.posargs, external=True)


@nox.session(venv_backend="none", tags=["slow"])
def slow(session: nox.Session) -> None:
    """The tests marked long, which the default pytest run skips (CI runs them after it)."""
    session.run(sys.executable, "-m", "pytest", "tests", "--long", "-m", "long", *session.posargs)


@nox.session(venv_backend="none", tags=["release"])
def release(session: nox.Session) -> None:
    """The release pipeline (toolchain/release.py, docs/packaging.md): sdist -> wheel (from the sdist) -> scons dist
    -> auditwheel repair + show -> verify every ELF -> install into a fresh venv and export/run there ->
    dist/SHA256SUMS. posargs go to it, e.g. `nox -s release -- --cuda` for the aoti-toolchain-cuda wheel too."""
    # every test first, the long ones included (not the two that run this very pipeline themselves)
    session.run(sys.executable, "-m", "pytest", "tests", "--long", "--ignore=tests/integration/test_release.py",
                "--ignore=tests/integration/test_wheel.py")
    session.run(sys.executable, "-m", "toolchain.release", *session.posargs)


@nox.session(venv_backend="none", tags=["fuzz"])
def fuzz(session: nox.Session) -> None:
    """verify/inspect on mutated real plugins: AOTI_FUZZ_CASES (default here 20,000; the test run uses 2,000)."""
    session.env.setdefault("AOTI_FUZZ_CASES", "20000")
    session.run(sys.executable, "-m", "pytest", "tests/integration/test_verify_fuzz.py", "-q", "-s", *session.posargs)


@nox.session(venv_backend="none", default=False, tags=["fuzz"])
def fuzz_native(session: nox.Session) -> None:
    """The runtime's parsers under libFuzzer + ASan + UBSan (runtime/fuzz): build the targets with clang, generate
    their seeds and run each for a budget. posargs go to runtime/fuzz/run_fuzz.py: --seconds S (default 300
    here), --runs N, --targets json,npy,elf_scan,zip,contract, --pt2 PKG (a real package as a zip seed), --json
    OUT. Corpora accumulate in build/cpu-clang-release-fuzz/fuzz-work across runs."""
    args = list(session.posargs)
    if not any(a == "--seconds" or a.startswith("--seconds=") for a in args):
        args = ["--seconds", "300", *args]
    session.run(sys.executable, str(ROOT / "runtime" / "fuzz" / "run_fuzz.py"), *args)


@nox.session(venv_backend="none", default=False, tags=["torch_versions"])
def torch_versions(session: nox.Session) -> None:
    """The torch-version matrix (toolchain/torch_versions.py, docs/torch-versions.md): a venv per torch release
    from 2.11 up that pip can install here (about 4 GiB each, under build/torch-versions/, never in /tmp), each
    exporting the corpus with its own aoti_compile_and_package; every package runs through aoti-run and the Python
    module of the default build against that torch's eager outputs; rewrites toolchain/torch_versions.json and
    docs/torch-versions.md. Fails unless >= 3 releases pass. posargs go to the module (e.g. --versions 2.14.1)."""
    session.run(_tool("scons"), "-Q", "-j2")
    session.run(sys.executable, "-m", "toolchain.torch_versions", *session.posargs)
