#!/bin/sh
# /init of capfleet's deploy ramdisk (see build.py; functions in deploy_lib.sh). Kernel arguments:
#   capfleet.mode=deploy|cleaning
#   deploy:   capfleet.image=<url> capfleet.checksum=<sha256> | capfleet.checksum_url=<url, first word>
#             capfleet.format=raw|qcow2 (raw)  capfleet.hints=name:/dev/sdb,serial:X,wwn:0x...,min_size_gib:N
#             ds=nocloud-net;s=<seed url>/ (user-data, meta-data, optional network-config)
#   cleaning: capfleet.cleaning=metadata
#   both:     capfleet.callback=<url>  gets a POST with ?mac=&uuid=&result=deployed|cleaned|failed[&reason=]
#             capfleet.bootif=<mac>  the NIC to bring up first (the one that network-booted)
#             capfleet.ca=<base64 DER>  the only CA for the boot server's https:// URLs (the callback's origin)
#             capfleet.key=<url>  the key the callback is signed with (served once; never printed)
#             capfleet.stay  stay up when done instead of powering off
# The seed holds secrets (kubeadm tokens in user-data): its contents and URL never reach the console.
/bin/busybox --install -s
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o size=80% tmpfs /tmp
exec </dev/console >/dev/console 2>&1
set -f
. /lib/capfleet/deploy_lib.sh
CMDLINE=$(cat /proc/cmdline)

now() { cut -d' ' -f1 /proc/uptime; }
say() { echo "capfleet-deploy: $* (uptime $(now))"; }
started=$(now)
mode=$(karg capfleet.mode) || mode=deploy
callback=$(karg capfleet.callback)
report=/tmp/report
key_file=/tmp/callback.key
: >"$report"
mac=
timings=
writing=

# Record how long step $1 took since uptime $2 (also left in $step_seconds).
took() {
  step_seconds=$(seconds "$2" "$(now)")
  timings="${timings}seconds_$1: $step_seconds
"
}

finish() {  # $1: result (deployed, cleaned, failed); $2: reason when failed; $3: one-line message
  say "$1${2:+ ($2)}: $3"
  took total "$started"
  { echo "$3"; echo "result: $1"; [ -z "$2" ] || echo "reason: $2"; printf '%s' "$timings"; cat /tmp/facts 2>/dev/null; } >"$report"
  sed 's/^/capfleet-deploy: | /' "$report"
  if [ -n "$callback" ] && [ -n "$mac" ]; then
    uuid=$(tr 'A-F' 'a-f' </sys/class/dmi/id/product_uuid 2>/dev/null)
    url=$(with_query "$callback" "mac=$mac&uuid=$uuid&result=$1${2:+&reason=$2}")
    [ ! -s "$key_file" ] || url="$url&sig=$(sign "$key_file" "$1" "$2" "$report")"
    i=0
    until wget -q -O /dev/null --post-file "$report" "$url"; do
      i=$((i + 1))
      [ "$i" -lt 5 ] || { say "the callback failed 5 times"; break; }
      sleep 2
    done
    [ "$i" -lt 5 ] && say "called back"
  fi
  sync
  if karg capfleet.stay >/dev/null; then
    say "staying up (capfleet.stay)"
    while :; do sleep 3600; done
  fi
  poweroff -f
}
# A failed deployment must not leave a disk that boots half an image: its start (partition table, boot
# code) is wiped once writing began.
fail() {
  if [ -n "$writing" ]; then
    wipefs -a -q "/dev/$writing" >/dev/null 2>&1
    dd if=/dev/zero of="/dev/$writing" bs=512 count="$ALIGN" conv=fsync 2>/dev/null
    fact wiped "/dev/$writing"
    writing=
  fi
  finish failed "$1" "$2"
}
fact() { echo "$1: $2" >>/tmp/facts; }

load_modules() {
  for m in $(cat /modules/order); do insmod "/modules/$m.ko" 2>/dev/null; done
}

