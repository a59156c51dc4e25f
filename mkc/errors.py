"""Errors mkc raises for users. Each carries a message meant to be read, not a traceback."""


class MkcError(Exception):
    """Base class: the CLI prints the message and exits with status 2 (bad input) or 1."""

    exit_code = 2


class UnsupportedModelError(MkcError):
    """The model's architecture or one of its ops cannot be mapped onto mkc's op set."""


class UnknownNameError(MkcError):
    """An unknown model name, target or option value; the message lists the known ones."""


class IRCheckError(MkcError):
    """An IR failed its invariant check: a bug in the stage that produced it."""

    exit_code = 1


class ScheduleError(MkcError):
    """A schedule cannot be built (e.g. a task cannot fit the shared-memory budget)."""


class VerificationError(MkcError):
    """The static verifier rejected a schedule."""

    exit_code = 1


class KernelError(MkcError):
    """The kernel reported an error on the device (e.g. a bounded spin timed out)."""

    exit_code = 1
