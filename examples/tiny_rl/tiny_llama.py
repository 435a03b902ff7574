"""A tiny random-initialised Llama with a locally trained tokenizer: a real vLLM model, no hub download.

Recipe from ../shared/vllm_cpu.md: byte-level BPE trained on a few lines, a 2-layer LlamaConfig (head_dim 64,
since vLLM's CPU attention needs head size >= 32), saved with save_pretrained. Scaling the random lm_head
and adding a few stop tokens gives variable output lengths that are reproducible with a fixed seed.
"""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "the policy samples a response and the reward model scores it",
    "long rollouts hold back the whole batch while short ones wait",
    "weights move from the trainer to the generator after every step",
    "a group of samples shares one prompt and one baseline",
] * 8
STOP_IDS = [0, 1, 2, 3]  # special tokens <s>, </s>, <pad>, <unk>: any of them ends a sample


def build(folder: str | Path, *, vocab: int = 512, hidden: int = 128, layers: int = 2, seed: int = 0) -> Path:
    """Write tokenizer and model to ``folder`` (idempotent) and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(folder)
    if (out / "config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>", "<pad>", "<unk>"])
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peakier logits: stop tokens win sometimes, so lengths vary
    model.save_pretrained(out, safe_serialization=True)
    return out
