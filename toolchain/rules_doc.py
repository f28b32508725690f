"""docs/rules.md, the rules reference, generated from the rule table (toolchain/spec/rules.toml).

    python -m toolchain.rules_doc            rewrite docs/rules.md
    python -m toolchain.rules_doc --check    exit 1 when docs/rules.md is not current
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolchain.atomic import write_or_check
from toolchain.errors import exit_code
from toolchain.findings import RULES, STAGES

DOC = Path(__file__).resolve().parent.parent / "docs" / "rules.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = [
        "<!-- GENERATED FILE: do not edit. Source: toolchain/spec/rules.toml; regenerate with "
        "`python -m toolchain.rules_doc`. -->",
        "# Rules",
        "",
        "Every defect the toolchain reports has a rule: an id (printed as `[id]` or `[rule id]`), a default",
        "severity, the stages that check it and a fix. `link`: while SCons reads the build files or just",
        "before a link (inputs: archives and objects); `post-link`: after every link of the host builders",
        "(the checks engine of verify on the linked binary); `verify`: `aoti-toolchain verify`, the release and",
        "the post-link step. A fix in `{braces}` is filled in per finding. To change a rule, edit",
        "`toolchain/spec/rules.toml` and regenerate this page.",
        "",
    ]
    for stage in STAGES:
        rules = [r for r in RULES.values() if r.stages[0] == stage]
        lines += [f"## First checked at {stage}", "", "| id | severity | stages | applies to | summary |",
                  "|---|---|---|---|---|"]
        lines += [f"| [`{r.id}`](#{r.id}) | {r.severity} | {', '.join(r.stages)} | {r.applies_to} | "
                  f"{_cell(r.summary)} |" for r in rules]
        lines.append("")
    lines += ["## Fixes", ""]
    for r in RULES.values():
        lines += [f"### {r.id}", "", f"{r.summary}", "", f"Fix: {r.fix}", ""]
        lines += [f"- {name}: {text}" for name, text in r.fixes.items()]
        if r.fixes:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    return exit_code("ok" if write_or_check(DOC, render(), check, "python -m toolchain.rules_doc") else "failed")


if __name__ == "__main__":
    sys.exit(main())
