#!/usr/bin/env bash
# Two trees' warm command (a primed parse cache each) in fresh processes, N rounds, the order
# alternating every round (A B, B A, ...): the pairs' difference without the bias of always
# running one tree first. Usage: bash benchmarks/abba_pairs.sh TREE_A TREE_B N OUT [CMD]
# (CMD: analyze (default) or predict; DATA_DIR: the trace folder, default the shared DLRM set).
# OUT gets one line per run, "A|B wall_s user_s sys_s"; the medians and the paired A-B
# difference (median, mean) are printed.
set -u
A=$(realpath "$1"); B=$(realpath "$2"); N=$3; OUT=$4; CMD=${5:-analyze}
HERE=$(cd "$(dirname "$0")/.." && pwd)
D=$(realpath "${DATA_DIR:-$HERE/../shared/data/traces/dlrm_8xv100/kineto}")
PY=${PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
OUT=$(realpath -m "$OUT")
: > "$OUT"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; cd "$W"; unset PYTHONDONTWRITEBYTECODE
for t in A B; do T=${!t}; TRAINCAST_CACHE_DIR=$W/c$t PYTHONPATH=$T $PY -m traincast.cli $CMD $D >/dev/null 2>&1; done
one() { T=${!1}; TRAINCAST_CACHE_DIR=$W/c$1 PYTHONPATH=$T /usr/bin/time -a -o $OUT -f "$1 %e %U %S" $PY -m traincast.cli $CMD $D >/dev/null 2>&1; }
for i in $(seq 1 $N); do if [ $((i % 2)) = 1 ]; then one A; one B; else one B; one A; fi; done
python3 - $OUT <<'P'
import statistics as st, sys
rows=[l.split() for l in open(sys.argv[1])]
a=[float(r[1]) for r in rows if r[0]=="A"]; b=[float(r[1]) for r in rows if r[0]=="B"]
ac=[float(r[2])+float(r[3]) for r in rows if r[0]=="A"]; bc=[float(r[2])+float(r[3]) for r in rows if r[0]=="B"]
print("A wall %.3f cpu %.3f | B wall %.3f cpu %.3f | paired A-B median %.3f mean %.3f" % (st.median(a), st.median(ac), st.median(b), st.median(bc), st.median([x-y for x,y in zip(a,b)]), st.mean([x-y for x,y in zip(a,b)])))
P
