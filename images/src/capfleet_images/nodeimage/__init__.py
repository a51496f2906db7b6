"""capfleet's node image: a Debian disk that boots into a Kubernetes node with no registry in reach.

Built here from Debian packages (mmdebstrap) and Go modules, cached under $CAPFLEET_CACHE/node-image/:
kubelet, kubeadm and kubectl from `k8s.io/kubernetes`, and every container image `kubeadm init/join`
runs (control-plane components, kube-proxy, etcd, CoreDNS, pause, kube-vip) built here too and preloaded
into containerd, so a node never pulls. `capfleet-images node` (or `make node-image`) builds it; the
outputs are a qcow2 base volume for VMs and a raw image for bare metal.
"""
