// prom_check: reads a Prometheus text exposition on stdin and checks it with the strict parser of
// prom_parser.h. Exit 0 and "ok: N families" when it parses; exit 1 and the rule broken otherwise.
// Lets the Python and C tests check kvtier's metrics text with the same rules as the C++ tests.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "metrics/prom_parser.h"

int main() {
  const std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  auto parsed = kvtier::testing::ParsePrometheusText(text);
  if (!parsed.ok()) {
    std::fprintf(stderr, "prom_check: %s\n", parsed.status().ToString().c_str());
    return 1;
  }
  std::printf("ok: %zu families\n", parsed->families.size());
  return 0;
}
