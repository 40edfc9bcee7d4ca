#!/usr/bin/env bash
# Interleaved pairs of one command as typed, this tree against another (or HTA), in fresh
# processes, with /usr/bin/time: the check behind the as-typed table's medians of 3.
#
#   bash benchmarks/ab_pairs.sh MODE DIR N OUT [CMD] [ANCHOR_TREE]
#
# MODE: warm (a primed parse cache per tree), cold (an empty cache folder per run) or hta (HTA's
# load + temporal breakdown, then this tree cold twice, N rounds; HTA's venv in $HTA_PYTHON,
# default /work/venvs/hta/bin/python). CMD: analyze (default) or predict. ANCHOR_TREE: a
# checkout of the previous release (as_typed.py makes one under /tmp/as_typed/anchor-REF).
# Before every run the trace files are read once (in the page cache, as as_typed.py does).
# OUT gets one line per run: "LABEL wall_s user_s sys_s peak_KB"; a summary is printed.
set -euo pipefail
MODE=$1; D=$(realpath "$2"); N=$3; OUT=$(realpath -m "$4"); CMD=${5:-analyze}
ANCHOR=${6:-/tmp/as_typed/anchor-18856ef}
TREE=$(cd "$(dirname "$0")/.." && pwd)
HTA_PYTHON=${HTA_PYTHON:-/work/venvs/hta/bin/python}
# the interpreter itself, as HTA's venv python is: a version manager's shim (pyenv: a bash
# script, 0.06-0.2 s a start) would be timed for traincast only
PY=${PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"  # python -m puts the working folder first on sys.path: not a checkout
unset PYTHONDONTWRITEBYTECODE
tree_of() { if [ "$1" = new ]; then echo "$TREE"; else echo "$ANCHOR"; fi; }
one() {  # label tree cache
  cat "$D"/* > /dev/null 2>&1 || true  # (sub-folders are not read)
  TRAINCAST_CACHE_DIR=$3 PYTHONPATH=$2 COLUMNS=120 /usr/bin/time -o "$WORK/t" \
    -f "$1 %e %U %S %M" "$PY" -m traincast.cli "$CMD" "$D" > /dev/null 2>&1
  cat "$WORK/t" >> "$OUT"
}
case $MODE in
  warm)
    for t in new old; do one prime "$(tree_of $t)" "$WORK/cache-$t"; done
    sed -i '/^prime /d' "$OUT"
    for _ in $(seq 1 "$N"); do for t in new old; do one $t "$(tree_of $t)" "$WORK/cache-$t"; done; done ;;
  cold)
    for _ in $(seq 1 "$N"); do for t in new old; do
      rm -rf "$WORK/c"; mkdir "$WORK/c"; one $t "$(tree_of $t)" "$WORK/c"
    done; done ;;
  hta)
    cat > "$WORK/run_hta_bd.py" <<'PY'
import sys, warnings; warnings.filterwarnings('ignore')
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
PY
    for _ in $(seq 1 "$N"); do
      cat "$D"/* > /dev/null 2>&1 || true  # (sub-folders are not read)
      PYTHONPATH='' /usr/bin/time -o "$WORK/t" -f "hta %e %U %S %M" "$HTA_PYTHON" \
        "$WORK/run_hta_bd.py" "$D" > /dev/null 2>&1
      cat "$WORK/t" >> "$OUT"
      for _ in a b; do rm -rf "$WORK/c"; mkdir "$WORK/c"; one new "$TREE" "$WORK/c"; done
    done ;;
  *) echo "MODE must be warm, cold or hta, not $MODE" >&2; exit 2 ;;
esac
python3 - "$OUT" <<'PY'
import statistics as st, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
for label in dict.fromkeys(r[0] for r in rows):
    w = [float(r[1]) for r in rows if r[0] == label]
    m = [int(r[4]) / 1024 for r in rows if r[0] == label]
    print(f"{label}: {len(w)} runs, wall median {st.median(w):.2f} s ({min(w):.2f}-{max(w):.2f}),"
          f" peak median {st.median(m):.1f} MiB ({min(m):.1f}-{max(m):.1f})")
PY
