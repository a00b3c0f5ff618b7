#!/bin/sh
# Makes the measurement environment outside the repository: a Debian trixie
# chroot with Debian's torch 2.6 (python3-torch), and the source of a
# transformers release next to it.
#
#   tools/measure/setup.sh [CHROOT] [TRANSFORMERS_SRC]
#
# CHROOT defaults to /var/tmp/gpumem-trixie, TRANSFORMERS_SRC to
# /var/tmp/transformers-src. SUITE (default trixie) is the Debian release of
# the chroot: SUITE=bookworm gives Debian 12's torch 1.13.1, which needs an
# older transformers (TRANSFORMERS_TAG; tools/measure/README.md says which). Needs root, debootstrap and network access to
# deb.debian.org (a few minutes). transformers comes from GitHub at the tag
# in TRANSFORMERS_TAG (v4.57.1); with TRANSFORMERS_GIT set to a local git
# directory that has the tag (a fork's mirror), it is taken from there. Only
# src/transformers is extracted; its commit is written to
# TRANSFORMERS_SRC/COMMIT and every row records it. Nothing of transformers
# enters the repository.
set -eu
CHROOT=${1:-/var/tmp/gpumem-trixie}
SRC=${2:-/var/tmp/transformers-src}
TAG=${TRANSFORMERS_TAG:-v4.57.1}
SUITE=${SUITE:-trixie}

if [ ! -e "$CHROOT/.ready" ]; then
	debootstrap --variant=minbase "$SUITE" "$CHROOT" http://deb.debian.org/debian
	chroot "$CHROOT" apt-get update
	chroot "$CHROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		python3-torch libopenblas0-openmp python3-regex python3-tqdm python3-safetensors python3-numpy \
		python3-yaml python3-filelock python3-packaging python3-requests python3-pil
	touch "$CHROOT/.ready"
fi

if [ ! -e "$SRC/COMMIT" ]; then
	mkdir -p "$SRC"
	if [ -n "${TRANSFORMERS_GIT:-}" ]; then
		git --git-dir="$TRANSFORMERS_GIT" archive "$TAG" src/transformers | tar -x -C "$SRC"
		git --git-dir="$TRANSFORMERS_GIT" rev-parse "$TAG^{commit}" >"$SRC/COMMIT"
	else
		tmp=$(mktemp -d)
		git clone --quiet --depth 1 --branch "$TAG" https://github.com/huggingface/transformers "$tmp/t"
		cp -a "$tmp/t/src" "$SRC/"
		git -C "$tmp/t" rev-parse HEAD >"$SRC/COMMIT"
		rm -rf "$tmp"
	fi
	echo "$TAG" >"$SRC/TAG"
fi
echo "chroot $CHROOT, transformers $(cat "$SRC/TAG") $(cat "$SRC/COMMIT") in $SRC"
