#!/usr/bin/env bash
# At home, before a borrowed GPU machine (nbs/98_gpu.md): download the wheels the machine's python3 lacks into .whl/
# (git-ignored; a device call names it in `carry`). The machine (Python 3.12, torch, pandas, pytest, absl-py, cloudpickle,
# no package index) lacks what `relbook` imports when it loads the experiments: gymnasium and mathematics-dataset.
#   bash scripts/device_kit.sh        the campaign's wheels (about 0.6 MB)
#   NB=1 bash scripts/device_kit.sh   also .whl/nb/: nbdev, a Jupyter kernel and myst-nb's glue, for `make nbtest-cuda`-like runs (about 21 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
plat=(--only-binary=:all: --python-version "${DEVICE_PYTHON:-3.12}" --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
mkdir -p .whl
# the versions this project's venv is tested with (settings.ini pins nothing finer; see ../shared/NOTES.md)
"$PY" -m pip download -q --no-deps "${plat[@]}" -d .whl gymnasium==1.4.0 farama-notifications==0.0.6 mathematics-dataset==1.0.1
if [ "${NB:-0}" = 1 ]; then
  mkdir -p .whl/nb
  "$PY" -m pip download -q "${plat[@]}" -d .whl/nb nbdev==2.4.14 fastcore==1.14.5 execnb==0.1.18 ghapi==2.0.3 ipykernel
  # every chapter calls myst_nb's glue (jupyter-book's, in the dev requirements): myst-nb without its Sphinx stack, and
  # what `glue` imports (measured: docutils, nbformat, jsonschema and theirs; attrs is the machine's). Without them every
  # chapter failed at `from myst_nb import glue` on an H100 on 2026-11-27.
  "$PY" -m pip download -q --no-deps "${plat[@]}" -d .whl/nb myst-nb==1.4.0 docutils==0.21.2 nbformat==5.11.1 \
    fastjsonschema==2.22.3 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  # what the machine's image already holds (KINDS.md of the device tool) stays the machine's: a carried copy of another
  # version would shadow it for torch and pandas too (python-dateutil 4 under pandas, say)
  for w in .whl/nb/*.whl; do
    name=$(basename "$w" | cut -d- -f1 | tr '[:upper:]_' '[:lower:]-')
    case " anyio certifi h11 httpcore httpx idna packaging psutil pygments python-dateutil pyyaml setuptools six typing-extensions wheel " in
      *" $name "*) rm "$w";;
    esac
  done
fi
ls .whl | sed 's/^/  /'
if [ -d .whl/nb ]; then echo "  nb/: $(ls .whl/nb | wc -l) wheels"; fi
du -sh .whl
