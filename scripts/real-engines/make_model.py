"""Writes the real-engine tier's tiny models, seeded and without any download.

    python make_model.py hf DIR      # a Llama config, random safetensors weights and a
                                     # byte-level BPE tokenizer with a chat template (SGLang)
    python make_model.py gguf FILE   # a llama-architecture GGUF with random F16 weights and a
                                     # small SPM vocabulary with byte fallback (llama.cpp)

Both are random: the text they generate is noise, which is all a serving benchmark needs.
The same seed writes the same files (the tokenizer's training text is seeded too).
"""

import json
import os
import random
import sys

import numpy as np

SEED = 20261201
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
VOCAB = 512
MAX_POSITIONS = 4096

WORDS = (
    "the of and to in is was for on that with as by at from his her an were are which this be "
    "or had not but what all when we there can more if no out so said who would up one about "
    "into them time then very your some could him my than first been other water long little "
    "cache prefix token server request batch model prompt stream latency throughput decode"
).split()


def training_text(rng, lines=4000):
    """Seeded text over ASCII words, digits and punctuation, so the merges are reproducible."""
    out = []
    for _ in range(lines):
        n = rng.randint(4, 16)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 99999)))
        out.append(" ".join(words) + rng.choice([".", ",", "?", "!", ":"]))
    return out


CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]


def write_tokenizer(directory, rng):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(rng), trainer=trainer)
    tok.save(os.path.join(directory, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|bos|>",
        "eos_token": "<|eos|>",
        "pad_token": "<|pad|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>"}, f)
    return tok.get_vocab_size(), tok.token_to_id("<|bos|>"), tok.token_to_id("<|eos|>")


def weights(np_rng):
    def rand(*shape):
        return (np_rng.standard_normal(shape) * 0.02).astype(np.float32)

    head_dim = HIDDEN // HEADS
    t = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = rand(HEADS * head_dim, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = rand(KV_HEADS * head_dim, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = rand(KV_HEADS * head_dim, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = rand(HIDDEN, HEADS * head_dim)
        t[p + "mlp.gate_proj.weight"] = rand(INTERMEDIATE, HIDDEN)
        t[p + "mlp.up_proj.weight"] = rand(INTERMEDIATE, HIDDEN)
        t[p + "mlp.down_proj.weight"] = rand(HIDDEN, INTERMEDIATE)
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
    t["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    t["lm_head.weight"] = rand(VOCAB, HIDDEN)
    return t


def write_hf(directory):
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    rng = random.Random(SEED)
    vocab, bos, eos = write_tokenizer(directory, rng)
    assert vocab == VOCAB, f"tokenizer has {vocab} tokens, want {VOCAB}"
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        "mlp_bias": False,
    }
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, f)
    save_file(weights(np.random.default_rng(SEED)), os.path.join(directory, "model.safetensors"))


def write_gguf(path):
    import gguf

    np_rng = np.random.default_rng(SEED)
    # SPM vocabulary: unknown, BOS, EOS, the 256 byte-fallback tokens, then word pieces.
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types_ = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types_ += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581" + w for w in WORDS]
    seen = set(tokens)
    for p in pieces:
        if p not in seen and len(tokens) < VOCAB:
            seen.add(p)
            tokens.append(p)
            types_.append(gguf.TokenType.NORMAL)
    while len(tokens) < VOCAB:
        tokens.append(f"<unused{len(tokens)}>")
        types_.append(gguf.TokenType.UNUSED)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("servebench-tiny-llama")
    w.add_context_length(MAX_POSITIONS)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTERMEDIATE)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types_)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def rand(*shape):
        return (np_rng.standard_normal(shape) * 0.02).astype(np.float16)

    head_dim = HIDDEN // HEADS
    w.add_tensor("token_embd.weight", rand(VOCAB, HIDDEN))
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(b + "attn_q.weight", rand(HEADS * head_dim, HIDDEN))
        w.add_tensor(b + "attn_k.weight", rand(KV_HEADS * head_dim, HIDDEN))
        w.add_tensor(b + "attn_v.weight", rand(KV_HEADS * head_dim, HIDDEN))
        w.add_tensor(b + "attn_output.weight", rand(HIDDEN, HEADS * head_dim))
        w.add_tensor(b + "ffn_norm.weight", np.ones(HIDDEN, np.float32))
        w.add_tensor(b + "ffn_gate.weight", rand(INTERMEDIATE, HIDDEN))
        w.add_tensor(b + "ffn_up.weight", rand(INTERMEDIATE, HIDDEN))
        w.add_tensor(b + "ffn_down.weight", rand(HIDDEN, INTERMEDIATE))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    w.add_tensor("output.weight", rand(VOCAB, HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("hf", "gguf"):
        sys.exit(__doc__)
    (write_hf if sys.argv[1] == "hf" else write_gguf)(sys.argv[2])
