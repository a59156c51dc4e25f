"""AMD targets (MI300X gfx942, MI250X gfx90a): HIP through the shared kernel template.

    backend.py   AmdBackend: capabilities, launch limits, and the three parts below
    dialect.py   AmdDialect: the HIP spellings the template prints (wave64, agent-scope sync, LDS)
    compiler.py  clang-19 -> code object (gfx90a) or ISA assembly (gfx942 with Debian's libraries)
    driver.py    HipDriver: ctypes on libamdhip64 (untested on AMD hardware)
"""
