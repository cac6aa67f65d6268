#!/usr/bin/env bash
# Builds helm, pinned, into the cache's bin directory for the chart's tests (deploy/helm):
# helm is a Go module, built like kubelet and cached with a stamp, so a second run does
# nothing. `make tools` runs it after install.sh. Prints the helm binary's path.
set -euo pipefail

HELM_VERSION=v3.22.0
CACHE=${MOUNTKEEPER_CACHE:-/var/cache/mountkeeper-test}
BIN=$CACHE/bin

mkdir -p "$BIN"
if [ ! -x "$BIN/helm" ] || [ "$(cat "$BIN/.helm" 2>/dev/null)" != "$HELM_VERSION" ]; then
	echo "install-helm.sh: building helm $HELM_VERSION into $BIN (a few minutes cold)" >&2
	CGO_ENABLED=0 GOBIN=$BIN go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
		helm.sh/helm/v3/cmd/helm@$HELM_VERSION >&2
	echo "$HELM_VERSION" >"$BIN/.helm"
fi
echo "$BIN/helm"
