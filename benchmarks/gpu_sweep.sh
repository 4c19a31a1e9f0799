#!/usr/bin/env bash
# One paper's reproduction at the gpu scale in one command on the GPU machine (docs/paper_scale.md):
#
#   benchmarks/gpu_sweep.sh PAPER                  # e.g. 001 (Korman 2021); on the GPU machine
#   benchmarks/gpu_sweep.sh PAPER --retrain-stale  # also train again the runs that older code trained
#   benchmarks/gpu_sweep.sh PAPER --runs 'PATTERN' # train only the runs so named, judge nothing (a sweep
#                                                  # split over two commands: the second, without --runs)
#   benchmarks/gpu_sweep.sh PAPER --dry-run        # the same steps at the tiny scale on the CPU (tested)
#
# It checks the device, finds Fashion-MNIST where it was carried (data/fashion-mnist, or GPU_SWEEP_DATA),
# writes the plan (--print: every run, its steps and expected time), runs the paper's sweep under
# `timeout GPU_SWEEP_SECONDS` (540) with GPU_SWEEP_JOBS runs at a time (4) and JAX's persistent compilation
# cache in its output folder, and packs what finished into $OUT/results.tar.gz: each finished run's
# report.json, analysis.json, config.json, metrics.jsonl and train.log under docs/runs/<data>/gpu/<paper>/,
# and the paper's JSON, plot and page once its last run finished. Beside it: $OUT/plan.txt, $OUT/sweep.log
# and $OUT/machine.json; `python -m train.reproduce.plan $OUT` (printed at the end) sets each run's expected
# time beside its measured one. Unpacked in the checkout (`tar xzf results.tar.gz`), the runs are read back as
# finished by the next sweep on any machine.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: benchmarks/gpu_sweep.sh PAPER [--retrain-stale] [--runs PATTERN] [--dry-run]"
paper=${1:?$usage}
shift
data=${GPU_SWEEP_DATA:-data/fashion-mnist}
results=${GPU_SWEEP_RESULTS:-docs}  # the sweep's --out: where committed runs are read back from
out=${OUT:-gpu-sweep}               # what the GPU machine sends back
limit=${GPU_SWEEP_SECONDS:-540}
jobs=${GPU_SWEEP_JOBS:-4}
scale=gpu
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) scale=tiny ;;
    --retrain-stale) extra+=(--retrain-stale) ;;  # stale runs set aside as <run>.stale, trained again
    --runs) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; extra+=(--runs "$2"); shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

if [ "$scale" = gpu ]; then
  nvidia-smi -L || { echo "gpu_sweep: no NVIDIA GPU here (nvidia-smi failed)" >&2; exit 2; }
fi
mkdir -p "$out"
# The machine, its versions and load (train.helpers.results.machine_info) beside the results; on the GPU
# machine also the check that JAX sees the GPU.
XLA_PYTHON_CLIENT_PREALLOCATE=false "$python" - "$out/machine.json" "$scale" <<'PY' || exit 2
import json, sys
from train.helpers.results import machine_info
info = machine_info()
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(info, f, indent=1)
print("machine:", info.get("device"), info.get("versions"))
if sys.argv[2] == "gpu" and info.get("platform") != "gpu":
    sys.exit("gpu_sweep: JAX sees no GPU")
PY
for name in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [ ! -e "$data/$name" ] && [ ! -e "$data/$name.gz" ]; then
    echo "gpu_sweep: $data/$name(.gz) not found: carry the Fashion-MNIST IDX files there, or set GPU_SWEEP_DATA" >&2
    exit 2
  fi
done

mkdir -p "$results"
args=("$paper" --scale "$scale" --data "idx:$data" --out "$results" --jobs "$jobs" "${extra[@]}")
"$python" -m train.reproduce "${args[@]}" --print > "$out/plan.txt" || exit 2
grep '^#' "$out/plan.txt"
start=$(date +%s)
timeout -k 10 "$limit" "$python" -m train.reproduce "${args[@]}" --compilation-cache "$out/jax-cache" \
  > "$out/sweep.log" 2>&1
status=$?
cat "$out/sweep.log"
echo "gpu_sweep: sweep exit status $status after $(( $(date +%s) - start )) s" | tee -a "$out/sweep.log"
"$python" -m train.reproduce.plan "$out"  # the plan beside what the sweep measured, run by run
rm -rf "$out/jax-cache"  # its entries stay on the machine: too big to send back

# Pack each finished run (its report.json) and the paper's outputs.
tag=$(basename "$data" | tr -c 'A-Za-z0-9\n' '_')
runs="$results/runs/$tag/$scale/$paper"
files=()
for report in "$runs"/*/report.json; do
  [ -e "$report" ] || continue
  dir=$(dirname "$report")
  case "$dir" in *.refused | *.stale) continue ;; esac  # set aside: git keeps what they held
  for name in report.json analysis.json config.json metrics.jsonl train.log; do
    [ -e "$dir/$name" ] && files+=("$dir/$name")
  done
done
suffix=${tag}_${scale}
for name in "$results/reproduce_${paper}_${suffix}.json" "$results"/reproduce_"${paper}"_*_"${suffix}".png \
    "$results/reproduction.md"; do
  [ -e "$name" ] && [ "$status" = 0 ] && files+=("$name")
done
echo "gpu_sweep: packing ${#files[@]} files into $out/results.tar.gz"
[ "${#files[@]}" -gt 0 ] && tar czf "$out/results.tar.gz" "${files[@]}"
exit "$status"
