"""Moved to :mod:`mkc.target` (kept while the tree is being migrated)."""

from mkc.target import *  # noqa: F401,F403
from mkc.target import DEFAULT_TARGET, TARGETS, Target, get_target  # noqa: F401
