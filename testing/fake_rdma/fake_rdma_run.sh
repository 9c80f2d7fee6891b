#!/usr/bin/env bash
# Runs a test binary ($3...) under the preload library with the fake sysfs tree and shm fabric.
source "$(dirname "$0")/fake_rdma_env.sh" "$1" "$2"
shift 2
with_shim "$@"
