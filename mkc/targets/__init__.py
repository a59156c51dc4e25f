"""Vendor backends, one package each (plugins of mkc.backend: each registers its Backend on import)."""
