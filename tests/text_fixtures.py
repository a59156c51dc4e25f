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


def save_text_model(folder: Path):
    """The tokenizer above and a 4-layer Llama over its vocabulary with seeded random bf16 weights,
    saved into ``folder`` as ``save_pretrained`` does (tests/test_gpu_text.py; scripts/prebuild.py
    builds its kernels ahead). Returns the tokenizer."""
    import torch
    import transformers

    save_tokenizer(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=False, bos_token_id=None, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # realistic magnitudes: the default init leaves norms at 1 and matrices tiny
        for _, p in model.named_parameters():
            p.copy_(1 + 0.05 * torch.randn_like(p) if p.dim() == 1 else 0.05 * torch.randn_like(p))
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    return tok
