# Functions of capfleet's deploy ramdisk (sourced by deploy_init.sh, its /init, and by the unit tests,
# which run them with the host's busybox against a made-up sysfs). Nothing here writes to a disk.
# SYS (default /sys) is where the block devices and NICs are described; CMDLINE holds the kernel command line.
# The caller runs with globbing off (set -f): kernel arguments and URLs hold `?` and `*`.

SYS=${SYS:-/sys}
CA_DIR=${CA_DIR:-/tmp}  # where the boot server's CA is written
SEED_SECTORS=32768  # the NoCloud seed partition: 16 MiB
ALIGN=2048          # partitions start on 1 MiB boundaries
DEFAULT_HINTS=min_size_gib:4

# The value of kernel argument $1 ("yes" when given without a value); nothing when absent.
karg() {
  for a in $CMDLINE; do
    case "$a" in "$1="*) echo "${a#*=}"; return 0 ;; "$1") echo yes; return 0 ;; esac
  done
  return 1
}

# The NoCloud seed URL from `ds=nocloud-net;s=<url>` (or seedfrom=), as cloud-init reads it.
seed_url() {
  ds=$(karg ds) || return 1
  case "$ds" in
    nocloud*";s="*) echo "${ds#*;s=}" ;;
    nocloud*";seedfrom="*) echo "${ds#*;seedfrom=}" ;;
    *) return 1 ;;
  esac
}

trim() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//'; }

# The NICs to try for DHCP, lo left out: the one whose MAC is capfleet.bootif (the one that network-booted,
# whose lease the boot server bound this attempt to) first, then the others by name.
nics() {
  bootif=$(karg capfleet.bootif | tr 'A-F' 'a-f')
  for nic in $(ls "$SYS/class/net" 2>/dev/null); do
    [ "$nic" = lo ] && continue
    if [ -n "$bootif" ] && [ "$(cat "$SYS/class/net/$nic/address" 2>/dev/null)" = "$bootif" ]; then
      echo "0 $nic"
    else
      echo "1 $nic"
    fi
  done | sort | cut -d' ' -f2
}

# capfleet.ca (base64 DER): the only CA trusted for the boot server's https:// URLs, whose origin is that
# of URL $1. Sets boot_origin (empty without a CA, or when $1 is not https://); 1 when the CA does not
# decode. Any other https:// URL is checked against Debian's CAs as before.
trust_boot_ca() {
  boot_origin=
  ca=$(karg capfleet.ca) || return 0
  echo "$ca" | base64 -d >"$CA_DIR/boot-ca.der" 2>/dev/null || return 1
  openssl x509 -inform DER -in "$CA_DIR/boot-ca.der" -out "$CA_DIR/boot-ca.pem" 2>/dev/null || return 1
  case "$1" in https://*) boot_origin=$(echo "$1" | sed -E 's|^(https://[^/?]+).*|\1|') ;; esac
}

