# Rect and image transfers (src/rect.c), byte-exact against the driver's own
# calls. CI stage 30-oclgrind runs it on Oclgrind too.
clpin_check_test(check_rect LABELS unit TIMEOUT 600)
