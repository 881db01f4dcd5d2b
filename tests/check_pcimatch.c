/* SPDX-License-Identifier: Apache-2.0 */
/* multigpu-bench's matching of OpenCL devices to CUDA devices by PCI address
 * (bench/pcimatch.c), on made-up device lists: the baseline must run on the
 * same GPUs as the OpenCL figures it is compared with (matched by
 * domain and bus only, four GPUs on bus 0 all mapped to one CUDA device). */
#include "pcimatch.h"
#include "testutil.h"

#include <string.h>

static pci_addr A(const char *s) {
  pci_addr a;
  ck_assert_msg(pci_parse(s, &a), "%s", s);
  return a;
}

START_TEST(parse_and_format) {
  pci_addr a;
  char buf[32];
  ck_assert(pci_parse("0000:00:06.0", &a));
  ck_assert_int_eq(a.domain, 0);
  ck_assert_int_eq(a.bus, 0);
  ck_assert_int_eq(a.device, 6);
  ck_assert_int_eq(a.function, 0);
  ck_assert_str_eq(pci_format(&a, buf, sizeof buf), "0000:00:06.0");
  /* CUDA writes an 8-digit domain; upper-case hex too. */
  ck_assert(pci_parse("00000001:C1:1F.7", &a));
  ck_assert_str_eq(pci_format(&a, buf, sizeof buf), "0001:c1:1f.7");
  const char *bad[] = {"",
                       "0000:00:06",
                       "0000:00:20.0",
                       "0000:00:06.8",
                       "000:00:06.0",
                       "0000:0:06.0",
                       "0000:00:06.0x",
                       "zzzz:00:06.0",
                       "0000-00-06.0"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_msg(!pci_parse(bad[i], &a), "%s", bad[i]);
    ck_assert(!pci_known(&a));
  }
  ck_assert(!pci_parse(NULL, &a));
  a = PCI_UNKNOWN;
  ck_assert_str_eq(pci_format(&a, buf, sizeof buf), "unknown");
}
END_TEST

START_TEST(nvidia_slot_is_device_and_function) {
  char buf[32];
  /* CL_DEVICE_PCI_SLOT_ID_NV is device << 3 | function. */
  pci_addr a = pci_from_nv(0, 0x00, 6u << 3);
  ck_assert_str_eq(pci_format(&a, buf, sizeof buf), "0000:00:06.0");
  a = pci_from_nv(2, 0x41, (0x1cu << 3) | 1);
  ck_assert_str_eq(pci_format(&a, buf, sizeof buf), "0002:41:1c.1");
  ck_assert(pci_equal(&a, &(pci_addr){2, 0x41, 0x1c, 1}));
}
END_TEST

/* Four GPUs on bus 0 that differ only by device number (the 4x H100 and
 * 2x H200 machines): each OpenCL device must find its own CUDA device. */
START_TEST(one_bus_by_device_number) {
  pci_addr cl[4] = {A("0000:00:06.0"), A("0000:00:07.0"), A("0000:00:08.0"), A("0000:00:09.0")};
  pci_addr cu[4] = {A("0000:00:06.0"), A("0000:00:07.0"), A("0000:00:08.0"), A("0000:00:09.0")};
  int map[4];
  ck_assert_int_eq(pci_match(cl, 4, cu, 4, map, NULL, NULL), PCI_MATCH_OK);
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(map[i], i);
  /* Function numbers count too: two functions of one device are two GPUs. */
  pci_addr fcl[2] = {A("0000:00:06.1"), A("0000:00:06.0")};
  pci_addr fcu[2] = {A("0000:00:06.0"), A("0000:00:06.1")};
  ck_assert_int_eq(pci_match(fcl, 2, fcu, 2, map, NULL, NULL), PCI_MATCH_OK);
  ck_assert_int_eq(map[0], 1);
  ck_assert_int_eq(map[1], 0);
}
END_TEST

