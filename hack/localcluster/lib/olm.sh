# OLM on the local cluster, installed as its quickstart install.sh does (crds.yaml, olm.yaml,
# then the packageserver CSV Succeeded), and pgpilot served the OperatorHub way: a catalog image
# in a CatalogSource (spec.image) and a bundle image per catalog entry, unpacked by OLM's Jobs.
# Every image is built here offline and published under its upstream name (quay.io/...,
# ghcr.io/..., docker.io/...), which containerd pulls from the in-namespace registry
# (config/hosts.toml), so the manifests stay as released. Sourced by localcluster.
# shellcheck shell=bash

OLM_NAMESPACE=olm
CATALOG_SOURCE=pgpilot-operators
PACKAGE=pgpilot-operator
CATALOG_BUNDLES=$REPO_ROOT/catalog/$PACKAGE/bundles

# opm_index_ref REGISTRY: the empty index image's reference in REGISTRY (a name or an address).
opm_index_ref() { echo "$1/opm-index:$(cached_version opm)"; }

# cached_version TOOL: the pinned version of a hack/toolchain.sh tool, from its cache folder.
cached_version() { local dir; dir=$(tool_dir "$1") && echo "${dir##*/"$1"-}"; }

# make_vars NAME...: the Makefile's variables (make print-NAME), one a line; the image names of a
# release are defined there once.
make_vars() { make -s --no-print-directory -C "$REPO_ROOT" "${@/#/print-}"; }

