"""Mutation testing: the verifier and the oracle agree on every mutant of real schedules."""

from __future__ import annotations

import inspect
import random

import pytest

import mkc.verify.oracle as oracle
from mkc.verify.mutants import MUTATORS, default_bases, mutate, run_campaign


@pytest.fixture(scope="module")
def bases():
    return default_bases()


def test_bases_cover_families_batches_and_sync_modes(bases):
    labels = " ".join(b.label for b in bases)
    for word in ("llama", "qwen2", "qwen3", "mistral", "atomic", "nan", "b1", "b2", "down split", " xn"):
        assert word in labels


def test_every_kind_makes_mutants(bases):
    rng = random.Random(0)
    for kind in MUTATORS:
        made = [mutate(b, kind, rng) for b in bases]
        assert any(m is not None for m in made), kind


def test_small_campaign_agrees(bases):
    summary = run_campaign(300, seed=11, bases=bases, oracle_seeds=4)
    text = summary.text()
    print(text)
    assert summary.total == 300
    assert summary.unsafe_accepted == 0 and summary.safe_rejected == 0, text
    assert not summary.base_problems
    assert set(summary.rows) == set(MUTATORS)
    # both outcomes occur: the verifier is neither trivially strict nor trivially lax
    assert 0 < sum(r.unsafe for r in summary.rows.values()) < summary.total
    assert text.splitlines()[-1].startswith("PASS")


def test_campaign_on_the_normed_copies_agrees(bases):
    """Mutants of the graphs with the residual stream's normed bf16 copies (lower(xn_bf16=True)):
    their producers' extra writes and their readers' regions and waits; the verifier says what the
    oracle says on every one, and some of them are unsafe."""
    xn = [b for b in bases if b.label.endswith(" xn")]
    assert len(xn) == 2 and all(any(x.buffer.startswith("xss") for t in b.tg.tasks for x in t.reads) for b in xn)
    summary = run_campaign(80, seed=13, bases=xn, oracle_seeds=3)
    text = summary.text()
    assert summary.total == 80 and summary.unsafe_accepted == 0 and summary.safe_rejected == 0, text
    assert not summary.base_problems, text
    assert 0 < sum(r.unsafe for r in summary.rows.values()) < summary.total, text


def test_oracle_shares_no_code_with_the_verifier():
    src = inspect.getsource(oracle)
    assert "verify" not in src.replace("verifier", "").replace("verify.py", "")


def test_sampler_scratch_is_in_the_layout_both_checks_paint(bases):
    """The argmax task's sampler scratch is a region of the device plan (what codegen emits as
    SAMPLE_BASE): moved onto the pipeline's pages or the flag word it is unsafe, onto the GEMV
    layout safe, and the verifier says what the oracle says."""
    summary = run_campaign(24, seed=5, bases=bases, oracle_seeds=2, kinds=("sample_layout",))
    row = summary.rows["sample_layout"]
    assert row.total == 24 and 0 < row.unsafe < row.total, summary.text()
    assert row.unsafe_accepted == 0 and row.safe_rejected == 0, summary.text()
