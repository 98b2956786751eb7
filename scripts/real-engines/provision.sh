#!/usr/bin/env bash
# Provisions servebench's real-engine test tier (`cargo test real_engine`) into a cache
# directory it can always rebuild:
#   $SERVEBENCH_REAL_ENGINES_DIR (default ~/.cache/servebench/real-engines)
#     sglang-venv/      SGLang 0.5.23 (its gguf writes the GGUF), pinned by constraints.txt here
#     stand-in/         the sgl_kernel stand-in (first on PYTHONPATH; it logs every lookup/call)
#     model-hf/         a tiny random Llama + byte-level BPE tokenizer with a chat template
#     llama-server      built from the llama-cpp-python 0.3.36 sdist (CPU, static)
#     model.gguf        a tiny random llama GGUF with an SPM vocabulary
#     model-think-hf/   the same shapes, deterministic: it thinks 24 words, then answers 8
#     model-think.gguf  (make_model.py's docstring; each with its chain.json)
#     router-venv/      sglang-router 0.3.2 (the Rust router, a pyo3 wheel), pinned by
#                       router-constraints.txt here; a venv of its own (see router_venv)
#     smg-venv/         smg 1.13.0, the Shepherd Model Gateway (sglang-router's successor,
#                       `smg launch`), pinned by smg-constraints.txt; a venv of its own
#     aiperf-venv/      AIPerf 0.13.0's models, which load `servebench export --format aiperf`'s
#                       files (scripts/aiperf/validate_export.py), pinned by
#                       aiperf-requirements.txt; a venv of its own
#     mlflow-venv/      MLflow 3.17.2, whose `mlflow server` the tests start to log runs to
#                       (`servebench mlflow`), pinned by mlflow-constraints.txt; a venv of its own
# Each part is skipped when its stamp (`.stamp-PART`) names the pinned version; delete the
# stamp (or the directory) to rebuild it.
# Usage: provision.sh [all|sglang|llama|router|smg|aiperf|aiperf-cli|mlflow|check]
# Needs: python3 with venv (Debian: python3-venv), cmake and a C++ compiler (installed with
# apt-get when missing and running as root), network access to PyPI.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="${SERVEBENCH_REAL_ENGINES_DIR:-$HOME/.cache/servebench/real-engines}"
WHAT="${1:-all}"
JOBS="${SERVEBENCH_REAL_ENGINES_JOBS:-2}"

SGLANG_VERSION=0.5.23
LLAMA_CPP_PYTHON_VERSION=0.3.36
SGLANG_ROUTER_VERSION=0.3.2
SMG_VERSION=1.13.0
AIPERF_VERSION=0.13.0
AIPERF_REQUIREMENTS="$HERE/aiperf-requirements.txt"
MLFLOW_VERSION=3.17.2
MLFLOW_CONSTRAINTS="$HERE/mlflow-constraints.txt"
CONSTRAINTS="$HERE/constraints.txt"
ROUTER_CONSTRAINTS="$HERE/router-constraints.txt"
SMG_CONSTRAINTS="$HERE/smg-constraints.txt"

mkdir -p "$DIR/logs"
log() { echo "[real-engines] $*" >&2; }
sha() { cat "$@" | sha256sum | cut -c1-16; }
# A part's stamp: what it was built from (versions, and the hash of the files that made it).
stamp_ok() { [ -f "$DIR/.stamp-$1" ] && [ "$(cat "$DIR/.stamp-$1")" = "$2" ]; }
stamp() { echo "$2" >"$DIR/.stamp-$1"; log "$1: ready ($2)"; }

