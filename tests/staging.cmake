# Staging transfers (clpin_write / clpin_read) and the copy workers.
clpin_check_test(check_staging LABELS unit TIMEOUT 300)
