// The compute gate on its own: each rank's vote, and holding and releasing responses in
// order.
#include <gtest/gtest.h>

#include <thread>

#include "comm/compute_gate.h"

namespace cohort::comm {
namespace {

std::vector<Response> responses(std::initializer_list<const char*> names) {
  std::vector<Response> out;
  for (const char* n : names) {
    Response r;
    r.name = n;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::string> names(const std::vector<Response>& rs) {
  std::vector<std::string> out;
  for (const Response& r : rs) out.push_back(r.name);
  return out;
}

TEST(CommComputeGate, ARankVotesToHoldOnlyWhileItComputesAndNobodyWaits) {
  ComputeGate off(false);
  off.begin();
  EXPECT_TRUE(off.releases()) << "without hold_during_compute nothing is held";

  ComputeGate gate(true);
  EXPECT_TRUE(gate.releases());
  gate.begin();
  gate.begin();  // brackets nest
  EXPECT_FALSE(gate.releases());
  ++gate.waits()->blocked;  // compute waits for a collective: it must run
  EXPECT_TRUE(gate.releases());
  --gate.waits()->blocked;
  EXPECT_FALSE(gate.end()) << "an inner bracket closed";
  EXPECT_TRUE(gate.computing());
  EXPECT_TRUE(gate.end()) << "the outermost bracket closed";
  EXPECT_FALSE(gate.computing());
  EXPECT_TRUE(gate.releases());
  EXPECT_FALSE(gate.end()) << "an unmatched end is ignored";
}

TEST(CommComputeGate, HeldResponsesRunFirstAndInOrderOnRelease) {
  ComputeGate gate(true);
  gate.begin();
  std::vector<Response> ready = responses({"a", "b"});
  gate.admit(ready, false);
  EXPECT_TRUE(ready.empty());
  EXPECT_FALSE(gate.release_pending()) << "compute still runs here";
  ready = responses({"c"});
  gate.admit(ready, false);
  gate.end();
  EXPECT_TRUE(gate.release_pending());
  ready = responses({"d"});
  gate.admit(ready, true);
  EXPECT_EQ(names(ready), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_FALSE(gate.release_pending());
  ready = responses({"e"});
  gate.admit(ready, true);
  EXPECT_EQ(names(ready), std::vector<std::string>{"e"});
}

TEST(CommComputeGate, BracketsFromManyThreadsBalance) {
  ComputeGate gate(true);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        gate.begin();
        gate.end();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(gate.computing());
  EXPECT_TRUE(gate.releases());
}

}  // namespace
}  // namespace cohort::comm
