# The operator on the local cluster: its image from source, the kustomize manifests of
# `make deploy`, and the sample PostgresCluster. Sourced by localcluster.
# shellcheck shell=bash

OPERATOR_NAMESPACE=pgpilot-operator-system
OPERATOR_DEPLOYMENT=pgpilot-operator-controller-manager
SAMPLE=$REPO_ROOT/config/samples/postgres_v1alpha1_postgrescluster.yaml
# The backup part of the demo: a cluster archiving to the local S3 service, and a Backup of it.
BACKUP_SAMPLES=("$REPO_ROOT"/config/samples/postgres_v1alpha1_{postgrescluster_backup,backup}.yaml)

kustomize_bin() {
  local k=$REPO_ROOT/bin/kustomize
  [[ -x $k ]] || (cd "$REPO_ROOT" && make --no-print-directory kustomize >&2)
  echo "$k"
}

# write_overlay DIR: config/default as `make deploy` builds it, in an overlay so the clone's
# config/manager/kustomization.yaml is not edited: the image is the one just built and the
# instance agent's image (RELATED_IMAGE_AGENT) is the operator's own, as the OLM bundle sets
# them. The PostgreSQL images keep their real names (RELATED_IMAGE_POSTGRES_<major>): the
# cluster has pgpilot's own images under them (images.sh, IMAGE_ALIAS).
write_overlay() {
  local dir=$1 ref=${IMAGE_REF[operator]} base
  mkdir -p "$dir"
  # kustomize takes bases by relative path only.
  base=$(realpath --relative-to="$dir" "$REPO_ROOT/config/default")
  cat >"$dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $base
images:
- name: controller
  newName: ${ref%:*}
  newTag: ${ref##*:}
patches:
- target: {kind: Deployment, name: $OPERATOR_DEPLOYMENT}
  patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: $OPERATOR_DEPLOYMENT}
    spec:
      template:
        spec:
          containers:
          - name: manager
            env:
            - name: RELATED_IMAGE_AGENT
              value: $ref
EOF
}

deploy_operator() {
  cluster_is_up || die "the cluster is not up (localcluster up)"
  local start=$SECONDS
  build_components
  build_images
  build_operator_from_source
  load_images operator
  write_overlay "$STATE/deploy"
  "$(kustomize_bin)" build "$STATE/deploy" >"$STATE/deploy/manifests.yaml"
  kubectl apply -f "$STATE/deploy/manifests.yaml" >/dev/null
  kubectl -n "$OPERATOR_NAMESPACE" rollout status "deploy/$OPERATOR_DEPLOYMENT" --timeout=180s >/dev/null
  log "operator ${IMAGE_REF[operator]} deployed and available in $((SECONDS - start))s"
}

# undeploy_operator: removes what deploy_operator applied, its CRD (and so every
# PostgresCluster) included, leaving the cluster as before the deploy.
undeploy_operator() {
  [[ -f $STATE/deploy/manifests.yaml ]] || die "no operator deployed by localcluster deploy"
  kubectl delete --ignore-not-found --wait=true --timeout=180s -f "$STATE/deploy/manifests.yaml" >/dev/null
  rm -f "$STATE/deploy/manifests.yaml"
  log "operator and its CRD removed"
}

# subscribe_operator: pgpilot from the catalog into the global `operators` namespace (watching
# every namespace), as a user subscribes on OperatorHub; waits for the CSV to succeed.
subscribe_operator() {
  local start=$SECONDS csv=""
  kubectl apply -f - >/dev/null <<EOF
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata:
  name: $PACKAGE
  namespace: operators
spec:
  channel: stable
  name: $PACKAGE
  source: $CATALOG_SOURCE
  sourceNamespace: $OLM_NAMESPACE
EOF
  if wait_until "the Subscription's CSV" 300 subscription_installed_csv; then
    csv=$(subscription_installed_csv)
  fi
  if [[ -z $csv ]] || ! kubectl -n operators wait --for=jsonpath='{.status.phase}'=Succeeded "csv/$csv" --timeout=300s >/dev/null; then
    kubectl -n operators get subscription,installplan,csv,pods -o wide >&2 || true
    die "the Subscription to $PACKAGE did not install a CSV that succeeds"
  fi
  log "$csv installed by OLM in $((SECONDS - start))s"
}

