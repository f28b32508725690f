"""Spec + jinja2 templates -> generated sources and linker lists.

Every list of shims (the declarations header, the dynamic list, the version scripts, the link test)
comes from the spec through here. Files are written atomically and only when their content changes,
so a spec edit that doesn't change a file doesn't rebuild what depends on it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from toolchain.atomic import write_if_changed
from toolchain.errors import (
    EXIT_CODES,
    EXIT_CODES_FILE,
    ExitCode,
    SpecError,
    ToolchainError,
    exit_code,
    load_exit_codes,
)
from toolchain.spec import Spec, load_spec

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = REPO_ROOT / "templates"

#: template -> path of the generated file, relative to the output directory.
OUTPUTS: dict[str, str] = {
    "shims.h.j2": "include/aoti_host/shims.h",
    "entry_points.h.j2": "include/aoti_host/entry_points.h",
    "exit_codes.h.j2": "include/aoti_host/exit_codes.h",
    "host.dynlist.j2": "link/host.dynlist",
    "runtime.version.j2": "link/runtime.version",
    "plugin.version.j2": "link/plugin.version",
    "link_test.c.j2": "src/link_test.c",
    "link_test_plugin.c.j2": "src/link_test_plugin.c",
}

GROUPS_BY_CONFIG = {False: ("core", "cpu"), True: ("core", "cpu", "cuda")}


class CodegenError(SpecError):
    """A template does not render (a spec problem in the wide sense: the generated sources can't be made)."""


@dataclass(frozen=True)
class Written:
    path: Path
    changed: bool


def template_files(template_dir: Path = TEMPLATE_DIR) -> list[Path]:
    """Every template a generated file depends on (includes too), for build-system dependencies."""
    return sorted(template_dir.glob("*.j2"))


def _environment(template_dir: Path):  # -> jinja2.Environment; jinja2 imported lazily (SCons startup)
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


#: Tools whose --help text the exit-code header carries (k<ident>ExitHelp), by their name in the table.
HELP_TOOLS: tuple[dict[str, str], ...] = ({"name": "aoti-run", "ident": "AotiRun"},)


def render(spec: Spec, groups: tuple[str, ...], template_dir: Path = TEMPLATE_DIR,
           exit_codes: tuple[ExitCode, ...] = EXIT_CODES) -> dict[str, str]:
    """Render every output; returns {relative output path: text}."""
    import jinja2

    env = _environment(template_dir)
    shims = spec.shims_in(*groups)
    spec_files = [f"toolchain/spec/{p.name}" for p in spec.sources]
    out: dict[str, str] = {}
    for template, rel in OUTPUTS.items():
        try:
            text = env.get_template(template).render(
                template=f"templates/{template}",
                spec_files=[f"toolchain/spec/{EXIT_CODES_FILE.name}"] if template == "exit_codes.h.j2" else spec_files,
                groups=groups,
                shims=shims,
                entry_points=spec.entry_points,
                exit_codes=exit_codes,
                help_tools=HELP_TOOLS,
            )
        except jinja2.TemplateError as exc:
            where = getattr(exc, "filename", None) or template
            line = getattr(exc, "lineno", None)
            msg = f"{where}{f':{line}' if line else ''}: template error: {exc}"
            raise CodegenError(msg) from exc
        out[rel] = text
    return out


def generate(
    out_dir: Path,
    *,
    cuda: bool = False,
    spec_dir: Path | None = None,
    template_dir: Path = TEMPLATE_DIR,
    exit_codes_file: Path = EXIT_CODES_FILE,
) -> list[Written]:
    spec = load_spec(spec_dir)
    rendered = render(spec, GROUPS_BY_CONFIG[cuda], template_dir, load_exit_codes(exit_codes_file))
    return [Written(out_dir / rel, write_if_changed(out_dir / rel, text)) for rel, text in rendered.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolchain.codegen", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="output directory (e.g. build/cpu-gcc-release/gen)")
    parser.add_argument("--cuda", action="store_true", help="include the cuda shim group")
    parser.add_argument("--spec-dir", type=Path, default=None, help="spec directory (default: toolchain/spec)")
    args = parser.parse_args(argv)
    try:
        for w in generate(args.out, cuda=args.cuda, spec_dir=args.spec_dir):
            print(f"{'wrote' if w.changed else 'unchanged'} {w.path}")
    except ToolchainError as exc:
        print(f"error: {exc}")
        return exc.exit_code
    return exit_code("ok")


if __name__ == "__main__":
    raise SystemExit(main())
