#!/usr/bin/env bash
# Offline install bundle for a CUDA machine without internet access (e.g. a
# cluster's compute nodes): Ray, gymnasium, their dependencies and this
# repository as wheels, built here where PyPI is reachable, installed there with
# --no-index. torch and the CUDA libraries never travel: the machine's own CUDA
# torch stays.
#
# Wheels are packed into parts of at most PART_MIB (large ones cut with
# `split -b`, for transfer limits); an install script in every part puts the
# pieces back together, checks them against SHA-256 sums of the whole wheels and
# installs them.
#
# Usage (here, with PyPI reachable):
#   bash benchmarks/gpu_bundle.sh                 # download + stage into build/gpu_bundle/part-NN
#   bash benchmarks/gpu_bundle.sh --mjlab         # also mjlab and its dependencies (large)
#   bash benchmarks/gpu_bundle.sh --all-deps      # keep wheels of packages the target image already has
#   bash benchmarks/gpu_bundle.sh stage WHEEL_DIR OUT_DIR   # only pack a folder of files into parts
# Env: PART_MIB (default 56), OUT (default build/gpu_bundle).
#
# On the CUDA machine: copy every part's files into one folder, then
#   bash FOLDER/install.sh && python3 benchmarks/gpu.py --quick --out OUT
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
PART_MIB="${PART_MIB:-56}"
OUT="${OUT:-$REPO/build/gpu_bundle}"
PY="${PYTHON:-python3}"

# Packages the device image ('cuda' on nvidia-h100-x1 / nvidia-h200) already
# holds (its documented package list): their wheels are left out unless
# --all-deps, so the bundle stays near one Ray wheel. torch, torchvision,
# torchaudio, triton and the nvidia-* CUDA libraries are never bundled (nor
# downloaded): the image's CUDA 13 torch must stay.
DEVICE_HAS="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn
scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch-geometric torchdiffeq torchmetrics tqdm transformers treescope typer typing-extensions
typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"
NEVER="torch torchvision torchaudio triton"

norm() { echo "$1" | tr 'A-Z_.' 'a-z--'; }

