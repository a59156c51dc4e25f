"""Static verification of a Schedule against its TaskGraph, and the means to test the verifier.

    verifier  proves a schedule safe or names what is unsafe (the ``verify`` stage, verify.json)
    oracle    an independent symbolic run of a few decode steps, the verifier's judge
    mutants   broken-on-purpose real schedules: verifier verdicts against the oracle's
    boxes     region boxes and their intersections, for the verifier

It sits above ``mkc.schedule`` (it checks what the scheduler made, and the mutation campaign
builds real pipelines), so nothing below imports it.
"""

from mkc.verify.verifier import CHECKS, VerifyReport, verify

__all__ = ["CHECKS", "VerifyReport", "verify"]
