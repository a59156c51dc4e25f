"""mkc: compile a Hugging Face decoder LLM into one persistent GPU kernel per decode step.

    import mkc
    mk = mkc.compile("llama-3.2-1b", target="h200", batch_size=1)
    logits = mk(input_ids, cache_position)
    tokens = mk.generate(prompt_ids, max_new_tokens=64)
"""

__version__ = "0.1.0"


def compile(*args, **kwargs):  # noqa: A001
    """See :func:`mkc.api.compile`."""
    from mkc.api import compile as _compile

    return _compile(*args, **kwargs)
