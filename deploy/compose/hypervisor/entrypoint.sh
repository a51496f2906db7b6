#!/bin/sh
# Starts virtlogd, libvirtd (with a "default" storage pool) and sshd. The SSH client key for libvirt-vm
# and a known_hosts line for this host are written to /keys once; the bootstrap job turns them into Secrets.
set -eu
mkdir -p /keys
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
[ -f /keys/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C capfleet-libvirt-vm -f /keys/id_ed25519
install -d -m 700 -o capfleet -g capfleet /home/capfleet/.ssh
install -m 600 -o capfleet -g capfleet /keys/id_ed25519.pub /home/capfleet/.ssh/authorized_keys
echo "hypervisor $(cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub)" > /keys/known_hosts
chmod 644 /keys/id_ed25519 /keys/known_hosts  # read by the bootstrap job, as another user

virtlogd -d
libvirtd -d
until virsh -c qemu:///system version >/dev/null 2>&1; do sleep 1; done
if ! virsh -c qemu:///system pool-info default >/dev/null 2>&1; then
  virsh -c qemu:///system pool-define-as default dir --target /var/lib/libvirt/images
  virsh -c qemu:///system pool-autostart default
fi
virsh -c qemu:///system pool-start default >/dev/null 2>&1 || true
exec /usr/sbin/sshd -D -e
