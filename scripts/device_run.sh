#!/usr/bin/env bash
# One command on a borrowed GPU machine (the device tool; nbs/98_gpu.md), from the repository root that the tool copies
# there: install the carried wheels, check graphed training on this GPU, run a campaign in what is left of the command's
# time limit, and leave its archives in $OUT. Every call: carry [".whl"] (and any checkpoint folders a run resumes from).
#   RELBOOK_GIT_SHA=$(git rev-parse --short HEAD) LIMIT=600 bash scripts/device_run.sh [EXPERIMENT ...]
# No names: the campaign's own order (the fewest GPU minutes per open claim first, then the least settled). Settings, by variable:
# LIMIT the command's timeout_s (600); WORKERS (14, under MPS); PROFILE (gpu); DEVICE (cuda); GRAPHS auto|0|1 (auto: on only
# if tests/test_cuda.py passes here; if only its mathematics-model graph test fails, on with those fits eager through
# RELBOOK_GRAPHS_REFUSE=AlsoOn; the outcome is reused by a later call on the same warm machine for the same tree, see STATE);
# GRAPHS=auto runs no check where `relbook graphable` says no experiment of the campaign would replay a graph.
# PYTHON (python3); OUT (the tool's $OUT); WHEELS (.whl: the carried wheels' folder); STATE (.device_state: what a warm machine
# keeps between calls); TEST_CUDA (the GPU check's command: tests/test_cuda.py under pytest).
# NBTEST=1 instead runs the notebooks at smoke on the device (`make nbtest-cuda` without a venv; the wheels of
# `NB=1 bash scripts/device_kit.sh`), NB_PATH of them (default every one), NB_WORKERS at a time (8), then tests/test_cuda.py.
set -uo pipefail
start=$(date +%s)
cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-600}; WORKERS=${WORKERS:-14}; PROFILE=${PROFILE:-gpu}; DEVICE=${DEVICE:-cuda}; GRAPHS=${GRAPHS:-auto}
PY=${PYTHON:-python3}; OUT=${OUT:?set OUT: the folder whose files come back}
: "${RELBOOK_GIT_SHA:?set RELBOOK_GIT_SHA to the commit of this tree (the copy that travels has no .git)}"
export RELBOOK_GIT_SHA OMP_NUM_THREADS=1 RELBOOK_PROGRESS=0
mkdir -p "$OUT"
W=${WHEELS:-.whl}
wheels=(); compgen -G "$W/*.whl" > /dev/null && wheels=("$W"/*.whl)
[ "${NBTEST:-0}" = 1 ] && compgen -G "$W/nb/*.whl" > /dev/null && wheels+=("$W"/nb/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
if [ "${NBTEST:-0}" = 1 ]; then   # every notebook at smoke on the device: a chapter that mixes devices fails here first
  left=$(( LIMIT - ($(date +%s) - start) - 30 ))
  # keyword arguments: nbdev_test is a fastcore script that, called from `python -c`, ignores sys.argv (it ran every notebook)
  # each line stamped with the time, and each notebook's start and end printed as they come (do_print): a run cut off by
  # `timeout` has no summary, and on 2026-11-27 its log could not say which notebooks had passed
  NB_PATH=${NB_PATH:-} NB_WORKERS=${NB_WORKERS:-8} RELBOOK_DEVICE=$DEVICE RELBOOK_PROFILE=smoke timeout "$left" "$PY" -u -c '
import os; from nbdev.test import nbdev_test
nbdev_test(path=os.environ["NB_PATH"] or None, n_workers=int(os.environ["NB_WORKERS"]), timing=True, do_print=True)' 2>&1 \
    | while IFS= read -r line; do printf '%(%H:%M:%S)T %s\n' -1 "$line"; done | tee "$OUT/nbtest.log" | grep -v '^[0-9:]* USDT'
  rc=${PIPESTATUS[0]}
  if [ "$DEVICE" = cuda ]; then "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -n 5; fi
  exit $rc
fi
if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader; fi
if [ "$GRAPHS" = auto ]; then
  GRAPHS=0
  # no experiment of this campaign would replay a graph (results/gpu_plan.json: every fit refused by graph_refusal, e.g. a
  # changing learning rate): the check that decides on graphs is not worth its 45-120 s (118 s on an H200, 2026-11-29)
  if [ "$DEVICE" = cuda ] && { "$PY" -m relbook graphable --profile "$PROFILE" "$@" > /tmp/relbook-graphable.log 2>&1; [ $? = 3 ]; }; then
    echo "device_run: by the plan, no experiment of this campaign replays CUDA graphs: tests/test_cuda.py not run"
    sed 's/^/  /' /tmp/relbook-graphable.log
  elif [ "$DEVICE" = cuda ]; then   # graphed against eager training, clipping included: CUDA graphs only where they agree here
    # The outcome is kept in $STATE (git-ignored: the tool keeps ignored paths on a warm machine between calls) under a key of
    # this tree (commit, package and test sources, wheels): a later call on the same warm machine with the same tree reuses it
    # instead of spending some 45 s of device time on the tests again; any change to the key runs them anew.
    STATE=${STATE:-.device_state}; mkdir -p "$STATE"
    key="$RELBOOK_GIT_SHA $(cat relbook/*.py tests/test_cuda.py | sha256sum | cut -c1-16) $(ls "$W" 2>/dev/null | sha256sum | cut -c1-16)"
    if [ -f "$STATE/test_cuda.key" ] && [ "$(cat "$STATE/test_cuda.key")" = "$key" ] && [ -f "$STATE/test_cuda.verdict" ]; then
      read -r GRAPHS refuse < "$STATE/test_cuda.verdict"
      [ -n "${refuse:-}" ] && export RELBOOK_GRAPHS_REFUSE=$refuse
      echo "device_run: tests/test_cuda.py ran earlier on this machine for this tree (key $key): GRAPHS=$GRAPHS${refuse:+, eager: $refuse}, not run again"
    else
      rm -f "$STATE/test_cuda.key"
      # its log stays out of $OUT: a command sends back 8 files, and the campaign's archives may use every one
      if timeout 180 ${TEST_CUDA:-"$PY" -m pytest -q -rf --durations=6 -p no:cacheprovider tests/test_cuda.py} > "$STATE/test_cuda.log" 2>&1; then GRAPHS=1
      elif grep -q '^FAILED' "$STATE/test_cuda.log" && ! grep '^FAILED' "$STATE/test_cuda.log" | grep -qv 'test_cuda_graph_trains_the_math_models'; then
        # only the mathematics models' graph test failed: graphs for the rest, their fits (task AlsoOn) eager
        GRAPHS=1; export RELBOOK_GRAPHS_REFUSE=AlsoOn
        echo "device_run: the mathematics models' CUDA graph test failed here: their fits train eagerly, the rest graphed"
      fi
      grep -v '^USDT' "$STATE/test_cuda.log" | tail -n 15
      echo "$GRAPHS ${RELBOOK_GRAPHS_REFUSE:-}" > "$STATE/test_cuda.verdict" && echo "$key" > "$STATE/test_cuda.key"
    fi
  fi
fi
[ "$GRAPHS" = 1 ] && export RELBOOK_CUDA_GRAPHS=1
mps=(); [ "$DEVICE" = cuda ] && [ "$WORKERS" -gt 1 ] && mps=(--mps)
left=$(( LIMIT - ($(date +%s) - start) - 40 ))   # 40 s for the campaign's exit and the tool's transfer back
echo "device_run: ${left}s for the campaign; CUDA graphs: $GRAPHS; workers: $WORKERS ${mps[*]}"
[ "$left" -gt 60 ] || { echo "device_run: under a minute left, no campaign"; exit 1; }
"$PY" -m relbook campaign --profile "$PROFILE" --budget "${left}s" --workers "$WORKERS" "${mps[@]}" --device "$DEVICE" \
  --out "$OUT/campaign.tar.gz" "$@"
rc=$?
ls -la "$OUT"
exit $rc
