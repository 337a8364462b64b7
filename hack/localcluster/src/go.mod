module github.com/pgpilot/pgpilot-operator/hack/localcluster/src

go 1.26.0
