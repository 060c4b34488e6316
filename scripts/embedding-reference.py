#!/usr/bin/env python3
"""Writes tests/e2e/data/minilm_reference.json: all-MiniLM-L6-v2's sentence embeddings of a few
texts, computed here from scratch, independently of braid (and of candle, torch and
sentence-transformers), for tests/e2e/test_embeddings.py to hold braid's /v1/embeddings to.

    scripts/fetch-model.sh all-minilm-l6-v2
    .venv/bin/pip install numpy safetensors tokenizers
    .venv/bin/python scripts/embedding-reference.py [MODEL_DIR] [--out FILE]

What it computes is what sentence-transformers computes for the directory, read from the
directory's own files rather than assumed:

- modules.json names the pipeline: the Transformer (a BertModel, config.json), then Pooling
  (1_Pooling/config.json says which: mean over the attention mask for this model), then, when
  listed, Normalize (L2).
- The text is tokenized by the `tokenizers` package from tokenizer.json, with special tokens,
  no padding, and truncated to sentence_bert_config.json's max_seq_length (256) counted with
  the special tokens: [CLS], the first 254 tokens of the text, [SEP]. (tokenizer.json itself
  asks for truncation at 128 and padding to 128; sentence-transformers overrides both, and so
  does this script.)
- The BERT forward is HF BertModel's, in numpy float64: word + position + token-type (0)
  embeddings, LayerNorm; per layer, multi-head self-attention (scores scaled by 1/sqrt(head
  dim), the attention mask added as a large negative to masked keys, softmax), the output
  projection, residual and LayerNorm, then the feed-forward (GELU in its exact erf form),
  residual and LayerNorm. Each text is run alone (no padding); the padded-batch path is checked
  against it once.

It checks, and fails otherwise, that the cosine similarities of the sentence-transformers
quickstart's three sentences are the published 0.6660, 0.1046 and 0.1411 (to 4 decimals).
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
DEFAULT_OUT = ROOT / "tests" / "e2e" / "data" / "minilm_reference.json"

QUICKSTART = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
# The similarities the sentence-transformers quickstart prints for QUICKSTART: (0,1), (0,2), (1,2).
QUICKSTART_SIMILARITIES = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


def long_text() -> str:
    """About 400 words of plain prose, the same on every run: well past 256 tokens."""
    subjects = ["The old lighthouse keeper", "A small fishing village", "The northern river", "Every spring the orchard",
                "The travelling musician", "A patient gardener", "The city library"]
    verbs = ["remembered", "watched over", "slowly changed", "quietly welcomed", "carefully described"]
    objects = ["the storms that came in from the grey sea each winter",
               "the children who ran along the harbour wall after school",
               "a thousand small stories that nobody had written down before"]
    sentences = [f"{subjects[i % 7]} {verbs[i % 5]} {objects[i % 3]}, and in year {1900 + 3 * i} it was still so."
                 for i in range(17)]
    return " ".join(sentences)


TEXTS = [
    *QUICKSTART,
    "What is the capital of France?",
    "Ça va? 東京は晴れです。",
    "Naïve café owners déjà vu: I ❤️ crème brûlée 🙂",
    'def add(a, b):\n    """Return the sum."""\n    return a + b  # {"x": [1, 2]}',
    "Embeddings",
    long_text(),
]


class SentenceTransformer:
    """The directory's pipeline (modules.json) in numpy float64."""

    def __init__(self, model_dir: Path):
        self.dir = model_dir
        modules = json.loads((model_dir / "modules.json").read_text())
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        if kinds[0] != "Transformer" or any(k not in ("Transformer", "Pooling", "Normalize") for k in kinds):
            sys.exit(f"embedding-reference: modules.json lists {kinds}; this script knows Transformer, Pooling, Normalize")
        transformer_dir = model_dir / modules[0]["path"]
        pooling = next((m for m in modules if m["type"].endswith(".Pooling")), None)
        if pooling is None:
            sys.exit("embedding-reference: modules.json lists no Pooling module")
        self.pooling = json.loads((model_dir / pooling["path"] / "config.json").read_text())
        self.normalize = "Normalize" in kinds

        st_config = json.loads((transformer_dir / "sentence_bert_config.json").read_text())
        self.config = json.loads((transformer_dir / "config.json").read_text())
        c = self.config
        if c["model_type"] != "bert" or c.get("position_embedding_type", "absolute") != "absolute":
            sys.exit(f"embedding-reference: config.json is {c['model_type']} / {c.get('position_embedding_type')}; this script runs absolute-position BERT")
        if c["hidden_act"] != "gelu":
            sys.exit(f"embedding-reference: hidden_act {c['hidden_act']!r}; this script runs 'gelu' (the erf form)")
        self.max_seq_length = min(st_config["max_seq_length"], c["max_position_embeddings"])
        self.lowercase = st_config.get("do_lower_case", False)

        self.tokenizer = Tokenizer.from_file(str(transformer_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_seq_length, strategy="longest_first")

        weights = load_file(str(transformer_dir / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {k[len(prefix):]: v.astype(np.float64) for k, v in weights.items() if k.startswith(prefix) and v.dtype.kind == "f"}

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text.lower() if self.lowercase else text, add_special_tokens=True).ids

    def layer_norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.config["layer_norm_eps"]) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def bert(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """HF BertModel's last hidden state, [batch, tokens, hidden], for token ids [batch, tokens]
        and an attention mask of 1 (a token) and 0 (padding)."""
        c, w = self.config, self.w
        batch, n = ids.shape
        heads = c["num_attention_heads"]
        head_dim = c["hidden_size"] // heads
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][np.arange(n)][None]
        x = x + w["embeddings.token_type_embeddings.weight"][0]
        x = self.layer_norm(x, "embeddings.LayerNorm")
        # Masked keys get the most negative float added (HF's extended attention mask).
        key_bias = (1.0 - mask[:, None, None, :].astype(np.float64)) * np.finfo(np.float64).min

        def split(t):  # [batch, tokens, hidden] -> [batch, heads, tokens, head_dim]
            return t.reshape(batch, n, heads, head_dim).transpose(0, 2, 1, 3)

        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q = split(self.linear(x, p + "attention.self.query"))
            k = split(self.linear(x, p + "attention.self.key"))
            v = split(self.linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + key_bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, n, heads * head_dim)
            x = self.layer_norm(self.linear(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = self.linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + ERF(h / math.sqrt(2.0)))
            x = self.layer_norm(self.linear(h, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """1_Pooling/config.json's pooling of [batch, tokens, hidden] into [batch, hidden]."""
        cfg, m = self.pooling, mask[..., None].astype(np.float64)
        parts = []
        if cfg.get("pooling_mode_cls_token"):
            parts.append(hidden[:, 0])
        if cfg.get("pooling_mode_max_tokens"):
            parts.append(np.where(m > 0, hidden, -1e9).max(1))
        if cfg.get("pooling_mode_mean_tokens"):
            parts.append((hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9))
        if cfg.get("pooling_mode_mean_sqrt_len_tokens"):
            parts.append((hidden * m).sum(1) / np.sqrt(np.maximum(m.sum(1), 1e-9)))
        unknown = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v and k not in (
            "pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_tokens", "pooling_mode_mean_sqrt_len_tokens")]
        if unknown or not parts:
            sys.exit(f"embedding-reference: 1_Pooling/config.json asks for {unknown or 'no pooling'}; this script knows cls, max, mean, mean_sqrt_len")
        return np.concatenate(parts, -1)

    def embed_ids(self, batch_ids: list[list[int]]) -> np.ndarray:
        """Embeddings of token-id lists, padded to one batch (pad id 0, masked)."""
        n = max(len(ids) for ids in batch_ids)
        ids = np.zeros((len(batch_ids), n), dtype=np.int64)
        mask = np.zeros((len(batch_ids), n), dtype=np.int64)
        for row, t in enumerate(batch_ids):
            ids[row, : len(t)] = t
            mask[row, : len(t)] = 1
        out = self.pool(self.bert(ids, mask), mask)
        if self.normalize:
            out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
        return out

    def embed(self, text: str) -> tuple[np.ndarray, list[int]]:
        ids = self.tokenize(text)
        return self.embed_ids([ids])[0], ids


ERF = np.vectorize(math.erf, otypes=[np.float64])


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def write_json(path: Path, doc: dict):
    """One text, token list or embedding per line: small diffs when the reference changes."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        end = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], (list, str)):
            rows = [json.dumps(v, ensure_ascii=False) for v in value]
            lines.append(f"  {json.dumps(key)}: [")
            lines += [f"    {r}," for r in rows[:-1]] + [f"    {rows[-1]}", f"  ]{end}"]
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{end}")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    if not (args.model_dir / "model.safetensors").exists():
        sys.exit(f"embedding-reference: no model.safetensors in {args.model_dir}; run scripts/fetch-model.sh all-minilm-l6-v2")

    model = SentenceTransformer(args.model_dir)
    embeddings, token_ids = [], []
    for text in TEXTS:
        e, ids = model.embed(text)
        embeddings.append(e)
        token_ids.append(ids)

    # The published fact this reference is held to.
    for (i, j), want in QUICKSTART_SIMILARITIES.items():
        got = cosine(embeddings[i], embeddings[j])
        print(f"quickstart similarity {i} vs {j}: {got:.6f} (published {want:.4f})")
        if round(got, 4) != want:
            sys.exit(f"embedding-reference: similarity {i} vs {j} is {got:.6f}, not the published {want:.4f}: the forward is wrong")
    # The masked, padded batch gives what each text alone gives.
    batch = model.embed_ids(token_ids[:3] + token_ids[-1:])
    for row, k in enumerate([0, 1, 2, len(TEXTS) - 1]):
        assert cosine(batch[row], embeddings[k]) > 1 - 1e-12, f"padded batch differs for text {k}"
    long_ids = token_ids[-1]
    full = model.tokenizer.encode(TEXTS[-1]).overflowing  # what truncation dropped
    assert len(long_ids) == model.max_seq_length and full, "the long text must be truncated"
    cls_id, sep_id = model.tokenizer.token_to_id("[CLS]"), model.tokenizer.token_to_id("[SEP]")
    assert long_ids[0] == cls_id and long_ids[-1] == sep_id

    doc = {
        "model": args.model_dir.name,
        "made_by": "scripts/embedding-reference.py",
        "max_seq_length": model.max_seq_length,
        "texts": TEXTS,
        "token_counts": [len(ids) for ids in token_ids],
        "token_ids": token_ids,
        "embeddings": [[round(float(x), 7) for x in e] for e in embeddings],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, doc)
    for text, ids in zip(TEXTS, token_ids):
        print(f"{len(ids):4d} tokens: {text[:60]!r}")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
