# Offline container images: root filesystems made here, turned into single-layer images by
# umoci, saved as docker-archive tarballs by skopeo, cached by their inputs, then imported into
# containerd and pushed to the in-namespace registry. Sourced by localcluster.
# shellcheck shell=bash

# Bump when the way images are assembled changes, so every cached tarball is rebuilt.
IMAGE_FORMAT=2

declare -A IMAGE_REF IMAGE_TAR
# IMAGE_ALIAS[name]: the upstream reference an image is also published under, for whatever
# pulls it by that name (pgpilot's own PostgreSQL images, the third-party stand-in).
declare -A IMAGE_ALIAS

# assemble_image REF ROOTFS OUT [UMOCI_CONFIG_FLAGS...]: one layer holding ROOTFS.
assemble_image() {
  local ref=$1 rootfs=$2 out=$3 work
  shift 3
  work=$(mktemp -d "$IMAGE_CACHE/work.$$.XXXXXX")
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:img"
  umoci insert --image "$work/oci:img" "$rootfs" /
  umoci config --image "$work/oci:img" --os linux --architecture amd64 "$@"
  rm -f "$out"
  skopeo copy --quiet "oci:$work/oci:img" "docker-archive:$out:$ref"
  rm -rf "$work"
}

# base_rootfs DIR: what a static binary needs around it, like distroless/static: the root,
# nonroot (65532) and nobody users, and a world-writable /tmp.
base_rootfs() {
  mkdir -p "$1/etc" "$1/tmp"
  chmod 1777 "$1/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$1/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\nnobody:x:65534:\n' >"$1/etc/group"
}

# binary_image REF OUT BINARY PATH_IN_IMAGE [UMOCI_CONFIG_FLAGS...]
binary_image() {
  local ref=$1 out=$2 binary=$3 target=$4 root
  shift 4
  root=$(new_root)
  base_rootfs "$root"
  install -D -m 0755 "$binary" "$root$target"
  assemble_image "$ref" "$root" "$out" --config.entrypoint "$target" "$@"
  rm -rf "$root"
}

build_pause_image() { binary_image "$1" "$2" "$(bin pause)" /pause --config.user 65535:65535; }
build_coredns_image() { binary_image "$1" "$2" "$(bin coredns)" /coredns --config.user 65532:65532; }
build_local_path_image() { binary_image "$1" "$2" "$(bin local-path-provisioner)" /usr/bin/local-path-provisioner; }
build_httpcheck_image() { binary_image "$1" "$2" "$(bin httpcheck)" /httpcheck --config.user 65532:65532; }
build_versitygw_image() { binary_image "$1" "$2" "$(bin versitygw)" /usr/bin/versitygw --config.user 65532:65532; }
build_prometheus_image() { binary_image "$1" "$2" "$(bin prometheus)" /bin/prometheus --config.user 65532:65532; }

