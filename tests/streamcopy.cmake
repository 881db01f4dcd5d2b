# SPDX-License-Identifier: Apache-2.0
# The streaming row copy of rect and image reads (src/streamcopy.c) and the
# row scatter and gather that use it, without OpenCL.
clpin_check_test(check_streamcopy LABELS unit)
