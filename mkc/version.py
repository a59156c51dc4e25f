"""mkc's version, in a leaf module so that any layer may record it (the package root imports the API)."""

__version__ = "0.1.0"
