#!/usr/bin/env bash
# Writes the sysfs tree libibverbs and libfabric's efa provider read for one EFA device
# (reference/uverbs-efa-abi.md 1.3), to be named by SYSFS_PATH:
#   make_sysfs.sh DIR [IBDEV] [VENDOR_PART_ID]
# The device node is /dev/infiniband/uverbs0, served by the preload library with /dev/null, so
# `dev` holds /dev/null's major:minor. The GID and node GUID files are placeholders: the library
# serves the live values of each process's emulated device when they are opened.
set -euo pipefail
dir=${1:?usage: make_sysfs.sh DIR [IBDEV] [VENDOR_PART_ID]}
ibdev=${2:-efa_0}
part=${3:-EFA1}
bdf=0000:00:06.0

rm -rf "$dir/class" "$dir/devices" "$dir/bus"
verbs=$dir/class/infiniband_verbs
pci=$dir/devices/pci0000:00/$bdf
mkdir -p "$verbs/uverbs0" "$pci/infiniband/$ibdev/ports/1/gids" "$pci/infiniband/$ibdev/ports/1/pkeys" \
  "$dir/class/infiniband" "$dir/bus/pci/drivers/efa"

echo 6 >"$verbs/abi_version"
echo "$ibdev" >"$verbs/uverbs0/ibdev"
echo 1:3 >"$verbs/uverbs0/dev"
echo 1 >"$verbs/uverbs0/abi_version"

dev=$pci/infiniband/$ibdev
ln -s "../../devices/pci0000:00/$bdf/infiniband/$ibdev" "$dir/class/infiniband/$ibdev"
ln -s "../.." "$dev/device"
ln -s "../../../bus/pci/drivers/efa" "$pci/driver"
echo "7: unspecified" >"$dev/node_type"
echo "0000:0000:0000:0001" >"$dev/node_guid"
echo "fe80:0000:0000:0000:0000:0000:0000:0000" >"$dev/ports/1/gids/0"
echo "0xffff" >"$dev/ports/1/pkeys/0"
echo "4: ACTIVE" >"$dev/ports/1/state"
echo "5: LinkUp" >"$dev/ports/1/phys_state"
echo "Unknown" >"$dev/ports/1/link_layer"
echo "pci:v00001D0Fd0000${part}sv00000000sd00000000bc02sc00i00" >"$pci/modalias"
echo 0x1d0f >"$pci/vendor"
echo "0x$(echo "$part" | tr 'A-F' 'a-f')" >"$pci/device"
