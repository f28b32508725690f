"""One exit-code table (toolchain/spec/exit_codes.toml): the CLI reference (docs/cli.md, generated) documents it, the
CLIs use only it, and no other document states another code."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.helpers import edited_copy
from toolchain import codegen, errors
from toolchain.errors import EXIT_CODES, EXIT_CODES_FILE, SpecError, exit_code, load_exit_codes
from toolchain.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"
TABLE_HEADER = "| code | name | meaning | used by |"


def _readme_rows() -> list[tuple[int, str, str, str]]:
    lines = CLI_DOC.read_text().splitlines()
    assert lines.count(TABLE_HEADER) == 1, f"docs/cli.md needs exactly one exit-code table headed {TABLE_HEADER!r}"
    start = lines.index(TABLE_HEADER) + 2  # skip the alignment row
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 4, line
        rows.append((int(cells[0]), cells[1].strip("`"), cells[2], cells[3]))
    return rows


def test_cli_reference_table_is_the_spec_table():
    expected = [(e.code, e.name, e.meaning, ", ".join(e.tools)) for e in EXIT_CODES]
    assert _readme_rows() == expected


def test_docs_mention_no_other_exit_code():
    # The old one-line summaries ("Exit codes (...): 0 ok, 2 usage, ...") must not come back beside the table.
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for m in re.finditer(r"\bexit (\d+)\b", doc.read_text()):
            assert int(m.group(1)) in {e.code for e in EXIT_CODES}, f"{doc.name} names exit {m.group(1)}, not in the table"


def test_every_error_class_takes_its_code_from_the_table():
    by_class = {c: e.code for e in EXIT_CODES for c in e.classes}
    for name, cls in errors.ERROR_CLASSES.items():
        assert cls.exit_code == by_class[name], name
    assert codegen.CodegenError.exit_code == exit_code("bad_input")  # a SpecError
    from toolchain.export import ExportError

    assert ExportError is errors.ExportError and ExportError.exit_code == exit_code("export_failed")


def test_runtime_statuses_match_c_api_and_map_like_aoti_run(tmp_path):
    codegen.generate(tmp_path)  # c_api.h includes the generated status.h
    assert '#include "aoti_host/status.h"' in (tmp_path / "include/aoti_host/c_api.h").read_text()
    header = (tmp_path / "include/aoti_host/status.h").read_text()
    declared = {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(AOTI_HOST_[A-Z_]+) = (\d+)", header)}
    assert declared == errors.RUNTIME_STATUSES
    assert errors.error_for_status(declared["AOTI_HOST_INVALID_ARGUMENT"]) is errors.InputError  # a wrong blob: 3
    assert errors.error_for_status(declared["AOTI_HOST_NOT_FOUND"]) is errors.InputError
    assert errors.error_for_status(declared["AOTI_HOST_LOAD_FAILED"]) is errors.LoadError
    assert errors.error_for_status(declared["AOTI_HOST_RUN_FAILED"]) is errors.RunError
    assert errors.error_for_status(99) is errors.ToolchainError


def test_generated_header_has_every_code_and_status(tmp_path):
    codegen.generate(tmp_path)
    text = (tmp_path / "include/aoti_host/exit_codes.h").read_text()
    assert text.startswith("/* GENERATED FILE: do not edit.") and "toolchain/spec/exit_codes.toml" in text
    for e in EXIT_CODES:
        assert f"  {e.cxx_name} = {e.code}," in text
        for s in e.statuses:
            body = text[text.index(f"case {s}:"):]
            assert re.match(rf"case {s}:\s*(case \w+:\s*)*return {e.cxx_name};", body), s
    help_text = text[text.index("kAotiRunExitHelp"):]
    for e in EXIT_CODES:
        assert (f'"  {e.code:<3d} ' in help_text) == ("aoti-run" in e.tools), e.name


# No exit status is written as a number in the CLIs: they name a row of the table.
_LITERALS = {
    "runtime/tools/aoti_run.cpp": [r"Failure\{\s*\d", r"\breturn\s+\d+\s*;", r"\bexit\(\s*\d", r"enum\s+ExitCode"],
    "toolchain/cli/__init__.py": [r"\breturn\s+\d+\b", r"exit_code\s*=\s*\d", r"sys\.exit\(\s*\d"],
    **{f"toolchain/cli/main_{c}.py": [r"\breturn\s+\d+\b", r"sys\.exit\(\s*\d"]
       for c in ("run", "export", "demo", "verify", "inspect", "patch")},
    "toolchain/errors.py": [r"exit_code\s*=\s*\d"],
    "toolchain/export.py": [r"exit_code\s*=\s*\d"],
    "toolchain/codegen.py": [r"exit_code\s*=\s*\d", r"\breturn\s+\d+\b"],
    "toolchain/inspect.py": [r"\breturn\s+\d+\b"],
    "toolchain/release.py": [r"\breturn\s+\d+\b"],
    "toolchain/findings.py": [r"EXIT_\w+\s*=\s*\d"],
    "toolchain/report/formats.py": [r"exit_code\s*[!=<>]=?\s*\d", r"[Ee]xit[Cc]ode\W+\d"],
}
# verify's --help names what each status means: the numbers come from the table, not the text
_LITERALS["toolchain/cli/main_verify.py"] += [r"exit codes: \d", r"[;:]\s*\d+ (?:pass|failed|usage)"]


@pytest.mark.parametrize("rel", sorted(_LITERALS))
def test_no_literal_exit_codes(rel):
    text = (ROOT / rel).read_text()
    for pattern in _LITERALS[rel]:
        hits = [m.group(0) for m in re.finditer(pattern, text)]
        assert not hits, f"{rel}: literal exit code(s) {hits}; use the table (exit_code(...) / kExit...)"


def test_verify_help_takes_its_numbers_from_the_table():
    from toolchain.cli.main_verify import exit_codes_help

    text = exit_codes_help()
    for name, meaning in (("ok", "pass"), ("failed", "failed"), ("usage", "usage error"), ("bad_input", "an input")):
        assert f"{exit_code(name)} {meaning}" in text, (name, text)


def test_aoti_run_uses_only_codes_of_the_table():
    text = (ROOT / "runtime/tools/aoti_run.cpp").read_text()
    used = set(re.findall(r"\bkExit\w+", text)) - {"kExitHelp"}
    known = {e.cxx_name for e in EXIT_CODES}
    assert used and used <= known, used - known
    aoti_run_codes = {e.cxx_name for e in EXIT_CODES if "aoti-run" in e.tools}
    assert used <= aoti_run_codes, f"aoti-run exits with {used - aoti_run_codes}, which the table does not list for it"


@pytest.mark.parametrize(("old", "new", "message"), [
    ('code = 6\n', 'code = 5\n', "duplicate"),
    ('classes = ["RunError"]', 'classes = ["RunErorr"]', "RunErorr"),
    ('statuses = ["AOTI_HOST_RUN_FAILED"]', "statuses = []", "AOTI_HOST_RUN_FAILED in no row"),
    ('code = 130\n', 'code = 300\n', "0..255"),
    ('name = "usage"', 'name = "Usage Error"', "identifier"),
    ('schema = 1', 'schema = 2', "schema"),
])
def test_malformed_table_is_refused(tmp_path, old, new, message):
    bad = edited_copy(EXIT_CODES_FILE, tmp_path / "exit_codes.toml", old, new)
    with pytest.raises(SpecError, match=re.escape(message)) as info:
        load_exit_codes(bad)
    assert str(bad) in str(info.value) and info.value.fix


def test_codegen_reads_the_given_table(tmp_path):
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    for f in load_spec().sources[0].parent.glob("*.toml"):  # a spec directory holds every spec file
        shutil.copy(f, spec_dir / f.name)
    table = tmp_path / "exit_codes.toml"
    table.write_text(EXIT_CODES_FILE.read_text().replace("code = 7\n", "code = 9\n"))
    codegen.generate(tmp_path / "out", spec_dir=spec_dir, exit_codes_file=table)
    assert "kExitExportFailed = 9," in (tmp_path / "out/include/aoti_host/exit_codes.h").read_text()
