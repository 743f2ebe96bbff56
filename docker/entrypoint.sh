#!/bin/sh
# Serves $SLUICE_MODEL when it is set (mount the file); otherwise fetches the default model
# into $SLUICE_MODEL_DIR (a volume, so it is fetched once) and serves it.
set -eu
if [ -z "${SLUICE_MODEL:-}" ]; then
  sluice-fetch-model >/dev/null
fi
exec sluice serve "$@"
