"""Only the package list lives here; everything else is in pyproject.toml.

setuptools' declarative ``packages.find`` finds folders under mkc/ only, and a fixed list would silently drop
any package added later, so the list is found here and mkc.models (the top-level models/ folder, mapped in
pyproject.toml's package-dir) is added to it.
"""

from setuptools import find_namespace_packages, setup

# namespace-aware, as pyproject.toml's packages.find is by default, so data-only folders such as
# mkc/codegen/templates stay packages as before.
setup(packages=find_namespace_packages(include=["mkc", "mkc.*"]) + ["mkc.models"])
