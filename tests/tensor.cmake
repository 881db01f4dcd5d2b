# Tensors and the host mirror (src/tensor.c).
clpin_check_test(check_tensor LABELS unit TIMEOUT 120)
