#!/bin/sh
# Serves $SLUICE_MODEL when it is set (a mounted file). Otherwise serves the default model
# from $SLUICE_MODEL_DIR (a volume filled beforehand by `sluice-fetch-model`, e.g. by an
# init container) or from the image (built with --build-arg BAKE_MODEL=1). Downloads
# nothing: a start needs no internet, and without a model it stops with what to do.
set -eu
name=SmolLM2-135M-Instruct.Q4_1.gguf
if [ -z "${SLUICE_MODEL:-}" ]; then
  for dir in "${SLUICE_MODEL_DIR:-/models}" "${SLUICE_BAKED_DIR:-/opt/sluice/models}"; do
    if [ -f "$dir/$name" ]; then
      SLUICE_MODEL="$dir/$name"
      export SLUICE_MODEL
      break
    fi
  done
fi
if [ -z "${SLUICE_MODEL:-}" ]; then
  echo "sluice: no model to serve. Mount one and set SLUICE_MODEL, fill ${SLUICE_MODEL_DIR:-/models} with sluice-fetch-model (an init container), or build the image with --build-arg BAKE_MODEL=1." >&2
  exit 1
fi
exec sluice serve "$@"
