// The tiers the conformance suite runs against. Each backend adds one row to the table in
// tier_cases.cc; every test in tier_conformance_test.cc then runs on it.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "kvtier/tier.h"

namespace kvtier::testing {

struct TierCase {
  std::string name;  // a gtest parameter name: letters, digits and underscores
  // The tier's URL inside a fresh, empty temporary directory owned by the test (removed afterwards).
  // Capacity is given in bytes; a case must honour it (rounding to its own granularity is allowed).
  std::function<std::string(const std::string& dir, uint64_t capacity)> url;
  // Damages the stored bytes of `id` behind the tier's back; empty when the tier cannot be damaged
  // from outside (the corruption tests are then skipped).
  std::function<Status(Tier& tier, const std::string& dir, const ChunkId& id)> corrupt;
};

// Every registered case. Restart tests run only where capabilities().persistent.
const std::vector<TierCase>& TierCases();

// Names the case in test output (instead of a byte dump of the struct).
inline void PrintTo(const TierCase& c, std::ostream* os) { *os << c.name; }

}  // namespace kvtier::testing
