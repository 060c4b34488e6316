#!/usr/bin/env python3
"""Converts a sentence-transformers BERT directory (all-MiniLM-L6-v2: config.json,
model.safetensors, tokenizer.json, modules.json, 1_Pooling/config.json) to a GGUF of
architecture `bert`, for llama.cpp's `llama-server --embedding` (to compare braid's
/v1/embeddings with llama.cpp's on the same model).

    scripts/fetch-model.sh all-minilm-l6-v2
    .venv/bin/pip install gguf numpy safetensors tokenizers
    .venv/bin/python scripts/minilm-to-gguf.py [MODEL_DIR] [--outtype f16|f32] [--out FILE]
    llama-server -m models/all-MiniLM-L6-v2.f16.gguf --embedding   # elsewhere

Only the `gguf` package and numpy (and safetensors to read the weights): no torch, no
transformers. It writes what llama.cpp's convert_hf_to_gguf.py writes for a `BertModel`:

- Tensors renamed by gguf's own map for MODEL_ARCH.BERT (gguf.get_tensor_name_map), in the
  safetensors layout ([out, in], which GGUF stores as ne = [in, out], as llama.cpp's bert loader
  expects); `embeddings.position_ids` and the pooler are left out (llama.cpp embeds without
  them). With `--outtype f16` the 2-D weights are F16 except the position and token-type
  embeddings; biases and norms stay F32, as the converter does.
- Metadata: context length (max_position_embeddings, 512: the position table's rows), embedding
  length, block count, feed-forward length, head count, layer-norm epsilon, causal attention
  false, and the pooling type from 1_Pooling/config.json (MEAN for this model).
- The WordPiece vocabulary as tokenizer.ggml.model "bert" in the converter's "phantom space"
  form (a word-initial piece `the` becomes `\u2581the`, a continuation `##s` becomes `s`, special
  tokens stay as they are), the token types (special tokens CONTROL), the token-type count
  (type_vocab_size), and the special ids: [CLS] as bos, [SEP] as eos and sep, [UNK], [PAD],
  [MASK]; add_bos and add_eos true, add_sep false (what gguf.SpecialVocab derives from this
  tokenizer.json, checked below). tokenizer.ggml.pre is "bert-bge" when the tokenizer gives the
  converter's check hash for it (llama.cpp reads the pre-tokenizer only for BPE vocabularies).

llama.cpp is not built here, so the output is correct by construction and checked by reading
it back: gguf.GGUFReader lists every tensor with its type and shape against the shapes
llama.cpp's bert loader creates, the key metadata, the special tokens, and every tensor's
values against the safetensors file; and the numpy forward of scripts/embedding-reference.py,
run on the weights read back from the GGUF, reproduces tests/e2e/data/minilm_reference.json.

What differs in llama.cpp, beyond float rounding: it has no max_seq_length (it embeds up to the
512 positions where sentence-transformers cuts at 256 tokens), its GELU is the tanh
approximation where BERT's is erf, and llama-server normalizes (L2) the pooled vector itself.
"""

import argparse
import importlib.util
import json
import sys
from hashlib import sha256
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
ARCH = gguf.MODEL_ARCH.BERT

# convert_hf_to_gguf.py's pre-tokenizer check: its text, and the hash of the token ids that
# uncased BERT WordPiece tokenizers (its "bert-bge" entry) give for it.
CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 "
    "3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= "
    "нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not "
    "sure I'll make it, 'D you like some tea? We'Ve a'lL"
)
BERT_BGE_HASH = "0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f"

