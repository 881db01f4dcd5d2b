# SPDX-License-Identifier: Apache-2.0
# The loader (src/loader.c): batches, order, epochs, errors, cancel, shards,
# several queues and devices (POCL_DEVICES="pthread pthread": two devices),
# the never-a-wrong-byte rules, and a context released while a loader runs.
clpin_check_test(check_loader LABELS unit TIMEOUT 600 ENV "POCL_DEVICES=pthread pthread")
