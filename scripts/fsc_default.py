"""Turn CodegenOptions.fence_sc on by default (where the backend has Capabilities.sc_fence) in a
tree's mkc/codegen/render.py, for a device call that runs every GPU test on it before the default
changes for real (scripts/call_next.sh CALL=81 and CALL=82). Run it in a git worktree to prebuild
that tree's kernels (prebuild.py --tests --folders with PYTHONPATH at the worktree), and on the
device in the copied tree; never commit its output.

    python3 scripts/fsc_default.py [ROOT]
"""

from __future__ import annotations

import sys
from pathlib import Path

EDITS = (
    ("    fence_sc: bool = False\n", "    fence_sc: bool | None = None\n"),
    ("    if o.fence_sc and not for_target(target).capabilities(target).sc_fence:",
     "    fence_sc = o.fence_sc if o.fence_sc is not None else for_target(target).capabilities(target).sc_fence\n"
     "    if o.fence_sc and not for_target(target).capabilities(target).sc_fence:"),
    ("FENCE_SC=int(o.fence_sc)", "FENCE_SC=int(fence_sc)"),
)


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else ".") / "mkc" / "codegen" / "render.py"
    src = path.read_text()
    for old, new in EDITS:
        if src.count(old) != 1:
            print(f"fsc_default: {path} does not hold {old.strip()!r} once; render.py changed since this script", file=sys.stderr)
            return 2
        src = src.replace(old, new)
    path.write_text(src)
    print(f"fsc_default: {path}: fence_sc on by default where the backend has the fence")
    return 0


if __name__ == "__main__":
    sys.exit(main())
