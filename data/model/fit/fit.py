"""Fits the static token table to the teacher's sentence vectors (a least-squares take on
model2vec's tokenlearn). A sentence's vector is the mean of its tokens' rows (A W, A the
mean-pooling matrix of the corpus, [UNK] dropped as mnemograph does). The targets Y are the
teacher's vectors projected orthogonally onto their top 256 directions (dot products kept to
the energy printed); the distilled table W0, mapped by least squares into that space, is the
prior. W solves min |A W − Y|² + λ |W − W0|² by conjugate gradients, one column at a time
(all at once). λ is chosen among the given ones on a tenth of the sentences held out: by how
many of each held-out sentence's ten nearest by the teacher the table finds among its own ten.
Usage: python3 fit.py BASE_DIR SENTENCES.txt TEACHER.npy[,TEACHER.npy...] OUT_DIR LAMBDA[,LAMBDA...]"""
import os
import shutil
import sys

import numpy as np
import scipy.sparse as sp
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

base, sentences, teacher_files, out_dir, lambdas = sys.argv[1:6]
W0 = load_file(f"{base}/model.safetensors")["embeddings"].astype(np.float32)
vocab, dim = W0.shape
T = np.concatenate([np.load(f) for f in teacher_files.split(",")])
n = T.shape[0]
texts = [l.rstrip("\n") for l in open(sentences)][:n]
tok = Tokenizer.from_file(f"{base}/tokenizer.json")
tok.no_truncation()
tok.no_padding()
unk = tok.token_to_id("[UNK]")
rows, cols, vals = [], [], []
for i, e in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
    ids = [t for t in e.ids if t != unk]
    for t in ids:
        rows.append(i)
        cols.append(t)
        vals.append(1.0 / len(ids))
A = sp.csr_matrix((vals, (rows, cols)), shape=(n, vocab), dtype=np.float32)
A.sum_duplicates()

perm = np.random.default_rng(0).permutation(n)
held, train = perm[: n // 10], perm[n // 10:]
_, _, vt = np.linalg.svd(T[train], full_matrices=False)
Y = T @ vt[:dim].T
print(f"fit: {n} sentences; the projection keeps {float((Y[train] ** 2).sum() / (T[train] ** 2).sum()):.4f} of the teacher's energy", file=sys.stderr)
Q, *_ = np.linalg.lstsq(A[train] @ W0, Y[train], rcond=None)
prior = W0 @ Q


def unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def found(W, idx, m=2000):
    """Share of each held-out sentence's ten nearest by the teacher among the table's ten."""
    s, t = unit(A[idx[:m]] @ W), unit(T[idx[:m]])
    ps, pt = s @ s.T, t @ t.T
    np.fill_diagonal(ps, -9)
    np.fill_diagonal(pt, -9)
    a, b = np.argsort(-pt, 1)[:, :10], np.argsort(-ps, 1)[:, :10]
    return float(np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a, b)]))


At = A[train].tocsr()
AtT = At.T.tocsr()


def solve(lam, iters=150):
    rhs = AtT @ Y[train] + lam * prior

    def op(x):
        return AtT @ (At @ x) + lam * x

    x = prior.copy()
    r = rhs - op(x)
    p = r.copy()
    rs = (r * r).sum(0)
    for _ in range(iters):
        ap = op(p)
        alpha = rs / np.maximum((p * ap).sum(0), 1e-30)
        x += p * alpha
        r -= ap * alpha
        rs_new = (r * r).sum(0)
        if np.sqrt(rs_new.max()) < 1e-6 * np.sqrt((rhs * rhs).sum(0).max()):
            break
        p = r + p * (rs_new / np.maximum(rs, 1e-30))
        rs = rs_new
    return x


print(f"fit: held out, teacher's ten found: distilled table {found(W0, held):.4f}, mapped {found(prior, held):.4f}", file=sys.stderr)
best = None
for lam in (float(x) for x in lambdas.split(",")):
    W = solve(lam)
    score = found(W, held)
    print(f"fit: λ {lam}: {score:.4f}", file=sys.stderr, flush=True)
    if best is None or score > best[0]:
        best = (score, lam, W)
print(f"fit: chose λ {best[1]}", file=sys.stderr)
os.makedirs(out_dir, exist_ok=True)
for f in ["tokenizer.json", "config.json"]:
    shutil.copy(f"{base}/{f}", out_dir)
save_file({"embeddings": best[2].astype(np.float16)}, f"{out_dir}/model.safetensors")