# subscription_installed_csv: the CSV pgpilot's Subscription installed; fails until there is one.
subscription_installed_csv() {
  local csv
  csv=$(kubectl -n operators get subscription "$PACKAGE" -o jsonpath='{.status.installedCSV}') && [[ -n $csv ]] &&
    echo "$csv"
}

demo() {
  local start=$SECONDS
  up
  if [[ ${OLM:-} == 1 ]]; then
    olm
    subscribe_operator
  else
    deploy_operator
  fi
  kubectl apply -f "$SAMPLE" >/dev/null
  local name
  name=$(kubectl create --dry-run=client -o jsonpath='{.metadata.name}' -f "$SAMPLE")
  log "waiting for PostgresCluster $name to become Ready (3 instances initialise one after another)"
  if ! kubectl wait --for=jsonpath='{.status.phase}'=Ready "postgrescluster/$name" --timeout=600s >/dev/null; then
    kubectl get postgrescluster,pods,pvc -o wide >&2 || true
    die "PostgresCluster $name did not become Ready"
  fi
  kubectl get postgrescluster,pods,pvc,svc -o wide
  log "what each instance's agent reports (status.instancesStatus):"
  kubectl get postgrescluster "$name" -o jsonpath='{range .status.instancesStatus[*]}{.name}{"\t"}{.role}{"\tstreaming="}{.streaming}{"\tlsn="}{.lsn}{"\n"}{end}'
  log "replication as the primary sees it:"
  kubectl exec "$name-0" -c postgres -- psql -U postgres -c 'select application_name, state, replay_lsn from pg_stat_replication'
  demo_backup
  log "demo ready in $((SECONDS - start))s. Look around with:"
  cat >&2 <<EOF
  PATH=\$PWD/bin:\$PATH hack/localcluster/localcluster kubectl pgpilot status $name   # also: promote, restart, psql, logs, report
  hack/localcluster/localcluster kubectl get postgrescluster $name -o yaml
  hack/localcluster/localcluster kubectl describe pod $name-0
  hack/localcluster/localcluster kubectl -n $([[ ${OLM:-} == 1 ]] && echo operators || echo "$OPERATOR_NAMESPACE") logs deploy/$OPERATOR_DEPLOYMENT
  hack/localcluster/localcluster kubectl exec $name-0 -c postgres -- psql -U postgres -c 'select version()'
  # as the application, through the read-write Service, with the generated Secret:
  hack/localcluster/localcluster kubectl run psql --rm -it --restart=Never --image=\$(hack/localcluster/localcluster kubectl get sts $name -o jsonpath='{.spec.template.spec.containers[0].image}') \\
    --env=PGPASSWORD=\$(hack/localcluster/localcluster kubectl get secret $name-app -o jsonpath='{.data.password}' | base64 -d) -- psql -h $name-rw -U app app
  hack/localcluster/localcluster exec -- bash     # a shell on the node's network (KUBECONFIG set)
  hack/localcluster/localcluster kubectl get backups,postgrescluster/example-backed-up -o wide
  make demo-down                                  # tear it all down
EOF
  log "the cluster as kubectl pgpilot shows it (bin/kubectl-pgpilot, found by kubectl on PATH):"
  (export PATH="$REPO_ROOT/bin:$PATH" NO_COLOR=1 && kubectl pgpilot status "$name")
}

# demo_backup: the S3 service, the backed-up sample cluster archiving into it, and a full Backup.
demo_backup() {
  s3_up
  s3_copy_secrets default
  kubectl apply -f "${BACKUP_SAMPLES[0]}" >/dev/null
  log "waiting for PostgresCluster example-backed-up to archive WAL to S3"
  if ! kubectl wait --for=condition=ContinuousArchiving postgrescluster/example-backed-up --timeout=600s >/dev/null; then
    kubectl get postgrescluster example-backed-up -o yaml >&2 || true
    die "PostgresCluster example-backed-up does not archive WAL"
  fi
  kubectl apply -f "${BACKUP_SAMPLES[1]}" >/dev/null
  log "waiting for Backup example-backed-up-full to complete"
  if ! kubectl wait --for=jsonpath='{.status.phase}'=Completed backup/example-backed-up-full --timeout=600s >/dev/null; then
    kubectl get backup example-backed-up-full -o yaml >&2 || true
    die "Backup example-backed-up-full did not complete"
  fi
  kubectl get backups -o wide
  kubectl get postgrescluster example-backed-up -o jsonpath='{.status.backup}{"\n"}'
}
