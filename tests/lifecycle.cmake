# The lifecycle of a pool (issue 11): release racing every call and every
# transfer path, release behind user events, the cap under racing releases,
# deferred-path errors, and the context-churn RSS soak. Labelled stress too:
# the sanitizer stages run it with fewer rounds (LIFECYCLE_ROUNDS).
clpin_check_test(check_lifecycle LABELS unit stress TIMEOUT 900)
