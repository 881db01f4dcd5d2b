# The pool core: pool, registry, options, errors.
clpin_check_test(check_pool LABELS unit)
clpin_check_test(check_registry LABELS unit)
clpin_check_test(check_errors LABELS unit)
clpin_check_test(check_options LABELS unit
  ENV "CLPIN_MAX_CACHED=512M;CLPIN_CHUNK=12 apples;CLPIN_THREADS=3;CLPIN_PINNED_H2D=maybe")
