# A throwaway PKI and kubeconfigs, made fresh by every `up` under $STATE. Sourced.
# shellcheck shell=bash

PKI=$STATE/pki

new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }

# new_ca NAME CN
new_ca() {
  new_key "$PKI/$1.key"
  openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -out "$PKI/$1.crt" 2>/dev/null
}

# new_cert NAME CA SUBJECT [SUBJECT_ALT_NAMES]: a client certificate, or a serving and client
# one when SANs are given.
new_cert() {
  local name=$1 ca=$2 subject=$3 sans=${4:-} ext
  new_key "$PKI/$name.key"
  ext=$(mktemp)
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subject" 2>/dev/null |
    openssl x509 -req -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial -days 3650 \
      -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$ext"
}

# kubeconfig NAME CERT: a kubeconfig for the client certificate CERT.
kubeconfig() {
  cat >"$STATE/kubeconfig/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pgpilot-localcluster
  cluster:
    certificate-authority: $PKI/ca.crt
    server: https://$NODE_IP:6443
users:
- name: $1
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: pgpilot-localcluster
  context: {cluster: pgpilot-localcluster, user: $1}
current-context: pgpilot-localcluster
EOF
}

make_pki() {
  mkdir -p "$PKI" "$STATE/kubeconfig"
  new_ca ca pgpilot-localcluster-ca
  # Aggregated API servers (OLM's packageserver) trust requests through the front proxy.
  new_ca front-proxy-ca pgpilot-localcluster-front-proxy-ca
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

  local svc=kubernetes.default.svc
  new_cert apiserver ca /CN=kube-apiserver \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:$svc,DNS:$svc.cluster.local,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:$NODE_IP,IP:$API_SERVICE_IP"
  new_cert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client"
  new_cert front-proxy-client front-proxy-ca /CN=front-proxy-client
  new_cert admin ca "/O=system:masters/CN=pgpilot-localcluster-admin"
  new_cert controller-manager ca /CN=system:kube-controller-manager
  new_cert scheduler ca /CN=system:kube-scheduler
  new_cert kube-proxy ca /CN=system:kube-proxy
  new_cert kubelet ca "/O=system:nodes/CN=system:node:$NODE_NAME"
  new_cert registry ca "/CN=$REGISTRY_NAME" "DNS:$REGISTRY_NAME,IP:$NODE_IP"
  rm -f "$PKI"/*.srl

  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kube-proxy kube-proxy
  kubeconfig kubelet kubelet
}