need_apt() {
  # Installs Debian packages when a command is missing (root only; else says what is needed).
  local missing=()
  for pair in "$@"; do
    local cmd="${pair%%:*}" pkg="${pair#*:}"
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    log "missing: ${missing[*]} (install with: sudo apt-get install -y ${missing[*]})"
    exit 1
  fi
  log "installing ${missing[*]} (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

python_for_venv() {
  if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
    return 0
  fi
  need_apt python3:python3
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || { log "python3 has no venv: apt-get install -y python3-venv"; exit 1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
}

VENV="$DIR/sglang-venv"
PY="$VENV/bin/python"

sglang_venv() {
  local want="sglang==$SGLANG_VERSION constraints=$(sha "$CONSTRAINTS")"
  if stamp_ok sglang-venv "$want" && [ -x "$PY" ]; then return 0; fi
  python_for_venv
  log "sglang-venv: pip install sglang==$SGLANG_VERSION (about 4 min and 4.7 GB on a fresh machine)"
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q --upgrade "pip==26.3" >"$DIR/logs/sglang-pip.log" 2>&1
  "$PY" -m pip install -c "$CONSTRAINTS" "sglang==$SGLANG_VERSION" gguf \
    >>"$DIR/logs/sglang-pip.log" 2>&1 || {
    tail -n 30 "$DIR/logs/sglang-pip.log" >&2
    log "sglang-venv: pip install failed (log: $DIR/logs/sglang-pip.log)"
    exit 1
  }
  "$PY" -c 'import sglang, tokenizers, safetensors, gguf, numpy' || exit 1
  stamp sglang-venv "$want"
}

stand_in() {
  local want="sgl_kernel-stand-in $(sha "$HERE/sgl_kernel/__init__.py")"
  if stamp_ok stand-in "$want" && [ -f "$DIR/stand-in/sgl_kernel/__init__.py" ]; then return 0; fi
  rm -rf "$DIR/stand-in"
  mkdir -p "$DIR/stand-in/sgl_kernel"
  cp "$HERE/sgl_kernel/__init__.py" "$DIR/stand-in/sgl_kernel/__init__.py"
  stamp stand-in "$want"
}

model_hf() {
  local want="model-hf $(sha "$HERE/make_model.py")"
  if stamp_ok model-hf "$want" && [ -f "$DIR/model-hf/model.safetensors" ]; then return 0; fi
  rm -rf "$DIR/model-hf"
  "$PY" "$HERE/make_model.py" hf "$DIR/model-hf"
  stamp model-hf "$want"
}

model_gguf() {
  local want="model-gguf $(sha "$HERE/make_model.py")"
  if stamp_ok model-gguf "$want" && [ -f "$DIR/model.gguf" ]; then return 0; fi
  rm -f "$DIR/model.gguf"
  "$PY" "$HERE/make_model.py" gguf "$DIR/model.gguf.tmp"
  mv "$DIR/model.gguf.tmp" "$DIR/model.gguf"
  stamp model-gguf "$want"
}

# The deterministic thinking models (make_model.py's THINKING): the reasoning tests' ground truth.
model_think() {
  local want="model-think $(sha "$HERE/make_model.py")"
  if stamp_ok model-think "$want" && [ -f "$DIR/model-think-hf/chain.json" ] \
    && [ -f "$DIR/model-think.gguf.chain.json" ]; then return 0; fi
  rm -rf "$DIR/model-think-hf" "$DIR/model-think.gguf" "$DIR/model-think.gguf.chain.json"
  "$PY" "$HERE/make_model.py" hf-think "$DIR/model-think-hf"
  "$PY" "$HERE/make_model.py" gguf-think "$DIR/model-think.gguf"
  stamp model-think "$want"
}

llama_server() {
  local want="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION llama-server"
  if stamp_ok llama-server "$want" && [ -x "$DIR/llama-server" ]; then return 0; fi
  need_apt cmake:cmake g++:g++ make:make
  python_for_venv
  local src="$DIR/llama-src"
  local sdist="$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  mkdir -p "$src"
  if [ ! -f "$sdist" ]; then
    log "llama-server: downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist"
    # The sdist of this package only (--no-binary for it alone): its build backend, which pip
    # runs to read the metadata, then comes as wheels instead of being built from source too.
    python3 -m pip download -q --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$src" >"$DIR/logs/llama-download.log" 2>&1 || {
      tail -n 20 "$DIR/logs/llama-download.log" >&2
      exit 1
    }
  fi
  rm -rf "$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION" "$src/build"
  tar -xzf "$sdist" -C "$src"
  local llama="$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  log "llama-server: building (about 9 min on 2 cores; log: $DIR/logs/llama-build.log)"
  {
    cmake -S "$llama" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON &&
      nice -n 10 cmake --build "$src/build" --target llama-server -j "$JOBS"
  } >"$DIR/logs/llama-build.log" 2>&1 || {
    tail -n 30 "$DIR/logs/llama-build.log" >&2
    log "llama-server: build failed (log: $DIR/logs/llama-build.log)"
    exit 1
  }
  cp "$src/build/bin/llama-server" "$DIR/llama-server.tmp"
  mv "$DIR/llama-server.tmp" "$DIR/llama-server"
  # Keep the sdist (a rebuild needs no download); drop the 300 MB of objects.
  rm -rf "$src/build" "$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
  "$DIR/llama-server" --version >&2 || true
  stamp llama-server "$want"
}

# The router gets a venv of its own, not a place in sglang-venv: sglang 0.5.23 does not depend
# on sglang-router, so adding it there would change a venv pinned by constraints.txt (its
# stamp, and every SGLang test, would then stand on an install no constraints file describes),
# and the router's pins (fastapi, uvicorn, pydantic) could move SGLang's. Its own venv is
# 25 packages, ~150 MB, ~20 s, and needs no torch.
ROUTER_VENV="$DIR/router-venv"

router_venv() {
  local want="sglang-router==$SGLANG_ROUTER_VERSION constraints=$(sha "$ROUTER_CONSTRAINTS")"
  if stamp_ok router-venv "$want" && [ -x "$ROUTER_VENV/bin/python" ]; then return 0; fi
  python_for_venv
  log "router-venv: pip install sglang-router==$SGLANG_ROUTER_VERSION (about 20 s, 30 MB down)"
  rm -rf "$ROUTER_VENV"
  python3 -m venv "$ROUTER_VENV"
  "$ROUTER_VENV/bin/python" -m pip install -q -c "$ROUTER_CONSTRAINTS" \
    "sglang-router==$SGLANG_ROUTER_VERSION" >"$DIR/logs/router-pip.log" 2>&1 || {
    tail -n 30 "$DIR/logs/router-pip.log" >&2
    log "router-venv: pip install failed (log: $DIR/logs/router-pip.log)"
    exit 1
  }
  # The Rust router itself (launch_router falls back to a Python debug balancer without it).
  "$ROUTER_VENV/bin/python" -c 'from sglang_router.router import Router; from sglang_router import sglang_router_rs' || exit 1
  "$ROUTER_VENV/bin/python" -m sglang_router.launch_router --help >/dev/null || exit 1
  stamp router-venv "$want"
}

# The Shepherd Model Gateway: the router renamed (its Rust crate was `smg` already inside
# sglang-router 0.3.2), `smg launch` taking the same flags. A venv of its own, like the
# router's: 7 packages, no torch.
SMG_VENV="$DIR/smg-venv"

smg_venv() {
  local want="smg==$SMG_VERSION constraints=$(sha "$SMG_CONSTRAINTS")"
  if stamp_ok smg-venv "$want" && [ -x "$SMG_VENV/bin/smg" ]; then return 0; fi
  python_for_venv
  log "smg-venv: pip install smg==$SMG_VERSION (about 20 s, 45 MB down)"
  rm -rf "$SMG_VENV"
  python3 -m venv "$SMG_VENV"
  "$SMG_VENV/bin/python" -m pip install -q -c "$SMG_CONSTRAINTS" \
    "smg==$SMG_VERSION" >"$DIR/logs/smg-pip.log" 2>&1 || {
    tail -n 30 "$DIR/logs/smg-pip.log" >&2
    log "smg-venv: pip install failed (log: $DIR/logs/smg-pip.log)"
    exit 1
  }
  "$SMG_VENV/bin/python" -c 'from smg import smg_rs' || exit 1
  "$SMG_VENV/bin/smg" launch --help >/dev/null || exit 1
  stamp smg-venv "$want"
}

# AIPerf's own pydantic models and metric registry, to load servebench's AIPerf export as AIPerf
# reads it. Only what those modules import, with --no-deps (aiperf-requirements.txt): 24
# packages, ~175 MB, ~55 s here with no pip cache; AIPerf's whole set is 138 packages, 1.2 GB,
# ~5 min.
AIPERF_VENV="$DIR/aiperf-venv"

aiperf_venv() {
  local want="aiperf==$AIPERF_VERSION requirements=$(sha "$AIPERF_REQUIREMENTS")"
  if stamp_ok aiperf-venv "$want" && [ -x "$AIPERF_VENV/bin/python" ]; then return 0; fi
  python_for_venv
  log "aiperf-venv: pip install aiperf==$AIPERF_VERSION's models (about 55 s, 40 MB down)"
  rm -rf "$AIPERF_VENV"
  python3 -m venv "$AIPERF_VENV"
  "$AIPERF_VENV/bin/python" -m pip install -q --no-deps -r "$AIPERF_REQUIREMENTS" \
    >"$DIR/logs/aiperf-pip.log" 2>&1 || {
    tail -n 30 "$DIR/logs/aiperf-pip.log" >&2
    log "aiperf-venv: pip install failed (log: $DIR/logs/aiperf-pip.log)"
    exit 1
  }
  "$AIPERF_VENV/bin/python" -c 'from aiperf.common.models.record_models import MetricRecordInfo; from aiperf.common.models.export_models import JsonExportData; from aiperf.metrics.metric_registry import MetricRegistry; from aiperf.orchestrator.jsonl_loader import iter_profiling_records' || exit 1
  stamp aiperf-venv "$want"
}

# A real MLflow tracking server (`mlflow server`, sqlite backend, proxied artifacts), which
# tests/real_engine/mlflow.rs starts to log runs to and read them back through its REST API.
# The whole package (the server needs Flask, SQLAlchemy, alembic, ...): 87 packages, 858 MB,
# 151-215 s here with no pip cache.
MLFLOW_VENV="$DIR/mlflow-venv"

mlflow_venv() {
  local want="mlflow==$MLFLOW_VERSION constraints=$(sha "$MLFLOW_CONSTRAINTS")"
  if stamp_ok mlflow-venv "$want" && [ -x "$MLFLOW_VENV/bin/mlflow" ]; then return 0; fi
  python_for_venv
  log "mlflow-venv: pip install mlflow==$MLFLOW_VERSION (about 150 s, 860 MB)"
  rm -rf "$MLFLOW_VENV"
  python3 -m venv "$MLFLOW_VENV"
  "$MLFLOW_VENV/bin/python" -m pip install -q -c "$MLFLOW_CONSTRAINTS" \
    "mlflow==$MLFLOW_VERSION" >"$DIR/logs/mlflow-pip.log" 2>&1 || {
    tail -n 30 "$DIR/logs/mlflow-pip.log" >&2
    log "mlflow-venv: pip install failed (log: $DIR/logs/mlflow-pip.log)"
    exit 1
  }
  "$MLFLOW_VENV/bin/mlflow" server --help >/dev/null || exit 1
  stamp mlflow-venv "$want"
}

# AIPerf's `aiperf profile` CLI, whole (1.2 GB): what wrote tests/fixtures/import/aiperf, to
# rerun it against the simulator. A venv of its own, pinned by aiperf-cli-requirements.txt.
AIPERF_CLI_VENV="$DIR/aiperf-cli-venv"
AIPERF_CLI_REQUIREMENTS="$HERE/aiperf-cli-requirements.txt"

aiperf_cli_venv() {
  local want="aiperf==$AIPERF_VERSION cli requirements=$(sha "$AIPERF_CLI_REQUIREMENTS")"
  if stamp_ok aiperf-cli-venv "$want" && [ -x "$AIPERF_CLI_VENV/bin/aiperf" ]; then return 0; fi
  python_for_venv
  log "aiperf-cli-venv: pip install aiperf==$AIPERF_VERSION whole (about 5 min, 1.2 GB)"
  rm -rf "$AIPERF_CLI_VENV"
  python3 -m venv "$AIPERF_CLI_VENV"
  "$AIPERF_CLI_VENV/bin/python" -m pip install -q --no-deps -r "$AIPERF_CLI_REQUIREMENTS" \
    >"$DIR/logs/aiperf-cli-pip.log" 2>&1 || {
    tail -n 30 "$DIR/logs/aiperf-cli-pip.log" >&2
    log "aiperf-cli-venv: pip install failed (log: $DIR/logs/aiperf-cli-pip.log)"
    exit 1
  }
  "$AIPERF_CLI_VENV/bin/aiperf" profile --help >/dev/null || exit 1
  stamp aiperf-cli-venv "$want"
}

check() {
  local ok=0
  for part in sglang-venv stand-in model-hf model-think llama-server model-gguf router-venv smg-venv aiperf-venv mlflow-venv; do
    if [ -f "$DIR/.stamp-$part" ]; then echo "$part: $(cat "$DIR/.stamp-$part")"; else echo "$part: missing"; ok=1; fi
  done
  return $ok
}

start=$(date +%s)
case "$WHAT" in
  all) sglang_venv; stand_in; model_hf; model_gguf; model_think; llama_server; router_venv; smg_venv; aiperf_venv; mlflow_venv ;;
  sglang) sglang_venv; stand_in; model_hf; model_think ;;
  llama) sglang_venv; model_gguf; model_think; llama_server ;;
  cheap) stand_in; model_hf; model_gguf; model_think ;;
  llama-server) llama_server ;;
  router) router_venv ;;
  smg) smg_venv ;;
  aiperf) aiperf_venv ;;
  mlflow) mlflow_venv ;;
  aiperf-cli) aiperf_cli_venv ;;
  check) check; exit $? ;;
  *) echo "usage: $0 [all|sglang|llama|llama-server|router|smg|aiperf|aiperf-cli|mlflow|cheap|check]" >&2; exit 2 ;;
esac
log "done in $(( $(date +%s) - start )) s: $DIR ($(du -sh "$DIR" 2>/dev/null | cut -f1))"
