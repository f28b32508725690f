from __future__ import annotations

from toolchain.cli import main

raise SystemExit(main())
