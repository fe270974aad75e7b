#!/usr/bin/env bash
# Install cordon on Debian 12 as root: build dependencies from Debian, a
# release build (build-release/), `ninja install` into /usr/local (cordon on PATH, cordond in
# /usr/local/sbin with a systemd unit and /usr/local/etc/cordon/cordond.conf,
# cordon-init in /usr/local/libexec/cordon, the Python SDK), and the host
# image skeleton in /var/lib/cordon.
set -euo pipefail
cd "$(dirname "$0")"

deps=(gcc libc6-dev meson ninja-build pkg-config libseccomp-dev libjansson-dev libevent-dev libcurl4-openssl-dev musl-tools python3 python3-dev
      libssl-dev libmnl-dev libnftables-dev nftables iproute2 libpcre2-dev libarchive-dev zlib1g-dev liblzma-dev busybox-static
      e2fsprogs   # mkfs.ext4: the container tier's writable layers (docs/disk.md)
      xfsprogs    # mkfs.xfs: the checkpoint store (docs/trajectories.md)
      btrfs-progs) # mkfs.btrfs: the writable layer pool, writable_pool = btrfs (docs/disk.md)
# The VM tiers: QEMU (no GUI; its firmware for the vm tier's q35 comes with it), erofs-utils for images
# other than the host's (their root disks), debootstrap for `cordon image build`.
vmdeps=(qemu-system-x86 erofs-utils debootstrap)
if ! dpkg -s "${deps[@]}" >/dev/null 2>&1; then
    echo "install.sh: installing build dependencies: ${deps[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${deps[@]}" >/dev/null
fi
if ! dpkg -s "${vmdeps[@]}" >/dev/null 2>&1; then
    echo "install.sh: installing ${vmdeps[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${vmdeps[@]}" >/dev/null
fi

# Its own build directory: tests/run-all builds build/ (debugoptimized) and build-asan/, so neither
# tests the other's configuration by accident.
if [ ! -f build-release/build.ninja ]; then
    meson setup build-release --prefix=/usr/local --buildtype=release -Dwerror=true
fi
ninja -C build-release
ninja -C build-release install >/dev/null
echo "install.sh: installed $(command -v cordon) ($(cordon --version))"
cordon image rebuild host
# The guest kernel (Debian's linux-image package, unpacked into /var/lib/cordon/vm) and initramfs.
cordon vm prepare
