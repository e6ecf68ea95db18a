"""A tiny GPT-2-shaped language model and its tokenizer, made here (no download), for the serving tests."""

from __future__ import annotations

from typing import Any

SENTENCES = [
    "the cat sat on the mat and looked at the door",
    "the dog ran in the park and found a red ball",
    "a bird sang in the tree while the sun came up",
    "my friend made tea and we talked about the rain",
]


def make_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained on ``SENTENCES`` (every text tokenizes: bytes are its base)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(SENTENCES * 4, vocab_size=320, min_frequency=1, special_tokens=["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def tiny_gpt2(tokenizer: Any, n_positions: int = 128, seed: int = 0, n_layer: int = 2, n_embd: int = 64) -> Any:
    """An untrained GPT-2 (by default two small layers) over ``tokenizer``'s vocabulary, in eval mode."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    eos = tokenizer.eos_token_id
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    return GPT2LMHeadModel(config).eval()


# The id-level tests' vocabulary: prompts are lists of ids, answers are compared as ids.
ID_VOCAB = 101


class IdTokenizer:
    """A tokenizer of ids only (the engine's tests feed ids and compare ids): decoding spells them."""

    eos_token_id = None

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def wide_random_gpt2(n_positions: int) -> Any:
    """An untrained 2-layer GPT-2 over ``ID_VOCAB`` ids, with no end token, in eval mode.

    Wide initial weights make a random model whose greedy picks vary (not one token repeated).
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=ID_VOCAB,
        n_positions=n_positions,
        n_embd=64,
        n_layer=2,
        n_head=4,
        initializer_range=0.3,
        bos_token_id=0,
    )
    config.eos_token_id = 0
    lm = GPT2LMHeadModel(config).eval()
    lm.generation_config.eos_token_id = None
    return lm