# csv_container_image BUNDLE_DIR: the operator image the bundle's CSV deploys.
csv_container_image() { sed -n 's/^ *containerImage: //p' "$1"/manifests/*.clusterserviceversion.yaml; }

olm_module_dir() {
  (cd "$REPO_ROOT/hack/toolchain/olm" &&
    go list -m -f '{{.Dir}}' github.com/operator-framework/operator-lifecycle-manager)
}

# OLM's image as its Dockerfile makes it: the binaries in /bin on busybox (distroless
# static:debug), whose cp the bundle unpack Jobs call as /bin/cp.
build_olm_image() {
  local root
  root=$(new_root)
  busybox_rootfs "$root"
  install -m 0755 "$(tool_dir olm)"/{olm,catalog,package-server,copy-content,cpb} "$root/bin/"
  assemble_image "$1" "$root" "$2" --config.entrypoint /bin/olm --config.user 1001 --config.env PATH=/bin
  rm -rf "$root"
}

# opm_rootfs DIR: what the opm image holds: /bin/opm, the catalog pods' probe
# /bin/grpc_health_probe, and a shell (operator-sdk's registry pods run `sh -c "opm serve ..."`).
opm_rootfs() {
  busybox_rootfs "$1"
  install -m 0755 "$(tool_dir opm)/opm" "$(tool_dir grpc-health-probe)/grpc_health_probe" "$1/bin/"
}

# The label that marks an image as a file-based catalog and says where its configs are.
FBC_CONFIGS_LABEL=operators.operatorframework.io.index.configs.v1=/configs

# opm_image REF OUT PREPARE [UMOCI_CONFIG_FLAGS...]: an image of opm_rootfs running opm as 1001,
# after PREPARE ROOT has added to its root filesystem.
opm_image() {
  local ref=$1 out=$2 prepare=$3 root
  shift 3
  root=$(new_root)
  opm_rootfs "$root"
  "$prepare" "$root"
  assemble_image "$ref" "$root" "$out" --config.entrypoint /bin/opm --config.user 1001 --config.env PATH=/bin "$@"
  rm -rf "$root"
}

build_opm_image() { opm_image "$1" "$2" true; }

# An empty file-based catalog to add bundles to: operator-sdk run bundle's --index-image. (Its
# default, quay.io/operator-framework/opm:latest, is taken for file-based only by name; any other
# index without the configs label is taken for SQLite, which needs an opm built with cgo.)
build_opm_index_image() { opm_image "$1" "$2" empty_configs --config.label "$FBC_CONFIGS_LABEL"; }
empty_configs() { mkdir -p "$1/configs"; }

# The catalog image as catalog.Dockerfile makes it: catalog/ at /configs with opm's serve cache
# built ahead, served by `opm serve`.
build_catalog_image() {
  opm_image "$1" "$2" catalog_configs --config.label "$FBC_CONFIGS_LABEL" \
    --config.cmd serve --config.cmd /configs --config.cmd --cache-dir=/tmp/cache
}
catalog_configs() {
  cp -r "$REPO_ROOT/catalog" "$1/configs"
  "$(tool_dir opm)/opm" serve "$1/configs" --cache-dir="$1/tmp/cache" --cache-only >/dev/null
  chown -R 1001:0 "$1/tmp/cache"
}

# build_bundle_image REF OUT: the bundle folder BUNDLE_SRC as bundle.Dockerfile lays it out, with
# its annotations as labels (and the scorecard labels when it carries tests).
build_bundle_image() {
  local root labels=() key value
  root=$(new_root)
  cp -r "$BUNDLE_SRC/manifests" "$BUNDLE_SRC/metadata" "$root/"
  while read -r key value; do
    labels+=(--config.label "${key%:}=$value")
  done < <(grep -E '^  operators\.operatorframework\.io\.' "$BUNDLE_SRC/metadata/annotations.yaml")
  if [[ -d $BUNDLE_SRC/tests/scorecard ]]; then
    mkdir -p "$root/tests" && cp -r "$BUNDLE_SRC/tests/scorecard" "$root/tests/"
  fi
  assemble_image "$1" "$root" "$2" "${labels[@]}"
  rm -rf "$root"
}

# operator-sdk's scorecard-test image: the built-in basic and olm tests.
build_scorecard_test_image() {
  binary_image "$1" "$2" "$(tool_dir operator-sdk)/scorecard-test" /usr/local/bin/scorecard-test \
    --config.user 1001 --config.env PATH=/usr/local/bin
}

# pgpilot's scorecard tests (test/scorecard), as test/scorecard/Dockerfile builds them.
build_pgpilot_scorecard_image() {
  binary_image "$1" "$2" "$STATE/build/pgpilot-scorecard-tests" /usr/local/bin/pgpilot-scorecard-tests \
    --config.user 65532:65532 --config.env PATH=/usr/local/bin
}

# build_release_operator TAG: the operator image of an earlier release, its binaries built once
# from the release's source and cached by its commit. The source is hack/releases/TAG.tar.gz, the
# tagged tree as `git archive` wrote it (the commit is in its header), carried in the repository
# so that a clone without tags or history (as CI makes) builds the same release.
build_release_operator() {
  local tag=$1 commit
  RELEASE_SOURCE=$REPO_ROOT/hack/releases/$tag.tar.gz
  [[ -f $RELEASE_SOURCE ]] || die "$RELEASE_SOURCE is missing (make catalog-render-release RELEASE=$tag writes it)"
  commit=$(gzip -dc "$RELEASE_SOURCE" | git get-tar-commit-id) || true
  [[ -n $commit ]] || die "$RELEASE_SOURCE names no commit (it is not a git archive of the tag)"
  OPERATOR_BUILD=$(build_once "operator-$tag" "${commit:0:12}" build_release_binaries)
  image "operator-$tag" pgpilot-operator "$tag $(cd "$OPERATOR_BUILD" && sha256sum ./*)" build_operator_image
}

build_release_binaries() {
  local tree
  tree=$(mktemp -d "$STATE/build/release.XXXXXX")
  tar -xzf "$RELEASE_SOURCE" -C "$tree"
  build_operator_binaries "$tree" "$1"
  rm -rf "$tree"
}

# build_olm_images: OLM, opm and pgpilot's release images, each named by what refers to it:
# RELEASE_REF[name]=upstream reference.
declare -A RELEASE_REF
build_olm_images() {
  local olm_version opm_version opm_key sdk_version version entry tag
  local -a made
  olm_version=$(cached_version olm)
  opm_version=$(cached_version opm)
  sdk_version=$(cached_version operator-sdk)
  opm_key="$opm_version $(cat "$(tool_dir opm)/opm" "$(tool_dir grpc-health-probe)/grpc_health_probe" | sha256sum)"
  image olm olm "$olm_version $(cd "$(tool_dir olm)" && sha256sum ./*)" build_olm_image
  RELEASE_REF[olm]=quay.io/operator-framework/olm:$olm_version
  image opm opm "$opm_key" build_opm_image
  RELEASE_REF[opm]=quay.io/operator-framework/opm:$opm_version
  image opm-index opm-index "$opm_key" build_opm_index_image
  RELEASE_REF[opm-index]=$(opm_index_ref "$REGISTRY_HOST")
  # operator-sdk run bundle-upgrade has no flag for the image of its registry pod's init
  # container (sh, cat, gzip -d) and always names UBI; busybox stands in for it under that name.
  # shellcheck disable=SC2154 # ubi-standin is a key, not ubi minus standin: images.sh declares -A both arrays
  IMAGE_REF[ubi-standin]=${IMAGE_REF[busybox]} IMAGE_TAR[ubi-standin]=${IMAGE_TAR[busybox]}
  RELEASE_REF[ubi-standin]=registry.access.redhat.com/ubi9/ubi:9.7
  image scorecard-test scorecard-test "$(sha256sum <"$(tool_dir operator-sdk)/scorecard-test")" build_scorecard_test_image
  RELEASE_REF[scorecard-test]=quay.io/operator-framework/scorecard-test:$sdk_version
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -ldflags "-s -w" \
    -o "$STATE/build/pgpilot-scorecard-tests" ./test/scorecard)
  version=$(<"$REPO_ROOT/internal/version/VERSION")
  mapfile -t made < <(make_vars CATALOG_IMG SCORECARD_IMG IMG)
  ((${#made[@]} == 3)) || die "make print-CATALOG_IMG print-SCORECARD_IMG print-IMG failed"
  image catalog pgpilot-operator-catalog "$opm_key $(hash_inputs "$REPO_ROOT/catalog")" build_catalog_image
  RELEASE_REF[catalog]=${made[0]}
  image pgpilot-scorecard pgpilot-operator-scorecard "$(sha256sum <"$STATE/build/pgpilot-scorecard-tests")" \
    build_pgpilot_scorecard_image
  RELEASE_REF[pgpilot-scorecard]=${made[1]}
  RELEASE_REF[operator]=${made[2]}
  # A bundle image per catalog entry, under the image the entry names: this clone's bundle/ for
  # its own version, the catalog's copy (hack/olm/bundle-dir) for every earlier release, whose
  # operator is built from its tag and published as its CSV names it.
  for entry in "$CATALOG_BUNDLES"/*.yaml; do
    tag=$(basename "$entry" .yaml) && tag=${tag#"$PACKAGE".}
    if [[ $tag == "v$version" ]]; then
      BUNDLE_SRC=$REPO_ROOT/bundle
    else
      BUNDLE_SRC=$STATE/build/bundle-$tag
      rm -rf "$BUNDLE_SRC"
      (cd "$REPO_ROOT" && go run ./hack/olm/bundle-dir "$entry" "$BUNDLE_SRC")
      build_release_operator "$tag"
      RELEASE_REF[operator-$tag]=$(csv_container_image "$BUNDLE_SRC")
    fi
    image "bundle-$tag" pgpilot-operator-bundle "$(hash_inputs "$BUNDLE_SRC")" build_bundle_image
    RELEASE_REF[bundle-$tag]=$(sed -n 's/^image: //p' "$entry")
  done
}

# publish NAME...: load the named images and tag them with their upstream references too, in
# containerd and in the registry.
publish() {
  local name pids=() failed=0 distinct=()
  local -A seen=()
  # Images published under a second name share a tarball; import each once.
  for name in "$@"; do
    [[ -n ${seen[${IMAGE_TAR[$name]}]:-} ]] || distinct+=("$name")
    seen[${IMAGE_TAR[$name]}]=1
  done
  load_images "${distinct[@]}"
  for name in "$@"; do
    local ref=${RELEASE_REF[$name]}
    "${CTR[@]}" images tag --force "${IMAGE_REF[$name]}" "$ref" >/dev/null
    ns_exec skopeo copy --quiet --dest-tls-verify=false "docker-archive:${IMAGE_TAR[$name]}" \
      "docker://$REGISTRY_ADDR/${ref#*/}" &
    pids+=($!)
  done
  for name in "${pids[@]}"; do wait "$name" || failed=1; done
  ((failed == 0)) || die "publishing images failed"
}

