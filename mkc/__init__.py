"""mkc: compile a Hugging Face decoder LLM into one persistent GPU kernel per decode step.

    import mkc
    mk = mkc.compile("llama-3.2-1b", target="h200", batch_size=1)
    logits = mk(input_ids, cache_position)
    tokens = mk.generate(prompt_ids, max_new_tokens=64)
    mk8 = mkc.load("build/llama-3.2-1b-h200", batch_size=8, weights=w)   # a multi-batch build
    model = mkc.load("build/llama-3.2-1b-h200", weights=w)   # every batch: the smallest that fits
    out = model.generate(ids, attention_mask=mask, max_new_tokens=64)  # transformers-style, left padding
"""

from mkc.version import __version__  # noqa: F401 (the package's version)


def compile(*args, **kwargs):  # noqa: A001
    """See :func:`mkc.api.compile`."""
    from mkc.api import compile as _compile

    return _compile(*args, **kwargs)


def load(build_dir, batch_size: int | None = None, weights: dict | None = None, device=None):
    """See :func:`mkc.api.load`: the schedule of ``batch_size`` from a multi-batch build, or (no
    batch size) every compiled batch, each call on the smallest that holds its rows."""
    from mkc.api import load as _load

    return _load(build_dir, batch_size, weights, device)