# ---------------------------------------------------------------------------
# stage SRC OUT: pack every file of SRC into OUT/part-NN (each <= PART_MIB),
# cutting files larger than a part into .chunk-NNN pieces; write SHA256SUMS
# of the whole files and install.sh into every part.
# ---------------------------------------------------------------------------
stage() {
  local src="$1" out="$2"
  local limit=$(( PART_MIB * 1024 * 1024 ))
  local room=$(( limit - 256 * 1024 ))          # room for install.sh + SHA256SUMS in each part
  [ "$room" -gt 0 ] || { echo "PART_MIB=$PART_MIB is too small" >&2; return 2; }
  rm -rf "$out"; mkdir -p "$out/.pieces"
  (cd "$src" && sha256sum -- *) > "$out/.pieces/SHA256SUMS"
  local f size
  for f in "$src"/*; do
    size=$(stat -c %s "$f")
    if [ "$size" -gt "$room" ]; then
      split -b "$room" -d -a 3 "$f" "$out/.pieces/$(basename "$f").chunk-"
    else
      cp "$f" "$out/.pieces/"
    fi
  done
  # first fit, largest first
  local -a used=()
  local item i placed n
  while read -r size item; do
    placed=""
    for i in "${!used[@]}"; do
      if [ $(( used[i] + size )) -le "$room" ]; then placed=$i; break; fi
    done
    if [ -z "$placed" ]; then placed=${#used[@]}; used+=(0); fi
    used[placed]=$(( used[placed] + size ))
    n=$(printf 'part-%02d' "$placed")
    mkdir -p "$out/$n"
    mv "$out/.pieces/$item" "$out/$n/"
  done < <(cd "$out/.pieces" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%s %f\n' | sort -rn)
  for n in "$out"/part-*; do
    cp "$out/.pieces/SHA256SUMS" "$n/"
    write_install "$n/install.sh"
  done
  rm -rf "$out/.pieces"
  echo "staged $(ls -d "$out"/part-* | wc -l) part(s) of at most $PART_MIB MiB in $out:"
  du -sh "$out"/part-*
}

# install.sh: reassemble chunks (bit-exact, checked) and install offline.
write_install() {
  cat > "$1" <<'EOS'
#!/usr/bin/env bash
# Reassemble and install the rllib_fast GPU bundle offline. Copy every part's
# files into one folder (this script's), then: bash install.sh
#   bash install.sh --reassemble-only   # only rebuild and check the wheels
set -euo pipefail
D="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
cd "$D"
shopt -s nullglob
for first in *.chunk-000; do
  whole="${first%.chunk-000}"
  cat "$whole".chunk-* > "$whole.tmp" && mv "$whole.tmp" "$whole"
done
missing=0
while read -r sum name; do
  [ -f "$name" ] || { echo "missing: $name (a part was not copied here)"; missing=1; }
done < SHA256SUMS
[ "$missing" = 0 ] || { echo "copy every part-NN/* into $D, then run this again" >&2; exit 3; }
sha256sum --quiet -c SHA256SUMS || { echo "checksum mismatch: a part is incomplete or corrupt" >&2; exit 4; }
rm -f -- *.chunk-*
echo "wheels complete and verified in $D"
[ "${1:-}" = "--reassemble-only" ] && exit 0
reqs=("ray[rllib,tune]==2.60.*" gymnasium)
mj=(mjlab-*.whl)            # nullglob: empty when the bundle has no mjlab (a bare `ls` would list .)
[ "${#mj[@]}" -gt 0 ] && reqs+=(mjlab)
# resolve against what the image already has plus these wheels; torch stays the image's
if ! "$PY" -m pip install -q --no-index --find-links "$D" "${reqs[@]}"; then
  echo "resolution against the image failed; installing the bundled wheels without dependency checks" >&2
  "$PY" -m pip install -q --no-index --no-deps "$D"/*.whl
fi
# rllib_fast itself without its dependency list (MLflow/Optuna are optional at run time)
"$PY" -m pip install -q --no-index --no-deps --force-reinstall "$D"/rllib_fast-*.whl
"$PY" -c "import torch, ray, gymnasium, rllib_fast; print('ok: ray', ray.__version__, 'gymnasium', gymnasium.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
EOS
  chmod +x "$1"
}

download() {
  # Resolve the whole set once for the device's Python and platform (pip's
  # --dry-run --report, metadata only), drop what must not or need not travel,
  # then fetch exactly the rest with --no-deps: a plain `pip download` of mjlab
  # would fetch torch and the CUDA libraries (gigabytes) only to throw them away.
  local dl="$OUT.download" keep="$OUT.wheels" report="$OUT.report.json"
  local -a reqs=("ray[rllib,tune]==2.60.*" gymnasium) plat=() pins=()
  rm -rf "$dl" "$keep" "$OUT.target"; mkdir -p "$dl" "$keep"
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 \
           manylinux_2_5_x86_64 manylinux1_x86_64 any; do plat+=(--platform "$p"); done
  local -a target=(--only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}")
  [ "$WITH_MJLAB" = 1 ] && reqs+=("mjlab==1.6.*")
  echo "+ resolving ${reqs[*]} for Python 3.12 x86-64 Linux (metadata only)"
  "$PY" -m pip install -q --dry-run --ignore-installed --ignore-requires-python --report "$report" \
      --target "$OUT.target" "${target[@]}" "${reqs[@]}"
  local line name
  while read -r line; do
    name=$(norm "${line%%==*}")
    skip=""
    for n in $NEVER; do [ "$name" = "$n" ] && skip="never bundled"; done
    case "$name" in nvidia-*) skip="never bundled";; esac
    if [ -z "$skip" ] && [ "$ALL_DEPS" = 0 ]; then
      for n in $DEVICE_HAS; do [ "$name" = "$(norm "$n")" ] && skip="in the device image"; done
    fi
    if [ -n "$skip" ]; then echo "  left out ($skip): $line"; else pins+=("$line"); fi
  done < <("$PY" -c 'import json, sys
for i in json.load(open(sys.argv[1]))["install"]:
    print(i["metadata"]["name"] + "==" + i["metadata"]["version"])' "$report" | sort)
  echo "+ pip download --no-deps ${#pins[@]} wheels into $dl"
  "$PY" -m pip download -q --no-deps "${target[@]}" -d "$dl" "${pins[@]}"
  echo "+ wheel of this repository"
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$dl" "$REPO"
  cp "$dl"/* "$keep/"
  stage "$keep" "$OUT"
}

print_commands() {
  echo
  echo "On the CUDA machine: copy the files of every part (${OUT#"$REPO"/}/part-*) into one folder, then"
  echo "  bash FOLDER/install.sh && python3 benchmarks/gpu.py --quick --out OUT"
}

WITH_MJLAB=0; ALL_DEPS=0
if [ "${1:-}" = "stage" ]; then
  [ $# -eq 3 ] || { echo "usage: $0 stage WHEEL_DIR OUT_DIR" >&2; exit 2; }
  stage "$2" "$3"; exit 0
fi
for a in "$@"; do
  case "$a" in
    --mjlab) WITH_MJLAB=1 ;;
    --all-deps) ALL_DEPS=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a (allowed: --mjlab, --all-deps, stage WHEEL_DIR OUT_DIR)" >&2; exit 2 ;;
  esac
done
download
print_commands