POOLING = {
    "pooling_mode_mean_tokens": gguf.PoolingType.MEAN,
    "pooling_mode_cls_token": gguf.PoolingType.CLS,
    "pooling_mode_lasttoken": gguf.PoolingType.LAST,
}
SKIPPED = {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
# Tensors the converter keeps in F32 whatever the output type (besides 1-D ones and norms).
ALWAYS_F32 = {gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES}


def fail(msg: str):
    sys.exit(f"minilm-to-gguf: {msg}")


def read_json(path: Path) -> dict:
    if not path.exists():
        fail(f"{path} is missing; run scripts/fetch-model.sh all-minilm-l6-v2")
    return json.loads(path.read_text(encoding="utf-8"))


def pooling_type(model_dir: Path) -> gguf.PoolingType:
    modules = read_json(model_dir / "modules.json")
    pooling = next((m for m in modules if m["type"].endswith(".Pooling")), None)
    if pooling is None:
        fail("modules.json lists no Pooling module")
    cfg = read_json(model_dir / pooling["path"] / "config.json")
    chosen = [kind for key, kind in POOLING.items() if cfg.get(key)]
    if len(chosen) != 1 or any(v for k, v in cfg.items() if k.startswith("pooling_mode_") and k not in POOLING):
        fail(f"1_Pooling/config.json asks for {cfg}; llama.cpp pools by exactly one of mean, cls, last token")
    return chosen[0]


def vocabulary(model_dir: Path, vocab_size: int) -> tuple[list[str], list[int], dict[str, int], list[int]]:
    """The token list (phantom-space form), token types, the special tokens' ids by role and
    the single-text template's ids, from tokenizer.json."""
    tok = read_json(model_dir / "tokenizer.json")
    model = tok["model"]
    if model.get("type") != "WordPiece":
        fail(f"tokenizer.json's model is {model.get('type')}, not WordPiece")
    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if max(by_id) >= vocab_size:
        fail(f"token id {max(by_id)} is past config.json's vocab_size {vocab_size}")

    tokens, types = [], []
    for i in range(vocab_size):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added and added[i].get("special"):
            tokens.append(text)  # CONTROL tokens keep their text
            types.append(gguf.TokenType.CONTROL)
        else:
            types.append(gguf.TokenType.USER_DEFINED if i in added else gguf.TokenType.NORMAL)
            tokens.append(text[2:] if text.startswith("##") else "\u2581" + text)

    config = read_json(model_dir / "tokenizer_config.json")
    ids = {t: i for i, t in by_id.items()}
    special = {}
    for role in ("cls", "sep", "unk", "pad", "mask"):
        name = config.get(f"{role}_token")
        name = name.get("content") if isinstance(name, dict) else name
        if name not in ids:
            fail(f"tokenizer_config.json's {role}_token {name!r} is not in the vocabulary")
        special[role] = ids[name]

    post = tok.get("post_processor") or {}
    if post.get("type") != "TemplateProcessing":
        fail(f"tokenizer.json's post-processor is {post.get('type')}, not BERT's TemplateProcessing")
    single = [p["SpecialToken"]["id"] if "SpecialToken" in p else "$A" for p in post["single"]]
    if [ids.get(s, s) for s in single] != [special["cls"], "$A", special["sep"]]:
        fail(f"tokenizer.json wraps a text as {single}, not [CLS] $A [SEP] (llama.cpp's WordPiece adds those two)")
    return tokens, types, special, [special["cls"], special["sep"]]


def pre_tokenizer(model_dir: Path) -> str:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return "default"
    t = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    t.no_truncation()
    t.no_padding()
    return "bert-bge" if sha256(str(t.encode(CHECK_TEXT).ids).encode()).hexdigest() == BERT_BGE_HASH else "default"


def convert(model_dir: Path, out: Path, outtype: str):
    config = read_json(model_dir / "config.json")
    if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
        fail(f"config.json is a {config.get('model_type')} with {config.get('position_embedding_type')} positions; this writes absolute-position BERT")
    if config.get("hidden_act") != "gelu":
        fail(f"hidden_act is {config.get('hidden_act')!r}; llama.cpp's bert runs gelu")
    n_layer = config["num_hidden_layers"]
    n_vocab = config["vocab_size"]

    weights = load_file(str(model_dir / "model.safetensors"))
    names = gguf.get_tensor_name_map(ARCH, n_layer)
    tokens, toktypes, special, _ = vocabulary(model_dir, n_vocab)
    file_type = gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32

    w = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[ARCH])
    w.add_name(model_dir.name)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(n_layer)
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(pooling_type(model_dir))
    w.add_file_type(file_type)
    w.add_vocab_size(n_vocab)

    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre(pre_tokenizer(model_dir))
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_type_count(config.get("type_vocab_size", 1))
    w.add_bos_token_id(special["cls"])
    w.add_eos_token_id(special["sep"])
    w.add_sep_token_id(special["sep"])
    w.add_unk_token_id(special["unk"])
    w.add_pad_token_id(special["pad"])
    w.add_mask_token_id(special["mask"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(False)

    prefix = "bert." if any(k.startswith("bert.") for k in weights) else ""
    written = {}
    for hf_name in sorted(weights):
        name = hf_name[len(prefix):] if hf_name.startswith(prefix) else hf_name
        if name in SKIPPED:
            continue
        found = names.get_type_and_name(name, try_suffixes=(".weight", ".bias"))
        if found is None:
            fail(f"no GGUF name for tensor {hf_name!r} in gguf's BERT map")
        kind, gguf_name = found
        data = weights[hf_name].astype(np.float32)
        keep_f32 = data.ndim <= 1 or gguf_name.endswith("_norm.weight") or not gguf_name.endswith(".weight") or kind in ALWAYS_F32
        if outtype == "f16" and not keep_f32:
            data = data.astype(np.float16)
        w.add_tensor(gguf_name, data)
        written[gguf_name] = name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor llama.cpp's bert loader creates for this config, by GGUF name, as ne."""
    e, ff, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {
        "token_embd.weight": (e, v),
        "token_types.weight": (e, config.get("type_vocab_size", 1)),
        "position_embd.weight": (e, config["max_position_embeddings"]),
        "token_embd_norm.weight": (e,),
        "token_embd_norm.bias": (e,),
    }
    for i in range(config["num_hidden_layers"]):
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            shapes[f"blk.{i}.{t}.weight"] = (e, e)
            shapes[f"blk.{i}.{t}.bias"] = (e,)
        for t in ("attn_output_norm", "layer_output_norm"):
            shapes[f"blk.{i}.{t}.weight"] = (e,)
            shapes[f"blk.{i}.{t}.bias"] = (e,)
        shapes[f"blk.{i}.ffn_up.weight"] = (e, ff)
        shapes[f"blk.{i}.ffn_up.bias"] = (ff,)
        shapes[f"blk.{i}.ffn_down.weight"] = (ff, e)
        shapes[f"blk.{i}.ffn_down.bias"] = (e,)
    return shapes


def field(reader: gguf.GGUFReader, key: str):
    f = reader.get_field(key)
    if f is None:
        fail(f"the written file lacks {key}")
    return f.contents()


def verify(model_dir: Path, out: Path, written: dict[str, str], outtype: str):
    config = read_json(model_dir / "config.json")
    reader = gguf.GGUFReader(str(out))
    arch = field(reader, "general.architecture")
    keys = {
        "general.architecture": "bert",
        f"{arch}.context_length": config["max_position_embeddings"],
        f"{arch}.embedding_length": config["hidden_size"],
        f"{arch}.block_count": config["num_hidden_layers"],
        f"{arch}.feed_forward_length": config["intermediate_size"],
        f"{arch}.attention.head_count": config["num_attention_heads"],
        f"{arch}.attention.causal": False,
        f"{arch}.pooling_type": int(pooling_type(model_dir)),
        "tokenizer.ggml.model": "bert",
        "tokenizer.ggml.token_type_count": config.get("type_vocab_size", 1),
    }
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
    for key, want in keys.items():
        got = field(reader, key)
        print(f"  {key} = {got!r}")
        if got != want:
            fail(f"{key} is {got!r}, not {want!r}")
    eps = field(reader, f"{arch}.attention.layer_norm_epsilon")
    print(f"  {arch}.attention.layer_norm_epsilon = {eps!r}")
    if not np.isclose(eps, config["layer_norm_eps"], rtol=1e-6):
        fail(f"layer_norm_epsilon is {eps}")
    for key in ("tokenizer.ggml.pre", "general.file_type", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_sep_token"):
        print(f"  {key} = {field(reader, key)!r}")

    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    if len(tokens) != config["vocab_size"] or len(types) != len(tokens):
        fail(f"{len(tokens)} tokens and {len(types)} token types for a vocabulary of {config['vocab_size']}")
    roles = {
        "bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id", "sep": "tokenizer.ggml.seperator_token_id",
        "unk": "tokenizer.ggml.unknown_token_id", "pad": "tokenizer.ggml.padding_token_id", "mask": "tokenizer.ggml.mask_token_id",
    }
    want_text = {"bos": "[CLS]", "eos": "[SEP]", "sep": "[SEP]", "unk": "[UNK]", "pad": "[PAD]", "mask": "[MASK]"}
    for role, key in roles.items():
        tid = field(reader, key)
        print(f"  {key} = {tid} {tokens[tid]!r}")
        if tokens[tid] != want_text[role] or types[tid] != gguf.TokenType.CONTROL:
            fail(f"{role} is token {tid} {tokens[tid]!r} of type {types[tid]}, not the CONTROL token {want_text[role]}")
    # What gguf.SpecialVocab (convert_hf_to_gguf.py's) derives from the same files.
    sv = gguf.SpecialVocab(model_dir, n_vocab=len(tokens))
    derived = {r: sv.special_token_ids.get(r) for r in roles}
    if derived != {r: field(reader, k) for r, k in roles.items()}:
        fail(f"gguf.SpecialVocab derives {derived}")
    if {f"add_{k}": v for k, v in sv.add_special_token.items()} != {
        f"add_{k}": field(reader, f"tokenizer.ggml.add_{k}_token") for k in sv.add_special_token
    }:
        fail(f"gguf.SpecialVocab derives {sv.add_special_token}")
    print(f"  tokens: {len(tokens)}, e.g. {tokens[1996]!r} {tokens[2015]!r} {tokens[101]!r}")

    shapes = expected_shapes(config)
    got = {t.name: t for t in reader.tensors}
    if set(got) != set(shapes):
        fail(f"tensors differ from llama.cpp's bert loader: extra {sorted(set(got) - set(shapes))}, missing {sorted(set(shapes) - set(got))}")
    weights = load_file(str(model_dir / "model.safetensors"))
    prefix = "bert." if any(k.startswith("bert.") for k in weights) else ""
    counts = {}
    for name, t in got.items():
        ne = tuple(int(x) for x in t.shape)
        if ne != shapes[name]:
            fail(f"{name} has ne {ne}, llama.cpp's bert loader wants {shapes[name]}")
        source = weights[prefix + written[name]].astype(np.float32)
        data = np.asarray(t.data, dtype=np.float32).reshape(source.shape)
        tol = 0 if t.tensor_type == gguf.GGMLQuantizationType.F32 else 1e-3 * np.abs(source).max()
        if np.abs(data - source).max() > tol:
            fail(f"{name} does not hold {written[name]}'s values")
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        if t.tensor_type == gguf.GGMLQuantizationType.F16 and outtype != "f16":
            fail(f"{name} is F16 in an F32 file")
    for t in reader.tensors[:5] + reader.tensors[5:21]:
        print(f"  {t.name:32s} {t.tensor_type.name:4s} {tuple(int(x) for x in t.shape)}")
    print(f"  ... {len(got)} tensors: {counts}")
    return reader, got, prefix


def check_forward(model_dir: Path, tensors: dict, written: dict[str, str]):
    """The reference forward, on the weights as read back from the GGUF, against the committed
    reference embeddings."""
    spec = importlib.util.spec_from_file_location("embedding_reference", ROOT / "scripts" / "embedding-reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    model = ref.SentenceTransformer(model_dir)
    shapes = {name: model.w[hf].shape for name, hf in written.items()}
    model.w = {hf: np.asarray(tensors[name].data, dtype=np.float64).reshape(shapes[name]) for name, hf in written.items()}
    reference = json.loads((ROOT / "tests" / "e2e" / "data" / "minilm_reference.json").read_text(encoding="utf-8"))
    worst = 1.0
    for ids, want in zip(reference["token_ids"], reference["embeddings"]):
        worst = min(worst, ref.cosine(model.embed_ids([ids])[0], want))
    print(f"  the reference forward on the GGUF's weights: worst cosine to minilm_reference.json {worst:.7f}")
    if worst < 0.9999:
        fail("the GGUF's weights do not reproduce the reference embeddings")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--outtype", choices=("f16", "f32"), default="f16")
    ap.add_argument("--out", type=Path, help="default: models/<dir name>.<outtype>.gguf")
    args = ap.parse_args()
    if not (args.model_dir / "model.safetensors").exists():
        fail(f"no model.safetensors in {args.model_dir}; run scripts/fetch-model.sh all-minilm-l6-v2")
    out = args.out or ROOT / "models" / f"{args.model_dir.name}.{args.outtype}.gguf"
    written = convert(args.model_dir, out, args.outtype)
    _, tensors, _ = verify(args.model_dir, out, written, args.outtype)
    check_forward(args.model_dir, tensors, written)


if __name__ == "__main__":
    main()
