"""AMD targets (MI300X gfx942, MI250X gfx90a): HIP through the shared kernel template.

    dialect.py   AmdDialect: the HIP spellings the template prints (wave64, agent-scope sync, LDS)
    build.py     clang-19 -> code object (gfx90a) or ISA assembly (gfx942 with Debian's libraries)
    runtime.py   HipMegakernel: ctypes on libamdhip64 (untested on AMD hardware)
"""

from mkc.targets.amd.dialect import AmdDialect, dialect_for

__all__ = ["AmdDialect", "dialect_for"]
