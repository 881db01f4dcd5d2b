# SPDX-License-Identifier: Apache-2.0
# Tensors and the host mirror (src/tensor.c). CI stage 30-oclgrind runs the
# same suite on Oclgrind (a device without host-unified memory).
clpin_check_test(check_tensor LABELS unit TIMEOUT 120)