START_TEST(orders_differ) {
  /* OpenCL in one order, CUDA (CUDA_DEVICE_ORDER=FASTEST_FIRST) in
   * another; domains and buses differ too. */
  pci_addr cl[5] = {A("0000:c1:00.0"), A("0000:00:07.0"), A("0001:00:07.0"), A("0000:41:00.0"),
                    A("0000:00:06.0")};
  pci_addr cu[5] = {A("0000:00:06.0"), A("0000:00:07.0"), A("0000:41:00.0"), A("0000:c1:00.0"),
                    A("0001:00:07.0")};
  int map[5];
  ck_assert_int_eq(pci_match(cl, 5, cu, 5, map, NULL, NULL), PCI_MATCH_OK);
  int want[5] = {3, 1, 4, 2, 0};
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(map[i], want[i]);
}
END_TEST

START_TEST(unmatched_devices) {
  /* An OpenCL device CUDA does not see (CUDA_VISIBLE_DEVICES), one whose
   * address is unknown (no PCI query answered), and a CUDA list shorter
   * than the OpenCL one. */
  pci_addr cl[4] = {A("0000:00:06.0"), A("0000:00:08.0"), PCI_UNKNOWN, A("0000:00:07.0")};
  pci_addr cu[2] = {A("0000:00:07.0"), A("0000:00:06.0")};
  int map[4];
  ck_assert_int_eq(pci_match(cl, 4, cu, 2, map, NULL, NULL), PCI_MATCH_OK);
  ck_assert_int_eq(map[0], 1);
  ck_assert_int_eq(map[1], -1);
  ck_assert_int_eq(map[2], -1);
  ck_assert_int_eq(map[3], 0);
  /* Unknown never equals unknown. */
  pci_addr u1[1] = {PCI_UNKNOWN}, u2[1] = {PCI_UNKNOWN};
  ck_assert_int_eq(pci_match(u1, 1, u2, 1, map, NULL, NULL), PCI_MATCH_OK);
  ck_assert_int_eq(map[0], -1);
  /* No CUDA device at all. */
  ck_assert_int_eq(pci_match(cl, 4, cu, 0, map, NULL, NULL), PCI_MATCH_OK);
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(map[i], -1);
}
END_TEST

START_TEST(duplicates_refused) {
  /* What bus-only matching amounted to: addresses that collide. Either
   * list holding one address twice makes every match ambiguous. */
  pci_addr cl[3] = {A("0000:00:06.0"), A("0000:00:07.0"), A("0000:00:06.0")};
  pci_addr cu[3] = {A("0000:00:06.0"), A("0000:00:07.0"), A("0000:00:08.0")};
  int map[3] = {7, 7, 7}, dup = -1;
  bool in_b = true;
  ck_assert_int_eq(pci_match(cl, 3, cu, 3, map, &dup, &in_b), PCI_MATCH_DUPLICATE);
  ck_assert_int_eq(dup, 2);
  ck_assert(!in_b);
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(map[i], -1);
  pci_addr cu2[3] = {A("0000:00:07.0"), A("0000:00:07.0"), A("0000:00:06.0")};
  pci_addr cl2[2] = {A("0000:00:06.0"), A("0000:00:07.0")};
  ck_assert_int_eq(pci_match(cl2, 2, cu2, 3, map, &dup, &in_b), PCI_MATCH_DUPLICATE);
  ck_assert_int_eq(dup, 1);
  ck_assert(in_b);
  ck_assert_int_eq(map[0], -1);
  ck_assert_int_eq(map[1], -1);
  /* Unknown addresses are not duplicates of each other. */
  pci_addr cl3[3] = {PCI_UNKNOWN, A("0000:00:06.0"), PCI_UNKNOWN};
  ck_assert_int_eq(pci_match(cl3, 3, cu, 3, map, NULL, NULL), PCI_MATCH_OK);
  ck_assert_int_eq(map[1], 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pcimatch");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, parse_and_format);
  tcase_add_test(tc, nvidia_slot_is_device_and_function);
  tcase_add_test(tc, one_bus_by_device_number);
  tcase_add_test(tc, orders_differ);
  tcase_add_test(tc, unmatched_devices);
  tcase_add_test(tc, duplicates_refused);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
