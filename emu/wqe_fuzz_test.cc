// Runs both stages of the fuzz target over a fixed set of generated inputs on every test run (the libFuzzer
// build in run_wqe_fuzzer.sh explores further). The target aborts on any undefined status or
// CQE; ASan/UBSan builds of this test catch memory errors.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace xpufab {
namespace emu {
int fuzz_decode(const uint8_t* data, size_t size);
int fuzz_one(const uint8_t* data, size_t size);
}  // namespace emu
}  // namespace xpufab

namespace {

TEST(WqeFuzz, GeneratedInputs) {
  uint64_t s = 0x1234567;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  std::vector<uint8_t> in;
  for (int i = 0; i < 1500; ++i) {
    in.resize(next() % 700);
    for (uint8_t& b : in) b = static_cast<uint8_t>(next());
    EXPECT_EQ(xpufab::emu::fuzz_decode(in.data(), in.size()), 0);
    EXPECT_EQ(xpufab::emu::fuzz_one(in.data(), in.size()), 0);
  }
}

}  // namespace
