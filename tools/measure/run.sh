#!/bin/sh
# Measures the whole grid in the chroot setup.sh made and writes
#   testdata/measured/cpu/<torch>-<date>.jsonl             one row per case
#     (the torch-1 grid: <torch>-transformers-<tag>-<date>.jsonl)
#   testdata/measured/cpu/validation-<torch>-<date>.jsonl  the method's validation
#
#   tools/measure/run.sh [CHROOT] [TRANSFORMERS_SRC]      (as root, from anywhere)
#
# measure.py, the import stubs, the catalog configs and transformers' source
# are copied into CHROOT/opt/gpumem; one process runs the cases of one model
# (OMP_NUM_THREADS=1: the rows do not depend on it, the machine's other users
# do). /proc, /sys and /dev are mounted in the chroot if they are not, and
# unmounted again at the end. MEASURE_ONLY=<regexp> limits the grid to the
# case ids it matches (grep -E). GRID=torch1 runs the torch-1 grid instead
# of the main one (measure.py --grid; a bookworm chroot and an older
# transformers: tools/measure/README.md). MEASURE_COMPILE=1 runs the compiled
# training cases instead (measure.py --list --compile) into
#   testdata/measured/cpu/compile-<torch>-<date>.jsonl
# with the compiled loss's validation (validation-compile-<torch>-<date>.jsonl)
# instead of the method's; the chroot then needs a C++ compiler and torch's
# headers for Inductor (apt-get install --no-install-recommends gcc g++
# libc6-dev python3-dev python3-setuptools libtorch-dev).
set -eu
CHROOT=${1:-/var/tmp/gpumem-trixie}
SRC=${2:-/var/tmp/transformers-src}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# MEASURE_OPT is the directory in the chroot the run copies its files to
# (default /opt/gpumem): two runs in one chroot at once need two.
OPTDIR=${MEASURE_OPT:-/opt/gpumem}
OPT=$CHROOT$OPTDIR
[ -e "$CHROOT/.ready" ] || { echo "run.sh: no chroot at $CHROOT: run tools/measure/setup.sh" >&2; exit 2; }
[ -e "$SRC/COMMIT" ] || { echo "run.sh: no transformers source at $SRC: run tools/measure/setup.sh" >&2; exit 2; }

mounted=""
for d in proc sys dev; do
	if ! mountpoint -q "$CHROOT/$d"; then
		case $d in proc) mount -t proc proc "$CHROOT/proc" ;; sys) mount -t sysfs sys "$CHROOT/sys" ;; dev) mount --bind /dev "$CHROOT/dev" ;; esac
		mounted="$CHROOT/$d $mounted"
	fi
done
cleanup() { for m in $mounted; do umount "$m" || true; done; }
trap cleanup EXIT

rm -rf "$OPT/measure" "$OPT/stubs" "$OPT/stubs-torch1" "$OPT/configs" "$OPT/work"
mkdir -p "$OPT/measure" "$OPT/work"
cp "$HERE/measure.py" "$OPT/measure/"
cp -a "$HERE/stubs" "$OPT/stubs"
cp -a "$HERE/stubs-torch1" "$OPT/stubs-torch1"
# The torch-1 grid's transformers (v4.47.1) checks other stub versions and
# imports safetensors, which bookworm does not package: stubs-torch1 first.
STUBS=$OPTDIR/stubs
[ "${GRID:-main}" != torch1 ] || STUBS=$OPTDIR/stubs-torch1:$STUBS
cp -a "$ROOT/model/configs" "$OPT/configs"
if [ ! -d "$OPT/transformers-src/src/transformers" ] || ! cmp -s "$SRC/COMMIT" "$OPT/transformers-src/COMMIT"; then
	rm -rf "$OPT/transformers-src"
	cp -a "$SRC" "$OPT/transformers-src"
fi

# The repository commit the rows were measured with; "+dirty" when tools/measure
# differs from it.
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
[ -z "$(git -C "$ROOT" status --porcelain -- tools/measure)" ] || COMMIT="$COMMIT+dirty"
inchroot() {
	chroot "$CHROOT" env -i PATH=/usr/bin:/bin HOME=/tmp OMP_NUM_THREADS=1 \
		GPUMEM_CATALOG=$OPTDIR/configs GPUMEM_COMMIT="$COMMIT" \
		GPUMEM_TRANSFORMERS_COMMIT="$(cat "$SRC/COMMIT")" \
		GPUMEM_TORCH_PACKAGE="$TORCHPKG" \
		GPUMEM_RUN="${GRID:+GRID=$GRID }${MEASURE_COMPILE:+MEASURE_COMPILE=1 }${MEASURE_ONLY:+MEASURE_ONLY='$MEASURE_ONLY' }tools/measure/run.sh (python3 measure.py --cases <the model's cases>)" \
		PYTHONPATH=$STUBS:$OPTDIR/transformers-src/src \
		python3 $OPTDIR/measure/measure.py "$@"
}

# Debian's package version: bookworm's python3-torch 1.13.1+dfsg reports
# torch.__version__ 1.13.0a0.
TORCHPKG=$(chroot "$CHROOT" dpkg-query -W -f '${Version}' python3-torch)
TORCH=${TORCHPKG%%[+-]*}
DATE=$(date -u +%Y-%m-%d)
OUT=$ROOT/testdata/measured/cpu
mkdir -p "$OUT"
ROWS=$OUT/$TORCH-$DATE.jsonl
# The torch-1 grid runs another transformers: its tag names the file.
[ "${GRID:-main}" != torch1 ] || ROWS=$OUT/$TORCH-transformers-$(cat "$SRC/TAG")-$DATE.jsonl
LIST="--list --grid ${GRID:-main}"
if [ -n "${MEASURE_COMPILE:-}" ]; then
	ROWS=$OUT/compile-$TORCH-$DATE.jsonl
	LIST="--list --compile"
	inchroot --validate --compile >"$OUT/validation-compile-$TORCH-$DATE.jsonl"
else
	inchroot --validate >"$OUT/validation-$TORCH-$DATE.jsonl"
fi
# shellcheck disable=SC2086
inchroot $LIST | grep -E "\"id\": \"(${MEASURE_ONLY:-.})" >"$OPT/work/grid.jsonl" || true
for m in $(sed 's/.*"id": "\([^/]*\)\/.*/\1/' "$OPT/work/grid.jsonl" | sort -u); do
	grep -F "\"id\": \"$m/" "$OPT/work/grid.jsonl" >"$OPT/work/$m.jsonl"
	echo "run.sh: $m: $(wc -l <"$OPT/work/$m.jsonl") cases" >&2
	inchroot --cases "$OPTDIR/work/$m.jsonl" >>"$ROWS" 2>"$OPT/work/$m.log" ||
		echo "run.sh: $m: the process failed; see $OPT/work/$m.log" >&2
done
echo "run.sh: $(wc -l <"$ROWS") rows in $ROWS" >&2
