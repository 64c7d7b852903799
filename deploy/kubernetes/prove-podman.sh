#!/usr/bin/env bash
# Plays deploy/kubernetes/pyjail-server.yaml with podman (`podman kube play`, Debian's podman
# 4.3) and proves it: the service comes up and gets ready, pyjail.remote runs cells and
# sessions in it, the jail inside the pod enforces its limits and isolation (prove.py), and
# deleting the pod (`podman kube down`) ends its sessions: a call then raises
# SessionDiedError at once.
#
#   deploy/image/build.sh && deploy/kubernetes/prove-podman.sh [--run]
#
# Debian 12's podman (4.3.1) plays the manifest but ignores its `procMount: Unmasked`: /proc/sys
# stays read-only and parts of /proc masked, so the templates in the pod cannot start (pyjail
# says why; /readyz answers 503, as it should). --run starts the same image with `podman run`
# and the flags that say what the manifest's securityContext says (uid 1000, no capability,
# no new privileges, read-only root, unconfined seccomp, /proc unmasked), and runs the same
# checks; `podman rm -f` stands for the pod's deletion.
#
# Run as root. PYTHON: an interpreter with httpx (default: python3). What it changes on this
# host, and undoes: a podman secret (pyjail-tokens), the pod and its volumes, and subordinate
# ids for podman's "containers" user when /etc/subuid has none.
set -euo pipefail
cd "$(dirname "$0")"
mode=kube
[[ ${1:-} == --run ]] && mode=run
image=localhost/pyjail-server:latest
python=${PYTHON:-python3}
podman image exists "$image" ||
    { echo "prove-podman.sh: no image $image: build it with deploy/image/build.sh" >&2; exit 1; }
command -v catatonit >/dev/null ||
    { echo "prove-podman.sh: podman's pods need catatonit: apt-get install catatonit" >&2; exit 1; }

work=$(mktemp -d /tmp/pyjail-prove.XXXXXX)
restore=()
cleanup() {
    podman kube down pyjail-server.yaml >/dev/null 2>&1 || true
    podman rm -f pyjail-server-prove >/dev/null 2>&1 || true
    podman secret rm pyjail-tokens >/dev/null 2>&1 || true
    podman volume rm -f pyjail-run pyjail-tmp pyjail-tokens >/dev/null 2>&1 || true
    local f
    # Only the line added here: other tools may add and remove theirs meanwhile.
    for f in "${restore[@]}"; do sed -i '/^containers:2000000:1000000$/d' "$f"; done
    rm -rf "$work"
}
trap cleanup EXIT

# podman gives a container nofile and nproc limits of its own (1048576, 4194304), and raising a
# hard limit needs CAP_SYS_RESOURCE, which a process in a container (as this one) may lack:
# the pod's nofile limit is this shell's instead, and nproc 20000 (runc could not set this
# host's own, larger, one in the pod's user namespace). A kube YAML cannot say this;
# containers.conf can.
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
    "$(ulimit -Sn)" "$(ulimit -Hn)" 20000 20000 >"$work/containers.conf"
export CONTAINERS_CONF=$work/containers.conf

# hostUsers: false is podman's --userns=auto: ids from the "containers" user's subordinate range.
for f in /etc/subuid /etc/subgid; do
    if ! grep -q '^containers:' "$f" 2>/dev/null; then
        touch "$f"
        restore+=("$f")
        echo "containers:2000000:1000000" >>"$f"
    fi
done

token=$("$python" -c 'import secrets; print(secrets.token_urlsafe(24))')
{
    echo "apiVersion: v1"
    echo "kind: Secret"
    echo "metadata: {name: pyjail-tokens}"
    echo "data:"
    echo "  tokens: $(printf 'prove %s\n' "$token" | base64 -w0)"
} >"$work/secret.yaml"
podman secret rm pyjail-tokens >/dev/null 2>&1 || true
podman volume rm -f pyjail-run pyjail-tmp pyjail-tokens >/dev/null 2>&1 || true
podman secret create pyjail-tokens "$work/secret.yaml" >/dev/null

if [[ $mode == kube ]]; then
    echo "==> podman kube play pyjail-server.yaml"
    podman kube play pyjail-server.yaml
    infra=$(podman pod inspect pyjail-server-pod-0 --format '{{.InfraContainerID}}')
else
    echo "==> podman run, as the manifest's securityContext says"
    mkdir -m 700 "$work/run"
    printf 'prove %s\n' "$token" >"$work/run/tokens"
    chmod 600 "$work/run/tokens"
    chown -R 1000:1000 "$work/run"
    infra=$(podman run -d --name pyjail-server-prove --user 1000:1000 --cap-drop ALL \
        --security-opt no-new-privileges --read-only --tmpfs /tmp:mode=1777 \
        --security-opt seccomp=unconfined --security-opt unmask=ALL \
        -v "$work/run:/run/pyjail:ro" "$image" --listen 0.0.0.0:8080 \
        --tokens /run/pyjail/tokens --size 2 --memory 512M --timeout 60 --max-sessions 8 \
        --max-runs 4 --cpu-seconds 3600 --idle-timeout 1800)
fi
ip=$(podman inspect "$infra" --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}')
url=http://$ip:8080
echo "==> waiting for $url/readyz"
for _ in $(seq 120); do
    if "$python" -c "import httpx, sys; sys.exit(httpx.get('$url/readyz').status_code != 200)" \
            2>/dev/null; then
        break
    fi
    sleep 1
done
if ! "$python" -c "import httpx; r = httpx.get('$url/readyz'); print('readyz:', r.status_code, r.text.strip())" 2>/dev/null; then
    echo "prove-podman.sh: the service did not get ready; its containers said:" >&2
    podman pod ps >&2
    for c in $(podman ps -a --filter pod=pyjail-server-pod-0 --format '{{.Names}}') \
             $(podman ps -a --filter name=pyjail-server-prove --format '{{.Names}}'); do
        echo "--- $c" >&2
        podman logs "$c" 2>&1 | tail -20 >&2
    done
    exit 1
fi

echo "==> pyjail.remote against the pod"
status=0
out=$(PYTHONPATH=../../python "$python" prove.py "$url" "$token") || status=$?
echo "$out" | grep -v '^SESSION '
sid=$(echo "$out" | sed -n 's/^SESSION //p')
"$python" -c "import httpx; print(''.join(l + '\n' for l in httpx.get('$url/metrics').text.splitlines() if l.startswith(('pyjail_runs_total', 'pyjail_live_sessions'))), end='')"

if [[ $mode == kube ]]; then
    echo "==> podman kube down pyjail-server.yaml (the pod is deleted)"
    podman kube down pyjail-server.yaml >/dev/null
else
    echo "==> podman rm -f (the container is deleted)"
    podman rm -f pyjail-server-prove >/dev/null
fi
PYTHONPATH=../../python "$python" prove.py "$url" "$token" --after-delete "$sid" || status=$?
if ((status)); then
    echo "prove-podman.sh: FAILED" >&2
else
    echo "prove-podman.sh: every check passed"
fi
exit "$status"
