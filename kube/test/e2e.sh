#!/usr/bin/env bash
# End to end on a real control plane, from nothing: etcd (embedded
# go.etcd.io/etcd/server/v3, test/etcd), kube-apiserver built from
# k8s.io/kubernetes at the module's release, the webhook and kube-scheduler
# with the GPUMem plugin (both estimate in process: no gpumem serve).
# Nodes are created with the labels GPU Feature Discovery writes (no
# kubelet: nothing runs, pods only bind).
# Asserts where each pod binds, which stay Pending with which message, and
# what the webhook wrote.
#
#   cd kube && test/e2e.sh          # needs go, openssl, curl, jq
#
# Builds take long on a cold cache (kube-apiserver above all); not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d)
BIN=$W/bin
PIDS=()
cleanup() {
	# Last started first: kube-apiserver outlives a dead etcd, so it goes
	# before; whatever ignores SIGTERM for 10 s gets SIGKILL.
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null || true; done
	for _ in $(seq 1 10); do
		alive=0
		for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 1
	done
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== build (one at a time)"
mkdir -p "$BIN"
go build -p 1 -o "$BIN/etcd" ./test/etcd
go build -p 1 -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -p 1 -o "$BIN/kube-scheduler" ./cmd/kube-scheduler
go build -p 1 -o "$BIN/gpumem-webhook" ./cmd/gpumem-webhook

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD=$(port); PEER=$(port); API=$(port); HOOK=$(port)

echo "== certificates"
cd "$W"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=gpumem-e2e-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout hook.key -out hook.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
openssl x509 -req -in hook.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out hook.crt -days 1 -extfile san.ext 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
TOKEN=e2e-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
echo "$TOKEN,admin,admin,system:masters" > tokens.csv
cat > kubeconfig <<KC
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$API", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
KC
cd - >/dev/null

echo "== etcd, kube-apiserver"
"$BIN/etcd" --data-dir "$W/etcd" --listen "http://127.0.0.1:$ETCD" --peer "http://127.0.0.1:$PEER" > "$W/etcd.log" 2>&1 &
PIDS+=($!)
"$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD" --bind-address 127.0.0.1 --secure-port "$API" \
	--cert-dir "$W/pki" --token-auth-file "$W/tokens.csv" --authorization-mode AlwaysAllow \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$W/sa.pub" \
	--service-account-signing-key-file "$W/sa.key" --service-cluster-ip-range 10.0.0.0/24 \
	--disable-admission-plugins ServiceAccount,TaintNodesByCondition > "$W/apiserver.log" 2>&1 &
PIDS+=($!)

k() { # k METHOD PATH [BODY [CONTENT-TYPE]]
	curl -sk -X "$1" -H "Authorization: Bearer $TOKEN" -H "Content-Type: ${4:-application/json}" \
		"https://127.0.0.1:$API$2" ${3:+--data-binary "$3"}
}
for i in $(seq 1 180); do
	[ "$(curl -sk -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API/readyz" || true)" = ok ] && break
	sleep 1
	[ "$i" = 180 ] && { tail -20 "$W/apiserver.log"; fail "kube-apiserver not ready"; }
done
echo "kube-apiserver ready"

echo "== nodes, labelled as GFD labels them"
node() { # name product mib count
	k POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$1\",\"labels\":{\"kubernetes.io/hostname\":\"$1\"${2:+,\"nvidia.com/gpu.product\":\"$2\",\"nvidia.com/gpu.memory\":\"$3\",\"nvidia.com/gpu.count\":\"$4\"}}}}" > /dev/null
	k PATCH "/api/v1/nodes/$1/status" "{\"status\":{\"capacity\":{\"cpu\":\"64\",\"memory\":\"512Gi\",\"pods\":\"110\",\"nvidia.com/gpu\":\"${4:-0}\"},\"allocatable\":{\"cpu\":\"64\",\"memory\":\"512Gi\",\"pods\":\"110\",\"nvidia.com/gpu\":\"${4:-0}\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"e2e\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\"}]}}" application/merge-patch+json > /dev/null
}
node a100-1 NVIDIA-A100-SXM4-80GB 81920 8
node l4-1 NVIDIA-L4 23034 4
node mig-1 NVIDIA-A100-SXM4-40GB-MIG-1g.5gb 4864 7
node cpu-1

echo "== webhook, scheduler"
"$BIN/gpumem-webhook" --addr "127.0.0.1:$HOOK" --tls-cert "$W/hook.crt" --tls-key "$W/hook.key" \
	--kubeconfig "$W/kubeconfig" > "$W/webhook.log" 2>&1 &
PIDS+=($!)
CA=$(base64 -w0 < "$W/ca.crt")
k POST /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations "{\"apiVersion\":\"admissionregistration.k8s.io/v1\",\"kind\":\"MutatingWebhookConfiguration\",\"metadata\":{\"name\":\"gpumem\"},\"webhooks\":[{\"name\":\"pods.gpumem.io\",\"admissionReviewVersions\":[\"v1\"],\"sideEffects\":\"None\",\"timeoutSeconds\":10,\"failurePolicy\":\"Fail\",\"clientConfig\":{\"url\":\"https://127.0.0.1:$HOOK/mutate\",\"caBundle\":\"$CA\"},\"rules\":[{\"apiGroups\":[\"\"],\"apiVersions\":[\"v1\"],\"operations\":[\"CREATE\"],\"resources\":[\"pods\"]}],\"matchConditions\":[{\"name\":\"has-job\",\"expression\":\"has(object.metadata.annotations) && 'gpumem.io/job' in object.metadata.annotations\"}]}]}" > /dev/null
sed -e "s#/etc/kubernetes/scheduler.conf#$W/kubeconfig#" deploy/scheduler-config.yaml > "$W/scheduler.yaml"
"$BIN/kube-scheduler" --config "$W/scheduler.yaml" --secure-port 0 -v 2 > "$W/scheduler.log" 2>&1 &
PIDS+=($!)
for i in $(seq 1 60); do curl -sk "https://127.0.0.1:$HOOK/healthz" > /dev/null 2>&1 && break; sleep 1; done
sleep 3 # the webhook's configuration reaches the API server's cache

echo "== pods"
pod() { # name job-json resources [labels]
	jq -cn --arg n "$1" --arg job "$2" --argjson res "$3" --argjson labels "${4:-{\}}" \
		'{apiVersion:"v1",kind:"Pod",metadata:{name:$n,labels:$labels,annotations:{"gpumem.io/job":$job}},
		  spec:{schedulerName:"gpumem-scheduler",containers:[{name:"main",image:"trainer:1",resources:{limits:$res}}]}}' |
		{ read -r body; k POST /api/v1/namespaces/default/pods "$body"; }
}
pod lora-8b '{"model":"llama-3-8b","mode":"train","batch":4,"seq":2048,"lora_rank":16,"checkpointing":"full"}' '{"nvidia.com/gpu":"1"}' > /dev/null
pod gen-1b '{"model":"llama-3.2-1b","mode":"infer","batch":1,"seq":1024,"generate":256}' '{"nvidia.com/gpu":"1"}' > /dev/null
pod shared-1b '{"model":"llama-3.2-1b","mode":"infer","batch":8,"seq":2048,"generate":512}' '{}' '{"gpumem.io/sharing":"shared"}' > /dev/null
# The same job from labels: the webhook's matchConditions pass it by, the
# scheduler's PreFilter leaves it Pending.
jq -cn '{apiVersion:"v1",kind:"Pod",metadata:{name:"full-8b-labels",labels:{"gpumem.io/model":"llama-3-8b","gpumem.io/mode":"train","gpumem.io/batch":"4","gpumem.io/seq":"2048"}},
	spec:{schedulerName:"gpumem-scheduler",containers:[{name:"main",image:"trainer:1",resources:{limits:{"nvidia.com/gpu":"1"}}}]}}' |
	{ read -r body; k POST /api/v1/namespaces/default/pods "$body" > /dev/null; }
