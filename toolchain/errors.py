"""One exception hierarchy for the toolchain; one exit code per class."""

from __future__ import annotations


class ToolchainError(Exception):
    """Base of every error the toolchain reports to its users (never a traceback)."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix: str | None = fix

    def __str__(self) -> str:
        base = super().__str__()
        if self.fix:
            return f"{base}\n  fix: {self.fix}"
        return base


class SpecError(ToolchainError):
    """The spec (toolchain/spec/*.toml) is malformed."""

    exit_code = 3


class UsageError(ToolchainError):
    """The command line is wrong."""

    exit_code = 2


class InputError(ToolchainError):
    """A file given to us is missing or malformed, or an input doesn't fit the model."""

    exit_code = 3


class LoadError(ToolchainError):
    """A plugin or the host runtime library does not load."""

    exit_code = 4


class RunError(ToolchainError):
    """A plugin's Run failed."""

    exit_code = 5


class CompareError(ToolchainError):
    """Outputs differ from the reference beyond the tolerance."""

    exit_code = 6
