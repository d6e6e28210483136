"""Write a tiny random-weight Llama model with a freshly trained byte-level BPE tokenizer.

Run with an interpreter that has transformers and tokenizers (the engine venv):
    python make_tiny_llama.py OUT_DIR --head-dim 64
Nothing is downloaded: the tokenizer is trained here on a few sentences.
"""

from __future__ import annotations

import argparse
from pathlib import Path

CORPUS = [
    "The capital of France is Paris. The capital of Germany is Berlin.",
    "A smoke test climbs from the cheapest check to a real generation.",
    "Serving engines answer health checks; only a generation proves they work.",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?-'\"()",
] * 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )

    heads = 2
    config = LlamaConfig(
        vocab_size=fast.vocab_size,
        hidden_size=heads * args.head_dim,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=args.head_dim,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    fast.save_pretrained(args.out)
    print(f"tiny llama: head_dim={args.head_dim}, vocab={fast.vocab_size}, out={args.out}")


if __name__ == "__main__":
    main()
