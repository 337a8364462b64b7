# A real S3 service on the local cluster, for pgBackRest repositories: VersityGW (its posix
# backend on a local-path volume, so objects survive a stop and start) behind the Service
# s3.pgpilot-s3.svc:443, over TLS with a certificate of the cluster's CA. `s3 stop` and `s3 start`
# are an S3 outage and its end. Sourced by localcluster.
# shellcheck shell=bash

S3_NAMESPACE=pgpilot-s3
S3_NAME=s3
S3_BUCKET=pgpilot
S3_REGION=us-east-1
# pgBackRest 2.45 matches only DNS names in certificates, never IP addresses: clients use this.
S3_HOST=$S3_NAME.$S3_NAMESPACE.svc
# The Secrets `s3 copy-secrets` copies next to a PostgresCluster.
S3_SECRETS=(s3-credentials s3-ca)

s3_kubectl() { kubectl -n "$S3_NAMESPACE" "$@"; }

# s3_secrets: s3-tls (a serving certificate of the cluster's CA), s3-ca (that CA) and, made once,
# s3-credentials (a random root access key and secret).
s3_secrets() {
  if ! s3_kubectl get secret s3-tls >/dev/null 2>&1; then
    local svc=$S3_HOST
    new_cert s3 ca "/CN=$svc" "DNS:$S3_NAME,DNS:$S3_NAME.$S3_NAMESPACE,DNS:$svc,DNS:$svc.cluster.local"
    rm -f "$PKI"/*.srl
    s3_kubectl create secret tls s3-tls --cert="$PKI/s3.crt" --key="$PKI/s3.key" >/dev/null
  fi
  s3_kubectl create secret generic s3-ca --from-file=ca.crt="$PKI/ca.crt" --dry-run=client -o yaml |
    s3_kubectl apply -f - >/dev/null
  if ! s3_kubectl get secret s3-credentials >/dev/null 2>&1; then
    # AWS-shaped: a 20-character key id, a 40-character secret (neither holds a '/' or '+').
    s3_kubectl create secret generic s3-credentials \
      --from-literal=ACCESS_KEY_ID="PGPILOT$(openssl rand -hex 7 | tr a-f A-F | cut -c1-13)" \
      --from-literal=ACCESS_SECRET_KEY="$(openssl rand -hex 20)" >/dev/null
  fi
}

# s3_manifests: the volume, the Deployment and its Service. The posix backend keeps the bucket
# `pgpilot` as the folder buckets/pgpilot of the volume and object metadata in meta/ (a sidecar
# folder: no extended attributes asked of the node's file system).
s3_manifests() {
  cat <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $S3_NAME-data, namespace: $S3_NAMESPACE}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-path
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $S3_NAME, namespace: $S3_NAMESPACE, labels: {app: $S3_NAME}}
spec:
  replicas: 1
  strategy: {type: Recreate}  # one gateway at a time on the volume
  selector: {matchLabels: {app: $S3_NAME}}
  template:
    metadata: {labels: {app: $S3_NAME}}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      terminationGracePeriodSeconds: 5
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532}
      initContainers:
      - name: layout
        image: ${IMAGE_REF[busybox]}
        imagePullPolicy: IfNotPresent
        command: [mkdir, -p, /data/buckets, /data/meta]
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: data, mountPath: /data}]
      containers:
      - name: versitygw
        image: ${IMAGE_REF[versitygw]}
        imagePullPolicy: IfNotPresent
        command: [/usr/bin/versitygw]
        args: [--port, ":9000", --region, $S3_REGION, --cert, /tls/tls.crt, --key, /tls/tls.key,
          posix, --sidecar, /data/meta, /data/buckets]
        env:
        - name: ROOT_ACCESS_KEY
          valueFrom: {secretKeyRef: {name: s3-credentials, key: ACCESS_KEY_ID}}
        - name: ROOT_SECRET_KEY
          valueFrom: {secretKeyRef: {name: s3-credentials, key: ACCESS_SECRET_KEY}}
        ports: [{name: s3, containerPort: 9000}]
        readinessProbe:
          tcpSocket: {port: 9000}
          periodSeconds: 1
          failureThreshold: 3
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts:
        - {name: data, mountPath: /data}
        - {name: tls, mountPath: /tls, readOnly: true}
        - {name: tmp, mountPath: /tmp}
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: $S3_NAME-data}
      - name: tls
        secret: {secretName: s3-tls, defaultMode: 0440}
      - name: tmp
        emptyDir: {}
---
apiVersion: v1
kind: Service
metadata: {name: $S3_NAME, namespace: $S3_NAMESPACE}
spec:
  selector: {app: $S3_NAME}
  ports: [{name: https, port: 443, targetPort: s3}]
EOF
}

# The SHA-256 of an empty payload: curl 7.88's SigV4 does not send x-amz-content-sha256, which
# VersityGW requires.
S3_EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855

# s3_request HEAD|PUT [PATH]: a bodiless S3 request signed with the root credentials (curl's
# SigV4), from the node's network to the Service, by its DNS name; prints the HTTP status.
s3_request() {
  local method=$1 path=${2:-} ip key secret
  ip=$(s3_kubectl get service "$S3_NAME" -o jsonpath='{.spec.clusterIP}')
  key=$(s3_kubectl get secret s3-credentials -o jsonpath='{.data.ACCESS_KEY_ID}' | base64 -d)
  secret=$(s3_kubectl get secret s3-credentials -o jsonpath='{.data.ACCESS_SECRET_KEY}' | base64 -d)
  local how=(-X "$method")
  [[ $method == HEAD ]] && how=(--head)
  # The credentials go through a config on stdin, not the command line.
  printf 'user = "%s:%s"\n' "$key" "$secret" |
    ns_exec curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -K - "${how[@]}" \
      -H "x-amz-content-sha256: $S3_EMPTY_SHA256" --aws-sigv4 "aws:amz:$S3_REGION:s3" \
      --cacert "$PKI/ca.crt" --resolve "$S3_HOST:443:$ip" "https://$S3_HOST/$path"
}

# s3_bucket_exists: the bucket answers a HEAD through the Service.
s3_bucket_exists() { [[ $(s3_request HEAD "$S3_BUCKET") == 200 ]]; }

s3_create_bucket() {
  local code
  # Right after the pod turns Ready, kube-proxy may not route to it yet: any answer will do.
  wait_until "the S3 service" 60 s3_answers
  s3_bucket_exists && return
  code=$(s3_request PUT "$S3_BUCKET") || true
  [[ $code == 200 ]] || die "creating bucket $S3_BUCKET failed: HTTP $code"
  s3_bucket_exists || die "bucket $S3_BUCKET was created but does not answer"
  log "created bucket $S3_BUCKET"
}

# s3_answers: the server answers an S3 request through the Service (the status does not matter).
s3_answers() { [[ $(s3_request HEAD "$S3_BUCKET" 2>/dev/null) =~ ^[1-5][0-9][0-9]$ ]]; }

s3_image_loaded() { [[ -n $("${CTR[@]}" images ls -q "name==${IMAGE_REF[versitygw]}") ]]; }

s3_up() {
  cluster_is_up || die "the cluster is not up (localcluster up)"
  local start=$SECONDS
  build_components >/dev/null
  build_images
  # A cluster started before the image existed has not loaded it.
  s3_image_loaded || load_images versitygw
  kubectl create namespace "$S3_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  s3_secrets
  s3_manifests | kubectl apply -f - >/dev/null
  # `s3 up` after `s3 stop` starts the server again.
  s3_kubectl scale "deployment/$S3_NAME" --replicas=1 >/dev/null
  s3_wait_ready
  s3_create_bucket
  log "S3 up in $((SECONDS - start))s: https://$S3_HOST (port 443), bucket $S3_BUCKET, region $S3_REGION;" \
    "Secrets s3-credentials (ACCESS_KEY_ID, ACCESS_SECRET_KEY) and s3-ca (ca.crt) in $S3_NAMESPACE" \
    "(localcluster s3 copy-secrets NAMESPACE)"
}

s3_wait_ready() {
  if ! s3_kubectl rollout status "deployment/$S3_NAME" --timeout=180s >/dev/null; then
    s3_kubectl get deployment,pods,pvc -o wide >&2 || true
    s3_kubectl logs "deployment/$S3_NAME" --all-containers --tail=20 >&2 || true
    die "the S3 Deployment did not become ready"
  fi
}

s3_exists() {
  cluster_is_up || die "the cluster is not up (localcluster up)"
  s3_kubectl get deployment "$S3_NAME" >/dev/null 2>&1 || die "no S3 service (localcluster s3 up)"
}

s3_no_pods() { [[ -z $(s3_kubectl get pods -l "app=$S3_NAME" -o name) ]]; }

# s3_stop: an outage. The Deployment scales to zero; returns once its pod is gone.
s3_stop() {
  s3_exists
  s3_kubectl scale "deployment/$S3_NAME" --replicas=0 >/dev/null
  wait_until "the S3 pod to be gone" 120 s3_no_pods || die "the S3 pod did not go away"
  log "S3 stopped"
}

# s3_start: the outage ends. Returns once the bucket answers through the Service again.
s3_start() {
  s3_exists
  s3_kubectl scale "deployment/$S3_NAME" --replicas=1 >/dev/null
  s3_wait_ready
  wait_until "bucket $S3_BUCKET" 60 s3_bucket_exists || die "bucket $S3_BUCKET does not answer"
  log "S3 started"
}

# s3_copy_secrets NAMESPACE: s3-credentials and s3-ca into NAMESPACE (made when missing), for
# a PostgresCluster's backup configuration to refer to.
s3_copy_secrets() {
  local ns=${1:?usage: localcluster s3 copy-secrets NAMESPACE} name
  s3_exists
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  for name in "${S3_SECRETS[@]}"; do
    # A fresh object with the same type and data; none of the source's metadata.
    s3_kubectl get secret "$name" -o go-template="apiVersion: v1
kind: Secret
metadata: {name: {{.metadata.name}}, namespace: $ns}
type: {{.type}}
data:
{{range \$k, \$v := .data}}  {{\$k}}: {{\$v}}
{{end}}" | kubectl apply -f - >/dev/null
  done
  log "copied ${S3_SECRETS[*]} into namespace $ns"
}

s3() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    up) s3_up ;;
    stop) s3_stop ;;
    start) s3_start ;;
    copy-secrets) s3_copy_secrets "$@" ;;
    *) die "usage: localcluster s3 up|stop|start|copy-secrets NAMESPACE" ;;
  esac
}