# busybox wget; for the boot server's https:// URLs (see trust_boot_ca), against its CA alone.
wget() {
  if [ -n "$boot_origin" ]; then
    for a in "$@"; do
      case "$a" in "$boot_origin"/* | "$boot_origin")
        SSL_CERT_FILE=$CA_DIR/boot-ca.pem busybox wget "$@"
        return
        ;;
      esac
    done
  fi
  busybox wget "$@"
}

# Whole disks that may be deployed to or cleaned, sorted by name: not removable, not read-only, not empty,
# not a loop, RAM, optical, floppy, device-mapper, RAID or network block device.
disks() {
  for name in $(ls "$SYS/block" 2>/dev/null); do
    case "$name" in loop* | ram* | sr* | fd* | zram* | dm-* | md* | nbd*) continue ;; esac
    d=$SYS/block/$name
    [ "$(cat "$d/removable" 2>/dev/null)" = 1 ] && continue
    [ "$(cat "$d/ro" 2>/dev/null)" = 1 ] && continue
    [ "$(cat "$d/size" 2>/dev/null || echo 0)" -gt 0 ] || continue
    echo "$name"
  done | sort
}

disk_sectors() { cat "$SYS/block/$1/size"; }

# The serial number: virtio-blk and NVMe have a `serial` file; SCSI and ATA (through libata) report it
# in VPD page 0x80 (a 4-byte header, then the serial). VPD files are binary attributes: sysfs says they
# are empty (size 0), so files are read, not tested with -s.
disk_serial() {
  d=$SYS/block/$1
  for f in "$d/serial" "$d/device/serial"; do
    value=$(trim 2>/dev/null <"$f") && [ -n "$value" ] && { echo "$value"; return 0; }
  done
  [ -r "$d/device/vpd_pg80" ] && echo "$(tail -c +5 "$d/device/vpd_pg80" 2>/dev/null | tr -d '\000' | trim)"
}

# A WWN as Metal3 and lsblk write it (0x5000c500...) and as sysfs has it (naa.5000c500..., eui....):
# lower case, without the prefix.
norm_wwn() { echo "$1" | tr 'A-Z' 'a-z' | trim | sed -E 's/^(naa\.|eui\.|0x)//'; }

disk_wwn() {
  d=$SYS/block/$1
  for f in "$d/wwid" "$d/device/wwid"; do
    value=$(cat "$f" 2>/dev/null) && [ -n "$value" ] && { norm_wwn "$value"; return 0; }
  done
}

# Whether disk $1 matches every hint of $2 (key:value,...; keys name, serial, wwn, min_size_gib).
# An unknown key matches no disk: better no deployment than one to the wrong disk.
matches() (
  disk=$1
  IFS=,
  for hint in $2; do
    key=${hint%%:*}
    value=${hint#*:}
    case "$key" in
      name) [ "${value#/dev/}" = "$disk" ] || return 1 ;;
      serial) [ "$(disk_serial "$disk")" = "$value" ] || return 1 ;;
      wwn) [ -n "$value" ] && [ "$(disk_wwn "$disk")" = "$(norm_wwn "$value")" ] || return 1 ;;
      min_size_gib)
        case "$value" in '' | *[!0-9]*) return 1 ;; esac
        [ "$(disk_sectors "$disk")" -ge $((value * 2097152)) ] || return 1
        ;;
      *) return 1 ;;
    esac
  done
  return 0
)

# The first disk (by name) matching hints $1, or without hints the first of at least 4 GiB.
choose_disk() {
  for d in $(disks); do
    if matches "$d" "${1:-$DEFAULT_HINTS}"; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# One line per disk seen, for the NoMatchingDisk report: name, size, serial, WWN.
describe_disks() {
  for d in $(disks); do
    echo "$d size=$(($(disk_sectors "$d") / 2097152))GiB($(disk_sectors "$d") sectors)" \
      "serial=$(disk_serial "$d") wwn=$(disk_wwn "$d")"
  done
}

# Partitions of disk $1 as sysfs lists them (vda1, nvme0n1p2, ...).
partitions() {
  for p in $(ls "$SYS/block/$1" 2>/dev/null); do
    [ -f "$SYS/block/$1/$p/partition" ] && echo "$p"
  done
}

# Whether device (or file) $1 holds a FAT file system labelled cidata, in any case: the label is at byte 43
# of a FAT12/16 boot sector, at byte 71 of a FAT32 one.
is_cidata() {
  for offset in 43 71; do
    label=$(dd if="$1" bs=1 skip="$offset" count=11 2>/dev/null | tr 'a-z' 'A-Z' | trim)
    [ "$label" = CIDATA ] && return 0
  done
  return 1
}

# Where the seed partition starts on a disk of $1 sectors: aligned, ending at least 1 MiB before the disk's
# end (room for a GPT's backup header).
seed_start() { echo $(((($1 - ALIGN - SEED_SECTORS) / ALIGN) * ALIGN)); }

# The partition (as `sfdisk --dump` names it, e.g. /dev/vda3) that starts at sector $2 of dump $1.
dump_partition_at() {
  echo "$1" | sed -n -E "s|^(/dev/[^ ]+) *: *start= *$2,.*|\1|p"
}

# The end (first free sector) of the last partition in dump $1; 0 without partitions.
dump_end() {
  echo "$1" | sed -n -E 's|^/dev/[^ ]+ *: *start= *([0-9]+), *size= *([0-9]+),.*|\1 \2|p' |
    awk 'BEGIN { end = 0 } { if ($1 + $2 > end) end = $1 + $2 } END { print end }'
}

# The last Content-Length among the response headers `wget -S` printed on stdin (after redirects).
content_length() {
  sed -n -E 's/^  [Cc][Oo][Nn][Tt][Ee][Nn][Tt]-[Ll][Ee][Nn][Gg][Tt][Hh]: *([0-9]+).*/\1/p' | tail -n 1
}

# The bytes a stream of dd records $1 ("full+partial" 4 MiB blocks) held, given Content-Length $2 (may be
# empty): $2 when the records agree with it, a whole number of blocks without it; fails otherwise.
stream_bytes() {
  full=${1%+*}
  partial=${1#*+}
  case "$full$partial" in '' | *[!0-9]*) return 1 ;; esac
  if [ -z "$2" ]; then
    [ "$partial" = 0 ] || return 1
    echo $((full * 4194304))
    return 0
  fi
  [ $(($2 / 4194304)) = "$full" ] && [ $(($2 % 4194304 > 0)) = "$partial" ] || return 1
  echo "$2"
}

# Seconds (two decimals) from uptime $1 to uptime $2.
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# MB/s (10^6 bytes) for $1 bytes in $2 seconds.
throughput() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.1f", n / s / 1e6; else print "n/a" }'; }

# URL $1 without its query or credentials (image URLs may carry tokens; BMCs log the console).
redact() { echo "${1%%\?*}" | sed -E 's|^([a-z]+://)[^/@]*@|\1|'; }

# Callback URL $1 with the report's query parameters ($2: "k=v&k=v") appended.
with_query() {
  case "$1" in *"?"*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac
}

# The callback's signature, as the operator checks it (reports.signature): HMAC-SHA256, keyed with the key
# in file $1, of the result $2, the reason $3 and the SHA-256 of the report file $4, one per line.
sign() {
  digest=$(sha256sum "$4" | cut -d' ' -f1)
  printf '%s\n%s\n%s' "$2" "$3" "$digest" | openssl dgst -sha256 -hmac "$(cat "$1")" -r | cut -d' ' -f1
}
