#!/bin/sh
# One-shot job of docker-compose.yaml, run once k3s is healthy: points a kubeconfig at the k3s service
# (k3s writes one for 127.0.0.1), installs capfleet's namespace and CRDs, and creates the
# Secrets and the Hypervisor object for the compose hypervisor and the NetBox connection Secret.
set -eu
sed 's#https://127.0.0.1:6443#https://k3s:6443#' /k3s-output/kubeconfig.yaml > /kube/kubeconfig
chmod 644 /kube/kubeconfig
export KUBECONFIG=/kube/kubeconfig
kubectl apply --server-side -k /src/deploy/base   # the capfleet-system namespace
for crds in /src/crds/*/; do kubectl apply --server-side -k "$crds"; done
kubectl -n capfleet-system create secret generic hypervisor-ssh \
  --from-file=ssh-privatekey=/keys/id_ed25519 --from-file=known_hosts=/keys/known_hosts \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl -n capfleet-system create secret generic netbox-connection \
  --from-literal=url=http://netbox:8080 --from-literal=token="$NETBOX_TOKEN" \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<YAML
apiVersion: libvirt.capfleet.dev/v1alpha1
kind: Hypervisor
metadata:
  name: compose-hypervisor
  labels:
    capfleet.dev/hypervisor-pool: default
spec:
  connection:
    host: hypervisor
    port: 22
    user: capfleet
  sshKeySecretRef: {name: hypervisor-ssh, namespace: capfleet-system}
  knownHostsSecretRef: {name: hypervisor-ssh, namespace: capfleet-system}
  storagePool: default
  baseImages: ["*.qcow2"]
  networks: [{network: default}, {userMode: true}]
YAML
