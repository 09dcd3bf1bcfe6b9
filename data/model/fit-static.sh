#!/usr/bin/env bash
# Makes the built-in static model: the table `mnemograph model distill` makes from
# all-MiniLM-L6-v2, fitted to that transformer's sentence vectors over WordNet 3.0's glosses and
# usage examples (data/model/fit/: corpus.py, teacher.py, fit.py; recipe in the model's README).
# Usage: data/model/fit-static.sh MINILM_DIR DISTILLED_DIR OUT_DIR [WORK_DIR]
#   MINILM_DIR     all-MiniLM-L6-v2 as fetched by data/model/fetch-minilm.sh
#   DISTILLED_DIR  the output of `cargo run --release --features minilm -- model distill`
#   OUT_DIR        where the fitted model folder is written
# Needs python3 with pip (numpy, scipy, safetensors and tokenizers are installed at pinned
# versions) and WordNet's data files (Debian's wordnet-base, /usr/share/wordnet).
set -euo pipefail

MINILM="${1:?usage: fit-static.sh MINILM_DIR DISTILLED_DIR OUT_DIR [WORK_DIR]}"
BASE="${2:?usage: fit-static.sh MINILM_DIR DISTILLED_DIR OUT_DIR [WORK_DIR]}"
OUT="${3:?usage: fit-static.sh MINILM_DIR DISTILLED_DIR OUT_DIR [WORK_DIR]}"
WORK="${4:-target/models/fit-work}"
WORDNET="${WORDNET:-/usr/share/wordnet}"
# Sentences the teacher embeds (the first of the shuffled corpus) and the λ tried.
SENTENCES="${SENTENCES:-90000}"
LAMBDAS="${LAMBDAS:-0.003,0.01,0.03,0.1,0.3}"
here="$(cd "$(dirname "$0")" && pwd)"

die() {
    echo "fit-static: $*" >&2
    exit 1
}

[ -f "$WORDNET/data.noun" ] || die "no WordNet data in $WORDNET (install Debian's wordnet-base, or set WORDNET)"
[ -f "$MINILM/model.safetensors" ] || die "no all-MiniLM-L6-v2 in $MINILM (data/model/fetch-minilm.sh)"
[ -f "$BASE/model.safetensors" ] || die "no distilled table in $BASE (mnemograph model distill)"
python3 -m pip install --quiet numpy==2.4.6 scipy==1.17.1 safetensors==0.8.0 tokenizers==0.23.3 ||
    die "pip could not install the pinned packages"
mkdir -p "$WORK"
python3 "$here/fit/corpus.py" "$WORDNET" "$WORK/sentences.txt"
python3 "$here/fit/teacher.py" "$MINILM" "$WORK/sentences.txt" "$WORK/teacher.npy" 0 "$SENTENCES"
python3 "$here/fit/fit.py" "$BASE" "$WORK/sentences.txt" "$WORK/teacher.npy" "$OUT" "$LAMBDAS"
sha256sum "$OUT/model.safetensors" >&2
