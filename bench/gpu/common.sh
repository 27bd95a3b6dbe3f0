# Sourced by the GPU machine's scripts (session.sh, dflash.sh): the carried wheels, the cache,
# and a guard that keeps timings honest.
export PYTHONUNBUFFERED=1 SPECCHAT_CACHE=${SPECCHAT_CACHE:-/root/stage/cache}
OUT=${OUT:-bench/out}
mkdir -p "$OUT" && OUT=$(realpath "$OUT")
if [ -d /root/stage/whl ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site /root/stage/whl/*.whl 2>/dev/null
fi
export PYTHONPATH=/tmp/site:.

# Timings are only worth keeping on a GPU nothing else uses: a job left running (a training run
# in its own process session outlives the call that started it, and a later call cannot see its
# process) doubled every step's time once. Waits up to QUIET_WAIT seconds (default 60) for the
# GPU's memory to empty, then refuses in one line.
quiet_gpu() {
  local used waited=0
  while :; do
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [ -z "$used" ] || [ "$used" -lt 1024 ] && return 0
    [ "$waited" -ge "${QUIET_WAIT:-60}" ] && break
    sleep 5; waited=$((waited + 5))
  done
  echo "the GPU is busy ($used MiB held by another process after ${waited} s): no timing taken"
  return 1
}
