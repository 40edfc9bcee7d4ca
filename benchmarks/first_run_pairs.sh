#!/usr/bin/env bash
# The 8-rank first run, as typed: this tree cold with the read-ahead child, cold without it
# (TRAINCAST_READ_AHEAD=0) and warm (a primed cache), interleaved, each cold run with an empty
# cache folder. Usage: bash benchmarks/first_run_pairs.sh N OUT (OUT: one line per run,
# "MODE wall_s user_s sys_s peak_KB"; a summary is printed).
TREE=$(cd "$(dirname "$0")/.." && pwd)
D=$(realpath "${DATA_DIR:-$TREE/../shared/data/traces/dlrm_8xv100/kineto}"); N=$1; OUT=$(realpath -m "$2"); : > "$OUT"
export PYTHONPATH=$TREE
PY=$(python3 -c 'import sys; print(sys.executable)')
W=$(mktemp -d); cd $W; unset PYTHONDONTWRITEBYTECODE
TRAINCAST_CACHE_DIR=$W/warm $PY -m traincast.cli analyze $D >/dev/null 2>&1
for i in $(seq 1 $N); do
 for m in child nochild warm; do
  cat $D/* $D/../et/* > /dev/null 2>&1
  if [ $m = warm ]; then C=$W/warm; else C=$(mktemp -d -p $W); fi
  RA=1; [ $m = nochild ] && RA=0
  TRAINCAST_READ_AHEAD=$RA TRAINCAST_CACHE_DIR=$C /usr/bin/time -a -o $OUT -f "$m %e %U %S %M" $PY -m traincast.cli analyze $D >/dev/null 2>&1
  [ $m = warm ] || rm -rf $C
 done
done
cd /; rm -rf $W
python3 - $OUT <<'PY'
import statistics as st, sys
rows=[l.split() for l in open(sys.argv[1])]
for m in ('child','nochild','warm'):
    w=sorted(float(r[1]) for r in rows if r[0]==m)
    print(f"{m}: {len(w)} runs, wall median {st.median(w):.2f} s ({w[0]:.2f}-{w[-1]:.2f})")
PY
