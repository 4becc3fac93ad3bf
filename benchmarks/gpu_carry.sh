#!/usr/bin/env bash
# Bring the project's dependencies to a GPU machine that cannot reach the package index.
#
#   benchmarks/gpu_carry.sh pack           # here, with PyPI: fills .gpu_carry/ (ignored by git)
#   . benchmarks/gpu_carry.sh install      # there, sourced from the repository root: installs into
#                                          # /tmp/site and exports PYTHONPATH and NAS_CACHE_DIR
#
# The GPU image already holds torch, numpy, pyyaml, tensorboard, matplotlib, tokenizers, safetensors,
# transformers (5.17 when last read; the export supports 4.45 on), pytest and
# pytest-xdist (the device tool's KINDS.md lists it); what it lacks is Optuna and Ray and their own
# needs.  Ray's wheel (about 80 MB) is over what a device call may carry (64 MiB with the tree), so
# it travels unpacked and re-compressed with xz, without its Java jars and the dashboard's source
# maps (nothing here uses either): about 31 MB.  The default corpus's cache files travel too, so
# tests and benchmarks need no network there.
#
# PY_VERSION (default 3.12) is the GPU machine's Python; the wheels are for x86-64 Linux.

CARRY=.gpu_carry
PY_VERSION=${PY_VERSION:-3.12}
# Optuna and what it needs beyond the image; Ray's core needs (click, filelock, msgpack, protobuf,
# requests, aiohttp are in the image) less jsonschema's family.
WHEELS=(optuna alembic sqlalchemy greenlet colorlog Mako jsonschema jsonschema-specifications referencing
        rpds-py)
RAY=${RAY:-ray==2.60.0}

pack() {
    local py=${PYTHON:-.venv/bin/python}
    rm -rf "$CARRY" && mkdir -p "$CARRY/whl" "$CARRY/cache"
    local plats=()
    for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
             manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64; do
        plats+=(--platform "$p")
    done
    local abi=cp${PY_VERSION/./}
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
        --implementation cp "${plats[@]}" -d "$CARRY/whl" "${WHEELS[@]}"
    local tmp
    tmp=$(mktemp -d)
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
        --implementation cp --abi "$abi" "${plats[@]}" -d "$tmp" "$RAY"
    (cd "$tmp" && unzip -q ray-*.whl && rm -rf ray-*.whl ray/jars ray/dashboard/client/build/static/js/*.map \
        && tar cf - ray ray-*.dist-info | xz -T0 -6 > ray.tar.xz)
    mv "$tmp/ray.tar.xz" "$CARRY/" && rm -rf "$tmp"
    # the default corpus, fetched once here into the cache that travels
    export NAS_CACHE_DIR="$PWD/$CARRY/cache"
    "$py" -c "from nas.data import load_corpus; load_corpus(None)"
    # a token corpus for the GPU search: a byte-level BPE of 4096 ids trained on the default corpus's
    # training text (search --data shakespeare --tokenizer .gpu_carry/tokenizer.json tokenizes it there)
    "$py" - "$CARRY/tokenizer.json" <<'PY'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from nas.data import load_corpus
text = bytes(load_corpus(None).train.tolist()).decode("utf-8", errors="replace")
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=4096, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator([text[i : i + 100_000] for i in range(0, len(text), 100_000)], trainer)
tok.save(sys.argv[1])
PY
    # ... and tokenized here once, into the same cache (one training step does it)
    "$py" run_search.py train --arch vanilla --data shakespeare --tokenizer "$CARRY/tokenizer.json" \
        --budget.steps 1 --threads 1 > /dev/null
    du -sh "$CARRY"
}

install() {  # sourced: no `set -e` here, which would outlive this script in the caller's shell
    local site=/tmp/site
    mkdir -p "$site" /tmp/nas-cache || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$CARRY"/whl/*.whl || return 1
    xz -dc "$CARRY/ray.tar.xz" | tar xf - -C "$site" || return 1
    cp -r "$CARRY"/cache/. /tmp/nas-cache/ || return 1
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" NAS_CACHE_DIR=/tmp/nas-cache
    export PATH="$site/bin:$PATH"
}

case "${1:-}" in
    pack) (set -euo pipefail; pack) ;;
    install) install ;;
    *) echo "usage: benchmarks/gpu_carry.sh pack | . benchmarks/gpu_carry.sh install" >&2; return 2 2>/dev/null || exit 2 ;;
esac
