# SPDX-License-Identifier: Apache-2.0
# Registered memory (clpin_host_register / clpin_host_unregister): transfers,
# bad input, unregister waiting for transfers, pool release, threads.
clpin_check_test(check_register LABELS unit TIMEOUT 300)
