#!/usr/bin/env bash
# The GPU issue's device run: the CUDA tests and the GPU benchmarks, each step bounded in
# time, every figure into one JSON (benchmarks/gpu_results.py) and every log into run.log.
#
#   OUT=/tmp/gpu N2P2_WATER=../shared/n2p2/water bash benchmarks/gpu_run.sh [STEP ...]
#
# Steps, in this order (those marked * run by default): env* tests kernels* profile* batches* water
# cuau* cuaukf* trainprof kfprof computed scaling100 water64 scaling400 objstore tests2*. kernels: ACSF kernel rates
# (TRITON_BLOCKS="C,J,K,W;..." sweeps the Triton tile sizes); profile: where the Triton
# kernel's values + dG/dr time goes (torch.profiler; PROFILE_ENGINE names another); batches: the water ×25 epoch
# at three batch sizes (BATCHES=8,64 for others), then one epoch under torch's sync debug
# mode; cuau / cuaukf: time to n2p2's test RMSE on the CuAu set with Adam / the Kalman
# filter; trainprof / kfprof: where a second training epoch's time goes (torch.profiler,
# bench_gpu_train --profile): water ×25 streamed and held at batch 64 (BATCHES_PROFILE), and
# the Kalman filter on the CuAu set, held; objstore: issue 28's S3 featurize against local, where moto's server finds cores
# the two workers leave idle (needs moto, boto3 and obstore among the wheels); tests2: the Triton tests, then three CUDA training tests and the pinned batch assembly (TESTS2_S bounds it, 150 s).
# KERNELS_S, PROFILE_S, SCALING_S and SCALING400_S bound the kernels (80 s), profile (60 s), scaling100 (70 s) and scaling400 (80 s)
# steps; SCALING_FLAGS=--derivatives makes the scaling steps featurize dG/dr too. SMOKE=1 runs
# each benchmark at a toy size (to check the script on a CPU machine). TOTAL=seconds bounds the whole run: each
# step's limit is cut to what is left. On the lent GPU machine, the wheels of
# ../shared/device/wheels.sh come first.
set -u
deadline=$(($(date +%s) + ${TOTAL:-3600}))
OUT=${OUT:-/tmp/dparallel-gpu-run}
WORK=${WORK:-/tmp/dparallel-gpu-work}
mkdir -p "$OUT"
export DPARALLEL_GPU_RESULTS=${DPARALLEL_GPU_RESULTS:-$OUT/gpu-$(date -u +%F).json}
export N2P2_WATER=${N2P2_WATER:-$PWD/.devdata/water}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
py=${PYTHON:-python3}
log=$OUT/run.log
steps=${*:-env kernels profile batches cuau cuaukf tests2}
smoke=${SMOKE:-0}
size() { if [ "$smoke" = 1 ]; then echo "$2"; else echo "$1"; fi; }

step() {  # name limit_s command...
  local name=$1 limit=$2 t0 rc
  shift 2
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  t0=$(date +%s)
  if [ $((deadline - t0 - 3)) -lt "$limit" ]; then limit=$((deadline - t0 - 3)); fi
  if [ "$limit" -lt 5 ]; then echo "=== $name: skipped, no time left" | tee -a "$log"; return 0; fi
  echo "=== $name: $* (limit ${limit} s) at $(date -u +%T)" | tee -a "$log"
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "=== $name: rc $rc in $(($(date +%s) - t0)) s" | tee -a "$log"
}

step env 60 bash -c "nvidia-smi; $py -c 'import torch, numba; print(torch.__version__, \
torch.version.cuda, torch.cuda.is_available(), numba.__version__)'; nproc; free -g"
step tests 110 "$py" -m pytest -q -p no:cacheprovider -o addopts= --timeout 100 \
  tests/train/test_train_device.py tests/deploy/test_ase_calculator.py \
  tests/kernels/test_triton_acsf.py tests/kernels/test_triton_neighbor_sums.py \
  tests/workflow/test_featurize_triton_engine.py \
  "tests/train/test_train_cli.py::test_device_option_of_train_and_run" \
  "tests/train/test_model_dir.py::test_a_run_failing_before_training_leaves_no_folder"
step kernels "${KERNELS_S:-80}" "$py" benchmarks/bench_node.py kernels --copies "$(size 25 1)" --rounds 3 \
  --cpu-atoms "$(size 2000 500)" --engines "${ENGINES:-}" --triton-blocks "${TRITON_BLOCKS:-}"
step profile "${PROFILE_S:-60}" "$py" benchmarks/bench_node.py kernels --copies "$(size 25 1)" \
  --profile "${PROFILE_ENGINE:-triton cuda}"
step batches 150 "$py" benchmarks/bench_gpu_train.py --water "$(size 25 1)" --epochs 4 \
  --cpu-epochs 2 --streamed-epochs 3 --batch-sizes "${BATCHES:-8,64,450}" --sync-debug --workdir "$WORK/wb"