# olm_manifests: OLM's namespaces, RBAC, operators and packageserver CSV from the quickstart's
# olm.yaml, with OLM's image by tag instead of digest, opm pinned to the version OLM requires, and
# without the operatorhub.io CatalogSource (no route out). The quickstart in the module lags the
# chart that the release's olm.yaml is rendered from: its catalog operator flags have one dash,
# which the v0.38.0 binary refuses (they get the chart's two), and it lacks the chart's OLMConfig.
# (The chart's NetworkPolicies are left out: this cluster's CNI does not enforce them.)
olm_manifests() {
  local olm=${RELEASE_REF[olm]}
  sed -e "s|quay.io/operator-framework/olm@sha256:[0-9a-f]*|$olm|" \
    -e "s|^\( *\)- '-namespace'|\1- --namespace|" -e "s|^\( *\)- -util-image|\1- --util-image|" \
    -e "s|^\( *\)- -configmapServerImage=\(.*\)|\1- --configmapServerImage=\2\n\1- --opmImage=${RELEASE_REF[opm]}|" \
    "$(olm_module_dir)/deploy/upstream/quickstart/olm.yaml" |
    awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } !/\nkind: CatalogSource\n/'
  cat "$(olm_module_dir)/deploy/chart/templates/0000_50_olm_03-olmconfig.yaml"
}