# Disks are probed asynchronously (SCSI, ATA, NVMe): wait until the list has not changed for 2 s (30 s at most).
settle_disks() {
  last=x
  same=0
  i=0
  while [ "$i" -lt 60 ]; do
    seen=$(disks | tr '\n' ' ')
    if [ "$seen" = "$last" ] && [ -n "$seen" ]; then
      same=$((same + 1))
      [ "$same" -ge 4 ] && return 0
    else
      same=0
    fi
    last=$seen
    i=$((i + 1))
    sleep 0.5
  done
}

dhcp() {
  cat >/tmp/udhcpc.sh <<'SCRIPT'
#!/bin/sh
[ "$1" = bound ] || exit 0
ip addr add "$ip/${mask:-24}" dev "$interface"
[ -z "$router" ] || ip route add default via "${router%% *}" dev "$interface"
: >/etc/resolv.conf
for server in $dns; do echo "nameserver $server" >>/etc/resolv.conf; done
SCRIPT
  chmod +x /tmp/udhcpc.sh
  i=0
  while [ "$i" -lt 20 ]; do
    for nic in $(nics); do
      ip link set "$nic" up
      if udhcpc -q -n -t 5 -T 1 -i "$nic" -s /tmp/udhcpc.sh >/dev/null 2>&1; then
        mac=$(cat "/sys/class/net/$nic/address")
        say "network up on $nic ($mac)"
        return 0
      fi
    done
    i=$((i + 1))
  done
  return 1
}

fetch_checksum() {
  checksum=$(karg capfleet.checksum)
  url=$(karg capfleet.checksum_url) || return 0
  wget -q -O /tmp/checksum "$url" 2>/tmp/wget.err || fail DownloadFailed "the checksum could not be downloaded from $(redact "$url"): $(cat /tmp/wget.err)"
  checksum=$(awk '{ print $1; exit }' /tmp/checksum)
}

fetch_seed() {
  seed=$(seed_url) || fail SeedFailed "no NoCloud seed URL on the kernel command line (ds=nocloud-net;s=<url>/)"
  mkdir -p /tmp/seed
  for f in user-data meta-data network-config; do
    if wget -q -O "/tmp/seed/$f" "$seed$f" 2>/dev/null; then
      seed_files="$seed_files $f"
    else
      rm -f "/tmp/seed/$f"
      [ "$f" = network-config ] || fail SeedFailed "the seed's $f could not be downloaded"
    fi
  done
  say "seed fetched:$seed_files"
}

# Raw: stream straight onto the disk, then read the image's length back from the disk to check it.
# Debian's busybox dd does not count bytes, only 4 MiB records: the length is the response's
# Content-Length, checked against the records (counting with tee on the side made streaming 4x slower).
write_raw() {
  writing=$disk
  dd if=/dev/zero of="/dev/$disk" bs=512 seek=$(($(disk_sectors "$disk") - ALIGN)) count="$ALIGN" 2>/dev/null
  rm -f /tmp/wget.failed
  { wget -S -q -O - "$image" 2>/tmp/wget.err || : >/tmp/wget.failed; } |
    dd of="/dev/$disk" bs=4M iflag=fullblock conv=fsync 2>/tmp/dd.err
  dd_status=$?
  [ "$dd_status" = 0 ] || fail WriteFailed "writing /dev/$disk failed: $(tail -n 1 /tmp/dd.err)"
  [ ! -e /tmp/wget.failed ] || fail DownloadFailed "downloading $(redact "$image") failed: $(grep -v '^  ' /tmp/wget.err)"
  records=$(sed -n 's/^\([0-9]*+[0-9]*\) records out$/\1/p' /tmp/dd.err)
  announced=$(content_length </tmp/wget.err)
  bytes=$(stream_bytes "$records" "$announced") ||
    fail DownloadFailed "received $records records of 4 MiB from $(redact "$image"), which announced ${announced:-no length}"
  [ "$bytes" -gt 0 ] || fail DownloadFailed "$(redact "$image") is empty"
  took write "$t"
  fact bytes_written "$bytes"
  fact throughput_mb_s "$(throughput "$bytes" "$step_seconds")"
  t=$(now)
  sync
  blockdev --flushbufs "/dev/$disk"
  echo 3 >/proc/sys/vm/drop_caches
  actual=$(dd if="/dev/$disk" bs=4M count="$bytes" iflag=count_bytes 2>/dev/null | sha256sum | cut -d' ' -f1)
  took verify "$t"
}