step water 90 "$py" benchmarks/bench_gpu_train.py --water "$(size 25 1)" --epochs 4 \
  --cpu-epochs 3 --streamed-epochs 3 --workdir "$WORK/w8"
step cuau 120 "$py" benchmarks/bench_gpu_train.py --structures "$(size 1000 40)" \
  --epochs "$(size 100 3)" --cpu-epochs 3 --streamed-epochs 2 --dp-set batch_size=32 \
  --workdir "$WORK/cuau"
step cuaukf 110 "$py" benchmarks/bench_gpu_train.py --structures "$(size 1000 40)" \
  --epochs "$(size 12 2)" --cpu-epochs "$(size 6 2)" --streamed-epochs 1 \
  --dp-set optimizer=kalman --workdir "$WORK/cuaukf"
step trainprof "${TRAINPROF_S:-120}" "$py" benchmarks/bench_gpu_train.py --water "$(size 25 1)" \
  --epochs 2 --cpu-epochs 1 --streamed-epochs 2 --batch-sizes "${BATCHES_PROFILE:-64}" \
  --profile "cuda (streamed)" --profile "cuda (data held)" --workdir "$WORK/wp"
step kfprof 120 "$py" benchmarks/bench_gpu_train.py --structures "$(size 1000 40)" --epochs 2 \
  --cpu-epochs 1 --streamed-epochs 1 --dp-set optimizer=kalman --profile "cuda (data held)" \
  --workdir "$WORK/kfprof"
step computed 60 "$py" benchmarks/bench_train_computed.py --device "$(size cuda cpu)" \
  --structures "$(size 200 16)" --epochs 3 --workdir "$WORK/computed"
step scaling100 "${SCALING_S:-70}" "$py" benchmarks/bench_node_scaling.py --copies "$(size 100 2)" \
  --counts "$(nproc)" ${SCALING_FLAGS:-}
step water64 50 "$py" benchmarks/bench_gpu_train.py --water "$(size 25 1)" --epochs 4 \
  --cpu-epochs 3 --streamed-epochs 3 --dp-set batch_size=64 --workdir "$WORK/w64"
step scaling400 "${SCALING400_S:-80}" "$py" benchmarks/bench_node_scaling.py --copies "$(size 400 3)" \
  --counts "$(nproc)" ${SCALING_FLAGS:-}
# moto's server and the S3 client as cp312 wheels (the GPU machine lacks them; 36 MB, so .whl,
# .whl-s3 and the tree stay under the 64 MiB that travels): `bash ../shared/device/wheels.sh`'s
# pip download, run with --python-version 3.12 on "moto[server]" obstore boto3 botocore fsspec and
# their dependencies, keeping: moto boto3 botocore s3transfer jmespath python_dateutil six urllib3
# requests idna certifi charset_normalizer responses werkzeug flask flask_cors blinker click
# itsdangerous jinja2 markupsafe xmltodict cryptography cffi pycparser obstore fsspec
# py_partiql_parser jsonpath_ng (moto's S3 needs no more; cryptography it does)
s3w=${S3_WHEELS:-.whl-s3}
step objstore 120 bash -c "if [ -d $s3w ]; then $py -m pip install -q --no-index --no-deps \
--no-compile --no-cache-dir --upgrade --target /tmp/site-s3 $s3w/*.whl && \
export PYTHONPATH=/tmp/site-s3:\$PYTHONPATH; fi; $py benchmarks/bench_object_store.py \
--copies $(size 25 1) --epochs 3"
acsf=tests/kernels/test_triton_acsf.py
step tests2 "${TESTS2_S:-150}" "$py" -m pytest -q -rA -p no:cacheprovider -o addopts= \
  --timeout 100 "$acsf::test_triton_equals_numba_split_layout[cos-0.15]" \
  "$acsf::test_triton_groups_of_columns_sharing_a_radial_part" \
  "$acsf::test_triton_equals_numba_split_layout[exp-0.2]" "$acsf::test_triton_equals_torch_reference" \
  "$acsf::test_triton_any_zeta_lambda_eta" "$acsf::test_triton_float32_outputs" \
  "$acsf::test_triton_deterministic_and_empty_inputs" "$acsf::test_triton_centres_in_chunks" \
  tests/workflow/test_featurize_triton_engine.py tests/kernels/test_triton_neighbor_sums.py \
  "tests/train/test_train_device.py::test_cuda_training_matches_cpu_and_resumes_on_the_cpu" \
  "tests/train/test_train_device.py::test_batches_move_to_cuda" \
  "tests/train/test_train_device.py::test_cuda_streamed_training_equals_held" \
  "tests/train/test_train_batch.py::test_pinned_assembly_gives_page_locked_columns_equal_to_the_host_ones"
rm -rf "$WORK"
echo "=== done at $(date -u +%T); figures in $DPARALLEL_GPU_RESULTS"
