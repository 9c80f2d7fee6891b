// Compares every row of the 1.17 table with ours and names each mismatch.
#include <cstring>
#include <string>

#include "api/abi/abi_table.h"
#include "gtest/gtest.h"

namespace {

TEST(AbiCompare, TablesHaveTheSameRows) {
  size_t n_sys = 0, n_ours = 0;
  const abi_entry* sys = abi_table_system(&n_sys);
  const abi_entry* ours = abi_table_ours(&n_ours);
  ASSERT_EQ(n_sys, n_ours);
  // Broad coverage is the point of the check; a shrinking list is a bug.
  EXPECT_GT(n_sys, 800u);
  for (size_t i = 0; i < n_sys; ++i) {
    ASSERT_STREQ(sys[i].name, ours[i].name) << "row " << i;
  }
}

TEST(AbiCompare, EveryRowMatchesLibfabric117) {
  size_t n_sys = 0, n_ours = 0;
  const abi_entry* sys = abi_table_system(&n_sys);
  const abi_entry* ours = abi_table_ours(&n_ours);
  ASSERT_EQ(n_sys, n_ours);
  size_t diffs = 0;
  for (size_t i = 0; i < n_sys; ++i) {
    if (sys[i].value != ours[i].value) {
      ++diffs;
      ADD_FAILURE() << sys[i].name << ": libfabric 1.17 " << sys[i].value
                    << ", ours " << ours[i].value;
    }
  }
  EXPECT_EQ(diffs, 0u);
}

}  // namespace