# qcow2: download into RAM, check the file, convert onto the disk.
write_qcow2() {
  wget -q -O /tmp/image "$image" 2>/tmp/wget.err || fail DownloadFailed "downloading $(redact "$image") failed: $(cat /tmp/wget.err)"
  bytes=$(stat -c %s /tmp/image)
  took download "$t"
  fact bytes_downloaded "$bytes"
  fact download_mb_s "$(throughput "$bytes" "$step_seconds")"
  t=$(now)
  actual=$(sha256sum /tmp/image | cut -d' ' -f1)
  took verify "$t"
  [ "$actual" = "$checksum" ] || return 0
  t=$(now)
  writing=$disk
  qemu-img convert -f qcow2 -O raw -n /tmp/image "/dev/$disk" 2>/tmp/convert.err ||
    fail WriteFailed "qemu-img convert onto /dev/$disk failed: $(tail -n 1 /tmp/convert.err)"
  written=$(qemu-img info -f qcow2 /tmp/image | sed -n 's/^virtual size: .*(\([0-9]*\) bytes)$/\1/p')
  rm -f /tmp/image
  sync
  took write "$t"
  fact bytes_written "$written"
  fact throughput_mb_s "$(throughput "$written" "$step_seconds")"
}

# A 16 MiB FAT partition labelled CIDATA at the disk's end (after the root partition, so that can still grow
# up to it), holding the seed files; cloud-init's NoCloud finds it by its label.
write_seed() {
  dump=$(sfdisk --dump "/dev/$disk" 2>/tmp/sfdisk.err) || fail SeedFailed "the image on /dev/$disk has no partition table"
  case "$dump" in
    *"label: gpt"*)
      sfdisk -q --relocate gpt-bak-std "/dev/$disk" 2>>/tmp/sfdisk.err
      type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7
      ;;
    *) type=c ;;
  esac
  start=$(seed_start "$(disk_sectors "$disk")")
  [ "$(dump_end "$dump")" -le "$start" ] || fail SeedFailed "no room for the seed partition after the image on /dev/$disk"
  echo "start=$start, size=$SEED_SECTORS, type=$type" | sfdisk -q --append "/dev/$disk" >/dev/null 2>>/tmp/sfdisk.err ||
    fail SeedFailed "adding the seed partition to /dev/$disk failed: $(tail -n 1 /tmp/sfdisk.err)"
  blockdev --rereadpt "/dev/$disk" 2>/dev/null
  part=$(dump_partition_at "$(sfdisk --dump "/dev/$disk")" "$start")
  i=0
  while [ ! -b "$part" ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  [ -b "$part" ] || fail SeedFailed "the seed partition ${part:-?} did not appear"
  mkfs.fat -n CIDATA "$part" >/dev/null 2>/tmp/mkfs.err || fail SeedFailed "mkfs.fat $part failed: $(cat /tmp/mkfs.err)"
  mkdir -p /mnt/seed
  mount -t vfat -o codepage=437,iocharset=iso8859-1 "$part" /mnt/seed 2>/tmp/mount.err ||
    fail SeedFailed "mounting $part failed: $(cat /tmp/mount.err)"
  for f in $seed_files; do
    cp "/tmp/seed/$f" "/mnt/seed/$f" 2>/tmp/cp.err || fail SeedFailed "writing $f to $part failed: $(cat /tmp/cp.err)"
  done
  umount /mnt/seed || fail SeedFailed "unmounting $part failed"
  sync
  fact seed_partition "$part"
}

