#!/bin/sh
# /init of capfleet's test image (see image.py): read the NoCloud seed, report it, then power off or idle.
# Directives, on the kernel command line or as a line in user-data:
#   capfleet.callback=<url> / "# capfleet-callback: <url>"  POST the report there (DHCP on each NIC first;
#                                                         the user-data line may be indented, as in write_files)
#   capfleet.poweroff       / "# capfleet-poweroff"          power off when done (default: keep running)
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
say() { echo "capfleet-testimage: $* (uptime $(cut -d' ' -f1 /proc/uptime))"; }
say "init started"
for m in $(cat /modules/order); do insmod "/modules/$m.ko" 2>/dev/null; done
say "modules loaded"

seed=
i=0
while [ -z "$seed" ] && [ "$i" -lt 100 ]; do
  # Every block device that mounts and holds a meta-data file (busybox's findfs misses the ISO when a
  # FAT disk comes first).
  for dev in $(awk 'NR > 2 { print $4 }' /proc/partitions); do
    mount -o ro "/dev/$dev" /mnt 2>/dev/null || continue
    if [ -f /mnt/meta-data ]; then seed=/dev/$dev; break; fi
    umount /mnt
  done
  [ -n "$seed" ] || { i=$((i + 1)); sleep 0.1; }
done

report=/tmp/report
: >"$report"
if [ -n "$seed" ]; then
  say "cidata found on $seed"
  for f in user-data meta-data network-config; do
    [ -f "/mnt/$f" ] || continue
    {
      echo "=== capfleet-testimage begin $f ==="
      cat "/mnt/$f"
      echo
      echo "=== capfleet-testimage end $f ==="
      echo "=== capfleet-testimage begin $f base64 ==="
      base64 "/mnt/$f"
      echo "=== capfleet-testimage end $f base64 ==="
    } >>"$report"
  done
  cat "$report"
else
  say "no cidata volume found; block devices:"
  cat /proc/partitions
fi

directive() {  # $1: kernel parameter name; $2: user-data comment key; prints the value ("yes" if none)
  for arg in $(cat /proc/cmdline); do
    case "$arg" in "$1="*) echo "${arg#*=}"; return ;; "$1") echo yes; return ;; esac
  done
  [ -f /mnt/user-data ] || return
  line=$(grep -m1 "^[[:space:]]*# *$2\\b" /mnt/user-data) || return
  value=$(echo "${line#*$2}" | sed 's/^:* *//; s/ *$//')
  echo "${value:-yes}"
}

callback=$(directive capfleet.callback capfleet-callback)
if [ -n "$callback" ]; then
  cat >/tmp/udhcpc.sh <<'SCRIPT'
#!/bin/sh
[ "$1" = bound ] || exit 0
ip addr add "$ip/${mask:-24}" dev "$interface"
[ -z "$router" ] || ip route add default via "${router%% *}" dev "$interface"
SCRIPT
  chmod +x /tmp/udhcpc.sh
  for nic in /sys/class/net/*; do
    nic=${nic##*/}
    [ "$nic" = lo ] && continue
    ip link set "$nic" up
    udhcpc -q -n -t 5 -T 1 -i "$nic" -s /tmp/udhcpc.sh >/dev/null 2>&1 && break
  done
  if wget -q -O /dev/null --post-file "$report" "$callback"; then say "called back $callback"; else say "callback to $callback failed"; fi
fi

say "done"
if [ -n "$(directive capfleet.poweroff capfleet-poweroff)" ]; then
  sync
  poweroff -f
fi
while :; do sleep 3600; done