# The operator's image as its Dockerfile makes it: the static manager at /manager and the
# instance agent at /agent (PostgreSQL pods copy it out with an init container), run as nonroot
# 65532 (distroless/static:nonroot's user).
build_operator_image() {
  local root
  root=$(new_root)
  base_rootfs "$root"
  install -m 0755 "$OPERATOR_BUILD"/* "$root/"
  assemble_image "$1" "$root" "$2" --config.entrypoint /manager --config.user 65532:65532 --config.workingdir /
  rm -rf "$root"
}

# new_root: an empty root filesystem folder in the image cache.
new_root() {
  local root
  root=$(mktemp -d "$IMAGE_CACHE/root.$$.XXXXXX") && chmod 0755 "$root"
  echo "$root"
}

# busybox_rootfs DIR: base_rootfs plus Debian's static busybox with a link per applet in /bin.
busybox_rootfs() {
  local applet
  base_rootfs "$1"
  install -D -m 0755 /bin/busybox "$1/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [[ -e $1/bin/$applet ]] || ln -s busybox "$1/bin/$applet"
  done
}

# The helper image local-path-provisioner runs its setup/teardown scripts in.
build_busybox_image() {
  local root
  root=$(new_root)
  busybox_rootfs "$root"
  assemble_image "$1" "$root" "$2" --config.cmd sh --config.env PATH=/bin
  rm -rf "$root"
}

# postgresql_image MAJOR ROOT REF OUT: pgpilot's PostgreSQL MAJOR image (images/postgresql) from
# ROOT, the root hack/postgres-rootfs.sh built with the recipe, configured as the Containerfile
# does.
postgresql_image() {
  local major=$1
  assemble_image "$3" "$2" "$4" \
    --config.cmd postgres --config.user 999:999 \
    --config.env "PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --config.env PGDATA=/var/lib/postgresql/data --config.env LANG=C.UTF-8 \
    --config.env "PG_MAJOR=$major" --config.exposedports 5432/tcp --config.stopsignal SIGINT
}

# official_postgres_image ROOT REF OUT: the stand-in of a third-party image,
# docker.io/library/postgres:15 (the default of releases before 0.4.0), from ROOT, the root of
# PostgreSQL 15 alone (no pgBackRest), with the official image's entrypoint (images/postgres/),
# run as the official image runs.
official_postgres_image() {
  local root
  root=$(new_root)
  cp -a "$1/." "$root/"
  shift
  install -m 0755 "$LC_DIR/images/postgres/docker-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
  ln -sf usr/local/bin/docker-entrypoint.sh "$root/docker-entrypoint.sh"
  mkdir -p "$root/docker-entrypoint-initdb.d"
  chmod 1777 "$root/var/lib/postgresql/data"
  # As in the official image: servers initialised from the sample listen on every address.
  sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" "$root/usr/share/postgresql/15/postgresql.conf.sample"
  assemble_image "$1" "$root" "$2" \
    --config.entrypoint docker-entrypoint.sh --config.cmd postgres --config.user 999:999 \
    --config.env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PGDATA=/var/lib/postgresql/data --config.env LANG=C.UTF-8 \
    --config.env PG_MAJOR=15 --config.volume /var/lib/postgresql/data \
    --config.exposedports 5432/tcp --config.stopsignal SIGINT
  rm -rf "$root"
}

# postgres_rootfs MAJOR [PACKAGE...]: the cached root of hack/postgres-rootfs.sh, built when
# missing (its log is kept beside it).
postgres_rootfs() {
  "$REPO_ROOT/hack/postgres-rootfs.sh" "$@" || die "building the PostgreSQL $1 root filesystem failed"
}

# POSTGRES_MAJORS: the majors of images/postgresql/majors.
mapfile -t POSTGRES_MAJORS < <(awk '$1 ~ /^[0-9]+$/ { print $1 }' "$REPO_ROOT/images/postgresql/majors")
# shellcheck disable=SC2034 # up.sh loads them
POSTGRES_IMAGES=("${POSTGRES_MAJORS[@]/#/postgresql-}")

# debian_mirror: the Debian mirror the host's apt uses, so the image comes from the same place.
debian_mirror() {
  local uri
  uri=$(grep -rhoE '^(deb |URIs: )\s*https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    head -1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}

# image NAME REPO KEY BUILDER [ARG...]: the cached tarball of NAME for KEY, built by BUILDER
# ARG... REF OUT when missing; records its reference and tarball.
image() {
  local name=$1 repo=$2 key=$3 builder=$4
  local -a args=("${@:5}")
  key=$(printf '%s\n' "$IMAGE_FORMAT" "$key" | sha256sum | cut -c1-12)
  local ref=$REGISTRY_HOST/$repo:$key tar=$IMAGE_CACHE/$name-$key.tar
  if [[ ! -f $tar ]]; then
    log "building image $ref"
    local start=$SECONDS
    "$builder" "${args[@]}" "$ref" "$tar.partial.$$"
    mv "$tar.partial.$$" "$tar"
    log "built image $name in $((SECONDS - start))s ($(du -h "$tar" | cut -f1))"
    # Keep the three newest tarballs of an image (switching branches stays cheap), not every one.
    find "$IMAGE_CACHE" -maxdepth 1 -name "$name-????????????.tar" -printf '%T@ %p\n' |
      sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -f
  fi
  IMAGE_REF[$name]=$ref
  IMAGE_TAR[$name]=$tar
}

# remove_stale_scratch: the scratch folders and partial tarballs of interrupted builds. Each is
# named by the process that makes it (root.PID.*, work.PID.*, *.tar.partial.PID), so a build
# that another localcluster command runs at the same time (the e2e run brings OLM up beside its
# specs) keeps its own.
remove_stale_scratch() {
  local path base pid
  for path in "$IMAGE_CACHE"/root.* "$IMAGE_CACHE"/work.* "$IMAGE_CACHE"/*.tar.partial*; do
    [[ -e $path ]] || continue
    base=${path##*/}
    case $base in
      *.tar.partial.*) pid=${base##*.} ;;
      *) pid=${base#*.} && pid=${pid%%.*} ;;
    esac
    if [[ ! $pid =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
      rm -rf "$path"
    fi
  done
}

# build_images: the images the cluster itself needs, and the e2e client.
build_images() {
  mkdir -p "$IMAGE_CACHE"
  remove_stale_scratch
  image pause pause "$(sha256sum <"$(bin pause)")" build_pause_image
  image coredns coredns "$COREDNS_VERSION $(sha256sum <"$(bin coredns)")" build_coredns_image
  image local-path-provisioner local-path-provisioner \
    "$LOCAL_PATH_VERSION $(sha256sum <"$(bin local-path-provisioner)")" build_local_path_image
  image busybox busybox "$(dpkg-query -W -f='${Version}' busybox-static)" build_busybox_image
  image httpcheck httpcheck "$(sha256sum <"$(bin httpcheck)")" build_httpcheck_image
  image versitygw versitygw "$(sha256sum <"$(bin versitygw)")" build_versitygw_image
  local major root
  for major in "${POSTGRES_MAJORS[@]}"; do
    root=$(postgres_rootfs "$major")
    image "postgresql-$major" postgresql "$major $(basename "$root")" postgresql_image "$major" "$root"
    IMAGE_ALIAS[postgresql-$major]=ghcr.io/pgpilot/postgresql:$major
  done
  root=$(postgres_rootfs 15 postgresql-15)
  image official-postgres official-postgres "$(basename "$root") $(hash_inputs "$LC_DIR/images/postgres")" \
    official_postgres_image "$root"
  IMAGE_ALIAS[official-postgres]=docker.io/library/postgres:15
  image prometheus prometheus "$(sha256sum <"$(bin prometheus)")" build_prometheus_image
}

# build_operator_binaries SRC OUT: the Dockerfile's binaries from the tree SRC, static (CGO off,
# -s -w): ./cmd as OUT/manager and, when SRC has it, ./cmd/agent as OUT/agent. Unlike the
# Dockerfile, without -trimpath: the Makefile's go test and vet compile with CGO off and no
# -trimpath too, so on a cold cache the dependencies are compiled once for all of them.
build_operator_binaries() {
  local src=$1 out=$2 build=(env CGO_ENABLED=0 go build -ldflags "-s -w")
  (cd "$src" && "${build[@]}" -o "$out/manager" ./cmd)
  if [[ -d $src/cmd/agent ]]; then
    (cd "$src" && "${build[@]}" -o "$out/agent" ./cmd/agent)
  fi
}

# build_operator_from_source: the operator image from this clone. It is keyed by the binaries,
# so an unchanged tree reuses the cached tarball.
build_operator_from_source() {
  OPERATOR_BUILD=$STATE/build/operator
  rm -rf "$OPERATOR_BUILD" && mkdir -p "$OPERATOR_BUILD"
  log "building the operator binaries (go build ./cmd ./cmd/agent)"
  build_operator_binaries "$REPO_ROOT" "$OPERATOR_BUILD"
  image operator pgpilot-operator "$(cd "$OPERATOR_BUILD" && sha256sum ./*)" build_operator_image
}

# load_tarball TAR REF [ALIAS]: import into containerd's k8s.io namespace (kubelet uses it
# directly) and push to the in-namespace registry (for whatever pulls by reference, like OLM),
# under ALIAS too when given.
load_tarball() {
  local tar=$1 ref=$2 alias=${3:-}
  "${CTR[@]}" images import "$tar" >/dev/null
  ns_exec skopeo copy --quiet --dest-tls-verify=false "docker-archive:$tar" "docker://$REGISTRY_ADDR/${ref#*/}"
  [[ -n $alias ]] || return 0
  "${CTR[@]}" images tag --force "$ref" "$alias" >/dev/null
  ns_exec skopeo copy --quiet --dest-tls-verify=false "docker-archive:$tar" "docker://$REGISTRY_ADDR/${alias#*/}"
}

# load_images NAME...: load the named cached images; in parallel, as imports are I/O bound.
load_images() {
  local name pids=() failed=0
  for name in "$@"; do
    load_tarball "${IMAGE_TAR[$name]}" "${IMAGE_REF[$name]}" "${IMAGE_ALIAS[$name]:-}" &
    pids+=($!)
  done
  for name in "${pids[@]}"; do wait "$name" || failed=1; done
  ((failed == 0)) || die "loading images failed"
}