deploy() {
  image=$(karg capfleet.image) || fail InvalidArguments "no capfleet.image=<url> on the kernel command line"
  format=$(karg capfleet.format) || format=raw
  case "$format" in raw | qcow2) ;; *) fail InvalidArguments "capfleet.format must be raw or qcow2, not $format" ;; esac
  hints=$(karg capfleet.hints)
  t=$(now)
  settle_disks
  disk=$(choose_disk "$hints") || fail NoMatchingDisk "no disk matches the hints '${hints:-$DEFAULT_HINTS}'; disks seen: $(describe_disks | tr '\n' ';')"
  took disks "$t"
  say "deploying $(redact "$image") ($format) to /dev/$disk"
  fact disk "/dev/$disk"
  fetch_checksum
  checksum=$(echo "$checksum" | tr 'A-F' 'a-f')
  case "$checksum" in
    *[!0-9a-f]*) fail InvalidArguments "the checksum is not a SHA-256 hex digest" ;;
  esac
  [ "${#checksum}" = 64 ] || fail InvalidArguments "the checksum is not a SHA-256 hex digest (capfleet.checksum or capfleet.checksum_url)"
  t=$(now)
  fetch_seed
  took seed_download "$t"
  t=$(now)
  "write_$format"
  [ "$actual" = "$checksum" ] || fail BadChecksum "the image's sha256 is $actual, not $checksum"
  t=$(now)
  write_seed
  took seed "$t"
  writing=
  finish deployed "" "deployed $(redact "$image") ($format, sha256 $checksum) to /dev/$disk"
}

# Partition tables and file system signatures, at the start and the end of each disk (a GPT keeps a backup
# header in its last sectors), and of each partition; the disk then boots nothing. A cidata partition is
# zeroed whole: its user-data held secrets.
clean() {
  [ "$(karg capfleet.cleaning)" = metadata ] || fail InvalidArguments "capfleet.cleaning must be metadata"
  t=$(now)
  settle_disks
  cleaned=
  for d in $(disks); do
    for p in $(partitions "$d"); do
      if is_cidata "/dev/$p"; then
        dd if=/dev/zero of="/dev/$p" bs=1M conv=fsync 2>/dev/null
        fact cidata_zeroed "/dev/$p"
      fi
      wipefs -a -q "/dev/$p" 2>/dev/null
    done
    wipefs -a -q "/dev/$d" >/tmp/wipefs.err 2>&1 || fail CleaningFailed "wipefs /dev/$d failed: $(cat /tmp/wipefs.err)"
    sectors=$(disk_sectors "$d")
    dd if=/dev/zero of="/dev/$d" bs=512 count="$ALIGN" conv=fsync 2>/dev/null &&
      dd if=/dev/zero of="/dev/$d" bs=512 seek=$((sectors > ALIGN ? sectors - ALIGN : 0)) count="$ALIGN" conv=fsync 2>/dev/null ||
      fail CleaningFailed "zeroing the start and end of /dev/$d failed"
    blockdev --rereadpt "/dev/$d" 2>/dev/null
    cleaned="$cleaned /dev/$d"
  done
  took clean "$t"
  fact disks_cleaned "${cleaned# }"
  finish cleaned "" "wiped the partition tables and file system signatures of${cleaned:- no disk}"
}

say "started ($mode)"
t=$(now)
load_modules
took modules "$t"
t=$(now)
dhcp || { callback=; fail NetworkFailed "no NIC got a DHCP lease"; }
took network "$t"
trust_boot_ca "$callback" || { callback=; fail InvalidArguments "capfleet.ca is not a base64 DER certificate"; }
[ -z "$boot_origin" ] || say "the boot server's https:// URLs are checked against capfleet.ca"
# Fetched once for this attempt: if someone else got it first, the operator would refuse this report.
if keyurl=$(karg capfleet.key); then
  wget -q -O "$key_file" "$keyurl" 2>/dev/null && [ -s "$key_file" ] ||
    { callback=; fail SeedFailed "the callback key could not be fetched (was it fetched by someone else?)"; }
fi
case "$mode" in
  deploy) deploy ;;
  cleaning) clean ;;
  *) fail InvalidArguments "capfleet.mode must be deploy or cleaning, not $mode" ;;
esac
