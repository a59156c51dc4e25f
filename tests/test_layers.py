"""The import layers of pyproject.toml's [tool.importlinter], checked by import-linter on this tree.

The contracts describe the target architecture; KNOWN_VIOLATIONS lists the imports of today's tree that
break them. Each is ignored here, nowhere else, so ``lint-imports`` on its own shows them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
from importlinter.api import read_configuration

ROOT = Path(__file__).resolve().parents[1]

# Imports that break the contracts and are tolerated for now (none since the backend refactor of issue
# #12). An entry names "importer -> imported"; test_known_violations_are_still_there names stale ones.
KNOWN_VIOLATIONS: tuple[str, ...] = ()


def _ini_value(value) -> str:
    if isinstance(value, (list, tuple, set)):
        return "".join(f"\n    {v}" for v in value)
    return str(value)


def _config_with_known_violations(path: Path) -> None:
    """pyproject.toml's contracts, as an import-linter INI file that ignores KNOWN_VIOLATIONS."""
    config = read_configuration(str(ROOT / "pyproject.toml"))
    lines = ["[importlinter]"]
    lines += [f"{k} = {_ini_value(v)}" for k, v in config["session_options"].items()]
    for contract in config["contracts_options"]:
        options = dict(contract)
        ident = options.pop("id")
        options["ignore_imports"] = [*options.get("ignore_imports", ()), *KNOWN_VIOLATIONS]
        options["unmatched_ignore_imports_alerting"] = "none"  # staleness is the next test's job
        lines += ["", f"[importlinter:contract:{ident}]"]
        lines += [f"{k} = {_ini_value(v)}" for k, v in options.items()]
    path.write_text("\n".join(lines) + "\n")


def test_import_layers_hold(tmp_path):
    config = tmp_path / "importlinter.ini"
    _config_with_known_violations(config)
    # A fresh interpreter in the repository root, so the contracts check this tree's mkc.
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_known_violations_are_still_there():
    import mkc

    assert Path(mkc.__file__).resolve().parent == ROOT / "mkc", "the entries are about this tree's mkc"
    graph = grimp.build_graph("mkc", cache_dir=None)
    stale = []
    for entry in KNOWN_VIOLATIONS:
        importer, imported = (s.strip() for s in entry.split("->"))
        if not graph.direct_import_exists(importer=importer, imported=imported):
            stale.append(entry)
    assert not stale, f"no longer imported, delete from KNOWN_VIOLATIONS: {stale}"


def test_backends_are_found_not_listed():
    """Each vendor folder under mkc/targets/ registers one backend; the stages name none of them."""
    import re

    from mkc.backend import backends
    from mkc.target import TARGETS

    found = backends()
    folders = sorted(p.name for p in (ROOT / "mkc" / "targets").iterdir() if (p / "backend.py").exists())
    assert sorted(found) == folders and {t.vendor for t in TARGETS.values()} <= set(found)
    # no vendor name in the vendor-neutral code (comments aside; the target table is data that names each
    # GPU's vendor, which is how a stage finds the backend)
    core = [p for p in (ROOT / "mkc").rglob("*.py") if "targets" not in p.parts and p.name != "target.py"]
    pattern = re.compile(r"""["'](nvidia|amd)["']|\.vendor\s*==|\b(cuda|hip)_?(driver|runtime)\b""")
    offenders = []
    for path in core:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "vendor names in the core:\n" + "\n".join(offenders)