REJECT=$(pod full-8b '{"model":"llama-3-8b","mode":"train","batch":4,"seq":2048}' '{"nvidia.com/gpu":"1"}')
BAD=$(pod bad-batch '{"model":"llama-3-8b","mode":"train","batch":"four"}' '{"nvidia.com/gpu":"1"}')

echo "== assertions"
echo "$REJECT" | jq -e '.code == 422 and (.message | contains("gpumem plan: allow an 8-bit optimizer"))' > /dev/null ||
	fail "full-8b was not rejected with plan advice: $REJECT"
echo "$BAD" | jq -e '.message | contains("field \"batch\"")' > /dev/null || fail "bad-batch: $BAD"
get() { k GET "/api/v1/namespaces/default/pods/$1"; }
wait_bound() { # pod node
	for i in $(seq 1 60); do
		n=$(get "$1" | jq -r '.spec.nodeName // ""')
		[ -n "$n" ] && break
		sleep 1
	done
	[ "$n" = "$2" ] || fail "$1 bound to '$n', want $2: $(get "$1" | jq -c .status.conditions)"
	echo "ok: $1 bound to $n"
}
wait_bound lora-8b a100-1   # the L4 is 41.5 GiB short, the MIG slice more
wait_bound gen-1b mig-1     # the tightest fit
wait_pending() { # pod text
	for i in $(seq 1 60); do
		m=$(get "$1" | jq -r '.status.conditions // [] | map(select(.type == "PodScheduled" and .status == "False"))[0].message // ""')
		[ -n "$m" ] && break
		sleep 1
	done
	case "$m" in *"$2"*) echo "ok: $1 Pending: $m" ;; *) fail "$1: PodScheduled message '$m', want '$2'" ;; esac
}
wait_pending full-8b-labels "gpumem plan: allow an 8-bit optimizer"
for i in $(seq 1 60); do [ -n "$(get shared-1b | jq -r '.spec.nodeName // ""')" ] && break; sleep 1; done
echo "ok: shared-1b bound to $(get shared-1b | jq -r '.spec.nodeName // "nothing"')"
get shared-1b | jq -e '.spec.containers[0].resources.limits["nvidia.com/gpumem"] != null' > /dev/null ||
	fail "the webhook set no nvidia.com/gpumem on shared-1b"
get lora-8b | jq -e '.metadata.annotations["gpumem.io/estimate"] | fromjson | map(select(.device == "NVIDIA L4"))[0].fits == false' > /dev/null ||
	fail "no gpumem.io/estimate on lora-8b"
echo "ok: the webhook annotated lora-8b and set shared-1b's nvidia.com/gpumem to $(get shared-1b | jq -r '.spec.containers[0].resources.limits["nvidia.com/gpumem"]') MiB"
echo "ok: full-8b rejected: $(echo "$REJECT" | jq -r .message)"
echo PASS
