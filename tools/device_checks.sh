#!/usr/bin/env bash
# The GPU checks of issues 25 and 24, as one run on a lent GPU machine (16 cores, one GPU).
#
# Run from a checkout's root: `OUT=/some/dir bash tools/device_checks.sh`. Python packages the
# machine lacks travel as wheels in `.whl/` (tensordict, vmas, gym, pyglet, ale-py, gymnasium
# and their small pure-Python needs): they are installed into /tmp/site first. Each phase has
# its own time limit and writes its own files under $OUT, so one failing phase leaves the
# others' results. The timed phases run first, alone on the machine:
#   1. benchmarks/compile.py on the GPU: SAC and PPO update steps/s eager and compiled
#      (reduce-overhead: CUDA graphs), a Pendulum collector with a GPU policy: compile_cuda.jsonl;
#   2. VMAS batched on the GPU, raw and through our collector: vectorized_cuda.jsonl;
#   3. (background, cores 6-15) PPO on Breakout with the networks on the GPU and the games in
#      worker processes, for ATARI_WALL_S seconds: test/test_learning_atari.py's slow test;
#      breakout.log (its curve) and breakout.json;
#   4. (cores 0-5, beside 3) the test files with CUDA variants: pytest.log.
set -u
OUT=${OUT:-/tmp/device_checks}
ATARI_WALL_S=${ATARI_WALL_S:-200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MUJOCO_GL=egl
ROOT=$(pwd)
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$ROOT
else
    export PYTHONPATH=$ROOT
fi
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    echo "cores: $(nproc)"
    python3 -c "import sys, torch, tensordict, numpy; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available(), tensordict.__version__, numpy.__version__)"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
T0=$(date +%s)
stamp() { echo "[$(($(date +%s) - T0)) s] $*"; }

stamp "1. compile benchmark on the GPU"
timeout ${COMPILE_S:-200} python3 benchmarks/compile.py --cases sac ppo collect \
    --variants reduce_overhead --seconds 0.3 --rounds 2 --env-batch 1 32 --device cuda \
    >"$OUT/compile_cuda.jsonl" 2>"$OUT/compile_cuda.err"
cat "$OUT/compile_cuda.jsonl"
tail -n 5 "$OUT/compile_cuda.err"

stamp "2. VMAS on the GPU"
timeout 90 python3 benchmarks/vectorized.py --envs 256 4096 32768 --seconds 1 --no-peers \
    --device cuda >"$OUT/vectorized_cuda.jsonl" 2>"$OUT/vectorized_cuda.err"
cat "$OUT/vectorized_cuda.jsonl"
tail -n 5 "$OUT/vectorized_cuda.err"

stamp "3. PPO Breakout (background)"
(cd test && ATARI_LEARNING_MAX_WALL_S=$ATARI_WALL_S ATARI_LEARNING_OUT=$OUT/breakout.json \
    taskset -c 6-15 timeout $((ATARI_WALL_S + 120)) \
    python3 -m pytest -q -p no:cacheprovider -m slow test_learning_atari.py -s) \
    >"$OUT/breakout.log" 2>&1 &
ATARI=$!

stamp "4. CUDA test files"
(cd test && taskset -c 0-5 timeout 240 python3 -m pytest -q -p no:cacheprovider -n 6 -rs \
    collectors/test_compile_devices.py data/test_rb_devices.py objectives/test_compile_amp.py \
    trainers/test_mixed_precision.py test_top_level_utils.py data/test_trajectory_views.py \
    trainers/test_checkpoint_api.py envs/libs/test_vmas.py test_compile_utils.py) \
    >"$OUT/pytest.log" 2>&1
tail -n 60 "$OUT/pytest.log"

stamp "waiting for the Atari run"
wait $ATARI
grep -E "PPO Breakout|mean score|passed|failed|Error" "$OUT/breakout.log" | tail -n 30
stamp "done"
