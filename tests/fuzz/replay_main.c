/* SPDX-License-Identifier: Apache-2.0 */
/* Runs the fuzz harness over files without libFuzzer: every file named on
 * the command line, and every file in each directory named. CTest runs it
 * over tests/fuzz/regressions and tests/fuzz/corpus with any compiler. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clpin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
    return 1;
  }
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        fclose(f);
        free(buf);
        return 1;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    if (!got)
      break;
    n += got;
  }
  fclose(f);
  printf("fuzz_replay: %s (%zu bytes)\n", path, n);
  fflush(stdout);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  int failures = 0, files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      failures += run_file(argv[i]);
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d)
      return 1;
    char **names = NULL;
    size_t nn = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md"))
        continue;
      char **grown = realloc(names, (nn + 1) * sizeof *names);
      if (!grown)
        return 1;
      names = grown;
      size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
      names[nn] = malloc(len);
      if (!names[nn])
        return 1;
      snprintf(names[nn], len, "%s/%s", argv[i], e->d_name);
      nn++;
    }
    closedir(d);
    if (nn)
      qsort(names, nn, sizeof *names, cmp);
    for (size_t k = 0; k < nn; k++) {
      failures += run_file(names[k]);
      files++;
      free(names[k]);
    }
    free(names);
  }
  clpin_shutdown();
  printf("fuzz_replay: %d inputs replayed\n", files);
  if (files == 0) {
    fprintf(stderr, "fuzz_replay: no inputs\n");
    return 1;
  }
  return failures ? 1 : 0;
}
