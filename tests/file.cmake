# SPDX-License-Identifier: Apache-2.0
# Files to device buffers (src/files.c, src/fileio.c): byte-exact at
# unaligned offsets, page cache and O_DIRECT, in place and staged, blocking
# and not, and every refusal with the buffer untouched.
clpin_check_test(check_file LABELS unit TIMEOUT 600)
target_link_libraries(check_file PRIVATE Threads::Threads)
