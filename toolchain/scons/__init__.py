"""SCons tools of aoti-toolchain (loaded by SConstruct with toolpath=['toolchain/scons'])."""

from pathlib import Path as _Path

#: The folder to give SCons as toolpath for env.Tool("aoti_host") (works from a checkout and an install).
TOOL_DIR = str(_Path(__file__).resolve().parent)
