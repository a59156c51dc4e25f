"""A small tokenizer trained offline with ``tokenizers`` (byte-level BPE, so multi-byte characters
split over tokens), saved the way a model folder holds one, with an EOS token and a chat template.
"""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a megakernel runs every layer of the model in one launch",
    "hello world, hello mkc",
    "café crème and naïve façade",
    "日本語のテキストも少し",
    "emoji pieces 🙂🚀 split over bytes",
] * 20

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def save_tokenizer(folder: Path, vocab_size: int = 300, chat: bool = True) -> Path:
    """Train a byte-level BPE of at most ``vocab_size`` ids on SENTENCES and save it into ``folder``
    (tokenizer.json + tokenizer_config.json). Special tokens: <|endoftext|> (EOS, id 0), <|end|>,
    <|user|>, <|assistant|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|end|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SENTENCES, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(folder)
    return folder
