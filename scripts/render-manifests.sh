#!/usr/bin/env bash
# render-manifests.sh: regenerates the plain manifests deploy/manifests/gpuslice.yaml, the Helm
# chart deploy/helm/gpuslice rendered by the real Helm (`helm template`) with its default values,
# release gpuslice in namespace gpuslice-system, after the Namespace it needs. Run it after any
# change of the chart; tests/deploy fails while the file is not what this script writes.
#   scripts/render-manifests.sh        writes deploy/manifests/gpuslice.yaml
#   scripts/render-manifests.sh -      writes the same text to stdout
# helm: $GS_HELM if set, else Helm built by tests/e2e/build.sh helm (cached by version outside the
# tree; the first build takes minutes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/deploy/manifests/gpuslice.yaml
case ${1:-} in
"") ;;
-) out=- ;;
*) echo "usage: $0 [-]" >&2; exit 2 ;;
esac

helm=${GS_HELM:-}
if [ -z "$helm" ]; then
    bindir=$(bash "$root/tests/e2e/build.sh" helm | tail -n 1)
    helm=$bindir/helm
fi
[ -x "$helm" ] || { echo "$0: no helm at $helm" >&2; exit 1; }

render() {
    cat <<'EOF'
# gpuslice plain manifests: the Helm chart deploy/helm/gpuslice rendered by Helm with its default
# values (release gpuslice, namespace gpuslice-system), after the Namespace it needs. Do not edit:
# regenerate with scripts/render-manifests.sh; tests/deploy checks that this file is what it writes.
# Install: kubectl apply -f deploy/manifests/gpuslice.yaml (docs/deploy.md).
---
# Pod Security admission must allow hostPID, hostPath volumes and privileged pods here.
apiVersion: v1
kind: Namespace
metadata:
  name: gpuslice-system
  labels:
    pod-security.kubernetes.io/enforce: privileged
EOF
    # Helm leaves the white space of `indent` at line ends; YAML ignores it, the file does without.
    "$helm" template gpuslice "$root/deploy/helm/gpuslice" --namespace gpuslice-system | sed 's/[[:space:]]*$//'
}

if [ "$out" = - ]; then
    render
else
    trap 'rm -f "$out.new"' EXIT
    render >"$out.new"
    mv "$out.new" "$out"
    echo "wrote $out" >&2
fi
