"""Writes the real-engine tier's tiny models, seeded and without any download.

    python make_model.py hf DIR      # a Llama config, random safetensors weights and a
                                     # byte-level BPE tokenizer with a chat template (SGLang)
    python make_model.py gguf FILE   # a llama-architecture GGUF with random F16 weights and a
                                     # small SPM vocabulary with byte fallback (llama.cpp)
    python make_model.py hf-think DIR     # the same shapes, weights set so the model thinks:
    python make_model.py gguf-think FILE  # see THINKING below

The random ones generate noise, which is all a serving benchmark needs. A random model never
closes its thinking, so the reasoning tests get a deterministic one: its attention and MLP
write nothing (o_proj and down_proj are zero), so the next token depends on the current token
alone, and its embeddings and output head make one chain:

    any other token -> <think> -> THINK_WORDS words -> </think> -> ANSWER_WORDS words -> EOS

Greedy decoding then streams exactly 1 + THINK_WORDS + 1 reasoning tokens (the markers
counted, as SGLang's usage counts them) and ANSWER_WORDS answer tokens, whatever the prompt
(unless the prompt ends in a chain token). The same seed writes the same files (the
tokenizer's training text is seeded too).
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


THINK_WORDS = 24
ANSWER_WORDS = 8
THINK_MARKERS = ["<think>", "</think>"]


def write_tokenizer(directory, rng, markers=()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(markers),
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(rng), trainer=trainer)
    # Plain added tokens (not special), as Qwen3's `</think>`: a server that skips special
    # tokens when it detokenizes still shows them, and its reasoning parser sees them.
    tok.add_tokens(list(markers))
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


def hf_chain(directory):
    """The thinking chain's token ids in the HF tokenizer written to DIRECTORY."""
    vocab = json.load(open(os.path.join(directory, "tokenizer.json")))["model"]["vocab"]
    words = sorted(
        (i, t) for t, i in vocab.items() if t.startswith("\u0120") and len(t) >= 4 and t[1:].isalpha()
    )
    added = {
        a["content"]: a["id"]
        for a in json.load(open(os.path.join(directory, "tokenizer.json")))["added_tokens"]
    }
    ids = [i for i, _ in words][: THINK_WORDS + ANSWER_WORDS]
    assert len(ids) == THINK_WORDS + ANSWER_WORDS, f"only {len(ids)} word tokens"
    think, answer = ids[:THINK_WORDS], ids[THINK_WORDS:]
    return [added["<think>"], *think, added["</think>"], *answer]


def chain_weights(chain, eos, dtype):
    """Embeddings and output head that make CHAIN, then EOS, the greedy continuation of any
    other token: token chain[k] sits on axis k + 1, every other token on axis 0."""
    assert len(chain) + 1 <= HIDDEN, "the chain needs one axis per token"
    embed = np.zeros((VOCAB, HIDDEN), dtype)
    embed[:, 0] = 1.0
    head = np.zeros((VOCAB, HIDDEN), dtype)
    for k, token in enumerate(chain):
        embed[token] = 0.0
        embed[token, k + 1] = 1.0
        head[token, k] = 4.0
    head[eos, len(chain)] = 4.0
    return embed, head


def silence_layers(t, prefix_out, prefix_down):
    """Zero each layer's writes to the residual stream, so the next token depends on the
    current one alone."""
    for name in list(t):
        if name.endswith(prefix_out) or name.endswith(prefix_down):
            t[name] = np.zeros_like(t[name])


def write_hf(directory, thinking=False):
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    rng = random.Random(SEED)
    markers = THINK_MARKERS if thinking else ()
    vocab, bos, eos = write_tokenizer(directory, rng, markers)
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
    t = weights(np.random.default_rng(SEED))
    if thinking:
        chain = hf_chain(directory)
        t["model.embed_tokens.weight"], t["lm_head.weight"] = chain_weights(chain, eos, np.float32)
        silence_layers(t, "self_attn.o_proj.weight", "mlp.down_proj.weight")
        with open(os.path.join(directory, "chain.json"), "w") as f:
            json.dump({"chain": chain, "eos": eos, "think_words": THINK_WORDS,
                       "answer_words": ANSWER_WORDS}, f)
    save_file(t, os.path.join(directory, "model.safetensors"))


