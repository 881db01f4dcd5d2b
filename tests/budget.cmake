# SPDX-License-Identifier: Apache-2.0
# The process's one copy-thread budget: its default, lanes taking
# turns, and several contexts on POCL's two devices sharing it while others
# are released. Under ThreadSanitizer in stage 21-tsan like every suite.
clpin_check_test(check_budget LABELS unit TIMEOUT 900 ENV "POCL_DEVICES=pthread pthread")
