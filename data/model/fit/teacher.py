"""The teacher: all-MiniLM-L6-v2 (a BERT of 6 layers) run in NumPy (float32) over sentences, each
the mean of its output token vectors (attention mask), normalised: what sentence-transformers
computes for that model. Sentences of similar length are batched together.
Usage: python3 teacher.py MODEL_DIR SENTENCES.txt OUT.npy [FROM TO]"""
import math
import sys
import time

import numpy as np
from safetensors.numpy import load_file
from scipy.special import erf
from tokenizers import Tokenizer

HEADS, DIM, LAYERS = 12, 384, 6
HEAD_DIM = DIM // HEADS


def layer_norm(x, g, b, eps=1e-12):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def gelu(x):
    return 0.5 * x * (1 + erf(x * 0.7071067811865476))


class MiniLM:
    def __init__(self, model_dir):
        w = load_file(f"{model_dir}/model.safetensors")
        self.w = w
        self.layers = [
            {k.split(f"encoder.layer.{i}.")[1]: v for k, v in w.items() if k.startswith(f"encoder.layer.{i}.")}
            for i in range(LAYERS)
        ]
        self.tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
        self.tok.no_padding()
        self.tok.enable_truncation(128)

    def forward(self, ids, mask):
        w = self.w
        b, s = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s][None]
        x = x + w["embeddings.token_type_embeddings.weight"][0][None, None]
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = (1.0 - mask[:, None, None, :]) * -1e4
        for l in self.layers:
            def dense(x, name):
                return x @ l[f"{name}.weight"].T + l[f"{name}.bias"]
            q = dense(x, "attention.self.query").reshape(b, s, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
            k = dense(x, "attention.self.key").reshape(b, s, HEADS, HEAD_DIM).transpose(0, 2, 3, 1)
            v = dense(x, "attention.self.value").reshape(b, s, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
            a = (q @ k) / math.sqrt(HEAD_DIM) + bias
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            c = (a @ v).transpose(0, 2, 1, 3).reshape(b, s, DIM)
            x = layer_norm(dense(c, "attention.output.dense") + x,
                           l["attention.output.LayerNorm.weight"], l["attention.output.LayerNorm.bias"])
            h = gelu(dense(x, "intermediate.dense"))
            x = layer_norm(dense(h, "output.dense") + x, l["output.LayerNorm.weight"], l["output.LayerNorm.bias"])
        m = mask[:, :, None]
        e = (x * m).sum(1) / m.sum(1)
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    def embed(self, texts, batch=256):
        encs = self.tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encs[i].ids))
        out = np.zeros((len(texts), DIM), np.float32)
        start = time.time()
        for at in range(0, len(order), batch):
            idx = order[at:at + batch]
            s = max(len(encs[i].ids) for i in idx)
            ids = np.zeros((len(idx), s), np.int64)
            mask = np.zeros((len(idx), s), np.float32)
            for r, i in enumerate(idx):
                e = encs[i].ids
                ids[r, :len(e)] = e
                mask[r, :len(e)] = 1
            out[idx] = self.forward(ids, mask)
            if (at // batch) % 50 == 0:
                print(f"teacher: {at} of {len(texts)} after {time.time() - start:.0f} s", file=sys.stderr, flush=True)
        return out


if __name__ == "__main__":
    model_dir, sentences, out = sys.argv[1:4]
    texts = [l.rstrip("\n") for l in open(sentences)]
    if len(sys.argv) > 5:
        texts = texts[int(sys.argv[4]):int(sys.argv[5])]
    np.save(out, MiniLM(model_dir).embed(texts))
