#!/usr/bin/env bash
# Build KMinion for benchmarks/scale.py --kminion: `benchmarks/build_kminion.sh GIT_DIR` where GIT_DIR is a clone (or
# the bare snapshot the session's fetch tool gives, /work/.mirror/redpanda-data+kminion/repo) of the public
# github.com/redpanda-data/kminion. Its HEAD is built with this machine's Go (the module proxy serves its
# dependencies) into benchmarks/.kminion/kminion; benchmarks/.kminion is ignored by git: nothing downloaded is committed.
set -euo pipefail
git_dir="${1:?usage: $0 KMINION_GIT_DIR}"
out="$(cd "$(dirname "$0")" && pwd)/.kminion"
rm -rf "$out/src" && mkdir -p "$out/src"
git --git-dir="$git_dir" archive HEAD | tar -x -C "$out/src"
echo "kminion $(git --git-dir="$git_dir" rev-parse --short HEAD), $(go version)" > "$out/VERSION"
# The snapshot may ask for a newer patch toolchain than this machine's Go: build with the local one.
(cd "$out/src" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o "$out/kminion" .)
cat "$out/VERSION"
