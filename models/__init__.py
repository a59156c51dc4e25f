"""The bundled model configs, installed as the package ``mkc.models``.

A regular package rather than a bare folder because setuptools' editable installs only map packages with an
``__init__.py``; ``mkc.capture.registry`` finds the configs through ``importlib.resources``.
"""
