#!/bin/sh
# /init of capfleet's network-booted test image (see image.py, baremetal/netboot.py): what an installer
# does, in miniature. DHCP on the first NIC that answers, fetch the NoCloud seed over HTTP, report it on the
# serial console (same markers as guest_init.sh), POST it to a callback URL, then power off or idle.
# Kernel arguments:
#   ds=nocloud-net;s=<url>/  (or ds=nocloud;s=..., or capfleet.seed=<url>/)  where the seed files are
#   capfleet.callback=<url>  POST the report there, with ?mac=<boot NIC's MAC>&uuid=<SMBIOS UUID> added
#   capfleet.poweroff        power off when done (default: keep running)
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
say() { echo "capfleet-testimage: $* (uptime $(cut -d' ' -f1 /proc/uptime))"; }
say "init started (network boot)"
for m in $(cat /modules/order); do insmod "/modules/$m.ko" 2>/dev/null; done
say "modules loaded"

arg() {  # $1: kernel parameter name; prints its value ("yes" if it has none)
  for a in $(cat /proc/cmdline); do
    case "$a" in "$1="*) echo "${a#*=}"; return ;; "$1") echo yes; return ;; esac
  done
}
seed=$(arg capfleet.seed)
if [ -z "$seed" ]; then
  ds=$(arg ds)
  case "$ds" in nocloud*";s="*) seed=${ds#*;s=} ;; nocloud*";seedfrom="*) seed=${ds#*;seedfrom=} ;; esac
fi
callback=$(arg capfleet.callback)

cat >/tmp/udhcpc.sh <<'SCRIPT'
#!/bin/sh
[ "$1" = bound ] || exit 0
ip addr add "$ip/${mask:-24}" dev "$interface"
[ -z "$router" ] || ip route add default via "${router%% *}" dev "$interface"
SCRIPT
chmod +x /tmp/udhcpc.sh
mac=
i=0
while [ -z "$mac" ] && [ "$i" -lt 20 ]; do
  for nic in /sys/class/net/*; do
    nic=${nic##*/}
    [ "$nic" = lo ] && continue
    ip link set "$nic" up
    if udhcpc -q -n -t 5 -T 1 -i "$nic" -s /tmp/udhcpc.sh >/dev/null 2>&1; then
      mac=$(cat "/sys/class/net/$nic/address"); break
    fi
  done
  i=$((i + 1))
done
uuid=$(cat /sys/class/dmi/id/product_uuid 2>/dev/null | tr 'A-F' 'a-f')
say "network up: mac=$mac uuid=$uuid"

report=/tmp/report
: >"$report"
mkdir -p /tmp/seed
if [ -n "$seed" ]; then
  for f in user-data meta-data network-config; do
    wget -q -O "/tmp/seed/$f" "$seed$f" 2>/dev/null || { rm -f "/tmp/seed/$f"; say "no $f"; continue; }
    {
      echo "=== capfleet-testimage begin $f ==="
      cat "/tmp/seed/$f"
      echo
      echo "=== capfleet-testimage end $f ==="
      echo "=== capfleet-testimage begin $f base64 ==="
      base64 "/tmp/seed/$f"
      echo "=== capfleet-testimage end $f base64 ==="
    } >>"$report"
  done
  say "seed fetched from $seed"
  cat "$report"
else
  say "no seed URL on the kernel command line"
fi

if [ -n "$callback" ]; then
  case "$callback" in *"?"*) sep='&' ;; *) sep='?' ;; esac
  url="${callback}${sep}mac=${mac}&uuid=${uuid}"
  if wget -q -O /dev/null --post-file "$report" "$url"; then say "called back $url"; else say "callback to $url failed"; fi
fi

say "done"
if [ -n "$(arg capfleet.poweroff)" ]; then
  sync
  poweroff -f
fi
while :; do sleep 3600; done