# A Qwen3-shaped chat template (ChatML, thinking rendered as `<think>...</think>`): llama.cpp's
# template analyser finds the thinking markers from it and parses them out of the stream.
GGUF_THINK_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' and message.reasoning_content %}"
    "{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{{- message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def gguf_vocab(gguf, thinking):
    """SPM vocabulary: unknown, BOS, EOS, the 256 byte-fallback tokens, the thinking markers
    when asked (user-defined: matched whole in text and shown when detokenized), then word
    pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types_ = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types_ += [gguf.TokenType.BYTE] * 256
    if thinking:
        tokens += THINK_MARKERS
        types_ += [gguf.TokenType.USER_DEFINED] * len(THINK_MARKERS)
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
    fixed = 259 + (len(THINK_MARKERS) if thinking else 0)
    scores = [0.0] * fixed + [-float(i) for i in range(len(tokens) - fixed)]
    return tokens, types_, scores


def gguf_chain(tokens):
    """The thinking chain's token ids in the GGUF vocabulary: its first word pieces of four
    characters or more (a chat prompt ends in the template's newline, never in one of them)."""
    words = [i for i, t in enumerate(tokens) if t.startswith("\u2581") and len(t) >= 4]
    words = words[: THINK_WORDS + ANSWER_WORDS]
    assert len(words) == THINK_WORDS + ANSWER_WORDS, f"only {len(words)} word pieces"
    think, answer = words[:THINK_WORDS], words[THINK_WORDS:]
    return [tokens.index("<think>"), *think, tokens.index("</think>"), *answer]


def gguf_tensors(np_rng):
    def rand(*shape):
        return (np_rng.standard_normal(shape) * 0.02).astype(np.float16)

    head_dim = HIDDEN // HEADS
    t = {"token_embd.weight": rand(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = np.ones(HIDDEN, np.float32)
        t[b + "attn_q.weight"] = rand(HEADS * head_dim, HIDDEN)
        t[b + "attn_k.weight"] = rand(KV_HEADS * head_dim, HIDDEN)
        t[b + "attn_v.weight"] = rand(KV_HEADS * head_dim, HIDDEN)
        t[b + "attn_output.weight"] = rand(HIDDEN, HEADS * head_dim)
        t[b + "ffn_norm.weight"] = np.ones(HIDDEN, np.float32)
        t[b + "ffn_gate.weight"] = rand(INTERMEDIATE, HIDDEN)
        t[b + "ffn_up.weight"] = rand(INTERMEDIATE, HIDDEN)
        t[b + "ffn_down.weight"] = rand(HIDDEN, INTERMEDIATE)
    t["output_norm.weight"] = np.ones(HIDDEN, np.float32)
    t["output.weight"] = rand(VOCAB, HIDDEN)
    return t


def write_gguf(path, thinking=False):
    import gguf

    tokens, types_, scores = gguf_vocab(gguf, thinking)
    t = gguf_tensors(np.random.default_rng(SEED))
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("servebench-tiny-llama" + ("-thinking" if thinking else ""))
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
    if thinking:
        chain = gguf_chain(tokens)
        t["token_embd.weight"], t["output.weight"] = chain_weights(chain, 2, np.float16)
        silence_layers(t, "attn_output.weight", "ffn_down.weight")
        w.add_chat_template(GGUF_THINK_TEMPLATE)
        with open(path + ".chain.json", "w") as f:
            json.dump({"chain": chain, "eos": 2, "think_words": THINK_WORDS,
                       "answer_words": ANSWER_WORDS}, f)
    for name, tensor in t.items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    writers = {
        "hf": write_hf,
        "gguf": write_gguf,
        "hf-think": lambda d: write_hf(d, thinking=True),
        "gguf-think": lambda f: write_gguf(f, thinking=True),
    }
    if len(sys.argv) != 3 or sys.argv[1] not in writers:
        sys.exit(__doc__)
    writers[sys.argv[1]](sys.argv[2])
