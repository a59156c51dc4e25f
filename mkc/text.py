"""Text in and out: the model folder's tokenizer, its chat template, and detokenising a stream of
ids piece by piece (a multi-byte character split over two tokens is printed once it is whole).

    tok = load_tokenizer(folder)                    # None when the folder has no tokenizer
    rows = encode_prompts(tok, ["Hello"], chat=False)
    stream = Detokenizer(tok); stream.push(new_ids) -> text printable now; stream.flush() at the end
"""

from __future__ import annotations

from pathlib import Path

from mkc.errors import MkcError

# what a folder holds when a tokenizer was saved with it (any one is enough to try AutoTokenizer)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def has_tokenizer(folder: str | Path) -> bool:
    d = Path(folder)
    return d.is_dir() and any((d / f).is_file() for f in TOKENIZER_FILES)


def load_tokenizer(folder: str | Path | None):
    """The folder's tokenizer through ``transformers.AutoTokenizer``, offline; None when the folder
    (or a registry model) has none."""
    if folder is None or not has_tokenizer(folder):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - a damaged or unsupported tokenizer: one line for the user
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise MkcError(f"cannot load the tokenizer in {folder}: {first}. Pass token ids with --prompt-ids "
                       f"instead") from None


def no_tokenizer_error(where: str) -> MkcError:
    return MkcError(f"{where} has no tokenizer (tokenizer.json / tokenizer_config.json), so text prompts cannot "
                    f"be encoded; pass token ids instead: mkc run DIR --prompt-ids 1,2,3 (registry models and "
                    f"folders without a tokenizer take ids only)")


def encode_prompts(tok, prompts: list[str], chat: bool = False) -> list[list[int]]:
    """One list of ids per prompt; ``chat`` wraps each prompt as one user turn of the chat template
    (with the generation prompt appended)."""
    rows = []
    for text in prompts:
        if chat:
            if not getattr(tok, "chat_template", None):
                raise MkcError("--chat needs a chat template, and this tokenizer has none (no chat_template in "
                               "tokenizer_config.json or chat_template.jinja); run without --chat")
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                          tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in some versions
                ids = ids["input_ids"]
        else:
            ids = tok(text)["input_ids"]
        ids = [int(i) for i in ids]
        if not ids:
            raise MkcError(f"the prompt {text!r} encodes to no tokens; give a non-empty prompt")
        rows.append(ids)
    return rows


def read_prompts_file(path: str | Path) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise MkcError(f"--prompts-file {p}: no such file")
    lines = [ln.rstrip("\r\n") for ln in p.read_text(encoding="utf-8").splitlines()]
    prompts = [ln for ln in lines if ln.strip()]
    if not prompts:
        raise MkcError(f"--prompts-file {p} holds no prompts (one prompt per non-empty line)")
    return prompts


class Detokenizer:
    """Incremental detokenising of one row: ``push`` the ids generated so far (or the new ones) and
    get the text that became printable. Text is decoded over a short window of recent ids, so a
    tokenizer that merges spaces or bytes across tokens gives the same text as decoding everything
    at once; a window ending in U+FFFD (an incomplete UTF-8 sequence) waits for the next token."""

    def __init__(self, tok, skip_special_tokens: bool = True):
        self.tok, self.skip = tok, skip_special_tokens
        self.ids: list[int] = []
        self.prefix = 0  # ids[prefix:read] is the context the last printed text was decoded with
        self.read = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=self.skip, clean_up_tokenization_spaces=False)

    def push(self, ids: list[int]) -> str:
        """Append ``ids`` (new ids only) and return the newly printable text."""
        self.ids.extend(int(i) for i in ids)
        if self.read >= len(self.ids):
            return ""
        before = self._decode(self.ids[self.prefix:self.read])
        now = self._decode(self.ids[self.prefix:])
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return ""  # nothing new yet, or an incomplete character: wait for more ids (flush prints the rest)
        self.prefix, self.read = self.read, len(self.ids)
        return now[len(before):]

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end is printed as is)."""
        before = self._decode(self.ids[self.prefix:self.read])
        now = self._decode(self.ids[self.prefix:])
        self.prefix = self.read = len(self.ids)
        return now[len(before):]

    def text(self) -> str:
        return self._decode(self.ids)
