"""A tiny Llama checkpoint built on the spot (no download): random weights, a WordLevel tokenizer.

2 layers, 4 query heads and 2 KV heads of head_dim 64 (a head size vLLM's CPU attention accepts), float32.
The weights are drawn with a larger spread than the usual 0.02 so that greedy continuations depend on
the whole prompt: at 0.02 a random model repeats one token whatever the prompt, and wrong KV would go
unseen. Deterministic: the same seed gives the same checkpoint bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 1024          # token ids 0..2 are <unk>, <s>, </s>; prompts use 3..VOCAB-1
SPECIALS = ("<unk>", "<s>", "</s>")
INIT_STD = 0.15
KV_HEADS, HEAD_DIM, LAYERS = 2, 64, 2


def build(path: Path, seed: int = 0) -> Path:
    """Writes the checkpoint and tokenizer into ``path`` (created); returns it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=4 * HEAD_DIM, intermediate_size=512,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=KV_HEADS,
                         head_dim=HEAD_DIM, max_position_embeddings=2048, initializer_range=INIT_STD,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(path, safe_serialization=True)

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    (path / "kvtier-tiny-llama.json").write_text(json.dumps({"seed": seed, "init_std": INIT_STD}))
    return path


def build_lora(path: Path, seed: int, rank: int = 8) -> Path:
    """A PEFT-format LoRA adapter of the tiny Llama on q, k and v projections (so it changes the KV),
    random A and B; written into ``path``."""
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    hidden, out = 4 * HEAD_DIM, {"q_proj": 4 * HEAD_DIM, "k_proj": KV_HEADS * HEAD_DIM, "v_proj": KV_HEADS * HEAD_DIM}
    tensors = {}
    for layer in range(LAYERS):
        for proj, width in out.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=gen) * 0.1
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(width, rank, generator=gen) * 0.1
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
        "bias": "none", "target_modules": list(out), "base_model_name_or_path": None, "fan_in_fan_out": False,
        "modules_to_save": None, "use_rslora": False, "use_dora": False}))
    return path