# install_olm: the chart's CRDs (the quickstart's crds.yaml is older than v0.38.0's API), then
# OLM itself; waits as the quickstart install.sh does, for the packageserver CSV to succeed.
install_olm() {
  local crds start=$SECONDS
  crds=$(olm_module_dir)/deploy/chart/crds
  # Server-side: the CRDs are too big for client-side apply's last-applied annotation.
  kubectl apply --server-side --force-conflicts -f "$crds" >/dev/null
  kubectl wait --for=condition=Established -f "$crds" --timeout=60s >/dev/null
  olm_manifests | kubectl apply -f - >/dev/null
  kubectl -n "$OLM_NAMESPACE" rollout status deploy/olm-operator --timeout=180s >/dev/null
  kubectl -n "$OLM_NAMESPACE" rollout status deploy/catalog-operator --timeout=180s >/dev/null
  if ! kubectl -n "$OLM_NAMESPACE" wait --for=jsonpath='{.status.phase}'=Succeeded csv/packageserver --timeout=300s >/dev/null; then
    kubectl -n "$OLM_NAMESPACE" get csv,pods -o wide >&2 || true
    die "OLM's packageserver CSV did not succeed"
  fi
  kubectl -n "$OLM_NAMESPACE" rollout status deploy/packageserver --timeout=180s >/dev/null
  log "OLM ${RELEASE_REF[olm]##*:} installed in $((SECONDS - start))s"
}

# add_catalog_source: pgpilot's catalog image in the global catalog namespace, where every
# namespace's Subscriptions find it (what OperatorHub lists).
add_catalog_source() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata:
  name: $CATALOG_SOURCE
  namespace: $OLM_NAMESPACE
spec:
  sourceType: grpc
  image: ${RELEASE_REF[catalog]}
  displayName: pgpilot
  publisher: pgpilot
  grpcPodConfig:
    securityContextConfig: restricted
EOF
  if ! kubectl -n "$OLM_NAMESPACE" wait --for=jsonpath='{.status.connectionState.lastObservedState}'=READY \
    "catalogsource/$CATALOG_SOURCE" --timeout=180s >/dev/null; then
    kubectl -n "$OLM_NAMESPACE" get catalogsource,pods -o wide >&2 || true
    die "CatalogSource $CATALOG_SOURCE did not become READY"
  fi
  log "CatalogSource $OLM_NAMESPACE/$CATALOG_SOURCE serves ${RELEASE_REF[catalog]}"
}

# olm: OLM installed (once), every image published, the CatalogSource READY.
# olm_images: the images `olm` publishes that need no cluster, built into the cache: on a fresh
# machine that compiles the earlier releases' operators (14 min in one run), which the e2e run
# does before its deploy phase, not beside it, where it starved the specs' failovers.
olm_images() {
  local start=$SECONDS
  build_components >/dev/null
  build_images
  build_olm_images
  log "OLM's and pgpilot's release images built in $((SECONDS - start))s"
}

olm() {
  cluster_is_up || die "the cluster is not up (localcluster up)"
  local start=$SECONDS name
  build_components
  build_images
  build_operator_from_source
  build_olm_images
  publish "${!RELEASE_REF[@]}"
  install_olm
  add_catalog_source
  log "OLM ready with pgpilot's catalog in $((SECONDS - start))s; images:"
  for name in "${!RELEASE_REF[@]}"; do printf '  %-22s %s\n' "$name" "${RELEASE_REF[$name]}" >&2; done
}
